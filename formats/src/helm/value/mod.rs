//! The Go value model the translated templates run on, shared by the runtime (`funcs`), Go's
//! fmt (`gofmt`) and the built-in objects (`helm/mod.rs`):
//! - maps are [`GoMap`] objects: shared and mutable (Sprig's `set`/`unset` mutate in place),
//!   keys iterate sorted like Go's `range` and `fmt`; a [`GoType`] says which Go type a map
//!   stands for (a plain map, `chartutil.Values`, a struct such as `.Chart`);
//! - lists a template builds are [`GoList`] objects;
//! - numbers from values files are `float64`, template literals `int`, Sprig's arithmetic
//!   `int64` (see [`numbers`]);
//! - `nil` is minijinja's `none`.
//!
//! Every walk over a value (serialising, printing, copying, merging, comparing) is bounded by
//! [`MAX_DEPTH`], and maps and lists are released without recursion ([`release`]), so a value a
//! template builds in a loop, however deep, never overflows the stack.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use minijinja::value::{Enumerator, Object, ObjectRepr, Value, ValueKind};
use minijinja::{Error, ErrorKind};

mod compare;
mod json;
pub mod numbers;
mod print;
mod release;
pub mod structs;
mod time;

pub use compare::{deep_copy, deep_equal};
pub use json::{json_float, marshal, to_json, JsonStyle, MarshalError};
pub use numbers::{go_int64, go_uint64, number_type, GoNumber};
pub use print::{go_float, go_fmt, go_quote, print_action, strslice, strval};
pub use time::{civil, days_from_civil, go_time_format, GoTime, DAYS, MONTHS};

/// An error of the template language (minijinja's "invalid operation", which carries the
/// template's location once it returns through the engine).
pub(crate) fn err(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// What Go's text/template prints for a missing value; helm removes it from rendered files and
/// from tpl's result.
pub const NO_VALUE: &str = "<no value>";

/// How deep a value may nest when a render walks it: the budget of values read from files
/// (values.yaml, `fromYaml`, `fromJson`), so that values a template builds are held to it too.
pub const MAX_DEPTH: usize = crate::budget::MAX_VALUES_DEPTH;

/// Refuses to walk into a map or list at `depth` (1 for the outermost) past [`MAX_DEPTH`]:
/// only a template that builds a value in a loop (or a map that holds itself) gets there. The
/// breach is recorded for the render (see [`crate::budget`]), so a function that turns errors
/// into values cannot hide it.
pub fn enter(depth: usize, what: &str) -> Result<(), Error> {
    if depth <= MAX_DEPTH {
        return Ok(());
    }
    Err(err(crate::budget::breach(
        crate::budget::BudgetBreach::new(
            "value nesting depth (maps and lists a template builds)",
            MAX_DEPTH as u64,
            format!("{depth} (in {what})"),
        ),
    )))
}

/// A Go `map[string]interface{}` (or another Go type, see [`GoType`]): shared, mutable, sorted.
#[derive(Debug, Default)]
pub struct GoMap(pub Mutex<BTreeMap<String, Value>>, pub GoType);

/// The Go type behind a [`GoMap`]: functions that accept one but not the others (`dig`, the
/// map-typed parameters), `typeOf` and the serialisers need to tell them apart.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum GoType {
    /// A plain `map[string]interface{}`.
    #[default]
    Map,
    /// `chartutil.Values` (`.Values`, `.Template`): assignable to map parameters, but `dig`
    /// fails on it.
    Values,
    /// A Go struct or pointer to one (`.Chart`, `.Capabilities`, ...), named as `typeOf` prints
    /// it; its fields are declared in [`structs`]. Not a map at all for functions.
    Struct(&'static str),
    /// A struct field of the context reached through a pointer (`.Capabilities.KubeVersion`):
    /// addressable, so an action printing it uses its pointer-receiver `String` method, where a
    /// copy (what any function returns or receives, a [`GoType::Struct`]) prints its fields.
    Addressable(&'static str),
    /// A `map[string]string` (`split`, `.Chart.Annotations`): a map for templates, but not
    /// assignable to a map[string]interface{} parameter.
    StringMap,
}

impl GoType {
    /// The struct type's name, for both forms of a struct.
    pub fn struct_name(self) -> Option<&'static str> {
        match self {
            GoType::Struct(name) | GoType::Addressable(name) => Some(name),
            _ => None,
        }
    }
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
    /// The entries, locked.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Value>> {
        // A poisoned lock only means another render panicked; the map itself is still valid.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// A copy of the entries (the values shared).
    pub fn snapshot(&self) -> BTreeMap<String, Value> {
        self.lock().clone()
    }
}

impl Drop for GoMap {
    fn drop(&mut self) {
        let entries = std::mem::take(self.0.get_mut().unwrap_or_else(|p| p.into_inner()));
        release::release(entries.into_values());
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

/// A Go `[]interface{}` a template built (`list`, `append`, ...): immutable, as Sprig's lists
/// are, and released without recursion however deeply lists nest in it.
#[derive(Debug, Default)]
pub struct GoList(pub Vec<Value>);

impl GoList {
    /// Wraps items as a template value.
    pub fn value(items: Vec<Value>) -> Value {
        Value::from_object(GoList(items))
    }
}

impl Drop for GoList {
    fn drop(&mut self) {
        release::release(std::mem::take(&mut self.0));
    }
}

impl Object for GoList {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Seq
    }
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.0.get(key.as_usize()?).cloned()
    }
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Seq(self.0.len())
    }
}

/// A nil Go slice (what `regexFindAll` gives without a match): no items, printed `[]`, written
/// as JSON `null`.
#[derive(Debug)]
pub struct NilList;

impl Object for NilList {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Seq
    }
    fn get_value(self: &Arc<Self>, _: &Value) -> Option<Value> {
        None
    }
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Seq(0)
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

/// The items of a list value (a Go slice), `None` for anything else.
pub fn list_items(v: &Value) -> Option<Vec<Value>> {
    if let Some(l) = v.downcast_object_ref::<GoList>() {
        return Some(l.0.clone());
    }
    match v.kind() {
        ValueKind::Seq | ValueKind::Iterable => v.try_iter().ok().map(|i| i.collect()),
        _ => None,
    }
}

/// Converts parsed YAML/JSON into template values with Helm's typing (numbers are float64).
/// The input is bounded by its reader's depth budget.
pub fn from_json(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => Value::from(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(a) => GoList::value(a.iter().map(from_json).collect()),
        serde_json::Value::Object(o) => {
            GoMap::value(o.iter().map(|(k, v)| (k.clone(), from_json(v))).collect())
        }
    }
}

/// `.Files`: the chart's non-template files (Go's `engine.files`, a `map[string][]byte`).
#[derive(Debug, Default)]
pub struct Files(pub Arc<BTreeMap<String, Vec<u8>>>);

/// `.Capabilities.APIVersions` (Go's `chartutil.VersionSet`, a `[]string`).
#[derive(Debug, Default)]
pub struct ApiVersions(pub Vec<String>);

/// A bound method value (`.Files.Get`) so `__call` can invoke it.
#[derive(Debug)]
pub struct Method;
impl Object for Method {}

/// Whether `v` is a map for templates (a map, not a bound method).
pub fn is_map(v: &Value) -> bool {
    v.kind() == ValueKind::Map && v.downcast_object_ref::<Method>().is_none()
}

/// The Go type name `%T` and `typeOf` print.
pub fn type_of(v: &Value) -> &'static str {
    if let Some(m) = v.downcast_object_ref::<GoMap>() {
        match m.1 {
            GoType::Values => return "chartutil.Values",
            GoType::Struct(name) | GoType::Addressable(name) => return name,
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
        ValueKind::Number => number_name(v),
        ValueKind::String => "string",
        ValueKind::Bytes => "[]uint8",
        ValueKind::Map => "map[string]interface {}",
        _ => "[]interface {}",
    }
}

/// The Go name of a number's type, which is also its kind.
fn number_name(v: &Value) -> &'static str {
    match number_type(v) {
        Some(GoNumber::Int64) => "int64",
        Some(GoNumber::Uint64) => "uint64",
        Some(GoNumber::Float64) => "float64",
        _ => "int",
    }
}

/// The Go kind (`reflect.Kind`) `kindOf` prints.
pub fn kind_of(v: &Value) -> &'static str {
    if let Some(name) = v
        .downcast_object_ref::<GoMap>()
        .and_then(|m| m.1.struct_name())
    {
        return if name.starts_with('*') {
            "ptr"
        } else {
            "struct"
        };
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
        ValueKind::Number => number_name(v),
        ValueKind::String => "string",
        ValueKind::Map => "map",
        _ => "slice",
    }
}

/// A struct field of the context read as a function's argument or result is a copy: the
/// pointer-receiver `String` method no longer applies when it is printed (see
/// [`GoType::Addressable`]).
pub fn as_copy(v: Value) -> Value {
    match v.downcast_object_ref::<GoMap>() {
        Some(m) => match m.1 {
            GoType::Addressable(name) => GoMap::typed(m.snapshot(), GoType::Struct(name)),
            _ => v,
        },
        None => v,
    }
}

/// [`as_copy`] of `v` in place.
pub fn make_copy(v: &mut Value) {
    let addressable = v
        .downcast_object_ref::<GoMap>()
        .is_some_and(|m| matches!(m.1, GoType::Addressable(_)));
    if addressable {
        *v = as_copy(std::mem::take(v));
    }
}

/// `.Capabilities.KubeVersion` for unit tests, as the Go type `ty`.
#[cfg(test)]
pub(crate) fn kube_version_for_tests(ty: GoType) -> Value {
    GoMap::typed(
        [
            ("Version", "v1.35.0"),
            ("GitVersion", "v1.35.0"),
            ("Major", "1"),
            ("Minor", "35"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Value::from(v)))
        .collect(),
        ty,
    )
}
