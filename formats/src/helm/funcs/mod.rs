//! The runtime the translated templates call: Go's builtins and the Sprig/Helm functions charts
//! use, over the Go value model of [`super::value`].
//!
//! This module holds field access, method calls, `range`, `.Files`, the conversions the
//! functions share, and the function lookup (registration). The functions themselves live in
//! one file per family, each with its own `FUNCS` table: see `FAMILIES` in `registry.rs`.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use minijinja::value::{Enumerator, Object, ObjectRepr, Rest, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

use super::chart::class_contains;
use super::parse;
use super::signatures::{self, ALIASES};
use super::translate;
pub(crate) use super::value::err;
pub use super::value::{
    as_copy, deep_copy, deep_equal, from_json, go_float, go_fmt, go_int64, go_quote, go_uint64,
    is_map, json_float, kind_of, list_items, make_copy, map_entries, marshal, number_type,
    print_action, strslice, strval, to_json, type_of, ApiVersions, Files, GoList, GoMap, GoNumber,
    GoTime, GoType, JsonStyle, MarshalError, Method, NilList, NO_VALUE,
};
pub use super::value::{civil, days_from_civil, go_time_format, DAYS, MONTHS};

mod budgets;
mod builtins;
mod crypto;
mod dates;
mod dicts;
mod encoding;
mod lists;
mod numbers;
mod paths;
mod random;
mod regexp;
mod registry;
mod rsa_prime;
mod strings;
mod templates;
mod toml;
mod types;
mod urls;
mod x509;
mod yaml;
mod yaml3;

use dates::*;
use encoding::*;
use random::*;
use templates::*;

pub use random::Rng;
pub use registry::{check_args, known, register};
pub use templates::{render_define, LookupTable};
pub use yaml::to_yaml;

fn glob_match(pat: &str, name: &str) -> bool {
    // Helm uses gobwas/glob with '/' as separator: `*` stays within a path segment, `**`
    // crosses, `?` is one character of a segment, `[abc]`/`[a-z]`/`[!a]` one character of a
    // set, `{a,b}` alternatives, `\` escapes.
    fn m(p: &[char], n: &[char]) -> bool {
        match p.split_first() {
            None => n.is_empty(),
            Some(('*', rest)) if rest.first() == Some(&'*') => {
                (0..=n.len()).any(|i| m(&rest[1..], &n[i..]))
            }
            Some(('*', rest)) => (0..=n.len())
                .take_while(|&i| i == 0 || n[i - 1] != '/')
                .any(|i| m(rest, &n[i..])),
            Some(('?', rest)) => n.first().is_some_and(|c| *c != '/') && m(rest, &n[1..]),
            Some(('[', rest)) => {
                let Some(close) = rest.iter().skip(1).position(|c| *c == ']').map(|i| i + 1) else {
                    return n.first() == Some(&'[') && m(rest, &n[1..]);
                };
                let (negate, set) = match rest[..close].split_first() {
                    Some(('!', s)) => (true, s),
                    _ => (false, &rest[..close]),
                };
                let Some(&c) = n.first() else {
                    return false;
                };
                class_contains(set, c) != negate && m(&rest[close + 1..], &n[1..])
            }
            Some(('\\', rest)) if !rest.is_empty() => {
                n.first() == Some(&rest[0]) && m(&rest[1..], &n[1..])
            }
            Some((c, rest)) => n.first() == Some(c) && m(rest, &n[1..]),
        }
    }
    let n: Vec<char> = name.chars().collect();
    expand_braces(pat)
        .iter()
        .any(|p| m(&p.chars().collect::<Vec<_>>(), &n))
}

/// `{a,b}` alternatives of a glob, expanded into plain patterns (nested groups too).
fn expand_braces(pat: &str) -> Vec<String> {
    let chars: Vec<char> = pat.chars().collect();
    let mut depth = 0;
    let mut open = None;
    let mut commas = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            '{' => {
                if depth == 0 {
                    open = Some(i);
                    commas.clear();
                }
                depth += 1;
            }
            ',' if depth == 1 => commas.push(i),
            '}' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    let Some(o) = open else { break };
                    let prefix: String = chars[..o].iter().collect();
                    let suffix: String = chars[i + 1..].iter().collect();
                    let mut bounds = vec![o];
                    bounds.extend(&commas);
                    bounds.push(i);
                    return bounds
                        .windows(2)
                        .flat_map(|w| {
                            let alt: String = chars[w[0] + 1..w[1]].iter().collect();
                            expand_braces(&format!("{prefix}{alt}{suffix}"))
                        })
                        .collect();
                }
            }
            _ => {}
        }
        i += 1;
    }
    vec![pat.to_string()]
}

impl Object for Files {
    // Go's `Files` is a `map[string][]byte`: ranging over it yields path → bytes.
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.0
            .get(key.as_str()?)
            .map(|b| Value::from_bytes(b.clone()))
    }
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        let keys: Vec<Value> = self.0.keys().map(|k| Value::from(k.as_str())).collect();
        Enumerator::Iter(Box::new(keys.into_iter()))
    }
    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        Some(self.0.len())
    }
    fn call_method(
        self: &Arc<Self>,
        _state: &mut State<'_, '_>,
        method: &str,
        args: &[Value],
    ) -> Result<Value, Error> {
        self.method(method, args)
    }
}

impl Files {
    fn method(&self, method: &str, args: &[Value]) -> Result<Value, Error> {
        let arg = |i: usize| args.get(i).map(go_fmt).unwrap_or_default();
        let get = |p: &str| {
            self.0
                .get(p)
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default()
        };
        match method {
            "Get" => Ok(Value::from(get(&arg(0)))),
            "GetBytes" => Ok(Value::from_bytes(
                self.0.get(&arg(0)).cloned().unwrap_or_default(),
            )),
            "Lines" => {
                let s = get(&arg(0));
                let s = s.strip_suffix('\n').unwrap_or(&s);
                if s.is_empty() && !self.0.contains_key(&arg(0)) {
                    return Ok(Value::from(Vec::<Value>::new()));
                }
                Ok(Value::from(
                    s.split('\n').map(Value::from).collect::<Vec<_>>(),
                ))
            }
            "Glob" => {
                let pat = arg(0);
                let sel = self
                    .0
                    .iter()
                    .filter(|(k, _)| glob_match(&pat, k))
                    .map(|(k, v)| (k.clone(), v.clone()));
                Ok(Value::from_object(Files(Arc::new(sel.collect()))))
            }
            "AsConfig" | "AsSecrets" => {
                let mut m = BTreeMap::new();
                for (k, v) in self.0.iter() {
                    let base = k.rsplit('/').next().unwrap_or(k).to_string();
                    let val = if method == "AsConfig" {
                        String::from_utf8_lossy(v).into_owned()
                    } else {
                        b64(v)
                    };
                    m.insert(base, serde_json::Value::String(val));
                }
                Ok(Value::from(to_yaml(&serde_json::Value::Object(
                    m.into_iter().collect(),
                ))))
            }
            _ => Err(err(format!("unsupported construct: .Files.{method}"))),
        }
    }
}

impl Object for ApiVersions {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Seq
    }
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.0.get(key.as_usize()?).map(|s| Value::from(s.as_str()))
    }
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Seq(self.0.len())
    }
    fn call_method(
        self: &Arc<Self>,
        _state: &mut State<'_, '_>,
        method: &str,
        args: &[Value],
    ) -> Result<Value, Error> {
        self.method(method, args)
    }
}

impl ApiVersions {
    fn method(&self, method: &str, args: &[Value]) -> Result<Value, Error> {
        match method {
            "Has" => {
                let want = args.first().map(go_fmt).unwrap_or_default();
                Ok(Value::from(self.0.contains(&want)))
            }
            _ => Err(err(format!(
                "unsupported construct: .Capabilities.APIVersions.{method}"
            ))),
        }
    }
}

fn b64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// Field access with Go semantics: map keys (missing → nil), struct-like objects, zero-argument
/// methods; a field of nil or of a scalar is an error, as in Helm.
fn field(v: &Value, name: &str) -> Result<Value, Error> {
    if v.is_none() || v.is_undefined() {
        return Err(err(format!("nil pointer evaluating interface {{}}.{name}")));
    }
    if let Some(m) = v.downcast_object_ref::<GoMap>() {
        // chartutil.Values' niladic methods win over keys of the same name, as in Go.
        if m.1 == GoType::Values && matches!(name, "AsMap" | "YAML") {
            return values_method(m, name, &[]);
        }
        if let Some(x) = m.lock().get(name) {
            return Ok(x.clone());
        }
        return match m.1.struct_name() {
            Some("version.BuildInfo") if name == "GoVersion" => Err(err(crate::budget::refuse(
                "unsupported construct: .Capabilities.HelmVersion.GoVersion (the Go release helm was built with is not known here)",
            ))),
            // A struct has a fixed set of fields; a map gives its zero value for a missing key.
            Some(ty) => Err(err(format!("can't evaluate field {name} in type {ty}"))),
            None => Ok(missing_key_value(v)),
        };
    }
    if let Some(f) = v.downcast_object_ref::<Files>() {
        // Niladic methods used as fields: `(.Files.Glob "x").AsConfig`.
        return match name {
            "AsConfig" | "AsSecrets" => f.method(name, &[]),
            // engine.files is a map[string][]byte: a missing file is an empty []byte.
            _ => Ok(Value::from_bytes(
                f.0.get(name).cloned().unwrap_or_default(),
            )),
        };
    }
    if let Some(obj) = v.as_object() {
        if let Some(x) = obj.get_value(&Value::from(name)) {
            return Ok(x);
        }
        if v.kind() == ValueKind::Map {
            return Ok(Value::from(()));
        }
        return Err(err(format!(
            "can't evaluate field {name} in type {}",
            type_of(v)
        )));
    }
    if v.kind() == ValueKind::Map {
        return Ok(v
            .get_attr(name)
            .ok()
            .filter(|x| !x.is_undefined())
            .unwrap_or(Value::from(())));
    }
    Err(err(format!(
        "can't evaluate field {name} in type {}",
        type_of(v)
    )))
}

/// The methods of helm's `chartutil.Values` (`.Values.AsMap`, `.Values.Table "a.b"`, ...).
fn values_method(m: &GoMap, name: &str, args: &[Value]) -> Result<Value, Error> {
    let want = |n: usize| {
        if args.len() == n {
            Ok(())
        } else {
            Err(err(format!(
                "wrong number of args for {name}: want {n} got {}",
                args.len()
            )))
        }
    };
    let path_arg = || match args.first() {
        Some(a) if a.kind() == ValueKind::String => Ok(a.as_str().unwrap_or_default().to_string()),
        Some(a) => Err(err(format!(
            "wrong type for value; expected string; got {}",
            type_of(a)
        ))),
        None => Err(err(format!(
            "wrong number of args for {name}: want 1 got 0"
        ))),
    };
    // Values.Table: each path element must name a table (a map).
    let table = |path: &str| -> Result<BTreeMap<String, Value>, String> {
        let mut t = m.snapshot();
        for part in path.split('.') {
            match t.get(part).and_then(|v| {
                v.downcast_object_ref::<GoMap>()
                    .filter(|g| matches!(g.1, GoType::Map | GoType::Values))
                    .map(GoMap::snapshot)
            }) {
                Some(next) => t = next,
                None => return Err(format!("{part:?} is not a table")),
            }
        }
        Ok(t)
    };
    let is_table = |v: &Value| {
        v.downcast_object_ref::<GoMap>()
            .is_some_and(|g| matches!(g.1, GoType::Map | GoType::Values))
    };
    match name {
        "AsMap" => {
            want(0)?;
            Ok(GoMap::value(m.snapshot()))
        }
        "YAML" => {
            want(0)?;
            let v = to_json(&GoMap::value(m.snapshot()))?;
            Ok(Value::from(format!("{}\n", yaml::to_yaml(&v))))
        }
        "Table" => {
            want(1)?;
            let path = path_arg()?;
            table(&path)
                .map(|t| GoMap::typed(t, GoType::Values))
                .map_err(|e| err(format!("error calling Table: {e}")))
        }
        "PathValue" => {
            want(1)?;
            let path = path_arg()?;
            if path.is_empty() {
                return Err(err("error calling PathValue: YAML path cannot be empty"));
            }
            let (parent, key) = match path.rsplit_once('.') {
                Some((p, k)) => (Some(p), k),
                None => (None, path.as_str()),
            };
            let no_value = || err(format!("error calling PathValue: {key:?} is not a value"));
            let t = match parent {
                Some(p) => table(p).map_err(|_| no_value())?,
                None => m.snapshot(),
            };
            match t.get(key) {
                Some(v) if !is_table(v) => Ok(v.clone()),
                _ => Err(no_value()),
            }
        }
        _ => Err(err(format!(
            "unsupported construct: method call .{name} on chartutil.Values"
        ))),
    }
}

/// What a missing key of map `m` gives (helm's `missingkey=zero`): the zero value of its
/// element type, `""` for a `map[string]string` (`(splitn "/" 2 "x")._1`), else nil.
pub(super) fn missing_key_value(m: &Value) -> Value {
    match m.downcast_object_ref::<GoMap>() {
        Some(g) if g.1 == GoType::StringMap => Value::from(""),
        _ => Value::from(()),
    }
}

fn f_field(args: Rest<Value>) -> Result<Value, Error> {
    let mut it = args.0.into_iter();
    let mut v = it.next().unwrap_or_default();
    for name in it {
        v = field(&v, name.as_str().unwrap_or_default())?;
    }
    Ok(v)
}

/// A field chain on a pipeline's result or a variable holding one: text/template unwraps
/// such a result from its interface, so a nil there is no value at all and every field of it
/// is nil, where a nil reached through a map (`.Values.missing.x`) is an error.
pub(super) fn f_field_of_result(args: Rest<Value>) -> Result<Value, Error> {
    match args.0.first() {
        Some(v) if !v.is_none() && !v.is_undefined() => f_field(args),
        _ => Ok(Value::from(())),
    }
}

fn f_call(args: Rest<Value>) -> Result<Value, Error> {
    let (recv, rest) = args
        .0
        .split_first()
        .ok_or_else(|| err("method call without receiver"))?;
    let (name, margs) = rest
        .split_first()
        .ok_or_else(|| err("method call without name"))?;
    let name = name.as_str().unwrap_or_default();
    if recv.is_none() {
        return Err(err(format!("nil pointer evaluating interface {{}}.{name}")));
    }
    if let Some(f) = recv.downcast_object::<Files>() {
        return f.method(name, margs);
    }
    if let Some(a) = recv.downcast_object::<ApiVersions>() {
        return a.method(name, margs);
    }
    if let Some(v) = recv.downcast_object::<super::semver::Version>() {
        return v.method(name, margs);
    }
    if let Some(m) = recv.downcast_object_ref::<GoMap>() {
        if m.1 == GoType::Values {
            return values_method(m, name, margs);
        }
    }
    Err(err(format!(
        "unsupported construct: method call .{name} on {}",
        type_of(recv)
    )))
}

fn f_range(v: Value) -> Result<Value, Error> {
    if v.is_none() || v.is_undefined() {
        return Ok(Value::from(Vec::<Value>::new()));
    }
    if let Some(m) = map_entries(&v) {
        budgets::range_items(m.len())?;
        return Ok(m
            .into_iter()
            .map(|(k, v)| Value::from(vec![Value::from(k), v]))
            .collect());
    }
    if v.kind() == ValueKind::Number && v.is_integer() {
        let n = v.as_i64().unwrap_or(0);
        budgets::range_items(usize::try_from(n).unwrap_or(0))?;
        return Ok((0..n.max(0))
            .map(|i| Value::from(vec![Value::from(i), Value::from(i)]))
            .collect());
    }
    if v.kind() == ValueKind::String || v.kind() == ValueKind::Number || v.kind() == ValueKind::Bool
    {
        return Err(err(format!("range can't iterate over {}", go_fmt(&v))));
    }
    match list_items(&v) {
        Some(items) => {
            budgets::range_items(items.len())?;
            Ok(items
                .into_iter()
                .enumerate()
                .map(|(i, x)| Value::from(vec![Value::from(i), x]))
                .collect())
        }
        None => Err(err(format!("range can't iterate over {}", go_fmt(&v)))),
    }
}

type F = fn(Rest<Value>) -> Result<Value, Error>;

/// A function that needs the render state (its random source, its clock); its arguments are
/// checked against its signature before the call.
type SF = fn(&State, Rest<Value>) -> Result<Value, Error>;

fn s(v: &Value) -> String {
    if v.is_none() || v.is_undefined() {
        return String::new();
    }
    go_fmt(v)
}

fn arg(a: &[Value], i: usize) -> Value {
    a.get(i).cloned().unwrap_or_default()
}

fn want(a: &[Value], n: usize, name: &str) -> Result<(), Error> {
    if a.len() != n {
        return Err(err(format!(
            "wrong number of args for {name}: want {n} got {}",
            a.len()
        )));
    }
    Ok(())
}

/// Sprig's `empty`: Go zero values.
fn empty(v: &Value) -> bool {
    !v.is_true()
}

/// Go's `int64(f)` on amd64: out-of-range and NaN give the minimum int64 (Rust saturates).
fn go_f64_to_i64(f: f64) -> i64 {
    if f.is_nan() || !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f) {
        i64::MIN
    } else {
        f as i64
    }
}

fn to_i64(v: &Value) -> i64 {
    match v.kind() {
        ValueKind::Number => v
            .as_i64()
            .unwrap_or_else(|| go_f64_to_i64(f64::try_from(v.clone()).unwrap_or(0.0))),
        ValueKind::Bool => i64::from(v.is_true()),
        // spf13/cast: strconv.ParseInt(s, 0, 0) after dropping a ".000" tail; else 0.
        ValueKind::String => {
            go_parse_int(trim_zero_decimal(v.as_str().unwrap_or_default())).unwrap_or(0)
        }
        _ => 0,
    }
}

/// spf13/cast's `trimZeroDecimal`: `"3.00"` → `"3"`, anything else unchanged.
fn trim_zero_decimal(s: &str) -> &str {
    let mut found_zero = false;
    for (i, b) in s.bytes().enumerate().rev() {
        match b {
            b'.' if found_zero => return &s[..i],
            b'.' => return s,
            b'0' => found_zero = true,
            _ => return s,
        }
    }
    s
}

/// Go's `strconv.ParseInt(s, 0, 64)`: sign, `0x`/`0o`/`0b`/leading-`0` prefixes, and
/// underscores between digits.
fn go_parse_int(s: &str) -> Option<i64> {
    let (neg, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits, prefixed) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d.to_string(), true)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d.to_string(), true)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d.to_string(), true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, lower[1..].to_string(), true)
    } else {
        (10, lower.clone(), false)
    };
    // Underscores only between digits, or right after a base prefix ("0x_1F").
    let body_ok = !digits.is_empty()
        && !digits.ends_with('_')
        && !digits.contains("__")
        && (prefixed || !digits.starts_with('_'));
    if !body_ok {
        return None;
    }
    let clean: String = digits.chars().filter(|c| *c != '_').collect();
    let n = i128::from_str_radix(&clean, radix).ok()?;
    let n = if neg { -n } else { n };
    i64::try_from(n).ok()
}

fn to_f64(v: &Value) -> f64 {
    match v.kind() {
        ValueKind::Number => f64::try_from(v.clone()).unwrap_or(0.0),
        ValueKind::Bool => f64::from(u8::from(v.is_true())),
        ValueKind::String => v.as_str().unwrap_or_default().parse().unwrap_or(0.0),
        _ => 0.0,
    }
}

pub use super::gofmt::sprintf;

/// Go's message when Sprig dereferences a nil list.
const NIL_DEREF: &str = "runtime error: invalid memory address or nil pointer dereference";

/// The items of a list argument of a Sprig list function; nil and non-lists are errors, as
/// in Sprig (`Cannot find first on type string`).
fn go_list(what: &str, v: &Value) -> Result<Vec<Value>, Error> {
    if v.is_none() || v.is_undefined() {
        return Err(err(NIL_DEREF));
    }
    list_items(v).ok_or_else(|| err(format!("Cannot {what} on type {}", kind_of(v))))
}

/// Functions that belong to no family: the `range` helper and the thin `semver` wrappers.
const CORE: &[(&str, F)] = &[
    ("semver", |a| {
        want(&a, 1, "semver")?;
        super::semver::semver(&s(&a[0]))
    }),
    ("semverCompare", |a| {
        want(&a, 2, "semverCompare")?;
        super::semver::semver_compare(&s(&a[0]), &s(&a[1])).map(Value::from)
    }),
    ("__range", |a| {
        let (v, vars) = (arg(&a, 0), arg(&a, 1).as_i64().unwrap_or(0));
        // Go ranges over an int with one variable at most.
        if vars > 1 && v.kind() == ValueKind::Number && v.is_integer() {
            return Err(err(format!(
                "can't use {} to iterate over more than one variable",
                go_fmt(&v)
            )));
        }
        f_range(v)
    }),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printf_verbs() {
        let a = [Value::from("x"), Value::from(3), Value::from(2.5)];
        assert_eq!(
            sprintf(
                "%s-%d-%v|%5s|%-3d|%q",
                &[
                    a[0].clone(),
                    a[1].clone(),
                    a[2].clone(),
                    a[0].clone(),
                    a[1].clone(),
                    a[0].clone()
                ]
            ),
            "x-3-2.5|    x|3  |\"x\""
        );
        assert_eq!(sprintf("%d", &[Value::from(1.0)]), "%!d(float64=1)");
    }
}
