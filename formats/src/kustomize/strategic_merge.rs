//! Strategic merge patch as kustomize v5.5.0 applies it (`patches` and
//! `patchesStrategicMerge`, through kyaml's merge walker):
//! - maps merge field by field; a null in the patch removes the field; scalars and lists
//!   without a merge strategy in the schema are replaced by the patch's;
//! - lists whose schema has `x-kubernetes-patch-strategy: merge` merge their elements by the
//!   schema's keys (`x-kubernetes-list-map-keys`, else `x-kubernetes-patch-merge-key`), or by
//!   value for lists of scalars; the patch's new elements come first. kustomize infers no keys:
//!   without a schema (a custom resource, unless an `openapi:` document describes it) lists are
//!   replaced, and `x-kubernetes-list-type` is not read;
//! - `$patch: delete | replace | merge` on a map, on a list (an element that is only the
//!   directive) and on the whole object (delete removes it). kustomize knows no other
//!   directive: `$setElementOrder/...`, `$retainKeys` and `$deleteFromPrimitiveList/...` are
//!   merged in as ordinary fields;
//! - the target keeps its kind, name and namespace unless the patch is allowed to change them.

mod lists;
mod tree;
mod walker;

use serde_json::{Map, Value};

use super::error::KustomizeError;
use super::openapi::Schema;
use tree::{set_scalar_value, NodeRef, Tree};
use walker::Walker;

/// What a strategic merge patch may change of its target's identity (`patches[].options`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PatchOptions {
    /// `allowNameChange`: the patch's `metadata.name` renames the target.
    pub allow_name_change: bool,
    /// `allowKindChange`: the patch's `kind` changes the target's kind.
    pub allow_kind_change: bool,
}

/// Applies the strategic merge `patch` to `target` (both whole objects) as kustomize applies a
/// patch to a resource: the merge, then the target's kind, name and namespace restored. `None`
/// when the patch deletes the object (`$patch: delete` at the top).
pub fn apply(
    target: &Value,
    patch: &Value,
    schema: &Schema,
) -> Result<Option<Value>, KustomizeError> {
    apply_with_options(target, patch, schema, PatchOptions::default())
}

/// [`apply`] with `options` allowing the patch to rename the target or change its kind (the
/// caller records the previous name and kind, as kustomize does before such a patch).
pub fn apply_with_options(
    target: &Value,
    patch: &Value,
    schema: &Schema,
    options: PatchOptions,
) -> Result<Option<Value>, KustomizeError> {
    let kind = top_level_text(target, "kind");
    let name = metadata_text(target, "name");
    let namespace = metadata_text(target, "namespace");
    let Some(mut merged) = merge(target, patch, schema)? else {
        return Ok(None);
    };
    let Value::Object(object) = &mut merged else {
        return Ok(Some(merged));
    };
    if object.is_empty() {
        return Ok(None);
    }
    if !options.allow_kind_change {
        object.insert("kind".to_owned(), set_scalar_value(&kind));
    }
    with_metadata(object, |metadata| {
        if !options.allow_name_change {
            metadata.insert("name".to_owned(), set_scalar_value(&name));
        }
        set_namespace(metadata, namespace);
    });
    Ok(Some(merged))
}

/// The merge alone (kyaml's merge of a patch into a target, new list elements first), without
/// the identity kustomize restores after it. `None` when the patch deletes the object.
pub fn merge(
    target: &Value,
    patch: &Value,
    schema: &Schema,
) -> Result<Option<Value>, KustomizeError> {
    let mut tree = Tree::default();
    let dest = tree.add_value(target);
    let origin = tree.add_value(patch);
    let mut walker = Walker {
        tree,
        schema,
        prepend: true,
    };
    let result = walker.walk(None, [Some(NodeRef::of(dest)), Some(NodeRef::of(origin))])?;
    // The target is changed in place; where the walk settles on another node for the whole
    // object (a top-level `$patch: replace`), kustomize keeps the target's node all the same.
    Ok(result.map(|_| walker.tree.to_value(dest)))
}

/// The copy of `patch` kustomize applies to each target it selects (`patchesStrategicMerge`,
/// and `patches` with a `target`): labels and annotations rewritten as maps of strings (empty
/// or null ones dropped), the name and namespace of the patch made explicit (an absent
/// namespace removed), and the target's apiVersion with the patch's kind.
pub fn patch_for_target(patch: &Value, target: &Value) -> Value {
    let mut copy = patch.clone();
    let patch_kind = top_level_text(patch, "kind");
    let name = metadata_text(patch, "name");
    let namespace = metadata_text(patch, "namespace");
    let Value::Object(object) = &mut copy else {
        return copy;
    };
    with_metadata(object, |metadata| {
        for field in ["labels", "annotations"] {
            let entries = string_map(patch, field);
            metadata.remove(field);
            if !entries.is_empty() {
                metadata.insert(field.to_owned(), Value::Object(entries));
            }
        }
        metadata.insert("name".to_owned(), set_scalar_value(&name));
        set_namespace(metadata, namespace);
    });
    object.insert(
        "apiVersion".to_owned(),
        set_scalar_value(&top_level_text(target, "apiVersion")),
    );
    object.insert("kind".to_owned(), set_scalar_value(&patch_kind));
    copy
}

/// A scalar's text as kustomize reads it for identities (empty when absent or not a scalar).
fn scalar_text(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Null) => "null".to_owned(),
        _ => String::new(),
    }
}

/// A top-level field's text.
fn top_level_text(object: &Value, field: &str) -> String {
    scalar_text(object.get(field))
}

/// The non-empty metadata map, as kustomize finds it.
fn metadata(object: &Value) -> Option<&Map<String, Value>> {
    object
        .get("metadata")
        .and_then(Value::as_object)
        .filter(|m| !m.is_empty())
}

/// A metadata field's text; empty when absent, null or empty.
fn metadata_text(object: &Value, field: &str) -> String {
    match metadata(object).and_then(|m| m.get(field)) {
        None | Some(Value::Null) => String::new(),
        Some(Value::Object(m)) if m.is_empty() => String::new(),
        Some(Value::Array(a)) if a.is_empty() => String::new(),
        value => scalar_text(value),
    }
}

/// A metadata map field (labels, annotations) as strings; values that are not scalars read as
/// the empty string.
fn string_map(object: &Value, field: &str) -> Map<String, Value> {
    let Some(Value::Object(entries)) = metadata(object).and_then(|m| m.get(field)) else {
        return Map::new();
    };
    entries
        .iter()
        .map(|(key, value)| (key.clone(), Value::String(scalar_text(Some(value)))))
        .collect()
}

/// Changes the metadata map (created, or replacing a value that is not a map).
fn with_metadata(object: &mut Map<String, Value>, change: impl FnOnce(&mut Map<String, Value>)) {
    let mut metadata = match object.remove("metadata") {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    change(&mut metadata);
    object.insert("metadata".to_owned(), Value::Object(metadata));
}

/// Sets the namespace; the empty one removes it.
fn set_namespace(metadata: &mut Map<String, Value>, namespace: String) {
    if namespace.is_empty() {
        metadata.remove("namespace");
    } else {
        metadata.insert("namespace".to_owned(), Value::String(namespace));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(containers: Value) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"template": {"spec": {"containers": containers}}}
        })
    }

    fn apply_builtin(target: &Value, patch: &Value) -> Option<Value> {
        apply(target, patch, &Schema::builtin()).expect("merge")
    }

    #[test]
    fn containers_merge_by_name_with_new_ones_first() {
        let target = deployment(json!([{"name": "a", "image": "a:1"}, {"name": "b"}]));
        let patch = deployment(json!([{"name": "c"}, {"name": "a", "image": "a:2"}]));
        let merged = apply_builtin(&target, &patch).expect("kept");
        assert_eq!(
            merged["spec"]["template"]["spec"]["containers"],
            json!([{"name": "c"}, {"name": "a", "image": "a:2"}, {"name": "b"}])
        );
    }

    #[test]
    fn without_a_schema_lists_are_replaced() {
        let target = json!({"apiVersion": "x.io/v1", "kind": "X", "metadata": {"name": "x"},
            "spec": {"items": [{"name": "a"}]}});
        let patch = json!({"apiVersion": "x.io/v1", "kind": "X", "metadata": {"name": "x"},
            "spec": {"items": [{"name": "b"}]}});
        let merged = apply_builtin(&target, &patch).expect("kept");
        assert_eq!(merged["spec"]["items"], json!([{"name": "b"}]));
    }

    #[test]
    fn delete_directives() {
        let target = deployment(json!([{"name": "a"}, {"name": "b"}]));
        let patch = deployment(json!([{"name": "a", "$patch": "delete"}]));
        let merged = apply_builtin(&target, &patch).expect("kept");
        assert_eq!(
            merged["spec"]["template"]["spec"]["containers"],
            json!([{"name": "b"}])
        );
        let mut delete_all = deployment(json!([]));
        delete_all["$patch"] = json!("delete");
        assert_eq!(apply_builtin(&target, &delete_all), None);
        let mut unknown = deployment(json!([]));
        unknown["spec"]["$patch"] = json!("drop");
        assert!(apply(&target, &unknown, &Schema::builtin()).is_err());
    }

    #[test]
    fn the_target_keeps_its_identity_unless_allowed() {
        let target = deployment(json!([]));
        let patch = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "other", "namespace": "elsewhere"}});
        let kept = apply_builtin(&target, &patch).expect("kept");
        assert_eq!(kept["kind"], "Deployment");
        assert_eq!(kept["metadata"], json!({"name": "web", "namespace": "ns"}));
        let options = PatchOptions {
            allow_name_change: true,
            allow_kind_change: true,
        };
        let changed = apply_with_options(&target, &patch, &Schema::builtin(), options)
            .expect("merge")
            .expect("kept");
        assert_eq!(changed["kind"], "StatefulSet");
        assert_eq!(
            changed["metadata"],
            json!({"name": "other", "namespace": "ns"})
        );
    }

    #[test]
    fn the_per_target_copy_of_a_patch() {
        let target = deployment(json!([]));
        let patch = json!({"apiVersion": "apps/v2", "kind": "Deployment",
            "metadata": {"labels": {"n": 1, "gone": null}, "annotations": {}, "namespace": "x"}});
        let copy = patch_for_target(&patch, &target);
        assert_eq!(copy["apiVersion"], "apps/v1");
        assert_eq!(
            copy["metadata"],
            json!({"labels": {"n": "1", "gone": "null"}, "name": null, "namespace": "x"})
        );
        let no_labels = json!({"kind": "Deployment", "metadata": {"name": "web", "labels": null}});
        assert_eq!(
            patch_for_target(&no_labels, &target)["metadata"],
            json!({"name": "web"})
        );
    }
}
