//! The web view in a real browser (headless Chromium through chromedriver) against the local
//! control plane and a real agent: the overview lists bundles with their states; a failing
//! upgrade shows as Failed, then RolledBack, on the bundle's page without a reload; a pause
//! with a reason, the hotfix's drift as a diff, the resume preview, the resume; a rollback from
//! the timeline; an action refused by RBAC shows the API server's own message (in `pallet ui`
//! and in the agent's view, signed in with a ServiceAccount token). Each page's screenshot is
//! saved under `<target>/tmp/ui-screenshots/`, and axe-core checks each page for serious or
//! critical accessibility violations.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/browser.rs"]
mod browser;
#[path = "support/cli.rs"]
mod cli;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/identities.rs"]
mod identities;
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent::{Agent, TEST_LABEL};
use browser::{Browser, View};
use fantoccini::Locator;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::Client;
use pallet::api::BundleDeployment;
use serde_json::{json, Value};

const LIVE: Duration = Duration::from_secs(10);

fn config_map(greeting: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: hello-config\ndata:\n  greeting: \"{greeting}\"\n")
}

fn deployment(image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  \
         selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    \
         spec:\n      containers:\n      - {{name: web, image: \"{image}\"}}\n"
    )
}

async fn wait_status(
    client: &Client,
    agent: &Agent,
    name: &str,
    what: &str,
    probe: impl Fn(&BundleDeployment) -> bool,
) -> BundleDeployment {
    let api: Api<BundleDeployment> = Api::all(client.clone());
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let bd = api.get(name).await.unwrap();
        if probe(&bd) {
            return bd;
        }
        if std::time::Instant::now() > deadline {
            panic!(
                "timed out waiting for {what}: {:#?}\nagent log:\n{}",
                bd.status,
                agent.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn active_and_ready(bd: &BundleDeployment, revision: i64) -> bool {
    let status = bd.status.clone().unwrap_or_default();
    status.active_revision == Some(revision)
        && pallet::api::conditions::find(&status.conditions, "Ready")
            .is_some_and(|c| c.status == "True")
}

fn ready_reason(bd: &BundleDeployment) -> String {
    bd.status
        .as_ref()
        .and_then(|s| pallet::api::conditions::find(&s.conditions, "Ready"))
        .map(|c| c.reason.clone())
        .unwrap_or_default()
}

/// The state badge of the page's heading.
async fn state_badge(browser: &Browser) -> String {
    match browser.client.find(Locator::Css("h1 .badge")).await {
        Ok(badge) => badge.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

async fn wait_badge(browser: &Browser, want: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let badge = state_badge(browser).await;
        if badge == want {
            return;
        }
        if std::time::Instant::now() > deadline {
            panic!(
                "the page never showed {want} (last: {badge:?}):\n{}",
                browser.main_text().await
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `script` returns true in the page.
async fn wait_js(browser: &Browser, what: &str, script: &str) {
    let deadline = std::time::Instant::now() + LIVE;
    while browser.js(script).await != json!(true) {
        if std::time::Instant::now() > deadline {
            panic!(
                "timed out waiting for {what}:\n{}",
                browser.main_text().await
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the demo's ConfigMap greets with `greeting`.
async fn wait_greeting(cms: &Api<ConfigMap>, greeting: &str) {
    cluster::poll_until(
        &format!("the greeting {greeting:?}"),
        Duration::from_secs(60),
        || {
            let cms = cms.clone();
            let want = greeting.to_string();
            async move {
                let live = cms
                    .get("hello-config")
                    .await
                    .map_err(|e| e.to_string())?
                    .data
                    .and_then(|d| d.get("greeting").cloned());
                if live.as_deref() == Some(want.as_str()) {
                    Ok(())
                } else {
                    Err(format!("greeting {live:?}"))
                }
            }
        },
    )
    .await;
}

async fn click(browser: &Browser, css: &str) {
    browser
        .client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css} on the page: {e}"))
        .click()
        .await
        .unwrap();
}

/// Checks the page with axe-core: no serious or critical violation.
async fn accessible(browser: &Browser, page: &str) {
    let (serious, all) = browser.axe().await;
    eprintln!("axe on {page}: {} violation(s) in all: {all:?}", all.len());
    assert!(
        serious.is_empty(),
        "serious accessibility violations on {page}: {serious:#?}"
    );
}

/// A bundle of the test's own that no agent reconciles, with `status` written as an agent would.
async fn static_bundle(
    client: &Client,
    name: &str,
    label: &str,
    paused: bool,
    status: Option<Value>,
) {
    cli::create_bd(
        client,
        name,
        json!({"paused": paused, "format": "plain", "sources": [{"kind": "git", "git": {"repository": "https://git.invalid/x.git", "ref": {"branch": "main"}}}]}),
        json!({TEST_LABEL: label}),
    )
    .await;
    if let Some(status) = status {
        cli::write_status(client, name, status).await;
    }
}

#[tokio::test]
async fn the_view_follows_a_failed_upgrade_a_hotfix_under_pause_and_a_rollback() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    cluster::ensure_agent_namespace(&client).await;
    let name = support::unique_name("ui-demo");
    cluster::kubelet_namespace(&client, &name).await;
    let fixtures = support::Fixtures::load();
    let repo = fixtures.git_repo(&name);
    let publish = |image: &str, greeting: &str, message: &str| {
        let files = [
            ("web.yaml", deployment(image)),
            ("conf.yaml", config_map(greeting)),
        ];
        let files: Vec<(&str, &[u8])> = files.iter().map(|(p, t)| (*p, t.as_bytes())).collect();
        repo.commit_files("main", &files, message);
    };
    publish("example.invalid/web:v1", "hello v1", "v1");
    agent::apply_bd(
        &client,
        &name,
        json!({"installNamespace": name, "format": "plain",
               "sources": [{"kind": "git", "git": {"repository": repo.url(fixtures.git_plain()), "ref": {"branch": "main"}}}],
               "rollout": {"progressDeadline": "8s", "onFailure": "Hold"}}),
    )
    .await;
    let agent = Agent::start(&name);
    wait_status(&client, &agent, &name, "revision 1 Ready", |bd| {
        active_and_ready(bd, 1)
    })
    .await;
    // Bundles in other states, written as an agent would.
    let label = format!("{name}-static");
    let failed = format!("{name}-failed");
    static_bundle(&client, &failed, &label, false, Some(json!({"observedGeneration": 1, "activeRevision": 2,
        "conditions": [cli::condition("Ready", "False", "ProgressDeadlineExceeded", "revision 3 not healthy within 10m")]}))).await;
    let paused = format!("{name}-paused");
    static_bundle(&client, &paused, &label, true, None).await;
    let waiting = format!("{name}-waiting");
    static_bundle(&client, &waiting, &label, false, None).await;

    let view = View::start(&[
        "--kubeconfig",
        cluster::kubeconfig_path().to_str().unwrap(),
        "--change-log",
        agent.change_log_path().to_str().unwrap(),
    ]);
    let browser = Browser::start(1280, 1000).await;
    browser.open(&view.login).await;
    browser.open(&format!("{}/?q={name}", view.base)).await;
    let text = browser
        .wait_text("the overview", LIVE, |t| t.contains(&waiting))
        .await;
    assert!(text.contains("4 of "), "{text}");
    let states: Value = browser
        .js("return Object.fromEntries(Array.from(document.querySelectorAll('tbody tr')).map(r => [r.querySelector('th').textContent, r.dataset.state]));")
        .await;
    assert_eq!(states[&name], "Ready", "{states}");
    assert_eq!(states[&failed], "Failed", "{states}");
    assert_eq!(states[&paused], "Paused", "{states}");
    assert_eq!(states[&waiting], "Waiting", "{states}");
    browser.screenshot("overview").await;
    accessible(&browser, "the overview").await;

    // A failing upgrade, followed live: the page is opened once and never reloaded.
    browser.open(&format!("{}/bundles/{name}", view.base)).await;
    wait_badge(&browser, "Ready").await;
    browser
        .js("window.__sameDocument = true; return true;")
        .await;
    publish("example.invalid/web:v2-broken", "hello v2", "v2");
    cli::pallet_ok(&["reconcile", &name]);
    wait_badge(&browser, "Failed").await;
    let text = browser.main_text().await;
    assert!(
        text.contains("CrashLoopBackOff"),
        "the Pods' reason is shown:\n{text}"
    );
    assert!(text.contains("Revision 2"), "{text}");
    browser.screenshot("bundle-failed").await;
    accessible(&browser, "a bundle's page").await;
    // Another on-call engineer rolls back from a terminal; the open page follows.
    cli::pallet_ok(&["rollback", &name, "--to", "1"]);
    wait_badge(&browser, "RolledBack").await;
    assert_eq!(
        browser.js("return window.__sameDocument === true;").await,
        json!(true),
        "the page was not reloaded"
    );
    browser.screenshot("bundle-rolled-back").await;

    // A good version: revision 3.
    publish("example.invalid/web:v3", "hello v3", "v3");
    cli::pallet_ok(&["reconcile", &name]);
    wait_status(&client, &agent, &name, "revision 3 Ready", |bd| {
        active_and_ready(bd, 3)
    })
    .await;
    wait_badge(&browser, "Ready").await;

    // Pause with a reason.
    click(&browser, "details[data-action=pause] summary").await;
    browser
        .client
        .find(Locator::Css(
            "details[data-action=pause] input[name=reason]",
        ))
        .await
        .unwrap()
        .send_keys("hotfix INC-42")
        .await
        .unwrap();
    click(&browser, "details[data-action=pause] button[type=submit]").await;
    browser
        .wait_text("the pause", LIVE, |t| t.contains("Paused: hotfix INC-42"))
        .await;
    wait_badge(&browser, "Paused").await;
    // The hotfix, by hand; the paused agent reports it as drift.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    cms.patch(
        "hello-config",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"greeting": "hotfixed"}})),
    )
    .await
    .unwrap();
    wait_status(&client, &agent, &name, "the drift reported", |bd| {
        bd.status
            .as_ref()
            .and_then(|s| s.drift.as_ref())
            .is_some_and(|d| d.count > 0)
    })
    .await;
    let text = browser
        .wait_text("the drift's diff", LIVE, |t| t.contains("hotfixed"))
        .await;
    assert!(
        text.contains("hello v3"),
        "the diff shows both sides:\n{text}"
    );
    browser
        .js("document.getElementById('drift').scrollIntoView(); return true;")
        .await;
    browser.screenshot("bundle-drift").await;

    // Resume: the preview first.
    click(&browser, "#actions a.button").await;
    let text = browser
        .wait_text("the resume preview", LIVE, |t| {
            t.contains("would be reverted")
        })
        .await;
    assert!(
        text.contains("ConfigMap")
            && text.contains("hello-config")
            && text.contains(".data.greeting"),
        "{text}"
    );
    browser.screenshot("resume-preview").await;
    accessible(&browser, "the resume preview").await;
    click(&browser, "main form button[type=submit]").await;
    browser
        .wait_text("the resume", LIVE, |t| t.contains("Resumed"))
        .await;
    wait_greeting(&cms, "hello v3").await;
    wait_badge(&browser, "Ready").await;

    // What changes from revision 3 to 1, then a rollback to it from the timeline.
    browser
        .open(&format!("{}/bundles/{name}/diff?from=3&to=1", view.base))
        .await;
    let text = browser
        .wait_text("the revision diff", LIVE, |t| t.contains("differ"))
        .await;
    assert!(
        text.contains("hello v1") && text.contains("hello v3"),
        "{text}"
    );
    browser.screenshot("revision-diff").await;
    browser
        .open(&format!("{}/bundles/{name}#revisions", view.base))
        .await;
    let rollback_writes = "return Array.from(document.querySelectorAll('table.changes tbody tr')).filter(r => r.cells[2].textContent === 'rollback' && r.cells[3].textContent.includes('hello-config')).length;";
    let before = browser.js(rollback_writes).await.as_u64().unwrap();
    click(
        &browser,
        "#revision-1 details[data-action=rollback] summary",
    )
    .await;
    browser.screenshot("rollback-confirm").await;
    click(
        &browser,
        "#revision-1 details[data-action=rollback] button[type=submit]",
    )
    .await;
    browser
        .wait_text("the rollback request", LIVE, |t| {
            t.contains("Rollback to revision 1 requested")
        })
        .await;
    wait_status(&client, &agent, &name, "revision 1 active again", |bd| {
        bd.status.as_ref().and_then(|s| s.active_revision) == Some(1)
            && ready_reason(bd) == "Healthy"
    })
    .await;
    wait_badge(&browser, "RolledBack").await;
    wait_greeting(&cms, "hello v1").await;
    // The change-log stream shows the rollback's writes (live: the page was loaded before them).
    wait_js(
        &browser,
        "the rollback's writes in the change log",
        &format!(
            "{} > {before}",
            rollback_writes
                .trim_end_matches(';')
                .replacen("return ", "return (", 1)
                + ")"
        ),
    )
    .await;
    browser
        .js("document.getElementById('changes').scrollIntoView(); return true;")
        .await;
    browser.screenshot("bundle-change-log").await;

    // A phone's screen.
    browser.client.set_window_size(390, 844).await.unwrap();
    browser.open(&format!("{}/bundles/{name}", view.base)).await;
    browser.screenshot("bundle-phone").await;
    for bd in [&failed, &paused, &waiting] {
        cli::delete_bd(&client, bd).await;
    }
}

/// Applies deploy/components/web-view's RBAC (as the admin).
fn apply_web_view_grant() {
    let cache = std::env::var_os("PALLET_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/pallet"));
    let out = std::process::Command::new(cache.join("bin/kubectl"))
        .arg("--kubeconfig")
        .arg(cluster::kubeconfig_path())
        .args([
            "apply",
            "--server-side",
            "--field-manager",
            cluster::TEST_FIELD_MANAGER,
            "-f",
        ])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/components/web-view/rbac.yaml"))
        .output()
        .expect("kubectl runs (built by tools/controlplane.sh)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A ServiceAccount that may read BundleDeployments (and Events and Pods) but change nothing.
async fn viewer_account(client: &Client, namespace: &str) -> String {
    let name = format!("{namespace}-viewer");
    Api::<Namespace>::all(client.clone())
        .patch(
            namespace,
            &PatchParams::apply(cluster::TEST_FIELD_MANAGER),
            &Patch::Apply(
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
            ),
        )
        .await
        .unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .patch("viewer", &PatchParams::apply(cluster::TEST_FIELD_MANAGER),
               &Patch::Apply(&json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "viewer", "namespace": namespace}})))
        .await
        .unwrap();
    Api::<ClusterRole>::all(client.clone())
        .patch(&name, &PatchParams::apply(cluster::TEST_FIELD_MANAGER),
               &Patch::Apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
                   "rules": [{"apiGroups": ["pallet.dev"], "resources": ["bundledeployments"], "verbs": ["get", "list", "watch"]},
                             {"apiGroups": [""], "resources": ["events", "pods", "configmaps"], "verbs": ["get", "list"]}]})))
        .await
        .unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(&name, &PatchParams::apply(cluster::TEST_FIELD_MANAGER),
               &Patch::Apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                   "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": namespace}]})))
        .await
        .unwrap();
    name
}

#[tokio::test]
async fn an_action_refused_by_rbac_shows_the_api_servers_message() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    cluster::ensure_agent_namespace(&client).await;
    let name = support::unique_name("ui-rbac");
    static_bundle(&client, &name, &format!("{name}-static"), false, Some(json!({"observedGeneration": 1,
        "conditions": [cli::condition("Ready", "False", "ProgressDeadlineExceeded", "revision 2 not healthy within 10m")]}))).await;
    let grant = viewer_account(&client, &name).await;
    let work = tempfile::tempdir().unwrap();
    let (kubeconfig, token) =
        identities::token_kubeconfig_with_token(&client, &name, "viewer", work.path()).await;
    let forbidden = format!(
        "bundledeployments.pallet.dev \"{name}\" is forbidden: User \"system:serviceaccount:{name}:viewer\" cannot patch resource \"bundledeployments\""
    );

    // `pallet ui` with the viewer's own kubeconfig.
    let view = View::start(&["--kubeconfig", kubeconfig.to_str().unwrap()]);
    let browser = Browser::start(1280, 900).await;
    browser.open(&view.login).await;
    browser.open(&format!("{}/bundles/{name}", view.base)).await;
    wait_badge(&browser, "Failed").await;
    click(&browser, "details[data-action=retry] summary").await;
    click(&browser, "details[data-action=retry] button[type=submit]").await;
    let text = browser
        .wait_text("the refusal", LIVE, |t| {
            t.contains("The API server refused")
        })
        .await;
    assert!(
        text.contains(&forbidden),
        "the API server's own message:\n{text}"
    );
    browser.screenshot("action-refused").await;
    accessible(&browser, "a refused action").await;
    drop(view);

    // The agent's view: signed in with the same token, acting as that user by impersonation.
    // The grant it needs is deploy/components/web-view's (in force when the agent runs as
    // deploy/'s ServiceAccount).
    apply_web_view_grant();
    let port = browser::free_port();
    let address = format!("127.0.0.1:{port}");
    let agent = Agent::start_with(
        &format!("{name}-agent"),
        &["--ui-address", &address, "--ui-actions"],
    );
    let base = format!("http://{address}");
    cluster::poll_until("the agent's view", Duration::from_secs(30), || {
        let url = format!("{base}/login");
        async move {
            std::net::TcpStream::connect(
                url.trim_start_matches("http://").trim_end_matches("/login"),
            )
            .map(drop)
            .map_err(|e| e.to_string())
        }
    })
    .await;
    browser.open(&format!("{base}/")).await;
    browser
        .wait_text("the sign-in page", LIVE, |t| t.contains("Sign in"))
        .await;
    accessible(&browser, "the sign-in page").await;
    browser
        .client
        .find(Locator::Css("textarea[name=token]"))
        .await
        .unwrap()
        .send_keys(&token)
        .await
        .unwrap();
    click(&browser, "form.login button[type=submit]").await;
    browser
        .wait_text("the overview, signed in", LIVE, |t| t.contains("Bundles"))
        .await;
    browser.open(&format!("{base}/bundles/{name}")).await;
    wait_badge(&browser, "Failed").await;
    click(&browser, "details[data-action=reconcile] summary").await;
    click(
        &browser,
        "details[data-action=reconcile] button[type=submit]",
    )
    .await;
    let text = browser
        .wait_text("the refusal", LIVE, |t| {
            t.contains("The API server refused")
        })
        .await;
    assert!(
        text.contains(&forbidden),
        "the API server's own message, for the impersonated user:\n{text}"
    );
    browser.screenshot("agent-view-refused").await;
    drop(agent);

    cli::delete_bd(&client, &name).await;
    let _ = Api::<ClusterRoleBinding>::all(client.clone())
        .delete(&grant, &DeleteParams::default())
        .await;
    let _ = Api::<ClusterRole>::all(client.clone())
        .delete(&grant, &DeleteParams::default())
        .await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await;
}
