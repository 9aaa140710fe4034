//! The render's budgets at the function boundary: every call is a step, a function that would
//! build a string or list past its budget is refused before it builds it (from its arguments),
//! and any other result past them is refused as it comes back.

use super::*;
use crate::budget;

/// Checks a call's arguments against the budgets before the function runs.
pub(super) type Precheck = fn(&str, &[Value]) -> Result<(), String>;

/// The check of `name`'s arguments, for functions whose output size follows from them.
pub(super) fn precheck_for(name: &str) -> Option<Precheck> {
    Some(match name {
        "repeat" => precheck_repeat,
        "indent" | "nindent" => precheck_indent,
        "until" => precheck_until,
        "untilStep" => precheck_until_step,
        "seq" => precheck_seq,
        "randAlphaNum" | "randAlpha" | "randNumeric" | "randAscii" | "randBytes" => precheck_random,
        _ => return None,
    })
}

/// A step for the call of `name` with `args`, and its precheck.
pub(super) fn before_call(
    name: &str,
    precheck: Option<Precheck>,
    args: &[Value],
) -> Result<(), Error> {
    budget::charge_steps(1).map_err(err)?;
    match precheck {
        Some(check) => check(name, args).map_err(err),
        None => Ok(()),
    }
}

/// Refuses a result of `name` larger than a string or list may be.
pub(super) fn after_call(name: &str, value: Value) -> Result<Value, Error> {
    if let Some(text) = value.as_str() {
        budget::check_string(name, text.len() as u128).map_err(err)?;
    } else if value.kind() == ValueKind::Seq {
        if let Some(items) = value.len() {
            budget::check_list(name, items as u128).map_err(err)?;
        }
    }
    Ok(value)
}

/// A step for an `include`, `template` or `tpl` call.
pub(super) fn template_call() -> Result<(), Error> {
    budget::charge_steps(1).map_err(err)
}

/// Loop iterations of a `range` over `items` items, charged when the loop starts.
pub(super) fn range_items(items: usize) -> Result<(), Error> {
    budget::charge_steps(items as u64).map_err(err)
}

fn int_arg(args: &[Value], i: usize) -> i128 {
    i128::from(to_i64(&arg(args, i)))
}

fn precheck_repeat(name: &str, args: &[Value]) -> Result<(), String> {
    let count = int_arg(args, 0).max(0);
    let bytes = s(&arg(args, 1)).len() as i128;
    budget::check_string(
        &format!("{name} {count} of a {bytes}-byte string"),
        (count * bytes) as u128,
    )
}

fn precheck_indent(name: &str, args: &[Value]) -> Result<(), String> {
    let width = int_arg(args, 0).max(0);
    let text = s(&arg(args, 1));
    let lines = text.matches('\n').count() as i128 + 1;
    budget::check_string(
        &format!("{name} {width} of {lines} lines"),
        (width * lines + text.len() as i128) as u128,
    )
}

/// How many items `until_step(start, stop, step)` yields.
fn steps_between(start: i128, stop: i128, step: i128) -> u128 {
    match (stop - start, step) {
        (span, step) if span > 0 && step > 0 => ((span + step - 1) / step) as u128,
        (span, step) if span < 0 && step < 0 => ((-span + -step - 1) / -step) as u128,
        _ => 0,
    }
}

fn precheck_until(name: &str, args: &[Value]) -> Result<(), String> {
    let n = int_arg(args, 0);
    budget::check_list(&format!("{name} {n}"), n.unsigned_abs())
}

fn precheck_until_step(name: &str, args: &[Value]) -> Result<(), String> {
    let (start, stop, step) = (int_arg(args, 0), int_arg(args, 1), int_arg(args, 2));
    budget::check_list(
        &format!("{name} {start} {stop} {step}"),
        steps_between(start, stop, step),
    )
}

fn precheck_seq(name: &str, args: &[Value]) -> Result<(), String> {
    let nums: Vec<i128> = (0..args.len()).map(|i| int_arg(args, i)).collect();
    let count = match nums.as_slice() {
        [end] => end.unsigned_abs() + 1,
        [start, end] | [start, _, end] => (end - start).unsigned_abs() + 1,
        _ => 0,
    };
    let shown: Vec<String> = nums.iter().map(i128::to_string).collect();
    budget::check_list(&format!("{name} {}", shown.join(" ")), count)
}

fn precheck_random(name: &str, args: &[Value]) -> Result<(), String> {
    let n = int_arg(args, 0).max(0);
    // randBytes returns base64: 4 bytes for every 3.
    budget::check_string(&format!("{name} {n}"), (n as u128) * 4 / 3 + 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_items_of_until_step_are_counted_without_building_them() {
        assert_eq!(steps_between(0, 10, 1), 10);
        assert_eq!(steps_between(0, 10, 3), 4);
        assert_eq!(steps_between(10, 0, -2), 5);
        assert_eq!(steps_between(0, 10, -1), 0);
        assert_eq!(steps_between(0, 3_000_000_000, 1), 3_000_000_000);
    }
}
