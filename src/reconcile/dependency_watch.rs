//! Watches on the objects `spec.dependsOn` names (and, during deletion, on the dependents a
//! dependency waits for), so that a BundleDeployment starts the moment what it waits for
//! changes: a dependency's status write becoming Ready=True, a ConfigMap's key set, a dependent
//! gone. The poll is not what starts it. The watch manager of [`super::watches`], for objects of
//! any kind.

use futures::stream::BoxStream;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::discovery::ApiResource;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;

use super::watches::{by_name, metadata_only, WatchBackoff, Watched, Watches};
use crate::api::BundleDeployment;

/// A watched object: its API resource, namespace (None: cluster-scoped) and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WatchedObject {
    /// API group ("" for the core group).
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural resource name, as discovery gave it.
    pub plural: String,
    /// Namespace of a namespaced object.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl WatchedObject {
    /// The object `name` of `resource`, in `namespace` when it is namespaced.
    pub fn new(resource: &ApiResource, namespace: Option<&str>, name: &str) -> WatchedObject {
        WatchedObject {
            group: resource.group.clone(),
            version: resource.version.clone(),
            kind: resource.kind.clone(),
            plural: resource.plural.clone(),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        }
    }

    /// A BundleDeployment by name.
    pub fn bundle_deployment(name: &str) -> WatchedObject {
        WatchedObject::new(&ApiResource::erase::<BundleDeployment>(&()), None, name)
    }

    fn resource(&self) -> ApiResource {
        let api_version = if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        };
        ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version,
            kind: self.kind.clone(),
            plural: self.plural.clone(),
        }
    }
}

impl Watched for WatchedObject {
    const CHANGED: &'static str = "dependency changed";

    fn events(
        &self,
        client: Client,
    ) -> BoxStream<'static, Result<watcher::Event<ObjectMeta>, watcher::Error>> {
        let resource = self.resource();
        let api: Api<PartialObjectMeta<DynamicObject>> = match &self.namespace {
            Some(namespace) => Api::namespaced_with(client, namespace, &resource),
            None => Api::all_with(client, &resource),
        };
        metadata_only(watcher(api, by_name(&self.name)).backoff(WatchBackoff::default()))
    }
}

/// Handle to the dependency watches: tell it what each BundleDeployment waits on.
pub type DependencyWatches = Watches<WatchedObject>;
