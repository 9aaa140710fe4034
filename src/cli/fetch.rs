//! `pallet fetch -f bd.yaml DIR`: fetch a BundleDeployment's sources into DIR and print the
//! immutable ref each resolved to, without a controller (Secrets, when named, are read from the
//! cluster as the identity the file names, see [`super::acting`]).

use std::path::PathBuf;

use anyhow::{bail, Context as _};
use clap::Args;

use super::progress::Progress;
use crate::source::assemble;

/// Flags of `pallet fetch`.
#[derive(Args, Debug)]
pub struct FetchArgs {
    /// The BundleDeployment manifest (YAML or JSON; `-` for stdin).
    #[arg(short = 'f', long = "filename")]
    pub file: PathBuf,
    /// Directory to assemble the bundle tree into (created; must be empty if it exists).
    pub dir: PathBuf,
    /// Cluster, used only to read Secrets the sources name.
    #[command(flatten)]
    pub kube: super::KubeArgs,
    /// The agent's namespace: where Secrets whose reference names no namespace are read;
    /// `--namespace` is an older spelling
    #[arg(
        long = "agent-namespace",
        alias = "namespace",
        value_name = "NS",
        default_value = "pallet-system"
    )]
    pub namespace: String,
    /// Source cache directory.
    #[arg(long, env = "PALLET_FETCH_CACHE")]
    pub cache_dir: Option<PathBuf>,
    /// Registries (host:port) spoken to over plain HTTP (repeatable).
    #[arg(long = "plain-http-registry")]
    pub plain_http_registries: Vec<String>,
    /// Addresses and locations sources may name.
    #[command(flatten)]
    pub egress: super::EgressFlags,
    /// What one source may unpack.
    #[command(flatten)]
    pub unpack: super::UnpackFlags,
}

/// Runs `pallet fetch`.
pub fn run(args: FetchArgs) -> anyhow::Result<()> {
    let text = super::render::read_manifest(&args.file)?;
    let (_, bd) = crate::preview::parse_bundle_deployment(&text, &args.file.display().to_string())?;
    if args.dir.exists() && std::fs::read_dir(&args.dir)?.next().is_some() {
        bail!("{} is not empty", args.dir.display());
    }
    let fetcher = super::FetchFlags {
        cache_dir: args.cache_dir.clone(),
        plain_http_registries: args.plain_http_registries.clone(),
        allow_function_exec: Vec::new(),
        allow_function_host: Vec::new(),
        egress: args.egress.clone(),
        unpack: args.unpack.clone(),
    }
    .fetcher()?;
    super::block_on(async move {
        let needs_secrets = bd
            .spec
            .sources
            .iter()
            .any(|s| crate::preview::named_secret(s).is_some());
        // Only a source naming a Secret needs the cluster, read as the identity the file names
        // (see super::acting).
        let acting = if needs_secrets {
            let context = "a source names a Secret: a cluster is needed to read it (--kubeconfig)";
            let config = args.kube.config().await.context(context)?;
            let client = kube::Client::try_from(config.clone()).context(context)?;
            let what = args.file.display().to_string();
            Some(super::acting::acting_for(&config, &client, &bd, &what, &args.namespace).await?)
        } else {
            None
        };
        let progress = Progress::stderr();
        let fetched = crate::preview::fetch_sources(
            acting.as_ref().map(|a| (&a.client, &a.policy)),
            &fetcher,
            &bd,
            &|e| progress.event(e),
        )
        .await?;
        drop(progress);
        assemble(&fetched, &args.dir)?;
        for source in &fetched {
            let destination = if source.destination.is_empty() {
                "."
            } else {
                &source.destination
            };
            tprintln!("{}\t{}\t{}", source.label(), source.resolved, destination);
        }
        Ok(())
    })
}

pub(super) fn dirs_cache() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("pallet")
}
