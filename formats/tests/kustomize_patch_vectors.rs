//! The strategic merge and JSON 6902 patch vectors (formats/testdata/kustomize/{smp,json6902}):
//! each case's target and patch through the engine's patch functions must give what kustomize
//! v5.5.0 gave (its output, the object deleted, or an error). Regenerate the expected answers
//! with `tools/kustomize-vectors.py regen`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pallet_formats::kustomize::json_patch;
use pallet_formats::kustomize::openapi::Schema;
use pallet_formats::kustomize::strategic_merge::{self, PatchOptions};
use pallet_formats::object::from_yaml_str;
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
struct Case {
    name: String,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    options: BTreeMap<String, bool>,
    #[serde(default)]
    openapi: Option<String>,
    target: String,
    patch: String,
    #[serde(default)]
    expected: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

/// What a case gives: an object, the object deleted, or an error.
#[derive(Debug, PartialEq)]
enum Outcome {
    Object(Value),
    Deleted,
    Error,
}

fn vector_files(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/kustomize")
        .join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn read_cases(path: &Path) -> Vec<Case> {
    let text = std::fs::read_to_string(path).expect("vector file");
    from_yaml_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn expected_outcome(case: &Case) -> Outcome {
    if case.error.is_some() {
        return Outcome::Error;
    }
    let text = case.expected.as_deref().unwrap_or("");
    if text.trim().is_empty() {
        return Outcome::Deleted;
    }
    Outcome::Object(from_yaml_str(text).expect("expected output"))
}

fn smp_outcome(case: &Case) -> Outcome {
    let target: Value = from_yaml_str(&case.target).expect("target");
    let patch: Value = from_yaml_str(&case.patch).expect("patch");
    let schema = match &case.openapi {
        Some(document) => {
            let field = BTreeMap::from([("path".to_owned(), "schema.yaml".to_owned())]);
            match Schema::from_openapi_field(&field, Some(document.as_bytes())) {
                Ok(schema) => schema,
                Err(_) => return Outcome::Error,
            }
        }
        None => Schema::builtin(),
    };
    let options = PatchOptions {
        allow_name_change: case
            .options
            .get("allowNameChange")
            .copied()
            .unwrap_or(false),
        allow_kind_change: case
            .options
            .get("allowKindChange")
            .copied()
            .unwrap_or(false),
    };
    let patch = match case.mode.as_deref().unwrap_or("path") {
        "path" => patch,
        _ => strategic_merge::patch_for_target(&patch, &target),
    };
    match strategic_merge::apply_with_options(&target, &patch, &schema, options) {
        Ok(Some(object)) => Outcome::Object(object),
        Ok(None) => Outcome::Deleted,
        Err(_) => Outcome::Error,
    }
}

fn json_outcome(case: &Case) -> Outcome {
    let target: Value = from_yaml_str(&case.target).expect("target");
    let operations = match json_patch::parse(&case.patch) {
        Ok(operations) => operations,
        Err(_) => return Outcome::Error,
    };
    match json_patch::apply(&target, &operations) {
        Ok(object) => Outcome::Object(object),
        Err(_) => Outcome::Error,
    }
}

/// Runs every case of the `kind` vectors; returns (passed, total) and prints the failures.
fn run(kind: &str, outcome: fn(&Case) -> Outcome) -> (usize, usize) {
    let (mut passed, mut total) = (0, 0);
    for path in vector_files(kind) {
        let file = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let file = file.unwrap_or_default();
        for case in read_cases(&path) {
            total += 1;
            let want = expected_outcome(&case);
            let got = outcome(&case);
            if got == want {
                passed += 1;
            } else {
                println!("FAIL {kind}/{file}: {}", case.name);
                println!("  want: {}", describe(&want));
                println!("  got:  {}", describe(&got));
            }
        }
    }
    println!("{kind}: {passed}/{total} vectors equal to kustomize");
    (passed, total)
}

fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Object(value) => value.to_string(),
        Outcome::Deleted => "deleted".to_owned(),
        Outcome::Error => "error".to_owned(),
    }
}

#[test]
fn strategic_merge_vectors_equal_kustomize() {
    let (passed, total) = run("smp", smp_outcome);
    assert!(total > 100, "only {total} vectors");
    assert_eq!(
        passed, total,
        "strategic merge vectors differing from kustomize"
    );
}

#[test]
fn json6902_vectors_equal_kustomize() {
    let (passed, total) = run("json6902", json_outcome);
    assert!(total > 30, "only {total} vectors");
    assert_eq!(passed, total, "JSON 6902 vectors differing from kustomize");
}
