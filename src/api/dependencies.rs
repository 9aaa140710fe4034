//! `spec.dependsOn`: what must be ready before a BundleDeployment applies anything. Flux's shape
//! (`dependsOn` of a Kustomization or HelmRelease, with its CEL `readyExpr`): another
//! BundleDeployment by name, or any object (apiVersion, kind, namespace, name) with a CEL
//! expression over it.
//!
//! The schema refuses what it can: an object of another kind without `readyExpr`, a namespace
//! on a BundleDeployment (they are cluster-scoped), apiVersion without kind; a BundleDeployment
//! naming itself is refused by a rule on the whole object (the spec cannot see the name).
//! Whether `readyExpr` compiles is checked by the agent, as for `spec.healthChecks`.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// API version of a BundleDeployment, the default of a dependency's `apiVersion`.
pub const BUNDLE_DEPLOYMENT_API_VERSION: &str = "pallet.dev/v1alpha1";
/// Kind of a BundleDeployment, the default of a dependency's `kind`.
pub const BUNDLE_DEPLOYMENT_KIND: &str = "BundleDeployment";

/// Something that must be ready before this BundleDeployment applies: another BundleDeployment
/// (Ready=True at its current generation), or any object for which `readyExpr` is true.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
#[x_kube(validation = Rule::new("has(self.apiVersion) == has(self.kind)").message("apiVersion and kind go together (both unset: a BundleDeployment)"))]
#[x_kube(validation = Rule::new("!has(self.kind) || (self.apiVersion == 'pallet.dev/v1alpha1' && self.kind == 'BundleDeployment') || has(self.readyExpr)").message("a dependency on an object other than a BundleDeployment needs readyExpr: pallet cannot know when an arbitrary object is ready"))]
#[x_kube(validation = Rule::new("(has(self.kind) && !(self.apiVersion == 'pallet.dev/v1alpha1' && self.kind == 'BundleDeployment')) || !has(self.__namespace__)").message("BundleDeployments are cluster-scoped: a dependency on one takes no namespace"))]
#[serde(rename_all = "camelCase")]
pub struct DependencyReference {
    /// API version of the object (`group/version`, or `v1`). Default: `pallet.dev/v1alpha1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub api_version: Option<String>,

    /// Kind of the object. Default: `BundleDeployment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub kind: Option<String>,

    /// Namespace of a namespaced object (not for BundleDeployments, which are cluster-scoped).
    /// Default: the BundleDeployment's `installNamespace`, else `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub namespace: Option<String>,

    /// Name of the object.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// CEL: true when the dependency is ready. `dep` is the object, `self` this
    /// BundleDeployment. Required for objects other than BundleDeployments; on a
    /// BundleDeployment it replaces the built-in check (Ready=True at its current generation).
    /// Evaluated under a budget (cost, memory, time; see the security guide): one over it is
    /// `CelBudgetExceeded`, and a result that is not a bool is named by its type, never shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub ready_expr: Option<String>,
}

impl DependencyReference {
    /// The object's API version, with the default.
    pub fn api_version(&self) -> &str {
        self.api_version
            .as_deref()
            .unwrap_or(BUNDLE_DEPLOYMENT_API_VERSION)
    }

    /// The object's kind, with the default.
    pub fn kind(&self) -> &str {
        self.kind.as_deref().unwrap_or(BUNDLE_DEPLOYMENT_KIND)
    }

    /// True when the dependency is another BundleDeployment.
    pub fn is_bundle_deployment(&self) -> bool {
        self.api_version() == BUNDLE_DEPLOYMENT_API_VERSION && self.kind() == BUNDLE_DEPLOYMENT_KIND
    }

    /// How the dependency is named in messages: `BundleDeployment crds`, `v1 ConfigMap ns/flags`.
    pub fn describe(&self) -> String {
        let name = match &self.namespace {
            Some(namespace) => format!("{namespace}/{}", self.name),
            None => self.name.clone(),
        };
        if self.is_bundle_deployment() {
            format!("BundleDeployment {name}")
        } else {
            format!("{} {} {name}", self.api_version(), self.kind())
        }
    }
}
