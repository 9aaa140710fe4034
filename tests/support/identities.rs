//! Users of the tests' own on the local control plane: ServiceAccounts with tokens from the
//! TokenRequest API, their grants, and deploy/'s admission policy applied under a test's own
//! name (selecting only that test's BundleDeployments, so tests in parallel are not affected).
//! Used with `#[path = "support/identities.rs"] mod identities;` next to `mod cluster;` and
//! `mod agent;`.

#![allow(dead_code)] // each test binary uses a different part of this module

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use kube::config::Kubeconfig;
use kube::Client;
use pallet::api::BundleDeployment;
use serde_json::{json, Value};

use crate::agent::TEST_LABEL;
use crate::cluster;

/// The text of a file of deploy/.
pub fn deploy_file(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("deploy")
            .join(name),
    )
    .unwrap()
}

/// The YAML documents of a deploy/ file.
pub fn deploy_documents(name: &str) -> Vec<Value> {
    deploy_file(name)
        .split("\n---\n")
        .map(|doc| serde_saphyr::from_str::<Value>(doc).unwrap())
        .filter(|doc| doc.is_object())
        .collect()
}

/// Creates `object` through `api`, panicking with its name when refused.
pub async fn create<K>(api: &Api<K>, object: Value) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    let object: K = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("create {:?}: {e}", object.meta().name))
}

/// Creates namespace `name`.
pub async fn namespace(client: &Client, name: &str) {
    create(
        &Api::<Namespace>::all(client.clone()),
        json!({"metadata": {"name": name}}),
    )
    .await;
}

/// Deletes namespace `name` (best effort: cleanup).
pub async fn delete_namespace(client: &Client, name: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

/// Creates ServiceAccount `namespace/name`.
pub async fn service_account(client: &Client, namespace: &str, name: &str) {
    create(
        &Api::<ServiceAccount>::namespaced(client.clone(), namespace),
        json!({"metadata": {"name": name}}),
    )
    .await;
}

/// The rules of a bundle's ServiceAccount that installs ConfigMaps in its namespace.
pub fn writes_config_maps() -> Value {
    json!([{"apiGroups": [""], "resources": ["configmaps"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}])
}

/// Binds `rules` to ServiceAccount `sa` (namespace, name): cluster-wide without `namespace`.
pub async fn grant(
    client: &Client,
    name: &str,
    namespace: Option<&str>,
    sa: (&str, &str),
    rules: Value,
) {
    let subjects = json!([{"kind": "ServiceAccount", "namespace": sa.0, "name": sa.1}]);
    match namespace {
        None => {
            create(
                &Api::<ClusterRole>::all(client.clone()),
                json!({"metadata": {"name": name}, "rules": rules}),
            )
            .await;
            create(
                &Api::<ClusterRoleBinding>::all(client.clone()),
                json!({"metadata": {"name": name}, "subjects": subjects,
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}}),
            )
            .await;
        }
        Some(ns) => {
            create(
                &Api::<Role>::namespaced(client.clone(), ns),
                json!({"metadata": {"name": name}, "rules": rules}),
            )
            .await;
            create(
                &Api::<RoleBinding>::namespaced(client.clone(), ns),
                json!({"metadata": {"name": name}, "subjects": subjects,
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}}),
            )
            .await;
        }
    }
}

/// Deletes the ClusterRole and ClusterRoleBinding `name` of [`grant`] (best effort: cleanup).
pub async fn delete_cluster_grant(client: &Client, name: &str) {
    let _ = Api::<ClusterRoleBinding>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
    let _ = Api::<ClusterRole>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

/// A kubeconfig authenticating with a token of ServiceAccount `namespace/name` (an hour), with
/// the admin kubeconfig's server and CA; written under `dir`.
pub async fn token_kubeconfig(client: &Client, namespace: &str, name: &str, dir: &Path) -> PathBuf {
    token_kubeconfig_with_token(client, namespace, name, dir)
        .await
        .0
}

/// [`token_kubeconfig`], and the token it holds.
pub async fn token_kubeconfig_with_token(
    client: &Client,
    namespace: &str,
    name: &str,
    dir: &Path,
) -> (PathBuf, String) {
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .unwrap();
    let token = Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let admin = Kubeconfig::read_from(cluster::kubeconfig_path()).unwrap();
    let cluster = admin.clusters[0].cluster.clone().unwrap();
    let ca = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) => data.clone(),
        (None, Some(file)) => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(std::fs::read(file).unwrap())
        }
        (None, None) => panic!("the admin kubeconfig has no CA"),
    };
    let path = dir.join(format!("{namespace}-{name}.kubeconfig"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {}\n    \
             certificate-authority-data: {ca}\nusers:\n- name: {name}\n  user:\n    token: {token}\n\
             contexts:\n- name: {name}\n  context: {{cluster: local, user: {name}}}\ncurrent-context: {name}\n",
            cluster.server.unwrap()
        ),
    )
    .unwrap();
    (path, token)
}

/// The API server's refusal of a write: its message (panics when it was accepted).
pub fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{status:?}");
            status.message
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// deploy/admission-policy.yaml under the name `name`, selecting only BundleDeployments
/// labelled for test `name`.
pub async fn install_policy(client: &Client, name: &str) {
    let docs = deploy_documents("admission-policy.yaml");
    let mut policy = docs[0].clone();
    let mut binding = docs[1].clone();
    assert_eq!(policy["kind"], "ValidatingAdmissionPolicy");
    assert_eq!(binding["kind"], "ValidatingAdmissionPolicyBinding");
    policy["metadata"]["name"] = json!(name);
    policy["spec"]["matchConstraints"]["objectSelector"] =
        json!({"matchLabels": {TEST_LABEL: name}});
    binding["metadata"]["name"] = json!(name);
    binding["spec"]["policyName"] = json!(name);
    create(
        &Api::<ValidatingAdmissionPolicy>::all(client.clone()),
        policy,
    )
    .await;
    create(
        &Api::<ValidatingAdmissionPolicyBinding>::all(client.clone()),
        binding,
    )
    .await;
}

/// Removes the policy of [`install_policy`].
pub async fn remove_policy(client: &Client, name: &str) {
    let _ = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
    let _ = Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

/// Waits until the API server refuses a dry-run create of `refused` through `api` (a policy or
/// grant just written is in force a moment later); the refusal's message.
pub async fn until_refused(api: &Api<BundleDeployment>, refused: &BundleDeployment) -> String {
    cluster::poll_until(
        "the admission policy in force",
        Duration::from_secs(30),
        || {
            let (api, refused) = (api.clone(), refused.clone());
            async move {
                let dry_run = PostParams {
                    dry_run: true,
                    ..Default::default()
                };
                match api.create(&dry_run, &refused).await {
                    Err(kube::Error::Api(s)) if s.code == 403 => Ok(s.message),
                    other => Err(format!("{other:?}")),
                }
            }
        },
    )
    .await
}

/// A BundleDeployment `name` labelled for test `label`, with `spec`.
pub fn bundle_deployment(name: &str, label: &str, spec: Value) -> BundleDeployment {
    serde_json::from_value(json!({
        "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
        "metadata": {"name": name, "labels": {TEST_LABEL: label}},
        "spec": spec,
    }))
    .unwrap()
}

/// Creates `bd` through `api` (as whoever `api` authenticates) and has it removed with the
/// test, as the shared helpers do.
pub async fn create_bd(
    api: &Api<BundleDeployment>,
    bd: &BundleDeployment,
) -> Result<BundleDeployment, kube::Error> {
    let created = api.create(&PostParams::default(), bd).await;
    if created.is_ok() {
        cluster::track_bundle_deployment(bd.metadata.name.as_deref().unwrap_or_default());
    }
    created
}
