//! YAML read the way helm reads it (sigs.k8s.io/yaml over go-yaml v2, YAML 1.1), for
//! values.yaml, Chart.yaml and `fromYaml`.
//!
//! serde-saphyr does most of it with its legacy options (octal `0644`, the last of repeated
//! keys). What it cannot do is YAML 1.1's boolean *keys*: go-yaml v2 reads an unquoted key
//! `on`, `yes`, `y`, `off`, `no` or `n` (any of their spellings) as a boolean, and the JSON step
//! then names it `"true"` or `"false"`, while a quoted `"on":` stays `"on"`. Quoting is not
//! visible in the parsed value, so the parser's events are read to find the plain keys, which
//! are then renamed in the parsed value.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use serde_saphyr::granit_parser::{Event, Options as ParserOptions, Parser, ScalarStyle};

use crate::yaml_path::{navigate, node_done, Frame, Step};

/// The name the JSON step gives a plain key YAML 1.1 reads as a boolean.
fn bool_key_name(key: &str) -> Option<&'static str> {
    match key {
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "true" | "True" | "TRUE" => {
            Some("true")
        }
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "false" | "False" | "FALSE" => {
            Some("false")
        }
        _ => None,
    }
}

/// A scalar key of a mapping in the first document, in document order.
struct KeyEvent {
    /// Path of the mapping holding the key (original key names).
    parent: Vec<Step>,
    key: String,
    plain: bool,
}

fn current_path(stack: &[Frame]) -> Vec<Step> {
    stack
        .iter()
        .filter_map(|f| match f {
            Frame::Map { key: Some(k) } => Some(Step::Key(k.clone())),
            Frame::Seq { index } => Some(Step::Index(*index)),
            _ => None,
        })
        .collect()
}

/// Every scalar mapping key of the first document, in order, with its style.
fn key_events(text: &str) -> Vec<KeyEvent> {
    let mut out = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    // Comments are not wanted here either; kept, they fail past a few dozen consecutive lines.
    let mut options = ParserOptions::default();
    options.set_emit_comments(false);
    for event in Parser::new_from_str_with_options(text, options) {
        // Parse errors are reported by the value parser; stop looking here.
        let Ok((event, _)) = event else {
            break;
        };
        match event {
            Event::DocumentEnd => break,
            Event::Scalar(value, style, ..) => {
                if matches!(stack.last(), Some(Frame::Map { key: None })) {
                    if !stack.iter().any(|f| matches!(f, Frame::Key)) {
                        out.push(KeyEvent {
                            parent: current_path(&stack),
                            key: value.to_string(),
                            plain: style == ScalarStyle::Plain,
                        });
                    }
                    if let Some(Frame::Map { key }) = stack.last_mut() {
                        *key = Some(value.to_string());
                    }
                } else {
                    node_done(&mut stack);
                }
            }
            Event::Alias(_) => node_done(&mut stack),
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                if matches!(stack.last(), Some(Frame::Map { key: None })) {
                    // A complex key: the value after it is not a key.
                    if let Some(Frame::Map { key }) = stack.last_mut() {
                        *key = Some(String::new());
                    }
                    stack.push(Frame::Key);
                } else if matches!(event, Event::MappingStart(..)) {
                    stack.push(Frame::Map { key: None });
                } else {
                    stack.push(Frame::Seq { index: 0 });
                }
            }
            Event::MappingEnd | Event::SequenceEnd => {
                let closed = stack.pop();
                if !matches!(closed, Some(Frame::Key)) {
                    node_done(&mut stack);
                }
            }
            _ => {}
        }
    }
    out
}

/// A cheap scan before reading the events: is any `word:` with a boolean word right before a
/// colon (after a space, `{`, `,`, `-`, `?` or a line start)?
fn may_have_bool_key(text: &str) -> bool {
    let b = text.as_bytes();
    b.iter().enumerate().any(|(i, c)| {
        if *c != b':' {
            return false;
        }
        let start = b[..i]
            .iter()
            .rposition(|x| matches!(x, b' ' | b'\t' | b'\n' | b'{' | b',' | b'-' | b'?'))
            .map_or(0, |p| p + 1);
        std::str::from_utf8(&b[start..i])
            .ok()
            .and_then(bool_key_name)
            .is_some()
    })
}

/// Renames the plain boolean keys of `text`'s parsed value `v` as go-yaml v2 names them; of
/// keys that end up with the same name, the one later in the document wins, as in helm.
pub fn rename_bool_keys(text: &str, v: &mut Value) {
    if !may_have_bool_key(text) {
        return;
    }
    let events = key_events(text);
    if !events
        .iter()
        .any(|e| e.plain && bool_key_name(&e.key).is_some_and(|n| n != e.key))
    {
        return;
    }
    // The keys of each mapping in document order, with the name each ends up with.
    let mut maps: BTreeMap<Vec<Step>, Vec<(String, String)>> = BTreeMap::new();
    for e in events {
        let name = match bool_key_name(&e.key) {
            Some(n) if e.plain => n.to_string(),
            _ => e.key.clone(),
        };
        maps.entry(e.parent).or_default().push((e.key, name));
    }
    // Deepest first, so that the parents of a path still have their original names.
    let mut parents: Vec<Vec<Step>> = maps
        .iter()
        .filter(|(_, keys)| keys.iter().any(|(k, n)| k != n))
        .map(|(p, _)| p.clone())
        .collect();
    parents.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for parent in parents {
        let Some(Value::Object(map)) = navigate(v, &parent) else {
            continue;
        };
        let old = std::mem::take(map);
        let mut new = Map::new();
        // The last key (in document order) of each final name wins.
        for (key, name) in maps[&parent].iter().rev() {
            if !new.contains_key(name) {
                if let Some(val) = old.get(key) {
                    new.insert(name.clone(), val.clone());
                }
            }
        }
        for (key, val) in old {
            if !maps[&parent].iter().any(|(k, _)| *k == key) {
                new.insert(key, val);
            }
        }
        *map = new;
    }
}

/// Parses YAML as helm does: serde-saphyr with YAML 1.1 numbers and repeated keys, then the
/// boolean keys renamed.
pub fn parse(text: &str) -> Result<Value, String> {
    let (mut v, fixed): (Value, _) =
        crate::object::from_yaml_str_fixed(text).map_err(|e| values_error(&e))?;
    rename_bool_keys(fixed.as_deref().unwrap_or(text), &mut v);
    Ok(v)
}

/// The reader's error in a user's terms; nesting past the values budget is a budget breach.
fn values_error(error: &serde_saphyr::Error) -> String {
    use serde_saphyr::budget::BudgetBreach as Reader;
    let mut inner = error;
    while let serde_saphyr::Error::WithSnippet { error, .. } = inner {
        inner = error;
    }
    match inner {
        serde_saphyr::Error::Budget {
            breach: Reader::Depth { depth },
            location,
        } => format!(
            "line {} column {}: {}",
            location.line(),
            location.column(),
            crate::budget::breach(crate::budget::BudgetBreach::new(
                "values nesting depth",
                crate::budget::MAX_VALUES_DEPTH as u64,
                depth.to_string(),
            ))
        ),
        serde_saphyr::Error::Budget { .. } => crate::object::yaml_error_message(error),
        _ => {
            let message = crate::object::yaml_error_message(error);
            // The reader's own guard against deep flow collections (`[[[[...`), hit before
            // the depth is counted.
            match message.strip_suffix("recursion limit exceeded") {
                Some(at) => format!(
                    "{at}{}",
                    crate::budget::breach(crate::budget::BudgetBreach::new(
                        "values nesting depth",
                        crate::budget::MAX_VALUES_DEPTH as u64,
                        "over 255 (nested flow collections)",
                    ))
                ),
                None => message,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_boolean_keys_are_renamed_quoted_ones_kept() {
        let text = "on: push\n\"off\": kept\nnested:\n  y: 1\n  list:\n  - n: 2\n    'no': 3\nyes: first\ntrue: second\n";
        let v = parse(text).unwrap();
        assert_eq!(v["true"], "second", "{v}");
        assert_eq!(v["off"], "kept", "{v}");
        assert!(v.get("on").is_none(), "{v}");
        assert_eq!(v["nested"]["true"], 1, "{v}");
        assert_eq!(v["nested"]["list"][0]["false"], 2, "{v}");
        assert_eq!(v["nested"]["list"][0]["no"], 3, "{v}");
        let v = parse("a:\n  key: |\n    on: not a key\n").unwrap();
        assert_eq!(v["a"]["key"], "on: not a key\n");
    }
}
