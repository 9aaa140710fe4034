//! Go's `time.Time` as templates see it (UTC only): the value `now` and `toDate` return, and
//! `Time.Format` with Go's layouts.

use std::sync::Arc;

use minijinja::value::{Object, ObjectRepr};

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
pub fn civil(days: i64) -> (i64, u32, u32) {
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

/// Go's month names.
pub const MONTHS: [&str; 12] = [
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
/// Go's weekday names, Sunday first.
pub const DAYS: [&str; 7] = [
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

/// (year, month, day) → days since 1970-01-01, the inverse of [`civil`].
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}
