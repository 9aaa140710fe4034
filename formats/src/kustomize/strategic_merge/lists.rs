//! Merged (associative) lists, as kustomize's kyaml merges them: elements matched by the merge
//! keys the schema gives (all of `x-kubernetes-list-map-keys`, else
//! `x-kubernetes-patch-merge-key`; a key missing from some elements is left out), or by value
//! for lists of scalars; each match merged as a map; the patch's new elements first, then the
//! target's; an element merged to nothing removed.

use std::collections::HashSet;

use super::tree::{Kind, NodeId, NodeRef};
use super::walker::{Sources, Walker};
use crate::kustomize::error::KustomizeError;
use crate::kustomize::openapi::FieldSchema;

const DEST: usize = 0;
const ORIGIN: usize = 1;

impl<'s> Walker<'s> {
    /// Merges a list whose schema says its elements are merged.
    pub(super) fn walk_associative_list(
        &mut self,
        schema: Option<FieldSchema<'s>>,
        mut sources: Sources,
    ) -> Result<Option<NodeRef>, KustomizeError> {
        let dest = self.visit_merged_list(&sources)?;
        sources[DEST] = dest;
        let Some(dest) = dest else {
            return Ok(None);
        };
        let (_, keys) = schema.map_or(("", Vec::new()), |s| s.patch_strategy_and_keys());
        let values = self.element_key_values(&sources, &keys);
        if !values.is_empty() || !keys.is_empty() {
            return self.merge_elements(schema, &sources, values, keys, dest);
        }
        // No keys: a list of scalars, merged by value.
        let values = self.element_scalar_values(&sources);
        self.merge_elements(schema, &sources, values, vec![String::new()], dest)
    }

    /// The sources in the order their elements come out: the patch's first when prepending.
    fn ordered(&self, sources: &Sources) -> [Option<NodeRef>; 2] {
        if self.prepend {
            [sources[ORIGIN], sources[DEST]]
        } else {
            [sources[DEST], sources[ORIGIN]]
        }
    }

    /// Each element's key values (empty text where a key is absent or empty), distinct, in
    /// order of appearance.
    fn element_key_values(&self, sources: &Sources, keys: &[String]) -> Vec<Vec<String>> {
        let mut seen: Vec<Vec<String>> = Vec::new();
        for source in self.ordered(sources).into_iter().flatten() {
            if self.tree.check_kind(source.id, Kind::Sequence).is_err() {
                continue;
            }
            for element in self.tree.content(source.id) {
                let values: Vec<String> = keys
                    .iter()
                    .map(|key| match self.tree.field(*element, key) {
                        Some(value) if !self.tree.nil_or_empty(value) => {
                            self.tree.text(value).to_owned()
                        }
                        _ => String::new(),
                    })
                    .collect();
                if values.is_empty() || seen.contains(&values) {
                    continue;
                }
                seen.push(values);
            }
        }
        seen
    }

    /// The distinct texts of a list of scalars, in order of appearance.
    fn element_scalar_values(&self, sources: &Sources) -> Vec<Vec<String>> {
        let mut seen = HashSet::new();
        let mut values = Vec::new();
        for source in self.ordered(sources).into_iter().flatten() {
            for element in self.tree.content(source.id) {
                let text = self.tree.text(*element).to_owned();
                if seen.insert(text.clone()) {
                    values.push(vec![text]);
                }
            }
        }
        values
    }

    /// Merges the elements identified by `values_list` (one entry per element identity) into
    /// a new list, then adds the target's remaining elements.
    fn merge_elements(
        &mut self,
        schema: Option<FieldSchema<'s>>,
        sources: &Sources,
        mut values_list: Vec<Vec<String>>,
        keys: Vec<String>,
        dest: NodeRef,
    ) -> Result<Option<NodeRef>, KustomizeError> {
        let merged = self.tree.add_sequence();
        let element_schema = schema.and_then(|s| s.elements());
        if keys.len() > 1 {
            unify_partial_values(&mut values_list);
        }
        let mut valid_keys = Vec::new();
        let mut valid_values;
        for index in 0..values_list.len() {
            let values = values_list[index].clone();
            if values.is_empty() {
                continue;
            }
            (valid_keys, valid_values) = present_keys(&values_list, &values, &keys);
            let element_sources = self.matching_elements(sources, &valid_keys, &valid_values);
            let value = self.walk(element_schema, element_sources)?;
            let mut removed = false;
            for (i, key) in valid_keys.iter().enumerate() {
                match value {
                    Some(v) if !self.tree.empty_map(Some(v)) => {
                        if self.tree.field(v.id, key).is_none() && !valid_values[i].is_empty() {
                            let key_value = self.tree.add_text_scalar(&valid_values[i]);
                            self.tree
                                .set_field(v.id, key, Some(NodeRef::of(key_value)))?;
                        }
                    }
                    _ => {
                        self.tree
                            .set_element(dest.id, None, &valid_keys, &valid_values)?;
                        removed = true;
                    }
                }
            }
            if removed {
                continue;
            }
            self.tree
                .set_element(merged, value.map(|v| v.id), &valid_keys, &valid_values)?;
        }
        let mut result = dest;
        if !values_list.is_empty() {
            result = if self.prepend {
                self.append_elements(merged, dest.id, &valid_keys)?;
                NodeRef::of(merged)
            } else {
                self.append_elements(dest.id, merged, &valid_keys)?;
                dest
            };
        }
        if self.tree.missing_or_null(Some(result)) {
            return Ok(None);
        }
        Ok(Some(result))
    }

    /// The element of each source whose `keys` fields equal `values` (by text).
    fn matching_elements(&self, sources: &Sources, keys: &[String], values: &[String]) -> Sources {
        let (keys, values) = present_keys(&[values.to_vec()], values, keys);
        sources.map(|source| {
            let source = source?;
            if self.tree.kind(source.id) != Kind::Sequence {
                return None;
            }
            self.tree
                .match_element(source.id, &keys, &values, false)
                .ok()
                .flatten()
                .map(NodeRef::of)
        })
    }

    /// Adds the elements of `source` to `target`: each replaces the element of `target` with
    /// the same key values, or is appended. An element missing a key is appended as it is.
    fn append_elements(
        &mut self,
        target: NodeId,
        source: NodeId,
        keys: &[String],
    ) -> Result<(), KustomizeError> {
        let Some(first_key) = keys.first() else {
            return Err(KustomizeError::invalid("merged list without merge keys"));
        };
        for element in self.tree.content(source).to_vec() {
            if first_key.is_empty() {
                let text = self.tree.text(element).to_owned();
                self.tree
                    .set_element(target, Some(element), &[String::new()], &[text])?;
                continue;
            }
            let mut values = Vec::new();
            for key in keys {
                match self.tree.match_field(element, key, None)? {
                    Some(value) => values.push(self.tree.text(value).to_owned()),
                    None => self.tree.append(target, element)?,
                }
            }
            if keys.len() > 1 {
                self.tree.set_element(target, None, keys, &values)?;
            }
            self.tree
                .set_element(target, Some(element), keys, &values)?;
        }
        Ok(())
    }
}

/// Where several keys identify elements, two identities that agree on at least one key and
/// differ only where one of them is empty are made the same (the union of both).
fn unify_partial_values(values_list: &mut [Vec<String>]) {
    for i in 0..values_list.len() {
        let first = values_list[i].clone();
        for j in 0..values_list.len() {
            let second = values_list[j].clone();
            if let Some(unified) = unify(&first, &second) {
                values_list[i] = unified.clone();
                values_list[j] = unified;
            }
        }
    }
}

/// The union of two identities, when they share a value and do not conflict.
fn unify(first: &[String], second: &[String]) -> Option<Vec<String>> {
    if first.len() != second.len() {
        return None;
    }
    let mut common = false;
    let mut unified = Vec::with_capacity(first.len());
    for (a, b) in first.iter().zip(second) {
        if a == b {
            common = true;
            unified.push(a.clone());
        } else if !a.is_empty() && !b.is_empty() {
            return None;
        } else if !a.is_empty() {
            unified.push(a.clone());
        } else {
            unified.push(b.clone());
        }
    }
    common.then_some(unified)
}

/// The keys some identity of `values_list` has a value for, with `values` for them; all
/// keys when no identity has any.
fn present_keys(
    values_list: &[Vec<String>],
    values: &[String],
    keys: &[String],
) -> (Vec<String>, Vec<String>) {
    let present: HashSet<&str> = values_list
        .iter()
        .flat_map(|values| {
            values
                .iter()
                .enumerate()
                .filter(|(_, v)| !v.is_empty())
                .filter_map(|(i, _)| keys.get(i).map(String::as_str))
        })
        .collect();
    if present.is_empty() {
        return (keys.to_vec(), values.to_vec());
    }
    let valid_keys = keys
        .iter()
        .filter(|k| present.contains(k.as_str()))
        .cloned()
        .collect();
    let valid_values = values
        .iter()
        .enumerate()
        .filter(|(i, v)| {
            !v.is_empty() || keys.get(*i).is_some_and(|k| present.contains(k.as_str()))
        })
        .map(|(_, v)| v.clone())
        .collect();
    (valid_keys, valid_values)
}
