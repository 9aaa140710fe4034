//! The transformer configuration: which fields each built-in transformer touches. kustomize's
//! built-in field specs (`data/builtin_field_specs.yaml`), merged with a kustomization's
//! `configurations` files and the field specs its `crds` declare.

use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::Value;

use super::error::KustomizeError;
use super::fieldspec::{merge_all, merge_one, FieldSpec};
use super::resource::Gvk;

/// kustomize v5.5.0's default field specs (from sigs.k8s.io/kustomize/api
/// internal/konfig/builtinpluginconsts, Apache-2.0).
const BUILTIN_FIELD_SPECS: &str = include_str!("data/builtin_field_specs.yaml");

/// Field specs per transformer.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct TransformerConfig {
    pub name_prefix: Vec<FieldSpec>,
    pub name_suffix: Vec<FieldSpec>,
    pub namespace: Vec<FieldSpec>,
    pub common_labels: Vec<FieldSpec>,
    pub labels: Vec<FieldSpec>,
    pub template_labels: Vec<FieldSpec>,
    pub common_annotations: Vec<FieldSpec>,
    pub name_reference: Vec<NameBackReferences>,
    pub var_reference: Vec<FieldSpec>,
    pub images: Vec<FieldSpec>,
    pub replicas: Vec<FieldSpec>,
}

/// The fields (in referrers) that hold the name of an object of one kind.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct NameBackReferences {
    pub group: String,
    pub version: String,
    pub kind: String,
    #[serde(rename = "fieldSpecs")]
    pub referrers: Vec<FieldSpec>,
}

impl NameBackReferences {
    /// The referred kind.
    pub(crate) fn gvk(&self) -> Gvk {
        Gvk {
            group: self.group.clone(),
            version: self.version.clone(),
            kind: self.kind.clone(),
        }
    }
}

/// kustomize's order of kinds for sorting field specs and legacy output.
pub(crate) const ORDER_FIRST: [&str; 22] = [
    "Namespace",
    "ResourceQuota",
    "StorageClass",
    "CustomResourceDefinition",
    "ServiceAccount",
    "PodSecurityPolicy",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "ConfigMap",
    "Secret",
    "Endpoints",
    "Service",
    "LimitRange",
    "PriorityClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "PodDisruptionBudget",
];
/// Kinds that go last.
pub(crate) const ORDER_LAST: [&str; 2] = [
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];

/// The rank of a kind in an order (negative first, 0 for unlisted, positive last).
pub(crate) fn kind_rank(kind: &str, first: &[impl AsRef<str>], last: &[impl AsRef<str>]) -> i64 {
    // The last occurrence wins, as with a map built in order.
    let mut rank = 0i64;
    for (i, k) in first.iter().enumerate() {
        if k.as_ref() == kind {
            rank = i as i64 - first.len() as i64;
        }
    }
    for (i, k) in last.iter().enumerate() {
        if k.as_ref() == kind {
            rank = 1 + i as i64;
        }
    }
    rank
}

/// `group_version_kind` with `~G`, `~V`, `~K` for empty parts.
pub(crate) fn gvk_sort_string(gvk: &Gvk) -> String {
    let or = |s: &str, empty: &'static str| {
        if s.is_empty() {
            empty.to_owned()
        } else {
            s.to_owned()
        }
    };
    format!(
        "{}_{}_{}",
        or(&gvk.group, "~G"),
        or(&gvk.version, "~V"),
        or(&gvk.kind, "~K")
    )
}

fn gvk_less(a: &Gvk, b: &Gvk) -> std::cmp::Ordering {
    let ra = kind_rank(&a.kind, &ORDER_FIRST, &ORDER_LAST);
    let rb = kind_rank(&b.kind, &ORDER_FIRST, &ORDER_LAST);
    ra.cmp(&rb)
        .then_with(|| gvk_sort_string(a).cmp(&gvk_sort_string(b)))
}

fn sort_specs(specs: &mut [FieldSpec]) {
    specs.sort_by(|a, b| gvk_less(&a.gvk(), &b.gvk()));
}

impl TransformerConfig {
    /// kustomize's built-in configuration.
    pub(crate) fn builtin() -> &'static TransformerConfig {
        static BUILTIN: OnceLock<TransformerConfig> = OnceLock::new();
        BUILTIN.get_or_init(|| {
            // The embedded data is fixed and tested; an unreadable copy would be a build defect.
            let mut config = TransformerConfig::from_yaml(BUILTIN_FIELD_SPECS).unwrap_or_default();
            config.sort();
            config
        })
    }

    /// Reads a `configurations` file.
    pub(crate) fn from_yaml(text: &str) -> Result<Self, KustomizeError> {
        let value: Value = crate::object::from_yaml_str(text)
            .map_err(|e| KustomizeError::invalid(format!("invalid configuration: {e}")))?;
        if value.is_null() {
            return Ok(Self::default());
        }
        let mut config: TransformerConfig = serde_json::from_value(value)
            .map_err(|e| KustomizeError::invalid(format!("invalid configuration: {e}")))?;
        config.sort();
        Ok(config)
    }

    fn sort(&mut self) {
        for specs in self.spec_lists_mut() {
            sort_specs(specs);
        }
        self.name_reference
            .sort_by(|a, b| gvk_less(&a.gvk(), &b.gvk()));
    }

    fn spec_lists_mut(&mut self) -> [&mut Vec<FieldSpec>; 10] {
        [
            &mut self.name_prefix,
            &mut self.name_suffix,
            &mut self.namespace,
            &mut self.common_labels,
            &mut self.labels,
            &mut self.template_labels,
            &mut self.common_annotations,
            &mut self.var_reference,
            &mut self.images,
            &mut self.replicas,
        ]
    }

    fn spec_lists(&self) -> [&Vec<FieldSpec>; 10] {
        [
            &self.name_prefix,
            &self.name_suffix,
            &self.namespace,
            &self.common_labels,
            &self.labels,
            &self.template_labels,
            &self.common_annotations,
            &self.var_reference,
            &self.images,
            &self.replicas,
        ]
    }

    /// Merges `other` into this configuration, as kustomize merges configurations.
    pub(crate) fn merge(&mut self, other: &TransformerConfig) -> Result<(), KustomizeError> {
        let incoming = other.spec_lists();
        for (mine, theirs) in self.spec_lists_mut().into_iter().zip(incoming) {
            merge_all(mine, theirs)?;
        }
        for back_refs in &other.name_reference {
            self.add_name_reference(back_refs.clone())?;
        }
        self.sort();
        Ok(())
    }

    fn add_name_reference(&mut self, incoming: NameBackReferences) -> Result<(), KustomizeError> {
        let gvk = incoming.gvk();
        let mut found = false;
        for existing in &mut self.name_reference {
            if existing.gvk() == gvk {
                merge_all(&mut existing.referrers, &incoming.referrers)?;
                found = true;
            }
        }
        if !found {
            self.name_reference.push(incoming);
        }
        Ok(())
    }

    /// The field specs a `crds` file declares through OpenAPI extensions
    /// (`x-kubernetes-annotation`, `x-kubernetes-label-selector`, `x-kubernetes-identity`,
    /// `x-kubernetes-object-ref-*`).
    pub(crate) fn from_crd_definitions(text: &str) -> Result<Self, KustomizeError> {
        let definitions: Value = crate::object::from_yaml_str(text).map_err(|e| {
            KustomizeError::invalid(format!("unable to parse open API definition: {e}"))
        })?;
        let Some(definitions) = definitions.as_object() else {
            return Ok(Self::default());
        };
        let mut result = TransformerConfig::default();
        for (name, definition) in definitions {
            let properties = schema_properties(definition);
            let is_object_type = properties.is_some_and(|p| {
                ["kind", "apiVersion", "metadata"]
                    .iter()
                    .all(|k| p.contains_key(*k))
            });
            if !is_object_type {
                continue;
            }
            let kind = name.rsplit('.').next().unwrap_or(name).to_owned();
            let gvk = Gvk {
                kind,
                ..Gvk::default()
            };
            let mut config = TransformerConfig::default();
            let mut visited = Vec::new();
            load_crd_type(
                &mut config,
                &gvk,
                definitions,
                name,
                &mut Vec::new(),
                &mut visited,
            )?;
            result.merge(&config)?;
        }
        Ok(result)
    }
}

fn schema_properties(definition: &Value) -> Option<&serde_json::Map<String, Value>> {
    let schema = definition
        .get("Schema")
        .or_else(|| definition.get("schema"))?;
    schema.get("properties")?.as_object()
}

fn load_crd_type(
    config: &mut TransformerConfig,
    gvk: &Gvk,
    definitions: &serde_json::Map<String, Value>,
    type_name: &str,
    path: &mut Vec<String>,
    visited: &mut Vec<String>,
) -> Result<(), KustomizeError> {
    let Some(properties) = definitions.get(type_name).and_then(schema_properties) else {
        return Ok(());
    };
    // A type that refers to itself would never end; kustomize's own walk does not stop there.
    if visited.iter().any(|v| v == type_name) {
        return Ok(());
    }
    visited.push(type_name.to_owned());
    for (property_name, property) in properties {
        path.push(property_name.clone());
        let spec = || FieldSpec {
            group: gvk.group.clone(),
            version: gvk.version.clone(),
            kind: gvk.kind.clone(),
            path: path.join("/"),
            create: false,
        };
        let extension = |key: &str| property.get(key).and_then(Value::as_str);
        if extension("x-kubernetes-annotation").is_some() {
            merge_one(&mut config.common_annotations, spec())?;
        }
        if extension("x-kubernetes-label-selector").is_some() {
            merge_one(&mut config.common_labels, spec())?;
        }
        if extension("x-kubernetes-identity").is_some() {
            merge_one(&mut config.name_prefix, spec())?;
        }
        if let (Some(version), Some(kind)) = (
            extension("x-kubernetes-object-ref-api-version"),
            extension("x-kubernetes-object-ref-kind"),
        ) {
            let name_key = extension("x-kubernetes-object-ref-name-key").unwrap_or("name");
            let mut referrer = spec();
            referrer.path = format!("{}/{name_key}", referrer.path);
            config.add_name_reference(NameBackReferences {
                group: String::new(),
                version: version.to_owned(),
                kind: kind.to_owned(),
                referrers: vec![referrer],
            })?;
        }
        if let Some(reference) = property.get("$ref").and_then(Value::as_str) {
            load_crd_type(config, gvk, definitions, reference, path, visited)?;
        }
        path.pop();
    }
    visited.pop();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_configuration_reads_whole() {
        let config = TransformerConfig::builtin();
        assert!(config
            .common_labels
            .iter()
            .any(|s| s.path == "spec/selector/matchLabels"));
        assert!(config.name_reference.iter().any(|r| r.kind == "ConfigMap"));
        assert!(config.var_reference.len() > 50);
        assert_eq!(config.name_prefix.len(), 1);
        // Sorted by kind order: Namespace-specific specs before unlisted kinds.
        assert_eq!(config.namespace[0].kind, "Namespace");
    }

    #[test]
    fn configurations_merge_into_the_builtin_ones() {
        let mut config = TransformerConfig::builtin().clone();
        let extra = TransformerConfig::from_yaml(
            "nameReference:\n- kind: Secret\n  fieldSpecs:\n  - path: spec/secretName\n    kind: MyKind\n\
             images:\n- path: spec/image\n  kind: MyKind\n",
        )
        .unwrap();
        config.merge(&extra).unwrap();
        let secret = config
            .name_reference
            .iter()
            .find(|r| r.kind == "Secret" && r.version.is_empty())
            .unwrap();
        assert!(secret.referrers.iter().any(|s| s.path == "spec/secretName"));
        assert!(config.images.iter().any(|s| s.kind == "MyKind"));
        assert!(TransformerConfig::from_yaml("unknown: []\n").is_err());
    }

    #[test]
    fn crd_definitions_declare_field_specs() {
        let text = r##"{"io.example.Foo": {"Schema": {"properties": {
            "kind": {}, "apiVersion": {}, "metadata": {},
            "spec": {"$ref": "io.example.FooSpec"}}}},
          "io.example.FooSpec": {"Schema": {"properties": {
            "cm": {"x-kubernetes-object-ref-api-version": "v1", "x-kubernetes-object-ref-kind": "ConfigMap"},
            "sel": {"x-kubernetes-label-selector": ""}}}}}"##;
        let config = TransformerConfig::from_crd_definitions(text).unwrap();
        assert_eq!(config.common_labels[0].path, "spec/sel");
        assert_eq!(config.common_labels[0].kind, "Foo");
        assert_eq!(config.name_reference[0].referrers[0].path, "spec/cm/name");
    }
}
