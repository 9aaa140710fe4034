//! Go `time.Time` and durations: formatting and parsing with Go layouts, `now`, `date`,
//! `toDate`, `dateModify`, `duration`, `ago`, ...

use super::*;

pub(super) const FUNCS: &[(&str, F)] = &[
    ("toDate", |a| {
        Ok(Value::from_object(
            go_time_parse(&s(&a[0]), &s(&a[1])).unwrap_or(GoTime {
                secs: ZERO_TIME,
                nanos: 0,
            }),
        ))
    }),
    ("mustToDate", |a| {
        go_time_parse(&s(&a[0]), &s(&a[1]))
            .map(Value::from_object)
            .map_err(err)
    }),
    ("dateModify", |a| {
        let t = typed_time(&a[1])?;
        Ok(Value::from_object(match go_parse_duration(&s(&a[0])) {
            Ok(ns) => add_duration(t, ns),
            Err(_) => t,
        }))
    }),
    ("mustDateModify", |a| {
        let t = typed_time(&a[1])?;
        go_parse_duration(&s(&a[0]))
            .map(|ns| Value::from_object(add_duration(t, ns)))
            .map_err(err)
    }),
    ("unixEpoch", |a| {
        Ok(Value::from(typed_time(&a[0])?.secs.to_string()))
    }),
    ("duration", |a| {
        // Sprig reads a string (seconds, base 10) or an int64; anything else is 0s.
        let seconds = match number_type(&a[0]) {
            Some(GoNumber::Int64) => a[0].as_i64().unwrap_or(0),
            _ => a[0]
                .as_str()
                .and_then(|text| text.parse::<i64>().ok())
                .unwrap_or(0),
        };
        Ok(Value::from(go_duration_string(i128::from(
            seconds.wrapping_mul(1_000_000_000),
        ))))
    }),
];

/// The time functions that read the render's clock (`now`, and what Sprig gives for a date
/// it cannot read: the current time).
pub(super) const STATE_FUNCS: &[(&str, SF)] = &[
    ("now", |state, _| Ok(Value::from_object(render_now(state)))),
    ("date", |state, a| {
        let t = sprig_date(state, &a[1]);
        Ok(Value::from(go_time_format(&t, &s(&a[0]))))
    }),
    ("dateInZone", |state, a| {
        in_zone(&s(&a[2]))?;
        let t = sprig_date(state, &a[1]);
        Ok(Value::from(go_time_format(&t, &s(&a[0]))))
    }),
    ("htmlDate", |state, a| {
        let t = sprig_date(state, &a[0]);
        Ok(Value::from(go_time_format(&t, "2006-01-02")))
    }),
    ("htmlDateInZone", |state, a| {
        in_zone(&s(&a[1]))?;
        let t = sprig_date(state, &a[0]);
        Ok(Value::from(go_time_format(&t, "2006-01-02")))
    }),
    ("ago", |state, a| {
        // time.Since against the render's clock, rounded to seconds.
        let then = sprig_date(state, &a[0]);
        let ns = since(render_now(state), then);
        let rounded = (ns + ns.signum() * 500_000_000) / 1_000_000_000 * 1_000_000_000;
        Ok(Value::from(go_duration_string(rounded)))
    }),
    ("durationRound", |state, a| {
        // Sprig reads a duration string, an int64 (nanoseconds) or a time (the time since);
        // anything else is 0.
        let ns: i128 = if let Some(t) = a[0].downcast_object_ref::<GoTime>() {
            since(render_now(state), *t)
        } else {
            match number_type(&a[0]) {
                Some(GoNumber::Int64) => i128::from(a[0].as_i64().unwrap_or(0)),
                _ => a[0]
                    .as_str()
                    .and_then(|text| go_parse_duration(text).ok())
                    .unwrap_or(0),
            }
        };
        Ok(Value::from(duration_round(ns)))
    }),
];

/// Sprig's `durationRound` of `ns` nanoseconds: the largest unit it is over, whole.
fn duration_round(ns: i128) -> String {
    let u = ns.unsigned_abs();
    const S: u128 = 1_000_000_000;
    let units: [(u128, &str); 6] = [
        (S * 3600 * 24 * 365, "y"),
        (S * 3600 * 24 * 30, "mo"),
        (S * 3600 * 24, "d"),
        (S * 3600, "h"),
        (S * 60, "m"),
        (S, "s"),
    ];
    units
        .iter()
        .find(|(n, _)| u > *n)
        .map(|(n, suffix)| format!("{}{suffix}", u / n))
        .unwrap_or_else(|| "0s".into())
}

/// Unix seconds of Go's zero time (0001-01-01 00:00:00 UTC), what toDate gives on failure.
pub(super) const ZERO_TIME: i64 = -62_135_596_800;

pub(super) fn add_duration(t: GoTime, ns: i128) -> GoTime {
    let total = i128::from(t.secs) * 1_000_000_000 + i128::from(t.nanos) + ns;
    GoTime {
        secs: i64::try_from(total.div_euclid(1_000_000_000)).unwrap_or(i64::MAX),
        nanos: u32::try_from(total.rem_euclid(1_000_000_000)).unwrap_or(0),
    }
}

/// Nanoseconds from `then` to `now` (Go's `time.Since` against the render's clock).
fn since(now: GoTime, then: GoTime) -> i128 {
    (i128::from(now.secs) - i128::from(then.secs)) * 1_000_000_000 + i128::from(now.nanos)
        - i128::from(then.nanos)
}

/// A parameter Go declares `time.Time` (`unixEpoch`, `dateModify`): anything else is
/// text/template's argument error.
fn typed_time(v: &Value) -> Result<GoTime, Error> {
    v.downcast_object_ref::<GoTime>().copied().ok_or_else(|| {
        err(format!(
            "wrong type for value; expected time.Time; got {}",
            if v.is_none() || v.is_undefined() {
                "interface {}"
            } else {
                type_of(v)
            }
        ))
    })
}

/// Sprig's reading of a date argument (`date`, `dateInZone`, `htmlDate`, `ago`): a time, or
/// Unix seconds as an `int` or `int64` (Sprig also reads an `int32`, which no template makes). Anything else (a float64 from values, a string, nil) is the current time: the
/// render's clock.
fn sprig_date(state: &State, v: &Value) -> GoTime {
    if let Some(t) = v.downcast_object_ref::<GoTime>() {
        return *t;
    }
    match number_type(v) {
        Some(GoNumber::Int | GoNumber::Int64) => GoTime {
            secs: v.as_i64().unwrap_or(0),
            nanos: 0,
        },
        _ => render_now(state),
    }
}

/// The render's clock: what `now` returns.
pub(super) fn render_now(state: &State) -> GoTime {
    match state
        .lookup("__now")
        .filter(|v| !v.is_undefined() && !v.is_none())
    {
        Some(v) => GoTime {
            secs: to_i64(&v),
            nanos: 0,
        },
        None => {
            let d = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            GoTime {
                secs: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                nanos: d.subsec_nanos(),
            }
        }
    }
}

/// Pallet renders in UTC, which is also its local zone (see README): another zone is refused.
fn in_zone(zone: &str) -> Result<(), Error> {
    if zone == "UTC" || zone == "Local" {
        return Ok(());
    }
    Err(err(crate::budget::refuse(format!(
        "unsupported construct: dateInZone with zone {zone:?} (only UTC)"
    ))))
}

/// Go's `time.ParseInLocation(layout, value, UTC)` for the layout elements `go_time_format`
/// knows. Zone abbreviations other than UTC/GMT get offset 0, as Go does for unknown ones.
pub(super) fn go_time_parse(layout: &str, value: &str) -> Result<GoTime, String> {
    let fail = |elem: &str, rest: &str| {
        format!("parsing time {value:?} as {layout:?}: cannot parse {rest:?} as {elem:?}")
    };
    let tokens: &[&str] = &[
        "January", "Monday", "2006", "-07:00", "Z07:00", "-0700", "Z0700", "Jan", "Mon", "MST",
        "002", "_2", "01", "02", "03", "04", "05", "06", "15", "PM", "pm", "-07", "1", "2", "3",
        "4", "5",
    ];
    let mut t = ParsedTime::default();
    let mut rest = value;
    let mut lay = layout;
    while !lay.is_empty() {
        if [".000", ".999", ",000", ",999"]
            .iter()
            .any(|f| lay.starts_with(f))
        {
            let (lay_adv, rest_adv) = fraction_element(lay, rest, &mut t);
            lay = &lay[lay_adv..];
            rest = &rest[rest_adv..];
            continue;
        }
        let Some(tok) = tokens.iter().find(|tk| lay.starts_with(**tk)) else {
            // Anything else in the layout is a literal the value must repeat.
            let c = lay.chars().next().unwrap_or(' ');
            if !rest.starts_with(c) {
                return Err(fail(&lay[..c.len_utf8()], rest));
            }
            lay = &lay[c.len_utf8()..];
            rest = &rest[c.len_utf8()..];
            continue;
        };
        let adv = match *tok {
            "2006" | "06" | "01" | "1" | "Jan" | "January" | "Mon" | "Monday" | "02" | "2"
            | "_2" => date_element(tok, rest, &mut t),
            "002" => {
                return Err(format!(
                    "unsupported construct: toDate layout element {tok:?}"
                ))
            }
            "15" | "03" | "3" | "04" | "4" | "05" | "5" | "PM" | "pm" => {
                clock_element(tok, rest, &lay[tok.len()..], &mut t)
            }
            _ => zone_element(tok, rest, &mut t),
        }
        .ok_or_else(|| fail(tok, rest))?;
        rest = &rest[adv..];
        lay = &lay[tok.len()..];
    }
    if !rest.is_empty() {
        return Err(format!(
            "parsing time {value:?} as {layout:?}: extra text: {rest:?}"
        ));
    }
    Ok(t.into_time())
}

/// The fields a layout's elements set while `go_time_parse` reads a value (Go's defaults
/// for the rest: January 1 of year 1, midnight, UTC).
struct ParsedTime {
    year: i64,
    month: u32,
    day: u32,
    hour: i64,
    minute: i64,
    second: i64,
    nanos: u32,
    /// Seconds east of UTC.
    offset: i64,
    /// `Some(true)` for PM, `Some(false)` for AM, `None` without a `PM` element.
    pm: Option<bool>,
}

impl Default for ParsedTime {
    fn default() -> Self {
        ParsedTime {
            year: 1,
            month: 1,
            day: 1,
            hour: 0,
            minute: 0,
            second: 0,
            nanos: 0,
            offset: 0,
            pm: None,
        }
    }
}

impl ParsedTime {
    /// The instant the fields name, with a 12-hour clock's AM/PM applied.
    fn into_time(self) -> GoTime {
        let mut h = self.hour;
        match self.pm {
            Some(true) if h < 12 => h += 12,
            Some(false) if h == 12 => h = 0,
            _ => {}
        }
        let days = days_from_civil(self.year, self.month, self.day);
        GoTime {
            secs: days * 86_400 + h * 3600 + self.minute * 60 + self.second - self.offset,
            nanos: self.nanos,
        }
    }
}

/// A fractional-seconds layout element (`.000`, `,999`, ...) of any length: skips the
/// layout's digits and reads the value's, if any. Returns how far the layout and the value
/// advance.
fn fraction_element(lay: &str, rest: &str, t: &mut ParsedTime) -> (usize, usize) {
    let lay_adv = 1 + lay[1..]
        .bytes()
        .take_while(|b| *b == b'0' || *b == b'9')
        .count();
    let mut rest_adv = 0;
    if let Some(r) = rest.strip_prefix(['.', ',']) {
        let n = r.bytes().take_while(u8::is_ascii_digit).count();
        let frac = format!("{:0<9}", &r[..n.min(9)]);
        t.nanos = frac.parse().unwrap_or(0);
        rest_adv = 1 + n;
    }
    (lay_adv, rest_adv)
}

/// A date layout element (year, month, weekday, day of month): the bytes of `rest` it
/// reads, or `None` when `rest` does not match it.
fn date_element(tok: &str, rest: &str, t: &mut ParsedTime) -> Option<usize> {
    match tok {
        "2006" => {
            let (v, n) = leading_number(rest, 4, 4)?;
            t.year = v;
            Some(n)
        }
        "06" => {
            let (v, n) = leading_number(rest, 2, 2)?;
            t.year = if v >= 69 { 1900 + v } else { 2000 + v };
            Some(n)
        }
        "01" | "1" => {
            let (v, n) = leading_number(rest, if tok == "01" { 2 } else { 1 }, 2)
                .filter(|(v, _)| (1..=12).contains(v))?;
            t.month = v as u32;
            Some(n)
        }
        "Jan" | "January" => {
            let (i, n) = leading_name(rest, &MONTHS, tok == "Jan")?;
            t.month = i as u32 + 1;
            Some(n)
        }
        "Mon" | "Monday" => {
            // The weekday is checked for a name only: the date decides the day.
            let (_, n) = leading_name(rest, &DAYS, tok == "Mon")?;
            Some(n)
        }
        "02" | "2" | "_2" => {
            let r = if tok == "_2" {
                rest.strip_prefix(' ').unwrap_or(rest)
            } else {
                rest
            };
            let skipped = rest.len() - r.len();
            let (v, n) = leading_number(r, if tok == "02" { 2 } else { 1 }, 2)
                .filter(|(v, _)| (1..=31).contains(v))?;
            t.day = v as u32;
            Some(skipped + n)
        }
        // `go_time_parse` sends only the date elements above here.
        _ => None,
    }
}

/// A clock layout element (hour, minute, second, AM/PM): the bytes of `rest` it reads, or
/// `None` when `rest` does not match it. `lay_after` is the layout after the element.
fn clock_element(tok: &str, rest: &str, lay_after: &str, t: &mut ParsedTime) -> Option<usize> {
    match tok {
        "15" | "03" | "3" => {
            let (v, n) = leading_number(rest, 1, 2).filter(|(v, _)| {
                if tok == "15" {
                    *v < 24
                } else {
                    (1..=12).contains(v)
                }
            })?;
            t.hour = v;
            Some(n)
        }
        "04" | "4" | "05" | "5" => {
            let (v, n) = leading_number(rest, if tok.len() == 2 { 2 } else { 1 }, 2)
                .filter(|(v, _)| *v < 60)?;
            if tok.ends_with('4') {
                t.minute = v;
                return Some(n);
            }
            t.second = v;
            // Go reads a fraction after the seconds even without one in the layout.
            if !lay_after.starts_with(['.', ',']) {
                if let Some(r) = rest[n..].strip_prefix('.') {
                    let k = r.bytes().take_while(u8::is_ascii_digit).count();
                    if k > 0 {
                        t.nanos = format!("{:0<9}", &r[..k.min(9)]).parse().unwrap_or(0);
                        return Some(n + 1 + k);
                    }
                }
            }
            Some(n)
        }
        "PM" | "pm" => {
            let p = rest.get(..2).map(str::to_ascii_uppercase);
            t.pm = match p.as_deref() {
                Some("PM") => Some(true),
                Some("AM") => Some(false),
                _ => return None,
            };
            Some(2)
        }
        // `go_time_parse` sends only the clock elements above here.
        _ => None,
    }
}

/// A zone layout element (`MST`, `Z07:00`, `Z0700`, `-07:00`, `-0700`, `-07`): the bytes of
/// `rest` it reads, or `None` when `rest` does not match it.
fn zone_element(tok: &str, rest: &str, t: &mut ParsedTime) -> Option<usize> {
    if tok == "MST" {
        let n = rest.bytes().take_while(u8::is_ascii_uppercase).count();
        return (n >= 3).then_some(n);
    }
    if tok.starts_with('Z') && rest.starts_with('Z') {
        return Some(1);
    }
    let sign = match rest.as_bytes().first() {
        Some(b'+') => 1,
        Some(b'-') => -1,
        _ => return None,
    };
    let body = &rest[1..];
    let (hh, mm, n) = if tok.ends_with("07:00") {
        let ok = body.len() >= 5 && body.as_bytes()[2] == b':';
        if !ok {
            return None;
        }
        (
            leading_number(body, 2, 2),
            leading_number(&body[3..], 2, 2),
            5,
        )
    } else if tok.ends_with("0700") {
        (
            leading_number(body, 2, 2),
            body.get(2..).and_then(|b| leading_number(b, 2, 2)),
            4,
        )
    } else {
        (leading_number(body, 2, 2), Some((0, 0)), 2)
    };
    let (Some((hh, _)), Some((mm, _))) = (hh, mm) else {
        return None;
    };
    t.offset = sign * (hh * 3600 + mm * 60);
    Some(1 + n)
}

/// The number `s` starts with, of `min` to `max` digits, and its length in bytes.
fn leading_number(s: &str, min: usize, max: usize) -> Option<(i64, usize)> {
    let n = s.bytes().take(max).take_while(u8::is_ascii_digit).count();
    (n >= min).then(|| s[..n].parse().ok().map(|v| (v, n)))?
}

/// The index in `list` of the name `s` starts with (any case; its first three letters when
/// `short`), and the name's length in bytes.
fn leading_name(s: &str, list: &[&str], short: bool) -> Option<(usize, usize)> {
    list.iter().enumerate().find_map(|(i, name)| {
        let name = if short { &name[..3] } else { name };
        s.get(..name.len())
            .filter(|p| p.eq_ignore_ascii_case(name))
            .map(|_| (i, name.len()))
    })
}

/// Go's `time.ParseDuration`, in nanoseconds.
pub(super) fn go_parse_duration(s: &str) -> Result<i128, String> {
    let bad = || format!("time: invalid duration {s:?}");
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let n = rest
            .bytes()
            .take_while(|b| b.is_ascii_digit() || *b == b'.')
            .count();
        if n == 0 || rest[..n] == *"." {
            return Err(bad());
        }
        let num: f64 = rest[..n].parse().map_err(|_| bad())?;
        rest = &rest[n..];
        let u = rest
            .chars()
            .take_while(|c| !c.is_ascii_digit() && *c != '.')
            .collect::<String>();
        let unit: f64 = match u.as_str() {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 6e10,
            "h" => 3.6e12,
            "" => return Err(format!("time: missing unit in duration {s:?}")),
            other => return Err(format!("time: unknown unit {other:?} in duration {s:?}")),
        };
        rest = &rest[u.len()..];
        total += num * unit;
    }
    let ns = total.round() as i128;
    Ok(if neg { -ns } else { ns })
}

/// Go's `time.Duration.String` for `ns` nanoseconds.
pub(super) fn go_duration_string(ns: i128) -> String {
    if ns == 0 {
        return "0s".into();
    }
    let neg = ns < 0;
    let u = ns.unsigned_abs();
    let frac = |v: u128, prec: u32| -> (String, u128) {
        let p = 10u128.pow(prec);
        let f = v % p;
        let text = if f == 0 {
            String::new()
        } else {
            let s = format!("{:0width$}", f, width = prec as usize);
            format!(".{}", s.trim_end_matches('0'))
        };
        (text, v / p)
    };
    let body = if u < 1_000_000_000 {
        let (unit, prec) = if u < 1_000 {
            ("ns", 0)
        } else if u < 1_000_000 {
            ("µs", 3)
        } else {
            ("ms", 6)
        };
        let (f, int) = frac(u, prec);
        format!("{int}{f}{unit}")
    } else {
        let (f, secs) = frac(u, 9);
        let (s, mins) = (secs % 60, secs / 60);
        if mins == 0 {
            format!("{s}{f}s")
        } else if mins < 60 {
            format!("{mins}m{s}{f}s")
        } else {
            format!("{}h{}m{s}{f}s", mins / 60, mins % 60)
        }
    };
    if neg {
        format!("-{body}")
    } else {
        body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_time_layouts() {
        // 2024-02-29T13:04:05.5Z, a Thursday.
        let t = GoTime {
            secs: 1_709_211_845,
            nanos: 500_000_000,
        };
        assert_eq!(
            go_time_format(&t, "2006-01-02T15:04:05Z07:00"),
            "2024-02-29T13:04:05Z"
        );
        assert_eq!(
            go_time_format(&t, "Mon Jan _2 3:04PM 06 002"),
            "Thu Feb 29 1:04PM 24 060"
        );
        assert_eq!(
            go_time_format(&t, "2006-01-02 15:04:05.999999999 -0700 MST"),
            "2024-02-29 13:04:05.5 +0000 UTC"
        );
    }
}
