//! The built-in transformers a kustomization's fields configure, run in kustomize's order
//! (strategic merge patches, patches, namespace, prefix, suffix, labels, annotations, JSON
//! patches, replicas, images, replacements), and the simple ones themselves: namespace,
//! prefix and suffix, labels and annotations, replica counts.

use std::collections::BTreeMap;

use serde_json::Value;

use super::config::TransformerConfig;
use super::error::{KustomizeError, KustomizeErrorKind};
use super::fieldspec::{merge_all, merge_one, walk, CreateKind, FieldSpec};
use super::hash::{append_csv, store_previous_id};
use super::kustomization::Replica;
use super::openapi::Schema;
use super::resmap::{id_key, ResMap};
use super::resource::{Gvk, ResId, PREFIXES, SUFFIXES};
use super::target::{Accumulator, Builder, Target};
use super::{images, patches, replacements};

/// Runs the built-in transformers the kustomization's fields configure.
pub(crate) fn run_builtin(
    builder: &mut Builder<'_>,
    target: &Target,
    acc: &mut Accumulator,
) -> Result<(), KustomizeError> {
    let k = &target.kustomization;
    let schema = builder.schema.clone();
    let tree = builder.tree;
    let config = acc.config.clone();
    let res = &mut acc.resources;
    let place = |field: String| {
        let file = target.file.clone();
        move |e: KustomizeError| e.in_file(file).at_field(field)
    };
    // After each transformer: its mark for `buildMetadata`, and deleted resources dropped.
    let done = |res: &mut ResMap, kind: &str| {
        if let Some(by) = builder.configured(target, kind) {
            super::origin::add_transformation(res, &by);
        }
        res.drop_empties();
    };
    if !k.patches_strategic_merge.is_empty() {
        let field = || place("patchesStrategicMerge".into());
        let loaded =
            patches::load_strategic_merge_list(tree, &target.dir, &k.patches_strategic_merge)
                .map_err(field())?;
        patches::apply_strategic_merge_list(res, &loaded, &schema).map_err(field())?;
        done(res, "PatchStrategicMergeTransformer");
    }
    for (i, patch) in k.patches.iter().enumerate() {
        let field = || place(format!("patches[{i}]"));
        let loaded =
            patches::Loaded::read(tree, &target.dir, &patch.path, &patch.patch, &patch.options)
                .map_err(field())?;
        loaded
            .apply(res, patch.target.as_ref(), &schema)
            .map_err(field())?;
        done(res, "PatchTransformer");
    }
    if !k.namespace.is_empty() {
        let mode = SubjectsMode::DefaultOnly;
        set_namespace(res, &k.namespace, &config.namespace, false, mode, &schema)
            .map_err(place("namespace".into()))?;
        done(res, "NamespaceTransformer");
    }
    if !k.name_prefix.is_empty() {
        add_prefix_suffix(res, &k.name_prefix, "", &config.name_prefix, &schema)
            .map_err(place("namePrefix".into()))?;
        done(res, "PrefixTransformer");
    }
    if !k.name_suffix.is_empty() {
        add_prefix_suffix(res, "", &k.name_suffix, &config.name_suffix, &schema)
            .map_err(place("nameSuffix".into()))?;
        done(res, "SuffixTransformer");
    }
    if !k.labels.is_empty() || !k.common_labels.is_empty() {
        for (i, label) in k.labels.iter().enumerate() {
            let field = || place(format!("labels[{i}]"));
            let specs = label_field_specs(label, &config).map_err(field())?;
            set_map_entries(res, &label.pairs, &specs, "labels").map_err(field())?;
            done(res, "LabelTransformer");
        }
        set_map_entries(res, &k.common_labels, &config.common_labels, "labels")
            .map_err(place("commonLabels".into()))?;
        done(res, "LabelTransformer");
    }
    if !k.common_annotations.is_empty() {
        let specs = &config.common_annotations;
        set_map_entries(res, &k.common_annotations, specs, "annotations")
            .map_err(place("commonAnnotations".into()))?;
        done(res, "AnnotationsTransformer");
    }
    for (i, patch) in k.patches_json6902.iter().enumerate() {
        patches::apply_legacy_json6902(res, tree, &target.dir, patch, &schema)
            .map_err(place(format!("patchesJson6902[{i}]")))?;
        done(res, "PatchJson6902Transformer");
    }
    for (i, replica) in k.replicas.iter().enumerate() {
        set_replicas(res, replica, &config.replicas).map_err(place(format!("replicas[{i}]")))?;
        done(res, "ReplicaCountTransformer");
    }
    for (i, image) in k.images.iter().enumerate() {
        images::apply(res, image, &config.images).map_err(place(format!("images[{i}]")))?;
        done(res, "ImageTagTransformer");
    }
    if !k.replacements.is_empty() {
        let field = || place("replacements".into());
        let list = read_replacements(tree, &target.dir, &k.replacements).map_err(field())?;
        replacements::apply(&mut res.resources, &list, &schema).map_err(field())?;
        done(res, "ReplacementTransformer");
    }
    Ok(())
}

/// The replacements of a kustomization, entries with `path:` read from their file (a file may
/// hold one replacement or a list).
pub(crate) fn read_replacements(
    tree: &super::loader::Tree,
    dir: &str,
    entries: &[Value],
) -> Result<Vec<Value>, KustomizeError> {
    let mut list = Vec::new();
    for entry in entries {
        let path = entry.get("path").and_then(Value::as_str);
        match path {
            Some(path) => {
                if entry.as_object().is_some_and(|m| m.len() > 1) {
                    return Err(KustomizeError::invalid(
                        "replacement with a path may not have other fields",
                    ));
                }
                let (_, text) = tree.read_text_restricted(dir, path)?;
                let value: Value = crate::object::from_yaml_str(&text)
                    .map_err(|e| KustomizeError::invalid(format!("{path}: {e}")))?;
                match value {
                    Value::Array(items) => list.extend(items),
                    Value::Null => {}
                    other => list.push(other),
                }
            }
            None => list.push(entry.clone()),
        }
    }
    Ok(list)
}

/// The field specs of a `labels` entry: its own, then the config's `labels`, then the
/// selectors (with `includeSelectors`) or the templates (with `includeTemplates`) and
/// `metadata/labels`.
pub(crate) fn label_field_specs(
    label: &super::kustomization::Label,
    config: &TransformerConfig,
) -> Result<Vec<FieldSpec>, KustomizeError> {
    let mut specs = label.fields.clone();
    merge_all(&mut specs, &config.labels)?;
    if label.include_selectors {
        merge_all(&mut specs, &config.common_labels)?;
    } else {
        if label.include_templates {
            merge_all(&mut specs, &config.template_labels)?;
        }
        merge_one(
            &mut specs,
            FieldSpec {
                path: "metadata/labels".into(),
                create: true,
                ..FieldSpec::default()
            },
        )?;
    }
    Ok(specs)
}

/// How the namespace transformer treats RoleBinding subjects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SubjectsMode {
    /// Subjects named `default` get the namespace (kustomize's default).
    DefaultOnly,
    /// Every ServiceAccount subject gets it.
    AllServiceAccounts,
    /// Subjects are left alone.
    None,
}

impl SubjectsMode {
    /// Parses `setRoleBindingSubjects`.
    pub(crate) fn parse(text: &str) -> Result<Self, KustomizeError> {
        match text {
            "" | "defaultOnly" => Ok(Self::DefaultOnly),
            "allServiceAccounts" => Ok(Self::AllServiceAccounts),
            "none" => Ok(Self::None),
            other => Err(KustomizeError::invalid(format!(
                "invalid value {other:?} for setRoleBindingSubjects: must be one of \
                 \"defaultOnly\", \"none\" or \"allServiceAccounts\""
            ))),
        }
    }
}

/// The namespace transformer.
pub(crate) fn set_namespace(
    res: &mut ResMap,
    namespace: &str,
    specs: &[FieldSpec],
    unset_only: bool,
    subjects: SubjectsMode,
    schema: &Schema,
) -> Result<(), KustomizeError> {
    if namespace.is_empty() {
        return Ok(());
    }
    let set = |node: &mut Value| -> Result<(), KustomizeError> {
        match node {
            Value::Object(_) | Value::Array(_) => Err(KustomizeError::invalid(
                "namespace field specs must target scalar nodes",
            )),
            Value::String(s) if unset_only && !s.is_empty() => Ok(()),
            _ => {
                *node = Value::String(namespace.to_owned());
                Ok(())
            }
        }
    };
    for resource in &mut res.resources {
        if resource.body.is_empty() {
            continue;
        }
        store_previous_id(resource, schema);
        let gvk = resource.gvk();
        let is_v1 = resource.api_version() == "v1";
        let is_binding = gvk.kind == "RoleBinding" || gvk.kind == "ClusterRoleBinding";
        let mut body = Value::Object(std::mem::take(&mut resource.body));
        if !gvk.is_cluster_scoped(schema) {
            let meta = FieldSpec {
                path: "metadata/namespace".into(),
                create: true,
                ..FieldSpec::default()
            };
            walk(&mut body, &meta, Some(CreateKind::Scalar), &mut |n| set(n))?;
        }
        if is_binding && subjects != SubjectsMode::None {
            set_subject_namespaces(&mut body, subjects, &mut |n| set(n))?;
        }
        for spec in specs {
            if spec.path == "metadata/namespace" || (!is_v1 && spec.path == "metadata/name") {
                continue;
            }
            if is_binding
                && spec.path == "subjects/namespace"
                && (spec.kind == "RoleBinding" || spec.kind == "ClusterRoleBinding")
            {
                continue;
            }
            if !spec.selects(&gvk) {
                continue;
            }
            walk(&mut body, spec, Some(CreateKind::Scalar), &mut |n| set(n))?;
        }
        if let Value::Object(map) = body {
            resource.body = map;
        }
    }
    check_unique_ids(res, schema, "namespace transformation produces ID conflict")
}

fn set_subject_namespaces(
    body: &mut Value,
    mode: SubjectsMode,
    set: &mut dyn FnMut(&mut Value) -> Result<(), KustomizeError>,
) -> Result<(), KustomizeError> {
    let Some(subjects) = body.get_mut("subjects").and_then(Value::as_array_mut) else {
        return Ok(());
    };
    for subject in subjects {
        let Some(map) = subject.as_object_mut() else {
            continue;
        };
        let selected = match mode {
            SubjectsMode::DefaultOnly => map.get("name").and_then(Value::as_str) == Some("default"),
            SubjectsMode::AllServiceAccounts => {
                map.get("kind").and_then(Value::as_str) == Some("ServiceAccount")
            }
            SubjectsMode::None => false,
        };
        if selected {
            let field = map.entry("namespace").or_insert(Value::Null);
            set(field)?;
        }
    }
    Ok(())
}

/// Errors when two resources share a current id.
pub(crate) fn check_unique_ids(
    res: &ResMap,
    schema: &Schema,
    what: &str,
) -> Result<(), KustomizeError> {
    let mut seen = std::collections::HashSet::new();
    for resource in &res.resources {
        let id = resource.cur_id();
        if !seen.insert(id_key(&id, schema)) {
            return Err(KustomizeError::new(
                KustomizeErrorKind::Conflict,
                format!("{what}: more than one resource is {id}"),
            ));
        }
    }
    Ok(())
}

/// Kinds the prefix and suffix transformers never rename.
fn skips_prefix_suffix(id: &ResId) -> bool {
    let kind = id.gvk.kind.as_str();
    kind == "CustomResourceDefinition"
        || kind == "Namespace"
        || (kind == "APIService" && id.gvk.group == "apiregistration.k8s.io")
}

/// The prefix and suffix transformers (one of `prefix`, `suffix` is set).
pub(crate) fn add_prefix_suffix(
    res: &mut ResMap,
    prefix: &str,
    suffix: &str,
    specs: &[FieldSpec],
    schema: &Schema,
) -> Result<(), KustomizeError> {
    for resource in &mut res.resources {
        let org = resource.org_id();
        if skips_prefix_suffix(&org) {
            continue;
        }
        for spec in specs {
            if !spec.selects(&org.gvk) {
                continue;
            }
            if spec.path == "metadata/name" {
                if !prefix.is_empty() {
                    append_csv(resource, PREFIXES, prefix);
                }
                if !suffix.is_empty() {
                    append_csv(resource, SUFFIXES, suffix);
                }
                store_previous_id(resource, schema);
            }
            let gvk = resource.gvk();
            if !spec.selects(&gvk) {
                continue;
            }
            let mut body = Value::Object(std::mem::take(&mut resource.body));
            let result = walk(&mut body, spec, Some(CreateKind::Scalar), &mut |node| {
                let current = scalar_text(node);
                *node = Value::String(format!("{prefix}{current}{suffix}"));
                Ok(())
            });
            if let Value::Object(map) = body {
                resource.body = map;
            }
            result?;
        }
    }
    Ok(())
}

/// A scalar's text as YAML holds it (`""` for null).
pub(crate) fn scalar_text(node: &Value) -> String {
    match node {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    }
}

/// The label and annotation transformers: each entry set in each map the specs reach
/// (created where they say so).
pub(crate) fn set_map_entries(
    res: &mut ResMap,
    entries: &BTreeMap<String, String>,
    specs: &[FieldSpec],
    what: &str,
) -> Result<(), KustomizeError> {
    if entries.is_empty() {
        return Ok(());
    }
    for resource in &mut res.resources {
        let gvk = resource.gvk();
        let selected: Vec<&FieldSpec> = specs.iter().filter(|s| s.selects(&gvk)).collect();
        if selected.is_empty() {
            continue;
        }
        let mut body = Value::Object(std::mem::take(&mut resource.body));
        let mut result = Ok(());
        'specs: for spec in &selected {
            for (key, value) in entries {
                result = walk(
                    &mut body,
                    spec,
                    Some(CreateKind::Map),
                    &mut |node| match node {
                        Value::Object(map) => {
                            map.insert(key.clone(), Value::String(value.clone()));
                            Ok(())
                        }
                        other => Err(KustomizeError::invalid(format!(
                            "cannot set {what} in a {}; a map was expected",
                            crate::object::json_type(other)
                        ))),
                    },
                );
                if result.is_err() {
                    break 'specs;
                }
            }
        }
        if let Value::Object(map) = body {
            resource.body = map;
        }
        result?;
    }
    Ok(())
}

/// The replica count transformer: the count set on every resource of the name (current or
/// earlier) whose kind a spec selects; an error when there is none.
pub(crate) fn set_replicas(
    res: &mut ResMap,
    replica: &Replica,
    specs: &[FieldSpec],
) -> Result<(), KustomizeError> {
    let mut found = false;
    for spec in specs {
        for resource in &mut res.resources {
            let matches = resource
                .prev_ids()
                .iter()
                .chain(std::iter::once(&resource.cur_id()))
                .any(|id| id.name == replica.name && spec.selects(&id.gvk));
            if !matches {
                continue;
            }
            found = true;
            if !spec.selects(&resource.gvk()) {
                continue;
            }
            let mut body = Value::Object(std::mem::take(&mut resource.body));
            let result = walk(&mut body, spec, Some(CreateKind::Scalar), &mut |node| {
                *node = Value::from(replica.count);
                Ok(())
            });
            if let Value::Object(map) = body {
                resource.body = map;
            }
            result?;
        }
    }
    if !found {
        let gvks: Vec<String> = specs.iter().map(|s| gvk_string(&s.gvk())).collect();
        return Err(KustomizeError::new(
            KustomizeErrorKind::NoMatch,
            format!(
                "resource with name {} does not match a config with the following GVK [{}]",
                replica.name,
                gvks.join(" ")
            ),
        ));
    }
    Ok(())
}

/// `Kind.version.group` with kustomize's placeholders for empty parts.
pub(crate) fn gvk_string(gvk: &Gvk) -> String {
    let or = |s: &str, e: &str| {
        if s.is_empty() {
            e.to_owned()
        } else {
            s.to_owned()
        }
    };
    format!(
        "{}.{}.{}",
        or(&gvk.kind, "[noKind]"),
        or(&gvk.version, "[noVer]"),
        or(&gvk.group, "[noGrp]")
    )
}
