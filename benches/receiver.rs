//! Receiver and dependency latencies (figures, not a test). Against the local control plane and
//! the fixture git server, with the real `pallet agent` binary (receiver on, `--requeue-interval
//! 1h`):
//!
//! 1. push to Ready: a commit to a branch, then a signed GitHub push notification, until the
//!    BundleDeployment (`pollInterval: 1h`) is Ready with the new revision; `ROUNDS` times;
//!    against the same with no notification and `pollInterval: 10s`;
//! 2. 1,000 notifications of one commit (32 at a time): how long they take to answer, and the
//!    git server's requests for the repository against those of one poll;
//! 3. dependency to dependent: two bundles created at once, the app depending on the other;
//!    the time from the dependency's Ready to the app's Ready, `ROUNDS` times.
//!
//! Needs `tools/controlplane.sh start` and `tools/fixtures.sh start`, then
//! `cargo bench --bench receiver`. Everything it creates carries a unique `pallet.dev/test` label
//! and is deleted at the end.

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "../tests/support/cluster.rs"]
mod cluster;

#[path = "common/mod.rs"]
mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{is_ready, median, wait_gone, AgentProc};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use pallet::api::BundleDeployment;
use pallet::receiver::providers::sign;
use serde_json::json;
use support::Fixtures;

const TEST_LABEL: &str = "pallet.dev/test";
const ROUNDS: usize = 10;
const TOKEN: &str = "bench-receiver-token";
const DEADLINE: Duration = Duration::from_secs(120);

fn config_map(value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  value: \"{value}\"\n"
    )
}

async fn apply_bd(bds: &Api<BundleDeployment>, run: &str, name: &str, spec: serde_json::Value) {
    let bd = json!({
        "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
        "metadata": {"name": name, "labels": {TEST_LABEL: run}},
        "spec": spec,
    });
    bds.patch(
        name,
        &PatchParams::apply("pallet-bench").force(),
        &Patch::Apply(&bd),
    )
    .await
    .unwrap();
}

/// Waits until `name` is Ready at its generation with revision `revision` active.
async fn wait_revision(bds: &Api<BundleDeployment>, name: &str, revision: i64) -> Instant {
    let start = Instant::now();
    loop {
        let bd = bds.get(name).await.unwrap();
        if is_ready(&bd) && bd.status.as_ref().and_then(|s| s.active_revision) == Some(revision) {
            return Instant::now();
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{name} not Ready at revision {revision}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_ready(bds: &Api<BundleDeployment>, name: &str) -> Instant {
    let start = Instant::now();
    loop {
        if is_ready(&bds.get(name).await.unwrap()) {
            return Instant::now();
        }
        assert!(start.elapsed() < DEADLINE, "{name} not Ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn git_spec(
    url: &str,
    namespace: &str,
    poll: &str,
    depends_on: serde_json::Value,
) -> serde_json::Value {
    let mut spec = json!({
        "installNamespace": namespace,
        "sources": [{"kind": "git", "git": {"repository": url, "ref": {"branch": "main"}}, "pollInterval": poll}],
        "format": "plain",
    });
    if depends_on.as_array().is_some_and(|d| !d.is_empty()) {
        spec["dependsOn"] = depends_on;
    }
    spec
}

fn summary(label: &str, values: &[f64]) {
    let max = values.iter().cloned().fold(0.0, f64::max);
    let min = values.iter().cloned().fold(f64::INFINITY, f64::min);
    println!(
        "{label:<58} median {:>7.3} s   min {min:>7.3} s   max {max:>7.3} s   (n={})",
        median(values.to_vec()),
        values.len()
    );
}

fn github_push(url: &str, after: &str) -> Vec<u8> {
    serde_json::to_vec(
        &json!({"ref": "refs/heads/main", "after": after, "repository": {"clone_url": url}}),
    )
    .unwrap()
}

#[tokio::main]
async fn main() {
    pallet::tls::install_crypto_provider();
    let fx = Fixtures::load();
    let git = fx.git_plain();
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let run = support::unique_name("rcvbench");
    let selector = format!("{TEST_LABEL}={run}");
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "pallet-system");
    let secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": run}, "stringData": {"token": TOKEN}}))
            .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("agent.log");
    let changes = work.path().join("changes.jsonl");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let child = Command::new(env!("CARGO_BIN_EXE_pallet"))
        .args([
            "agent",
            "--namespace",
            "pallet-system",
            "--requeue-interval",
            "1h",
        ])
        .arg("--kubeconfig")
        .arg(cluster::kubeconfig_path())
        .arg("--cache-dir")
        .arg(work.path().join("cache"))
        .arg("--change-log")
        .arg(&changes)
        .args([
            "--selector",
            &selector,
            "--allow-loopback-egress",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .args([
            "--receiver-addr",
            &format!("127.0.0.1:{port}"),
            "--receiver-secret",
            &run,
        ])
        .args(["--receiver-requests-per-second", "2000"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("starting the pallet agent");
    let _agent = AgentProc {
        child,
        log,
        changes,
    };
    let hook = format!("http://127.0.0.1:{port}/hook/github");
    let http = reqwest::Client::new();
    // The receiver answers once the agent leads and runs (a 404 for another path).
    let started = Instant::now();
    while http
        .get(format!("http://127.0.0.1:{port}/"))
        .send()
        .await
        .is_err()
    {
        assert!(started.elapsed() < DEADLINE, "the receiver never answered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    println!("receiver benchmark  run={run}");
    println!("{}", common::machine());
    let build = if cfg!(debug_assertions) {
        "debug build (cargo test --bench)"
    } else {
        "release build"
    };
    println!("agent: {build}, --requeue-interval 1h; source: fixture git server (smart HTTP)\n");

    // ---- 1. push to Ready ----
    let push_bd = format!("{run}-push");
    let repo = fx.git_repo(&push_bd);
    repo.commit_files("main", &[("app.yaml", config_map("0").as_bytes())], "v0");
    let url = repo.url(git);
    apply_bd(
        &bds,
        &run,
        &push_bd,
        git_spec(&url, &push_bd, "1h", json!([])),
    )
    .await;
    wait_revision(&bds, &push_bd, 1).await;
    let mut notified = Vec::new();
    for round in 1..=ROUNDS {
        let commit = repo.commit_files(
            "main",
            &[("app.yaml", config_map(&round.to_string()).as_bytes())],
            "next",
        );
        let body = github_push(&url, &commit);
        let signature = format!("sha256={}", sign(&body, TOKEN.as_bytes()));
        let pushed = Instant::now();
        let status = http
            .post(&hook)
            .header("x-github-event", "push")
            .header("x-hub-signature-256", signature)
            .body(body)
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status.as_u16(), 202);
        let ready = wait_revision(&bds, &push_bd, round as i64 + 1).await;
        notified.push(ready.duration_since(pushed).as_secs_f64());
    }
    let poll_bd = format!("{run}-poll");
    let poll_repo = fx.git_repo(&poll_bd);
    poll_repo.commit_files("main", &[("app.yaml", config_map("0").as_bytes())], "v0");
    apply_bd(
        &bds,
        &run,
        &poll_bd,
        git_spec(&poll_repo.url(git), &poll_bd, "10s", json!([])),
    )
    .await;
    wait_revision(&bds, &poll_bd, 1).await;
    let mut polled = Vec::new();
    for round in 1..=ROUNDS.min(5) {
        poll_repo.commit_files(
            "main",
            &[("app.yaml", config_map(&round.to_string()).as_bytes())],
            "next",
        );
        let pushed = Instant::now();
        let ready = wait_revision(&bds, &poll_bd, round as i64 + 1).await;
        polled.push(ready.duration_since(pushed).as_secs_f64());
    }
    println!("1. commit pushed -> BundleDeployment Ready at the new revision");
    summary(
        "   signed GitHub push notification, pollInterval 1h",
        &notified,
    );
    summary("   no notification, pollInterval 10s", &polled);

    // ---- 2. a flood of one commit ----
    let commit = repo.commit_files(
        "main",
        &[("app.yaml", config_map("flood").as_bytes())],
        "flood",
    );
    let body = github_push(&url, &commit);
    let signature = format!("sha256={}", sign(&body, TOKEN.as_bytes()));
    let before = fx.git_requests(git, &push_bd).await;
    let sent = Instant::now();
    let statuses: Vec<u16> = futures::stream::iter(0..1000)
        .map(|_| {
            let request = http
                .post(&hook)
                .header("x-github-event", "push")
                .header("x-hub-signature-256", &signature)
                .body(body.clone());
            async move {
                request
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
                    .unwrap_or(0)
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let answered = sent.elapsed();
    wait_revision(&bds, &push_bd, ROUNDS as i64 + 2).await;
    let flood_requests = fx.git_requests(git, &push_bd).await - before;
    let accepted = statuses.iter().filter(|s| **s == 202).count();
    println!("\n2. 1,000 signed notifications of one commit, 32 at a time");
    println!(
        "   answered in {:.3} s ({accepted} answered 202)",
        answered.as_secs_f64()
    );
    println!("   git requests for the repository afterwards: {flood_requests} (one poll)");

    // ---- 3. dependency -> dependent ----
    let mut after_dependency = Vec::new();
    let dep_repo = fx.git_repo(&format!("{run}-dep"));
    dep_repo.commit_files("main", &[("app.yaml", config_map("dep").as_bytes())], "dep");
    let dep_url = dep_repo.url(git);
    for round in 0..ROUNDS {
        // Other programs on the shared control plane may apply an older CRD in between.
        cluster::install_crd(&client).await;
        let (dep, app) = (format!("{run}-d{round}"), format!("{run}-a{round}"));
        apply_bd(
            &bds,
            &run,
            &app,
            git_spec(&dep_url, &app, "1h", json!([{"name": dep}])),
        )
        .await;
        apply_bd(&bds, &run, &dep, git_spec(&dep_url, &dep, "1h", json!([]))).await;
        let dep_ready = wait_ready(&bds, &dep).await;
        let app_ready = wait_ready(&bds, &app).await;
        after_dependency.push(app_ready.saturating_duration_since(dep_ready).as_secs_f64());
    }
    println!("\n3. two bundles created at once, the app depending on the other");
    summary("   dependency Ready -> app Ready", &after_dependency);

    // ---- cleanup ----
    let _ = bds
        .delete_collection(
            &Default::default(),
            &kube::api::ListParams::default().labels(&selector),
        )
        .await;
    wait_gone(&bds, &selector, DEADLINE).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut names = vec![push_bd, poll_bd];
    for round in 0..ROUNDS {
        names.push(format!("{run}-d{round}"));
        names.push(format!("{run}-a{round}"));
    }
    for name in names {
        let _ = namespaces.delete(&name, &Default::default()).await;
    }
    let _ = secrets.delete(&run, &Default::default()).await;
}
