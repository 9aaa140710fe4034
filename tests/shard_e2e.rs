//! End-to-end: BundleDeployments sharded across two agents by `sharding.fluxcd.io/key`
//! (`pallet agent --shard KEY`). Each agent reconciles, writes and logs only its own shard's
//! BundleDeployments, and one moved between shards by relabelling is handed over without a
//! write to its objects.
//!
//! The BundleDeployments carry `pallet.dev/test=<test>` (so the demo agent and other tests'
//! agents never see them) and shard keys unique to the test.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use agent::{Agent, TEST_LABEL};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use pallet::api::conditions::find;
use pallet::api::BundleDeployment;
use pallet::reconcile::scope::patch_status;
use pallet::reconcile::{Context, ReconcileError};
use pallet::shard::SHARD_LABEL;
use serde_json::json;

const APPS: usize = 20;

fn config_map(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
    )
}

/// Creates BundleDeployment `name` in shard `key`, installing directory `app` of the repo.
async fn create_bd(client: &Client, test: &str, name: &str, key: &str, url: &str, app: &str) {
    cluster::track_bundle_deployment(name);
    let bd = json!({
        "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
        "metadata": {"name": name, "labels": {TEST_LABEL: test, SHARD_LABEL: key}},
        "spec": {
            "installNamespace": test,
            "sources": [{"kind": "git", "git": {"repository": url, "ref": {"branch": "main"}, "directory": app}}],
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

/// Moves BundleDeployment `name` to shard `key` (only its label changes).
async fn relabel(client: &Client, name: &str, key: &str) {
    Api::<BundleDeployment>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {SHARD_LABEL: key}}})),
        )
        .await
        .unwrap();
}

/// Waits until every BundleDeployment in `expected` (name -> shard key) is Ready with
/// `status.agent` naming an agent of its shard (`…@KEY`); returns them by name.
async fn wait_ready_in_shards(
    client: &Client,
    test: &str,
    expected: &BTreeMap<String, String>,
) -> BTreeMap<String, BundleDeployment> {
    let api: Api<BundleDeployment> = Api::all(client.clone());
    let selector = format!("{TEST_LABEL}={test}");
    cluster::poll_until(
        "every BundleDeployment Ready, written by its shard's agent",
        Duration::from_secs(180),
        || {
            let (api, selector) = (api.clone(), selector.clone());
            async move {
                let list = api
                    .list(&ListParams::default().labels(&selector))
                    .await
                    .map_err(|e| e.to_string())?;
                let mut waiting = Vec::new();
                let mut seen = BTreeMap::new();
                for bd in list.items {
                    let name = bd.name_any();
                    let Some(key) = expected.get(&name) else {
                        continue;
                    };
                    let status = bd.status.clone().unwrap_or_default();
                    let ready =
                        find(&status.conditions, "Ready").is_some_and(|c| c.status == "True");
                    let by_shard = status
                        .agent
                        .as_deref()
                        .is_some_and(|a| a.ends_with(&format!("@{key}")));
                    if !(ready && by_shard) {
                        waiting.push(format!("{name}: ready {ready}, agent {:?}", status.agent));
                    }
                    seen.insert(name, bd);
                }
                if seen.len() != expected.len() {
                    return Err(format!("{} of {} listed", seen.len(), expected.len()));
                }
                if waiting.is_empty() {
                    Ok(seen)
                } else {
                    Err(waiting.join("; "))
                }
            }
        },
    )
    .await
}

/// The field managers of `bd`'s status subresource.
fn status_managers(bd: &BundleDeployment) -> BTreeSet<String> {
    bd.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref() == Some("status"))
        .filter_map(|m| m.manager.clone())
        .collect()
}

/// The BundleDeployments named in an agent's change log.
fn logged_bundles(agent: &Agent) -> Vec<String> {
    agent
        .change_entries()
        .iter()
        .filter(|e| e.get("marker").is_none())
        .map(|e| e["bundleDeployment"].as_str().unwrap().to_string())
        .collect()
}

/// Lines of an agent's log that name BundleDeployment `name` (as the `bundle_deployment` field).
fn log_lines_about(agent: &Agent, name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(&agent.log).unwrap_or_default();
    let field = format!("bundle_deployment={name}");
    // Names end in two digits, so no name is a prefix of another.
    text.lines()
        .filter(|l| l.contains(&field))
        .map(String::from)
        .collect()
}

/// How many passes over `name` the agent has finished, by its log.
fn passes(agent: &Agent, name: &str) -> usize {
    log_lines_about(agent, name)
        .iter()
        .filter(|l| l.contains(" reconciled"))
        .count()
}

#[tokio::test]
async fn two_shards_split_the_bundles_and_hand_one_over_by_relabelling() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("shards");
    let (key_a, key_b) = (format!("{test}-a"), format!("{test}-b"));
    let repo = fixtures.git_repo(&test);
    let files: Vec<(String, String)> = (0..APPS)
        .map(|i| {
            let app = format!("app-{i:02}");
            (format!("{app}/cm.yaml"), config_map(&app, "1"))
        })
        .collect();
    let files: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(path, body)| (path.as_str(), body.as_bytes()))
        .collect();
    repo.commit_files("main", &files, "twenty apps");
    let url = repo.url(fixtures.git_plain());

    let selector = format!("{TEST_LABEL}={test}");
    // With leader election: were the shards to share a Lease, one would wait for ever.
    let agent_a = Agent::start_selecting(&selector, &key_a, &["--shard", &key_a, "--leader-elect"]);
    let agent_b = Agent::start_selecting(&selector, &key_b, &["--shard", &key_b, "--leader-elect"]);
    // Even apps in shard a, odd ones in shard b.
    let mut shard_of = BTreeMap::new();
    for i in 0..APPS {
        let name = format!("{test}-{i:02}");
        let key = if i % 2 == 0 { &key_a } else { &key_b };
        create_bd(&client, &test, &name, key, &url, &format!("app-{i:02}")).await;
        shard_of.insert(name, key.clone());
    }
    let bds = wait_ready_in_shards(&client, &test, &shard_of).await;
    let in_shard = |key: &str| -> BTreeSet<String> {
        shard_of
            .iter()
            .filter(|(_, k)| *k == key)
            .map(|(n, _)| n.clone())
            .collect()
    };
    let (of_a, of_b) = (in_shard(&key_a), in_shard(&key_b));

    // Each shard leads on a Lease of its own (in the agents' namespace), named after the shard.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "pallet-system");
    for key in [&key_a, &key_b] {
        let lease = leases
            .get(&format!("pallet-agent-shard-{key}"))
            .await
            .unwrap();
        let holder = lease.spec.unwrap().holder_identity.unwrap_or_default();
        assert!(
            holder.ends_with(&format!("@{key}")),
            "{key}: held by {holder:?}"
        );
    }

    // Each status was written by its own shard only (managedFields keep every writer).
    for (name, bd) in &bds {
        let own = format!("pallet-shard-{}", shard_of[name]);
        let managers = status_managers(bd);
        assert_eq!(
            managers,
            BTreeSet::from([own]),
            "{name}: status written by {managers:?}"
        );
    }
    // Each change log holds its own shard's writes (every app's ConfigMap created), no other.
    for (agent, own) in [(&agent_a, &of_a), (&agent_b, &of_b)] {
        let logged: BTreeSet<String> = logged_bundles(agent).into_iter().collect();
        assert_eq!(&logged, own, "change log of {}", agent.log.display());
    }
    // Neither agent's log names a BundleDeployment of the other shard: the owned-object
    // watches see every shard's objects, and their events never reach a worker.
    for (agent, other) in [(&agent_a, &of_b), (&agent_b, &of_a)] {
        for name in other {
            let lines = log_lines_about(agent, name);
            assert!(
                lines.is_empty(),
                "{} acted on {name} of the other shard:\n{}",
                agent.log.display(),
                lines.join("\n")
            );
        }
    }

    // Handover: move app 00 from shard a to shard b by its label alone.
    let moved = format!("{test}-00");
    let object = "app-00";
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);
    let version_before = cms.get(object).await.unwrap().metadata.resource_version;
    let logged_by_a = logged_bundles(&agent_a).len();
    let logged_by_b = logged_bundles(&agent_b).len();
    relabel(&client, &moved, &key_b).await;
    shard_of.insert(moved.clone(), key_b.clone());
    let after = wait_ready_in_shards(&client, &test, &shard_of).await;
    assert!(status_managers(&after[&moved]).contains(&format!("pallet-shard-{key_b}")));
    assert_eq!(
        cms.get(object).await.unwrap().metadata.resource_version,
        version_before,
        "taking over wrote the bundle's object"
    );
    assert_eq!(
        logged_bundles(&agent_b).len(),
        logged_by_b,
        "b wrote on takeover"
    );
    // a dropped it as it left a's watch.
    cluster::poll_until(
        "a to drop the moved BundleDeployment",
        Duration::from_secs(30),
        || async {
            log_lines_about(&agent_a, &moved)
                .iter()
                .any(|l| l.contains("left this agent's watch"))
                .then_some(())
                .ok_or_else(|| agent_a.log_tail())
        },
    )
    .await;
    let a_passes = passes(&agent_a, &moved);

    // Only b acts on it now: an out-of-band edit of its object is corrected by b, though a's
    // watch on ConfigMaps sees the edit too; a few of b's requeues (2 s) later a has not
    // touched it.
    cms.patch(
        object,
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"value": "edited"}})),
    )
    .await
    .unwrap();
    agent::wait_value(&cms, object, "1").await;
    let b_passes = passes(&agent_b, &moved);
    cluster::poll_until(
        "three more passes of b over the moved BundleDeployment",
        Duration::from_secs(60),
        || async {
            let n = passes(&agent_b, &moved);
            (n >= b_passes + 3)
                .then_some(())
                .ok_or_else(|| format!("{n} passes"))
        },
    )
    .await;
    assert_eq!(
        passes(&agent_a, &moved),
        a_passes,
        "a reconciled it after the handover"
    );
    assert_eq!(
        logged_bundles(&agent_a).len(),
        logged_by_a,
        "a wrote after the handover"
    );
    let b_log = logged_bundles(&agent_b);
    assert_eq!(
        &b_log[logged_by_b..],
        std::slice::from_ref(&moved),
        "b's change log after the handover: the drift correction only"
    );

    // And back to a: a takes it over again, without a write.
    let version_before = cms.get(object).await.unwrap().metadata.resource_version;
    relabel(&client, &moved, &key_a).await;
    shard_of.insert(moved.clone(), key_a.clone());
    let back = wait_ready_in_shards(&client, &test, &shard_of).await;
    assert!(back[&moved]
        .status
        .as_ref()
        .unwrap()
        .agent
        .as_deref()
        .unwrap()
        .ends_with(&format!("@{key_a}")));
    assert_eq!(
        cms.get(object).await.unwrap().metadata.resource_version,
        version_before,
        "taking it back wrote the bundle's object"
    );
    assert_eq!(
        logged_bundles(&agent_a).len(),
        logged_by_a,
        "a wrote on taking it back"
    );
    assert_eq!(
        logged_bundles(&agent_b).len(),
        logged_by_b + 1,
        "b wrote after giving it back"
    );
    // No agent took the other for a second writer of it.
    for agent in [&agent_a, &agent_b] {
        let text = std::fs::read_to_string(&agent.log).unwrap_or_default();
        assert!(!text.contains("another agent"), "{}", agent.log.display());
    }

    let api: Api<BundleDeployment> = Api::all(client.clone());
    for name in shard_of.keys() {
        api.delete(name, &Default::default()).await.unwrap();
    }
    for name in shard_of.keys() {
        agent::wait_bd_gone(&client, name).await;
    }
    // Stopped first, or a leader would create its Lease again at its next renewal.
    drop((agent_a, agent_b));
    for key in [&key_a, &key_b] {
        let _ = leases
            .delete(&format!("pallet-agent-shard-{key}"), &Default::default())
            .await;
    }
}

/// A context acting for `scope`, as the agent builds it (no watches: nothing runs in the
/// background).
async fn context(scope: pallet::shard::Scope, cache: &std::path::Path) -> Context {
    let kubeconfig = kube::config::Kubeconfig::read_from(cluster::kubeconfig_path()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client = Client::try_from(config.clone()).unwrap();
    let fetcher = pallet::source::Fetcher::new(
        std::sync::Arc::new(pallet::source::Cache::open(cache, 1 << 20).unwrap()),
        pallet::source::FetchOptions {
            egress: pallet::egress::EgressPolicy {
                allow_loopback: true,
                ..Default::default()
            },
            ..Default::default()
        },
    );
    let policy = pallet::reconcile::fetch::SecretPolicy {
        agent_namespace: "pallet-system".into(),
        ..Default::default()
    };
    Context::new(
        client,
        config,
        fetcher,
        policy,
        Duration::from_secs(2),
        1,
        pallet::changelog::ChangeLog::disabled(),
        None,
    )
    .with_scope(scope)
}

/// A pass that started before its BundleDeployment was relabelled into another shard cannot
/// write its status any more (the write is conditional on the version the pass read; the
/// conflict shows the object left the shard); one that started before an edit keeping it in the
/// shard writes on the new version.
#[tokio::test]
async fn a_status_write_after_a_relabel_into_another_shard_is_refused() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    // No agent selects this test's label: only the context below writes.
    let test = support::unique_name("shard-write");
    let (key_a, key_b) = (format!("{test}-a"), format!("{test}-b"));
    let name = test.clone();
    create_bd(
        &client,
        &test,
        &name,
        &key_a,
        "http://127.0.0.1:1/none.git",
        "app",
    )
    .await;
    let cache = tempfile::tempdir().unwrap();
    let selector = format!("{TEST_LABEL}={test}");
    let scope = pallet::shard::Scope::new(Some(&selector), Some(&key_a)).unwrap();
    let ctx = context(scope, cache.path()).await;
    let api: Api<BundleDeployment> = Api::all(client.clone());
    let read = api.get(&name).await.unwrap().metadata.resource_version;

    // Edited since the pass read it, still in shard a: written on the new version.
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"edited": "yes"}}})),
    )
    .await
    .unwrap();
    let (written, _) = patch_status(&ctx, &name, read, json!({"agent": "pass-1"}))
        .await
        .unwrap();
    assert_eq!(written.status.unwrap().agent.as_deref(), Some("pass-1"));

    // Relabelled into shard b since: refused, nothing written.
    relabel(&client, &name, &key_b).await;
    let error = patch_status(
        &ctx,
        &name,
        written.metadata.resource_version,
        json!({"agent": "pass-2"}),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&error, ReconcileError::OutOfScope(why) if why.contains(&key_b)),
        "{error}"
    );
    let now = api.get(&name).await.unwrap();
    assert_eq!(
        now.status.as_ref().unwrap().agent.as_deref(),
        Some("pass-1")
    );
    assert_eq!(
        status_managers(&now),
        BTreeSet::from([format!("pallet-shard-{key_a}")])
    );
    api.delete(&name, &Default::default()).await.unwrap();
}
