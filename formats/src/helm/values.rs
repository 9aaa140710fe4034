//! User values as helm's CLI builds them before the chart's own values.yaml is coalesced under
//! them: values documents merged in order, later wins (`helm -f a.yaml -f b.yaml`, Flux's
//! HelmRelease `valuesFrom` then `values`), and `valuesFiles` read from inside the chart.

use std::path::{Component, Path};

use serde_json::{Map, Value};

/// helm's `mergeMaps` (`pkg/cli/values/options.go`): `over` merged into `base` key by key. Two
/// maps merge recursively; any other value of `over` (a list, a scalar, a null) replaces
/// `base`'s. A null survives the merge, so it can delete a chart default when coalesced.
pub fn merge_values(base: &mut Map<String, Value>, over: &Map<String, Value>) {
    for (key, value) in over {
        match (base.get_mut(key), value) {
            (Some(Value::Object(dst)), Value::Object(src)) => merge_values(dst, src),
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}

/// Why a values file of the chart could not be used. Messages name the file as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValuesFileError {
    /// Absolute, or climbing out of the chart with `..`.
    #[error("valuesFiles: {0:?} must be a path inside the chart (relative, without `..`)")]
    OutsideChart(String),
    /// No such file in the chart.
    #[error("valuesFiles: {0:?} is not a file of the chart")]
    NotFound(String),
    /// Unreadable, not YAML, or not a mapping.
    #[error("valuesFiles: {file:?}: {message}")]
    Invalid {
        /// The file as written.
        file: String,
        /// What is wrong.
        message: String,
    },
}

/// Reads `files` (paths relative to the chart root `chart`) and merges them in order; the result
/// goes under the user's values (`user` wins), as `helm -f` files go under later ones.
pub fn with_values_files(
    chart: &Path,
    files: &[String],
    user: &Map<String, Value>,
) -> Result<Map<String, Value>, ValuesFileError> {
    let mut merged = Map::new();
    for file in files {
        merge_values(&mut merged, &read_values_file(chart, file)?);
    }
    merge_values(&mut merged, user);
    Ok(merged)
}

/// One values file of the chart, as a mapping (an empty file is an empty mapping, as in helm).
fn read_values_file(chart: &Path, file: &str) -> Result<Map<String, Value>, ValuesFileError> {
    let relative = Path::new(file);
    let inside = !file.is_empty()
        && relative
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !inside {
        return Err(ValuesFileError::OutsideChart(file.to_string()));
    }
    let path = chart.join(relative);
    // A symlink inside the tree must not lead out of it either.
    let (Ok(root), Ok(real)) = (chart.canonicalize(), path.canonicalize()) else {
        return Err(ValuesFileError::NotFound(file.to_string()));
    };
    if !real.starts_with(&root) {
        return Err(ValuesFileError::OutsideChart(file.to_string()));
    }
    if !real.is_file() {
        return Err(ValuesFileError::NotFound(file.to_string()));
    }
    let invalid = |message: String| ValuesFileError::Invalid {
        file: file.to_string(),
        message,
    };
    let text = std::fs::read_to_string(&real).map_err(|e| invalid(e.to_string()))?;
    parse_values_document(&text).map_err(invalid)
}

/// Parses one values document as helm reads values files (YAML 1.1): a mapping, or nothing (an
/// empty or null document is an empty mapping). Anything else is an error naming its type only,
/// never its content (values may come from a Secret).
pub fn parse_values_document(text: &str) -> Result<Map<String, Value>, String> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match super::yaml11::parse(text).map_err(|e| format!("not valid YAML: {e}"))? {
        Value::Object(map) => Ok(map),
        Value::Null => Ok(Map::new()),
        other => Err(format!(
            "is a YAML {}, not a mapping of values",
            type_name(&other)
        )),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "mapping",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn maps_merge_deeply_and_later_values_win() {
        let mut base = map(json!({"a": {"b": 1, "c": [1, 2]}, "keep": true, "gone": {"x": 1}}));
        merge_values(
            &mut base,
            &map(json!({"a": {"c": [3], "d": "new"}, "gone": null, "keep": {"now": "a map"}})),
        );
        assert_eq!(
            Value::Object(base),
            json!({"a": {"b": 1, "c": [3], "d": "new"}, "gone": null, "keep": {"now": "a map"}})
        );
    }

    #[test]
    fn values_files_go_in_order_under_the_user_values() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), "x: 1\nm: {z: 1}\n").unwrap();
        std::fs::create_dir(dir.path().join("env")).unwrap();
        std::fs::write(dir.path().join("env/b.yaml"), "x: 2\nm: {w: 2}\n").unwrap();
        let merged = with_values_files(
            dir.path(),
            &["a.yaml".into(), "./env/b.yaml".into()],
            &map(json!({"m": {"z": 3}})),
        )
        .unwrap();
        assert_eq!(
            Value::Object(merged),
            json!({"x": 2, "m": {"z": 3, "w": 2}})
        );
    }

    #[test]
    fn values_files_must_exist_inside_the_chart_and_hold_a_mapping() {
        let dir = tempfile::tempdir().unwrap();
        let chart = dir.path().join("chart");
        std::fs::create_dir(&chart).unwrap();
        std::fs::write(dir.path().join("outside.yaml"), "x: 1\n").unwrap();
        std::fs::write(chart.join("list.yaml"), "- 1\n").unwrap();
        std::os::unix::fs::symlink(dir.path().join("outside.yaml"), chart.join("link.yaml"))
            .unwrap();
        let read = |f: &str| with_values_files(&chart, &[f.to_string()], &Map::new());
        assert_eq!(
            read("../outside.yaml"),
            Err(ValuesFileError::OutsideChart("../outside.yaml".into()))
        );
        assert_eq!(
            read("/etc/hostname"),
            Err(ValuesFileError::OutsideChart("/etc/hostname".into()))
        );
        assert_eq!(
            read("link.yaml"),
            Err(ValuesFileError::OutsideChart("link.yaml".into()))
        );
        let missing = read("values-prod.yaml").unwrap_err();
        assert_eq!(
            missing.to_string(),
            "valuesFiles: \"values-prod.yaml\" is not a file of the chart"
        );
        let list = read("list.yaml").unwrap_err().to_string();
        assert!(
            list.contains("list.yaml") && list.contains("not a mapping"),
            "{list}"
        );
    }

    #[test]
    fn values_documents_are_mappings_and_errors_never_show_content() {
        assert_eq!(parse_values_document("").unwrap(), Map::new());
        assert_eq!(parse_values_document("~\n").unwrap(), Map::new());
        assert_eq!(parse_values_document("a: yes\n").unwrap()["a"], json!(true));
        let err = parse_values_document("hunter2\n").unwrap_err();
        assert_eq!(err, "is a YAML string, not a mapping of values");
    }
}
