//! End-to-end: notifications. A receiver of the test's own (`pallet-fixtures
//! receiver`, a real HTTP server on 127.0.0.1 that records every request) gets the notifications
//! of a `pallet agent` for a BundleDeployment with a git source, driven only through the API:
//!
//! - exactly one notification per transition and target, with the documented body for each
//!   kind (CloudEvents checked by the CloudEvents SDK against the spec, the webhook's HMAC
//!   signature, the commit status on the commit each revision came from);
//! - a receiver answering 500, then down: the rollout completes and `status.notifications`
//!   says Retrying; once it is back, Delivered, and the receiver has it once;
//! - an agent killed (`PALLET_FAULT_ABORT_AT=notify`) after the transition was recorded and
//!   before its delivery started: delivered after the restart, once.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cli.rs"]
mod cli;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/receiver.rs"]
mod receiver;
mod support;

use std::time::{Duration, Instant};

use agent::Agent;
use cloudevents::AttributesReader;
use hmac::{Hmac, Mac};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use pallet::api::conditions::find;
use pallet::api::{BundleDeployment, BundleDeploymentStatus, DeliveryResult, RevisionPhase};
use receiver::{Received, Receiver};
use serde_json::json;
use sha2::Sha256;

const AGENT_NAMESPACE: &str = "pallet-system";
const FAULT_ENV: &str = "PALLET_FAULT_ABORT_AT";

fn config_map(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
    )
}

/// Refused by the API server (its namespace does not exist): the revision fails at apply.
fn config_map_in_missing_namespace(namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stray\n  namespace: {namespace}\ndata:\n  value: \"x\"\n"
    )
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
        Scenario {
            client,
            name,
            repo,
            url,
        }
    }

    fn commit(&self, manifests: &[String], message: &str) -> String {
        let content = manifests.join("---\n").into_bytes();
        self.repo
            .commit_files("main", &[("manifests/app.yaml", &content)], message)
    }

    async fn create_bd(&self, notifications: serde_json::Value) {
        let spec = json!({
            "installNamespace": self.name,
            "sources": [{"kind": "git", "git": {"repository": self.url, "ref": {"branch": "main"}}}],
            "format": "plain",
            "notifications": notifications,
        });
        agent::apply_bd(&self.client, &self.name, spec).await;
    }

    /// A Secret in the agent's namespace with `data` (string values).
    async fn secret(&self, suffix: &str, data: serde_json::Value) -> String {
        let name = format!("{}-{suffix}", self.name);
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            // Given to this scenario's BundleDeployment (the agent's namespace is no pool).
            "metadata": {"name": name, "namespace": AGENT_NAMESPACE,
                         "labels": {format!("access.pallet.dev/{}", self.name): "true"}},
            "stringData": data,
        });
        Api::<Secret>::namespaced(self.client.clone(), AGENT_NAMESPACE)
            .patch(
                &name,
                &PatchParams::apply(cluster::TEST_FIELD_MANAGER),
                &Patch::Apply(&secret),
            )
            .await
            .unwrap();
        name
    }

    /// Polls the status until `check` accepts it; panics with the last status and the agent log.
    async fn wait_status<F>(&self, agent: &Agent, what: &str, check: F) -> BundleDeploymentStatus
    where
        F: Fn(&BundleDeploymentStatus) -> Result<(), String>,
    {
        let timeout = Duration::from_secs(90);
        let start = Instant::now();
        let bds: Api<BundleDeployment> = Api::all(self.client.clone());
        loop {
            let status = bds
                .get(&self.name)
                .await
                .unwrap()
                .status
                .unwrap_or_default();
            match check(&status) {
                Ok(()) => return status,
                Err(last) if start.elapsed() > timeout => panic!(
                    "timed out waiting for {what}: {last}\nnotifications: {:#?}\nconditions: {:#?}\nagent log:\n{}",
                    status.notifications,
                    status.conditions,
                    agent.log_tail()
                ),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// Asks for a reconcile and waits until a whole pass has run since.
    async fn reconcile_now(&self, agent: &Agent, token: &str) {
        let patch = json!({"metadata": {"annotations": {pallet::api::REQUESTED_RECONCILE_ANNOTATION: token}}});
        Api::<BundleDeployment>::all(self.client.clone())
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        self.wait_status(agent, "the reconcile request handled", |s| {
            check(
                s.last_handled_reconcile.as_deref() == Some(token),
                "not handled",
            )
        })
        .await;
    }
}

fn check(ok: bool, why: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(why.to_string())
    }
}

fn phase(status: &BundleDeploymentStatus, number: i64) -> Option<RevisionPhase> {
    status
        .revisions
        .iter()
        .find(|r| r.number == number)
        .map(|r| r.phase)
}

fn healthy(status: &BundleDeploymentStatus, number: i64) -> Result<(), String> {
    check(
        status.active_revision == Some(number)
            && phase(status, number) == Some(RevisionPhase::Healthy),
        &format!("revision {number} not active and healthy"),
    )
}

/// Nothing of `target` waits for delivery, and it has an entry.
fn settled(status: &BundleDeploymentStatus, target: &str) -> Result<(), String> {
    let entries: Vec<_> = status
        .notifications
        .iter()
        .filter(|n| n.name == target)
        .collect();
    check(
        !entries.is_empty() && entries.iter().all(|n| !n.result.is_open()),
        &format!("{target}: {entries:?}"),
    )
}

/// Waits until the receiver has `n` requests to `path` (a delivery is recorded in status after
/// the receiver answered, so a settled status implies this; it also bounds the wait).
async fn requests(receiver: &Receiver, path: &str, n: usize) -> Vec<Received> {
    cluster::poll_until(
        &format!("{n} requests to {path}"),
        Duration::from_secs(30),
        || async {
            let got = receiver.requests(Some(path)).await;
            if got.len() >= n {
                Ok(got)
            } else {
                Err(format!("{} so far", got.len()))
            }
        },
    )
    .await
}

/// `(type, revision)` of each webhook-style body, in order.
fn transitions(received: &[Received]) -> Vec<(String, i64)> {
    received
        .iter()
        .map(|r| {
            let body = r.json();
            (
                body["type"].as_str().unwrap().to_string(),
                body["revision"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// Parses a received request as a CloudEvent with the CloudEvents SDK (binary or structured
/// mode, as its Content-Type says), which refuses a missing required attribute, an unknown
/// specversion or a malformed time.
fn cloud_event(request: &Received) -> cloudevents::Event {
    let mut headers = http::HeaderMap::new();
    for (name, values) in &request.headers {
        for value in values {
            headers.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                http::HeaderValue::from_str(value).unwrap(),
            );
        }
    }
    cloudevents::binding::http::to_event(&headers, request.body.clone().into_bytes())
        .unwrap_or_else(|e| panic!("not a valid CloudEvent ({e}): {request:?}"))
}

#[tokio::test]
async fn each_kind_gets_one_notification_per_transition_with_its_documented_body() {
    let receiver = Receiver::start();
    let s = Scenario::new("notify-kinds").await;
    let hook_secret = s
        .secret(
            "hook",
            json!({"hmacKey": "test-hmac-key", "token": "hook-token"}),
        )
        .await;
    let forge_secret = s.secret("forge", json!({"token": "forge-token"})).await;
    let sha1 = s.commit(&[config_map("app", "1")], "v1");
    let agent = Agent::start(&s.name);
    let url = |path: &str| format!("{}{path}", receiver.url);
    s.create_bd(json!([
        {"name": "hook", "on": ["Progressing", "Healthy", "Failed", "RolledBack", "Stalled"],
         "webhook": {"url": url("/hook"), "secret": {"name": hook_secret}}},
        {"name": "ce-binary", "on": ["Healthy", "Failed", "RolledBack"],
         "cloudEvents": {"url": url("/ce-binary")}},
        {"name": "ce-structured", "on": ["Healthy", "RolledBack"],
         "cloudEvents": {"url": url("/ce-structured"), "mode": "Structured"}},
        {"name": "chat", "on": ["Healthy", "RolledBack"], "slack": {"url": url("/slack")}},
        {"name": "forge", "on": ["Progressing", "Healthy", "Failed"],
         "commitStatus": {"api": url("/api/v1"), "repository": "org/app",
                          "secret": {"name": forge_secret}}},
    ]))
    .await;
    s.wait_status(&agent, "revision 1 healthy", |st| healthy(st, 1))
        .await;
    // Revision 2 is refused by the API server midway: it fails and is rolled back to 1.
    let sha2 = s.commit(
        &[
            config_map("app", "2"),
            config_map_in_missing_namespace(&format!("{}-missing", s.name)),
        ],
        "v2",
    );
    let status = s
        .wait_status(
            &agent,
            "the rollback, and every notification settled",
            |st| {
                check(
                    phase(st, 2) == Some(RevisionPhase::Failed),
                    "revision 2 not failed",
                )?;
                healthy(st, 1)?;
                for target in ["hook", "ce-binary", "ce-structured", "chat", "forge"] {
                    settled(st, target)?;
                }
                Ok(())
            },
        )
        .await;
    assert!(
        status
            .notifications
            .iter()
            .all(|n| n.result == DeliveryResult::Delivered && n.attempts == 1),
        "{:#?}",
        status.notifications
    );
    // `pallet status` shows them.
    let text = cli::pallet_ok(&["status", &s.name]);
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("chat "))
        .unwrap_or_else(|| panic!("a row for target chat:\n{text}"));
    assert!(
        row.contains("revision 1 Healthy")
            && row.contains("Delivered")
            && row.ends_with("HTTP 200"),
        "{row}"
    );
    // Two more passes change nothing and send nothing.
    s.reconcile_now(&agent, "again-1").await;
    s.reconcile_now(&agent, "again-2").await;

    // Webhook: every transition once, in order, each signed and with its own id.
    let hook = requests(&receiver, "/hook", 8).await;
    let expected: Vec<(String, i64)> = [
        ("Progressing", 1),
        ("Healthy", 1),
        ("Progressing", 2),
        ("Failed", 2),
        ("RolledBack", 2),
        ("Progressing", 1),
        ("Stalled", 1),
        ("Healthy", 1),
    ]
    .iter()
    .map(|(t, n)| (t.to_string(), *n))
    .collect();
    assert_eq!(transitions(&hook), expected);
    let ids: std::collections::BTreeSet<String> = hook
        .iter()
        .map(|r| r.json()["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), hook.len(), "one id per transition");
    let uid = Api::<BundleDeployment>::all(s.client.clone())
        .get(&s.name)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    for request in &hook {
        assert_eq!(request.method, "POST");
        assert_eq!(request.header("Content-Type"), Some("application/json"));
        assert_eq!(request.header("Authorization"), Some("Bearer hook-token"));
        let mut mac = Hmac::<Sha256>::new_from_slice(b"test-hmac-key").unwrap();
        mac.update(request.body.as_bytes());
        let expected: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            request.header("X-Pallet-Signature"),
            Some(format!("sha256={expected}").as_str())
        );
        let body = request.json();
        assert_eq!(request.header("X-Pallet-Id"), body["id"].as_str());
        assert_eq!(body["bundleDeployment"]["name"], s.name.as_str());
        assert_eq!(body["bundleDeployment"]["uid"], uid.as_str());
        assert_eq!(body["target"], "hook");
        assert!(body["id"].as_str().unwrap().starts_with(&uid));
        assert!(body["time"].as_str().unwrap().ends_with('Z'));
        assert!(body["transition"]
            .as_str()
            .unwrap()
            .starts_with(&format!("revision {}", body["revision"])));
    }
    let failed = hook[3].json();
    assert!(
        failed["message"].as_str().unwrap().contains("stray"),
        "the failure names the refused object: {failed}"
    );
    assert_eq!(failed["sources"][0]["resolved"], sha2.as_str());
    let rolled_back = hook[4].json();
    assert_eq!(
        rolled_back["transition"],
        "revision 2 RolledBack to revision 1"
    );

    // CloudEvents, binary and structured: valid per the SDK, same ids as the webhook's.
    let binary = requests(&receiver, "/ce-binary", 4).await;
    let structured = requests(&receiver, "/ce-structured", 3).await;
    let mut binary_types = Vec::new();
    for request in &binary {
        assert!(
            request.header("ce-id").is_some(),
            "binary mode: {request:?}"
        );
        let event = cloud_event(request);
        assert_eq!(event.specversion().to_string(), "1.0");
        assert!(
            ids.contains(event.id()),
            "{} is a transition's id",
            event.id()
        );
        assert_eq!(
            event.source().to_string(),
            format!("/apis/pallet.dev/v1alpha1/bundledeployments/{}", s.name)
        );
        assert!(event.time().is_some());
        assert!(event.subject().unwrap().starts_with("revision "));
        binary_types.push(event.ty().to_string());
        let data: serde_json::Value = match event.data() {
            Some(cloudevents::Data::Json(value)) => value.clone(),
            Some(cloudevents::Data::Binary(bytes)) => serde_json::from_slice(bytes).unwrap(),
            other => panic!("data is JSON: {other:?}"),
        };
        assert_eq!(data["id"], event.id());
    }
    assert_eq!(
        binary_types,
        [
            "dev.pallet.bundledeployment.healthy",
            "dev.pallet.bundledeployment.failed",
            "dev.pallet.bundledeployment.rolledback",
            "dev.pallet.bundledeployment.healthy",
        ]
    );
    for request in &structured {
        assert!(request
            .header("Content-Type")
            .unwrap()
            .starts_with("application/cloudevents+json"));
        assert!(request.header("ce-id").is_none());
        let event = cloud_event(request);
        assert!(ids.contains(event.id()));
        assert_eq!(
            event.datacontenttype(),
            Some("application/json"),
            "{request:?}"
        );
    }

    // Slack: a text per transition.
    let slack = requests(&receiver, "/slack", 3).await;
    let texts: Vec<String> = slack
        .iter()
        .map(|r| r.json()["text"].as_str().unwrap().to_string())
        .collect();
    assert!(texts[0].starts_with(&format!(
        ":white_check_mark: {}: revision 1 Healthy",
        s.name
    )));
    assert!(texts[1].starts_with(&format!(
        ":rewind: {}: revision 2 RolledBack to revision 1",
        s.name
    )));

    // Commit status: on the commit each revision came from, with the forge token.
    let forge: Vec<Received> = receiver
        .requests(None)
        .await
        .into_iter()
        .filter(|r| r.path.starts_with("/api/v1/"))
        .collect();
    let statuses: Vec<(String, String)> = forge
        .iter()
        .map(|r| {
            assert_eq!(r.header("Authorization"), Some("Bearer forge-token"));
            assert_eq!(r.json()["context"], format!("pallet/{}", s.name).as_str());
            (
                r.path.clone(),
                r.json()["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let on = |sha: &str| format!("/api/v1/repos/org/app/statuses/{sha}");
    assert_eq!(
        statuses,
        vec![
            (on(&sha1), "pending".to_string()),
            (on(&sha1), "success".to_string()),
            (on(&sha2), "pending".to_string()),
            (on(&sha2), "failure".to_string()),
            (on(&sha1), "pending".to_string()),
            (on(&sha1), "success".to_string()),
        ]
    );
    // Exactly these, nothing more (the later passes sent nothing).
    assert_eq!(receiver.requests(None).await.len(), 8 + 4 + 3 + 3 + 6);

    // Events and metrics say it too.
    let metrics = agent.metrics().await;
    assert!(
        metrics.contains("pallet_notifications_total{kind=\"webhook\",result=\"delivered\"} 8"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_receiver_failing_or_down_delays_nothing_and_gets_it_once_back() {
    let mut receiver = Receiver::start();
    receiver.fail_with(500).await;
    let s = Scenario::new("notify-down").await;
    s.commit(&[config_map("app", "1")], "v1");
    let agent = Agent::start_with(
        &s.name,
        &[
            "--notification-retry-max",
            "1s",
            "--notification-timeout",
            "1s",
        ],
    );
    // A second target never answers at all (the fixtures' hanging server).
    let hang = support::Fixtures::load().hang().url.clone();
    s.create_bd(json!([
        {"name": "hook", "on": ["Healthy"], "webhook": {"url": format!("{}/hook", receiver.url)}},
        {"name": "slow", "on": ["Healthy"], "webhook": {"url": format!("{hang}/{}", s.name)}}
    ]))
    .await;
    let entry = |st: &BundleDeploymentStatus, name: &str| {
        st.notifications.iter().find(|n| n.name == name).cloned()
    };
    // The rollout completes while one receiver answers 500 and the other hangs.
    let status = s
        .wait_status(
            &agent,
            "revision 1 healthy, both notifications retrying",
            |st| {
                healthy(st, 1)?;
                let hook = entry(st, "hook").ok_or("no hook entry")?;
                check(
                    hook.result == DeliveryResult::Retrying
                        && hook.message.as_deref() == Some("HTTP 500"),
                    "hook not retrying on 500",
                )?;
                let slow = entry(st, "slow").ok_or("no slow entry")?;
                check(
                    slow.result == DeliveryResult::Retrying
                        && slow.message.as_deref() == Some("no answer within 1s"),
                    "slow not retrying on the timeout",
                )
            },
        )
        .await;
    for type_ in ["Ready", "Healthy"] {
        let condition = find(&status.conditions, type_).unwrap();
        assert_eq!(
            condition.status, "True",
            "failing receivers change nothing: {condition:?}"
        );
    }
    let warnings = events(&s, "NotificationFailed").await;
    assert!(
        warnings
            .iter()
            .any(|e| e
                == "hook (webhook): revision 1 Healthy not delivered yet (HTTP 500); retrying"),
        "{warnings:?}"
    );
    // Down: connections refused.
    receiver.stop();
    let status = s
        .wait_status(&agent, "retrying on a refused connection", |st| {
            let hook = entry(st, "hook").ok_or("no entry")?;
            check(
                hook.result == DeliveryResult::Retrying
                    && hook.message.as_deref() != Some("HTTP 500"),
                "still the 500",
            )
        })
        .await;
    let hook = entry(&status, "hook").unwrap();
    assert!(hook.attempts >= 2, "{hook:?}");
    assert_eq!(hook.transition, "revision 1 Healthy");
    assert_eq!(find(&status.conditions, "Ready").unwrap().status, "True");
    // Back: delivered, once.
    receiver.resume();
    let status = s
        .wait_status(&agent, "delivered", |st| {
            check(
                entry(st, "hook").map(|n| n.result) == Some(DeliveryResult::Delivered),
                "not delivered",
            )
        })
        .await;
    assert_eq!(
        entry(&status, "hook").unwrap().message.as_deref(),
        Some("HTTP 200")
    );
    let sent = events(&s, "NotificationSent").await;
    assert!(
        sent.iter()
            .any(|e| e.starts_with("hook (webhook): revision 1 Healthy delivered after")),
        "{sent:?}"
    );
    s.reconcile_now(&agent, "after-delivery").await;
    let received = receiver.requests(Some("/hook")).await;
    let answered: Vec<u16> = received.iter().map(|r| r.status).collect();
    assert!(answered.contains(&500), "{answered:?}");
    assert_eq!(
        answered.iter().filter(|s| **s == 200).count(),
        1,
        "delivered once: {answered:?}"
    );
    let ids: std::collections::BTreeSet<&str> = received
        .iter()
        .map(|r| r.header("X-Pallet-Id").unwrap())
        .collect();
    assert_eq!(ids.len(), 1, "every attempt is the same notification");
}

/// Notes of the Events with `reason` on the test's BundleDeployment (polled: Events are
/// published after the status write).
async fn events(s: &Scenario, reason: &str) -> Vec<String> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::all(s.client.clone());
    let selector = format!("regarding.name={},reason={reason}", s.name);
    cluster::poll_until(
        &format!("an Event {reason}"),
        Duration::from_secs(30),
        || {
            let api = api.clone();
            let selector = selector.clone();
            async move {
                let list = api
                    .list(&kube::api::ListParams::default().fields(&selector))
                    .await
                    .map_err(|e| e.to_string())?;
                let notes: Vec<String> = list.items.into_iter().filter_map(|e| e.note).collect();
                if notes.is_empty() {
                    Err("none yet".to_string())
                } else {
                    Ok(notes)
                }
            }
        },
    )
    .await
}

#[tokio::test]
async fn an_agent_killed_between_the_transition_and_the_delivery_delivers_after_restart_once() {
    let receiver = Receiver::start();
    let s = Scenario::new("notify-crash").await;
    s.commit(&[config_map("app", "1")], "v1");
    let mut agent = Agent::start_with_env(&s.name, &[], &[(FAULT_ENV, "notify")]);
    s.create_bd(json!([
        {"name": "hook", "on": ["Healthy"], "webhook": {"url": format!("{}/hook", receiver.url)}}
    ]))
    .await;
    let ended = agent.wait_end(Duration::from_secs(90));
    assert!(
        ended.is_some(),
        "the agent aborts at the fault point:\n{}",
        agent.log_tail()
    );
    // Recorded with the transition, not sent.
    let status = s
        .wait_status(&agent, "the Pending notification in status", |st| {
            healthy(st, 1)?;
            check(
                st.notifications.first().map(|n| n.result) == Some(DeliveryResult::Pending),
                "no Pending entry",
            )
        })
        .await;
    assert_eq!(status.notifications[0].attempts, 0);
    assert!(receiver.requests(Some("/hook")).await.is_empty());
    let restarted = agent.restart_with_env(&[]);
    let status = s
        .wait_status(&restarted, "delivered after the restart", |st| {
            check(
                st.notifications.first().map(|n| n.result) == Some(DeliveryResult::Delivered),
                "not delivered",
            )
        })
        .await;
    assert_eq!(status.notifications[0].attempts, 1);
    s.reconcile_now(&restarted, "after-restart").await;
    let received = receiver.requests(Some("/hook")).await;
    assert_eq!(received.len(), 1, "delivered once: {received:?}");
    assert_eq!(received[0].json()["transition"], "revision 1 Healthy");
}

#[tokio::test]
async fn drift_found_while_paused_is_reported_once() {
    let receiver = Receiver::start();
    let s = Scenario::new("notify-drift").await;
    s.commit(&[config_map("app", "1")], "v1");
    let agent = Agent::start(&s.name);
    s.create_bd(json!([
        {"name": "hook", "on": ["Drifted"], "webhook": {"url": format!("{}/hook", receiver.url)}}
    ]))
    .await;
    s.wait_status(&agent, "revision 1 healthy", |st| healthy(st, 1))
        .await;
    let bds: Api<BundleDeployment> = Api::all(s.client.clone());
    bds.patch(
        &s.name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"paused": true}})),
    )
    .await
    .unwrap();
    s.wait_status(&agent, "paused", |st| {
        check(
            find(&st.conditions, "Paused").is_some_and(|c| c.status == "True"),
            "not paused",
        )
    })
    .await;
    // A hotfix by hand: the agent reports it (what resuming would revert), and says so once.
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(s.client.clone(), &s.name);
    config_maps
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"value": "hotfix"}})),
        )
        .await
        .unwrap();
    let status = s
        .wait_status(&agent, "the drift reported and delivered", |st| {
            check(st.drift.is_some(), "no drift yet")?;
            settled(st, "hook")
        })
        .await;
    assert_eq!(status.notifications[0].result, DeliveryResult::Delivered);
    s.reconcile_now(&agent, "still-drifted-1").await;
    s.reconcile_now(&agent, "still-drifted-2").await;
    let received = requests(&receiver, "/hook", 1).await;
    assert_eq!(received.len(), 1, "once per pause: {received:?}");
    let body = received[0].json();
    assert_eq!(body["type"], "Drifted");
    assert_eq!(body["transition"], "revision 1 Drifted");
    assert!(
        body["message"].as_str().unwrap().contains("ConfigMap app"),
        "{body}"
    );
}
