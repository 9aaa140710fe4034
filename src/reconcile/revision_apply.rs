//! Phases 4 and 5: apply the active revision (intent first, hooks, staged apply, prune), judge
//! its health against the deadline, and roll back to the last healthy revision when it fails.

use super::{
    api_version_of, changes, chart_crds, hook_plan, hooks, is_helm, key_of, now, reference,
    rollout, status, unwritten_intent, webhook_certs, Context, Progress, ReconcileError,
    StatusWriter,
};
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use pallet_formats::{Object, ObjectKey};
use serde_json::json;

use super::health_checks::{
    add_probes, assess_objects_apart, health_checks, report, REASON_CEL_BUDGET,
    REASON_HEALTH_CHECK_FAILED,
};
use crate::api::{
    parse_duration, BundleDeployment, BundleDeploymentStatus, HookPhase, ObjectReference,
    OnFailure, RevisionPhase,
};
use crate::apply::{plan, Applied, Applier, ApplyError, Outcome as ApplyOutcome};
use crate::changelog::Reason;
use crate::fault::{self, Point};
use crate::metrics::METRICS;
use changes::log_writes;
use status::{FailedPhase, Outcome, SourceState, Transition};

/// Applies the active revision's `objects` (as `transition` says why), assesses health, and when
/// the revision fails, rolls back to the last healthy revision (onFailure: Rollback) and applies
/// that one instead, in the same pass.
pub(super) async fn roll_out(
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

/// Environment variable naming a fault to inject, for crash tests only: `exit-after-rollback-recorded`
/// makes the agent exit right after recording that a rollback started and before re-applying
/// anything, as a crash at the worst moment would.
pub const FAULT_ENV: &str = "PALLET_FAULT_INJECT";

/// Applies the active revision's `objects`: records the intent first (for new revisions and
/// rollbacks; in status, or kept out of it, see [`unwritten_intent`]),
/// applies in stages, prunes, then assesses health against the deadline.
pub(super) async fn apply_revision(
    bd: &BundleDeployment,
    ctx: &Context,
    writer: &mut StatusWriter<'_>,
    work: &mut BundleDeploymentStatus,
    objects: &[Object],
    transition: &Transition,
) -> Result<Step, ReconcileError> {
    let client = ctx.writer(bd)?;
    if let Some(failed) = install_namespace(bd, ctx, &client, work).await? {
        return Ok(failed);
    }
    let mut applier = ctx.applier(bd, client);
    applier.revision = work.active_revision;
    // Helm hooks run at their events, not as release objects (see `hooks`); a chart's CRDs go
    // by their own policy (see `chart_crds`).
    let hook_plan::Split {
        release,
        hooks: hook_objects,
        chart_crds,
    } = hook_plan::split(objects, is_helm(bd));
    let (objects, hook_objects) = (&release, &hook_objects);
    hook_plan::prepare(
        work,
        hook_objects,
        transition,
        hook_plan::continues_release(bd),
    );
    let active = rollout::active_revision(work).cloned();
    let on_its_way = on_its_way(work);
    // A revision whose pre hooks started recorded its inventory when they did.
    let hooks_started = active
        .as_ref()
        .is_some_and(|r| r.hooks.iter().any(|h| h.phase != HookPhase::Pending));
    if *transition != Transition::Reapply
        || (active.as_ref().map(|r| r.phase) == Some(RevisionPhase::Applying) && !hooks_started)
    {
        // Record what is about to happen, and every object that may end up on the cluster,
        // before the first write: after a crash the next pass finishes the job and prunes.
        let own: BTreeSet<ObjectReference> = applier
            .resolve_keys(objects)
            .await?
            .iter()
            .map(|(key, api_version)| reference(key, api_version))
            .collect();
        let has_hooks = !hook_objects.is_empty();
        let kept_out_of_status = unwritten_intent::snapshot_holds_intent(work, &own, has_hooks)
            || unwritten_intent::inventory_holds_intent(
                &writer.written,
                &own,
                has_hooks,
                transition,
            );
        let mut inventory: BTreeSet<ObjectReference> = work
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
            writer.stage(work, &outcome);
        } else {
            writer.write(work, &outcome).await?;
        }
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
    applier.rules.drift_pass = log_reason == Reason::Drift;
    let digest = active
        .as_ref()
        .map(|r| r.digest.clone())
        .unwrap_or_default();
    let crd_keys = match chart_crds::apply(bd, &applier, work.active_revision, &chart_crds).await {
        Ok(keys) => keys,
        Err(ReconcileError::Apply(error)) if on_its_way && !error.is_transient() => {
            return Ok(Step::Failed {
                reason: error.category().to_string(),
                message: error.to_string(),
            })
        }
        Err(error) => return Err(error),
    };
    if let Some(step) = hooks::before(ctx, bd, &applier, work, hook_objects).await? {
        return Ok(step);
    }
    let mut hook_keys = applier
        .resolve_keys(&hook_plan::objects(hook_objects))
        .await?;
    // Kept out of the prune like hooks (an inventory written before they had a policy of
    // their own lists them).
    hook_keys.extend(crd_keys);
    // Each write is logged as it returns (see `changes::logging`).
    let logged = changes::logging(
        ctx,
        bd,
        &applier,
        (work.active_revision, &digest),
        log_reason,
    );
    let result = apply_and_prune(&logged, objects, work, &hook_keys).await;
    let writes = log_writes(
        ctx,
        bd,
        &logged,
        objects,
        (work.active_revision, &digest),
        log_reason,
        result.as_ref().err(),
    )
    .await;
    // What the objects carried before this pass: signs of an earlier agent's unrecorded upgrade.
    let seen = match &result {
        Ok((applied, _)) => applied.as_slice(),
        Err(_) => writes.as_slice(),
    };
    unwritten_intent::check_first_apply(ctx, bd, seen.iter().filter_map(|a| a.revision_before));
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
    // Every object is applied: the previous owner's records can go (see `takeover`).
    super::takeover::finish(ctx, bd, &applier.client, work).await?;
    report_drift_ignore(ctx, bd, &applier, work).await;

    let inventory: Vec<ObjectReference> = applied
        .iter()
        .filter(|a| a.outcome.in_inventory())
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
        for a in applied.iter().filter(|a| a.outcome.in_inventory()) {
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

    let checks = health_checks(bd, Some(&ctx.cel))?;
    let (applied, (mut assessed, failed_check)) =
        assess_objects_apart(applied, &ctx.health, &checks).await?;
    // A workload that does not progress is reported with its Pods' reasons, not only its
    // controller's counters; while a revision is new, only a failed one (see `pod_problems`).
    if super::pod_problems::worth_explaining(work, &assessed) {
        super::pod_problems::explain(&ctx.client, &applied, &mut assessed).await;
    }
    let mut health = report(assessed, failed_check);
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
            // An expression over its budget is not evaluated again: the object cannot recover.
            let reason = match checks.refusal() {
                Some(_) => REASON_CEL_BUDGET,
                None => REASON_HEALTH_CHECK_FAILED,
            };
            return Ok(Step::Failed {
                reason: reason.into(),
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
        // The watches on the objects bring each change as it happens; this only bounds the wait
        // when an event is missed (or when nothing watches).
        let remaining = rollout::deadline_remaining(work, deadline, &now).unwrap_or_default();
        let poll = if ctx.owned.is_some() {
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

/// Whether the active revision is still on its way (Applying or Progressing): a permanent
/// error applying it fails it, where a held or healthy revision only reports the error.
/// Creates the install namespace when missing; a failed step when the revision cannot be
/// applied for it (as when an object of it is refused).
async fn install_namespace(
    bd: &BundleDeployment,
    ctx: &Context,
    client: &Client,
    work: &BundleDeploymentStatus,
) -> Result<Option<Step>, ReconcileError> {
    let Some(namespace) = &bd.spec.install_namespace else {
        return Ok(None);
    };
    // Until a first revision is healthy, always look: the namespace may have been deleted since
    // another BundleDeployment saw it (a bundle deleted and created again, its namespace removed
    // in between), and a first revision refused for that would wait for a retry.
    let first_install = work.last_healthy_revision.is_none();
    if !first_install && ctx.namespace_seen(namespace) {
        return Ok(None);
    }
    match ensure_namespace(&ctx.client, client, namespace).await {
        Ok(()) => {
            ctx.saw_namespace(namespace);
            Ok(None)
        }
        Err(error) if !error.is_transient() && on_its_way(work) => Ok(Some(Step::Failed {
            reason: error.category().to_string(),
            message: error.to_string(),
        })),
        Err(error) => Err(error),
    }
}

fn on_its_way(work: &BundleDeploymentStatus) -> bool {
    rollout::active_revision(work).is_some_and(|r| {
        matches!(
            r.phase,
            RevisionPhase::Applying | RevisionPhase::Progressing
        )
    })
}

/// Records in `status.driftIgnore` the `spec.driftIgnore` rules that matched no object of the
/// pass's apply (or cannot be used), with a Warning Event when that list changes.
async fn report_drift_ignore(
    ctx: &Context,
    bd: &BundleDeployment,
    applier: &Applier,
    work: &mut BundleDeploymentStatus,
) {
    let report = applier.rules.ignore.report(work.active_revision);
    if report == work.drift_ignore {
        return;
    }
    if !report.is_empty() {
        let note: Vec<String> = report
            .iter()
            .map(|r| format!("driftIgnore[{}]: {}", r.rule, r.message))
            .collect();
        ctx.event(
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
