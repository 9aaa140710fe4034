//! What a bundle's page reads from the cluster, with the viewer's client, through the same
//! functions the CLI uses (`pallet status`, `tree`, `events`, the revision store); and the pure
//! comparisons its diffs are made of.

use std::collections::BTreeMap;

use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::Client;
use serde_json::Value;

use super::changes::ChangeSource;
use super::index::Index;
use super::model::{self, BundleView, DriftView};
use super::state::state_of;
use crate::api::{BundleDeployment, ObjectReference};
use crate::cli::diff::{label, sides_diff};

/// Objects of a bundle read live on its page (`pallet tree` shows them all).
const OBJECTS_READ: usize = 300;
/// Drifted objects shown as a diff.
const DRIFT_DIFFS: usize = 20;
/// Events shown.
const EVENTS_SHOWN: usize = 50;
/// Lines of context around each change of a diff.
const CONTEXT_LINES: usize = 3;

/// Where a bundle's page reads.
pub struct Reads<'a> {
    /// The viewer's client.
    pub client: &'a Client,
    /// The agent's namespace, where revision snapshots are stored.
    pub store_namespace: &'a str,
    /// The change log.
    pub changes: &'a ChangeSource,
    /// The index (for dependents and dependencies' states).
    pub index: &'a Index,
}

/// The message of an error for a page: the API server's own message when it answered, else the
/// whole chain.
pub fn error_text(err: &anyhow::Error) -> String {
    api_status(err)
        .map(|(_, message)| message)
        .unwrap_or_else(|| crate::cli::error_message(err))
}

/// The API server's answer (HTTP code and message) in `err`'s chain, if there is one.
pub fn api_status(err: &anyhow::Error) -> Option<(u16, String)> {
    err.chain()
        .find_map(|cause| match cause.downcast_ref::<kube::Error>() {
            Some(kube::Error::Api(status)) => Some((status.code, status.message.clone())),
            _ => None,
        })
}

/// Everything on `name`'s page.
pub async fn bundle_view(reads: &Reads<'_>, name: &str, now: i64) -> anyhow::Result<BundleView> {
    let bd = crate::cli::ops::get_bd(reads.client, name).await?;
    let inventory = crate::cli::tree::inventory(&bd);
    let shown = &inventory[..inventory.len().min(OBJECTS_READ)];
    let (nodes, events, drift) = futures::join!(
        crate::cli::tree::nodes(reads.client, shown),
        crate::cli::events::lines(reads.client, name),
        drift_view(reads.client, reads.store_namespace, &bd),
    );
    let objects = nodes
        .map(|nodes| model::group_by_kind(shown, nodes))
        .map_err(|e| error_text(&e));
    let changes = if reads.changes.is_configured() {
        let source = reads.changes.clone();
        let bundle = name.to_string();
        Some(
            tokio::task::spawn_blocking(move || source.recent(&bundle))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string())),
        )
    } else {
        None
    };
    let provenance = model::provenance(&bd, objects.as_ref().map(Vec::as_slice).unwrap_or(&[]));
    let dependents = reads.index.dependents(name);
    let mut related: Vec<String> = bd
        .spec
        .depends_on
        .iter()
        .filter(|d| d.is_bundle_deployment())
        .map(|d| d.name.clone())
        .collect();
    related.extend(dependents.iter().cloned());
    let dependencies = model::dependencies(&bd, &dependents, &reads.index.states(&related));
    Ok(BundleView {
        state: state_of(&bd),
        conditions: model::conditions(&bd, now),
        timeline: model::timeline(&bd, now),
        objects,
        objects_left_out: inventory.len() - shown.len(),
        drift,
        provenance,
        dependencies,
        events: events
            .map(|mut lines| {
                lines.reverse();
                lines.truncate(EVENTS_SHOWN);
                lines
            })
            .map_err(|e| error_text(&e)),
        changes,
        now,
        bd,
    })
}

/// `live` cut down to the fields `shape` sets (maps recursively; anything else whole): what the
/// agent compares when it decides whether an object drifted.
pub fn project(live: &Value, shape: &Value) -> Value {
    match (live, shape) {
        (Value::Object(live), Value::Object(shape)) => Value::Object(
            shape
                .iter()
                .filter_map(|(key, sub)| live.get(key).map(|l| (key.clone(), project(l, sub))))
                .collect(),
        ),
        (live, _) => live.clone(),
    }
}

/// The reference of `object`, its namespace defaulted to `install_namespace`.
fn key_of(object: &Value, install_namespace: Option<&str>) -> (String, String, String, String) {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let group = api_version
        .rsplit_once('/')
        .map(|(g, _)| g)
        .unwrap_or_default();
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .or(install_namespace)
        .unwrap_or_default();
    (
        group.to_string(),
        object["kind"].as_str().unwrap_or_default().to_string(),
        namespace.to_string(),
        object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

async fn live_object(
    client: &Client,
    reference: &ObjectReference,
) -> anyhow::Result<Option<Value>> {
    let gvk = GroupVersionKind::gvk(&reference.group, &reference.version, &reference.kind);
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk).await?;
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => Api::namespaced_with(client.clone(), &reference.namespace, &resource),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    Ok(api
        .get_opt(&reference.name)
        .await?
        .map(|o| serde_json::to_value(o).unwrap_or(Value::Null)))
}

/// Drift of `bd`, each drifted object compared with the active revision's stored content.
async fn drift_view(
    client: &Client,
    store_namespace: &str,
    bd: &BundleDeployment,
) -> Option<DriftView> {
    let status = bd.status.as_ref()?;
    let drift = status.drift.as_ref().filter(|d| d.count > 0)?;
    let objects = drift
        .objects
        .iter()
        .map(|o| {
            (
                crate::cli::plan::reference_text(o),
                o.message.clone().unwrap_or_else(|| "differs".into()),
            )
        })
        .collect();
    let diffs = async {
        let active = status
            .active_revision
            .ok_or_else(|| anyhow::anyhow!("no active revision"))?;
        let name = bd.metadata.name.clone().unwrap_or_default();
        let record = crate::revision::RevisionStore::new(client.clone(), store_namespace)
            .load(&name, active)
            .await
            .map_err(|e| anyhow::anyhow!("reading revision {active} from the store: {e}"))?;
        let install_namespace = bd.spec.install_namespace.as_deref();
        let desired: BTreeMap<_, &Value> = record
            .objects
            .iter()
            .map(|o| (key_of(o, install_namespace), o))
            .collect();
        let mut diffs = Vec::new();
        for reference in drift.objects.iter().take(DRIFT_DIFFS) {
            let key = (
                reference.group.clone(),
                reference.kind.clone(),
                reference.namespace.clone(),
                reference.name.clone(),
            );
            let Some(want) = desired.get(&key) else {
                continue;
            };
            let live = live_object(client, reference).await?;
            let projected = live.as_ref().map(|l| project(l, want));
            let object = label(&reference.kind, Some(&reference.namespace), &reference.name);
            let text = sides_diff(
                (&format!("revision-{active}"), Some(want)),
                ("live", projected.as_ref()),
                &object,
                CONTEXT_LINES,
            )?;
            if !text.is_empty() {
                diffs.push((object, text));
            }
        }
        anyhow::Ok(diffs)
    }
    .await
    .map_err(|e| error_text(&e));
    Some(DriftView {
        count: drift.count,
        objects,
        diffs,
    })
}

/// Per-object diffs from the objects of one revision to another's (added, removed, changed),
/// in key order; Secret values masked.
pub fn diff_objects(
    (from_label, from): (&str, &[Value]),
    (to_label, to): (&str, &[Value]),
    install_namespace: Option<&str>,
) -> anyhow::Result<Vec<(String, String)>> {
    let index = |objects: &[Value]| -> BTreeMap<_, Value> {
        objects
            .iter()
            .map(|o| (key_of(o, install_namespace), o.clone()))
            .collect()
    };
    let (before, after) = (index(from), index(to));
    let keys: std::collections::BTreeSet<_> = before.keys().chain(after.keys()).collect();
    let mut out = Vec::new();
    for key in keys {
        let object = label(&key.1, Some(&key.2), &key.3);
        let text = sides_diff(
            (from_label, before.get(key)),
            (to_label, after.get(key)),
            &object,
            CONTEXT_LINES,
        )?;
        if !text.is_empty() {
            out.push((object, text));
        }
    }
    Ok(out)
}

/// The object diff between two stored revisions of `name`.
pub async fn revision_diff(
    client: &Client,
    store_namespace: &str,
    name: &str,
    from: i64,
    to: i64,
) -> anyhow::Result<Vec<(String, String)>> {
    let bd = crate::cli::ops::get_bd(client, name).await?;
    let store = crate::revision::RevisionStore::new(client.clone(), store_namespace);
    let load = |n: i64| {
        let store = store.clone();
        let name = name.to_string();
        async move {
            store
                .load(&name, n)
                .await
                .map_err(|e| anyhow::anyhow!("reading revision {n} of {name} from the store: {e}"))
        }
    };
    let (a, b) = futures::try_join!(load(from), load(to))?;
    diff_objects(
        (&format!("revision-{from}"), &a.objects),
        (&format!("revision-{to}"), &b.objects),
        bd.spec.install_namespace.as_deref(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn live_objects_are_projected_on_the_bundles_fields() {
        let live = json!({"metadata": {"name": "a", "uid": "u", "labels": {"x": "1"}},
                          "spec": {"replicas": 3, "template": {"image": "v2"}}, "status": {}});
        let shape = json!({"metadata": {"name": "a"}, "spec": {"replicas": 1, "template": {"image": "v1"}}});
        assert_eq!(
            project(&live, &shape),
            json!({"metadata": {"name": "a"}, "spec": {"replicas": 3, "template": {"image": "v2"}}})
        );
    }

    #[test]
    fn revisions_are_compared_object_by_object() {
        let cm = |v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "conf"}, "data": {"v": v}});
        let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "web"}});
        let diffs = diff_objects(
            ("revision-1", &[cm("1"), deploy.clone()]),
            ("revision-2", &[cm("2")]),
            Some("web"),
        )
        .unwrap();
        let labels: Vec<&str> = diffs.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(labels, ["ConfigMap/web/conf", "Deployment/web/web"]);
        assert!(
            diffs[0].1.starts_with(
                "--- revision-1/ConfigMap/web/conf\n+++ revision-2/ConfigMap/web/conf"
            ),
            "{}",
            diffs[0].1
        );
        assert!(
            diffs[0].1.contains("\n-  v: \"1\"\n+  v: \"2\"\n"),
            "{}",
            diffs[0].1
        );
        assert!(
            diffs[1].1.contains("\n-kind: Deployment\n"),
            "{}",
            diffs[1].1
        );
    }
}
