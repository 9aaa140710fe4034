//! End-to-end checks of the BundleDeployment API against the local control plane: the CRD
//! installs, objects round-trip, and the API server itself refuses invalid objects with a message
//! a user can act on.

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/docs.rs"]
mod docs;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::{Client, CustomResourceExt};
use pallet::api::{BundleDeployment, BundleDeploymentStatus};
use serde_json::{json, Value};

fn bd_resource() -> ApiResource {
    ApiResource::erase::<BundleDeployment>(&())
}

async fn ready_client() -> Client {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    client
}

/// A valid spec to start from; each rejection test breaks one thing in it.
fn valid_spec() -> Value {
    json!({
        "installNamespace": "demo",
        "sources": [{
            "kind": "git",
            "git": {"repository": "http://127.0.0.1:1/repo.git", "ref": {"branch": "main"}},
        }],
        "format": "plain",
    })
}

fn bd(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "pallet.dev/v1alpha1",
        "kind": "BundleDeployment",
        "metadata": {"name": name},
        "spec": spec,
    })
}

/// Server-side applies `object` and returns the API server's refusal message. Panics when the
/// server accepts it.
async fn rejection(client: &Client, object: Value) -> String {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &bd_resource());
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    let result = api
        .patch(
            &name,
            &PatchParams::apply(cluster::TEST_FIELD_MANAGER),
            &Patch::Apply(&object),
        )
        .await;
    match result {
        Ok(_) => panic!("the API server accepted an invalid BundleDeployment: {object}"),
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "expected 422 Invalid, got {status:?}");
            status.message
        }
        Err(other) => panic!("unexpected error: {other}"),
    }
}

#[tokio::test]
async fn crd_is_served_cluster_scoped_with_short_name() {
    let client = ready_client().await;
    let resources = client
        .list_api_group_resources("pallet.dev/v1alpha1")
        .await
        .expect("pallet.dev/v1alpha1 is served");
    let bd = resources
        .resources
        .iter()
        .find(|r| r.name == "bundledeployments")
        .expect("bundledeployments is listed");
    assert!(!bd.namespaced, "BundleDeployment must be cluster-scoped");
    assert_eq!(bd.kind, "BundleDeployment");
    assert_eq!(bd.short_names.as_deref(), Some(&["bd".to_string()][..]));
    assert!(
        resources
            .resources
            .iter()
            .any(|r| r.name == "bundledeployments/status"),
        "the status subresource is enabled"
    );
    assert_eq!(
        BundleDeployment::crd().spec.names.short_names.unwrap(),
        vec!["bd"]
    );
}

#[tokio::test]
async fn example_bundle_deployment_applies_and_reads_back() {
    let client = ready_client().await;
    let name = cluster::unique_name("example");
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/examples/hello-plain.yaml"
    ))
    .unwrap()
    .replace("${GIT_URL}", "http://127.0.0.1:1/hello.git");
    let mut example: BundleDeployment = serde_saphyr::from_str(&text).unwrap();
    example.metadata.name = Some(name.clone());
    // The test label keeps a developer's running agent (`tools/up.sh`) away from it.
    example
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("pallet.dev/test".into(), name.clone());
    cluster::track_bundle_deployment(&name);

    let api: Api<BundleDeployment> = Api::all(client.clone());
    let applied = api
        .patch(
            &name,
            &PatchParams::apply(cluster::TEST_FIELD_MANAGER),
            &Patch::Apply(&example),
        )
        .await
        .expect("the example applies");
    assert_eq!(
        applied.spec, example.spec,
        "the API server kept the spec as written"
    );

    let read = api.get(&name).await.unwrap();
    assert_eq!(read.spec, example.spec);
    assert_eq!(read.spec.install_namespace.as_deref(), Some("hello"));
    assert!(read.status.is_none(), "status is written only by the agent");

    // Status is a subresource: writing it does not bump the generation, and a spec apply does
    // not touch it.
    let status = BundleDeploymentStatus {
        observed_generation: Some(1),
        active_revision: Some(3),
        ..Default::default()
    };
    let patched = api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .expect("status subresource accepts a patch");
    assert_eq!(patched.status.as_ref().unwrap().active_revision, Some(3));
    assert_eq!(patched.metadata.generation, read.metadata.generation);

    api.delete(&name, &Default::default()).await.unwrap();
}

#[tokio::test]
async fn two_git_refs_are_refused() {
    let client = ready_client().await;
    let mut spec = valid_spec();
    spec["sources"][0]["git"]["ref"] = json!({"branch": "main", "tag": "v1"});
    let message = rejection(&client, bd(&cluster::unique_name("tworefs"), spec)).await;
    assert!(
        message.contains("exactly one of commit, tag, branch or semver must be set"),
        "{message}"
    );
    assert!(
        message.contains("spec.sources[0].git.ref"),
        "names the field: {message}"
    );
}

#[tokio::test]
async fn destination_escaping_the_tree_is_refused() {
    let client = ready_client().await;
    for destination in ["../x", "/etc", "a/../../b", ".."] {
        let mut spec = valid_spec();
        spec["sources"][0]["destination"] = json!(destination);
        let message = rejection(&client, bd(&cluster::unique_name("escape"), spec)).await;
        assert!(
            message.contains("destination must be a relative path inside the bundle tree"),
            "{destination}: {message}"
        );
        assert!(message.contains("spec.sources[0].destination"), "{message}");
    }
}

#[tokio::test]
async fn unknown_format_is_refused() {
    let client = ready_client().await;
    let mut spec = valid_spec();
    spec["format"] = json!("jsonnet");
    let message = rejection(&client, bd(&cluster::unique_name("format"), spec)).await;
    assert!(message.contains("spec.format"), "{message}");
    assert!(
        message.contains(r#"Unsupported value: "jsonnet""#),
        "{message}"
    );
    assert!(
        message.contains(r#""plain", "helm", "registry-v1", "kustomize""#),
        "lists the valid formats: {message}"
    );
}

#[tokio::test]
async fn other_invalid_specs_are_refused() {
    let client = ready_client().await;
    type Breaks = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Breaks, &str)> = vec![
        (
            "no sources",
            Box::new(|s| s["sources"] = json!([])),
            "should have at least 1 items",
        ),
        (
            "settings for another kind",
            Box::new(|s| s["sources"][0]["kind"] = json!("image")),
            "the source's settings must match its kind",
        ),
        (
            "pollInterval on a pinned commit",
            Box::new(|s| {
                s["sources"][0]["git"]["ref"] =
                    json!({"commit": "0123456789abcdef0123456789abcdef01234567"});
                s["sources"][0]["pollInterval"] = json!("5m");
            }),
            "pollInterval is only valid for floating refs",
        ),
        (
            "pollInterval on a digest",
            Box::new(|s| {
                s["sources"][0] = json!({"kind": "image", "image": {"ref": "r.example/b@sha256:0123"}, "pollInterval": "5m"});
            }),
            "pollInterval is only valid for floating refs",
        ),
        (
            "malformed duration",
            Box::new(|s| s["rollout"] = json!({"progressDeadline": "ten minutes"})),
            "spec.rollout.progressDeadline: Invalid value: \"ten minutes\": must be a duration: numbers with units, such as 90s, 10m or 1h30m",
        ),
        (
            "a duration without a unit",
            Box::new(|s| s["sources"][0]["pollInterval"] = json!("300")),
            "spec.sources[0].pollInterval: Invalid value: \"300\": must be a duration",
        ),
        (
            "helm config on a plain bundle",
            Box::new(|s| s["config"] = json!({"helm": {"releaseName": "x"}})),
            "config.helm is only valid with format: helm",
        ),
        (
            "unknown onFailure",
            Box::new(|s| s["rollout"] = json!({"onFailure": "Retry"})),
            r#"Unsupported value: "Retry""#,
        ),
    ];
    for (what, breaks, expected) in cases {
        let mut spec = valid_spec();
        breaks(&mut spec);
        let message = rejection(&client, bd(&cluster::unique_name("invalid"), spec)).await;
        assert!(
            message.contains(expected),
            "{what}: expected {expected:?} in {message:?}"
        );
    }
}

#[tokio::test]
async fn printer_columns_show_format_reason_paused_and_message() {
    let client = ready_client().await;
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &bd_resource());
    let name = cluster::unique_name("columns");
    let mut spec = valid_spec();
    spec["paused"] = json!(true);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(bd(&name, spec)).unwrap(),
    )
    .await
    .unwrap();
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "False",
        "reason": "SourceUnavailable", "message": "git: connection refused",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    // Ask for the server-side table, as `kubectl get bd` does.
    let request = http::Request::get(format!(
        "/apis/pallet.dev/v1alpha1/bundledeployments/{name}"
    ))
    .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
    .body(Vec::new())
    .unwrap();
    let table: Value = client.request(request).await.unwrap();
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        columns,
        ["Name", "Format", "Active", "Ready", "Reason", "Paused", "Age", "Message"]
    );
    let cells = &table["rows"][0]["cells"];
    assert_eq!(cells[0], json!(name));
    assert_eq!(cells[1], json!("plain"));
    assert_eq!(cells[3], json!("False"));
    assert_eq!(cells[4], json!("SourceUnavailable"));
    assert_eq!(cells[5], json!(true));
    assert_eq!(cells[7], json!("git: connection refused"));
    api.delete(&name, &Default::default()).await.unwrap();
}

/// Optional fields are not nullable: an explicit null is dropped by the API server, as if the
/// field were not set, instead of being stored.
#[tokio::test]
async fn an_explicit_null_on_an_optional_field_is_dropped() {
    let client = ready_client().await;
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &bd_resource());
    let name = cluster::unique_name("nulls");
    let mut spec = valid_spec();
    spec["rollout"] = Value::Null;
    spec["installNamespace"] = Value::Null;
    let created = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(bd(&name, spec)).unwrap(),
        )
        .await
        .unwrap();
    let stored = &created.data["spec"];
    assert!(stored.get("rollout").is_none(), "{stored}");
    assert!(stored.get("installNamespace").is_none(), "{stored}");
    api.delete(&name, &Default::default()).await.unwrap();
}

/// Every BundleDeployment of the documentation (README.md, `docs/`) and of `examples/` is one
/// the API server accepts (server-side dry run).
#[tokio::test]
async fn documented_bundle_deployment_examples_are_accepted() {
    let client = ready_client().await;
    let examples = docs::bundle_deployment_examples();
    assert!(
        examples.len() >= 10,
        "the documentation shows BundleDeployments ({} found)",
        examples.len()
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &bd_resource());
    for (origin, example) in &examples {
        let object: Value = serde_saphyr::from_str(example)
            .unwrap_or_else(|e| panic!("an example of {origin} does not parse: {e}\n{example}"));
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        api.patch(
            &name,
            &PatchParams::apply(cluster::TEST_FIELD_MANAGER).dry_run(),
            &Patch::Apply(&object),
        )
        .await
        .unwrap_or_else(|e| {
            panic!("the API server refused an example of {origin}: {e}\n{example}")
        });
    }
}

/// config.registryV1's deploymentConfig is checked by the schema (Kubernetes' own types) and
/// certificateProvider is an enum.
#[tokio::test]
async fn registry_v1_config_is_checked_by_the_schema() {
    let client = ready_client().await;
    let with = |registry_v1: Value| {
        let mut spec = valid_spec();
        spec["format"] = json!("registry-v1");
        spec["config"] = json!({"registryV1": registry_v1});
        bd("registry-v1-config", spec)
    };
    let message = rejection(
        &client,
        with(json!({"deploymentConfig": {"env": [{"value": "no name"}]}})),
    )
    .await;
    assert!(
        message.contains("spec.config.registryV1.deploymentConfig.env[0].name"),
        "{message}"
    );
    let message = rejection(
        &client,
        with(json!({"deploymentConfig": {"volumeMounts": [{"name": "no-path"}]}})),
    )
    .await;
    assert!(
        message.contains("deploymentConfig.volumeMounts[0].mountPath"),
        "{message}"
    );
    let message = rejection(&client, with(json!({"certificateProvider": "Vault"}))).await;
    assert!(
        message.contains("certificateProvider") && message.contains("BuiltIn"),
        "{message}"
    );
    // An empty affinity (erase) and empty sub-affinities are valid.
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &bd_resource());
    api.patch(
        "registry-v1-config",
        &PatchParams::apply(cluster::TEST_FIELD_MANAGER).dry_run(),
        &Patch::Apply(&with(json!({"certificateProvider": "CertManager",
            "deploymentConfig": {"affinity": {"nodeAffinity": {}, "podAffinity": {}}, "nodeSelector": {}}}))),
    )
    .await
    .expect("empty affinities are accepted");
}

#[tokio::test]
async fn health_checks_must_be_either_cel_for_a_kind_or_an_http_probe() {
    let client = ready_client().await;
    let cases = [
        (
            "probe-with-cel",
            json!({"httpGet": {"url": "http://app/healthz"}, "current": "true"}),
            "an httpGet check takes no apiVersion, name, selector or CEL expressions",
        ),
        ("neither", json!({"current": "true"}), "exactly one of them"),
        (
            "no-current",
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "failed": "true"}),
            "a CEL health check needs apiVersion, kind and current",
        ),
        (
            "threshold-on-cel",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "current": "true", "failureThreshold": 2}),
            "only valid with httpGet",
        ),
        (
            "bad-url",
            json!({"httpGet": {"url": "ftp://app/healthz"}}),
            "spec.healthChecks[0].httpGet.url",
        ),
    ];
    for (what, check, expected) in cases {
        let mut spec = valid_spec();
        spec["healthChecks"] = json!([check]);
        let message = rejection(&client, bd(&cluster::unique_name(what), spec)).await;
        assert!(message.contains(expected), "{what}: {message}");
        assert!(
            message.contains("spec.healthChecks[0]"),
            "{what}: {message}"
        );
    }
    // The documented example (both kinds of check) is accepted.
    let block = docs::example("health-checks");
    let block = block.as_str();
    let example: Value = serde_saphyr::from_str(block).unwrap();
    let mut spec = valid_spec();
    spec["healthChecks"] = example["healthChecks"].clone();
    let name = cluster::unique_name("checks-ok");
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &bd_resource());
    let created = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(bd(&name, spec)).unwrap(),
        )
        .await
        .expect("valid health checks are accepted");
    assert_eq!(
        created.data["spec"]["healthChecks"][3]["httpGet"]["expectedStatus"],
        json!([200])
    );
    api.delete(&name, &Default::default()).await.unwrap();
}

/// `spec.notifications`: exactly one kind per target, known transitions, unique names, and a
/// commit status only with a git source; the documented example is accepted.
#[tokio::test]
async fn notifications_are_checked_by_the_schema() {
    let client = ready_client().await;
    let hook = json!({"url": "http://127.0.0.1:1/hook"});
    let cases = [
        (
            "two-kinds",
            json!([{"name": "t", "on": ["Healthy"], "webhook": hook, "slack": hook}]),
            "a notification target takes exactly one of webhook, cloudEvents, slack, commitStatus",
        ),
        (
            "no-kind",
            json!([{"name": "t", "on": ["Healthy"]}]),
            "exactly one of webhook",
        ),
        (
            "unknown-transition",
            json!([{"name": "t", "on": ["Deployed"], "webhook": hook}]),
            "spec.notifications[0].on[0]: Unsupported value: \"Deployed\"",
        ),
        (
            "bad-mode",
            json!([{"name": "t", "on": ["Healthy"], "cloudEvents": {"url": "http://h/", "mode": "Batched"}}]),
            "spec.notifications[0].cloudEvents.mode: Unsupported value",
        ),
    ];
    for (what, notifications, expected) in cases {
        let mut spec = valid_spec();
        spec["notifications"] = notifications;
        let message = rejection(&client, bd(&cluster::unique_name(what), spec)).await;
        assert!(message.contains(expected), "{what}: {message}");
    }
    // Two targets with one name (a create: server-side apply refuses such a list before
    // validation, with a 500).
    let mut spec = valid_spec();
    spec["notifications"] = json!([{"name": "t", "on": ["Healthy"], "webhook": hook},
                                   {"name": "t", "on": ["Failed"], "webhook": hook}]);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &bd_resource());
    let object = serde_json::from_value(bd(&cluster::unique_name("duplicate"), spec)).unwrap();
    match api.create(&PostParams::default(), &object).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(
                status
                    .message
                    .contains("spec.notifications[1]: Duplicate value"),
                "{}",
                status.message
            );
        }
        other => panic!("two targets named t accepted: {other:?}"),
    }
    // A commit status reports on the git source's commit: refused without one.
    let mut spec = valid_spec();
    spec["sources"] = json!([{"kind": "http", "http": {"url": "http://127.0.0.1:1/app.yaml"}}]);
    spec["notifications"] = json!([{"name": "forge", "on": ["Healthy"],
        "commitStatus": {"api": "http://127.0.0.1:1/api/v1", "repository": "org/repo"}}]);
    let message = rejection(&client, bd(&cluster::unique_name("no-git"), spec)).await;
    assert!(
        message.contains("a commitStatus notification reports on the commit of the bundle's git source, and this BundleDeployment has no git source"),
        "{message}"
    );
    // The documented example is accepted.
    let block = docs::example("notifications");
    let block = block.as_str();
    let example: Value = serde_saphyr::from_str(block).unwrap();
    let mut spec = valid_spec();
    spec["notifications"] = example["notifications"].clone();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &bd_resource());
    let name = cluster::unique_name("notify-ok");
    api.patch(
        &name,
        &PatchParams::apply(cluster::TEST_FIELD_MANAGER).dry_run(),
        &Patch::Apply(&bd(&name, spec)),
    )
    .await
    .expect("the documented notifications are accepted");
}

/// `spec.processors` and `config.kustomize`: one kind per processor, one way to reach a
/// function, unique names, kustomize settings only for the kustomize format and inside the
/// tree; the documented example is accepted.
#[tokio::test]
async fn processors_and_kustomize_config_are_checked_by_the_schema() {
    let client = ready_client().await;
    let cases = [
        (
            "two-kinds",
            json!({"processors": [{"kustomize": {}, "substitute": {}}]}),
            "a processor is exactly one of kustomize, substitute or function",
        ),
        (
            "no-kind",
            json!({"processors": [{"name": "x"}]}),
            "a processor is exactly one of kustomize, substitute or function",
        ),
        (
            "url-and-exec",
            json!({"processors": [{"function": {"url": "http://fn/", "exec": "/bin/fn"}}]}),
            "a function is reached either over HTTP (url) or as an executable (exec), exactly one of them",
        ),
        (
            "same-names",
            json!({"processors": [{"name": "a", "substitute": {}}, {"name": "a", "kustomize": {}}]}),
            "processor names must be unique",
        ),
        (
            "kustomize-config-for-plain",
            json!({"config": {"kustomize": {"path": "overlays/prod"}}}),
            "config.kustomize is only valid with format: kustomize",
        ),
    ];
    for (what, extra, expected) in cases {
        let mut spec = valid_spec();
        for (key, value) in extra.as_object().unwrap() {
            spec[key] = value.clone();
        }
        let message = rejection(&client, bd(&cluster::unique_name(what), spec)).await;
        assert!(message.contains(expected), "{what}: {message}");
    }
    let mut spec = valid_spec();
    spec["format"] = json!("kustomize");
    spec["config"] = json!({"kustomize": {"path": "overlays/../../etc"}});
    let message = rejection(&client, bd(&cluster::unique_name("escape"), spec)).await;
    assert!(
        message.contains("config.kustomize.path must stay inside the bundle tree"),
        "{message}"
    );
    // The documented example is accepted.
    let block = docs::example("processors");
    let block = block.as_str();
    let example: Value = serde_saphyr::from_str(block).unwrap();
    let mut spec = valid_spec();
    spec["format"] = json!("helm");
    spec["processors"] = example["spec"]["processors"].clone();
    let name = cluster::unique_name("processors-ok");
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &bd_resource());
    api.patch(
        &name,
        &PatchParams::apply(cluster::TEST_FIELD_MANAGER).dry_run(),
        &Patch::Apply(&bd(&name, spec)),
    )
    .await
    .expect("the documented processors are accepted");
}

/// `spec.driftIgnore`: each path is a JSON pointer; the documented example is accepted, and the
/// field round-trips (no new field is dropped by the schema).
#[tokio::test]
async fn drift_ignore_is_checked_by_the_schema() {
    let client = ready_client().await;
    let mut spec = valid_spec();
    spec["driftIgnore"] = json!([{"paths": ["spec/replicas"]}]);
    let message = rejection(&client, bd(&cluster::unique_name("pointer"), spec)).await;
    assert!(
        message.contains("spec.driftIgnore[0].paths[0]") && message.contains("'^/'"),
        "{message}"
    );
    let block = docs::example("drift-ignore");
    let example: Value = serde_saphyr::from_str(&block).unwrap();
    let mut spec = valid_spec();
    spec["driftIgnore"] = example["spec"]["driftIgnore"].clone();
    let name = cluster::unique_name("drift-ignore-ok");
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &bd_resource());
    let accepted = api
        .patch(
            &name,
            &PatchParams::apply(cluster::TEST_FIELD_MANAGER).dry_run(),
            &Patch::Apply(&bd(&name, spec)),
        )
        .await
        .expect("the documented driftIgnore is accepted");
    assert_eq!(
        accepted.data["spec"]["driftIgnore"],
        example["spec"]["driftIgnore"]
    );
    let typed: BundleDeployment = serde_json::from_value(serde_json::to_value(&accepted).unwrap())
        .expect("it reads as the agent reads it");
    assert_eq!(typed.spec.drift_ignore.len(), 3);
}
