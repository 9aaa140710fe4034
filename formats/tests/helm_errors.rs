//! Every class of unsupported or failing construct is an error naming the chart, the template
//! file, the line and the construct — never silently different output.

use std::path::Path;

use pallet_formats::helm::{self, RenderOptions};

/// Writes a one-template chart into a temp dir and renders it.
fn render_one(template: &str, extra: &[(&str, &str)]) -> Result<Vec<serde_json::Value>, String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("errs");
    std::fs::create_dir_all(root.join("templates")).expect("mkdir");
    std::fs::write(
        root.join("Chart.yaml"),
        "apiVersion: v2\nname: errs\nversion: 0.1.0\n",
    )
    .expect("write");
    std::fs::write(root.join("values.yaml"), "a:\n  b: 1\nlist: [1, 2]\n").expect("write");
    std::fs::write(root.join("templates/t.yaml"), template).expect("write");
    for (path, content) in extra {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap_or(Path::new("."))).expect("mkdir");
        std::fs::write(p, content).expect("write");
    }
    helm::render(&root, &RenderOptions::default()).map_err(|e| e.to_string())
}

fn assert_err(template: &str, want: &[&str]) {
    let e = render_one(template, &[]).expect_err("render must fail");
    for w in want {
        assert!(e.contains(w), "error {e:?} does not mention {w:?}");
    }
}

#[test]
fn unknown_function_names_file_line_and_function() {
    assert_err(
        "x: 1\ny: {{ frobnicate .Values.a }}\n",
        &["errs/templates/t.yaml:2", "function \"frobnicate\""],
    );
}

#[test]
fn syntax_errors_name_the_line() {
    assert_err(
        "a: 1\n\n{{ if .Values.a }}\nb: 2\n",
        &["errs/templates/t.yaml:3", "missing {{end}}"],
    );
    assert_err("{{ .Values.a ) }}", &["errs/templates/t.yaml:1", ")"]);
    assert_err(
        "{{ \"unterminated }}",
        &["errs/templates/t.yaml:1", "unterminated"],
    );
    assert_err(
        "ok\n{{ end }}",
        &["errs/templates/t.yaml:2", "unexpected {{end}}"],
    );
}

#[test]
fn undefined_variable_is_an_error() {
    assert_err(
        "a: {{ $nope }}",
        &["errs/templates/t.yaml:1", "undefined variable: $nope"],
    );
}

#[test]
fn nil_pointer_field_access_is_an_error_like_helm() {
    assert_err(
        "a: 1\nb: 2\nc: {{ .Values.missing.field }}\n",
        &[
            "errs/templates/t.yaml:3",
            "nil pointer evaluating interface {}.field",
        ],
    );
}

#[test]
fn fail_and_required_report_their_message_and_line() {
    assert_err(
        "a: 1\n{{ fail \"boom: bad config\" }}",
        &["errs/templates/t.yaml:2", "boom: bad config"],
    );
    assert_err(
        "{{ required \"x is required\" .Values.x }}",
        &["errs/templates/t.yaml:1", "x is required"],
    );
}

#[test]
fn errors_inside_defines_name_the_define() {
    let e = render_one(
        "{{ include \"bad\" . }}",
        &[(
            "templates/_h.tpl",
            "{{ define \"bad\" }}\n{{ .Values.nope.x }}\n{{ end }}",
        )],
    )
    .expect_err("render must fail");
    assert!(e.contains("define \"bad\"") && e.contains(":2"), "{e}");
}

#[test]
fn missing_define_is_an_error() {
    assert_err(
        "{{ include \"nope\" . }}",
        &["errs/templates/t.yaml:1", "no template \"nope\""],
    );
}

#[test]
fn incompatible_comparison_is_an_error() {
    assert_err(
        "{{ if lt \"a\" 1 }}x{{ end }}",
        &[
            "errs/templates/t.yaml:1",
            "incompatible types for comparison",
        ],
    );
}

#[test]
fn schema_errors_are_helms() {
    let e = render_one(
        "a: 1",
        &[("values.schema.json", r#"{"unevaluatedProperties": false}"#)],
    )
    .expect_err("unevaluated property");
    assert!(e.contains("- at '/a': false schema"), "{e}");
    let e = render_one(
        "a: 1",
        &[(
            "values.schema.json",
            r#"{"$ref": "https://example.com/s.json"}"#,
        )],
    )
    .expect_err("remote $ref");
    assert!(
        e.contains("failing loading \"https://example.com/s.json\"")
            && e.contains("does not fetch"),
        "{e}"
    );
    let e = render_one(
        "a: 1",
        &[(
            "values.schema.json",
            r##"{"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}"##,
        )],
    )
    .expect_err("self-referencing $ref");
    assert!(e.contains("causing reference cycle"), "{e}");
}

#[test]
fn unsupported_chart_features_are_errors() {
    // (requirements.yaml is supported now: the legacyreqs chart compares it with helm.)
    let e = render_one("a: 1", &[(".helmignore", "!keep.txt\n")]).expect_err("helmignore negation");
    assert!(e.contains("negated .helmignore"), "{e}");
}

#[test]
fn invalid_rendered_yaml_names_the_template() {
    let e = render_one("a: [1\nb: }", &[]).expect_err("bad yaml");
    assert!(
        e.contains("errs/templates/t.yaml") && e.contains("not valid YAML"),
        "{e}"
    );
}

#[test]
fn break_outside_range_is_an_error() {
    assert_err(
        "{{ break }}",
        &["errs/templates/t.yaml:1", "break/continue outside range"],
    );
}

#[test]
fn schema_violations_name_chart_and_json_path() {
    let schema = r#"{"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}}}, "required": ["list", "c"]}"#;
    let e = render_one("x: 1", &[("values.schema.json", schema)]).expect_err("schema violation");
    assert!(
        e.contains("errs:") && e.contains("at '/a/b': got number, want string"),
        "{e}"
    );
    assert!(e.contains("missing property 'c'"), "{e}");
    // The same chart passes once the values conform.
    let ok = r#"{"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "integer"}}}}}"#;
    render_one("x: 1", &[("values.schema.json", ok)]).expect("valid values render");
}

#[test]
fn comparing_int_with_float64_is_an_error_as_in_go() {
    // Values from values.yaml are float64; a bare template literal is an int.
    assert_err(
        "{{ if eq .Values.a.b 1 }}x{{ end }}",
        &[
            "errs/templates/t.yaml:1",
            "incompatible types for comparison: float64 and int",
        ],
    );
    render_one("{{ if eq .Values.a.b 1.0 }}x: 1{{ end }}", &[])
        .expect("float64 with float64 compares");
    render_one("{{ if eq (int .Values.a.b) 1 }}x: 1{{ end }}", &[]).expect("int with int compares");
}

/// `.Subcharts` maps the chart's subcharts by name; a chart without one named `child` has no
/// such key, and a field of that missing entry is helm's nil pointer error.
#[test]
fn field_of_a_missing_subchart_is_helms_nil_pointer_error() {
    assert_err(
        "a: {{ .Subcharts.child.Values.x }}",
        &[
            "errs/templates/t.yaml:1",
            "nil pointer evaluating interface {}.Values",
        ],
    );
}

#[test]
fn runaway_include_recursion_is_an_error_not_a_crash() {
    let e = render_one(
        "{{ include \"loop\" . }}",
        &[(
            "templates/_h.tpl",
            "{{ define \"loop\" }}{{ include \"loop\" . }}{{ end }}",
        )],
    )
    .expect_err("recursion must fail");
    // Bounded below helm's 1000 (each call nests on the stack): the budget names the call.
    assert!(
        e.contains("template call depth") && e.contains("calling loop"),
        "{e}"
    );
    // Legitimate recursion within the bound works (a countdown through a dict).
    render_one(
        "{{ include \"down\" 20 }}",
        &[("templates/_h.tpl", "{{ define \"down\" }}{{ if gt . 0 }}{{ include \"down\" (sub . 1) }}{{ else }}a: 1{{ end }}{{ end }}")],
    )
    .expect("bounded recursion renders");
}

#[test]
fn invalid_semver_input_names_file_and_line() {
    assert_err(
        "a: 1\nb: {{ semver \"not-a-version\" }}\n",
        &["errs/templates/t.yaml:2", "Invalid Semantic Version"],
    );
    assert_err(
        "a: {{ semverCompare \">=1.2\" \"1.x.y\" }}\n",
        &["errs/templates/t.yaml:1", "Invalid Semantic Version"],
    );
    assert_err(
        "a: 1\n\nb: {{ semverCompare \">=banana\" \"1.2.3\" }}\n",
        &["errs/templates/t.yaml:3", "improper constraint: >=banana"],
    );
}

#[test]
fn unsupported_semver_method_is_an_error() {
    assert_err(
        "a: {{ (semver \"1.2.3\").IncMajor }}\n",
        &["errs/templates/t.yaml:1", "IncMajor"],
    );
}

#[test]
fn yaml11_line_breaks_in_the_output_are_errors() {
    // helm's YAML 1.1 reader breaks lines at U+2028; pallet's reader would not: refuse.
    assert_err(
        "x: 1\ny: {{ \"a\\u2028b\" }}\n",
        &["errs/templates/t.yaml:2", "U+2028", "line break"],
    );
}

/// A pointer printed inside another value (`toString (list .Capabilities)`) is its memory
/// address in Go, which pallet cannot reproduce: refused, naming the construct, the file and
/// the line.
#[test]
fn a_pointer_printed_inside_a_value_is_an_unsupported_construct() {
    assert_err(
        "a: 1\ndata: {{ toString (list .Capabilities) }}",
        &[
            "unsupported construct: printing a *chartutil.Capabilities",
            "errs/templates/t.yaml:2",
        ],
    );
}
