//! Watches on the objects pallet applied, so that an object changed or deleted out of band
//! triggers its BundleDeployment's reconcile at once instead of at the next requeue.
//!
//! Only objects carrying the ownership label are watched (a label selector on each kind in use),
//! never every object of a kind: the memory blow-ups seen in other controllers came from
//! cluster-wide caches. The objects seen are kept in [`LiveObjects`] (without managedFields), so
//! a pass reads its objects and judges their health from memory; an event that is only the echo
//! of the agent's own write triggers nothing.

use std::collections::HashSet;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use tokio::sync::mpsc;

use crate::api::BundleDeployment;
use crate::apply::live::{owner_of, Change, LiveObjects};
use crate::apply::plan::OWNER_LABEL;

/// Handle to the owned-object watches: tell it which kinds pallet has applied.
#[derive(Clone)]
pub struct OwnedWatches {
    kinds: mpsc::UnboundedSender<ApiResource>,
    live: LiveObjects,
}

impl OwnedWatches {
    /// Starts the watch manager. Reconcile requests for the owning BundleDeployments are sent to
    /// `trigger`.
    pub fn spawn(
        client: Client,
        trigger: mpsc::UnboundedSender<ObjectRef<BundleDeployment>>,
    ) -> OwnedWatches {
        let (kinds, mut requests) = mpsc::unbounded_channel::<ApiResource>();
        let live = LiveObjects::default();
        let copies = live.clone();
        tokio::spawn(async move {
            let mut watching: HashSet<(String, String, String)> = HashSet::new();
            while let Some(resource) = requests.recv().await {
                let id = (
                    resource.group.clone(),
                    resource.version.clone(),
                    resource.kind.clone(),
                );
                if watching.insert(id) {
                    tokio::spawn(watch_kind(
                        client.clone(),
                        resource,
                        trigger.clone(),
                        copies.clone(),
                    ));
                }
            }
        });
        OwnedWatches { kinds, live }
    }

    /// The live copies these watches keep.
    pub fn live(&self) -> LiveObjects {
        self.live.clone()
    }

    /// Makes sure objects of `resource`'s kind that pallet owns are watched.
    pub fn watch(&self, resource: &ApiResource) {
        // Fails only when the manager is gone (shutting down); drift is then caught at requeue.
        let _ = self.kinds.send(resource.clone());
    }
}

async fn watch_kind(
    client: Client,
    resource: ApiResource,
    trigger: mpsc::UnboundedSender<ObjectRef<BundleDeployment>>,
    live: LiveObjects,
) {
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let config = watcher::Config::default().labels(OWNER_LABEL);
    tracing::debug!(kind = %resource.kind, group = %resource.group, "watching owned objects");
    let mut events = watcher(api, config)
        .backoff(super::watches::WatchBackoff::default())
        .boxed();
    while let Some(event) = events.next().await {
        let news: Vec<String> = match event {
            Ok(watcher::Event::Init) => {
                live.list_started(&resource);
                Vec::new()
            }
            Ok(watcher::Event::InitApply(object)) => {
                live.listed(&resource, object);
                Vec::new()
            }
            Ok(watcher::Event::InitDone) => live.list_done(&resource),
            Ok(watcher::Event::Apply(object)) => {
                let owner = owner_of(&object);
                // Taken over by another BundleDeployment (even by this agent's own write): the
                // one it was taken from must look at once, and report the conflict.
                let taken_from = live.taken_from(&resource, &object);
                let mut news: Vec<String> = match live.applied(&resource, object) {
                    Change::News => owner.into_iter().collect(),
                    Change::Quiet => Vec::new(),
                };
                news.extend(taken_from);
                news
            }
            Ok(watcher::Event::Delete(object)) => match live.removed(&resource, &object) {
                Change::News => owner_of(&object).into_iter().collect(),
                Change::Quiet => Vec::new(),
            },
            Err(error) => {
                tracing::debug!(kind = %resource.kind, %error, "owned-object watch error (retrying)");
                Vec::new()
            }
        };
        for owner in news {
            if trigger.send(ObjectRef::new(&owner)).is_err() {
                return; // the controller stopped
            }
        }
    }
}
