//! CEL `readyExpr` of `spec.dependsOn` (Flux's shape): a boolean expression over the dependency
//! (`dep`) and the dependent BundleDeployment (`self`), in the environment of the CEL health
//! checks (strings and lists extensions, optional values), under the same budget.

use serde_json::Value;

use super::{
    type_name, Bindings, BudgetError, BudgetedProgram, CelLimits, CompileError, EvalError,
};

/// The variables of a `readyExpr`.
const INPUTS: [&str; 2] = ["dep", "self"];

/// A compiled `readyExpr`.
#[derive(Clone)]
pub struct ReadyExpression {
    program: BudgetedProgram,
}

impl std::fmt::Debug for ReadyExpression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ReadyExpression")
            .field(&self.program.text())
            .finish()
    }
}

/// Why a `readyExpr` is refused or gave no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotReady {
    /// It does not compile (one line, fit for a condition message).
    Invalid(String),
    /// It is over its budget (for any input when compiling, else for these).
    OverBudget(BudgetError),
    /// It failed on these inputs or gave no bool: why, without any value.
    Failed(String),
}

impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotReady::Invalid(why) => write!(f, "readyExpr does not compile: {why}"),
            NotReady::OverBudget(why) => write!(f, "readyExpr is over its CEL budget: {why}"),
            NotReady::Failed(why) => f.write_str(why),
        }
    }
}

impl ReadyExpression {
    /// Compiles `text` under the default limits.
    pub fn compile(text: &str) -> Result<ReadyExpression, NotReady> {
        Self::compile_with(text, &CelLimits::default())
    }

    /// Compiles `text` under `limits`: refused when it does not parse or is over budget for any
    /// input.
    pub fn compile_with(text: &str, limits: &CelLimits) -> Result<ReadyExpression, NotReady> {
        BudgetedProgram::compile(text, &INPUTS, limits)
            .map(|program| ReadyExpression { program })
            .map_err(|e| match e {
                CompileError::Syntax(why) => NotReady::Invalid(why),
                CompileError::Budget(why) => NotReady::OverBudget(why),
            })
    }

    /// Whether the expression is true for dependency `dep` and dependent `dependent`; an
    /// expression that errors on them (a missing field) or gives no bool says why (never with a
    /// value), and counts as not ready: never ready by accident. Evaluates on this thread: call
    /// it off the async runtime.
    pub fn evaluate(&self, dep: &Value, dependent: &Value) -> Result<bool, NotReady> {
        let bindings = Bindings::new(vec![("dep", dep), ("self", dependent)]);
        match self.program.evaluate(&bindings) {
            Ok(cel::Value::Bool(ready)) => Ok(ready),
            Ok(other) => Err(NotReady::Failed(format!(
                "readyExpr gave a {}, not a bool ({})",
                type_name(&other),
                self.text()
            ))),
            Err(EvalError::Budget(why)) => Err(NotReady::OverBudget(why)),
            Err(EvalError::Failed(why)) => Err(NotReady::Failed(format!(
                "readyExpr could not be evaluated: {why} ({})",
                self.text()
            ))),
        }
    }

    /// The expression's text.
    pub fn text(&self) -> &str {
        self.program.text()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_ready_expression_sees_the_dependency_and_the_dependent() {
        let dep = json!({"kind": "ConfigMap", "data": {"ready": "true"}});
        let me = json!({"metadata": {"name": "app"}});
        let ready =
            ReadyExpression::compile("dep.data.ready == 'true' && self.metadata.name == 'app'")
                .unwrap();
        assert_eq!(ready.evaluate(&dep, &me), Ok(true));
        let other = json!({"kind": "ConfigMap", "data": {"ready": "no"}});
        assert_eq!(ready.evaluate(&other, &me), Ok(false));
        // A missing key is not ready, with the reason; a non-bool result likewise.
        let missing = ready
            .evaluate(&json!({"kind": "ConfigMap"}), &me)
            .unwrap_err()
            .to_string();
        assert!(missing.contains("could not be evaluated"), "{missing}");
        let not_bool = ReadyExpression::compile("dep.kind").unwrap();
        assert!(not_bool
            .evaluate(&dep, &me)
            .unwrap_err()
            .to_string()
            .contains("gave a string, not a bool"));
        assert!(matches!(
            ReadyExpression::compile("dep.data["),
            Err(NotReady::Invalid(_))
        ));
    }

    #[test]
    fn a_secret_read_by_a_ready_expression_never_reaches_the_message() {
        let secret = json!({"kind": "Secret", "data": {"password": "c2VjcmV0LXZhbHVl"},
                            "stringData": {"token": "hunter2"}});
        let me = json!({"metadata": {"name": "app"}});
        for text in [
            "dep.data",
            "dep.data.password",
            "dep.stringData.token",
            "dep.data.password + 1 == 2",
            "dep.data[dep.stringData.token] == 'x'",
            "int(dep.stringData.token) > 0",
            "dep.stringData.token > 3",
            "[dep.data].exists(d, d.password.size() > dep.stringData)",
            "timestamp(dep.stringData.token) > timestamp(0)",
            "dep.stringData.token.matches(dep.stringData.token + '(')",
        ] {
            let expression = ReadyExpression::compile(text).unwrap();
            let message = expression.evaluate(&secret, &me).unwrap_err().to_string();
            for secret in ["c2VjcmV0LXZhbHVl", "hunter2"] {
                assert!(
                    !message.replace(text, "").contains(secret),
                    "{text}: the message shows a value: {message}"
                );
            }
        }
        let message = ReadyExpression::compile("dep.data")
            .unwrap()
            .evaluate(&secret, &me)
            .unwrap_err()
            .to_string();
        assert_eq!(message, "readyExpr gave a map, not a bool (dep.data)");
    }
}
