//! Values as Go's encoding/json writes them (`toJson`, `toRawJson`, `toPrettyJson`) and as
//! JSON trees (`toYaml` goes through JSON, as sigs.k8s.io/yaml does). Maps are written with
//! sorted keys, structs field by field in declaration order under their `json` names,
//! `omitempty` fields left out when empty, embedded structs in line; `[]byte` (`.Files`) is
//! base64, `time.Time` RFC 3339, a semver version its string. Both walks are bounded by
//! [`super::MAX_DEPTH`].

use std::collections::BTreeMap;

use minijinja::value::{Value, ValueKind};
use minijinja::Error;

use super::print::field_value;
use super::structs;
use super::{
    enter, go_time_format, list_items, map_entries, type_of, ApiVersions, Files, GoMap, GoTime,
};

/// Go's JSON number formatting for float64.
pub fn json_float(f: f64) -> String {
    let a = f.abs();
    if a != 0.0 && !(1e-6..1e21).contains(&a) {
        let e = format!("{f:e}");
        let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        // encoding/json prints e-7 (not e-07) but keeps two digits for positive exponents.
        if exp < 0 {
            format!("{mant}e-{}", exp.abs())
        } else {
            format!("{mant}e+{exp:02}")
        }
    } else {
        format!("{f}")
    }
}

/// How to write JSON: `json.Marshal` escapes `<`, `>` and `&` (toJson); Sprig's toRawJson does
/// not; `json.MarshalIndent(v, "", "  ")` indents (toPrettyJson).
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonStyle {
    /// Escape `<`, `>` and `&` as `\u003c`, `\u003e`, `\u0026`.
    pub escape_html: bool,
    /// One member per line, two spaces per level.
    pub indent: bool,
}

/// Why a value could not be written.
#[derive(Debug)]
pub enum MarshalError {
    /// encoding/json's own error (`json: unsupported value: NaN`): Sprig's `toJson` gives ""
    /// for it, the `must` forms fail with it.
    Go(String),
    /// Pallet refuses the value (nested past the budget, or of a kind it cannot write): the
    /// render's error, whatever the function does with errors.
    Refused(Error),
}

/// `v` as encoding/json writes it.
pub fn marshal(v: &Value, style: JsonStyle) -> Result<String, MarshalError> {
    let mut w = Writer {
        out: String::new(),
        style,
    };
    w.value(v, 0)?;
    Ok(w.out)
}

struct Writer {
    out: String,
    style: JsonStyle,
}

impl Writer {
    fn value(&mut self, v: &Value, depth: usize) -> Result<(), MarshalError> {
        if let Some(m) = v.downcast_object_ref::<GoMap>() {
            if let Some(ty) = m.1.struct_name() {
                let members = struct_members(m, ty);
                return self.members(
                    '{',
                    '}',
                    members.into_iter().map(|(k, v)| (Some(k), v)),
                    depth,
                );
            }
        }
        if let Some(files) = v.downcast_object_ref::<Files>() {
            let members = files
                .0
                .iter()
                .map(|(k, b)| (Some(k.to_string()), Value::from(base64(b))));
            return self.members('{', '}', members, depth);
        }
        if let Some(versions) = v.downcast_object_ref::<ApiVersions>() {
            let items = versions.0.iter().map(|s| (None, Value::from(s.as_str())));
            return self.members('[', ']', items, depth);
        }
        if let Some(text) = text_form(v) {
            self.string(&text);
            return Ok(());
        }
        if v.downcast_object_ref::<super::NilList>().is_some() {
            self.out.push_str("null");
            return Ok(());
        }
        match v.kind() {
            ValueKind::Undefined | ValueKind::None => self.out.push_str("null"),
            ValueKind::Bool => self
                .out
                .push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number if v.is_integer() => self.out.push_str(&v.to_string()),
            ValueKind::Number => {
                let f = f64::try_from(v.clone()).unwrap_or(0.0);
                if !f.is_finite() {
                    return Err(MarshalError::Go(format!(
                        "json: unsupported value: {}",
                        super::go_float(f)
                    )));
                }
                self.out.push_str(&json_float(f));
            }
            ValueKind::String => self.string(v.as_str().unwrap_or_default()),
            ValueKind::Map => {
                let entries = map_entries(v).unwrap_or_default();
                return self.members(
                    '{',
                    '}',
                    entries.into_iter().map(|(k, v)| (Some(k), v)),
                    depth,
                );
            }
            ValueKind::Seq | ValueKind::Iterable => {
                let items = list_items(v).unwrap_or_default();
                return self.members('[', ']', items.into_iter().map(|v| (None, v)), depth);
            }
            _ => return Err(MarshalError::Refused(unwritable(v))),
        }
        Ok(())
    }

    /// An object (`{`) or array (`[`) of `members` (keys for an object).
    fn members(
        &mut self,
        open: char,
        close: char,
        members: impl Iterator<Item = (Option<String>, Value)>,
        depth: usize,
    ) -> Result<(), MarshalError> {
        enter(depth + 1, "a value written as JSON").map_err(MarshalError::Refused)?;
        self.out.push(open);
        let mut any = false;
        for (key, v) in members {
            if any {
                self.out.push(',');
            }
            any = true;
            self.newline(depth + 1);
            if let Some(key) = key {
                self.string(&key);
                self.out.push(':');
                if self.style.indent {
                    self.out.push(' ');
                }
            }
            self.value(&v, depth + 1)?;
        }
        if any {
            self.newline(depth);
        }
        self.out.push(close);
        Ok(())
    }

    fn newline(&mut self, level: usize) {
        if self.style.indent {
            self.out.push('\n');
            for _ in 0..level {
                self.out.push_str("  ");
            }
        }
    }

    fn string(&mut self, s: &str) {
        // encoding/json always escapes the JS line separators.
        let j = serde_json::to_string(s)
            .unwrap_or_default()
            .replace('\u{2028}', "\\u2028")
            .replace('\u{2029}', "\\u2029");
        if self.style.escape_html {
            self.out.push_str(
                &j.replace('<', "\\u003c")
                    .replace('>', "\\u003e")
                    .replace('&', "\\u0026"),
            );
        } else {
            self.out.push_str(&j);
        }
    }
}

/// The members of a struct as JSON writes them: each field under its JSON name, `omitempty`
/// ones only when not empty, an embedded struct's fields in line.
fn struct_members(m: &GoMap, ty: &str) -> Vec<(String, Value)> {
    let values = m.snapshot();
    let mut out = Vec::new();
    for field in structs::fields(ty).unwrap_or(&[]) {
        let value = field_value(&values, field);
        if field.embedded {
            if let Some((inner, inner_ty)) = value
                .downcast_object_ref::<GoMap>()
                .and_then(|g| Some((g, g.1.struct_name()?)))
            {
                out.extend(struct_members(inner, inner_ty));
            }
            continue;
        }
        if !(field.omitempty && is_empty(&value)) {
            out.push((field.json.to_string(), value));
        }
    }
    out
}

/// encoding/json's `isEmptyValue`: false, 0, "", nil and containers without items (a struct is
/// never empty).
fn is_empty(v: &Value) -> bool {
    if let Some(m) = v.downcast_object_ref::<GoMap>() {
        return m.1.struct_name().is_none() && m.lock().is_empty();
    }
    if v.downcast_object_ref::<GoTime>().is_some() {
        return false;
    }
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => true,
        ValueKind::Bool | ValueKind::Number | ValueKind::String => !v.is_true(),
        ValueKind::Bytes => v.as_bytes().is_none_or(<[u8]>::is_empty),
        _ => v.len() == Some(0),
    }
}

/// The JSON string of a value that marshals as one: a time (RFC 3339), a semver version, bytes
/// (base64).
fn text_form(v: &Value) -> Option<String> {
    if let Some(t) = v.downcast_object_ref::<GoTime>() {
        return Some(go_time_format(t, "2006-01-02T15:04:05.999999999Z07:00"));
    }
    if let Some(version) = v.downcast_object_ref::<crate::helm::semver::Version>() {
        return Some(version.to_string());
    }
    if v.kind() == ValueKind::Bytes {
        return Some(base64(v.as_bytes().unwrap_or_default()));
    }
    None
}

fn base64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// A value of a kind no Go template value has (an engine object): refused.
fn unwritable(v: &Value) -> Error {
    super::err(crate::budget::refuse(format!(
        "unsupported construct: a {} written as JSON",
        type_of(v)
    )))
}

/// `v` as a JSON tree, as encoding/json would write it (a float that is not finite is null;
/// sigs.k8s.io/yaml and the comparisons use this). Bounded by [`super::MAX_DEPTH`].
pub fn to_json(v: &Value) -> Result<serde_json::Value, Error> {
    tree(v, 0)
}

fn tree(v: &Value, depth: usize) -> Result<serde_json::Value, Error> {
    let object = |members: Vec<(String, Value)>| -> Result<serde_json::Value, Error> {
        enter(depth + 1, "a value converted to JSON")?;
        let mut map = serde_json::Map::new();
        for (k, v) in members {
            map.insert(k, tree(&v, depth + 1)?);
        }
        Ok(serde_json::Value::Object(map))
    };
    if let Some(m) = v.downcast_object_ref::<GoMap>() {
        if let Some(ty) = m.1.struct_name() {
            return object(struct_members(m, ty));
        }
    }
    if let Some(files) = v.downcast_object_ref::<Files>() {
        return object(
            files
                .0
                .iter()
                .map(|(k, b)| (k.clone(), Value::from(base64(b))))
                .collect(),
        );
    }
    if let Some(versions) = v.downcast_object_ref::<ApiVersions>() {
        return Ok(serde_json::Value::Array(
            versions
                .0
                .iter()
                .map(|s| serde_json::Value::String(s.clone()))
                .collect(),
        ));
    }
    if let Some(text) = text_form(v) {
        return Ok(serde_json::Value::String(text));
    }
    if v.downcast_object_ref::<super::NilList>().is_some() {
        return Ok(serde_json::Value::Null);
    }
    Ok(match v.kind() {
        ValueKind::Undefined | ValueKind::None => serde_json::Value::Null,
        ValueKind::Bool => serde_json::Value::Bool(v.is_true()),
        ValueKind::Number => match v.as_i64().filter(|_| v.is_integer()) {
            Some(i) => serde_json::Value::from(i),
            None if v.is_integer() => u64::try_from(v.clone())
                .map(serde_json::Value::from)
                .unwrap_or(serde_json::Value::Null),
            None => serde_json::Number::from_f64(f64::try_from(v.clone()).unwrap_or(0.0))
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
        },
        ValueKind::String => serde_json::Value::String(v.as_str().unwrap_or_default().to_string()),
        ValueKind::Map => {
            let entries: BTreeMap<String, Value> = map_entries(v).unwrap_or_default();
            return object(entries.into_iter().collect());
        }
        ValueKind::Seq | ValueKind::Iterable => {
            enter(depth + 1, "a value converted to JSON")?;
            let items = list_items(v).unwrap_or_default();
            serde_json::Value::Array(
                items
                    .iter()
                    .map(|x| tree(x, depth + 1))
                    .collect::<Result<_, _>>()?,
            )
        }
        _ => return Err(unwritable(v)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kube_version() -> Value {
        super::super::kube_version_for_tests(super::super::GoType::Struct("chartutil.KubeVersion"))
    }

    #[test]
    fn a_struct_is_written_field_by_field_in_declaration_order() {
        let json = marshal(&kube_version(), JsonStyle::default()).unwrap();
        assert_eq!(json, r#"{"Version":"v1.35.0","Major":"1","Minor":"35"}"#);
        let pretty = marshal(
            &kube_version(),
            JsonStyle {
                indent: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            pretty,
            "{\n  \"Version\": \"v1.35.0\",\n  \"Major\": \"1\",\n  \"Minor\": \"35\"\n}"
        );
        assert_eq!(
            marshal(
                &GoMap::value(BTreeMap::new()),
                JsonStyle {
                    indent: true,
                    ..Default::default()
                }
            )
            .unwrap(),
            "{}"
        );
    }

    #[test]
    fn a_float_that_is_not_finite_is_encoding_json_s_error() {
        match marshal(&Value::from(f64::NAN), JsonStyle::default()) {
            Err(MarshalError::Go(message)) => {
                assert_eq!(message, "json: unsupported value: NaN")
            }
            other => panic!("{other:?}"),
        }
    }
}
