//! End-to-end: the GitOps bootstrap of docs/coming-from-flux-or-argo-cd.md, with the page's own
//! manifests. A root BundleDeployment whose git source holds BundleDeployment manifests applies
//! them; the agent reconciles each; the root is Ready only once they are; a child paused by hand
//! keeps its pause through the root's next apply and does not hold the root; a child removed from
//! git is pruned with its objects; deleting the root deletes the rest; bootstrapping again after
//! the namespaces were deleted too recreates them.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/docs.rs"]
mod docs;
mod support;

use std::time::Duration;

use agent::{wait_bd_gone, wait_condition, Agent, TEST_LABEL};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::Client;
use pallet::api::BundleDeployment;
use serde_json::{json, Value};

/// The page's repository URL, replaced by the fixture git server's.
const PAGE_REPOSITORY: &str = "https://git.example/platform/fleet.git";

/// A YAML example of the page as JSON.
fn example(marker: &str) -> Value {
    serde_saphyr::from_str(&docs::example(marker))
        .unwrap_or_else(|e| panic!("the page's example {marker} parses: {e}"))
}

/// The page's child BundleDeployment as `name`, installing `apps/<app>` of `repository` into
/// namespace `name`, labelled for this test's agent and polling every 2 s.
fn child(test: &str, name: &str, app: &str, repository: &str) -> Value {
    let mut bd = example("gitops-child");
    let source = &bd["spec"]["sources"][0]["git"];
    assert_eq!(source["repository"], PAGE_REPOSITORY, "{bd}");
    assert_eq!(source["directory"], "apps/guestbook", "{bd}");
    bd["metadata"]["name"] = json!(name);
    bd["metadata"]["labels"] = json!({TEST_LABEL: test});
    bd["spec"]["installNamespace"] = json!(name);
    bd["spec"]["sources"][0]["git"]["repository"] = json!(repository);
    bd["spec"]["sources"][0]["git"]["directory"] = json!(format!("apps/{app}"));
    bd["spec"]["sources"][0]["pollInterval"] = json!("2s");
    bd
}

/// The page's app (a ConfigMap) with `greeting`, as YAML.
fn app(greeting: &str) -> String {
    let mut cm = example("gitops-app");
    cm["data"]["greeting"] = json!(greeting);
    cm.to_string()
}

/// Commits the fleet repository: the children under `clusters/prod`, the apps under `apps/`.
fn commit(repo: &support::GitRepo, children: &[(&str, &Value)], message: &str) {
    let mut files: Vec<(String, Vec<u8>)> = children
        .iter()
        .map(|(file, bd)| {
            (
                format!("clusters/prod/{file}.yaml"),
                bd.to_string().into_bytes(),
            )
        })
        .collect();
    files.push((
        "apps/guestbook/configmap.yaml".into(),
        app("hello from git").into_bytes(),
    ));
    files.push((
        "apps/greeter/configmap.yaml".into(),
        app("greetings from git").into_bytes(),
    ));
    let files: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(path, content)| (path.as_str(), content.as_slice()))
        .collect();
    repo.commit_files("main", &files, message);
}

/// Waits until ConfigMap `guestbook` in `namespace` holds `greeting`, or (with `None`) is gone.
async fn wait_greeting(client: &Client, namespace: &str, greeting: Option<&str>) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    cluster::poll_until(
        &format!("ConfigMap {namespace}/guestbook to hold {greeting:?}"),
        Duration::from_secs(90),
        || {
            let cms = cms.clone();
            async move {
                let live = cms
                    .get_opt("guestbook")
                    .await
                    .map_err(|e| e.to_string())?
                    .map(|cm| cm.data.unwrap_or_default().remove("greeting"));
                match (live, greeting) {
                    (None, None) => Ok(()),
                    (Some(Some(value)), Some(wanted)) if value == wanted => Ok(()),
                    (live, _) => Err(format!("{live:?}")),
                }
            }
        },
    )
    .await;
}

/// Whether `name` is labelled as applied by BundleDeployment `owner`.
async fn applied_by(bds: &Api<BundleDeployment>, name: &str, owner: &str) -> bool {
    let bd = bds.get(name).await.unwrap();
    bd.metadata
        .labels
        .unwrap_or_default()
        .get("pallet.dev/bundle-deployment")
        .map(String::as_str)
        == Some(owner)
}

#[tokio::test]
async fn a_root_bundle_deployment_applies_the_bundle_deployments_kept_in_git() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let test = support::unique_name("gitops");
    let repo = fx.git_repo(&test);
    let url = repo.url(fx.git_plain());
    let (guestbook, greeter, root) = (
        format!("{test}-guestbook"),
        format!("{test}-greeter"),
        format!("{test}-fleet"),
    );
    let guestbook_bd = child(&test, &guestbook, "guestbook", &url);
    let greeter_bd = child(&test, &greeter, "greeter", &url);
    commit(
        &repo,
        &[("guestbook", &guestbook_bd), ("greeter", &greeter_bd)],
        "two apps",
    );
    let agent = Agent::start(&test);

    // The root, as the page shows it, for this test's repository and agent.
    let mut fleet = example("gitops-root");
    assert_eq!(
        fleet["spec"]["sources"][0]["git"]["repository"], PAGE_REPOSITORY,
        "{fleet}"
    );
    assert_eq!(fleet["spec"]["rollout"]["onFailure"], "Hold", "{fleet}");
    fleet["metadata"]["name"] = json!(root);
    fleet["metadata"]["labels"] = json!({TEST_LABEL: test});
    fleet["spec"]["sources"][0]["git"]["repository"] = json!(url);
    fleet["spec"]["sources"][0]["pollInterval"] = json!("2s");
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let apply = PatchParams::apply(cluster::TEST_FIELD_MANAGER);
    bds.patch(&root, &apply, &Patch::Apply(&fleet))
        .await
        .unwrap();

    // The root is Ready only once both children are: they were applied by it and installed.
    let ready = wait_condition(&client, &agent, &root, "Ready", "True", "").await;
    for name in [&guestbook, &greeter] {
        assert!(
            applied_by(&bds, name, &root).await,
            "{name} applied by the root"
        );
        let bd = bds.get(name).await.unwrap();
        let status = bd.status.clone().unwrap_or_default();
        assert!(
            pallet::api::conditions::find(&status.conditions, "Ready")
                .is_some_and(|c| c.status == "True"),
            "{name} was Ready when the root became Ready ({ready:?}): {status:?}"
        );
    }
    wait_greeting(&client, &guestbook, Some("hello from git")).await;
    wait_greeting(&client, &greeter, Some("greetings from git")).await;

    // greeter paused by hand (as `pallet pause` writes it); a change to guestbook in git is applied
    // by the root, greeter's pause stays, and the root becomes Ready at its new revision anyway.
    let pause = json!({"metadata": {"annotations": {"pallet.dev/paused-reason": "hotfix"}},
                       "spec": {"paused": true}});
    bds.patch(&greeter, &PatchParams::default(), &Patch::Merge(&pause))
        .await
        .unwrap();
    wait_condition(&client, &agent, &greeter, "Paused", "True", "hotfix").await;
    let mut guestbook_v2 = guestbook_bd.clone();
    guestbook_v2["spec"]["rollout"] = json!({"progressDeadline": "5m"});
    commit(
        &repo,
        &[("guestbook", &guestbook_v2), ("greeter", &greeter_bd)],
        "guestbook: a deadline of its own",
    );
    cluster::poll_until(
        "the root's second revision to be healthy",
        Duration::from_secs(90),
        || {
            let bds = bds.clone();
            let root = root.clone();
            async move {
                let bd = bds.get(&root).await.map_err(|e| e.to_string())?;
                let status = bd.status.unwrap_or_default();
                match status.last_healthy_revision {
                    Some(2) => Ok(()),
                    other => Err(format!(
                        "last healthy revision {other:?}: {:?}",
                        status.conditions
                    )),
                }
            }
        },
    )
    .await;
    let live_guestbook = bds.get(&guestbook).await.unwrap();
    assert_eq!(
        live_guestbook
            .spec
            .rollout
            .as_ref()
            .and_then(|r| r.progress_deadline.as_deref()),
        Some("5m"),
        "the root applied guestbook's change"
    );
    assert!(
        bds.get(&greeter).await.unwrap().spec.paused,
        "the root's apply left greeter's pause alone"
    );

    // greeter leaves git: the root prunes it, and its deletion removes what it installed.
    bds.patch(
        &greeter,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"paused": false}})),
    )
    .await
    .unwrap();
    commit(&repo, &[("guestbook", &guestbook_v2)], "greeter retired");
    wait_bd_gone(&client, &greeter).await;
    wait_greeting(&client, &greeter, None).await;
    wait_greeting(&client, &guestbook, Some("hello from git")).await;

    // Deleting the root deletes guestbook, and guestbook's objects with it.
    bds.delete(&root, &DeleteParams::default()).await.unwrap();
    wait_bd_gone(&client, &root).await;
    wait_bd_gone(&client, &guestbook).await;
    wait_greeting(&client, &guestbook, None).await;

    // A cluster torn down to its namespaces and bootstrapped again by the same agent: the
    // install namespace it saw a moment ago is gone, and is created again.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    delete_namespace(&namespaces, &guestbook).await;
    bds.patch(&root, &apply, &Patch::Apply(&fleet))
        .await
        .unwrap();
    wait_condition(&client, &agent, &root, "Ready", "True", "").await;
    wait_greeting(&client, &guestbook, Some("hello from git")).await;

    bds.delete(&root, &DeleteParams::default()).await.unwrap();
    wait_bd_gone(&client, &root).await;
    wait_bd_gone(&client, &guestbook).await;
    drop(agent);
    for name in [&guestbook, &greeter] {
        let _ = namespaces.delete(name, &DeleteParams::default()).await;
    }
}

/// Deletes namespace `name` and waits until it is gone.
async fn delete_namespace(namespaces: &Api<Namespace>, name: &str) {
    namespaces
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    cluster::poll_until(
        &format!("namespace {name} to be gone"),
        Duration::from_secs(120),
        || {
            let namespaces = namespaces.clone();
            async move {
                match namespaces.get_opt(name).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(ns) => Err(format!("{:?}", ns.status)),
                }
            }
        },
    )
    .await;
}
