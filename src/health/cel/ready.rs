//! CEL `readyExpr` of `spec.dependsOn` (Flux's shape): a boolean expression over the dependency
//! (`dep`) and the dependent BundleDeployment (`self`), in the environment of the CEL health
//! checks (strings and lists extensions, optional values).

use serde_json::Value;

use super::{env, one_line, to_cel};

/// A compiled `readyExpr`.
pub struct ReadyExpression {
    text: String,
    program: cel::Program,
}

impl std::fmt::Debug for ReadyExpression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ReadyExpression").field(&self.text).finish()
    }
}

impl ReadyExpression {
    /// Compiles `text`; the error is one line, fit for a condition message.
    pub fn compile(text: &str) -> Result<ReadyExpression, String> {
        env()
            .compile(text)
            .map(|program| ReadyExpression {
                text: text.to_string(),
                program,
            })
            .map_err(|e| format!("readyExpr does not compile: {}", one_line(&e.to_string())))
    }

    /// Whether the expression is true for dependency `dep` and dependent `dependent`; an
    /// expression that errors on them (a missing field) or gives no bool says why, and counts
    /// as not ready: never ready by accident.
    pub fn evaluate(&self, dep: &Value, dependent: &Value) -> Result<bool, String> {
        let mut context = cel::Context::with_env(env());
        context.add_variable_from_value("dep", to_cel(dep));
        context.add_variable_from_value("self", to_cel(dependent));
        match self.program.execute(&context) {
            Ok(cel::Value::Bool(ready)) => Ok(ready),
            Ok(other) => Err(format!(
                "readyExpr gave {other:?}, not a bool ({})",
                self.text
            )),
            Err(error) => Err(format!(
                "readyExpr could not be evaluated: {error} ({})",
                self.text
            )),
        }
    }

    /// The expression's text.
    pub fn text(&self) -> &str {
        &self.text
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
            .unwrap_err();
        assert!(missing.contains("could not be evaluated"), "{missing}");
        let not_bool = ReadyExpression::compile("dep.kind").unwrap();
        assert!(not_bool
            .evaluate(&dep, &me)
            .unwrap_err()
            .contains("not a bool"));
        assert!(ReadyExpression::compile("dep.data[")
            .unwrap_err()
            .contains("does not compile"));
    }
}
