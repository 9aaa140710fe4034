//! Fault injection: the agent is aborted (`PALLET_FAULT_ABORT_AT`, as `kill -9` would leave
//! things) at each phase boundary of an upgrade and of a requested rollback, then restarted with
//! the same change log and cache. After each: the BundleDeployment reaches the documented state,
//! no object is orphaned or lost, and the change log matches the writes the API server saw.
//!
//! Writes are counted from the API server: a watch on the bundle's kinds, labelled with its
//! owner label, sees every create, update and delete with its resourceVersion. Every logged write
//! must be among them, and every write among them must be logged, except at most the in-flight
//! writes an `interrupted-pass` marker declares.
//!
//! Health waits use a `type: LoadBalancer` Service: healthy once it has an address, which the
//! test writes (as a cloud controller would) when it allows it; those status writes are the
//! test's own and are left out of the count.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent::Agent;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use pallet::api::{BundleDeployment, BundleDeploymentStatus, RevisionPhase};
use serde_json::json;

const AGENT_NAMESPACE: &str = "pallet-system";
const OWNER_LABEL: &str = "pallet.dev/bundle-deployment";
const FAULT_ENV: &str = "PALLET_FAULT_ABORT_AT";

fn config_map(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
    )
}

/// Healthy only once it has a load balancer address (see the module doc).
fn load_balancer(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  type: LoadBalancer\n  \
         selector: {{app: {name}}}\n  ports:\n  - port: 80\n    protocol: TCP\n"
    )
}

/// Revision 1: `keep`, `change` (1), `drop1` and Service `lb1`.
fn revision_1() -> Vec<u8> {
    [
        config_map("keep", "1"),
        config_map("change", "1"),
        config_map("drop1", "1"),
        load_balancer("lb1"),
    ]
    .join("---\n")
    .into_bytes()
}

/// Revision 2: `keep` unchanged, `change` changed, `add1`, `add2` and Service `lb2` added,
/// `drop1` and `lb1` dropped.
fn revision_2() -> Vec<u8> {
    [
        config_map("keep", "1"),
        config_map("change", "2"),
        config_map("add1", "2"),
        config_map("add2", "2"),
        load_balancer("lb2"),
    ]
    .join("---\n")
    .into_bytes()
}

/// Revision 1's objects with other content: `change` and `drop1` changed, nothing added or
/// dropped (an upgrade that keeps its intent out of status).
fn revision_1_changed() -> Vec<u8> {
    [
        config_map("keep", "1"),
        config_map("change", "2"),
        config_map("drop1", "2"),
        load_balancer("lb1"),
    ]
    .join("---\n")
    .into_bytes()
}

const REVISION_1_OBJECTS: [&str; 4] = [
    "ConfigMap/change",
    "ConfigMap/drop1",
    "ConfigMap/keep",
    "Service/lb1",
];
const REVISION_2_OBJECTS: [&str; 5] = [
    "ConfigMap/add1",
    "ConfigMap/add2",
    "ConfigMap/change",
    "ConfigMap/keep",
    "Service/lb2",
];

/// One write as the API server saw it (`op` apply: create or update, with the resourceVersion
/// it made) or as the change log tells it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Write {
    kind: String,
    name: String,
    op: &'static str,
    resource_version: String,
}

/// What the watches saw: applies by resourceVersion, deletes by object.
#[derive(Default)]
struct Seen {
    applies: BTreeSet<Write>,
    deletes: BTreeMap<(String, String), BTreeSet<String>>,
}

/// Watches the bundle's kinds in its namespace, recording every write; and plays the cloud
/// controller that gives LoadBalancer Services an address, when allowed.
struct Recorder {
    seen: Arc<Mutex<Seen>>,
    /// resourceVersions of the test's own writes (load balancer addresses).
    own: Arc<Mutex<BTreeSet<String>>>,
    load_balancers_allowed: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Recorder {
    async fn start(client: &Client, namespace: &str, owner: &str) -> Recorder {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let ready = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let selector = format!("{OWNER_LABEL}={owner}");
        let mut tasks = vec![
            watch::<ConfigMap>(client, namespace, &selector, &seen, &ready),
            watch::<Service>(client, namespace, &selector, &seen, &ready),
        ];
        cluster::poll_until("the write watches listed", Duration::from_secs(30), || {
            let n = ready.load(Ordering::SeqCst);
            async move {
                if n >= 2 {
                    Ok(())
                } else {
                    Err(format!("{n} of 2"))
                }
            }
        })
        .await;
        let own = Arc::new(Mutex::new(BTreeSet::new()));
        let allowed = Arc::new(AtomicBool::new(true));
        let services: Api<Service> = Api::namespaced(client.clone(), namespace);
        let (own_writes, allow) = (own.clone(), allowed.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                if allow.load(Ordering::SeqCst) {
                    give_addresses(&services, &own_writes).await;
                }
                // A controller's loop, not a test synchronization: tests poll for outcomes.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }));
        Recorder {
            seen,
            own,
            load_balancers_allowed: allowed,
            tasks,
        }
    }

    fn allow_load_balancers(&self, allowed: bool) {
        self.load_balancers_allowed.store(allowed, Ordering::SeqCst);
    }
}

/// Records every event of kind `K` labelled `selector` in `namespace`.
fn watch<K>(
    client: &Client,
    namespace: &str,
    selector: &str,
    seen: &Arc<Mutex<Seen>>,
    ready: &Arc<std::sync::atomic::AtomicUsize>,
) -> tokio::task::JoinHandle<()>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let config = watcher::Config::default().labels(selector);
    let (seen, ready) = (seen.clone(), ready.clone());
    tokio::spawn(async move {
        let kind = K::kind(&()).to_string();
        let mut stream = watcher(api, config).boxed();
        while let Some(event) = stream.next().await {
            let Ok(event) = event else { continue };
            let mut seen = seen.lock().unwrap();
            match event {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                    seen.applies.insert(Write {
                        kind: kind.clone(),
                        name: o.name_any(),
                        op: "apply",
                        resource_version: o.resource_version().unwrap_or_default(),
                    });
                }
                watcher::Event::Delete(o) => {
                    seen.deletes
                        .entry((kind.clone(), o.name_any()))
                        .or_default()
                        .insert(o.resource_version().unwrap_or_default());
                }
                watcher::Event::InitDone => {
                    ready.fetch_add(1, Ordering::SeqCst);
                }
                watcher::Event::Init => {}
            }
        }
    })
}

/// Gives every LoadBalancer Service without an address one, remembering the write as the test's.
async fn give_addresses(services: &Api<Service>, own: &Arc<Mutex<BTreeSet<String>>>) {
    let Ok(list) = services.list(&ListParams::default()).await else {
        return;
    };
    for service in list.items {
        let has_address = service
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .is_some_and(|i| !i.is_empty());
        if has_address {
            continue;
        }
        let patch = json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}});
        if let Ok(written) = services
            .patch_status(
                &service.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            own.lock()
                .unwrap()
                .insert(written.resource_version().unwrap_or_default());
        }
    }
}

/// The change log's account of one BundleDeployment: its writes and its markers' allowance.
struct Logged {
    applies: BTreeSet<Write>,
    deletes: BTreeMap<(String, String), usize>,
    markers: Vec<serde_json::Value>,
    allowance: usize,
}

fn logged(agent: &Agent, bd: &str) -> Logged {
    let mut out = Logged {
        applies: BTreeSet::new(),
        deletes: BTreeMap::new(),
        markers: Vec::new(),
        allowance: 0,
    };
    for entry in agent.change_entries() {
        if entry["bundleDeployment"] != bd {
            continue;
        }
        if entry.get("marker").is_some() {
            assert_eq!(entry["marker"], "interrupted-pass", "{entry}");
            out.allowance += entry["details"]["unloggedWritesAtMost"]
                .as_u64()
                .expect("a marker says how many writes may be missing")
                as usize;
            out.markers.push(entry);
            continue;
        }
        assert_eq!(entry["result"], "success", "no write fails here: {entry}");
        let kind = entry["object"]["kind"].as_str().unwrap().to_string();
        let name = entry["object"]["name"].as_str().unwrap().to_string();
        match entry["operation"].as_str().unwrap() {
            "delete" => *out.deletes.entry((kind, name)).or_default() += 1,
            _ => {
                out.applies.insert(Write {
                    kind,
                    name,
                    op: "apply",
                    resource_version: entry["resourceVersionAfter"]
                        .as_str()
                        .expect("a create or update logs the resourceVersion it made")
                        .to_string(),
                });
            }
        }
    }
    out
}

/// Writes the API server saw that the log does not have; an error when the log has a write the
/// watches have not seen (yet).
fn unlogged(seen: &Seen, own: &BTreeSet<String>, log: &Logged) -> Result<Vec<String>, String> {
    if let Some(missing) = log.applies.iter().find(|w| !seen.applies.contains(*w)) {
        return Err(format!(
            "logged write {missing:?} not seen by the watch (yet)"
        ));
    }
    for (key, n) in &log.deletes {
        let observed = seen.deletes.get(key).map_or(0, BTreeSet::len);
        if observed < *n {
            return Err(format!("{n} deletes of {key:?} logged, {observed} seen"));
        }
    }
    let mut missing: Vec<String> = seen
        .applies
        .iter()
        .filter(|w| !own.contains(&w.resource_version) && !log.applies.contains(*w))
        .map(|w| format!("{}/{} at {}", w.kind, w.name, w.resource_version))
        .collect();
    for (key, versions) in &seen.deletes {
        let logged = log.deletes.get(key).copied().unwrap_or(0);
        for _ in logged..versions.len() {
            missing.push(format!("delete of {}/{}", key.0, key.1));
        }
    }
    Ok(missing)
}

struct Scenario {
    client: Client,
    name: String,
    repo: support::GitRepo,
    url: String,
    recorder: Recorder,
}

impl Scenario {
    async fn new(prefix: &str) -> Scenario {
        let client = cluster::client().await;
        cluster::install_crd(&client).await;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": AGENT_NAMESPACE}});
        namespaces
            .patch(
                AGENT_NAMESPACE,
                &PatchParams::apply(cluster::TEST_FIELD_MANAGER),
                &Patch::Apply(&ns),
            )
            .await
            .unwrap();
        let fixtures = support::Fixtures::load();
        let name = support::unique_name(prefix);
        let repo = fixtures.git_repo(&name);
        let url = repo.url(fixtures.git_plain());
        let recorder = Recorder::start(&client, &name, &name).await;
        Scenario {
            client,
            name,
            repo,
            url,
            recorder,
        }
    }

    fn commit(&self, content: Vec<u8>, message: &str) {
        self.repo
            .commit_files("main", &[("manifests/app.yaml", &content)], message);
    }

    async fn create_bd(&self) {
        let spec = json!({
            "installNamespace": self.name,
            "sources": [{"kind": "git", "git": {"repository": self.url, "ref": {"branch": "main"}}}],
            "format": "plain",
        });
        agent::apply_bd(&self.client, &self.name, spec).await;
    }

    fn bds(&self) -> Api<BundleDeployment> {
        Api::all(self.client.clone())
    }

    async fn status(&self) -> BundleDeploymentStatus {
        let bd = self.bds().get(&self.name).await.unwrap();
        bd.status.unwrap_or_default()
    }

    async fn wait_status<F>(&self, agent: &Agent, what: &str, check: F) -> BundleDeploymentStatus
    where
        F: Fn(&BundleDeploymentStatus) -> bool,
    {
        let timeout = Duration::from_secs(90);
        let start = Instant::now();
        loop {
            let status = self.status().await;
            if check(&status) {
                return status;
            }
            if start.elapsed() > timeout {
                panic!(
                    "timed out waiting for {what}; status: {}\nagent log:\n{}",
                    serde_json::to_string_pretty(&status).unwrap(),
                    agent.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn wait_healthy(&self, agent: &Agent, number: i64) -> BundleDeploymentStatus {
        self.wait_status(agent, &format!("revision {number} healthy"), |st| {
            st.active_revision == Some(number) && phase(st, number) == Some(RevisionPhase::Healthy)
        })
        .await
    }

    /// Every ConfigMap and Service in the install namespace (but the API server's own
    /// `kube-root-ca.crt`), as `Kind/name`, after checking each carries the bundle's label.
    async fn objects(&self) -> BTreeSet<String> {
        let mut found = BTreeSet::new();
        let config_maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.name);
        for cm in config_maps.list(&ListParams::default()).await.unwrap() {
            if cm.name_any() == "kube-root-ca.crt" {
                continue;
            }
            assert_eq!(
                cm.labels().get(OWNER_LABEL),
                Some(&self.name),
                "ConfigMap {} carries the bundle label",
                cm.name_any()
            );
            found.insert(format!("ConfigMap/{}", cm.name_any()));
        }
        let services: Api<Service> = Api::namespaced(self.client.clone(), &self.name);
        for svc in services.list(&ListParams::default()).await.unwrap() {
            assert_eq!(
                svc.labels().get(OWNER_LABEL),
                Some(&self.name),
                "Service {} carries the bundle label",
                svc.name_any()
            );
            found.insert(format!("Service/{}", svc.name_any()));
        }
        found
    }

    async fn value_of(&self, name: &str) -> Option<String> {
        let config_maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.name);
        config_maps
            .get_opt(name)
            .await
            .unwrap()
            .and_then(|cm| cm.data)
            .and_then(|d| d.get("value").cloned())
    }

    /// The change log against the writes the API server saw, once the watches have caught up:
    /// every logged write happened; the unlogged ones are at most what the markers declare; with
    /// `gap_in` a revision, there is at least one (the write the fault cut off), and a marker
    /// names that revision.
    async fn check_change_log(&self, agent: &Agent, gap_in: Option<i64>) {
        let expect_gap = gap_in.is_some();
        let start = Instant::now();
        loop {
            let log = logged(agent, &self.name);
            let result = {
                let seen = self.recorder.seen.lock().unwrap();
                let own = self.recorder.own.lock().unwrap();
                unlogged(&seen, &own, &log)
            };
            let verdict = match result {
                Err(why) => Err(why),
                Ok(missing) if missing.len() > log.allowance => Err(format!(
                    "{} writes unlogged, markers allow {}: {missing:?}; markers {:?}",
                    missing.len(),
                    log.allowance,
                    log.markers
                )),
                Ok(missing) if expect_gap && missing.is_empty() => {
                    Err("the write cut off by the fault is not seen (yet)".to_string())
                }
                Ok(missing) => Ok(missing),
            };
            match verdict {
                Ok(missing) => {
                    if expect_gap {
                        assert_eq!(marker_revision(&log), gap_in, "{:?}", log.markers);
                    }
                    eprintln!(
                        "{}: {} logged writes, {} unlogged (allowed {}): {missing:?}",
                        self.name,
                        log.applies.len() + log.deletes.values().sum::<usize>(),
                        missing.len(),
                        log.allowance
                    );
                    return;
                }
                Err(why) if start.elapsed() > Duration::from_secs(30) => panic!(
                    "{}: the change log does not match the writes: {why}\nchange log: {}",
                    self.name,
                    agent.change_log_path().display()
                ),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}

fn marker_revision(log: &Logged) -> Option<i64> {
    log.markers.first().and_then(|m| m["revision"].as_i64())
}

fn phase(status: &BundleDeploymentStatus, number: i64) -> Option<RevisionPhase> {
    status
        .revisions
        .iter()
        .find(|r| r.number == number)
        .map(|r| r.phase)
}

/// Waits for `agent` to abort at its fault; panics with its log otherwise.
fn wait_aborted(agent: &mut Agent, fault: &str) {
    use std::os::unix::process::ExitStatusExt;
    let ended = agent.wait_end(Duration::from_secs(90));
    assert_eq!(
        ended.and_then(|s| s.signal()),
        Some(6), // SIGABRT
        "the agent aborts at {fault} (ended: {ended:?})\n{}",
        agent.log_tail()
    );
}

/// Upgrade from revision 1 (healthy) to revision 2, aborted at `fault`, then restarted: revision
/// 2 becomes Healthy with exactly its objects. `gap`: the fault cuts a write off its log entry.
///
/// The agents write one object at a time (`--apply-parallelism`, default 1 here), so that a marker
/// allows exactly one unlogged write: a log that lost any more fails the test.
async fn upgrade_aborted_at(fault: &str, gap: bool) {
    upgrade_aborted_with(fault, gap, "1").await
}

async fn upgrade_aborted_with(fault: &str, gap: bool, parallelism: &str) {
    let gap = gap.then_some(2);
    let s = Scenario::new(&format!("f-up{parallelism}-{}", fault.replace(':', ""))).await;
    s.commit(revision_1(), "v1");
    let mut first = Agent::start_with(&s.name, &["--apply-parallelism", parallelism]);
    s.create_bd().await;
    s.wait_healthy(&first, 1).await;
    first.kill();

    // No load balancer addresses until the restart: revision 2 stays unhealthy meanwhile.
    s.recorder.allow_load_balancers(false);
    s.commit(revision_2(), "v2");
    let mut faulty = first.restart_with_env(&[(FAULT_ENV, fault)]);
    wait_aborted(&mut faulty, fault);
    assert_eq!(
        s.value_of("keep").await.as_deref(),
        Some("1"),
        "an object of both revisions survives the crash"
    );

    s.recorder.allow_load_balancers(true);
    let restarted = faulty.restart_with_env(&[]);
    let status = s.wait_healthy(&restarted, 2).await;
    assert_eq!(status.last_healthy_revision, Some(2));
    assert_eq!(phase(&status, 1), Some(RevisionPhase::Superseded));
    assert_eq!(
        s.objects().await,
        REVISION_2_OBJECTS.iter().map(|o| o.to_string()).collect(),
        "exactly revision 2's objects: the dropped ones pruned, none lost"
    );
    assert_eq!(s.value_of("change").await.as_deref(), Some("2"));
    s.check_change_log(&restarted, gap).await;
}

/// A requested rollback from revision 2 (healthy) to 1, aborted at `fault`, then restarted:
/// revision 1 is active and Healthy with exactly its objects, revision 2 RolledBack.
async fn rollback_aborted_at(fault: &str, gap: bool) {
    let gap = gap.then_some(1);
    let s = Scenario::new(&format!("f-rb-{}", fault.replace(':', ""))).await;
    s.commit(revision_1(), "v1");
    let mut first = Agent::start_with(&s.name, &["--apply-parallelism", "1"]);
    s.create_bd().await;
    s.wait_healthy(&first, 1).await;
    s.commit(revision_2(), "v2");
    s.wait_healthy(&first, 2).await;
    first.kill();

    s.recorder.allow_load_balancers(false);
    let mut faulty = first.restart_with_env(&[(FAULT_ENV, fault)]);
    let patch = json!({"metadata": {"annotations": {pallet::api::REQUESTED_ROLLBACK_ANNOTATION: "1@fault"}}});
    s.bds()
        .patch(&s.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_aborted(&mut faulty, fault);
    assert_eq!(
        s.value_of("keep").await.as_deref(),
        Some("1"),
        "an object of both revisions survives the crash"
    );

    s.recorder.allow_load_balancers(true);
    let restarted = faulty.restart_with_env(&[]);
    let status = s
        .wait_status(&restarted, "the rollback to revision 1 healthy", |st| {
            st.last_handled_rollback.as_deref() == Some("1@fault")
                && st.active_revision == Some(1)
                && phase(st, 1) == Some(RevisionPhase::Healthy)
        })
        .await;
    assert_eq!(phase(&status, 2), Some(RevisionPhase::RolledBack));
    assert_eq!(
        s.objects().await,
        REVISION_1_OBJECTS.iter().map(|o| o.to_string()).collect(),
        "exactly revision 1's objects: revision 2's additions pruned, none lost"
    );
    assert_eq!(s.value_of("change").await.as_deref(), Some("1"));
    s.check_change_log(&restarted, gap).await;
}

#[tokio::test]
async fn upgrade_aborted_after_fetch() {
    upgrade_aborted_at("fetch", false).await;
}

#[tokio::test]
async fn upgrade_aborted_after_the_snapshot_is_stored() {
    upgrade_aborted_at("snapshot", false).await;
}

#[tokio::test]
async fn upgrade_aborted_after_the_intent_is_recorded() {
    upgrade_aborted_at("intent", false).await;
}

#[tokio::test]
async fn upgrade_aborted_mid_apply() {
    upgrade_aborted_at("apply:2", true).await;
}

#[tokio::test]
async fn upgrade_aborted_mid_apply_with_parallel_writes() {
    // Up to 8 writes in flight: the marker allows 8.
    upgrade_aborted_with("apply:2", true, "8").await;
}

#[tokio::test]
async fn upgrade_aborted_mid_prune() {
    upgrade_aborted_at("prune:1", true).await;
}

#[tokio::test]
async fn upgrade_aborted_during_the_health_wait() {
    // The second look at the unhealthy revision: the first pass has recorded Progressing.
    upgrade_aborted_at("health:2", false).await;
}

#[tokio::test]
async fn rollback_aborted_after_the_intent_is_recorded() {
    rollback_aborted_at("intent", false).await;
}

#[tokio::test]
async fn rollback_aborted_mid_apply() {
    rollback_aborted_at("apply:2", true).await;
}

#[tokio::test]
async fn rollback_aborted_mid_prune() {
    rollback_aborted_at("prune:1", true).await;
}

#[tokio::test]
async fn rollback_aborted_during_the_health_wait() {
    rollback_aborted_at("health:2", false).await;
}

/// Sources down during an upgrade (the spec moves to a source that cannot be fetched), across an
/// agent killed and restarted meanwhile: revision 1 stays active, applied and healthy, no new
/// revision is made, and the change log still matches the writes.
async fn upgrade_with_sources_down(prefix: &str, source: serde_json::Value) {
    let s = Scenario::new(prefix).await;
    s.commit(revision_1(), "v1");
    let mut agent = Agent::start_with(
        &s.name,
        &["--apply-parallelism", "1", "--fetch-timeout", "2s"],
    );
    s.create_bd().await;
    s.wait_healthy(&agent, 1).await;
    let logged_before = logged(&agent, &s.name).applies.len();

    let spec = json!({
        "installNamespace": s.name,
        "sources": [source],
        "format": "plain",
    });
    agent::apply_bd(&s.client, &s.name, spec).await;
    for round in 0..2 {
        // After the restart, a reconcile request proves the status is the new agent's.
        let token = format!("round-{round}");
        let patch = json!({"metadata": {"annotations": {pallet::api::REQUESTED_RECONCILE_ANNOTATION: token}}});
        s.bds()
            .patch(&s.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        let status = s
            .wait_status(&agent, "the source failure reported", |st| {
                let unpacked = st.conditions.iter().find(|c| c.type_ == "Unpacked");
                unpacked.is_some_and(|c| {
                    c.status == "False" && c.message.contains("active revision is kept")
                }) && st.observed_generation == Some(2)
                    && st.last_handled_reconcile.as_deref() == Some(token.as_str())
            })
            .await;
        assert_eq!(status.active_revision, Some(1), "round {round}");
        assert_eq!(phase(&status, 1), Some(RevisionPhase::Healthy));
        assert_eq!(status.revisions.len(), 1, "no revision without content");
        assert_eq!(
            s.objects().await,
            REVISION_1_OBJECTS.iter().map(|o| o.to_string()).collect(),
            "revision 1 stays applied"
        );
        assert_eq!(s.value_of("change").await.as_deref(), Some("1"));
        if round == 0 {
            agent.kill(); // kill -9 during the outage; the next agent starts from the cluster
            agent = agent.restart_with_env(&[]);
        }
    }
    assert_eq!(
        logged(&agent, &s.name).applies.len(),
        logged_before,
        "nothing was written during the outage"
    );
    s.check_change_log(&agent, None).await;
}

#[tokio::test]
async fn upgrade_to_a_hanging_source_keeps_revision_1() {
    let hang = support::Fixtures::load().hang();
    let source = json!({"kind": "git", "git": {
        "repository": format!("{}/repo.git", hang.url), "ref": {"branch": "main"}}});
    upgrade_with_sources_down("f-down-hang", source).await;
}

#[tokio::test]
async fn upgrade_to_a_missing_repository_keeps_revision_1() {
    let fixtures = support::Fixtures::load();
    let missing = format!(
        "{}/nothing-{}.git",
        fixtures.git_plain().url,
        std::process::id()
    );
    let source = json!({"kind": "git", "git": {"repository": missing, "ref": {"branch": "main"}}});
    upgrade_with_sources_down("f-down-missing", source).await;
}

/// The BundleDeployment's deletion, aborted after its first delete returned (before it was
/// logged), then restarted: every object is deleted, the BundleDeployment is gone, and the log
/// declares the one delete it may miss.
#[tokio::test]
async fn deletion_aborted_mid_delete() {
    let s = Scenario::new("f-del").await;
    s.commit(revision_1(), "v1");
    let mut first = Agent::start_with(&s.name, &["--apply-parallelism", "1"]);
    s.create_bd().await;
    s.wait_healthy(&first, 1).await;
    first.kill();

    let mut faulty = first.restart_with_env(&[(FAULT_ENV, "prune:2")]);
    s.bds()
        .delete(&s.name, &kube::api::DeleteParams::default())
        .await
        .unwrap();
    wait_aborted(&mut faulty, "prune:2");
    assert!(
        s.bds().get_opt(&s.name).await.unwrap().is_some(),
        "the finalizer holds the BundleDeployment while objects remain"
    );

    let restarted = faulty.restart_with_env(&[]);
    agent::wait_bd_gone(&s.client, &s.name).await;
    assert_eq!(s.objects().await, BTreeSet::new(), "every object deleted");
    s.check_change_log(&restarted, Some(1)).await;
}

/// The objects of revision 1 an interrupted first install wrote: three of its four, aborted at
/// the third write, so at least one that revision 2 does not have (`drop1` or `lb1`).
async fn first_install_aborted(s: &Scenario) -> Agent {
    s.commit(revision_1(), "v1");
    let mut faulty = Agent::start_with_env(
        &s.name,
        &["--apply-parallelism", "1"],
        &[(FAULT_ENV, "apply:3")],
    );
    s.create_bd().await;
    wait_aborted(&mut faulty, "apply:3");
    let status = s.status().await;
    assert!(
        status.revisions.is_empty() && status.inventory.is_none(),
        "a first install's intent is its snapshot, not a status write: {status:?}"
    );
    let written = s.objects().await;
    assert_eq!(
        written.len(),
        3,
        "three writes before the abort: {written:?}"
    );
    assert!(
        written.contains("ConfigMap/drop1") || written.contains("Service/lb1"),
        "{written:?}"
    );
    faulty
}

/// A first install aborted mid-apply, then restarted on other content: the restarted agent
/// reads the stored revision 1 before replacing it, prunes what the interrupted pass wrote that
/// the new content does not have, and its change log declares the write it may miss.
#[tokio::test]
async fn first_install_aborted_mid_apply_then_new_content() {
    let s = Scenario::new("f-first-new").await;
    let faulty = first_install_aborted(&s).await;
    s.commit(revision_2(), "v2");
    let restarted = faulty.restart_with_env(&[]);
    let status = s.wait_healthy(&restarted, 1).await;
    assert_eq!(status.revisions.len(), 1, "{status:?}");
    assert_eq!(
        s.objects().await,
        REVISION_2_OBJECTS.iter().map(|o| o.to_string()).collect(),
        "exactly the new content's objects: what only the interrupted install wrote is pruned"
    );
    assert_eq!(s.value_of("change").await.as_deref(), Some("2"));
    s.check_change_log(&restarted, Some(1)).await;
}

/// A first install aborted mid-apply, then the BundleDeployment deleted before an agent runs
/// again: the restarted agent deletes what the interrupted install wrote (its stored revision 1),
/// though status never recorded it.
#[tokio::test]
async fn first_install_aborted_mid_apply_then_deleted() {
    let s = Scenario::new("f-first-del").await;
    let faulty = first_install_aborted(&s).await;
    s.bds()
        .delete(&s.name, &kube::api::DeleteParams::default())
        .await
        .unwrap();
    let restarted = faulty.restart_with_env(&[]);
    agent::wait_bd_gone(&s.client, &s.name).await;
    assert_eq!(s.objects().await, BTreeSet::new(), "every object deleted");
    // Two markers: the deletion requested before this agent started, and the first install.
    let markers = logged(&restarted, &s.name).markers;
    assert!(
        markers
            .iter()
            .any(|m| m["revision"] == 1 && m["details"]["phase"] == "applying"),
        "{markers:?}"
    );
    s.check_change_log(&restarted, None).await;
}

/// An upgrade from revision 1 to the same objects with other content, aborted after its first
/// write (done, not logged): status still says revision 1, as such an upgrade records its
/// intent only in memory; one object carries the new content.
async fn same_objects_upgrade_aborted(s: &Scenario) -> Agent {
    s.commit(revision_1(), "v1");
    let mut first = Agent::start_with(&s.name, &["--apply-parallelism", "1"]);
    s.create_bd().await;
    s.wait_healthy(&first, 1).await;
    first.kill();

    s.commit(revision_1_changed(), "v1 changed");
    let mut faulty = first.restart_with_env(&[(FAULT_ENV, "apply:1")]);
    wait_aborted(&mut faulty, "apply:1");
    let status = s.status().await;
    assert_eq!(status.active_revision, Some(1), "{status:?}");
    assert!(
        status.revisions.iter().all(|r| r.number == 1),
        "the upgrade's intent is not in status: {status:?}"
    );
    let changed = [s.value_of("change").await, s.value_of("drop1").await];
    assert_eq!(
        changed.iter().filter(|v| v.as_deref() == Some("2")).count(),
        1,
        "one write landed before the abort: {changed:?}"
    );
    faulty
}

/// The same-objects upgrade aborted mid-apply, restarted on the same content: revision 2
/// becomes Healthy, and the restarted agent, finding an object stamped with revision 2 (and its
/// snapshot), declares the unlogged write with a marker.
#[tokio::test]
async fn same_objects_upgrade_aborted_mid_apply_then_finished() {
    let s = Scenario::new("f-same-fin").await;
    let faulty = same_objects_upgrade_aborted(&s).await;
    let restarted = faulty.restart_with_env(&[]);
    let status = s.wait_healthy(&restarted, 2).await;
    assert_eq!(phase(&status, 1), Some(RevisionPhase::Superseded));
    assert_eq!(
        s.objects().await,
        REVISION_1_OBJECTS.iter().map(|o| o.to_string()).collect()
    );
    assert_eq!(s.value_of("change").await.as_deref(), Some("2"));
    assert_eq!(s.value_of("drop1").await.as_deref(), Some("2"));
    s.check_change_log(&restarted, Some(2)).await;
}

/// The same-objects upgrade aborted mid-apply, then the sources back at revision 1's content
/// before an agent runs again: the restarted agent re-applies revision 1 over what the
/// interrupted pass wrote (status never heard of revision 2), and its marker declares the
/// write that pass did not log.
#[tokio::test]
async fn same_objects_upgrade_aborted_mid_apply_then_sources_back() {
    let s = Scenario::new("f-same-back").await;
    let faulty = same_objects_upgrade_aborted(&s).await;
    s.commit(revision_1(), "v1 again");
    let restarted = faulty.restart_with_env(&[]);
    cluster::poll_until(
        "revision 1's content restored",
        Duration::from_secs(90),
        || async {
            let values = (s.value_of("change").await, s.value_of("drop1").await);
            match values {
                (Some(a), Some(b)) if a == "1" && b == "1" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let status = s.wait_healthy(&restarted, 1).await;
    assert!(status.revisions.iter().all(|r| r.number == 1), "{status:?}");
    assert_eq!(
        s.objects().await,
        REVISION_1_OBJECTS.iter().map(|o| o.to_string()).collect()
    );
    s.check_change_log(&restarted, Some(2)).await;
}
