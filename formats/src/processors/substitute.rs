//! The `substitute` processor: `${var}` references in the rendered objects replaced by values,
//! with the grammar of Flux's `postBuild.substitute` (`${var}`, `${var:=default}`,
//! `${var:-default}`, `${var=default}`, `${var-default}`, and `$${var}` for a literal `${var}`).
//!
//! Substitution works on string values, never on keys. A string that is exactly one reference
//! (`replicas: ${REPLICAS}`) takes the type its value reads as in YAML (`3` becomes a number)
//! unless the field is known to hold a string (a ConfigMap's data, a label, an annotation): the
//! same object Flux's text substitution produces for an unquoted reference, without turning
//! ConfigMap data into numbers.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// The annotation that exempts one object from substitution (value `Disabled`); Flux's
/// `kustomize.toolkit.fluxcd.io/substitute: disabled` is honoured too.
pub const DISABLED_ANNOTATION: &str = "pallet.dev/substitute";
const FLUX_DISABLED_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/substitute";

/// A substitution: the variables (inline values over those read from objects, merged by the
/// caller) and whether an undefined variable without a default is an error.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Substitution {
    /// Variable values.
    pub vars: BTreeMap<String, String>,
    /// Refuse a reference to an undefined variable that has no default.
    pub strict: bool,
}

/// Why a substitution failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubstituteError {
    /// `strict` and a variable without a value or default.
    Undefined {
        /// The variable.
        var: String,
        /// The object, `Kind namespace/name`.
        object: String,
        /// The field, as a JSON pointer.
        field: String,
    },
    /// A `${` without its `}` or with a name that is not a variable name.
    Malformed {
        /// The text of the reference.
        reference: String,
        /// The object.
        object: String,
        /// The field, as a JSON pointer.
        field: String,
    },
    /// A variable name that cannot be referenced.
    InvalidName(String),
}

impl std::fmt::Display for SubstituteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Undefined { var, object, field } => write!(
                f,
                "{object}: {field}: variable {var} is not defined and has no default (strict)"
            ),
            Self::Malformed {
                reference,
                object,
                field,
            } => write!(f, "{object}: {field}: malformed reference {reference:?}"),
            Self::InvalidName(name) => write!(
                f,
                "variable name {name:?} is not valid: letters, digits and _, not starting with a digit"
            ),
        }
    }
}

/// Whether `name` can be referenced: `[_a-zA-Z][_a-zA-Z0-9]*`.
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Whether an object is exempt from substitution by its annotation.
pub fn exempt(object: &Map<String, Value>) -> bool {
    let annotation = |key: &str| {
        object
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
            .map(str::to_ascii_lowercase)
    };
    annotation(DISABLED_ANNOTATION).as_deref() == Some("disabled")
        || annotation(FLUX_DISABLED_ANNOTATION).as_deref() == Some("disabled")
}

/// Substitutes in every string of `object` (its keys untouched). `describe` names the object in
/// errors. Returns whether anything changed.
pub fn substitute_object(
    object: &mut Map<String, Value>,
    substitution: &Substitution,
    describe: &str,
) -> Result<bool, SubstituteError> {
    for name in substitution.vars.keys() {
        if !valid_name(name) {
            return Err(SubstituteError::InvalidName(name.clone()));
        }
    }
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let mut walker = Walker {
        substitution,
        describe,
        kind: &kind,
        path: Vec::new(),
        changed: false,
    };
    for (key, value) in object.iter_mut() {
        walker.path.push(key.clone());
        walker.value(value)?;
        walker.path.pop();
    }
    Ok(walker.changed)
}

struct Walker<'a> {
    substitution: &'a Substitution,
    describe: &'a str,
    kind: &'a str,
    path: Vec<String>,
    changed: bool,
}

impl Walker<'_> {
    fn pointer(&self) -> String {
        self.path
            .iter()
            .map(|p| format!("/{}", p.replace('~', "~0").replace('/', "~1")))
            .collect()
    }

    fn value(&mut self, value: &mut Value) -> Result<(), SubstituteError> {
        match value {
            Value::String(text) => {
                if !text.contains('$') {
                    return Ok(());
                }
                let (replaced, whole) = self.expand(text)?;
                if replaced != *text {
                    self.changed = true;
                    *value = match whole {
                        true if !self.holds_string() => typed_scalar(replaced),
                        _ => Value::String(replaced),
                    };
                }
                Ok(())
            }
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    self.path.push(i.to_string());
                    self.value(item)?;
                    self.path.pop();
                }
                Ok(())
            }
            Value::Object(map) => {
                for (key, item) in map.iter_mut() {
                    self.path.push(key.clone());
                    self.value(item)?;
                    self.path.pop();
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Fields whose values are strings whatever they read as: metadata labels and annotations,
    /// the data of ConfigMaps and Secrets, environment variable values, container arguments.
    fn holds_string(&self) -> bool {
        let path: Vec<&str> = self.path.iter().map(String::as_str).collect();
        match path.as_slice() {
            ["metadata", "labels" | "annotations", ..] => true,
            ["data" | "stringData" | "binaryData", ..] => {
                matches!(self.kind, "ConfigMap" | "Secret")
            }
            _ => path.windows(2).any(|w| {
                matches!(w, ["env", _]) && path.last() == Some(&"value")
                    || matches!(w[0], "args" | "command")
                    || matches!(w, ["labels" | "annotations", _])
            }),
        }
    }

    /// The text with every reference expanded, and whether the text was exactly one reference.
    fn expand(&self, text: &str) -> Result<(String, bool), SubstituteError> {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        let mut references = 0;
        let mut literal = false;
        while let Some(at) = rest.find('$') {
            out.push_str(&rest[..at]);
            rest = &rest[at..];
            if let Some(after) = rest.strip_prefix("$${") {
                // `$${var}` is the escape for a literal `${var}`.
                out.push_str("${");
                rest = after;
                literal = true;
                continue;
            }
            let Some(after) = rest.strip_prefix("${") else {
                out.push('$');
                rest = &rest[1..];
                literal = true;
                continue;
            };
            let Some(close) = after.find('}') else {
                return Err(self.malformed(rest));
            };
            let reference = &after[..close];
            out.push_str(&self.resolve(reference, &rest[..close + 3])?);
            references += 1;
            rest = &after[close + 1..];
        }
        let whole =
            references == 1 && !literal && text.starts_with("${") && text.ends_with('}') && {
                // Exactly one reference spanning the whole text.
                text[2..].find('}') == Some(text.len() - 3)
            };
        out.push_str(rest);
        Ok((out, whole))
    }

    fn malformed(&self, reference: &str) -> SubstituteError {
        SubstituteError::Malformed {
            reference: reference.chars().take(64).collect(),
            object: self.describe.to_owned(),
            field: self.pointer(),
        }
    }

    fn resolve(&self, reference: &str, whole: &str) -> Result<String, SubstituteError> {
        let name_end = reference
            .find(|c: char| !(c == '_' || c.is_ascii_alphanumeric()))
            .unwrap_or(reference.len());
        let (name, operator) = reference.split_at(name_end);
        if !valid_name(name) {
            return Err(self.malformed(whole));
        }
        let value = self.substitution.vars.get(name);
        // `:=`/`:-` take the default when unset or empty; `=`/`-` only when unset.
        let default = if let Some(d) = operator.strip_prefix(":=").or(operator.strip_prefix(":-")) {
            Some((d, true))
        } else if let Some(d) = operator.strip_prefix('=').or(operator.strip_prefix('-')) {
            Some((d, false))
        } else if operator.is_empty() {
            None
        } else {
            return Err(self.malformed(whole));
        };
        match (value, default) {
            (Some(v), Some((d, true))) if v.is_empty() => Ok(d.to_owned()),
            (Some(v), _) => Ok(v.clone()),
            (None, Some((d, _))) => Ok(d.to_owned()),
            (None, None) if self.substitution.strict => Err(SubstituteError::Undefined {
                var: name.to_owned(),
                object: self.describe.to_owned(),
                field: self.pointer(),
            }),
            // Not strict: an undefined variable is replaced by nothing, as Flux does.
            (None, None) => Ok(String::new()),
        }
    }
}

/// What a plain YAML scalar `text` reads as: a number, a boolean, null, or the string itself.
fn typed_scalar(text: String) -> Value {
    let trimmed = text.trim();
    if trimmed.is_empty() || trimmed.contains(['\n', ':', '#', '[', '{', ',', '"', '\'']) {
        return Value::String(text);
    }
    match crate::object::from_yaml_str::<Value>(trimmed) {
        Ok(value @ (Value::Number(_) | Value::Bool(_))) => value,
        _ => Value::String(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(object: Value, vars: &[(&str, &str)], strict: bool) -> Result<Value, SubstituteError> {
        let Value::Object(mut map) = object else {
            panic!("not an object")
        };
        let substitution = Substitution {
            vars: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            strict,
        };
        substitute_object(&mut map, &substitution, "Deployment ns/app")?;
        Ok(Value::Object(map))
    }

    #[test]
    fn references_defaults_and_escapes() {
        let out = run(
            json!({"kind": "Deployment", "spec": {
                "replicas": "${REPLICAS}",
                "image": "registry/${APP}:${TAG:=latest}",
                "literal": "$${APP} costs $5",
                "empty": "${EMPTY:-fallback}", "unset": "${UNSET=x}", "set_empty": "${EMPTY=y}",
            }}),
            &[("REPLICAS", "3"), ("APP", "web"), ("EMPTY", "")],
            true,
        )
        .unwrap();
        assert_eq!(out["spec"]["replicas"], json!(3));
        assert_eq!(out["spec"]["image"], json!("registry/web:latest"));
        assert_eq!(out["spec"]["literal"], json!("${APP} costs $5"));
        assert_eq!(out["spec"]["empty"], json!("fallback"));
        assert_eq!(out["spec"]["unset"], json!("x"));
        assert_eq!(out["spec"]["set_empty"], json!(""));
    }

    #[test]
    fn string_fields_stay_strings() {
        let out = run(
            json!({"kind": "ConfigMap", "metadata": {"labels": {"v": "${N}"}},
                   "data": {"n": "${N}", "on": "${YES}"}}),
            &[("N", "42"), ("YES", "true")],
            false,
        )
        .unwrap();
        assert_eq!(out["data"]["n"], json!("42"));
        assert_eq!(out["data"]["on"], json!("true"));
        assert_eq!(out["metadata"]["labels"]["v"], json!("42"));
    }

    #[test]
    fn strict_refuses_an_undefined_variable_and_names_where() {
        let err = run(
            json!({"kind": "Deployment", "spec": {"x": "${NOPE}"}}),
            &[],
            true,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Deployment ns/app: /spec/x: variable NOPE is not defined and has no default (strict)"
        );
        let out = run(
            json!({"kind": "Deployment", "spec": {"x": "a${NOPE}b"}}),
            &[],
            false,
        )
        .unwrap();
        assert_eq!(out["spec"]["x"], json!("ab"));
    }

    #[test]
    fn malformed_references_are_errors() {
        assert!(matches!(
            run(json!({"kind": "X", "a": "${OPEN"}), &[], false),
            Err(SubstituteError::Malformed { .. })
        ));
        assert!(matches!(
            run(json!({"kind": "X", "a": "${A?x}"}), &[("A", "1")], false),
            Err(SubstituteError::Malformed { .. })
        ));
        assert!(matches!(
            run(json!({"kind": "X"}), &[("1A", "1")], false),
            Err(SubstituteError::InvalidName(_))
        ));
    }

    #[test]
    fn exempt_objects_are_recognised() {
        let map = |v: Value| v.as_object().unwrap().clone();
        assert!(exempt(&map(
            json!({"metadata": {"annotations": {"pallet.dev/substitute": "Disabled"}}})
        )));
        assert!(exempt(&map(
            json!({"metadata": {"annotations": {"kustomize.toolkit.fluxcd.io/substitute": "disabled"}}})
        )));
        assert!(!exempt(&map(json!({"metadata": {}}))));
    }
}
