//! End-to-end: charts published as users publish them, installed by the agent binary on the local
//! control plane. A chart pushed by the real `helm push` (the oracle helm binary) installed from
//! `kind: image`; an `oci://` chart repository with a version range, where a newer matching
//! version upgrades the bundle and a non-matching one does not.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use agent::{apply_bd, Agent};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams};
use kube::Client;
use pallet::api::BundleDeployment;
use serde_json::json;
use support::Server;

fn helm() -> PathBuf {
    let path = PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/pallet/bin/helm");
    assert!(path.is_file(), "helm is built by tools/helm.sh build");
    path
}

/// Writes a one-ConfigMap chart named `chart` that records its own version, packages it at
/// `version` and pushes it with `helm push` to `oci://<registry>/<prefix>`.
fn push_chart(reg: &Server, prefix: &str, chart: &str, version: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(chart);
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        format!("apiVersion: v2\nname: {chart}\nversion: 0.0.0\n"),
    )
    .unwrap();
    std::fs::write(dir.join("values.yaml"), "greeting: hello\n").unwrap();
    std::fs::write(
        dir.join("templates/info.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-info\n\
         data:\n  version: {{ .Chart.Version | quote }}\n  greeting: {{ .Values.greeting | quote }}\n",
    )
    .unwrap();
    let run = |command: &mut Command| {
        let out = command.output().expect("helm runs");
        assert!(
            out.status.success(),
            "{command:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(Command::new(helm())
        .arg("package")
        .arg(&dir)
        .args(["--version", version, "--destination"])
        .arg(tmp.path()));
    run(Command::new(helm())
        .arg("push")
        .arg(tmp.path().join(format!("{chart}-{version}.tgz")))
        .arg(format!("oci://{}/{prefix}", reg.host))
        .arg("--plain-http"));
}

/// Polls until the BundleDeployment is Ready at `revision`; returns it.
async fn wait_ready(client: &Client, agent: &Agent, name: &str, revision: i64) -> BundleDeployment {
    let api: Api<BundleDeployment> = Api::all(client.clone());
    cluster::poll_until(
        &format!("{name} Ready at revision {revision}"),
        Duration::from_secs(90),
        || {
            let api = api.clone();
            async move {
                let bd = api.get(name).await.map_err(|e| e.to_string())?;
                let status = bd.status.clone().unwrap_or_default();
                let ready = status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                if ready && status.active_revision == Some(revision) {
                    Ok(bd)
                } else {
                    Err(format!(
                        "active {:?}, conditions {:?}\nagent log:\n{}",
                        status.active_revision,
                        status.conditions,
                        agent.log_tail()
                    ))
                }
            }
        },
    )
    .await
}

/// `status.revisions[0].sources[0].version` of `bd`.
fn resolved_version(bd: &BundleDeployment) -> Option<String> {
    bd.status
        .as_ref()
        .and_then(|s| s.revisions.first())
        .and_then(|r| r.sources.first())
        .and_then(|s| s.version.clone())
}

async fn config_map_version(client: &Client, namespace: &str, name: &str) -> Option<String> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    cms.get_opt(&format!("{name}-info"))
        .await
        .unwrap()
        .and_then(|cm| cm.data)
        .and_then(|d| d.get("version").cloned())
}

/// Successful helmRepository fetches the agent counted.
async fn helm_repository_fetches(agent: &Agent) -> u64 {
    agent
        .metrics()
        .await
        .lines()
        .find(|l| {
            l.starts_with("pallet_fetches_total")
                && l.contains("kind=\"helmRepository\"")
                && l.contains("result=\"success\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<f64>().ok())
        .map(|n| n as u64)
        .unwrap_or(0)
}

async fn clean_up(client: &Client, name: &str) {
    Api::<BundleDeployment>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete bd");
    agent::wait_bd_gone(client, name).await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

#[tokio::test]
async fn a_chart_pushed_by_helm_installs_from_an_image_source() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let reg = fx.registry_plain();
    let name = support::unique_name("ocichart");
    push_chart(reg, &name, "info", "0.3.1");
    let agent = Agent::start_with(&name, &["--plain-http-registry", &reg.host]);
    apply_bd(
        &client,
        &name,
        json!({
            "installNamespace": name,
            "format": "helm",
            "sources": [{"kind": "image", "image": {"ref": format!("{}/{name}/info:0.3.1", reg.host)}}],
            "config": {"helm": {"values": {"greeting": "from pallet"}}},
        }),
    )
    .await;
    wait_ready(&client, &agent, &name, 1).await;
    assert_eq!(
        config_map_version(&client, &name, &name).await.as_deref(),
        Some("0.3.1")
    );
    let cm = Api::<ConfigMap>::namespaced(client.clone(), &name)
        .get(&format!("{name}-info"))
        .await
        .unwrap();
    assert_eq!(
        cm.data
            .unwrap_or_default()
            .get("greeting")
            .map(String::as_str),
        Some("from pallet")
    );
    clean_up(&client, &name).await;
}

#[tokio::test]
async fn an_oci_chart_repository_range_upgrades_to_new_matching_versions_only() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let reg = fx.registry_plain();
    let name = support::unique_name("ocirange");
    push_chart(reg, &name, "info", "0.1.0");
    let agent = Agent::start_with(
        &name,
        &["--plain-http-registry", &reg.host, "--requeue-seconds", "1"],
    );
    let url = format!("oci://{}/{name}", reg.host);
    apply_bd(
        &client,
        &name,
        json!({
            "installNamespace": name,
            "format": "helm",
            "sources": [{
                "kind": "helmRepository",
                "helmRepository": {"url": url, "chart": "info", "version": ">=0.1.0 <1"},
                "pollInterval": "1s",
            }],
        }),
    )
    .await;
    let bd = wait_ready(&client, &agent, &name, 1).await;
    assert_eq!(resolved_version(&bd).as_deref(), Some("0.1.0"));
    assert_eq!(
        config_map_version(&client, &name, &name).await.as_deref(),
        Some("0.1.0")
    );

    // A newer matching version is picked up at the next poll.
    push_chart(reg, &name, "info", "0.2.0");
    let bd = wait_ready(&client, &agent, &name, 2).await;
    assert_eq!(resolved_version(&bd).as_deref(), Some("0.2.0"));
    assert_eq!(
        config_map_version(&client, &name, &name).await.as_deref(),
        Some("0.2.0")
    );

    // 1.0.0 is outside the range: after several more polls, still 0.2.0 at revision 2.
    push_chart(reg, &name, "info", "1.0.0");
    let seen = helm_repository_fetches(&agent).await;
    cluster::poll_until(
        "three more helmRepository fetches",
        Duration::from_secs(60),
        || async {
            let now = helm_repository_fetches(&agent).await;
            if now >= seen + 3 {
                Ok(())
            } else {
                Err(format!("{now} fetches, from {seen}"))
            }
        },
    )
    .await;
    let bd = Api::<BundleDeployment>::all(client.clone())
        .get(&name)
        .await
        .unwrap();
    let status = bd.status.clone().unwrap_or_default();
    assert_eq!(status.active_revision, Some(2));
    assert_eq!(resolved_version(&bd).as_deref(), Some("0.2.0"));
    assert_eq!(
        config_map_version(&client, &name, &name).await.as_deref(),
        Some("0.2.0")
    );

    // A range that matches nothing: a condition naming it and the tags seen; the installed
    // objects stay as they are.
    apply_bd(
        &client,
        &name,
        json!({
            "installNamespace": name,
            "format": "helm",
            "sources": [{
                "kind": "helmRepository",
                "helmRepository": {"url": url, "chart": "info", "version": ">=5"},
                "pollInterval": "1s",
            }],
        }),
    )
    .await;
    // The sources say why; the active revision stays applied (and Ready) meanwhile.
    let bd = agent::wait_condition(&client, &agent, &name, "Unpacked", "False", "\">=5\"").await;
    let unpacked = bd
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Unpacked"))
        .unwrap();
    assert_eq!(unpacked.reason, "NoMatchingVersion", "{}", unpacked.message);
    assert!(unpacked.message.contains("1.0.0"), "{}", unpacked.message);
    assert_eq!(bd.status.unwrap().active_revision, Some(2));
    assert_eq!(
        config_map_version(&client, &name, &name).await.as_deref(),
        Some("0.2.0")
    );
    clean_up(&client, &name).await;
}

/// A Flux-style artifact (pushed by `pallet push` with Flux's media types) and an ORAS artifact
/// (pushed by the real `oras` CLI) each install as a plain bundle.
#[tokio::test]
async fn flux_and_oras_artifacts_install_as_plain_bundles() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let reg = fx.registry_plain();
    let name = support::unique_name("artifacts");
    let config_map = |cm: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {cm}\ndata:\n  from: {cm}\n")
    };
    let run = |command: &mut Command| {
        let out = command.output().expect("the client runs");
        assert!(
            out.status.success(),
            "{command:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };

    let flux_dir = tempfile::tempdir().unwrap();
    std::fs::write(flux_dir.path().join("cm.yaml"), config_map("flux")).unwrap();
    let flux_ref = format!("{}/{name}-flux:v1", reg.host);
    run(Command::new(env!("CARGO_BIN_EXE_pallet"))
        .arg("push")
        .arg(flux_dir.path())
        .args([&flux_ref, "--plain-http"])
        .args([
            "--media-type",
            "application/vnd.cncf.flux.content.v1.tar+gzip",
        ])
        .args([
            "--config-media-type",
            "application/vnd.cncf.flux.config.v1+json",
        ]));

    // ORAS: the directory's content pushed from inside it, so it lands at the root.
    let oras_dir = tempfile::tempdir().unwrap();
    std::fs::write(oras_dir.path().join("cm.yaml"), config_map("oras")).unwrap();
    let oras = PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/pallet/bin/oras");
    assert!(oras.is_file(), "oras is built by tools/oras.sh");
    let oras_ref = format!("{}/{name}-oras:v1", reg.host);
    run(Command::new(oras).current_dir(oras_dir.path()).args([
        "push",
        "--plain-http",
        &oras_ref,
        ".",
    ]));

    let agent = Agent::start_with(&name, &["--plain-http-registry", &reg.host]);
    for (bd, reference) in [("flux", &flux_ref), ("oras", &oras_ref)] {
        agent::apply_bd_labelled(
            &client,
            &format!("{name}-{bd}"),
            &name,
            json!({
                "installNamespace": name,
                "format": "plain",
                "sources": [{"kind": "image", "image": {"ref": reference}}],
            }),
        )
        .await;
    }
    for bd in ["flux", "oras"] {
        agent::wait_condition(
            &client,
            &agent,
            &format!("{name}-{bd}"),
            "Ready",
            "True",
            "1 objects",
        )
        .await;
        let cm = Api::<ConfigMap>::namespaced(client.clone(), &name)
            .get(bd)
            .await
            .unwrap();
        assert_eq!(
            cm.data.unwrap_or_default().get("from").map(String::as_str),
            Some(bd)
        );
    }
    for bd in ["flux", "oras"] {
        Api::<BundleDeployment>::all(client.clone())
            .delete(&format!("{name}-{bd}"), &DeleteParams::default())
            .await
            .expect("delete bd");
        agent::wait_bd_gone(&client, &format!("{name}-{bd}")).await;
    }
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await;
}
