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
//! `PALLET_BENCH_BASELINE_BIN=PATH` also runs 1 to 4 with the agent binary at PATH (another
//! build, such as the one a change started from), first, with bundles and namespaces of its
//! own, and prints both side by side: times, the agent's API requests (its
//! `pallet_api_requests_total`), change-log entries, steady-state writes, and peak RSS.
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
use std::path::{Path, PathBuf};
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

/// The bundles of one agent's run, served by the fixture file server and pinned by sha256, and
/// their BundleDeployments, all labelled with `run`.
struct Bundles {
    run: String,
    selector: String,
    big_file: PathBuf,
    big_bd_file: PathBuf,
    big_ns: String,
    many_files: Vec<PathBuf>,
    many_all_file: PathBuf,
    many_bds_file: PathBuf,
    many_ns: String,
}

impl Bundles {
    fn new(fx: &Fixtures, work: &Path, run: &str) -> Bundles {
        let http = fx.http_plain();
        let dir = work.join(run);
        std::fs::create_dir_all(&dir).unwrap();
        let big_yaml = configmaps("big", BIG_OBJECTS);
        let big_path = fx.put_file(&format!("{run}/big.yaml"), big_yaml.as_bytes());
        let big_file = dir.join("big.yaml");
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
                run,
                &many_ns,
                &format!("{}{path}", http.url),
                &sha256_hex(yaml.as_bytes()),
            ));
            let file = dir.join(format!("b{b:03}.yaml"));
            std::fs::write(&file, &yaml).unwrap();
            many_files.push(file);
            many_all.push_str(&yaml);
        }
        let many_all_file = dir.join("many-all.yaml");
        std::fs::write(&many_all_file, &many_all).unwrap();
        let many_bds_file = dir.join("many-bds.yaml");
        std::fs::write(&many_bds_file, &many_bds).unwrap();
        let big_ns = format!("{run}-big");
        let big_bd_file = dir.join("big-bd.yaml");
        std::fs::write(
            &big_bd_file,
            bd_yaml(
                &format!("{run}-big"),
                run,
                &big_ns,
                &format!("{}{big_path}", http.url),
                &sha256_hex(big_yaml.as_bytes()),
            ),
        )
        .unwrap();
        Bundles {
            run: run.to_string(),
            selector: format!("{TEST_LABEL}={run}"),
            big_file,
            big_bd_file,
            big_ns,
            many_files,
            many_all_file,
            many_bds_file,
            many_ns,
        }
    }
}

/// What one agent binary did in 1 to 4.
struct Figures {
    agent_big: Duration,
    big_writes: usize,
    big_requests: f64,
    agent_many: Duration,
    many_writes: usize,
    many_requests: f64,
    steady: Steady,
    delete_time: Duration,
    hwm: String,
    rss: String,
}

/// The steady-state window's figures.
struct Steady {
    window: Duration,
    bds: usize,
    objects: usize,
    reconciles: usize,
    writes: usize,
    objects_changed: usize,
    bds_changed: usize,
    fetches: usize,
    requests: f64,
    api_delta: BTreeMap<String, f64>,
}

/// The agent's API requests so far (`pallet_api_requests_total`, every verb and resource).
async fn agent_requests(metrics_url: &str) -> f64 {
    common::scrape(metrics_url)
        .await
        .iter()
        .filter(|(name, _)| name.starts_with("pallet_api_requests_total"))
        .map(|(_, value)| value)
        .sum()
}

/// Starts the agent binary `bin` for `bundles`; its process and its metrics URL.
async fn start_agent(bin: &Path, work: &Path, bundles: &Bundles) -> (AgentProc, String) {
    let log = work.join(format!("{}-agent.log", bundles.run));
    let changes = work.join(format!("{}-changes.jsonl", bundles.run));
    let port = common::free_port();
    let child = Command::new(bin)
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
        .arg(work.join(format!("{}-cache", bundles.run)))
        .arg("--change-log")
        .arg(&changes)
        .arg("--selector")
        .arg(&bundles.selector)
        // The fixture servers are on 127.0.0.1.
        .arg("--allow-loopback-egress")
        // A port of its own: the demo agent of tools/up.sh may hold the default one.
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
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
    common::wait_agent_ready(port).await;
    (agent, format!("http://127.0.0.1:{port}/metrics"))
}

/// Runs 1 to 4 with the agent binary `bin` on `bundles`, then deletes what it made.
async fn measure(
    fx: &Fixtures,
    bds: &Api<BundleDeployment>,
    (bin, work): (&Path, &Path),
    bundles: &Bundles,
    steady_seconds: u64,
) -> Figures {
    let (agent, metrics_url) = start_agent(bin, work, bundles).await;
    let pid = agent.child.id();
    let selector = &bundles.selector;
    let requests_start = agent_requests(&metrics_url).await;

    // ---- 1. one bundle of 500 objects ----
    eprintln!("[1] one BundleDeployment of {BIG_OBJECTS} ConfigMaps ...");
    let start = Instant::now();
    kubectl(&["apply", "-f", bundles.big_bd_file.to_str().unwrap()]);
    wait_all_ready(bds, selector, 1, READY_DEADLINE).await;
    let agent_big = start.elapsed();
    // Ready must mean the objects are there: count them, and the agent's creates.
    let big_count = resource_versions("configmaps", Some(&bundles.big_ns), "app=bench").len();
    assert_eq!(
        big_count, BIG_OBJECTS,
        "ConfigMaps in {} once Ready",
        bundles.big_ns
    );
    let big_writes = line_count(&agent.changes);
    let requests_big = agent_requests(&metrics_url).await;

    // ---- 2. 100 bundles of 10 objects ----
    eprintln!("[2] {MANY_BUNDLES} BundleDeployments of {MANY_OBJECTS} ConfigMaps ...");
    let start = Instant::now();
    kubectl(&["apply", "-f", bundles.many_bds_file.to_str().unwrap()]);
    wait_all_ready(bds, selector, MANY_BUNDLES + 1, READY_DEADLINE).await;
    let agent_many = start.elapsed();
    let many_count = resource_versions("configmaps", Some(&bundles.many_ns), "app=bench").len();
    assert_eq!(
        many_count,
        MANY_BUNDLES * MANY_OBJECTS,
        "ConfigMaps in {} once all Ready",
        bundles.many_ns
    );
    let many_writes = line_count(&agent.changes) - big_writes;
    let requests_many = agent_requests(&metrics_url).await;

    // ---- 3. steady state ----
    let steady = steady_state(fx, &agent, &metrics_url, bundles, steady_seconds).await;

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
        selector,
        "--wait=false",
    ]);
    wait_gone(bds, selector, READY_DEADLINE).await;
    let delete_time = start.elapsed();
    drop(agent);
    kubectl(&[
        "delete",
        "namespace",
        &bundles.big_ns,
        &bundles.many_ns,
        "--wait=false",
    ]);
    let _ = std::fs::remove_dir_all(fx.files_root().join(&bundles.run));
    Figures {
        agent_big,
        big_writes,
        big_requests: requests_big - requests_start,
        agent_many,
        many_writes,
        many_requests: requests_many - requests_big,
        steady,
        delete_time,
        hwm,
        rss,
    }
}

/// 3: `seconds` with nothing to do: what the agent reads, writes and fetches meanwhile.
async fn steady_state(
    fx: &Fixtures,
    agent: &AgentProc,
    metrics_url: &str,
    bundles: &Bundles,
    seconds: u64,
) -> Steady {
    eprintln!("[3] steady state for {seconds} s (requeue every {REQUEUE_INTERVAL}) ...");
    let http = fx.http_plain();
    // The bundle objects carry pallet's label with the BD name, which starts with `run`; select
    // them by namespace instead (both namespaces hold only the agent's objects).
    let objects = |ns: &str| resource_versions("configmaps", Some(ns), "app=bench");
    let fetch_prefix = format!("/{}/", bundles.run);
    let fetch_filter = [
        ("server", http.name.as_str()),
        ("prefix", fetch_prefix.as_str()),
    ];
    let fetches_before = fx.stats(&fetch_filter).await.total;
    let changes_before = line_count(&agent.changes);
    let reconciles_before = reconciles(&agent.log);
    let big_before = objects(&bundles.big_ns);
    let many_before = objects(&bundles.many_ns);
    let bds_before = resource_versions("bundledeployments", None, &bundles.selector);
    let api_before = apiserver_writes();
    let requests_before = agent_requests(metrics_url).await;
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let window = start.elapsed();
    let requests_after = agent_requests(metrics_url).await;
    let api_after = apiserver_writes();
    let big_after = objects(&bundles.big_ns);
    let many_after = objects(&bundles.many_ns);
    let bds_after = resource_versions("bundledeployments", None, &bundles.selector);
    Steady {
        window,
        bds: bds_before.len(),
        objects: big_before.len() + many_before.len(),
        reconciles: reconciles(&agent.log) - reconciles_before,
        writes: line_count(&agent.changes) - changes_before,
        objects_changed: changed(&big_before, &big_after) + changed(&many_before, &many_after),
        bds_changed: changed(&bds_before, &bds_after),
        fetches: fx.stats(&fetch_filter).await.total - fetches_before,
        requests: requests_after - requests_before,
        api_delta: api_after
            .iter()
            .map(|(k, v)| (k.clone(), v - api_before.get(k).copied().unwrap_or(0.0)))
            .filter(|(_, d)| *d > 0.0)
            .collect(),
    }
}

/// kubectl's floors for the same objects: one apply of the big bundle, one apply per small
/// bundle, and one apply of all small bundles' objects, each into a fresh namespace.
fn kubectl_floors(bundles: &Bundles) -> (Duration, Duration, Duration) {
    let kube_ns = |suffix: &str| format!("{}-{suffix}", bundles.run);
    let apply = |ns: &str, file: &Path| {
        timed_kubectl(&[
            "apply",
            "--server-side",
            "--field-manager=bench",
            "-n",
            ns,
            "-f",
            file.to_str().unwrap(),
        ])
    };
    let (ns_big, ns_each, ns_all) = (kube_ns("k-big"), kube_ns("k-each"), kube_ns("k-all"));
    for ns in [&ns_big, &ns_each, &ns_all] {
        kubectl(&["create", "namespace", ns]);
    }
    let kubectl_big = apply(&ns_big, &bundles.big_file);
    let start = Instant::now();
    for file in &bundles.many_files {
        apply(&ns_each, file);
    }
    let kubectl_each = start.elapsed();
    let kubectl_all = apply(&ns_all, &bundles.many_all_file);
    kubectl(&[
        "delete",
        "namespace",
        &ns_big,
        &ns_each,
        &ns_all,
        "--wait=false",
    ]);
    (kubectl_big, kubectl_each, kubectl_all)
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
    let baseline_bin = std::env::var_os("PALLET_BENCH_BASELINE_BIN")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    if let Some(bin) = &baseline_bin {
        assert!(
            bin.is_file(),
            "PALLET_BENCH_BASELINE_BIN={}: no such file",
            bin.display()
        );
    }
    let run = cluster::unique_name("rbench");
    let work = tempfile::tempdir().expect("temp dir");
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let this_bin = PathBuf::from(env!("CARGO_BIN_EXE_pallet"));
    let baseline = match &baseline_bin {
        Some(bin) => {
            eprintln!("baseline agent ({}) ...", bin.display());
            let bundles = Bundles::new(fx, work.path(), &format!("{run}-base"));
            Some(measure(fx, &bds, (bin, work.path()), &bundles, steady_seconds).await)
        }
        None => None,
    };
    eprintln!("this build's agent ...");
    let bundles = Bundles::new(fx, work.path(), &run);
    let this = measure(fx, &bds, (&this_bin, work.path()), &bundles, steady_seconds).await;
    let (kubectl_big, kubectl_each, kubectl_all) = kubectl_floors(&bundles);
    print_report(&run, &this, (kubectl_big, kubectl_each, kubectl_all));
    if let Some(baseline) = &baseline {
        print_baseline(baseline, &this);
    }
}

/// The report of this build's agent against kubectl's floors.
fn print_report(
    run: &str,
    this: &Figures,
    (kubectl_big, kubectl_each, kubectl_all): (Duration, Duration, Duration),
) {
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
        secs(this.agent_big)
    );
    println!(
        "   (agent change-log entries during install: {}; API requests: {})",
        this.big_writes, this.big_requests
    );
    println!(
        "{:<58} {:>10} {:>10}",
        format!("   kubectl apply --server-side, {BIG_OBJECTS} objects"),
        secs(kubectl_big),
        ratio(this.agent_big, kubectl_big)
    );
    println!(
        "{:<58} {:>10}",
        format!("2. agent: {MANY_BUNDLES} BDs x {MANY_OBJECTS} ConfigMaps, apply -> all Ready"),
        secs(this.agent_many)
    );
    println!(
        "   (agent change-log entries during install: {}; API requests: {})",
        this.many_writes, this.many_requests
    );
    println!(
        "{:<58} {:>10} {:>10}",
        format!("   kubectl --server-side, {MANY_BUNDLES} invocations (1/bundle)"),
        secs(kubectl_each),
        ratio(this.agent_many, kubectl_each)
    );
    println!(
        "{:<58} {:>10} {:>10}",
        format!(
            "   kubectl --server-side, 1 invocation, {} objects",
            MANY_BUNDLES * MANY_OBJECTS
        ),
        secs(kubectl_all),
        ratio(this.agent_many, kubectl_all)
    );
    println!(
        "{:<58} {:>10}",
        format!("   cleanup: delete {} BDs until gone", MANY_BUNDLES + 1),
        secs(this.delete_time)
    );
    let steady = &this.steady;
    println!();
    println!(
        "3. steady state, {} window, {} BDs, {} objects:",
        secs(steady.window),
        steady.bds,
        steady.objects
    );
    println!(
        "   reconciles completed (agent log)          {}",
        steady.reconciles
    );
    println!(
        "   agent writes (change-log entries)         {}",
        steady.writes
    );
    println!(
        "   bundle objects whose resourceVersion moved {}",
        steady.objects_changed
    );
    println!(
        "   BDs whose resourceVersion moved (status)   {}",
        steady.bds_changed
    );
    println!(
        "   source fetches (fixture counters)         {}",
        steady.fetches
    );
    println!(
        "   agent API requests                        {}",
        steady.requests
    );
    println!(
        "   apiserver writes, ALL clients (shared control plane, not only the agent): {}",
        if steady.api_delta.is_empty() {
            "none".to_string()
        } else {
            steady
                .api_delta
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    println!();
    println!(
        "4. agent peak RSS (VmHWM) {}; RSS at the end of the window {}",
        this.hwm, this.rss
    );
}

/// One figure of a run.
type Figure = fn(&Figures) -> f64;

/// This build against the baseline binary, side by side.
fn print_baseline(base: &Figures, this: &Figures) {
    let ratio_of = |this: f64, base: f64| {
        if base > 0.0 {
            format!("{:.3}x", this / base)
        } else {
            "-".to_string()
        }
    };
    let row = |what: &str, base: f64, this: f64| {
        println!(
            "  {what:<52} {base:>12.1} {this:>12.1} {:>9}",
            ratio_of(this, base)
        );
    };
    println!();
    println!("this build against the baseline binary (PALLET_BENCH_BASELINE_BIN), in this run:");
    println!(
        "  {:<52} {:>12} {:>12} {:>9}",
        "figure", "baseline", "this build", "this/base"
    );
    let figures: [(&str, Figure); 12] = [
        ("1. time to Ready, s", |f| f.agent_big.as_secs_f64()),
        ("1. API requests", |f| f.big_requests),
        ("1. change-log entries", |f| f.big_writes as f64),
        ("2. time to all Ready, s", |f| f.agent_many.as_secs_f64()),
        ("2. API requests", |f| f.many_requests),
        ("2. change-log entries", |f| f.many_writes as f64),
        ("3. steady: agent writes", |f| f.steady.writes as f64),
        ("3. steady: BDs written", |f| f.steady.bds_changed as f64),
        ("3. steady: objects written", |f| {
            f.steady.objects_changed as f64
        }),
        ("3. steady: API requests", |f| f.steady.requests),
        ("3. steady: reconciles", |f| f.steady.reconciles as f64),
        ("3. steady: source fetches", |f| f.steady.fetches as f64),
    ];
    for (what, figure) in figures {
        row(what, figure(base), figure(this));
    }
    let kib = |text: &str| {
        text.split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    row("4. peak RSS, kB", kib(&base.hwm), kib(&this.hwm));
}
