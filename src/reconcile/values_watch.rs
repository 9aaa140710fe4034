//! Watches on the ConfigMaps and Secrets that `config.helm.valuesFrom` names, so that an edit
//! reconciles the BundleDeployments reading them within seconds, not at the next requeue.
//!
//! Only the referenced objects are watched: one metadata-only watch per object, selected by a
//! `metadata.name` field selector in its namespace, started when a reconcile first names it and
//! stopped when no BundleDeployment names it any more. There is no cache of ConfigMaps or Secrets
//! (contents never reach memory here; a reconcile reads what it needs).
//!
//! [`Registry`] is the pure bookkeeping (who reads what, which version each one saw); the
//! manager task around it starts and stops the watches.

use std::collections::{BTreeMap, HashMap};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use tokio::sync::mpsc;

use crate::api::{BundleDeployment, ValuesSourceKind};

/// A referenced object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectId {
    /// ConfigMap or Secret.
    pub kind: ValuesSourceKind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// What a reader (a reconcile) or the watch last saw of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Not read (the reconcile stopped before it, e.g. refused by the namespace rule).
    Unknown,
    /// The object did not exist.
    Absent,
    /// The object at this resourceVersion.
    Version(String),
}

/// Which BundleDeployments read which objects (by `Id`), and what each saw. Pure.
#[derive(Debug)]
pub struct Registry<Id = ObjectId> {
    readers: BTreeMap<Id, BTreeMap<String, Seen>>,
}

impl<Id> Default for Registry<Id> {
    fn default() -> Self {
        Registry {
            readers: BTreeMap::new(),
        }
    }
}

impl<Id: Clone + Ord> Registry<Id> {
    /// Records that `bundle_deployment` now reads exactly `observed` (an object named twice
    /// keeps the last observation). Returns the objects to start watching (newly referenced) and
    /// to stop watching (referenced by nobody any more).
    pub fn set(
        &mut self,
        bundle_deployment: &str,
        observed: Vec<(Id, Seen)>,
    ) -> (Vec<Id>, Vec<Id>) {
        let wanted: BTreeMap<Id, Seen> = observed.into_iter().collect();
        let mut start = Vec::new();
        let mut stop = Vec::new();
        for (id, readers) in self.readers.iter_mut() {
            if !wanted.contains_key(id)
                && readers.remove(bundle_deployment).is_some()
                && readers.is_empty()
            {
                stop.push(id.clone());
            }
        }
        self.readers.retain(|_, readers| !readers.is_empty());
        for (id, seen) in wanted {
            let readers = self.readers.entry(id.clone()).or_insert_with(|| {
                start.push(id.clone());
                BTreeMap::new()
            });
            readers.insert(bundle_deployment.to_string(), seen);
        }
        (start, stop)
    }

    /// The watch saw `id` as `now`: the readers that saw something else must reconcile. They are
    /// marked as having seen `now`, so a repeated event does not trigger them again.
    pub fn observe(&mut self, id: &Id, now: &Seen) -> Vec<String> {
        let Some(readers) = self.readers.get_mut(id) else {
            return Vec::new();
        };
        let mut triggered = Vec::new();
        for (bundle_deployment, seen) in readers.iter_mut() {
            if seen != now {
                *seen = now.clone();
                triggered.push(bundle_deployment.clone());
            }
        }
        triggered
    }

    /// The objects watched now.
    pub fn watched(&self) -> impl Iterator<Item = &Id> {
        self.readers.keys()
    }
}

/// Handle to the values watches: tell it what each BundleDeployment read.
#[derive(Clone)]
pub struct ValuesWatches {
    commands: mpsc::UnboundedSender<(String, Vec<(ObjectId, Seen)>)>,
}

impl ValuesWatches {
    /// Starts the watch manager; reconcile requests go to `trigger`.
    pub fn spawn(
        client: Client,
        trigger: mpsc::UnboundedSender<ObjectRef<BundleDeployment>>,
    ) -> ValuesWatches {
        let (commands, mut requests) = mpsc::unbounded_channel::<(String, Vec<(ObjectId, Seen)>)>();
        let (events_tx, mut events) = mpsc::unbounded_channel::<(ObjectId, Seen)>();
        tokio::spawn(async move {
            let mut registry = Registry::default();
            let mut tasks: HashMap<ObjectId, tokio::task::AbortHandle> = HashMap::new();
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
                            tracing::debug!(bundle_deployment = %bundle_deployment, kind = ?id.kind, namespace = %id.namespace, name = %id.name, "valuesFrom object changed");
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
        ValuesWatches { commands }
    }

    /// Records what `bundle_deployment` read this pass (empty: it reads nothing any more).
    pub fn set(&self, bundle_deployment: &str, observed: Vec<(ObjectId, Seen)>) {
        // Fails only when the manager is gone (shutting down); edits then wait for the requeue.
        let _ = self
            .commands
            .send((bundle_deployment.to_string(), observed));
    }
}

/// Watches one object's metadata; reports its version (or its absence) after the initial list
/// and on every change.
async fn watch_object(
    client: Client,
    id: ObjectId,
    events: mpsc::UnboundedSender<(ObjectId, Seen)>,
) {
    let config = watcher::Config::default().fields(&format!("metadata.name={}", id.name));
    let mut stream = match id.kind {
        ValuesSourceKind::ConfigMap => metadata_events::<ConfigMap>(client, &id.namespace, config),
        ValuesSourceKind::Secret => metadata_events::<Secret>(client, &id.namespace, config),
    };
    let mut listed = false;
    while let Some(event) = stream.next().await {
        let seen = match event {
            Ok(watcher::Event::Init) => {
                listed = false;
                continue;
            }
            Ok(watcher::Event::InitApply(object)) => {
                listed = true;
                version(object.resource_version)
            }
            Ok(watcher::Event::InitDone) if !listed => Seen::Absent,
            Ok(watcher::Event::InitDone) => continue,
            Ok(watcher::Event::Apply(object)) => version(object.resource_version),
            Ok(watcher::Event::Delete(_)) => Seen::Absent,
            Err(error) => {
                tracing::debug!(kind = ?id.kind, namespace = %id.namespace, name = %id.name, %error, "valuesFrom watch error (retrying)");
                continue;
            }
        };
        if events.send((id.clone(), seen)).is_err() {
            return;
        }
    }
}

/// A metadata-only watch in `namespace`, its events reduced to the objects' metadata.
fn metadata_events<K>(
    client: Client,
    namespace: &str,
    config: watcher::Config,
) -> futures::stream::BoxStream<'static, Result<watcher::Event<ObjectMeta>, watcher::Error>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default,
{
    let api: Api<PartialObjectMeta<K>> = Api::namespaced(client, namespace);
    watcher(api, config)
        .backoff(super::controller::WatchBackoff::default())
        .map(|event| {
            event.map(|event| match event {
                watcher::Event::Apply(o) => watcher::Event::Apply(o.metadata),
                watcher::Event::Delete(o) => watcher::Event::Delete(o.metadata),
                watcher::Event::InitApply(o) => watcher::Event::InitApply(o.metadata),
                watcher::Event::Init => watcher::Event::Init,
                watcher::Event::InitDone => watcher::Event::InitDone,
            })
        })
        .boxed()
}

fn version(resource_version: Option<String>) -> Seen {
    resource_version.map_or(Seen::Unknown, Seen::Version)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> ObjectId {
        ObjectId {
            kind: ValuesSourceKind::ConfigMap,
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn v(version: &str) -> Seen {
        Seen::Version(version.into())
    }

    #[test]
    fn watches_start_with_the_first_reader_and_stop_with_the_last() {
        let mut registry = Registry::default();
        assert_eq!(
            registry.set("a", vec![(id("x"), v("1")), (id("y"), Seen::Absent)]),
            (vec![id("x"), id("y")], vec![])
        );
        assert_eq!(registry.set("b", vec![(id("x"), v("1"))]), (vec![], vec![]));
        // a stops reading x (b still does) and y (nobody does).
        assert_eq!(registry.set("a", vec![]), (vec![], vec![id("y")]));
        assert_eq!(registry.set("b", vec![]), (vec![], vec![id("x")]));
        assert_eq!(registry.watched().count(), 0);
    }

    #[test]
    fn only_readers_that_saw_another_version_are_triggered_once() {
        let mut registry = Registry::default();
        registry.set("a", vec![(id("x"), v("1"))]);
        registry.set("b", vec![(id("x"), v("2"))]);
        registry.set("c", vec![(id("missing"), Seen::Absent)]);
        // The watch's initial list: b read the current version already.
        assert_eq!(registry.observe(&id("x"), &v("2")), ["a"]);
        assert!(registry.observe(&id("x"), &v("2")).is_empty());
        assert_eq!(registry.observe(&id("x"), &v("3")), ["a", "b"]);
        // Created after a reconcile found it missing; an initial "absent" changes nothing.
        assert!(registry.observe(&id("missing"), &Seen::Absent).is_empty());
        assert_eq!(registry.observe(&id("missing"), &v("7")), ["c"]);
        // A reader that could not read it is triggered by anything the watch sees.
        registry.set("d", vec![(id("x"), Seen::Unknown)]);
        assert_eq!(registry.observe(&id("x"), &v("3")), ["d"]);
        assert!(registry.observe(&id("nobody"), &v("1")).is_empty());
    }
}
