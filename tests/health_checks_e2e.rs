//! End-to-end: `spec.healthChecks` (CEL checks for a kind, HTTP probes) judge revisions, against
//! the local control plane, the git and file-server fixtures and the `pallet agent` binary.
//!
//! The custom resources are of a CRD the bundle itself carries; the tests write their status
//! through the status subresource, as their controller would.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cli.rs"]
mod cli;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::time::{Duration, Instant};

use agent::Agent;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use kube::Client;
use pallet::api::conditions::find;
use pallet::api::{BundleDeployment, BundleDeploymentStatus, RevisionPhase};
use serde_json::{json, Value};

const AGENT_NAMESPACE: &str = "pallet-system";

struct Scenario {
    client: Client,
    name: String,
    repo: support::GitRepo,
    url: String,
    /// The CRD's group, unique to the test (CRDs are cluster-wide).
    group: String,
}

impl Scenario {
    async fn new(prefix: &str) -> Scenario {
        let client = cluster::client().await;
        cluster::install_crd(&client).await;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": AGENT_NAMESPACE}});
        namespaces
            .patch(
                AGENT_NAMESPACE,
                &PatchParams::apply(cluster::TEST_FIELD_MANAGER),
                &Patch::Apply(&ns),
            )
            .await
            .unwrap();
        let fixtures = support::Fixtures::load();
        let name = support::unique_name(prefix);
        let repo = fixtures.git_repo(&name);
        let url = repo.url(fixtures.git_plain());
        let group = format!("{name}.example.com");
        Scenario {
            client,
            name,
            repo,
            url,
            group,
        }
    }

    fn commit(&self, parts: &[String], message: &str) {
        self.repo.commit_files(
            "main",
            &[("manifests/app.yaml", parts.join("---\n").as_bytes())],
            message,
        );
    }

    async fn apply_bd(&self, health_checks: Value) {
        let spec = json!({
            "installNamespace": self.name,
            "sources": [{"kind": "git", "git": {"repository": self.url, "ref": {"branch": "main"}}}],
            "format": "plain",
            // Long: a failed check must fail the revision at once, not at the deadline.
            "rollout": {"progressDeadline": "10m"},
            "healthChecks": health_checks,
        });
        agent::apply_bd(&self.client, &self.name, spec).await;
    }

    /// The Widget CRD of this test (namespaced, status subresource, free-form).
    fn crd(&self) -> String {
        format!(
            r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.{group}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget}}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {{status: {{}}}}
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#,
            group = self.group
        )
    }

    fn widget(&self, name: &str) -> String {
        format!(
            "apiVersion: {}/v1\nkind: Widget\nmetadata:\n  name: {name}\nspec:\n  size: 1\n",
            self.group
        )
    }

    /// The README's example check, for this test's Widget kind.
    fn widget_check(&self) -> Value {
        json!([{
            "apiVersion": format!("{}/v1", self.group),
            "kind": "Widget",
            "current": "has(self.status) && self.status.phase == 'Ready'",
            "failed": "has(self.status) && self.status.phase == 'Failed'",
        }])
    }

    fn widgets(&self) -> Api<DynamicObject> {
        let resource = ApiResource {
            group: self.group.clone(),
            version: "v1".into(),
            api_version: format!("{}/v1", self.group),
            kind: "Widget".into(),
            plural: "widgets".into(),
        };
        Api::namespaced_with(self.client.clone(), &self.name, &resource)
    }

    /// Writes a Widget's `status.phase` as its controller would, once the Widget exists.
    async fn set_phase(&self, agent: &Agent, widget: &str, phase: &str) {
        let start = Instant::now();
        let patch = json!({"status": {"phase": phase}});
        loop {
            match self
                .widgets()
                .patch_status(widget, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return,
                Err(error) if start.elapsed() > Duration::from_secs(60) => panic!(
                    "could not set the status of widget {widget}: {error}\nagent log:\n{}",
                    agent.log_tail()
                ),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    fn bds(&self) -> Api<BundleDeployment> {
        Api::all(self.client.clone())
    }

    /// Polls the status until `check` accepts it; panics with the last status and the agent log.
    async fn wait_status<F>(&self, agent: &Agent, what: &str, check: F) -> BundleDeploymentStatus
    where
        F: Fn(&BundleDeploymentStatus) -> bool,
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
            if check(&status) {
                return status;
            }
            if start.elapsed() > Duration::from_secs(90) {
                panic!(
                    "timed out waiting for {what}\nstatus: {}\nagent log:\n{}",
                    summary(&status),
                    agent.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Asks for a reconcile and waits until a whole pass has handled it.
    async fn reconcile_now(&self, agent: &Agent, token: &str) -> BundleDeploymentStatus {
        let patch = json!({"metadata": {"annotations": {pallet::api::REQUESTED_RECONCILE_ANNOTATION: token}}});
        self.bds()
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        self.wait_status(agent, "the reconcile request handled", |s| {
            s.last_handled_reconcile.as_deref() == Some(token)
        })
        .await
    }
}

fn config_map(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
    )
}

fn summary(status: &BundleDeploymentStatus) -> String {
    let revisions: Vec<String> = status
        .revisions
        .iter()
        .map(|r| format!("{}:{:?} {:?}", r.number, r.phase, r.message))
        .collect();
    let conditions: Vec<String> = status
        .conditions
        .iter()
        .map(|c| format!("{}={} {} ({})", c.type_, c.status, c.reason, c.message))
        .collect();
    format!(
        "revisions {revisions:?}, active {:?}, conditions {conditions:#?}",
        status.active_revision
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

fn healthy(status: &BundleDeploymentStatus, number: i64) -> bool {
    status.active_revision == Some(number) && phase(status, number) == Some(RevisionPhase::Healthy)
}

#[tokio::test]
async fn a_custom_resource_is_healthy_only_once_its_cel_check_says_current() {
    let s = Scenario::new("hc-cel").await;
    s.commit(&[s.crd(), s.widget("w1")], "v1");
    let agent = Agent::start(&s.name);
    s.apply_bd(s.widget_check()).await;

    // Without the check the Widget (no Ready condition) would be healthy once it exists.
    let status = s
        .wait_status(&agent, "revision 1 progressing on the check", |st| {
            phase(st, 1) == Some(RevisionPhase::Progressing)
                && condition(st, "Healthy").2.contains("healthChecks[0]")
        })
        .await;
    let (healthy_status, reason, message) = condition(&status, "Healthy");
    assert_eq!(
        (healthy_status, reason),
        ("False", "Progressing"),
        "{message}"
    );
    assert!(
        message.contains(&format!("Widget.{} {}/w1", s.group, s.name))
            && message.contains("current is not true yet"),
        "names the object and the check: {message}"
    );
    // A whole pass later it is still waiting: nothing but the check decides.
    let status = s.reconcile_now(&agent, "still-waiting").await;
    assert_eq!(
        phase(&status, 1),
        Some(RevisionPhase::Progressing),
        "{}",
        summary(&status)
    );

    s.set_phase(&agent, "w1", "Ready").await;
    let status = s
        .wait_status(&agent, "revision 1 healthy", |st| healthy(st, 1))
        .await;
    assert_eq!(condition(&status, "Ready").0, "True");
}

#[tokio::test]
async fn a_failed_cel_check_fails_the_revision_and_rolls_back() {
    let s = Scenario::new("hc-fail").await;
    s.commit(&[s.crd(), s.widget("a")], "v1");
    let agent = Agent::start(&s.name);
    s.apply_bd(s.widget_check()).await;
    s.set_phase(&agent, "a", "Ready").await;
    s.wait_status(&agent, "revision 1 healthy", |st| healthy(st, 1))
        .await;

    s.commit(&[s.crd(), s.widget("a"), s.widget("b")], "v2");
    s.wait_status(&agent, "revision 2 progressing", |st| {
        phase(st, 2) == Some(RevisionPhase::Progressing)
    })
    .await;
    let started = Instant::now();
    s.set_phase(&agent, "b", "Failed").await;
    let status = s
        .wait_status(&agent, "the rollback to revision 1", |st| {
            phase(st, 2) == Some(RevisionPhase::Failed) && healthy(st, 1)
        })
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "failed at once, not at the 10m deadline"
    );
    let (rolled_back, _, _) = condition(&status, "RolledBack");
    assert_eq!(rolled_back, "True");
    let (_, reason, message) = condition(&status, "Stalled");
    assert_eq!(reason, "RolledBack");
    assert!(
        message.contains("HealthCheckFailed")
            && message.contains(&format!("Widget.{} {}/b", s.group, s.name))
            && message.contains(&format!("healthChecks[0] ({}/v1 Widget)", s.group))
            && message.contains("failed is true"),
        "names the object, the check and why: {message}"
    );
    // Revision 1 had no widget b: the rollback pruned it.
    assert!(s.widgets().get_opt("b").await.unwrap().is_none());
    // `pallet status` names the check too.
    let out = cli::pallet_ok(&["status", &s.name]);
    assert!(
        out.contains("healthChecks[0]") && out.contains("HealthCheckFailed"),
        "{out}"
    );
}

#[tokio::test]
async fn a_failing_http_probe_fails_the_revision_and_rolls_back() {
    let s = Scenario::new("hc-http").await;
    let fixtures = support::Fixtures::load();
    let path = format!("{}/healthz", s.name);
    let url = format!(
        "{}{}",
        fixtures.http_plain().url,
        fixtures.put_file(&path, b"ok")
    );
    s.commit(&[config_map("app", "1")], "v1");
    let agent = Agent::start(&s.name);
    let probe = json!([{
        "httpGet": {"url": url, "expectedStatus": [200], "timeoutSeconds": 2},
        "periodSeconds": 2,
        "successThreshold": 1,
        "failureThreshold": 3,
    }]);
    s.apply_bd(probe).await;
    s.wait_status(&agent, "revision 1 healthy (the probe answers)", |st| {
        healthy(st, 1)
    })
    .await;

    // The application stops answering (404) with revision 2.
    std::fs::remove_file(fixtures.files_root().join(&path)).unwrap();
    s.commit(&[config_map("app", "2")], "v2");
    let status = s
        .wait_status(&agent, "revision 2 failed by the probe", |st| {
            phase(st, 2) == Some(RevisionPhase::Failed) && st.active_revision == Some(1)
        })
        .await;
    let revision = status.revisions.iter().find(|r| r.number == 2).unwrap();
    let message = revision.message.clone().unwrap_or_default();
    assert!(
        message.contains(&format!("healthChecks[0] (httpGet {url})"))
            && message.contains("3 failures in a row")
            && message.contains("404"),
        "names the probe and what it got: {message}"
    );
    assert_eq!(condition(&status, "RolledBack").0, "True");
    // It answers again: the restored revision 1 is healthy (its probe started over).
    fixtures.put_file(&path, b"ok");
    s.wait_status(&agent, "revision 1 healthy again", |st| healthy(st, 1))
        .await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), &s.name);
    let app = cms.get("app").await.unwrap();
    assert_eq!(app.data.unwrap()["value"], "1");
}

#[tokio::test]
async fn an_expression_that_does_not_compile_is_refused_with_a_clear_condition() {
    let s = Scenario::new("hc-bad").await;
    s.commit(&[config_map("app", "1")], "v1");
    let agent = Agent::start(&s.name);
    s.apply_bd(json!([])).await;
    s.wait_status(&agent, "revision 1 healthy", |st| healthy(st, 1))
        .await;

    let bad = json!([{"apiVersion": "v1", "kind": "ConfigMap", "current": "self.data.value =="}]);
    s.apply_bd(bad.clone()).await;
    let status = s
        .wait_status(&agent, "the refusal", |st| {
            condition(st, "Ready").1 == "InvalidHealthCheck"
        })
        .await;
    let (ready, _, message) = condition(&status, "Ready");
    assert_eq!(ready, "False");
    assert!(
        message.contains("healthChecks[0] (v1 ConfigMap)")
            && message.contains("expression current does not compile"),
        "{message}"
    );
    assert_eq!(condition(&status, "Stalled").0, "True");
    assert_eq!(
        condition(&status, "Installed").0,
        "True",
        "revision 1's objects are still installed"
    );
    // Nothing was written: revision 1 stays active and its objects as they were.
    assert_eq!(status.active_revision, Some(1));
    assert_eq!(status.revisions.len(), 1, "{}", summary(&status));

    // `pallet render` refuses the same spec before fetching anything.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bd.yaml");
    let bd = json!({
        "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
        "metadata": {"name": s.name},
        "spec": {"sources": [{"kind": "git", "git": {"repository": s.url, "ref": {"branch": "main"}}}],
                 "format": "plain", "healthChecks": bad},
    });
    std::fs::write(&file, serde_json::to_string(&bd).unwrap()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pallet"))
        .args([
            "render",
            "--allow-loopback-egress",
            "-f",
            file.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.healthChecks") && err.contains("does not compile"),
        "{err}"
    );
}
