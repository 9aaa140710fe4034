//! End-to-end: secret values never leave the agent through what it writes and says. Against the
//! agent binary on the local control plane, each case makes the agent fail in a way whose
//! message used to quote a secret, then reads every place a message goes: the
//! BundleDeployment's status, its Events, the agent's log, the change log and the bodies a
//! notification receiver got. The secret must be in none of them, and the failure itself must
//! be there (so the test cannot pass by saying nothing).
//!
//! - a Slack target whose URL (a credential: inline or from its Secret's `address`) cannot be
//!   reached;
//! - a chart whose values.schema.json `pattern` refuses a value that comes from a Secret;
//! - a new revision over the BundleDeployment's snapshot quota: refused with a clear condition,
//!   the active revision kept.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/receiver.rs"]
mod receiver;
mod support;

use std::time::Duration;

use agent::Agent;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::Client;
use pallet::api::conditions::find;
use pallet::api::BundleDeployment;
use receiver::Receiver;
use serde_json::json;

const AGENT_NAMESPACE: &str = "pallet-system";

/// A Secret of the agent's namespace, given to BundleDeployment `bd` by its access label.
async fn secret(client: &Client, bd: &str, name: &str, data: serde_json::Value) {
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": AGENT_NAMESPACE,
            "labels": {format!("access.pallet.dev/{bd}"): "true"}},
        "stringData": data,
    });
    Api::<Secret>::namespaced(client.clone(), AGENT_NAMESPACE)
        .patch(
            name,
            &PatchParams::apply(cluster::TEST_FIELD_MANAGER),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap();
}

/// Every text the agent wrote or said about BundleDeployment `name`: its status, the notes of
/// its Events, the agent's log and change log, and the bodies the receiver got.
async fn everything_said(
    client: &Client,
    agent: &Agent,
    name: &str,
    receiver: &Receiver,
) -> Vec<(&'static str, String)> {
    let bd = Api::<BundleDeployment>::all(client.clone())
        .get(name)
        .await
        .unwrap();
    let status = serde_json::to_string(&bd.status).unwrap();
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    let selector = format!("regarding.name={name}");
    let notes: Vec<String> = events
        .list(&ListParams::default().fields(&selector))
        .await
        .unwrap()
        .items
        .into_iter()
        .flat_map(|e| [e.note.unwrap_or_default(), e.reason.unwrap_or_default()])
        .collect();
    let bodies: Vec<String> = receiver
        .requests(None)
        .await
        .into_iter()
        .map(|r| r.body)
        .collect();
    vec![
        ("status", status),
        ("Events", notes.join("\n")),
        (
            "agent log",
            std::fs::read_to_string(&agent.log).unwrap_or_default(),
        ),
        (
            "change log",
            std::fs::read_to_string(agent.change_log_path()).unwrap_or_default(),
        ),
        ("notification bodies", bodies.join("\n")),
    ]
}

fn assert_nowhere(said: &[(&'static str, String)], secrets: &[&str]) {
    for (place, text) in said {
        for secret in secrets {
            assert!(
                !text.contains(secret),
                "{secret:?} is in the {place}:\n{}",
                text.lines()
                    .filter(|l| l.contains(secret))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
    }
}

/// Polls `name`'s status until `check` says yes; panics with the status and log.
async fn wait_status(
    client: &Client,
    agent: &Agent,
    name: &str,
    what: &str,
    check: impl Fn(&pallet::api::BundleDeploymentStatus) -> bool,
) -> pallet::api::BundleDeploymentStatus {
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let start = std::time::Instant::now();
    loop {
        let status = bds.get(name).await.unwrap().status.unwrap_or_default();
        if check(&status) {
            return status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "timed out waiting for {what}\nstatus: {}\nagent log:\n{}",
            serde_json::to_string_pretty(&status).unwrap(),
            agent.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_slack_url_is_never_shown_when_it_cannot_be_reached() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let receiver = Receiver::start();
    let name = support::unique_name("leak-slack");
    let repo = fx.git_repo(&name);
    repo.commit_files(
        "main",
        &[(
            "cm.yaml",
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}-cm}}\ndata: {{a: b}}\n"
            )
            .as_bytes(),
        )],
        "init",
    );
    // Nothing listens there: every attempt is a connection error.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let inline_secret = "T0INLINE/B0INLINE/inlineWebhookToken42";
    let stored_secret = "T0STORED/B0STORED/storedWebhookToken42";
    let secret_name = format!("{name}-slack");
    secret(
        &client,
        &name,
        &secret_name,
        json!({"address": format!("http://127.0.0.1:{dead}/services/{stored_secret}")}),
    )
    .await;
    let agent = Agent::start(&name);
    agent::apply_bd(
        &client,
        &name,
        json!({
            "installNamespace": name,
            "sources": [{"kind": "git", "git": {"repository": repo.url(fx.git_plain()), "ref": {"branch": "main"}}}],
            "format": "plain",
            "notifications": [
                {"name": "inline", "on": ["Healthy"],
                 "slack": {"url": format!("http://127.0.0.1:{dead}/services/{inline_secret}")}},
                {"name": "stored", "on": ["Healthy"], "slack": {"secret": {"name": secret_name}}},
                {"name": "hook", "on": ["Healthy"], "webhook": {"url": format!("{}/hook", receiver.url)}},
            ],
        }),
    )
    .await;
    let status = wait_status(&client, &agent, &name, "both Slack targets failing", |s| {
        ["inline", "stored"].iter().all(|target| {
            s.notifications.iter().any(|n| {
                n.name == *target
                    && n.attempts >= 2
                    && n.message.as_deref().is_some_and(|m| m.contains("onnect"))
            })
        })
    })
    .await;
    let said = everything_said(&client, &agent, &name, &receiver).await;
    // The failure is reported (so the check below is not vacuous)...
    assert!(
        status
            .notifications
            .iter()
            .any(|n| n.name == "stored"
                && n.message.as_deref().is_some_and(|m| m.contains("onnect"))),
        "{:?}",
        status.notifications
    );
    assert!(said[1].1.contains("not delivered"), "Events: {}", said[1].1);
    // ...and neither URL is anywhere, not even in part.
    assert_nowhere(
        &said,
        &[
            inline_secret,
            stored_secret,
            "inlineWebhookToken42",
            "storedWebhookToken42",
        ],
    );
}

#[tokio::test]
async fn schema_errors_name_the_rule_not_a_value_from_a_secret() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let receiver = Receiver::start();
    let name = support::unique_name("leak-schema");
    let repo = fx.git_repo(&name);
    let schema = json!({
        "type": "object",
        "properties": {"password": {"type": "string", "pattern": "^[a-z]+$"}},
    });
    let template = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  p: {{ .Values.password | quote }}\n";
    repo.commit_files(
        "main",
        &[
            (
                "Chart.yaml",
                b"apiVersion: v2\nname: leak\nversion: 0.1.0\n".as_slice(),
            ),
            ("values.yaml", b"password: placeholder\n".as_slice()),
            ("values.schema.json", schema.to_string().as_bytes()),
            ("templates/cm.yaml", template.as_bytes()),
        ],
        "chart",
    );
    let password = "Sup3r-Secret-Passw0rd-77";
    let secret_name = format!("{name}-values");
    secret(
        &client,
        &name,
        &secret_name,
        json!({"values.yaml": format!("password: {password}\n")}),
    )
    .await;
    let agent = Agent::start(&name);
    agent::apply_bd(
        &client,
        &name,
        json!({
            "installNamespace": name,
            "sources": [{"kind": "git", "git": {"repository": repo.url(fx.git_plain()), "ref": {"branch": "main"}}}],
            "format": "helm",
            "config": {"helm": {"valuesFrom": [{"kind": "Secret", "name": secret_name}]}},
            "notifications": [
                {"name": "hook", "on": ["Stalled", "Failed"], "webhook": {"url": format!("{}/hook", receiver.url)}},
            ],
        }),
    )
    .await;
    let bd = agent::wait_condition(
        &client,
        &agent,
        &name,
        "Ready",
        "False",
        "does not match pattern",
    )
    .await;
    let ready = find(&bd.status.as_ref().unwrap().conditions, "Ready")
        .unwrap()
        .clone();
    assert!(
        ready.message.contains("/password") && ready.message.contains("^[a-z]+$"),
        "the path and the rule are named: {}",
        ready.message
    );
    // The Stalled notification carries the message to the receiver.
    wait_body(&receiver, "does not match pattern").await;
    let said = everything_said(&client, &agent, &name, &receiver).await;
    assert_nowhere(&said, &[password, "Sup3r-Secret"]);
}

/// Waits until the receiver got a body containing `text`.
async fn wait_body(receiver: &Receiver, text: &str) {
    cluster::poll_until(
        &format!("a notification body with {text:?}"),
        Duration::from_secs(60),
        || async {
            let bodies = receiver.requests(None).await;
            if bodies.iter().any(|r| r.body.contains(text)) {
                Ok(())
            } else {
                Err(format!("{} bodies so far", bodies.len()))
            }
        },
    )
    .await;
}

/// Random-looking text that compresses poorly (hex of chained SHA-256), `len` bytes.
fn incompressible(seed: &str, len: usize) -> String {
    use sha2::Digest;
    let mut out = String::with_capacity(len + 64);
    let mut block = sha2::Sha256::digest(seed.as_bytes());
    while out.len() < len {
        for b in block.iter() {
            out.push_str(&format!("{b:02x}"));
        }
        block = sha2::Sha256::digest(block);
    }
    out.truncate(len);
    out
}

#[tokio::test]
async fn a_revision_over_the_snapshot_quota_is_refused_and_the_active_one_kept() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let name = support::unique_name("snapshot-quota");
    let repo = fx.git_repo(&name);
    // About 600 KiB compressed per revision: one fits a 1 MiB quota, two do not.
    let manifests = |version: &str| {
        (0..2)
            .map(|i| {
                format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}-{i}}}\ndata:\n  version: \"{version}\"\n  blob: {}\n",
                    incompressible(&format!("{version}-{i}"), 600_000)
                )
            })
            .collect::<Vec<_>>()
            .join("---\n")
    };
    repo.commit_files("main", &[("cms.yaml", manifests("1").as_bytes())], "v1");
    let agent = Agent::start_with(
        &name,
        &[
            "--snapshot-quota-per-bundle-mib",
            "1",
            "--snapshot-quota-mib",
            "100000",
        ],
    );
    agent::apply_bd(
        &client,
        &name,
        json!({
            "installNamespace": name,
            "sources": [{"kind": "git", "git": {"repository": repo.url(fx.git_plain()), "ref": {"branch": "main"}}}],
            "format": "plain",
        }),
    )
    .await;
    wait_status(&client, &agent, &name, "revision 1 active", |s| {
        s.active_revision == Some(1)
    })
    .await;
    repo.commit_files("main", &[("cms.yaml", manifests("2").as_bytes())], "v2");
    let bd = agent::wait_condition(
        &client,
        &agent,
        &name,
        "Ready",
        "False",
        "--snapshot-quota-per-bundle-mib",
    )
    .await;
    let status = bd.status.unwrap();
    let ready = find(&status.conditions, "Ready").unwrap();
    assert_eq!(ready.reason, "SnapshotQuotaExceeded", "{ready:?}");
    assert!(
        ready.message.contains("nothing was stored or applied"),
        "{ready:?}"
    );
    assert_eq!(status.active_revision, Some(1));
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    let live = cms.get(&format!("{name}-0")).await.unwrap();
    assert_eq!(
        live.data.unwrap().get("version").map(String::as_str),
        Some("1"),
        "the active revision's objects are untouched"
    );
}
