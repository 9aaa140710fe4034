//! YAML documents as `kustomize build` outputs what it read from them: two go-yaml quirks
//! this crate's reader (which follows the YAML spec, as kubectl and helm do) does not have.
//!
//! **A block scalar that ends the text without a line break** (`|` or `>` as the last node, as
//! in every inline `patch: |-` whose last field is a block scalar) keeps no final line break:
//! go-yaml (v2 and v3 alike) adds one only when the text has it.
//!
//! **Folded scalars** (`>`): kustomize turns each resource into JSON by printing its YAML nodes
//! with go-yaml v3 and reading the text back (kyaml's `RNode.MarshalJSON`). A string read from
//! a folded scalar is printed folded again, and go-yaml v3's folded printer decides whether a
//! line break needs a second one (so that reading does not fold it into a space) by looking at
//! the first line of the whole value instead of the line after the break (`k := 0` in
//! `yaml_emitter_write_folded_scalar`, where libyaml's index is relative to the break). The
//! text read back then differs from the value first read:
//! - a value whose first line starts with a non-blank gains a line break after each normal
//!   line followed by a more-indented one (`x\n  y\n` becomes `x\n\n  y\n`), and, with `>+`,
//!   before the empty lines that end it;
//! - a value whose first line is more-indented loses a line break between two normal lines
//!   (`  y\nz\nw\n` becomes `  y\nz w\n`).
//!
//! Values the printer cannot write as a block scalar are printed double-quoted and keep their
//! text; so do literal (`|`), quoted and plain scalars. Aliases of a folded scalar, and copies
//! merged with `<<`, are the same node and change the same way. Strings that reach the output
//! only through JSON (JSON 6902 values, kustomization fields) never were a folded node; a
//! replacement's value copied into a new field is not one either, which is not followed here
//! (the copy keeps the source's printed text).
//!
//! The document is read with the crate's reader; the parser's events then locate the scalars
//! concerned, whose strings are rewritten in the parsed value.

use std::collections::HashMap;
use std::rc::Rc;

use serde_json::Value;
use serde_saphyr::granit_parser::{Event, Options as ParserOptions, Parser, ScalarStyle};

use crate::yaml_path::{navigate, node_done, Frame, Step};

/// Reads one YAML document as kustomize's output has it (resources, strategic-merge patches,
/// `helmCharts` output): [`from_yaml_str_unprinted`], then each folded scalar's string as
/// go-yaml v3 prints and reads it back ([`refolded`]).
pub(crate) fn from_yaml_str(text: &str) -> Result<Value, serde_saphyr::Error> {
    read(text, true, true)
}

/// [`from_yaml_str`] for a document cut out of a longer text without its final line break
/// (helm's output, split and trimmed): the document's end is not the text's.
pub(crate) fn from_yaml_str_within(text: &str) -> Result<Value, serde_saphyr::Error> {
    read(text, false, true)
}

/// Reads one YAML document as go-yaml reads it, for text kustomize reads but never prints as
/// YAML (JSON 6902 operations): a block scalar ending the text without a line break keeps none.
pub(crate) fn from_yaml_str_unprinted(text: &str) -> Result<Value, serde_saphyr::Error> {
    read(text, true, false)
}

/// Reads `text`; `end_of_text`: its end is where go-yaml's reader stops; `printed`: kustomize
/// prints the value as YAML before its output.
fn read(text: &str, end_of_text: bool, printed: bool) -> Result<Value, serde_saphyr::Error> {
    let (mut value, fixed): (Value, _) = crate::object::from_yaml_str_fixed(text)?;
    let text = fixed.as_deref().unwrap_or(text);
    let unterminated = end_of_text && !text.ends_with(['\n', '\r']) && text.contains(['|', '>']);
    let refold = printed && may_have_folded_scalar(text);
    if !unterminated && !refold {
        return Ok(value);
    }
    let mut scalars = block_scalars(text);
    if unterminated {
        if let Some(last) = scalars.last.take() {
            unterminated_block_scalar(&mut value, text, last, &mut scalars.folded);
        }
    }
    if refold {
        for (path, read) in scalars.folded {
            if let Some(Value::String(s)) = navigate(&mut value, &path) {
                // A repeated key's later value may have replaced the folded one.
                if s.as_str() == &*read {
                    if let Some(printed) = refolded(s) {
                        *s = printed;
                    }
                }
            }
        }
    }
    Ok(value)
}

/// The block scalar that is the document's last node, when the text ends on its last line
/// without a line break: its string loses the final line break the crate's reader gave it
/// (also in the folded scalars found, which are matched by string).
fn unterminated_block_scalar(
    value: &mut Value,
    text: &str,
    (path, read): Found,
    folded: &mut [Found],
) {
    let last_line = text.rsplit(['\n', '\r']).next().unwrap_or("").trim_start();
    // A comment below the scalar, or a blank last line, leaves its line break read.
    let Some(without) = read.strip_suffix('\n') else {
        return;
    };
    if last_line.is_empty() || !without.ends_with(last_line) {
        return;
    }
    if let Some(Value::String(s)) = navigate(value, &path) {
        if s.as_str() == &*read {
            s.pop();
        }
    }
    for (at, string) in folded.iter_mut() {
        if *at == path && *string == read {
            *string = Rc::from(without);
        }
    }
}

/// The string go-yaml v3 reads back after printing `value` as a folded scalar, when it is not
/// `value` (see the module's documentation).
pub(crate) fn refolded(value: &str) -> Option<String> {
    if !printable_as_block(value) {
        return None;
    }
    // The printer's test: the first character after the value's leading line breaks.
    let starts_normal = !matches!(
        value.trim_start_matches('\n').chars().next(),
        None | Some(' ' | '\t')
    );
    let mut out = String::with_capacity(value.len() + 16);
    let mut changed = false;
    let mut pos = 0;
    // Whether the last line written is content that starts with a non-blank.
    let mut after_normal_line = false;
    while pos < value.len() {
        let rest = &value[pos..];
        let breaks = rest.len() - rest.trim_start_matches('\n').len();
        if breaks == 0 {
            let end = rest.find('\n').map_or(value.len(), |n| pos + n);
            after_normal_line = !rest.starts_with([' ', '\t']);
            out.push_str(&value[pos..end]);
            pos = end;
            continue;
        }
        pos += breaks;
        let next = value[pos..].chars().next();
        let written = match (after_normal_line, starts_normal, next) {
            // A break the printer doubles although reading keeps it: before a more-indented
            // line, or among the kept (`>+`) line breaks that end the value.
            (true, true, Some(' ' | '\t')) => breaks + 1,
            (true, true, None) if breaks >= 2 => breaks + 1,
            // A break the printer does not double although reading folds it: one break
            // becomes a space, more lose one.
            (true, false, Some(c)) if c != ' ' && c != '\t' => breaks - 1,
            _ => breaks,
        };
        changed |= written != breaks;
        if written == 0 {
            out.push(' ');
        } else {
            out.extend(std::iter::repeat_n('\n', written));
        }
        after_normal_line = false;
    }
    changed.then_some(out)
}

/// Whether go-yaml v3 prints `value` as a block scalar; otherwise it is printed double-quoted:
/// empty, ending in a space, a space before a line break, or a character YAML does not print.
fn printable_as_block(value: &str) -> bool {
    !value.is_empty()
        && !value.ends_with(' ')
        && !value.contains(" \n")
        && value.chars().all(|c| {
            matches!(c, '\t' | '\n' | ' '..='~' | '\u{A0}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}')
                && c != '\u{FEFF}'
        })
}

/// A cheap test before reading the events: a `>` that may open a block scalar, first on its
/// line or after a blank that follows `:`, `-`, `?` or an anchor or tag, and before the end of
/// the line, a blank or a comment (with its indentation and chomping indicators between).
fn may_have_folded_scalar(text: &str) -> bool {
    text.match_indices('>').any(|(i, _)| {
        let after =
            text[i + 1..].trim_start_matches(|c: char| c == '-' || c == '+' || c.is_ascii_digit());
        if !matches!(
            after.chars().next(),
            None | Some(' ' | '\t' | '\n' | '\r' | '#')
        ) {
            return false;
        }
        let before = &text[..i];
        let token_end = before.trim_end_matches([' ', '\t']);
        if token_end.is_empty() || token_end.ends_with('\n') {
            // First on its line: the value of a key on the line above.
            return true;
        }
        if token_end.len() == before.len() {
            return false;
        }
        let token = token_end.rsplit([' ', '\t', '\n']).next().unwrap_or("");
        token.ends_with([':', '-', '?']) || token.starts_with(['&', '!'])
    })
}

/// The path of the value being read. The values of a merge key (`<<`) land in the mapping
/// that holds it, so that key (and a list of merged mappings under it) adds no step.
fn current_path(stack: &[Frame]) -> Vec<Step> {
    let mut path = Vec::new();
    let mut merging = false;
    for frame in stack {
        match frame {
            Frame::Map { key: Some(k) } if k == "<<" => merging = true,
            Frame::Map { key: Some(k) } => {
                merging = false;
                path.push(Step::Key(k.clone()));
            }
            Frame::Seq { index } if !merging => path.push(Step::Index(*index)),
            _ => {}
        }
    }
    path
}

/// The block scalars of the first document that [`read`] may rewrite.
fn block_scalars(text: &str) -> Walk {
    let mut found = Walk::default();
    let mut stack: Vec<Frame> = Vec::new();
    let mut options = ParserOptions::default();
    // Kept comments fail past a few dozen consecutive lines; they are not wanted here.
    options.set_emit_comments(false);
    for event in Parser::new_from_str_with_options(text, options) {
        // Parse errors were the value reader's to report.
        let Ok((event, _)) = event else { break };
        let in_key = stack.iter().any(|f| matches!(f, Frame::Key));
        let is_key = matches!(stack.last(), Some(Frame::Map { key: None }));
        match event {
            Event::DocumentEnd => break,
            Event::Scalar(value, ..) if is_key => {
                if let Some(Frame::Map { key }) = stack.last_mut() {
                    *key = Some(value.to_string());
                }
            }
            Event::Scalar(value, style, anchor, _) => {
                found.last = None;
                if !in_key {
                    let path = current_path(&stack);
                    found.open(anchor, &path);
                    let read: Rc<str> = Rc::from(value.as_ref());
                    if style == ScalarStyle::Folded {
                        found.record(path.clone(), Rc::clone(&read));
                    }
                    found.close(anchor);
                    if matches!(style, ScalarStyle::Folded | ScalarStyle::Literal) {
                        found.last = Some((path, read));
                    }
                }
                node_done(&mut stack);
            }
            Event::Alias(anchor) => {
                found.last = None;
                if !in_key {
                    found.copy(anchor, &current_path(&stack));
                }
                node_done(&mut stack);
            }
            Event::MappingStart(_, anchor, _) | Event::SequenceStart(_, anchor, _) => {
                found.last = None;
                if is_key {
                    // A complex key: the value after it is not a key.
                    if let Some(Frame::Map { key }) = stack.last_mut() {
                        *key = Some(String::new());
                    }
                    stack.push(Frame::Key);
                    continue;
                }
                if !in_key {
                    found.open(anchor, &current_path(&stack));
                }
                stack.push(if matches!(event, Event::MappingStart(..)) {
                    Frame::Map { key: None }
                } else {
                    Frame::Seq { index: 0 }
                });
                found.anchors_at_depth.push(anchor);
            }
            Event::MappingEnd | Event::SequenceEnd => {
                let closed = stack.pop();
                if !matches!(closed, Some(Frame::Key)) {
                    if let Some(anchor) = found.anchors_at_depth.pop() {
                        found.close(anchor);
                    }
                    node_done(&mut stack);
                }
            }
            _ => {}
        }
    }
    found
}

/// A scalar found by the walk: its path and the string the crate's reader read.
type Found = (Vec<Step>, Rc<str>);

/// At most this many folded strings (with their copies through aliases) are rewritten in one
/// document; the reader's node budget already bounds them, this bounds the walk's own lists.
const MAX_FOLDED: usize = 100_000;

/// What the event walk collects.
#[derive(Default)]
struct Walk {
    /// Folded scalars (and copies) found: path and string.
    folded: Vec<Found>,
    /// The document's last node, when a block scalar: path and string.
    last: Option<Found>,
    /// Anchored nodes being read: anchor id and the node's path.
    open: Vec<(usize, Vec<Step>)>,
    /// The anchor (or 0) of each open collection, innermost last.
    anchors_at_depth: Vec<usize>,
    /// Each anchored node's folded scalars: path below the node, string.
    anchored: HashMap<usize, Vec<Found>>,
}

impl Walk {
    fn open(&mut self, anchor: usize, path: &[Step]) {
        if anchor != 0 {
            self.open.push((anchor, path.to_vec()));
            self.anchored.insert(anchor, Vec::new());
        }
    }

    fn close(&mut self, anchor: usize) {
        if anchor != 0 {
            self.open.retain(|(id, _)| *id != anchor);
        }
    }

    /// A folded string at `path`, also below every anchored node being read.
    fn record(&mut self, path: Vec<Step>, read: Rc<str>) {
        if self.folded.len() >= MAX_FOLDED {
            return;
        }
        for (id, base) in &self.open {
            if let Some(below) = path.strip_prefix(base.as_slice()) {
                if let Some(list) = self.anchored.get_mut(id) {
                    list.push((below.to_vec(), Rc::clone(&read)));
                }
            }
        }
        self.folded.push((path, read));
    }

    /// An alias at `path`: the anchored node's folded strings, again below `path`.
    fn copy(&mut self, anchor: usize, path: &[Step]) {
        let copies: Vec<_> = self.anchored.get(&anchor).cloned().unwrap_or_default();
        for (below, read) in copies {
            let mut at = path.to_vec();
            at.extend(below);
            self.record(at, read);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `spec` as kustomize's reader does, and the string at `spec.<key>`.
    fn spec_strings(yaml: &str) -> Value {
        let value = from_yaml_str(yaml).expect("valid YAML");
        value["spec"].clone()
    }

    /// Each case: the YAML under `spec:` of a resource, and what `kustomize build` v5.5.0
    /// (go-yaml v3 via kyaml v0.18.1) outputs for `spec.v`, as recorded from that binary.
    const KUSTOMIZE_V5_5_0: &[(&str, &str, &str)] = &[
        (
            "more-indented line after a blank line",
            "  v: >\n    x\n\n      y\n    z\n",
            "x\n\n\n  y\nz\n",
        ),
        (
            "more-indented line, no blank line",
            "  v: >\n    x\n      y\n    z\n",
            "x\n\n  y\nz\n",
        ),
        (
            "more-indented line last",
            "  v: >\n    x\n    z\n      y\n",
            "x z\n\n  y\n",
        ),
        (
            "consecutive more-indented lines",
            "  v: >\n    x\n      y1\n      y2\n    z\n",
            "x\n\n  y1\n  y2\nz\n",
        ),
        (
            "blank line after the more-indented line",
            "  v: >\n    x\n      y\n\n    z\n",
            "x\n\n  y\n\nz\n",
        ),
        (
            "blank lines around",
            "  v: >\n    x\n\n      y\n\n    z\n",
            "x\n\n\n  y\n\nz\n",
        ),
        (
            "two blank lines around",
            "  v: >\n    x\n\n\n      y\n\n\n    z\n",
            "x\n\n\n\n  y\n\n\nz\n",
        ),
        ("strip", "  v: >-\n    x\n      y\n    z\n", "x\n\n  y\nz"),
        (
            "keep",
            "  v: >+\n    x\n      y\n    z\n\n\n",
            "x\n\n  y\nz\n\n\n\n",
        ),
        (
            "keep, no more-indented line",
            "  v: >+\n    x\n    z\n\n",
            "x z\n\n\n",
        ),
        (
            "keep, more-indented line last",
            "  v: >+\n    x\n      y\n\n",
            "x\n\n  y\n\n",
        ),
        (
            "leading blank line",
            "  v: >\n\n    x\n      y\n    z\n",
            "\nx\n\n  y\nz\n",
        ),
        (
            "more-indented line starting with a tab",
            "  v: >\n    x\n    \ty\n    z\n",
            "x\n\n\ty\nz\n",
        ),
        (
            "more-indented line first",
            "  v: >2\n      y\n    z\n\n    w\n    v\n",
            "  y\nz w v\n",
        ),
        (
            "more-indented line first after a blank line",
            "  v: >2\n\n      y\n    z\n\n    w\n",
            "\n  y\nz w\n",
        ),
        (
            "more-indented line first, keep",
            "  v: >+2\n      y\n    z\n\n",
            "  y\nz\n\n",
        ),
        (
            "no more-indented line",
            "  v: >\n    a\n    b\n\n    c\n",
            "a b\nc\n",
        ),
        (
            "printed double-quoted: a trailing space on a line",
            "  v: >\n    x \n      y\n    z\n",
            "x \n  y\nz\n",
        ),
        (
            "printed double-quoted: outside the Basic Multilingual Plane",
            "  v: >\n    x \u{1F600}\n      y\n    z\n",
            "x \u{1F600}\n  y\nz\n",
        ),
        (
            "literal",
            "  v: |\n    x\n\n      y\n    z\n",
            "x\n\n  y\nz\n",
        ),
        (
            "literal, more-indented first",
            "  v: |2\n      y\n    z\n",
            "  y\nz\n",
        ),
        (
            "literal, keep",
            "  v: |+\n    x\n      y\n\n\n",
            "x\n  y\n\n\n",
        ),
        (
            "single-quoted",
            "  v: 'a\n\n    b\n      c\n\n    d'\n",
            "a\nb c\nd",
        ),
        (
            "double-quoted",
            "  v: \"a\\n  b\\n\\nc\\n\"\n",
            "a\n  b\n\nc\n",
        ),
    ];

    #[test]
    fn folded_scalars_read_as_kustomize_outputs_them() {
        for (case, body, kustomize) in KUSTOMIZE_V5_5_0 {
            let yaml = format!("kind: Thing\nspec:\n{body}");
            assert_eq!(spec_strings(&yaml)["v"], *kustomize, "{case}");
        }
    }

    #[test]
    fn folded_scalars_in_lists_aliases_and_merges() {
        // kustomize v5.5.0 outputs each of these (recorded from the binary).
        let yaml = "kind: Thing\nspec:\n  args:\n  - >\n    x\n      y\n    z\n  - >-\n    y\n      z\n  - >2\n      y\n    z\n    w\n  nested:\n  - a:\n      b:\n      - c: >\n          x\n\n            y\n          z\n  a: &f >\n    x\n      y\n    z\n  b: *f\n  l:\n  - *f\n  m: &m\n    k: >\n      x\n        y\n  n:\n    <<: *m\n    o: 1\n";
        let spec = spec_strings(yaml);
        assert_eq!(spec["args"][0], "x\n\n  y\nz\n");
        assert_eq!(spec["args"][1], "y\n\n  z");
        assert_eq!(spec["args"][2], "  y\nz w\n");
        assert_eq!(spec["nested"][0]["a"]["b"][0]["c"], "x\n\n\n  y\nz\n");
        assert_eq!(spec["a"], "x\n\n  y\nz\n");
        assert_eq!(spec["b"], "x\n\n  y\nz\n");
        assert_eq!(spec["l"][0], "x\n\n  y\nz\n");
        assert_eq!(spec["m"]["k"], "x\n\n  y\n");
        assert_eq!(spec["n"]["k"], "x\n\n  y\n");
        assert_eq!(spec["n"]["o"], 1);
    }

    #[test]
    fn a_block_scalar_ending_the_text_keeps_no_final_line_break() {
        // kustomize v5.5.0, the last field of an inline `patch: |-` (recorded from the binary).
        let read = |text: &str| from_yaml_str(text).expect("valid YAML")["v"].clone();
        assert_eq!(read("v: |\n  x\n    y"), "x\n  y");
        assert_eq!(read("v: |+\n  x"), "x");
        assert_eq!(read("v: >\n  x\n    y"), "x\n\n  y");
        assert_eq!(read("v: |\n  x\n# trailing comment"), "x\n");
        assert_eq!(read("v: |\n  x\n  "), "x\n");
        assert_eq!(read("v: |\n  x\nw: plain"), "x\n");
        assert_eq!(read("v: |\n  x\n"), "x\n");
        // Within helm's output, a document's end is not the text's.
        assert_eq!(from_yaml_str_within("v: |\n  x").unwrap()["v"], "x\n");
        // JSON 6902 operations are read the same way, but never printed as YAML.
        let ops = from_yaml_str_unprinted("- value: >\n    x\n      y").unwrap();
        assert_eq!(ops[0]["value"], "x\n  y");
    }

    #[test]
    fn aliases_of_folded_scalars_stay_within_the_readers_budget() {
        // Each level aliases the one before ten times: 10^8 copies of one folded scalar.
        let read = from_yaml_str(&aliased_levels(8, 10));
        let error = read.expect_err("past the node budget").to_string();
        assert!(error.contains("budget"), "{error}");
    }

    #[test]
    fn the_walk_records_a_bounded_number_of_folded_strings() {
        // 2 * 9^5 copies: within the reader's budget, past the walk's.
        let spec = spec_strings(&aliased_levels(5, 9));
        assert_eq!(spec["l5"][0][0][0][0][0][0], "x\n\n  y\n");
        let walk = block_scalars(&aliased_levels(5, 9));
        assert_eq!(walk.folded.len(), MAX_FOLDED);
    }

    /// A resource whose `spec.l0` holds two folded scalars and each `spec.l<n>` `fanout`
    /// aliases of `spec.l<n-1>`.
    fn aliased_levels(levels: usize, fanout: usize) -> String {
        let mut text = String::from(
            "kind: Thing\nspec:\n  l0: &l0\n  - >\n    x\n      y\n  - >\n    x\n      y\n",
        );
        for level in 1..=levels {
            text.push_str(&format!("  l{level}: &l{level}\n"));
            for _ in 0..fanout {
                text.push_str(&format!("  - *l{}\n", level - 1));
            }
        }
        text
    }

    #[test]
    fn a_later_repeated_key_is_left_alone() {
        // (kustomize rejects repeated keys; this crate's reader keeps the last.)
        let spec =
            spec_strings("kind: Thing\nspec:\n  v: >\n    x\n      y\n  v: |\n    x\n     y\n");
        assert_eq!(spec["v"], "x\n y\n");
    }

    #[test]
    fn the_crate_reader_follows_the_yaml_spec() {
        // The reader other formats use (kubectl, helm and the YAML spec agree).
        let value: Value = crate::object::from_yaml_str("v: >\n  x\n\n    y\n  z\n").unwrap();
        assert_eq!(value["v"], "x\n\n  y\nz\n");
    }

    #[test]
    fn the_cheap_test_finds_block_indicators_only() {
        assert!(may_have_folded_scalar("a: >\n  x\n"));
        assert!(may_have_folded_scalar("a: >-2 # note\n  x\n"));
        assert!(may_have_folded_scalar("- >+"));
        assert!(may_have_folded_scalar("a: &anchor >\n  x\n"));
        assert!(may_have_folded_scalar("a: !!str >\n  x\n"));
        assert!(may_have_folded_scalar("a:\n  ? >\n    x\n"));
        assert!(may_have_folded_scalar("a:\n  >\n  x\n"));
        assert!(!may_have_folded_scalar("description: when x > y\n"));
        assert!(!may_have_folded_scalar("a: b -> c\n"));
        assert!(!may_have_folded_scalar("a: x>y\n"));
        assert!(!may_have_folded_scalar("a: x >y\n"));
        assert!(!may_have_folded_scalar("a: '<b>'\n"));
    }
}
