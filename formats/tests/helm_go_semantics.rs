//! Differential sweeps against the helm oracle (`helm template`, v3.19.5) for four classes of
//! Go template and Sprig behaviour, each case rendered by both and compared as text:
//!
//! - a pipeline that ends in `|`;
//! - Go's regular expressions (RE2) in every regex function: Go-only syntax, ASCII classes,
//!   Unicode classes and case folding, empty matches, `$` expansion, Go's errors;
//! - helm's built-in objects (`.Capabilities`, `.Chart`, `.Release`, `.Files`, `.Template`,
//!   the whole context) through every serialiser and printer, as Go's structs;
//! - `duration` and the other time functions with every number type (int, int64, uint64,
//!   float64) and the other types Sprig reads.
//!
//! Each sweep prints how many cases were equal. Differences helm itself cannot avoid are
//! normalised: the Go version helm was built with (`.Capabilities.HelmVersion.GoVersion`,
//! unknown to pallet, which leaves it empty), and times read from the clock (compared to the
//! year, or the first digits of a duration).

mod oracle;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use oracle::{helm_bin, split_docs};
use pallet_formats::helm::value::go_quote;
use pallet_formats::helm::{self, RenderOptions};

const KUBE_VERSION: &str = "v1.35.0";

/// Writes a chart with one ConfigMap per expression (`out` holds its output), plus files for
/// `.Files`, a subchart for `.Subcharts` and `chart_yaml` as its Chart.yaml.
fn write_chart(root: &Path, exprs: &[&str], chart_yaml: &str) {
    std::fs::create_dir_all(root.join("templates")).expect("mkdir");
    std::fs::create_dir_all(root.join("data")).expect("mkdir");
    std::fs::create_dir_all(root.join("charts/sub/templates")).expect("mkdir");
    std::fs::write(root.join("Chart.yaml"), chart_yaml).expect("write");
    std::fs::write(
        root.join("values.yaml"),
        "f: 3600.0\nn: 86400\ns: text\nlist: [1, two]\nmap: {a: 1}\n",
    )
    .expect("write");
    std::fs::write(root.join("data/a.txt"), "hello\n").expect("write");
    std::fs::write(root.join("data/b.json"), "{\"k\": [1, 2]}\n").expect("write");
    std::fs::write(
        root.join("charts/sub/Chart.yaml"),
        "apiVersion: v2\nname: sub\nversion: 1.0.0\n",
    )
    .expect("write");
    // Each expression in a define of its own, included with its lines indented under `out`.
    let mut defines = String::from(
        "{{ define \"ctx\" }}{{ dict \"Capabilities\" .Capabilities \"Values\" .Values | toJson }}{{ end }}\n",
    );
    for (i, expr) in exprs.iter().enumerate() {
        defines.push_str(&format!("{{{{ define \"p{i}\" }}}}{expr}{{{{ end }}}}\n"));
        std::fs::write(
            root.join(format!("templates/p{i}.yaml")),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: p{i}\ndata:\n  out: |-\n{{{{ include \"p{i}\" . | indent 4 }}}}\n"
            ),
        )
        .expect("write");
    }
    std::fs::write(root.join("templates/_probes.tpl"), defines).expect("write");
}

/// The plain chart's Chart.yaml (no pointers inside `.Chart`).
const PLAIN_CHART: &str =
    "apiVersion: v2\nname: probe\nversion: 0.1.0\nappVersion: \"1.2\"\nkeywords: [a, b]\nannotations:\n  x: y\n";

/// `out` of each ConfigMap `p<i>`, by index.
fn outputs(objects: &[serde_json::Value]) -> BTreeMap<usize, String> {
    objects
        .iter()
        .filter_map(|o| {
            let name = o["metadata"]["name"].as_str()?;
            let i: usize = name.strip_prefix('p')?.parse().ok()?;
            Some((i, o["data"]["out"].as_str().unwrap_or_default().to_string()))
        })
        .collect()
}

/// Renders `exprs` with helm; every one must succeed.
fn helm_outputs(root: &Path) -> Result<BTreeMap<usize, String>, String> {
    let out = Command::new(helm_bin())
        .args(["template", "rel"])
        .arg(root)
        .args(["--kube-version", KUBE_VERSION])
        .env("TZ", "UTC")
        .output()
        .expect("running helm");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(outputs(&split_docs(&String::from_utf8_lossy(&out.stdout))))
}

fn pallet_outputs(root: &Path) -> Result<BTreeMap<usize, String>, String> {
    let opts = RenderOptions {
        release_name: "rel".into(),
        kube_version: KUBE_VERSION.into(),
        ..RenderOptions::default()
    };
    helm::render(root, &opts)
        .map(|objects| outputs(&objects))
        .map_err(|e| e.to_string())
}

/// The Go release the oracle was built with (`helm version`).
fn oracle_go_version() -> String {
    let out = Command::new(helm_bin())
        .arg("version")
        .output()
        .expect("helm version");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split("GoVersion:\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_default()
        .to_string()
}

/// helm's text with its Go version left out, as pallet writes it (empty, so omitted from
/// JSON and YAML): in compact JSON (escaped too), as a line of pretty JSON or YAML, in fmt's
/// `%v` and `%+v`.
fn without_go_version(text: &str, go: &str) -> String {
    if go.is_empty() {
        return text.to_string();
    }
    let compact = text
        .replace(&format!(",\"go_version\":\"{go}\""), "")
        .replace(&format!("\"go_version\":\"{go}\","), "")
        .replace(&format!(",\\\"go_version\\\":\\\"{go}\\\""), "")
        .replace(&format!(" GoVersion:{go}"), " GoVersion:")
        .replace(&format!(" {go}}}"), " }");
    let mut lines: Vec<String> = Vec::new();
    for line in compact.split('\n') {
        let t = line.trim();
        if t == format!("go_version: {go}") || t == format!("\"go_version\": \"{go}\",") {
            continue;
        }
        if t == format!("\"go_version\": \"{go}\"") {
            // The last member: the one before it loses its comma.
            if let Some(previous) = lines.last_mut() {
                if let Some(stripped) = previous.strip_suffix(',') {
                    *previous = stripped.to_string();
                }
            }
            continue;
        }
        lines.push(line.to_string());
    }
    lines.join("\n")
}

/// Renders every expression with both (one chart each), compares the outputs after
/// `normalise`, and returns the mismatches and the count of equal cases.
fn sweep(
    name: &str,
    exprs: &[String],
    chart_yaml: &str,
    normalise: &dyn Fn(&str) -> String,
) -> (Vec<String>, usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("probe");
    let refs: Vec<&str> = exprs.iter().map(String::as_str).collect();
    write_chart(&root, &refs, chart_yaml);
    let helm = helm_outputs(&root)
        .unwrap_or_else(|e| panic!("{name}: helm refused the sweep (a case fails): {e}"));
    let ours = pallet_outputs(&root).unwrap_or_else(|e| panic!("{name}: pallet failed: {e}"));
    let mut wrong = Vec::new();
    let mut equal = 0;
    for (i, expr) in exprs.iter().enumerate() {
        let h = normalise(helm.get(&i).map(String::as_str).unwrap_or_default());
        let o = normalise(ours.get(&i).map(String::as_str).unwrap_or_default());
        if h == o {
            equal += 1;
        } else {
            wrong.push(format!("{expr}\n  pallet: {o:?}\n  helm:   {h:?}"));
        }
    }
    println!("{name}: {equal} of {} cases equal", exprs.len());
    (wrong, equal)
}

/// Renders `expr` alone with both; both must fail, helm's message containing `helm_says` and
/// pallet's `pallet_says`.
fn both_fail(expr: &str, helm_says: &str, pallet_says: &str) -> Option<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("probe");
    write_chart(&root, &[expr], PLAIN_CHART);
    match (helm_outputs(&root), pallet_outputs(&root)) {
        (Err(h), Err(o)) if h.contains(helm_says) && o.contains(pallet_says) => None,
        (h, o) => Some(format!(
            "{expr}: want helm to fail with {helm_says:?}, pallet with {pallet_says:?}\n  pallet: {o:?}\n  helm: {h:?}"
        )),
    }
}

#[test]
fn a_pipeline_may_end_in_a_pipe() {
    let exprs: Vec<String> = [
        r#"{{ "x" | quote | }}"#,
        r#"{{ "x" | }}"#,
        r#"{{ ("a" | upper |) }}"#,
        r#"{{ $v := "y" | quote | }}{{ $v }}"#,
        r#"{{ if "z" | }}yes{{ end }}"#,
        r#"{{ range list 1 2 | }}{{ . }}{{ end }}"#,
        r#"{{ with "w" | upper | }}{{ . }}{{ end }}"#,
    ]
    .map(String::from)
    .to_vec();
    let (wrong, _) = sweep("trailing pipe", &exprs, PLAIN_CHART, &|s| s.to_string());
    let mut wrong = wrong;
    // Two pipes in a row, or one with nothing before it, are still Go's parse errors.
    for (expr, helm_says) in [
        (r#"{{ "x" | | quote }}"#, "parse error"),
        (r#"{{ | quote }}"#, "parse error"),
    ] {
        wrong.extend(both_fail(expr, helm_says, "parse error"));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Patterns in Go-only syntax, or where RE2 and the regex crate mean different things, each
/// with a subject; every regex function runs each of them.
const PATTERNS: &[(&str, &str)] = &[
    (r"^[\w-\.]+$", "mymaster"),
    (r"^[\w-\.]+$", "my-master.x"),
    (r"[\d-x]+", "12-x3"),
    (r"^\w+$", "café"),
    (r"\w+", "naïve café x_1"),
    (r"\d+", "٣4٥6"),
    (r"\s+", "a\u{a0}b c\td"),
    (r"\bfoo\b", "foo éfoo foo_ foo."),
    (r"\Bo\B", "foo boo ó"),
    (r"[[:alpha:]]+", "abc123é"),
    (r"[[:^digit:]]+", "a1b22c"),
    (r"[[:punct:]]+", "a!-/b:@c[`d{~"),
    (r"\pL+", "abc123éß"),
    (r"\p{Greek}+", "abc αβγ"),
    (r"\p{greek}+", "αβ"),
    (r"\PL+", "ab12cd"),
    (r"\p{^L}+", "ab12cd"),
    (r"\p{Lu}+", "aBCd"),
    (r"\p{Letter}+", "x1y"),
    (r"\pN+", "a١2"),
    (r"[\p{Lu}\d]+", "aB1cD2"),
    (r"(?i)strasse", "STRASSE"),
    (r"(?i)k+", "kK\u{212a}"),
    (r"(?i)[^k]", "\u{212a}x"),
    (r"(?i)σ+", "Σσς"),
    (r"(?U)a+", "aaa"),
    (r"(?U)a+?", "aaa"),
    (r"a+?", "aaa"),
    (r"(?s).+", "a\nb"),
    (r".+", "a\nb"),
    (r"(?m)^b", "a\nb"),
    (r"^b", "a\nb"),
    (r"a$", "a\n"),
    (r"(?m)a$", "a\nb"),
    (r"\Qa.b*\E+", "a.b*a.b**"),
    (r"\101\x41\x{42}\0", "AAB\u{0}"),
    (r"a{,2}", "xa{,2}"),
    (r"a{2}", "aaaa"),
    (r"a{2,}?", "aaaa"),
    (r"x{0}y", "xy"),
    (r"[]a]+", "]a]b"),
    (r"[^]a]+", "]a]bc"),
    (r"[a-]+", "a-b"),
    (r"[-a]+", "-a-b"),
    (r"\A\w", "ab"),
    (r"\w\z", "ab"),
    (r"(?P<first>\w)(\w)?", "ab c"),
    (r"(?<word>\w+)", "one two"),
    (r"(?i:A)b", "aB ab"),
    (r"(a)|b", "ba"),
    (r"a|", "ba"),
    (r"()", "ab"),
    (r"^*x", "x"),
    (r"a*(?i)*", "aA"),
    (r"[\W\d]+", "ab!1é"),
    (r"[^\S\n]+", "a \t\nb"),
    (r"\.\+\*", "a.+*"),
    (r"é+", "éé"),
    (r"[é-ü]+", "ñé"),
    (r"a*", "baaac"),
    (r"", "abc"),
    (r"x*", ""),
    (r"\B", "aéa"),
];

/// Go's regular-expression errors: regexMatch gives false, the others fail with Go's message.
const BAD_PATTERNS: &[(&str, &str)] = &[
    ("[a", "missing closing ]: `[a`"),
    ("a**", "invalid nested repetition operator: `**`"),
    (r"\C", "invalid escape sequence: `\\C`"),
    (r"\1", "invalid escape sequence: `\\1`"),
    ("(?=x)", "invalid or unsupported Perl syntax: `(?=`"),
    ("a{1001}", "invalid repeat count: `{1001}`"),
    ("(a{100}){100}", "invalid repeat count: `{100}`"),
    (
        r"\p{Old_Italic}",
        "invalid character class range: `\\p{Old_Italic}`",
    ),
    ("[z-a]", "invalid character class range: `z-a`"),
    ("(?P<>x)", "invalid named capture: `(?P<>`"),
    ("(a", "missing closing ): `(a`"),
    ("a)", "unexpected ): `a)`"),
    (r"[[:foo:]]", "invalid character class range: `[:foo:]`"),
];

fn regex_cases() -> Vec<String> {
    let mut exprs = Vec::new();
    for (pattern, subject) in PATTERNS {
        let (p, t) = (format!("`{pattern}`"), go_quote(subject));
        exprs.push(format!("{{{{ regexMatch {p} {t} }}}}"));
        exprs.push(format!("{{{{ mustRegexMatch {p} {t} }}}}"));
        exprs.push(format!("{{{{ regexFind {p} {t} | toJson }}}}"));
        exprs.push(format!("{{{{ mustRegexFind {p} {t} | toJson }}}}"));
        exprs.push(format!("{{{{ regexFindAll {p} {t} -1 | toJson }}}}"));
        exprs.push(format!("{{{{ mustRegexFindAll {p} {t} 2 | toJson }}}}"));
        exprs.push(format!(
            "{{{{ regexReplaceAll {p} {t} \"<$0|${{1}}|$$|$x>\" | toJson }}}}"
        ));
        exprs.push(format!(
            "{{{{ mustRegexReplaceAll {p} {t} \"[${{first}}${{word}}]\" | toJson }}}}"
        ));
        exprs.push(format!(
            "{{{{ regexReplaceAllLiteral {p} {t} \"<$1>\" | toJson }}}}"
        ));
        exprs.push(format!(
            "{{{{ mustRegexReplaceAllLiteral {p} {t} \"-\" | toJson }}}}"
        ));
        exprs.push(format!("{{{{ regexSplit {p} {t} -1 | toJson }}}}"));
        exprs.push(format!("{{{{ mustRegexSplit {p} {t} 2 | toJson }}}}"));
        exprs.push(format!("{{{{ regexQuoteMeta {p} }}}}"));
    }
    for (pattern, _) in BAD_PATTERNS {
        exprs.push(format!("{{{{ regexMatch `{pattern}` \"a\" }}}}"));
    }
    exprs
}

#[test]
fn every_regex_function_reads_go_regular_expressions() {
    let exprs = regex_cases();
    let (mut wrong, _) = sweep("regex sweep", &exprs, PLAIN_CHART, &|s| s.to_string());
    let mut failing = 0;
    for (pattern, message) in BAD_PATTERNS {
        for function in [
            "regexFind",
            "mustRegexFind",
            "regexFindAll",
            "regexReplaceAll",
            "mustRegexReplaceAllLiteral",
            "regexSplit",
            "mustRegexMatch",
        ] {
            let args = match function {
                "regexFindAll" | "regexSplit" => "\"a\" -1",
                "regexReplaceAll" | "mustRegexReplaceAllLiteral" => "\"a\" \"b\"",
                _ => "\"a\"",
            };
            let expr = format!("{{{{ {function} `{pattern}` {args} }}}}");
            failing += 1;
            wrong.extend(both_fail(&expr, message, message));
        }
    }
    println!(
        "regex sweep: {failing} patterns Go refuses fail in both with Go's message ({} wrong)",
        wrong.len()
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The built-in objects and values built from them.
const OBJECTS: &[&str] = &[
    ".Capabilities",
    ".Capabilities.KubeVersion",
    ".Capabilities.HelmVersion",
    ".Capabilities.APIVersions",
    ".Chart",
    ".Chart.Metadata",
    ".Release",
    ".Files",
    "(.Files.Glob \"data/*.txt\")",
    ".Template",
    ".Values",
    ".Subcharts",
    "(semver \"1.2.3-rc.1+b5\")",
    "(toDate \"2006-01-02\" \"2020-01-02\")",
    "(.Files.GetBytes \"data/a.txt\")",
    "(dict \"caps\" .Capabilities \"values\" .Values)",
    "(list .Capabilities.KubeVersion .Release)",
];

/// What every object goes through: the serialisers, the printers, Go's type names.
const SERIALISERS: &[&str] = &[
    "toJson X",
    "toRawJson X",
    "toPrettyJson X",
    "toYaml X",
    "toString X",
    "printf \"%v\" X",
    "printf \"%+v\" X",
    "printf \"%s\" X",
    "print X",
    "X",
    "typeOf X",
    "kindOf X",
    "toJson X | fromJson | toJson",
    "deepCopy X | toJson",
    "toJson X | sha256sum",
];

#[test]
fn built_in_objects_serialise_as_helms_go_structs() {
    let go = oracle_go_version();
    let mut exprs = Vec::new();
    for object in OBJECTS {
        for serialiser in SERIALISERS {
            // Go's fmt prints a pointer inside a value as its address: refused, below.
            if HOLDS_POINTERS.contains(object) && PRINTERS.contains(serialiser) {
                continue;
            }
            // deepCopy reflects on structs it cannot copy (the engine's files) as helm does.
            if serialiser.starts_with("deepCopy") && object.starts_with("(semver") {
                continue;
            }
            // A hash of text holding helm's Go version cannot be normalised.
            if serialiser.ends_with("sha256sum") && HOLDS_GO_VERSION.contains(object) {
                continue;
            }
            exprs.push(format!("{{{{ {} }}}}", serialiser.replace('X', object)));
        }
    }
    // The whole context, as charts generated by tools pass it through JSON.
    exprs.push("{{ toJson . }}".into());
    exprs.push("{{ toYaml .Values | sha256sum }}".into());
    exprs.push("{{ (include \"ctx\" . | fromJson).Capabilities.KubeVersion.Minor }}".into());
    exprs.push("{{ $ctx := toJson . | fromJson }}{{ $ctx.Chart.name }}/{{ $ctx.Release.Name }}/{{ $ctx.Template.BasePath }}/{{ len $ctx.Capabilities.APIVersions }}".into());
    let (mut wrong, _) = sweep("built-in objects sweep", &exprs, PLAIN_CHART, &|s| {
        without_go_version(s, &go)
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("probe");
    let mut refused = 0;
    for object in HOLDS_POINTERS {
        for printer in PRINTERS {
            let expr = format!("{{{{ {} }}}}", printer.replace('X', object));
            write_chart(&root, &[&expr], PLAIN_CHART);
            let helm = helm_outputs(&root);
            let ours = pallet_outputs(&root);
            match (&helm, &ours) {
                (Ok(h), Err(e)) if h[&0].contains("0x") && e.contains("memory address") => {
                    refused += 1
                }
                _ => wrong.push(format!(
                    "{expr}: helm prints an address, pallet must refuse\n  pallet: {ours:?}\n  helm: {helm:?}"
                )),
            }
        }
    }
    println!("built-in objects sweep: {refused} prints of a pointer inside a value refused");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Values that hold a pointer to a struct below their top (`.Capabilities` in a map).
const HOLDS_POINTERS: &[&str] = &[
    ".Subcharts",
    "(dict \"caps\" .Capabilities \"values\" .Values)",
];

/// The serialisers that are Go's fmt with a verb that prints a pointer inside a value as its
/// address (`%s` prints `%!s(*T=&{...})`, compared above).
const PRINTERS: &[&str] = &[
    "toString X",
    "printf \"%v\" X",
    "printf \"%+v\" X",
    "print X",
    "X",
];

/// Values whose text holds `.Capabilities.HelmVersion`.
const HOLDS_GO_VERSION: &[&str] = &[
    ".Capabilities",
    ".Capabilities.HelmVersion",
    ".Subcharts",
    "(dict \"caps\" .Capabilities \"values\" .Values)",
];

/// A chart with maintainers: `.Chart` holds pointers, which JSON and YAML follow and which Go's
/// fmt prints as memory addresses inside a struct — pallet refuses those, naming them.
#[test]
fn pointers_inside_a_printed_struct_are_refused_and_serialised_otherwise() {
    let chart = "apiVersion: v2\nname: probe\nversion: 0.1.0\nmaintainers:\n- name: a\n  email: b@c\n  url: https://x\n";
    let exprs: Vec<String> = [
        "{{ toJson .Chart }}",
        "{{ toYaml .Chart }}",
        "{{ toPrettyJson .Chart.Maintainers }}",
        "{{ index .Chart.Maintainers 0 }}",
        "{{ printf \"%v\" (index .Chart.Maintainers 0) }}",
        "{{ typeOf (index .Chart.Maintainers 0) }}",
    ]
    .map(String::from)
    .to_vec();
    let (mut wrong, _) = sweep("pointer sweep", &exprs, chart, &|s| s.to_string());
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("probe");
    for expr in ["{{ toString .Chart }}", "{{ .Chart.Maintainers }}"] {
        write_chart(&root, &[expr], chart);
        let helm = helm_outputs(&root).expect("helm prints an address");
        assert!(helm[&0].contains("0x"), "{helm:?}");
        match pallet_outputs(&root) {
            Err(e) if e.contains("printing a *chart.Maintainer inside another value") => {}
            other => wrong.push(format!("{expr}: pallet must refuse, got {other:?}")),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// What the time functions are given: every number type, and the other types Sprig reads.
const TIME_ARGS: &[&str] = &[
    "3600",
    "(int 3600)",
    "(len \"abcd\")",
    "(int64 3600)",
    "(3600 | int64)",
    "(add 1 3599)",
    "(mul 2 1800)",
    "(max 3600 1)",
    "(toDecimal \"7020\")",
    "(semver \"1.2.3\").Major",
    ".Values.f",
    "(float64 3600)",
    ".Values.n",
    "\"3600\"",
    "\"1h30m\"",
    "\"bad\"",
    "nil",
    "true",
    "(toDate \"2006-01-02\" \"2020-01-02\")",
];

/// The time functions over each argument; outputs that read the clock are cut to what two
/// runs a moment apart agree on.
const TIME_FUNCTIONS: &[&str] = &[
    "duration X",
    "durationRound X",
    "date \"2006\" X",
    "date \"2006-01-02 15:04:05\" X | trunc 4",
    "dateInZone \"2006-01\" X \"UTC\" | trunc 4",
    "htmlDate X | trunc 4",
    "htmlDateInZone X \"UTC\" | trunc 4",
    "ago X | trunc 3",
    "typeOf X",
    "kindOf X",
    "printf \"%T %v\" X X",
];

#[test]
fn time_functions_read_every_number_type_as_sprig_does() {
    let mut exprs = Vec::new();
    for arg in TIME_ARGS {
        for function in TIME_FUNCTIONS {
            exprs.push(format!("{{{{ {} }}}}", function.replace('X', arg)));
        }
    }
    for extra in [
        "{{ toDate \"2006-01-02\" \"2020-01-02\" | unixEpoch }}",
        "{{ dateModify \"1h30m\" (toDate \"2006-01-02\" \"2020-01-02\") | date \"2006-01-02 15:04\" }}",
        "{{ now | date \"2006\" }}",
        "{{ now | typeOf }}",
        "{{ duration (3600 | int64) }} {{ duration 3600 }} {{ duration 3600.0 }}",
        "{{ durationRound (int64 90000000000) }} {{ durationRound \"2h3m\" }} {{ durationRound 90 }}",
        "{{ duration (int64 -90) }} {{ duration \"-90\" }} {{ durationRound (int64 -90000000000) }}",
    ] {
        exprs.push(extra.into());
    }
    let (mut wrong, _) = sweep("time sweep", &exprs, PLAIN_CHART, &|s| s.to_string());
    // Parameters Go declares `time.Time` refuse a number (text/template's argument check).
    for expr in [
        "{{ unixEpoch 0 }}",
        "{{ unixEpoch (int64 0) }}",
        "{{ dateModify \"1h\" 0 }}",
        "{{ dateModify \"1h\" .Values.f }}",
    ] {
        // helm says `can't handle 0 for arg of type time.Time` for a constant: the same type.
        wrong.extend(both_fail(expr, "time.Time", "expected time.Time"));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
