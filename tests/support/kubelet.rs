//! A stand-in for the kubelet, for tests whose workloads must become available.
//!
//! The local control plane runs no scheduler and no kubelet, so Pods stay Pending forever. This
//! task does what a kubelet would report through the Pod status subresource: Pods whose every
//! container image is on the allowed list become Running and Ready; the others get a container
//! waiting in CrashLoopBackOff. The ReplicaSet and Deployment controllers of the real
//! kube-controller-manager then compute the workload status from those Pods, as in a cluster.
//! Used with `#[path = "support/kubelet.rs"] mod kubelet;`.

#![allow(dead_code)] // each test binary uses a different part of this module

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::Client;
use serde_json::json;

/// Reports Pod status in one namespace until dropped.
pub struct FakeKubelet {
    allowed: Arc<Mutex<HashSet<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeKubelet {
    /// Starts reporting for Pods in `namespace`; images in `allowed` run and become Ready
    /// (`"*"` allows every image).
    pub fn start(client: &Client, namespace: &str, allowed: &[&str]) -> FakeKubelet {
        let allowed = Arc::new(Mutex::new(
            allowed
                .iter()
                .map(|s| s.to_string())
                .collect::<HashSet<_>>(),
        ));
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let images = allowed.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Ok(list) = pods.list(&ListParams::default()).await {
                    for pod in list.items {
                        report(&pods, &pod, &images).await;
                    }
                }
                // A kubelet's status loop, not a test synchronization: tests poll for outcomes.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        FakeKubelet { allowed, task }
    }

    /// From now on Pods running `image` become Ready (the fix for a broken release).
    pub fn allow(&self, image: &str) {
        self.allowed.lock().unwrap().insert(image.to_string());
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn report(pods: &Api<Pod>, pod: &Pod, allowed: &Mutex<HashSet<String>>) {
    let Some(spec) = &pod.spec else { return };
    if pod.metadata.deletion_timestamp.is_some() {
        return;
    }
    let runs = {
        let allowed = allowed.lock().unwrap();
        spec.containers.iter().all(|c| {
            allowed.contains("*") || c.image.as_deref().is_some_and(|i| allowed.contains(i))
        })
    };
    let ready_now = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let crashing_now = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|c| !c.is_empty());
    if (runs && ready_now) || (!runs && crashing_now && !ready_now) {
        return; // already reported
    }
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let containers: Vec<serde_json::Value> = spec
        .containers
        .iter()
        .map(|c| {
            let state = if runs {
                json!({"running": {"startedAt": now}})
            } else {
                json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off restarting failed container"}})
            };
            json!({
                "name": c.name, "image": c.image, "imageID": "", "ready": runs,
                "started": runs, "restartCount": if runs { 0 } else { 3 }, "state": state,
            })
        })
        .collect();
    let ready = if runs { "True" } else { "False" };
    let status = json!({"status": {
        "phase": "Running",
        "startTime": now,
        "podIP": "10.0.0.1",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": ready, "lastTransitionTime": now},
            {"type": "Ready", "status": ready, "lastTransitionTime": now},
        ],
        "containerStatuses": containers,
    }});
    let name = pod.metadata.name.clone().unwrap_or_default();
    let _ = pods
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await;
}
