//! Deletion: the objects of a BundleDeployment being deleted are deleted (or orphaned) before
//! its finalizer is removed.

use super::{
    api_version_of, changes, delete_hooks, key_of, unwritten_intent, webhook_certs, Context, Next,
    ReconcileError, StatusWriter, FINALIZER,
};
use pallet_formats::helm::hooks::HookEvent;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use kube::ResourceExt;
use pallet_formats::ObjectKey;
use serde_json::json;

use super::status::{FailedPhase, Outcome};
use crate::api::{BundleDeployment, DeletionPolicy};
use crate::apply::{plan, Applier};
use crate::changelog::{Operation, Reason};
use changes::change_object;

/// Deletes (or orphans) the objects of a BundleDeployment that is being deleted. Works while
/// paused: deleting is the user's explicit request.
pub async fn cleanup(bd: &BundleDeployment, ctx: &Context) -> Result<Next, ReconcileError> {
    // The deletion pass's one look at the active revision: as the server's status has it.
    let found = bd.status.clone().unwrap_or_default();
    changes::mark_interrupted(ctx, bd, super::view::active_of(&found));
    let name = bd.name_any();
    let uid = bd.metadata.uid.as_deref().unwrap_or_default();
    ctx.sources.polls.forget(uid);
    ctx.sources.fetches.forget(uid);
    ctx.rendering.renders.forget(uid);
    ctx.rendering.render_times.forget(uid);
    ctx.rendering.lookups.forget(uid);
    ctx.watchers.probes.forget(&name);
    ctx.records.notifier.forget(&name);
    // Reverse order: a dependent being deleted too goes first.
    super::dependencies::wait_for_dependents(bd, ctx).await?;
    let workload = &target_cluster(ctx, bd).await?;
    let mut inventory = bd
        .status
        .as_ref()
        .and_then(|s| s.inventory.clone())
        .unwrap_or_default();
    // A first install recorded only in its snapshot (see `unwritten_intent`).
    inventory
        .objects
        .extend(unwritten_intent::unrecorded_objects((ctx, workload), bd).await?);
    ctx.memory.unwritten_intents.forget(&name, uid);
    let keys: Vec<ObjectKey> = inventory.objects.iter().map(key_of).collect();
    let versions: HashMap<ObjectKey, String> = inventory
        .objects
        .iter()
        .map(|r| (key_of(r), api_version_of(r)))
        .collect();
    // A helm chart's pre-delete hooks run before its objects are deleted (not when they are
    // orphaned: the release goes on running).
    let delete_hooks = bd.spec.format == crate::api::BundleFormat::Helm
        && bd.spec.deletion_policy() == DeletionPolicy::Delete;
    if delete_hooks {
        delete_hooks::run(bd, (ctx, workload), HookEvent::PreDelete).await?;
    }
    let applier =
        changes::logging_deletion(ctx, bd, ctx.applier(bd, workload, workload.writer.clone()));
    let result = match bd.spec.deletion_policy() {
        DeletionPolicy::Delete => {
            // prune_set against an empty set orders every object for deletion: reverse stages.
            let order: Vec<(ObjectKey, String)> = plan::prune_set(&keys, &[])
                .into_iter()
                .filter_map(|k| versions.get(&k).cloned().map(|v| (k, v)))
                .collect();
            // Objects the writer may not even read are checked with the agent's own identity:
            // one that was never created (its ServiceAccount was refused) needs no deletion.
            let own = ctx.applier(bd, workload, workload.client.clone());
            delete_all(&applier, &own, &name, &order).await
        }
        DeletionPolicy::Orphan => {
            let mut result = Ok(());
            for r in &inventory.objects {
                if let Err(e) = applier.orphan(&key_of(r), &api_version_of(r)).await {
                    result = Err(e.into());
                    break;
                }
                let mut entry = ctx.records.changelog.entry(
                    &name,
                    Operation::Update,
                    Reason::Deletion,
                    change_object(&key_of(r), &api_version_of(r)),
                );
                entry.fields_changed = vec![format!(".metadata.labels.{}", plan::OWNER_LABEL)];
                entry.details.insert("orphaned".into(), json!(true));
                ctx.records.changelog.record(&entry);
            }
            if result.is_ok() {
                let namespaces: BTreeSet<String> = inventory
                    .objects
                    .iter()
                    .map(|r| r.namespace.clone())
                    .filter(|namespace| !namespace.is_empty())
                    .chain(bd.spec.install_namespace.clone())
                    .collect();
                result = webhook_certs::orphan_secrets((ctx, workload), bd, &namespaces).await;
            }
            result
        }
    };
    if let Err(ReconcileError::DeletionForbidden(message)) = &result {
        // Said on the object, not only in the log: the deletion waits for someone to act.
        let mut writer = StatusWriter::new(ctx, bd, super::view::wall_clock());
        let mut work = writer.written.clone();
        let outcome = Outcome::Failed {
            phase: FailedPhase::Install,
            reason: "DeletionForbidden".into(),
            message: message.clone(),
            transient: true,
        };
        if let Err(e) = writer.write(&mut work, &outcome).await {
            tracing::warn!(bundle_deployment = %name, error = %e, "could not report the blocked deletion");
        }
    }
    // Each delete was logged as it returned.
    if !applier.journal.take().is_empty() {
        ctx.records.changelog.sync();
    }
    result?;
    // Then its post-delete hooks (they need the revision snapshot: before it goes).
    if delete_hooks {
        delete_hooks::run(bd, (ctx, workload), HookEvent::PostDelete).await?;
    }
    // The objects are gone (or orphaned): their revision snapshots go with the BundleDeployment.
    ctx.revisions
        .store
        .delete_all(&name)
        .await
        .map_err(ReconcileError::Revision)?;
    // And its render key: a BundleDeployment made again with this name gets a new one.
    ctx.rendering.render_keys.delete(bd).await?;
    ctx.memory
        .last_written
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&name);
    if let Some(watches) = &ctx.watchers.values_watches {
        watches.set(&name, Vec::new());
    }
    if let Some(remotes) = &ctx.cluster.remotes {
        remotes.release(&name);
    }
    Ok(Next::RequeueAfter(ctx.settings.requeue_interval))
}

/// The cluster the objects of `bd` are on. A remote that cannot be used now (down, its Secret
/// gone or refused) holds the deletion: the objects there are not forgotten while they may
/// still run. It is said in status (naming the cluster, and how to let go), the finalizer
/// stays, and the deletion is tried again at the cluster's next check (its coming back brings
/// it at once).
async fn target_cluster(
    ctx: &Context,
    bd: &BundleDeployment,
) -> Result<super::workload::Workload, ReconcileError> {
    let error = match ctx.workload(bd).await {
        Ok(workload) => return Ok(workload),
        Err(error @ ReconcileError::Cluster(_)) => error,
        Err(error) => return Err(error),
    };
    let mut writer = StatusWriter::new(ctx, bd, super::view::wall_clock());
    let mut work = writer.written.clone();
    let outcome = Outcome::Failed {
        phase: FailedPhase::Install,
        reason: error.category().into(),
        message: format!(
            "deleting: {error}; the objects there are deleted once it can be reached (remove \
             the finalizer {FINALIZER} to leave them there)"
        ),
        transient: true,
    };
    if let Err(e) = writer.write(&mut work, &outcome).await {
        tracing::warn!(bundle_deployment = %bd.name_any(), error = %e, "could not report the held deletion");
    }
    Err(error)
}

/// Deletes the objects in `order` and waits briefly for them to be gone. Objects still there
/// (terminating, e.g. a Namespace being emptied) make it return [`ReconcileError::Deleting`], so
/// the finalizer stays and the deletion is checked again with backoff.
///
/// An object the writer may not read or delete is checked with `own` (the agent's identity):
/// when it does not exist (never created: its ServiceAccount was refused), it needs no deletion;
/// when it exists, or the agent cannot tell, the deletion stops with
/// [`ReconcileError::DeletionForbidden`] naming each such object and why.
pub(super) async fn delete_all(
    applier: &Applier,
    own: &Applier,
    name: &str,
    order: &[(ObjectKey, String)],
) -> Result<(), ReconcileError> {
    let mut remaining = Vec::new();
    for attempt in 0..5 {
        let mut pruned = crate::apply::Pruned::default();
        let mut blocked = Vec::new();
        for one in order {
            match applier.prune(std::slice::from_ref(one)).await {
                Ok(done) => {
                    pruned.deleted.extend(done.deleted);
                    pruned.kept.extend(done.kept);
                    pruned.terminating.extend(done.terminating);
                }
                Err(error) if error.category() == "Forbidden" => {
                    match own.exists(&one.0, &one.1).await {
                        Ok(false) => {
                            tracing::info!(bundle_deployment = %name, object = %one.0, "not deleted: it was never created");
                        }
                        Ok(true) => blocked.push(error.to_string()),
                        Err(check) => blocked.push(format!(
                            "{error} (and the agent cannot tell whether it exists: {check})"
                        )),
                    }
                }
                Err(error) => return Err(error.into()),
            }
        }
        for (key, why) in &pruned.kept {
            tracing::warn!(bundle_deployment = %name, object = %key, "not deleted: {why}");
        }
        if !blocked.is_empty() {
            let shown: Vec<&str> = blocked.iter().take(3).map(String::as_str).collect();
            return Err(ReconcileError::DeletionForbidden(format!(
                "{} objects may not be deleted: {}; grant the delete (or remove the finalizer {FINALIZER} to leave them)",
                blocked.len(),
                shown.join("; ")
            )));
        }
        if pruned.deleted.is_empty() && pruned.terminating.is_empty() {
            return Ok(());
        }
        remaining = pruned
            .deleted
            .into_iter()
            .chain(pruned.terminating)
            .map(|k| k.to_string())
            .collect();
        tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
    }
    let shown: Vec<&str> = remaining.iter().take(5).map(String::as_str).collect();
    Err(ReconcileError::Deleting(format!(
        "{} objects ({})",
        remaining.len(),
        shown.join(", ")
    )))
}
