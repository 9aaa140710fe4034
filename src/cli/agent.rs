//! `pallet agent`: the controller process.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::changelog::ChangeLog;
use crate::reconcile::fetch::SecretPolicy;
use crate::reconcile::owned::OwnedWatches;
use crate::reconcile::{controller, Context};
use crate::source::{Cache, FetchOptions, Fetcher};

/// Flags of `pallet agent`.
#[derive(Args, Debug)]
pub struct AgentArgs {
    /// Kubeconfig file; default: in-cluster config, else $KUBECONFIG or ~/.kube/config.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use.
    #[arg(long)]
    pub context: Option<String>,
    /// The agent's own namespace: default namespace of source Secrets.
    #[arg(long, env = "POD_NAMESPACE", default_value = "pallet-system")]
    pub namespace: String,
    /// Other namespaces any BundleDeployment may read source Secrets from (repeatable).
    #[arg(long = "allow-secret-namespace")]
    pub allow_secret_namespaces: Vec<String>,
    /// Directory of the source cache (content-addressed, survives restarts).
    #[arg(long, env = "PALLET_AGENT_CACHE", default_value = "/var/cache/pallet")]
    pub cache_dir: PathBuf,
    /// Upper bound of the source cache, in MiB; least recently used entries are evicted.
    #[arg(long, default_value_t = 2048)]
    pub cache_max_mib: u64,
    /// BundleDeployments reconciled at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: u16,
    /// Objects applied at once within a stage.
    #[arg(long, default_value_t = 8)]
    pub apply_parallelism: usize,
    /// Seconds between reconciles of an unchanged BundleDeployment (drift checks, floating refs).
    #[arg(long, default_value_t = controller::DEFAULT_REQUEUE.as_secs())]
    pub requeue_seconds: u64,
    /// Registries (host:port) spoken to over plain HTTP (repeatable; local test registries only).
    #[arg(long = "plain-http-registry")]
    pub plain_http_registries: Vec<String>,
    /// Only reconcile BundleDeployments matching this label selector (to shard them across
    /// agents, or to confine a test's agent to its own objects).
    #[arg(long, short = 'l')]
    pub selector: Option<String>,
    /// Also append the change log (one JSON line per write; always printed on stdout) to FILE.
    #[arg(long, value_name = "FILE")]
    pub change_log: Option<PathBuf>,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,
}

/// Log output format.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Plain,
    /// One JSON object per line.
    Json,
}

/// Runs the agent until SIGINT or SIGTERM.
pub fn run(args: AgentArgs) -> anyhow::Result<()> {
    init_logging(args.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        crate::tls::install_crypto_provider();
        let config = client_config(&args).await?;
        let client = Client::try_from(config.clone()).context("building the Kubernetes client")?;
        let cache = Cache::open(&args.cache_dir, args.cache_max_mib * 1024 * 1024)
            .with_context(|| format!("opening the source cache at {}", args.cache_dir.display()))?;
        let options = FetchOptions { plain_http_registries: args.plain_http_registries.clone(), ..Default::default() };
        let fetcher = Fetcher::new(Arc::new(cache), options);
        let policy = SecretPolicy {
            agent_namespace: args.namespace.clone(),
            allowed_namespaces: args.allow_secret_namespaces.clone(),
        };
        let changelog = ChangeLog::open("pallet", true, args.change_log.as_deref())
            .with_context(|| format!("opening the change log {:?}", args.change_log))?;
        let (owned_tx, owned_rx) = tokio::sync::mpsc::unbounded_channel();
        let owned = OwnedWatches::spawn(client.clone(), owned_tx);
        let ctx = Arc::new(Context::new(
            client,
            config,
            fetcher,
            policy,
            Duration::from_secs(args.requeue_seconds.max(1)),
            args.apply_parallelism.max(1),
            changelog,
            Some(owned),
        ));
        tracing::info!(namespace = %args.namespace, cache = %args.cache_dir.display(), "pallet agent starting");
        controller::run(ctx, args.concurrency.max(1), args.selector.as_deref(), owned_rx).await;
        tracing::info!("pallet agent stopped");
        Ok(())
    })
}

async fn client_config(args: &AgentArgs) -> anyhow::Result<Config> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Ok(Config::from_custom_kubeconfig(kubeconfig, &options).await?)
        }
        None => Ok(Config::infer().await?),
    }
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,kube=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Plain => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
