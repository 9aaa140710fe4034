//! What a BundleDeploymentSet's controller does next, from what it reads: the set, the cluster
//! Secrets and the BundleDeployments it stamped. Pure: no I/O, no clock.
//!
//! A pass: select and order the clusters; compute each one's BundleDeployment (the template,
//! the cluster's kubeconfig, its values); judge each stamped one on the current revision
//! (healthy, updating, failed, its cluster down); then, unless the rollout is halted or rolled
//! back, give the next clusters in order the current revision while fewer than `maxUpdating`
//! are updating. A failure halts the rollout (and with `onFailure: Rollback`, or on request, the
//! clusters already updated are asked to roll back to their revision from before).

use std::collections::{BTreeMap, BTreeSet};

use kube::core::{Selector, SelectorExt};

use crate::api::conditions::types::{READY, ROLLED_BACK, STALLED};
use crate::api::{
    set_conditions, BundleDeployment, BundleDeploymentSet, BundleDeploymentSpec,
    KubeConfigReference, KubeConfigSecretReference, RevisionPhase, SetClusterPhase,
    SetClusterStatus, SetOnFailure, REQUESTED_ROLLBACK_ANNOTATION, SET_CLUSTER_LABEL, SET_LABEL,
    SET_PREVIOUS_ANNOTATION, SET_REVISION_ANNOTATION,
};

/// A cluster a set may select: a kubeconfig Secret labelled `pallet.dev/cluster`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    /// The Secret's name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
}

/// What the controller does.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Create or update a BundleDeployment (server-side apply of these fields).
    Apply(Box<Stamp>),
    /// Delete the BundleDeployment of a cluster no longer selected.
    Delete(String),
    /// Ask a BundleDeployment to roll back to its revision `to` (the request annotation).
    RollBack {
        /// The BundleDeployment.
        name: String,
        /// `<revision>@<token>`, the annotation's value.
        request: String,
    },
}

/// A BundleDeployment as the set stamps it.
#[derive(Clone, Debug, PartialEq)]
pub struct Stamp {
    /// Its name.
    pub name: String,
    /// Its labels (the template's and the set's).
    pub labels: BTreeMap<String, String>,
    /// Its annotations (the template's and the set's).
    pub annotations: BTreeMap<String, String>,
    /// Its spec.
    pub spec: BundleDeploymentSpec,
}

/// A condition of the set, as decided (the controller adds the times).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetCondition {
    /// Its type.
    pub type_: &'static str,
    /// True or False.
    pub status: bool,
    /// Its reason.
    pub reason: &'static str,
    /// Its message.
    pub message: String,
}

/// What one pass decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Writes to make, in order.
    pub actions: Vec<Action>,
    /// The set's revision.
    pub revision: i64,
    /// Its digest.
    pub digest: String,
    /// Every selected cluster, in rollout order.
    pub clusters: Vec<SetClusterStatus>,
    /// The revision rolled back, if any.
    pub rolled_back_revision: Option<i64>,
    /// The rollback request handled, if any.
    pub last_handled_rollback: Option<String>,
    /// Ready, Progressing, Halted, RolledBack.
    pub conditions: Vec<SetCondition>,
    /// Whether work is under way (look again soon).
    pub progressing: bool,
}

/// Why a set cannot be planned (its spec says something the API server's schema let through).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

/// The reasons of a set's Ready condition.
pub mod reasons {
    /// Every selected cluster is healthy on the current revision.
    pub const HEALTHY: &str = "Healthy";
    /// A rollout is under way.
    pub const PROGRESSING: &str = "Progressing";
    /// A cluster's revision failed; no further cluster is updated.
    pub const HALTED: &str = "Halted";
    /// The clusters updated were rolled back.
    pub const ROLLED_BACK: &str = "RolledBack";
    /// No Secret labelled pallet.dev/cluster matches the selector.
    pub const NO_CLUSTERS: &str = "NoClusters";
    /// The set's selector or spec cannot be used.
    pub const INVALID: &str = "InvalidSpec";
}

/// How a stamped BundleDeployment is doing on the revision it has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judged {
    /// Healthy (Ready at its generation).
    Healthy,
    /// Not there yet.
    Updating(String),
    /// Its revision failed.
    Failed(String),
    /// Its cluster is down.
    Unreachable(String),
}

/// Judges `bd` on its current generation, from its status.
pub fn judge(bd: &BundleDeployment) -> Judged {
    let generation = bd.metadata.generation;
    let Some(status) = &bd.status else {
        return Judged::Updating("not reconciled yet".into());
    };
    if status.observed_generation != generation {
        return Judged::Updating("not reconciled yet at its generation".into());
    }
    let condition = |type_: &str| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_ && c.observed_generation == generation)
    };
    let ready = condition(READY);
    let message = ready.map(|c| c.message.clone()).unwrap_or_default();
    if ready.is_some_and(|c| c.status == "True") {
        return Judged::Healthy;
    }
    if ready.is_some_and(|c| c.reason == "ClusterUnreachable" || c.reason == "ClusterUnauthorized")
    {
        return Judged::Unreachable(message);
    }
    let failed_revision = status.revisions.iter().find(|r| {
        Some(r.generation) == generation
            && matches!(r.phase, RevisionPhase::Failed | RevisionPhase::RolledBack)
    });
    if let Some(failed) = failed_revision {
        // Why the revision failed, not what the BundleDeployment does since (a rollback).
        let why = match (&failed.reason, &failed.message) {
            (Some(reason), Some(detail)) => format!("{reason}: {detail}"),
            (Some(reason), None) => reason.clone(),
            (None, Some(detail)) => detail.clone(),
            (None, None) => message,
        };
        return Judged::Failed(format!("revision {} failed: {why}", failed.number));
    }
    let stuck = [ROLLED_BACK, STALLED]
        .iter()
        .any(|t| condition(t).is_some_and(|c| c.status == "True"));
    if stuck {
        return Judged::Failed(message);
    }
    Judged::Updating(message)
}

/// `sha256:` of what a revision of `set` is made of: its template and per-cluster settings.
pub fn digest(set: &BundleDeploymentSet) -> String {
    use sha2::{Digest, Sha256};
    let value = serde_json::json!({
        "template": set.spec.template,
        "perCluster": set.spec.per_cluster,
    });
    let hash = Sha256::digest(value.to_string().as_bytes());
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The name of the BundleDeployment `set` stamps for `cluster`.
pub fn stamp_name(set: &str, cluster: &str) -> String {
    format!("{set}-{cluster}")
}

/// The clusters `set` selects among `clusters`, in rollout order.
pub fn select(set: &BundleDeploymentSet, clusters: &[Cluster]) -> Result<Vec<String>, PlanError> {
    let selector = Selector::try_from(set.spec.cluster_selector.clone())
        .map_err(|e| PlanError(format!("spec.clusterSelector: {e}")))?;
    let selected: BTreeSet<&str> = clusters
        .iter()
        .filter(|c| selector.matches(&c.labels))
        .map(|c| c.name.as_str())
        .collect();
    let order = set
        .spec
        .rollout
        .as_ref()
        .map(|r| r.order.as_slice())
        .unwrap_or_default();
    let mut ordered: Vec<String> = Vec::with_capacity(selected.len());
    for name in order {
        if selected.contains(name.as_str()) && !ordered.contains(name) {
            ordered.push(name.clone());
        }
    }
    for name in selected {
        if !ordered.iter().any(|o| o == name) {
            ordered.push(name.to_string());
        }
    }
    Ok(ordered)
}

/// The BundleDeployment `set` stamps for `cluster` at `revision` (the previous-revision
/// annotation is added by the caller when it moves one).
pub fn stamp(
    set: &BundleDeploymentSet,
    cluster: &str,
    agent_namespace: &str,
    revision: i64,
) -> Stamp {
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let template = &set.spec.template;
    let mut spec = template.spec.clone();
    spec.kube_config = Some(KubeConfigReference {
        secret_ref: KubeConfigSecretReference {
            name: cluster.to_string(),
            namespace: Some(agent_namespace.to_string()),
            key: None,
        },
        context: None,
    });
    if let Some(own) = set.spec.per_cluster.iter().find(|p| p.cluster == cluster) {
        if let Some(values) = &own.values {
            let config = spec.config.get_or_insert_with(Default::default);
            let helm = config.helm.get_or_insert_with(Default::default);
            let mut merged = helm.values.take().unwrap_or(serde_json::json!({}));
            merge(&mut merged, values);
            helm.values = Some(merged);
        }
        if !own.vars.is_empty() {
            for processor in &mut spec.processors {
                if let Some(substitute) = processor.substitute.as_mut() {
                    substitute
                        .vars
                        .extend(own.vars.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            }
        }
    }
    let metadata = template.metadata.clone().unwrap_or_default();
    let mut labels = metadata.labels;
    labels.insert(SET_LABEL.into(), set_name.clone());
    labels.insert(SET_CLUSTER_LABEL.into(), cluster.to_string());
    let mut annotations = metadata.annotations;
    annotations.insert(SET_REVISION_ANNOTATION.into(), revision.to_string());
    Stamp {
        name: stamp_name(&set_name, cluster),
        labels,
        annotations,
        spec,
    }
}

/// Merges `over` into `base`: maps key by key, anything else replaced.
pub fn merge(base: &mut serde_json::Value, over: &serde_json::Value) {
    match (base, over) {
        (serde_json::Value::Object(base), serde_json::Value::Object(over)) => {
            for (key, value) in over {
                match base.get_mut(key) {
                    Some(existing) => merge(existing, value),
                    None => {
                        base.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (base, over) => *base = over.clone(),
    }
}

/// The set revision `bd` is of (its `pallet.dev/set-revision` annotation).
pub fn revision_of(bd: &BundleDeployment) -> Option<i64> {
    bd.metadata
        .annotations
        .as_ref()?
        .get(SET_REVISION_ANNOTATION)?
        .parse()
        .ok()
}

/// The revision `bd` had before the set moved it to its current one.
fn previous_of(bd: &BundleDeployment) -> Option<i64> {
    bd.metadata
        .annotations
        .as_ref()?
        .get(SET_PREVIOUS_ANNOTATION)?
        .parse()
        .ok()
}

/// Plans one pass of `set` (see the module doc). `stamped` are the BundleDeployments labelled
/// with the set's name.
pub fn plan(
    set: &BundleDeploymentSet,
    clusters: &[Cluster],
    stamped: &[BundleDeployment],
    agent_namespace: &str,
) -> Result<Plan, PlanError> {
    let status = set.status.clone().unwrap_or_default();
    let digest = digest(set);
    let revision = match (status.revision, &status.digest) {
        (Some(revision), Some(known)) if *known == digest => revision,
        (Some(revision), _) => revision + 1,
        (None, _) => 1,
    };
    let order = select(set, clusters)?;
    let by_cluster: BTreeMap<&str, &BundleDeployment> = stamped
        .iter()
        .filter_map(|bd| {
            let labels = bd.metadata.labels.as_ref()?;
            Some((labels.get(SET_CLUSTER_LABEL)?.as_str(), bd))
        })
        .collect();
    let rollout = set.spec.rollout.clone().unwrap_or_default();
    let mut rolled_back = status.rolled_back_revision.filter(|r| *r == revision);
    let mut last_handled = status.last_handled_rollback.clone();
    let mut actions = Vec::new();
    // Clusters no longer selected.
    for (cluster, bd) in &by_cluster {
        if !order.iter().any(|o| o == cluster) {
            actions.push(Action::Delete(bd.metadata.name.clone().unwrap_or_default()));
        }
    }
    // Judge each selected cluster.
    let mut rows = Vec::with_capacity(order.len());
    for cluster in &order {
        let desired = stamp(set, cluster, agent_namespace, revision);
        let row = match by_cluster.get(cluster.as_str()) {
            None => Row::missing(cluster, desired),
            Some(bd) => Row::of(cluster, bd, desired, revision),
        };
        rows.push(row);
    }
    let failed: Vec<&Row> = rows
        .iter()
        .filter(|r| r.current && matches!(r.judged, Some(Judged::Failed(_))))
        .collect();
    // A rollback: asked for, or on failure with onFailure: Rollback.
    let requested = set
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REQUESTED_ROLLBACK_ANNOTATION))
        .filter(|value| Some(*value) != status.last_handled_rollback.as_ref())
        .cloned();
    let automatic = !failed.is_empty() && rollout.on_failure() == SetOnFailure::Rollback;
    if rolled_back.is_none() && (requested.is_some() || automatic) {
        for row in rows.iter().filter(|r| r.current) {
            if let Some(to) = row.previous {
                actions.push(Action::RollBack {
                    name: row.desired.name.clone(),
                    request: format!("{to}@set-revision-{revision}"),
                });
            }
        }
        rolled_back = Some(revision);
    }
    if let Some(value) = requested {
        last_handled = Some(value);
    }
    let halted = rolled_back.is_some() || !failed.is_empty();
    // Metadata-only moves (the spec for this cluster is unchanged) cost no slot; content moves
    // wait for a slot, in order.
    let mut updating = rows.iter().filter(|r| r.current && r.in_flight()).count();
    for row in &mut rows {
        if row.current {
            continue;
        }
        if row.same_spec {
            row.moved = true;
            actions.push(Action::Apply(Box::new(row.moving_stamp())));
            continue;
        }
        if halted || updating >= rollout.max_updating() {
            continue;
        }
        updating += 1;
        row.moved = true;
        actions.push(Action::Apply(Box::new(row.moving_stamp())));
    }
    let clusters_status: Vec<SetClusterStatus> = rows
        .iter()
        .map(|row| row.status(revision, rolled_back.is_some()))
        .collect();
    let conditions = conditions(
        revision,
        &clusters_status,
        rolled_back.is_some(),
        order.is_empty(),
    );
    let progressing = conditions
        .iter()
        .any(|c| c.type_ == set_conditions::PROGRESSING && c.status);
    Ok(Plan {
        actions,
        revision,
        digest,
        clusters: clusters_status,
        rolled_back_revision: rolled_back,
        last_handled_rollback: last_handled,
        conditions,
        progressing,
    })
}

/// One selected cluster during a pass.
struct Row {
    cluster: String,
    desired: Stamp,
    /// Its BundleDeployment has the current revision (and the spec it stamps).
    current: bool,
    /// Only the revision annotation differs (the spec for this cluster is the same).
    same_spec: bool,
    /// Moved to the current revision by this pass.
    moved: bool,
    /// How it does on its revision (None: no BundleDeployment).
    judged: Option<Judged>,
    /// Its set revision.
    revision: Option<i64>,
    /// The BundleDeployment revision to go back to.
    previous: Option<i64>,
    /// The BundleDeployment's revision to record as previous when it is moved.
    healthy_now: Option<i64>,
}

impl Row {
    fn missing(cluster: &str, desired: Stamp) -> Row {
        Row {
            cluster: cluster.to_string(),
            desired,
            current: false,
            same_spec: false,
            moved: false,
            judged: None,
            revision: None,
            previous: None,
            healthy_now: None,
        }
    }

    fn of(cluster: &str, bd: &BundleDeployment, desired: Stamp, revision: i64) -> Row {
        let same_spec = bd.spec == desired.spec;
        let has = revision_of(bd);
        Row {
            cluster: cluster.to_string(),
            current: same_spec && has == Some(revision),
            same_spec,
            desired,
            moved: false,
            judged: Some(judge(bd)),
            revision: has,
            previous: previous_of(bd),
            healthy_now: bd.status.as_ref().and_then(|s| s.last_healthy_revision),
        }
    }

    /// Counts against `maxUpdating`.
    fn in_flight(&self) -> bool {
        matches!(
            self.judged,
            Some(Judged::Updating(_) | Judged::Unreachable(_))
        )
    }

    /// The stamp moving it to the current revision, recording the revision to go back to.
    fn moving_stamp(&self) -> Stamp {
        let mut stamp = self.desired.clone();
        // A metadata-only move keeps the previous revision recorded at the last content move.
        let previous = if self.same_spec {
            self.previous
        } else {
            self.healthy_now
        };
        if let Some(previous) = previous {
            stamp
                .annotations
                .insert(SET_PREVIOUS_ANNOTATION.into(), previous.to_string());
        }
        stamp
    }

    fn status(&self, revision: i64, rolled_back: bool) -> SetClusterStatus {
        let on_current = self.current || (self.moved && self.same_spec);
        let (phase, message) = if self.moved && !self.same_spec {
            (SetClusterPhase::Updating, None)
        } else if !on_current {
            (SetClusterPhase::Pending, None)
        } else if rolled_back && self.previous.is_some() {
            (SetClusterPhase::RolledBack, None)
        } else {
            match &self.judged {
                Some(Judged::Healthy) => (SetClusterPhase::Healthy, None),
                Some(Judged::Updating(m)) => (SetClusterPhase::Updating, Some(m.clone())),
                Some(Judged::Failed(m)) => (SetClusterPhase::Failed, Some(m.clone())),
                Some(Judged::Unreachable(m)) => (SetClusterPhase::Unreachable, Some(m.clone())),
                None => (SetClusterPhase::Pending, None),
            }
        };
        SetClusterStatus {
            name: self.cluster.clone(),
            bundle_deployment: self.desired.name.clone(),
            revision: if on_current || self.moved {
                Some(revision)
            } else {
                self.revision
            },
            phase,
            message: message.filter(|m| !m.is_empty()),
        }
    }
}

/// The set's conditions from its clusters.
fn conditions(
    revision: i64,
    clusters: &[SetClusterStatus],
    rolled_back: bool,
    none_selected: bool,
) -> Vec<SetCondition> {
    let count = |phase: SetClusterPhase| clusters.iter().filter(|c| c.phase == phase).count();
    let names = |phase: SetClusterPhase| {
        clusters
            .iter()
            .filter(|c| c.phase == phase)
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let healthy = count(SetClusterPhase::Healthy);
    let total = clusters.len();
    let failed = clusters.iter().find(|c| c.phase == SetClusterPhase::Failed);
    let (ready, reason, message) = if none_selected {
        (
            false,
            reasons::NO_CLUSTERS,
            "no Secret labelled pallet.dev/cluster in the agent's namespace matches spec.clusterSelector".to_string(),
        )
    } else if rolled_back {
        (
            false,
            reasons::ROLLED_BACK,
            format!(
                "revision {revision} was rolled back on {}; change the template to roll out a new revision",
                match names(SetClusterPhase::RolledBack) {
                    n if n.is_empty() => "no cluster (none had an earlier revision)".to_string(),
                    n => n,
                }
            ),
        )
    } else if let Some(failed) = failed {
        (
            false,
            reasons::HALTED,
            format!(
                "revision {revision} failed on cluster {}{}; the rollout is halted: {} of {total} clusters on it are healthy, the others keep their revision",
                failed.name,
                failed
                    .message
                    .as_deref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default(),
                healthy
            ),
        )
    } else if healthy == total {
        (
            true,
            reasons::HEALTHY,
            format!("revision {revision} healthy on {total} clusters"),
        )
    } else {
        let mut parts = vec![format!("{healthy} of {total} clusters healthy")];
        for (phase, label) in [
            (SetClusterPhase::Updating, "updating"),
            (SetClusterPhase::Unreachable, "unreachable"),
            (SetClusterPhase::Pending, "pending"),
        ] {
            let listed = names(phase);
            if !listed.is_empty() {
                parts.push(format!("{label}: {listed}"));
            }
        }
        (
            false,
            reasons::PROGRESSING,
            format!("revision {revision}: {}", parts.join("; ")),
        )
    };
    let progressing = reason == reasons::PROGRESSING;
    vec![
        SetCondition {
            type_: READY,
            status: ready,
            reason,
            message: message.clone(),
        },
        SetCondition {
            type_: set_conditions::PROGRESSING,
            status: progressing,
            reason: if progressing {
                reasons::PROGRESSING
            } else {
                reason
            },
            message: message.clone(),
        },
        SetCondition {
            type_: set_conditions::HALTED,
            status: reason == reasons::HALTED,
            reason: if reason == reasons::HALTED {
                reasons::HALTED
            } else {
                "NotHalted"
            },
            message: if reason == reasons::HALTED {
                message.clone()
            } else {
                String::new()
            },
        },
        SetCondition {
            type_: set_conditions::ROLLED_BACK,
            status: rolled_back,
            reason: if rolled_back {
                reasons::ROLLED_BACK
            } else {
                "NotRolledBack"
            },
            message: if rolled_back { message } else { String::new() },
        },
    ]
}

#[cfg(test)]
mod tests;
