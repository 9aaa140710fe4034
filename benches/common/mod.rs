//! Helpers shared by the benchmark programs that drive the real agent against a control plane
//! (`benches/reconcile.rs`, `benches/scale.rs`, `benches/soak.rs`): kubectl, waiting for BundleDeployments, process
//! figures from /proc, and the formatting of times and ratios.
//!
//! Use with `#[path = "common/mod.rs"] mod common;`.

#![allow(dead_code)] // each bench uses a different part

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, ListParams};
use kube::runtime::{watcher, WatchStreamExt};
use pallet::api::conditions::find;
use pallet::api::BundleDeployment;
use serde::de::DeserializeOwned;

/// The kubectl built by `tools/controlplane.sh` (same release as the control plane).
pub fn kubectl_path() -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME is set");
    let cache = std::env::var_os("PALLET_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(home).join(".cache/pallet"));
    cache.join("bin/kubectl")
}

/// Runs kubectl with `kubeconfig`; panics with its stderr when it fails. Returns stdout.
pub fn kubectl_with(kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new(kubectl_path())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("running kubectl (built by tools/controlplane.sh)");
    assert!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Ready=True for the BundleDeployment's current generation.
pub fn is_ready(bd: &BundleDeployment) -> bool {
    let generation = bd.metadata.generation;
    bd.status
        .as_ref()
        .and_then(|s| find(&s.conditions, "Ready"))
        .is_some_and(|c| {
            c.status == "True" && (generation.is_none() || c.observed_generation == generation)
        })
}

/// Waits until `expected` BundleDeployments matching `selector` are Ready; panics after
/// `deadline` naming a few that are not.
pub async fn wait_all_ready(
    api: &Api<BundleDeployment>,
    selector: &str,
    expected: usize,
    deadline: Duration,
) {
    watch_until(
        api.clone(),
        watcher::Config::default().labels(selector),
        expected,
        deadline,
        is_ready,
        |bd| format!("{:?}", bd.status.as_ref().map(|s| &s.conditions)),
    )
    .await;
}

/// Watches `api` (the objects `config` selects) until `done` holds for at least `expected` of
/// them; panics after `deadline` with `describe` of a few that are not done. A watch rather than
/// polling: the benchmarks measure the control plane's CPU, and a LIST of every object a few
/// times a second would add load of the wait's own (more for the bigger object) to the figure.
/// The end is seen on the event that completes it, not at the next poll.
pub async fn watch_until<K>(
    api: Api<K>,
    config: watcher::Config,
    expected: usize,
    deadline: Duration,
    done: impl Fn(&K) -> bool,
    describe: impl Fn(&K) -> String,
) where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    // Per object: None when done, else how it stands.
    let mut objects: HashMap<(Option<String>, String), Option<String>> = HashMap::new();
    let events = watcher(api, config).default_backoff();
    let mut events = std::pin::pin!(events);
    let end = tokio::time::Instant::now() + deadline;
    // Named at the deadline: a watch refused all along (RBAC, a wrong selector) is the reason.
    let mut last_error = None;
    loop {
        let done_count = objects.values().filter(|o| o.is_none()).count();
        if done_count >= expected {
            return;
        }
        let event = match tokio::time::timeout_at(end, events.next()).await {
            Ok(Some(Ok(event))) => event,
            // The watcher lists again after an error (with backoff); the wait goes on.
            Ok(Some(Err(error))) => {
                last_error = Some(error.to_string());
                continue;
            }
            Ok(None) => panic!("the watch ended"),
            Err(_) => {
                let some: Vec<&String> = objects.values().flatten().take(3).collect();
                panic!(
                    "{done_count}/{expected} done after {deadline:?}; some not: {some:#?}; last watch error: {last_error:?}"
                );
            }
        };
        let key = |k: &K| {
            (
                k.meta().namespace.clone(),
                k.meta().name.clone().unwrap_or_default(),
            )
        };
        match event {
            // A new list follows: what is not in it is gone.
            watcher::Event::Init => objects.clear(),
            watcher::Event::InitDone => {}
            watcher::Event::Apply(k) | watcher::Event::InitApply(k) => {
                let state = (!done(&k)).then(|| describe(&k));
                objects.insert(key(&k), state);
            }
            watcher::Event::Delete(k) => {
                objects.remove(&key(&k));
            }
        }
    }
}

/// Polls until no BundleDeployment matches `selector`; panics after `deadline`.
pub async fn wait_gone(api: &Api<BundleDeployment>, selector: &str, deadline: Duration) {
    let params = ListParams::default().labels(selector);
    let start = Instant::now();
    loop {
        let left = api.list(&params).await.expect("listing").items.len();
        if left == 0 {
            return;
        }
        if start.elapsed() > deadline {
            panic!("{left} BundleDeployments ({selector}) still there after {deadline:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A field of /proc/PID/status (e.g. `VmHWM:`), as written there ("97 MiB" style), or "?".
pub fn proc_status(pid: u32, field: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .map(|l| l[field.len()..].trim().to_string())
        })
        .unwrap_or_else(|| "?".into())
}

/// A /proc/PID/status size field in MiB (`VmHWM:`, `VmRSS:`); 0 when unreadable.
pub fn proc_mib(pid: u32, field: &str) -> f64 {
    proc_status(pid, field)
        .split_whitespace()
        .next()
        .and_then(|kib| kib.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// A /proc/PID/status size field in KiB (`VmRSS:`, `VmHWM:`); None when the process is gone.
pub fn proc_kib(pid: u32, field: &str) -> Option<u64> {
    proc_status(pid, field)
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
}

/// Every sample of a Prometheus text exposition, by `name{labels}`.
pub fn metric_samples(text: &str) -> std::collections::BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter_map(|(k, v)| v.parse().ok().map(|v| (k.to_string(), v)))
        .collect()
}

/// Context switches of process `pid` so far, summed over its threads still running:
/// (voluntary, involuntary). A thread that exited takes its count with it.
pub fn context_switches(pid: u32) -> (u64, u64) {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return (0, 0);
    };
    let mut total = (0, 0);
    for task in tasks.flatten() {
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        for line in status.lines() {
            let count = |prefix: &str| {
                line.strip_prefix(prefix)
                    .and_then(|v| v.trim().parse::<u64>().ok())
            };
            if let Some(n) = count("voluntary_ctxt_switches:") {
                total.0 += n;
            } else if let Some(n) = count("nonvoluntary_ctxt_switches:") {
                total.1 += n;
            }
        }
    }
    total
}

/// User + system CPU seconds used so far by process `pid` (its threads included).
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) start at state, field 3.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15, i.e. 11 and 12 after the state.
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i).and_then(|v| v.parse::<f64>().ok()))
        .sum();
    ticks / clock_ticks()
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`), for /proc's CPU times.
pub fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// Seconds with two decimals.
pub fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// `a / b` as `1.23x`.
pub fn ratio(a: Duration, b: Duration) -> String {
    format!("{:.2}x", a.as_secs_f64() / b.as_secs_f64())
}

/// The median of `values` (the mean of the middle two for an even count); 0 when empty.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// A free port on 127.0.0.1, for an agent's metrics server.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Waits until the agent serving metrics on `port` is ready (its BundleDeployment watch has
/// listed everything).
pub async fn wait_agent_ready(port: u16) {
    let ready = format!("http://127.0.0.1:{port}/readyz");
    for _ in 0..600 {
        match reqwest::get(&ready).await {
            Ok(r) if r.status().is_success() => return,
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    panic!("the agent on port {port} was not ready within 60 s");
}

/// Every sample an agent's `/metrics` at `url` serves, by `name{labels}`.
// The benchmark's own agent on loopback answers.
#[allow(clippy::disallowed_methods)]
pub async fn scrape(url: &str) -> std::collections::BTreeMap<String, f64> {
    let text = reqwest::get(url)
        .await
        .expect("scraping the agent")
        .text()
        .await
        .expect("reading /metrics");
    metric_samples(&text)
}

/// The change of each sample from `before` to `after` (an agent's metrics over a phase); samples
/// that did not move are left out.
pub fn metrics_delta(
    before: &std::collections::BTreeMap<String, f64>,
    after: &std::collections::BTreeMap<String, f64>,
) -> std::collections::BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d != 0.0)
        .collect()
}

/// The control plane's own `/metrics` text, read through `client`.
pub async fn control_plane_metrics(client: &kube::Client) -> String {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("a GET of /metrics");
    client
        .request_text(request)
        .await
        .expect("the control plane's metrics")
}

/// Lines in a file (the change log: one line per write); 0 when missing.
pub fn line_count(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// A running `pallet agent`, killed when dropped.
pub struct AgentProc {
    /// The process.
    pub child: Child,
    /// Its stderr (the log).
    pub log: PathBuf,
    /// Its change log.
    pub changes: PathBuf,
}

impl Drop for AgentProc {
    /// SIGTERM first, so an agent under a profiler (`PALLET_BENCH_AGENT_WRAP`) can write its
    /// data out; SIGKILL if it has not exited within 15 s.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The machine line the benchmarks print.
pub fn machine() -> String {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_kib: f64 = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0.0);
    format!(
        "machine: nproc={nproc}, MemTotal {:.1} GiB, shared with other users (times include their load)",
        mem_kib / (1024.0 * 1024.0)
    )
}
pub mod agent;
pub mod audit;
pub mod least_work;
pub mod tcp_front;
