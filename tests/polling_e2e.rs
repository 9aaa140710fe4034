//! End-to-end: floating sources are re-resolved at their `pollInterval`, independent of the
//! agent's requeue period, and reconciles between polls cost no request to the source.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use agent::{wait_condition, wait_value, Agent};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use pallet::api::BundleDeployment;
use serde_json::json;

fn config_map(value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  value: \"{value}\"\n"
    )
}

async fn create_bd(client: &Client, name: &str, git_url: &str, poll: &str) {
    let spec = json!({
        "installNamespace": name,
        "sources": [{"kind": "git", "git": {"repository": git_url, "ref": {"branch": "main"}},
                     "pollInterval": poll}],
        "format": "plain",
    });
    agent::apply_bd(client, name, spec).await;
}

async fn cleanup(client: &Client, name: &str) {
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let _ = bds.delete(name, &Default::default()).await;
    agent::wait_bd_gone(client, name).await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &Default::default())
        .await;
}

#[tokio::test]
async fn a_moved_branch_is_picked_up_at_the_poll_interval_not_the_requeue_period() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("poll-due");
    let repo = fixtures.git_repo(&test);
    repo.commit_files("main", &[("app.yaml", config_map("1").as_bytes())], "v1");
    // An hour between requeues: only the 2 s poll can explain picking up the new commit.
    let agent = Agent::start_with(&test, &["--requeue-seconds", "3600"]);
    create_bd(&client, &test, &repo.url(fixtures.git_plain()), "2s").await;
    wait_condition(&client, &agent, &test, "Ready", "True", "1 objects").await;

    repo.commit_files("main", &[("app.yaml", config_map("2").as_bytes())], "v2");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);
    wait_value(&cms, "app", "2").await;
    cleanup(&client, &test).await;
}

#[tokio::test]
async fn reconciles_between_polls_cost_no_request_and_a_reconcile_request_polls_now() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let git = fixtures.git_plain();
    let test = support::unique_name("poll-quiet");
    let repo = fixtures.git_repo(&test);
    repo.commit_files("main", &[("app.yaml", config_map("1").as_bytes())], "v1");
    let agent = Agent::start_with(&test, &["--requeue-seconds", "3600"]);
    create_bd(&client, &test, &repo.url(git), "1h").await;
    wait_condition(&client, &agent, &test, "Ready", "True", "1 objects").await;
    let before = fixtures.git_requests(git, &test).await;

    // Drift makes the agent reconcile (the watch on owned objects): it repairs the object from
    // the resolution it has, without asking the git server again.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);
    cms.delete("app", &Default::default()).await.unwrap();
    wait_value(&cms, "app", "1").await;
    assert_eq!(
        fixtures.git_requests(git, &test).await,
        before,
        "a reconcile within the poll interval must not resolve the branch again"
    );

    // A new commit is not seen before the hour is up, unless the user asks for a reconcile.
    repo.commit_files("main", &[("app.yaml", config_map("2").as_bytes())], "v2");
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let request = json!({"metadata": {"annotations": {"pallet.dev/requested-reconcile": "now-1"}}});
    bds.patch(&test, &PatchParams::default(), &Patch::Merge(&request))
        .await
        .unwrap();
    wait_value(&cms, "app", "2").await;
    assert!(fixtures.git_requests(git, &test).await > before);
    cleanup(&client, &test).await;
}
