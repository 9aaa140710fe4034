//! JSON 6902 patches as kustomize v5.5.0 applies them (evanphx/json-patch v4 through its
//! `patchjson6902` filter). That library departs from RFC 6902 in ways kustomize users meet:
//! - `replace` of a missing object member adds it; `copy` and `move` from a missing member
//!   copy (or move) null; an operation without `value` adds null;
//! - negative array indexes count from the end (`-1` is the last element; for `add`, the end);
//! - a path's first segment is not checked (`a/b` is read as `/b`), and the empty path is
//!   refused except by `replace` (of the whole object) and `test`;
//! - `test` compares scalars by their JSON text (`1` and `1.0` differ) and treats a null
//!   member as absent.
//!
//! The object goes through JSON and back as in kustomize, so every number passes through a 64-bit
//! float (integers past 2^53 lose precision).

use serde_json::{Map, Value};

use super::error::KustomizeError;

/// Parses a JSON 6902 patch as kustomize reads it: JSON when the text starts with `[`, else
/// YAML turned into JSON. A list of operations (objects); a null document is no operation.
pub fn parse(text: &str) -> Result<Value, KustomizeError> {
    if text.is_empty() {
        return Err(KustomizeError::invalid("empty json patch operations"));
    }
    let document: Value = if text.starts_with('[') {
        serde_json::from_str(text)
            .map_err(|e| KustomizeError::invalid(format!("invalid JSON patch: {e}")))?
    } else {
        let value: Value = super::yaml_v3::from_yaml_str_unprinted(text)
            .map_err(|e| KustomizeError::invalid(format!("invalid JSON patch: {e}")))?;
        integral_floats_as_integers(value)
    };
    match document {
        Value::Null => Ok(Value::Array(Vec::new())),
        Value::Array(operations) if operations.iter().all(|o| o.is_object() || o.is_null()) => {
            Ok(Value::Array(operations))
        }
        _ => Err(KustomizeError::invalid(
            "invalid JSON patch: not a list of operations",
        )),
    }
}

/// Applies the `operations` (a JSON array, as [`parse`] gives it) to `target`, in order; the
/// first failing operation fails the patch.
pub fn apply(target: &Value, operations: &Value) -> Result<Value, KustomizeError> {
    let Value::Array(operations) = operations else {
        return Err(KustomizeError::invalid(
            "invalid JSON patch: not a list of operations",
        ));
    };
    let mut document = target.clone();
    let empty = Map::new();
    for operation in operations {
        let operation = operation.as_object().unwrap_or(&empty);
        let kind = operation
            .get("op")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        match kind {
            "add" => add(&mut document, operation)?,
            "remove" => remove(&mut document, operation)?,
            "replace" => replace(&mut document, operation)?,
            "move" => move_value(&mut document, operation)?,
            "copy" => copy(&mut document, operation)?,
            "test" => test(&document, operation)?,
            other => {
                return Err(KustomizeError::invalid(format!("Unexpected kind: {other}")));
            }
        }
    }
    if !document.is_object() {
        return Err(KustomizeError::invalid(
            "a JSON patch must leave an object, not a list or scalar",
        ));
    }
    Ok(through_float64(document))
}

/// An operation's path-like member (`path`, `from`).
fn path_member<'a>(
    operation: &'a Map<String, Value>,
    member: &str,
) -> Result<&'a str, KustomizeError> {
    operation
        .get(member)
        .and_then(Value::as_str)
        .ok_or_else(|| KustomizeError::invalid(format!("operation missing {member} field")))
}

/// The operation's `value`: `None` when absent (kept apart from an explicit null).
fn value_member(operation: &Map<String, Value>) -> Option<&Value> {
    operation.get("value")
}

fn missing(operation: &str, path: &str) -> KustomizeError {
    KustomizeError::invalid(format!(
        "{operation} operation does not apply: doc is missing path: \"{path}\""
    ))
}

fn invalid_index(index: &str) -> KustomizeError {
    KustomizeError::invalid(format!("Unable to access invalid index: {index}"))
}

/// Unescapes one pointer segment (`~1` is `/`, `~0` is `~`).
fn decode_segment(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

/// The container (object or array) a path ends in, and the last segment: every segment but
/// the first and the last is followed, through objects and arrays only; a null on the way is
/// missing.
fn container<'a>(document: &'a mut Value, path: &str) -> Option<(&'a mut Value, String)> {
    let segments: Vec<&str> = path.split('/').collect();
    if segments.len() < 2 {
        return None;
    }
    let mut current = document;
    for segment in &segments[1..segments.len() - 1] {
        let key = decode_segment(segment);
        let next = match current {
            Value::Object(map) => map.get_mut(&key)?,
            Value::Array(items) => {
                let index = existing_index(&key, items.len()).ok()?;
                items.get_mut(index)?
            }
            _ => return None,
        };
        if !next.is_object() && !next.is_array() {
            return None;
        }
        current = next;
    }
    Some((current, decode_segment(segments[segments.len() - 1])))
}

/// Parses an array index as Go's `strconv.Atoi` does.
fn parse_index(key: &str) -> Result<i64, KustomizeError> {
    key.parse::<i64>().map_err(|_| {
        KustomizeError::invalid(format!("value was not a proper array index: '{key}'"))
    })
}

/// The index of an existing element (`-n` counts from the end).
fn existing_index(key: &str, len: usize) -> Result<usize, KustomizeError> {
    let index = parse_index(key)?;
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let resolved = if index < 0 { index + len } else { index };
    if index < -len || resolved >= len {
        return Err(invalid_index(key));
    }
    usize::try_from(resolved).map_err(|_| invalid_index(key))
}

/// Gets a member: an object's (none when absent or null, never an error) or an array's (an
/// error when out of range).
fn get_member(container: &Value, key: &str) -> Result<Option<Value>, KustomizeError> {
    match container {
        Value::Object(map) => Ok(map.get(key).filter(|v| !v.is_null()).cloned()),
        Value::Array(items) => {
            let index = existing_index(key, items.len())?;
            Ok(items.get(index).filter(|v| !v.is_null()).cloned())
        }
        _ => Err(KustomizeError::invalid("not a container")),
    }
}

/// Adds a member: an object's is set; into an array it is inserted at the index (`-` or
/// `-1` for the end).
fn add_member(container: &mut Value, key: &str, value: Value) -> Result<(), KustomizeError> {
    match container {
        Value::Object(map) => {
            map.insert(key.to_owned(), value);
            Ok(())
        }
        Value::Array(items) => {
            if key == "-" {
                items.push(value);
                return Ok(());
            }
            let index = parse_index(key)?;
            let size = i64::try_from(items.len() + 1).unwrap_or(i64::MAX);
            if index >= size || index < -size {
                return Err(invalid_index(key));
            }
            let resolved = if index < 0 { index + size } else { index };
            let position = usize::try_from(resolved).map_err(|_| invalid_index(key))?;
            items.insert(position, value);
            Ok(())
        }
        _ => Err(KustomizeError::invalid("not a container")),
    }
}

/// Removes a member (an error when the object has no such member or the index is out of
/// range); returns what was there.
fn remove_member(container: &mut Value, key: &str) -> Result<Value, KustomizeError> {
    match container {
        Value::Object(map) => map.remove(key).ok_or_else(|| {
            KustomizeError::invalid(format!("Unable to remove nonexistent key: {key}"))
        }),
        Value::Array(items) => {
            let index = existing_index(key, items.len())?;
            Ok(items.remove(index))
        }
        _ => Err(KustomizeError::invalid("not a container")),
    }
}

fn add(document: &mut Value, operation: &Map<String, Value>) -> Result<(), KustomizeError> {
    let path = path_member(operation, "path")?;
    let value = value_member(operation).cloned().unwrap_or(Value::Null);
    let (target, key) = container(document, path).ok_or_else(|| missing("add", path))?;
    add_member(target, &key, value)
}

fn remove(document: &mut Value, operation: &Map<String, Value>) -> Result<(), KustomizeError> {
    let path = path_member(operation, "path")?;
    let (target, key) = container(document, path).ok_or_else(|| missing("remove", path))?;
    remove_member(target, &key).map(|_| ())
}

fn replace(document: &mut Value, operation: &Map<String, Value>) -> Result<(), KustomizeError> {
    let path = path_member(operation, "path")?;
    let value = value_member(operation);
    if path.is_empty() {
        // The whole document, by an object or array; any other value is silently ignored.
        let Some(value) = value else {
            return Err(KustomizeError::invalid("replace operation without a value"));
        };
        if value.is_object() || value.is_array() {
            *document = value.clone();
        }
        return Ok(());
    }
    let (target, key) = container(document, path).ok_or_else(|| missing("replace", path))?;
    let value = value.cloned().unwrap_or(Value::Null);
    match target {
        Value::Object(map) => {
            map.insert(key, value);
            Ok(())
        }
        Value::Array(items) => {
            let index = existing_index(&key, items.len())?;
            items[index] = value;
            Ok(())
        }
        _ => Err(missing("replace", path)),
    }
}

fn move_value(document: &mut Value, operation: &Map<String, Value>) -> Result<(), KustomizeError> {
    let from = path_member(operation, "from")?;
    let (source, key) = container(document, from).ok_or_else(|| missing("move", from))?;
    let value = get_member(source, &key)?.unwrap_or(Value::Null);
    remove_member(source, &key)?;
    let path = path_member(operation, "path")?;
    let (target, key) = container(document, path).ok_or_else(|| missing("move", path))?;
    add_member(target, &key, value)
}

fn copy(document: &mut Value, operation: &Map<String, Value>) -> Result<(), KustomizeError> {
    let from = path_member(operation, "from")?;
    let (source, key) = container(document, from).ok_or_else(|| missing("copy", from))?;
    let value = get_member(source, &key)?.unwrap_or(Value::Null);
    let path = path_member(operation, "path")?;
    let (target, key) = container(document, path).ok_or_else(|| missing("copy", path))?;
    add_member(target, &key, value)
}

fn test(document: &Value, operation: &Map<String, Value>) -> Result<(), KustomizeError> {
    let path = path_member(operation, "path")?;
    let failed = || KustomizeError::invalid(format!("testing value {path} failed"));
    let value = value_member(operation);
    if path.is_empty() {
        let value = value.ok_or_else(failed)?;
        return if equal(document, value) {
            Ok(())
        } else {
            Err(failed())
        };
    }
    let mut copy = document.clone();
    let (source, key) = container(&mut copy, path).ok_or_else(|| missing("test", path))?;
    match (get_member(source, &key)?, value) {
        // A missing (or null) member passes against an explicit null only.
        (None, Some(Value::Null)) => Ok(()),
        (None, _) | (Some(_), None) => Err(failed()),
        (Some(found), Some(value)) if equal(&found, value) => Ok(()),
        (Some(_), Some(_)) => Err(failed()),
    }
}

/// evanphx's equality of a document value with an operation's value: objects member by
/// member (a null member equals only a null one), arrays element by element, scalars by their
/// JSON text (the document's as Go writes it).
fn equal(found: &Value, want: &Value) -> bool {
    match (found, want) {
        (Value::Object(found), Value::Object(want)) => {
            found.len() == want.len()
                && found.iter().all(|(key, value)| match want.get(key) {
                    None => false,
                    Some(other) if value.is_null() || other.is_null() => {
                        value.is_null() && other.is_null()
                    }
                    Some(other) => equal(value, other),
                })
        }
        (Value::Array(found), Value::Array(want)) => {
            found.len() == want.len()
                && found.iter().zip(want).all(|(a, b)| {
                    if a.is_null() || b.is_null() {
                        a.is_null() && b.is_null()
                    } else {
                        equal(a, b)
                    }
                })
        }
        (Value::Object(_) | Value::Array(_), _) | (_, Value::Object(_) | Value::Array(_)) => false,
        (Value::Number(found), Value::Number(want)) => go_number_text(found) == want.to_string(),
        (found, want) => found == want,
    }
}

/// A number as Go's JSON encoder writes a decoded YAML number: integers as they are, floats
/// without a fraction when integral (`1.0` is `1`), exponents past 1e21 and under 1e-6.
fn go_number_text(number: &serde_json::Number) -> String {
    match number.as_f64() {
        Some(f) if number.is_f64() => {
            if f.fract() == 0.0 && f.abs() < 1e21 {
                format!("{f:.0}")
            } else if f != 0.0 && (f.abs() < 1e-6 || f.abs() >= 1e21) {
                format!("{f:e}")
            } else {
                format!("{f}")
            }
        }
        _ => number.to_string(),
    }
}

/// YAML read into JSON as sigs.k8s.io/yaml does: a float without a fraction is written as an
/// integer.
fn integral_floats_as_integers(value: Value) -> Value {
    map_numbers(value, &|number| match number.as_f64() {
        Some(f) if number.is_f64() && f.fract() == 0.0 && f.abs() < 9.0e15 => {
            // Exact below 2^53; the cast cannot truncate.
            Value::from(f as i64)
        }
        _ => Value::Number(number),
    })
}

/// Every number as a 64-bit float written back: integral values (under 1e21) stay integers,
/// with a float's precision; everything else is a float.
fn through_float64(value: Value) -> Value {
    map_numbers(value, &|number| {
        let Some(f) = number.as_f64() else {
            return Value::Number(number);
        };
        if f.fract() == 0.0 && f.abs() < 9.2e18 {
            // In range: the cast is exact for an integral float.
            Value::from(f as i64)
        } else if f.fract() == 0.0 && f > 0.0 && f < 1.8e19 {
            Value::from(f as u64)
        } else {
            serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
        }
    })
}

fn map_numbers(value: Value, change: &dyn Fn(serde_json::Number) -> Value) -> Value {
    match value {
        Value::Number(number) => change(number),
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|v| map_numbers(v, change)).collect())
        }
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, map_numbers(v, change)))
                .collect(),
        ),
        scalar => scalar,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(target: Value, patch: &str) -> Result<Value, KustomizeError> {
        apply(&target, &parse(patch)?)
    }

    #[test]
    fn operations_as_json_or_yaml() {
        let target = json!({"a": {"b": [1, 2]}});
        let json = run(
            target.clone(),
            r#"[{"op": "add", "path": "/a/b/-", "value": 3}]"#,
        );
        let yaml = run(target, "- op: add\n  path: /a/b/-\n  value: 3\n");
        assert_eq!(json.expect("json"), json!({"a": {"b": [1, 2, 3]}}));
        assert_eq!(yaml.expect("yaml"), json!({"a": {"b": [1, 2, 3]}}));
        assert!(parse("").is_err());
        assert!(parse("{op: add}").is_err());
        assert!(
            parse("[{op: add}]").is_err(),
            "flow YAML starting with [ is read as JSON"
        );
        assert_eq!(parse("\n").expect("null document"), json!([]));
    }

    #[test]
    fn replace_adds_a_missing_member_and_copy_from_nothing_gives_null() {
        let target = json!({"a": 1});
        let replaced = run(
            target.clone(),
            r#"[{"op": "replace", "path": "/b", "value": 2}]"#,
        );
        assert_eq!(replaced.expect("replace"), json!({"a": 1, "b": 2}));
        let copied = run(
            target.clone(),
            r#"[{"op": "copy", "from": "/x", "path": "/c"}]"#,
        );
        assert_eq!(copied.expect("copy"), json!({"a": 1, "c": null}));
        assert!(run(target, r#"[{"op": "remove", "path": "/x"}]"#).is_err());
    }

    #[test]
    fn negative_indexes_count_from_the_end() {
        let target = json!({"l": [1, 2, 3]});
        let removed = run(target.clone(), r#"[{"op": "remove", "path": "/l/-1"}]"#);
        assert_eq!(removed.expect("remove"), json!({"l": [1, 2]}));
        let added = run(
            target.clone(),
            r#"[{"op": "add", "path": "/l/-1", "value": 9}]"#,
        );
        assert_eq!(added.expect("add"), json!({"l": [1, 2, 3, 9]}));
        assert!(run(
            target.clone(),
            r#"[{"op": "add", "path": "/l/5", "value": 9}]"#
        )
        .is_err());
        assert!(run(target, r#"[{"op": "replace", "path": "/l/3", "value": 9}]"#).is_err());
    }

    #[test]
    fn test_compares_scalars_by_text_and_null_as_absent() {
        let target = json!({"i": 1, "f": 1.5});
        assert!(run(
            target.clone(),
            r#"[{"op": "test", "path": "/i", "value": 1}]"#
        )
        .is_ok());
        assert!(run(
            target.clone(),
            r#"[{"op": "test", "path": "/i", "value": 1.0}]"#
        )
        .is_err());
        assert!(run(
            target.clone(),
            r#"[{"op": "test", "path": "/x", "value": null}]"#
        )
        .is_ok());
        assert!(run(target, r#"[{"op": "test", "path": "/x", "value": 1}]"#).is_err());
    }

    #[test]
    fn numbers_come_back_through_float64() {
        let target = json!({"small": 5, "big": 123_456_789_012_345_678_i64, "f": 2.0, "e": 1e300});
        let out = run(target, "[]").expect("no operation");
        assert_eq!(out["small"], json!(5));
        assert_eq!(out["big"], json!(123_456_789_012_345_680_i64));
        assert_eq!(out["f"], json!(2));
        assert!(out["e"].is_f64());
    }
}
