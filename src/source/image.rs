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

use oci_client::manifest::{ImageIndexEntry, OciManifest};
use oci_client::Reference;

use pallet_formats::semver::{self, Range};

use super::budget::Cancel;
use super::oci_layers::{self, Downloaded, LayerDesc};
use super::registry::{Auth, Registry, Repo};
use super::verify::{cosign, VerifyMaterial};
use super::{CredentialKind, Fetcher, SourceError, SourceSecrets};
use crate::api::{HelmRepositorySource, ImageSource, VerifiedSignature};
use crate::bounded::Reader;

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

/// The registry client of a source: its credentials and TLS settings.
fn client_for(
    fetcher: &Fetcher,
    insecure_skip_tls_verify: bool,
    secrets: &SourceSecrets,
    registry: &str,
) -> Result<Registry, SourceError> {
    let opts = fetcher.options();
    let (auth, cred_origin) = match &secrets.credentials {
        None => (Auth::Anonymous, "no credentials".to_string()),
        Some(c) => {
            let auth = match &c.kind {
                CredentialKind::Basic { username, password } => {
                    Auth::Basic(username.clone(), password.clone())
                }
                CredentialKind::Token(t) => Auth::Bearer(t.clone()),
                CredentialKind::DockerConfig(cfg) => match cfg.for_registry(registry) {
                    Some((u, p)) => Auth::Basic(u.to_string(), p.to_string()),
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
    let key = (insecure_skip_tls_verify, &secrets.ca_pem, &auth);
    fetcher.registry_clients().get(key, || {
        // Blobs are served from storage hosts the registry redirects to.
        let http = super::http::client(
            opts,
            secrets.ca_pem.as_deref(),
            insecure_skip_tls_verify,
            true,
        )?;
        Ok(Registry::new(http, opts, auth.clone(), cred_origin))
    })
}

/// Registry clients by what they were made with (TLS settings and credentials), reused across
/// fetches: making one loads and parses the platform's root certificates (a few milliseconds and
/// about 140 allocations per certificate), which at a thousand bundles was most of a fetch's
/// cost. Credentials are part of the key, so a bearer token a client caches for one set of
/// credentials is never offered on behalf of another.
#[derive(Clone, Default)]
pub(crate) struct RegistryClients {
    clients: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<u64, Registry>>>,
}

/// More distinct clients than this (rotated credentials, many CAs): start over.
const REGISTRY_CLIENTS_KEPT: usize = 64;

impl RegistryClients {
    fn get(
        &self,
        (insecure, ca_pem, auth): (bool, &Option<Vec<u8>>, &Auth),
        make: impl FnOnce() -> Result<Registry, SourceError>,
    ) -> Result<Registry, SourceError> {
        use std::hash::BuildHasher;
        // The process's random SipHash keys: a collision cannot be aimed at.
        static KEYS: std::sync::OnceLock<std::collections::hash_map::RandomState> =
            std::sync::OnceLock::new();
        let key = KEYS
            .get_or_init(Default::default)
            .hash_one((insecure, ca_pem, auth));
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        if clients.len() >= REGISTRY_CLIENTS_KEPT {
            clients.clear();
        }
        let client = make()?;
        clients.insert(key, client.clone());
        Ok(client)
    }
}

/// The repository a reference names.
fn repo_of(reference: &Reference) -> Repo<'_> {
    Repo {
        registry: reference.resolve_registry(),
        name: reference.repository(),
    }
}

/// Resolves a reference to its digest: free for a digest reference, one HEAD for a tag.
async fn resolve(
    registry: &Registry,
    reference: &Reference,
    what: &str,
) -> Result<String, SourceError> {
    if let Some(d) = reference.digest() {
        return Ok(d.to_string());
    }
    let tag = reference.tag().unwrap_or("latest");
    registry.resolve(repo_of(reference), tag, what).await
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
    let registry_host = reference.resolve_registry().to_string();
    let repo = reference.repository().to_string();
    // A chart repository refuses what an image source takes, so their cache entries differ.
    let prefix = if expect_chart { "ocichart" } else { "image" };
    let pinned_key = |digest: &str| format!("{prefix}-{}", digest.replace(':', "-"));

    // Pinned and cached (and verified before, when it must be): no client, no request.
    if let Selector::Exact(r) = &selector {
        if let Some(d) = r.digest() {
            let resolved = format!("{registry_host}/{repo}@{d}");
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
    let registry = client_for(fetcher, insecure_skip_tls_verify, secrets, &registry_host)?;
    let (exact, tag) = match selector {
        Selector::Exact(r) => (r, None),
        Selector::Range(range) => {
            let tags = registry.tags(repo_of(reference), what).await?;
            let Some(tag) = newest_tag(&range, &tags) else {
                return Err(SourceError::NoMatchingVersion {
                    what: what.to_string(),
                    range: range.to_string(),
                    available: sample_tags(&tags),
                });
            };
            let tag = tag.to_string();
            let r = Reference::with_tag(registry_host.clone(), repo.clone(), tag.clone());
            (r, Some(tag))
        }
    };
    let digest = resolve(&registry, &exact, what).await?;
    let resolved = format!("{registry_host}/{repo}@{digest}");
    // Verified before a byte of it is downloaded; nothing unverified reaches the cache.
    let verified = match &secrets.verify {
        None => None,
        Some(material) => {
            let what = match &tag {
                Some(tag) => format!("{what} (tag {tag})"),
                None => what.to_string(),
            };
            let signed = Signed {
                registry: &registry,
                repo: Repo {
                    registry: &registry_host,
                    name: &repo,
                },
                digest: &digest,
                resolved: &resolved,
                what: &what,
            };
            Some(verify_signed(fetcher, material, &signed).await?)
        }
    };
    let key = pinned_key(&digest);
    let limits = fetcher.options().limits;
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
            let repo = Repo {
                registry: &registry_host,
                name: &repo,
            };
            pull_into(&registry, repo, &digest, &what_owned, target).await
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
    registry: &'a Registry,
    repo: Repo<'a>,
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
    let target = cosign::Target {
        registry: signed.registry,
        repo: signed.repo,
        digest: signed.digest,
        what: signed.what,
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
    registry: &Registry,
    repo: Repo<'_>,
    digest: &str,
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
    // The manifest is checked against the digest it is fetched by; an index is followed to
    // its linux/amd64 entry (or its only one).
    let manifest = match registry.manifest(repo, digest, what).await? {
        OciManifest::Image(m) => m,
        OciManifest::ImageIndex(index) => {
            let chosen =
                choose_platform(&index.manifests).ok_or_else(|| SourceError::NotABundle {
                    what: what.to_string(),
                    reason: "the image index has no linux/amd64 entry and more than one entry"
                        .into(),
                })?;
            match registry.manifest(repo, &chosen, what).await? {
                OciManifest::Image(m) => m,
                OciManifest::ImageIndex(_) => {
                    return Err(SourceError::NotABundle {
                        what: what.to_string(),
                        reason: "an image index nested in an image index".into(),
                    })
                }
            }
        }
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
            let limit = Reader::RegistryLayer.limit(limits.max_total_bytes);
            registry
                .blob_to_file(repo, &layers[i].digest, &file, limit, what)
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
