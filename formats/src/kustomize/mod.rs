//! The `kustomize` format: a kustomization built natively, with output equal to `kustomize
//! build` v5.5.0. Pure: a tree in, objects out; nothing is fetched.

mod config;
/// The engine's error, defined below the renderers' shared error type.
pub use crate::kustomize_error as error;
mod field_names;
mod fieldspec;
mod generators;
mod hash;
mod helm_charts;
mod images;
pub mod json_patch;
mod kustomization;
mod loader;
mod nameref;
pub mod openapi;
mod origin;
mod output;
mod patches;
mod plugins;
pub mod replacements;
mod resmap;
pub mod resource;
pub mod selector;
mod sort;
pub mod strategic_merge;
mod target;
mod transformers;
mod vars;
mod yaml_v3;

pub use error::{KustomizeError, KustomizeErrorKind};

use std::path::Path;

use serde_json::Value;

use crate::{Object, RenderConfig, RenderError, Rendered};
use loader::{Entry, Tree};
pub use target::HelmInputs;

/// Builds the kustomization in the directory `root` (relative to `tree`, `""` for the tree
/// itself) as `kustomize build` does, reading files only from inside `tree`.
pub fn build(tree: &Path, root: &str) -> Result<Vec<Object>, KustomizeError> {
    build_with(tree, root, HelmInputs::default())
}

/// [`build`], with the clock and seed its `helmCharts` are rendered with.
pub fn build_with(
    tree: &Path,
    root: &str,
    helm: HelmInputs,
) -> Result<Vec<Object>, KustomizeError> {
    let tree = Tree::new(tree)?;
    let dir = match tree.resolve("", root)? {
        Entry::Dir(dir) => dir,
        Entry::File(file) => {
            return Err(KustomizeError::invalid(format!(
                "must build at a directory: '{file}' is a file"
            )))
        }
        Entry::Missing(_) => {
            return Err(KustomizeError::new(
                KustomizeErrorKind::MissingFile,
                format!("the kustomization directory '{root}' does not exist in the bundle"),
            ))
        }
    };
    let mut builder = target::Builder::new(&tree);
    builder.helm = helm;
    let root_target = builder.load(&dir)?;
    if !root_target.kustomization.build_metadata.is_empty() {
        builder.origin = Some(String::new());
    }
    let mut resources = builder.build_root(&root_target)?;
    let k = &root_target.kustomization;
    sort::apply(&mut resources, k.sort_options.as_ref())
        .map_err(|e| e.in_file(root_target.file.clone()))?;
    output::finish(resources, &k.build_metadata).map_err(|e| e.in_file(root_target.file.clone()))
}

/// Renders the kustomization at `config.kustomize.path` inside `tree`.
pub fn render_kustomize(tree: &Path, config: &RenderConfig) -> Result<Rendered, RenderError> {
    let helm = HelmInputs {
        now: config.helm.now,
        seed: config.helm.seed,
    };
    let objects = build_with(tree, &config.kustomize.path, helm)?;
    crate::plain::finish(objects, &config.install_namespace)
}

/// Applies an inline kustomization to objects another format rendered: `patches`, `images`,
/// `namespace`, `labels`, `commonLabels`, `commonAnnotations`, `replicas`,
/// `namePrefix`/`nameSuffix`, `replacements`, and `components` (read from `tree`). The objects
/// keep their order unless the kustomization sets `sortOptions`.
pub fn transform(
    objects: Vec<Object>,
    kustomization: &Value,
    tree: Option<&Path>,
) -> Result<Vec<Object>, KustomizeError> {
    const FILE: &str = "<inline kustomization>";
    let mut parsed = kustomization::Kustomization::from_value(kustomization.clone())
        .map_err(|e| e.in_file(FILE))?;
    parsed.fix_up().map_err(|e| e.in_file(FILE))?;
    if !parsed.resources.is_empty() {
        return Err(KustomizeError::invalid(
            "an inline kustomization's resources are the rendered objects; it may not name others",
        )
        .in_file(FILE)
        .at_field("resources"));
    }
    let tree = match tree {
        Some(path) => Tree::new(path)?,
        None => Tree::empty(),
    };
    let mut builder = target::Builder::new(&tree);
    let sort_options = parsed.sort_options.clone();
    let build_metadata = parsed.build_metadata.clone();
    let root = target::Target {
        dir: String::new(),
        file: FILE.to_owned(),
        kustomization: parsed,
    };
    let mut acc = target::Accumulator::default();
    let pairs = objects
        .into_iter()
        .map(|object| {
            let origin = object.origin().clone();
            (resource::Resource::new(object.into_body()), origin)
        })
        .collect();
    acc.resources
        .append_all(pairs, &builder.schema)
        .map_err(|e| e.in_file(FILE))?;
    let mut resources = builder.build_with(&root, acc)?;
    if sort_options.is_some() {
        sort::apply(&mut resources, sort_options.as_ref()).map_err(|e| e.in_file(FILE))?;
    }
    output::finish(resources, &build_metadata).map_err(|e| e.in_file(FILE))
}

impl From<KustomizeError> for RenderError {
    fn from(error: KustomizeError) -> Self {
        RenderError::Kustomize(error)
    }
}
