//! Fetches run apart from the reconcile workers. A reconcile that needs a source starts its fetch
//! here (at most `slots` fetches run at once) and waits only a short grace period for it; a slow
//! or hanging source then frees the worker for other BundleDeployments, the reconcile reports
//! "fetching … for N s", and the fetch's completion asks the controller to reconcile that
//! BundleDeployment again, which picks the result up.
//!
//! One fetch per (BundleDeployment, source index) at a time; a spec change replaces it. Each fetch
//! is bounded by the fetcher's overall deadline, so a slot is never held for ever.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::{mpsc, Notify, Semaphore};

use crate::api::{BundleDeployment, Source};
use crate::source::{Fetched, Fetcher, SourceError, SourceSecrets};

/// How long a reconcile waits for a fetch before handing its worker back.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(3);

/// Fetches from one server at once, for a pool of `slots`: half of them (at least one). A server
/// that hangs holds at most that many, so the other servers' sources keep being fetched; a
/// healthy server serving a thousand bundles at once (one registry, one artifact each) is not
/// throttled to a trickle.
pub fn per_server(slots: usize) -> usize {
    (slots / 2).max(1)
}

/// Where a fetch stands.
#[derive(Debug)]
pub enum FetchState {
    /// Finished, with its result (boxed: a fetched source is much larger than `Pending`).
    Done(Box<Result<Fetched, SourceError>>),
    /// Not finished: running, or still waiting for a slot.
    Pending(Pending),
}

/// A fetch not finished yet: what it is doing, since when (a wall-clock time, so that a
/// message saying it stays true however long it is shown).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// Running, or what it waits for.
    pub stage: Stage,
    /// Since when it has been at that stage.
    pub since: Timestamp,
}

/// What a fetch not finished is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Waiting for one of the fetches one server may have at once (see [`per_server`]).
    WaitingForServer {
        /// The server (`host:port`).
        server: String,
        /// How many fetches from it may run at once.
        limit: usize,
    },
    /// Waiting for one of the pool's slots (`--fetch-concurrency`).
    WaitingForSlot {
        /// How many fetches may run at once.
        limit: usize,
    },
    /// Fetching.
    Running,
}

impl Pending {
    /// `<source> since <time>`, or what it waits for: a part of the `Fetching` message.
    pub fn describe(&self, source: &str) -> String {
        let since = self.since.strftime("%Y-%m-%dT%H:%M:%SZ");
        match &self.stage {
            Stage::Running => format!("{source} since {since}"),
            Stage::WaitingForSlot { limit } => format!(
                "{source} (not started: waiting since {since} for a fetch slot, all {limit} in \
                 use; --fetch-concurrency)"
            ),
            Stage::WaitingForServer { server, limit } => format!(
                "{source} (not started: waiting since {since} for a fetch slot of {server}, \
                 which has {limit} at once)"
            ),
        }
    }
}

struct Job {
    spec: Source,
    stage: Arc<Mutex<Pending>>,
    result: Arc<Mutex<Option<Result<Fetched, SourceError>>>>,
    done: Arc<Notify>,
    /// Set once a reconcile stopped waiting for it: its completion must trigger a reconcile.
    abandoned: Arc<AtomicBool>,
    task: tokio::task::AbortHandle,
}

/// The fetches in flight, and the ones finished but not yet picked up.
pub struct FetchPool {
    slots: Arc<Semaphore>,
    /// How many slots `slots` has.
    limit: usize,
    /// One semaphore of [`per_server`] permits per server (`host:port`).
    servers: Mutex<HashMap<String, Arc<Semaphore>>>,
    per_server: usize,
    grace: Duration,
    jobs: Mutex<HashMap<(String, usize), Job>>,
    trigger: Option<mpsc::UnboundedSender<ObjectRef<BundleDeployment>>>,
}

impl FetchPool {
    /// A pool running at most `slots` fetches at once; reconciles wait `grace` for a fetch.
    /// `trigger` asks the controller to reconcile a BundleDeployment (None: only the requeue
    /// brings the result in, as in tests without a controller).
    pub fn new(
        slots: usize,
        grace: Duration,
        trigger: Option<mpsc::UnboundedSender<ObjectRef<BundleDeployment>>>,
    ) -> Self {
        FetchPool {
            slots: Arc::new(Semaphore::new(slots.max(1))),
            limit: slots.max(1),
            servers: Mutex::new(HashMap::new()),
            per_server: per_server(slots.max(1)),
            grace,
            jobs: Mutex::new(HashMap::new()),
            trigger,
        }
    }

    /// Fetches source `index` of `bd`: starts the fetch unless one for this spec is running or
    /// finished, then waits up to the grace period for it.
    pub async fn fetch(
        &self,
        fetcher: &Fetcher,
        bd: &BundleDeployment,
        index: usize,
        source: &Source,
        secrets: SourceSecrets,
    ) -> FetchState {
        let key = (bd.metadata.uid.clone().unwrap_or_default(), index);
        let (result, done, abandoned, stage, fresh) = {
            let mut jobs = self.lock();
            if jobs.get(&key).is_some_and(|job| job.spec != *source) {
                if let Some(old) = jobs.remove(&key) {
                    old.task.abort();
                }
            }
            let fresh = !jobs.contains_key(&key);
            let job = jobs
                .entry(key.clone())
                .or_insert_with(|| self.start(fetcher, bd, source, secrets));
            (
                job.result.clone(),
                job.done.clone(),
                job.abandoned.clone(),
                job.stage.clone(),
                fresh,
            )
        };
        // Registered before the check, so a completion in between is not missed.
        let notified = done.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let finished = match take(&result) {
            Some(finished) => Some(finished),
            // A fetch that already outlived one grace period is not waited for again: a hanging
            // source must not take a worker for a grace period at every retry.
            None if !fresh => None,
            None => {
                let _ = tokio::time::timeout(self.grace, notified).await;
                take(&result).or_else(|| {
                    // From now on its completion triggers a reconcile; it may have finished
                    // between the look above and the flag, so look once more.
                    abandoned.store(true, Ordering::SeqCst);
                    take(&result)
                })
            }
        };
        match finished {
            Some(finished) => {
                self.lock().remove(&key);
                FetchState::Done(Box::new(finished))
            }
            None => FetchState::Pending(stage.lock().unwrap_or_else(|e| e.into_inner()).clone()),
        }
    }

    fn start(
        &self,
        fetcher: &Fetcher,
        bd: &BundleDeployment,
        source: &Source,
        secrets: SourceSecrets,
    ) -> Job {
        let result = Arc::new(Mutex::new(None));
        let done = Arc::new(Notify::new());
        let abandoned = Arc::new(AtomicBool::new(false));
        let per_server = self.per_server;
        let host = crate::source::source_host(source);
        let stage = Arc::new(Mutex::new(Pending {
            stage: Stage::Running,
            since: Timestamp::now(),
        }));
        let task = {
            let (fetcher, source) = (fetcher.clone(), source.clone());
            let (result, done, abandoned) = (result.clone(), done.clone(), abandoned.clone());
            let slots = self.slots.clone();
            let limit = self.limit;
            let server = host.clone().map(|host| {
                let semaphore = self
                    .servers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(host.clone())
                    .or_insert_with(|| Arc::new(Semaphore::new(per_server)))
                    .clone();
                (host, semaphore)
            });
            let trigger = self.trigger.clone();
            let object = ObjectRef::from_obj(bd);
            let at = stage.clone();
            tokio::spawn(async move {
                let set = |stage: Stage| {
                    *at.lock().unwrap_or_else(|e| e.into_inner()) = Pending {
                        stage,
                        since: Timestamp::now(),
                    }
                };
                // The server's permit first, so a hanging server's queue holds no pool slot.
                // The semaphores are never closed; a failed acquire would only mean no bound.
                let _server = match server {
                    Some((host, server)) => {
                        if server.available_permits() == 0 {
                            set(Stage::WaitingForServer {
                                server: host,
                                limit: per_server,
                            });
                        }
                        server.acquire_owned().await.ok()
                    }
                    None => None,
                };
                if slots.available_permits() == 0 {
                    set(Stage::WaitingForSlot { limit });
                }
                let _slot = slots.acquire_owned().await.ok();
                set(Stage::Running);
                let fetched = fetcher.fetch(&source, &secrets).await;
                *result.lock().unwrap_or_else(|e| e.into_inner()) = Some(fetched);
                done.notify_waiters();
                if abandoned.load(Ordering::SeqCst) {
                    if let Some(trigger) = trigger {
                        let _ = trigger.send(object);
                    }
                }
            })
            .abort_handle()
        };
        Job {
            spec: source.clone(),
            stage,
            result,
            done,
            abandoned,
            task,
        }
    }

    /// Stops and forgets every fetch of BundleDeployment `uid` (it is being deleted).
    pub fn forget(&self, uid: &str) {
        self.lock().retain(|(u, _), job| {
            if u == uid {
                job.task.abort();
            }
            u != uid
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, usize), Job>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn take(
    result: &Mutex<Option<Result<Fetched, SourceError>>>,
) -> Option<Result<Fetched, SourceError>> {
    result.lock().unwrap_or_else(|e| e.into_inner()).take()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{Cache, FetchOptions};

    /// A server that accepts connections and never answers.
    fn hanging_server() -> (std::net::TcpListener, String) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/bundle.yaml", listener.local_addr().unwrap());
        (listener, url)
    }

    fn bd(uid: &str) -> BundleDeployment {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
            "metadata": {"name": uid, "uid": uid},
            "spec": {"sources": [], "format": "plain"},
        }))
        .unwrap()
    }

    fn http(url: &str) -> Source {
        serde_json::from_value(serde_json::json!({"kind": "http", "http": {"url": url}})).unwrap()
    }

    async fn pending(pool: &FetchPool, fetcher: &Fetcher, uid: &str, source: &Source) -> Pending {
        match pool
            .fetch(fetcher, &bd(uid), 0, source, SourceSecrets::default())
            .await
        {
            FetchState::Pending(pending) => pending,
            FetchState::Done(result) => panic!("finished: {result:?}"),
        }
    }

    #[tokio::test]
    async fn a_fetch_waiting_for_a_slot_says_so_and_since_when() {
        let dir = tempfile::tempdir().unwrap();
        let fetcher = Fetcher::new(
            Arc::new(Cache::open(dir.path().join("cache"), 1 << 20).unwrap()),
            FetchOptions {
                timeout: Duration::from_secs(30),
                egress: crate::egress::EgressPolicy::allow_all(),
                ..FetchOptions::default()
            },
        );
        let (_one, first) = hanging_server();
        let (_two, second) = hanging_server();
        let pool = FetchPool::new(1, Duration::from_millis(300), None);
        let before = Timestamp::now();
        let running = pending(&pool, &fetcher, "a", &http(&first)).await;
        assert_eq!(running.stage, Stage::Running);
        let queued = pending(&pool, &fetcher, "b", &http(&second)).await;
        assert_eq!(queued.stage, Stage::WaitingForSlot { limit: 1 });
        // A wall-clock time, not a duration frozen when the status was written.
        assert!(queued.since >= before);
        let message = queued.describe("http://b");
        assert!(
            message.starts_with("http://b (not started: waiting since ")
                && message.contains("for a fetch slot, all 1 in use"),
            "{message}"
        );
        assert!(
            running
                .describe("http://a")
                .starts_with("http://a since 20"),
            "{}",
            running.describe("http://a")
        );
        // Looked at again later: still the same words, the same time.
        assert_eq!(pending(&pool, &fetcher, "b", &http(&second)).await, queued);
    }
}
