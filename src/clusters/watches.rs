//! One cluster's watches on the objects pallet applied there: one watch per kind, selecting the
//! ownership label (never every object of a kind), shared by every bundle of that cluster. An
//! object changed or deleted out of band makes its BundleDeployment reconcile at once; the
//! copies kept ([`LiveObjects`], under a byte budget per cluster) let a pass read its objects and
//! judge their health from memory. A watch that loses its API server reports it to the
//! cluster's health, so the cluster's bundles hear of an outage within seconds. Dropping the
//! handle stops every watch (the cluster's credentials changed, or its last bundle left).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use super::guard::SharedHealth;
use super::health::judge_error;
use crate::api::BundleDeployment;
use crate::apply::live::{owner_of, Change, LiveObjects, Usage};
use crate::apply::plan::OWNER_LABEL;

/// Where a watch sends the BundleDeployments that need a look.
pub type Trigger = mpsc::UnboundedSender<ObjectRef<BundleDeployment>>;

/// The backoff of a watch after an error: 250 ms doubling to 4 s, reset once events flow.
#[derive(Clone)]
pub struct WatchBackoff {
    next: std::time::Duration,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff {
            next: std::time::Duration::from_millis(250),
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = std::time::Duration;

    fn next(&mut self) -> Option<std::time::Duration> {
        let now = self.next;
        self.next = (self.next * 2).min(std::time::Duration::from_secs(4));
        Some(now)
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        *self = WatchBackoff::default();
    }
}

/// Handle to one cluster's owned-object watches. Clones share them; the watches stop when the
/// last clone is dropped.
#[derive(Clone)]
pub struct ClusterWatches {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    health: Option<Arc<SharedHealth>>,
    trigger: Option<Trigger>,
    live: LiveObjects,
    kinds: Mutex<Watching>,
}

#[derive(Default)]
struct Watching {
    ids: HashSet<(String, String, String)>,
    tasks: Vec<AbortHandle>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let watching = self.kinds.get_mut().unwrap_or_else(|p| p.into_inner());
        for task in &watching.tasks {
            task.abort();
        }
    }
}

impl ClusterWatches {
    /// Watches through `client`, keeping at most `budget` bytes of bodies, reporting a lost
    /// connection to `health` and sending the owners of changed objects to `trigger`.
    pub fn new(
        client: Client,
        budget: usize,
        health: Option<Arc<SharedHealth>>,
        trigger: Option<Trigger>,
    ) -> Self {
        ClusterWatches {
            inner: Arc::new(Inner {
                client,
                health,
                trigger,
                live: LiveObjects::with_budget(budget),
                kinds: Mutex::new(Watching::default()),
            }),
        }
    }

    /// The live copies these watches keep.
    pub fn live(&self) -> LiveObjects {
        self.inner.live.clone()
    }

    /// What the copies hold.
    pub fn usage(&self) -> Usage {
        self.inner.live.usage()
    }

    /// Kinds watched.
    pub fn kinds(&self) -> usize {
        self.lock().ids.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Watching> {
        self.inner.kinds.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes sure objects of `resource`'s kind that pallet owns are watched. Must be called
    /// within a tokio runtime.
    pub fn watch(&self, resource: &ApiResource) {
        let id = (
            resource.group.clone(),
            resource.version.clone(),
            resource.kind.clone(),
        );
        let mut watching = self.lock();
        if !watching.ids.insert(id) {
            return;
        }
        let task = tokio::spawn(watch_kind(
            self.inner.client.clone(),
            resource.clone(),
            self.inner.trigger.clone(),
            self.inner.health.clone(),
            self.inner.live.clone(),
        ));
        watching.tasks.push(task.abort_handle());
    }
}

async fn watch_kind(
    client: Client,
    resource: ApiResource,
    trigger: Option<Trigger>,
    health: Option<Arc<SharedHealth>>,
    live: LiveObjects,
) {
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let config = watcher::Config::default().labels(OWNER_LABEL);
    let mut events = watcher(api, config)
        .backoff(WatchBackoff::default())
        .boxed();
    while let Some(event) = events.next().await {
        let news = match event {
            Ok(event) => observe(&live, &resource, event),
            Err(error) => {
                tracing::debug!(kind = %resource.kind, %error, "owned-object watch error (retrying)");
                if let (Some(health), Some(failure)) = (&health, watch_failure(&error)) {
                    health.failed(failure, super::guard::describe(&error));
                }
                Vec::new()
            }
        };
        for owner in news {
            if let Some(trigger) = &trigger {
                if trigger.send(ObjectRef::new(&owner)).is_err() {
                    return; // the controller stopped
                }
            }
        }
    }
}

/// How a watch error is judged: a failure of the cluster, or none.
fn watch_failure(error: &watcher::Error) -> Option<super::health::Failure> {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => judge_error(e),
        _ => None,
    }
}

/// Records one watch event; returns the BundleDeployments that need a look.
pub fn observe(
    live: &LiveObjects,
    resource: &ApiResource,
    event: watcher::Event<DynamicObject>,
) -> Vec<String> {
    match event {
        watcher::Event::Init => {
            live.list_started(resource);
            Vec::new()
        }
        watcher::Event::InitApply(object) => {
            live.listed(resource, object);
            Vec::new()
        }
        watcher::Event::InitDone => live.list_done(resource),
        watcher::Event::Apply(object) => {
            let owner = owner_of(&object);
            // Taken over by another BundleDeployment (even by this agent's own write): the one
            // it was taken from must look at once, and report the conflict.
            let taken_from = live.taken_from(resource, &object);
            let mut news: Vec<String> = match live.applied(resource, object) {
                Change::News => owner.into_iter().collect(),
                Change::Quiet => Vec::new(),
            };
            news.extend(taken_from);
            news
        }
        watcher::Event::Delete(object) => match live.removed(resource, &object) {
            Change::News => owner_of(&object).into_iter().collect(),
            Change::Quiet => Vec::new(),
        },
    }
}
