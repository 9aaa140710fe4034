//! End-to-end: revisions, health, automatic and requested rollback, retry, supersede, history,
//! against the local control plane, the git and registry fixtures and the `pallet agent` binary.
//!
//! Workloads: the local control plane has no kubelet, so tests that need a Deployment to become
//! available run [`kubelet::FakeKubelet`], which writes Pod status as a kubelet would; the real
//! ReplicaSet and Deployment controllers do the rest.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/kubelet.rs"]
mod kubelet;
mod support;

use std::time::{Duration, Instant};

use agent::Agent;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use pallet::api::conditions::find;
use pallet::api::{BundleDeployment, BundleDeploymentStatus, RevisionPhase};
use pallet::revision::RevisionStore;
use serde_json::json;

use cluster::{ensure_agent_namespace, AGENT_NAMESPACE};

fn config_map(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
    )
}

/// A ConfigMap in a namespace nobody creates: the API server refuses it (NotFound), midway
/// through an apply whose Namespace stage already ran.
fn config_map_in_missing_namespace(namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stray\n  namespace: {namespace}\ndata:\n  value: \"x\"\n"
    )
}

fn namespace(name: &str) -> String {
    format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n")
}

fn deployment(image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  \
         selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    \
         spec:\n      containers:\n      - name: web\n        image: {image}\n"
    )
}

fn docs(parts: &[String]) -> Vec<u8> {
    parts.join("---\n").into_bytes()
}

struct Scenario {
    client: Client,
    name: String,
    repo: support::GitRepo,
    url: String,
}

impl Scenario {
    async fn new(prefix: &str) -> Scenario {
        let client = cluster::client().await;
        cluster::install_crd(&client).await;
        ensure_agent_namespace(&client).await;
        let fixtures = support::Fixtures::load();
        let name = support::unique_name(prefix);
        let repo = fixtures.git_repo(&name);
        let url = repo.url(fixtures.git_plain());
        Scenario {
            client,
            name,
            repo,
            url,
        }
    }

    fn commit(&self, content: Vec<u8>, message: &str) -> String {
        self.repo
            .commit_files("main", &[("manifests/app.yaml", &content)], message)
    }

    async fn create_bd(&self, rollout: serde_json::Value) {
        let spec = json!({
            "installNamespace": self.name,
            "sources": [{"kind": "git", "git": {"repository": self.url, "ref": {"branch": "main"}}}],
            "format": "plain",
            "rollout": rollout,
        });
        agent::apply_bd(&self.client, &self.name, spec).await;
    }

    fn bds(&self) -> Api<BundleDeployment> {
        Api::all(self.client.clone())
    }

    fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.name)
    }

    async fn annotate(&self, key: &str, value: &str) {
        let patch = json!({"metadata": {"annotations": {key: value}}});
        self.bds()
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Polls the status until `check` accepts it; panics with the last status and the agent log.
    async fn wait_status<F>(
        &self,
        agent: &Agent,
        what: &str,
        timeout: Duration,
        check: F,
    ) -> BundleDeploymentStatus
    where
        F: Fn(&BundleDeploymentStatus) -> Result<(), String>,
    {
        let start = Instant::now();
        loop {
            let status = self
                .bds()
                .get(&self.name)
                .await
                .unwrap()
                .status
                .unwrap_or_default();
            match check(&status) {
                Ok(()) => return status,
                Err(last) if start.elapsed() > timeout => panic!(
                    "timed out after {timeout:?} waiting for {what}: {last}\nstatus: {}\nagent log:\n{}",
                    summary(&status),
                    agent.log_tail()
                ),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// Waits until revision `number` is Progressing (applied, not healthy yet).
    async fn wait_progressing(&self, agent: &Agent, number: i64) -> BundleDeploymentStatus {
        let what = format!("revision {number} progressing");
        self.wait_status(agent, &what, Duration::from_secs(60), |st| {
            check(
                phase(st, number) == Some(RevisionPhase::Progressing),
                "not progressing",
            )
        })
        .await
    }

    /// Waits until revision `number` is active and Healthy.
    async fn wait_healthy(
        &self,
        agent: &Agent,
        number: i64,
        timeout: Duration,
    ) -> BundleDeploymentStatus {
        let what = format!("revision {number} active and healthy");
        self.wait_status(agent, &what, timeout, |st| healthy(st, number))
            .await
    }

    /// Asks for a reconcile and waits until the agent handled it: a whole pass has run since.
    async fn reconcile_now(&self, agent: &Agent, token: &str) -> BundleDeploymentStatus {
        self.annotate(pallet::api::REQUESTED_RECONCILE_ANNOTATION, token)
            .await;
        let token = token.to_string();
        self.wait_status(
            agent,
            "the reconcile request handled",
            Duration::from_secs(60),
            |s| {
                check(
                    s.last_handled_reconcile.as_deref() == Some(token.as_str()),
                    "not handled yet",
                )
            },
        )
        .await
    }

    async fn config_map_value(&self, name: &str) -> Option<String> {
        self.config_maps()
            .get_opt(name)
            .await
            .unwrap()
            .and_then(|cm| cm.data)
            .and_then(|d| d.get("value").cloned())
    }
}

fn check(ok: bool, why: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(why.to_string())
    }
}

/// Revisions as `number:phase`, newest first, active and last healthy, and key conditions.
fn summary(status: &BundleDeploymentStatus) -> String {
    let revisions: Vec<String> = status
        .revisions
        .iter()
        .map(|r| format!("{}:{:?}", r.number, r.phase))
        .collect();
    let conditions: Vec<String> = status
        .conditions
        .iter()
        .map(|c| format!("{}={} {} ({})", c.type_, c.status, c.reason, c.message))
        .collect();
    format!(
        "revisions {revisions:?}, active {:?}, last healthy {:?}, conditions {conditions:#?}",
        status.active_revision, status.last_healthy_revision
    )
}

fn phase(status: &BundleDeploymentStatus, number: i64) -> Option<RevisionPhase> {
    status
        .revisions
        .iter()
        .find(|r| r.number == number)
        .map(|r| r.phase)
}

fn condition<'a>(status: &'a BundleDeploymentStatus, type_: &str) -> (&'a str, &'a str, &'a str) {
    find(&status.conditions, type_)
        .map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
        .unwrap_or(("", "", ""))
}

fn healthy(status: &BundleDeploymentStatus, number: i64) -> Result<(), String> {
    check(
        status.active_revision == Some(number)
            && phase(status, number) == Some(RevisionPhase::Healthy),
        &format!("revision {number} not active and healthy"),
    )
}

fn rolled_back_to(status: &BundleDeploymentStatus, failed: i64, to: i64) -> Result<(), String> {
    check(
        phase(status, failed) == Some(RevisionPhase::Failed)
            && status.active_revision == Some(to)
            && phase(status, to) == Some(RevisionPhase::Healthy)
            && condition(status, "RolledBack").0 == "True",
        &format!("not rolled back from {failed} to {to} yet"),
    )
}

#[tokio::test]
async fn an_apply_error_midway_rolls_back_to_the_last_healthy_revision() {
    let s = Scenario::new("rb-apply").await;
    let extra = format!("{}-extra", s.name);
    s.commit(
        docs(&[config_map("app", "1"), config_map("other", "1")]),
        "v1",
    );
    let agent = Agent::start(&s.name);
    s.create_bd(json!({})).await;
    let v1 = s.wait_healthy(&agent, 1, Duration::from_secs(60)).await;
    assert_eq!(condition(&v1, "Ready").0, "True");
    let v1_app = s.config_maps().get("app").await.unwrap();
    assert_eq!(
        v1_app.metadata.annotations.as_ref().unwrap()["pallet.dev/revision"],
        "1",
        "written objects name the revision that wrote them"
    );

    // v2: a new Namespace (applied in its own stage, before the rest), a changed ConfigMap, and
    // an object the API server refuses.
    s.commit(
        docs(&[
            namespace(&extra),
            config_map("app", "2"),
            config_map("other", "1"),
            config_map_in_missing_namespace(&format!("{}-missing", s.name)),
        ]),
        "v2",
    );
    let status = s
        .wait_status(
            &agent,
            "the rollback to revision 1",
            Duration::from_secs(60),
            |st| rolled_back_to(st, 2, 1),
        )
        .await;
    let (ready, reason, message) = condition(&status, "Ready");
    assert_eq!((ready, reason), ("False", "RolledBack"), "{message}");
    assert!(message.contains("revision 2 failed"), "{message}");
    let (stalled, _, stalled_message) = condition(&status, "Stalled");
    assert_eq!(stalled, "True");
    assert!(
        stalled_message.contains("stray"),
        "the cause names the object: {stalled_message}"
    );
    assert_eq!(status.last_healthy_revision, Some(1));

    // The live objects are revision 1's again, and what only revision 2 had is gone.
    assert_eq!(s.config_map_value("app").await.as_deref(), Some("1"));
    assert_eq!(s.config_map_value("other").await.as_deref(), Some("1"));
    let namespaces: Api<Namespace> = Api::all(s.client.clone());
    let gone = namespaces.get_opt(&extra).await.unwrap();
    assert!(
        gone.is_none_or(|ns| ns.metadata.deletion_timestamp.is_some()),
        "the namespace only revision 2 had is pruned by the rollback"
    );
    let rollback_ops: Vec<(String, String)> = agent
        .change_entries()
        .iter()
        .filter(|e| e["reason"] == "rollback")
        .map(|e| {
            (
                e["operation"].as_str().unwrap().to_string(),
                e["object"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        rollback_ops.contains(&("delete".to_string(), extra.clone())),
        "the change log shows the rollback's deletion: {rollback_ops:?}"
    );
    let metrics = agent.metrics().await;
    assert!(
        metrics.contains("pallet_rollbacks_total{trigger=\"apply-error\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("pallet_revisions_created_total 2"),
        "{metrics}"
    );
    for entry in agent
        .change_entries()
        .iter()
        .filter(|e| e["reason"] == "rollback")
    {
        assert_eq!(
            entry["revision"], 1,
            "rollback writes belong to revision 1: {entry}"
        );
    }

    // The failed content is not tried again by later passes.
    let after = s.reconcile_now(&agent, "again-1").await;
    assert_eq!(
        after.revisions.len(),
        2,
        "no new revision: {}",
        summary(&after)
    );
    assert_eq!(s.config_map_value("app").await.as_deref(), Some("1"));

    // While paused, drift is measured against what resuming would apply: revision 1's snapshot,
    // not the refused content. A pause and a resume change the generation, not what to
    // deploy: still refused.
    let pause = |paused: bool| {
        let patch = json!({"spec": {"paused": paused}});
        let bds = s.bds();
        let name = s.name.clone();
        async move {
            bds.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
    };
    pause(true).await;
    let paused = s.reconcile_now(&agent, "while-paused").await;
    assert_eq!(condition(&paused, "Paused").0, "True");
    assert_eq!(
        paused.drift, None,
        "nothing would be reverted: {:?}",
        paused.drift
    );
    pause(false).await;
    let resumed = s.reconcile_now(&agent, "after-resume").await;
    assert_eq!(
        resumed.revisions.len(),
        2,
        "no new revision: {}",
        summary(&resumed)
    );
    assert_eq!(resumed.active_revision, Some(1));

    // A fixed version moves on.
    s.commit(
        docs(&[config_map("app", "3"), config_map("other", "1")]),
        "v3",
    );
    let fixed = s.wait_healthy(&agent, 3, Duration::from_secs(60)).await;
    assert_eq!(condition(&fixed, "RolledBack").0, "False");
    assert_eq!(condition(&fixed, "Ready").0, "True");
    assert_eq!(s.config_map_value("app").await.as_deref(), Some("3"));
}

#[tokio::test]
async fn a_deployment_that_never_becomes_available_is_rolled_back_at_the_deadline_then_retried() {
    let s = Scenario::new("rb-health").await;
    let kubelet = kubelet::FakeKubelet::start(&s.client, &s.name, &["example.invalid/web:v1"]);
    s.commit(docs(&[deployment("example.invalid/web:v1")]), "v1");
    let agent = Agent::start(&s.name);
    s.create_bd(json!({"progressDeadline": "8s"})).await;
    s.wait_healthy(&agent, 1, Duration::from_secs(90)).await;

    // v2's Pods crash: the Deployment never becomes available.
    s.commit(docs(&[deployment("example.invalid/web:v2")]), "v2");
    let progressing = s.wait_progressing(&agent, 2).await;
    let (healthy_status, _, why) = condition(&progressing, "Healthy");
    assert_eq!(healthy_status, "False");
    assert!(
        why.contains("Deployment.apps"),
        "the Healthy condition names the object: {why}"
    );
    let status = s
        .wait_status(
            &agent,
            "the rollback after the deadline",
            Duration::from_secs(90),
            |st| rolled_back_to(st, 2, 1),
        )
        .await;
    let failed = status.revisions.iter().find(|r| r.number == 2).unwrap();
    assert_eq!(failed.reason.as_deref(), Some("ProgressDeadlineExceeded"));
    let deployments: Api<Deployment> = Api::namespaced(s.client.clone(), &s.name);
    let image = |d: Deployment| {
        d.spec.unwrap().template.spec.unwrap().containers[0]
            .image
            .clone()
    };
    assert_eq!(
        image(deployments.get("web").await.unwrap()).as_deref(),
        Some("example.invalid/web:v1"),
        "the Deployment is revision 1's again"
    );

    // The cause is fixed (the image now runs); a retry tries the same content as revision 3.
    kubelet.allow("example.invalid/web:v2");
    s.annotate(pallet::api::REQUESTED_RETRY_ANNOTATION, "retry-1")
        .await;
    let retried = s
        .wait_status(
            &agent,
            "revision 3 healthy after the retry",
            Duration::from_secs(90),
            |st| healthy(st, 3),
        )
        .await;
    assert_eq!(retried.last_handled_retry.as_deref(), Some("retry-1"));
    assert_eq!(
        retried.revisions[0].digest, failed.digest,
        "the retry applies the content that failed"
    );
    assert_eq!(condition(&retried, "Ready").0, "True");
    assert_eq!(
        image(deployments.get("web").await.unwrap()).as_deref(),
        Some("example.invalid/web:v2")
    );
}

#[tokio::test]
async fn a_new_revision_supersedes_one_still_progressing_without_waiting() {
    let s = Scenario::new("rb-supersede").await;
    let _kubelet = kubelet::FakeKubelet::start(
        &s.client,
        &s.name,
        &["example.invalid/web:v1", "example.invalid/web:v3"],
    );
    s.commit(docs(&[deployment("example.invalid/web:v1")]), "v1");
    let agent = Agent::start(&s.name);
    // A deadline far beyond the test's patience: only superseding can end revision 2's wait.
    s.create_bd(json!({"progressDeadline": "30m"})).await;
    s.wait_healthy(&agent, 1, Duration::from_secs(90)).await;
    s.commit(docs(&[deployment("example.invalid/web:v2")]), "v2 (broken)");
    s.wait_progressing(&agent, 2).await;
    let fix_pushed = Instant::now();
    s.commit(docs(&[deployment("example.invalid/web:v3")]), "v3 (fix)");
    let status = s.wait_healthy(&agent, 3, Duration::from_secs(90)).await;
    eprintln!(
        "fix healthy {:?} after it was pushed (deadline 30m)",
        fix_pushed.elapsed()
    );
    assert_eq!(phase(&status, 2), Some(RevisionPhase::Superseded));
    assert_eq!(status.last_healthy_revision, Some(3));
}

#[tokio::test]
async fn an_agent_killed_in_the_middle_of_a_rollback_finishes_it_after_restart() {
    let s = Scenario::new("rb-crash").await;
    let extra = format!("{}-extra", s.name);
    s.commit(docs(&[config_map("app", "1")]), "v1");
    // This agent aborts right after recording the rollback, before restoring anything.
    let mut crashing =
        Agent::start_with_env(&s.name, &[], &[("PALLET_FAULT_ABORT_AT", "rollback")]);
    s.create_bd(json!({})).await;
    s.wait_healthy(&crashing, 1, Duration::from_secs(60)).await;
    s.commit(
        docs(&[
            namespace(&extra),
            config_map("app", "2"),
            config_map_in_missing_namespace(&format!("{}-missing", s.name)),
        ]),
        "v2",
    );
    let ended = crashing.wait_end(Duration::from_secs(60));
    assert_eq!(
        {
            use std::os::unix::process::ExitStatusExt;
            ended.and_then(|status| status.signal())
        },
        Some(6), // SIGABRT, at the fault point
        "the agent died mid-rollback (ended: {ended:?}):\n{}",
        crashing.log_tail()
    );
    assert!(
        crashing.log_tail().contains("aborting at Rollback"),
        "at the rollback's fault point:\n{}",
        crashing.log_tail()
    );
    let midway = s.bds().get(&s.name).await.unwrap().status.unwrap();
    assert_eq!(midway.active_revision, Some(1), "{}", summary(&midway));
    assert_eq!(phase(&midway, 1), Some(RevisionPhase::Applying));
    assert_eq!(phase(&midway, 2), Some(RevisionPhase::Failed));
    let namespaces: Api<Namespace> = Api::all(s.client.clone());
    assert!(
        namespaces.get_opt(&extra).await.unwrap().is_some(),
        "revision 2's namespace is still there: the crash came before the rollback's writes"
    );

    let agent = Agent::start(&s.name);
    let status = s
        .wait_status(
            &agent,
            "the rollback finished",
            Duration::from_secs(60),
            |st| rolled_back_to(st, 2, 1),
        )
        .await;
    assert_eq!(condition(&status, "Stalled").0, "True");
    assert_eq!(s.config_map_value("app").await.as_deref(), Some("1"));
    let gone = namespaces.get_opt(&extra).await.unwrap();
    assert!(
        gone.is_none_or(|ns| ns.metadata.deletion_timestamp.is_some()),
        "the restarted agent pruned what only revision 2 had"
    );
}

#[tokio::test]
async fn requested_rollback_to_an_earlier_revision_and_forward_again() {
    let s = Scenario::new("rb-request").await;
    s.commit(docs(&[config_map("app", "1")]), "v1");
    let agent = Agent::start(&s.name);
    s.create_bd(json!({})).await;
    s.wait_healthy(&agent, 1, Duration::from_secs(60)).await;
    s.commit(
        docs(&[config_map("app", "2"), config_map("new", "2")]),
        "v2",
    );
    s.wait_healthy(&agent, 2, Duration::from_secs(60)).await;

    s.annotate(pallet::api::REQUESTED_ROLLBACK_ANNOTATION, "1@first")
        .await;
    let back = s
        .wait_status(
            &agent,
            "the requested rollback",
            Duration::from_secs(60),
            |st| {
                check(
                    st.last_handled_rollback.as_deref() == Some("1@first")
                        && st.active_revision == Some(1)
                        && phase(st, 1) == Some(RevisionPhase::Healthy),
                    "not rolled back",
                )
            },
        )
        .await;
    assert_eq!(phase(&back, 2), Some(RevisionPhase::RolledBack));
    assert_eq!(condition(&back, "RolledBack").1, "RollbackRequested");
    assert_eq!(
        condition(&back, "Ready").0,
        "True",
        "a requested rollback is not a failure"
    );
    assert_eq!(s.config_map_value("app").await.as_deref(), Some("1"));
    assert_eq!(
        s.config_map_value("new").await,
        None,
        "revision 2's extra object is pruned"
    );
    // It stays there: later passes do not re-apply the newer content on their own.
    let still = s.reconcile_now(&agent, "after-rollback").await;
    assert_eq!(still.active_revision, Some(1));
    assert_eq!(s.config_map_value("app").await.as_deref(), Some("1"));

    // A request for a revision that does not exist is refused and changes nothing.
    s.annotate(pallet::api::REQUESTED_ROLLBACK_ANNOTATION, "9")
        .await;
    let refused = s
        .wait_status(
            &agent,
            "the bad request handled",
            Duration::from_secs(60),
            |st| {
                check(
                    st.last_handled_rollback.as_deref() == Some("9"),
                    "not handled",
                )
            },
        )
        .await;
    assert_eq!(refused.active_revision, Some(1));

    // Forward again, to revision 2.
    s.annotate(pallet::api::REQUESTED_ROLLBACK_ANNOTATION, "2@forward")
        .await;
    s.wait_status(
        &agent,
        "forward to revision 2",
        Duration::from_secs(60),
        |st| healthy(st, 2),
    )
    .await;
    assert_eq!(s.config_map_value("app").await.as_deref(), Some("2"));
    assert_eq!(s.config_map_value("new").await.as_deref(), Some("2"));
}

/// A rollback requested while paused is held (a rollback is a write), applied on
/// resume, and then stays in force like any requested rollback: the newest content does not
/// replace it until the spec or the sources change.
#[tokio::test]
async fn a_rollback_requested_while_paused_is_held_applied_on_resume_and_stays() {
    let s = Scenario::new("rb-paused").await;
    s.commit(docs(&[config_map("app", "1")]), "v1");
    let agent = Agent::start(&s.name);
    s.create_bd(json!({})).await;
    s.wait_healthy(&agent, 1, Duration::from_secs(60)).await;
    s.commit(docs(&[config_map("app", "2")]), "v2");
    s.wait_healthy(&agent, 2, Duration::from_secs(60)).await;

    let pause = |paused: bool| json!({"spec": {"paused": paused}});
    s.bds()
        .patch(
            &s.name,
            &PatchParams::default(),
            &Patch::Merge(&pause(true)),
        )
        .await
        .unwrap();
    s.annotate(pallet::api::REQUESTED_ROLLBACK_ANNOTATION, "1@paused")
        .await;
    let held = s.reconcile_now(&agent, "while-paused").await;
    assert_ne!(
        held.last_handled_rollback.as_deref(),
        Some("1@paused"),
        "held while paused"
    );
    assert_eq!(held.active_revision, Some(2));
    assert_eq!(s.config_map_value("app").await.as_deref(), Some("2"));

    s.bds()
        .patch(
            &s.name,
            &PatchParams::default(),
            &Patch::Merge(&pause(false)),
        )
        .await
        .unwrap();
    s.wait_status(
        &agent,
        "the held rollback applied",
        Duration::from_secs(60),
        |st| {
            check(
                st.last_handled_rollback.as_deref() == Some("1@paused")
                    && st.active_revision == Some(1)
                    && phase(st, 1) == Some(RevisionPhase::Healthy),
                "not rolled back",
            )
        },
    )
    .await;
    assert_eq!(s.config_map_value("app").await.as_deref(), Some("1"));
    for token in ["after-resume-1", "after-resume-2"] {
        let still = s.reconcile_now(&agent, token).await;
        assert_eq!(still.active_revision, Some(1), "replaced after {token}");
        assert_eq!(s.config_map_value("app").await.as_deref(), Some("1"));
    }
}

#[tokio::test]
async fn history_is_bounded_and_old_snapshots_are_deleted() {
    let s = Scenario::new("rb-history").await;
    s.commit(docs(&[config_map("app", "1")]), "v1");
    let agent = Agent::start(&s.name);
    s.create_bd(json!({"historyLimit": 2})).await;
    s.wait_healthy(&agent, 1, Duration::from_secs(60)).await;
    for n in 2..=4 {
        s.commit(docs(&[config_map("app", &n.to_string())]), &format!("v{n}"));
        s.wait_status(
            &agent,
            "the next revision healthy",
            Duration::from_secs(60),
            |st| healthy(st, n),
        )
        .await;
    }
    let status = s.bds().get(&s.name).await.unwrap().status.unwrap();
    let numbers: Vec<i64> = status.revisions.iter().map(|r| r.number).collect();
    assert_eq!(numbers, vec![4, 3]);
    let store = RevisionStore::new(s.client.clone(), AGENT_NAMESPACE);
    assert_eq!(store.list(&s.name).await.unwrap(), vec![3, 4]);
}

/// About 5 MB of rendered objects: 50 ConfigMaps of ~100 KB of text that compresses poorly.
fn big_bundle(version: &str) -> Vec<u8> {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15 ^ version.len() as u64;
    let mut word = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        format!("{:x}", seed)
    };
    let mut parts = Vec::new();
    for i in 0..50 {
        let mut text = String::with_capacity(100_000);
        while text.len() < 100_000 {
            text.push_str(&word());
            text.push(' ');
        }
        parts.push(format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: blob-{i:02}\ndata:\n  version: \"{version}\"\n  text: \"{text}\"\n"
        ));
    }
    docs(&parts)
}

#[tokio::test]
async fn a_five_megabyte_bundle_is_stored_and_restored() {
    let s = Scenario::new("rb-big").await;
    let v1 = big_bundle("1");
    assert!(v1.len() > 5_000_000, "{} bytes", v1.len());
    s.commit(v1, "v1");
    let agent = Agent::start(&s.name);
    s.create_bd(json!({"progressDeadline": "5s"})).await;
    s.wait_healthy(&agent, 1, Duration::from_secs(120)).await;
    let store = RevisionStore::new(s.client.clone(), AGENT_NAMESPACE);
    let stored = store.load(&s.name, 1).await.unwrap();
    assert_eq!(stored.objects.len(), 50);

    // v2 changes every ConfigMap and adds a Deployment that never becomes available (no kubelet
    // here): every write lands, then the deadline fails it and the snapshot restores all 50.
    let mut v2 = big_bundle("2");
    v2.extend_from_slice(b"---\n");
    v2.extend_from_slice(deployment("example.invalid/web:v1").as_bytes());
    s.commit(v2, "v2");
    s.wait_status(
        &agent,
        "the rollback to revision 1",
        Duration::from_secs(120),
        |st| rolled_back_to(st, 2, 1),
    )
    .await;
    let cms = s.config_maps();
    for (i, object) in stored.objects.iter().enumerate() {
        let name = object["metadata"]["name"].as_str().unwrap();
        let live = cms.get(name).await.unwrap();
        let data = serde_json::to_value(live.data.unwrap()).unwrap();
        assert_eq!(data, object["data"], "ConfigMap {i} is revision 1's again");
    }
    let deployments: Api<Deployment> = Api::namespaced(s.client.clone(), &s.name);
    let gone = deployments.get_opt("web").await.unwrap();
    assert!(gone.is_none_or(|d| d.metadata.deletion_timestamp.is_some()));
}

#[tokio::test]
async fn rollback_works_from_the_snapshot_after_the_source_image_is_deleted() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    ensure_agent_namespace(&client).await;
    let fixtures = support::Fixtures::load();
    let name = support::unique_name("rb-image");
    let registry = fixtures.registry_plain();
    let auth = oci_client::secrets::RegistryAuth::Anonymous;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.yaml"), config_map("app", "1")).unwrap();
    let v1_digest = fixtures
        .push_dir_as_image(registry, &name, "v1", dir.path(), &auth)
        .await
        .unwrap();
    std::fs::write(
        dir.path().join("app.yaml"),
        docs(&[
            config_map("app", "2"),
            config_map_in_missing_namespace(&format!("{name}-missing")),
        ]),
    )
    .unwrap();
    fixtures
        .push_dir_as_image(registry, &name, "v2", dir.path(), &auth)
        .await
        .unwrap();
    let host = registry.url.trim_start_matches("http://").to_string();
    let spec = |tag: &str| {
        json!({
            "installNamespace": name,
            "sources": [{"kind": "image", "image": {"ref": format!("{host}/{name}:{tag}")}}],
            "format": "plain",
        })
    };
    let first = Agent::start_with(&name, &["--plain-http-registry", &host]);
    agent::apply_bd(&client, &name, spec("v1")).await;
    agent::wait_condition(
        &client,
        &first,
        &name,
        "Ready",
        "True",
        "revision 1 healthy",
    )
    .await;
    drop(first);

    // The image goes away, and so does the agent's disk: a new agent with an empty cache.
    let response = fixtures
        .http_client()
        .delete(format!("{}/v2/{name}/manifests/{v1_digest}", registry.url))
        .send()
        .await
        .unwrap();
    assert!(
        response.status().is_success(),
        "delete: {}",
        response.status()
    );
    let gone = fixtures
        .http_client()
        .get(format!("{}/v2/{name}/manifests/v1", registry.url))
        .header("Accept", "application/vnd.oci.image.manifest.v1+json")
        .send()
        .await
        .unwrap();
    assert_eq!(
        gone.status().as_u16(),
        404,
        "the v1 image is gone from the registry"
    );
    let agent = Agent::start_with(&name, &["--plain-http-registry", &host]);
    agent::apply_bd(&client, &name, spec("v2")).await;
    let s = Scenario {
        client: client.clone(),
        name: name.clone(),
        repo: fixtures.git_repo(&format!("{name}-unused")),
        url: String::new(),
    };
    let status = s
        .wait_status(
            &agent,
            "the rollback from the snapshot",
            Duration::from_secs(60),
            |st| rolled_back_to(st, 2, 1),
        )
        .await;
    assert_eq!(s.config_map_value("app").await.as_deref(), Some("1"));
    let sources = &status
        .revisions
        .iter()
        .find(|r| r.number == 1)
        .unwrap()
        .sources;
    assert!(
        sources[0].resolved.ends_with(&v1_digest),
        "revision 1 records the image digest it came from: {sources:?}"
    );
}

#[tokio::test]
async fn on_failure_hold_leaves_the_failed_revision_in_place_and_stalled() {
    let s = Scenario::new("rb-hold").await;
    s.commit(docs(&[config_map("app", "1")]), "v1");
    let agent = Agent::start(&s.name);
    s.create_bd(json!({"onFailure": "Hold", "progressDeadline": "3s"}))
        .await;
    s.wait_healthy(&agent, 1, Duration::from_secs(60)).await;
    // No kubelet runs for this namespace: the Deployment never becomes available.
    s.commit(
        docs(&[config_map("app", "2"), deployment("example.invalid/web:v1")]),
        "v2",
    );
    let status = s
        .wait_status(
            &agent,
            "revision 2 failed and held",
            Duration::from_secs(60),
            |st| {
                check(
                    st.active_revision == Some(2) && phase(st, 2) == Some(RevisionPhase::Failed),
                    "not failed yet",
                )
            },
        )
        .await;
    assert_eq!(condition(&status, "Stalled").0, "True");
    let (ready, reason, message) = condition(&status, "Ready");
    assert_eq!(
        (ready, reason),
        ("False", "ProgressDeadlineExceeded"),
        "{message}"
    );
    assert_ne!(condition(&status, "RolledBack").0, "True");
    assert_eq!(status.last_healthy_revision, Some(1));
    assert_eq!(
        s.config_map_value("app").await.as_deref(),
        Some("2"),
        "the failed revision's objects stay"
    );
    // Later passes leave it held: no rollback, no new revision.
    let later = s.reconcile_now(&agent, "held-1").await;
    assert_eq!(later.active_revision, Some(2));
    assert_eq!(later.revisions.len(), 2);
}

/// An upgrade to sources that render no objects (a wrong directory, an emptied image) is refused
/// with EmptyBundle: nothing is pruned and the active revision keeps running. With
/// `rollout.allowEmpty` the same content becomes a revision that removes everything.
#[tokio::test]
async fn an_empty_render_is_refused_unless_allowed() {
    let s = Scenario::new("empty").await;
    s.commit(
        docs(&[
            config_map("a", "1"),
            config_map("b", "2"),
            config_map("c", "3"),
        ]),
        "three ConfigMaps",
    );
    let agent = Agent::start(&s.name);
    s.create_bd(json!({})).await;
    s.wait_healthy(&agent, 1, Duration::from_secs(60)).await;

    s.commit(b"# moved elsewhere\n".to_vec(), "empty the bundle");
    let refused = s
        .wait_status(
            &agent,
            "the empty render refused",
            Duration::from_secs(60),
            |st| {
                check(
                    condition(st, "Installed").1 == "EmptyBundle",
                    "not refused yet",
                )
            },
        )
        .await;
    let (_, _, message) = condition(&refused, "Installed");
    assert!(
        message.contains("rendered no objects") && message.contains("spec.rollout.allowEmpty"),
        "{message}"
    );
    assert_eq!(refused.active_revision, Some(1));
    assert_eq!(refused.revisions.len(), 1, "no revision was made");
    for cm in ["a", "b", "c"] {
        assert!(
            s.config_map_value(cm).await.is_some(),
            "ConfigMap {cm} of revision 1 is still there"
        );
    }

    s.create_bd(json!({"allowEmpty": true})).await;
    s.wait_healthy(&agent, 2, Duration::from_secs(60)).await;
    for cm in ["a", "b", "c"] {
        assert!(
            s.config_map_value(cm).await.is_none(),
            "ConfigMap {cm} pruned by the allowed empty revision"
        );
    }
    s.bds().delete(&s.name, &Default::default()).await.unwrap();
    agent::wait_bd_gone(&s.client, &s.name).await;
}

/// A `type: LoadBalancer` Service gets no address on a cluster without a load-balancer
/// controller (this one, kind, bare metal), so by default it keeps its revision Progressing; an
/// agent started with `--load-balancer-address-optional` counts it healthy.
#[tokio::test]
async fn load_balancer_services_are_healthy_without_an_address_when_the_agent_allows_it() {
    let s = Scenario::new("lb").await;
    s.commit(
        b"apiVersion: v1\nkind: Service\nmetadata:\n  name: front\nspec:\n  type: LoadBalancer\n  \
          selector: {app: front}\n  ports:\n  - port: 80\n"
            .to_vec(),
        "a LoadBalancer Service",
    );
    let agent = Agent::start_with(&s.name, &["--load-balancer-address-optional"]);
    s.create_bd(json!({})).await;
    let healthy = s.wait_healthy(&agent, 1, Duration::from_secs(60)).await;
    assert_eq!(condition(&healthy, "Ready").0, "True");
    let service: k8s_openapi::api::core::v1::Service = Api::namespaced(s.client.clone(), &s.name)
        .get("front")
        .await
        .unwrap();
    let ingress = service
        .status
        .and_then(|st| st.load_balancer)
        .and_then(|lb| lb.ingress)
        .unwrap_or_default();
    assert!(
        ingress.is_empty(),
        "no load-balancer address here: {ingress:?}"
    );
    s.bds().delete(&s.name, &Default::default()).await.unwrap();
    agent::wait_bd_gone(&s.client, &s.name).await;
}

/// A rollback requested while paused, with the sources moving on during the pause: carried out
/// at resume, it stays in force. The content that came during the pause is recorded as a
/// revision that was never applied (RolledBack), refused until the sources move again.
#[tokio::test]
async fn a_rollback_held_while_paused_stays_when_the_sources_moved_during_the_pause() {
    let s = Scenario::new("rb-moved").await;
    s.commit(docs(&[config_map("app", "1")]), "v1");
    let agent = Agent::start(&s.name);
    s.create_bd(json!({})).await;
    s.wait_healthy(&agent, 1, Duration::from_secs(60)).await;
    s.commit(docs(&[config_map("app", "2")]), "v2");
    s.wait_healthy(&agent, 2, Duration::from_secs(60)).await;

    let pause = |paused: bool| json!({"spec": {"paused": paused}});
    s.bds()
        .patch(
            &s.name,
            &PatchParams::default(),
            &Patch::Merge(&pause(true)),
        )
        .await
        .unwrap();
    // The agent has seen the pause before the sources move.
    s.wait_status(&agent, "paused", Duration::from_secs(60), |st| {
        check(condition(st, "Paused").0 == "True", "not paused yet")
    })
    .await;
    s.annotate(pallet::api::REQUESTED_ROLLBACK_ANNOTATION, "1@paused")
        .await;
    s.commit(docs(&[config_map("app", "3")]), "v3");
    // The paused pass looks at the sources (a reconcile request polls): v3 is known.
    let held = s.reconcile_now(&agent, "while-paused").await;
    assert_eq!(held.active_revision, Some(2));
    assert_eq!(s.config_map_value("app").await.as_deref(), Some("2"));

    s.bds()
        .patch(
            &s.name,
            &PatchParams::default(),
            &Patch::Merge(&pause(false)),
        )
        .await
        .unwrap();
    s.wait_status(
        &agent,
        "the held rollback applied",
        Duration::from_secs(60),
        |st| {
            check(
                st.last_handled_rollback.as_deref() == Some("1@paused")
                    && st.active_revision == Some(1)
                    && phase(st, 1) == Some(RevisionPhase::Healthy),
                "not rolled back",
            )
        },
    )
    .await;
    for token in ["after-resume-1", "after-resume-2", "after-resume-3"] {
        let still = s.reconcile_now(&agent, token).await;
        assert_eq!(
            still.active_revision,
            Some(1),
            "replaced after {token}: {}",
            summary(&still)
        );
        assert_eq!(s.config_map_value("app").await.as_deref(), Some("1"));
    }
    let status = s.bds().get(&s.name).await.unwrap().status.unwrap();
    let refused = status.revisions.iter().find(|r| r.number == 3).unwrap();
    assert_eq!(
        refused.phase,
        RevisionPhase::RolledBack,
        "{}",
        summary(&status)
    );
    assert!(refused.applied_at.is_none(), "never applied");

    // The sources move again: that is a new revision.
    s.commit(docs(&[config_map("app", "4")]), "v4");
    s.wait_healthy(&agent, 4, Duration::from_secs(60)).await;
    assert_eq!(s.config_map_value("app").await.as_deref(), Some("4"));
}

/// A revision whose install namespace its ServiceAccount may not create fails (it is not left
/// `Applying` under a `Stalled` condition).
#[tokio::test]
async fn a_revision_whose_namespace_may_not_be_created_fails() {
    let s = Scenario::new("ns-denied").await;
    let home: Namespace = serde_json::from_value(json!({"metadata": {"name": s.name}})).unwrap();
    Api::<Namespace>::all(s.client.clone())
        .create(&Default::default(), &home)
        .await
        .unwrap();
    let account: k8s_openapi::api::core::v1::ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "installer"}})).unwrap();
    Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(s.client.clone(), &s.name)
        .create(&Default::default(), &account)
        .await
        .unwrap();
    s.commit(docs(&[config_map("app", "1")]), "v1");
    let agent = Agent::start(&s.name);
    let target = format!("{}-target", s.name);
    let spec = json!({
        "installNamespace": target,
        "serviceAccount": {"namespace": s.name, "name": "installer"},
        "sources": [{"kind": "git", "git": {"repository": s.url, "ref": {"branch": "main"}}}],
        "format": "plain",
    });
    agent::apply_bd(&s.client, &s.name, spec).await;
    let status = s
        .wait_status(
            &agent,
            "stalled on the namespace",
            Duration::from_secs(60),
            |st| {
                check(
                    condition(st, "Stalled").0 == "True" && condition(st, "Ready").1 == "Forbidden",
                    "not stalled yet",
                )
            },
        )
        .await;
    assert_eq!(
        phase(&status, 1),
        Some(RevisionPhase::Failed),
        "{}",
        summary(&status)
    );
    assert!(
        condition(&status, "Ready").2.contains(&target),
        "{}",
        summary(&status)
    );
    s.bds().delete(&s.name, &Default::default()).await.unwrap();
    agent::wait_bd_gone(&s.client, &s.name).await;
    let _ = Api::<Namespace>::all(s.client.clone())
        .delete(&s.name, &Default::default())
        .await;
}

/// When another BundleDeployment takes over an object (collisionProtection None), the one it
/// was taken from says so at once, not at its next requeue.
#[tokio::test]
async fn a_bundle_whose_object_another_took_over_says_so_at_once() {
    let s = Scenario::new("taken").await;
    let shared = |value: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\n  namespace: {}\ndata:\n  value: \"{value}\"\n",
            s.name
        )
    };
    s.commit(shared("a").into_bytes(), "a");
    // Passes come from events only: no requeue or poll within the test.
    let agent = Agent::start_with(
        &s.name,
        &["--requeue-seconds", "600", "--default-poll-interval", "1h"],
    );
    s.create_bd(json!({})).await;
    s.wait_healthy(&agent, 1, Duration::from_secs(60)).await;
    // The watch on its objects has listed them (a hand edit is set back through it, with no
    // requeue due): the takeover below is an event of that watch, not part of its first list.
    s.config_maps()
        .patch(
            "shared",
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": {"value": "by-hand"}})),
        )
        .await
        .unwrap();
    agent::wait_value(&s.config_maps(), "shared", "a").await;

    let fixtures = support::Fixtures::load();
    let other = format!("{}-b", s.name);
    let repo = fixtures.git_repo(&other);
    repo.commit_files(
        "main",
        &[("manifests/app.yaml", shared("b").as_bytes())],
        "b",
    );
    let spec = json!({
        "installNamespace": s.name,
        "sources": [{"kind": "git", "git": {"repository": repo.url(fixtures.git_plain()), "ref": {"branch": "main"}}}],
        "format": "plain",
        "collisionProtection": "None",
    });
    agent::apply_bd_labelled(&s.client, &other, &s.name, spec).await;
    agent::wait_value(&s.config_maps(), "shared", "b").await;
    let taken = Instant::now();
    let status = s
        .wait_status(
            &agent,
            "the conflict reported",
            Duration::from_secs(30),
            |st| {
                check(
                    condition(st, "Ready").0 == "False"
                        && condition(st, "Ready").1 == "OwnershipConflict",
                    "still ready",
                )
            },
        )
        .await;
    println!("taken over; said so {:?} later", taken.elapsed());
    assert!(
        condition(&status, "Ready").2.contains(&other),
        "{}",
        summary(&status)
    );
    for name in [&other, &s.name] {
        let _ = s.bds().delete(name, &Default::default()).await;
    }
}

/// A fetch still waiting for a slot says so, and every fetch says since when (a wall-clock time,
/// true however long the status shows it), not how long it ran when the status was written.
#[tokio::test]
async fn fetches_waiting_for_a_slot_say_so_with_the_time_they_began() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let test = support::unique_name("slots");
    let _agent = Agent::start_with(
        &test,
        &["--fetch-concurrency", "1", "--fetch-timeout", "90s"],
    );
    let started = k8s_openapi::jiff::Timestamp::now();
    let sources = [
        ("a", format!("{}/bundle.yaml", fx.hang().url)),
        ("b", format!("{}/other.yaml", fx.hang().url)),
        ("c", format!("{}/bundle.yaml", fx.drip().url)),
    ];
    let mut names = Vec::new();
    for (suffix, url) in &sources {
        let name = format!("{test}-{suffix}");
        let spec = json!({"installNamespace": test, "format": "plain",
                          "sources": [{"kind": "http", "http": {"url": url}}]});
        agent::apply_bd_labelled(&client, &name, &test, spec).await;
        names.push(name);
    }
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let messages = cluster::poll_until(
        "each to report its fetch",
        Duration::from_secs(60),
        || async {
            let mut messages = Vec::new();
            for name in &names {
                let status = bds
                    .get(name)
                    .await
                    .map_err(|e| e.to_string())?
                    .status
                    .unwrap_or_default();
                match condition(&status, "Unpacked") {
                    (_, "Fetching", message) => messages.push(message.to_string()),
                    other => return Err(format!("{name}: {other:?}")),
                }
            }
            Ok(messages)
        },
    )
    .await;
    let waiting: Vec<&String> = messages
        .iter()
        .filter(|m| m.contains("(not started: waiting since "))
        .collect();
    assert_eq!(waiting.len(), 2, "one fetch runs, two wait: {messages:#?}");
    assert!(
        waiting.iter().any(|m| m.contains("all 1 in use"))
            && waiting.iter().any(|m| m.contains("which has 1 at once")),
        "one waits for the pool, one for its server: {messages:#?}"
    );
    for message in &messages {
        let since = message
            .split("since ")
            .nth(1)
            .and_then(|rest| rest.get(..20))
            .unwrap_or_else(|| panic!("no time in {message:?}"));
        let since: k8s_openapi::jiff::Timestamp = since.parse().unwrap();
        let now = k8s_openapi::jiff::Timestamp::now();
        assert!(
            since.as_second() >= started.as_second() - 1 && since <= now,
            "{message}"
        );
    }
    for name in &names {
        let _ = bds.delete(name, &Default::default()).await;
    }
}
