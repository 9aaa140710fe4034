//! The replacements vectors of `formats/testdata/kustomize/replacements/cases`: each case is a
//! kustomization of `resources.yaml` with `replacements:` only, and kustomize v5.5.0's output
//! for it (`expected.yaml`) or its error (`expected-error.txt`), made by `regenerate.sh` there.
//! Applying the case's replacements to its resources must give that output, or an error with
//! the same message.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::apply;
use super::scalar::tag_and_text;
use crate::kustomize::openapi::Schema;
use crate::kustomize::resource::{Resource, BUILD_ANNOTATION_DOMAIN};
use crate::object::from_yaml_str;

/// Vectors whose error is worded by another module (the label selector parser words its
/// errors its own way): only the error itself is checked.
const WORDED_ELSEWHERE: &[&str] = &["invalid-label-selector-error"];

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/kustomize/replacements/cases")
}

fn documents(text: &str) -> Vec<Value> {
    let mut docs = vec![String::new()];
    for line in text.split_inclusive('\n') {
        if line.trim_end() == "---" {
            docs.push(String::new());
        } else if let Some(doc) = docs.last_mut() {
            doc.push_str(line);
        }
    }
    docs.iter()
        .filter(|d| !d.trim().is_empty())
        .map(|d| from_yaml_str::<Value>(d).expect("a vector's YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// The object as kustomize prints it: without its build annotations, and with its annotation
/// values as text (kustomize's output stage rewrites the annotations as a string map, and
/// drops an empty one).
fn printed(resource: &Resource) -> Value {
    let mut body = resource.body.clone();
    if let Some(metadata) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        if let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.retain(|key, _| !key.starts_with(&format!("{BUILD_ANNOTATION_DOMAIN}/")));
            for value in annotations.values_mut() {
                if let Some((_, text)) = tag_and_text(value) {
                    *value = Value::String(text);
                }
            }
            if annotations.is_empty() {
                metadata.remove("annotations");
            }
        }
    }
    Value::Object(body)
}

/// Equal as printed YAML reads back: numbers by value (`3` = `3.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same(v, w))
        }
        _ => a == b,
    }
}

/// The oracle's error as this module words it: without the CLI's `Error: ` and the output
/// writer's `map[...](nil): yaml: ` prefixes, first line.
fn oracle_message(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    let line = line.strip_prefix("Error: ").unwrap_or(line);
    let line = line
        .strip_prefix("map[string]interface {}(nil): yaml: ")
        .unwrap_or(line);
    line.to_owned()
}

/// Runs one case: `Err` says how it differs from the oracle.
fn run_case(dir: &Path) -> Result<(), String> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name));
    let kustomization: Value =
        from_yaml_str(&read("kustomization.yaml").map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    let replacements = kustomization["replacements"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut resources: Vec<Resource> =
        documents(&read("resources.yaml").map_err(|e| e.to_string())?)
            .into_iter()
            .map(|v| Resource::new(v.as_object().cloned().unwrap_or_else(Map::new)))
            .collect();
    let result = apply(&mut resources, &replacements, &Schema::builtin());
    match (read("expected-error.txt"), result) {
        (Ok(expected), Err(error)) => {
            let expected = oracle_message(&expected);
            let message = error.message.lines().next().unwrap_or("").to_owned();
            let name = dir.file_name().unwrap_or_default().to_string_lossy();
            if message == expected || WORDED_ELSEWHERE.contains(&name.as_ref()) {
                Ok(())
            } else {
                Err(format!("error {message:?}, kustomize says {expected:?}"))
            }
        }
        (Ok(expected), Ok(())) => Err(format!(
            "no error, kustomize says {:?}",
            oracle_message(&expected)
        )),
        (Err(_), Err(error)) => Err(format!("unexpected error: {error}")),
        (Err(_), Ok(())) => {
            let expected = documents(&read("expected.yaml").map_err(|e| e.to_string())?);
            let actual: Vec<Value> = resources.iter().map(printed).collect();
            if expected.len() != actual.len() {
                return Err(format!(
                    "{} objects, kustomize has {}",
                    actual.len(),
                    expected.len()
                ));
            }
            for (want, got) in expected.iter().zip(&actual) {
                if !same(want, got) {
                    return Err(format!("got {got}\nkustomize: {want}"));
                }
            }
            Ok(())
        }
    }
}

#[test]
fn replacements_match_kustomize_on_every_vector() {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(cases_dir())
        .expect("the replacements vectors")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 50, "only {} vectors", dirs.len());
    let failures: Vec<String> = dirs
        .iter()
        .filter_map(|dir| {
            run_case(dir).err().map(|why| {
                let name = dir.file_name().unwrap_or_default().to_string_lossy();
                format!("{name}: {why}")
            })
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} vectors differ from kustomize:\n{}",
        failures.len(),
        dirs.len(),
        failures.join("\n")
    );
}
