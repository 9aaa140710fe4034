//! Rolling a revision out: apply it stage by stage (intent first, hooks, staged apply, prune),
//! judge its health against the deadline, and roll back to the last healthy revision when it
//! fails.
//!
//! ```text
//! roll_out ─> apply_revision: namespace ─> intent ─> write (CRDs, pre hooks, apply + prune)
//!                             ─> applied (inventory, watches) ─> assess (health, probes, post hooks)
//!                             ─> judge (healthy, deadline)
//!          ─> failed: rollback target ─> apply_revision again
//! ```

use super::hook_plan::HookObject;
use super::pass::{Pass, Rolled, Target};
use super::rollout;
use super::{
    api_version_of, changes, chart_crds, hook_plan, hooks, key_of, reference, settle, status,
    unwritten_intent, webhook_certs, ReconcileError,
};
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kube::Client;
use pallet_formats::{Object, ObjectKey};
use serde_json::json;

use super::health_checks::{
    add_probes, assess_objects_apart, health_checks, report, REASON_CEL_BUDGET,
    REASON_HEALTH_CHECK_FAILED,
};
use crate::api::{
    BundleDeployment, BundleDeploymentStatus, HookPhase, ObjectReference, OnFailure, RevisionPhase,
};
use crate::apply::{plan, Applied, Applier, ApplyError, Outcome as ApplyOutcome, Pruned};
use crate::changelog::Reason;
use crate::fault::{self, Point};
use crate::metrics::METRICS;
use changes::log_writes;
use status::{FailedPhase, HealthReport, Outcome, SourceState, Transition};

/// Condition and revision reason when a revision misses its progress deadline.
pub const REASON_DEADLINE: &str = "ProgressDeadlineExceeded";

/// What applying a revision came to.
pub(super) enum Step {
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

impl Step {
    /// The step a permanent `error` makes of a revision on its way (`on_its_way`): it fails;
    /// otherwise the error stands (a held or healthy revision only reports it).
    fn failed_by<E: Into<ReconcileError>>(
        error: E,
        on_its_way: bool,
        transient: bool,
        category: &str,
    ) -> Result<Step, ReconcileError> {
        let error = error.into();
        if on_its_way && !transient {
            return Ok(Step::Failed {
                reason: category.to_string(),
                message: error.to_string(),
            });
        }
        Err(error)
    }
}

/// One apply of a revision: what its stages share.
struct Apply<'t> {
    /// Writes through the impersonating client, logging each write.
    applier: Applier,
    /// The revision applied, and why.
    target: &'t Target,
    /// The revision's entry as the apply began (its phase, hooks and digest).
    entry: Option<crate::api::RevisionStatus>,
    /// The release's objects (no hooks, no chart CRDs).
    release: Vec<Object>,
    /// Its helm hooks.
    hooks: Vec<HookObject>,
    /// Its chart's CRDs (`crds/`), applied by their own policy.
    chart_crds: Vec<Object>,
    /// Whether the revision is still on its way (Applying or Progressing): a permanent error
    /// applying it fails it.
    on_its_way: bool,
}

/// What writing a revision's objects did.
struct Written {
    applied: Vec<Applied>,
    pruned: Pruned,
}

impl Pass<'_> {
    /// Applies `objects` as `target` says, assesses health, and when the revision fails, rolls
    /// back to the last healthy revision (onFailure: Rollback) and applies that one instead, in
    /// the same pass.
    pub(super) async fn roll_out(
        &mut self,
        mut objects: Vec<Object>,
        mut target: Target,
    ) -> Result<Rolled, ReconcileError> {
        loop {
            // A stored revision re-applied after a renewal trusts the current webhook CA.
            objects = webhook_certs::with_current_bundle(self.view.workload, self.view.bd, objects)
                .await?;
            let before = self.entry(target.number).cloned();
            let (reason, message) = match self.apply_revision(&objects, &target).await? {
                Step::Done(outcome, requeue) => {
                    let after = self.entry(target.number);
                    let became_healthy =
                        after.and_then(|after| settle::became_healthy(before.as_ref(), after));
                    return Ok(Rolled {
                        outcome,
                        requeue,
                        number: target.number,
                        became_healthy,
                    });
                }
                Step::Failed { reason, message } => (reason, message),
            };
            let was_failed = before.map(|r| r.phase) == Some(RevisionPhase::Failed);
            let failed = target.number.unwrap_or_default();
            rollout::mark_failed(&mut self.work, failed, &reason, &message);
            if !was_failed {
                // A held revision failing again on a later pass is no news: no repeated Event.
                tracing::warn!(bundle_deployment = %self.view.name, revision = failed, %reason, "revision failed: {message}");
                let note = format!("revision {failed} failed: {message}");
                self.ctx
                    .records
                    .event(self.view.bd, true, &reason, "Rollout", note)
                    .await;
            }
            let Some(to) = rollback_target(&self.work, failed, self.view.rollout.on_failure) else {
                return Ok(self.held(failed, reason, message));
            };
            let message = format!(
                "revision {failed} failed ({reason}: {message}); rolled back to revision {to}"
            );
            objects = self.ctx.revisions.load(&self.view.name, to).await?;
            rollout::start_rollback(&mut self.work, to, &message, &self.view.current());
            METRICS.rollback(if reason == REASON_DEADLINE {
                "deadline"
            } else {
                "apply-error"
            });
            let records = &self.ctx.records;
            records
                .event(
                    self.view.bd,
                    true,
                    status::REASON_ROLLED_BACK,
                    "Rollback",
                    message.clone(),
                )
                .await;
            target = Target {
                number: Some(to),
                transition: Transition::Rollback {
                    automatic: true,
                    reason,
                    message,
                },
            };
        }
    }

    /// The entry of revision `number` in the status this pass builds.
    fn entry(&self, number: Option<i64>) -> Option<&crate::api::RevisionStatus> {
        number.and_then(|number| rollout::entry(&self.work, number))
    }

    /// Revision `failed` failed and stays in place (onFailure: Hold, or nothing to roll back to).
    fn held(&self, failed: i64, reason: String, message: String) -> Rolled {
        let why = if self.view.rollout.on_failure == OnFailure::Hold {
            "rollout.onFailure is Hold"
        } else {
            "no earlier healthy revision to roll back to"
        };
        Rolled {
            outcome: Outcome::Failed {
                phase: FailedPhase::Install,
                reason,
                message: format!(
                    "revision {failed} failed: {message}; left in place and re-applied at every \
                     pass until it is healthy ({why})"
                ),
                transient: false,
            },
            requeue: self.ctx.settings.requeue_interval,
            number: Some(failed),
            became_healthy: None,
        }
    }

    /// Applies the target revision's `objects`: records the intent first (for new revisions
    /// and rollbacks; in status, or kept out of it, see [`unwritten_intent`]), applies in
    /// stages, prunes, then assesses health against the deadline.
    async fn apply_revision(
        &mut self,
        objects: &[Object],
        target: &Target,
    ) -> Result<Step, ReconcileError> {
        let client = self.view.workload.writer.clone();
        let on_its_way = on_its_way(self.entry(target.number));
        if let Some(step) = self.install_namespace(&client, on_its_way).await? {
            return Ok(step);
        }
        let mut apply = self.prepare(objects, target, client, on_its_way);
        self.record_intent(&apply).await?;
        let written = match self.write_objects(&mut apply).await? {
            Ok(written) => written,
            Err(step) => return Ok(step),
        };
        let installed = self.applied(&apply, &written).await?;
        let (health, check_reason) = match self.assess(&apply, written.applied).await? {
            Ok(assessed) => assessed,
            Err(step) => return Ok(step),
        };
        self.judge(target.number, health, check_reason, installed)
    }

    /// Stage 1: the install namespace, created when missing (a revision on its way fails when
    /// it cannot be, as when an object of it is refused).
    async fn install_namespace(
        &self,
        client: &Client,
        on_its_way: bool,
    ) -> Result<Option<Step>, ReconcileError> {
        let cluster = &self.ctx.cluster;
        let Some(namespace) = &self.view.bd.spec.install_namespace else {
            return Ok(None);
        };
        // Until a first revision is healthy, always look: the namespace may have been deleted
        // since another BundleDeployment saw it (a bundle deleted and created again, its
        // namespace removed in between), and a first revision refused for that would wait for a
        // retry.
        let first_install = self.work.last_healthy_revision.is_none();
        let seen_as = self.view.workload.namespace_key(namespace);
        if !first_install && cluster.namespace_seen(&seen_as) {
            return Ok(None);
        }
        match ensure_namespace(&self.view.workload.client, client, namespace).await {
            Ok(()) => {
                cluster.saw_namespace(&seen_as);
                Ok(None)
            }
            Err(error) => {
                let (transient, category) = (error.is_transient(), error.category());
                Step::failed_by(error, on_its_way, transient, category).map(Some)
            }
        }
    }

    /// The apply's shared parts: the applier, the revision's objects split into release, hooks
    /// and chart CRDs (helm hooks run at their events, not as release objects, see `hooks`; a
    /// chart's CRDs go by their own policy, see `chart_crds`), and its hook runs set up.
    fn prepare<'t>(
        &mut self,
        objects: &[Object],
        target: &'t Target,
        client: Client,
        on_its_way: bool,
    ) -> Apply<'t> {
        let mut applier = self.ctx.applier(self.view.bd, self.view.workload, client);
        applier.revision = target.number;
        let hook_plan::Split {
            release,
            hooks,
            chart_crds,
        } = hook_plan::split(objects, self.view.helm);
        if let Some(number) = target.number {
            hook_plan::prepare(
                &mut self.work,
                number,
                &hooks,
                &target.transition,
                hook_plan::continues_release(self.view.bd),
            );
        }
        Apply {
            applier,
            target,
            entry: self.entry(target.number).cloned(),
            release,
            hooks,
            chart_crds,
            on_its_way,
        }
    }

    /// Stage 2: records what is about to happen, and every object that may end up on the
    /// cluster, before the first write: after a crash the next pass finishes the job and
    /// prunes. For a new revision or a rollback, and for a revision still Applying whose pre
    /// hooks had not started (they record the inventory when they do).
    async fn record_intent(&mut self, apply: &Apply<'_>) -> Result<(), ReconcileError> {
        let transition = &apply.target.transition;
        let hooks_started = apply
            .entry
            .as_ref()
            .is_some_and(|r| r.hooks.iter().any(|h| h.phase != HookPhase::Pending));
        let applying = apply.entry.as_ref().map(|r| r.phase) == Some(RevisionPhase::Applying);
        // Re-applied as it is: nothing new to record, unless it is still Applying and its pre
        // hooks have not started.
        let unfinished = applying && !hooks_started;
        if *transition == Transition::Reapply && !unfinished {
            return Ok(());
        }
        let own: BTreeSet<ObjectReference> = apply
            .applier
            .resolve_keys(&apply.release)
            .await?
            .iter()
            .map(|(key, api_version)| reference(key, api_version))
            .collect();
        let has_hooks = !apply.hooks.is_empty();
        let kept_out_of_status =
            unwritten_intent::snapshot_holds_intent(&self.work, &own, has_hooks)
                || unwritten_intent::inventory_holds_intent(
                    &self.writer.written,
                    &own,
                    has_hooks,
                    transition,
                );
        let mut inventory: BTreeSet<ObjectReference> = self
            .work
            .inventory
            .iter()
            .flat_map(|i| i.objects.iter().cloned())
            .collect();
        inventory.extend(own);
        let outcome = Outcome::Applying {
            inventory: inventory.into_iter().collect(),
            transition: transition.clone(),
        };
        if kept_out_of_status {
            // A first install's snapshot, stored just before, or the inventory already in
            // status is the record (see `unwritten_intent`).
            self.writer.stage(&mut self.work, &outcome);
        } else {
            self.writer.write(&mut self.work, &outcome).await?;
        }
        fault::reached(Point::Intent);
        if matches!(transition, Transition::Rollback { .. }) {
            fault::reached(Point::Rollback);
        }
        Ok(())
    }

    /// Stage 3: writes the objects: the chart's CRDs, the pre hooks, then the release in
    /// stages and the prune of what the previous inventory had and it does not, each write
    /// logged as it returns (see `changes::logging`). `Err` with the step a failure or a
    /// running hook comes to.
    async fn write_objects(
        &mut self,
        apply: &mut Apply<'_>,
    ) -> Result<Result<Written, Step>, ReconcileError> {
        let (view, ctx) = (self.view, self.ctx);
        let reason = log_reason(apply.target, apply.entry.as_ref());
        apply.applier.rules.drift_pass = reason == Reason::Drift;
        let digest = apply
            .entry
            .as_ref()
            .map(|r| r.digest.clone())
            .unwrap_or_default();
        let number = apply.target.number;
        let crd_keys =
            match chart_crds::apply(view.bd, &apply.applier, number, &apply.chart_crds).await {
                Ok(keys) => keys,
                Err(ReconcileError::Apply(error)) => {
                    let (transient, category) = (error.is_transient(), error.category());
                    return Step::failed_by(*error, apply.on_its_way, transient, category).map(Err);
                }
                Err(error) => return Err(error),
            };
        if let Some(number) = number {
            let stage = hooks::StageRun::new(view, number);
            if let Some(step) =
                hooks::before(ctx, &stage, &apply.applier, &mut self.work, &apply.hooks).await?
            {
                return Ok(Err(step));
            }
        }
        let mut hook_keys = apply
            .applier
            .resolve_keys(&hook_plan::objects(&apply.hooks))
            .await?;
        // Kept out of the prune like hooks (an inventory written before they had a policy of
        // their own lists them).
        hook_keys.extend(crd_keys);
        let logged = changes::logging(ctx, view.bd, &apply.applier, (number, &digest), reason);
        let result = apply_and_prune(&logged, &apply.release, &self.work, &hook_keys).await;
        let writes = log_writes(
            ctx,
            view.bd,
            &logged,
            &apply.release,
            (number, &digest),
            reason,
            result.as_ref().err(),
        )
        .await;
        // What the objects carried before this pass: signs of an earlier agent's unrecorded upgrade.
        let seen = match &result {
            Ok((applied, _)) => applied.as_slice(),
            Err(_) => writes.as_slice(),
        };
        unwritten_intent::check_first_apply(
            ctx,
            view.bd,
            seen.iter().filter_map(|a| a.revision_before),
        );
        match result {
            Ok((applied, pruned)) => Ok(Ok(Written { applied, pruned })),
            Err(error) => {
                let (transient, category) = (error.is_transient(), error.category());
                Step::failed_by(error, apply.on_its_way, transient, category).map(Err)
            }
        }
    }

    /// Stage 4: every object is written: the revision is applied, the previous owner's
    /// records can go (see `takeover`), the objects are watched, and what was written becomes
    /// the inventory.
    async fn applied(
        &mut self,
        apply: &Apply<'_>,
        written: &Written,
    ) -> Result<Installed, ReconcileError> {
        let (view, ctx) = (self.view, self.ctx);
        if let Some(number) = apply.target.number {
            rollout::mark_applied(&mut self.work, number);
        }
        super::takeover::finish(ctx, view.bd, &apply.applier.client, &mut self.work).await?;
        report_drift_ignore(&ctx.records, view.bd, &apply.applier, &mut self.work).await;
        let applied = &written.applied;
        if view.workload.watched() {
            for a in applied.iter().filter(|a| a.outcome.in_inventory()) {
                // Resolved moments ago by the apply, so this is a cache hit.
                let existing = apply.applier.api_for_existing(&a.key, &a.api_version).await;
                if let Ok(Some((_, resource))) = existing {
                    view.workload.watch(&resource);
                }
            }
        }
        for key in &written.pruned.deleted {
            tracing::info!(bundle_deployment = %view.name, object = %key, "pruned");
        }
        for (key, why) in &written.pruned.kept {
            tracing::warn!(bundle_deployment = %view.name, object = %key, "not pruned: {why}");
        }
        Ok(Installed::of(applied))
    }

    /// Stage 5: the health of the written objects (built-in rules, the user's health checks,
    /// the Pods behind a workload that does not progress), the HTTP probes, and the post
    /// hooks once all is healthy, with the reason a failed health check gives. `Err` with the
    /// step a failed post hook comes to.
    async fn assess(
        &mut self,
        apply: &Apply<'_>,
        applied: Vec<Applied>,
    ) -> Result<Result<(HealthReport, &'static str), Step>, ReconcileError> {
        let (view, ctx) = (self.view, self.ctx);
        let checks = health_checks(view.bd, Some(&ctx.memory.cel))?;
        let (applied, (mut assessed, failed_check)) =
            assess_objects_apart(applied, &ctx.settings.health, &checks).await?;
        let applied = applied.as_slice();
        // An expression over its budget is not evaluated again: the object cannot recover.
        let check_reason = match checks.refusal() {
            Some(_) => REASON_CEL_BUDGET,
            None => REASON_HEALTH_CHECK_FAILED,
        };
        // A workload that does not progress is reported with its Pods' reasons, not only its
        // controller's counters; while a revision is new, only a failed one (see `pod_problems`).
        if super::pod_problems::worth_explaining(
            self.entry(apply.target.number),
            &assessed,
            &view.current(),
        ) {
            super::pod_problems::explain(&view.workload.client, applied, &mut assessed).await;
        }
        let mut health = report(assessed, failed_check);
        let probes = ctx.watchers.probes.assess(
            &view.name,
            apply.target.number.unwrap_or_default(),
            &view.bd.spec.health_checks,
            health.healthy,
        );
        add_probes(&mut health, probes);
        if let Some(number) = apply.target.number {
            let stage = hooks::StageRun::new(view, number);
            let after = hooks::after(
                ctx,
                &stage,
                &apply.applier,
                &mut self.work,
                &apply.hooks,
                &mut health,
            );
            if let Some(step) = after.await? {
                return Ok(Err(step));
            }
        }
        Ok(Ok((health, check_reason)))
    }

    /// Stage 6: the revision's verdict: healthy, still progressing (look again before its
    /// deadline), or failed (a user's health check said so, or the deadline passed).
    fn judge(
        &mut self,
        number: Option<i64>,
        health: HealthReport,
        check_reason: &str,
        installed: Installed,
    ) -> Result<Step, ReconcileError> {
        let view = self.view;
        let now = view.current();
        let mut requeue = self.ctx.settings.requeue_interval;
        let deadline = view.rollout.progress_deadline;
        let phase = self.entry(number).map(|r| r.phase);
        if health.healthy {
            if let Some(number) = number {
                rollout::mark_healthy(&mut self.work, number, &now);
                if phase != Some(RevisionPhase::Healthy) {
                    tracing::info!(bundle_deployment = %view.name, revision = number, "revision healthy");
                }
            }
        } else if phase == Some(RevisionPhase::Progressing) {
            // A user's health check that says failed is meant to end the wait (Flux's `failed`).
            if let Some(message) = &health.failed_check {
                return Ok(Step::Failed {
                    reason: check_reason.into(),
                    message: message.clone(),
                });
            }
            // An object reported Failed (a Pod in CrashLoopBackOff) can still recover, so only
            // the deadline fails a revision: the contract users tune with progressDeadline.
            let revision = self.entry(number);
            if rollout::deadline_passed(revision, deadline, &now) {
                return Ok(Step::Failed {
                    reason: REASON_DEADLINE.into(),
                    message: format!(
                        "not healthy within rollout.progressDeadline ({}): {}",
                        view.bd.spec.rollout().progress_deadline(),
                        health.message
                    ),
                });
            }
            fault::reached(Point::Health);
            // The watches on the objects bring each change as it happens; this only bounds the
            // wait when an event is missed (or when nothing watches).
            let remaining =
                rollout::deadline_remaining(revision, deadline, &now).unwrap_or_default();
            let poll = if self.view.workload.watched() {
                PROGRESS_WATCHED_POLL
            } else {
                PROGRESS_POLL
            };
            requeue = requeue
                .min(poll)
                .min(remaining + Duration::from_millis(100));
        }
        Ok(Step::Done(
            Outcome::Installed {
                inventory: installed.inventory,
                skipped: installed.skipped,
                written: installed.written,
                health,
                revision: number,
                sources: SourceState::Fetched,
                spec_current: false,
            },
            requeue,
        ))
    }
}

/// What the written objects make of the inventory.
struct Installed {
    inventory: Vec<ObjectReference>,
    skipped: Vec<ObjectReference>,
    written: usize,
}

impl Installed {
    /// The inventory, the optional objects skipped, and how many were written. Pure.
    fn of(applied: &[Applied]) -> Installed {
        Installed {
            inventory: applied
                .iter()
                .filter(|a| a.outcome.in_inventory())
                .map(|a| reference(&a.key, &a.api_version))
                .collect(),
            skipped: applied
                .iter()
                .filter(|a| a.outcome == ApplyOutcome::Skipped)
                .map(|a| ObjectReference {
                    message: Some("optional; the cluster does not serve this kind".into()),
                    ..reference(&a.key, &a.api_version)
                })
                .collect(),
            written: applied
                .iter()
                .filter(|a| matches!(a.outcome, ApplyOutcome::Created | ApplyOutcome::Updated))
                .count(),
        }
    }
}

/// Why the target's writes happen, for the change log: a new revision, a rollback, finishing
/// an interrupted apply (still the revision's own apply), or drift. Pure.
fn log_reason(target: &Target, entry: Option<&crate::api::RevisionStatus>) -> Reason {
    match target.transition {
        Transition::NewRevision => Reason::NewRevision,
        Transition::Rollback { .. } => Reason::Rollback,
        Transition::Reapply if entry.map(|r| r.phase) == Some(RevisionPhase::Applying) => {
            Reason::NewRevision
        }
        Transition::Reapply => Reason::Drift,
    }
}

/// The revision to roll back to after `failed` failed: the last healthy one, when it is
/// another, still in the history, and `policy` is Rollback. Pure.
fn rollback_target(status: &BundleDeploymentStatus, failed: i64, policy: OnFailure) -> Option<i64> {
    if policy != OnFailure::Rollback {
        return None;
    }
    status
        .last_healthy_revision
        .filter(|healthy| *healthy != failed)
        .filter(|healthy| status.revisions.iter().any(|r| r.number == *healthy))
}

/// Whether `revision` is still on its way (Applying or Progressing): a permanent error applying
/// it fails it, where a held or healthy revision only reports the error.
fn on_its_way(revision: Option<&crate::api::RevisionStatus>) -> bool {
    revision.is_some_and(|r| {
        matches!(
            r.phase,
            RevisionPhase::Applying | RevisionPhase::Progressing
        )
    })
}

/// Records in `status.driftIgnore` the `spec.driftIgnore` rules that matched no object of the
/// pass's apply (or cannot be used), with a Warning Event when that list changes.
async fn report_drift_ignore(
    records: &super::context::Records,
    bd: &BundleDeployment,
    applier: &Applier,
    work: &mut BundleDeploymentStatus,
) {
    let report = applier.rules.ignore.report(applier.revision);
    if report == work.drift_ignore {
        return;
    }
    if !report.is_empty() {
        let note: Vec<String> = report
            .iter()
            .map(|r| format!("driftIgnore[{}]: {}", r.rule, r.message))
            .collect();
        records
            .event(
                bd,
                true,
                REASON_DRIFT_IGNORE_UNMATCHED,
                "Apply",
                note.join("; "),
            )
            .await;
    }
    work.drift_ignore = report;
}

/// Event reason when a `spec.driftIgnore` rule matches no object or cannot be used.
pub const REASON_DRIFT_IGNORE_UNMATCHED: &str = "DriftIgnoreUnmatched";

/// How often a progressing revision is re-assessed when nothing watches its objects.
pub(super) const PROGRESS_POLL: Duration = Duration::from_secs(5);

/// How often a progressing revision is re-assessed when its objects are watched: a safety net
/// only. A fixed short re-check was half of all passes in a 1,000-bundle install.
pub(super) const PROGRESS_WATCHED_POLL: Duration = Duration::from_secs(30);

/// Applies `objects`, then prunes what the previous inventory had and they do not.
pub(super) async fn apply_and_prune(
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

pub(super) async fn ensure_namespace(
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
