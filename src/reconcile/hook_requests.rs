//! Hooks run outside a revision's apply: a chart's `test` hooks on request (`pallet test`,
//! annotation `pallet.dev/requested-test`) and its `pre-delete`/`post-delete` hooks while the
//! BundleDeployment is deleted. One hook at a time, in helm's order, with helm's delete
//! policies, as [`super::hooks`] runs install and upgrade hooks; how far a run got is kept in
//! the status ([`HookRequest`]), so a pass never blocks on a hook and a restart goes on where
//! the run stood.

use super::workload::Workload;
use std::time::Duration;

use kube::ResourceExt;
use pallet_formats::helm::hooks::HookEvent;

use super::hook_plan::{self, HookObject, Next};
use super::hooks::{self, Progress};
use super::view::View;
use super::{Context, ReconcileError};
use crate::api::{BundleDeployment, HookPhase, HookRequest};
use crate::apply::Applier;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// How often a running hook is looked at when no watch event comes first.
pub const POLL: Duration = Duration::from_secs(2);

/// What a run of one event's hooks came to in this pass.
#[derive(Debug, PartialEq, Eq)]
pub enum Gate {
    /// Every hook of the event succeeded (or it has none).
    Done,
    /// A hook is still running: what it is doing.
    Wait(String),
    /// A hook failed: which and why.
    Failed(String),
}

/// The clock a hook run is judged by, and its deadline (`rollout.progressDeadline`).
#[derive(Clone, Copy)]
pub struct Timing<'a> {
    /// The time now.
    pub now: &'a Time,
    /// How long a run may take from its start.
    pub deadline: Duration,
}

impl<'a> Timing<'a> {
    /// The timing of the pass seen by `view`, at `now`.
    pub fn of(view: &View<'_>, now: &'a Time) -> Timing<'a> {
        Timing {
            now,
            deadline: view.rollout.progress_deadline,
        }
    }
}

/// A new run of `events`' hooks among `objects` (revision `revision`'s), answering `request`,
/// started `now`.
pub fn start(
    objects: &[pallet_formats::Object],
    events: &[HookEvent],
    revision: i64,
    request: Option<String>,
    now: &Time,
) -> (HookRequest, Vec<HookObject>) {
    let hooks = hook_plan::request_hooks(objects, events);
    let runs = hook_plan::plan_events(&hooks, events);
    let run = HookRequest {
        request,
        revision,
        phase: HookPhase::Running,
        started_at: Some(now.clone()),
        finished_at: None,
        message: None,
        hooks: runs,
    };
    (run, hooks)
}

/// Runs `event`'s hooks of `run` as far as they go in this pass, within
/// `rollout.progressDeadline` of the run's start.
pub async fn run_event(
    (ctx, workload): (&Context, &Workload),
    (bd, timing): (&BundleDeployment, Timing<'_>),
    applier: &Applier,
    run: &mut HookRequest,
    hooks: &[HookObject],
    event: HookEvent,
) -> Result<Gate, ReconcileError> {
    loop {
        match hook_plan::next(&run.hooks, hooks, event) {
            Next::Done => return Ok(Gate::Done),
            Next::DeleteSucceeded(indices) => {
                delete(
                    (ctx, workload),
                    bd,
                    applier,
                    run,
                    hooks,
                    &indices,
                    "hook-succeeded",
                )
                .await?;
            }
            Next::Failed {
                failed,
                delete: indices,
            } => {
                for i in indices {
                    let policy = if i == failed {
                        "hook-failed"
                    } else {
                        "hook-succeeded"
                    };
                    delete((ctx, workload), bd, applier, run, hooks, &[i], policy).await?;
                }
                let hook = &run.hooks[failed];
                return Ok(Gate::Failed(format!(
                    "{} failed: {}",
                    hooks::describe(hook),
                    hook.message.as_deref().unwrap_or("no detail")
                )));
            }
            Next::Run(i) => {
                let hook_run = run.hooks[i].clone();
                let progress = match hook_plan::find(hooks, &hook_run) {
                    Some(hook) => {
                        hooks::step((ctx, workload), bd, applier, &hook_run, hook, None).await?
                    }
                    None => Progress::Failed("not among the revision's objects".into()),
                };
                let (phase, message) = match progress {
                    Progress::Succeeded => (HookPhase::Succeeded, None),
                    Progress::Failed(why) => (HookPhase::Failed, Some(why)),
                    Progress::Running(what) if past_deadline(timing, run) => (
                        HookPhase::Failed,
                        Some(format!(
                            "not done within rollout.progressDeadline ({}): {what}",
                            bd.spec.rollout().progress_deadline()
                        )),
                    ),
                    Progress::Running(what) => {
                        run.hooks[i].phase = HookPhase::Running;
                        return Ok(Gate::Wait(format!(
                            "waiting for {}: {what}",
                            hooks::describe(&hook_run)
                        )));
                    }
                };
                run.hooks[i].phase = phase;
                run.hooks[i].message = message;
            }
        }
    }
}

/// Ends `run` as `phase` with `message`, `now`.
pub fn finish(run: &mut HookRequest, phase: HookPhase, message: Option<String>, now: &Time) {
    run.phase = phase;
    run.message = message;
    run.finished_at = Some(now.clone());
}

fn past_deadline(timing: Timing<'_>, run: &HookRequest) -> bool {
    run.started_at.as_ref().is_some_and(|started| {
        let elapsed = timing.now.0.as_second() - started.0.as_second();
        elapsed >= i64::try_from(timing.deadline.as_secs()).unwrap_or(i64::MAX)
    })
}

/// Deletes the objects of `run`'s hooks `indices` under `policy` and marks them deleted.
async fn delete(
    (ctx, workload): (&Context, &Workload),
    bd: &BundleDeployment,
    applier: &Applier,
    run: &mut HookRequest,
    hooks: &[HookObject],
    indices: &[usize],
    policy: &str,
) -> Result<(), ReconcileError> {
    for &i in indices {
        let Some(hook_run) = run.hooks.get(i).cloned() else {
            continue;
        };
        if let Some(hook) = hook_plan::find(hooks, &hook_run) {
            if let Some((key, api_version, _, Some(_))) =
                hooks::locate(workload, applier, hook).await?
            {
                applier.prune(&[(key, api_version)]).await?;
                hooks::log_hook_writes(ctx, bd, applier, &hook_run, Some(policy));
            }
        }
        run.hooks[i].deleted = true;
    }
    tracing::debug!(bundle_deployment = %bd.name_any(), policy, "hook objects deleted");
    Ok(())
}

/// Answers a `pallet.dev/requested-test` annotation not answered yet and moves a test run on:
/// the active revision's `test` hooks run one after the other, their results go to
/// `status.test`. Returns when to look again while a test runs.
pub async fn advance_test(
    view: &View<'_>,
    ctx: &Context,
    work: &mut crate::api::BundleDeploymentStatus,
) -> Result<Option<Duration>, ReconcileError> {
    let current = view.current();
    let (bd, timing) = (view.bd, Timing::of(view, &current));
    let now = timing.now;
    let requested = bd
        .annotations()
        .get(crate::api::REQUESTED_TEST_ANNOTATION)
        .cloned();
    let answered = work.test.as_ref().and_then(|t| t.request.clone());
    let new_request = requested.filter(|r| answered.as_ref() != Some(r));
    let Some(active) = work.active_revision else {
        if let Some(request) = new_request {
            let mut run = refused(request, 0, now);
            finish(
                &mut run,
                HookPhase::Failed,
                Some("no revision is active: nothing to test".into()),
                now,
            );
            work.test = Some(run);
        }
        return Ok(None);
    };
    let objects = match (&new_request, &work.test) {
        (Some(_), _) => ctx.revisions.load(&bd.name_any(), active).await?,
        (None, Some(run)) if run.phase == HookPhase::Running => {
            ctx.revisions.load(&bd.name_any(), run.revision).await?
        }
        _ => return Ok(None),
    };
    let (mut run, hooks) = match new_request {
        Some(request) => {
            let (run, hooks) = start(&objects, &[HookEvent::Test], active, Some(request), now);
            ctx.records
                .event(
                    bd,
                    false,
                    "TestStarted",
                    "Test",
                    format!("running the test hooks of revision {active}"),
                )
                .await;
            (run, hooks)
        }
        None => {
            let Some(run) = work.test.clone() else {
                return Ok(None);
            };
            (run, hook_plan::request_hooks(&objects, &[HookEvent::Test]))
        }
    };
    if run.hooks.is_empty() {
        finish(
            &mut run,
            HookPhase::Succeeded,
            Some("the chart has no test hooks".into()),
            now,
        );
        work.test = Some(run);
        return Ok(None);
    }
    let applier = ctx.applier(bd, view.workload, view.workload.writer.clone());
    let gate = run_event(
        (ctx, view.workload),
        (bd, timing),
        &applier,
        &mut run,
        &hooks,
        HookEvent::Test,
    )
    .await?;
    let requeue = match gate {
        Gate::Done => {
            finish(&mut run, HookPhase::Succeeded, None, now);
            ctx.records
                .event(
                    bd,
                    false,
                    "TestSucceeded",
                    "Test",
                    format!("the test hooks of revision {} succeeded", run.revision),
                )
                .await;
            None
        }
        Gate::Failed(why) => {
            ctx.records
                .event(
                    bd,
                    true,
                    "TestFailed",
                    "Test",
                    format!("revision {}: {why}", run.revision),
                )
                .await;
            finish(&mut run, HookPhase::Failed, Some(why), now);
            None
        }
        Gate::Wait(_) => Some(POLL),
    };
    work.test = Some(run);
    Ok(requeue)
}

/// A run that did not start (answering `request`, so that it is not asked again).
fn refused(request: String, revision: i64, now: &Time) -> HookRequest {
    HookRequest {
        request: Some(request),
        revision,
        phase: HookPhase::Running,
        started_at: Some(now.clone()),
        finished_at: None,
        message: None,
        hooks: Vec::new(),
    }
}
