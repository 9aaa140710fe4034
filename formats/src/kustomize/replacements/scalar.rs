//! Scalars as kustomize's YAML nodes carry them through a replacement: a text and a tag. A
//! replacement writes only the text into a scalar target and leaves its tag, so the value read
//! back from the output follows the target's type (an int field given `"3"` stays an int), a
//! field the replacement created has no tag and is read by its text (`"80"` becomes 80,
//! `"true"` becomes true), and a text the tag cannot read fails the build (`abc` as an int).
//! The rules are those of kustomize's YAML reader (YAML 1.2 core schema plus Go's integer
//! syntaxes).

use serde_json::{Number, Value};

use crate::kustomize::error::KustomizeError;

/// A scalar's tag, as far as reading it back goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    /// `!!str`.
    Str,
    /// `!!int`.
    Int,
    /// `!!float`.
    Float,
    /// `!!bool`.
    Bool,
    /// `!!null`.
    Null,
    /// `!!timestamp` (only ever resolved, never carried by a JSON value).
    Timestamp,
    /// No tag: a node the replacement created; read by its text.
    Untagged,
}

impl Tag {
    fn name(self) -> &'static str {
        match self {
            Tag::Str | Tag::Untagged => "!!str",
            Tag::Int => "!!int",
            Tag::Float => "!!float",
            Tag::Bool => "!!bool",
            Tag::Null => "!!null",
            Tag::Timestamp => "!!timestamp",
        }
    }
}

/// The tag and text of a JSON scalar (`None` for maps and lists).
pub fn tag_and_text(value: &Value) -> Option<(Tag, String)> {
    match value {
        Value::String(s) => Some((Tag::Str, s.clone())),
        Value::Number(n) if n.is_f64() => Some((Tag::Float, n.to_string())),
        Value::Number(n) => Some((Tag::Int, n.to_string())),
        Value::Bool(b) => Some((Tag::Bool, b.to_string())),
        Value::Null => Some((Tag::Null, "null".to_owned())),
        Value::Object(_) | Value::Array(_) => None,
    }
}

/// The value a scalar with this tag and text reads back as, or the reader's error.
pub fn decode(tag: Tag, text: &str) -> Result<Value, KustomizeError> {
    if tag == Tag::Str {
        return Ok(Value::String(text.to_owned()));
    }
    let (resolved, value) = resolve(text, tag == Tag::Untagged);
    if tag == Tag::Untagged || resolved == tag {
        return value;
    }
    if tag == Tag::Float && resolved == Tag::Int {
        return value.and_then(|v| float_value(v.as_f64().unwrap_or(0.0)));
    }
    Err(KustomizeError::invalid(format!(
        "cannot decode {} `{text}` as a {}",
        resolved.name(),
        tag.name()
    )))
}

fn float_value(f: f64) -> Result<Value, KustomizeError> {
    Number::from_f64(f).map(Value::Number).ok_or_else(|| {
        KustomizeError::invalid(format!("json: unsupported value: {f} (not a JSON number)"))
    })
}

/// What a plain scalar's text resolves to; `timestamps` when the node has no tag (only then
/// does the reader try dates).
fn resolve(text: &str, timestamps: bool) -> (Tag, Result<Value, KustomizeError>) {
    match text {
        "true" | "True" | "TRUE" => return (Tag::Bool, Ok(Value::Bool(true))),
        "false" | "False" | "FALSE" => return (Tag::Bool, Ok(Value::Bool(false))),
        "" | "~" | "null" | "Null" | "NULL" => return (Tag::Null, Ok(Value::Null)),
        ".nan" | ".NaN" | ".NAN" => return (Tag::Float, float_value(f64::NAN)),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return (Tag::Float, float_value(f64::INFINITY))
        }
        "-.inf" | "-.Inf" | "-.INF" => return (Tag::Float, float_value(f64::NEG_INFINITY)),
        _ => {}
    }
    let string = (Tag::Str, Ok(Value::String(text.to_owned())));
    match text.as_bytes()[0] {
        b'.' => match text.parse::<f64>() {
            Ok(f) if go_float_syntax(text) => (Tag::Float, float_value(f)),
            _ => string,
        },
        b'0'..=b'9' | b'+' | b'-' => {
            if timestamps {
                if let Some(date) = date_timestamp(text) {
                    return (Tag::Timestamp, Ok(Value::String(date)));
                }
            }
            let plain = text.replace('_', "");
            if let Some(n) = go_integer(&plain) {
                return (Tag::Int, Ok(n));
            }
            if yaml_float_syntax(&plain) {
                if let Ok(f) = plain.parse::<f64>() {
                    return (Tag::Float, float_value(f));
                }
            }
            string
        }
        _ => string,
    }
}

/// Go's `strconv.ParseFloat` text for a leading-dot float (`.5`, `.5e3`).
fn go_float_syntax(text: &str) -> bool {
    let rest = &text[1..];
    let (digits, exponent) = match rest.find(['e', 'E']) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && exponent.is_none_or(|e| {
            let e = e.strip_prefix(['+', '-']).unwrap_or(e);
            !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit())
        })
}

/// `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`.
fn yaml_float_syntax(text: &str) -> bool {
    let body = text.strip_prefix(['+', '-']).unwrap_or(text);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", fraction)) => digits(fraction),
        Some((whole, fraction)) => digits(whole) && fraction.bytes().all(|b| b.is_ascii_digit()),
        None => digits(mantissa),
    };
    mantissa_ok && exponent.is_none_or(|e| digits(e.strip_prefix(['+', '-']).unwrap_or(e)))
}

/// An integer as Go's `strconv.ParseInt(s, 0, 64)` (then `ParseUint`) reads it: a sign, then
/// `0x`, `0o`, `0b` or a leading `0` (octal) prefix, or decimal.
fn go_integer(text: &str) -> Option<Value> {
    let (negative, body) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return None;
    }
    let magnitude = u64::from_str_radix(digits, radix).ok()?;
    if negative {
        let n = 0i64.checked_sub_unsigned(magnitude)?;
        Some(Value::Number(n.into()))
    } else if let Ok(n) = i64::try_from(magnitude) {
        Some(Value::Number(n.into()))
    } else {
        Some(Value::Number(magnitude.into()))
    }
}

/// A date-only timestamp (`2024-1-2`) as the output writes a decoded one: RFC 3339 at
/// midnight UTC.
fn date_timestamp(text: &str) -> Option<String> {
    let mut parts = text.splitn(3, '-');
    let (year, month, day) = (parts.next()?, parts.next()?, parts.next()?);
    let number = |s: &str, max_len: usize| {
        (!s.is_empty() && s.len() <= max_len && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u32>().ok())
            .flatten()
    };
    if year.len() != 4 {
        return None;
    }
    let (y, m, d) = (number(year, 4)?, number(month, 2)?, number(day, 2)?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let valid = (1..=12).contains(&m) && d >= 1 && d <= days[(m - 1) as usize];
    valid.then(|| format!("{y:04}-{m:02}-{d:02}T00:00:00Z"))
}

/// A value as kustomize's YAML writer prints it on its own (what `[field=regex]` path
/// elements match their regular expression against): plain text where the text reads back
/// as a string, double quotes where it would read as something else, single quotes where a
/// plain scalar cannot start or contain what it does; maps and lists in flow form.
pub fn yaml_text(value: &Value) -> String {
    match value {
        Value::String(s) => yaml_string(s),
        Value::Null => "null".to_owned(),
        Value::Bool(_) | Value::Number(_) => value.to_string(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(yaml_text).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(map) => {
            let entries: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}: {}", yaml_string(k), yaml_text(v)))
                .collect();
            format!("{{{}}}", entries.join(", "))
        }
    }
}

fn yaml_string(s: &str) -> String {
    if s.contains('\n') {
        let lines: Vec<String> = s.lines().map(|l| format!("  {l}")).collect();
        let chomp = if s.ends_with('\n') { "" } else { "-" };
        return format!("|{chomp}\n{}", lines.join("\n"));
    }
    if resolve(s, true).0 != Tag::Str {
        return format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    }
    if plain_allowed(s) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "''"))
    }
}

/// Whether a string can be written as a plain scalar.
fn plain_allowed(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    let second = s.chars().nth(1);
    let indicator = matches!(
        first,
        '[' | ']'
            | '{'
            | '}'
            | ','
            | '#'
            | '&'
            | '*'
            | '!'
            | '|'
            | '>'
            | '\''
            | '"'
            | '%'
            | '@'
            | '`'
    ) || (matches!(first, '-' | '?' | ':') && second.is_none_or(|c| c == ' '));
    !indicator
        && !s.contains(": ")
        && !s.contains(" #")
        && !s.ends_with(':')
        && !s.starts_with(' ')
        && !s.ends_with(' ')
        && !s.contains('\t')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn texts_read_back_by_the_tag_they_keep() {
        assert_eq!(decode(Tag::Int, "3").unwrap(), json!(3));
        assert_eq!(decode(Tag::Int, "0x1F").unwrap(), json!(31));
        assert_eq!(decode(Tag::Int, "0777").unwrap(), json!(511));
        assert_eq!(decode(Tag::Float, "3").unwrap(), json!(3.0));
        assert_eq!(decode(Tag::Str, "3").unwrap(), json!("3"));
        assert_eq!(decode(Tag::Untagged, "80").unwrap(), json!(80));
        assert_eq!(decode(Tag::Untagged, "true").unwrap(), json!(true));
        assert_eq!(decode(Tag::Untagged, "").unwrap(), Value::Null);
        assert_eq!(decode(Tag::Untagged, "1e3").unwrap(), json!(1000.0));
        assert_eq!(decode(Tag::Untagged, "a-b").unwrap(), json!("a-b"));
        assert_eq!(
            decode(Tag::Untagged, "2024-02-29").unwrap(),
            json!("2024-02-29T00:00:00Z")
        );
        assert_eq!(decode(Tag::Null, "~").unwrap(), Value::Null);
        let error = decode(Tag::Int, "abc").unwrap_err();
        assert_eq!(error.message, "cannot decode !!str `abc` as a !!int");
        assert!(decode(Tag::Int, "1.5").is_err());
        assert!(decode(Tag::Bool, "yes").is_err());
        assert!(decode(Tag::Null, "80").is_err());
    }

    #[test]
    fn strings_print_as_the_yaml_writer_prints_them() {
        assert_eq!(yaml_text(&json!("app")), "app");
        assert_eq!(yaml_text(&json!("80")), "\"80\"");
        assert_eq!(yaml_text(&json!("true")), "\"true\"");
        assert_eq!(yaml_text(&json!("a: b")), "'a: b'");
        assert_eq!(yaml_text(&json!("-x")), "-x");
        assert_eq!(yaml_text(&json!("- x")), "'- x'");
        assert_eq!(yaml_text(&json!(80)), "80");
    }
}
