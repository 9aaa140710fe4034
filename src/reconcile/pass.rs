//! One pass over a BundleDeployment that is not being deleted, phase by phase. The pass computes
//! its [`View`] first; each phase takes the view (and the parts of the context it uses) and
//! returns what it decided:
//!
//! ```text
//! view ─> paused? ─> dependencies ─> requests ─> admission ─> fetch + render ─> decide
//!      ─> (record a new revision) ─> roll out: apply ─> health ─> (failed: roll back)
//!      ─> status (one function per outcome) ─> write
//! ```

use std::collections::BTreeSet;
use std::time::Duration;

use super::content::{fetch_and_render, observe_drift, RenderedBundle};
use super::rollout::{self, Decision};
use super::status::{self, FailedPhase, Outcome, SourceState, Transition};
use super::status_writer::StatusWriter;
use super::view::{wall_clock, Rollout, View};
use super::{
    changes, dependencies, health_checks, hook_requests, rollback_hold, takeover, unwritten_intent,
    values, webhook_certs, Context, Next, ReconcileError,
};
use crate::api::{BundleDeployment, BundleDeploymentStatus, ObjectReference};
use crate::fault::{self, Point};
use crate::metrics::METRICS;
use crate::revision::{RevisionContent, RevisionRecord};
use kube::ResourceExt;

/// What a pass came to before its status is written: the outcome to record and when to look
/// again, with what the roll-out decided.
pub(super) type Progress = Result<Rolled, ReconcileError>;

/// What rolling a revision out decided.
pub(super) struct Rolled {
    /// The outcome to record.
    pub outcome: Outcome,
    /// When to look again.
    pub requeue: Duration,
    /// The revision that ended up applied (after an automatic rollback, the one rolled back to).
    pub number: Option<i64>,
    /// How long that revision took from its apply to healthy, when it became healthy in this pass.
    pub became_healthy: Option<Duration>,
}

/// The revision a pass applies, as its deciding phase (a new revision, a continued one, a
/// rollback) returned it, with why.
#[derive(Clone, Debug)]
pub(super) struct Target {
    /// Its number (None: nothing is active, as for a refused first install).
    pub number: Option<i64>,
    /// Why it is applied.
    pub transition: Transition,
}

/// One pass: its view, the context, and the status it builds and writes.
pub(super) struct Pass<'a> {
    /// What the pass knows, computed before any phase ran.
    pub view: &'a View<'a>,
    /// The agent's clients, caches and settings.
    pub ctx: &'a Context,
    /// Writes the status.
    pub writer: StatusWriter<'a>,
    /// The status this pass builds.
    pub work: BundleDeploymentStatus,
}

/// Reconciles one BundleDeployment that is not being deleted (see the module doc).
pub async fn reconcile_apply(bd: &BundleDeployment, ctx: &Context) -> Result<Next, ReconcileError> {
    let now = wall_clock();
    let mut writer = StatusWriter::new(ctx, bd, now.clone());
    // An intent kept out of status, in memory since the last pass (see `unwritten_intent`).
    let work = writer.resume();
    let (rollout, invalid_duration) = match Rollout::of(bd) {
        Ok(rollout) => (rollout, None),
        Err(error) => (Rollout::defaults(bd), Some(error)),
    };
    // The cluster the objects live on, once: one that cannot be used now stops this pass
    // before anything is fetched or written (the objects there stay as they are).
    let workload = match ctx.workload(bd).await {
        Ok(workload) => workload,
        Err(error) => return cluster_unavailable(ctx, bd, writer, work, error).await,
    };
    let view = View::new(bd, &work, rollout, now, &workload);
    changes::mark_interrupted(ctx, bd, view.active.as_ref());
    report_another_writer(&view, ctx).await;
    let mut pass = Pass {
        view: &view,
        ctx,
        writer,
        work,
    };
    if let Some(reason) = &view.paused {
        return pass.paused(reason.clone()).await;
    }
    if let Some(value) = &view.requests.reconcile {
        pass.work.last_handled_reconcile = Some(value.clone());
    }
    // Before anything is fetched: a dependency not ready holds the whole pass (rollback and
    // retry requests stay pending: they are writes).
    if let Some(next) = pass.wait_for_dependencies().await? {
        return Ok(next);
    }
    let rollback_to = pass.rollback_request().await;
    let result = match admit(&view, ctx, invalid_duration) {
        // Refused before anything is fetched or written: the active revision stays as it is.
        Err(error) => Err(error),
        Ok(()) => match rollback_to {
            Some(to) => pass.requested_rollback_to(to).await,
            None => pass.progress().await,
        },
    };
    match result.map_err(|error| workload.explain(error)) {
        Ok(rolled) => pass.installed(rolled).await,
        // Another agent holds it now: nothing more to write here.
        Err(error @ ReconcileError::OutOfScope(_)) => Err(error),
        Err(error @ ReconcileError::Cluster(_)) => {
            let requeue = cluster_retry(ctx, &error);
            pass.failed(error).await.or(Ok(Next::RequeueAfter(requeue)))
        }
        Err(error) => pass.failed(error).await,
    }
}

/// The remote cluster of `bd` cannot be used now: `Ready=False` with the cluster's reason and
/// its message (naming the cluster), written once; nothing is fetched, and the objects on that
/// cluster stay as the last pass left them. Looked at again when the cluster is due for its
/// next check (its coming back, or an edit of its Secret, brings a pass at once).
async fn cluster_unavailable(
    ctx: &Context,
    bd: &BundleDeployment,
    mut writer: StatusWriter<'_>,
    mut work: BundleDeploymentStatus,
    error: ReconcileError,
) -> Result<Next, ReconcileError> {
    if matches!(error, ReconcileError::OutOfScope(_)) {
        return Err(error);
    }
    let outcome = Outcome::Failed {
        phase: error.phase(),
        reason: error.category().to_string(),
        message: error.to_string(),
        transient: error.is_transient(),
    };
    tracing::warn!(bundle_deployment = %bd.name_any(), reason = %error.category(), error = %error, "target cluster unavailable");
    let written = writer.write(&mut work, &outcome).await;
    keep_unwritten(ctx, bd, &writer);
    written?;
    match error {
        ReconcileError::Cluster(_) => Ok(Next::RequeueAfter(cluster_retry(ctx, &error))),
        // A refused Secret read, a failed SubjectAccessReview: the usual backoff.
        other => Err(other),
    }
}

/// When to look again at a bundle whose cluster failed with `error`: at the cluster's next
/// check, else (a Secret to fix, which is watched) at the requeue interval.
fn cluster_retry(ctx: &Context, error: &ReconcileError) -> Duration {
    match error {
        ReconcileError::Cluster(cluster) => {
            cluster.retry_in().unwrap_or(ctx.settings.requeue_interval)
        }
        _ => ctx.settings.requeue_interval,
    }
}

/// Keeps an intent that a pass recorded and did not write (it settles, or the write failed)
/// for the next pass (see `unwritten_intent`).
fn keep_unwritten(ctx: &Context, bd: &BundleDeployment, writer: &StatusWriter<'_>) {
    if let Some(staged) = &writer.staged {
        ctx.memory
            .unwritten_intents
            .stage(bd, writer.written.clone(), staged.clone());
    }
}

/// Admission: what refuses the spec before anything is fetched or written (the active revision
/// stays as it is): a duration that is not one, `--require-service-account` without a
/// ServiceAccount, a function processor asking for what this agent refuses, health checks that
/// do not compile or are over their CEL budget. Pure.
fn admit(
    view: &View<'_>,
    ctx: &Context,
    invalid_duration: Option<ReconcileError>,
) -> Result<(), ReconcileError> {
    if let Some(error) = invalid_duration {
        return Err(error);
    }
    if ctx.settings.require_service_account && view.bd.spec.service_account.is_none() {
        return Err(ReconcileError::ServiceAccountRequired(
            "spec.serviceAccount is required: this agent installs nothing as itself \
             (--require-service-account); name a ServiceAccount allowed to create the bundle's objects"
                .into(),
        ));
    }
    // Function processors asking for what this agent refuses (a `timeout` over
    // `--function-timeout-max`, a URL to a host not allowed).
    let refusals = ctx.rendering.functions.refusals(&view.bd.spec.processors);
    if !refusals.is_empty() {
        return Err(ReconcileError::InvalidProcessor(refusals.join("; ")));
    }
    health_checks::health_checks(view.bd, Some(&ctx.memory.cel)).map(|_| ())
}

impl<'a> Pass<'a> {
    /// Writes `outcome` (see [`StatusWriter::write`]); an intent this pass staged and did not
    /// write is kept for the next pass.
    pub(super) async fn record(&mut self, outcome: &Outcome) -> Result<(), ReconcileError> {
        let written = self.writer.write(&mut self.work, outcome).await;
        self.keep_unwritten();
        written
    }

    /// Keeps an intent that this pass recorded and did not write (see [`keep_unwritten`]).
    fn keep_unwritten(&self) {
        keep_unwritten(self.ctx, self.view.bd, &self.writer);
    }

    /// Paused: no writes to the bundle's objects, so rollback and retry requests wait (they are
    /// writes); drift is still observed so users see what resuming would revert, and a
    /// reconcile request is answered by this very pass.
    async fn paused(mut self, reason: Option<String>) -> Result<Next, ReconcileError> {
        let requested = self.view.requests.reconcile.clone();
        let force_poll = requested.is_some();
        if let Some(value) = requested {
            self.work.last_handled_reconcile = Some(value);
        }
        let drift = match observe_drift(self.view, self.ctx, force_poll).await {
            Ok(drift) => Some(drift),
            Err(error) => {
                tracing::warn!(bundle_deployment = %self.view.name, error = %error, "paused: could not compute drift");
                None
            }
        };
        // A failed fetch is not retried at the poll interval (it would be a tight loop then).
        let interval = self.ctx.settings.requeue_interval;
        let requeue = match drift {
            Some(_) => poll_capped(self.view, self.ctx, interval),
            None => interval,
        };
        self.record(&Outcome::Paused { reason, drift }).await?;
        Ok(Next::RequeueAfter(requeue))
    }

    /// `spec.dependsOn`: when a dependency is not ready (or they form a cycle), records that
    /// and says when to look again; None when the pass may go on.
    async fn wait_for_dependencies(&mut self) -> Result<Option<Next>, ReconcileError> {
        let dependencies::Gate::Wait {
            reason,
            message,
            stalled,
        } = dependencies::gate(self.view.bd, self.ctx).await?
        else {
            return Ok(None);
        };
        tracing::info!(bundle_deployment = %self.view.name, reason, "{message}");
        let outcome = Outcome::Waiting {
            reason: reason.to_string(),
            message,
            stalled,
        };
        self.record(&outcome).await?;
        // The dependencies' watches start the next pass; the requeue is the fallback.
        Ok(Some(Next::RequeueAfter(self.ctx.settings.requeue_interval)))
    }

    /// A pending rollback request: handled (recorded as such) now; the revision to roll back
    /// to, or None when it is refused (with a Warning Event saying why).
    async fn rollback_request(&mut self) -> Option<i64> {
        let request = self.view.requests.rollback.as_ref()?;
        self.work.last_handled_rollback = Some(request.value.clone());
        match requested_rollback(&self.work, self.view.active_number(), &request.to) {
            Ok(to) => Some(to),
            Err(why) => {
                tracing::warn!(bundle_deployment = %self.view.name, "rollback request refused: {why}");
                let records = &self.ctx.records;
                records
                    .event(
                        self.view.bd,
                        true,
                        "RollbackRequestRefused",
                        "Rollback",
                        why,
                    )
                    .await;
                None
            }
        }
    }

    /// Fetch, render, decide the revision, roll it out: the work of a pass for the current spec.
    async fn progress(&mut self) -> Progress {
        let retry = self.view.requests.retry.clone();
        let force_poll = self.view.requests.reconcile.is_some();
        // A takeover's release records are read (under their budget) before anything is
        // fetched or written: one that cannot be stops the takeover, the active revision as it is.
        takeover::check_records(self.ctx, self.view.bd, self.view.workload).await?;
        let content = match fetch_and_render(self.view, self.ctx, force_poll).await {
            Ok(done) => done,
            Err(error) if error.phase() == FailedPhase::Fetch => {
                return self.enforce_active(error).await;
            }
            Err(error) => return Err(error),
        };
        // Certificates of registry-v1 webhooks: the caBundle is part of the content.
        let provided = webhook_certs::provide(
            self.view.bd,
            (self.ctx, self.view.workload),
            content.rendered.clone(),
            content.digest.clone(),
        )
        .await?;
        let content = RenderedBundle {
            rendered: provided.rendered,
            digest: provided.digest,
            ..content
        };
        // Handled once the content to retry is known: a fetch that fails keeps the request pending.
        if let Some(value) = &retry {
            self.work.last_handled_retry = Some(value.clone());
        }
        // Values read from other objects are part of what was asked for, as the spec is.
        let spec_digest = values::spec_digest(&self.view.bd.spec.digest(), &content.values_from);
        let spec = rollout::SpecVersion {
            generation: self.view.generation,
            digest: &spec_digest,
        };
        let decision = rollout::decide(
            &self.work,
            self.view.active.as_ref(),
            &content.digest,
            &spec,
            retry.is_some(),
        );
        let objects = content.rendered.object_list();
        let digest = content.digest.clone();
        let rolled = match decision {
            Decision::New { number } => {
                self.start_revision(number, &spec_digest, content, &objects)
                    .await?;
                let target = Target {
                    number: Some(number),
                    transition: Transition::NewRevision,
                };
                self.roll_out(objects, target).await?
            }
            Decision::Continue => {
                let target = Target {
                    number: self.view.active_number(),
                    transition: Transition::Reapply,
                };
                self.roll_out(objects, target).await?
            }
            Decision::Refused { failed } => self.refused(failed, objects).await?,
        };
        let current = rolled
            .number
            .and_then(|number| rollout::entry(&self.work, number))
            .is_some_and(|r| r.digest == digest);
        let requeue = provided
            .renewal_in
            .map_or(rolled.requeue, |renewal| rolled.requeue.min(renewal));
        Ok(Rolled {
            outcome: with_flags(rolled.outcome, SourceState::Fetched, current),
            requeue,
            ..rolled
        })
    }

    /// A new revision `number` of `content`: its snapshot stored before any write (so a
    /// rollback never needs the sources or this disk), then made active in the status.
    async fn start_revision(
        &mut self,
        number: i64,
        spec_digest: &str,
        content: RenderedBundle,
        objects: &[pallet_formats::Object],
    ) -> Result<(), ReconcileError> {
        let (view, ctx) = (self.view, self.ctx);
        if self.work.revisions.is_empty() {
            // What an earlier agent's interrupted first install wrote joins the inventory,
            // read before this revision 1 replaces its snapshot (see `unwritten_intent`).
            let interrupted = unwritten_intent::interrupted((ctx, view.workload), view.bd).await?;
            add_to_inventory(&mut self.work, interrupted);
        }
        let record = RevisionRecord::new(
            &view.name,
            number,
            view.generation,
            RevisionContent {
                digest: &content.digest,
                sources: &content.sources,
                objects,
                processors: &content.traces,
            },
        );
        if ctx.revisions.save(&record).await? {
            // An earlier agent's, or this process's own from an earlier pass.
            ctx.memory.unwritten_intents.found_stored(view.bd, number);
        }
        fault::reached(Point::Snapshot);
        // Not kept in memory: the render memo holds the same objects while they are current;
        // a snapshot is read back (and then kept) only when a held or earlier revision is
        // applied instead.
        let dropped = rollout::start_revision(
            &mut self.work,
            rollout::NewRevision {
                number,
                generation: view.generation,
                spec_digest,
                digest: &content.digest,
                sources: content.sources,
                values_from: content.values_from,
                objects: objects.len(),
                rendered_at: content.rendered_at,
            },
            view.rollout.history_limit,
            &view.current(),
        );
        tracing::info!(bundle_deployment = %view.name, revision = number, digest = %content.digest, "new revision");
        METRICS.revision_created();
        for number in dropped {
            ctx.revisions.forget(&view.name, number);
            if let Err(e) = ctx.revisions.store.delete(&view.name, number).await {
                tracing::warn!(bundle_deployment = %view.name, revision = number, error = %e, "could not delete an old revision snapshot");
            }
        }
        Ok(())
    }

    /// Rendered content that failed before as revision `failed` and may not be tried again:
    /// the active revision stays, applied from its snapshot.
    async fn refused(
        &mut self,
        failed: i64,
        rendered: Vec<pallet_formats::Object>,
    ) -> Result<Rolled, ReconcileError> {
        let Some(active) = self.view.active_number() else {
            return Ok(Rolled {
                outcome: Outcome::Failed {
                    phase: FailedPhase::Install,
                    reason: "RevisionFailed".into(),
                    message: format!(
                        "this content failed as revision {failed}; waiting for a change to the spec or the sources, or a retry"
                    ),
                    transient: false,
                },
                requeue: self.ctx.settings.requeue_interval,
                number: None,
                became_healthy: None,
            });
        };
        let objects = if active == failed {
            // Held in place (onFailure: Hold, or nothing to roll back to): keep applying it at
            // the requeue interval, so that a cause fixed outside the bundle (RBAC, a missing
            // namespace) heals it without flapping between versions.
            rendered
        } else {
            // The failed content stays out; keep the active revision as stored.
            self.ctx.revisions.load(&self.view.name, active).await?
        };
        let target = Target {
            number: Some(active),
            transition: Transition::Reapply,
        };
        self.roll_out(objects, target).await
    }

    /// The sources could not be fetched (down, slow, refused credentials): keep the active
    /// revision applied from its stored snapshot and judge its health, so an outage never stops
    /// enforcement, and report the source problem in Unpacked only. Without an active revision,
    /// or when its snapshot cannot be read, the fetch error stands.
    async fn enforce_active(&mut self, error: ReconcileError) -> Progress {
        let (view, ctx) = (self.view, self.ctx);
        let Some(active) = view.active_number() else {
            return Err(error);
        };
        let objects = match ctx.revisions.load(&view.name, active).await {
            Ok(objects) => objects,
            Err(load_error) => {
                tracing::warn!(bundle_deployment = %view.name, revision = active, error = %load_error, "sources unavailable and the active snapshot unreadable");
                return Err(error);
            }
        };
        tracing::warn!(bundle_deployment = %view.name, revision = active, reason = error.category(), error = %error, "sources unavailable; enforcing the active revision from its snapshot");
        let target = Target {
            number: Some(active),
            transition: Transition::Reapply,
        };
        let rolled = self.roll_out(objects, target).await?;
        // Retried like a failed fetch: with backoff while it may pass, else at the requeue period.
        let retry = if error.is_transient() {
            ctx.memory.backoff(&view.name)
        } else {
            ctx.settings.requeue_interval
        };
        let sources = SourceState::Unavailable {
            reason: error.category().to_string(),
            message: error.to_string(),
            transient: error.is_transient(),
        };
        Ok(Rolled {
            outcome: with_flags(rolled.outcome, sources, false),
            requeue: rolled.requeue.min(retry),
            ..rolled
        })
    }

    /// A rollback on request: re-apply stored revision `to` (no fetch: the sources may be gone).
    async fn requested_rollback_to(&mut self, to: i64) -> Progress {
        let (view, ctx) = (self.view, self.ctx);
        let message = match view.active_number() {
            Some(from) => format!("rolled back to revision {to} on request (was revision {from})"),
            None => format!("rolled back to revision {to} on request"),
        };
        let objects = ctx.revisions.load(&view.name, to).await?;
        rollout::start_rollback(&mut self.work, to, &message, &view.current());
        // Content that came while the request waited (paused) is no newer than the wish to go back.
        rollback_hold::refuse_newer_content(view, ctx, &mut self.work, to).await;
        METRICS.rollback("request");
        ctx.records
            .event(
                view.bd,
                false,
                "RollbackRequested",
                "Rollback",
                message.clone(),
            )
            .await;
        let target = Target {
            number: Some(to),
            transition: Transition::Rollback {
                automatic: false,
                reason: status::REASON_ROLLBACK_REQUESTED.into(),
                message,
            },
        };
        let rolled = self.roll_out(objects, target).await?;
        // The sources were not fetched: Unpacked keeps what the last fetch said.
        Ok(Rolled {
            outcome: with_flags(rolled.outcome, SourceState::NotFetched, false),
            ..rolled
        })
    }

    /// The pass rolled a revision out: records its outcome (unless it is still settling, see
    /// [`status::settling`]), moves a requested test on, and says when to look again.
    async fn installed(mut self, rolled: Rolled) -> Result<Next, ReconcileError> {
        let (view, ctx) = (self.view, self.ctx);
        // Enforcing a snapshot while the sources fail keeps the fetch's backoff growing, and
        // that backoff decides when to look again: the poll of a source that just failed is
        // still due, and capping by it retried every second for a whole outage (the soak
        // benchmark: 67,000 failed fetches in 30 minutes).
        let sources_failing = matches!(
            &rolled.outcome,
            Outcome::Installed {
                sources: SourceState::Unavailable { .. },
                ..
            }
        );
        if !sources_failing {
            ctx.memory.reset_backoff(&view.name);
        }
        let window = ctx.memory.settle.current();
        let settling = rolled.number.and_then(|number| {
            status::settling(
                self.writer.recorded(),
                &self.work,
                number,
                &rolled.outcome,
                &view.current(),
                window,
            )
        });
        if let Some(left) = settling {
            // Applied moments ago, not healthy yet: look again when it has had time to settle
            // (its objects' watch events come sooner) before writing that it progresses. The
            // intent recorded before the apply stays the record meanwhile (in status, or kept
            // out of it and in memory, see `unwritten_intent`).
            self.keep_unwritten();
            return Ok(Next::RequeueAfter(left + Duration::from_millis(50)));
        }
        // A test asked for (`pallet test`) runs against the active revision.
        let requeue = match hook_requests::advance_test(view, ctx, &mut self.work).await {
            Ok(Some(poll)) => rolled.requeue.min(poll),
            Ok(None) => rolled.requeue,
            Err(error) => {
                tracing::warn!(bundle_deployment = %view.name, error = %error, "could not run the test hooks");
                rolled.requeue.min(10 * hook_requests::POLL)
            }
        };
        self.record(&rolled.outcome).await?;
        if let Some(took) = rolled.became_healthy {
            ctx.memory.settle.record(took);
        }
        if !self.writer.written.revisions.is_empty() {
            ctx.memory.unwritten_intents.installed(view.bd);
        }
        let requeue = if sources_failing {
            requeue
        } else {
            poll_capped(view, ctx, requeue)
        };
        Ok(Next::RequeueAfter(requeue))
    }

    /// The pass failed: records why, and hands the error to the controller (which retries it
    /// with backoff when it may pass).
    async fn failed(mut self, error: ReconcileError) -> Result<Next, ReconcileError> {
        let outcome = Outcome::Failed {
            phase: error.phase(),
            reason: error.category().to_string(),
            message: error.to_string(),
            transient: error.is_transient(),
        };
        tracing::warn!(bundle_deployment = %self.view.name, reason = %error.category(), error = %error, "reconcile failed");
        self.record(&outcome).await?;
        Err(error)
    }
}

/// Adds `objects` (an interrupted first install's) to `status`'s inventory.
fn add_to_inventory(status: &mut BundleDeploymentStatus, objects: Vec<ObjectReference>) {
    if objects.is_empty() {
        return;
    }
    let mut inventory = status.inventory.take().unwrap_or_default();
    let known: BTreeSet<ObjectReference> = inventory.objects.iter().cloned().collect();
    inventory
        .objects
        .extend(objects.into_iter().filter(|o| !known.contains(o)));
    inventory.count = inventory.objects.len() as i64;
    status.inventory = Some(inventory);
}

/// `requeue`, shortened so that the next reconcile comes when a floating source's poll is due
/// (at least a second later: a poll that just failed is retried by the error backoff instead).
pub(super) fn poll_capped(view: &View<'_>, ctx: &Context, requeue: Duration) -> Duration {
    match ctx
        .sources
        .polls
        .next_due(&view.uid, &view.bd.spec.sources, view.clock)
    {
        Some(due) => requeue.min(due.max(Duration::from_secs(1))),
        None => requeue,
    }
}

/// Two agents reconciling one BundleDeployment (no leader election, overlapping selectors) both
/// write every object. Each writes its name in `status.agent`; finding another name there after
/// having written it itself means a second agent wrote since: said at warn and as an Event.
async fn report_another_writer(view: &View<'_>, ctx: &Context) {
    let Some(other) = view.bd.status.as_ref().and_then(|s| s.agent.as_deref()) else {
        return;
    };
    let wrote_before = ctx
        .memory
        .last_written
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&view.name)
        .is_some_and(|w| w.write.is_some());
    let identity = &ctx.cluster.identity;
    if other == identity || !wrote_before {
        return;
    }
    let note = format!(
        "another agent ({other}) also writes this BundleDeployment and its objects; run one agent \
         per BundleDeployment (--leader-elect for replicas, disjoint --selector for shards)"
    );
    tracing::warn!(bundle_deployment = %view.name, agent = %identity, other = %other, "{note}");
    ctx.records
        .event(view.bd, true, "AnotherAgent", "Reconcile", note)
        .await;
}

/// The revision a rollback request may go to: a number still in the history, not the active one.
fn requested_rollback(
    status: &BundleDeploymentStatus,
    active: Option<i64>,
    to: &Result<i64, String>,
) -> Result<i64, String> {
    let to = to.clone()?;
    if !status.revisions.iter().any(|r| r.number == to) {
        return Err(format!(
            "revision {to} is not in the history (kept: {})",
            rollout::history_numbers(status)
        ));
    }
    if active == Some(to) {
        return Err(format!("revision {to} is already the active revision"));
    }
    Ok(to)
}

/// Sets what the apply cannot know on an Installed outcome: what this pass knows of the
/// sources, and whether the active revision is what they render.
fn with_flags(outcome: Outcome, sources: SourceState, current: bool) -> Outcome {
    match outcome {
        Outcome::Installed {
            inventory,
            skipped,
            written,
            health,
            revision,
            ..
        } => Outcome::Installed {
            inventory,
            skipped,
            written,
            health,
            revision,
            sources,
            spec_current: current,
        },
        other => other,
    }
}
