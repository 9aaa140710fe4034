//! The reconcile context: clients, caches and the agent-wide state every pass shares.

use super::{
    ensure_namespace, fetch_pool, owned, polling, render_memo, values_watch, webhook_certs,
    ReconcileError, API_RETRY_MAX,
};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::{Client, Config, ResourceExt};
use pallet_formats::Object;

use super::fetch::{may_use, Found, SecretPolicy};
use super::workload::{KeptCapabilities, Workload};
use crate::api::BundleDeployment;
use crate::apply::{Applier, KindResolver, FIELD_MANAGER};
use crate::changelog::ChangeLog;
use crate::clusters::{ClusterError, ClusterKey};
use crate::health;
use crate::revision::{RevisionRecord, RevisionStore};
use crate::source::Fetcher;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Resource;

/// A stored revision's objects, shared between passes.
pub(super) type Snapshot = std::sync::Arc<Vec<Object>>;

/// Workers of a context made with [`Context::new`] (the agent sets its own: `--concurrency`).
const DEFAULT_WORKERS: usize = 4;

/// A BundleDeployment as the agent's last status write left it.
#[derive(Clone, Default)]
pub struct Written {
    /// The resourceVersion and generation of the object the last status write was answered with.
    pub write: Option<(String, Option<i64>)>,
    /// That object, until the watch delivers its version (then the cache holds the same, and
    /// keeping a second copy of every BundleDeployment costs memory for nothing).
    pub answer: Option<std::sync::Arc<BundleDeployment>>,
    /// Versions known to be older than that write: each status write is conditional on the
    /// version it was made on, so that version, and the ones before it in an unbroken chain of
    /// this agent's writes, came before it.
    pub behind: Vec<String>,
    /// The objects a progressing revision was waiting for when that write was made (see
    /// [`super::status::progress_detail_only`]); None after any other write.
    pub waiting: Option<Vec<String>>,
}

/// `config` acting as ServiceAccount `sa`, as the agent writes a BundleDeployment's objects:
/// impersonation of the ServiceAccount's user name alone. No group is sent (the agent may not
/// impersonate groups): the API server gives an impersonated ServiceAccount its groups itself
/// (`system:serviceaccounts`, `system:serviceaccounts:<namespace>`, `system:authenticated`).
pub use crate::clusters::impersonating;

/// How many older versions [`Written`] keeps.
const BEHIND_KEPT: usize = 8;

impl Written {
    /// Records a status write made on version `base` (None: unconditional) and answered with
    /// `object`.
    pub fn wrote(
        &mut self,
        base: Option<String>,
        object: BundleDeployment,
        waiting: Option<Vec<String>>,
    ) {
        let Some(version) = object.metadata.resource_version.clone() else {
            return;
        };
        let previous = self.write.take().map(|(v, _)| v);
        match base {
            Some(base) if previous.as_ref() == Some(&base) => self.behind.push(base),
            Some(base) => self.behind = vec![base],
            None => self.behind.clear(),
        }
        if self.behind.len() > BEHIND_KEPT {
            self.behind.remove(0);
        }
        self.write = Some((version, object.metadata.generation));
        self.answer = Some(std::sync::Arc::new(object));
        self.waiting = waiting;
    }

    /// The watch delivered `version`: if it is the last write's, its answer is in the cache.
    pub fn delivered(&mut self, version: &str) {
        if self.write.as_ref().is_some_and(|(v, _)| v == version) {
            self.answer = None;
        }
    }

    /// Whether a pass may start from the watch's `cached` object (`Some(object to use)`), or
    /// must read it (`None`): the written object when the cache is known to be older than the
    /// write, the cached one when it is the write itself or has a higher generation (a spec
    /// edit after it); any other version may be newer or older (a watch that re-listed after
    /// an outage skips versions), so it is read.
    pub fn newest(
        &self,
        cached: &std::sync::Arc<BundleDeployment>,
    ) -> Option<std::sync::Arc<BundleDeployment>> {
        let Some((version, generation)) = &self.write else {
            return Some(cached.clone());
        };
        let cached_version = cached.metadata.resource_version.as_ref()?;
        if cached_version == version {
            Some(cached.clone())
        } else if self.behind.contains(cached_version) {
            // None once the watch delivered the write: a cache that is behind again re-listed
            // (it skipped versions), so it is read.
            self.answer.clone()
        } else if cached.metadata.generation > *generation {
            // A spec edit made after the write: every version derives from the one before it
            // (the API server's compare-and-swap), so one with a higher generation than the
            // write's answer came after it and holds it. An upgrade is such an edit.
            Some(cached.clone())
        } else {
            None
        }
    }
}

/// How long an install namespace seen to exist is not looked up again.
const NAMESPACE_SEEN_FOR: Duration = Duration::from_secs(300);

/// Everything a reconcile needs besides the object, by concern: a phase takes the parts it uses.
pub struct Context {
    /// The agent's clients, who it is, and what it knows of the cluster.
    pub cluster: Cluster,
    /// Fetching sources: the cache, polls and background fetches.
    pub sources: Sources,
    /// Rendering: the sandbox, budgets, kept renders, lookups and keys.
    pub rendering: Rendering,
    /// Revision snapshots.
    pub revisions: Revisions,
    /// What starts a pass besides the BundleDeployment's own watch.
    pub watchers: Watchers,
    /// The agent's settings for every pass.
    pub settings: Settings,
    /// What the agent tells: the change log, Events and notifications.
    pub records: Records,
    /// What passes remember of earlier ones, by BundleDeployment.
    pub memory: Memory,
}

/// The agent's clients, who it is, and what it knows of the cluster.
pub struct Cluster {
    /// The agent's client (reads, status, Secrets, reviews).
    pub client: Client,
    /// The agent's client configuration, from which impersonating clients are made.
    pub config: Config,
    /// Kind resolution shared by all applies.
    pub kinds: KindResolver,
    /// Where Secrets may be read from, and whom the agent acts as by default.
    pub secret_policy: SecretPolicy,
    /// This agent's name in `status.agent`: `POD_NAME`, else `<host>-<pid>`; `@KEY` appended
    /// for shard KEY (see [`Context::with_scope`]).
    pub identity: String,
    /// The BundleDeployments this agent acts for (see [`super::scope`]).
    pub scope: crate::shard::Scope,
    /// What the API server keeps of what pallet applied, where it differs (dropped fields).
    pub stored_forms: crate::apply::stored::StoredForms,
    /// The remote clusters `spec.kubeConfig` names (None: this agent deploys to its own
    /// cluster only, see [`Context::with_cluster_registry`]).
    pub remotes: Option<crate::clusters::ClusterRegistry>,
    /// Impersonating clients, by ServiceAccount (namespace, name).
    writers: Mutex<HashMap<(String, String), Client>>,
    /// Install namespaces seen to exist, and when: looked up again after [`NAMESPACE_SEEN_FOR`].
    namespaces: Mutex<HashMap<String, std::time::Instant>>,
    /// The cluster's capabilities for helm charts, with when they were read.
    capabilities: std::sync::Arc<KeptCapabilities>,
}

/// Fetching sources.
pub struct Sources {
    /// Fetches sources through the shared cache.
    pub fetcher: Fetcher,
    /// Whether sources must have `verify` (`--require-verification`).
    pub verification: VerificationPolicy,
    /// When each floating source was last resolved: polled at its `pollInterval`.
    pub polls: polling::SourcePolls,
    /// Fetches running apart from the reconcile workers.
    pub fetches: fetch_pool::FetchPool,
}

/// Rendering.
pub struct Rendering {
    /// The last render of each BundleDeployment, reused while its inputs are unchanged.
    pub renders: render_memo::RenderMemo,
    /// The clock of renders whose inputs no revision has recorded yet.
    pub render_times: super::render_time::RenderTimes,
    /// The lookups each BundleDeployment's chart made in its last render.
    pub lookups: super::lookups::LastLookups,
    /// What a chart's lookups may read.
    pub lookup_limits: super::lookups::LookupLimits,
    /// Function calls running apart from the reconcile workers.
    pub function_calls: super::function_calls::FunctionCalls,
    /// Where renders run: in a sandboxed child process (the agent), else in this process on a
    /// blocking thread (see [`Context::with_render_sandbox`]).
    pub render_sandbox: Option<std::sync::Arc<crate::render_sandbox::RenderSandbox>>,
    /// The budgets of every render (nesting and sizes are the renderers' own).
    pub render_budgets: pallet_formats::RenderBudgets,
    /// The keys behind the values charts generate, in Secrets in the agent's namespace.
    pub render_keys: super::render_key::RenderKeys,
    /// Where `function` processors may run (`--allow-function-exec`).
    pub functions: super::functions::FunctionPolicy,
    /// Validity of the certificates the BuiltIn provider issues for registry-v1 webhooks.
    pub webhook_cert_policy: webhook_certs::CertPolicy,
}

/// Revision snapshots, in Secrets in the agent's namespace.
pub struct Revisions {
    /// The store.
    pub store: RevisionStore,
    /// The agent's client, to create the agent's namespace when it is missing.
    client: Client,
    /// Snapshots read or written by this process, by BundleDeployment and number: a held or
    /// rolled-back revision is re-applied at every pass without reading its Secrets again.
    pub(super) snapshots: Mutex<HashMap<(String, i64), Snapshot>>,
    /// Set once the agent's namespace (where snapshots live) is known to exist.
    agent_namespace_ready: tokio::sync::OnceCell<()>,
}

/// What starts a pass besides the BundleDeployment's own watch.
pub struct Watchers {
    /// Watches on applied objects, for prompt drift correction (None: drift waits for requeue).
    pub owned: Option<owned::OwnedWatches>,
    /// Watches on the objects `valuesFrom` names (None: edits wait for the requeue).
    pub values_watches: Option<values_watch::ValuesWatches>,
    /// Watches on what `spec.dependsOn` names (None: dependencies are seen at the requeue).
    pub dependency_watches: Option<super::dependency_watch::DependencyWatches>,
    /// The HTTP probes of `spec.healthChecks`, running apart from the reconcile workers.
    pub probes: health::probe::Probes,
}

/// The agent's settings for every pass.
pub struct Settings {
    /// Requeue interval when nothing else asks for one (drift checks, floating refs).
    pub requeue_interval: Duration,
    /// Objects applied at once within a stage.
    pub apply_parallelism: usize,
    /// Knobs of the built-in health rules (see [`Context::with_health_options`]).
    pub health: health::HealthOptions,
    /// Refuse BundleDeployments that name no ServiceAccount (`--require-service-account`).
    pub require_service_account: bool,
    /// What a Helm release record read for a takeover may decode to.
    pub takeover_records: super::takeover::RecordBudget,
}

/// What the agent tells: the change log, Events and notifications.
pub struct Records {
    /// Where every write is recorded.
    pub changelog: ChangeLog,
    /// Publishes summary Events on BundleDeployments.
    pub recorder: Recorder,
    /// Records transitions with status writes and delivers notifications off the reconcile path.
    pub notifier: crate::notify::Notifier,
}

/// What passes remember of earlier ones, by BundleDeployment.
pub struct Memory {
    /// Consecutive transient failures per BundleDeployment, for exponential backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// Each BundleDeployment as this agent's last status write left it (see [`controller`]: a
    /// pass never starts from a cached object older than that).
    pub(super) last_written: Mutex<HashMap<String, Written>>,
    /// Intents kept out of status, and what a restart must check for (see
    /// [`super::unwritten_intent`]).
    pub unwritten_intents: super::unwritten_intent::UnwrittenIntents,
    /// How long recent revisions took to become healthy: the settle window before a progress
    /// write (see [`super::settle`]).
    pub settle: super::settle::SettleWindow,
    /// The reconcile workers: how many BundleDeployments are reconciled at once.
    pub workers: super::workers::Workers,
    /// Each BundleDeployment's compiled CEL expressions at its generation, and those found over
    /// their budget.
    pub cel: super::health_checks::CelMemo,
}

impl Context {
    /// The same context judging health with `health` instead of the defaults.
    pub fn with_health_options(mut self, health: health::HealthOptions) -> Self {
        self.settings.health = health;
        self
    }

    /// The same context asking the controller through `trigger` to reconcile a BundleDeployment
    /// whose HTTP probe changed its verdict.
    pub fn with_probe_trigger(
        mut self,
        trigger: tokio::sync::mpsc::UnboundedSender<
            kube::runtime::reflector::ObjectRef<BundleDeployment>,
        >,
    ) -> Self {
        self.watchers.probes =
            health::probe::Probes::new(Some(trigger), self.sources.fetcher.options().egress);
        self
    }

    /// The same context deploying the bundles that name a `spec.kubeConfig` to the clusters
    /// of `registry`.
    pub fn with_cluster_registry(mut self, registry: crate::clusters::ClusterRegistry) -> Self {
        self.cluster.remotes = Some(registry);
        self
    }

    /// The same context polling floating sources without `pollInterval` every `interval`.
    pub fn with_default_poll_interval(mut self, interval: Duration) -> Self {
        self.sources.polls = polling::SourcePolls::new(interval);
        self
    }

    /// The same context running at most `slots` fetches at once, asking the controller through
    /// `trigger` to reconcile a BundleDeployment whose slow fetch has finished.
    pub fn with_fetch_pool(
        mut self,
        slots: usize,
        trigger: tokio::sync::mpsc::UnboundedSender<
            kube::runtime::reflector::ObjectRef<BundleDeployment>,
        >,
    ) -> Self {
        self.sources.fetches =
            fetch_pool::FetchPool::new(slots, fetch_pool::DEFAULT_GRACE, Some(trigger));
        self
    }

    /// The same context refusing revisions whose snapshot is over `max_bytes` compressed.
    pub fn with_max_revision_bytes(mut self, max_bytes: usize) -> Self {
        self.revisions.store = self.revisions.store.with_max_bytes(max_bytes);
        self
    }

    /// The same context refusing revisions that would take the stored snapshots past `quota`.
    pub fn with_snapshot_quota(mut self, quota: crate::revision::quota::SnapshotQuota) -> Self {
        self.revisions.store = self.revisions.store.with_quota(quota);
        self
    }

    /// The same context rendering in child processes of `sandbox`, with `budgets`.
    pub fn with_render_sandbox(
        mut self,
        sandbox: crate::render_sandbox::RenderSandbox,
        budgets: pallet_formats::RenderBudgets,
    ) -> Self {
        self.rendering.render_sandbox = Some(std::sync::Arc::new(sandbox));
        self.rendering.render_budgets = budgets;
        self
    }

    /// The same context issuing webhook certificates valid for `validity` (renewed when a third
    /// of it remains).
    pub fn with_webhook_cert_validity(mut self, validity: Duration) -> Self {
        self.rendering.webhook_cert_policy = webhook_certs::CertPolicy { validity };
        self
    }

    /// The same context decoding release records under `records` and answering lookups under
    /// `lookups`.
    pub fn with_read_limits(
        mut self,
        records: super::takeover::RecordBudget,
        lookups: super::lookups::LookupLimits,
    ) -> Self {
        self.settings.takeover_records = records;
        self.rendering.lookup_limits = lookups;
        self
    }

    /// The same context reconciling with `workers`.
    pub fn with_workers(mut self, workers: super::workers::Workers) -> Self {
        self.memory.workers = workers;
        self
    }

    /// The same context refusing (`true`) BundleDeployments that name no ServiceAccount.
    pub fn with_require_service_account(mut self, require: bool) -> Self {
        self.settings.require_service_account = require;
        self
    }

    /// The same context requiring `verify` on sources as `policy` says.
    pub fn with_verification_policy(mut self, policy: VerificationPolicy) -> Self {
        self.sources.verification = policy;
        self
    }

    /// The same context delivering notifications with `settings`.
    pub fn with_notification_settings(mut self, settings: crate::notify::Settings) -> Self {
        self.records.notifier = self.records.notifier.with_settings(settings);
        self
    }

    /// What `function` processors are called with.
    pub fn function_caller(&self) -> super::functions::FunctionCaller<'_> {
        super::functions::FunctionCaller {
            client: Some(&self.cluster.client),
            secret_policy: &self.cluster.secret_policy,
            exec_policy: &self.rendering.functions,
            egress: self.sources.fetcher.options().egress,
        }
    }

    /// The same context running at most `slots` function calls at once, those of one render
    /// within `deadline`, each call's end sent to `trigger`.
    pub fn with_function_calls(
        mut self,
        slots: usize,
        deadline: Duration,
        trigger: tokio::sync::mpsc::UnboundedSender<
            kube::runtime::reflector::ObjectRef<BundleDeployment>,
        >,
    ) -> Self {
        self.rendering.function_calls = super::function_calls::FunctionCalls::new(
            slots,
            super::function_calls::DEFAULT_GRACE,
            deadline,
            Some(trigger),
        );
        self
    }

    /// The same context letting `function` processors run what `policy` allows.
    pub fn with_function_policy(mut self, policy: super::functions::FunctionPolicy) -> Self {
        self.rendering.functions = policy;
        self
    }

    /// The same context watching `valuesFrom` objects through `watches`.
    pub fn with_values_watches(mut self, watches: values_watch::ValuesWatches) -> Self {
        self.watchers.values_watches = Some(watches);
        self
    }

    /// The same context watching what `spec.dependsOn` names through `watches`.
    pub fn with_dependency_watches(
        mut self,
        watches: super::dependency_watch::DependencyWatches,
    ) -> Self {
        self.watchers.dependency_watches = Some(watches);
        self
    }

    /// A context with no failures recorded.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        config: Config,
        fetcher: Fetcher,
        secret_policy: SecretPolicy,
        requeue_interval: Duration,
        apply_parallelism: usize,
        changelog: ChangeLog,
        owned: Option<owned::OwnedWatches>,
    ) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let recorder = Recorder::new(client.clone(), reporter);
        let egress = fetcher.options().egress;
        let agent_namespace = secret_policy.agent_namespace.clone();
        Context {
            records: Records {
                notifier: crate::notify::Notifier::new(
                    client.clone(),
                    secret_policy.clone(),
                    recorder.clone(),
                    crate::notify::Settings {
                        egress,
                        ..Default::default()
                    },
                ),
                recorder,
                changelog,
            },
            revisions: Revisions {
                store: RevisionStore::new(client.clone(), agent_namespace.clone()),
                client: client.clone(),
                snapshots: Mutex::new(HashMap::new()),
                agent_namespace_ready: tokio::sync::OnceCell::new(),
            },
            rendering: Rendering {
                renders: render_memo::RenderMemo::default(),
                render_times: Default::default(),
                function_calls: Default::default(),
                lookup_limits: Default::default(),
                lookups: Default::default(),
                render_sandbox: None,
                render_budgets: pallet_formats::RenderBudgets::default(),
                render_keys: super::render_key::RenderKeys::new(client.clone(), &agent_namespace),
                functions: Default::default(),
                webhook_cert_policy: webhook_certs::CertPolicy::default(),
            },
            sources: Sources {
                fetcher,
                verification: VerificationPolicy::default(),
                polls: polling::SourcePolls::new(polling::DEFAULT_POLL_INTERVAL),
                fetches: fetch_pool::FetchPool::new(4, fetch_pool::DEFAULT_GRACE, None),
            },
            watchers: Watchers {
                owned,
                values_watches: None,
                dependency_watches: None,
                probes: health::probe::Probes::new(None, egress),
            },
            settings: Settings {
                requeue_interval,
                apply_parallelism,
                health: health::HealthOptions::default(),
                require_service_account: false,
                takeover_records: Default::default(),
            },
            memory: Memory {
                failures: Mutex::new(HashMap::new()),
                last_written: Mutex::new(HashMap::new()),
                unwritten_intents: Default::default(),
                settle: Default::default(),
                workers: super::workers::Workers::fixed(DEFAULT_WORKERS),
                cel: Default::default(),
            },
            cluster: Cluster {
                client,
                config,
                kinds: KindResolver::default(),
                secret_policy,
                // The same name the agent holds the leader Lease under.
                identity: crate::leader::identity(),
                scope: crate::shard::Scope::default(),
                stored_forms: Default::default(),
                remotes: None,
                writers: Mutex::new(HashMap::new()),
                namespaces: Mutex::new(HashMap::new()),
                capabilities: Default::default(),
            },
        }
    }

    /// The render key of `bd` (see [`super::render_key`]), made at its first render; the
    /// agent's namespace is created first if it is missing, as for snapshots.
    pub(super) async fn render_key(
        &self,
        bd: &BundleDeployment,
    ) -> Result<super::render_key::RenderKey, ReconcileError> {
        self.revisions.ensure_agent_namespace().await?;
        self.rendering.render_keys.get_or_create(bd).await
    }

    /// The cluster `bd`'s objects live on (see [`super::workload`]): the agent's own without
    /// `spec.kubeConfig`, else the remote its Secret names, once the Secret rules allow `bd` to
    /// use that Secret. A cluster that cannot be used now is [`ReconcileError::Cluster`],
    /// naming it.
    pub(super) async fn workload(&self, bd: &BundleDeployment) -> Result<Workload, ReconcileError> {
        let cluster = &self.cluster;
        let local = || {
            Ok(Workload::local(
                (cluster.client.clone(), cluster.writer(bd)?),
                cluster.kinds.clone(),
                self.watchers.owned.clone(),
                cluster.capabilities.clone(),
                &cluster.secret_policy,
            ))
        };
        let Some(registry) = &cluster.remotes else {
            if let Some(reference) = &bd.spec.kube_config {
                return Err(ReconcileError::Cluster(ClusterError::Invalid {
                    cluster: reference.secret_ref.name.clone(),
                    message: "this agent does not deploy to remote clusters".into(),
                }));
            }
            return local();
        };
        let name = bd.name_any();
        let Some(key) = ClusterKey::of(&bd.spec, &registry.settings().agent_namespace) else {
            // Targets its own cluster (again): it holds no remote any more.
            registry.release(&name);
            return local();
        };
        let secret = registry
            .secret(&key)
            .await
            .map_err(ReconcileError::Cluster)?;
        let found = secret
            .as_ref()
            .map(|s| Found::new(&s.meta, s.type_.as_deref()));
        let policy = &cluster.secret_policy;
        let requester = policy.requester(&name, &bd.spec);
        let rule = may_use(
            &cluster.client,
            policy,
            requester,
            "secrets",
            &key.namespace,
            &key.name,
            found,
        );
        if let Err(why) = rule.await? {
            return Err(ReconcileError::Cluster(ClusterError::NotAllowed {
                cluster: key.display(),
                message: format!("spec.kubeConfig names {}, which {why}", key.secret()),
            }));
        }
        let target = registry
            .target(&key, &name)
            .await
            .map_err(ReconcileError::Cluster)?;
        let writer = target
            .acting_as(policy.service_account(&bd.spec))
            .map_err(|e| ReconcileError::Kube {
                context: format!("cluster {}: build impersonating client", key.display()),
                source: e,
            })?;
        Ok(Workload::remote(target, registry.clone(), writer, policy))
    }

    /// An applier for `bd` writing to `workload`'s cluster through `client` (its writer, or
    /// its own client for reads).
    pub(super) fn applier(
        &self,
        bd: &BundleDeployment,
        workload: &Workload,
        client: Client,
    ) -> Applier {
        Applier {
            client,
            kinds: workload.kinds.clone(),
            owner: bd.name_any(),
            install_namespace: bd.spec.install_namespace.clone(),
            collision_protection: bd.spec.collision_protection(),
            parallelism: self.settings.apply_parallelism,
            journal: Default::default(),
            revision: None,
            live: workload.live(),
            takeover: bd.spec.takeover.clone(),
            rules: crate::apply::ApplyRules {
                ignore: crate::apply::policy::DriftIgnore::compile(&bd.spec.drift_ignore),
                drift_pass: false,
                stored: self.cluster.stored_forms.clone(),
            },
        }
    }
}

impl Cluster {
    /// The client for writes to `bd`'s objects: impersonating its ServiceAccount when it names
    /// one, else the agent's default one (`--default-service-account`), else the agent itself.
    /// One client per ServiceAccount, kept: a new client is a new connection (and TLS handshake)
    /// at every pass.
    pub(super) fn writer(&self, bd: &BundleDeployment) -> Result<Client, ReconcileError> {
        let Some(sa) = self.secret_policy.service_account(&bd.spec) else {
            return Ok(self.client.clone());
        };
        let key = (sa.namespace.clone(), sa.name.clone());
        let mut clients = self.writers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let client = crate::client_metrics::counted_client(impersonating(&self.config, sa))
            .map_err(|e| ReconcileError::Kube {
                context: "build impersonating client".into(),
                source: e,
            })?;
        clients.insert(key, client.clone());
        Ok(client)
    }

    /// True when `namespace` was seen to exist within [`NAMESPACE_SEEN_FOR`]: an install
    /// namespace is not read again at every pass (a namespace deleted meanwhile makes the apply
    /// fail, and it is created again at most that much later).
    pub(super) fn namespace_seen(&self, namespace: &str) -> bool {
        self.namespaces
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(namespace)
            .is_some_and(|at| at.elapsed() < NAMESPACE_SEEN_FOR)
    }

    /// Records that `namespace` exists.
    pub(super) fn saw_namespace(&self, namespace: &str) {
        self.namespaces
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(namespace.to_string(), std::time::Instant::now());
    }
}

impl Records {
    /// Publishes an Event on `bd`; a failure to publish is logged, never fatal.
    pub(super) async fn event(
        &self,
        bd: &BundleDeployment,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &bd.object_ref(&())).await {
            tracing::warn!(bundle_deployment = %bd.name_any(), error = %e, "could not publish an Event");
        }
    }
}

impl Revisions {
    /// Creates the agent's namespace (where snapshots and keys live) if it is missing (a fresh
    /// cluster, an agent run outside one): checked once per process.
    pub(super) async fn ensure_agent_namespace(&self) -> Result<(), ReconcileError> {
        let namespace = self.store.namespace().to_string();
        self.agent_namespace_ready
            .get_or_try_init(|| ensure_namespace(&self.client, &self.client, &namespace))
            .await?;
        Ok(())
    }

    /// Stores `record`'s snapshot, creating the agent's namespace first if it is missing.
    /// Returns whether this revision number was stored already (see
    /// [`crate::revision::RevisionStore::save`]).
    pub(super) async fn save(&self, record: &RevisionRecord) -> Result<bool, ReconcileError> {
        let _phase = crate::metrics::METRICS.phase("snapshot_store");
        self.ensure_agent_namespace().await?;
        self.store
            .save(record)
            .await
            .map_err(ReconcileError::Revision)
    }

    /// Keeps a snapshot read back for later passes.
    pub(super) fn remember(&self, record: RevisionRecord) {
        let Ok(objects) = record.objects_to_apply() else {
            return; // not cached: a load reports the error
        };
        self.snapshots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                (record.bundle_deployment, record.number),
                std::sync::Arc::new(objects),
            );
    }

    /// Drops a snapshot that left the history.
    pub(super) fn forget(&self, bundle_deployment: &str, number: i64) {
        self.snapshots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(bundle_deployment.to_string(), number));
    }

    /// The objects of stored revision `number`, from memory or from its Secrets.
    pub(super) async fn load(
        &self,
        bundle_deployment: &str,
        number: i64,
    ) -> Result<Vec<Object>, ReconcileError> {
        let key = (bundle_deployment.to_string(), number);
        if let Some(objects) = self
            .snapshots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(objects.as_ref().clone());
        }
        let record = self
            .store
            .load(bundle_deployment, number)
            .await
            .map_err(ReconcileError::Revision)?;
        let objects = record.objects_to_apply()?;
        self.remember(record);
        Ok(objects)
    }
}

impl Memory {
    /// The next backoff for `name` (1 s doubling to 5 min), counting this failure.
    pub fn backoff(&self, name: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let n = failures.entry(name.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        Duration::from_secs(1u64 << (*n - 1).min(8)).min(Duration::from_secs(300))
    }

    /// The retry delay after a failure of `name`: the backoff, but at most [`API_RETRY_MAX`] when
    /// the API server was unreachable.
    pub fn retry_after(&self, name: &str, api_unreachable: bool) -> Duration {
        let backoff = self.backoff(name);
        if api_unreachable {
            backoff.min(API_RETRY_MAX)
        } else {
            backoff
        }
    }

    /// Forgets the failures of `name`: its next failure starts the backoff again.
    pub(super) fn reset_backoff(&self, name: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impersonation_names_the_service_account_and_sends_no_group() {
        let mut config = Config::new("https://127.0.0.1:1".parse().unwrap());
        // Even a kubeconfig that impersonates groups of its own: none is sent.
        config.auth_info.impersonate_groups = Some(vec!["system:masters".into()]);
        let sa = crate::api::ServiceAccountReference {
            namespace: "team-a".into(),
            name: "deployer".into(),
        };
        let acting = impersonating(&config, &sa);
        assert_eq!(
            acting.auth_info.impersonate.as_deref(),
            Some("system:serviceaccount:team-a:deployer")
        );
        assert_eq!(acting.auth_info.impersonate_groups, None);
    }

    fn bd(version: &str, generation: i64) -> std::sync::Arc<BundleDeployment> {
        let mut bd: BundleDeployment = serde_json::from_value(serde_json::json!({
            "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
            "metadata": {"name": "x", "resourceVersion": version, "generation": generation},
            "spec": {"format": "plain", "sources": []},
        }))
        .unwrap();
        bd.metadata.resource_version = Some(version.into());
        std::sync::Arc::new(bd)
    }

    #[test]
    fn a_pass_starts_from_the_written_object_only_when_the_cache_is_known_to_be_older() {
        let mut written = Written::default();
        written.wrote(Some("1".into()), bd("2", 1).as_ref().clone(), None);
        written.wrote(Some("2".into()), bd("3", 1).as_ref().clone(), None);
        let version = |o: Option<std::sync::Arc<BundleDeployment>>| {
            o.map(|o| o.metadata.resource_version.clone().unwrap())
        };
        // The cache two writes behind, one behind, current.
        assert_eq!(version(written.newest(&bd("1", 1))).as_deref(), Some("3"));
        assert_eq!(version(written.newest(&bd("2", 1))).as_deref(), Some("3"));
        assert_eq!(version(written.newest(&bd("3", 1))).as_deref(), Some("3"));
        // A version the chain does not know (a re-list after an outage, a user's edit of labels
        // or annotations): read it.
        assert!(written.newest(&bd("7", 1)).is_none());
        // A higher generation than the write's: a spec edit made after it.
        assert_eq!(version(written.newest(&bd("7", 2))).as_deref(), Some("7"));
        // Once the watch delivered the write, the cache holds it: a cache behind it again
        // re-listed and is read.
        let mut delivered = written.clone();
        delivered.delivered("3");
        assert!(delivered.answer.is_none());
        assert_eq!(version(delivered.newest(&bd("3", 1))).as_deref(), Some("3"));
        assert!(delivered.newest(&bd("2", 1)).is_none());
        // A write not made on the last one starts a new chain.
        written.wrote(Some("9".into()), bd("10", 2).as_ref().clone(), None);
        assert!(written.newest(&bd("2", 1)).is_none());
        assert_eq!(version(written.newest(&bd("9", 2))).as_deref(), Some("10"));
    }
}

/// Whether every source must say who signed it (`--require-verification`), and the servers
/// exempt from it (`--allow-unverified-host`, for local development).
#[derive(Clone, Debug, Default)]
pub struct VerificationPolicy {
    /// Sources without `verify` are refused.
    pub require: bool,
    /// Servers (`host` or `host:port`) whose sources may go without `verify`.
    pub unverified_hosts: Vec<String>,
}

impl VerificationPolicy {
    /// Why `source` may not be fetched as it is: it has no `verify` while one is required and
    /// its server is not exempt.
    pub fn refusal(&self, source: &crate::api::Source) -> Option<String> {
        if !self.require || source.verify.is_some() {
            return None;
        }
        let host = crate::source::source_host(source);
        let exempt = host.as_deref().is_some_and(|host| {
            self.unverified_hosts.iter().any(|allowed| {
                allowed == host
                    || host
                        .split_once(':')
                        .is_some_and(|(name, _)| name == allowed)
            })
        });
        (!exempt).then(|| {
            format!(
                "{} has no verify block, and this agent requires one on every source (--require-verification){}",
                crate::source::describe_source(source),
                match host {
                    Some(host) => format!("; {host} is not among the --allow-unverified-host servers"),
                    None => String::new(),
                }
            )
        })
    }
}
