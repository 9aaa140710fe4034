//! The secret behind the values a chart generates (`randAlphaNum`, `genCA`, `genPrivateKey`,
//! bcrypt salts, ...).
//!
//! Each BundleDeployment rendered as a helm chart has a key of 256 bits drawn from the operating
//! system's random source, kept in one immutable Secret of the agent's namespace
//! (`pallet-render-key-<uid>`, type [`SECRET_TYPE`]) created at its first render. The Secret is
//! bound to the object's UID (in its name, an annotation and an owner reference), so a new
//! BundleDeployment with the same name gets a new key, and it goes with the BundleDeployment
//! (deleted at cleanup, and by the garbage collector should the agent not be there).
//!
//! The render's seed is HMAC-SHA256 of the key over the render's inputs ([`seed`]): the resolved
//! sources and the helm settings (release name, namespace, values, values files, the
//! BundleDeployment's creation time: `config.helm.now` as `render::render_config` sets it, not
//! the chart's clock, which follows the revision, see `super::render_time`), not
//! `metadata.generation` nor the cluster's capabilities. Pausing, resuming and edits that leave
//! those inputs alone keep every generated value; a change of content draws a fresh stream, so a
//! value generated for one version of a chart never reappears at another place in the next.
//! Reading the BundleDeployment is not enough to recompute a password: the key is needed, and
//! only the agent (and whoever may read Secrets in its namespace) can read it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use hmac::{Hmac, Mac};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt};
use pallet_formats::{RandomSeed, RenderConfig};
use sha2::Sha256;

use super::ReconcileError;
use crate::api::BundleDeployment;
use crate::source::Fetched;

/// Secret `type` of render keys.
pub const SECRET_TYPE: &str = "pallet.dev/render-key";
/// The one data key of a render-key Secret.
pub const DATA_KEY: &str = "key";
/// Label: the BundleDeployment's label-safe key ([`crate::revision::bundle_key`]).
pub const LABEL_KEY_OF: &str = "pallet.dev/render-key-of";
/// Annotation: the BundleDeployment's full name.
pub const ANNOTATION_KEY_OF: &str = "pallet.dev/render-key-of";
/// Annotation: the UID of the BundleDeployment the key belongs to.
pub const ANNOTATION_UID: &str = "pallet.dev/render-key-uid";
/// Bytes of a key: 256 bits.
pub const KEY_BYTES: usize = 32;
/// What the derivation is called in the MAC's input: a new derivation gets a new name.
const DERIVATION: &str = "pallet.dev/render-seed/v1";

/// Name of the Secret holding the key of the BundleDeployment with `uid`.
pub fn secret_name(uid: &str) -> String {
    format!("pallet-render-key-{uid}")
}

/// A BundleDeployment's render key. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct RenderKey([u8; KEY_BYTES]);

impl std::fmt::Debug for RenderKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RenderKey(..)")
    }
}

impl RenderKey {
    /// A new key from the operating system's random source.
    pub fn generate() -> Result<RenderKey, ReconcileError> {
        let mut key = [0u8; KEY_BYTES];
        getrandom::fill(&mut key).map_err(|e| ReconcileError::Secret {
            reason: "RenderKeyUnavailable",
            message: format!("the operating system's random source failed: {e}"),
        })?;
        Ok(RenderKey(key))
    }

    /// A key from its bytes (exactly [`KEY_BYTES`]).
    pub fn from_bytes(bytes: &[u8]) -> Option<RenderKey> {
        Some(RenderKey(bytes.try_into().ok()?))
    }
}

/// The seed of a helm render: HMAC-SHA256 of `key` over the inputs that decide the content
/// (`config`'s helm settings and namespace, the resolved `sources`). Left out: the seed itself,
/// the cluster's capabilities (an upgrade of the cluster must not rotate every password) and
/// everything the BundleDeployment says that is not rendered (pause, rollout, health checks,
/// notifications, generation). Each input is written with its length, so no two different sets
/// of inputs give the same text.
pub fn seed(key: &RenderKey, config: &RenderConfig, sources: &[Fetched]) -> RandomSeed {
    let mut text = String::new();
    let mut field = |name: &str, value: &str| {
        text.push_str(&format!("{name} {} {value}\n", value.len()));
    };
    field("derivation", DERIVATION);
    field("installNamespace", &config.install_namespace);
    field("releaseName", &config.helm.release_name);
    let mut values = String::new();
    pallet_formats::canonical::write_canonical_json(&config.helm.values, &mut values);
    field("values", &values);
    for file in &config.helm.values_files {
        field("valuesFile", file);
    }
    field("now", &config.helm.now.to_string());
    for source in sources {
        field("destination", &source.destination);
        field("resolved", &source.resolved);
    }
    let mut mac = mac(key);
    mac.update(text.as_bytes());
    mac.finalize().into_bytes().into()
}

/// HMAC-SHA256 keyed with `key`. A key shorter than SHA-256's 64-byte block is zero-padded to
/// it by HMAC's definition, so passing it padded is the same MAC and cannot fail.
fn mac(key: &RenderKey) -> Hmac<Sha256> {
    let mut block = [0u8; 64];
    block[..KEY_BYTES].copy_from_slice(&key.0);
    <Hmac<Sha256> as hmac::digest::KeyInit>::new(&block.into())
}

/// True for a Secret the agent keeps for itself (a render key), by type or label: never usable
/// as a reference of a BundleDeployment.
pub fn is_render_key(meta: &ObjectMeta, type_: Option<&str>) -> bool {
    type_ == Some(SECRET_TYPE)
        || meta
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(LABEL_KEY_OF))
}

/// The render keys of BundleDeployments, in Secrets of the agent's namespace, with the ones
/// already read kept in memory (by UID).
pub struct RenderKeys {
    secrets: Api<Secret>,
    namespace: String,
    kept: Mutex<HashMap<String, RenderKey>>,
}

impl RenderKeys {
    /// Keys kept in `namespace`, read and written through `client`.
    pub fn new(client: Client, namespace: &str) -> Self {
        RenderKeys {
            secrets: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            kept: Mutex::new(HashMap::new()),
        }
    }

    /// The key of `bd`, created when it has none yet.
    pub async fn get_or_create(&self, bd: &BundleDeployment) -> Result<RenderKey, ReconcileError> {
        let uid = uid_of(bd)?;
        if let Some(key) = self.kept().get(uid) {
            return Ok(key.clone());
        }
        let key = match self.read(bd).await? {
            Some(key) => key,
            None => self.create(bd, uid).await?,
        };
        self.kept().insert(uid.to_string(), key.clone());
        Ok(key)
    }

    /// The key of `bd` as stored, without creating one (None: it has none yet).
    pub async fn read(&self, bd: &BundleDeployment) -> Result<Option<RenderKey>, ReconcileError> {
        let uid = uid_of(bd)?;
        let name = secret_name(uid);
        let secret = self
            .secrets
            .get_opt(&name)
            .await
            .map_err(|e| self.kube_error(&name, "read", e))?;
        secret
            .map(|secret| self.check(&name, uid, &secret))
            .transpose()
    }

    /// Deletes the key of `bd` (gone already is fine) and forgets it.
    pub async fn delete(&self, bd: &BundleDeployment) -> Result<(), ReconcileError> {
        let Some(uid) = bd.metadata.uid.as_deref() else {
            return Ok(());
        };
        self.kept().remove(uid);
        let name = secret_name(uid);
        match self.secrets.delete(&name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(self.kube_error(&name, "delete", e)),
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, HashMap<String, RenderKey>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates the key Secret; one created meanwhile by another pass or agent wins.
    async fn create(&self, bd: &BundleDeployment, uid: &str) -> Result<RenderKey, ReconcileError> {
        let name = secret_name(uid);
        let key = RenderKey::generate()?;
        let bd_name = bd.name_any();
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(BTreeMap::from([(
                    LABEL_KEY_OF.to_string(),
                    crate::revision::bundle_key(&bd_name),
                )])),
                annotations: Some(BTreeMap::from([
                    (ANNOTATION_KEY_OF.to_string(), bd_name.clone()),
                    (ANNOTATION_UID.to_string(), uid.to_string()),
                ])),
                // The garbage collector deletes it with the BundleDeployment even when the agent
                // is not there to do so.
                owner_references: Some(vec![OwnerReference {
                    api_version: "pallet.dev/v1alpha1".into(),
                    kind: "BundleDeployment".into(),
                    name: bd_name,
                    uid: uid.to_string(),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            type_: Some(SECRET_TYPE.into()),
            immutable: Some(true),
            data: Some(BTreeMap::from([(
                DATA_KEY.to_string(),
                ByteString(key.0.to_vec()),
            )])),
            ..Default::default()
        };
        match self.secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => Ok(key),
            Err(kube::Error::Api(status)) if status.code == 409 => match self.read(bd).await? {
                Some(theirs) => Ok(theirs),
                None => Err(self.invalid(&name, "was created and is gone again")),
            },
            Err(e) => Err(self.kube_error(&name, "create", e)),
        }
    }

    /// The key a stored Secret holds, when it is one of the agent's for this UID.
    fn check(&self, name: &str, uid: &str, secret: &Secret) -> Result<RenderKey, ReconcileError> {
        if secret.type_.as_deref() != Some(SECRET_TYPE) {
            return Err(self.invalid(name, &format!("is not of type {SECRET_TYPE}")));
        }
        let owner = secret.annotations().get(ANNOTATION_UID).map(String::as_str);
        if owner != Some(uid) {
            return Err(self.invalid(name, "belongs to another BundleDeployment"));
        }
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(DATA_KEY))
            .and_then(|bytes| RenderKey::from_bytes(&bytes.0))
            .ok_or_else(|| self.invalid(name, &format!("has no {KEY_BYTES}-byte key {DATA_KEY:?}")))
    }

    fn invalid(&self, name: &str, why: &str) -> ReconcileError {
        ReconcileError::Secret {
            reason: "RenderKeyInvalid",
            message: format!(
                "render key secret {}/{name} {why}; delete it to have a new key made (every value the chart generates then changes)",
                self.namespace
            ),
        }
    }

    fn kube_error(&self, name: &str, verb: &str, source: kube::Error) -> ReconcileError {
        ReconcileError::Kube {
            context: format!("{verb} render key secret {}/{name}", self.namespace),
            source,
        }
    }
}

fn uid_of(bd: &BundleDeployment) -> Result<&str, ReconcileError> {
    bd.metadata
        .uid
        .as_deref()
        .ok_or_else(|| ReconcileError::Secret {
            reason: "RenderKeyUnavailable",
            message: "the BundleDeployment has no UID yet: a render key is bound to it".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pallet_formats::HelmOptions;
    use serde_json::json;

    fn config(values: serde_json::Value) -> RenderConfig {
        RenderConfig {
            install_namespace: "apps".into(),
            helm: HelmOptions {
                release_name: "web".into(),
                values,
                now: 1_700_000_000,
                ..HelmOptions::default()
            },
            ..RenderConfig::default()
        }
    }

    fn fetched(resolved: &str) -> Vec<Fetched> {
        vec![Fetched {
            kind: crate::api::SourceKind::Git,
            reference: "main".into(),
            resolved: resolved.into(),
            destination: String::new(),
            path: std::path::PathBuf::new(),
            version: None,
            verified: None,
        }]
    }

    #[test]
    fn the_seed_follows_the_key_and_the_content_only() {
        let key = RenderKey([7; KEY_BYTES]);
        let base = seed(&key, &config(json!({"a": 1})), &fetched("abc"));
        assert_eq!(base, seed(&key, &config(json!({"a": 1})), &fetched("abc")));
        // Another key, other content: another seed.
        assert_ne!(
            base,
            seed(
                &RenderKey([8; KEY_BYTES]),
                &config(json!({"a": 1})),
                &fetched("abc")
            )
        );
        assert_ne!(base, seed(&key, &config(json!({"a": 2})), &fetched("abc")));
        assert_ne!(base, seed(&key, &config(json!({"a": 1})), &fetched("abd")));
        // Not an input: the cluster's capabilities, the seed already set.
        let mut other = config(json!({"a": 1}));
        other.helm.capabilities = Some(pallet_formats::HelmCapabilities::default_for_template());
        other.helm.seed = [9; 32];
        assert_eq!(base, seed(&key, &other, &fetched("abc")));
    }

    #[test]
    fn the_padded_mac_is_hmac_with_the_key_itself() {
        let key = RenderKey([5; KEY_BYTES]);
        let mut ours = mac(&key);
        ours.update(b"inputs");
        let mut reference = <Hmac<Sha256> as Mac>::new_from_slice(&[5; KEY_BYTES]).unwrap();
        reference.update(b"inputs");
        assert_eq!(
            ours.finalize().into_bytes(),
            reference.finalize().into_bytes()
        );
    }

    #[test]
    fn a_key_is_never_printed_and_fresh_keys_differ() {
        let a = RenderKey::generate().unwrap();
        let b = RenderKey::generate().unwrap();
        assert_ne!(a, b);
        assert_eq!(format!("{a:?}"), "RenderKey(..)");
        assert!(RenderKey::from_bytes(&[1; 31]).is_none());
    }

    #[test]
    fn render_keys_are_recognised_by_type_or_label() {
        let labelled = ObjectMeta {
            labels: Some(BTreeMap::from([(LABEL_KEY_OF.into(), "web".into())])),
            ..Default::default()
        };
        assert!(is_render_key(&labelled, None));
        assert!(is_render_key(&ObjectMeta::default(), Some(SECRET_TYPE)));
        assert!(!is_render_key(&ObjectMeta::default(), Some("Opaque")));
    }
}
