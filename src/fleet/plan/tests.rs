use super::*;
use serde_json::json;

fn set(spec: serde_json::Value, status: serde_json::Value) -> BundleDeploymentSet {
    let mut object = json!({
        "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeploymentSet",
        "metadata": {"name": "web", "generation": 1},
        "spec": spec,
    });
    if !status.is_null() {
        object["status"] = status;
    }
    serde_json::from_value(object).unwrap()
}

fn spec(image: &str, rollout: serde_json::Value) -> serde_json::Value {
    json!({
        "clusterSelector": {"matchLabels": {"env": "prod"}},
        "template": {"spec": {"format": "plain", "sources": [{"kind": "image", "image": {"ref": image}}]}},
        "rollout": rollout,
    })
}

fn clusters(names: &[&str]) -> Vec<Cluster> {
    names
        .iter()
        .map(|name| Cluster {
            name: name.to_string(),
            labels: [("env".to_string(), "prod".to_string())].into(),
        })
        .collect()
}

/// A stamped BundleDeployment as the API server would return it after `stamp`, with a status
/// saying `state` at generation `generation`.
fn stamped(
    stamp: &Stamp,
    generation: i64,
    state: &str,
    last_healthy: Option<i64>,
) -> BundleDeployment {
    let ready = |status: &str, reason: &str| {
        json!({"type": "Ready", "status": status, "reason": reason, "message": format!("{reason} here"),
               "observedGeneration": generation, "lastTransitionTime": "2024-01-01T00:00:00Z"})
    };
    let mut status = json!({"observedGeneration": generation, "lastHealthyRevision": last_healthy});
    match state {
        "healthy" => status["conditions"] = json!([ready("True", "Healthy")]),
        "updating" => status["conditions"] = json!([ready("False", "Progressing")]),
        "unreachable" => status["conditions"] = json!([ready("False", "ClusterUnreachable")]),
        "failed" => {
            status["conditions"] = json!([ready("False", "RolledBack"),
                {"type": "RolledBack", "status": "True", "reason": "RolledBack", "message": "",
                 "observedGeneration": generation, "lastTransitionTime": "2024-01-01T00:00:00Z"}]);
            status["revisions"] = json!([{"number": 9, "generation": generation, "digest": "sha256:x",
                                          "phase": "Failed", "objects": 1, "reason": "HealthCheckFailed",
                                          "message": "ConfigMap a/b: failed is true"}]);
        }
        "new" => status = json!({}),
        other => panic!("{other}"),
    }
    serde_json::from_value(json!({
        "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
        "metadata": {"name": stamp.name, "generation": generation, "labels": stamp.labels,
                     "annotations": stamp.annotations},
        "spec": stamp.spec,
        "status": status,
    }))
    .unwrap()
}

fn planned(set: &BundleDeploymentSet, clusters: &[Cluster], stamped: &[BundleDeployment]) -> Plan {
    plan(set, clusters, stamped, "pallet-system").unwrap()
}

fn applied(plan: &Plan) -> Vec<String> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::Apply(stamp) => Some(stamp.name.clone()),
            _ => None,
        })
        .collect()
}

fn stamp_of(plan: &Plan, name: &str) -> Stamp {
    plan.actions
        .iter()
        .find_map(|a| match a {
            Action::Apply(stamp) if stamp.name == name => Some(stamp.as_ref().clone()),
            _ => None,
        })
        .unwrap()
}

fn phases(plan: &Plan) -> Vec<String> {
    plan.clusters
        .iter()
        .map(|c| format!("{}={}", c.name, c.phase.as_str()))
        .collect()
}

fn ready(plan: &Plan) -> &SetCondition {
    plan.conditions.iter().find(|c| c.type_ == READY).unwrap()
}

fn status_after(plan: &Plan) -> serde_json::Value {
    json!({"revision": plan.revision, "digest": plan.digest,
           "rolledBackRevision": plan.rolled_back_revision,
           "lastHandledRollback": plan.last_handled_rollback})
}

#[test]
fn a_new_set_creates_in_order_one_at_a_time() {
    let set = set(spec("r/app:v1", json!({"order": ["c", "a"]})), json!(null));
    let all = clusters(&["a", "b", "c"]);
    let plan = planned(&set, &all, &[]);
    assert_eq!(plan.revision, 1);
    assert_eq!(applied(&plan), ["web-c"]);
    assert_eq!(phases(&plan), ["c=Updating", "a=Pending", "b=Pending"]);
    assert_eq!(ready(&plan).reason, reasons::PROGRESSING);
    assert!(plan.progressing);
    let stamp = stamp_of(&plan, "web-c");
    let kube_config = stamp.spec.kube_config.as_ref().unwrap();
    assert_eq!(kube_config.secret_ref.name, "c");
    assert_eq!(
        kube_config.secret_ref.namespace.as_deref(),
        Some("pallet-system")
    );
    assert_eq!(stamp.labels[SET_LABEL], "web");
    assert_eq!(stamp.labels[SET_CLUSTER_LABEL], "c");
    assert_eq!(stamp.annotations[SET_REVISION_ANNOTATION], "1");

    // c still updating: nothing more. c healthy: a next.
    let set = with_status(set, status_after(&plan));
    let c = stamped(&stamp, 1, "updating", None);
    assert!(applied(&planned(&set, &all, &[c])).is_empty());
    let c = stamped(&stamp, 1, "healthy", Some(1));
    let plan = planned(&set, &all, &[c]);
    assert_eq!(applied(&plan), ["web-a"]);
    assert_eq!(phases(&plan), ["c=Healthy", "a=Updating", "b=Pending"]);
}

fn with_status(mut set: BundleDeploymentSet, status: serde_json::Value) -> BundleDeploymentSet {
    set.status = Some(serde_json::from_value(status).unwrap());
    set
}

/// Every cluster of `set` healthy on revision `revision`, as stamped.
fn all_healthy(set: &BundleDeploymentSet, names: &[&str], revision: i64) -> Vec<BundleDeployment> {
    names
        .iter()
        .map(|n| {
            stamped(
                &stamp(set, n, "pallet-system", revision),
                1,
                "healthy",
                Some(1),
            )
        })
        .collect()
}

#[test]
fn a_new_revision_rolls_out_in_waves_and_halts_at_a_failure() {
    let names = ["a", "b", "c"];
    let v1 = set(spec("r/app:v1", json!({"maxUpdating": 2})), json!(null));
    let first = planned(&v1, &clusters(&names), &[]);
    let healthy = all_healthy(&v1, &names, 1);
    // The template changes: revision 2, two clusters at once, by name.
    let v2 = with_status(
        set(spec("r/app:v2", json!({"maxUpdating": 2})), json!(null)),
        status_after(&first),
    );
    let plan2 = planned(&v2, &clusters(&names), &healthy);
    assert_eq!(plan2.revision, 2);
    assert_eq!(applied(&plan2), ["web-a", "web-b"]);
    let a2 = stamp_of(&plan2, "web-a");
    assert_eq!(
        a2.annotations[SET_PREVIOUS_ANNOTATION], "1",
        "what a rollback goes back to"
    );
    assert_eq!(a2.annotations[SET_REVISION_ANNOTATION], "2");
    assert_eq!(phases(&plan2), ["a=Updating", "b=Updating", "c=Pending"]);

    // a fails on revision 2, b is healthy: halted; c keeps revision 1.
    let v2 = with_status(v2, status_after(&plan2));
    let now = vec![
        stamped(&a2, 2, "failed", Some(1)),
        stamped(&stamp_of(&plan2, "web-b"), 2, "healthy", Some(2)),
        healthy[2].clone(),
    ];
    let halted = planned(&v2, &clusters(&names), &now);
    assert!(applied(&halted).is_empty(), "no further cluster is updated");
    assert_eq!(phases(&halted), ["a=Failed", "b=Healthy", "c=Pending"]);
    let halt = ready(&halted);
    assert_eq!(halt.reason, reasons::HALTED);
    assert!(
        halt.message.contains("revision 2 failed on cluster a"),
        "{}",
        halt.message
    );
    assert!(halted
        .conditions
        .iter()
        .any(|c| c.type_ == set_conditions::HALTED && c.status));
    assert!(!halted.progressing);
    assert_eq!(
        halted.clusters[2].revision,
        Some(1),
        "c stays on revision 1"
    );

    // A rollback request: the clusters on revision 2 go back to their revision from before.
    let mut requested = v2.clone();
    requested.metadata.annotations =
        Some([(REQUESTED_ROLLBACK_ANNOTATION.to_string(), "now".to_string())].into());
    let rollback = planned(&requested, &clusters(&names), &now);
    let requests: Vec<(String, String)> = rollback
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::RollBack { name, request } => Some((name.clone(), request.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        requests,
        [
            ("web-a".to_string(), "1@set-revision-2".to_string()),
            ("web-b".to_string(), "1@set-revision-2".to_string())
        ]
    );
    assert_eq!(rollback.rolled_back_revision, Some(2));
    assert_eq!(rollback.last_handled_rollback.as_deref(), Some("now"));
    assert_eq!(ready(&rollback).reason, reasons::ROLLED_BACK);
    // Handled once: the next pass asks nothing again, and still updates no cluster.
    let after = with_status(requested, status_after(&rollback));
    let again = planned(&after, &clusters(&names), &now);
    assert!(again.actions.is_empty(), "{:?}", again.actions);
    assert_eq!(
        phases(&again),
        ["a=RolledBack", "b=RolledBack", "c=Pending"]
    );

    // A fixed template: revision 3 rolls out again.
    let v3 = with_status(
        set(spec("r/app:v3", json!({"maxUpdating": 2})), json!(null)),
        status_after(&rollback),
    );
    let plan3 = planned(&v3, &clusters(&names), &now);
    assert_eq!(plan3.revision, 3);
    assert_eq!(applied(&plan3), ["web-a", "web-b"]);
}

#[test]
fn on_failure_rollback_rolls_back_by_itself() {
    let names = ["a", "b"];
    let rollout = json!({"maxUpdating": 2, "onFailure": "Rollback"});
    let v1 = set(spec("r/app:v1", rollout.clone()), json!(null));
    let first = planned(&v1, &clusters(&names), &[]);
    let v2 = with_status(
        set(spec("r/app:v2", rollout), json!(null)),
        status_after(&first),
    );
    let moved = planned(&v2, &clusters(&names), &all_healthy(&v1, &names, 1));
    let v2 = with_status(v2, status_after(&moved));
    let now = vec![
        stamped(&stamp_of(&moved, "web-a"), 2, "healthy", Some(2)),
        stamped(&stamp_of(&moved, "web-b"), 2, "failed", Some(1)),
    ];
    let plan = planned(&v2, &clusters(&names), &now);
    assert_eq!(plan.actions.len(), 2, "{:?}", plan.actions);
    assert_eq!(plan.rolled_back_revision, Some(2));
    assert!(plan.last_handled_rollback.is_none());
}

#[test]
fn a_cluster_down_holds_its_slot_without_halting() {
    let names = ["a", "b"];
    let v1 = set(spec("r/app:v1", json!({})), json!(null));
    let first = planned(&v1, &clusters(&names), &[]);
    let v2 = with_status(
        set(spec("r/app:v2", json!({})), json!(null)),
        status_after(&first),
    );
    let moved = planned(&v2, &clusters(&names), &all_healthy(&v1, &names, 1));
    assert_eq!(applied(&moved), ["web-a"]);
    let v2 = with_status(v2, status_after(&moved));
    let now = vec![
        stamped(&stamp_of(&moved, "web-a"), 2, "unreachable", Some(1)),
        all_healthy(&v1, &names, 1)[1].clone(),
    ];
    let plan = planned(&v2, &clusters(&names), &now);
    assert!(applied(&plan).is_empty(), "b waits for a's slot");
    assert_eq!(phases(&plan), ["a=Unreachable", "b=Pending"]);
    assert!(
        ready(&plan).message.contains("unreachable: a"),
        "{}",
        ready(&plan).message
    );
}

#[test]
fn per_cluster_settings_and_selection() {
    let mut spec = spec("r/app:v1", json!({"order": ["zeta", "gone"]}));
    spec["template"]["spec"]["format"] = json!("helm");
    spec["template"]["spec"]["config"] =
        json!({"helm": {"values": {"image": {"tag": "v1", "pull": "Always"}}}});
    spec["template"]["spec"]["processors"] =
        json!([{"substitute": {"vars": {"region": "none", "keep": "x"}}}]);
    spec["perCluster"] = json!([{"cluster": "zeta", "values": {"image": {"tag": "v1-eu"}, "replicas": 3},
                                  "vars": {"region": "eu"}}]);
    let set = set(spec, json!(null));
    let mut all = clusters(&["zeta", "alpha"]);
    all.push(Cluster {
        name: "dev".into(),
        labels: [("env".to_string(), "dev".to_string())].into(),
    });
    assert_eq!(select(&set, &all).unwrap(), ["zeta", "alpha"]);
    let zeta = stamp(&set, "zeta", "pallet-system", 1);
    let values = zeta
        .spec
        .config
        .as_ref()
        .unwrap()
        .helm
        .as_ref()
        .unwrap()
        .values
        .clone()
        .unwrap();
    assert_eq!(
        values,
        json!({"image": {"tag": "v1-eu", "pull": "Always"}, "replicas": 3})
    );
    let vars = &zeta.spec.processors[0].substitute.as_ref().unwrap().vars;
    assert_eq!(vars["region"], "eu");
    assert_eq!(vars["keep"], "x");
    let alpha = stamp(&set, "alpha", "pallet-system", 1);
    assert_eq!(
        alpha
            .spec
            .config
            .as_ref()
            .unwrap()
            .helm
            .as_ref()
            .unwrap()
            .values
            .clone()
            .unwrap(),
        json!({"image": {"tag": "v1", "pull": "Always"}})
    );
    // A stamped cluster no longer selected is deleted.
    let dev = stamped(
        &stamp(&set, "dev", "pallet-system", 1),
        1,
        "healthy",
        Some(1),
    );
    let plan = planned(&set, &all, &[dev]);
    assert!(plan.actions.contains(&Action::Delete("web-dev".into())));
    // Nothing selected: said so.
    let none = plan_none();
    assert_eq!(ready(&none).reason, reasons::NO_CLUSTERS);
}

fn plan_none() -> Plan {
    let set = set(spec("r/app:v1", json!({})), json!(null));
    planned(&set, &[], &[])
}

#[test]
fn a_change_for_one_cluster_moves_the_others_without_waiting() {
    let names = ["a", "b"];
    let v1 = set(spec("r/app:v1", json!({})), json!(null));
    let first = planned(&v1, &clusters(&names), &[]);
    let mut changed = spec("r/app:v1", json!({}));
    changed["perCluster"] = json!([{"cluster": "b", "vars": {}}]);
    changed["template"]["spec"]["processors"] = json!([{"substitute": {"vars": {}}}]);
    // Both specs change (a processor for everyone): both wait for slots, one at a time.
    let v2 = with_status(set(changed, json!(null)), status_after(&first));
    let plan2 = planned(&v2, &clusters(&names), &all_healthy(&v1, &names, 1));
    assert_eq!(applied(&plan2), ["web-a"]);
    // Only the revision number changes for a (b's own settings changed): no slot needed.
    let mut per_b = spec("r/app:v1", json!({}));
    per_b["template"]["spec"]["processors"] = json!([{"substitute": {"vars": {}}}]);
    per_b["perCluster"] = json!([{"cluster": "b", "vars": {"x": "1"}}]);
    let before = with_status(
        set(per_b.clone(), json!(null)),
        json!({"revision": 5, "digest": "sha256:old"}),
    );
    let on_old: Vec<BundleDeployment> = names
        .iter()
        .map(|n| {
            let mut s = stamp(&before, n, "pallet-system", 5);
            if *n == "b" {
                s.spec.processors[0]
                    .substitute
                    .as_mut()
                    .unwrap()
                    .vars
                    .clear();
            }
            stamped(&s, 1, "healthy", Some(1))
        })
        .collect();
    let plan = planned(&before, &clusters(&names), &on_old);
    assert_eq!(plan.revision, 6);
    assert_eq!(
        applied(&plan),
        ["web-a", "web-b"],
        "a moves by its annotation, b takes the slot"
    );
}

#[test]
fn judging_a_bundle_deployment() {
    let s = stamp(&set(spec("r/app:v1", json!({})), json!(null)), "a", "ns", 1);
    assert_eq!(judge(&stamped(&s, 1, "healthy", None)), Judged::Healthy);
    // A failed cluster is described by why its revision failed, not by its Ready message
    // (which soon says what the rollback does).
    assert_eq!(
        judge(&stamped(&s, 1, "failed", None)),
        Judged::Failed(
            "revision 9 failed: HealthCheckFailed: ConfigMap a/b: failed is true".into()
        )
    );
    assert!(matches!(
        judge(&stamped(&s, 1, "unreachable", None)),
        Judged::Unreachable(_)
    ));
    assert!(matches!(
        judge(&stamped(&s, 1, "new", None)),
        Judged::Updating(_)
    ));
    // A status of an older generation says nothing of the current one.
    let mut old = stamped(&s, 1, "healthy", None);
    old.metadata.generation = Some(2);
    assert!(matches!(judge(&old), Judged::Updating(_)));
}
