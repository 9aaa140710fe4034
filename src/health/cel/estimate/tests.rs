use serde_json::json;

use super::super::{Bindings, BudgetedProgram, CompileError, EvalError};
use super::*;

const BOMB: &str = "lists.range(1000000).map(i, lists.range(1000000)).size() > 0";

fn compile(text: &str) -> Result<BudgetedProgram, CompileError> {
    BudgetedProgram::compile(text, &["dep", "self"], &CelLimits::default())
}

fn evaluate(text: &str, dep: &Value) -> Result<cel::Value, EvalError> {
    let me = json!({"metadata": {"name": "app"}});
    compile(text)
        .unwrap()
        .evaluate(&Bindings::new(vec![("dep", dep), ("self", &me)]))
}

fn budget(result: Result<cel::Value, EvalError>) -> BudgetError {
    match result {
        Err(EvalError::Budget(error)) => error,
        other => panic!("not refused for its budget: {other:?}"),
    }
}

#[test]
fn the_range_bomb_is_refused_when_compiled() {
    let Err(CompileError::Budget(error)) = compile(BOMB) else {
        panic!("the bomb compiled");
    };
    assert_eq!(
        error.to_string(),
        "it builds a list or map of up to 1000000 elements, over the CEL list limit of 100000"
    );
    // With lists that long allowed, its cost is what refuses it.
    let long_lists = CelLimits {
        list_items: u64::MAX,
        ..CelLimits::default()
    };
    let Err(CompileError::Budget(error)) =
        BudgetedProgram::compile(BOMB, &["dep", "self"], &long_lists)
    else {
        panic!("the bomb compiled");
    };
    assert!(
        matches!(error, BudgetError::Cost { cost, estimated: true, .. } if cost > 1_000_000_000_000),
        "{error}"
    );
    // Smaller bombs, each over one bound whatever the inputs.
    for (text, bound) in [
        (
            "lists.range(2000).map(i, lists.range(2000)).size() > 0",
            "cost",
        ),
        ("lists.range(200000).size() > 0", "list"),
        ("lists.range(100000).map(y, 'b').join().size() > 0", "cost"),
        (
            "lists.range(1000).map(i, lists.range(1000).map(j, 'x')).size() > 0",
            "cost",
        ),
        ("Foo{a: 1} == 1", "unsupported"),
    ] {
        match compile(text) {
            Err(CompileError::Budget(error)) => assert_eq!(error.bound(), bound, "{text}: {error}"),
            Err(other) => panic!("{text}: {other:?}"),
            Ok(_) => panic!("{text}: compiled"),
        }
    }
}

#[test]
fn expressions_over_their_inputs_are_bounded_by_the_inputs() {
    // Fine at admission (the inputs are unknown), bounded once they are known.
    let quadratic = "dep.data.all(k, dep.data.all(j, dep.data[j] != dep.data[k] || j == k))";
    assert!(compile(quadratic).is_ok());
    let small = json!({"data": {"a": "1", "b": "2"}});
    assert_eq!(evaluate(quadratic, &small), Ok(cel::Value::Bool(true)));
    let keys: serde_json::Map<String, Value> = (0..2000)
        .map(|i| (format!("k{i}"), json!(i.to_string())))
        .collect();
    let large = json!({ "data": keys });
    let error = budget(evaluate(quadratic, &large));
    assert!(
        matches!(
            error,
            BudgetError::Cost {
                estimated: true,
                ..
            }
        ),
        "{error}"
    );
    // A string a few replacements make huge.
    let text = json!({"data": {"a": "x".repeat(100_000)}});
    let error = budget(evaluate(
        "dep.data.a.replace('', dep.data.a).size() > 0",
        &text,
    ));
    assert_eq!(error.bound(), "string", "{error}");
    // Copies count: a big value copied into a list at every step of a loop.
    let big = json!({"data": {"a": "x".repeat(1_000_000)}});
    let error = budget(evaluate(
        "lists.range(100).map(i, dep.data).size() == 100",
        &big,
    ));
    assert_eq!(error.bound(), "memory", "{error}");
}

#[test]
fn common_expressions_cost_little() {
    let dep = json!({
        "metadata": {"name": "db", "generation": 3},
        "status": {"observedGeneration": 3, "conditions": [
            {"type": "Ready", "status": "True", "observedGeneration": 3},
            {"type": "Progressing", "status": "False", "observedGeneration": 3}]},
    });
    let me = json!({"metadata": {"name": "app"}});
    for text in [
        "dep.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')",
        "dep.status.conditions.filter(e, e.type == 'Ready').all(e, e.observedGeneration == dep.metadata.generation)",
        "dep.status.?phase.orValue('') == '' && dep.metadata.name.startsWith('d')",
        "dep.status.conditions.map(c, c.type).join(',').contains('Ready')",
        "size(dep.status.conditions) > 1 && self.metadata.name in ['app', 'web']",
    ] {
        let program = compile(text).unwrap();
        let bindings = [("dep", &dep), ("self", &me)];
        let estimate = program.estimate(&bindings).unwrap();
        assert!(
            estimate.cost < 500 && estimate.memory < 64 << 10,
            "{text}: {estimate:?}"
        );
        assert_eq!(
            program.evaluate(&Bindings::new(bindings.to_vec())),
            Ok(cel::Value::Bool(true)),
            "{text}"
        );
    }
}

#[test]
fn nesting_is_bounded_and_fits_a_blocking_thread_stack() {
    let limits = CelLimits::default();
    let nested = |depth: usize| format!("{}1{} == 1", "[".repeat(depth), "][0]".repeat(depth));
    let Err(CompileError::Budget(error)) = compile(&nested(60)) else {
        panic!("60 levels compiled");
    };
    assert_eq!(error.bound(), "nesting", "{error}");
    // The deepest expression allowed, with its meter's calls, compiled and evaluated on the
    // stack of the threads that do so (in a debug build, whose frames are the largest).
    let mut text = String::from("true");
    let mut nesting = 1;
    while nesting + 6 <= limits.nesting {
        text = format!("[{text}].exists(x, x)");
        nesting = super::super::on_cel_stack(|| {
            depth(&super::super::env().parser().parse(&text).unwrap())
        })
        .unwrap();
    }
    let program = compile(&text).unwrap();
    let result = super::super::on_cel_stack(move || {
        let dep = json!({});
        let me = json!({});
        program.evaluate(&Bindings::new(vec![("dep", &dep), ("self", &me)]))
    })
    .unwrap();
    assert_eq!(result, Ok(cel::Value::Bool(true)));
    // A long chain of operators parses to a deep tree: refused, without recursing through it.
    let chain = vec!["1"; 2000].join(" + ");
    let Err(CompileError::Budget(error)) = compile(&format!("{chain} > 0")) else {
        panic!("a chain of 2000 additions compiled");
    };
    assert_eq!(error.bound(), "nesting", "{error}");
}

#[test]
fn the_meter_stops_what_the_estimate_lets_through() {
    // A budget far under what the expression needs, enforced by the meter alone.
    let limits = CelLimits {
        cost: 1_000,
        ..CelLimits::default()
    };
    let program = BudgetedProgram::compile(
        "lists.range(100).all(i, lists.range(100).all(j, j >= 0))",
        &[],
        &limits,
    )
    .unwrap();
    let error = program
        .evaluate_metered_only(&Bindings::new(Vec::new()))
        .unwrap_err();
    assert!(
        matches!(
            error,
            EvalError::Budget(BudgetError::Cost {
                estimated: false,
                ..
            })
        ),
        "{error:?}"
    );
    // An exceeded budget wins over a result a `||` would make of the error.
    let program = BudgetedProgram::compile(
        "lists.range(100).all(i, lists.range(100).all(j, j >= 0)) || true",
        &[],
        &limits,
    )
    .unwrap();
    assert!(matches!(
        program.evaluate_metered_only(&Bindings::new(Vec::new())),
        Err(EvalError::Budget(_))
    ));
    let time = CelLimits {
        time: std::time::Duration::ZERO,
        ..CelLimits::default()
    };
    let program = BudgetedProgram::compile("lists.range(1000).all(i, i >= 0)", &[], &time).unwrap();
    assert!(matches!(
        program.evaluate_metered_only(&Bindings::new(Vec::new())),
        Err(EvalError::Budget(BudgetError::Time { .. }))
    ));
}
