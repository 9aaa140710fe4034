//! Floors m and m2: the least any agent of this shape must add to the floors b and b2.
//!
//! An agent that installs each app from its own OCI artifact through its own BundleDeployment
//! cannot do less than: the user creates (or updates) the N BundleDeployments; the agent pulls
//! each artifact (the manifest by digest and its one layer: two registry requests), applies its
//! 4 objects, and writes one status per BundleDeployment saying it is Ready. Here this
//! benchmark's own process does exactly that and nothing more, as cheaply as it can: while the
//! user's `kubectl apply` of the BundleDeployments runs, it pulls each app and applies its
//! objects by server-side apply (eight apps at a time, as the agent), then writes the statuses
//! while the Deployments become Available. No watch, no finalizer, no snapshot, no Event, no
//! rendering, no health check.
//!
//! So m's work is the least such an agent can add to b's, and m2's the least it can add to
//! b2's: the machine's CPU of m over b's is a floor for any agent's, and where the two cores
//! are busy throughout (as at 1,000 apps), time follows CPU. On a machine with idle cores
//! (100 apps) the order of the work matters too, and an agent that overlaps more can beat m's
//! time, not its CPU.
//!
//! The BundleDeployments carry [`LEAST_LABEL`] and not the label the benchmark's agents select,
//! so no agent would act on them even on a shared control plane.

use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use pallet::api::BundleDeployment;
use serde_json::json;

use crate::common::least_work;
use crate::flux::RegistryFilter;
use crate::plane::Plane;
use crate::support::{Fixtures, Server};
use crate::{app_yaml, common, profile, timeline, write_bds, Images, RoundOf};

/// Labels the BundleDeployments of floors m and m2 (value: the run), which no agent selects.
const LEAST_LABEL: &str = "bench.pallet.dev/least";
/// Apps (pull, then apply) and status writes in flight at once: the agent's default apply
/// parallelism.
const IN_FLIGHT: usize = 8;
/// The kinds (and groups) of an app's objects, as its inventory names them.
const APP_KINDS: [(&str, &str); 4] = [
    ("ServiceAccount", ""),
    ("ConfigMap", ""),
    ("Service", ""),
    ("Deployment", "apps"),
];

/// What one of the floors m and m2 took.
pub struct LeastPhase {
    pub time: Duration,
    pub plane_cpu: f64,
    /// This benchmark's process (the stand-in agent, and the wait's watch).
    pub stand_in_cpu: f64,
    /// Registry requests for this size's artifacts.
    pub registry: usize,
    pub timeline: timeline::Timeline,
}

impl LeastPhase {
    /// The machine's CPU over the phase (cores busy on average times the phase's length).
    pub fn machine_cpu(&self) -> f64 {
        self.timeline.machine().0 * self.time.as_secs_f64()
    }

    /// Prints the phase as `label`, with its ratios to the kubectl floor (`floor_time`,
    /// `floor_plane_cpu`, `floor_machine_cpu`).
    pub fn print(
        &self,
        label: &str,
        n: usize,
        floor_time: Duration,
        floor_plane_cpu: f64,
        floor_machine_cpu: f64,
    ) {
        println!(
            "{label:<58} {:>10} {:>10}",
            common::secs(self.time),
            common::ratio(self.time, floor_time)
        );
        println!(
            "   control plane CPU {:.1} s ({:.2}x the floor's); the stand-in agent (this benchmark's process) {:.1} CPU s; machine CPU {:.1} s ({:.2}x the floor's); registry requests {} ({:.1} per app)",
            self.plane_cpu,
            self.plane_cpu / floor_plane_cpu.max(0.001),
            self.stand_in_cpu,
            self.machine_cpu(),
            self.machine_cpu() / floor_machine_cpu.max(0.001),
            self.registry,
            self.registry as f64 / n as f64
        );
        self.timeline.print();
    }
}

/// Floors m (install) and m2 (upgrade) of one size.
pub struct Least {
    pub install: LeastPhase,
    pub upgrade: LeastPhase,
}

/// Measures m then m2 in a namespace of their own.
pub async fn least_floors(
    plane: &Plane,
    fx: &Fixtures,
    (registry, images): (&Server, Images<'_>),
    work: &Path,
    run: &str,
    at: RoundOf,
) -> Least {
    let (n, suffix) = (at.n, at.suffix());
    let ns = format!("{run}-m{n}{suffix}");
    plane.fake_kubelet_namespace(&ns);
    let labels = format!("{LEAST_LABEL}: {run}");
    let name = |i: usize| format!("m{n}-app-{i:04}{suffix}");
    let bd_file = |version: &str, images: &[String]| {
        write_bds(
            work,
            &format!("least-{n}-{version}.yaml"),
            &ns,
            images,
            |i| (name(i), labels.clone()),
        )
    };
    let filter = RegistryFilter::new(registry, run, n);
    let phase = |version: &'static str, images: &[String]| {
        let bds = bd_file(version, images);
        let names: Vec<String> = (0..n).map(name).collect();
        let refs = images.to_vec();
        let (ns, filter) = (ns.clone(), &filter);
        let profile = format!(
            "{n}-{}-least{suffix}",
            if version == "v1" { "m" } else { "m2" }
        );
        async move {
            let registry_before = filter.count(fx).await;
            let cpu_before = (plane.cpu(), common::cpu_seconds(std::process::id()));
            let plane_before = plane.plane_work().await;
            let sampler = timeline::Sampler::start(plane.pid(), Some(std::process::id()));
            let start = Instant::now();
            profile::profiled(plane.profiler.as_ref(), &profile, async {
                stand_in(plane, &ns, &bds, &refs, &names, version).await
            })
            .await;
            let time = start.elapsed();
            let timeline = plane
                .deployment_steps(sampler.stop(), &plane_before, &ns, version == "v1")
                .await;
            LeastPhase {
                time,
                plane_cpu: plane.cpu() - cpu_before.0,
                stand_in_cpu: common::cpu_seconds(std::process::id()) - cpu_before.1,
                registry: filter.count(fx).await - registry_before,
                timeline,
            }
        }
    };
    let install = phase("v1", images.v1).await;
    let upgrade = phase("v2", images.v2).await;
    Least { install, upgrade }
}

/// The user's apply of `bds` (the BundleDeployments) while each app's artifact of `refs` is
/// pulled and its objects applied; then one status write per BundleDeployment of `names`
/// while the Deployments of `ns` become Available.
async fn stand_in(
    plane: &Plane,
    ns: &str,
    bds: &Path,
    refs: &[String],
    names: &[String],
    version: &str,
) {
    // As in c: the user's apply as the (unaudited) admin, the agent's requests as the audited
    // agent user, so the API server's audit log costs the same on both sides.
    let create = least_work::user_apply_in_background(plane.plane.kubeconfig(), bds.to_path_buf());
    let client = crate::private_control_plane::client_from(&plane.agent_user).await;
    let http = reqwest::Client::new();
    futures::stream::iter(refs.iter().enumerate())
        .for_each_concurrent(IN_FLIGHT, |(i, image)| {
            let (http, client) = (&http, &client);
            async move {
                least_work::pull(http, image).await;
                least_work::apply_objects(client, ns, &app_yaml(i, version)).await;
            }
        })
        .await;
    create.await.expect("the user's kubectl apply");
    let api: Api<BundleDeployment> = Api::all(client.clone());
    let revision = if version == "v1" { 1 } else { 2 };
    let statuses = futures::stream::iter(names.iter().zip(refs)).for_each_concurrent(
        IN_FLIGHT,
        |(name, image)| {
            let api = api.clone();
            let app = name.trim_start_matches(|c| c != 'a');
            let body =
                json!({ "status": least_work::ready_status(ns, app, image, revision, &APP_KINDS) });
            async move {
                api.patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
                    .await
                    .expect("writing a BundleDeployment's status");
            }
        },
    );
    tokio::join!(statuses, plane.wait_available(ns, names.len()));
}
