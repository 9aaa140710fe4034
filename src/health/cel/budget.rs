//! The budget every CEL expression runs under (`spec.healthChecks`, `dependsOn[].readyExpr`),
//! and the refusal that says which bound an expression hit.
//!
//! The cost unit is cel-go's, as the Kubernetes API server counts it for validation rules: one
//! per variable, field selection, function call and comprehension step, a tenth per character a
//! string function traverses, ten to build a list, thirty a map. The limit is the API server's
//! per-expression limit (about a tenth of a second of work). Memory is what the values the
//! expression builds take, copies included (this interpreter copies a value into every list,
//! map or loop variable it lands in). See [`super::estimate`] for how both are bounded before
//! an evaluation, and [`super::meter`] for how they are enforced during one.

use std::time::Duration;

/// Cost units one evaluation may spend (the Kubernetes API server's `PerCallLimit`).
pub const DEFAULT_COST: u64 = 1_000_000;
/// Bytes the values one evaluation builds may take together, copies included.
pub const DEFAULT_MEMORY_BYTES: u64 = 32 << 20;
/// The longest string (bytes) an expression may build.
pub const DEFAULT_STRING_BYTES: u64 = 4 << 20;
/// The most elements (or entries) a list (or map) an expression builds may hold.
pub const DEFAULT_LIST_ITEMS: u64 = 100_000;
/// Cost units the health checks of one pass may spend together, over all objects (the
/// Kubernetes API server's `RuntimeCELCostBudget` per object, about a second of work).
pub const DEFAULT_PASS_COST: u64 = 10_000_000;
/// Wall-clock time of one evaluation.
pub const DEFAULT_TIME: Duration = Duration::from_secs(1);
/// How deeply an expression may nest (calls, operators, macros): the interpreter recurses once
/// per level, on a stack of fixed size.
pub const MAX_NESTING: usize = 48;

/// The bounds of one evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CelLimits {
    /// Cost units.
    pub cost: u64,
    /// Bytes of values built, copies included.
    pub memory_bytes: u64,
    /// Bytes of one string built.
    pub string_bytes: u64,
    /// Elements of one list (entries of one map) built.
    pub list_items: u64,
    /// Wall-clock time.
    pub time: Duration,
    /// Nesting depth of the expression.
    pub nesting: usize,
}

impl Default for CelLimits {
    fn default() -> Self {
        CelLimits {
            cost: DEFAULT_COST,
            memory_bytes: DEFAULT_MEMORY_BYTES,
            string_bytes: DEFAULT_STRING_BYTES,
            list_items: DEFAULT_LIST_ITEMS,
            time: DEFAULT_TIME,
            nesting: MAX_NESTING,
        }
    }
}

/// Which bound an expression hit (or would hit): the message names it, with the figures.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// Its cost is over the limit (`estimated` before evaluation, or counted during it).
    #[error("{} cost {cost} is over the CEL cost limit of {limit}", if *.estimated { "estimated" } else { "its" })]
    Cost {
        /// The cost, estimated or counted so far.
        cost: u64,
        /// The limit.
        limit: u64,
        /// Estimated before evaluation (else counted during it).
        estimated: bool,
    },
    /// The values it builds would take more memory than allowed.
    #[error("the values it builds would take {} MiB, over the CEL memory limit of {} MiB", mib(*.bytes), mib(*.limit))]
    Memory {
        /// Bytes, estimated.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// It builds a string longer than allowed.
    #[error(
        "it builds a string of up to {bytes} bytes, over the CEL string limit of {limit} bytes"
    )]
    String {
        /// Bytes of the string (a bound, before evaluation).
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// It builds a list or map with more elements than allowed.
    #[error(
        "it builds a list or map of up to {items} elements, over the CEL list limit of {limit}"
    )]
    List {
        /// Elements (a bound, before evaluation).
        items: u64,
        /// The limit.
        limit: u64,
    },
    /// The health checks of one pass together are over their cost limit.
    #[error("the health checks of this pass would spend {cost} cost units together, over their CEL limit of {limit} per pass")]
    PassCost {
        /// Spent, with this evaluation's estimate.
        cost: u64,
        /// The limit.
        limit: u64,
    },
    /// It ran past the time limit.
    #[error("it ran past the CEL time limit of {}", humantime(*.limit))]
    Time {
        /// The limit.
        limit: Duration,
    },
    /// It nests deeper than allowed.
    #[error("it nests {depth} levels deep, over the CEL nesting limit of {limit}")]
    Nesting {
        /// Its depth.
        depth: usize,
        /// The limit.
        limit: usize,
    },
    /// It uses something whose cost cannot be bounded.
    #[error("{0} has no cost bound in this agent")]
    Unsupported(String),
}

impl BudgetError {
    /// The bound's name, for metrics and tests: cost, memory, string, list, time, nesting,
    /// unsupported.
    pub fn bound(&self) -> &'static str {
        match self {
            BudgetError::Cost { .. } => "cost",
            BudgetError::PassCost { .. } => "pass cost",
            BudgetError::Memory { .. } => "memory",
            BudgetError::String { .. } => "string",
            BudgetError::List { .. } => "list",
            BudgetError::Time { .. } => "time",
            BudgetError::Nesting { .. } => "nesting",
            BudgetError::Unsupported(_) => "unsupported",
        }
    }
}

fn mib(bytes: u64) -> String {
    let mib = bytes as f64 / f64::from(1 << 20);
    if mib >= 10.0 || mib == mib.trunc() {
        format!("{mib:.0}")
    } else {
        format!("{mib:.1}")
    }
}

fn humantime(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}ms", duration.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_bound_and_the_figures() {
        let cost = BudgetError::Cost {
            cost: 1_000_000_000_000,
            limit: DEFAULT_COST,
            estimated: true,
        };
        assert_eq!(
            cost.to_string(),
            "estimated cost 1000000000000 is over the CEL cost limit of 1000000"
        );
        let memory = BudgetError::Memory {
            bytes: 3 << 30,
            limit: DEFAULT_MEMORY_BYTES,
        };
        assert_eq!(
            memory.to_string(),
            "the values it builds would take 3072 MiB, over the CEL memory limit of 32 MiB"
        );
        let time = BudgetError::Time {
            limit: DEFAULT_TIME,
        };
        assert_eq!(time.to_string(), "it ran past the CEL time limit of 1s");
        assert_eq!(time.bound(), "time");
    }
}
