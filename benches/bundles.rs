//! Bundles benchmark (figures, not a test): one agent and `PALLET_BENCH_BUNDLES_N` (default
//! 10,000) BundleDeployments, on a control plane of its own (`tools/controlplane.sh` on another
//! port and state directory, so its CPU and audit log hold this benchmark's load only).
//!
//! Each bundle is cheap on purpose: one ConfigMap from its own OCI artifact in the fixture
//! registry, pinned by digest (`format: plain`, all in one `installNamespace`). No Pods: a
//! Deployment per bundle would measure the scheduler and the kubelet, not the agent.
//!
//! In one run:
//!
//! - the least-work stand-in (the scale benchmark's floor m, `common/least_work.rs`) on a fresh
//!   control plane: the user's BundleDeployments created with one `kubectl apply
//!   --server-side`, each artifact pulled, its ConfigMap applied and one status written, by this
//!   process; the least any agent of this shape adds;
//! - install, on another fresh control plane: the same BundleDeployments created at once, time
//!   until all are Ready, the agent's peak RSS, its API requests per bundle (audit log), status
//!   writes and their rate, registry requests, CPU; then the snapshot Secrets it stored (count,
//!   data bytes, whole objects' bytes) and the control plane's storage (etcd's database size,
//!   objects per resource);
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
use measure::{Phase, Plane};
use pallet::api::BundleDeployment;
use serde_json::json;
use support::{Fixtures, Server};

/// Labels the benchmark's BundleDeployments (value: the run); the agent selects it.
const RUN_LABEL: &str = "bench.pallet.dev/bundles";
/// Where every bundle installs its ConfigMap.
const NAMESPACE: &str = "bundles";
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

/// The N BundleDeployments, one file.
fn write_bds(work: &Path, run: &str, images: &[String]) -> PathBuf {
    let yaml: String = images
        .iter()
        .enumerate()
        .map(|(i, image)| {
            format!(
                "---
apiVersion: pallet.dev/v1alpha1
kind: BundleDeployment
metadata:
  name: {}
  labels: {{{RUN_LABEL}: {run}}}
spec:
  installNamespace: {NAMESPACE}
  sources:
  - kind: image
    image: {{ref: \"{image}\"}}
  format: plain
",
                bundle_name(i)
            )
        })
        .collect();
    let file = work.join("bundles.yaml");
    std::fs::write(&file, yaml).expect("writing the BundleDeployments");
    file
}

/// The stand-in: the user's apply of `bds` while each artifact of `images` is pulled and its
/// ConfigMap applied, then one status per BundleDeployment.
async fn stand_in(plane: &Plane, bds: &Path, images: &[String]) {
    let create = least_work::user_apply_in_background(plane.plane.kubeconfig(), bds.to_path_buf());
    let client = private_control_plane::client_from(&plane.agent_user).await;
    let http = reqwest::Client::new();
    futures::stream::iter(images.iter().enumerate())
        .for_each_concurrent(IN_FLIGHT, |(i, image)| {
            let (http, client) = (&http, &client);
            async move {
                least_work::pull(http, image).await;
                least_work::apply_objects(client, NAMESPACE, &bundle_yaml(i)).await;
            }
        })
        .await;
    create.await.expect("the user's kubectl apply");
    let api: Api<BundleDeployment> = Api::all(client.clone());
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

/// Starts the agent under test on `plane` (`requeue`: its `--requeue-interval`, or its default).
async fn start_agent(
    plane: &Plane,
    work: &Path,
    run: &str,
    registry: &str,
    requeue: Option<&str>,
) -> Agent {
    let extra: Vec<String> = requeue
        .map(|r| vec!["--requeue-interval".to_string(), r.to_string()])
        .unwrap_or_default();
    Agent::start_with_args(
        Path::new(env!("CARGO_BIN_EXE_pallet")),
        &plane.agent_user,
        work,
        "agent",
        &format!("{RUN_LABEL}={run}"),
        registry,
        &extra,
    )
    .await
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
    assert!(n > 0, "PALLET_BENCH_BUNDLES_N=0: at least one bundle");
    let work = tempfile::tempdir().expect("temp dir");
    let run = cluster::unique_name("bundles");
    let selector = format!("{RUN_LABEL}={run}");
    let registry_prefix = format!("/v2/{run}/");

    println!();
    println!("bundles benchmark  run={run}  N={n}");
    println!("{}", common::machine());
    println!(
        "each bundle: one ConfigMap from its own OCI artifact pinned by digest, format plain, one namespace; \
         agent: release build, defaults, requeue {}; control plane: a private one per phase group",
        requeue.as_deref().unwrap_or("5m (the default)")
    );

    eprintln!("[N={n}] pushing {n} artifacts ...");
    let start = Instant::now();
    let images: Vec<String> = futures::stream::iter(0..n)
        .map(|i| push_bundle(fx, &registry, work.path(), &run, i))
        .buffered(PUSH_CONCURRENCY)
        .collect()
        .await;
    eprintln!("    pushed in {}", secs(start.elapsed()));
    let bds = write_bds(work.path(), &run, &images);
    let registry_count = || measure::registry_requests(fx, &registry, &registry_prefix);

    eprintln!("[N={n}] stand-in: the least an agent adds ...");
    let least = {
        let plane = Plane::start(work.path()).await;
        let phase = Phase::begin(&plane, None, registry_count().await).await;
        stand_in(&plane, &bds, &images).await;
        phase.end(&plane, None, registry_count().await).await
    };

    eprintln!("[N={n}] pallet: install ...");
    let plane = Plane::start(work.path()).await;
    let mut agent = start_agent(
        &plane,
        work.path(),
        &run,
        &registry.host,
        requeue.as_deref(),
    )
    .await;
    let bd_api: Api<BundleDeployment> = Api::all(plane.client.clone());
    let install = {
        let phase = Phase::begin(&plane, Some(&agent), registry_count().await).await;
        plane.apply(&bds);
        common::wait_all_ready(&bd_api, &selector, n, DEADLINE).await;
        phase
            .end(&plane, Some(&agent), registry_count().await)
            .await
    };
    let install_rss = proc_mib(agent.pid(), "VmHWM:");
    let snapshots = measure::snapshot_secrets(&plane.client).await;

    eprintln!("[N={n}] pallet: steady state for {steady_seconds} s ...");
    let steady = {
        let phase = Phase::begin(&plane, Some(&agent), registry_count().await).await;
        tokio::time::sleep(Duration::from_secs(steady_seconds)).await;
        phase
            .end(&plane, Some(&agent), registry_count().await)
            .await
    };
    let steady_rss = proc_mib(agent.pid(), "VmHWM:");
    // After the steady state: the API server counts its objects about once a minute.
    let storage = plane.storage().await;

    eprintln!("[N={n}] pallet: restart ...");
    let changes_before = common::line_count(&agent.proc.changes);
    drop(agent);
    let restart = {
        let phase = Phase::begin(&plane, None, registry_count().await).await;
        // The same cache directory and change log: a restarted container, not a new pod.
        agent = start_agent(
            &plane,
            work.path(),
            &run,
            &registry.host,
            requeue.as_deref(),
        )
        .await;
        let idle = measure::wait_idle(&agent, n, DEADLINE).await;
        let mut cost = phase
            .end(&plane, Some(&agent), registry_count().await)
            .await;
        cost.time = idle;
        cost
    };
    let restart_rss = proc_mib(agent.pid(), "VmHWM:");
    let restart_changes = common::line_count(&agent.proc.changes);
    let agent_cpu_total = cpu_seconds(agent.pid());

    measure::print_report(&measure::Report {
        n,
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
