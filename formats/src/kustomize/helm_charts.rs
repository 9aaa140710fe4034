//! `helmCharts`: a chart inside the tree rendered with pallet's helm format, as
//! `kustomize build --enable-helm` renders it with `helm template`.

use super::error::{KustomizeError, KustomizeErrorKind};
use super::kustomization::{HelmChart, HelmGlobals};
use super::loader::Tree;
use super::resource::Resource;
use crate::Origin;

/// Renders one chart entry into resources.
pub(crate) fn inflate(
    tree: &Tree,
    dir: &str,
    globals: &HelmGlobals,
    chart: &HelmChart,
) -> Result<Vec<(Resource, Origin)>, KustomizeError> {
    let _ = (tree, dir, globals);
    Err(KustomizeError::new(
        KustomizeErrorKind::Unsupported,
        format!("helm chart '{}' is not rendered yet", chart.name),
    ))
}
