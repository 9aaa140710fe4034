//! The budget enforced while an expression runs.
//!
//! The interpreter has no hook to stop an evaluation, so the expression brings its own: before
//! it runs, its syntax tree gets calls to two functions only the agent can name (`@`-prefixed,
//! which the parser never produces from text):
//! - `@tick()` before every step of every comprehension: one cost unit, the cost limit and the
//!   time limit checked (the clock every 64 steps, as the API server checks for interruption
//!   every 100 iterations). It is the condition of a `?:` around the step's own work, so an
//!   exceeded budget stops the step before that work starts;
//! - `@charge(x)` around every list and map literal and every call that builds a string or a
//!   list: the value's size counted against the cost, memory, string and list limits, then the
//!   value passed on unchanged (not copied).
//!
//! The count lives in a thread-local [`Meter`] for the one evaluation running on the thread. Once
//! a bound is hit every later tick fails too, and the evaluation's result is discarded whatever
//! it is: an error a `||` would absorb still ends it.
//!
//! The comprehensions keep the shapes the interpreter recognises (an append to a list builds it
//! in place, `&&`/`||` steps defer errors as cel-go does): the ticks and charges go inside the
//! step's operands, never around the step.

use std::cell::RefCell;
use std::time::Instant;

use cel::common::ast::{operators, CallExpr, Expr, LiteralValue};
use cel::common::types::{CelBool, CelBytes, CelString, DYN_TYPE};
use cel::common::value::CowVal;
use cel::{DeclarationError, Env, ExecutionError, IdedExpr};

use super::budget::{BudgetError, CelLimits};
use super::estimate::VALUE_BYTES;

/// The function counting a comprehension step.
const TICK: &str = "@tick";
/// The function counting a value built.
const CHARGE: &str = "@charge";
/// Steps between two looks at the clock.
const CLOCK_EVERY: u64 = 64;

/// Functions whose result is a new string or list (besides list and map literals).
const BUILDERS: [&str; 19] = [
    operators::ADD,
    "replace",
    "split",
    "join",
    "format",
    "quote",
    "lowerAscii",
    "upperAscii",
    "trim",
    "reverse",
    "substring",
    "slice",
    "flatten",
    "distinct",
    "sort",
    "range",
    "string",
    "bytes",
    "@sortByAssociatedKeys",
];

static TRUE: CelBool = CelBool::TRUE;

/// One evaluation's count.
struct Meter {
    limits: CelLimits,
    deadline: Instant,
    cost: u64,
    memory: u64,
    steps: u64,
    exceeded: Option<BudgetError>,
}

thread_local! {
    static METER: RefCell<Option<Meter>> = const { RefCell::new(None) };
}

/// Declares `@tick` and `@charge` in `env`.
pub(super) fn declare(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(TICK, "@tick", Vec::new(), tick)?;
    env.add_overload(CHARGE, "@charge", vec![DYN_TYPE], charge)
}

/// Runs `evaluate` metered by `limits`; the bound it hit, if any, wins over its result.
pub(super) fn metered<T>(
    limits: &CelLimits,
    evaluate: impl FnOnce() -> Result<T, ExecutionError>,
) -> Result<Result<T, ExecutionError>, BudgetError> {
    let meter = Meter {
        limits: *limits,
        deadline: Instant::now() + limits.time,
        cost: 0,
        memory: 0,
        steps: 0,
        exceeded: None,
    };
    METER.with(|m| *m.borrow_mut() = Some(meter));
    let result = evaluate();
    let meter = METER.with(|m| m.borrow_mut().take());
    match meter.and_then(|m| m.exceeded) {
        Some(exceeded) => Err(exceeded),
        None => Ok(result),
    }
}

/// Counts with the thread's meter (nothing when none runs, as in a plain `Program::execute`).
fn count(f: impl FnOnce(&mut Meter) -> Result<(), BudgetError>) -> Result<(), ExecutionError> {
    METER.with(|m| {
        let mut meter = m.borrow_mut();
        let Some(meter) = meter.as_mut() else {
            return Ok(());
        };
        if let Some(exceeded) = &meter.exceeded {
            return Err(ExecutionError::function_error("budget", exceeded));
        }
        f(meter).map_err(|exceeded| {
            let error = ExecutionError::function_error("budget", &exceeded);
            meter.exceeded = Some(exceeded);
            error
        })
    })
}

impl Meter {
    fn spend(&mut self, cost: u64) -> Result<(), BudgetError> {
        self.cost = self.cost.saturating_add(cost);
        if self.cost > self.limits.cost {
            return Err(BudgetError::Cost {
                cost: self.cost,
                limit: self.limits.cost,
                estimated: false,
            });
        }
        Ok(())
    }

    fn clock(&mut self) -> Result<(), BudgetError> {
        self.steps += 1;
        if self.steps.is_multiple_of(CLOCK_EVERY) && Instant::now() > self.deadline {
            return Err(BudgetError::Time {
                limit: self.limits.time,
            });
        }
        Ok(())
    }
}

fn tick<'b, 'v>(_: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    count(|meter| {
        meter.spend(1)?;
        meter.clock()
    })?;
    Ok(CowVal::Borrowed(&TRUE))
}

fn charge<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let Some(value) = args.into_iter().next() else {
        return Err(ExecutionError::invalid_argument_count(1, 0));
    };
    let (text, items) = if let Some(s) = value.downcast_ref::<CelString>() {
        (s.inner().len() as u64, 0)
    } else if let Some(b) = value.downcast_ref::<CelBytes>() {
        (b.inner().len() as u64, 0)
    } else {
        let items = value
            .as_sizer()
            .map_or(0, |s| u64::try_from(*s.size().inner()).unwrap_or(0));
        (0, items)
    };
    count(|meter| {
        if text > meter.limits.string_bytes {
            return Err(BudgetError::String {
                bytes: text,
                limit: meter.limits.string_bytes,
            });
        }
        if items > meter.limits.list_items {
            return Err(BudgetError::List {
                items,
                limit: meter.limits.list_items,
            });
        }
        meter.memory = meter
            .memory
            .saturating_add(VALUE_BYTES + text + items * VALUE_BYTES);
        if meter.memory > meter.limits.memory_bytes {
            return Err(BudgetError::Memory {
                bytes: meter.memory,
                limit: meter.limits.memory_bytes,
            });
        }
        meter.spend(1 + text.div_ceil(10) + items)?;
        meter.clock()
    })?;
    Ok(value)
}

/// `expr` with the meter's calls added (see the module's doc).
pub(super) fn instrument(expr: &IdedExpr) -> IdedExpr {
    let mut ids = Ids(max_id(expr));
    ids.instrument(expr)
}

fn max_id(expr: &IdedExpr) -> u64 {
    super::estimate::children(expr)
        .into_iter()
        .map(max_id)
        .fold(expr.id, u64::max)
}

/// Fresh node ids, past those of the source.
struct Ids(u64);

impl Ids {
    fn node(&mut self, expr: Expr) -> IdedExpr {
        self.0 += 1;
        IdedExpr { id: self.0, expr }
    }

    fn call(&mut self, name: &str, args: Vec<IdedExpr>) -> IdedExpr {
        self.node(Expr::Call(CallExpr {
            func_name: name.to_string(),
            target: None,
            args,
        }))
    }

    /// `@tick() ? expr : otherwise`.
    fn ticked(&mut self, expr: IdedExpr, otherwise: LiteralValue) -> IdedExpr {
        let tick = self.call(TICK, Vec::new());
        let otherwise = self.node(Expr::Literal(otherwise));
        self.call(operators::CONDITIONAL, vec![tick, expr, otherwise])
    }

    fn charged(&mut self, expr: IdedExpr) -> IdedExpr {
        self.call(CHARGE, vec![expr])
    }

    fn instrument(&mut self, expr: &IdedExpr) -> IdedExpr {
        let rebuilt = match &expr.expr {
            Expr::Call(call) => {
                let rebuilt = IdedExpr {
                    id: expr.id,
                    expr: Expr::Call(CallExpr {
                        func_name: call.func_name.clone(),
                        target: call.target.as_deref().map(|t| Box::new(self.instrument(t))),
                        args: call.args.iter().map(|a| self.instrument(a)).collect(),
                    }),
                };
                if BUILDERS.contains(&call.func_name.as_str()) {
                    return self.charged(rebuilt);
                }
                rebuilt
            }
            Expr::Comprehension(c) => {
                let mut c = (**c).clone();
                c.iter_range = self.instrument(&c.iter_range);
                c.accu_init = self.instrument(&c.accu_init);
                c.result = self.instrument(&c.result);
                self.step(&mut c.loop_step, &c.accu_var);
                IdedExpr {
                    id: expr.id,
                    expr: Expr::Comprehension(Box::new(c)),
                }
            }
            Expr::List(list) => {
                let mut list = list.clone();
                list.elements = list.elements.iter().map(|e| self.instrument(e)).collect();
                let rebuilt = IdedExpr {
                    id: expr.id,
                    expr: Expr::List(list),
                };
                return self.charged(rebuilt);
            }
            Expr::Map(map) => {
                let mut map = map.clone();
                for entry in &mut map.entries {
                    if let cel::common::ast::EntryExpr::MapEntry(e) = &mut entry.expr {
                        e.key = self.instrument(&e.key);
                        e.value = self.instrument(&e.value);
                    }
                }
                let rebuilt = IdedExpr {
                    id: expr.id,
                    expr: Expr::Map(map),
                };
                return self.charged(rebuilt);
            }
            Expr::Select(select) => {
                let mut select = select.clone();
                select.operand = Box::new(self.instrument(&select.operand));
                IdedExpr {
                    id: expr.id,
                    expr: Expr::Select(select),
                }
            }
            _ => expr.clone(),
        };
        rebuilt
    }

    /// Instruments a comprehension's step in place, keeping its shape: `@result && x` (or
    /// `||`) ticks before `x`; `x ? @result + 1 : @result` before `x`; `@result + [e]` before
    /// `e`; `g ? @result + [e] : @result` before `g`. Any other step is instrumented as a whole
    /// (the estimate refuses such comprehensions anyway).
    fn step(&mut self, step: &mut IdedExpr, accu: &str) {
        let is_accu = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(n) if n == accu);
        let Expr::Call(call) = &mut step.expr else {
            *step = self.instrument(step);
            return;
        };
        let name = call.func_name.clone();
        match (name.as_str(), call.args.as_mut_slice()) {
            (operators::LOGICAL_AND | operators::LOGICAL_OR, [first, x]) if is_accu(first) => {
                let x_instrumented = self.instrument(x);
                *x = self.ticked(x_instrumented, LiteralValue::Boolean(false.into()));
            }
            (operators::ADD, [first, list]) if is_accu(first) => {
                if let Expr::List(items) = &mut list.expr {
                    for item in &mut items.elements {
                        let instrumented = self.instrument(item);
                        *item = self.ticked(instrumented, LiteralValue::Null);
                    }
                }
            }
            (operators::CONDITIONAL, [condition, then, otherwise]) if is_accu(otherwise) => {
                let instrumented = self.instrument(condition);
                *condition = self.ticked(instrumented, LiteralValue::Boolean(false.into()));
                if let Expr::Call(append) = &mut then.expr {
                    if let [first, list] = append.args.as_mut_slice() {
                        if is_accu(first) {
                            if let Expr::List(items) = &mut list.expr {
                                for item in &mut items.elements {
                                    *item = self.instrument(item);
                                }
                            }
                        }
                    }
                }
            }
            _ => *step = self.instrument(step),
        }
    }
}
