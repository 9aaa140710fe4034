//! The `kustomize` format: a kustomization built natively, with output equal to `kustomize
//! build` v5.5.0. Pure: a tree in, objects out; nothing is fetched.

pub mod error;
pub mod json_patch;
pub mod openapi;
pub mod resource;
pub mod selector;
pub mod strategic_merge;

pub use error::{KustomizeError, KustomizeErrorKind};

use std::path::Path;

use crate::{RenderConfig, RenderError, Rendered};

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
