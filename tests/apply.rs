//! The apply layer against the local control plane: staged server-side apply, no writes when
//! nothing changed, ownership policy, refusals, optional kinds and prune.

#[path = "support/cluster.rs"]
mod cluster;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use kube::Client;
use pallet::api::CollisionProtection;
use pallet::apply::plan::OWNER_LABEL;
use pallet::apply::{Applier, ApplyError, KindResolver, Outcome};
use pallet_formats::{Object, Origin};
use serde_json::{json, Value};

fn object(body: Value) -> Object {
    Object::new(
        body,
        Origin {
            file: "test.yaml".into(),
            document: 0,
            line: 1,
        },
    )
    .unwrap()
}

fn applier(client: &Client, owner: &str, namespace: &str, policy: CollisionProtection) -> Applier {
    Applier {
        client: client.clone(),
        kinds: KindResolver::default(),
        owner: owner.to_string(),
        install_namespace: Some(namespace.to_string()),
        collision_protection: policy,
        parallelism: 4,
        journal: Default::default(),
        revision: None,
        live: None,
        takeover: None,
        rules: Default::default(),
    }
}

fn outcomes(applied: &[pallet::apply::Applied]) -> Vec<(String, Outcome)> {
    applied
        .iter()
        .map(|a| (a.key.name.clone(), a.outcome.clone()))
        .collect()
}

#[tokio::test]
async fn creates_in_stages_then_writes_nothing_when_unchanged() {
    let client = cluster::client().await;
    let ns = cluster::unique_name("apply");
    let role = format!("{ns}-reader");
    let objects = vec![
        // Render order puts the ConfigMap first; staging must still create the Namespace first.
        object(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"a": "1"}}),
        ),
        object(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}),
        ),
        object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})),
    ];
    let applier = applier(&client, "bd-apply", &ns, CollisionProtection::IfNoOwner);

    let first = applier.apply(&objects).await.expect("first apply");
    assert_eq!(
        outcomes(&first),
        vec![
            (ns.clone(), Outcome::Created),
            (role.clone(), Outcome::Created),
            ("settings".into(), Outcome::Created)
        ]
    );
    let cm: ConfigMap = Api::namespaced(client.clone(), &ns)
        .get("settings")
        .await
        .unwrap();
    assert_eq!(cm.metadata.labels.unwrap()[OWNER_LABEL], "bd-apply");
    let managers: Vec<String> = cm
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, ["pallet"], "one field manager");

    let second = applier.apply(&objects).await.expect("second apply");
    assert!(
        second.iter().all(|a| a.outcome == Outcome::Unchanged),
        "{:?}",
        outcomes(&second)
    );
    for (a, b) in first.iter().zip(&second) {
        assert_eq!(
            a.resource_version_after, b.resource_version_after,
            "{} was written again",
            a.key
        );
    }

    let mut changed = objects.clone();
    changed[0] = object(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"a": "2"}}),
    );
    let third = applier.apply(&changed).await.expect("third apply");
    assert_eq!(
        third
            .iter()
            .filter(|a| a.outcome == Outcome::Updated)
            .count(),
        1
    );
    let cm: ConfigMap = Api::namespaced(client.clone(), &ns)
        .get("settings")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["a"], "2");

    cleanup_namespace(&client, &ns).await;
}

/// Render order lists the webhook configuration, the autoscaler and the Deployment first; the
/// apply writes the ServiceAccount and ConfigMap the Pods use before the Deployment, the
/// autoscaler after it, and the webhook configuration last (each stage finished before the next
/// starts, so the resource versions, which etcd hands out in write order, say the same).
#[tokio::test]
async fn workloads_come_after_what_their_pods_use_then_autoscalers_and_webhooks_last() {
    let client = cluster::client().await;
    let ns = cluster::unique_name("apply-order");
    create_namespace(&client, &ns).await;
    let hook = format!("{ns}-hook");
    let objects = vec![
        object(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": hook},
            "webhooks": [{
                "name": "check.example.invalid", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                "failurePolicy": "Ignore",
                "clientConfig": {"service": {"namespace": ns, "name": "checker", "port": 443}},
                "rules": [{"apiGroups": ["example.invalid"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["things"]}]
            }]
        })),
        object(json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "app"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "app"},
                "minReplicas": 1, "maxReplicas": 2}
        })),
        object(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app"},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "app"}},
                "template": {"metadata": {"labels": {"app": "app"}},
                    "spec": {"serviceAccountName": "app", "containers": [{"name": "c", "image": "hello:v1",
                        "envFrom": [{"configMapRef": {"name": "app"}}]}]}}}
        })),
        object(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "app"}})),
        object(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"}, "data": {"a": "1"}}),
        ),
    ];
    let applier = applier(&client, "bd-order", &ns, CollisionProtection::IfNoOwner);
    let applied = applier.apply(&objects).await.expect("apply");
    let order: Vec<String> = applied.iter().map(|a| a.key.kind.clone()).collect();
    assert_eq!(
        order,
        [
            "ServiceAccount",
            "ConfigMap",
            "Deployment",
            "HorizontalPodAutoscaler",
            "ValidatingWebhookConfiguration"
        ]
    );
    let version = |kind: &str| -> u64 {
        let a = applied.iter().find(|a| a.key.kind == kind).expect(kind);
        a.resource_version_after
            .as_deref()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{kind}: resource version {:?}", a.resource_version_after))
    };
    let used = version("ServiceAccount").max(version("ConfigMap"));
    assert!(
        used < version("Deployment")
            && version("Deployment") < version("HorizontalPodAutoscaler")
            && version("HorizontalPodAutoscaler") < version("ValidatingWebhookConfiguration"),
        "written out of order: ServiceAccount {}, ConfigMap {}, Deployment {}, autoscaler {}, webhook {}",
        version("ServiceAccount"),
        version("ConfigMap"),
        version("Deployment"),
        version("HorizontalPodAutoscaler"),
        version("ValidatingWebhookConfiguration")
    );

    let _ = Api::<DynamicObject>::all_with(
        client.clone(),
        &ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
        )),
    )
    .delete(&hook, &Default::default())
    .await;
    cleanup_namespace(&client, &ns).await;
}

#[tokio::test]
async fn crd_and_its_custom_resource_apply_in_one_set() {
    let client = cluster::client().await;
    let ns = cluster::unique_name("crd");
    let group = format!("{}.example.com", cluster::unique_name("g"));
    let objects = vec![
        object(
            json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 3}}),
        ),
        object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})),
        object(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("widgets.{group}")},
            "spec": {"group": group, "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                    "type": "object", "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}}}]}
        })),
    ];
    let applier = applier(&client, "bd-crd", &ns, CollisionProtection::IfNoOwner);
    let applied = applier
        .apply(&objects)
        .await
        .expect("CRD, namespace and custom resource apply");
    assert!(
        applied.iter().all(|a| a.outcome == Outcome::Created),
        "{:?}",
        outcomes(&applied)
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(&group, "v1", "Widget"),
            "widgets",
        ),
    );
    assert_eq!(widgets.get("w1").await.unwrap().data["spec"]["size"], 3);

    let crd_key = applied
        .iter()
        .find(|a| a.key.kind == "CustomResourceDefinition")
        .unwrap()
        .key
        .clone();
    applier
        .prune(&[(crd_key, "apiextensions.k8s.io/v1".into())])
        .await
        .expect("the test's CRD is pruned");
    cleanup_namespace(&client, &ns).await;
}

#[tokio::test]
async fn collision_protection_decides_over_existing_objects() {
    let client = cluster::client().await;
    let ns = cluster::unique_name("collide");
    create_namespace(&client, &ns).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let handmade: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "handmade"}, "data": {"k": "v"}}))
            .unwrap();
    cms.create(&PostParams::default(), &handmade).await.unwrap();
    let desired = vec![object(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "handmade"}, "data": {"k": "pallet"}}),
    )];

    let err = applier(&client, "bd-a", &ns, CollisionProtection::Prevent)
        .apply(&desired)
        .await
        .unwrap_err();
    assert_eq!(err.category(), "OwnershipConflict");
    assert!(
        err.to_string()
            .contains(&format!("ConfigMap {ns}/handmade already exists")),
        "{err}"
    );
    assert!(err.to_string().contains("created outside pallet"), "{err}");
    assert_eq!(
        cms.get("handmade").await.unwrap().data.unwrap()["k"],
        "v",
        "untouched after the conflict"
    );

    let adopted = applier(&client, "bd-a", &ns, CollisionProtection::IfNoOwner)
        .apply(&desired)
        .await
        .unwrap();
    assert_eq!(adopted[0].outcome, Outcome::Updated);
    assert_eq!(adopted[0].adopted_from, Some(None));

    let err = applier(&client, "bd-b", &ns, CollisionProtection::IfNoOwner)
        .apply(&desired)
        .await
        .unwrap_err();
    match &err {
        ApplyError::OwnershipConflict { owner, .. } => assert_eq!(owner.as_deref(), Some("bd-a")),
        other => panic!("expected a conflict, got {other}"),
    }
    assert!(
        err.to_string().contains("owned by BundleDeployment bd-a"),
        "{err}"
    );

    let taken = applier(&client, "bd-b", &ns, CollisionProtection::None)
        .apply(&desired)
        .await
        .unwrap();
    assert_eq!(taken[0].adopted_from, Some(Some("bd-a".to_string())));
    assert_eq!(
        cms.get("handmade").await.unwrap().metadata.labels.unwrap()[OWNER_LABEL],
        "bd-b"
    );
    cleanup_namespace(&client, &ns).await;
}

#[tokio::test]
async fn refused_objects_and_unserved_kinds_are_reported_by_name() {
    let client = cluster::client().await;
    let ns = cluster::unique_name("refuse");
    create_namespace(&client, &ns).await;
    let applier = applier(&client, "bd-r", &ns, CollisionProtection::IfNoOwner);

    // A Deployment without a selector or containers is invalid.
    let invalid = vec![object(
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "broken"}, "spec": {}}),
    )];
    let err = applier.apply(&invalid).await.unwrap_err();
    assert_eq!(err.category(), "ObjectRejected");
    assert!(!err.is_transient());
    assert!(
        err.to_string()
            .contains(&format!("Deployment.apps {ns}/broken")),
        "{err}"
    );
    assert!(err.to_string().contains("spec.selector"), "{err}");

    let unserved = object(
        json!({"apiVersion": "nothing.example.com/v1", "kind": "Ghost", "metadata": {"name": "g"}}),
    );
    let err = applier
        .apply(std::slice::from_ref(&unserved))
        .await
        .unwrap_err();
    assert_eq!(err.category(), "KindNotServed");
    assert!(
        err.to_string()
            .contains("does not serve nothing.example.com/v1 Ghost"),
        "{err}"
    );

    let optional = object(
        json!({"apiVersion": "nothing.example.com/v1", "kind": "Ghost",
        "metadata": {"name": "g", "annotations": {"pallet.dev/optional": "true"}}}),
    );
    let applied = applier.apply(&[optional]).await.unwrap();
    assert_eq!(applied[0].outcome, Outcome::Skipped);
    cleanup_namespace(&client, &ns).await;
}

#[tokio::test]
async fn prune_deletes_only_objects_this_owner_labelled() {
    let client = cluster::client().await;
    let ns = cluster::unique_name("prune");
    create_namespace(&client, &ns).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let ours = vec![object(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ours"}}),
    )];
    let applier = applier(&client, "bd-p", &ns, CollisionProtection::IfNoOwner);
    let applied = applier.apply(&ours).await.unwrap();
    let theirs: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "theirs"}})).unwrap();
    cms.create(&PostParams::default(), &theirs).await.unwrap();

    let mut theirs_key = applied[0].key.clone();
    theirs_key.name = "theirs".into();
    let deleted = applier
        .prune(&[
            (applied[0].key.clone(), "v1".into()),
            (theirs_key, "v1".into()),
        ])
        .await
        .unwrap();
    assert_eq!(deleted.deleted, vec![applied[0].key.clone()]);
    assert!(cms.get_opt("ours").await.unwrap().is_none());
    assert!(
        cms.get_opt("theirs").await.unwrap().is_some(),
        "an object without our label is never pruned"
    );
    cleanup_namespace(&client, &ns).await;
}

async fn create_namespace(client: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

async fn cleanup_namespace(client: &Client, name: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &Default::default())
        .await;
}

/// Live copies of ConfigMaps as a watch leaves them when it has listed the kind and found no
/// pallet-owned ConfigMap.
fn config_maps_listed_empty() -> (ApiResource, pallet::apply::live::LiveObjects) {
    let resource = ApiResource::erase::<ConfigMap>(&());
    let live = pallet::apply::live::LiveObjects::default();
    live.list_started(&resource);
    live.list_done(&resource);
    (resource, live)
}

/// With live copies that list no pallet-owned object by a name, a new object is created by one
/// create-only apply; one that exists without the label (made by someone else) is not
/// overwritten by it: the create-only apply is refused and the ownership policy decides, as
/// with a read. Objects found in the copies are compared there and not written when unchanged.
#[tokio::test]
async fn live_copies_create_without_a_read_and_never_overwrite_a_foreign_object() {
    use pallet::apply::live::{Change, Lookup};
    let client = cluster::client().await;
    let ns = cluster::unique_name("live");
    create_namespace(&client, &ns).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let handmade: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "handmade"}, "data": {"k": "v"}}))
            .unwrap();
    cms.create(&PostParams::default(), &handmade).await.unwrap();
    let (resource, live) = config_maps_listed_empty();
    let with_copies = |policy| Applier {
        live: Some(live.clone()),
        ..applier(&client, "bd-live", &ns, policy)
    };
    let fresh = object(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fresh"}, "data": {"k": "1"}}),
    );
    let applied = with_copies(CollisionProtection::Prevent)
        .apply(std::slice::from_ref(&fresh))
        .await
        .unwrap();
    assert_eq!(applied[0].outcome, Outcome::Created);
    let created = cms.get("fresh").await.unwrap();
    assert_eq!(created.metadata.labels.unwrap()[OWNER_LABEL], "bd-live");
    let managers: Vec<(String, String)> = created
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .map(|m| (m.manager.unwrap(), m.operation.unwrap()))
        .collect();
    assert_eq!(
        managers,
        [("pallet".to_string(), "Apply".to_string())],
        "created by server-side apply, owned as any other apply"
    );
    // Until the watch brings the create's echo, the answer is not taken for the copy (a delete
    // may have come in between, leaving no copy either): the next apply reads the object,
    // compares and writes nothing.
    assert!(matches!(
        live.lookup(&resource, Some(&ns), "fresh"),
        Lookup::Unknown
    ));
    let again = with_copies(CollisionProtection::Prevent)
        .apply(std::slice::from_ref(&fresh))
        .await
        .unwrap();
    assert_eq!(again[0].outcome, Outcome::Unchanged);
    assert_eq!(
        cms.get("fresh").await.unwrap().metadata.resource_version,
        applied[0].resource_version_after
    );
    // The echo (as the watch would deliver it) is no news, and is the copy from then on.
    let echo: DynamicObject = serde_json::from_value(applied[0].live.clone().unwrap()).unwrap();
    assert_eq!(live.applied(&resource, echo), Change::Quiet);
    assert!(matches!(
        live.lookup(&resource, Some(&ns), "fresh"),
        Lookup::Found(_)
    ));

    let foreign = object(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "handmade"}, "data": {"k": "pallet"}}),
    );
    let err = with_copies(CollisionProtection::Prevent)
        .apply(std::slice::from_ref(&foreign))
        .await
        .unwrap_err();
    assert_eq!(err.category(), "OwnershipConflict", "{err}");
    assert_eq!(
        cms.get("handmade").await.unwrap().data.unwrap()["k"],
        "v",
        "the create-only apply left the existing object untouched"
    );
    let adopted = with_copies(CollisionProtection::IfNoOwner)
        .apply(std::slice::from_ref(&foreign))
        .await
        .unwrap();
    assert_eq!(adopted[0].outcome, Outcome::Updated);
    assert_eq!(adopted[0].adopted_from, Some(None));
    cleanup_namespace(&client, &ns).await;
}

/// A test namespace and an applier (owner `owner`) with live copies of ConfigMaps that have
/// listed none.
struct Copies {
    client: Client,
    ns: String,
    cms: Api<ConfigMap>,
    resource: ApiResource,
    live: pallet::apply::live::LiveObjects,
    applier: Applier,
}

impl Copies {
    async fn new(prefix: &str, owner: &str) -> Copies {
        let client = cluster::client().await;
        let ns = cluster::unique_name(prefix);
        create_namespace(&client, &ns).await;
        let (resource, live) = config_maps_listed_empty();
        Copies {
            cms: Api::namespaced(client.clone(), &ns),
            applier: Applier {
                live: Some(live.clone()),
                ..applier(&client, owner, &ns, CollisionProtection::Prevent)
            },
            client,
            ns,
            resource,
            live,
        }
    }
}

/// A pass decides on the live copy, and the object may be deleted before its write: server-side
/// apply then creates it, and the write is reported as the create it was (nothing before it,
/// no fields changed), not as an update of the object the copy showed.
#[tokio::test]
async fn a_write_that_finds_its_object_deleted_since_the_copy_is_a_create() {
    let copies = Copies::new("recreated", "bd-recreated").await;
    let desired = object(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"}, "data": {"k": "1"}}),
    );
    let first = copies
        .applier
        .apply(std::slice::from_ref(&desired))
        .await
        .unwrap();
    assert_eq!(first[0].outcome, Outcome::Created);
    // The copy shows the object changed out of band; it is deleted before the next write.
    let mut edited: DynamicObject = serde_json::from_value(first[0].live.clone().unwrap()).unwrap();
    edited.data["data"]["k"] = json!("edited");
    copies.live.applied(&copies.resource, edited);
    let old_uid = copies.cms.get("app").await.unwrap().metadata.uid;
    copies.cms.delete("app", &Default::default()).await.unwrap();
    let again = copies
        .applier
        .apply(std::slice::from_ref(&desired))
        .await
        .unwrap();
    assert_eq!(again[0].outcome, Outcome::Created, "{:?}", again[0]);
    assert_eq!(again[0].resource_version_before, None);
    assert!(again[0].fields_changed.is_empty(), "{:?}", again[0]);
    let now = copies.cms.get("app").await.unwrap();
    assert_ne!(now.metadata.uid, old_uid, "a new object");
    assert_eq!(now.data.unwrap()["k"], "1");
    assert_eq!(
        now.metadata.resource_version,
        again[0].resource_version_after
    );
    cleanup_namespace(&copies.client, &copies.ns).await;
}

/// An object a prune keeps by its policy loses pallet's label; until the watch reports that, the
/// live copy still shows the label, and a prune in between reads the object instead of
/// orphaning (and recording) it a second time.
#[tokio::test]
async fn a_prune_before_the_watch_reports_an_orphan_does_not_orphan_it_again() {
    let copies = Copies::new("orphan", "bd-orphan").await;
    let kept = object(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "kept", "annotations": {"pallet.dev/prune": "Disabled"}},
        "data": {"k": "1"},
    }));
    let applied = copies
        .applier
        .apply(std::slice::from_ref(&kept))
        .await
        .unwrap();
    let echo: DynamicObject = serde_json::from_value(applied[0].live.clone().unwrap()).unwrap();
    copies.live.applied(&copies.resource, echo);
    let keys = [(applied[0].key.clone(), "v1".to_string())];
    let first = copies.applier.prune(&keys).await.unwrap();
    assert_eq!(first.kept.len(), 1, "{:?}", first.kept);
    let labels = copies
        .cms
        .get("kept")
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap_or_default();
    assert!(!labels.contains_key(OWNER_LABEL), "{labels:?}");
    // No watch event yet: the copy still carries the label.
    let again = copies.applier.prune(&keys).await.unwrap();
    assert!(again.kept.is_empty(), "orphaned again: {:?}", again.kept);
    assert!(again.deleted.is_empty());
    assert!(
        copies.cms.get_opt("kept").await.unwrap().is_some(),
        "kept on the cluster"
    );
    cleanup_namespace(&copies.client, &copies.ns).await;
}
