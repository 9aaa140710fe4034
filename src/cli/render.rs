//! `pallet render`: a BundleDeployment's sources (or a local tree) to objects, printed as YAML
//! documents or a JSON List. Needs no cluster; a source that names a Secret is an error.

use std::path::PathBuf;

use anyhow::{bail, Context as _};
use clap::{Args, ValueEnum};
use pallet_formats::{Format, HelmCapabilities, HelmOptions, RenderConfig, Rendered};

use super::progress::Progress;
use super::FetchFlags;

/// Output of `pallet render`.
#[derive(ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RenderOutput {
    /// YAML documents separated by `---`.
    #[default]
    Yaml,
    /// A JSON `List`.
    Json,
}

/// Formats for `--format` (a local tree).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormatArg {
    /// Plain manifests.
    Plain,
    /// A Helm chart.
    Helm,
    /// An OLM registry+v1 bundle.
    #[value(name = "registry-v1")]
    RegistryV1,
}

/// Flags of `pallet render`.
#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["file", "format"])))]
pub struct RenderArgs {
    /// The BundleDeployment manifest whose sources are fetched and rendered (`-` for stdin).
    #[arg(short = 'f', long = "filename", conflicts_with_all = ["format", "dir"])]
    pub file: Option<PathBuf>,
    /// Render the local tree DIR in this format instead.
    #[arg(long, requires = "dir")]
    pub format: Option<FormatArg>,
    /// The local tree (with `--format`).
    pub dir: Option<PathBuf>,
    /// installNamespace for a local tree (namespaced objects without one; helm Release.Namespace).
    #[arg(long)]
    pub install_namespace: Option<String>,
    /// registry-v1 watch namespace for a local tree.
    #[arg(long)]
    pub watch_namespace: Option<String>,
    /// Helm release name for a local tree.
    #[arg(long, default_value = "release")]
    pub release_name: String,
    /// Helm values file (YAML) for a local tree.
    #[arg(long)]
    pub values: Option<PathBuf>,
    /// Kubernetes version for helm's `.Capabilities.KubeVersion` and a chart's `kubeVersion`
    /// constraint (as `helm template --kube-version`; default v1.20.0, helm's).
    #[arg(long, value_name = "VERSION")]
    pub kube_version: Option<String>,
    /// API versions added to helm's default `.Capabilities.APIVersions` (as `helm template
    /// --api-versions`; `group/version` or `group/version/Kind`; repeatable or comma-separated).
    #[arg(
        short = 'a',
        long = "api-versions",
        value_name = "API",
        value_delimiter = ','
    )]
    pub api_versions: Vec<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: RenderOutput,
    /// Fetch settings.
    #[command(flatten)]
    pub fetch: FetchFlags,
}

/// Reads a manifest from a path, `-` meaning stdin.
pub(super) fn read_manifest(path: &std::path::Path) -> anyhow::Result<String> {
    if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading stdin")
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    }
}

/// `.Capabilities` from `--kube-version` and `--api-versions`: `None` (helm's defaults) when
/// neither is given.
fn capabilities(args: &RenderArgs) -> anyhow::Result<Option<HelmCapabilities>> {
    if args.kube_version.is_none() && args.api_versions.is_empty() {
        return Ok(None);
    }
    let defaults = HelmCapabilities::default_for_template();
    let kube_version = match &args.kube_version {
        Some(v) => pallet_formats::helm::semver::kube_version(v)
            .map_err(|e| anyhow::anyhow!("--kube-version {e}"))?,
        None => defaults.kube_version,
    };
    let mut api_versions = defaults.api_versions;
    for api in &args.api_versions {
        let api = api.trim();
        if api.is_empty() || api.split('/').count() > 3 {
            bail!("--api-versions {api:?} is not group/version or group/version/Kind");
        }
        if !api_versions.iter().any(|a| a == api) {
            api_versions.push(api.to_string());
        }
    }
    Ok(Some(HelmCapabilities {
        kube_version,
        api_versions,
    }))
}

/// Runs `pallet render`.
pub fn run(args: RenderArgs) -> anyhow::Result<()> {
    let capabilities = capabilities(&args)?;
    let rendered = match (&args.file, args.format, &args.dir) {
        (Some(file), _, _) => {
            let text = read_manifest(file)?;
            let (_, bd) =
                crate::preview::parse_bundle_deployment(&text, &file.display().to_string())?;
            let fetcher = args.fetch.fetcher()?;
            super::block_on(async move {
                let progress = Progress::stderr();
                let fetched =
                    crate::preview::fetch_sources(None, &fetcher, &bd, &|e| progress.event(e))
                        .await?;
                drop(progress);
                Ok(crate::preview::assemble_and_render(
                    &fetcher,
                    &bd,
                    &fetched,
                    capabilities,
                )?)
            })?
        }
        (None, Some(format), Some(dir)) => {
            let values = match &args.values {
                Some(path) => serde_saphyr::from_str(&read_manifest(path)?)
                    .with_context(|| format!("{} is not valid YAML", path.display()))?,
                None => serde_json::json!({}),
            };
            let config = RenderConfig {
                install_namespace: args.install_namespace.clone().unwrap_or_default(),
                watch_namespace: args.watch_namespace.clone().unwrap_or_default(),
                helm: HelmOptions {
                    release_name: args.release_name.clone(),
                    values,
                    capabilities,
                    // No BundleDeployment here: `now` is the epoch, the random seed 0.
                    ..HelmOptions::default()
                },
            };
            let format = match format {
                FormatArg::Plain => Format::Plain,
                FormatArg::Helm => Format::Helm,
                FormatArg::RegistryV1 => Format::RegistryV1,
            };
            crate::preview::render_dir(format, dir, &config)?
        }
        _ => bail!("give -f BD.yaml, or --format FORMAT DIR"),
    };
    super::write_stdout(&format_rendered(&rendered, args.output)?)
}

/// The rendered objects as YAML documents or a JSON List.
pub fn format_rendered(rendered: &Rendered, output: RenderOutput) -> anyhow::Result<String> {
    let objects: Vec<serde_json::Value> = rendered
        .objects
        .iter()
        .map(|o| serde_json::Value::Object(o.object.body().clone()))
        .collect();
    Ok(match output {
        RenderOutput::Json => {
            let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
            format!("{}\n", serde_json::to_string_pretty(&list)?)
        }
        RenderOutput::Yaml => {
            let mut out = String::new();
            for object in &objects {
                out.push_str("---\n");
                out.push_str(&super::to_yaml(object)?);
            }
            out
        }
    })
}
