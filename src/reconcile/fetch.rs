//! Phase 1, fetch (I/O): read each source's Secrets under the secret-namespace policy, fetch every
//! source through the cache, and assemble them into one bundle tree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::Client;

use super::ReconcileError;
use crate::api::{BundleDeployment, SecretReference, ServiceAccountReference, Source};
use crate::source::{assemble, Credentials, Fetched, Fetcher, SourceSecrets};

/// Where Secrets named by sources may be read from (api.md, "Secret references").
#[derive(Clone, Debug)]
pub struct SecretPolicy {
    /// The agent's own namespace: the default for references without a namespace, always allowed.
    pub agent_namespace: String,
    /// Other namespaces any BundleDeployment may read Secrets from (the agent's allow-list flag).
    pub allowed_namespaces: Vec<String>,
}

/// The fetched sources and the assembled tree. The tree is scratch space: delete it when done.
pub struct FetchedBundle {
    /// Every source resolved, in spec order.
    pub sources: Vec<Fetched>,
    /// The assembled tree.
    pub tree: PathBuf,
}

/// Fetches every source of `bd` and assembles them under a fresh scratch directory.
pub async fn fetch_bundle(
    client: &Client,
    fetcher: &Fetcher,
    policy: &SecretPolicy,
    bd: &BundleDeployment,
) -> Result<FetchedBundle, ReconcileError> {
    let fetched = fetch_sources(client, fetcher, policy, bd).await?;
    let tree = fetcher.cache().scratch_dir()?;
    if let Err(e) = assemble(&fetched, &tree) {
        remove_tree(&tree);
        return Err(e.into());
    }
    Ok(FetchedBundle {
        sources: fetched,
        tree,
    })
}

/// Fetches every source of `bd` (reading the Secrets they name) into the cache, in spec order.
pub async fn fetch_sources(
    client: &Client,
    fetcher: &Fetcher,
    policy: &SecretPolicy,
    bd: &BundleDeployment,
) -> Result<Vec<Fetched>, ReconcileError> {
    let mut fetched = Vec::with_capacity(bd.spec.sources.len());
    for source in &bd.spec.sources {
        let secrets =
            source_secrets(client, policy, bd.spec.service_account.as_ref(), source).await?;
        fetched.push(fetcher.fetch(source, &secrets).await?);
    }
    Ok(fetched)
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
    service_account: Option<&ServiceAccountReference>,
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
        let (origin, secret) = read_secret(client, policy, service_account, &auth.secret).await?;
        let data = secret_data(&secret);
        secrets.credentials = Some(Credentials::from_secret_data(
            &origin,
            secret.type_.as_deref(),
            &data,
        )?);
    }
    if let Some(reference) = ca {
        let (origin, secret) = read_secret(client, policy, service_account, reference).await?;
        let pem = secret_data(&secret)
            .remove("ca.crt")
            .ok_or_else(|| ReconcileError::Secret {
                reason: "SecretKeyMissing",
                message: format!("{origin} has no key ca.crt"),
            })?;
        secrets.ca_pem = Some(pem);
    }
    Ok(secrets)
}

fn secret_data(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
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

/// Reads a Secret under the policy: the agent's namespace and allow-listed namespaces always;
/// another namespace only when the BundleDeployment's ServiceAccount may `get` that Secret.
async fn read_secret(
    client: &Client,
    policy: &SecretPolicy,
    service_account: Option<&ServiceAccountReference>,
    reference: &SecretReference,
) -> Result<(String, Secret), ReconcileError> {
    let namespace = reference
        .namespace
        .as_deref()
        .unwrap_or(&policy.agent_namespace);
    let origin = format!("secret {namespace}/{}", reference.name);
    let trusted = namespace == policy.agent_namespace
        || policy.allowed_namespaces.iter().any(|n| n == namespace);
    if !trusted {
        let Some(sa) = service_account else {
            return Err(ReconcileError::Secret {
                reason: "SecretNotAllowed",
                message: format!(
                    "{origin} is outside the agent's namespace {} and its allow-list; name a spec.serviceAccount that may get it",
                    policy.agent_namespace
                ),
            });
        };
        if !service_account_may_get(client, sa, namespace, &reference.name).await? {
            return Err(ReconcileError::Secret {
                reason: "SecretNotAllowed",
                message: format!(
                    "{origin}: ServiceAccount {}/{} may not get it (checked with a SubjectAccessReview)",
                    sa.namespace, sa.name
                ),
            });
        }
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match secrets.get_opt(&reference.name).await {
        Ok(Some(secret)) => Ok((origin, secret)),
        Ok(None) => Err(ReconcileError::Secret {
            reason: "SecretNotFound",
            message: format!("{origin} not found"),
        }),
        Err(e) => Err(ReconcileError::Kube {
            context: format!("read {origin}"),
            source: e,
        }),
    }
}

async fn service_account_may_get(
    client: &Client,
    sa: &ServiceAccountReference,
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
                resource: Some("secrets".into()),
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
