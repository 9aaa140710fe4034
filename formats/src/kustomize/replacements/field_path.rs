//! Field paths of replacements (`spec.template.spec.containers.[name=app].image`), split and
//! walked as kustomize walks them. A source path is looked up exactly (`[name=app]` compares
//! the field's text); a target path may reach many fields (`*` takes every element of a list,
//! `[name=regex]` every element whose field's printed value the unanchored regular expression
//! matches) and, with `create`, adds what is missing.

use regex::Regex;
use serde_json::{Map, Value};

use super::scalar::{tag_and_text, yaml_text};
use crate::kustomize::error::KustomizeError;

/// Splits a field path at `.`, as kustomize does: a leading `.` is dropped, `\.` keeps a dot
/// in a name, and a bracketed part that spans dots stays one part (`[a.b/c]` becomes the map
/// key `a.b/c`; `[name=a.b]` stays a list element selector).
pub fn split(path: &str) -> Vec<String> {
    let mut raw: Vec<&str> = path.split('.').collect();
    if raw.len() > 1 && raw[0].is_empty() {
        raw.remove(0);
    }
    let mut unescaped: Vec<String> = Vec::new();
    for part in raw {
        match unescaped.last_mut() {
            Some(last) if last.ends_with('\\') => {
                last.pop();
                last.push('.');
                last.push_str(part);
            }
            _ => unescaped.push(part.to_owned()),
        }
    }
    let mut parts = Vec::new();
    let mut i = 0;
    while i < unescaped.len() {
        let part = &unescaped[i];
        if part.starts_with('[') && !part.ends_with(']') {
            let mut bracketed = vec![part.clone()];
            while i + 1 < unescaped.len() {
                i += 1;
                bracketed.push(unescaped[i].clone());
                if unescaped[i].ends_with(']') {
                    break;
                }
            }
            let joined = bracketed.join(".");
            if joined.contains('=') {
                parts.push(joined);
            } else {
                parts.push(joined.trim_matches(['[', ']']).to_owned());
            }
        } else {
            parts.push(part.clone());
        }
        i += 1;
    }
    parts
}

/// `[name=value]` or `[=value]`: a list element selector.
fn is_element_selector(part: &str) -> bool {
    part.starts_with('[') && part.ends_with(']')
}

/// A non-negative list index.
fn index(part: &str) -> Option<usize> {
    part.parse::<i64>()
        .ok()
        .and_then(|i| usize::try_from(i).ok())
}

/// `[name=value]` into (`name`, `value`); `name` is empty for `[=value]`.
fn split_element_selector(part: &str) -> Result<(&str, &str), KustomizeError> {
    let inner = part.strip_suffix(']').unwrap_or(part);
    let inner = inner.strip_prefix('[').unwrap_or(inner);
    inner.split_once('=').ok_or_else(|| {
        KustomizeError::invalid(
            "list path element must contain fieldName=fieldValue for element to match",
        )
    })
}

fn kind_name(value: &Value) -> &'static str {
    match value {
        Value::Object(_) => "MappingNode",
        Value::Array(_) => "SequenceNode",
        _ => "ScalarNode",
    }
}

fn wrong_kind(expected: &str, value: &Value) -> KustomizeError {
    KustomizeError::invalid(format!(
        "wrong node kind: expected {expected} but got {}: node contents:\n{}",
        kind_name(value),
        yaml_text(value)
    ))
}

/// The elements of a list; a null has none; anything else is an error.
fn elements(value: &Value) -> Result<&[Value], KustomizeError> {
    match value {
        Value::Array(items) => Ok(items),
        Value::Null => Ok(&[]),
        other => Err(wrong_kind("SequenceNode", other)),
    }
}

/// The text a source path compares `[name=value]` with: a scalar's text, `""` otherwise.
fn text_of(value: &Value) -> String {
    tag_and_text(value).map(|(_, t)| t).unwrap_or_default()
}

/// Looks a source path up in `node`: `None` when a part is missing. Parts are trimmed and
/// empty ones skipped; `*` is refused; `-` is the last element.
pub fn lookup<'a>(node: &'a Value, path: &[String]) -> Result<Option<&'a Value>, KustomizeError> {
    let mut current = node;
    for part in path.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        let next = if let Ok(i) = part.parse::<i64>() {
            let i = usize::try_from(i).map_err(|_| {
                KustomizeError::invalid(format!("array index {i} cannot be negative"))
            })?;
            elements(current)?.get(i)
        } else if part == "-" {
            let items = elements(current)?;
            if items.is_empty() {
                return Err(KustomizeError::invalid(format!(
                    "index - of an empty list in {}",
                    path.join(".")
                )));
            }
            items.last()
        } else if part == "*" {
            return Err(KustomizeError::invalid(
                "wildcard is not supported in PathGetter",
            ));
        } else if is_element_selector(part) {
            let (name, value) = split_element_selector(part)?;
            let items = elements(current)?;
            if name.is_empty() {
                items.iter().find(|item| text_of(item) == value)
            } else {
                items.iter().find(|item| {
                    item.as_object()
                        .and_then(|m| m.get(name))
                        .is_some_and(|field| text_of(field) == value)
                })
            }
        } else {
            match current {
                Value::Null => None,
                Value::Object(map) => map.get(part),
                other => return Err(wrong_kind("MappingNode", other)),
            }
        };
        match next {
            Some(value) => current = value,
            None => return Ok(None),
        }
    }
    Ok(Some(current))
}

/// What kind of node `create` makes at the end of a target path (the source value's kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// A scalar: created empty and without a tag.
    Scalar,
    /// A map.
    Map,
    /// A list.
    List,
}

impl NodeKind {
    /// The text of a node of this kind just created, when it is a scalar.
    fn untagged(self) -> Option<&'static str> {
        (self == NodeKind::Scalar).then_some("")
    }

    fn empty(self) -> Value {
        match self {
            NodeKind::Scalar => Value::Null,
            NodeKind::Map => Value::Object(Map::new()),
            NodeKind::List => Value::Array(Vec::new()),
        }
    }
}

/// The kind of node to create for a part followed by `next` (`None` at the end of the path).
fn kind_before(next: Option<&String>, leaf: NodeKind) -> NodeKind {
    match next {
        None => leaf,
        Some(next) if is_element_selector(next) || index(next).is_some() => NodeKind::List,
        Some(_) => NodeKind::Map,
    }
}

/// A target field reached by a path, and, when the walk just created it as a scalar, its text:
/// such a scalar has no tag yet, so what is written into it is read back by its text.
pub type Visit<'v> = dyn FnMut(&mut Value, Option<&str>) -> Result<(), KustomizeError> + 'v;

/// Walks a target path from `node`, calling `visit` on every field it reaches, creating missing
/// parts when `create` gives the kind of the last one. Returns how many fields were reached.
///
/// Creating under a null (`spec: null` with `spec.replicas`) builds on a node that is not
/// kept, as kustomize's does: such fields are reached but nothing changes.
pub fn walk(
    node: &mut Value,
    path: &[String],
    create: Option<NodeKind>,
    untagged: Option<&str>,
    visit: &mut Visit<'_>,
) -> Result<usize, KustomizeError> {
    let Some(part) = path.first() else {
        visit(node, untagged)?;
        return Ok(1);
    };
    if index(part).is_some() {
        walk_index(node, path, create, visit)
    } else if is_element_selector(part) {
        walk_elements(node, path, create, visit)
    } else if part == "*" {
        let mut reached = 0;
        for item in elements_mut(node)? {
            reached += walk(item, &path[1..], create, None, visit)?;
        }
        Ok(reached)
    } else {
        walk_field(node, path, create, visit)
    }
}

fn elements_mut(value: &mut Value) -> Result<&mut [Value], KustomizeError> {
    match value {
        Value::Array(items) => Ok(items),
        Value::Null => Ok(&mut []),
        other => Err(wrong_kind("SequenceNode", other)),
    }
}

fn walk_field(
    node: &mut Value,
    path: &[String],
    create: Option<NodeKind>,
    visit: &mut Visit<'_>,
) -> Result<usize, KustomizeError> {
    let name = &path[0];
    let new_kind = create.map(|leaf| kind_before(path.get(1), leaf));
    match node {
        Value::Object(map) if name.is_empty() => {
            Err(wrong_kind("ScalarNode", &Value::Object(map.clone())))
        }
        Value::Object(map) => {
            if let Some(field) = map.get_mut(name.as_str()) {
                return walk(field, &path[1..], create, None, visit);
            }
            let Some(kind) = new_kind else { return Ok(0) };
            let field = map.entry(name.clone()).or_insert(kind.empty());
            walk(field, &path[1..], create, kind.untagged(), visit)
        }
        Value::Null => match new_kind {
            Some(kind) => walk(
                &mut kind.empty(),
                &path[1..],
                create,
                kind.untagged(),
                visit,
            ),
            None => Ok(0),
        },
        other => Err(wrong_kind("MappingNode", other)),
    }
}

fn walk_index(
    node: &mut Value,
    path: &[String],
    create: Option<NodeKind>,
    visit: &mut Visit<'_>,
) -> Result<usize, KustomizeError> {
    let i = index(&path[0]).unwrap_or(usize::MAX);
    let new_kind = create.map(|leaf| kind_before(path.get(1), leaf));
    let len = elements(node)?.len();
    if len == i {
        if let Some(kind) = new_kind {
            return match node {
                Value::Array(items) => {
                    items.push(kind.empty());
                    walk(&mut items[i], &path[1..], create, kind.untagged(), visit)
                }
                _ => walk(
                    &mut kind.empty(),
                    &path[1..],
                    create,
                    kind.untagged(),
                    visit,
                ),
            };
        }
    }
    match node {
        Value::Array(items) if i < items.len() => {
            walk(&mut items[i], &path[1..], create, None, visit)
        }
        _ => Err(KustomizeError::invalid(format!(
            "index {i} specified but only {len} elements found"
        ))),
    }
}

/// `[name=regex]` / `[=regex]`: every element whose field (or itself) printed matches.
fn walk_elements(
    node: &mut Value,
    path: &[String],
    create: Option<NodeKind>,
    visit: &mut Visit<'_>,
) -> Result<usize, KustomizeError> {
    let (field, pattern) = split_element_selector(&path[0])?;
    let regex = Regex::new(pattern).map_err(|e| {
        KustomizeError::invalid(format!("invalid regular expression {pattern:?}: {e}"))
    })?;
    let matches = |item: &Value| {
        if field.is_empty() {
            return regex.is_match(yaml_text(item).trim());
        }
        item.as_object()
            .and_then(|m| m.get(field))
            .is_some_and(|v| regex.is_match(yaml_text(v).trim()))
    };
    let mut reached = 0;
    for item in elements_mut(node)? {
        if matches(item) {
            reached += walk(item, &path[1..], create, None, visit)?;
        }
    }
    if reached > 0 || create.is_none() {
        return Ok(reached);
    }
    let created = if field.is_empty() {
        super::scalar::decode(super::scalar::Tag::Untagged, pattern)?
    } else {
        let mut element = Map::new();
        element.insert(
            field.to_owned(),
            super::scalar::decode(super::scalar::Tag::Untagged, pattern)?,
        );
        Value::Object(element)
    };
    if !matches(&created) {
        return Err(KustomizeError::invalid(format!(
            "the element created for {:?} does not match it",
            path[0]
        )));
    }
    // A created list item is an untagged scalar; a created element's field is one too, but
    // the walk goes on below the element itself.
    let untagged = field.is_empty().then_some(pattern);
    match node {
        Value::Array(items) => {
            items.push(created);
            let last = items.len() - 1;
            walk(&mut items[last], &path[1..], create, untagged, visit)
        }
        Value::Null => walk(&mut created.clone(), &path[1..], create, untagged, visit),
        other => Err(wrong_kind("SequenceNode", other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parts(path: &str) -> Vec<String> {
        split(path)
    }

    #[test]
    fn paths_split_as_kustomize_splits_them() {
        assert_eq!(parts("spec.replicas"), ["spec", "replicas"]);
        assert_eq!(parts(".spec.replicas"), ["spec", "replicas"]);
        assert_eq!(
            parts("spec.containers.[name=a.b].image"),
            ["spec", "containers", "[name=a.b]", "image"]
        );
        assert_eq!(
            parts("metadata.annotations.[a.b/c]"),
            ["metadata", "annotations", "a.b/c"]
        );
        assert_eq!(
            parts("metadata.annotations.[ab]"),
            ["metadata", "annotations", "[ab]"]
        );
        assert_eq!(
            parts(r"metadata.labels.a\.b"),
            ["metadata", "labels", "a.b"]
        );
    }

    #[test]
    fn source_lookups_compare_exactly() {
        let doc = json!({"list": [{"name": "app", "v": 1}, {"name": "myapp", "v": 2}]});
        let get = |p: &str| lookup(&doc, &split(p)).unwrap().cloned();
        assert_eq!(get("list.[name=myapp].v"), Some(json!(2)));
        assert_eq!(get("list.[name=ap].v"), None);
        assert_eq!(get("list.-.v"), Some(json!(2)));
        assert_eq!(get("list.0.v"), Some(json!(1)));
        assert_eq!(get("list.5.v"), None);
        assert!(lookup(&doc, &split("list.*.v")).is_err());
        assert!(lookup(&doc, &split("list.name")).is_err());
    }

    #[test]
    fn target_walks_match_by_unanchored_regex_and_create() {
        let mut doc = json!({"list": [{"name": "app"}, {"name": "myapp"}, {"name": "db"}]});
        let mut seen = Vec::new();
        let n = walk(
            &mut doc,
            &split("list.[name=app].name"),
            None,
            None,
            &mut |v, _| {
                seen.push(v.clone());
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(n, 2);
        assert_eq!(seen, [json!("app"), json!("myapp")]);
        let n = walk(
            &mut doc,
            &split("list.[name=web].port"),
            Some(NodeKind::Scalar),
            None,
            &mut |v, untagged| {
                assert_eq!(untagged, Some(""));
                *v = json!(80);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(n, 1);
        assert_eq!(doc["list"][3], json!({"name": "web", "port": 80}));
    }
}
