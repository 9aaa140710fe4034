//! The target control planes started by `tools/clusters.sh start` beside the management one
//! (`tools/controlplane.sh`): their clients, their kubeconfig Secrets in the management cluster,
//! and stopping and starting one (an outage).
//!
//! Tests never start them themselves; they fail with instructions when they are not running.
//! A test that stops a target holds [`outage_lock`] for its whole run, and a test that needs the
//! targets running holds [`running_lock`], so that no test of any binary sees a target stopped
//! by another.

#![allow(dead_code)] // each test binary uses a different part of this module

use std::path::PathBuf;
use std::process::Command;

use kube::Client;

use super::cluster::{client_from, state_dir};

/// The target clusters' names, as `tools/clusters.sh` names them.
pub fn targets() -> Vec<String> {
    std::env::var("PALLET_TARGETS")
        .unwrap_or_else(|_| "target-a target-b".into())
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The admin kubeconfig of target `name`.
pub fn kubeconfig(name: &str) -> PathBuf {
    state_dir()
        .join("clusters")
        .join(name)
        .join("controlplane")
        .join("kubeconfig")
}

/// The kubeconfig its Secret holds (the audited remote identity).
pub fn remote_kubeconfig(name: &str) -> PathBuf {
    state_dir()
        .join("clusters")
        .join(name)
        .join("remote.kubeconfig")
}

fn clusters_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/clusters.sh")
}

fn run(args: &[&str]) -> String {
    let out = Command::new(clusters_script())
        .args(args)
        .output()
        .expect("tools/clusters.sh runs");
    assert!(
        out.status.success(),
        "tools/clusters.sh {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An admin client of target `name`; panics with instructions when it is not running.
pub async fn client(name: &str) -> Client {
    pallet::tls::install_crypto_provider();
    let path = kubeconfig(name);
    if !path.exists() {
        panic!(
            "target cluster {name} is not running (no {}): start the clusters with `tools/clusters.sh start`",
            path.display()
        );
    }
    let client = client_from(&path).await;
    if let Err(e) = client.apiserver_version().await {
        panic!(
            "target cluster {name} does not answer ({e}): start it with `tools/clusters.sh start`"
        );
    }
    client
}

/// Writes the targets' kubeconfig Secrets in the management cluster again (a management
/// cluster wiped since they were written has none).
pub fn write_secrets() {
    run(&["secrets"]);
}

/// Stops target `name` (its API server refuses connections until [`start`]).
pub fn stop(name: &str) {
    run(&["stop", name]);
}

/// Starts target `name` again and writes its Secret.
pub fn start(name: &str) {
    run(&["start", name]);
}

/// The process id of target `name`'s control plane.
pub fn pid(name: &str) -> u32 {
    let file = state_dir()
        .join("clusters")
        .join(name)
        .join("controlplane")
        .join("pid");
    std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .trim()
        .parse()
        .expect("a pid")
}

/// Freezes (SIGSTOP) or thaws (SIGCONT) target `name`'s control plane: a server that accepts
/// connections and answers nothing, as a hung or overloaded one.
pub fn freeze(name: &str, frozen: bool) {
    let signal = if frozen { "-STOP" } else { "-CONT" };
    let status = Command::new("kill")
        .args([signal, &pid(name).to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {signal} on {name}'s control plane");
}

/// Held while a test stops or freezes a target: a file lock shared by every test process.
pub struct OutageLock {
    _file: std::fs::File,
}

/// Waits until no test stops a target, and keeps any from doing so until dropped: held (shared)
/// by a test that needs the targets running throughout.
pub fn running_lock() -> OutageLock {
    let file = lock_file();
    file.lock_shared()
        .unwrap_or_else(|e| panic!("the outage lock (shared): {e}"));
    OutageLock { _file: file }
}

/// Waits for the right to stop targets, and holds it until dropped.
pub fn outage_lock() -> OutageLock {
    let file = lock_file();
    file.lock()
        .unwrap_or_else(|e| panic!("the outage lock: {e}"));
    OutageLock { _file: file }
}

fn lock_file() -> std::fs::File {
    let path = state_dir().join("clusters").join(".outage.lock");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A kubeconfig Secret of a test, in the management cluster's agent namespace: a copy of the one
/// `tools/clusters.sh` wrote for a target, labelled for the BundleDeployments allowed to use it
/// (`access.pallet.dev/<name>: "true"`, the Secret rules of the agent's namespace). Deleted when
/// dropped, also when the test fails.
pub struct TestSecret {
    /// Its name.
    pub name: String,
}

impl TestSecret {
    /// A copy of target `target`'s Secret named `name`, usable by `bundles`.
    pub async fn of(management: &Client, target: &str, name: &str, bundles: &[&str]) -> TestSecret {
        use k8s_openapi::api::core::v1::Secret;
        let secrets: kube::Api<Secret> =
            kube::Api::namespaced(management.clone(), super::cluster::AGENT_NAMESPACE);
        let written = match secrets.get_opt(target).await.unwrap() {
            Some(secret) => secret,
            None => {
                write_secrets();
                secrets.get(target).await.unwrap()
            }
        };
        let mut labels: std::collections::BTreeMap<String, String> = bundles
            .iter()
            .map(|b| (format!("access.pallet.dev/{b}"), "true".to_string()))
            .collect();
        labels.insert("pallet.dev/test".into(), name.into());
        let copy = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "labels": labels},
            "data": written.data,
        });
        secrets
            .patch(
                name,
                &kube::api::PatchParams::apply(super::cluster::TEST_FIELD_MANAGER),
                &kube::api::Patch::Apply(&copy),
            )
            .await
            .unwrap();
        TestSecret { name: name.into() }
    }
}

impl Drop for TestSecret {
    fn drop(&mut self) {
        let _ = Command::new(super::cluster::kubectl_path())
            .arg("--kubeconfig")
            .arg(super::cluster::kubeconfig_path())
            .args([
                "delete",
                "secret",
                "-n",
                super::cluster::AGENT_NAMESPACE,
                &self.name,
                "--ignore-not-found",
                "--wait=false",
            ])
            .output();
    }
}

/// Namespaces a test made on clusters (`management` or a target's name), deleted when dropped.
#[derive(Default)]
pub struct TestNamespaces {
    made: Vec<(String, String)>,
}

impl TestNamespaces {
    /// Deletes `namespace` of `cluster` at the end of the test.
    pub fn track(&mut self, cluster: &str, namespace: &str) {
        self.made.push((cluster.into(), namespace.into()));
    }
}

impl Drop for TestNamespaces {
    fn drop(&mut self) {
        for (cluster, namespace) in &self.made {
            let kubeconfig = if cluster == "management" {
                super::cluster::kubeconfig_path()
            } else {
                kubeconfig(cluster)
            };
            let _ = Command::new(super::cluster::kubectl_path())
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .args([
                    "delete",
                    "namespace",
                    namespace,
                    "--ignore-not-found",
                    "--wait=false",
                ])
                .output();
        }
    }
}
