//! The status writer of one pass: patches only what changed since the last write.

use super::{status, Context, ReconcileError};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use kube::ResourceExt;
use serde_json::json;

use crate::api::{BundleDeployment, BundleDeploymentStatus};
use status::Outcome;

/// Writes status for one reconcile: remembers what is on the server, so that a pass that
/// writes several times (before applying, after) patches only what changed.
pub(super) struct StatusWriter<'a> {
    ctx: &'a Context,
    bd: &'a BundleDeployment,
    /// The status as last written (or read).
    pub(super) written: BundleDeploymentStatus,
    /// The object's resourceVersion after the last write (or as read): writes are conditional
    /// on it (see [`super::scope::patch_status`]).
    version: Option<String>,
    /// A status recorded but not written: an intent that the snapshot or the inventory holds
    /// (see [`super::unwritten_intent`]). The next write carries it.
    pub(super) staged: Option<BundleDeploymentStatus>,
    /// The pass's time: what every condition and notification it writes says.
    now: Time,
}

impl<'a> StatusWriter<'a> {
    pub(super) fn new(ctx: &'a Context, bd: &'a BundleDeployment, now: Time) -> Self {
        StatusWriter {
            ctx,
            bd,
            written: bd.status.clone().unwrap_or_default(),
            version: bd.metadata.resource_version.clone(),
            staged: None,
            now,
        }
    }

    /// The status a pass starts from: an intent kept out of status, in memory since the last
    /// pass (see `unwritten_intent`), else the status as written.
    pub(super) fn resume(&mut self) -> BundleDeploymentStatus {
        let kept = self
            .ctx
            .memory
            .unwritten_intents
            .take(self.bd, &self.written);
        match kept {
            Some(staged) => {
                self.staged = Some(staged.clone());
                staged
            }
            None => self.written.clone(),
        }
    }

    /// Applies `outcome` to `work` as [`Self::write`] does, without writing: for an intent the
    /// revision's snapshot or the inventory in status already records.
    pub(super) fn stage(&mut self, work: &mut BundleDeploymentStatus, outcome: &Outcome) {
        *work = status::next_status(work, self.bd.metadata.generation, outcome, &self.now);
        work.agent = Some(self.ctx.cluster.identity.clone());
        self.staged = Some(work.clone());
    }

    /// The status as this pass recorded it last: staged, else written.
    pub(super) fn recorded(&self) -> &BundleDeploymentStatus {
        self.staged.as_ref().unwrap_or(&self.written)
    }

    /// Applies `outcome` to `work` (see [`status::next_status`]) and patches the difference.
    pub(super) async fn write(
        &mut self,
        work: &mut BundleDeploymentStatus,
        outcome: &Outcome,
    ) -> Result<(), ReconcileError> {
        let _phase = crate::metrics::METRICS.phase("status_write");
        *work = status::next_status(work, self.bd.metadata.generation, outcome, &self.now);
        work.agent = Some(self.ctx.cluster.identity.clone());
        // Transitions this write records go into status.notifications with it (see `notify`).
        let notifications = (self.ctx.records.notifier)
            .prepare(self.bd, &mut self.written, work, &self.now)
            .await;
        if *work == self.written
            || (only_agent_differs(&self.written, work) && !self.wrote_before())
        {
            // A new process of the same agent (a restart, a new pod) finds its predecessor's
            // name: renaming alone would write every BundleDeployment's status at each restart.
            // Its first real write puts its own name there.
            self.staged = None;
            return Ok(());
        }
        let waiting = match outcome {
            Outcome::Installed { health, .. } if !health.healthy => Some(health.waiting.clone()),
            _ => None,
        };
        if waiting.is_some()
            && self.staged.is_none()
            && waiting == self.waiting_written()
            && status::progress_detail_only(&self.written, work)
        {
            // The same objects are still on their way: the condition keeps the words of the last
            // write until the set changes or the revision settles.
            return Ok(());
        }
        let patch = status_merge_patch(&self.written, work);
        let name = self.bd.name_any();
        let (mut patched, base) =
            super::scope::patch_status(self.ctx, &name, self.version.clone(), patch).await?;
        patched.metadata.managed_fields = None; // kept like the watch's copies (see `decode`)
        self.version = patched.metadata.resource_version.clone();
        self.ctx
            .memory
            .last_written
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(self.bd.name_any())
            .or_default()
            .wrote(base, patched, waiting);
        notifications.written(work);
        self.written = work.clone();
        self.staged = None;
        Ok(())
    }

    /// Whether this process has written this BundleDeployment's status.
    fn wrote_before(&self) -> bool {
        self.ctx
            .memory
            .last_written
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&self.bd.name_any())
            .is_some_and(|w| w.write.is_some())
    }

    /// What a progressing revision was waiting for at the agent's last status write of this
    /// BundleDeployment, if that write was one (and is the version this pass started from).
    fn waiting_written(&self) -> Option<Vec<String>> {
        let last = self
            .ctx
            .memory
            .last_written
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let written = last.get(&self.bd.name_any())?;
        let (version, _) = written.write.as_ref()?;
        (self.version.as_ref() == Some(version))
            .then(|| written.waiting.clone())
            .flatten()
    }
}

/// Whether `next` is `written` with another process of the same agent in `agent` (the same
/// shard: the `@KEY` suffix, or none) and nothing else changed. A bundle handed to another
/// shard does get the new shard's name: that tells who acts for it now.
fn only_agent_differs(written: &BundleDeploymentStatus, next: &BundleDeploymentStatus) -> bool {
    let shard = |agent: &Option<String>| {
        agent
            .as_deref()
            .map(|a| a.split_once('@').map(|(_, key)| key.to_string()))
    };
    written.agent != next.agent
        && shard(&written.agent) == shard(&next.agent)
        && BundleDeploymentStatus {
            agent: written.agent.clone(),
            ..next.clone()
        } == *written
}

/// The JSON merge patch from `current` to `next`: `next` itself, plus an explicit null for every
/// field `current` has and `next` dropped (optional fields are left out when serialized, and a
/// merge patch only removes what it names).
pub(super) fn status_merge_patch(
    current: &BundleDeploymentStatus,
    next: &BundleDeploymentStatus,
) -> serde_json::Value {
    let mut patch = serde_json::to_value(next).unwrap_or_else(|_| json!({}));
    if let (Some(patch), Ok(serde_json::Value::Object(before))) =
        (patch.as_object_mut(), serde_json::to_value(current))
    {
        for key in before.keys() {
            patch.entry(key.clone()).or_insert(serde_json::Value::Null);
        }
    }
    patch
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Drift;

    #[test]
    fn a_new_agent_name_alone_is_no_change() {
        let written = BundleDeploymentStatus {
            agent: Some("pallet-7d9f-abcde".into()),
            observed_generation: Some(3),
            ..Default::default()
        };
        let renamed = BundleDeploymentStatus {
            agent: Some("pallet-7d9f-fghij".into()),
            ..written.clone()
        };
        assert!(only_agent_differs(&written, &renamed));
        let moved = BundleDeploymentStatus {
            observed_generation: Some(4),
            ..renamed.clone()
        };
        assert!(!only_agent_differs(&written, &moved));
        assert!(!only_agent_differs(&written, &written.clone()));
        // Handed over to another shard: its name is news.
        let sharded = |agent: &str| BundleDeploymentStatus {
            agent: Some(agent.into()),
            ..written.clone()
        };
        assert!(only_agent_differs(
            &sharded("pallet-a-1@blue"),
            &sharded("pallet-a-2@blue")
        ));
        assert!(!only_agent_differs(
            &sharded("pallet-a-1@blue"),
            &sharded("pallet-b-1@green")
        ));
        assert!(!only_agent_differs(
            &sharded("pallet-a-1"),
            &sharded("pallet-b-1@green")
        ));
    }

    #[test]
    fn merge_patch_removes_dropped_fields() {
        let current = BundleDeploymentStatus {
            drift: Some(Drift {
                count: 1,
                objects: vec![],
            }),
            observed_generation: Some(1),
            ..Default::default()
        };
        let next = BundleDeploymentStatus {
            observed_generation: Some(2),
            ..Default::default()
        };
        let patch = status_merge_patch(&current, &next);
        assert_eq!(patch, json!({"observedGeneration": 2, "drift": null}));
    }
}
