//! Taking over objects another tool installed (`spec.takeover`), decided without I/O.
//!
//! An object belongs to the previous owner when it carries that tool's markers: Helm's
//! `meta.helm.sh/release-*` annotations, Flux's `*.toolkit.fluxcd.io/name` and `/namespace`
//! labels, Argo CD's tracking annotation or instance label. Such an object is adopted whatever
//! `collisionProtection` says (it is what the user named), unless another BundleDeployment owns
//! it.
//!
//! Before pallet's first write to it, one merge patch (guarded by the live resourceVersion)
//! releases it from the previous tool: the tool's field manager entries are folded into
//! pallet's apply entry and removed, as `kubectl`'s client-side to server-side apply upgrade does
//! (`csaupgrade`). pallet then owns every field the tool set, so the server-side apply that
//! follows (forced, as every pallet write) removes what the bundle does not set: the tool's
//! markers (so the tool no longer counts the object as its own: `helm install` of the same
//! release refuses it instead of adopting it, Flux's garbage collection and Argo CD's cascading
//! deletion skip it), and server defaults, which the API server sets again to the same values.
//! The tool's entries no longer keep alive fields that pallet drops later.
//!
//! A marker the tool's entries do not own (set by hand) is removed by the merge patch itself.
//! Leaving the others to the apply keeps the metadata change to one write: the API server counts
//! every annotation change of a Deployment as a new generation (it copies a Deployment's
//! annotations to its ReplicaSet). An object whose spec did not change is not rolled: its pod
//! template, ReplicaSet and Pods stay.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::api::{Takeover, TakeoverSource};

/// Helm's annotation naming the release that owns an object.
pub const HELM_RELEASE_NAME: &str = "meta.helm.sh/release-name";
/// Helm's annotation naming that release's namespace.
pub const HELM_RELEASE_NAMESPACE: &str = "meta.helm.sh/release-namespace";
/// The label Helm requires (with value `Helm`) on an object it adopts into a release.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Flux kustomize-controller's label naming the Kustomization.
pub const KUSTOMIZE_NAME: &str = "kustomize.toolkit.fluxcd.io/name";
/// Flux kustomize-controller's label naming the Kustomization's namespace.
pub const KUSTOMIZE_NAMESPACE: &str = "kustomize.toolkit.fluxcd.io/namespace";
/// Flux helm-controller's label naming the HelmRelease.
pub const HELM_RELEASE_FLUX_NAME: &str = "helm.toolkit.fluxcd.io/name";
/// Flux helm-controller's label naming the HelmRelease's namespace.
pub const HELM_RELEASE_FLUX_NAMESPACE: &str = "helm.toolkit.fluxcd.io/namespace";
/// Argo CD's tracking annotation: `<application>:<group>/<kind>:<namespace>/<name>`.
pub const ARGOCD_TRACKING_ID: &str = "argocd.argoproj.io/tracking-id";
/// Argo CD's installation id, set beside the tracking annotation by some installations.
pub const ARGOCD_INSTALLATION_ID: &str = "argocd.argoproj.io/installation-id";
/// Argo CD's tracking label (its `label` and `annotation+label` tracking methods).
pub const ARGOCD_INSTANCE: &str = "app.kubernetes.io/instance";
/// kubectl's (and Argo CD's client-side apply's) record of the last applied object.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The field managers of each tool, as they write objects.
pub fn tool_field_managers(from: TakeoverSource) -> &'static [&'static str] {
    match from {
        TakeoverSource::Helm => &["helm"],
        TakeoverSource::FluxKustomization => &["kustomize-controller"],
        TakeoverSource::FluxHelmRelease => &["helm-controller"],
        TakeoverSource::ArgoCD => &["argocd-controller"],
    }
}

fn string_map(metadata: &Value, field: &str) -> BTreeMap<String, String> {
    metadata
        .get(field)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the live object (its `metadata`, as JSON) carries the previous owner's markers.
pub fn claims(takeover: &Takeover, metadata: &Value) -> bool {
    let labels = string_map(metadata, "labels");
    let annotations = string_map(metadata, "annotations");
    let is = |map: &BTreeMap<String, String>, key: &str, want: &str| {
        map.get(key).map(String::as_str) == Some(want)
    };
    match takeover.from {
        TakeoverSource::Helm => {
            is(&annotations, HELM_RELEASE_NAME, &takeover.name)
                && is(&annotations, HELM_RELEASE_NAMESPACE, &takeover.namespace)
        }
        TakeoverSource::FluxKustomization => {
            is(&labels, KUSTOMIZE_NAME, &takeover.name)
                && is(&labels, KUSTOMIZE_NAMESPACE, &takeover.namespace)
        }
        TakeoverSource::FluxHelmRelease => {
            is(&labels, HELM_RELEASE_FLUX_NAME, &takeover.name)
                && is(&labels, HELM_RELEASE_FLUX_NAMESPACE, &takeover.namespace)
        }
        TakeoverSource::ArgoCD => {
            let application = annotations
                .get(ARGOCD_TRACKING_ID)
                .and_then(|id| id.split_once(':'))
                .map(|(application, _)| application);
            let qualified = format!("{}_{}", takeover.namespace, takeover.name);
            application == Some(takeover.name.as_str())
                || application == Some(qualified.as_str())
                || is(&labels, ARGOCD_INSTANCE, &takeover.name)
        }
    }
}

/// The labels and annotations (with the value they must have, if any) that make the tool count
/// an object as its own.
fn markers(takeover: &Takeover) -> (Vec<(&'static str, Option<String>)>, Vec<&'static str>) {
    let helm_annotations = vec![HELM_RELEASE_NAME, HELM_RELEASE_NAMESPACE];
    let helm_label = (MANAGED_BY, Some("Helm".to_string()));
    match takeover.from {
        TakeoverSource::Helm => (vec![helm_label], helm_annotations),
        TakeoverSource::FluxKustomization => (
            vec![(KUSTOMIZE_NAME, None), (KUSTOMIZE_NAMESPACE, None)],
            Vec::new(),
        ),
        TakeoverSource::FluxHelmRelease => (
            vec![
                (HELM_RELEASE_FLUX_NAME, None),
                (HELM_RELEASE_FLUX_NAMESPACE, None),
                helm_label,
            ],
            helm_annotations,
        ),
        TakeoverSource::ArgoCD => (
            vec![(ARGOCD_INSTANCE, Some(takeover.name.clone()))],
            vec![ARGOCD_TRACKING_ID, ARGOCD_INSTALLATION_ID, LAST_APPLIED],
        ),
    }
}

/// The union of two `FieldsV1` sets (nested maps whose leaves are `{}`).
fn union_fields(into: &mut Map<String, Value>, from: &Map<String, Value>) {
    for (key, value) in from {
        match (into.get_mut(key), value) {
            (Some(Value::Object(have)), Value::Object(add)) => union_fields(have, add),
            (Some(_), _) => {}
            (None, _) => {
                into.insert(key.clone(), value.clone());
            }
        }
    }
}

fn is_main_resource(entry: &Value) -> bool {
    entry
        .get("subresource")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
}

/// `managedFields` with the previous tool's entries (managers `tool_managers`, on the main
/// resource) folded into `manager`'s apply entry for `api_version`, or None when the tool has
/// none. Entries of the tool for another API version are dropped: their field paths may not
/// mean the same in `api_version`.
pub fn folded_managed_fields(
    managed_fields: &[Value],
    tool_managers: &[String],
    manager: &str,
    api_version: &str,
    now: &str,
) -> Option<Vec<Value>> {
    let is_tool = |entry: &Value| {
        is_main_resource(entry)
            && entry
                .get("manager")
                .and_then(Value::as_str)
                .is_some_and(|m| tool_managers.iter().any(|t| t == m))
    };
    if !managed_fields.iter().any(is_tool) {
        return None;
    }
    let is_own_apply = |entry: &Value| {
        is_main_resource(entry)
            && entry.get("manager").and_then(Value::as_str) == Some(manager)
            && entry.get("operation").and_then(Value::as_str) == Some("Apply")
            && entry.get("apiVersion").and_then(Value::as_str) == Some(api_version)
    };
    let mut own = managed_fields
        .iter()
        .find(|e| is_own_apply(e))
        .cloned()
        .unwrap_or_else(|| {
            json!({"manager": manager, "operation": "Apply", "apiVersion": api_version,
                   "time": now, "fieldsType": "FieldsV1", "fieldsV1": {}})
        });
    let mut fields = own
        .get("fieldsV1")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for entry in managed_fields.iter().filter(|e| is_tool(e)) {
        if entry.get("apiVersion").and_then(Value::as_str) != Some(api_version) {
            continue;
        }
        if let Some(tool_fields) = entry.get("fieldsV1").and_then(Value::as_object) {
            union_fields(&mut fields, tool_fields);
        }
    }
    own["fieldsV1"] = Value::Object(fields);
    let mut result = vec![own];
    result.extend(
        managed_fields
            .iter()
            .filter(|e| !is_tool(e) && !is_own_apply(e))
            .cloned(),
    );
    Some(result)
}

/// The merge patch that releases the live object `live` from the previous tool before pallet
/// applies `desired` to it (see the module's documentation), or None when there is nothing to
/// release. Guarded by the live resourceVersion: a change in between makes it fail with 409.
pub fn release_patch(
    takeover: &Takeover,
    live: &Value,
    desired: &Value,
    manager: &str,
    now: &str,
) -> Option<Value> {
    let metadata = live.get("metadata")?;
    let desired_metadata = desired.get("metadata").cloned().unwrap_or(Value::Null);
    let rendered = |field: &str, key: &str| {
        desired_metadata
            .get(field)
            .and_then(|m| m.get(key))
            .is_some()
    };
    let mut tool_managers: Vec<String> = tool_field_managers(takeover.from)
        .iter()
        .map(|m| m.to_string())
        .collect();
    tool_managers.extend(takeover.field_managers.iter().cloned());
    let api_version = desired.get("apiVersion").and_then(Value::as_str)?;
    let managed_fields = metadata
        .get("managedFields")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let folded = folded_managed_fields(managed_fields, &tool_managers, manager, api_version, now);
    // The apply removes what pallet's entry owns and the bundle does not set.
    let removed_by_apply = |field: &str, key: &str| {
        folded
            .as_ref()
            .and_then(|entries| entries.first())
            .and_then(|own| own.get("fieldsV1"))
            .and_then(|f| f.get("f:metadata"))
            .and_then(|m| m.get(format!("f:{field}")))
            .and_then(|m| m.get(format!("f:{key}")))
            .is_some()
    };
    let labels = string_map(metadata, "labels");
    let annotations = string_map(metadata, "annotations");
    let (marker_labels, marker_annotations) = markers(takeover);
    let mut remove_labels = Map::new();
    for (key, value) in marker_labels {
        let present = match (labels.get(key), value) {
            (Some(have), Some(want)) => *have == want,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if present && !rendered("labels", key) && !removed_by_apply("labels", key) {
            remove_labels.insert(key.to_string(), Value::Null);
        }
    }
    let mut remove_annotations = Map::new();
    for key in marker_annotations {
        if annotations.contains_key(key)
            && !rendered("annotations", key)
            && !removed_by_apply("annotations", key)
        {
            remove_annotations.insert(key.to_string(), Value::Null);
        }
    }
    if folded.is_none() && remove_labels.is_empty() && remove_annotations.is_empty() {
        return None;
    }
    let mut patch = Map::new();
    patch.insert(
        "resourceVersion".into(),
        metadata
            .get("resourceVersion")
            .cloned()
            .unwrap_or(Value::Null),
    );
    if let Some(folded) = folded {
        patch.insert("managedFields".into(), Value::Array(folded));
    }
    if !remove_labels.is_empty() {
        patch.insert("labels".into(), Value::Object(remove_labels));
    }
    if !remove_annotations.is_empty() {
        patch.insert("annotations".into(), Value::Object(remove_annotations));
    }
    Some(json!({ "metadata": patch }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn takeover(from: TakeoverSource, name: &str, namespace: &str) -> Takeover {
        Takeover {
            from,
            name: name.into(),
            namespace: namespace.into(),
            release_name: None,
            release_storage_namespace: None,
            release_records: None,
            field_managers: Vec::new(),
        }
    }

    #[test]
    fn each_tool_claims_by_its_own_markers() {
        let helm = takeover(TakeoverSource::Helm, "shop", "prod");
        let helm_meta =
            json!({"annotations": {HELM_RELEASE_NAME: "shop", HELM_RELEASE_NAMESPACE: "prod"}});
        assert!(claims(&helm, &helm_meta));
        assert!(!claims(
            &helm,
            &json!({"annotations": {HELM_RELEASE_NAME: "shop", HELM_RELEASE_NAMESPACE: "dev"}})
        ));
        assert!(!claims(&helm, &json!({"labels": {MANAGED_BY: "Helm"}})));

        let ks = takeover(TakeoverSource::FluxKustomization, "apps", "flux-system");
        assert!(claims(
            &ks,
            &json!({"labels": {KUSTOMIZE_NAME: "apps", KUSTOMIZE_NAMESPACE: "flux-system"}})
        ));
        assert!(!claims(&ks, &json!({"labels": {KUSTOMIZE_NAME: "apps"}})));
        assert!(!claims(&ks, &helm_meta));

        let hr = takeover(TakeoverSource::FluxHelmRelease, "podinfo", "flux-system");
        assert!(claims(
            &hr,
            &json!({"labels": {HELM_RELEASE_FLUX_NAME: "podinfo", HELM_RELEASE_FLUX_NAMESPACE: "flux-system"}})
        ));

        let argo = takeover(TakeoverSource::ArgoCD, "guestbook", "argocd");
        assert!(claims(
            &argo,
            &json!({"annotations": {ARGOCD_TRACKING_ID: "guestbook:apps/Deployment:web/guestbook"}})
        ));
        assert!(claims(
            &argo,
            &json!({"annotations": {ARGOCD_TRACKING_ID: "argocd_guestbook:/ConfigMap:web/x"}})
        ));
        assert!(claims(
            &argo,
            &json!({"labels": {ARGOCD_INSTANCE: "guestbook"}})
        ));
        assert!(!claims(
            &argo,
            &json!({"annotations": {ARGOCD_TRACKING_ID: "other:apps/Deployment:web/guestbook"}})
        ));
    }

    fn entry(manager: &str, operation: &str, fields: Value) -> Value {
        json!({"manager": manager, "operation": operation, "apiVersion": "apps/v1",
               "time": "2024-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields})
    }

    #[test]
    fn the_tools_fields_are_folded_into_pallets_apply_entry() {
        let managed = vec![
            entry(
                "helm",
                "Update",
                json!({"f:metadata": {"f:annotations": {".": {}, "f:meta.helm.sh/release-name": {}}},
                       "f:spec": {"f:replicas": {}}}),
            ),
            entry(
                "kube-controller-manager",
                "Update",
                json!({"f:status": {"f:replicas": {}}}),
            ),
            json!({"manager": "helm", "operation": "Update", "apiVersion": "apps/v1",
                   "subresource": "status", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}),
            entry(
                "pallet",
                "Apply",
                json!({"f:metadata": {"f:labels": {"f:pallet.dev/bundle-deployment": {}}}}),
            ),
        ];
        let folded = folded_managed_fields(&managed, &["helm".into()], "pallet", "apps/v1", "now")
            .expect("helm has entries");
        assert_eq!(folded.len(), 3, "{folded:#?}");
        assert_eq!(folded[0]["manager"], "pallet");
        assert_eq!(
            folded[0]["fieldsV1"],
            json!({"f:metadata": {"f:labels": {"f:pallet.dev/bundle-deployment": {}},
                                  "f:annotations": {".": {}, "f:meta.helm.sh/release-name": {}}},
                   "f:spec": {"f:replicas": {}}})
        );
        assert_eq!(folded[1]["manager"], "kube-controller-manager");
        assert_eq!(
            folded[2]["subresource"], "status",
            "a subresource's entry is not the main resource's"
        );
        assert_eq!(
            folded_managed_fields(&folded, &["helm".into()], "pallet", "apps/v1", "now"),
            None,
            "folding again finds nothing: helm's status entry is not the main resource's"
        );
        assert_eq!(
            folded_managed_fields(&managed[1..2], &["helm".into()], "pallet", "apps/v1", "now"),
            None
        );
    }

    #[test]
    fn without_an_apply_entry_of_its_own_pallet_gets_one() {
        let managed = vec![entry(
            "kustomize-controller",
            "Apply",
            json!({"f:data": {"f:a": {}}}),
        )];
        let folded = folded_managed_fields(
            &managed,
            &["kustomize-controller".into()],
            "pallet",
            "apps/v1",
            "2025-01-01T00:00:00Z",
        )
        .unwrap();
        assert_eq!(folded.len(), 1);
        assert_eq!(folded[0]["manager"], "pallet");
        assert_eq!(folded[0]["operation"], "Apply");
        assert_eq!(folded[0]["fieldsV1"], json!({"f:data": {"f:a": {}}}));
    }

    #[test]
    fn the_release_patch_removes_markers_the_bundle_does_not_render() {
        let helm = takeover(TakeoverSource::Helm, "shop", "prod");
        let live = json!({"metadata": {"resourceVersion": "42",
            "labels": {MANAGED_BY: "Helm", "app": "shop"},
            "annotations": {HELM_RELEASE_NAME: "shop", HELM_RELEASE_NAMESPACE: "prod", "keep": "me"},
            "managedFields": [entry("helm", "Update", json!({"f:data": {}}))]}});
        let desired =
            json!({"apiVersion": "apps/v1", "metadata": {"labels": {MANAGED_BY: "Helm"}}});
        let patch = release_patch(&helm, &live, &desired, "pallet", "now").unwrap();
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(
            patch["metadata"]["annotations"],
            json!({HELM_RELEASE_NAME: null, HELM_RELEASE_NAMESPACE: null})
        );
        assert!(
            patch["metadata"].get("labels").is_none(),
            "the chart renders managed-by itself: kept"
        );
        assert_eq!(patch["metadata"]["managedFields"][0]["manager"], "pallet");

        let unrendered = json!({"apiVersion": "apps/v1", "metadata": {}});
        let patch = release_patch(&helm, &live, &unrendered, "pallet", "now").unwrap();
        assert_eq!(patch["metadata"]["labels"], json!({MANAGED_BY: null}));

        let released = json!({"metadata": {"resourceVersion": "43", "labels": {"app": "shop"}}});
        assert_eq!(
            release_patch(&helm, &released, &desired, "pallet", "now"),
            None
        );

        // Markers helm's entry owns are left to the apply, which removes them in the same write
        // as its own changes.
        let owned = json!({"metadata": {"resourceVersion": "44",
            "annotations": {HELM_RELEASE_NAME: "shop", HELM_RELEASE_NAMESPACE: "prod"},
            "managedFields": [entry("helm", "Update", json!({"f:metadata": {"f:annotations": {
                "f:meta.helm.sh/release-name": {}, "f:meta.helm.sh/release-namespace": {}}}}))]}});
        let patch = release_patch(&helm, &owned, &desired, "pallet", "now").unwrap();
        assert!(patch["metadata"].get("annotations").is_none(), "{patch}");
        assert_eq!(
            patch["metadata"]["managedFields"][0]["fieldsV1"]["f:metadata"]["f:annotations"],
            json!({"f:meta.helm.sh/release-name": {}, "f:meta.helm.sh/release-namespace": {}})
        );
    }

    #[test]
    fn argo_cds_instance_label_is_a_marker_only_with_the_applications_name() {
        let argo = takeover(TakeoverSource::ArgoCD, "guestbook", "argocd");
        let desired = json!({"apiVersion": "v1", "metadata": {}});
        let live = |instance: &str| {
            json!({"metadata": {"resourceVersion": "1", "labels": {ARGOCD_INSTANCE: instance},
                "annotations": {ARGOCD_TRACKING_ID: "guestbook:/ConfigMap:web/c", LAST_APPLIED: "{}"}}})
        };
        let patch = release_patch(&argo, &live("guestbook"), &desired, "pallet", "now").unwrap();
        assert_eq!(patch["metadata"]["labels"], json!({ARGOCD_INSTANCE: null}));
        assert_eq!(
            patch["metadata"]["annotations"],
            json!({ARGOCD_TRACKING_ID: null, LAST_APPLIED: null})
        );
        let patch = release_patch(&argo, &live("other"), &desired, "pallet", "now").unwrap();
        assert!(patch["metadata"].get("labels").is_none());
    }
}
