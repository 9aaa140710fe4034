//! Go text/template's builtins: comparisons (`eq`, `lt`, ...), `len`, `index`, `slice`,
//! `print`/`printf`/`println`, `html`, `js`, `urlquery`.

use super::*;

pub(super) const FUNCS: &[(&str, F)] = &[
    // Go's `call` runs a function value; chart data holds none (values are maps, lists and
    // scalars), so it always fails as text/template does for a nil or non-function operand.
    ("call", |a| {
        let f = arg(&a, 0);
        Err(if f.is_none() || f.is_undefined() {
            err("error calling call: call of nil")
        } else {
            err(format!(
                "error calling call: non-function of type {}",
                type_of(&f)
            ))
        })
    }),
    ("eq", |a| {
        let (first, rest) =
            a.0.split_first()
                .filter(|(_, rest)| !rest.is_empty())
                .ok_or_else(|| err("missing argument for comparison"))?;
        for r in rest {
            if eq_vals(first, r)? {
                return Ok(Value::from(true));
            }
        }
        Ok(Value::from(false))
    }),
    ("ne", |a| {
        want(&a, 2, "ne")?;
        Ok(Value::from(!eq_vals(&a[0], &a[1])?))
    }),
    ("lt", |a| {
        want(&a, 2, "lt")?;
        Ok(Value::from(cmp(&a[0], &a[1])?.is_lt()))
    }),
    ("le", |a| {
        want(&a, 2, "le")?;
        Ok(Value::from(cmp(&a[0], &a[1])?.is_le()))
    }),
    ("gt", |a| {
        want(&a, 2, "gt")?;
        Ok(Value::from(cmp(&a[0], &a[1])?.is_gt()))
    }),
    ("ge", |a| {
        want(&a, 2, "ge")?;
        Ok(Value::from(cmp(&a[0], &a[1])?.is_ge()))
    }),
    ("len", |a| {
        let v = arg(&a, 0);
        match v.kind() {
            ValueKind::String => Ok(Value::from(v.as_str().unwrap_or_default().len())),
            _ => v
                .len()
                .map(Value::from)
                .ok_or_else(|| err(format!("len of type {}", type_of(&v)))),
        }
    }),
    ("index", |a| {
        let (first, keys) =
            a.0.split_first()
                .ok_or_else(|| err("index of untyped nil"))?;
        let mut v = first.clone();
        for k in keys {
            v = if let Some(m) = map_entries(&v) {
                if k.kind() != ValueKind::String {
                    return Err(err(format!(
                        "value has type {}; should be string",
                        type_of(k)
                    )));
                }
                m.get(&s(k))
                    .cloned()
                    .unwrap_or_else(|| missing_key_value(&v))
            } else if v.is_none() {
                return Err(err("index of untyped nil"));
            } else {
                // Go indexes slices and strings with an integer only.
                if !(k.kind() == ValueKind::Number && k.is_integer()) {
                    return Err(err(format!(
                        "cannot index slice/array with type {}",
                        type_of(k)
                    )));
                }
                let i = to_i64(k);
                if let Some(text) = v.as_str() {
                    let b = text.as_bytes();
                    let byte = usize::try_from(i)
                        .ok()
                        .and_then(|i| b.get(i))
                        .ok_or_else(|| {
                            err(format!("error calling index: index out of range: {i}"))
                        })?;
                    v = Value::from(i64::from(*byte));
                    continue;
                }
                let items = list_items(&v)
                    .ok_or_else(|| err(format!("can't index item of type {}", type_of(&v))))?;
                items
                    .get(usize::try_from(i).unwrap_or(usize::MAX))
                    .cloned()
                    .ok_or_else(|| err(format!("error calling index: index out of range: {i}")))?
            };
        }
        Ok(v)
    }),
    ("print", |a| Ok(Value::from(sprint(&a.0)))),
    ("println", |a| {
        Ok(Value::from(format!(
            "{}\n",
            a.0.iter()
                .map(|v| if v.is_none() {
                    "<nil>".to_string()
                } else {
                    go_fmt(v)
                })
                .collect::<Vec<_>>()
                .join(" ")
        )))
    }),
    ("printf", |a| {
        let (f, rest) =
            a.0.split_first()
                .ok_or_else(|| err("wrong number of args for printf"))?;
        Ok(Value::from(sprintf(&s(f), rest)))
    }),
    ("html", |a| {
        Ok(Value::from(
            sprint(&a.0)
                .replace('&', "&amp;")
                .replace('\'', "&#39;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
                .replace('"', "&#34;"),
        ))
    }),
    ("js", |a| {
        let mut out = String::new();
        for c in sprint(&a.0).chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\'' => out.push_str("\\'"),
                '"' => out.push_str("\\\""),
                '<' => out.push_str("\\u003C"),
                '>' => out.push_str("\\u003E"),
                '&' => out.push_str("\\u0026"),
                '=' => out.push_str("\\u003D"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if !go_is_print(c) => out.push_str(&format!("\\u{:04X}", c as u32)),
                c => out.push(c),
            }
        }
        Ok(Value::from(out))
    }),
    ("urlquery", |a| {
        let mut out = String::new();
        for b in sprint(&a.0).bytes() {
            match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    out.push(b as char)
                }
                b' ' => out.push('+'),
                _ => out.push_str(&format!("%{b:02X}")),
            }
        }
        Ok(Value::from(out))
    }),
    ("slice", |a| {
        // Sprig's slice (which replaces Go's builtin in helm) only accepts lists.
        let (first, idx) =
            a.0.split_first()
                .ok_or_else(|| err("wrong number of args for slice"))?;
        let Some(items) = list_items(first) else {
            return Err(err(format!(
                "list should be type of slice or array but {}",
                type_of(first)
            )));
        };
        if items.is_empty() {
            return Ok(Value::from(()));
        }
        let bound = |v: &Value| -> Result<usize, Error> {
            usize::try_from(to_i64(v))
                .map_err(|_| err("reflect.Value.Slice: slice index out of bounds"))
        };
        let i = idx.first().map(bound).transpose()?.unwrap_or(0);
        let j = idx.get(1).map(bound).transpose()?.unwrap_or(items.len());
        if i > j || j > items.len() {
            return Err(err(format!("error calling slice: index out of range: {j}")));
        }
        Ok(GoList::value(items[i..j].to_vec()))
    }),
];

/// text/template's `basicKind`: the kinds `eq` and `lt` compare; `None` for nil, maps,
/// slices and structs.
fn basic_kind(v: &Value) -> Option<u8> {
    match v.kind() {
        ValueKind::Bool => Some(0),
        ValueKind::Number if v.is_integer() => Some(1),
        ValueKind::Number => Some(2),
        ValueKind::String => Some(3),
        _ => None,
    }
}

fn incompatible(a: &Value, b: &Value) -> Error {
    err(format!(
        "incompatible types for comparison: {} and {}",
        type_of(a),
        type_of(b)
    ))
}

/// Go template `lt` (and `le`, `gt`, `ge` through it): ints with ints, floats with floats,
/// strings with strings; nil, bools, maps and slices are not ordered.
pub(super) fn cmp(a: &Value, b: &Value) -> Result<std::cmp::Ordering, Error> {
    let (Some(ka), Some(kb)) = (basic_kind(a), basic_kind(b)) else {
        return Err(err("invalid type for comparison"));
    };
    if ka != kb {
        return Err(incompatible(a, b));
    }
    match ka {
        1 => Ok(a.as_i64().cmp(&b.as_i64())),
        2 => to_f64(a)
            .partial_cmp(&to_f64(b))
            .ok_or_else(|| err("unsupported construct: ordering NaN")),
        3 => Ok(a.as_str().cmp(&b.as_str())),
        _ => Err(err("invalid type for comparison")),
    }
}

/// Go template `eq` of two operands (Go 1.2x `eq`): basic values of one kind compare by
/// value (bools too); nil equals only nil and compares unequal, without error, to anything
/// else; two non-nil values of different kinds, or maps and slices, are an error.
pub(super) fn eq_vals(a: &Value, b: &Value) -> Result<bool, Error> {
    let nil = |v: &Value| v.is_none() || v.is_undefined();
    match (basic_kind(a), basic_kind(b)) {
        (Some(ka), Some(kb)) if ka != kb => Err(incompatible(a, b)),
        (Some(0), Some(_)) => Ok(a.is_true() == b.is_true()),
        (Some(2), Some(_)) => Ok(to_f64(a) == to_f64(b)),
        (Some(_), Some(_)) => Ok(cmp(a, b)? == std::cmp::Ordering::Equal),
        _ if nil(a) || nil(b) => Ok(nil(a) && nil(b)),
        (Some(_), None) | (None, Some(_)) => Err(incompatible(a, b)),
        // time.Time is a comparable struct in Go: `ne $now ($now | dateModify "1h")` (cilium's
        // duration check). Pallet's times are UTC without a monotonic reading, so the instant
        // decides.
        (None, None) if a.downcast_object_ref::<GoTime>().is_some() => {
            match (
                a.downcast_object_ref::<GoTime>(),
                b.downcast_object_ref::<GoTime>(),
            ) {
                (Some(x), Some(y)) => Ok((x.secs, x.nanos) == (y.secs, y.nanos)),
                _ => Err(err(format!(
                    "non-comparable types {}: time.Time, {}: {}",
                    sprintf("%v", std::slice::from_ref(a)),
                    type_of(b),
                    sprintf("%v", std::slice::from_ref(b)),
                ))),
            }
        }
        (None, None) => Err(err(format!(
            "non-comparable type {}: {}",
            sprintf("%s", std::slice::from_ref(b)),
            type_of(b)
        ))),
    }
}

/// Go's `fmt.Sprint`: spaces between operands when neither is a string.
pub(super) fn sprint(args: &[Value]) -> String {
    let mut out = String::new();
    for (i, a) in args.iter().enumerate() {
        if i > 0 && a.kind() != ValueKind::String && args[i - 1].kind() != ValueKind::String {
            out.push(' ');
        }
        out.push_str(&if a.is_none() {
            "<nil>".to_string()
        } else {
            go_fmt(a)
        });
    }
    out
}

/// Go's `unicode.IsPrint`, close enough for escaping: letters, marks, numbers, punctuation,
/// symbols and the ASCII space; not controls, other spaces, separators or format characters.
pub(super) fn go_is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    !(c.is_control()
        || c.is_whitespace()
        || matches!(c as u32, 0xAD | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0xFEFF))
}
