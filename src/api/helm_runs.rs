//! Helm settings and status of the install-time behaviour: the policy for a chart's `crds/`
//! directory and the hook runs made on request (`pallet test`) or on deletion.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{HookPhase, HookRun};

/// One-shot request: run the chart's `test` hooks against the active revision. Any value (a
/// timestamp); answered once it is in `status.test.request`.
pub const REQUESTED_TEST_ANNOTATION: &str = "pallet.dev/requested-test";

/// What is done with the objects of a chart's `crds/` directories (Flux's HelmRelease
/// `install.crds`/`upgrade.crds`). They are never deleted: not when they leave the chart, not
/// when the BundleDeployment is deleted. Default: Create on the first revision, Skip on later
/// ones.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum CrdPolicy {
    /// Neither created nor updated.
    Skip,
    /// Created when missing; an existing one is left as it is.
    Create,
    /// Created when missing, and updated to the chart's.
    CreateReplace,
}

impl CrdPolicy {
    /// The policy in force for a revision: the one set, else helm's and Flux's defaults,
    /// `Create` on the first revision (an install) and `Skip` on later ones (upgrades).
    pub fn in_force(set: Option<CrdPolicy>, install: bool) -> CrdPolicy {
        match (set, install) {
            (Some(policy), _) => policy,
            (None, true) => CrdPolicy::Create,
            (None, false) => CrdPolicy::Skip,
        }
    }
}

/// Hooks run outside a revision's apply: the chart's test hooks on request, or its delete hooks
/// while the BundleDeployment is deleted.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookRequest {
    /// The request answered (the value of `pallet.dev/requested-test`); none for deletion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// The revision whose hooks run.
    pub revision: i64,
    /// Running until every hook ran; Succeeded, or Failed at the first hook that failed.
    pub phase: HookPhase,
    /// When the run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// Why it failed (the hook and its message), or that there was nothing to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Each hook, in the order helm runs them, and how it went.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookRun>,
}
