//! End-to-end: helm hooks run at their events by the `pallet agent` binary on the local control
//! plane (chart `testdata/charts/hooks`, pushed to the fixture registry): pre-install hooks before
//! the release's objects, in weight order, post-install hooks once they are healthy, delete
//! policies, an upgrade that changes a hook Job's template, hooks that do not run again on a
//! later pass, and a failing pre-upgrade hook rolled back with the hook named.
//!
//! Workloads: the control plane's fake kubelet runs Pods in namespaces labelled
//! `pallet.dev/fake-kubelet=on` and completes the Pods of Jobs (fails them for an image tag
//! ending in `broken`), so the real Job controller marks hook Jobs Complete or Failed.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent::Agent;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use oci_client::secrets::RegistryAuth;
use pallet::api::conditions::find;
use pallet::api::{BundleDeployment, BundleDeploymentStatus, HookPhase, RevisionPhase};
use serde_json::{json, Value};

/// A chart directory under the repository's `testdata/charts`.
fn test_chart(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/charts")).join(name)
}

/// A helm chart installed by a test agent: the chart is pushed once as an image, and each
/// [`Release::install`] applies the BundleDeployment with new values (a new revision).
/// Works for any chart directory, e.g. one of `/work/shared/conformance/helm/charts/<name>`.
struct Release {
    client: Client,
    /// BundleDeployment, namespace and release name.
    name: String,
    source: Value,
    agent: Agent,
}

impl Release {
    /// Pushes `chart` to the fixture registry, creates the install namespace with the fake
    /// kubelet switched on, and starts an agent for it.
    async fn start(prefix: &str, chart: &Path) -> Release {
        let client = cluster::client().await;
        cluster::install_crd(&client).await;
        let fixtures = support::Fixtures::load();
        let name = support::unique_name(prefix);
        let registry = fixtures.registry_plain();
        fixtures
            .push_dir_as_image(registry, &name, "v1", chart, &RegistryAuth::Anonymous)
            .await
            .expect("the chart is pushed");
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"pallet.dev/fake-kubelet": "on"}}});
        Api::<Namespace>::all(client.clone())
            .patch(
                &name,
                &PatchParams::apply(cluster::TEST_FIELD_MANAGER),
                &Patch::Apply(&namespace),
            )
            .await
            .unwrap();
        let agent = Agent::start_with(&name, &["--plain-http-registry", &registry.host]);
        let source =
            json!({"kind": "image", "image": {"ref": format!("{}/{name}:v1", registry.host)}});
        Release {
            client,
            name,
            source,
            agent,
        }
    }

    /// Applies the BundleDeployment with `values` (a new spec generation when they change).
    async fn install(&self, values: Value) {
        agent::apply_bd(
            &self.client,
            &self.name,
            json!({
                "installNamespace": self.name,
                "sources": [self.source],
                "format": "helm",
                "config": {"helm": {"releaseName": "rel", "values": values}},
                "rollout": {"progressDeadline": "90s"},
            }),
        )
        .await;
    }

    async fn status(&self) -> BundleDeploymentStatus {
        Api::<BundleDeployment>::all(self.client.clone())
            .get(&self.name)
            .await
            .unwrap()
            .status
            .unwrap_or_default()
    }

    /// Polls the status until `check` accepts it; panics with the last status and the agent log.
    async fn wait<F>(&self, what: &str, check: F) -> BundleDeploymentStatus
    where
        F: Fn(&BundleDeploymentStatus) -> Result<(), String>,
    {
        let timeout = Duration::from_secs(120);
        let start = Instant::now();
        loop {
            let status = self.status().await;
            match check(&status) {
                Ok(()) => return status,
                Err(last) if start.elapsed() > timeout => panic!(
                    "timed out after {timeout:?} waiting for {what}: {last}\nstatus: {}\nagent log:\n{}",
                    summary(&status),
                    self.agent.log_tail()
                ),
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }

    async fn wait_healthy(&self, number: i64) -> BundleDeploymentStatus {
        self.wait(&format!("revision {number} active and healthy"), |st| {
            let phase = st
                .revisions
                .iter()
                .find(|r| r.number == number)
                .map(|r| r.phase);
            let ready = find(&st.conditions, "Ready").is_some_and(|c| c.status == "True");
            if st.active_revision == Some(number) && phase == Some(RevisionPhase::Healthy) && ready
            {
                Ok(())
            } else {
                Err(format!("revision {number}: {phase:?}"))
            }
        })
        .await
    }

    fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.client.clone(), &self.name)
    }

    fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// Hook writes and release-object creates from the change log, in order, as
    /// `operation reason name`.
    fn writes(&self) -> Vec<String> {
        self.agent
            .change_entries()
            .iter()
            .filter(|e| e["bundleDeployment"] == self.name.as_str())
            .map(|e| {
                format!(
                    "{} {} {}",
                    e["operation"].as_str().unwrap_or(""),
                    e["reason"].as_str().unwrap_or(""),
                    e["object"]["name"].as_str().unwrap_or("")
                )
            })
            .collect()
    }
}

fn summary(status: &BundleDeploymentStatus) -> String {
    let revisions: Vec<String> = status
        .revisions
        .iter()
        .map(|r| {
            let hooks: Vec<String> = r
                .hooks
                .iter()
                .map(|h| format!("{} {}={:?}", h.event, h.object.name, h.phase))
                .collect();
            format!("{}:{:?} {hooks:?}", r.number, r.phase)
        })
        .collect();
    let conditions: Vec<String> = status
        .conditions
        .iter()
        .map(|c| format!("{}={} {} ({})", c.type_, c.status, c.reason, c.message))
        .collect();
    format!(
        "revisions {revisions:#?}, active {:?}, conditions {conditions:#?}",
        status.active_revision
    )
}

/// The `MESSAGE` a hook Job's container is given.
fn job_message(job: &Job) -> String {
    job.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .env
        .as_ref()
        .unwrap()[0]
        .value
        .clone()
        .unwrap_or_default()
}

fn position(writes: &[String], entry: &str) -> usize {
    writes
        .iter()
        .position(|w| w == entry)
        .unwrap_or_else(|| panic!("no change-log entry {entry:?} in {writes:#?}"))
}

#[tokio::test]
async fn helm_hooks_run_in_order_upgrade_replaces_hook_jobs_and_a_failed_hook_rolls_back() {
    let r = Release::start("hooks", &test_chart("hooks")).await;

    // Revision 1, an install: pre-install hooks by weight (migrate -5, seed 0), then the
    // release's objects, then, once they are healthy, the post-install hook.
    r.install(json!({"message": "one"})).await;
    let v1 = r.wait_healthy(1).await;
    let writes = r.writes();
    let migrate = position(&writes, "create hook rel-migrate");
    let seed = position(&writes, "create hook rel-seed");
    let seed_deleted = position(&writes, "delete hook rel-seed");
    let config = position(&writes, "create new-revision rel-config");
    let app = position(&writes, "create new-revision rel-app");
    let announce = position(&writes, "create hook rel-announce");
    assert!(
        migrate < seed
            && seed < seed_deleted
            && seed_deleted < config
            && config.max(app) < announce,
        "install order: {writes:#?}"
    );
    // The post-install hook came after the release was healthy: the Deployment was Available
    // before the announce Job was created.
    let deployment: Deployment = Api::namespaced(r.client.clone(), &r.name)
        .get("rel-app")
        .await
        .unwrap();
    let available = deployment
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Available" && c.status == "True")
        .and_then(|c| c.last_transition_time)
        .expect("the Deployment is Available");
    let announce_job = r.jobs().get("rel-announce").await.unwrap();
    assert!(announce_job.metadata.creation_timestamp.unwrap().0 >= available.0);
    // Delete policies: seed (hook-succeeded) is gone; migrate (default before-hook-creation)
    // and announce stay, Complete. The test hook never ran; the post-upgrade hook neither.
    assert!(r.jobs().get_opt("rel-seed").await.unwrap().is_none());
    let migrate_v1 = r.jobs().get("rel-migrate").await.unwrap();
    assert_eq!(job_message(&migrate_v1), "one");
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(r.client.clone(), &r.name);
    assert!(pods.get_opt("rel-test").await.unwrap().is_none());
    assert!(r
        .config_maps()
        .get_opt("rel-upgraded")
        .await
        .unwrap()
        .is_none());
    // Hooks are not release objects: not in the inventory, so never pruned or drift-corrected.
    let inventory: Vec<String> = v1
        .inventory
        .as_ref()
        .unwrap()
        .objects
        .iter()
        .map(|o| o.name.clone())
        .collect();
    assert!(
        !inventory.iter().any(|n| n.starts_with("rel-migrate")),
        "{inventory:?}"
    );
    let runs: Vec<String> = v1.revisions[0]
        .hooks
        .iter()
        .map(|h| format!("{} {} {:?}", h.event, h.object.name, h.phase))
        .collect();
    assert_eq!(
        runs,
        [
            "pre-install rel-migrate Succeeded",
            "pre-install rel-seed Succeeded",
            "post-install rel-announce Succeeded"
        ]
    );

    // Revision 2, an upgrade changing the migrate Job's template (spec.template is immutable):
    // before-hook-creation deletes the old Job, the new one runs; post-upgrade runs.
    r.install(json!({"message": "two"})).await;
    r.wait_healthy(2).await;
    let migrate_v2 = r.jobs().get("rel-migrate").await.unwrap();
    assert_eq!(job_message(&migrate_v2), "two");
    assert_ne!(
        migrate_v2.metadata.uid, migrate_v1.metadata.uid,
        "a new Job"
    );
    let upgraded = r.config_maps().get("rel-upgraded").await.unwrap();
    assert_eq!(upgraded.data.unwrap()["message"], "two");
    let config = r.config_maps().get("rel-config").await.unwrap();
    assert_eq!(config.data.unwrap()["message"], "two");
    // Install-only hooks did not run again; announce was not pruned.
    let announce_v2 = r.jobs().get("rel-announce").await.unwrap();
    assert_eq!(announce_v2.metadata.uid, announce_job.metadata.uid);
    assert!(r.jobs().get_opt("rel-seed").await.unwrap().is_none());
    let writes = r.writes();
    let deleted = position(&writes, "delete hook rel-migrate");
    assert!(
        writes[deleted + 1..].contains(&"create hook rel-migrate".to_string()),
        "{writes:#?}"
    );

    // A later pass of the same revision runs no hook again and writes nothing.
    let before = r.writes().len();
    let token = "hooks-steady-1";
    let bds: Api<BundleDeployment> = Api::all(r.client.clone());
    let patch =
        json!({"metadata": {"annotations": {pallet::api::REQUESTED_RECONCILE_ANNOTATION: token}}});
    bds.patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    r.wait("the reconcile request handled", |st| {
        if st.last_handled_reconcile.as_deref() == Some(token) {
            Ok(())
        } else {
            Err("not handled yet".into())
        }
    })
    .await;
    assert_eq!(
        r.writes()[before..],
        [] as [String; 0],
        "steady state writes nothing"
    );
    let migrate_again = r.jobs().get("rel-migrate").await.unwrap();
    assert_eq!(migrate_again.metadata.uid, migrate_v2.metadata.uid);

    // Revision 3: its pre-upgrade hook fails (broken image, no retries). The release's objects
    // are never touched, the revision fails and revision 2 returns; the conditions name the hook.
    r.install(json!({"message": "three", "hookImage": "x.invalid/hooks-migrate:v3-broken"}))
        .await;
    let status = r
        .wait("revision 3 failed and rolled back to revision 2", |st| {
            let failed = st
                .revisions
                .iter()
                .any(|r| r.number == 3 && r.phase == RevisionPhase::Failed);
            let back = st.active_revision == Some(2)
                && st
                    .revisions
                    .iter()
                    .any(|r| r.number == 2 && r.phase == RevisionPhase::Healthy);
            let rolled = find(&st.conditions, "RolledBack").is_some_and(|c| c.status == "True");
            if failed && back && rolled {
                Ok(())
            } else {
                Err("not rolled back yet".into())
            }
        })
        .await;
    let hook = format!("pre-upgrade hook Job {}/rel-migrate", r.name);
    let rolled_back = find(&status.conditions, "RolledBack").unwrap();
    assert!(
        rolled_back.message.contains(&hook) && rolled_back.message.contains("BackoffLimitExceeded"),
        "{}",
        rolled_back.message
    );
    let ready = find(&status.conditions, "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "RolledBack")
    );
    assert!(ready.message.contains(&hook), "{}", ready.message);
    let revision3 = status.revisions.iter().find(|r| r.number == 3).unwrap();
    assert_eq!(revision3.reason.as_deref(), Some("HookFailed"));
    assert_eq!(revision3.hooks[0].phase, HookPhase::Failed);
    let config = r.config_maps().get("rel-config").await.unwrap();
    assert_eq!(
        config.data.unwrap()["message"],
        "two",
        "revision 3's objects never applied"
    );
    // The failure is also an Event naming the hook.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(r.client.clone());
    let notes: Vec<String> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|o| o.name.as_deref()) == Some(&r.name))
        .filter(|e| e.reason.as_deref() == Some("HookFailed"))
        .filter_map(|e| e.note)
        .collect();
    assert!(notes.iter().any(|n| n.contains(&hook)), "{notes:#?}");

    Api::<BundleDeployment>::all(r.client.clone())
        .delete(&r.name, &Default::default())
        .await
        .unwrap();
    agent::wait_bd_gone(&r.client, &r.name).await;
    let _ = Api::<Namespace>::all(r.client.clone())
        .delete(&r.name, &Default::default())
        .await;
}
