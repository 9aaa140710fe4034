//! Watches on the objects `spec.dependsOn` names (and, during deletion, on the dependents a
//! dependency waits for), so that a BundleDeployment starts the moment what it waits for
//! changes: a dependency's status write becoming Ready=True, a ConfigMap's key set, a dependent
//! gone. The poll is not what starts it.
//!
//! One metadata-only watch per referenced object, selected by a `metadata.name` field selector
//! (in its namespace), started when a pass first names it and stopped when no BundleDeployment
//! names it any more. A change of resourceVersion (a status write included) reconciles the
//! readers; the pass reads what it needs.

use std::collections::HashMap;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::discovery::ApiResource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use tokio::sync::mpsc;

use super::values_watch::{Registry, Seen};
use crate::api::BundleDeployment;

/// A watched object: its API resource, namespace (None: cluster-scoped) and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WatchedObject {
    /// API group ("" for the core group).
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural resource name, as discovery gave it.
    pub plural: String,
    /// Namespace of a namespaced object.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl WatchedObject {
    /// The object `name` of `resource`, in `namespace` when it is namespaced.
    pub fn new(resource: &ApiResource, namespace: Option<&str>, name: &str) -> WatchedObject {
        WatchedObject {
            group: resource.group.clone(),
            version: resource.version.clone(),
            kind: resource.kind.clone(),
            plural: resource.plural.clone(),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        }
    }

    /// A BundleDeployment by name.
    pub fn bundle_deployment(name: &str) -> WatchedObject {
        WatchedObject::new(&ApiResource::erase::<BundleDeployment>(&()), None, name)
    }

    fn resource(&self) -> ApiResource {
        let api_version = if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        };
        ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version,
            kind: self.kind.clone(),
            plural: self.plural.clone(),
        }
    }
}

type Command = (String, Vec<(WatchedObject, Seen)>);

/// Handle to the dependency watches: tell it what each BundleDeployment waits on.
#[derive(Clone)]
pub struct DependencyWatches {
    commands: mpsc::UnboundedSender<Command>,
}

impl DependencyWatches {
    /// Starts the watch manager; reconcile requests go to `trigger`.
    pub fn spawn(
        client: Client,
        trigger: mpsc::UnboundedSender<ObjectRef<BundleDeployment>>,
    ) -> DependencyWatches {
        let (commands, mut requests) = mpsc::unbounded_channel::<Command>();
        let (events_tx, mut events) = mpsc::unbounded_channel::<(WatchedObject, Seen)>();
        tokio::spawn(async move {
            let mut registry: Registry<WatchedObject> = Registry::default();
            let mut tasks: HashMap<WatchedObject, tokio::task::AbortHandle> = HashMap::new();
            loop {
                tokio::select! {
                    request = requests.recv() => {
                        let Some((bundle_deployment, observed)) = request else { break };
                        let (start, stop) = registry.set(&bundle_deployment, observed);
                        for id in stop {
                            if let Some(task) = tasks.remove(&id) {
                                task.abort();
                            }
                        }
                        for id in start {
                            let task = tokio::spawn(watch_object(client.clone(), id.clone(), events_tx.clone()));
                            tasks.insert(id, task.abort_handle());
                        }
                    }
                    Some((id, now)) = events.recv() => {
                        for bundle_deployment in registry.observe(&id, &now) {
                            tracing::debug!(bundle_deployment = %bundle_deployment, kind = %id.kind, namespace = id.namespace.as_deref().unwrap_or(""), name = %id.name, "dependency changed");
                            if trigger.send(ObjectRef::new(&bundle_deployment)).is_err() {
                                return; // the controller stopped
                            }
                        }
                    }
                }
            }
            for task in tasks.values() {
                task.abort();
            }
        });
        DependencyWatches { commands }
    }

    /// Records what `bundle_deployment` waits on this pass (empty: nothing any more), with the
    /// version it saw of each.
    pub fn set(&self, bundle_deployment: &str, observed: Vec<(WatchedObject, Seen)>) {
        // Fails only when the manager is gone (shutting down); changes then wait for the requeue.
        let _ = self
            .commands
            .send((bundle_deployment.to_string(), observed));
    }
}

/// Watches one object's metadata; reports its version (or its absence) after the initial list
/// and on every change.
async fn watch_object(
    client: Client,
    id: WatchedObject,
    events: mpsc::UnboundedSender<(WatchedObject, Seen)>,
) {
    let resource = id.resource();
    let api: Api<PartialObjectMeta<DynamicObject>> = match &id.namespace {
        Some(namespace) => Api::namespaced_with(client, namespace, &resource),
        None => Api::all_with(client, &resource),
    };
    let config = watcher::Config::default().fields(&format!("metadata.name={}", id.name));
    let mut stream = watcher(api, config)
        .backoff(super::controller::WatchBackoff::default())
        .boxed();
    let mut listed = false;
    while let Some(event) = stream.next().await {
        let seen = match event {
            Ok(watcher::Event::Init) => {
                listed = false;
                continue;
            }
            Ok(watcher::Event::InitApply(object)) => {
                listed = true;
                version(object.metadata.resource_version)
            }
            Ok(watcher::Event::InitDone) if !listed => Seen::Absent,
            Ok(watcher::Event::InitDone) => continue,
            Ok(watcher::Event::Apply(object)) => version(object.metadata.resource_version),
            Ok(watcher::Event::Delete(_)) => Seen::Absent,
            Err(error) => {
                tracing::debug!(kind = %id.kind, namespace = id.namespace.as_deref().unwrap_or(""), name = %id.name, %error, "dependency watch error (retrying)");
                continue;
            }
        };
        if events.send((id.clone(), seen)).is_err() {
            return;
        }
    }
}

fn version(resource_version: Option<String>) -> Seen {
    resource_version.map_or(Seen::Unknown, Seen::Version)
}
