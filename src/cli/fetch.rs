//! `pallet fetch -f bd.yaml DIR`: fetch a BundleDeployment's sources into DIR and print the
//! immutable ref each resolved to, without a controller (Secrets, when named, are read from the
//! cluster under the same namespace rule as the agent's).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context as _};
use clap::Args;
use kube::{Client, Config};

use crate::api::BundleDeployment;
use crate::reconcile::fetch::{fetch_sources, SecretPolicy};
use crate::source::{assemble, Cache, FetchOptions, Fetcher};

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
    /// Namespace of Secrets whose reference names none (the agent's namespace).
    #[arg(long, default_value = "pallet-system")]
    pub namespace: String,
    /// Source cache directory.
    #[arg(long, env = "PALLET_FETCH_CACHE")]
    pub cache_dir: Option<PathBuf>,
    /// Registries (host:port) spoken to over plain HTTP (repeatable).
    #[arg(long = "plain-http-registry")]
    pub plain_http_registries: Vec<String>,
}

/// Runs `pallet fetch`.
pub fn run(args: FetchArgs) -> anyhow::Result<()> {
    let text = if args.file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading stdin")?
    } else {
        std::fs::read_to_string(&args.file)
            .with_context(|| format!("reading {}", args.file.display()))?
    };
    let value: serde_json::Value = serde_saphyr::from_str(&text)
        .with_context(|| format!("{} is not valid YAML", args.file.display()))?;
    let kind = value
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or("document without a kind");
    if kind != "BundleDeployment" {
        bail!(
            "{} is a {kind}, not a BundleDeployment",
            args.file.display()
        );
    }
    let bd: BundleDeployment = serde_json::from_value(value)
        .with_context(|| format!("{} is not a valid BundleDeployment", args.file.display()))?;
    if args.dir.exists() && std::fs::read_dir(&args.dir)?.next().is_some() {
        bail!("{} is not empty", args.dir.display());
    }
    let cache_dir = match args.cache_dir.clone() {
        Some(dir) => dir,
        None => dirs_cache().join("fetch"),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        crate::tls::install_crypto_provider();
        let needs_secrets = bd.spec.sources.iter().any(|s| {
            s.image
                .as_ref()
                .is_some_and(|i| i.auth.is_some() || i.ca_secret.is_some())
                || s.git.as_ref().is_some_and(|g| g.auth.is_some())
                || s.http.as_ref().is_some_and(|h| h.auth.is_some())
        });
        let client = if needs_secrets {
            args.kube
                .client()
                .await
                .context("a source names a Secret: a cluster is needed to read it (--kubeconfig)")?
        } else {
            // No Secrets to read: a client is never used, but the fetch phase takes one.
            Client::try_from(Config::new("http://127.0.0.1:1".parse()?))?
        };
        let cache = Cache::open(&cache_dir, 4 * 1024 * 1024 * 1024)
            .with_context(|| format!("opening the cache at {}", cache_dir.display()))?;
        let options = FetchOptions {
            plain_http_registries: args.plain_http_registries.clone(),
            ..Default::default()
        };
        let fetcher = Fetcher::new(Arc::new(cache), options);
        let policy = SecretPolicy {
            agent_namespace: args.namespace.clone(),
            allowed_namespaces: Vec::new(),
        };
        let fetched = fetch_sources(&client, &fetcher, &policy, &bd).await?;
        assemble(&fetched, &args.dir)?;
        for source in &fetched {
            let destination = if source.destination.is_empty() {
                "."
            } else {
                &source.destination
            };
            println!("{}\t{}\t{}", source.label(), source.resolved, destination);
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
