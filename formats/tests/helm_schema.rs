//! values.schema.json against the oracle (`helm template`, v3.19.5): drafts chosen by
//! `$schema`, unknown keywords, references (local, anchors, `$id`s, `urn:`, remote), the
//! metaschema check, formats and the applicators. Each case is a one-chart directory whose
//! values.yaml both tools read; both must accept it or both reject it, with the same message
//! under the chart's name.

mod oracle;

use oracle::helm_bin;
use std::path::{Path, PathBuf};
use std::process::Command;

use pallet_formats::helm::{self, RenderOptions};

fn chart(dir: &Path, schema: &str, values: &str) -> PathBuf {
    let root = dir.join("c");
    std::fs::create_dir_all(root.join("templates")).expect("mkdir");
    std::fs::write(
        root.join("Chart.yaml"),
        "apiVersion: v2\nname: c\nversion: 0.1.0\n",
    )
    .expect("write");
    std::fs::write(root.join("values.yaml"), values).expect("write");
    std::fs::write(root.join("values.schema.json"), schema).expect("write");
    std::fs::write(
        root.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n",
    )
    .expect("write");
    root
}

/// The text printed under the chart's name (`c:`), if the tool failed.
fn under_chart(msg: &str) -> String {
    msg.split_once("\nc:\n")
        .map(|(_, t)| t)
        .unwrap_or(msg)
        .trim_end()
        .to_string()
}

/// How a case's messages are compared.
#[derive(Clone, Copy, PartialEq)]
enum Cmp {
    /// Same text.
    Exact,
    /// The first line up to its second `:` (helm's offline network error names its resolver).
    Prefix,
    /// The first line, and pallet's `at '<path>'`s among helm's (helm prints the metaschema's
    /// nested tree, pallet its leaves).
    Paths,
    /// Same text once helm's quoted value (`'<value>'`) reads `value`: pallet does not quote
    /// values in `pattern` and `format` errors (they may come from Secrets).
    ValueHidden(&'static str),
}

fn paths(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("- at '"))
        .filter_map(|l| l.split('\'').next())
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn schema_drafts_references_and_keywords_match_helm() {
    use Cmp::*;
    let d4 = r#""$schema": "http://json-schema.org/draft-04/schema#""#;
    let d7 = r#""$schema": "http://json-schema.org/draft-07/schema#""#;
    let d2019 = r#""$schema": "https://json-schema.org/draft/2019-09/schema""#;
    let d2020 = r#""$schema": "https://json-schema.org/draft/2020-12/schema""#;
    let latest = r#""$schema": "http://json-schema.org/schema#""#;
    let cases: Vec<(String, &str, Cmp)> = vec![
        // Unknown keywords (bitnami's `form`, a stray `enabled`) are ignored.
        (r##"{"properties": {"a": {"type": "string", "form": true, "enabled": false, "x-k": {}}}}"##.into(), "a: 1", Exact),
        (r##"{"properties": {"a": {"type": "string", "form": true}}}"##.into(), "a: x", Exact),
        // $ref siblings: ignored before 2019-09, applied since.
        (format!(r##"{{{d7}, "definitions": {{"n": {{"type": "number"}}}}, "properties": {{"a": {{"$ref": "#/definitions/n", "maximum": 1}}}}}}"##), "a: 5", Exact),
        (format!(r##"{{{d2019}, "$defs": {{"n": {{"type": "number"}}}}, "properties": {{"a": {{"$ref": "#/$defs/n", "maximum": 1}}}}}}"##), "a: 5", Exact),
        (format!(r##"{{{d2020}, "$defs": {{"n": {{"type": "string"}}}}, "properties": {{"a": {{"$ref": "#/$defs/n", "maximum": 1}}}}}}"##), "a: 5", Exact),
        (r##"{"definitions": {"n": {"type": "string", "minLength": 2}}, "properties": {"a": {"$ref": "#/definitions/n"}}}"##.into(), "a: x", Exact),
        (format!(r##"{{{latest}, "properties": {{"a": {{"type": "integer"}}}}}}"##), "a: 1.5", Exact),
        // draft-04: boolean exclusiveMinimum, `id` anchors.
        (format!(r##"{{{d4}, "properties": {{"a": {{"minimum": 3, "exclusiveMinimum": true}}}}}}"##), "a: 3", Exact),
        (format!(r##"{{{d4}, "definitions": {{"p": {{"id": "#port", "type": "integer"}}}}, "properties": {{"a": {{"$ref": "#port"}}}}}}"##), "a: x", Exact),
        // Tuples: draft-07 items array + additionalItems, 2020-12 prefixItems + items.
        (format!(r##"{{{d7}, "properties": {{"t": {{"items": [{{"type": "string"}}], "additionalItems": {{"type": "boolean"}}}}}}}}"##), "t: [a, true, 3]", Exact),
        (format!(r##"{{{d7}, "properties": {{"t": {{"items": [{{"type": "string"}}], "additionalItems": false}}}}}}"##), "t: [a, b, c]", Exact),
        (r##"{"properties": {"t": {"prefixItems": [{"type": "string"}], "items": {"type": "boolean"}}}}"##.into(), "t: [a, true, 3]", Exact),
        // Anchors and $ids.
        (r##"{"$defs": {"p": {"$anchor": "port", "type": "integer", "maximum": 9}}, "properties": {"a": {"$ref": "#port"}}}"##.into(), "a: 10", Exact),
        (r##"{"$id": "https://example.com/root.json", "$defs": {"o": {"$id": "other.json", "type": "string"}}, "properties": {"b": {"$ref": "other.json"}}}"##.into(), "b: 1", Exact),
        (r##"{"$defs": {"o": {"$id": "https://example.com/o.json", "type": "string"}}, "properties": {"b": {"$ref": "https://example.com/o.json"}}}"##.into(), "b: 1", Exact),
        // References pallet does not load; a urn is the permissive schema.
        (r##"{"properties": {"a": {"$ref": "https://example.invalid/k8s.json#/definitions/x"}}}"##.into(), "a: 1", Prefix),
        (r##"{"properties": {"a": {"$ref": "other.json"}}}"##.into(), "a: 1", Prefix),
        (r##"{"properties": {"a": {"$ref": "urn:example:thing"}}}"##.into(), "a: 1", Exact),
        (r##"{"$schema": "https://example.invalid/meta", "type": "object"}"##.into(), "a: 1", Prefix),
        (r##"{"properties": {"a": {"$ref": "#/definitions/nope"}}}"##.into(), "a: 1", Exact),
        (r##"{"properties": {"a": {"$ref": "#nope"}}}"##.into(), "a: 1", Exact),
        (r##"{"$defs": {"x": {"$ref": "#/$defs/y"}, "y": {"$ref": "#/$defs/x"}}, "properties": {"a": {"$ref": "#/$defs/x"}}}"##.into(), "a: 1", Exact),
        // The metaschema: a keyword with a value of the wrong type.
        (r##"{"properties": {"a": {"minimum": "3"}}}"##.into(), "a: 1", Paths),
        (r##"{"type": "foo"}"##.into(), "a: 1", Paths),
        (r##"{"properties": {"a": {"exclusiveMinimum": true, "minimum": 3}}}"##.into(), "a: 1", Paths),
        (format!(r##"{{{d7}, "properties": {{"a": {{"minLength": -1}}}}}}"##), "a: x", Paths),
        // Formats: asserted before 2019-09 only.
        (format!(r##"{{{d7}, "properties": {{"ip": {{"format": "ipv4"}}}}}}"##), "ip: 1.2.3", ValueHidden("1.2.3")),
        (format!(r##"{{{d7}, "properties": {{"m": {{"format": "email"}}}}}}"##), "m: nobody", ValueHidden("nobody")),
        (r##"{"properties": {"ip": {"format": "ipv4"}}}"##.into(), "ip: 1.2.3", Exact),
        // Applicators and their nested messages.
        (r##"{"properties": {"m": {"oneOf": [{"type": "string"}, {"minLength": 1}]}}}"##.into(), "m: x", Exact),
        (r##"{"properties": {"m": {"anyOf": [{"type": "integer"}, {"type": "string", "pattern": "^a"}]}}}"##.into(), "m: b", ValueHidden("b")),
        (r##"{"properties": {"m": {"not": {"const": 3}}, "e": {"enum": [null, "a", 1.5]}}}"##.into(), "m: 3", Exact),
        (r##"{"properties": {"e": {"enum": [null, "a", 1.5]}}}"##.into(), "e: b", Exact),
        (r##"{"properties": {"t": {"if": {"properties": {"on": {"const": true}}}, "then": {"required": ["name"]}, "else": {"maxProperties": 0}}}}"##.into(), "t: {\"on\": true}", Exact),
        (r##"{"properties": {"l": {"propertyNames": {"maxLength": 3}}}}"##.into(), "l: {abcd: 1}", Exact),
        (r##"{"properties": {"l": {"contains": {"const": 1}, "minContains": 2, "maxContains": 3}}}"##.into(), "l: [1, 2]", Exact),
        (r##"{"properties": {"l": {"contains": {"const": 1}}}}"##.into(), "l: [2, 3]", Exact),
        (r##"{"properties": {"n": {"multipleOf": 0.1}}}"##.into(), "n: 0.3", Exact),
        (r##"{"properties": {"n": {"multipleOf": 0.1}}}"##.into(), "n: 0.35", Exact),
        (r##"{"properties": {"n": {"uniqueItems": true}}}"##.into(), "n: [1, 2, 1.0]", Exact),
        (r##"{"properties": {"o": {"dependentRequired": {"a": ["b", "c"]}}}}"##.into(), "o: {a: 1}", Exact),
        (r##"{"allOf": [{"properties": {"a": true}}], "unevaluatedProperties": false}"##.into(), "a: 1\nb: 2", Exact),
        (r##"{"prefixItems": [true], "properties": {"l": {"prefixItems": [true], "unevaluatedItems": false}}}"##.into(), "l: [1, 2]", Exact),
        (r##"{"$defs": {"t": {"$dynamicAnchor": "node", "type": "object", "properties": {"k": {"$dynamicRef": "#node"}}}}, "properties": {"tree": {"$ref": "#/$defs/t"}}}"##.into(), "tree: {k: {k: 1}}", Exact),
        (format!(r##"{{{d2019}, "$recursiveAnchor": true, "type": "object", "additionalProperties": {{"$recursiveRef": "#"}}}}"##), "a: {b: 1}", Exact),
        (r##"{"required": ["policy"], "properties": {"policy": {"type": "string"}}}"##.into(), "policy: null", Exact),
        (r##"{"properties": {"p": {"type": ["string", "null", "integer"]}}}"##.into(), "p: 1.5", Exact),
    ];
    let mut wrong = Vec::new();
    for (i, (schema, values, cmp)) in cases.iter().enumerate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = chart(dir.path(), schema, values);
        let out = Command::new(helm_bin())
            .args(["template", "rel"])
            .arg(&root)
            .output()
            .expect("running helm");
        let helm = if out.status.success() {
            Ok(())
        } else {
            Err(under_chart(&String::from_utf8_lossy(&out.stderr)))
        };
        let ours = helm::render(&root, &RenderOptions::default())
            .map(|_| ())
            .map_err(|e| under_chart(&e.to_string()));
        let same = match (&ours, &helm) {
            (Ok(()), Ok(())) => true,
            (Err(o), Err(h)) => match cmp {
                Exact => o == h,
                ValueHidden(value) => *o == h.replace(&format!("'{value}'"), "value"),
                Prefix => {
                    let head = |s: &str| {
                        s.lines()
                            .next()
                            .unwrap_or("")
                            .splitn(3, ':')
                            .take(2)
                            .collect::<Vec<_>>()
                            .join(":")
                    };
                    head(o) == head(h)
                }
                Paths => {
                    let (po, ph) = (paths(o), paths(h));
                    o.lines().next() == h.lines().next()
                        && !po.is_empty()
                        && po.iter().all(|p| ph.contains(p))
                }
            },
            _ => false,
        };
        if !same {
            wrong.push(format!(
                "case {i}: {schema}\nvalues: {values}\n  pallet: {ours:?}\n  helm:   {helm:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}
