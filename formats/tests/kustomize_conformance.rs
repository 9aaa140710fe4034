//! Conformance: `pallet_formats::kustomize::build` against `kustomize build` v5.5.0 on the
//! real-world roots of `shared/conformance/kustomize` (each case's expected output was written by
//! the oracle). Objects are keyed by apiVersion/kind/namespace/name and compared field by field:
//! map key order never matters, list order does, null is absent, `1` equals `1.0`, Secret
//! `.data` is compared decoded; object order counts only where the root sets `sortOptions`.
//!
//! With the oracle built (`tools/kustomize.sh build`; CI sets `PALLET_KUSTOMIZE_ORACLE=required`)
//! each root is also built by `kustomize build` in the same run: pallet is compared with its
//! output, and its output with the corpus's expected file (which it must equal).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::Value;

/// Where the conformance folder is: `$PALLET_CONFORMANCE_DIR` (the conformance folder or its
/// `kustomize` folder), else `../shared/conformance/kustomize` beside the workspace.
fn corpus_dir() -> PathBuf {
    let candidates: Vec<PathBuf> = match std::env::var_os("PALLET_CONFORMANCE_DIR") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            vec![dir.join("kustomize"), dir]
        }
        None => {
            vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/conformance/kustomize")]
        }
    };
    for dir in &candidates {
        if dir.join("cases.tsv").is_file() {
            return dir.clone();
        }
    }
    panic!(
        "kustomize conformance data not found (tried {candidates:?}); set PALLET_CONFORMANCE_DIR"
    );
}

/// One case of `cases.tsv`.
struct Case {
    name: String,
    root: String,
}

fn cases(dir: &Path) -> Vec<Case> {
    let text = std::fs::read_to_string(dir.join("cases.tsv")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            Case {
                name: fields[0].to_owned(),
                root: fields[1].to_owned(),
            }
        })
        .collect()
}

/// An object's key: apiVersion, kind, namespace, name.
fn key_of(object: &Value) -> String {
    let s = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_owned();
    format!(
        "{} {} {}/{}",
        s(object.get("apiVersion")),
        s(object.get("kind")),
        s(object.get("metadata").and_then(|m| m.get("namespace"))),
        s(object.get("metadata").and_then(|m| m.get("name")))
    )
}

/// The object made comparable: nulls dropped, whole floats as integers, Secret data decoded.
fn normalize(mut object: Value) -> Value {
    fn clean(value: &mut Value) {
        match value {
            Value::Object(map) => {
                map.retain(|_, v| !v.is_null());
                map.values_mut().for_each(clean);
            }
            Value::Array(items) => items.iter_mut().for_each(clean),
            Value::Number(n) => {
                if let Some(f) = n.as_f64() {
                    if f.fract() == 0.0 && f.abs() < 9.0e15 {
                        *value = Value::from(f as i64);
                    }
                }
            }
            _ => {}
        }
    }
    clean(&mut object);
    if object.get("kind").and_then(Value::as_str) == Some("Secret") {
        if let Some(Value::Object(data)) = object.get_mut("data") {
            for value in data.values_mut() {
                if let Value::String(text) = value {
                    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
                    if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(compact) {
                        *value = Value::String(String::from_utf8_lossy(&bytes).into_owned());
                    }
                }
            }
        }
    }
    object
}

fn read_expected(path: &Path) -> Vec<Value> {
    parse_output(
        &path.display().to_string(),
        &std::fs::read_to_string(path).unwrap(),
    )
}

fn parse_output(origin: &str, text: &str) -> Vec<Value> {
    pallet_formats::parse_manifests(origin, text)
        .unwrap()
        .into_iter()
        .map(|o| Value::Object(o.into_body()))
        .collect()
}

/// The kustomize oracle's binary, when built; `PALLET_KUSTOMIZE_ORACLE=required` makes its
/// absence a failure.
fn oracle() -> Option<PathBuf> {
    let bin = std::env::var_os("PALLET_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/pallet"))
        .join("bin/kustomize");
    let required = std::env::var("PALLET_KUSTOMIZE_ORACLE").is_ok_and(|v| v == "required");
    match bin.is_file() {
        true => Some(bin),
        false if required => panic!(
            "no kustomize oracle at {}: run tools/kustomize.sh build",
            bin.display()
        ),
        false => None,
    }
}

/// `kustomize build` of `root` by the oracle, as parsed objects.
fn oracle_build(oracle: &Path, root: &Path) -> Vec<Value> {
    let out = std::process::Command::new(oracle)
        .arg("build")
        .arg(root)
        .output()
        .expect("running the kustomize oracle");
    assert!(
        out.status.success(),
        "the oracle failed on {}: {}",
        root.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    parse_output("kustomize build", &String::from_utf8_lossy(&out.stdout))
}

/// Paths where two values differ, at most `limit`.
fn differences(path: &str, want: &Value, got: &Value, out: &mut Vec<String>, limit: usize) {
    if out.len() >= limit {
        return;
    }
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            let keys: std::collections::BTreeSet<&String> = w.keys().chain(g.keys()).collect();
            for key in keys {
                match (w.get(key), g.get(key)) {
                    (Some(a), Some(b)) => differences(&format!("{path}.{key}"), a, b, out, limit),
                    (Some(a), None) => {
                        out.push(format!("{path}.{key}: missing (want {})", short(a)))
                    }
                    (None, Some(b)) => out.push(format!("{path}.{key}: unexpected {}", short(b))),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (a, b)) in w.iter().zip(g).enumerate() {
                differences(&format!("{path}[{i}]"), a, b, out, limit);
            }
        }
        _ if want == got => {}
        _ => out.push(format!("{path}: want {} got {}", short(want), short(got))),
    }
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.len() > 120 {
        format!(
            "{}...",
            &text[..text.char_indices().nth(117).map(|(i, _)| i).unwrap_or(117)]
        )
    } else {
        text
    }
}

/// Whether the root kustomization sets `sortOptions`.
fn sets_sort_options(root: &Path) -> bool {
    ["kustomization.yaml", "kustomization.yml", "Kustomization"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(root.join(f)).ok())
        .any(|text| text.lines().any(|l| l.starts_with("sortOptions:")))
}

/// Compares one case with the oracle's output when there is an oracle, else with the corpus's
/// expected output; `Ok` or the first differences.
fn check(dir: &Path, case: &Case, oracle: Option<&Path>) -> Result<(), Vec<String>> {
    // The tree is the repository's folder (`trees/<repo>`); the root is relative to it.
    let mut parts = case.root.splitn(3, '/');
    let tree = dir
        .join(parts.next().unwrap_or(""))
        .join(parts.next().unwrap_or(""));
    let relative = parts.next().unwrap_or("");
    let root = tree.join(relative);
    let objects = pallet_formats::kustomize::build(&tree, relative)
        .map_err(|e| vec![format!("build failed: {e}")])?;
    let got: Vec<Value> = objects
        .into_iter()
        .map(|o| normalize(Value::Object(o.into_body())))
        .collect();
    let expected = read_expected(&dir.join("expected").join(format!("{}.yaml", case.name)));
    let want: Vec<Value> = match oracle {
        Some(oracle) => {
            let built = oracle_build(oracle, &root);
            let normalized = |v: &[Value]| v.iter().cloned().map(normalize).collect::<Vec<_>>();
            compare(&normalized(&expected), &normalized(&built), &root).map_err(|problems| {
                let mut problems = problems;
                problems.insert(
                    0,
                    "the oracle's output differs from the corpus's".to_owned(),
                );
                problems
            })?;
            built
        }
        None => expected,
    }
    .into_iter()
    .map(normalize)
    .collect();
    compare(&want, &got, &root)
}

/// The differences of `got` from `want` (objects by key, field by field).
fn compare(want: &[Value], got: &[Value], root: &Path) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    let got_map: BTreeMap<String, &Value> = got.iter().map(|o| (key_of(o), o)).collect();
    let want_map: BTreeMap<String, &Value> = want.iter().map(|o| (key_of(o), o)).collect();
    for (key, w) in &want_map {
        match got_map.get(key) {
            None => problems.push(format!("missing object {key}")),
            Some(g) => {
                let mut diffs = Vec::new();
                differences("", w, g, &mut diffs, 5);
                problems.extend(diffs.into_iter().map(|d| format!("{key}: {d}")));
            }
        }
    }
    for key in got_map.keys() {
        if !want_map.contains_key(key) {
            problems.push(format!("unexpected object {key}"));
        }
    }
    if got.len() != got_map.len() {
        problems.push(format!("{} objects share a key", got.len() - got_map.len()));
    }
    if problems.is_empty() && sets_sort_options(root) {
        let got_order: Vec<String> = got.iter().map(key_of).collect();
        let want_order: Vec<String> = want.iter().map(key_of).collect();
        if got_order != want_order {
            problems.push("object order differs from sortOptions' order".to_owned());
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

#[test]
fn kustomize_conformance() {
    let dir = corpus_dir();
    let cases = cases(&dir);
    let oracle = oracle();
    match &oracle {
        Some(bin) => println!(
            "oracle: {} (kustomize build of each root, this run)",
            bin.display()
        ),
        None => println!("no oracle built: comparing with the corpus's expected outputs"),
    }
    let mut equal = 0;
    for case in &cases {
        match check(&dir, case, oracle.as_deref()) {
            Ok(()) => {
                equal += 1;
                println!("equal    {}", case.name);
            }
            Err(problems) => {
                println!("DIFFERS  {} ({} problems)", case.name, problems.len());
                for problem in problems.iter().take(8) {
                    println!("         {problem}");
                }
            }
        }
    }
    println!("kustomize conformance: {equal} of {} equal", cases.len());
    assert_eq!(
        equal,
        cases.len(),
        "kustomize conformance: {equal} of {} equal",
        cases.len()
    );
}
