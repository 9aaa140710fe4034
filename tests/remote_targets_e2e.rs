//! BundleDeployments on remote clusters (`spec.kubeConfig`), end to end on three control planes
//! (`tools/clusters.sh start`: the management cluster, where the agent, its BundleDeployments,
//! revisions and status live, and two targets): each bundle's objects land on its own cluster
//! only, drift there is corrected, a deletion prunes there; a target that stops makes its own
//! bundles Ready=False naming it while the others go on, and they recover when it is back (a
//! deletion meanwhile waits for it); a helm release there is taken over there, with its lookups
//! and hooks on that cluster.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/remote.rs"]
mod remote;
mod support;

use std::time::{Duration, Instant};

use agent::{apply_bd_labelled, is_ready, wait_bd_gone, wait_status, Agent};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::Client;
use pallet::api::BundleDeployment;
use remote::{TestNamespaces, TestSecret};
use serde_json::{json, Value};

/// A plain bundle of one ConfigMap `settings` in `namespace` holding `value`, served by the
/// fixtures' HTTP server; its source.
fn bundle(name: &str, namespace: &str, value: &str) -> Value {
    let fx = support::Fixtures::load();
    let yaml = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {namespace}\ndata:\n  value: {value}\n"
    );
    let path = fx.put_file(
        &format!("remote-targets/{name}/{value}.yaml"),
        yaml.as_bytes(),
    );
    json!({"kind": "http", "http": {"url": fx.http_plain().url_for(&path)}})
}

/// The spec of a bundle installing into `namespace`, on the cluster of `secret` (None: the
/// agent's own).
fn spec(name: &str, namespace: &str, value: &str, secret: Option<&str>) -> Value {
    let mut spec = json!({
        "format": "plain",
        "installNamespace": namespace,
        "sources": [bundle(name, namespace, value)],
    });
    if let Some(secret) = secret {
        spec["kubeConfig"] = json!({"secretRef": {"name": secret}});
    }
    spec
}

/// The `value` of ConfigMap `settings` in `namespace` of `client`'s cluster (None: not there).
async fn value(client: &Client, namespace: &str) -> Option<String> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    cms.get_opt("settings")
        .await
        .unwrap()
        .and_then(|c| c.data)
        .and_then(|d| d.get("value").cloned())
}

/// Waits until ConfigMap `settings` in `namespace` of `client`'s cluster holds `expected`.
async fn wait_value(client: &Client, namespace: &str, expected: Option<&str>, what: &str) {
    cluster::poll_until(what, Duration::from_secs(60), || async move {
        let live = value(client, namespace).await;
        if live.as_deref() == expected {
            Ok(())
        } else {
            Err(format!("value {live:?}"))
        }
    })
    .await;
}

async fn namespace_exists(client: &Client, name: &str) -> bool {
    Api::<Namespace>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap()
        .is_some_and(|n| n.metadata.deletion_timestamp.is_none())
}

async fn wait_ready(client: &Client, agent: &Agent, name: &str) {
    wait_status(client, agent, name, &format!("{name} Ready"), is_ready).await;
}

/// Waits until `name` is Ready=False with `reason` and a message containing `part`; returns
/// how long it took.
async fn wait_not_ready(client: &Client, name: &str, reason: &str, part: &str) -> Duration {
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let start = Instant::now();
    cluster::poll_until(
        &format!("{name}: Ready=False {reason} naming {part}"),
        Duration::from_secs(60),
        || {
            let bds = bds.clone();
            async move {
                let bd = bds.get(name).await.map_err(|e| e.to_string())?;
                let conditions = bd.status.unwrap_or_default().conditions;
                let ready = conditions.iter().find(|c| c.type_ == "Ready");
                match ready {
                    Some(c)
                        if c.status == "False"
                            && c.reason == reason
                            && c.message.contains(part) =>
                    {
                        Ok(())
                    }
                    other => Err(format!("{other:?}")),
                }
            }
        },
    )
    .await;
    start.elapsed()
}

#[tokio::test]
async fn each_bundle_lands_on_its_own_cluster_drift_is_corrected_there_and_deletion_prunes_there() {
    let _running = remote::running_lock();
    let management = cluster::client().await;
    cluster::install_crd(&management).await;
    let (target_a, target_b) = (
        remote::client("target-a").await,
        remote::client("target-b").await,
    );
    let test = support::unique_name("rt-land");
    let (local, on_a, on_b) = (
        format!("{test}-local"),
        format!("{test}-a"),
        format!("{test}-b"),
    );
    let secret_a = TestSecret::of(&management, "target-a", &format!("{test}-a"), &[&on_a]).await;
    let secret_b = TestSecret::of(&management, "target-b", &format!("{test}-b"), &[&on_b]).await;
    let mut namespaces = TestNamespaces::default();
    for cluster in ["management", "target-a", "target-b"] {
        for bundle in [&local, &on_a, &on_b] {
            namespaces.track(cluster, bundle);
        }
    }
    let agent = Agent::start(&test);
    apply_bd_labelled(&management, &local, &test, spec(&local, &local, "v1", None)).await;
    apply_bd_labelled(
        &management,
        &on_a,
        &test,
        spec(&on_a, &on_a, "v1", Some(&secret_a.name)),
    )
    .await;
    apply_bd_labelled(
        &management,
        &on_b,
        &test,
        spec(&on_b, &on_b, "v1", Some(&secret_b.name)),
    )
    .await;
    for name in [&local, &on_a, &on_b] {
        wait_ready(&management, &agent, name).await;
    }
    // Each bundle's objects are on its own cluster, and only there.
    let clusters = [
        ("management", &management, &local),
        ("target-a", &target_a, &on_a),
        ("target-b", &target_b, &on_b),
    ];
    for (cluster_name, client, own) in clusters {
        for bundle in [&local, &on_a, &on_b] {
            let there = namespace_exists(client, bundle).await;
            assert_eq!(
                there,
                bundle == own,
                "namespace {bundle} on {cluster_name}: {there}"
            );
        }
        assert_eq!(value(client, own).await.as_deref(), Some("v1"));
    }
    // Revisions and status stay in the management cluster: the remote bundle's revision
    // snapshot is there.
    let snapshots: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(management.clone(), cluster::AGENT_NAMESPACE);
    let listed = snapshots
        .list_metadata(
            &kube::api::ListParams::default()
                .labels(&format!("{}={on_a}", pallet::revision::LABEL_REVISION_OF)),
        )
        .await
        .unwrap();
    assert!(
        !listed.items.is_empty(),
        "no revision snapshot of {on_a} in the management cluster"
    );

    // Drift on a remote is corrected there, promptly (the cluster's watch brings the pass).
    let cms: Api<ConfigMap> = Api::namespaced(target_a.clone(), &on_a);
    cms.patch(
        "settings",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"value": "drifted"}})),
    )
    .await
    .unwrap();
    wait_value(&target_a, &on_a, Some("v1"), "drift on target-a corrected").await;

    // Deleting a remote bundle prunes its objects on its cluster.
    Api::<BundleDeployment>::all(management.clone())
        .delete(&on_b, &DeleteParams::default())
        .await
        .unwrap();
    wait_bd_gone(&management, &on_b).await;
    assert_eq!(value(&target_b, &on_b).await, None, "pruned on target-b");
    // The other bundles are untouched by it.
    assert_eq!(value(&target_a, &on_a).await.as_deref(), Some("v1"));
    drop(agent);
}

#[tokio::test]
async fn a_stopped_cluster_fails_only_its_own_bundles_and_they_recover_when_it_is_back() {
    let _outage = remote::outage_lock();
    let management = cluster::client().await;
    cluster::install_crd(&management).await;
    let target_b = remote::client("target-b").await;
    let test = support::unique_name("rt-outage");
    let (local, on_b) = (format!("{test}-local"), format!("{test}-b"));
    let secret_b = TestSecret::of(&management, "target-b", &format!("{test}-b"), &[&on_b]).await;
    let mut namespaces = TestNamespaces::default();
    namespaces.track("management", &local);
    namespaces.track("target-b", &on_b);
    let agent = Agent::start(&test);
    apply_bd_labelled(&management, &local, &test, spec(&local, &local, "v1", None)).await;
    apply_bd_labelled(
        &management,
        &on_b,
        &test,
        spec(&on_b, &on_b, "v1", Some(&secret_b.name)),
    )
    .await;
    wait_ready(&management, &agent, &local).await;
    wait_ready(&management, &agent, &on_b).await;

    // The target stops; a new revision of its bundle is asked for meanwhile.
    remote::stop("target-b");
    let restarted = Restart("target-b");
    agent::patch_bd(
        &management,
        &on_b,
        json!({"spec": {"sources": [bundle(&on_b, &on_b, "v2")]}}),
    )
    .await;
    let took = wait_not_ready(&management, &on_b, "ClusterUnreachable", &secret_b.name).await;
    println!("Ready=False naming the stopped cluster after {took:?}");
    // Another bundle keeps reconciling: a change to it is applied while target-b is down.
    agent::patch_bd(
        &management,
        &local,
        json!({"spec": {"sources": [bundle(&local, &local, "v2")]}}),
    )
    .await;
    wait_value(
        &management,
        &local,
        Some("v2"),
        "the local bundle's change applied",
    )
    .await;
    wait_ready(&management, &agent, &local).await;
    // Still failing, still naming the cluster (nothing else was reported for it).
    wait_not_ready(&management, &on_b, "ClusterUnreachable", &secret_b.name).await;

    // Back: the bundle's new revision is applied there at once.
    remote::start("target-b");
    std::mem::forget(restarted);
    let back = Instant::now();
    wait_ready(&management, &agent, &on_b).await;
    println!(
        "Ready again {:?} after the cluster came back",
        back.elapsed()
    );
    assert_eq!(value(&target_b, &on_b).await.as_deref(), Some("v2"));

    // Deleted while its cluster is down: the deletion waits for the cluster (the objects there
    // may still run), says so, and keeps the finalizer; it prunes there once the cluster is back.
    remote::stop("target-b");
    let restarted = Restart("target-b");
    let bds: Api<BundleDeployment> = Api::all(management.clone());
    // A request to the stopped cluster marks it down (the bundle's watch may not have noticed).
    agent::patch_bd(
        &management,
        &on_b,
        json!({"metadata": {"annotations": {"pallet.dev/requested-reconcile": "outage"}}}),
    )
    .await;
    wait_not_ready(&management, &on_b, "ClusterUnreachable", &secret_b.name).await;
    bds.delete(&on_b, &DeleteParams::default()).await.unwrap();
    wait_not_ready(
        &management,
        &on_b,
        "ClusterUnreachable",
        "deleting: cluster",
    )
    .await;
    let held = bds.get(&on_b).await.unwrap();
    assert!(
        held.metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"pallet.dev/cleanup".to_string()),
        "the finalizer stays while the cluster is down"
    );
    remote::start("target-b");
    std::mem::forget(restarted);
    wait_bd_gone(&management, &on_b).await;
    assert_eq!(
        value(&target_b, &on_b).await,
        None,
        "pruned on target-b once back"
    );
    drop(agent);
}

/// Starts a stopped target again if the test ends before it did (best effort: it may run
/// while the test panics, where no panic may follow).
struct Restart(&'static str);

impl Drop for Restart {
    fn drop(&mut self) {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/clusters.sh");
        let _ = std::process::Command::new(script)
            .args(["start", self.0])
            .output();
    }
}

/// A chart whose ConfigMap `settings` holds what `lookup` finds in ConfigMap `given` of the
/// release's namespace, with a post-install and post-upgrade hook Job (a takeover runs the
/// upgrade's: helm installed the chart already).
fn lookup_and_hook_chart(dir: &std::path::Path) {
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: remote\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("templates/settings.yaml"),
        r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  value: {{ (lookup "v1" "ConfigMap" .Release.Namespace "given").data.value | default "nothing" | quote }}
"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("templates/hook.yaml"),
        r#"apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-post
  annotations:
    helm.sh/hook: post-install,post-upgrade
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: hook
        image: example.com/hook:v1
"#,
    )
    .unwrap();
}

/// A ConfigMap `given` in `namespace` of `client`'s cluster holding `value`, in a namespace the
/// fake kubelet serves (it runs the hook's Pod).
async fn given(client: &Client, namespace: &str, value: &str) {
    cluster::kubelet_namespace(client, namespace).await;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "given", "namespace": namespace}, "data": {"value": value}});
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .patch(
            "given",
            &PatchParams::apply(cluster::TEST_FIELD_MANAGER),
            &Patch::Apply(&cm),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_helm_release_on_a_remote_is_taken_over_there_with_its_lookups_and_hooks_run_there() {
    let _running = remote::running_lock();
    let management = cluster::client().await;
    cluster::install_crd(&management).await;
    let target_a = remote::client("target-a").await;
    let fx = support::Fixtures::load();
    let name = support::unique_name("rt-helm");
    let secret = TestSecret::of(&management, "target-a", &name, &[&name]).await;
    let mut namespaces = TestNamespaces::default();
    namespaces.track("target-a", &name);
    namespaces.track("management", &name);
    // The lookup's object on both clusters, with different values: the render must read the
    // target's.
    given(&target_a, &name, "on-target-a").await;
    given(&management, &name, "on-management").await;
    // The release helm installed on the target, without its hooks.
    let chart = tempfile::tempdir().unwrap();
    lookup_and_hook_chart(chart.path());
    let helm = std::process::Command::new(
        std::path::PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/pallet/bin/helm"),
    )
    .args([
        "install",
        &name,
        &chart.path().to_string_lossy(),
        "--no-hooks",
    ])
    .args(["--namespace", &name, "--kubeconfig"])
    .arg(remote::kubeconfig("target-a"))
    .env("HELM_CACHE_HOME", chart.path().join(".helm-cache"))
    .env("HELM_CONFIG_HOME", chart.path().join(".helm-config"))
    .env("HELM_DATA_HOME", chart.path().join(".helm-data"))
    .output()
    .unwrap();
    assert!(
        helm.status.success(),
        "helm install: {}",
        String::from_utf8_lossy(&helm.stderr)
    );
    let cms: Api<ConfigMap> = Api::namespaced(target_a.clone(), &name);
    let installed = cms.get("settings").await.unwrap();
    assert_eq!(
        installed
            .data
            .as_ref()
            .and_then(|d| d.get("value"))
            .map(String::as_str),
        Some("on-target-a"),
        "helm's own render"
    );
    // The same chart, taken over by a BundleDeployment targeting that cluster.
    let registry = fx.registry_plain();
    fx.push_dir_as_image(
        registry,
        &name,
        "v1",
        chart.path(),
        &oci_client::secrets::RegistryAuth::Anonymous,
    )
    .await
    .expect("the chart is pushed");
    let agent = Agent::start_with(&name, &["--plain-http-registry", &registry.host]);
    apply_bd_labelled(
        &management,
        &name,
        &name,
        json!({
            "format": "helm",
            "installNamespace": name,
            "sources": [{"kind": "image", "image": {"ref": format!("{}/{name}:v1", registry.host)}}],
            "kubeConfig": {"secretRef": {"name": secret.name}},
            "takeover": {"from": "Helm", "name": name, "namespace": name},
        }),
    )
    .await;
    let status = wait_status(
        &management,
        &agent,
        &name,
        "Ready with its hook done",
        |s, g| {
            is_ready(s, g)
                && s.revisions.iter().any(|r| {
                    !r.hooks.is_empty()
                        && r.hooks
                            .iter()
                            .all(|h| h.phase == pallet::api::HookPhase::Succeeded)
                })
        },
    )
    .await;
    // Adopted in place: the same object, its value from the target's lookup.
    let adopted = cms.get("settings").await.unwrap();
    assert_eq!(
        adopted.metadata.uid, installed.metadata.uid,
        "taken over in place"
    );
    assert_eq!(
        adopted
            .data
            .as_ref()
            .and_then(|d| d.get("value"))
            .map(String::as_str),
        Some("on-target-a"),
        "the lookup read the target cluster"
    );
    assert!(
        status.takeover.is_some(),
        "the takeover is recorded in status: {status:?}"
    );
    // The release's records there are marked uninstalled: helm lists it no more.
    let listed = std::process::Command::new(
        std::path::PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/pallet/bin/helm"),
    )
    .args(["list", "-q", "--namespace", &name, "--kubeconfig"])
    .arg(remote::kubeconfig("target-a"))
    .env("HELM_CACHE_HOME", chart.path().join(".helm-cache"))
    .env("HELM_CONFIG_HOME", chart.path().join(".helm-config"))
    .env("HELM_DATA_HOME", chart.path().join(".helm-data"))
    .output()
    .unwrap();
    assert!(
        !String::from_utf8_lossy(&listed.stdout).contains(&name),
        "helm still lists the release: {}",
        String::from_utf8_lossy(&listed.stdout)
    );
    // The hook ran on the target, not on the management cluster.
    let job = format!("{name}-post");
    let jobs_a: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(target_a.clone(), &name);
    let jobs_m: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(management.clone(), &name);
    assert!(
        jobs_a.get_opt(&job).await.unwrap().is_some(),
        "the hook Job on target-a"
    );
    assert!(
        jobs_m.get_opt(&job).await.unwrap().is_none(),
        "no hook Job on the management cluster"
    );
    assert_eq!(
        value(&management, &name).await,
        None,
        "nothing of the chart on the management cluster"
    );
    drop(agent);
}
