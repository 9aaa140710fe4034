//! Whether a kind is namespaced, decided without a cluster where possible.
//!
//! Rule, in order:
//! 1. built-in Kubernetes kinds come from a static table (group, kind) below, both cluster-scoped and
//!    namespaced ones;
//! 2. kinds defined by a CustomResourceDefinition in the same bundle use that CRD's `spec.scope`;
//! 3. anything else is [`Scope::Unknown`]: the apply step resolves it through the cluster's discovery
//!    (and then gives namespaced objects without a namespace the install namespace).
//!
//! A kind of a built-in group that is not in the table is `Unknown` too, rather than guessed, so a
//! kind added by a newer Kubernetes is never put in the wrong scope.

use std::collections::HashMap;

use serde_json::Value;

use crate::object::Object;

/// Whether objects of a kind live in a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Scope {
    /// The kind is namespaced.
    Namespaced,
    /// The kind is cluster-scoped.
    Cluster,
    /// Not known without asking the cluster's discovery.
    Unknown,
}

/// Built-in cluster-scoped kinds, by (group, kind).
const CLUSTER_SCOPED: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("", "ComponentStatus"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
    ),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "MutatingAdmissionPolicyBinding",
    ),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("storage.k8s.io", "VolumeAttributesClass"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("networking.k8s.io", "IngressClass"),
    ("networking.k8s.io", "IPAddress"),
    ("networking.k8s.io", "ServiceCIDR"),
    ("node.k8s.io", "RuntimeClass"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("certificates.k8s.io", "ClusterTrustBundle"),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
    ("resource.k8s.io", "DeviceClass"),
    ("resource.k8s.io", "ResourceSlice"),
    ("internal.apiserver.k8s.io", "StorageVersion"),
    ("storagemigration.k8s.io", "StorageVersionMigration"),
    ("authentication.k8s.io", "TokenReview"),
    ("authentication.k8s.io", "SelfSubjectReview"),
    ("authorization.k8s.io", "SubjectAccessReview"),
    ("authorization.k8s.io", "SelfSubjectAccessReview"),
    ("authorization.k8s.io", "SelfSubjectRulesReview"),
];

/// Built-in namespaced kinds, by (group, kind).
const NAMESPACED: &[(&str, &str)] = &[
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "Service"),
    ("", "ServiceAccount"),
    ("", "Pod"),
    ("", "PodTemplate"),
    ("", "ReplicationController"),
    ("", "PersistentVolumeClaim"),
    ("", "Endpoints"),
    ("", "Event"),
    ("", "LimitRange"),
    ("", "ResourceQuota"),
    ("", "Binding"),
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("apps", "DaemonSet"),
    ("apps", "ReplicaSet"),
    ("apps", "ControllerRevision"),
    ("batch", "Job"),
    ("batch", "CronJob"),
    ("autoscaling", "HorizontalPodAutoscaler"),
    ("policy", "PodDisruptionBudget"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("networking.k8s.io", "Ingress"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("discovery.k8s.io", "EndpointSlice"),
    ("events.k8s.io", "Event"),
    ("coordination.k8s.io", "Lease"),
    ("coordination.k8s.io", "LeaseCandidate"),
    ("storage.k8s.io", "CSIStorageCapacity"),
    ("resource.k8s.io", "ResourceClaim"),
    ("resource.k8s.io", "ResourceClaimTemplate"),
    ("authorization.k8s.io", "LocalSubjectAccessReview"),
];

/// Scope of a built-in kind, `None` when the (group, kind) is not in the built-in table.
pub fn builtin_scope(group: &str, kind: &str) -> Option<Scope> {
    if CLUSTER_SCOPED.contains(&(group, kind)) {
        Some(Scope::Cluster)
    } else if NAMESPACED.contains(&(group, kind)) {
        Some(Scope::Namespaced)
    } else {
        None
    }
}

/// Scopes of the kinds defined by the CRDs in a bundle, by (group, kind).
#[derive(Debug, Clone, Default)]
pub struct ScopeTable {
    crd_scopes: HashMap<(String, String), Scope>,
}

impl ScopeTable {
    /// Collects `spec.group`, `spec.names.kind` and `spec.scope` from every CRD among the objects.
    pub fn from_objects(objects: &[Object]) -> Self {
        let mut crd_scopes = HashMap::new();
        for object in objects {
            if object.group() != "apiextensions.k8s.io"
                || object.kind() != "CustomResourceDefinition"
            {
                continue;
            }
            let Some(spec) = object.body().get("spec") else {
                continue;
            };
            let group = spec.get("group").and_then(Value::as_str);
            let kind = spec
                .get("names")
                .and_then(|names| names.get("kind"))
                .and_then(Value::as_str);
            let scope = match spec.get("scope").and_then(Value::as_str) {
                Some("Namespaced") => Scope::Namespaced,
                Some("Cluster") => Scope::Cluster,
                _ => continue,
            };
            if let (Some(group), Some(kind)) = (group, kind) {
                crd_scopes.insert((group.to_owned(), kind.to_owned()), scope);
            }
        }
        Self { crd_scopes }
    }

    /// The scope of a kind: built-in table, then the bundle's CRDs, else `Unknown`.
    pub fn scope(&self, group: &str, kind: &str) -> Scope {
        if let Some(scope) = builtin_scope(group, kind) {
            return scope;
        }
        self.crd_scopes
            .get(&(group.to_owned(), kind.to_owned()))
            .copied()
            .unwrap_or(Scope::Unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::parse_manifests;

    #[test]
    fn builtins_crds_and_unknown() {
        let objects = parse_manifests(
            "crd.yaml",
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec: {group: example.com, scope: Cluster, names: {kind: Widget, plural: widgets}}\n",
        )
        .unwrap();
        let table = ScopeTable::from_objects(&objects);
        assert_eq!(table.scope("", "ConfigMap"), Scope::Namespaced);
        assert_eq!(
            table.scope("rbac.authorization.k8s.io", "ClusterRole"),
            Scope::Cluster
        );
        assert_eq!(table.scope("example.com", "Widget"), Scope::Cluster);
        assert_eq!(table.scope("example.com", "Gadget"), Scope::Unknown);
        assert_eq!(table.scope("apps", "NewKind"), Scope::Unknown);
    }
}
