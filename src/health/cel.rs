//! CEL health checks (`spec.healthChecks` with `current`/`failed`/`inProgress`), with Flux's
//! `healthCheckExprs` semantics so users can copy theirs. Pure: compiles expressions and
//! evaluates them over an object's JSON.
//!
//! Evaluation of a matching object:
//! 1. being deleted → Terminating; `status.observedGeneration` set and not
//!    `metadata.generation` → InProgress, no expression evaluated (as Flux does);
//! 2. `inProgress`, then `failed`, then `current`, each when set: the first that is true decides
//!    (InProgress, Failed, Current); none true → InProgress;
//! 3. an expression that errors on the object (a missing field, a result that is not a bool)
//!    leaves the object InProgress with the error in the message: never healthy by accident.
//!
//! Variables: `self` is the whole object (as in Kubernetes validation rules), and its top-level
//! fields are variables too (`apiVersion`, `kind`, `metadata`, `spec`, `status`), as in Flux;
//! `metadata`, `spec` and `status` are empty maps when the object has none, so `has(status.x)`
//! works before a controller wrote any status.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use cel::objects::{Key, Map};
use cel::{Context, Env, Program};
use kube::core::{Selector, SelectorExt};
use serde_json::Value;

use super::{Health, HealthState};
use crate::api::HealthCheck;

/// The CEL checks of a spec, compiled. Cheap to clone.
#[derive(Clone, Default)]
pub struct CelChecks {
    checks: Arc<Vec<CelCheck>>,
}

impl std::fmt::Debug for CelChecks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.checks.iter().map(|c| c.name.as_str()).collect();
        f.debug_struct("CelChecks").field("checks", &names).finish()
    }
}

/// One compiled CEL check.
struct CelCheck {
    /// How it is named in messages (`healthChecks[0] (example.com/v1 Widget)`).
    name: String,
    api_version: String,
    kind: String,
    object_name: Option<String>,
    selector: Option<Selector>,
    in_progress: Option<Expression>,
    failed: Option<Expression>,
    current: Expression,
}

/// A compiled expression with its field name and text, for messages.
struct Expression {
    field: &'static str,
    text: String,
    program: Program,
}

/// Why a health check was refused (an expression that does not compile, a bad selector).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{check}: {message}")]
pub struct CheckError {
    /// Which check (`healthChecks[0] (example.com/v1 Widget)`).
    pub check: String,
    /// What is wrong.
    pub message: String,
}

/// The environment: CEL's standard library with the strings and lists extensions that
/// Kubernetes' CEL offers too, and optional values (`status.?phase.orValue('')`).
fn env() -> Arc<Env> {
    static ENV: std::sync::OnceLock<Arc<Env>> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        // The extensions come with the crate; adding them fails only on a name clash, which
        // the stdlib does not have. Without them the expressions that use them do not compile.
        let _ = env.add_extension(cel::extensions::strings);
        let _ = env.add_extension(cel::extensions::lists);
        Arc::new(env)
    })
    .clone()
}

/// Compiles the CEL checks of `checks` (HTTP probes are skipped); every error is reported, each
/// naming its check and expression.
pub fn compile(checks: &[HealthCheck]) -> Result<CelChecks, Vec<CheckError>> {
    let mut compiled = Vec::new();
    let mut errors = Vec::new();
    for (index, check) in checks.iter().enumerate() {
        if check.http_get.is_some() {
            continue;
        }
        let name = check.describe(index);
        match compile_one(name.clone(), check) {
            Ok(check) => compiled.push(check),
            Err(messages) => errors.extend(messages.into_iter().map(|message| CheckError {
                check: name.clone(),
                message,
            })),
        }
    }
    if errors.is_empty() {
        Ok(CelChecks {
            checks: Arc::new(compiled),
        })
    } else {
        Err(errors)
    }
}

/// One CEL check, or what is wrong with it (every expression is tried).
fn compile_one(name: String, check: &HealthCheck) -> Result<CelCheck, Vec<String>> {
    let env = env();
    let mut errors = Vec::new();
    let mut expression = |field: &'static str, text: &Option<String>| {
        let text = text.as_ref()?;
        match env.compile(text) {
            Ok(program) => Some(Expression {
                field,
                text: text.clone(),
                program,
            }),
            Err(e) => {
                errors.push(format!(
                    "expression {field} does not compile: {}",
                    one_line(&e.to_string())
                ));
                None
            }
        }
    };
    let in_progress = expression("inProgress", &check.in_progress);
    let failed = expression("failed", &check.failed);
    let current = expression("current", &check.current);
    let selector = match check.selector.clone().map(Selector::try_from).transpose() {
        Ok(selector) => selector,
        Err(e) => {
            errors.push(format!("selector is not valid: {e}"));
            None
        }
    };
    if check.current.is_none() {
        errors.push("current is required".into());
    }
    let (Some(api_version), Some(kind)) = (&check.api_version, &check.kind) else {
        errors.push("a CEL check needs apiVersion and kind".into());
        return Err(errors);
    };
    match current {
        Some(current) if errors.is_empty() => Ok(CelCheck {
            name,
            api_version: api_version.clone(),
            kind: kind.clone(),
            object_name: check.name.clone(),
            selector,
            in_progress,
            failed,
            current,
        }),
        _ => Err(errors),
    }
}

impl CelChecks {
    /// No checks.
    pub fn is_empty(&self) -> bool {
        self.checks.is_empty()
    }

    /// The health of `object` by the first check that matches it, or None when none does (the
    /// built-in rules apply).
    pub fn assess(&self, object: &Value) -> Option<Health> {
        let check = self.checks.iter().find(|c| c.matches(object))?;
        Some(check.evaluate(object))
    }
}

impl CelCheck {
    fn matches(&self, object: &Value) -> bool {
        let metadata = &object["metadata"];
        if object["apiVersion"].as_str() != Some(self.api_version.as_str())
            || object["kind"].as_str() != Some(self.kind.as_str())
        {
            return false;
        }
        if let Some(name) = &self.object_name {
            if metadata["name"].as_str() != Some(name.as_str()) {
                return false;
            }
        }
        if let Some(selector) = &self.selector {
            let labels: BTreeMap<String, String> = metadata["labels"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect();
            if !selector.matches(&labels) {
                return false;
            }
        }
        true
    }

    fn evaluate(&self, object: &Value) -> Health {
        let metadata = &object["metadata"];
        if !metadata["deletionTimestamp"].is_null() {
            return Health::new(HealthState::Terminating, "being deleted");
        }
        if let (Some(generation), Some(observed)) = (
            metadata["generation"].as_i64(),
            object["status"]["observedGeneration"].as_i64(),
        ) {
            if generation != observed {
                return Health::in_progress(format!(
                    "{}: waiting for the controller to observe generation {generation} (observed {observed})",
                    self.name
                ));
            }
        }
        let mut context = Context::with_env(env());
        context.add_variable_from_value("self", to_cel(object));
        for field in ["metadata", "spec", "status"] {
            let value = match object.get(field) {
                Some(value) => to_cel(value),
                None => cel::Value::Map(Map {
                    map: Arc::new(HashMap::new()),
                }),
            };
            context.add_variable_from_value(field, value);
        }
        for field in ["apiVersion", "kind"] {
            context.add_variable_from_value(field, to_cel(&object[field]));
        }
        let steps = [
            (self.in_progress.as_ref(), HealthState::InProgress),
            (self.failed.as_ref(), HealthState::Failed),
            (Some(&self.current), HealthState::Current),
        ];
        for (expression, state) in steps {
            let Some(expression) = expression else {
                continue;
            };
            match expression.program.execute(&context) {
                Ok(cel::Value::Bool(true)) => {
                    return Health::new(
                        state,
                        format!(
                            "{}: {} is true ({})",
                            self.name, expression.field, expression.text
                        ),
                    )
                }
                Ok(cel::Value::Bool(false)) => {}
                Ok(other) => {
                    return Health::in_progress(format!(
                        "{}: {} gave {:?}, not a bool ({})",
                        self.name, expression.field, other, expression.text
                    ))
                }
                Err(error) => {
                    return Health::in_progress(format!(
                        "{}: {} could not be evaluated on this object: {error} ({})",
                        self.name, expression.field, expression.text
                    ))
                }
            }
        }
        Health::in_progress(format!(
            "{}: current is not true yet ({})",
            self.name, self.current.text
        ))
    }
}

/// A JSON value as a CEL value. Integers stay `int` (CEL's usual number type, so
/// `self.status.replicas == 3` holds); only those past i64 become `uint`.
fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => {
            let map: HashMap<Key, cel::Value> = map
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
                .collect();
            cel::Value::Map(Map { map: Arc::new(map) })
        }
    }
}

/// Parser errors span lines with a caret marker; conditions want one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub mod ready;

#[cfg(test)]
mod tests;
