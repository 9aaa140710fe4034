//! Pure renderers for pallet's bundle formats: a directory tree plus format config in,
//! an ordered list of Kubernetes objects (or a clear error) out. No Kubernetes client here.

pub mod archive;
pub mod budget;
pub mod canonical;
pub mod error;
mod gojson;
pub mod helm;
pub mod kustomize;
pub mod kustomize_error;
pub mod object;
pub mod parallel;
pub mod plain;
pub mod processors;
pub mod registry_v1;
mod registry_v1_config;
mod registry_v1_webhooks;
pub mod scope;
pub mod semver;
mod yaml_path;

use std::path::Path;

pub use budget::{BudgetBreach, RenderBudgets};
pub use canonical::{canonical_form, digest};
pub use error::{RegistryV1Rule, RenderError, SourceLocation};
pub use object::{parse_manifests, Object, ObjectKey, Origin};
pub use scope::{Scope, ScopeTable};

/// A bundle format, as named by `spec.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Format {
    /// Plain Kubernetes manifests.
    Plain,
    /// A Helm chart.
    Helm,
    /// An OLM registry+v1 bundle.
    RegistryV1,
    /// A kustomization, built as `kustomize build` v5.5.0 builds it.
    Kustomize,
}

impl Format {
    /// The name used in the API (`plain`, `helm`, `registry-v1`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Helm => "helm",
            Self::RegistryV1 => "registry-v1",
            Self::Kustomize => "kustomize",
        }
    }
}

/// Helm options for the helm format.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HelmOptions {
    /// Release name (the API defaults it to the BundleDeployment's name).
    pub release_name: String,
    /// User values (`config.helm.valuesFrom` then `values`, already merged), merged over the
    /// chart's values.yaml and its `values_files`.
    pub values: serde_json::Value,
    /// Values files inside the chart (`config.helm.valuesFiles`), merged in order over its
    /// values.yaml and under `values`, as `helm -f` files are.
    pub values_files: Vec<String>,
    /// The target cluster's capabilities (`.Capabilities`); `None` renders with helm's
    /// built-in defaults, as `helm template` without a cluster does.
    pub capabilities: Option<HelmCapabilities>,
    /// What `now` returns, as Unix seconds (UTC), and what Sprig's date functions take for
    /// "the current time". The caller chooses it, never the renderer: the agent passes the time
    /// the revision was first rendered, so a chart using `now` renders the same objects (and
    /// digest) on every reconcile of the same inputs.
    pub now: i64,
    /// Seed of the random functions (`randAlphaNum`, `uuidv4`, `genCA`, `genPrivateKey`,
    /// bcrypt salts, ...): 256 bits keying a ChaCha20 stream, so their output is stable for a
    /// given seed and cannot be recomputed without it. The agent derives it from a secret key of
    /// the BundleDeployment and the render's inputs; all zeros outside a cluster.
    pub seed: RandomSeed,
    /// How `lookup` is answered: empty without a cluster (`helm template`), or from what the
    /// caller read of the cluster.
    #[serde(default)]
    pub lookups: Lookups,
}

/// One `lookup` of a chart: `lookup apiVersion kind namespace name` (an empty name lists the
/// kind, in the namespace or, when that is empty too, in all namespaces).
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct LookupKey {
    /// `apps/v1`, `v1`.
    pub api_version: String,
    /// `Deployment`.
    pub kind: String,
    /// The namespace ("" for cluster-scoped kinds, or all namespaces in a list).
    pub namespace: String,
    /// The object's name ("" for a list).
    pub name: String,
}

/// A `lookup` and what the cluster answered: the object, a list (`{items: [...]}`) or an empty
/// map when nothing was found, as helm returns them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LookupAnswer {
    /// What was looked up.
    pub key: LookupKey,
    /// What the chart gets.
    pub answer: serde_json::Value,
}

/// How a render answers helm's `lookup`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Lookups {
    /// No cluster: every lookup is an empty map, as in `helm template`.
    #[default]
    Offline,
    /// What the caller read of the cluster. A lookup without an answer here is an empty map for
    /// the rest of the render, and the render then fails with [`RenderError::LookupsNeeded`]
    /// listing each, so that the caller reads them and renders again.
    Answers(Vec<LookupAnswer>),
}

/// The seed of a render's random functions: 256 bits.
pub type RandomSeed = [u8; 32];

/// What `.Capabilities` reports: the cluster's version and the APIs it serves.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HelmCapabilities {
    /// `.Capabilities.KubeVersion.Version`, e.g. `v1.35.4`.
    pub kube_version: String,
    /// `.Capabilities.APIVersions`: every served `group/version` and `group/version/Kind`.
    pub api_versions: Vec<String>,
}

impl HelmCapabilities {
    /// What `helm template` assumes without a cluster: Kubernetes v1.20.0 and helm's built-in
    /// API versions.
    pub fn default_for_template() -> Self {
        let defaults = helm::RenderOptions::default();
        HelmCapabilities {
            kube_version: defaults.kube_version,
            api_versions: defaults.api_versions,
        }
    }
}

/// Format configuration for one render.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RenderConfig {
    /// Namespace for namespaced objects that name none; registry-v1 install namespace; helm
    /// Release.Namespace.
    pub install_namespace: String,
    /// registry-v1 watch namespace: `""` = AllNamespaces, = install namespace = OwnNamespace,
    /// anything else = SingleNamespace.
    pub watch_namespace: String,
    /// Helm options.
    pub helm: HelmOptions,
    /// registry-v1 options (`config.registryV1`).
    pub registry_v1: RegistryV1Options,
    /// kustomize options (`config.kustomize`).
    pub kustomize: KustomizeOptions,
    /// Limits of the render (steps, output size).
    pub budgets: RenderBudgets,
}

/// Options of the kustomize format.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KustomizeOptions {
    /// The kustomization root inside the tree, relative to it (`overlays/prod`); `""` is the
    /// tree's root.
    pub path: String,
}

/// registry-v1 options beyond the watch namespace.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RegistryV1Options {
    /// `deploymentConfig` (OLM v1's fields, as JSON), merged into every CSV Deployment.
    pub deployment_config: Option<serde_json::Value>,
    /// Who provides the certificates of the bundle's webhooks.
    pub certificate_provider: CertificateProvider,
}

/// The certificate provider for a registry-v1 bundle's webhooks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CertificateProvider {
    /// None: the webhooks as OLM v1's renderer writes them without a provider (no caBundle,
    /// no certificate volumes). What the conformance goldens hold; not installable as is.
    #[default]
    None,
    /// cert-manager: a self-signed Issuer and a Certificate per webhook Service, and
    /// `cert-manager.io/inject-ca-from` on the webhook configurations and converting CRDs.
    CertManager,
    /// Built into the agent: the certificate Secrets are mounted as with cert-manager; the
    /// `caBundle` is left empty for the agent to fill with
    /// [`registry_v1::inject_ca_bundle`] once it has issued the certificates
    /// [`Rendered::webhook_certificates`] lists.
    BuiltIn,
}

/// A serving certificate the BuiltIn provider must issue for a webhook Service.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WebhookCertificate {
    /// The webhook Service's namespace (the install namespace).
    pub namespace: String,
    /// The webhook Service's name.
    pub service_name: String,
    /// The Secret the Deployment mounts (`tls.crt`, `tls.key`).
    pub secret_name: String,
    /// DNS names the certificate must hold (`<svc>.<ns>`, `<svc>.<ns>.svc`,
    /// `<svc>.<ns>.svc.cluster.local`).
    pub dns_names: Vec<String>,
}

/// One rendered object and whether its kind is namespaced.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedObject {
    /// The object.
    pub object: Object,
    /// Its scope. `Scope::Unknown` objects that name no namespace must be resolved by the apply step
    /// through discovery: give them [`Rendered::install_namespace`] if the kind turns out namespaced.
    pub scope: Scope,
}

/// The output of a render: objects in the order the format produced them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Rendered {
    /// The objects, in render order (plain: file path order, then document order).
    pub objects: Vec<RenderedObject>,
    /// The namespace the renderer gave namespaced objects without one.
    pub install_namespace: String,
    /// registry-v1 with the BuiltIn provider: the serving certificates the webhooks need.
    pub webhook_certificates: Vec<WebhookCertificate>,
}

impl Rendered {
    /// The objects without their scopes.
    pub fn object_list(&self) -> Vec<Object> {
        self.objects
            .iter()
            .map(|rendered| rendered.object.clone())
            .collect()
    }

    /// The canonical form of the rendered set (see [`canonical`]).
    pub fn canonical_form(&self) -> Vec<u8> {
        canonical::canonical_form(&self.object_list())
    }

    /// `sha256:<hex>` of the canonical form.
    pub fn digest(&self) -> String {
        canonical::digest(&self.object_list())
    }
}

/// Renders the bundle tree at `tree` in `format` with `config`, within `config.budgets`: a
/// render that goes over a budget fails with [`RenderError::BudgetExceeded`].
pub fn render(format: Format, tree: &Path, config: &RenderConfig) -> Result<Rendered, RenderError> {
    let _meter = budget::Meter::install(config.budgets);
    let result = match format {
        Format::Plain => plain::render_plain(tree, config),
        Format::RegistryV1 => registry_v1::render_registry_v1(tree, config),
        Format::Helm => helm::render_bundle(tree, config),
        Format::Kustomize => kustomize::render_kustomize(tree, config),
    };
    // A breach or refusal fails the render even where a template function turned its error
    // into a value and the render went on.
    let result = match (result, budget::take_breach(), budget::take_refusal()) {
        (Err(error), Some(breach), _) => Err(RenderError::over_budget(breach, &error)),
        (Ok(_), Some(breach), _) => Err(RenderError::BudgetExceeded {
            message: breach.to_string(),
            breach,
        }),
        (Ok(_), None, Some(message)) => Err(RenderError::InvalidConfig {
            format: format.name(),
            message,
        }),
        (result, _, _) => result,
    };
    // Messages name files of the bundle, never the directory it was assembled in.
    result.map_err(|error| error.relative_to(tree))
}
