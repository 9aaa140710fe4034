//! End-to-end: the `pallet agent` binary against the local control plane and the git fixture,
//! driven only through the Kubernetes API, as a user would.
//!
//! Each test runs its own agent confined (by `--selector`) to the BundleDeployments it labels,
//! so tests run in parallel without agents fighting over each other's objects.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::time::Duration;

use agent::{wait_condition, wait_value, Agent};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use pallet::api::conditions::find;
use pallet::api::BundleDeployment;
use serde_json::json;

/// Creates a BundleDeployment of a plain bundle from `git_url` (branch main) for the agent of test `name`.
async fn create_bd(client: &Client, name: &str, namespace: &str, git_url: &str) {
    let spec = json!({
        "installNamespace": namespace,
        "sources": [{"kind": "git", "git": {"repository": git_url, "ref": {"branch": "main"}}}],
        "format": "plain",
    });
    agent::apply_bd(client, name, spec).await;
}

fn config_map(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
    )
}

#[tokio::test]
async fn plain_bundle_from_git_installs_upgrades_and_survives_bad_content() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("e2e");
    let namespace = test.clone();
    let repo = fixtures.git_repo(&test);
    let v1 = [
        config_map("keep", "1"),
        config_map("change", "1"),
        config_map("drop", "1"),
    ]
    .join("---\n");
    repo.commit_files("main", &[("manifests/app.yaml", v1.as_bytes())], "v1");

    let agent = Agent::start(&test);
    create_bd(&client, &test, &namespace, &repo.url(fixtures.git_plain())).await;

    // Install: Ready, every object labelled with its owner.
    let bd = wait_condition(&client, &agent, &test, "Ready", "True", "3 objects").await;
    assert_eq!(
        bd.status
            .as_ref()
            .unwrap()
            .inventory
            .as_ref()
            .unwrap()
            .count,
        3
    );
    // The agent's finalizer and status writes are its own in managedFields (named through its
    // User-Agent), not `unknown`.
    let managers: Vec<(String, Option<String>)> = bd
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.operation.as_deref() == Some("Update"))
        .map(|m| (m.manager.clone().unwrap_or_default(), m.subresource.clone()))
        .collect();
    assert_eq!(
        managers,
        [
            ("pallet".to_string(), None),
            ("pallet".to_string(), Some("status".to_string()))
        ],
        "managers of the agent's writes to the BundleDeployment"
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let keep_v1 = cms.get("keep").await.unwrap();
    assert_eq!(
        keep_v1.metadata.labels.as_ref().unwrap()["pallet.dev/bundle-deployment"],
        test
    );
    assert_eq!(
        find(&bd.status.as_ref().unwrap().conditions, "Unpacked")
            .unwrap()
            .status,
        "True"
    );
    // A summary Event is recorded on the BundleDeployment (cluster-scoped: in "default").
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let selector = format!("involvedObject.name={test}");
    cluster::poll_until(
        "an Applied event on the BundleDeployment",
        Duration::from_secs(30),
        || {
            let (events, selector) = (events.clone(), selector.clone());
            async move {
                let list = events
                    .list(&kube::api::ListParams::default().fields(&selector))
                    .await
                    .map_err(|e| e.to_string())?;
                let reasons: Vec<String> =
                    list.items.iter().filter_map(|e| e.reason.clone()).collect();
                let applied = list
                    .items
                    .iter()
                    .find(|e| e.reason.as_deref() == Some("Applied"));
                match applied.and_then(|e| e.message.clone()) {
                    Some(note) if note.contains("3 created") => Ok(()),
                    _ => Err(format!("events: {reasons:?}")),
                }
            }
        },
    )
    .await;
    let mut installed: Vec<_> = agent
        .changes()
        .into_iter()
        .map(|(op, reason, name, _)| (op, reason, name))
        .collect();
    installed.sort();
    assert_eq!(
        installed,
        ["change", "drop", "keep"].map(|n| (
            "create".to_string(),
            "new-revision".to_string(),
            n.to_string()
        ))
    );

    // Upgrade: one object unchanged, one changed, one dropped, one added.
    let v2 = [
        config_map("keep", "1"),
        config_map("change", "2"),
        config_map("add", "1"),
    ]
    .join("---\n");
    repo.commit_files("main", &[("manifests/app.yaml", v2.as_bytes())], "v2");
    cluster::poll_until(
        "the upgrade to be applied and pruned",
        Duration::from_secs(60),
        || {
            let cms = cms.clone();
            async move {
                let change = cms.get("change").await.map_err(|e| e.to_string())?;
                let dropped = cms.get_opt("drop").await.map_err(|e| e.to_string())?;
                let added = cms.get_opt("add").await.map_err(|e| e.to_string())?;
                let value = change
                    .data
                    .unwrap_or_default()
                    .get("value")
                    .cloned()
                    .unwrap_or_default();
                if value == "2" && dropped.is_none() && added.is_some() {
                    Ok(())
                } else {
                    Err(format!(
                        "change={value} drop present={} add present={}",
                        dropped.is_some(),
                        added.is_some()
                    ))
                }
            }
        },
    )
    .await;
    let keep_v2 = cms.get("keep").await.unwrap();
    assert_eq!(
        keep_v1.metadata.resource_version, keep_v2.metadata.resource_version,
        "an unchanged object is not written"
    );
    wait_condition(&client, &agent, &test, "Ready", "True", "3 objects").await;
    let upgrade: Vec<_> = agent.changes().into_iter().skip(3).collect();
    assert!(
        upgrade.contains(&(
            "update".into(),
            "new-revision".into(),
            "change".into(),
            vec![".data.value".into()]
        )),
        "{upgrade:?}"
    );
    assert!(
        upgrade.contains(&("create".into(), "new-revision".into(), "add".into(), vec![])),
        "{upgrade:?}"
    );
    assert!(
        upgrade.contains(&("delete".into(), "prune".into(), "drop".into(), vec![])),
        "{upgrade:?}"
    );
    assert!(
        !upgrade.iter().any(|(_, _, name, _)| name == "keep"),
        "unchanged objects are not written: {upgrade:?}"
    );

    // Bad content: Ready=False naming the file and line; nothing applied before is touched.
    let before: Vec<Option<String>> = futures_rvs(&cms, &["keep", "change", "add"]).await;
    let broken = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n";
    repo.commit_files(
        "main",
        &[
            ("manifests/app.yaml", v2.as_bytes()),
            ("manifests/broken.yaml", broken.as_bytes()),
        ],
        "broken",
    );
    let bd = wait_condition(
        &client,
        &agent,
        &test,
        "Ready",
        "False",
        "manifests/broken.yaml",
    )
    .await;
    let stalled = find(&bd.status.as_ref().unwrap().conditions, "Stalled").unwrap();
    assert_eq!(
        stalled.status, "True",
        "bad content waits for a change: {stalled:?}"
    );
    assert_eq!(
        futures_rvs(&cms, &["keep", "change", "add"]).await,
        before,
        "nothing was changed"
    );

    // An object the API server refuses: Ready=False naming the object; the rest untouched.
    let invalid =
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: no-selector\nspec: {}\n";
    repo.commit_files(
        "main",
        &[
            ("manifests/app.yaml", v2.as_bytes()),
            ("manifests/deploy.yaml", invalid.as_bytes()),
        ],
        "refused",
    );
    wait_condition(&client, &agent, &test, "Ready", "False", "no-selector").await;
    assert_eq!(
        futures_rvs(&cms, &["keep", "change", "add"]).await,
        before,
        "nothing was changed"
    );

    // Deleting the BundleDeployment deletes its objects (deletionPolicy Delete, the default).
    Api::<BundleDeployment>::all(client.clone())
        .delete(&test, &Default::default())
        .await
        .unwrap();
    cluster::poll_until(
        "the bundle's objects to be deleted",
        Duration::from_secs(60),
        || {
            let cms = cms.clone();
            async move {
                let left = futures_rvs(&cms, &["keep", "change", "add"]).await;
                if left.iter().all(Option::is_none) {
                    Ok(())
                } else {
                    Err(format!("still there: {left:?}"))
                }
            }
        },
    )
    .await;
    // The change log is written before the finalizer goes: once the BundleDeployment is gone,
    // every deletion is in it.
    agent::wait_bd_gone(&client, &test).await;
    let deletions: Vec<_> = agent
        .changes()
        .into_iter()
        .filter(|(_, reason, _, _)| reason == "deletion")
        .collect();
    assert_eq!(deletions.len(), 3, "{deletions:?}");
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&namespace, &Default::default())
        .await;
    drop(agent);
}

#[tokio::test]
async fn drift_is_corrected_and_logged() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("drift");
    let repo = fixtures.git_repo(&test);
    repo.commit_files(
        "main",
        &[("app.yaml", config_map("app", "1").as_bytes())],
        "v1",
    );
    // An hour between requeues: a correction within the test's wait can only come from the
    // watch on owned objects.
    let agent = Agent::start_with(&test, &["--requeue-seconds", "3600"]);
    create_bd(&client, &test, &test, &repo.url(fixtures.git_plain())).await;
    wait_condition(&client, &agent, &test, "Ready", "True", "1 objects").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);

    // Changed out of band: restored, and the correction is logged as drift with the field.
    cms.patch(
        "app",
        &PatchParams::default(),
        &Patch::Merge(&json!({"data": {"value": "edited"}})),
    )
    .await
    .unwrap();
    wait_value(&cms, "app", "1").await;
    agent
        .wait_change(("update", "drift", "app", &[".data.value"]))
        .await;
    // Deleted out of band: re-created, logged as drift.
    cms.delete("app", &Default::default()).await.unwrap();
    wait_value(&cms, "app", "1").await;
    agent.wait_change(("create", "drift", "app", &[])).await;

    // deletionPolicy Orphan: deleting the BundleDeployment leaves the object, without pallet's label.
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let orphan = json!({"spec": {"deletionPolicy": "Orphan"}});
    bds.patch(&test, &PatchParams::default(), &Patch::Merge(&orphan))
        .await
        .unwrap();
    cluster::poll_until(
        "the Orphan policy to be observed",
        Duration::from_secs(60),
        || {
            let (bds, name) = (bds.clone(), test.clone());
            async move {
                let bd = bds.get(&name).await.map_err(|e| e.to_string())?;
                let observed = bd.status.and_then(|s| s.observed_generation);
                if observed == bd.metadata.generation {
                    Ok(())
                } else {
                    Err(format!("observed {observed:?}"))
                }
            }
        },
    )
    .await;
    bds.delete(&test, &Default::default()).await.unwrap();
    agent::wait_bd_gone(&client, &test).await;
    let left = cms.get("app").await.expect("an orphaned object stays");
    assert!(!left
        .metadata
        .labels
        .unwrap_or_default()
        .contains_key("pallet.dev/bundle-deployment"));
    let orphaned = (
        "update".to_string(),
        "deletion".to_string(),
        "app".to_string(),
        vec![".metadata.labels.pallet.dev/bundle-deployment".to_string()],
    );
    assert!(agent.changes().contains(&orphaned), "{:?}", agent.changes());
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&test, &Default::default())
        .await;
}

#[tokio::test]
async fn pause_keeps_hands_off_a_hotfix_and_resume_reverts_it() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("pause");
    let repo = fixtures.git_repo(&test);
    repo.commit_files(
        "main",
        &[("app.yaml", config_map("app", "1").as_bytes())],
        "v1",
    );
    let agent = Agent::start(&test);
    create_bd(&client, &test, &test, &repo.url(fixtures.git_plain())).await;
    wait_condition(&client, &agent, &test, "Ready", "True", "1 objects").await;

    // The on-call engineer pauses with a reason, then hotfixes the object by hand.
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let pause = json!({"metadata": {"annotations": {"pallet.dev/paused-reason": "hotfix INC-1"}}, "spec": {"paused": true}});
    bds.patch(&test, &PatchParams::default(), &Patch::Merge(&pause))
        .await
        .unwrap();
    wait_condition(&client, &agent, &test, "Paused", "True", "hotfix INC-1").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);
    let hotfix = json!({"data": {"value": "hotfix"}});
    cms.patch("app", &PatchParams::default(), &Patch::Merge(&hotfix))
        .await
        .unwrap();

    // A new version is pushed meanwhile: the paused agent fetches it (the drift list names the
    // object it would add) but writes nothing.
    let v2 = [config_map("app", "2"), config_map("added", "1")].join("---\n");
    repo.commit_files("main", &[("app.yaml", v2.as_bytes())], "v2");
    let bd = cluster::poll_until(
        "drift to list the hotfix and the unapplied addition",
        Duration::from_secs(60),
        || {
            let (bds, name) = (bds.clone(), test.clone());
            async move {
                let bd = bds.get(&name).await.map_err(|e| e.to_string())?;
                let drift = bd
                    .status
                    .as_ref()
                    .and_then(|s| s.drift.clone())
                    .unwrap_or_default();
                let messages: Vec<String> = drift
                    .objects
                    .iter()
                    .map(|o| format!("{} {}", o.name, o.message.clone().unwrap_or_default()))
                    .collect();
                let hotfix_seen = messages
                    .iter()
                    .any(|m| m == "app differs from the bundle at .data.value");
                let addition_seen = messages
                    .iter()
                    .any(|m| m == "added missing from the cluster");
                if hotfix_seen && addition_seen {
                    Ok(bd)
                } else {
                    Err(format!("drift: {messages:?}"))
                }
            }
        },
    )
    .await;
    assert_eq!(bd.status.unwrap().drift.unwrap().count, 2);
    assert_eq!(
        cms.get("app").await.unwrap().data.unwrap()["value"],
        "hotfix",
        "the hotfix is untouched"
    );
    assert!(
        cms.get_opt("added").await.unwrap().is_none(),
        "nothing is applied while paused"
    );

    // Resume: the bundle's state wins again and the drift list empties.
    bds.patch(
        &test,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"paused": false}})),
    )
    .await
    .unwrap();
    let bd = wait_condition(&client, &agent, &test, "Ready", "True", "2 objects").await;
    assert!(bd.status.unwrap().drift.is_none());
    assert_eq!(cms.get("app").await.unwrap().data.unwrap()["value"], "2");
    assert!(cms.get_opt("added").await.unwrap().is_some());
    bds.delete(&test, &Default::default()).await.unwrap();
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&test, &Default::default())
        .await;
}

async fn futures_rvs(cms: &Api<ConfigMap>, names: &[&str]) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for name in names {
        out.push(
            cms.get_opt(name)
                .await
                .unwrap()
                .and_then(|c| c.metadata.resource_version),
        );
    }
    out
}

/// Admin helpers for RBAC scenarios.
mod rbac {
    use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    use kube::api::{Api, PostParams};
    use kube::Client;
    use serde_json::json;

    pub async fn namespace(client: &Client, name: &str) {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }

    pub async fn service_account(client: &Client, namespace: &str, name: &str) {
        let sa: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<ServiceAccount>::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &sa)
            .await
            .unwrap();
    }

    /// Lets `sa` (namespace/name) do `verbs` on `resources` (optionally only `names`) in `namespace`.
    pub async fn grant(
        client: &Client,
        namespace: &str,
        sa: (&str, &str),
        resources: &[&str],
        names: &[&str],
        verbs: &[&str],
    ) {
        let name = format!("grant-{}-{}-{}", sa.1, resources.join("-"), verbs.join("-"));
        let mut rule = json!({"apiGroups": [""], "resources": resources, "verbs": verbs});
        if !names.is_empty() {
            rule["resourceNames"] = json!(names);
        }
        let role: Role =
            serde_json::from_value(json!({"metadata": {"name": name}, "rules": [rule]})).unwrap();
        Api::<Role>::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &role)
            .await
            .unwrap();
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "namespace": sa.0, "name": sa.1}],
        }))
        .unwrap();
        Api::<RoleBinding>::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
    }

    pub async fn basic_auth_secret(
        client: &Client,
        namespace: &str,
        name: &str,
        username: &str,
        password: &str,
    ) {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name},
            "type": "kubernetes.io/basic-auth",
            "stringData": {"username": username, "password": password},
        }))
        .unwrap();
        Api::<Secret>::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
}

const APPLY_VERBS: &[&str] = &[
    "get", "list", "watch", "create", "update", "patch", "delete",
];

#[tokio::test]
async fn writes_impersonate_the_service_account_and_rbac_decides() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("imp");
    rbac::namespace(&client, &test).await;
    rbac::service_account(&client, &test, "installer").await;
    let repo = fixtures.git_repo(&test);
    repo.commit_files(
        "main",
        &[("app.yaml", config_map("app", "1").as_bytes())],
        "v1",
    );
    let agent = Agent::start(&test);
    let spec = json!({
        "installNamespace": test,
        "serviceAccount": {"namespace": test, "name": "installer"},
        "sources": [{"kind": "git", "git": {"repository": repo.url(fixtures.git_plain()), "ref": {"branch": "main"}}}],
        "format": "plain",
    });
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    agent::apply_bd(&client, &test, spec.clone()).await;

    // The ServiceAccount may not touch ConfigMaps: refused, naming the object and the identity.
    let denied = wait_condition(
        &client,
        &agent,
        &test,
        "Ready",
        "False",
        &format!("system:serviceaccount:{test}:installer"),
    )
    .await;
    let ready = find(&denied.status.unwrap().conditions, "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready.reason, "Forbidden");
    assert!(
        ready.message.contains(&format!("ConfigMap {test}/app")),
        "{}",
        ready.message
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);
    assert!(cms.get_opt("app").await.unwrap().is_none());

    // Granted: installed.
    rbac::grant(
        &client,
        &test,
        (&test, "installer"),
        &["configmaps"],
        &[],
        APPLY_VERBS,
    )
    .await;
    wait_condition(&client, &agent, &test, "Ready", "True", "1 objects").await;
    assert!(cms.get_opt("app").await.unwrap().is_some());
    bds.delete(&test, &Default::default()).await.unwrap();
}

/// Deleting a BundleDeployment whose ServiceAccount was never allowed to create its
/// objects finishes (they need no deletion), and one whose ServiceAccount may not delete what
/// it created says so in a condition until it may.
#[tokio::test]
async fn deletion_finishes_for_objects_never_created_and_names_what_may_not_be_deleted() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("del-rbac");
    rbac::namespace(&client, &test).await;
    rbac::service_account(&client, &test, "installer").await;
    let repo = fixtures.git_repo(&test);
    repo.commit_files(
        "main",
        &[("app.yaml", config_map("app", "1").as_bytes())],
        "v1",
    );
    let agent = Agent::start(&test);
    let spec = || {
        json!({
            "installNamespace": test,
            "serviceAccount": {"namespace": test, "name": "installer"},
            "sources": [{"kind": "git", "git": {"repository": repo.url(fixtures.git_plain()), "ref": {"branch": "main"}}}],
            "format": "plain",
            "deletionPolicy": "Delete",
        })
    };
    let bds: Api<BundleDeployment> = Api::all(client.clone());

    // Never allowed to create anything: refused, then deleted without waiting for ever.
    agent::apply_bd(&client, &test, spec()).await;
    wait_condition(&client, &agent, &test, "Ready", "False", "installer").await;
    bds.delete(&test, &Default::default()).await.unwrap();
    agent::wait_bd_gone(&client, &test).await;

    // Allowed to create but not to delete: the deletion waits, and says why on the object.
    rbac::grant(
        &client,
        &test,
        (&test, "installer"),
        &["configmaps"],
        &[],
        &["get", "list", "watch", "create", "update", "patch"],
    )
    .await;
    let second = format!("{test}-2");
    agent::apply_bd_labelled(&client, &second, &test, spec()).await;
    wait_condition(&client, &agent, &second, "Ready", "True", "1 objects").await;
    bds.delete(&second, &Default::default()).await.unwrap();
    let blocked = wait_condition(
        &client,
        &agent,
        &second,
        "Ready",
        "False",
        "may not be deleted",
    )
    .await;
    let ready = find(&blocked.status.unwrap().conditions, "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready.reason, "DeletionForbidden", "{}", ready.message);
    assert!(
        ready.message.contains(&format!("ConfigMap {test}/app")),
        "{}",
        ready.message
    );
    rbac::grant(
        &client,
        &test,
        (&test, "installer"),
        &["configmaps"],
        &[],
        &["delete"],
    )
    .await;
    agent::wait_bd_gone(&client, &second).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);
    assert!(cms.get_opt("app").await.unwrap().is_none());
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&test, &Default::default())
        .await;
}

#[tokio::test]
async fn a_secret_in_another_namespace_needs_a_service_account_allowed_to_read_it() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("sec");
    let creds_ns = format!("{test}-creds");
    rbac::namespace(&client, &test).await;
    rbac::namespace(&client, &creds_ns).await;
    let git = fixtures.git_auth();
    rbac::basic_auth_secret(
        &client,
        &creds_ns,
        "git-creds",
        git.username.as_deref().unwrap(),
        git.password.as_deref().unwrap(),
    )
    .await;
    let repo = fixtures.git_repo(&test);
    repo.commit_files(
        "main",
        &[("app.yaml", config_map("app", "1").as_bytes())],
        "v1",
    );
    let agent = Agent::start(&test);
    let source = json!({"kind": "git", "git": {
        "repository": repo.url(git), "ref": {"branch": "main"},
        "auth": {"secret": {"name": "git-creds", "namespace": creds_ns}}}});
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let mut spec = json!({"installNamespace": test, "sources": [source], "format": "plain"});
    agent::apply_bd(&client, &test, spec.clone()).await;

    // No ServiceAccount: the agent refuses to read a Secret outside its namespace.
    let refused = wait_condition(
        &client,
        &agent,
        &test,
        "Ready",
        "False",
        &format!("secret {creds_ns}/git-creds"),
    )
    .await;
    let ready = find(&refused.status.unwrap().conditions, "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready.reason, "SecretNotAllowed");
    assert!(ready.message.contains("allow-list"), "{}", ready.message);

    // A ServiceAccount that may not get it: refused after a SubjectAccessReview.
    rbac::service_account(&client, &test, "installer").await;
    rbac::grant(
        &client,
        &test,
        (&test, "installer"),
        &["configmaps"],
        &[],
        APPLY_VERBS,
    )
    .await;
    spec["serviceAccount"] = json!({"namespace": test, "name": "installer"});
    agent::apply_bd(&client, &test, spec.clone()).await;
    let refused = wait_condition(
        &client,
        &agent,
        &test,
        "Ready",
        "False",
        "SubjectAccessReview",
    )
    .await;
    assert_eq!(
        find(&refused.status.unwrap().conditions, "Ready")
            .unwrap()
            .reason,
        "SecretNotAllowed"
    );

    // Allowed to get exactly that Secret: fetched with its credentials and installed.
    rbac::grant(
        &client,
        &creds_ns,
        (&test, "installer"),
        &["secrets"],
        &["git-creds"],
        &["get"],
    )
    .await;
    wait_condition(&client, &agent, &test, "Ready", "True", "1 objects").await;
    let log = std::fs::read_to_string(&agent.log).unwrap();
    assert!(
        !log.contains(git.password.as_deref().unwrap()),
        "the secret's value never reaches the logs"
    );
    bds.delete(&test, &Default::default()).await.unwrap();
}

#[tokio::test]
async fn ownership_conflict_names_the_object_and_its_owner() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("own");
    rbac::namespace(&client, &test).await;
    // Someone else's ConfigMap, created outside pallet but labelled as another bundle's.
    let theirs: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "shared", "labels": {"pallet.dev/bundle-deployment": "someone-else"}},
        "data": {"value": "theirs"},
    }))
    .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);
    cms.create(&Default::default(), &theirs).await.unwrap();
    let repo = fixtures.git_repo(&test);
    let both = [config_map("mine", "1"), config_map("shared", "mine")].join("---\n");
    repo.commit_files("main", &[("app.yaml", both.as_bytes())], "v1");
    let agent = Agent::start(&test);
    create_bd(&client, &test, &test, &repo.url(fixtures.git_plain())).await;

    let bd = wait_condition(
        &client,
        &agent,
        &test,
        "Installed",
        "False",
        "owned by BundleDeployment someone-else",
    )
    .await;
    let installed = find(&bd.status.unwrap().conditions, "Installed")
        .unwrap()
        .clone();
    assert_eq!(installed.reason, "OwnershipConflict");
    assert!(
        installed
            .message
            .contains(&format!("ConfigMap {test}/shared")),
        "{}",
        installed.message
    );
    assert_eq!(
        cms.get("shared").await.unwrap().data.unwrap()["value"],
        "theirs",
        "not taken over"
    );
    Api::<BundleDeployment>::all(client.clone())
        .delete(&test, &Default::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn optional_objects_wait_for_their_kind() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("opt");
    let group = format!("{test}.example.com");
    let repo = fixtures.git_repo(&test);
    let optional = format!(
        "apiVersion: {group}/v1\nkind: Monitor\nmetadata:\n  name: m1\n  annotations: {{pallet.dev/optional: \"true\"}}\nspec: {{}}\n"
    );
    repo.commit_files(
        "main",
        &[
            ("app.yaml", config_map("app", "1").as_bytes()),
            ("monitor.yaml", optional.as_bytes()),
        ],
        "v1",
    );
    let agent = Agent::start(&test);
    create_bd(&client, &test, &test, &repo.url(fixtures.git_plain())).await;

    // The cluster does not serve Monitor: the rest installs, the Monitor is listed as skipped.
    let bd = wait_condition(&client, &agent, &test, "Ready", "True", "1 objects").await;
    let skipped = bd.status.unwrap().skipped;
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(
        (skipped[0].kind.as_str(), skipped[0].name.as_str()),
        ("Monitor", "m1")
    );

    // Someone installs the CRD: the next reconcile applies the Monitor.
    let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_json::from_value(json!({
            "metadata": {"name": format!("monitors.{group}")},
            "spec": {"group": group, "scope": "Namespaced",
                "names": {"plural": "monitors", "singular": "monitor", "kind": "Monitor"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
        }))
        .unwrap();
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    crds.create(&Default::default(), &crd).await.unwrap();
    let bd = wait_condition(&client, &agent, &test, "Ready", "True", "2 objects").await;
    assert!(bd.status.unwrap().skipped.is_empty());
    Api::<BundleDeployment>::all(client.clone())
        .delete(&test, &Default::default())
        .await
        .unwrap();
    agent::wait_bd_gone(&client, &test).await;
    let _ = crds
        .delete(&format!("monitors.{group}"), &Default::default())
        .await;
}

#[tokio::test]
async fn deletion_waits_until_the_bundle_objects_are_gone() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("del");
    let bundle_ns = format!("{test}-own");
    let repo = fixtures.git_repo(&test);
    let manifests = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {bundle_ns}}}\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: inside, namespace: {bundle_ns}}}\n"
    );
    repo.commit_files("main", &[("app.yaml", manifests.as_bytes())], "v1");
    let agent = Agent::start(&test);
    create_bd(&client, &test, &test, &repo.url(fixtures.git_plain())).await;
    wait_condition(&client, &agent, &test, "Ready", "True", "2 objects").await;

    // Paused first: deleting is the user's explicit request and works while paused.
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let pause = json!({"spec": {"paused": true}});
    bds.patch(&test, &PatchParams::default(), &Patch::Merge(&pause))
        .await
        .unwrap();
    wait_condition(&client, &agent, &test, "Paused", "True", "paused").await;
    bds.delete(&test, &Default::default()).await.unwrap();
    agent::wait_bd_gone(&client, &test).await;
    // The finalizer was only removed once the namespace had finished terminating.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    assert!(
        namespaces.get_opt(&bundle_ns).await.unwrap().is_none(),
        "the bundle's namespace is fully gone"
    );
    let _ = namespaces.delete(&test, &Default::default()).await;
}

#[tokio::test]
async fn secrets_from_the_agent_namespace_and_allow_listed_namespaces() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("allow");
    let (agent_ns, allowed_ns) = (format!("{test}-agent"), format!("{test}-allowed"));
    for ns in [&test, &agent_ns, &allowed_ns] {
        rbac::namespace(&client, ns).await;
    }
    let git = fixtures.git_auth();
    let (user, password) = (
        git.username.as_deref().unwrap(),
        git.password.as_deref().unwrap(),
    );
    rbac::basic_auth_secret(&client, &agent_ns, "home-creds", user, password).await;
    rbac::basic_auth_secret(&client, &allowed_ns, "shared-creds", user, password).await;
    let repo = fixtures.git_repo(&test);
    repo.commit_files(
        "main",
        &[("app.yaml", config_map("app", "1").as_bytes())],
        "v1",
    );
    let other = fixtures.git_repo(&format!("{test}-other"));
    other.commit_files(
        "main",
        &[("other.yaml", config_map("other", "1").as_bytes())],
        "v1",
    );
    let agent = Agent::start_with(
        &test,
        &[
            "--namespace",
            &agent_ns,
            "--allow-secret-namespace",
            &allowed_ns,
        ],
    );
    let spec = json!({
        "installNamespace": test,
        "format": "plain",
        "sources": [
            // No namespace: the agent's own (labelled for this BundleDeployment below).
            {"kind": "git", "git": {"repository": repo.url(git), "ref": {"branch": "main"},
                "auth": {"secret": {"name": "home-creds"}}}},
            // Another namespace, on the agent's allow-list: no ServiceAccount needed.
            {"kind": "git", "destination": "other", "git": {"repository": other.url(git), "ref": {"branch": "main"},
                "auth": {"secret": {"name": "shared-creds", "namespace": allowed_ns}}}},
        ],
    });
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    agent::apply_bd(&client, &test, spec.clone()).await;
    // The agent's namespace is no pool: its Secret is used once labelled for this
    // BundleDeployment (the allow-listed namespace's needs nothing).
    let refused = wait_condition(
        &client,
        &agent,
        &test,
        "Ready",
        "False",
        &format!("secret {agent_ns}/home-creds is in the agent's namespace and not labelled access.pallet.dev/{test}=true"),
    )
    .await;
    assert_eq!(
        find(&refused.status.unwrap().conditions, "Ready")
            .unwrap()
            .reason,
        "SecretNotAllowed"
    );
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &agent_ns)
        .patch(
            "home-creds",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {format!("access.pallet.dev/{test}"): "true"}}}),
            ),
        )
        .await
        .unwrap();
    wait_condition(&client, &agent, &test, "Ready", "True", "2 objects").await;

    // A missing Secret is named in the condition.
    let mut missing = spec.clone();
    missing["sources"][0]["git"]["auth"]["secret"]["name"] = json!("nope");
    agent::apply_bd(&client, &test, missing).await;
    let bd = wait_condition(
        &client,
        &agent,
        &test,
        "Ready",
        "False",
        &format!("secret {agent_ns}/nope not found"),
    )
    .await;
    assert_eq!(
        find(&bd.status.unwrap().conditions, "Ready")
            .unwrap()
            .reason,
        "SecretNotFound"
    );
    bds.delete(&test, &Default::default()).await.unwrap();
    agent::wait_bd_gone(&client, &test).await;
}

/// A restarted agent (a new process: another name for `status.agent`) passes over a Ready
/// BundleDeployment whose content has not changed without writing its status: at 10,000 bundles,
/// renaming alone was 10,000 status writes at every restart.
#[tokio::test]
async fn a_restarted_agent_writes_no_status_when_nothing_changed() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("restart-quiet");
    let repo = fixtures.git_repo(&test);
    repo.commit_files(
        "main",
        &[("app.yaml", config_map("app", "1").as_bytes())],
        "v1",
    );
    let mut first = Agent::start(&test);
    create_bd(&client, &test, &test, &repo.url(fixtures.git_plain())).await;
    wait_condition(&client, &first, &test, "Ready", "True", "1 objects").await;
    first.kill();
    let bds = Api::<BundleDeployment>::all(client.clone());
    let before = bds.get(&test).await.unwrap();
    let restarted = first.restart_with_env(&[]);
    // The restarted agent's first pass over the BundleDeployment has ended.
    cluster::poll_until(
        "a pass of the restarted agent",
        Duration::from_secs(60),
        || async {
            let metrics = restarted.metrics().await;
            let passes: f64 = metrics
                .lines()
                .filter(|l| l.starts_with("pallet_reconciles_total{"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            (passes >= 1.0)
                .then_some(())
                .ok_or_else(|| format!("{passes} passes"))
        },
    )
    .await;
    let after = bds.get(&test).await.unwrap();
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "status written by the restarted agent: {:?}",
        after.status
    );
    assert_eq!(
        after.status.and_then(|s| s.agent),
        before.status.and_then(|s| s.agent),
        "the first agent's name stays until a real write"
    );
    bds.delete(&test, &Default::default()).await.unwrap();
    agent::wait_bd_gone(&client, &test).await;
}

/// Two agents reconciling the same BundleDeployment (no leader election, the same
/// selector) are told apart by `status.agent`, and the second writer is reported as an Event.
#[tokio::test]
async fn a_second_agent_writing_the_same_bundle_is_reported() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("two-agents");
    let repo = fixtures.git_repo(&test);
    repo.commit_files(
        "main",
        &[("app.yaml", config_map("app", "1").as_bytes())],
        "v1",
    );
    let first = Agent::start(&test);
    let _second = Agent::start_selecting(
        &format!("{}={test}", agent::TEST_LABEL),
        &format!("{test}-second"),
        &[],
    );
    create_bd(&client, &test, &test, &repo.url(fixtures.git_plain())).await;
    wait_condition(&client, &first, &test, "Ready", "True", "1 objects").await;
    // Each drift correction is written by whichever agent gets there; soon each has seen the
    // other's name in status.agent after writing its own.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let selector = format!("involvedObject.name={test},reason=AnotherAgent");
    let note = cluster::poll_until("an AnotherAgent event", Duration::from_secs(60), || {
        let (events, selector, cms) = (events.clone(), selector.clone(), cms.clone());
        async move {
            let _ = cms
                .patch(
                    "app",
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"data": {"value": "edited"}})),
                )
                .await;
            let list = events
                .list(&kube::api::ListParams::default().fields(&selector))
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .first()
                .and_then(|e| e.message.clone())
                .ok_or_else(|| "no event yet".to_string())
        }
    })
    .await;
    assert!(
        note.contains("another agent") && note.contains("--leader-elect"),
        "{note}"
    );
    let bd = Api::<BundleDeployment>::all(client.clone())
        .get(&test)
        .await
        .unwrap();
    assert!(bd.status.unwrap().agent.is_some());
    Api::<BundleDeployment>::all(client.clone())
        .delete(&test, &Default::default())
        .await
        .unwrap();
    agent::wait_bd_gone(&client, &test).await;
}

/// A duration too long for any clock (`99999999999999999999h`, which the CRD's pattern admits)
/// refuses the spec with reason InvalidDuration naming the field, at once and without a panic:
/// the agent keeps running, its neighbour installs, and the bad BundleDeployment's objects stay
/// as the last good spec left them.
#[tokio::test]
async fn a_duration_too_long_refuses_the_spec_and_names_the_field() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("e2e-dur");
    let repo = fixtures.git_repo(&test);
    repo.commit_files(
        "main",
        &[("manifests/app.yaml", config_map("app", "1").as_bytes())],
        "v1",
    );
    let url = repo.url(fixtures.git_plain());
    let agent = Agent::start(&test);
    let pid = agent.pid();
    create_bd(&client, &test, &test, &url).await;
    wait_condition(&client, &agent, &test, "Ready", "True", "1 objects").await;

    // The same bundle with a progress deadline no clock can hold.
    let spec = json!({
        "installNamespace": test,
        "sources": [{"kind": "git", "git": {"repository": url, "ref": {"branch": "main"}}}],
        "format": "plain",
        "rollout": {"progressDeadline": "99999999999999999999h"},
    });
    agent::apply_bd(&client, &test, spec).await;
    let bd = wait_condition(
        &client,
        &agent,
        &test,
        "Ready",
        "False",
        "spec.rollout.progressDeadline",
    )
    .await;
    let conditions = &bd.status.as_ref().unwrap().conditions;
    let ready = find(conditions, "Ready").unwrap();
    assert_eq!(ready.reason, "InvalidDuration");
    assert!(
        ready.message.contains("longer than the longest duration"),
        "{}",
        ready.message
    );
    assert_eq!(find(conditions, "Stalled").unwrap().status, "True");
    assert!(
        !agent.log_tail().contains("panicked"),
        "no pass panicked:\n{}",
        agent.log_tail()
    );

    // The agent is the same process and still reconciles: a neighbour installs.
    let neighbour = format!("{test}-n");
    let spec = json!({
        "installNamespace": neighbour,
        "sources": [{"kind": "git", "git": {"repository": url, "ref": {"branch": "main"}}}],
        "format": "plain",
    });
    agent::apply_bd_labelled(&client, &neighbour, &test, spec).await;
    wait_condition(&client, &agent, &neighbour, "Ready", "True", "1 objects").await;
    assert_eq!(agent.pid(), pid);
    // The refused spec's objects are as the last good spec left them.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);
    assert_eq!(
        cms.get("app").await.unwrap().data.unwrap()["value"],
        "1",
        "the installed object stays"
    );
}
