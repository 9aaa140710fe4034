//! Prometheus metrics, readiness state, and the small HTTP server that serves them with the
//! health endpoints (`/metrics`, `/healthz`, `/readyz`).
//!
//! One process-global [`METRICS`] holds every metric, so any part of the agent can count what it
//! does without threading a handle through. The server is a tiny HTTP/1.0-style handler on a
//! tokio listener (one request per connection, then close): Prometheus scrapes and kubelet probes
//! need nothing more, and it adds no HTTP server crate to the build.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The process-global metrics and readiness state.
pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// Label set `result="success|error"`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

/// Label set of a fetch: source kind and result.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FetchLabels {
    kind: &'static str,
    result: &'static str,
}

/// Label set `operation="created|updated"`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabel {
    operation: &'static str,
}

/// Label set of a notification attempt: target kind and result.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NotificationLabels {
    kind: &'static str,
    result: &'static str,
}

/// Label set `trigger="apply-error|deadline|request"`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TriggerLabel {
    trigger: String,
}

/// Label set `shard="KEY"`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardLabel {
    shard: String,
}

/// Label set `cluster="NAME"`: a remote cluster, by its kubeconfig Secret's name (with
/// `@CONTEXT` when a context is named).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabel {
    cluster: String,
}

/// Label set `phase="fetch_render|snapshot_store|status_write|apply_prune|health"`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: &'static str,
}

/// Label set of a Kubernetes API request: verb (get, list, watch, create, patch, update,
/// delete, deletecollection) and resource (with `/subresource`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiRequestLabels {
    verb: &'static str,
    resource: String,
}

/// The phases of a reconcile timed in `pallet_phase_seconds`.
pub const PHASES: [&str; 5] = [
    "fetch_render",
    "snapshot_store",
    "status_write",
    "apply_prune",
    "health",
];

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    // 10ms .. ~164s: a cached no-op reconcile up to a slow chart install.
    Histogram::new(exponential_buckets(0.01, 2.0, 15))
}

fn phase_histogram() -> Histogram {
    // 1ms .. ~65s: an in-memory health assessment up to a slow apply.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// What kind of series a metric is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up; exposed with `_total` appended.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations in buckets: `_bucket`, `_sum` and `_count` series.
    Histogram,
}

impl MetricKind {
    /// The OpenMetrics type name.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// One metric the agent exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricDoc {
    /// Name without the `pallet_` prefix (and, for a counter, without `_total`).
    pub name: &'static str,
    /// Its kind.
    pub kind: MetricKind,
    /// Its label names.
    pub labels: &'static [&'static str],
    /// Its help text, as `/metrics` shows it.
    pub help: &'static str,
}

impl MetricDoc {
    /// The name of its series as scraped (`pallet_reconciles_total`).
    pub fn exposed_name(&self) -> String {
        match self.kind {
            MetricKind::Counter => format!("{PREFIX}_{}_total", self.name),
            _ => format!("{PREFIX}_{}", self.name),
        }
    }
}

/// The prefix of every metric name.
pub const PREFIX: &str = "pallet";

/// `pallet_reconciles`.
const RECONCILES: MetricDoc = MetricDoc {
    name: "reconciles",
    kind: MetricKind::Counter,
    labels: &["result"],
    help: "Reconciles finished, by result (success|error)",
};
/// `pallet_reconcile_duration_seconds`.
const RECONCILE_DURATION_SECONDS: MetricDoc = MetricDoc {
    name: "reconcile_duration_seconds",
    kind: MetricKind::Histogram,
    labels: &["result"],
    help: "Duration of reconciles, by result (success|error)",
};
/// `pallet_fetches`.
const FETCHES: MetricDoc = MetricDoc {
    name: "fetches",
    kind: MetricKind::Counter,
    labels: &["kind", "result"],
    help: "Source fetches, by source kind (image|git|http|helmRepository) and result \
             (success|error)",
};
/// `pallet_applied_objects`.
const APPLIED_OBJECTS: MetricDoc = MetricDoc {
    name: "applied_objects",
    kind: MetricKind::Counter,
    labels: &["operation"],
    help: "Objects written by applies, by operation (created|updated)",
};
/// `pallet_pruned_objects`.
const PRUNED_OBJECTS: MetricDoc = MetricDoc {
    name: "pruned_objects",
    kind: MetricKind::Counter,
    labels: &[],
    help: "Objects deleted because a new revision no longer has them",
};
/// `pallet_revisions_created`.
const REVISIONS_CREATED: MetricDoc = MetricDoc {
    name: "revisions_created",
    kind: MetricKind::Counter,
    labels: &[],
    help: "Revisions recorded (a new set of resolved sources and rendered objects applied)",
};
/// `pallet_renders`.
const RENDERS: MetricDoc = MetricDoc {
    name: "renders",
    kind: MetricKind::Counter,
    labels: &[],
    help: "Bundle renders (a pass whose sources and settings are unchanged reuses the last one)",
};
/// `pallet_rollbacks`.
const ROLLBACKS: MetricDoc = MetricDoc {
    name: "rollbacks",
    kind: MetricKind::Counter,
    labels: &["trigger"],
    help: "Rollbacks to an earlier revision, by trigger (apply-error|deadline|request)",
};
/// `pallet_drift_corrections`.
const DRIFT_CORRECTIONS: MetricDoc = MetricDoc {
    name: "drift_corrections",
    kind: MetricKind::Counter,
    labels: &[],
    help: "Objects rewritten because they drifted from the applied revision",
};
/// `pallet_notifications`.
const NOTIFICATIONS: MetricDoc = MetricDoc {
    name: "notifications",
    kind: MetricKind::Counter,
    labels: &["kind", "result"],
    help: "Notification outcomes, by target kind (webhook|cloudEvents|slack|commitStatus) and \
             result (delivered|retrying|failed|dropped): one per attempt, plus deadlines reached \
             and notifications dropped undelivered",
};
/// `pallet_phase_seconds`.
const PHASE_SECONDS: MetricDoc = MetricDoc {
    name: "phase_seconds",
    kind: MetricKind::Histogram,
    labels: &["phase"],
    help: "Time spent in each phase of reconciles (fetch_render, snapshot_store, status_write, \
             apply_prune, health), summed over passes",
};
/// `pallet_api_requests`.
const API_REQUESTS: MetricDoc = MetricDoc {
    name: "api_requests",
    kind: MetricKind::Counter,
    labels: &["verb", "resource"],
    help: "Kubernetes API requests this agent sent, by verb and resource (counted in the client)",
};
/// `pallet_reconciles_in_flight`.
const RECONCILES_IN_FLIGHT: MetricDoc = MetricDoc {
    name: "reconciles_in_flight",
    kind: MetricKind::Gauge,
    labels: &[],
    help: "Reconciles running now (the queue depth the agent can see: kube's controller does \
             not expose the requests waiting in its scheduler)",
};
/// `pallet_leader`.
const LEADER: MetricDoc = MetricDoc {
    name: "leader",
    kind: MetricKind::Gauge,
    labels: &[],
    help: "1 while this agent holds the leader Lease (or runs without leader election), else 0",
};
/// `pallet_agent_shard`.
const AGENT_SHARD: MetricDoc = MetricDoc {
    name: "agent_shard",
    kind: MetricKind::Gauge,
    labels: &["shard"],
    help: "1, labelled with the shard this agent serves (--shard; \"\" when not sharded)",
};

/// `pallet_cluster_up`.
const CLUSTER_UP: MetricDoc = MetricDoc {
    name: "cluster_up",
    kind: MetricKind::Gauge,
    labels: &["cluster"],
    help:
        "1 while a remote cluster answers, 0 while it is down (unreachable, too slow, or \
             refusing the kubeconfig's credentials): its bundles wait and it is probed with backoff",
};
/// `pallet_cluster_bundle_deployments`.
const CLUSTER_BUNDLE_DEPLOYMENTS: MetricDoc = MetricDoc {
    name: "cluster_bundle_deployments",
    kind: MetricKind::Gauge,
    labels: &["cluster"],
    help: "BundleDeployments whose objects are on a remote cluster (spec.kubeConfig)",
};
/// `pallet_cluster_watched_objects`.
const CLUSTER_WATCHED_OBJECTS: MetricDoc = MetricDoc {
    name: "cluster_watched_objects",
    kind: MetricKind::Gauge,
    labels: &["cluster"],
    help: "Objects pallet applied on a remote cluster that its watches know",
};
/// `pallet_cluster_watch_cache_bytes`.
const CLUSTER_WATCH_CACHE_BYTES: MetricDoc = MetricDoc {
    name: "cluster_watch_cache_bytes",
    kind: MetricKind::Gauge,
    labels: &["cluster"],
    help: "Bytes of object bodies the watches of a remote cluster keep (at most \
             --cluster-cache-mib; past it objects are read when needed)",
};
/// `pallet_cluster_requests`.
const CLUSTER_REQUESTS: MetricDoc = MetricDoc {
    name: "cluster_requests",
    kind: MetricKind::Counter,
    labels: &["cluster"],
    help: "Kubernetes API requests sent to a remote cluster",
};
/// `pallet_cluster_outages`.
const CLUSTER_OUTAGES: MetricDoc = MetricDoc {
    name: "cluster_outages",
    kind: MetricKind::Counter,
    labels: &["cluster"],
    help: "Times a remote cluster went down",
};

/// Every metric the agent exports, in the order of `/metrics`: the one list the registry is
/// built from and `docs/reference/metrics.md` is generated from.
pub const METRIC_DOCS: [&MetricDoc; 21] = [
    &RECONCILES,
    &RECONCILE_DURATION_SECONDS,
    &FETCHES,
    &APPLIED_OBJECTS,
    &PRUNED_OBJECTS,
    &REVISIONS_CREATED,
    &RENDERS,
    &ROLLBACKS,
    &DRIFT_CORRECTIONS,
    &NOTIFICATIONS,
    &PHASE_SECONDS,
    &API_REQUESTS,
    &RECONCILES_IN_FLIGHT,
    &LEADER,
    &AGENT_SHARD,
    &CLUSTER_UP,
    &CLUSTER_BUNDLE_DEPLOYMENTS,
    &CLUSTER_WATCHED_OBJECTS,
    &CLUSTER_WATCH_CACHE_BYTES,
    &CLUSTER_REQUESTS,
    &CLUSTER_OUTAGES,
];

fn register<M: prometheus_client::registry::Metric>(
    registry: &mut Registry,
    doc: &MetricDoc,
    metric: M,
) {
    registry.register(doc.name, doc.help, metric);
}

/// The agent's role, for readiness.
const ROLE_STARTING: u8 = 0;
const ROLE_STANDBY: u8 = 1;
const ROLE_LEADER: u8 = 2;

/// Every metric the agent exports (names in [`Metrics::new`]), plus readiness state.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ResultLabel, Counter>,
    reconcile_duration: HistogramFamily<ResultLabel>,
    fetches: Family<FetchLabels, Counter>,
    applied: Family<OperationLabel, Counter>,
    pruned: Counter,
    revisions: Counter,
    renders: Counter,
    rollbacks: Family<TriggerLabel, Counter>,
    drift: Counter,
    notifications: Family<NotificationLabels, Counter>,
    phases: HistogramFamily<PhaseLabel>,
    api_requests: Family<ApiRequestLabels, Counter>,
    in_flight: Gauge,
    leader: Gauge,
    shard: Family<ShardLabel, Gauge>,
    clusters: ClusterFamilies,
    role: AtomicU8,
    synced: AtomicBool,
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::with_prefix(PREFIX);
        let reconciles = Family::<ResultLabel, Counter>::default();
        let reconcile_duration: HistogramFamily<ResultLabel> =
            Family::new_with_constructor(duration_histogram);
        let fetches = Family::<FetchLabels, Counter>::default();
        let applied = Family::<OperationLabel, Counter>::default();
        let rollbacks = Family::<TriggerLabel, Counter>::default();
        let (pruned, revisions, drift) =
            (Counter::default(), Counter::default(), Counter::default());
        let renders = Counter::default();
        let notifications = Family::<NotificationLabels, Counter>::default();
        let phases: HistogramFamily<PhaseLabel> = Family::new_with_constructor(phase_histogram);
        let api_requests = Family::<ApiRequestLabels, Counter>::default();
        let (in_flight, leader) = (Gauge::default(), Gauge::default());
        let shard = Family::<ShardLabel, Gauge>::default();
        // Counters get `_total` appended by the encoder; names in the list are without it.
        register(&mut registry, &RECONCILES, reconciles.clone());
        register(
            &mut registry,
            &RECONCILE_DURATION_SECONDS,
            reconcile_duration.clone(),
        );
        register(&mut registry, &FETCHES, fetches.clone());
        register(&mut registry, &APPLIED_OBJECTS, applied.clone());
        register(&mut registry, &PRUNED_OBJECTS, pruned.clone());
        register(&mut registry, &REVISIONS_CREATED, revisions.clone());
        register(&mut registry, &RENDERS, renders.clone());
        register(&mut registry, &ROLLBACKS, rollbacks.clone());
        register(&mut registry, &DRIFT_CORRECTIONS, drift.clone());
        register(&mut registry, &NOTIFICATIONS, notifications.clone());
        register(&mut registry, &PHASE_SECONDS, phases.clone());
        register(&mut registry, &API_REQUESTS, api_requests.clone());
        register(&mut registry, &RECONCILES_IN_FLIGHT, in_flight.clone());
        register(&mut registry, &LEADER, leader.clone());
        register(&mut registry, &AGENT_SHARD, shard.clone());
        let clusters = ClusterFamilies::default();
        register(&mut registry, &CLUSTER_UP, clusters.up.clone());
        register(
            &mut registry,
            &CLUSTER_BUNDLE_DEPLOYMENTS,
            clusters.bundles.clone(),
        );
        register(
            &mut registry,
            &CLUSTER_WATCHED_OBJECTS,
            clusters.objects.clone(),
        );
        register(
            &mut registry,
            &CLUSTER_WATCH_CACHE_BYTES,
            clusters.bytes.clone(),
        );
        register(&mut registry, &CLUSTER_REQUESTS, clusters.requests.clone());
        register(&mut registry, &CLUSTER_OUTAGES, clusters.outages.clone());
        // Series for every known label value exist from the start (at 0), so that rates and
        // alerts work before the first event of a kind.
        for result in ["success", "error"] {
            let label = ResultLabel { result };
            let _ = reconciles.get_or_create(&label);
            let _ = reconcile_duration.get_or_create(&label);
            for kind in ["image", "git", "http", "helmRepository"] {
                let _ = fetches.get_or_create(&FetchLabels { kind, result });
            }
        }
        for kind in ["webhook", "cloudEvents", "slack", "commitStatus"] {
            for result in ["delivered", "retrying", "failed", "dropped"] {
                let _ = notifications.get_or_create(&NotificationLabels { kind, result });
            }
        }
        for phase in PHASES {
            let _ = phases.get_or_create(&PhaseLabel { phase });
        }
        for operation in ["created", "updated"] {
            let _ = applied.get_or_create(&OperationLabel { operation });
        }
        for trigger in ["apply-error", "deadline", "request"] {
            let _ = rollbacks.get_or_create(&TriggerLabel {
                trigger: trigger.to_string(),
            });
        }
        Metrics {
            registry,
            reconciles,
            reconcile_duration,
            fetches,
            applied,
            pruned,
            revisions,
            renders,
            rollbacks,
            drift,
            notifications,
            phases,
            api_requests,
            in_flight,
            leader,
            shard,
            clusters,
            role: AtomicU8::new(ROLE_STARTING),
            synced: AtomicBool::new(false),
        }
    }

    /// Counts one finished reconcile and its duration.
    pub fn reconciled(&self, success: bool, duration: Duration) {
        let label = ResultLabel {
            result: if success { "success" } else { "error" },
        };
        self.reconciles.get_or_create(&label).inc();
        self.reconcile_duration
            .get_or_create(&label)
            .observe(duration.as_secs_f64());
    }

    /// Counts one notification outcome (see the metric's help).
    pub fn notification(&self, kind: &'static str, result: &'static str) {
        self.notifications
            .get_or_create(&NotificationLabels { kind, result })
            .inc();
    }

    /// Marks a reconcile as running until the returned guard is dropped.
    pub fn reconcile_started(&self) -> InFlight<'_> {
        self.in_flight.inc();
        InFlight(&self.in_flight)
    }

    /// Counts one source fetch of `kind` (`image`, `git`, `http`).
    pub fn fetched(&self, kind: &'static str, success: bool) {
        let labels = FetchLabels {
            kind,
            result: if success { "success" } else { "error" },
        };
        self.fetches.get_or_create(&labels).inc();
    }

    /// Counts objects written by an apply.
    pub fn applied(&self, created: usize, updated: usize) {
        let created_label = OperationLabel {
            operation: "created",
        };
        let updated_label = OperationLabel {
            operation: "updated",
        };
        self.applied
            .get_or_create(&created_label)
            .inc_by(count(created));
        self.applied
            .get_or_create(&updated_label)
            .inc_by(count(updated));
    }

    /// Counts objects pruned.
    pub fn pruned(&self, n: usize) {
        self.pruned.inc_by(count(n));
    }

    /// Counts one render of a bundle.
    pub fn rendered(&self) {
        self.renders.inc();
    }

    /// Counts one revision recorded.
    pub fn revision_created(&self) {
        self.revisions.inc();
    }

    /// Counts one rollback; `trigger` is `apply-error`, `deadline` or `request`.
    pub fn rollback(&self, trigger: &str) {
        self.rollbacks
            .get_or_create(&TriggerLabel {
                trigger: trigger.to_string(),
            })
            .inc();
    }

    /// Counts objects rewritten to correct drift.
    pub fn drift_corrected(&self, n: usize) {
        self.drift.inc_by(count(n));
    }

    /// Times phase `phase` (one of [`PHASES`]) until the returned guard is dropped.
    pub fn phase(&self, phase: &'static str) -> PhaseTimer {
        PhaseTimer {
            histogram: self.phases.get_or_create_owned(&PhaseLabel { phase }),
            start: Instant::now(),
        }
    }

    /// Counts one Kubernetes API request.
    pub fn api_request(&self, verb: &'static str, resource: String) {
        self.api_requests
            .get_or_create(&ApiRequestLabels { verb, resource })
            .inc();
    }

    /// Counts one request sent to remote cluster `cluster`.
    pub fn cluster_request(&self, cluster: &str) {
        self.clusters.requests.get_or_create(&label(cluster)).inc();
    }

    /// Counts one outage of remote cluster `cluster`.
    pub fn cluster_outage(&self, cluster: &str) {
        self.clusters.outages.get_or_create(&label(cluster)).inc();
        self.clusters.up.get_or_create(&label(cluster)).set(0);
    }

    /// Sets the gauges of remote cluster `cluster`: whether it is up, its BundleDeployments,
    /// the objects its watches know and the bytes they keep.
    pub fn set_cluster(
        &self,
        cluster: &str,
        up: bool,
        bundles: usize,
        objects: usize,
        bytes: usize,
    ) {
        let label = label(cluster);
        self.clusters.up.get_or_create(&label).set(i64::from(up));
        self.clusters
            .bundles
            .get_or_create(&label)
            .set(i64::try_from(bundles).unwrap_or(i64::MAX));
        self.clusters
            .objects
            .get_or_create(&label)
            .set(i64::try_from(objects).unwrap_or(i64::MAX));
        self.clusters
            .bytes
            .get_or_create(&label)
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Drops the series of remote cluster `cluster` (no bundle targets it any more).
    pub fn forget_cluster(&self, cluster: &str) {
        let label = label(cluster);
        self.clusters.up.remove(&label);
        self.clusters.bundles.remove(&label);
        self.clusters.objects.remove(&label);
        self.clusters.bytes.remove(&label);
        self.clusters.requests.remove(&label);
        self.clusters.outages.remove(&label);
    }

    /// Records that this process leads (runs the controller) or not.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
        let role = if leading { ROLE_LEADER } else { ROLE_STANDBY };
        self.role.store(role, Ordering::SeqCst);
        if !leading {
            self.synced.store(false, Ordering::SeqCst);
        }
    }

    /// Records the shard this agent serves ("" when not sharded).
    pub fn set_shard(&self, shard: &str) {
        self.shard
            .get_or_create(&ShardLabel {
                shard: shard.to_string(),
            })
            .set(1);
    }

    /// Records that a standby could not read the Lease: not ready until it can again.
    pub fn set_lease_unreachable(&self) {
        let _ = self.role.compare_exchange(
            ROLE_STANDBY,
            ROLE_STARTING,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }

    /// Records that the controller's BundleDeployment watch has listed everything once.
    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
    }

    /// Ready: a leader whose watch has synced, or a standby whose last read of the Lease
    /// succeeded (so it can reach the API server and take over when needed).
    pub fn is_ready(&self) -> bool {
        match self.role.load(Ordering::SeqCst) {
            ROLE_LEADER => self.synced.load(Ordering::SeqCst),
            ROLE_STANDBY => true,
            _ => false,
        }
    }

    /// The metrics in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail; an error here would be an encoder bug, so answer
        // with what was written so far rather than failing the scrape.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "encoding metrics");
        }
        out
    }
}

/// The families of the per-cluster series.
#[derive(Default)]
struct ClusterFamilies {
    up: Family<ClusterLabel, Gauge>,
    bundles: Family<ClusterLabel, Gauge>,
    objects: Family<ClusterLabel, Gauge>,
    bytes: Family<ClusterLabel, Gauge>,
    requests: Family<ClusterLabel, Counter>,
    outages: Family<ClusterLabel, Counter>,
}

fn label(cluster: &str) -> ClusterLabel {
    ClusterLabel {
        cluster: cluster.to_string(),
    }
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Decrements the in-flight gauge when a reconcile ends (also on cancellation).
pub struct InFlight<'a>(&'a Gauge);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Observes the time since it was made into `pallet_phase_seconds` when dropped (also when the
/// phase ends with an error or is cancelled).
pub struct PhaseTimer {
    histogram: Histogram,
    start: Instant,
}

impl Drop for PhaseTimer {
    fn drop(&mut self) {
        self.histogram.observe(self.start.elapsed().as_secs_f64());
    }
}

/// Errors starting the metrics server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The address does not parse as host:port.
    #[error("metrics address {addr:?} is not an IP address and port: {source}")]
    Address {
        /// The address as given.
        addr: String,
        /// Why it does not parse.
        source: std::net::AddrParseError,
    },
    /// The listener could not bind.
    #[error("cannot listen on {addr} for metrics: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Binds the metrics and health server on `addr` and serves it on a background task; returns
/// the bound address (with the real port when `addr` asked for port 0).
pub async fn serve(addr: &str) -> Result<SocketAddr, ServerError> {
    let parsed: SocketAddr = addr.parse().map_err(|source| ServerError::Address {
        addr: addr.to_string(),
        source,
    })?;
    let listener = TcpListener::bind(parsed)
        .await
        .map_err(|source| ServerError::Bind {
            addr: parsed,
            source,
        })?;
    let bound = listener.local_addr().map_err(|source| ServerError::Bind {
        addr: parsed,
        source,
    })?;
    tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(async move {
                        if let Err(e) = handle(stream).await {
                            tracing::debug!(error = %e, "metrics connection");
                        }
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accepting a metrics connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    Ok(bound)
}

/// Answers one request and closes the connection.
async fn handle(mut stream: TcpStream) -> std::io::Result<()> {
    const MAX_HEAD: usize = 8 * 1024;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    // A slow or idle client must not hold a task forever.
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok::<(), std::io::Error>(())
    })
    .await;
    if !matches!(read, Ok(Ok(()))) {
        return Ok(());
    }
    let (status, content_type, body) = respond(&head);
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// The status line, content type and body for a request head (pure, for tests).
fn respond(head: &[u8]) -> (&'static str, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    if method != "GET" {
        return ("405 Method Not Allowed", TEXT, "only GET\n".into());
    }
    match path {
        "/metrics" => (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            METRICS.encode(),
        ),
        "/healthz" => ("200 OK", TEXT, "ok\n".into()),
        "/readyz" if METRICS.is_ready() => ("200 OK", TEXT, "ready\n".into()),
        "/readyz" => (
            "503 Service Unavailable",
            TEXT,
            "not ready: neither a leader whose BundleDeployment watch has synced nor a standby \
             that can read the Lease\n"
                .into(),
        ),
        _ => ("404 Not Found", TEXT, "not found\n".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_show_up_with_their_labels() {
        let metrics = Metrics::new();
        metrics.reconciled(true, Duration::from_millis(30));
        metrics.reconciled(false, Duration::from_millis(5));
        metrics.fetched("git", true);
        metrics.applied(3, 1);
        metrics.pruned(2);
        metrics.revision_created();
        metrics.rollback("deadline");
        metrics.drift_corrected(4);
        let text = metrics.encode();
        for line in [
            "pallet_reconciles_total{result=\"success\"} 1",
            "pallet_reconciles_total{result=\"error\"} 1",
            "pallet_reconcile_duration_seconds_count{result=\"success\"} 1",
            "pallet_fetches_total{kind=\"git\",result=\"success\"} 1",
            "pallet_applied_objects_total{operation=\"created\"} 3",
            "pallet_applied_objects_total{operation=\"updated\"} 1",
            "pallet_pruned_objects_total 2",
            "pallet_revisions_created_total 1",
            "pallet_rollbacks_total{trigger=\"deadline\"} 1",
            "pallet_drift_corrections_total 4",
            "pallet_reconciles_in_flight 0",
            "pallet_leader 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in:\n{text}"
            );
        }
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn every_metric_exposed_is_in_the_list_with_its_type_help_and_labels() {
        let metrics = Metrics::new();
        metrics.api_request("get", "secrets".into());
        metrics.set_shard("");
        metrics.set_cluster("target", true, 1, 1, 1);
        metrics.cluster_request("target");
        metrics.cluster_outage("target");
        let text = metrics.encode();
        let mut described = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').unwrap();
                let doc = METRIC_DOCS
                    .iter()
                    .find(|d| format!("{PREFIX}_{}", d.name) == name)
                    .unwrap_or_else(|| panic!("{name} is exported and not in METRIC_DOCS"));
                // The encoder ends the help with a full stop.
                assert_eq!(Some(doc.help), help.strip_suffix('.'), "{name}");
                described.push(doc.name);
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                let doc = METRIC_DOCS
                    .iter()
                    .find(|d| format!("{PREFIX}_{}", d.name) == name)
                    .unwrap();
                assert_eq!(doc.kind.as_str(), kind, "{name}");
            } else if !line.starts_with('#') {
                let series = line.split([' ', '{']).next().unwrap();
                let labels: Vec<&str> = line
                    .split_once('{')
                    .map(|(_, rest)| rest.split_once('}').unwrap().0)
                    .into_iter()
                    .flat_map(|l| l.split(','))
                    .filter_map(|pair| pair.split_once('=').map(|(k, _)| k))
                    .filter(|k| *k != "le")
                    .collect();
                let doc = METRIC_DOCS
                    .iter()
                    .filter(|d| series.starts_with(&format!("{PREFIX}_{}", d.name)))
                    .max_by_key(|d| d.name.len())
                    .unwrap_or_else(|| panic!("{series} is not in METRIC_DOCS"));
                assert_eq!(doc.labels, labels.as_slice(), "{line}");
            }
        }
        let listed: Vec<&str> = METRIC_DOCS.iter().map(|d| d.name).collect();
        assert_eq!(described, listed, "METRIC_DOCS and the registry differ");
    }

    #[test]
    fn in_flight_gauge_follows_guards() {
        let metrics = Metrics::new();
        let a = metrics.reconcile_started();
        let b = metrics.reconcile_started();
        assert_eq!(metrics.in_flight.get(), 2);
        drop(a);
        assert_eq!(metrics.in_flight.get(), 1);
        drop(b);
        assert_eq!(metrics.in_flight.get(), 0);
    }

    #[test]
    fn readiness_by_role() {
        let metrics = Metrics::new();
        assert!(!metrics.is_ready(), "not ready before the elector has run");
        metrics.set_leader(false);
        assert!(metrics.is_ready(), "a standby is ready");
        metrics.set_lease_unreachable();
        assert!(
            !metrics.is_ready(),
            "a standby that cannot read the Lease is not"
        );
        metrics.set_leader(false);
        metrics.set_leader(true);
        assert!(
            !metrics.is_ready(),
            "a new leader waits for its watch to sync"
        );
        metrics.set_synced();
        assert!(metrics.is_ready());
        assert_eq!(metrics.leader.get(), 1);
        metrics.set_leader(false);
        assert_eq!(metrics.leader.get(), 0);
    }

    #[test]
    fn routes() {
        assert_eq!(respond(b"GET /healthz HTTP/1.1\r\n\r\n").0, "200 OK");
        assert_eq!(respond(b"GET /nope HTTP/1.1\r\n\r\n").0, "404 Not Found");
        assert_eq!(
            respond(b"POST /metrics HTTP/1.1\r\n\r\n").0,
            "405 Method Not Allowed"
        );
        let (status, content_type, body) = respond(b"GET /metrics?x=1 HTTP/1.1\r\n\r\n");
        assert_eq!(status, "200 OK");
        assert!(content_type.starts_with("application/openmetrics-text"));
        assert!(
            body.contains("pallet_reconciles_total{result=\"error\"} "),
            "every known series is there from the start:\n{body}"
        );
    }
}
