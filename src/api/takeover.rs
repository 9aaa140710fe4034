//! `spec.takeover`: moving in from another deployment tool without deleting or recreating what it
//! installed. The decisions behind it are in `crate::apply::takeover`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which tool installed the objects taken over.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum TakeoverSource {
    /// A release installed by `helm install` (annotations `meta.helm.sh/release-name` and
    /// `meta.helm.sh/release-namespace`, field manager `helm`).
    Helm,
    /// A Flux Kustomization (labels `kustomize.toolkit.fluxcd.io/name` and `/namespace`, field
    /// manager `kustomize-controller`).
    FluxKustomization,
    /// A Flux HelmRelease (labels `helm.toolkit.fluxcd.io/name` and `/namespace`, field manager
    /// `helm-controller`, and the Helm release it made).
    FluxHelmRelease,
    /// An Argo CD Application (annotation `argocd.argoproj.io/tracking-id` or label
    /// `app.kubernetes.io/instance`, field manager `argocd-controller`).
    ArgoCD,
}

/// What happens to a Helm release's records (its `sh.helm.release.v1.*` Secrets) once its
/// objects are taken over. Default: MarkUninstalled.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum ReleaseRecords {
    /// Keep the history, with the last record marked uninstalled (as `helm uninstall
    /// --keep-history` leaves it): `helm list` no longer shows the release, `helm upgrade`
    /// refuses it, and `helm uninstall` only removes the records.
    #[default]
    MarkUninstalled,
    /// Delete every record: Helm forgets the release.
    Delete,
}

/// The previous owner whose objects a BundleDeployment takes over.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new("self.from == 'FluxHelmRelease' || (!has(self.releaseName) && !has(self.releaseStorageNamespace))").message("releaseName and releaseStorageNamespace name the Helm release of a FluxHelmRelease takeover"))]
#[x_kube(validation = Rule::new("self.from == 'Helm' || self.from == 'FluxHelmRelease' || !has(self.releaseRecords)").message("releaseRecords is only valid when taking over from Helm or FluxHelmRelease"))]
#[serde(rename_all = "camelCase")]
pub struct Takeover {
    /// The tool: `Helm`, `FluxKustomization`, `FluxHelmRelease` or `ArgoCD`.
    pub from: TakeoverSource,
    /// Helm: the release; Flux: the Kustomization or HelmRelease; Argo CD: the Application.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Helm: the release's namespace; Flux: the Kustomization's or HelmRelease's namespace;
    /// Argo CD: the Application's namespace (its tracking ids name it, `<namespace>_<name>`,
    /// when it is not the controller's own).
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// FluxHelmRelease: the Helm release helm-controller made. Default: `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 53))]
    pub release_name: Option<String>,
    /// FluxHelmRelease: where that release's records are (the HelmRelease's
    /// `spec.storageNamespace`). Default: `namespace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub release_storage_namespace: Option<String>,
    /// Helm and FluxHelmRelease: what happens to the release's records once every object is
    /// taken over. Default: MarkUninstalled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_records: Option<ReleaseRecords>,
    /// More field managers whose fields pallet takes over, besides the tool's own (a `helm`
    /// binary run under another name, a `kubectl` hotfix). Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub field_managers: Vec<String>,
}

impl Takeover {
    /// What happens to the release's records (default MarkUninstalled).
    pub fn release_records(&self) -> ReleaseRecords {
        self.release_records.unwrap_or_default()
    }

    /// The Helm release whose records are handled, and where they are (Helm and FluxHelmRelease).
    pub fn helm_release(&self) -> Option<(&str, &str)> {
        match self.from {
            TakeoverSource::Helm => Some((&self.name, &self.namespace)),
            TakeoverSource::FluxHelmRelease => Some((
                self.release_name.as_deref().unwrap_or(&self.name),
                self.release_storage_namespace
                    .as_deref()
                    .unwrap_or(&self.namespace),
            )),
            TakeoverSource::FluxKustomization | TakeoverSource::ArgoCD => None,
        }
    }

    /// Whether `status` records this takeover as done.
    pub fn done_in(&self, status: Option<&TakeoverStatus>) -> bool {
        status.is_some_and(|s| {
            s.from == self.from && s.name == self.name && s.namespace == self.namespace
        })
    }
}

impl std::fmt::Display for Takeover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tool = match self.from {
            TakeoverSource::Helm => "Helm release",
            TakeoverSource::FluxKustomization => "Flux Kustomization",
            TakeoverSource::FluxHelmRelease => "Flux HelmRelease",
            TakeoverSource::ArgoCD => "Argo CD Application",
        };
        write!(f, "{tool} {}/{}", self.namespace, self.name)
    }
}

/// A takeover as done.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TakeoverStatus {
    /// The tool taken over from.
    pub from: TakeoverSource,
    /// Its release, Kustomization, HelmRelease or Application.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// What was done with a Helm release's records: `MarkedUninstalled`, `Deleted`, or
    /// `NotFound` (there were none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_records: Option<String>,
    /// When the takeover was done.
    pub completed_at: Time,
}
