//! The `BundleDeployment` API (`pallet.dev/v1alpha1`), as described in `shared/design/api.md`.
//!
//! Everything the API server can check by itself is in the schema (enums, patterns, CEL rules), so
//! a bad object is refused at `kubectl apply` time with a message a user can act on, instead of
//! being accepted and failing later in the agent. Defaults are applied in code through the
//! accessor methods below rather than by the API server: an unset field stays unset in the user's
//! object, and the documented default lives in one place.

pub mod conditions;
mod dependencies;
mod drift_ignore;
mod fleet;
mod health_checks;
mod helm_runs;
mod kube_config;
mod notifications;
mod processors;
pub mod reasons;
mod takeover;
mod verify;

pub use dependencies::{
    DependencyReference, BUNDLE_DEPLOYMENT_API_VERSION, BUNDLE_DEPLOYMENT_KIND,
};
pub use drift_ignore::{DriftIgnoreReport, DriftIgnoreRule, DriftIgnoreTarget};
pub use fleet::{
    set_conditions, BundleDeploymentSet, BundleDeploymentSetSpec, BundleDeploymentSetStatus,
    BundleDeploymentTemplate, PerCluster, SetClusterPhase, SetClusterStatus, SetOnFailure,
    SetRollout, TemplateMetadata, CLUSTER_SECRET_LABEL, SET_CLUSTER_LABEL, SET_LABEL,
    SET_PREVIOUS_ANNOTATION, SET_REVISION_ANNOTATION,
};
pub use health_checks::{HealthCheck, HttpGetCheck};
pub use helm_runs::{CrdPolicy, HookRequest, REQUESTED_TEST_ANNOTATION};
pub use kube_config::{
    cluster_of, KubeConfigReference, KubeConfigSecretReference, TargetCluster,
    DEFAULT_KUBECONFIG_KEYS, LOCAL_CLUSTER,
};
pub use notifications::{
    CloudEventsMode, CloudEventsTarget, CommitStatusTarget, DeliveryResult, NotificationStatus,
    NotificationTarget, SlackTarget, TargetKind, TransitionType, WebhookTarget,
};
pub use processors::{
    FunctionProcessor, ProcessorSpec, SubstituteProcessor, VarsReference, DEFAULT_FUNCTION_TIMEOUT,
};
pub use takeover::{ReleaseRecords, Takeover, TakeoverSource, TakeoverStatus};
pub use verify::{
    CosignVerification, GitVerification, GitVerifyMode, IdentityMatch, KeylessVerification,
    ProvenanceVerification, SourceVerification, TrustedRootReference, VerifiedSignature,
};

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of pallet's resources.
pub const GROUP: &str = "pallet.dev";
/// API version served by this agent.
pub const VERSION: &str = "v1alpha1";

/// Go-style duration as accepted by `time.ParseDuration` and `metav1.Duration` (`90s`, `10m`, `1h30m`).
/// One-shot request: roll back to a stored revision. Value `"<N>"` or `"<N>@<token>"` (the token
/// makes a repeated request distinct); handled once its value is in `status.lastHandledRollback`.
pub const REQUESTED_ROLLBACK_ANNOTATION: &str = "pallet.dev/requested-rollback";
/// One-shot request: try the failed content again. Any value (a timestamp); handled once it is in
/// `status.lastHandledRetry`.
pub const REQUESTED_RETRY_ANNOTATION: &str = "pallet.dev/requested-retry";
/// One-shot request: reconcile now. Any value (a timestamp); handled once it is in
/// `status.lastHandledReconcile`.
pub const REQUESTED_RECONCILE_ANNOTATION: &str = "pallet.dev/requested-reconcile";

const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$";
/// RFC 1123 label: the shape of namespace names.
const DNS_LABEL_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// Desired state of a BundleDeployment: where the bundle comes from, how to render it and how to
/// roll it out.
// kube's printcolumn(...) repeats `type_` once per column, which clippy takes for a duplicate.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "pallet.dev",
    version = "v1alpha1",
    kind = "BundleDeployment",
    plural = "bundledeployments",
    shortname = "bd",
    category = "pallet",
    status = "BundleDeploymentStatus",
    doc = "A bundle of Kubernetes objects fetched from OCI images, git or HTTP, rendered by format and kept applied by pallet.",
    printcolumn(name = "Format", type_ = "string", json_path = ".spec.format"),
    printcolumn(
        name = "Active",
        type_ = "integer",
        json_path = ".status.activeRevision",
        description = "revision whose objects are on the cluster"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(name = "Paused", type_ = "boolean", json_path = ".spec.paused"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message"
    )
)]
#[kube(validation = Rule::new("!has(self.spec.dependsOn) || !self.spec.dependsOn.exists(d, d.name == self.metadata.name && (!has(d.kind) || (d.apiVersion == 'pallet.dev/v1alpha1' && d.kind == 'BundleDeployment')))").message("a BundleDeployment cannot depend on itself"))]
#[x_kube(validation = Rule::new("has(self.kubeConfig) == has(oldSelf.kubeConfig) && (!has(self.kubeConfig) || self.kubeConfig == oldSelf.kubeConfig)").message("spec.kubeConfig cannot be added, changed or removed: the bundle's objects are on that cluster; delete the BundleDeployment and create it again to move them"))]
#[x_kube(validation = Rule::new("!has(self.config) || !has(self.config.helm) || self.format == 'helm'").message("config.helm is only valid with format: helm"))]
#[x_kube(validation = Rule::new("!has(self.config) || !has(self.config.registryV1) || self.format == 'registry-v1'").message("config.registryV1 is only valid with format: registry-v1"))]
#[x_kube(validation = Rule::new("!has(self.config) || !has(self.config.kustomize) || self.format == 'kustomize'").message("config.kustomize is only valid with format: kustomize"))]
#[x_kube(validation = Rule::new("!has(self.config) || !has(self.config.kustomize) || !has(self.config.kustomize.path) || !self.config.kustomize.path.split('/').exists(p, p == '..')").message("config.kustomize.path must stay inside the bundle tree (no '..')"))]
#[x_kube(validation = Rule::new("!has(self.notifications) || !self.notifications.exists(n, has(n.commitStatus)) || self.sources.exists(s, s.kind == 'git')").message("a commitStatus notification reports on the commit of the bundle's git source, and this BundleDeployment has no git source"))]
#[serde(rename_all = "camelCase")]
pub struct BundleDeploymentSpec {
    /// When true the agent makes no write to the bundle's objects (no apply, prune, drift
    /// correction or rollback) but still observes and reports them. The reason may be given in
    /// the annotation `pallet.dev/paused-reason`. Default: false. Leave it out of manifests kept
    /// in git: a sync writing `false` would resume a BundleDeployment paused for a hotfix.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,

    /// Namespace for namespaced objects that name none; the registry-v1 install namespace; helm's
    /// Release.Namespace. Created when missing. Default: none, and every namespaced object must
    /// name its namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub install_namespace: Option<String>,

    /// Apply as this ServiceAccount (impersonation); Secrets and ConfigMaps named here are read
    /// only if it may get them (or, in the agent's namespace, when labelled for this
    /// BundleDeployment). Default: the agent's `--default-service-account`, else the agent's own
    /// identity. The shipped admission policy admits it only from a creator who may impersonate
    /// it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<ServiceAccountReference>,

    /// The cluster the bundle's objects go to, when it is not the one the agent runs in: a
    /// kubeConfig in a Secret (Flux's shape). Objects, health, drift, pruning, hooks, lookups and
    /// takeover are on that cluster, acting as the kubeconfig's identity, or as
    /// `serviceAccount` impersonated there through it when one is named (that ServiceAccount
    /// must exist on the target, with its RBAC there); revisions, the change log and status stay
    /// in the agent's cluster. Set when the BundleDeployment is created: changing or removing it
    /// is refused (delete the BundleDeployment and create it again to move a bundle). Default:
    /// the cluster the agent runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_config: Option<KubeConfigReference>,

    /// Where the bundle comes from. Contents of all sources are merged into one tree.
    #[schemars(length(min = 1, max = 32))]
    pub sources: Vec<Source>,

    /// How the tree is turned into objects.
    pub format: BundleFormat,

    /// Format-specific settings.
    /// Default: every setting of the format at its default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<FormatConfig>,

    /// Transformations run in order on the format's output (helm hooks included) before
    /// anything is applied: an inline kustomization, `${var}` substitution, or a KRM function.
    /// Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new("self.all(p, !has(p.name) || self.exists_one(q, has(q.name) && q.name == p.name))").message("processor names must be unique"))]
    pub processors: Vec<ProcessorSpec>,

    /// How a new revision is rolled out and what happens when it fails.
    /// Default: every rollout setting at its default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Rollout>,

    /// What to do with objects that already exist on the cluster. Default: IfNoOwner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_protection: Option<CollisionProtection>,

    /// What happens to the applied objects when the BundleDeployment is deleted. Default: Delete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,

    /// Take over, in place, the objects of an existing Helm release, Flux Kustomization or
    /// HelmRelease, or Argo CD Application: objects carrying that owner's markers are adopted
    /// whatever `collisionProtection` says, the previous tool's markers and field managers are
    /// removed, and a Helm release's records are marked uninstalled or deleted. Default: none
    /// (existing objects are taken over only as `collisionProtection` allows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub takeover: Option<Takeover>,

    /// Health checks besides the built-in rules: CEL expressions for a kind (Flux's
    /// `healthCheckExprs`; they replace the built-in rule for that kind) or HTTP probes.
    /// Default: none (the built-in rules only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub health_checks: Vec<HealthCheck>,

    /// Where to report transitions (revision Progressing, Healthy, Failed, RolledBack; Stalled;
    /// Drifted while paused): webhooks, CloudEvents, Slack, commit statuses. Delivery is off the
    /// reconcile path and never changes the outcome; `status.notifications` shows how it went.
    /// Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub notifications: Vec<NotificationTarget>,

    /// What must be ready before anything is applied (Flux's `dependsOn`): other
    /// BundleDeployments (Ready=True at their current generation) or any object with a CEL
    /// `readyExpr`. While one is not, Ready=False with reason `DependencyNotReady` and nothing
    /// is fetched or applied; a cycle is `Stalled` with reason `DependencyCycle`. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub depends_on: Vec<DependencyReference>,
    /// Fields of the bundle's objects left to other writers: out of the drift check, and out of
    /// what is applied to an object that exists (Flux's `driftIgnoreRules`, Argo CD's
    /// `ignoreDifferences` with `RespectIgnoreDifferences`). Not part of what is deployed:
    /// editing it makes no new revision. Default: none (every field of the bundle is kept as
    /// the bundle says).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub drift_ignore: Vec<DriftIgnoreRule>,
}

impl BundleDeploymentSpec {
    /// The rollout settings with defaults filled in.
    pub fn rollout(&self) -> Rollout {
        self.rollout.clone().unwrap_or_default()
    }

    /// The collision protection in force (default IfNoOwner).
    pub fn collision_protection(&self) -> CollisionProtection {
        self.collision_protection.unwrap_or_default()
    }

    /// The deletion policy in force (default Delete).
    pub fn deletion_policy(&self) -> DeletionPolicy {
        self.deletion_policy.unwrap_or_default()
    }
}

/// A ServiceAccount the agent impersonates for writes to the bundle's objects.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct ServiceAccountReference {
    /// Namespace of the ServiceAccount.
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub namespace: String,
    /// Name of the ServiceAccount.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Bundle formats.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum BundleFormat {
    /// Plain Kubernetes manifests (YAML or JSON files).
    #[serde(rename = "plain")]
    Plain,
    /// A Helm v3 chart.
    #[serde(rename = "helm")]
    Helm,
    /// An OLM registry+v1 operator bundle.
    #[serde(rename = "registry-v1")]
    RegistryV1,
    /// A kustomization, built as `kustomize build` v5.5.0 builds it.
    #[serde(rename = "kustomize")]
    Kustomize,
}

/// Kinds of source.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum SourceKind {
    /// An OCI image whose layers hold the bundle tree.
    #[serde(rename = "image")]
    Image,
    /// A git repository.
    #[serde(rename = "git")]
    Git,
    /// A tarball or single manifest file served over HTTP(S).
    #[serde(rename = "http")]
    Http,
    /// A chart from a Helm chart repository (`index.yaml` over HTTP(S), or an `oci://` registry).
    #[serde(rename = "helmRepository")]
    HelmRepository,
}

/// One place the bundle's content comes from.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("(has(self.image) ? 1 : 0) + (has(self.git) ? 1 : 0) + (has(self.http) ? 1 : 0) + (has(self.helmRepository) ? 1 : 0) == 1 && (self.kind == 'image' ? has(self.image) : self.kind == 'git' ? has(self.git) : self.kind == 'http' ? has(self.http) : has(self.helmRepository))").message("the source's settings must match its kind: kind image takes `image`, git takes `git`, http takes `http`, helmRepository takes `helmRepository`, and no other"))]
#[x_kube(validation = Rule::new("!has(self.verify) || !has(self.verify.cosign) || self.kind == 'image' || (self.kind == 'helmRepository' && has(self.helmRepository) && self.helmRepository.url.startsWith('oci://'))").message("verify.cosign is for image sources and oci:// chart repositories"))]
#[x_kube(validation = Rule::new("!has(self.verify) || !has(self.verify.provenance) || (self.kind == 'helmRepository' && has(self.helmRepository) && !self.helmRepository.url.startsWith('oci://'))").message("verify.provenance is for http(s) chart repositories (oci:// ones take verify.cosign)"))]
#[x_kube(validation = Rule::new("!has(self.verify) || !has(self.verify.git) || self.kind == 'git'").message("verify.git is for git sources"))]
#[x_kube(validation = Rule::new("!has(self.verify) || !has(self.verify.git) || !has(self.verify.git.mode) || self.verify.git.mode == 'HEAD' || (has(self.git) && (has(self.git.ref.tag) || has(self.git.ref.semver)))").message("verify.git.mode Tag and TagAndHEAD need a tag or semver ref"))]
#[x_kube(validation = Rule::new("!has(self.pollInterval) || (has(self.image) && (!self.image.ref.contains('@') || has(self.image.semver))) || (has(self.git) && !has(self.git.ref.commit)) || (has(self.http) && !has(self.http.sha256)) || (has(self.helmRepository) && !has(self.helmRepository.digest))").message("pollInterval is only valid for floating refs (image tag or semver range, git branch, tag or semver range, http without sha256, helm repository without digest); a pinned ref never changes"))]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// Which kind of source this is; the matching field (`image`, `git`, `http` or
    /// `helmRepository`) must be set.
    pub kind: SourceKind,

    /// Relative path inside the bundle tree where this source's content goes. Default: the root.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 1024))]
    #[x_kube(validation = Rule::new("!self.startsWith('/') && self != '..' && !self.startsWith('../') && !self.endsWith('/..') && !self.contains('/../') && !self.contains('\\\\')").message("destination must be a relative path inside the bundle tree: no leading '/', no '..' segments"))]
    pub destination: String,

    /// Settings for kind image.
    /// Required with kind image, and not set with another kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageSource>,

    /// Settings for kind git.
    /// Required with kind git, and not set with another kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSource>,

    /// Settings for kind http.
    /// Required with kind http, and not set with another kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpSource>,

    /// Settings for kind helmRepository.
    /// Required with kind helmRepository, and not set with another kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm_repository: Option<HelmRepositorySource>,

    /// How often a floating ref (image tag or range, git branch, tag or range, http URL without
    /// sha256, a chart repository's index) is re-resolved. Default: 5m. Refused on pinned refs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), regex(pattern = DURATION_PATTERN))]
    pub poll_interval: Option<String>,

    /// Who must have signed the content: checked at every resolution, before anything of it is
    /// unpacked or applied; content that fails it never becomes a revision. Default: none (used
    /// unverified, unless the agent runs with `--require-verification`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<SourceVerification>,
}

/// An OCI artifact holding the bundle: an image's layers, a Helm chart pushed by `helm push`, a
/// Flux or ORAS artifact.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new("!has(self.semver) || (!self.ref.contains('@') && !self.ref.split('/')[self.ref.split('/').size() - 1].contains(':'))").message("semver takes a repository without a tag or digest: the range chooses the tag"))]
#[serde(rename_all = "camelCase")]
pub struct ImageSource {
    /// Image reference, by tag (`registry/repo:tag`, floating) or digest (`registry/repo@sha256:…`,
    /// pinned); with `semver`, the repository alone (`registry/repo`).
    #[serde(rename = "ref")]
    #[schemars(length(min = 1, max = 1024))]
    pub reference: String,

    /// A semver range (Masterminds rules, as helm and Flux use them): the newest tag of the
    /// repository that satisfies it is taken. Pre-releases only when the range names one.
    /// Default: none, the tag or digest in `ref` is taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub semver: Option<String>,

    /// Credentials for the registry.
    /// Default: none (anonymous).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<SourceAuth>,

    /// Skip TLS certificate verification (test registries only). Default: false.
    #[serde(
        default,
        skip_serializing_if = "std::ops::Not::not",
        rename = "insecureSkipTLSVerify"
    )]
    pub insecure_skip_tls_verify: bool,

    /// A Secret whose `ca.crt` key holds extra PEM CA certificates to trust for this registry.
    /// Default: none (the system's CA certificates only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret: Option<SecretReference>,
}

/// A git repository.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitSource {
    /// Clone URL (https://, http:// or ssh://).
    #[schemars(length(min = 1, max = 2048))]
    pub repository: String,

    /// Which revision to take.
    #[serde(rename = "ref")]
    pub reference: GitReference,

    /// Subdirectory of the repository to take. Default: the whole tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub directory: Option<String>,

    /// Credentials: basic-auth (username/password or token) or ssh-privatekey with known_hosts.
    /// Default: none (anonymous).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<SourceAuth>,
}

/// A git revision: exactly one of commit, tag, branch or semver.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[x_kube(validation = Rule::new("(has(self.commit) ? 1 : 0) + (has(self.tag) ? 1 : 0) + (has(self.branch) ? 1 : 0) + (has(self.semver) ? 1 : 0) == 1").message("exactly one of commit, tag, branch or semver must be set"))]
pub struct GitReference {
    /// Full commit SHA (pinned). Exactly one of commit, tag, branch and semver is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9a-f]{40}|[0-9a-f]{64})$"))]
    pub commit: Option<String>,
    /// Tag name (floating: tags can be moved). Exactly one of commit, tag, branch and semver is
    /// required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub tag: Option<String>,
    /// Branch name (floating). Exactly one of commit, tag, branch and semver is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub branch: Option<String>,
    /// A semver range (Masterminds rules): the newest tag that satisfies it (floating). Exactly
    /// one of commit, tag, branch and semver is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub semver: Option<String>,
}

/// A tarball or a single manifest file over HTTP(S).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpSource {
    /// URL of a `.tar`, `.tar.gz`/`.tgz`, or a single `.yaml`/`.yml`/`.json` file.
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://"))]
    pub url: String,

    /// Expected SHA-256 of the downloaded content (hex). Pins the source; a mismatch is an error.
    /// Default: none, the URL floats (its content is polled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9a-f]{64}$"))]
    pub sha256: Option<String>,

    /// Credentials: basic-auth or a bearer token.
    /// Default: none (anonymous).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<SourceAuth>,

    /// Follow redirects to another scheme, host or port (default: only redirects on the URL's
    /// own origin are followed). Credentials are never sent after such a redirect.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_cross_host_redirects: bool,
}

/// A chart from a Helm chart repository: `https://` (its `index.yaml`) or `oci://` (the
/// registry's tag list).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmRepositorySource {
    /// Repository URL: `https://charts.example` (or `http://`), or `oci://registry/path` (the
    /// chart is then `registry/path/<chart>`).
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^(https?|oci)://"))]
    pub url: String,

    /// Chart name, as in the repository's index.
    #[schemars(length(min = 1, max = 253))]
    pub chart: String,

    /// An exact version (`1.17.2`) or a semver range (`1.x`, `>=1.14 <2`). Pre-releases only
    /// when the range names one. Default: `*`, the newest release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub version: Option<String>,

    /// `sha256:<hex>` of the chart archive (HTTP repositories) or the chart's manifest digest
    /// (`oci://`). Pins the source with `version` exact (`pallet plan --pin` writes both); a
    /// mismatch is an error. Default: none, the chart version floats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^sha256:[0-9a-f]{64}$"))]
    pub digest: Option<String>,

    /// Credentials: basic-auth or a bearer token (dockerconfigjson for `oci://`).
    /// Default: none (anonymous).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<SourceAuth>,

    /// A Secret whose `ca.crt` key holds extra PEM CA certificates to trust for this repository.
    /// Default: none (the system's CA certificates only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret: Option<SecretReference>,

    /// Skip TLS certificate verification (test repositories only). Default: false.
    #[serde(
        default,
        skip_serializing_if = "std::ops::Not::not",
        rename = "insecureSkipTLSVerify"
    )]
    pub insecure_skip_tls_verify: bool,

    /// Follow redirects of the index and chart downloads to another scheme, host or port
    /// (default: only redirects on the requested URL's own origin). Credentials are never sent
    /// after such a redirect. A chart URL the index names on another host is fetched either way,
    /// without credentials.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_cross_host_redirects: bool,
}

/// Where a source's credentials come from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct SourceAuth {
    /// The Secret holding the credentials.
    pub secret: SecretReference,
}

/// A reference to a Secret. The namespace defaults to the agent's own; another namespace is used
/// only when the BundleDeployment's serviceAccount may `get` the Secret, or the namespace is on the
/// agent's allow-list.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct SecretReference {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace of the Secret. Default: the agent's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub namespace: Option<String>,
}

/// Format-specific settings; only the one matching `format` may be set.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FormatConfig {
    /// Settings for format helm.
    /// Default: every helm setting at its default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm: Option<HelmConfig>,
    /// Settings for format registry-v1.
    /// Default: every registry-v1 setting at its default.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "registryV1"
    )]
    pub registry_v1: Option<RegistryV1Config>,
    /// Settings for format kustomize.
    /// Default: every kustomize setting at its default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kustomize: Option<KustomizeConfig>,
}

/// Settings for kustomizations.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KustomizeConfig {
    /// The kustomization's directory inside the bundle tree (relative, no `..`), e.g.
    /// `overlays/prod`. Default: the tree's root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024), regex(pattern = r"^[^/].*$"))]
    pub path: Option<String>,
}

/// Settings for Helm charts.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmConfig {
    /// Release name. Default: the BundleDeployment's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 53))]
    pub release_name: Option<String>,
    /// Values merged over the chart's values.yaml.
    /// Default: none (the chart's values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub values: Option<serde_json::Value>,
    /// Values read from ConfigMaps and Secrets, merged in order after the chart's values files and
    /// before `values` (Flux's HelmRelease `valuesFrom`).
    /// Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub values_from: Vec<ValuesReference>,
    /// Values files inside the chart (paths relative to the chart's root), merged in order over
    /// its values.yaml and before `valuesFrom`.
    /// Default: none (values.yaml only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub values_files: Vec<String>,
    /// What is done with the objects of the chart's `crds/` directories: `Skip`, `Create` or
    /// `CreateReplace` (Flux's meaning). Default: `Create` on the first revision, `Skip` on later
    /// ones, as `helm install` and `helm upgrade` (and Flux) do. They are never deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crds: Option<CrdPolicy>,
}

/// Kinds of object values can be read from.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
pub enum ValuesSourceKind {
    /// A ConfigMap (`data`).
    ConfigMap,
    /// A Secret (`data`, `stringData`).
    Secret,
}

/// A ConfigMap or Secret holding helm values.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValuesReference {
    /// ConfigMap or Secret.
    pub kind: ValuesSourceKind,
    /// Its name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Its namespace. Default: the agent's namespace (the secret-namespace rule applies to both
    /// kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub namespace: Option<String>,
    /// The key whose content is a YAML values document. Default: every key, in key order, each
    /// read as a values document (a ConfigMap with one `values.yaml` key reads as Flux's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub values_key: Option<String>,
    /// A missing object (or key) is skipped instead of an error. Default: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

/// Settings for OLM registry+v1 bundles.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistryV1Config {
    /// The namespace the operator watches: equal to installNamespace for OwnNamespace, another
    /// namespace for SingleNamespace. Default: `""`, AllNamespaces.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(
        length(max = 63),
        regex(pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$")
    )]
    pub watch_namespace: String,
    /// Who provides the certificates of the bundle's webhooks. Default: BuiltIn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_provider: Option<CertificateProviderName>,
    /// OLM v1's deploymentConfig (OLM v0's Subscription `config`), merged into every
    /// Deployment of the CSV.
    /// Default: none (the CSV's Deployments as they are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_config: Option<DeploymentConfig>,
}

impl RegistryV1Config {
    /// The provider, with the default (BuiltIn) filled in.
    pub fn certificate_provider(&self) -> CertificateProviderName {
        self.certificate_provider.unwrap_or_default()
    }
}

/// Keeps each deploymentConfig field's own description but drops those of the Kubernetes types
/// inside (documented upstream): they would make the CRD six times larger (volumes alone hold
/// every volume source), which `kubectl apply` without `--server-side` cannot store.
fn strip_nested_descriptions(schema: &mut schemars::Schema) {
    fn strip(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                map.remove("description");
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(list) => list.iter_mut().for_each(strip),
            _ => {}
        }
    }
    if let Some(serde_json::Value::Object(properties)) = schema.get_mut("properties") {
        for property in properties.values_mut() {
            let own = property.get("description").cloned();
            strip(property);
            if let (Some(own), Some(map)) = (own, property.as_object_mut()) {
                map.insert("description".to_owned(), own);
            }
        }
    }
}

/// Who provides the certificates of a registry+v1 bundle's webhooks. Default: BuiltIn.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum CertificateProviderName {
    /// The agent issues a CA and serving certificates itself (nothing needed in the cluster).
    #[default]
    BuiltIn,
    /// cert-manager issues them (OLM v1's provider); cert-manager must be installed.
    CertManager,
}

/// OLM v1's `deploymentConfig`: each field set here is merged into every CSV Deployment the way
/// OLM v1 merges it (see "Operators" in the docs).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = strip_nested_descriptions)]
pub struct DeploymentConfig {
    /// Environment variables of every container; one with the same name is replaced.
    /// Default: the containers' own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<k8s_openapi::api::core::v1::EnvVar>>,
    /// envFrom sources appended to every container (unless already there).
    /// Default: the containers' own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_from: Option<Vec<k8s_openapi::api::core::v1::EnvFromSource>>,
    /// Replaces the resources of every container.
    /// Default: the containers' own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<k8s_openapi::api::core::v1::ResourceRequirements>,
    /// Replaces the pod's nodeSelector (`{}` clears it).
    /// Default: the pod's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Tolerations appended to the pod's (unless already there).
    /// Default: the pod's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<k8s_openapi::api::core::v1::Toleration>>,
    /// `{}` removes the pod's affinity; each sub-affinity given replaces the pod's (an empty
    /// one removes it); those not given stay.
    /// Default: the pod's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<k8s_openapi::api::core::v1::Affinity>,
    /// Volumes of the pod; one with the same name is replaced.
    /// Default: the pod's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<k8s_openapi::api::core::v1::Volume>>,
    /// Volume mounts of every container; one with the same name is replaced.
    /// Default: the containers' own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mounts: Option<Vec<k8s_openapi::api::core::v1::VolumeMount>>,
    /// Annotations added to the Deployment and its pod template (existing ones win).
    /// Default: none added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// OLM v0's pod selector: accepted so OLM configs carry over, and ignored, as OLM v1
    /// ignores it.
    /// Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
}

/// Rollout settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// A new revision must become healthy within this. Default: 10m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), regex(pattern = DURATION_PATTERN))]
    pub progress_deadline: Option<String>,
    /// What happens when a revision fails. Default: Rollback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<OnFailure>,
    /// How many revision snapshots are kept. Default: 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub history_limit: Option<i32>,
    /// Whether a render with no objects may become a revision (it prunes every object of the
    /// active one). Default: false, such a render is refused (EmptyBundle).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_empty: Option<bool>,
}

impl Rollout {
    /// Default progress deadline.
    pub const DEFAULT_PROGRESS_DEADLINE: &'static str = "10m";
    /// Default number of revisions kept.
    pub const DEFAULT_HISTORY_LIMIT: i32 = 5;

    /// The failure policy in force.
    pub fn on_failure(&self) -> OnFailure {
        self.on_failure.unwrap_or_default()
    }

    /// The history limit in force.
    pub fn history_limit(&self) -> i32 {
        self.history_limit.unwrap_or(Self::DEFAULT_HISTORY_LIMIT)
    }

    /// Whether an empty render is allowed.
    pub fn allow_empty(&self) -> bool {
        self.allow_empty.unwrap_or(false)
    }

    /// The progress deadline text in force (a Go duration).
    pub fn progress_deadline(&self) -> &str {
        self.progress_deadline
            .as_deref()
            .unwrap_or(Self::DEFAULT_PROGRESS_DEADLINE)
    }
}

/// What happens when a revision fails to apply or to become healthy in time. Default: Rollback.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum OnFailure {
    /// Re-apply the last healthy revision.
    #[default]
    Rollback,
    /// Leave the failed revision in place.
    Hold,
}

/// What to do with objects that already exist on the cluster when first applying them.
/// Default: IfNoOwner.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum CollisionProtection {
    /// Never take over an existing object.
    Prevent,
    /// Take over an existing object only when no other BundleDeployment owns it.
    #[default]
    IfNoOwner,
    /// Take over any existing object.
    None,
}

/// What happens to applied objects when the BundleDeployment is deleted. Default: Delete.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum DeletionPolicy {
    /// Delete them, in reverse stage order.
    #[default]
    Delete,
    /// Leave them, without pallet's ownership label.
    Orphan,
}

impl BundleDeploymentSpec {
    /// `sha256:` of the spec as JSON with `paused`, `notifications` and `driftIgnore` left out:
    /// what to deploy, not whether to, who hears about it, nor which fields others may own.
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if let Some(map) = value.as_object_mut() {
            map.remove("paused");
            map.remove("notifications");
            // When to apply, not what: waiting for a dependency changes no content.
            map.remove("dependsOn");
            map.remove("driftIgnore");
        }
        // serde_json's maps are sorted by key, so the text is canonical.
        let hash = Sha256::digest(value.to_string().as_bytes());
        let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256:{hex}")
    }
}

/// Observed state, written only by the agent.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct BundleDeploymentStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Ready, Reconciling, Stalled, Unpacked, Installed, Healthy, Paused, RolledBack.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,

    /// The revision whose objects are on the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_revision: Option<i64>,

    /// The newest revision that became healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_healthy_revision: Option<i64>,

    /// Revisions, newest first, at most rollout.historyLimit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<RevisionStatus>,

    /// The objects applied for the active revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<Inventory>,

    /// Objects whose live state differs from the desired one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<Drift>,

    /// Optional objects not applied because the cluster does not serve their kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<ObjectReference>,

    /// `spec.driftIgnore` rules that match no object of the active revision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift_ignore: Vec<DriftIgnoreReport>,

    /// Last value of annotation `pallet.dev/requested-rollback` that was acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_rollback: Option<String>,

    /// Last value of annotation `pallet.dev/requested-retry` that was acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_retry: Option<String>,

    /// Last value of annotation `pallet.dev/requested-reconcile` that was acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile: Option<String>,
    /// The agent that last wrote this status (its `POD_NAME`, else `<host>-<pid>`). An agent that
    /// finds another name here after writing it itself reports a second writer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,

    /// The last run of the chart's test hooks (`pallet test`, annotation
    /// `pallet.dev/requested-test`) and each hook's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<HookRequest>,

    /// While the BundleDeployment is deleted: its chart's pre-delete and post-delete hooks and
    /// how each went. A failed one stops the deletion (see "Helm hooks" in the docs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_hooks: Option<HookRequest>,

    /// Per notification target: the last transition sent and any still to be sent, each with
    /// its delivery result, attempts and time. Written with the transition itself, so a
    /// notification recorded here is delivered even if the agent restarts before sending it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notifications: Vec<NotificationStatus>,

    /// The takeover (`spec.takeover`) once done: every object applied and the previous owner's
    /// records handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub takeover: Option<TakeoverStatus>,
}

/// One revision of the rendered bundle.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionStatus {
    /// Revision number, starting at 1.
    pub number: i64,
    /// The BundleDeployment generation that produced it.
    pub generation: i64,
    /// Digest of the spec that produced it, `paused` left out (a pause and a resume change the
    /// generation but not what to deploy): failed content is retried only when this changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_digest: Option<String>,
    /// Digest of the canonical rendered object set (`sha256:…`).
    pub digest: String,
    /// Every source resolved to an immutable ref.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<ResolvedSource>,
    /// The `valuesFrom` references as read for this revision (helm only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values_from: Vec<ResolvedValues>,
    /// Where the revision is in its life.
    pub phase: RevisionPhase,
    /// When it was first rendered: what a helm chart's `now` returns whenever the same spec and
    /// sources render again (drift checks, restarts, `pallet plan`), so a chart that stamps its
    /// install time renders the same objects and an unchanged spec makes no new revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendered_at: Option<Time>,
    /// When its objects were applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_at: Option<Time>,
    /// When it became healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_at: Option<Time>,
    /// Number of objects in it.
    #[serde(default)]
    pub objects: i64,
    /// CamelCase reason when it failed (ProgressDeadlineExceeded, Unhealthy, ObjectRejected…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable detail (why it failed, what superseded it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Helm hooks this revision runs (its install or upgrade hooks, in the order they run) and
    /// how far each got. Empty for other formats and for charts without such hooks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookRun>,
}

/// One helm hook of a revision and how its run went.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookRun {
    /// The event it runs for: `pre-install`, `post-install`, `pre-upgrade`, `post-upgrade`,
    /// `pre-delete`, `post-delete` or `test`.
    pub event: String,
    /// The hook object, as rendered (its namespace filled in when it names none).
    pub object: ObjectReference,
    /// How far it got.
    pub phase: HookPhase,
    /// Why it failed or was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// True once its delete policy (`hook-succeeded`, `hook-failed`) removed it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
}

/// Life cycle of a hook run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum HookPhase {
    /// Not started yet.
    Pending,
    /// Created; waiting for it to complete (a Job, a Pod).
    Running,
    /// Completed.
    Succeeded,
    /// Failed (Job or Pod failed, the object was refused, or the progress deadline passed).
    Failed,
    /// Not run: the revision was made active again by a rollback (helm runs no install or
    /// upgrade hooks on a rollback).
    Skipped,
}

/// A source as the user wrote it and the immutable ref it resolved to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedSource {
    /// Kind of the source.
    pub kind: SourceKind,
    /// The ref as written (tag, branch, URL…).
    #[serde(rename = "ref")]
    pub reference: String,
    /// The immutable ref (image digest reference, commit SHA, `sha256:` of the content).
    pub resolved: String,
    /// The version a range or a chart repository resolved to (the tag or chart version chosen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Who signed the content, for a source with `verify`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<VerifiedSignature>,
}

/// A `valuesFrom` reference as read for a revision.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedValues {
    /// ConfigMap or Secret.
    pub kind: ValuesSourceKind,
    /// `namespace/name`.
    pub name: String,
    /// `sha256:` of the values it contributed, or `absent` for a missing optional reference.
    pub digest: String,
}

/// Life cycle of a revision.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RevisionPhase {
    /// Objects being applied.
    Applying,
    /// Applied, waiting to become healthy.
    Progressing,
    /// Healthy within the deadline.
    Healthy,
    /// Failed to apply or to become healthy in time.
    Failed,
    /// Replaced by an earlier revision after a failure or a request.
    RolledBack,
    /// Replaced by a newer revision.
    Superseded,
}

/// A compact list of applied objects.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Inventory {
    /// Number of objects.
    pub count: i64,
    /// The objects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<ObjectReference>,
}

/// Objects whose live state differs from the desired one: a bounded list and the total.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    /// Total number of drifted objects (the list may be cut short).
    pub count: i64,
    /// The first drifted objects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<ObjectReference>,
}

/// Identifies one object on the cluster.
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    /// API group ("" for the core group).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Namespace (empty for cluster-scoped objects).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Why it is listed (drift or skip detail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A schema for a free-form JSON object (helm values): structural, keeps unknown fields.
fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// Annotation on the CRD: the pallet version that generated it (`pallet version`, `pallet check`).
pub const CRD_VERSION_ANNOTATION: &str = "pallet.dev/version";

/// What the API server reports for a duration field that does not parse.
const DURATION_MESSAGE: &str =
    "must be a duration: numbers with units, such as 90s, 10m or 1h30m (units ns, us, ms, s, m, h)";

/// The CustomResourceDefinition: the derived one, annotated with this version, with optional
/// fields not `nullable` (an explicit null is dropped by the API server, as for any field that
/// is not set), and duration fields checked by a rule whose message shows the accepted form.
pub fn crd(
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    polished(BundleDeployment::crd())
}

/// The BundleDeploymentSet CustomResourceDefinition, polished as [`crd`].
pub fn set_crd(
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    polished(BundleDeploymentSet::crd())
}

fn polished(
    mut crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    crd.metadata.annotations.get_or_insert_default().insert(
        CRD_VERSION_ANNOTATION.into(),
        env!("CARGO_PKG_VERSION").into(),
    );
    // As every object pallet installs (`pallet uninstall` finds them by it).
    crd.metadata
        .labels
        .get_or_insert_default()
        .insert("app.kubernetes.io/part-of".into(), "pallet".into());
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        let Ok(mut value) = serde_json::to_value(&*schema) else {
            continue;
        };
        polish_schema(&mut value);
        if let Ok(polished) = serde_json::from_value(value) {
            *schema = polished;
        }
    }
    crd
}

/// Drops `nullable` and turns the duration pattern into a validation rule with a message, in
/// every nested schema.
fn polish_schema(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.remove("nullable");
            if map.get("pattern").and_then(|p| p.as_str()) == Some(DURATION_PATTERN) {
                map.remove("pattern");
                // The rule's cost is bounded by the length: every duration field has one.
                map.entry("maxLength").or_insert(serde_json::json!(64));
                let rule = serde_json::json!({
                    "rule": format!("self.matches(r'{DURATION_PATTERN}')"),
                    "message": DURATION_MESSAGE,
                });
                match map
                    .entry("x-kubernetes-validations")
                    .or_insert(serde_json::json!([]))
                {
                    serde_json::Value::Array(rules) => rules.push(rule),
                    other => *other = serde_json::json!([rule]),
                }
            }
            map.values_mut().for_each(polish_schema);
        }
        serde_json::Value::Array(list) => list.iter_mut().for_each(polish_schema),
        _ => {}
    }
}

/// The BundleDeployment CustomResourceDefinition as YAML, as `pallet crd --kind BundleDeployment` prints it and `deploy/crd.yaml` holds it.
pub fn crd_yaml() -> Result<String, serde_saphyr::ser::Error> {
    serde_saphyr::to_string(&crd())
}

/// The BundleDeploymentSet CustomResourceDefinition as YAML, as `deploy/crd-set.yaml` holds it.
pub fn set_crd_yaml() -> Result<String, serde_saphyr::ser::Error> {
    serde_saphyr::to_string(&set_crd())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_crd_matches_the_generated_one() {
        let committed = include_str!("../../deploy/crd.yaml");
        let generated = crd_yaml().unwrap();
        assert!(
            committed == generated,
            "deploy/crd.yaml is stale: regenerate it with `cargo run -q -- crd --kind BundleDeployment > deploy/crd.yaml`"
        );
        assert!(
            include_str!("../../deploy/chart/crd.yaml") == generated,
            "deploy/chart/crd.yaml is stale: `cargo run -q -- crd --kind BundleDeployment > deploy/chart/crd.yaml`"
        );
        let set = set_crd_yaml().unwrap();
        for committed in [
            include_str!("../../deploy/crd-set.yaml"),
            include_str!("../../deploy/chart/crd-set.yaml"),
        ] {
            assert!(
                committed == set,
                "deploy/crd-set.yaml or deploy/chart/crd-set.yaml is stale: regenerate them with `cargo run -q -- crd --kind BundleDeploymentSet > deploy/crd-set.yaml` (and the same into deploy/chart/)"
            );
        }
    }

    /// Optional settings (scalars and enums) of `schema` at `path` whose description states no
    /// default; Kubernetes' own types inside deploymentConfig are documented upstream.
    fn without_default(schema: &serde_json::Value, path: &str, missing: &mut Vec<String>) {
        let required: Vec<&str> = schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r.as_str())
            .collect();
        for (name, property) in schema["properties"].as_object().into_iter().flatten() {
            let path = format!("{path}.{name}");
            if path.starts_with("spec.config.registryV1.deploymentConfig.") {
                continue;
            }
            let scalar = matches!(
                property["type"].as_str(),
                Some("string" | "integer" | "boolean")
            ) || property.get("enum").is_some();
            let description = property["description"].as_str().unwrap_or_default();
            // A default, or the rule that makes it required in some cases.
            let lower = description.to_lowercase();
            if scalar
                && !required.contains(&name.as_str())
                && !lower.contains("default")
                && !lower.contains("required")
            {
                missing.push(path.clone());
            }
            without_default(property, &path, missing);
            if let Some(items) = property.get("items") {
                without_default(items, &format!("{path}[]"), missing);
            }
        }
    }

    #[test]
    fn every_optional_setting_states_its_default() {
        let crd = serde_json::to_value(crd()).unwrap();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let mut missing = Vec::new();
        without_default(spec, "spec", &mut missing);
        assert!(
            missing.is_empty(),
            "`kubectl explain` shows no default for: {missing:#?}"
        );
    }

    #[test]
    fn the_crd_has_no_nullable_and_checks_durations_with_a_message() {
        let yaml = crd_yaml().unwrap();
        assert!(!yaml.contains("nullable"));
        assert!(!yaml.contains(&format!("pattern: {DURATION_PATTERN}")));
        let crd = serde_json::to_value(crd()).unwrap();
        let deadline = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
            ["spec"]["properties"]["rollout"]["properties"]["progressDeadline"];
        assert_eq!(
            deadline["x-kubernetes-validations"][0]["message"],
            DURATION_MESSAGE
        );
        assert_eq!(
            crd["metadata"]["annotations"][CRD_VERSION_ANNOTATION],
            env!("CARGO_PKG_VERSION")
        );
    }

    #[test]
    fn spec_round_trips_with_api_field_names() {
        let yaml = r#"
paused: true
installNamespace: argocd-system
serviceAccount: {namespace: argocd-system, name: installer}
sources:
- kind: image
  image:
    ref: registry.example/argocd-bundle:v0.6
    auth: {secret: {name: regcred}}
    insecureSkipTLSVerify: true
  pollInterval: 10m
- kind: git
  destination: extras
  git:
    repository: https://git.example/org/repo.git
    ref: {commit: a3b1dff2a3b1dff2a3b1dff2a3b1dff2a3b1dff2}
    directory: deploy/extras
- kind: http
  destination: crds
  http: {url: "https://files.example/crds.tar.gz", sha256: "00"}
format: registry-v1
config:
  registryV1: {watchNamespace: ""}
rollout: {progressDeadline: 10m, onFailure: Hold, historyLimit: 3}
collisionProtection: Prevent
deletionPolicy: Orphan
"#;
        let spec: BundleDeploymentSpec = serde_saphyr::from_str(yaml).unwrap();
        assert!(spec.paused);
        assert_eq!(spec.format, BundleFormat::RegistryV1);
        assert!(
            spec.sources[0]
                .image
                .as_ref()
                .unwrap()
                .insecure_skip_tls_verify
        );
        assert_eq!(spec.rollout().on_failure(), OnFailure::Hold);
        assert_eq!(spec.rollout().history_limit(), 3);
        assert_eq!(spec.collision_protection(), CollisionProtection::Prevent);
        assert_eq!(spec.deletion_policy(), DeletionPolicy::Orphan);
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["sources"][0]["image"]["insecureSkipTLSVerify"], true);
        assert_eq!(
            json["sources"][1]["git"]["ref"]["commit"]
                .as_str()
                .unwrap()
                .len(),
            40
        );
        assert_eq!(json["collisionProtection"], "Prevent");
    }

    #[test]
    fn defaults_apply_when_fields_are_unset() {
        let spec: BundleDeploymentSpec = serde_saphyr::from_str(
            "sources: [{kind: git, git: {repository: r, ref: {branch: main}}}]\nformat: plain\n",
        )
        .unwrap();
        assert!(!spec.paused);
        assert_eq!(spec.rollout().on_failure(), OnFailure::Rollback);
        assert_eq!(spec.rollout().history_limit(), 5);
        assert_eq!(spec.rollout().progress_deadline(), "10m");
        assert_eq!(spec.collision_protection(), CollisionProtection::IfNoOwner);
        assert_eq!(spec.deletion_policy(), DeletionPolicy::Delete);
        // Unset optional fields stay out of the serialized object.
        let json = serde_json::to_value(&spec).unwrap();
        assert!(json.get("paused").is_none() && json.get("rollout").is_none());
    }
}
