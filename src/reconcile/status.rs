//! Pure status computation: from what a reconcile found and did to the BundleDeployment's next
//! status. No I/O; the clock comes in as a value.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::conditions::{find, set_condition, types, NewCondition};
use crate::api::{BundleDeploymentStatus, Drift, Inventory, ObjectReference, RevisionPhase};

/// At most this many objects are listed in `status.inventory.objects`; the count is always exact.
/// Keeps the status of a very large bundle well under the object size limit.
pub const INVENTORY_LIST_LIMIT: usize = 2000;

/// What one reconcile came to.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The active revision's objects are applied (and were assessed for health). The revision
    /// bookkeeping (`status.revisions`, `activeRevision`, …) is already in the status passed in.
    Installed {
        /// The applied objects.
        inventory: Vec<ObjectReference>,
        /// Objects skipped because the cluster does not serve their kind.
        skipped: Vec<ObjectReference>,
        /// How many objects were written (created or updated) in this pass.
        written: usize,
        /// The health of the applied objects.
        health: HealthReport,
        /// The revision applied (None: nothing is active).
        revision: Option<i64>,
        /// What this pass knows of the sources (condition Unpacked).
        sources: SourceState,
        /// The active revision is what the spec and sources render now: a rollback in force
        /// (automatic or requested) is over.
        spec_current: bool,
    },
    /// A revision is about to be applied: recorded before the first write, so that an agent
    /// that dies midway knows on restart what it was doing and what may need pruning.
    Applying {
        /// Every object that may be on the cluster: the previous inventory plus the revision's.
        inventory: Vec<ObjectReference>,
        /// What started.
        transition: Transition,
    },
    /// Helm hooks of the active revision are running before its objects are applied.
    RunningHooks {
        /// Which hook is running and what it is doing.
        message: String,
    },
    /// `spec.paused`: nothing was written.
    Paused {
        /// The reason given in `pallet.dev/paused-reason`, if any.
        reason: Option<String>,
        /// Objects that differ from the bundle (what resuming would revert); `None` when they
        /// could not be computed (a source or the render failed), leaving the last list as is.
        drift: Option<Vec<ObjectReference>>,
    },
    /// Nothing was fetched or applied: a dependency (`spec.dependsOn`) is not ready, or the
    /// dependencies form a cycle (`stalled`: no dependency can ever become ready by itself).
    Waiting {
        /// CamelCase reason (`DependencyNotReady`, `DependencyCycle`, `InvalidDependency`).
        reason: String,
        /// What it waits for, or the cycle.
        message: String,
        /// True when it cannot end without a change to a spec.
        stalled: bool,
    },
    /// A phase failed.
    Failed {
        /// Which phase: Unpacked (fetch), Installed (render, apply).
        phase: FailedPhase,
        /// CamelCase reason (the error's category).
        reason: String,
        /// What went wrong, where.
        message: String,
        /// True when retrying without a change may succeed.
        transient: bool,
    },
}

/// What a pass that installed the active revision knows of the sources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceState {
    /// Fetched and resolved in this pass.
    Fetched,
    /// Not fetched in this pass (a rollback request): Unpacked keeps what the last fetch said.
    NotFetched,
    /// They could not be fetched (down, slow, refused): the active revision was enforced from its
    /// stored snapshot instead, and Unpacked says why the sources are not current. A transient
    /// problem (an outage) leaves Ready as the revision's health says; a permanent one (a bad
    /// spec, a missing version or Secret) also sets Ready=False and Stalled, as the user must act.
    Unavailable {
        /// CamelCase reason (the error's category, or `Fetching`).
        reason: String,
        /// What went wrong, where.
        message: String,
        /// True when it may pass without a change (network, server, a fetch in progress).
        transient: bool,
    },
}

/// Why a revision is being applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// A new revision: any earlier rollback is over.
    NewRevision,
    /// An earlier revision is being re-applied.
    Rollback {
        /// True after a failure (automatic), false on request.
        automatic: bool,
        /// CamelCase reason: the failure's, or RollbackRequested.
        reason: String,
        /// Which revision failed or was replaced, why, and which one returns.
        message: String,
    },
    /// The active revision is applied again (drift correction, or finishing after a restart).
    Reapply,
}

/// Health of the active revision's objects.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct HealthReport {
    /// Every object is healthy.
    pub healthy: bool,
    /// Some object has failed for good (not merely in progress).
    pub failed: bool,
    /// How many objects were assessed.
    pub total: usize,
    /// The first unhealthy objects and why; empty when healthy.
    pub message: String,
    /// Every object (or probe) not yet healthy, by name: while a revision progresses, the status
    /// is written again when this set changes, not at each step of one object's progress.
    pub waiting: Vec<String>,
    /// The first object a user's health check (`spec.healthChecks`) found failed, and why
    /// (naming the check): such a failure fails a progressing revision at once.
    pub failed_check: Option<String>,
}

/// Condition reason of an automatic rollback (RolledBack=True, Stalled=True).
pub const REASON_ROLLED_BACK: &str = "RolledBack";
/// Condition reason (Ready, Reconciling) while helm hooks run before a revision's objects.
pub const REASON_RUNNING_HOOKS: &str = "RunningHooks";
/// Condition reason of a rollback on request (RolledBack=True, not stalled).
pub const REASON_ROLLBACK_REQUESTED: &str = "RollbackRequested";

/// The phase a failure belongs to, which decides the condition it is reported on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailedPhase {
    /// Fetching sources (condition Unpacked).
    Fetch,
    /// Rendering or applying (condition Installed).
    Install,
    /// The spec is refused before anything is fetched (a health check that does not compile):
    /// Unpacked and Installed keep what they said, Ready says why.
    Spec,
}

/// The inventory for `objects`: the exact count, the list cut at [`INVENTORY_LIST_LIMIT`].
fn bounded_inventory(objects: &[ObjectReference]) -> Inventory {
    Inventory {
        count: objects.len() as i64,
        objects: objects.iter().take(INVENTORY_LIST_LIMIT).cloned().collect(),
    }
}

/// At most this many drifted objects are listed; the count is always exact.
pub const DRIFT_LIST_LIMIT: usize = 50;

fn drift_summary(drift: &[ObjectReference]) -> Option<Drift> {
    (!drift.is_empty()).then(|| Drift {
        count: drift.len() as i64,
        objects: drift.iter().take(DRIFT_LIST_LIMIT).cloned().collect(),
    })
}

/// Whether `after` differs from `before` only in the wording of a progressing revision's Ready
/// and Healthy messages (the same conditions, statuses and reasons; one object's rollout moving a
/// step). Such a change alone is not worth a status write: in a 1,000-bundle install these
/// were a third of the agent's requests. Pure.
pub fn progress_detail_only(
    before: &BundleDeploymentStatus,
    after: &BundleDeploymentStatus,
) -> bool {
    let mut after = after.clone();
    for condition in &mut after.conditions {
        if condition.type_ != types::READY && condition.type_ != types::HEALTHY {
            continue;
        }
        let Some(was) = find(&before.conditions, &condition.type_) else {
            return false;
        };
        if condition.reason != "Progressing"
            || was.reason != condition.reason
            || was.status != condition.status
        {
            return false;
        }
        condition.message = was.message.clone();
        condition.last_transition_time = was.last_transition_time.clone();
    }
    after == *before
}

/// When this pass applied revision `number` moments ago (the last write says Applying) and
/// its objects are not healthy yet, but nothing failed: how long to wait before writing that it
/// progresses, the revision having had `window` to settle (see [`super::settle`]). Most objects
/// settle within it, and then the status goes from Applying to Healthy in one write instead of
/// two. None: write now (a request handled by this pass is always recorded at once). Pure.
pub fn settling(
    written: &BundleDeploymentStatus,
    work: &BundleDeploymentStatus,
    number: i64,
    outcome: &Outcome,
    now: &Time,
    window: std::time::Duration,
) -> Option<std::time::Duration> {
    let Outcome::Installed { health, .. } = outcome else {
        return None;
    };
    if health.healthy || health.failed || health.failed_check.is_some() {
        return None;
    }
    let requests = |s: &BundleDeploymentStatus| {
        (
            s.last_handled_reconcile.clone(),
            s.last_handled_retry.clone(),
            s.last_handled_rollback.clone(),
        )
    };
    if requests(written) != requests(work) {
        return None;
    }
    // The revision this pass applied (`number`) was the one the last write recorded, Applying.
    if written.active_revision != Some(number) {
        return None;
    }
    let before = super::rollout::entry(written, number)?;
    let after = super::rollout::entry(work, number)?;
    if before.phase != RevisionPhase::Applying || after.phase != RevisionPhase::Progressing {
        return None;
    }
    let since = now.0.duration_since(after.applied_at.as_ref()?.0);
    let since = std::time::Duration::try_from(since).ok()?;
    window.checked_sub(since).filter(|left| !left.is_zero())
}

/// The status after `outcome`, starting from `current`, for `generation` at `now`: the
/// conditions one function per outcome writes, and what the outcome changes besides them.
pub fn next_status(
    current: &BundleDeploymentStatus,
    generation: Option<i64>,
    outcome: &Outcome,
    now: &Time,
) -> BundleDeploymentStatus {
    let mut status = current.clone();
    status.observed_generation = generation;
    // Read before the conditions are written: an automatic rollback in force.
    let rolled_back = RolledBack::of(&status.conditions);
    // The revision an Installed outcome applied, as the status records it.
    let applied = match outcome {
        Outcome::Installed { revision, .. } => revision.map(|number| {
            let entry = super::rollout::entry(&status, number);
            (number, entry.map(|r| (r.phase, r.digest.clone())))
        }),
        _ => None,
    };
    let mut c = Conditions {
        list: &mut status.conditions,
        generation,
        now,
    };
    match outcome {
        Outcome::Installed {
            inventory,
            skipped,
            health,
            sources,
            spec_current,
            ..
        } => {
            let installed = InstalledRevision::of(applied, inventory.len());
            installed_conditions(
                &mut c,
                &installed,
                health,
                sources,
                *spec_current,
                rolled_back,
            );
            status.inventory = Some(bounded_inventory(inventory));
            status.skipped = skipped.clone();
            // Everything was just applied: whatever drifted has been corrected.
            status.drift = None;
        }
        Outcome::Applying {
            inventory,
            transition,
        } => {
            applying(&mut c, &revision_name(status.active_revision), transition);
            // A superset of what is on the cluster: a restart prunes what the revision lacks.
            status.inventory = Some(bounded_inventory(inventory));
        }
        Outcome::RunningHooks { message } => running_hooks(&mut c, message),
        Outcome::Paused { reason, drift } => {
            paused(&mut c, reason.as_deref());
            if let Some(drift) = drift {
                status.drift = drift_summary(drift);
            }
        }
        Outcome::Waiting {
            reason,
            message,
            stalled,
        } => waiting(&mut c, reason, message, *stalled),
        Outcome::Failed {
            phase,
            reason,
            message,
            transient,
        } => failed(&mut c, *phase, reason, message, *transient),
    }
    status
}

/// The conditions being written, at one generation and time.
struct Conditions<'a> {
    list: &'a mut Vec<Condition>,
    generation: Option<i64>,
    now: &'a Time,
}

impl Conditions<'_> {
    /// Sets condition `type_` (see [`set_condition`]).
    fn set(&mut self, type_: &str, ok: bool, reason: &str, message: String) {
        set_condition(
            self.list,
            NewCondition {
                type_,
                status: ok,
                reason,
                message,
            },
            self.generation,
            self.now,
        );
    }

    /// Paused=False: reconciling normally.
    fn active(&mut self) {
        self.set(
            types::PAUSED,
            false,
            "Active",
            "reconciling normally".into(),
        );
    }
}

/// What the RolledBack condition said before this outcome.
#[derive(Clone, Debug, Default)]
struct RolledBack {
    /// Its message, while an automatic rollback is in force (True, reason RolledBack).
    automatic: Option<String>,
    /// Whether it was True (after any rollback).
    in_force: bool,
}

impl RolledBack {
    fn of(conditions: &[Condition]) -> RolledBack {
        let condition = find(conditions, types::ROLLED_BACK);
        RolledBack {
            automatic: condition
                .filter(|c| c.status == "True" && c.reason == REASON_ROLLED_BACK)
                .map(|c| c.message.clone()),
            in_force: condition.is_some_and(|c| c.status == "True"),
        }
    }
}

/// The revision an Installed outcome applied, as its conditions name it.
struct InstalledRevision {
    /// `revision N`, or `the bundle` when none is active.
    name: String,
    /// `; content sha256:…` (shortened), or nothing.
    content: String,
    /// Its phase.
    phase: Option<RevisionPhase>,
    /// How many objects were applied.
    objects: usize,
}

impl InstalledRevision {
    fn of(
        applied: Option<(i64, Option<(RevisionPhase, String)>)>,
        objects: usize,
    ) -> InstalledRevision {
        let number = applied.as_ref().map(|(number, _)| *number);
        let entry = applied.and_then(|(_, entry)| entry);
        InstalledRevision {
            name: revision_name(number),
            content: entry
                .as_ref()
                .map(|(_, digest)| format!("; content {}", digest.get(..19).unwrap_or(digest)))
                .unwrap_or_default(),
            phase: entry.map(|(phase, _)| phase),
            objects,
        }
    }
}

/// `revision N`, or `the bundle` when none is active.
fn revision_name(number: Option<i64>) -> String {
    number.map_or("the bundle".to_string(), |n| format!("revision {n}"))
}

/// Installed: the sources, the objects applied and their health, and the rollout's state:
/// progressing, rolled back, or idle; a permanent source problem stalls it.
fn installed_conditions(
    c: &mut Conditions<'_>,
    revision: &InstalledRevision,
    health: &HealthReport,
    sources: &SourceState,
    spec_current: bool,
    rolled_back: RolledBack,
) {
    let name = &revision.name;
    match sources {
        SourceState::Fetched => c.set(
            types::UNPACKED,
            true,
            "Unpacked",
            "all sources fetched and resolved".into(),
        ),
        SourceState::NotFetched => {}
        SourceState::Unavailable {
            reason, message, ..
        } => c.set(
            types::UNPACKED,
            false,
            reason,
            format!("{message}; the active revision is kept applied from its snapshot"),
        ),
    }
    c.set(
        types::INSTALLED,
        true,
        "Installed",
        // Not how many the last pass wrote: that changes from pass to pass, and each change
        // would cost a status write (the change log and Events say it).
        format!(
            "{name}: {} objects applied{}",
            revision.objects, revision.content
        ),
    );
    healthy_condition(c, name, health);
    c.active();
    let automatic = if spec_current {
        if rolled_back.in_force {
            c.set(
                types::ROLLED_BACK,
                false,
                "UpToDate",
                format!("{name} is what the spec and the sources render"),
            );
        }
        None
    } else {
        rolled_back.automatic
    };
    match (revision.phase, automatic) {
        (Some(RevisionPhase::Applying | RevisionPhase::Progressing), automatic) => {
            progressing(c, name, health, automatic)
        }
        (_, Some(message)) => rolled_back_conditions(c, message),
        _ => idle(c, name, health, revision.objects),
    }
    if let SourceState::Unavailable {
        reason,
        message,
        transient: false,
    } = sources
    {
        stalled_on_sources(c, name, reason, message);
    }
}

/// Healthy: all objects healthy, or why not (a user's check that failed, an object that failed,
/// or still progressing).
fn healthy_condition(c: &mut Conditions<'_>, name: &str, health: &HealthReport) {
    if health.healthy {
        c.set(
            types::HEALTHY,
            true,
            "Healthy",
            format!("{name}: all {} objects healthy", health.total),
        );
        return;
    }
    let reason = if health.failed_check.is_some() {
        "HealthCheckFailed"
    } else if health.failed {
        "Unhealthy"
    } else {
        "Progressing"
    };
    c.set(
        types::HEALTHY,
        false,
        reason,
        format!("{name}: {}", health.message),
    );
}

/// A revision on its way: not ready, reconciling; stalled only while an automatic rollback is
/// in force (`rolled_back`).
fn progressing(
    c: &mut Conditions<'_>,
    name: &str,
    health: &HealthReport,
    rolled_back: Option<String>,
) {
    c.set(
        types::READY,
        false,
        "Progressing",
        format!("{name} progressing: {}", health.message),
    );
    c.set(
        types::RECONCILING,
        true,
        "Progressing",
        format!("waiting for {name} to become healthy"),
    );
    match rolled_back {
        Some(message) => c.set(types::STALLED, true, REASON_ROLLED_BACK, message),
        None => c.set(types::STALLED, false, "Progressing", "not stalled".into()),
    }
}

/// An automatic rollback in force: not ready and stalled until the spec or the sources change.
fn rolled_back_conditions(c: &mut Conditions<'_>, message: String) {
    c.set(types::READY, false, REASON_ROLLED_BACK, message.clone());
    c.set(types::STALLED, true, REASON_ROLLED_BACK, message);
    c.set(
        types::RECONCILING,
        false,
        REASON_ROLLED_BACK,
        "waiting for a change to the spec or the sources, or a retry".into(),
    );
}

/// Nothing in progress: ready when healthy.
fn idle(c: &mut Conditions<'_>, name: &str, health: &HealthReport, objects: usize) {
    if health.healthy {
        c.set(
            types::READY,
            true,
            "Healthy",
            format!("{name} healthy: {objects} objects installed"),
        );
    } else {
        c.set(
            types::READY,
            false,
            "Unhealthy",
            format!("{name}: {}", health.message),
        );
    }
    c.set(
        types::RECONCILING,
        false,
        "Idle",
        "nothing in progress".into(),
    );
    c.set(types::STALLED, false, "Idle", "not stalled".into());
}

/// The sources fail for good (a bad spec, a missing version or Secret): the revision stays
/// applied, and the user must act.
fn stalled_on_sources(c: &mut Conditions<'_>, name: &str, reason: &str, message: &str) {
    let kept = format!("{message}; {name} is kept applied meanwhile");
    c.set(types::READY, false, reason, kept.clone());
    c.set(types::STALLED, true, reason, kept);
    c.set(
        types::RECONCILING,
        false,
        reason,
        "waiting for a change to the spec or the sources".into(),
    );
}

/// A revision about to be applied (the intent): what started it, and Applying.
fn applying(c: &mut Conditions<'_>, name: &str, transition: &Transition) {
    match transition {
        Transition::NewRevision => {
            c.set(
                types::ROLLED_BACK,
                false,
                "NewRevision",
                format!("{name} is the newest revision"),
            );
            c.set(types::STALLED, false, "Progressing", "not stalled".into());
        }
        Transition::Rollback {
            automatic,
            reason,
            message,
        } => {
            let condition_reason = if *automatic {
                REASON_ROLLED_BACK
            } else {
                REASON_ROLLBACK_REQUESTED
            };
            c.set(types::ROLLED_BACK, true, condition_reason, message.clone());
            if *automatic {
                c.set(types::STALLED, true, reason, message.clone());
            } else {
                c.set(types::STALLED, false, "Progressing", "not stalled".into());
            }
        }
        Transition::Reapply => {}
    }
    c.set(
        types::RECONCILING,
        true,
        "Applying",
        format!("applying {name}"),
    );
    c.set(types::READY, false, "Applying", format!("applying {name}"));
}

/// Helm hooks run before the revision's objects.
fn running_hooks(c: &mut Conditions<'_>, message: &str) {
    c.set(
        types::READY,
        false,
        REASON_RUNNING_HOOKS,
        message.to_string(),
    );
    c.set(
        types::RECONCILING,
        true,
        REASON_RUNNING_HOOKS,
        message.to_string(),
    );
    c.active();
}

/// `spec.paused`, with the reason given.
fn paused(c: &mut Conditions<'_>, reason: Option<&str>) {
    let message = match reason {
        Some(reason) => format!("paused: {reason}"),
        None => "paused (no reason given; set annotation pallet.dev/paused-reason)".into(),
    };
    c.set(types::PAUSED, true, "Paused", message);
    c.set(
        types::RECONCILING,
        false,
        "Paused",
        "paused: no writes until spec.paused is false".into(),
    );
}

/// Waiting for dependencies; stalled when they form a cycle (no dependency can become ready
/// by itself).
fn waiting(c: &mut Conditions<'_>, reason: &str, message: &str, stalled: bool) {
    c.set(types::READY, false, reason, message.to_string());
    c.active();
    if stalled {
        c.set(
            types::RECONCILING,
            false,
            reason,
            "waiting for a change to the dependencies".into(),
        );
        c.set(types::STALLED, true, reason, message.to_string());
    } else {
        c.set(types::RECONCILING, true, reason, message.to_string());
        c.set(
            types::STALLED,
            false,
            reason,
            "waiting for dependencies; starts when they are ready".into(),
        );
    }
}

/// A phase failed: said on its condition (Unpacked for a fetch, Installed for a render or an
/// apply) and on Ready; retried when transient, stalled otherwise.
fn failed(
    c: &mut Conditions<'_>,
    phase: FailedPhase,
    reason: &str,
    message: &str,
    transient: bool,
) {
    match phase {
        FailedPhase::Fetch => c.set(types::UNPACKED, false, reason, message.to_string()),
        FailedPhase::Install => {
            c.set(
                types::UNPACKED,
                true,
                "Unpacked",
                "all sources fetched and resolved".into(),
            );
            c.set(types::INSTALLED, false, reason, message.to_string());
        }
        FailedPhase::Spec => {}
    }
    c.set(types::READY, false, reason, message.to_string());
    c.active();
    if transient {
        c.set(
            types::RECONCILING,
            true,
            "Retrying",
            format!("retrying after: {message}"),
        );
        c.set(
            types::STALLED,
            false,
            "Retrying",
            "the error may pass; retrying with backoff".into(),
        );
    } else {
        c.set(
            types::RECONCILING,
            false,
            reason,
            waiting_message(reason).into(),
        );
        c.set(types::STALLED, true, reason, message.to_string());
    }
}

/// What a permanent failure waits for. Causes that can be fixed outside the bundle (a CRD
/// installed by hand, RBAC granted) are retried at every requeue as well, and the message says
/// so instead of claiming the agent only waits.
fn waiting_message(reason: &str) -> &'static str {
    match reason {
        "KindNotServed" | "Forbidden" | "SecretNotFound" | "SecretNotAllowed" => {
            "waiting for a change to the spec or the sources; also retried at every requeue, as \
             the cause may be fixed outside the bundle (a CRD installed, RBAC granted, a Secret \
             created)"
        }
        _ => "waiting for a change to the spec or the sources",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The status after `outcome`, as a pass gives it: an Installed outcome names the revision
    /// the status has active.
    fn next_status(
        current: &BundleDeploymentStatus,
        generation: Option<i64>,
        outcome: &Outcome,
        now: &Time,
    ) -> BundleDeploymentStatus {
        let mut outcome = outcome.clone();
        if let Outcome::Installed { revision, .. } = &mut outcome {
            *revision = current.active_revision;
        }
        super::next_status(current, generation, &outcome, now)
    }
    use crate::reconcile::rollout;
    use crate::reconcile::settle::SETTLE_MIN;

    fn time(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    fn object(name: &str) -> ObjectReference {
        ObjectReference {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "ns".into(),
            name: name.into(),
            message: None,
        }
    }

    fn installed() -> Outcome {
        Outcome::Installed {
            inventory: vec![object("a"), object("b")],
            skipped: vec![],
            written: 2,
            health: HealthReport {
                healthy: true,
                failed: false,
                total: 2,
                message: String::new(),
                waiting: vec![],
                failed_check: None,
            },
            revision: None,
            sources: SourceState::Fetched,
            spec_current: true,
        }
    }

    fn progressing() -> Outcome {
        Outcome::Installed {
            inventory: vec![object("a")],
            skipped: vec![],
            written: 1,
            health: HealthReport {
                healthy: false,
                failed: false,
                total: 1,
                message: "Deployment ns/web: 0 of 1 updated replicas available".into(),
                waiting: vec!["Deployment ns/web".into()],
                failed_check: None,
            },
            revision: None,
            sources: SourceState::Fetched,
            spec_current: true,
        }
    }

    /// Revision 1 healthy, revision 2 failed, rollback to 1 started automatically.
    fn rolled_back_status() -> BundleDeploymentStatus {
        let mut status = BundleDeploymentStatus::default();
        for (n, digest) in [(1, "sha256:one"), (2, "sha256:two")] {
            rollout::start_revision(
                &mut status,
                rollout::NewRevision {
                    number: n,
                    generation: n,
                    spec_digest: "sha256:spec",
                    digest,
                    sources: vec![],
                    values_from: vec![],
                    objects: 1,
                    rendered_at: None,
                },
                5,
                &time(n),
            );
            rollout::mark_applied(&mut status, n);
            if n == 1 {
                rollout::mark_healthy(&mut status, n, &time(1));
            }
        }
        rollout::mark_failed(
            &mut status,
            2,
            "ProgressDeadlineExceeded",
            "web unavailable",
        );
        assert!(rollout::start_rollback(
            &mut status,
            1,
            "revision 2 failed",
            &time(3)
        ));
        let applying = Outcome::Applying {
            inventory: vec![object("a")],
            transition: Transition::Rollback {
                automatic: true,
                reason: "ProgressDeadlineExceeded".into(),
                message: "revision 2 failed (ProgressDeadlineExceeded: web unavailable); rolled back to revision 1".into(),
            },
        };
        next_status(&status, Some(2), &applying, &time(3))
    }

    fn condition(status: &BundleDeploymentStatus, type_: &str) -> (String, String) {
        let c = find(&status.conditions, type_).unwrap();
        (c.status.clone(), c.reason.clone())
    }

    /// Revision 1 of one object, applying since `at`.
    fn applying_since(at: i64) -> BundleDeploymentStatus {
        let mut status = BundleDeploymentStatus::default();
        rollout::start_revision(
            &mut status,
            rollout::NewRevision {
                number: 1,
                generation: 1,
                spec_digest: "spec",
                digest: "sha256:one",
                sources: vec![],
                values_from: vec![],
                objects: 1,
                rendered_at: None,
            },
            10,
            &time(at),
        );
        status
    }

    /// The status last written (revision 1 Applying since `at`) and the pass's work (applied).
    fn just_applied(at: i64) -> (BundleDeploymentStatus, BundleDeploymentStatus) {
        let written = applying_since(at);
        let mut work = written.clone();
        rollout::mark_applied(&mut work, 1);
        (written, work)
    }

    #[test]
    fn a_revision_just_applied_settles_before_progress_is_written() {
        let (written, work) = just_applied(100);
        let left = settling(&written, &work, 1, &progressing(), &time(101), SETTLE_MIN).unwrap();
        assert_eq!(left, std::time::Duration::from_secs(1));
        assert_eq!(
            settling(&written, &work, 1, &progressing(), &time(102), SETTLE_MIN),
            None,
            "settled long enough"
        );
        assert_eq!(
            settling(&written, &work, 1, &installed(), &time(101), SETTLE_MIN),
            None,
            "healthy: written"
        );
        // Progressing already written: nothing to hold back.
        assert_eq!(
            settling(&work, &work, 1, &progressing(), &time(101), SETTLE_MIN),
            None
        );
        // A request handled by this pass is recorded at once.
        let mut asked = work.clone();
        asked.last_handled_reconcile = Some("now".into());
        assert_eq!(
            settling(&written, &asked, 1, &progressing(), &time(101), SETTLE_MIN),
            None
        );
    }

    #[test]
    fn a_wider_window_holds_progress_back_longer() {
        let (written, work) = just_applied(100);
        let window = std::time::Duration::from_secs(6);
        assert_eq!(
            settling(&written, &work, 1, &progressing(), &time(103), window),
            Some(std::time::Duration::from_secs(3))
        );
        assert_eq!(
            settling(&written, &work, 1, &progressing(), &time(106), window),
            None
        );
    }

    #[test]
    fn a_progressing_revisions_next_step_is_detail_only_but_a_settled_one_is_not() {
        let mut revision = applying_since(0);
        rollout::mark_applied(&mut revision, 1);
        let first = next_status(&revision, Some(1), &progressing(), &time(1));
        let mut step = progressing();
        if let Outcome::Installed { health, .. } = &mut step {
            health.message = "Deployment ns/web: 1 old replicas are pending termination".into();
        }
        let second = next_status(&first, Some(1), &step, &time(2));
        assert_ne!(first, second, "the message moved on");
        assert!(progress_detail_only(&first, &second));
        // Healthy: statuses and reasons change, so it is written.
        let healthy = next_status(&first, Some(1), &installed(), &time(3));
        assert!(!progress_detail_only(&first, &healthy));
        // Anything besides those two messages (here the inventory) is written too.
        let mut more = second.clone();
        more.inventory = None;
        assert!(!progress_detail_only(&first, &more));
    }

    #[test]
    fn a_progressing_revision_is_reconciling_and_not_ready() {
        let mut status = BundleDeploymentStatus::default();
        rollout::start_revision(
            &mut status,
            rollout::NewRevision {
                number: 1,
                generation: 1,
                spec_digest: "sha256:spec",
                digest: "sha256:one",
                sources: vec![],
                values_from: vec![],
                objects: 1,
                rendered_at: None,
            },
            5,
            &time(1),
        );
        rollout::mark_applied(&mut status, 1);
        let after = next_status(&status, Some(1), &progressing(), &time(2));
        assert_eq!(
            condition(&after, types::READY),
            ("False".into(), "Progressing".into())
        );
        assert_eq!(condition(&after, types::RECONCILING).0, "True");
        assert_eq!(
            condition(&after, types::HEALTHY),
            ("False".into(), "Progressing".into())
        );
        assert!(find(&after.conditions, types::HEALTHY)
            .unwrap()
            .message
            .contains("ns/web"));
    }

    #[test]
    fn an_automatic_rollback_is_stalled_and_not_ready_even_when_healthy() {
        let mut status = rolled_back_status();
        assert_eq!(
            condition(&status, types::ROLLED_BACK),
            ("True".into(), REASON_ROLLED_BACK.into())
        );
        assert_eq!(
            condition(&status, types::STALLED),
            ("True".into(), "ProgressDeadlineExceeded".into())
        );
        rollout::mark_applied(&mut status, 1);
        rollout::mark_healthy(&mut status, 1, &time(4));
        let mut still_rolled_back = installed();
        if let Outcome::Installed { spec_current, .. } = &mut still_rolled_back {
            *spec_current = false;
        }
        let after = next_status(&status, Some(2), &still_rolled_back, &time(4));
        assert_eq!(
            condition(&after, types::READY),
            ("False".into(), REASON_ROLLED_BACK.into())
        );
        assert_eq!(condition(&after, types::STALLED).0, "True");
        assert_eq!(condition(&after, types::HEALTHY).0, "True");
        assert!(find(&after.conditions, types::READY)
            .unwrap()
            .message
            .contains("revision 2 failed"));
        // Sources that render revision 1 again end the rolled-back state too.
        let mut reverted = installed();
        if let Outcome::Installed { spec_current, .. } = &mut reverted {
            *spec_current = true;
        }
        let back_to_normal = next_status(&after, Some(3), &reverted, &time(5));
        assert_eq!(
            condition(&back_to_normal, types::ROLLED_BACK),
            ("False".into(), "UpToDate".into())
        );
        assert_eq!(condition(&back_to_normal, types::READY).0, "True");
        // A new revision ends the rolled-back state.
        let mut status = after.clone();
        rollout::start_revision(
            &mut status,
            rollout::NewRevision {
                number: 3,
                generation: 3,
                spec_digest: "sha256:spec",
                digest: "sha256:three",
                sources: vec![],
                values_from: vec![],
                objects: 1,
                rendered_at: None,
            },
            5,
            &time(5),
        );
        let applying = Outcome::Applying {
            inventory: vec![object("a")],
            transition: Transition::NewRevision,
        };
        let status = next_status(&status, Some(3), &applying, &time(5));
        assert_eq!(condition(&status, types::ROLLED_BACK).0, "False");
        assert_eq!(condition(&status, types::STALLED).0, "False");
    }

    #[test]
    fn installed_sets_ready_and_inventory() {
        let status = next_status(&Default::default(), Some(3), &installed(), &time(1));
        assert_eq!(condition(&status, types::HEALTHY).0, "True");
        assert_eq!(status.observed_generation, Some(3));
        let ready = find(&status.conditions, types::READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "Healthy")
        );
        assert_eq!(ready.observed_generation, Some(3));
        assert_eq!(status.inventory.as_ref().unwrap().count, 2);
        assert_eq!(
            find(&status.conditions, types::STALLED).unwrap().status,
            "False"
        );
    }

    #[test]
    fn a_failed_health_check_names_itself_in_healthy() {
        let mut outcome = installed();
        if let Outcome::Installed { health, .. } = &mut outcome {
            *health = HealthReport {
                healthy: false,
                failed: true,
                total: 2,
                message: "healthChecks[0] (httpGet http://app/): 3 failures in a row".into(),
                waiting: vec!["healthChecks[0] (httpGet http://app/)".into()],
                failed_check: Some(
                    "healthChecks[0] (httpGet http://app/): 3 failures in a row".into(),
                ),
            };
        }
        let status = next_status(&Default::default(), Some(3), &outcome, &time(1));
        let healthy = find(&status.conditions, types::HEALTHY).unwrap();
        assert_eq!(
            (healthy.status.as_str(), healthy.reason.as_str()),
            ("False", "HealthCheckFailed")
        );
        assert!(healthy
            .message
            .ends_with("healthChecks[0] (httpGet http://app/): 3 failures in a row"));
    }

    #[test]
    fn running_hooks_is_reconciling_and_not_ready_and_keeps_the_inventory() {
        let before = next_status(&Default::default(), Some(1), &installed(), &time(1));
        let message = "waiting for pre-upgrade hook Job ns/migrate: Job running".to_string();
        let status = next_status(
            &before,
            Some(2),
            &Outcome::RunningHooks {
                message: message.clone(),
            },
            &time(2),
        );
        let ready = find(&status.conditions, types::READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str(), &ready.message),
            ("False", REASON_RUNNING_HOOKS, &message)
        );
        assert_eq!(
            condition(&status, types::RECONCILING),
            ("True".into(), REASON_RUNNING_HOOKS.into())
        );
        assert_eq!(status.inventory, before.inventory);
    }

    #[test]
    fn permanent_failure_stalls_and_keeps_the_inventory() {
        let before = next_status(&Default::default(), Some(1), &installed(), &time(1));
        let failed = Outcome::Failed {
            phase: FailedPhase::Install,
            reason: "ObjectRejected".into(),
            message: "Deployment.apps ns/web: the API server refused it".into(),
            transient: false,
        };
        let after = next_status(&before, Some(2), &failed, &time(2));
        let ready = find(&after.conditions, types::READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "ObjectRejected")
        );
        assert!(ready.message.contains("ns/web"));
        assert_eq!(
            find(&after.conditions, types::STALLED).unwrap().status,
            "True"
        );
        assert_eq!(
            find(&after.conditions, types::RECONCILING).unwrap().status,
            "False"
        );
        assert_eq!(
            after.inventory, before.inventory,
            "what is applied is still what is applied"
        );
    }

    #[test]
    fn transient_failure_is_reconciling_not_stalled() {
        let failed = Outcome::Failed {
            phase: FailedPhase::Fetch,
            reason: "Unreachable".into(),
            message: "git http://127.0.0.1:1/x.git: connection refused".into(),
            transient: true,
        };
        let after = next_status(&Default::default(), Some(1), &failed, &time(2));
        assert_eq!(
            find(&after.conditions, types::UNPACKED).unwrap().status,
            "False"
        );
        assert_eq!(
            find(&after.conditions, types::RECONCILING).unwrap().status,
            "True"
        );
        assert_eq!(
            find(&after.conditions, types::STALLED).unwrap().status,
            "False"
        );
    }

    #[test]
    fn same_outcome_twice_changes_nothing() {
        let once = next_status(&Default::default(), Some(1), &installed(), &time(1));
        let twice = next_status(&once, Some(1), &installed(), &time(50));
        assert_eq!(once, twice, "an unchanged status is not patched again");
    }

    #[test]
    fn paused_reports_the_reason_and_drift_until_resumed() {
        let paused = Outcome::Paused {
            reason: Some("hotfix INC-42".into()),
            drift: Some(vec![object("a")]),
        };
        let status = next_status(&Default::default(), Some(1), &paused, &time(1));
        let condition = find(&status.conditions, types::PAUSED).unwrap();
        assert_eq!(condition.status, "True");
        assert!(condition.message.contains("hotfix INC-42"));
        assert_eq!(status.drift.as_ref().unwrap().count, 1);
        // Resuming and applying clears the drift.
        let resumed = next_status(&status, Some(2), &installed(), &time(2));
        assert_eq!(resumed.drift, None);
        assert_eq!(
            find(&resumed.conditions, types::PAUSED).unwrap().status,
            "False"
        );
    }
}
