//! Go's `fmt.Sprintf` over template values (what `printf` does in a chart): flags `+-# 0`,
//! width and precision (also `*`), explicit argument indexes `%[n]d`, and the verbs
//! `v s q d b o O x X c U e E f F g G t T %`. Slices and maps are formatted element by
//! element with the same verb, as Go does. Wrong verb/type pairs print Go's `%!d(string=x)`
//! forms, missing and extra arguments Go's `%!d(MISSING)` and `%!(EXTRA ...)`.

use std::fmt::Write as _;

use minijinja::value::{Value, ValueKind};

use super::value::structs;
use super::value::{enter, go_float, go_fmt, go_quote, list_items, map_entries, type_of, GoMap};

/// Parsed `%` directive: flags, width and precision.
#[derive(Default, Clone, Copy)]
struct Spec {
    plus: bool,
    minus: bool,
    sharp: bool,
    space: bool,
    zero: bool,
    width: Option<usize>,
    prec: Option<usize>,
    /// `%+v`: struct fields printed with their names (the `+` then means no sign).
    plus_v: bool,
}

/// Go's `fmt.Sprintf(format, args...)`.
pub fn sprintf(format: &str, args: &[Value]) -> String {
    let mut out = String::new();
    let chars: Vec<char> = format.chars().collect();
    let mut i = 0;
    let mut argn = 0usize;
    let mut reordered = false;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut spec = Spec::default();
        while i < chars.len() {
            match chars[i] {
                '+' => spec.plus = true,
                '-' => spec.minus = true,
                '#' => spec.sharp = true,
                ' ' => spec.space = true,
                '0' => spec.zero = true,
                _ => break,
            }
            i += 1;
        }
        // Argument index before the width.
        if let Some((n, next)) = arg_index(&chars, i) {
            argn = n;
            i = next;
            reordered = true;
        }
        if chars.get(i) == Some(&'*') {
            i += 1;
            match take_int_arg(args, &mut argn) {
                Some(w) if w < 0 => {
                    spec.minus = true;
                    spec.width = Some(w.unsigned_abs() as usize);
                }
                Some(w) => spec.width = Some(w as usize),
                None => out.push_str("%!(BADWIDTH)"),
            }
        } else {
            let (n, next) = digits(&chars, i);
            spec.width = n;
            i = next;
        }
        if chars.get(i) == Some(&'.') {
            i += 1;
            if let Some((n, next)) = arg_index(&chars, i) {
                argn = n;
                i = next;
                reordered = true;
            }
            if chars.get(i) == Some(&'*') {
                i += 1;
                match take_int_arg(args, &mut argn) {
                    Some(p) if p >= 0 => spec.prec = Some(p as usize),
                    _ => out.push_str("%!(BADPREC)"),
                }
            } else {
                let (n, next) = digits(&chars, i);
                spec.prec = Some(n.unwrap_or(0));
                i = next;
            }
        }
        if let Some((n, next)) = arg_index(&chars, i) {
            argn = n;
            i = next;
            reordered = true;
        }
        let Some(&verb) = chars.get(i) else {
            out.push_str("%!(NOVERB)");
            break;
        };
        i += 1;
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(a) = args.get(argn) else {
            let _ = write!(out, "%!{verb}(MISSING)");
            continue;
        };
        argn += 1;
        if verb == 'v' && spec.plus {
            spec.plus = false;
            spec.plus_v = true;
        }
        out.push_str(&format_arg(a, verb, spec, 0));
    }
    if !reordered && argn < args.len() {
        out.push_str("%!(EXTRA ");
        let extra: Vec<String> = args[argn..]
            .iter()
            .map(|a| {
                if a.is_none() || a.is_undefined() {
                    "<nil>".to_string()
                } else {
                    format!("{}={}", type_of(a), go_fmt(a))
                }
            })
            .collect();
        out.push_str(&extra.join(", "));
        out.push(')');
    }
    out
}

/// `[n]` at `i`: the zero-based argument index and the position after it.
fn arg_index(chars: &[char], i: usize) -> Option<(usize, usize)> {
    if chars.get(i) != Some(&'[') {
        return None;
    }
    let close = chars[i..].iter().position(|c| *c == ']')? + i;
    let n: usize = chars[i + 1..close]
        .iter()
        .collect::<String>()
        .parse()
        .ok()?;
    Some((n.checked_sub(1)?, close + 1))
}

fn digits(chars: &[char], mut i: usize) -> (Option<usize>, usize) {
    let start = i;
    while chars.get(i).is_some_and(char::is_ascii_digit) {
        i += 1;
    }
    let n = (i > start)
        .then(|| chars[start..i].iter().collect::<String>().parse().ok())
        .flatten();
    (n, i)
}

fn take_int_arg(args: &[Value], argn: &mut usize) -> Option<i64> {
    let a = args.get(*argn)?;
    *argn += 1;
    (a.kind() == ValueKind::Number && a.is_integer())
        .then(|| a.as_i64())
        .flatten()
}

fn bad(verb: char, a: &Value) -> String {
    if a.is_none() || a.is_undefined() {
        format!("%!{verb}(<nil>)")
    } else {
        format!("%!{verb}({}={})", type_of(a), go_fmt(a))
    }
}

/// One operand under one verb, padded to the width; `depth` levels inside the operand printed.
fn format_arg(a: &Value, verb: char, spec: Spec, depth: usize) -> String {
    if verb == 'T' {
        let t = if a.is_none() || a.is_undefined() {
            "<nil>"
        } else {
            type_of(a)
        };
        return pad(t.to_string(), spec, false);
    }
    if a.is_none() || a.is_undefined() {
        return match verb {
            'v' => pad("<nil>".into(), spec, false),
            _ => bad(verb, a),
        };
    }
    match a.kind() {
        ValueKind::Bool => match verb {
            'v' | 't' => pad(go_fmt(a), spec, false),
            _ => bad(verb, a),
        },
        ValueKind::Number if a.is_integer() => fmt_int(a.as_i64().unwrap_or(0), verb, spec, a),
        ValueKind::Number => fmt_float(f64::try_from(a.clone()).unwrap_or(0.0), verb, spec, a),
        ValueKind::String => fmt_str(a.as_str().unwrap_or_default(), verb, spec, a),
        ValueKind::Bytes => {
            let b = a.as_bytes().unwrap_or_default();
            match verb {
                's' | 'q' | 'x' | 'X' => fmt_str(&String::from_utf8_lossy(b), verb, spec, a),
                _ => {
                    let items: Vec<String> = b
                        .iter()
                        .map(|x| fmt_int(i64::from(*x), verb, spec, &Value::from(*x)))
                        .collect();
                    format!("[{}]", items.join(" "))
                }
            }
        }
        ValueKind::Map if struct_type(a).is_some() => format_struct(a, verb, spec, depth),
        ValueKind::Map => match map_entries(a) {
            Some(m) => {
                if enter(depth + 1, "a printf operand").is_err() {
                    return String::new();
                }
                let items: Vec<String> = m
                    .iter()
                    .map(|(k, v)| {
                        format!(
                            "{}:{}",
                            format_arg(&Value::from(k.as_str()), verb, spec, depth + 1),
                            format_arg(v, verb, spec, depth + 1)
                        )
                    })
                    .collect();
                format!("map[{}]", items.join(" "))
            }
            None => pad(go_fmt(a), spec, false),
        },
        _ => match list_items(a) {
            Some(items) => {
                if enter(depth + 1, "a printf operand").is_err() {
                    return String::new();
                }
                let items: Vec<String> = items
                    .iter()
                    .map(|x| format_arg(x, verb, spec, depth + 1))
                    .collect();
                format!("[{}]", items.join(" "))
            }
            None => match verb {
                'v' | 's' => pad(go_fmt(a), spec, false),
                _ => bad(verb, a),
            },
        },
    }
}

/// The struct type of a value that is a Go struct (or a pointer to one).
fn struct_type(a: &Value) -> Option<&'static str> {
    a.downcast_object_ref::<GoMap>()?.1.struct_name()
}

/// A struct under a verb: `{field field}` in declaration order (`%+v`: `{Name:field ...}`),
/// each field under the verb; `&{...}` for a pointer at the top. A pointer inside the operand
/// prints as its address in Go, which pallet cannot reproduce: refused.
fn format_struct(a: &Value, verb: char, spec: Spec, depth: usize) -> String {
    let (Some(m), Some(ty)) = (a.downcast_object_ref::<GoMap>(), struct_type(a)) else {
        return String::new();
    };
    if structs::is_pointer(ty) && depth > 0 {
        // Go prints a pointer inside a value as its address, except under a verb a pointer
        // does not take: then fmt's `%!s(*T=&{...})`.
        if matches!(verb, 'v' | 'p' | 'b' | 'o' | 'd' | 'x' | 'X') {
            crate::budget::refuse(format!(
                "unsupported construct: printing a {ty} inside another value (Go prints its \
                 memory address)"
            ));
            return String::new();
        }
        return format!(
            "%!{verb}({ty}={})",
            format_struct(a, 'v', Spec::default(), 0)
        );
    }
    if enter(depth + 1, "a printf operand").is_err() {
        return String::new();
    }
    let values = m.snapshot();
    let fields: Vec<String> = structs::fields(ty)
        .unwrap_or(&[])
        .iter()
        .map(|field| {
            let v = values
                .get(field.name)
                .cloned()
                .unwrap_or_else(|| Value::from(""));
            let text = format_arg(&v, verb, spec, depth + 1);
            if spec.plus_v {
                format!("{}:{text}", field.name)
            } else {
                text
            }
        })
        .collect();
    let amp = if structs::is_pointer(ty) { "&" } else { "" };
    format!("{amp}{{{}}}", fields.join(" "))
}

fn sign(neg: bool, spec: Spec) -> &'static str {
    if neg {
        "-"
    } else if spec.plus {
        "+"
    } else if spec.space {
        " "
    } else {
        ""
    }
}

fn fmt_int(n: i64, verb: char, spec: Spec, a: &Value) -> String {
    let neg = n < 0;
    let u = n.unsigned_abs();
    let (digits, prefix) = match verb {
        'v' | 'd' => (u.to_string(), ""),
        'b' => (format!("{u:b}"), if spec.sharp { "0b" } else { "" }),
        'o' => (format!("{u:o}"), if spec.sharp { "0" } else { "" }),
        'O' => (format!("{u:o}"), "0o"),
        'x' => (format!("{u:x}"), if spec.sharp { "0x" } else { "" }),
        'X' => (format!("{u:X}"), if spec.sharp { "0X" } else { "" }),
        'c' => {
            let c = u32::try_from(n)
                .ok()
                .and_then(char::from_u32)
                .unwrap_or('\u{FFFD}');
            return pad(c.to_string(), spec, false);
        }
        'q' => {
            let c = u32::try_from(n)
                .ok()
                .and_then(char::from_u32)
                .unwrap_or('\u{FFFD}');
            let q = go_quote(&c.to_string());
            let inner = &q[1..q.len() - 1];
            let inner = if c == '\'' {
                "\\'".to_string()
            } else {
                inner.replace("\\\"", "\"")
            };
            return pad(format!("'{inner}'"), spec, false);
        }
        'U' => {
            let mut t = format!("U+{u:04X}");
            if spec.sharp {
                if let Some(c) = u32::try_from(n).ok().and_then(char::from_u32) {
                    let _ = write!(t, " '{c}'");
                }
            }
            return pad(t, spec, false);
        }
        'e' | 'E' | 'f' | 'F' | 'g' | 'G' | 's' | 't' => return bad(verb, a),
        _ => return bad(verb, a),
    };
    // Precision is the minimum number of digits; `%.0d` of 0 prints nothing.
    let digits = match spec.prec {
        Some(0) if u == 0 => String::new(),
        Some(p) if digits.len() < p => format!("{}{digits}", "0".repeat(p - digits.len())),
        _ => digits,
    };
    let head = format!("{}{prefix}", sign(neg, spec));
    pad_number(head, digits, spec)
}

/// Pads a number: zeros go between the sign/prefix and the digits (only without a
/// precision, as Go does for integers), spaces outside.
fn pad_number(head: String, digits: String, spec: Spec) -> String {
    let len = head.chars().count() + digits.chars().count();
    match spec.width {
        Some(w) if len < w && spec.zero && !spec.minus && spec.prec.is_none() => {
            format!("{head}{}{digits}", "0".repeat(w - len))
        }
        _ => pad(format!("{head}{digits}"), spec, false),
    }
}

fn fmt_float(f: f64, verb: char, spec: Spec, a: &Value) -> String {
    let body = match verb {
        'v' | 'g' | 'G' => {
            let t = match spec.prec {
                None => go_float(f.abs()),
                Some(p) => g_prec(f.abs(), p.max(1)),
            };
            if verb == 'G' {
                t.to_uppercase()
            } else {
                t
            }
        }
        'e' | 'E' => {
            let t = e_prec(f.abs(), spec.prec.unwrap_or(6));
            if verb == 'E' {
                t.to_uppercase()
            } else {
                t
            }
        }
        'f' | 'F' => format!("{:.*}", spec.prec.unwrap_or(6), f.abs()),
        _ => return bad(verb, a),
    };
    if !f.is_finite() {
        let t = if f.is_nan() {
            "NaN".to_string()
        } else {
            format!("{}Inf", if f < 0.0 { "-" } else { "+" })
        };
        return pad(t, spec, false);
    }
    let neg = f.is_sign_negative();
    let mut s = spec;
    s.prec = None;
    pad_number(sign(neg, spec).to_string(), body, s)
}

/// `%e` with `p` digits after the point, Go style (`1.5e+03`).
fn e_prec(f: f64, p: usize) -> String {
    let t = format!("{f:.p$e}");
    let (mant, exp) = t.split_once('e').unwrap_or((&t, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    format!(
        "{mant}e{}{:02}",
        if exp < 0 { '-' } else { '+' },
        exp.unsigned_abs()
    )
}

/// `%.pg`: `p` significant digits, `%e` form when the exponent is below -4 or at least the
/// precision, trailing zeros dropped.
fn g_prec(f: f64, p: usize) -> String {
    if f == 0.0 {
        return "0".into();
    }
    let t = format!("{f:.*e}", p - 1);
    let (mant, exp) = t.split_once('e').unwrap_or((&t, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mant.chars().filter(char::is_ascii_digit).collect();
    let nd = digits.trim_end_matches('0').len().max(1) as i32;
    let dp = exp + 1;
    let mut eprec = p as i32;
    if eprec > nd && nd >= dp {
        eprec = nd;
    }
    if exp < -4 || exp >= eprec {
        let m = if nd > 1 {
            format!("{}.{}", &digits[..1], &digits[1..nd as usize])
        } else {
            digits[..1].to_string()
        };
        format!(
            "{m}e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.unsigned_abs()
        )
    } else {
        let decimals = (nd - dp).max(0) as usize;
        format!("{f:.decimals$}")
    }
}

fn fmt_str(t: &str, verb: char, spec: Spec, a: &Value) -> String {
    let t: String = match spec.prec {
        Some(p) if matches!(verb, 'v' | 's' | 'q') => t.chars().take(p).collect(),
        _ => t.to_string(),
    };
    match verb {
        'v' | 's' => pad(t, spec, true),
        'q' => {
            if spec.sharp && !t.contains('`') && !t.chars().any(|c| c.is_control() && c != '\t') {
                pad(format!("`{t}`"), spec, false)
            } else {
                pad(go_quote(&t), spec, false)
            }
        }
        'x' | 'X' => {
            let bytes: Vec<u8> = match spec.prec {
                Some(p) => t.bytes().take(p).collect(),
                None => t.bytes().collect(),
            };
            // `% x` separates bytes; `#` prefixes 0x once, or per byte with the space flag.
            let mut s = String::new();
            for (i, b) in bytes.iter().enumerate() {
                if spec.space && i > 0 {
                    s.push(' ');
                }
                if spec.sharp && (spec.space || i == 0) {
                    s.push_str("0x");
                }
                let _ = write!(s, "{b:02x}");
            }
            pad(if verb == 'X' { s.to_uppercase() } else { s }, spec, false)
        }
        _ => bad(verb, a),
    }
}

/// Pads to the width with spaces (left unless `-`); zero padding for strings when asked.
fn pad(t: String, spec: Spec, zero_ok: bool) -> String {
    let len = t.chars().count();
    match spec.width {
        Some(w) if len < w => {
            let n = w - len;
            if spec.minus {
                format!("{t}{}", " ".repeat(n))
            } else if spec.zero && zero_ok {
                format!("{}{t}", "0".repeat(n))
            } else {
                format!("{}{t}", " ".repeat(n))
            }
        }
        _ => t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_verbs() {
        let v = |x: i64| Value::from(x);
        assert_eq!(
            sprintf("%o %b %O %#x %X", &[v(8), v(5), v(8), v(255), v(255)]),
            "10 101 0o10 0xff FF"
        );
        assert_eq!(
            sprintf(
                "%e|%E|%.2e",
                &[
                    Value::from(1234.5678),
                    Value::from(0.000123),
                    Value::from(1.0)
                ]
            ),
            "1.234568e+03|1.230000E-04|1.00e+00"
        );
        assert_eq!(
            sprintf(
                "%6.2v|%.3g|%g",
                &[
                    Value::from(7.654321),
                    Value::from(1234.5),
                    Value::from(1e21)
                ]
            ),
            "   7.7|1.23e+03|1e+21"
        );
        assert_eq!(
            sprintf("%U %q %c", &[v(9731), v(65), v(66)]),
            "U+2603 'A' B"
        );
        assert_eq!(
            sprintf("%*d|%-*d|", &[v(5), v(3), v(4), v(7)]),
            "    3|7   |"
        );
        assert_eq!(
            sprintf("%[2]s %[1]s", &[Value::from("a"), Value::from("b")]),
            "b a"
        );
        assert_eq!(sprintf("%T %T", &[v(1), Value::from("s")]), "int string");
        assert_eq!(
            sprintf("%05d|%+.3d|%x", &[v(-42), v(7), Value::from("hi")]),
            "-0042|+007|6869"
        );
        assert_eq!(
            sprintf("%d %s", &[Value::from("x")]),
            "%!d(string=x) %!s(MISSING)"
        );
        assert_eq!(sprintf("%d", &[Value::from(vec![v(1), v(2)])]), "[1 2]");
        assert_eq!(sprintf("%s", &[v(1), v(2)]), "%!s(int=1)%!(EXTRA int=2)");
    }
}
