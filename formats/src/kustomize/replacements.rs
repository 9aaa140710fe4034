//! `replacements`: copy a field of one resource into fields of others (select/reject, field
//! paths with `[key=value]`, `options.delimiter`/`index`/`create`), as kustomize v5.5.0 does.
//!
//! Resources are chosen by identity, exactly: a selector's `group`, `version`, `kind`, `name`
//! and `namespace` are compared as text (not as regular expressions, unlike patch targets),
//! against the current identity and every earlier one, with no namespace meaning `default`
//! (kustomize's replacement identities do not know which kinds are cluster-scoped). Label and
//! annotation selectors are matched as patches match them.
//!
//! A scalar field keeps its type and takes the value's text (see `scalar`); a text its type
//! cannot read is an error here, where kustomize fails later, when it prints the object.

mod field_path;
mod scalar;
#[cfg(test)]
mod tests;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::error::{KustomizeError, KustomizeErrorKind};
use super::openapi::Schema;
use super::resource::{ResId, Resource, DEFAULT_NAMESPACE};
use super::selector::Selector;
use field_path::NodeKind;
use scalar::{decode, tag_and_text, Tag};

/// The field a source or target names when it names none.
const DEFAULT_FIELD_PATH: &str = "metadata.name";

/// One replacement as written.
#[derive(Debug, Deserialize)]
struct Replacement {
    source: Option<Source>,
    targets: Option<Vec<Target>>,
    #[serde(default)]
    path: Option<String>,
}

/// Where the value comes from.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Source {
    group: String,
    version: String,
    kind: String,
    name: String,
    namespace: String,
    field_path: String,
    options: Option<FieldOptions>,
}

/// Where it goes.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Target {
    select: Option<Selector>,
    reject: Vec<Selector>,
    field_paths: Vec<String>,
    options: Option<FieldOptions>,
}

/// `options`: split and join a field at a delimiter, or create it.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct FieldOptions {
    delimiter: String,
    index: i64,
    create: bool,
}

/// The identity part of a selector: empty parts match anything.
struct IdSelector<'a> {
    group: &'a str,
    version: &'a str,
    kind: &'a str,
    name: &'a str,
    namespace: &'a str,
}

impl<'a> IdSelector<'a> {
    fn of_selector(s: &'a Selector) -> Self {
        IdSelector {
            group: &s.group,
            version: &s.version,
            kind: &s.kind,
            name: &s.name,
            namespace: &s.namespace,
        }
    }

    fn of_source(s: &'a Source) -> Self {
        IdSelector {
            group: &s.group,
            version: &s.version,
            kind: &s.kind,
            name: &s.name,
            namespace: &s.namespace,
        }
    }

    fn is_empty(&self) -> bool {
        [
            self.group,
            self.version,
            self.kind,
            self.name,
            self.namespace,
        ]
        .iter()
        .all(|s| s.is_empty())
    }

    /// kustomize's `ResId.IsSelectedBy`.
    fn selects(&self, id: &ResId) -> bool {
        let effective = |ns: &str| {
            if ns.is_empty() {
                DEFAULT_NAMESPACE.to_owned()
            } else {
                ns.to_owned()
            }
        };
        let is = |want: &str, have: &str| want.is_empty() || want == have;
        is(self.name, &id.name)
            && (self.namespace.is_empty() || effective(self.namespace) == effective(&id.namespace))
            && is(self.group, &id.gvk.group)
            && is(self.version, &id.gvk.version)
            && is(self.kind, &id.gvk.kind)
    }

    /// kustomize's `ResId.String()` of the selector.
    fn describe(&self) -> String {
        let or = |s: &str, empty: &str| {
            if s.is_empty() {
                empty.to_owned()
            } else {
                s.to_owned()
            }
        };
        format!(
            "{}.{}.{}/{}.{}",
            or(self.kind, "[noKind]"),
            or(self.version, "[noVer]"),
            or(self.group, "[noGrp]"),
            or(self.name, "[noName]"),
            or(self.namespace, "[noNs]")
        )
    }
}

/// The current identity and every earlier one.
fn ids(resource: &Resource) -> Vec<ResId> {
    let mut ids = vec![resource.cur_id()];
    ids.extend(resource.prev_ids());
    ids
}

/// The value a replacement copies: a scalar's tag and text, or a map or list.
#[derive(Debug, Clone)]
enum Copied {
    Scalar(Tag, String),
    Node(Value),
}

/// Applies the replacements (each one as written in the kustomization, or read from its file)
/// to `resources`, in order.
pub fn apply(
    resources: &mut [Resource],
    replacements: &[Value],
    schema: &Schema,
) -> Result<(), KustomizeError> {
    for (i, entry) in flatten(replacements).enumerate() {
        let field = format!("replacements[{i}]");
        let replacement: Replacement = serde_json::from_value(entry.clone())
            .map_err(|e| KustomizeError::invalid(e.to_string()).at_field(field.clone()))?;
        apply_one(resources, &replacement, schema).map_err(|e| e.at_field(field))?;
    }
    Ok(())
}

/// The entries, a file's list of replacements counting as its entries.
fn flatten(replacements: &[Value]) -> impl Iterator<Item = &Value> {
    replacements.iter().flat_map(|entry| match entry {
        Value::Array(items) => items.iter().collect::<Vec<_>>(),
        other => vec![other],
    })
}

fn apply_one(
    resources: &mut [Resource],
    replacement: &Replacement,
    schema: &Schema,
) -> Result<(), KustomizeError> {
    if replacement.path.is_some() {
        let message = if replacement.source.is_some() || replacement.targets.is_some() {
            "cannot specify both path and inline replacement"
        } else {
            "a replacement's path must be read before the replacement is applied"
        };
        return Err(KustomizeError::invalid(message));
    }
    // An empty `targets` counts as none: kustomize hands the kustomization's replacements to
    // the transformer re-encoded, which drops empty lists.
    let targets = replacement.targets.as_ref().filter(|t| !t.is_empty());
    let (Some(source), Some(targets)) = (&replacement.source, targets) else {
        return Err(KustomizeError::invalid(
            "replacements must specify a source and at least one target",
        ));
    };
    let value = source_value(resources, source)?;
    for target in targets {
        apply_target(resources, target, &value, schema)?;
    }
    Ok(())
}

/// kustomize's `SourceSelector.String()`.
fn describe_source(source: &Source) -> String {
    let mut parts = vec![IdSelector::of_source(source).describe()];
    if !source.field_path.is_empty() {
        parts.push(source.field_path.clone());
    }
    if let Some(o) = source
        .options
        .as_ref()
        .filter(|o| !o.delimiter.is_empty() || o.create)
    {
        parts.push(format!("{}({}), create={}", o.delimiter, o.index, o.create));
    }
    parts.join(":")
}

/// The one resource the source selects, and the value at its field path.
fn source_value(resources: &[Resource], source: &Source) -> Result<Copied, KustomizeError> {
    let selector = IdSelector::of_source(source);
    let mut selected = resources
        .iter()
        .filter(|r| ids(r).iter().any(|id| selector.selects(id)));
    let no_match = |message: String| KustomizeError::new(KustomizeErrorKind::NoMatch, message);
    let Some(resource) = selected.next() else {
        return Err(no_match(format!(
            "nothing selected by {}",
            describe_source(source)
        )));
    };
    if selected.next().is_some() {
        return Err(no_match(format!(
            "multiple matches for selector {}",
            describe_source(source)
        )));
    }
    let field_path = if source.field_path.is_empty() {
        DEFAULT_FIELD_PATH
    } else {
        &source.field_path
    };
    let body = Value::Object(resource.body.clone());
    let found = field_path::lookup(&body, &field_path::split(field_path)).map_err(|e| {
        KustomizeError::invalid(format!(
            "error looking up replacement source: {}",
            e.message
        ))
    })?;
    let empty = |v: &Value| match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    };
    let Some(found) = found.filter(|v| !empty(v)) else {
        return Err(no_match(format!(
            "fieldPath `{field_path}` is missing for replacement source {}",
            selector.describe()
        )));
    };
    let copied = match tag_and_text(found) {
        Some((tag, text)) => Copied::Scalar(tag, text),
        None => Copied::Node(found.clone()),
    };
    refine(source.options.as_ref(), copied)
}

/// The source's `options.delimiter`/`index`: one part of the value.
fn refine(options: Option<&FieldOptions>, value: Copied) -> Result<Copied, KustomizeError> {
    let Some(options) = options.filter(|o| !o.delimiter.is_empty()) else {
        return Ok(value);
    };
    let Copied::Scalar(tag, text) = value else {
        return Err(KustomizeError::invalid(
            "delimiter option can only be used with scalar nodes",
        ));
    };
    let parts: Vec<&str> = text.split(options.delimiter.as_str()).collect();
    match usize::try_from(options.index)
        .ok()
        .and_then(|i| parts.get(i))
    {
        Some(part) => Ok(Copied::Scalar(tag, (*part).to_owned())),
        None => Err(KustomizeError::invalid(format!(
            "options.index {} is out of bounds for value {text}",
            options.index
        ))),
    }
}

/// Whether a resource's labels and annotations pass the target's `select` and `reject`
/// selectors (a reject counts here only when it has a label or annotation selector).
fn labels_and_annotations_pass(
    resource: &Resource,
    target: &Target,
    select: &Selector,
    schema: &Schema,
) -> Result<bool, KustomizeError> {
    let matches = |s: &Selector| -> Result<bool, KustomizeError> {
        let only = Selector {
            label_selector: s.label_selector.clone(),
            annotation_selector: s.annotation_selector.clone(),
            ..Selector::default()
        };
        Ok(only.compile()?.matches(resource, schema))
    };
    if !matches(select)? {
        return Ok(false);
    }
    for reject in &target.reject {
        if (!reject.label_selector.is_empty() || !reject.annotation_selector.is_empty())
            && matches(reject)?
        {
            return Ok(false);
        }
    }
    Ok(true)
}

fn apply_target(
    resources: &mut [Resource],
    target: &Target,
    value: &Copied,
    schema: &Schema,
) -> Result<(), KustomizeError> {
    let Some(select) = &target.select else {
        return Err(KustomizeError::invalid(
            "target must specify resources to select",
        ));
    };
    let wanted = IdSelector::of_selector(select);
    for resource in resources.iter_mut() {
        if !labels_and_annotations_pass(resource, target, select, schema)? {
            continue;
        }
        let ids = ids(resource);
        let rejected = target.reject.iter().any(|r| {
            let r = IdSelector::of_selector(r);
            !r.is_empty() && ids.iter().any(|id| r.selects(id))
        });
        if !rejected && ids.iter().any(|id| wanted.selects(id)) {
            copy_to_target(resource, target, value)?;
        }
    }
    Ok(())
}

/// Writes the value into every field the target's field paths reach in `resource`.
fn copy_to_target(
    resource: &mut Resource,
    target: &Target,
    value: &Copied,
) -> Result<(), KustomizeError> {
    let default = [DEFAULT_FIELD_PATH.to_owned()];
    let field_paths = if target.field_paths.is_empty() {
        &default[..]
    } else {
        &target.field_paths[..]
    };
    let options = target.options.as_ref();
    let create = options.is_some_and(|o| o.create).then_some(match value {
        Copied::Scalar(..) => NodeKind::Scalar,
        Copied::Node(Value::Array(_)) => NodeKind::List,
        Copied::Node(_) => NodeKind::Map,
    });
    let mut body = Value::Object(std::mem::take(&mut resource.body));
    let result = field_paths.iter().try_for_each(|path| {
        let not_found = |detail: Option<String>| {
            let verb = if create.is_some() {
                "find or create"
            } else {
                "find"
            };
            let mut message = format!("unable to {verb} field {path:?} in replacement target");
            if let Some(detail) = detail {
                message = format!("{message}: {detail}");
            }
            KustomizeError::new(KustomizeErrorKind::NoMatch, message)
        };
        // An error of the walk itself means the path does not fit the object; an error of
        // writing a field is the write's own.
        let mut write_failed = false;
        let mut visit = |field: &mut Value, untagged: Option<&str>| {
            set_field(field, untagged, value, options).inspect_err(|_| write_failed = true)
        };
        match field_path::walk(
            &mut body,
            &field_path::split(path),
            create,
            None,
            &mut visit,
        ) {
            Ok(0) => Err(not_found(None)),
            Ok(_) => Ok(()),
            Err(e) if write_failed => Err(e),
            Err(e) => Err(not_found(Some(e.message))),
        }
    });
    resource.body = match body {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    result
}

/// Writes `value` into one target field: a scalar field keeps its tag and takes the text
/// (joined into its own parts with `options.delimiter`), anything else becomes the value.
/// `untagged` is the text of a scalar the walk just created.
fn set_field(
    field: &mut Value,
    untagged: Option<&str>,
    value: &Copied,
    options: Option<&FieldOptions>,
) -> Result<(), KustomizeError> {
    let target = match untagged {
        Some(text) => Some((Tag::Untagged, text.to_owned())),
        None => tag_and_text(field),
    };
    let value_text = match value {
        Copied::Scalar(_, text) => text.clone(),
        Copied::Node(_) => String::new(),
    };
    let delimiter = options.map(|o| o.delimiter.as_str()).unwrap_or("");
    let text = if delimiter.is_empty() {
        value_text
    } else {
        let Some((_, current)) = &target else {
            return Err(KustomizeError::invalid(
                "delimiter option can only be used with scalar nodes",
            ));
        };
        let mut parts: Vec<String> = current.split(delimiter).map(str::to_owned).collect();
        let index = options.map(|o| o.index).unwrap_or(0);
        match usize::try_from(index) {
            Err(_) => parts.insert(0, value_text),
            Ok(i) if i >= parts.len() => parts.push(value_text),
            Ok(i) => parts[i] = value_text,
        }
        parts.join(delimiter)
    };
    *field = match (target, value) {
        (Some((tag, _)), _) => decode(tag, &text)?,
        (None, Copied::Scalar(tag, text)) => decode(*tag, text)?,
        (None, Copied::Node(node)) => node.clone(),
    };
    Ok(())
}
