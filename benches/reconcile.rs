//! Reconciler benchmark (figures, not a test). In one run against the local control plane and the
//! fixture file server, with the real `pallet agent` binary:
//!
//! 1. one BundleDeployment of 500 ConfigMaps: `kubectl apply` of the BD until `Ready=True`, against
//!    `kubectl apply --server-side` of the same 500 objects into a fresh namespace;
//! 2. 100 BundleDeployments of 10 ConfigMaps each until all are Ready, against 100 server-side
//!    kubectl applies (one per bundle) and against one kubectl apply of all 1,000 objects;
//! 3. steady state with pinned sources (http + `sha256`) and `--requeue-interval 10s`: the agent's
//!    writes (change log, resourceVersions of the bundle objects and BDs) and source fetches (the
//!    fixture server's counters) during `PALLET_BENCH_STEADY_SECONDS` (default 300);
//! 4. the agent's peak RSS (`VmHWM`).
//!
//! Needs `tools/controlplane.sh start` and `tools/fixtures.sh start`, then
//! `cargo bench --bench reconcile` (cargo builds the `pallet` binary in the bench profile with it).
//! Everything it creates carries a unique `pallet.dev/test` label and is deleted at the end.

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "../tests/support/cluster.rs"]
mod cluster;

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{line_count, proc_status, ratio, secs, wait_all_ready, wait_gone, AgentProc};
use kube::api::Api;
use pallet::api::BundleDeployment;
use sha2::{Digest, Sha256};
use support::Fixtures;

const TEST_LABEL: &str = "pallet.dev/test";
const BIG_OBJECTS: usize = 500;
const MANY_BUNDLES: usize = 100;
const MANY_OBJECTS: usize = 10;
const REQUEUE_INTERVAL: &str = "10s";
/// Generous: the machine is shared, and a deadline only stops a run that will never finish.
const READY_DEADLINE: Duration = Duration::from_secs(900);

/// Runs kubectl against the local control plane; panics with its stderr when it fails.
fn kubectl(args: &[&str]) -> String {
    common::kubectl_with(&cluster::kubeconfig_path(), args)
}

fn timed_kubectl(args: &[&str]) -> Duration {
    let start = Instant::now();
    kubectl(args);
    start.elapsed()
}

/// `n` ConfigMaps named `<prefix>-NNNN` with no namespace (the BD's installNamespace or kubectl's
/// `-n` places them), each with a few hundred bytes of data, like a small real config.
fn configmaps(prefix: &str, n: usize) -> String {
    let mut out = String::new();
    for i in 0..n {
        out.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {prefix}-{i:04}\n  labels:\n    app: bench\ndata:\n"
        ));
        for k in 0..4 {
            out.push_str(&format!(
                "  key{k}: \"value {k} of {prefix}-{i:04}: {}\"\n",
                "x".repeat(48)
            ));
        }
    }
    out
}

fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn bd_yaml(name: &str, run: &str, namespace: &str, url: &str, sha256: &str) -> String {
    format!(
        "---\napiVersion: pallet.dev/v1alpha1\nkind: BundleDeployment\nmetadata:\n  name: {name}\n  labels:\n    {TEST_LABEL}: {run}\nspec:\n  installNamespace: {namespace}\n  sources:\n  - kind: http\n    http:\n      url: {url}\n      sha256: {sha256}\n  format: plain\n"
    )
}

/// resourceVersion of every object of `kind` labelled `selector` in `namespace` (all when None).
fn resource_versions(
    kind: &str,
    namespace: Option<&str>,
    selector: &str,
) -> BTreeMap<String, String> {
    let mut args = vec!["get", kind, "-l", selector, "-o", "json"];
    if let Some(ns) = namespace {
        args.extend(["-n", ns]);
    }
    let list: serde_json::Value = serde_json::from_str(&kubectl(&args)).expect("kubectl json");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            let m = &o["metadata"];
            (
                format!(
                    "{}/{}",
                    m["namespace"].as_str().unwrap_or(""),
                    m["name"].as_str().unwrap_or("")
                ),
                m["resourceVersion"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn changed(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> usize {
    let keys: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .count()
}

/// Sum of `apiserver_request_total` for the write verbs, by resource. The metric has no
/// user-agent label, and the control plane is shared, so this counts every client's writes.
fn apiserver_writes() -> BTreeMap<String, f64> {
    let text = kubectl(&["get", "--raw", "/metrics"]);
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let Some((labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let label = |name: &str| {
            let key = format!("{name}=\"");
            labels
                .split(&key)
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or("")
                .to_string()
        };
        if !["POST", "PUT", "PATCH", "APPLY", "DELETE"].contains(&label("verb").as_str()) {
            continue;
        }
        let resource = match label("subresource").as_str() {
            "" => label("resource"),
            sub => format!("{}/{sub}", label("resource")),
        };
        *out.entry(resource).or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
    }
    out
}

/// Reconciles finished, counted from the agent's debug log.
fn reconciles(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .map(|t| t.lines().filter(|l| l.contains("reconciled")).count())
        .unwrap_or(0)
}

#[tokio::main]
async fn main() {
    let fx = Fixtures::load();
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let steady_seconds: u64 = std::env::var("PALLET_BENCH_STEADY_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);

    let run = cluster::unique_name("rbench");
    let selector = format!("{TEST_LABEL}={run}");
    let work = tempfile::tempdir().expect("temp dir");
    let http = fx.http_plain();

    // ---- the bundles: served by the fixture file server, pinned by sha256 ----
    let big_yaml = configmaps("big", BIG_OBJECTS);
    let big_path = fx.put_file(&format!("{run}/big.yaml"), big_yaml.as_bytes());
    let big_file = work.path().join("big.yaml");
    std::fs::write(&big_file, &big_yaml).unwrap();
    let many_ns = format!("{run}-many");
    let mut many_bds = String::new();
    let mut many_files = Vec::new();
    let mut many_all = String::new();
    for b in 0..MANY_BUNDLES {
        let yaml = configmaps(&format!("b{b:03}"), MANY_OBJECTS);
        let path = fx.put_file(&format!("{run}/b{b:03}.yaml"), yaml.as_bytes());
        many_bds.push_str(&bd_yaml(
            &format!("{run}-b{b:03}"),
            &run,
            &many_ns,
            &format!("{}{path}", http.url),
            &sha256_hex(yaml.as_bytes()),
        ));
        let file = work.path().join(format!("b{b:03}.yaml"));
        std::fs::write(&file, &yaml).unwrap();
        many_files.push(file);
        many_all.push_str(&yaml);
    }
    let many_all_file = work.path().join("many-all.yaml");
    std::fs::write(&many_all_file, &many_all).unwrap();
    let many_bds_file = work.path().join("many-bds.yaml");
    std::fs::write(&many_bds_file, &many_bds).unwrap();
    let big_ns = format!("{run}-big");
    let big_bd_file = work.path().join("big-bd.yaml");
    std::fs::write(
        &big_bd_file,
        bd_yaml(
            &format!("{run}-big"),
            &run,
            &big_ns,
            &format!("{}{big_path}", http.url),
            &sha256_hex(big_yaml.as_bytes()),
        ),
    )
    .unwrap();

    // ---- the agent ----
    let log = work.path().join("agent.log");
    let changes = work.path().join("changes.jsonl");
    let child = Command::new(env!("CARGO_BIN_EXE_pallet"))
        .args([
            "agent",
            "--namespace",
            "pallet-system",
            "--requeue-interval",
            REQUEUE_INTERVAL,
        ])
        .arg("--kubeconfig")
        .arg(cluster::kubeconfig_path())
        .arg("--cache-dir")
        .arg(work.path().join("cache"))
        .arg("--change-log")
        .arg(&changes)
        .arg("--selector")
        .arg(&selector)
        // The fixture servers are on 127.0.0.1.
        .arg("--allow-loopback-egress")
        // Any free port: the demo agent of tools/up.sh may hold the default one.
        .args(["--metrics-addr", "127.0.0.1:0"])
        // debug: one "reconciled" line per reconcile, to show how often it ran.
        .env("RUST_LOG", "info,pallet=debug")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("starting the pallet agent");
    let agent = AgentProc {
        child,
        log,
        changes,
    };
    let pid = agent.child.id();
    // Let it list and start its watches before the clock starts.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let kube_ns = |suffix: &str| format!("{run}-{suffix}");

    // ---- 1. one bundle of 500 objects ----
    eprintln!("[1] one BundleDeployment of {BIG_OBJECTS} ConfigMaps ...");
    let start = Instant::now();
    kubectl(&["apply", "-f", big_bd_file.to_str().unwrap()]);
    wait_all_ready(&bds, &selector, 1, READY_DEADLINE).await;
    let agent_big = start.elapsed();
    // Ready must mean the objects are there: count them, and the agent's creates.
    let big_count = resource_versions("configmaps", Some(&big_ns), "app=bench").len();
    assert_eq!(big_count, BIG_OBJECTS, "ConfigMaps in {big_ns} once Ready");
    let big_writes = line_count(&agent.changes);
    let ns_big_kubectl = kube_ns("k-big");
    kubectl(&["create", "namespace", &ns_big_kubectl]);
    let kubectl_big = timed_kubectl(&[
        "apply",
        "--server-side",
        "--field-manager=bench",
        "-n",
        &ns_big_kubectl,
        "-f",
        big_file.to_str().unwrap(),
    ]);

    // ---- 2. 100 bundles of 10 objects ----
    eprintln!("[2] {MANY_BUNDLES} BundleDeployments of {MANY_OBJECTS} ConfigMaps ...");
    let start = Instant::now();
    kubectl(&["apply", "-f", many_bds_file.to_str().unwrap()]);
    wait_all_ready(&bds, &selector, MANY_BUNDLES + 1, READY_DEADLINE).await;
    let agent_many = start.elapsed();
    let many_count = resource_versions("configmaps", Some(&many_ns), "app=bench").len();
    assert_eq!(
        many_count,
        MANY_BUNDLES * MANY_OBJECTS,
        "ConfigMaps in {many_ns} once all Ready"
    );
    let many_writes = line_count(&agent.changes) - big_writes;
    let ns_each = kube_ns("k-each");
    kubectl(&["create", "namespace", &ns_each]);
    let start = Instant::now();
    for file in &many_files {
        kubectl(&[
            "apply",
            "--server-side",
            "--field-manager=bench",
            "-n",
            &ns_each,
            "-f",
            file.to_str().unwrap(),
        ]);
    }
    let kubectl_each = start.elapsed();
    let ns_all = kube_ns("k-all");
    kubectl(&["create", "namespace", &ns_all]);
    let kubectl_all = timed_kubectl(&[
        "apply",
        "--server-side",
        "--field-manager=bench",
        "-n",
        &ns_all,
        "-f",
        many_all_file.to_str().unwrap(),
    ]);

    // ---- 3. steady state ----
    eprintln!("[3] steady state for {steady_seconds} s (requeue every {REQUEUE_INTERVAL}) ...");
    // The bundle objects carry pallet's label with the BD name, which starts with `run`; select
    // them by namespace instead (both namespaces hold only the agent's objects).
    let objects = |ns: &str| resource_versions("configmaps", Some(ns), "app=bench");
    let fetch_prefix = format!("/{run}/");
    let fetch_filter = [
        ("server", http.name.as_str()),
        ("prefix", fetch_prefix.as_str()),
    ];
    let fetches_before = fx.stats(&fetch_filter).await.total;
    let changes_before = line_count(&agent.changes);
    let reconciles_before = reconciles(&agent.log);
    let big_before = objects(&big_ns);
    let many_before = objects(&many_ns);
    let bds_before = resource_versions("bundledeployments", None, &selector);
    let api_before = apiserver_writes();
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(steady_seconds)).await;
    let window = start.elapsed();
    let api_after = apiserver_writes();
    let fetches_after = fx.stats(&fetch_filter).await.total;
    let changes_after = line_count(&agent.changes);
    let reconciles_after = reconciles(&agent.log);
    let big_after = objects(&big_ns);
    let many_after = objects(&many_ns);
    let bds_after = resource_versions("bundledeployments", None, &selector);
    let objects_changed = changed(&big_before, &big_after) + changed(&many_before, &many_after);
    let bds_changed = changed(&bds_before, &bds_after);
    let api_delta: BTreeMap<&String, f64> = api_after
        .iter()
        .map(|(k, v)| (k, v - api_before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .collect();

    // ---- 4. peak RSS, before cleanup (deletion is not what is measured) ----
    let hwm = proc_status(pid, "VmHWM:");
    let rss = proc_status(pid, "VmRSS:");

    // ---- cleanup (the agent must run: the BDs carry its finalizer) ----
    eprintln!("cleaning up ...");
    let start = Instant::now();
    kubectl(&[
        "delete",
        "bundledeployments",
        "-l",
        &selector,
        "--wait=false",
    ]);
    wait_gone(&bds, &selector, READY_DEADLINE).await;
    let delete_time = start.elapsed();
    drop(agent);
    kubectl(&[
        "delete",
        "namespace",
        &big_ns,
        &many_ns,
        &ns_big_kubectl,
        &ns_each,
        &ns_all,
        "--wait=false",
    ]);
    let _ = std::fs::remove_dir_all(fx.files_root().join(&run));

    // ---- report ----
    println!();
    println!("reconcile benchmark  run={run}");
    println!("{}", common::machine());
    println!(
        "agent: release build, defaults (--concurrency auto, --apply-parallelism 8), --requeue-interval {REQUEUE_INTERVAL}; sources: http file server, pinned by sha256"
    );
    println!();
    println!("{:<58} {:>10} {:>10}", "scenario", "time", "agent/x");
    println!(
        "{:<58} {:>10}",
        format!("1. agent: 1 BD x {BIG_OBJECTS} ConfigMaps, apply -> Ready"),
        secs(agent_big)
    );
    println!("   (agent change-log entries during install: {big_writes})");
    println!(
        "{:<58} {:>10} {:>10}",
        format!("   kubectl apply --server-side, {BIG_OBJECTS} objects"),
        secs(kubectl_big),
        ratio(agent_big, kubectl_big)
    );
    println!(
        "{:<58} {:>10}",
        format!("2. agent: {MANY_BUNDLES} BDs x {MANY_OBJECTS} ConfigMaps, apply -> all Ready"),
        secs(agent_many)
    );
    println!("   (agent change-log entries during install: {many_writes})");
    println!(
        "{:<58} {:>10} {:>10}",
        format!("   kubectl --server-side, {MANY_BUNDLES} invocations (1/bundle)"),
        secs(kubectl_each),
        ratio(agent_many, kubectl_each)
    );
    println!(
        "{:<58} {:>10} {:>10}",
        format!(
            "   kubectl --server-side, 1 invocation, {} objects",
            MANY_BUNDLES * MANY_OBJECTS
        ),
        secs(kubectl_all),
        ratio(agent_many, kubectl_all)
    );
    println!(
        "{:<58} {:>10}",
        format!("   cleanup: delete {} BDs until gone", MANY_BUNDLES + 1),
        secs(delete_time)
    );
    println!();
    println!(
        "3. steady state, {} window, {} BDs, {} objects:",
        secs(window),
        bds_before.len(),
        big_before.len() + many_before.len()
    );
    println!(
        "   reconciles completed (agent log)          {}",
        reconciles_after - reconciles_before
    );
    println!(
        "   agent writes (change-log entries)         {}",
        changes_after - changes_before
    );
    println!("   bundle objects whose resourceVersion moved {objects_changed}");
    println!("   BDs whose resourceVersion moved (status)   {bds_changed}");
    println!(
        "   source fetches (fixture counters)         {}",
        fetches_after - fetches_before
    );
    println!(
        "   apiserver writes, ALL clients (shared control plane, not only the agent): {}",
        if api_delta.is_empty() {
            "none".to_string()
        } else {
            api_delta
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    println!();
    println!("4. agent peak RSS (VmHWM) {hwm}; RSS at the end of the window {rss}");
}
