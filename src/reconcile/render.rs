//! Phase 2, render (pure): the assembled tree and the spec's format settings to objects.

use std::path::Path;

use pallet_formats::processors::{NamedProcessor, Pipeline, ProcessorTrace, Progress, Step};
use pallet_formats::{
    CertificateProvider, Format, HelmCapabilities, HelmOptions, RegistryV1Options, RenderConfig,
    RenderError, Rendered,
};

use crate::api::{BundleDeployment, BundleFormat, CertificateProviderName, RegistryV1Config};

/// The renderer's configuration for `bd`, with the API's defaults filled in. `capabilities`
/// describe the target cluster for helm's `.Capabilities`; `values` are the user values
/// (`valuesFrom` then `values`, see [`super::values`]), `None` for the inline `values` alone.
pub fn render_config(
    bd: &BundleDeployment,
    capabilities: Option<HelmCapabilities>,
    values: Option<serde_json::Value>,
) -> RenderConfig {
    let spec = &bd.spec;
    let config = spec.config.clone().unwrap_or_default();
    let helm = config.helm.unwrap_or_default();
    let registry_v1 = config.registry_v1.unwrap_or_default();
    RenderConfig {
        install_namespace: spec.install_namespace.clone().unwrap_or_default(),
        registry_v1: registry_v1_options(&registry_v1),
        kustomize: pallet_formats::KustomizeOptions {
            path: config
                .kustomize
                .as_ref()
                .and_then(|k| k.path.clone())
                .unwrap_or_default(),
        },
        budgets: Default::default(),
        watch_namespace: registry_v1.watch_namespace,
        helm: HelmOptions {
            release_name: helm
                .release_name
                .unwrap_or_else(|| bd.metadata.name.clone().unwrap_or_default()),
            values: values
                .or(helm.values)
                .unwrap_or_else(|| serde_json::json!({})),
            values_files: helm.values_files,
            capabilities,
            // The object's creation time: what the render key's seed reads as its clock (see
            // `super::render_key`). The chart's `now` is the time the revision of these inputs
            // recorded: the agent, `pallet plan` and `pallet render` set it (`super::render_time`).
            now: super::render_time::created(bd),
            // No key here: the agent seeds the random functions from the BundleDeployment's
            // render key (see `super::render_key`); a render elsewhere uses all zeros.
            seed: [0; 32],
            // Without a cluster, as `helm template`; the agent and `pallet plan` read them.
            lookups: pallet_formats::Lookups::Offline,
        },
    }
}

/// The renderer's registry-v1 options for `config.registryV1` (the deploymentConfig as the JSON
/// k8s-openapi writes, so unset fields are absent).
pub fn registry_v1_options(config: &RegistryV1Config) -> RegistryV1Options {
    RegistryV1Options {
        deployment_config: config
            .deployment_config
            .as_ref()
            .and_then(|c| serde_json::to_value(c).ok()),
        certificate_provider: match config.certificate_provider() {
            CertificateProviderName::BuiltIn => CertificateProvider::BuiltIn,
            CertificateProviderName::CertManager => CertificateProvider::CertManager,
        },
    }
}

/// The formats crate's name for an API format.
pub fn format(format: BundleFormat) -> Format {
    match format {
        BundleFormat::Plain => Format::Plain,
        BundleFormat::Helm => Format::Helm,
        BundleFormat::RegistryV1 => Format::RegistryV1,
        BundleFormat::Kustomize => Format::Kustomize,
    }
}

/// Renders the tree at `tree` as `bd` asks, for a cluster with `capabilities`, with the user
/// `values` (see [`render_config`]). A render with no objects is refused unless
/// `spec.rollout.allowEmpty` (see [`refuse_empty`]).
pub fn render(
    bd: &BundleDeployment,
    tree: &Path,
    capabilities: Option<HelmCapabilities>,
    values: Option<serde_json::Value>,
) -> Result<Rendered, RenderError> {
    render_with(bd, tree, &render_config(bd, capabilities, values))
}

/// [`render`] with the configuration already made.
pub fn render_with(
    bd: &BundleDeployment,
    tree: &Path,
    config: &RenderConfig,
) -> Result<Rendered, RenderError> {
    render_tree(
        format(bd.spec.format),
        tree,
        config,
        bd.spec.rollout().allow_empty(),
    )
}

/// Renders the tree at `tree` in `format` with `config`, without processors: an empty render is
/// refused unless `allow_empty`, and so is an object the API server would not store.
pub fn render_tree(
    format: Format,
    tree: &Path,
    config: &RenderConfig,
    allow_empty: bool,
) -> Result<Rendered, RenderError> {
    check_rendered(
        pallet_formats::render(format, tree, config)?,
        format,
        allow_empty,
    )
}

/// The format's render alone, before processors and checks.
pub fn render_format(
    bd: &BundleDeployment,
    tree: &Path,
    config: &RenderConfig,
) -> Result<Rendered, RenderError> {
    pallet_formats::render(format(bd.spec.format), tree, config)
}

/// The checks of a finished render (after processors) of `bd`.
pub fn check(bd: &BundleDeployment, rendered: Rendered) -> Result<Rendered, RenderError> {
    check_rendered(
        rendered,
        format(bd.spec.format),
        bd.spec.rollout().allow_empty(),
    )
}

/// One step of a render with processors: done, or stopped where a function must be called.
#[derive(Debug, Clone, PartialEq)]
pub enum RenderStep {
    /// The objects, checked, and what each processor did.
    Done {
        /// The rendered set.
        rendered: Rendered,
        /// What each processor did.
        traces: Vec<ProcessorTrace>,
    },
    /// The chart looks up objects the configuration gave no answer for: read them and render
    /// again with their answers (see [`super::lookups`]).
    Lookups {
        /// Every lookup without an answer.
        keys: Vec<pallet_formats::LookupKey>,
    },
    /// The function of processor `index` must be called with `request`; the next step goes on
    /// from `progress` with its answer.
    Function {
        /// The processor's index.
        index: usize,
        /// The ResourceList to send.
        request: serde_json::Value,
        /// Where the processors stand.
        progress: Progress,
    },
}

/// The answer of the function a [`RenderStep::Function`] asked for, and where to go on from.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Resume {
    /// Where the processors stood.
    pub progress: Progress,
    /// The function's answer (a ResourceList's text), or why there is none.
    pub answer: Result<String, String>,
}

/// Renders the tree (or, with `resume`, goes on from a function's answer) and runs the
/// processors until the end or the next function. Pure; what the render sandbox runs. Errors
/// name paths in the bundle, never the tree's own directory (a processor reads files too).
pub fn render_step(
    format: Format,
    tree: &Path,
    config: &RenderConfig,
    allow_empty: bool,
    processors: &[NamedProcessor],
    resume: Option<Resume>,
) -> Result<RenderStep, RenderError> {
    step_in_tree(format, tree, config, allow_empty, processors, resume)
        .map_err(|error| error.relative_to(tree))
}

fn step_in_tree(
    format: Format,
    tree: &Path,
    config: &RenderConfig,
    allow_empty: bool,
    processors: &[NamedProcessor],
    resume: Option<Resume>,
) -> Result<RenderStep, RenderError> {
    let mut pipeline = match resume {
        None => {
            let rendered = match pallet_formats::render(format, tree, config) {
                Err(RenderError::LookupsNeeded { keys }) => {
                    return Ok(RenderStep::Lookups { keys })
                }
                other => other?,
            };
            Pipeline::new(rendered, processors, Some(tree))
        }
        Some(Resume { progress, answer }) => {
            let mut pipeline = Pipeline::from_progress(progress, processors, Some(tree))?;
            pipeline.resume(answer)?;
            pipeline
        }
    };
    match pipeline.advance()? {
        Step::Function { index, request } => Ok(RenderStep::Function {
            index,
            request,
            progress: pipeline.progress(),
        }),
        Step::Done => {
            let (rendered, traces) = pipeline.finish()?;
            Ok(RenderStep::Done {
                rendered: check_rendered(rendered, format, allow_empty)?,
                traces,
            })
        }
    }
}

/// Not empty unless `allow_empty`, no object over what the API server stores.
fn check_rendered(
    rendered: Rendered,
    format: Format,
    allow_empty: bool,
) -> Result<Rendered, RenderError> {
    let rendered = refuse_empty(rendered, format, allow_empty)?;
    refuse_oversized(rendered, MAX_OBJECT_BYTES)
}

/// The largest object the API server stores: etcd's default request limit (1.5 MiB). A bigger
/// one would be refused at apply time, after its revision had been stored; finding it here
/// keeps the active revision and stores nothing.
pub const MAX_OBJECT_BYTES: usize = 1536 * 1024;

/// Refuses a render holding an object over `limit` bytes as JSON, naming the first one.
pub fn refuse_oversized(rendered: Rendered, limit: usize) -> Result<Rendered, RenderError> {
    for item in &rendered.objects {
        // Counting bytes, not keeping them: serde_json writes into a counter.
        let mut counter = ByteCounter(0);
        if serde_json::to_writer(&mut counter, item.object.body()).is_ok() && counter.0 > limit {
            return Err(RenderError::TooLarge {
                object: item.object.key().to_string(),
                bytes: counter.0,
                limit,
            });
        }
    }
    Ok(rendered)
}

struct ByteCounter(usize);

impl std::io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An empty render would prune every object of the active revision: usually a wrong directory
/// or an empty image, not an intent. It is refused unless allowed (Argo CD's `allowEmpty` is
/// the precedent), so the active revision stays.
pub fn refuse_empty(
    rendered: Rendered,
    format: Format,
    allow_empty: bool,
) -> Result<Rendered, RenderError> {
    if rendered.objects.is_empty() && !allow_empty {
        return Err(RenderError::Empty(format.name()));
    }
    Ok(rendered)
}

/// helm's `.Capabilities.APIVersions` from discovery: every served `group/version` (`v1` for the
/// core group) and `group/version/Kind`, sorted.
pub fn api_versions<'a>(
    served: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
) -> Vec<String> {
    let mut out = std::collections::BTreeSet::new();
    for (group, version, kind) in served {
        let group_version = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        out.insert(format!("{group_version}/{kind}"));
        out.insert(group_version);
    }
    out.into_iter().collect()
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
        let config = render_config(&bd, None, None);
        assert_eq!(config.helm.release_name, "argo");
        assert_eq!(config.helm.values["a"], 1);
        assert_eq!(config.install_namespace, "apps");
        assert_eq!(config.watch_namespace, "");
        assert!(config.helm.capabilities.is_none());
    }

    /// The conformance deploymentConfig read through the API's k8s-openapi types reaches the
    /// renderer unchanged (the formats crate's conformance test renders it against the golden).
    #[test]
    fn deployment_config_passes_through_the_api_types_unchanged() {
        let dir = std::env::var_os("PALLET_CONFORMANCE_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance/registry-v1")
            });
        let text =
            std::fs::read_to_string(dir.join("config/with-deploymentconfig-options.yaml")).unwrap();
        let raw: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        let typed: RegistryV1Config = serde_saphyr::from_str(&text).unwrap();
        let options = registry_v1_options(&typed);
        assert_eq!(
            options.deployment_config.as_ref(),
            Some(&raw["deploymentConfig"])
        );
        assert_eq!(
            options.certificate_provider,
            CertificateProvider::BuiltIn,
            "the default"
        );

        let empty: RegistryV1Config =
            serde_saphyr::from_str("deploymentConfig: {affinity: {nodeAffinity: {}}, nodeSelector: {}}\ncertificateProvider: CertManager").unwrap();
        let options = registry_v1_options(&empty);
        assert_eq!(
            options.deployment_config,
            Some(serde_json::json!({"affinity": {"nodeAffinity": {}}, "nodeSelector": {}})),
            "empty affinities and maps stay distinct from absent ones"
        );
        assert_eq!(
            options.certificate_provider,
            CertificateProvider::CertManager
        );

        // `selector` is accepted and reaches the renderer, which ignores it as OLM v1 does.
        let with_selector: RegistryV1Config =
            serde_saphyr::from_str("deploymentConfig: {selector: {matchLabels: {a: b}}}").unwrap();
        let value = registry_v1_options(&with_selector)
            .deployment_config
            .unwrap();
        assert_eq!(value["selector"]["matchLabels"]["a"], "b");
    }

    #[test]
    fn an_empty_render_is_refused_unless_allowed() {
        let empty = Rendered::default();
        let err = refuse_empty(empty.clone(), Format::Plain, false).unwrap_err();
        assert_eq!(err.category(), "EmptyBundle");
        assert!(err.to_string().contains("spec.rollout.allowEmpty"), "{err}");
        assert!(refuse_empty(empty, Format::Plain, true).is_ok());
    }

    #[test]
    fn api_versions_list_group_versions_and_kinds() {
        let served = [
            ("", "v1", "ConfigMap"),
            ("apps", "v1", "Deployment"),
            ("apps", "v1", "StatefulSet"),
        ];
        assert_eq!(
            api_versions(served),
            [
                "apps/v1",
                "apps/v1/Deployment",
                "apps/v1/StatefulSet",
                "v1",
                "v1/ConfigMap"
            ]
        );
    }
}
