//! Scale benchmark (figures, not a test). Many small apps created at once, pallet
//! against kubectl on the same objects, in one run, on control planes of its own (started from
//! `tools/controlplane.sh` on another port and state directory, so the API server's CPU and
//! audit log hold this benchmark's load only, and the shared control plane is left alone). Each
//! group of phases below (the floors a, b, b2; m and m2; pallet's c, d, e; f; g and h) starts on
//! a fresh control plane: one that has carried earlier phases costs more for the same work.
//!
//! The app (Flux's benchmark shape, with a Deployment that becomes Ready): a ServiceAccount, a
//! ConfigMap, a headless Service (the control plane's Service range holds 254 addresses) and a
//! one-replica Deployment using that ServiceAccount, made Ready by the control plane's fake
//! kubelet. All apps of one size share a namespace labelled `pallet.dev/fake-kubelet=on`. Each
//! app is its own OCI artifact in the fixture registry (pushed with `pallet push`'s code, pinned
//! by digest) and its own BundleDeployment (`format: plain`, `installNamespace`).
//!
//! For each size N (`PALLET_BENCH_SCALE_SIZES`, default `100,500,1000,2000`):
//!
//! - a. `kubectl apply --server-side` of the 4N objects, one invocation (apply only);
//! - b. the same, then waiting until every Deployment is Available;
//! - b2. the objects' next version applied the same way, then waiting again (the floor of an
//!   upgrade, whose rollouts replace every Pod);
//! - m, m2. (`scale/least.rs`) the least any agent of this shape adds to b and b2: the user's
//!   BundleDeployments, two registry requests per app, its objects applied, one status each,
//!   done by this process as cheaply as it can; the lowest ratios any such agent can reach;
//! - c. pallet: N BundleDeployments created at once (one `kubectl apply --server-side`), time
//!   until all are Ready; the agent's API requests from the audit log, the control plane's CPU
//!   (one process: etcd, API server, controllers, fake kubelet), the agent's CPU and peak RSS,
//!   reconcile passes and time per phase from its metrics;
//! - d. (at `PALLET_BENCH_SCALE_STEADY_N`, default 1,000 or the largest size) steady state for
//!   `PALLET_BENCH_SCALE_STEADY_SECONDS` (default 300): writes, fetches, API requests per minute;
//! - e. an upgrade of all N at once (new content, new digest), the same figures as c, against b2;
//! - f. (at `PALLET_BENCH_SCALE_SHARD_N`, default the steady-state size; 0 skips it) two agents,
//!   each with `--selector` on Flux's `sharding.fluxcd.io/key` label, installing N apps split
//!   between them: time until all are Ready, each agent's requests, and every object either one
//!   wrote that belongs to the other's shard (from the audit log; expected none);
//! - g/h. (only with `PALLET_BENCH_SCALE_PEERS=flux`; not in CI) the peer: Flux's
//!   source-controller and kustomize-controller (built from their Go modules by `tools/flux.sh`),
//!   local processes against the same control plane, installing then upgrading the same
//!   artifacts with one OCIRepository + Kustomization per app, with the same figures as c and e
//!   (see `scale/flux.rs`), and a side-by-side summary.
//!
//! Each of b, b2, m, m2, c and e also prints its timeline (`scale/timeline.rs`): the machine's
//! cores busy and the CPU of each process (control plane, agent, registry, the fixtures'
//! counting proxy, kubectl) over the phase, tenth by tenth how far the objects had come, and what
//! the control plane did, from its own metrics (items its controllers synced: an agent that made
//! them sync more would show there; its Go runtime's allocation, garbage collection, run queue
//! and mutex waits; watch events sent per resource); and c and e the CPU on the cluster's side
//! (control plane + agent), since the registry and the user's kubectl share this machine's cores
//! but not a real cluster's.
//!
//! `PALLET_BENCH_SCALE_ROUNDS=R` (default 1) measures a, b, b2, c and e R times per size, in
//! turn (floors, pallet, floors, pallet, ...; each pallet round with a fresh agent and fresh
//! namespaces), prints every round and the medians, and the summary shows medians: one floor
//! measured once has moved by up to half between runs on a two-core machine, and a ratio
//! inherits that. The steady state runs in the first round; shards and peer once,
//! after the last.
//!
//! `PALLET_BENCH_SCALE_PROFILE=DIR` saves a CPU profile and allocation profiles of the control
//! plane for each of the phases b, b2, m, m2, c and e (see `scale/profile.rs`).
//!
//! `PALLET_BENCH_BASELINE_BIN=PATH` also runs pallet's install and upgrade (c, e) with the agent
//! binary at PATH (another build, such as the one a change started from), each round on a fresh
//! control plane of its own, in turn with this build's (baseline first in odd rounds, second in
//! even ones), and prints both side by side: the agent's API requests (audit log), the bytes
//! the control plane allocated, and the time, with this build's over the baseline's.
//!
//! `PALLET_BENCH_AGENT_WRAP` runs each agent under a command prefix, for profiling (for example
//! `heaptrack -o /tmp/agent`); the time and RSS figures of such a run are not the agent's.
//!
//! Run: `tools/fixtures.sh start`, then `cargo bench --bench scale` (builds the control plane
//! if needed and `pallet` in the bench profile); `tools/bench.sh` runs it with the others.

// The benchmark's clients of its own servers and profiles read whole answers (see clippy.toml).
#![allow(clippy::disallowed_methods)]

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "../tests/support/cluster.rs"]
mod cluster;

#[path = "../tests/support/private_control_plane.rs"]
mod private_control_plane;

#[path = "common/mod.rs"]
mod common;

#[path = "scale/flux.rs"]
mod flux;

#[path = "scale/profile.rs"]
mod profile;

#[path = "scale/timeline.rs"]
mod timeline;

#[path = "scale/plane.rs"]
mod plane;

#[path = "scale/least.rs"]
mod least;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::agent::Agent;
use common::audit;
use common::{cpu_seconds, proc_mib, ratio, secs};
use futures::StreamExt;
use kube::api::Api;
use pallet::api::BundleDeployment;
use plane::Plane;
use support::{Fixtures, Server};

const TEST_LABEL: &str = "pallet.dev/test";
const SIZE_LABEL: &str = "bench.pallet.dev/size";
/// Flux's sharding label, which the sharded run's agents select on (`--selector`).
const SHARD_LABEL: &str = "sharding.fluxcd.io/key";
/// The shards of the sharded run, one agent each.
const SHARDS: [&str; 2] = ["shard-a", "shard-b"];

/// The audited user of the agent of `shard`.
fn shard_user(shard: &str) -> String {
    format!("{AGENT_USER}-{shard}")
}
/// Generous: the machine is shared; a deadline only stops a run that will never finish.
const DEADLINE: Duration = Duration::from_secs(1200);
/// The users the audit log tells apart (tools/controlplane.sh user).
const AGENT_USER: &str = "bench-agent";
const KUBECTL_USER: &str = "bench-kubectl";
/// Pushes in flight at once.
const PUSH_CONCURRENCY: usize = 16;

/// The value of variable `name`, or `default` when it is unset. A value that does not parse
/// stops the benchmark with its name: a typo must not silently measure something else.
fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(value) => parse_setting(name, &value),
        Err(_) => default,
    }
}

fn parse_setting<T: std::str::FromStr>(name: &str, value: &str) -> T {
    value
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{name}={value:?}: not a whole number"))
}

/// The 4 objects of app `i` at `version` (no namespace: kubectl's `-n` or the BD's
/// installNamespace places them). A new version changes the ConfigMap and the pod template, so
/// an upgrade rolls the Deployment.
fn app_yaml(i: usize, version: &str) -> String {
    let a = format!("app-{i:04}");
    format!(
        "---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: {a}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: {a}}}
data: {{version: {version}, greeting: hello from {a}}}
---
apiVersion: v1
kind: Service
metadata: {{name: {a}}}
spec:
  clusterIP: None
  selector: {{app: {a}}}
  ports: [{{name: http, port: 80, targetPort: 8080}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {a}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {a}}}}}
  template:
    metadata: {{labels: {{app: {a}}}}}
    spec:
      serviceAccountName: {a}
      automountServiceAccountToken: false
      containers:
      - name: app
        image: example.invalid/app:{version}
        env: [{{name: VERSION, value: {version}}}]
        ports: [{{containerPort: 8080}}]
"
    )
}

/// BundleDeployment `name` (labels: `labels`, a YAML flow map's content) installing `image`.
fn bd_yaml(name: &str, labels: &str, namespace: &str, image: &str) -> String {
    format!(
        "---
apiVersion: pallet.dev/v1alpha1
kind: BundleDeployment
metadata:
  name: {name}
  labels: {{{labels}}}
spec:
  installNamespace: {namespace}
  sources:
  - kind: image
    image: {{ref: \"{image}\"}}
  format: plain
"
    )
}

/// Pushes app `i`'s artifact at `version` for size `n`; returns its reference by digest.
async fn push_app(
    fx: &Fixtures,
    registry: &Server,
    work: &Path,
    run: &str,
    n: usize,
    i: usize,
    version: &str,
) -> String {
    let dir = work.join(format!("src/n{n}-{i:04}-{version}"));
    std::fs::create_dir_all(dir.join("manifests")).expect("artifact dir");
    std::fs::write(dir.join("manifests/app.yaml"), app_yaml(i, version)).expect("artifact file");
    let repo = format!("scale-{run}/n{n}-app-{i:04}");
    let digest = fx
        .push_dir_as_image(registry, &repo, version, &dir, &registry.registry_auth())
        .await
        .expect("pushing an app artifact");
    let _ = std::fs::remove_dir_all(&dir);
    format!("{}/{repo}@{digest}", registry.host)
}

async fn push_all(
    fx: &Fixtures,
    registry: &Server,
    work: &Path,
    run: &str,
    n: usize,
    version: &str,
) -> Vec<String> {
    futures::stream::iter(0..n)
        .map(|i| push_app(fx, registry, work, run, n, i, version))
        .buffered(PUSH_CONCURRENCY)
        .collect()
        .await
}

/// What one agent phase (install, upgrade) cost.
struct Cost {
    time: Duration,
    /// How long the user's one `kubectl apply` of the BundleDeployments took.
    applied: Duration,
    requests: BTreeMap<String, u64>,
    plane_cpu: f64,
    agent_cpu: f64,
    /// The agent's context switches in the phase: (voluntary, involuntary).
    agent_switches: (u64, u64),
    peak_mib: f64,
    /// Differences of the agent's metrics over the phase.
    metrics: BTreeMap<String, f64>,
    /// Requests to the registry for this size's artifacts.
    registry: usize,
    /// Seconds from the start until the last BundleDeployment's revision started applying, and
    /// until the last one was healthy (from `status.revisions[]`: whole seconds): what the
    /// agent took to reach every bundle, and what the workload controllers took after it.
    last_started: f64,
    last_healthy: f64,
    /// Pod creations refused in the phase ([`Plane::refused_pods`]).
    refused_pods: u64,
    /// The machine and the BundleDeployments' progress over the phase.
    timeline: timeline::Timeline,
}

/// The latest `appliedAt` and `healthyAt` of the active revisions of `bds`, in seconds since the
/// epoch.
fn revision_times(bds: &[BundleDeployment]) -> (f64, f64) {
    let latest = |times: Vec<f64>| times.into_iter().fold(0.0f64, f64::max);
    let (applied, healthy) = active_revision_times(bds);
    (latest(applied), latest(healthy))
}

/// When each BundleDeployment's active revision started applying, and when it became healthy
/// (seconds since the epoch; whole seconds), for those that have the time.
fn active_revision_times(bds: &[BundleDeployment]) -> (Vec<f64>, Vec<f64>) {
    let revisions = || {
        bds.iter().filter_map(|bd| {
            let status = bd.status.as_ref()?;
            status
                .revisions
                .iter()
                .find(|r| Some(r.number) == status.active_revision)
        })
    };
    (
        revisions()
            .filter_map(|r| r.applied_at.as_ref().map(epoch_seconds))
            .collect(),
        revisions()
            .filter_map(|r| r.healthy_at.as_ref().map(epoch_seconds))
            .collect(),
    )
}

/// An API timestamp (whole seconds) in seconds since the epoch.
fn epoch_seconds(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> f64 {
    t.0.as_second() as f64
}

/// A pallet phase's timeline with its BundleDeployments' steps: created (when the phase
/// `creates` them), their active revision applied, and healthy.
fn bd_steps(
    timeline: timeline::Timeline,
    bds: &[BundleDeployment],
    creates: bool,
) -> timeline::Timeline {
    let created = bds
        .iter()
        .filter_map(|bd| bd.metadata.creation_timestamp.as_ref().map(epoch_seconds));
    let (applied, healthy) = active_revision_times(bds);
    timeline
        .created(creates, created.collect())
        .with("applied", applied)
        .with("healthy", healthy)
}

impl Cost {
    fn metric(&self, key: &str) -> f64 {
        self.metrics.get(key).copied().unwrap_or(0.0)
    }

    fn passes(&self) -> f64 {
        self.metric("pallet_reconciles_total{result=\"success\"}")
            + self.metric("pallet_reconciles_total{result=\"error\"}")
    }

    fn client_requests(&self) -> f64 {
        self.metrics
            .iter()
            .filter(|(k, _)| k.starts_with("pallet_api_requests_total{"))
            .map(|(_, v)| v)
            .sum()
    }
}

/// Applies `file` (creating the BDs when `creates`, else updating them), waits until all `n` of
/// `selector` are Ready, and measures what it cost.
async fn measure_agent(
    plane: &Plane,
    agent: &Agent,
    registry: (&Fixtures, &flux::RegistryFilter),
    selector: &str,
    (phase, n): (&str, usize),
    (file, creates): (&Path, bool),
) -> Cost {
    let bds: Api<BundleDeployment> = Api::all(plane.client.clone());
    let metrics_before = agent.metrics().await;
    let registry_before = registry.1.count(registry.0).await;
    let (cpu_before, agent_cpu_before) = (plane.cpu(), cpu_seconds(agent.pid()));
    let switches_before = common::context_switches(agent.pid());
    let from = audit::now();
    let plane_before = plane.plane_work().await;
    let sampler = timeline::Sampler::start(plane.pid(), Some(agent.pid()));
    let start = Instant::now();
    let applied = profile::profiled(plane.profiler.as_ref(), phase, async {
        plane.apply_file(file);
        let applied = start.elapsed();
        common::wait_all_ready(&bds, selector, n, DEADLINE).await;
        applied
    })
    .await;
    let time = start.elapsed();
    let sampled = sampler.stop();
    let to = audit::now();
    let listed = bds
        .list(&kube::api::ListParams::default().labels(selector))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let (started, healthy) = revision_times(&listed);
    let timeline = bd_steps(sampled, &listed, creates)
        .with_plane_work(plane.plane_work().await.since(&plane_before));
    let (plane_cpu, agent_cpu) = (
        plane.cpu() - cpu_before,
        cpu_seconds(agent.pid()) - agent_cpu_before,
    );
    let switches = common::context_switches(agent.pid());
    let agent_switches = (
        switches.0.saturating_sub(switches_before.0),
        switches.1.saturating_sub(switches_before.1),
    );
    let metrics = common::metrics_delta(&metrics_before, &agent.metrics().await);
    Cost {
        time,
        applied,
        requests: plane.audit.requests(AGENT_USER, from, to),
        plane_cpu,
        agent_cpu,
        agent_switches,
        peak_mib: proc_mib(agent.pid(), "VmHWM:"),
        metrics,
        registry: registry.1.count(registry.0).await - registry_before,
        last_started: started - from,
        last_healthy: healthy - from,
        refused_pods: 0,
        timeline,
    }
}

/// Which round of which size is measured (`PALLET_BENCH_SCALE_ROUNDS`).
#[derive(Clone, Copy)]
struct RoundOf {
    n: usize,
    round: usize,
    rounds: usize,
}

impl RoundOf {
    /// Appended to the names of a round's namespaces, agent and profiles; none in the first
    /// round, so a run of one round names everything as before rounds existed.
    fn suffix(&self) -> String {
        match self.round {
            0 => String::new(),
            r => format!("-r{}", r + 1),
        }
    }

    /// For progress lines: which round, when there are several.
    fn tag(&self) -> String {
        match self.rounds {
            1 => String::new(),
            rounds => format!(" round {}/{rounds}", self.round + 1),
        }
    }
}

/// Every app's artifact at both versions, by digest.
#[derive(Clone, Copy)]
struct Images<'a> {
    v1: &'a [String],
    v2: &'a [String],
}

/// Pallet's install and upgrade of one round.
struct PalletRound {
    install: Cost,
    upgrade: Cost,
}

/// An agent binary a round runs.
struct AgentBin {
    path: PathBuf,
    /// `this build` or `baseline`.
    label: &'static str,
    /// Appended to the names of its agent, namespaces and profiles.
    suffix: &'static str,
}

impl AgentBin {
    /// The binary cargo built with this benchmark.
    fn this_build() -> AgentBin {
        AgentBin {
            path: PathBuf::from(env!("CARGO_BIN_EXE_pallet")),
            label: "this build",
            suffix: "",
        }
    }

    /// The binary `PALLET_BENCH_BASELINE_BIN` names, if any.
    fn baseline() -> Option<AgentBin> {
        let path = std::env::var_os("PALLET_BENCH_BASELINE_BIN").filter(|p| !p.is_empty())?;
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "PALLET_BENCH_BASELINE_BIN={}: no such file",
            path.display()
        );
        Some(AgentBin {
            path,
            label: "baseline",
            suffix: "-base",
        })
    }
}

/// One round: the floors, then pallet on the same objects. Rounds alternate floor and pallet so
/// that a slow or fast stretch of the shared machine lands on both sides of a ratio.
struct Round {
    floor: Floor,
    /// The least any agent adds to the floors (`scale/least.rs`).
    least: least::Least,
    pallet: PalletRound,
    /// The same with the baseline binary (`PALLET_BENCH_BASELINE_BIN`).
    baseline: Option<PalletRound>,
}

impl Round {
    fn install_ratio(&self) -> f64 {
        self.pallet.install.time.as_secs_f64() / self.floor.apply_wait.as_secs_f64()
    }

    fn least_install_ratio(&self) -> f64 {
        self.least.install.time.as_secs_f64() / self.floor.apply_wait.as_secs_f64()
    }

    fn least_upgrade_ratio(&self) -> f64 {
        self.least.upgrade.time.as_secs_f64() / self.floor.upgrade_wait.as_secs_f64()
    }

    fn install_cpu_ratio(&self) -> f64 {
        self.pallet.install.plane_cpu / self.floor.plane_cpu.max(0.001)
    }

    fn upgrade_ratio(&self) -> f64 {
        self.pallet.upgrade.time.as_secs_f64() / self.floor.upgrade_wait.as_secs_f64()
    }

    fn upgrade_cpu_ratio(&self) -> f64 {
        self.pallet.upgrade.plane_cpu / self.floor.upgrade_plane_cpu.max(0.001)
    }

    /// The control plane's allocation during pallet's install over the least-work agent's:
    /// what pallet costs the control plane beyond what any agent must, in a unit that does not
    /// drift with the machine.
    fn install_alloc_over_least(&self) -> f64 {
        self.pallet.install.timeline.plane_allocated()
            / self.least.install.timeline.plane_allocated().max(1.0)
    }

    fn upgrade_alloc_over_least(&self) -> f64 {
        self.pallet.upgrade.timeline.plane_allocated()
            / self.least.upgrade.timeline.plane_allocated().max(1.0)
    }
}

/// Pallet's part of a round: a fresh agent (its own empty cache) installs every app (c), holds
/// still for `steady_seconds` when asked (d), and upgrades every app (e).
async fn pallet_round(
    plane: &Plane,
    fx: &Fixtures,
    (registry, images): (&Server, Images<'_>),
    work: &Path,
    run: &str,
    (at, bin): (RoundOf, &AgentBin),
    steady_seconds: Option<u64>,
) -> (PalletRound, Option<Steady>) {
    let (n, tag) = (at.n, at.tag());
    let suffix = format!("{}{}", at.suffix(), bin.suffix);
    let which = bin.label;
    eprintln!("[N={n}{tag}] c. pallet install ({which}) ...");
    let ns = format!("{run}-p{n}{suffix}");
    plane.fake_kubelet_namespace(&ns);
    let selector = format!("{TEST_LABEL}={run},{SIZE_LABEL}={n}");
    let agent = Agent::start(
        &bin.path,
        &plane.agent_user,
        work,
        &format!("agent-{n}{suffix}"),
        &format!("{TEST_LABEL}={run}"),
        &registry.host,
    )
    .await;
    let labels = format!("{TEST_LABEL}: {run}, {SIZE_LABEL}: \"{n}\"");
    let name_and_labels = |i: usize| (format!("n{n}-app-{i:04}"), labels.clone());
    let install_file = write_bds(
        work,
        &format!("bds-{n}-v1.yaml"),
        &ns,
        images.v1,
        name_and_labels,
    );
    let registry_filter = flux::RegistryFilter::new(registry, run, n);
    let mut install = measure_agent(
        plane,
        &agent,
        (fx, &registry_filter),
        &selector,
        (&format!("{n}-c-install{suffix}"), n),
        (&install_file, true),
    )
    .await;
    install.refused_pods = plane.refused_pods(&ns).await;
    let steady = match steady_seconds {
        Some(seconds) => {
            eprintln!("[N={n}{tag}] d. steady state for {seconds} s ...");
            Some(steady_state(plane, &agent, fx, registry, run, seconds).await)
        }
        None => None,
    };
    eprintln!("[N={n}{tag}] e. pallet upgrade of all {n} ({which}) ...");
    let upgrade_file = write_bds(
        work,
        &format!("bds-{n}-v2.yaml"),
        &ns,
        images.v2,
        name_and_labels,
    );
    let mut upgrade = measure_agent(
        plane,
        &agent,
        (fx, &registry_filter),
        &selector,
        (&format!("{n}-e-upgrade{suffix}"), n),
        (&upgrade_file, false),
    )
    .await;
    upgrade.refused_pods = plane.refused_pods(&ns).await - install.refused_pods;
    // No clean-up: the control plane goes with the round (`Plane::start`).
    drop(agent);
    (PalletRound { install, upgrade }, steady)
}

/// One phase's cost of a pallet round.
type CostOf = fn(&PalletRound) -> &Cost;

/// This build against the baseline binary (`PALLET_BENCH_BASELINE_BIN`) at `n` apps: for the
/// install and the upgrade, the agent's API requests, the bytes the control plane allocated and
/// the time of each, and this build's over the baseline's (the median over the rounds).
fn print_baseline(n: usize, measured: &[Round]) {
    println!(
        "this build against the baseline binary at {n} apps, side by side in this run (each on a fresh control plane; requests: the agent's, from the audit log; alloc: MiB the control plane allocated during the phase; median over {} round(s)):",
        measured.len()
    );
    println!(
        "  {:<9} {:>14} {:>14} {:>8}   {:>12} {:>12} {:>8}   {:>10} {:>10} {:>8}",
        "phase",
        "requests base",
        "requests this",
        "ratio",
        "alloc base",
        "alloc this",
        "ratio",
        "time base",
        "time this",
        "ratio"
    );
    let phases: [(&str, CostOf); 2] = [("install", |r| &r.install), ("upgrade", |r| &r.upgrade)];
    for (phase, cost_of) in phases {
        let pairs: Vec<(&Cost, &Cost)> = measured
            .iter()
            .filter_map(|r| Some((cost_of(r.baseline.as_ref()?), cost_of(&r.pallet))))
            .collect();
        let median_of = |f: &dyn Fn(&Cost) -> f64, side: usize| {
            let mut values: Vec<f64> = pairs
                .iter()
                .map(|(base, this)| f(if side == 0 { base } else { this }))
                .collect();
            values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
            values.get(values.len() / 2).copied().unwrap_or(0.0)
        };
        let requests = |c: &Cost| audit::total(&c.requests) as f64;
        let alloc = |c: &Cost| c.timeline.plane_allocated() / (1 << 20) as f64;
        let time = |c: &Cost| c.time.as_secs_f64();
        let cell = |f: &dyn Fn(&Cost) -> f64| {
            let (base, this) = (median_of(f, 0), median_of(f, 1));
            (base, this, if base > 0.0 { this / base } else { 0.0 })
        };
        let (rb, rt, rr) = cell(&requests);
        let (ab, at, ar) = cell(&alloc);
        let (tb, tt, tr) = cell(&time);
        println!(
            "  {phase:<9} {rb:>14.0} {rt:>14.0} {rr:>7.3}x   {ab:>12.1} {at:>12.1} {ar:>7.3}x   {tb:>9.1}s {tt:>9.1}s {tr:>7.3}x"
        );
    }
}

/// Every round of one size, one line each, and the medians: how far a single run can be trusted.
fn print_rounds(n: usize, measured: &[Round]) {
    println!(
        "rounds at {n} apps (each: the floors b and b2, the least m and m2, then pallet's install and upgrade with a fresh agent, each group on a fresh control plane; alloc/m, alloc/m2: bytes the control plane allocated during pallet's phase over during the least agent's, a measure of work that does not drift with the machine; busy: the machine's cores busy on average):"
    );
    println!(
        "{:>7} {:>9} {:>9} {:>7} {:>14} {:>7} {:>7} {:>7} {:>12} {:>9} {:>9} {:>7} {:>14} {:>7} {:>7} {:>8} {:>12}",
        "round",
        "floor b",
        "pallet",
        "pal/b",
        "cpu b / pal",
        "cpu",
        "m/b",
        "alloc/m",
        "busy b / pal",
        "b2",
        "upgrade",
        "upg/b2",
        "cpu b2 / upg",
        "cpu",
        "m2/b2",
        "alloc/m2",
        "busy b2 / upg"
    );
    let line = |label: &str, f: &dyn Fn(fn(&Round) -> f64) -> f64| {
        println!(
            "{:>7} {:>9} {:>9} {:>7} {:>14} {:>7} {:>7} {:>7} {:>12} {:>9} {:>9} {:>7} {:>14} {:>7} {:>7} {:>8} {:>12}",
            label,
            format!("{:.1} s", f(|r| r.floor.apply_wait.as_secs_f64())),
            format!("{:.1} s", f(|r| r.pallet.install.time.as_secs_f64())),
            format!("{:.2}x", f(Round::install_ratio)),
            format!(
                "{:.1} / {:.1}",
                f(|r| r.floor.plane_cpu),
                f(|r| r.pallet.install.plane_cpu)
            ),
            format!("{:.2}x", f(Round::install_cpu_ratio)),
            format!("{:.2}x", f(Round::least_install_ratio)),
            format!("{:.2}x", f(Round::install_alloc_over_least)),
            format!(
                "{:.2} / {:.2}",
                f(|r| r.floor.timelines.0.machine().0),
                f(|r| r.pallet.install.timeline.machine().0)
            ),
            format!("{:.1} s", f(|r| r.floor.upgrade_wait.as_secs_f64())),
            format!("{:.1} s", f(|r| r.pallet.upgrade.time.as_secs_f64())),
            format!("{:.2}x", f(Round::upgrade_ratio)),
            format!(
                "{:.1} / {:.1}",
                f(|r| r.floor.upgrade_plane_cpu),
                f(|r| r.pallet.upgrade.plane_cpu)
            ),
            format!("{:.2}x", f(Round::upgrade_cpu_ratio)),
            format!("{:.2}x", f(Round::least_upgrade_ratio)),
            format!("{:.2}x", f(Round::upgrade_alloc_over_least)),
            format!(
                "{:.2} / {:.2}",
                f(|r| r.floor.timelines.1.machine().0),
                f(|r| r.pallet.upgrade.timeline.machine().0)
            ),
        );
    };
    for (i, round) in measured.iter().enumerate() {
        line(&format!("{}", i + 1), &|figure| figure(round));
    }
    line("median", &|figure| {
        common::median(measured.iter().map(figure).collect())
    });
}

/// The kubectl floors of one size.
struct Floor {
    apply: Duration,
    apply_wait: Duration,
    requests: u64,
    plane_cpu: f64,
    /// The same objects at the next version applied, then every Deployment Available again (the
    /// rollout replaces each Pod: more work for the control plane than the install).
    upgrade_wait: Duration,
    upgrade_plane_cpu: f64,
    /// Pod creations refused during b and during b2 ([`Plane::refused_pods`]).
    refused_pods: (u64, u64),
    /// The machine and the Deployments' progress during b and during b2.
    timelines: (timeline::Timeline, timeline::Timeline),
}

impl Floor {
    /// What an install is measured against: b.
    fn install_basis(&self) -> Basis {
        Basis {
            time: self.apply_wait,
            plane_cpu: self.plane_cpu,
            refused_pods: self.refused_pods.0,
            name: "apply-and-wait floor b",
        }
    }

    /// What an upgrade is measured against: b2.
    fn upgrade_basis(&self) -> Basis {
        Basis {
            time: self.upgrade_wait,
            plane_cpu: self.upgrade_plane_cpu,
            refused_pods: self.refused_pods.1,
            name: "upgrade floor b2",
        }
    }
}

async fn kubectl_floor(plane: &Plane, work: &Path, run: &str, at: RoundOf) -> Floor {
    let n = at.n;
    let file = work.join(format!("apps-{n}.yaml"));
    let ns = format!("{run}-k{n}{}", at.suffix());
    plane.fake_kubelet_namespace(&ns);
    // Every app at `version`, in one kubectl invocation.
    let apply = |version: &str| {
        let all: String = (0..n).map(|i| app_yaml(i, version)).collect();
        std::fs::write(&file, all).expect("writing the apps");
        plane.as_kubectl_user(&[
            "apply",
            "--server-side",
            "--field-manager=bench",
            "-n",
            &ns,
            "-f",
            file.to_str().expect("utf-8 path"),
        ]);
    };
    let profiler = plane.profiler.as_ref();
    let cpu_before = plane.cpu();
    let from = audit::now();
    let plane_before = plane.plane_work().await;
    let sampler = timeline::Sampler::start(plane.pid(), None);
    let start = Instant::now();
    let apply_only = profile::profiled(profiler, &format!("{n}-b-floor{}", at.suffix()), async {
        apply("v1");
        let apply_only = start.elapsed();
        plane.wait_available(&ns, n).await;
        apply_only
    })
    .await;
    let apply_wait = start.elapsed();
    let install_timeline = plane
        .deployment_steps(sampler.stop(), &plane_before, &ns, true)
        .await;
    let plane_cpu = plane.cpu() - cpu_before;
    let requests = audit::total(&plane.audit.requests(KUBECTL_USER, from, audit::now()));
    let refused_before_upgrade = plane.refused_pods(&ns).await;
    let cpu_before = plane.cpu();
    let plane_before = plane.plane_work().await;
    let sampler = timeline::Sampler::start(plane.pid(), None);
    let start = Instant::now();
    profile::profiled(
        profiler,
        &format!("{n}-b2-floor-upgrade{}", at.suffix()),
        async {
            apply("v2");
            plane.wait_available(&ns, n).await;
        },
    )
    .await;
    let upgrade_wait = start.elapsed();
    let upgrade_timeline = plane
        .deployment_steps(sampler.stop(), &plane_before, &ns, false)
        .await;
    let upgrade_plane_cpu = plane.cpu() - cpu_before;
    let refused_total = plane.refused_pods(&ns).await;
    Floor {
        apply: apply_only,
        apply_wait,
        requests,
        plane_cpu,
        upgrade_wait,
        upgrade_plane_cpu,
        refused_pods: (
            refused_before_upgrade,
            refused_total - refused_before_upgrade,
        ),
        timelines: (install_timeline, upgrade_timeline),
    }
}

/// Writes a file of one BundleDeployment per image; `name_and_labels(i)` names and labels the
/// i-th.
fn write_bds(
    work: &Path,
    file_name: &str,
    ns: &str,
    images: &[String],
    name_and_labels: impl Fn(usize) -> (String, String),
) -> PathBuf {
    let file = work.join(file_name);
    let yaml: String = images
        .iter()
        .enumerate()
        .map(|(i, image)| {
            let (name, labels) = name_and_labels(i);
            bd_yaml(&name, &labels, ns, image)
        })
        .collect();
    std::fs::write(&file, yaml).expect("writing the BundleDeployments");
    file
}

fn per_app(count: f64, n: usize) -> String {
    format!("{:.1}", count / n as f64)
}

fn print_requests(title: &str, requests: &BTreeMap<String, u64>, n: usize) {
    let total = audit::total(requests);
    println!(
        "   {title}: {total} ({} per app), by verb and resource (per app):",
        per_app(total as f64, n)
    );
    let mut sorted: Vec<(&String, &u64)> = requests.iter().collect();
    sorted.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (key, count) in sorted {
        println!("     {key:<44} {count:>8} {:>8}", per_app(*count as f64, n));
    }
}

/// What a cost is measured against: a kubectl floor's time and control plane CPU, and its name.
struct Basis {
    time: Duration,
    plane_cpu: f64,
    refused_pods: u64,
    name: &'static str,
}

fn print_cost(label: &str, cost: &Cost, basis: &Basis, n: usize) {
    println!(
        "{label:<58} {:>10} {:>10}",
        secs(cost.time),
        ratio(cost.time, basis.time)
    );
    println!(
        "   control plane CPU {:.1} s ({:.2}x the {}'s {:.1} s); agent CPU {:.1} s; agent peak RSS {:.0} MiB; agent context switches {} voluntary, {} involuntary",
        cost.plane_cpu,
        cost.plane_cpu / basis.plane_cpu.max(0.001),
        basis.name,
        basis.plane_cpu,
        cost.agent_cpu,
        cost.peak_mib,
        cost.agent_switches.0,
        cost.agent_switches.1
    );
    // The registry and the user's kubectl run on this machine too, but on other machines in a
    // real cluster: this is what the cluster's own cores carry.
    println!(
        "   on the cluster's side (control plane + agent): {:.1} CPU s, {:.2}x the {}'s control plane",
        cost.plane_cpu + cost.agent_cpu,
        (cost.plane_cpu + cost.agent_cpu) / basis.plane_cpu.max(0.001),
        basis.name
    );
    println!(
        "   the BDs were applied (one kubectl apply --server-side) in {}; the last revision started applying at {:.0} s, the last became healthy at {:.0} s (whole seconds)",
        secs(cost.applied),
        cost.last_started,
        cost.last_healthy
    );
    println!(
        "   Pod creations refused (FailedCreate Events): {}; the {}'s: {}",
        cost.refused_pods, basis.name, basis.refused_pods
    );
    println!(
        "   reconcile passes {} ({} per BD); agent-counted API requests {} ({} per app); registry requests {} ({} per app)",
        cost.passes(),
        per_app(cost.passes(), n),
        cost.client_requests(),
        per_app(cost.client_requests(), n),
        cost.registry,
        per_app(cost.registry as f64, n)
    );
    let phases: Vec<String> = pallet::metrics::PHASES
        .iter()
        .map(|p| {
            let sum = cost.metric(&format!("pallet_phase_seconds_sum{{phase=\"{p}\"}}"));
            let count = cost.metric(&format!("pallet_phase_seconds_count{{phase=\"{p}\"}}"));
            format!("{p} {sum:.1} s/{count}")
        })
        .collect();
    println!(
        "   time in phases, summed over passes (seconds/times): {}",
        phases.join(", ")
    );
    cost.timeline.print();
    print_requests("agent API requests (audit log)", &cost.requests, n);
}

#[tokio::main]
async fn main() {
    pallet::tls::install_crypto_provider();
    let fx = Fixtures::load();
    let registry = fx.registry_plain().clone();
    let sizes: Vec<usize> = std::env::var("PALLET_BENCH_SCALE_SIZES")
        .unwrap_or_else(|_| "100,500,1000,2000".into())
        .split(',')
        .map(|size| parse_setting("PALLET_BENCH_SCALE_SIZES", size))
        .collect();
    let largest = sizes.iter().copied().max().unwrap_or(100);
    let steady_n = env_or(
        "PALLET_BENCH_SCALE_STEADY_N",
        if sizes.contains(&1000) { 1000 } else { largest },
    );
    let steady_seconds: u64 = env_or("PALLET_BENCH_SCALE_STEADY_SECONDS", 300);
    // 0: no sharded run.
    let shard_n: usize = env_or("PALLET_BENCH_SCALE_SHARD_N", steady_n);
    let rounds: usize = env_or("PALLET_BENCH_SCALE_ROUNDS", 1);
    assert!(
        rounds >= 1,
        "PALLET_BENCH_SCALE_ROUNDS=0: at least one round"
    );

    let work = tempfile::tempdir().expect("temp dir");
    let shard_users: Vec<PathBuf> = SHARDS
        .iter()
        .map(|shard| Plane::user_path(work.path(), &shard_user(shard)))
        .collect();
    let peer_flux = flux::enabled().then(|| flux::Flux::build(work.path()));
    // Each group of phases on a control plane of its own (see `Plane::start`).
    let fresh_plane = || async {
        eprintln!("    starting a fresh private control plane ...");
        Plane::start(work.path()).await
    };
    let run = cluster::unique_name("scale");
    let this_build = AgentBin::this_build();
    let baseline = AgentBin::baseline();
    let mut report = Vec::new();
    // ---- report: the setting first, each size when done, then the summary ----
    println!();
    println!("scale benchmark  run={run}");
    println!("{}", common::machine());
    println!(
        "control plane: a private one (tools/controlplane.sh, one process: etcd + kube-apiserver + kube-controller-manager + fake kubelet), \
         so its CPU is this benchmark's load only"
    );
    println!(
        "agent: release build, defaults (--concurrency auto, --apply-parallelism 8); each app: ServiceAccount, ConfigMap, headless Service, \
         Deployment (1 replica), its own OCI artifact pinned by digest, one BD; all created at once"
    );
    match &peer_flux {
        Some(f) => println!("{}", f.describe()),
        None => println!("{}", flux::skipped_line()),
    }

    for &n in &sizes {
        eprintln!("[N={n}] pushing {n} artifacts x 2 versions ...");
        let v1 = push_all(fx, &registry, work.path(), &run, n, "v1").await;
        let v2 = push_all(fx, &registry, work.path(), &run, n, "v2").await;
        let images = Images { v1: &v1, v2: &v2 };
        let mut measured = Vec::new();
        let mut steady = None;
        for round in 0..rounds {
            let at = RoundOf { n, round, rounds };
            eprintln!(
                "[N={n}{}] a/b. kubectl apply --server-side, then wait for Available ...",
                at.tag()
            );
            let floor = kubectl_floor(&fresh_plane().await, work.path(), &run, at).await;
            eprintln!(
                "[N={n}{}] m/m2. the least an agent adds: BDs, pulls, one status each ...",
                at.tag()
            );
            let least = least::least_floors(
                &fresh_plane().await,
                fx,
                (&registry, images),
                work.path(),
                &run,
                at,
            )
            .await;
            // The steady state once per size: it measures what a settled agent does, not a race.
            let steady_for = (round == 0 && n == steady_n).then_some(steady_seconds);
            // The baseline's round first in odd rounds, second in even ones: a slow or fast
            // stretch of the shared machine lands on both sides of the comparison.
            let baseline_round = || async {
                match &baseline {
                    Some(bin) => {
                        let plane = fresh_plane().await;
                        let round = pallet_round(
                            &plane,
                            fx,
                            (&registry, images),
                            work.path(),
                            &run,
                            (at, bin),
                            None,
                        )
                        .await;
                        Some(round.0)
                    }
                    None => None,
                }
            };
            let mut baseline_first = None;
            if round % 2 == 0 {
                baseline_first = baseline_round().await;
            }
            let (pallet, settled) = pallet_round(
                &fresh_plane().await,
                fx,
                (&registry, images),
                work.path(),
                &run,
                (at, &this_build),
                steady_for,
            )
            .await;
            let baseline_run = match baseline_first {
                Some(done) => Some(done),
                None => baseline_round().await,
            };
            if settled.is_some() {
                steady = settled;
            }
            measured.push(Round {
                floor,
                least,
                pallet,
                baseline: baseline_run,
            });
        }
        let sharded = if n == shard_n {
            eprintln!("[N={n}] f. two agents splitting the {n} apps by {SHARD_LABEL} ...");
            Some(
                sharded(
                    &fresh_plane().await,
                    &shard_users,
                    work.path(),
                    &run,
                    n,
                    &v1,
                    &registry.host,
                )
                .await,
            )
        } else {
            None
        };
        let peer = match &peer_flux {
            Some(f) => {
                eprintln!("[N={n}] g/h. Flux: install and upgrade of {n} apps ...");
                let plane = fresh_plane().await;
                f.install(&plane, work.path());
                Some(
                    f.run(&plane, fx, &registry, work.path(), &run, n, &v1, &v2)
                        .await,
                )
            }
            None => None,
        };
        let first = &measured[0];
        print_size(n, first, &steady, &sharded, &peer);
        if rounds > 1 {
            print_rounds(n, &measured);
        }
        if baseline.is_some() {
            print_baseline(n, &measured);
        }
        report.push((n, measured, peer));
    }
    let _ = std::fs::remove_dir_all(fx.files_root().join(&run));

    println!();
    println!(
        "summary (b: kubectl apply, then every Deployment Available; b2: the same for the next version; pal/b: pallet's install over b; upg/b2: pallet's upgrade over b2; \
         cpu: the control plane's CPU over the floor's; m/b, m2/b2: the least any agent adds (BDs, pulls, one status each) over the floor, the lowest ratio an agent can reach; \
         alloc/m, alloc/m2: bytes the control plane allocated during pallet's phase over during the least agent's, a measure of work that does not drift with the machine as CPU seconds do; requests per app from the audit log{})",
        if rounds > 1 {
            format!("; the median of each column over {rounds} rounds, a ratio being the median of the rounds' own ratios")
        } else {
            String::new()
        }
    );
    println!(
        "{:>6} {:>10} {:>11} {:>10} {:>8} {:>8} {:>8} {:>8} {:>10} {:>10} {:>8} {:>8} {:>8} {:>9} {:>12} {:>12}",
        "apps",
        "kubectl a",
        "a + wait b",
        "pallet",
        "pal/b",
        "cpu",
        "m/b",
        "alloc/m",
        "b2",
        "upgrade",
        "upg/b2",
        "cpu",
        "m2/b2",
        "alloc/m2",
        "req/app pal",
        "req/app kctl"
    );
    for (n, measured, _) in &report {
        let of = |figure: fn(&Round) -> f64| common::median(measured.iter().map(figure).collect());
        println!(
            "{:>6} {:>10} {:>11} {:>10} {:>8} {:>8} {:>8} {:>8} {:>10} {:>10} {:>8} {:>8} {:>8} {:>9} {:>12} {:>12}",
            n,
            format!("{:.2} s", of(|r| r.floor.apply.as_secs_f64())),
            format!("{:.2} s", of(|r| r.floor.apply_wait.as_secs_f64())),
            format!("{:.2} s", of(|r| r.pallet.install.time.as_secs_f64())),
            format!("{:.2}x", of(Round::install_ratio)),
            format!("{:.2}x", of(Round::install_cpu_ratio)),
            format!("{:.2}x", of(Round::least_install_ratio)),
            format!("{:.2}x", of(Round::install_alloc_over_least)),
            format!("{:.2} s", of(|r| r.floor.upgrade_wait.as_secs_f64())),
            format!("{:.2} s", of(|r| r.pallet.upgrade.time.as_secs_f64())),
            format!("{:.2}x", of(Round::upgrade_ratio)),
            format!("{:.2}x", of(Round::upgrade_cpu_ratio)),
            format!("{:.2}x", of(Round::least_upgrade_ratio)),
            format!("{:.2}x", of(Round::upgrade_alloc_over_least)),
            per_app(of(|r| audit::total(&r.pallet.install.requests) as f64), *n),
            per_app(of(|r| r.floor.requests as f64), *n),
        );
    }
    let peers: Vec<_> = report
        .iter()
        .filter_map(|(n, measured, peer)| {
            // The peer ran once, after the rounds: it is set beside the first round.
            let Round { floor, pallet, .. } = &measured[0];
            let (install, upgrade) = (&pallet.install, &pallet.upgrade);
            let pallet = flux::PalletFigures {
                install: install.time,
                upgrade: upgrade.time,
                requests: audit::total(&install.requests),
                peak_mib: upgrade.peak_mib,
                plane_cpu: install.plane_cpu,
                registry: install.registry,
            };
            peer.as_ref().map(|f| (*n, floor, pallet, f))
        })
        .collect();
    if !peers.is_empty() {
        flux::print_summary(&peers);
    }
}

/// Two agents, each selecting half of the apps by [`SHARD_LABEL`].
struct Sharded {
    time: Duration,
    /// Per agent: its shard, its requests, the objects it wrote that belong to the other shard.
    agents: Vec<(String, BTreeMap<String, u64>, Vec<String>)>,
}

impl Sharded {
    fn print(&self, floor: &Floor, n: usize) {
        println!(
            "{:<58} {:>10} {:>10}",
            format!("f. 2 agents split by {SHARD_LABEL}: {n} BDs -> all Ready"),
            secs(self.time),
            ratio(self.time, floor.apply_wait)
        );
        for (shard, requests, foreign) in &self.agents {
            println!(
                "   agent {shard}: writes to the other shard's BDs or objects: {}{}",
                foreign.len(),
                if foreign.is_empty() {
                    String::new()
                } else {
                    format!(
                        " ({})",
                        foreign
                            .iter()
                            .take(5)
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            );
            print_requests(&format!("agent {shard} API requests"), requests, n / 2);
        }
    }
}

/// The app number in an object's name (`…app-0042…`), for telling the shards' objects apart.
fn app_number(name: &str) -> Option<usize> {
    let rest = &name[name.find("app-")? + 4..];
    rest.get(..4)?.parse().ok()
}

async fn sharded(
    plane: &Plane,
    users: &[PathBuf],
    work: &Path,
    run: &str,
    n: usize,
    images: &[String],
    registry: &str,
) -> Sharded {
    let ns = format!("{run}-s{n}");
    plane.fake_kubelet_namespace(&ns);
    let shards = SHARDS;
    let mut agents = Vec::new();
    for (shard, user) in shards.iter().zip(users) {
        let selector = format!("{TEST_LABEL}={run},{SHARD_LABEL}={shard}");
        agents.push(
            Agent::start(
                Path::new(env!("CARGO_BIN_EXE_pallet")),
                user,
                work,
                &format!("agent-{n}-{shard}"),
                &selector,
                registry,
            )
            .await,
        );
    }
    let size = format!("{n}-sharded");
    let file = write_bds(work, &format!("bds-{n}-sharded.yaml"), &ns, images, |i| {
        (
            format!("s{n}-app-{i:04}"),
            format!(
                "{TEST_LABEL}: {run}, {SIZE_LABEL}: {size}, {SHARD_LABEL}: {}",
                shards[i % 2]
            ),
        )
    });
    let selector = format!("{TEST_LABEL}={run},{SIZE_LABEL}={size}");
    let bds: Api<BundleDeployment> = Api::all(plane.client.clone());
    let from = audit::now();
    let start = Instant::now();
    plane.apply_file(&file);
    common::wait_all_ready(&bds, &selector, n, DEADLINE).await;
    let time = start.elapsed();
    let to = audit::now();
    let figures = shards
        .iter()
        .enumerate()
        .map(|(k, shard)| {
            let user = format!("{AGENT_USER}-{shard}");
            let foreign: Vec<String> = plane
                .audit
                .written(&user, from, to)
                .into_iter()
                .filter(|object| app_number(object).is_some_and(|i| i % 2 != k))
                .collect();
            (
                shard.to_string(),
                plane.audit.requests(&user, from, to),
                foreign,
            )
        })
        .collect();
    eprintln!("    cleaning up {ns} ...");
    plane.delete_bundle_deployments(&selector).await;
    drop(agents);
    plane.delete_namespace(&ns).await;
    Sharded {
        time,
        agents: figures,
    }
}

/// What the agent did while nothing changed.
struct Steady {
    window: Duration,
    writes: usize,
    fetches: usize,
    requests: BTreeMap<String, u64>,
    passes: f64,
}

impl Steady {
    fn print(&self, n: usize) {
        let minutes = self.window.as_secs_f64() / 60.0;
        println!(
            "d. steady state, {} window, {n} pinned apps: writes (change log) {}, registry requests {}, reconcile passes {}",
            secs(self.window),
            self.writes,
            self.fetches,
            self.passes
        );
        let total = audit::total(&self.requests);
        println!(
            "   agent API requests {total} ({:.1} per minute), by verb and resource (per minute):",
            total as f64 / minutes
        );
        for (key, count) in &self.requests {
            println!("     {key:<44} {count:>8} {:>8.1}", *count as f64 / minutes);
        }
    }
}

async fn steady_state(
    plane: &Plane,
    agent: &Agent,
    fx: &Fixtures,
    registry: &Server,
    run: &str,
    seconds: u64,
) -> Steady {
    let prefix = format!("/v2/scale-{run}/");
    let filter = [
        ("server", registry.name.as_str()),
        ("prefix", prefix.as_str()),
    ];
    let fetches_before = fx.stats(&filter).await.total;
    let writes_before = common::line_count(&agent.proc.changes);
    let metrics_before = agent.metrics().await;
    let from = audit::now();
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let window = start.elapsed();
    let to = audit::now();
    let metrics = common::metrics_delta(&metrics_before, &agent.metrics().await);
    let passes = metrics
        .iter()
        .filter(|(k, _)| k.starts_with("pallet_reconciles_total{"))
        .map(|(_, v)| v)
        .sum::<f64>()
        + 0.0; // an empty sum is -0.0
    Steady {
        window,
        writes: common::line_count(&agent.proc.changes) - writes_before,
        fetches: fx.stats(&filter).await.total - fetches_before,
        requests: plane.audit.requests(AGENT_USER, from, to),
        passes,
    }
}

/// Prints the figures of one size's first round, its steady state, shards and peer (as soon as
/// the size is done, so a run that fails later keeps them).
fn print_size(
    n: usize,
    Round {
        floor,
        least,
        pallet,
        ..
    }: &Round,
    steady: &Option<Steady>,
    sharded: &Option<Sharded>,
    peer: &Option<flux::FluxRun>,
) {
    println!();
    println!("---- {n} apps ----");
    println!(
        "a. kubectl apply --server-side, {} objects, 1 invocation   {:>10}",
        4 * n,
        secs(floor.apply)
    );
    println!(
        "b. the same, then every Deployment Available              {:>10}   (kubectl's requests {}; control plane CPU {:.1} s)",
        secs(floor.apply_wait),
        floor.requests,
        floor.plane_cpu
    );
    floor.timelines.0.print();
    println!(
        "b2. the next version applied, then every Deployment Available {:>7}   (control plane CPU {:.1} s)",
        secs(floor.upgrade_wait),
        floor.upgrade_plane_cpu
    );
    floor.timelines.1.print();
    let machine = |t: &timeline::Timeline, time: Duration| t.machine().0 * time.as_secs_f64();
    least.install.print(
        &format!("m. the least an agent adds to b ({n} BDs, pulls, statuses)"),
        n,
        floor.apply_wait,
        floor.plane_cpu,
        machine(&floor.timelines.0, floor.apply_wait),
    );
    least.upgrade.print(
        &format!("m2. the least an agent adds to b2 ({n} BDs updated)"),
        n,
        floor.upgrade_wait,
        floor.upgrade_plane_cpu,
        machine(&floor.timelines.1, floor.upgrade_wait),
    );
    print_cost(
        &format!("c. pallet: {n} BDs created at once -> all Ready"),
        &pallet.install,
        &floor.install_basis(),
        n,
    );
    if let Some(s) = steady {
        s.print(n);
    }
    print_cost(
        &format!("e. pallet: upgrade of all {n} (new digest) -> all Ready"),
        &pallet.upgrade,
        &floor.upgrade_basis(),
        n,
    );
    if let Some(s) = sharded {
        s.print(floor, n);
    }
    if let Some(f) = peer {
        f.print(floor, n);
    }
}
