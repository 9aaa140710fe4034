//! The on-call commands against the local control plane and a real agent: `get` (table, data,
//! watch), `diff` (and its exit status), `tree` and `events`; exit statuses of the commands; a
//! workload whose Pods crash is reported with its Pods' reasons; `pallet agent --context`.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cli.rs"]
mod cli;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use agent::Agent;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

fn config_map(name: &str, value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  v: \"{value}\"\n")
}

fn deployment(image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  \
         selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    \
         spec:\n      containers:\n      - {{name: web, image: \"{image}\"}}\n"
    )
}

/// A BundleDeployment `name` of the files in a git repository of its own.
async fn git_bundle(client: &Client, name: &str, files: &[(&str, String)], extra: Value) {
    let fixtures = support::Fixtures::load();
    let repo = fixtures.git_repo(name);
    let files: Vec<(&str, &[u8])> = files.iter().map(|(p, t)| (*p, t.as_bytes())).collect();
    repo.commit_files("main", &files, "v1");
    let mut spec = json!({
        "installNamespace": name,
        "sources": [{"kind": "git", "git": {"repository": repo.url(fixtures.git_plain()), "ref": {"branch": "main"}}}],
        "format": "plain",
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    agent::apply_bd(client, name, spec).await;
}

fn status_code(args: &[&str]) -> (Option<i32>, String, String) {
    let out = cli::pallet(args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn crash_looping_pods_are_named_with_their_reason_in_the_condition_history_get_and_tree() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let name = support::unique_name("day2-crash");
    cluster::kubelet_namespace(&client, &name).await;
    git_bundle(
        &client,
        &name,
        &[("web.yaml", deployment("example.invalid/web:broken"))],
        json!({"rollout": {"progressDeadline": "10s", "onFailure": "Hold"}}),
    )
    .await;
    let agent = Agent::start(&name);
    let bd = agent::wait_condition(
        &client,
        &agent,
        &name,
        "Ready",
        "False",
        "not healthy within",
    )
    .await
    .status
    .unwrap();
    let ready = pallet::api::conditions::find(&bd.conditions, "Ready").unwrap();
    let why = "container web CrashLoopBackOff, last exit code 1 (Error)";
    assert!(ready.message.contains(why), "{}", ready.message);
    assert_eq!(ready.reason, "ProgressDeadlineExceeded");
    assert!(
        ready
            .message
            .contains(&format!("Deployment.apps {name}/web: pod web-")),
        "{}",
        ready.message
    );
    let revision = &bd.revisions[0];
    assert!(
        revision
            .message
            .as_deref()
            .unwrap_or_default()
            .contains(why),
        "the history says why: {revision:?}"
    );

    // get: the reason and message columns.
    let table = cli::pallet_ok(&["get", &name]);
    let row = table.lines().nth(1).unwrap();
    assert!(
        row.starts_with(&name)
            && row.contains(" False ")
            && row.contains("ProgressDeadlineExceeded"),
        "{table}"
    );
    let wide = cli::pallet_ok(&["get", &name, "-o", "wide"]);
    assert!(wide.contains(why), "{wide}");
    let list: Value = serde_json::from_str(&cli::pallet_ok(&["get", &name, "-o", "json"])).unwrap();
    assert_eq!(list["items"][0]["metadata"]["name"], json!(name));
    assert_eq!(
        cli::pallet_ok(&["get", &name, "-o", "name"]).trim(),
        format!("bundledeployment/{name}")
    );

    // tree: the Deployment and, under it, its crash-looping Pod.
    let tree = cli::pallet_ok(&["tree", &name]);
    let lines: Vec<&str> = tree.lines().collect();
    assert!(
        lines[0].starts_with(&format!(
            "BundleDeployment {name} (revision 1; Ready=False ProgressDeadlineExceeded)"
        )),
        "{tree}"
    );
    let workload = lines
        .iter()
        .position(|l| l.contains(&format!("Deployment {name}/web")))
        .unwrap();
    let pod = lines[workload + 1];
    assert!(
        pod.contains(&format!("Pod {name}/web-")) && pod.contains("Failed") && pod.contains(why),
        "{tree}"
    );

    // events: the agent's Events on the BundleDeployment.
    let events = cli::pallet_ok(&["events", &name]);
    assert!(
        events
            .lines()
            .any(|l| l.contains(&format!("BundleDeployment {name}"))),
        "{events}"
    );
}

#[tokio::test]
async fn diff_says_whether_the_cluster_differs_from_the_bundle() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let name = support::unique_name("day2-diff");
    git_bundle(
        &client,
        &name,
        &[("app.yaml", config_map("app", "1"))],
        json!({}),
    )
    .await;
    let agent = Agent::start(&name);
    agent::wait_condition(&client, &agent, &name, "Ready", "True", "").await;
    let (code, _, stderr) = status_code(&["diff", &name, "--allow-loopback-egress"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("no differences"), "{stderr}");

    // Paused, a change by hand stays, and diff shows it (exit status 5).
    cli::pallet_ok(&["pause", &name, "--reason", "hotfix"]);
    Api::<ConfigMap>::namespaced(client.clone(), &name)
        .patch("app", &PatchParams::apply("hotfix").force(), &Patch::Apply(&json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"}, "data": {"v": "by-hand"}})))
        .await
        .unwrap();
    let (code, stdout, stderr) = status_code(&["diff", &name, "--allow-loopback-egress"]);
    assert_eq!(code, Some(5), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!(
            "--- live/ConfigMap/{name}/app\n+++ bundle/ConfigMap/{name}/app\n"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("-  v: by-hand")
            && (stdout.contains("+  v: '1'") || stdout.contains("+  v: \"1\"")),
        "{stdout}"
    );

    // A manifest not applied yet: everything would be created.
    let dir = tempfile::tempdir().unwrap();
    let other = support::unique_name("day2-diff-new");
    let fixtures = support::Fixtures::load();
    let repo = fixtures.git_repo(&other);
    repo.commit_files(
        "main",
        &[("app.yaml", config_map("new", "2").as_bytes())],
        "v1",
    );
    let manifest = dir.path().join("bd.yaml");
    std::fs::write(&manifest, serde_json::to_string(&json!({
        "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment", "metadata": {"name": other},
        "spec": {"installNamespace": name, "format": "plain",
                 "sources": [{"kind": "git", "git": {"repository": repo.url(fixtures.git_plain()), "ref": {"branch": "main"}}}]}}))
        .unwrap()).unwrap();
    let (code, stdout, _) = status_code(&[
        "diff",
        "-f",
        manifest.to_str().unwrap(),
        "--allow-loopback-egress",
    ]);
    assert_eq!(code, Some(5), "{stdout}");
    assert!(
        stdout.contains(&format!("+++ bundle/ConfigMap/{name}/new")),
        "{stdout}"
    );
}

#[tokio::test]
async fn exit_statuses_tell_not_found_usage_and_timeout_apart() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let missing = support::unique_name("day2-missing");
    for args in [
        vec!["status", missing.as_str()],
        vec!["get", missing.as_str()],
        vec!["tree", missing.as_str()],
        vec!["diff", missing.as_str()],
    ] {
        let (code, _, stderr) = status_code(&args);
        assert_eq!(code, Some(3), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("BundleDeployment {missing} not found")),
            "{stderr}"
        );
    }
    let (code, _, _) = status_code(&["trace", "configmap-without-a-slash"]);
    assert_eq!(code, Some(2));
    let (code, _, _) = status_code(&["status"]);
    assert_eq!(code, Some(2), "clap's usage errors");

    // No agent handles the request: --wait ends with the timed-out status.
    let name = support::unique_name("day2-timeout");
    cli::create_bd(
        &client,
        &name,
        json!({"format": "plain",
        "sources": [{"kind": "http", "http": {"url": "http://127.0.0.1:1/b.yaml"}}]}),
        json!({}),
    )
    .await;
    let (code, _, stderr) = status_code(&["reconcile", &name, "--wait", "--timeout", "1s"]);
    assert_eq!(code, Some(4), "{stderr}");
    assert!(stderr.contains("timed out after 1s"), "{stderr}");
    cli::delete_bd(&client, &name).await;
}

#[tokio::test]
async fn get_watch_prints_each_change() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let name = support::unique_name("day2-watch");
    cli::create_bd(
        &client,
        &name,
        json!({"format": "plain",
        "sources": [{"kind": "http", "http": {"url": "http://127.0.0.1:1/b.yaml"}}]}),
        json!({}),
    )
    .await;
    let mut watch = cli::pallet_cmd(&["get", &name, "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (lines, received) = mpsc::channel();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let first: Vec<String> = (0..2)
        .map(|_| received.recv_timeout(Duration::from_secs(30)).unwrap())
        .collect();
    assert!(
        first[0].starts_with("NAME") && first[1].starts_with(&name),
        "{first:?}"
    );
    cli::write_status(
        &client,
        &name,
        json!({"conditions": [
        cli::condition("Ready", "False", "SourceUnavailable", "http: connection refused")]}),
    )
    .await;
    let changed = loop {
        let line = received
            .recv_timeout(Duration::from_secs(30))
            .expect("the change is printed");
        if line.contains("SourceUnavailable") {
            break line;
        }
    };
    assert!(
        changed.starts_with(&name) && changed.ends_with("http: connection refused"),
        "{changed}"
    );
    let _ = watch.kill();
    let _ = watch.wait();
    cli::delete_bd(&client, &name).await;
}

/// A kubeconfig whose current context is a cluster that does not answer, and whose context
/// `local` is the local control plane.
fn two_context_home() -> tempfile::TempDir {
    let local: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(cluster::kubeconfig_path()).unwrap())
            .unwrap();
    let mut config = local.clone();
    config["clusters"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "nowhere",
        "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": true}}));
    config["contexts"] = json!([
        {"name": "local", "context": {"cluster": local["contexts"][0]["context"]["cluster"],
                                      "user": local["contexts"][0]["context"]["user"]}},
        {"name": "nowhere", "context": {"cluster": "nowhere", "user": local["contexts"][0]["context"]["user"]}},
    ]);
    config["current-context"] = json!("nowhere");
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".kube")).unwrap();
    std::fs::write(
        home.path().join(".kube/config"),
        serde_json::to_string(&config).unwrap(),
    )
    .unwrap();
    home
}

#[tokio::test]
async fn the_agent_uses_the_context_it_is_given_without_a_kubeconfig_flag() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let home = two_context_home();
    let name = support::unique_name("day2-context");
    cli::create_bd(
        &client,
        &name,
        json!({"format": "plain",
        "sources": [{"kind": "http", "http": {"url": "http://127.0.0.1:1/b.yaml"}}]}),
        json!({agent::TEST_LABEL: name}),
    )
    .await;
    let agent = |context: &str| {
        Command::new(env!("CARGO_BIN_EXE_pallet"))
            .args([
                "agent",
                "--context",
                context,
                "--namespace",
                "pallet-system",
                "--metrics-addr",
                "",
            ])
            .args([
                "--selector",
                &format!("{}={name}", agent::TEST_LABEL),
                "--cache-dir",
            ])
            .arg(home.path().join("cache"))
            .env("HOME", home.path())
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // An unknown context is an error, not a fall-back to the current one.
    let out = agent("elsewhere").wait_with_output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("elsewhere"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `local` is used although the current context is another cluster: the agent writes the
    // BundleDeployment's status there.
    let mut running = agent("local");
    let bds: Api<pallet::api::BundleDeployment> = Api::all(client.clone());
    cluster::poll_until(
        "a status from the agent of context local",
        Duration::from_secs(60),
        || {
            let bds = bds.clone();
            let name = name.clone();
            async move {
                let bd = bds.get(&name).await.map_err(|e| e.to_string())?;
                bd.status
                    .and_then(|s| s.agent)
                    .map(|_| ())
                    .ok_or_else(|| "no status yet".to_string())
            }
        },
    )
    .await;
    // Deleted while its agent runs, which releases the finalizer.
    cli::delete_bd(&client, &name).await;
    agent::wait_bd_gone(&client, &name).await;
    let _ = running.kill();
    let _ = running.wait();
}

#[tokio::test]
async fn push_reads_the_password_from_stdin() {
    let fixtures = support::Fixtures::load();
    let registry = fixtures.registry_tls();
    let auth = registry.registry_auth();
    let (user, password) = match auth {
        oci_client::secrets::RegistryAuth::Basic(user, password) => (user, password),
        other => panic!("the TLS registry takes basic auth: {other:?}"),
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cm.yaml"), config_map("a", "1")).unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, fixtures.ca_pem()).unwrap();
    let reference = format!(
        "{}/{}:v1",
        registry.host,
        support::unique_name("stdin-push")
    );
    let mut push = Command::new(env!("CARGO_BIN_EXE_pallet"))
        .arg("push")
        .arg(dir.path())
        .arg(&reference)
        .arg("--ca-file")
        .arg(&ca)
        .args(["--username", &user, "--password-stdin"])
        .env_remove("PALLET_REGISTRY_PASSWORD")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    push.stdin
        .take()
        .unwrap()
        .write_all(format!("{password}\n").as_bytes())
        .unwrap();
    let out = push.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("@sha256:"));
}
