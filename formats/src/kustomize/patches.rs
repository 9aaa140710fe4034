//! Patches: `patches` entries (strategic merge or JSON 6902, inline or from a file, with or
//! without a target), the legacy `patchesStrategicMerge` and `patchesJson6902`, applied as
//! kustomize applies them (a patch keeps its target's name, kind and namespace unless allowed
//! to change them; `$patch: delete` removes the target).

use std::collections::BTreeMap;

use serde_json::Value;

use super::error::{KustomizeError, KustomizeErrorKind};
use super::hash::store_previous_id;
use super::kustomization::Patch;
use super::loader::Tree;
use super::openapi::Schema;
use super::resmap::ResMap;
use super::resource::{Resource, BUILD_ANNOTATION_DOMAIN};
use super::selector::Selector;
use super::{json_patch, strategic_merge};

/// A patch entry read and classified.
#[derive(Debug, Clone)]
pub(crate) struct Loaded {
    kind: PatchKind,
    allow_name_change: bool,
    allow_kind_change: bool,
    /// Where the patch came from, for messages.
    source: String,
}

#[derive(Debug, Clone)]
enum PatchKind {
    /// Strategic merge patches (one per document).
    Strategic(Vec<Resource>),
    /// JSON 6902 operations.
    Json(Value),
}

impl Loaded {
    /// Reads a `patches` entry: `patch` inline or `path` (read from `dir`), which must be
    /// either strategic merge patches or a JSON 6902 operation list.
    pub(crate) fn read(
        tree: &Tree,
        dir: &str,
        path: &str,
        patch: &str,
        options: &BTreeMap<String, bool>,
    ) -> Result<Self, KustomizeError> {
        let patch = patch.trim();
        let (text, source) = match (patch.is_empty(), path.is_empty()) {
            (true, true) => {
                return Err(KustomizeError::invalid(
                    "must specify one of patch and path",
                ))
            }
            (false, false) => {
                return Err(KustomizeError::invalid(
                    "patch and path can't be set at the same time",
                ))
            }
            (false, true) => (patch.to_owned(), "the inline patch".to_owned()),
            (true, false) => {
                let (_, text) = tree.read_text_restricted(dir, path)?;
                (text, format!("the patch file '{path}'"))
            }
        };
        let strategic = parse_strategic(&text);
        let json = parse_json_operations(&text);
        let kind = match (strategic, json) {
            (Ok(_), Ok(_)) => {
                return Err(KustomizeError::invalid(format!(
                    "{source} illegally qualifies as both a strategic merge and a JSON patch"
                )))
            }
            (Ok(patches), Err(_)) => PatchKind::Strategic(patches),
            (Err(_), Ok(ops)) => PatchKind::Json(ops),
            (Err(why), Err(_)) => {
                return Err(KustomizeError::invalid(format!(
                    "unable to parse {source} as a strategic merge or a JSON patch: {why}"
                )))
            }
        };
        Ok(Loaded {
            kind,
            allow_name_change: options.get("allowNameChange").copied().unwrap_or(false),
            allow_kind_change: options.get("allowKindChange").copied().unwrap_or(false),
            source,
        })
    }

    /// Applies the patch to its target, or (strategic merge without a target) to the resource
    /// each patch names.
    pub(crate) fn apply(
        &self,
        res: &mut ResMap,
        target: Option<&Selector>,
        schema: &Schema,
    ) -> Result<(), KustomizeError> {
        match &self.kind {
            PatchKind::Strategic(patches) => match target {
                Some(selector) => {
                    if patches.len() > 1 {
                        return Err(KustomizeError::invalid(format!(
                            "multiple strategic merge patches in one `patches` entry may not have \
                             a target: {}",
                            self.source
                        )));
                    }
                    let Some(patch) = patches.first() else {
                        return Ok(());
                    };
                    for index in res.select(selector, schema)? {
                        self.apply_to_selected(&mut res.resources[index], patch, schema)?;
                    }
                    Ok(())
                }
                None => {
                    for patch in patches {
                        let id = patch.org_id();
                        let index = res.one_by_any_id(&id, schema).map_err(|e| {
                            KustomizeError::new(
                                KustomizeErrorKind::NoMatch,
                                format!(
                                    "no resource matches strategic merge patch {id}: {}",
                                    e.message
                                ),
                            )
                        })?;
                        apply_strategic(
                            &mut res.resources[index],
                            &Value::Object(patch.body.clone()),
                            self.allow_name_change,
                            self.allow_kind_change,
                            schema,
                        )?;
                    }
                    Ok(())
                }
            },
            PatchKind::Json(ops) => {
                let Some(selector) = target else {
                    return Err(KustomizeError::invalid(format!(
                        "must specify a target for the JSON patch in {}",
                        self.source
                    )));
                };
                for index in res.select(selector, schema)? {
                    let resource = &mut res.resources[index];
                    store_previous_id(resource, schema);
                    apply_json(resource, ops)?;
                }
                Ok(())
            }
        }
    }

    fn apply_to_selected(
        &self,
        resource: &mut Resource,
        patch: &Resource,
        schema: &Schema,
    ) -> Result<(), KustomizeError> {
        apply_to_target(
            resource,
            patch,
            self.allow_name_change,
            self.allow_kind_change,
            schema,
        )
    }
}

/// Applies a strategic merge patch to one resource, keeping its name and kind (unless
/// allowed to change) and its namespace; an emptied body means deleted.
pub(crate) fn apply_strategic(
    resource: &mut Resource,
    patch: &Value,
    allow_name_change: bool,
    allow_kind_change: bool,
    schema: &Schema,
) -> Result<(), KustomizeError> {
    if allow_name_change || allow_kind_change {
        store_previous_id(resource, schema);
    }
    let current = Value::Object(std::mem::take(&mut resource.body));
    let options = strategic_merge::PatchOptions {
        allow_name_change,
        allow_kind_change,
    };
    match strategic_merge::apply_with_options(&current, patch, schema, options)? {
        None => Ok(()),
        Some(Value::Object(body)) => {
            resource.body = body;
            Ok(())
        }
        Some(_) => Err(KustomizeError::invalid(
            "a strategic merge patch must leave a map",
        )),
    }
}

/// Applies a patch to a resource a selection chose: the patch copy kustomize makes for each
/// target (the target's apiVersion, metadata maps as strings), then the merge.
fn apply_to_target(
    resource: &mut Resource,
    patch: &Resource,
    allow_name_change: bool,
    allow_kind_change: bool,
    schema: &Schema,
) -> Result<(), KustomizeError> {
    let copy = strategic_merge::patch_for_target(
        &Value::Object(patch.body.clone()),
        &Value::Object(resource.body.clone()),
    );
    apply_strategic(
        resource,
        &copy,
        allow_name_change,
        allow_kind_change,
        schema,
    )
}

/// Applies JSON 6902 operations to one resource, keeping its build annotations.
fn apply_json(resource: &mut Resource, ops: &Value) -> Result<(), KustomizeError> {
    let internal: Vec<(String, String)> = resource
        .annotations()
        .into_iter()
        .filter(|(k, _)| k.starts_with(BUILD_ANNOTATION_DOMAIN))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let patched = json_patch::apply(&Value::Object(std::mem::take(&mut resource.body)), ops)?;
    match patched {
        Value::Object(body) => resource.body = body,
        _ => return Err(KustomizeError::invalid("a JSON patch must leave a map")),
    }
    for (k, v) in internal {
        resource.set_annotation(&k, &v);
    }
    Ok(())
}

/// A legacy `patchesJson6902` entry: a target with a name, and operations in `path` or
/// `patch`.
pub(crate) fn apply_legacy_json6902(
    res: &mut ResMap,
    tree: &Tree,
    dir: &str,
    patch: &Patch,
    schema: &Schema,
) -> Result<(), KustomizeError> {
    let Some(target) = &patch.target else {
        return Err(KustomizeError::invalid(
            "must specify a target for the patch",
        ));
    };
    if target.name.is_empty() {
        return Err(KustomizeError::invalid("must specify the target name"));
    }
    let text = match (patch.path.is_empty(), patch.patch.is_empty()) {
        (true, true) => return Err(KustomizeError::invalid("empty file path and empty jsonOp")),
        (false, false) => {
            return Err(KustomizeError::invalid(
                "must specify a file path or jsonOp, not both",
            ))
        }
        (false, true) => tree.read_text_restricted(dir, &patch.path)?.1,
        (true, false) => patch.patch.clone(),
    };
    let ops = parse_json_operations(&text)?;
    if ops.as_array().is_some_and(Vec::is_empty) {
        return Err(KustomizeError::invalid("patch appears to be empty"));
    }
    for index in res.select(target, schema)? {
        apply_json(&mut res.resources[index], &ops)?;
    }
    Ok(())
}

/// Reads `patchesStrategicMerge`: each entry inline YAML, or else a file.
pub(crate) fn load_strategic_merge_list(
    tree: &Tree,
    dir: &str,
    entries: &[String],
) -> Result<Vec<Resource>, KustomizeError> {
    let mut loaded = Vec::new();
    for entry in entries {
        match parse_strategic(entry) {
            Ok(patches) if !patches.is_empty() => loaded.extend(patches),
            _ => {
                let (_, text) = tree.read_text_restricted(dir, entry)?;
                let patches = parse_strategic(&text)
                    .map_err(|why| KustomizeError::invalid(format!("{entry}: {why}")))?;
                loaded.extend(patches);
            }
        }
    }
    if loaded.is_empty() {
        return Err(KustomizeError::invalid("patch appears to be empty"));
    }
    Ok(loaded)
}

/// Applies `patchesStrategicMerge` patches, each to the one resource it names.
pub(crate) fn apply_strategic_merge_list(
    res: &mut ResMap,
    patches: &[Resource],
    schema: &Schema,
) -> Result<(), KustomizeError> {
    for patch in patches {
        let id = patch.org_id();
        let index = res.one_by_any_id(&id, schema).map_err(|e| {
            KustomizeError::new(
                KustomizeErrorKind::NoMatch,
                format!("{}; failed to find unique target for patch {id}", e.message),
            )
        })?;
        apply_to_target(&mut res.resources[index], patch, false, false, schema)?;
        res.drop_empties();
    }
    Ok(())
}

/// Strategic merge patches: YAML documents, each a map with a kind and a name.
pub(crate) fn parse_strategic(text: &str) -> Result<Vec<Resource>, String> {
    let mut patches = Vec::new();
    for document in split_documents(text) {
        let value: Value = super::yaml_v3::from_yaml_str(document).map_err(|e| e.to_string())?;
        match value {
            Value::Null => continue,
            Value::Object(map) => {
                let kind = map.get("kind").and_then(Value::as_str).unwrap_or("");
                if kind.is_empty() {
                    return Err("missing kind in object".into());
                }
                let name = map
                    .get("metadata")
                    .and_then(|m| m.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if name.is_empty() && !kind.ends_with("List") {
                    return Err("missing metadata.name in object".into());
                }
                patches.push(Resource::new(map));
            }
            other => {
                return Err(format!(
                    "a patch must be a map, found {}",
                    crate::object::json_type(&other)
                ))
            }
        }
    }
    Ok(patches)
}

/// JSON 6902 operations, written as JSON or YAML: a list of maps.
pub(crate) fn parse_json_operations(text: &str) -> Result<Value, KustomizeError> {
    if text.trim().is_empty() {
        return Err(KustomizeError::invalid("empty json patch operations"));
    }
    let ops = json_patch::parse(text)?;
    match &ops {
        Value::Array(items) if items.iter().all(Value::is_object) => Ok(ops),
        _ => Err(KustomizeError::invalid(
            "a JSON patch must be a list of operations",
        )),
    }
}

/// Splits YAML text at `---` lines.
pub(crate) fn split_documents(text: &str) -> Vec<&str> {
    let mut documents = Vec::new();
    let mut start = 0usize;
    let mut offset = 0usize;
    for line in text.split_inclusive('\n') {
        let content = line.trim_end_matches(['\n', '\r']);
        let separator =
            content == "---" || content.starts_with("--- ") || content.starts_with("---\t");
        if separator {
            documents.push(&text[start..offset]);
            start = offset + line.len();
        }
        offset += line.len();
    }
    documents.push(&text[start..]);
    documents
}
