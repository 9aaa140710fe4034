//! Differential tests: every chart in testdata/helm/charts under every values file in
//! testdata/helm/values/<chart>/ is rendered by pallet and by the real `helm template` (the
//! oracle, built by `tools/helm.sh build`); the object sets must be semantically equal.

mod oracle;

use oracle::{helm_bin, split_docs, yaml11};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use pallet_formats::helm::{self, RenderOptions};

const RELEASE: &str = "rel";
const NAMESPACE: &str = "team-a";
const KUBE_VERSION: &str = "v1.33.0";

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/helm")
}

fn key(o: &serde_json::Value) -> String {
    format!(
        "{}/{}/{}",
        o["apiVersion"].as_str().unwrap_or(""),
        o["kind"].as_str().unwrap_or(""),
        o["metadata"]["name"].as_str().unwrap_or("")
    )
}

fn by_key(objs: Vec<serde_json::Value>) -> BTreeMap<String, Vec<serde_json::Value>> {
    let mut m: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for o in objs {
        m.entry(key(&o)).or_default().push(o);
    }
    m
}

/// Paths at which two JSON values differ, with both sides, for readable failures.
fn diff(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
    match (a, b) {
        (serde_json::Value::Object(x), serde_json::Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let null = serde_json::Value::Null;
                diff(
                    &format!("{path}.{k}"),
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                    out,
                );
            }
        }
        (serde_json::Value::Array(x), serde_json::Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff(&format!("{path}[{i}]"), p, q, out);
            }
        }
        _ if a != b => out.push(format!("{path}: pallet={a} helm={b}")),
        _ => {}
    }
}

fn oracle(chart: &Path, values: &Path) -> Vec<serde_json::Value> {
    let out = Command::new(helm_bin())
        .args(["template", RELEASE])
        .arg(chart)
        .args([
            "--include-crds",
            "--namespace",
            NAMESPACE,
            "--kube-version",
            KUBE_VERSION,
            "-f",
        ])
        .arg(values)
        .env(
            "HELM_CACHE_HOME",
            std::env::temp_dir().join("pallet-helm-oracle"),
        )
        // Sprig formats dates in the local zone; pallet renders in UTC.
        .env("TZ", "UTC")
        .output()
        .expect("running helm");
    assert!(
        out.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    split_docs(&String::from_utf8_lossy(&out.stdout))
}

fn ours(chart: &Path, values: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(values).expect("reading values file");
    let v: serde_json::Value =
        serde_saphyr::from_str_with_options(&text, yaml11()).expect("values file is YAML");
    let opts = RenderOptions {
        release_name: RELEASE.into(),
        namespace: NAMESPACE.into(),
        values: if v.is_null() {
            serde_json::json!({})
        } else {
            v
        },
        kube_version: KUBE_VERSION.into(),
        ..RenderOptions::default()
    };
    helm::render(chart, &opts)
        .unwrap_or_else(|e| panic!("pallet failed to render {}: {e}", chart.display()))
}

fn check_chart(name: &str) {
    let chart = testdata().join("charts").join(name);
    let mut files: Vec<PathBuf> = std::fs::read_dir(testdata().join("values").join(name))
        .expect("values dir")
        .map(|e| e.expect("dir entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "chart {name} has no values files");
    for values in files {
        let want = by_key(oracle(&chart, &values));
        let got = by_key(ours(&chart, &values));
        assert!(
            !want.is_empty(),
            "{name} with {}: helm rendered no objects",
            values.display()
        );
        for (k, w) in &want {
            let g = got.get(k).unwrap_or_else(|| {
                panic!(
                    "{name} with {}: pallet is missing {k}; it rendered {:?}",
                    values.display(),
                    got.keys().collect::<Vec<_>>()
                )
            });
            let mut d = Vec::new();
            diff(
                "",
                &serde_json::Value::Array(g.clone()),
                &serde_json::Value::Array(w.clone()),
                &mut d,
            );
            assert!(
                d.is_empty(),
                "{name} with {}: object {k} differs:\n{}",
                values.display(),
                d.join("\n")
            );
        }
        let extra: Vec<&String> = got.keys().filter(|k| !want.contains_key(*k)).collect();
        assert!(
            extra.is_empty(),
            "{name} with {}: pallet rendered extra objects {extra:?}",
            values.display()
        );
    }
}

#[test]
fn helm_create_chart_matches_helm_template() {
    check_chart("starter");
}

#[test]
fn constructs_chart_matches_helm_template() {
    check_chart("constructs");
}

#[test]
fn umbrella_chart_with_subcharts_matches_helm_template() {
    check_chart("umbrella");
}

#[test]
fn schema_violation_fails_in_both_with_the_same_path() {
    let chart = testdata().join("charts/umbrella");
    let values = testdata().join("invalid/umbrella-bad-replicas.yaml");
    let out = Command::new(helm_bin())
        .args(["template", RELEASE])
        .arg(&chart)
        .arg("-f")
        .arg(&values)
        .output()
        .expect("running helm");
    let helm_err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success() && helm_err.contains("at '/replicas'"),
        "helm: {helm_err}"
    );
    let text = std::fs::read_to_string(&values).expect("values");
    let v: serde_json::Value = serde_saphyr::from_str_with_options(&text, yaml11()).expect("yaml");
    let opts = RenderOptions {
        values: v,
        ..RenderOptions::default()
    };
    let ours = helm::render(&chart, &opts).expect_err("pallet must reject the values");
    let ours = ours.to_string();
    assert!(
        ours.contains("child:") && ours.contains("at '/replicas'"),
        "pallet: {ours}"
    );
}

#[test]
fn quirks_chart_matches_helm_template() {
    check_chart("quirks");
}

#[test]
fn tpl_files_chart_matches_helm_template() {
    check_chart("tplfiles");
}

#[test]
fn legacy_v1_chart_matches_helm_template() {
    check_chart("legacy");
}

/// Helm 2's requirements.yaml (dependencies with an alias and conditions) and
/// requirements.lock, both also in `.Files` of a v1 chart.
#[test]
fn requirements_yaml_chart_matches_helm_template() {
    check_chart("legacyreqs");
}

#[test]
fn versions_chart_semver_matches_helm_template() {
    check_chart("versions");
}

#[test]
fn capabilities_chart_matches_helm_template() {
    check_chart("capabilities");
}

#[test]
fn json_round_trip_chart_matches_helm_template() {
    check_chart("json");
}

#[test]
fn tpl_values_chart_matches_helm_template() {
    check_chart("tplvalues");
}

#[test]
fn collections_chart_matches_helm_template() {
    check_chart("collections");
}

#[test]
fn documents_chart_matches_helm_template() {
    check_chart("documents");
}

#[test]
fn lookups_chart_matches_helm_template() {
    check_chart("lookups");
}

/// Template-language corners real charts hit: trim markers at the start of a line, Go's
/// number forms, `eq`/`ne` on bools and nil, fields of nil pipeline results, declarations in
/// control heads, template files included by path, `.Subcharts`, `.Values` shared by the
/// templates of a chart, and document separators glued to a comment.
#[test]
fn language_chart_matches_helm_template() {
    check_chart("language");
}

/// Nulls for subchart keys: a user's null deletes the subchart's default (and a null the
/// parent's values.yaml sets for a key the subchart defaults), while a null for a key the
/// subchart has no default for stays null, two levels of subcharts deep.
#[test]
fn subchart_nulls_chart_matches_helm_template() {
    check_chart("nulls");
}

/// Sprig's `merge`/`mustMerge` skip a source key whose value is null where both sides are maps
/// (at every level), `mergeOverwrite` sets it; a source map copied whole keeps its nulls, an
/// empty destination map left empty by the merge is replaced by the source's.
#[test]
fn merge_of_null_values_gives_helms_output() {
    let cases = [
        r#"{{ merge (dict) (dict "a" nil "b" 1) | toJson }} {{ mustMerge (dict) (dict "a" nil "b" 1) | toJson }} {{ merge (dict "a" nil) (dict "a" nil "b" nil) | toJson }} {{ mustMerge (dict "a" "") (dict "a" nil "b" (list)) | toJson }}"#,
        r#"{{ merge (dict "x" (dict "k" 1)) (dict "x" (dict "a" nil "b" 1)) | toJson }} {{ merge (dict "x" (dict "y" (dict "z" 1))) (dict "x" (dict "y" (dict "n" nil "m" 2) "w" nil)) | toJson }} {{ merge (dict) (dict "x" (dict "a" nil "b" 1)) | toJson }}"#,
        r#"{{ merge (dict "x" (dict)) (dict "x" (dict "a" nil "b" 1)) | toJson }} {{ merge (dict "x" (dict)) (dict "x" (dict "a" nil)) | toJson }} {{ merge (dict "x" "s") (dict "x" (dict "a" nil)) | toJson }} {{ merge (dict "x" "" "y" 0 "z" (list)) (dict "x" (dict "a" nil) "y" (list 1) "z" (list 2)) | toJson }}"#,
        r#"{{ mergeOverwrite (dict "a" 1) (dict "a" nil "b" 1) | toJson }} {{ mustMergeOverwrite (dict "x" (dict "k" 1 "a" 2)) (dict "x" (dict "a" nil "b" 1)) | toJson }} {{ mergeOverwrite (dict "x" "s") (dict "x" (dict "a" nil)) | toJson }}"#,
        // The destination shares the source's map where it took it whole, as in Go.
        r#"{{ $s := dict "a" nil }}{{ $d := merge (dict "x" (dict)) (dict "x" $s) }}{{ $_ := set $d.x "c" 3 }}{{ toJson $s }} {{ $t := dict "a" nil "b" 1 }}{{ $e := merge (dict "x" (dict)) (dict "x" $t) }}{{ $_ := set $e.x "c" 3 }}{{ toJson $t }}"#,
        r#"{{ merge (dict "k" 1) .Values.nested (dict "a" (dict "b" nil "c" 2)) | toJson }} {{ merge (dict) (fromYaml "a: null\nb: {c: null, d: 1}") | toJson }}"#,
    ];
    let mut wrong = Vec::new();
    for expr in cases {
        let (ours, helm) = probe_both(expr, PROBE_VALUES);
        if ours != helm || helm.is_err() {
            wrong.push(format!("{expr}\n  pallet: {ours:?}\n  helm: {helm:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A one-template chart in a temp dir: `out: <expr>` with `values`.
fn probe_chart(expr: &str, values: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("probe");
    std::fs::create_dir_all(root.join("templates")).expect("mkdir");
    std::fs::write(
        root.join("Chart.yaml"),
        "apiVersion: v2\nname: probe\nversion: 0.1.0\n",
    )
    .expect("write");
    std::fs::write(root.join("values.yaml"), values).expect("write");
    std::fs::write(
        root.join("templates/cm.yaml"),
        // A block scalar: any one-line output is a string in both.
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe\ndata:\n  out: |-\n    {expr}\n"
        ),
    )
    .expect("write");
    dir
}

/// Renders a probe chart with both; `Ok(data.out)` or `Err(message)` for each.
fn probe_both(expr: &str, values: &str) -> (Result<String, String>, Result<String, String>) {
    let dir = probe_chart(expr, values);
    let chart = dir.path().join("probe");
    let out = Command::new(helm_bin())
        .args(["template", RELEASE])
        .arg(&chart)
        .env("TZ", "UTC")
        .output()
        .expect("running helm");
    let helm = if out.status.success() {
        let docs = split_docs(&String::from_utf8_lossy(&out.stdout));
        Ok(docs
            .first()
            .map(|d| d["data"]["out"].to_string())
            .unwrap_or_default())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let ours = helm::render(&chart, &RenderOptions::default())
        .map(|objs| {
            objs.first()
                .map(|d| d["data"]["out"].to_string())
                .unwrap_or_default()
        })
        .map_err(|e| e.to_string());
    (ours, helm)
}

const PROBE_VALUES: &str = "a:\n  b: 1\n  s: text\nnum: 3\nlist: [x, y]\nnested:\n  a:\n    b: leaf\nlong: this is a rather long string value with many words that goes well past the eighty character mark for sure and then some more words to wrap twice over the limit\n";

/// Expressions helm rejects (argument types, `dig` on `.Values`, `get` on a non-map, `.Files`
/// or a struct where a map is wanted): pallet must reject them too, naming the same type
/// mismatch, instead of returning something.
#[test]
fn pallet_fails_where_helm_fails() {
    let cases: &[(&str, &str)] = &[
        (r#"{{ call .Values.missing }}"#, "call of nil"),
        (r#"{{ call .Values.a.s }}"#, "non-function"),
        (r#"{{ dig "a" "b" 0 .Values }}"#, "chartutil.Values"),
        (
            r#"{{ dig "a" "b" 0 (dict "a" .Values) }}"#,
            "chartutil.Values",
        ),
        (r#"{{ dig "a" "b" "c" 0 .Values.nested }}"#, "is string"),
        (r#"{{ dig "a" "b" 0 (dict "a" nil) }}"#, "is nil"),
        (r#"{{ dig "x" 0 .Files }}"#, "engine.files"),
        (r#"{{ keys .Files }}"#, "expected map[string]interface {}"),
        (r#"{{ .Values.Table "list" }}"#, "is not a table"),
        (
            r#"{{ if false }}{{ $h := 1 }}{{ else }}{{ $h }}{{ end }}"#,
            "undefined variable: $h",
        ),
        (r#"{{ .Values.PathValue "nested.a" }}"#, "is not a value"),
        (r#"{{ .Values.PathValue "" }}"#, "YAML path cannot be empty"),
        (
            r#"{{ $p := dict }}{{ merge (dict) $p.global }}"#,
            "expected map[string]interface {}; got interface {}",
        ),
        (
            r#"{{ range $v := list nil }}{{ keys $v }}{{ end }}"#,
            "expected map[string]interface {}; got interface {}",
        ),
        (r#"{{ keys .Chart }}"#, "expected map[string]interface {}"),
        (
            r#"{{ get .Capabilities "KubeVersion" }}"#,
            "expected map[string]interface {}",
        ),
        (r#"{{ get "x" "a" }}"#, "map[string]interface {}"),
        (
            r#"{{ get .Values.a.b "a" }}"#,
            "expected map[string]interface {}; got float64",
        ),
        (r#"{{ get .Values.missing "a" }}"#, "got interface {}"),
        (r#"{{ hasKey .Values.missing "a" }}"#, "got interface {}"),
        (r#"{{ pluck "a" .Values "x" }}"#, "map[string]interface {}"),
        (
            r#"{{ upper .Values.missing }}"#,
            "expected string; got interface {}",
        ),
        (r#"{{ .Values.missing | nindent 4 }}"#, "expected string"),
        (r#"{{ upper .Values.a.b }}"#, "expected string; got float64"),
        (
            r#"{{ trunc .Values.num "abc" }}"#,
            "expected int; got float64",
        ),
        (
            r#"{{ indent .Values.num "x" }}"#,
            "expected int; got float64",
        ),
        (r#"{{ until .Values.num }}"#, "expected int; got float64"),
        (r#"{{ contains "a" 12 }}"#, "expected string"),
        (r#"{{ b64enc 12 }}"#, "expected string"),
        (r#"{{ replace "a" "b" true }}"#, "expected string"),
        (
            r#"{{ trim (list 1) }}"#,
            "expected string; got []interface {}",
        ),
        (r#"{{ upper (int 3) }}"#, "expected string; got int"),
        (r#"{{ printf 3 }}"#, "expected string"),
        (r#"{{ tpl 3 . }}"#, "expected string"),
        (r#"{{ include 3 . }}"#, "expected string"),
        (r#"{{ ternary 1 2 "true" }}"#, "expected bool"),
        (r#"{{ upper "a" "b" }}"#, "wrong number of args for upper"),
        // Sprig list functions on nil or a non-list.
        (
            r#"{{ first .Values.a.s }}"#,
            "Cannot find first on type string",
        ),
        (r#"{{ first .Values.missing }}"#, "nil pointer dereference"),
        (r#"{{ last "abc" }}"#, "Cannot find last on type string"),
        (r#"{{ rest .Values.a }}"#, "Cannot find rest on type map"),
        (r#"{{ initial 3 }}"#, "Cannot find initial on type int"),
        (r#"{{ uniq "abc" }}"#, "Cannot find uniq on type string"),
        (
            r#"{{ reverse .Values.a }}"#,
            "Cannot find reverse on type map",
        ),
        (r#"{{ has 1 "abc" }}"#, "Cannot find has on type string"),
        (
            r#"{{ without "abc" 1 }}"#,
            "Cannot find without on type string",
        ),
        (r#"{{ compact "abc" }}"#, "Cannot compact on type string"),
        (
            r#"{{ concat .Values.list "x" }}"#,
            "Cannot concat type string as list",
        ),
        (
            r#"{{ concat .Values.list nil }}"#,
            "nil pointer dereference",
        ),
        // Bounds and counts Go rejects.
        (
            r#"{{ substr 2 1 "hello" }}"#,
            "slice bounds out of range [2:1]",
        ),
        (
            r#"{{ substr 9 99 "hello" }}"#,
            "slice bounds out of range [9:5]",
        ),
        (r#"{{ repeat -1 "x" }}"#, "negative Repeat count"),
        // Sprig's crypto and URL functions: typed parameters and their errors.
        (
            r#"{{ genSignedCert "x" nil nil 1 (dict "Cert" "" "Key" "") }}"#,
            "expected sprig.certificate",
        ),
        (
            r#"{{ genCA "x" .Values.num }}"#,
            "expected int; got float64",
        ),
        (
            r#"{{ genSelfSignedCert "x" .Values.a.s nil 1 }}"#,
            "expected []interface {}; got string",
        ),
        (
            r#"{{ genCAWithKey "x" 1 "junk" }}"#,
            "parsing private key: no PEM data in input",
        ),
        (
            r#"{{ genSelfSignedCertWithKey "x" (list "1.2.3.x") nil 1 (genPrivateKey "ecdsa") }}"#,
            "error parsing ip: 1.2.3.x",
        ),
        (
            r#"{{ genSelfSignedCertWithKey "x" nil (list 1) 1 (genPrivateKey "ecdsa") }}"#,
            "error processing alternate dns name: 1 is not a string",
        ),
        (
            r#"{{ derivePassword .Values.num "long" "a" "b" "c" }}"#,
            "expected uint32",
        ),
        (
            r#"{{ decryptAES "k" "AAAA" }}"#,
            "slice bounds out of range [:16]",
        ),
        (
            r#"{{ decryptAES "k" "AAAAAAAAAAAAAAAAAAAAAAAA" }}"#,
            "input not full blocks",
        ),
        (
            r#"{{ decryptAES "k" "!!" }}"#,
            "illegal base64 data at input byte 0",
        ),
        (r#"{{ urlParse ":x" }}"#, "missing protocol scheme"),
        (
            r#"{{ urlJoin (dict "host" 1) }}"#,
            "unable to parse host key, must be of type string, but int found",
        ),
        (
            r#"{{ urlJoin .Values.a.s }}"#,
            "expected map[string]interface {}; got string",
        ),
        (
            r#"{{ toToml nil }}"#,
            "reflect: call of reflect.Value.Type on zero Value",
        ),
        (r#"{{ mustFromJson "{" }}"#, "mustFromJson"),
        (
            r#"{{ randBytes .Values.num }}"#,
            "expected int; got float64",
        ),
        (r#"{{ mustToYaml 1 }}"#, "mustToYaml"),
        (r#"{{ nindent -1 "a" }}"#, "negative Repeat count"),
        (r#"{{ indent -2 "a" }}"#, "negative Repeat count"),
        (
            r#"{{ deepCopy nil }}"#,
            "reflect: call of reflect.Value.Type on zero Value",
        ),
        (r#"{{ lt true false }}"#, "invalid type for comparison"),
        (r#"{{ merge .Values.a "x" }}"#, "map[string]interface {}"),
        // Typed maps and structs.
        (r#"{{ keys (split "," "a,b") }}"#, "got map[string]string"),
        (
            r#"{{ dig "_0" "d" (split "," "a,b") }}"#,
            "is map[string]string",
        ),
        (r#"{{ keys .Chart.Annotations }}"#, "got map[string]string"),
        (r#"{{ .Chart.Foo }}"#, "can't evaluate field Foo"),
        (
            r#"{{ .Capabilities.KubeVersion.Foo }}"#,
            "can't evaluate field Foo in type chartutil.KubeVersion",
        ),
        // index: integer positions, string keys.
        (
            r#"{{ index (list 1 2 3) 1.0 }}"#,
            "cannot index slice/array with type float64",
        ),
        (
            r#"{{ index .Values.list .Values.a.b }}"#,
            "cannot index slice/array with type float64",
        ),
        (
            r#"{{ index .Values.a 1 }}"#,
            "value has type int; should be string",
        ),
        (r#"{{ index "abc" 5 }}"#, "index out of range: 5"),
        // Template language.
        (
            r#"{{ range $i, $v := 3 }}{{ $i }}{{ end }}"#,
            "can't use 3 to iterate over more than one variable",
        ),
        (r#"{{ nil }}"#, "nil is not a command"),
        (
            r#"{{ toJson (list "\x7f") }}"#,
            "control characters are not allowed",
        ),
        (r#"{{ "bell\a" }}"#, "control characters are not allowed"),
        (r#"{{ divf 1 0 }}"#, "decimal division by 0"),
        (
            r#"{{ slice .Values.list -1 }}"#,
            "slice index out of bounds",
        ),
        (r#"{{ set nil "a" 1 }}"#, "assignment to entry in nil map"),
        (
            r#"{{ tpl "{{ define \"x\" }}X{{ end }}" . }}{{ include "x" . }}"#,
            "no template \"x\"",
        ),
        (
            r#"{{ mustToDate "2006-01-02" "bad" }}"#,
            "cannot parse \"bad\" as \"2006\"",
        ),
        (
            r#"{{ mustDateModify "bogus" now }}"#,
            "time: invalid duration \"bogus\"",
        ),
        (
            r#"{{ mustDateModify "5d" now }}"#,
            "unknown unit \"d\" in duration",
        ),
        // Go's parser: names helm does not define (even in a branch never taken), numbers,
        // comments, declarations.
        (
            r#"{{ if false }}{{ frob 1 }}{{ end }}"#,
            "function \"frob\" not defined",
        ),
        (
            r#"{{ if false }}{{ env "HOME" }}{{ end }}"#,
            "function \"env\" not defined",
        ),
        (r#"{{ 1x }}"#, "\"1x\""),
        (r#"{{ 0x1.8 }}"#, "\"0x1.8\""),
        (r#"{{ 'ab' }}"#, "'ab'"),
        (r#"{{/* c */ }}"#, "comment ends before closing delimiter"),
        (
            r#"{{ if $a, $b := 1 }}{{ end }}"#,
            "too many declarations in if",
        ),
        (
            r#"{{ template "nope" . }}"#,
            "template \"nope\" not defined",
        ),
        (r#"{{ include "nope" . }}"#, "no template \"nope\""),
        // Go 1.26 comparisons.
        (r#"{{ eq 1 }}"#, "missing argument for comparison"),
        (r#"{{ lt nil 1 }}"#, "invalid type for comparison"),
        (
            r#"{{ eq .Values.list .Values.list }}"#,
            "non-comparable type",
        ),
        (
            r#"{{ eq "a" "b" 1 }}"#,
            "incompatible types for comparison: string and int",
        ),
        (
            r#"{{ eq .Values.a.b 1 }}"#,
            "incompatible types for comparison: float64 and int",
        ),
        // A field of nil reached through a map or a range element is an error.
        (
            r#"{{ (dict).x.y }}"#,
            "nil pointer evaluating interface {}.y",
        ),
        (
            r#"{{ range (list nil) }}{{ .x }}{{ end }}"#,
            "nil pointer evaluating interface {}.x",
        ),
        (r#"{{ prepend "x" 1 }}"#, "Cannot prepend on type string"),
        (r#"{{ push "x" 1 }}"#, "Cannot push on type string"),
    ];
    let mut wrong = Vec::new();
    for (expr, want) in cases {
        let (ours, helm) = probe_both(expr, PROBE_VALUES);
        match (&ours, &helm) {
            (Err(o), Err(h)) if o.contains(want) && h.contains(want) => {}
            _ => wrong.push(format!(
                "{expr}: want both to fail with {want:?}\n  pallet: {ours:?}\n  helm: {helm:?}"
            )),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The accepted neighbours of those cases give helm's output: `.Values` is a map for `keys`,
/// `get`, `pick`, `hasKey`, `merge`; `dig` works on plain maps; `typeOf` names helm's types.
#[test]
fn typed_arguments_accepted_by_helm_give_helms_output() {
    let cases = [
        r#"{{ keys .Values | sortAlpha | join "," }}"#,
        r#"{{ get .Values "a" }}"#,
        r#"{{ get .Values.a "s" }}"#,
        r#"{{ hasKey .Values "list" }}"#,
        r#"{{ pick .Values "num" }}"#,
        r#"{{ dig "a" "b" "dflt" .Values.nested }}"#,
        r#"{{ dig "a" "zz" "dflt" .Values.nested }}"#,
        r#"{{ dig "a" "b" 0 (.Values | toYaml | fromYaml) }}"#,
        r#"{{ dig "x" "b" 0 (dict "a" .Values) }}"#,
        r#"{{ trunc (int .Values.num) "abcdef" }}"#,
        r#"{{ quote nil }}"#,
        r#"{{ typeOf .Values }}/{{ typeOf .Files }}/{{ typeOf .Chart }}/{{ typeOf .Capabilities }}/{{ typeOf .Template }}/{{ typeOf (deepCopy .Values) }}/{{ typeOf .Values.a }}"#,
        r#"{{ kindOf .Chart }}/{{ kindOf .Capabilities }}/{{ kindOf .Values }}"#,
    ];
    let mut wrong = Vec::new();
    for expr in cases {
        let (ours, helm) = probe_both(expr, PROBE_VALUES);
        if ours != helm || helm.is_err() {
            wrong.push(format!("{expr}\n  pallet: {ours:?}\n  helm: {helm:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Only the top chart's `.helmignore` applies (to subchart paths too); a directory subchart's
/// own `.helmignore` is not read by helm when rendering the parent.
#[test]
fn ignores_chart_helmignore_scope_matches_helm_template() {
    check_chart("ignores");
}

/// The agent's hook policy against helm: the objects `helm install` makes part of the release
/// (`helm template --no-hooks`) plus the hooks helm runs on install or upgrade, applied as
/// ordinary objects; test, delete and rollback hooks are left out; hooks with an event helm
/// does not know are dropped by helm itself (absent from `helm template` too).
#[test]
fn hook_policy_keeps_release_objects_and_the_hooks_the_agent_runs() {
    use pallet_formats::{render, Format, HelmOptions, RenderConfig};
    for name in ["documents", "starter"] {
        let chart = testdata().join("charts").join(name);
        let values = std::fs::read_dir(testdata().join("values").join(name))
            .expect("values dir")
            .map(|e| e.expect("entry").path())
            .min()
            .expect("a values file");
        let helm_with = |extra: &[&str]| -> Vec<serde_json::Value> {
            let out = Command::new(helm_bin())
                .args(["template", RELEASE])
                .arg(&chart)
                .args(["--namespace", NAMESPACE, "-f"])
                .arg(&values)
                .args(extra)
                .output()
                .expect("running helm");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            split_docs(&String::from_utf8_lossy(&out.stdout))
        };
        let all = helm_with(&[]);
        let mut want: Vec<String> = helm_with(&["--no-hooks"]).iter().map(key).collect();
        // Every hook but those only for rollbacks: install, upgrade, delete and test.
        let install_events = [
            "pre-install",
            "post-install",
            "pre-upgrade",
            "post-upgrade",
            "pre-delete",
            "post-delete",
            "test",
            "test-success",
        ];
        let mut hooks_seen = 0;
        for o in &all {
            let Some(h) = o["metadata"]["annotations"]["helm.sh/hook"].as_str() else {
                continue;
            };
            hooks_seen += 1;
            let h = h.to_lowercase();
            if h.split(',').any(|e| install_events.contains(&e.trim())) {
                want.push(key(o));
            }
        }
        assert!(hooks_seen >= 1, "{name}: the chart must have hooks");
        want.sort();
        let text = std::fs::read_to_string(&values).expect("values");
        let v: serde_json::Value =
            serde_saphyr::from_str_with_options(&text, yaml11()).expect("yaml");
        let config = RenderConfig {
            install_namespace: NAMESPACE.into(),
            helm: HelmOptions {
                release_name: RELEASE.into(),
                values: if v.is_null() {
                    serde_json::json!({})
                } else {
                    v
                },
                ..HelmOptions::default()
            },
            ..RenderConfig::default()
        };
        let rendered = render(Format::Helm, &chart, &config).expect("render");
        let mut got: Vec<String> = rendered
            .objects
            .iter()
            .map(|o| {
                let body = serde_json::Value::Object(o.object.body().clone());
                key(&body)
            })
            .collect();
        got.sort();
        assert_eq!(got, want, "{name}: agent object set under the hook policy");
    }
}

/// `import-values` in both forms (string: `exports.<name>`; map: `child`/`parent`), through an
/// alias, a condition, a nested subchart's imports re-imported, priorities against the
/// parent's and the user's values, and skipped non-table/missing children.
#[test]
fn imports_chart_import_values_match_helm_template() {
    check_chart("imports");
}

/// values.schema.json keywords (2020-12 by default, draft-07 in a subchart): valid values
/// render as helm renders them.
#[test]
fn schemas_chart_valid_values_match_helm_template() {
    check_chart("schemas");
}

/// Every invalid values file in testdata/helm/invalid/schemas fails in both, and pallet names
/// the JSON path helm names (also where helm's validator numbers items after a tuple from 0
/// and gives `propertyNames` failures the path '').
#[test]
fn schemas_chart_invalid_values_fail_in_both_at_the_same_path() {
    let chart = testdata().join("charts/schemas");
    let mut files: Vec<PathBuf> = std::fs::read_dir(testdata().join("invalid/schemas"))
        .expect("invalid dir")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    assert!(files.len() >= 20);
    let mut wrong = Vec::new();
    for values in files {
        let out = Command::new(helm_bin())
            .args(["template", RELEASE])
            .arg(&chart)
            .arg("-f")
            .arg(&values)
            .output()
            .expect("running helm");
        let helm_err = String::from_utf8_lossy(&out.stderr).into_owned();
        let helm_path = helm_err
            .lines()
            .find_map(|l| l.trim_start().strip_prefix("- at '"))
            .and_then(|l| l.split('\'').next())
            .map(str::to_string);
        let text = std::fs::read_to_string(&values).expect("values");
        let v: serde_json::Value =
            serde_saphyr::from_str_with_options(&text, yaml11()).expect("yaml");
        let opts = RenderOptions {
            values: v,
            ..RenderOptions::default()
        };
        let ours = helm::render(&chart, &opts).map_err(|e| e.to_string());
        let name = values.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let ok = match (&ours, out.status.success(), &helm_path) {
            (Err(o), false, Some(p)) => o.contains(&format!("at '{p}'")),
            _ => false,
        };
        if !ok {
            wrong.push(format!(
                "{name} ({text:?}):\n  pallet: {ours:?}\n  helm: {helm_err}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// values.yaml and fromYaml read as YAML 1.1, as helm does: octal numbers, yes/no/on/off
/// booleans, the last of repeated keys; a literal `0644` in a template is 420 in the object.
#[test]
fn yaml11_chart_matches_helm_template() {
    check_chart("yaml11");
}

/// Sprig and Go corner cases where helm returns a value: pallet returns the same one
/// (conversions like spf13/cast, Go's printf verbs, xstrings' snakecase, Go's strings
/// functions, encoding/json numbers, the fields of `.Chart`).
#[test]
fn sprig_and_go_corner_cases_give_helms_output() {
    let cases = [
        // Sprig's deprecated snake_case spellings.
        r#"{{ toDate "2006-01-02" "2020-01-31" | date_modify "25h" | date "2006-01-02 15:04" }} {{ toDate "2006-01-02" "2020-01-31" | must_date_modify "-1h" | date "2006-01-02 15:04" }} {{ date_in_zone "2006-01-02" (toDate "2006-01-02" "2020-01-31") "UTC" }}"#,
        r#"{{ int "0x1F" }} {{ int "1e3" }} {{ int64 "077" }} {{ int "3.0" }} {{ int "3.5" }} {{ int "-0b101" }} {{ int "1_000" }} {{ int " 3" }} {{ int 3.9 }} {{ int -3.9 }} {{ int true }} {{ int nil }}"#,
        r#"{{ atoi " 12" }} {{ atoi "+12" }} {{ atoi "0x1F" }} {{ float64 "1e3" }} {{ add "1" 2 }} {{ sub 5 "2" }} {{ max 1 "5" 3 }}"#,
        r#"{{ toString nil }} {{ toString .Values.list }} {{ toStrings "ab" }} {{ toStrings nil }} {{ toStrings (list 1 nil "a") }}"#,
        r#"{{ sortAlpha "cba" }} {{ sortAlpha .Values.a }} {{ sortAlpha (list 3 nil "a" 1.5) }} {{ has 1 nil }}"#,
        r#"{{ until -3 }} {{ until 0 }} {{ untilStep 10 0 -3 }} {{ untilStep 0 10 0 }}"#,
        r#"{{ seq 0 }}|{{ seq 3 }}|{{ seq 2 5 }}|{{ seq 5 2 }}|{{ seq 0 2 7 }}|{{ seq 7 -2 0 }}|{{ seq 3 1 3 }}|{{ seq 3 -1 3 }}|{{ seq 1 0 5 }}|{{ seq 5 1 2 }}"#,
        r#"{{ b64dec "!!!" }}|{{ b64dec "abc" }}|{{ b64dec "aGVs\nbG8=" }}|{{ b64dec "aGVsbG8" }}|{{ b64dec "aGVsbA==" }}"#,
        r#"{{ printf "%d %s %v %q %x %X %o %b %e %f %g %t %5.2f %-5s| %05d %+d %c %U %%" 3 "s" .Values.a "q" 255 255 8 5 1234.5678 3.14159 2.5 true 3.14159 "ab" 42 7 65 9731 }}"#,
        r#"{{ printf "%T %T %T %T %T" 1 .Values.a.b "s" .Values.list .Values.a }}"#,
        r#"{{ printf "%q" 65 }} {{ printf "%v %s %d" .Values.list .Values.list .Values.list }}"#,
        r#"{{ printf "%6.2v|%-8v|%08.3f|%.3s|%5.1q" 3.14159 "x" 3.14159 "abcdef" "abc" }}"#,
        r#"{{ printf "%*d" 5 3 }} {{ printf "%[2]s %[1]s" "a" "b" }} {{ printf "%x %X % x %#x" "hi" "hi" "hi" "hi" }}"#,
        r#"{{ printf "%d" .Values.a.b }} {{ printf "%s" .Values.num }} {{ printf "%v" nil }} {{ printf "%s" nil }} {{ printf "%d" true }} {{ printf "%s %s" "a" }} {{ printf "%s" "a" "b" }}"#,
        r#"{{ printf "%g %g %g %G %e" 100000.0 1000000.0 0.0001 1e-5 0.0 }} {{ printf "%.0f %.1f %.2f %.3g" 2.5 0.25 1.005 0.0001234 }}"#,
        r#"{{ printf "%3c|%-4q|%#o|%#b|%x" 65 66 8 5 -255 }} {{ printf "%v|%v" (dict "a" 1) (list) }}"#,
        r#"{{ js "<a href='x'>\"&\u2028</a>" }} {{ upper "straße" }} {{ lower "ÀB" }}"#,
        r#"{{ substr -1 3 "hello" }} {{ substr 1 99 "hello" }}"#,
        r#"{{ snakecase "HTTPServer fooBar" }} {{ kebabcase "HTTPServer fooBar" }} {{ snakecase "Bld4Floor3rd" }} {{ snakecase "HTTP20xOK" }} {{ snakecase "http2xx" }} {{ snakecase "already_snake" }} {{ snakecase "  lead-and--trail__ " }} {{ snakecase "Hello, World!" }} {{ kebabcase "GO_PATH" }} {{ snakecase "duration2m3s" }} {{ snakecase "ABC" }} {{ snakecase "aB" }} {{ snakecase "x.y.Z" }}"#,
        r#"{{ split "" "abc" }} {{ splitList "" "abc" }} {{ splitn "" 2 "abc" }} {{ splitn "," 0 "a,b" }} {{ typeOf (split "," "a") }}"#,
        r#"{{ regexMatch "[" "a" }} {{ dict "a" }}"#,
        r#"{{ toJson .Values.a.b }} {{ toJson 1e21 }} {{ toJson 1e-7 }} {{ toJson 0.000001 }} {{ toJson 123456789.0 }}"#,
        r#"{{ fromYaml "[1]" | toJson }} {{ fromYaml "hello" | toJson }} {{ fromYamlArray "a: 1" | toJson }} {{ fromYamlArray "x" | toJson }}"#,
        r#"{{ fromJson "\"s\"" | toJson }} {{ fromJson "true" | toJson }} {{ fromJson "1" | toJson }} {{ fromJson "[1]" | toJson }} {{ fromJsonArray "1" | toJson }} {{ fromJsonArray "{}" | toJson }}"#,
        r#"{{ printf "%q|%q|%q|%q|%q|%q|%q|%q|%q" (toString .Chart.Sources) (toString .Chart.Keywords) (toString .Chart.Maintainers) (toString .Chart.Annotations) (toString .Chart.Deprecated) (toString .Chart.Dependencies) (toString .Chart.Tags) (toString .Chart.Condition) (toString .Chart.APIVersion) }}"#,
        r#"{{ .Chart.Metadata.Name }} {{ .Chart.Metadata.Version }} {{ .Files.Foo | typeOf }} {{ .Files.Foo }} {{ .Capabilities.KubeVersion }}"#,
        r#"{{ typeOf now }} {{ kindOf now }} {{ typeOf (semver "1.2.3") }} {{ typeOf .Capabilities.APIVersions }} {{ kindOf .Chart }}"#,
        r#"{{ "\x41\u00e9\101\011x" }} {{ 'a' }} {{ 0x1F }} {{ 1e3 }} {{ 0o17 }} {{ 1_000 }} {{ -3 }} {{ +3 }} {{ range $i := 3 }}{{ $i }}{{ end }} {{ if false }}{{ nil }}{{ end }}"#,
        r#"{{ 0x1p60 }} {{ 0x1p-2 }} {{ 0x_1F }} {{ 1_000.5 }} {{ .5 }} {{ 1E2 }} {{ 0_7 }} {{ 9223372036854775807 }} {{ '\'' }} {{ '\u00e9' }} {{ '\101' }} {{ typeOf 1e3 }} {{ typeOf 'a' }}"#,
        r#"{{ eq true true }} {{ ne .Values.missing "x" }} {{ eq (index .Values "missing") "x" }} {{ eq nil .Values.missing }} {{ eq .Values.list nil }} {{ eq 1 2 1 }} {{ eq "a" "a" 1 }} {{ le 2 2 }}"#,
        r#"{{ (.Values.missing).x }}|{{ (index .Values "zz").x.y }}|{{ $v := .Values.missing }}{{ $v.y }}|{{ define "nilx" }}{{ .x }}{{ end }}{{ include "nilx" .Values.missing }}|{{ with .Values.a }}{{ (.zz).x }}{{ end }}"#,
        r#"{{ if $x := .Values.a }}{{ $x.s }}{{ else if $y := 1 }}{{ $y }}{{ end }} {{ with $w := .Values.zz }}{{ else }}[{{ $w }}]{{ end }} {{ $i := 9 }}{{ range $i = list }}{{ end }}{{ $i }} {{ range $k, $v := .Values.a }}{{ $k }}{{ end }}"#,
        r#"{{ addf 0.1 0.2 }} {{ addf 1 "2.5" }} {{ addf 1.1 2.2 3.3 }} {{ addf }} {{ addf 1e300 1e300 }}"#,
        r#"{{ mulf 0.1 3 }} {{ subf 0.3 0.1 }} {{ divf 1 3 }} {{ add1f 0.1 }} {{ maxf 1 2.5 "3" }} {{ minf 1 2.5 }} {{ divf 2 3 }} {{ divf -2 3 }} {{ mulf 1.5 1.5 }} {{ subf 1 }}"#,
        r#"{{ b32enc "hello" }} {{ b32dec "NBSWY3DP" }} {{ b32enc "" }} {{ b32enc "a" }} {{ b32enc "ab" }} {{ b32enc "abc" }} {{ b32enc "abcd" }} {{ b32dec "ME======" }} {{ b32dec "bad!" }}"#,
        r#"{{ swapcase "Hello World" }} {{ initials "Hello big World" }} {{ untitle "Hello World" }} {{ sha512sum "abc" }} {{ regexQuoteMeta "a.b*c#-&" }} {{ typeIsLike "string" "x" }}"#,
        r#"{{ base "a/b/c.txt" }} {{ dir "a/b/c.txt" }} {{ ext "a/b/c.txt" }} {{ clean "a//b/../c" }} {{ isAbs "/a" }} {{ base "" }} {{ base "/" }} {{ dir "x" }} {{ dir "/x" }} {{ ext "a.b/c" }} {{ clean "/../a/./b/" }} {{ clean "../../x" }}"#,
        r#"{{ push (list 1) 2 }} {{ all 1 "a" true }} {{ any 0 "" 1 }} {{ chunk 2 (list 1 2 3) }} {{ all }} {{ any }} {{ toDecimal "0777" }} {{ toDecimal 777 }} {{ toDecimal "x" }}"#,
        // A literal nil where a map is wanted is a nil map: empty for reading and merging.
        r#"{{ keys nil }} {{ get nil "a" }} {{ hasKey nil "a" }} {{ pick nil "a" }} {{ omit nil "a" }} {{ values nil }} {{ pluck "a" nil }} {{ unset nil "a" }} {{ merge nil (dict "a" 1) }} {{ mergeOverwrite nil (dict "a" 1) }} {{ merge (dict "a" 1) nil }}"#,
        // Defines inside tpl text are visible to that tpl (and tpl inside it) only.
        r#"{{ tpl "{{ define \"x\" }}X{{ .a }}{{ end }}{{ include \"x\" . }}" (dict "a" 1) }} {{ tpl "{{ define \"y\" }}Y{{ end }}{{ template \"y\" }}-{{ tpl \"{{ include \\\"y\\\" . }}\" . }}" . }}"#,
        // Dates: toDate (Go layouts), dateModify (Go durations), duration(Round), zones.
        r#"{{ toDate "2006-01-02" "2024-02-29" | date "2006-01-02T15:04:05Z07:00" }} {{ toDate "2006-01-02 15:04" "2024-02-29 13:04" | unixEpoch }} {{ toDate "2006-01-02" "bad" | date "2006" }}"#,
        r#"{{ dateModify "1h30m" (toDate "2006-01-02" "2024-02-29") | date "2006-01-02 15:04" }} {{ dateModify "-48h" (toDate "2006-01-02" "2024-03-01") | date "2006-01-02" }} {{ dateModify "bogus" (toDate "2006-01-02" "2024-03-01") | date "2006-01-02" }}"#,
        r#"{{ dateInZone "2006-01-02 15:04 MST" (toDate "2006-01-02" "2024-03-01") "Local" }} {{ htmlDateInZone (toDate "2006-01-02" "2024-03-01") "UTC" }}"#,
        r#"{{ toDate "2006-01-02T15:04:05Z07:00" "2024-02-29T13:04:05+02:00" | date "2006-01-02 15:04 -0700" }} {{ toDate "Jan 2, 2006 at 3:04pm (MST)" "Feb 3, 2013 at 7:54pm (PST)" | date "2006" }}"#,
        r#"{{ duration "90" }} {{ duration "3725" }} {{ duration "-1" }} {{ duration "x" }} {{ duration 1.5 }} {{ durationRound "2h10m5s" }} {{ durationRound "1h" }} {{ durationRound "-90m" }} {{ durationRound "400ms" }} {{ durationRound "800h" }} {{ durationRound "9000h" }}"#,
        r#"{{ toDate "2006-01-02 15:04:05.000" "2024-02-29 13:04:05.123" | date "15:04:05.000" }} {{ toDate "2006-01-02 15:04:05" "2024-02-29 13:04:05.5" | date "05.999999999" }}"#,
        r#"{{ toDate "Monday, 02-Jan-06 15:04:05 MST" "Thursday, 29-Feb-24 13:04:05 PST" | unixEpoch }} {{ toDate "3:04PM" "1:04AM" | date "15:04" }} {{ toDate "_2 Jan 2006" " 9 Feb 2024" | date "2006-01-02" }} {{ toDate "2006-01-02" "2024-13-01" | date "2006" }}"#,
        r#"{{ dateModify "1.5h" (toDate "2006-01-02" "2024-02-29") | date "15:04" }} {{ dateModify "90s" (toDate "2006-01-02" "2024-02-29") | date "15:04:05" }} {{ dateModify "-1h-30m" (toDate "2006-01-02" "2024-02-29") | date "2006-01-02 15:04" }}"#,
        r#"{{ index "abc" 1 }} {{ index (list (list 1 2)) 0 1 }} {{ toJson " <>" }} {{ toRawJson " <>" }} {{ toJson "" }}"#,
        // Integral floats through JSON to YAML: int64/uint64 digits when they fit, else %g.
        r#"{{ toYaml (list 1e20 -1e20 12345678901234567890.0 9223372036854775807.0 9007199254740993.0 1e6 1.5e-7 123456.789) | replace "\n" "⏎" }}"#,
        // go-yaml v2's scalar styles: escapes, breaks other than \n, timestamps, 0o octal,
        // literal block indicators, and the characters its reader refuses (toYaml is "").
        r#"{{ toYaml (list "a\r\nb" "tab\tend" "é✓😀" "\u00a0nbsp" "zero\u200bwidth") | replace "\n" "⏎" }}"#,
        r#"{{ toYaml (list "line\u2028sep") | toJson }} {{ toYaml (dict "k" "line\u2028sep" "j" "it's\u2029x") | toJson }}"#,
        r#"{{ toYaml (list " lead" "trail " "a\n b" "a\n\n" "\n" " \n x" "x\n " "\nabc" "\n\n" "a\n") | replace "\n" "⏎" }}"#,
        r##"{{ toYaml (list "#c" "a #b" "a# b" "a:b" "a: b" "key:" "- x" "-x" "? x" "?x" ": x" ",x" "!x" "&x" "*x" "|x" ">x" "%x" "@x" "`x" "'x" "\"x" "[x" "]x" "{x" "}x") | replace "\n" "⏎" }}"##,
        r#"{{ toYaml (list "0o17" "+1" "2001-12-14t21:59:43.10-05:00" "2001-12-14 21:59:43.10 -5" "2024-01-01" "2024-1-2" "2024-01-01T10:00:00Z" "2024-01-01 10:00:00" "20240101" "2024-13-45" "12:30" "<<") | replace "\n" "⏎" }}"#,
        r#"{{ toYaml (list "x\u0085y" "a\rb" "nul\x00" "esc\x1b" "v\v" "bs\\q" "a\u0085\nb" "bell\a") | replace "\n" "⏎" }} {{ toYaml (dict "t\tk" 1 "x" "y") | replace "\n" "⏎" }}"#,
        r#"[{{ toYaml (list "ok" "del\x7f") }}|{{ toYaml "c1\u0080" }}]"#,
        // go-yaml v2 folds plain and quoted scalars past column 80 (not map keys).
        r#"{{ toYaml (list .Values.long) | replace "\n" "⏎" }} {{ toYaml (dict "k" (list .Values.long)) | replace "\n" "⏎" }}"#,
        r#"{{ toYaml (dict "k" (dict "j" .Values.long)) | replace "\n" "⏎" }} {{ toYaml (list (dict "k" .Values.long)) | replace "\n" "⏎" }}"#,
        r#"{{ toYaml (list (list .Values.long)) | replace "\n" "⏎" }} {{ toYaml .Values.long | replace "\n" "⏎" }}"#,
        r#"{{ toYaml (list "it's a rather long string value with many words that goes well past the eighty character mark: yes") | replace "\n" "⏎" }}"#,
        r#"{{ toYaml (list "a rather long string value with many words that goes well past the eighty character\tmark sure thing") | replace "\n" "⏎" }}"#,
        r#"{{ toYaml (list "a rather long string value with many words that goes well past the eighty  character  mark sure  thing  really") | replace "\n" "⏎" }}"#,
        r#"{{ toYaml (list "averyveryveryveryveryveryveryveryveryveryveryveryveryveryveryveryveryveryveryverylongword and more") | replace "\n" "⏎" }}"#,
        r#"{{ toYaml (list "- starts with dash and is a rather long string value with many words that goes well past eighty" "<<") | replace "\n" "⏎" }}"#,
        // go-yaml v2's resolve decides quoting: Go's ParseInt/ParseUint with base prefixes,
        // yamlStyleFloat, and isBase60Float's exact pattern (an address with a port is plain).
        r#"{{ toYaml (list "10.0.0.1:2379" "1:20" "1:60" "12:30:45" "1:2.5" "-1:20" "+1:20" "1:5_5" "1_0:20" "v1:20" "1.2.3" "12.30" "_1" "1_000" "0x1F" "0X1f" "08" "1e5" "1e" ".5" "+.5" "1." "-" "0b101" "0b-1" "-0b11" "1e400" ".Nan" "+inf" "0x" "99999999999999999999" "0xFFFFFFFFFFFFFFFFF" "18446744073709551615" "-9223372036854775808" "9223372036854775808") | replace "\n" "⏎" }}"#,
        // go-yaml sorts map keys in its natural order (digit runs by value, a letter after
        // other characters), not byte order; v3 (toYamlPretty) differs after digits.
        r#"{{ $d := dict "node1" 1 "node10" 1 "node2" 1 "node12" 1 "aB" 1 "a_" 1 "a-b" 1 "ab" 1 "Z" 1 "_x" 1 "k8s-app" 1 "k10s" 1 "app.kubernetes.io/name" 1 "helm.sh/chart" 1 "v1beta1" 1 "v1" 1 "v10" 1 "x01" 1 "x1" 1 "x001" 1 "é" 1 "e" 1 "key~" 1 "key{" 1 "key[" 1 "1a" 1 "1_" 1 }}{{ toYaml $d | replace "\n" "⏎" }}|{{ toYamlPretty $d | replace "\n" "⏎" }}|{{ toJson $d }}"#,
        // fromYaml reads the first document only.
        r#"{{ fromYaml "a: 1\n---\nb: 2" | toJson }} {{ fromYaml "---\na: 1\n---\nb: [" | toJson }} {{ fromYaml "a: 1\n...\nb: [" | toJson }} {{ fromYaml "---\n---\nb: 2" | toJson }} {{ fromYamlArray "- 1\n---\n- 2" | toJson }} {{ fromYaml "a: |\n  x\n---\nb: 1" | toJson }}"#,
        // Strings and paths: goutils' AbbreviateFull, filepath (Unix), hello.
        r#"{{ abbrevboth 5 10 "1234 5678 9123" }}|{{ abbrevboth 0 10 "1234 5678 9123" }}|{{ abbrevboth 3 6 "abcdefghijkl" }}|{{ abbrevboth 10 7 "abcdefghijklmnopqrstu" }}|{{ abbrevboth 20 8 "abcdefghijklmnopqrstu" }}|{{ abbrevboth 1 3 "abcdef" }}|{{ hello }}"#,
        r#"{{ osBase "/a/b.txt" }} {{ osDir "/a/b" }} {{ osExt "x.tar.gz" }} {{ osClean "a//b/../c" }} {{ osIsAbs "/x" }} {{ osIsAbs "x" }} {{ osBase "" }} {{ osDir "" }}"#,
        // net/url: urlParse's fields, urlJoin's URL.String, escapes.
        r#"{{ urlParse "https://us%40r:p%3Aw@example.com:8443/a%20b/c?x=1&y=2#frag%21" | toJson }} {{ urlParse "mailto:a@b" | toJson }} {{ urlParse "//host/p" | toJson }} {{ urlParse "/rel?q" | toJson }} {{ urlParse "http://[::1]:80/x" | toJson }} {{ urlParse "HTTP://h" | toJson }}"#,
        r#"{{ urlJoin (dict "scheme" "https" "host" "h:1" "path" "/a b" "query" "x=1" "fragment" "f g!" "userinfo" "u:p@x") }} {{ urlJoin (dict "path" "a:b") }} {{ urlJoin (dict "scheme" "mailto" "opaque" "a@b") }} {{ urlJoin (dict "host" "h" "path" "p") }} {{ urlJoin (dict) }}"#,
        r##"{{ range list "postgres://u:p%20w@db:5432/name?sslmode=disable" "redis://:secret@redis-master:6379/0" "s3://bucket/key/with%2Fslash" "file:///etc/passwd" "file:relative" "//x" "" "?q=1" "#frag" "HTTP://EXAMPLE.COM/%7Euser" "http://[fe80::1%25en0]:8080/" "http://host:/p" "urn:isbn:123" "http://a.b/c d" "http://h/p?" "http://h/ü" "http://h/p;params?q" }}{{ urlParse . | toJson }} {{ urlParse . | urlJoin }}|{{ end }}"##,
        // helm template does no DNS lookups; mustFromJson takes any JSON value.
        r#"{{ getHostByName "localhost" | quote }} {{ mustFromJson "[1,2]" | toJson }} {{ mustFromJson "\"s\"" }} {{ mustFromJson "{\"a\":1.5}" | toJson }}"#,
        // toToml: BurntSushi's layout (direct keys first, tables, arrays of tables, inline
        // tables in mixed arrays, quoted keys, nils skipped); fromToml.
        r#"{{ toToml (dict "a" 1 "b" "x\ty\"" "c" (dict "d" (list 1 2) "e" (dict "f" true)) "g" (list (dict "h" 1) (dict "h" 2)) "i" 1.5 "j" 2.0 "k y" nil "l" (list 1 (dict "m" 2)) "" 3) | replace "\n" "⏎" }}"#,
        r#"{{ toToml "str" }}|{{ toToml (list 1 nil) }}|{{ toToml .Values | replace "\n" "⏎" }}|{{ toToml (dict) }}"#,
        r#"{{ fromToml "a = 1\nb = 'x'\n[c]\nd = [1.5, true]\n[[e]]\nf = 2\n" | toJson }}"#,
        // toYamlPretty: go-yaml v3 with indent 2 (indented sequences, natural key order,
        // %g floats, no folding).
        r#"{{ toYamlPretty .Values | replace "\n" "⏎" }}|{{ toYamlPretty (list "a" (dict "x" (list 1 2) "y" (dict)) (list) (list (list 1)) nil 1.5e6) | replace "\n" "⏎" }}|{{ toYamlPretty (dict "a10" 1 "a9" 2 "a09" 3 "B" 4 "_x" 5 "1" 6 "k2v" 7 "k2" 8 "yes" "on" "t" "1:20" "u" "10.0.0.1:2379") | replace "\n" "⏎" }}|{{ toYamlPretty (dict "m" "a\n b\n" "n" "x\n\n" "o" " x\ny" "p" "ends \nx") | replace "\n" "⏎" }}|{{ toYamlPretty "s" }}"#,
        // Deterministic crypto: derivePassword (Master Password), decryptAES of helm's own
        // encryptAES output (a password past 32 bytes is cut), an empty ciphertext.
        r#"{{ derivePassword 1 "long" "password" "user" "example.com" }} {{ derivePassword 2 "maximum" "pw" "u" "s" }} {{ derivePassword 1 "pin" "pw" "u" "s" }} {{ derivePassword 1 "basic" "pw" "" "" }} {{ derivePassword 1 "nope" "pw" "u" "s" }} {{ derivePassword 1 "short" "p" "üser" "s" }} {{ derivePassword 3 "medium" "p" "u" "s" }}"#,
        // Random output whose shape is fixed: lengths, the bcrypt 72-byte limit, htpasswd.
        r#"{{ len (bcrypt "x") }} {{ bcrypt (repeat 73 "a") }} {{ len (randBytes 5) }} {{ randBytes 0 | quote }} {{ len (shuffle "abc") }} {{ shuffle "" | quote }} {{ len (encryptAES "k" "x") }} {{ len (encryptAES "k" (repeat 16 "x")) }} {{ len (htpasswd "" "pw") }} {{ htpasswd "" "pw" | substr 0 8 }}"#,
        r#"{{ decryptAES "secretkey" "LUtjOzsxQR5TiAXYaDlti2QTfiTZT54KrPUxWzBpwxjgd8PbFlDZjlZydBdah37Z" }}|{{ decryptAES "a-much-longer-password-than-32-bytes-is-cut" "7Jn6+FyGtr+FnxixD7iEoyqeJv9OgJo8vLJmiVywNaE=" }}|{{ decryptAES "k" "" }}|{{ encryptAES "k" "" }}|{{ genPrivateKey "rsa2" }}|{{ htpasswd "a:b" "pw" }}"#,
    ];
    let mut wrong = Vec::new();
    for expr in cases {
        let (ours, helm) = probe_both(expr, PROBE_VALUES);
        if ours != helm || helm.is_err() {
            wrong.push(format!("{expr}\n  pallet: {ours:?}\n  helm: {helm:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Chart.yaml checks helm makes before rendering (its loader's `Validate` and the
/// `kubeVersion` constraint against the cluster): pallet fails on the same charts with the
/// same message, and renders the same charts helm accepts.
#[test]
fn chart_metadata_validation_matches_helm() {
    let cases: &[(&str, Option<&str>)] = &[
        ("apiVersion: v2\nname: probe\n", Some("chart.metadata.version is required")),
        ("apiVersion: v2\nname: probe\nversion: abc\n", Some("chart.metadata.version \"abc\" is invalid")),
        ("apiVersion: v2\nname: probe\nversion: 0.1.0\ntype: weird\n", Some("chart.metadata.type must be application or library")),
        ("apiVersion: v2\nname: p/x\nversion: 0.1.0\n", Some("chart.metadata.name \"p/x\" is invalid")),
        ("apiVersion: v2\nname: probe\nversion: 0.1.0\nkubeVersion: \">=1.30.0-0\"\n", Some("chart requires kubeVersion: >=1.30.0-0 which is incompatible with Kubernetes v1.20.0")),
        ("apiVersion: v2\nname: probe\nversion: 0.1.0\nkubeVersion: bogus\n", Some("chart requires kubeVersion: bogus which is incompatible")),
        ("apiVersion: v2\nname: probe\nversion: 0.1.0\nkubeVersion: \">=1.10.0-0\"\n", None),
        ("apiVersion: v2\nname: probe\nversion: 1\n", None),
        ("name: probe\nversion: 0.1.0\n", None),
    ];
    let mut wrong = Vec::new();
    for (chart_yaml, want) in cases {
        let dir = probe_chart("{{ .Chart.APIVersion }}", "{}\n");
        let chart = dir.path().join("probe");
        std::fs::write(chart.join("Chart.yaml"), chart_yaml).expect("write");
        let out = Command::new(helm_bin())
            .args(["template", RELEASE])
            .arg(&chart)
            .output()
            .expect("running helm");
        let helm_err = String::from_utf8_lossy(&out.stderr).into_owned();
        let ours = helm::render(&chart, &RenderOptions::default()).map_err(|e| e.to_string());
        let ok = match (want, &ours) {
            (Some(w), Err(o)) => !out.status.success() && helm_err.contains(w) && o.contains(w),
            (None, Ok(objs)) => {
                out.status.success()
                    && split_docs(&String::from_utf8_lossy(&out.stdout))
                        .first()
                        .map(|d| d["data"]["out"].clone())
                        == objs.first().map(|d| d["data"]["out"].clone())
            }
            _ => false,
        };
        if !ok {
            wrong.push(format!(
                "{chart_yaml:?}\n  pallet: {ours:?}\n  helm: {helm_err}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Every YAML file helm reads with long comment blocks between keys (values.yaml, Chart.yaml,
/// crds/, a `.Files` file through `fromYaml`, user values, the rendered manifest), and a key
/// repeated in the rendered output (the last value wins, as in helm).
#[test]
fn comments_chart_matches_helm_template() {
    check_chart("comments");
}

/// `valuesFiles` then user values, as `helm template -f chart/values-prod.yaml -f user.yaml`
/// merges them over the chart's values.yaml: maps key by key, lists and scalars replaced, a null
/// removing a chart default.
#[test]
fn values_files_merge_as_helm_dash_f_does() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("chart");
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: vf\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        chart.join("values.yaml"),
        "image: {repo: app, tag: v1, pull: IfNotPresent}\nports: [80, 443]\ndebug: true\nname: chart\n",
    )
    .unwrap();
    std::fs::write(
        chart.join("values-prod.yaml"),
        "image: {tag: v2}\nports: [8080]\ndebug: null\nname: prod\n",
    )
    .unwrap();
    std::fs::write(
        chart.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: values}\ndata:\n  values: {{ toJson .Values | quote }}\n",
    )
    .unwrap();
    let user = dir.path().join("user.yaml");
    std::fs::write(&user, "image: {pull: Always}\nname: user\n").unwrap();
    let out = Command::new(helm_bin())
        .args(["template", RELEASE])
        .arg(&chart)
        .args(["--namespace", NAMESPACE, "-f"])
        .arg(chart.join("values-prod.yaml"))
        .arg("-f")
        .arg(&user)
        .output()
        .expect("running helm");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = split_docs(&String::from_utf8_lossy(&out.stdout));
    let config = pallet_formats::RenderConfig {
        install_namespace: NAMESPACE.into(),
        helm: pallet_formats::HelmOptions {
            release_name: RELEASE.into(),
            values: serde_json::json!({"image": {"pull": "Always"}, "name": "user"}),
            values_files: vec!["values-prod.yaml".into()],
            ..Default::default()
        },
        ..Default::default()
    };
    let got = pallet_formats::render(pallet_formats::Format::Helm, &chart, &config).unwrap();
    let got = got.objects[0].object.body()["data"]["values"].clone();
    assert_eq!(got, want[0]["data"]["values"]);
    let values: serde_json::Value = serde_json::from_str(got.as_str().unwrap()).unwrap();
    assert_eq!(
        values,
        serde_json::json!({"image": {"repo": "app", "tag": "v2", "pull": "Always"}, "ports": [8080], "name": "user"})
    );
}

/// Constructs found in published charts outside the corpus (`helm_conformance_extra`), one
/// probe per class: pallet must print what helm prints.
#[test]
fn extra_chart_constructs_give_helms_output() {
    let cases = [
        // A missing map key where a map is wanted is a nil map (istio's profiles:
        // `mustMergeOverwrite $defaults ($profile.global)`); only a present nil is an error.
        r#"{{ $p := dict }}{{ mustMergeOverwrite (dict "a" 1) ($p.global) (dict "b" 2) | toJson }} {{ merge (dict "a" 1) (.Values.zz) | toJson }} {{ $v := .Values.zz }}{{ keys $v }} {{ (fromYaml "x: 1").y | merge (dict) | toJson }} {{ .Values.zz | keys }}"#,
        // chartutil.Values' methods (cilium: `dig "a" "" .Values.AsMap`).
        r#"{{ dig "a" "s" "" .Values.AsMap }} {{ typeOf .Values.AsMap }} {{ .Values.Table "nested.a" | toJson }} {{ typeOf (.Values.Table "a") }} {{ .Values.PathValue "nested.a.b" }} {{ .Values.PathValue "num" }} {{ .Values.YAML | replace "\n" "⏎" }}"#,
        // go-yaml reads quoted continuation lines no deeper than their key (flagger's CRDs).
        r#"{{ fromYaml "a:\n  b: 'one\n  two'\n  c: \"x\n y\n\"\n" | toJson }}"#,
        // `$` redeclared or assigned in a template (cluster-api-operator's helpers).
        r#"{{ define "root" }}{{- $ := .ROOT -}}{{ $.Values.a.s }}/{{ $.x }}{{ end }}{{ include "root" (dict "ROOT" (dict "Values" (dict "a" (dict "s" "inner")) "x" 1)) }} {{ $.Values.a.s }} {{ $ = dict "Values" 2 }}{{ $.Values }}"#,
        // A missing value prints as "<no value>" inside include's result (cilium's
        // `include ".../cilium-configmap.yaml" . | sha256sum`); helm removes it from the
        // file's output and from tpl's result only.
        r#"{{ define "nv" }}[{{ .Values.zz }}|{{ index .Values "zz" }}|{{ (dict "a" nil).a }}]{{ end }}{{ include "nv" . | quote }} {{ include "nv" . | sha256sum }} {{ tpl "{{ .Values.zz }}" . | quote }} {{ .Values.zz }} {{ template "nv" . }} {{ "<no value>" }}"#,
        // A missing key of a map[string]string is "" (envoy gateway's `splitn ":" 2
        // ($parts._1)`), of a map[string]interface{} nil.
        r#"{{ $p := splitn "/" 2 "abc" }}{{ splitn ":" 2 $p._1 | toJson }} {{ $p._1 | quote }} {{ index $p "_5" | quote }} {{ kindIs "string" (split "," "a")._3 }} {{ typeOf (index .Chart.Annotations "zz") }} {{ (dict).x | quote }}"#,
        // A variable declared in an `if` branch is in scope in its `else` (kafka's secrets):
        // unset there, it is an outer variable of that name, or an error only if that runs.
        r#"{{ if false }}{{ $h := list }}{{ else if false }}{{ $h }}{{ else }}ok{{ end }} {{ $y := "outer" }}{{ if false }}{{ $y := "inner" }}{{ else }}{{ $y }}{{ end }} {{ range list }}{{ $r := 1 }}{{ else }}empty{{ end }} {{ with .Values.a }}{{ $w := .s }}{{ $w }}{{ else }}{{ $w }}{{ end }}"#,
        // toYaml of the whole context, passed as the data of a define that ignores it
        // (eck-operator's `template "rules" . | toYaml | indent 2`).
        r#"{{ define "rules" }}- a{{ end }}{{ template "rules" . | toYaml | indent 2 }} {{ $x := toJson . }}{{ $y := toYaml .Capabilities | indent 4 }}done"#,
        // time.Time values compare as Go structs (cilium's `ne $now ($now | dateModify "1h")`).
        r#"{{ $now := now }}{{ ne $now ($now | dateModify "1h") }} {{ eq $now ($now | dateModify "0s") }} {{ eq (toDate "2006-01-02" "2024-01-01") (toDate "2006-01-02" "2024-01-01") }}"#,
    ];
    let mut wrong = Vec::new();
    for expr in cases {
        let (ours, helm) = probe_both(expr, PROBE_VALUES);
        if ours != helm || helm.is_err() {
            wrong.push(format!("{expr}\n  pallet: {ours:?}\n  helm: {helm:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Quoted scalars whose continuation lines are no deeper than their key, in values.yaml, in a
/// template's output and in crds/ (flagger's CRDs): go-yaml reads them, so helm renders them.
#[test]
fn underindented_quoted_continuations_read_as_helm_reads_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let chart = dir.path().join("quoted");
    std::fs::create_dir_all(chart.join("templates")).expect("mkdir");
    std::fs::create_dir_all(chart.join("crds")).expect("mkdir");
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: quoted\nversion: 0.1.0\n",
    )
    .expect("write");
    let body = "  a:\n    description: 'one\n    two\n   three'\n    d: \"x\n    y\"\n    e: 1\n";
    std::fs::write(chart.join("values.yaml"), format!("m:\n{body}")).expect("write");
    std::fs::write(
        chart.join("templates/cm.yaml"),
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: q\ndata:\n  v: {{{{ toJson .Values.m | quote }}}}\nx:\n{body}"),
    )
    .expect("write");
    std::fs::write(
        chart.join("crds/crd.yaml"),
        format!("apiVersion: example.com/v1\nkind: Thing\nmetadata:\n  name: t\nspec:\n{body}"),
    )
    .expect("write");
    let values = dir.path().join("empty.yaml");
    std::fs::write(&values, "{}\n").expect("write");
    let want = by_key(oracle(&chart, &values));
    let got = by_key(ours(&chart, &values));
    assert_eq!(want.len(), 2, "{want:?}");
    assert_eq!(got, want);
}

/// Several rendered files that are not YAML: helm reads them in path order and names the first
/// (envoy gateway's certgen.yaml before its deployment); pallet names the same file.
#[test]
fn first_invalid_file_in_path_order_is_named_as_by_helm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let chart = dir.path().join("broken");
    std::fs::create_dir_all(chart.join("templates/sub")).expect("mkdir");
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: broken\nversion: 0.1.0\n",
    )
    .expect("write");
    for f in [
        "templates/b.yaml",
        "templates/sub/z.yaml",
        "templates/c.yaml",
    ] {
        std::fs::write(chart.join(f), "a: b: c\n").expect("write");
    }
    std::fs::write(chart.join("templates/a.yaml"), "kind: ConfigMap\n").expect("write");
    let out = Command::new(helm_bin())
        .args(["template", RELEASE])
        .arg(&chart)
        .output()
        .expect("running helm");
    let helm = String::from_utf8_lossy(&out.stderr);
    assert!(helm.contains("broken/templates/b.yaml"), "{helm}");
    let ours = helm::render(&chart, &RenderOptions::default())
        .expect_err("pallet must fail")
        .to_string();
    assert!(ours.contains("broken/templates/b.yaml"), "{ours}");
}

/// A template file included by another fails: helm names the including file (rendered first,
/// deeper path) and the included one (bitnami kafka's `include ".../secrets.yaml" . |
/// sha256sum` in its StatefulSet); pallet names both.
#[test]
fn failure_inside_an_included_file_names_the_including_file_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let chart = dir.path().join("inc");
    std::fs::create_dir_all(chart.join("templates/sts")).expect("mkdir");
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: inc\nversion: 0.1.0\n",
    )
    .expect("write");
    std::fs::write(
        chart.join("templates/secret.yaml"),
        "kind: Secret\ndata:\n  x: {{ b64enc 1 }}\n",
    )
    .expect("write");
    std::fs::write(
        chart.join("templates/sts/sts.yaml"),
        "kind: StatefulSet\nsum: {{ include (print $.Template.BasePath \"/secret.yaml\") . | sha256sum }}\n",
    )
    .expect("write");
    let out = Command::new(helm_bin())
        .args(["template", RELEASE])
        .arg(&chart)
        .output()
        .expect("running helm");
    let helm = String::from_utf8_lossy(&out.stderr);
    let ours = helm::render(&chart, &RenderOptions::default())
        .expect_err("pallet must fail")
        .to_string();
    for file in ["inc/templates/sts/sts.yaml", "inc/templates/secret.yaml"] {
        assert!(helm.contains(file), "{helm}");
        assert!(ours.contains(file), "{ours}");
    }
}

/// Numbers in Chart.yaml's string fields read as helm's YAML reader converts them
/// (aws-sigv4-proxy-admission-controller's `appVersion: 1.0` is "1"): integers in decimal,
/// floats as Go's `FormatFloat(f, 'g', -1, 32)`.
#[test]
fn chart_yaml_numbers_become_strings_as_helm_reads_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let chart = dir.path().join("av");
    std::fs::create_dir_all(chart.join("templates")).expect("mkdir");
    std::fs::write(
        chart.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: av\ndata:\n  v: {{ .Chart.AppVersion | quote }}\n  k: {{ .Chart.Keywords | toJson | quote }}\n  a: {{ .Chart.Annotations | toJson | quote }}\n  d: {{ .Chart.Description | quote }}\n",
    )
    .expect("write");
    let values = dir.path().join("empty.yaml");
    std::fs::write(&values, "{}\n").expect("write");
    for v in [
        "1.0",
        "1.10",
        "2.50",
        "1e3",
        "0.1",
        "3",
        "012",
        "0x1F",
        "1.123456789",
        "123456789.5",
        "0.00001234",
        "-2.5",
    ] {
        std::fs::write(
            chart.join("Chart.yaml"),
            format!("apiVersion: v2\nname: av\nversion: 0.1.0\nappVersion: {v}\ndescription: {v}\nkeywords: [{v}]\nannotations:\n  x: {v}\n"),
        )
        .expect("write");
        assert_eq!(
            ours(&chart, &values),
            oracle(&chart, &values),
            "appVersion: {v}"
        );
    }
}

/// A `fail` inside a define: helm names the file the define is written in when the define runs
/// through the `template` action (bitnami's `_helpers.tpl` TLS checks), the including file when
/// through `include`; pallet names the file helm names, in both cases.
#[test]
fn failure_in_a_define_names_the_file_helm_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    let chart = dir.path().join("def");
    std::fs::create_dir_all(chart.join("templates")).expect("mkdir");
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: def\nversion: 0.1.0\n",
    )
    .expect("write");
    std::fs::write(
        chart.join("templates/_helpers.tpl"),
        "{{- define \"def.check\" -}}\n{{- fail \"a key is required\" -}}\n{{- end -}}\n",
    )
    .expect("write");
    for (call, file) in [
        ("template", "def/templates/_helpers.tpl"),
        ("include", "def/templates/cm.yaml"),
    ] {
        std::fs::write(
            chart.join("templates/cm.yaml"),
            format!("kind: ConfigMap\nx: {{{{ {call} \"def.check\" . }}}}\n"),
        )
        .expect("write");
        let out = Command::new(helm_bin())
            .args(["template", RELEASE])
            .arg(&chart)
            .output()
            .expect("running helm");
        let helm = String::from_utf8_lossy(&out.stderr);
        let ours = helm::render(&chart, &RenderOptions::default())
            .expect_err("pallet must fail")
            .to_string();
        let at = format!("execution error at ({file}:");
        assert!(helm.contains(&at), "{call}: {helm}");
        for want in [file, "a key is required"] {
            assert!(ours.contains(want), "{call}: {ours}");
        }
    }
}
