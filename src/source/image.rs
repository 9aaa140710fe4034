//! Image sources: an OCI (or Docker v2) image whose tar layers, applied in order, make the
//! bundle tree.
//!
//! A digest reference is pinned: cached means no request at all. A tag is resolved with one
//! manifest HEAD (the registry's `Docker-Content-Digest`). Multi-platform indexes resolve to
//! linux/amd64, or to their only entry. Every blob is hashed while it downloads and compared with
//! its descriptor's digest before it is unpacked.

use std::path::PathBuf;

use futures::StreamExt;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{ImageIndexEntry, OciDescriptor, OciManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::Digest;
use tokio::io::AsyncWriteExt;

use super::http::describe;
use super::unpack::{self, Budget, Compression};
use super::{CredentialKind, Fetcher, SourceError, SourceSecrets};
use crate::api::ImageSource;

const TAR_TYPES: &[&str] = &[
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.docker.image.rootfs.diff.tar",
    "application/vnd.oci.image.layer.nondistributable.v1.tar",
];
const GZIP_TYPES: &[&str] = &[
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
];

/// Chooses linux/amd64 from an index, or its only entry.
fn choose_platform(entries: &[ImageIndexEntry]) -> Option<String> {
    let amd64 = entries.iter().find(|e| {
        e.platform
            .as_ref()
            .is_some_and(|p| p.os.to_string() == "linux" && p.architecture.to_string() == "amd64")
    });
    match (amd64, entries) {
        (Some(e), _) => Some(e.digest.clone()),
        (None, [only]) => Some(only.digest.clone()),
        _ => None,
    }
}

struct Ctx {
    client: Client,
    auth: RegistryAuth,
    cred_origin: String,
}

fn client_for(
    fetcher: &Fetcher,
    spec: &ImageSource,
    secrets: &SourceSecrets,
    registry: &str,
) -> Result<Ctx, SourceError> {
    let opts = fetcher.options();
    let mut config = ClientConfig {
        protocol: if opts.plain_http_registries.is_empty() {
            ClientProtocol::Https
        } else {
            ClientProtocol::HttpsExcept(opts.plain_http_registries.clone())
        },
        accept_invalid_certificates: spec.insecure_skip_tls_verify,
        connect_timeout: Some(opts.connect_timeout),
        read_timeout: Some(opts.timeout),
        ..Default::default()
    };
    config.platform_resolver = Some(Box::new(choose_platform));
    if let Some(pem) = &secrets.ca_pem {
        config.extra_root_certificates.push(Certificate {
            encoding: CertificateEncoding::Pem,
            data: pem.clone(),
        });
    }
    let (auth, cred_origin) = match &secrets.credentials {
        None => (RegistryAuth::Anonymous, "no credentials".to_string()),
        Some(c) => {
            let auth = match &c.kind {
                CredentialKind::Basic { username, password } => {
                    RegistryAuth::Basic(username.clone(), password.clone())
                }
                CredentialKind::Token(t) => RegistryAuth::Bearer(t.clone()),
                CredentialKind::DockerConfig(cfg) => match cfg.for_registry(registry) {
                    Some((u, p)) => RegistryAuth::Basic(u.to_string(), p.to_string()),
                    None => {
                        return Err(SourceError::InvalidCredentials {
                            origin: c.origin.clone(),
                            reason: format!("the docker config has no entry for {registry}"),
                        })
                    }
                },
                CredentialKind::SshKey { .. } => {
                    return Err(SourceError::InvalidCredentials {
                        origin: c.origin.clone(),
                        reason: "an image source takes a dockerconfigjson or basic-auth secret"
                            .into(),
                    })
                }
            };
            (auth, c.origin.clone())
        }
    };
    Ok(Ctx {
        client: Client::new(config),
        auth,
        cred_origin,
    })
}

fn map_oci(what: &str, cred_origin: &str, e: OciDistributionError) -> SourceError {
    let unauthorized = |detail: String| SourceError::Unauthorized {
        what: what.to_string(),
        credentials: cred_origin.to_string(),
        detail,
    };
    match e {
        OciDistributionError::ImageManifestNotFoundError(_) => SourceError::NotFound {
            what: what.to_string(),
        },
        OciDistributionError::UnauthorizedError { .. } => unauthorized("unauthorized".into()),
        OciDistributionError::AuthenticationFailure(m) => unauthorized(m),
        OciDistributionError::RegistryError { envelope, .. } => {
            let codes: Vec<_> = envelope.errors.iter().map(|e| &e.code).collect();
            let detail = envelope
                .errors
                .iter()
                .map(|e| e.message.clone())
                .collect::<Vec<_>>()
                .join("; ");
            if codes.iter().any(|c| {
                matches!(
                    c,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::NotFound
                        | OciErrorCode::BlobUnknown
                )
            }) {
                SourceError::NotFound {
                    what: what.to_string(),
                }
            } else if codes
                .iter()
                .any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
            {
                unauthorized(detail)
            } else {
                SourceError::Server {
                    what: what.to_string(),
                    detail,
                }
            }
        }
        OciDistributionError::ServerError { code, message, .. } => match code {
            404 => SourceError::NotFound {
                what: what.to_string(),
            },
            401 | 403 => unauthorized(message),
            _ => SourceError::Server {
                what: what.to_string(),
                detail: format!("{code}: {message}"),
            },
        },
        OciDistributionError::RequestError(e) => SourceError::Unreachable {
            what: what.to_string(),
            detail: describe(&e.without_url()),
        },
        OciDistributionError::DigestError(e) => SourceError::DigestMismatch {
            what: what.to_string(),
            expected: "the digest it was referenced by".into(),
            actual: e.to_string(),
        },
        OciDistributionError::ImageIndexParsingNoPlatformResolverError => SourceError::NotABundle {
            what: what.to_string(),
            reason: "the image index has no linux/amd64 entry and more than one entry".into(),
        },
        other => SourceError::Server {
            what: what.to_string(),
            detail: describe(&other),
        },
    }
}

/// Resolves a reference to its digest: free for a digest reference, one HEAD for a tag.
async fn resolve(ctx: &Ctx, reference: &Reference, what: &str) -> Result<String, SourceError> {
    if let Some(d) = reference.digest() {
        return Ok(d.to_string());
    }
    ctx.client
        .fetch_manifest_digest(reference, &ctx.auth)
        .await
        .map_err(|e| map_oci(what, &ctx.cred_origin, e))
}

/// Resolves and fetches an image source; returns the resolved digest reference and the cached
/// content.
pub(crate) async fn fetch(
    fetcher: &Fetcher,
    spec: &ImageSource,
    secrets: &SourceSecrets,
) -> Result<(String, PathBuf), SourceError> {
    let reference: Reference = spec
        .reference
        .parse()
        .map_err(|e| SourceError::Invalid(format!("image ref {}: {e}", spec.reference)))?;
    let what = format!("image {}", spec.reference);
    let registry = reference.resolve_registry().to_string();
    let repo = reference.repository().to_string();
    let pinned_key = |digest: &str| format!("image-{}", digest.replace(':', "-"));

    // Pinned and cached: no client, no request.
    if let Some(d) = reference.digest() {
        if let Some(path) = fetcher.cache().lookup(&pinned_key(d)) {
            return Ok((format!("{registry}/{repo}@{d}"), path));
        }
    }
    let ctx = client_for(fetcher, spec, secrets, &registry)?;
    let digest = resolve(&ctx, &reference, &what).await?;
    let resolved = format!("{registry}/{repo}@{digest}");
    let key = pinned_key(&digest);
    let limits = fetcher.options().limits;
    let by_digest = Reference::with_digest(registry.clone(), repo.clone(), digest.clone());
    let cache = fetcher.cache().clone();
    let scratch_cache = cache.clone();
    let path = cache
        .get_or_populate(&key, |tree| async move {
            pull_into(&ctx, &by_digest, &what, tree, limits, &scratch_cache).await
        })
        .await?;
    Ok((resolved, path))
}

async fn pull_into(
    ctx: &Ctx,
    reference: &Reference,
    what: &str,
    tree: PathBuf,
    limits: unpack::Limits,
    cache: &super::Cache,
) -> Result<(), SourceError> {
    let err = |e| map_oci(what, &ctx.cred_origin, e);
    // pull_image_manifest follows an index through the platform resolver and checks the
    // manifest against the digest it was fetched by.
    let (manifest, _digest) = match ctx.client.pull_manifest(reference, &ctx.auth).await {
        Ok((OciManifest::Image(m), d)) => (m, d),
        Ok((OciManifest::ImageIndex(index), _)) => {
            let chosen =
                choose_platform(&index.manifests).ok_or_else(|| SourceError::NotABundle {
                    what: what.to_string(),
                    reason: "the image index has no linux/amd64 entry and more than one entry"
                        .into(),
                })?;
            let platform_ref = Reference::with_digest(
                reference.resolve_registry().to_string(),
                reference.repository().to_string(),
                chosen,
            );
            match ctx.client.pull_manifest(&platform_ref, &ctx.auth).await {
                Ok((OciManifest::Image(m), d)) => (m, d),
                Ok((OciManifest::ImageIndex(_), _)) => {
                    return Err(SourceError::NotABundle {
                        what: what.to_string(),
                        reason: "an image index nested in an image index".into(),
                    })
                }
                Err(e) => return Err(err(e)),
            }
        }
        Err(e) => return Err(err(e)),
    };
    if manifest.layers.is_empty() {
        return Err(SourceError::NotABundle {
            what: what.to_string(),
            reason: "the image has no layers".into(),
        });
    }
    let mut plan = Vec::new();
    for layer in &manifest.layers {
        let compression = if TAR_TYPES.contains(&layer.media_type.as_str()) {
            Compression::None
        } else if GZIP_TYPES.contains(&layer.media_type.as_str()) {
            Compression::Gzip
        } else {
            return Err(SourceError::NotABundle {
                what: what.to_string(),
                reason: format!(
                    "layer {} has media type {}, not a tar or tar+gzip layer",
                    layer.digest, layer.media_type
                ),
            });
        };
        plan.push((layer.clone(), compression));
    }
    let scratch = cache.scratch_dir()?;
    let result = download_and_apply(ctx, reference, what, &plan, &scratch, tree, limits).await;
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

async fn download_and_apply(
    ctx: &Ctx,
    reference: &Reference,
    what: &str,
    plan: &[(OciDescriptor, Compression)],
    scratch: &std::path::Path,
    tree: PathBuf,
    limits: unpack::Limits,
) -> Result<(), SourceError> {
    // Download every layer (verifying its digest) before applying any: layers must be applied in
    // order, and nothing unverified should reach the unpacker.
    let mut files = Vec::new();
    for (i, (layer, compression)) in plan.iter().enumerate() {
        let file = scratch.join(format!("layer-{i}"));
        download_blob(ctx, reference, what, layer, &file, limits.max_total_bytes).await?;
        files.push((file, *compression));
    }
    tokio::task::spawn_blocking(move || {
        let mut budget = Budget::new(limits);
        for (file, compression) in files {
            let f = std::fs::File::open(&file).map_err(|e| SourceError::io("read layer", e))?;
            unpack::unpack_tar(f, compression, &tree, &mut budget, true)?;
        }
        Ok(())
    })
    .await
    .map_err(|e| SourceError::io("unpack task", std::io::Error::other(e.to_string())))?
}

async fn download_blob(
    ctx: &Ctx,
    reference: &Reference,
    what: &str,
    layer: &OciDescriptor,
    file: &std::path::Path,
    max_bytes: u64,
) -> Result<(), SourceError> {
    let (algorithm, expected) = layer.digest.split_once(':').unwrap_or(("", ""));
    if algorithm != "sha256" {
        return Err(SourceError::NotABundle {
            what: what.to_string(),
            reason: format!("layer digest {} is not sha256", layer.digest),
        });
    }
    let mut stream = ctx
        .client
        .pull_blob_stream(reference, layer)
        .await
        .map_err(|e| map_oci(what, &ctx.cred_origin, e))?;
    let mut out = tokio::fs::File::create(file)
        .await
        .map_err(|e| SourceError::io("create layer file", e))?;
    let mut hasher = sha2::Sha256::new();
    let mut total = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| SourceError::Unreachable {
            what: what.to_string(),
            detail: describe(&e),
        })?;
        total += chunk.len() as u64;
        if total > max_bytes {
            return Err(SourceError::LimitExceeded {
                what: format!("size of layer {}", layer.digest),
                limit: max_bytes,
            });
        }
        hasher.update(&chunk);
        out.write_all(&chunk)
            .await
            .map_err(|e| SourceError::io("write layer file", e))?;
    }
    out.flush()
        .await
        .map_err(|e| SourceError::io("write layer file", e))?;
    let actual = super::hex(&hasher.finalize());
    if actual != expected {
        return Err(SourceError::DigestMismatch {
            what: format!("layer of {what}"),
            expected: layer.digest.clone(),
            actual: format!("sha256:{actual}"),
        });
    }
    Ok(())
}
