//! Health of live objects, per kind, kstatus-style (pure: it reads an object's JSON, nothing
//! else). The rules are those of `design/health-rules.md`, what kstatus, Argo CD and kapp agree
//! on.
//!
//! [`assess`] applies, in order:
//!
//! 1. **Generic checks**: `metadata.deletionTimestamp` set → [`HealthState::Terminating`];
//!    `status.observedGeneration` present and different from `metadata.generation` →
//!    [`HealthState::InProgress`] ("waiting for the controller to observe generation N");
//!    condition `Stalled=True` → [`HealthState::Failed`]; `Reconciling=True` → InProgress.
//! 2. **The kind's rule** (matched on API group and kind, so a custom `Deployment` kind in another
//!    group is not mistaken for `apps/Deployment`): CustomResourceDefinition, Deployment,
//!    StatefulSet, DaemonSet, ReplicaSet, Pod, Job, CronJob, Service, Ingress,
//!    PersistentVolumeClaim, APIService, PodDisruptionBudget, BundleDeployment (one a GitOps
//!    root applies: Ready at its current generation once an agent has written its status), and
//!    the kinds without status
//!    (ConfigMap, Secret, Namespace, ServiceAccount, RBAC), which are always Current. Kinds
//!    whose controller writes `status.observedGeneration` (Deployment, StatefulSet, DaemonSet,
//!    ReplicaSet, PodDisruptionBudget) are InProgress until it is there: an object the
//!    controller has not seen yet is not Current.
//! 3. Else the **`Ready` condition**: True → Current, False or Unknown → InProgress.
//! 4. Else **Current**: an object of a kind without a rule and without a Ready condition is
//!    healthy once it exists.
//!
//! Decisions:
//! - [`Health::is_healthy`] is true for Current **and Suspended**: a paused Deployment or a
//!   suspended Job was shipped that way on purpose, and waiting for it would only run into the
//!   progress deadline and roll back a revision that does what its author asked.
//! - A paused BundleDeployment is Suspended, as a paused Deployment, before the generic checks
//!   (its `Reconciling=True`, reason `Paused`, would make it InProgress): a root that applies it
//!   must not wait for, or roll back over, a bundle someone paused for a hotfix.
//! - [`HealthOptions::default`] requires a LoadBalancer Service to have an ingress address (as
//!   Argo CD does); clusters without a load-balancer controller turn it off.
//! - A Pending PVC that no provisioner has taken and no node has been selected for (the
//!   `WaitForFirstConsumer` case: the PV controller waits for a Pod to use it) is Current, so a
//!   bundle does not block on a claim that only binds once its consumer is scheduled. Once a
//!   node is selected, a provisioner named, or a volume named, Pending is InProgress.
//! - Failed from a Pod's container state (`CrashLoopBackOff`, `ImagePullBackOff`, `ErrImagePull`,
//!   `CreateContainerConfigError`, …) may pass on its own; callers that wait for a deadline
//!   decide whether Failed ends the wait early.
//! - Messages say why, with the numbers, and do not repeat the kind or name (the caller knows
//!   which object it asked about; [`summarize`] prefixes them).

use serde_json::Value;

pub mod cel;
pub mod pods;
pub mod probe;

pub use self::cel::{CelChecks, CheckError};

/// Where an object stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthState {
    /// Reconciled and healthy.
    Current,
    /// Not there yet; may get there without a change.
    InProgress,
    /// Will not get there without a change (degraded).
    Failed,
    /// Being deleted.
    Terminating,
    /// Deliberately stopped (paused Deployment, suspended Job).
    Suspended,
}

/// An object's health and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    /// The state.
    pub state: HealthState,
    /// Why, short, with the numbers (e.g. "1 of 3 updated replicas available").
    pub message: String,
}

impl Health {
    /// True when a revision need not wait for this object: Current or Suspended.
    pub fn is_healthy(&self) -> bool {
        matches!(self.state, HealthState::Current | HealthState::Suspended)
    }

    fn new(state: HealthState, message: impl Into<String>) -> Health {
        Health {
            state,
            message: message.into(),
        }
    }

    fn current(message: impl Into<String>) -> Health {
        Health::new(HealthState::Current, message)
    }

    fn in_progress(message: impl Into<String>) -> Health {
        Health::new(HealthState::InProgress, message)
    }

    fn failed(message: impl Into<String>) -> Health {
        Health::new(HealthState::Failed, message)
    }
}

/// Knobs of the rules.
#[derive(Clone, Debug)]
pub struct HealthOptions {
    /// A `type: LoadBalancer` Service is InProgress until it has an ingress address.
    pub load_balancer_needs_ingress: bool,
}

impl Default for HealthOptions {
    /// Load balancers must have an address.
    fn default() -> Self {
        HealthOptions {
            load_balancer_needs_ingress: true,
        }
    }
}

/// The health of `object` (a live object as JSON).
pub fn assess(object: &Value, options: &HealthOptions) -> Health {
    if let Some(health) = paused_bundle_deployment(object) {
        return health;
    }
    if let Some(health) = generic(object) {
        return health;
    }
    if let Some(health) = kind_rule(object, options) {
        return health;
    }
    match condition(object, "Ready") {
        Some(c) if c.is_true() => Health::current("Ready"),
        Some(c) => Health::in_progress(format!("not Ready{}", c.why())),
        None => Health::current("exists (no health rule and no Ready condition)"),
    }
}

/// "Deployment ns/web: 0 of 2 replicas available; Job ns/x: …; and 3 more": the first `limit`
/// of `unhealthy` (an object reference and its health) and how many more there are.
pub fn summarize(unhealthy: &[(String, Health)], limit: usize) -> String {
    let mut parts: Vec<String> = unhealthy
        .iter()
        .take(limit)
        .map(|(object, health)| format!("{object}: {}", health.message))
        .collect();
    let more = unhealthy.len().saturating_sub(limit);
    if more > 0 {
        parts.push(if parts.is_empty() {
            format!("{more} objects")
        } else {
            format!("and {more} more")
        });
    }
    parts.join("; ")
}

fn generic(object: &Value) -> Option<Health> {
    let metadata = &object["metadata"];
    if !metadata["deletionTimestamp"].is_null() {
        let finalizers: Vec<&str> = metadata["finalizers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let message = if finalizers.is_empty() {
            "being deleted".to_string()
        } else {
            format!(
                "being deleted, waiting for finalizers {}",
                finalizers.join(", ")
            )
        };
        return Some(Health::new(HealthState::Terminating, message));
    }
    if let (Some(generation), Some(observed)) = (
        metadata["generation"].as_i64(),
        object["status"]["observedGeneration"].as_i64(),
    ) {
        if generation != observed {
            return Some(Health::in_progress(format!(
                "waiting for the controller to observe generation {generation} (observed {observed})"
            )));
        }
    }
    if let Some(c) = condition(object, "Stalled").filter(Condition::is_true) {
        return Some(Health::failed(format!("Stalled{}", c.why())));
    }
    if let Some(c) = condition(object, "Reconciling").filter(Condition::is_true) {
        return Some(Health::in_progress(format!("Reconciling{}", c.why())));
    }
    None
}

fn kind_rule(object: &Value, options: &HealthOptions) -> Option<Health> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    // "apps/v1" -> "apps"; "v1" -> "" (the core group).
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let kind = object["kind"].as_str().unwrap_or_default();
    Some(match (group, kind) {
        ("apiextensions.k8s.io", "CustomResourceDefinition") => crd(object),
        ("apps", "Deployment") => deployment(object),
        ("apps", "StatefulSet") => stateful_set(object),
        ("apps", "DaemonSet") => daemon_set(object),
        ("apps", "ReplicaSet") => replica_set(object),
        ("", "Pod") => pod(object),
        ("batch", "Job") => job(object),
        ("batch", "CronJob") => cron_job(object),
        ("", "Service") => service(object, options),
        ("networking.k8s.io", "Ingress") => Health::current("exists"),
        ("", "PersistentVolumeClaim") => pvc(object),
        ("apiregistration.k8s.io", "APIService") => api_service(object),
        ("policy", "PodDisruptionBudget") => pdb(object),
        ("pallet.dev", "BundleDeployment") => bundle_deployment(object),
        ("", "ConfigMap" | "Secret" | "Namespace" | "ServiceAccount")
        | (
            "rbac.authorization.k8s.io",
            "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding",
        ) => Health::current("exists"),
        _ => return None,
    })
}

/// A BundleDeployment that is paused and not being deleted: Suspended, with the pause's reason.
fn paused_bundle_deployment(object: &Value) -> Option<Health> {
    let is_bundle_deployment = object["kind"].as_str() == Some("BundleDeployment")
        && object["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("pallet.dev/"));
    if !is_bundle_deployment
        || object["spec"]["paused"].as_bool() != Some(true)
        || !object["metadata"]["deletionTimestamp"].is_null()
    {
        return None;
    }
    // The annotation `pallet pause --reason` writes (this module reads JSON only, no agent code).
    let reason = object["metadata"]["annotations"]["pallet.dev/paused-reason"]
        .as_str()
        .unwrap_or_default();
    Some(Health::new(
        HealthState::Suspended,
        format!("paused (spec.paused){}", why("", reason)),
    ))
}

/// A BundleDeployment (applied by another one): InProgress until an agent has written its
/// status, then its Ready condition (the generic checks handle a stale generation, Stalled and
/// Reconciling).
fn bundle_deployment(object: &Value) -> Health {
    if let Some(health) = not_observed(object) {
        return health;
    }
    match condition(object, "Ready") {
        Some(c) if c.is_true() => Health::current("Ready"),
        Some(c) => Health::in_progress(format!("not Ready{}", c.why())),
        None => Health::in_progress("no Ready condition yet"),
    }
}

/// InProgress until the controller wrote `status.observedGeneration` at all (the generic check
/// handles a stale one).
fn not_observed(object: &Value) -> Option<Health> {
    if object["status"]["observedGeneration"].as_i64().is_some() {
        return None;
    }
    Some(Health::in_progress(
        match object["metadata"]["generation"].as_i64() {
            Some(generation) => {
                format!("waiting for the controller to observe generation {generation}")
            }
            None => "waiting for the controller to observe it".to_string(),
        },
    ))
}

fn deployment(object: &Value) -> Health {
    let spec = &object["spec"];
    let status = &object["status"];
    if spec["paused"].as_bool() == Some(true) {
        return Health::new(HealthState::Suspended, "paused (spec.paused)");
    }
    if let Some(health) = not_observed(object) {
        return health;
    }
    if let Some(c) =
        condition(object, "Progressing").filter(|c| c.reason() == "ProgressDeadlineExceeded")
    {
        return Health::failed(format!("progress deadline exceeded{}", c.why_message()));
    }
    if let Some(c) = condition(object, "ReplicaFailure").filter(Condition::is_true) {
        return Health::failed(format!("replica failure{}", c.why()));
    }
    let replicas = int(&spec["replicas"]).unwrap_or(1);
    let updated = int(&status["updatedReplicas"]).unwrap_or(0);
    let total = int(&status["replicas"]).unwrap_or(0);
    let available = int(&status["availableReplicas"]).unwrap_or(0);
    if updated < replicas {
        return Health::in_progress(format!("{updated} of {replicas} replicas updated"));
    }
    if total > updated {
        return Health::in_progress(format!(
            "{} old replicas pending termination",
            total - updated
        ));
    }
    if available < updated {
        return Health::in_progress(format!(
            "{available} of {updated} updated replicas available"
        ));
    }
    match condition(object, "Available") {
        Some(c) if c.is_true() => {
            Health::current(format!("{available} of {replicas} replicas available"))
        }
        Some(c) => Health::in_progress(format!("not Available{}", c.why())),
        None => Health::in_progress("no Available condition yet"),
    }
}

fn stateful_set(object: &Value) -> Health {
    let spec = &object["spec"];
    let status = &object["status"];
    if let Some(health) = not_observed(object) {
        return health;
    }
    if spec["updateStrategy"]["type"].as_str() == Some("OnDelete") {
        return Health::current("OnDelete update strategy: no rollout to wait for");
    }
    let replicas = int(&spec["replicas"]).unwrap_or(1);
    let ready = int(&status["readyReplicas"]).unwrap_or(0);
    let updated = int(&status["updatedReplicas"]).unwrap_or(0);
    let total = int(&status["replicas"]).unwrap_or(0);
    let partition = int(&spec["updateStrategy"]["rollingUpdate"]["partition"]).unwrap_or(0);
    if total > replicas {
        return Health::in_progress(format!("{} replicas pending termination", total - replicas));
    }
    if partition > 0 {
        let target = (replicas - partition).max(0);
        if updated < target {
            return Health::in_progress(format!(
                "{updated} of {target} replicas updated (partition {partition})"
            ));
        }
    }
    if ready < replicas {
        return Health::in_progress(format!("{ready} of {replicas} replicas ready"));
    }
    if partition <= 0 {
        let current = status["currentRevision"].as_str().unwrap_or_default();
        let update = status["updateRevision"].as_str().unwrap_or_default();
        if current != update {
            return Health::in_progress(format!(
                "rolling out revision {update} ({updated} of {replicas} replicas updated)"
            ));
        }
    }
    Health::current(format!("{ready} of {replicas} replicas ready"))
}

fn daemon_set(object: &Value) -> Health {
    let status = &object["status"];
    if let Some(health) = not_observed(object) {
        return health;
    }
    if object["spec"]["updateStrategy"]["type"].as_str() == Some("OnDelete") {
        return Health::current("OnDelete update strategy: no rollout to wait for");
    }
    let desired = int(&status["desiredNumberScheduled"]).unwrap_or(0);
    let updated = int(&status["updatedNumberScheduled"]).unwrap_or(0);
    let available = int(&status["numberAvailable"]).unwrap_or(0);
    let ready = int(&status["numberReady"]).unwrap_or(0);
    if updated < desired {
        return Health::in_progress(format!("{updated} of {desired} pods updated"));
    }
    if available < desired {
        return Health::in_progress(format!("{available} of {desired} pods available"));
    }
    if ready < desired {
        return Health::in_progress(format!("{ready} of {desired} pods ready"));
    }
    Health::current(format!("{available} of {desired} pods available"))
}

fn replica_set(object: &Value) -> Health {
    if let Some(health) = not_observed(object) {
        return health;
    }
    if let Some(c) = condition(object, "ReplicaFailure").filter(Condition::is_true) {
        return Health::failed(format!("replica failure{}", c.why()));
    }
    let replicas = int(&object["spec"]["replicas"]).unwrap_or(1);
    let available = int(&object["status"]["availableReplicas"]).unwrap_or(0);
    if available < replicas {
        return Health::in_progress(format!("{available} of {replicas} replicas available"));
    }
    Health::current(format!("{available} of {replicas} replicas available"))
}

fn pod(object: &Value) -> Health {
    let status = &object["status"];
    let phase = status["phase"].as_str().unwrap_or_default();
    match phase {
        "Succeeded" => return Health::current("succeeded"),
        "Failed" => {
            return Health::failed(format!(
                "failed{}",
                why(
                    status["reason"].as_str().unwrap_or_default(),
                    status["message"].as_str().unwrap_or_default()
                )
            ))
        }
        _ => {}
    }
    let containers = ["initContainerStatuses", "containerStatuses"]
        .iter()
        .flat_map(|key| status[*key].as_array().into_iter().flatten());
    for container in containers {
        let waiting = &container["state"]["waiting"];
        let reason = waiting["reason"].as_str().unwrap_or_default();
        if reason.ends_with("BackOff") || reason.starts_with("Err") || reason.ends_with("Error") {
            return Health::failed(format!(
                "container {}{}",
                container["name"].as_str().unwrap_or("?"),
                why(reason, waiting["message"].as_str().unwrap_or_default())
            ));
        }
    }
    match (phase, condition(object, "Ready")) {
        ("Running", Some(c)) if c.is_true() => Health::current("running and ready"),
        ("Running", Some(c)) => Health::in_progress(format!("running, not ready{}", c.why())),
        ("Running", None) => Health::in_progress("running, not ready"),
        ("Pending" | "", _) => match condition(object, "PodScheduled") {
            Some(c) if !c.is_true() => {
                Health::in_progress(format!("pending, not scheduled{}", c.why()))
            }
            _ => Health::in_progress("pending"),
        },
        (other, _) => Health::in_progress(format!("phase {other}")),
    }
}

fn job(object: &Value) -> Health {
    let status = &object["status"];
    let succeeded = int(&status["succeeded"]).unwrap_or(0);
    if condition(object, "Complete").is_some_and(|c| c.is_true()) {
        return Health::current(format!("complete, {succeeded} succeeded"));
    }
    for failed in ["Failed", "FailureTarget"] {
        if let Some(c) = condition(object, failed).filter(Condition::is_true) {
            return Health::failed(format!("failed{}", c.why()));
        }
    }
    if object["spec"]["suspend"].as_bool() == Some(true) {
        return Health::new(HealthState::Suspended, "suspended (spec.suspend)");
    }
    let active = int(&status["active"]).unwrap_or(0);
    match int(&object["spec"]["completions"]) {
        Some(completions) => Health::in_progress(format!(
            "running: {active} active, {succeeded} of {completions} succeeded"
        )),
        None => Health::in_progress(format!("running: {active} active, {succeeded} succeeded")),
    }
}

fn cron_job(object: &Value) -> Health {
    if object["spec"]["suspend"].as_bool() == Some(true) {
        Health::current("exists (suspended)")
    } else {
        Health::current("exists")
    }
}

fn service(object: &Value, options: &HealthOptions) -> Health {
    let service_type = object["spec"]["type"].as_str().unwrap_or("ClusterIP");
    if service_type != "LoadBalancer" || !options.load_balancer_needs_ingress {
        return Health::current(service_type);
    }
    let addresses: Vec<&str> = object["status"]["loadBalancer"]["ingress"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["ip"].as_str().or_else(|| i["hostname"].as_str()))
        .collect();
    if addresses.is_empty() {
        Health::in_progress("waiting for a load balancer address")
    } else {
        Health::current(format!("load balancer at {}", addresses.join(", ")))
    }
}

fn pvc(object: &Value) -> Health {
    let phase = object["status"]["phase"].as_str().unwrap_or("Pending");
    match phase {
        "Bound" => Health::current("Bound"),
        "Lost" => Health::failed("Lost: its volume is gone"),
        _ => {
            let annotations = &object["metadata"]["annotations"];
            let taken = [
                "volume.kubernetes.io/selected-node",
                "volume.kubernetes.io/storage-provisioner",
                "volume.beta.kubernetes.io/storage-provisioner",
            ]
            .iter()
            .any(|key| !annotations[*key].is_null())
                || object["spec"]["volumeName"]
                    .as_str()
                    .is_some_and(|v| !v.is_empty());
            if taken {
                Health::in_progress(format!("{phase}, being provisioned or bound"))
            } else {
                Health::current(format!(
                    "{phase}, waiting for a first consumer or a provisioner (not waited for)"
                ))
            }
        }
    }
}

fn crd(object: &Value) -> Health {
    if let Some(c) = condition(object, "NamesAccepted").filter(|c| c.status() == "False") {
        return Health::failed(format!("names not accepted{}", c.why()));
    }
    if let Some(c) = condition(object, "NonStructuralSchema").filter(Condition::is_true) {
        return Health::failed(format!("non-structural schema{}", c.why()));
    }
    match condition(object, "Established") {
        Some(c) if c.is_true() => Health::current("Established"),
        Some(c) => Health::in_progress(format!("not Established yet{}", c.why())),
        None => Health::in_progress("not Established yet"),
    }
}

fn api_service(object: &Value) -> Health {
    match condition(object, "Available") {
        Some(c) if c.is_true() => Health::current("Available"),
        Some(c) => Health::in_progress(format!("not Available{}", c.why())),
        None => Health::in_progress("no Available condition yet"),
    }
}

fn pdb(object: &Value) -> Health {
    if let Some(health) = not_observed(object) {
        return health;
    }
    let healthy = int(&object["status"]["currentHealthy"]).unwrap_or(0);
    let desired = int(&object["status"]["desiredHealthy"]).unwrap_or(0);
    Health::current(format!(
        "observed ({healthy} healthy pods, {desired} desired)"
    ))
}

/// A status condition of the object.
struct Condition<'a>(&'a Value);

impl Condition<'_> {
    fn status(&self) -> &str {
        self.0["status"].as_str().unwrap_or_default()
    }
    fn is_true(&self) -> bool {
        self.status() == "True"
    }
    fn reason(&self) -> &str {
        self.0["reason"].as_str().unwrap_or_default()
    }
    fn message(&self) -> &str {
        self.0["message"].as_str().unwrap_or_default()
    }
    /// ": reason: message", the parts that are set.
    fn why(&self) -> String {
        why(self.reason(), self.message())
    }
    /// ": message" (when the reason is already in the text).
    fn why_message(&self) -> String {
        why("", self.message())
    }
}

fn condition<'a>(object: &'a Value, type_: &str) -> Option<Condition<'a>> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"].as_str() == Some(type_))
        .map(Condition)
}

fn why(reason: &str, message: &str) -> String {
    [reason, message]
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| format!(": {s}"))
        .collect()
}

/// An integer field; quantities written as strings are not counts, so only numbers count.
fn int(value: &Value) -> Option<i64> {
    value.as_i64()
}

#[cfg(test)]
mod tests;
