//! CEL budget benchmark (figures, not a test): what the budget costs per evaluation. The same
//! health-check expressions over the same object, evaluated by the interpreter alone
//! (`Program::execute`, what the agent did before it had a budget), by a budgeted program
//! (upper-bound estimate with the object measured, then the metered evaluation), and as the
//! agent runs a pass's checks: on a thread of their own, started per batch. Side by side in one
//! run.
//!
//! `cargo bench --bench cel_budget`; `PALLET_BENCH_ROUNDS` changes the count (default 20000).

use std::sync::Arc;
use std::time::{Duration, Instant};

use pallet::health::cel::{on_cel_stack, Bindings, BudgetedProgram, CelLimits};
use serde_json::{json, Value};

const EXPRESSIONS: [(&str, &str); 3] = [
    ("field compare", "self.status.phase == 'Ready'"),
    (
        "filter + all (Flux)",
        "self.status.conditions.filter(e, e.type == 'Ready').all(e, e.observedGeneration == self.metadata.generation && e.status == 'True')",
    ),
    (
        "map + join + contains",
        "self.status.conditions.map(c, c.type).join(',').contains('Ready')",
    ),
];

fn object() -> Value {
    let conditions: Vec<Value> = ["Ready", "Progressing", "Available", "Degraded", "Synced"]
        .iter()
        .map(|t| {
            json!({"type": t, "status": "True", "observedGeneration": 3,
                        "reason": "Done", "message": "x".repeat(120),
                        "lastTransitionTime": "2026-01-01T00:00:00Z"})
        })
        .collect();
    json!({"apiVersion": "example.com/v1", "kind": "Widget",
           "metadata": {"name": "w", "namespace": "apps", "generation": 3,
                        "labels": {"app": "w"}, "annotations": {"a": "b".repeat(500)}},
           "spec": {"replicas": 3, "template": {"x": "y".repeat(2000)}},
           "status": {"phase": "Ready", "observedGeneration": 3, "conditions": conditions}})
}

fn per_call(total: Duration, rounds: u32) -> f64 {
    total.as_secs_f64() * 1e6 / f64::from(rounds)
}

fn main() {
    let rounds: u32 = std::env::var("PALLET_BENCH_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000);
    let object = Arc::new(object());
    let limits = CelLimits::default();
    println!("CEL evaluation cost, {rounds} rounds each (µs per evaluation)");
    println!(
        "{:<24} {:>12} {:>12} {:>8} {:>14}",
        "expression", "interpreter", "budgeted", "ratio", "estimate only"
    );
    for (label, text) in EXPRESSIONS {
        let mut env = cel::Env::stdlib();
        let _ = env.add_extension(cel::extensions::strings);
        let _ = env.add_extension(cel::extensions::lists);
        let env = Arc::new(env);
        let plain = env.compile(text).expect("compiles");
        let mut context = cel::Context::with_env(env.clone());
        context.add_variable_from_value("self", to_cel(&object));
        let start = Instant::now();
        for _ in 0..rounds {
            std::hint::black_box(plain.execute(&context).expect("evaluates"));
        }
        let interpreter = start.elapsed();

        let budgeted = BudgetedProgram::compile(text, &["self"], &limits).expect("compiles");
        let object_ = object.clone();
        let program = budgeted.clone();
        let (metered, estimated) = on_cel_stack(move || {
            let bindings = Bindings::new(vec![("self", &*object_)]);
            let _ = program.evaluate(&bindings); // the context is made once per object
            let start = Instant::now();
            for _ in 0..rounds {
                std::hint::black_box(program.evaluate(&bindings).expect("evaluates"));
            }
            let metered = start.elapsed();
            let start = Instant::now();
            for _ in 0..rounds {
                std::hint::black_box(program.estimate(&[("self", &*object_)]).expect("fits"));
            }
            (metered, start.elapsed())
        })
        .expect("a thread");
        println!(
            "{label:<24} {:>12.2} {:>12.2} {:>7.2}x {:>14.2}",
            per_call(interpreter, rounds),
            per_call(metered, rounds),
            metered.as_secs_f64() / interpreter.as_secs_f64(),
            per_call(estimated, rounds),
        );
    }
    // A pass's checks go to a thread of their own: what starting one costs.
    let start = Instant::now();
    let hops = rounds / 10;
    for _ in 0..hops {
        on_cel_stack(|| std::hint::black_box(1)).expect("a thread");
    }
    println!(
        "thread per batch (16 MiB stack, started and joined): {:.1} µs",
        per_call(start.elapsed(), hops)
    );
}

fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => cel::Value::Int(i),
            None => cel::Value::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => cel::Value::Map(cel::objects::Map {
            map: Arc::new(
                map.iter()
                    .map(|(k, v)| (cel::objects::Key::String(Arc::new(k.clone())), to_cel(v)))
                    .collect(),
            ),
        }),
    }
}
