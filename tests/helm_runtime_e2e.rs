//! End-to-end: a chart's `now` is the time the revision was first rendered
//! (`status.revisions[].renderedAt`). A chart that stamps its install time keeps the stamp
//! through ten reconciles, an agent restart and drift correction (no new revision),
//! `pallet plan` sees nothing to change, a new spec gets a new time, and `pallet render` offline
//! says that it used the current time.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::time::Duration;

use agent::{wait_condition, Agent};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams};
use kube::Client;
use pallet::api::{BundleDeployment, BundleDeploymentStatus};
use serde_json::{json, Value};

/// A chart whose ConfigMap stamps the time it was rendered, in three forms charts use.
fn stamping_chart(dir: &std::path::Path) {
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: stamp\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(dir.join("values.yaml"), "color: blue\n").unwrap();
    std::fs::write(
        dir.join("templates/stamp.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stamp\ndata:\n  \
         install_time: {{ now | unixEpoch | quote }}\n  \
         schedule: {{ printf \"%s * * *\" (now | date \"04 15\") | quote }}\n  \
         updated: {{ now | date \"20060102150405\" | quote }}\n  \
         color: {{ .Values.color | quote }}\n",
    )
    .unwrap();
}

async fn stamp(client: &Client, namespace: &str) -> std::collections::BTreeMap<String, String> {
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get("stamp")
        .await
        .unwrap()
        .data
        .unwrap_or_default()
}

/// The time revision `number` recorded, Unix seconds.
fn rendered_at(status: &BundleDeploymentStatus, number: i64) -> i64 {
    status
        .revisions
        .iter()
        .find(|r| r.number == number)
        .and_then(|r| r.rendered_at.as_ref())
        .map(|t| t.0.as_second())
        .unwrap_or_else(|| panic!("revision {number} records no time: {status:?}"))
}

async fn namespaces(client: &Client, names: &[&str]) {
    for ns in names {
        Api::<Namespace>::all(client.clone())
            .create(
                &Default::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
            )
            .await
            .unwrap();
    }
}

async fn clean_up(client: &Client, name: &str, names: &[&str]) {
    Api::<BundleDeployment>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    agent::wait_bd_gone(client, name).await;
    for ns in names {
        let _ = Api::<Namespace>::all(client.clone())
            .delete(ns, &DeleteParams::default())
            .await;
    }
}

#[tokio::test]
async fn now_is_the_time_the_revision_was_first_rendered() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("clock");
    let agent_ns = format!("{test}-agent");
    namespaces(&client, &[&test, &agent_ns]).await;
    let dir = tempfile::tempdir().unwrap();
    stamping_chart(dir.path());
    let repo = fixtures.git_repo(&test);
    repo.commit_dir("main", dir.path(), "v1");
    let spec = json!({"installNamespace": test, "format": "helm",
        "sources": [{"kind": "git", "git": {"repository": repo.url(fixtures.git_plain()), "ref": {"branch": "main"}}}]});
    let before = k8s_openapi::jiff::Timestamp::now().as_second();
    let mut agent = Agent::start_with(&test, &["--namespace", agent_ns.as_str()]);
    agent::apply_bd(&client, &test, spec.clone()).await;
    wait_condition(&client, &agent, &test, "Ready", "True", "1 objects").await;
    let status = agent::wait_status(&client, &agent, &test, "installed", agent::is_ready).await;
    let first = stamp(&client, &test).await;
    let installed = rendered_at(&status, 1);
    // The chart's `now` is the revision's time: when it was rendered, not the epoch.
    assert!(installed >= before, "{installed} < {before}");
    assert_eq!(first["install_time"], installed.to_string(), "{first:?}");
    let t = k8s_openapi::jiff::Timestamp::from_second(installed).unwrap();
    let utc = t.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC);
    assert_eq!(first["updated"], utc.strftime("%Y%m%d%H%M%S").to_string());
    assert_eq!(first["schedule"], utc.strftime("%M %H * * *").to_string());

    // Ten reconciles, each asked for and handled, with an agent restart halfway (a new process
    // with no memory of the render): the same stamp, still revision 1.
    for n in 1..=10 {
        if n == 5 {
            agent.kill();
            agent = agent.restart_with_env(&[]);
        }
        let request = format!("again-{n}");
        agent::patch_bd(
            &client,
            &test,
            json!({"metadata": {"annotations": {"pallet.dev/requested-reconcile": request}}}),
        )
        .await;
        let status = agent::wait_status(
            &client,
            &agent,
            &test,
            "the reconcile request handled",
            |s, g| {
                agent::is_ready(s, g)
                    && s.last_handled_reconcile.as_deref() == Some(request.as_str())
            },
        )
        .await;
        assert_eq!(status.active_revision, Some(1), "reconcile {n}");
        assert_eq!(status.revisions.len(), 1, "reconcile {n}: {status:?}");
        assert_eq!(stamp(&client, &test).await, first, "reconcile {n}");
    }

    // Drift: the ConfigMap deleted is made again from the same render, stamp and all.
    Api::<ConfigMap>::namespaced(client.clone(), &test)
        .delete("stamp", &DeleteParams::default())
        .await
        .unwrap();
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &test);
    cluster::poll_until("the ConfigMap made again", Duration::from_secs(90), || {
        let cms = cms.clone();
        let first = first.clone();
        async move {
            match cms.get_opt("stamp").await.map_err(|e| e.to_string())? {
                Some(cm) if cm.data.as_ref() == Some(&first) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    let status =
        agent::wait_status(&client, &agent, &test, "drift corrected", agent::is_ready).await;
    assert_eq!(status.active_revision, Some(1));

    // `pallet plan` of the BundleDeployment as the cluster holds it (its status included)
    // renders with the revision's time: nothing to change.
    let live_manifest = dir.path().join("live.json");
    let live = Api::<BundleDeployment>::all(client.clone())
        .get(&test)
        .await
        .unwrap();
    std::fs::write(&live_manifest, serde_json::to_vec(&live).unwrap()).unwrap();
    let plan = std::process::Command::new(env!("CARGO_BIN_EXE_pallet"))
        .args(["plan", "-f", live_manifest.to_str().unwrap()])
        .args(["--namespace", &agent_ns, "-o", "json"])
        .args(["--allow-loopback-egress", "--cache-dir"])
        .arg(dir.path().join("plan-cache"))
        .env("KUBECONFIG", cluster::kubeconfig_path())
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&plan.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&plan.stdout),
            String::from_utf8_lossy(&plan.stderr)
        )
    });
    let changed: Vec<&Value> = report["objects"]
        .as_array()
        .map(|o| o.iter().filter(|o| o["action"] != "unchanged").collect())
        .unwrap_or_default();
    assert!(changed.is_empty(), "{report:#}");

    // A new spec: a new revision, rendered at its own time.
    agent::patch_bd(
        &client,
        &test,
        json!({"spec": {"config": {"helm": {"values": {"color": "green"}}}}}),
    )
    .await;
    let status = agent::wait_status(&client, &agent, &test, "revision 2", |s, g| {
        agent::is_ready(s, g) && s.active_revision == Some(2)
    })
    .await;
    let second = rendered_at(&status, 2);
    assert!(second >= installed);
    assert_eq!(
        rendered_at(&status, 1),
        installed,
        "revision 1 keeps its time"
    );
    let now = stamp(&client, &test).await;
    assert_eq!(now["color"], "green");
    assert_eq!(now["install_time"], second.to_string());

    // Offline, `pallet render` uses the current time and says so.
    let manifest = dir.path().join("bd.json");
    let live = Api::<BundleDeployment>::all(client.clone())
        .get(&test)
        .await
        .unwrap();
    std::fs::write(&manifest, serde_json::to_vec(&live).unwrap()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pallet"))
        .args(["render", "-f", manifest.to_str().unwrap(), "-o", "json"])
        .args(["--allow-loopback-egress", "--cache-dir"])
        .arg(dir.path().join("cache"))
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("`now` is the current time"), "{stderr}");

    agent.kill();
    let agent = agent.restart_with_env(&[]);
    clean_up(&client, &test, &[&test, &agent_ns]).await;
    drop(agent);
}
