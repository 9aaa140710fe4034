//! Bundles benchmark (figures, not a test): one agent and `PALLET_BENCH_BUNDLES_N` (default
//! 10,000) BundleDeployments, on a control plane of its own (`tools/controlplane.sh` on another
//! port and state directory, so its CPU and audit log hold this benchmark's load only).
//!
//! The bundles go to `PALLET_BENCH_BUNDLES_CLUSTERS` (default 3) control planes, round-robin,
//! from that one agent: the agent's own (the management plane, where every BundleDeployment, its
//! status and its snapshots live; bundles with no `spec.kubeConfig`) and targets, each a private
//! control plane reached through `spec.kubeConfig` naming a Secret that holds its kubeconfig. The
//! agent's identity on a target is that kubeconfig's user, audited there, so its requests are
//! counted on each plane. `1` runs everything on the management plane.
//!
//! Each bundle is cheap on purpose: one ConfigMap from its own OCI artifact in the fixture
//! registry, pinned by digest (`format: plain`, all in one `installNamespace`). No Pods: a
//! Deployment per bundle would measure the scheduler and the kubelet, not the agent.
//!
//! In one run:
//!
//! - the least-work stand-in (the scale benchmark's floor m, `common/least_work.rs`) on a fresh
//!   control planes: the user's BundleDeployments created with one `kubectl apply
//!   --server-side`, each artifact pulled, its ConfigMap applied on its plane and one status
//!   written on the management plane, by this process; the least any agent of this shape adds;
//! - install, on other fresh control planes: the same BundleDeployments created at once, time
//!   until all are Ready (and those of each plane), the agent's peak RSS, its API requests per bundle (audit log), status
//!   writes and their rate, registry requests, CPU; then the snapshot Secrets it stored (count,
//!   data bytes, whole objects' bytes) and the control plane's storage (etcd's database size,
//!   objects per resource);
//!   (and per plane: requests per bundle of that plane, its bundles' ConfigMaps stored there);
//! - steady state for `PALLET_BENCH_BUNDLES_STEADY_SECONDS` (default 360, past one requeue of
//!   every bundle at the default 5 minutes; `PALLET_BENCH_BUNDLES_REQUEUE`, a duration, sets the
//!   agent's `--requeue-interval`): API requests per minute, writes, registry fetches;
//! - restart: the agent stopped (SIGTERM) and started again; time until it is idle (every bundle
//!   reconciled once, none in flight, or no pass for 10 s), its requests, writes, new revisions,
//!   change-log lines and fetches over that time (expected: no writes, no revisions, no
//!   fetches), and its RSS. It keeps its cache directory, as a restarted container does.
//!
//! Times are the machine's: nothing is asserted on them. Run: `tools/fixtures.sh start`, then
//! `PALLET_BENCH_BUNDLES_N=1000 cargo bench --bench bundles`.

// The benchmark's clients of its own servers read whole answers (see clippy.toml).
#![allow(clippy::disallowed_methods)]

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "../tests/support/cluster.rs"]
mod cluster;

#[path = "../tests/support/private_control_plane.rs"]
mod private_control_plane;

#[path = "common/mod.rs"]
mod common;

#[path = "bundles/measure.rs"]
mod measure;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::agent::Agent;
use common::{cpu_seconds, least_work, proc_mib, secs};
use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use measure::{ClusterFigures, Phase, Plane};
use pallet::api::BundleDeployment;
use serde_json::json;
use support::{Fixtures, Server};

/// Labels the benchmark's BundleDeployments (value: the run); the agent selects it.
const RUN_LABEL: &str = "bench.pallet.dev/bundles";
/// Labels each BundleDeployment with the name of the plane its objects go to.
const CLUSTER_LABEL: &str = "bench.pallet.dev/cluster";
/// Where every bundle installs its ConfigMap (on each plane).
const NAMESPACE: &str = "bundles";
/// The management plane's namespace of the targets' kubeconfig Secrets, which the agent is
/// started allowed to read Secrets from (`--allow-secret-namespace`). At thousands of bundles a
/// platform team keeps its clusters' Secrets in a namespace of their own, guarded by RBAC: the
/// other way, labelling a Secret in the agent's namespace `access.pallet.dev/<bundle>: "true"`
/// per bundle, would put thousands of labels on one Secret and rewrite it for every new bundle.
const CLUSTERS_NAMESPACE: &str = "clusters";
/// Generous: the machine is shared; a deadline only stops a run that will never finish.
const DEADLINE: Duration = Duration::from_secs(3600);
/// Pushes in flight at once.
const PUSH_CONCURRENCY: usize = 16;
/// Pulls, applies and status writes of the stand-in in flight at once (the agent's default
/// apply parallelism).
const IN_FLIGHT: usize = 8;
/// The inventory of one bundle, as the stand-in's status names it.
const BUNDLE_KINDS: [(&str, &str); 1] = [("ConfigMap", "")];

/// The value of variable `name`, or `default` when it is unset; a value that does not parse
/// stops the benchmark with its name.
fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(value) => value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?}: not a whole number")),
        Err(_) => default,
    }
}

/// Bundle `i`'s one object.
fn bundle_yaml(i: usize) -> String {
    format!(
        "apiVersion: v1
kind: ConfigMap
metadata: {{name: {}}}
data: {{bundle: \"{i}\", greeting: hello from bundle {i}}}
",
        bundle_name(i)
    )
}

fn bundle_name(i: usize) -> String {
    format!("b-{i:05}")
}

/// The plane bundle `i` goes to, of `clusters` (0: the management plane), round-robin.
fn plane_of(i: usize, clusters: usize) -> usize {
    i % clusters
}

/// The name of plane `c`: `management`, else the target's (its Secret's) name.
fn plane_name(c: usize) -> String {
    match c {
        0 => "management".to_string(),
        _ => format!("target-{c}"),
    }
}

/// Starts `clusters` fresh planes, the management plane first.
async fn start_planes(work: &Path, clusters: usize) -> Vec<Plane> {
    let mut planes = Vec::with_capacity(clusters);
    for c in 0..clusters {
        planes.push(Plane::start(work, &plane_name(c)).await);
    }
    planes
}

/// Writes each target's kubeconfig (its audited agent user's) into a Secret of the management
/// plane, as `tools/clusters.sh` does: key `value`, labelled as a cluster.
fn write_target_secrets(planes: &[Plane]) {
    let Some((management, targets)) = planes.split_first() else {
        return;
    };
    if targets.is_empty() {
        return;
    }
    management.admin(&["create", "namespace", CLUSTERS_NAMESPACE]);
    for target in targets {
        let from = format!(
            "--from-file=value={}",
            target.agent_user.to_str().expect("utf-8 path")
        );
        let name = target.name.as_str();
        management.admin(&[
            "create",
            "secret",
            "generic",
            name,
            "-n",
            CLUSTERS_NAMESPACE,
            &from,
        ]);
        management.admin(&[
            "label",
            "secret",
            name,
            "-n",
            CLUSTERS_NAMESPACE,
            "pallet.dev/cluster=true",
        ]);
    }
}

/// Pushes bundle `i`'s artifact; returns its reference by digest.
async fn push_bundle(fx: &Fixtures, registry: &Server, work: &Path, run: &str, i: usize) -> String {
    let dir = work.join(format!("src/{i:05}"));
    std::fs::create_dir_all(dir.join("manifests")).expect("artifact dir");
    std::fs::write(dir.join("manifests/bundle.yaml"), bundle_yaml(i)).expect("artifact file");
    let repo = format!("{run}/{}", bundle_name(i));
    let digest = fx
        .push_dir_as_image(registry, &repo, "v1", &dir, &registry.registry_auth())
        .await
        .expect("pushing a bundle's artifact");
    let _ = std::fs::remove_dir_all(&dir);
    format!("{}/{repo}@{digest}", registry.host)
}

/// The N BundleDeployments, one file, spread over `clusters` planes.
fn write_bds(work: &Path, run: &str, images: &[String], clusters: usize) -> PathBuf {
    let yaml: String = images
        .iter()
        .enumerate()
        .map(|(i, image)| {
            let c = plane_of(i, clusters);
            let kube_config = match c {
                0 => String::new(),
                _ => format!(
                    "  kubeConfig:\n    secretRef: {{name: {}, namespace: {CLUSTERS_NAMESPACE}}}\n",
                    plane_name(c)
                ),
            };
            format!(
                "---
apiVersion: pallet.dev/v1alpha1
kind: BundleDeployment
metadata:
  name: {}
  labels: {{{RUN_LABEL}: {run}, {CLUSTER_LABEL}: {}}}
spec:
{kube_config}  installNamespace: {NAMESPACE}
  sources:
  - kind: image
    image: {{ref: \"{image}\"}}
  format: plain
",
                bundle_name(i),
                plane_name(c)
            )
        })
        .collect();
    let file = work.join("bundles.yaml");
    std::fs::write(&file, yaml).expect("writing the BundleDeployments");
    file
}

/// The stand-in: the user's apply of `bds` on the management plane (`planes[0]`) while each
/// artifact of `images` is pulled and its ConfigMap applied on its plane, then one status per
/// BundleDeployment on the management plane.
async fn stand_in(planes: &[Plane], bds: &Path, images: &[String]) {
    let management = &planes[0];
    let create =
        least_work::user_apply_in_background(management.plane.kubeconfig(), bds.to_path_buf());
    let mut clients = Vec::with_capacity(planes.len());
    for plane in planes {
        clients.push(private_control_plane::client_from(&plane.agent_user).await);
    }
    let http = reqwest::Client::new();
    futures::stream::iter(images.iter().enumerate())
        .for_each_concurrent(IN_FLIGHT, |(i, image)| {
            let (http, client) = (&http, &clients[plane_of(i, planes.len())]);
            async move {
                least_work::pull(http, image).await;
                least_work::apply_objects(client, NAMESPACE, &bundle_yaml(i)).await;
            }
        })
        .await;
    create.await.expect("the user's kubectl apply");
    let api: Api<BundleDeployment> = Api::all(clients[0].clone());
    futures::stream::iter(images.iter().enumerate())
        .for_each_concurrent(IN_FLIGHT, |(i, image)| {
            let api = api.clone();
            let name = bundle_name(i);
            let status = least_work::ready_status(NAMESPACE, &name, image, 1, &BUNDLE_KINDS);
            async move {
                api.patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({ "status": status })),
                )
                .await
                .expect("writing a BundleDeployment's status");
            }
        })
        .await;
}

/// Starts the agent under test on the management plane `planes[0]` (`requeue`: its
/// `--requeue-interval`, or its default), allowed the targets' Secrets when there are targets.
async fn start_agent(
    planes: &[Plane],
    work: &Path,
    run: &str,
    registry: &str,
    requeue: Option<&str>,
) -> Agent {
    let mut extra: Vec<String> = requeue
        .map(|r| vec!["--requeue-interval".to_string(), r.to_string()])
        .unwrap_or_default();
    if planes.len() > 1 {
        extra.extend([
            "--allow-secret-namespace".to_string(),
            CLUSTERS_NAMESPACE.to_string(),
        ]);
    }
    Agent::start_with_args(
        Path::new(env!("CARGO_BIN_EXE_pallet")),
        &planes[0].agent_user,
        work,
        "agent",
        &format!("{RUN_LABEL}={run}"),
        registry,
        &extra,
    )
    .await
}

/// Waits until every bundle is Ready, watching each plane's bundles on their own; returns, per
/// plane, the time from `start` (the user's apply) until its last bundle was Ready.
async fn wait_ready_by_plane(
    api: &Api<BundleDeployment>,
    selector: &str,
    n: usize,
    clusters: usize,
    start: Instant,
) -> Vec<Duration> {
    futures::future::join_all((0..clusters).map(|c| {
        let selector = format!("{selector},{CLUSTER_LABEL}={}", plane_name(c));
        let count = (0..n).filter(|i| plane_of(*i, clusters) == c).count();
        async move {
            common::wait_all_ready(api, &selector, count, DEADLINE).await;
            start.elapsed()
        }
    }))
    .await
}

/// Each plane's share of the install: its bundles, their Ready time and stored ConfigMaps.
async fn cluster_figures(planes: &[Plane], n: usize, ready: &[Duration]) -> Vec<ClusterFigures> {
    let mut figures = Vec::with_capacity(planes.len());
    for (c, (plane, ready)) in planes.iter().zip(ready).enumerate() {
        figures.push(ClusterFigures {
            name: plane.name.clone(),
            bundles: (0..n).filter(|i| plane_of(*i, planes.len()) == c).count(),
            ready: *ready,
            objects: plane.bundle_objects().await,
        });
    }
    figures
}

#[tokio::main]
async fn main() {
    pallet::tls::install_crypto_provider();
    let fx = Fixtures::load();
    let registry = fx.registry_plain().clone();
    let n: usize = env_or("PALLET_BENCH_BUNDLES_N", 10_000);
    let steady_seconds: u64 = env_or("PALLET_BENCH_BUNDLES_STEADY_SECONDS", 360);
    let requeue = std::env::var("PALLET_BENCH_BUNDLES_REQUEUE")
        .ok()
        .filter(|r| !r.is_empty());
    let clusters: usize = env_or("PALLET_BENCH_BUNDLES_CLUSTERS", 3);
    assert!(n > 0, "PALLET_BENCH_BUNDLES_N=0: at least one bundle");
    assert!(
        clusters > 0,
        "PALLET_BENCH_BUNDLES_CLUSTERS=0: at least the management plane"
    );
    let work = tempfile::tempdir().expect("temp dir");
    let run = cluster::unique_name("bundles");
    let selector = format!("{RUN_LABEL}={run}");
    let registry_prefix = format!("/v2/{run}/");

    println!();
    println!("bundles benchmark  run={run}  N={n}  control planes={clusters}");
    println!("{}", common::machine());
    println!(
        "each bundle: one ConfigMap from its own OCI artifact pinned by digest, format plain, one namespace; \
         agent: release build, defaults, requeue {}; control planes: private ones per side (stand-in, pallet)",
        requeue.as_deref().unwrap_or("5m (the default)")
    );
    println!(
        "control planes: the management plane (the agent's own: every BundleDeployment, status and snapshot) and {} target(s) through spec.kubeConfig \
         (a kubeconfig Secret in namespace {CLUSTERS_NAMESPACE}, which the agent may read Secrets from); bundles round-robin, 1/{clusters} each; \
         the stand-in applies each ConfigMap on its plane directly and writes statuses on the management plane",
        clusters - 1
    );

    eprintln!("[N={n}] pushing {n} artifacts ...");
    let start = Instant::now();
    let images: Vec<String> = futures::stream::iter(0..n)
        .map(|i| push_bundle(fx, &registry, work.path(), &run, i))
        .buffered(PUSH_CONCURRENCY)
        .collect()
        .await;
    eprintln!("    pushed in {}", secs(start.elapsed()));
    let bds = write_bds(work.path(), &run, &images, clusters);
    let registry_count = || measure::registry_requests(fx, &registry, &registry_prefix);

    eprintln!("[N={n}] stand-in: the least an agent adds ...");
    let least = {
        let planes = start_planes(work.path(), clusters).await;
        let phase = Phase::begin(&planes, None, registry_count().await).await;
        stand_in(&planes, &bds, &images).await;
        phase.end(&planes, None, registry_count().await).await
    };

    eprintln!("[N={n}] pallet: install ...");
    let planes = start_planes(work.path(), clusters).await;
    write_target_secrets(&planes);
    let plane = &planes[0];
    let mut agent = start_agent(
        &planes,
        work.path(),
        &run,
        &registry.host,
        requeue.as_deref(),
    )
    .await;
    let bd_api: Api<BundleDeployment> = Api::all(plane.client.clone());
    let (install, ready) = {
        let phase = Phase::begin(&planes, Some(&agent), registry_count().await).await;
        let start = Instant::now();
        plane.apply(&bds);
        let ready = wait_ready_by_plane(&bd_api, &selector, n, clusters, start).await;
        let cost = phase
            .end(&planes, Some(&agent), registry_count().await)
            .await;
        (cost, ready)
    };
    let install_rss = proc_mib(agent.pid(), "VmHWM:");
    let clusters_figures = cluster_figures(&planes, n, &ready).await;
    let snapshots = measure::snapshot_secrets(&plane.client).await;

    eprintln!("[N={n}] pallet: steady state for {steady_seconds} s ...");
    let steady = {
        let phase = Phase::begin(&planes, Some(&agent), registry_count().await).await;
        tokio::time::sleep(Duration::from_secs(steady_seconds)).await;
        phase
            .end(&planes, Some(&agent), registry_count().await)
            .await
    };
    let steady_rss = proc_mib(agent.pid(), "VmHWM:");
    // After the steady state: the API server counts its objects about once a minute.
    let storage = plane.storage().await;

    eprintln!("[N={n}] pallet: restart ...");
    let changes_before = common::line_count(&agent.proc.changes);
    drop(agent);
    let restart = {
        let phase = Phase::begin(&planes, None, registry_count().await).await;
        // The same cache directory and change log: a restarted container, not a new pod.
        agent = start_agent(
            &planes,
            work.path(),
            &run,
            &registry.host,
            requeue.as_deref(),
        )
        .await;
        let idle = measure::wait_idle(&agent, n, DEADLINE).await;
        let mut cost = phase
            .end(&planes, Some(&agent), registry_count().await)
            .await;
        cost.time = idle;
        cost
    };
    let restart_rss = proc_mib(agent.pid(), "VmHWM:");
    let restart_changes = common::line_count(&agent.proc.changes);
    let agent_cpu_total = cpu_seconds(agent.pid());

    measure::print_report(&measure::Report {
        n,
        clusters: &clusters_figures,
        least: &least,
        install: &install,
        steady: &steady,
        restart: &restart,
        rss: (install_rss, steady_rss, restart_rss),
        snapshots: &snapshots,
        storage: &storage,
        steady_seconds,
        changes: (changes_before, restart_changes),
    });
    eprintln!("    restarted agent CPU so far {agent_cpu_total:.1} s");
    drop(agent);
}
