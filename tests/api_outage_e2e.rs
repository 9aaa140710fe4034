//! End-to-end: recovery after an API server outage. The test runs a control plane
//! of its own (the project's `tools/controlplane.sh` on another port and state directory), so
//! stopping it disturbs no other test, and checks that the agent repairs drift within a few
//! seconds of the API server's return, however long the outage made its retries back off.
//!
//! rbac-pass: skip (tools/test.sh: the deploy/ ServiceAccount lives in the shared cluster only)

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/private_control_plane.rs"]
mod private_control_plane;
mod support;

use std::time::{Duration, Instant};

use agent::Agent;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

use pallet::api::BundleDeployment;
use private_control_plane::PrivateControlPlane;
use serde_json::json;

#[tokio::test]
async fn after_an_api_outage_the_agent_is_back_within_seconds() {
    let plane = PrivateControlPlane::start();
    let client = plane.client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("api-outage");
    let repo = fixtures.git_repo(&test);
    repo.commit_files(
        "main",
        &[(
            "app.yaml",
            b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  value: \"1\"\n",
        )],
        "v1",
    );
    let agent = Agent::start_on(&plane.kubeconfig(), &test, &["--requeue-seconds", "2"]);
    let spec = json!({
        "installNamespace": test,
        "sources": [{"kind": "git", "git": {"repository": repo.url(fixtures.git_plain()), "ref": {"branch": "main"}}}],
        "format": "plain",
    });
    agent::apply_bd(&client, &test, spec).await;
    agent::wait_condition(&client, &agent, &test, "Ready", "True", "1 objects").await;

    // An outage long enough for unbounded backoffs to grow past half a minute. A pass that needs
    // nothing from the API server (its objects' live copies unchanged, its status as written)
    // makes no request and cannot notice the outage; the agent's watches do, and keep retrying.
    plane.script("stop");
    let outage = Instant::now();
    while outage.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    plane.script("start");
    let back = Instant::now();
    // It repairs drift made right after the return within seconds: its watches' retries are
    // bounded by API_RETRY_MAX (4 s), not grown with the outage (kube's watch backoff reaches
    // 30 s, the per-BundleDeployment backoff a minute and more).
    let client = plane.client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);
    cms.delete("app", &Default::default()).await.unwrap();
    cluster::poll_until(
        "the deleted ConfigMap to be back",
        Duration::from_secs(15),
        || async {
            match cms.get_opt("app").await {
                Ok(Some(_)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    eprintln!(
        "drift repaired {:?} after the API server returned",
        back.elapsed()
    );
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let _ = bds.delete(&test, &Default::default()).await;
    agent::wait_bd_gone(&client, &test).await;
}

/// Fault injection: the API server restarted in the middle of an upgrade's apply. After it
/// returns, the upgrade completes: every object has the new revision's content and the
/// ownership label, the objects the new revision dropped are pruned, and every object the
/// upgrade changed has its change-log entry.
#[tokio::test]
async fn an_api_server_restart_mid_apply_converges() {
    const N: usize = 300;
    let plane = PrivateControlPlane::start();
    let client = plane.client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("api-midapply");
    let repo = fixtures.git_repo(&test);
    let bundle = |version: &str, names: std::ops::Range<usize>| {
        names
            .map(|i| {
                format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\ndata:\n  value: \"{version}\"\n"
                )
            })
            .collect::<Vec<_>>()
            .join("---\n")
    };
    repo.commit_files("main", &[("app.yaml", bundle("1", 0..N).as_bytes())], "v1");
    // One write at a time, so the apply of revision 2 lasts long enough to be cut.
    let agent = Agent::start_on(
        &plane.kubeconfig(),
        &test,
        &["--requeue-seconds", "2", "--apply-parallelism", "1"],
    );
    let spec = json!({
        "installNamespace": test,
        "sources": [{"kind": "git", "git": {"repository": repo.url(fixtures.git_plain()), "ref": {"branch": "main"}}}],
        "format": "plain",
    });
    agent::apply_bd(&client, &test, spec).await;
    agent::wait_condition(
        &client,
        &agent,
        &test,
        "Ready",
        "True",
        &format!("{N} objects"),
    )
    .await;

    // Revision 2 changes every object but the first ten, which it drops.
    repo.commit_files("main", &[("app.yaml", bundle("2", 10..N).as_bytes())], "v2");
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    cluster::poll_until(
        "revision 2 to start applying",
        Duration::from_secs(60),
        || async {
            let bd = bds.get(&test).await.map_err(|e| e.to_string())?;
            let status = bd.status.unwrap_or_default();
            match status.revisions.first() {
                Some(r) if r.number == 2 => Ok(()),
                other => Err(format!("{:?}", other.map(|r| (r.number, r.phase)))),
            }
        },
    )
    .await;
    plane.script("stop");
    let written_before_restart = agent
        .changes()
        .iter()
        .filter(|(op, reason, _, _)| op == "update" && reason == "new-revision")
        .count();
    plane.script("start");
    assert!(
        written_before_restart < N - 10,
        "the apply was not cut ({written_before_restart} of {} written)",
        N - 10
    );

    let client = plane.client().await;
    agent::wait_condition(
        &client,
        &agent,
        &test,
        "Ready",
        "True",
        &format!("{} objects", N - 10),
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);
    // (kube-controller-manager adds kube-root-ca.crt to every namespace.)
    let live: Vec<ConfigMap> = cms
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|cm| cm.metadata.name.as_deref() != Some("kube-root-ca.crt"))
        .collect();
    assert_eq!(
        live.len(),
        N - 10,
        "the dropped objects are pruned, nothing else is lost"
    );
    for cm in &live {
        let name = cm.metadata.name.clone().unwrap_or_default();
        assert_eq!(
            cm.data
                .as_ref()
                .and_then(|d| d.get("value"))
                .map(String::as_str),
            Some("2"),
            "{name}"
        );
        assert_eq!(
            cm.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("pallet.dev/bundle-deployment"))
                .map(String::as_str),
            Some(test.as_str()),
            "{name} carries the ownership label"
        );
    }
    // Every object revision 2 changed has its entry in the change log.
    let updated: std::collections::BTreeSet<String> = agent
        .changes()
        .into_iter()
        .filter(|(op, _, _, _)| op == "update")
        .map(|(_, _, name, _)| name)
        .collect();
    let missing: Vec<String> = (10..N)
        .map(|i| format!("cm-{i}"))
        .filter(|name| !updated.contains(name))
        .collect();
    assert!(
        missing.is_empty(),
        "writes without a change-log entry: {missing:?}"
    );
    let deleted = agent
        .changes()
        .into_iter()
        .filter(|(op, _, _, _)| op == "delete")
        .count();
    assert_eq!(deleted, 10, "each pruned object logged once");
    let _ = bds.delete(&test, &Default::default()).await;
    agent::wait_bd_gone(&client, &test).await;
}
