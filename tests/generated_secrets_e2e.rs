//! End-to-end: the values a chart generates (`randAlphaNum`, `uuidv4`, `genCA`, `bcrypt`) come
//! from the BundleDeployment's render key, a Secret of the agent's namespace: they stay the same
//! across reconciles, agent restarts, a pause and a resume and an edit that renders nothing new;
//! a BundleDeployment made again with the same name gets other ones; and `pallet render -f`
//! cannot recompute them from the BundleDeployment alone.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::collections::BTreeMap;

use agent::{wait_condition, Agent};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams};
use kube::Client;
use pallet::api::BundleDeployment;
use serde_json::{json, Value};

/// A chart whose one Secret holds generated values of every kind.
fn chart(dir: &std::path::Path) {
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: generated\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("templates/secret.yaml"),
        "{{- $ca := genCA \"generated-ca\" 365 }}\n\
         apiVersion: v1\nkind: Secret\nmetadata:\n  name: generated\nstringData:\n  \
         password: {{ randAlphaNum 32 | quote }}\n  \
         id: {{ uuidv4 | quote }}\n  \
         hash: {{ bcrypt \"fixed\" | quote }}\n  \
         ca.key: {{ $ca.Key | quote }}\n",
    )
    .unwrap();
}

/// The generated Secret's values as the API server holds them.
async fn generated(client: &Client, namespace: &str) -> BTreeMap<String, String> {
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get("generated")
        .await
        .unwrap();
    secret
        .data
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v.0).unwrap()))
        .collect()
}

/// The render-key Secret of the BundleDeployment with `uid`, if any.
async fn render_key(client: &Client, namespace: &str, uid: &str) -> Option<Secret> {
    Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(&format!("pallet-render-key-{uid}"))
        .await
        .unwrap()
}

#[tokio::test]
async fn generated_values_come_from_a_secret_key_and_survive_everything_but_recreation() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("gen");
    let agent_ns = format!("{test}-agent");
    for ns in [&test, &agent_ns] {
        Api::<Namespace>::all(client.clone())
            .create(
                &Default::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
            )
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    chart(dir.path());
    let repo = fixtures.git_repo(&test);
    repo.commit_dir("main", dir.path(), "v1");
    let spec = json!({"installNamespace": test, "format": "helm",
        "sources": [{"kind": "git", "git": {"repository": repo.url(fixtures.git_plain()), "ref": {"branch": "main"}}}]});
    let flags = ["--namespace", agent_ns.as_str()];
    let mut agent = Agent::start_with(&test, &flags);
    agent::apply_bd(&client, &test, spec.clone()).await;
    wait_condition(&client, &agent, &test, "Ready", "True", "1 objects").await;
    let first = generated(&client, &test).await;
    assert_eq!(first["password"].len(), 32);
    assert!(first["ca.key"].contains("PRIVATE KEY"), "{first:?}");

    // The key: one immutable Secret of the agent's namespace, bound to the object's UID.
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let uid = bds.get(&test).await.unwrap().metadata.uid.unwrap();
    let key = render_key(&client, &agent_ns, &uid)
        .await
        .expect("a render key");
    assert_eq!(key.type_.as_deref(), Some("pallet.dev/render-key"));
    assert_eq!(key.immutable, Some(true));
    assert_eq!(key.data.as_ref().unwrap()["key"].0.len(), 32, "256 bits");
    assert_eq!(key.metadata.owner_references.unwrap()[0].uid, uid);

    // Ten reconciles, each asked for and handled, with a restart of the agent (a new process
    // renders again, reading the key back) halfway: the same values, still revision 1.
    for n in 1..=10 {
        if n == 5 {
            agent.kill();
            agent = agent.restart_with_env(&[]);
        }
        let request = format!("again-{n}");
        agent::patch_bd(
            &client,
            &test,
            json!({"metadata": {"annotations": {"pallet.dev/requested-reconcile": request}}}),
        )
        .await;
        let status = agent::wait_status(
            &client,
            &agent,
            &test,
            "the reconcile request handled",
            |s, g| {
                agent::is_ready(s, g)
                    && s.last_handled_reconcile.as_deref() == Some(request.as_str())
            },
        )
        .await;
        assert_eq!(status.active_revision, Some(1));
        assert_eq!(generated(&client, &test).await, first, "reconcile {n}");
    }

    // A pause and a resume (two new generations): nothing new to render.
    agent::patch_bd(&client, &test, json!({"spec": {"paused": true}})).await;
    wait_condition(&client, &agent, &test, "Paused", "True", "").await;
    agent::patch_bd(&client, &test, json!({"spec": {"paused": false}})).await;
    let status = agent::wait_status(&client, &agent, &test, "resumed", agent::is_ready).await;
    assert_eq!(status.active_revision, Some(1), "no new revision");
    assert_eq!(
        generated(&client, &test).await,
        first,
        "after a pause and a resume"
    );

    // An edit of the spec that renders nothing new.
    agent::patch_bd(
        &client,
        &test,
        json!({"spec": {"rollout": {"historyLimit": 4}}}),
    )
    .await;
    let status =
        agent::wait_status(&client, &agent, &test, "the edit handled", agent::is_ready).await;
    assert_eq!(status.active_revision, Some(1), "no new revision");
    assert_eq!(
        generated(&client, &test).await,
        first,
        "after an unrelated edit"
    );

    // `pallet render -f` with the BundleDeployment as the cluster holds it: other values, and
    // it says so.
    let manifest = dir.path().join("bd.json");
    let live = bds.get(&test).await.unwrap();
    std::fs::write(&manifest, serde_json::to_vec(&live).unwrap()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pallet"))
        .args([
            "render",
            "-f",
            manifest.to_str().unwrap(),
            "-o",
            "json",
            // The fixture git server is on this machine.
            "--allow-loopback-egress",
            "--cache-dir",
        ])
        .arg(dir.path().join("cache"))
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not the ones the agent generates"),
        "{stderr}"
    );
    let rendered: Value = serde_json::from_slice(&out.stdout).unwrap();
    let offline = &rendered["items"][0]["stringData"];
    for field in ["password", "id", "hash", "ca.key"] {
        assert_ne!(
            offline[field].as_str(),
            Some(first[field].as_str()),
            "{field} must not be recomputable from the BundleDeployment"
        );
    }

    // Deleted: the key goes with it. Made again with the same name: a new key, new values.
    bds.delete(&test, &DeleteParams::default()).await.unwrap();
    agent::wait_bd_gone(&client, &test).await;
    assert!(render_key(&client, &agent_ns, &uid).await.is_none());
    agent::apply_bd(&client, &test, spec.clone()).await;
    wait_condition(&client, &agent, &test, "Ready", "True", "1 objects").await;
    let again = generated(&client, &test).await;
    let new_uid = bds.get(&test).await.unwrap().metadata.uid.unwrap();
    assert_ne!(new_uid, uid);
    assert!(render_key(&client, &agent_ns, &new_uid).await.is_some());
    for field in ["password", "id", "hash", "ca.key"] {
        assert_ne!(again[field], first[field], "{field} after recreation");
    }

    bds.delete(&test, &DeleteParams::default()).await.unwrap();
    agent::wait_bd_gone(&client, &test).await;
    for ns in [&test, &agent_ns] {
        let _ = Api::<Namespace>::all(client.clone())
            .delete(ns, &DeleteParams::default())
            .await;
    }
}
