//! A helm chart's delete hooks while its BundleDeployment is deleted (deletionPolicy Delete),
//! as `helm uninstall` runs them: the `pre-delete` hooks before the release's objects are
//! deleted, the `post-delete` hooks after, each event's in helm's order with helm's delete
//! policies (see [`super::hook_requests`]). How far they got is kept in
//! `status.deleteHooks`.
//!
//! A failed hook stops the deletion, as it stops `helm uninstall`: the finalizer stays, Ready is
//! False with reason `HookFailed` naming the hook, and nothing more is deleted (after a failed
//! pre-delete hook the objects are all still there). A retry request (`pallet retry`) runs the
//! delete hooks again from the first; removing the finalizer by hand leaves everything as it is.

use std::time::Duration;

use kube::ResourceExt;
use pallet_formats::helm::hooks::HookEvent;

use super::hook_requests::{self, Gate};
use super::status::{FailedPhase, Outcome};
use super::{Context, ReconcileError, StatusWriter};
use crate::api::{BundleDeployment, HookPhase, REQUESTED_RETRY_ANNOTATION};

/// The events, in the order they run.
const EVENTS: [HookEvent; 2] = [HookEvent::PreDelete, HookEvent::PostDelete];

/// Condition reason when a delete hook failed.
pub const REASON_HOOK_FAILED: &str = super::hooks::REASON_HOOK_FAILED;

/// Runs `event`'s delete hooks of `bd` as far as they go: `Ok` to go on with the deletion;
/// [`ReconcileError::DeleteHookRunning`] while a hook runs and [`ReconcileError::DeleteHookFailed`]
/// once one failed, both keeping the finalizer.
pub async fn run(
    bd: &BundleDeployment,
    (ctx, workload): (&Context, &super::workload::Workload),
    event: HookEvent,
) -> Result<(), ReconcileError> {
    let status = bd.status.clone().unwrap_or_default();
    // The deletion goes on whatever the spec says: a duration that is not one counts as the
    // default deadline here (the pass that applies reports it).
    let deadline = super::view::Rollout::of(bd)
        .unwrap_or_else(|_| super::view::Rollout::defaults(bd))
        .progress_deadline;
    let now = super::view::wall_clock();
    let timing = hook_requests::Timing {
        now: &now,
        deadline,
    };
    let retry = bd
        .annotations()
        .get(REQUESTED_RETRY_ANNOTATION)
        .filter(|r| status.last_handled_retry.as_ref() != Some(*r))
        .cloned();
    let mut retried = false;
    let mut run = match (status.delete_hooks.clone(), &retry) {
        (Some(run), Some(_)) if run.phase == HookPhase::Failed => {
            retried = true;
            None
        }
        (run, _) => run,
    };
    let objects = match (&run, status.active_revision) {
        (Some(run), _) => ctx.revisions.load(&bd.name_any(), run.revision).await?,
        (None, Some(active)) => ctx.revisions.load(&bd.name_any(), active).await?,
        (None, None) => return Ok(()),
    };
    let hooks = super::hook_plan::request_hooks(&objects, &EVENTS);
    if hooks.is_empty() {
        return Ok(());
    }
    let mut current = match run.take() {
        Some(run) => run,
        None => {
            let revision = status.active_revision.unwrap_or_default();
            hook_requests::start(&objects, &EVENTS, revision, None, &now).0
        }
    };
    if current.phase == HookPhase::Failed {
        // Reported when it failed; the deletion waits for a retry or the finalizer's removal.
        return Err(ReconcileError::DeleteHookFailed(
            current.message.clone().unwrap_or_default(),
        ));
    }
    let applier = ctx.applier(bd, workload, workload.writer.clone());
    let gate = hook_requests::run_event(
        (ctx, workload),
        (bd, timing),
        &applier,
        &mut current,
        &hooks,
        event,
    )
    .await?;
    let (outcome, result) = match gate {
        // The post-delete hooks were the last step: the BundleDeployment goes now.
        Gate::Done if event == HookEvent::PostDelete => return Ok(()),
        // Recorded before the objects go, so that a restart does not run them again.
        Gate::Done => (
            Outcome::RunningHooks {
                message: "pre-delete hooks done; deleting the objects".into(),
            },
            Ok(()),
        ),
        Gate::Wait(message) => (
            Outcome::RunningHooks {
                message: message.clone(),
            },
            Err(ReconcileError::DeleteHookRunning {
                message,
                after: POLL,
            }),
        ),
        Gate::Failed(why) => {
            let message = format!(
                "the deletion stopped: {why}; `pallet retry` runs the delete hooks again, \
                 removing the finalizer leaves everything as it is"
            );
            ctx.records
                .event(bd, true, REASON_HOOK_FAILED, "Delete", message.clone())
                .await;
            hook_requests::finish(&mut current, HookPhase::Failed, Some(why), &now);
            (
                Outcome::Failed {
                    phase: FailedPhase::Install,
                    reason: REASON_HOOK_FAILED.into(),
                    message: message.clone(),
                    transient: false,
                },
                Err(ReconcileError::DeleteHookFailed(message)),
            )
        }
    };
    if result.is_ok() && status.delete_hooks.as_ref() == Some(&current) {
        return result;
    }
    let mut writer = StatusWriter::new(ctx, bd, now.clone());
    let mut work = writer.written.clone();
    work.delete_hooks = Some(current);
    if retried {
        work.last_handled_retry = retry;
    }
    writer.write(&mut work, &outcome).await?;
    result
}

/// How long a pass waits at most before it looks at a running delete hook again.
pub const POLL: Duration = hook_requests::POLL;
