//! End-to-end: recovery after an API server outage (#15 item 9). The test runs a control plane
//! of its own (the project's `tools/controlplane.sh` on another port and state directory), so
//! stopping it disturbs no other test, and checks that the agent repairs drift within a few
//! seconds of the API server's return, however long the outage made its retries back off.
//!
//! rbac-pass: skip (tools/test.sh: the deploy/ ServiceAccount lives in the shared cluster only)

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agent::Agent;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use pallet::api::BundleDeployment;
use serde_json::json;

/// A control plane of the test's own, stopped (data kept) and wiped on drop.
struct PrivateControlPlane {
    state: tempfile::TempDir,
    port: u16,
}

impl PrivateControlPlane {
    fn script(&self, command: &str) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let status = Command::new(root.join("tools/controlplane.sh"))
            .arg(command)
            .env("PALLET_STATE_DIR", self.state.path())
            .env("PALLET_CONTROLPLANE_PORT", self.port.to_string())
            .status()
            .expect("tools/controlplane.sh runs");
        assert!(status.success(), "tools/controlplane.sh {command} failed");
    }

    fn start() -> PrivateControlPlane {
        // Below the kernel's ephemeral range, like the fixtures' ports (see tools/fixtures).
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let port = (0..1000u32)
            .map(|i| 20_000 + ((seed.wrapping_add(i * 7919)) % 12_000) as u16)
            .find(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
            .expect("a free port");
        let plane = PrivateControlPlane {
            state: tempfile::tempdir().unwrap(),
            port,
        };
        plane.script("start");
        plane
    }

    fn kubeconfig(&self) -> PathBuf {
        self.state.path().join("controlplane/kubeconfig")
    }

    async fn client(&self) -> Client {
        let kubeconfig = Kubeconfig::read_from(self.kubeconfig()).unwrap();
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap();
        Client::try_from(config).unwrap()
    }
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("metric {name} not found"))
}

impl Drop for PrivateControlPlane {
    fn drop(&mut self) {
        self.script("wipe");
    }
}

#[tokio::test]
async fn after_an_api_outage_the_agent_is_back_within_seconds() {
    let plane = PrivateControlPlane::start();
    let client = plane.client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("api-outage");
    let repo = fixtures.git_repo(&test);
    repo.commit_files(
        "main",
        &[(
            "app.yaml",
            b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  value: \"1\"\n",
        )],
        "v1",
    );
    let agent = Agent::start_on(&plane.kubeconfig(), &test, &["--requeue-seconds", "2"]);
    let spec = json!({
        "installNamespace": test,
        "sources": [{"kind": "git", "git": {"repository": repo.url(fixtures.git_plain()), "ref": {"branch": "main"}}}],
        "format": "plain",
    });
    agent::apply_bd(&client, &test, spec).await;
    agent::wait_condition(&client, &agent, &test, "Ready", "True", "1 objects").await;

    // An outage long enough for unbounded backoffs to grow past half a minute; the agent keeps
    // trying during it (it requeues every 2 s, and each attempt fails).
    plane.script("stop");
    let outage = Instant::now();
    cluster::poll_until(
        "the agent to notice the outage",
        Duration::from_secs(60),
        || async {
            let log = std::fs::read_to_string(&agent.log).unwrap_or_default();
            let failures = log.matches("api_unreachable=true").count();
            if failures >= 3 {
                Ok(())
            } else {
                Err(format!("{failures} retries logged"))
            }
        },
    )
    .await;
    while outage.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let successes = metric(
        &agent.metrics().await,
        "pallet_reconciles_total{result=\"success\"}",
    );
    plane.script("start");
    let back = Instant::now();

    // The agent succeeds again within seconds: its retries and its watches are bounded by
    // API_RETRY_MAX (4 s), not grown with the outage (kube's watch backoff reaches 30 s, the
    // per-BundleDeployment backoff a minute and more).
    cluster::poll_until(
        "a successful reconcile after the API server's return",
        Duration::from_secs(10),
        || async {
            let now = metric(
                &agent.metrics().await,
                "pallet_reconciles_total{result=\"success\"}",
            );
            if now > successes {
                Ok(())
            } else {
                Err(format!("{now} successful reconciles, as before the return"))
            }
        },
    )
    .await;
    eprintln!(
        "working again {:?} after the API server returned",
        back.elapsed()
    );

    // And it repairs drift made after the return.
    let client = plane.client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);
    cms.delete("app", &Default::default()).await.unwrap();
    cluster::poll_until(
        "the deleted ConfigMap to be back",
        Duration::from_secs(20),
        || async {
            match cms.get_opt("app").await {
                Ok(Some(_)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let _ = bds.delete(&test, &Default::default()).await;
    agent::wait_bd_gone(&client, &test).await;
}
