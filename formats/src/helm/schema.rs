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
    let draft = schema.get("$schema").and_then(|s| s.as_str()).unwrap_or("");
    // helm's validator (santhosh-tekuri/jsonschema v6) defaults to draft 2020-12; drafts 4-7
    // differ in `$ref` (siblings ignored) and tuple-form `items`.
    let legacy = ["draft-04", "draft-06", "draft-07"]
        .iter()
        .any(|d| draft.contains(d));
    if draft.contains("draft-04") {
        return Err("unsupported construct: values.schema.json with $schema draft-04".into());
    }
    let cx = Cx {
        root: schema,
        legacy,
    };
    let mut errors = Vec::new();
    cx.check(schema, value, "", &mut errors, 0)?;
    Ok(errors)
}

/// The schema being validated against (for `$ref`) and its draft family.
struct Cx<'a> {
    root: &'a Json,
    legacy: bool,
}

/// Bound on `$ref` chains, so a self-referencing schema is an error, not a stack overflow.
const MAX_REF_DEPTH: usize = 64;

/// Resolves a local `$ref` (`#`, `#/definitions/x`, `#/$defs/x`, any JSON pointer).
fn resolve_ref<'a>(root: &'a Json, r: &str) -> Result<&'a Json, String> {
    let Some(pointer) = r.strip_prefix('#') else {
        return Err(format!(
            "unsupported construct: values.schema.json $ref {r:?} (only local references)"
        ));
    };
    let decoded: String = pointer
        .split('/')
        // `%25` is how a URI fragment carries `%`; JSON pointer escapes stay for `pointer`.
        .map(|seg| seg.replace("%25", "%"))
        .collect::<Vec<_>>()
        .join("/");
    root.pointer(&decoded)
        .ok_or_else(|| format!("values.schema.json: $ref {r:?} does not resolve"))
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

/// The JSON pointer of a value as helm prints it (`''` for the root).
fn at(path: &str) -> String {
    path.to_string()
}

impl Cx<'_> {
    /// Whether `v` is valid against `schema` (for the combinators).
    fn valid(&self, schema: &Json, v: &Json, path: &str, depth: usize) -> Result<bool, String> {
        let mut errs = Vec::new();
        self.check(schema, v, path, &mut errs, depth)?;
        Ok(errs.is_empty())
    }

    fn check(
        &self,
        schema: &Json,
        v: &Json,
        path: &str,
        errors: &mut Vec<String>,
        depth: usize,
    ) -> Result<(), String> {
        let obj = match schema {
            Json::Bool(true) => return Ok(()),
            Json::Bool(false) => {
                errors.push(format!("at '{}': not allowed (schema false)", at(path)));
                return Ok(());
            }
            Json::Object(o) => o,
            _ => return Err(format!("schema at '{}' is not an object", at(path))),
        };
        if let Some(r) = obj.get("$ref") {
            if depth >= MAX_REF_DEPTH {
                return Err(format!(
                    "values.schema.json: $ref nesting over {MAX_REF_DEPTH} at {r}"
                ));
            }
            let target = resolve_ref(self.root, r.as_str().unwrap_or_default())?;
            self.check(target, v, path, errors, depth + 1)?;
            if self.legacy {
                // Before 2019-09, keywords next to `$ref` are ignored.
                return Ok(());
            }
        }
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
                                self.check(
                                    sub,
                                    x,
                                    &format!("{path}/{}", pointer_escape(name)),
                                    errors,
                                    depth,
                                )?;
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
                        let patterns = pattern_properties(obj)?;
                        for (name, x) in m {
                            if known.is_some_and(|p| p.contains_key(name))
                                || patterns.iter().any(|(re, _)| re.is_match(name))
                            {
                                continue;
                            }
                            match kv {
                                Json::Bool(false) => errors.push(format!(
                                    "at '{}': additional property '{name}' not allowed",
                                    at(path)
                                )),
                                Json::Bool(true) => {}
                                sub => self.check(
                                    sub,
                                    x,
                                    &format!("{path}/{}", pointer_escape(name)),
                                    errors,
                                    depth,
                                )?,
                            }
                        }
                    }
                }
                "items" => {
                    if let Json::Array(tuple) = kv {
                        if !self.legacy {
                            return Err(format!(
                            "values.schema.json at '{}': tuple-form items needs a draft-07 $schema (2020-12 uses prefixItems)",
                            at(path)
                        ));
                        }
                        if let Json::Array(a) = v {
                            for (i, x) in a.iter().enumerate() {
                                let sub = match tuple.get(i) {
                                    Some(s) => s,
                                    None => match obj.get("additionalItems") {
                                        Some(s) => s,
                                        None => break,
                                    },
                                };
                                self.check(sub, x, &format!("{path}/{i}"), errors, depth)?;
                            }
                        }
                    } else if let Json::Array(a) = v {
                        // With prefixItems (2020-12), items covers only the rest.
                        let skip = if self.legacy {
                            0
                        } else {
                            obj.get("prefixItems")
                                .and_then(|p| p.as_array())
                                .map_or(0, Vec::len)
                        };
                        for (i, x) in a.iter().enumerate().skip(skip) {
                            self.check(kv, x, &format!("{path}/{i}"), errors, depth)?;
                        }
                    }
                }
                "prefixItems" if !self.legacy => {
                    if let (Some(tuple), Json::Array(a)) = (kv.as_array(), v) {
                        for (i, (s, x)) in tuple.iter().zip(a).enumerate() {
                            self.check(s, x, &format!("{path}/{i}"), errors, depth)?;
                        }
                    }
                }
                // Handled with `items` (tuple form), `if` and `$ref`.
                "additionalItems" | "then" | "else" | "$ref" => {}
                "allOf" => {
                    for s in kv.as_array().into_iter().flatten() {
                        self.check(s, v, path, errors, depth)?;
                    }
                }
                "anyOf" => {
                    let mut any = false;
                    for s in kv.as_array().into_iter().flatten() {
                        if self.valid(s, v, path, depth)? {
                            any = true;
                            break;
                        }
                    }
                    if !any {
                        errors.push(format!("at '{}': 'anyOf' failed, none matched", at(path)));
                    }
                }
                "oneOf" => {
                    let mut matched = Vec::new();
                    for (i, s) in kv.as_array().into_iter().flatten().enumerate() {
                        if self.valid(s, v, path, depth)? {
                            matched.push(i.to_string());
                        }
                    }
                    if matched.len() != 1 {
                        errors.push(format!(
                            "at '{}': 'oneOf' failed, {}",
                            at(path),
                            if matched.is_empty() {
                                "none matched".to_string()
                            } else {
                                format!("subschemas {} matched", matched.join(", "))
                            }
                        ));
                    }
                }
                "not" => {
                    if self.valid(kv, v, path, depth)? {
                        errors.push(format!("at '{}': 'not' failed", at(path)));
                    }
                }
                "if" => {
                    let branch = if self.valid(kv, v, path, depth)? {
                        obj.get("then")
                    } else {
                        obj.get("else")
                    };
                    if let Some(s) = branch {
                        self.check(s, v, path, errors, depth)?;
                    }
                }
                "patternProperties" => {
                    if let Json::Object(m) = v {
                        for (re, sub) in pattern_properties(obj)? {
                            for (name, x) in m {
                                if re.is_match(name) {
                                    self.check(
                                        sub,
                                        x,
                                        &format!("{path}/{}", pointer_escape(name)),
                                        errors,
                                        depth,
                                    )?;
                                }
                            }
                        }
                    }
                }
                "propertyNames" => {
                    if let Json::Object(m) = v {
                        for name in m.keys() {
                            self.check(kv, &Json::String(name.clone()), path, errors, depth)?;
                        }
                    }
                }
                "minProperties" | "maxProperties" => {
                    if let (Some(lim), Json::Object(m)) = (kv.as_u64(), v) {
                        let n = m.len() as u64;
                        if (k == "minProperties" && n < lim) || (k == "maxProperties" && n > lim) {
                            errors.push(format!(
                                "at '{}': {n} properties violates {k} {lim}",
                                at(path)
                            ));
                        }
                    }
                }
                "dependentRequired" | "dependentSchemas" | "dependencies" => {
                    if let (Some(deps), Json::Object(m)) = (kv.as_object(), v) {
                        for (name, dep) in deps {
                            if !m.contains_key(name) {
                                continue;
                            }
                            match dep {
                                Json::Array(req) => {
                                    let missing: Vec<&str> = req
                                        .iter()
                                        .filter_map(|r| r.as_str())
                                        .filter(|r| !m.contains_key(*r))
                                        .collect();
                                    if !missing.is_empty() {
                                        errors.push(format!(
                                            "at '{}': properties '{}' required, if '{name}' exists",
                                            at(path),
                                            missing.join("', '")
                                        ));
                                    }
                                }
                                s => self.check(s, v, path, errors, depth)?,
                            }
                        }
                    }
                }
                "uniqueItems" => {
                    if let (Some(true), Json::Array(a)) = (kv.as_bool(), v) {
                        for i in 0..a.len() {
                            if let Some(j) = (i + 1..a.len()).find(|j| json_eq(&a[i], &a[*j])) {
                                errors.push(format!(
                                    "at '{}': items at {i} and {j} are equal",
                                    at(path)
                                ));
                                break;
                            }
                        }
                    }
                }
                "contains" => {
                    if let Json::Array(a) = v {
                        let mut n = 0u64;
                        for x in a {
                            if self.valid(kv, x, path, depth)? {
                                n += 1;
                            }
                        }
                        let min = obj.get("minContains").and_then(|m| m.as_u64()).unwrap_or(1);
                        let max = obj.get("maxContains").and_then(|m| m.as_u64());
                        if n < min || max.is_some_and(|m| n > m) {
                            errors.push(format!(
                                "at '{}': {n} items match 'contains' (want at least {min}{})",
                                at(path),
                                max.map(|m| format!(", at most {m}")).unwrap_or_default()
                            ));
                        }
                    }
                }
                "minContains" | "maxContains" => {}
                "multipleOf" => {
                    if let (Some(m), Some(x)) = (kv.as_f64(), v.as_f64()) {
                        let q = x / m;
                        if m <= 0.0 || (q - q.round()).abs() > 1e-9 {
                            errors.push(format!("at '{}': {x} not multipleOf {m}", at(path)));
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
                    if !kv.is_number() {
                        return Err(format!(
                            "values.schema.json at '{}': {k} must be a number",
                            at(path)
                        ));
                    }
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
                            errors
                                .push(format!("at '{}': length {n} violates {k} {lim}", at(path)));
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
                        let re = regex::Regex::new(p)
                            .map_err(|e| format!("schema pattern {p:?}: {e}"))?;
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
}

/// A property name as a JSON pointer segment (`/` → `~1`, `~` → `~0`), as helm prints paths.
fn pointer_escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// The compiled `patternProperties` of a schema object.
fn pattern_properties(
    obj: &serde_json::Map<String, Json>,
) -> Result<Vec<(regex::Regex, &Json)>, String> {
    let Some(pp) = obj.get("patternProperties").and_then(|p| p.as_object()) else {
        return Ok(Vec::new());
    };
    pp.iter()
        .map(|(p, s)| {
            regex::Regex::new(p)
                .map(|re| (re, s))
                .map_err(|e| format!("schema patternProperties {p:?}: {e}"))
        })
        .collect()
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
        let e = validate(&json!({"unevaluatedProperties": false}), &json!({})).unwrap_err();
        assert!(e.contains("unevaluatedProperties"), "{e}");
    }
}
