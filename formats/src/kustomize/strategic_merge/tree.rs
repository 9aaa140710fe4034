//! The node tree the strategic merge works on: YAML nodes in an arena, shared by id, changed in
//! place. kustomize merges by moving and changing node pointers (a patch's node becomes part of
//! the target, an element merged in place is the same node in two lists), and what the merge
//! gives depends on that sharing; ids give the same sharing without shared mutable references.
//!
//! The operations here are the node primitives the merge uses (find, set and clear a field; set,
//! match and append list elements), with kyaml's exact matching rules.

use serde_json::{Map, Value};

use crate::kustomize::error::KustomizeError;

/// A node's index in the [`Tree`].
pub(super) type NodeId = usize;

/// A node's YAML kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Mapping,
    Sequence,
    Scalar,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Mapping => "MappingNode",
            Kind::Sequence => "SequenceNode",
            Kind::Scalar => "ScalarNode",
        }
    }
}

/// One YAML node.
#[derive(Debug, Clone)]
pub(super) struct Node {
    pub kind: Kind,
    /// Tagged `!!null` (an explicit null, not just an empty scalar).
    pub null: bool,
    /// A scalar's text, as merge keys and primitive lists compare it.
    pub text: String,
    /// A scalar's value in the output.
    pub value: Value,
    /// A mapping's keys and values alternating, or a sequence's elements.
    pub content: Vec<NodeId>,
}

/// A reference to a node, as the merge passes them around: `keep` marks a null that stays in
/// the output (a null the target had and the patch did not touch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct NodeRef {
    pub id: NodeId,
    pub keep: bool,
}

impl NodeRef {
    pub fn of(id: NodeId) -> Self {
        NodeRef { id, keep: false }
    }
}

/// The arena of nodes.
#[derive(Debug, Default)]
pub(super) struct Tree {
    nodes: Vec<Node>,
}

/// The error kyaml gives when a node is not of the expected kind.
fn wrong_kind(expected: Kind, actual: Kind) -> KustomizeError {
    KustomizeError::invalid(format!(
        "wrong node kind: expected {} but got {}",
        expected.name(),
        actual.name()
    ))
}

/// A scalar's text as YAML writes it.
fn scalar_text(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(_) | Value::Object(_) => String::new(),
    }
}

/// The value of a scalar kyaml creates from text and sets as a field: text YAML 1.1 would not
/// read as a string is quoted, so it stays a string; the empty text is written bare and so
/// reads as null.
pub(super) fn set_scalar_value(text: &str) -> Value {
    if text.is_empty() {
        Value::Null
    } else {
        Value::String(text.to_owned())
    }
}

impl Tree {
    /// Adds `value` (and everything under it) as new nodes.
    pub fn add_value(&mut self, value: &Value) -> NodeId {
        match value {
            Value::Object(map) => {
                let mut content = Vec::with_capacity(map.len() * 2);
                for (key, item) in map {
                    content.push(self.add_scalar(Value::String(key.clone()), false));
                    content.push(self.add_value(item));
                }
                self.push(Kind::Mapping, content)
            }
            Value::Array(items) => {
                let content = items.iter().map(|item| self.add_value(item)).collect();
                self.push(Kind::Sequence, content)
            }
            scalar => self.add_scalar(scalar.clone(), scalar.is_null()),
        }
    }

    fn push(&mut self, kind: Kind, content: Vec<NodeId>) -> NodeId {
        self.nodes.push(Node {
            kind,
            null: false,
            text: String::new(),
            value: Value::Null,
            content,
        });
        self.nodes.len() - 1
    }

    fn add_scalar(&mut self, value: Value, null: bool) -> NodeId {
        self.nodes.push(Node {
            kind: Kind::Scalar,
            null,
            text: scalar_text(&value),
            value,
            content: Vec::new(),
        });
        self.nodes.len() - 1
    }

    /// A scalar kyaml makes from text (`NewScalarRNode`) to set as a field.
    pub fn add_text_scalar(&mut self, text: &str) -> NodeId {
        let id = self.add_scalar(set_scalar_value(text), false);
        self.nodes[id].text = text.to_owned();
        id
    }

    /// A null that keeps the text of the null it stands for.
    pub fn add_null(&mut self, text: &str) -> NodeId {
        let id = self.add_scalar(Value::Null, true);
        self.nodes[id].text = text.to_owned();
        id
    }

    /// A new empty sequence.
    pub fn add_sequence(&mut self) -> NodeId {
        self.push(Kind::Sequence, Vec::new())
    }

    /// The value the node (and everything under it) stands for.
    pub fn to_value(&self, id: NodeId) -> Value {
        let node = &self.nodes[id];
        match node.kind {
            Kind::Scalar => node.value.clone(),
            Kind::Sequence => {
                Value::Array(node.content.iter().map(|c| self.to_value(*c)).collect())
            }
            Kind::Mapping => {
                let mut map = Map::new();
                for pair in node.content.chunks(2) {
                    if let [key, value] = pair {
                        map.insert(self.nodes[*key].text.clone(), self.to_value(*value));
                    }
                }
                Value::Object(map)
            }
        }
    }

    pub fn kind(&self, id: NodeId) -> Kind {
        self.nodes[id].kind
    }

    pub fn text(&self, id: NodeId) -> &str {
        &self.nodes[id].text
    }

    pub fn content(&self, id: NodeId) -> &[NodeId] {
        &self.nodes[id].content
    }

    /// Tagged null.
    pub fn is_null(&self, id: NodeId) -> bool {
        self.nodes[id].null
    }

    /// Absent, or tagged null.
    pub fn missing_or_null(&self, node: Option<NodeRef>) -> bool {
        node.is_none_or(|n| self.is_null(n.id))
    }

    /// Absent, tagged null, or a mapping without fields.
    pub fn empty_map(&self, node: Option<NodeRef>) -> bool {
        self.missing_or_null(node)
            || node.is_some_and(|n| {
                let node = &self.nodes[n.id];
                node.kind == Kind::Mapping && node.content.is_empty()
            })
    }

    /// Null, or an empty mapping or sequence.
    pub fn nil_or_empty(&self, id: NodeId) -> bool {
        let node = &self.nodes[id];
        node.null || (node.kind != Kind::Scalar && node.content.is_empty())
    }

    /// Overwrites node `target` with a copy of node `source` (children shared), as kyaml sets
    /// the value of an existing field.
    pub fn overwrite(&mut self, target: NodeId, source: NodeId) {
        if target != source {
            self.nodes[target] = self.nodes[source].clone();
        }
    }

    /// Fails unless the node is null or of `kind`.
    pub fn check_kind(&self, id: NodeId, kind: Kind) -> Result<(), KustomizeError> {
        let node = &self.nodes[id];
        if node.null || node.kind == kind {
            Ok(())
        } else {
            Err(wrong_kind(kind, node.kind))
        }
    }

    /// A mapping's field names, in order (none for other nodes).
    pub fn field_names(&self, id: NodeId) -> Vec<String> {
        let node = &self.nodes[id];
        if node.kind != Kind::Mapping {
            return Vec::new();
        }
        node.content
            .chunks(2)
            .map(|pair| self.nodes[pair[0]].text.clone())
            .collect()
    }

    /// The value of a mapping's field `name` (none for other nodes).
    pub fn field(&self, id: NodeId, name: &str) -> Option<NodeId> {
        let node = &self.nodes[id];
        if node.kind != Kind::Mapping {
            return None;
        }
        node.content
            .chunks(2)
            .find(|pair| self.nodes[pair[0]].text == name)
            .and_then(|pair| pair.get(1).copied())
    }

    /// kyaml's field matcher: the value of field `name` of a mapping when `want` is none or
    /// equals its text; with an empty `name`, the scalar itself when its text equals `want`
    /// (the empty text when none). Nothing for a null node.
    pub fn match_field(
        &self,
        id: NodeId,
        name: &str,
        want: Option<&str>,
    ) -> Result<Option<NodeId>, KustomizeError> {
        if self.is_null(id) {
            return Ok(None);
        }
        if name.is_empty() {
            self.check_kind(id, Kind::Scalar)?;
            let matches = self.text(id) == want.unwrap_or("");
            return Ok(matches.then_some(id));
        }
        self.check_kind(id, Kind::Mapping)?;
        let node = &self.nodes[id];
        let found = node
            .content
            .chunks(2)
            .find(|pair| self.nodes[pair[0]].text == name)
            .and_then(|pair| pair.get(1).copied());
        Ok(found.filter(|value| want.is_none_or(|w| self.text(*value) == w)))
    }

    /// Removes field `name` from a mapping (a null node has none).
    pub fn clear_field(&mut self, id: NodeId, name: &str) -> Result<(), KustomizeError> {
        self.check_kind(id, Kind::Mapping)?;
        let position = {
            let node = &self.nodes[id];
            node.content
                .chunks(2)
                .position(|pair| self.nodes[pair[0]].text == name)
        };
        if let Some(pair) = position {
            let content = &mut self.nodes[id].content;
            let end = (pair * 2 + 2).min(content.len());
            content.drain(pair * 2..end);
        }
        Ok(())
    }

    /// Sets field `name` of a mapping: an absent value or a null not marked to keep removes
    /// it; an existing field's node is overwritten; a new one is appended.
    pub fn set_field(
        &mut self,
        id: NodeId,
        name: &str,
        value: Option<NodeRef>,
    ) -> Result<(), KustomizeError> {
        let value = match value {
            Some(v) if !self.is_null(v.id) || v.keep => v,
            _ => return self.clear_field(id, name),
        };
        match self.match_field(id, name, None)? {
            Some(existing) => self.overwrite(existing, value.id),
            None => {
                let key = self.add_scalar(Value::String(name.to_owned()), false);
                let node = &mut self.nodes[id].content;
                node.push(key);
                node.push(value.id);
            }
        }
        Ok(())
    }

    /// Appends an element to a sequence.
    pub fn append(&mut self, id: NodeId, element: NodeId) -> Result<(), KustomizeError> {
        self.check_kind(id, Kind::Sequence)?;
        self.nodes[id].content.push(element);
        Ok(())
    }

    /// kyaml's element matcher: the first element of a sequence whose `keys` fields equal
    /// `values` (whose fields `keys` exist, with `any_value`); with no key, the first element
    /// whose text is `values[0]`.
    pub fn match_element(
        &self,
        id: NodeId,
        keys: &[String],
        values: &[String],
        any_value: bool,
    ) -> Result<Option<NodeId>, KustomizeError> {
        let empty = [String::new()];
        let keys = if keys.is_empty() { &empty[..] } else { keys };
        let values = if values.is_empty() {
            &empty[..]
        } else {
            values
        };
        self.check_kind(id, Kind::Sequence)?;
        if any_value && !values[0].is_empty() {
            return Err(KustomizeError::invalid(
                "Values must be empty when MatchAnyValue is set to true",
            ));
        }
        if keys[0].is_empty() {
            let found = self.nodes[id]
                .content
                .iter()
                .find(|element| self.text(**element) == values[0]);
            return Ok(found.copied());
        }
        for element in &self.nodes[id].content {
            if self.check_kind(*element, Kind::Mapping).is_err() {
                continue;
            }
            if !any_value && keys.len() != values.len() {
                return Err(KustomizeError::invalid(
                    "length of keys must equal length of values when MatchAnyValue is false",
                ));
            }
            let mut matches = true;
            for (i, key) in keys.iter().enumerate() {
                let want = if any_value {
                    None
                } else {
                    Some(values[i].as_str())
                };
                if self.match_field(*element, key, want)?.is_none() {
                    matches = false;
                    break;
                }
            }
            if matches {
                return Ok(Some(*element));
            }
        }
        Ok(None)
    }

    /// kyaml's element setter on a sequence: drops null and empty-mapping elements, replaces
    /// the elements whose `keys` fields match `values` by `element` (removes them when there
    /// is none), and appends `element` when nothing matched. Returns the element set.
    pub fn set_element(
        &mut self,
        id: NodeId,
        element: Option<NodeId>,
        keys: &[String],
        values: &[String],
    ) -> Result<Option<NodeId>, KustomizeError> {
        let empty = [String::new()];
        let keys = if keys.is_empty() { &empty[..] } else { keys };
        self.check_kind(id, Kind::Sequence)?;
        let mapping_setter = !keys[0].is_empty() && values.first().is_some_and(|v| !v.is_empty());
        let mut content = Vec::new();
        let mut matched = false;
        for existing in self.nodes[id].content.clone() {
            if self.empty_map(Some(NodeRef::of(existing))) {
                continue;
            }
            if mapping_setter && self.kind(existing) != Kind::Mapping {
                content.push(existing);
                continue;
            }
            // A key without a value is checked against the previous key's match.
            let mut found_value = None;
            let mut found = true;
            for (j, key) in keys.iter().enumerate() {
                if let Some(value) = values.get(j) {
                    let want = (!value.is_empty()).then_some(value.as_str());
                    found_value = self.match_field(existing, key, want)?;
                }
                if found_value.is_none() {
                    found = false;
                    break;
                }
            }
            if !found {
                if !values.is_empty() {
                    content.push(existing);
                }
                continue;
            }
            matched = true;
            if let Some(element) = element {
                content.push(element);
            }
        }
        self.nodes[id].content = content;
        let Some(element) = element.filter(|e| !self.is_null(*e)) else {
            return Ok(None);
        };
        if !matched {
            self.nodes[id].content.push(element);
        }
        Ok(Some(element))
    }
}
