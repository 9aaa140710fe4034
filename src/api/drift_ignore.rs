//! `spec.driftIgnore`: fields of the bundle's objects that pallet leaves to other writers (an
//! autoscaler's `replicas`, a mesh's injected sidecar, cert-manager's `caBundle`). An ignored
//! path is out of the drift check, and out of what pallet applies to an object that exists, so
//! another field manager owns it and its value stays. Flux's `driftIgnoreRules` shape: JSON
//! pointers and an optional target.
//!
//! Per-object policies are annotations on the bundle's objects, read by the agent
//! ([`crate::apply::policy`]): `pallet.dev/apply`, `pallet.dev/prune`, `pallet.dev/drift`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// One rule: paths to leave alone on the objects its target selects (every object without one).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DriftIgnoreRule {
    /// JSON pointers (RFC 6901: `/spec/replicas`, `/metadata/annotations/example.com~1hash`). A
    /// segment that meets a list is an index (`/spec/template/spec/containers/0/image`) or a
    /// merge key in brackets (`/spec/template/spec/containers/[name=app]/image`).
    #[schemars(
        length(min = 1, max = 32),
        inner(length(min = 2, max = 1024), regex(pattern = r"^/"))
    )]
    pub paths: Vec<String>,

    /// Which objects the rule is for; every field given must match. Default: every object of
    /// the bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<DriftIgnoreTarget>,
}

/// The objects a [`DriftIgnoreRule`] is for. Names are matched exactly.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftIgnoreTarget {
    /// API group (`apps`; `""` is the core group). Default: any group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub group: Option<String>,
    /// API version (`v1`). Default: any version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub version: Option<String>,
    /// Kind (`Deployment`). Default: any kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub kind: Option<String>,
    /// Object name. Default: any name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub name: Option<String>,
    /// Namespace (as applied: an object that names none is in `installNamespace`). Default: any
    /// namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
    /// Only objects whose labels (in the bundle) match this selector. Default: any labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// A `spec.driftIgnore` rule whose target matches no object of the active revision: reported
/// in `status.driftIgnore`, so a typo in a kind or name does not go unnoticed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftIgnoreReport {
    /// The rule's index in `spec.driftIgnore`.
    pub rule: i64,
    /// What is wrong with it.
    pub message: String,
}
