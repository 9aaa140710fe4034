//! The objects of a helm chart's `crds/` directories, applied by `config.helm.crds` before
//! anything else of the revision (its pre hooks included), as `helm install` installs them
//! first. They are not part of the inventory: never pruned, never deleted with the
//! BundleDeployment (helm and Flux leave them too).

use pallet_formats::{Object, ObjectKey};

use super::hook_plan::Operation;
use super::ReconcileError;
use crate::api::{BundleDeployment, CrdPolicy};
use crate::apply::Applier;

/// Applies revision `revision`'s chart CRDs by the policy in force and returns the keys of all
/// of them (to keep out of the prune).
pub async fn apply(
    bd: &BundleDeployment,
    applier: &Applier,
    revision: Option<i64>,
    crds: &[Object],
) -> Result<Vec<(ObjectKey, String)>, ReconcileError> {
    if crds.is_empty() {
        return Ok(Vec::new());
    }
    let keys = applier.resolve_keys(crds).await?;
    let install = Operation::of(revision.unwrap_or(1)) == Operation::Install;
    let set = bd
        .spec
        .config
        .as_ref()
        .and_then(|c| c.helm.as_ref())
        .and_then(|h| h.crds);
    let to_apply: Vec<Object> = match CrdPolicy::in_force(set, install) {
        CrdPolicy::Skip => Vec::new(),
        CrdPolicy::CreateReplace => crds.to_vec(),
        CrdPolicy::Create => {
            let mut missing = Vec::new();
            for (object, (key, api_version)) in crds.iter().zip(&keys) {
                if !applier.exists(key, api_version).await? {
                    missing.push(object.clone());
                }
            }
            missing
        }
    };
    if !to_apply.is_empty() {
        applier.apply(&to_apply).await?;
    }
    Ok(keys)
}
