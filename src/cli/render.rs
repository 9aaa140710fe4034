//! `pallet render`: a BundleDeployment's sources (or a local tree) to objects, printed as YAML
//! documents or a JSON List. Needs no cluster; a source that names a Secret is an error.

use std::path::PathBuf;

use anyhow::{bail, Context as _};
use clap::{Args, ValueEnum};
use pallet_formats::helm::values::{merge_values, parse_values_document};
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
    /// A kustomization (DIR is the directory of its kustomization.yaml).
    Kustomize,
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
    /// registry-v1 settings for a local tree: a YAML file holding what `config.registryV1` holds
    /// (`watchNamespace`, `certificateProvider`, `deploymentConfig`). `--watch-namespace` wins
    /// over its `watchNamespace`.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Helm release name for a local tree.
    #[arg(long, default_value = "release")]
    pub release_name: String,
    /// Helm values file (YAML), repeatable: merged in order, later wins (`helm -f`). With
    /// `-f BD.yaml` they stand in for the BundleDeployment's `config.helm.valuesFrom` (which
    /// needs a cluster) and go under its inline `values`.
    #[arg(long, value_name = "FILE")]
    pub values: Vec<PathBuf>,
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
    /// With `--format kustomize`: the bundle tree the kustomization may read from (its bases,
    /// components and files must be inside it, as in a BundleDeployment's tree). Default: the
    /// current directory when DIR is inside it, else DIR.
    #[arg(long, value_name = "TREE", requires = "format")]
    pub root: Option<PathBuf>,
    /// A variable for the BundleDeployment's `substitute` processors (`NAME=VALUE`,
    /// repeatable), standing in for their `varsFrom` objects (which need a cluster); the
    /// processor's own `vars` win.
    #[arg(long = "var", value_name = "NAME=VALUE", value_parser = parse_var)]
    pub vars: Vec<(String, String)>,
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

/// Said on stderr when `-f` renders a helm chart: its generated values are not the agent's.
pub const GENERATED_VALUES_NOTICE: &str = "note: values the chart generates (randAlphaNum, \
uuidv4, genCA, genPrivateKey, bcrypt salts, ...) are not the ones the agent generates: the agent \
derives them from a secret key it keeps in the cluster for each BundleDeployment";

/// Said on stderr when a helm chart renders offline: its `now` is the current time, where the
/// agent renders with the time the revision was first rendered.
pub fn now_notice(now: i64) -> String {
    let at =
        crate::reconcile::render_time::as_time(now).map_or(now.to_string(), |t| t.0.to_string());
    format!(
        "note: the chart's `now` is the current time, {at}; the agent renders with the time the \
         revision was first rendered (status.revisions[].renderedAt), the same for every render \
         of the same spec and sources"
    )
}

/// Runs `pallet render`.
pub fn run(args: RenderArgs) -> anyhow::Result<()> {
    let default_kube_version = args.kube_version.is_none();
    render(args).map_err(|e| {
        // helm's own message, which does not say that the version is only render's default.
        if default_kube_version
            && format!("{e:#}").contains("which is incompatible with Kubernetes")
        {
            e.context(
                "the chart's kubeVersion does not accept render's default Kubernetes version (helm \
                 template's, v1.20.0): name the cluster's with --kube-version",
            )
        } else {
            e
        }
    })
}

fn render(args: RenderArgs) -> anyhow::Result<()> {
    let capabilities = capabilities(&args)?;
    let rendered = match (&args.file, args.format, &args.dir) {
        (Some(file), _, _) => {
            let text = read_manifest(file)?;
            let (_, bd) =
                crate::preview::parse_bundle_deployment(&text, &file.display().to_string())?;
            let values = bd_values(&bd, &read_values_files(&args.values)?)?;
            let now = crate::reconcile::render_time::current();
            if bd.spec.format == crate::api::BundleFormat::Helm {
                eprintln!("{GENERATED_VALUES_NOTICE}");
                eprintln!("{}", now_notice(now));
            }
            let fetcher = args.fetch.fetcher()?;
            let vars = args.vars.iter().cloned().collect();
            let processors = crate::preview::offline_processors(&bd, &vars);
            let exec_policy = args.fetch.function_policy();
            let policy = crate::reconcile::fetch::SecretPolicy::default();
            let (rendered, traces) = super::block_on(async move {
                let progress = Progress::stderr();
                let fetched =
                    crate::preview::fetch_sources(None, &fetcher, &bd, &|e| progress.event(e))
                        .await?;
                drop(progress);
                let caller = crate::reconcile::functions::FunctionCaller {
                    client: None,
                    secret_policy: &policy,
                    exec_policy: &exec_policy,
                    egress: fetcher.options().egress,
                };
                Ok(crate::preview::assemble_and_render(
                    &fetcher,
                    &bd,
                    &fetched,
                    capabilities,
                    values,
                    &processors,
                    &caller,
                    None,
                    now,
                )
                .await?)
            })?;
            print_traces(&traces);
            rendered
        }
        (None, Some(format), Some(dir)) => {
            let mut values = serde_json::Map::new();
            for file in read_values_files(&args.values)? {
                merge_values(&mut values, &file);
            }
            let values = serde_json::Value::Object(values);
            let registry_v1 = read_registry_v1_config(args.config.as_deref())?;
            let config = RenderConfig {
                install_namespace: args.install_namespace.clone().unwrap_or_default(),
                watch_namespace: args
                    .watch_namespace
                    .clone()
                    .unwrap_or_else(|| registry_v1.watch_namespace.clone()),
                helm: HelmOptions {
                    release_name: args.release_name.clone(),
                    values,
                    capabilities,
                    // No BundleDeployment here: `now` is the current time, the random seed 0.
                    now: crate::reconcile::render_time::current(),
                    ..HelmOptions::default()
                },
                registry_v1: crate::reconcile::render::registry_v1_options(&registry_v1),
                kustomize: Default::default(),
                budgets: Default::default(),
            };
            let format = match format {
                FormatArg::Plain => Format::Plain,
                FormatArg::Helm => Format::Helm,
                FormatArg::RegistryV1 => Format::RegistryV1,
                FormatArg::Kustomize => Format::Kustomize,
            };
            if format == Format::Kustomize {
                let (tree, path) = kustomize_root(dir, args.root.as_deref())?;
                let config = RenderConfig {
                    kustomize: pallet_formats::KustomizeOptions { path },
                    ..config
                };
                crate::preview::render_dir(format, &tree, &config)?
            } else {
                let rendered = crate::preview::render_dir(format, dir, &config)?;
                if format == Format::Helm {
                    eprintln!("{}", now_notice(config.helm.now));
                }
                rendered
            }
        }
        _ => bail!("give -f BD.yaml, or --format FORMAT DIR"),
    };
    super::write_stdout(&format_rendered(&rendered, args.output)?)?;
    // The process ends next: freeing a big render's objects one by one would only cost time.
    std::mem::forget(rendered);
    Ok(())
}

/// The tree and the kustomization's path inside it for `--format kustomize DIR`.
fn kustomize_root(
    dir: &std::path::Path,
    root: Option<&std::path::Path>,
) -> anyhow::Result<(PathBuf, String)> {
    let dir = dir
        .canonicalize()
        .with_context(|| format!("reading {}", dir.display()))?;
    let root = match root {
        Some(root) => root
            .canonicalize()
            .with_context(|| format!("reading {}", root.display()))?,
        None => {
            let current = std::env::current_dir()?.canonicalize()?;
            if dir.starts_with(&current) {
                current
            } else {
                dir.clone()
            }
        }
    };
    let path = dir.strip_prefix(&root).map_err(|_| {
        anyhow::anyhow!(
            "{} is not inside the tree {}",
            dir.display(),
            root.display()
        )
    })?;
    Ok((root, path.to_string_lossy().into_owned()))
}

/// `NAME=VALUE` of `--var`.
fn parse_var(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not NAME=VALUE"))?;
    if !pallet_formats::processors::substitute::valid_name(name) {
        return Err(format!(
            "{name:?} is not a variable name (letters, digits and _, not starting with a digit)"
        ));
    }
    Ok((name.to_string(), value.to_string()))
}

/// What each processor did, on stderr (stdout holds the objects).
fn print_traces(traces: &[pallet_formats::processors::ProcessorTrace]) {
    for line in trace_lines(traces) {
        eprintln!("{}", super::terminal::escape(&line));
    }
}

/// One line per processor (what it changed, added and removed), then its notes.
pub(super) fn trace_lines(traces: &[pallet_formats::processors::ProcessorTrace]) -> Vec<String> {
    let mut lines = Vec::new();
    for trace in traces {
        let mut parts = Vec::new();
        for (what, list) in [
            ("changed", &trace.changed),
            ("added", &trace.added),
            ("removed", &trace.removed),
        ] {
            if !list.is_empty() {
                parts.push(format!("{what} {}", list.join(", ")));
            }
        }
        if parts.is_empty() {
            parts.push("no change".to_string());
        }
        lines.push(format!(
            "processor {}: {}",
            trace.processor,
            parts.join("; ")
        ));
        for note in &trace.notes {
            lines.push(format!("processor {}: {note}", trace.processor));
        }
    }
    lines
}

/// `--config FILE` as `config.registryV1` (the API's defaults when no file is given).
fn read_registry_v1_config(
    path: Option<&std::path::Path>,
) -> anyhow::Result<crate::api::RegistryV1Config> {
    let Some(path) = path else {
        return Ok(crate::api::RegistryV1Config::default());
    };
    let text = read_manifest(path)?;
    if text.trim().is_empty() {
        return Ok(crate::api::RegistryV1Config::default());
    }
    serde_saphyr::from_str(&text).map_err(|why| {
        anyhow::anyhow!(
            "--config {}: not a config.registryV1: {why}",
            path.display()
        )
    })
}

/// Each `--values` file as a mapping of values (helm's YAML reading).
fn read_values_files(
    paths: &[PathBuf],
) -> anyhow::Result<Vec<serde_json::Map<String, serde_json::Value>>> {
    paths
        .iter()
        .map(|path| {
            parse_values_document(&read_manifest(path)?)
                .map_err(|why| anyhow::anyhow!("--values {}: {why}", path.display()))
        })
        .collect()
}

/// The user values for a BundleDeployment rendered without a cluster: the `--values` files in
/// place of `valuesFrom`, then its inline `values`. `None` when it names no `valuesFrom` and no
/// files are given (the inline values alone). A required `valuesFrom` reference without
/// `--values` is an error: leaving it out would render something the agent never would.
fn bd_values(
    bd: &crate::api::BundleDeployment,
    files: &[serde_json::Map<String, serde_json::Value>],
) -> anyhow::Result<Option<serde_json::Value>> {
    let helm = bd.spec.config.as_ref().and_then(|c| c.helm.as_ref());
    let references = helm.map(|h| h.values_from.as_slice()).unwrap_or_default();
    if files.is_empty() {
        if let Some(required) = references.iter().find(|r| !r.optional) {
            bail!(
                "config.helm.valuesFrom names {:?} {}: `pallet render` reads no cluster; give \
                 its values with --values FILE (repeatable), or use `pallet plan`, which reads it",
                required.kind,
                required.name
            );
        }
        if references.is_empty() {
            return Ok(None);
        }
    }
    let mut values = serde_json::Map::new();
    for file in files {
        merge_values(&mut values, file);
    }
    match helm.and_then(|h| h.values.as_ref()) {
        Some(serde_json::Value::Object(inline)) => merge_values(&mut values, inline),
        Some(serde_json::Value::Null) | None => {}
        Some(_) => bail!("config.helm.values must be a mapping"),
    }
    Ok(Some(serde_json::Value::Object(values)))
}

/// The rendered objects as YAML documents or a JSON List.
pub fn format_rendered(rendered: &Rendered, output: RenderOutput) -> anyhow::Result<String> {
    Ok(match output {
        RenderOutput::Json => {
            let objects: Vec<serde_json::Value> = rendered
                .objects
                .iter()
                .map(|o| serde_json::Value::Object(o.object.body().clone()))
                .collect();
            let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
            format!("{}\n", serde_json::to_string_pretty(&list)?)
        }
        RenderOutput::Yaml => yaml_documents(&rendered.objects)?,
    })
}

/// The objects as YAML documents, each after a `---` line. Each object is written from the
/// rendered one, not from a copy of it. Objects are independent, so a big render's (thousands
/// of lines of CRDs) are written on up to four threads, each taking the next batch of objects
/// until none are left (CRDs are much larger than the rest), then joined in order.
fn yaml_documents(objects: &[pallet_formats::RenderedObject]) -> anyhow::Result<String> {
    const BATCH: usize = 8;
    let write_batch = |batch: &[pallet_formats::RenderedObject]| -> anyhow::Result<String> {
        let mut out = String::new();
        for object in batch {
            out.push_str("---\n");
            out.push_str(&super::to_yaml(object.object.body())?);
        }
        Ok(out)
    };
    let batches: Vec<&[pallet_formats::RenderedObject]> = objects.chunks(BATCH).collect();
    // A few objects are not worth a thread.
    pallet_formats::parallel::map_in_parallel(
        &batches,
        |batch| batch.len(),
        8 * BATCH,
        |batch| write_batch(batch),
        || Err(anyhow::anyhow!("writing the objects failed")),
    )
    .into_iter()
    .collect()
}
