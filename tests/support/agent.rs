//! A `pallet agent` process for end-to-end tests, and waits on BundleDeployment conditions.
//!
//! Each test runs its own agent confined (by `--selector`) to the BundleDeployments it labels
//! with [`TEST_LABEL`], so tests run in parallel without agents fighting over each other's
//! objects. Used with `#[path = "support/agent.rs"] mod agent;` next to `mod cluster;`.

#![allow(dead_code)]
// each test binary uses a different part of this module
// Test clients of the local fixture servers and the agent's own endpoints: whole answers are
// read there, not in the agent (see clippy.toml).
#![allow(clippy::disallowed_methods)]

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::Client;
use pallet::api::conditions::find;
use pallet::api::BundleDeployment;

use crate::cluster;

/// Label tests put on their BundleDeployments; an agent started for a test watches only its own.
pub const TEST_LABEL: &str = "pallet.dev/test";

/// A running `pallet agent`, killed when dropped.
pub struct Agent {
    child: Child,
    /// The agent's log file (kept after the test, under the state dir).
    pub log: PathBuf,
    changes: PathBuf,
    cache: Arc<tempfile::TempDir>,
    selector: String,
    log_name: String,
    extra_args: Vec<String>,
    /// How many agents ran before this one with the same change log and cache (restarts).
    restarts: usize,
}

impl Agent {
    /// Starts an agent watching BundleDeployments labelled `TEST_LABEL=selector_value`.
    pub fn start(selector_value: &str) -> Agent {
        Agent::start_with(selector_value, &[])
    }

    /// Like [`Agent::start`], with extra flags.
    pub fn start_with(selector_value: &str, extra_args: &[&str]) -> Agent {
        Agent::start_with_env(selector_value, extra_args, &[])
    }

    /// Like [`Agent::start_with`], with extra environment variables.
    pub fn start_with_env(
        selector_value: &str,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Agent {
        Agent::start_selecting_env(
            &format!("{TEST_LABEL}={selector_value}"),
            selector_value,
            extra_args,
            env,
        )
    }

    /// An agent watching BundleDeployments that match the label `selector`; logs are named
    /// after `log_name`.
    pub fn start_selecting(selector: &str, log_name: &str, extra_args: &[&str]) -> Agent {
        Agent::start_selecting_env(selector, log_name, extra_args, &[])
    }

    /// Like [`Agent::start_with`], against the cluster of `kubeconfig` instead of the shared one.
    pub fn start_on(
        kubeconfig: &std::path::Path,
        selector_value: &str,
        extra_args: &[&str],
    ) -> Agent {
        let kubeconfig = kubeconfig.to_string_lossy().into_owned();
        Agent::start_selecting_env(
            &format!("{TEST_LABEL}={selector_value}"),
            selector_value,
            extra_args,
            &[("PALLET_TEST_AGENT_KUBECONFIG", kubeconfig.as_str())],
        )
    }

    /// Like [`Agent::start_selecting`], with extra environment variables.
    pub fn start_selecting_env(
        selector: &str,
        log_name: &str,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Agent {
        let cache = Arc::new(tempfile::tempdir().unwrap());
        let extra: Vec<String> = extra_args.iter().map(|a| a.to_string()).collect();
        Agent::spawn(selector, log_name, extra, env, cache, 0)
    }

    /// A new agent process in place of this one (which must have exited or been killed), as a
    /// restarted Pod would be: the same selector, flags, change-log file and source cache, with
    /// `env` (e.g. without the fault this one had). Its own log file (`NAME.restart-N.log`).
    pub fn restart_with_env(&self, env: &[(&str, &str)]) -> Agent {
        Agent::spawn(
            &self.selector,
            &self.log_name,
            self.extra_args.clone(),
            env,
            self.cache.clone(),
            self.restarts + 1,
        )
    }

    fn spawn(
        selector: &str,
        log_name: &str,
        extra: Vec<String>,
        env: &[(&str, &str)],
        cache: Arc<tempfile::TempDir>,
        restarts: usize,
    ) -> Agent {
        let extra_args: Vec<&str> = extra.iter().map(String::as_str).collect();
        let extra_args = extra_args.as_slice();
        let selector_value = log_name;
        // Logs outlive the test (under the state dir) so a failure can be read afterwards.
        let logs = cluster::state_dir().join("test-agents");
        std::fs::create_dir_all(&logs).unwrap();
        let log = match restarts {
            0 => logs.join(format!("{selector_value}.log")),
            n => logs.join(format!("{selector_value}.restart-{n}.log")),
        };
        let changes = logs.join(format!("{selector_value}.changes.jsonl"));
        // The agent's namespace (for source Secrets) defaults to pallet-system unless a test names one.
        let namespace: &[&str] = if extra_args.contains(&"--namespace") {
            &[]
        } else {
            &["--namespace", "pallet-system"]
        };
        // A short requeue and default poll by default, so retries and moved refs are quick; a
        // test may set its own.
        let requeue: &[&str] = if extra_args.contains(&"--requeue-seconds") {
            &[]
        } else {
            &["--requeue-seconds", "2"]
        };
        let poll: &[&str] = if extra_args.contains(&"--default-poll-interval") {
            &[]
        } else {
            &["--default-poll-interval", "2s"]
        };
        // Agents of parallel tests must not fight over one metrics port: any free port unless
        // a test picks one.
        let metrics: &[&str] = if extra_args.contains(&"--metrics-addr") {
            &[]
        } else {
            &["--metrics-addr", "127.0.0.1:0"]
        };
        // PALLET_TEST_AGENT_BIN runs another copy of the binary: a long benchmark pins one,
        // because target/<profile>/pallet is replaced by any later build in a shared target dir.
        let bin = env
            .iter()
            .find(|(k, _)| *k == "PALLET_TEST_AGENT_BIN")
            .map_or_else(
                || PathBuf::from(env!("CARGO_BIN_EXE_pallet")),
                |(_, v)| PathBuf::from(v),
            );
        let child = Command::new(bin)
            .arg("agent")
            .args(namespace)
            .args(requeue)
            .args(poll)
            .args(metrics)
            .arg("--kubeconfig")
            .arg(
                env.iter()
                    .find(|(k, _)| *k == "PALLET_TEST_AGENT_KUBECONFIG")
                    .map_or_else(agent_kubeconfig, |(_, v)| PathBuf::from(v)),
            )
            .arg("--cache-dir")
            .arg(cache.path().join("cache"))
            .arg("--change-log")
            .arg(&changes)
            .arg("--selector")
            .arg(selector)
            // Every fixture server is on 127.0.0.1.
            .arg("--allow-loopback-egress")
            .args(extra_args)
            .env("RUST_LOG", "info,pallet=debug")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("pallet agent starts");
        Agent {
            child,
            log,
            changes,
            cache,
            selector: selector.to_string(),
            log_name: log_name.to_string(),
            extra_args: extra,
            restarts,
        }
    }

    /// The directories of the agent's own no condition message may name: its cache (where
    /// bundles are fetched and assembled) and the temporary directory it lives in.
    pub fn internal_directories(&self) -> Vec<String> {
        vec![
            self.cache.path().display().to_string(),
            std::env::temp_dir().display().to_string(),
        ]
    }

    /// Asserts that no condition of `bd` names one of [`Agent::internal_directories`].
    pub fn assert_no_internal_paths(&self, bd: &BundleDeployment) {
        let conditions = bd
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        for condition in &conditions {
            for dir in self.internal_directories() {
                assert!(
                    !condition.message.contains(&dir),
                    "{}: condition {} names the agent's directory {dir}: {}",
                    bd.metadata.name.as_deref().unwrap_or_default(),
                    condition.type_,
                    condition.message
                );
            }
        }
    }

    /// The change-log file (shared with restarted agents).
    pub fn change_log_path(&self) -> &std::path::Path {
        &self.changes
    }

    /// Waits (up to `timeout`) for the agent process to end on its own; how it ended.
    pub fn wait_end(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let start = std::time::Instant::now();
        while start.elapsed() < timeout {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Kills the agent (SIGKILL, as `kill -9`) and waits for it to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits until the change log holds `entry` (operation, reason, object name, fieldsChanged):
    /// the agent writes a line as its write returns, a moment after the object changed.
    #[allow(dead_code)]
    pub async fn wait_change(&self, entry: (&str, &str, &str, &[&str])) {
        let wanted = (
            entry.0.to_string(),
            entry.1.to_string(),
            entry.2.to_string(),
            entry.3.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        );
        cluster::poll_until(
            "the change-log entry",
            std::time::Duration::from_secs(30),
            || {
                let changes = self.changes();
                let found = changes.contains(&wanted);
                async move {
                    if found {
                        Ok(())
                    } else {
                        Err(format!("{changes:?}"))
                    }
                }
            },
        )
        .await;
    }

    /// The change-log entries so far, as (operation, reason, object name, fieldsChanged).
    pub fn changes(&self) -> Vec<(String, String, String, Vec<String>)> {
        let text = std::fs::read_to_string(&self.changes).unwrap_or_default();
        text.lines()
            .map(|line| {
                serde_json::from_str::<serde_json::Value>(line).expect("change log lines are JSON")
            })
            // Markers (an interrupted pass after a restart) are not writes.
            .filter(|entry| entry.get("marker").is_none())
            .map(|entry| {
                assert_eq!(entry["schema"], "pallet.dev/change/v1");
                let fields = entry["fieldsChanged"]
                    .as_array()
                    .map(|a| a.iter().map(|f| f.as_str().unwrap().to_string()).collect())
                    .unwrap_or_default();
                (
                    entry["operation"].as_str().unwrap().to_string(),
                    entry["reason"].as_str().unwrap().to_string(),
                    entry["object"]["name"].as_str().unwrap().to_string(),
                    fields,
                )
            })
            .collect()
    }

    /// Waits (up to `timeout`) for the agent process to exit on its own; its exit code.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let start = std::time::Instant::now();
        while start.elapsed() < timeout {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// The change-log entries so far, as JSON.
    pub fn change_entries(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(&self.changes).unwrap_or_default();
        text.lines()
            .map(|line| serde_json::from_str(line).expect("change log lines are JSON"))
            .collect()
    }

    /// The agent process's id (for /proc figures such as its RSS).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The address the agent's metrics server listens on, once it has logged it.
    pub fn metrics_address(&self) -> Option<String> {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.lines()
            .find(|l| l.contains("metrics server listening"))
            .and_then(|l| l.split("address=").nth(1))
            .and_then(|rest| rest.split_whitespace().next())
            .map(|a| a.trim_matches('"').to_string())
    }

    /// The agent's `/metrics` text. Test agents listen on a free port, logged at start.
    pub async fn metrics(&self) -> String {
        let address = cluster::poll_until(
            "the agent's metrics address in its log",
            Duration::from_secs(30),
            || async {
                self.metrics_address()
                    .ok_or_else(|| "not logged yet".to_string())
            },
        )
        .await;
        reqwest::get(format!("http://{address}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The last lines of the agent's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

/// The kubeconfig agents run with: `PALLET_E2E_AGENT_KUBECONFIG` when set (the token of
/// deploy/'s ServiceAccount, written by tools/rbac-kubeconfig.sh, to prove its RBAC sufficient),
/// else the admin kubeconfig. Test code itself always uses the admin one.
pub fn agent_kubeconfig() -> PathBuf {
    match std::env::var_os("PALLET_E2E_AGENT_KUBECONFIG") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => cluster::kubeconfig_path(),
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until the BundleDeployment's condition `type_` has `status` and its message contains
/// `message_part`; returns the object.
pub async fn wait_condition(
    client: &Client,
    agent: &Agent,
    name: &str,
    type_: &str,
    status: &str,
    message_part: &str,
) -> BundleDeployment {
    let api: Api<BundleDeployment> = Api::all(client.clone());
    let what = format!("{name}: {type_}={status} with {message_part:?}");
    let deadline = Duration::from_secs(60);
    let start = std::time::Instant::now();
    loop {
        let bd = api.get(name).await.unwrap();
        let conditions = bd
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        if let Some(c) = find(&conditions, type_) {
            if c.status == status && c.message.contains(message_part) {
                return bd;
            }
        }
        if start.elapsed() > deadline {
            panic!(
                "timed out waiting for {what}; last conditions: {:#?}\nagent log:\n{}",
                conditions,
                agent.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until ConfigMap `name` holds `value` under `data.value`.
pub async fn wait_value(cms: &Api<ConfigMap>, name: &str, value: &str) {
    cluster::poll_until(
        &format!("ConfigMap {name} to hold {value}"),
        Duration::from_secs(60),
        || {
            let cms = cms.clone();
            let (name, value) = (name.to_string(), value.to_string());
            async move {
                let cm = cms.get_opt(&name).await.map_err(|e| e.to_string())?;
                let live = cm
                    .and_then(|c| c.data)
                    .and_then(|d| d.get("value").cloned());
                if live.as_deref() == Some(value.as_str()) {
                    Ok(())
                } else {
                    Err(format!("value {live:?}"))
                }
            }
        },
    )
    .await;
}

/// Waits until the BundleDeployment `name` no longer exists (its finalizer has run).
pub async fn wait_bd_gone(client: &Client, name: &str) {
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    cluster::poll_until(
        &format!("BundleDeployment {name} to be gone"),
        Duration::from_secs(90),
        || {
            let (bds, name) = (bds.clone(), name.to_string());
            async move {
                match bds.get_opt(&name).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(bd) => Err(format!(
                        "still there, finalizers {:?}",
                        bd.metadata.finalizers
                    )),
                }
            }
        },
    )
    .await;
}

/// Server-side applies a BundleDeployment named `name` with `spec`, labelled for the test's
/// agent (`TEST_LABEL=name`).
pub async fn apply_bd(client: &Client, name: &str, spec: serde_json::Value) {
    apply_bd_labelled(client, name, name, spec).await
}

/// Like [`apply_bd`], labelled for the agent of test `label` (several BundleDeployments for one
/// agent). Removed when the test ends, if the test did not remove it (see
/// [`cluster::track_bundle_deployment`]).
pub async fn apply_bd_labelled(client: &Client, name: &str, label: &str, spec: serde_json::Value) {
    cluster::track_bundle_deployment(name);
    let bd = serde_json::json!({
        "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
        "metadata": {"name": name, "labels": {TEST_LABEL: label}},
        "spec": spec,
    });
    Api::<BundleDeployment>::all(client.clone())
        .patch(
            name,
            &kube::api::PatchParams::apply(cluster::TEST_FIELD_MANAGER),
            &kube::api::Patch::Apply(&bd),
        )
        .await
        .unwrap();
}

/// Merge-patches the BundleDeployment `name`.
pub async fn patch_bd(client: &Client, name: &str, patch: serde_json::Value) {
    Api::<BundleDeployment>::all(client.clone())
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .unwrap();
}

/// True when `status` describes generation `generation` and is Ready.
pub fn is_ready(status: &pallet::api::BundleDeploymentStatus, generation: i64) -> bool {
    status.observed_generation == Some(generation)
        && status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Waits until `done` holds for `name`'s status and generation; returns the status.
pub async fn wait_status(
    client: &Client,
    agent: &Agent,
    name: &str,
    what: &str,
    done: impl Fn(&pallet::api::BundleDeploymentStatus, i64) -> bool,
) -> pallet::api::BundleDeploymentStatus {
    let api: Api<BundleDeployment> = Api::all(client.clone());
    cluster::poll_until(what, Duration::from_secs(90), || {
        let api = api.clone();
        let done = &done;
        async move {
            let bd = api.get(name).await.map_err(|e| e.to_string())?;
            let generation = bd.metadata.generation.unwrap_or_default();
            let status = bd.status.unwrap_or_default();
            if done(&status, generation) {
                Ok(status)
            } else {
                Err(format!("{status:?}\nagent log:\n{}", agent.log_tail()))
            }
        }
    })
    .await
}
