//! Access to the local control plane started by `tools/controlplane.sh start`.
//!
//! Tests never start the control plane themselves (it is shared by every test binary and takes
//! seconds to start); they find it through its kubeconfig and fail with instructions when it is
//! not there.

#![allow(dead_code)] // each test binary uses a different part of this module

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::future::Future;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Field manager the tests use for their own server-side applies.
pub const TEST_FIELD_MANAGER: &str = "pallet-tests";

/// The project's state directory: `$PALLET_STATE_DIR`, else `<repo>/.pallet`.
pub fn state_dir() -> PathBuf {
    match std::env::var_os("PALLET_STATE_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".pallet"),
    }
}

/// The admin kubeconfig written by the local control plane.
pub fn kubeconfig_path() -> PathBuf {
    state_dir().join("controlplane").join("kubeconfig")
}

/// A client for the local control plane, as its admin. Panics with instructions when the
/// control plane is not running.
pub async fn client() -> Client {
    pallet::tls::install_crypto_provider();
    let path = kubeconfig_path();
    let not_running = |why: String| -> ! {
        panic!(
            "the local control plane is not reachable ({why}): start it with `tools/controlplane.sh start` \
             (or run the whole suite with `tools/test.sh`)"
        )
    };
    let kubeconfig = Kubeconfig::read_from(&path)
        .unwrap_or_else(|e| not_running(format!("no kubeconfig at {}: {e}", path.display())));
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| not_running(format!("bad kubeconfig {}: {e}", path.display())));
    let client = Client::try_from(config).unwrap_or_else(|e| not_running(e.to_string()));
    if let Err(e) = client.apiserver_version().await {
        not_running(format!("API server did not answer: {e}"));
    }
    client
}

/// A client authenticating with the kubeconfig at `path` (an admin's, a user's of
/// `tools/controlplane.sh user`, a ServiceAccount token's).
pub async fn client_from(path: &std::path::Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(path).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// Polls `probe` every 100 ms until it returns `Ok(value)` or `timeout` passes; on timeout,
/// panics with `what` and the last error the probe reported.
pub async fn poll_until<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match probe().await {
            Ok(value) => return value,
            Err(last) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The agent's namespace of the tests' agents (where revision snapshots are stored).
pub const AGENT_NAMESPACE: &str = "pallet-system";

/// Creates the agent's namespace when missing: revision snapshots live there.
pub async fn ensure_agent_namespace(client: &Client) {
    let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": AGENT_NAMESPACE}});
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .patch(
            AGENT_NAMESPACE,
            &PatchParams::apply(TEST_FIELD_MANAGER),
            &Patch::Apply(&ns),
        )
        .await
        .expect("the agent's namespace");
}

/// Installs (server-side applies) the BundleDeployment CRD and waits until it is Established.
pub async fn install_crd(client: &Client) {
    install_crd_from(client, include_str!("../../deploy/crd.yaml")).await;
}

/// Installs (server-side applies) the CRD `yaml` and waits until it is Established.
pub async fn install_crd_from(client: &Client, yaml: &str) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_saphyr::from_str(yaml).expect("the CRD parses");
    let name = crd.metadata.name.clone().expect("CRD has a name");
    crds.patch(
        &name,
        &PatchParams::apply(TEST_FIELD_MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap_or_else(|e| panic!("the API server refused CRD {name}: {e}"));
    poll_until(
        &format!("CRD {name} to be Established"),
        Duration::from_secs(30),
        || {
            let crds = crds.clone();
            let name = name.clone();
            async move {
                let crd = crds.get(&name).await.map_err(|e| e.to_string())?;
                let established = crd
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .into_iter()
                    .flatten()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                if established {
                    Ok(())
                } else {
                    Err(format!("status: {:?}", crd.status))
                }
            }
        },
    )
    .await;
}

/// A name no other test (in this or another process) uses: `prefix-<pid>-<counter>-<nanos>`,
/// short enough for a DNS label.
pub fn unique_name(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{n}-{:x}", std::process::id(), nanos & 0xffff)
}

/// The BundleDeployments a test's thread created on the shared cluster, removed when the thread
/// ends, whether the test passed or panicked (a test runs on a thread of its own, joined by the
/// harness; a multi-thread runtime's workers end with the test too).
struct CreatedBundleDeployments(RefCell<BTreeSet<String>>);

impl Drop for CreatedBundleDeployments {
    fn drop(&mut self) {
        let names: Vec<String> = std::mem::take(&mut *self.0.borrow_mut())
            .into_iter()
            .collect();
        remove_bundle_deployments(&names);
    }
}

thread_local! {
    static CREATED: CreatedBundleDeployments =
        const { CreatedBundleDeployments(RefCell::new(BTreeSet::new())) };
}

/// Records that the running test created BundleDeployment `name` on the shared cluster: it is
/// deleted when the test's thread ends, and its finalizers released (the test's agents are gone
/// by then, so none will), unless the test removed it first. The helpers that create
/// BundleDeployments call it; a test creating one another way calls it too. Create them on the
/// test's thread or its runtime's tasks, not on a thread of the test's own, which ends earlier.
pub fn track_bundle_deployment(name: &str) {
    let _ = CREATED.try_with(|created| created.0.borrow_mut().insert(name.to_string()));
}

/// The `kubectl` tools/controlplane.sh builds.
pub fn kubectl_path() -> PathBuf {
    std::env::var_os("PALLET_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/pallet")
        })
        .join("bin/kubectl")
}

/// Deletes BundleDeployments `names` of the shared cluster and releases the finalizers of those
/// still there (no agent will). Best effort and silent, with kubectl: it runs as a thread ends,
/// where neither a runtime nor a panic may be used.
pub fn remove_bundle_deployments(names: &[String]) {
    if names.is_empty() {
        return;
    }
    let kubectl = |args: &[&str]| {
        Command::new(kubectl_path())
            .arg("--kubeconfig")
            .arg(kubeconfig_path())
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let mut delete = vec![
        "delete",
        "bundledeployments.pallet.dev",
        "--ignore-not-found",
        "--wait=false",
    ];
    delete.extend(names.iter().map(String::as_str));
    let Some(deleted) = kubectl(&delete) else {
        return;
    };
    if deleted.trim().is_empty() {
        return;
    }
    let mut get = vec![
        "get",
        "bundledeployments.pallet.dev",
        "--ignore-not-found",
        "-o",
        "name",
    ];
    get.extend(names.iter().map(String::as_str));
    for left in kubectl(&get).unwrap_or_default().lines() {
        kubectl(&[
            "patch",
            left.trim(),
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ]);
    }
}

/// A namespace where the fake kubelet runs Pods (crash-looping when the image tag ends in
/// `broken`).
pub async fn kubelet_namespace(client: &Client, name: &str) {
    let namespace = serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"pallet.dev/fake-kubelet": "on"}}});
    kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .patch(
            name,
            &kube::api::PatchParams::apply(TEST_FIELD_MANAGER),
            &kube::api::Patch::Apply(&namespace),
        )
        .await
        .unwrap();
}
