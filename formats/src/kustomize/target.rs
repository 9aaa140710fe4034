//! One build: a kustomization's resources, bases and components accumulated depth first,
//! then its generators, components and transformers in kustomize's order; at the root, the
//! hash suffixes, name references and vars that need the whole set.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::config::TransformerConfig;
use super::error::{KustomizeError, KustomizeErrorKind};
use super::kustomization::{self, Kustomization, Var};
use super::loader::{display_dir, looks_remote, Entry, Tree};
use super::openapi::{Schema, SchemaState};
use super::resmap::ResMap;
use super::resource::Resource;
use super::{generators, hash, nameref, plugins, transformers, vars};
use crate::Origin;

/// What a build carries from one kustomization to the next.
#[derive(Debug, Clone, Default)]
pub(crate) struct Accumulator {
    /// The resources so far.
    pub resources: ResMap,
    /// The field specs in force.
    pub config: TransformerConfig,
    /// The vars declared so far, by name.
    pub vars: BTreeMap<String, Var>,
}

/// A loaded kustomization, ready to build.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// Its directory, relative to the tree.
    pub dir: String,
    /// Its file, relative to the tree.
    pub file: String,
    /// Its content.
    pub kustomization: Kustomization,
}

/// The state of one build over a tree.
pub(crate) struct Builder<'t> {
    /// The tree files are read from.
    pub tree: &'t Tree,
    /// The schema in force (a kustomization's `openapi` replaces it from there on).
    pub schema: Arc<Schema>,
    /// kustomize's schema state through the build.
    state: SchemaState,
    /// Whether the root kustomization was loaded.
    root_loaded: bool,
    /// Directories being built, outermost first, to refuse cycles.
    chain: Vec<String>,
    /// With `buildMetadata`: the path from the root kustomization to the one being built,
    /// as origins record it.
    pub origin: Option<String>,
    /// What `helmCharts` are rendered with besides their own settings.
    pub helm: HelmInputs,
}

/// The inputs of the charts a kustomization inflates that come from the render, not the
/// kustomization: the clock and the seed of the random functions (the agent's per-bundle key,
/// so that generated secrets are neither predictable nor rotating).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HelmInputs {
    /// What `now` returns, as Unix seconds.
    pub now: i64,
    /// The seed of the random functions.
    pub seed: crate::RandomSeed,
}

impl<'t> Builder<'t> {
    /// A builder over `tree` with kustomize's built-in schema.
    pub(crate) fn new(tree: &'t Tree) -> Self {
        Builder {
            tree,
            schema: Schema::builtin(),
            state: SchemaState::new(),
            root_loaded: false,
            chain: Vec::new(),
            origin: None,
            helm: HelmInputs::default(),
        }
    }

    /// Loads the kustomization in the tree-relative directory `dir`.
    pub(crate) fn load(&mut self, dir: &str) -> Result<Target, KustomizeError> {
        let (file, kustomization) = kustomization::load(self.tree, dir)?;
        let target = Target {
            dir: dir.to_owned(),
            file,
            kustomization,
        };
        self.apply_openapi(&target)?;
        Ok(target)
    }

    /// Builds the root kustomization: everything kustomize does before writing its output.
    pub(crate) fn build_root(&mut self, target: &Target) -> Result<ResMap, KustomizeError> {
        self.build_with(target, Accumulator::default())
    }

    /// [`Builder::build_root`] over resources already accumulated.
    pub(crate) fn build_with(
        &mut self,
        target: &Target,
        mut acc: Accumulator,
    ) -> Result<ResMap, KustomizeError> {
        self.chain.push(target.dir.clone());
        self.accumulate_target(target, &mut acc)?;
        let in_root = |e: KustomizeError| e.in_file(target.file.clone());
        hash::add_hash_suffixes(&mut acc.resources, &self.schema).map_err(in_root)?;
        nameref::fix_back_references(&mut acc.resources, &acc.config, &self.schema)
            .map_err(in_root)?;
        vars::resolve(&mut acc, &self.schema).map_err(in_root)?;
        drop_local_configs(&mut acc.resources);
        self.chain.pop();
        Ok(acc.resources)
    }

    fn apply_openapi(&mut self, target: &Target) -> Result<(), KustomizeError> {
        let openapi = &target.kustomization.openapi;
        let reset = !self.root_loaded;
        self.root_loaded = true;
        let document = match openapi.get("path") {
            Some(path) => Some(
                self.tree
                    .read_restricted(&target.dir, path)
                    .map_err(|e| e.in_file(target.file.clone()).at_field("openapi.path"))?
                    .1,
            ),
            None => None,
        };
        self.state
            .set_schema(openapi, document.as_deref(), reset)
            .map_err(|e| e.in_file(target.file.clone()).at_field("openapi"))?;
        self.schema = self.state.schema();
        Ok(())
    }

    /// Accumulates one kustomization into `acc` (empty for a kustomization, the including
    /// kustomization's for a component).
    pub(crate) fn accumulate_target(
        &mut self,
        target: &Target,
        acc: &mut Accumulator,
    ) -> Result<(), KustomizeError> {
        let k = &target.kustomization;
        let place = |field: String| {
            let file = target.file.clone();
            move |e: KustomizeError| e.in_file(file).at_field(field)
        };
        for (i, path) in k.resources.iter().enumerate() {
            self.accumulate_resource(target, acc, path)
                .map_err(place(format!("resources[{i}]")))?;
        }
        let mut extras = TransformerConfig::default();
        for (i, path) in k.configurations.iter().enumerate() {
            let (_, text) = self
                .tree
                .read_text_restricted(&target.dir, path)
                .map_err(place(format!("configurations[{i}]")))?;
            let extra = TransformerConfig::from_yaml(&text)
                .map_err(place(format!("configurations[{i}]")))?;
            extras
                .merge(&extra)
                .map_err(place(format!("configurations[{i}]")))?;
        }
        let mut config = TransformerConfig::builtin().clone();
        if !k.configurations.is_empty() {
            config
                .merge(&extras)
                .map_err(place("configurations".into()))?;
        }
        merge_config(&mut acc.config, &config).map_err(place("configurations".into()))?;
        for (i, path) in k.crds.iter().enumerate() {
            let (_, text) = self
                .tree
                .read_text_restricted(&target.dir, path)
                .map_err(place(format!("crds[{i}]")))?;
            let crd_config = TransformerConfig::from_crd_definitions(&text)
                .map_err(place(format!("crds[{i}]")))?;
            merge_config(&mut acc.config, &crd_config).map_err(place(format!("crds[{i}]")))?;
        }
        generators::run_builtin(self, target, acc)?;
        plugins::run_generators(self, target, acc)?;
        for (i, path) in k.components.iter().enumerate() {
            self.accumulate_component(target, acc, path)
                .map_err(place(format!("components[{i}]")))?;
        }
        transformers::run_builtin(self, target, acc)?;
        plugins::run_transformers(self, target, acc)?;
        if !k.validators.is_empty() {
            return Err(KustomizeError::new(
                KustomizeErrorKind::Unsupported,
                "validators are plugins, which are not run",
            )
            .in_file(target.file.clone())
            .at_field("validators"));
        }
        vars::merge_vars(acc, &k.vars, &self.schema).map_err(place("vars".into()))?;
        Ok(())
    }

    fn accumulate_resource(
        &mut self,
        target: &Target,
        acc: &mut Accumulator,
        path: &str,
    ) -> Result<(), KustomizeError> {
        match self.tree.resolve(&target.dir, path)? {
            Entry::File(_) => {
                let (relative, text) = self.tree.read_text_restricted(&target.dir, path)?;
                let mut resources = read_resources(&relative, &text)?;
                if let Some(base) = &self.origin {
                    let value = super::origin::from_path(&super::origin::join(base, path));
                    for (resource, _) in &mut resources {
                        resource.set_annotation(super::resource::ORIGIN_ANNOTATION, &value);
                    }
                }
                acc.resources.append_all(resources, &self.schema)
            }
            Entry::Dir(dir) => {
                let sub = self.enter(&dir, path)?;
                if sub.kustomization.is_component() {
                    self.chain.pop();
                    return Err(KustomizeError::invalid(format!(
                        "expected kind != 'Component' for path '{}'",
                        display_dir(&dir)
                    )));
                }
                let mut sub_acc = Accumulator::default();
                let saved = self.enter_origin(path);
                let result = self.accumulate_target(&sub, &mut sub_acc);
                self.origin = saved;
                self.chain.pop();
                result?;
                merge_accumulator(acc, sub_acc, &self.schema)
            }
            Entry::Missing(_) => Err(missing(target, path)),
        }
    }

    fn accumulate_component(
        &mut self,
        target: &Target,
        acc: &mut Accumulator,
        path: &str,
    ) -> Result<(), KustomizeError> {
        let dir = match self.tree.resolve(&target.dir, path)? {
            Entry::Dir(dir) => dir,
            Entry::File(file) => {
                return Err(KustomizeError::invalid(format!(
                    "must build at directory: not a valid directory: '{file}'; a component is a \
                     directory"
                )))
            }
            Entry::Missing(_) => return Err(missing(target, path)),
        };
        let sub = self.enter(&dir, path)?;
        if !sub.kustomization.is_component() {
            self.chain.pop();
            return Err(KustomizeError::invalid(format!(
                "expected kind 'Component' for path '{}' but got '{}'",
                display_dir(&dir),
                sub.kustomization.kind
            )));
        }
        let saved = self.enter_origin(path);
        let result = self.accumulate_target(&sub, acc);
        self.origin = saved;
        self.chain.pop();
        result
    }

    /// Moves the origin path into a directory a kustomization names; returns the old one.
    fn enter_origin(&mut self, path: &str) -> Option<String> {
        let saved = self.origin.clone();
        if let Some(base) = &self.origin {
            self.origin = Some(super::origin::join(base, path));
        }
        saved
    }

    /// Who a built-in generator or transformer of `target` is, for `buildMetadata`.
    pub(crate) fn configured(
        &self,
        target: &Target,
        kind: &str,
    ) -> Option<super::origin::Configured> {
        let base = self.origin.as_ref()?;
        let file_name = target.file.rsplit('/').next().unwrap_or(&target.file);
        Some(super::origin::Configured::builtin(base, file_name, kind))
    }

    /// Loads the kustomization of a directory a kustomization names, refusing cycles.
    fn enter(&mut self, dir: &str, written: &str) -> Result<Target, KustomizeError> {
        for visited in &self.chain {
            if super::loader::is_within(dir, visited) {
                return Err(KustomizeError::new(
                    KustomizeErrorKind::Cycle,
                    format!(
                        "cycle detected: '{written}' ({}) contains the kustomization '{}', which \
                         includes it",
                        display_dir(dir),
                        display_dir(visited)
                    ),
                ));
            }
        }
        let target = self.load(dir)?;
        self.chain.push(dir.to_owned());
        Ok(target)
    }
}

fn missing(target: &Target, path: &str) -> KustomizeError {
    if looks_remote(path) {
        return KustomizeError::new(
            KustomizeErrorKind::RemoteRefused,
            format!(
                "'{path}' is remote; nothing is fetched during a render. Bring it in as another \
                 source of the BundleDeployment (its sources are merged into one tree) and name \
                 it by its path in {}",
                target.file
            ),
        );
    }
    KustomizeError::new(
        KustomizeErrorKind::MissingFile,
        format!(
            "'{path}' is neither a file nor a directory in '{}'",
            display_dir(&target.dir)
        ),
    )
}

/// Merges a transformer configuration into the accumulated one. Merging is not a plain
/// union: merged lists are sorted by kind, and a later spec that an earlier, more specific one
/// "selects" is dropped, so an empty configuration merged with the built-in one and a custom
/// `namePrefix` spec can lose the generic one, as in kustomize. Merging a configuration into
/// itself changes nothing, which spares the work every kustomization would repeat.
pub(crate) fn merge_config(
    mine: &mut TransformerConfig,
    other: &TransformerConfig,
) -> Result<(), KustomizeError> {
    if mine == other {
        return Ok(());
    }
    mine.merge(other)
}

/// Merges a base's accumulator into the including one: resources appended (ids must not
/// clash), configurations merged, vars added (a name may be declared once).
fn merge_accumulator(
    acc: &mut Accumulator,
    other: Accumulator,
    schema: &Schema,
) -> Result<(), KustomizeError> {
    acc.resources.append_map(other.resources, schema)?;
    merge_config(&mut acc.config, &other.config)?;
    for (name, var) in other.vars {
        if acc.vars.contains_key(&name) {
            return Err(KustomizeError::new(
                KustomizeErrorKind::Conflict,
                format!("var '{name}' already encountered"),
            ));
        }
        acc.vars.insert(name, var);
    }
    Ok(())
}

/// Reads the objects of a resource file: YAML documents, each a map with a kind and (unless
/// a list) a name; `*List` kinds give their items (a file that is one list, in place; lists
/// among other documents, after them, as kustomize queues them).
pub(crate) fn read_resources(
    relative: &str,
    text: &str,
) -> Result<Vec<(Resource, Origin)>, KustomizeError> {
    let documents = super::patches::split_documents(text);
    let single = documents.iter().filter(|d| !is_blank(d)).count() == 1;
    let mut out = Vec::new();
    let mut queued = Vec::new();
    let mut line = 1u64;
    for (index, document) in documents.iter().enumerate() {
        let origin = Origin {
            file: relative.to_owned(),
            document: index,
            line,
        };
        line += document.matches('\n').count() as u64 + u64::from(index + 1 < documents.len());
        if is_blank(document) {
            continue;
        }
        let mut value: Value = super::yaml_v3::from_yaml_str(document).map_err(|e| {
            KustomizeError::invalid(format!(
                "{relative} (document {index}): {}",
                crate::object::yaml_error_message(&e)
            ))
        })?;
        if value.is_null() {
            continue;
        }
        whole_floats_as_integers(&mut value);
        let Value::Object(map) = value else {
            return Err(KustomizeError::invalid(format!(
                "{relative} (document {index}): a resource must be a map"
            )));
        };
        let kind = map
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if kind.is_empty() {
            return Err(KustomizeError::invalid(format!(
                "{relative} (document {index}): missing kind in object"
            )));
        }
        if kind.ends_with("List") {
            match map.get("items") {
                Some(Value::Array(items)) => {
                    let target = if single { &mut out } else { &mut queued };
                    for item in items {
                        match item {
                            Value::Object(item) => {
                                check_named(item, relative, index)?;
                                target.push((Resource::new(item.clone()), origin.clone()));
                            }
                            Value::Null => {
                                return Err(KustomizeError::invalid(format!(
                                    "{relative} (document {index}): empty item in {kind}"
                                )))
                            }
                            _ => {
                                return Err(KustomizeError::invalid(format!(
                                    "{relative} (document {index}): an item of {kind} is not a map"
                                )))
                            }
                        }
                    }
                    continue;
                }
                Some(Value::Null) => continue,
                Some(_) => {
                    return Err(KustomizeError::invalid(format!(
                        "{relative} (document {index}): expected array in {kind}/items"
                    )))
                }
                None => {}
            }
        } else {
            check_named(&map, relative, index)?;
        }
        out.push((Resource::new(map), origin));
    }
    out.extend(queued);
    Ok(out)
}

fn is_blank(document: &str) -> bool {
    document.lines().all(|line| {
        let line = line.trim();
        line.is_empty() || line.starts_with('#') || line == "---" || line == "..."
    })
}

fn check_named(
    map: &serde_json::Map<String, Value>,
    relative: &str,
    index: usize,
) -> Result<(), KustomizeError> {
    let name = map
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if name.is_empty() {
        return Err(KustomizeError::invalid(format!(
            "{relative} (document {index}): missing metadata.name in object"
        )));
    }
    Ok(())
}

/// Whole-number floats (`1e3`, `2.0`) as integers, as Kubernetes reads them.
fn whole_floats_as_integers(value: &mut Value) {
    match value {
        Value::Number(number) if number.is_f64() => {
            if let Some(float) = number.as_f64() {
                if float.fract() == 0.0 && float.abs() <= 9_007_199_254_740_992.0 {
                    *value = Value::from(float as i64);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_floats_as_integers),
        Value::Object(map) => map.values_mut().for_each(whole_floats_as_integers),
        _ => {}
    }
}

/// kustomize leaves out resources annotated `config.kubernetes.io/local-config` (unless the
/// value is `"false"`).
fn drop_local_configs(resources: &mut ResMap) {
    const LOCAL_CONFIG: &str = "config.kubernetes.io/local-config";
    let mut emptied = false;
    for resource in &mut resources.resources {
        let local = resource
            .body
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get(LOCAL_CONFIG))
            .is_some_and(|v| v != &Value::String("false".into()));
        if local {
            resource.body.clear();
            emptied = true;
        }
    }
    if emptied {
        resources.drop_empties();
    }
}
