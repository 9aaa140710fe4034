//! The canonical form of a rendered object set and its digest, which identify a revision.
//!
//! Canonical form (version 1), byte for byte:
//! - objects sorted by [`ObjectKey`] (group, kind, namespace, name), ties (possible only in sets that
//!   were not checked for duplicates) broken by the object's canonical line;
//! - each object written as one line of compact JSON (no spaces), map keys sorted by their UTF-8
//!   bytes at every level, strings escaped as `serde_json` escapes them, numbers as `serde_json`
//!   prints them, followed by `\n`;
//! - origins (file, document) are not part of it: moving a manifest between files does not change it.
//!
//! The digest is `sha256:` followed by the lowercase hex SHA-256 of those bytes.

use std::fmt::Write as _;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::object::Object;

/// The canonical bytes of an object set (see the module docs for the exact form).
pub fn canonical_form(objects: &[Object]) -> Vec<u8> {
    let mut lines: Vec<(crate::object::ObjectKey, String)> = objects
        .iter()
        .map(|object| {
            let mut line = String::new();
            write_map(object.body(), &mut line);
            (object.key(), line)
        })
        .collect();
    lines.sort();
    let mut out = Vec::with_capacity(lines.iter().map(|(_, line)| line.len() + 1).sum());
    for (_, line) in lines {
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out
}

/// The digest of an object set: `sha256:<hex>` of its canonical form.
pub fn digest(objects: &[Object]) -> String {
    digest_bytes(&canonical_form(objects))
}

/// `sha256:<hex>` of some bytes.
pub fn digest_bytes(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for byte in hash {
        // Writing to a String cannot fail.
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// One value as canonical compact JSON. Keys are sorted here rather than relying on `serde_json`'s map
/// type, whose order depends on whether some crate in the build enabled `preserve_order`.
pub fn write_canonical_json(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => write_map(map, out),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical_json(item, out);
            }
            out.push(']');
        }
        Value::String(text) => write_string(text, out),
        other => {
            // Null, booleans and numbers have one serde_json spelling.
            out.push_str(&other.to_string());
        }
    }
}

fn write_map(map: &serde_json::Map<String, Value>, out: &mut String) {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out.push('{');
    for (index, (key, value)) in entries.into_iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        write_string(key, out);
        out.push(':');
        write_canonical_json(value, out);
    }
    out.push('}');
}

fn write_string(text: &str, out: &mut String) {
    out.push_str(&Value::String(text.to_owned()).to_string());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::parse_manifests;

    #[test]
    fn order_and_key_order_do_not_matter() {
        let a = parse_manifests(
            "a.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: x}\ndata: {z: '1', a: '2'}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
        )
        .unwrap();
        let b = parse_manifests(
            "other.yaml",
            "kind: ConfigMap\napiVersion: v1\nmetadata: {name: a}\n---\ndata: {a: '2', z: '1'}\nmetadata: {namespace: x, name: b}\nkind: ConfigMap\napiVersion: v1\n",
        )
        .unwrap();
        assert_eq!(canonical_form(&a), canonical_form(&b));
        assert_eq!(digest(&a), digest(&b));
        let text = String::from_utf8(canonical_form(&a)).unwrap();
        assert_eq!(
            text,
            "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\"}}\n\
             {\"apiVersion\":\"v1\",\"data\":{\"a\":\"2\",\"z\":\"1\"},\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"b\",\"namespace\":\"x\"}}\n"
        );
    }

    #[test]
    fn content_change_changes_digest() {
        let a = parse_manifests(
            "a.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n",
        )
        .unwrap();
        let b = parse_manifests(
            "a.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: w}\n",
        )
        .unwrap();
        assert_ne!(digest(&a), digest(&b));
        assert!(digest(&a).starts_with("sha256:"));
        assert_eq!(digest(&a).len(), 7 + 64);
    }
}
