//! Field specs: where in which kinds a transformer acts (`path: spec/template/metadata/labels`,
//! `kind: Deployment`, `create: true`), and the walk that reaches those fields as kustomize's
//! field-spec filter does: lists on the way are entered element by element, `name[]` marks a
//! list, missing fields are created only where `create` says so.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::error::KustomizeError;
use super::resource::Gvk;

/// One field spec.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub(crate) struct FieldSpec {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub path: String,
    pub create: bool,
}

/// What a created leaf is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CreateKind {
    /// A map (labels, annotations).
    Map,
    /// A scalar (a namespace, a name, a count).
    Scalar,
}

impl FieldSpec {
    /// Whether a resource's group, version and kind are selected by this spec's (empty parts
    /// select everything).
    pub(crate) fn selects(&self, gvk: &Gvk) -> bool {
        gvk_selected(gvk, &self.group, &self.version, &self.kind)
    }

    /// The spec's own group, version and kind.
    pub(crate) fn gvk(&self) -> Gvk {
        Gvk {
            group: self.group.clone(),
            version: self.version.clone(),
            kind: self.kind.clone(),
        }
    }

    /// kustomize's "effectively equal": the other spec's kind selects this one's and the paths
    /// are the same.
    fn effectively_equals(&self, other: &FieldSpec) -> bool {
        self.path == other.path
            && (other.group.is_empty() || self.group == other.group)
            && (other.version.is_empty() || self.version == other.version)
            && (other.kind.is_empty() || self.kind == other.kind)
    }
}

/// Whether `gvk` matches a selector's group, version and kind, empty parts matching anything.
pub(crate) fn gvk_selected(gvk: &Gvk, group: &str, version: &str, kind: &str) -> bool {
    (group.is_empty() || gvk.group == group)
        && (version.is_empty() || gvk.version == version)
        && (kind.is_empty() || gvk.kind == kind)
}

/// Adds `spec` to `specs` unless an effectively equal one is there; a conflicting `create` is
/// an error.
pub(crate) fn merge_one(specs: &mut Vec<FieldSpec>, spec: FieldSpec) -> Result<(), KustomizeError> {
    if let Some(existing) = specs.iter().find(|s| s.effectively_equals(&spec)) {
        if existing.create != spec.create {
            return Err(KustomizeError::invalid(format!(
                "conflicting fieldspecs for path '{}'",
                spec.path
            )));
        }
        return Ok(());
    }
    specs.push(spec);
    Ok(())
}

/// [`merge_one`] for each of `incoming`.
pub(crate) fn merge_all(
    specs: &mut Vec<FieldSpec>,
    incoming: &[FieldSpec],
) -> Result<(), KustomizeError> {
    for spec in incoming {
        merge_one(specs, spec.clone())?;
    }
    Ok(())
}

/// Splits a field spec path at `/`, where `\/` keeps a slash inside an element.
pub(crate) fn split_path(path: &str) -> Vec<String> {
    let mut parts: Vec<&str> = path.split('/').collect();
    if parts.len() > 1 && parts[0].is_empty() {
        parts.remove(0);
    }
    let mut out: Vec<String> = Vec::with_capacity(parts.len());
    for part in parts {
        match out.last_mut() {
            Some(last) if last.ends_with('\\') => {
                last.pop();
                last.push('/');
                last.push_str(part);
            }
            _ => out.push(part.to_owned()),
        }
    }
    out
}

/// A callback given each field a spec reaches.
pub(crate) type Setter<'a> = dyn FnMut(&mut Value) -> Result<(), KustomizeError> + 'a;

/// Walks `object` along `spec` (whose group, version and kind the caller has matched) and calls
/// `set` on each field reached. With `create`, missing fields are created: maps on the way,
/// and a leaf of `create_kind` (a scalar leaf is created as null for `set` to fill).
pub(crate) fn walk(
    object: &mut Value,
    spec: &FieldSpec,
    create_kind: Option<CreateKind>,
    set: &mut Setter<'_>,
) -> Result<(), KustomizeError> {
    let path = split_path(&spec.path);
    let create = if spec.create { create_kind } else { None };
    walk_path(object, &path, create, set).map_err(|e| {
        KustomizeError::invalid(format!("considering field '{}': {}", spec.path, e.message))
    })
}

fn walk_path(
    node: &mut Value,
    path: &[String],
    create: Option<CreateKind>,
    set: &mut Setter<'_>,
) -> Result<(), KustomizeError> {
    let Some((first, rest)) = path.split_first() else {
        return set(node);
    };
    match node {
        Value::Null => Ok(()),
        Value::Array(items) => {
            for item in items {
                walk_path(item, path, create, set)?;
            }
            Ok(())
        }
        Value::Object(map) => walk_map(map, first, rest, create, set),
        _ => Err(KustomizeError::invalid("expected sequence or mapping node")),
    }
}

fn walk_map(
    map: &mut Map<String, Value>,
    element: &str,
    rest: &[String],
    create: Option<CreateKind>,
    set: &mut Setter<'_>,
) -> Result<(), KustomizeError> {
    let (name, is_list) = match element.strip_suffix("[]") {
        Some(name) => (name, true),
        None => (element, false),
    };
    if name.is_empty() {
        return Err(KustomizeError::invalid(
            "cannot set or create an empty field name",
        ));
    }
    let creating = create.filter(|_| !is_list);
    let new_value = |kind: Option<CreateKind>| match (rest.is_empty(), kind) {
        (true, Some(CreateKind::Scalar)) => Value::Null,
        _ => Value::Object(Map::new()),
    };
    if !map.contains_key(name) {
        if creating.is_none() {
            return Ok(());
        }
        map.insert(name.to_owned(), new_value(creating));
    }
    let Some(field) = map.get_mut(name) else {
        return Ok(());
    };
    if field.is_null() && creating.is_some() {
        *field = new_value(creating);
    }
    walk_path(field, rest, create, set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(path: &str, create: bool) -> FieldSpec {
        FieldSpec {
            path: path.to_owned(),
            create,
            ..FieldSpec::default()
        }
    }

    #[test]
    fn walks_lists_and_creates_only_where_asked() {
        let mut object = json!({"spec": {"containers": [{"image": "a"}, {"image": "b"}, {}]}});
        let mut seen = Vec::new();
        walk(
            &mut object,
            &spec("spec/containers[]/image", true),
            Some(CreateKind::Scalar),
            &mut |v| {
                seen.push(v.clone());
                *v = json!("x");
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(seen, [json!("a"), json!("b"), Value::Null]);
        assert_eq!(object["spec"]["containers"][2]["image"], json!("x"));

        let mut object = json!({"metadata": {"name": "a"}});
        walk(
            &mut object,
            &spec("spec/selector", false),
            Some(CreateKind::Map),
            &mut |_| panic!("no field to set"),
        )
        .unwrap();
        walk(
            &mut object,
            &spec("metadata/labels", true),
            Some(CreateKind::Map),
            &mut |v| {
                assert_eq!(v, &json!({}));
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(object["metadata"]["labels"], json!({}));
    }

    #[test]
    fn merging_keeps_one_spec_per_kind_and_path() {
        let mut deployment = spec("metadata/labels", true);
        deployment.kind = "Deployment".into();
        let mut specs = vec![deployment];
        merge_one(&mut specs, spec("metadata/labels", true)).unwrap();
        assert_eq!(specs.len(), 1);
        assert!(merge_one(&mut specs, spec("metadata/labels", false)).is_err());
        let mut service = spec("metadata/labels", true);
        service.kind = "Service".into();
        merge_one(&mut specs, service).unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(split_path("/a/b\\/c/d"), ["a", "b/c", "d"]);
    }
}
