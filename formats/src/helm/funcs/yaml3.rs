//! Helm's `toYamlPretty`: go-yaml v3's encoder with an indent of 2, on the template value as
//! it is (no JSON round trip). Against `toYaml` (go-yaml v2 after JSON): sequences are
//! indented under their key, map keys sort in v3's natural order (`k2` before `k10`), floats
//! print in Go's `%g` form (`1e+06`), and long scalars are never folded. Which strings need
//! quotes is the same decision (v3 quotes YAML 1.1's old booleans and base-60 numbers too).

use super::yaml::{sort_keys, yaml_string};
use super::*;

pub(super) const FUNCS: &[(&str, F)] = &[("toYamlPretty", |a| {
    let mut out = String::new();
    node(&mut out, &a[0], 0, false)?;
    while out.ends_with('\n') {
        out.pop();
    }
    Ok(Value::from(out))
})];

fn scalar(v: &Value, indent: usize) -> Result<String, Error> {
    Ok(match v.kind() {
        ValueKind::Undefined | ValueKind::None => "null".into(),
        ValueKind::Bool => if v.is_true() { "true" } else { "false" }.into(),
        ValueKind::Number if v.is_integer() => v.to_string(),
        ValueKind::Number => {
            let f = f64::try_from(v.clone()).unwrap_or(0.0);
            if f.is_nan() {
                ".nan".into()
            } else if f.is_infinite() {
                if f > 0.0 { ".inf" } else { "-.inf" }.into()
            } else {
                go_float(f)
            }
        }
        ValueKind::String => yaml_string(v.as_str().unwrap_or_default(), indent, None),
        ValueKind::Seq => "[]".into(),
        ValueKind::Map
            if v.downcast_object_ref::<GoMap>()
                .is_some_and(|m| m.1.struct_name().is_none()) =>
        {
            "{}".into()
        }
        _ => {
            return Err(err(crate::budget::refuse(format!(
                "unsupported construct: toYamlPretty of a {}",
                type_of(v)
            ))))
        }
    })
}

/// A map key: the same quoting as a value (v3 writes `? ` complex keys past 128 characters,
/// pallet does not).
fn key(k: &str) -> String {
    yaml_string(k, 0, None)
}

fn is_block(v: &Value) -> Option<bool> {
    if let Some(m) = v.downcast_object_ref::<GoMap>() {
        if m.1.struct_name().is_some() {
            return None;
        }
        return (!m.snapshot().is_empty()).then_some(true);
    }
    if v.kind() == ValueKind::Seq {
        return (!list_items(v).unwrap_or_default().is_empty()).then_some(false);
    }
    None
}

/// Writes `v` as a block at column `indent`; `inline` when its first line continues a
/// sequence entry's `- `.
fn node(out: &mut String, v: &Value, indent: usize, inline: bool) -> Result<(), Error> {
    // Each level is two columns deeper.
    super::super::value::enter(indent / 2 + 1, "a value written as YAML")?;
    let pad = " ".repeat(indent);
    match is_block(v) {
        Some(true) => {
            let mut entries: Vec<(String, Value)> =
                map_entries(v).unwrap_or_default().into_iter().collect();
            sort_keys(&mut entries, |e| e.0.as_str(), true);
            for (i, (k, val)) in entries.iter().enumerate() {
                if !(inline && i == 0) {
                    out.push_str(&pad);
                }
                out.push_str(&key(k));
                out.push(':');
                if is_block(val).is_some() {
                    out.push('\n');
                    node(out, val, indent + 2, false)?;
                } else {
                    out.push(' ');
                    out.push_str(&scalar(val, indent + 2)?);
                    out.push('\n');
                }
            }
        }
        Some(false) => {
            for (i, item) in list_items(v).unwrap_or_default().iter().enumerate() {
                if !(inline && i == 0) {
                    out.push_str(&pad);
                }
                out.push_str("- ");
                if is_block(item).is_some() {
                    node(out, item, indent + 2, true)?;
                } else {
                    out.push_str(&scalar(item, indent + 2)?);
                    out.push('\n');
                }
            }
        }
        None => {
            if !inline {
                out.push_str(&pad);
            }
            out.push_str(&scalar(v, indent + 2)?);
            out.push('\n');
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_key_order_v3() {
        let mut keys = vec!["k10", "k2", "K", "a1b", "a01b", "b", "10", "9"];
        sort_keys(&mut keys, |k| k, true);
        assert_eq!(keys, ["9", "10", "K", "a1b", "a01b", "b", "k2", "k10"]);
    }
}
