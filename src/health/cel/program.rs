//! A CEL expression under a budget: compiled with its lower-bound estimate checked (what no input
//! can make affordable is refused at once), evaluated after its upper-bound estimate for the
//! actual inputs is checked, with the meter running. Failures never carry values: a result or an
//! error is described by its type and the expression's own text, never by what it read.

use std::sync::Arc;

use cel::objects::{Key, Map};
use cel::{ExecutionError, IdedExpr};
use serde_json::Value;

use super::budget::{BudgetError, CelLimits};
use super::estimate::{self, Bound, Estimate};
use super::meter;

/// Why an expression did not compile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompileError {
    /// Its syntax (one line, from the parser).
    Syntax(String),
    /// Over budget for any input.
    Budget(BudgetError),
}

/// Why an evaluation gave no value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvalError {
    /// A bound was hit (or would be): not evaluated again for these inputs.
    Budget(BudgetError),
    /// The expression failed on these inputs (a missing key, a type mismatch), said without
    /// values.
    Failed(String),
}

/// A compiled expression with its budget.
#[derive(Clone)]
pub struct BudgetedProgram {
    text: Arc<str>,
    /// As parsed: what the estimates walk.
    source: Arc<IdedExpr>,
    /// With the meter's calls: what runs.
    metered: Arc<IdedExpr>,
    limits: CelLimits,
}

impl std::fmt::Debug for BudgetedProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("BudgetedProgram").field(&self.text).finish()
    }
}

impl BudgetedProgram {
    /// Compiles `text`, whose variables are `inputs`: refused when it does not parse, nests
    /// deeper than allowed, uses something without a bound, or is over budget whatever the
    /// inputs are.
    pub fn compile(
        text: &str,
        inputs: &[&str],
        limits: &CelLimits,
    ) -> Result<BudgetedProgram, CompileError> {
        // The parser and the walks recurse per level of the text: on a stack of known size.
        on_cel_stack(|| Self::compile_here(text, inputs, limits)).unwrap_or_else(|e| {
            Err(CompileError::Syntax(format!(
                "no thread to compile it on: {e}"
            )))
        })
    }

    fn compile_here(
        text: &str,
        inputs: &[&str],
        limits: &CelLimits,
    ) -> Result<BudgetedProgram, CompileError> {
        let source = super::env()
            .parser()
            .parse(text)
            .map_err(|e| CompileError::Syntax(super::one_line(&e.to_string())))?;
        let depth = estimate::depth(&source);
        if depth > limits.nesting {
            return Err(CompileError::Budget(BudgetError::Nesting {
                depth,
                limit: limits.nesting,
            }));
        }
        let unknown: Vec<(&str, Option<&Value>)> = inputs.iter().map(|n| (*n, None)).collect();
        let lower = estimate::estimate(&source, &unknown, Bound::Lower, limits)
            .map_err(CompileError::Budget)?;
        check(lower, limits).map_err(CompileError::Budget)?;
        Ok(BudgetedProgram {
            text: text.into(),
            metered: Arc::new(meter::instrument(&source)),
            source: Arc::new(source),
            limits: *limits,
        })
    }

    /// The expression's text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The upper bound of one evaluation with `inputs`.
    pub fn estimate(&self, inputs: &[(&str, &Value)]) -> Result<Estimate, BudgetError> {
        let known: Vec<(&str, Option<&Value>)> =
            inputs.iter().map(|(n, v)| (*n, Some(*v))).collect();
        estimate::estimate(&self.source, &known, Bound::Upper, &self.limits)
    }

    /// Evaluates with `bindings` on this thread: refused without running when its upper-bound
    /// estimate is over budget, stopped when the meter says so.
    pub fn evaluate(&self, bindings: &Bindings<'_>) -> Result<cel::Value, EvalError> {
        self.evaluate_charged(bindings, &std::sync::atomic::AtomicU64::new(0), u64::MAX)
    }

    /// [`Self::evaluate`], its estimated cost charged to `spent` first: refused when that
    /// takes `spent` past `limit` (the budget of several evaluations together).
    pub fn evaluate_charged(
        &self,
        bindings: &Bindings<'_>,
        spent: &std::sync::atomic::AtomicU64,
        limit: u64,
    ) -> Result<cel::Value, EvalError> {
        let upper = self.estimate(&bindings.values).map_err(EvalError::Budget)?;
        check(upper, &self.limits).map_err(EvalError::Budget)?;
        let total = spent
            .fetch_add(upper.cost, std::sync::atomic::Ordering::Relaxed)
            .saturating_add(upper.cost);
        if total > limit {
            return Err(EvalError::Budget(BudgetError::PassCost {
                cost: total,
                limit,
            }));
        }
        let context = bindings.context();
        let metered = &self.metered;
        let result = meter::metered(&self.limits, || cel::Value::resolve(metered, context))
            .map_err(EvalError::Budget)?;
        result.map_err(|error| EvalError::Failed(describe_error(&error, &self.text)))
    }
}

#[cfg(test)]
impl BudgetedProgram {
    /// Evaluates without the upper-bound estimate: the meter alone enforces the budget.
    pub(super) fn evaluate_metered_only(
        &self,
        bindings: &Bindings<'_>,
    ) -> Result<cel::Value, EvalError> {
        let context = bindings.context();
        let metered = &self.metered;
        meter::metered(&self.limits, || cel::Value::resolve(metered, context))
            .map_err(EvalError::Budget)?
            .map_err(|error| EvalError::Failed(describe_error(&error, &self.text)))
    }
}

/// The variables of evaluations: their JSON values (for the estimates) and, made once for all
/// the expressions evaluated with them, as CEL values.
pub struct Bindings<'a> {
    values: Vec<(&'a str, &'a Value)>,
    context: std::cell::OnceCell<cel::Context<'static, 'static>>,
}

impl<'a> Bindings<'a> {
    /// Variables `values` (name and value).
    pub fn new(values: Vec<(&'a str, &'a Value)>) -> Bindings<'a> {
        Bindings {
            values,
            context: std::cell::OnceCell::new(),
        }
    }

    fn context(&self) -> &cel::Context<'static, 'static> {
        self.context.get_or_init(|| {
            let mut context = cel::Context::with_env(super::env());
            for (name, value) in &self.values {
                context.add_variable_from_value(*name, to_cel(value));
            }
            context
        })
    }
}

/// The stack of a thread that compiles or evaluates CEL: the parser and the interpreter recurse
/// once per level of an expression (up to [`CelLimits::nesting`], and a few more for the meter's
/// calls), with frames of several kilobytes each in a debug build.
pub const CEL_STACK_BYTES: usize = 16 << 20;

/// Runs `f` on a thread with a [`CEL_STACK_BYTES`] stack, waiting for it; a panic in `f` is
/// resumed here. Fails only when no thread could be started.
pub fn on_cel_stack<T: Send>(f: impl FnOnce() -> T + Send) -> std::io::Result<T> {
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name("cel".into())
            .stack_size(CEL_STACK_BYTES)
            .spawn_scoped(scope, f)?;
        match thread.join() {
            Ok(value) => Ok(value),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Over the cost or memory limit.
fn check(estimate: Estimate, limits: &CelLimits) -> Result<(), BudgetError> {
    if estimate.cost > limits.cost {
        return Err(BudgetError::Cost {
            cost: estimate.cost,
            limit: limits.cost,
            estimated: true,
        });
    }
    if estimate.memory > limits.memory_bytes {
        return Err(BudgetError::Memory {
            bytes: estimate.memory,
            limit: limits.memory_bytes,
        });
    }
    Ok(())
}

/// A JSON value as a CEL value. Integers stay `int` (CEL's usual number type, so
/// `self.status.replicas == 3` holds); only those past i64 become `uint`.
pub(super) fn to_cel(value: &Value) -> cel::Value {
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
            let map: std::collections::HashMap<Key, cel::Value> = map
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
                .collect();
            cel::Value::Map(Map { map: Arc::new(map) })
        }
    }
}

/// The type of a CEL value, for a message that must not show the value.
pub fn type_name(value: &cel::Value) -> &'static str {
    match value {
        cel::Value::List(_) => "list",
        cel::Value::Map(_) => "map",
        cel::Value::Function(_, _) => "function",
        cel::Value::Int(_) => "int",
        cel::Value::UInt(_) => "uint",
        cel::Value::Float(_) => "double",
        cel::Value::String(_) => "string",
        cel::Value::Bytes(_) => "bytes",
        cel::Value::Bool(_) => "bool",
        cel::Value::Null => "null",
        _ => "value of another type",
    }
}

/// What went wrong, without any value the expression read: a key is named only when the
/// expression's text spells it, a type only by its name.
fn describe_error(error: &ExecutionError, text: &str) -> String {
    let spelled = |name: &str| text.contains(name);
    let type_word = |t: &str| {
        // A type's name, never a rendering of a value.
        t.len() <= 32
            && t.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._()".contains(c))
    };
    match error {
        ExecutionError::NoSuchKey(key) if spelled(key) => format!("no such key: {key}"),
        ExecutionError::NoSuchKey(_) => "no such key (a key read from the object)".into(),
        ExecutionError::UndeclaredReference(name) if spelled(name) => {
            format!("undeclared reference to {name}")
        }
        ExecutionError::NoSuchOverload(overload) => overload.to_string(),
        ExecutionError::UnexpectedType { got, want } if type_word(got) && type_word(want) => {
            format!("unexpected type: got {got}, want {want}")
        }
        ExecutionError::UnexpectedType { want, .. } if type_word(want) => {
            format!("unexpected type: want {want}")
        }
        ExecutionError::InvalidArgumentCount { expected, actual } => {
            format!("invalid argument count: expected {expected}, got {actual}")
        }
        ExecutionError::FunctionError { function, .. } if spelled(function) => {
            format!("function {function} failed on its arguments")
        }
        ExecutionError::DivisionByZero(_) => "division by zero".into(),
        ExecutionError::RemainderByZero(_) => "remainder by zero".into(),
        ExecutionError::Overflow(operator, _, _) => format!("overflow in {operator}"),
        ExecutionError::IndexOutOfBounds(_) => "index out of bounds".into(),
        ExecutionError::ValuesNotComparable(a, b) => format!(
            "a {} cannot be compared with a {}",
            type_name(a),
            type_name(b)
        ),
        ExecutionError::UnsupportedBinaryOperator(operator, a, b) => format!(
            "{operator} does not apply to a {} and a {}",
            type_name(a),
            type_name(b)
        ),
        ExecutionError::UnsupportedIndex(index, target) => format!(
            "a {} cannot index a {}",
            type_name(index),
            type_name(target)
        ),
        ExecutionError::UnsupportedKeyType(key) => {
            format!("a {} cannot be a map key", type_name(key))
        }
        ExecutionError::DuplicateKey(_) => "a map literal repeats a key".into(),
        ExecutionError::MissingArgumentOrTarget => "missing argument or target".into(),
        ExecutionError::UnsupportedTargetType { target } => {
            format!("unsupported target type {}", type_name(target))
        }
        ExecutionError::NotSupportedAsMethod { method, target } => {
            format!("{method} is not a method of a {}", type_name(target))
        }
        _ => "evaluation failed".into(),
    }
}
