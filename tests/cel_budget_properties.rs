//! CEL under its budget, as a property: expressions generated from the grammar (nested ranges,
//! maps, filters, comprehensions, string building, list concatenation) over generated inputs,
//! some large, each either refused when compiled, refused by its estimate, stopped by its meter,
//! or evaluated to a value or an error; and every evaluation stays inside the budget's memory
//! and time, measured (the process's peak RSS, reset before each evaluation, and the clock).
//! An evaluation the estimate let through is never stopped by the meter: the estimate is an
//! upper bound.
//!
//! One test in this binary, so that the peak RSS is this evaluation's.

use std::time::{Duration, Instant};

use pallet::health::cel::{
    on_cel_stack, Bindings, BudgetError, BudgetedProgram, CelLimits, CompileError, EvalError,
};
use proptest::prelude::*;
use serde_json::{json, Value};

fn int() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        (0u32..2_000).prop_map(|n| n.to_string()),
        Just("1000000".to_string()),
        Just("size(dep.items)".to_string()),
        Just("size(dep.s)".to_string()),
    ];
    leaf.prop_recursive(2, 8, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} + {b})")),
            (inner.clone(), inner).prop_map(|(a, b)| format!("({a} * {b})")),
        ]
    })
}

fn string() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("'ab'".to_string()),
        Just("dep.s".to_string()),
        int().prop_map(|n| format!("string({n})")),
    ];
    leaf.prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} + {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a}.replace('', {b})")),
            inner.clone().prop_map(|a| format!("{a}.upperAscii()")),
            (list(), inner).prop_map(|(l, s)| format!("{l}.map(y, string(y)).join({s})")),
        ]
    })
}

fn list() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        int().prop_map(|n| format!("lists.range({n})")),
        Just("dep.items".to_string()),
        Just("[1, 2, 3]".to_string()),
        Just("dep.s.split('')".to_string()),
    ];
    leaf.prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a}.map(x, {b})")),
            (inner.clone(), int()).prop_map(|(a, n)| format!("{a}.filter(x, size([x]) < {n})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} + {b})")),
            inner.clone().prop_map(|a| format!("[{a}, {a}]")),
            (inner.clone(), int()).prop_map(|(a, n)| format!("{a}.map(x, {n})")),
            inner.prop_map(|a| format!("{a}.map(x, dep)")),
        ]
    })
}

fn expression() -> impl Strategy<Value = String> {
    prop_oneof![
        list().prop_map(|l| format!("size({l}) >= 0")),
        string().prop_map(|s| format!("size({s}) >= 0")),
        (list(), list()).prop_map(|(a, b)| format!("{a}.exists(x, {b}.all(y, y != x))")),
        (string(), string()).prop_map(|(a, b)| format!("{a}.contains({b})")),
        list(),
    ]
}

fn inputs() -> impl Strategy<Value = Value> {
    (
        prop_oneof![Just(0usize), Just(10), Just(5_000), Just(50_000)],
        prop_oneof![Just(0usize), Just(100), Just(200_000), Just(1_000_000)],
    )
        .prop_map(|(items, text)| {
            json!({
                "items": (0..items).map(|i| json!(i)).collect::<Vec<_>>(),
                "s": "x".repeat(text),
            })
        })
}

fn status(name: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Resets the peak RSS to the current RSS (Linux's `clear_refs` 5).
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

#[test]
fn every_evaluation_stays_inside_its_budget() {
    let limits = CelLimits::default();
    let measured = reset_peak();
    let outcomes = std::cell::RefCell::new(std::collections::BTreeMap::<&str, usize>::new());
    let worst_growth = std::cell::Cell::new(0u64);
    let worst_time = std::cell::Cell::new(Duration::ZERO);
    let config = ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(text in expression(), dep in inputs())| {
        let program = match BudgetedProgram::compile(&text, &["dep"], &limits) {
            Ok(program) => program,
            Err(CompileError::Budget(_)) => {
                *outcomes.borrow_mut().entry("refused when compiled").or_default() += 1;
                return Ok(());
            }
            Err(CompileError::Syntax(e)) => panic!("{text}: does not parse: {e}"),
        };
        let estimate = program.estimate(&[("dep", &dep)]);
        reset_peak();
        let before = status("VmRSS:");
        let started = Instant::now();
        let dep_ = dep.clone();
        let result = on_cel_stack(move || program.evaluate(&Bindings::new(vec![("dep", &dep_)])))
            .unwrap();
        let took = started.elapsed();
        let growth = status("VmHWM:").saturating_sub(before);
        worst_growth.set(worst_growth.get().max(growth));
        worst_time.set(worst_time.get().max(took));
        let within = estimate
            .as_ref()
            .is_ok_and(|e| e.cost <= limits.cost && e.memory <= limits.memory_bytes);
        let outcome = match &result {
            Ok(_) => "a value",
            Err(EvalError::Failed(_)) => "an error",
            Err(EvalError::Budget(BudgetError::Cost { estimated: false, .. }))
            | Err(EvalError::Budget(BudgetError::Time { .. }))
            | Err(EvalError::Budget(BudgetError::String { .. }))
            | Err(EvalError::Budget(BudgetError::List { .. }))
            | Err(EvalError::Budget(BudgetError::Memory { .. })) if within => {
                panic!("{text}: let through by its estimate {estimate:?}, stopped by the meter: {result:?}")
            }
            Err(EvalError::Budget(_)) => "refused by its estimate",
        };
        *outcomes.borrow_mut().entry(outcome).or_default() += 1;
        // Time: the limit, with a second for a loaded machine and a debug build.
        prop_assert!(took < limits.time + Duration::from_secs(1), "{text}: took {took:?}");
        // Memory: the values built (the limit), the inputs converted for the interpreter (a
        // few times their JSON), and the allocator's slack.
        let input_bytes = serde_json::to_vec(&dep).unwrap().len() as u64;
        let allowed = limits.memory_bytes + 16 * input_bytes + (64 << 20);
        prop_assert!(
            !measured || growth < allowed,
            "{text}: peak RSS grew {} MiB (allowed {} MiB)",
            growth >> 20,
            allowed >> 20
        );
    });
    let outcomes = outcomes.into_inner();
    let note = if measured {
        ""
    } else {
        " (peak RSS not resettable here)"
    };
    println!(
        "CEL budget property: {outcomes:?}; worst peak RSS growth {:.1} MiB{note}, worst time {:?}",
        worst_growth.get() as f64 / f64::from(1 << 20),
        worst_time.get()
    );
    assert!(
        outcomes.get("a value").copied().unwrap_or(0) > 0,
        "{outcomes:?}"
    );
}
