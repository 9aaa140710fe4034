//! End-to-end: `spec.dependsOn`. An app waits for the bundle of CRDs and the controller it
//! needs, applies nothing before it is Ready and starts at once after (a watch, not the poll);
//! a cycle is reported; a `readyExpr` on a ConfigMap works; deletion goes in reverse order;
//! the schema refuses what it can.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/docs.rs"]
mod docs;
#[path = "support/kubelet.rs"]
mod kubelet;
mod support;

use std::time::{Duration, Instant};

use agent::{wait_condition, Agent};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use pallet::api::conditions::find;
use pallet::api::BundleDeployment;
use serde_json::json;

/// A cert-manager-like bundle: a CRD and the controller Deployment that serves it.
fn crds_bundle(group: &str, namespace: &str, image: &str) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: certificates.{group}
spec:
  group: {group}
  names: {{kind: Certificate, plural: certificates, singular: certificate, listKind: CertificateList}}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: controller
  namespace: {namespace}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: controller}}}}
  template:
    metadata: {{labels: {{app: controller}}}}
    spec:
      containers: [{{name: controller, image: "{image}"}}]
"#
    )
}

/// An app using the CRD: a Certificate and a ConfigMap.
fn app_bundle(group: &str) -> String {
    format!(
        r#"apiVersion: {group}/v1
kind: Certificate
metadata:
  name: web
spec:
  dnsNames: [web.example]
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: app
data:
  value: "1"
"#
    )
}

fn git_spec(url: &str, namespace: &str, depends_on: serde_json::Value) -> serde_json::Value {
    json!({
        "installNamespace": namespace,
        "sources": [{"kind": "git", "git": {"repository": url, "ref": {"branch": "main"}}, "pollInterval": "1h"}],
        "format": "plain",
        "dependsOn": depends_on,
    })
}

fn ready(bd: &BundleDeployment) -> Option<(String, String, String)> {
    let status = bd.status.as_ref()?;
    let c = find(&status.conditions, "Ready")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Deletes the BundleDeployments (all at once) and the namespace.
async fn cleanup(client: &Client, names: &[&str], namespace: &str) {
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    for name in names {
        let _ = bds.delete(name, &Default::default()).await;
    }
    for name in names {
        agent::wait_bd_gone(client, name).await;
    }
    let _ = Api::<Namespace>::all(client.clone())
        .delete(namespace, &Default::default())
        .await;
}

async fn create_namespace(client: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    let _ = Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await;
}

#[tokio::test]
async fn an_app_waits_for_its_crds_applies_nothing_before_and_starts_within_seconds_after() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let git = fx.git_plain();
    let test = support::unique_name("deps");
    let group = format!("{test}.example.com");
    let image = format!("controller-{test}:v1");
    let (crds, app) = (format!("{test}-crds"), format!("{test}-app"));
    let crds_repo = fx.git_repo(&crds);
    crds_repo.commit_files(
        "main",
        &[("crds.yaml", crds_bundle(&group, &test, &image).as_bytes())],
        "crds",
    );
    let app_repo = fx.git_repo(&app);
    app_repo.commit_files(
        "main",
        &[("app.yaml", app_bundle(&group).as_bytes())],
        "app",
    );
    create_namespace(&client, &test).await;
    // The controller's image does not run yet: the CRD bundle is not Ready until it does.
    let kubelet = kubelet::FakeKubelet::start(&client, &test, &[]);
    // An hour between requeues: only the watch on the dependency can start the app promptly.
    let agent = Agent::start_with(&test, &["--requeue-seconds", "3600"]);

    // Created at once, the dependent first.
    agent::apply_bd_labelled(
        &client,
        &app,
        &test,
        git_spec(&app_repo.url(git), &test, json!([{"name": crds}])),
    )
    .await;
    agent::apply_bd_labelled(
        &client,
        &crds,
        &test,
        git_spec(&crds_repo.url(git), &test, json!([])),
    )
    .await;
    let waiting = wait_condition(
        &client,
        &agent,
        &app,
        "Ready",
        "False",
        "waiting for BundleDeployment",
    )
    .await;
    let (_, reason, message) = ready(&waiting).unwrap();
    assert_eq!(reason, "DependencyNotReady");
    assert!(message.contains(&crds), "{message}");
    // The dependency installs and waits for its controller.
    wait_condition(&client, &agent, &crds, "Installed", "True", "2 objects").await;
    let still = wait_condition(
        &client,
        &agent,
        &app,
        "Ready",
        "False",
        "waiting for BundleDeployment",
    )
    .await;
    assert_eq!(ready(&still).unwrap().1, "DependencyNotReady");
    assert!(
        !agent
            .change_entries()
            .iter()
            .any(|e| e["bundleDeployment"] == app.as_str()),
        "the app wrote nothing while its dependency was not Ready"
    );
    assert_eq!(
        fx.git_requests(git, &app).await,
        0,
        "the app's source was not even fetched while it waited"
    );

    kubelet.allow(&image);
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let dependency_ready =
        cluster::poll_until("the CRD bundle Ready", Duration::from_secs(60), || {
            let bds = bds.clone();
            let crds = crds.clone();
            async move {
                let bd = bds.get(&crds).await.map_err(|e| e.to_string())?;
                match ready(&bd) {
                    Some((status, _, _)) if status == "True" => Ok(Instant::now()),
                    other => Err(format!("{other:?}")),
                }
            }
        })
        .await;
    wait_condition(&client, &agent, &app, "Ready", "True", "2 objects").await;
    let after = dependency_ready.elapsed();
    println!(
        "app Ready {:.2} s after its dependency",
        after.as_secs_f64()
    );
    assert!(
        after < Duration::from_secs(10),
        "app Ready {after:?} after its dependency"
    );

    // Deletion in reverse order: both at once; the app's objects go before the CRD bundle's.
    drop(kubelet);
    cleanup(&client, &[&crds, &app], &test).await;
    let deletes: Vec<String> = agent
        .change_entries()
        .iter()
        .filter(|e| e["operation"] == "delete")
        .map(|e| {
            e["bundleDeployment"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    let last_app = deletes
        .iter()
        .rposition(|b| *b == app)
        .expect("the app's objects were deleted");
    let first_crds = deletes
        .iter()
        .position(|b| *b == crds)
        .expect("the CRD bundle's objects were deleted");
    assert!(last_app < first_crds, "deletion order: {deletes:?}");
}

#[tokio::test]
async fn a_cycle_is_stalled_and_named() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let test = support::unique_name("deps-cycle");
    let repo = fx.git_repo(&test);
    repo.commit_files(
        "main",
        &[(
            "cm.yaml",
            b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n" as &[u8],
        )],
        "c",
    );
    let agent = Agent::start(&test);
    let (a, b, c) = (
        format!("{test}-a"),
        format!("{test}-b"),
        format!("{test}-c"),
    );
    let url = repo.url(fx.git_plain());
    // Each installs into a namespace of its own name.
    agent::apply_bd_labelled(&client, &a, &test, git_spec(&url, &a, json!([{"name": b}]))).await;
    agent::apply_bd_labelled(&client, &b, &test, git_spec(&url, &b, json!([{"name": a}]))).await;
    // Not in the cycle, but behind it.
    agent::apply_bd_labelled(&client, &c, &test, git_spec(&url, &c, json!([{"name": a}]))).await;
    let stalled = wait_condition(&client, &agent, &a, "Stalled", "True", "dependency cycle").await;
    let conditions = stalled.status.unwrap().conditions;
    let message = &find(&conditions, "Stalled").unwrap().message;
    assert!(message.contains(&format!("{a} → {b} → {a}")), "{message}");
    let conditions = stalled_conditions(&client, &a).await;
    assert_eq!(
        find(&conditions, "Ready").unwrap().reason,
        "DependencyCycle"
    );
    wait_condition(
        &client,
        &agent,
        &b,
        "Stalled",
        "True",
        &format!("{b} → {a} → {b}"),
    )
    .await;
    wait_condition(
        &client,
        &agent,
        &c,
        "Stalled",
        "True",
        "depends on a dependency cycle",
    )
    .await;
    // Breaking the cycle lets them through.
    agent::apply_bd_labelled(&client, &b, &test, git_spec(&url, &b, json!([]))).await;
    wait_condition(&client, &agent, &c, "Ready", "True", "1 objects").await;
    wait_condition(&client, &agent, &a, "Ready", "True", "1 objects").await;
    cleanup(&client, &[&a, &b, &c], &a).await;
    for namespace in [&b, &c] {
        let _ = Api::<Namespace>::all(client.clone())
            .delete(namespace, &Default::default())
            .await;
    }
}

async fn stalled_conditions(
    client: &Client,
    name: &str,
) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    let bd = Api::<BundleDeployment>::all(client.clone())
        .get(name)
        .await
        .unwrap();
    bd.status.unwrap_or_default().conditions
}

#[tokio::test]
async fn a_ready_expression_on_a_config_map_gates_the_bundle() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let test = support::unique_name("deps-expr");
    let repo = fx.git_repo(&test);
    repo.commit_files(
        "main",
        &[(
            "cm.yaml",
            b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {value: '1'}\n"
                as &[u8],
        )],
        "app",
    );
    create_namespace(&client, &test).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);
    let flags: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "flags"}, "data": {"enabled": "false"}
    }))
    .unwrap();
    cms.create(&PostParams::default(), &flags).await.unwrap();
    let agent = Agent::start_with(&test, &["--requeue-seconds", "3600"]);
    let dependency = json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "namespace": test, "name": "flags",
        "readyExpr": "dep.data.enabled == 'true'",
    }]);
    agent::apply_bd(
        &client,
        &test,
        git_spec(&repo.url(fx.git_plain()), &test, dependency),
    )
    .await;
    let waiting = wait_condition(&client, &agent, &test, "Ready", "False", "v1 ConfigMap").await;
    let (_, reason, message) = ready(&waiting).unwrap();
    assert_eq!(reason, "DependencyNotReady");
    assert!(message.contains("readyExpr is false"), "{message}");
    assert!(cms.get_opt("app").await.unwrap().is_none());

    let started = Instant::now();
    let patch = json!({"data": {"enabled": "true"}});
    cms.patch("flags", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_condition(&client, &agent, &test, "Ready", "True", "1 objects").await;
    println!(
        "Ready {:.2} s after the ConfigMap changed",
        started.elapsed().as_secs_f64()
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    cleanup(&client, &[&test], &test).await;
}

#[tokio::test]
async fn the_schema_refuses_self_reference_unbounded_lists_and_objects_without_ready_expr() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let name = support::unique_name("deps-schema");
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let create = |depends_on: serde_json::Value| {
        let bds = bds.clone();
        let name = name.clone();
        async move {
            let bd: BundleDeployment = serde_json::from_value(json!({
                "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
                "metadata": {"name": name},
                "spec": {"format": "plain", "sources": [{"kind": "http", "http": {"url": "http://h/x.yaml"}}],
                         "dependsOn": depends_on},
            }))
            .unwrap();
            match bds
                .create(
                    &PostParams {
                        dry_run: true,
                        ..Default::default()
                    },
                    &bd,
                )
                .await
            {
                Ok(_) => String::new(),
                Err(error) => error.to_string(),
            }
        }
    };
    assert!(create(json!([{"name": name}]))
        .await
        .contains("cannot depend on itself"));
    let many: Vec<_> = (0..33).map(|i| json!({"name": format!("d{i}")})).collect();
    assert!(create(json!(many)).await.contains("33"));
    let no_expr = json!([{"apiVersion": "v1", "kind": "ConfigMap", "namespace": "x", "name": "y"}]);
    assert!(create(no_expr).await.contains("needs readyExpr"));
    let namespaced_bd = json!([{"name": "other", "namespace": "x"}]);
    assert!(create(namespaced_bd).await.contains("cluster-scoped"));
    assert_eq!(
        create(json!([{"name": "other"}])).await,
        "",
        "a valid dependency is admitted"
    );

    // The documented example is admitted as it is, and its readyExpr compiles.
    let block = docs::example("depends-on");
    let example: serde_json::Value = serde_saphyr::from_str(&block).unwrap();
    assert_eq!(create(example["spec"]["dependsOn"].clone()).await, "");
    for dependency in example["spec"]["dependsOn"].as_array().unwrap() {
        if let Some(text) = dependency["readyExpr"].as_str() {
            pallet::health::cel::ready::ReadyExpression::compile(text).unwrap();
        }
    }
}
