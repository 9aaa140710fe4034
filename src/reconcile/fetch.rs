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
use std::time::Instant;

use super::fetch_pool::FetchState;
use crate::source::{assemble, describe_source, Credentials, Fetched, Fetcher, SourceSecrets};

/// Where Secrets named by sources may be read from (api.md, "Secret references").
#[derive(Clone, Debug)]
pub struct SecretPolicy {
    /// The agent's own namespace: the default for references without a namespace, always allowed.
    pub agent_namespace: String,
    /// Other namespaces any BundleDeployment may read Secrets from (the agent's allow-list flag).
    pub allowed_namespaces: Vec<String>,
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
    for (index, source) in bd.spec.sources.iter().enumerate() {
        if !force_poll {
            if let Some(polled) = ctx.polls.fresh(uid, index, source, Instant::now()) {
                fetched.push(polled);
                continue;
            }
        }
        let sa = bd.spec.service_account.as_ref();
        let secrets = source_secrets(&ctx.client, &ctx.secret_policy, sa, source).await?;
        let started = Instant::now();
        match ctx
            .fetches
            .fetch(&ctx.fetcher, bd, index, source, secrets)
            .await
        {
            FetchState::Done(result) => {
                let one = result?;
                ctx.polls.record(uid, index, source, &one, started);
                fetched.push(one);
            }
            FetchState::Pending { since } => pending.push(format!(
                "{} for {} s",
                describe_source(source),
                since.elapsed().as_secs()
            )),
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

/// Reads a Secret under the policy: the agent's namespace and allow-listed namespaces always;
/// another namespace only when the BundleDeployment's ServiceAccount may `get` that Secret.
pub(crate) async fn read_secret(
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
    if let Err(why) = may_read(
        client,
        policy,
        service_account,
        "secrets",
        namespace,
        &reference.name,
    )
    .await?
    {
        return Err(ReconcileError::Secret {
            reason: "SecretNotAllowed",
            message: format!("{origin} {why}"),
        });
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

/// The secret-namespace rule (api.md, "Secret references") for an object of `resource`
/// (`secrets`, `configmaps`) named for a BundleDeployment: the agent's namespace and the
/// allow-listed ones always; another namespace only when the BundleDeployment's ServiceAccount
/// may `get` the object itself (a SubjectAccessReview). `Ok(Err(why))` when it may not; `why`
/// reads after the object's kind and name.
pub async fn may_read(
    client: &Client,
    policy: &SecretPolicy,
    service_account: Option<&ServiceAccountReference>,
    resource: &str,
    namespace: &str,
    name: &str,
) -> Result<Result<(), String>, ReconcileError> {
    let trusted = namespace == policy.agent_namespace
        || policy.allowed_namespaces.iter().any(|n| n == namespace);
    if trusted {
        return Ok(Ok(()));
    }
    let Some(sa) = service_account else {
        return Ok(Err(format!(
            "is outside the agent's namespace {} and its allow-list; name a spec.serviceAccount that may get it",
            policy.agent_namespace
        )));
    };
    if !service_account_may_get(client, sa, resource, namespace, name).await? {
        return Ok(Err(format!(
            "may not be read: ServiceAccount {}/{} may not get it (checked with a SubjectAccessReview)",
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
