//! End-to-end on the local control plane: fields left to other writers (`spec.driftIgnore`),
//! objects with their own policy (`pallet.dev/apply`, `pallet.dev/prune`, `pallet.dev/drift`,
//! `helm.sh/resource-policy`), and fields the API server does not keep.
//!
//! Writes are counted from the API server's side: a watch on the objects sees every change with
//! its resourceVersion, generation and managed fields. A write of the agent's is a change the
//! test did not make that moves the object's generation (a spec change), pallet's own managed
//! fields entry, or pallet's revision annotation; the Deployment controller's status and
//! annotation updates move none of them.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent::Agent;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use pallet::api::{BundleDeployment, BundleDeploymentStatus};
use serde_json::{json, Value};

use cluster::ensure_agent_namespace;
const OWNER_LABEL: &str = "pallet.dev/bundle-deployment";
const SCALER: &str = "test-autoscaler";

fn config_map(name: &str, value: &str, annotations: &[(&str, &str)]) -> String {
    let annotations: String = annotations
        .iter()
        .map(|(k, v)| format!("\n    {k}: \"{v}\""))
        .collect();
    let annotations = if annotations.is_empty() {
        String::new()
    } else {
        format!("\n  annotations:{annotations}")
    };
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}{annotations}\ndata:\n  value: \"{value}\"\n"
    )
}

/// A Deployment with `replicas: 1`; `note` goes into its pod template (a change to another field).
fn deployment(name: &str, note: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: 1\n  \
         selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n      \
         annotations: {{note: \"{note}\"}}\n    spec:\n      containers:\n      - name: app\n        image: registry.example/app:1\n"
    )
}

fn docs(parts: &[String]) -> Vec<u8> {
    parts.join("---\n").into_bytes()
}

/// One BundleDeployment from a git repository of its own, with its agent.
struct Scenario {
    client: Client,
    name: String,
    repo: support::GitRepo,
    url: String,
}

impl Scenario {
    async fn new(prefix: &str) -> Scenario {
        let client = cluster::client().await;
        cluster::install_crd(&client).await;
        ensure_agent_namespace(&client).await;
        let fixtures = support::Fixtures::load();
        let name = support::unique_name(prefix);
        let repo = fixtures.git_repo(&name);
        let url = repo.url(fixtures.git_plain());
        Scenario {
            client,
            name,
            repo,
            url,
        }
    }

    fn commit(&self, parts: &[String], message: &str) {
        self.repo
            .commit_files("main", &[("manifests/app.yaml", &docs(parts))], message);
    }

    fn spec(&self, extra: Value) -> Value {
        let mut spec = json!({
            "installNamespace": self.name,
            "sources": [{"kind": "git", "git": {"repository": self.url, "ref": {"branch": "main"}}}],
            "format": "plain",
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        spec
    }

    async fn apply_bd(&self, extra: Value) {
        agent::apply_bd(&self.client, &self.name, self.spec(extra)).await;
    }

    fn bds(&self) -> Api<BundleDeployment> {
        Api::all(self.client.clone())
    }

    fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.name)
    }

    fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), &self.name)
    }

    async fn status(&self) -> BundleDeploymentStatus {
        self.bds()
            .get(&self.name)
            .await
            .unwrap()
            .status
            .unwrap_or_default()
    }

    async fn wait_status<F>(&self, agent: &Agent, what: &str, check: F) -> BundleDeploymentStatus
    where
        F: Fn(&BundleDeploymentStatus) -> bool,
    {
        let start = Instant::now();
        loop {
            let status = self.status().await;
            if check(&status) {
                return status;
            }
            if start.elapsed() > Duration::from_secs(90) {
                panic!(
                    "timed out waiting for {what}\nstatus: {status:#?}\nagent log:\n{}",
                    agent.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until revision `number` is active and its objects are applied.
    async fn wait_applied(&self, agent: &Agent, number: i64) -> BundleDeploymentStatus {
        self.wait_status(agent, &format!("revision {number} applied"), |st| {
            st.active_revision == Some(number)
                && st.revisions.iter().any(|r| {
                    r.number == number && !matches!(r.phase, pallet::api::RevisionPhase::Applying)
                })
        })
        .await
    }

    /// Asks for a reconcile and waits until the agent handled it: a whole pass has run since.
    async fn reconcile_now(&self, agent: &Agent, token: &str) -> BundleDeploymentStatus {
        let patch = json!({"metadata": {"annotations": {
            pallet::api::REQUESTED_RECONCILE_ANNOTATION: token}}});
        self.bds()
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        self.wait_status(agent, "the reconcile request handled", |s| {
            s.last_handled_reconcile.as_deref() == Some(token)
        })
        .await
    }

    async fn value(&self, name: &str) -> Option<String> {
        self.config_maps()
            .get_opt(name)
            .await
            .unwrap()
            .and_then(|cm| cm.data)
            .and_then(|d| d.get("value").cloned())
    }

    async fn set_value(&self, name: &str, value: &str) {
        let patch = json!({"data": {"value": value}});
        self.config_maps()
            .patch(
                name,
                &PatchParams {
                    field_manager: Some("hand-edit".into()),
                    ..Default::default()
                },
                &Patch::Merge(&patch),
            )
            .await
            .unwrap();
    }

    async fn owner_label(&self, name: &str) -> Option<String> {
        self.config_maps()
            .get(name)
            .await
            .unwrap()
            .labels()
            .get(OWNER_LABEL)
            .cloned()
    }

    async fn delete_bd(&self) {
        self.bds()
            .delete(&self.name, &Default::default())
            .await
            .unwrap();
        agent::wait_bd_gone(&self.client, &self.name).await;
    }

    async fn cleanup(&self) {
        let _ = self.bds().delete(&self.name, &Default::default()).await;
        let _ = Api::<Namespace>::all(self.client.clone())
            .delete(&self.name, &Default::default())
            .await;
    }
}

/// One change to a watched object, as the API server reported it.
#[derive(Clone, Debug)]
struct Seen {
    resource_version: String,
    generation: Option<i64>,
    /// pallet's own managed-fields entry (its fields and time), as text.
    pallets_entry: String,
    /// pallet's revision annotation.
    revision: Option<String>,
}

/// Every change to the watched objects, and the resourceVersions of the test's own writes.
struct Recorder {
    seen: Arc<Mutex<Vec<(String, Seen)>>>,
    own: Arc<Mutex<BTreeSet<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Recorder {
    /// Watches the objects of `resource` in `namespace`; returns once the watch has listed them.
    async fn start(client: &Client, namespace: &str, resource: &ApiResource) -> Recorder {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let listed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (record, done) = (seen.clone(), listed.clone());
        let task = tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Apply(o)) | Ok(watcher::Event::InitApply(o)) => {
                        record.lock().unwrap().push((o.name_any(), seen_of(&o)));
                    }
                    Ok(watcher::Event::InitDone) => {
                        done.store(true, std::sync::atomic::Ordering::SeqCst)
                    }
                    _ => {}
                }
            }
        });
        cluster::poll_until("the watch to list", Duration::from_secs(30), || {
            let done = listed.load(std::sync::atomic::Ordering::SeqCst);
            async move {
                if done {
                    Ok(())
                } else {
                    Err("not yet".into())
                }
            }
        })
        .await;
        Recorder {
            seen,
            own: Arc::default(),
            task,
        }
    }

    /// How many changes were seen so far (a mark to count from).
    fn mark(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// A write the test made (its resourceVersion): not the agent's.
    fn own_write(&self, resource_version: Option<String>) {
        self.own.lock().unwrap().extend(resource_version);
    }

    /// Waits until the watch has seen Deployment `name` as it is now.
    async fn caught_up(&self, deployments: &Api<Deployment>, name: &str) {
        let now = deployments
            .get(name)
            .await
            .unwrap()
            .resource_version()
            .unwrap_or_default();
        cluster::poll_until("the watch to catch up", Duration::from_secs(30), || {
            let seen = self
                .seen
                .lock()
                .unwrap()
                .iter()
                .any(|(n, s)| n == name && s.resource_version == now);
            async move {
                if seen {
                    Ok(())
                } else {
                    Err("not yet".into())
                }
            }
        })
        .await;
    }

    /// The agent's writes to `name` seen after `mark` (see the module doc).
    fn pallet_writes(&self, name: &str, mark: usize) -> Vec<String> {
        let seen = self.seen.lock().unwrap();
        let own = self.own.lock().unwrap();
        let mut before: Option<&Seen> = seen[..mark.min(seen.len())]
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s);
        let mut writes = Vec::new();
        for (_, now) in seen[mark.min(seen.len())..]
            .iter()
            .filter(|(n, _)| n == name)
        {
            if let Some(before) = before {
                let moved = now.generation != before.generation
                    || now.pallets_entry != before.pallets_entry
                    || now.revision != before.revision;
                if moved
                    && now.resource_version != before.resource_version
                    && !own.contains(&now.resource_version)
                {
                    writes.push(now.resource_version.clone());
                }
            }
            before = Some(now);
        }
        writes
    }
}

fn seen_of(object: &DynamicObject) -> Seen {
    let pallets_entry = object
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| {
            e.manager.as_deref() == Some("pallet") && e.operation.as_deref() == Some("Apply")
        })
        .map(|e| format!("{:?} {:?}", e.time, e.fields_v1))
        .collect::<Vec<_>>()
        .join(";");
    Seen {
        resource_version: object.resource_version().unwrap_or_default(),
        generation: object.metadata.generation,
        pallets_entry,
        revision: object.annotations().get("pallet.dev/revision").cloned(),
    }
}

/// The value of the metric series `series` (`name{labels}`) in `text`, 0 when absent.
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok()).flatten()
        })
        .unwrap_or(0.0)
}

/// The change log's entries about object `name`.
fn entries_for(agent: &Agent, name: &str) -> Vec<Value> {
    agent
        .change_entries()
        .into_iter()
        .filter(|e| e["object"]["name"] == name)
        .collect()
}

/// Scales Deployment `name` through its scale subresource, as an autoscaler does (an update by
/// another field manager).
async fn scale(deployments: &Api<Deployment>, name: &str, replicas: i32) -> Option<String> {
    let patch = json!({"spec": {"replicas": replicas}});
    let scale = deployments
        .patch_scale(
            name,
            &PatchParams {
                field_manager: Some(SCALER.into()),
                ..Default::default()
            },
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
    scale.metadata.resource_version
}

async fn replicas(deployments: &Api<Deployment>, name: &str) -> Option<i32> {
    deployments
        .get(name)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.replicas)
}

/// Without a rule pallet sets `replicas` back after every scaling; with `driftIgnore` on
/// `/spec/replicas` it writes nothing to the Deployment however often it is scaled, the
/// autoscaler's value stays, and a change to another field of the Deployment is still applied.
#[tokio::test]
async fn an_ignore_rule_ends_the_fight_over_replicas() {
    let s = Scenario::new("ign-replicas").await;
    s.commit(&[deployment("web", "one")], "v1");
    let agent = Agent::start(&s.name);
    s.apply_bd(json!({})).await;
    s.wait_applied(&agent, 1).await;
    let deployments = s.deployments();
    let recorder =
        Recorder::start(&s.client, &s.name, &ApiResource::erase::<Deployment>(&())).await;

    // The fight, as it is without a rule: each scaling is set back (by the drift correction
    // the Deployment's watch event starts, no request needed) before the next one.
    let mark = recorder.mark();
    for i in 0..20 {
        recorder.own_write(scale(&deployments, "web", 3 + i).await);
        cluster::poll_until("the scaling set back", Duration::from_secs(30), || async {
            match replicas(&deployments, "web").await {
                Some(1) => Ok(()),
                other => Err(format!("replicas {other:?}")),
            }
        })
        .await;
    }
    recorder.caught_up(&deployments, "web").await;
    let fight = recorder.pallet_writes("web", mark);
    println!(
        "without a rule: {} pallet writes to the Deployment over 20 scalings",
        fight.len()
    );
    assert!(
        fight.len() >= 20,
        "every scaling is set back: {fight:?}\n{}",
        agent.log_tail()
    );
    assert_eq!(replicas(&deployments, "web").await, Some(1));

    // The rule (and one whose target matches nothing, which is reported).
    s.apply_bd(json!({"driftIgnore": [
        {"paths": ["/spec/replicas"], "target": {"group": "apps", "kind": "Deployment", "name": "web"}},
        {"paths": ["/data/x"], "target": {"kind": "ConfigMap", "name": "no-such-object"}},
    ]}))
    .await;
    let ruled = s.reconcile_now(&agent, "ruled").await;
    let reported: Vec<i64> = ruled.drift_ignore.iter().map(|r| r.rule).collect();
    assert_eq!(reported, [1], "{:?}", ruled.drift_ignore);
    assert!(
        ruled.drift_ignore[0].message.contains("matches no object"),
        "{:?}",
        ruled.drift_ignore
    );
    let mark = recorder.mark();
    let mut last = 0;
    for i in 0..20 {
        last = 30 + i;
        recorder.own_write(scale(&deployments, "web", last).await);
        s.reconcile_now(&agent, &format!("ruled-{i}")).await;
        assert_eq!(replicas(&deployments, "web").await, Some(last), "kept");
    }
    // A pass after the last scaling is surely seen: what it would write is counted too.
    recorder.caught_up(&deployments, "web").await;
    s.reconcile_now(&agent, "ruled-last").await;
    recorder.caught_up(&deployments, "web").await;
    let quiet = recorder.pallet_writes("web", mark);
    println!(
        "with driftIgnore /spec/replicas: {} pallet writes over 20 scalings",
        quiet.len()
    );
    assert!(quiet.is_empty(), "pallet wrote {quiet:?}");

    // A change to another field of the Deployment is still applied, and the replicas stay.
    let mark = recorder.mark();
    s.commit(&[deployment("web", "two")], "v2");
    s.wait_applied(&agent, 2).await;
    cluster::poll_until("the new template", Duration::from_secs(60), || async {
        let d = deployments.get("web").await.map_err(|e| e.to_string())?;
        let note = d
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get("note").cloned());
        if note.as_deref() == Some("two") {
            Ok(())
        } else {
            Err(format!("note {note:?}"))
        }
    })
    .await;
    assert_eq!(replicas(&deployments, "web").await, Some(last));
    assert!(!recorder.pallet_writes("web", mark).is_empty());
    let managers: Vec<String> = deployments
        .get("web")
        .await
        .unwrap()
        .metadata
        .managed_fields
        .unwrap_or_default()
        .iter()
        .filter(|e| {
            e.fields_v1
                .as_ref()
                .is_some_and(|f| f.0["f:spec"].get("f:replicas").is_some())
        })
        .filter_map(|e| e.manager.clone())
        .collect();
    assert_eq!(managers, [SCALER], "the autoscaler alone owns replicas");
    s.cleanup().await;
}

/// A Deployment with a field its type does not have and a custom resource with one its CRD's
/// schema does not declare: applied without them (the change log says which), and then not
/// written again over ten reconciles, nor after the agent restarts.
#[tokio::test]
async fn fields_the_api_server_does_not_keep_are_not_drift() {
    let s = Scenario::new("dropped").await;
    let group = format!("{}.pallet.test", s.name);
    let crd = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: probes.{group}\n\
         spec:\n  group: {group}\n  names: {{kind: Probe, plural: probes}}\n  scope: Namespaced\n  versions:\n  \
         - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        \
         properties:\n          spec:\n            type: object\n            properties:\n              size: {{type: integer}}\n"
    );
    let probe = format!(
        "apiVersion: {group}/v1\nkind: Probe\nmetadata:\n  name: probe\nspec:\n  size: 1\n  stray: here\n"
    );
    // As OperatorHub bundles ship them: containers one level too high, and a CPU quantity the
    // server writes in another form.
    let stray = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: stray\nspec:\n  replicas: 0\n  \
        selector:\n    matchLabels: {app: stray}\n  template:\n    metadata:\n      labels: {app: stray}\n    \
        containers:\n    - name: misplaced\n      image: registry.example/app:1\n    spec:\n      containers:\n      \
        - name: app\n        image: registry.example/app:1\n        resources: {limits: {cpu: 1000m}}\n"
        .to_string();
    s.commit(&[crd, probe, stray], "v1");
    let mut agent = Agent::start(&s.name);
    s.apply_bd(json!({})).await;
    s.wait_applied(&agent, 1).await;
    let left_out: Vec<Value> = entries_for(&agent, "stray")
        .iter()
        .chain(entries_for(&agent, "probe").iter())
        .filter_map(|e| e["details"].get("fieldsLeftOut").cloned())
        .collect();
    assert_eq!(
        left_out,
        [json!([".spec.template.containers"]), json!([".spec.stray"])],
        "{}",
        agent.log_tail()
    );

    let deployments =
        Recorder::start(&s.client, &s.name, &ApiResource::erase::<Deployment>(&())).await;
    let probes = Recorder::start(
        &s.client,
        &s.name,
        &ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(&group, "v1", "Probe"),
            "probes",
        ),
    )
    .await;
    let metrics_before = agent.metrics().await;
    let (deployment_mark, probe_mark) = (deployments.mark(), probes.mark());
    let started = Instant::now();
    for i in 0..10 {
        s.reconcile_now(&agent, &format!("again-{i}")).await;
    }
    let took = started.elapsed();
    let metrics_after = agent.metrics().await;
    let writes: Vec<String> = deployments
        .pallet_writes("stray", deployment_mark)
        .into_iter()
        .chain(probes.pallet_writes("probe", probe_mark))
        .collect();
    let requests = |verb: &str, resource: &str| {
        let series =
            format!("pallet_api_requests_total{{verb=\"{verb}\",resource=\"{resource}\"}}");
        metric(&metrics_after, &series) - metric(&metrics_before, &series)
    };
    let apply_time = |m: &str| {
        (
            metric(m, "pallet_phase_seconds_sum{phase=\"apply_prune\"}"),
            metric(m, "pallet_phase_seconds_count{phase=\"apply_prune\"}"),
        )
    };
    let (sum_before, count_before) = apply_time(&metrics_before);
    let (sum_after, count_after) = apply_time(&metrics_after);
    println!(
        "10 reconciles: {} writes; requests to deployments: {} get, {} patch; to probes: {} get, \
         {} patch; apply phase {:.1} ms per pass over {} passes; {:.2} s in all",
        writes.len(),
        requests("get", "deployments"),
        requests("patch", "deployments"),
        requests("get", "probes"),
        requests("patch", "probes"),
        1000.0 * (sum_after - sum_before) / (count_after - count_before).max(1.0),
        count_after - count_before,
        took.as_secs_f64(),
    );
    assert!(writes.is_empty(), "written again: {writes:?}");
    assert_eq!(requests("patch", "deployments"), 0.0);
    assert_eq!(requests("patch", "probes"), 0.0);

    // A restarted agent knows nothing of how the server stored them: it asks (a dry-run), and
    // still writes nothing.
    agent.kill();
    let agent = agent.restart_with_env(&[]);
    let (deployment_mark, probe_mark) = (deployments.mark(), probes.mark());
    for i in 0..3 {
        s.reconcile_now(&agent, &format!("restarted-{i}")).await;
    }
    let writes: Vec<String> = deployments
        .pallet_writes("stray", deployment_mark)
        .into_iter()
        .chain(probes.pallet_writes("probe", probe_mark))
        .collect();
    let metrics = agent.metrics().await;
    let total = |verb: &str, resource: &str| {
        metric(
            &metrics,
            &format!("pallet_api_requests_total{{verb=\"{verb}\",resource=\"{resource}\"}}"),
        )
    };
    println!(
        "after a restart, 3 reconciles: {} writes; requests since the start: deployments {} get, \
         {} patch (dry-runs); probes {} get, {} patch (dry-runs)",
        writes.len(),
        total("get", "deployments"),
        total("patch", "deployments"),
        total("get", "probes"),
        total("patch", "probes"),
    );
    assert!(
        writes.is_empty(),
        "written again after a restart: {writes:?}"
    );
    s.delete_bd().await;
    let _ = Api::<CustomResourceDefinition>::all(s.client.clone())
        .delete(&format!("probes.{group}"), &Default::default())
        .await;
    s.cleanup().await;
}

/// `pallet.dev/apply: IfNotPresent`: created once, never updated (by hand edits, by new
/// revisions), created again when deleted, pruned and deleted like any object.
#[tokio::test]
async fn if_not_present_creates_once_and_never_updates() {
    let s = Scenario::new("if-absent").await;
    let seed = |value: &str| config_map("seed", value, &[("pallet.dev/apply", "IfNotPresent")]);
    s.commit(&[seed("1"), config_map("plain", "1", &[])], "v1");
    let agent = Agent::start(&s.name);
    s.apply_bd(json!({})).await;
    s.wait_applied(&agent, 1).await;
    assert_eq!(s.value("seed").await.as_deref(), Some("1"));

    s.set_value("seed", "by-hand").await;
    s.set_value("plain", "by-hand").await;
    s.reconcile_now(&agent, "edited").await;
    agent::wait_value(&s.config_maps(), "plain", "1").await;
    assert_eq!(s.value("seed").await.as_deref(), Some("by-hand"));

    s.commit(&[seed("2"), config_map("plain", "2", &[])], "v2");
    s.wait_applied(&agent, 2).await;
    agent::wait_value(&s.config_maps(), "plain", "2").await;
    assert_eq!(s.value("seed").await.as_deref(), Some("by-hand"));
    let lines = entries_for(&agent, "seed");
    let skipped: Vec<&Value> = lines.iter().filter(|e| e["result"] == "skipped").collect();
    assert!(!skipped.is_empty(), "{lines:?}");
    for line in &skipped {
        assert_eq!(line["operation"], "update");
        assert_eq!(line["reason"], "new-revision");
        assert_eq!(line["revision"], 2);
        assert_eq!(line["details"]["policy"], "pallet.dev/apply: IfNotPresent");
    }
    assert_eq!(
        lines.iter().filter(|e| e["result"] == "success").count(),
        1,
        "created once, never updated: {lines:?}"
    );
    let inventory = s.status().await.inventory.unwrap_or_default();
    assert!(inventory.objects.iter().any(|o| o.name == "seed"));

    // Deleted by someone: created again, with the bundle's value.
    s.config_maps()
        .delete("seed", &Default::default())
        .await
        .unwrap();
    s.reconcile_now(&agent, "deleted").await;
    agent::wait_value(&s.config_maps(), "seed", "2").await;

    // Dropped from the bundle: pruned like any object.
    s.commit(&[config_map("plain", "3", &[])], "v3");
    s.wait_applied(&agent, 3).await;
    cluster::poll_until("seed pruned", Duration::from_secs(60), || async {
        match s
            .config_maps()
            .get_opt("seed")
            .await
            .map_err(|e| e.to_string())?
        {
            None => Ok(()),
            Some(_) => Err("still there".into()),
        }
    })
    .await;
    // And deleted with the BundleDeployment.
    s.commit(&[seed("4"), config_map("plain", "4", &[])], "v4");
    s.wait_applied(&agent, 4).await;
    assert_eq!(s.value("seed").await.as_deref(), Some("4"));
    s.delete_bd().await;
    assert!(s.config_maps().get_opt("seed").await.unwrap().is_none());
    s.cleanup().await;
}

/// `pallet.dev/apply: Ignore`: in the revision, never applied, not in the inventory, never
/// pruned or deleted; the change log says so.
#[tokio::test]
async fn ignore_renders_but_never_applies() {
    let s = Scenario::new("apply-ignore").await;
    let ignored = || config_map("aside", "bundle", &[("pallet.dev/apply", "Ignore")]);
    s.commit(&[ignored(), config_map("plain", "1", &[])], "v1");
    let agent = Agent::start(&s.name);
    s.apply_bd(json!({})).await;
    let status = s.wait_applied(&agent, 1).await;
    assert!(s.config_maps().get_opt("aside").await.unwrap().is_none());
    assert_eq!(status.revisions[0].objects, 2, "rendered into the revision");
    let inventory = status.inventory.unwrap_or_default();
    assert!(!inventory.objects.iter().any(|o| o.name == "aside"));
    let lines = entries_for(&agent, "aside");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["operation"], "create");
    assert_eq!(lines[0]["result"], "skipped");
    assert_eq!(lines[0]["details"]["policy"], "pallet.dev/apply: Ignore");

    // One made by hand is left as it is, by drift passes and new revisions.
    let handmade: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "aside"}, "data": {"value": "by-hand"}}))
    .unwrap();
    s.config_maps()
        .create(&Default::default(), &handmade)
        .await
        .unwrap();
    s.reconcile_now(&agent, "handmade").await;
    s.commit(&[ignored(), config_map("plain", "2", &[])], "v2");
    s.wait_applied(&agent, 2).await;
    assert_eq!(s.value("aside").await.as_deref(), Some("by-hand"));
    // Not pruned when the bundle drops it, not deleted with the BundleDeployment.
    s.commit(&[config_map("plain", "3", &[])], "v3");
    s.wait_applied(&agent, 3).await;
    s.delete_bd().await;
    assert_eq!(s.value("aside").await.as_deref(), Some("by-hand"));
    assert!(s.config_maps().get_opt("plain").await.unwrap().is_none());
    s.cleanup().await;
}

/// `pallet.dev/prune: Disabled` and `helm.sh/resource-policy: keep`: kept when a revision drops
/// them and when the BundleDeployment is deleted, without pallet's label; the change log says
/// why.
#[tokio::test]
async fn prune_disabled_and_helm_keep_survive_prune_and_deletion() {
    let s = Scenario::new("keep").await;
    let kept = || config_map("kept", "1", &[("pallet.dev/prune", "Disabled")]);
    let helm_kept = || config_map("helm-kept", "1", &[("helm.sh/resource-policy", "keep")]);
    s.commit(&[kept(), helm_kept(), config_map("gone", "1", &[])], "v1");
    let agent = Agent::start(&s.name);
    s.apply_bd(json!({})).await;
    s.wait_applied(&agent, 1).await;
    assert_eq!(
        s.owner_label("kept").await.as_deref(),
        Some(s.name.as_str())
    );

    // Dropped from the bundle: `gone` is pruned, `kept` stays, unlabelled.
    s.commit(&[helm_kept()], "v2");
    s.wait_applied(&agent, 2).await;
    cluster::poll_until("gone pruned", Duration::from_secs(60), || async {
        match s
            .config_maps()
            .get_opt("gone")
            .await
            .map_err(|e| e.to_string())?
        {
            None => Ok(()),
            Some(_) => Err("still there".into()),
        }
    })
    .await;
    assert_eq!(s.value("kept").await.as_deref(), Some("1"));
    assert_eq!(s.owner_label("kept").await, None);
    let lines = entries_for(&agent, "kept");
    let last = lines.last().unwrap();
    assert_eq!(last["reason"], "prune", "{lines:?}");
    assert_eq!(last["details"]["policy"], "pallet.dev/prune: Disabled");
    assert_eq!(last["details"]["orphaned"], true);
    let inventory = s.status().await.inventory.unwrap_or_default();
    assert!(!inventory.objects.iter().any(|o| o.name == "kept"));

    // Deleted with the BundleDeployment: the helm-kept one stays.
    s.delete_bd().await;
    assert_eq!(s.value("helm-kept").await.as_deref(), Some("1"));
    assert_eq!(s.owner_label("helm-kept").await, None);
    let lines = entries_for(&agent, "helm-kept");
    let last = lines.last().unwrap();
    assert_eq!(last["reason"], "deletion", "{lines:?}");
    assert_eq!(last["details"]["policy"], "helm.sh/resource-policy: keep");
    assert_eq!(s.value("kept").await.as_deref(), Some("1"));
    s.cleanup().await;
}

/// `pallet.dev/drift: Ignore`: others' changes stay between revisions (and are not reported as
/// drift while paused); a new revision applies the bundle's content.
#[tokio::test]
async fn drift_ignore_leaves_changes_until_the_next_revision() {
    let s = Scenario::new("drift-ignore").await;
    let tuned = |value: &str| config_map("tuned", value, &[("pallet.dev/drift", "Ignore")]);
    s.commit(&[tuned("1"), config_map("plain", "1", &[])], "v1");
    let agent = Agent::start(&s.name);
    s.apply_bd(json!({})).await;
    s.wait_applied(&agent, 1).await;

    s.set_value("tuned", "by-hand").await;
    s.set_value("plain", "by-hand").await;
    s.reconcile_now(&agent, "edited").await;
    agent::wait_value(&s.config_maps(), "plain", "1").await;
    assert_eq!(s.value("tuned").await.as_deref(), Some("by-hand"));

    // Paused: the drift report leaves it out.
    s.bds()
        .patch(
            &s.name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    s.wait_status(&agent, "paused", |st| {
        st.conditions
            .iter()
            .any(|c| c.type_ == "Paused" && c.status == "True")
    })
    .await;
    s.set_value("plain", "again").await;
    let paused = s.reconcile_now(&agent, "paused").await;
    let drifted: Vec<String> = paused
        .drift
        .map(|d| d.objects.into_iter().map(|o| o.name).collect())
        .unwrap_or_default();
    assert_eq!(drifted, ["plain"]);
    s.bds()
        .patch(
            &s.name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"paused": false}})),
        )
        .await
        .unwrap();

    s.commit(&[tuned("2"), config_map("plain", "2", &[])], "v2");
    s.wait_applied(&agent, 2).await;
    agent::wait_value(&s.config_maps(), "tuned", "2").await;
    s.delete_bd().await;
    assert!(s.config_maps().get_opt("tuned").await.unwrap().is_none());
    s.cleanup().await;
}
