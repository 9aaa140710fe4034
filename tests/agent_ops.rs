//! End-to-end: running pallet as several replicas. Leader election on a Lease (only the leader
//! writes; a killed leader is replaced within the lease duration; a terminated one hands the
//! Lease over at once) and the metrics and health endpoints, with the `pallet agent` binary
//! against the local control plane and the git fixture.

// Test clients of the local fixture servers and the agent's own endpoints: whole answers are
// read there, not in the agent (see clippy.toml).
#![allow(clippy::disallowed_methods)]

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use pallet::api::conditions::find;
use pallet::api::BundleDeployment;
use serde_json::json;

/// An agent replica of a test: leader election on the test's own Lease, metrics on a free
/// port, JSON logs (so the test can read the bound address and leader transitions).
struct Replica {
    child: Child,
    identity: String,
    log: PathBuf,
    changes: PathBuf,
    _cache: tempfile::TempDir,
}

impl Replica {
    /// Starts replica `suffix` of test `test`, watching BundleDeployments labelled for `test`,
    /// electing on Lease `test` in namespace `test`.
    fn start(test: &str, suffix: &str, lease_seconds: u64) -> Replica {
        let cache = tempfile::tempdir().unwrap();
        let logs = cluster::state_dir().join("test-agents");
        std::fs::create_dir_all(&logs).unwrap();
        let identity = format!("{test}-{suffix}");
        let log = logs.join(format!("{identity}.log"));
        let changes = logs.join(format!("{identity}.changes.jsonl"));
        let child = Command::new(env!("CARGO_BIN_EXE_pallet"))
            .arg("agent")
            .args(["--namespace", test, "--requeue-seconds", "2"])
            .args(["--leader-elect", "--lease-name", test])
            .arg(format!("--lease-duration={lease_seconds}s"))
            .args(["--metrics-addr", "127.0.0.1:0", "--log-format", "json"])
            // The fixture servers are on 127.0.0.1.
            .arg("--allow-loopback-egress")
            .arg("--kubeconfig")
            .arg(agent::agent_kubeconfig())
            .arg("--cache-dir")
            .arg(cache.path().join("cache"))
            .arg("--change-log")
            .arg(&changes)
            .arg("--selector")
            .arg(format!("{}={test}", agent::TEST_LABEL))
            // The Lease holder is the pod name in a cluster; here it names the replica.
            .env("POD_NAME", &identity)
            .env("RUST_LOG", "info,pallet=debug")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("pallet agent starts");
        Replica {
            child,
            identity,
            log,
            changes,
            _cache: cache,
        }
    }

    /// The log's JSON lines whose message is `message`.
    fn log_events(&self, message: &str) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["fields"]["message"] == message)
            .collect()
    }

    /// Waits for the metrics server's address in the log.
    async fn metrics_url(&self) -> String {
        let address = cluster::poll_until(
            &format!("{}'s metrics address in its log", self.identity),
            Duration::from_secs(30),
            || async {
                self.log_events("metrics server listening")
                    .first()
                    .and_then(|e| e["fields"]["address"].as_str().map(String::from))
                    .ok_or_else(|| self.log_tail())
            },
        )
        .await;
        format!("http://{address}")
    }

    /// Names of the objects this replica wrote, from its change log.
    fn written(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.changes).unwrap_or_default();
        text.lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["object"]["name"].as_str().unwrap().to_string()
            })
            .collect()
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name} failed");
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn create_namespace(client: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

/// Server-side applies BundleDeployment `name` of a plain bundle from `git_url`, labelled for
/// the replicas of `test`, installing into namespace `test`.
async fn apply_bd(client: &Client, test: &str, name: &str, git_url: &str, path: &str) {
    cluster::track_bundle_deployment(name);
    let bd = json!({
        "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
        "metadata": {"name": name, "labels": {agent::TEST_LABEL: test}},
        "spec": {
            "installNamespace": test,
            "sources": [{"kind": "git", "git": {"repository": git_url, "ref": {"branch": "main"}, "directory": path}}],
            "format": "plain",
        },
    });
    Api::<BundleDeployment>::all(client.clone())
        .patch(
            name,
            &PatchParams::apply(cluster::TEST_FIELD_MANAGER),
            &Patch::Apply(&bd),
        )
        .await
        .unwrap();
}

async fn wait_ready(client: &Client, name: &str) {
    let api: Api<BundleDeployment> = Api::all(client.clone());
    cluster::poll_until(
        &format!("{name} to be Ready"),
        Duration::from_secs(60),
        || {
            let (api, name) = (api.clone(), name.to_string());
            async move {
                let bd = api.get(&name).await.map_err(|e| e.to_string())?;
                let conditions = bd.status.map(|s| s.conditions).unwrap_or_default();
                match find(&conditions, "Ready") {
                    Some(c) if c.status == "True" => Ok(()),
                    _ => Err(format!("{conditions:?}")),
                }
            }
        },
    )
    .await;
}

/// The Lease's holder (None when missing or released).
async fn holder(leases: &Api<Lease>, name: &str) -> Result<Option<String>, String> {
    let lease = leases.get_opt(name).await.map_err(|e| e.to_string())?;
    Ok(lease
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty()))
}

/// Waits until the Lease is held by one of `candidates`; returns that one's index.
async fn wait_holder(
    leases: &Api<Lease>,
    name: &str,
    candidates: &[&str],
    timeout: Duration,
) -> usize {
    cluster::poll_until(
        &format!("lease {name} to be held by one of {candidates:?}"),
        timeout,
        || async {
            let h = holder(leases, name).await?;
            candidates
                .iter()
                .position(|c| Some(*c) == h.as_deref())
                .ok_or(format!("holder {h:?}"))
        },
    )
    .await
}

async fn get(url: &str) -> (u16, String) {
    let response = reqwest::get(url).await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// The value of the sample line `series` (name with labels, exactly as exposed).
fn sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {series} in:\n{metrics}"))
        .parse()
        .unwrap()
}

fn config_map(name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"1\"\n")
}

#[tokio::test]
async fn only_the_leader_writes_and_a_killed_leader_is_replaced_within_the_lease_duration() {
    const LEASE: u64 = 4;
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("ops");
    create_namespace(&client, &test).await;
    let repo = fixtures.git_repo(&test);
    repo.commit_files(
        "main",
        &[
            ("one/app.yaml", config_map("first").as_bytes()),
            ("two/app.yaml", config_map("second").as_bytes()),
        ],
        "two bundles",
    );
    let url = repo.url(fixtures.git_plain());
    let leases: Api<Lease> = Api::namespaced(client.clone(), &test);

    // Both replicas start at once; exactly one holds the Lease, the other follows.
    let replicas = [
        Replica::start(&test, "a", LEASE),
        Replica::start(&test, "b", LEASE),
    ];
    let ids = [replicas[0].identity.as_str(), replicas[1].identity.as_str()];
    let leader = wait_holder(&leases, &test, &ids, Duration::from_secs(30)).await;
    let follower = 1 - leader;
    cluster::poll_until(
        "the other replica to follow",
        Duration::from_secs(30),
        || async {
            let following = replicas[follower].log_events("following the leader");
            match following.first() {
                Some(e) if e["fields"]["leader"] == ids[leader] => Ok(()),
                _ => Err(replicas[follower].log_tail()),
            }
        },
    )
    .await;
    assert_eq!(replicas[leader].log_events("became the leader").len(), 1);
    assert!(replicas[follower]
        .log_events("became the leader")
        .is_empty());
    // The leader gauge and readiness say the same; a healthy standby is ready.
    for (i, replica) in replicas.iter().enumerate() {
        let base = replica.metrics_url().await;
        let (status, metrics) = get(&format!("{base}/metrics")).await;
        assert_eq!(status, 200);
        let leading = if i == leader { 1.0 } else { 0.0 };
        assert_eq!(sample(&metrics, "pallet_leader"), leading, "replica {i}");
        let ready = cluster::poll_until("readiness", Duration::from_secs(30), || async {
            match get(&format!("{base}/readyz")).await {
                (200, body) => Ok(body),
                (status, body) => Err(format!("{status} {body}")),
            }
        })
        .await;
        assert_eq!(ready, "ready\n");
    }

    // A BundleDeployment for both: installed, and only the leader wrote.
    let first = format!("{test}-1");
    apply_bd(&client, &test, &first, &url, "one").await;
    wait_ready(&client, &first).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);
    assert!(cms.get_opt("first").await.unwrap().is_some());
    assert!(
        replicas[leader].written().contains(&"first".to_string()),
        "the leader's change log: {:?}",
        replicas[leader].written()
    );
    assert_eq!(replicas[follower].written(), Vec::<String>::new());

    // Kill the leader so that it cannot release: the follower takes over when the Lease expires.
    let [mut a, mut b] = replicas;
    let (dead, survivor) = if leader == 0 {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    let killed = Instant::now();
    dead.child.kill().unwrap();
    dead.child.wait().unwrap();
    // The bound (see src/leader.rs): the record was renewed up to a third of the duration
    // before the kill, the follower first saw it up to a third later, and then waits the
    // duration; so at most duration + 1/3, plus slack for requests.
    let bound = Duration::from_secs(LEASE) * 4 / 3 + Duration::from_secs(2);
    wait_holder(&leases, &test, &[survivor.identity.as_str()], bound).await;
    let takeover = killed.elapsed();
    println!(
        "takeover after SIGKILL: {:.2}s (lease duration {LEASE}s)",
        takeover.as_secs_f64()
    );
    assert_eq!(survivor.log_events("became the leader").len(), 1);

    // The new leader installs a second BundleDeployment.
    let second = format!("{test}-2");
    apply_bd(&client, &test, &second, &url, "two").await;
    wait_ready(&client, &second).await;
    assert!(cms.get_opt("second").await.unwrap().is_some());
    assert!(survivor.written().contains(&"second".to_string()));
    assert!(!dead.written().contains(&"second".to_string()));

    // Clean up while the leader runs (the finalizer needs it).
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    for name in [&first, &second] {
        bds.delete(name, &Default::default()).await.unwrap();
        agent::wait_bd_gone(&client, name).await;
    }
}

#[tokio::test]
async fn a_terminated_leader_releases_the_lease_for_an_immediate_takeover() {
    // Long enough that a takeover by expiry could not pass the assertion below.
    const LEASE: u64 = 12;
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let test = support::unique_name("opsterm");
    create_namespace(&client, &test).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &test);

    let mut first = Replica::start(&test, "a", LEASE);
    wait_holder(
        &leases,
        &test,
        &[first.identity.as_str()],
        Duration::from_secs(30),
    )
    .await;
    let second = Replica::start(&test, "b", LEASE);
    cluster::poll_until(
        "the second replica to follow",
        Duration::from_secs(30),
        || async {
            if second.log_events("following the leader").is_empty() {
                Err(second.log_tail())
            } else {
                Ok(())
            }
        },
    )
    .await;

    let terminated = Instant::now();
    first.signal("TERM");
    // Released, the Lease is free at the follower's next attempt (a third of the duration).
    // Had it not been released, the follower would wait for it to expire: at least two thirds
    // of the duration after the signal, since the last renewal was at most a third before it.
    let bound = Duration::from_secs(LEASE) * 2 / 3;
    wait_holder(&leases, &test, &[second.identity.as_str()], bound).await;
    println!(
        "takeover after SIGTERM: {:.2}s (lease duration {LEASE}s)",
        terminated.elapsed().as_secs_f64()
    );
    let status = first.child.wait().unwrap();
    assert!(status.success(), "a terminated agent exits 0: {status:?}");
    assert_eq!(first.log_events("released the leader lease").len(), 1);
}

#[tokio::test]
async fn metrics_count_a_reconcile_and_health_endpoints_answer() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("opsmet");
    create_namespace(&client, &test).await;
    let repo = fixtures.git_repo(&test);
    repo.commit_files(
        "main",
        &[("app/app.yaml", config_map("m").as_bytes())],
        "v1",
    );

    let replica = Replica::start(&test, "a", 15);
    let base = replica.metrics_url().await;
    assert_eq!(
        get(&format!("{base}/healthz")).await,
        (200, "ok\n".to_string())
    );
    assert_eq!(get(&format!("{base}/nothing")).await.0, 404);
    apply_bd(
        &client,
        &test,
        &test,
        &repo.url(fixtures.git_plain()),
        "app",
    )
    .await;
    wait_ready(&client, &test).await;

    let (status, metrics) = get(&format!("{base}/metrics")).await;
    assert_eq!(status, 200);
    assert!(sample(&metrics, "pallet_reconciles_total{result=\"success\"}") >= 1.0);
    assert!(
        sample(
            &metrics,
            "pallet_reconcile_duration_seconds_count{result=\"success\"}"
        ) >= 1.0
    );
    assert!(
        sample(
            &metrics,
            "pallet_fetches_total{kind=\"git\",result=\"success\"}"
        ) >= 1.0
    );
    assert_eq!(sample(&metrics, "pallet_leader"), 1.0);
    assert!(metrics.ends_with("# EOF\n"));
    assert_eq!(
        get(&format!("{base}/readyz")).await,
        (200, "ready\n".to_string())
    );

    Api::<BundleDeployment>::all(client.clone())
        .delete(&test, &Default::default())
        .await
        .unwrap();
    agent::wait_bd_gone(&client, &test).await;
}

#[tokio::test]
async fn a_leader_that_loses_the_lease_exits_at_once() {
    const LEASE: u64 = 3;
    let client = cluster::client().await;
    let test = support::unique_name("opslost");
    create_namespace(&client, &test).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &test);
    let mut replica = Replica::start(&test, "a", LEASE);
    wait_holder(
        &leases,
        &test,
        &[replica.identity.as_str()],
        Duration::from_secs(30),
    )
    .await;

    // Another holder takes the Lease (as if this replica had stalled past the duration).
    let mut lease = leases.get(&test).await.unwrap();
    let spec = lease.spec.as_mut().unwrap();
    spec.holder_identity = Some("intruder".into());
    spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    leases
        .replace(&test, &PostParams::default(), &lease)
        .await
        .unwrap();

    // Its next renewal (a third of the duration later) finds the intruder: it exits 1.
    let deadline = Instant::now() + Duration::from_secs(LEASE);
    let status = loop {
        if let Some(status) = replica.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still running {LEASE}s after losing the lease:\n{}",
            replica.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status.code(), Some(1), "{}", replica.log_tail());
    assert_eq!(
        replica.log_events("lost the leader lease; exiting").len(),
        1
    );
    // It did not take the Lease back.
    assert_eq!(
        holder(&leases, &test).await.unwrap().as_deref(),
        Some("intruder")
    );
}
