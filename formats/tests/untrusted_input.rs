//! Property tests of the readers of bytes that come from third parties: the helm template lexer
//! and parser, YAML reading, and semver ranges. Each property holds for every generated case:
//! the reader returns (never panics) within a time bound, and where a reader has an inverse or
//! an invariant, it holds.
//!
//! The number of cases is bounded so that CI stays fast (`PROPTEST_CASES` raises it for a
//! longer local run); a failure found is kept in `proptest-regressions/` and replayed first.

use std::time::{Duration, Instant};

use pallet_formats::helm::parse::{parse, Node};
use pallet_formats::object::{from_yaml_str, parse_manifests};
use pallet_formats::semver::{Range, Version};
use proptest::prelude::*;
use serde_json::Value;

/// What one case may take, generously: every reader here is linear or close to it, so a case
/// near this bound is a complexity bug, not a slow machine.
const CASE_TIME: Duration = Duration::from_secs(2);

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(cases),
        // Shrinking a slow case can take many runs of it: bounded too.
        max_shrink_iters: 256,
        ..ProptestConfig::default()
    }
}

/// Runs `f`, failing the case when it takes longer than [`CASE_TIME`].
fn timed<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, TestCaseError> {
    let start = Instant::now();
    let out = f();
    let took = start.elapsed();
    prop_assert!(took < CASE_TIME, "{what} took {took:?}");
    Ok(out)
}

/// Pieces of template syntax, glued at random: most strings made of them are invalid, some
/// deeply nested, which is what an attacker would send.
fn template_piece() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "{{", "}}", "{{-", "-}}", " ", "\n", "if", "else", "end", "range", "with", "define",
        "block", "template", "include", "\"x\"", "`raw`", "'c'", "(", ")", "|", ".", ".Values",
        ".a.b", "$", "$x", ":=", "=", ",", "1", "-2.5e3", "0x1F", "nil", "true", "/*", "*/",
        "printf", "tpl", "break", "continue", "text", "\\", "\"", "é", "\u{0}",
    ])
}

fn template_text() -> impl Strategy<Value = String> {
    prop::collection::vec(template_piece(), 0..120).prop_map(|pieces| pieces.concat())
}

/// The text of every node, in order, for a template without actions.
fn texts(nodes: &[Node]) -> Option<String> {
    let mut out = String::new();
    for node in nodes {
        match node {
            Node::Text { text, .. } => out.push_str(text),
            _ => return None,
        }
    }
    Some(out)
}

/// JSON values as YAML documents carry them (no floats: their text form is a separate
/// concern of the YAML writer, not of reading).
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        "[a-zA-Z0-9 :#\\-'\"{}\\[\\],&*!|>%@`]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z0-9_.\\-]{1,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn semver_text() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "1",
        "0",
        "2",
        "10",
        "999999999999999999999",
        ".",
        "-",
        "+",
        "x",
        "X",
        "*",
        "^",
        "~",
        ">",
        "<",
        "=",
        "!",
        ">=",
        "<=",
        "||",
        ",",
        " ",
        "v",
        "alpha",
        "rc.1",
        "a-b",
        "",
        "\u{0}",
    ]);
    prop::collection::vec(piece, 0..30).prop_map(|pieces| pieces.concat())
}

fn version_parts() -> impl Strategy<Value = (u64, u64, u64, String, String)> {
    (
        0u64..1_000_000,
        0u64..1_000_000,
        0u64..1_000_000,
        prop::option::of("[a-z][a-z0-9]{0,5}(\\.[1-9][0-9]{0,3})?")
            .prop_map(Option::unwrap_or_default),
        prop::option::of("[a-z0-9]{1,6}").prop_map(Option::unwrap_or_default),
    )
}

fn version_text(parts: &(u64, u64, u64, String, String)) -> String {
    let (major, minor, patch, pre, meta) = parts;
    let mut text = format!("{major}.{minor}.{patch}");
    if !pre.is_empty() {
        text.push('-');
        text.push_str(pre);
    }
    if !meta.is_empty() {
        text.push('+');
        text.push_str(meta);
    }
    text
}

proptest! {
    #![proptest_config(config(400))]

    /// The lexer and parser return an error or a tree for any text, in bounded time.
    #[test]
    fn template_parsing_never_panics(src in template_text()) {
        let _ = timed("parse", || parse("t.yaml", &src))?;
    }

    /// Arbitrary bytes (as text) too.
    #[test]
    fn template_parsing_of_any_text_never_panics(src in any::<String>()) {
        let _ = timed("parse", || parse("t.yaml", &src))?;
    }

    /// Text without actions is one text node holding it unchanged.
    #[test]
    fn text_without_actions_is_kept_as_is(src in "[^{]{0,200}") {
        let parsed = timed("parse", || parse("t.yaml", &src))?;
        let parsed = parsed.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(texts(&parsed.nodes), Some(src));
    }

    /// Deep nesting of parentheses and blocks is refused or parsed, never a stack overflow.
    #[test]
    fn deep_nesting_is_bounded(depth in 1usize..3000, kind in 0u8..3) {
        let src = match kind {
            0 => format!("{{{{ {}1{} }}}}", "(".repeat(depth), ")".repeat(depth)),
            1 => format!("{}x{}", "{{ if 1 }}".repeat(depth), "{{ end }}".repeat(depth)),
            _ => format!("{}x{}", "{{ range . }}".repeat(depth), "{{ end }}".repeat(depth)),
        };
        let _ = timed("parse", || parse("t.yaml", &src))?;
    }

    /// Reading YAML returns a value or an error for any text, in bounded time.
    #[test]
    fn yaml_reading_never_panics(text in any::<String>()) {
        let _ = timed("from_yaml_str", || from_yaml_str::<Value>(&text))?;
        let _ = timed("parse_manifests", || parse_manifests("m.yaml", &text))?;
    }

    /// YAML-looking text: indentation, flow collections, anchors, aliases and tags.
    #[test]
    fn yaml_like_text_never_panics(
        pieces in prop::collection::vec(prop::sample::select(vec![
            "a:", " ", "\n", "  ", "- ", "[", "]", "{", "}", ",", "&x ", "*x", "!!str ", "!t ",
            "'q'", "\"d\"", "|", ">", "---\n", "...\n", "#c", "? ", "1", "~", "<<: *x",
        ]), 0..150)
    ) {
        let text = pieces.concat();
        let _ = timed("from_yaml_str", || from_yaml_str::<Value>(&text))?;
        let _ = timed("parse_manifests", || parse_manifests("m.yaml", &text))?;
    }

    /// JSON is YAML: a value written as JSON reads back as the same value.
    #[test]
    fn json_text_reads_back_as_the_same_value(value in json_value()) {
        let text = serde_json::to_string(&value).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let read = timed("from_yaml_str", || from_yaml_str::<Value>(&text))?;
        let read = read.map_err(|e| TestCaseError::fail(format!("{e}: {text}")))?;
        prop_assert_eq!(read, value);
    }

    /// A manifest written as JSON reads back as one object with its kind and name.
    #[test]
    fn manifests_read_back(name in "[a-z][a-z0-9\\-]{0,20}", data in json_value()) {
        let object = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data,
        });
        let text = format!("---\n{}\n", serde_json::to_string(&object).unwrap_or_default());
        let read = timed("parse_manifests", || parse_manifests("m.yaml", &text))?;
        let read = read.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(read.len(), 1);
        prop_assert_eq!(read[0].kind(), "ConfigMap");
        prop_assert_eq!(read[0].name(), name.as_str());
    }

    /// Versions and ranges parse or fail for any text, in bounded time.
    #[test]
    fn semver_parsing_never_panics(text in semver_text(), any_text in any::<String>()) {
        let _ = timed("Version::parse", || Version::parse(&text))?;
        let _ = timed("Range::parse", || Range::parse(&text))?;
        let _ = timed("Version::parse", || Version::parse(&any_text))?;
        let _ = timed("Range::parse", || Range::parse(&any_text))?;
    }

    /// A version reads back as written, and the ranges naming it exactly or as a bound
    /// match it as their operators say.
    #[test]
    fn versions_round_trip_and_bound_ranges(parts in version_parts()) {
        let text = version_text(&parts);
        let version = Version::parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(version.to_string(), text.clone());
        let matches = |range: String| -> Result<bool, TestCaseError> {
            let parsed = Range::parse(&range).map_err(|e| TestCaseError::fail(format!("{range}: {e}")))?;
            Ok(parsed.matches(&version))
        };
        for (op, expected) in [("=", true), (">=", true), ("<=", true), ("!=", false), (">", false), ("<", false)] {
            let range = format!("{op}{text}");
            prop_assert_eq!(matches(range.clone())?, expected, "{}", range);
        }
    }

    /// Precedence is a total order: antisymmetric and transitive.
    #[test]
    fn version_precedence_is_an_order(a in version_parts(), b in version_parts(), c in version_parts()) {
        let parse = |p: &(u64, u64, u64, String, String)| Version::parse(&version_text(p));
        let (a, b, c) = match (parse(&a), parse(&b), parse(&c)) {
            (Ok(a), Ok(b), Ok(c)) => (a, b, c),
            _ => return Err(TestCaseError::fail("a generated version did not parse")),
        };
        prop_assert_eq!(a.compare(&b), b.compare(&a).reverse());
        if a.compare(&b).is_le() && b.compare(&c).is_le() {
            prop_assert!(a.compare(&c).is_le());
        }
    }
}
