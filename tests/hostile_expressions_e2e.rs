//! End-to-end: what a BundleDeployment's author writes for the agent to evaluate or call never
//! takes the agent down nor stalls the other bundles. Each case runs against a leader-elected
//! agent on the local control plane with a healthy BundleDeployment beside it (see
//! `support/hostile.rs` for every property asserted and the figures printed): a CEL bomb in a
//! `readyExpr` and in `healthChecks`, an expression over budget only on its actual input, a
//! `readyExpr` that would print a Secret, function processors whose server never answers, and a
//! function URL to a host the operator did not allow, and an `exec` function that hangs past
//! its timeout after starting a process of its own.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/hostile.rs"]
mod hostile;
mod support;

use hostile::{benign_files, git_case, Case, Expected, Hostile};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

const BOMB: &str = "lists.range(1000000).map(i, lists.range(1000000)).size() > 0";

async fn start(test: &str, args: &[&str]) -> Hostile {
    Hostile::start(test, args).await
}

fn expected(reason: &'static str, parts: &[&str]) -> Expected {
    Expected {
        reason,
        message_parts: parts.iter().map(|p| p.to_string()).collect(),
    }
}

/// Merges `extra` into the top level of `spec`.
fn with(mut spec: Value, extra: Value) -> Value {
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    spec
}

/// Merge-patches BundleDeployment `name`'s spec with `patch` (from the harness's synchronous
/// hook: on a thread with a runtime of its own).
fn patch_spec(name: String, patch: Value) {
    std::thread::spawn(move || {
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            let client = cluster::client().await;
            Api::<pallet::api::BundleDeployment>::all(client)
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": patch })),
                )
                .await
                .unwrap();
        })
    })
    .join()
    .unwrap();
}

/// A case whose BundleDeployment deploys the benign chart with `benign` in its spec, then gets
/// `hostile` merged into its spec.
fn spec_case(
    harness: &Hostile,
    name: &str,
    benign: Value,
    hostile: Value,
    expected: Expected,
) -> Case {
    let mut case = git_case(name, &harness.namespace, benign_files(), expected);
    case.spec = with(case.spec, benign);
    let bd_name = format!("{}-{name}", harness.label);
    case.make_hostile = Box::new(move || patch_spec(bd_name, hostile));
    case
}

async fn create_config_map(harness: &Hostile, name: &str, data: Value) {
    let api: Api<ConfigMap> = Api::namespaced(harness.client.clone(), &harness.namespace);
    let cm: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data,
    }))
    .unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
}

fn depends_on(harness: &Hostile, kind: &str, name: &str, ready_expr: &str) -> Value {
    json!({"dependsOn": [{"apiVersion": "v1", "kind": kind, "name": name,
        "namespace": harness.namespace, "readyExpr": ready_expr}]})
}

#[tokio::test]
async fn cel_bombs_are_refused_naming_their_bound() {
    let mut harness = start("hostile-cel", &[]).await;
    create_config_map(&harness, "target", json!({"big": "x".repeat(100_000)})).await;
    let ready = depends_on(&harness, "ConfigMap", "target", "true");
    let bomb = depends_on(&harness, "ConfigMap", "target", BOMB);
    let case = spec_case(
        &harness,
        "ready-bomb",
        ready.clone(),
        bomb,
        expected(
            "CelBudgetExceeded",
            &[
                "dependsOn[0]",
                "readyExpr is over its CEL budget",
                "CEL list limit of 100000",
            ],
        ),
    );
    harness.run(case).await;

    let checks =
        json!({"healthChecks": [{"apiVersion": "v1", "kind": "ConfigMap", "current": BOMB}]});
    let case = spec_case(
        &harness,
        "check-bomb",
        json!({}),
        checks,
        expected(
            "CelBudgetExceeded",
            &[
                "healthChecks[0] (v1 ConfigMap)",
                "over its budget",
                "CEL list limit of 100000",
            ],
        ),
    );
    harness.run(case).await;

    // Affordable for some inputs, so admitted; over budget on the object it reads.
    let on_input = depends_on(
        &harness,
        "ConfigMap",
        "target",
        "dep.data.big.replace('', dep.data.big).size() > 0",
    );
    let case = spec_case(
        &harness,
        "ready-input",
        ready,
        on_input,
        expected(
            "CelBudgetExceeded",
            &[
                "readyExpr is over its CEL budget",
                "CEL string limit",
                "not evaluated again",
            ],
        ),
    );
    harness.run(case).await;
}

#[tokio::test]
async fn a_ready_expression_never_prints_a_secret() {
    let mut harness = start("hostile-secret", &[]).await;
    let secrets: Api<Secret> = Api::namespaced(harness.client.clone(), &harness.namespace);
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "credentials"},
        "stringData": {"password": "hunter2-correct-horse"},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let case = spec_case(
        &harness,
        "secret",
        depends_on(&harness, "Secret", "credentials", "has(dep.data)"),
        depends_on(&harness, "Secret", "credentials", "dep.data"),
        expected(
            "DependencyNotReady",
            &["readyExpr gave a map, not a bool (dep.data)"],
        ),
    );
    harness.run(case).await;
    let api: Api<pallet::api::BundleDeployment> = Api::all(harness.client.clone());
    let bd = api.get(&format!("{}-secret", harness.label)).await.unwrap();
    let status = serde_json::to_string(&bd.status).unwrap();
    // Neither the value nor its base64 form (what `dep.data` holds).
    for leaked in ["hunter2-correct-horse", "aHVudGVyMi1jb3JyZWN0LWhvcnNl"] {
        assert!(
            !status.contains(leaked),
            "the status shows the Secret: {status}"
        );
    }
}

#[tokio::test]
async fn functions_that_never_answer_hold_no_reconcile_worker() {
    let fixtures = support::Fixtures::load();
    let hang = fixtures.hang().clone();
    // Two workers only: if calls held them, the neighbour would wait behind the hung bundles.
    let mut harness = start(
        "hostile-fn",
        &["--concurrency", "2", "--allow-function-host", &hang.host],
    )
    .await;
    let function = |timeout: &str| json!({"processors": [{"name": "never", "function": {"url": hang.url.clone(), "timeout": timeout}}]});
    // Three bundles whose function never answers, at the longest timeout allowed.
    for i in 0..2 {
        let name = format!("{}-hung-{i}", harness.label);
        let case = git_case(
            &format!("hung-{i}"),
            &harness.namespace,
            benign_files(),
            expected("", &[]),
        );
        agent::apply_bd_labelled(
            &harness.client,
            &name,
            &harness.label,
            with(case.spec, function("5m")),
        )
        .await;
    }
    let case = spec_case(
        &harness,
        "hung",
        json!({}),
        function("5m"),
        expected("CallingFunction", &["calling function processor never"]),
    );
    // Transient: the sources' condition says so, Ready stays with the healthy revision.
    harness.run_watching(case, "Unpacked").await;

    // Asking for longer than the agent allows is refused before anything is fetched.
    let case = spec_case(
        &harness,
        "forever",
        json!({}),
        function("10000h"),
        expected(
            "InvalidProcessor",
            &[
                "processors[0] (never): timeout 10000h is over this agent's maximum of 5m",
                "--function-timeout-max",
            ],
        ),
    );
    harness.run(case).await;

    // A host the operator did not list: the API server, a node, a cluster Service.
    let elsewhere = json!({"processors": [{"name": "elsewhere",
        "function": {"url": "https://kubernetes.default.svc/", "timeout": "10s"}}]});
    let case = spec_case(
        &harness,
        "elsewhere",
        json!({}),
        elsewhere,
        expected(
            "InvalidProcessor",
            &[
                "function host kubernetes.default.svc:443 is not one this agent allows",
                "--allow-function-host",
            ],
        ),
    );
    harness.run(case).await;
}

#[tokio::test]
async fn an_exec_function_past_its_timeout_is_ended_with_what_it_started() {
    use std::os::unix::fs::PermissionsExt as _;
    // Markers unique to this run: `sleep` with an argument nothing else uses.
    let marker = 900_000 + std::process::id() % 90_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hang.sh");
    // A child of its own in the background (left behind if only the function were killed),
    // then no answer at all.
    let body = format!("#!/bin/sh\nsleep {marker}1 &\nexec sleep {marker}2\n");
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exec = path.to_str().unwrap().to_string();
    let mut harness = start("hostile-exec", &["--allow-function-exec", &exec]).await;
    let function = json!({"processors": [{"name": "hang",
        "function": {"exec": exec, "timeout": "2s"}}]});
    let case = spec_case(
        &harness,
        "hang",
        json!({}),
        function,
        expected(
            "FunctionUnavailable",
            &["the function did not answer within 2s"],
        ),
    );
    // Transient: the sources' condition says so, Ready stays with the healthy revision, and
    // the call is tried again later.
    harness.run_retried(case, "Unpacked").await;
    // Once the BundleDeployment is gone, no call of it runs, and nothing any call started is
    // left: each was ended at its timeout with everything it started.
    let name = format!("{}-hang", harness.label);
    Api::<pallet::api::BundleDeployment>::all(harness.client.clone())
        .delete(&name, &Default::default())
        .await
        .unwrap();
    agent::wait_bd_gone(&harness.client, &name).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let running = support::processes_with(&format!("sleep {marker}"));
        if running.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "processes the function started still run: {running:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
