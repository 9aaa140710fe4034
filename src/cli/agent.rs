//! `pallet agent`: the controller process.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use kube::Config;

use crate::api::ServiceAccountReference;
use crate::changelog::ChangeLog;
use crate::leader::{self, Attempt, Elector, LeaseConfig};
use crate::metrics::METRICS;
use crate::reconcile::dependency_watch::DependencyWatches;
use crate::reconcile::fetch::SecretPolicy;
use crate::reconcile::owned::OwnedWatches;
use crate::reconcile::values_watch::ValuesWatches;
use crate::reconcile::workers::Workers;
use crate::reconcile::{controller, Context};
use crate::render_sandbox::{RenderSandbox, SandboxLimits};
use crate::shard::Scope;
use crate::source::{Cache, FetchOptions, Fetcher};

/// Flags of `pallet agent`.
#[derive(Args, Debug)]
pub struct AgentArgs {
    /// Kubeconfig file; default: in-cluster config, else $KUBECONFIG or ~/.kube/config.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use (looked up in --kubeconfig, else $KUBECONFIG or
    /// ~/.kube/config; an unknown one is an error).
    #[arg(long)]
    pub context: Option<String>,
    /// The agent's own namespace: default namespace of source Secrets.
    #[arg(long, env = "POD_NAMESPACE", default_value = "pallet-system")]
    pub namespace: String,
    /// Other namespaces any BundleDeployment may read source Secrets from (repeatable).
    #[arg(long = "allow-secret-namespace")]
    pub allow_secret_namespaces: Vec<String>,
    /// The ServiceAccount (NAMESPACE/NAME) a BundleDeployment naming no `spec.serviceAccount`
    /// acts as: its objects are written, and its Secrets checked, as that ServiceAccount instead
    /// of the agent.
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = parse_service_account, conflicts_with = "require_service_account")]
    pub default_service_account: Option<ServiceAccountReference>,
    /// Refuse every BundleDeployment that names no `spec.serviceAccount` (condition reason
    /// `ServiceAccountRequired`): nothing is ever installed as the agent itself.
    #[arg(long)]
    pub require_service_account: bool,
    /// Refuse every source without `verify` (condition Unpacked=False, reason
    /// `VerificationRequired`): nothing unsigned is ever installed.
    #[arg(long)]
    pub require_verification: bool,
    /// With --require-verification: a server (`host` or `host:port`, as the source names it)
    /// whose sources may go without `verify`, e.g. a local development registry (repeatable).
    #[arg(
        long = "allow-unverified-host",
        value_name = "HOST",
        requires = "require_verification"
    )]
    pub allow_unverified_hosts: Vec<String>,
    /// Directory of the source cache (content-addressed, survives restarts).
    #[arg(long, env = "PALLET_AGENT_CACHE", default_value = "/var/cache/pallet")]
    pub cache_dir: PathBuf,
    /// Upper bound of the source cache, in MiB; past it, least recently used entries are evicted
    /// down to 90% of it.
    #[arg(long, default_value_t = 2048)]
    pub cache_max_mib: u64,
    /// Bytes all unpacks in progress may hold together in the cache's scratch space, in MiB; an
    /// unpack that would pass it stops and is retried (a transient LocalIO error). With
    /// --cache-max-mib it bounds what the cache volume holds: the defaults, 2048 + 768 MiB,
    /// leave 256 MiB of the Deployment's 3 GiB volume for downloads and assembled trees.
    #[arg(long, default_value_t = 768)]
    pub unpack_scratch_mib: u64,
    /// BundleDeployments reconciled at once: a number, or `auto` to adapt to what the API
    /// server accepts (from 4 up to `--max-concurrency`, halved when it throttles).
    #[arg(long, default_value = "auto", value_parser = parse_concurrency)]
    pub concurrency: Concurrency,
    /// Upper bound of `--concurrency auto`.
    #[arg(long, default_value_t = 32)]
    pub max_concurrency: u16,
    /// Objects applied at once within a stage.
    #[arg(long, default_value_t = 8)]
    pub apply_parallelism: usize,
    /// Time between reconciles of an unchanged BundleDeployment (drift checks, floating refs),
    /// as a Go duration (a bare number is seconds).
    #[arg(long, alias = "requeue-seconds", default_value = "5m", value_parser = crate::duration::parse_positive_arg)]
    pub requeue_interval: Duration,
    /// Source fetches run at once, apart from the reconcile workers (a slow source holds one of
    /// these, never a worker); at most half of them from one server.
    // 16, so that 8 may come from one registry: with 4 per server, a thousand bundles from one
    // registry waited for their fetches longer than for the API server.
    #[arg(long, default_value_t = 16)]
    pub fetch_concurrency: usize,
    /// What one revision may store (its snapshot, compressed), in MiB: a bigger render is
    /// refused before anything is stored or applied.
    #[arg(long, default_value_t = (crate::revision::DEFAULT_MAX_REVISION_BYTES >> 20) as u64)]
    pub max_revision_mib: u64,
    /// What every stored revision of one BundleDeployment may take together (compressed), in
    /// MiB, the revision being stored included: past it a new revision is refused
    /// (`SnapshotQuotaExceeded`) before anything is stored or applied.
    #[arg(long, default_value_t = crate::revision::quota::DEFAULT_PER_BUNDLE_BYTES >> 20)]
    pub snapshot_quota_per_bundle_mib: u64,
    /// What every stored revision Secret of the agent's namespace may take together
    /// (compressed), in MiB: past it a new revision is refused (`SnapshotQuotaExceeded`).
    #[arg(long, default_value_t = crate::revision::quota::DEFAULT_TOTAL_BYTES >> 20)]
    pub snapshot_quota_mib: u64,
    /// Validity of the certificates the BuiltIn provider issues for registry-v1 webhooks (CA
    /// and serving certificates; renewed when a third remains), as a Go duration. Default two
    /// years; a short one is for tests of renewal.
    #[arg(long, default_value = "17520h", value_parser = crate::duration::parse_positive_arg, hide = true)]
    pub webhook_cert_validity: Duration,
    /// What one source may unpack.
    #[command(flatten)]
    pub unpack: super::UnpackFlags,
    /// Deadline of one whole source fetch (connect, answer and body), as a Go duration. Unpack
    /// threads stop with it.
    #[arg(long, default_value = "2m", value_parser = crate::duration::parse_positive_arg)]
    pub fetch_timeout: Duration,
    /// How often a floating source without `pollInterval` is re-resolved, as a Go duration.
    #[arg(long, default_value = "5m", value_parser = crate::duration::parse_positive_arg)]
    pub default_poll_interval: Duration,
    /// Notification requests in flight at once (over all BundleDeployments and targets).
    #[arg(long, default_value_t = 8)]
    pub notification_concurrency: usize,
    /// Time limit of one notification request (connect, send, answer), as a Go duration.
    #[arg(long, default_value = "10s", value_parser = crate::duration::parse_positive_arg)]
    pub notification_timeout: Duration,
    /// A notification not delivered this long after its transition is given up (Failed), as a
    /// Go duration.
    #[arg(long, default_value = "10m", value_parser = crate::duration::parse_positive_arg)]
    pub notification_deadline: Duration,
    /// The longest wait between two attempts of a notification (the wait starts at 1s and
    /// doubles), as a Go duration.
    #[arg(long, default_value = "1m", value_parser = crate::duration::parse_positive_arg)]
    pub notification_retry_max: Duration,
    /// Count a `type: LoadBalancer` Service as healthy without an ingress address. For clusters
    /// with no load-balancer controller (kind, bare metal), where such a Service never gets one.
    #[arg(long)]
    pub load_balancer_address_optional: bool,
    /// Registries (host:port) spoken to over plain HTTP (repeatable; local test registries only).
    #[arg(long = "plain-http-registry")]
    pub plain_http_registries: Vec<String>,
    /// An executable a `function` processor may run (`function.exec`), by absolute path
    /// (repeatable). None by default: BundleDeployment authors cannot run programs in the
    /// agent's container unless its operator lists them here.
    #[arg(long = "allow-function-exec", value_name = "PATH", value_parser = parse_absolute_path)]
    pub allow_function_exec: Vec<PathBuf>,
    /// A host a `function` processor's `url` may name: `host`, `host:port` or `*.domain`
    /// (repeatable). None by default: BundleDeployment authors cannot make the agent POST
    /// their objects to cluster Services, node addresses or the API server unless its operator
    /// lists the function's host here. Loopback and link-local addresses stay refused unless
    /// allowed with --allow-loopback-egress or --allow-link-local-egress too.
    #[arg(long = "allow-function-host", value_name = "HOST")]
    pub allow_function_host: Vec<String>,
    /// The longest `timeout` a function processor may ask for, as a Go duration; a
    /// BundleDeployment asking for more is refused (InvalidProcessor) before anything is
    /// fetched.
    #[arg(long, default_value = "5m", value_parser = crate::duration::parse_positive_arg)]
    pub function_timeout_max: Duration,
    /// Wall-clock time the function calls of one render may take together, as a Go duration;
    /// past it the render stops with FunctionUnavailable and is tried again later.
    #[arg(long, default_value = "10m", value_parser = crate::duration::parse_positive_arg)]
    pub function_deadline: Duration,
    /// Function calls running at once, over all BundleDeployments. A call runs apart from the
    /// reconcile workers: a function that is slow to answer holds one of these, never a worker.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    pub function_concurrency: u16,
    /// Memory an `exec` function's process may allocate, in MiB (RLIMIT_DATA).
    #[arg(long, default_value_t = crate::reconcile::functions::DEFAULT_EXEC_MEMORY_MIB, value_parser = clap::value_parser!(u64).range(16..))]
    pub function_memory_mib: u64,
    /// CPU time an `exec` function's process may use, as a Go duration of whole seconds.
    #[arg(long, default_value = "60s", value_parser = crate::duration::parse_whole_seconds_arg)]
    pub function_cpu_time: Duration,
    /// Loopback, link-local and local-repository targets a BundleDeployment may name (all
    /// refused by default).
    #[command(flatten)]
    pub egress: super::EgressFlags,
    /// Only reconcile BundleDeployments matching this label selector (kubectl's syntax), e.g.
    /// `!sharding.fluxcd.io/key` for the main agent of a sharded install, or to confine a
    /// test's agent to its own objects. BundleDeploymentSets too: label a set and its
    /// `template.metadata.labels` alike.
    #[arg(long, short = 'l', env = "PALLET_SELECTOR")]
    pub selector: Option<String>,
    /// Only reconcile BundleDeployments labelled `sharding.fluxcd.io/key=KEY` (combined with
    /// --selector). The shard holds its own Lease (`pallet-agent-shard-KEY` unless --lease-name
    /// is given) and writes `status.agent` as `<pod>@KEY`.
    #[arg(long, value_name = "KEY")]
    pub shard: Option<String>,
    /// Also append the change log (one JSON line per write; always printed on stdout) to FILE.
    #[arg(long, value_name = "FILE")]
    pub change_log: Option<PathBuf>,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,
    /// Run the controller only while holding a Lease, so that one of several replicas writes.
    #[arg(long)]
    pub leader_elect: bool,
    /// Name of the leader-election Lease; default: `pallet-agent`, or `pallet-agent-shard-KEY`
    /// with --shard KEY.
    #[arg(long)]
    pub lease_name: Option<String>,
    /// Namespace of the leader-election Lease; default: the agent's namespace.
    #[arg(long)]
    pub lease_namespace: Option<String>,
    /// How long the Lease stays valid without renewal, in whole seconds (`15s`); the leader
    /// renews every third of it.
    #[arg(long, default_value = "15s", value_parser = crate::duration::parse_whole_seconds_arg)]
    pub lease_duration: Duration,
    /// Memory one render may allocate, in MiB. Every render runs in a child process of the
    /// agent, limited to this (RLIMIT_DATA); it times --render-concurrency, plus the agent's
    /// own memory, must fit the container's memory limit (2 × 256 MiB next to the agent fit
    /// deploy/'s 1Gi).
    #[arg(long, default_value_t = crate::render_sandbox::DEFAULT_MEMORY_MIB, value_parser = clap::value_parser!(u64).range(16..))]
    pub render_memory_mib: u64,
    /// CPU time one render may use, as a Go duration of whole seconds (a bare number is
    /// seconds; SIGXCPU ends it).
    #[arg(long, alias = "render-cpu-seconds", default_value = "20s", value_parser = crate::duration::parse_whole_seconds_arg)]
    pub render_cpu_time: Duration,
    /// Wall-clock time one render may take, as a Go duration; its process is killed past it.
    /// Waiting for a turn (--render-concurrency) does not count.
    #[arg(long, default_value = "60s", value_parser = crate::duration::parse_positive_arg)]
    pub render_timeout: Duration,
    /// Rendered text one render may produce, in MiB; also the largest string a template may
    /// build. The reply read back from a render's process is capped at twice this plus 1 MiB.
    #[arg(long, default_value_t = (pallet_formats::budget::DEFAULT_OUTPUT_BYTES >> 20) as u64, value_parser = clap::value_parser!(u64).range(1..4096))]
    pub render_output_mib: u64,
    /// Steps one render may take: template function calls, loop iterations and template calls
    /// together (kube-prometheus-stack, the largest chart of the real-world corpus, takes under
    /// 9,000).
    #[arg(long, default_value_t = pallet_formats::budget::DEFAULT_STEPS, value_parser = clap::value_parser!(u64).range(1..))]
    pub render_steps: u64,
    /// Renders running at once, each in its own process; more wait for a turn.
    #[arg(long, default_value_t = crate::render_sandbox::DEFAULT_CONCURRENCY as u16, value_parser = clap::value_parser!(u16).range(1..))]
    pub render_concurrency: u16,
    /// Objects one helm `lookup` may return (a list is read in pages of 50); more fails the
    /// render (LookupFailed) without the rest being read.
    #[arg(long, default_value_t = crate::reconcile::lookups::LookupLimits::DEFAULT.call_objects, value_parser = clap::value_parser!(u64).range(1..))]
    pub lookup_max_objects: u64,
    /// What one helm `lookup` may return, in MiB of JSON; more fails the render (LookupFailed).
    #[arg(long, default_value_t = crate::reconcile::lookups::LookupLimits::DEFAULT.call_bytes >> 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub lookup_max_mib: u64,
    /// Objects all the helm `lookup`s of one render may return together.
    #[arg(long, default_value_t = crate::reconcile::lookups::LookupLimits::DEFAULT.render_objects, value_parser = clap::value_parser!(u64).range(1..))]
    pub lookup_render_max_objects: u64,
    /// What all the helm `lookup`s of one render may return together, in MiB of JSON (the
    /// answers are the render's input, within --render-memory-mib).
    #[arg(long, default_value_t = crate::reconcile::lookups::LookupLimits::DEFAULT.render_bytes >> 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub lookup_render_max_mib: u64,
    /// What a Helm release record read for a takeover (`spec.takeover`) may decode to, in MiB
    /// of JSON; it may also be at most 200 times its stored size (past 4 MiB). A record over
    /// it stops the takeover before anything is applied (TakeoverFailed).
    #[arg(long, default_value_t = crate::reconcile::takeover::RecordBudget::DEFAULT.max_bytes >> 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub takeover_record_max_mib: u64,
    /// Address (ip:port) of the /metrics, /healthz and /readyz server; "" disables it.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub metrics_addr: String,
    /// Address (ip:port) of the notification receiver (`POST /hook/<provider>`: github,
    /// gitlab, gitea, harbor, registry, generic). Off by default ("").
    #[arg(long, default_value = "")]
    pub receiver_addr: String,
    /// The Secret in the agent's namespace holding the receiver's tokens: key `<provider>`, else
    /// `token`. A provider without one refuses every request.
    #[arg(long, default_value = "pallet-receiver")]
    pub receiver_secret: String,
    /// Authenticated requests a second the receiver answers from each sender (provider and
    /// peer address; bursts of twice that); more are answered 429. Requests are authenticated
    /// first: those without a valid credential never spend a sender's allowance.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub receiver_requests_per_second: u32,
    /// Run no BundleDeploymentSet controller in this agent. In a sharded install, keep it in
    /// one agent only (the main one): the sets are the whole cluster's.
    #[arg(long)]
    pub no_bundle_deployment_sets: bool,
    /// How long one request to a remote cluster (`spec.kubeConfig`) may take, as a Go
    /// duration; past it the request fails, and a cluster whose requests fail this way is
    /// reported down (its bundles only) and probed with backoff. Watches stay open.
    #[arg(long, default_value = "30s", value_parser = crate::duration::parse_positive_arg)]
    pub cluster_request_timeout: Duration,
    /// How long connecting to a remote cluster may take, as a Go duration.
    #[arg(long, default_value = "5s", value_parser = crate::duration::parse_positive_arg)]
    pub cluster_connect_timeout: Duration,
    /// Bytes of object bodies the watches of one remote cluster keep, in MiB; past it objects
    /// are read from the cluster when needed (`pallet_cluster_watch_cache_bytes` shows use).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..65536))]
    pub cluster_cache_mib: u64,
    /// Address (ip:port) of the web view; off by default (""). Each request is authenticated
    /// with a Kubernetes bearer token (TokenReview), and everything it shows or does is done as
    /// that user (impersonation); read-only unless --ui-actions.
    #[arg(long, default_value = "")]
    pub ui_address: String,
    /// Offer the view's actions (pause, resume, rollback, retry, reconcile, tests), each done
    /// as the signed-in user. Needs the agent to impersonate users and groups
    /// (deploy/components/web-view).
    #[arg(long, requires = "ui_address")]
    pub ui_actions: bool,
}

/// What a takeover's release record may decode to, as the flags say.
fn record_budget(args: &AgentArgs) -> crate::reconcile::takeover::RecordBudget {
    crate::reconcile::takeover::RecordBudget {
        max_bytes: args.takeover_record_max_mib << 20,
        ..Default::default()
    }
}

/// What a chart's lookups may read, as the flags say.
fn lookup_limits(args: &AgentArgs) -> crate::reconcile::lookups::LookupLimits {
    crate::reconcile::lookups::LookupLimits {
        call_objects: args.lookup_max_objects,
        call_bytes: args.lookup_max_mib << 20,
        render_objects: args.lookup_render_max_objects,
        render_bytes: args.lookup_render_max_mib << 20,
    }
}

/// Change-log lines the agent keeps in memory for its web view.
const UI_CHANGE_LOG_LINES: usize = 5000;

/// `--default-service-account NAMESPACE/NAME`.
fn parse_service_account(text: &str) -> Result<ServiceAccountReference, String> {
    let invalid = || format!("{text:?} is not NAMESPACE/NAME (e.g. pallet-system/installer)");
    let (namespace, name) = text.split_once('/').ok_or_else(invalid)?;
    let label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    let subdomain = |s: &str| s.len() <= 253 && s.split('.').all(label);
    if !label(namespace) || !subdomain(name) {
        return Err(invalid());
    }
    Ok(ServiceAccountReference {
        namespace: namespace.to_string(),
        name: name.to_string(),
    })
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
    // Refused before anything starts: a selector the API server would refuse at every watch.
    let scope = Scope::new(args.selector.as_deref(), args.shard.as_deref())?;
    METRICS.set_shard(scope.shard().unwrap_or(""));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        crate::tls::install_crypto_provider();
        let config = client_config(&args).await?;
        let client = crate::client_metrics::counted_client(config.clone())
            .context("building the Kubernetes client")?;
        let fetcher = source_fetcher(&args)?;
        let policy = secret_policy(&args);
        let mut changelog = ChangeLog::open("pallet", true, args.change_log.as_deref())
            .with_context(|| format!("opening the change log {:?}", args.change_log))?;
        if !args.ui_address.is_empty() {
            changelog = changelog.keep_recent(UI_CHANGE_LOG_LINES);
        }
        // Health first: a standby must answer its probes while it waits for the Lease.
        if !args.metrics_addr.is_empty() {
            let bound = crate::metrics::serve(&args.metrics_addr).await?;
            tracing::info!(address = %bound, "metrics server listening");
        }
        // Every replica serves the view (it only reads, and acts as its users), not only the
        // leader.
        serve_web_view(&args, &changelog, &client, &config).await?;
        let mut elector = if args.leader_elect {
            let config = LeaseConfig {
                name: scope.lease_name(args.lease_name.as_deref()),
                namespace: args.lease_namespace.clone().unwrap_or_else(|| args.namespace.clone()),
                identity: scope.identity(&leader::identity()),
                duration: args.lease_duration,
            };
            let mut elector = Elector::new(client.clone(), config);
            if !wait_for_leadership(&mut elector).await {
                tracing::info!("pallet agent stopped before leading");
                return Ok(());
            }
            Some(elector)
        } else {
            METRICS.set_leader(true);
            None
        };
        // Nothing below runs (and nothing writes) before this process leads.
        let renewer = elector.as_ref().map(|e| {
            tokio::spawn(keep_renewing(Elector::new(client.clone(), e.config().clone())))
        });
        let (owned_tx, owned_rx) = tokio::sync::mpsc::unbounded_channel();
        let fetch_done = owned_tx.clone();
        let owned = OwnedWatches::spawn(client.clone(), owned_tx.clone());
        // Edits of valuesFrom objects reach the controller on the same channel.
        let receiver_trigger = owned_tx.clone();
        let values_watches = ValuesWatches::spawn(client.clone(), owned_tx.clone());
        // And what a remote cluster tells: it went down, came back, its credentials changed, or
        // an object of a bundle changed there.
        let remotes = crate::clusters::ClusterRegistry::new(
            client.clone(),
            cluster_settings(&args),
            Some(owned_tx.clone()),
        );
        // So do changes of what dependsOn names.
        let dependency_watches = DependencyWatches::spawn(client.clone(), owned_tx);
        let ctx = Arc::new(Context::new(
            client,
            config,
            fetcher,
            policy,
            args.requeue_interval,
            args.apply_parallelism.max(1),
            changelog,
            Some(owned),
        )
        .with_health_options(crate::health::HealthOptions {
            load_balancer_needs_ingress: !args.load_balancer_address_optional,
        })
        .with_default_poll_interval(args.default_poll_interval)
        .with_max_revision_bytes((args.max_revision_mib.max(1) << 20) as usize)
        .with_snapshot_quota(crate::revision::quota::SnapshotQuota {
            per_bundle: args.snapshot_quota_per_bundle_mib.max(1) << 20,
            total: args.snapshot_quota_mib.max(1) << 20,
        })
        .with_fetch_pool(args.fetch_concurrency.max(1), fetch_done.clone())
        .with_function_calls(args.function_concurrency.into(), args.function_deadline, fetch_done.clone())
        .with_probe_trigger(fetch_done)
        .with_values_watches(values_watches)
        .with_dependency_watches(dependency_watches)
        .with_cluster_registry(remotes)
        .with_function_policy(function_policy(&args))
        .with_webhook_cert_validity(args.webhook_cert_validity)
        .with_read_limits(record_budget(&args), lookup_limits(&args))
        .with_require_service_account(args.require_service_account)
        .with_verification_policy(crate::reconcile::context::VerificationPolicy {
            require: args.require_verification,
            unverified_hosts: args.allow_unverified_hosts.clone(),
        })
        .with_render_sandbox(RenderSandbox::new(sandbox_limits(&args)), render_budgets(&args))
        .with_workers(match args.concurrency {
            Concurrency::Fixed(n) => Workers::fixed(n.into()),
            Concurrency::Auto => Workers::adaptive(4, 1, args.max_concurrency.max(1).into()),
        })
        .with_scope(scope)
        .with_notification_settings(crate::notify::Settings {
            concurrency: args.notification_concurrency.max(1),
            timeout: args.notification_timeout,
            deadline: args.notification_deadline,
            retry_max: args.notification_retry_max,
            egress: args.egress.policy(),
            ..Default::default()
        }));
        tracing::info!(
            namespace = %args.namespace,
            cache = %args.cache_dir.display(),
            shard = ctx.cluster.scope.shard().unwrap_or(""),
            selector = ctx.cluster.scope.watch_selector().unwrap_or_default(),
            identity = %ctx.cluster.identity,
            "pallet agent starting"
        );
        if !args.receiver_addr.is_empty() {
            let settings = crate::receiver::Settings {
                secret: args.receiver_secret.clone(),
                namespace: args.namespace.clone(),
                requests_per_second: args.receiver_requests_per_second,
            };
            let receiver = crate::receiver::Receiver::new(ctx.clone(), receiver_trigger, settings);
            let bound = receiver.serve(&args.receiver_addr).await?;
            tracing::info!(address = %bound, secret = %args.receiver_secret, "notification receiver listening");
        }
        // The BundleDeploymentSet controller acts through the API only; it stops with the
        // BundleDeployment controller.
        let sets = (!args.no_bundle_deployment_sets).then(|| {
            tokio::spawn(crate::fleet::run(
                ctx.cluster.client.clone(),
                args.namespace.clone(),
                ctx.cluster.scope.watch_selector(),
                std::future::pending(),
            ))
        });
        controller::run(ctx, owned_rx).await;
        if let Some(sets) = sets {
            sets.abort();
        }
        // The controller has finished its in-flight reconciles: stop renewing, then hand the
        // Lease over at once instead of letting the next leader wait for it to expire.
        step_down(renewer, elector.as_mut()).await;
        tracing::info!("pallet agent stopped");
        Ok(())
    })
}

/// Where Secrets may be read from, and whom the agent acts as by default, from its flags.
fn secret_policy(args: &AgentArgs) -> SecretPolicy {
    SecretPolicy {
        agent_namespace: args.namespace.clone(),
        allowed_namespaces: args.allow_secret_namespaces.clone(),
        default_service_account: args.default_service_account.clone(),
        reads_as_service_account: false,
    }
}

/// The source cache and fetcher, from the agent's flags.
fn source_fetcher(args: &AgentArgs) -> anyhow::Result<Fetcher> {
    let cache = Cache::open(&args.cache_dir, args.cache_max_mib * 1024 * 1024)
        .with_context(|| format!("opening the source cache at {}", args.cache_dir.display()))?
        .with_unpack_allowance(args.unpack_scratch_mib.max(1) << 20);
    let options = args.unpack.bound(FetchOptions {
        plain_http_registries: args.plain_http_registries.clone(),
        timeout: args.fetch_timeout,
        egress: args.egress.policy(),
        ..Default::default()
    });
    Ok(Fetcher::new(Arc::new(cache), options))
}

/// The settings of the remote clusters' registry, from the agent's flags.
fn cluster_settings(args: &AgentArgs) -> crate::clusters::ClusterSettings {
    crate::clusters::ClusterSettings {
        agent_namespace: args.namespace.clone(),
        request_timeout: args.cluster_request_timeout,
        connect_timeout: args.cluster_connect_timeout,
        egress: args.egress.policy(),
        cache_bytes: usize::try_from(args.cluster_cache_mib << 20).unwrap_or(usize::MAX),
    }
}

/// Serves the web view when `--ui-address` is set.
async fn serve_web_view(
    args: &AgentArgs,
    changelog: &ChangeLog,
    client: &kube::Client,
    config: &kube::Config,
) -> anyhow::Result<()> {
    if args.ui_address.is_empty() {
        return Ok(());
    }
    let view = super::ui::AgentView {
        address: args.ui_address.clone(),
        actions: args.ui_actions,
        namespace: args.namespace.clone(),
        changes: changelog
            .recent()
            .map(super::ui::changes::ChangeSource::Memory)
            .unwrap_or_default(),
    };
    let bound = super::ui::serve_agent(view, client.clone(), config.clone()).await?;
    tracing::info!(address = %bound, actions = args.ui_actions, "web view listening");
    Ok(())
}

/// Stops renewing the leader Lease, then hands it over at once instead of letting the next
/// leader wait for it to expire.
async fn step_down(renewer: Option<tokio::task::JoinHandle<()>>, elector: Option<&mut Elector>) {
    if let Some(renewer) = renewer {
        renewer.abort();
        // Wait for it to stop, so no renewal races the release below.
        let _ = renewer.await;
    }
    if let Some(elector) = elector {
        match elector.release().await {
            Ok(()) => tracing::info!(lease = %elector.config().name, "released the leader lease"),
            Err(error) => {
                tracing::warn!(%error, "could not release the leader lease; it expires by itself")
            }
        }
        METRICS.set_leader(false);
    }
}

/// Where function processors may run, and their limits, from the agent's flags.
fn function_policy(args: &AgentArgs) -> crate::reconcile::functions::FunctionPolicy {
    crate::reconcile::functions::FunctionPolicy {
        allowed_exec: args.allow_function_exec.clone(),
        allowed_hosts: args.allow_function_host.clone(),
        max_timeout: args.function_timeout_max,
        exec_memory_bytes: args.function_memory_mib << 20,
        exec_cpu: args.function_cpu_time,
        sandbox_program: None,
    }
}

/// The render sandbox's limits from the agent's flags.
fn sandbox_limits(args: &AgentArgs) -> SandboxLimits {
    let output_bytes = usize::try_from(args.render_output_mib << 20).unwrap_or(usize::MAX);
    SandboxLimits {
        memory_bytes: args.render_memory_mib << 20,
        cpu_seconds: args.render_cpu_time.as_secs(),
        timeout: args.render_timeout,
        reply_bytes: crate::render_sandbox::reply_bytes_for(output_bytes),
        concurrency: args.render_concurrency.into(),
    }
}

/// The renderers' budgets from the agent's flags.
fn render_budgets(args: &AgentArgs) -> pallet_formats::RenderBudgets {
    pallet_formats::RenderBudgets {
        output_bytes: usize::try_from(args.render_output_mib << 20).unwrap_or(usize::MAX),
        steps: args.render_steps,
    }
}

/// Tries for the Lease until this process holds it (true) or a termination signal arrives (false).
async fn wait_for_leadership(elector: &mut Elector) -> bool {
    use tokio::signal::unix::{signal, SignalKind};
    let config = elector.config().clone();
    tracing::info!(lease = %format!("{}/{}", config.namespace, config.name), identity = %config.identity, "waiting to lead");
    // Without a handler the signal would kill the process, which is fine for a standby too; the
    // handler only makes the exit clean and logged.
    let mut term = signal(SignalKind::terminate()).ok();
    let mut last_holder: Option<Option<String>> = None;
    loop {
        match elector.try_acquire_or_renew().await {
            Ok(Attempt::Leading) => {
                METRICS.set_leader(true);
                tracing::info!(identity = %config.identity, lease = %config.name, "became the leader");
                return true;
            }
            Ok(Attempt::Following { holder }) => {
                METRICS.set_leader(false);
                if holder.is_some() && last_holder.as_ref() != Some(&holder) {
                    tracing::info!(
                        leader = holder.as_deref().unwrap_or(""),
                        "following the leader"
                    );
                    last_holder = Some(holder);
                }
            }
            Err(error) => {
                METRICS.set_lease_unreachable();
                tracing::warn!(%error, "leader election attempt failed");
            }
        }
        let wait = tokio::time::sleep(elector.next_attempt_in());
        let terminated = async {
            match term.as_mut() {
                Some(term) => term.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = wait => {}
            _ = tokio::signal::ctrl_c() => return false,
            _ = terminated => return false,
        }
    }
}

/// Renews the Lease every retry period. Losing it (another holder, or no successful renewal
/// within the renew deadline) ends the process at once with status 1: in-flight writes stop
/// with it, and the Deployment restarts the container as a candidate. Exiting is the simplest
/// way to be sure nothing writes after another replica may have taken over.
async fn keep_renewing(mut elector: Elector) {
    let config = elector.config().clone();
    let mut last_renewal = tokio::time::Instant::now();
    let mut pause = config.retry_period();
    loop {
        tokio::time::sleep(pause).await;
        pause = config.retry_period();
        let left = config
            .renew_deadline()
            .saturating_sub(last_renewal.elapsed());
        let outcome = tokio::time::timeout(left, elector.try_acquire_or_renew()).await;
        let lost = match outcome {
            Ok(Ok(Attempt::Leading)) => {
                last_renewal = tokio::time::Instant::now();
                None
            }
            Ok(Ok(Attempt::Following { holder })) => Some(format!(
                "the lease is held by {}",
                holder.as_deref().unwrap_or("another agent")
            )),
            Ok(Err(error)) if last_renewal.elapsed() < config.renew_deadline() => {
                tracing::warn!(%error, "renewing the leader lease failed; retrying");
                // Retry sooner than the period: there is a deadline to meet.
                pause = (config.retry_period() / 4).max(Duration::from_millis(200));
                None
            }
            Ok(Err(error)) => Some(format!("renewal failed past the deadline: {error}")),
            Err(_) => Some("renewal timed out past the deadline".to_string()),
        };
        if let Some(why) = lost {
            METRICS.set_leader(false);
            tracing::error!(lease = %config.name, reason = %why, "lost the leader lease; exiting");
            std::process::exit(1);
        }
    }
}

async fn client_config(args: &AgentArgs) -> anyhow::Result<Config> {
    let config = super::kube_config(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    Ok(super::identified(config, "pallet"))
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,kube=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colour codes only on a terminal: not in log files or a container's log stream.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        // A log line that cannot be written (a full disk, a closed pipe) is dropped; reporting
        // it would print to stderr again, and that print panics.
        .log_internal_errors(false)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Plain => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn parse_absolute_path(text: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(text);
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(format!("{text:?} is not an absolute path"))
    }
}

/// How many BundleDeployments are reconciled at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Concurrency {
    /// Adapting to what the API server accepts.
    Auto,
    /// This many.
    Fixed(u16),
}

/// `--concurrency`: a number of workers, or `auto`.
fn parse_concurrency(value: &str) -> Result<Concurrency, String> {
    if value == "auto" {
        return Ok(Concurrency::Auto);
    }
    match value.parse::<u16>() {
        Ok(n) if n > 0 => Ok(Concurrency::Fixed(n)),
        _ => Err(format!(
            "expected `auto` or a number of workers (1 or more), got {value:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_flags_default_to_the_library_defaults_and_take_durations() {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            agent: AgentArgs,
        }
        let args = Wrapper::parse_from(["agent"]).agent;
        assert_eq!(args.requeue_interval, controller::DEFAULT_REQUEUE);
        assert_eq!(
            args.render_cpu_time.as_secs(),
            crate::render_sandbox::DEFAULT_CPU_SECONDS
        );
        let args =
            Wrapper::parse_from(["agent", "--requeue-seconds", "2", "--render-cpu-time", "1m"])
                .agent;
        assert_eq!(args.requeue_interval, Duration::from_secs(2));
        assert_eq!(args.render_cpu_time, Duration::from_secs(60));
    }

    #[test]
    fn a_default_service_account_is_namespace_slash_name() {
        let sa = parse_service_account("pallet-system/installer").unwrap();
        assert_eq!(
            (sa.namespace.as_str(), sa.name.as_str()),
            ("pallet-system", "installer")
        );
        assert!(parse_service_account("team-a/ci.deployer").is_ok());
        for bad in [
            "installer",
            "/installer",
            "team-a/",
            "Team/x",
            "a/b/c",
            "-a/b",
        ] {
            assert!(parse_service_account(bad).is_err(), "{bad}");
        }
    }
}
