//! The remote-clusters guide's BundleDeploymentSet, as a reader would use it: the API server
//! accepts it (its CRD's schema and rules), and the set controller's planner stamps from it what
//! the guide says: one BundleDeployment per selected cluster, in the guide's order, each naming
//! its cluster's Secret, with that cluster's values merged over the template's.

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/docs.rs"]
mod docs;

use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use pallet::api::BundleDeploymentSet;
use pallet::fleet::plan::{self, Action, Cluster};
use serde_json::{json, Value};

fn secret(name: &str, labels: &[(&str, &str)]) -> Cluster {
    Cluster {
        name: name.into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

#[test]
fn the_guides_set_stamps_a_bundle_per_selected_cluster() {
    let set: BundleDeploymentSet =
        serde_saphyr::from_str(&docs::example("bundle-deployment-set")).unwrap();
    let clusters = [
        secret(
            "prod-us",
            &[("pallet.dev/cluster", "true"), ("env", "prod")],
        ),
        secret(
            "prod-eu",
            &[("pallet.dev/cluster", "true"), ("env", "prod")],
        ),
        secret(
            "staging",
            &[("pallet.dev/cluster", "true"), ("env", "staging")],
        ),
    ];
    let planned = plan::plan(&set, &clusters, &[], "pallet-system").unwrap();
    let names: Vec<&str> = planned.clusters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["prod-eu", "prod-us"],
        "selected, in the set's order"
    );
    // maxUpdating 1: the first cluster only, the second waits for it.
    let stamps: Vec<_> = planned
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Apply(stamp) => Some(stamp),
            _ => None,
        })
        .collect();
    assert_eq!(stamps.len(), 1, "{:?}", planned.actions);
    let stamp = stamps[0];
    assert_eq!(stamp.name, "web-prod-eu");
    assert_eq!(stamp.labels["team"], "web");
    assert_eq!(stamp.labels["pallet.dev/set"], "web");
    let kube_config = stamp.spec.kube_config.as_ref().unwrap();
    assert_eq!(kube_config.secret_ref.name, "prod-eu");
    let values = serde_json::to_value(&stamp.spec.config).unwrap()["helm"]["values"].clone();
    assert_eq!(values, json!({"replicas": 5, "region": "eu"}));
}

#[tokio::test]
async fn the_api_server_accepts_the_guides_set() {
    let client = cluster::client().await;
    cluster::install_crd_from(&client, include_str!("../deploy/crd-set.yaml")).await;
    let resource = ApiResource {
        group: "pallet.dev".into(),
        version: "v1alpha1".into(),
        api_version: "pallet.dev/v1alpha1".into(),
        kind: "BundleDeploymentSet".into(),
        plural: "bundledeploymentsets".into(),
    };
    let sets: Api<DynamicObject> = Api::all_with(client, &resource);
    let mut example: Value =
        serde_saphyr::from_str(&docs::example("bundle-deployment-set")).unwrap();
    let name = cluster::unique_name("guide-set");
    example["metadata"]["name"] = json!(name);
    let object: DynamicObject = serde_json::from_value(example).unwrap();
    // The CRD may just have been created: its schema is served within moments.
    cluster::poll_until(
        "the API server to accept the guide's set",
        std::time::Duration::from_secs(30),
        || {
            let sets = sets.clone();
            let object = object.clone();
            async move {
                sets.create(
                    &PostParams {
                        dry_run: true,
                        ..Default::default()
                    },
                    &object,
                )
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
            }
        },
    )
    .await;
}
