//! The request commands with the real agent: `pallet rollback --to N --wait` returns the objects
//! to revision N; `pallet retry --wait` tries refused content again once its cause is fixed;
//! `history` and `trace` show the result.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cli.rs"]
mod cli;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, PostParams};
use kube::Client;
use serde_json::json;

fn config_map(name: &str, namespace: Option<&str>, value: &str) -> String {
    let namespace = namespace
        .map(|ns| format!("  namespace: {ns}\n"))
        .unwrap_or_default();
    format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n{namespace}data: {{v: {value}}}\n")
}

async fn value_of(client: &Client, namespace: &str, name: &str) -> Result<String, String> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("{namespace}/{name} not there"))?;
    Ok(cm
        .data
        .unwrap_or_default()
        .get("v")
        .cloned()
        .unwrap_or_default())
}

async fn wait_value(client: &Client, namespace: &str, name: &str, want: &str) {
    cluster::poll_until(
        &format!("{namespace}/{name} to hold {want}"),
        Duration::from_secs(60),
        || async move {
            match value_of(client, namespace, name).await? {
                v if v == want => Ok(()),
                v => Err(v),
            }
        },
    )
    .await
}

async fn wait_revision(client: &Client, name: &str, number: i64, phase: &str) {
    cluster::poll_until(
        &format!("{name}: revision {number} {phase}"),
        Duration::from_secs(60),
        || async move {
            let bd = cli::get_bd(client, name).await;
            let status = bd.status.unwrap_or_default();
            let found = status.revisions.iter().find(|r| r.number == number);
            match found {
                Some(r) if serde_json::to_value(r.phase).unwrap() == json!(phase) => Ok(()),
                _ => Err(format!("{:?}", status.revisions)),
            }
        },
    )
    .await
}

async fn cleanup(client: &Client, name: &str, namespaces: &[&str]) {
    cli::delete_bd(client, name).await;
    agent::wait_bd_gone(client, name).await;
    for ns in namespaces {
        let _ = Api::<Namespace>::all(client.clone())
            .delete(ns, &DeleteParams::default())
            .await;
    }
}

#[tokio::test]
async fn rollback_returns_to_the_stored_revision_and_trace_shows_it() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let name = support::unique_name("cli-rb");
    let repo = fx.git_repo(&name);
    let commit_v1 = repo.commit_files(
        "main",
        &[("cm.yaml", config_map("app", None, "v1").as_bytes())],
        "v1",
    );
    let agent = agent::Agent::start(&name);
    agent::apply_bd(
        &client,
        &name,
        json!({"format": "plain", "installNamespace": name,
               "sources": [{"kind": "git", "git": {"repository": repo.url(fx.git_plain()), "ref": {"branch": "main"}}}]}),
    )
    .await;
    wait_revision(&client, &name, 1, "Healthy").await;
    repo.commit_files(
        "main",
        &[("cm.yaml", config_map("app", None, "v2").as_bytes())],
        "v2",
    );
    wait_revision(&client, &name, 2, "Healthy").await;
    wait_value(&client, &name, "app", "v2").await;

    let out = cli::pallet_ok(&["rollback", &name, "--to", "1", "--wait", "--timeout", "60"]);
    assert!(
        out.contains("handled: active revision 1;"),
        "{out}\n{}",
        agent.log_tail()
    );
    wait_value(&client, &name, "app", "v1").await;

    let history = cli::pallet_ok(&["history", &name]);
    let active = history
        .lines()
        .find(|l| l.starts_with('*'))
        .unwrap_or_else(|| panic!("no active row:\n{history}"));
    assert!(active.starts_with("* 1 "), "{history}");
    assert!(active.contains(&commit_v1), "{history}");
    assert!(
        history
            .lines()
            .any(|l| l.starts_with("  2 ") && l.contains("RolledBack")),
        "{history}"
    );
    // The object was last written by the rollback to revision 1.
    let trace = cli::pallet_ok(&["trace", "configmap/app", "-n", &name]);
    assert!(trace.contains("Revision:         1 (active)"), "{trace}");
    assert!(
        trace.contains(&format!("git main -> {commit_v1}")),
        "{trace}"
    );

    // A revision that does not exist is refused before anything is written.
    let refused = cli::pallet_err(&["rollback", &name, "--to", "9"]);
    assert!(refused.contains("has no stored revision 9"), "{refused}");
    cleanup(&client, &name, &[&name]).await;
    drop(agent);
}

#[tokio::test]
async fn retry_tries_refused_content_again_once_its_cause_is_fixed() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let name = support::unique_name("cli-retry-e2e");
    let elsewhere = format!("{name}-x");
    let repo = fx.git_repo(&name);
    repo.commit_files(
        "main",
        &[("cm.yaml", config_map("app", None, "v1").as_bytes())],
        "v1",
    );
    let agent = agent::Agent::start(&name);
    agent::apply_bd(
        &client,
        &name,
        json!({"format": "plain", "installNamespace": name,
               "sources": [{"kind": "git", "git": {"repository": repo.url(fx.git_plain()), "ref": {"branch": "main"}}}]}),
    )
    .await;
    wait_revision(&client, &name, 1, "Healthy").await;
    // v2 puts an object in a namespace nobody creates: the apply fails and v1 comes back.
    let v2 = config_map("app", None, "v2") + &config_map("app", Some(&elsewhere), "v2");
    repo.commit_files("main", &[("cm.yaml", v2.as_bytes())], "v2");
    cluster::poll_until("revision 2 to fail", Duration::from_secs(60), || async {
        let status = cli::get_bd(&client, &name).await.status.unwrap_or_default();
        match status.revisions.iter().find(|r| r.number == 2) {
            Some(r)
                if matches!(
                    r.phase,
                    pallet::api::RevisionPhase::Failed | pallet::api::RevisionPhase::RolledBack
                ) =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    wait_value(&client, &name, "app", "v1").await;

    // Fix the cause, then ask for a retry: the same content is applied again and now succeeds.
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": elsewhere}})).unwrap(),
        )
        .await
        .unwrap();
    let out = cli::pallet_ok(&["retry", &name, "--wait", "--timeout", "60"]);
    assert!(out.contains(&format!("requested retry of {name}")), "{out}");
    assert!(out.contains("handled: active revision"), "{out}");
    wait_value(&client, &elsewhere, "app", "v2").await;
    wait_value(&client, &name, "app", "v2").await;
    let status = cli::pallet_ok(&["status", &name]);
    assert!(
        status
            .lines()
            .any(|l| l.trim_start().starts_with("Ready ") && l.contains("True")),
        "{status}\n{}",
        agent.log_tail()
    );

    cleanup(&client, &name, &[&name, &elsewhere]).await;
    drop(agent);
}
