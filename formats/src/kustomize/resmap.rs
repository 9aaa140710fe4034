//! The ordered set of resources a build carries, with the file each came from: appending with
//! kustomize's id-conflict check, absorbing generated resources (create, merge, replace),
//! selecting patch targets, and finding resources by any of their ids.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::error::{KustomizeError, KustomizeErrorKind};
use super::openapi::Schema;
use super::resource::{Gvk, ResId, Resource, GENERATOR_BEHAVIOR, NEEDS_HASH_SUFFIX};
use super::selector::Selector;
use crate::Origin;

/// The key two ids are equal by in kustomize: group, version, kind, name and effective
/// namespace.
pub(crate) type IdKey = (Gvk, String, String);

/// The equality key of `id`.
pub(crate) fn id_key(id: &ResId, schema: &Schema) -> IdKey {
    (
        id.gvk.clone(),
        id.name.clone(),
        id.effective_namespace(schema),
    )
}

/// Resources in build order, each with the file it came from.
#[derive(Debug, Clone, Default)]
pub(crate) struct ResMap {
    /// The resources; a resource whose body became empty was deleted by a patch.
    pub resources: Vec<Resource>,
    /// `origins[i]` is where `resources[i]` came from.
    pub origins: Vec<Origin>,
}

impl ResMap {
    /// The number of resources.
    pub(crate) fn len(&self) -> usize {
        self.resources.len()
    }

    /// Appends resources, refusing one whose current id is already present.
    pub(crate) fn append_all(
        &mut self,
        incoming: Vec<(Resource, Origin)>,
        schema: &Schema,
    ) -> Result<(), KustomizeError> {
        let mut present: HashMap<IdKey, ()> = self
            .resources
            .iter()
            .map(|r| (id_key(&r.cur_id(), schema), ()))
            .collect();
        for (resource, origin) in incoming {
            let id = resource.cur_id();
            if present.insert(id_key(&id, schema), ()).is_some() {
                return Err(KustomizeError::new(
                    KustomizeErrorKind::Conflict,
                    format!("may not add resource with an already registered id: {id}"),
                ));
            }
            self.resources.push(resource);
            self.origins.push(origin);
        }
        Ok(())
    }

    /// Appends another map's resources ([`ResMap::append_all`]).
    pub(crate) fn append_map(
        &mut self,
        other: ResMap,
        schema: &Schema,
    ) -> Result<(), KustomizeError> {
        let pairs = other.resources.into_iter().zip(other.origins).collect();
        self.append_all(pairs, schema)
    }

    /// Indexes of the resources any of whose ids (previous or current) equals `id`.
    pub(crate) fn matching_any_id(&self, id: &ResId, schema: &Schema) -> Vec<usize> {
        let key = id_key(id, schema);
        self.resources
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                r.prev_ids()
                    .iter()
                    .chain(std::iter::once(&r.cur_id()))
                    .any(|other| id_key(other, schema) == key)
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// The one resource any of whose ids equals `id`, for a patch without target.
    pub(crate) fn one_by_any_id(
        &self,
        id: &ResId,
        schema: &Schema,
    ) -> Result<usize, KustomizeError> {
        let found = self.matching_any_id(id, schema);
        match found.as_slice() {
            [one] => Ok(*one),
            [] => Err(KustomizeError::new(
                KustomizeErrorKind::NoMatch,
                format!("no resource matches {id}"),
            )),
            _ => Err(KustomizeError::new(
                KustomizeErrorKind::NoMatch,
                format!("multiple resources match {id}"),
            )),
        }
    }

    /// Indexes of the resources a patch or replacement target selects.
    pub(crate) fn select(
        &self,
        selector: &Selector,
        schema: &Schema,
    ) -> Result<Vec<usize>, KustomizeError> {
        let compiled = selector.compile()?;
        Ok(self
            .resources
            .iter()
            .enumerate()
            .filter(|(_, r)| compiled.matches(r, schema))
            .map(|(i, _)| i)
            .collect())
    }

    /// Drops resources whose body a patch emptied.
    pub(crate) fn drop_empties(&mut self) {
        if self.resources.iter().all(|r| !r.body.is_empty()) {
            return;
        }
        let pairs: Vec<(Resource, Origin)> = std::mem::take(&mut self.resources)
            .into_iter()
            .zip(std::mem::take(&mut self.origins))
            .filter(|(r, _)| !r.body.is_empty())
            .collect();
        for (r, o) in pairs {
            self.resources.push(r);
            self.origins.push(o);
        }
    }

    /// Adds a generated resource as kustomize does: appended when new (an error if it asks to
    /// merge or replace), else merged into or replacing the one earlier resource of its id
    /// (an error unless it asks to).
    pub(crate) fn absorb(
        &mut self,
        mut resource: Resource,
        origin: Origin,
        schema: &Schema,
    ) -> Result<(), KustomizeError> {
        let id = resource.cur_id();
        let matches = self.matching_any_id(&id, schema);
        let behavior = resource
            .annotation(GENERATOR_BEHAVIOR)
            .unwrap_or("")
            .to_owned();
        match matches.as_slice() {
            [] => {
                if behavior == "merge" || behavior == "replace" {
                    return Err(KustomizeError::new(
                        KustomizeErrorKind::Conflict,
                        format!("id {id} does not exist; cannot merge or replace"),
                    ));
                }
                self.append_all(vec![(resource, origin)], schema)
            }
            [index] => {
                let old = &self.resources[*index];
                match behavior.as_str() {
                    "replace" => copy_merge_metadata(&mut resource, old),
                    "merge" => {
                        let old_origin = old
                            .annotation(super::resource::ORIGIN_ANNOTATION)
                            .map(str::to_owned);
                        copy_merge_metadata(&mut resource, old);
                        if let Some(origin) = old_origin {
                            resource.set_annotation(super::resource::ORIGIN_ANNOTATION, &origin);
                        }
                        merge_string_map_from(&mut resource, old, "data");
                        merge_string_map_from(&mut resource, old, "binaryData");
                    }
                    _ => {
                        return Err(KustomizeError::new(
                            KustomizeErrorKind::Conflict,
                            format!("id {id} exists; behavior must be merge or replace"),
                        ))
                    }
                }
                let origin = self.origins[*index].clone();
                self.resources[*index] = resource;
                self.origins[*index] = origin;
                Ok(())
            }
            _ => Err(KustomizeError::new(
                KustomizeErrorKind::Conflict,
                format!("found multiple objects that could accept merge of {id}"),
            )),
        }
    }
}

/// The build annotations kustomize keeps from the older resource when a generator merges into
/// or replaces it.
const BUILD_ANNOTATIONS: [&str; 10] = [
    super::resource::PREVIOUS_KINDS,
    super::resource::PREVIOUS_NAMES,
    super::resource::PREFIXES,
    super::resource::SUFFIXES,
    super::resource::PREVIOUS_NAMESPACES,
    super::resource::ALLOW_NAME_CHANGE,
    super::resource::ALLOW_KIND_CHANGE,
    super::resource::REF_BY,
    GENERATOR_BEHAVIOR,
    NEEDS_HASH_SUFFIX,
];

/// kustomize's `CopyMergeMetaDataFieldsFrom`: labels and annotations of `old` under the new
/// one's, build annotations from `old` (the hash flag only if the new one asks for it), and
/// `old`'s name and namespace.
pub(crate) fn copy_merge_metadata(resource: &mut Resource, old: &Resource) {
    let old_labels = string_map(old, "labels");
    let mut labels = old_labels;
    labels.extend(string_map(resource, "labels"));
    set_string_map(resource, "labels", labels);

    let new_annotations = string_map(resource, "annotations");
    let wants_hash = new_annotations.contains_key(NEEDS_HASH_SUFFIX);
    let old_annotations = string_map(old, "annotations");
    let mut merged = old_annotations.clone();
    merged.extend(new_annotations);
    for key in BUILD_ANNOTATIONS {
        match old_annotations.get(key) {
            Some(value) => {
                merged.insert(key.to_owned(), value.clone());
            }
            None => {
                merged.remove(key);
            }
        }
    }
    if !wants_hash {
        merged.remove(NEEDS_HASH_SUFFIX);
    }
    set_string_map(resource, "annotations", merged);
    let name = old.name().to_owned();
    let namespace = old.namespace().to_owned();
    set_metadata_string(resource, "name", &name);
    set_metadata_string(resource, "namespace", &namespace);
    resource.ref_var_names = old.ref_var_names.clone();
}

fn merge_string_map_from(resource: &mut Resource, old: &Resource, field: &str) {
    let mut merged: Map<String, Value> = old
        .body
        .get(field)
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if let Some(mine) = resource.body.get(field).and_then(Value::as_object) {
        for (k, v) in mine {
            merged.insert(k.clone(), v.clone());
        }
    }
    if merged.is_empty() {
        resource.body.remove(field);
    } else {
        resource
            .body
            .insert(field.to_owned(), Value::Object(merged));
    }
}

/// A metadata map (`labels`, `annotations`) of string values.
pub(crate) fn string_map(
    resource: &Resource,
    field: &str,
) -> std::collections::BTreeMap<String, String> {
    resource
        .body
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        Value::Null => String::new(),
                        other => other.to_string(),
                    };
                    (k.clone(), v)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Sets a metadata map; an empty map removes the field, as kustomize's setters do.
pub(crate) fn set_string_map(
    resource: &mut Resource,
    field: &str,
    map: std::collections::BTreeMap<String, String>,
) {
    let metadata = metadata_mut(resource);
    if map.is_empty() {
        metadata.remove(field);
    } else {
        let value = map
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        metadata.insert(field.to_owned(), Value::Object(value));
    }
}

/// `metadata` as a map, created when missing.
pub(crate) fn metadata_mut(resource: &mut Resource) -> &mut Map<String, Value> {
    let metadata = resource
        .body
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !metadata.is_object() {
        *metadata = Value::Object(Map::new());
    }
    match metadata {
        Value::Object(map) => map,
        _ => unreachable!("metadata was just made a map"),
    }
}

/// Sets `metadata.<field>`; an empty value removes it.
pub(crate) fn set_metadata_string(resource: &mut Resource, field: &str, value: &str) {
    let metadata = metadata_mut(resource);
    if value.is_empty() {
        metadata.remove(field);
    } else {
        metadata.insert(field.to_owned(), Value::String(value.to_owned()));
    }
}
