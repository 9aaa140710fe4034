//! pallet's own Helm chart (deploy/chart): helm and pallet's helm format render it alike, with
//! its defaults it holds deploy/'s objects, and a BundleDeployment installs it (pallet managing
//! pallet) on the local control plane.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use agent::Agent;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{json, Value};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> PathBuf {
    root().join("deploy/chart")
}

fn run(command: &mut Command) -> String {
    let out = command.output().expect("the command runs");
    assert!(
        out.status.success(),
        "{command:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn helm() -> PathBuf {
    PathBuf::from(run(Command::new(root().join("tools/helm.sh")).arg("build")).trim())
}

/// Objects by `apiVersion kind namespace/name`.
fn objects(yaml: &str) -> BTreeMap<String, Value> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(yaml).unwrap();
    documents
        .into_iter()
        .filter(|d| d.is_object())
        .map(|d| {
            let key = format!(
                "{} {} {}/{}",
                d["apiVersion"].as_str().unwrap_or_default(),
                d["kind"].as_str().unwrap_or_default(),
                d["metadata"]["namespace"].as_str().unwrap_or_default(),
                d["metadata"]["name"].as_str().unwrap_or_default()
            );
            (key, d)
        })
        .collect()
}

fn values_file(dir: &Path, values: &Value) -> PathBuf {
    let path = dir.join("values.yaml");
    std::fs::write(&path, serde_json::to_string(values).unwrap()).unwrap();
    path
}

fn helm_render(values: &Path) -> BTreeMap<String, Value> {
    objects(&run(Command::new(helm())
        .args(["template", "pallet"])
        .arg(chart())
        .args([
            "--namespace",
            "pallet-system",
            "--kube-version",
            "1.35.0",
            "--values",
        ])
        .arg(values)))
}

fn pallet_render(values: &Path) -> BTreeMap<String, Value> {
    objects(&run(Command::new(env!("CARGO_BIN_EXE_pallet"))
        .args(["render", "--format", "helm"])
        .arg(chart())
        .args([
            "--release-name",
            "pallet",
            "--install-namespace",
            "pallet-system",
        ])
        .args(["--kube-version", "1.35.0", "--values"])
        .arg(values)))
}

#[test]
fn helm_and_pallet_render_the_chart_alike() {
    let dir = tempfile::tempdir().unwrap();
    let digest = format!("sha256:{}", "c".repeat(64));
    for values in [
        json!({}),
        json!({"leastPrivilege": true, "monitoring": {"enabled": true}, "fullnameOverride": "pallet-blue",
               "image": {"repository": "registry.example/pallet", "digest": digest, "pullPolicy": "Always"},
               "extraArgs": ["--concurrency=8", "--log-format=plain"], "replicas": 3,
               "nodeSelector": {"kubernetes.io/os": "linux"},
               "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}],
               "crds": {"install": false}, "admissionPolicy": {"enabled": false},
               "tenantRole": {"enabled": false}, "podDisruptionBudget": {"enabled": false}, "networkPolicy": {"enabled": false}}),
    ] {
        let file = values_file(dir.path(), &values);
        let by_helm = helm_render(&file);
        let by_pallet = pallet_render(&file);
        assert_eq!(
            by_helm.keys().collect::<Vec<_>>(),
            by_pallet.keys().collect::<Vec<_>>(),
            "values {values}"
        );
        for (key, object) in &by_helm {
            assert_eq!(object, &by_pallet[key], "{key} with values {values}");
        }
        assert!(by_helm.len() >= 8, "{values}: {:?}", by_helm.keys());
    }
}

/// The labels helm charts add, and the CRD's keep policy: the chart's only differences from
/// deploy/.
fn without_helm_marks(mut object: Value) -> Value {
    let metadata = object["metadata"]
        .as_object_mut()
        .expect("an object's metadata");
    if let Some(labels) = metadata.get_mut("labels").and_then(Value::as_object_mut) {
        for key in [
            "app.kubernetes.io/instance",
            "app.kubernetes.io/managed-by",
            "app.kubernetes.io/version",
            "helm.sh/chart",
        ] {
            labels.remove(key);
        }
    }
    if let Some(annotations) = metadata
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.remove("helm.sh/resource-policy");
    }
    object
}

#[test]
fn the_charts_defaults_are_deploys_objects() {
    let dir = tempfile::tempdir().unwrap();
    let chart = pallet_render(&values_file(dir.path(), &json!({})));
    let deploy = objects(&run(Command::new(env!("CARGO_BIN_EXE_pallet")).args([
        "install",
        "--export",
        "--image",
        "pallet:0.1.0",
    ])));
    let deploy: BTreeMap<String, Value> = deploy
        .into_iter()
        .filter(|(_, o)| o["kind"] != "Namespace")
        .collect();
    assert_eq!(
        chart.keys().collect::<Vec<_>>(),
        deploy.keys().collect::<Vec<_>>()
    );
    for (key, object) in chart {
        assert_eq!(without_helm_marks(object), deploy[&key], "{key}");
    }
}

#[tokio::test]
async fn a_bundle_deployment_installs_pallets_chart() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let registry = fixtures.registry_plain();
    let test = support::unique_name("pallet-chart");
    // The chart as an OCI bundle image (its tree at the root).
    let reference = format!("{}/{test}:0.1.0", registry.host);
    let pinned = run(Command::new(env!("CARGO_BIN_EXE_pallet"))
        .arg("push")
        .arg(chart())
        .arg(&reference)
        .arg("--plain-http"));
    // Its Pods run where the fake kubelet runs them.
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": test, "labels": {"pallet.dev/fake-kubelet": "on"}}});
    Api::<Namespace>::all(client.clone())
        .patch(
            &test,
            &PatchParams::apply(cluster::TEST_FIELD_MANAGER),
            &Patch::Apply(&namespace),
        )
        .await
        .unwrap();
    let agent = Agent::start_with(&test, &["--plain-http-registry", &registry.host]);
    // A second pallet beside the shared cluster's: its own names, no CRD, no admission policy
    // and no tenant role (those are the cluster's already).
    let spec = json!({
        "installNamespace": test,
        "sources": [{"kind": "image", "image": {"ref": pinned.trim()}}],
        "format": "helm",
        "config": {"helm": {"values": {
            "fullnameOverride": test,
            "crds": {"install": false},
            "admissionPolicy": {"enabled": false},
            "tenantRole": {"enabled": false},
            "image": {"repository": "registry.example/pallet",
                      "digest": format!("sha256:{}", "d".repeat(64))},
        }}},
        "rollout": {"progressDeadline": "2m"},
    });
    agent::apply_bd(&client, &test, spec).await;
    agent::wait_condition(&client, &agent, &test, "Ready", "True", "").await;
    let deployment = Api::<Deployment>::namespaced(client.clone(), &test)
        .get(&test)
        .await
        .unwrap();
    let container = &deployment.spec.unwrap().template.spec.unwrap().containers[0];
    assert_eq!(
        container.image.as_deref(),
        Some(format!("registry.example/pallet@sha256:{}", "d".repeat(64)).as_str())
    );
    assert!(container
        .args
        .as_ref()
        .unwrap()
        .contains(&format!("--lease-name={test}")));
    let roles: Api<ClusterRole> = Api::all(client.clone());
    assert!(roles
        .get_opt(&format!("{test}-install"))
        .await
        .unwrap()
        .is_some());

    // Deleting it removes what it installed, cluster-scoped objects too.
    Api::<pallet::api::BundleDeployment>::all(client.clone())
        .delete(&test, &Default::default())
        .await
        .unwrap();
    agent::wait_bd_gone(&client, &test).await;
    assert!(roles.get_opt(&test).await.unwrap().is_none());
    assert!(roles
        .get_opt(&format!("{test}-install"))
        .await
        .unwrap()
        .is_none());
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&test, &Default::default())
        .await;
}
