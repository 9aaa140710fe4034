//! Intents kept out of status: a first install's is its snapshot, and an upgrade's that writes
//! only objects already installed is the inventory status has.
//!
//! Before the first object of a revision is written, the agent records every object that may end
//! up on the cluster, so that an agent killed midway finishes the job after a restart and prunes
//! what the interrupted pass wrote (see `revision_apply`). For most revisions that record is a
//! status write: the revision `Applying`, the inventory widened by its objects. Two kinds of
//! revision need no such write, when they have no helm hooks (those record their progress in
//! status anyway):
//!
//! **A first install** with nothing installed before it: its snapshot, stored just before,
//! already lists every object it may write, and while status has no revision a restarted agent
//! decides on revision 1 again and finds that snapshot:
//!
//! - an agent that finds the finalizer already on a BundleDeployment the first time it looks at
//!   it, and no revision in its status, reads the stored revision 1 before storing its own (once
//!   per process): its objects join the inventory, so whatever the interrupted pass wrote and the
//!   new content drops is pruned, and the change log gets an `interrupted-pass` marker;
//! - deleting a BundleDeployment with no revision in status deletes the objects of its stored
//!   revision 1 too.
//!
//! **An upgrade (or re-apply) whose objects are exactly those of the inventory in status**: it
//! writes no object status does not already list, and prunes none, so whatever a restarted agent
//! decides (the same content again, other content, or the sources back at the active revision's
//! content, re-applied as drift) it finds every object the interrupted pass may have touched in
//! the inventory. What status cannot tell is that a pass was interrupted, which the change log
//! must say (writes in flight may be missing from it). The evidence is on the objects: every
//! write stamps the revision it applies (`pallet.dev/revision`), so the first apply of a process
//! that finds one of the bundle's objects stamped with a revision above every one its status had
//! at first look, or finds that revision's snapshot already stored, writes the
//! `interrupted-pass` marker. No request is spent on it: the apply reads the objects anyway.
//! Upgrades that add or drop objects keep their status write: a restarted agent whose sources
//! went back to the active revision's content would never learn what the interrupted pass added.
//!
//! Between passes of this process the unwritten intent is kept in memory ([`UnwrittenIntents`]),
//! so that the pass after the settle delay starts from it as it would from status. A quick
//! install or upgrade writes status once (Healthy) where it wrote twice: one request per bundle
//! less, and the status patch is the most expensive request of an install for the API server.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Mutex;

use kube::ResourceExt;

use super::status::Transition;
use super::{changes, reference, Context, ReconcileError, FINALIZER};
use crate::api::{BundleDeployment, BundleDeploymentStatus, ObjectReference};
use crate::revision::RevisionError;

/// What this process knows of first installs: which BundleDeployments no earlier agent can
/// have written for, and intents recorded only in memory (and in the snapshot).
#[derive(Default)]
pub struct UnwrittenIntents {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// By uid: BundleDeployments this process found without the finalizer (so no agent had
    /// written any of their objects), or whose stored revision 1 it has read already.
    clear: HashSet<String>,
    /// By name: intents not written to status.
    staged: HashMap<String, Staged>,
    /// By uid: BundleDeployments whose status recorded a settled active revision when this
    /// process first looked: an earlier agent may have been applying a newer one that status
    /// never recorded. Checked at this process's first apply.
    unchecked: HashMap<String, Unchecked>,
}

struct Unchecked {
    /// The newest revision number status had at the first look.
    newest: i64,
    /// A revision above it whose snapshot this process found stored.
    found_stored: Option<i64>,
}

struct Staged {
    uid: String,
    /// The status on the server when the intent was recorded.
    base: BundleDeploymentStatus,
    /// The status with the intent.
    status: BundleDeploymentStatus,
}

impl UnwrittenIntents {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A pass is about to look at `bd`: without the finalizer, no agent has written for it yet.
    pub fn looked(&self, bd: &BundleDeployment) {
        let fresh = bd.metadata.deletion_timestamp.is_none()
            && !bd.finalizers().iter().any(|f| f == FINALIZER);
        if fresh {
            if let Some(uid) = &bd.metadata.uid {
                self.inner().clear.insert(uid.clone());
            }
        }
    }

    /// Keeps `status`, an intent not written, for the next pass over `bd` while its status on
    /// the server stays `base`.
    pub(super) fn stage(
        &self,
        bd: &BundleDeployment,
        base: BundleDeploymentStatus,
        status: BundleDeploymentStatus,
    ) {
        let staged = Staged {
            uid: bd.metadata.uid.clone().unwrap_or_default(),
            base,
            status,
        };
        self.inner().staged.insert(bd.name_any(), staged);
    }

    /// The intent kept for `bd`, if its status on the server is still `server`. When it no
    /// longer applies (someone else wrote status), the next pass decides from the server's
    /// status, and a first install reads the stored revision 1, as after a restart.
    pub(super) fn take(
        &self,
        bd: &BundleDeployment,
        server: &BundleDeploymentStatus,
    ) -> Option<BundleDeploymentStatus> {
        let mut inner = self.inner();
        let staged = inner.staged.remove(&bd.name_any())?;
        let uid = bd.metadata.uid.as_deref().unwrap_or_default();
        if staged.uid == uid && staged.base == *server {
            return Some(staged.status);
        }
        inner.clear.remove(&staged.uid);
        None
    }

    /// Whether a first install of the BundleDeployment with `uid` may find objects an earlier
    /// agent wrote.
    fn needs_check(&self, uid: &str) -> bool {
        !self.inner().clear.contains(uid)
    }

    fn checked(&self, uid: &str) {
        self.inner().clear.insert(uid.to_string());
    }

    /// `bd`'s status records a revision: nothing more to remember about its first install.
    pub(super) fn installed(&self, bd: &BundleDeployment) {
        if let Some(uid) = &bd.metadata.uid {
            self.inner().clear.remove(uid);
        }
    }

    /// Forgets `name` (deleted, or handed to another agent).
    pub fn forget(&self, name: &str, uid: &str) {
        let mut inner = self.inner();
        inner.staged.remove(name);
        inner.clear.remove(uid);
        inner.unchecked.remove(uid);
    }

    /// This process looks at `bd` for the first time and its status has a settled active
    /// revision (one still `Applying` gets its marker from status, see `changes`): its first
    /// apply looks for signs of an upgrade an earlier agent left unrecorded.
    pub(super) fn first_look_settled(
        &self,
        bd: &BundleDeployment,
        status: &BundleDeploymentStatus,
    ) {
        let (Some(uid), Some(newest)) = (
            &bd.metadata.uid,
            status.revisions.iter().map(|r| r.number).max(),
        ) else {
            return;
        };
        let unchecked = Unchecked {
            newest,
            found_stored: None,
        };
        self.inner().unchecked.insert(uid.clone(), unchecked);
    }

    /// This process found revision `number` of `bd` already stored when it saved its own.
    pub(super) fn found_stored(&self, bd: &BundleDeployment, number: i64) {
        let uid = bd.metadata.uid.as_deref().unwrap_or_default();
        if let Some(unchecked) = self.inner().unchecked.get_mut(uid) {
            if number > unchecked.newest {
                unchecked.found_stored = Some(number);
            }
        }
    }

    /// The first apply of this process for `bd` is done; `stamped`: the revisions its objects
    /// carried before it. The newest revision an earlier agent applied without recording it in
    /// status, if there are signs of one. Once per process and BundleDeployment: later stamps
    /// may be this process's own.
    pub(super) fn first_apply_done(
        &self,
        bd: &BundleDeployment,
        stamped: impl IntoIterator<Item = i64>,
    ) -> Option<i64> {
        let uid = bd.metadata.uid.as_deref().unwrap_or_default();
        let unchecked = self.inner().unchecked.remove(uid)?;
        stamped
            .into_iter()
            .chain(unchecked.found_stored)
            .filter(|n| *n > unchecked.newest)
            .max()
    }
}

/// Whether the snapshot of the active revision in `work` records the intent to apply it, so that
/// no status write is needed before its objects are written: revision 1 and the only one, no
/// helm hooks, and nothing in the inventory but objects of the revision itself (`objects`).
/// Pure.
pub(super) fn snapshot_holds_intent(
    work: &BundleDeploymentStatus,
    objects: &BTreeSet<ObjectReference>,
    has_hooks: bool,
) -> bool {
    let first = matches!(work.revisions.as_slice(), [only] if only.number == 1)
        && work.active_revision == Some(1);
    let inventory_is_its_own = work
        .inventory
        .as_ref()
        .is_none_or(|i| i.objects.iter().all(|o| objects.contains(o)));
    first && !has_hooks && inventory_is_its_own
}

/// Whether the inventory `server` (the status on the server) records already holds the intent
/// to apply `objects`: exactly its objects, so the pass writes none it does not list and prunes
/// none; an active revision to go back to; no helm hooks; not a rollback (a rollback records
/// itself in status, and its objects are an earlier revision's). Pure.
pub(super) fn inventory_holds_intent(
    server: &BundleDeploymentStatus,
    objects: &BTreeSet<ObjectReference>,
    has_hooks: bool,
    transition: &Transition,
) -> bool {
    let recorded: BTreeSet<&ObjectReference> = server
        .inventory
        .iter()
        .flat_map(|i| i.objects.iter())
        .collect();
    let same_objects =
        recorded.len() == objects.len() && objects.iter().all(|o| recorded.contains(o));
    server.active_revision.is_some()
        && !has_hooks
        && !matches!(transition, Transition::Rollback { .. })
        && same_objects
}

/// After this process's first apply for `bd`: an `interrupted-pass` marker in the change log when
/// an earlier agent applied a revision that status never recorded (see the module doc).
/// `stamped`: the revisions the bundle's objects carried before the apply.
pub(super) fn check_first_apply(
    ctx: &Context,
    bd: &BundleDeployment,
    stamped: impl IntoIterator<Item = i64>,
) {
    if let Some(number) = ctx.memory.unwritten_intents.first_apply_done(bd, stamped) {
        changes::mark_interrupted_upgrade(ctx, bd, number);
    }
}

/// Before revision 1 of `bd` is stored (its status has no revision): the objects an earlier
/// agent's interrupted first install may have written, from the revision 1 it stored, with an
/// `interrupted-pass` marker in the change log when there are any. None when this process added
/// the finalizer itself or has read that snapshot already.
pub(super) async fn interrupted(
    (ctx, workload): (&Context, &super::workload::Workload),
    bd: &BundleDeployment,
) -> Result<Vec<ObjectReference>, ReconcileError> {
    let uid = bd.metadata.uid.clone().unwrap_or_default();
    if !ctx.memory.unwritten_intents.needs_check(&uid) {
        return Ok(Vec::new());
    }
    let found = stored_revision_one((ctx, workload), bd).await?;
    ctx.memory.unwritten_intents.checked(&uid);
    let Some((digest, objects)) = found else {
        return Ok(Vec::new());
    };
    changes::mark_interrupted_first_install(ctx, bd, &digest);
    Ok(objects)
}

/// The objects of `bd`'s stored revision 1, when its status has no revision (an interrupted
/// first install may have written them): for deletion. Marks the change log when an earlier
/// agent may have written them.
pub(super) async fn unrecorded_objects(
    (ctx, workload): (&Context, &super::workload::Workload),
    bd: &BundleDeployment,
) -> Result<Vec<ObjectReference>, ReconcileError> {
    let recorded = bd.status.as_ref().is_some_and(|s| !s.revisions.is_empty());
    if recorded {
        return Ok(Vec::new());
    }
    let Some((digest, objects)) = stored_revision_one((ctx, workload), bd).await? else {
        return Ok(Vec::new());
    };
    if ctx
        .memory
        .unwritten_intents
        .needs_check(bd.metadata.uid.as_deref().unwrap_or_default())
    {
        changes::mark_interrupted_first_install(ctx, bd, &digest);
    }
    Ok(objects)
}

/// `bd`'s stored revision 1: its digest and where its objects live. None when it is not stored,
/// or only partly (the save was interrupted, before any object write), or cannot be read (said
/// in the log: objects it wrote are then left alone).
async fn stored_revision_one(
    (ctx, workload): (&Context, &super::workload::Workload),
    bd: &BundleDeployment,
) -> Result<Option<(String, Vec<ObjectReference>)>, ReconcileError> {
    let name = bd.name_any();
    let record = match ctx.revisions.store.load(&name, 1).await {
        Ok(record) => record,
        Err(RevisionError::NotFound { .. }) => return Ok(None),
        Err(error) if error.is_transient() => return Err(ReconcileError::Revision(error)),
        Err(error) => {
            tracing::warn!(bundle_deployment = %name, %error, "could not read the stored revision 1; objects an interrupted first install wrote and no revision has are not pruned");
            return Ok(None);
        }
    };
    let objects = record.objects_to_apply()?;
    let applier = ctx.applier(bd, workload, workload.writer.clone());
    let keys = applier.resolve_keys(&objects).await?;
    let references = keys
        .iter()
        .map(|(key, api_version)| reference(key, api_version))
        .collect();
    Ok(Some((record.digest, references)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Inventory, RevisionPhase, RevisionStatus};
    use serde_json::json;

    fn object(name: &str) -> ObjectReference {
        ObjectReference {
            version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "ns".into(),
            name: name.into(),
            group: String::new(),
            message: None,
        }
    }

    fn with_revisions(numbers: &[i64], inventory: &[&str]) -> BundleDeploymentStatus {
        BundleDeploymentStatus {
            active_revision: numbers.first().copied(),
            revisions: numbers
                .iter()
                .map(|n| {
                    serde_json::from_value::<RevisionStatus>(json!({
                        "number": n, "generation": 1, "digest": format!("sha256:{n}"),
                        "phase": RevisionPhase::Applying,
                    }))
                    .unwrap()
                })
                .collect(),
            inventory: (!inventory.is_empty()).then(|| Inventory {
                count: inventory.len() as i64,
                objects: inventory.iter().map(|n| object(n)).collect(),
            }),
            ..Default::default()
        }
    }

    fn set(names: &[&str]) -> BTreeSet<ObjectReference> {
        names.iter().map(|n| object(n)).collect()
    }

    #[test]
    fn only_a_first_revision_without_hooks_or_earlier_objects_skips_the_status_write() {
        let objects = set(&["a", "b"]);
        assert!(snapshot_holds_intent(
            &with_revisions(&[1], &[]),
            &objects,
            false
        ));
        // Its own objects already recorded (the pass after the settle delay): still its own.
        assert!(snapshot_holds_intent(
            &with_revisions(&[1], &["a"]),
            &objects,
            false
        ));
        // Helm hooks record their progress in status anyway.
        assert!(!snapshot_holds_intent(
            &with_revisions(&[1], &[]),
            &objects,
            true
        ));
        // An upgrade: a restart whose sources went back would not see what it added.
        assert!(!snapshot_holds_intent(
            &with_revisions(&[2, 1], &[]),
            &objects,
            false
        ));
        assert!(!snapshot_holds_intent(
            &with_revisions(&[2], &[]),
            &objects,
            false
        ));
        // Objects an interrupted first install wrote that this content drops: status says so.
        assert!(!snapshot_holds_intent(
            &with_revisions(&[1], &["old"]),
            &objects,
            false
        ));
    }

    #[test]
    fn an_upgrade_writing_exactly_the_installed_objects_skips_the_status_write() {
        let installed = with_revisions(&[1], &["a", "b"]);
        let new = Transition::NewRevision;
        assert!(inventory_holds_intent(
            &installed,
            &set(&["a", "b"]),
            false,
            &new
        ));
        assert!(inventory_holds_intent(
            &installed,
            &set(&["a", "b"]),
            false,
            &Transition::Reapply
        ));
        // An object status does not list: a restart whose sources went back could not prune it.
        assert!(!inventory_holds_intent(
            &installed,
            &set(&["a", "b", "c"]),
            false,
            &new
        ));
        // An object dropped: its prune is a write status must announce.
        assert!(!inventory_holds_intent(
            &installed,
            &set(&["a"]),
            false,
            &new
        ));
        assert!(!inventory_holds_intent(
            &installed,
            &set(&["a", "b"]),
            true,
            &new
        ));
        let rollback = Transition::Rollback {
            automatic: true,
            reason: "Failed".into(),
            message: String::new(),
        };
        assert!(!inventory_holds_intent(
            &installed,
            &set(&["a", "b"]),
            false,
            &rollback
        ));
        // Nothing installed yet: the first install's rule decides.
        let empty = BundleDeploymentStatus::default();
        assert!(!inventory_holds_intent(&empty, &set(&[]), false, &new));
    }

    #[test]
    fn a_first_apply_finds_an_earlier_agents_unrecorded_revision_once() {
        let intents = UnwrittenIntents::default();
        let app = bd("u", true);
        let settled = with_revisions(&[3, 2], &["a"]);
        // Not looked at with a settled status: nothing to check.
        assert_eq!(intents.first_apply_done(&app, [4]), None);

        intents.first_look_settled(&app, &settled);
        assert_eq!(
            intents.first_apply_done(&app, [2, 3]),
            None,
            "stamps of recorded revisions are no sign"
        );
        intents.first_look_settled(&app, &settled);
        assert_eq!(intents.first_apply_done(&app, [3, 4, 2]), Some(4));
        assert_eq!(
            intents.first_apply_done(&app, [4]),
            None,
            "later stamps may be this process's own"
        );

        // A snapshot found stored above the newest recorded revision is a sign too.
        intents.first_look_settled(&app, &settled);
        intents.found_stored(&app, 3);
        assert_eq!(intents.first_apply_done(&app, []), None);
        intents.first_look_settled(&app, &settled);
        intents.found_stored(&app, 4);
        assert_eq!(intents.first_apply_done(&app, [3]), Some(4));
        // Not first looked at in this process: a stored snapshot is this process's own.
        intents.found_stored(&app, 4);
        assert_eq!(intents.first_apply_done(&app, []), None);
        assert!(intents.inner().unchecked.is_empty());
    }

    fn bd(uid: &str, finalizer: bool) -> BundleDeployment {
        let finalizers: Vec<&str> = if finalizer { vec![FINALIZER] } else { vec![] };
        serde_json::from_value(json!({
            "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
            "metadata": {"name": "app", "uid": uid, "finalizers": finalizers},
            "spec": {"sources": [], "format": "plain"},
        }))
        .unwrap()
    }

    #[test]
    fn a_bundle_deployment_found_without_the_finalizer_needs_no_check() {
        let first = UnwrittenIntents::default();
        first.looked(&bd("new", false));
        first.looked(&bd("old", true));
        assert!(!first.needs_check("new"));
        assert!(
            first.needs_check("old"),
            "an earlier agent may have written"
        );
        first.checked("old");
        assert!(!first.needs_check("old"));
        first.installed(&bd("old", true));
        first.forget("app", "new");
        assert!(first.inner().clear.is_empty(), "nothing kept once recorded");
    }

    #[test]
    fn a_staged_intent_is_used_only_while_the_status_is_unchanged() {
        let first = UnwrittenIntents::default();
        let app = bd("u", true);
        first.looked(&bd("u", false));
        let intent = with_revisions(&[1], &["a"]);
        let empty = BundleDeploymentStatus::default();
        first.stage(&app, empty.clone(), intent.clone());
        assert_eq!(first.take(&app, &empty), Some(intent.clone()));
        assert_eq!(first.take(&app, &empty), None, "taken once");

        first.stage(&app, empty.clone(), intent.clone());
        let written_by_someone = BundleDeploymentStatus {
            observed_generation: Some(3),
            ..Default::default()
        };
        assert_eq!(first.take(&app, &written_by_someone), None);
        assert!(
            first.needs_check("u"),
            "the intent in memory is gone: read the snapshot as after a restart"
        );

        first.stage(&app, empty.clone(), intent);
        assert_eq!(first.take(&bd("other-uid", true), &empty), None);
    }
}
