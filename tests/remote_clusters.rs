//! The remote-cluster registry against real control planes (`tools/clusters.sh start`: the
//! management cluster and two targets): a client per cluster built from its kubeconfig Secret,
//! shared watches there, a cluster that stops or hangs reported at once and back at once, new
//! credentials used without a restart, and kubeconfigs that would reach the agent's files or run
//! a program refused.

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/remote.rs"]
mod remote;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::runtime::reflector::ObjectRef;
use kube::Client;
use pallet::api::BundleDeployment;
use pallet::apply::live::Lookup;
use pallet::clusters::{ClusterError, ClusterKey, ClusterRegistry, ClusterSettings};
use pallet::egress::EgressPolicy;
use serde_json::json;
use tokio::sync::mpsc;

type Triggers = mpsc::UnboundedReceiver<ObjectRef<BundleDeployment>>;

fn settings(request_timeout: Duration) -> ClusterSettings {
    ClusterSettings {
        agent_namespace: cluster::AGENT_NAMESPACE.into(),
        request_timeout,
        connect_timeout: Duration::from_secs(2),
        egress: EgressPolicy {
            allow_loopback: true,
            ..Default::default()
        },
        cache_bytes: 1 << 20,
    }
}

async fn registry(request_timeout: Duration) -> (ClusterRegistry, Triggers) {
    let management = cluster::client().await;
    remote::write_secrets();
    let (trigger, triggers) = mpsc::unbounded_channel();
    let registry = ClusterRegistry::new(management, settings(request_timeout), Some(trigger));
    (registry, triggers)
}

fn key(name: &str) -> ClusterKey {
    ClusterKey {
        namespace: cluster::AGENT_NAMESPACE.into(),
        name: name.into(),
        key: None,
        context: None,
    }
}

fn config_maps() -> ApiResource {
    ApiResource::erase::<ConfigMap>(&())
}

/// Waits until `bundle` is asked for on `triggers`.
async fn triggered(triggers: &mut Triggers, bundle: &str, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let left = within.saturating_sub(start.elapsed());
        match tokio::time::timeout(left, triggers.recv()).await {
            Ok(Some(request)) if request.name == bundle => return start.elapsed(),
            Ok(Some(_)) => continue,
            _ => panic!("{bundle} was not asked for within {within:?}"),
        }
    }
}

async fn secret_with(management: &Client, name: &str, kubeconfig: &str) {
    let secrets: Api<Secret> = Api::namespaced(management.clone(), cluster::AGENT_NAMESPACE);
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "labels": {"pallet.dev/test": "remote-clusters"}},
        "stringData": {"value": kubeconfig},
    });
    secrets
        .patch(
            name,
            &PatchParams::apply(cluster::TEST_FIELD_MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap();
}

async fn delete_secret(management: &Client, name: &str) {
    let secrets: Api<Secret> = Api::namespaced(management.clone(), cluster::AGENT_NAMESPACE);
    let _ = secrets.delete(name, &DeleteParams::default()).await;
}

/// The kubeconfig of target `name`'s Secret, with its user replaced by `user`.
fn kubeconfig_as(name: &str, user: serde_json::Value) -> String {
    let text = std::fs::read_to_string(remote::remote_kubeconfig(name)).unwrap();
    let mut config: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    config["users"][0]["user"] = user;
    serde_json::to_string(&config).unwrap()
}

#[tokio::test]
async fn a_target_is_the_cluster_of_its_secret_and_its_watches_are_shared() {
    let _running = remote::running_lock();
    let (registry, mut triggers) = registry(Duration::from_secs(10)).await;
    let secret = registry.secret(&key("target-a")).await.unwrap().unwrap();
    assert_eq!(
        secret.meta.labels.as_ref().unwrap()["pallet.dev/cluster"],
        "true"
    );
    let one = registry
        .target(&key("target-a"), "remote-bd-one")
        .await
        .unwrap();
    let two = registry
        .target(&key("target-a"), "remote-bd-two")
        .await
        .unwrap();
    assert!(std::sync::Arc::ptr_eq(&one, &two), "one client per cluster");
    // A write through it lands on target-a, not on the management cluster.
    let name = cluster::unique_name("remote-cm");
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"pallet.dev/bundle-deployment": "remote-bd-one"}},
        "data": {"a": "1"},
    });
    let on_target: Api<ConfigMap> = Api::namespaced(one.client.clone(), "default");
    on_target
        .create(&PostParams::default(), &serde_json::from_value(cm).unwrap())
        .await
        .unwrap();
    let admin_a: Api<ConfigMap> = Api::namespaced(remote::client("target-a").await, "default");
    assert!(admin_a.get_opt(&name).await.unwrap().is_some());
    let management: Api<ConfigMap> = Api::namespaced(cluster::client().await, "default");
    assert!(management.get_opt(&name).await.unwrap().is_none());
    // Its watch knows the object, and a change out of band asks for its owner.
    one.watches.watch(&config_maps());
    cluster::poll_until(
        "the watch to list the object",
        Duration::from_secs(30),
        || {
            let live = one.watches.live();
            let name = name.clone();
            async move {
                match live.lookup(&config_maps(), Some("default"), &name) {
                    Lookup::Found(_) => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }
        },
    )
    .await;
    assert!(one.watches.usage().objects >= 1);
    admin_a
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": {"a": "2"}})),
        )
        .await
        .unwrap();
    triggered(&mut triggers, "remote-bd-one", Duration::from_secs(30)).await;
    admin_a
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    // The registry reports the cluster's figures.
    let clusters = registry.clusters();
    let (_, health, bundles) = clusters
        .iter()
        .find(|(k, _, _)| k.name == "target-a")
        .unwrap();
    assert!(health.is_up());
    assert_eq!(*bundles, 2);
    registry.release("remote-bd-one");
    registry.release("remote-bd-two");
    assert!(
        registry.clusters().is_empty(),
        "no bundle holds it: dropped"
    );
}

#[tokio::test]
async fn kubeconfigs_that_reach_the_agents_files_or_run_a_program_are_refused() {
    let _running = remote::running_lock();
    let (registry, _triggers) = registry(Duration::from_secs(10)).await;
    let management = cluster::client().await;
    let cases = [
        (
            "exec",
            kubeconfig_as(
                "target-a",
                json!({"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "sh", "args": ["-c", "id"]}}),
            ),
            "exec credential plugin",
        ),
        (
            "token-file",
            kubeconfig_as(
                "target-a",
                json!({"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}),
            ),
            "tokenFile file",
        ),
        ("garbage", "{{{ not yaml".to_string(), "not valid"),
    ];
    for (case, kubeconfig, expected) in cases {
        let name = cluster::unique_name(&format!("bad-{case}"));
        secret_with(&management, &name, &kubeconfig).await;
        let error = registry.target(&key(&name), "bad").await.err().unwrap();
        assert!(
            matches!(error, ClusterError::Invalid { .. }),
            "{case}: {error}"
        );
        assert_eq!(error.reason(), "KubeConfigInvalid");
        let text = error.to_string();
        assert!(text.contains(expected), "{case}: {text}");
        assert!(text.contains(&name), "{case} names the cluster: {text}");
        delete_secret(&management, &name).await;
    }
    // A missing Secret, a missing key.
    let missing = registry
        .target(&key("no-such-cluster"), "bad")
        .await
        .err()
        .unwrap();
    assert_eq!(missing.reason(), "KubeConfigNotFound");
    let mut other_key = key("target-a");
    other_key.key = Some("kubeconfig".into());
    let error = registry.target(&other_key, "bad").await.err().unwrap();
    assert!(
        error.to_string().contains("has no key \"kubeconfig\""),
        "{error}"
    );
    // An API server on loopback, with the agent's default egress rules.
    let (trigger, _t) = mpsc::unbounded_channel();
    let strict = ClusterRegistry::new(
        management.clone(),
        ClusterSettings {
            egress: EgressPolicy::default(),
            ..settings(Duration::from_secs(10))
        },
        Some(trigger),
    );
    let error = strict.target(&key("target-a"), "bad").await.err().unwrap();
    assert!(
        error.to_string().contains("--allow-loopback-egress"),
        "{error}"
    );
}

/// Starts (or thaws) a target again even when the test fails midway.
struct Restore(&'static str, bool);

impl Drop for Restore {
    fn drop(&mut self) {
        if self.1 {
            remote::freeze(self.0, false);
        } else {
            remote::start(self.0);
        }
    }
}

#[tokio::test]
async fn a_stopped_cluster_is_reported_at_once_and_back_at_once() {
    let _lock = remote::outage_lock();
    let (registry, mut triggers) = registry(Duration::from_secs(10)).await;
    let target = registry
        .target(&key("target-b"), "outage-bd")
        .await
        .unwrap();
    target.watches.watch(&config_maps());
    target.client.apiserver_version().await.unwrap();
    let restore = Restore("target-b", false);
    remote::stop("target-b");
    // The watch loses its server: the cluster goes down and its bundles hear of it.
    let reported = triggered(&mut triggers, "outage-bd", Duration::from_secs(30)).await;
    eprintln!("outage reported after {reported:?}");
    let started = Instant::now();
    let error = registry
        .target(&key("target-b"), "outage-bd")
        .await
        .err()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "no wait on a dead cluster"
    );
    assert_eq!(error.reason(), "ClusterUnreachable");
    assert!(
        error
            .to_string()
            .contains("cluster target-b is unreachable"),
        "{error}"
    );
    assert!(error.is_transient());
    // A request through a client already held fails at once too.
    let started = Instant::now();
    assert!(target.client.apiserver_version().await.is_err());
    assert!(started.elapsed() < Duration::from_millis(500));
    let metrics = pallet::metrics::METRICS.encode();
    assert!(
        metrics.contains("pallet_cluster_up{cluster=\"target-b\"} 0"),
        "{metrics}"
    );
    // Back: its bundles are asked for at once, and requests flow again.
    drop(restore);
    let back = triggered(&mut triggers, "outage-bd", Duration::from_secs(60)).await;
    eprintln!("recovery reported {back:?} after the start returned");
    let target = registry
        .target(&key("target-b"), "outage-bd")
        .await
        .unwrap();
    target.client.apiserver_version().await.unwrap();
    assert!(registry.health(&key("target-b")).is_up());
}

#[tokio::test]
async fn a_hung_cluster_costs_one_deadline_then_nothing() {
    let _lock = remote::outage_lock();
    let (registry, mut triggers) = registry(Duration::from_secs(2)).await;
    let target = registry.target(&key("target-a"), "hung-bd").await.unwrap();
    target.client.apiserver_version().await.unwrap();
    let restore = Restore("target-a", true);
    remote::freeze("target-a", true);
    let namespaces: Api<Namespace> = Api::all(target.client.clone());
    let started = Instant::now();
    let error = namespaces.list(&Default::default()).await.unwrap_err();
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(8),
        "the deadline bounds the wait: {waited:?}"
    );
    assert!(error.to_string().contains("no answer within 2s"), "{error}");
    triggered(&mut triggers, "hung-bd", Duration::from_secs(5)).await;
    let started = Instant::now();
    let down = registry
        .target(&key("target-a"), "hung-bd")
        .await
        .err()
        .unwrap();
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(down.reason(), "ClusterUnreachable");
    drop(restore);
    triggered(&mut triggers, "hung-bd", Duration::from_secs(60)).await;
    registry
        .target(&key("target-a"), "hung-bd")
        .await
        .unwrap()
        .client
        .apiserver_version()
        .await
        .unwrap();
}

#[tokio::test]
async fn new_credentials_are_used_without_a_restart() {
    let _running = remote::running_lock();
    let (registry, mut triggers) = registry(Duration::from_secs(10)).await;
    let management = cluster::client().await;
    let name = cluster::unique_name("rotate");
    let good = std::fs::read_to_string(remote::remote_kubeconfig("target-a")).unwrap();
    secret_with(&management, &name, &good).await;
    let target = registry.target(&key(&name), "rotate-bd").await.unwrap();
    target.client.apiserver_version().await.unwrap();
    // Credentials the cluster refuses: the bundle is asked for, and the cluster refuses.
    secret_with(
        &management,
        &name,
        &kubeconfig_as("target-a", json!({"token": "revoked"})),
    )
    .await;
    triggered(&mut triggers, "rotate-bd", Duration::from_secs(30)).await;
    let refused = registry.target(&key(&name), "rotate-bd").await.unwrap();
    assert!(!std::sync::Arc::ptr_eq(&refused, &target), "a new client");
    let error = Api::<Namespace>::all(refused.client.clone())
        .list(&Default::default())
        .await
        .unwrap_err();
    assert!(error.to_string().contains("Unauthorized"), "{error}");
    let down = registry
        .target(&key(&name), "rotate-bd")
        .await
        .err()
        .unwrap();
    assert_eq!(down.reason(), "ClusterUnauthorized");
    // The refusal took the cluster down: its bundle is asked for, to report it. (Waited for here,
    // so that the request below is the one the new credentials make.)
    triggered(&mut triggers, "rotate-bd", Duration::from_secs(30)).await;
    // The right ones again: used at once.
    secret_with(&management, &name, &good).await;
    triggered(&mut triggers, "rotate-bd", Duration::from_secs(30)).await;
    let again = registry.target(&key(&name), "rotate-bd").await.unwrap();
    again.client.apiserver_version().await.unwrap();
    delete_secret(&management, &name).await;
}
