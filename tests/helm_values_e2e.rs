//! End-to-end: `config.helm.valuesFrom` and `config.helm.valuesFiles` with the agent binary on
//! the local control plane. The agent runs with an hour-long requeue, so a new revision within
//! seconds of editing a ConfigMap can only come from the watch on that ConfigMap.
//!
//! The chart is made here: one ConfigMap whose data shows the values it was rendered with. It is
//! pushed to the fixture registry as an image (as `pallet push` does).

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/docs.rs"]
mod docs;
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agent::{apply_bd, wait_condition, Agent, TEST_LABEL};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use oci_client::secrets::RegistryAuth;
use pallet::api::{BundleDeployment, ValuesSourceKind};
use serde_json::{json, Value};

/// The agent's namespace in these tests: where references without a namespace are read.
const AGENT_NAMESPACE: &str = "pallet-system";
/// Long enough that only a watch explains a prompt reconcile.
const REQUEUE: &str = "3600";
/// How long an edit may take to become a new revision.
const PROMPT: Duration = Duration::from_secs(30);

/// Writes the test chart: values.yaml, values-prod.yaml and one ConfigMap template.
fn write_chart(dir: &std::path::Path) {
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: app\nversion: 1.0.0\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("values.yaml"),
        "message: chart default\nextra: chart default\nreplicas: 1\npassword: none\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("values-prod.yaml"),
        "extra: from values-prod.yaml\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("templates/out.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-out\ndata:\n  \
         message: {{ .Values.message | quote }}\n  extra: {{ .Values.extra | quote }}\n  \
         replicas: {{ .Values.replicas | quote }}\n  password: {{ .Values.password | quote }}\n",
    )
    .unwrap();
}

/// Pushes the test chart as `<registry>/<repo>:<tag>`; returns the reference.
async fn push_chart(repo: &str, tag: &str) -> String {
    let fx = support::Fixtures::load();
    let registry = fx.registry_plain();
    let scratch = tempfile::tempdir().unwrap();
    write_chart(scratch.path());
    fx.push_dir_as_image(
        registry,
        repo,
        tag,
        scratch.path(),
        &RegistryAuth::Anonymous,
    )
    .await
    .expect("push the chart");
    format!("{}/{repo}:{tag}", registry.host)
}

fn start_agent(name: &str) -> Agent {
    let registry = &support::Fixtures::load().registry_plain().host;
    Agent::start_with(
        name,
        &[
            "--plain-http-registry",
            registry,
            "--requeue-seconds",
            REQUEUE,
        ],
    )
}

async fn apply<K>(api: &Api<K>, name: &str, object: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::apply(cluster::TEST_FIELD_MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {name}: {e}"));
}

/// A ConfigMap of values in the agent's namespace, labelled for BundleDeployment `bd`.
fn values_config_map(bd: &str, name: &str, message: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": AGENT_NAMESPACE,
                     "labels": {format!("access.pallet.dev/{bd}"): "true"}},
        "data": {"values.yaml": format!("message: {message}\n")},
    })
}

/// The data of the chart's output ConfigMap, and its resourceVersion.
async fn output(
    client: &Client,
    namespace: &str,
    release: &str,
) -> (BTreeMap<String, String>, String) {
    let map = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get(&format!("{release}-out"))
        .await
        .expect("the chart's ConfigMap");
    (
        map.data.unwrap_or_default(),
        map.metadata.resource_version.unwrap_or_default(),
    )
}

/// Waits until `name` is Ready with `revision` active; returns the object.
async fn wait_ready(
    client: &Client,
    agent: &Agent,
    name: &str,
    revision: i64,
    within: Duration,
) -> BundleDeployment {
    let api: Api<BundleDeployment> = Api::all(client.clone());
    let start = Instant::now();
    loop {
        let bd = api.get(name).await.unwrap();
        let status = bd.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if ready && status.active_revision == Some(revision) {
            return bd;
        }
        if start.elapsed() > within {
            panic!(
                "{name}: not Ready at revision {revision} within {within:?}; status: {}\nagent log:\n{}",
                serde_json::to_string_pretty(&status).unwrap_or_default(),
                agent.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn cleanup(
    client: &Client,
    name: &str,
    namespace: &str,
    config_maps: &[String],
    secrets: &[String],
) {
    let _ = Api::<BundleDeployment>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
    agent::wait_bd_gone(client, name).await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(namespace, &DeleteParams::default())
        .await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), AGENT_NAMESPACE);
    for map in config_maps {
        let _ = maps.delete(map, &DeleteParams::default()).await;
    }
    let secret_api: Api<Secret> = Api::namespaced(client.clone(), AGENT_NAMESPACE);
    for secret in secrets {
        let _ = secret_api.delete(secret, &DeleteParams::default()).await;
    }
}

/// The fenced YAML block right after `<!-- example: {marker} -->` in the documentation.
fn documented_example(marker: &str) -> String {
    docs::example(marker)
}

/// The documented example, applied with unique names: the ConfigMap and the Secret it names, the
/// BundleDeployment reading them (an optional third reference missing) and a values file of the
/// chart; then an edit of the ConfigMap makes revision 2 within seconds.
#[tokio::test]
async fn the_documented_example_installs_and_an_edited_configmap_makes_a_new_revision_promptly() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let name = support::unique_name("vf");
    let word = replace_word("app");
    let substitute = |text: &str| {
        word(text, &name).replace(
            "localhost:5000",
            &support::Fixtures::load().registry_plain().host,
        )
    };
    push_chart(&format!("charts/{name}"), "1.0.0").await;

    let values_name = format!("{name}-values");
    let secret_name = format!("{name}-secrets");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), AGENT_NAMESPACE);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), AGENT_NAMESPACE);
    let config_map: Value =
        serde_saphyr::from_str(&substitute(&documented_example("values-from configmap"))).unwrap();
    assert_eq!(config_map["metadata"]["name"], json!(values_name));
    apply(&maps, &values_name, config_map).await;
    // As the README's `kubectl create secret generic … --from-literal=values.yaml=…`.
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": secret_name, "namespace": AGENT_NAMESPACE,
                             "labels": {format!("access.pallet.dev/{name}"): "true"}},
                "stringData": {"values.yaml": "password: s3cret"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let mut bd: Value =
        serde_saphyr::from_str(&substitute(&documented_example("values-from bundle"))).unwrap();
    assert_eq!(bd["metadata"]["name"], json!(name));
    bd["metadata"]["labels"] = json!({TEST_LABEL: name});
    let agent = start_agent(&name);
    let bds: Api<BundleDeployment> = Api::all(client.clone());

    let run = async {
        cluster::track_bundle_deployment(&name);
        apply(&bds, &name, bd).await;
        let ready = wait_ready(&client, &agent, &name, 1, Duration::from_secs(90)).await;
        let (data, _) = output(&client, &name, &name).await;
        assert_eq!(
            data["message"], "hello from a ConfigMap",
            "valuesFrom ConfigMap: {data:?}"
        );
        assert_eq!(data["password"], "s3cret", "valuesFrom Secret: {data:?}");
        assert_eq!(
            data["extra"], "from values-prod.yaml",
            "valuesFiles: {data:?}"
        );
        assert_eq!(data["replicas"], "2", "inline values: {data:?}");
        let status = ready.status.unwrap();
        let first = status.revisions[0].values_from.clone();
        let names: Vec<(ValuesSourceKind, String)> =
            first.iter().map(|v| (v.kind, v.name.clone())).collect();
        assert_eq!(
            names,
            [
                (
                    ValuesSourceKind::ConfigMap,
                    format!("{AGENT_NAMESPACE}/{values_name}")
                ),
                (
                    ValuesSourceKind::Secret,
                    format!("{AGENT_NAMESPACE}/{secret_name}")
                ),
                (
                    ValuesSourceKind::ConfigMap,
                    format!("{AGENT_NAMESPACE}/{name}-overrides")
                ),
            ]
        );
        assert!(first[0].digest.starts_with("sha256:") && first[1].digest.starts_with("sha256:"));
        assert_eq!(
            first[2].digest, "absent",
            "the optional reference is missing"
        );

        // The edit: nothing but the ConfigMap's watch can reconcile within the hour's requeue.
        let edited = Instant::now();
        apply(
            &maps,
            &values_name,
            values_config_map(&name, &values_name, "edited"),
        )
        .await;
        let ready = wait_ready(&client, &agent, &name, 2, PROMPT).await;
        eprintln!("revision 2 Ready {:?} after the edit", edited.elapsed());
        let (data, _) = output(&client, &name, &name).await;
        assert_eq!(data["message"], "edited");
        let second = ready.status.unwrap().revisions[0].values_from.clone();
        assert_ne!(
            second[0].digest, first[0].digest,
            "the ConfigMap's digest moved"
        );
        assert_eq!(second[1].digest, first[1].digest, "the Secret's did not");

        // `pallet trace` names the values that produced the object.
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_pallet"))
            .args([
                "trace",
                &format!("configmap/{name}-out"),
                "-n",
                &name,
                "--kubeconfig",
            ])
            .arg(cluster::kubeconfig_path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("Values from:"), "{text}");
        assert!(
            text.contains(&format!(
                "ConfigMap {AGENT_NAMESPACE}/{values_name} -> {}",
                second[0].digest
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "ConfigMap {AGENT_NAMESPACE}/{name}-overrides -> absent"
            )),
            "{text}"
        );

        // The Secret is watched the same way.
        secrets
            .patch(
                &secret_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"stringData": {"values.yaml": "password: rotated"}})),
            )
            .await
            .unwrap();
        wait_ready(&client, &agent, &name, 3, PROMPT).await;
        assert_eq!(output(&client, &name, &name).await.0["password"], "rotated");
    };
    let result = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(run)).await;
    cleanup(&client, &name, &name, &[values_name], &[secret_name]).await;
    drop(agent);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// A required reference that disappears is a clear condition and the installed objects stay as
/// they are; recreating it (seen by the watch) makes the next revision. A valuesFiles entry that
/// is not in the chart is a clear condition too.
#[tokio::test]
async fn a_missing_required_reference_is_a_clear_condition_and_the_objects_stay() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let name = support::unique_name("vfreq");
    let image = push_chart(&name, "v1").await;
    let values_name = format!("{name}-values");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), AGENT_NAMESPACE);
    apply(
        &maps,
        &values_name,
        values_config_map(&name, &values_name, "first"),
    )
    .await;
    let agent = start_agent(&name);
    let spec = |values_files: Value| {
        json!({
            "format": "helm",
            "installNamespace": name,
            "sources": [{"kind": "image", "image": {"ref": image}}],
            // No valuesKey: every key of the ConfigMap.
            "config": {"helm": {
                "valuesFrom": [{"kind": "ConfigMap", "name": values_name}],
                "valuesFiles": values_files,
            }},
        })
    };

    let run = async {
        apply_bd(&client, &name, spec(json!([]))).await;
        wait_ready(&client, &agent, &name, 1, Duration::from_secs(90)).await;
        let (data, version) = output(&client, &name, &name).await;
        assert_eq!(data["message"], "first");
        assert_eq!(data["extra"], "chart default");

        maps.delete(&values_name, &DeleteParams::default())
            .await
            .unwrap();
        let bd = wait_condition(
            &client,
            &agent,
            &name,
            "Ready",
            "False",
            &format!("ConfigMap {AGENT_NAMESPACE}/{values_name} not found"),
        )
        .await;
        let status = bd.status.unwrap();
        let unpacked = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Unpacked")
            .unwrap();
        assert_eq!(unpacked.reason, "ValuesNotFound", "{unpacked:?}");
        assert!(
            unpacked.message.contains("config.helm.valuesFrom[0]"),
            "{}",
            unpacked.message
        );
        assert_eq!(status.active_revision, Some(1));
        let (data, same_version) = output(&client, &name, &name).await;
        assert_eq!(
            (data["message"].as_str(), same_version),
            ("first", version),
            "untouched"
        );

        // Created again: the watch sees it, revision 2 follows.
        apply(
            &maps,
            &values_name,
            values_config_map(&name, &values_name, "second"),
        )
        .await;
        wait_ready(&client, &agent, &name, 2, PROMPT).await;
        assert_eq!(output(&client, &name, &name).await.0["message"], "second");

        // A values file the chart does not have.
        apply_bd(&client, &name, spec(json!(["values-staging.yaml"]))).await;
        let bd = wait_condition(
            &client,
            &agent,
            &name,
            "Ready",
            "False",
            "valuesFiles: \"values-staging.yaml\" is not a file of the chart",
        )
        .await;
        assert_eq!(bd.status.unwrap().active_revision, Some(2));
        // And one it has: revision 3.
        apply_bd(&client, &name, spec(json!(["values-prod.yaml"]))).await;
        wait_ready(&client, &agent, &name, 3, PROMPT).await;
        assert_eq!(
            output(&client, &name, &name).await.0["extra"],
            "from values-prod.yaml"
        );

        // The secret-namespace rule holds for ConfigMaps: another namespace, no serviceAccount.
        let mut refused = spec(json!(["values-prod.yaml"]));
        refused["config"]["helm"]["valuesFrom"] =
            json!([{"kind": "ConfigMap", "name": "elsewhere", "namespace": name}]);
        apply_bd(&client, &name, refused).await;
        let bd = wait_condition(
            &client,
            &agent,
            &name,
            "Ready",
            "False",
            &format!("ConfigMap {name}/elsewhere is outside the agent's namespace"),
        )
        .await;
        let status = bd.status.unwrap();
        let unpacked = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Unpacked")
            .unwrap();
        assert_eq!(unpacked.reason, "ValuesNotAllowed", "{unpacked:?}");
        assert_eq!(status.active_revision, Some(3));
    };
    let result = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(run)).await;
    cleanup(&client, &name, &name, &[values_name], &[]).await;
    drop(agent);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Replaces `word` where it stands alone (not inside a longer name such as `apps` or
/// `happy`): the README example's names all derive from it.
fn replace_word(word: &'static str) -> impl Fn(&str, &str) -> String {
    move |text: &str, with: &str| {
        let is_name_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find(word) {
            let before = rest[..at].chars().next_back();
            let after = rest[at + word.len()..].chars().next();
            out.push_str(&rest[..at]);
            if before.is_some_and(is_name_char) || after.is_some_and(is_name_char) {
                out.push_str(word);
            } else {
                out.push_str(with);
            }
            rest = &rest[at + word.len()..];
        }
        out.push_str(rest);
        out
    }
}
