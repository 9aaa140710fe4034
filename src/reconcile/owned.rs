//! Watches on the objects pallet applied, so that an object changed or deleted out of band
//! triggers its BundleDeployment's reconcile at once instead of at the next requeue.
//!
//! Only objects carrying the ownership label are watched (a label selector on each kind in use),
//! never every object of a kind: the memory blow-ups seen in other controllers came from
//! cluster-wide caches. Nothing is cached here at all; events only name a BundleDeployment.

use std::collections::HashSet;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::discovery::ApiResource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use tokio::sync::mpsc;

use crate::api::BundleDeployment;
use crate::apply::plan::OWNER_LABEL;

/// Handle to the owned-object watches: tell it which kinds pallet has applied.
#[derive(Clone)]
pub struct OwnedWatches {
    kinds: mpsc::UnboundedSender<ApiResource>,
}

impl OwnedWatches {
    /// Starts the watch manager. Reconcile requests for the owning BundleDeployments are sent to
    /// `trigger`.
    pub fn spawn(
        client: Client,
        trigger: mpsc::UnboundedSender<ObjectRef<BundleDeployment>>,
    ) -> OwnedWatches {
        let (kinds, mut requests) = mpsc::unbounded_channel::<ApiResource>();
        tokio::spawn(async move {
            let mut watching: HashSet<(String, String, String)> = HashSet::new();
            while let Some(resource) = requests.recv().await {
                let id = (
                    resource.group.clone(),
                    resource.version.clone(),
                    resource.kind.clone(),
                );
                if watching.insert(id) {
                    tokio::spawn(watch_kind(client.clone(), resource, trigger.clone()));
                }
            }
        });
        OwnedWatches { kinds }
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
) {
    // Metadata only (`PartialObjectMeta`): a change to any field moves the resourceVersion,
    // which is all this needs, and the bodies (large ConfigMaps, every labelled object of the
    // kind) never reach memory.
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &resource);
    let config = watcher::Config::default().labels(OWNER_LABEL);
    tracing::debug!(kind = %resource.kind, group = %resource.group, "watching owned objects");
    let mut events = watcher(api, config)
        .backoff(super::controller::WatchBackoff::default())
        .touched_objects()
        .boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(object) => {
                let owner = object
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(OWNER_LABEL));
                if let Some(owner) = owner {
                    if trigger.send(ObjectRef::new(owner)).is_err() {
                        return; // the controller stopped
                    }
                }
            }
            Err(error) => {
                tracing::debug!(kind = %resource.kind, %error, "owned-object watch error (retrying)")
            }
        }
    }
}
