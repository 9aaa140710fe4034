//! Phase 2, render (pure): the assembled tree and the spec's format settings to objects.

use std::path::Path;

use pallet_formats::{Format, HelmOptions, RenderConfig, RenderError, Rendered};

use crate::api::{BundleDeployment, BundleFormat};

/// The renderer's configuration for `bd`, with the API's defaults filled in.
pub fn render_config(bd: &BundleDeployment) -> RenderConfig {
    let spec = &bd.spec;
    let config = spec.config.clone().unwrap_or_default();
    let helm = config.helm.unwrap_or_default();
    RenderConfig {
        install_namespace: spec.install_namespace.clone().unwrap_or_default(),
        watch_namespace: config
            .registry_v1
            .map(|r| r.watch_namespace)
            .unwrap_or_default(),
        helm: HelmOptions {
            release_name: helm
                .release_name
                .unwrap_or_else(|| bd.metadata.name.clone().unwrap_or_default()),
            values: helm.values.unwrap_or_else(|| serde_json::json!({})),
        },
    }
}

/// The formats crate's name for an API format.
pub fn format(format: BundleFormat) -> Format {
    match format {
        BundleFormat::Plain => Format::Plain,
        BundleFormat::Helm => Format::Helm,
        BundleFormat::RegistryV1 => Format::RegistryV1,
    }
}

/// Renders the tree at `tree` as `bd` asks.
pub fn render(bd: &BundleDeployment, tree: &Path) -> Result<Rendered, RenderError> {
    pallet_formats::render(format(bd.spec.format), tree, &render_config(bd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helm_release_name_defaults_to_the_bundle_deployment_name() {
        let bd: BundleDeployment = serde_json::from_value(serde_json::json!({
            "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
            "metadata": {"name": "argo"},
            "spec": {"sources": [{"kind": "http", "http": {"url": "http://x/y.yaml"}}], "format": "helm",
                     "installNamespace": "apps", "config": {"helm": {"values": {"a": 1}}}}
        }))
        .unwrap();
        let config = render_config(&bd);
        assert_eq!(config.helm.release_name, "argo");
        assert_eq!(config.helm.values["a"], 1);
        assert_eq!(config.install_namespace, "apps");
        assert_eq!(config.watch_namespace, "");
    }
}
