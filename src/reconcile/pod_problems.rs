//! The Pods behind an unhealthy workload: listed only for the first few unhealthy workloads
//! of a revision, so their problems (CrashLoopBackOff and the last exit, an image that cannot
//! be pulled, OOMKilled, Unschedulable) reach the health message, the rollback condition, the
//! revision history and notifications. Reading them never fails a pass: a list that fails
//! leaves the message as the controller's counters said it.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::Client;

use crate::apply::Applied;
use crate::health::{self, pods};

use super::health_checks::{assessed_objects, SUMMARIZED};

/// Pods read per workload: enough to find the ones in trouble.
const PODS_LISTED: u32 = 100;

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
