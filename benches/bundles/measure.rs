//! The bundles benchmark's control planes, what a phase cost on each, the agent's idleness after
//! a restart, the stored snapshots, and the report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams};

use crate::common::agent::Agent;
use crate::common::audit::{self, AuditLog};
use crate::common::{self, cpu_seconds, secs};
use crate::private_control_plane::PrivateControlPlane;
use crate::support::{Fixtures, Server};
use crate::{cluster, NAMESPACE};

/// The audited user the agent (and the stand-in) authenticates as, on every control plane: on a
/// target, the user of the kubeconfig its Secret holds.
pub const AGENT_USER: &str = "bench-agent";

/// A private control plane with the CRDs, the agents' and the bundles' namespaces, and an
/// audited user for the agent.
pub struct Plane {
    /// `management` (the agent's own), or the target's name (its kubeconfig Secret's).
    pub name: String,
    pub plane: PrivateControlPlane,
    pub client: kube::Client,
    pub agent_user: PathBuf,
    pub audit: AuditLog,
}

impl Plane {
    /// Starts a fresh one named `name` (its port chosen free by `PrivateControlPlane`, away
    /// from the shared control planes' ports); `work` holds the agent user's kubeconfig.
    pub async fn start(work: &Path, name: &str) -> Plane {
        let plane = PrivateControlPlane::start();
        let client = plane.client().await;
        cluster::install_crd(&client).await;
        // As installed: without it the agent polls for the kind every half minute.
        cluster::install_crd_from(&client, include_str!("../../deploy/crd-set.yaml")).await;
        let dir = plane
            .kubeconfig()
            .parent()
            .expect("kubeconfig in the state dir")
            .to_path_buf();
        let agent_user = work.join(format!("{AGENT_USER}-{name}.kubeconfig"));
        plane.script_args(&["user", AGENT_USER, agent_user.to_str().expect("utf-8 path")]);
        let plane = Plane {
            name: name.to_string(),
            audit: AuditLog::new(&dir),
            client,
            agent_user,
            plane,
        };
        plane.admin(&["create", "namespace", "pallet-system"]);
        plane.admin(&["create", "namespace", NAMESPACE]);
        plane
    }

    /// kubectl as the unaudited admin; its output.
    pub fn admin(&self, args: &[&str]) -> String {
        common::kubectl_with(&self.plane.kubeconfig(), args)
    }

    /// The user's one `kubectl apply --server-side` of `file` (as the unaudited admin).
    pub fn apply(&self, file: &Path) {
        self.admin(&[
            "apply",
            "--server-side",
            "--field-manager=bench-user",
            "-f",
            file.to_str().expect("utf-8 path"),
        ]);
    }

    fn pid(&self) -> u32 {
        let dir = self
            .plane
            .kubeconfig()
            .parent()
            .expect("kubeconfig in the state dir")
            .to_path_buf();
        std::fs::read_to_string(dir.join("pid"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .expect("the control plane's pid file")
    }

    fn cpu(&self) -> f64 {
        cpu_seconds(self.pid())
    }

    /// The bundles' ConfigMaps stored on this control plane.
    pub async fn bundle_objects(&self) -> usize {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), NAMESPACE);
        api.list_metadata(&ListParams::default())
            .await
            .expect("listing the bundles' ConfigMaps")
            .items
            .iter()
            .filter(|cm| {
                cm.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("b-"))
            })
            .count()
    }

    /// The API server's storage figures: etcd's database size and objects per resource.
    pub async fn storage(&self) -> Storage {
        let samples = common::metric_samples(&common::control_plane_metrics(&self.client).await);
        let db_bytes = samples
            .iter()
            .filter(|(k, _)| {
                k.starts_with("apiserver_storage_size_bytes")
                    || k.starts_with("apiserver_storage_db_total_size_in_bytes")
                    || k.starts_with("etcd_db_total_size_in_bytes")
            })
            .map(|(_, v)| *v)
            .fold(0.0, f64::max);
        let objects = [
            "secrets",
            "configmaps",
            "bundledeployments.pallet.dev",
            "events",
        ]
        .iter()
        .map(|resource| {
            let count = samples
                .iter()
                .filter(|(k, _)| {
                    k.starts_with("apiserver_storage_objects{")
                        && k.contains(&format!("resource=\"{resource}\""))
                })
                .map(|(_, v)| *v)
                .fold(0.0, f64::max);
            (resource.to_string(), count)
        })
        .collect();
        Storage { db_bytes, objects }
    }
}

/// The control plane's storage at one moment.
pub struct Storage {
    /// etcd's database size (0 when the control plane does not export it).
    pub db_bytes: f64,
    /// Objects stored per resource.
    pub objects: Vec<(String, f64)>,
}

/// What one phase cost.
pub struct Cost {
    pub time: Duration,
    /// The audited user's requests on every control plane, by `verb resource`.
    pub requests: BTreeMap<String, u64>,
    /// The same, per control plane (in the order of the planes measured).
    pub by_plane: Vec<BTreeMap<String, u64>>,
    /// CPU of every control plane.
    pub plane_cpu: f64,
    /// The same, per control plane.
    pub plane_cpus: Vec<f64>,
    pub agent_cpu: f64,
    /// Differences of the agent's metrics over the phase (empty for the stand-in).
    pub metrics: BTreeMap<String, f64>,
    /// Requests to the registry for this run's artifacts.
    pub registry: usize,
}

impl Cost {
    fn metric_sum(&self, prefix: &str) -> f64 {
        self.metrics
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v)
            .sum()
    }

    /// Writes: create, update, patch, delete (of any resource).
    fn writes(&self) -> u64 {
        self.requests
            .iter()
            .filter(|(k, _)| {
                [
                    "create ",
                    "update ",
                    "patch ",
                    "delete ",
                    "deletecollection ",
                ]
                .iter()
                .any(|verb| k.starts_with(verb))
            })
            .map(|(_, v)| v)
            .sum()
    }

    /// Status writes of BundleDeployments.
    fn status_writes(&self) -> u64 {
        self.requests
            .iter()
            .filter(|(k, _)| {
                (k.starts_with("patch ") || k.starts_with("update "))
                    && k.contains("bundledeployments/status")
            })
            .map(|(_, v)| v)
            .sum()
    }
}

/// A phase being measured: the figures at its start.
pub struct Phase {
    from: f64,
    start: Instant,
    plane_cpus: Vec<f64>,
    /// The agent's CPU, or this process's when no agent runs at the start (the stand-in).
    agent_cpu: Option<f64>,
    this_cpu: f64,
    metrics: BTreeMap<String, f64>,
    registry: usize,
}

impl Phase {
    /// Starts measuring on `planes` (with `agent`'s CPU and metrics, when there is one),
    /// `registry` requests so far.
    pub async fn begin(planes: &[Plane], agent: Option<&Agent>, registry: usize) -> Phase {
        Phase {
            from: audit::now(),
            start: Instant::now(),
            plane_cpus: planes.iter().map(Plane::cpu).collect(),
            agent_cpu: agent.map(|a| cpu_seconds(a.pid())),
            this_cpu: cpu_seconds(std::process::id()),
            metrics: match agent {
                Some(a) => a.metrics().await,
                None => BTreeMap::new(),
            },
            registry,
        }
    }

    /// What the phase cost, ending now (`agent`: the one running now, maybe not the one at
    /// the start: a restart's CPU and metrics are the new process's own).
    pub async fn end(self, planes: &[Plane], agent: Option<&Agent>, registry: usize) -> Cost {
        let time = self.start.elapsed();
        let to = audit::now();
        // An agent started within the phase counts from 0.
        let (agent_cpu, metrics) = match agent {
            Some(a) => (
                cpu_seconds(a.pid()) - self.agent_cpu.unwrap_or(0.0),
                common::metrics_delta(&self.metrics, &a.metrics().await),
            ),
            None => (
                cpu_seconds(std::process::id()) - self.this_cpu,
                BTreeMap::new(),
            ),
        };
        let by_plane: Vec<BTreeMap<String, u64>> = planes
            .iter()
            .map(|plane| plane.audit.requests(AGENT_USER, self.from, to))
            .collect();
        let mut requests = BTreeMap::new();
        for (key, count) in by_plane.iter().flatten() {
            *requests.entry(key.clone()).or_insert(0) += count;
        }
        let plane_cpus: Vec<f64> = planes
            .iter()
            .zip(&self.plane_cpus)
            .map(|(plane, before)| plane.cpu() - before)
            .collect();
        Cost {
            time,
            requests,
            by_plane,
            plane_cpu: plane_cpus.iter().sum(),
            plane_cpus,
            agent_cpu,
            metrics,
            registry: registry - self.registry,
        }
    }
}

/// Requests to `registry` under `prefix` so far.
pub async fn registry_requests(fx: &Fixtures, registry: &Server, prefix: &str) -> usize {
    fx.stats(&[("server", &registry.name), ("prefix", prefix)])
        .await
        .total
}

/// Reconcile passes the agent finished, from its metrics.
fn passes(metrics: &BTreeMap<String, f64>) -> f64 {
    metrics
        .iter()
        .filter(|(k, _)| k.starts_with("pallet_reconciles_total{"))
        .map(|(_, v)| v)
        .sum()
}

/// Waits until a freshly started `agent` is idle: `n` passes finished and none in flight, or
/// none in flight and no pass finished for 10 s. Returns the time from the call until the last
/// pass seen finished. Polls the agent's own metrics (not the API server) twice a second.
pub async fn wait_idle(agent: &Agent, n: usize, deadline: Duration) -> Duration {
    let start = Instant::now();
    let (mut last, mut last_change) = (0.0, start.elapsed());
    loop {
        let metrics = agent.metrics().await;
        let done = passes(&metrics);
        let in_flight = metrics
            .get("pallet_reconciles_in_flight")
            .copied()
            .unwrap_or(0.0);
        if done != last {
            (last, last_change) = (done, start.elapsed());
        }
        let quiet = start.elapsed() - last_change > Duration::from_secs(10);
        if in_flight == 0.0 && (done >= n as f64 || quiet) {
            return last_change;
        }
        assert!(
            start.elapsed() < deadline,
            "the restarted agent not idle after {deadline:?}: {done} passes"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The snapshot Secrets in the agent's namespace: count, data bytes, whole objects' bytes
/// (as JSON, roughly what etcd stores).
pub async fn snapshot_secrets(client: &kube::Client) -> (usize, usize, usize) {
    let api: Api<Secret> = Api::namespaced(client.clone(), "pallet-system");
    let params = ListParams::default()
        .fields(&format!("type={}", pallet::revision::SECRET_TYPE))
        .limit(500);
    let (mut count, mut data, mut whole) = (0, 0, 0);
    let mut params = params;
    loop {
        let list = api
            .list(&params)
            .await
            .expect("listing the snapshot Secrets");
        for secret in &list.items {
            count += 1;
            data += secret
                .data
                .iter()
                .flatten()
                .map(|(k, v)| k.len() + v.0.len())
                .sum::<usize>();
            whole += serde_json::to_vec(secret).map_or(0, |b| b.len());
        }
        match list.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    (count, data, whole)
}

/// One control plane's share of pallet's install.
pub struct ClusterFigures {
    /// The plane's name (`management`, or the target's).
    pub name: String,
    /// Bundles whose objects go to it.
    pub bundles: usize,
    /// From the user's apply until the last of them was Ready.
    pub ready: Duration,
    /// The bundles' ConfigMaps stored on it after the install.
    pub objects: usize,
}

/// Every figure of a run.
pub struct Report<'a> {
    pub n: usize,
    /// Per control plane, in the order of the costs' `by_plane`.
    pub clusters: &'a [ClusterFigures],
    pub least: &'a Cost,
    pub install: &'a Cost,
    pub steady: &'a Cost,
    pub restart: &'a Cost,
    /// The agent's peak RSS (MiB) after the install, after the steady state, and the restarted
    /// agent's after it was idle.
    pub rss: (f64, f64, f64),
    /// Snapshot Secrets: count, data bytes, whole objects' bytes.
    pub snapshots: &'a (usize, usize, usize),
    pub storage: &'a Storage,
    pub steady_seconds: u64,
    /// Change-log lines before the restart, and after the restarted agent was idle (one log).
    pub changes: (usize, usize),
}

fn per(count: f64, n: usize) -> String {
    format!("{:.2}", count / n as f64)
}

fn print_requests(title: &str, requests: &BTreeMap<String, u64>) {
    println!("   {title}: {} in all", audit::total(requests));
    for (key, count) in requests {
        println!("      {count:>8}  {key}");
    }
}

/// Prints a row per control plane: its bundles, their Ready time and objects, and the agent's
/// (and the stand-in's) requests on it, per bundle of that plane.
fn print_clusters(r: &Report) {
    let minutes = r.steady_seconds as f64 / 60.0;
    println!();
    println!(
        "per control plane (requests: the agent's user on that plane, from its audit log, per bundle of the plane; \
         the management plane's include every bundle's BundleDeployment, status and snapshot writes)"
    );
    println!(
        "{:<12} {:>7} {:>10} {:>10} {:>9} {:>9} {:>12} {:>9} {:>9}",
        "plane",
        "bundles",
        "Ready (s)",
        "ConfigMaps",
        "stand-in",
        "install",
        "steady/min",
        "restart",
        "CPU (s)"
    );
    for (i, cluster) in r.clusters.iter().enumerate() {
        let per_bundle = |cost: &Cost| {
            cost.by_plane
                .get(i)
                .map_or(0.0, |requests| audit::total(requests) as f64)
                / cluster.bundles.max(1) as f64
        };
        println!(
            "{:<12} {:>7} {:>10.2} {:>10} {:>9.2} {:>9.2} {:>12.3} {:>9.2} {:>9.1}",
            cluster.name,
            cluster.bundles,
            cluster.ready.as_secs_f64(),
            cluster.objects,
            per_bundle(r.least),
            per_bundle(r.install),
            per_bundle(r.steady) / minutes,
            per_bundle(r.restart),
            r.install.plane_cpus.get(i).copied().unwrap_or(0.0)
        );
    }
    println!("(CPU: the control plane's own during pallet's install)");
}

/// Prints the report.
pub fn print_report(r: &Report) {
    let n = r.n;
    let mib = |b: f64| b / (1024.0 * 1024.0);
    println!();
    println!("                                         stand-in     pallet   pallet/stand-in");
    let row = |label: &str, a: f64, b: f64| {
        println!(
            "{label:<40} {a:>9.2} {b:>10.2} {:>10.2}x",
            b / a.max(f64::EPSILON)
        )
    };
    row(
        "install: time to all Ready (s)",
        r.least.time.as_secs_f64(),
        r.install.time.as_secs_f64(),
    );
    row(
        "install: API requests per bundle",
        audit::total(&r.least.requests) as f64 / n as f64,
        audit::total(&r.install.requests) as f64 / n as f64,
    );
    row(
        "install: writes per bundle",
        r.least.writes() as f64 / n as f64,
        r.install.writes() as f64 / n as f64,
    );
    row(
        "install: status writes per bundle",
        r.least.status_writes() as f64 / n as f64,
        r.install.status_writes() as f64 / n as f64,
    );
    row(
        "install: registry requests per bundle",
        r.least.registry as f64 / n as f64,
        r.install.registry as f64 / n as f64,
    );
    row(
        "install: control plane CPU (s)",
        r.least.plane_cpu,
        r.install.plane_cpu,
    );
    row(
        "install: agent CPU (s; stand-in: this process)",
        r.least.agent_cpu,
        r.install.agent_cpu,
    );
    println!();
    println!(
        "install: {n} bundles Ready in {}; status writes {:.1}/s; reconcile passes {:.0}; revisions created {:.0}",
        secs(r.install.time),
        r.install.status_writes() as f64 / r.install.time.as_secs_f64(),
        passes(&r.install.metrics),
        r.install.metric_sum("pallet_revisions_created_total").abs()
    );
    println!(
        "agent peak RSS: {:.1} MiB after the install, {:.1} MiB after the steady state, {:.1} MiB restarted and idle",
        r.rss.0, r.rss.1, r.rss.2
    );
    print_clusters(r);
    print_requests(
        "install: the agent's API requests (every plane)",
        &r.install.requests,
    );
    let minutes = r.steady_seconds as f64 / 60.0;
    println!(
        "steady state ({} s): {:.1} API requests/min ({} per bundle per min), {} writes ({} status), {} registry requests, {:.0} source resolves (pallet_fetches_total; from the agent's cache when the registry saw none), {:.0} passes, agent CPU {:.1} s",
        r.steady_seconds,
        audit::total(&r.steady.requests) as f64 / minutes,
        per(audit::total(&r.steady.requests) as f64 / minutes, n),
        r.steady.writes(),
        r.steady.status_writes(),
        r.steady.registry,
        r.steady.metric_sum("pallet_fetches_total"),
        passes(&r.steady.metrics),
        r.steady.agent_cpu
    );
    print_requests("steady state: the agent's API requests", &r.steady.requests);
    println!(
        "restart to idle: {} ({:.0} passes); {} API requests ({} per bundle), {} writes ({} status), {:.0} revisions created, {} registry requests, change-log lines {}, agent CPU {:.1} s",
        secs(r.restart.time),
        passes(&r.restart.metrics),
        audit::total(&r.restart.requests),
        per(audit::total(&r.restart.requests) as f64, n),
        r.restart.writes(),
        r.restart.status_writes(),
        r.restart.metric_sum("pallet_revisions_created_total").abs(),
        r.restart.registry,
        r.changes.1.saturating_sub(r.changes.0),
        r.restart.agent_cpu
    );
    print_requests("restart: the agent's API requests", &r.restart.requests);
    let (count, data, whole) = *r.snapshots;
    println!(
        "snapshot Secrets: {count} ({} per bundle), data {:.1} MiB ({:.0} B per bundle), objects {:.1} MiB ({:.0} B per bundle)",
        per(count as f64, n),
        mib(data as f64),
        data as f64 / n as f64,
        mib(whole as f64),
        whole as f64 / n as f64
    );
    let objects: Vec<String> = r
        .storage
        .objects
        .iter()
        .map(|(resource, count)| format!("{resource} {count:.0}"))
        .collect();
    println!(
        "management control plane storage after the steady state: etcd database {:.1} MiB; objects: {}",
        mib(r.storage.db_bytes),
        objects.join(", ")
    );
    println!(
        "change-log lines after the install and steady state: {}",
        r.changes.0
    );
}
