//! Image sources: an OCI artifact in a registry whose layers make the bundle tree: a container
//! image (tar layers applied in order), a Helm chart pushed by `helm push`, a Flux or ORAS
//! artifact ([`super::oci_layers`] says how each is read). Charts of `oci://` chart repositories
//! are fetched here too ([`fetch_helm_oci`]).
//!
//! A digest reference is pinned: cached means no request at all. A tag is resolved with one
//! manifest HEAD (the registry's `Docker-Content-Digest`); a semver range with the repository's
//! tag list (paginated with `n`/`last`) and then one HEAD of the chosen tag. Multi-platform
//! indexes resolve to linux/amd64, or to their only entry. Every blob is hashed while it
//! downloads and compared with its descriptor's digest before it is unpacked.

use std::path::PathBuf;

use futures::StreamExt;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{ImageIndexEntry, OciDescriptor, OciManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::Digest;
use tokio::io::AsyncWriteExt;

use pallet_formats::semver::{self, Range};

use super::budget::{Cancel, TOTAL_BUDGET};
use super::http::describe;
use super::oci_layers::{self, Downloaded, LayerDesc};
use super::verify::{cosign, VerifyMaterial};
use super::{CredentialKind, Fetcher, SourceError, SourceSecrets};
use crate::api::{HelmRepositorySource, ImageSource, VerifiedSignature};

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
    insecure_skip_tls_verify: bool,
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
        accept_invalid_certificates: insecure_skip_tls_verify,
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
    let client = fetcher
        .registry_clients()
        .get((insecure_skip_tls_verify, &secrets.ca_pem, &auth), || {
            Client::new(config)
        });
    Ok(Ctx {
        client,
        auth,
        cred_origin,
    })
}

/// Registry clients by what they were made with (TLS settings and credentials), reused across
/// fetches: making one loads and parses the platform's root certificates (a few milliseconds and
/// about 140 allocations per certificate), which at a thousand bundles was most of a fetch's
/// cost. Credentials are part of the key, so a bearer token a client caches for one set of
/// credentials is never offered on behalf of another.
#[derive(Clone, Default)]
pub(crate) struct RegistryClients {
    clients: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<u64, Client>>>,
}

/// More distinct clients than this (rotated credentials, many CAs): start over.
const REGISTRY_CLIENTS_KEPT: usize = 64;

impl RegistryClients {
    fn get(
        &self,
        (insecure, ca_pem, auth): (bool, &Option<Vec<u8>>, &RegistryAuth),
        make: impl FnOnce() -> Client,
    ) -> Client {
        use std::hash::{BuildHasher, Hash, Hasher};
        // The process's random SipHash keys: a collision cannot be aimed at.
        static KEYS: std::sync::OnceLock<std::collections::hash_map::RandomState> =
            std::sync::OnceLock::new();
        let mut hasher = KEYS.get_or_init(Default::default).build_hasher();
        insecure.hash(&mut hasher);
        ca_pem.hash(&mut hasher);
        match auth {
            RegistryAuth::Anonymous => 0u8.hash(&mut hasher),
            RegistryAuth::Basic(user, password) => (1u8, user, password).hash(&mut hasher),
            RegistryAuth::Bearer(token) => (2u8, token).hash(&mut hasher),
        }
        let key = hasher.finish();
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = clients.get(&key) {
            return client.clone();
        }
        if clients.len() >= REGISTRY_CLIENTS_KEPT {
            clients.clear();
        }
        clients.entry(key).or_insert_with(make).clone()
    }
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

/// Tags asked for per page of the tag list; a registry may return fewer (its own cap).
const TAGS_PAGE: usize = 1000;
/// Registries cap pages at their own size (100 is common) and oci-client does not expose the
/// `Link` header that says more follow: a page this long or longer may not be the last, so the
/// next is asked for; a shorter one is the end.
const SMALLEST_PAGE_CAP: usize = 100;
/// Pages of the tag list read at most (a registry that keeps answering is cut off there).
const MAX_TAG_PAGES: usize = 100;

/// Every tag of the repository, following the `n`/`last` pagination of the distribution API.
async fn list_all_tags(
    ctx: &Ctx,
    reference: &Reference,
    what: &str,
) -> Result<Vec<String>, SourceError> {
    let mut tags: Vec<String> = Vec::new();
    let mut last: Option<String> = None;
    for _ in 0..MAX_TAG_PAGES {
        let page = ctx
            .client
            .list_tags(reference, &ctx.auth, Some(TAGS_PAGE), last.as_deref())
            .await
            .map_err(|e| map_oci(what, &ctx.cred_origin, e))?;
        let next = page.tags.last().cloned();
        let done = is_last_page(page.tags.len(), next.as_deref(), last.as_deref());
        tags.extend(page.tags);
        if done {
            break;
        }
        last = next;
    }
    tags.sort();
    tags.dedup();
    Ok(tags)
}

/// Whether a page of `len` tags ending at `next`, asked for after `last`, ends the list: a page
/// below any registry's cap is the last, and a registry that ignores `last` repeats itself.
fn is_last_page(len: usize, next: Option<&str>, last: Option<&str>) -> bool {
    len < SMALLEST_PAGE_CAP || next.is_none() || next == last
}

/// A tag as the version it stands for: OCI tags cannot hold `+`, so `helm push` writes build
/// metadata after `_` (`1.2.3+build` is tag `1.2.3_build`).
pub fn tag_to_version(tag: &str) -> String {
    tag.replace('_', "+")
}

/// A chart version as its tag (see [`tag_to_version`]).
pub fn version_to_tag(version: &str) -> String {
    version.replace('+', "_")
}

/// The newest tag whose version satisfies `range` (tags that are not versions are skipped), or
/// `None`.
pub fn newest_tag<'a>(range: &Range, tags: &'a [String]) -> Option<&'a str> {
    let versions: Vec<String> = tags.iter().map(|t| tag_to_version(t)).collect();
    let (best, _) = range.newest(versions.iter().map(String::as_str))?;
    let index = versions.iter().position(|v| v.as_str() == best)?;
    Some(tags[index].as_str())
}

/// "0.1.0, 0.2.0, … (12 tags)": the tags a failed range saw, shortened for a condition.
fn sample_tags(tags: &[String]) -> String {
    const SHOWN: usize = 10;
    if tags.is_empty() {
        return "the repository has no tags".into();
    }
    // The newest-looking ones are the most useful: the end of the sorted list.
    let start = tags.len().saturating_sub(SHOWN);
    let shown = tags[start..].join(", ");
    if start == 0 {
        format!("tags: {shown}")
    } else {
        format!("tags: …, {shown} ({} tags)", tags.len())
    }
}

/// Whether an image reference names a tag or digest (its last path segment has `:`, or it has
/// `@`); `semver` takes a bare repository.
fn has_tag_or_digest(reference: &str) -> bool {
    reference.contains('@')
        || reference
            .rsplit('/')
            .next()
            .is_some_and(|s| s.contains(':'))
}

/// What to fetch from a repository.
enum Selector {
    /// A tag or digest reference, as parsed.
    Exact(Reference),
    /// The newest tag satisfying a range.
    Range(Range),
}

/// A source resolved and fetched from a registry.
pub(crate) struct Pulled {
    /// The digest reference it resolved to.
    pub resolved: String,
    /// The cached tree.
    pub path: PathBuf,
    /// The tag a range chose.
    pub tag: Option<String>,
    /// Who signed it, for a source with `verify`.
    pub verified: Option<VerifiedSignature>,
}

/// Resolves and fetches an image source; returns the resolved digest reference, the cached
/// content and, for a `semver` range, the tag chosen.
pub(crate) async fn fetch(
    fetcher: &Fetcher,
    spec: &ImageSource,
    secrets: &SourceSecrets,
    cancel: &Cancel,
) -> Result<Pulled, SourceError> {
    let what = format!("image {}", spec.reference);
    let reference = super::oci_reference::parse(&spec.reference)
        .map_err(|e| SourceError::Invalid(format!("image ref {}: {e}", spec.reference)))?;
    let selector = match &spec.semver {
        None => Selector::Exact(reference.clone()),
        Some(range) => {
            if has_tag_or_digest(&spec.reference) {
                return Err(SourceError::Invalid(format!(
                    "image ref {} has a tag or digest; with semver it names the repository alone",
                    spec.reference
                )));
            }
            Selector::Range(super::parse_range(&what, range)?)
        }
    };
    let pull = Pull {
        fetcher,
        secrets,
        insecure_skip_tls_verify: spec.insecure_skip_tls_verify,
        what: &what,
        expect_chart: false,
        cancel,
    };
    fetch_from_registry(&pull, &reference, selector).await
}

/// A chart of an `oci://` chart repository, fetched.
pub(crate) struct HelmOciChart {
    /// `oci://host/path/chart version <v>` (or `@sha256:…` when pinned by digest only).
    pub reference: String,
    /// The digest reference of the chart's manifest.
    pub resolved: String,
    /// The cached chart, `Chart.yaml` at the root.
    pub path: PathBuf,
    /// The chart version chosen (from the tag, `_` read as `+`).
    pub version: Option<String>,
    /// Who signed it, for a source with `verify`.
    pub verified: Option<VerifiedSignature>,
}

/// Fetches a chart from an `oci://` chart repository: the chart is the repository
/// `<url without oci://>/<chart>`; `digest` pins its manifest (cached: no request), an exact
/// `version` is its tag (`+` written `_`), a range (default `*`) chooses the newest matching tag.
/// The artifact must be a Helm chart.
pub(crate) async fn fetch_helm_oci(
    fetcher: &Fetcher,
    spec: &HelmRepositorySource,
    secrets: &SourceSecrets,
    cancel: &Cancel,
) -> Result<HelmOciChart, SourceError> {
    let base = spec
        .url
        .strip_prefix("oci://")
        .ok_or_else(|| SourceError::Invalid(format!("{} is not an oci:// URL", spec.url)))?
        .trim_end_matches('/');
    let chart_repo = format!("{base}/{}", spec.chart);
    let shown = format!("oci://{chart_repo}");
    let what = format!("chart {shown}");
    let version = spec.version.as_deref().map(str::trim);
    let exact = version.filter(|v| !semver::is_range(v));
    let parse = |text: &str| -> Result<Reference, SourceError> {
        super::oci_reference::parse(text)
            .map_err(|e| SourceError::Invalid(format!("{what}: {text}: {e}")))
    };
    let selector = match (&spec.digest, exact, version) {
        (Some(digest), _, _) => Selector::Exact(parse(&format!("{chart_repo}@{digest}"))?),
        (None, Some(v), _) => {
            let v = v.strip_prefix('=').unwrap_or(v).trim();
            Selector::Exact(parse(&format!("{chart_repo}:{}", version_to_tag(v)))?)
        }
        (None, None, range) => Selector::Range(super::parse_range(&what, range.unwrap_or("*"))?),
    };
    let repo_ref = parse(&chart_repo)?;
    let pull = Pull {
        fetcher,
        secrets,
        insecure_skip_tls_verify: spec.insecure_skip_tls_verify,
        what: &what,
        expect_chart: true,
        cancel,
    };
    let pulled = fetch_from_registry(&pull, &repo_ref, selector).await?;
    let version = match (&pulled.tag, exact) {
        (Some(tag), _) => Some(tag_to_version(tag)),
        (None, Some(v)) => Some(v.strip_prefix('=').unwrap_or(v).trim().to_string()),
        (None, None) => None,
    };
    let reference = match (&version, &spec.digest) {
        (Some(v), _) => format!("{shown} version {v}"),
        (None, Some(d)) => format!("{shown}@{d}"),
        (None, None) => shown,
    };
    Ok(HelmOciChart {
        reference,
        resolved: pulled.resolved,
        path: pulled.path,
        version,
        verified: pulled.verified,
    })
}

/// Refuses a registry whose host resolves to an address the egress policy refuses. The OCI
/// client resolves names itself, so the check is made here, just before it connects.
async fn check_registry(fetcher: &Fetcher, registry: &str) -> Result<(), SourceError> {
    let url = url::Url::parse(&format!("https://{registry}/"))
        .map_err(|e| SourceError::Invalid(format!("registry {registry:?}: {e}")))?;
    let host = url.host_str().unwrap_or_default();
    fetcher
        .options()
        .egress
        .check_host(host, url.port().unwrap_or(443))
        .await
        .map_err(|refused| SourceError::Refused(format!("registry {registry}: {refused}")))
}

/// What a pull from a registry is for and with.
struct Pull<'a> {
    fetcher: &'a Fetcher,
    secrets: &'a SourceSecrets,
    insecure_skip_tls_verify: bool,
    /// How the source is named in messages.
    what: &'a str,
    /// A chart repository: anything but a Helm chart is refused.
    expect_chart: bool,
    /// Raised when the fetch ends; the unpack stops with it.
    cancel: &'a Cancel,
}

async fn fetch_from_registry(
    pull: &Pull<'_>,
    reference: &Reference,
    selector: Selector,
) -> Result<Pulled, SourceError> {
    let Pull {
        fetcher,
        secrets,
        insecure_skip_tls_verify,
        what,
        expect_chart,
        cancel,
    } = *pull;
    let registry = reference.resolve_registry().to_string();
    let repo = reference.repository().to_string();
    // A chart repository refuses what an image source takes, so their cache entries differ.
    let prefix = if expect_chart { "ocichart" } else { "image" };
    let pinned_key = |digest: &str| format!("{prefix}-{}", digest.replace(':', "-"));

    // Pinned and cached (and verified before, when it must be): no client, no request.
    if let Selector::Exact(r) = &selector {
        if let Some(d) = r.digest() {
            let resolved = format!("{registry}/{repo}@{d}");
            let verified = match &secrets.verify {
                None => Some(None),
                Some(material) => fetcher.verified().get(material, &resolved).map(Some),
            };
            if let (Some(verified), Some(path)) = (verified, fetcher.cache().lookup(&pinned_key(d)))
            {
                return Ok(Pulled {
                    resolved,
                    path,
                    tag: None,
                    verified,
                });
            }
        }
    }
    check_registry(fetcher, &registry).await?;
    let ctx = client_for(fetcher, insecure_skip_tls_verify, secrets, &registry)?;
    let (exact, tag) = match selector {
        Selector::Exact(r) => (r, None),
        Selector::Range(range) => {
            let tags = list_all_tags(&ctx, reference, what).await?;
            let Some(tag) = newest_tag(&range, &tags) else {
                return Err(SourceError::NoMatchingVersion {
                    what: what.to_string(),
                    range: range.to_string(),
                    available: sample_tags(&tags),
                });
            };
            let tag = tag.to_string();
            let r = Reference::with_tag(registry.clone(), repo.clone(), tag.clone());
            (r, Some(tag))
        }
    };
    let digest = resolve(&ctx, &exact, what).await?;
    let resolved = format!("{registry}/{repo}@{digest}");
    // Verified before a byte of it is downloaded; nothing unverified reaches the cache.
    let verified = match &secrets.verify {
        None => None,
        Some(material) => {
            let what = match &tag {
                Some(tag) => format!("{what} (tag {tag})"),
                None => what.to_string(),
            };
            let signed = Signed {
                ctx: &ctx,
                registry: &registry,
                repo: &repo,
                digest: &digest,
                resolved: &resolved,
                what: &what,
            };
            Some(verify_signed(fetcher, material, &signed).await?)
        }
    };
    let key = pinned_key(&digest);
    let limits = fetcher.options().limits;
    let by_digest = Reference::with_digest(registry.clone(), repo.clone(), digest.clone());
    let cache = fetcher.cache().clone();
    let scratch_cache = cache.clone();
    let what_owned = what.to_string();
    let cancel = cancel.clone();
    let path = cache
        .get_or_populate(&key, |tree| async move {
            let target = PullTarget {
                tree,
                limits,
                cache: &scratch_cache,
                expect_chart,
                cancel,
            };
            pull_into(&ctx, &by_digest, &what_owned, target).await
        })
        .await?;
    Ok(Pulled {
        resolved,
        path,
        tag,
        verified,
    })
}

/// An artifact whose signatures are to be checked.
struct Signed<'a> {
    ctx: &'a Ctx,
    registry: &'a str,
    repo: &'a str,
    digest: &'a str,
    /// `registry/repo@digest`, the memo's key.
    resolved: &'a str,
    what: &'a str,
}

/// The artifact's cosign signer under `material`: remembered, or verified now and remembered.
async fn verify_signed(
    fetcher: &Fetcher,
    material: &VerifyMaterial,
    signed: &Signed<'_>,
) -> Result<VerifiedSignature, SourceError> {
    if let Some(known) = fetcher.verified().get(material, signed.resolved) {
        return Ok(known);
    }
    let policy = cosign::CosignPolicy::from_material(material)?;
    let map_error = |e| map_oci(signed.what, &signed.ctx.cred_origin, e);
    let target = cosign::Target {
        client: &signed.ctx.client,
        auth: &signed.ctx.auth,
        registry: signed.registry,
        repository: signed.repo,
        digest: signed.digest,
        what: signed.what,
        map_error: &map_error,
    };
    let started = std::time::Instant::now();
    let signer = cosign::verify(&target, &policy).await?;
    tracing::info!(source = %signed.what, digest = %signed.digest, signer = %signer.summary(), took_ms = started.elapsed().as_millis() as u64, "verified");
    fetcher
        .verified()
        .record(material, signed.resolved, &signer);
    Ok(signer)
}

/// Where a pulled artifact goes and under which limits.
struct PullTarget<'a> {
    tree: PathBuf,
    limits: super::Limits,
    cache: &'a super::Cache,
    expect_chart: bool,
    cancel: Cancel,
}

async fn pull_into(
    ctx: &Ctx,
    reference: &Reference,
    what: &str,
    target: PullTarget<'_>,
) -> Result<(), SourceError> {
    let PullTarget {
        tree,
        limits,
        cache,
        expect_chart,
        cancel,
    } = target;
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
    let layers: Vec<LayerDesc> = manifest
        .layers
        .iter()
        .map(|l| LayerDesc {
            media_type: l.media_type.clone(),
            digest: l.digest.clone(),
            annotations: l.annotations.clone().unwrap_or_default(),
        })
        .collect();
    let config_type = manifest.config.media_type.as_str();
    let types = oci_layers::describe_media_types(config_type, &layers);
    let plan = oci_layers::plan_layers(config_type, &layers, expect_chart).map_err(|reason| {
        SourceError::NotABundle {
            what: what.to_string(),
            reason,
        }
    })?;
    let scratch = cache.scratch_dir()?;
    let result = async {
        // Download every layer (verifying its digest) before applying any: layers must be
        // applied in order, and nothing unverified should reach the unpacker.
        let mut downloaded = Vec::new();
        for (i, usage) in plan {
            let file = scratch.join(format!("layer-{i}"));
            let descriptor = &manifest.layers[i];
            download_blob(
                ctx,
                reference,
                what,
                descriptor,
                &file,
                limits.max_total_bytes,
            )
            .await?;
            downloaded.push(Downloaded {
                file,
                usage,
                layer: layers[i].clone(),
            });
        }
        let what = what.to_string();
        let allowance = cache.unpack_allowance();
        tokio::task::spawn_blocking(move || {
            let mut budget = super::Budget::drawing_on(limits, &cancel, Some(allowance));
            oci_layers::apply_layers(downloaded, &tree, &mut budget, &what, &types)
        })
        .await
        .map_err(|e| SourceError::io("unpack task", std::io::Error::other(e.to_string())))?
    }
    .await;
    let _ = std::fs::remove_dir_all(&scratch);
    result
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
            return Err(SourceError::limit(
                format!("layer {}", layer.digest),
                format!("more than {max_bytes} bytes ({total} received)"),
                TOTAL_BUDGET,
                format!("{max_bytes} bytes"),
            ));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(list: &[&str]) -> Vec<String> {
        list.iter().map(|t| t.to_string()).collect()
    }

    #[test]
    fn newest_tag_reads_helm_build_metadata_and_skips_pre_releases() {
        let seen = tags(&["0.1.0", "0.2.0_build.1", "0.3.0-rc.1", "latest", "1.0.0"]);
        let range = Range::parse(">=0.1.0 <1").unwrap();
        assert_eq!(newest_tag(&range, &seen), Some("0.2.0_build.1"));
        let pre = Range::parse(">=0.3.0-rc.0").unwrap();
        assert_eq!(newest_tag(&pre, &seen), Some("1.0.0"));
        let only_pre = Range::parse("~0.3.0-rc.0").unwrap();
        assert_eq!(newest_tag(&only_pre, &seen), Some("0.3.0-rc.1"));
        assert_eq!(newest_tag(&Range::parse(">=2").unwrap(), &seen), None);
        assert_eq!(version_to_tag("1.2.3+b"), "1.2.3_b");
    }

    #[test]
    fn tag_pages_end_short_empty_or_repeated() {
        assert!(is_last_page(6, Some("b"), Some("a")));
        assert!(!is_last_page(1000, Some("b"), Some("a")));
        // A registry capping pages at 100 is asked again.
        assert!(!is_last_page(100, Some("b"), None));
        assert!(is_last_page(0, None, Some("a")));
        assert!(is_last_page(1000, Some("a"), Some("a")));
    }

    #[test]
    fn semver_takes_a_bare_repository() {
        assert!(!has_tag_or_digest("localhost:5000/charts/podinfo"));
        assert!(has_tag_or_digest("localhost:5000/charts/podinfo:1.0"));
        assert!(has_tag_or_digest("ghcr.io/x/y@sha256:00"));
    }

    #[test]
    fn failed_ranges_show_the_newest_tags_seen() {
        let many: Vec<String> = (0..15).map(|i| format!("0.{i:02}.0")).collect();
        let shown = sample_tags(&many);
        assert!(
            shown.contains("0.14.0") && shown.contains("(15 tags)"),
            "{shown}"
        );
        assert!(!shown.contains("0.04.0"), "{shown}");
        assert_eq!(sample_tags(&[]), "the repository has no tags");
    }
}
