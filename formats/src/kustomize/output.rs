//! The end of a build: kustomize's build annotations removed, `buildMetadata` applied, and the
//! resources turned into the crate's objects.

use serde_json::Value;

use super::error::KustomizeError;
use super::resmap::{metadata_mut, ResMap};
use super::resource::{Resource, ORIGIN_ANNOTATION, TRANSFORMER_ANNOTATION};
use crate::Object;

/// The label `buildMetadata: [managedByLabel]` adds, with kustomize's release.
const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Its value.
const MANAGED_BY_VALUE: &str = "kustomize-v5.5.0";

/// Annotations kustomize keeps only while building.
const BUILD_ANNOTATIONS: [&str; 18] = [
    "internal.config.kubernetes.io/previousKinds",
    "internal.config.kubernetes.io/previousNames",
    "internal.config.kubernetes.io/prefixes",
    "internal.config.kubernetes.io/suffixes",
    "internal.config.kubernetes.io/previousNamespaces",
    "internal.config.kubernetes.io/allowNameChange",
    "internal.config.kubernetes.io/allowKindChange",
    "internal.config.kubernetes.io/refBy",
    "internal.config.kubernetes.io/generatorBehavior",
    "internal.config.kubernetes.io/needsHashSuffix",
    "internal.config.kubernetes.io/path",
    "internal.config.kubernetes.io/index",
    "internal.config.kubernetes.io/seqindent",
    "internal.config.kubernetes.io/id",
    "internal.config.kubernetes.io/annotations-migration-resource-id",
    "config.kubernetes.io/path",
    "config.kubernetes.io/index",
    "config.k8s.io/id",
];

/// Cleans the resources up and makes objects of them, in order.
pub(crate) fn finish(
    res: ResMap,
    build_metadata: &[String],
) -> Result<Vec<Object>, KustomizeError> {
    let has = |option: &str| build_metadata.iter().any(|o| o == option);
    let keep_origin = has("originAnnotations");
    let keep_transformations = has("transformerAnnotations");
    let managed_by = has("managedByLabel");
    let mut objects = Vec::with_capacity(res.len());
    for (mut resource, origin) in res.resources.into_iter().zip(res.origins) {
        if managed_by {
            let metadata = metadata_mut(&mut resource);
            let labels = metadata
                .entry("labels")
                .or_insert_with(|| Value::Object(Default::default()));
            if !labels.is_object() {
                *labels = Value::Object(Default::default());
            }
            if let Value::Object(labels) = labels {
                labels.insert(
                    MANAGED_BY_LABEL.into(),
                    Value::String(MANAGED_BY_VALUE.into()),
                );
            }
        }
        remove_annotations(&mut resource, &BUILD_ANNOTATIONS, false);
        let mut dropped: Vec<&str> = Vec::new();
        if !keep_origin {
            dropped.push(ORIGIN_ANNOTATION);
        }
        if !keep_transformations {
            dropped.push(TRANSFORMER_ANNOTATION);
        }
        if !dropped.is_empty() {
            remove_annotations(&mut resource, &dropped, true);
        }
        let object = Object::new(Value::Object(resource.body), origin)
            .map_err(|e| KustomizeError::invalid(e.to_string()))?;
        objects.push(object);
    }
    Ok(objects)
}

/// Removes annotations; an annotations map left empty is removed (`always`: even one that was
/// empty before, as kustomize's setter does).
fn remove_annotations(resource: &mut Resource, keys: &[&str], always: bool) {
    let Some(Value::Object(metadata)) = resource.body.get_mut("metadata") else {
        return;
    };
    let Some(annotations) = metadata.get_mut("annotations") else {
        return;
    };
    match annotations {
        Value::Object(map) => {
            if map.is_empty() && !always {
                return;
            }
            for key in keys {
                map.remove(*key);
            }
            if always {
                // kustomize writes the map back from its string form.
                for value in map.values_mut() {
                    if !value.is_string() {
                        *value = Value::String(super::transformers::scalar_text(value));
                    }
                }
            }
            if map.is_empty() {
                metadata.remove("annotations");
            }
        }
        Value::Null if always => {
            metadata.remove("annotations");
        }
        _ => {}
    }
}
