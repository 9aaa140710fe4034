//! The work of the least agent: what an agent installing each bundle from its own OCI artifact
//! cannot avoid (pull the artifact, apply its objects, write one status), done by the benchmark's
//! own process as cheaply as it can. Used by the scale benchmark's floors m and m2 and the
//! bundles benchmark's stand-in.

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{json, Value};

/// The user's one `kubectl apply --server-side` of `file` with the admin kubeconfig `admin`,
/// started on a blocking thread while the stand-in works; its output when awaited.
pub fn user_apply_in_background(
    admin: std::path::PathBuf,
    file: std::path::PathBuf,
) -> tokio::task::JoinHandle<String> {
    tokio::task::spawn_blocking(move || {
        super::kubectl_with(
            &admin,
            &[
                "apply",
                "--server-side",
                "--field-manager=bench-user",
                "-f",
                file.to_str().expect("utf-8 path"),
            ],
        )
    })
}

/// Applies the objects of `yaml` in `ns` one after the other, by server-side apply, as the
/// agent applies a bundle's objects.
pub async fn apply_objects(client: &kube::Client, ns: &str, yaml: &str) {
    let objects: Vec<DynamicObject> = serde_saphyr::from_multiple(yaml).expect("the app's objects");
    for object in objects {
        let types = object.types.clone().expect("apiVersion and kind");
        let gvk = GroupVersionKind::try_from(&types).expect("a group, version and kind");
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk));
        let name = object.metadata.name.clone().expect("a name");
        api.patch(
            &name,
            &PatchParams::apply("bench-stand-in"),
            &Patch::Apply(&object),
        )
        .await
        .expect("applying an app's object");
    }
}

/// Pulls `image` (`host/repo@digest`) as the agent does: its manifest, then its one layer.
// The benchmark reads its own fixture registry's answers, not untrusted input.
#[allow(clippy::disallowed_methods)]
pub async fn pull(http: &reqwest::Client, image: &str) {
    let (host, rest) = image.split_once('/').expect("host/repo@digest");
    let (repo, digest) = rest.split_once('@').expect("repo@digest");
    let get = |path: String, accept: &'static str| {
        let request = http
            .get(format!("http://{host}/v2/{repo}/{path}"))
            .header("Accept", accept);
        async move {
            let response = request.send().await.expect("a registry request");
            assert!(
                response.status().is_success(),
                "{path}: {}",
                response.status()
            );
            response.bytes().await.expect("a registry response")
        }
    };
    let manifest = get(
        format!("manifests/{digest}"),
        "application/vnd.oci.image.manifest.v1+json",
    )
    .await;
    let manifest: Value = serde_json::from_slice(&manifest).expect("an OCI manifest");
    let layer = manifest["layers"][0]["digest"]
        .as_str()
        .expect("a layer")
        .to_string();
    get(format!("blobs/{layer}"), "*/*").await;
}

/// The status pallet writes when revision `revision` of app `app` (its objects in `ns`, one of
/// each kind of `kinds`: kind and group) is healthy (the shape of `tools/write_costs.py`'s full
/// status: eight conditions, the inventory, one revision).
pub fn ready_status(
    ns: &str,
    app: &str,
    image: &str,
    revision: i64,
    kinds: &[(&str, &str)],
) -> Value {
    // The size of a timestamp is what counts here, not its value.
    let now = "2026-11-25T10:00:00Z";
    let count = kinds.len();
    let conditions: Vec<Value> = [
        (
            "RolledBack",
            "False",
            "UpToDate",
            "revision is what the spec and the sources render".to_string(),
        ),
        ("Stalled", "False", "Idle", "not stalled".to_string()),
        (
            "Reconciling",
            "False",
            "Idle",
            "nothing in progress".to_string(),
        ),
        (
            "Ready",
            "True",
            "Healthy",
            format!("revision healthy: {count} objects installed"),
        ),
        (
            "Unpacked",
            "True",
            "Unpacked",
            "all sources fetched and resolved".to_string(),
        ),
        (
            "Installed",
            "True",
            "Installed",
            format!("revision: {count} objects applied"),
        ),
        (
            "Healthy",
            "True",
            "Healthy",
            format!("revision: all {count} objects healthy"),
        ),
        (
            "Paused",
            "False",
            "Active",
            "reconciling normally".to_string(),
        ),
    ]
    .iter()
    .map(|(kind, status, reason, message)| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": now, "observedGeneration": revision})
    })
    .collect();
    let objects: Vec<Value> = kinds
        .iter()
        .map(|(kind, group)| {
            let mut object = json!({"kind": kind, "version": "v1", "namespace": ns, "name": app});
            if !group.is_empty() {
                object["group"] = json!(group);
            }
            object
        })
        .collect();
    json!({
        "observedGeneration": revision,
        "activeRevision": revision,
        "lastHealthyRevision": revision,
        "agent": "bench-stand-in",
        "conditions": conditions,
        "inventory": {"count": count, "objects": objects},
        "revisions": [{
            "number": revision, "generation": revision, "phase": "Healthy", "objects": count,
            "digest": format!("sha256:{}", "4".repeat(64)), "specDigest": format!("sha256:{}", "5".repeat(64)),
            "appliedAt": now, "healthyAt": now,
            "sources": [{"kind": "image", "ref": image, "resolved": image.rsplit_once('@').map_or("", |(_, d)| d)}],
        }],
    })
}
