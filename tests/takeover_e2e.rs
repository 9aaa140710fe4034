//! Moving in: a BundleDeployment takes over, in place, what `helm install` (the real helm), a
//! Flux Kustomization and an Argo CD Application installed, by the README's guide ("Move in from
//! Helm, Flux or Argo CD"): every shell command of the guide is run as written, with this test's
//! names, chart repository and file server substituted, and checked in between.
//!
//! What must hold: every object keeps its UID; no object is deleted (DELETED events counted by
//! watches on the API server, which see every client's and every controller's deletes); the
//! Deployment is not rolled (same generation, same ReplicaSet, same Pods); the previous tool's
//! markers and field managers are gone; and removing the previous tool afterwards (`helm
//! uninstall`, deleting the Kustomization or the Application) deletes nothing.
//!
//! Flux's and Argo CD's controllers are not run here: their objects are written as they write
//! them (kustomize-controller's server-side apply with its labels; Argo CD's client-side apply
//! with its tracking annotation, instance label and last-applied record), with stand-in
//! CustomResourceDefinitions for Kustomization and Application when the cluster has none. What
//! those controllers would delete is checked by their own rules: kustomize-controller deletes
//! only objects whose labels match its Kustomization's (fluxcd/pkg `ssa.DeleteOptions`
//! inclusions), Argo CD cascades only to objects its tracking names.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/chart_repo.rs"]
mod chart_repo;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Client, Resource, ResourceExt};
use pallet::api::BundleDeployment;
use serde_json::{json, Value};

use agent::Agent;

const TIMEOUT: Duration = Duration::from_secs(180);

/// The adoption guide's blocks for one tool: `<!-- takeover: TOOL WHAT [FILE] -->` before a
/// fenced block. Returns (what, file, body) in the guide's order.
fn guide(tool: &str) -> Vec<(String, Option<String>, String)> {
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/guides/adopting.md"
    ))
    .expect("docs/guides/adopting.md");
    let mut blocks = Vec::new();
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        let Some(marker) = line
            .strip_prefix("<!-- takeover: ")
            .and_then(|l| l.strip_suffix(" -->"))
        else {
            continue;
        };
        let mut words = marker.split_whitespace();
        if words.next() != Some(tool) {
            continue;
        }
        let what = words.next().expect("a step name").to_string();
        let file = words.next().map(str::to_string);
        let fence = lines.next().expect("a fenced block after the marker");
        assert!(
            fence.starts_with("```"),
            "{marker}: expected a fenced block"
        );
        let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        blocks.push((what, file, body.join("\n") + "\n"));
    }
    assert!(
        !blocks.is_empty(),
        "the adoption guide has no steps for {tool}"
    );
    blocks
}

/// The body of the guide's block `what`.
fn block(blocks: &[(String, Option<String>, String)], what: &str) -> (Option<String>, String) {
    blocks
        .iter()
        .find(|(w, _, _)| w == what)
        .map(|(_, file, body)| (file.clone(), body.clone()))
        .unwrap_or_else(|| panic!("the guide has no `{what}` step"))
}

/// `text` with every whole-word `word` (not inside a longer name) replaced by `with`.
fn replace_word(text: &str, word: &str, with: &str) -> String {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (at, _) in text.match_indices(word) {
        if at < last {
            continue;
        }
        let before = text[..at].chars().last();
        let after = text[at + word.len()..].chars().next();
        if before.is_some_and(is_name) || after.is_some_and(is_name) {
            continue;
        }
        out.push_str(&text[last..at]);
        out.push_str(with);
        last = at + word.len();
    }
    out.push_str(&text[last..]);
    out
}

/// Where the guide's commands run: a scratch directory, with `pallet`, `kubectl` and `helm` on
/// the PATH, the admin kubeconfig, and helm's homes inside the scratch directory.
struct Shell {
    dir: tempfile::TempDir,
    path: String,
    substitutions: Vec<(String, String)>,
    words: Vec<(String, String)>,
}

impl Shell {
    fn new(substitutions: &[(&str, &str)], words: &[(&str, &str)]) -> Shell {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        // `pallet plan` fetches from the fixture servers on 127.0.0.1, which only
        // --allow-loopback-egress permits; the guide's command is run with that flag added.
        let pallet = bin.join("pallet");
        std::fs::write(
            &pallet,
            format!(
                "#!/bin/sh\nif [ \"$1\" = plan ]; then exec {real} \"$@\" --allow-loopback-egress; fi\nexec {real} \"$@\"\n",
                real = env!("CARGO_BIN_EXE_pallet")
            ),
        )
        .unwrap();
        std::fs::set_permissions(&pallet, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let home = PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/pallet/bin");
        std::os::unix::fs::symlink(home.join("kubectl"), bin.join("kubectl")).unwrap();
        std::os::unix::fs::symlink(chart_repo::helm(), bin.join("helm")).unwrap();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let own = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        Shell {
            dir,
            path,
            substitutions: own(substitutions),
            words: own(words),
        }
    }

    fn substitute(&self, text: &str) -> String {
        let mut text = text.to_string();
        for (from, to) in &self.substitutions {
            text = text.replace(from, to);
        }
        for (word, with) in &self.words {
            text = replace_word(&text, word, with);
        }
        text
    }

    /// Writes the guide's file (substituted), labelled so that only this test's agent takes it.
    fn write(&self, file: &str, body: &str, name: &str) {
        let body = self.substitute(body).replacen(
            &format!("metadata:\n  name: {name}\n"),
            &format!(
                "metadata:\n  name: {name}\n  labels: {{{}: {name}}}\n",
                agent::TEST_LABEL
            ),
            1,
        );
        assert!(body.contains(agent::TEST_LABEL), "{body}");
        std::fs::write(self.dir.path().join(self.substitute(file)), body).unwrap();
    }

    /// Runs each command of a guide block; returns each command's stdout.
    fn run_block(&self, body: &str) -> Vec<(String, String)> {
        body.lines()
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .map(|command| {
                let command = self.substitute(command);
                let stdout = self.run(&command);
                (command, stdout)
            })
            .collect()
    }

    fn run(&self, command: &str) -> String {
        let helm_home = self.dir.path().join("helm");
        let out = Command::new("bash")
            .args(["-o", "pipefail", "-c", command])
            .current_dir(self.dir.path())
            .env("PATH", &self.path)
            .env("KUBECONFIG", cluster::kubeconfig_path())
            .env("HELM_CACHE_HOME", helm_home.join("cache"))
            .env("HELM_CONFIG_HOME", helm_home.join("config"))
            .env("HELM_DATA_HOME", helm_home.join("data"))
            .env("PALLET_FETCH_CACHE", self.dir.path().join("fetch-cache"))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "guide command failed: {command}\nstdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }
}

/// Counts DELETED events in a namespace, for every kind an application here has, from watches
/// started before the takeover: the API server's own account of deletes, by any client or
/// controller.
struct DeleteWatch {
    deleted: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl DeleteWatch {
    async fn start(client: &Client, namespace: &str) -> DeleteWatch {
        let deleted = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        macro_rules! watch {
            ($kind:ty) => {{
                let api: Api<$kind> = Api::namespaced(client.clone(), namespace);
                let version = api
                    .list_metadata(&ListParams::default().limit(1))
                    .await
                    .unwrap()
                    .metadata
                    .resource_version
                    .unwrap();
                let deleted = deleted.clone();
                let kind = <$kind as Resource>::kind(&()).to_string();
                tasks.push(tokio::spawn(watch_deletes(api, version, kind, deleted)));
            }};
        }
        watch!(ConfigMap);
        watch!(Secret);
        watch!(Service);
        watch!(ServiceAccount);
        watch!(Deployment);
        watch!(ReplicaSet);
        watch!(Pod);
        DeleteWatch { deleted, tasks }
    }

    /// What was deleted so far, as `Kind/name`.
    fn deleted(&self) -> Vec<String> {
        self.deleted.lock().unwrap().clone()
    }
}

impl Drop for DeleteWatch {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Records each DELETED event of `api` from `version` on, as `Kind/name`; a watch that fails is
/// recorded too (so the count of deletes can never pass by missing events).
async fn watch_deletes<K>(
    api: Api<K>,
    mut version: String,
    kind: String,
    out: Arc<Mutex<Vec<String>>>,
) where
    K: Clone + serde::de::DeserializeOwned + Resource + std::fmt::Debug + Send + 'static,
{
    let failed = |why: String| {
        out.lock()
            .unwrap()
            .push(format!("{kind}: watch failed: {why}"))
    };
    loop {
        let mut stream = match api
            .watch(&WatchParams::default().timeout(290), &version)
            .await
        {
            Ok(stream) => stream.boxed(),
            Err(e) => return failed(e.to_string()),
        };
        loop {
            let event = match stream.try_next().await {
                Ok(Some(event)) => event,
                Ok(None) => break, // the server's timeout: watch again from where it was
                Err(e) => return failed(e.to_string()),
            };
            match event {
                WatchEvent::Deleted(object) => {
                    let name = object.meta().name.clone().unwrap_or_default();
                    out.lock().unwrap().push(format!("{kind}/{name}"));
                    version = object.meta().resource_version.clone().unwrap_or(version);
                }
                WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                    version = o.meta().resource_version.clone().unwrap_or(version);
                }
                WatchEvent::Bookmark(b) => version = b.metadata.resource_version,
                WatchEvent::Error(e) => return failed(format!("{e:?}")),
            }
        }
    }
}

/// Identity and rollout state of the application's objects, to compare before and after.
#[derive(Debug, PartialEq)]
struct Snapshot {
    /// `Kind/name` → UID.
    uids: BTreeMap<String, String>,
    /// The Deployment's pod template (labels, annotations, containers).
    template: Value,
    /// ReplicaSets (named after the pod template's hash) and Pods (`name uid`), which a
    /// rollout would replace.
    replica_sets: Vec<String>,
    pods: Vec<String>,
}

/// The Deployment's generation. The API server counts any change to a Deployment's annotations
/// as a new generation (it copies them to the ReplicaSet), and an adoption changes them once:
/// pallet's revision annotation in, the previous tool's markers out, in one write.
async fn generation(client: &Client, namespace: &str, name: &str) -> i64 {
    Api::<Deployment>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .unwrap()
        .metadata
        .generation
        .unwrap()
}

async fn snapshot(client: &Client, namespace: &str, objects: &[(&str, &str)]) -> Snapshot {
    let mut uids = BTreeMap::new();
    for (kind, name) in objects {
        uids.insert(
            format!("{kind}/{name}"),
            uid_of(client, namespace, kind, name).await,
        );
    }
    let deployment = objects
        .iter()
        .find(|(kind, _)| *kind == "Deployment")
        .map(|(_, name)| *name)
        .expect("a Deployment");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let template = serde_json::to_value(
        deployments
            .get(deployment)
            .await
            .unwrap()
            .spec
            .unwrap()
            .template,
    )
    .unwrap();
    let names = |list: Vec<(String, String)>| {
        let mut v: Vec<String> = list.into_iter().map(|(n, u)| format!("{n} {u}")).collect();
        v.sort();
        v
    };
    let rs: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    Snapshot {
        uids,
        template,
        replica_sets: names(
            rs.list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .map(|r| (r.name_any(), r.uid().unwrap()))
                .collect(),
        ),
        pods: names(
            pods.list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .map(|p| (p.name_any(), p.uid().unwrap()))
                .collect(),
        ),
    }
}

fn resource_of(kind: &str) -> ApiResource {
    let (group, version, plural) = match kind {
        "ConfigMap" => ("", "v1", "configmaps"),
        "Secret" => ("", "v1", "secrets"),
        "Service" => ("", "v1", "services"),
        "ServiceAccount" => ("", "v1", "serviceaccounts"),
        "Deployment" => ("apps", "v1", "deployments"),
        other => panic!("no resource for {other}"),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

async fn live_object(client: &Client, namespace: &str, kind: &str, name: &str) -> DynamicObject {
    Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource_of(kind))
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("{kind} {namespace}/{name}: {e}"))
}

async fn uid_of(client: &Client, namespace: &str, kind: &str, name: &str) -> String {
    live_object(client, namespace, kind, name)
        .await
        .metadata
        .uid
        .unwrap()
}

/// Waits until the Deployment has all its replicas available (Pods exist to be replaced, if a
/// rollout happened).
async fn wait_available(client: &Client, namespace: &str, name: &str, replicas: i32) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    cluster::poll_until(
        &format!("Deployment {namespace}/{name} available"),
        TIMEOUT,
        || async {
            let d = api.get(name).await.map_err(|e| e.to_string())?;
            let available = d.status.as_ref().and_then(|s| s.available_replicas);
            (available == Some(replicas))
                .then_some(())
                .ok_or(format!("{:?}", d.status))
        },
    )
    .await;
}

/// Asserts that no object carries the previous tool's markers or field managers, and that each
/// is pallet's.
async fn assert_released(
    client: &Client,
    namespace: &str,
    objects: &[(&str, &str)],
    owner: &str,
    managers: &[&str],
    markers: &[&str],
) {
    for (kind, name) in objects {
        let live = live_object(client, namespace, kind, name).await;
        let labels = live.metadata.labels.clone().unwrap_or_default();
        let annotations = live.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            labels
                .get(pallet::apply::plan::OWNER_LABEL)
                .map(String::as_str),
            Some(owner),
            "{kind}/{name} is pallet's"
        );
        for marker in markers {
            assert!(
                !labels.contains_key(*marker) && !annotations.contains_key(*marker),
                "{kind}/{name} still carries {marker}: {labels:?} {annotations:?}"
            );
        }
        let entries: Vec<(String, String)> = live
            .metadata
            .managed_fields
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|m| {
                (
                    m.manager.unwrap_or_default(),
                    m.operation.unwrap_or_default(),
                )
            })
            .collect();
        for manager in managers {
            assert!(
                !entries.iter().any(|(m, _)| m == manager),
                "{kind}/{name} still has field manager {manager}: {entries:?}"
            );
        }
        assert!(
            entries.iter().any(|(m, op)| m == "pallet" && op == "Apply"),
            "{kind}/{name}: {entries:?}"
        );
    }
}

async fn namespace_with_fake_kubelet(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"pallet.dev/fake-kubelet": "on"}}
    }))
    .unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

async fn delete_namespace(client: &Client, name: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

async fn delete_bd(client: &Client, name: &str) {
    let _ = Api::<BundleDeployment>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
    agent::wait_bd_gone(client, name).await;
}

#[tokio::test]
async fn a_helm_release_is_taken_over_in_place_and_helm_uninstall_then_deletes_nothing() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let repo = chart_repo::ChartRepo::new(fx, "takeover-charts");
    repo.package_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/charts/storefront"),
        "1.0.0",
    );
    repo.index(None);
    let name = cluster::unique_name("shop");
    namespace_with_fake_kubelet(&client, &name).await;
    let agent = Agent::start(&name);
    let repo_url = repo.url(fx.http_plain());
    let shell = Shell::new(
        &[("https://charts.example", repo_url.as_str())],
        &[("shop", name.as_str())],
    );
    let steps = guide("helm");

    let (_, installed) = block(&steps, "installed");
    shell.run_block(&installed);
    wait_available(&client, &name, &name, 2).await;
    let objects = [
        ("ServiceAccount", name.as_str()),
        ("ConfigMap", &format!("{name}-config")),
        ("Secret", &format!("{name}-token")),
        ("Service", name.as_str()),
        ("Deployment", name.as_str()),
    ]
    .map(|(k, n)| (k, n.to_string()));
    let objects: Vec<(&str, &str)> = objects.iter().map(|(k, n)| (*k, n.as_str())).collect();
    let hook = format!("{name}-installed");
    let hook_uid = uid_of(&client, &name, "ConfigMap", &hook).await;
    let before = snapshot(&client, &name, &objects).await;
    let generation_before = generation(&client, &name, &name).await;
    let deletes = DeleteWatch::start(&client, &name).await;

    let (file, bd) = block(&steps, "file");
    shell.write(&file.expect("a file name"), &bd, &name);
    let (_, moving) = block(&steps, "move");
    let out = shell.run_block(&moving);
    let plan = &out
        .iter()
        .find(|(c, _)| c.starts_with("pallet plan"))
        .expect("the guide plans first")
        .1;
    assert!(
        plan.contains(&format!("Helm release {name}/{name}")),
        "the plan names what it takes over:\n{plan}"
    );
    let takeover = &out
        .iter()
        .find(|(c, _)| c.contains("status.takeover"))
        .expect("the guide shows status.takeover")
        .1;
    assert!(
        takeover.contains("\"releaseRecords\":\"MarkedUninstalled\""),
        "{takeover}"
    );
    let listed = &out.last().expect("helm list").1;
    assert!(
        listed.contains(&name) && listed.contains("uninstalled"),
        "helm lists the release as uninstalled:\n{listed}"
    );

    // The same objects, nothing rolled, nothing deleted.
    let after = snapshot(&client, &name, &objects).await;
    assert_eq!(
        after, before,
        "objects, ReplicaSets and Pods are the same ones"
    );
    assert_eq!(
        generation(&client, &name, &name).await,
        generation_before + 1,
        "one metadata write"
    );
    assert_eq!(
        uid_of(&client, &name, "ConfigMap", &hook).await,
        hook_uid,
        "install hooks did not run again"
    );
    assert_released(
        &client,
        &name,
        &objects,
        &name,
        &["helm"],
        &[
            "meta.helm.sh/release-name",
            "meta.helm.sh/release-namespace",
        ],
    )
    .await;
    let records: Api<Secret> = Api::namespaced(client.clone(), &name);
    let record = records
        .list(&ListParams::default().labels(&format!("owner=helm,name={name}")))
        .await
        .unwrap();
    assert_eq!(record.items.len(), 1);
    assert_eq!(record.items[0].labels()["status"], "uninstalled");

    let (_, after_step) = block(&steps, "after");
    let out = shell.run_block(&after_step);
    assert!(out[0].1.contains("uninstalled"), "{:?}", out[0]);
    assert!(
        records
            .list(&ListParams::default().labels(&format!("owner=helm,name={name}")))
            .await
            .unwrap()
            .items
            .is_empty(),
        "helm uninstall removed its records"
    );
    let still = snapshot(&client, &name, &objects).await;
    assert_eq!(still, before, "helm uninstall deleted nothing");
    let deleted: Vec<String> = deletes
        .deleted()
        .into_iter()
        .filter(|d| !d.starts_with(&format!("Secret/sh.helm.release.v1.{name}.")))
        .collect();
    assert_eq!(deleted, Vec::<String>::new(), "no object was deleted");
    let adoptions: Vec<_> = agent
        .change_entries()
        .into_iter()
        .filter(|e| e["reason"] == "adoption")
        .collect();
    assert_eq!(adoptions.len(), objects.len(), "{adoptions:#?}");
    assert!(adoptions
        .iter()
        .all(|e| e["details"]["previousOwner"] == format!("Helm release {name}/{name}")));

    // pallet owns it all now: deleting the BundleDeployment deletes the objects.
    delete_bd(&client, &name).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &name);
    assert!(deployments.get_opt(&name).await.unwrap().is_none());
    drop(agent);
    delete_namespace(&client, &name).await;
}

/// A CustomResourceDefinition that stands in for a tool's own (any content accepted), applied
/// when the cluster does not serve the kind yet.
async fn stand_in_crd(client: &Client, group: &str, version: &str, kind: &str, plural: &str) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = format!("{plural}.{group}");
    if crds.get_opt(&name).await.unwrap().is_some() {
        return;
    }
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
            "versions": [{"name": version, "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .unwrap();
    let _ = crds
        .patch(
            &name,
            &PatchParams::apply("takeover-test").force(),
            &Patch::Apply(&crd),
        )
        .await;
    cluster::poll_until(&format!("CRD {name} established"), TIMEOUT, || async {
        let crd = crds.get(&name).await.map_err(|e| e.to_string())?;
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        established
            .then_some(())
            .ok_or_else(|| "not yet".to_string())
    })
    .await;
}

/// The application both the Flux and the Argo CD case hold: a ConfigMap, a Service and a
/// Deployment in `namespace`, as plain manifests.
fn application(namespace: &str, name: &str) -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": format!("{name}-config"), "namespace": namespace, "labels": {"app": name}},
               "data": {"greeting": "hello"}}),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
               "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
               "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}},
                                     "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                                                              "ports": [{"containerPort": 8080}]}]}}}}),
    ]
}

fn kind_name(object: &Value) -> (String, String) {
    (
        object["kind"].as_str().unwrap().to_string(),
        object["metadata"]["name"].as_str().unwrap().to_string(),
    )
}

fn with_metadata(object: &Value, labels: Value, annotations: Value) -> Value {
    let mut object = object.clone();
    let meta = object["metadata"].as_object_mut().unwrap();
    let merged_labels = meta
        .get("labels")
        .cloned()
        .unwrap_or(json!({}))
        .as_object()
        .unwrap()
        .clone()
        .into_iter()
        .chain(labels.as_object().unwrap().clone())
        .collect::<serde_json::Map<_, _>>();
    meta.insert("labels".into(), Value::Object(merged_labels));
    meta.insert("annotations".into(), annotations);
    object
}

/// Publishes the application's manifests on the file server at `/<name>/manifests.yaml`.
fn publish(fx: &support::Fixtures, name: &str, objects: &[Value]) {
    let yaml: String = objects
        .iter()
        .map(|o| format!("---\n{}", serde_saphyr::to_string(o).unwrap()))
        .collect();
    fx.put_file(&format!("{name}/manifests.yaml"), yaml.as_bytes());
}

#[tokio::test]
async fn a_flux_kustomizations_objects_are_taken_over_and_flux_then_prunes_nothing() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    stand_in_crd(
        &client,
        "kustomize.toolkit.fluxcd.io",
        "v1",
        "Kustomization",
        "kustomizations",
    )
    .await;
    let fx = support::Fixtures::load();
    let name = cluster::unique_name("web");
    let flux_ns = cluster::unique_name("flux");
    namespace_with_fake_kubelet(&client, &name).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": flux_ns}})).unwrap(),
        )
        .await
        .unwrap();
    let objects = application(&name, &name);
    publish(fx, &name, &objects);

    // As kustomize-controller applies a Kustomization's objects: server-side apply, forced, as
    // field manager kustomize-controller, with its two owner labels.
    let flux_labels = json!({"kustomize.toolkit.fluxcd.io/name": name, "kustomize.toolkit.fluxcd.io/namespace": flux_ns});
    for object in &objects {
        let (kind, object_name) = kind_name(object);
        let api = Api::<DynamicObject>::namespaced_with(client.clone(), &name, &resource_of(&kind));
        let body = with_metadata(object, flux_labels.clone(), json!({}));
        api.patch(
            &object_name,
            &PatchParams::apply("kustomize-controller").force(),
            &Patch::Apply(&body),
        )
        .await
        .unwrap();
    }
    let kustomizations = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &flux_ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
            "kustomizations",
        ),
    );
    let kustomization: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": name, "namespace": flux_ns},
        "spec": {"interval": "10m", "path": "./", "prune": true,
                 "sourceRef": {"kind": "GitRepository", "name": name}, "targetNamespace": name}
    }))
    .unwrap();
    kustomizations
        .create(&PostParams::default(), &kustomization)
        .await
        .unwrap();
    wait_available(&client, &name, &name, 2).await;

    let kinds: Vec<(String, String)> = objects.iter().map(kind_name).collect();
    let kinds: Vec<(&str, &str)> = kinds
        .iter()
        .map(|(k, n)| (k.as_str(), n.as_str()))
        .collect();
    let before = snapshot(&client, &name, &kinds).await;
    let generation_before = generation(&client, &name, &name).await;
    let deletes = DeleteWatch::start(&client, &name).await;
    let agent = Agent::start(&name);
    let shell = Shell::new(
        &[
            ("https://files.example", fx.http_plain().url.as_str()),
            ("flux-system", flux_ns.as_str()),
        ],
        &[("web", name.as_str())],
    );
    let steps = guide("flux");
    let (file, bd) = block(&steps, "file");
    shell.write(&file.expect("a file name"), &bd, &name);
    let (_, moving) = block(&steps, "move");
    shell.run_block(&moving);

    assert_eq!(
        snapshot(&client, &name, &kinds).await,
        before,
        "the same objects, nothing rolled"
    );
    assert_eq!(
        generation(&client, &name, &name).await,
        generation_before + 1,
        "one metadata write"
    );
    assert_released(
        &client,
        &name,
        &kinds,
        &name,
        &["kustomize-controller"],
        &[
            "kustomize.toolkit.fluxcd.io/name",
            "kustomize.toolkit.fluxcd.io/namespace",
        ],
    )
    .await;
    // kustomize-controller's garbage collection deletes only objects matching this selector.
    let selector = format!(
        "kustomize.toolkit.fluxcd.io/name={name},kustomize.toolkit.fluxcd.io/namespace={flux_ns}"
    );
    for (kind, _) in &kinds {
        let api = Api::<DynamicObject>::namespaced_with(client.clone(), &name, &resource_of(kind));
        let claimed = api
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap();
        assert!(
            claimed.items.is_empty(),
            "Flux would still prune {kind}s: {:?}",
            claimed.items
        );
    }
    assert!(
        kustomizations.get_opt(&name).await.unwrap().is_none(),
        "the Kustomization is gone"
    );
    assert_eq!(
        deletes.deleted(),
        Vec::<String>::new(),
        "no object was deleted"
    );

    delete_bd(&client, &name).await;
    drop(agent);
    delete_namespace(&client, &name).await;
    delete_namespace(&client, &flux_ns).await;
}

#[tokio::test]
async fn an_argo_cd_applications_objects_are_taken_over_and_deleting_it_then_deletes_nothing() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    stand_in_crd(
        &client,
        "argoproj.io",
        "v1alpha1",
        "Application",
        "applications",
    )
    .await;
    let fx = support::Fixtures::load();
    let name = cluster::unique_name("guestbook");
    let argo_ns = cluster::unique_name("argocd");
    namespace_with_fake_kubelet(&client, &name).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": argo_ns}})).unwrap(),
        )
        .await
        .unwrap();
    let objects = application(&name, &name);
    publish(fx, &name, &objects);

    // As Argo CD syncs with client-side apply: a create as field manager argocd-controller,
    // with the tracking annotation, the instance label and kubectl's last-applied record.
    for object in &objects {
        let (kind, object_name) = kind_name(object);
        let group = object["apiVersion"]
            .as_str()
            .unwrap()
            .rsplit_once('/')
            .map_or("", |(g, _)| g);
        let tracking = format!("{name}:{group}/{kind}:{name}/{object_name}");
        let body = with_metadata(
            object,
            json!({"app.kubernetes.io/instance": name}),
            json!({"argocd.argoproj.io/tracking-id": tracking,
                   "kubectl.kubernetes.io/last-applied-configuration": object.to_string()}),
        );
        let api = Api::<DynamicObject>::namespaced_with(client.clone(), &name, &resource_of(&kind));
        let params = PostParams {
            field_manager: Some("argocd-controller".into()),
            ..Default::default()
        };
        api.create(&params, &serde_json::from_value(body).unwrap())
            .await
            .unwrap();
    }
    let applications = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &argo_ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application"),
            "applications",
        ),
    );
    // With Argo CD's resources finalizer: deleting it would cascade to its objects.
    let application_object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": argo_ns,
                     "finalizers": ["resources-finalizer.argocd.argoproj.io"]},
        "spec": {"project": "default", "destination": {"namespace": name},
                 "source": {"repoURL": "https://git.example/guestbook.git", "path": "."}}
    }))
    .unwrap();
    applications
        .create(&PostParams::default(), &application_object)
        .await
        .unwrap();
    wait_available(&client, &name, &name, 2).await;

    let kinds: Vec<(String, String)> = objects.iter().map(kind_name).collect();
    let kinds: Vec<(&str, &str)> = kinds
        .iter()
        .map(|(k, n)| (k.as_str(), n.as_str()))
        .collect();
    let before = snapshot(&client, &name, &kinds).await;
    let generation_before = generation(&client, &name, &name).await;
    let deletes = DeleteWatch::start(&client, &name).await;
    let agent = Agent::start(&name);
    let shell = Shell::new(
        &[
            ("https://files.example", fx.http_plain().url.as_str()),
            ("--namespace argocd ", &format!("--namespace {argo_ns} ")),
            ("namespace: argocd", &format!("namespace: {argo_ns}")),
        ],
        &[("guestbook", name.as_str())],
    );
    let steps = guide("argocd");
    let (file, bd) = block(&steps, "file");
    shell.write(&file.expect("a file name"), &bd, &name);
    let (_, moving) = block(&steps, "move");
    shell.run_block(&moving);

    assert_eq!(
        snapshot(&client, &name, &kinds).await,
        before,
        "the same objects, nothing rolled"
    );
    assert_eq!(
        generation(&client, &name, &name).await,
        generation_before + 1,
        "one metadata write"
    );
    assert_released(
        &client,
        &name,
        &kinds,
        &name,
        &["argocd-controller"],
        &[
            "argocd.argoproj.io/tracking-id",
            "app.kubernetes.io/instance",
            "kubectl.kubernetes.io/last-applied-configuration",
        ],
    )
    .await;
    assert!(
        applications.get_opt(&name).await.unwrap().is_none(),
        "the Application is gone"
    );
    assert_eq!(
        deletes.deleted(),
        Vec::<String>::new(),
        "no object was deleted"
    );

    delete_bd(&client, &name).await;
    drop(agent);
    delete_namespace(&client, &name).await;
    delete_namespace(&client, &argo_ns).await;
}

#[test]
fn whole_words_are_replaced_and_longer_names_kept() {
    assert_eq!(
        replace_word(
            "helm install shop storefront -n shop -f shop.yaml bd/shop",
            "shop",
            "x-1"
        ),
        "helm install x-1 storefront -n x-1 -f x-1.yaml bd/x-1"
    );
    assert_eq!(
        replace_word("webshop shop-config", "shop", "x"),
        "webshop shop-config"
    );
}
