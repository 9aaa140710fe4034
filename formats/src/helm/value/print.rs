//! Printing values as Go does: fmt's `%v` (`toString`, `print`, Sprig's `strval`) and what a
//! text/template action prints. Structs print their fields in declaration order (`{v1.35.0 1
//! 35}`, `&{...}` for a pointer at the top); a pointer inside another value is printed by Go as
//! its memory address, which pallet cannot reproduce: that is refused (recorded for the render,
//! see [`crate::budget::refuse`]), as is a value nested past [`super::MAX_DEPTH`].

use minijinja::value::{Value, ValueKind};

use super::structs::{self, Field};
use super::{
    enter, go_time_format, list_items, map_entries, ApiVersions, Files, GoMap, GoTime, GoType,
    NO_VALUE,
};

/// Go's `strconv.FormatFloat(f, 'g', -1, 64)`, which is what `%v` prints for float64.
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // Rust's `{:e}` gives the shortest round-trip digits, as Go's shortest formatting does.
    let e = format!("{f:e}");
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mant}e{sign}{:02}", exp.abs())
    } else {
        format!("{f}")
    }
}

/// Go's `%v` of a template value; `nil` at the top prints `<no value>`, as an action prints a
/// missing value.
pub fn go_fmt(v: &Value) -> String {
    let mut s = String::new();
    if v.is_none() || v.is_undefined() {
        s.push_str(NO_VALUE);
    } else {
        fmt_value(&mut s, v, 0);
    }
    s
}

/// Sprig's `strval`: a string as it is, `[]byte` as its text, a `fmt.Stringer` through its
/// `String` method, anything else as fmt's `%v` (nil is `<nil>`).
pub fn strval(v: &Value) -> String {
    if let Some(bytes) = v.as_bytes().filter(|_| v.kind() == ValueKind::Bytes) {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let mut out = String::new();
    fmt_value(&mut out, v, 0);
    out
}

/// Sprig's `strslice` of a list: each non-nil item's `strval`.
pub fn strslice(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .filter(|x| !x.is_none() && !x.is_undefined())
        .map(strval)
        .collect()
}

/// What an action `{{ x }}` prints (text/template's `printableValue`): a pointer is followed
/// (`{{ .Capabilities }}` prints the struct, no `&`), an addressable struct with a
/// pointer-receiver `String` method prints through it (`{{ .Capabilities.KubeVersion }}` is
/// `v1.35.0`), a missing value is `<no value>`.
pub fn print_action(v: &Value) -> String {
    if let Some(m) = v.downcast_object_ref::<GoMap>() {
        match m.1 {
            GoType::Addressable("chartutil.KubeVersion") => {
                let version = m.lock().get("Version").cloned().unwrap_or_default();
                return version.as_str().unwrap_or_default().to_string();
            }
            GoType::Struct(ty) | GoType::Addressable(ty) if structs::is_pointer(ty) => {
                let mut out = String::new();
                fmt_struct(&mut out, m, ty, 0);
                return out;
            }
            _ => {}
        }
    }
    go_fmt(v)
}

/// fmt's `%v` of `v`, `depth` levels inside the value printed.
fn fmt_value(out: &mut String, v: &Value, depth: usize) {
    if let Some(m) = v.downcast_object_ref::<GoMap>() {
        if let Some(ty) = m.1.struct_name() {
            if structs::is_pointer(ty) {
                if depth > 0 {
                    refuse_address(out, ty);
                    return;
                }
                out.push('&');
            }
            fmt_struct(out, m, ty, depth);
            return;
        }
    }
    if let Some(t) = v.downcast_object_ref::<GoTime>() {
        out.push_str(&go_time_format(
            t,
            "2006-01-02 15:04:05.999999999 -0700 MST",
        ));
        return;
    }
    if let Some(files) = v.downcast_object_ref::<Files>() {
        out.push_str("map[");
        for (i, (path, bytes)) in files.0.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            out.push_str(path);
            out.push(':');
            fmt_bytes(out, bytes);
        }
        out.push(']');
        return;
    }
    if let Some(versions) = v.downcast_object_ref::<ApiVersions>() {
        out.push('[');
        out.push_str(&versions.0.join(" "));
        out.push(']');
        return;
    }
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("<nil>"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if v.is_integer() {
                out.push_str(&v.to_string());
            } else {
                out.push_str(&go_float(f64::try_from(v.clone()).unwrap_or(0.0)));
            }
        }
        ValueKind::String => out.push_str(v.as_str().unwrap_or_default()),
        ValueKind::Bytes => fmt_bytes(out, v.as_bytes().unwrap_or_default()),
        ValueKind::Map => {
            if enter(depth + 1, "a printed value").is_err() {
                return;
            }
            out.push_str("map[");
            if let Some(m) = map_entries(v) {
                for (i, (k, val)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    out.push_str(k);
                    out.push(':');
                    fmt_value(out, val, depth + 1);
                }
            }
            out.push(']');
        }
        _ => match list_items(v) {
            Some(items) => {
                if enter(depth + 1, "a printed value").is_err() {
                    return;
                }
                out.push('[');
                for (i, it) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    fmt_value(out, it, depth + 1);
                }
                out.push(']');
            }
            None => out.push_str(&v.to_string()),
        },
    }
}

/// `{field field ...}` in declaration order (an embedded struct as a struct of its own).
fn fmt_struct(out: &mut String, m: &GoMap, ty: &str, depth: usize) {
    if enter(depth + 1, "a printed value").is_err() {
        return;
    }
    let values = m.snapshot();
    out.push('{');
    for (i, field) in struct_fields(ty).iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        fmt_value(out, &field_value(&values, field), depth + 1);
    }
    out.push('}');
}

/// The fields of struct type `ty`; a struct pallet has no declaration for has none to print.
fn struct_fields(ty: &str) -> &'static [Field] {
    structs::fields(ty).unwrap_or(&[])
}

/// A field's value in a struct's map; a field pallet does not know the value of (helm's Go
/// version) is empty.
pub(super) fn field_value(
    values: &std::collections::BTreeMap<String, Value>,
    field: &Field,
) -> Value {
    values
        .get(field.name)
        .cloned()
        .unwrap_or_else(|| Value::from(""))
}

fn fmt_bytes(out: &mut String, bytes: &[u8]) {
    out.push('[');
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(&b.to_string());
    }
    out.push(']');
}

/// A pointer inside a printed value: Go prints its address.
fn refuse_address(out: &mut String, ty: &str) {
    crate::budget::refuse(format!(
        "unsupported construct: printing a {ty} inside another value (Go prints its memory \
         address)"
    ));
    out.push_str("0x0");
}

/// Go's `strconv.Quote` (what `%q` and Sprig's `quote` produce).
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() || c == '\u{feff}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_float_matches_fmt_v() {
        assert_eq!(go_float(1.0), "1");
        assert_eq!(go_float(8080.0), "8080");
        assert_eq!(go_float(1000000.0), "1e+06");
        assert_eq!(go_float(1234567.0), "1.234567e+06");
        assert_eq!(go_float(0.5), "0.5");
        assert_eq!(go_float(0.00001), "1e-05");
    }

    #[test]
    fn structs_print_their_fields_in_order() {
        let kv = super::super::kube_version_for_tests;
        let field = kv(GoType::Addressable("chartutil.KubeVersion"));
        assert_eq!(print_action(&field), "v1.35.0");
        assert_eq!(strval(&field), "{v1.35.0 1 35}");
        let copy = kv(GoType::Struct("chartutil.KubeVersion"));
        assert_eq!(print_action(&copy), "{v1.35.0 1 35}");
    }
}
