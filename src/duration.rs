//! Durations as pallet reads them, in one place for the whole crate: Go's notation (`90s`, `10m`,
//! `1h30m`, `1.5h`, `500ms`) in a BundleDeployment's spec, and the same or a bare number of
//! seconds on the command line.
//!
//! Every input gives a duration or an error; none panics. A BundleDeployment's author writes these
//! strings, so a value too large for a duration (`99999999999999999999h`) is an error that names
//! the longest one accepted, never an overflow: the arithmetic is on integers, checked at each
//! step, and the result is at most [`MAX`] (Go's own limit, so what `kubectl` and Flux accept for
//! such a field is what pallet accepts).

use std::time::Duration;

/// The longest duration accepted: Go's `time.Duration` limit, 2⁶³−1 ns (about 292 years).
pub const MAX: Duration = Duration::from_nanos(i64::MAX as u64);

/// Fraction digits read after the point; further ones are below a nanosecond at any unit.
const FRACTION_DIGITS: usize = 18;

/// Why a text is not a duration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not Go's notation.
    #[error("{0:?} is not a duration (examples: 90s, 10m, 1h30m)")]
    Invalid(String),
    /// Longer than [`MAX`].
    #[error("{0:?} is longer than the longest duration accepted (2562047h)")]
    TooLong(String),
}

/// Parses a Go duration (`90s`, `10m`, `1h30m`, `1.5h`, `500ms`): one or more numbers, each with
/// a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), added up.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let invalid = || DurationError::Invalid(text.to_string());
    if text.is_empty() {
        return Err(invalid());
    }
    let mut rest = text;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (whole, fraction, after) = number(rest).ok_or_else(invalid)?;
        let (unit_nanos, unit_len) = unit(after).ok_or_else(invalid)?;
        let nanos = whole
            .checked_mul(unit_nanos)
            .and_then(|n| n.checked_add(fraction_nanos(fraction, unit_nanos)))
            .and_then(|n| total.checked_add(n))
            .filter(|n| *n <= MAX.as_nanos())
            .ok_or_else(|| DurationError::TooLong(text.to_string()))?;
        total = nanos;
        rest = &after[unit_len..];
    }
    // At most MAX, which fits in a u64 of nanoseconds.
    Ok(Duration::from_nanos(total as u64))
}

/// A leading `digits[.digits]` (Go also takes `.5` and `5.`): the whole part (None when it does
/// not fit even a u128, which is longer than any duration anyway, reported as too long by the
/// caller through a saturated value), the fraction's digits, and what follows.
fn number(text: &str) -> Option<(u128, &str, &str)> {
    let whole_len = text.bytes().take_while(u8::is_ascii_digit).count();
    let (whole_text, rest) = text.split_at(whole_len);
    let (fraction, rest) = match rest.strip_prefix('.') {
        Some(after) => {
            let len = after.bytes().take_while(u8::is_ascii_digit).count();
            after.split_at(len)
        }
        None => ("", rest),
    };
    if whole_text.is_empty() && fraction.is_empty() {
        return None;
    }
    // Too many digits for a u128: saturate, so that the caller reports it as too long.
    let whole = if whole_text.is_empty() {
        0
    } else {
        whole_text.parse::<u128>().unwrap_or(u128::MAX)
    };
    Some((whole, fraction, rest))
}

/// The unit at the start of `text`: its length in nanoseconds and in bytes. The longest unit
/// that matches wins (`ms` before `m`).
fn unit(text: &str) -> Option<(u128, usize)> {
    const UNITS: [(&str, u128); 7] = [
        ("ns", 1),
        ("us", 1_000),
        ("µs", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
    ];
    UNITS
        .into_iter()
        .filter(|(unit, _)| text.starts_with(unit))
        .max_by_key(|(unit, _)| unit.len())
        .map(|(unit, nanos)| (nanos, unit.len()))
}

/// The nanoseconds of `.digits` of a unit of `unit_nanos` (truncated, as Go does).
fn fraction_nanos(digits: &str, unit_nanos: u128) -> u128 {
    let digits = &digits[..digits.len().min(FRACTION_DIGITS)];
    if digits.is_empty() {
        return 0;
    }
    // Both below 10^18 and 3.6·10^12: the product fits a u128 with room to spare.
    let value: u128 = digits.parse().unwrap_or(0);
    value * unit_nanos / 10u128.pow(digits.len() as u32)
}

/// A time given on the command line: a Go duration (`90s`, `5m`, `1h30m`) or a bare number of
/// seconds (`300`).
pub fn parse_arg(text: &str) -> Result<Duration, String> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<u64>()
            .ok()
            .map(Duration::from_secs)
            .filter(|d| *d <= MAX)
            .ok_or_else(|| DurationError::TooLong(text.to_string()).to_string());
    }
    parse(text).map_err(|error| match error {
        DurationError::Invalid(_) => format!(
            "{text:?} is not a duration (examples: 90s, 5m, 1h30m; a bare number is seconds)"
        ),
        too_long => too_long.to_string(),
    })
}

/// A command-line duration that must be more than zero.
pub fn parse_positive_arg(text: &str) -> Result<Duration, String> {
    match parse_arg(text)? {
        d if d.is_zero() => Err("the duration must be positive".into()),
        d => Ok(d),
    }
}

/// A command-line duration of whole seconds, at least one: a Go duration (`15s`, `1m`) or a
/// bare number of seconds (`15`).
pub fn parse_whole_seconds_arg(text: &str) -> Result<Duration, String> {
    let duration = parse_arg(text)?;
    if duration.subsec_nanos() != 0 {
        return Err(format!("{text:?} is not whole seconds like 15s"));
    }
    match duration.as_secs() {
        0 => Err("must be at least 1s".into()),
        _ => Ok(duration),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn secs(text: &str) -> Result<f64, DurationError> {
        parse(text).map(|d| d.as_secs_f64())
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(secs("90s"), Ok(90.0));
        assert_eq!(secs("10m"), Ok(600.0));
        assert_eq!(secs("1h30m"), Ok(5400.0));
        assert_eq!(secs("1.5h"), Ok(5400.0));
        assert_eq!(secs("500ms"), Ok(0.5));
        assert_eq!(parse("1us"), Ok(Duration::from_micros(1)));
        assert_eq!(parse("1µs"), Ok(Duration::from_micros(1)));
        assert_eq!(parse("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse("1m0.5s"), Ok(Duration::from_millis(60_500)));
        assert_eq!(parse("0.000000001s"), Ok(Duration::from_nanos(1)));
        // Below a nanosecond: truncated, as Go does.
        assert_eq!(parse("0.1ns"), Ok(Duration::ZERO));
    }

    #[test]
    fn what_is_not_a_duration_is_an_error() {
        for text in [
            "", "10", "5d", "s", ".s", "1.2.3s", "-5s", "+5s", "1 h", "h1", "1hh", "1e3s", "NaNs",
            "infh", "1_000s", "５s",
        ] {
            assert!(
                matches!(parse(text), Err(DurationError::Invalid(_))),
                "{text:?}: {:?}",
                parse(text)
            );
        }
    }

    #[test]
    fn hostile_lengths_are_errors_not_panics() {
        for text in [
            "99999999999999999999h",
            "2562048h",
            "9223372036.854775808s",
            "1000000000000000000000000000000000000000000000000000000000000000000000000000000000h",
            "2562047h2562047h",
            "9223372036854775807ns1ns",
        ] {
            assert_eq!(
                parse(text),
                Err(DurationError::TooLong(text.to_string())),
                "{text:?}"
            );
        }
        // The limit itself is accepted, written either way.
        assert_eq!(parse("9223372036854775807ns"), Ok(MAX));
        assert_eq!(parse("2562047h47m16.854775807s"), Ok(MAX));
        // A fraction far longer than a nanosecond's digits.
        let long_fraction = format!("1.{}s", "9".repeat(10_000));
        assert_eq!(
            parse(&long_fraction),
            Ok(Duration::from_nanos(1_999_999_999))
        );
        assert!(parse_arg("99999999999999999999").is_err());
        assert!(parse_arg("18446744073709551615").is_err());
        assert_eq!(parse_arg("300"), Ok(Duration::from_secs(300)));
    }

    #[test]
    fn command_line_forms() {
        assert_eq!(parse_arg("5m"), Ok(Duration::from_secs(300)));
        assert!(parse_arg("5 minutes")
            .unwrap_err()
            .contains("a bare number is seconds"));
        assert_eq!(
            parse_positive_arg("0s"),
            Err("the duration must be positive".into())
        );
        assert_eq!(parse_whole_seconds_arg("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_whole_seconds_arg("4"), Ok(Duration::from_secs(4)));
        assert_eq!(parse_whole_seconds_arg("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_whole_seconds_arg("0s").is_err());
        assert!(parse_whole_seconds_arg("0").is_err());
        assert!(parse_whole_seconds_arg("1500ms").is_err());
    }

    proptest! {
        /// Any text at all: a duration or an error, never a panic, never past the limit.
        #[test]
        fn any_text_parses_or_is_refused(text in "\\PC{0,40}") {
            if let Ok(duration) = parse(&text) {
                prop_assert!(duration <= MAX);
            }
            let _ = parse_arg(&text);
        }

        /// Texts shaped like durations, with numbers of any length and every unit.
        #[test]
        fn duration_shaped_texts_never_panic(
            parts in proptest::collection::vec(
                ("[0-9]{0,30}", proptest::option::of("[0-9]{0,30}"), "(ns|us|µs|ms|s|m|h|x|)"),
                0..6,
            )
        ) {
            let text: String = parts
                .iter()
                .map(|(whole, fraction, unit)| match fraction {
                    Some(f) => format!("{whole}.{f}{unit}"),
                    None => format!("{whole}{unit}"),
                })
                .collect();
            match parse(&text) {
                Ok(duration) => prop_assert!(duration <= MAX),
                Err(DurationError::Invalid(t) | DurationError::TooLong(t)) => prop_assert_eq!(t, text),
            }
        }

        /// Whole seconds written in Go's notation come back exactly.
        #[test]
        fn seconds_round_trip(n in 0u64..=9_223_372_036) {
            prop_assert_eq!(parse(&format!("{n}s")), Ok(Duration::from_secs(n)));
        }
    }
}
