//! The web view with many BundleDeployments (figures, not a test). In one run against the local
//! control plane, with the real `pallet ui` binary and headless Chromium:
//!
//! 1. 1,000, then 10,000 BundleDeployments (status written directly, as an agent would: no
//!    agent runs) carrying the label `pallet.dev/test=ui-bench`;
//! 2. at each size, a fresh `pallet ui`: how long until its index has listed them all, the
//!    overview's first page in the browser (navigation start to the load event, median of
//!    `PALLET_BENCH_UI_LOADS` loads, default 7), a filtered and a searched page, and the
//!    server's peak RSS (`VmHWM`) after those loads, with the ratio 10,000 : 1,000.
//!
//! Needs `tools/controlplane.sh start`, then `cargo bench --bench ui`. The BundleDeployments are
//! deleted at the end.

#[path = "../tests/support/cluster.rs"]
mod cluster;

#[path = "../tests/support/browser.rs"]
mod browser;

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use pallet::api::BundleDeployment;
use serde_json::{json, Value};

const LABEL: &str = "pallet.dev/test=ui-bench";
const SIZES: [usize; 2] = [1_000, 10_000];
/// Writes in flight while creating the BundleDeployments.
const CREATE_CONCURRENCY: usize = 32;

fn name(i: usize) -> String {
    format!("ui-bench-{i:05}")
}

/// A status as an agent writes it: conditions, one revision with its source, a small inventory.
fn status(i: usize) -> Value {
    let (ready, reason, message) = match i % 20 {
        0 => (
            "False",
            "ProgressDeadlineExceeded",
            "revision 2 failed: Deployment web/web: pod web-1: container web CrashLoopBackOff",
        ),
        1 => (
            "False",
            "Progressing",
            "revision 2 progressing: Deployment web/web: 0 of 1 updated replicas available",
        ),
        _ => ("True", "Healthy", "revision 1 healthy: 3 objects installed"),
    };
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1})
    };
    json!({
        "observedGeneration": 1,
        "activeRevision": 1,
        "lastHealthyRevision": 1,
        "conditions": [
            condition("Ready", ready, reason, message),
            condition("Installed", "True", "Installed", "revision 1: 3 objects, sha256:3071aa49"),
            condition("Unpacked", "True", "Unpacked", "every source resolved"),
        ],
        "revisions": [{"number": 1, "generation": 1, "digest": format!("sha256:{i:064x}"), "phase": "Healthy", "objects": 3,
                       "appliedAt": "2026-01-01T00:00:00Z", "healthyAt": "2026-01-01T00:00:30Z",
                       "sources": [{"kind": "git", "ref": "main", "resolved": format!("{i:040x}")}]}],
        "inventory": {"count": 3, "objects": [
            {"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "app", "name": format!("app-{i}")},
            {"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "app", "name": format!("web-{i}")},
            {"group": "", "version": "v1", "kind": "Service", "namespace": "app", "name": format!("web-{i}")}]},
    })
}

/// Creates bench BundleDeployments `from..to` with their status.
async fn create(api: &Api<BundleDeployment>, from: usize, to: usize) {
    futures::stream::iter(from..to)
        .map(|i| {
            let api = api.clone();
            async move {
                let name = name(i);
                let team = ["payments", "search", "web", "data"][i % 4];
                let bd = json!({
                    "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
                    "metadata": {"name": name, "labels": {"pallet.dev/test": "ui-bench", "team": team}},
                    "spec": {"format": "plain", "installNamespace": "app",
                             "sources": [{"kind": "git", "git": {"repository": format!("https://git.invalid/{name}.git"), "ref": {"branch": "main"}}}]},
                });
                let params = PatchParams::apply(cluster::TEST_FIELD_MANAGER).force();
                api.patch(&name, &params, &Patch::Apply(&bd)).await.expect("create");
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({"status": status(i)})))
                    .await
                    .expect("status");
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
}

/// The page's load, from navigation start to the end of the load event, in milliseconds.
async fn load_ms(browser: &browser::Browser, url: &str) -> f64 {
    browser.open(url).await;
    let timing = browser
        .js("const n = performance.getEntriesByType('navigation')[0]; return [n.responseEnd, n.domContentLoadedEventEnd, n.loadEventEnd];")
        .await;
    timing[2].as_f64().unwrap_or(f64::NAN)
}

async fn measure(size: usize, loads: usize) -> (f64, f64, f64, f64, f64) {
    let view =
        browser::View::start(&["--kubeconfig", cluster::kubeconfig_path().to_str().unwrap()]);
    let pid = view.pid();
    let browser = browser::Browser::start(1280, 900).await;
    browser.open(&view.login).await;
    // Listed once the overview counts them all.
    let start = Instant::now();
    let want = format!("{size} of ");
    loop {
        browser
            .open(&format!("{}/?label=pallet.dev/test%3Dui-bench", view.base))
            .await;
        if browser.main_text().await.contains(&want) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "the index never listed {size}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let synced = start.elapsed().as_secs_f64();
    let mut first = Vec::new();
    let mut filtered = Vec::new();
    let mut searched = Vec::new();
    for _ in 0..loads {
        first.push(load_ms(&browser, &format!("{}/", view.base)).await);
        filtered.push(
            load_ms(
                &browser,
                &format!("{}/?state=Failed&label=team%3Dweb", view.base),
            )
            .await,
        );
        searched.push(load_ms(&browser, &format!("{}/?q=crashloop+ui-bench-0", view.base)).await);
    }
    let peak = common::proc_mib(pid, "VmHWM:");
    (
        synced,
        common::median(first),
        common::median(filtered),
        common::median(searched),
        peak,
    )
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = cluster::client().await;
        cluster::install_crd(&client).await;
        let api: Api<BundleDeployment> = Api::all(client.clone());
        let loads: usize = std::env::var("PALLET_BENCH_UI_LOADS").ok().and_then(|v| v.parse().ok()).unwrap_or(7);
        println!("{}", common::machine());
        let mut created = 0;
        let mut rows = Vec::new();
        for size in SIZES {
            let start = Instant::now();
            create(&api, created, size).await;
            created = size;
            println!("created {size} BundleDeployments with status in {:.1} s", start.elapsed().as_secs_f64());
            let figures = measure(size, loads).await;
            println!(
                "{size:>6} BundleDeployments: index listed in {:.2} s; overview first page {:.0} ms, filtered {:.0} ms, searched {:.0} ms (median of {loads}); server peak RSS {:.1} MiB",
                figures.0, figures.1, figures.2, figures.3, figures.4
            );
            rows.push((size, figures));
        }
        let (small, large) = (&rows[0].1, &rows[1].1);
        println!(
            "10,000 : 1,000 — first page {:.2}x, peak RSS {:.2}x ({:.1} MiB : {:.1} MiB)",
            large.1 / small.1,
            large.4 / small.4,
            large.4,
            small.4
        );
        let delete = api.delete_collection(&DeleteParams::default(), &ListParams::default().labels(LABEL)).await;
        if let Err(e) = delete {
            eprintln!("deleting the bench BundleDeployments: {e}");
        }
    });
}
