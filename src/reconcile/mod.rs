//! The reconciler: one BundleDeployment at a time, as a pipeline of phases.
//!
//! ```text
//! fetch (I/O) -> render (pure) -> apply in stages + prune (I/O) -> status (pure) -> patch status (I/O)
//! ```
//!
//! Each phase has its own module; this one wires them together, handles pause and deletion, and
//! turns errors into conditions. Health, revisions and rollback come with their own phases.

pub mod changes;
mod cleanup;
mod content;
pub mod context;
mod revision_apply;
mod rollback_hold;
mod status_writer;

pub use cleanup::cleanup;
use content::*;
pub use context::Context;
use revision_apply::*;
use status_writer::*;
pub mod chart_crds;
pub mod controller;
pub mod delete_hooks;
pub mod dependencies;
pub mod dependency_watch;
pub mod fetch;
pub mod fetch_pool;
pub mod function_calls;
pub mod functions;
pub mod health_checks;
pub mod hook_plan;
pub mod hook_requests;
pub mod hooks;
pub mod lookups;
pub mod owned;
pub mod pod_problems;
pub mod polling;
pub mod processors;
pub mod render;
pub mod render_key;
pub mod render_memo;
pub mod render_time;
pub mod rollout;
pub mod scope;
pub mod settle;
pub mod status;
pub mod takeover;
pub mod unwritten_intent;
pub mod values;
pub mod values_watch;
pub mod webhook_certs;
pub mod workers;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use pallet_formats::ObjectKey;

use crate::api::{BundleDeployment, BundleDeploymentStatus, ObjectReference};
use crate::apply::ApplyError;
use crate::fault::{self, Point};
use crate::metrics::METRICS;
use crate::revision::{RevisionError, RevisionRecord};
use crate::source::SourceError;
use changes::change_object;
use health_checks::health_checks;
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
    /// message names each with the time it started, or what it still waits for (a fetch slot).
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
    /// A render could not finish for a reason that may pass (a function processor out of
    /// reach): not remembered, retried with backoff while the active revision stays enforced.
    #[error("render: {message}")]
    RenderUnavailable {
        /// The category (`FunctionUnavailable`).
        category: &'static str,
        /// What went wrong.
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
    /// A helm delete hook of a BundleDeployment being deleted is running: the finalizer stays
    /// and the pass looks again after `after` (or at the hook's next watch event).
    #[error("{message}")]
    DeleteHookRunning {
        /// Which hook and what it is doing.
        message: String,
        /// When to look again at the latest.
        after: Duration,
    },
    /// A helm delete hook failed: the deletion stops, the finalizer stays until a retry
    /// request or its removal by hand.
    #[error("{0}")]
    DeleteHookFailed(String),
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
    /// A `spec.healthChecks` expression is over its CEL budget for any object (each named with
    /// its check and the bound).
    #[error("{0}")]
    CelBudgetExceeded(String),
    /// A function processor asks for what this agent refuses (a `timeout` over
    /// `--function-timeout-max`, a host not allowed), each named with its processor.
    #[error("{0}")]
    InvalidProcessor(String),
    /// The BundleDeployment names no `spec.serviceAccount` and the agent requires one
    /// (`--require-service-account`).
    #[error("{0}")]
    ServiceAccountRequired(String),
    /// The BundleDeployment left this agent's scope (relabelled to another shard) during the
    /// pass: the pass stops without writing (see [`scope`]).
    #[error("{0}")]
    OutOfScope(String),
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
            ReconcileError::RenderRefused { category, .. }
            | ReconcileError::RenderUnavailable { category, .. } => category,
            ReconcileError::Apply(e) => e.category(),
            ReconcileError::Forbidden(_) => "Forbidden",
            ReconcileError::Revision(e) => e.category(),
            ReconcileError::Deleting(_) => "Deleting",
            ReconcileError::DeletionForbidden(_) => "DeletionForbidden",
            ReconcileError::DeleteHookRunning { .. } => status::REASON_RUNNING_HOOKS,
            ReconcileError::DeleteHookFailed(_) => hooks::REASON_HOOK_FAILED,
            ReconcileError::Kube { .. } => "KubernetesAPIError",
            ReconcileError::InvalidHealthCheck(_) => "InvalidHealthCheck",
            ReconcileError::CelBudgetExceeded(_) => health_checks::REASON_CEL_BUDGET,
            ReconcileError::InvalidProcessor(_) => "InvalidProcessor",
            ReconcileError::ServiceAccountRequired(_) => "ServiceAccountRequired",
            ReconcileError::OutOfScope(_) => "OutOfScope",
        }
    }

    /// True when retrying without a change may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            ReconcileError::Source(e) => e.is_transient(),
            ReconcileError::Secret { .. }
            | ReconcileError::Values { .. }
            | ReconcileError::RenderRefused { .. }
            | ReconcileError::Certificates { .. }
            | ReconcileError::InvalidHealthCheck(_)
            | ReconcileError::CelBudgetExceeded(_)
            | ReconcileError::InvalidProcessor(_)
            | ReconcileError::ServiceAccountRequired(_)
            | ReconcileError::OutOfScope(_)
            | ReconcileError::DeleteHookFailed(_)
            | ReconcileError::Forbidden(_) => false,
            // A function processor out of reach may answer later; bad content will not.
            ReconcileError::Render(e) => {
                matches!(e, pallet_formats::RenderError::ProcessorUnavailable { .. })
            }
            ReconcileError::Apply(e) => e.is_transient(),
            ReconcileError::Revision(e) => e.is_transient(),
            ReconcileError::Kube { .. }
            | ReconcileError::RenderUnavailable { .. }
            | ReconcileError::Deleting(_)
            | ReconcileError::DeletionForbidden(_)
            | ReconcileError::DeleteHookRunning { .. }
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

    /// True when the API server throttled the pass (429: API Priority and Fairness turned a
    /// request away): fewer BundleDeployments are then reconciled at once (see [`workers`]).
    pub fn throttled(&self) -> bool {
        let status = |error: &kube::Error| matches!(error, kube::Error::Api(s) if s.code == 429);
        match self {
            ReconcileError::Kube { source, .. } => status(source),
            ReconcileError::Apply(e) => match e.as_ref() {
                ApplyError::Transient { source, .. } => status(source),
                _ => false,
            },
            ReconcileError::Revision(RevisionError::Kube { source, .. }) => status(source),
            _ => false,
        }
    }

    fn phase(&self) -> FailedPhase {
        match self {
            ReconcileError::Source(_)
            | ReconcileError::Fetching(_)
            | ReconcileError::Secret { .. }
            | ReconcileError::RenderUnavailable { .. }
            | ReconcileError::Values { .. } => FailedPhase::Fetch,
            ReconcileError::InvalidHealthCheck(_)
            | ReconcileError::CelBudgetExceeded(_)
            | ReconcileError::InvalidProcessor(_)
            | ReconcileError::ServiceAccountRequired(_) => FailedPhase::Spec,
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
    // An intent kept out of status, in memory since the last pass (see `unwritten_intent`).
    if let Some(staged) = ctx.unwritten_intents.take(bd, &writer.written) {
        writer.staged = Some(staged.clone());
        work = staged;
    }
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
        let written = writer
            .write(&mut work, &Outcome::Paused { reason, drift })
            .await;
        keep_unwritten(ctx, bd, &writer);
        written?;
        return Ok(Next::RequeueAfter(requeue));
    }
    let requests = rollout::pending_requests(bd.annotations(), &work);
    if let Some(value) = &requests.reconcile {
        work.last_handled_reconcile = Some(value.clone());
    }
    // Before anything is fetched: a dependency not ready holds the whole pass (rollback and
    // retry requests stay pending: they are writes).
    if let Some(next) = wait_for_dependencies(bd, ctx, &mut writer, &mut work).await? {
        return Ok(next);
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
    let admitted = required_service_account(bd, ctx)
        .and_then(|()| admit_processors(bd, ctx))
        .and_then(|()| health_checks(bd, Some(&ctx.cel)));
    let result = match (admitted, rollback_to) {
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
            // Enforcing a snapshot while the sources fail keeps the fetch's backoff growing, and
            // that backoff decides when to look again: the poll of a source that just failed
            // is still due, and capping by it retried every second for a whole outage (the
            // soak benchmark: 67,000 failed fetches in 30 minutes).
            let sources_failing = matches!(
                &outcome,
                Outcome::Installed {
                    sources: SourceState::Unavailable { .. },
                    ..
                }
            );
            if !sources_failing {
                ctx.reset_backoff(&name);
            }
            let window = ctx.settle.current();
            if let Some(left) = status::settling(writer.recorded(), &work, &outcome, &now(), window)
            {
                // Applied moments ago, not healthy yet: look again when it has had time to
                // settle (its objects' watch events come sooner) before writing that it
                // progresses. The intent recorded before the apply stays the record meanwhile
                // (in status, or kept out of it and in memory, see `unwritten_intent`).
                keep_unwritten(ctx, bd, &writer);
                return Ok(Next::RequeueAfter(left + Duration::from_millis(50)));
            }
            // A test asked for (`pallet test`) runs against the active revision.
            let requeue = match hook_requests::advance_test(bd, ctx, &mut work).await {
                Ok(Some(poll)) => requeue.min(poll),
                Ok(None) => requeue,
                Err(error) => {
                    tracing::warn!(bundle_deployment = %name, error = %error, "could not run the test hooks");
                    requeue.min(10 * hook_requests::POLL)
                }
            };
            let before = rollout::active_revision(writer.recorded()).cloned();
            let written = writer.write(&mut work, &outcome).await;
            keep_unwritten(ctx, bd, &writer);
            written?;
            if let Some(took) = settle::became_healthy(before.as_ref(), &work) {
                ctx.settle.record(took);
            }
            if !writer.written.revisions.is_empty() {
                ctx.unwritten_intents.installed(bd);
            }
            let requeue = if sources_failing {
                requeue
            } else {
                poll_capped(bd, ctx, requeue)
            };
            Ok(Next::RequeueAfter(requeue))
        }
        // Another agent holds it now: nothing more to write here.
        Err(error @ ReconcileError::OutOfScope(_)) => Err(error),
        Err(error) => {
            let outcome = Outcome::Failed {
                phase: error.phase(),
                reason: error.category().to_string(),
                message: error.to_string(),
                transient: error.is_transient(),
            };
            tracing::warn!(bundle_deployment = %name, reason = %error.category(), error = %error, "reconcile failed");
            let written = writer.write(&mut work, &outcome).await;
            keep_unwritten(ctx, bd, &writer);
            written?;
            Err(error)
        }
    }
}

/// `spec.dependsOn`: when a dependency is not ready (or they form a cycle), records that and
/// says when to look again; None when the pass may go on.
async fn wait_for_dependencies(
    bd: &BundleDeployment,
    ctx: &Context,
    writer: &mut StatusWriter<'_>,
    work: &mut BundleDeploymentStatus,
) -> Result<Option<Next>, ReconcileError> {
    let dependencies::Gate::Wait {
        reason,
        message,
        stalled,
    } = dependencies::gate(bd, ctx).await?
    else {
        return Ok(None);
    };
    tracing::info!(bundle_deployment = %bd.name_any(), reason, "{message}");
    let outcome = Outcome::Waiting {
        reason: reason.to_string(),
        message,
        stalled,
    };
    let written = writer.write(work, &outcome).await;
    keep_unwritten(ctx, bd, writer);
    written?;
    // The dependencies' watches start the next pass; the requeue is the fallback.
    Ok(Some(Next::RequeueAfter(ctx.requeue_interval)))
}

/// `--require-service-account`: a BundleDeployment naming no ServiceAccount is refused before
/// anything is fetched or written (its objects, if any, stay as they are).
fn required_service_account(bd: &BundleDeployment, ctx: &Context) -> Result<(), ReconcileError> {
    if ctx.require_service_account && bd.spec.service_account.is_none() {
        return Err(ReconcileError::ServiceAccountRequired(
            "spec.serviceAccount is required: this agent installs nothing as itself \
             (--require-service-account); name a ServiceAccount allowed to create the bundle's objects"
                .into(),
        ));
    }
    Ok(())
}

/// Function processors asking for what this agent refuses (a `timeout` over
/// `--function-timeout-max`, a URL to a host not allowed) are refused before anything is
/// fetched or written.
fn admit_processors(bd: &BundleDeployment, ctx: &Context) -> Result<(), ReconcileError> {
    let refusals = ctx.functions.refusals(&bd.spec.processors);
    if refusals.is_empty() {
        return Ok(());
    }
    Err(ReconcileError::InvalidProcessor(refusals.join("; ")))
}

/// Keeps an intent that this pass recorded and did not write (it settles, or the
/// write failed) for the next pass over `bd` (see `unwritten_intent`).
fn keep_unwritten(ctx: &Context, bd: &BundleDeployment, writer: &StatusWriter<'_>) {
    if let Some(staged) = &writer.staged {
        ctx.unwritten_intents
            .stage(bd, writer.written.clone(), staged.clone());
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
        .get(&name)
        .is_some_and(|w| w.write.is_some());
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
    // A takeover's release records are read (under their budget) before anything is fetched
    // or written: one that cannot be stops the takeover, the active revision as it is.
    takeover::check_records(ctx, bd).await?;
    let RenderedBundle {
        rendered,
        digest,
        sources,
        values_from,
        traces,
        rendered_at,
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
            if work.revisions.is_empty() {
                // What an earlier agent's interrupted first install wrote joins the inventory,
                // read before this revision 1 replaces its snapshot (see `unwritten_intent`).
                let interrupted = unwritten_intent::interrupted(ctx, bd).await?;
                if !interrupted.is_empty() {
                    let mut inventory = work.inventory.take().unwrap_or_default();
                    let known: BTreeSet<ObjectReference> =
                        inventory.objects.iter().cloned().collect();
                    inventory
                        .objects
                        .extend(interrupted.into_iter().filter(|o| !known.contains(o)));
                    inventory.count = inventory.objects.len() as i64;
                    work.inventory = Some(inventory);
                }
            }
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
                processors: traces.to_vec(),
            };
            // Stored before any write, so a rollback never needs the sources or this disk.
            if ctx.save_snapshot(&record).await? {
                // An earlier agent's, or this process's own from an earlier pass.
                ctx.unwritten_intents.found_stored(bd, number);
            }
            fault::reached(Point::Snapshot);
            // Not kept in memory: the render memo holds the same objects while they are current;
            // a snapshot is read back (and then kept) only when a held or earlier revision is
            // applied instead.
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
                    rendered_at,
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
    // Content that came while the request waited (paused) is no newer than the wish to go back.
    rollback_hold::refuse_newer_content(bd, ctx, work, to).await;
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

/// True for helm charts, the only format with hooks.
fn is_helm(bd: &BundleDeployment) -> bool {
    bd.spec.format == crate::api::BundleFormat::Helm
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
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
