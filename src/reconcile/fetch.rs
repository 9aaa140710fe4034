//! Phase 1, fetch (I/O): read each source's Secrets under the secret-namespace policy, fetch every
//! source through the cache, and assemble them into one bundle tree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::Client;

use super::ReconcileError;
use crate::api::{
    BundleDeployment, SecretReference, ServiceAccountReference, Source, SourceVerification,
    TrustedRootReference, ValuesSourceKind,
};
use crate::source::verify::VerifyMaterial;
use std::time::Instant;

use super::fetch_pool::FetchState;
use crate::source::{
    assemble, describe_source, Credentials, Fetched, Fetcher, SourceError, SourceSecrets,
};

/// Where Secrets and ConfigMaps named by a BundleDeployment may be read from, and as whom it
/// acts (api.md, "Secret references"; docs/security.md).
#[derive(Clone, Debug, Default)]
pub struct SecretPolicy {
    /// The agent's own namespace: the default for references without a namespace. Not a pool:
    /// an object there is used only when labelled for the BundleDeployment
    /// ([`ACCESS_LABEL_PREFIX`]) or readable by its ServiceAccount.
    pub agent_namespace: String,
    /// Other namespaces any BundleDeployment may read Secrets from (the agent's allow-list flag).
    pub allowed_namespaces: Vec<String>,
    /// The ServiceAccount a BundleDeployment naming none acts as (`--default-service-account`);
    /// None: the agent's own identity.
    pub default_service_account: Option<ServiceAccountReference>,
    /// The client reading referenced objects acts as the requester's ServiceAccount (`pallet
    /// plan` and `diff` of a file): what it may read decides, so nothing is given by label or
    /// allow-list and no SubjectAccessReview is asked; the agent's own Secrets stay refused.
    pub reads_as_service_account: bool,
}

/// Label prefix giving one BundleDeployment the use of a Secret or ConfigMap of the agent's
/// namespace: `access.pallet.dev/<name>: "true"` (one label per BundleDeployment allowed).
pub const ACCESS_LABEL_PREFIX: &str = "access.pallet.dev/";

/// The label that gives BundleDeployment `name` the use of an object of the agent's namespace.
pub fn access_label(name: &str) -> String {
    format!("{ACCESS_LABEL_PREFIX}{name}")
}

/// Who reads a referenced object: a BundleDeployment, and the ServiceAccount it acts as.
#[derive(Clone, Copy, Debug)]
pub struct Requester<'a> {
    /// The BundleDeployment's name.
    pub bundle_deployment: &'a str,
    /// Its `spec.serviceAccount`, else the agent's default one.
    pub service_account: Option<&'a ServiceAccountReference>,
}

impl SecretPolicy {
    /// The ServiceAccount `spec` acts as: its own, else the default one (None: the agent).
    pub fn service_account<'a>(
        &'a self,
        spec: &'a crate::api::BundleDeploymentSpec,
    ) -> Option<&'a ServiceAccountReference> {
        spec.service_account
            .as_ref()
            .or(self.default_service_account.as_ref())
    }

    /// The requester for BundleDeployment `name` with `spec`.
    pub fn requester<'a>(
        &'a self,
        name: &'a str,
        spec: &'a crate::api::BundleDeploymentSpec,
    ) -> Requester<'a> {
        Requester {
            bundle_deployment: name,
            service_account: self.service_account(spec),
        }
    }
}

/// Resolves every source of `bd` into the cache, in spec order. A floating source resolved less
/// than its poll interval ago is taken as then resolved, without a request, unless `force_poll`.
pub async fn fetch_sources(
    ctx: &super::Context,
    bd: &BundleDeployment,
    force_poll: bool,
) -> Result<Vec<Fetched>, ReconcileError> {
    let uid = bd.metadata.uid.as_deref().unwrap_or_default();
    let mut fetched = Vec::with_capacity(bd.spec.sources.len());
    let mut pending = Vec::new();
    for source in &bd.spec.sources {
        if let Some(refusal) = ctx.sources.verification.refusal(source) {
            return Err(SourceError::VerificationRequired(refusal).into());
        }
    }
    for (index, source) in bd.spec.sources.iter().enumerate() {
        if !force_poll {
            if let Some(polled) = ctx.sources.polls.fresh(uid, index, source, Instant::now()) {
                fetched.push(polled);
                continue;
            }
        }
        let name = bd.metadata.name.as_deref().unwrap_or_default();
        let requester = ctx.cluster.secret_policy.requester(name, &bd.spec);
        let secrets = source_secrets(
            &ctx.cluster.client,
            &ctx.cluster.secret_policy,
            requester,
            source,
        )
        .await?;
        let started = Instant::now();
        match ctx
            .sources
            .fetches
            .fetch(&ctx.sources.fetcher, bd, index, source, secrets)
            .await
        {
            FetchState::Done(result) => {
                let one = (*result)?;
                ctx.sources.polls.record(uid, index, source, &one, started);
                fetched.push(one);
            }
            FetchState::Pending(state) => pending.push(state.describe(&describe_source(source))),
        }
    }
    if !pending.is_empty() {
        return Err(ReconcileError::Fetching(pending.join("; ")));
    }
    Ok(fetched)
}

/// Assembles fetched sources into a fresh scratch tree (the caller removes it).
pub fn assemble_tree(fetcher: &Fetcher, fetched: &[Fetched]) -> Result<PathBuf, ReconcileError> {
    let tree = fetcher.cache().scratch_dir()?;
    if let Err(e) = assemble(fetched, &tree) {
        remove_tree(&tree);
        return Err(e.into());
    }
    Ok(tree)
}

/// Removes an assembled tree; failure only leaks scratch space, which the cache clears at start.
pub fn remove_tree(tree: &Path) {
    if let Err(e) = std::fs::remove_dir_all(tree) {
        tracing::warn!(tree = %tree.display(), error = %e, "could not remove scratch tree");
    }
}

/// Reads the Secrets `source` names (credentials, CA) under the policy; none named, none read.
pub async fn source_secrets(
    client: &Client,
    policy: &SecretPolicy,
    requester: Requester<'_>,
    source: &Source,
) -> Result<SourceSecrets, ReconcileError> {
    let (auth, ca) = match (
        &source.image,
        &source.git,
        &source.http,
        &source.helm_repository,
    ) {
        (Some(image), _, _, _) => (image.auth.as_ref(), image.ca_secret.as_ref()),
        (_, Some(git), _, _) => (git.auth.as_ref(), None),
        (_, _, Some(http), _) => (http.auth.as_ref(), None),
        // Both https:// and oci:// chart repositories.
        (_, _, _, Some(repo)) => (repo.auth.as_ref(), repo.ca_secret.as_ref()),
        _ => (None, None),
    };
    let mut secrets = SourceSecrets::default();
    if let Some(auth) = auth {
        let (origin, secret) = read_secret(client, policy, requester, &auth.secret).await?;
        let data = secret_data(&secret);
        secrets.credentials = Some(Credentials::from_secret_data(
            &origin,
            secret.type_.as_deref(),
            &data,
        )?);
    }
    if let Some(reference) = ca {
        let (origin, secret) = read_secret(client, policy, requester, reference).await?;
        let pem = secret_data(&secret)
            .remove("ca.crt")
            .ok_or_else(|| ReconcileError::Secret {
                reason: "SecretKeyMissing",
                message: format!("{origin} has no key ca.crt"),
            })?;
        secrets.ca_pem = Some(pem);
    }
    if let Some(verify) = &source.verify {
        secrets.verify = Some(verify_material(client, policy, requester, verify).await?);
    }
    Ok(secrets)
}

/// Reads what a source's `verify` names: the Secret of keys (every entry) and, keyless, the
/// trusted root from its ConfigMap or Secret, under the policy.
pub async fn verify_material(
    client: &Client,
    policy: &SecretPolicy,
    requester: Requester<'_>,
    verify: &SourceVerification,
) -> Result<VerifyMaterial, ReconcileError> {
    let keys_secret = match (&verify.cosign, &verify.provenance, &verify.git) {
        (Some(cosign), _, _) => cosign.public_keys.as_ref(),
        (_, Some(provenance), _) => Some(&provenance.keyring),
        (_, _, Some(git)) => Some(&git.keys),
        _ => None,
    };
    let mut keys = Vec::new();
    if let Some(reference) = keys_secret {
        let (origin, secret) = read_secret(client, policy, requester, reference).await?;
        keys = secret_data(&secret)
            .into_iter()
            .map(|(key, data)| (format!("{origin} key {key}"), data))
            .collect();
        if keys.is_empty() {
            return Err(ReconcileError::Secret {
                reason: "SecretKeyMissing",
                message: format!("{origin} holds no keys to verify signatures with"),
            });
        }
    }
    let trusted_root = match verify.cosign.as_ref().and_then(|c| c.keyless.as_ref()) {
        Some(keyless) => {
            Some(read_trusted_root(client, policy, requester, &keyless.trusted_root).await?)
        }
        None => None,
    };
    Ok(VerifyMaterial {
        spec: verify.clone(),
        keys,
        trusted_root,
    })
}

/// The trusted root JSON a keyless `verify` names, with where it came from.
async fn read_trusted_root(
    client: &Client,
    policy: &SecretPolicy,
    requester: Requester<'_>,
    reference: &TrustedRootReference,
) -> Result<(String, Vec<u8>), ReconcileError> {
    let key = reference.key();
    let (origin, mut data) = match reference.kind {
        ValuesSourceKind::Secret => {
            let secret_ref = SecretReference {
                name: reference.name.clone(),
                namespace: reference.namespace.clone(),
            };
            let (origin, secret) = read_secret(client, policy, requester, &secret_ref).await?;
            (origin, secret_data(&secret))
        }
        ValuesSourceKind::ConfigMap => {
            read_config_map(client, policy, requester, reference).await?
        }
    };
    let json = data.remove(key).ok_or_else(|| ReconcileError::Secret {
        reason: "SecretKeyMissing",
        message: format!("{origin} has no key {key} (the trusted root)"),
    })?;
    Ok((format!("{origin} key {key}"), json))
}

/// Reads the ConfigMap a trusted root names under the policy (see [`read_under_policy`]): its
/// `data` and `binaryData`, as bytes.
async fn read_config_map(
    client: &Client,
    policy: &SecretPolicy,
    requester: Requester<'_>,
    reference: &TrustedRootReference,
) -> Result<(String, BTreeMap<String, Vec<u8>>), ReconcileError> {
    let name = (reference.namespace.as_deref(), reference.name.as_str());
    let (origin, map) = read_named::<k8s_openapi::api::core::v1::ConfigMap>(
        client,
        policy,
        requester,
        name,
        "configmap",
    )
    .await?;
    Ok((origin, config_map_data(&map)))
}

/// Reads object `name` (`namespace`, else the agent's) of kind `K` (`kind` in messages) under
/// the policy (see [`read_under_policy`]): the object, or why it may not be used or is missing
/// (`SecretNotAllowed`, `SecretNotFound`), with how messages name it.
async fn read_named<K: PolicyObject>(
    client: &Client,
    policy: &SecretPolicy,
    requester: Requester<'_>,
    (namespace, name): (Option<&str>, &str),
    kind: &str,
) -> Result<(String, K), ReconcileError> {
    let namespace = namespace.unwrap_or(&policy.agent_namespace);
    let origin = format!("{kind} {namespace}/{name}");
    let found: Option<K> = read_under_policy(client, policy, requester, namespace, name, &origin)
        .await?
        .map_err(|why| ReconcileError::Secret {
            reason: "SecretNotAllowed",
            message: format!("{origin} {why}"),
        })?;
    match found {
        Some(object) => Ok((origin, object)),
        None => Err(ReconcileError::Secret {
            reason: "SecretNotFound",
            message: format!("{origin} not found"),
        }),
    }
}

/// A Secret's `data` and `stringData` (which wins), as bytes.
pub fn secret_data(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    for (k, v) in secret.string_data.iter().flatten() {
        data.insert(k.clone(), v.clone().into_bytes());
    }
    data
}

/// A ConfigMap's `data` and `binaryData` (`data` wins), as bytes.
pub fn config_map_data(map: &k8s_openapi::api::core::v1::ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = map
        .binary_data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    for (k, v) in map.data.iter().flatten() {
        data.insert(k.clone(), v.clone().into_bytes());
    }
    data
}

/// Reads a Secret under the policy (see [`read_under_policy`]).
pub(crate) async fn read_secret(
    client: &Client,
    policy: &SecretPolicy,
    requester: Requester<'_>,
    reference: &SecretReference,
) -> Result<(String, Secret), ReconcileError> {
    let name = (reference.namespace.as_deref(), reference.name.as_str());
    read_named::<Secret>(client, policy, requester, name, "secret").await
}

/// A kind of object a BundleDeployment may read under the policy: ConfigMaps and Secrets.
pub(crate) trait PolicyObject:
    kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
{
    /// The resource, as an access review names it.
    const RESOURCE: &'static str;
    /// A Secret's type.
    fn secret_type(&self) -> Option<&str>;
}

impl PolicyObject for k8s_openapi::api::core::v1::ConfigMap {
    const RESOURCE: &'static str = "configmaps";
    fn secret_type(&self) -> Option<&str> {
        None
    }
}

impl PolicyObject for Secret {
    const RESOURCE: &'static str = "secrets";
    fn secret_type(&self) -> Option<&str> {
        self.type_.as_deref()
    }
}

/// Reads object `name` of kind `K` in `namespace` (`origin` in messages) under the policy (see
/// [`may_use`]): in the agent's namespace the object is read first (its labels decide);
/// elsewhere it is read only once the rule allows it. `Ok(Err(why))` when the rule refuses it;
/// `Ok(Ok(None))` when it does not exist.
pub(crate) async fn read_under_policy<K: PolicyObject>(
    client: &Client,
    policy: &SecretPolicy,
    requester: Requester<'_>,
    namespace: &str,
    name: &str,
    origin: &str,
) -> Result<Result<Option<K>, String>, ReconcileError> {
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let read = || async {
        api.get_opt(name).await.map_err(|e| ReconcileError::Kube {
            context: format!("read {origin}"),
            source: e,
        })
    };
    let found = if namespace == policy.agent_namespace {
        let found = read().await?;
        let object = found
            .as_ref()
            .map(|o| Found::new(o.meta(), o.secret_type()));
        let rule = may_use(
            client,
            policy,
            requester,
            K::RESOURCE,
            namespace,
            name,
            object,
        );
        if let Err(why) = rule.await? {
            return Ok(Err(why));
        }
        found
    } else {
        let rule = may_use(
            client,
            policy,
            requester,
            K::RESOURCE,
            namespace,
            name,
            None,
        );
        if let Err(why) = rule.await? {
            return Ok(Err(why));
        }
        read().await?
    };
    Ok(Ok(found))
}

/// What the agent read of a referenced object of its own namespace, for [`may_use`].
#[derive(Clone, Copy, Debug)]
pub struct Found<'a> {
    meta: &'a ObjectMeta,
    secret_type: Option<&'a str>,
}

impl<'a> Found<'a> {
    /// An object with `meta`; `secret_type` is a Secret's `type`.
    pub fn new(meta: &'a ObjectMeta, secret_type: Option<&'a str>) -> Self {
        Found { meta, secret_type }
    }

    /// One of the agent's own Secrets: a revision snapshot or a render key.
    fn is_agents_own(&self) -> bool {
        let labelled = |key: &str| {
            self.meta
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(key))
        };
        self.secret_type == Some(crate::revision::SECRET_TYPE)
            || labelled(crate::revision::LABEL_REVISION_OF)
            || super::render_key::is_render_key(self.meta, self.secret_type)
    }

    /// Labelled `access.pallet.dev/<name>: "true"`.
    fn labelled_for(&self, bundle_deployment: &str) -> bool {
        self.meta
            .labels
            .as_ref()
            .and_then(|l| l.get(&access_label(bundle_deployment)))
            .is_some_and(|v| v == "true")
    }
}

/// Why one of the agent's own Secrets is refused as a reference.
const AGENTS_OWN: &str =
    "is the agent's own (a revision snapshot or render key) and is never usable as a reference";

/// The reference rule (api.md, "Secret references"; docs/security.md) for an object of
/// `resource` (`secrets`, `configmaps`) that `requester` names:
/// - the agent's own Secrets (revision snapshots, render keys) never;
/// - in the agent's namespace: when the object is labelled `access.pallet.dev/<name>: "true"`
///   (`found`: what was read of it), else as in any namespace; one that does not exist (`found`
///   None) is let through, to be reported missing (or skipped when optional);
/// - in an allow-listed namespace: always;
/// - in any namespace: when the requester's ServiceAccount may `get` the object itself (a
///   SubjectAccessReview).
///
/// `Ok(Err(why))` when it may not; `why` reads after the object's kind and name.
pub async fn may_use(
    client: &Client,
    policy: &SecretPolicy,
    requester: Requester<'_>,
    resource: &str,
    namespace: &str,
    name: &str,
    found: Option<Found<'_>>,
) -> Result<Result<(), String>, ReconcileError> {
    let agents = namespace == policy.agent_namespace;
    let label = access_label(requester.bundle_deployment);
    if policy.reads_as_service_account {
        // The read is made as the ServiceAccount: the API server answers for it.
        return Ok(match found {
            Some(found) if found.is_agents_own() => Err(AGENTS_OWN.into()),
            _ => Ok(()),
        });
    }
    if agents {
        // Nothing there, nothing to protect: the caller says it is missing (and an optional
        // reference is skipped, as in any namespace).
        let Some(found) = found else {
            return Ok(Ok(()));
        };
        if found.is_agents_own() {
            return Ok(Err(AGENTS_OWN.into()));
        }
        if found.labelled_for(requester.bundle_deployment) {
            return Ok(Ok(()));
        }
    } else if policy.allowed_namespaces.iter().any(|n| n == namespace) {
        return Ok(Ok(()));
    }
    let Some(sa) = requester.service_account else {
        return Ok(Err(if agents {
            format!(
                "is in the agent's namespace and not labelled {label}=true for this BundleDeployment; label it, or name a spec.serviceAccount that may get it"
            )
        } else {
            format!(
                "is outside the agent's namespace {} and its allow-list; name a spec.serviceAccount that may get it",
                policy.agent_namespace
            )
        }));
    };
    if !service_account_may_get(client, sa, resource, namespace, name).await? {
        let unlabelled = if agents {
            format!("it is not labelled {label}=true for this BundleDeployment, and ")
        } else {
            String::new()
        };
        return Ok(Err(format!(
            "may not be read: {unlabelled}ServiceAccount {}/{} may not get it (checked with a SubjectAccessReview)",
            sa.namespace, sa.name
        )));
    }
    Ok(Ok(()))
}

async fn service_account_may_get(
    client: &Client,
    sa: &ServiceAccountReference,
    resource: &str,
    namespace: &str,
    name: &str,
) -> Result<bool, ReconcileError> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!(
                "system:serviceaccount:{}:{}",
                sa.namespace, sa.name
            )),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{}", sa.namespace),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.into()),
                verb: Some("get".into()),
                resource: Some(resource.into()),
                name: Some(name.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let answer = reviews
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| ReconcileError::Kube {
            context: "SubjectAccessReview".into(),
            source: e,
        })?;
    Ok(answer.status.map(|s| s.allowed).unwrap_or(false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A client that never answers: the cases below are decided before any request.
    fn offline() -> Client {
        Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap()
    }

    fn policy() -> SecretPolicy {
        SecretPolicy {
            agent_namespace: "pallet-system".into(),
            allowed_namespaces: vec!["shared".into()],
            ..Default::default()
        }
    }

    fn meta(labels: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        }
    }

    async fn decide(namespace: &str, found: Option<Found<'_>>) -> Result<(), String> {
        decide_under(&policy(), namespace, found).await
    }

    async fn decide_under(
        policy: &SecretPolicy,
        namespace: &str,
        found: Option<Found<'_>>,
    ) -> Result<(), String> {
        let requester = Requester {
            bundle_deployment: "web",
            service_account: None,
        };
        let client = offline();
        may_use(
            &client, policy, requester, "secrets", namespace, "creds", found,
        )
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn the_agent_namespace_is_not_a_pool() {
        // Unlabelled, or labelled for another BundleDeployment, or not "true": refused.
        for labels in [
            vec![],
            vec![("access.pallet.dev/api", "true")],
            vec![("access.pallet.dev/web", "yes")],
        ] {
            let m = meta(&labels);
            let why = decide("pallet-system", Some(Found::new(&m, Some("Opaque"))))
                .await
                .unwrap_err();
            assert!(why.contains("access.pallet.dev/web=true"), "{why}");
        }
        // Missing: let through, so that it is reported missing (or skipped when optional).
        assert!(decide("pallet-system", None).await.is_ok());
        // Labelled for this one: allowed.
        let m = meta(&[("access.pallet.dev/web", "true")]);
        assert!(decide("pallet-system", Some(Found::new(&m, None)))
            .await
            .is_ok());
        // An allow-listed namespace stays open; another needs a ServiceAccount.
        assert!(decide("shared", None).await.is_ok());
        let why = decide("team-a", None).await.unwrap_err();
        assert!(why.contains("allow-list"), "{why}");
    }

    #[tokio::test]
    async fn the_agents_own_secrets_are_never_references_even_labelled() {
        let access = ("access.pallet.dev/web", "true");
        let snapshot = meta(&[access, (crate::revision::LABEL_REVISION_OF, "web")]);
        let key = meta(&[access, (super::super::render_key::LABEL_KEY_OF, "web")]);
        let typed = meta(&[access]);
        for (m, type_) in [
            (&snapshot, None),
            (&key, None),
            (&typed, Some(crate::revision::SECRET_TYPE)),
            (&typed, Some(super::super::render_key::SECRET_TYPE)),
        ] {
            let why = decide("pallet-system", Some(Found::new(m, type_)))
                .await
                .unwrap_err();
            assert!(why.contains("the agent's own"), "{why}");
        }
    }

    #[tokio::test]
    async fn read_as_the_service_account_what_it_may_get_decides_and_labels_give_nothing() {
        let policy = SecretPolicy {
            reads_as_service_account: true,
            ..policy()
        };
        // No review is asked (the client never answers): the read made as the ServiceAccount
        // is the check, in any namespace.
        assert!(decide_under(&policy, "team-a", None).await.is_ok());
        let unlabelled = meta(&[]);
        let found = Some(Found::new(&unlabelled, None));
        assert!(decide_under(&policy, "pallet-system", found).await.is_ok());
        let snapshot = meta(&[
            ("access.pallet.dev/web", "true"),
            (crate::revision::LABEL_REVISION_OF, "web"),
        ]);
        let found = Some(Found::new(&snapshot, None));
        let why = decide_under(&policy, "pallet-system", found)
            .await
            .unwrap_err();
        assert!(why.contains("the agent's own"), "{why}");
    }

    #[test]
    fn a_default_service_account_stands_in_for_a_missing_one() {
        let spec = |sa: Option<(&str, &str)>| crate::api::BundleDeploymentSpec {
            service_account: sa.map(|(namespace, name)| ServiceAccountReference {
                namespace: namespace.into(),
                name: name.into(),
            }),
            ..serde_json::from_value(serde_json::json!({"format": "plain", "sources": []})).unwrap()
        };
        let mut policy = policy();
        assert!(policy.service_account(&spec(None)).is_none());
        policy.default_service_account = Some(ServiceAccountReference {
            namespace: "pallet-system".into(),
            name: "installer".into(),
        });
        let own = spec(Some(("team-a", "deployer")));
        assert_eq!(policy.service_account(&own).unwrap().name, "deployer");
        let none = spec(None);
        let requester = policy.requester("web", &none);
        assert_eq!(requester.service_account.unwrap().name, "installer");
    }
}
