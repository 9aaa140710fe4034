//! Where a BundleDeployment's objects live: the agent's own cluster, or the remote cluster its
//! `spec.kubeConfig` names. Resolved once per pass (and once per deletion); every phase that
//! touches the bundle's objects (apply, prune, drift, health reads, hooks, lookups, takeover,
//! the install namespace, helm's capabilities) goes through it, while revisions, the change log,
//! status and the Secrets a BundleDeployment names stay in the agent's cluster.
//!
//! It is resolved by [`super::Context::workload`]: the kubeconfig Secret is checked with the same
//! reference rule as every other Secret a BundleDeployment names ([`super::fetch::may_use`]), so
//! a bundle may target a cluster only when it could read that cluster's credentials.

use std::sync::Arc;
use std::time::Duration;

use kube::discovery::ApiResource;
use kube::Client;

use super::fetch::SecretPolicy;
use super::owned::OwnedWatches;
use super::ReconcileError;
use crate::apply::live::LiveObjects;
use crate::apply::KindResolver;
use crate::clusters::{ClusterRegistry, Target};

/// Which cluster a [`Workload`] is.
enum On {
    /// The agent's own, with its watches of the objects it applied and its capabilities.
    Local {
        owned: Option<OwnedWatches>,
        capabilities: Arc<KeptCapabilities>,
    },
    /// A remote one, with the registry that knows its health.
    Remote {
        target: Arc<Target>,
        registry: ClusterRegistry,
    },
}

/// The cluster a pass acts on, with the clients and caches of that cluster.
pub struct Workload {
    /// Which cluster, with its watches and caches.
    on: On,
    /// Reads as the agent (its own cluster) or as the kubeconfig's identity (a remote): drift
    /// observation, Pods and Events behind health, checks of objects the writer may not read.
    pub client: Client,
    /// Writes the bundle's objects: as its ServiceAccount (on a remote, impersonated through
    /// the kubeconfig), else as `client`.
    pub writer: Client,
    /// Kind resolution against this cluster's discovery.
    pub kinds: KindResolver,
    /// The Secret rules a chart's lookups follow on this cluster (see [`lookup_policy`]).
    pub lookup_policy: SecretPolicy,
}

impl Workload {
    /// The agent's own cluster: `client` reads as the agent, `writer` writes as the bundle's
    /// ServiceAccount; `owned` are the agent's watches of the objects it applied there.
    pub fn local(
        (client, writer): (Client, Client),
        kinds: KindResolver,
        owned: Option<OwnedWatches>,
        capabilities: Arc<KeptCapabilities>,
        agents: &SecretPolicy,
    ) -> Self {
        Workload {
            client,
            writer,
            kinds,
            lookup_policy: agents.clone(),
            on: On::Local {
                owned,
                capabilities,
            },
        }
    }

    /// Remote cluster `target` of `registry`, written to through `writer`.
    pub fn remote(
        target: Arc<Target>,
        registry: ClusterRegistry,
        writer: Client,
        agents: &SecretPolicy,
    ) -> Self {
        Workload {
            client: target.client.clone(),
            writer,
            kinds: target.kinds.clone(),
            lookup_policy: lookup_policy(agents),
            on: On::Remote { target, registry },
        }
    }

    /// The remote cluster's name as messages give it (None: the agent's own cluster).
    pub fn remote_name(&self) -> Option<String> {
        match &self.on {
            On::Remote { target, .. } => Some(target.cluster.display()),
            On::Local { .. } => None,
        }
    }

    /// The live copies of the objects watched on this cluster.
    pub fn live(&self) -> Option<LiveObjects> {
        match &self.on {
            On::Remote { target, .. } => Some(target.watches.live()),
            On::Local { owned, .. } => owned.as_ref().map(|owned| owned.live()),
        }
    }

    /// Whether changes of the bundle's objects on this cluster are watched (drift and
    /// progress come as they happen).
    pub fn watched(&self) -> bool {
        match &self.on {
            On::Remote { .. } => true,
            On::Local { owned, .. } => owned.is_some(),
        }
    }

    /// Makes sure objects of `resource`'s kind that pallet owns on this cluster are watched.
    pub fn watch(&self, resource: &ApiResource) {
        match &self.on {
            On::Remote { target, .. } => target.watches.watch(resource),
            On::Local { owned, .. } => {
                if let Some(owned) = owned {
                    owned.watch(resource);
                }
            }
        }
    }

    /// The key under which this cluster's namespaces are remembered as seen.
    pub fn namespace_key(&self, namespace: &str) -> String {
        match self.remote_name() {
            Some(cluster) => format!("{cluster}/{namespace}"),
            None => namespace.to_string(),
        }
    }

    /// The cluster's version and served APIs, for helm's `.Capabilities`.
    pub async fn helm_capabilities(
        &self,
    ) -> Result<pallet_formats::HelmCapabilities, ReconcileError> {
        let cache = match &self.on {
            On::Remote { target, .. } => &target.capabilities,
            On::Local { capabilities, .. } => capabilities.as_ref(),
        };
        read_capabilities(&self.client, cache).await
    }

    /// `error`, a failure of this pass, as the cluster's failure when the cluster went down
    /// during it (the message then names the cluster, not only the request that failed).
    pub fn explain(&self, error: ReconcileError) -> ReconcileError {
        let On::Remote { target, registry } = &self.on else {
            return error;
        };
        if matches!(error, ReconcileError::Cluster(_)) {
            return error;
        }
        match registry.down_error(&target.cluster) {
            Some(down) => ReconcileError::Cluster(down),
            None => error,
        }
    }
}

/// A cluster's capabilities, kept with when they were read.
pub type KeptCapabilities =
    tokio::sync::Mutex<Option<(std::time::Instant, pallet_formats::HelmCapabilities)>>;

/// The version and served APIs of `client`'s cluster, for helm's `.Capabilities`. Read through
/// discovery at most once a minute (kept in `cached`): it costs a request per API group.
pub async fn read_capabilities(
    client: &Client,
    cached: &KeptCapabilities,
) -> Result<pallet_formats::HelmCapabilities, ReconcileError> {
    const MAX_AGE: Duration = Duration::from_secs(60);
    let mut cached = cached.lock().await;
    if let Some((read_at, capabilities)) = cached.as_ref() {
        if read_at.elapsed() < MAX_AGE {
            return Ok(capabilities.clone());
        }
    }
    let kube_error = |context: &str| {
        let context = context.to_string();
        move |source| ReconcileError::Kube { context, source }
    };
    let version = client
        .apiserver_version()
        .await
        .map_err(kube_error("read the cluster's version"))?;
    let discovery = kube::Discovery::new(client.clone())
        .run()
        .await
        .map_err(kube_error("discover the cluster's APIs"))?;
    let mut served = Vec::new();
    for group in discovery.groups() {
        for version in group.versions() {
            for (resource, _) in group.versioned_resources(version) {
                served.push((resource.group, resource.version, resource.kind));
            }
        }
    }
    let capabilities = pallet_formats::HelmCapabilities {
        kube_version: version.git_version,
        api_versions: super::render::api_versions(
            served
                .iter()
                .map(|(g, v, k)| (g.as_str(), v.as_str(), k.as_str())),
        ),
    };
    *cached = Some((std::time::Instant::now(), capabilities.clone()));
    Ok(capabilities)
}

/// The Secret rules a chart's lookups follow on a remote cluster: what the identity writing
/// there may read (the agent's namespace and its allow-list are the agent's cluster's, and the
/// use of the remote's credentials was granted already by the Secret rules).
fn lookup_policy(agents: &SecretPolicy) -> SecretPolicy {
    SecretPolicy {
        agent_namespace: String::new(),
        allowed_namespaces: Vec::new(),
        default_service_account: agents.default_service_account.clone(),
        reads_as_service_account: true,
    }
}
