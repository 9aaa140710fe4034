//! A resource as the kustomize engine carries it through a build: the object, plus the build
//! annotations kustomize keeps on it (previous names, kinds and namespaces, generator
//! behaviour, hash suffix) until the output is written; and its identities.

use serde_json::{Map, Value};

use super::openapi::Schema;

/// The annotation domain of kustomize's build annotations, removed from the output.
pub const BUILD_ANNOTATION_DOMAIN: &str = "internal.config.kubernetes.io";
/// Names the resource had before prefixes, suffixes, hashes or patches renamed it, oldest first,
/// comma-separated.
pub const PREVIOUS_NAMES: &str = "internal.config.kubernetes.io/previousNames";
/// Kinds the resource had before, aligned with [`PREVIOUS_NAMES`].
pub const PREVIOUS_KINDS: &str = "internal.config.kubernetes.io/previousKinds";
/// Namespaces the resource had before (effective namespaces), aligned with [`PREVIOUS_NAMES`].
pub const PREVIOUS_NAMESPACES: &str = "internal.config.kubernetes.io/previousNamespaces";
/// Prefixes applied to the name, comma-separated.
pub const PREFIXES: &str = "internal.config.kubernetes.io/prefixes";
/// Suffixes applied to the name, comma-separated.
pub const SUFFIXES: &str = "internal.config.kubernetes.io/suffixes";
/// Resources that refer to this one (`ResId` strings), comma-separated.
pub const REF_BY: &str = "internal.config.kubernetes.io/refBy";
/// A generated resource's behaviour against an earlier one of the same id.
pub const GENERATOR_BEHAVIOR: &str = "internal.config.kubernetes.io/generatorBehavior";
/// `enabled` when the generated resource gets a content-hash suffix.
pub const NEEDS_HASH_SUFFIX: &str = "internal.config.kubernetes.io/needsHashSuffix";
/// On a patch: it may change its target's name.
pub const ALLOW_NAME_CHANGE: &str = "internal.config.kubernetes.io/allowNameChange";
/// On a patch: it may change its target's kind.
pub const ALLOW_KIND_CHANGE: &str = "internal.config.kubernetes.io/allowKindChange";
/// `buildMetadata: [originAnnotations]`: where the resource came from.
pub const ORIGIN_ANNOTATION: &str = "config.kubernetes.io/origin";
/// `buildMetadata: [transformerAnnotations]`: which transformers changed it.
pub const TRANSFORMER_ANNOTATION: &str = "alpha.config.kubernetes.io/transformations";
/// The namespace kustomize gives a namespaceable resource that names none, in identities.
pub const DEFAULT_NAMESPACE: &str = "default";
/// The effective namespace of a cluster-scoped resource, in identities.
pub const NOT_A_NAMESPACE: &str = "_non_namespaceable_";

/// Group, version and kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvk {
    /// API group, `""` for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
}

impl Gvk {
    /// Splits an `apiVersion` (`apps/v1`, `v1`) and joins the kind.
    pub fn from_api_version(api_version: &str, kind: &str) -> Self {
        let (group, version) = match api_version.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", api_version),
        };
        Gvk {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
        }
    }

    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether the schema knows the kind to be cluster-scoped (kustomize's
    /// `IsCertainlyClusterScoped`): an unknown kind counts as namespaceable.
    pub fn is_cluster_scoped(&self, schema: &Schema) -> bool {
        schema.is_namespaced(&self.group, &self.version, &self.kind) == Some(false)
    }
}

/// A resource's identity: kind and name, and the namespace as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResId {
    /// Group, version, kind.
    pub gvk: Gvk,
    /// metadata.name.
    pub name: String,
    /// metadata.namespace as written (`""` when none).
    pub namespace: String,
}

impl ResId {
    /// The namespace identities compare by: [`NOT_A_NAMESPACE`] for cluster-scoped kinds,
    /// [`DEFAULT_NAMESPACE`] for a namespaceable one that names none.
    pub fn effective_namespace(&self, schema: &Schema) -> String {
        if self.gvk.is_cluster_scoped(schema) {
            NOT_A_NAMESPACE.to_owned()
        } else if self.namespace.is_empty() || self.namespace == DEFAULT_NAMESPACE {
            DEFAULT_NAMESPACE.to_owned()
        } else {
            self.namespace.clone()
        }
    }
}

impl std::fmt::Display for ResId {
    /// kustomize's `ResId.String()` form: `Kind.version.group/name.namespace`, with
    /// `[noGrp]`/`[noVer]`/`[noNs]` for empty parts (used in messages and `refBy`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let or = |s: &str, empty: &'static str| {
            if s.is_empty() {
                empty.to_owned()
            } else {
                s.to_owned()
            }
        };
        write!(
            f,
            "{}.{}.{}/{}.{}",
            or(&self.gvk.kind, "[noKind]"),
            or(&self.gvk.version, "[noVer]"),
            or(&self.gvk.group, "[noGrp]"),
            self.name,
            or(&self.namespace, "[noNs]")
        )
    }
}

/// One resource of a build: its object body (build annotations included) and the names of the
/// vars that refer to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    /// The object, with kustomize's build annotations in `metadata.annotations` while the build
    /// runs.
    pub body: Map<String, Value>,
    /// Names of the `vars` whose `objref` is this resource.
    pub ref_var_names: Vec<String>,
}

impl Resource {
    /// Wraps an object body.
    pub fn new(body: Map<String, Value>) -> Self {
        Resource {
            body,
            ref_var_names: Vec::new(),
        }
    }

    fn str_at(&self, path: &[&str]) -> &str {
        let mut value = self.body.get(path[0]);
        for key in &path[1..] {
            value = value.and_then(|v| v.get(*key));
        }
        value.and_then(Value::as_str).unwrap_or("")
    }

    /// `apiVersion`.
    pub fn api_version(&self) -> &str {
        self.str_at(&["apiVersion"])
    }

    /// `kind`.
    pub fn kind(&self) -> &str {
        self.str_at(&["kind"])
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.str_at(&["metadata", "name"])
    }

    /// `metadata.namespace` (`""` when none).
    pub fn namespace(&self) -> &str {
        self.str_at(&["metadata", "namespace"])
    }

    /// Group, version and kind.
    pub fn gvk(&self) -> Gvk {
        Gvk::from_api_version(self.api_version(), self.kind())
    }

    /// The current identity.
    pub fn cur_id(&self) -> ResId {
        ResId {
            gvk: self.gvk(),
            name: self.name().to_owned(),
            namespace: self.namespace().to_owned(),
        }
    }

    /// Every earlier identity, oldest first (from the previous-id build annotations; the group
    /// and version are the current ones, as in kustomize).
    pub fn prev_ids(&self) -> Vec<ResId> {
        let Some(names) = self.annotation(PREVIOUS_NAMES) else {
            return Vec::new();
        };
        let namespaces: Vec<&str> = self
            .annotation(PREVIOUS_NAMESPACES)
            .unwrap_or("")
            .split(',')
            .collect();
        let kinds: Vec<&str> = self
            .annotation(PREVIOUS_KINDS)
            .unwrap_or("")
            .split(',')
            .collect();
        let gvk = self.gvk();
        names
            .split(',')
            .enumerate()
            .map(|(i, name)| ResId {
                gvk: Gvk {
                    kind: kinds.get(i).copied().unwrap_or("").to_owned(),
                    ..gvk.clone()
                },
                name: name.to_owned(),
                namespace: namespaces.get(i).copied().unwrap_or("").to_owned(),
            })
            .collect()
    }

    /// The original identity: the oldest previous one, or the current one.
    pub fn org_id(&self) -> ResId {
        self.prev_ids()
            .into_iter()
            .next()
            .unwrap_or_else(|| self.cur_id())
    }

    /// `metadata.labels` as strings (non-string values skipped).
    pub fn labels(&self) -> Vec<(&str, &str)> {
        self.string_map(&["metadata", "labels"])
    }

    /// `metadata.annotations` as strings (non-string values skipped).
    pub fn annotations(&self) -> Vec<(&str, &str)> {
        self.string_map(&["metadata", "annotations"])
    }

    fn string_map(&self, path: &[&str]) -> Vec<(&str, &str)> {
        let mut value = self.body.get(path[0]);
        for key in &path[1..] {
            value = value.and_then(|v| v.get(*key));
        }
        value
            .and_then(Value::as_object)
            .map(|map| {
                map.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.as_str(), v)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// One annotation's value.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.body
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
    }

    /// Sets one annotation, creating `metadata.annotations` when needed.
    pub fn set_annotation(&mut self, key: &str, value: &str) {
        let metadata = self
            .body
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if !metadata.is_object() {
            *metadata = Value::Object(Map::new());
        }
        if let Some(metadata) = metadata.as_object_mut() {
            let annotations = metadata
                .entry("annotations")
                .or_insert_with(|| Value::Object(Map::new()));
            if !annotations.is_object() {
                *annotations = Value::Object(Map::new());
            }
            if let Some(annotations) = annotations.as_object_mut() {
                annotations.insert(key.to_owned(), Value::String(value.to_owned()));
            }
        }
    }

    /// Removes one annotation, and `metadata.annotations` when it becomes empty.
    pub fn remove_annotation(&mut self, key: &str) {
        if let Some(metadata) = self.body.get_mut("metadata").and_then(Value::as_object_mut) {
            if let Some(annotations) = metadata
                .get_mut("annotations")
                .and_then(Value::as_object_mut)
            {
                annotations.remove(key);
                if annotations.is_empty() {
                    metadata.remove("annotations");
                }
            }
        }
    }
}
