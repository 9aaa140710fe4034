//! Budgets of one render: how deep a template may nest, how many steps it may take, how much
//! text and how large a string or list it may build. Content comes from third parties; going
//! over a budget is an error naming the budget, the value and the template or file, never a
//! crash or a render that runs for hours.
//!
//! The helm engine runs its templates on the calling thread (nested `include` and `tpl` too), so
//! the counters of the render in progress live in a thread-local [`Meter`], installed by
//! [`Meter::install`] for the length of a render. A function that finds a budget exceeded
//! records the [`BudgetBreach`] there before failing; the render's caller takes it back with
//! [`take_breach`] to report it as [`crate::RenderError::BudgetExceeded`], whatever the engine
//! made of the error on its way out.

use std::cell::{Cell, RefCell};
use std::fmt;

/// Nesting of control structures (`if`, `with`, `range`, `define`) and parenthesised
/// pipelines in one template. Real charts stay under 20; the translated template must also
/// stay within the template engine's own parser limit.
pub const MAX_TEMPLATE_NESTING: usize = 40;

/// Nesting of `include`, `template` and `tpl` calls (each is a render within a render).
pub const MAX_TEMPLATE_CALL_DEPTH: i64 = 64;

/// Nesting of maps and lists in values (values.yaml, values files, `fromYaml`, `fromJson`,
/// `fromToml`), as the YAML reader counts it; also in values a template builds, which every
/// walk over a value (serialising, printing, comparing, copying, merging) is held to.
pub const MAX_VALUES_DEPTH: usize = 64;

/// Items of a list a template function builds (`until`, `untilStep`, `seq`, `append`, ...).
pub const MAX_LIST_ITEMS: usize = 1_000_000;

/// Limits of one render that the agent's operator may set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RenderBudgets {
    /// Bytes of rendered text (every template's output together), which is also the largest
    /// string a template function may build.
    pub output_bytes: usize,
    /// Steps: template function calls, loop iterations and template calls together.
    pub steps: u64,
}

/// 32 MiB of output: the largest chart of the real-world corpus (kube-prometheus-stack) renders
/// about 5 MB; the text, the engine's own data and the objects read from the text must fit the
/// agent's render memory (256 MiB by default).
pub const DEFAULT_OUTPUT_BYTES: usize = 32 << 20;

/// A million steps: the chart of the real-world corpus that takes most (kube-prometheus-stack)
/// takes under 9,000; a million empty loop iterations are a fraction of a second.
pub const DEFAULT_STEPS: u64 = 1_000_000;

impl Default for RenderBudgets {
    fn default() -> Self {
        RenderBudgets {
            output_bytes: DEFAULT_OUTPUT_BYTES,
            steps: DEFAULT_STEPS,
        }
    }
}

/// A budget that a render went over: which, its limit and what the content asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetBreach {
    /// The budget, in words (`template nesting depth`, `render steps`, ...).
    pub budget: &'static str,
    /// Its limit.
    pub limit: u64,
    /// What the content asked for or reached (`repeat 3000000000 × 1 bytes`, `65`).
    pub value: String,
}

impl BudgetBreach {
    /// A breach of `budget` (limit `limit`) by `value`.
    pub fn new(budget: &'static str, limit: u64, value: impl Into<String>) -> Self {
        BudgetBreach {
            budget,
            limit,
            value: value.into(),
        }
    }
}

impl fmt::Display for BudgetBreach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "render budget exceeded: {} {} is over the limit of {}",
            self.budget, self.value, self.limit
        )
    }
}

thread_local! {
    static REFUSAL: RefCell<Option<String>> = const { RefCell::new(None) };
    static FAILURES: Cell<u64> = const { Cell::new(0) };
    static LAST_FAILURE: RefCell<String> = const { RefCell::new(String::new()) };
    static BUDGETS: Cell<RenderBudgets> = Cell::new(RenderBudgets::default());
    static STEPS_LEFT: Cell<u64> = const { Cell::new(DEFAULT_STEPS) };
    static OUTPUT_LEFT: Cell<usize> = const { Cell::new(DEFAULT_OUTPUT_BYTES) };
    static BREACH: RefCell<Option<BudgetBreach>> = const { RefCell::new(None) };
    static LAST_STEPS: Cell<u64> = const { Cell::new(0) };
}

/// The budgets of the render in progress on this thread, while it holds one.
pub struct Meter {
    previous: RenderBudgets,
}

impl Meter {
    /// Starts metering a render on this thread with `budgets`; the previous budgets come back
    /// when the returned meter is dropped.
    pub fn install(budgets: RenderBudgets) -> Meter {
        let previous = BUDGETS.with(|b| b.replace(budgets));
        STEPS_LEFT.with(|s| s.set(budgets.steps));
        OUTPUT_LEFT.with(|o| o.set(budgets.output_bytes));
        BREACH.with(|b| b.borrow_mut().take());
        REFUSAL.with(|r| r.borrow_mut().take());
        Meter { previous }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        LAST_STEPS.with(|last| last.set(steps_in_progress()));
        BUDGETS.with(|b| b.set(self.previous));
        STEPS_LEFT.with(|s| s.set(self.previous.steps));
        OUTPUT_LEFT.with(|o| o.set(self.previous.output_bytes));
    }
}

/// The budgets in force on this thread.
pub fn budgets() -> RenderBudgets {
    BUDGETS.with(Cell::get)
}

/// Records `breach` as the reason the render in progress fails, and returns its message for
/// the engine's error. The first breach is kept: later ones are consequences of it.
pub fn breach(breach: BudgetBreach) -> String {
    let message = breach.to_string();
    BREACH.with(|b| {
        let mut kept = b.borrow_mut();
        if kept.is_none() {
            *kept = Some(breach);
        }
    });
    failed(&message);
    message
}

/// Records that the render in progress meets content pallet cannot render as helm does (an
/// unsupported construct), and returns the message for the engine's error. Like a breach, it
/// fails the render even when a template function would turn the error into a value
/// (`fromJson`'s `Error`, `regexMatch`'s false): see [`failures`]. The first one is kept.
pub fn refuse(message: impl Into<String>) -> String {
    let message = message.into();
    REFUSAL.with(|r| {
        let mut kept = r.borrow_mut();
        if kept.is_none() {
            *kept = Some(message.clone());
        }
    });
    failed(&message);
    message
}

fn failed(message: &str) {
    FAILURES.with(|n| n.set(n.get() + 1));
    LAST_FAILURE.with(|last| message.clone_into(&mut last.borrow_mut()));
}

/// How many breaches and refusals this thread has recorded so far. A caller that sees the count
/// change across a call knows the call met one, whatever the call returned.
pub fn failures() -> u64 {
    FAILURES.with(Cell::get)
}

/// The message of the last breach or refusal recorded on this thread.
pub fn last_failure() -> String {
    LAST_FAILURE.with(|last| last.borrow().clone())
}

/// The refusal recorded by the render that just ran on this thread (cleared).
pub fn take_refusal() -> Option<String> {
    REFUSAL.with(|r| r.borrow_mut().take())
}

/// The breach recorded by the render that just failed on this thread, if it failed over a
/// budget (cleared: the next render starts without one).
pub fn take_breach() -> Option<BudgetBreach> {
    BREACH.with(|b| b.borrow_mut().take())
}

/// Steps taken by the last metered render on this thread.
pub fn steps_used() -> u64 {
    LAST_STEPS.with(Cell::get)
}

fn steps_in_progress() -> u64 {
    budgets().steps.saturating_sub(STEPS_LEFT.with(Cell::get))
}

/// Charges `n` steps to the render in progress.
pub fn charge_steps(n: u64) -> Result<(), String> {
    STEPS_LEFT.with(|left| match left.get().checked_sub(n) {
        Some(rest) => {
            left.set(rest);
            Ok(())
        }
        None => {
            left.set(0);
            let limit = budgets().steps;
            Err(breach(BudgetBreach::new(
                "render steps (function calls, loop iterations and template calls)",
                limit,
                format!("{}+", limit.saturating_add(1)),
            )))
        }
    })
}

/// Charges `bytes` of rendered output to the render in progress.
pub fn charge_output(bytes: usize) -> Result<(), String> {
    OUTPUT_LEFT.with(|left| match left.get().checked_sub(bytes) {
        Some(rest) => {
            left.set(rest);
            Ok(())
        }
        None => {
            let limit = budgets().output_bytes;
            let used = limit - left.get();
            left.set(0);
            Err(breach(BudgetBreach::new(
                "rendered output (bytes)",
                limit as u64,
                format!("{}+", used.saturating_add(bytes)),
            )))
        }
    })
}

/// Refuses a string of `bytes` bytes that `what` (a function, with its arguments) would build,
/// before it is built.
pub fn check_string(what: &str, bytes: u128) -> Result<(), String> {
    let limit = budgets().output_bytes as u128;
    if bytes > limit {
        return Err(breach(BudgetBreach::new(
            "string size (bytes)",
            limit as u64,
            format!("{bytes} (from {what})"),
        )));
    }
    Ok(())
}

/// Refuses a list of `items` items that `what` (a function, with its arguments) would build,
/// before it is built.
pub fn check_list(what: &str, items: u128) -> Result<(), String> {
    if items > MAX_LIST_ITEMS as u128 {
        return Err(breach(BudgetBreach::new(
            "list size (items)",
            MAX_LIST_ITEMS as u64,
            format!("{items} (from {what})"),
        )));
    }
    Ok(())
}

/// A writer that takes at most the output budget left, charging every byte to the render
/// in progress; past it, writing fails (and the breach is recorded).
pub struct MeteredWriter<W> {
    inner: W,
}

impl<W> MeteredWriter<W> {
    /// Meters writes to `inner`.
    pub fn new(inner: W) -> Self {
        MeteredWriter { inner }
    }

    /// The writer inside.
    pub fn into_inner(self) -> W {
        self.inner
    }
}

impl<W: std::io::Write> std::io::Write for MeteredWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        charge_output(buf.len()).map_err(std::io::Error::other)?;
        self.inner.write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A string being built by a nested render (`include`, `tpl`), refused past the largest string
/// a render may build. Not charged to the output: the caller's output is, when written.
pub struct StringWriter {
    text: Vec<u8>,
    what: String,
}

impl StringWriter {
    /// A string built by `what` (`include "name"`).
    pub fn new(what: impl Into<String>) -> Self {
        StringWriter {
            text: Vec::new(),
            what: what.into(),
        }
    }

    /// The bytes written.
    pub fn into_bytes(self) -> Vec<u8> {
        self.text
    }
}

impl std::io::Write for StringWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        check_string(&self.what, (self.text.len() + buf.len()) as u128)
            .map_err(std::io::Error::other)?;
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_run_out_and_the_breach_is_kept_until_taken() {
        let _meter = Meter::install(RenderBudgets {
            output_bytes: 10,
            steps: 5,
        });
        assert!(charge_steps(5).is_ok());
        let message = charge_steps(1).unwrap_err();
        assert!(message.contains("render steps"), "{message}");
        assert!(message.contains("limit of 5"), "{message}");
        // A later breach does not replace the first.
        assert!(charge_output(11).is_err());
        let breach = take_breach().unwrap();
        assert_eq!(breach.limit, 5);
        assert!(breach.budget.starts_with("render steps"));
        assert!(take_breach().is_none());
    }

    #[test]
    fn output_is_charged_across_writes() {
        use std::io::Write as _;
        let _meter = Meter::install(RenderBudgets {
            output_bytes: 8,
            steps: 5,
        });
        let mut w = MeteredWriter::new(Vec::new());
        w.write_all(b"12345").unwrap();
        assert!(w.write_all(b"6789").is_err());
        let breach = take_breach().unwrap();
        assert_eq!(breach.budget, "rendered output (bytes)");
        assert_eq!(breach.value, "9+");
    }

    #[test]
    fn a_meter_restores_the_budgets_before_it() {
        let outer = budgets();
        {
            let _meter = Meter::install(RenderBudgets {
                output_bytes: 1,
                steps: 1,
            });
            assert_eq!(budgets().steps, 1);
            assert!(check_string("repeat 2 \"x\"", 2).is_err());
            take_breach();
        }
        assert_eq!(budgets(), outer);
        assert!(check_list("until 2000000", 2_000_000).is_err());
        assert!(check_list("until 10", 10).is_ok());
        take_breach();
    }
}
