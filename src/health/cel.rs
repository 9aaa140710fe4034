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
//!    Messages name the check, the field, the expression and a result's type, never a value
//!    read from the object;
//! 4. every expression runs under a budget ([`budget`]): one over it for any object is refused
//!    when the BundleDeployment is admitted; one over it on an object leaves that object Failed
//!    with the bound named, and is not evaluated again (on any object) until the spec changes.
//!
//! Variables: `self` is the whole object (as in Kubernetes validation rules), and its top-level
//! fields are variables too (`apiVersion`, `kind`, `metadata`, `spec`, `status`), as in Flux;
//! `metadata`, `spec` and `status` are empty maps when the object has none, so `has(status.x)`
//! works before a controller wrote any status.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use cel::Env;
use kube::core::{Selector, SelectorExt};
use serde_json::Value;

use super::{Health, HealthState};
use crate::api::HealthCheck;

pub use budget::{BudgetError, CelLimits};
pub use program::{
    on_cel_stack, type_name, Bindings, BudgetedProgram, CompileError, EvalError, CEL_STACK_BYTES,
};

/// The variables of a health check's expressions.
const CHECK_INPUTS: [&str; 6] = ["self", "apiVersion", "kind", "metadata", "spec", "status"];

/// The CEL checks of a spec, compiled. Cheap to clone; the clones share which expressions went
/// over their budget (not evaluated again: see [`CelChecks::refusal`]).
#[derive(Clone, Default)]
pub struct CelChecks {
    checks: Arc<Vec<CelCheck>>,
    refused: Arc<Mutex<BTreeMap<(usize, &'static str), String>>>,
    /// Cost spent by this pass's evaluations (see [`CelChecks::for_pass`]).
    spent: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for CelChecks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.checks.iter().map(|c| c.name.as_str()).collect();
        f.debug_struct("CelChecks").field("checks", &names).finish()
    }
}

/// One compiled CEL check.
struct CelCheck {
    /// Its index in `spec.healthChecks`.
    index: usize,
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

/// A compiled expression with its field name, for messages.
struct Expression {
    field: &'static str,
    program: BudgetedProgram,
}

/// Why a health check was refused (an expression that does not compile or is over its budget
/// for any object, a bad selector).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{check}: {message}")]
pub struct CheckError {
    /// Which check (`healthChecks[0] (example.com/v1 Widget)`).
    pub check: String,
    /// What is wrong.
    pub message: String,
    /// An expression is over its CEL budget (else it is invalid).
    pub over_budget: bool,
}

/// The environment: CEL's standard library with the strings and lists extensions that
/// Kubernetes' CEL offers too, optional values (`status.?phase.orValue('')`), and the budget's
/// meter.
fn env() -> Arc<Env> {
    static ENV: std::sync::OnceLock<Arc<Env>> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        // The extensions come with the crate; adding them fails only on a name clash, which
        // the stdlib does not have. Without them the expressions that use them do not compile.
        let _ = env.add_extension(cel::extensions::strings);
        let _ = env.add_extension(cel::extensions::lists);
        // Named with `@`, which no expression can spell; without them nothing is metered and
        // every metered expression fails (never unbounded).
        let _ = meter::declare(&mut env);
        Arc::new(env)
    })
    .clone()
}

/// Compiles the CEL checks of `checks` (HTTP probes are skipped) under the default limits;
/// every error is reported, each naming its check and expression.
pub fn compile(checks: &[HealthCheck]) -> Result<CelChecks, Vec<CheckError>> {
    compile_with(checks, &CelLimits::default())
}

/// [`compile`] under `limits`.
pub fn compile_with(
    checks: &[HealthCheck],
    limits: &CelLimits,
) -> Result<CelChecks, Vec<CheckError>> {
    let mut compiled = Vec::new();
    let mut errors = Vec::new();
    for (index, check) in checks.iter().enumerate() {
        if check.http_get.is_some() {
            continue;
        }
        let name = check.describe(index);
        match compile_one(index, name.clone(), check, limits) {
            Ok(check) => compiled.push(check),
            Err(messages) => {
                errors.extend(
                    messages
                        .into_iter()
                        .map(|(message, over_budget)| CheckError {
                            check: name.clone(),
                            message,
                            over_budget,
                        }),
                )
            }
        }
    }
    if errors.is_empty() {
        Ok(CelChecks {
            checks: Arc::new(compiled),
            refused: Arc::default(),
            spent: Arc::default(),
        })
    } else {
        Err(errors)
    }
}

/// One CEL check, or what is wrong with it (every expression is tried), each error with
/// whether it is the budget.
fn compile_one(
    index: usize,
    name: String,
    check: &HealthCheck,
    limits: &CelLimits,
) -> Result<CelCheck, Vec<(String, bool)>> {
    let mut errors = Vec::new();
    let mut expression = |field: &'static str, text: &Option<String>| {
        let text = text.as_ref()?;
        match BudgetedProgram::compile(text, &CHECK_INPUTS, limits) {
            Ok(program) => Some(Expression { field, program }),
            Err(CompileError::Syntax(e)) => {
                errors.push((format!("expression {field} does not compile: {e}"), false));
                None
            }
            Err(CompileError::Budget(e)) => {
                errors.push((format!("expression {field} is over its budget: {e}"), true));
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
            errors.push((format!("selector is not valid: {e}"), false));
            None
        }
    };
    if check.current.is_none() {
        errors.push(("current is required".into(), false));
    }
    let (Some(api_version), Some(kind)) = (&check.api_version, &check.kind) else {
        errors.push(("a CEL check needs apiVersion and kind".into(), false));
        return Err(errors);
    };
    match current {
        Some(current) if errors.is_empty() => Ok(CelCheck {
            index,
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

    /// The same checks (and refusals) for a new pass: its evaluations together spend at most
    /// [`budget::DEFAULT_PASS_COST`].
    pub fn for_pass(&self) -> CelChecks {
        CelChecks {
            spent: Arc::default(),
            ..self.clone()
        }
    }

    /// The health of `object` by the first check that matches it, or None when none does (the
    /// built-in rules apply). Evaluates on this thread: call it off the async runtime.
    pub fn assess(&self, object: &Value) -> Option<Health> {
        let check = self.checks.iter().find(|c| c.matches(object))?;
        Some(check.evaluate(object, &self.refused, &self.spent))
    }

    /// The first expression that went over its budget, with why: it is not evaluated again
    /// (its objects are Failed) until the spec changes.
    pub fn refusal(&self) -> Option<String> {
        let refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        refused.values().next().cloned()
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

    fn evaluate(
        &self,
        object: &Value,
        refused: &Mutex<BTreeMap<(usize, &'static str), String>>,
        spent: &std::sync::atomic::AtomicU64,
    ) -> Health {
        static EMPTY: std::sync::LazyLock<Value> =
            std::sync::LazyLock::new(|| Value::Object(serde_json::Map::new()));
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
        let field = |name: &str| object.get(name).unwrap_or(&EMPTY);
        let bindings = Bindings::new(vec![
            ("self", object),
            ("apiVersion", &object["apiVersion"]),
            ("kind", &object["kind"]),
            ("metadata", field("metadata")),
            ("spec", field("spec")),
            ("status", field("status")),
        ]);
        let steps = [
            (self.in_progress.as_ref(), HealthState::InProgress),
            (self.failed.as_ref(), HealthState::Failed),
            (Some(&self.current), HealthState::Current),
        ];
        for (expression, state) in steps {
            let Some(expression) = expression else {
                continue;
            };
            let (field, text) = (expression.field, expression.program.text());
            let key = (self.index, field);
            let known = refused
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&key)
                .cloned();
            if let Some(refusal) = known {
                return Health::new(HealthState::Failed, refusal);
            }
            match expression
                .program
                .evaluate_charged(&bindings, spent, budget::DEFAULT_PASS_COST)
            {
                Ok(cel::Value::Bool(true)) => {
                    return Health::new(state, format!("{}: {field} is true ({text})", self.name))
                }
                Ok(cel::Value::Bool(false)) => {}
                Ok(other) => {
                    return Health::in_progress(format!(
                        "{}: {field} gave a {}, not a bool ({text})",
                        self.name,
                        type_name(&other)
                    ))
                }
                Err(EvalError::Failed(error)) => {
                    return Health::in_progress(format!(
                        "{}: {field} could not be evaluated on this object: {error} ({text})",
                        self.name
                    ))
                }
                Err(EvalError::Budget(error)) => {
                    let refusal = format!(
                        "{}: {field} is over its CEL budget on this object: {error} ({text}); not evaluated again until the spec changes",
                        self.name
                    );
                    refused
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(key, refusal.clone());
                    return Health::new(HealthState::Failed, refusal);
                }
            }
        }
        Health::in_progress(format!(
            "{}: current is not true yet ({})",
            self.name,
            self.current.program.text()
        ))
    }
}

/// Parser errors span lines with a caret marker; conditions want one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub mod budget;
pub mod estimate;
mod meter;
mod program;
pub mod ready;

#[cfg(test)]
mod tests;
