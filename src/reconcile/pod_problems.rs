//! The Pods behind an unhealthy workload: listed only for the first few unhealthy workloads
//! of a revision, so their problems (CrashLoopBackOff and the last exit, an image that cannot
//! be pulled, OOMKilled, Unschedulable) reach the health message, the rollback condition, the
//! revision history and notifications. Reading them never fails a pass: a list that fails
//! leaves the message as the controller's counters said it.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::Client;

use crate::apply::Applied;
use crate::health::{self, pods};

use super::health_checks::{assessed_objects, SUMMARIZED};

/// Pods read per workload: enough to find the ones in trouble.
const PODS_LISTED: u32 = 100;

/// How long a revision's workloads may be on their way before their Pods are read. A rollout
/// that becomes healthy within it costs no Pod list (at 100 apps installed at once, listing from
/// the first pass was half of the agent's requests); one that does not is explained from then
/// on, and always by the pass that fails it at its progress deadline.
const SETTLING: Duration = Duration::from_secs(5);

/// Whether this pass reads the Pods of unhealthy workloads: when one has failed, or when
/// `revision` (the one applied) has been applying or progressing for [`SETTLING`] or longer at
/// `now`.
pub fn worth_explaining(
    revision: Option<&crate::api::RevisionStatus>,
    assessed: &[(String, health::Health)],
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> bool {
    if assessed
        .iter()
        .any(|(_, h)| h.state == health::HealthState::Failed)
    {
        return true;
    }
    match revision.and_then(|r| r.applied_at.as_ref()) {
        Some(started) => now.0.duration_since(started.0).as_secs_f64() >= SETTLING.as_secs_f64(),
        None => true,
    }
}

/// Adds the Pods' problems to the messages of the unhealthy workloads in `assessed` (as
/// [`super::health_checks::assess_objects`] lists `applied`), for as many as a health message
/// names.
pub async fn explain(
    client: &Client,
    applied: &[Applied],
    assessed: &mut [(String, health::Health)],
) {
    let mut explained = 0;
    for (object, (_, health)) in assessed_objects(applied).zip(assessed.iter_mut()) {
        if health.is_healthy() {
            continue;
        }
        explained += 1;
        if explained > SUMMARIZED {
            break;
        }
        let (Some(live), Some(namespace)) = (&object.live, &object.key.namespace) else {
            continue;
        };
        let Some(selector) = pods::pod_selector(live) else {
            continue;
        };
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let params = ListParams::default().labels(&selector).limit(PODS_LISTED);
        match api.list(&params).await {
            Ok(list) => {
                let pods: Vec<serde_json::Value> = list
                    .items
                    .iter()
                    .filter_map(|pod| serde_json::to_value(pod).ok())
                    .collect();
                *health = pods::with_pod_problems(health.clone(), &pods);
            }
            Err(error) => {
                tracing::debug!(object = %object.key, %error, "listing the workload's Pods failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::BundleDeploymentStatus;

    /// A status whose active revision 1 began applying `ago` seconds ago.
    fn status(ago: i64) -> BundleDeploymentStatus {
        let at = k8s_openapi::jiff::Timestamp::now()
            .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(ago))
            .unwrap();
        serde_json::from_value(serde_json::json!({
            "activeRevision": 1,
            "revisions": [{"number": 1, "generation": 1, "digest": "sha256:00", "sources": [],
                           "phase": "Progressing", "appliedAt": at.to_string(), "objects": 1}]
        }))
        .unwrap()
    }

    #[test]
    fn pods_are_read_once_a_revision_settles_or_a_workload_fails() {
        let progressing = vec![(
            "Deployment a/web".to_string(),
            health::Health {
                state: health::HealthState::InProgress,
                message: "0 of 1".into(),
            },
        )];
        let failed = vec![(
            "Deployment a/web".to_string(),
            health::Health {
                state: health::HealthState::Failed,
                message: "stalled".into(),
            },
        )];
        let now = crate::reconcile::view::wall_clock();
        let revision = |status: &BundleDeploymentStatus| status.revisions.first().cloned();
        assert!(!worth_explaining(
            revision(&status(1)).as_ref(),
            &progressing,
            &now
        ));
        assert!(worth_explaining(
            revision(&status(1)).as_ref(),
            &failed,
            &now
        ));
        assert!(worth_explaining(
            revision(&status(30)).as_ref(),
            &progressing,
            &now
        ));
        assert!(worth_explaining(
            revision(&BundleDeploymentStatus::default()).as_ref(),
            &progressing,
            &now
        ));
    }
}
