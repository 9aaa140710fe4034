//! End-to-end: the agent installs a chart from a Helm chart repository served by the fixture file
//! server, its `index.yaml` made by the real `helm repo index` (charts by the real `helm package`):
//! a range follows newly published matching versions and ignores others; bad sources show as
//! conditions while the installed objects stay; a pinned version costs no request once cached.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/chart_repo.rs"]
mod chart_repo;
#[path = "support/cli.rs"]
mod cli;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::time::Duration;

use agent::{apply_bd, wait_condition, Agent};
use chart_repo::{file_sha256, ChartRepo, DEMO_CHART};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use pallet::api::BundleDeployment;
use serde_json::{json, Value};
use support::Fixtures;

async fn create_namespace(client: &Client, name: &str) {
    Api::<Namespace>::all(client.clone())
        .patch(
            name,
            &PatchParams::apply(cluster::TEST_FIELD_MANAGER),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
            ),
        )
        .await
        .expect("namespace");
}

/// A helm BundleDeployment spec of one helmRepository source; floating ones (no `digest`) are
/// re-resolved every second.
fn spec(name: &str, repository: Value) -> Value {
    let mut source = json!({"kind": "helmRepository", "helmRepository": repository});
    if source["helmRepository"].get("digest").is_none() {
        source["pollInterval"] = json!("1s");
    }
    json!({
        "installNamespace": name,
        "format": "helm",
        "sources": [source],
        "config": {"helm": {"releaseName": name}},
    })
}

/// The `chartVersion` of the demo chart's ConfigMap, if it exists.
async fn installed_version(client: &Client, name: &str) -> Option<String> {
    Api::<ConfigMap>::namespaced(client.clone(), name)
        .get_opt(&format!("{name}-demo"))
        .await
        .expect("get configmap")
        .and_then(|cm| cm.data?.get("chartVersion").cloned())
}

/// Waits until the BundleDeployment is Ready with the demo chart at `version` installed and its
/// active revision recording that version; returns the active revision number.
async fn wait_installed(client: &Client, agent: &Agent, name: &str, version: &str) -> i64 {
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    cluster::poll_until(
        &format!("{name} Ready with chart version {version}"),
        Duration::from_secs(90),
        || {
            let (bds, client) = (bds.clone(), client.clone());
            async move {
                let bd = bds.get(name).await.map_err(|e| e.to_string())?;
                let status = bd.status.clone().unwrap_or_default();
                let ready = status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                let active = status.active_revision;
                let recorded = status
                    .revisions
                    .iter()
                    .find(|r| Some(r.number) == active)
                    .and_then(|r| r.sources.first())
                    .and_then(|s| s.version.clone());
                let installed = installed_version(&client, name).await;
                match (ready, active, recorded.as_deref(), installed.as_deref()) {
                    (true, Some(n), Some(v), Some(i)) if v == version && i == version => Ok(n),
                    _ => Err(format!(
                        "ready {ready}, revision {active:?} of version {recorded:?}, installed \
                         {installed:?}; conditions {:?}\nagent log:\n{}",
                        status.conditions,
                        agent.log_tail()
                    )),
                }
            }
        },
    )
    .await
}

/// Requests the file server `server` received under the repository for its index.
async fn index_requests(fx: &Fixtures, server: &str, repo: &ChartRepo) -> Vec<u16> {
    fx.requests(&[
        ("server", server),
        ("prefix", &repo.file_path("index.yaml")),
    ])
    .await
    .into_iter()
    .map(|r| r.status)
    .collect()
}

/// Waits until the agent has read the index `count` more times than `before` requests.
async fn wait_index_reads(fx: &Fixtures, repo: &ChartRepo, before: usize, count: usize) {
    cluster::poll_until(
        &format!("{count} more index reads"),
        Duration::from_secs(60),
        || async {
            let seen = index_requests(fx, &fx.http_plain().name, repo).await;
            if seen.len() >= before + count {
                Ok(seen)
            } else {
                Err(format!("{} index reads so far", seen.len()))
            }
        },
    )
    .await;
}

#[tokio::test]
async fn a_range_follows_new_matching_versions_and_bad_sources_leave_the_install_alone() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = Fixtures::load();
    let name = support::unique_name("chartrepo-e2e");
    create_namespace(&client, &name).await;
    let repo = ChartRepo::new(fx, "chartrepo-e2e");
    repo.publish(&["0.1.0"]);
    let url = repo.url(fx.http_plain());
    let agent = Agent::start(&name);
    let range = json!({"url": url, "chart": DEMO_CHART, "version": "0.x"});
    apply_bd(&client, &name, spec(&name, range.clone())).await;
    let first = wait_installed(&client, &agent, &name, "0.1.0").await;

    // A newer matching version is published: the bundle upgrades to it.
    repo.publish(&["0.2.0"]);
    let second = wait_installed(&client, &agent, &name, "0.2.0").await;
    assert!(second > first);

    // A version outside the range is published: the index is read again (200, it changed, then
    // 304s), and nothing changes.
    let before = index_requests(fx, &fx.http_plain().name, &repo).await.len();
    repo.publish(&["1.0.0"]);
    wait_index_reads(fx, &repo, before, 3).await;
    assert!(
        index_requests(fx, &fx.http_plain().name, &repo).await[before..].contains(&200),
        "the changed index was read"
    );
    assert_eq!(
        wait_installed(&client, &agent, &name, "0.2.0").await,
        second
    );

    // A repository whose 0.2.0 archive was replaced after indexing (by the 0.1.0 one).
    let tampered = ChartRepo::new(fx, "chartrepo-e2e-tampered");
    tampered.publish(&["0.1.0", "0.2.0"]);
    std::fs::copy(
        tampered.dir.join(format!("{DEMO_CHART}-0.1.0.tgz")),
        tampered.dir.join(format!("{DEMO_CHART}-0.2.0.tgz")),
    )
    .expect("tamper");
    let broken_index = ChartRepo::new(fx, "chartrepo-e2e-badindex");
    std::fs::write(
        broken_index.dir.join("index.yaml"),
        "apiVersion: v1\nentries: [\n",
    )
    .expect("write index");

    let tampered_chart = tampered.file_path(&format!("{DEMO_CHART}-0.2.0.tgz"));
    let zeros = "0".repeat(64);

    // Broken sources: each a condition naming the problem (each message distinct, so that a
    // wait never matches the previous case's condition); the installed objects stay.
    let cases = [
        (
            json!({"url": tampered.url(fx.http_plain()), "chart": DEMO_CHART, "version": "0.x"}),
            "DigestMismatch",
            tampered_chart.as_str(),
        ),
        (
            json!({"url": broken_index.url(fx.http_plain()), "chart": DEMO_CHART}),
            "InvalidSource",
            "is not a chart repository index",
        ),
        (
            json!({"url": url, "chart": DEMO_CHART, "version": "5.x"}),
            "NoMatchingVersion",
            "\"5.x\"",
        ),
        (
            json!({"url": url, "chart": "no-such-chart", "version": "0.x"}),
            "NotFound",
            "chart no-such-chart in the index",
        ),
        (
            json!({"url": url, "chart": DEMO_CHART, "version": "0.2.0",
                   "digest": format!("sha256:{zeros}")}),
            "DigestMismatch",
            zeros.as_str(),
        ),
        (
            json!({"url": repo.url(fx.http_basic()), "chart": DEMO_CHART, "version": "0.x"}),
            "Unauthorized",
            "no credentials",
        ),
    ];
    for (repository, reason, message) in cases {
        apply_bd(&client, &name, spec(&name, repository)).await;
        let bd = wait_condition(&client, &agent, &name, "Unpacked", "False", message).await;
        let status = bd.status.unwrap_or_default();
        let unpacked = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Unpacked")
            .expect("Unpacked condition");
        assert_eq!(unpacked.reason, reason, "{unpacked:?}");
        assert_eq!(status.active_revision, Some(second));
        assert_eq!(
            installed_version(&client, &name).await.as_deref(),
            Some("0.2.0")
        );
    }

    // Back to the range: Ready again on the same revision.
    apply_bd(&client, &name, spec(&name, range)).await;
    assert_eq!(
        wait_installed(&client, &agent, &name, "0.2.0").await,
        second
    );
}

#[tokio::test]
async fn plan_pin_writes_version_and_digest_and_the_pinned_chart_makes_no_requests() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = Fixtures::load();
    let name = support::unique_name("chartrepo-pin");
    create_namespace(&client, &name).await;
    let repo = ChartRepo::new(fx, "chartrepo-pin-e2e");
    repo.publish(&["0.1.0", "0.2.0", "1.0.0"]);

    // `pallet plan --pin` turns the range into the exact version and digest it resolved to.
    let work = tempfile::tempdir().expect("tempdir");
    let manifest = work.path().join("bd.yaml");
    let floating = json!({
        "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
        "metadata": {"name": name, "labels": {agent::TEST_LABEL: name}},
        "spec": {
            "installNamespace": name, "format": "helm",
            "sources": [{"kind": "helmRepository", "pollInterval": "1s",
                         "helmRepository": {"url": repo.url(fx.http_plain()), "chart": DEMO_CHART,
                                            "version": "0.x"}}],
        },
    });
    std::fs::write(&manifest, serde_json::to_string(&floating).unwrap()).unwrap();
    let out = cli::pallet(&[
        "plan",
        "-f",
        manifest.to_str().unwrap(),
        "--pin",
        "--allow-loopback-egress",
        "--cache-dir",
        work.path().join("cache").to_str().unwrap(),
    ]);
    let review = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{review}");
    let digest = format!(
        "sha256:{}",
        file_sha256(&repo.dir.join(format!("{DEMO_CHART}-0.2.0.tgz")))
    );
    assert!(
        review.contains(&format!("-> {digest} (version 0.2.0)")),
        "{review}"
    );
    let pinned: Value = serde_saphyr::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap();
    let source = &pinned["spec"]["sources"][0];
    assert_eq!(source["helmRepository"]["version"], "0.2.0");
    assert_eq!(source["helmRepository"]["digest"], json!(digest));
    assert!(source.get("pollInterval").is_none(), "{source}");

    // The pinned manifest, applied: installed, then no request in steady state.
    let agent = Agent::start(&name);
    apply_bd(&client, &name, pinned["spec"].clone()).await;
    wait_installed(&client, &agent, &name, "0.2.0").await;
    let requests = || async {
        fx.stats(&[("server", &fx.http_plain().name), ("prefix", &repo.path)])
            .await
            .total
    };
    let after_install = requests().await;
    // Several reconciles (the agent requeues every 2 s), counted by its fetch metric.
    let fetches = || async {
        agent
            .metrics()
            .await
            .lines()
            .find(|l| {
                l.starts_with("pallet_fetches_total{")
                    && l.contains("kind=\"helmRepository\"")
                    && l.contains("result=\"success\"")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let start = fetches().await;
    cluster::poll_until("three more reconciles", Duration::from_secs(60), || async {
        let now = fetches().await;
        if now >= start + 3.0 {
            Ok(())
        } else {
            Err(format!("{now} fetches"))
        }
    })
    .await;
    assert_eq!(
        requests().await,
        after_install,
        "a pinned, cached chart version must not touch the repository"
    );
    assert_eq!(
        installed_version(&client, &name).await.as_deref(),
        Some("0.2.0")
    );
}
