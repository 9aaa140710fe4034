//! Pure planning for an apply: which stage each object belongs to, whether a live object already
//! matches what we would apply, who owns a live object, and what a new revision prunes.
//!
//! No I/O here: the apply step feeds in live objects it read and acts on the answers.

use std::collections::BTreeSet;

use pallet_formats::{Object, ObjectKey};
use serde_json::Value;

use crate::api::CollisionProtection;

/// Label carried by every object pallet applies: the name of the owning BundleDeployment.
pub const OWNER_LABEL: &str = "pallet.dev/bundle-deployment";
/// Annotation naming the revision that last wrote an object (`pallet trace` reads it). Set only
/// on writes and never compared: an unchanged object keeps the revision that last changed it.
pub const REVISION_ANNOTATION: &str = "pallet.dev/revision";

/// Apply stages, in the order they run. Later stages may depend on earlier ones: custom
/// resources need their CRD established, namespaced objects need their Namespace, and RoleBindings
/// to ClusterRoles need the ClusterRole (RBAC escalation checks look it up). Workloads come after
/// the objects their Pods use: a Pod whose ServiceAccount does not exist yet is refused, and its
/// controller retries with backoff, writing a `FailedCreate` Event each time. Autoscalers come
/// after the workloads they scale: an autoscaler whose target does not exist yet reports
/// `FailedGetScale` until its next sync. This follows Helm's install order, which puts
/// HorizontalPodAutoscalers after Deployments and APIServices after the workloads, and webhook
/// configurations, kinds it does not list, after everything it lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// CustomResourceDefinitions; the apply waits for them to be Established.
    Crds,
    /// Namespaces.
    Namespaces,
    /// ClusterRoles and ClusterRoleBindings.
    ClusterRbac,
    /// Everything not in another stage: ServiceAccounts, ConfigMaps, Secrets, Services, Roles,
    /// custom resources, ...
    Rest,
    /// Kinds that create Pods (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob, Pod,
    /// ReplicationController).
    Workloads,
    /// What scales a workload: HorizontalPodAutoscalers and VerticalPodAutoscalers.
    Autoscalers,
    /// What sends API requests to a server the bundle may run: validating and mutating webhook
    /// configurations and APIServices. Last, so that a webhook does not judge the bundle's own
    /// objects, and an aggregated API is not announced, before that server exists.
    ServerRegistrations,
}

impl Stage {
    /// Every stage in apply order.
    pub const ALL: [Stage; 7] = [
        Stage::Crds,
        Stage::Namespaces,
        Stage::ClusterRbac,
        Stage::Rest,
        Stage::Workloads,
        Stage::Autoscalers,
        Stage::ServerRegistrations,
    ];

    /// The stage of an object with this group and kind.
    pub fn of(group: &str, kind: &str) -> Stage {
        match (group, kind) {
            ("apiextensions.k8s.io", "CustomResourceDefinition") => Stage::Crds,
            ("", "Namespace") => Stage::Namespaces,
            ("rbac.authorization.k8s.io", "ClusterRole" | "ClusterRoleBinding") => {
                Stage::ClusterRbac
            }
            ("", "Pod" | "ReplicationController")
            | ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
            | ("batch", "Job" | "CronJob") => Stage::Workloads,
            ("autoscaling", "HorizontalPodAutoscaler")
            | ("autoscaling.k8s.io", "VerticalPodAutoscaler") => Stage::Autoscalers,
            (
                "admissionregistration.k8s.io",
                "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration",
            )
            | ("apiregistration.k8s.io", "APIService") => Stage::ServerRegistrations,
            _ => Stage::Rest,
        }
    }
}

/// Groups objects by stage, in apply order, keeping the render order within a stage. Empty stages
/// are left out.
pub fn by_stage(objects: &[Object]) -> Vec<(Stage, Vec<&Object>)> {
    Stage::ALL
        .iter()
        .map(|&stage| {
            let members: Vec<&Object> = objects
                .iter()
                .filter(|o| Stage::of(o.group(), o.kind()) == stage)
                .collect();
            (stage, members)
        })
        .filter(|(_, members)| !members.is_empty())
        .collect()
}

/// True when `live` already holds every field of `desired` with the same value, so applying
/// `desired` would change nothing and can be skipped.
///
/// Fields the server adds (defaults, status, metadata it manages) do not count against a match.
/// Lists must have the same length and match element by element: server-side apply replaces or
/// merges lists as a whole, so an extra live element means the apply would change something.
/// Numbers compare by value (`1` and `1.0` are equal), as the API server may re-encode them.
pub fn live_matches(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(want), Value::Object(have)) => {
            want.iter().all(|(key, value)| match have.get(key) {
                Some(live_value) => live_matches(value, live_value),
                // An explicit null or empty collection in the manifest means "not set".
                None => is_empty_value(value),
            })
        }
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| live_matches(w, h))
        }
        (Value::Number(want), Value::Number(have)) => want.as_f64() == have.as_f64(),
        _ => desired == live,
    }
}

/// Compares a rendered object with its live counterpart, ignoring `status` (a subresource that
/// apply does not write); true when applying it would change nothing.
pub fn object_matches_live(desired: &Value, live: &Value) -> bool {
    differing_paths(desired, live, 1).is_empty()
}

/// One step of a field path: a map key or a list index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A key of a map.
    Key(String),
    /// A position in a list.
    Index(usize),
}

/// A field path as messages and the change log show it: `.spec.containers[0].image`.
pub fn path_text(steps: &[Step]) -> String {
    let mut text = String::new();
    for step in steps {
        match step {
            Step::Key(key) => {
                text.push('.');
                text.push_str(key);
            }
            Step::Index(i) => text.push_str(&format!("[{i}]")),
        }
    }
    text
}

/// Field paths (`.spec.replicas`, `.data.key`, `.spec.containers[0].image`) where `live` lacks or
/// differs from `desired`, by the same rules as [`object_matches_live`], at most `limit` of them.
/// Used to tell users what changed or drifted without printing values (they may be secret).
pub fn differing_paths(desired: &Value, live: &Value, limit: usize) -> Vec<String> {
    differing_steps(desired, live, limit)
        .iter()
        .map(|steps| path_text(steps))
        .collect()
}

/// [`differing_paths`] as steps, to read or change the values there.
pub fn differing_steps(desired: &Value, live: &Value, limit: usize) -> Vec<Vec<Step>> {
    fn walk(
        desired: &Value,
        live: &Value,
        path: &mut Vec<Step>,
        out: &mut Vec<Vec<Step>>,
        limit: usize,
    ) {
        if out.len() >= limit {
            return;
        }
        match (desired, live) {
            (Value::Object(want), Value::Object(have)) => {
                for (key, value) in want {
                    if path.is_empty() && key == "status" {
                        continue;
                    }
                    path.push(Step::Key(key.clone()));
                    match have.get(key) {
                        Some(live_value) => walk(value, live_value, path, out, limit),
                        None if !is_empty_value(value) && out.len() < limit => {
                            out.push(path.clone())
                        }
                        None => {}
                    }
                    path.pop();
                }
            }
            (Value::Array(want), Value::Array(have)) if want.len() == have.len() => {
                for (i, (w, h)) in want.iter().zip(have).enumerate() {
                    path.push(Step::Index(i));
                    walk(w, h, path, out, limit);
                    path.pop();
                }
            }
            _ => {
                if !live_matches(desired, live) && out.len() < limit {
                    out.push(path.clone());
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(desired, live, &mut Vec::new(), &mut out, limit);
    out
}

/// The first of [`differing_paths`], or `None` when `live` matches.
pub fn first_difference(desired: &Value, live: &Value) -> Option<String> {
    differing_paths(desired, live, 1).into_iter().next()
}

fn is_empty_value(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.is_empty(),
        Value::Array(list) => list.is_empty(),
        _ => false,
    }
}

/// The object's body with pallet's ownership label set to `owner`.
pub fn with_owner_label(object: &Object, owner: &str) -> Value {
    let mut body = Value::Object(object.body().clone());
    if let Some(metadata) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        let labels = metadata
            .entry("labels")
            .or_insert_with(|| Value::Object(Default::default()));
        if !labels.is_object() {
            *labels = Value::Object(Default::default());
        }
        if let Some(labels) = labels.as_object_mut() {
            labels.insert(OWNER_LABEL.to_string(), Value::String(owner.to_string()));
        }
    }
    body
}

/// `desired` with [`REVISION_ANNOTATION`] set to `revision`, for the body of a write.
pub fn with_revision_annotation(mut desired: Value, revision: i64) -> Value {
    if let Some(metadata) = desired.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if !annotations.is_object() {
            *annotations = Value::Object(Default::default());
        }
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(
                REVISION_ANNOTATION.to_string(),
                Value::String(revision.to_string()),
            );
        }
    }
    desired
}

/// The revision an object was last written for ([`REVISION_ANNOTATION`]), if it says.
pub fn revision_of(metadata: &kube::api::ObjectMeta) -> Option<i64> {
    metadata
        .annotations
        .as_ref()?
        .get(REVISION_ANNOTATION)?
        .parse()
        .ok()
}

/// What applying to an existing live object means for ownership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// No live object: it will be created.
    Create,
    /// The live object already carries our label.
    Ours,
    /// The live object is taken over (adopted) under the collision policy.
    Adopt {
        /// The BundleDeployment that owned it before, if any.
        previous_owner: Option<String>,
    },
    /// The live object carries the markers of the previous owner `spec.takeover` names, and no
    /// BundleDeployment owns it: it is taken over whatever the collision policy.
    TakeOver,
    /// The collision policy forbids taking it over.
    Conflict {
        /// Its current owner: a BundleDeployment name, or `None` for an object nobody owns.
        owner: Option<String>,
    },
}

/// Decides whether `owner` may apply over a live object whose ownership label is `live_owner`
/// (`None` for no live object, `Some(None)` for a live object without the label); `claimed`
/// when the object carries the markers of the previous owner that `spec.takeover` names.
pub fn ownership(
    live_owner: Option<Option<&str>>,
    owner: &str,
    policy: CollisionProtection,
    claimed: bool,
) -> Ownership {
    let Some(live_owner) = live_owner else {
        return Ownership::Create;
    };
    match (live_owner, policy) {
        (Some(current), _) if current == owner => Ownership::Ours,
        (None, _) if claimed => Ownership::TakeOver,
        (current, CollisionProtection::None) => Ownership::Adopt {
            previous_owner: current.map(str::to_string),
        },
        (None, CollisionProtection::IfNoOwner) => Ownership::Adopt {
            previous_owner: None,
        },
        (current, _) => Ownership::Conflict {
            owner: current.map(str::to_string),
        },
    }
}

/// The objects `previous` had and `current` does not, in deletion order: the reverse of the
/// apply stages (so webhook configurations and APIServices go first, then autoscalers, then
/// workloads, and CRDs
/// and Namespaces last, after everything that lives in or of them) and reverse key order
/// within a stage, for a stable order.
pub fn prune_set(previous: &[ObjectKey], current: &[ObjectKey]) -> Vec<ObjectKey> {
    // A namespace of `None` and of `Some(ns)` can name the same object when defaulting differs
    // between revisions; keys here are always as applied, so plain equality is right.
    let keep: BTreeSet<&ObjectKey> = current.iter().collect();
    let mut gone: Vec<ObjectKey> = previous
        .iter()
        .filter(|k| !keep.contains(k))
        .cloned()
        .collect();
    gone.sort_by(|a, b| {
        Stage::of(&b.group, &b.kind)
            .cmp(&Stage::of(&a.group, &a.kind))
            .then_with(|| b.cmp(a))
    });
    gone.dedup();
    gone
}

/// From a CRD's body: its group, a served version, kind and plural, to look up its objects.
pub fn crd_served_resource(crd: &Value) -> Option<(String, String, String, String)> {
    let spec = crd.get("spec")?;
    let group = spec.get("group")?.as_str()?;
    let names = spec.get("names")?;
    let kind = names.get("kind")?.as_str()?;
    let plural = names.get("plural")?.as_str()?;
    let version = spec
        .get("versions")?
        .as_array()?
        .iter()
        .find(|v| v.get("served").and_then(Value::as_bool).unwrap_or(false))?
        .get("name")?
        .as_str()?;
    Some((group.into(), version.into(), kind.into(), plural.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pallet_formats::Origin;
    use serde_json::json;

    fn object(body: Value) -> Object {
        Object::new(
            body,
            Origin {
                file: "t.yaml".into(),
                document: 0,
                line: 1,
            },
        )
        .unwrap()
    }

    fn key(group: &str, kind: &str, namespace: Option<&str>, name: &str) -> ObjectKey {
        ObjectKey {
            group: group.into(),
            kind: kind.into(),
            namespace: namespace.map(str::to_string),
            name: name.into(),
        }
    }

    #[test]
    fn stages_run_crds_namespaces_cluster_rbac_the_rest_workloads_autoscalers_then_server_registrations(
    ) {
        let objects = vec![
            object(
                json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "w"}}),
            ),
            object(
                json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"}}),
            ),
            object(
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}),
            ),
            object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})),
            object(json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}})),
            object(
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}}),
            ),
            object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}})),
            object(
                json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "x.example.com"}}),
            ),
            object(
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "rb"}}),
            ),
            object(
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"}}),
            ),
            object(
                json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v1.x.example.com"}}),
            ),
            // A custom resource named like a workload stays in the rest.
            object(
                json!({"apiVersion": "example.com/v1", "kind": "Deployment", "metadata": {"name": "x"}}),
            ),
        ];
        let staged: Vec<(Stage, Vec<&str>)> = by_stage(&objects)
            .into_iter()
            .map(|(stage, members)| (stage, members.iter().map(|o| o.name()).collect()))
            .collect();
        assert_eq!(
            staged,
            vec![
                (Stage::Crds, vec!["x.example.com"]),
                (Stage::Namespaces, vec!["n"]),
                (Stage::ClusterRbac, vec!["r"]),
                (Stage::Rest, vec!["c", "rb", "sa", "x"]),
                (Stage::Workloads, vec!["d", "j"]),
                (Stage::Autoscalers, vec!["h"]),
                (Stage::ServerRegistrations, vec!["w", "v1.x.example.com"]),
            ]
        );
    }

    #[test]
    fn live_with_server_defaults_matches() {
        let desired = json!({"spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}}});
        let live = json!({"spec": {"replicas": 1.0, "revisionHistoryLimit": 10, "template": {"spec": {
            "containers": [{"name": "a", "image": "x", "imagePullPolicy": "IfNotPresent"}], "dnsPolicy": "ClusterFirst"}}},
            "status": {"replicas": 0}});
        assert!(live_matches(&desired, &live));
    }

    #[test]
    fn changed_missing_or_extra_list_values_do_not_match() {
        let desired = json!({"data": {"a": "1"}, "list": [1, 2]});
        assert!(!live_matches(
            &desired,
            &json!({"data": {"a": "2"}, "list": [1, 2]})
        ));
        assert!(!live_matches(
            &desired,
            &json!({"data": {}, "list": [1, 2]})
        ));
        assert!(!live_matches(
            &desired,
            &json!({"data": {"a": "1"}, "list": [1, 2, 3]})
        ));
        assert!(!live_matches(
            &desired,
            &json!({"data": {"a": "1"}, "list": [2, 1]})
        ));
        // Types matter: the string "1" is not the number 1.
        assert!(!live_matches(&json!({"a": "1"}), &json!({"a": 1})));
    }

    #[test]
    fn explicit_empty_values_match_absent_ones() {
        assert!(live_matches(
            &json!({"metadata": {"annotations": {}}, "x": null}),
            &json!({"metadata": {}})
        ));
    }

    #[test]
    fn status_and_owner_label_do_not_count() {
        let rendered = object(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}),
        );
        let desired = with_owner_label(&rendered, "bd1");
        assert_eq!(desired["metadata"]["labels"][OWNER_LABEL], "bd1");
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "uid": "u", "resourceVersion": "7", "labels": {OWNER_LABEL: "bd1"}},
            "data": {"a": "1"}});
        assert!(object_matches_live(&desired, &live));
        let unlabelled = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
        assert!(
            !object_matches_live(&desired, &unlabelled),
            "a missing label needs an apply"
        );
        let with_status = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "c"}, "status": {"phase": "A"}});
        assert!(object_matches_live(
            &with_status,
            &json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "c"}})
        ));
    }

    #[test]
    fn first_difference_names_the_path() {
        let desired = json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}, "spec": {"c": [{"image": "x"}]}});
        let same = json!({"metadata": {"name": "c", "uid": "u"}, "data": {"a": "1", "b": "2"}, "spec": {"c": [{"image": "x"}]}});
        assert_eq!(first_difference(&desired, &same), None);
        let edited = json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "hotfix"}, "spec": {"c": [{"image": "x"}]}});
        assert_eq!(
            first_difference(&desired, &edited).as_deref(),
            Some(".data.b")
        );
        let image = json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}, "spec": {"c": [{"image": "y"}]}});
        assert_eq!(
            first_difference(&desired, &image).as_deref(),
            Some(".spec.c[0].image")
        );
        assert_eq!(
            first_difference(&json!({"status": {"x": 1}}), &json!({})),
            None
        );
    }

    #[test]
    fn owner_label_replaces_a_non_map_labels_field() {
        let rendered = object(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": null}}),
        );
        assert_eq!(
            with_owner_label(&rendered, "bd")["metadata"]["labels"],
            json!({OWNER_LABEL: "bd"})
        );
    }

    #[test]
    fn collision_policies() {
        use CollisionProtection::{IfNoOwner, Prevent};
        let take_all = CollisionProtection::None;
        let ownership = |live, owner, policy| ownership(live, owner, policy, false);
        assert_eq!(ownership(None, "me", Prevent), Ownership::Create);
        assert_eq!(ownership(Some(Some("me")), "me", Prevent), Ownership::Ours);
        assert_eq!(
            ownership(Some(None), "me", Prevent),
            Ownership::Conflict { owner: None }
        );
        assert_eq!(
            ownership(Some(None), "me", IfNoOwner),
            Ownership::Adopt {
                previous_owner: None
            }
        );
        assert_eq!(
            ownership(Some(Some("other")), "me", IfNoOwner),
            Ownership::Conflict {
                owner: Some("other".into())
            }
        );
        assert_eq!(
            ownership(Some(Some("other")), "me", take_all),
            Ownership::Adopt {
                previous_owner: Some("other".into())
            }
        );
    }

    #[test]
    fn a_takeover_adopts_what_its_previous_owner_marked_unless_a_bundle_owns_it() {
        use CollisionProtection::Prevent;
        assert_eq!(
            ownership(Some(None), "me", Prevent, true),
            Ownership::TakeOver
        );
        assert_eq!(
            ownership(Some(Some("me")), "me", Prevent, true),
            Ownership::Ours
        );
        assert_eq!(ownership(None, "me", Prevent, true), Ownership::Create);
        assert_eq!(
            ownership(Some(Some("other")), "me", Prevent, true),
            Ownership::Conflict {
                owner: Some("other".into())
            }
        );
    }

    #[test]
    fn crd_served_resource_takes_a_served_version() {
        let crd = json!({"spec": {"group": "example.com", "names": {"kind": "Widget", "plural": "widgets"},
            "versions": [{"name": "v1alpha1", "served": false}, {"name": "v1", "served": true}]}});
        assert_eq!(
            crd_served_resource(&crd),
            Some((
                "example.com".into(),
                "v1".into(),
                "Widget".into(),
                "widgets".into()
            ))
        );
        assert_eq!(crd_served_resource(&json!({"spec": {}})), None);
    }

    #[test]
    fn prune_deletes_dropped_objects_crds_and_namespaces_last() {
        let previous = vec![
            key(
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                None,
                "x.example.com",
            ),
            key("", "Namespace", None, "ns"),
            key("", "ConfigMap", Some("ns"), "kept"),
            key("", "ConfigMap", Some("ns"), "dropped"),
            key("rbac.authorization.k8s.io", "ClusterRole", None, "role"),
            key("apps", "Deployment", Some("ns"), "app"),
            key(
                "autoscaling",
                "HorizontalPodAutoscaler",
                Some("ns"),
                "scaler",
            ),
            key(
                "admissionregistration.k8s.io",
                "MutatingWebhookConfiguration",
                None,
                "hook",
            ),
        ];
        let current = vec![key("", "ConfigMap", Some("ns"), "kept")];
        let names: Vec<String> = prune_set(&previous, &current)
            .into_iter()
            .map(|k| k.name)
            .collect();
        // Webhooks first (they would judge the deletions), then autoscalers (before what they
        // scale), then workloads (their Pods stop before what they use goes), then the rest.
        assert_eq!(
            names,
            [
                "hook",
                "scaler",
                "app",
                "dropped",
                "role",
                "ns",
                "x.example.com"
            ]
        );
        assert!(prune_set(&current, &current).is_empty());
    }
}
