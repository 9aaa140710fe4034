//! Watches on the ConfigMaps and Secrets that `config.helm.valuesFrom` (and processors'
//! `varsFrom`) name, so that an edit reconciles the BundleDeployments reading them within
//! seconds, not at the next requeue: the watch manager of [`super::watches`], for these kinds.
//! There is no cache of ConfigMaps or Secrets (contents never reach memory here; a reconcile
//! reads what it needs).

use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;

pub use super::watches::Seen;
use super::watches::{by_name, metadata_only, WatchBackoff, Watched, Watches};
use crate::api::ValuesSourceKind;

/// A referenced object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectId {
    /// ConfigMap or Secret.
    pub kind: ValuesSourceKind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl Watched for ObjectId {
    const CHANGED: &'static str = "valuesFrom object changed";

    fn events(
        &self,
        client: Client,
    ) -> BoxStream<'static, Result<watcher::Event<ObjectMeta>, watcher::Error>> {
        match self.kind {
            ValuesSourceKind::ConfigMap => namespaced::<ConfigMap>(client, self),
            ValuesSourceKind::Secret => namespaced::<Secret>(client, self),
        }
    }
}

/// A metadata-only watch of object `id` of kind `K`.
fn namespaced<K>(
    client: Client,
    id: &ObjectId,
) -> BoxStream<'static, Result<watcher::Event<ObjectMeta>, watcher::Error>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default,
{
    let api: Api<PartialObjectMeta<K>> = Api::namespaced(client, &id.namespace);
    metadata_only(watcher(api, by_name(&id.name)).backoff(WatchBackoff::default()))
}

/// Handle to the values watches: tell it what each BundleDeployment read.
pub type ValuesWatches = Watches<ObjectId>;
