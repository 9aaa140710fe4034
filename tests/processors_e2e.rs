//! End to end, `spec.processors` on the local control plane, over the helm format: a kustomize
//! processor patches both the chart's Deployment and its hook Jobs; a `substitute` processor
//! reads its variables from a ConfigMap whose edit makes a new revision; a KRM function served
//! by the test annotates every object; a function answering with an error result leaves the
//! active revision untouched and says why in the conditions.
//!
//! The install namespace is labelled `pallet.dev/fake-kubelet=on`: the control plane's fake
//! kubelet runs the Deployment's Pods and completes the hook Jobs' Pods.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cli.rs"]
mod cli;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/krm_function.rs"]
mod krm_function;
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use agent::{apply_bd, Agent};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use oci_client::secrets::RegistryAuth;
use pallet::api::{BundleDeployment, BundleDeploymentStatus, RevisionPhase};
use serde_json::{json, Value};

async fn apply_namespaced(client: &Client, namespace: &str, object: Value) {
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .patch(
            &name,
            &PatchParams::apply(cluster::TEST_FIELD_MANAGER).force(),
            &Patch::Apply(&object),
        )
        .await
        .unwrap();
}

async fn status(client: &Client, name: &str) -> BundleDeploymentStatus {
    Api::<BundleDeployment>::all(client.clone())
        .get(name)
        .await
        .unwrap()
        .status
        .unwrap_or_default()
}

async fn wait<F>(
    client: &Client,
    agent: &Agent,
    name: &str,
    what: &str,
    check: F,
) -> BundleDeploymentStatus
where
    F: Fn(&BundleDeploymentStatus) -> bool,
{
    let start = Instant::now();
    loop {
        let st = status(client, name).await;
        if check(&st) {
            return st;
        }
        if start.elapsed() > Duration::from_secs(120) {
            panic!(
                "timed out waiting for {what}: active {:?}, revisions {:?}\n{:#?}\nagent log:\n{}",
                st.active_revision,
                st.revisions
                    .iter()
                    .map(|r| (r.number, r.phase))
                    .collect::<Vec<_>>(),
                st.conditions,
                agent.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn healthy(st: &BundleDeploymentStatus, number: i64) -> bool {
    st.active_revision == Some(number)
        && st
            .revisions
            .iter()
            .any(|r| r.number == number && r.phase == RevisionPhase::Healthy)
}

fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn spec(source: &Value, namespace: &str, function_url: &str, function_config: Value) -> Value {
    json!({
        "installNamespace": namespace,
        "sources": [source],
        "format": "helm",
        "config": {"helm": {"releaseName": "rel", "values": {"message": "${GREETING} from ${TEAM:=nobody}"}}},
        "rollout": {"progressDeadline": "90s"},
        "processors": [
            {"name": "patch-workloads", "kustomize": {"patches": [
                {"target": {"kind": "Deployment"},
                 "patch": "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: any\n  annotations:\n    patched-by: pallet\n"},
                {"target": {"kind": "Job"},
                 "patch": "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: any\n  annotations:\n    patched-by: pallet\n"},
            ]}},
            {"name": "vars", "substitute": {"strict": true,
                "varsFrom": [{"kind": "ConfigMap", "name": "cluster-vars", "namespace": namespace}]}},
            {"name": "set-team", "function": {"url": function_url, "config": function_config, "timeout": "10s"}},
        ],
    })
}

#[tokio::test]
async fn processors_patch_hooks_substitute_from_a_config_map_and_call_a_function() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let name = support::unique_name("proc");
    let registry = fx.registry_plain();
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/charts/hooks");
    fx.push_dir_as_image(registry, &name, "v1", &chart, &RegistryAuth::Anonymous)
        .await
        .unwrap();
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"pallet.dev/fake-kubelet": "on"}}});
    Api::<Namespace>::all(client.clone())
        .patch(
            &name,
            &PatchParams::apply(cluster::TEST_FIELD_MANAGER),
            &Patch::Apply(&namespace),
        )
        .await
        .unwrap();
    apply_namespaced(
        &client,
        &name,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cluster-vars"}, "data": {"GREETING": "hello"}}),
    )
    .await;
    let function = krm_function::KrmFunction::serve();
    let function_host = function
        .url
        .trim_start_matches("http://")
        .trim_end_matches('/');
    let function_host = function_host
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string();
    // The variables' namespace is the test's own, the function's host the test's server:
    // allow-listed, as an operator would.
    let agent = Agent::start_with(
        &name,
        &[
            "--plain-http-registry",
            &registry.host,
            "--allow-secret-namespace",
            &name,
            "--allow-function-host",
            &function_host,
        ],
    );
    let source = json!({"kind": "image", "image": {"ref": format!("{}/{name}:v1", registry.host)}});
    apply_bd(
        &client,
        &name,
        spec(&source, &name, &function.url, json!({"team": "a"})),
    )
    .await;
    wait(&client, &agent, &name, "revision 1 healthy", |st| {
        healthy(st, 1)
    })
    .await;

    // The kustomize processor patched the Deployment and the hook Jobs; the function annotated
    // everything; the substitution filled the chart's ConfigMap.
    let deployment = Api::<Deployment>::namespaced(client.clone(), &name)
        .get("rel-app")
        .await
        .unwrap();
    assert_eq!(
        annotation(&deployment.metadata, "patched-by"),
        Some("pallet")
    );
    assert_eq!(
        annotation(&deployment.metadata, "fn.example/team"),
        Some("a")
    );
    let jobs = Api::<Job>::namespaced(client.clone(), &name);
    for hook in ["rel-migrate", "rel-announce"] {
        let job = cluster::poll_until(
            &format!("hook Job {hook}"),
            Duration::from_secs(60),
            || async {
                jobs.get_opt(hook)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or("not there".to_string())
            },
        )
        .await;
        assert_eq!(
            annotation(&job.metadata, "patched-by"),
            Some("pallet"),
            "{hook}"
        );
        assert_eq!(
            annotation(&job.metadata, "fn.example/team"),
            Some("a"),
            "{hook}"
        );
        assert!(
            annotation(&job.metadata, "helm.sh/hook").is_some(),
            "{hook} is still a hook"
        );
    }
    let config = Api::<ConfigMap>::namespaced(client.clone(), &name);
    let message = |cm: ConfigMap| cm.data.unwrap_or_default().get("message").cloned();
    assert_eq!(
        message(config.get("rel-config").await.unwrap()).as_deref(),
        Some("hello from nobody")
    );
    let calls = function.calls();
    assert!(calls >= 1);
    // `pallet trace` names the processors that changed the object, from the revision's record.
    let traced = cli::pallet_ok(&["trace", "deployment/rel-app", "-n", &name]);
    assert!(traced.contains("Processed by:"), "{traced}");
    assert!(traced.contains("patch-workloads (changed)"), "{traced}");
    assert!(traced.contains("set-team (changed)"), "{traced}");
    assert!(
        !traced.contains("vars ("),
        "substitution did not touch the Deployment: {traced}"
    );

    // An edit of the variables' ConfigMap makes a new revision promptly (a watch, not the poll).
    apply_namespaced(
        &client,
        &name,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cluster-vars"}, "data": {"GREETING": "hi", "TEAM": "blue"}}),
    )
    .await;
    wait(&client, &agent, &name, "revision 2 healthy", |st| {
        healthy(st, 2)
    })
    .await;
    assert_eq!(
        message(config.get("rel-config").await.unwrap()).as_deref(),
        Some("hi from blue")
    );

    // A function that refuses: the render fails with its message, revision 2 stays applied.
    apply_bd(
        &client,
        &name,
        spec(
            &source,
            &name,
            &function.url,
            json!({"team": "a", "fail": "true"}),
        ),
    )
    .await;
    let st = wait(
        &client,
        &agent,
        &name,
        "the function's refusal in the conditions",
        |st| {
            st.conditions.iter().any(|c| {
                c.type_ == "Ready"
                    && c.status == "False"
                    && c.message.contains(krm_function::REFUSAL)
            })
        },
    )
    .await;
    let ready = st.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.reason, "FunctionFailed", "{ready:?}");
    assert!(
        ready.message.contains("set-team"),
        "names the processor: {}",
        ready.message
    );
    assert_eq!(st.active_revision, Some(2));
    assert_eq!(
        message(config.get("rel-config").await.unwrap()).as_deref(),
        Some("hi from blue")
    );
    let deployment = Api::<Deployment>::namespaced(client.clone(), &name)
        .get("rel-app")
        .await
        .unwrap();
    assert_eq!(
        annotation(&deployment.metadata, "fn.example/team"),
        Some("a"),
        "untouched"
    );
    let _ = Api::<BundleDeployment>::all(client.clone())
        .delete(&name, &Default::default())
        .await;
}
