//! The `kustomize` format: a kustomization built natively, with output equal to `kustomize
//! build` v5.5.0. Pure: a tree in, objects out; nothing is fetched.

pub mod error;
pub mod json_patch;
pub mod openapi;
pub mod replacements;
pub mod resource;
pub mod selector;
pub mod strategic_merge;

pub use error::{KustomizeError, KustomizeErrorKind};

use std::path::Path;

use crate::{Object, RenderConfig, RenderError, Rendered};

/// Builds the kustomization in the directory `root` (relative to `tree`, `""` for the tree
/// itself) as `kustomize build` does, reading files only from inside `tree`.
pub fn build(tree: &Path, root: &str) -> Result<Vec<Object>, KustomizeError> {
    let _ = (tree, root);
    Err(KustomizeError::new(
        KustomizeErrorKind::Unsupported,
        "the kustomize engine is not built yet",
    ))
}

/// Runs an inline kustomization over `objects` (the `kustomize` processor): its resources are
/// the objects given; `components` are read from `tree`.
pub fn transform(
    objects: Vec<Object>,
    kustomization: &serde_json::Value,
    tree: Option<&Path>,
) -> Result<Vec<Object>, KustomizeError> {
    let _ = (kustomization, tree);
    Ok(objects)
}

/// Renders the kustomization at `config.kustomize.path` inside `tree`.
pub fn render_kustomize(tree: &Path, config: &RenderConfig) -> Result<Rendered, RenderError> {
    let _ = (tree, config);
    Err(RenderError::NotImplemented("kustomize"))
}

impl From<KustomizeError> for RenderError {
    fn from(error: KustomizeError) -> Self {
        RenderError::Kustomize(error)
    }
}
