//! The change log and summary Events for what an apply pass wrote: one change-log line per
//! write in the applier's journal (with why: new revision, drift, rollback, prune, adoption),
//! one Event per pass, and the write counters.

use pallet_formats::{Object, ObjectKey};
use serde_json::json;

use super::Context;
use crate::api::BundleDeployment;
use crate::apply::{Applied, Applier, ApplyError, Outcome as ApplyOutcome};
use crate::changelog::{self, Operation, Reason};
use crate::metrics::METRICS;
use kube::ResourceExt;

/// Writes a change-log line for every write in the applier's journal and one summary Event.
pub(super) async fn log_writes(
    ctx: &Context,
    bd: &BundleDeployment,
    applier: &Applier,
    objects: &[Object],
    (revision, digest): (Option<i64>, &str),
    apply_reason: Reason,
    error: Option<&ApplyError>,
) {
    let name = bd.name_any();
    let writes: Vec<Applied> =
        std::mem::take(&mut *applier.journal.lock().unwrap_or_else(|p| p.into_inner()));
    let (mut created, mut updated, mut deleted) = (0, 0, 0);
    for write in &writes {
        let (operation, reason) = match (&write.outcome, &write.adopted_from) {
            // Deletions are prunes, except while rolling back, where they are the rollback.
            (ApplyOutcome::Deleted, _) if apply_reason == Reason::Rollback => {
                (Operation::Delete, Reason::Rollback)
            }
            (ApplyOutcome::Deleted, _) => (Operation::Delete, Reason::Prune),
            (_, Some(_)) => (Operation::Update, Reason::Adoption),
            (ApplyOutcome::Created, _) => (Operation::Create, apply_reason),
            _ => (Operation::Update, apply_reason),
        };
        match operation {
            Operation::Create => created += 1,
            Operation::Update => updated += 1,
            Operation::Delete => deleted += 1,
        }
        let mut entry = ctx.changelog.entry(
            &name,
            operation,
            reason,
            change_object(&write.key, &write.api_version),
        );
        entry.revision = revision;
        entry.digest = Some(digest.to_string()).filter(|d| !d.is_empty());
        entry.resource_version_before = write.resource_version_before.clone();
        entry.resource_version_after = write.resource_version_after.clone();
        entry.fields_changed = write.fields_changed.clone();
        if let Some(previous) = &write.adopted_from {
            entry
                .details
                .insert("previousOwner".into(), json!(previous));
        }
        ctx.changelog.record(&entry);
    }
    if let Some(error) = error {
        if let Some(key) = error.key() {
            // The failed write: an update or a create, as far as the agent could tell.
            let api_version = objects
                .iter()
                .find(|o| &o.key() == key)
                .map(|o| o.api_version())
                .unwrap_or_default();
            let mut entry = ctx.changelog.entry(
                &name,
                Operation::Update,
                apply_reason,
                change_object(key, api_version),
            );
            entry.revision = revision;
            entry.digest = Some(digest.to_string()).filter(|d| !d.is_empty());
            entry.result = "failure";
            entry.error = Some(error.to_string());
            ctx.changelog.record(&entry);
        }
        ctx.event(bd, true, error.category(), "Apply", error.to_string())
            .await;
    } else if !writes.is_empty() {
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
        ctx.event(bd, false, event_reason, "Apply", note).await;
        if apply_reason == Reason::Drift {
            METRICS.drift_corrected(created + updated);
        }
        METRICS.applied(created, updated);
        METRICS.pruned(deleted);
    }
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
