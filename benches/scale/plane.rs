//! The scale benchmark's control plane: a private one, its admin, its audited users, and the
//! waits and counts the benchmark asks of it.

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Namespace};
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use pallet::api::BundleDeployment;

use crate::common::audit::AuditLog;
use crate::common::{self, cpu_seconds};
use crate::private_control_plane::PrivateControlPlane;
use crate::{
    cluster, epoch_seconds, profile, shard_user, timeline, AGENT_USER, DEADLINE, KUBECTL_USER,
    SHARDS,
};

/// The control plane under test: a private one, its admin, and its audited users.
pub struct Plane {
    pub plane: PrivateControlPlane,
    pub client: kube::Client,
    pub kubectl_user: PathBuf,
    pub agent_user: PathBuf,
    pub audit: AuditLog,
    /// The control plane's profiler (`PALLET_BENCH_SCALE_PROFILE`).
    pub profiler: Option<profile::Profiler>,
}

impl Plane {
    /// Starts a private control plane of its own, with the BundleDeployment CRD, the audited
    /// users (their kubeconfigs under `work`, replacing the previous plane's: one plane runs at a
    /// time) and the agents' namespace. Each group of phases gets a fresh one, so that no phase
    /// inherits what an earlier one left (the same floor run four times on one control plane
    /// cost it 82 to 111 CPU s; on fresh ones it still rose from round to round, so part of that
    /// drift is the machine's).
    pub async fn start(work: &Path) -> Plane {
        let profiler = profile::Profiler::from_env();
        let plane = PrivateControlPlane::start_with_env(
            profiler.as_ref().map(|p| p.plane_env()).unwrap_or_default(),
        );
        let client = plane.client().await;
        cluster::install_crd(&client).await;
        let dir = plane
            .kubeconfig()
            .parent()
            .expect("kubeconfig in the state dir")
            .to_path_buf();
        let mut plane = Plane {
            kubectl_user: PathBuf::new(),
            agent_user: PathBuf::new(),
            audit: AuditLog::new(&dir),
            client,
            plane,
            profiler,
        };
        plane.kubectl_user = plane.user(work, KUBECTL_USER);
        plane.agent_user = plane.user(work, AGENT_USER);
        for shard in SHARDS {
            plane.user(work, &shard_user(shard));
        }
        plane.admin(&["create", "namespace", "pallet-system"]);
        plane
    }

    /// Where [`Plane::user`] writes user `name`'s kubeconfig.
    pub fn user_path(work: &Path, name: &str) -> PathBuf {
        work.join(format!("{name}.kubeconfig"))
    }

    /// Deletes the BundleDeployments matching `selector` and waits until they are gone (their
    /// agents must still run: the finalizer is theirs to remove).
    pub async fn delete_bundle_deployments(&self, selector: &str) {
        let bds: Api<BundleDeployment> = Api::all(self.client.clone());
        self.admin(&[
            "delete",
            "bundledeployments",
            "-l",
            selector,
            "--wait=false",
        ]);
        common::wait_gone(&bds, selector, DEADLINE).await;
    }

    pub fn dir(&self) -> PathBuf {
        self.plane
            .kubeconfig()
            .parent()
            .expect("kubeconfig in the state dir")
            .to_path_buf()
    }

    /// A kubeconfig for audited user `name` (cluster-admin), written under `work`.
    pub fn user(&self, work: &Path, name: &str) -> PathBuf {
        let out = Plane::user_path(work, name);
        self.plane
            .script_args(&["user", name, out.to_str().expect("utf-8 path")]);
        out
    }

    pub fn pid(&self) -> u32 {
        std::fs::read_to_string(self.dir().join("pid"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .expect("the control plane's pid file")
    }

    pub fn cpu(&self) -> f64 {
        cpu_seconds(self.pid())
    }

    /// Applies `file` as its user would, in one invocation: `kubectl apply --server-side`, the
    /// floor's method. (Client-side apply would send a GET before each object and store a copy
    /// of it in an annotation that every later write and watch event carries.)
    /// kubectl sends one request at a time, each waiting behind the agent's, so at 1,000 apps
    /// this takes nearly the whole install: the agent follows the objects as they appear.
    pub fn apply_file(&self, file: &Path) {
        self.admin(&[
            "apply",
            "--server-side",
            "--field-manager=bench-user",
            "-f",
            file.to_str().expect("utf-8 path"),
        ]);
    }

    /// What the control plane has done so far (see [`timeline::PlaneWork`]).
    pub async fn plane_work(&self) -> timeline::PlaneWork {
        timeline::PlaneWork::parse(&common::control_plane_metrics(&self.client).await)
    }

    pub fn admin(&self, args: &[&str]) -> String {
        common::kubectl_with(&self.plane.kubeconfig(), args)
    }

    pub fn as_kubectl_user(&self, args: &[&str]) -> String {
        common::kubectl_with(&self.kubectl_user, args)
    }

    pub fn fake_kubelet_namespace(&self, name: &str) {
        self.admin(&["create", "namespace", name]);
        self.admin(&["label", "namespace", name, "pallet.dev/fake-kubelet=on"]);
    }

    pub async fn delete_namespace(&self, name: &str) {
        self.admin(&["delete", "namespace", name, "--wait=false"]);
        let api: Api<Namespace> = Api::all(self.client.clone());
        cluster::poll_until(&format!("namespace {name} gone"), DEADLINE, || async {
            match api.get_opt(name).await {
                Ok(None) => Ok(()),
                Ok(Some(ns)) => Err(format!("{:?}", ns.status.and_then(|s| s.phase))),
                Err(e) => Err(e.to_string()),
            }
        })
        .await;
    }

    /// Pod creations refused in `namespace` so far: the `FailedCreate` Events of its ReplicaSets,
    /// with their repeat counts (for example a Pod created before its ServiceAccount existed).
    pub async fn refused_pods(&self, namespace: &str) -> u64 {
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let events = api
            .list(&ListParams::default().fields("reason=FailedCreate"))
            .await
            .expect("listing Events");
        events
            .items
            .iter()
            .map(|e| e.count.map_or(1, |c| c.max(1) as u64))
            .sum()
    }

    /// A floor phase's timeline with the steps of the Deployments in `namespace`: created (when
    /// the phase `creates` them) and rolled out (the `Progressing` condition's
    /// `NewReplicaSetAvailable`, updated when the latest ReplicaSet became available), and the
    /// control plane's work since `plane_before`.
    pub async fn deployment_steps(
        &self,
        timeline: timeline::Timeline,
        plane_before: &timeline::PlaneWork,
        namespace: &str,
        creates: bool,
    ) -> timeline::Timeline {
        let work = self.plane_work().await.since(plane_before);
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), namespace);
        let deployments = api
            .list(&ListParams::default())
            .await
            .expect("listing Deployments")
            .items;
        let created = deployments
            .iter()
            .filter_map(|d| d.metadata.creation_timestamp.as_ref().map(epoch_seconds));
        let rolled_out: Vec<f64> = deployments
            .iter()
            .filter_map(|d| {
                d.status
                    .as_ref()?
                    .conditions
                    .as_ref()?
                    .iter()
                    .find(|c| {
                        c.type_ == "Progressing"
                            && c.reason.as_deref() == Some("NewReplicaSetAvailable")
                    })?
                    .last_update_time
                    .as_ref()
                    .map(epoch_seconds)
            })
            .collect();
        timeline
            .created(creates, created.collect())
            .with("rolled out", rolled_out)
            .with_plane_work(work)
    }

    /// Waits until every Deployment in `namespace` (`expected` of them) is Available for its
    /// current generation with every replica updated.
    pub async fn wait_available(&self, namespace: &str, expected: usize) {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), namespace);
        common::watch_until(
            api,
            watcher::Config::default(),
            expected,
            DEADLINE,
            is_available,
            |d| format!("{:?}", d.status),
        )
        .await;
    }
}

pub fn is_available(d: &Deployment) -> bool {
    let Some(status) = &d.status else {
        return false;
    };
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    status.observed_generation == d.metadata.generation
        && status.updated_replicas.unwrap_or(0) == want
        && status.available_replicas.unwrap_or(0) == want
        && status.replicas.unwrap_or(0) == want
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Available" && c.status == "True")
}
