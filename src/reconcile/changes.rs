//! The change log and summary Events for what an apply pass wrote: one change-log line per
//! write, written as the write returns (with why: new revision, drift, rollback, prune,
//! adoption), one Event per pass, the write counters, and the `interrupted-pass` marker when a
//! previous agent left a recorded intent unfinished.

use pallet_formats::{Object, ObjectKey};
use serde_json::json;

use super::Context;
use crate::api::BundleDeployment;
use crate::apply::{Applied, Applier, ApplyError, Journal, Outcome as ApplyOutcome};
use crate::changelog::{self, Operation, Reason};
use crate::metrics::METRICS;
use kube::ResourceExt;

/// `applier` with a journal that writes each write's change-log line the moment it returns
/// (with why: `apply_reason`, or prune/adoption as the write says), for one pass.
pub(super) fn logging(
    ctx: &Context,
    bd: &BundleDeployment,
    applier: &Applier,
    (revision, digest): (Option<i64>, &str),
    apply_reason: Reason,
) -> Applier {
    let log = ctx.records.changelog.clone();
    let name = bd.name_any();
    let digest = Some(digest.to_string()).filter(|d| !d.is_empty());
    let observer = move |write: &Applied| {
        let (operation, reason) = operation_and_reason(write, apply_reason);
        let mut entry = log.entry(
            &name,
            operation,
            reason,
            change_object(&write.key, &write.api_version),
        );
        entry.revision = revision;
        entry.digest = digest.clone();
        entry.resource_version_before = write.resource_version_before.clone();
        entry.resource_version_after = write.resource_version_after.clone();
        entry.fields_changed = write.fields_changed.clone();
        if let Some(previous) = &write.adopted_from {
            entry
                .details
                .insert("previousOwner".into(), json!(previous));
        }
        if !write.left_out.is_empty() {
            // Not declared by the API server's schema: the server keeps nothing of them.
            entry
                .details
                .insert("fieldsLeftOut".into(), json!(write.left_out));
        }
        with_policy(&mut entry, &write.outcome);
        log.record(&entry);
    };
    Applier {
        journal: Journal::observed(std::sync::Arc::new(observer)),
        ..applier.clone()
    }
}

/// Says in `entry` which policy annotation kept an object as it is (`result: skipped`, nothing
/// written) or kept it on the cluster when it would have been deleted (`orphaned`).
fn with_policy(entry: &mut changelog::Entry, outcome: &ApplyOutcome) {
    match outcome {
        ApplyOutcome::Withheld { policy, .. } => {
            entry.result = changelog::RESULT_SKIPPED;
            entry
                .details
                .insert("policy".into(), json!(policy.annotation()));
        }
        ApplyOutcome::Orphaned { policy } => {
            entry.details.insert("orphaned".into(), json!(true));
            entry
                .details
                .insert("policy".into(), json!(policy.annotation()));
        }
        _ => {}
    }
}

/// `applier` with a journal that logs each delete of a BundleDeployment's deletion as it returns.
pub(super) fn logging_deletion(ctx: &Context, bd: &BundleDeployment, applier: Applier) -> Applier {
    let log = ctx.records.changelog.clone();
    let name = bd.name_any();
    let observer = move |write: &Applied| {
        let operation = match write.outcome {
            ApplyOutcome::Orphaned { .. } => Operation::Update,
            _ => Operation::Delete,
        };
        let mut entry = log.entry(
            &name,
            operation,
            Reason::Deletion,
            change_object(&write.key, &write.api_version),
        );
        entry.resource_version_before = write.resource_version_before.clone();
        entry.resource_version_after = write.resource_version_after.clone();
        entry.fields_changed = write.fields_changed.clone();
        with_policy(&mut entry, &write.outcome);
        log.record(&entry);
    };
    Applier {
        journal: Journal::observed(std::sync::Arc::new(observer)),
        ..applier
    }
}

/// The change log's operation and reason for `write` made while applying for `apply_reason`.
fn operation_and_reason(write: &Applied, apply_reason: Reason) -> (Operation, Reason) {
    match (&write.outcome, &write.adopted_from) {
        // Deletions are prunes, except while rolling back, where they are the rollback.
        (ApplyOutcome::Deleted, _) if apply_reason == Reason::Rollback => {
            (Operation::Delete, Reason::Rollback)
        }
        (ApplyOutcome::Deleted, _) => (Operation::Delete, Reason::Prune),
        // A prune that kept the object by its policy: its label is removed.
        (ApplyOutcome::Orphaned { .. }, _) if apply_reason == Reason::Rollback => {
            (Operation::Update, Reason::Rollback)
        }
        (ApplyOutcome::Orphaned { .. }, _) => (Operation::Update, Reason::Prune),
        // What would have been written (the line says `skipped`).
        (ApplyOutcome::Withheld { exists: false, .. }, _) => (Operation::Create, apply_reason),
        (ApplyOutcome::Withheld { .. }, _) => (Operation::Update, apply_reason),
        (_, Some(_)) => (Operation::Update, Reason::Adoption),
        (ApplyOutcome::Created, _) => (Operation::Create, apply_reason),
        _ => (Operation::Update, apply_reason),
    }
}

/// Ends a pass that applied through [`logging`]: the entry of the write that failed, one summary
/// Event, the write counters, and an fsync of the change log when anything was written. Returns
/// the writes.
pub(super) async fn log_writes(
    ctx: &Context,
    bd: &BundleDeployment,
    applier: &Applier,
    objects: &[Object],
    (revision, digest): (Option<i64>, &str),
    apply_reason: Reason,
    error: Option<&ApplyError>,
) -> Vec<Applied> {
    let name = bd.name_any();
    let writes: Vec<Applied> = applier.journal.take();
    let (mut created, mut updated, mut deleted) = (0, 0, 0);
    for write in writes.iter().filter(|w| w.outcome.is_write()) {
        match operation_and_reason(write, apply_reason).0 {
            Operation::Create => created += 1,
            Operation::Update => updated += 1,
            Operation::Delete => deleted += 1,
        }
    }
    if let Some(error) = error {
        if let Some(key) = error.key() {
            // The failed write: an update or a create, as far as the agent could tell.
            let api_version = objects
                .iter()
                .find(|o| &o.key() == key)
                .map(|o| o.api_version())
                .unwrap_or_default();
            let mut entry = ctx.records.changelog.entry(
                &name,
                Operation::Update,
                apply_reason,
                change_object(key, api_version),
            );
            entry.revision = revision;
            entry.digest = Some(digest.to_string()).filter(|d| !d.is_empty());
            entry.result = "failure";
            entry.error = Some(error.to_string());
            ctx.records.changelog.record(&entry);
        }
        ctx.records.changelog.sync();
        ctx.records
            .event(bd, true, error.category(), "Apply", error.to_string())
            .await;
    } else if writes.iter().any(|w| w.outcome.is_write()) {
        ctx.records.changelog.sync();
        let (event_reason, why) = match apply_reason {
            Reason::Rollback => ("RolledBack", "re-applied"),
            Reason::Drift => ("DriftCorrected", "corrected drift toward"),
            _ => ("Applied", "applied"),
        };
        let name = revision.map_or("the bundle".to_string(), |n| format!("revision {n}"));
        let short = digest.get(..19).unwrap_or(digest);
        let note = format!(
            "{why} {name} ({short}): {created} created, {updated} updated, {deleted} deleted"
        );
        ctx.records
            .event(bd, false, event_reason, "Apply", note)
            .await;
        if apply_reason == Reason::Drift {
            METRICS.drift_corrected(created + updated);
        }
        METRICS.applied(created, updated);
        METRICS.pruned(deleted);
    }
    writes
}

/// The change log's reference to an object.
pub(super) fn change_object(key: &ObjectKey, api_version: &str) -> changelog::ObjectRef {
    changelog::ObjectRef {
        api_version: api_version.to_string(),
        kind: key.kind.clone(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
    }
}

/// The first time this process looks at `bd`: when its status records the intent to write a
/// revision (active revision still `Applying`) that no pass finished, the previous agent stopped
/// mid-pass, and writes it had in flight may be missing from the change log: says so there.
pub(super) fn mark_interrupted(
    ctx: &Context,
    bd: &BundleDeployment,
    active: Option<&crate::api::RevisionStatus>,
) {
    let uid = bd.metadata.uid.as_deref().unwrap_or_default();
    if !ctx.records.changelog.first_look(uid) {
        return;
    }
    let in_flight = ctx.settings.apply_parallelism.max(1);
    let Some(marker) = interrupted_marker(&ctx.records.changelog, bd, active, in_flight) else {
        // Settled in status; an upgrade kept out of it shows on the objects (see `unwritten_intent`).
        if bd.metadata.deletion_timestamp.is_none() {
            if let Some(status) = &bd.status {
                ctx.memory.unwritten_intents.first_look_settled(bd, status);
            }
        }
        return;
    };
    tracing::warn!(bundle_deployment = %bd.name_any(), revision = ?marker.revision, "a previous agent stopped while applying; writes it had in flight may be missing from the change log");
    ctx.records.changelog.record_marker(&marker);
}

/// The `interrupted-pass` marker `bd`'s status calls for, if any, for an agent that had at most
/// `in_flight` writes in flight. Pure but for the clock.
fn interrupted_marker(
    log: &changelog::ChangeLog,
    bd: &BundleDeployment,
    active: Option<&crate::api::RevisionStatus>,
    in_flight: usize,
) -> Option<changelog::Marker> {
    if let Some(deleted_at) = &bd.metadata.deletion_timestamp {
        // Requested before this process started: a previous agent may have been deleting.
        if deleted_at.0 >= log.opened_at() {
            return None;
        }
        let mut marker = log.marker(&bd.name_any(), changelog::MARKER_INTERRUPTED);
        marker.revision = active.map(|r| r.number);
        marker.digest = active.map(|r| r.digest.clone()).filter(|d| !d.is_empty());
        marker.details.insert("phase".into(), json!("deleting"));
        marker
            .details
            .insert("unloggedWritesAtMost".into(), json!(1));
        marker.details.insert(
            "message".into(),
            json!(
                "the BundleDeployment's deletion was requested before this agent started; \
                   the delete an earlier agent had in flight may be missing from this log; \
                   this agent finishes the deletion"
            ),
        );
        return Some(marker);
    }
    let active = active?;
    if active.phase != crate::api::RevisionPhase::Applying {
        return None;
    }
    let mut marker = applying_marker(log, bd, active.number, &active.digest, in_flight);
    if let Some(since) = &active.applied_at {
        marker
            .details
            .insert("intentSince".into(), json!(since.0.to_string()));
    }
    marker.details.insert(
        "message".into(),
        json!(format!(
            "an agent stopped while applying revision {} (intent recorded, pass not finished); \
             up to {in_flight} writes it had in flight may be missing from this log; the next \
             pass that writes finishes the revision",
            active.number
        )),
    );
    Some(marker)
}

/// An `interrupted-pass` marker for revision `number` (content `digest`) of `bd`, applying.
fn applying_marker(
    log: &changelog::ChangeLog,
    bd: &BundleDeployment,
    number: i64,
    digest: &str,
    in_flight: usize,
) -> changelog::Marker {
    let mut marker = log.marker(&bd.name_any(), changelog::MARKER_INTERRUPTED);
    marker.details.insert("phase".into(), json!("applying"));
    marker.revision = Some(number);
    marker.digest = Some(digest.to_string()).filter(|d| !d.is_empty());
    marker
        .details
        .insert("unloggedWritesAtMost".into(), json!(in_flight));
    marker
}

/// An earlier agent stored revision 1 of `bd` (content `digest`) and stopped before recording it
/// in status (a first install's intent is its snapshot, see [`super::unwritten_intent`]): writes it
/// had in flight may be missing from the change log; says so there.
pub(super) fn mark_interrupted_first_install(ctx: &Context, bd: &BundleDeployment, digest: &str) {
    let in_flight = ctx.settings.apply_parallelism.max(1);
    let mut marker = applying_marker(&ctx.records.changelog, bd, 1, digest, in_flight);
    marker.details.insert(
        "message".into(),
        json!(format!(
            "an agent stopped while installing revision 1 (stored, not yet in status); up to \
             {in_flight} writes it had in flight may be missing from this log; this agent \
             installs the current content and prunes what revision 1 wrote and it does not have"
        )),
    );
    tracing::warn!(bundle_deployment = %bd.name_any(), "a previous agent stopped while installing revision 1; writes it had in flight may be missing from the change log");
    ctx.records.changelog.record_marker(&marker);
}

/// An earlier agent applied revision `number` of `bd` without recording it in status (an
/// upgrade whose intent was only in memory, see [`super::unwritten_intent`]), and this process
/// found its objects stamped with it or its snapshot stored: writes that agent had in flight
/// may be missing from the change log; says so there.
pub(super) fn mark_interrupted_upgrade(ctx: &Context, bd: &BundleDeployment, number: i64) {
    let in_flight = ctx.settings.apply_parallelism.max(1);
    let mut marker = applying_marker(&ctx.records.changelog, bd, number, "", in_flight);
    marker.details.insert(
        "message".into(),
        json!(format!(
            "an earlier agent applied revision {number} and stopped before recording it in status \
             (this agent found objects written for it, or its snapshot); up to {in_flight} writes \
             it had in flight may be missing from this log; every object it may have written is \
             in the inventory, and this agent applies the current content over them"
        )),
    );
    tracing::warn!(bundle_deployment = %bd.name_any(), revision = number, "a previous agent stopped while applying a revision status does not record; writes it had in flight may be missing from the change log");
    ctx.records.changelog.record_marker(&marker);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The active revision of `bd`'s status as found on the server.
    fn found(bd: &BundleDeployment) -> Option<&crate::api::RevisionStatus> {
        bd.status
            .as_ref()
            .and_then(crate::reconcile::view::active_of)
    }
    use crate::api::RevisionPhase;

    fn bd_with(phases: &[(i64, RevisionPhase)], active: i64) -> BundleDeployment {
        let revisions: Vec<serde_json::Value> = phases
            .iter()
            .map(|(n, p)| json!({"number": n, "generation": 1, "digest": format!("sha256:{n}"), "phase": p}))
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
            "metadata": {"name": "app", "uid": "u"},
            "spec": {"sources": [], "format": "plain"},
            "status": {"activeRevision": active, "revisions": revisions},
        }))
        .unwrap()
    }

    #[test]
    fn only_a_recorded_unfinished_intent_is_marked() {
        let log = changelog::ChangeLog::disabled();
        let applying = bd_with(
            &[(2, RevisionPhase::Applying), (1, RevisionPhase::Superseded)],
            2,
        );
        let marker = interrupted_marker(&log, &applying, found(&applying), 4).expect("marked");
        assert_eq!(marker.marker, changelog::MARKER_INTERRUPTED);
        assert_eq!(marker.revision, Some(2));
        assert_eq!(marker.digest.as_deref(), Some("sha256:2"));
        assert_eq!(marker.details["unloggedWritesAtMost"], 4);
        for phase in [
            RevisionPhase::Progressing,
            RevisionPhase::Healthy,
            RevisionPhase::Failed,
        ] {
            let bd = bd_with(&[(1, phase)], 1);
            assert!(
                interrupted_marker(&log, &bd, found(&bd), 4).is_none(),
                "{phase:?}"
            );
        }
    }

    #[test]
    fn a_deletion_requested_before_this_process_started_is_marked() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        use k8s_openapi::jiff::{SignedDuration, Timestamp};
        let log = changelog::ChangeLog::disabled();
        let mut bd = bd_with(&[(1, RevisionPhase::Healthy)], 1);
        bd.metadata.deletion_timestamp = Some(Time(log.opened_at() - SignedDuration::from_secs(5)));
        let marker = interrupted_marker(&log, &bd, found(&bd), 4).expect("marked");
        assert_eq!(marker.revision, Some(1));
        assert_eq!(marker.details["phase"], "deleting");
        assert_eq!(marker.details["unloggedWritesAtMost"], 1);
        bd.metadata.deletion_timestamp =
            Some(Time(Timestamp::now() + SignedDuration::from_secs(5)));
        assert!(
            interrupted_marker(&log, &bd, found(&bd), 4).is_none(),
            "asked of this very agent"
        );
    }
}
