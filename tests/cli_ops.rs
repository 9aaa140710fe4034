//! `pallet status`, `history`, `rollback`, `retry`, `reconcile`, `pause`, `resume` and `trace`
//! against the local control plane.
//!
//! The agent's side of revisions and one-shot requests is not what these test: the test writes
//! the status an agent would write (through the status subresource) and checks what the CLI
//! shows and writes, including that `--wait` returns once the status says the request was
//! handled.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::time::Duration;

use cli::{condition, create_bd, delete_bd, get_bd, pallet_err, pallet_ok, write_status};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use pallet::api::{
    REQUESTED_RECONCILE_ANNOTATION, REQUESTED_RETRY_ANNOTATION, REQUESTED_ROLLBACK_ANNOTATION,
};
use serde_json::{json, Value};

fn spec() -> Value {
    json!({"format": "plain", "installNamespace": "apps",
           "sources": [{"kind": "http", "http": {"url": "http://127.0.0.1:1/bundle.yaml"}}]})
}

fn revisions() -> Value {
    json!([
        {"number": 2, "generation": 2, "digest": format!("sha256:{}", "b".repeat(64)), "phase": "Progressing",
         "objects": 3, "appliedAt": "2026-01-01T00:00:00Z",
         "sources": [{"kind": "git", "ref": "main", "resolved": "2".repeat(40)}]},
        {"number": 1, "generation": 1, "digest": format!("sha256:{}", "a".repeat(64)), "phase": "Superseded",
         "objects": 2, "appliedAt": "2025-12-31T00:00:00Z", "healthyAt": "2025-12-31T00:01:00Z",
         "sources": [{"kind": "git", "ref": "main", "resolved": "1".repeat(40)},
                     {"kind": "helmRepository", "ref": "https://charts.example demo 0.x",
                      "resolved": format!("sha256:{}", "c".repeat(64)), "version": "0.2.0"}],
         "message": "superseded by 2"},
    ])
}

async fn bd_with_history(client: &Client, name: &str) {
    cluster::install_crd(client).await;
    create_bd(client, name, spec(), json!({})).await;
    write_status(
        client,
        name,
        json!({
            "observedGeneration": 1,
            "activeRevision": 2,
            "lastHealthyRevision": 1,
            "revisions": revisions(),
            "conditions": [
                condition("Ready", "False", "Progressing", "revision 2 is not healthy yet"),
                condition("Healthy", "False", "Unhealthy", "Deployment apps/web: 0 of 1 replicas available"),
            ],
            "drift": {"count": 1, "objects": [{"version": "v1", "kind": "ConfigMap", "namespace": "apps",
                      "name": "app", "message": "differs from the bundle at .data.value"}]},
        }),
    )
    .await;
}

fn annotation(bd: &pallet::api::BundleDeployment, key: &str) -> Option<String> {
    bd.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .cloned()
}

fn is_rfc3339(token: &str) -> bool {
    token.ends_with('Z') && token.parse::<k8s_openapi::jiff::Timestamp>().is_ok()
}

#[tokio::test]
async fn status_and_history_show_what_the_agent_reported() {
    let client = cluster::client().await;
    let name = support::unique_name("cli-status");
    bd_with_history(&client, &name).await;

    let text = pallet_ok(&["status", &name]);
    for expected in [
        format!("Name:                  {name}"),
        "Format:                plain".to_string(),
        "Cluster:               in-cluster".to_string(),
        "Active revision:       2".to_string(),
        "Last healthy revision: 1".to_string(),
        "Unhealthy objects:\n  Deployment apps/web: 0 of 1 replicas available".to_string(),
        "Drift: 1 object(s) differ from the bundle\n  ConfigMap apps/app: differs from the bundle at .data.value".to_string(),
        "superseded by 2".to_string(),
    ] {
        assert!(text.contains(&expected), "missing {expected:?} in:\n{text}");
    }
    let ready = text
        .lines()
        .find(|l| l.trim_start().starts_with("Ready "))
        .unwrap_or_else(|| panic!("no Ready row in:\n{text}"));
    assert!(ready.contains("False") && ready.contains("revision 2 is not healthy yet"));

    let json: Value = serde_json::from_str(&pallet_ok(&["status", &name, "-o", "json"])).unwrap();
    assert_eq!(json["name"], json!(name));
    assert_eq!(json["status"]["activeRevision"], 2);
    assert_eq!(json["status"]["drift"]["count"], 1);

    let history = pallet_ok(&["history", &name]);
    let rows: Vec<&str> = history.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{history}");
    assert!(
        rows[0].starts_with("* 2") && rows[0].contains("Progressing"),
        "{history}"
    );
    assert!(
        rows[0].contains(&format!("main -> {}", "2".repeat(40))),
        "{history}"
    );
    assert!(
        rows[1].starts_with("  1") && rows[1].contains("Superseded"),
        "{history}"
    );
    assert!(
        rows[1].contains(&format!(
            "https://charts.example demo 0.x -> sha256:{} (version 0.2.0)",
            "c".repeat(64)
        )),
        "{history}"
    );
    let yaml: Value =
        serde_saphyr::from_str(&pallet_ok(&["history", &name, "-o", "yaml"])).unwrap();
    let numbers: Vec<i64> = yaml
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["number"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers, [2, 1]);

    let missing = pallet_err(&["status", "no-such-bd-anywhere"]);
    assert!(
        missing.contains("BundleDeployment no-such-bd-anywhere not found"),
        "{missing}"
    );
    delete_bd(&client, &name).await;
}

#[tokio::test]
async fn rollback_writes_the_request_and_wait_reports_the_handled_status() {
    let client = cluster::client().await;
    let name = support::unique_name("cli-rollback");
    bd_with_history(&client, &name).await;

    let refused = pallet_err(&["rollback", &name, "--to", "7"]);
    assert!(
        refused.contains("has no stored revision 7; stored: 2, 1"),
        "{refused}"
    );
    assert_eq!(
        annotation(&get_bd(&client, &name).await, REQUESTED_ROLLBACK_ANNOTATION),
        None
    );

    let out = pallet_ok(&["rollback", &name, "--to", "1"]);
    let first = annotation(&get_bd(&client, &name).await, REQUESTED_ROLLBACK_ANNOTATION)
        .expect("the request annotation is written");
    let (number, token) = first.split_once('@').unwrap();
    assert_eq!(number, "1");
    assert!(is_rfc3339(token), "{first}");
    assert!(out.contains(&first), "{out}");

    // --wait: returns once the agent (here: the test) has copied the value into the status.
    let child = cli::pallet_cmd(&["rollback", &name, "--to", "1", "--wait", "--timeout", "60"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let second = cluster::poll_until("a second rollback request", Duration::from_secs(30), || {
        let (client, name, first) = (client.clone(), name.clone(), first.clone());
        async move {
            match annotation(&get_bd(&client, &name).await, REQUESTED_ROLLBACK_ANNOTATION) {
                Some(v) if v != first => Ok(v),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    assert!(second.starts_with("1@"), "{second}");
    write_status(
        &client,
        &name,
        json!({"lastHandledRollback": second, "activeRevision": 1,
               "conditions": [condition("Ready", "True", "RolledBack", "rolled back to revision 1")]}),
    )
    .await;
    let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains(
            "handled: active revision 1; Ready=True RolledBack: rolled back to revision 1"
        ),
        "{stdout}"
    );

    // Nobody handles this one: --wait gives up at its deadline and says so.
    let timed_out = pallet_err(&["rollback", &name, "--to", "2", "--wait", "--timeout", "1"]);
    assert!(timed_out.contains("timed out after 1s"), "{timed_out}");
    delete_bd(&client, &name).await;
}

#[tokio::test]
async fn retry_and_reconcile_write_their_requests_and_wait_for_them() {
    let client = cluster::client().await;
    let name = support::unique_name("cli-retry");
    bd_with_history(&client, &name).await;

    for (command, key, field) in [
        ("retry", REQUESTED_RETRY_ANNOTATION, "lastHandledRetry"),
        (
            "reconcile",
            REQUESTED_RECONCILE_ANNOTATION,
            "lastHandledReconcile",
        ),
    ] {
        let before = annotation(&get_bd(&client, &name).await, key);
        let child = cli::pallet_cmd(&[command, &name, "--wait", "--timeout", "60"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let value = cluster::poll_until(
            &format!("the {command} request"),
            Duration::from_secs(30),
            || {
                let (client, name, before) = (client.clone(), name.clone(), before.clone());
                async move {
                    match annotation(&get_bd(&client, &name).await, key) {
                        Some(v) if Some(&v) != before.as_ref() => Ok(v),
                        other => Err(format!("{other:?}")),
                    }
                }
            },
        )
        .await;
        assert!(is_rfc3339(&value), "{command}: {value}");
        write_status(
            &client,
            &name,
            json!({field: value, "conditions": [condition("Ready", "True", "Installed", &format!("{command} done"))]}),
        )
        .await;
        let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{command}: {stdout}");
        assert!(
            stdout.contains(&format!("requested {command} of {name}")),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!(
                "handled: active revision 2; Ready=True Installed: {command} done"
            )),
            "{stdout}"
        );
    }
    delete_bd(&client, &name).await;
}

#[tokio::test]
async fn pause_and_resume_set_the_spec_and_the_reason() {
    let client = cluster::client().await;
    let name = support::unique_name("cli-pause");
    bd_with_history(&client, &name).await;

    pallet_ok(&["pause", &name, "--reason", "hotfix INC-42"]);
    let bd = get_bd(&client, &name).await;
    assert!(bd.spec.paused);
    assert_eq!(
        annotation(&bd, pallet::reconcile::PAUSED_REASON_ANNOTATION).as_deref(),
        Some("hotfix INC-42")
    );
    assert!(pallet_ok(&["status", &name]).contains("Paused:                true (hotfix INC-42)"));

    assert_eq!(
        pallet_ok(&["resume", &name]).trim(),
        format!("resumed {name}")
    );
    let bd = get_bd(&client, &name).await;
    assert!(!bd.spec.paused);
    assert_eq!(
        annotation(&bd, pallet::reconcile::PAUSED_REASON_ANNOTATION),
        None
    );
    delete_bd(&client, &name).await;
}

fn config_map_yaml(name: &str, value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n---\n")
}

#[tokio::test]
async fn resume_dry_run_lists_what_resuming_would_revert_and_changes_nothing() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let name = support::unique_name("cli-resume");
    let repo = fx.git_repo(&name);
    let bundle = format!(
        "{}{}{}",
        config_map_yaml("same", "1"),
        config_map_yaml("edited", "1"),
        config_map_yaml("deleted", "1")
    );
    repo.commit_files(
        "main",
        &[("manifests/cms.yaml", bundle.as_bytes())],
        "bundle",
    );
    let namespaces = create_namespace(&client, &name).await;
    // The objects as the agent left them before the pause, then one edited by hand and one deleted.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    for (cm, value) in [("same", "1"), ("edited", "hand-edited")] {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": cm, "labels": {"pallet.dev/bundle-deployment": name}},
            "data": {"value": value}});
        cms.patch(
            cm,
            &PatchParams::apply("pallet").force(),
            &Patch::Apply(&body),
        )
        .await
        .unwrap();
    }
    create_bd(
        &client,
        &name,
        json!({"format": "plain", "installNamespace": name, "paused": true,
               "sources": [{"kind": "git", "git": {"repository": repo.url(fx.git_plain()), "ref": {"branch": "main"}}}]}),
        json!({}),
    )
    .await;
    let cache = tempfile::tempdir().unwrap();
    let out = pallet_ok(&[
        "resume",
        &name,
        "--dry-run",
        "--allow-loopback-egress",
        "--cache-dir",
        cache.path().to_str().unwrap(),
    ]);
    assert!(
        out.contains(&format!("resuming {name} would revert 2 object(s):")),
        "{out}"
    );
    assert!(
        out.contains(&format!("ConfigMap {name}/edited: .data.value")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "ConfigMap {name}/deleted: missing, would be created"
        )),
        "{out}"
    );
    assert!(!out.contains("/same"), "{out}");

    let json: Value = serde_json::from_str(&pallet_ok(&[
        "resume",
        &name,
        "--dry-run",
        "-o",
        "json",
        "--allow-loopback-egress",
        "--cache-dir",
        cache.path().to_str().unwrap(),
    ]))
    .unwrap();
    assert_eq!(json["wouldRevert"].as_array().unwrap().len(), 2);

    // Nothing changed: still paused, the edit still there, the deleted object still gone.
    assert!(get_bd(&client, &name).await.spec.paused);
    let edited = cms.get("edited").await.unwrap();
    assert_eq!(edited.data.unwrap()["value"], "hand-edited");
    assert!(cms.get_opt("deleted").await.unwrap().is_none());

    delete_bd(&client, &name).await;
    let _ = namespaces.delete(&name, &DeleteParams::default()).await;
}

/// After a rollback the agent stays on the revision it rolled back to, whatever the sources
/// render: resume --dry-run compares the cluster with that revision's snapshot, not with a
/// render of the sources (which would list the failed upgrade's changes as reverts).
#[tokio::test]
async fn resume_dry_run_after_a_rollback_compares_with_the_revision_rolled_back_to() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let name = support::unique_name("cli-resume-rb");
    let repo = fx.git_repo(&name);
    // What the sources render now: the failed upgrade's content.
    repo.commit_files(
        "main",
        &[(
            "manifests/cms.yaml",
            config_map_yaml("app", "2-broken").as_bytes(),
        )],
        "upgrade",
    );
    let namespaces = create_namespace(&client, &name).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    // Revision 1 as the rollback left it.
    let live = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "app", "namespace": name, "labels": {"pallet.dev/bundle-deployment": name}},
        "data": {"value": "1"}});
    cms.patch(
        "app",
        &PatchParams::apply("pallet").force(),
        &Patch::Apply(&live),
    )
    .await
    .unwrap();
    let stored = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "app", "namespace": name}, "data": {"value": "1"}});
    pallet::revision::RevisionStore::new(client.clone(), name.clone())
        .save(&pallet::revision::RevisionRecord {
            bundle_deployment: name.clone(),
            number: 1,
            generation: 1,
            digest: "sha256:0000000000000000000000000000000000000000000000000000000000000001"
                .into(),
            sources: Vec::new(),
            objects: vec![stored],
            processors: Vec::new(),
        })
        .await
        .unwrap();
    create_bd(
        &client,
        &name,
        json!({"format": "plain", "installNamespace": name, "paused": true,
               "sources": [{"kind": "git", "git": {"repository": repo.url(fx.git_plain()), "ref": {"branch": "main"}}}]}),
        json!({}),
    )
    .await;
    write_status(
        &client,
        &name,
        json!({"observedGeneration": 1, "activeRevision": 1, "lastHealthyRevision": 1,
               "conditions": [condition("RolledBack", "True", "RolledBack", "revision 2 failed; rolled back to revision 1")]}),
    )
    .await;
    let cache = tempfile::tempdir().unwrap();
    let out = pallet_ok(&[
        "resume",
        &name,
        "--dry-run",
        "--agent-namespace",
        &name,
        "--allow-loopback-egress",
        "--cache-dir",
        cache.path().to_str().unwrap(),
    ]);
    assert!(out.contains("compared with revision 1"), "{out}");
    // The sources render `2-broken`; resuming keeps revision 1, which the cluster holds.
    assert!(
        out.contains(&format!("resuming {name} would revert nothing")),
        "{out}"
    );
    // A hotfix during the pause is what resuming reverts.
    let hotfix = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "app", "namespace": name}, "data": {"value": "hotfix"}});
    cms.patch(
        "app",
        &PatchParams::apply("kubectl-edit").force(),
        &Patch::Apply(&hotfix),
    )
    .await
    .unwrap();
    let json: Value = serde_json::from_str(&pallet_ok(&[
        "resume",
        &name,
        "--dry-run",
        "-o",
        "json",
        "--namespace",
        &name,
    ]))
    .unwrap();
    let reverts = json["wouldRevert"].as_array().unwrap();
    assert_eq!(reverts.len(), 1, "{json}");
    assert_eq!(reverts[0]["fields"], json!([".data.value"]), "{json}");
    // A dry run writes nothing.
    assert_eq!(
        cms.get("app").await.unwrap().data.unwrap()["value"],
        "hotfix"
    );

    delete_bd(&client, &name).await;
    let _ = namespaces.delete(&name, &DeleteParams::default()).await;
}

/// Creates namespace `name` for a test; the Api to delete it afterwards.
async fn create_namespace(client: &Client, name: &str) -> Api<Namespace> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await
        .unwrap();
    namespaces
}

#[tokio::test]
async fn trace_names_the_bundle_deployment_revision_and_sources() {
    let client = cluster::client().await;
    let name = support::unique_name("cli-trace");
    bd_with_history(&client, &name).await;
    let namespaces = create_namespace(&client, &name).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    for (cm, labelled) in [("written", true), ("foreign", false)] {
        let mut body = json!({"metadata": {"name": cm}, "data": {"k": "v"}});
        if labelled {
            body["metadata"]["labels"] = json!({"pallet.dev/bundle-deployment": name});
            body["metadata"]["annotations"] = json!({"pallet.dev/revision": "1"});
        }
        cms.create(
            &PostParams::default(),
            &serde_json::from_value(body).unwrap(),
        )
        .await
        .unwrap();
    }

    let out = pallet_ok(&["trace", "configmap/written", "-n", &name]);
    for expected in [
        format!("Object:           ConfigMap {name}/written"),
        format!("BundleDeployment: {name}"),
        "Revision:         1\n".to_string(),
        "Phase:            Superseded".to_string(),
        format!("Content digest:   sha256:{}", "a".repeat(64)),
        format!("git main -> {}", "1".repeat(40)),
        format!(
            "helmRepository https://charts.example demo 0.x -> sha256:{} (version 0.2.0)",
            "c".repeat(64)
        ),
    ] {
        assert!(out.contains(&expected), "missing {expected:?} in:\n{out}");
    }
    let json: Value = serde_json::from_str(&pallet_ok(&[
        "trace",
        "ConfigMaps/written",
        "-n",
        &name,
        "-o",
        "json",
    ]))
    .unwrap();
    assert_eq!(json["revision"], 1);
    assert_eq!(json["activeRevision"], 2);
    assert_eq!(
        json["revisionStatus"]["sources"][0]["resolved"],
        json!("1".repeat(40))
    );

    let foreign = pallet_err(&["trace", "cm/foreign", "-n", &name]);
    assert!(
        foreign.contains("the cluster serves no kind \"cm\""),
        "{foreign}"
    );
    let foreign = pallet_err(&["trace", "configmap/foreign", "-n", &name]);
    assert!(
        foreign.contains("carries no pallet.dev/bundle-deployment label"),
        "{foreign}"
    );
    delete_bd(&client, &name).await;
    let _ = namespaces.delete(&name, &DeleteParams::default()).await;
}

#[tokio::test]
async fn trace_falls_back_to_the_revision_store() {
    let client = cluster::client().await;
    let name = support::unique_name("cli-trace-store");
    bd_with_history(&client, &name).await;
    // Revision 7 is no longer in the status list, but its snapshot is in the store.
    let namespaces = create_namespace(&client, &name).await;
    let store = pallet::revision::RevisionStore::new(client.clone(), name.clone());
    store
        .save(&pallet::revision::RevisionRecord {
            bundle_deployment: name.clone(),
            number: 7,
            generation: 5,
            digest: format!("sha256:{}", "7".repeat(64)),
            sources: vec![pallet::api::ResolvedSource {
                kind: pallet::api::SourceKind::Git,
                reference: "v7".into(),
                resolved: "f".repeat(40),
                version: None,
                verified: None,
            }],
            objects: vec![
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "old"}}),
            ],
            processors: vec![],
        })
        .await
        .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &name)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "old",
                "labels": {"pallet.dev/bundle-deployment": name},
                "annotations": {"pallet.dev/revision": "7"}}}))
            .unwrap(),
        )
        .await
        .unwrap();

    let out = pallet_ok(&[
        "trace",
        "configmap/old",
        "-n",
        &name,
        "--agent-namespace",
        &name,
    ]);
    for expected in [
        "Revision:         7\n".to_string(),
        "(not in status.revisions; from the revision store)".to_string(),
        format!("Content digest:   sha256:{}", "7".repeat(64)),
        "Generation:       5".to_string(),
        format!("git v7 -> {}", "f".repeat(40)),
    ] {
        assert!(out.contains(&expected), "missing {expected:?} in:\n{out}");
    }
    // Without the snapshot (another store namespace), trace says the revision is gone.
    let out = pallet_ok(&["trace", "configmap/old", "-n", &name]);
    assert!(
        out.contains("revision 7 is neither in status.revisions nor in the revision store (namespace pallet-system)"),
        "{out}"
    );
    delete_bd(&client, &name).await;
    let _ = namespaces.delete(&name, &DeleteParams::default()).await;
}
