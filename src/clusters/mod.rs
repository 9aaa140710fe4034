//! Remote clusters: a client per cluster a BundleDeployment's `spec.kubeConfig` names, built
//! from the kubeconfig in its Secret, each with its own connection pool, a deadline on every
//! request, a health state with backoff (a dead cluster costs its own bundles only: no request
//! is sent to it and no worker waits on it until a probe finds it back, and then its bundles are
//! reconciled at once), and its own watches on the objects pallet applied there, shared by the
//! cluster's bundles, with the memory they keep bounded per cluster and reported in metrics.
//! Credentials that change in the Secret are picked up without a restart (the Secret is
//! watched).
//!
//! The registry reads the Secret with the agent's own client; whether a BundleDeployment may use
//! it (the Secret rules of the security model) is the caller's decision, made on
//! [`ClusterRegistry::secret`]'s answer before [`ClusterRegistry::target`] is asked.

pub mod guard;
pub mod health;
pub mod kubeconfig;
mod metrics;
pub mod watches;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta};
use kube::client::ClientBuilder;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::api::{BundleDeploymentSpec, ServiceAccountReference, DEFAULT_KUBECONFIG_KEYS};
use crate::apply::KindResolver;
use crate::egress::EgressPolicy;
use guard::{GuardLayer, HealthEvent, SharedHealth};
use health::{Failure, Health, Transition};
use watches::{ClusterWatches, Trigger};

/// A remote cluster as the registry knows it: the kubeconfig Secret, the key read in it and the
/// context used. Two BundleDeployments naming the same four share one client and one set of
/// watches.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterKey {
    /// The Secret's namespace (the agent's when the reference names none).
    pub namespace: String,
    /// The Secret's name: the cluster's name.
    pub name: String,
    /// The key named (None: `value`, else `value.yaml`).
    pub key: Option<String>,
    /// The context named (None: the kubeconfig's current one).
    pub context: Option<String>,
}

impl ClusterKey {
    /// The cluster `spec` targets (None: the agent's own), its Secret's namespace defaulting
    /// to `agent_namespace`.
    pub fn of(spec: &BundleDeploymentSpec, agent_namespace: &str) -> Option<ClusterKey> {
        let reference = spec.kube_config.as_ref()?;
        Some(ClusterKey {
            namespace: reference
                .secret_ref
                .namespace
                .clone()
                .unwrap_or_else(|| agent_namespace.to_string()),
            name: reference.secret_ref.name.clone(),
            key: reference.secret_ref.key.clone(),
            context: reference.context.clone(),
        })
    }

    /// How messages and metrics name it: `name`, with `@context` when one is named.
    pub fn display(&self) -> String {
        match &self.context {
            Some(context) => format!("{}@{context}", self.name),
            None => self.name.clone(),
        }
    }

    /// The Secret, as messages name it.
    pub fn secret(&self) -> String {
        format!("Secret {}/{}", self.namespace, self.name)
    }
}

/// Condition reason: the kubeconfig Secret does not exist (or cannot be read).
pub const REASON_KUBECONFIG_NOT_FOUND: &str = "KubeConfigNotFound";
/// Condition reason: the Secret holds no usable kubeconfig.
pub const REASON_KUBECONFIG_INVALID: &str = "KubeConfigInvalid";
/// Condition reason: the BundleDeployment may not use the Secret (the Secret rules).
pub const REASON_KUBECONFIG_NOT_ALLOWED: &str = "KubeConfigNotAllowed";

/// Why a remote cluster cannot be used now. Each says which cluster, and never a credential.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClusterError {
    /// The kubeconfig Secret does not exist.
    #[error("cluster {cluster}: {secret} not found")]
    NotFound {
        /// The cluster.
        cluster: String,
        /// The Secret.
        secret: String,
    },
    /// The Secret holds no usable kubeconfig (missing key, refused content, egress refused).
    #[error("cluster {cluster}: {message}")]
    Invalid {
        /// The cluster.
        cluster: String,
        /// What is wrong, and where.
        message: String,
    },
    /// The cluster is down (unreachable, too slow, or refusing the credentials).
    #[error("cluster {cluster} is {state} since {since_seconds}s ago (next check in {retry_in_seconds}s): {message}")]
    Down {
        /// The cluster.
        cluster: String,
        /// How it fails.
        failure: Failure,
        /// "unreachable" or "refusing the kubeconfig's credentials".
        state: &'static str,
        /// Seconds since it went down.
        since_seconds: u64,
        /// Seconds until the next probe.
        retry_in_seconds: u64,
        /// The last error.
        message: String,
    },
    /// The BundleDeployment may not use the Secret (the Secret rules of the security model).
    #[error("cluster {cluster}: {message}")]
    NotAllowed {
        /// The cluster.
        cluster: String,
        /// Which Secret, and why it may not be used.
        message: String,
    },
    /// The Secret could not be read from the agent's cluster.
    #[error("cluster {cluster}: read {secret}: {message}")]
    SecretUnreadable {
        /// The cluster.
        cluster: String,
        /// The Secret.
        secret: String,
        /// The API error.
        message: String,
    },
}

impl ClusterError {
    /// The condition reason of the bundles it stops.
    pub fn reason(&self) -> &'static str {
        match self {
            ClusterError::NotFound { .. } => REASON_KUBECONFIG_NOT_FOUND,
            ClusterError::Invalid { .. } => REASON_KUBECONFIG_INVALID,
            ClusterError::NotAllowed { .. } => REASON_KUBECONFIG_NOT_ALLOWED,
            ClusterError::Down { failure, .. } => failure.reason(),
            ClusterError::SecretUnreadable { .. } => REASON_KUBECONFIG_NOT_FOUND,
        }
    }

    /// Whether it may pass by itself (retried with backoff), as opposed to waiting for an edit
    /// of the Secret (which the registry watches, and which reconciles the bundles at once).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ClusterError::Down { .. } | ClusterError::SecretUnreadable { .. }
        )
    }

    /// When to look again.
    pub fn retry_in(&self) -> Option<Duration> {
        match self {
            ClusterError::Down {
                retry_in_seconds, ..
            } => Some(Duration::from_secs((*retry_in_seconds).max(1))),
            _ => None,
        }
    }
}

/// The registry's settings (agent flags).
#[derive(Clone, Debug)]
pub struct ClusterSettings {
    /// The agent's namespace: where kubeconfig Secrets are looked up by default.
    pub agent_namespace: String,
    /// How long one request to a remote cluster may take (watches aside).
    pub request_timeout: Duration,
    /// How long connecting to a remote cluster may take.
    pub connect_timeout: Duration,
    /// Where the agent may connect: a kubeconfig naming a loopback or link-local API server is
    /// refused unless allowed.
    pub egress: EgressPolicy,
    /// The bytes of object bodies the watches of one cluster keep.
    pub cache_bytes: usize,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            agent_namespace: "pallet-system".into(),
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            egress: EgressPolicy::default(),
            cache_bytes: 64 << 20,
        }
    }
}

/// The kubeconfig Secret of a cluster as last read: what the Secret rules look at (its
/// metadata and type) and the kubeconfig's bytes.
pub struct SecretSnapshot {
    /// Its metadata (labels decide a use in the agent's namespace); managedFields dropped.
    pub meta: ObjectMeta,
    /// Its `type`.
    pub type_: Option<String>,
    /// The kubeconfig, or why the Secret holds none under the key.
    kubeconfig: Result<Vec<u8>, String>,
}

impl SecretSnapshot {
    fn of(mut secret: Secret, key: Option<&str>) -> Self {
        secret.metadata.managed_fields = None;
        let data: BTreeMap<String, Vec<u8>> = secret
            .data
            .take()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        let kubeconfig = pick_key(&data, key);
        SecretSnapshot {
            meta: secret.metadata,
            type_: secret.type_,
            kubeconfig,
        }
    }

    fn version(&self) -> Option<&str> {
        self.meta.resource_version.as_deref()
    }
}

/// The kubeconfig in `data` under `key`, or the default keys in order.
fn pick_key(data: &BTreeMap<String, Vec<u8>>, key: Option<&str>) -> Result<Vec<u8>, String> {
    match key {
        Some(key) => data
            .get(key)
            .cloned()
            .ok_or_else(|| format!("has no key {key:?}")),
        None => DEFAULT_KUBECONFIG_KEYS
            .iter()
            .find_map(|key| data.get(*key).cloned())
            .ok_or_else(|| {
                format!(
                    "has none of the keys {} (name the key in spec.kubeConfig.secretRef.key)",
                    DEFAULT_KUBECONFIG_KEYS.join(", ")
                )
            }),
    }
}

/// What a pass uses of a remote cluster: its clients, watches and kinds.
pub struct Target {
    /// Which cluster.
    pub cluster: ClusterKey,
    /// The client acting as the kubeconfig's identity.
    pub client: Client,
    /// The owned-object watches of this cluster, shared by its bundles.
    pub watches: ClusterWatches,
    /// Kind resolution against this cluster's discovery.
    pub kinds: KindResolver,
    /// The cluster's capabilities for helm charts, with when they were read.
    pub capabilities: tokio::sync::Mutex<Option<(Instant, pallet_formats::HelmCapabilities)>>,
    config: kube::Config,
    layer: GuardLayer,
    /// The kubeconfig Secret's version this was built from.
    version: Option<String>,
    /// Clients impersonating ServiceAccounts of the remote, by (namespace, name).
    acting: Mutex<HashMap<(String, String), Client>>,
}

impl Target {
    /// The client writing a bundle's objects: impersonating `service_account` on the remote
    /// through the kubeconfig's identity when one is named, else the kubeconfig's identity.
    /// One client per ServiceAccount, kept (a new client is a new connection pool).
    pub fn acting_as(
        &self,
        service_account: Option<&ServiceAccountReference>,
    ) -> Result<Client, kube::Error> {
        let Some(sa) = service_account else {
            return Ok(self.client.clone());
        };
        let key = (sa.namespace.clone(), sa.name.clone());
        let mut clients = self.acting.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let client = guarded_client(impersonating(&self.config, sa), &self.layer, &self.cluster)?;
        clients.insert(key, client.clone());
        Ok(client)
    }
}

/// `config` acting as ServiceAccount `sa` (of the agent's cluster or of a remote): its user
/// name alone is impersonated (the API server adds the ServiceAccount's groups itself, and the
/// agent may not impersonate groups), and no group the kubeconfig names (`as-groups`) rides
/// along.
pub fn impersonating(config: &kube::Config, sa: &ServiceAccountReference) -> kube::Config {
    let mut config = config.clone();
    config.auth_info.impersonate = Some(format!(
        "system:serviceaccount:{}:{}",
        sa.namespace, sa.name
    ));
    config.auth_info.impersonate_groups = None;
    config
}

/// A client for `config` whose requests go through `layer` and are counted for `cluster`.
fn guarded_client(
    config: kube::Config,
    layer: &GuardLayer,
    cluster: &ClusterKey,
) -> Result<Client, kube::Error> {
    let name = cluster.display();
    let count =
        tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
            metrics::request(&name);
            request
        });
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&count)
        .with_layer(layer)
        .build())
}

/// One cluster's entry.
struct Entry {
    key: ClusterKey,
    health: Arc<SharedHealth>,
    /// The Secret and the target built from it; a tokio lock, held while a target is built so
    /// that concurrent passes build one.
    state: tokio::sync::Mutex<State>,
    /// The BundleDeployments targeting this cluster.
    bundles: Mutex<BTreeSet<String>>,
    /// The Secret's watch, and the prober while the cluster is down.
    tasks: Mutex<Vec<AbortHandle>>,
    /// Set while the Secret's watch delivers: the snapshot is then current.
    watch_synced: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct State {
    /// None: not read yet. Some(None): read, and missing.
    secret: Option<Option<Arc<SecretSnapshot>>>,
    read_at: Option<Instant>,
    target: Option<Arc<Target>>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        for task in self
            .tasks
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            task.abort();
        }
    }
}

/// How long a Secret read without a working watch is trusted before it is read again.
const UNWATCHED_SECRET_FOR: Duration = Duration::from_secs(60);

/// The remote clusters of every BundleDeployment (see the module doc). Clones share it.
#[derive(Clone)]
pub struct ClusterRegistry {
    inner: Arc<Inner>,
}

struct Inner {
    agent: Client,
    settings: ClusterSettings,
    trigger: Option<Trigger>,
    entries: Mutex<HashMap<ClusterKey, Arc<Entry>>>,
    /// The cluster of each BundleDeployment that asked for one.
    bundle_clusters: Mutex<HashMap<String, ClusterKey>>,
    events: mpsc::UnboundedSender<HealthEvent>,
}

impl ClusterRegistry {
    /// A registry reading kubeconfig Secrets through `agent`, telling `trigger` which
    /// BundleDeployments to reconcile when their cluster goes down, comes back or gets new
    /// credentials, or when an object of theirs changes there. Must be made within a tokio
    /// runtime (it starts its event task).
    pub fn new(agent: Client, settings: ClusterSettings, trigger: Option<Trigger>) -> Self {
        let (events, receiver) = mpsc::unbounded_channel();
        let registry = ClusterRegistry {
            inner: Arc::new(Inner {
                agent,
                settings,
                trigger,
                entries: Mutex::new(HashMap::new()),
                bundle_clusters: Mutex::new(HashMap::new()),
                events,
            }),
        };
        tokio::spawn(handle_events(Arc::downgrade(&registry.inner), receiver));
        tokio::spawn(refresh_metrics(Arc::downgrade(&registry.inner)));
        registry
    }

    /// The settings.
    pub fn settings(&self) -> &ClusterSettings {
        &self.inner.settings
    }

    /// The kubeconfig Secret of `cluster` as last read (None: it does not exist). Read once,
    /// then kept current by a watch on it.
    pub async fn secret(
        &self,
        cluster: &ClusterKey,
    ) -> Result<Option<Arc<SecretSnapshot>>, ClusterError> {
        let entry = self.entry(cluster);
        let mut state = entry.state.lock().await;
        self.current_secret(&entry, &mut state).await
    }

    async fn current_secret(
        &self,
        entry: &Entry,
        state: &mut State,
    ) -> Result<Option<Arc<SecretSnapshot>>, ClusterError> {
        let synced = entry.watch_synced.load(std::sync::atomic::Ordering::SeqCst);
        let stale = state
            .read_at
            .is_none_or(|at| at.elapsed() > UNWATCHED_SECRET_FOR);
        if let Some(secret) = &state.secret {
            if synced || !stale {
                return Ok(secret.clone());
            }
        }
        let key = &entry.key;
        let api: Api<Secret> = Api::namespaced(self.inner.agent.clone(), &key.namespace);
        let read = api
            .get_opt(&key.name)
            .await
            .map_err(|e| ClusterError::SecretUnreadable {
                cluster: key.display(),
                secret: key.secret(),
                message: e.to_string(),
            })?;
        let snapshot = read.map(|s| Arc::new(SecretSnapshot::of(s, key.key.as_deref())));
        if snapshot.as_ref().and_then(|s| s.version())
            != state
                .secret
                .as_ref()
                .and_then(|s| s.as_ref())
                .and_then(|s| s.version())
        {
            state.target = None;
        }
        state.secret = Some(snapshot.clone());
        state.read_at = Some(Instant::now());
        Ok(snapshot)
    }

    /// The target for BundleDeployment `bundle` on `cluster`: at once an error while the
    /// cluster is down (nothing is sent to it), else its clients, built from the Secret's
    /// current kubeconfig. The caller has checked that `bundle` may use the Secret.
    pub async fn target(
        &self,
        cluster: &ClusterKey,
        bundle: &str,
    ) -> Result<Arc<Target>, ClusterError> {
        let entry = self.entry(cluster);
        self.register(bundle, cluster, &entry);
        if let Some(error) = down(cluster, &entry.health.get()) {
            return Err(error);
        }
        let mut state = entry.state.lock().await;
        let secret = self.current_secret(&entry, &mut state).await?;
        let Some(secret) = secret else {
            return Err(ClusterError::NotFound {
                cluster: cluster.display(),
                secret: cluster.secret(),
            });
        };
        if let Some(target) = &state.target {
            if target.version.as_deref() == secret.version() {
                return Ok(target.clone());
            }
        }
        let target = Arc::new(self.build(&entry, &secret).await?);
        state.target = Some(target.clone());
        Ok(target)
    }

    /// Builds the clients and watches of `entry`'s cluster from `secret`.
    async fn build(&self, entry: &Entry, secret: &SecretSnapshot) -> Result<Target, ClusterError> {
        let cluster = &entry.key;
        let invalid = |message: String| ClusterError::Invalid {
            cluster: cluster.display(),
            message,
        };
        let bytes = secret
            .kubeconfig
            .as_ref()
            .map_err(|why| invalid(format!("{} {why}", cluster.secret())))?;
        let remote = kubeconfig::remote_config(bytes, cluster.context.as_deref())
            .await
            .map_err(|e| invalid(format!("{}: {e}", cluster.secret())))?;
        self.inner
            .settings
            .egress
            .check_host(&remote.host, remote.port)
            .await
            .map_err(|e| invalid(format!("the kubeconfig's API server: {e}")))?;
        let mut config = remote.config;
        config.connect_timeout = Some(self.inner.settings.connect_timeout);
        config.write_timeout = Some(self.inner.settings.request_timeout);
        let layer = GuardLayer {
            health: entry.health.clone(),
            deadline: self.inner.settings.request_timeout,
            refuse_while_down: true,
        };
        let client = guarded_client(config.clone(), &layer, cluster)
            .map_err(|e| invalid(format!("building its client: {e}")))?;
        let watches = ClusterWatches::new(
            client.clone(),
            self.inner.settings.cache_bytes,
            Some(entry.health.clone()),
            self.inner.trigger.clone(),
        );
        tracing::info!(cluster = %cluster.display(), server = %config.cluster_url, "connected a remote cluster");
        Ok(Target {
            cluster: cluster.clone(),
            client,
            watches,
            kinds: KindResolver::default(),
            capabilities: tokio::sync::Mutex::new(None),
            config,
            layer,
            version: secret.version().map(str::to_string),
            acting: Mutex::new(HashMap::new()),
        })
    }

    /// The health of `cluster` (Unknown when no bundle asked for it).
    pub fn health(&self, cluster: &ClusterKey) -> Health {
        let entries = self.inner.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .get(cluster)
            .map(|e| e.health.get())
            .unwrap_or_default()
    }

    /// Why `cluster` cannot be used now, when it is down.
    pub fn down_error(&self, cluster: &ClusterKey) -> Option<ClusterError> {
        down(cluster, &self.health(cluster))
    }

    /// BundleDeployment `bundle` is gone (or targets its own cluster now): it no longer holds
    /// its cluster, which is dropped with its watches once no bundle holds it.
    pub fn release(&self, bundle: &str) {
        let Some(cluster) = self
            .inner
            .bundle_clusters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(bundle)
        else {
            return;
        };
        let mut entries = self.inner.entries.lock().unwrap_or_else(|p| p.into_inner());
        let empty = entries.get(&cluster).is_some_and(|entry| {
            let mut bundles = entry.bundles.lock().unwrap_or_else(|p| p.into_inner());
            bundles.remove(bundle);
            bundles.is_empty()
        });
        if empty {
            entries.remove(&cluster);
            metrics::forget(&cluster.display());
            tracing::info!(cluster = %cluster.display(), "no bundle targets the cluster any more; disconnected");
        }
    }

    /// The clusters known, with their bundles.
    pub fn clusters(&self) -> Vec<(ClusterKey, Health, usize)> {
        let entries = self.inner.entries.lock().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<_> = entries
            .values()
            .map(|e| {
                let bundles = e.bundles.lock().unwrap_or_else(|p| p.into_inner()).len();
                (e.key.clone(), e.health.get(), bundles)
            })
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    fn register(&self, bundle: &str, cluster: &ClusterKey, entry: &Entry) {
        let previous = self
            .inner
            .bundle_clusters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(bundle.to_string(), cluster.clone());
        if previous.as_ref().is_some_and(|p| p != cluster) {
            // Its cluster changed (a new BundleDeployment with the same name): drop the old one.
            if let Some(old) = previous {
                if let Some(entry) = self
                    .inner
                    .entries
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&old)
                {
                    entry
                        .bundles
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(bundle);
                }
            }
        }
        entry
            .bundles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(bundle.to_string());
    }

    fn entry(&self, cluster: &ClusterKey) -> Arc<Entry> {
        let mut entries = self.inner.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = entries.get(cluster) {
            return entry.clone();
        }
        let entry = Arc::new(Entry {
            key: cluster.clone(),
            health: SharedHealth::new(cluster.clone(), self.inner.events.clone()),
            state: tokio::sync::Mutex::new(State::default()),
            bundles: Mutex::new(BTreeSet::new()),
            tasks: Mutex::new(Vec::new()),
            watch_synced: std::sync::atomic::AtomicBool::new(false),
        });
        let watch = tokio::spawn(watch_secret(
            Arc::downgrade(&self.inner),
            Arc::downgrade(&entry),
        ));
        entry
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(watch.abort_handle());
        entries.insert(cluster.clone(), entry.clone());
        entry
    }
}

/// The error of a pass on a cluster in `health`, if it is down.
fn down(cluster: &ClusterKey, health: &Health) -> Option<ClusterError> {
    let outage = health.outage()?;
    let now = Instant::now();
    Some(ClusterError::Down {
        cluster: cluster.display(),
        failure: outage.failure,
        state: match outage.failure {
            Failure::Unreachable => "unreachable",
            Failure::Unauthorized => "refusing the kubeconfig's credentials",
        },
        since_seconds: now.duration_since(outage.since).as_secs(),
        retry_in_seconds: outage.next_probe.saturating_duration_since(now).as_secs(),
        message: outage.message.clone(),
    })
}

impl Inner {
    /// Asks for a pass of every bundle of `cluster`.
    fn reconcile_bundles(&self, cluster: &ClusterKey) {
        let Some(trigger) = &self.trigger else {
            return;
        };
        let bundles: Vec<String> = self
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(cluster)
            .map(|e| {
                e.bundles
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .iter()
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        for bundle in bundles {
            let _ = trigger.send(ObjectRef::new(&bundle));
        }
    }

    fn entry(&self, cluster: &ClusterKey) -> Option<Arc<Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(cluster)
            .cloned()
    }
}

/// Handles health transitions: a cluster that went down is probed (with backoff) and its
/// bundles report it; one that came back has its bundles reconciled at once.
async fn handle_events(
    registry: std::sync::Weak<Inner>,
    mut events: mpsc::UnboundedReceiver<HealthEvent>,
) {
    while let Some(event) = events.recv().await {
        let Some(inner) = registry.upgrade() else {
            return;
        };
        let name = event.cluster.display();
        match event.transition {
            Transition::WentDown => {
                metrics::outage(&name);
                if let Some(entry) = inner.entry(&event.cluster) {
                    let health = entry.health.get();
                    let message = health
                        .outage()
                        .map(|o| o.message.clone())
                        .unwrap_or_default();
                    tracing::warn!(cluster = %name, error = %message, "remote cluster down; its bundles wait for it");
                    let prober = tokio::spawn(probe(Arc::downgrade(&entry)));
                    entry
                        .tasks
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(prober.abort_handle());
                }
                inner.reconcile_bundles(&event.cluster);
            }
            Transition::CameBack => {
                tracing::info!(cluster = %name, "remote cluster answers again; reconciling its bundles");
                inner.reconcile_bundles(&event.cluster);
            }
            Transition::None => {}
        }
    }
}

/// Probes a cluster that is down until it answers (the answer, through the guard, brings it
/// up).
async fn probe(entry: std::sync::Weak<Entry>) {
    loop {
        let Some(strong) = entry.upgrade() else {
            return;
        };
        let Some(outage) = strong.health.get().outage().cloned() else {
            return; // up again (another request answered)
        };
        let target = strong.state.lock().await.target.clone();
        drop(strong);
        tokio::time::sleep_until(outage.next_probe.into()).await;
        let Some(strong) = entry.upgrade() else {
            return;
        };
        let Some(target) = target else {
            // No client (the Secret changed meanwhile): the next pass builds one and sees.
            strong.health.answered();
            return;
        };
        match probe_once(&target).await {
            Ok(()) => strong.health.answered(),
            Err((failure, message)) => strong.health.probe_failed(failure, message),
        }
    }
}

/// One probe of `target`'s cluster: it is back once it answers and authorizes requests. An API
/// server that has just started answers before its authorizer has read its RBAC objects, and
/// refuses everything (403) meanwhile: a pass let in then would take that for its bundle's
/// permissions (a failed revision). A SelfSubjectAccessReview, which every authenticated user
/// may create, tells the two apart.
async fn probe_once(target: &Target) -> Result<(), (Failure, String)> {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let deadline = target.layer.deadline;
    let failed = |error: kube::Error| {
        let failure = health::judge_error(&error).unwrap_or(Failure::Unreachable);
        (failure, guard::describe(&error))
    };
    let late = || {
        (
            Failure::Unreachable,
            format!("no answer within {}s", deadline.as_secs()),
        )
    };
    // The probe's own client, outside the guard: the target's refuses every request while the
    // cluster is down, and any answer through the guard would bring the cluster up.
    let client = Client::try_from(target.config.clone()).map_err(failed)?;
    tokio::time::timeout(deadline, client.apiserver_version())
        .await
        .map_err(|_| late())?
        .map_err(failed)?;
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some("get".into()),
                resource: Some("namespaces".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client);
    let asked = tokio::time::timeout(
        deadline,
        reviews.create(&kube::api::PostParams::default(), &review),
    )
    .await
    .map_err(|_| late())?;
    match asked {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 403 => Err((
            Failure::Unreachable,
            "it answers, but authorizes nothing yet (a SelfSubjectAccessReview was refused: \
             an API server starting up)"
                .into(),
        )),
        // Another answer (an API server without the authorization API): it answers.
        Err(kube::Error::Api(status)) if status.code != 401 => Ok(()),
        Err(error) => Err(failed(error)),
    }
}

/// Watches the kubeconfig Secret of `entry`: a change drops the clients built from the old
/// credentials and reconciles the cluster's bundles at once.
async fn watch_secret(registry: std::sync::Weak<Inner>, entry: std::sync::Weak<Entry>) {
    let (client, key) = match (registry.upgrade(), entry.upgrade()) {
        (Some(inner), Some(entry)) => (inner.agent.clone(), entry.key.clone()),
        _ => return,
    };
    let api: Api<Secret> = Api::namespaced(client, &key.namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", key.name));
    let mut events = watcher(api, config)
        .backoff(watches::WatchBackoff::default())
        .boxed();
    let mut listed: Option<Option<Secret>> = None;
    while let Some(event) = events.next().await {
        let (Some(inner), Some(entry)) = (registry.upgrade(), entry.upgrade()) else {
            return;
        };
        let seen = match event {
            Ok(watcher::Event::Init) => {
                listed = Some(None);
                None
            }
            Ok(watcher::Event::InitApply(secret)) => {
                listed = Some(Some(secret));
                None
            }
            Ok(watcher::Event::InitDone) => listed.take(),
            Ok(watcher::Event::Apply(secret)) => Some(Some(secret)),
            Ok(watcher::Event::Delete(_)) => Some(None),
            Err(error) => {
                tracing::debug!(cluster = %key.display(), %error, "kubeconfig Secret watch error (retrying)");
                entry
                    .watch_synced
                    .store(false, std::sync::atomic::Ordering::SeqCst);
                None
            }
        };
        let Some(secret) = seen else {
            continue;
        };
        let snapshot = secret.map(|s| Arc::new(SecretSnapshot::of(s, key.key.as_deref())));
        let mut state = entry.state.lock().await;
        let before = state
            .secret
            .as_ref()
            .map(|s| s.as_ref().and_then(|s| s.version()).map(str::to_string));
        let after = snapshot
            .as_ref()
            .and_then(|s| s.version())
            .map(str::to_string);
        state.secret = Some(snapshot);
        state.read_at = Some(Instant::now());
        entry
            .watch_synced
            .store(true, std::sync::atomic::Ordering::SeqCst);
        // Unchanged (the first list of a Secret a pass has just read): nothing to do.
        if before.is_none() || before == Some(after.clone()) {
            continue;
        }
        state.target = None;
        drop(state);
        // New credentials may be what the cluster waited for.
        entry.health.answered();
        tracing::info!(cluster = %key.display(), "kubeconfig Secret changed; reconnecting its bundles");
        inner.reconcile_bundles(&key);
    }
}

/// Sets the per-cluster gauges every few seconds.
async fn refresh_metrics(registry: std::sync::Weak<Inner>) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tick.tick().await;
        let Some(inner) = registry.upgrade() else {
            return;
        };
        let entries: Vec<Arc<Entry>> = inner
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        drop(inner);
        for entry in entries {
            let bundles = entry
                .bundles
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .len();
            let usage = entry
                .state
                .lock()
                .await
                .target
                .as_ref()
                .map(|t| t.watches.usage())
                .unwrap_or_default();
            metrics::set(
                &entry.key.display(),
                &metrics::ClusterFigures {
                    up: !matches!(entry.health.get(), Health::Down(_)),
                    bundles,
                    objects: usage.objects,
                    bytes: usage.bytes,
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_defaults_to_value_then_value_yaml() {
        let data = |keys: &[&str]| -> BTreeMap<String, Vec<u8>> {
            keys.iter()
                .map(|k| (k.to_string(), k.as_bytes().to_vec()))
                .collect()
        };
        assert_eq!(
            pick_key(&data(&["value.yaml", "value"]), None).unwrap(),
            b"value"
        );
        assert_eq!(
            pick_key(&data(&["value.yaml"]), None).unwrap(),
            b"value.yaml"
        );
        assert!(pick_key(&data(&["kubeconfig"]), None)
            .unwrap_err()
            .contains("none of the keys value, value.yaml"));
        assert_eq!(
            pick_key(&data(&["kubeconfig"]), Some("kubeconfig")).unwrap(),
            b"kubeconfig"
        );
        assert!(pick_key(&data(&["value"]), Some("other"))
            .unwrap_err()
            .contains("no key \"other\""));
    }

    #[test]
    fn a_cluster_is_the_secret_the_key_and_the_context() {
        let spec: BundleDeploymentSpec = serde_json::from_value(serde_json::json!({
            "format": "plain", "sources": [],
            "kubeConfig": {"secretRef": {"name": "prod-eu"}, "context": "admin"},
        }))
        .unwrap();
        let key = ClusterKey::of(&spec, "pallet-system").unwrap();
        assert_eq!(key.namespace, "pallet-system");
        assert_eq!(key.display(), "prod-eu@admin");
        assert_eq!(key.secret(), "Secret pallet-system/prod-eu");
        let local: BundleDeploymentSpec =
            serde_json::from_value(serde_json::json!({"format": "plain", "sources": []})).unwrap();
        assert!(ClusterKey::of(&local, "pallet-system").is_none());
    }

    #[test]
    fn a_down_cluster_is_named_with_its_state() {
        let key = ClusterKey {
            namespace: "pallet-system".into(),
            name: "edge".into(),
            key: None,
            context: None,
        };
        assert!(down(&key, &Health::Up).is_none());
        let mut health = Health::Unknown;
        health.failed(
            Instant::now(),
            Failure::Unreachable,
            "connection refused".into(),
        );
        let error = down(&key, &health).unwrap();
        assert_eq!(error.reason(), "ClusterUnreachable");
        assert!(error.is_transient());
        let text = error.to_string();
        assert!(
            text.starts_with("cluster edge is unreachable since 0s ago"),
            "{text}"
        );
        assert!(text.ends_with("connection refused"), "{text}");
        assert!(error.retry_in().unwrap() >= Duration::from_secs(1));
    }
}
