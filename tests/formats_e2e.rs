//! End-to-end: bundles of each format from each source kind, installed by the agent binary on
//! the local control plane. (The helm format joins this matrix when it is wired into render.)

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/kubelet.rs"]
mod kubelet;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use agent::{apply_bd, wait_condition, Agent};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::Api;
use kube::Client;
use oci_client::secrets::RegistryAuth;
use pallet::api::BundleDeployment;
use serde_json::{json, Value};

const OWNER: &str = "pallet.dev/bundle-deployment";

fn argocd_bundle() -> PathBuf {
    // `$PALLET_CONFORMANCE_DIR` for a checkout that is not beside shared/ (a git worktree).
    let dir = std::env::var_os("PALLET_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../shared/conformance/registry-v1"
            ))
        })
        .join("argocd-operator.v0.6.0");
    assert!(
        dir.is_dir(),
        "the conformance bundle is missing at {} (shared/ beside the repo)",
        dir.display()
    );
    dir
}

async fn delete_bd(client: &Client, name: &str) {
    Api::<BundleDeployment>::all(client.clone())
        .delete(name, &Default::default())
        .await
        .unwrap();
    agent::wait_bd_gone(client, name).await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &Default::default())
        .await;
}

fn tar_gz(dir: &Path, out: &Path) {
    let status = Command::new("tar")
        .arg("-czf")
        .arg(out)
        .arg("-C")
        .arg(dir)
        .arg(".")
        .status()
        .unwrap();
    assert!(status.success());
}

/// How a test publishes a bundle directory.
#[derive(Clone, Copy, Debug)]
enum Via {
    Git,
    Image,
    Http,
}

const ALL_SOURCE_KINDS: [Via; 3] = [Via::Git, Via::Image, Via::Http];

/// Publishes `dir` on the fixture server for `via` under `name`; returns the BundleDeployment
/// source and the agent flags it needs.
async fn publish(fx: &support::Fixtures, name: &str, dir: &Path, via: Via) -> (Value, Vec<String>) {
    match via {
        Via::Git => {
            let repo = fx.git_repo(name);
            repo.commit_dir("main", dir, "bundle");
            (
                json!({"kind": "git", "git": {"repository": repo.url(fx.git_plain()), "ref": {"branch": "main"}}}),
                vec![],
            )
        }
        Via::Image => {
            let registry = fx.registry_plain();
            fx.push_dir_as_image(registry, name, "v1", dir, &RegistryAuth::Anonymous)
                .await
                .unwrap();
            (
                json!({"kind": "image", "image": {"ref": format!("{}/{name}:v1", registry.host)}}),
                vec!["--plain-http-registry".to_string(), registry.host.clone()],
            )
        }
        Via::Http => {
            let work = tempfile::tempdir().unwrap();
            let tarball = work.path().join("bundle.tgz");
            tar_gz(dir, &tarball);
            let path = fx.put_file(
                &format!("{name}/bundle.tgz"),
                &std::fs::read(&tarball).unwrap(),
            );
            (
                json!({"kind": "http", "http": {"url": fx.http_plain().url_for(&path)}}),
                vec![],
            )
        }
    }
}

fn start_agent(name: &str, flags: &[String]) -> Agent {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Agent::start_with(name, &flags)
}

#[tokio::test]
async fn registry_v1_bundle_from_each_source_kind_installs_the_operator() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    // One after the other: the operator's CRDs are cluster-scoped, and two BundleDeployments
    // may not own the same CRD.
    for via in ALL_SOURCE_KINDS {
        let name = support::unique_name("olm");
        let (source, flags) = publish(fx, &name, &argocd_bundle(), via).await;
        let agent = start_agent(&name, &flags);
        // No kubelet in the local control plane: this one reports the operator's Pod running,
        // so its Deployment becomes available and the revision healthy.
        let _kubelet = kubelet::FakeKubelet::start(&client, &name, &["*"]);
        apply_bd(
            &client,
            &name,
            // collisionProtection None: the operator's CRDs are cluster-wide, and a run killed
            // midway (no agent left to honour its finalizer) would otherwise block every later
            // run on the shared local cluster. Collisions have their own test in agent_e2e.
            json!({"installNamespace": name, "sources": [source], "format": "registry-v1",
                   "collisionProtection": "None"}),
        )
        .await;
        // 14 objects in the AllNamespaces conformance case, CRDs first.
        wait_condition(&client, &agent, &name, "Ready", "True", "14 objects").await;
        let deployment: Deployment = Api::namespaced(client.clone(), &name)
            .get("argocd-operator-controller-manager")
            .await
            .unwrap();
        assert_eq!(deployment.metadata.labels.unwrap()[OWNER], name, "{via:?}");
        // Generated names match the reference renderer's, so objects can be handed over.
        let role: ClusterRole = Api::all(client.clone())
            .get("argocd-operator.v0-1dhiybrldl1gyksid1dk2dqjsc72psdybc7iyvse5gpx")
            .await
            .unwrap();
        assert_eq!(role.metadata.labels.unwrap()[OWNER], name, "{via:?}");
        delete_bd(&client, &name).await;
    }
}

#[tokio::test]
async fn plain_bundle_from_an_http_tarball_and_a_single_file() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let name = support::unique_name("http");
    let work = tempfile::tempdir().unwrap();
    let bundle = work.path().join("bundle");
    std::fs::create_dir_all(bundle.join("manifests")).unwrap();
    std::fs::write(
        bundle.join("manifests/app.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-tarball}\ndata: {a: \"1\"}\n",
    )
    .unwrap();
    let tarball = work.path().join("bundle.tgz");
    tar_gz(&bundle, &tarball);
    let tgz_path = fx.put_file(
        &format!("{name}/bundle.tgz"),
        &std::fs::read(&tarball).unwrap(),
    );
    let single = fx.put_file(
        &format!("{name}/extra.yaml"),
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-single-file}\n",
    );
    let agent = Agent::start(&name);
    apply_bd(
        &client,
        &name,
        json!({
            "installNamespace": name,
            "sources": [
                {"kind": "http", "http": {"url": fx.http_plain().url_for(&tgz_path)}},
                {"kind": "http", "destination": "extra", "http": {"url": fx.http_plain().url_for(&single)}},
            ],
            "format": "plain",
        }),
    )
    .await;
    wait_condition(&client, &agent, &name, "Ready", "True", "2 objects").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    assert_eq!(
        cms.get("from-tarball")
            .await
            .unwrap()
            .metadata
            .labels
            .unwrap()[OWNER],
        name
    );
    assert!(cms.get_opt("from-single-file").await.unwrap().is_some());
    delete_bd(&client, &name).await;
}

#[tokio::test]
async fn plain_bundle_from_an_image_with_a_crd_and_its_objects() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let name = support::unique_name("img");
    let group = format!("{name}.example.com");
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        work.path().join("crd.yaml"),
        format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: gadgets.{group}}}\n\
             spec:\n  group: {group}\n  scope: Namespaced\n  names: {{plural: gadgets, singular: gadget, kind: Gadget}}\n  \
             versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        \
             type: object\n        x-kubernetes-preserve-unknown-fields: true\n"
        ),
    )
    .unwrap();
    // The custom resource names no namespace: the renderer cannot know its scope; the apply
    // learns it from discovery once the CRD is established and gives it installNamespace.
    std::fs::write(
        work.path().join("gadget.yaml"),
        format!(
            "apiVersion: {group}/v1\nkind: Gadget\nmetadata: {{name: g1}}\nspec: {{size: 2}}\n"
        ),
    )
    .unwrap();
    let registry = fx.registry_plain();
    fx.push_dir_as_image(registry, &name, "v1", work.path(), &RegistryAuth::Anonymous)
        .await
        .unwrap();
    let agent = Agent::start_with(&name, &["--plain-http-registry", &registry.host]);
    apply_bd(
        &client,
        &name,
        json!({
            "installNamespace": name,
            "sources": [{"kind": "image", "image": {"ref": format!("{}/{name}:v1", registry.host)}}],
            "format": "plain",
        }),
    )
    .await;
    wait_condition(&client, &agent, &name, "Ready", "True", "2 objects").await;
    let gadgets: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &name,
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(&group, "v1", "Gadget"),
            "gadgets",
        ),
    );
    assert_eq!(gadgets.get("g1").await.unwrap().data["spec"]["size"], 2);
    delete_bd(&client, &name).await;
}

#[tokio::test]
async fn helm_chart_from_each_source_kind_with_values() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let chart = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/formats/testdata/helm/charts/starter"
    ));
    for via in ALL_SOURCE_KINDS {
        let name = support::unique_name("helm");
        let (source, flags) = publish(fx, &name, &chart, via).await;
        let agent = start_agent(&name, &flags);
        // Reports the chart's Pods running (no kubelet here), so the Deployment becomes available.
        let _kubelet = kubelet::FakeKubelet::start(&client, &name, &["*"]);
        apply_bd(
            &client,
            &name,
            json!({
                "installNamespace": name,
                "sources": [source],
                "format": "helm",
                "config": {"helm": {"releaseName": "web", "values": {"replicaCount": 2}}},
            }),
        )
        .await;
        wait_condition(&client, &agent, &name, "Ready", "True", "objects installed").await;
        let deployment: Deployment = Api::namespaced(client.clone(), &name)
            .get("web-starter")
            .await
            .unwrap();
        assert_eq!(
            deployment.spec.unwrap().replicas,
            Some(2),
            "values reach the templates ({via:?})"
        );
        let labels = deployment.metadata.labels.unwrap();
        assert_eq!(labels[OWNER], name);
        assert_eq!(labels["app.kubernetes.io/instance"], "web");
        delete_bd(&client, &name).await;
    }
}

#[tokio::test]
async fn helm_capabilities_come_from_the_live_cluster() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let name = support::unique_name("caps");
    let chart = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(chart.path().join("templates")).unwrap();
    std::fs::write(
        chart.path().join("Chart.yaml"),
        "apiVersion: v2\nname: probe\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        chart.path().join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: capabilities\ndata:\n  \
         version: {{ .Capabilities.KubeVersion.Version | quote }}\n  \
         pallet: {{ .Capabilities.APIVersions.Has \"pallet.dev/v1alpha1/BundleDeployment\" | quote }}\n  \
         missing: {{ .Capabilities.APIVersions.Has \"nothing.example.com/v1\" | quote }}\n",
    )
    .unwrap();
    let (source, flags) = publish(fx, &name, chart.path(), Via::Git).await;
    let agent = start_agent(&name, &flags);
    apply_bd(
        &client,
        &name,
        json!({"installNamespace": name, "sources": [source], "format": "helm"}),
    )
    .await;
    wait_condition(&client, &agent, &name, "Ready", "True", "1 objects").await;
    let data = Api::<ConfigMap>::namespaced(client.clone(), &name)
        .get("capabilities")
        .await
        .unwrap()
        .data
        .unwrap();
    let version = client.apiserver_version().await.unwrap().git_version;
    assert_eq!(
        data["version"], version,
        "the cluster's version, not helm's offline default"
    );
    assert_eq!(data["pallet"], "true", "a CRD-served API is listed");
    assert_eq!(data["missing"], "false");
    delete_bd(&client, &name).await;
}
