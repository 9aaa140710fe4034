//! Pallet's refusals (a budget, a construct it cannot render as helm does) are always the
//! render's error — also inside the functions that turn errors into values, where helm would
//! go on with `{"Error": ...}`, `false`, `""` or an unchanged value. One case per such place
//! (the audit is in the helm README, "Errors turned into values"), and property tests of every
//! walk over values: bounded, never a crash, however deep a template nests a value.

use pallet_formats::helm::value::{
    deep_copy, deep_equal, go_fmt, marshal, strval, to_json, GoList, GoMap, JsonStyle,
    MarshalError, MAX_DEPTH,
};
use pallet_formats::{render, Format, RenderConfig, RenderError};
use proptest::prelude::*;

/// Renders a one-template chart through the agent's entry point.
fn render_chart(template: &str) -> Result<pallet_formats::Rendered, RenderError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    std::fs::create_dir_all(root.join("templates")).expect("mkdir");
    std::fs::write(
        root.join("Chart.yaml"),
        "apiVersion: v2\nname: refusals\nversion: 0.1.0\n",
    )
    .expect("write");
    std::fs::write(
        root.join("templates/cm.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: out\ndata:\n  out: {template}\n"
        ),
    )
    .expect("write");
    let mut config = RenderConfig::default();
    config.helm.release_name = "rel".into();
    render(Format::Helm, root, &config)
}

/// A value nested `n` deep, built by the template in a loop.
fn deep(n: usize) -> String {
    format!("{{{{- $d := dict }}}}{{{{- range until {n} }}}}{{{{- $d = dict \"a\" $d }}}}{{{{- end }}}}")
}

/// JSON text nested `n` deep in objects.
fn deep_json(n: usize) -> String {
    format!("{{{{- $j := printf \"%s1%s\" (repeat {n} \"{{\\\"a\\\":\") (repeat {n} \"}}\") }}}}")
}

const DEPTH: &str = "value nesting depth";
const VALUES_DEPTH: &str = "values nesting depth";

#[test]
fn a_refusal_inside_a_function_that_swallows_errors_fails_the_render() {
    let cases: Vec<(String, &str)> = vec![
        // fromJson/fromJsonArray give `{"Error": ...}` for bad JSON; JSON nested past the values
        // budget is pallet's limit, not bad JSON.
        (format!("{}{{{{ (fromJson $j).Error | quote }}}}", deep_json(70)), VALUES_DEPTH),
        (format!("{}{{{{ (fromJson $j).Error | quote }}}}", deep_json(200)), VALUES_DEPTH),
        (
            "{{ fromJsonArray (printf \"%s%s\" (repeat 70 \"[\") (repeat 70 \"]\")) | len }}"
                .into(),
            VALUES_DEPTH,
        ),
        (format!("{}{{{{ mustFromJson $j | len }}}}", deep_json(70)), VALUES_DEPTH),
        // fromYaml/fromYamlArray/fromToml: the same for YAML and TOML.
        (
            "{{ (fromYaml (printf \"a: %s1%s\" (repeat 70 \"[\") (repeat 70 \"]\"))).Error | quote }}"
                .into(),
            VALUES_DEPTH,
        ),
        (
            "{{ fromYamlArray (printf \"%s1%s\" (repeat 70 \"[\") (repeat 70 \"]\")) | len }}".into(),
            VALUES_DEPTH,
        ),
        (
            "{{ (fromToml (printf \"a = %s1%s\" (repeat 70 \"[\") (repeat 70 \"]\"))).Error | quote }}"
                .into(),
            VALUES_DEPTH,
        ),
        // toJson/toPrettyJson/toYaml give "" for a value encoding/json refuses; a value nested
        // past the budget is pallet's limit.
        (format!("{}{{{{ toJson $d | quote }}}}", deep(100)), DEPTH),
        (format!("{}{{{{ toPrettyJson $d | quote }}}}", deep(100)), DEPTH),
        (format!("{}{{{{ toRawJson $d | quote }}}}", deep(100)), DEPTH),
        (format!("{}{{{{ mustToJson $d | quote }}}}", deep(100)), DEPTH),
        (format!("{}{{{{ toYaml $d | quote }}}}", deep(100)), DEPTH),
        (format!("{}{{{{ toYamlPretty $d | quote }}}}", deep(100)), DEPTH),
        // toToml returns its error as text.
        (format!("{}{{{{ toToml $d | quote }}}}", deep(100)), DEPTH),
        // merge and mergeOverwrite swallow mergo's errors.
        (
            format!("{}{{{{ $e := deepCopy (dict) }}}}{{{{ merge $d $d | len }}}}", deep(100)),
            DEPTH,
        ),
        (
            "{{ $m := dict }}{{ $_ := set $m \"self\" $m }}{{ mergeOverwrite $m (dict \"self\" (dict \"x\" 1)) | len }}"
                .into(),
            "merging into a map that holds itself",
        ),
        // regexMatch gives false for a pattern Go refuses; one Go accepts and pallet cannot
        // compile within its budget is pallet's error.
        (
            "{{ regexMatch (repeat 30 \"(?:\\\\pL{1000})\") \"x\" }}".into(),
            "regular expression size",
        ),
        // The comparisons (has, uniq, without, deepEqual) and deepCopy walk values.
        (format!("{}{{{{ has $d (list $d) }}}}", deep(100)), DEPTH),
        (format!("{}{{{{ uniq (list $d $d) | len }}}}", deep(100)), DEPTH),
        (format!("{}{{{{ without (list $d) $d | len }}}}", deep(100)), DEPTH),
        (format!("{}{{{{ deepEqual $d $d }}}}", deep(100)), DEPTH),
        (format!("{}{{{{ deepCopy $d | len }}}}", deep(100)), DEPTH),
        // default, coalesce, ternary, empty: a refusal in an argument fails before the call.
        (format!("{}{{{{ default \"x\" (toJson $d) }}}}", deep(100)), DEPTH),
        (format!("{}{{{{ coalesce (toJson $d) \"x\" }}}}", deep(100)), DEPTH),
        (format!("{}{{{{ empty (toYaml $d) }}}}", deep(100)), DEPTH),
        // Printing: fmt's verbs print errors into the text (`%!d(string=x)`); pallet's limits
        // are errors.
        (format!("{}{{{{ printf \"%v\" $d | len }}}}", deep(100)), DEPTH),
        (format!("{}{{{{ toString $d | len }}}}", deep(100)), DEPTH),
        (format!("{}{{{{ $d | quote }}}}", deep(100)), DEPTH),
        (format!("{}{{{{ $d }}}}", deep(100)), DEPTH),
        (
            "{{ toString (list .Capabilities) | len }}".into(),
            "printing a *chartutil.Capabilities inside another value",
        ),
        (
            "{{ regexMatch \"x\" (toString (list .Capabilities)) }}".into(),
            "printing a *chartutil.Capabilities inside another value",
        ),
    ];
    let mut wrong = Vec::new();
    for (template, want) in &cases {
        match render_chart(template) {
            Err(e) if e.to_string().contains(want) => {
                // A budget is the budget's category; anything else names the file.
                let message = e.to_string();
                if !message.contains("refusals/templates/cm.yaml") {
                    wrong.push(format!("{template}: the error names no file: {message}"));
                }
                if *want != "merging into a map that holds itself"
                    && !want.starts_with("printing")
                    && e.category() != "RenderBudgetExceeded"
                {
                    wrong.push(format!("{template}: category {}: {message}", e.category()));
                }
            }
            other => wrong.push(format!(
                "{template}: want an error with {want:?}, got {other:?}"
            )),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Within the budget, the same constructs render (the refusals above are about depth only).
#[test]
fn within_the_budget_values_a_template_builds_render() {
    for template in [
        format!("{}{{{{ toJson $d | len }}}}", deep(MAX_DEPTH - 1)),
        format!("{}{{{{ toYaml $d | len }}}}", deep(MAX_DEPTH - 1)),
        format!(
            "{}{{{{ deepCopy $d | toJson | len }}}}",
            deep(MAX_DEPTH - 1)
        ),
        format!("{}{{{{ merge $d $d | len }}}}", deep(MAX_DEPTH - 1)),
        format!("{}{{{{ (fromJson $j).a.a.a }}}}", deep_json(40)),
    ] {
        let rendered = render_chart(&template);
        assert!(rendered.is_ok(), "{template}: {rendered:?}");
    }
}

/// A value of maps and lists nested as `shape` says (true: a map, false: a list), a string at
/// the bottom.
fn nested(shape: &[bool]) -> minijinja::value::Value {
    let mut v = minijinja::value::Value::from("leaf");
    for map in shape.iter().rev() {
        v = if *map {
            GoMap::value([("k".to_string(), v)].into_iter().collect())
        } else {
            GoList::value(vec![v])
        };
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every walk over a value (JSON, printing, comparison, copy) gives its result within the
    /// budget and the depth error past it, for any mix of maps and lists.
    #[test]
    fn every_walk_is_bounded_by_the_depth_budget(
        shape in proptest::collection::vec(any::<bool>(), 0..(MAX_DEPTH * 2)),
    ) {
        let v = nested(&shape);
        let within = shape.len() <= MAX_DEPTH;
        let depth_error = |e: &dyn std::fmt::Display| e.to_string().contains(DEPTH);
        match to_json(&v) {
            Ok(_) => prop_assert!(within),
            Err(e) => prop_assert!(!within && depth_error(&e)),
        }
        match marshal(&v, JsonStyle::default()) {
            Ok(_) => prop_assert!(within),
            Err(MarshalError::Refused(e)) => prop_assert!(!within && depth_error(&e)),
            Err(MarshalError::Go(e)) => prop_assert!(false, "{e}"),
        }
        match deep_copy(&v) {
            Ok(copy) => prop_assert!(within && deep_equal(&copy, &v).unwrap_or(false)),
            Err(e) => prop_assert!(!within && depth_error(&e)),
        }
        prop_assert_eq!(deep_equal(&v, &v).is_ok(), within);
        let failures = pallet_formats::budget::failures();
        let printed = go_fmt(&v);
        let _ = strval(&v);
        prop_assert_eq!(pallet_formats::budget::failures() == failures, within);
        prop_assert_eq!(printed.contains("leaf"), within);
        pallet_formats::budget::take_breach();
    }
}

/// Values far deeper than any stack allows are released without recursion, and walking them
/// is the depth error, on a thread with a small stack.
#[test]
fn values_far_past_the_budget_are_walked_and_released_on_a_small_stack() {
    std::thread::Builder::new()
        .stack_size(512 << 10)
        .spawn(|| {
            let shape: Vec<bool> = (0..200_000).map(|i| i % 3 != 0).collect();
            let v = nested(&shape);
            assert!(to_json(&v).is_err());
            assert!(matches!(
                marshal(&v, JsonStyle::default()),
                Err(MarshalError::Refused(_))
            ));
            assert!(deep_copy(&v).is_err());
            assert!(deep_equal(&v, &v).is_err());
            let _ = go_fmt(&v);
            pallet_formats::budget::take_breach();
            drop(v);
        })
        .expect("thread")
        .join()
        .expect("no overflow");
}
