//! `spec.processors`: transformations run in order on the format's output before anything is
//! applied, for every format (helm hooks included): an inline kustomization, `${var}`
//! substitution, or a KRM function. The output of the last one is the revision's content, so
//! processors are part of the revision's digest.

use std::collections::BTreeMap;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::{SecretReference, ValuesSourceKind, DNS_LABEL_PATTERN, DURATION_PATTERN};

/// One processor: exactly one of `kustomize`, `substitute` or `function`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("[has(self.kustomize), has(self.substitute), has(self.function)].filter(x, x).size() == 1").message("a processor is exactly one of kustomize, substitute or function"))]
#[serde(rename_all = "camelCase")]
pub struct ProcessorSpec {
    /// The processor's name in conditions, `pallet render` and `pallet trace`. Default:
    /// `<index>-<kind>` (`0-kustomize`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub name: Option<String>,

    /// An inline kustomization over the objects rendered so far: `patches`, `images`,
    /// `namespace`, `labels`, `commonLabels`, `commonAnnotations`, `replicas`, `namePrefix`,
    /// `nameSuffix`, `replacements`, and `components` read from the bundle tree.
    /// One of kustomize, substitute or function is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::free_form_object")]
    pub kustomize: Option<serde_json::Value>,

    /// `${var}` substitution in the objects' string values, as Flux's `postBuild.substitute`.
    /// One of kustomize, substitute or function is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub substitute: Option<SubstituteProcessor>,

    /// A KRM function (Functions Specification, `config.kubernetes.io/v1` ResourceList).
    /// One of kustomize, substitute or function is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionProcessor>,
}

/// Settings of a `substitute` processor.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubstituteProcessor {
    /// Variables and their values; they win over `varsFrom`.
    /// Default: none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, String>,
    /// ConfigMaps and Secrets whose keys are variables, read in order (a later one wins). An
    /// edit of one makes a new revision.
    /// Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub vars_from: Vec<VarsReference>,
    /// Refuse a reference to an undefined variable that has no default. Default: false (an
    /// undefined variable is replaced by nothing, as Flux does).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict: bool,
}

/// A ConfigMap or Secret holding substitution variables.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VarsReference {
    /// ConfigMap or Secret.
    pub kind: ValuesSourceKind,
    /// Its name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Its namespace. Default: the agent's namespace (the secret-namespace rule applies to both
    /// kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub namespace: Option<String>,
    /// A missing object is skipped instead of an error.
    /// Default: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

/// Settings of a `function` processor: where the function runs, its configuration, and limits.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("has(self.url) != has(self.exec)").message("a function is reached either over HTTP (url) or as an executable (exec), exactly one of them"))]
#[serde(rename_all = "camelCase")]
pub struct FunctionProcessor {
    /// URL the agent POSTs the ResourceList to (`http://` or `https://`), e.g. a function served
    /// in the cluster; the answer is a ResourceList (JSON or YAML). Only hosts the agent's
    /// operator lists with `--allow-function-host` (none by default).
    /// One of url or exec is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://"))]
    pub url: Option<String>,
    /// Absolute path of an executable that reads the ResourceList on stdin and writes one on
    /// stdout; only paths the agent's operator allows with `--allow-function-exec` run.
    /// One of url or exec is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024), regex(pattern = r"^/"))]
    pub exec: Option<String>,
    /// The ResourceList's `functionConfig`: a Kubernetes object (with `kind`) as it is, or a map
    /// of settings, sent as a ConfigMap's `data`.
    /// Default: none (no functionConfig).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::free_form_object")]
    pub config: Option<serde_json::Value>,
    /// How long one call may take, as a Go duration; at most the agent's
    /// `--function-timeout-max` (5m unless its operator says otherwise), a longer one is refused
    /// (`InvalidProcessor`). Default: 30s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub timeout: Option<String>,
    /// A Secret whose `token` is sent as a bearer token (HTTP only), and whose `ca.crt` holds
    /// extra CA certificates. The secret-namespace rule applies.
    /// Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretReference>,
}

/// How long a function call may take when `timeout` is not set.
pub const DEFAULT_FUNCTION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl FunctionProcessor {
    /// The call's deadline.
    pub fn timeout(&self) -> std::time::Duration {
        self.timeout
            .as_deref()
            .and_then(|t| crate::duration::parse(t).ok())
            .unwrap_or(DEFAULT_FUNCTION_TIMEOUT)
    }
}

impl ProcessorSpec {
    /// The processor's kind as written (`kustomize`, `substitute`, `function`).
    pub fn kind(&self) -> &'static str {
        if self.kustomize.is_some() {
            "kustomize"
        } else if self.substitute.is_some() {
            "substitute"
        } else {
            "function"
        }
    }

    /// The name it is known by: `name`, or `<index>-<kind>`.
    pub fn display_name(&self, index: usize) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("{index}-{}", self.kind()))
    }
}
