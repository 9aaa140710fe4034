//! `BundleDeploymentSet`: one bundle on many clusters. It stamps a BundleDeployment per selected
//! cluster (a kubeconfig Secret labelled `pallet.dev/cluster`, as Argo CD keeps its clusters in
//! labelled Secrets), with per-cluster values, and rolls a new revision of its template out in
//! waves: at most `rollout.maxUpdating` clusters at once, in the order the user sets, halting
//! when a cluster's revision fails (the others keep their last healthy revision), with a
//! rollback of the clusters already updated.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::BundleDeploymentSpec;

/// The label that makes a kubeconfig Secret of the agent's namespace a cluster a
/// BundleDeploymentSet may select (any value; `true` by convention).
pub const CLUSTER_SECRET_LABEL: &str = "pallet.dev/cluster";
/// The label a BundleDeploymentSet puts on the BundleDeployments it stamps: the set's name.
pub const SET_LABEL: &str = "pallet.dev/set";
/// The label a BundleDeploymentSet puts on the BundleDeployments it stamps: the cluster's name.
pub const SET_CLUSTER_LABEL: &str = "pallet.dev/set-cluster";
/// The annotation a BundleDeploymentSet puts on the BundleDeployments it stamps: the set's
/// revision the BundleDeployment's spec is of.
pub const SET_REVISION_ANNOTATION: &str = "pallet.dev/set-revision";
/// The annotation a BundleDeploymentSet puts on a BundleDeployment when it moves it to a new
/// revision: the BundleDeployment's revision that was active before, what a rollback of the
/// set goes back to.
pub const SET_PREVIOUS_ANNOTATION: &str = "pallet.dev/set-previous-revision";

/// One bundle on many clusters (see the module doc).
// kube's printcolumn(...) repeats `type_` once per column, which clippy takes for a duplicate.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "pallet.dev",
    version = "v1alpha1",
    kind = "BundleDeploymentSet",
    plural = "bundledeploymentsets",
    shortname = "bds",
    category = "pallet",
    status = "BundleDeploymentSetStatus",
    doc = "One bundle on many clusters: a BundleDeployment stamped per selected cluster, a new revision rolled out in waves.",
    printcolumn(name = "Revision", type_ = "integer", json_path = ".status.revision"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message"
    )
)]
#[kube(validation = Rule::new("size(self.metadata.name) <= 200").message("a BundleDeploymentSet's name is at most 200 characters: the BundleDeployments it stamps are named <set>-<cluster>"))]
#[x_kube(validation = Rule::new("!has(self.template.spec.kubeConfig)").message("template.spec.kubeConfig is set by the set, one per selected cluster; leave it out"))]
#[x_kube(validation = Rule::new("!has(self.perCluster) || self.template.spec.format == 'helm' || !self.perCluster.exists(p, has(p.values))").message("perCluster[].values are helm values: the template's format is not helm (use perCluster[].vars with a substitute processor)"))]
#[x_kube(validation = Rule::new("!has(self.perCluster) || !self.perCluster.exists(p, has(p.vars)) || (has(self.template.spec.processors) && self.template.spec.processors.exists(q, has(q.substitute)))").message("perCluster[].vars feed the template's substitute processors, and it has none"))]
#[serde(rename_all = "camelCase")]
pub struct BundleDeploymentSetSpec {
    /// Which clusters: kubeconfig Secrets of the agent's namespace labelled
    /// `pallet.dev/cluster`, among them those whose labels match. `{}` selects every such
    /// Secret. A cluster that stops matching has its BundleDeployment deleted (its objects go
    /// as its `deletionPolicy` says).
    pub cluster_selector: LabelSelector,

    /// The BundleDeployment stamped per cluster, named `<set>-<cluster>`.
    pub template: BundleDeploymentTemplate,

    /// Settings of single clusters, by the cluster's name (its Secret's). Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["cluster".into()]))]
    pub per_cluster: Vec<PerCluster>,

    /// How a new revision of the template reaches the clusters. Default: one cluster at a
    /// time, by name, halting at the first failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<SetRollout>,
}

/// The BundleDeployment stamped per cluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BundleDeploymentTemplate {
    /// Labels and annotations of every stamped BundleDeployment (the set adds its own).
    /// Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,

    /// The spec of every stamped BundleDeployment, without `kubeConfig` (the set names each
    /// cluster's) and with each cluster's `perCluster` settings merged in.
    pub spec: BundleDeploymentSpec,
}

/// Labels and annotations of the stamped BundleDeployments.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    /// Labels. Default: none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations. Default: none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// One cluster's settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PerCluster {
    /// The cluster's name (its kubeconfig Secret's).
    #[schemars(length(min = 1, max = 253))]
    pub cluster: String,
    /// Helm values merged over the template's `config.helm.values` (maps merge key by key,
    /// anything else is replaced). Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::free_form_object")]
    pub values: Option<serde_json::Value>,
    /// Variables added to every `substitute` processor of the template (they win over its
    /// own). Default: none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, String>,
}

/// How a new revision reaches the clusters.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetRollout {
    /// Clusters updated at once: a cluster is updating from when its BundleDeployment gets the
    /// new revision until it is healthy on it (or, down meanwhile, until it is back and
    /// healthy). Default: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_updating: Option<i32>,
    /// The order clusters are updated in: these first, in this order, then every other
    /// selected cluster by name. A name that is not selected is skipped. Default: by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub order: Vec<String>,
    /// What a failed cluster does to the rollout: `Halt` (no further cluster is updated; the
    /// failed one rolls itself back as its own `rollout.onFailure` says, the others keep their
    /// revision), or `Rollback` (halt, and roll every cluster already updated back to its
    /// revision from before). Default: Halt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<SetOnFailure>,
}

impl SetRollout {
    /// `maxUpdating` with its default.
    pub fn max_updating(&self) -> usize {
        usize::try_from(self.max_updating.unwrap_or(1).max(1)).unwrap_or(1)
    }

    /// `onFailure` with its default.
    pub fn on_failure(&self) -> SetOnFailure {
        self.on_failure.unwrap_or_default()
    }
}

/// What a failed cluster does to the rollout.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum SetOnFailure {
    /// Update no further cluster.
    #[default]
    Halt,
    /// Update no further cluster, and roll the clusters already updated back.
    Rollback,
}

/// Observed state, written only by the agent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BundleDeploymentSetStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (every selected cluster healthy on the current revision), `Progressing` (a
    /// rollout is under way), `Halted` (a cluster's revision failed: no further cluster is
    /// updated until the template changes), `RolledBack` (the clusters updated were rolled
    /// back).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The set's revision: 1 for the first template, one more at every change of the
    /// template or of `perCluster`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// `sha256:` of the template and `perCluster` the revision is of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Every selected cluster, in rollout order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<SetClusterStatus>,
    /// The revision that was rolled back (after a failure with `onFailure: Rollback`, or a
    /// request); it is not rolled out again until the template changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back_revision: Option<i64>,
    /// The last `pallet.dev/requested-rollback` annotation value handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_rollback: Option<String>,
}

/// One cluster of a set.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetClusterStatus {
    /// The cluster's name.
    pub name: String,
    /// Its BundleDeployment.
    pub bundle_deployment: String,
    /// The set's revision its BundleDeployment is of (none: not created yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// Where it is: `Pending` (waiting for its turn), `Updating`, `Healthy`, `Failed`,
    /// `Unreachable` (its cluster is down), `RolledBack`.
    pub phase: SetClusterPhase,
    /// Its BundleDeployment's Ready message, when not healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Where a cluster of a set is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum SetClusterPhase {
    /// Waiting for its turn (or held by a halted rollout).
    #[default]
    Pending,
    /// Has the current revision, not healthy on it yet.
    Updating,
    /// Healthy on the current revision.
    Healthy,
    /// The current revision failed there.
    Failed,
    /// Its cluster is down.
    Unreachable,
    /// Rolled back to its revision from before.
    RolledBack,
}

impl SetClusterPhase {
    /// As status and the CLI show it.
    pub fn as_str(self) -> &'static str {
        match self {
            SetClusterPhase::Pending => "Pending",
            SetClusterPhase::Updating => "Updating",
            SetClusterPhase::Healthy => "Healthy",
            SetClusterPhase::Failed => "Failed",
            SetClusterPhase::Unreachable => "Unreachable",
            SetClusterPhase::RolledBack => "RolledBack",
        }
    }
}

/// Condition types of a BundleDeploymentSet besides `Ready`.
pub mod set_conditions {
    /// A rollout is under way.
    pub const PROGRESSING: &str = "Progressing";
    /// A cluster's revision failed: no further cluster is updated.
    pub const HALTED: &str = "Halted";
    /// The clusters updated were rolled back.
    pub const ROLLED_BACK: &str = "RolledBack";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_of_a_rollout() {
        let rollout = SetRollout::default();
        assert_eq!(rollout.max_updating(), 1);
        assert_eq!(rollout.on_failure(), SetOnFailure::Halt);
        let wide = SetRollout {
            max_updating: Some(3),
            ..Default::default()
        };
        assert_eq!(wide.max_updating(), 3);
    }

    #[test]
    fn a_set_reads_as_written() {
        let set: BundleDeploymentSetSpec = serde_json::from_value(serde_json::json!({
            "clusterSelector": {"matchLabels": {"env": "prod"}},
            "template": {"spec": {"format": "helm", "sources": [], "config": {"helm": {"values": {"a": 1}}}}},
            "perCluster": [{"cluster": "prod-eu", "values": {"replicas": 3}}],
            "rollout": {"maxUpdating": 2, "order": ["prod-eu", "prod-us"], "onFailure": "Rollback"},
        }))
        .unwrap();
        assert_eq!(set.per_cluster[0].cluster, "prod-eu");
        assert_eq!(set.rollout.unwrap().on_failure(), SetOnFailure::Rollback);
    }
}
