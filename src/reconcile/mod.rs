//! The reconciler: one BundleDeployment at a time, as a pipeline of phases.
//!
//! ```text
//! fetch (I/O) -> render (pure) -> apply in stages + prune (I/O) -> status (pure) -> patch status (I/O)
//! ```
//!
//! Each phase has its own module; this one wires them together, handles pause and deletion, and
//! turns errors into conditions. Health, revisions and rollback come with their own phases.

pub mod changes;
mod cleanup;
mod content;
pub mod context;
mod pass;
mod revision_apply;
mod rollback_hold;
mod status_writer;
pub mod view;
pub mod workload;

pub use cleanup::cleanup;
pub use context::Context;
pub use pass::reconcile_apply;
use revision_apply::*;
use status_writer::*;
/// The wall clock, for the few writes outside a pass\'s view (see [`view::wall_clock`]).
pub(crate) use view::wall_clock as now;
pub mod chart_crds;
pub mod controller;
pub mod delete_hooks;
pub mod dependencies;
pub mod dependency_watch;
pub mod fetch;
pub mod fetch_pool;
pub mod function_calls;
pub mod functions;
pub mod health_checks;
pub mod hook_plan;
pub mod hook_requests;
pub mod hooks;
pub mod lookups;
pub mod owned;
pub mod pod_problems;
pub mod polling;
pub mod processors;
pub mod render;
pub mod render_key;
pub mod render_memo;
pub mod render_time;
pub mod rollout;
pub mod scope;
pub mod settle;
pub mod status;
pub mod takeover;
pub mod unwritten_intent;
pub mod values;
pub mod values_watch;
pub mod watches;
pub mod webhook_certs;
pub mod workers;

use std::collections::BTreeSet;
use std::time::Duration;

use pallet_formats::ObjectKey;

use crate::api::{BundleDeploymentStatus, ObjectReference};
use crate::apply::ApplyError;
use crate::revision::RevisionError;
use crate::source::SourceError;
use changes::change_object;
use status::FailedPhase;

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
    /// Sources are still being fetched in the background (slow or hanging servers); the
    /// message names each with the time it started, or what it still waits for (a fetch slot).
    #[error("fetching {0}")]
    Fetching(String),
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
    /// The bundle was refused by the renderer (now, or earlier for the same inputs: a refusal
    /// is kept and not rendered again until something changes).
    #[error("render: {message}")]
    RenderRefused {
        /// The render error's category.
        category: &'static str,
        /// The render error's message.
        message: String,
    },
    /// A render could not finish for a reason that may pass (a function processor out of
    /// reach): not remembered, retried with backoff while the active revision stays enforced.
    #[error("render: {message}")]
    RenderUnavailable {
        /// The category (`FunctionUnavailable`).
        category: &'static str,
        /// What went wrong.
        message: String,
    },
    /// An object could not be applied or pruned (boxed: it is the largest variant by far).
    #[error(transparent)]
    Apply(Box<ApplyError>),
    /// A write for the bundle was forbidden by RBAC (for the impersonated ServiceAccount).
    #[error("{0}")]
    Forbidden(String),
    /// Deleting the bundle's objects is under way; the finalizer stays until they are gone.
    #[error("waiting for {0} to be deleted")]
    Deleting(String),
    /// Objects of a BundleDeployment being deleted exist and may not be deleted (RBAC); the
    /// finalizer stays until they can be.
    #[error("{0}")]
    DeletionForbidden(String),
    /// A helm delete hook of a BundleDeployment being deleted is running: the finalizer stays
    /// and the pass looks again after `after` (or at the hook's next watch event).
    #[error("{message}")]
    DeleteHookRunning {
        /// Which hook and what it is doing.
        message: String,
        /// When to look again at the latest.
        after: Duration,
    },
    /// A helm delete hook failed: the deletion stops, the finalizer stays until a retry
    /// request or its removal by hand.
    #[error("{0}")]
    DeleteHookFailed(String),
    /// A revision snapshot could not be stored or read.
    #[error("revision snapshot: {0}")]
    Revision(#[source] RevisionError),
    /// `config.helm.valuesFrom` could not be read or merged.
    #[error("{message}")]
    Values {
        /// CamelCase reason (`ValuesNotFound`, `ValuesInvalid`, `ValuesNotAllowed`).
        reason: &'static str,
        /// What and where (kind, namespace, name, key; never the content).
        message: String,
    },
    /// Certificates for registry-v1 webhooks could not be provided.
    #[error("{message}")]
    Certificates {
        /// CamelCase reason (`CertManagerMissing`, `WebhookCertificateFailed`).
        reason: &'static str,
        /// What and why.
        message: String,
    },
    /// `spec.healthChecks` has expressions that do not compile (each named with its check).
    #[error("{0}")]
    InvalidHealthCheck(String),
    /// A `spec.healthChecks` expression is over its CEL budget for any object (each named with
    /// its check and the bound).
    #[error("{0}")]
    CelBudgetExceeded(String),
    /// A function processor asks for what this agent refuses (a `timeout` over
    /// `--function-timeout-max`, a host not allowed), each named with its processor.
    #[error("{0}")]
    InvalidProcessor(String),
    /// A duration of the spec is not one or is too long (the message names the field).
    #[error("{0}")]
    InvalidDuration(String),
    /// The BundleDeployment names no `spec.serviceAccount` and the agent requires one
    /// (`--require-service-account`).
    #[error("{0}")]
    ServiceAccountRequired(String),
    /// The BundleDeployment left this agent's scope (relabelled to another shard) during the
    /// pass: the pass stops without writing (see [`scope`]).
    #[error("{0}")]
    OutOfScope(String),
    /// A Kubernetes API call of the agent's own failed.
    /// The remote cluster of `spec.kubeConfig` cannot be used now (it names the cluster).
    #[error(transparent)]
    Cluster(crate::clusters::ClusterError),
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
            ReconcileError::Fetching(_) => "Fetching",
            ReconcileError::Secret { reason, .. }
            | ReconcileError::Values { reason, .. }
            | ReconcileError::Certificates { reason, .. } => reason,
            ReconcileError::Render(e) => e.category(),
            ReconcileError::RenderRefused { category, .. }
            | ReconcileError::RenderUnavailable { category, .. } => category,
            ReconcileError::Apply(e) => e.category(),
            ReconcileError::Forbidden(_) => "Forbidden",
            ReconcileError::Revision(e) => e.category(),
            ReconcileError::Deleting(_) => "Deleting",
            ReconcileError::DeletionForbidden(_) => "DeletionForbidden",
            ReconcileError::DeleteHookRunning { .. } => status::REASON_RUNNING_HOOKS,
            ReconcileError::DeleteHookFailed(_) => hooks::REASON_HOOK_FAILED,
            ReconcileError::Kube { .. } => "KubernetesAPIError",
            ReconcileError::InvalidHealthCheck(_) => "InvalidHealthCheck",
            ReconcileError::CelBudgetExceeded(_) => health_checks::REASON_CEL_BUDGET,
            ReconcileError::InvalidProcessor(_) => "InvalidProcessor",
            ReconcileError::InvalidDuration(_) => "InvalidDuration",
            ReconcileError::ServiceAccountRequired(_) => "ServiceAccountRequired",
            ReconcileError::OutOfScope(_) => "OutOfScope",
            ReconcileError::Cluster(e) => e.reason(),
        }
    }

    /// True when retrying without a change may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            ReconcileError::Source(e) => e.is_transient(),
            ReconcileError::Secret { .. }
            | ReconcileError::Values { .. }
            | ReconcileError::RenderRefused { .. }
            | ReconcileError::Certificates { .. }
            | ReconcileError::InvalidHealthCheck(_)
            | ReconcileError::CelBudgetExceeded(_)
            | ReconcileError::InvalidProcessor(_)
            | ReconcileError::InvalidDuration(_)
            | ReconcileError::ServiceAccountRequired(_)
            | ReconcileError::OutOfScope(_)
            | ReconcileError::DeleteHookFailed(_)
            | ReconcileError::Forbidden(_) => false,
            // A function processor out of reach may answer later; bad content will not.
            ReconcileError::Render(e) => {
                matches!(e, pallet_formats::RenderError::ProcessorUnavailable { .. })
            }
            ReconcileError::Apply(e) => e.is_transient(),
            ReconcileError::Revision(e) => e.is_transient(),
            ReconcileError::Cluster(e) => e.is_transient(),
            ReconcileError::Kube { .. }
            | ReconcileError::RenderUnavailable { .. }
            | ReconcileError::Deleting(_)
            | ReconcileError::DeletionForbidden(_)
            | ReconcileError::DeleteHookRunning { .. }
            | ReconcileError::Fetching(_) => true,
        }
    }

    /// True when the API server could not be reached or gave no answer (not an answer with an
    /// error status): the failure ends the moment the API server is back, so it is retried at a
    /// short, bounded interval rather than with the growing backoff.
    pub fn api_unreachable(&self) -> bool {
        match self {
            ReconcileError::Kube { source, .. } => api_unreachable(source),
            ReconcileError::Apply(e) => match e.as_ref() {
                ApplyError::Transient { source, .. } => api_unreachable(source),
                _ => false,
            },
            ReconcileError::Revision(RevisionError::Kube { source, .. }) => api_unreachable(source),
            _ => false,
        }
    }

    /// True when the API server throttled the pass (429: API Priority and Fairness turned a
    /// request away): fewer BundleDeployments are then reconciled at once (see [`workers`]).
    pub fn throttled(&self) -> bool {
        let status = |error: &kube::Error| matches!(error, kube::Error::Api(s) if s.code == 429);
        match self {
            ReconcileError::Kube { source, .. } => status(source),
            ReconcileError::Apply(e) => match e.as_ref() {
                ApplyError::Transient { source, .. } => status(source),
                _ => false,
            },
            ReconcileError::Revision(RevisionError::Kube { source, .. }) => status(source),
            _ => false,
        }
    }

    fn phase(&self) -> FailedPhase {
        match self {
            ReconcileError::Source(_)
            | ReconcileError::Fetching(_)
            | ReconcileError::Secret { .. }
            | ReconcileError::RenderUnavailable { .. }
            | ReconcileError::Values { .. } => FailedPhase::Fetch,
            ReconcileError::InvalidHealthCheck(_)
            | ReconcileError::CelBudgetExceeded(_)
            | ReconcileError::InvalidProcessor(_)
            | ReconcileError::InvalidDuration(_)
            | ReconcileError::ServiceAccountRequired(_)
            | ReconcileError::Cluster(_) => FailedPhase::Spec,
            _ => FailedPhase::Install,
        }
    }
}

/// Whether `error` is a transport failure talking to the API server (refused, reset, timed out).
pub fn api_unreachable(error: &kube::Error) -> bool {
    matches!(error, kube::Error::HyperError(_) | kube::Error::Service(_))
}

/// The longest a BundleDeployment waits to retry while the API server is unreachable: failed
/// attempts cost nothing then (the connection is refused), and recovery must not wait for a
/// backoff grown during a long outage.
pub const API_RETRY_MAX: Duration = Duration::from_secs(4);

/// What the controller should do after a reconcile.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// Look again after this long.
    RequeueAfter(Duration),
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
