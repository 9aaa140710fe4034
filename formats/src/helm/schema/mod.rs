//! values.schema.json, validated as helm v3.19 validates it: with the semantics and messages of
//! `github.com/santhosh-tekuri/jsonschema/v6` as helm configures it (`pkg/chartutil/jsonschema.go`).
//!
//! - The draft comes from `$schema` (draft-04, -06, -07, 2019-09, 2020-12, with `http` or
//!   `https`, `#` or not; `json-schema.org/schema` is the latest); without one it is 2020-12.
//! - The schema document must be valid against its draft's metaschema (`meta.rs` checks
//!   the keywords' values); unknown keywords are ignored, as the metaschemas allow them.
//! - `$ref`, `$dynamicRef` and `$recursiveRef` resolve against `$id`s and anchors in the
//!   document, whose own URL is `file:///values.schema.json`. A `urn:` reference is the
//!   permissive schema `true` (helm logs a warning). Any other document (`https://…`, a
//!   relative file) is not loaded: pallet never reads the network or the agent's files while
//!   rendering. helm fetches `http(s)` references; offline it fails with `failing loading
//!   "<url>"`, and pallet always fails that way.
//! - `format` is asserted for drafts before 2019-09 only (helm does not call `AssertFormat`).
//! - Errors are the same tree helm prints (`- at '/policy': got null, want string`, with nested
//!   causes under `allOf`, `anyOf`, `oneOf`, `contains`, `propertyNames`), and the same quirks
//!   (items after `prefixItems` and `additionalItems` are numbered from 0). Where helm's order
//!   depends on Go's map order, pallet sorts by property name.
//!
//! Why a hand-written validator and not the `jsonschema` crate: measured on this machine, the
//! crate with default features off still pulls in 99 crates (ICU/idna, fancy-regex, fraction,
//! uuid-simd, ahash, parking_lot...) and a cold release build of it took 2 min 12 s of wall time
//! on the 2 shared cores; its patterns are ECMA-262 (fancy-regex) where helm's are Go's RE2,
//! and its errors are flat, with its own wording, so helm's nested messages would have to be
//! rebuilt from them anyway. Following santhosh-tekuri's validator directly gives helm's
//! messages and paths by construction, in about a thousand lines.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value as Json};

mod compile;
mod meta;
mod validate;

use compile::Compiled;
use validate::{json_type, quote, Kind, Scope, Validator};

/// The URL helm gives the chart's schema document.
const ROOT_URL: &str = "file:///values.schema.json";

/// A JSON Schema draft, as santhosh-tekuri/jsonschema numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Draft {
    D4 = 4,
    D6 = 6,
    D7 = 7,
    D2019 = 2019,
    D2020 = 2020,
}

impl Draft {
    /// The draft a `$schema` URL names (helm's `draftFromURL`), if it is one of the five.
    fn from_url(url: &str) -> Option<Draft> {
        let (u, frag) = split_fragment(url);
        if !frag.is_empty() {
            return None;
        }
        let u = u
            .strip_prefix("http://")
            .or_else(|| u.strip_prefix("https://"))
            .unwrap_or(u);
        Some(match u {
            "json-schema.org/schema" | "json-schema.org/draft/2020-12/schema" => Draft::D2020,
            "json-schema.org/draft/2019-09/schema" => Draft::D2019,
            "json-schema.org/draft-07/schema" => Draft::D7,
            "json-schema.org/draft-06/schema" => Draft::D6,
            "json-schema.org/draft-04/schema" => Draft::D4,
            _ => return None,
        })
    }

    /// The metaschema URL, as helm names it in a metaschema error.
    pub(crate) fn url(self) -> &'static str {
        match self {
            Draft::D4 => "http://json-schema.org/draft-04/schema",
            Draft::D6 => "http://json-schema.org/draft-06/schema",
            Draft::D7 => "http://json-schema.org/draft-07/schema",
            Draft::D2019 => "https://json-schema.org/draft/2019-09/schema",
            Draft::D2020 => "https://json-schema.org/draft/2020-12/schema",
        }
    }

    fn id_keyword(self) -> &'static str {
        if self == Draft::D4 {
            "id"
        } else {
            "$id"
        }
    }
}

/// Validates `values` against the chart's schema document. `Err` is the text helm prints under
/// the chart's name: the schema's own error (a metaschema violation, an unresolvable `$ref`)
/// or the violations, one `- at '<path>': <message>` line each, causes indented below.
pub fn validate(schema: &Json, values: &Json) -> Result<(), String> {
    validate_compiled(&Compiled::new(schema)?, values)
}

/// Compiled schemas by the SHA-256 of their document, so that a chart rendered again (every
/// reconcile) does not compile its schema again (loki's 570 kB schema takes ~20 ms).
type SchemaCache = HashMap<[u8; 32], Arc<Result<Compiled, String>>>;
static CACHE: Mutex<Option<SchemaCache>> = Mutex::new(None);

/// Bound on cached schemas; past it the cache starts over.
const CACHE_LIMIT: usize = 256;

/// [`validate`] for the document's bytes (values.schema.json as the chart holds it), with
/// compiled schemas cached. `Err` as for [`validate`]; a document that is not JSON is an error
/// too.
pub fn validate_document(raw: &[u8], values: &Json) -> Result<(), String> {
    use sha2::Digest as _;
    let key: [u8; 32] = sha2::Sha256::digest(raw).into();
    let cached = CACHE
        .lock()
        .ok()
        .and_then(|c| c.as_ref().and_then(|m| m.get(&key).cloned()));
    let compiled = match cached {
        Some(c) => c,
        None => {
            let compiled = Arc::new(
                serde_json::from_slice::<Json>(raw)
                    .map_err(|e| format!("values.schema.json is not valid JSON: {e}"))
                    .and_then(|doc| Compiled::new(&doc)),
            );
            if let Ok(mut c) = CACHE.lock() {
                let m = c.get_or_insert_with(HashMap::new);
                if m.len() >= CACHE_LIMIT {
                    m.clear();
                }
                m.insert(key, Arc::clone(&compiled));
            }
            compiled
        }
    };
    match compiled.as_ref() {
        Ok(c) => validate_compiled(c, values),
        Err(e) => Err(e.clone()),
    }
}

fn validate_compiled(compiled: &Compiled, values: &Json) -> Result<(), String> {
    let empty = Json::Object(Map::new());
    let values = if values.is_null() { &empty } else { values };
    let vd = Validator {
        c: compiled,
        track: compiled.needs_eval,
    };
    let scope = Scope {
        node: 0,
        kw: "",
        vid: 0,
        parent: None,
    };
    match vd.validate(0, values, &mut Vec::new(), &scope, false) {
        Ok(_) => Ok(()),
        Err(e) => {
            let causes = if matches!(e.kind, Kind::Group) {
                e.causes
            } else {
                vec![e]
            };
            let mut out = String::new();
            for c in &causes {
                c.display(&mut out, 1);
            }
            Err(out.trim_start_matches('\n').to_string())
        }
    }
}

// ---- URLs and pointers ----

/// Splits at the first `#`: (url, fragment).
fn split_fragment(s: &str) -> (&str, &str) {
    match s.split_once('#') {
        Some((u, f)) => (u, f),
        None => (s, ""),
    }
}

/// Go's `url.PathUnescape`, leniently (a bad escape stays as written).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(n) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(n);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A JSON pointer token (`~` → `~0`, `/` → `~1`).
pub(crate) fn escape(tok: &str) -> String {
    tok.replace('~', "~0").replace('/', "~1")
}

fn unescape(tok: &str) -> String {
    tok.replace("~1", "/").replace("~0", "~")
}

/// The value at a JSON pointer (`""` is the document).
fn lookup<'a>(doc: &'a Json, ptr: &str) -> Option<&'a Json> {
    if ptr.is_empty() {
        return Some(doc);
    }
    let mut cur = doc;
    for tok in ptr.strip_prefix('/')?.split('/') {
        let tok = unescape(tok);
        cur = match cur {
            Json::Object(m) => m.get(&tok)?,
            Json::Array(a) => a.get(tok.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

pub(crate) fn has_scheme(s: &str) -> bool {
    let Some((scheme, _)) = s.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
}

/// RFC 3986 dot-segment removal.
fn remove_dots(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segs: Vec<&str> = path.split('/').collect();
    for (i, seg) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        match *seg {
            "." => {
                if last {
                    out.push("");
                }
            }
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
                if last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    out.join("/")
}

/// Resolves `reference` (no fragment) against `base` (absolute, no fragment), RFC 3986.
fn join_url(base: &str, reference: &str) -> String {
    if reference.is_empty() {
        return base.to_string();
    }
    if has_scheme(reference) {
        return reference.to_string();
    }
    let Some((scheme, rest)) = base.split_once(':') else {
        return reference.to_string();
    };
    if let Some(r) = reference.strip_prefix("//") {
        return format!("{scheme}://{r}");
    }
    let Some(after) = rest.strip_prefix("//") else {
        // An opaque base (`urn:x`): Go keeps the base.
        return base.to_string();
    };
    let (authority, path) = match after.find('/') {
        Some(i) => (&after[..i], &after[i..]),
        None => (after, ""),
    };
    let path = path.split('?').next().unwrap_or("");
    let new_path = if reference.starts_with('/') {
        remove_dots(reference)
    } else if reference.starts_with('?') {
        format!("{path}{reference}")
    } else {
        let dir = match path.rfind('/') {
            Some(i) => &path[..=i],
            None => "/",
        };
        remove_dots(&format!("{dir}{reference}"))
    };
    format!("{scheme}://{authority}{new_path}")
}

#[cfg(test)]
mod tests {
    use super::validate::is_multiple;
    use super::*;
    use serde_json::json;

    fn check(schema: Json, v: Json) -> String {
        validate(&schema, &v).err().unwrap_or_default()
    }

    #[test]
    fn messages_and_paths_are_helms() {
        let schema = json!({
            "type": "object",
            "required": ["image"],
            "properties": {
                "image": {"type": "object", "properties": {"tag": {"type": "string"}}, "additionalProperties": false},
                "replicas": {"allOf": [{"type": "integer"}, {"minimum": 1}]},
                "mode": {"enum": ["a", "b"]}
            }
        });
        let e = check(
            schema.clone(),
            json!({"image": {"tag": 3, "x": 1}, "replicas": 0, "mode": "c"}),
        );
        assert_eq!(
            e,
            "- at '/image': validation failed\n  - at '/image/tag': got number, want string\n  - at '/image': additional properties 'x' not allowed\n- at '/mode': value must be one of 'a', 'b'\n- at '/replicas': 'allOf' failed\n  - at '/replicas': minimum: got 0, want 1"
        );
        assert_eq!(
            check(schema, json!({})),
            "- at '': missing property 'image'"
        );
    }

    #[test]
    fn unknown_keywords_are_ignored() {
        let s = json!({"properties": {"a": {"type": "string", "form": true, "enabled": 1}}});
        assert_eq!(check(s.clone(), json!({"a": "x"})), "");
        assert_eq!(
            check(s, json!({"a": 1})),
            "- at '/a': got number, want string"
        );
    }

    #[test]
    fn draft_decides_ref_siblings_and_tuple_items() {
        let s = |d: &str| {
            json!({"$schema": d, "definitions": {"n": {"type": "number"}},
                   "properties": {"a": {"$ref": "#/definitions/n", "maximum": 1}}})
        };
        assert_eq!(
            check(
                s("http://json-schema.org/draft-07/schema#"),
                json!({"a": 5})
            ),
            ""
        );
        assert_eq!(
            check(
                s("https://json-schema.org/draft/2020-12/schema"),
                json!({"a": 5})
            ),
            "- at '/a': maximum: got 5, want 1"
        );
        let d4 = json!({"$schema": "http://json-schema.org/draft-04/schema#",
                        "properties": {"a": {"minimum": 3, "exclusiveMinimum": true}}});
        assert_eq!(
            check(d4, json!({"a": 3})),
            "- at '/a': exclusiveMinimum: got 3, want 3"
        );
    }

    #[test]
    fn remote_references_fail_without_loading() {
        let e = check(
            json!({"properties": {"a": {"$ref": "https://example.com/s.json#/x"}}}),
            json!({}),
        );
        assert!(
            e.starts_with("failing loading \"https://example.com/s.json\""),
            "{e}"
        );
        let e = check(
            json!({"properties": {"a": {"$ref": "other.json"}}}),
            json!({}),
        );
        assert!(
            e.starts_with("failing loading \"file:///other.json\""),
            "{e}"
        );
        assert_eq!(
            check(
                json!({"properties": {"a": {"$ref": "urn:x:y"}}}),
                json!({"a": 1})
            ),
            ""
        );
    }

    #[test]
    fn ids_and_anchors_resolve_in_the_document() {
        let s = json!({
            "$id": "https://example.com/root.json",
            "$defs": {"p": {"$anchor": "port", "type": "integer"},
                      "o": {"$id": "other.json", "type": "string"}},
            "properties": {"a": {"$ref": "#port"}, "b": {"$ref": "other.json"}}
        });
        assert_eq!(
            check(s, json!({"a": "x", "b": 1})),
            "- at '/a': got string, want integer\n- at '/b': got number, want string"
        );
    }

    #[test]
    fn unevaluated_properties_see_what_subschemas_evaluated() {
        let s = json!({"allOf": [{"properties": {"a": true}}], "unevaluatedProperties": false});
        assert_eq!(check(s.clone(), json!({"a": 1})), "");
        assert_eq!(check(s, json!({"a": 1, "b": 2})), "- at '/b': false schema");
    }

    #[test]
    fn multiple_of_is_exact_on_decimals() {
        assert!(is_multiple(0.3, 0.1));
        assert!(is_multiple(10.0, 2.5));
        assert!(!is_multiple(0.35, 0.1));
    }

    #[test]
    fn urls_join_as_rfc_3986() {
        assert_eq!(join_url(ROOT_URL, "other.json"), "file:///other.json");
        assert_eq!(
            join_url("https://a.b/x/y.json", "../z.json"),
            "https://a.b/z.json"
        );
        assert_eq!(join_url("https://a.b/x/y.json", "//c.d/e"), "https://c.d/e");
    }
}
