//! The reconciler: one BundleDeployment at a time, as a pipeline of phases.
//!
//! ```text
//! fetch (I/O) -> render (pure) -> apply in stages + prune (I/O) -> status (pure) -> patch status (I/O)
//! ```
//!
//! Each phase has its own module; this one wires them together, handles pause and deletion, and
//! turns errors into conditions. Health, revisions and rollback come with their own phases.

pub mod controller;
pub mod fetch;
pub mod owned;
pub mod render;
pub mod status;

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Config, ResourceExt};
use pallet_formats::{Object, ObjectKey};
use serde_json::json;

use crate::api::{BundleDeployment, BundleDeploymentStatus, DeletionPolicy, ObjectReference};
use crate::apply::{
    plan, Applied, Applier, ApplyError, KindResolver, Outcome as ApplyOutcome, FIELD_MANAGER,
};
use crate::changelog::{self, ChangeLog, Operation, Reason};
use crate::source::{Fetcher, SourceError};
use fetch::SecretPolicy;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Resource;
use status::{FailedPhase, Outcome};

/// Finalizer that lets pallet clean up a BundleDeployment's objects before it goes away.
pub const FINALIZER: &str = "pallet.dev/cleanup";
/// Annotation carrying the reason for a pause, shown in the Paused condition.
pub const PAUSED_REASON_ANNOTATION: &str = "pallet.dev/paused-reason";

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A source could not be fetched.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A Secret could not be used.
    #[error("{message}")]
    Secret {
        /// CamelCase reason.
        reason: &'static str,
        /// What and where.
        message: String,
    },
    /// The bundle could not be rendered.
    #[error("render: {0}")]
    Render(#[from] pallet_formats::RenderError),
    /// An object could not be applied or pruned (boxed: it is the largest variant by far).
    #[error(transparent)]
    Apply(Box<ApplyError>),
    /// A write for the bundle was forbidden by RBAC (for the impersonated ServiceAccount).
    #[error("{0}")]
    Forbidden(String),
    /// Deleting the bundle's objects is under way; the finalizer stays until they are gone.
    #[error("waiting for {0} to be deleted")]
    Deleting(String),
    /// A Kubernetes API call of the agent's own failed.
    #[error("{context}: {source}")]
    Kube {
        /// What the agent was doing.
        context: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
}

impl From<ApplyError> for ReconcileError {
    fn from(error: ApplyError) -> Self {
        ReconcileError::Apply(Box::new(error))
    }
}

impl ReconcileError {
    /// CamelCase category: condition reason, Event reason and metric label.
    pub fn category(&self) -> &'static str {
        match self {
            ReconcileError::Source(e) => e.category(),
            ReconcileError::Secret { reason, .. } => reason,
            ReconcileError::Render(e) => e.category(),
            ReconcileError::Apply(e) => e.category(),
            ReconcileError::Forbidden(_) => "Forbidden",
            ReconcileError::Deleting(_) => "Deleting",
            ReconcileError::Kube { .. } => "KubernetesAPIError",
        }
    }

    /// True when retrying without a change may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            ReconcileError::Source(e) => e.is_transient(),
            ReconcileError::Secret { .. }
            | ReconcileError::Render(_)
            | ReconcileError::Forbidden(_) => false,
            ReconcileError::Apply(e) => e.is_transient(),
            ReconcileError::Kube { .. } | ReconcileError::Deleting(_) => true,
        }
    }

    fn phase(&self) -> FailedPhase {
        match self {
            ReconcileError::Source(_) | ReconcileError::Secret { .. } => FailedPhase::Fetch,
            _ => FailedPhase::Install,
        }
    }
}

/// Everything a reconcile needs besides the object.
pub struct Context {
    /// The agent's client (reads, status, Secrets, reviews).
    pub client: Client,
    /// The agent's client configuration, from which impersonating clients are made.
    pub config: Config,
    /// Fetches sources through the shared cache.
    pub fetcher: Fetcher,
    /// Kind resolution shared by all applies.
    pub kinds: KindResolver,
    /// Where Secrets may be read from.
    pub secret_policy: SecretPolicy,
    /// Requeue interval when nothing else asks for one (drift checks, floating refs).
    pub requeue_interval: Duration,
    /// Objects applied at once within a stage.
    pub apply_parallelism: usize,
    /// Where every write is recorded.
    pub changelog: ChangeLog,
    /// Publishes summary Events on BundleDeployments.
    pub recorder: Recorder,
    /// Watches on applied objects, for prompt drift correction (None: drift waits for requeue).
    pub owned: Option<owned::OwnedWatches>,
    /// Consecutive transient failures per BundleDeployment, for exponential backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// The cluster's capabilities for helm charts, with when they were read.
    capabilities:
        tokio::sync::Mutex<Option<(std::time::Instant, pallet_formats::HelmCapabilities)>>,
    /// Digest last applied per BundleDeployment in this process: tells a new revision's writes
    /// from drift corrections in the change log. (Revisions in status will replace it.)
    applied_digests: Mutex<HashMap<String, String>>,
}

impl Context {
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
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            config,
            fetcher,
            kinds: KindResolver::default(),
            secret_policy,
            requeue_interval,
            apply_parallelism,
            changelog,
            owned,
            failures: Mutex::new(HashMap::new()),
            applied_digests: Mutex::new(HashMap::new()),
            capabilities: tokio::sync::Mutex::new(None),
        }
    }

    /// The cluster's version and served APIs, for helm's `.Capabilities`. Read through discovery
    /// at most once a minute: it costs a request per API group.
    async fn helm_capabilities(&self) -> Result<pallet_formats::HelmCapabilities, ReconcileError> {
        const MAX_AGE: Duration = Duration::from_secs(60);
        let mut cached = self.capabilities.lock().await;
        if let Some((read_at, capabilities)) = cached.as_ref() {
            if read_at.elapsed() < MAX_AGE {
                return Ok(capabilities.clone());
            }
        }
        let kube_error = |context: &str| {
            let context = context.to_string();
            move |source| ReconcileError::Kube { context, source }
        };
        let version = self
            .client
            .apiserver_version()
            .await
            .map_err(kube_error("read the cluster's version"))?;
        let discovery = kube::Discovery::new(self.client.clone())
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
            api_versions: render::api_versions(
                served
                    .iter()
                    .map(|(g, v, k)| (g.as_str(), v.as_str(), k.as_str())),
            ),
        };
        *cached = Some((std::time::Instant::now(), capabilities.clone()));
        Ok(capabilities)
    }

    /// Publishes an Event on `bd`; a failure to publish is logged, never fatal.
    async fn event(
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

    /// The next backoff for `name` (1 s doubling to 5 min), counting this failure.
    pub fn backoff(&self, name: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let n = failures.entry(name.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        Duration::from_secs(1u64 << (*n - 1).min(8)).min(Duration::from_secs(300))
    }

    fn reset_backoff(&self, name: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }

    /// The client for writes to `bd`'s objects: impersonating its ServiceAccount when it names one.
    fn writer(&self, bd: &BundleDeployment) -> Result<Client, ReconcileError> {
        let Some(sa) = &bd.spec.service_account else {
            return Ok(self.client.clone());
        };
        let mut config = self.config.clone();
        config.auth_info.impersonate = Some(format!(
            "system:serviceaccount:{}:{}",
            sa.namespace, sa.name
        ));
        config.auth_info.impersonate_groups = Some(vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{}", sa.namespace),
            "system:authenticated".into(),
        ]);
        Client::try_from(config).map_err(|e| ReconcileError::Kube {
            context: "build impersonating client".into(),
            source: e,
        })
    }

    /// An applier for `bd` writing through `client` (see [`Context::writer`]).
    fn applier(&self, bd: &BundleDeployment, client: Client) -> Applier {
        Applier {
            client,
            kinds: self.kinds.clone(),
            owner: bd.name_any(),
            install_namespace: bd.spec.install_namespace.clone(),
            collision_protection: bd.spec.collision_protection(),
            parallelism: self.apply_parallelism,
            journal: Default::default(),
        }
    }
}

/// What the controller should do after a reconcile.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// Look again after this long.
    RequeueAfter(Duration),
}

/// Reconciles one BundleDeployment that is not being deleted: fetch, render, apply, prune, status.
pub async fn reconcile_apply(bd: &BundleDeployment, ctx: &Context) -> Result<Next, ReconcileError> {
    let name = bd.name_any();
    let current = bd.status.clone().unwrap_or_default();
    if bd.spec.paused {
        let reason = bd.annotations().get(PAUSED_REASON_ANNOTATION).cloned();
        let drift = match observe_drift(bd, ctx).await {
            Ok(drift) => Some(drift),
            Err(error) => {
                tracing::warn!(bundle_deployment = %name, error = %error, "paused: could not compute drift");
                None
            }
        };
        write_status(ctx, bd, &current, &Outcome::Paused { reason, drift }).await?;
        return Ok(Next::RequeueAfter(ctx.requeue_interval));
    }
    let outcome = match install(bd, ctx, &current).await {
        Ok(outcome) => {
            ctx.reset_backoff(&name);
            outcome
        }
        Err(error) => {
            let outcome = Outcome::Failed {
                phase: error.phase(),
                reason: error.category().to_string(),
                message: error.to_string(),
                transient: error.is_transient(),
            };
            tracing::warn!(bundle_deployment = %name, reason = %error.category(), error = %error, "reconcile failed");
            write_status(ctx, bd, &current, &outcome).await?;
            return Err(error);
        }
    };
    write_status(ctx, bd, &current, &outcome).await?;
    Ok(Next::RequeueAfter(ctx.requeue_interval))
}

/// While paused: fetch and render as usual, then only read the live objects and list those that
/// differ from the bundle. No write of any kind to the bundle's objects.
async fn observe_drift(
    bd: &BundleDeployment,
    ctx: &Context,
) -> Result<Vec<ObjectReference>, ReconcileError> {
    let objects = fetch_and_render(bd, ctx).await?.object_list();
    // Reads go through the agent's own client: observing is not acting on the user's behalf.
    let drifted = ctx.applier(bd, ctx.client.clone()).drift(&objects).await?;
    Ok(drifted
        .into_iter()
        .map(|d| ObjectReference {
            message: Some(d.message),
            ..reference(&d.key, &d.api_version)
        })
        .collect())
}

/// Phases 1 and 2: fetch the sources into a scratch tree, render it, drop the tree.
async fn fetch_and_render(
    bd: &BundleDeployment,
    ctx: &Context,
) -> Result<pallet_formats::Rendered, ReconcileError> {
    // Only helm charts look at the cluster (`.Capabilities`); other formats never pay for it.
    let capabilities = match bd.spec.format {
        crate::api::BundleFormat::Helm => Some(ctx.helm_capabilities().await?),
        _ => None,
    };
    let fetched = fetch::fetch_bundle(&ctx.client, &ctx.fetcher, &ctx.secret_policy, bd).await?;
    let rendered = render::render(bd, &fetched.tree, capabilities);
    fetch::remove_tree(&fetched.tree);
    Ok(rendered?)
}

/// The install pipeline proper; the caller turns its result into status.
async fn install(
    bd: &BundleDeployment,
    ctx: &Context,
    current: &BundleDeploymentStatus,
) -> Result<Outcome, ReconcileError> {
    let rendered = fetch_and_render(bd, ctx).await?;
    let objects: Vec<Object> = rendered.object_list();

    let writer = ctx.writer(bd)?;
    if let Some(namespace) = &bd.spec.install_namespace {
        ensure_namespace(&ctx.client, &writer, namespace).await?;
    }
    let applier = ctx.applier(bd, writer);
    let digest = rendered.digest();
    let result = apply_and_prune(&applier, &objects, current).await;
    log_writes(ctx, bd, &applier, &objects, &digest, result.as_ref().err()).await;
    let (applied, pruned) = result?;
    ctx.applied_digests
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(bd.name_any(), digest.clone());

    let inventory: Vec<ObjectReference> = applied
        .iter()
        .filter(|a| a.outcome != ApplyOutcome::Skipped)
        .map(|a| reference(&a.key, &a.api_version))
        .collect();
    let skipped: Vec<ObjectReference> = applied
        .iter()
        .filter(|a| a.outcome == ApplyOutcome::Skipped)
        .map(|a| ObjectReference {
            message: Some("optional; the cluster does not serve this kind".into()),
            ..reference(&a.key, &a.api_version)
        })
        .collect();

    if let Some(owned) = &ctx.owned {
        for a in applied
            .iter()
            .filter(|a| a.outcome != ApplyOutcome::Skipped)
        {
            // Resolved moments ago by the apply, so this is a cache hit.
            if let Ok(Some((_, resource))) = applier.api_for_existing(&a.key, &a.api_version).await
            {
                owned.watch(&resource);
            }
        }
    }
    for key in &pruned.deleted {
        tracing::info!(bundle_deployment = %bd.name_any(), object = %key, "pruned");
    }
    for (key, why) in &pruned.kept {
        tracing::warn!(bundle_deployment = %bd.name_any(), object = %key, "not pruned: {why}");
    }

    let written = applied
        .iter()
        .filter(|a| matches!(a.outcome, ApplyOutcome::Created | ApplyOutcome::Updated))
        .count();
    Ok(Outcome::Installed {
        digest,
        inventory,
        skipped,
        written,
    })
}

/// Applies `objects`, then prunes what the previous inventory had and they do not.
async fn apply_and_prune(
    applier: &Applier,
    objects: &[Object],
    current: &BundleDeploymentStatus,
) -> Result<(Vec<Applied>, crate::apply::Pruned), ApplyError> {
    let applied = applier.apply(objects).await?;
    let kept: Vec<ObjectKey> = applied
        .iter()
        .filter(|a| a.outcome != ApplyOutcome::Skipped)
        .map(|a| a.key.clone())
        .collect();
    let previous = current
        .inventory
        .as_ref()
        .map(|i| i.objects.clone())
        .unwrap_or_default();
    let previous_keys: Vec<ObjectKey> = previous.iter().map(key_of).collect();
    let versions: HashMap<ObjectKey, String> = previous
        .iter()
        .map(|r| (key_of(r), api_version_of(r)))
        .collect();
    let prune: Vec<(ObjectKey, String)> = plan::prune_set(&previous_keys, &kept)
        .into_iter()
        .filter_map(|k| versions.get(&k).cloned().map(|v| (k, v)))
        .collect();
    let pruned = applier.prune(&prune).await?;
    Ok((applied, pruned))
}

/// Writes a change-log line for every write in the applier's journal and one summary Event.
async fn log_writes(
    ctx: &Context,
    bd: &BundleDeployment,
    applier: &Applier,
    objects: &[Object],
    digest: &str,
    error: Option<&ApplyError>,
) {
    let name = bd.name_any();
    let new_revision = ctx
        .applied_digests
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&name)
        .map(String::as_str)
        != Some(digest);
    // Writes for a digest this process has not applied yet belong to a new revision; writes
    // that re-apply the same digest can only be restoring drift.
    let apply_reason = if new_revision {
        Reason::NewRevision
    } else {
        Reason::Drift
    };
    let writes: Vec<Applied> =
        std::mem::take(&mut *applier.journal.lock().unwrap_or_else(|p| p.into_inner()));
    let (mut created, mut updated, mut deleted) = (0, 0, 0);
    for write in &writes {
        let (operation, reason) = match (&write.outcome, &write.adopted_from) {
            (ApplyOutcome::Deleted, _) => (Operation::Delete, Reason::Prune),
            (_, Some(_)) => (Operation::Update, Reason::Adoption),
            (ApplyOutcome::Created, _) => (Operation::Create, apply_reason),
            _ => (Operation::Update, apply_reason),
        };
        match operation {
            Operation::Create => created += 1,
            Operation::Update => updated += 1,
            Operation::Delete => deleted += 1,
        }
        let mut entry = ctx.changelog.entry(
            &name,
            operation,
            reason,
            change_object(&write.key, &write.api_version),
        );
        entry.revision = Some(digest.to_string());
        entry.resource_version_before = write.resource_version_before.clone();
        entry.resource_version_after = write.resource_version_after.clone();
        entry.fields_changed = write.fields_changed.clone();
        if let Some(previous) = &write.adopted_from {
            entry
                .details
                .insert("previousOwner".into(), json!(previous));
        }
        ctx.changelog.record(&entry);
    }
    if let Some(error) = error {
        if let Some(key) = error.key() {
            // The failed write: an update or a create, as far as the agent could tell.
            let api_version = objects
                .iter()
                .find(|o| &o.key() == key)
                .map(|o| o.api_version())
                .unwrap_or_default();
            let mut entry = ctx.changelog.entry(
                &name,
                Operation::Update,
                apply_reason,
                change_object(key, api_version),
            );
            entry.revision = Some(digest.to_string());
            entry.result = "failure";
            entry.error = Some(error.to_string());
            ctx.changelog.record(&entry);
        }
        ctx.event(bd, true, error.category(), "Apply", error.to_string())
            .await;
    } else if !writes.is_empty() {
        let why = if new_revision {
            "applied content"
        } else {
            "corrected drift toward content"
        };
        let short = digest.get(..19).unwrap_or(digest);
        let note = format!("{why} {short}: {created} created, {updated} updated, {deleted} pruned");
        ctx.event(
            bd,
            false,
            if new_revision {
                "Applied"
            } else {
                "DriftCorrected"
            },
            "Apply",
            note,
        )
        .await;
    }
}

fn change_object(key: &ObjectKey, api_version: &str) -> changelog::ObjectRef {
    changelog::ObjectRef {
        api_version: api_version.to_string(),
        kind: key.kind.clone(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
    }
}

async fn ensure_namespace(
    reader: &Client,
    writer: &Client,
    name: &str,
) -> Result<(), ReconcileError> {
    // Created when missing and never deleted by pallet: the namespace may hold things that are
    // not the bundle's, so it is not part of the inventory. Looking is the agent's own business;
    // creating is a write for the bundle, so it goes through the (impersonating) writer.
    let context = || format!("create install namespace {name}");
    let kube_error = |e| ReconcileError::Kube {
        context: context(),
        source: e,
    };
    if Api::<Namespace>::all(reader.clone())
        .get_opt(name)
        .await
        .map_err(kube_error)?
        .is_some()
    {
        return Ok(());
    }
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))
        .map_err(|e| kube_error(kube::Error::SerdeError(e)))?;
    match Api::<Namespace>::all(writer.clone())
        .create(&PostParams::default(), &namespace)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 403 => {
            Err(ReconcileError::Forbidden(format!(
                "install namespace {name} does not exist and may not be created: {}",
                status.message
            )))
        }
        Err(e) => Err(kube_error(e)),
    }
}

/// Deletes (or orphans) the objects of a BundleDeployment that is being deleted. Works while
/// paused: deleting is the user's explicit request.
pub async fn cleanup(bd: &BundleDeployment, ctx: &Context) -> Result<Next, ReconcileError> {
    let name = bd.name_any();
    let inventory = bd
        .status
        .as_ref()
        .and_then(|s| s.inventory.clone())
        .unwrap_or_default();
    let keys: Vec<ObjectKey> = inventory.objects.iter().map(key_of).collect();
    let versions: HashMap<ObjectKey, String> = inventory
        .objects
        .iter()
        .map(|r| (key_of(r), api_version_of(r)))
        .collect();
    let applier = ctx.applier(bd, ctx.writer(bd)?);
    let result = match bd.spec.deletion_policy() {
        DeletionPolicy::Delete => {
            // prune_set against an empty set orders every object for deletion: reverse stages.
            let order: Vec<(ObjectKey, String)> = plan::prune_set(&keys, &[])
                .into_iter()
                .filter_map(|k| versions.get(&k).cloned().map(|v| (k, v)))
                .collect();
            delete_all(&applier, &name, &order).await
        }
        DeletionPolicy::Orphan => {
            let mut result = Ok(());
            for r in &inventory.objects {
                if let Err(e) = applier.orphan(&key_of(r), &api_version_of(r)).await {
                    result = Err(e.into());
                    break;
                }
                let mut entry = ctx.changelog.entry(
                    &name,
                    Operation::Update,
                    Reason::Deletion,
                    change_object(&key_of(r), &api_version_of(r)),
                );
                entry.fields_changed = vec![format!(".metadata.labels.{}", plan::OWNER_LABEL)];
                entry.details.insert("orphaned".into(), json!(true));
                ctx.changelog.record(&entry);
            }
            result
        }
    };
    let deletions: Vec<Applied> =
        std::mem::take(&mut *applier.journal.lock().unwrap_or_else(|p| p.into_inner()));
    for write in &deletions {
        let mut entry = ctx.changelog.entry(
            &name,
            Operation::Delete,
            Reason::Deletion,
            change_object(&write.key, &write.api_version),
        );
        entry.resource_version_before = write.resource_version_before.clone();
        ctx.changelog.record(&entry);
    }
    result?;
    Ok(Next::RequeueAfter(ctx.requeue_interval))
}

/// Deletes the objects in `order` and waits briefly for them to be gone. Objects still there
/// (terminating, e.g. a Namespace being emptied) make it return [`ReconcileError::Deleting`], so
/// the finalizer stays and the deletion is checked again with backoff.
async fn delete_all(
    applier: &Applier,
    name: &str,
    order: &[(ObjectKey, String)],
) -> Result<(), ReconcileError> {
    let mut remaining = Vec::new();
    for attempt in 0..5 {
        let pruned = applier.prune(order).await?;
        for (key, why) in &pruned.kept {
            tracing::warn!(bundle_deployment = %name, object = %key, "not deleted: {why}");
        }
        if pruned.deleted.is_empty() && pruned.terminating.is_empty() {
            return Ok(());
        }
        remaining = pruned
            .deleted
            .into_iter()
            .chain(pruned.terminating)
            .map(|k| k.to_string())
            .collect();
        tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
    }
    let shown: Vec<&str> = remaining.iter().take(5).map(String::as_str).collect();
    Err(ReconcileError::Deleting(format!(
        "{} objects ({})",
        remaining.len(),
        shown.join(", ")
    )))
}

/// Writes the status `outcome` leads to, skipping the patch when nothing changed.
async fn write_status(
    ctx: &Context,
    bd: &BundleDeployment,
    current: &BundleDeploymentStatus,
    outcome: &Outcome,
) -> Result<(), ReconcileError> {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let next = status::next_status(current, bd.metadata.generation, outcome, &now);
    if &next == current {
        return Ok(());
    }
    let api: Api<BundleDeployment> = Api::all(ctx.client.clone());
    let patch = json!({"status": status_merge_patch(current, &next)});
    api.patch_status(
        &bd.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await
    .map_err(|e| ReconcileError::Kube {
        context: "write status".into(),
        source: e,
    })?;
    Ok(())
}

/// The JSON merge patch from `current` to `next`: `next` itself, plus an explicit null for every
/// field `current` has and `next` dropped (optional fields are left out when serialized, and a
/// merge patch only removes what it names).
fn status_merge_patch(
    current: &BundleDeploymentStatus,
    next: &BundleDeploymentStatus,
) -> serde_json::Value {
    let mut patch = serde_json::to_value(next).unwrap_or_else(|_| json!({}));
    if let (Some(patch), Ok(serde_json::Value::Object(before))) =
        (patch.as_object_mut(), serde_json::to_value(current))
    {
        for key in before.keys() {
            patch.entry(key.clone()).or_insert(serde_json::Value::Null);
        }
    }
    patch
}

fn reference(key: &ObjectKey, api_version: &str) -> ObjectReference {
    let version = api_version
        .rsplit('/')
        .next()
        .unwrap_or(api_version)
        .to_string();
    ObjectReference {
        group: key.group.clone(),
        version,
        kind: key.kind.clone(),
        namespace: key.namespace.clone().unwrap_or_default(),
        name: key.name.clone(),
        message: None,
    }
}

fn key_of(r: &ObjectReference) -> ObjectKey {
    ObjectKey {
        group: r.group.clone(),
        kind: r.kind.clone(),
        namespace: (!r.namespace.is_empty()).then(|| r.namespace.clone()),
        name: r.name.clone(),
    }
}

fn api_version_of(r: &ObjectReference) -> String {
    if r.group.is_empty() {
        r.version.clone()
    } else {
        format!("{}/{}", r.group, r.version)
    }
}

/// Object keys of an inventory, for tests and tools.
pub fn inventory_keys(status: &BundleDeploymentStatus) -> BTreeSet<ObjectKey> {
    status
        .inventory
        .iter()
        .flat_map(|i| i.objects.iter().map(key_of))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Drift;

    #[test]
    fn merge_patch_removes_dropped_fields() {
        let current = BundleDeploymentStatus {
            drift: Some(Drift {
                count: 1,
                objects: vec![],
            }),
            observed_generation: Some(1),
            ..Default::default()
        };
        let next = BundleDeploymentStatus {
            observed_generation: Some(2),
            ..Default::default()
        };
        let patch = status_merge_patch(&current, &next);
        assert_eq!(patch, json!({"observedGeneration": 2, "drift": null}));
    }
}
