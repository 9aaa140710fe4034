//! The content-hash name suffix of generated ConfigMaps and Secrets, byte for byte as
//! kustomize computes it: SHA-256 of a Go-encoded JSON summary of the object, the first ten hex
//! digits with `0 1 3 a e` spelled `g h k m t`.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::error::KustomizeError;
use super::openapi::Schema;
use super::resmap::{set_metadata_string, ResMap};
use super::resource::{Resource, NEEDS_HASH_SUFFIX};
use crate::gojson;

/// Appends `-<hash>` to the name of every resource marked for it, remembering the old name.
pub(crate) fn add_hash_suffixes(
    resources: &mut ResMap,
    schema: &Schema,
) -> Result<(), KustomizeError> {
    let _ = schema;
    for resource in &mut resources.resources {
        if resource.annotation(NEEDS_HASH_SUFFIX) != Some("enabled") {
            continue;
        }
        let hash = content_hash(resource);
        store_previous_id(resource, schema);
        let name = format!("{}-{hash}", resource.name());
        set_metadata_string(resource, "name", &name);
    }
    Ok(())
}

/// Records the current name, kind and effective namespace in the previous-id annotations.
pub(crate) fn store_previous_id(resource: &mut Resource, schema: &Schema) {
    let id = resource.cur_id();
    let namespace = id.effective_namespace(schema);
    append_csv(resource, super::resource::PREVIOUS_NAMES, &id.name);
    append_csv(resource, super::resource::PREVIOUS_NAMESPACES, &namespace);
    append_csv(resource, super::resource::PREVIOUS_KINDS, &id.gvk.kind);
}

/// Appends `value` to a comma-separated build annotation (nothing for an empty value).
pub(crate) fn append_csv(resource: &mut Resource, key: &str, value: &str) {
    if value.is_empty() {
        return;
    }
    let joined = match resource.annotation(key) {
        Some(current) => format!("{current},{value}"),
        None => value.to_owned(),
    };
    resource.set_annotation(key, &joined);
}

/// kustomize's hash of a resource.
pub(crate) fn content_hash(resource: &Resource) -> String {
    let mut text = String::new();
    match resource.kind() {
        "ConfigMap" => {
            let mut summary = Map::new();
            summary.insert("kind".into(), Value::String("ConfigMap".into()));
            summary.insert("name".into(), unread_name());
            summary.insert("data".into(), field_or_empty(resource, &["data"]));
            if let Some(binary) = resource.body.get("binaryData").filter(|v| v.is_object()) {
                summary.insert("binaryData".into(), binary.clone());
            }
            gojson::write_value(&Value::Object(summary), &mut text);
        }
        "Secret" => {
            let mut summary = Map::new();
            summary.insert("kind".into(), Value::String("Secret".into()));
            summary.insert("type".into(), field_or_empty(resource, &["type"]));
            summary.insert("name".into(), unread_name());
            summary.insert("data".into(), field_or_empty(resource, &["data"]));
            if let Some(string_data) = resource.body.get("stringData").filter(|v| v.is_object()) {
                summary.insert("stringData".into(), string_data.clone());
            }
            gojson::write_value(&Value::Object(summary), &mut text);
        }
        _ => gojson::write_value(&Value::Object(resource.body.clone()), &mut text),
    }
    encode(&Sha256::digest(text.as_bytes()))
}

/// The name in the summary: kustomize looks the name up as one field literally called
/// `metadata/name`, which no object has, so the summary's name is always empty (and a hash
/// does not depend on prefixes or suffixes).
fn unread_name() -> Value {
    Value::String(String::new())
}

/// A field's value for the summary: scalars as their text, maps as they are, `""` when absent.
fn field_or_empty(resource: &Resource, path: &[&str]) -> Value {
    let mut value = resource.body.get(path[0]);
    for key in &path[1..] {
        value = value.and_then(|v| v.get(*key));
    }
    match value {
        None | Some(Value::Null) => Value::String(String::new()),
        Some(Value::String(s)) => Value::String(s.clone()),
        Some(Value::Bool(b)) => Value::String(b.to_string()),
        Some(Value::Number(n)) => Value::String(n.to_string()),
        Some(other) => other.clone(),
    }
}

fn encode(digest: &[u8]) -> String {
    let hex: String = digest.iter().take(5).map(|b| format!("{b:02x}")).collect();
    hex.chars()
        .map(|c| match c {
            '0' => 'g',
            '1' => 'h',
            '3' => 'k',
            'a' => 'm',
            'e' => 't',
            other => other,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resource(value: Value) -> Resource {
        match value {
            Value::Object(body) => Resource::new(body),
            _ => unreachable!(),
        }
    }

    #[test]
    fn hashes_equal_kustomizes() {
        // `kustomize build` v5.5.0 names this ConfigMap x-4h2mbtbbt6 (configMapGenerator
        // `name: x, literals: [a=b]`).
        let cm = resource(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}}),
        );
        assert_eq!(content_hash(&cm), "4h2mbtbbt6");
    }
}
