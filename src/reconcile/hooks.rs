//! The helm hook phase: runs a revision's `pre-install`/`pre-upgrade` hooks before its objects
//! are applied and its `post-install`/`post-upgrade` hooks once they are healthy, one hook at a
//! time, as [`super::hook_plan`] decides.
//!
//! The phase never blocks a worker on a running hook: each pass looks at the hook in progress
//! (one GET), moves on when it is done, and otherwise asks to be called again soon (a watch on
//! the hook's kind usually brings the pass sooner). How far the hooks got is kept in the
//! revision's `hooks` list in the status, so a hook runs once per revision: never again on a
//! later pass, a restart of the agent, or a rollback to the revision.

use super::workload::Workload;
use std::time::Duration;

use kube::api::{Api, DynamicObject};
use kube::ResourceExt;
use pallet_formats::ObjectKey;
use serde_json::{json, Value};

use super::hook_plan::{self, HookObject, Next, Readiness, Stage};
use super::status::{HealthReport, Outcome};
use super::view::View;
use super::{change_object, rollout, Context, ReconcileError, Step};
use crate::api::{BundleDeployment, BundleDeploymentStatus, HookPhase, HookRun};
use crate::apply::{plan::REVISION_ANNOTATION, Applied, Applier, Outcome as ApplyOutcome};
use crate::changelog::{Operation, Reason};

/// Condition, revision and Event reason when a hook fails.
pub const REASON_HOOK_FAILED: &str = "HookFailed";

/// How often a running hook is looked at when no watch event comes first.
const HOOK_POLL: Duration = Duration::from_secs(2);

/// How long a pass waits for a hook's previous object to go (before-hook-creation) before it
/// leaves the wait to a later pass.
const DELETE_WAIT: Duration = Duration::from_secs(10);

/// What the stage came to in this pass.
#[derive(Debug, PartialEq, Eq)]
pub enum Gate {
    /// Every hook of the stage succeeded (or it has none): go on.
    Open,
    /// A hook is still running.
    Wait {
        /// Which hook and what it is doing.
        message: String,
        /// When to look again.
        requeue: Duration,
    },
    /// A hook failed: the revision fails.
    Failed {
        /// CamelCase reason.
        reason: String,
        /// Which hook (event, kind, namespace/name) and why.
        message: String,
    },
}

/// Where one hook got to in this pass.
pub(super) enum Progress {
    Running(String),
    Succeeded,
    Failed(String),
}

/// What a hook stage of a pass runs for: the BundleDeployment, the revision applied (its
/// number), and the pass's clock and progress deadline (from its [`View`]).
pub(super) struct StageRun<'a> {
    bd: &'a BundleDeployment,
    workload: &'a Workload,
    number: i64,
    deadline: Duration,
    now: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
}

impl<'a> StageRun<'a> {
    /// The hooks of revision `number` in the pass seen by `view`.
    pub(super) fn new(view: &'a View<'a>, number: i64) -> StageRun<'a> {
        StageRun {
            bd: view.bd,
            workload: view.workload,
            number,
            deadline: view.rollout.progress_deadline,
            now: view.current(),
        }
    }
}

/// The pre stage, before the release's objects are applied: `None` when its hooks are done
/// (go on), else the step this pass comes to (waiting for a hook, or failed).
pub(super) async fn before(
    ctx: &Context,
    stage: &StageRun<'_>,
    applier: &Applier,
    work: &mut BundleDeploymentStatus,
    hooks: &[HookObject],
) -> Result<Option<Step>, ReconcileError> {
    Ok(
        match run_stage(ctx, stage, applier, work, hooks, Stage::Pre).await? {
            Gate::Open => None,
            Gate::Wait { message, requeue } => {
                Some(Step::Done(Outcome::RunningHooks { message }, requeue))
            }
            Gate::Failed { reason, message } => Some(Step::Failed { reason, message }),
        },
    )
}

/// The post stage, once the release's objects are `health`y: `None` to go on, with `health`
/// still unhealthy (naming the hook) while a hook runs; `Some` when a hook failed.
pub(super) async fn after(
    ctx: &Context,
    stage: &StageRun<'_>,
    applier: &Applier,
    work: &mut BundleDeploymentStatus,
    hooks: &[HookObject],
    health: &mut HealthReport,
) -> Result<Option<Step>, ReconcileError> {
    if !health.healthy {
        return Ok(None);
    }
    match run_stage(ctx, stage, applier, work, hooks, Stage::Post).await? {
        Gate::Open => Ok(None),
        Gate::Wait { message, .. } => {
            // Unhealthy until the hook is done: the pass asks to be called again soon, and a
            // watch on the hook's kind usually brings that pass sooner still.
            health.healthy = false;
            health.message = message;
            Ok(None)
        }
        Gate::Failed { reason, message } => Ok(Some(Step::Failed { reason, message })),
    }
}

/// Runs the applied revision's hooks of `stage` as far as they go in this pass; updates their
/// runs in `work` (the caller writes the status).
async fn run_stage(
    ctx: &Context,
    stage_run: &StageRun<'_>,
    applier: &Applier,
    work: &mut BundleDeploymentStatus,
    hooks: &[HookObject],
    stage: Stage,
) -> Result<Gate, ReconcileError> {
    let (bd, number, workload) = (stage_run.bd, stage_run.number, stage_run.workload);
    let operation = hook_plan::Operation::of_release(number, hook_plan::continues_release(bd));
    let event = hook_plan::event(operation, stage);
    loop {
        let Some(runs) = rollout::entry(work, number).map(|r| r.hooks.clone()) else {
            return Ok(Gate::Open);
        };
        match hook_plan::next(&runs, hooks, event) {
            Next::Done => return Ok(Gate::Open),
            Next::DeleteSucceeded(delete) => {
                delete_runs(
                    (ctx, workload),
                    (bd, number),
                    applier,
                    work,
                    hooks,
                    &delete,
                    "hook-succeeded",
                )
                .await?;
            }
            Next::Failed { failed, delete } => {
                for i in delete {
                    let policy = if i == failed {
                        "hook-failed"
                    } else {
                        "hook-succeeded"
                    };
                    delete_runs(
                        (ctx, workload),
                        (bd, number),
                        applier,
                        work,
                        hooks,
                        &[i],
                        policy,
                    )
                    .await?;
                }
                let run = &runs[failed];
                return Ok(Gate::Failed {
                    reason: REASON_HOOK_FAILED.into(),
                    message: format!(
                        "{} failed: {}",
                        describe(run),
                        run.message.as_deref().unwrap_or("no detail")
                    ),
                });
            }
            Next::Run(i) => {
                let run = runs[i].clone();
                let progress = match hook_plan::find(hooks, &run) {
                    Some(hook) => {
                        step((ctx, workload), bd, applier, &run, hook, Some(number)).await?
                    }
                    None => Progress::Failed("not among the revision's objects".into()),
                };
                let (phase, message) = match progress {
                    Progress::Succeeded => {
                        ctx.records
                            .event(
                                bd,
                                false,
                                "HookSucceeded",
                                "Hook",
                                format!("revision {number}: {} succeeded", describe(&run)),
                            )
                            .await;
                        (HookPhase::Succeeded, None)
                    }
                    Progress::Failed(why) => (HookPhase::Failed, Some(why)),
                    Progress::Running(what) => {
                        let revision = rollout::entry(work, number);
                        if rollout::deadline_passed(revision, stage_run.deadline, &stage_run.now) {
                            let why = format!(
                                "not done within rollout.progressDeadline ({}): {what}",
                                bd.spec.rollout().progress_deadline()
                            );
                            (HookPhase::Failed, Some(why))
                        } else {
                            let remaining = rollout::deadline_remaining(
                                revision,
                                stage_run.deadline,
                                &stage_run.now,
                            )
                            .unwrap_or_default();
                            set_run(work, number, i, HookPhase::Running, None);
                            return Ok(Gate::Wait {
                                message: format!("waiting for {}: {what}", describe(&run)),
                                requeue: HOOK_POLL.min(remaining + Duration::from_millis(100)),
                            });
                        }
                    }
                };
                set_run(work, number, i, phase, message);
            }
        }
    }
}

/// `pre-upgrade hook Job ns/name`, for messages.
pub(super) fn describe(run: &HookRun) -> String {
    let object = &run.object;
    match object.namespace.as_str() {
        "" => format!("{} hook {} {}", run.event, object.kind, object.name),
        ns => format!("{} hook {} {ns}/{}", run.event, object.kind, object.name),
    }
}

fn set_run(
    work: &mut BundleDeploymentStatus,
    number: i64,
    i: usize,
    phase: HookPhase,
    message: Option<String>,
) {
    if let Some(run) = work
        .revisions
        .iter_mut()
        .find(|r| r.number == number)
        .and_then(|r| r.hooks.get_mut(i))
    {
        run.phase = phase;
        run.message = message;
    }
}

/// The hook's object on the cluster: its key (namespace resolved), apiVersion, API, and the live
/// object if there is one. `None` when the cluster does not serve its kind.
pub(super) async fn locate(
    workload: &Workload,
    applier: &Applier,
    hook: &HookObject,
) -> Result<Option<(ObjectKey, String, Api<DynamicObject>, Option<DynamicObject>)>, ReconcileError>
{
    let Some((key, api_version)) = applier
        .resolve_keys(std::slice::from_ref(&hook.object))
        .await?
        .into_iter()
        .next()
    else {
        return Ok(None);
    };
    let Some((api, resource)) = applier.api_for_existing(&key, &api_version).await? else {
        return Ok(None);
    };
    // A change to the hook (a Job completing) brings the next pass at once.
    workload.watch(&resource);
    let live = api
        .get_opt(&key.name)
        .await
        .map_err(|e| ReconcileError::Kube {
            context: format!("read hook {key}"),
            source: e,
        })?;
    Ok(Some((key, api_version, api, live)))
}

/// One look at hook `run`: create it when it has not been (deleting its previous object first
/// under before-hook-creation), then judge how far it got. `revision` is the revision whose
/// apply runs it (an object of that revision is its own earlier run); `None` for hooks run on
/// request or on deletion, which are created anew whenever their run is Pending.
pub(super) async fn step(
    (ctx, workload): (&Context, &Workload),
    bd: &BundleDeployment,
    applier: &Applier,
    run: &HookRun,
    hook: &HookObject,
    revision: Option<i64>,
) -> Result<Progress, ReconcileError> {
    let Some((key, api_version, api, mut live)) = locate(workload, applier, hook).await? else {
        return Ok(Progress::Failed(format!(
            "the cluster does not serve {} {}",
            hook.object.api_version(),
            hook.object.kind()
        )));
    };
    let ours_this_revision = |l: &DynamicObject| {
        revision.is_some_and(|r| l.annotations().get(REVISION_ANNOTATION) == Some(&r.to_string()))
            && l.metadata.deletion_timestamp.is_none()
    };
    if run.phase == HookPhase::Pending && !live.as_ref().is_some_and(ours_this_revision) {
        if let Some(previous) = &live {
            if previous.metadata.deletion_timestamp.is_none() {
                if !hook_plan::delete_before_creation(hook) {
                    return Ok(Progress::Failed(format!(
                        "{key} already exists (from an earlier run) and its \
                         helm.sh/hook-delete-policy has no before-hook-creation"
                    )));
                }
                applier
                    .delete_hooks(&[(key.clone(), api_version.clone())])
                    .await?;
                log_hook_writes(ctx, bd, applier, run, Some("before-hook-creation"));
            }
            if !wait_gone(&api, &key.name).await? {
                return Ok(Progress::Running(format!(
                    "waiting for the previous {} to be deleted (before-hook-creation)",
                    key.kind
                )));
            }
        }
        let applied = applier.apply(std::slice::from_ref(&hook.object)).await;
        log_hook_writes(ctx, bd, applier, run, None);
        match applied {
            Ok(mut applied) => live = applied.pop().and_then(|a| a.live).and_then(to_dynamic),
            Err(e) if e.is_transient() => return Err(e.into()),
            Err(e) => return Ok(Progress::Failed(e.to_string())),
        }
    }
    let Some(live) = live else {
        if hook_plan::deleted_when_finished(&hook.object) {
            return finished_job_outcome(workload, bd, &key, revision.unwrap_or_default()).await;
        }
        return Ok(Progress::Failed(format!(
            "{key} was deleted while the hook ran"
        )));
    };
    let body = serde_json::to_value(&live).unwrap_or(Value::Null);
    Ok(
        match hook_plan::readiness(hook.object.group(), hook.object.kind(), &body) {
            Readiness::Succeeded => Progress::Succeeded,
            Readiness::Failed(why) => Progress::Failed(why),
            Readiness::Running(what) => Progress::Running(what),
        },
    )
}

/// A hook Job the TTL controller deleted once it finished, before a pass saw how: its outcome
/// from the Job controller's Events since the revision began applying (a Job of the same name
/// from an earlier revision finished before that).
async fn finished_job_outcome(
    workload: &Workload,
    bd: &BundleDeployment,
    key: &ObjectKey,
    revision: i64,
) -> Result<Progress, ReconcileError> {
    let since = bd
        .status
        .as_ref()
        .and_then(|s| s.revisions.iter().find(|r| r.number == revision))
        .and_then(|r| r.applied_at.as_ref())
        .map(|t| t.0.as_second());
    let namespace = key.namespace.clone().unwrap_or_default();
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(workload.client.clone(), &namespace);
    let selector = format!("involvedObject.kind=Job,involvedObject.name={}", key.name);
    let list = events
        .list(&kube::api::ListParams::default().fields(&selector))
        .await
        .map_err(|e| ReconcileError::Kube {
            context: format!("read the Events of hook {key}"),
            source: e,
        })?;
    let mut seen: Vec<(i64, String, String, String)> = list
        .items
        .into_iter()
        .filter_map(|e| {
            let at = e
                .last_timestamp
                .map(|t| t.0.as_second())
                .or_else(|| e.event_time.map(|t| t.0.as_second()))
                .or_else(|| e.metadata.creation_timestamp.map(|t| t.0.as_second()))?;
            Some((
                at,
                e.reason.unwrap_or_default(),
                e.type_.unwrap_or_default(),
                e.message.unwrap_or_default(),
            ))
        })
        .filter(|(at, ..)| since.is_none_or(|s| *at >= s))
        .collect();
    seen.sort_by_key(|e| e.0);
    let events: Vec<(String, String, String)> =
        seen.into_iter().map(|(_, r, t, m)| (r, t, m)).collect();
    Ok(match hook_plan::job_outcome_from_events(&events) {
        Some(Readiness::Succeeded) => Progress::Succeeded,
        Some(Readiness::Failed(why)) => Progress::Failed(why),
        Some(Readiness::Running(what)) => Progress::Running(what),
        None => Progress::Failed(format!(
            "{key} was deleted (spec.ttlSecondsAfterFinished) and its Events do not say \
             whether it completed"
        )),
    })
}

fn to_dynamic(value: Value) -> Option<DynamicObject> {
    serde_json::from_value(value).ok()
}

/// Polls until the object `name` is gone, for at most [`DELETE_WAIT`]; true when it is.
async fn wait_gone(api: &Api<DynamicObject>, name: &str) -> Result<bool, ReconcileError> {
    let deadline = tokio::time::Instant::now() + DELETE_WAIT;
    loop {
        let live = api.get_opt(name).await.map_err(|e| ReconcileError::Kube {
            context: format!("read hook {name}"),
            source: e,
        })?;
        if live.is_none() {
            return Ok(true);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Deletes the objects of runs `indices` under `policy` and marks them deleted.
async fn delete_runs(
    (ctx, workload): (&Context, &Workload),
    (bd, number): (&BundleDeployment, i64),
    applier: &Applier,
    work: &mut BundleDeploymentStatus,
    hooks: &[HookObject],
    indices: &[usize],
    policy: &str,
) -> Result<(), ReconcileError> {
    let Some(runs) = rollout::entry(work, number).map(|r| r.hooks.clone()) else {
        return Ok(());
    };
    for &i in indices {
        let Some(run) = runs.get(i) else { continue };
        if let Some(hook) = hook_plan::find(hooks, run) {
            if let Some((key, api_version, _, Some(_))) = locate(workload, applier, hook).await? {
                applier.delete_hooks(&[(key, api_version)]).await?;
                log_hook_writes(ctx, bd, applier, run, Some(policy));
            }
        }
        if let Some(run) = work
            .revisions
            .iter_mut()
            .find(|r| r.number == number)
            .and_then(|r| r.hooks.get_mut(i))
        {
            run.deleted = true;
        }
    }
    Ok(())
}

/// Writes a change-log line (reason `hook`) for each write in the applier's journal.
pub(super) fn log_hook_writes(
    ctx: &Context,
    bd: &BundleDeployment,
    applier: &Applier,
    run: &HookRun,
    delete_policy: Option<&str>,
) {
    let writes: Vec<Applied> = applier.journal.take();
    for write in writes.into_iter().filter(|w| w.outcome.is_write()) {
        let operation = match write.outcome {
            ApplyOutcome::Created => Operation::Create,
            ApplyOutcome::Deleted => Operation::Delete,
            _ => Operation::Update,
        };
        let mut entry = ctx.records.changelog.entry(
            &bd.name_any(),
            operation,
            Reason::Hook,
            change_object(&write.key, &write.api_version),
        );
        entry.revision = applier.revision;
        entry.resource_version_before = write.resource_version_before;
        entry.resource_version_after = write.resource_version_after;
        entry.fields_changed = write.fields_changed;
        entry.details.insert("hookEvent".into(), json!(run.event));
        if let Some(policy) = delete_policy {
            entry.details.insert("deletePolicy".into(), json!(policy));
        }
        ctx.records.changelog.record(&entry);
    }
}
