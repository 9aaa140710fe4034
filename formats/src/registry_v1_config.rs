//! `config.registryV1.deploymentConfig` merged into a CSV Deployment the way OLM v1 merges it:
//! operator-controller's `applyCustomConfigToDeployment` and its helpers in
//! `internal/operator-controller/rukpak/render/registryv1/generators/generators.go` (which follow
//! OLM v0's `pkg/controller/operators/olm/overrides/inject/inject.go`).
//!
//! The config arrives as JSON written from k8s-openapi types, so absent fields are absent (never
//! null) and the Go nil/empty distinctions map to absent/present.

use serde_json::{Map, Value};

/// Merges `config` (a `deploymentConfig` object) into `deployment` (a Deployment as JSON).
pub(crate) fn apply_deployment_config(deployment: &mut Value, config: &Value) {
    let Some(config) = config.as_object() else {
        return;
    };
    let Some(spec) = deployment.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let template = object_entry(spec, "template");
    let pod = object_entry(template, "spec");

    if let Some(env) = non_empty_list(config, "env") {
        // Same name: replaced in place; new names appended (initContainers are not touched).
        for container in containers(pod) {
            let list = list_entry(container, "env");
            for item in env {
                let name = item.get("name");
                match list
                    .iter_mut()
                    .find(|existing| existing.get("name") == name)
                {
                    Some(existing) => *existing = item.clone(),
                    None => list.push(item.clone()),
                }
            }
        }
    }
    if let Some(env_from) = non_empty_list(config, "envFrom") {
        // Appended unless an equal entry is there already.
        for container in containers(pod) {
            let list = list_entry(container, "envFrom");
            for item in env_from {
                if !list.contains(item) {
                    list.push(item.clone());
                }
            }
        }
    }
    if let Some(volumes) = non_empty_list(config, "volumes") {
        // Same name: replaced; OLM v1 differs from v0 here, which appended duplicates.
        merge_by_name(list_entry(pod, "volumes"), volumes);
    }
    if let Some(mounts) = non_empty_list(config, "volumeMounts") {
        for container in containers(pod) {
            merge_by_name(list_entry(container, "volumeMounts"), mounts);
        }
    }
    if let Some(tolerations) = non_empty_list(config, "tolerations") {
        let list = list_entry(pod, "tolerations");
        for item in tolerations {
            if !list.contains(item) {
                list.push(item.clone());
            }
        }
    }
    if let Some(resources) = config.get("resources") {
        // Replaces each container's resources entirely.
        for container in containers(pod) {
            container.insert("resources".to_owned(), resources.clone());
        }
    }
    if let Some(node_selector) = config.get("nodeSelector") {
        // Replaced; an empty map clears it (Go omits the empty map when writing).
        if node_selector.as_object().is_some_and(Map::is_empty) {
            pod.remove("nodeSelector");
        } else {
            pod.insert("nodeSelector".to_owned(), node_selector.clone());
        }
    }
    if let Some(affinity) = config.get("affinity").and_then(Value::as_object) {
        apply_affinity(pod, affinity);
    }
    if let Some(annotations) = config.get("annotations").and_then(Value::as_object) {
        if !annotations.is_empty() {
            // Existing annotations win, on the Deployment and on its pod template.
            if let Some(deployment) = deployment.as_object_mut() {
                let metadata = object_entry(deployment, "metadata");
                add_missing(object_entry(metadata, "annotations"), annotations);
            }
            if let Some(template) = deployment
                .pointer_mut("/spec/template")
                .and_then(Value::as_object_mut)
            {
                let metadata = object_entry(template, "metadata");
                add_missing(object_entry(metadata, "annotations"), annotations);
            }
        }
    }
}

/// Affinity: `{}` erases the pod's affinity; a given sub-affinity replaces the pod's, or erases
/// it when empty; sub-affinities not given stay; an affinity left with nothing is removed.
fn apply_affinity(pod: &mut Map<String, Value>, config: &Map<String, Value>) {
    const PARTS: [&str; 3] = ["nodeAffinity", "podAffinity", "podAntiAffinity"];
    if PARTS.iter().all(|part| !config.contains_key(*part)) {
        pod.remove("affinity");
        return;
    }
    let affinity = object_entry(pod, "affinity");
    for part in PARTS {
        if let Some(value) = config.get(part) {
            if sub_affinity_is_empty(part, value) {
                affinity.remove(part);
            } else {
                affinity.insert(part.to_owned(), value.clone());
            }
        }
    }
    let empty = PARTS.iter().all(|part| {
        affinity
            .get(*part)
            .is_none_or(|value| sub_affinity_is_empty(part, value))
    });
    if empty {
        pod.remove("affinity");
    }
}

/// OLM v1's `isNodeAffinityEmpty` / `isPodAffinityEmpty`: no terms in either list.
fn sub_affinity_is_empty(part: &str, value: &Value) -> bool {
    let list_empty = |key: &str| {
        value
            .get(key)
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
    };
    let required = "requiredDuringSchedulingIgnoredDuringExecution";
    let preferred_empty = list_empty("preferredDuringSchedulingIgnoredDuringExecution");
    if part == "nodeAffinity" {
        let required_empty = value
            .get(required)
            .and_then(|required| required.get("nodeSelectorTerms"))
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        required_empty && preferred_empty
    } else {
        list_empty(required) && preferred_empty
    }
}

fn non_empty_list<'a>(config: &'a Map<String, Value>, key: &str) -> Option<&'a Vec<Value>> {
    config
        .get(key)
        .and_then(Value::as_array)
        .filter(|list| !list.is_empty())
}

fn merge_by_name(list: &mut Vec<Value>, items: &[Value]) {
    for item in items {
        let name = item.get("name");
        match list
            .iter_mut()
            .find(|existing| existing.get("name") == name)
        {
            Some(existing) => *existing = item.clone(),
            None => list.push(item.clone()),
        }
    }
}

fn add_missing(target: &mut Map<String, Value>, source: &Map<String, Value>) {
    for (key, value) in source {
        target.entry(key.clone()).or_insert_with(|| value.clone());
    }
}

/// The pod's `containers` (not initContainers, as in OLM).
fn containers(pod: &mut Map<String, Value>) -> impl Iterator<Item = &mut Map<String, Value>> {
    pod.get_mut("containers")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// `map[key]` as an object, made (or replaced, if it is not one) when needed.
pub(crate) fn object_entry<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
) -> &'a mut Map<String, Value> {
    let entry = map
        .entry(key.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    match entry {
        Value::Object(object) => object,
        _ => unreachable!("made an object above"),
    }
}

/// `map[key]` as a list, made (or replaced, if it is not one) when needed.
pub(crate) fn list_entry<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Vec<Value> {
    let entry = map
        .entry(key.to_owned())
        .or_insert_with(|| Value::Array(Vec::new()));
    if !entry.is_array() {
        *entry = Value::Array(Vec::new());
    }
    match entry {
        Value::Array(list) => list,
        _ => unreachable!("made a list above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({"metadata": {"name": "d", "annotations": {"keep": "deployment"}},
               "spec": {"template": {"metadata": {"annotations": {"keep": "pod"}}, "spec": {
                   "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]},
                                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 2}]}},
                   "nodeSelector": {"a": "b"},
                   "volumes": [{"name": "v", "emptyDir": {}}],
                   "tolerations": [{"key": "k", "operator": "Exists"}],
                   "containers": [{"name": "c", "env": [{"name": "A", "value": "1"}],
                                   "envFrom": [{"prefix": "p"}],
                                   "volumeMounts": [{"name": "v", "mountPath": "/old"}]}],
                   "initContainers": [{"name": "i"}]}}}})
    }

    #[test]
    fn lists_merge_by_name_or_equality_and_annotations_do_not_override() {
        let mut d = deployment();
        apply_deployment_config(
            &mut d,
            &json!({"env": [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}],
                    "envFrom": [{"prefix": "p"}, {"prefix": "q"}],
                    "volumes": [{"name": "v", "configMap": {"name": "cm"}}, {"name": "w", "emptyDir": {}}],
                    "volumeMounts": [{"name": "v", "mountPath": "/new"}],
                    "tolerations": [{"key": "k", "operator": "Exists"}, {"key": "x", "operator": "Exists"}],
                    "annotations": {"keep": "config", "new": "yes"},
                    "nodeSelector": {}}),
        );
        let pod = &d["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        assert_eq!(
            c["env"],
            json!([{"name": "A", "value": "2"}, {"name": "B", "value": "3"}])
        );
        assert_eq!(c["envFrom"], json!([{"prefix": "p"}, {"prefix": "q"}]));
        assert_eq!(
            c["volumeMounts"],
            json!([{"name": "v", "mountPath": "/new"}])
        );
        assert_eq!(
            pod["volumes"][0],
            json!({"name": "v", "configMap": {"name": "cm"}})
        );
        assert_eq!(pod["volumes"].as_array().unwrap().len(), 2);
        assert_eq!(pod["tolerations"].as_array().unwrap().len(), 2);
        assert!(
            pod.get("nodeSelector").is_none(),
            "an empty nodeSelector clears it"
        );
        assert!(pod["initContainers"][0].get("env").is_none());
        assert_eq!(
            d["metadata"]["annotations"],
            json!({"keep": "deployment", "new": "yes"})
        );
        assert_eq!(
            d["spec"]["template"]["metadata"]["annotations"],
            json!({"keep": "pod", "new": "yes"})
        );
    }

    #[test]
    fn empty_affinity_erases_and_empty_sub_affinities_erase_their_part() {
        let mut d = deployment();
        apply_deployment_config(&mut d, &json!({"affinity": {}}));
        assert!(d["spec"]["template"]["spec"].get("affinity").is_none());

        let mut d = deployment();
        apply_deployment_config(&mut d, &json!({"affinity": {"nodeAffinity": {}}}));
        assert_eq!(
            d["spec"]["template"]["spec"]["affinity"],
            json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 2}]}})
        );

        let mut d = deployment();
        apply_deployment_config(
            &mut d,
            &json!({"affinity": {"nodeAffinity": {}, "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}}),
        );
        assert!(
            d["spec"]["template"]["spec"].get("affinity").is_none(),
            "nothing left"
        );

        let mut d = deployment();
        let anti =
            json!({"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "t"}]});
        apply_deployment_config(&mut d, &json!({"affinity": {"podAntiAffinity": anti}}));
        let affinity = &d["spec"]["template"]["spec"]["affinity"];
        assert_eq!(affinity["podAntiAffinity"], anti);
        assert!(
            affinity.get("nodeAffinity").is_some(),
            "untouched parts stay"
        );
    }

    #[test]
    fn resources_replace_and_nothing_given_changes_nothing() {
        let mut d = deployment();
        let before = d.clone();
        apply_deployment_config(&mut d, &json!({}));
        assert_eq!(d, before);
        apply_deployment_config(&mut d, &json!({"resources": {"limits": {"cpu": "1"}}}));
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["resources"],
            json!({"limits": {"cpu": "1"}})
        );
    }
}
