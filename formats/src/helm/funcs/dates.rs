//! Go `time.Time` and durations: formatting and parsing with Go layouts, `now`, `date`,
//! `toDate`, `dateModify`, `duration`, `ago`, ...

use super::*;

pub(super) const FUNCS: &[(&str, F)] = &[
    ("duration", |a| {
        Ok(Value::from(go_duration_string(sprig_duration_ns(
            &a[0], "duration", true,
        )?)))
    }),
    ("durationRound", |a| {
        let u = sprig_duration_ns(&a[0], "durationRound", false)?.unsigned_abs();
        const S: u128 = 1_000_000_000;
        let units: [(u128, &str); 6] = [
            (S * 3600 * 24 * 365, "y"),
            (S * 3600 * 24 * 30, "mo"),
            (S * 3600 * 24, "d"),
            (S * 3600, "h"),
            (S * 60, "m"),
            (S, "s"),
        ];
        Ok(Value::from(
            units
                .iter()
                .find(|(n, _)| u > *n)
                .map(|(n, suffix)| format!("{}{suffix}", u / n))
                .unwrap_or_else(|| "0s".into()),
        ))
    }),
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
        let t = as_time(&a[1])?;
        Ok(Value::from_object(match go_parse_duration(&s(&a[0])) {
            Ok(ns) => add_duration(t, ns),
            Err(_) => t,
        }))
    }),
    ("mustDateModify", |a| {
        let t = as_time(&a[1])?;
        go_parse_duration(&s(&a[0]))
            .map(|ns| Value::from_object(add_duration(t, ns)))
            .map_err(err)
    }),
];

/// Unix seconds of Go's zero time (0001-01-01 00:00:00 UTC), what toDate gives on failure.
pub(super) const ZERO_TIME: i64 = -62_135_596_800;

pub(super) fn add_duration(t: GoTime, ns: i128) -> GoTime {
    let total = i128::from(t.secs) * 1_000_000_000 + i128::from(t.nanos) + ns;
    GoTime {
        secs: i64::try_from(total.div_euclid(1_000_000_000)).unwrap_or(i64::MAX),
        nanos: u32::try_from(total.rem_euclid(1_000_000_000)).unwrap_or(0),
    }
}

/// A Go `time.Time` (UTC only), as returned by `now`.
#[derive(Debug, Clone, Copy)]
pub struct GoTime {
    /// Seconds since the Unix epoch.
    pub secs: i64,
    /// Nanoseconds within the second.
    pub nanos: u32,
}

impl Object for GoTime {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }
    fn render(self: &Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&go_time_format(
            self,
            "2006-01-02 15:04:05.999999999 -0700 MST",
        ))
    }
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar.
pub(super) fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

pub(super) const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
pub(super) const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// Go's `Time.Format` for a UTC time (the layout tokens charts use).
pub fn go_time_format(t: &GoTime, layout: &str) -> String {
    let days = t.secs.div_euclid(86_400);
    let sod = t.secs.rem_euclid(86_400);
    let (y, mo, d) = civil(days);
    let (h, mi, se) = (sod / 3600, (sod / 60) % 60, sod % 60);
    let wd = (days + 4).rem_euclid(7) as usize;
    let month = MONTHS[(mo - 1) as usize];
    let mut out = String::new();
    let mut rest = layout;
    // Longest tokens first, as Go's nextStdChunk distinguishes them.
    let tokens: &[&str] = &[
        "January", "Monday", "2006", "-07:00", "Z07:00", "-0700", "Z0700", "Jan", "Mon", "MST",
        "002", "_2", "01", "02", "03", "04", "05", "06", "15", "PM", "pm", "-07", "1", "2", "3",
        "4", "5",
    ];
    while !rest.is_empty() {
        if let Some(frac) = rest
            .strip_prefix(".999999999")
            .or_else(|| rest.strip_prefix(",999999999"))
        {
            let ns = format!("{:09}", t.nanos);
            let trimmed = ns.trim_end_matches('0');
            if !trimmed.is_empty() {
                out.push('.');
                out.push_str(trimmed);
            }
            rest = frac;
            continue;
        }
        if let Some(after) = rest.strip_prefix(".000") {
            out.push_str(&format!(".{:03}", t.nanos / 1_000_000));
            rest = after;
            continue;
        }
        let Some(tok) = tokens.iter().find(|tk| rest.starts_with(**tk)) else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            rest = &rest[c.len_utf8()..];
            continue;
        };
        let h12 = if h % 12 == 0 { 12 } else { h % 12 };
        let piece = match *tok {
            "January" => month.to_string(),
            "Monday" => DAYS[wd].to_string(),
            "2006" => format!("{y:04}"),
            "-07:00" => "+00:00".into(),
            "Z07:00" | "Z0700" => "Z".into(),
            "-0700" => "+0000".into(),
            "-07" => "+00".into(),
            "Jan" => month[..3].to_string(),
            "Mon" => DAYS[wd][..3].to_string(),
            "MST" => "UTC".into(),
            "002" => {
                let (y0, _, _) = civil(days);
                let jan1 = days_from_civil(y0, 1, 1);
                format!("{:03}", days - jan1 + 1)
            }
            "_2" => format!("{d:>2}"),
            "01" => format!("{mo:02}"),
            "02" => format!("{d:02}"),
            "03" => format!("{h12:02}"),
            "04" => format!("{mi:02}"),
            "05" => format!("{se:02}"),
            "06" => format!("{:02}", y.rem_euclid(100)),
            "15" => format!("{h:02}"),
            "PM" => if h >= 12 { "PM" } else { "AM" }.into(),
            "pm" => if h >= 12 { "pm" } else { "am" }.into(),
            "1" => mo.to_string(),
            "2" => d.to_string(),
            "3" => h12.to_string(),
            "4" => mi.to_string(),
            _ => se.to_string(),
        };
        out.push_str(&piece);
        rest = &rest[tok.len()..];
    }
    out
}

pub(super) fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Sprig accepts a time, or Unix seconds as a number.
pub(super) fn as_time(v: &Value) -> Result<GoTime, Error> {
    if let Some(t) = v.downcast_object_ref::<GoTime>() {
        return Ok(*t);
    }
    if v.kind() == ValueKind::Number {
        return Ok(GoTime {
            secs: to_i64(v),
            nanos: 0,
        });
    }
    Err(err(format!(
        "unsupported construct: date of a {}",
        type_of(v)
    )))
}

pub(super) fn f_now(state: &State) -> Result<Value, Error> {
    let now = state
        .lookup("__now")
        .filter(|v| !v.is_undefined() && !v.is_none());
    let t = match now {
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
    };
    Ok(Value::from_object(t))
}

pub(super) fn f_date(layout: String, t: Value) -> Result<Value, Error> {
    Ok(Value::from(go_time_format(&as_time(&t)?, &layout)))
}

pub(super) fn f_date_in_zone(layout: String, t: Value, zone: String) -> Result<Value, Error> {
    // Pallet renders in UTC, which is also its local zone (see README).
    if zone != "UTC" && zone != "Local" {
        return Err(err(format!(
            "unsupported construct: dateInZone with zone {zone:?} (only UTC)"
        )));
    }
    f_date(layout, t)
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
    let (mut y, mut mo, mut d) = (1i64, 1u32, 1u32);
    let (mut h, mut mi, mut se, mut nanos, mut offset) = (0i64, 0i64, 0i64, 0u32, 0i64);
    let mut pm: Option<bool> = None;
    let mut rest = value;
    let mut lay = layout;
    let digits = |s: &str, min: usize, max: usize| -> Option<(i64, usize)> {
        let n = s.bytes().take(max).take_while(u8::is_ascii_digit).count();
        (n >= min).then(|| s[..n].parse().ok().map(|v| (v, n)))?
    };
    let names = |s: &str, list: &[&str], short: bool| -> Option<(usize, usize)> {
        list.iter().enumerate().find_map(|(i, name)| {
            let name = if short { &name[..3] } else { name };
            s.get(..name.len())
                .filter(|p| p.eq_ignore_ascii_case(name))
                .map(|_| (i, name.len()))
        })
    };
    while !lay.is_empty() {
        if [".000", ".999", ",000", ",999"]
            .iter()
            .any(|f| lay.starts_with(f))
        {
            // Fractional seconds of any length: skip the layout's digits, read the value's.
            let n = 1 + lay[1..]
                .bytes()
                .take_while(|b| *b == b'0' || *b == b'9')
                .count();
            lay = &lay[n..];
            if let Some(r) = rest.strip_prefix(['.', ',']) {
                let n = r.bytes().take_while(u8::is_ascii_digit).count();
                let frac = format!("{:0<9}", &r[..n.min(9)]);
                nanos = frac.parse().unwrap_or(0);
                rest = &r[n..];
            }
            continue;
        }
        let Some(tok) = tokens.iter().find(|tk| lay.starts_with(**tk)) else {
            let c = lay.chars().next().unwrap_or(' ');
            if !rest.starts_with(c) {
                return Err(fail(&lay[..c.len_utf8()], rest));
            }
            lay = &lay[c.len_utf8()..];
            rest = &rest[c.len_utf8()..];
            continue;
        };
        let adv: usize;
        match *tok {
            "2006" => {
                let (v, n) = digits(rest, 4, 4).ok_or_else(|| fail(tok, rest))?;
                y = v;
                adv = n;
            }
            "06" => {
                let (v, n) = digits(rest, 2, 2).ok_or_else(|| fail(tok, rest))?;
                y = if v >= 69 { 1900 + v } else { 2000 + v };
                adv = n;
            }
            "01" | "1" => {
                let (v, n) = digits(rest, if *tok == "01" { 2 } else { 1 }, 2)
                    .filter(|(v, _)| (1..=12).contains(v))
                    .ok_or_else(|| fail(tok, rest))?;
                mo = v as u32;
                adv = n;
            }
            "Jan" | "January" => {
                let (i, n) = names(rest, &MONTHS, *tok == "Jan").ok_or_else(|| fail(tok, rest))?;
                mo = i as u32 + 1;
                adv = n;
            }
            "Mon" | "Monday" => {
                let (_, n) = names(rest, &DAYS, *tok == "Mon").ok_or_else(|| fail(tok, rest))?;
                adv = n;
            }
            "02" | "2" | "_2" => {
                let r = if *tok == "_2" {
                    rest.strip_prefix(' ').unwrap_or(rest)
                } else {
                    rest
                };
                let skipped = rest.len() - r.len();
                let (v, n) = digits(r, if *tok == "02" { 2 } else { 1 }, 2)
                    .filter(|(v, _)| (1..=31).contains(v))
                    .ok_or_else(|| fail(tok, rest))?;
                d = v as u32;
                adv = skipped + n;
            }
            "002" => {
                return Err(format!(
                    "unsupported construct: toDate layout element {tok:?}"
                ))
            }
            "15" | "03" | "3" => {
                let (v, n) = digits(rest, 1, 2)
                    .filter(|(v, _)| {
                        if *tok == "15" {
                            *v < 24
                        } else {
                            (1..=12).contains(v)
                        }
                    })
                    .ok_or_else(|| fail(tok, rest))?;
                h = v;
                adv = n;
            }
            "04" | "4" | "05" | "5" => {
                let (v, n) = digits(rest, if tok.len() == 2 { 2 } else { 1 }, 2)
                    .filter(|(v, _)| *v < 60)
                    .ok_or_else(|| fail(tok, rest))?;
                if tok.ends_with('4') {
                    mi = v;
                } else {
                    se = v;
                    // Go reads a fraction after the seconds even without one in the layout.
                    if !lay[tok.len()..].starts_with(['.', ',']) {
                        if let Some(r) = rest[n..].strip_prefix('.') {
                            let k = r.bytes().take_while(u8::is_ascii_digit).count();
                            if k > 0 {
                                nanos = format!("{:0<9}", &r[..k.min(9)]).parse().unwrap_or(0);
                                rest = &r[k..];
                                lay = &lay[tok.len()..];
                                continue;
                            }
                        }
                    }
                }
                adv = n;
            }
            "PM" | "pm" => {
                let p = rest.get(..2).map(str::to_ascii_uppercase);
                pm = match p.as_deref() {
                    Some("PM") => Some(true),
                    Some("AM") => Some(false),
                    _ => return Err(fail(tok, rest)),
                };
                adv = 2;
            }
            "MST" => {
                let n = rest.bytes().take_while(u8::is_ascii_uppercase).count();
                if n < 3 {
                    return Err(fail(tok, rest));
                }
                adv = n;
            }
            zone => {
                // Z07:00, Z0700, -07:00, -0700, -07.
                if zone.starts_with('Z') && rest.starts_with('Z') {
                    adv = 1;
                } else {
                    let sign = match rest.as_bytes().first() {
                        Some(b'+') => 1,
                        Some(b'-') => -1,
                        _ => return Err(fail(tok, rest)),
                    };
                    let body = &rest[1..];
                    let (hh, mm, n) = if zone.ends_with("07:00") {
                        let ok = body.len() >= 5 && body.as_bytes()[2] == b':';
                        if !ok {
                            return Err(fail(tok, rest));
                        }
                        (digits(body, 2, 2), digits(&body[3..], 2, 2), 5)
                    } else if zone.ends_with("0700") {
                        (
                            digits(body, 2, 2),
                            body.get(2..).and_then(|b| digits(b, 2, 2)),
                            4,
                        )
                    } else {
                        (digits(body, 2, 2), Some((0, 0)), 2)
                    };
                    let (Some((hh, _)), Some((mm, _))) = (hh, mm) else {
                        return Err(fail(tok, rest));
                    };
                    offset = sign * (hh * 3600 + mm * 60);
                    adv = 1 + n;
                }
            }
        }
        rest = &rest[adv..];
        lay = &lay[tok.len()..];
    }
    if !rest.is_empty() {
        return Err(format!(
            "parsing time {value:?} as {layout:?}: extra text: {rest:?}"
        ));
    }
    match pm {
        Some(true) if h < 12 => h += 12,
        Some(false) if h == 12 => h = 0,
        _ => {}
    }
    let days = days_from_civil(y, mo, d);
    Ok(GoTime {
        secs: days * 86_400 + h * 3600 + mi * 60 + se - offset,
        nanos,
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

/// Sprig's `duration` and `durationRound` read strings and int64s; Go's int64 and int are one
/// kind here, so an integer is refused rather than guessed (`duration 90` is "0s" in helm,
/// `duration (int64 90)` is "1m30s").
pub(super) fn sprig_duration_ns(
    v: &Value,
    func: &str,
    string_is_seconds: bool,
) -> Result<i128, Error> {
    match v.kind() {
        ValueKind::String => {
            let s = v.as_str().unwrap_or_default();
            Ok(if string_is_seconds {
                i128::from(s.parse::<i64>().unwrap_or(0)) * 1_000_000_000
            } else {
                go_parse_duration(s).unwrap_or(0)
            })
        }
        ValueKind::Number if v.is_integer() => Err(err(format!(
            "unsupported construct: {func} of an integer (Go's int and int64 give different results; pass a string)"
        ))),
        _ => {
            if let Some(t) = v.downcast_object_ref::<GoTime>() {
                let _ = t;
                return Err(err(format!("unsupported construct: {func} of a time")));
            }
            Ok(0)
        }
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
