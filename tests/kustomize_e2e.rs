//! End to end, the kustomize format on the local control plane: a base and an overlay from a
//! git source, with a `configMapGenerator` whose hash-suffixed ConfigMap the Deployment names.
//! A change to the generator's input makes a new revision that rolls the Deployment to the new
//! ConfigMap and prunes the old one once healthy; a rollback brings both back. A remote base is
//! refused before anything is applied.
//!
//! Namespaces are labelled `pallet.dev/fake-kubelet=on`: the control plane's fake kubelet makes
//! the Deployment's Pods Ready, so revisions become healthy as in a cluster.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::time::{Duration, Instant};

use agent::{apply_bd, wait_condition, Agent};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::Client;
use pallet::api::{BundleDeployment, BundleDeploymentStatus, RevisionPhase};
use serde_json::json;

const OWNER: &str = "pallet.dev/bundle-deployment";

const BASE_KUSTOMIZATION: &str = "\
resources:
- deployment.yaml
configMapGenerator:
- name: app-config
  files:
  - app.properties
";

const BASE_DEPLOYMENT: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  replicas: 1
  selector:
    matchLabels: {app: app}
  template:
    metadata:
      labels: {app: app}
    spec:
      containers:
      - name: app
        image: registry.example/app:1.0
        envFrom:
        - configMapRef:
            name: app-config
";

const OVERLAY_KUSTOMIZATION: &str = "\
resources:
- ../../base
namePrefix: prod-
labels:
- pairs: {env: prod}
configMapGenerator:
- name: app-config
  behavior: merge
  literals:
  - LOG_LEVEL=info
images:
- name: registry.example/app
  newTag: \"1.1\"
";

async fn status(client: &Client, name: &str) -> BundleDeploymentStatus {
    Api::<BundleDeployment>::all(client.clone())
        .get(name)
        .await
        .unwrap()
        .status
        .unwrap_or_default()
}

/// Waits until revision `number` is the active one and healthy.
async fn wait_healthy(client: &Client, agent: &Agent, name: &str, number: i64) {
    let start = Instant::now();
    loop {
        let st = status(client, name).await;
        let healthy = st.active_revision == Some(number)
            && st
                .revisions
                .iter()
                .any(|r| r.number == number && r.phase == RevisionPhase::Healthy);
        if healthy {
            return;
        }
        if start.elapsed() > Duration::from_secs(90) {
            panic!(
                "revision {number} of {name} not active and healthy: active {:?}, revisions {:?}\n{:#?}\nagent log:\n{}",
                st.active_revision,
                st.revisions.iter().map(|r| (r.number, r.phase)).collect::<Vec<_>>(),
                st.conditions,
                agent.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The ConfigMap the Deployment's container reads, and the generated ConfigMaps that exist.
async fn config_maps(client: &Client, namespace: &str) -> (String, Vec<String>) {
    let deployment = Api::<Deployment>::namespaced(client.clone(), namespace)
        .get("prod-app")
        .await
        .unwrap();
    let spec = deployment.spec.unwrap().template.spec.unwrap();
    let named = spec.containers[0].env_from.as_ref().unwrap()[0]
        .config_map_ref
        .as_ref()
        .unwrap()
        .name
        .clone();
    let mut present: Vec<String> = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .filter(|n| n.starts_with("prod-app-config-"))
        .collect();
    present.sort();
    (named, present)
}

async fn wait_config_maps(
    client: &Client,
    namespace: &str,
    named: &str,
    present: &[&str],
) -> (String, Vec<String>) {
    let want: Vec<String> = present.iter().map(|s| s.to_string()).collect();
    cluster::poll_until(
        &format!("the Deployment on {named} with exactly {want:?}"),
        Duration::from_secs(60),
        || async {
            let (now_named, now_present) = config_maps(client, namespace).await;
            if now_named == named && now_present == want {
                Ok((now_named, now_present))
            } else {
                Err(format!("named {now_named}, present {now_present:?}"))
            }
        },
    )
    .await
}

async fn request(client: &Client, name: &str, key: &str, value: &str) {
    let patch = json!({"metadata": {"annotations": {key: value}}});
    Api::<BundleDeployment>::all(client.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test]
async fn an_overlay_from_git_rolls_its_generated_config_map_forward_and_back() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let name = support::unique_name("kz");
    cluster::kubelet_namespace(&client, &name).await;
    let repo = fx.git_repo(&name);
    let files = |level: &'static str| {
        vec![
            (
                "base/kustomization.yaml",
                BASE_KUSTOMIZATION.as_bytes().to_vec(),
            ),
            ("base/deployment.yaml", BASE_DEPLOYMENT.as_bytes().to_vec()),
            (
                "base/app.properties",
                format!("color=blue\nlevel={level}\n").into_bytes(),
            ),
            (
                "overlays/prod/kustomization.yaml",
                OVERLAY_KUSTOMIZATION.as_bytes().to_vec(),
            ),
        ]
    };
    let commit = |level: &'static str, message: &str| {
        let files = files(level);
        let refs: Vec<(&str, &[u8])> = files.iter().map(|(p, c)| (*p, c.as_slice())).collect();
        repo.commit_files("main", &refs, message)
    };
    commit("one", "first");
    let agent = Agent::start(&name);
    apply_bd(
        &client,
        &name,
        json!({
            "installNamespace": name,
            "sources": [{"kind": "git", "pollInterval": "1h",
                "git": {"repository": repo.url(fx.git_plain()), "ref": {"branch": "main"}}}],
            "format": "kustomize",
            "config": {"kustomize": {"path": "overlays/prod"}},
        }),
    )
    .await;
    wait_condition(&client, &agent, &name, "Ready", "True", "").await;
    wait_healthy(&client, &agent, &name, 1).await;
    let (first, present) = config_maps(&client, &name).await;
    assert!(first.starts_with("prod-app-config-"), "{first}");
    assert_eq!(present, vec![first.clone()]);
    let deployment = Api::<Deployment>::namespaced(client.clone(), &name)
        .get("prod-app")
        .await
        .unwrap();
    // `labels` without includeTemplates labels the Deployment, not its Pods.
    let labels = deployment.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("env").map(String::as_str), Some("prod"));
    let pod = deployment.spec.unwrap().template;
    assert_eq!(
        pod.spec.unwrap().containers[0].image.as_deref(),
        Some("registry.example/app:1.1")
    );
    let pod_labels = pod.metadata.unwrap().labels.unwrap_or_default();
    assert!(!pod_labels.contains_key("env"));
    let generated = Api::<ConfigMap>::namespaced(client.clone(), &name)
        .get(&first)
        .await
        .unwrap();
    let data = generated.data.unwrap();
    assert_eq!(data["LOG_LEVEL"], "info");
    assert!(data["app.properties"].contains("level=one"));
    assert_eq!(
        generated
            .metadata
            .labels
            .unwrap()
            .get(OWNER)
            .map(String::as_str),
        Some(name.as_str())
    );

    // The generator's input changes: a new ConfigMap name, the Deployment follows it, and the
    // old ConfigMap goes once the revision is healthy.
    commit("two", "second");
    request(
        &client,
        &name,
        pallet::api::REQUESTED_RECONCILE_ANNOTATION,
        "poll-2",
    )
    .await;
    wait_healthy(&client, &agent, &name, 2).await;
    let (second, _) = config_maps(&client, &name).await;
    assert_ne!(second, first, "a new hash for new content");
    wait_config_maps(&client, &name, &second, &[&second]).await;

    // A rollback to revision 1 brings back its ConfigMap and the Deployment's reference to it,
    // and prunes revision 2's.
    request(
        &client,
        &name,
        pallet::api::REQUESTED_ROLLBACK_ANNOTATION,
        "1",
    )
    .await;
    let start = Instant::now();
    loop {
        let st = status(&client, &name).await;
        if st.active_revision == Some(1) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no rollback: {:#?}\n{}",
            st.conditions,
            agent.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_config_maps(&client, &name, &first, &[&first]).await;
    let _ = Api::<BundleDeployment>::all(client.clone())
        .delete(&name, &Default::default())
        .await;
}

#[tokio::test]
async fn a_remote_base_is_refused_and_nothing_is_applied() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let name = support::unique_name("kz-remote");
    cluster::kubelet_namespace(&client, &name).await;
    let repo = fx.git_repo(&name);
    let kustomization =
        "resources:\n- local.yaml\n- https://github.com/example/platform//base?ref=v1.2.0\n";
    let local = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: local\ndata:\n  a: b\n";
    repo.commit_files(
        "main",
        &[
            ("kustomization.yaml", kustomization.as_bytes()),
            ("local.yaml", local.as_bytes()),
        ],
        "remote base",
    );
    let agent = Agent::start(&name);
    apply_bd(
        &client,
        &name,
        json!({
            "installNamespace": name,
            "sources": [{"kind": "git",
                "git": {"repository": repo.url(fx.git_plain()), "ref": {"branch": "main"}}}],
            "format": "kustomize",
        }),
    )
    .await;
    let bd = wait_condition(
        &client,
        &agent,
        &name,
        "Ready",
        "False",
        "https://github.com/example/platform//base?ref=v1.2.0",
    )
    .await;
    let ready = bd
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.reason, "RemoteResourceRefused", "{ready:?}");
    assert!(
        ready.message.contains("kustomization.yaml"),
        "{}",
        ready.message
    );
    assert!(
        ready.message.contains("source"),
        "says to bring it in as a source: {}",
        ready.message
    );
    let applied = Api::<ConfigMap>::namespaced(client.clone(), &name)
        .list(&ListParams::default().labels(&format!("{OWNER}={name}")))
        .await
        .unwrap();
    assert!(applied.items.is_empty(), "nothing applied");
    assert!(
        status(&client, &name).await.revisions.is_empty(),
        "no revision"
    );
    let _ = Api::<BundleDeployment>::all(client.clone())
        .delete(&name, &Default::default())
        .await;
}
