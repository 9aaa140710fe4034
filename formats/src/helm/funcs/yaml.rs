//! `toYaml`/`fromYaml`/`fromYamlArray`, with an emitter that writes what go-yaml v2 (helm's
//! sigs.k8s.io/yaml) writes.

use super::*;

pub(super) const FUNCS: &[(&str, F)] = &[
    ("toYaml", |a| {
        let v = to_json(&arg(&a, 0))?;
        if yaml_reader_rejects(&v) {
            // helm's toYaml swallows the marshalling error.
            return Ok(Value::from(""));
        }
        Ok(Value::from(to_yaml(&fold_nel(v))))
    }),
    ("fromYaml", |a| {
        Ok(match parse_yaml_value(&s(&arg(&a, 0))) {
            Ok(v @ serde_json::Value::Object(_)) => from_json(&v),
            Ok(serde_json::Value::Null) => GoMap::value(BTreeMap::new()),
            Ok(other) => error_map(format!(
                "error unmarshaling JSON: while decoding JSON: {}",
                json_type_error(&other, "map[string]interface {}")
            )),
            Err(e) => error_map(e),
        })
    }),
    ("fromYamlArray", |a| {
        Ok(match parse_yaml_value_array(&s(&arg(&a, 0))) {
            Ok(v @ serde_json::Value::Array(_)) => from_json(&v),
            Ok(serde_json::Value::Null) => GoList::value(Vec::new()),
            Ok(other) => GoList::value(vec![Value::from(format!(
                "error unmarshaling JSON: while decoding JSON: {}",
                json_type_error(&other, "[]interface {}")
            ))]),
            Err(e) => GoList::value(vec![Value::from(e)]),
        })
    }),
];

/// Helm's `toYaml` output (sigs.k8s.io/yaml: JSON → YAML, block style, sorted keys), without the
/// trailing newline.
pub fn to_yaml(v: &serde_json::Value) -> String {
    let mut out = String::new();
    yaml_node(&mut out, v, 0, false);
    while out.ends_with('\n') {
        out.pop();
    }
    out
}

/// Sorts by go-yaml's key order with an insertion sort: Go's `keyList.Less` is not a total
/// order for every set of keys (Rust's sorts may panic on that), and Go's own sort is an
/// insertion sort up to 12 elements, so small maps come out in Go's order even then.
pub(super) fn sort_keys<T>(items: &mut [T], key: impl Fn(&T) -> &str, v3: bool) {
    for i in 1..items.len() {
        let mut j = i;
        while j > 0 && natural_key_order(key(&items[j]), key(&items[j - 1]), v3).is_lt() {
            items.swap(j, j - 1);
            j -= 1;
        }
    }
}

/// go-yaml's `keyList.Less` for string keys (v2 for toYaml, v3 for toYamlPretty): runes
/// compared, a letter after a non-letter, runs of digits by value (`k2` before `k10`). v3
/// puts a letter first when the runes before it were digits.
pub(super) fn natural_key_order(a: &str, b: &str, v3: bool) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (ar, br): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut digits = false;
    for i in 0..ar.len().min(br.len()) {
        if ar[i] == br[i] {
            digits = ar[i].is_ascii_digit();
            continue;
        }
        let (al, bl) = (ar[i].is_alphabetic(), br[i].is_alphabetic());
        if al && bl {
            return ar[i].cmp(&br[i]);
        }
        if al || bl {
            let a_first = if v3 && digits { al } else { bl };
            return if a_first {
                Ordering::Less
            } else {
                Ordering::Greater
            };
        }
        let (mut an, mut bn) = (0i64, 0i64);
        // A zero after non-zero digits counts (Go's quirk: both sides start at 1).
        let nonzero_before = ar[..i]
            .iter()
            .rev()
            .take_while(|c| c.is_ascii_digit())
            .any(|c| *c != '0');
        if (ar[i] == '0' || br[i] == '0') && nonzero_before {
            an = 1;
            bn = 1;
        }
        let run = |r: &[char], n: &mut i64| {
            let mut j = i;
            while j < r.len() && r[j].is_ascii_digit() {
                *n = n
                    .wrapping_mul(10)
                    .wrapping_add(i64::from(r[j] as u8 - b'0'));
                j += 1;
            }
            j
        };
        let (ai, bi) = (run(&ar, &mut an), run(&br, &mut bn));
        if an != bn {
            return an.cmp(&bn);
        }
        if ai != bi {
            return ai.cmp(&bi);
        }
        return ar[i].cmp(&br[i]);
    }
    ar.len().cmp(&br.len())
}

/// A scalar as go-yaml v2 emits it (after sigs.k8s.io/yaml's JSON round trip), for a value at
/// block `indent`. Multi-line strings become literal blocks.
/// Where a scalar value is written: its start column and the indentation of continuation
/// lines when go-yaml folds it (`None` for map keys, which are never folded).
#[derive(Clone, Copy)]
pub(super) struct Fold {
    column: usize,
    indent: usize,
}

/// go-yaml v2's line width: past this column, a space in a plain or quoted scalar becomes a
/// line break (the value reads back the same, but the text differs).
pub(super) const YAML_WIDTH: usize = 80;

/// go-yaml v2's folding of a plain (`quote` = None) or quoted scalar as written in `text`:
/// at a space past [`YAML_WIDTH`], not after another space and (plain, single-quoted) not
/// before one, and never on the first or last character inside quotes, the space becomes a
/// newline plus `indent` spaces. In double quotes a following space is escaped with `\`.
pub(super) fn yaml_fold(text: &str, fold: Fold, quote: Option<char>) -> String {
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len();
    let mut out = String::with_capacity(text.len() + 8);
    let mut column = fold.column;
    let mut prev_space = false;
    for (p, &c) in chars.iter().enumerate() {
        let next_space = chars.get(p + 1) == Some(&' ');
        if c == ' ' {
            let inner = quote.is_none() || (p != 1 && p + 2 != n);
            let can = match quote {
                Some('"') => inner,
                _ => inner && !next_space,
            };
            if can && !prev_space && column > YAML_WIDTH {
                out.push('\n');
                out.push_str(&" ".repeat(fold.indent));
                column = fold.indent;
                if quote == Some('"') && next_space {
                    out.push('\\');
                    column += 1;
                }
                prev_space = true;
                continue;
            }
            prev_space = true;
        } else {
            prev_space = false;
        }
        out.push(c);
        column += 1;
    }
    out
}

/// The current column of `out` (characters since the last newline).
pub(super) fn column_of(out: &str) -> usize {
    out[out.rfind('\n').map_or(0, |i| i + 1)..].chars().count()
}

pub(super) fn yaml_scalar(v: &serde_json::Value, indent: usize, fold: Option<Fold>) -> String {
    match v {
        serde_json::Value::Null => "null".into(),
        serde_json::Value::Bool(b) => b.to_string(),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.to_string(),
            // JSON prints integral floats below 1e21 as integer digits (shortest form, then
            // zeros); go-yaml reads those back as an int64 or uint64 when they fit, else as a
            // float it prints in %g form.
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < 1e21 => {
                let text = json_float(f);
                if text.parse::<i64>().is_ok() || text.parse::<u64>().is_ok() {
                    text
                } else {
                    go_float(f)
                }
            }
            (None, Some(f)) => go_float(f),
            _ => n.to_string(),
        },
        serde_json::Value::String(s) => yaml_string(s, indent, fold),
        serde_json::Value::Array(_) => "[]".into(),
        serde_json::Value::Object(_) => "{}".into(),
    }
}

/// Whether go-yaml v2's encoder refuses the plain style for this string because it would
/// read back as something else: its `resolve` (the YAML 1.1 words, then by the first
/// character: a timestamp, Go's `ParseInt`/`ParseUint` with base prefixes, a YAML-style float)
/// or its `isBase60Float` (`1:20`, quoted for YAML 1.1 readers although v2 reads a string).
pub(super) fn resolves_non_string(s: &str) -> bool {
    const WORDS: &[&str] = &[
        "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE", "false",
        "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF", "~", "null", "Null", "NULL",
        ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", ".nan",
        ".NaN", ".NAN",
    ];
    if s.is_empty() || WORDS.contains(&s) {
        return true;
    }
    match s.as_bytes()[0] {
        // Go's ParseFloat on the text as it is (no underscores allowed).
        b'.' => yaml_style_float(s),
        b'+' | b'-' | b'0'..=b'9' => {
            if yaml_timestamp(s) {
                return true;
            }
            let plain = s.replace('_', "");
            go_parse_int(&plain, true)
                || yaml_style_float(&plain)
                || plain
                    .strip_prefix("0b")
                    .is_some_and(|rest| go_parse_int_radix(rest, 2))
                || plain
                    .strip_prefix("-0b")
                    .is_some_and(|rest| go_parse_int_radix(&format!("-{rest}"), 2))
                || base60_float(s)
        }
        _ => false,
    }
}

/// Go's `strconv.ParseInt(s, 0, 64)` succeeding, or `ParseUint(s, 0, 64)` when `unsigned`
/// (base prefixes `0x`, `0o`, `0b`, a leading `0` for octal, a sign for ParseInt only).
fn go_parse_int(s: &str, unsigned: bool) -> bool {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'+') => (false, &s[1..]),
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
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
    let Ok(magnitude) = u128::from_str_radix(digits, radix) else {
        return false;
    };
    if digits.starts_with(['+', '-']) {
        return false;
    }
    let fits_i64 = if neg {
        magnitude <= 1u128 << 63
    } else {
        magnitude < 1u128 << 63
    };
    let sign_given = s.starts_with(['+', '-']);
    fits_i64 || (unsigned && !sign_given && magnitude <= u128::from(u64::MAX))
}

/// Go's `strconv.ParseInt(s, radix, 64)` succeeding (an optional sign, then digits).
fn go_parse_int_radix(s: &str, radix: u32) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    !body.is_empty()
        && !body.starts_with(['+', '-'])
        && i64::from_str_radix(s.strip_prefix('+').unwrap_or(s), radix).is_ok()
}

/// go-yaml's `yamlStyleFloat` (`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`) and a
/// finite `ParseFloat`.
fn yaml_style_float(s: &str) -> bool {
    let b = s.strip_prefix(['+', '-']).unwrap_or(s).as_bytes();
    let int = b.iter().take_while(|c| c.is_ascii_digit()).count();
    let mut i = int;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let frac = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        if int == 0 && frac == 0 {
            return false;
        }
        i += frac;
    } else if int == 0 {
        return false;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        if exp == 0 {
            return false;
        }
        i += exp;
    }
    i == b.len() && s.parse::<f64>().is_ok_and(f64::is_finite)
}

/// go-yaml v2's `isBase60Float`: `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`.
fn base60_float(s: &str) -> bool {
    let b = s.strip_prefix(['+', '-']).unwrap_or(s).as_bytes();
    if !b.first().is_some_and(u8::is_ascii_digit) {
        return false;
    }
    let mut i = 1 + b[1..]
        .iter()
        .take_while(|c| c.is_ascii_digit() || **c == b'_')
        .count();
    let mut groups = 0;
    while b.get(i) == Some(&b':') {
        let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        // `[0-5]?[0-9]`: one digit, or two whose first is 0-5.
        let take = match digits {
            0 => return false,
            1 => 1,
            _ if b[i + 1] <= b'5' => 2,
            _ => 1,
        };
        i += 1 + take;
        groups += 1;
    }
    if groups == 0 {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1 + b[i + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit() || **c == b'_')
            .count();
    }
    i == b.len()
}

/// go-yaml v2's timestamp resolution: `YYYY-` then one of its four layouts.
pub(super) fn yaml_timestamp(s: &str) -> bool {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits != 4 || s.as_bytes().get(4) != Some(&b'-') {
        return false;
    }
    [
        "2006-1-2T15:4:5.999999999Z07:00",
        "2006-1-2t15:4:5.999999999Z07:00",
        "2006-1-2 15:4:5.999999999",
        "2006-1-2",
    ]
    .iter()
    .any(|layout| go_time_parse(layout, s).is_ok())
}

pub(super) fn yaml_string(s: &str, indent: usize, fold: Option<Fold>) -> String {
    let quoted = yaml_string_unfolded(s, indent);
    let Some(fold) = fold else {
        return quoted;
    };
    if s.contains('\n') && quoted.starts_with('|') {
        return quoted;
    }
    let quote = quoted.chars().next().filter(|c| *c == '"' || *c == '\'');
    yaml_fold(&quoted, fold, quote)
}

/// Characters go-yaml v2's emitter does not print as they are (`is_printable` is false, or a
/// byte-order mark): a string holding one is double-quoted with escapes.
pub(super) fn yaml_special(c: char) -> bool {
    !(c == '\n'
        || (' '..='~').contains(&c)
        || ('\u{A0}'..='\u{D7FF}').contains(&c)
        || (('\u{E000}'..='\u{FFFD}').contains(&c) && c != '\u{FEFF}'))
}

/// Line breaks for go-yaml besides `\n`: they make a scalar multi-line.
pub(super) fn yaml_other_break(c: char) -> bool {
    matches!(c, '\r' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// go-yaml v2's double-quoted style: its escapes (`\a`, `\e`, `\N`, `\L`, `\xXX`,
/// `\UXXXXXXXX`, ...) for breaks and unprintable characters, the rest as it is.
pub(super) fn yaml_double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\0' => out.push_str("\\0"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{b}' => out.push_str("\\v"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            '\u{1b}' => out.push_str("\\e"),
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{85}' => out.push_str("\\N"),
            '\u{2028}' => out.push_str("\\L"),
            '\u{2029}' => out.push_str("\\P"),
            c if yaml_special(c) => {
                let n = c as u32;
                let _ = if n <= 0xFF {
                    write!(out, "\\x{n:02X}")
                } else if n <= 0xFFFF {
                    write!(out, "\\u{n:04X}")
                } else {
                    write!(out, "\\U{n:08X}")
                };
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Whether sigs.k8s.io/yaml fails on this value (go-yaml's reader refuses these characters in
/// the JSON it is given, and encoding/json leaves them raw): helm's toYaml then prints "".
pub(super) fn yaml_reader_rejects(v: &serde_json::Value) -> bool {
    let bad = |s: &str| {
        s.chars().any(
            |c| matches!(c, '\u{7F}'..='\u{84}' | '\u{86}'..='\u{9F}' | '\u{FFFE}' | '\u{FFFF}'),
        )
    };
    match v {
        serde_json::Value::String(s) => bad(s),
        serde_json::Value::Array(a) => a.iter().any(yaml_reader_rejects),
        serde_json::Value::Object(m) => m.iter().any(|(k, x)| bad(k) || yaml_reader_rejects(x)),
        _ => false,
    }
}

/// helm's toYaml goes through JSON, where encoding/json leaves U+0085 (NEL) raw; go-yaml then
/// reads it inside a double-quoted scalar as a line break and folds it: one break becomes a
/// space, `n` breaks `n - 1` newlines, with the white space around them dropped.
pub(super) fn fold_nel(v: serde_json::Value) -> serde_json::Value {
    fn fold(s: String) -> String {
        if !s.contains('\u{85}') {
            return s;
        }
        let mut out = String::with_capacity(s.len());
        let chars: Vec<char> = s.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            if chars[i] == '\u{85}' {
                while out.ends_with([' ', '\t']) {
                    out.pop();
                }
                let mut n = 0;
                while i < chars.len() && matches!(chars[i], '\u{85}' | ' ' | '\t') {
                    n += usize::from(chars[i] == '\u{85}');
                    i += 1;
                }
                if n == 1 {
                    out.push(' ');
                } else {
                    out.push_str(&"\n".repeat(n - 1));
                }
                continue;
            }
            out.push(chars[i]);
            i += 1;
        }
        out
    }
    match v {
        serde_json::Value::String(s) => serde_json::Value::String(fold(s)),
        serde_json::Value::Array(a) => {
            serde_json::Value::Array(a.into_iter().map(fold_nel).collect())
        }
        serde_json::Value::Object(m) => {
            serde_json::Value::Object(m.into_iter().map(|(k, x)| (fold(k), fold_nel(x))).collect())
        }
        other => other,
    }
}

pub(super) fn yaml_string_unfolded(s: &str, indent: usize) -> String {
    let special = s.chars().any(|c| yaml_special(c) && !yaml_other_break(c));
    if s.contains('\n') {
        if special || s.chars().any(yaml_other_break) || s.contains(" \n") || s.ends_with(' ') {
            return yaml_double_quoted(s);
        }
        return literal_block(s, indent);
    }
    if special || s.contains(['\r', '\u{85}']) {
        return yaml_double_quoted(s);
    }
    if s.contains(['\u{2028}', '\u{2029}']) {
        // A line break without \n: go-yaml single-quotes it and indents after the break.
        if s.starts_with(' ')
            || s.ends_with(' ')
            || s.contains(" \u{2028}")
            || s.contains(" \u{2029}")
        {
            return yaml_double_quoted(s);
        }
        let pad = " ".repeat(indent);
        let body = s
            .replace('\'', "''")
            .replace('\u{2028}', &format!("\u{2028}{pad}"))
            .replace('\u{2029}', &format!("\u{2029}{pad}"));
        return format!("'{body}'");
    }
    if resolves_non_string(s) {
        return yaml_double_quoted(s);
    }
    let first = s.chars().next().unwrap_or(' ');
    let second_is_space = s.chars().nth(1).is_none_or(|c| c == ' ');
    // Why plain style is refused: surrounding spaces, an indicator character first, a document
    // marker, or `: ` / ` #` / a trailing `:` that would change the parse.
    let needs_quotes = s.starts_with(' ')
        || s.ends_with(' ')
        || "#,[]{}&*!|>'\"%@`".contains(first)
        || ("-?:".contains(first) && second_is_space)
        || s.starts_with("---")
        || s.starts_with("...")
        || s.contains(": ")
        || s.contains(" #")
        || s.ends_with(':');
    let plain_ok = !needs_quotes;
    if plain_ok {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "''"))
    }
}

/// A literal block scalar (`|`, `|-`, `|+`) whose lines sit at `indent` spaces.
pub(super) fn literal_block(s: &str, indent: usize) -> String {
    let trailing = s.len() - s.trim_end_matches('\n').len();
    // go-yaml keeps (`+`) when the value is one line break or ends with two.
    let chomp = match trailing {
        0 => "-",
        1 if s.len() > 1 => "",
        _ => "+",
    };
    let indicator = if s.starts_with([' ', '\n']) { "2" } else { "" };
    let pad = " ".repeat(indent);
    let mut out = format!("|{indicator}{chomp}");
    let body = if trailing == 1 {
        &s[..s.len() - 1]
    } else {
        s.trim_end_matches('\n')
    };
    for line in body.split('\n') {
        out.push('\n');
        if !line.is_empty() {
            out.push_str(&pad);
            out.push_str(line);
        }
    }
    if trailing > 1 {
        for _ in 1..trailing {
            out.push('\n');
        }
    }
    out
}

pub(super) fn yaml_node(out: &mut String, v: &serde_json::Value, indent: usize, in_seq: bool) {
    let pad = " ".repeat(indent);
    match v {
        serde_json::Value::Object(m) if !m.is_empty() => {
            // go-yaml v2 sorts the keys of the map sigs.k8s.io/yaml decoded from JSON.
            let mut entries: Vec<(&String, &serde_json::Value)> = m.iter().collect();
            sort_keys(&mut entries, |e| e.0.as_str(), false);
            for (i, (k, val)) in entries.into_iter().enumerate() {
                if !(in_seq && i == 0) {
                    out.push_str(&pad);
                }
                if k.contains('\n') {
                    out.push_str(&serde_json::to_string(k).unwrap_or_default());
                } else {
                    out.push_str(&yaml_string(k, 0, None));
                }
                out.push(':');
                match val {
                    serde_json::Value::Object(c) if !c.is_empty() => {
                        out.push('\n');
                        yaml_node(out, val, indent + 2, false);
                    }
                    serde_json::Value::Array(c) if !c.is_empty() => {
                        out.push('\n');
                        yaml_node(out, val, indent, false);
                    }
                    _ => {
                        out.push(' ');
                        let fold = Fold {
                            column: column_of(out),
                            indent: indent + 2,
                        };
                        out.push_str(&yaml_scalar(val, indent + 2, Some(fold)));
                        out.push('\n');
                    }
                }
            }
        }
        serde_json::Value::Array(a) if !a.is_empty() => {
            for (i, item) in a.iter().enumerate() {
                if !(in_seq && i == 0) {
                    out.push_str(&pad);
                }
                out.push_str("- ");
                match item {
                    serde_json::Value::Object(c) if !c.is_empty() => {
                        yaml_node(out, item, indent + 2, true)
                    }
                    serde_json::Value::Array(c) if !c.is_empty() => {
                        yaml_node(out, item, indent + 2, true)
                    }
                    _ => {
                        let fold = Fold {
                            column: column_of(out),
                            indent: indent + 2,
                        };
                        out.push_str(&yaml_scalar(item, indent + 2, Some(fold)));
                        out.push('\n');
                    }
                }
            }
        }
        _ => {
            if !in_seq {
                out.push_str(&pad);
            }
            let fold = Fold {
                column: column_of(out),
                indent: indent + 2,
            };
            out.push_str(&yaml_scalar(v, indent + 2, Some(fold)));
            out.push('\n');
        }
    }
}

/// The text of the first YAML document: up to a `---` that follows content or an earlier
/// `---`, or up to a `...`, each at the start of a line.
fn first_document(s: &str) -> &str {
    let mut started = false;
    let mut pos = 0;
    for line in s.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let marker = |m: &str| {
            body.strip_prefix(m)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
        };
        if marker("...") {
            return &s[..pos];
        }
        if marker("---") {
            if started {
                return &s[..pos];
            }
            started = true;
        } else if !body.trim().is_empty() && !body.starts_with('#') && !body.starts_with('%') {
            started = true;
        }
        pos += line.len();
    }
    s
}

/// YAML for fromYamlArray: an empty document is an empty list, not a map.
pub(super) fn parse_yaml_value_array(s: &str) -> Result<serde_json::Value, String> {
    if s.trim().is_empty() {
        return Ok(serde_json::Value::Array(Vec::new()));
    }
    parse_yaml_value(s)
}

pub(super) fn parse_yaml_value(s: &str) -> Result<serde_json::Value, String> {
    // go-yaml's Unmarshal reads the first document only; the rest is never parsed.
    let s = first_document(s);
    if s.trim().is_empty() {
        return Ok(serde_json::Value::Object(Default::default()));
    }
    // fromYaml hands a reader's error to the template (in `.Error`); a values budget breach
    // stays recorded, and fails the call (see `registry::call`).
    super::super::yaml11::parse(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_is_block_style_and_quotes_ambiguous_strings() {
        let v: serde_json::Value =
            serde_json::json!({"a": {"b": [1, {"c": "yes", "d": ""}]}, "e": []});
        assert_eq!(
            to_yaml(&v),
            "a:\n  b:\n  - 1\n  - c: \"yes\"\n    d: \"\"\ne: []"
        );
    }
}
