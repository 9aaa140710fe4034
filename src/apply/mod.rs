//! Applying a rendered object set to the cluster: pure planning in [`plan`], the I/O around it
//! here (kind resolution through discovery, server-side apply in stages, prune).
//!
//! One field manager (`pallet`), forced: pallet is the source of truth for the fields it sets,
//! except those `spec.driftIgnore` leaves to other writers and the objects whose annotations say
//! otherwise ([`policy`]). Objects whose live state already holds every rendered field, as the
//! API server stores it ([`stored`]), are not written at all, so a steady state costs reads only.

pub mod live;
mod object;
pub mod plan;
pub mod pointer;
pub mod policy;
pub mod stored;
pub mod takeover;
pub mod undeclared;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{stream, StreamExt, TryStreamExt};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PropagationPolicy};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use kube::Client;
use pallet_formats::{Object, ObjectKey};
use serde_json::Value;
use tokio::sync::RwLock;

use crate::api::{CollisionProtection, Takeover};
use plan::{Stage, OWNER_LABEL};

/// The field manager of every write pallet makes.
pub const FIELD_MANAGER: &str = "pallet";

/// Annotation marking an object optional: skipped while the cluster does not serve its kind.
pub const OPTIONAL_ANNOTATION: &str = "pallet.dev/optional";

/// How long the apply waits for applied CRDs to be Established before giving up.
const CRD_ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(60);

/// What happened to one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It did not exist and was created.
    Created,
    /// It existed and differed; it was updated (possibly adopted).
    Updated,
    /// Live already matched; nothing was written.
    Unchanged,
    /// Optional, and the cluster does not serve its kind.
    Skipped,
    /// Deleted by a prune.
    Deleted,
    /// Not written on purpose, though missing or different from the bundle: the object's
    /// policy annotation says so (`exists`: whether it exists). With `pallet.dev/apply: Ignore`
    /// it is not in the inventory either.
    Withheld {
        /// The policy.
        policy: policy::Policy,
        /// Whether the object exists.
        exists: bool,
    },
    /// A prune or a deletion kept it by its policy annotation and removed pallet's label.
    Orphaned {
        /// The policy.
        policy: policy::Policy,
    },
}

impl Outcome {
    /// Whether the object belongs in the inventory and its health is judged: everything
    /// applied, or kept as it is by `IfNotPresent` or out of drift correction.
    pub fn in_inventory(&self) -> bool {
        !matches!(
            self,
            Outcome::Skipped
                | Outcome::Deleted
                | Outcome::Orphaned { .. }
                | Outcome::Withheld {
                    policy: policy::Policy::ApplyIgnore,
                    ..
                }
        )
    }

    /// Whether the API server was written to.
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Outcome::Created | Outcome::Updated | Outcome::Deleted | Outcome::Orphaned { .. }
        )
    }
}

/// Told of each write the moment it returns, before the applier goes on (the change log writes
/// its entry there, so a killed agent loses at most the entries of writes in flight).
pub type WriteObserver = Arc<dyn Fn(&Applied) + Send + Sync>;

/// Every write an [`Applier`] made, in order, including those made before an error stopped it
/// (the pass's summary counts them), and who is told of each as it returns. Clones share both.
#[derive(Clone, Default)]
pub struct Journal {
    writes: Arc<std::sync::Mutex<Vec<Applied>>>,
    observer: Option<WriteObserver>,
}

impl Journal {
    /// An empty journal telling `observer` of each write.
    pub fn observed(observer: WriteObserver) -> Journal {
        Journal {
            writes: Arc::default(),
            observer: Some(observer),
        }
    }

    /// The writes so far, leaving the journal empty.
    pub fn take(&self) -> Vec<Applied> {
        std::mem::take(&mut *self.writes.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn push(&self, write: Applied) {
        // A fault injected here leaves the write done and unlogged: the in-flight case.
        match write.outcome {
            Outcome::Deleted | Outcome::Orphaned { .. } => {
                crate::fault::reached(crate::fault::Point::Prune)
            }
            Outcome::Withheld { .. } => {} // nothing was written
            _ => crate::fault::reached(crate::fault::Point::Apply),
        }
        if let Some(observer) = &self.observer {
            observer(&write);
        }
        self.writes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(write);
    }
}

/// One object's apply result.
#[derive(Clone, Debug)]
pub struct Applied {
    /// Which object.
    pub key: ObjectKey,
    /// Its API version as applied.
    pub api_version: String,
    /// What happened.
    pub outcome: Outcome,
    /// Set when an existing object was taken over from another owner (or from nobody): the
    /// BundleDeployment that owned it, or the previous owner `spec.takeover` names ("Helm
    /// release prod/shop").
    pub adopted_from: Option<Option<String>>,
    /// resourceVersion before the write (None for a create or when nothing existed).
    pub resource_version_before: Option<String>,
    /// resourceVersion after the write (the live one when unchanged).
    pub resource_version_after: Option<String>,
    /// The revision ([`plan::REVISION_ANNOTATION`]) the object carried before this pass, when
    /// it was already this bundle's: shows what an earlier agent last applied to it.
    pub revision_before: Option<i64>,
    /// Field paths the write changed (updates only; a bounded list).
    pub fields_changed: Vec<String>,
    /// Fields of the bundle's object the API server's schema does not declare, left out of the
    /// write (see [`undeclared`]).
    pub left_out: Vec<String>,
    /// The object as the API server last returned it in this pass (the read that found it
    /// unchanged, or the write's response), so health is judged without reading it again.
    /// None when skipped or deleted, and in the journal.
    pub live: Option<Value>,
}

/// At most this many changed field paths are reported per object.
const CHANGED_PATHS_LIMIT: usize = 20;

/// An object whose live state differs from the rendered one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drifted {
    /// Which object.
    pub key: ObjectKey,
    /// Its API version as rendered.
    pub api_version: String,
    /// What differs (a field path, or that it is missing); never a value.
    pub message: String,
}

/// What a prune did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Objects deleted.
    pub deleted: Vec<ObjectKey>,
    /// Objects deliberately kept, with the reason (CRDs that still have objects).
    pub kept: Vec<(ObjectKey, String)>,
    /// Objects already being deleted (deletionTimestamp set, finalizers pending): not deleted
    /// again, but not gone yet either.
    pub terminating: Vec<ObjectKey>,
}

/// Why applying (or pruning) an object failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The cluster does not serve the object's kind (and it is not optional).
    #[error("{key}: the cluster does not serve {api_version} {kind}", kind = key.kind)]
    KindNotServed {
        /// The object.
        key: ObjectKey,
        /// Its apiVersion.
        api_version: String,
    },
    /// Another owner (or no owner, under Prevent) holds the object.
    #[error("{key} already exists and is owned by {}; collisionProtection {policy:?} forbids taking it over",
        owner.as_deref().map(|o| format!("BundleDeployment {o}")).unwrap_or_else(|| "no BundleDeployment (created outside pallet)".into()))]
    OwnershipConflict {
        /// The object.
        key: ObjectKey,
        /// Its current owner, if any.
        owner: Option<String>,
        /// The policy in force.
        policy: CollisionProtection,
    },
    /// The API server refused the object (invalid, forbidden, ...).
    #[error("{key}: the API server refused it: {message}")]
    Rejected {
        /// The object.
        key: ObjectKey,
        /// HTTP status code.
        code: u16,
        /// The server's message.
        message: String,
    },
    /// A CRD did not become Established in time.
    #[error("CustomResourceDefinition {name} was not Established within {timeout:?}: {detail}")]
    CrdNotEstablished {
        /// CRD name.
        name: String,
        /// The wait.
        timeout: Duration,
        /// Last conditions seen.
        detail: String,
    },
    /// The object is cluster-scoped but names a namespace, or namespaced with none to give it.
    #[error("{key}: {message}")]
    Scope {
        /// The object.
        key: ObjectKey,
        /// What is wrong.
        message: String,
    },
    /// A policy annotation of the object has a value pallet does not know.
    #[error("{key}: {message}")]
    Policy {
        /// The object.
        key: ObjectKey,
        /// Which annotation and value.
        message: String,
    },
    /// A network or server-side error that may pass.
    #[error("{key}: {source}")]
    Transient {
        /// The object.
        key: ObjectKey,
        /// The underlying error.
        #[source]
        source: kube::Error,
    },
}

impl ApplyError {
    /// CamelCase category, used as condition and Event reason.
    pub fn category(&self) -> &'static str {
        match self {
            ApplyError::KindNotServed { .. } => "KindNotServed",
            ApplyError::OwnershipConflict { .. } => "OwnershipConflict",
            ApplyError::Rejected { code: 403, .. } => "Forbidden",
            ApplyError::Rejected { .. } => "ObjectRejected",
            ApplyError::CrdNotEstablished { .. } => "CrdNotEstablished",
            ApplyError::Scope { .. } => "InvalidScope",
            ApplyError::Policy { .. } => "InvalidPolicy",
            ApplyError::Transient { .. } => "ApplyFailed",
        }
    }

    /// True when retrying without a change may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ApplyError::Transient { .. } | ApplyError::CrdNotEstablished { .. }
        )
    }

    /// The object the error is about, when there is one.
    pub fn key(&self) -> Option<&ObjectKey> {
        match self {
            ApplyError::KindNotServed { key, .. }
            | ApplyError::OwnershipConflict { key, .. }
            | ApplyError::Rejected { key, .. }
            | ApplyError::Scope { key, .. }
            | ApplyError::Policy { key, .. }
            | ApplyError::Transient { key, .. } => Some(key),
            ApplyError::CrdNotEstablished { .. } => None,
        }
    }

    fn from_kube(key: &ObjectKey, error: kube::Error) -> ApplyError {
        match error {
            kube::Error::Api(status)
                if is_permanent_status(status.code)
                    || status.message.contains(undeclared::TYPED_PATCH_REFUSED) =>
            {
                ApplyError::Rejected {
                    key: key.clone(),
                    code: status.code,
                    message: status.message,
                }
            }
            source => ApplyError::Transient {
                key: key.clone(),
                source,
            },
        }
    }
}

/// 4xx answers other than conflicts and throttling will not pass by retrying.
fn is_permanent_status(code: u16) -> bool {
    (400..500).contains(&code) && code != 409 && code != 429
}

/// Resolves kinds to API resources through discovery, one group-version at a time, caching what
/// it found. Kinds the cluster does not serve are not cached, so a CRD applied a moment ago is
/// found on the next look-up.
#[derive(Clone, Default)]
pub struct KindResolver {
    cache: Arc<RwLock<HashMap<GroupVersionKind, (ApiResource, ApiCapabilities)>>>,
}

impl KindResolver {
    /// Drops what is cached for `resource`'s kind: its API is gone (its CRD was deleted), so the
    /// next look-up asks discovery again.
    pub async fn forget(&self, resource: &ApiResource) {
        let gvk = GroupVersionKind::gvk(&resource.group, &resource.version, &resource.kind);
        self.cache.write().await.remove(&gvk);
    }

    /// Resolves `gvk`; `Ok(None)` when the cluster does not serve it.
    pub async fn resolve(
        &self,
        client: &Client,
        gvk: &GroupVersionKind,
    ) -> Result<Option<(ApiResource, ApiCapabilities)>, kube::Error> {
        if let Some(found) = self.cache.read().await.get(gvk) {
            return Ok(Some(found.clone()));
        }
        match kube::discovery::pinned_kind(client, gvk).await {
            Ok(found) => {
                self.cache.write().await.insert(gvk.clone(), found.clone());
                Ok(Some(found))
            }
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
            Err(kube::Error::Discovery(_)) => Ok(None),
            Err(other) => Err(other),
        }
    }
}

/// Applies object sets for one BundleDeployment.
#[derive(Clone)]
pub struct Applier {
    /// Client for writes (impersonating the BundleDeployment's ServiceAccount when it names one).
    pub client: Client,
    /// Kind resolution shared across applies.
    pub kinds: KindResolver,
    /// The owning BundleDeployment's name (the value of the ownership label).
    pub owner: String,
    /// Namespace for namespaced objects that name none.
    pub install_namespace: Option<String>,
    /// Collision policy in force.
    pub collision_protection: CollisionProtection,
    /// How many objects of one stage are applied at once.
    pub parallelism: usize,
    /// Writes made so far (see [`Journal`]).
    pub journal: Journal,
    /// The revision being applied, recorded on every object written ([`plan::REVISION_ANNOTATION`]).
    pub revision: Option<i64>,
    /// Live copies of pallet-owned objects, read instead of a GET each (None: always GET).
    pub live: Option<live::LiveObjects>,
    /// The previous owner whose objects are taken over (`spec.takeover`).
    pub takeover: Option<Takeover>,
    /// The BundleDeployment's rules for what is written, and what the server keeps.
    pub rules: ApplyRules,
}

/// What shapes an applier's writes besides the objects: `spec.driftIgnore`, whether the pass
/// re-applies the active revision, and what the API server keeps of what was applied.
#[derive(Clone, Default)]
pub struct ApplyRules {
    /// `spec.driftIgnore`.
    pub ignore: policy::DriftIgnore,
    /// The pass re-applies the active revision (drift correction): objects out of drift
    /// correction are left as they are, objects a policy keeps are not logged, and a difference
    /// where nothing is known of how the server stores the content is checked with a server-side
    /// dry-run before anything is written.
    pub drift_pass: bool,
    /// What the API server keeps of what was applied (shared by every pass of the agent).
    pub stored: stored::StoredForms,
}

/// An object resolved against the cluster, ready to read and write.
struct Target {
    key: ObjectKey,
    api: Api<DynamicObject>,
    resource: ApiResource,
    desired: Value,
}

impl Applier {
    /// Applies `objects` stage by stage ([`Stage`]: CRDs, wait for Established, Namespaces,
    /// cluster RBAC, the rest, workloads, autoscalers, webhook configurations and APIServices);
    /// stops at the first stage with an error, so later stages never run against a half-applied
    /// earlier one.
    pub async fn apply(&self, objects: &[Object]) -> Result<Vec<Applied>, ApplyError> {
        let mut results = Vec::with_capacity(objects.len());
        for (stage, members) in plan::by_stage(objects) {
            // Owned objects: a closure over `&Object` trips the compiler's higher-ranked lifetime
            // check when the future must be Send (as in the controller).
            let owned: Vec<Object> = members.into_iter().cloned().collect();
            let applied: Vec<Applied> = stream::iter(owned)
                .map(|o| async move { self.apply_one(&o).await })
                .buffered(self.parallelism.max(1))
                .try_collect()
                .await?;
            if stage == Stage::Crds {
                for crd in applied.iter().filter(|a| a.outcome != Outcome::Unchanged) {
                    self.wait_established(&crd.key.name).await?;
                }
            }
            results.extend(applied);
        }
        Ok(results)
    }

    /// Resolves `gvk` for `key`'s sake; `None` when the cluster does not serve it.
    async fn resolve_kind(
        &self,
        key: &ObjectKey,
        gvk: &GroupVersionKind,
    ) -> Result<Option<(ApiResource, ApiCapabilities)>, ApplyError> {
        self.kinds
            .resolve(&self.client, gvk)
            .await
            .map_err(|source| ApplyError::Transient {
                key: key.clone(),
                source,
            })
    }

    async fn resolve(&self, object: &Object) -> Result<Option<Target>, ApplyError> {
        let key = object.key();
        let gvk = GroupVersionKind::gvk(object.group(), object.version(), object.kind());
        let Some((resource, caps)) = self.resolve_kind(&key, &gvk).await? else {
            return Ok(None);
        };
        let mut desired = plan::with_owner_label(object, &self.owner);
        let api = match (caps.scope, object.namespace()) {
            (Scope::Cluster, None) => Api::all_with(self.client.clone(), &resource),
            (Scope::Cluster, Some(ns)) => {
                return Err(ApplyError::Scope {
                    key,
                    message: format!(
                        "{} is cluster-scoped but names namespace {ns}",
                        object.kind()
                    ),
                })
            }
            (Scope::Namespaced, Some(ns)) => {
                Api::namespaced_with(self.client.clone(), ns, &resource)
            }
            (Scope::Namespaced, None) => {
                let Some(ns) = self.install_namespace.as_deref() else {
                    return Err(ApplyError::Scope {
                        key,
                        message: format!(
                            "{} is namespaced, names no namespace, and spec.installNamespace is not set",
                            object.kind()
                        ),
                    });
                };
                desired["metadata"]["namespace"] = Value::String(ns.to_string());
                Api::namespaced_with(self.client.clone(), ns, &resource)
            }
        };
        let key = ObjectKey {
            namespace: desired["metadata"]["namespace"]
                .as_str()
                .map(str::to_string),
            ..key
        };
        Ok(Some(Target {
            key,
            api,
            resource,
            desired,
        }))
    }

    /// Whether `live` carries the markers of the previous owner `spec.takeover` names.
    fn claimed(&self, live: Option<&DynamicObject>) -> bool {
        let (Some(takeover), Some(live)) = (&self.takeover, live) else {
            return false;
        };
        serde_json::to_value(&live.metadata)
            .is_ok_and(|metadata| takeover::claims(takeover, &metadata))
    }

    /// Releases `live` from the previous owner (see [`takeover`]) before pallet's first write:
    /// one merge patch guarded by its resourceVersion. Returns the object as it is afterwards.
    async fn release(
        &self,
        api: &Api<DynamicObject>,
        key: &ObjectKey,
        live: DynamicObject,
        desired: &Value,
    ) -> Result<DynamicObject, ApplyError> {
        let Some(takeover) = &self.takeover else {
            return Ok(live);
        };
        let live_value = serde_json::to_value(&live).unwrap_or(Value::Null);
        let now = k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let Some(patch) =
            takeover::release_patch(takeover, &live_value, desired, FIELD_MANAGER, &now)
        else {
            return Ok(live);
        };
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..Default::default()
        };
        api.patch(&key.name, &params, &Patch::Merge(&patch))
            .await
            .map_err(|e| ApplyError::from_kube(key, e))
    }

    /// What the live copies know of `key` (Unknown without live copies).
    fn cached(&self, resource: &ApiResource, key: &ObjectKey) -> live::Lookup {
        match &self.live {
            Some(copies) => copies.lookup(resource, key.namespace.as_deref(), &key.name),
            None => live::Lookup::Unknown,
        }
    }

    /// Whether this agent deleted (or orphaned) `key` and the watch has not reported it yet: its
    /// live copy, if any, still shows it as it was.
    fn deleted_unseen(&self, resource: &ApiResource, key: &ObjectKey) -> bool {
        self.live.as_ref().is_some_and(|copies| {
            copies.deleted_unseen(resource, key.namespace.as_deref(), &key.name)
        })
    }

    /// Reads the live object for an apply; its kind going away in between is reported as not
    /// served (the next look-up asks discovery again).
    async fn read_existing(
        &self,
        api: &Api<DynamicObject>,
        resource: &ApiResource,
        key: &ObjectKey,
        object: &Object,
    ) -> Result<Option<DynamicObject>, ApplyError> {
        match self.read_live(api, resource, key).await? {
            Some(live) => Ok(live),
            None => Err(ApplyError::KindNotServed {
                key: key.clone(),
                api_version: object.api_version().to_string(),
            }),
        }
    }

    /// Server-side apply that only creates: the body names a resourceVersion no existing object
    /// has, so the API server answers 409 Conflict instead of changing an object that exists
    /// (on a create it ignores the field). `Ok(None)`: the object exists; read it and decide.
    /// One request for a new object, where a read and then a write would take two.
    async fn create_only(
        &self,
        api: &Api<DynamicObject>,
        key: &ObjectKey,
        desired: &Value,
    ) -> Result<Option<(DynamicObject, Vec<String>)>, ApplyError> {
        let mut body = match self.revision {
            Some(revision) => plan::with_revision_annotation(desired.clone(), revision),
            None => desired.clone(),
        };
        // etcd's revision 1 went to the cluster's first write long ago: no object has it.
        body["metadata"]["resourceVersion"] = Value::String("1".into());
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match undeclared::apply_leaving_out_undeclared(api, key, &params, &body).await {
            Ok(written) => Ok(Some(written)),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
            Err(e) => Err(ApplyError::from_kube(key, e)),
        }
    }

    /// Reads the live object. `Ok(Some(None))`: no such object. `Ok(None)`: the API for its
    /// kind is gone (the apiserver answers 404 for the resource path itself), and the cached
    /// kind is dropped so that the next look-up asks discovery again.
    async fn read_live(
        &self,
        api: &Api<DynamicObject>,
        resource: &ApiResource,
        key: &ObjectKey,
    ) -> Result<Option<Option<DynamicObject>>, ApplyError> {
        match api.get_opt(&key.name).await {
            Ok(live) => {
                if let (Some(copies), Some(live)) = (&self.live, &live) {
                    copies.fill(resource, live);
                }
                Ok(Some(live))
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                self.kinds.forget(resource).await;
                Ok(None)
            }
            Err(e) => Err(ApplyError::from_kube(key, e)),
        }
    }

    fn record(&self, write: &Applied) {
        // The journal feeds the change log: it needs no object bodies.
        let entry = Applied {
            live: None,
            ..write.clone()
        };
        self.journal.push(entry);
    }

    /// The first served version of `crd` that discovery does not list yet.
    async fn first_kind_not_discovered(
        &self,
        crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    ) -> Option<GroupVersionKind> {
        let served = crd.spec.versions.iter().filter(|v| v.served);
        for version in served {
            let gvk = GroupVersionKind::gvk(&crd.spec.group, &version.name, &crd.spec.names.kind);
            if !matches!(self.kinds.resolve(&self.client, &gvk).await, Ok(Some(_))) {
                return Some(gvk);
            }
        }
        None
    }

    async fn wait_established(&self, name: &str) -> Result<(), ApplyError> {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let deadline = tokio::time::Instant::now() + CRD_ESTABLISHED_TIMEOUT;
        let mut last = String::from("not read yet");
        while tokio::time::Instant::now() < deadline {
            if let Ok(crd) = crds.get(name).await {
                let conditions = crd
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.clone())
                    .unwrap_or_default();
                if conditions
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                {
                    // Discovery catches up with the condition a moment later; until it does,
                    // the custom resources of the same revision would be refused as not served.
                    match self.first_kind_not_discovered(&crd).await {
                        None => return Ok(()),
                        Some(gvk) => {
                            last = format!(
                                "Established, but discovery does not serve {}/{} {} yet",
                                gvk.group, gvk.version, gvk.kind
                            );
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            continue;
                        }
                    }
                }
                last = conditions
                    .iter()
                    .map(|c| {
                        format!(
                            "{}={} ({})",
                            c.type_,
                            c.status,
                            c.message.as_deref().unwrap_or("")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(ApplyError::CrdNotEstablished {
            name: name.to_string(),
            timeout: CRD_ESTABLISHED_TIMEOUT,
            detail: last,
        })
    }

    /// The API for an object already applied (from an inventory: key and apiVersion), and its
    /// resource; `None` when the cluster no longer serves the kind.
    pub async fn api_for_existing(
        &self,
        key: &ObjectKey,
        api_version: &str,
    ) -> Result<Option<(Api<DynamicObject>, ApiResource)>, ApplyError> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, &key.kind);
        let Some((resource, caps)) = self.resolve_kind(key, &gvk).await? else {
            return Ok(None);
        };
        let api = match (&caps.scope, &key.namespace) {
            (Scope::Namespaced, Some(ns)) => {
                Api::namespaced_with(self.client.clone(), ns, &resource)
            }
            _ => Api::all_with(self.client.clone(), &resource),
        };
        Ok(Some((api, resource)))
    }

    /// Whether the object exists, read with this applier's identity (an error when it may not
    /// read it).
    pub async fn exists(&self, key: &ObjectKey, api_version: &str) -> Result<bool, ApplyError> {
        let Some((api, _)) = self.api_for_existing(key, api_version).await? else {
            return Ok(false); // its kind is not served, so it has no objects
        };
        match api.get_metadata_opt(&key.name).await {
            Ok(found) => Ok(found.is_some()),
            Err(e) => Err(ApplyError::from_kube(key, e)),
        }
    }

    /// Removes this owner's label from an applied object, leaving the object in place
    /// (`deletionPolicy: Orphan`). An object already gone is fine.
    pub async fn orphan(&self, key: &ObjectKey, api_version: &str) -> Result<(), ApplyError> {
        let Some((api, _)) = self.api_for_existing(key, api_version).await? else {
            return Ok(());
        };
        let patch = serde_json::json!({"metadata": {"labels": {OWNER_LABEL: null}}});
        match api
            .patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(ApplyError::from_kube(key, e)),
        }
    }

    /// Where each object will live: its key (with the install namespace filled in for namespaced
    /// objects that name none) and apiVersion. Objects whose kind the cluster does not serve yet
    /// (a CRD in the same bundle) are left out.
    pub async fn resolve_keys(
        &self,
        objects: &[Object],
    ) -> Result<Vec<(ObjectKey, String)>, ApplyError> {
        let mut keys = Vec::with_capacity(objects.len());
        for object in objects {
            if let Some(target) = self.resolve(object).await? {
                keys.push((target.key, object.api_version().to_string()));
            }
        }
        Ok(keys)
    }

    /// Deletes `keys` (as returned by [`plan::prune_set`], in that order) when they still carry
    /// this owner's label; objects already gone or owned by someone else are left alone.
    ///
    /// A CustomResourceDefinition is deleted only when no objects of it remain anywhere in the
    /// cluster: deleting a CRD deletes all its objects, which may be data no bundle can restore.
    /// Such a CRD is kept, reported, and tried again at the next prune.
    ///
    /// An object annotated `pallet.dev/prune: Disabled` or `helm.sh/resource-policy: keep` (as
    /// last applied) is kept: pallet's label is removed from it, and it is reported as kept.
    pub async fn prune(&self, keys: &[(ObjectKey, String)]) -> Result<Pruned, ApplyError> {
        self.delete_owned(keys, true).await
    }

    /// Deletes `keys` as [`Applier::prune`] does, whatever their policy annotations say: helm
    /// hooks, which their delete policy removes.
    pub async fn delete_hooks(&self, keys: &[(ObjectKey, String)]) -> Result<Pruned, ApplyError> {
        self.delete_owned(keys, false).await
    }

    async fn delete_owned(
        &self,
        keys: &[(ObjectKey, String)],
        honour_policies: bool,
    ) -> Result<Pruned, ApplyError> {
        let mut pruned = Pruned::default();
        for (key, api_version) in keys {
            let Some((api, resource)) = self.api_for_existing(key, api_version).await? else {
                continue; // the kind is gone, so are its objects
            };
            // Gone, or its whole kind is gone (a CRD deleted a moment ago): nothing to delete.
            // Only pallet-owned objects are deleted, so the live copies answer when they can:
            // not for one this agent deleted or orphaned and whose watch event has not come
            // (the copy still shows it as it was: it would be deleted or orphaned again).
            let cached = if self.deleted_unseen(&resource, key) {
                live::Lookup::Unknown
            } else {
                self.cached(&resource, key)
            };
            let live = match cached {
                live::Lookup::Found(object) => object.as_ref().clone(),
                live::Lookup::Absent => continue,
                live::Lookup::Unknown => match self.read_live(&api, &resource, key).await? {
                    Some(Some(live)) => live,
                    _ => continue,
                },
            };
            let owner = live
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(OWNER_LABEL));
            if owner.map(String::as_str) != Some(self.owner.as_str()) {
                continue;
            }
            if live.metadata.deletion_timestamp.is_some() {
                pruned.terminating.push(key.clone());
                continue;
            }
            let kept = honour_policies
                .then(|| policy::kept_by(live.metadata.annotations.as_ref()))
                .flatten();
            if let Some(policy) = kept {
                self.orphan_kept(&api, &resource, (key, api_version), &live, policy)
                    .await?;
                pruned.kept.push((
                    key.clone(),
                    format!(
                        "{}: kept on the cluster, without this BundleDeployment's label",
                        policy.annotation()
                    ),
                ));
                continue;
            }
            if Stage::of(&key.group, &key.kind) == Stage::Crds {
                if let Some(example) = self.first_custom_resource(key, &live.data).await? {
                    pruned.kept.push((
                        key.clone(),
                        format!(
                            "CustomResourceDefinition {} still has objects (for example {example}); \
                             pallet deletes a CRD only when none of its objects remain",
                            key.name
                        ),
                    ));
                    continue;
                }
            }
            let params = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..Default::default()
            };
            match api.delete(&key.name, &params).await {
                Ok(_) => {
                    if let Some(copies) = &self.live {
                        copies.deleted(&resource, key.namespace.as_deref(), &key.name);
                    }
                    self.rules.stored.forget(api_version, key);
                    self.record(&Applied {
                        key: key.clone(),
                        api_version: api_version.clone(),
                        outcome: Outcome::Deleted,
                        adopted_from: None,
                        resource_version_before: live.metadata.resource_version.clone(),
                        resource_version_after: None,
                        revision_before: plan::revision_of(&live.metadata),
                        fields_changed: Vec::new(),
                        left_out: Vec::new(),
                        live: None,
                    });
                    pruned.deleted.push(key.clone())
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(ApplyError::from_kube(key, e)),
            }
        }
        Ok(pruned)
    }

    /// Some object of the CRD `crd` (its live body), as `namespace/name`, or None when it has none.
    async fn first_custom_resource(
        &self,
        key: &ObjectKey,
        crd: &Value,
    ) -> Result<Option<String>, ApplyError> {
        let Some((group, version, kind, plural)) = plan::crd_served_resource(crd) else {
            return Ok(None);
        };
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&group, &version, &kind),
            &plural,
        );
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let list = api
            .list_metadata(&kube::api::ListParams::default().limit(1))
            .await
            .map_err(|e| ApplyError::from_kube(key, e))?;
        Ok(list.items.first().map(|o| match &o.metadata.namespace {
            Some(ns) => format!("{kind} {ns}/{}", o.metadata.name.as_deref().unwrap_or("")),
            None => format!("{kind} {}", o.metadata.name.as_deref().unwrap_or("")),
        }))
    }
}

/// True when the object carries `pallet.dev/optional: "true"`.
pub fn is_optional(object: &Object) -> bool {
    object
        .body()
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(OPTIONAL_ANNOTATION))
        .and_then(Value::as_str)
        == Some("true")
}
