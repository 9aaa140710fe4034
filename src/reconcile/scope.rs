//! Acting only for the BundleDeployments of the agent's scope (`--selector`, `--shard`; see
//! [`crate::shard`]), including when one is relabelled into another shard in the middle of things.
//!
//! The watch delivers only the scope's objects, and the controller drops reconcile requests
//! (from owned-object watches, valuesFrom watches, probes, finished fetches) for objects it does
//! not hold. What is left is the object that leaves the scope while this agent works on it:
//! - a pass that re-reads it first ([`super::controller`]) checks the scope and stops;
//! - every status write is conditional on the resourceVersion the pass knows, so a relabel
//!   made since makes it fail with a conflict; the object is read again, and when it is no longer
//!   in scope the pass stops without writing ([`ReconcileError::OutOfScope`]);
//! - when it leaves the watch, the agent drops what it kept for it (probes, valuesFrom watches,
//!   poll times, renders): nothing of it acts again ([`Context::release`]).

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::ResourceExt;
use serde_json::json;

use super::{Context, ReconcileError};
use crate::api::BundleDeployment;
use crate::apply::FIELD_MANAGER;
use crate::shard::Scope;

/// Status writes retried after a conflict while the object is still in scope.
const CONFLICT_RETRIES: usize = 3;

impl Context {
    /// The same context acting for `scope` only: its identity in `status.agent` and in Events
    /// names the shard, and status writes use the shard's field manager.
    pub fn with_scope(mut self, scope: Scope) -> Self {
        self.cluster.identity = scope.identity(&crate::leader::identity());
        self.records.recorder = Recorder::new(
            self.cluster.client.clone(),
            Reporter {
                controller: FIELD_MANAGER.into(),
                instance: Some(self.cluster.identity.clone()),
            },
        );
        self.cluster.scope = scope;
        self
    }

    /// Drops everything kept in memory for a BundleDeployment that left this agent's scope
    /// (relabelled to another shard) or is gone: running probes, valuesFrom watches, poll times,
    /// renders, background fetches, backoff, snapshots and the record of its last status write.
    /// Nothing is written: the objects and the status now belong to whoever holds it.
    pub fn release(&self, name: &str, uid: &str) {
        self.sources.polls.forget(uid);
        self.sources.fetches.forget(uid);
        self.rendering.renders.forget(uid);
        self.rendering.function_calls.forget(uid);
        self.rendering.render_times.forget(uid);
        self.watchers.probes.forget(name);
        self.memory.cel.forget(name);
        if let Some(watches) = &self.watchers.values_watches {
            watches.set(name, Vec::new());
        }
        if let Some(watches) = &self.watchers.dependency_watches {
            watches.set(name, Vec::new());
        }
        self.memory.reset_backoff(name);
        self.memory.unwritten_intents.forget(name, uid);
        self.memory
            .last_written
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        self.revisions
            .snapshots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(bundle_deployment, _), _| bundle_deployment != name);
    }

    /// The watch delivered `bd`: the answer of the agent's last status write is no longer
    /// needed once the cache holds that version (see [`super::context::Written::delivered`]).
    pub fn delivered(&self, bd: &BundleDeployment) {
        let (Some(name), Some(version)) = (&bd.metadata.name, &bd.metadata.resource_version) else {
            return;
        };
        if let Some(written) = self
            .memory
            .last_written
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(name)
        {
            written.delivered(version);
        }
    }

    /// Whether `bd` is this agent's to act on.
    pub fn in_scope(&self, bd: &BundleDeployment) -> bool {
        self.cluster.scope.contains(bd.labels())
    }
}

/// Merge-patches `status` onto BundleDeployment `name`, conditional on `version` (the
/// resourceVersion the pass last knew; none: unconditional). On a conflict the object is read
/// again: out of scope, nothing is written ([`ReconcileError::OutOfScope`]); still in scope
/// (an edit of its spec or labels), the patch is retried on the new version. Returns the patched
/// object and the version the successful patch was made on.
pub async fn patch_status(
    ctx: &Context,
    name: &str,
    mut version: Option<String>,
    status: serde_json::Value,
) -> Result<(BundleDeployment, Option<String>), ReconcileError> {
    let api: Api<BundleDeployment> = Api::all(ctx.cluster.client.clone());
    let params = PatchParams {
        field_manager: ctx.cluster.scope.status_field_manager(),
        ..Default::default()
    };
    let kube_error = |source| ReconcileError::Kube {
        context: "write status".into(),
        source,
    };
    let mut attempt = 0;
    loop {
        let patch = match &version {
            Some(version) => json!({"metadata": {"resourceVersion": version}, "status": status}),
            None => json!({ "status": status }),
        };
        let conflict = match api.patch_status(name, &params, &Patch::Merge(&patch)).await {
            Ok(patched) => return Ok((patched, version)),
            Err(kube::Error::Api(answer)) if answer.code == 409 && attempt < CONFLICT_RETRIES => {
                answer
            }
            Err(error) => return Err(kube_error(error)),
        };
        attempt += 1;
        let Some(fresh) = api.get_opt(name).await.map_err(kube_error)? else {
            return Err(kube_error(kube::Error::Api(conflict)));
        };
        if !ctx.in_scope(&fresh) {
            return Err(ReconcileError::OutOfScope(out_of_scope_message(
                ctx, &fresh,
            )));
        }
        tracing::debug!(bundle_deployment = %name, "changed since the pass read it; writing the status again on the new version");
        version = fresh.metadata.resource_version;
    }
}

/// Why `bd` is not this agent's any more, for the log.
pub fn out_of_scope_message(ctx: &Context, bd: &BundleDeployment) -> String {
    let now = bd
        .labels()
        .get(crate::shard::SHARD_LABEL)
        .map_or("no shard".to_string(), |key| format!("shard {key:?}"));
    match ctx.cluster.scope.shard() {
        Some(shard) => format!(
            "{} left shard {shard:?} (it is now in {now}); another agent holds it",
            bd.name_any()
        ),
        None => format!(
            "{} no longer matches this agent's selector (it is in {now})",
            bd.name_any()
        ),
    }
}
