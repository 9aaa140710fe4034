//! End-to-end reliability under bad sources: a source that hangs or drips
//! holds no reconcile worker and hits the fetch deadline with a condition that says so; a source
//! outage never stops the agent enforcing the active revision from its snapshot.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/scratch_registry.rs"]
mod scratch_registry;
mod support;

use std::time::{Duration, Instant};

use agent::{wait_condition, wait_value, Agent};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use pallet::api::conditions::find;
use pallet::api::BundleDeployment;
use scratch_registry::ScratchRegistry;
use serde_json::{json, Value};

fn config_maps(values: &[(&str, &str)]) -> String {
    values
        .iter()
        .map(|(name, value)| {
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n")
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

async fn condition(client: &Client, name: &str, type_: &str) -> Option<(String, String, String)> {
    let bd = Api::<BundleDeployment>::all(client.clone())
        .get(name)
        .await
        .ok()?;
    let conditions = bd.status.map(|s| s.conditions).unwrap_or_default();
    find(&conditions, type_).map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn delete_bd_and_namespace(client: &Client, name: &str) {
    let _ = Api::<BundleDeployment>::all(client.clone())
        .delete(name, &Default::default())
        .await;
    agent::wait_bd_gone(client, name).await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &Default::default())
        .await;
}

/// Four BundleDeployments whose sources hang (an http URL, an image and a git repository on a
/// server that never answers, and one that drips its body) with two reconcile workers: an
/// unrelated BundleDeployment still becomes Ready at once, the hung ones say what they wait for,
/// then fail at the fetch deadline, and deleting one does not wait for its fetch.
#[tokio::test]
async fn hanging_sources_hold_no_worker_say_what_they_wait_for_and_hit_the_deadline() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let test = support::unique_name("hang");
    let hang = fx.hang();
    let drip = fx.drip();
    let agent = Agent::start_with(
        &test,
        &[
            "--concurrency",
            "2",
            "--fetch-timeout",
            "20s",
            "--plain-http-registry",
            &hang.host,
        ],
    );
    let hung = [
        (
            format!("{test}-http"),
            json!({"kind": "http", "http": {"url": format!("{}/bundle.yaml", hang.url)}}),
        ),
        (
            format!("{test}-image"),
            json!({"kind": "image", "image": {"ref": format!("{}/bundle:v1", hang.host)}}),
        ),
        (
            format!("{test}-git"),
            json!({"kind": "git", "git": {"repository": format!("{}/repo.git", hang.url), "ref": {"branch": "main"}}}),
        ),
        (
            format!("{test}-drip"),
            json!({"kind": "http", "http": {"url": format!("{}/bundle.yaml", drip.url)}}),
        ),
    ];
    let started = Instant::now();
    for (name, source) in &hung {
        let spec = json!({"installNamespace": test, "sources": [source], "format": "plain"});
        agent::apply_bd_labelled(&client, name, &test, spec).await;
    }
    // The unrelated one, created after them.
    let repo = fx.git_repo(&test);
    repo.commit_files(
        "main",
        &[("app.yaml", config_maps(&[("app", "1")]).as_bytes())],
        "v1",
    );
    let ok = format!("{test}-ok");
    let spec = json!({
        "installNamespace": test,
        "sources": [{"kind": "git", "git": {"repository": repo.url(fx.git_plain()), "ref": {"branch": "main"}}}],
        "format": "plain",
    });
    agent::apply_bd_labelled(&client, &ok, &test, spec).await;
    wait_condition(&client, &agent, &ok, "Ready", "True", "1 objects").await;
    let ready_after = started.elapsed();
    assert!(
        ready_after < Duration::from_secs(20),
        "the unrelated BundleDeployment waited {ready_after:?}, as long as the hung fetches"
    );

    // Each hung one says what it waits for, and since when.
    for (name, _) in &hung {
        let (status, reason, message) = cluster::poll_until(
            &format!("{name} to report its fetch"),
            Duration::from_secs(30),
            || async {
                match condition(&client, name, "Unpacked").await {
                    Some(c) if c.1 == "Fetching" || c.1 == "Unreachable" => Ok(c),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
        assert_eq!(status, "False", "{name}: {message}");
        if reason == "Fetching" {
            // The time it began, which stays true however long the status shows it.
            assert!(
                message.starts_with("fetching ") && message.contains(" since 20"),
                "{message}"
            );
        }
    }

    // Deleting a hung one is not held up by its fetch.
    let (first, _) = &hung[0];
    let delete_started = Instant::now();
    Api::<BundleDeployment>::all(client.clone())
        .delete(first, &Default::default())
        .await
        .unwrap();
    agent::wait_bd_gone(&client, first).await;
    assert!(
        delete_started.elapsed() < Duration::from_secs(15),
        "deleting a BundleDeployment with a hung fetch took {:?}",
        delete_started.elapsed()
    );

    // At the deadline, each remaining one fails as unreachable, naming the server.
    for (name, source) in &hung[1..] {
        let host = if source.to_string().contains(&drip.host) {
            &drip.host
        } else {
            &hang.host
        };
        let message = cluster::poll_until(
            &format!("{name} to hit the fetch deadline"),
            Duration::from_secs(60),
            || async {
                match condition(&client, name, "Unpacked").await {
                    Some((_, reason, message)) if reason == "Unreachable" => Ok(message),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
        assert!(message.contains(host.as_str()), "{name}: {message}");
    }
    for (name, _) in &hung[1..] {
        let _ = Api::<BundleDeployment>::all(client.clone())
            .delete(name, &Default::default())
            .await;
    }
    delete_bd_and_namespace(&client, &ok).await;
}

/// A pinned, healthy BundleDeployment stays Ready through a registry outage combined with an
/// agent restart on an empty cache: the agent keeps applying the active revision from its stored
/// snapshot (a deleted object comes back, a hand edit is reverted) and reports the outage in
/// Unpacked only. When the registry is back, Unpacked recovers.
#[tokio::test]
async fn a_registry_outage_and_a_restart_keep_the_active_revision_enforced() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let test = support::unique_name("outage");
    let mut registry = ScratchRegistry::start();
    let bundle = tempfile::tempdir().unwrap();
    std::fs::write(
        bundle.path().join("cms.yaml"),
        config_maps(&[("one", "1"), ("two", "2"), ("three", "3")]),
    )
    .unwrap();
    let options = pallet::push::PushOptions {
        plain_http: true,
        ca_pem: None,
        basic_auth: None,
        ..Default::default()
    };
    let digest = pallet::push::push_dir(
        &format!("{}/outage:v1", registry.host),
        bundle.path(),
        &options,
    )
    .await
    .unwrap();
    let host = registry.host.clone();
    let args = ["--plain-http-registry", host.as_str()];
    let agent = Agent::start_with(&test, &args);
    let spec = json!({
        "installNamespace": test,
        "sources": [{"kind": "image", "image": {"ref": format!("{}/outage@{digest}", registry.host)}}],
        "format": "plain",
    });
    agent::apply_bd(&client, &test, spec).await;
    wait_condition(&client, &agent, &test, "Ready", "True", "3 objects").await;

    // Outage, and a restart on an empty cache: the content cannot be fetched at all now.
    registry.stop();
    drop(agent);
    let agent = Agent::start_with(&test, &args);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);
    cms.delete("two", &Default::default()).await.unwrap();
    cms.patch(
        "three",
        &PatchParams::default(),
        &Patch::Merge(&json!({"data": {"value": "edited"}})),
    )
    .await
    .unwrap();
    wait_value(&cms, "two", "2").await;
    wait_value(&cms, "three", "3").await;
    let (status, reason, message) = cluster::poll_until(
        "Unpacked to report the outage",
        Duration::from_secs(60),
        || async {
            match condition(&client, &test, "Unpacked").await {
                Some(c) if c.0 == "False" => Ok(c),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "Unreachable"),
        "{message}"
    );
    assert!(message.contains("snapshot"), "{message}");
    let ready = condition(&client, &test, "Ready").await.unwrap();
    assert_eq!(ready.0, "True", "Ready through the outage: {ready:?}");
    let healthy = condition(&client, &test, "Healthy").await.unwrap();
    assert!(healthy.2.contains("all 3 objects healthy"), "{healthy:?}");
    // Still one revision: enforcing the snapshot makes none.
    let bd = Api::<BundleDeployment>::all(client.clone())
        .get(&test)
        .await
        .unwrap();
    let revisions: Vec<Value> = bd
        .status
        .unwrap()
        .revisions
        .iter()
        .map(|r| json!(r.number))
        .collect();
    assert_eq!(revisions, vec![json!(1)]);

    registry.resume();
    wait_condition(&client, &agent, &test, "Unpacked", "True", "all sources").await;
    delete_bd_and_namespace(&client, &test).await;
}

/// `value` lines of pseudo-random base64 (it does not compress), `bytes` long.
fn incompressible(seed: &str, bytes: usize) -> String {
    use base64::Engine;
    use sha2::{Digest, Sha256};
    let mut raw = Vec::with_capacity(bytes);
    let mut block = Sha256::digest(seed.as_bytes());
    while raw.len() * 4 / 3 < bytes {
        raw.extend_from_slice(&block);
        block = Sha256::digest(block);
    }
    let mut text = base64::engine::general_purpose::STANDARD.encode(raw);
    text.truncate(bytes);
    text
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("metric {name} not found"))
}

async fn revision_secrets(client: &Client, name: &str) -> usize {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), "pallet-system");
    let selector = format!("pallet.dev/revision-of={name}");
    secrets
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
        .len()
}

/// An object over the API server's size limit, and a revision over the agent's snapshot cap, are
/// refused before anything is stored or applied; the active revision keeps running; and the
/// refused content is not rendered again at every requeue.
#[tokio::test]
async fn oversized_content_is_refused_before_it_is_stored_and_not_rendered_again() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let test = support::unique_name("oversize");
    let repo = fx.git_repo(&test);
    repo.commit_files(
        "main",
        &[("app.yaml", config_maps(&[("app", "1")]).as_bytes())],
        "v1",
    );
    let agent = Agent::start_with(&test, &["--max-revision-mib", "1"]);
    let spec = json!({
        "installNamespace": test,
        "sources": [{"kind": "git", "git": {"repository": repo.url(fx.git_plain()), "ref": {"branch": "main"}}}],
        "format": "plain",
    });
    agent::apply_bd(&client, &test, spec).await;
    wait_condition(&client, &agent, &test, "Ready", "True", "1 objects").await;
    let stored = revision_secrets(&client, &test).await;

    // One object of 2 MB: over etcd's 1.5 MiB.
    let big = config_maps(&[("app", "1"), ("big", &incompressible("big", 2 << 20))]);
    repo.commit_files("main", &[("app.yaml", big.as_bytes())], "too big");
    let bd = wait_condition(&client, &agent, &test, "Installed", "False", "ConfigMap").await;
    let installed = find(&bd.status.as_ref().unwrap().conditions, "Installed").unwrap();
    assert_eq!(installed.reason, "ObjectTooLarge", "{}", installed.message);
    assert!(
        installed.message.contains(&format!("{test}/big")),
        "{}",
        installed.message
    );
    assert_eq!(
        revision_secrets(&client, &test).await,
        stored,
        "nothing stored"
    );
    assert_eq!(bd.status.as_ref().unwrap().revisions.len(), 1);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);
    assert!(cms.get_opt("big").await.unwrap().is_none());
    wait_value(&cms, "app", "1").await;

    // Requeues (every 2 s here) find the same inputs: no render again.
    let before = agent.metrics().await;
    let renders = metric(&before, "pallet_renders_total");
    let reconciles = metric(&before, "pallet_reconciles_total{result=\"error\"}");
    cluster::poll_until("three more reconciles", Duration::from_secs(60), || async {
        let now = metric(
            &agent.metrics().await,
            "pallet_reconciles_total{result=\"error\"}",
        );
        if now >= reconciles + 3.0 {
            Ok(())
        } else {
            Err(format!("{now} error reconciles"))
        }
    })
    .await;
    assert_eq!(
        metric(&agent.metrics().await, "pallet_renders_total"),
        renders,
        "unchanged content was rendered again"
    );

    // Three objects of 0.9 MB each: each fits, the revision (2.7 MB, incompressible) is over
    // the 1 MiB cap this agent was given.
    let parts: Vec<(String, String)> = (0..3)
        .map(|i| {
            (
                format!("part{i}"),
                incompressible(&format!("p{i}"), 900 << 10),
            )
        })
        .collect();
    let items: Vec<(&str, &str)> = parts
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    repo.commit_files(
        "main",
        &[("app.yaml", config_maps(&items).as_bytes())],
        "big revision",
    );
    let bd = wait_condition(
        &client,
        &agent,
        &test,
        "Installed",
        "False",
        "--max-revision-mib",
    )
    .await;
    let installed = find(&bd.status.as_ref().unwrap().conditions, "Installed").unwrap();
    assert_eq!(
        installed.reason, "RevisionTooLarge",
        "{}",
        installed.message
    );
    assert_eq!(
        revision_secrets(&client, &test).await,
        stored,
        "nothing stored"
    );
    wait_value(&cms, "app", "1").await;
    assert!(cms.get_opt("part0").await.unwrap().is_none());
    delete_bd_and_namespace(&client, &test).await;
}
