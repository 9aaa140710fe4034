//! The runtime the translated templates call: Go value semantics on top of minijinja's `Value`,
//! Go's builtins, and the Sprig/Helm functions charts use.
//!
//! Value model (matching what Helm's templates see):
//! - maps are [`GoMap`] objects: shared and mutable (Sprig's `set`/`unset` mutate in place), keys
//!   iterate sorted like Go's `range` and `fmt`;
//! - numbers from values files are `float64` (Helm decodes YAML through JSON), template literals
//!   are `int`; printing follows Go's `%v` (so `1000000.0` prints `1e+06`, as in Helm);
//! - `nil` is minijinja's `none`.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use minijinja::value::{Enumerator, Object, ObjectRepr, Rest, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

use super::chart::class_contains;
use super::parse;
use super::translate;

fn err(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// A Go `map[string]interface{}`: shared, mutable, sorted.
#[derive(Debug, Default)]
pub struct GoMap(pub Mutex<BTreeMap<String, Value>>, pub GoType);

/// The Go type behind a [`GoMap`]: functions that accept one but not the others (`dig`, the
/// map-typed parameters) and `typeOf` need to tell them apart.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum GoType {
    /// A plain `map[string]interface{}`.
    #[default]
    Map,
    /// `chartutil.Values` (`.Values`): assignable to map parameters, but `dig` fails on it.
    Values,
    /// A Go struct or pointer to one (`.Chart`, `.Capabilities`, ...), named as `typeOf`
    /// prints it; not a map at all for functions.
    Struct(&'static str),
    /// A `map[string]string` (`split`, `.Chart.Annotations`): a map for templates, but not
    /// assignable to a map[string]interface{} parameter.
    StringMap,
}

impl GoMap {
    /// Wraps a map as a template value.
    pub fn value(m: BTreeMap<String, Value>) -> Value {
        Self::typed(m, GoType::Map)
    }
    /// Wraps a map standing for the Go type `ty`.
    pub fn typed(m: BTreeMap<String, Value>, ty: GoType) -> Value {
        Value::from_object(GoMap(Mutex::new(m), ty))
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Value>> {
        // A poisoned lock only means another render panicked; the map itself is still valid.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn snapshot(&self) -> BTreeMap<String, Value> {
        self.lock().clone()
    }
}

impl Object for GoMap {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.lock().get(key.as_str()?).cloned()
    }
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        let keys: Vec<Value> = self
            .lock()
            .keys()
            .map(|k| Value::from(k.as_str()))
            .collect();
        Enumerator::Iter(Box::new(keys.into_iter()))
    }
    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        Some(self.lock().len())
    }
    fn is_true(self: &Arc<Self>) -> bool {
        !self.lock().is_empty()
    }
}

/// Returns the entries of a map value (a [`GoMap`] or any minijinja map), sorted by key.
pub fn map_entries(v: &Value) -> Option<BTreeMap<String, Value>> {
    if let Some(m) = v.downcast_object_ref::<GoMap>() {
        return Some(m.snapshot());
    }
    if v.kind() != ValueKind::Map {
        return None;
    }
    let mut out = BTreeMap::new();
    for k in v.try_iter().ok()? {
        let val = v.get_item(&k).ok()?;
        out.insert(k.to_string(), val);
    }
    Some(out)
}

fn is_map(v: &Value) -> bool {
    v.kind() == ValueKind::Map && v.downcast_object_ref::<Method>().is_none()
}

/// The items of a list value (a Go slice), `None` for anything else.
pub(crate) fn list_values(v: &Value) -> Option<Vec<Value>> {
    list_items(v)
}

/// The Go type name `%T` and `typeOf` print.
pub(crate) fn type_name(v: &Value) -> &'static str {
    type_of(v)
}

fn list_items(v: &Value) -> Option<Vec<Value>> {
    match v.kind() {
        ValueKind::Seq | ValueKind::Iterable => v.try_iter().ok().map(|i| i.collect()),
        _ => None,
    }
}

/// Converts parsed YAML/JSON into template values with Helm's typing (numbers are float64).
pub fn from_json(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => Value::from(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(a) => Value::from(a.iter().map(from_json).collect::<Vec<_>>()),
        serde_json::Value::Object(o) => {
            GoMap::value(o.iter().map(|(k, v)| (k.clone(), from_json(v))).collect())
        }
    }
}

/// Converts a template value back into JSON (for toJson/toYaml and for output).
pub fn to_json(v: &Value) -> serde_json::Value {
    if let Some(t) = v.downcast_object_ref::<GoTime>() {
        // time.Time marshals as RFC 3339 with nanoseconds.
        return serde_json::Value::String(go_time_format(t, "2006-01-02T15:04:05.999999999Z07:00"));
    }
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => serde_json::Value::Null,
        ValueKind::Bool => serde_json::Value::Bool(v.is_true()),
        ValueKind::Number => {
            if let Some(i) = v.as_i64().filter(|_| v.is_integer()) {
                serde_json::Value::from(i)
            } else {
                let f = f64::try_from(v.clone()).unwrap_or(0.0);
                serde_json::Number::from_f64(f)
                    .map(serde_json::Value::Number)
                    .unwrap_or(serde_json::Value::Null)
            }
        }
        ValueKind::String => serde_json::Value::String(v.as_str().unwrap_or_default().to_string()),
        ValueKind::Bytes => serde_json::Value::String(
            String::from_utf8_lossy(v.as_bytes().unwrap_or_default()).into(),
        ),
        ValueKind::Map => match map_entries(v) {
            Some(m) => {
                serde_json::Value::Object(m.iter().map(|(k, v)| (k.clone(), to_json(v))).collect())
            }
            None => serde_json::Value::Null,
        },
        _ => match list_items(v) {
            Some(items) => serde_json::Value::Array(items.iter().map(to_json).collect()),
            None => serde_json::Value::String(v.to_string()),
        },
    }
}

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
        let s = format!("{f}");
        s
    }
}

/// Go's JSON number formatting for float64 (used by toJson/toYaml).
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

/// Go's `%v` formatting of a template value.
pub fn go_fmt(v: &Value) -> String {
    let mut s = String::new();
    go_fmt_into(&mut s, v, true);
    s
}

/// A struct value pallet cannot print the way Go does (`{...}` with its fields in
/// declaration order): printing it is an error rather than a map-shaped string.
fn unprintable(v: &Value) -> Option<&'static str> {
    match v.downcast_object_ref::<GoMap>()?.1 {
        GoType::Struct("chartutil.KubeVersion") => None,
        GoType::Struct(ty) => Some(ty),
        _ => None,
    }
}

/// The first value inside `v` (itself included) that JSON/YAML serialisation cannot render
/// as helm does: structs (Go marshals their JSON field names), `.Files` (base64 bytes) and
/// semver versions.
fn unserialisable(v: &Value) -> Option<&'static str> {
    if let Some(m) = v.downcast_object_ref::<GoMap>() {
        if let GoType::Struct(ty) = m.1 {
            return Some(ty);
        }
        return m.snapshot().values().find_map(unserialisable);
    }
    if v.downcast_object_ref::<Files>().is_some() {
        return Some("engine.files");
    }
    if v.downcast_object_ref::<super::semver::Version>().is_some() {
        return Some("*semver.Version");
    }
    if v.kind() == ValueKind::Seq {
        return list_items(v)?.iter().find_map(unserialisable);
    }
    None
}

/// Converts for toJson/toYaml, refusing what [`unserialisable`] names.
fn to_json_checked(v: &Value, func: &str) -> Result<serde_json::Value, Error> {
    match unserialisable(v) {
        Some(ty) => Err(err(format!("unsupported construct: {func} of a {ty}"))),
        None => Ok(to_json(v)),
    }
}

fn go_fmt_into(out: &mut String, v: &Value, top: bool) {
    if let Some(m) = v.downcast_object_ref::<GoMap>() {
        if m.1 == GoType::Struct("chartutil.KubeVersion") {
            // KubeVersion is a fmt.Stringer: it prints its Version.
            let version = m.lock().get("Version").cloned().unwrap_or_default();
            out.push_str(version.as_str().unwrap_or_default());
            return;
        }
    }
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => {
            out.push_str(if top { "<no value>" } else { "<nil>" })
        }
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if v.is_integer() {
                out.push_str(&v.to_string());
            } else {
                out.push_str(&go_float(f64::try_from(v.clone()).unwrap_or(0.0)));
            }
        }
        ValueKind::String => out.push_str(v.as_str().unwrap_or_default()),
        ValueKind::Bytes => {
            let b = v.as_bytes().unwrap_or_default();
            out.push('[');
            let parts: Vec<String> = b.iter().map(|x| x.to_string()).collect();
            out.push_str(&parts.join(" "));
            out.push(']');
        }
        ValueKind::Map => {
            out.push_str("map[");
            if let Some(m) = map_entries(v) {
                for (i, (k, val)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    out.push_str(k);
                    out.push(':');
                    go_fmt_into(out, val, false);
                }
            }
            out.push(']');
        }
        _ => match list_items(v) {
            Some(items) => {
                out.push('[');
                for (i, it) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    go_fmt_into(out, it, false);
                }
                out.push(']');
            }
            None => out.push_str(&v.to_string()),
        },
    }
}

/// A bound method value (`.Files.Get`) so `__call` can invoke it.
#[derive(Debug)]
struct Method;
impl Object for Method {}

/// `.Files`: the chart's non-template files.
#[derive(Debug, Default)]
pub struct Files(pub BTreeMap<String, Vec<u8>>);

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
                Ok(Value::from_object(Files(sel.collect())))
            }
            "AsConfig" | "AsSecrets" => {
                let mut m = BTreeMap::new();
                for (k, v) in &self.0 {
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

/// A built-in object pallet does not provide yet; any use of its fields is an error naming it.
#[derive(Debug)]
pub struct Unsupported(pub &'static str);

impl Object for Unsupported {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }
}

/// `.Capabilities.APIVersions`.
#[derive(Debug, Default)]
pub struct ApiVersions(pub Vec<String>);

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
        if let Some(x) = m.lock().get(name) {
            return Ok(x.clone());
        }
        return match m.1 {
            GoType::Struct("version.BuildInfo") if name == "GoVersion" => Err(err(
                "unsupported construct: .Capabilities.HelmVersion.GoVersion (the Go release helm was built with is not known here)",
            )),
            // A struct has a fixed set of fields; a map gives nil for a missing key.
            GoType::Struct(ty) => Err(err(format!("can't evaluate field {name} in type {ty}"))),
            _ => Ok(Value::from(())),
        };
    }
    if let Some(u) = v.downcast_object_ref::<Unsupported>() {
        return Err(err(format!("unsupported construct: {}.{name}", u.0)));
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
fn f_field_of_result(args: Rest<Value>) -> Result<Value, Error> {
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
        return Ok(m
            .into_iter()
            .map(|(k, v)| Value::from(vec![Value::from(k), v]))
            .collect());
    }
    if v.kind() == ValueKind::Number && v.is_integer() {
        let n = v.as_i64().unwrap_or(0);
        return Ok((0..n.max(0))
            .map(|i| Value::from(vec![Value::from(i), Value::from(i)]))
            .collect());
    }
    if v.kind() == ValueKind::String || v.kind() == ValueKind::Number || v.kind() == ValueKind::Bool
    {
        return Err(err(format!("range can't iterate over {}", go_fmt(&v))));
    }
    match list_items(&v) {
        Some(items) => Ok(items
            .into_iter()
            .enumerate()
            .map(|(i, x)| Value::from(vec![Value::from(i), x]))
            .collect()),
        None => Err(err(format!("range can't iterate over {}", go_fmt(&v)))),
    }
}

/// Renders the template `name` with `data` as its dot: a `define`, or else a template file
/// by its path (in helm every file is itself a template named `<chart>/templates/<file>`).
pub fn render_define(state: &State, name: &str, data: Value) -> Result<String, Error> {
    render_template(state, name, data, false)
}

fn render_template(state: &State, name: &str, data: Value, action: bool) -> Result<String, Error> {
    let env = state.env();
    let tmpl = env
        .get_template(&translate::define_name(name))
        .or_else(|_| env.get_template(name))
        .map_err(|_| {
            // Go's wording for the `template` action and for helm's `include`.
            err(if action {
                format!("template \"{name}\" not defined")
            } else {
                format!("error calling include: no template \"{name}\" is defined")
            })
        })?;
    // Each include is a nested render on the Rust stack, so nesting is bounded well below what
    // would overflow a 2 MiB thread stack; helm's own bound (1000) is for runaway recursion too.
    let depth = state
        .lookup("__depth")
        .and_then(|d| d.as_i64())
        .unwrap_or(0)
        + 1;
    if depth > MAX_INCLUDE_DEPTH {
        return Err(err(format!(
            "rendering template has a nested reference name: {name}: unable to execute template (include depth over {MAX_INCLUDE_DEPTH})"
        )));
    }
    tmpl.render(minijinja::context! {
        __d0 => data,
        __now => state.lookup("__now"),
        __rng => state.lookup("__rng"),
        __depth => depth,
    })
}

/// Maximum nesting of include/template/tpl.
pub const MAX_INCLUDE_DEPTH: i64 = 64;

fn f_include(state: &State, name: String, data: Option<Value>) -> Result<Value, Error> {
    Ok(Value::from(render_define(
        state,
        &name,
        data.unwrap_or_default(),
    )?))
}

fn f_template(state: &State, name: String, data: Value) -> Result<Value, Error> {
    Ok(Value::from(render_template(state, &name, data, true)?))
}

/// The function names the translator accepts (every one has an `h_` implementation).
pub fn known() -> HashSet<&'static str> {
    FUNCS
        .iter()
        .map(|(n, _)| *n)
        .chain(ALIASES.iter().map(|(a, _)| *a))
        .collect::<HashSet<_>>()
        .into_iter()
        .chain([
            "include",
            "tpl",
            "and",
            "or",
            "not",
            "now",
            "date",
            "dateInZone",
            "unixEpoch",
            "htmlDate",
            "htmlDateInZone",
            "ago",
            "randAlphaNum",
            "randAlpha",
            "randNumeric",
            "randAscii",
            "randInt",
            "uuidv4",
        ])
        .collect()
}

type F = fn(Rest<Value>) -> Result<Value, Error>;

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

fn type_of(v: &Value) -> &'static str {
    if let Some(m) = v.downcast_object_ref::<GoMap>() {
        match m.1 {
            GoType::Values => return "chartutil.Values",
            GoType::Struct(name) => return name,
            GoType::StringMap => return "map[string]string",
            GoType::Map => {}
        }
    }
    if v.downcast_object_ref::<Files>().is_some() {
        return "engine.files";
    }
    if v.downcast_object_ref::<GoTime>().is_some() {
        return "time.Time";
    }
    if v.downcast_object_ref::<super::semver::Version>().is_some() {
        return "*semver.Version";
    }
    if v.downcast_object_ref::<ApiVersions>().is_some() {
        return "chartutil.VersionSet";
    }
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => "<nil>",
        ValueKind::Bool => "bool",
        ValueKind::Number if v.is_integer() => "int",
        ValueKind::Number => "float64",
        ValueKind::String => "string",
        ValueKind::Bytes => "[]uint8",
        ValueKind::Map => "map[string]interface {}",
        _ => "[]interface {}",
    }
}

fn kind_of(v: &Value) -> &'static str {
    if let Some(m) = v.downcast_object_ref::<GoMap>() {
        if let GoType::Struct(name) = m.1 {
            return if name.starts_with('*') {
                "ptr"
            } else {
                "struct"
            };
        }
    }
    if v.downcast_object_ref::<GoTime>().is_some() {
        return "struct";
    }
    if v.downcast_object_ref::<super::semver::Version>().is_some() {
        return "ptr";
    }
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => "invalid",
        ValueKind::Bool => "bool",
        ValueKind::Number if v.is_integer() => "int",
        ValueKind::Number => "float64",
        ValueKind::String => "string",
        ValueKind::Map => "map",
        _ => "slice",
    }
}

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
fn cmp(a: &Value, b: &Value) -> Result<std::cmp::Ordering, Error> {
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
fn eq_vals(a: &Value, b: &Value) -> Result<bool, Error> {
    let nil = |v: &Value| v.is_none() || v.is_undefined();
    match (basic_kind(a), basic_kind(b)) {
        (Some(ka), Some(kb)) if ka != kb => Err(incompatible(a, b)),
        (Some(0), Some(_)) => Ok(a.is_true() == b.is_true()),
        (Some(2), Some(_)) => Ok(to_f64(a) == to_f64(b)),
        (Some(_), Some(_)) => Ok(cmp(a, b)? == std::cmp::Ordering::Equal),
        _ if nil(a) || nil(b) => Ok(nil(a) && nil(b)),
        (Some(_), None) | (None, Some(_)) => Err(incompatible(a, b)),
        (None, None) => Err(err(format!(
            "non-comparable type {}: {}",
            sprintf("%s", std::slice::from_ref(b)),
            type_of(b)
        ))),
    }
}

pub use super::gofmt::sprintf;

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

/// Go's `fmt.Sprint`: spaces between operands when neither is a string.
fn sprint(args: &[Value]) -> String {
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

/// A scalar as go-yaml v2 emits it (after sigs.k8s.io/yaml's JSON round trip), for a value at
/// block `indent`. Multi-line strings become literal blocks.
/// Where a scalar value is written: its start column and the indentation of continuation
/// lines when go-yaml folds it (`None` for map keys, which are never folded).
#[derive(Clone, Copy)]
struct Fold {
    column: usize,
    indent: usize,
}

/// go-yaml v2's line width: past this column, a space in a plain or quoted scalar becomes a
/// line break (the value reads back the same, but the text differs).
const YAML_WIDTH: usize = 80;

/// go-yaml v2's folding of a plain (`quote` = None) or quoted scalar as written in `text`:
/// at a space past [`YAML_WIDTH`], not after another space and (plain, single-quoted) not
/// before one, and never on the first or last character inside quotes, the space becomes a
/// newline plus `indent` spaces. In double quotes a following space is escaped with `\`.
fn yaml_fold(text: &str, fold: Fold, quote: Option<char>) -> String {
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
fn column_of(out: &str) -> usize {
    out[out.rfind('\n').map_or(0, |i| i + 1)..].chars().count()
}

fn yaml_scalar(v: &serde_json::Value, indent: usize, fold: Option<Fold>) -> String {
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

/// Whether go-yaml v2 would read this plain scalar as something other than a string.
fn resolves_non_string(s: &str) -> bool {
    const WORDS: &[&str] = &[
        "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE", "false",
        "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF", "~", "null", "Null", "NULL",
        ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", ".nan",
        ".NaN", ".NAN",
    ];
    if s.is_empty() || WORDS.contains(&s) {
        return true;
    }
    let t = s.replace('_', "");
    let body = t.strip_prefix(['+', '-']).unwrap_or(&t);
    let is_num = (body.starts_with("0o")
        && body.len() > 2
        && body[2..].bytes().all(|b| (b'0'..=b'7').contains(&b)))
        || (body.starts_with("0x")
            && body.len() > 2
            && body[2..].bytes().all(|b| b.is_ascii_hexdigit()))
        || (body.starts_with("0b")
            && body.len() > 2
            && body[2..].bytes().all(|b| b == b'0' || b == b'1'))
        || (!body.is_empty() && body.bytes().all(|b| b.is_ascii_digit()))
        || (body.bytes().any(|b| b.is_ascii_digit())
            && body
                .bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
            && body.parse::<f64>().is_ok());
    // Sexagesimal numbers (`1:20`) are YAML 1.1 ints/floats too.
    let sexagesimal = body.contains(':')
        && body
            .split(':')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit() || b == b'.'));
    is_num || sexagesimal || yaml_timestamp(s)
}

/// go-yaml v2's timestamp resolution: `YYYY-` then one of its four layouts.
fn yaml_timestamp(s: &str) -> bool {
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

fn yaml_string(s: &str, indent: usize, fold: Option<Fold>) -> String {
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
fn yaml_special(c: char) -> bool {
    !(c == '\n'
        || (' '..='~').contains(&c)
        || ('\u{A0}'..='\u{D7FF}').contains(&c)
        || (('\u{E000}'..='\u{FFFD}').contains(&c) && c != '\u{FEFF}'))
}

/// Line breaks for go-yaml besides `\n`: they make a scalar multi-line.
fn yaml_other_break(c: char) -> bool {
    matches!(c, '\r' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// go-yaml v2's double-quoted style: its escapes (`\a`, `\e`, `\N`, `\L`, `\xXX`,
/// `\UXXXXXXXX`, ...) for breaks and unprintable characters, the rest as it is.
fn yaml_double_quoted(s: &str) -> String {
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
fn yaml_reader_rejects(v: &serde_json::Value) -> bool {
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
fn fold_nel(v: serde_json::Value) -> serde_json::Value {
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

fn yaml_string_unfolded(s: &str, indent: usize) -> String {
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
fn literal_block(s: &str, indent: usize) -> String {
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

fn yaml_node(out: &mut String, v: &serde_json::Value, indent: usize, in_seq: bool) {
    let pad = " ".repeat(indent);
    match v {
        serde_json::Value::Object(m) if !m.is_empty() => {
            for (i, (k, val)) in m.iter().enumerate() {
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

/// Go's json.Marshal (sorted keys, HTML-safe escaping).
fn go_json(v: &serde_json::Value) -> String {
    let mut out = String::new();
    go_json_into(&mut out, v, true);
    out
}

/// Go's `json.MarshalIndent(v, "", "  ")`: HTML-escaped like `toJson`, Go number formatting.
fn go_json_pretty(v: &serde_json::Value) -> String {
    fn into(out: &mut String, v: &serde_json::Value, depth: usize) {
        let pad = |out: &mut String, d: usize| {
            out.push('\n');
            out.push_str(&"  ".repeat(d));
        };
        match v {
            serde_json::Value::Array(a) if !a.is_empty() => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    pad(out, depth + 1);
                    into(out, x, depth + 1);
                }
                pad(out, depth);
                out.push(']');
            }
            serde_json::Value::Object(m) if !m.is_empty() => {
                out.push('{');
                let mut entries: Vec<(&String, &serde_json::Value)> = m.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                for (i, (k, x)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    pad(out, depth + 1);
                    go_json_into(out, &serde_json::Value::String(k.clone()), true);
                    out.push_str(": ");
                    into(out, x, depth + 1);
                }
                pad(out, depth);
                out.push('}');
            }
            _ => go_json_into(out, v, true),
        }
    }
    let mut out = String::new();
    into(&mut out, v, 0);
    out
}

fn go_json_into(out: &mut String, v: &serde_json::Value, html: bool) {
    match v {
        serde_json::Value::String(s) => {
            // encoding/json always escapes the JS line separators.
            let j = serde_json::to_string(s)
                .unwrap_or_default()
                .replace('\u{2028}', "\\u2028")
                .replace('\u{2029}', "\\u2029");
            if html {
                out.push_str(
                    &j.replace('<', "\\u003c")
                        .replace('>', "\\u003e")
                        .replace('&', "\\u0026"),
                );
            } else {
                out.push_str(&j);
            }
        }
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => out.push_str(&i.to_string()),
            (None, Some(f)) => out.push_str(&json_float(f)),
            _ => out.push_str(&n.to_string()),
        },
        serde_json::Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json_into(out, x, html);
            }
            out.push(']');
        }
        serde_json::Value::Object(m) => {
            out.push('{');
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json_into(out, &serde_json::Value::String((*k).clone()), html);
                out.push(':');
                go_json_into(out, &m[*k], html);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// `{"Error": msg}`, how Sprig's from* functions report a failure.
fn error_map(msg: String) -> Value {
    GoMap::value(
        [("Error".to_string(), Value::from(msg))]
            .into_iter()
            .collect(),
    )
}

/// encoding/json's message for a document of the wrong JSON type.
fn json_type_error(v: &serde_json::Value, target: &str) -> String {
    let kind = match v {
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        _ => "object",
    };
    format!("json: cannot unmarshal {kind} into Go value of type {target}")
}

/// YAML for fromYamlArray: an empty document is an empty list, not a map.
fn parse_yaml_value_array(s: &str) -> Result<serde_json::Value, String> {
    if s.trim().is_empty() {
        return Ok(serde_json::Value::Array(Vec::new()));
    }
    parse_yaml_value(s)
}

fn parse_yaml_value(s: &str) -> Result<serde_json::Value, String> {
    if s.trim().is_empty() {
        return Ok(serde_json::Value::Object(Default::default()));
    }
    super::yaml11::parse(s)
}

fn indent_str(n: i64, s: &str) -> Result<String, Error> {
    if n < 0 {
        return Err(err("strings: negative Repeat count"));
    }
    let pad = " ".repeat(n as usize);
    Ok(format!("{pad}{}", s.replace('\n', &format!("\n{pad}"))))
}

fn title(s: &str) -> String {
    let mut out = String::new();
    let mut prev_letter = false;
    for c in s.chars() {
        if !prev_letter && c.is_alphabetic() {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        prev_letter = c.is_alphanumeric() || c == '\'' || c == '_';
    }
    out
}

fn deep_copy(v: &Value) -> Value {
    let copy = from_json_keep_ints(&to_json(v));
    // copystructure keeps the named type: a copy of `.Values` is still a chartutil.Values.
    match (
        v.downcast_object_ref::<GoMap>(),
        copy.downcast_object_ref::<GoMap>(),
    ) {
        (Some(orig), Some(c)) if orig.1 != GoType::Map => GoMap::typed(c.snapshot(), orig.1),
        _ => copy,
    }
}

fn from_json_keep_ints(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::from(i),
            None => Value::from(n.as_f64().unwrap_or(0.0)),
        },
        serde_json::Value::Array(a) => {
            Value::from(a.iter().map(from_json_keep_ints).collect::<Vec<_>>())
        }
        serde_json::Value::Object(o) => GoMap::value(
            o.iter()
                .map(|(k, v)| (k.clone(), from_json_keep_ints(v)))
                .collect(),
        ),
        other => from_json(other),
    }
}

fn merge_into(dst: &mut BTreeMap<String, Value>, src: &BTreeMap<String, Value>, overwrite: bool) {
    for (k, v) in src {
        match dst.get(k) {
            Some(d) if is_map(d) && is_map(v) => {
                if let (Some(dm), Some(sm)) = (d.downcast_object_ref::<GoMap>(), map_entries(v)) {
                    let mut g = dm.lock();
                    merge_into(&mut g, &sm, overwrite);
                }
            }
            Some(d) if !overwrite && !empty(d) => {}
            _ => {
                dst.insert(k.clone(), v.clone());
            }
        }
    }
}

fn sha(data: &[u8], which: u8) -> String {
    use sha2::Digest as _;
    let bytes: Vec<u8> = if which == 1 {
        sha1(data).to_vec()
    } else {
        sha2::Sha256::digest(data).to_vec()
    };
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-1 (needed by Sprig's sha1sum; small enough not to warrant a dependency).
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut msg = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_be_bytes());
    for chunk in msg.chunks(64) {
        let mut w = [0u32; 80];
        for i in 0..16 {
            w[i] = u32::from_be_bytes([
                chunk[4 * i],
                chunk[4 * i + 1],
                chunk[4 * i + 2],
                chunk[4 * i + 3],
            ]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

/// Sprig's float arithmetic (addf, subf, mulf, divf): shopspring/decimal on each operand's
/// shortest decimal form, so `addf 0.1 0.2` is 0.3 as in helm, not 0.30000000000000004.
#[derive(Clone, Copy)]
enum DecOp {
    Add,
    Sub,
    Mul,
    Div,
}

/// A decimal `mantissa × 10^-scale`.
#[derive(Clone, Copy)]
struct Dec {
    m: i128,
    scale: u32,
}

impl Dec {
    /// The shortest decimal that reads back as `f` (decimal.NewFromFloat).
    fn from_f64(f: f64) -> Option<Dec> {
        if !f.is_finite() {
            return None;
        }
        let e = format!("{f:e}");
        let (mant, exp) = e.split_once('e')?;
        let exp: i32 = exp.parse().ok()?;
        let neg = mant.starts_with('-');
        let digits: String = mant.chars().filter(char::is_ascii_digit).collect();
        let frac_len = digits.len() as i32 - 1;
        let mut m: i128 = digits.parse().ok()?;
        let mut scale = frac_len - exp;
        if scale < 0 {
            m = m.checked_mul(10i128.checked_pow(scale.unsigned_abs())?)?;
            scale = 0;
        }
        Some(Dec {
            m: if neg { -m } else { m },
            scale: u32::try_from(scale).ok()?,
        })
    }
    fn rescale(self, scale: u32) -> Option<i128> {
        self.m
            .checked_mul(10i128.checked_pow(scale.checked_sub(self.scale)?)?)
    }
    fn to_f64(self) -> f64 {
        let neg = self.m < 0;
        let digits = self.m.unsigned_abs().to_string();
        let scale = self.scale as usize;
        let text = if scale == 0 {
            digits
        } else if digits.len() > scale {
            format!(
                "{}.{}",
                &digits[..digits.len() - scale],
                &digits[digits.len() - scale..]
            )
        } else {
            format!("0.{}{digits}", "0".repeat(scale - digits.len()))
        };
        let f: f64 = text.parse().unwrap_or(0.0);
        if neg {
            -f
        } else {
            f
        }
    }
    fn apply(self, op: DecOp, o: Dec) -> Option<Dec> {
        match op {
            DecOp::Add | DecOp::Sub => {
                let scale = self.scale.max(o.scale);
                let (a, b) = (self.rescale(scale)?, o.rescale(scale)?);
                let m = match op {
                    DecOp::Add => a.checked_add(b)?,
                    _ => a.checked_sub(b)?,
                };
                Some(Dec { m, scale })
            }
            DecOp::Mul => Some(Dec {
                m: self.m.checked_mul(o.m)?,
                scale: self.scale.checked_add(o.scale)?,
            }),
            DecOp::Div => {
                // decimal.Div: 16 digits after the point, rounded half away from zero.
                if o.m == 0 {
                    return None;
                }
                const PREC: u32 = 16;
                let shift = (PREC + o.scale).checked_sub(self.scale);
                let (num, den) = match shift {
                    Some(s) => (self.m.checked_mul(10i128.checked_pow(s)?)?, o.m),
                    None => (
                        self.m,
                        o.m.checked_mul(10i128.checked_pow(self.scale - PREC - o.scale)?)?,
                    ),
                };
                let (q, r) = (num / den, num % den);
                let q = if r.unsigned_abs() * 2 >= den.unsigned_abs() {
                    if (num < 0) != (den < 0) {
                        q - 1
                    } else {
                        q + 1
                    }
                } else {
                    q
                };
                Some(Dec { m: q, scale: PREC })
            }
        }
    }
}

fn decimal_op(first: f64, rest: &[Value], op: DecOp) -> f64 {
    let float = |a: f64, b: f64| match op {
        DecOp::Add => a + b,
        DecOp::Sub => a - b,
        DecOp::Mul => a * b,
        DecOp::Div => a / b,
    };
    let mut acc = Dec::from_f64(first);
    let mut plain = first;
    for v in rest {
        let x = to_f64(v);
        plain = float(plain, x);
        acc = acc.and_then(|d| d.apply(op, Dec::from_f64(x)?));
    }
    // Outside i128's range the float result is the best available.
    acc.map_or(plain, Dec::to_f64)
}

/// Go's `math.Max`/`math.Min` (NaN wins).
fn go_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

fn go_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

const B32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// RFC 4648 base32 with padding (Go's `base32.StdEncoding`).
fn b32_encode(data: &[u8]) -> String {
    let mut out = String::new();
    for chunk in data.chunks(5) {
        let mut buf = [0u8; 5];
        buf[..chunk.len()].copy_from_slice(chunk);
        let n = u64::from_be_bytes([0, 0, 0, buf[0], buf[1], buf[2], buf[3], buf[4]]);
        let chars = (chunk.len() * 8).div_ceil(5);
        for i in 0..8 {
            if i < chars {
                out.push(B32[((n >> (35 - i * 5)) & 31) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Go's `base32.StdEncoding.DecodeString`; errors are Go's message.
fn b32_decode(text: &str) -> Result<Vec<u8>, String> {
    let clean: Vec<u8> = text
        .bytes()
        .filter(|b| *b != b'\n' && *b != b'\r')
        .collect();
    let bad = |i: usize| format!("illegal base32 data at input byte {i}");
    if !clean.len().is_multiple_of(8) {
        return Err(bad(clean.len() / 8 * 8));
    }
    let mut out = Vec::new();
    for (ci, chunk) in clean.chunks(8).enumerate() {
        let pad = chunk.iter().rev().take_while(|b| **b == b'=').count();
        let bytes = match pad {
            0 => 5,
            1 => 4,
            3 => 3,
            4 => 2,
            6 => 1,
            _ => return Err(bad(ci * 8 + 8 - pad)),
        };
        if pad > 0 && ci + 1 != clean.len() / 8 {
            return Err(bad(ci * 8 + 8 - pad));
        }
        let mut n: u64 = 0;
        for (i, b) in chunk.iter().enumerate() {
            let v = if i >= 8 - pad {
                0
            } else {
                B32.iter()
                    .position(|x| x == b)
                    .ok_or_else(|| bad(ci * 8 + i))? as u64
            };
            n = (n << 5) | v;
        }
        out.extend_from_slice(&n.to_be_bytes()[3..3 + bytes]);
    }
    Ok(out)
}

/// goutils' `SwapCase`: upper and title case become lower, lower case becomes upper (title
/// case at a word start, the same letter outside a few ligatures).
fn swap_case(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_uppercase() {
                c.to_lowercase().next().unwrap_or(c)
            } else if c.is_lowercase() {
                c.to_uppercase().next().unwrap_or(c)
            } else {
                c
            }
        })
        .collect()
}

/// Go's `path.Clean`.
fn go_path_clean(p: &str) -> String {
    if p.is_empty() {
        return ".".into();
    }
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            s => parts.push(s),
        }
    }
    let body = parts.join("/");
    match (rooted, body.is_empty()) {
        (true, _) => format!("/{body}"),
        (false, true) => ".".into(),
        (false, false) => body,
    }
}

/// Go's `path.Base`.
fn go_path_base(p: &str) -> String {
    if p.is_empty() {
        return ".".into();
    }
    let t = p.trim_end_matches('/');
    if t.is_empty() {
        return "/".into();
    }
    t.rsplit('/').next().unwrap_or(t).to_string()
}

/// Go's `path.Dir`.
fn go_path_dir(p: &str) -> String {
    let dir = match p.rfind('/') {
        Some(i) => &p[..=i],
        None => "",
    };
    go_path_clean(dir)
}

/// Unix seconds of Go's zero time (0001-01-01 00:00:00 UTC), what toDate gives on failure.
const ZERO_TIME: i64 = -62_135_596_800;

fn add_duration(t: GoTime, ns: i128) -> GoTime {
    let total = i128::from(t.secs) * 1_000_000_000 + i128::from(t.nanos) + ns;
    GoTime {
        secs: i64::try_from(total.div_euclid(1_000_000_000)).unwrap_or(i64::MAX),
        nanos: u32::try_from(total.rem_euclid(1_000_000_000)).unwrap_or(0),
    }
}

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

/// Sprig's `strval`: strings as they are, anything else as Go's `%v` (nil is `<nil>`).
fn strval(v: &Value) -> String {
    let mut out = String::new();
    go_fmt_into(&mut out, v, false);
    out
}

/// Sprig's `strslice` of a list: each non-nil item's `strval`.
fn strslice(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .filter(|x| !x.is_none() && !x.is_undefined())
        .map(strval)
        .collect()
}

/// Sprig's `untilStep`: from `start` towards `stop` (exclusive) by `step`; empty when the
/// step does not lead there.
fn until_step(start: i64, stop: i64, step: i64) -> Vec<i64> {
    let mut out = Vec::new();
    let mut i = start;
    if stop < start {
        if step >= 0 {
            return out;
        }
        while i > stop {
            out.push(i);
            i += step;
        }
    } else {
        if step <= 0 {
            return out;
        }
        while i < stop {
            out.push(i);
            i += step;
        }
    }
    out
}

/// Go's `strings.SplitN` (`n < 0`: all parts); an empty separator splits into characters.
fn go_split(text: &str, sep: &str, n: i64) -> Vec<String> {
    if n == 0 {
        return Vec::new();
    }
    if sep.is_empty() {
        let chars: Vec<String> = text.chars().map(String::from).collect();
        if n < 0 || chars.len() as i64 <= n {
            return chars;
        }
        let k = (n - 1) as usize;
        let mut out: Vec<String> = chars[..k].to_vec();
        out.push(chars[k..].concat());
        return out;
    }
    if n < 0 {
        text.split(sep).map(str::to_string).collect()
    } else {
        text.splitn(n as usize, sep).map(str::to_string).collect()
    }
}

/// Go's base64 `StdEncoding.DecodeString`: newlines are skipped; errors are Go's message.
fn go_b64_decode(text: &str) -> Result<Vec<u8>, String> {
    use base64::Engine as _;
    let clean: String = text.chars().filter(|c| *c != '\n' && *c != '\r').collect();
    base64::engine::general_purpose::STANDARD
        .decode(&clean)
        .map_err(|e| {
            let at = match e {
                base64::DecodeError::InvalidByte(i, _)
                | base64::DecodeError::InvalidLastSymbol(i, _) => i,
                // A short final quantum: Go reports the start of that quantum.
                base64::DecodeError::InvalidLength(_) | base64::DecodeError::InvalidPadding => {
                    clean.trim_end_matches('=').len() / 4 * 4
                }
            };
            format!("illegal base64 data at input byte {at}")
        })
}

/// Go's `strings.ToUpper`: per character, keeping characters without a one-character upper
/// case (`ß` stays `ß`, where Rust would give `SS`).
fn go_upper(s: &str) -> String {
    s.chars()
        .map(|c| {
            let mut u = c.to_uppercase();
            match (u.next(), u.next()) {
                (Some(x), None) => x,
                _ => c,
            }
        })
        .collect()
}

/// Go's `strings.ToLower`: per character, the first character of the lower case.
fn go_lower(s: &str) -> String {
    s.chars()
        .map(|c| c.to_lowercase().next().unwrap_or(c))
        .collect()
}

/// Go's `unicode.IsPrint`, close enough for escaping: letters, marks, numbers, punctuation,
/// symbols and the ASCII space; not controls, other spaces, separators or format characters.
fn go_is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    !(c.is_control()
        || c.is_whitespace()
        || matches!(c as u32, 0xAD | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0xFEFF))
}

/// Go's `unicode.IsPunct` for ASCII (punctuation, not the symbols `$+<=>^`|~`); other
/// characters count as punctuation only in the General Punctuation block.
fn go_is_punct(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_punctuation() && !"$+<=>^`|~".contains(c)
    } else {
        matches!(c as u32, 0x2010..=0x2027 | 0x2030..=0x205E | 0x3001..=0x3003)
    }
}

/// xstrings' `isAlphabet`: a letter that is not CJK.
fn xs_is_alphabet(c: char) -> bool {
    c.is_alphabetic()
        && !matches!(c as u32, 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x2FA1F)
}

fn xs_is_connector(c: char) -> bool {
    c == '-' || c == '_' || c.is_whitespace()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum WordType {
    Invalid,
    Number,
    Upper,
    Alphabet,
    Connector,
    Punct,
    Other,
}

/// xstrings' `nextWord`: the type and length of the word at the start of `s`.
fn xs_next_word(s: &[char]) -> (WordType, usize) {
    let Some(&r) = s.first() else {
        return (WordType::Invalid, 0);
    };
    let len = s.len();
    let mut n = 1;
    let wt = if xs_is_connector(r) {
        while n < len && xs_is_connector(s[n]) {
            n += 1;
        }
        WordType::Connector
    } else if go_is_punct(r) {
        while n < len && go_is_punct(s[n]) {
            n += 1;
        }
        WordType::Punct
    } else if r.is_uppercase() {
        if n < len {
            if s[n].is_uppercase() {
                n += 1;
                while n < len && s[n].is_uppercase() {
                    n += 1;
                }
                // "HTTPServer": the last capital starts the next word.
                if n < len && xs_is_alphabet(s[n]) {
                    n -= 1;
                }
            } else if xs_is_alphabet(s[n]) {
                n += 1;
                while n < len && xs_is_alphabet(s[n]) && !s[n].is_uppercase() {
                    n += 1;
                }
            }
        }
        WordType::Upper
    } else if xs_is_alphabet(r) {
        while n < len && xs_is_alphabet(s[n]) && !s[n].is_uppercase() {
            n += 1;
        }
        WordType::Alphabet
    } else if r.is_numeric() {
        while n < len && s[n].is_numeric() {
            n += 1;
        }
        WordType::Number
    } else {
        while n < len
            && !(xs_is_connector(s[n])
                || xs_is_alphabet(s[n])
                || s[n].is_numeric()
                || go_is_punct(s[n]))
        {
            n += 1;
        }
        WordType::Other
    };
    (wt, n)
}

fn xs_to_lower(out: &mut String, wt: WordType, word: &[char], connector: char) {
    if wt != WordType::Upper && wt != WordType::Connector {
        out.extend(word);
        return;
    }
    for &c in word {
        if xs_is_connector(c) {
            out.push(connector);
        } else if c.is_uppercase() {
            out.push(c.to_lowercase().next().unwrap_or(c));
        } else {
            out.push(c);
        }
    }
}

/// xstrings' `camelCaseToLowerCase` (Sprig's `snakecase` and `kebabcase`):
/// `HTTPServer` → `http_server`, `Bld4Floor3rd` → `bld4_floor_3rd`.
fn camel_to_lower(text: &str, connector: char) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut pos = 0;
    let next = |pos: &mut usize| -> (WordType, std::ops::Range<usize>) {
        let (wt, n) = xs_next_word(&chars[*pos..]);
        let r = *pos..*pos + n;
        *pos += n;
        (wt, r)
    };
    if chars.is_empty() {
        return out;
    }
    let (mut wt, mut word) = next(&mut pos);
    while pos < chars.len() {
        if wt != WordType::Connector {
            xs_to_lower(&mut out, wt, &chars[word.clone()], connector);
        }
        let prev = wt;
        let last = word.clone();
        (wt, word) = next(&mut pos);
        match prev {
            WordType::Number => {
                while wt == WordType::Alphabet || wt == WordType::Number {
                    xs_to_lower(&mut out, wt, &chars[word.clone()], connector);
                    (wt, word) = next(&mut pos);
                }
                if !matches!(
                    wt,
                    WordType::Invalid | WordType::Punct | WordType::Connector
                ) {
                    out.push(connector);
                }
            }
            WordType::Connector => xs_to_lower(&mut out, prev, &chars[last], connector),
            WordType::Punct => {}
            _ => {
                if wt != WordType::Number {
                    if wt != WordType::Connector && wt != WordType::Punct {
                        out.push(connector);
                    }
                    continue;
                }
                if pos >= chars.len() {
                    continue;
                }
                let num = word.clone();
                (wt, word) = next(&mut pos);
                if wt != WordType::Alphabet {
                    xs_to_lower(&mut out, WordType::Number, &chars[num], connector);
                    if wt != WordType::Connector && wt != WordType::Punct {
                        out.push(connector);
                    }
                    continue;
                }
                out.push(connector);
                xs_to_lower(&mut out, WordType::Number, &chars[num], connector);
                while wt == WordType::Alphabet || wt == WordType::Number {
                    xs_to_lower(&mut out, wt, &chars[word.clone()], connector);
                    (wt, word) = next(&mut pos);
                }
                if !matches!(
                    wt,
                    WordType::Invalid | WordType::Connector | WordType::Punct
                ) {
                    out.push(connector);
                }
            }
        }
    }
    xs_to_lower(&mut out, wt, &chars[word], connector);
    out
}

static FUNCS: &[(&str, F)] = &[
    ("default", |a| {
        // `x | default d` arrives as (d, x).
        match a.0.as_slice() {
            [d] => Ok(d.clone()),
            [d, v] => Ok(if empty(v) { d.clone() } else { v.clone() }),
            _ => Err(err("wrong number of args for default")),
        }
    }),
    ("empty", |a| Ok(Value::from(empty(&arg(&a, 0))))),
    ("coalesce", |a| {
        Ok(a.0.iter().find(|v| !empty(v)).cloned().unwrap_or_default())
    }),
    ("ternary", |a| {
        want(&a, 3, "ternary")?;
        Ok(if a[2].is_true() {
            a[0].clone()
        } else {
            a[1].clone()
        })
    }),
    ("required", |a| {
        want(&a, 2, "required")?;
        let v = &a[1];
        if v.is_none()
            || v.is_undefined()
            || (v.kind() == ValueKind::String && v.as_str() == Some(""))
        {
            return Err(err(s(&a[0])));
        }
        Ok(v.clone())
    }),
    ("fail", |a| Err(err(s(&arg(&a, 0))))),
    ("semver", |a| {
        want(&a, 1, "semver")?;
        super::semver::semver(&s(&a[0]))
    }),
    ("semverCompare", |a| {
        want(&a, 2, "semverCompare")?;
        super::semver::semver_compare(&s(&a[0]), &s(&a[1])).map(Value::from)
    }),
    ("toYaml", |a| {
        let v = to_json_checked(&arg(&a, 0), "toYaml")?;
        if yaml_reader_rejects(&v) {
            // helm's toYaml swallows the marshalling error.
            return Ok(Value::from(""));
        }
        Ok(Value::from(to_yaml(&fold_nel(v))))
    }),
    ("toJson", |a| {
        Ok(Value::from(go_json(&to_json_checked(
            &arg(&a, 0),
            "toJson",
        )?)))
    }),
    ("toPrettyJson", |a| {
        Ok(Value::from(go_json_pretty(&to_json_checked(
            &arg(&a, 0),
            "toPrettyJson",
        )?)))
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
            Ok(serde_json::Value::Null) => Value::from(Vec::<Value>::new()),
            Ok(other) => Value::from(vec![Value::from(format!(
                "error unmarshaling JSON: while decoding JSON: {}",
                json_type_error(&other, "[]interface {}")
            ))]),
            Err(e) => Value::from(vec![Value::from(e)]),
        })
    }),
    ("fromJson", |a| {
        Ok(
            match serde_json::from_str::<serde_json::Value>(&s(&arg(&a, 0))) {
                Ok(v @ serde_json::Value::Object(_)) => from_json(&v),
                Ok(serde_json::Value::Null) => GoMap::value(BTreeMap::new()),
                Ok(other) => error_map(json_type_error(&other, "map[string]interface {}")),
                Err(e) => error_map(e.to_string()),
            },
        )
    }),
    ("quote", |a| {
        Ok(Value::from(
            a.0.iter()
                .filter(|v| !v.is_none())
                .map(|v| go_quote(&go_fmt(v)))
                .collect::<Vec<_>>()
                .join(" "),
        ))
    }),
    ("squote", |a| {
        Ok(Value::from(
            a.0.iter()
                .filter(|v| !v.is_none())
                .map(|v| format!("'{}'", go_fmt(v)))
                .collect::<Vec<_>>()
                .join(" "),
        ))
    }),
    ("indent", |a| {
        want(&a, 2, "indent")?;
        Ok(Value::from(indent_str(to_i64(&a[0]), &s(&a[1]))?))
    }),
    ("nindent", |a| {
        want(&a, 2, "nindent")?;
        Ok(Value::from(format!(
            "\n{}",
            indent_str(to_i64(&a[0]), &s(&a[1]))?
        )))
    }),
    ("trim", |a| Ok(Value::from(s(&arg(&a, 0)).trim()))),
    ("trimAll", |a| {
        let cut = s(&arg(&a, 0));
        Ok(Value::from(
            s(&arg(&a, 1)).trim_matches(|c| cut.contains(c)),
        ))
    }),
    ("trimPrefix", |a| {
        let (p, x) = (s(&arg(&a, 0)), s(&arg(&a, 1)));
        Ok(Value::from(x.strip_prefix(p.as_str()).unwrap_or(&x)))
    }),
    ("trimSuffix", |a| {
        let (p, x) = (s(&arg(&a, 0)), s(&arg(&a, 1)));
        Ok(Value::from(x.strip_suffix(p.as_str()).unwrap_or(&x)))
    }),
    ("trunc", |a| {
        want(&a, 2, "trunc")?;
        let n = to_i64(&a[0]);
        let x = s(&a[1]);
        let len = x.len() as i64;
        // Sprig slices bytes: positive n keeps the prefix, negative keeps the suffix.
        let r = if n < 0 && -n < len {
            x.get((len + n) as usize..).unwrap_or(&x).to_string()
        } else if n >= 0 && n < len {
            x.get(..n as usize).unwrap_or(&x).to_string()
        } else {
            x
        };
        Ok(Value::from(r))
    }),
    ("upper", |a| Ok(Value::from(go_upper(&s(&arg(&a, 0)))))),
    ("lower", |a| Ok(Value::from(go_lower(&s(&arg(&a, 0)))))),
    ("title", |a| Ok(Value::from(title(&s(&arg(&a, 0)))))),
    ("replace", |a| {
        want(&a, 3, "replace")?;
        Ok(Value::from(s(&a[2]).replace(&s(&a[0]), &s(&a[1]))))
    }),
    ("contains", |a| {
        Ok(Value::from(s(&arg(&a, 1)).contains(&s(&arg(&a, 0)))))
    }),
    ("hasPrefix", |a| {
        Ok(Value::from(s(&arg(&a, 1)).starts_with(&s(&arg(&a, 0)))))
    }),
    ("hasSuffix", |a| {
        Ok(Value::from(s(&arg(&a, 1)).ends_with(&s(&arg(&a, 0)))))
    }),
    ("repeat", |a| {
        let n = to_i64(&arg(&a, 0));
        if n < 0 {
            return Err(err("strings: negative Repeat count"));
        }
        Ok(Value::from(s(&arg(&a, 1)).repeat(n as usize)))
    }),
    ("splitList", |a| {
        Ok(go_split(&s(&arg(&a, 1)), &s(&arg(&a, 0)), -1)
            .into_iter()
            .map(Value::from)
            .collect())
    }),
    ("split", |a| {
        let m = go_split(&s(&arg(&a, 1)), &s(&arg(&a, 0)), -1)
            .into_iter()
            .enumerate()
            .map(|(i, p)| (format!("_{i}"), Value::from(p)))
            .collect();
        Ok(GoMap::typed(m, GoType::StringMap))
    }),
    ("join", |a| {
        let sep = s(&arg(&a, 0));
        let v = arg(&a, 1);
        let items = list_items(&v).unwrap_or_else(|| vec![v]);
        Ok(Value::from(
            items
                .iter()
                .filter(|x| !x.is_none())
                .map(s)
                .collect::<Vec<_>>()
                .join(&sep),
        ))
    }),
    ("list", |a| Ok(Value::from(a.0))),
    ("tuple", |a| Ok(Value::from(a.0))),
    ("dict", |a| {
        // A key without a value gets "" (Sprig).
        let mut m = BTreeMap::new();
        for pair in a.0.chunks(2) {
            m.insert(
                strval(&pair[0]),
                pair.get(1).cloned().unwrap_or(Value::from("")),
            );
        }
        Ok(GoMap::value(m))
    }),
    ("get", |a| {
        Ok(map_entries(&arg(&a, 0))
            .and_then(|m| m.get(&s(&arg(&a, 1))).cloned())
            .unwrap_or(Value::from("")))
    }),
    ("set", |a| {
        want(&a, 3, "set")?;
        let m = a[0]
            .downcast_object_ref::<GoMap>()
            .ok_or_else(|| err("set: first argument must be a map"))?;
        m.lock().insert(s(&a[1]), a[2].clone());
        Ok(a[0].clone())
    }),
    ("unset", |a| {
        want(&a, 2, "unset")?;
        let m = a[0]
            .downcast_object_ref::<GoMap>()
            .ok_or_else(|| err("unset: first argument must be a map"))?;
        m.lock().remove(&s(&a[1]));
        Ok(a[0].clone())
    }),
    ("hasKey", |a| {
        Ok(Value::from(
            map_entries(&arg(&a, 0)).is_some_and(|m| m.contains_key(&s(&arg(&a, 1)))),
        ))
    }),
    ("keys", |a| {
        let mut out = Vec::new();
        for m in &a.0 {
            out.extend(
                map_entries(m)
                    .unwrap_or_default()
                    .into_keys()
                    .map(Value::from),
            );
        }
        Ok(Value::from(out))
    }),
    ("values", |a| {
        Ok(Value::from(
            map_entries(&arg(&a, 0))
                .unwrap_or_default()
                .into_values()
                .collect::<Vec<_>>(),
        ))
    }),
    ("pluck", |a| {
        let key = s(&arg(&a, 0));
        Ok(a.0
            .iter()
            .skip(1)
            .filter_map(|m| map_entries(m)?.get(&key).cloned())
            .collect())
    }),
    ("merge", |a| {
        let dst = arg(&a, 0);
        let m = dst
            .downcast_object_ref::<GoMap>()
            .ok_or_else(|| err("merge: first argument must be a map"))?;
        for src in a.0.iter().skip(1) {
            let sm = map_entries(src).unwrap_or_default();
            merge_into(&mut m.lock(), &sm, false);
        }
        Ok(dst.clone())
    }),
    ("mergeOverwrite", |a| {
        let dst = arg(&a, 0);
        let m = dst
            .downcast_object_ref::<GoMap>()
            .ok_or_else(|| err("mergeOverwrite: first argument must be a map"))?;
        for src in a.0.iter().skip(1) {
            let sm = map_entries(src).unwrap_or_default();
            merge_into(&mut m.lock(), &sm, true);
        }
        Ok(dst.clone())
    }),
    ("deepCopy", |a| {
        let v = arg(&a, 0);
        if v.is_none() || v.is_undefined() {
            return Err(err("reflect: call of reflect.Value.Type on zero Value"));
        }
        Ok(deep_copy(&v))
    }),
    ("append", |a| {
        let mut l = go_list("push", &arg(&a, 0))?;
        l.push(arg(&a, 1));
        Ok(Value::from(l))
    }),
    ("prepend", |a| {
        let mut l = go_list("prepend", &arg(&a, 0))?;
        l.insert(0, arg(&a, 1));
        Ok(Value::from(l))
    }),
    ("sortAlpha", |a| {
        // Sprig: a list sorts its items' strings; anything else is a one-item list.
        let v = arg(&a, 0);
        let mut l: Vec<String> = match list_items(&v) {
            Some(items) => strslice(&items),
            None => vec![strval(&v)],
        };
        l.sort();
        Ok(l.into_iter().map(Value::from).collect())
    }),
    ("first", |a| {
        Ok(go_list("find first", &arg(&a, 0))?
            .first()
            .cloned()
            .unwrap_or_default())
    }),
    ("last", |a| {
        Ok(go_list("find last", &arg(&a, 0))?
            .last()
            .cloned()
            .unwrap_or_default())
    }),
    ("rest", |a| {
        let l = go_list("find rest", &arg(&a, 0))?;
        // Sprig returns nil for an empty list.
        if l.is_empty() {
            return Ok(Value::from(()));
        }
        Ok(Value::from(l.into_iter().skip(1).collect::<Vec<_>>()))
    }),
    ("initial", |a| {
        let mut l = go_list("find initial", &arg(&a, 0))?;
        if l.is_empty() {
            return Ok(Value::from(()));
        }
        l.pop();
        Ok(Value::from(l))
    }),
    ("uniq", |a| {
        let mut out: Vec<Value> = Vec::new();
        for v in go_list("find uniq", &arg(&a, 0))? {
            if !out.iter().any(|o| to_json(o) == to_json(&v)) {
                out.push(v);
            }
        }
        Ok(Value::from(out))
    }),
    ("has", |a| {
        // A nil haystack has nothing; anything else must be a list.
        let hay = arg(&a, 1);
        if hay.is_none() || hay.is_undefined() {
            return Ok(Value::from(false));
        }
        let needle = to_json(&arg(&a, 0));
        Ok(Value::from(
            go_list("find has", &hay)?
                .iter()
                .any(|x| to_json(x) == needle),
        ))
    }),
    ("without", |a| {
        let l = go_list("find without", &arg(&a, 0))?;
        let drop: Vec<serde_json::Value> = a.0.iter().skip(1).map(to_json).collect();
        Ok(Value::from(
            l.into_iter()
                .filter(|x| !drop.contains(&to_json(x)))
                .collect::<Vec<_>>(),
        ))
    }),
    ("compact", |a| {
        Ok(Value::from(
            go_list("compact", &arg(&a, 0))?
                .into_iter()
                .filter(|x| !empty(x))
                .collect::<Vec<_>>(),
        ))
    }),
    ("until", |a| {
        let n = to_i64(&arg(&a, 0));
        Ok(until_step(0, n, if n < 0 { -1 } else { 1 })
            .into_iter()
            .map(Value::from)
            .collect())
    }),
    ("untilStep", |a| {
        Ok(until_step(
            to_i64(&arg(&a, 0)),
            to_i64(&arg(&a, 1)),
            to_i64(&arg(&a, 2)),
        )
        .into_iter()
        .map(Value::from)
        .collect())
    }),
    ("add", |a| {
        Ok(Value::from(a.0.iter().map(to_i64).sum::<i64>()))
    }),
    ("add1", |a| Ok(Value::from(to_i64(&arg(&a, 0)) + 1))),
    ("sub", |a| {
        Ok(Value::from(to_i64(&arg(&a, 0)) - to_i64(&arg(&a, 1))))
    }),
    ("mul", |a| {
        Ok(Value::from(a.0.iter().map(to_i64).product::<i64>()))
    }),
    ("div", |a| {
        let d = to_i64(&arg(&a, 1));
        if d == 0 {
            return Err(err("runtime error: integer divide by zero"));
        }
        Ok(Value::from(to_i64(&arg(&a, 0)) / d))
    }),
    ("mod", |a| {
        let d = to_i64(&arg(&a, 1));
        if d == 0 {
            return Err(err("runtime error: integer divide by zero"));
        }
        Ok(Value::from(to_i64(&arg(&a, 0)) % d))
    }),
    ("max", |a| {
        Ok(Value::from(a.0.iter().map(to_i64).max().unwrap_or(0)))
    }),
    ("min", |a| {
        Ok(Value::from(a.0.iter().map(to_i64).min().unwrap_or(0)))
    }),
    ("addf", |a| {
        Ok(Value::from(decimal_op(0.0, &a.0, DecOp::Add)))
    }),
    ("add1f", |a| {
        Ok(Value::from(decimal_op(
            to_f64(&arg(&a, 0)),
            &[Value::from(1)],
            DecOp::Add,
        )))
    }),
    ("subf", |a| {
        Ok(Value::from(decimal_op(
            to_f64(&a[0]),
            &a.0[1..],
            DecOp::Sub,
        )))
    }),
    ("mulf", |a| {
        Ok(Value::from(decimal_op(
            to_f64(&a[0]),
            &a.0[1..],
            DecOp::Mul,
        )))
    }),
    ("divf", |a| {
        if a.0[1..].iter().any(|v| to_f64(v) == 0.0) {
            return Err(err("decimal division by 0"));
        }
        Ok(Value::from(decimal_op(
            to_f64(&a[0]),
            &a.0[1..],
            DecOp::Div,
        )))
    }),
    ("maxf", |a| {
        Ok(Value::from(
            a.0[1..].iter().map(to_f64).fold(to_f64(&a[0]), go_max),
        ))
    }),
    ("minf", |a| {
        Ok(Value::from(
            a.0[1..].iter().map(to_f64).fold(to_f64(&a[0]), go_min),
        ))
    }),
    ("all", |a| Ok(Value::from(a.iter().all(|v| !empty(v))))),
    ("any", |a| Ok(Value::from(a.iter().any(|v| !empty(v))))),
    ("chunk", |a| {
        let size = to_i64(&a[0]);
        let items = go_list("chunk", &a[1])?;
        if size < 1 {
            return Err(err("chunk size must be at least 1"));
        }
        Ok(Value::from(
            items
                .chunks(size as usize)
                .map(|c| Value::from(c.to_vec()))
                .collect::<Vec<_>>(),
        ))
    }),
    ("b32enc", |a| {
        Ok(Value::from(b32_encode(s(&a[0]).as_bytes())))
    }),
    ("b32dec", |a| {
        Ok(Value::from(match b32_decode(&s(&a[0])) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => e,
        }))
    }),
    ("swapcase", |a| Ok(Value::from(swap_case(&s(&a[0]))))),
    ("initials", |a| {
        // goutils: the first byte of each whitespace-separated word.
        let mut out = String::new();
        let mut gap = true;
        for c in s(&a[0]).chars() {
            if c.is_whitespace() {
                gap = true;
            } else if gap {
                out.push(c);
                gap = false;
            }
        }
        Ok(Value::from(out))
    }),
    ("untitle", |a| {
        let mut out = String::new();
        let mut next = true;
        for c in s(&a[0]).chars() {
            if c.is_whitespace() {
                next = true;
                out.push(c);
            } else if next {
                out.extend(c.to_lowercase().next());
                next = false;
            } else {
                out.push(c);
            }
        }
        Ok(Value::from(out))
    }),
    ("base", |a| Ok(Value::from(go_path_base(&s(&a[0]))))),
    ("dir", |a| Ok(Value::from(go_path_dir(&s(&a[0]))))),
    ("ext", |a| {
        let p = s(&a[0]);
        let ext = p
            .rfind(['.', '/'])
            .filter(|i| p.as_bytes()[*i] == b'.')
            .map(|i| p[i..].to_string())
            .unwrap_or_default();
        Ok(Value::from(ext))
    }),
    ("clean", |a| Ok(Value::from(go_path_clean(&s(&a[0]))))),
    ("isAbs", |a| Ok(Value::from(s(&a[0]).starts_with('/')))),
    ("sha512sum", |a| {
        use sha2::Digest as _;
        Ok(Value::from(
            sha2::Sha512::digest(s(&a[0]).as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
        ))
    }),
    ("regexQuoteMeta", |a| {
        let mut out = String::new();
        for c in s(&a[0]).chars() {
            if "\\.+*?()|[]{}^$".contains(c) {
                out.push('\\');
            }
            out.push(c);
        }
        Ok(Value::from(out))
    }),
    ("typeIsLike", |a| {
        let t = type_of(&a[1]);
        let want = s(&a[0]);
        Ok(Value::from(t == want || t == format!("*{want}")))
    }),
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
    ("toDecimal", |a| {
        Ok(Value::from(
            i64::from_str_radix(&strval(&a[0]), 8).unwrap_or(0),
        ))
    }),
    ("int", |a| Ok(Value::from(to_i64(&arg(&a, 0))))),
    ("int64", |a| Ok(Value::from(to_i64(&arg(&a, 0))))),
    ("float64", |a| Ok(Value::from(to_f64(&arg(&a, 0))))),
    ("toString", |a| Ok(Value::from(strval(&arg(&a, 0))))),
    ("toStrings", |a| {
        let v = arg(&a, 0);
        Ok(match list_items(&v) {
            Some(items) => strslice(&items),
            None if v.is_none() || v.is_undefined() => Vec::new(),
            None => vec![strval(&v)],
        }
        .into_iter()
        .map(Value::from)
        .collect())
    }),
    ("atoi", |a| {
        // strconv.Atoi: base 10, an optional sign, nothing else; failures give 0.
        Ok(Value::from(s(&arg(&a, 0)).parse::<i64>().unwrap_or(0)))
    }),
    ("b64enc", |a| {
        Ok(Value::from(b64(s(&arg(&a, 0)).as_bytes())))
    }),
    ("b64dec", |a| {
        Ok(Value::from(match go_b64_decode(&s(&arg(&a, 0))) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => e,
        }))
    }),
    ("sha256sum", |a| {
        Ok(Value::from(sha(s(&arg(&a, 0)).as_bytes(), 2)))
    }),
    ("sha1sum", |a| {
        Ok(Value::from(sha(s(&arg(&a, 0)).as_bytes(), 1)))
    }),
    ("kindIs", |a| {
        Ok(Value::from(kind_of(&arg(&a, 1)) == s(&arg(&a, 0))))
    }),
    ("kindOf", |a| Ok(Value::from(kind_of(&arg(&a, 0))))),
    ("typeOf", |a| Ok(Value::from(type_of(&arg(&a, 0))))),
    ("typeIs", |a| {
        Ok(Value::from(type_of(&arg(&a, 1)) == s(&arg(&a, 0))))
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
                m.get(&s(k)).cloned().unwrap_or_default()
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
    ("regexMatch", |a| {
        // Sprig's regexMatch swallows a bad pattern (false); mustRegexMatch reports it.
        Ok(Value::from(
            regex::Regex::new(&s(&arg(&a, 0)))
                .map(|re| re.is_match(&s(&arg(&a, 1))))
                .unwrap_or(false),
        ))
    }),
    ("mustRegexMatch", |a| {
        let re = regex::Regex::new(&s(&arg(&a, 0))).map_err(|e| err(e.to_string()))?;
        Ok(Value::from(re.is_match(&s(&arg(&a, 1)))))
    }),
    ("regexFind", |a| {
        let re = regex::Regex::new(&s(&arg(&a, 0))).map_err(|e| err(e.to_string()))?;
        Ok(Value::from(
            re.find(&s(&arg(&a, 1)))
                .map(|m| m.as_str().to_string())
                .unwrap_or_default(),
        ))
    }),
    ("regexReplaceAll", |a| {
        let re = regex::Regex::new(&s(&arg(&a, 0))).map_err(|e| err(e.to_string()))?;
        Ok(Value::from(
            re.replace_all(&s(&arg(&a, 1)), s(&arg(&a, 2)).as_str())
                .into_owned(),
        ))
    }),
    ("regexReplaceAllLiteral", |a| {
        let re = regex::Regex::new(&s(&arg(&a, 0))).map_err(|e| err(e.to_string()))?;
        Ok(Value::from(
            re.replace_all(&s(&arg(&a, 1)), regex::NoExpand(&s(&arg(&a, 2))))
                .into_owned(),
        ))
    }),
    ("lookup", |_a| Ok(GoMap::value(BTreeMap::new()))),
    ("dig", |a| {
        // dig "k1" "k2" default map. Sprig type-asserts every step to a plain
        // map[string]interface{}, so `.Values` itself, nil or a scalar on the path fail.
        let n = a.len();
        if n < 3 {
            return Err(err("wrong number of args for dig"));
        }
        let as_plain_map = |v: &Value| -> Result<BTreeMap<String, Value>, Error> {
            match v.downcast_object_ref::<GoMap>() {
                Some(m) if m.1 == GoType::Map => Ok(m.snapshot()),
                _ => Err(err(format!(
                    "interface conversion: interface {{}} is {}, not map[string]interface {{}}",
                    match type_of(v) {
                        "<nil>" => "nil",
                        t => t,
                    }
                ))),
            }
        };
        let keys = a[..n - 2]
            .iter()
            .map(|k| {
                k.as_str().map(str::to_string).ok_or_else(|| {
                    err(format!(
                        "interface conversion: interface {{}} is {}, not string",
                        type_of(k)
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut cur = as_plain_map(&a[n - 1])?;
        for (i, k) in keys.iter().enumerate() {
            let Some(step) = cur.get(k).cloned() else {
                return Ok(a[n - 2].clone());
            };
            if i + 1 == keys.len() {
                return Ok(step);
            }
            cur = as_plain_map(&step)?;
        }
        Ok(a[n - 2].clone())
    }),
    ("pick", |a| {
        let m = map_entries(&arg(&a, 0)).unwrap_or_default();
        let keys: Vec<String> = a.iter().skip(1).map(s).collect();
        Ok(GoMap::value(
            m.into_iter().filter(|(k, _)| keys.contains(k)).collect(),
        ))
    }),
    ("omit", |a| {
        let m = map_entries(&arg(&a, 0)).unwrap_or_default();
        let keys: Vec<String> = a.iter().skip(1).map(s).collect();
        Ok(GoMap::value(
            m.into_iter().filter(|(k, _)| !keys.contains(k)).collect(),
        ))
    }),
    ("concat", |a| {
        let mut out = Vec::new();
        for l in a.iter() {
            if l.is_none() || l.is_undefined() {
                return Err(err(NIL_DEREF));
            }
            match list_items(l) {
                Some(items) => out.extend(items),
                None => return Err(err(format!("Cannot concat type {} as list", kind_of(l)))),
            }
        }
        Ok(Value::from(out))
    }),
    ("reverse", |a| {
        let mut l = go_list("find reverse", &arg(&a, 0))?;
        l.reverse();
        Ok(Value::from(l))
    }),
    ("cat", |a| {
        Ok(Value::from(
            a.iter()
                .filter(|v| !v.is_none())
                .map(s)
                .collect::<Vec<_>>()
                .join(" "),
        ))
    }),
    ("nospace", |a| {
        Ok(Value::from(
            s(&arg(&a, 0)).split_whitespace().collect::<String>(),
        ))
    }),
    ("substr", |a| {
        // Sprig slices bytes and panics (an error) on bounds Go rejects.
        let (start, end, x) = (to_i64(&arg(&a, 0)), to_i64(&arg(&a, 1)), s(&arg(&a, 2)));
        let b = x.as_bytes();
        let len = b.len() as i64;
        let (st, en) = if start < 0 {
            (0, end)
        } else if end < 0 || end > len {
            (start, len)
        } else {
            (start, end)
        };
        if st < 0 || en < 0 || st > en || en > len {
            return Err(err(format!(
                "runtime error: slice bounds out of range [{st}:{en}]"
            )));
        }
        Ok(Value::from(
            String::from_utf8_lossy(&b[st as usize..en as usize]).into_owned(),
        ))
    }),
    ("abbrev", |a| {
        let (w, x) = (to_i64(&arg(&a, 0)), s(&arg(&a, 1)));
        if w < 4 || x.len() as i64 <= w {
            return Ok(Value::from(x));
        }
        Ok(Value::from(format!(
            "{}...",
            x.get(..(w - 3) as usize).unwrap_or("")
        )))
    }),
    ("snakecase", |a| {
        Ok(Value::from(camel_to_lower(&s(&arg(&a, 0)), '_')))
    }),
    ("kebabcase", |a| {
        Ok(Value::from(camel_to_lower(&s(&arg(&a, 0)), '-')))
    }),
    ("camelcase", |a| {
        Ok(Value::from(
            s(&arg(&a, 0))
                .split(['_', '-', ' '])
                .filter(|w| !w.is_empty())
                .map(|w| {
                    let mut c = w.chars();
                    c.next()
                        .map(|f| f.to_uppercase().chain(c).collect::<String>())
                        .unwrap_or_default()
                })
                .collect::<String>(),
        ))
    }),
    ("toRawJson", |a| {
        Ok(Value::from(raw_json(&to_json_checked(
            &arg(&a, 0),
            "toRawJson",
        )?)))
    }),
    ("mustToJson", |a| {
        Ok(Value::from(go_json(&to_json_checked(
            &arg(&a, 0),
            "mustToJson",
        )?)))
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
        Ok(Value::from(items[i..j].to_vec()))
    }),
    ("ceil", |a| Ok(Value::from(to_f64(&arg(&a, 0)).ceil()))),
    ("floor", |a| Ok(Value::from(to_f64(&arg(&a, 0)).floor()))),
    ("wrap", |a| {
        Ok(Value::from(wrap_custom(
            &s(&a[1]),
            a[0].as_i64().unwrap_or(1),
            "",
            false,
        )))
    }),
    ("wrapWith", |a| {
        Ok(Value::from(wrap_custom(
            &s(&a[2]),
            a[0].as_i64().unwrap_or(1),
            &s(&a[1]),
            true,
        )))
    }),
    ("regexSplit", |a| {
        let re = regex::Regex::new(&s(&arg(&a, 0))).map_err(|e| err(e.to_string()))?;
        let text = s(&arg(&a, 1));
        let n = to_i64(&arg(&a, 2));
        let parts: Vec<Value> = if n < 0 {
            re.split(&text).map(Value::from).collect()
        } else {
            re.splitn(&text, n as usize).map(Value::from).collect()
        };
        Ok(Value::from(parts))
    }),
    ("regexFindAll", |a| {
        let re = regex::Regex::new(&s(&arg(&a, 0))).map_err(|e| err(e.to_string()))?;
        let text = s(&arg(&a, 1));
        let n = to_i64(&arg(&a, 2));
        let it = re.find_iter(&text).map(|m| Value::from(m.as_str()));
        Ok(Value::from(if n < 0 {
            it.collect::<Vec<_>>()
        } else {
            it.take(n as usize).collect()
        }))
    }),
    ("splitn", |a| {
        let (sep, n, text) = (s(&arg(&a, 0)), to_i64(&arg(&a, 1)), s(&arg(&a, 2)));
        Ok(GoMap::typed(
            go_split(&text, &sep, n)
                .into_iter()
                .enumerate()
                .map(|(i, p)| (format!("_{i}"), Value::from(p)))
                .collect(),
            GoType::StringMap,
        ))
    }),
    ("plural", |a| {
        Ok(if to_i64(&arg(&a, 2)) == 1 {
            arg(&a, 0)
        } else {
            arg(&a, 1)
        })
    }),
    ("round", |a| {
        // Sprig: round(value, places[, roundOn=.5]) as float64.
        let (x, places) = (to_f64(&arg(&a, 0)), to_i64(&arg(&a, 1)).clamp(0, 15) as i32);
        let round_on = if a.len() > 2 { to_f64(&a[2]) } else { 0.5 };
        let pow = 10f64.powi(places);
        let digit = x.abs() * pow;
        let (int, frac) = (digit.trunc(), digit.fract());
        let r = if frac >= round_on { int + 1.0 } else { int };
        Ok(Value::from(r / pow * x.signum()))
    }),
    ("seq", |a| {
        let nums: Vec<i64> = a.iter().map(to_i64).collect();
        let list = match nums.as_slice() {
            [end] => {
                let inc = if *end < 1 { -1 } else { 1 };
                until_step(1, end + inc, inc)
            }
            [start, end] => {
                let step = if end < start { -1 } else { 1 };
                until_step(*start, end + step, step)
            }
            [start, step, end] => {
                let inc = if end < start { -1 } else { 1 };
                if end < start && *step > 0 {
                    Vec::new()
                } else {
                    until_step(*start, end + inc, *step)
                }
            }
            _ => Vec::new(),
        };
        Ok(Value::from(
            list.iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(" "),
        ))
    }),
    ("adler32sum", |a| {
        let (mut x, mut y) = (1u32, 0u32);
        for b in s(&arg(&a, 0)).bytes() {
            x = (x + u32::from(b)) % 65_521;
            y = (y + x) % 65_521;
        }
        Ok(Value::from(((y << 16) | x).to_string()))
    }),
    ("deepEqual", |a| {
        Ok(Value::from(to_json(&arg(&a, 0)) == to_json(&arg(&a, 1))))
    }),
    ("fromJsonArray", |a| {
        Ok(
            match serde_json::from_str::<serde_json::Value>(&s(&arg(&a, 0))) {
                Ok(v @ serde_json::Value::Array(_)) => from_json(&v),
                Ok(serde_json::Value::Null) => Value::from(Vec::<Value>::new()),
                Ok(other) => {
                    Value::from(vec![Value::from(json_type_error(&other, "[]interface {}"))])
                }
                Err(e) => Value::from(vec![Value::from(e.to_string())]),
            },
        )
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

/// Go's json.Marshal without HTML escaping (Sprig's toRawJson).
fn raw_json(v: &serde_json::Value) -> String {
    let mut out = String::new();
    go_json_into(&mut out, v, false);
    out
}

/// The per-render random source behind `randAlphaNum`, `uuidv4`, ...: SplitMix64 seeded from
/// [`super::RenderOptions::seed`], so one render's random output is a function of the seed and
/// the chart alone (the rendered digest must not change on every reconcile). Calls happen in
/// the fixed render order, so the same seed gives the same strings.
#[derive(Debug)]
pub struct Rng(Mutex<u64>);

impl Rng {
    /// A random source for one render.
    pub fn value(seed: u64) -> Value {
        Value::from_object(Rng(Mutex::new(seed)))
    }
    fn next(&self) -> u64 {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A uniform value in `0..n` (n > 0), without modulo bias.
    fn below(&self, n: u64) -> u64 {
        let zone = u64::MAX - (u64::MAX % n);
        loop {
            let x = self.next();
            if x < zone {
                return x % n;
            }
        }
    }
}

impl Object for Rng {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }
}

fn rng(state: &State) -> Result<Arc<Rng>, Error> {
    state
        .lookup("__rng")
        .and_then(|v| v.downcast_object::<Rng>())
        .ok_or_else(|| err("internal: no random source in this render"))
}

fn random_string(
    state: &State,
    name: &str,
    args: &[Value],
    alphabet: &[u8],
) -> Result<Value, Error> {
    check_args(name, args)?;
    let r = rng(state)?;
    let n = args[0].as_i64().unwrap_or(0).max(0);
    Ok(Value::from(
        (0..n)
            .map(|_| alphabet[r.below(alphabet.len() as u64) as usize] as char)
            .collect::<String>(),
    ))
}

fn f_uuidv4(state: &State, args: Rest<Value>) -> Result<Value, Error> {
    check_args("uuidv4", &args)?;
    let r = rng(state)?;
    let mut b = [0u8; 16];
    for chunk in b.chunks_mut(8) {
        chunk.copy_from_slice(&r.next().to_le_bytes());
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    Ok(Value::from(format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )))
}

fn f_rand_int(state: &State, args: Rest<Value>) -> Result<Value, Error> {
    check_args("randInt", &args)?;
    // Sprig: rand.Intn(max-min) + min, which panics (an error) unless max > min.
    let (min, max) = (args[0].as_i64().unwrap_or(0), args[1].as_i64().unwrap_or(0));
    let span = max
        .checked_sub(min)
        .filter(|s| *s > 0)
        .ok_or_else(|| err("randInt: invalid argument to Intn (max must be greater than min)"))?;
    Ok(Value::from(min + rng(state)?.below(span as u64) as i64))
}

/// goutils' `WrapCustom` (Sprig's `wrap` and `wrapWith`): byte-based, wraps at the last space
/// within `width`, drops a space at a line start; long words are split only when `split_long`.
fn wrap_custom(text: &str, width: i64, newline: &str, split_long: bool) -> String {
    let s = text.as_bytes();
    if s.is_empty() {
        return String::new();
    }
    let newline = if newline.is_empty() { "\n" } else { newline };
    let width = usize::try_from(width.max(1)).unwrap_or(1);
    let mut out: Vec<u8> = Vec::with_capacity(s.len() + 16);
    let mut offset = 0;
    while s.len() - offset > width {
        if s[offset] == b' ' {
            offset += 1;
            continue;
        }
        let window = &s[offset..offset + width + 1];
        if let Some(sp) = window.iter().rposition(|b| *b == b' ') {
            out.extend_from_slice(&s[offset..offset + sp]);
            out.extend_from_slice(newline.as_bytes());
            offset += sp + 1;
        } else if split_long {
            out.extend_from_slice(&s[offset..offset + width]);
            out.extend_from_slice(newline.as_bytes());
            offset += width;
        } else {
            let end = offset + width;
            match s[end..].iter().position(|b| *b == b' ') {
                Some(i) => {
                    out.extend_from_slice(&s[offset..end + i]);
                    out.extend_from_slice(newline.as_bytes());
                    offset = end + i + 1;
                }
                None => {
                    out.extend_from_slice(&s[offset..]);
                    offset = s.len();
                }
            }
        }
    }
    out.extend_from_slice(&s[offset..]);
    String::from_utf8_lossy(&out).into_owned()
}

const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

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
fn civil(days: i64) -> (i64, u32, u32) {
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

const MONTHS: [&str; 12] = [
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
const DAYS: [&str; 7] = [
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

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Sprig accepts a time, or Unix seconds as a number.
fn as_time(v: &Value) -> Result<GoTime, Error> {
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

fn f_now(state: &State) -> Result<Value, Error> {
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

fn f_date(layout: String, t: Value) -> Result<Value, Error> {
    Ok(Value::from(go_time_format(&as_time(&t)?, &layout)))
}

fn f_date_in_zone(layout: String, t: Value, zone: String) -> Result<Value, Error> {
    // Pallet renders in UTC, which is also its local zone (see README).
    if zone != "UTC" && zone != "Local" {
        return Err(err(format!(
            "unsupported construct: dateInZone with zone {zone:?} (only UTC)"
        )));
    }
    f_date(layout, t)
}

/// Sprig names that are the same function as another here: the `must*` variants (our plain
/// versions already return errors instead of panicking) and old spellings.
const ALIASES: &[(&str, &str)] = &[
    ("mustMerge", "merge"),
    ("mustMergeOverwrite", "mergeOverwrite"),
    ("mustAppend", "append"),
    ("push", "append"),
    ("mustPush", "append"),
    ("mustChunk", "chunk"),
    ("mustPrepend", "prepend"),
    ("mustFirst", "first"),
    ("mustLast", "last"),
    ("mustRest", "rest"),
    ("mustInitial", "initial"),
    ("mustUniq", "uniq"),
    ("mustWithout", "without"),
    ("mustHas", "has"),
    ("mustCompact", "compact"),
    ("mustDeepCopy", "deepCopy"),
    ("mustReverse", "reverse"),
    ("mustSlice", "slice"),
    ("mustRegexFind", "regexFind"),
    ("mustRegexFindAll", "regexFindAll"),
    ("mustRegexReplaceAll", "regexReplaceAll"),
    ("mustRegexReplaceAllLiteral", "regexReplaceAllLiteral"),
    ("mustRegexSplit", "regexSplit"),
    ("mustToRawJson", "toRawJson"),
    ("mustToPrettyJson", "toPrettyJson"),
    ("biggest", "max"),
    ("trimall", "trimAll"),
];

fn lookup_func(name: &str) -> Option<F> {
    let target = ALIASES
        .iter()
        .find(|(a, _)| *a == name)
        .map(|(_, t)| *t)
        .unwrap_or(name);
    FUNCS.iter().find(|(n, _)| *n == target).map(|(_, f)| *f)
}

/// Go parameter types of the functions, one letter per parameter: `S` string, `I` int, `B`
/// bool, `M` map[string]interface{}, `A` interface{}; a trailing `*` makes the last one
/// variadic. text/template checks arguments against these before calling, so passing a float64
/// from values where an int is wanted, or a missing value (a nil interface) where a string is
/// wanted, is an error in helm; it must be one here too, never a silent conversion. Functions
/// not listed take `interface{}` arguments and check for themselves.
const SIGNATURES: &[(&str, &str)] = &[
    ("ternary", "AAB"),
    ("required", "SA"),
    ("fail", "S"),
    ("semver", "S"),
    ("semverCompare", "SS"),
    ("fromYaml", "S"),
    ("fromYamlArray", "S"),
    ("fromJson", "S"),
    ("fromJsonArray", "S"),
    ("indent", "IS"),
    ("nindent", "IS"),
    ("trim", "S"),
    ("trimAll", "SS"),
    ("trimPrefix", "SS"),
    ("trimSuffix", "SS"),
    ("trunc", "IS"),
    ("upper", "S"),
    ("lower", "S"),
    ("title", "S"),
    ("replace", "SSS"),
    ("contains", "SS"),
    ("hasPrefix", "SS"),
    ("hasSuffix", "SS"),
    ("repeat", "IS"),
    ("splitList", "SS"),
    ("split", "SS"),
    ("splitn", "SIS"),
    ("join", "SA"),
    ("get", "MS"),
    ("set", "MSA"),
    ("unset", "MS"),
    ("hasKey", "MS"),
    ("keys", "M*"),
    ("values", "M"),
    ("pluck", "SM*"),
    ("merge", "MM*"),
    ("mergeOverwrite", "MM*"),
    ("pick", "MS*"),
    ("omit", "MS*"),
    ("append", "AA"),
    ("prepend", "AA"),
    ("has", "AA"),
    ("until", "I"),
    ("untilStep", "III"),
    ("sub", "AA"),
    ("div", "AA"),
    ("mod", "AA"),
    ("atoi", "S"),
    ("b64enc", "S"),
    ("b64dec", "S"),
    ("sha256sum", "S"),
    ("sha1sum", "S"),
    ("adler32sum", "S"),
    ("kindIs", "SA"),
    ("typeIs", "SA"),
    ("printf", "SA*"),
    ("regexMatch", "SS"),
    ("mustRegexMatch", "SS"),
    ("regexFind", "SS"),
    ("regexFindAll", "SSI"),
    ("regexSplit", "SSI"),
    ("regexReplaceAll", "SSS"),
    ("regexReplaceAllLiteral", "SSS"),
    ("lookup", "SSSS"),
    ("nospace", "S"),
    ("substr", "IIS"),
    ("abbrev", "IS"),
    ("snakecase", "S"),
    ("kebabcase", "S"),
    ("camelcase", "S"),
    ("randAlphaNum", "I"),
    ("randAlpha", "I"),
    ("randNumeric", "I"),
    ("randAscii", "I"),
    ("uuidv4", ""),
    ("add1f", "A"),
    ("subf", "AA*"),
    ("mulf", "AA*"),
    ("divf", "AA*"),
    ("maxf", "AA*"),
    ("minf", "AA*"),
    ("chunk", "IA"),
    ("b32enc", "S"),
    ("b32dec", "S"),
    ("swapcase", "S"),
    ("initials", "S"),
    ("untitle", "S"),
    ("base", "S"),
    ("dir", "S"),
    ("ext", "S"),
    ("clean", "S"),
    ("isAbs", "S"),
    ("sha512sum", "S"),
    ("regexQuoteMeta", "S"),
    ("typeIsLike", "SA"),
    ("toDecimal", "A"),
    ("duration", "A"),
    ("durationRound", "A"),
    ("toDate", "SS"),
    ("mustToDate", "SS"),
    ("dateModify", "SA"),
    ("mustDateModify", "SA"),
    ("ago", "A"),
    ("htmlDateInZone", "AS"),
    ("randInt", "II"),
    ("plural", "SSI"),
    ("round", "AIA*"),
    ("seq", "I*"),
    ("deepEqual", "AA"),
    ("wrap", "IS"),
    ("wrapWith", "ISS"),
    ("include", "SA"),
    ("tpl", "SA"),
    ("date", "SA"),
    ("dateInZone", "SAS"),
    ("htmlDate", "A"),
    ("now", ""),
];

/// The Go type name of a value as text/template's argument errors print it: a missing map key
/// is a nil `interface {}`.
fn arg_type_name(v: &Value) -> &'static str {
    if v.is_none() || v.is_undefined() {
        "interface {}"
    } else {
        type_of(v)
    }
}

/// Whether a literal `nil` as argument `i` of `name` is a nil map in Go (a map parameter),
/// which map functions treat as empty. `set` on a nil map panics in Go, so it is left out.
pub fn nil_is_empty_map(name: &str, i: usize) -> bool {
    if name == "set" {
        return false;
    }
    let Some(sig) = signature(name) else {
        return false;
    };
    let params = sig.trim_end_matches('*').as_bytes();
    params
        .get(i)
        .or(params.last().filter(|_| sig.ends_with('*')))
        == Some(&b'M')
}

/// Checks `args` against the Go signature of `name` (see [`SIGNATURES`]), as text/template does.
pub fn check_args(name: &str, args: &[Value]) -> Result<(), Error> {
    check_sig(name, signature(name), args)
}

/// The signature of `name` (through its alias), looked up once per registered function.
fn signature(name: &str) -> Option<&'static str> {
    let target = ALIASES
        .iter()
        .find(|(a, _)| *a == name)
        .map(|(_, t)| *t)
        .unwrap_or(name);
    SIGNATURES
        .iter()
        .find(|(n, _)| *n == target)
        .map(|(_, s)| *s)
}

fn check_sig(name: &str, sig: Option<&str>, args: &[Value]) -> Result<(), Error> {
    let Some(sig) = sig else {
        return Ok(());
    };
    let variadic = sig.ends_with('*');
    let params = sig.trim_end_matches('*').as_bytes();
    let fixed = if variadic {
        params.len() - 1
    } else {
        params.len()
    };
    if (!variadic && args.len() != fixed) || (variadic && args.len() < fixed) {
        return Err(err(format!(
            "wrong number of args for {name}: want {}{} got {}",
            if variadic { "at least " } else { "" },
            fixed,
            args.len()
        )));
    }
    for (i, a) in args.iter().enumerate() {
        let p = char::from(params.get(i).or(params.last()).copied().unwrap_or(b'A'));
        let ok = match p {
            'S' => a.kind() == ValueKind::String,
            'I' => a.kind() == ValueKind::Number && a.is_integer(),
            'B' => a.kind() == ValueKind::Bool,
            'M' => matches!(
                a.downcast_object_ref::<GoMap>(),
                Some(m) if matches!(m.1, GoType::Map | GoType::Values)
            ),
            _ => true,
        };
        if !ok {
            let want = match p {
                'S' => "string",
                'I' => "int",
                'B' => "bool",
                _ => "map[string]interface {}",
            };
            return Err(err(format!(
                "wrong type for value; expected {want}; got {} (argument {} of {name})",
                arg_type_name(a),
                i + 1
            )));
        }
    }
    Ok(())
}

/// Registers the runtime on an environment.
pub fn register(env: &mut Environment<'static>) {
    for (alias, _) in ALIASES {
        if let Some(f) = lookup_func(alias) {
            let name: &'static str = alias;
            let sig = signature(name);
            env.add_function(format!("h_{alias}"), move |args: Rest<Value>| {
                check_sig(name, sig, &args)?;
                f(args)
            });
        }
    }
    for (name, f) in FUNCS {
        let f = *f;
        let name: &'static str = name;
        let n = if name.starts_with("__") {
            name.to_string()
        } else {
            format!("h_{name}")
        };
        let sig = signature(name);
        env.add_function(n, move |args: Rest<Value>| {
            check_sig(name, sig, &args)?;
            f(args)
        });
    }
    env.add_function("__f", f_field);
    env.add_function("__fr", f_field_of_result);
    env.add_function("__nilmap", || GoMap::value(BTreeMap::new()));
    env.add_function("__call", f_call);
    env.add_function("h_include", |state: &State, args: Rest<Value>| {
        check_args("include", &args)?;
        f_include(state, s(&args[0]), Some(args[1].clone()))
    });
    env.add_function("__template", f_template);
    env.add_function("h_randAlphaNum", |state: &State, args: Rest<Value>| {
        random_string(state, "randAlphaNum", &args, ALNUM)
    });
    env.add_function("h_randAlpha", |state: &State, args: Rest<Value>| {
        random_string(state, "randAlpha", &args, &ALNUM[..52])
    });
    env.add_function("h_randNumeric", |state: &State, args: Rest<Value>| {
        random_string(state, "randNumeric", &args, &ALNUM[52..])
    });
    env.add_function("h_randAscii", |state: &State, args: Rest<Value>| {
        let printable: Vec<u8> = (32u8..=126).collect();
        random_string(state, "randAscii", &args, &printable)
    });
    env.add_function("h_uuidv4", f_uuidv4);
    env.add_function("h_randInt", f_rand_int);
    env.add_function("h_tpl", |state: &State, args: Rest<Value>| {
        check_args("tpl", &args)?;
        f_tpl(state, s(&args[0]), args[1].clone())
    });
    env.add_function("h_now", |state: &State, args: Rest<Value>| {
        check_args("now", &args)?;
        f_now(state)
    });
    env.add_function("h_date", |args: Rest<Value>| {
        check_args("date", &args)?;
        f_date(s(&args[0]), args[1].clone())
    });
    env.add_function("h_dateInZone", |args: Rest<Value>| {
        check_args("dateInZone", &args)?;
        f_date_in_zone(s(&args[0]), args[1].clone(), s(&args[2]))
    });
    env.add_function("h_unixEpoch", |t: Value| -> Result<Value, Error> {
        Ok(Value::from(as_time(&t)?.secs.to_string()))
    });
    env.add_function("h_htmlDate", |t: Value| -> Result<Value, Error> {
        f_date("2006-01-02".into(), t)
    });
    env.add_function("h_htmlDateInZone", |args: Rest<Value>| {
        check_args("htmlDateInZone", &args)?;
        f_date_in_zone("2006-01-02".into(), args[0].clone(), s(&args[1]))
    });
    env.add_function("h_ago", |state: &State, args: Rest<Value>| {
        check_args("ago", &args)?;
        // time.Since against the pinned clock, rounded to seconds.
        let now = f_now(state)?;
        let now = as_time(&now)?;
        let then = match args[0].kind() {
            ValueKind::Number if args[0].is_integer() => GoTime {
                secs: args[0].as_i64().unwrap_or(0),
                nanos: 0,
            },
            _ => match args[0].downcast_object_ref::<GoTime>() {
                Some(t) => *t,
                None => now,
            },
        };
        let ns = (i128::from(now.secs) - i128::from(then.secs)) * 1_000_000_000
            + i128::from(now.nanos)
            - i128::from(then.nanos);
        let rounded = (ns + ns.signum() * 500_000_000) / 1_000_000_000 * 1_000_000_000;
        Ok(Value::from(go_duration_string(rounded)))
    });
    env.set_formatter(|out, _state, v| {
        // Helm replaces Go's "<no value>" with the empty string after rendering.
        if v.is_none() || v.is_undefined() {
            return Ok(());
        }
        if let Some(ty) = unprintable(v) {
            return Err(err(format!(
                "unsupported construct: printing a {ty} (Go prints its struct fields)"
            )));
        }
        out.write_str(&go_fmt(v)).map_err(|_| err("write failed"))
    });
}

fn f_tpl(state: &State, text: String, data: Value) -> Result<Value, Error> {
    let name = state.name().to_string();
    // Lines of a parse error are lines of the tpl text, not of the file calling tpl.
    let parse_error = |e: super::HelmError| {
        let detail = match e {
            super::HelmError::Parse { line, msg, .. }
            | super::HelmError::Template { line, msg, .. } => {
                format!("line {line}: {msg}")
            }
            other => other.to_string(),
        };
        err(format!(
            "error calling tpl: cannot parse template {}: {detail}",
            go_quote(&text)
        ))
    };
    let parsed = parse::parse(&name, &text).map_err(parse_error)?;
    let t = translate::translate(&name, &parsed, &known()).map_err(parse_error)?;
    let ctx = minijinja::context! {
        __d0 => data,
        __now => state.lookup("__now"),
        __rng => state.lookup("__rng"),
        __depth => state.lookup("__depth").and_then(|d| d.as_i64()).unwrap_or(0) + 1,
    };
    if t.defines.is_empty() {
        return Ok(Value::from(
            state.env().render_named_str(&name, &t.main, ctx)?,
        ));
    }
    // helm parses tpl text into a clone of the template set: its defines are visible to this
    // tpl (and what it includes) only.
    let mut env = state.env().clone();
    for (dname, dsrc) in t.defines {
        env.add_template_owned(translate::define_name(&dname), dsrc)?;
    }
    Ok(Value::from(env.render_named_str(&name, &t.main, ctx)?))
}

/// Go's `time.ParseInLocation(layout, value, UTC)` for the layout elements `go_time_format`
/// knows. Zone abbreviations other than UTC/GMT get offset 0, as Go does for unknown ones.
fn go_time_parse(layout: &str, value: &str) -> Result<GoTime, String> {
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
fn go_parse_duration(s: &str) -> Result<i128, String> {
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
fn go_duration_string(ns: i128) -> String {
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
fn sprig_duration_ns(v: &Value, func: &str, string_is_seconds: bool) -> Result<i128, Error> {
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
    fn go_float_matches_fmt_v() {
        assert_eq!(go_float(1.0), "1");
        assert_eq!(go_float(8080.0), "8080");
        assert_eq!(go_float(1000000.0), "1e+06");
        assert_eq!(go_float(1234567.0), "1.234567e+06");
        assert_eq!(go_float(0.5), "0.5");
        assert_eq!(go_float(0.00001), "1e-05");
    }

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

    #[test]
    fn yaml_is_block_style_and_quotes_ambiguous_strings() {
        let v: serde_json::Value =
            serde_json::json!({"a": {"b": [1, {"c": "yes", "d": ""}]}, "e": []});
        assert_eq!(
            to_yaml(&v),
            "a:\n  b:\n  - 1\n  - c: \"yes\"\n    d: \"\"\ne: []"
        );
    }

    #[test]
    fn semver_constraints() {
        let check = super::super::semver::semver_compare;
        assert!(check(">=1.19-0", "v1.30.0").unwrap());
        assert!(!check("<1.19", "1.30.0").unwrap());
        assert!(!check(">=1.19", "1.30.0-beta.1").unwrap());
    }

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

    #[test]
    fn sha1_known_answer() {
        assert_eq!(sha(b"abc", 1), "a9993e364706816aba3e25717850c26c9cd0d89d");
    }
}
