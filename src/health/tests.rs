//! Table-driven tests of the health rules: each case is an object as the API server would return
//! it, the state expected and a part of the message.

use super::*;
use serde_json::json;
use HealthState::*;

/// (case name, object, expected state, expected message fragment)
type Case = (&'static str, Value, HealthState, &'static str);

fn check(cases: Vec<Case>, options: &HealthOptions) {
    let mut failures = Vec::new();
    for (name, object, state, fragment) in cases {
        let health = assess(&object, options);
        if health.state != state || !health.message.contains(fragment) {
            failures.push(format!(
                "{name}: got {:?} {:?}, want {state:?} containing {fragment:?}",
                health.state, health.message
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

fn deploy(spec: Value, status: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "ns", "generation": 2},
           "spec": spec, "status": status})
}

#[test]
fn generic_checks_come_first() {
    check(
        vec![
            (
                "deletion timestamp, even on a ConfigMap",
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "c", "deletionTimestamp": "2026-01-01T00:00:00Z",
                                    "finalizers": ["example.com/keep"]}}),
                Terminating,
                "waiting for finalizers example.com/keep",
            ),
            (
                "generation not observed yet",
                json!({"apiVersion": "example.com/v1", "kind": "Widget",
                       "metadata": {"name": "w", "generation": 5},
                       "status": {"observedGeneration": 4,
                                  "conditions": [{"type": "Ready", "status": "True"}]}}),
                InProgress,
                "waiting for the controller to observe generation 5 (observed 4)",
            ),
            (
                "Stalled=True",
                json!({"apiVersion": "example.com/v1", "kind": "Widget",
                       "metadata": {"name": "w", "generation": 1},
                       "status": {"observedGeneration": 1, "conditions": [
                           {"type": "Stalled", "status": "True", "reason": "BadConfig", "message": "no such port"},
                           {"type": "Ready", "status": "True"}]}}),
                Failed,
                "Stalled: BadConfig: no such port",
            ),
            (
                "Reconciling=True",
                json!({"apiVersion": "example.com/v1", "kind": "Widget",
                       "metadata": {"name": "w"},
                       "status": {"conditions": [
                           {"type": "Reconciling", "status": "True", "reason": "Progressing"},
                           {"type": "Ready", "status": "True"}]}}),
                InProgress,
                "Reconciling: Progressing",
            ),
            (
                "Stalled=False and Reconciling=False fall through to Ready",
                json!({"apiVersion": "example.com/v1", "kind": "Widget",
                       "metadata": {"name": "w"},
                       "status": {"conditions": [
                           {"type": "Stalled", "status": "False"},
                           {"type": "Reconciling", "status": "False"},
                           {"type": "Ready", "status": "True"}]}}),
                Current,
                "Ready",
            ),
            (
                "Ready=False",
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
                       "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Waiting", "message": "db down"}]}}),
                InProgress,
                "not Ready: Waiting: db down",
            ),
            (
                "Ready=Unknown",
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
                       "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}),
                InProgress,
                "not Ready",
            ),
            (
                "no rule, no conditions",
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
                Current,
                "no health rule",
            ),
            (
                "a Deployment kind of another group is not apps/Deployment",
                json!({"apiVersion": "example.com/v1", "kind": "Deployment", "metadata": {"name": "w"},
                       "spec": {"replicas": 3}}),
                Current,
                "no health rule",
            ),
        ],
        &HealthOptions::default(),
    );
}

#[test]
fn deployment() {
    let available = json!([{"type": "Available", "status": "True"},
                           {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]);
    check(
        vec![
            (
                "no status yet",
                deploy(json!({"replicas": 2}), json!(null)),
                InProgress,
                "waiting for the controller to observe generation 2",
            ),
            (
                "paused",
                deploy(
                    json!({"replicas": 2, "paused": true}),
                    json!({"observedGeneration": 2}),
                ),
                Suspended,
                "paused",
            ),
            (
                "progress deadline exceeded",
                deploy(
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 1,
                    "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                                    "message": "ReplicaSet \"web-1\" has timed out progressing."}]}),
                ),
                Failed,
                "progress deadline exceeded: ReplicaSet \"web-1\" has timed out progressing.",
            ),
            (
                "replica failure",
                deploy(
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 2,
                    "conditions": [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": "quota"}]}),
                ),
                Failed,
                "replica failure: FailedCreate: quota",
            ),
            (
                "not all updated",
                deploy(
                    json!({"replicas": 3}),
                    json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1,
                    "availableReplicas": 3, "conditions": available}),
                ),
                InProgress,
                "1 of 3 replicas updated",
            ),
            (
                "replicas default to 1",
                deploy(json!({}), json!({"observedGeneration": 2})),
                InProgress,
                "0 of 1 replicas updated",
            ),
            (
                "old replicas still there",
                deploy(
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 2,
                    "availableReplicas": 2, "conditions": available}),
                ),
                InProgress,
                "1 old replicas pending termination",
            ),
            (
                "updated but not available",
                deploy(
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
                    "conditions": available}),
                ),
                InProgress,
                "0 of 2 updated replicas available",
            ),
            (
                "numbers fine but Available=False",
                deploy(
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
                    "availableReplicas": 2, "conditions": [{"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"}]}),
                ),
                InProgress,
                "not Available: MinimumReplicasUnavailable",
            ),
            (
                "available",
                deploy(
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
                    "availableReplicas": 2, "readyReplicas": 2, "conditions": available}),
                ),
                Current,
                "2 of 2 replicas available",
            ),
            (
                "scaled to zero",
                deploy(
                    json!({"replicas": 0}),
                    json!({"observedGeneration": 2, "conditions": available}),
                ),
                Current,
                "0 of 0 replicas available",
            ),
        ],
        &HealthOptions::default(),
    );
}

fn sts(spec: Value, status: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": "db", "namespace": "ns", "generation": 1},
           "spec": spec, "status": status})
}

#[test]
fn stateful_set() {
    check(
        vec![
            (
                "no status",
                sts(json!({"replicas": 3}), json!({})),
                InProgress,
                "observe generation 1",
            ),
            (
                "OnDelete",
                sts(
                    json!({"replicas": 3, "updateStrategy": {"type": "OnDelete"}}),
                    json!({"observedGeneration": 1}),
                ),
                Current,
                "OnDelete",
            ),
            (
                "not ready",
                sts(
                    json!({"replicas": 3}),
                    json!({"observedGeneration": 1, "replicas": 3, "readyReplicas": 1,
                    "currentRevision": "db-1", "updateRevision": "db-1"}),
                ),
                InProgress,
                "1 of 3 replicas ready",
            ),
            (
                "ready but rolling out",
                sts(
                    json!({"replicas": 3}),
                    json!({"observedGeneration": 1, "replicas": 3, "readyReplicas": 3,
                    "updatedReplicas": 1, "currentRevision": "db-1", "updateRevision": "db-2"}),
                ),
                InProgress,
                "rolling out revision db-2 (1 of 3 replicas updated)",
            ),
            (
                "partition not reached",
                sts(
                    json!({"replicas": 5, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 3}}}),
                    json!({"observedGeneration": 1, "replicas": 5, "readyReplicas": 5, "updatedReplicas": 1,
                           "currentRevision": "db-1", "updateRevision": "db-2"}),
                ),
                InProgress,
                "1 of 2 replicas updated (partition 3)",
            ),
            (
                "partition reached: revisions may differ",
                sts(
                    json!({"replicas": 5, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 3}}}),
                    json!({"observedGeneration": 1, "replicas": 5, "readyReplicas": 5, "updatedReplicas": 2,
                           "currentRevision": "db-1", "updateRevision": "db-2"}),
                ),
                Current,
                "5 of 5 replicas ready",
            ),
            (
                "scaling down",
                sts(
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 1, "replicas": 3, "readyReplicas": 3,
                    "currentRevision": "db-1", "updateRevision": "db-1"}),
                ),
                InProgress,
                "1 replicas pending termination",
            ),
            (
                "done",
                sts(
                    json!({"replicas": 3}),
                    json!({"observedGeneration": 1, "replicas": 3, "readyReplicas": 3,
                    "updatedReplicas": 3, "currentRevision": "db-2", "updateRevision": "db-2"}),
                ),
                Current,
                "3 of 3 replicas ready",
            ),
        ],
        &HealthOptions::default(),
    );
}

fn ds(spec: Value, status: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
           "metadata": {"name": "agent", "namespace": "ns", "generation": 3},
           "spec": spec, "status": status})
}

#[test]
fn daemon_set() {
    let full = |updated: i64, available: i64, ready: i64| {
        json!({"observedGeneration": 3, "desiredNumberScheduled": 4, "currentNumberScheduled": 4,
               "updatedNumberScheduled": updated, "numberAvailable": available, "numberReady": ready})
    };
    check(
        vec![
            (
                "no status",
                ds(json!({}), json!({})),
                InProgress,
                "observe generation 3",
            ),
            (
                "OnDelete",
                ds(
                    json!({"updateStrategy": {"type": "OnDelete"}}),
                    full(0, 0, 0),
                ),
                Current,
                "OnDelete",
            ),
            (
                "not updated",
                ds(json!({}), full(2, 4, 4)),
                InProgress,
                "2 of 4 pods updated",
            ),
            (
                "not available",
                ds(json!({}), full(4, 3, 4)),
                InProgress,
                "3 of 4 pods available",
            ),
            (
                "not ready",
                ds(json!({}), full(4, 4, 1)),
                InProgress,
                "1 of 4 pods ready",
            ),
            (
                "done",
                ds(json!({}), full(4, 4, 4)),
                Current,
                "4 of 4 pods available",
            ),
            (
                "no nodes",
                ds(
                    json!({}),
                    json!({"observedGeneration": 3, "desiredNumberScheduled": 0}),
                ),
                Current,
                "0 of 0",
            ),
        ],
        &HealthOptions::default(),
    );
}

#[test]
fn replica_set_and_pdb() {
    let rs = |status: Value| {
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
               "metadata": {"name": "web-1", "generation": 1}, "spec": {"replicas": 2}, "status": status})
    };
    let pdb = |status: Value| {
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": "web", "generation": 2}, "spec": {"minAvailable": 1}, "status": status})
    };
    check(
        vec![
            (
                "rs no status",
                rs(json!({})),
                InProgress,
                "observe generation 1",
            ),
            (
                "rs replica failure",
                rs(
                    json!({"observedGeneration": 1, "conditions": [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate"}]}),
                ),
                Failed,
                "replica failure: FailedCreate",
            ),
            (
                "rs short",
                rs(json!({"observedGeneration": 1, "availableReplicas": 1})),
                InProgress,
                "1 of 2 replicas available",
            ),
            (
                "rs done",
                rs(json!({"observedGeneration": 1, "availableReplicas": 2})),
                Current,
                "2 of 2",
            ),
            (
                "pdb not observed",
                pdb(json!({})),
                InProgress,
                "observe generation 2",
            ),
            (
                "pdb stale",
                pdb(json!({"observedGeneration": 1})),
                InProgress,
                "generation 2 (observed 1)",
            ),
            (
                "pdb observed",
                pdb(json!({"observedGeneration": 2, "currentHealthy": 0, "desiredHealthy": 1})),
                Current,
                "observed (0 healthy pods, 1 desired)",
            ),
        ],
        &HealthOptions::default(),
    );
}

fn pod_with(status: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "status": status})
}

fn waiting(reason: &str) -> Value {
    pod_with(json!({"phase": "Pending", "containerStatuses": [
        {"name": "app", "ready": false, "state": {"waiting": {"reason": reason, "message": "details"}}}]}))
}

#[test]
fn pod() {
    check(
        vec![
            (
                "succeeded",
                pod_with(json!({"phase": "Succeeded"})),
                Current,
                "succeeded",
            ),
            (
                "failed",
                pod_with(json!({"phase": "Failed", "reason": "Evicted", "message": "low memory"})),
                Failed,
                "failed: Evicted: low memory",
            ),
            (
                "crash loop",
                waiting("CrashLoopBackOff"),
                Failed,
                "container app: CrashLoopBackOff: details",
            ),
            (
                "image pull back-off",
                waiting("ImagePullBackOff"),
                Failed,
                "ImagePullBackOff",
            ),
            (
                "err image pull",
                waiting("ErrImagePull"),
                Failed,
                "ErrImagePull",
            ),
            (
                "config error",
                waiting("CreateContainerConfigError"),
                Failed,
                "CreateContainerConfigError",
            ),
            (
                "creating is not a failure",
                waiting("ContainerCreating"),
                InProgress,
                "pending",
            ),
            (
                "init container crash",
                pod_with(json!({"phase": "Pending", "initContainerStatuses": [
                    {"name": "init", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]})),
                Failed,
                "container init: CrashLoopBackOff",
            ),
            (
                "running and ready",
                pod_with(
                    json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
                ),
                Current,
                "running and ready",
            ),
            (
                "running, not ready",
                pod_with(
                    json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}]}),
                ),
                InProgress,
                "running, not ready: ContainersNotReady",
            ),
            (
                "unschedulable",
                pod_with(
                    json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                    "reason": "Unschedulable", "message": "0/1 nodes are available"}]}),
                ),
                InProgress,
                "pending, not scheduled: Unschedulable: 0/1 nodes are available",
            ),
            (
                "no status yet",
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
                InProgress,
                "pending",
            ),
        ],
        &HealthOptions::default(),
    );
}

fn job_with(spec: Value, status: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate"}, "spec": spec, "status": status})
}

#[test]
fn job_and_cron_job() {
    check(
        vec![
            (
                "complete",
                job_with(
                    json!({}),
                    json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}),
                ),
                Current,
                "complete, 1 succeeded",
            ),
            (
                "failed",
                job_with(
                    json!({}),
                    json!({"failed": 6, "conditions": [{"type": "Failed", "status": "True",
                    "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}),
                ),
                Failed,
                "failed: BackoffLimitExceeded: Job has reached the specified backoff limit",
            ),
            (
                "failure target",
                job_with(
                    json!({}),
                    json!({"conditions": [{"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded"}]}),
                ),
                Failed,
                "DeadlineExceeded",
            ),
            (
                "suspended",
                job_with(json!({"suspend": true}), json!({})),
                Suspended,
                "suspended",
            ),
            (
                "running",
                job_with(
                    json!({"completions": 3}),
                    json!({"active": 2, "succeeded": 1}),
                ),
                InProgress,
                "running: 2 active, 1 of 3 succeeded",
            ),
            (
                "just created",
                job_with(json!({}), json!(null)),
                InProgress,
                "0 active, 0 succeeded",
            ),
            (
                "cron job",
                json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"}, "spec": {"schedule": "* * * * *"}}),
                Current,
                "exists",
            ),
            (
                "suspended cron job is still current",
                json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"}, "spec": {"suspend": true}}),
                Current,
                "suspended",
            ),
        ],
        &HealthOptions::default(),
    );
}

#[test]
fn service_and_ingress() {
    let svc = |type_: &str, status: Value| json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"type": type_}, "status": status});
    check(
        vec![
            (
                "cluster ip",
                svc("ClusterIP", json!({})),
                Current,
                "ClusterIP",
            ),
            (
                "lb waiting",
                svc("LoadBalancer", json!({"loadBalancer": {}})),
                InProgress,
                "waiting for a load balancer address",
            ),
            (
                "lb with ip",
                svc(
                    "LoadBalancer",
                    json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.7"}]}}),
                ),
                Current,
                "load balancer at 10.0.0.7",
            ),
            (
                "lb with hostname",
                svc(
                    "LoadBalancer",
                    json!({"loadBalancer": {"ingress": [{"hostname": "lb.example"}]}}),
                ),
                Current,
                "lb.example",
            ),
            (
                "ingress is healthy by default",
                json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "i"}, "status": {}}),
                Current,
                "exists",
            ),
        ],
        &HealthOptions::default(),
    );
    check(
        vec![(
            "lb without address when not required",
            svc("LoadBalancer", json!({})),
            Current,
            "LoadBalancer",
        )],
        &HealthOptions {
            load_balancer_needs_ingress: false,
        },
    );
    assert!(HealthOptions::default().load_balancer_needs_ingress);
}

#[test]
fn persistent_volume_claim() {
    let pvc = |annotations: Value, spec: Value, phase: &str| {
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": "data", "annotations": annotations}, "spec": spec, "status": {"phase": phase}})
    };
    check(
        vec![
            (
                "bound",
                pvc(json!({}), json!({"volumeName": "pv-1"}), "Bound"),
                Current,
                "Bound",
            ),
            (
                "lost",
                pvc(json!({}), json!({"volumeName": "pv-1"}), "Lost"),
                Failed,
                "Lost",
            ),
            (
                "pending, provisioning",
                pvc(
                    json!({"volume.kubernetes.io/storage-provisioner": "csi.example"}),
                    json!({}),
                    "Pending",
                ),
                InProgress,
                "being provisioned or bound",
            ),
            (
                "pending, node selected",
                pvc(
                    json!({"volume.kubernetes.io/selected-node": "n1"}),
                    json!({}),
                    "Pending",
                ),
                InProgress,
                "being provisioned or bound",
            ),
            (
                "pending, waiting for first consumer: not blocking",
                pvc(json!({}), json!({"storageClassName": "local"}), "Pending"),
                Current,
                "waiting for a first consumer",
            ),
        ],
        &HealthOptions::default(),
    );
}

#[test]
fn crd_and_api_service() {
    let crd = |conditions: Value| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "widgets.example.com", "generation": 1}, "status": {"conditions": conditions}})
    };
    let api = |conditions: Value| {
        json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
               "metadata": {"name": "v1beta1.metrics.k8s.io"}, "status": {"conditions": conditions}})
    };
    check(
        vec![
            (
                "established",
                crd(
                    json!([{"type": "NamesAccepted", "status": "True"}, {"type": "Established", "status": "True"}]),
                ),
                Current,
                "Established",
            ),
            (
                "names not accepted",
                crd(
                    json!([{"type": "NamesAccepted", "status": "False", "reason": "ListKindConflict", "message": "\"WidgetList\" is already in use"},
                           {"type": "Established", "status": "False"}]),
                ),
                Failed,
                "names not accepted: ListKindConflict",
            ),
            (
                "non-structural",
                crd(
                    json!([{"type": "NonStructuralSchema", "status": "True", "reason": "Violations"}, {"type": "Established", "status": "True"}]),
                ),
                Failed,
                "non-structural schema: Violations",
            ),
            (
                "not established",
                crd(json!([{"type": "Established", "status": "False", "reason": "Installing"}])),
                InProgress,
                "not Established yet: Installing",
            ),
            (
                "no conditions",
                crd(json!([])),
                InProgress,
                "not Established yet",
            ),
            (
                "api available",
                api(json!([{"type": "Available", "status": "True"}])),
                Current,
                "Available",
            ),
            (
                "api unavailable",
                api(
                    json!([{"type": "Available", "status": "False", "reason": "MissingEndpoints"}]),
                ),
                InProgress,
                "not Available: MissingEndpoints",
            ),
        ],
        &HealthOptions::default(),
    );
}

#[test]
fn kinds_without_status_are_current() {
    let cases = [
        ("v1", "ConfigMap"),
        ("v1", "Secret"),
        ("v1", "Namespace"),
        ("v1", "ServiceAccount"),
        ("rbac.authorization.k8s.io/v1", "Role"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ];
    check(
        cases
            .iter()
            .map(|(api_version, kind)| {
                (
                    *kind,
                    // A Ready=False condition would make an unknown kind InProgress: these kinds
                    // have a rule of their own.
                    json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"},
                           "status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
                    Current,
                    "exists",
                )
            })
            .collect(),
        &HealthOptions::default(),
    );
}

fn bd(metadata: Value, spec: Value, status: Value) -> Value {
    let mut metadata = metadata;
    metadata["name"] = json!("child");
    json!({"apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
           "metadata": metadata, "spec": spec, "status": status})
}

#[test]
fn bundle_deployment_applied_by_a_root() {
    let ready = |status: &str, reason: &str| json!({"type": "Ready", "status": status, "reason": reason, "message": "m"});
    check(
        vec![
            (
                "just created: no agent has written its status",
                bd(json!({"generation": 1}), json!({}), Value::Null),
                InProgress,
                "waiting for the controller to observe generation 1",
            ),
            (
                "Ready at its generation",
                bd(
                    json!({"generation": 2}),
                    json!({}),
                    json!({"observedGeneration": 2, "conditions": [ready("True", "Healthy")]}),
                ),
                Current,
                "Ready",
            ),
            (
                "not Ready: rolled back",
                bd(
                    json!({"generation": 2}),
                    json!({}),
                    json!({"observedGeneration": 2, "conditions": [ready("False", "RolledBack")]}),
                ),
                InProgress,
                "not Ready: RolledBack",
            ),
            (
                "Ready, but for an older generation",
                bd(
                    json!({"generation": 3}),
                    json!({}),
                    json!({"observedGeneration": 2, "conditions": [ready("True", "Healthy")]}),
                ),
                InProgress,
                "observe generation 3",
            ),
            (
                "observed, no Ready condition yet",
                bd(
                    json!({"generation": 1}),
                    json!({}),
                    json!({"observedGeneration": 1}),
                ),
                InProgress,
                "no Ready condition yet",
            ),
            (
                "paused for a hotfix, though Reconciling says Paused",
                bd(
                    json!({"generation": 2, "annotations": {"pallet.dev/paused-reason": "INC-42"}}),
                    json!({"paused": true}),
                    json!({"observedGeneration": 2, "conditions": [
                       ready("False", "Paused"),
                       {"type": "Reconciling", "status": "True", "reason": "Paused"}]}),
                ),
                Suspended,
                "paused (spec.paused): INC-42",
            ),
            (
                "paused and being deleted",
                bd(
                    json!({"generation": 2, "deletionTimestamp": "2026-01-01T00:00:00Z",
                          "finalizers": ["pallet.dev/cleanup"]}),
                    json!({"paused": true}),
                    json!({"observedGeneration": 2}),
                ),
                Terminating,
                "being deleted",
            ),
        ],
        &HealthOptions::default(),
    );
}

#[test]
fn healthy_means_current_or_suspended() {
    let h = |state| Health::new(state, "");
    assert!(h(Current).is_healthy());
    assert!(h(Suspended).is_healthy());
    assert!(!h(InProgress).is_healthy());
    assert!(!h(Failed).is_healthy());
    assert!(!h(Terminating).is_healthy());
}

#[test]
fn summaries_list_the_first_few() {
    let items: Vec<(String, Health)> = vec![
        (
            "Deployment ns/web".into(),
            Health::in_progress("0 of 2 replicas available"),
        ),
        (
            "Job ns/migrate".into(),
            Health::failed("failed: BackoffLimitExceeded"),
        ),
        ("Pod ns/p".into(), Health::in_progress("pending")),
        (
            "Service ns/lb".into(),
            Health::in_progress("waiting for a load balancer address"),
        ),
    ];
    assert_eq!(
        summarize(&items, 2),
        "Deployment ns/web: 0 of 2 replicas available; Job ns/migrate: failed: BackoffLimitExceeded; and 2 more"
    );
    assert_eq!(
        summarize(&items[..1], 3),
        "Deployment ns/web: 0 of 2 replicas available"
    );
    assert_eq!(summarize(&items, 4).matches("; ").count(), 3);
    assert_eq!(summarize(&items, 0), "4 objects");
    assert_eq!(summarize(&[], 3), "");
}
