//! The reconciler: one BundleDeployment at a time, as a pipeline of phases.
//!
//! ```text
//! fetch (I/O) -> render (pure) -> apply in stages + prune (I/O) -> status (pure) -> patch status (I/O)
//! ```
//!
//! Each phase has its own module; this one wires them together, handles pause and deletion, and
//! turns errors into conditions. Health, revisions and rollback come with their own phases.

pub mod changes;
pub mod controller;
pub mod fetch;
pub mod fetch_pool;
pub mod health_checks;
pub mod hook_plan;
pub mod hooks;
pub mod owned;
pub mod polling;
pub mod render;
pub mod render_memo;
pub mod rollout;
pub mod status;
pub mod values;
pub mod values_watch;
pub mod webhook_certs;

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Config, ResourceExt};
use pallet_formats::{Object, ObjectKey};
use serde_json::json;

use crate::api::{
    parse_duration, BundleDeployment, BundleDeploymentStatus, DeletionPolicy, HookPhase,
    ObjectReference, OnFailure, ResolvedSource, ResolvedValues, RevisionPhase,
};
use crate::apply::{
    plan, Applied, Applier, ApplyError, KindResolver, Outcome as ApplyOutcome, FIELD_MANAGER,
};
use crate::changelog::{ChangeLog, Operation, Reason};
use crate::fault::{self, Point};
use crate::health;
use crate::metrics::METRICS;
use crate::revision::{RevisionError, RevisionRecord, RevisionStore};
use crate::source::{Fetcher, SourceError};
use changes::{change_object, log_writes};
use fetch::SecretPolicy;
use health_checks::{add_probes, assess_health, health_checks, REASON_HEALTH_CHECK_FAILED};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Resource;
use rollout::Decision;
use status::{FailedPhase, Outcome, SourceState, Transition};

/// Finalizer that lets pallet clean up a BundleDeployment's objects before it goes away.
pub const FINALIZER: &str = "pallet.dev/cleanup";
/// Annotation carrying the reason for a pause, shown in the Paused condition.
pub const PAUSED_REASON_ANNOTATION: &str = "pallet.dev/paused-reason";

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A source could not be fetched.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// Sources are still being fetched in the background (slow or hanging servers); the
    /// message names each with how long it has been running.
    #[error("fetching {0}")]
    Fetching(String),
    /// A Secret could not be used.
    #[error("{message}")]
    Secret {
        /// CamelCase reason.
        reason: &'static str,
        /// What and where.
        message: String,
    },
    /// The bundle could not be rendered.
    #[error("render: {0}")]
    Render(#[from] pallet_formats::RenderError),
    /// The bundle was refused by the renderer (now, or earlier for the same inputs: a refusal
    /// is kept and not rendered again until something changes).
    #[error("render: {message}")]
    RenderRefused {
        /// The render error's category.
        category: &'static str,
        /// The render error's message.
        message: String,
    },
    /// An object could not be applied or pruned (boxed: it is the largest variant by far).
    #[error(transparent)]
    Apply(Box<ApplyError>),
    /// A write for the bundle was forbidden by RBAC (for the impersonated ServiceAccount).
    #[error("{0}")]
    Forbidden(String),
    /// Deleting the bundle's objects is under way; the finalizer stays until they are gone.
    #[error("waiting for {0} to be deleted")]
    Deleting(String),
    /// Objects of a BundleDeployment being deleted exist and may not be deleted (RBAC); the
    /// finalizer stays until they can be.
    #[error("{0}")]
    DeletionForbidden(String),
    /// A revision snapshot could not be stored or read.
    #[error("revision snapshot: {0}")]
    Revision(#[source] RevisionError),
    /// `config.helm.valuesFrom` could not be read or merged.
    #[error("{message}")]
    Values {
        /// CamelCase reason (`ValuesNotFound`, `ValuesInvalid`, `ValuesNotAllowed`).
        reason: &'static str,
        /// What and where (kind, namespace, name, key; never the content).
        message: String,
    },
    /// Certificates for registry-v1 webhooks could not be provided.
    #[error("{message}")]
    Certificates {
        /// CamelCase reason (`CertManagerMissing`, `WebhookCertificateFailed`).
        reason: &'static str,
        /// What and why.
        message: String,
    },
    /// `spec.healthChecks` has expressions that do not compile (each named with its check).
    #[error("{0}")]
    InvalidHealthCheck(String),
    /// A Kubernetes API call of the agent's own failed.
    #[error("{context}: {source}")]
    Kube {
        /// What the agent was doing.
        context: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
}

impl From<ApplyError> for ReconcileError {
    fn from(error: ApplyError) -> Self {
        ReconcileError::Apply(Box::new(error))
    }
}

impl ReconcileError {
    /// CamelCase category: condition reason, Event reason and metric label.
    pub fn category(&self) -> &'static str {
        match self {
            ReconcileError::Source(e) => e.category(),
            ReconcileError::Fetching(_) => "Fetching",
            ReconcileError::Secret { reason, .. }
            | ReconcileError::Values { reason, .. }
            | ReconcileError::Certificates { reason, .. } => reason,
            ReconcileError::Render(e) => e.category(),
            ReconcileError::RenderRefused { category, .. } => category,
            ReconcileError::Apply(e) => e.category(),
            ReconcileError::Forbidden(_) => "Forbidden",
            ReconcileError::Revision(e) => e.category(),
            ReconcileError::Deleting(_) => "Deleting",
            ReconcileError::DeletionForbidden(_) => "DeletionForbidden",
            ReconcileError::Kube { .. } => "KubernetesAPIError",
            ReconcileError::InvalidHealthCheck(_) => "InvalidHealthCheck",
        }
    }

    /// True when retrying without a change may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            ReconcileError::Source(e) => e.is_transient(),
            ReconcileError::Secret { .. }
            | ReconcileError::Values { .. }
            | ReconcileError::Render(_)
            | ReconcileError::RenderRefused { .. }
            | ReconcileError::Certificates { .. }
            | ReconcileError::InvalidHealthCheck(_)
            | ReconcileError::Forbidden(_) => false,
            ReconcileError::Apply(e) => e.is_transient(),
            ReconcileError::Revision(e) => e.is_transient(),
            ReconcileError::Kube { .. }
            | ReconcileError::Deleting(_)
            | ReconcileError::DeletionForbidden(_)
            | ReconcileError::Fetching(_) => true,
        }
    }

    /// True when the API server could not be reached or gave no answer (not an answer with an
    /// error status): the failure ends the moment the API server is back, so it is retried at a
    /// short, bounded interval rather than with the growing backoff.
    pub fn api_unreachable(&self) -> bool {
        match self {
            ReconcileError::Kube { source, .. } => api_unreachable(source),
            ReconcileError::Apply(e) => match e.as_ref() {
                ApplyError::Transient { source, .. } => api_unreachable(source),
                _ => false,
            },
            ReconcileError::Revision(RevisionError::Kube { source, .. }) => api_unreachable(source),
            _ => false,
        }
    }

    fn phase(&self) -> FailedPhase {
        match self {
            ReconcileError::Source(_)
            | ReconcileError::Fetching(_)
            | ReconcileError::Secret { .. }
            | ReconcileError::Values { .. } => FailedPhase::Fetch,
            ReconcileError::InvalidHealthCheck(_) => FailedPhase::Spec,
            _ => FailedPhase::Install,
        }
    }
}

/// Whether `error` is a transport failure talking to the API server (refused, reset, timed out).
pub fn api_unreachable(error: &kube::Error) -> bool {
    matches!(error, kube::Error::HyperError(_) | kube::Error::Service(_))
}

/// The longest a BundleDeployment waits to retry while the API server is unreachable: failed
/// attempts cost nothing then (the connection is refused), and recovery must not wait for a
/// backoff grown during a long outage.
pub const API_RETRY_MAX: Duration = Duration::from_secs(4);

/// A stored revision's objects, shared between passes.
type Snapshot = std::sync::Arc<Vec<Object>>;

/// Everything a reconcile needs besides the object.
pub struct Context {
    /// The agent's client (reads, status, Secrets, reviews).
    pub client: Client,
    /// The agent's client configuration, from which impersonating clients are made.
    pub config: Config,
    /// Fetches sources through the shared cache.
    pub fetcher: Fetcher,
    /// Kind resolution shared by all applies.
    pub kinds: KindResolver,
    /// Where Secrets may be read from.
    pub secret_policy: SecretPolicy,
    /// Requeue interval when nothing else asks for one (drift checks, floating refs).
    pub requeue_interval: Duration,
    /// Objects applied at once within a stage.
    pub apply_parallelism: usize,
    /// Where every write is recorded.
    pub changelog: ChangeLog,
    /// Publishes summary Events on BundleDeployments.
    pub recorder: Recorder,
    /// Watches on applied objects, for prompt drift correction (None: drift waits for requeue).
    pub owned: Option<owned::OwnedWatches>,
    /// This agent's name in `status.agent`: `POD_NAME`, else `<host>-<pid>`.
    pub identity: String,
    /// Knobs of the built-in health rules (see [`Context::with_health_options`]).
    pub health: health::HealthOptions,
    /// The HTTP probes of `spec.healthChecks`, running apart from the reconcile workers.
    pub probes: health::probe::Probes,
    /// Watches on the objects `valuesFrom` names (None: edits wait for the requeue).
    pub values_watches: Option<values_watch::ValuesWatches>,
    /// Consecutive transient failures per BundleDeployment, for exponential backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// When each floating source was last resolved: polled at its `pollInterval`.
    pub polls: polling::SourcePolls,
    /// Fetches running apart from the reconcile workers.
    pub fetches: fetch_pool::FetchPool,
    /// The last render of each BundleDeployment, reused while its inputs are unchanged.
    pub renders: render_memo::RenderMemo,
    /// Validity of the certificates the BuiltIn provider issues for registry-v1 webhooks.
    pub webhook_cert_policy: webhook_certs::CertPolicy,
    /// The cluster's capabilities for helm charts, with when they were read.
    capabilities:
        tokio::sync::Mutex<Option<(std::time::Instant, pallet_formats::HelmCapabilities)>>,
    /// Revision snapshots, in Secrets in the agent's namespace.
    pub store: RevisionStore,
    /// Snapshots read or written by this process, by BundleDeployment and number: a held or
    /// rolled-back revision is re-applied at every pass without reading its Secrets again.
    snapshots: Mutex<HashMap<(String, i64), Snapshot>>,
    /// Set once the agent's namespace (where snapshots live) is known to exist.
    agent_namespace_ready: tokio::sync::OnceCell<()>,
    /// The resourceVersion of each BundleDeployment after this agent's last status write, or of
    /// its last direct read (see [`controller`]: a pass never starts from a cached object older
    /// than that).
    last_written: Mutex<HashMap<String, String>>,
}

impl Context {
    /// The same context judging health with `health` instead of the defaults.
    pub fn with_health_options(mut self, health: health::HealthOptions) -> Self {
        self.health = health;
        self
    }

    /// The same context asking the controller through `trigger` to reconcile a BundleDeployment
    /// whose HTTP probe changed its verdict.
    pub fn with_probe_trigger(
        mut self,
        trigger: tokio::sync::mpsc::UnboundedSender<
            kube::runtime::reflector::ObjectRef<BundleDeployment>,
        >,
    ) -> Self {
        self.probes = health::probe::Probes::new(Some(trigger));
        self
    }

    /// The same context polling floating sources without `pollInterval` every `interval`.
    pub fn with_default_poll_interval(mut self, interval: Duration) -> Self {
        self.polls = polling::SourcePolls::new(interval);
        self
    }

    /// The same context running at most `slots` fetches at once, asking the controller through
    /// `trigger` to reconcile a BundleDeployment whose slow fetch has finished.
    pub fn with_fetch_pool(
        mut self,
        slots: usize,
        trigger: tokio::sync::mpsc::UnboundedSender<
            kube::runtime::reflector::ObjectRef<BundleDeployment>,
        >,
    ) -> Self {
        self.fetches = fetch_pool::FetchPool::new(slots, fetch_pool::DEFAULT_GRACE, Some(trigger));
        self
    }

    /// The same context refusing revisions whose snapshot is over `max_bytes` compressed.
    pub fn with_max_revision_bytes(mut self, max_bytes: usize) -> Self {
        self.store = self.store.with_max_bytes(max_bytes);
        self
    }

    /// The same context issuing webhook certificates valid for `validity` (renewed when a third
    /// of it remains).
    pub fn with_webhook_cert_validity(mut self, validity: Duration) -> Self {
        self.webhook_cert_policy = webhook_certs::CertPolicy { validity };
        self
    }

    /// The same context watching `valuesFrom` objects through `watches`.
    pub fn with_values_watches(mut self, watches: values_watch::ValuesWatches) -> Self {
        self.values_watches = Some(watches);
        self
    }

    /// A context with no failures recorded.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        config: Config,
        fetcher: Fetcher,
        secret_policy: SecretPolicy,
        requeue_interval: Duration,
        apply_parallelism: usize,
        changelog: ChangeLog,
        owned: Option<owned::OwnedWatches>,
    ) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            store: RevisionStore::new(client.clone(), secret_policy.agent_namespace.clone()),
            snapshots: Mutex::new(HashMap::new()),
            agent_namespace_ready: tokio::sync::OnceCell::new(),
            last_written: Mutex::new(HashMap::new()),
            // The same name the agent holds the leader Lease under.
            identity: crate::leader::identity(),
            client,
            config,
            fetcher,
            kinds: KindResolver::default(),
            secret_policy,
            requeue_interval,
            apply_parallelism,
            changelog,
            owned,
            health: health::HealthOptions::default(),
            probes: health::probe::Probes::new(None),
            values_watches: None,
            failures: Mutex::new(HashMap::new()),
            polls: polling::SourcePolls::new(polling::DEFAULT_POLL_INTERVAL),
            fetches: fetch_pool::FetchPool::new(4, fetch_pool::DEFAULT_GRACE, None),
            renders: render_memo::RenderMemo::default(),
            webhook_cert_policy: webhook_certs::CertPolicy::default(),
            capabilities: tokio::sync::Mutex::new(None),
        }
    }

    /// The cluster's version and served APIs, for helm's `.Capabilities`. Read through discovery
    /// at most once a minute: it costs a request per API group.
    async fn helm_capabilities(&self) -> Result<pallet_formats::HelmCapabilities, ReconcileError> {
        const MAX_AGE: Duration = Duration::from_secs(60);
        let mut cached = self.capabilities.lock().await;
        if let Some((read_at, capabilities)) = cached.as_ref() {
            if read_at.elapsed() < MAX_AGE {
                return Ok(capabilities.clone());
            }
        }
        let kube_error = |context: &str| {
            let context = context.to_string();
            move |source| ReconcileError::Kube { context, source }
        };
        let version = self
            .client
            .apiserver_version()
            .await
            .map_err(kube_error("read the cluster's version"))?;
        let discovery = kube::Discovery::new(self.client.clone())
            .run()
            .await
            .map_err(kube_error("discover the cluster's APIs"))?;
        let mut served = Vec::new();
        for group in discovery.groups() {
            for version in group.versions() {
                for (resource, _) in group.versioned_resources(version) {
                    served.push((resource.group, resource.version, resource.kind));
                }
            }
        }
        let capabilities = pallet_formats::HelmCapabilities {
            kube_version: version.git_version,
            api_versions: render::api_versions(
                served
                    .iter()
                    .map(|(g, v, k)| (g.as_str(), v.as_str(), k.as_str())),
            ),
        };
        *cached = Some((std::time::Instant::now(), capabilities.clone()));
        Ok(capabilities)
    }

    /// Publishes an Event on `bd`; a failure to publish is logged, never fatal.
    async fn event(
        &self,
        bd: &BundleDeployment,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &bd.object_ref(&())).await {
            tracing::warn!(bundle_deployment = %bd.name_any(), error = %e, "could not publish an Event");
        }
    }

    /// Stores `record`'s snapshot, creating the agent's namespace first if it is missing (a
    /// fresh cluster, an agent run outside one): checked once per process.
    async fn save_snapshot(&self, record: &RevisionRecord) -> Result<(), ReconcileError> {
        let _phase = METRICS.phase("snapshot_store");
        let namespace = self.store.namespace().to_string();
        self.agent_namespace_ready
            .get_or_try_init(|| ensure_namespace(&self.client, &self.client, &namespace))
            .await?;
        self.store
            .save(record)
            .await
            .map_err(ReconcileError::Revision)
    }

    /// Keeps a just-stored snapshot for later passes.
    fn remember(&self, record: RevisionRecord) {
        let Ok(objects) = snapshot_objects(&record) else {
            return; // not cached: a load reports the error
        };
        self.snapshots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                (record.bundle_deployment, record.number),
                std::sync::Arc::new(objects),
            );
    }

    /// Drops a snapshot that left the history.
    fn forget(&self, bundle_deployment: &str, number: i64) {
        self.snapshots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(bundle_deployment.to_string(), number));
    }

    /// The objects of stored revision `number`, from memory or from its Secrets.
    async fn load(
        &self,
        bundle_deployment: &str,
        number: i64,
    ) -> Result<Vec<Object>, ReconcileError> {
        let key = (bundle_deployment.to_string(), number);
        if let Some(objects) = self
            .snapshots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(objects.as_ref().clone());
        }
        let record = self
            .store
            .load(bundle_deployment, number)
            .await
            .map_err(ReconcileError::Revision)?;
        let objects = snapshot_objects(&record)?;
        self.remember(record);
        Ok(objects)
    }

    /// The next backoff for `name` (1 s doubling to 5 min), counting this failure.
    pub fn backoff(&self, name: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let n = failures.entry(name.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        Duration::from_secs(1u64 << (*n - 1).min(8)).min(Duration::from_secs(300))
    }

    /// The retry delay after a failure of `name`: the backoff, but at most [`API_RETRY_MAX`] when
    /// the API server was unreachable.
    pub fn retry_after(&self, name: &str, api_unreachable: bool) -> Duration {
        let backoff = self.backoff(name);
        if api_unreachable {
            backoff.min(API_RETRY_MAX)
        } else {
            backoff
        }
    }

    fn reset_backoff(&self, name: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }

    /// The client for writes to `bd`'s objects: impersonating its ServiceAccount when it names one.
    fn writer(&self, bd: &BundleDeployment) -> Result<Client, ReconcileError> {
        let Some(sa) = &bd.spec.service_account else {
            return Ok(self.client.clone());
        };
        let mut config = self.config.clone();
        config.auth_info.impersonate = Some(format!(
            "system:serviceaccount:{}:{}",
            sa.namespace, sa.name
        ));
        config.auth_info.impersonate_groups = Some(vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{}", sa.namespace),
            "system:authenticated".into(),
        ]);
        crate::client_metrics::counted_client(config).map_err(|e| ReconcileError::Kube {
            context: "build impersonating client".into(),
            source: e,
        })
    }

    /// An applier for `bd` writing through `client` (see [`Context::writer`]).
    fn applier(&self, bd: &BundleDeployment, client: Client) -> Applier {
        Applier {
            client,
            kinds: self.kinds.clone(),
            owner: bd.name_any(),
            install_namespace: bd.spec.install_namespace.clone(),
            collision_protection: bd.spec.collision_protection(),
            parallelism: self.apply_parallelism,
            journal: Default::default(),
            revision: None,
        }
    }
}

/// What the controller should do after a reconcile.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// Look again after this long.
    RequeueAfter(Duration),
}

/// Reconciles one BundleDeployment that is not being deleted:
///
/// ```text
/// requests -> fetch -> render -> revision (decide, store) -> apply + prune -> health
///          -> (failed: roll back to the last healthy revision) -> status
/// ```
pub async fn reconcile_apply(bd: &BundleDeployment, ctx: &Context) -> Result<Next, ReconcileError> {
    changes::mark_interrupted(ctx, bd);
    report_another_writer(bd, ctx).await;
    let name = bd.name_any();
    let mut writer = StatusWriter::new(ctx, bd);
    let mut work = writer.written.clone();
    if bd.spec.paused {
        // Paused: no writes to the bundle's objects, so rollback and retry requests wait (they
        // are writes); drift is still observed so users see what resuming would revert, and a
        // reconcile request is answered by this very pass.
        let requested = rollout::pending_requests(bd.annotations(), &work).reconcile;
        let force_poll = requested.is_some();
        if let Some(value) = requested {
            work.last_handled_reconcile = Some(value);
        }
        let reason = bd.annotations().get(PAUSED_REASON_ANNOTATION).cloned();
        let drift = match observe_drift(bd, ctx, force_poll).await {
            Ok(drift) => Some(drift),
            Err(error) => {
                tracing::warn!(bundle_deployment = %name, error = %error, "paused: could not compute drift");
                None
            }
        };
        // A failed fetch is not retried at the poll interval (it would be a tight loop then).
        let requeue = match drift {
            Some(_) => poll_capped(bd, ctx, ctx.requeue_interval),
            None => ctx.requeue_interval,
        };
        writer
            .write(&mut work, &Outcome::Paused { reason, drift })
            .await?;
        return Ok(Next::RequeueAfter(requeue));
    }
    let requests = rollout::pending_requests(bd.annotations(), &work);
    if let Some(value) = &requests.reconcile {
        work.last_handled_reconcile = Some(value.clone());
    }
    let mut rollback_to = None;
    if let Some(request) = &requests.rollback {
        work.last_handled_rollback = Some(request.value.clone());
        match requested_rollback(&work, &request.to) {
            Ok(to) => rollback_to = Some(to),
            Err(why) => {
                tracing::warn!(bundle_deployment = %name, "rollback request refused: {why}");
                ctx.event(bd, true, "RollbackRequestRefused", "Rollback", why)
                    .await;
            }
        }
    }
    let result = match (health_checks(bd), rollback_to) {
        // Refused before anything is fetched or written: the active revision stays as it is.
        (Err(error), _) => Err(error),
        (Ok(_), Some(to)) => requested_rollback_to(bd, ctx, &mut writer, &mut work, to).await,
        (Ok(_), None) => {
            let force_poll = requests.reconcile.is_some();
            let retry = requests.retry.as_deref();
            progress(bd, ctx, &mut writer, &mut work, retry, force_poll).await
        }
    };
    match result {
        Ok((outcome, requeue)) => {
            // Enforcing a snapshot while the sources fail keeps the fetch's backoff growing.
            if !matches!(
                &outcome,
                Outcome::Installed {
                    sources: SourceState::Unavailable { .. },
                    ..
                }
            ) {
                ctx.reset_backoff(&name);
            }
            writer.write(&mut work, &outcome).await?;
            Ok(Next::RequeueAfter(poll_capped(bd, ctx, requeue)))
        }
        Err(error) => {
            let outcome = Outcome::Failed {
                phase: error.phase(),
                reason: error.category().to_string(),
                message: error.to_string(),
                transient: error.is_transient(),
            };
            tracing::warn!(bundle_deployment = %name, reason = %error.category(), error = %error, "reconcile failed");
            writer.write(&mut work, &outcome).await?;
            Err(error)
        }
    }
}

/// `requeue`, shortened so that the next reconcile comes when a floating source's poll is due
/// (at least a second later: a poll that just failed is retried by the error backoff instead).
fn poll_capped(bd: &BundleDeployment, ctx: &Context, requeue: Duration) -> Duration {
    let uid = bd.metadata.uid.as_deref().unwrap_or_default();
    match ctx
        .polls
        .next_due(uid, &bd.spec.sources, std::time::Instant::now())
    {
        Some(due) => requeue.min(due.max(Duration::from_secs(1))),
        None => requeue,
    }
}

/// Two agents reconciling one BundleDeployment (no leader election, overlapping selectors) both
/// write every object. Each writes its name in `status.agent`; finding another name there after
/// having written it itself means a second agent wrote since: said at warn and as an Event.
async fn report_another_writer(bd: &BundleDeployment, ctx: &Context) {
    let name = bd.name_any();
    let Some(other) = bd.status.as_ref().and_then(|s| s.agent.as_deref()) else {
        return;
    };
    let wrote_before = ctx
        .last_written
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains_key(&name);
    if other == ctx.identity || !wrote_before {
        return;
    }
    let note = format!(
        "another agent ({other}) also writes this BundleDeployment and its objects; run one agent \
         per BundleDeployment (--leader-elect for replicas, disjoint --selector for shards)"
    );
    tracing::warn!(bundle_deployment = %name, agent = %ctx.identity, other = %other, "{note}");
    ctx.event(bd, true, "AnotherAgent", "Reconcile", note).await;
}

/// The revision a rollback request may go to: a number still in the history, not the active one.
fn requested_rollback(
    status: &BundleDeploymentStatus,
    to: &Result<i64, String>,
) -> Result<i64, String> {
    let to = to.clone()?;
    if !status.revisions.iter().any(|r| r.number == to) {
        return Err(format!(
            "revision {to} is not in the history (kept: {})",
            rollout::history_numbers(status)
        ));
    }
    if status.active_revision == Some(to) {
        return Err(format!("revision {to} is already the active revision"));
    }
    Ok(to)
}

/// Reconcile result: the outcome to record and when to look again.
type Progress = Result<(Outcome, Duration), ReconcileError>;

/// Phases 1 to 5 for the current spec: fetch, render, decide the revision, apply, assess health,
/// and roll back when the revision fails.
async fn progress(
    bd: &BundleDeployment,
    ctx: &Context,
    writer: &mut StatusWriter<'_>,
    work: &mut BundleDeploymentStatus,
    retry: Option<&str>,
    force_poll: bool,
) -> Progress {
    let name = bd.name_any();
    let generation = bd.metadata.generation.unwrap_or(0);
    let RenderedBundle {
        rendered,
        digest,
        sources,
        values_from,
    } = match fetch_and_render(bd, ctx, force_poll).await {
        Ok(done) => done,
        Err(error) if error.phase() == FailedPhase::Fetch => {
            return enforce_active(bd, ctx, writer, work, error).await;
        }
        Err(error) => return Err(error),
    };
    // Certificates of registry-v1 webhooks: the caBundle is part of the content.
    let webhook_certs::Provided {
        rendered,
        digest,
        renewal_in,
    } = webhook_certs::provide(bd, ctx, rendered, digest).await?;
    // Handled once the content to retry is known: a fetch that fails keeps the request pending.
    if let Some(value) = retry {
        work.last_handled_retry = Some(value.to_string());
    }
    let objects = rendered.object_list();
    let now = now();
    // Values read from other objects are part of what was asked for, as the spec is.
    let spec_digest = values::spec_digest(&bd.spec.digest(), &values_from);
    let spec = rollout::SpecVersion {
        generation,
        digest: &spec_digest,
    };
    let (outcome, requeue) = match rollout::decide(work, &digest, &spec, retry.is_some()) {
        Decision::New { number } => {
            let record = RevisionRecord {
                bundle_deployment: name.clone(),
                number,
                generation,
                digest: digest.clone(),
                sources: sources.clone(),
                objects: objects
                    .iter()
                    .map(|o| serde_json::Value::Object(o.body().clone()))
                    .collect(),
            };
            // Stored before any write, so a rollback never needs the sources or this disk.
            ctx.save_snapshot(&record).await?;
            fault::reached(Point::Snapshot);
            ctx.remember(record);
            let dropped = rollout::start_revision(
                work,
                rollout::NewRevision {
                    number,
                    generation,
                    spec_digest: &spec_digest,
                    digest: &digest,
                    sources,
                    values_from,
                    objects: objects.len(),
                },
                bd.spec.rollout().history_limit().max(1) as usize,
                &now,
            );
            tracing::info!(bundle_deployment = %name, revision = number, digest = %digest, "new revision");
            METRICS.revision_created();
            for number in dropped {
                ctx.forget(&name, number);
                if let Err(e) = ctx.store.delete(&name, number).await {
                    tracing::warn!(bundle_deployment = %name, revision = number, error = %e, "could not delete an old revision snapshot");
                }
            }
            roll_out(bd, ctx, writer, work, objects, Transition::NewRevision).await
        }
        Decision::Continue => roll_out(bd, ctx, writer, work, objects, Transition::Reapply).await,
        Decision::Refused { failed } => {
            let Some(active) = rollout::active_revision(work).cloned() else {
                return Ok((
                    Outcome::Failed {
                        phase: FailedPhase::Install,
                        reason: "RevisionFailed".into(),
                        message: format!(
                            "this content failed as revision {failed}; waiting for a change to the spec or the sources, or a retry"
                        ),
                        transient: false,
                    },
                    ctx.requeue_interval,
                ));
            };
            if active.number == failed {
                // Held in place (onFailure: Hold, or nothing to roll back to): keep applying it
                // at the requeue interval, so that a cause fixed outside the bundle (RBAC, a
                // missing namespace) heals it without flapping between versions.
                roll_out(bd, ctx, writer, work, objects, Transition::Reapply).await
            } else {
                // The failed content stays out; keep the active revision as stored.
                let objects = ctx.load(&name, active.number).await?;
                roll_out(bd, ctx, writer, work, objects, Transition::Reapply).await
            }
        }
    }?;
    let current = rollout::active_revision(work).is_some_and(|r| r.digest == digest);
    let requeue = renewal_in.map_or(requeue, |renewal| requeue.min(renewal));
    Ok((with_flags(outcome, SourceState::Fetched, current), requeue))
}

/// The sources could not be fetched (down, slow, refused credentials): keep the active revision
/// applied from its stored snapshot and judge its health, so an outage never stops enforcement,
/// and report the source problem in Unpacked only. Without an active revision, or when its
/// snapshot cannot be read, the fetch error stands.
async fn enforce_active(
    bd: &BundleDeployment,
    ctx: &Context,
    writer: &mut StatusWriter<'_>,
    work: &mut BundleDeploymentStatus,
    error: ReconcileError,
) -> Progress {
    let name = bd.name_any();
    let Some(active) = rollout::active_revision(work).map(|r| r.number) else {
        return Err(error);
    };
    let objects = match ctx.load(&name, active).await {
        Ok(objects) => objects,
        Err(load_error) => {
            tracing::warn!(bundle_deployment = %name, revision = active, error = %load_error, "sources unavailable and the active snapshot unreadable");
            return Err(error);
        }
    };
    tracing::warn!(bundle_deployment = %name, revision = active, reason = error.category(), error = %error, "sources unavailable; enforcing the active revision from its snapshot");
    let (outcome, requeue) = roll_out(bd, ctx, writer, work, objects, Transition::Reapply).await?;
    // Retried like a failed fetch: with backoff while it may pass, else at the requeue period.
    let retry = if error.is_transient() {
        ctx.backoff(&name)
    } else {
        ctx.requeue_interval
    };
    let sources = SourceState::Unavailable {
        reason: error.category().to_string(),
        message: error.to_string(),
        transient: error.is_transient(),
    };
    Ok((with_flags(outcome, sources, false), requeue.min(retry)))
}

/// A rollback on request: re-apply stored revision `to` (no fetch: the sources may be gone).
async fn requested_rollback_to(
    bd: &BundleDeployment,
    ctx: &Context,
    writer: &mut StatusWriter<'_>,
    work: &mut BundleDeploymentStatus,
    to: i64,
) -> Progress {
    let from = work.active_revision;
    let message = match from {
        Some(from) => format!("rolled back to revision {to} on request (was revision {from})"),
        None => format!("rolled back to revision {to} on request"),
    };
    let objects = ctx.load(&bd.name_any(), to).await?;
    rollout::start_rollback(work, to, &message, &now());
    METRICS.rollback("request");
    ctx.event(bd, false, "RollbackRequested", "Rollback", message.clone())
        .await;
    let transition = Transition::Rollback {
        automatic: false,
        reason: status::REASON_ROLLBACK_REQUESTED.into(),
        message,
    };
    let (outcome, requeue) = roll_out(bd, ctx, writer, work, objects, transition).await?;
    // The sources were not fetched: Unpacked keeps what the last fetch said.
    Ok((with_flags(outcome, SourceState::NotFetched, false), requeue))
}

/// Sets what [`apply_revision`] cannot know on an Installed outcome: what this pass knows of the
/// sources, and whether the active revision is what they render.
fn with_flags(outcome: Outcome, sources: SourceState, current: bool) -> Outcome {
    match outcome {
        Outcome::Installed {
            inventory,
            skipped,
            written,
            health,
            ..
        } => Outcome::Installed {
            inventory,
            skipped,
            written,
            health,
            sources,
            spec_current: current,
        },
        other => other,
    }
}

/// Applies the active revision's `objects` (as `transition` says why), assesses health, and when
/// the revision fails, rolls back to the last healthy revision (onFailure: Rollback) and applies
/// that one instead, in the same pass.
async fn roll_out(
    bd: &BundleDeployment,
    ctx: &Context,
    writer: &mut StatusWriter<'_>,
    work: &mut BundleDeploymentStatus,
    mut objects: Vec<Object>,
    mut transition: Transition,
) -> Progress {
    let name = bd.name_any();
    loop {
        // A stored revision re-applied after a renewal trusts the current webhook CA.
        objects = webhook_certs::with_current_bundle(ctx, bd, objects).await?;
        let was_failed =
            rollout::active_revision(work).map(|r| r.phase) == Some(RevisionPhase::Failed);
        let (reason, message) =
            match apply_revision(bd, ctx, writer, work, &objects, &transition).await? {
                Step::Done(outcome, requeue) => return Ok((outcome, requeue)),
                Step::Failed { reason, message } => (reason, message),
            };
        let failed = work.active_revision.unwrap_or_default();
        rollout::mark_failed(work, &reason, &message);
        if !was_failed {
            // A held revision failing again on a later pass is no news: no repeated Event.
            tracing::warn!(bundle_deployment = %name, revision = failed, %reason, "revision failed: {message}");
            ctx.event(
                bd,
                true,
                &reason,
                "Rollout",
                format!("revision {failed} failed: {message}"),
            )
            .await;
        }
        let target = work
            .last_healthy_revision
            .filter(|healthy| *healthy != failed)
            .filter(|healthy| work.revisions.iter().any(|r| r.number == *healthy));
        let policy = bd.spec.rollout().on_failure();
        let (Some(to), OnFailure::Rollback) = (target, policy) else {
            let why = if policy == OnFailure::Hold {
                "rollout.onFailure is Hold"
            } else {
                "no earlier healthy revision to roll back to"
            };
            let outcome = Outcome::Failed {
                phase: FailedPhase::Install,
                reason,
                message: format!(
                    "revision {failed} failed: {message}; left in place and re-applied at every \
                     pass until it is healthy ({why})"
                ),
                transient: false,
            };
            return Ok((outcome, ctx.requeue_interval));
        };
        let message =
            format!("revision {failed} failed ({reason}: {message}); rolled back to revision {to}");
        objects = ctx.load(&name, to).await?;
        rollout::start_rollback(work, to, &message, &now());
        METRICS.rollback(if reason == REASON_DEADLINE {
            "deadline"
        } else {
            "apply-error"
        });
        ctx.event(
            bd,
            true,
            status::REASON_ROLLED_BACK,
            "Rollback",
            message.clone(),
        )
        .await;
        transition = Transition::Rollback {
            automatic: true,
            reason,
            message,
        };
    }
}

/// Condition and revision reason when a revision misses its progress deadline.
pub const REASON_DEADLINE: &str = "ProgressDeadlineExceeded";

/// What applying a revision came to.
enum Step {
    /// Applied; the outcome to record and when to look again.
    Done(Outcome, Duration),
    /// The revision failed (a permanent apply error, a failed object, or its deadline).
    Failed {
        /// CamelCase reason.
        reason: String,
        /// What failed, where.
        message: String,
    },
}

/// Environment variable naming a fault to inject, for crash tests only: `exit-after-rollback-recorded`
/// makes the agent exit right after recording that a rollback started and before re-applying
/// anything, as a crash at the worst moment would.
pub const FAULT_ENV: &str = "PALLET_FAULT_INJECT";

/// Applies the active revision's `objects`: records the intent first (for new revisions and
/// rollbacks), applies in stages, prunes, then assesses health against the deadline.
async fn apply_revision(
    bd: &BundleDeployment,
    ctx: &Context,
    writer: &mut StatusWriter<'_>,
    work: &mut BundleDeploymentStatus,
    objects: &[Object],
    transition: &Transition,
) -> Result<Step, ReconcileError> {
    let client = ctx.writer(bd)?;
    if let Some(namespace) = &bd.spec.install_namespace {
        ensure_namespace(&ctx.client, &client, namespace).await?;
    }
    let mut applier = ctx.applier(bd, client);
    applier.revision = work.active_revision;
    // Helm hooks run at their events, not as release objects (see `hooks`).
    let (objects, hook_objects) = &hook_plan::split(objects, is_helm(bd));
    hook_plan::prepare(work, hook_objects, transition);
    let active = rollout::active_revision(work).cloned();
    let on_its_way = active.as_ref().is_some_and(|r| {
        matches!(
            r.phase,
            RevisionPhase::Applying | RevisionPhase::Progressing
        )
    });
    // A revision whose pre hooks started recorded its inventory when they did.
    let hooks_started = active
        .as_ref()
        .is_some_and(|r| r.hooks.iter().any(|h| h.phase != HookPhase::Pending));
    if *transition != Transition::Reapply
        || (active.as_ref().map(|r| r.phase) == Some(RevisionPhase::Applying) && !hooks_started)
    {
        // Record what is about to happen, and every object that may end up on the cluster,
        // before the first write: after a crash the next pass finishes the job and prunes.
        let mut inventory: BTreeSet<ObjectReference> = work
            .inventory
            .iter()
            .flat_map(|i| i.objects.iter().cloned())
            .collect();
        for (key, api_version) in applier.resolve_keys(objects).await? {
            inventory.insert(reference(&key, &api_version));
        }
        let outcome = Outcome::Applying {
            inventory: inventory.into_iter().collect(),
            transition: transition.clone(),
        };
        writer.write(work, &outcome).await?;
        fault::reached(Point::Intent);
        if matches!(transition, Transition::Rollback { .. })
            && std::env::var(FAULT_ENV).as_deref() == Ok("exit-after-rollback-recorded")
        {
            tracing::error!("fault injected: exiting after recording the rollback");
            std::process::exit(3);
        }
    }
    let log_reason = match transition {
        Transition::NewRevision => Reason::NewRevision,
        Transition::Rollback { .. } => Reason::Rollback,
        // Finishing an interrupted apply is still the revision's own apply.
        Transition::Reapply
            if active.as_ref().map(|r| r.phase) == Some(RevisionPhase::Applying) =>
        {
            Reason::NewRevision
        }
        Transition::Reapply => Reason::Drift,
    };
    let digest = active
        .as_ref()
        .map(|r| r.digest.clone())
        .unwrap_or_default();
    if let Some(step) = hooks::before(ctx, bd, &applier, work, hook_objects).await? {
        return Ok(step);
    }
    let hook_keys = applier
        .resolve_keys(&hook_plan::objects(hook_objects))
        .await?;
    // Each write is logged as it returns (see `changes::logging`).
    let logged = changes::logging(
        ctx,
        bd,
        &applier,
        (work.active_revision, &digest),
        log_reason,
    );
    let result = apply_and_prune(&logged, objects, work, &hook_keys).await;
    log_writes(
        ctx,
        bd,
        &logged,
        objects,
        (work.active_revision, &digest),
        log_reason,
        result.as_ref().err(),
    )
    .await;
    let (applied, pruned) = match result {
        Ok(done) => done,
        Err(error) if on_its_way && !error.is_transient() => {
            return Ok(Step::Failed {
                reason: error.category().to_string(),
                message: error.to_string(),
            })
        }
        Err(error) => return Err(error.into()),
    };
    rollout::mark_applied(work);

    let inventory: Vec<ObjectReference> = applied
        .iter()
        .filter(|a| a.outcome != ApplyOutcome::Skipped)
        .map(|a| reference(&a.key, &a.api_version))
        .collect();
    let skipped: Vec<ObjectReference> = applied
        .iter()
        .filter(|a| a.outcome == ApplyOutcome::Skipped)
        .map(|a| ObjectReference {
            message: Some("optional; the cluster does not serve this kind".into()),
            ..reference(&a.key, &a.api_version)
        })
        .collect();
    if let Some(owned) = &ctx.owned {
        for a in applied
            .iter()
            .filter(|a| a.outcome != ApplyOutcome::Skipped)
        {
            // Resolved moments ago by the apply, so this is a cache hit.
            if let Ok(Some((_, resource))) = applier.api_for_existing(&a.key, &a.api_version).await
            {
                owned.watch(&resource);
            }
        }
    }
    for key in &pruned.deleted {
        tracing::info!(bundle_deployment = %bd.name_any(), object = %key, "pruned");
    }
    for (key, why) in &pruned.kept {
        tracing::warn!(bundle_deployment = %bd.name_any(), object = %key, "not pruned: {why}");
    }
    let written = applied
        .iter()
        .filter(|a| matches!(a.outcome, ApplyOutcome::Created | ApplyOutcome::Updated))
        .count();

    let mut health = assess_health(&applied, &ctx.health, &health_checks(bd)?);
    let probes = ctx.probes.assess(
        &bd.name_any(),
        work.active_revision.unwrap_or_default(),
        &bd.spec.health_checks,
        health.healthy,
    );
    add_probes(&mut health, probes);
    let after = hooks::after(ctx, bd, &applier, work, hook_objects, &mut health);
    if let Some(step) = after.await? {
        return Ok(step);
    }
    let now = now();
    let deadline =
        parse_duration(bd.spec.rollout().progress_deadline()).unwrap_or(Duration::from_secs(600));
    let mut requeue = ctx.requeue_interval;
    if health.healthy {
        let was = rollout::active_revision(work).map(|r| r.phase);
        rollout::mark_healthy(work, &now);
        if was != Some(RevisionPhase::Healthy) {
            if let Some(number) = work.active_revision {
                tracing::info!(bundle_deployment = %bd.name_any(), revision = number, "revision healthy");
            }
        }
    } else if rollout::active_revision(work).map(|r| r.phase) == Some(RevisionPhase::Progressing) {
        // A user's health check that says failed is meant to end the wait (Flux's `failed`).
        if let Some(message) = &health.failed_check {
            return Ok(Step::Failed {
                reason: REASON_HEALTH_CHECK_FAILED.into(),
                message: message.clone(),
            });
        }
        // An object reported Failed (a Pod in CrashLoopBackOff) can still recover, so only the
        // deadline fails a revision: the contract users tune with progressDeadline.
        if rollout::deadline_passed(work, deadline, &now) {
            return Ok(Step::Failed {
                reason: REASON_DEADLINE.into(),
                message: format!(
                    "not healthy within rollout.progressDeadline ({}): {}",
                    bd.spec.rollout().progress_deadline(),
                    health.message
                ),
            });
        }
        fault::reached(Point::Health);
        // Watches on the objects usually bring the change sooner; this bounds the wait.
        let remaining = rollout::deadline_remaining(work, deadline, &now).unwrap_or_default();
        requeue = requeue
            .min(PROGRESS_POLL)
            .min(remaining + Duration::from_millis(100));
    }
    Ok(Step::Done(
        Outcome::Installed {
            inventory,
            skipped,
            written,
            health,
            sources: SourceState::Fetched,
            spec_current: false,
        },
        requeue,
    ))
}

/// How often a progressing revision is re-assessed when no watch event comes first.
const PROGRESS_POLL: Duration = Duration::from_secs(5);

/// True for helm charts, the only format with hooks.
fn is_helm(bd: &BundleDeployment) -> bool {
    bd.spec.format == crate::api::BundleFormat::Helm
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// While paused: fetch and render as usual, then only read the live objects and list those that
/// differ from the bundle. No write of any kind to the bundle's objects.
async fn observe_drift(
    bd: &BundleDeployment,
    ctx: &Context,
    force_poll: bool,
) -> Result<Vec<ObjectReference>, ReconcileError> {
    let RenderedBundle {
        rendered,
        digest,
        values_from,
        ..
    } = fetch_and_render(bd, ctx, force_poll).await?;
    // Drift is measured against the caBundle the agent keeps (read-only while paused).
    let (rendered, digest) = webhook_certs::with_kept_bundle(ctx, bd, rendered, digest).await?;
    let status = bd.status.clone().unwrap_or_default();
    let spec_digest = values::spec_digest(&bd.spec.digest(), &values_from);
    let spec = rollout::SpecVersion {
        generation: bd.metadata.generation.unwrap_or(0),
        digest: &spec_digest,
    };
    // What resuming would apply: the rendered set, unless it is refused content after a
    // rollback, in which case the active revision's snapshot stays.
    let objects = match rollout::decide(&status, &digest, &spec, false) {
        Decision::Refused { failed } => match status.active_revision {
            Some(active) if active != failed => ctx.load(&bd.name_any(), active).await?,
            _ => rendered.object_list(),
        },
        _ => rendered.object_list(),
    };
    // Hooks are not kept in line with the bundle: helm leaves them alone once they ran.
    let (objects, _) = hook_plan::split(&objects, is_helm(bd));
    // Reads go through the agent's own client: observing is not acting on the user's behalf.
    let drifted = ctx.applier(bd, ctx.client.clone()).drift(&objects).await?;
    Ok(drifted
        .into_iter()
        .map(|d| ObjectReference {
            message: Some(d.message),
            ..reference(&d.key, &d.api_version)
        })
        .collect())
}

/// Phases 1 and 2: read the `valuesFrom` objects, fetch the sources, render them (or reuse the
/// last render when nothing it depends on changed). Returns the rendered set, every source
/// resolved and every `valuesFrom` reference as read.
///
/// Floating sources are re-resolved only when their poll is due, or with `force_poll` (a
/// reconcile request: the user asked to look now).
async fn fetch_and_render(
    bd: &BundleDeployment,
    ctx: &Context,
    force_poll: bool,
) -> Result<RenderedBundle, ReconcileError> {
    let _phase = METRICS.phase("fetch_render");
    let (observed, values) = values::read_values(&ctx.client, &ctx.secret_policy, bd).await;
    if let Some(watches) = &ctx.values_watches {
        // Before the result is known: a missing required object is watched for its creation.
        watches.set(&bd.name_any(), observed);
    }
    let values = values?;
    // Only helm charts look at the cluster (`.Capabilities`); other formats never pay for it.
    let capabilities = match bd.spec.format {
        crate::api::BundleFormat::Helm => Some(ctx.helm_capabilities().await?),
        _ => None,
    };
    let fetched = fetch::fetch_sources(ctx, bd, force_poll).await?;
    fault::reached(Point::Fetch);
    let sources = fetched
        .iter()
        .map(|f| ResolvedSource {
            kind: f.kind,
            reference: f.reference.clone(),
            resolved: f.resolved.clone(),
            version: f.version.clone(),
        })
        .collect();
    let config = render::render_config(bd, capabilities, Some(values.values));
    let uid = bd.metadata.uid.as_deref().unwrap_or_default();
    let format = render::format(bd.spec.format);
    let allow_empty = bd.spec.rollout().allow_empty();
    let inputs = render_memo::inputs_digest(format, &config, allow_empty, &fetched);
    let kept = match ctx.renders.get(uid, &inputs) {
        Some(kept) => kept,
        None => {
            let tree = fetch::assemble_tree(&ctx.fetcher, &fetched)?;
            let result = render::render_with(bd, &tree, &config);
            fetch::remove_tree(&tree);
            METRICS.rendered();
            let kept = match result {
                Ok(rendered) => render_memo::KeptRender::Objects {
                    digest: rendered.digest(),
                    rendered: std::sync::Arc::new(rendered),
                },
                // A local read failure may pass: not kept.
                Err(error @ pallet_formats::RenderError::Io { .. }) => return Err(error.into()),
                Err(error) => render_memo::KeptRender::Refused {
                    category: error.category(),
                    message: error.to_string(),
                },
            };
            ctx.renders.put(uid, inputs, kept.clone());
            kept
        }
    };
    match kept {
        render_memo::KeptRender::Objects { rendered, digest } => Ok(RenderedBundle {
            rendered,
            digest,
            sources,
            values_from: values.resolved,
        }),
        render_memo::KeptRender::Refused { category, message } => {
            Err(ReconcileError::RenderRefused { category, message })
        }
    }
}

/// What phases 1 and 2 produce: the rendered set, its digest, the resolved sources and the
/// `valuesFrom` references as read.
struct RenderedBundle {
    rendered: std::sync::Arc<pallet_formats::Rendered>,
    digest: String,
    sources: Vec<ResolvedSource>,
    values_from: Vec<ResolvedValues>,
}

/// Applies `objects`, then prunes what the previous inventory had and they do not.
async fn apply_and_prune(
    applier: &Applier,
    objects: &[Object],
    current: &BundleDeploymentStatus,
    hooks: &[(ObjectKey, String)],
) -> Result<(Vec<Applied>, crate::apply::Pruned), ApplyError> {
    let _phase = METRICS.phase("apply_prune");
    let applied = applier.apply(objects).await?;
    // Hooks are never pruned (an inventory written before hooks had their own phase lists them).
    let kept: Vec<ObjectKey> = applied
        .iter()
        .filter(|a| a.outcome != ApplyOutcome::Skipped)
        .map(|a| a.key.clone())
        .chain(hooks.iter().map(|(key, _)| key.clone()))
        .collect();
    let previous = current
        .inventory
        .as_ref()
        .map(|i| i.objects.clone())
        .unwrap_or_default();
    let previous_keys: Vec<ObjectKey> = previous.iter().map(key_of).collect();
    let versions: HashMap<ObjectKey, String> = previous
        .iter()
        .map(|r| (key_of(r), api_version_of(r)))
        .collect();
    let prune: Vec<(ObjectKey, String)> = plan::prune_set(&previous_keys, &kept)
        .into_iter()
        .filter_map(|k| versions.get(&k).cloned().map(|v| (k, v)))
        .collect();
    let pruned = applier.prune(&prune).await?;
    Ok((applied, pruned))
}

async fn ensure_namespace(
    reader: &Client,
    writer: &Client,
    name: &str,
) -> Result<(), ReconcileError> {
    // Created when missing and never deleted by pallet: the namespace may hold things that are
    // not the bundle's, so it is not part of the inventory. Looking is the agent's own business;
    // creating is a write for the bundle, so it goes through the (impersonating) writer.
    let context = || format!("create namespace {name}");
    let kube_error = |e| ReconcileError::Kube {
        context: context(),
        source: e,
    };
    if Api::<Namespace>::all(reader.clone())
        .get_opt(name)
        .await
        .map_err(kube_error)?
        .is_some()
    {
        return Ok(());
    }
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))
        .map_err(|e| kube_error(kube::Error::SerdeError(e)))?;
    match Api::<Namespace>::all(writer.clone())
        .create(&PostParams::default(), &namespace)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 403 => {
            Err(ReconcileError::Forbidden(format!(
                "namespace {name} does not exist and may not be created: {}",
                status.message
            )))
        }
        Err(e) => Err(kube_error(e)),
    }
}

/// Deletes (or orphans) the objects of a BundleDeployment that is being deleted. Works while
/// paused: deleting is the user's explicit request.
pub async fn cleanup(bd: &BundleDeployment, ctx: &Context) -> Result<Next, ReconcileError> {
    changes::mark_interrupted(ctx, bd);
    let name = bd.name_any();
    let uid = bd.metadata.uid.as_deref().unwrap_or_default();
    ctx.polls.forget(uid);
    ctx.fetches.forget(uid);
    ctx.renders.forget(uid);
    ctx.probes.forget(&name);
    let inventory = bd
        .status
        .as_ref()
        .and_then(|s| s.inventory.clone())
        .unwrap_or_default();
    let keys: Vec<ObjectKey> = inventory.objects.iter().map(key_of).collect();
    let versions: HashMap<ObjectKey, String> = inventory
        .objects
        .iter()
        .map(|r| (key_of(r), api_version_of(r)))
        .collect();
    let applier = changes::logging_deletion(ctx, bd, ctx.applier(bd, ctx.writer(bd)?));
    let result = match bd.spec.deletion_policy() {
        DeletionPolicy::Delete => {
            // prune_set against an empty set orders every object for deletion: reverse stages.
            let order: Vec<(ObjectKey, String)> = plan::prune_set(&keys, &[])
                .into_iter()
                .filter_map(|k| versions.get(&k).cloned().map(|v| (k, v)))
                .collect();
            // Objects the writer may not even read are checked with the agent's own identity:
            // one that was never created (its ServiceAccount was refused) needs no deletion.
            let own = ctx.applier(bd, ctx.client.clone());
            delete_all(&applier, &own, &name, &order).await
        }
        DeletionPolicy::Orphan => {
            let mut result = Ok(());
            for r in &inventory.objects {
                if let Err(e) = applier.orphan(&key_of(r), &api_version_of(r)).await {
                    result = Err(e.into());
                    break;
                }
                let mut entry = ctx.changelog.entry(
                    &name,
                    Operation::Update,
                    Reason::Deletion,
                    change_object(&key_of(r), &api_version_of(r)),
                );
                entry.fields_changed = vec![format!(".metadata.labels.{}", plan::OWNER_LABEL)];
                entry.details.insert("orphaned".into(), json!(true));
                ctx.changelog.record(&entry);
            }
            if result.is_ok() {
                let namespaces: BTreeSet<String> = inventory
                    .objects
                    .iter()
                    .map(|r| r.namespace.clone())
                    .filter(|namespace| !namespace.is_empty())
                    .chain(bd.spec.install_namespace.clone())
                    .collect();
                result = webhook_certs::orphan_secrets(ctx, bd, &namespaces).await;
            }
            result
        }
    };
    if let Err(ReconcileError::DeletionForbidden(message)) = &result {
        // Said on the object, not only in the log: the deletion waits for someone to act.
        let mut writer = StatusWriter::new(ctx, bd);
        let mut work = writer.written.clone();
        let outcome = Outcome::Failed {
            phase: FailedPhase::Install,
            reason: "DeletionForbidden".into(),
            message: message.clone(),
            transient: true,
        };
        if let Err(e) = writer.write(&mut work, &outcome).await {
            tracing::warn!(bundle_deployment = %name, error = %e, "could not report the blocked deletion");
        }
    }
    // Each delete was logged as it returned.
    if !applier.journal.take().is_empty() {
        ctx.changelog.sync();
    }
    result?;
    // The objects are gone (or orphaned): their revision snapshots go with the BundleDeployment.
    ctx.store
        .delete_all(&name)
        .await
        .map_err(ReconcileError::Revision)?;
    ctx.last_written
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&name);
    if let Some(watches) = &ctx.values_watches {
        watches.set(&name, Vec::new());
    }
    Ok(Next::RequeueAfter(ctx.requeue_interval))
}

/// Deletes the objects in `order` and waits briefly for them to be gone. Objects still there
/// (terminating, e.g. a Namespace being emptied) make it return [`ReconcileError::Deleting`], so
/// the finalizer stays and the deletion is checked again with backoff.
///
/// An object the writer may not read or delete is checked with `own` (the agent's identity):
/// when it does not exist (never created: its ServiceAccount was refused), it needs no deletion;
/// when it exists, or the agent cannot tell, the deletion stops with
/// [`ReconcileError::DeletionForbidden`] naming each such object and why.
async fn delete_all(
    applier: &Applier,
    own: &Applier,
    name: &str,
    order: &[(ObjectKey, String)],
) -> Result<(), ReconcileError> {
    let mut remaining = Vec::new();
    for attempt in 0..5 {
        let mut pruned = crate::apply::Pruned::default();
        let mut blocked = Vec::new();
        for one in order {
            match applier.prune(std::slice::from_ref(one)).await {
                Ok(done) => {
                    pruned.deleted.extend(done.deleted);
                    pruned.kept.extend(done.kept);
                    pruned.terminating.extend(done.terminating);
                }
                Err(error) if error.category() == "Forbidden" => {
                    match own.exists(&one.0, &one.1).await {
                        Ok(false) => {
                            tracing::info!(bundle_deployment = %name, object = %one.0, "not deleted: it was never created");
                        }
                        Ok(true) => blocked.push(error.to_string()),
                        Err(check) => blocked.push(format!(
                            "{error} (and the agent cannot tell whether it exists: {check})"
                        )),
                    }
                }
                Err(error) => return Err(error.into()),
            }
        }
        for (key, why) in &pruned.kept {
            tracing::warn!(bundle_deployment = %name, object = %key, "not deleted: {why}");
        }
        if !blocked.is_empty() {
            let shown: Vec<&str> = blocked.iter().take(3).map(String::as_str).collect();
            return Err(ReconcileError::DeletionForbidden(format!(
                "{} objects may not be deleted: {}; grant the delete (or remove the finalizer {FINALIZER} to leave them)",
                blocked.len(),
                shown.join("; ")
            )));
        }
        if pruned.deleted.is_empty() && pruned.terminating.is_empty() {
            return Ok(());
        }
        remaining = pruned
            .deleted
            .into_iter()
            .chain(pruned.terminating)
            .map(|k| k.to_string())
            .collect();
        tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
    }
    let shown: Vec<&str> = remaining.iter().take(5).map(String::as_str).collect();
    Err(ReconcileError::Deleting(format!(
        "{} objects ({})",
        remaining.len(),
        shown.join(", ")
    )))
}

/// Writes status for one reconcile: remembers what is on the server, so that a pass that
/// writes several times (before applying, after) patches only what changed.
struct StatusWriter<'a> {
    ctx: &'a Context,
    bd: &'a BundleDeployment,
    /// The status as last written (or read).
    written: BundleDeploymentStatus,
}

impl<'a> StatusWriter<'a> {
    fn new(ctx: &'a Context, bd: &'a BundleDeployment) -> Self {
        StatusWriter {
            ctx,
            bd,
            written: bd.status.clone().unwrap_or_default(),
        }
    }

    /// Applies `outcome` to `work` (see [`status::next_status`]) and patches the difference.
    async fn write(
        &mut self,
        work: &mut BundleDeploymentStatus,
        outcome: &Outcome,
    ) -> Result<(), ReconcileError> {
        let _phase = METRICS.phase("status_write");
        *work = status::next_status(work, self.bd.metadata.generation, outcome, &now());
        work.agent = Some(self.ctx.identity.clone());
        if *work == self.written {
            return Ok(());
        }
        let api: Api<BundleDeployment> = Api::all(self.ctx.client.clone());
        let patch = json!({"status": status_merge_patch(&self.written, work)});
        let patched = api
            .patch_status(
                &self.bd.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .map_err(|e| ReconcileError::Kube {
                context: "write status".into(),
                source: e,
            })?;
        if let Some(version) = patched.metadata.resource_version {
            self.ctx
                .last_written
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(self.bd.name_any(), version);
        }
        self.written = work.clone();
        Ok(())
    }
}

/// A stored revision's objects, ready to apply again (an entry that is not an object is an
/// error naming the snapshot, never skipped).
fn snapshot_objects(record: &RevisionRecord) -> Result<Vec<Object>, pallet_formats::RenderError> {
    record
        .objects
        .iter()
        .enumerate()
        .map(|(document, body)| {
            let origin = pallet_formats::Origin {
                file: format!(
                    "snapshot of revision {} of {}",
                    record.number, record.bundle_deployment
                ),
                document,
                line: 0,
            };
            Object::new(body.clone(), origin)
        })
        .collect()
}

/// The JSON merge patch from `current` to `next`: `next` itself, plus an explicit null for every
/// field `current` has and `next` dropped (optional fields are left out when serialized, and a
/// merge patch only removes what it names).
fn status_merge_patch(
    current: &BundleDeploymentStatus,
    next: &BundleDeploymentStatus,
) -> serde_json::Value {
    let mut patch = serde_json::to_value(next).unwrap_or_else(|_| json!({}));
    if let (Some(patch), Ok(serde_json::Value::Object(before))) =
        (patch.as_object_mut(), serde_json::to_value(current))
    {
        for key in before.keys() {
            patch.entry(key.clone()).or_insert(serde_json::Value::Null);
        }
    }
    patch
}

fn reference(key: &ObjectKey, api_version: &str) -> ObjectReference {
    let version = api_version
        .rsplit('/')
        .next()
        .unwrap_or(api_version)
        .to_string();
    ObjectReference {
        group: key.group.clone(),
        version,
        kind: key.kind.clone(),
        namespace: key.namespace.clone().unwrap_or_default(),
        name: key.name.clone(),
        message: None,
    }
}

fn key_of(r: &ObjectReference) -> ObjectKey {
    ObjectKey {
        group: r.group.clone(),
        kind: r.kind.clone(),
        namespace: (!r.namespace.is_empty()).then(|| r.namespace.clone()),
        name: r.name.clone(),
    }
}

fn api_version_of(r: &ObjectReference) -> String {
    if r.group.is_empty() {
        r.version.clone()
    } else {
        format!("{}/{}", r.group, r.version)
    }
}

/// Object keys of an inventory, for tests and tools.
pub fn inventory_keys(status: &BundleDeploymentStatus) -> BTreeSet<ObjectKey> {
    status
        .inventory
        .iter()
        .flat_map(|i| i.objects.iter().map(key_of))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Drift;

    #[test]
    fn merge_patch_removes_dropped_fields() {
        let current = BundleDeploymentStatus {
            drift: Some(Drift {
                count: 1,
                objects: vec![],
            }),
            observed_generation: Some(1),
            ..Default::default()
        };
        let next = BundleDeploymentStatus {
            observed_generation: Some(2),
            ..Default::default()
        };
        let patch = status_merge_patch(&current, &next);
        assert_eq!(patch, json!({"observedGeneration": 2, "drift": null}));
    }
}
