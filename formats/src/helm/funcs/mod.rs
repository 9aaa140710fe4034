//! The runtime the translated templates call: Go value semantics on top of minijinja's `Value`,
//! Go's builtins, and the Sprig/Helm functions charts use.
//!
//! Value model (matching what Helm's templates see):
//! - maps are [`GoMap`] objects: shared and mutable (Sprig's `set`/`unset` mutate in place), keys
//!   iterate sorted like Go's `range` and `fmt`;
//! - numbers from values files are `float64` (Helm decodes YAML through JSON), template literals
//!   are `int`; printing follows Go's `%v` (so `1000000.0` prints `1e+06`, as in Helm);
//! - `nil` is minijinja's `none`.
//!
//! This module holds the value model, printing, field access, `.Files`, the conversions the
//! functions share, and the function lookup (aliases, Go signatures, registration). The
//! functions themselves live in one file per family, each with its own `FUNCS` table: see
//! `FAMILIES` in `registry.rs`.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use minijinja::value::{Enumerator, Object, ObjectRepr, Rest, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

use super::chart::class_contains;
use super::parse;
use super::translate;

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

pub use dates::{go_time_format, GoTime};
pub use random::Rng;
pub use registry::{check_args, known, nil_is_empty_map, register};
pub use templates::{render_define, LookupTable};
pub use yaml::to_yaml;

fn err(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// What Go's text/template prints for a missing value; helm removes it from rendered files and
/// from tpl's result.
pub const NO_VALUE: &str = "<no value>";

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
        GoType::Struct("chartutil.KubeVersion" | "sprig.certificate") => None,
        GoType::Struct(ty) => Some(ty),
        _ => None,
    }
}

/// The first value inside `v` (itself included) that JSON/YAML serialisation cannot render
/// as helm does: structs (Go marshals their JSON field names), `.Files` (base64 bytes) and
/// semver versions.
fn unserialisable(v: &Value) -> Option<&'static str> {
    if let Some(m) = v.downcast_object_ref::<GoMap>() {
        // Sprig's certificate has two string fields without JSON tags: it marshals as a map.
        match m.1 {
            GoType::Struct("sprig.certificate") => {}
            GoType::Struct(ty) => return Some(ty),
            _ => {}
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

/// Brackets the text that stands for output pallet cannot produce (toYaml of a struct, such
/// as the whole template context): Go marshals the struct's fields, and a chart may pass that
/// text around without printing it (eck-operator: `template "x" . | toYaml | indent 2`, a
/// define that ignores its data). Only a rendered file that contains it fails. A noncharacter,
/// so never part of a chart's own text.
pub const DEFERRED: char = '\u{FDD0}';

/// The stand-in text for `func` of `v` when [`unserialisable`] names it.
fn deferred_unsupported(v: &Value, func: &str) -> Option<Value> {
    unserialisable(v).map(|ty| {
        Value::from(format!(
            "{DEFERRED}unsupported construct: {func} of a {ty}{DEFERRED}"
        ))
    })
}

/// The error a rendered text carries when it contains a [`DEFERRED`] stand-in.
pub fn deferred_error(text: &str) -> Option<&str> {
    let (_, rest) = text.split_once(DEFERRED)?;
    rest.split(DEFERRED).next()
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
        if m.1 == GoType::Struct("sprig.certificate") {
            // `%v` of a struct: its fields in order, space-separated, in braces.
            let fields = m.snapshot();
            let field = |k: &str| fields.get(k).map(s).unwrap_or_default();
            out.push_str(&format!("{{{} {}}}", field("Cert"), field("Key")));
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
        // chartutil.Values' niladic methods win over keys of the same name, as in Go.
        if m.1 == GoType::Values && matches!(name, "AsMap" | "YAML") {
            return values_method(m, name, &[]);
        }
        if let Some(x) = m.lock().get(name) {
            return Ok(x.clone());
        }
        return match m.1 {
            GoType::Struct("version.BuildInfo") if name == "GoVersion" => Err(err(
                "unsupported construct: .Capabilities.HelmVersion.GoVersion (the Go release helm was built with is not known here)",
            )),
            // A struct has a fixed set of fields; a map gives its zero value for a missing key.
            GoType::Struct(ty) => Err(err(format!("can't evaluate field {name} in type {ty}"))),
            _ => Ok(missing_key_value(v)),
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
            let v = to_json_checked(&GoMap::value(m.snapshot()), "YAML")?;
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
}
