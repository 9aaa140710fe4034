//! Why a workload does not progress, from its Pods: a controller's counters say *that* replicas
//! are missing ("1 old replicas pending termination"); its Pods say *why* (a container in
//! CrashLoopBackOff and how it last exited, an image that cannot be pulled, a container killed
//! for memory, a Pod no node can take). Pure: the caller lists the Pods.

use std::collections::BTreeMap;

use serde_json::Value;

use super::Health;

/// How many distinct problems a workload's message names before "and N more Pods".
const PROBLEMS_SHOWN: usize = 2;

/// Longest kubelet or scheduler message quoted.
const MESSAGE_LIMIT: usize = 200;

/// Kinds whose Pods explain their health: (API group, kind).
const WORKLOADS: &[(&str, &str)] = &[
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("apps", "DaemonSet"),
    ("apps", "ReplicaSet"),
    ("batch", "Job"),
];

/// Whether `object` is a workload whose Pods may explain its health.
pub fn is_workload(object: &Value) -> bool {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let kind = object["kind"].as_str().unwrap_or_default();
    WORKLOADS.contains(&(group, kind))
}

/// The label selector (kubectl's syntax) of a workload's Pods, from `spec.selector`; `None`
/// for other objects and for a selector that selects everything.
pub fn pod_selector(object: &Value) -> Option<String> {
    if !is_workload(object) {
        return None;
    }
    let selector = &object["spec"]["selector"];
    let mut parts: Vec<String> = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.as_str().map(|v| format!("{k}={v}")))
        .collect();
    for expression in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let key = expression["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = expression["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        parts.push(match expression["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        });
    }
    (!parts.is_empty()).then(|| parts.join(","))
}

fn clipped(text: &str) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.chars().count() <= MESSAGE_LIMIT {
        return text;
    }
    let mut cut: String = text.chars().take(MESSAGE_LIMIT - 1).collect();
    cut.push('…');
    cut
}

/// How a terminated container state ended: "exit code 137 (OOMKilled)".
fn exit_text(terminated: &Value) -> Option<String> {
    let code = terminated["exitCode"].as_i64()?;
    Some(
        match terminated["reason"].as_str().filter(|r| !r.is_empty()) {
            Some(reason) => format!("exit code {code} ({reason})"),
            None => format!("exit code {code}"),
        },
    )
}

/// The trouble of one container, if any.
fn container_problem(container: &Value) -> Option<String> {
    let name = container["name"].as_str().unwrap_or("?");
    let state = &container["state"];
    let waiting = &state["waiting"];
    if let Some(reason) = waiting["reason"].as_str() {
        let message = waiting["message"].as_str().unwrap_or_default();
        let last = exit_text(&container["lastState"]["terminated"]);
        return match reason {
            "CrashLoopBackOff" => Some(match last {
                Some(last) => format!("container {name} CrashLoopBackOff, last {last}"),
                None => format!("container {name} CrashLoopBackOff"),
            }),
            "ImagePullBackOff" | "ErrImagePull" | "InvalidImageName" | "ErrImageNeverPull" => {
                let image = container["image"].as_str().unwrap_or_default();
                let mut text = format!("container {name} {reason} (image {image})");
                if !message.is_empty() {
                    text.push_str(&format!(": {}", clipped(message)));
                }
                Some(text)
            }
            r if r.ends_with("BackOff") || r.starts_with("Err") || r.ends_with("Error") => {
                Some(if message.is_empty() {
                    format!("container {name} {reason}")
                } else {
                    format!("container {name} {reason}: {}", clipped(message))
                })
            }
            _ => None,
        };
    }
    let terminated = &state["terminated"];
    let code = terminated["exitCode"].as_i64()?;
    let reason = terminated["reason"].as_str().unwrap_or_default();
    (code != 0 || reason == "OOMKilled").then(|| {
        format!(
            "container {name} terminated with {}",
            exit_text(terminated).unwrap_or_default()
        )
    })
}

/// Why `pod` is in trouble, if it is: its first container in trouble (init containers first),
/// the scheduler's refusal, or why it failed. `None` for a Pod that is fine or merely starting.
pub fn pod_problem(pod: &Value) -> Option<String> {
    let status = &pod["status"];
    if status["phase"] == "Failed" {
        let reason = status["reason"].as_str().unwrap_or_default();
        let message = status["message"].as_str().unwrap_or_default();
        if !reason.is_empty() || !message.is_empty() {
            let mut text = format!("failed: {reason}");
            if !message.is_empty() {
                text.push_str(&format!(": {}", clipped(message)));
            }
            return Some(text.replace("failed: : ", "failed: "));
        }
    }
    for key in ["initContainerStatuses", "containerStatuses"] {
        for container in status[key].as_array().into_iter().flatten() {
            if let Some(problem) = container_problem(container) {
                return Some(problem);
            }
        }
    }
    let scheduled = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "PodScheduled" && c["status"] == "False");
    if let Some(condition) = scheduled {
        let reason = condition["reason"].as_str().unwrap_or("not scheduled");
        let message = condition["message"].as_str().unwrap_or_default();
        return Some(if message.is_empty() {
            reason.to_string()
        } else {
            format!("{reason}: {}", clipped(message))
        });
    }
    None
}

/// `health` with the problems of the workload's `pods` in front of its controller's counters:
/// "pod web-5d9-x: container web CrashLoopBackOff, last exit code 1 (Error) (1 old replicas
/// pending termination)". Pods sharing a problem are counted once ("2 Pods (web-a, web-b):
/// …"). Unchanged when no Pod is in trouble.
pub fn with_pod_problems(health: Health, pods: &[Value]) -> Health {
    let mut by_problem: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for pod in pods {
        let Some(problem) = pod_problem(pod) else {
            continue;
        };
        let name = pod["metadata"]["name"].as_str().unwrap_or("?").to_string();
        if !by_problem.contains_key(&problem) {
            order.push(problem.clone());
        }
        by_problem.entry(problem).or_default().push(name);
    }
    if order.is_empty() {
        return health;
    }
    let mut parts: Vec<String> = order
        .iter()
        .take(PROBLEMS_SHOWN)
        .map(|problem| {
            let names = &by_problem[problem];
            match names.as_slice() {
                [one] => format!("pod {one}: {problem}"),
                many => format!("{} Pods ({}): {problem}", many.len(), many.join(", ")),
            }
        })
        .collect();
    let more: usize = order
        .iter()
        .skip(PROBLEMS_SHOWN)
        .map(|p| by_problem[p].len())
        .sum();
    if more > 0 {
        parts.push(format!("and {more} more Pods in trouble"));
    }
    let why = parts.join(", ");
    let message = if health.message.is_empty() {
        why
    } else {
        format!("{why} ({})", health.message)
    };
    Health { message, ..health }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::HealthState;
    use super::*;

    fn pod(name: &str, status: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "status": status})
    }

    fn crash_looping(name: &str, last_reason: &str, code: i64) -> Value {
        pod(
            name,
            json!({"phase": "Running", "containerStatuses": [
                {"name": "app", "image": "app:2", "restartCount": 4,
                 "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}},
                 "lastState": {"terminated": {"exitCode": code, "reason": last_reason}}}]}),
        )
    }

    #[test]
    fn each_kind_of_trouble_says_why() {
        assert_eq!(
            pod_problem(&crash_looping("a", "Error", 1)).as_deref(),
            Some("container app CrashLoopBackOff, last exit code 1 (Error)")
        );
        assert_eq!(
            pod_problem(&crash_looping("a", "OOMKilled", 137)).as_deref(),
            Some("container app CrashLoopBackOff, last exit code 137 (OOMKilled)")
        );
        let pull = pod(
            "b",
            json!({"phase": "Pending", "containerStatuses": [
                {"name": "app", "image": "registry.example/app:nope",
                 "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"registry.example/app:nope\""}}}]}),
        );
        assert_eq!(
            pod_problem(&pull).as_deref(),
            Some("container app ImagePullBackOff (image registry.example/app:nope): Back-off pulling image \"registry.example/app:nope\"")
        );
        let oom = pod(
            "c",
            json!({"phase": "Running", "containerStatuses": [
                {"name": "app", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}),
        );
        assert_eq!(
            pod_problem(&oom).as_deref(),
            Some("container app terminated with exit code 137 (OOMKilled)")
        );
        let unschedulable = pod(
            "d",
            json!({"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available: 3 Insufficient memory."}]}),
        );
        assert_eq!(
            pod_problem(&unschedulable).as_deref(),
            Some("Unschedulable: 0/3 nodes are available: 3 Insufficient memory.")
        );
        let init = pod(
            "e",
            json!({"phase": "Pending", "initContainerStatuses": [
                {"name": "migrate", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 2}}}]}),
        );
        assert_eq!(
            pod_problem(&init).as_deref(),
            Some("container migrate CrashLoopBackOff, last exit code 2")
        );
        let evicted = pod(
            "f",
            json!({"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}),
        );
        assert_eq!(
            pod_problem(&evicted).as_deref(),
            Some("failed: Evicted: The node was low on resource: memory.")
        );
        let fine = pod(
            "g",
            json!({"phase": "Running", "containerStatuses": [{"name": "app", "ready": true, "state": {"running": {}}}]}),
        );
        assert_eq!(pod_problem(&fine), None);
        let starting = pod(
            "h",
            json!({"phase": "Pending", "containerStatuses": [{"name": "app", "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
        );
        assert_eq!(pod_problem(&starting), None);
    }

    #[test]
    fn a_workload_message_leads_with_its_pods_problems() {
        let counters = Health {
            state: HealthState::InProgress,
            message: "1 old replicas pending termination".into(),
        };
        let health = with_pod_problems(
            counters.clone(),
            &[
                crash_looping("web-new-1", "Error", 1),
                crash_looping("web-new-2", "Error", 1),
                pod(
                    "web-old",
                    json!({"phase": "Running", "containerStatuses": [{"name": "app", "state": {"running": {}}}]}),
                ),
            ],
        );
        assert_eq!(health.state, HealthState::InProgress);
        assert_eq!(
            health.message,
            "2 Pods (web-new-1, web-new-2): container app CrashLoopBackOff, last exit code 1 (Error) (1 old replicas pending termination)"
        );
        assert_eq!(with_pod_problems(counters.clone(), &[]), counters);
        let many: Vec<Value> = (0..4)
            .map(|i| crash_looping(&format!("p{i}"), "Error", i + 1))
            .collect();
        let health = with_pod_problems(counters, &many);
        assert!(
            health.message.starts_with(
                "pod p0: container app CrashLoopBackOff, last exit code 1 (Error), pod p1: "
            ),
            "{}",
            health.message
        );
        assert!(
            health.message.contains(", and 2 more Pods in trouble ("),
            "{}",
            health.message
        );
    }

    #[test]
    fn selectors_are_written_in_kubectl_syntax() {
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"selector": {
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]},
                                 {"key": "canary", "operator": "DoesNotExist"}]}}});
        assert_eq!(
            pod_selector(&deployment).as_deref(),
            Some("app=web,tier in (a,b),!canary")
        );
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        assert_eq!(pod_selector(&config_map), None);
        let custom = json!({"apiVersion": "example.com/v1", "kind": "Deployment", "spec": {"selector": {"matchLabels": {"a": "b"}}}});
        assert_eq!(pod_selector(&custom), None);
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "spec": {"selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u"}}}});
        assert_eq!(
            pod_selector(&job).as_deref(),
            Some("batch.kubernetes.io/controller-uid=u")
        );
    }
}
