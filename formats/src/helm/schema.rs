//! values.schema.json validation: the JSON Schema keywords charts commonly use. A keyword outside
//! that set is an error naming it, never silently ignored (a skipped check would let invalid
//! values through that helm rejects).

use serde_json::Value as Json;

/// Keywords that only annotate and never reject.
const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$id",
    "$comment",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "format",
    "definitions",
    "$defs",
];

/// Validates `value` against `schema`; returns one message per violation, each starting with the
/// JSON pointer of the offending value (`/image/tag`).
pub fn validate(schema: &Json, value: &Json) -> Result<Vec<String>, String> {
    let mut errors = Vec::new();
    check(schema, value, "", &mut errors)?;
    Ok(errors)
}

fn type_name(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "boolean",
        Json::Number(n)
            if n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0) =>
        {
            "integer"
        }
        Json::Number(_) => "number",
        Json::String(_) => "string",
        Json::Array(_) => "array",
        Json::Object(_) => "object",
    }
}

fn type_matches(want: &str, v: &Json) -> bool {
    let got = type_name(v);
    got == want || (want == "number" && got == "integer")
}

fn at(path: &str) -> String {
    if path.is_empty() {
        "/".to_string()
    } else {
        path.to_string()
    }
}

fn check(schema: &Json, v: &Json, path: &str, errors: &mut Vec<String>) -> Result<(), String> {
    let obj = match schema {
        Json::Bool(true) => return Ok(()),
        Json::Bool(false) => {
            errors.push(format!("at '{}': not allowed (schema false)", at(path)));
            return Ok(());
        }
        Json::Object(o) => o,
        _ => return Err(format!("schema at '{}' is not an object", at(path))),
    };
    for (k, kv) in obj {
        if ANNOTATIONS.contains(&k.as_str()) {
            continue;
        }
        match k.as_str() {
            "type" => {
                let types: Vec<&str> = match kv {
                    Json::String(t) => vec![t.as_str()],
                    Json::Array(a) => a.iter().filter_map(|t| t.as_str()).collect(),
                    _ => return Err(format!("schema at '{}': bad type", at(path))),
                };
                if !types.iter().any(|t| type_matches(t, v)) {
                    errors.push(format!(
                        "at '{}': got {}, want {}",
                        at(path),
                        type_name(v),
                        types.join(" or ")
                    ));
                }
            }
            "properties" => {
                if let (Some(props), Json::Object(m)) = (kv.as_object(), v) {
                    for (name, sub) in props {
                        if let Some(x) = m.get(name) {
                            check(sub, x, &format!("{path}/{name}"), errors)?;
                        }
                    }
                }
            }
            "required" => {
                if let (Some(req), Json::Object(m)) = (kv.as_array(), v) {
                    let missing: Vec<&str> = req
                        .iter()
                        .filter_map(|r| r.as_str())
                        .filter(|r| !m.contains_key(*r))
                        .collect();
                    if !missing.is_empty() {
                        errors.push(format!(
                            "at '{}': missing property '{}'",
                            at(path),
                            missing.join("', '")
                        ));
                    }
                }
            }
            "additionalProperties" => {
                if let Json::Object(m) = v {
                    let known = obj.get("properties").and_then(|p| p.as_object());
                    if obj.contains_key("patternProperties") {
                        return Err(
                            "unsupported construct: values.schema.json keyword patternProperties"
                                .into(),
                        );
                    }
                    for (name, x) in m {
                        if known.is_some_and(|p| p.contains_key(name)) {
                            continue;
                        }
                        match kv {
                            Json::Bool(false) => errors.push(format!(
                                "at '{}': additional property '{name}' not allowed",
                                at(path)
                            )),
                            Json::Bool(true) => {}
                            sub => check(sub, x, &format!("{path}/{name}"), errors)?,
                        }
                    }
                }
            }
            "items" => {
                if let Json::Array(a) = v {
                    if kv.is_array() {
                        return Err(
                            "unsupported construct: values.schema.json tuple-form items".into()
                        );
                    }
                    for (i, x) in a.iter().enumerate() {
                        check(kv, x, &format!("{path}/{i}"), errors)?;
                    }
                }
            }
            "enum" => {
                if !kv
                    .as_array()
                    .is_some_and(|e| e.iter().any(|c| json_eq(c, v)))
                {
                    errors.push(format!("at '{}': value must be one of {kv}", at(path)));
                }
            }
            "const" => {
                if !json_eq(kv, v) {
                    errors.push(format!("at '{}': value must be {kv}", at(path)));
                }
            }
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => {
                if let (Some(lim), Some(x)) = (kv.as_f64(), v.as_f64()) {
                    let ok = match k.as_str() {
                        "minimum" => x >= lim,
                        "maximum" => x <= lim,
                        "exclusiveMinimum" => x > lim,
                        _ => x < lim,
                    };
                    if !ok {
                        errors.push(format!("at '{}': {x} violates {k} {lim}", at(path)));
                    }
                }
            }
            "minLength" | "maxLength" => {
                if let (Some(lim), Json::String(s)) = (kv.as_u64(), v) {
                    let n = s.chars().count() as u64;
                    if (k == "minLength" && n < lim) || (k == "maxLength" && n > lim) {
                        errors.push(format!("at '{}': length {n} violates {k} {lim}", at(path)));
                    }
                }
            }
            "minItems" | "maxItems" => {
                if let (Some(lim), Json::Array(a)) = (kv.as_u64(), v) {
                    let n = a.len() as u64;
                    if (k == "minItems" && n < lim) || (k == "maxItems" && n > lim) {
                        errors.push(format!("at '{}': {n} items violates {k} {lim}", at(path)));
                    }
                }
            }
            "pattern" => {
                if let (Some(p), Json::String(s)) = (kv.as_str(), v) {
                    let re =
                        regex::Regex::new(p).map_err(|e| format!("schema pattern {p:?}: {e}"))?;
                    if !re.is_match(s) {
                        errors.push(format!(
                            "at '{}': '{s}' does not match pattern {p:?}",
                            at(path)
                        ));
                    }
                }
            }
            other => {
                return Err(format!(
                    "unsupported construct: values.schema.json keyword {other}"
                ))
            }
        }
    }
    Ok(())
}

/// JSON equality where 1 and 1.0 are the same number (values arrive from YAML).
fn json_eq(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => x.as_f64() == y.as_f64(),
        (Json::Array(x), Json::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Json::Object(x), Json::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, p)| y.get(k).is_some_and(|q| json_eq(p, q)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reports_paths_of_violations() {
        let schema = json!({
            "type": "object",
            "required": ["image"],
            "properties": {
                "image": {"type": "object", "properties": {"tag": {"type": "string"}}, "additionalProperties": false},
                "replicas": {"type": "integer", "minimum": 1},
                "mode": {"enum": ["a", "b"]}
            }
        });
        let errs = validate(
            &schema,
            &json!({"image": {"tag": 3, "x": 1}, "replicas": 0, "mode": "c"}),
        )
        .unwrap();
        assert!(
            errs.iter()
                .any(|e| e.contains("/image/tag") && e.contains("got integer, want string")),
            "{errs:?}"
        );
        assert!(
            errs.iter().any(|e| e.contains("additional property 'x'")),
            "{errs:?}"
        );
        assert!(errs.iter().any(|e| e.contains("/replicas")), "{errs:?}");
        assert!(errs.iter().any(|e| e.contains("/mode")), "{errs:?}");
        assert!(
            validate(&schema, &json!({"image": {"tag": "v1"}, "replicas": 2}))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn unsupported_keywords_are_errors() {
        let e = validate(&json!({"oneOf": []}), &json!({})).unwrap_err();
        assert!(e.contains("oneOf"), "{e}");
    }
}
