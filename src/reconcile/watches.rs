//! One watch manager for the objects passes read: the ConfigMaps and Secrets of `valuesFrom`
//! ([`super::values_watch`]) and what `spec.dependsOn` names ([`super::dependency_watch`]), so
//! that a BundleDeployment is reconciled the moment what it read changes, not at its requeue.
//!
//! One metadata-only watch per referenced object (a `metadata.name` field selector in its
//! namespace), started when a pass first names it and stopped when no BundleDeployment names it
//! any more. Contents never reach memory here: a change of resourceVersion reconciles the readers,
//! and the pass reads what it needs.
//!
//! [`Registry`] is the pure bookkeeping (who reads what, which version each one saw); the
//! manager task around it starts and stops the watches. What differs between kinds of watched
//! objects (how to watch one) is the [`Watched`] trait.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::hash::Hash;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::Client;
use tokio::sync::mpsc;

use crate::api::BundleDeployment;

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

impl Seen {
    /// What a resourceVersion says (none: unknown).
    pub fn of(resource_version: Option<String>) -> Seen {
        resource_version.map_or(Seen::Unknown, Seen::Version)
    }
}

/// An object kind passes read and the manager watches: how to watch one such object.
pub trait Watched: Clone + Ord + Hash + Debug + Send + Sync + 'static {
    /// What the log calls a change of such an object.
    const CHANGED: &'static str;

    /// Metadata-only events of this one object (a `metadata.name` field selector).
    fn events(
        &self,
        client: Client,
    ) -> BoxStream<'static, Result<watcher::Event<ObjectMeta>, watcher::Error>>;
}

/// The watcher config selecting the object named `name`.
pub fn by_name(name: &str) -> watcher::Config {
    watcher::Config::default().fields(&format!("metadata.name={name}"))
}

/// `events` of partial objects reduced to their metadata.
pub fn metadata_only<K: Send + 'static>(
    events: impl futures::Stream<Item = Result<watcher::Event<PartialObjectMeta<K>>, watcher::Error>>
        + Send
        + 'static,
) -> BoxStream<'static, Result<watcher::Event<ObjectMeta>, watcher::Error>> {
    events
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

/// Which BundleDeployments read which objects (by `Id`), and what each saw. Pure.
#[derive(Debug)]
pub struct Registry<Id> {
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

type Command<Id> = (String, Vec<(Id, Seen)>);

/// Handle to the watches on objects of kind `Id`: tell it what each BundleDeployment read.
pub struct Watches<Id> {
    commands: mpsc::UnboundedSender<Command<Id>>,
}

impl<Id> Clone for Watches<Id> {
    fn clone(&self) -> Self {
        Watches {
            commands: self.commands.clone(),
        }
    }
}

impl<Id: Watched> Watches<Id> {
    /// Starts the watch manager; reconcile requests go to `trigger`.
    pub fn spawn(
        client: Client,
        trigger: mpsc::UnboundedSender<ObjectRef<BundleDeployment>>,
    ) -> Watches<Id> {
        let (commands, requests) = mpsc::unbounded_channel::<Command<Id>>();
        tokio::spawn(manage(client, requests, trigger));
        Watches { commands }
    }

    /// Records what `bundle_deployment` read this pass (empty: nothing any more), with the
    /// version it saw of each.
    pub fn set(&self, bundle_deployment: &str, observed: Vec<(Id, Seen)>) {
        // Fails only when the manager is gone (shutting down); changes then wait for the requeue.
        let _ = self
            .commands
            .send((bundle_deployment.to_string(), observed));
    }
}

/// The manager task: keeps the registry, starts and stops one watch per object, and turns what
/// the watches see into reconcile requests.
async fn manage<Id: Watched>(
    client: Client,
    mut requests: mpsc::UnboundedReceiver<Command<Id>>,
    trigger: mpsc::UnboundedSender<ObjectRef<BundleDeployment>>,
) {
    let (events_tx, mut events) = mpsc::unbounded_channel::<(Id, Seen)>();
    let mut registry: Registry<Id> = Registry::default();
    let mut tasks: HashMap<Id, tokio::task::AbortHandle> = HashMap::new();
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
                    tracing::debug!(bundle_deployment = %bundle_deployment, object = ?id, "{}", Id::CHANGED);
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
}

/// Watches one object's metadata; reports its version (or its absence) after the initial list
/// and on every change.
async fn watch_object<Id: Watched>(
    client: Client,
    id: Id,
    events: mpsc::UnboundedSender<(Id, Seen)>,
) {
    let mut stream = id.events(client);
    let mut listed = false;
    while let Some(event) = stream.next().await {
        let seen = match event {
            Ok(watcher::Event::Init) => {
                listed = false;
                continue;
            }
            Ok(watcher::Event::InitApply(object)) => {
                listed = true;
                Seen::of(object.resource_version)
            }
            Ok(watcher::Event::InitDone) if !listed => Seen::Absent,
            Ok(watcher::Event::InitDone) => continue,
            Ok(watcher::Event::Apply(object)) => Seen::of(object.resource_version),
            Ok(watcher::Event::Delete(_)) => Seen::Absent,
            Err(error) => {
                tracing::debug!(object = ?id, %error, "watch error (retrying)");
                continue;
            }
        };
        if events.send((id.clone(), seen)).is_err() {
            return;
        }
    }
}

/// The backoff of the agent's watches after an error: 250 ms doubling to [`super::API_RETRY_MAX`]
/// (kube's default grows to 30 s, which is how long recovery took after an API outage), reset
/// once events flow again.
pub struct WatchBackoff {
    next: Duration,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff {
            next: Duration::from_millis(250),
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let now = self.next;
        self.next = (self.next * 2).min(super::API_RETRY_MAX);
        Some(now)
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        *self = WatchBackoff::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> String {
        name.to_string()
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
