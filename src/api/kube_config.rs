//! `spec.kubeConfig`: the cluster a BundleDeployment's objects go to, when it is not the one the
//! agent runs in (Flux's `kubeConfig.secretRef`). The bundle's objects, their health, drift,
//! pruning, hooks, lookups and takeover are on that cluster; its revisions, change log and status
//! stay in the agent's cluster.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::DNS_LABEL_PATTERN;

/// Keys tried, in order, when `secretRef.key` is not set: Flux's and Cluster API's `value`, then
/// `value.yaml`.
pub const DEFAULT_KUBECONFIG_KEYS: [&str; 2] = ["value", "value.yaml"];

/// What the display of a BundleDeployment calls the cluster the agent runs in.
pub const LOCAL_CLUSTER: &str = "in-cluster";

/// A kubeconfig held in a Secret, and the context to use in it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigReference {
    /// The Secret holding the kubeconfig. It is read under the Secret rules of the security
    /// model (the BundleDeployment's ServiceAccount may `get` it, or, in the agent's namespace,
    /// it is labelled `access.pallet.dev/<name>: "true"`). Its kubeconfig may hold inline
    /// credentials only (a token, a client certificate and key, a username and password): an
    /// `exec` plugin, an `auth-provider` or a file path is refused.
    pub secret_ref: KubeConfigSecretReference,

    /// The kubeconfig context to use. Default: the kubeconfig's `current-context`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub context: Option<String>,
}

/// Where the kubeconfig is: a Secret and one of its keys.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigSecretReference {
    /// Name of the Secret. It names the cluster too: `pallet get` groups BundleDeployments by
    /// it, and a BundleDeploymentSet selects such Secrets by their labels.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// Namespace of the Secret. Default: the agent's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub namespace: Option<String>,

    /// The key holding the kubeconfig. Default: `value`, else `value.yaml` (the keys Flux reads,
    /// and where Cluster API writes a cluster's kubeconfig).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub key: Option<String>,
}

/// The cluster a BundleDeployment's objects are on, for display and grouping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TargetCluster<'a> {
    /// The cluster the agent runs in.
    Local,
    /// The cluster of the kubeconfig in Secret `namespace/name` (namespace None: the agent's).
    Remote {
        /// The Secret's namespace, when the reference names one.
        namespace: Option<&'a str>,
        /// The Secret's name: the cluster's name.
        name: &'a str,
    },
}

impl TargetCluster<'_> {
    /// The cluster's name as `pallet get` shows it: the Secret's name, or [`LOCAL_CLUSTER`].
    pub fn name(&self) -> &str {
        match self {
            TargetCluster::Local => LOCAL_CLUSTER,
            TargetCluster::Remote { name, .. } => name,
        }
    }

    /// Whether this is the agent's own cluster.
    pub fn is_local(&self) -> bool {
        matches!(self, TargetCluster::Local)
    }
}

impl std::fmt::Display for TargetCluster<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TargetCluster::Local => f.write_str(LOCAL_CLUSTER),
            TargetCluster::Remote {
                namespace: Some(namespace),
                name,
            } => write!(f, "{namespace}/{name}"),
            TargetCluster::Remote {
                namespace: None,
                name,
            } => f.write_str(name),
        }
    }
}

impl super::BundleDeploymentSpec {
    /// The cluster this BundleDeployment's objects are on.
    pub fn target_cluster(&self) -> TargetCluster<'_> {
        match &self.kube_config {
            None => TargetCluster::Local,
            Some(reference) => TargetCluster::Remote {
                namespace: reference.secret_ref.namespace.as_deref(),
                name: &reference.secret_ref.name,
            },
        }
    }
}

/// The cluster `bd`'s objects are on (for views that group BundleDeployments by cluster).
pub fn cluster_of(bd: &super::BundleDeployment) -> TargetCluster<'_> {
    bd.spec.target_cluster()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kube_config: serde_json::Value) -> super::super::BundleDeploymentSpec {
        let mut spec = serde_json::json!({"format": "plain", "sources": []});
        if !kube_config.is_null() {
            spec["kubeConfig"] = kube_config;
        }
        serde_json::from_value(spec).unwrap()
    }

    #[test]
    fn the_cluster_is_the_secret_or_the_agents_own() {
        let local = spec(serde_json::Value::Null);
        assert_eq!(local.target_cluster(), TargetCluster::Local);
        assert_eq!(local.target_cluster().to_string(), "in-cluster");
        let remote = spec(serde_json::json!({"secretRef": {"name": "prod-eu"}}));
        assert_eq!(remote.target_cluster().name(), "prod-eu");
        assert_eq!(remote.target_cluster().to_string(), "prod-eu");
        let elsewhere = spec(serde_json::json!({
            "secretRef": {"name": "prod-eu", "namespace": "clusters", "key": "kubeconfig"},
            "context": "admin@prod-eu",
        }));
        assert_eq!(elsewhere.target_cluster().to_string(), "clusters/prod-eu");
        assert!(!elsewhere.target_cluster().is_local());
        // Round trip of the field names (Flux's shape).
        let value = serde_json::to_value(&elsewhere).unwrap();
        assert_eq!(value["kubeConfig"]["secretRef"]["key"], "kubeconfig");
        assert_eq!(value["kubeConfig"]["context"], "admin@prod-eu");
    }
}
