//! Helm chart repositories over HTTP(S): `<url>/index.yaml` names every chart's versions and where
//! each packaged chart (`.tgz`) lives.
//!
//! - The index is fetched with a conditional GET (its `ETag` / `Last-Modified` and the named
//!   chart's entries are remembered in the cache's metadata), so an unchanged index costs one 304.
//!   Only the named chart's entries are kept from a parse; indexes of tens of MB exist.
//! - The version is chosen as helm chooses it: the entry whose version is exactly the string
//!   written, else the newest that satisfies it as a range (Masterminds rules; absent means `*`;
//!   pre-releases only when the range names one).
//! - The chart URL is the entry's first `urls` item, absolute or relative to the repository URL.
//!   The download's SHA-256 is checked against the entry's `digest` and the spec's `digest`, and
//!   the chart is unpacked with its top directory stripped, cached by that digest.
//! - A pinned source (an exact `version`, or a `digest`) whose chart is cached costs no request:
//!   the version → digest of every download is remembered too.
//! - Credentials go to the repository's own origin (scheme, host and port) only; a chart URL on
//!   another origin is fetched without them, as helm does without `--pass-credentials`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use pallet_formats::semver::{self, Range, Version};
use reqwest::StatusCode;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::budget::{Budget, Cancel};
use super::http::{
    authorize, check_status, client, conditional, display_url, download_to, not_modified_unasked,
    send, validators_of,
};
use super::verify::{self, openpgp, VerifyMaterial};
use super::{Fetcher, SourceError, SourceSecrets};
use crate::api::{HelmRepositorySource, VerifiedSignature};
use crate::bounded::Reader;

/// How many of the newest versions a "no version matches" error lists.
const VERSIONS_SHOWN: usize = 5;

/// One version of the chart as the index lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ChartEntry {
    /// The chart version, as written in the index.
    pub version: String,
    /// Where the packaged chart is, absolute or relative to the repository URL.
    #[serde(default)]
    pub urls: Vec<String>,
    /// Hex SHA-256 of the packaged chart, when the index has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// What the cache remembers per repository URL and chart.
#[derive(Default, Serialize, Deserialize)]
struct RepoMeta {
    /// Validators of the last index read, and the chart's entries in it.
    index: Option<IndexRecord>,
    /// Chart version → hex SHA-256 of the chart downloaded for it.
    #[serde(default)]
    downloaded: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize)]
struct IndexRecord {
    etag: Option<String>,
    last_modified: Option<String>,
    /// `None`: the index did not list the chart.
    entries: Option<Vec<ChartEntry>>,
}

/// The part of an index that matters for one chart.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ParsedIndex {
    /// The chart's entries; `None` when the index does not list the chart.
    pub entries: Option<Vec<ChartEntry>>,
}

/// Parses an `index.yaml`, keeping only `chart`'s entries (the others are skipped unbuilt). An
/// index without `apiVersion` is refused, as helm refuses it; null entries are dropped.
pub(crate) fn parse_index(data: &[u8], chart: &str) -> Result<ParsedIndex, String> {
    // Budget scaled to the document: big public indexes have millions of YAML events.
    let size = data.len().max(1 << 20);
    let mut options = serde_saphyr::Options::default();
    let mut budget = serde_saphyr::Budget::default();
    budget.max_events = budget.max_events.max(size);
    budget.max_nodes = budget.max_nodes.max(size);
    budget.max_total_scalar_bytes = budget.max_total_scalar_bytes.max(size);
    options.budget = Some(budget);
    let (api_version, entries) =
        serde_saphyr::with_deserializer_from_slice_with_options(data, options, |de| {
            IndexSeed { chart }.deserialize(de)
        })
        .map_err(|e| e.to_string())?;
    if api_version.is_none_or(|v| v.is_empty()) {
        return Err("no apiVersion: not a chart repository index".into());
    }
    Ok(ParsedIndex { entries })
}

type IndexParts = (Option<String>, Option<Vec<ChartEntry>>);

struct IndexSeed<'a> {
    chart: &'a str,
}

impl<'de> DeserializeSeed<'de> for IndexSeed<'_> {
    type Value = IndexParts;
    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        de.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for IndexSeed<'_> {
    type Value = IndexParts;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a chart repository index (a map with apiVersion and entries)")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut api_version, mut entries) = (None, None);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "apiVersion" => api_version = map.next_value::<Option<String>>()?,
                "entries" => entries = map.next_value_seed(EntriesSeed { chart: self.chart })?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok((api_version, entries))
    }
}

struct EntriesSeed<'a> {
    chart: &'a str,
}

impl<'de> DeserializeSeed<'de> for EntriesSeed<'_> {
    type Value = Option<Vec<ChartEntry>>;
    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        de.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for EntriesSeed<'_> {
    type Value = Option<Vec<ChartEntry>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map of chart names to their versions")
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        de.deserialize_map(self)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == self.chart {
                let entries: Option<Vec<Option<ChartEntry>>> = map.next_value()?;
                found = Some(entries.into_iter().flatten().flatten().collect());
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Why no entry was chosen.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NoChoice {
    /// `version` is neither a version nor a range.
    BadRange(String),
    /// Nothing satisfies the range; the newest versions present, newest first.
    NoMatch(Vec<String>),
}

/// Chooses the entry as helm's `IndexFile.Get` does: the exact version string first, else the
/// newest version satisfying `requested` as a range (`*` when absent).
pub(crate) fn choose<'a>(
    entries: &'a [ChartEntry],
    requested: Option<&str>,
) -> Result<&'a ChartEntry, NoChoice> {
    if let Some(exact) = requested.and_then(|r| entries.iter().find(|e| e.version == r)) {
        return Ok(exact);
    }
    let range = Range::parse(requested.unwrap_or("*")).map_err(|e| NoChoice::BadRange(e.0))?;
    match range.newest(entries.iter().map(|e| e.version.as_str())) {
        Some((version, _)) => entries
            .iter()
            .find(|e| e.version == version)
            .ok_or_else(|| NoChoice::NoMatch(Vec::new())),
        None => Err(NoChoice::NoMatch(newest_versions(entries, VERSIONS_SHOWN))),
    }
}

/// The `n` newest versions of `entries` that parse, newest first, as written.
fn newest_versions(entries: &[ChartEntry], n: usize) -> Vec<String> {
    let mut parsed: Vec<(Version, &str)> = entries
        .iter()
        .filter_map(|e| Some((Version::parse(&e.version).ok()?, e.version.as_str())))
        .collect();
    parsed.sort_by(|a, b| b.0.compare(&a.0));
    parsed
        .into_iter()
        .take(n)
        .map(|(_, v)| v.to_string())
        .collect()
}

/// `<repo>/index.yaml`, keeping the repository URL's query (helm joins the path the same way).
pub(crate) fn index_url(repo: &url::Url) -> url::Url {
    let mut url = repo.clone();
    let path = format!("{}/index.yaml", repo.path().trim_end_matches('/'));
    url.set_path(&path);
    url
}

/// The chart URL of an index entry: absolute as is, relative resolved against the repository URL
/// taken as a directory, with the repository's query (helm's `ResolveReferenceURL`).
pub(crate) fn chart_url(repo: &url::Url, reference: &str) -> Result<url::Url, url::ParseError> {
    match url::Url::parse(reference) {
        Ok(absolute) => Ok(absolute),
        Err(url::ParseError::RelativeUrlWithoutBase) => {
            let mut base = repo.clone();
            let path = format!("{}/", repo.path().trim_end_matches('/'));
            base.set_path(&path);
            let mut resolved = base.join(reference)?;
            resolved.set_query(repo.query());
            Ok(resolved)
        }
        Err(e) => Err(e),
    }
}

/// How the source is named in messages and status: `<url> <chart> [<version as written>]`.
pub(crate) fn reference(spec: &HelmRepositorySource) -> String {
    match &spec.version {
        Some(version) => format!("{} {} {version}", spec.url, spec.chart),
        None => format!("{} {}", spec.url, spec.chart),
    }
}

fn cache_key(sha: &str) -> String {
    format!("helmrepo-chart-{sha}")
}

fn hex_digest(digest: &str) -> String {
    digest
        .trim()
        .strip_prefix("sha256:")
        .unwrap_or(digest.trim())
        .to_ascii_lowercase()
}

/// The cached chart for an exact `version` (or the spec's `digest`) downloaded before, if any:
/// `(hex digest, cached tree, chosen version)`. No network.
fn pinned_in_cache(
    fetcher: &Fetcher,
    spec: &HelmRepositorySource,
    meta: &RepoMeta,
) -> Option<(String, PathBuf, String)> {
    let cache = fetcher.cache();
    let exact = spec.version.as_deref().filter(|v| !semver::is_range(v));
    let recorded = exact.and_then(|v| {
        meta.downloaded.get_key_value(v).or_else(|| {
            let wanted = Version::parse(v).ok()?;
            meta.downloaded.iter().find(|(k, _)| {
                Version::parse(k).is_ok_and(|k| k.compare(&wanted) == std::cmp::Ordering::Equal)
            })
        })
    });
    if let Some(pin) = spec.digest.as_deref().map(hex_digest) {
        // A digest pins the content; the version comes from the record (or the exact spec).
        let version = recorded
            .filter(|(_, sha)| **sha == pin)
            .map(|(v, _)| v.clone())
            .or_else(|| {
                meta.downloaded
                    .iter()
                    .find(|(_, sha)| **sha == pin)
                    .map(|(v, _)| v.clone())
            })?;
        let path = cache.lookup(&cache_key(&pin))?;
        return Some((pin, path, version));
    }
    let (version, sha) = recorded?;
    let path = cache.lookup(&cache_key(sha))?;
    Some((sha.clone(), path, version.clone()))
}

/// A chart fetched from an HTTP(S) chart repository.
pub(crate) struct RepoChart {
    /// `sha256:` of the chart archive.
    pub resolved: String,
    /// The cached chart.
    pub path: PathBuf,
    /// The chart version chosen.
    pub version: String,
    /// Who signed its provenance file, for a source with `verify`.
    pub verified: Option<VerifiedSignature>,
}

/// Resolves and fetches a chart from an HTTP(S) chart repository.
pub(crate) async fn fetch(
    fetcher: &Fetcher,
    spec: &HelmRepositorySource,
    secrets: &SourceSecrets,
    cancel: &Cancel,
) -> Result<RepoChart, SourceError> {
    let repo = url::Url::parse(&spec.url)
        .map_err(|e| SourceError::Invalid(format!("helmRepository url {}: {e}", spec.url)))?;
    if !matches!(repo.scheme(), "http" | "https") {
        return Err(SourceError::Invalid(format!(
            "helmRepository {}: only http, https and oci URLs are supported",
            display_url(&repo)
        )));
    }
    let cache = fetcher.cache();
    let meta_name = format!(
        "helmrepo-{}",
        super::sha256_hex(format!("{}\n{}", spec.url, spec.chart).as_bytes())
    );
    let mut meta: RepoMeta = cache
        .read_meta(&meta_name)
        .and_then(|raw| serde_json::from_slice(&raw).ok())
        .unwrap_or_default();
    if let Some((sha, path, version)) = pinned_in_cache(fetcher, spec, &meta) {
        let resolved = format!("sha256:{sha}");
        let verified = match &secrets.verify {
            None => Some(None),
            Some(material) => fetcher.verified().get(material, &resolved).map(Some),
        };
        // Verified before (or nothing to verify): no request at all.
        if let Some(verified) = verified {
            return Ok(RepoChart {
                resolved,
                path,
                version,
                verified,
            });
        }
    }

    let opts = fetcher.options();
    let client = client(
        opts,
        secrets.ca_pem.as_deref(),
        spec.insecure_skip_tls_verify,
        spec.allow_cross_host_redirects,
    )?;
    let repo_what = display_url(&repo);
    let entries = read_index(&client, fetcher, spec, secrets, &repo, &mut meta).await?;
    let save_meta = |meta: &RepoMeta| {
        if let Ok(raw) = serde_json::to_vec(meta) {
            // Only an optimisation: without it the next poll downloads the index again.
            if let Err(e) = cache.write_meta(&meta_name, &raw) {
                tracing::warn!(error = %e, "could not record the chart repository's index");
            }
        }
    };
    save_meta(&meta);
    let Some(entries) = entries else {
        return Err(SourceError::NotFound {
            what: format!("chart {} in the index of {repo_what}", spec.chart),
        });
    };
    let entry = choose(&entries, spec.version.as_deref()).map_err(|e| match e {
        NoChoice::BadRange(reason) => SourceError::Invalid(format!(
            "helmRepository version {:?} is neither a version nor a semver range: {reason}",
            spec.version.as_deref().unwrap_or("*")
        )),
        NoChoice::NoMatch(newest) => SourceError::NoMatchingVersion {
            what: format!("chart {} in {repo_what}", spec.chart),
            range: spec.version.clone().unwrap_or_else(|| "*".into()),
            available: if newest.is_empty() {
                "no versions".to_string()
            } else {
                format!("newest: {}", newest.join(", "))
            },
        },
    })?;
    let (sha, path, verified) =
        fetch_chart(&client, fetcher, spec, secrets, &repo, entry, cancel).await?;
    meta.downloaded.insert(entry.version.clone(), sha.clone());
    save_meta(&meta);
    Ok(RepoChart {
        resolved: format!("sha256:{sha}"),
        path,
        version: entry.version.clone(),
        verified,
    })
}

/// Reads the index with a conditional GET; returns the chart's entries (`None`: not listed) and
/// records the new validators and entries in `meta`.
async fn read_index(
    client: &reqwest::Client,
    fetcher: &Fetcher,
    spec: &HelmRepositorySource,
    secrets: &SourceSecrets,
    repo: &url::Url,
    meta: &mut RepoMeta,
) -> Result<Option<Vec<ChartEntry>>, SourceError> {
    let url = index_url(repo);
    let what = display_url(&url);
    let request = conditional(
        client.get(url),
        meta.index
            .as_ref()
            .map(|r| (r.etag.as_deref(), r.last_modified.as_deref())),
    );
    let (request, cred_origin) = authorize(
        request,
        secrets.credentials.as_ref(),
        "a helmRepository source",
    )?;
    let response = send(&fetcher.options().egress, request, &what).await?;
    let status = response.status();
    if status == StatusCode::NOT_MODIFIED {
        return match &meta.index {
            Some(record) => Ok(record.entries.clone()),
            None => Err(not_modified_unasked(what)),
        };
    }
    check_status(&what, status, &cred_origin)?;
    let (etag, last_modified) = validators_of(&response);
    let scratch = fetcher.cache().scratch_dir()?;
    let file = scratch.join("index.yaml");
    let limit = Reader::ChartIndex.limit(fetcher.options().limits.max_file_bytes);
    let downloaded = download_to(response, &file, &what, limit).await;
    let parsed = match downloaded {
        Ok(_) => {
            let chart = spec.chart.clone();
            let file = file.clone();
            tokio::task::spawn_blocking(move || {
                let data = std::fs::read(&file).map_err(|e| SourceError::io("read index", e))?;
                Ok::<_, SourceError>(parse_index(&data, &chart))
            })
            .await
            .map_err(|e| SourceError::io("parse task", std::io::Error::other(e.to_string())))
            .and_then(|r| r)
        }
        Err(e) => Err(e),
    };
    let _ = std::fs::remove_dir_all(&scratch);
    let index = parsed?.map_err(|reason| {
        SourceError::Invalid(format!("{what} is not a chart repository index: {reason}"))
    })?;
    meta.index = Some(IndexRecord {
        etag,
        last_modified,
        entries: index.entries.clone(),
    });
    Ok(index.entries)
}

/// Downloads (unless cached) the chart of `entry`, checks its digest against the index and the
/// spec (and its provenance file, for a source with `verify`), and unpacks it into the cache.
/// Returns its hex SHA-256, cached tree and signer.
async fn fetch_chart(
    client: &reqwest::Client,
    fetcher: &Fetcher,
    spec: &HelmRepositorySource,
    secrets: &SourceSecrets,
    repo: &url::Url,
    entry: &ChartEntry,
    cancel: &Cancel,
) -> Result<(String, PathBuf, Option<VerifiedSignature>), SourceError> {
    let cache = fetcher.cache();
    let label = format!("chart {} {}", spec.chart, entry.version);
    let listed = entry.digest.as_deref().map(hex_digest);
    let pin = spec.digest.as_deref().map(hex_digest);
    let first = entry.urls.first().ok_or_else(|| {
        SourceError::Invalid(format!(
            "the index of {} lists {label} without urls",
            display_url(repo)
        ))
    })?;
    let url = chart_url(repo, first)
        .map_err(|e| SourceError::Invalid(format!("{label}: bad chart URL {first:?}: {e}")))?;
    let what = display_url(&url);
    let mismatch = |expected: &str, actual: &str| SourceError::DigestMismatch {
        what: what.clone(),
        expected: format!("sha256:{expected}"),
        actual: format!("sha256:{actual}"),
    };
    // The index's digest names the content: a chart cached under it costs no download.
    if let Some(listed) = &listed {
        if let Some(pin) = &pin {
            if pin != listed {
                return Err(mismatch(pin, listed));
            }
        }
        if let Some(path) = cache.lookup(&cache_key(listed)) {
            let prov = Provenance {
                client,
                fetcher,
                secrets,
                repo,
                url: &url,
                label: &label,
            };
            let verified = prov.verify(listed).await?;
            return Ok((listed.clone(), path, verified));
        }
    }

    // helm's default: credentials only for the repository's own origin (no --pass-credentials).
    let same_origin = url.origin() == repo.origin();
    let credentials = secrets.credentials.as_ref().filter(|_| same_origin);
    let (request, cred_origin) = authorize(
        client.get(url.clone()),
        credentials,
        "a helmRepository source",
    )?;
    let cred_origin = if secrets.credentials.is_some() && !same_origin {
        format!("{cred_origin} (not sent: the chart is on another host than the repository)")
    } else {
        cred_origin
    };
    let response = send(&fetcher.options().egress, request, &what).await?;
    check_status(&what, response.status(), &cred_origin)?;
    let scratch = cache.scratch_dir()?;
    let download = scratch.join("chart.tgz");
    let limits = fetcher.options().limits;
    let result = async {
        let limit = Reader::ChartArchive.limit(limits.max_total_bytes);
        let sha = download_to(response, &download, &what, limit).await?;
        for expected in [&listed, &pin].into_iter().flatten() {
            if *expected != sha {
                return Err(mismatch(expected, &sha));
            }
        }
        // Verified before it is unpacked: nothing unverified reaches the cache.
        let prov = Provenance {
            client,
            fetcher,
            secrets,
            repo,
            url: &url,
            label: &label,
        };
        let verified = prov.verify(&sha).await?;
        let file = download.clone();
        let cancel = cancel.clone();
        let allowance = cache.unpack_allowance();
        let path = cache
            .get_or_populate(&cache_key(&sha), |tree| async move {
                tokio::task::spawn_blocking(move || {
                    let mut budget = Budget::drawing_on(limits, &cancel, Some(allowance));
                    unpack(&file, &tree, &mut budget, &label)
                })
                .await
                .map_err(|e| SourceError::io("unpack task", std::io::Error::other(e.to_string())))?
            })
            .await?;
        Ok((sha, path, verified))
    }
    .await;
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// The largest provenance file read (helm's are a few KiB).
const MAX_PROVENANCE_BYTES: u64 = 256 * 1024;

/// A chart's provenance file, next to its archive (`<chart URL>.prov`).
struct Provenance<'a> {
    client: &'a reqwest::Client,
    fetcher: &'a Fetcher,
    secrets: &'a SourceSecrets,
    repo: &'a url::Url,
    /// The chart archive's URL.
    url: &'a url::Url,
    /// `chart <name> <version>`.
    label: &'a str,
}

impl Provenance<'_> {
    /// The signer of the archive whose hex SHA-256 is `sha`, for a source with `verify`: the
    /// provenance file is signed by a key of the keyring and names that digest for the archive.
    /// Remembered once verified.
    async fn verify(&self, sha: &str) -> Result<Option<VerifiedSignature>, SourceError> {
        let Some(material) = &self.secrets.verify else {
            return Ok(None);
        };
        let resolved = format!("sha256:{sha}");
        if let Some(known) = self.fetcher.verified().get(material, &resolved) {
            return Ok(Some(known));
        }
        let started = std::time::Instant::now();
        let signer = self.check(material, &resolved).await?;
        tracing::info!(source = %self.label, digest = %resolved, signer = %signer.summary(), took_ms = started.elapsed().as_millis() as u64, "verified");
        self.fetcher.verified().record(material, &resolved, &signer);
        Ok(Some(signer))
    }

    async fn check(
        &self,
        material: &VerifyMaterial,
        resolved: &str,
    ) -> Result<VerifiedSignature, SourceError> {
        let what = format!("{} at {}", self.label, display_url(self.url));
        let refuse = |reason: String| verify::failed(&what, resolved, reason);
        let keyring = openpgp::Keyring::read(&material.keys)
            .map_err(|e| verify::unusable("verify.provenance.keyring", e))?;
        let mut prov_url = self.url.clone();
        prov_url.set_path(&format!("{}.prov", self.url.path()));
        let text = match self.download(&prov_url).await {
            Ok(text) => text,
            Err(SourceError::NotFound { .. }) => {
                return Err(refuse(format!(
                    "signature missing: no provenance file at {}",
                    display_url(&prov_url)
                )))
            }
            Err(e) => return Err(e),
        };
        let (signed, fingerprint) = keyring.verify_cleartext(&text).map_err(refuse)?;
        let files = openpgp::provenance_files(&signed).map_err(refuse)?;
        let name = self
            .url
            .path_segments()
            .and_then(|mut s| s.next_back())
            .unwrap_or_default()
            .to_string();
        let named = files.get(&name).ok_or_else(|| {
            refuse(format!(
                "the provenance file names no archive {name:?} (it names {})",
                files.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        })?;
        if named.trim() != resolved {
            return Err(refuse(format!(
                "archive digest mismatch: the provenance file names {named} for {name}, the archive is {resolved}"
            )));
        }
        Ok(VerifiedSignature {
            method: "provenance".into(),
            signed: Some("provenance file".into()),
            key: Some(fingerprint),
            ..Default::default()
        })
    }

    /// The provenance file's text, with credentials on the repository's own origin only.
    async fn download(&self, url: &url::Url) -> Result<String, SourceError> {
        let what = display_url(url);
        let same_origin = url.origin() == self.repo.origin();
        let credentials = self.secrets.credentials.as_ref().filter(|_| same_origin);
        let (request, cred_origin) = authorize(
            self.client.get(url.clone()),
            credentials,
            "a helmRepository source",
        )?;
        let response = send(&self.fetcher.options().egress, request, &what).await?;
        check_status(&what, response.status(), &cred_origin)?;
        let limit = Reader::ChartProvenance.limit(MAX_PROVENANCE_BYTES);
        let body = crate::bounded::read_to_vec(response, limit)
            .await
            .map_err(|e| super::read_refusal(&what, format!("the download {what}"), e))?;
        String::from_utf8(body).map_err(|_| SourceError::NotABundle {
            what,
            reason: "the provenance file is not text".into(),
        })
    }
}

fn unpack(file: &Path, tree: &Path, budget: &mut Budget, what: &str) -> Result<(), SourceError> {
    let f = std::fs::File::open(file).map_err(|e| SourceError::io("read chart download", e))?;
    super::chart::unpack_chart(f, tree, budget, what).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(version: &str) -> ChartEntry {
        ChartEntry {
            version: version.into(),
            urls: vec![format!("c-{version}.tgz")],
            digest: None,
        }
    }

    fn chosen(entries: &[ChartEntry], requested: Option<&str>) -> Result<String, NoChoice> {
        choose(entries, requested).map(|e| e.version.clone())
    }

    #[test]
    fn chooses_as_helm_does() {
        let entries: Vec<ChartEntry> = ["0.1.0", "0.2.0", "0.3.0-rc.1", "1.0.0", "v1.1.0", "bad"]
            .map(entry)
            .to_vec();
        assert_eq!(chosen(&entries, None).unwrap(), "v1.1.0");
        assert_eq!(chosen(&entries, Some("0.x")).unwrap(), "0.2.0");
        assert_eq!(
            chosen(&entries, Some(">=0.3.0-0 <1.0.0-0")).unwrap(),
            "0.3.0-rc.1"
        );
        assert_eq!(chosen(&entries, Some("1.0.0")).unwrap(), "1.0.0");
        // Masterminds reads a `v` prefix in a range as nothing.
        assert_eq!(chosen(&entries, Some("v1.x")).unwrap(), "v1.1.0");
        assert_eq!(chosen(&entries, Some("1.1.0")).unwrap(), "v1.1.0");
        // An exact string is taken even when it is no version.
        assert_eq!(chosen(&entries, Some("bad")).unwrap(), "bad");
        assert_eq!(
            chosen(&entries, Some("2.x")).unwrap_err(),
            NoChoice::NoMatch(vec![
                "v1.1.0".into(),
                "1.0.0".into(),
                "0.3.0-rc.1".into(),
                "0.2.0".into(),
                "0.1.0".into()
            ])
        );
        assert!(matches!(
            chosen(&entries, Some(">>1")),
            Err(NoChoice::BadRange(_))
        ));
    }

    #[test]
    fn parses_only_the_named_chart() {
        let index = br#"
apiVersion: v1
entries:
  other:
  - {version: 9.9.9, urls: [other-9.9.9.tgz], extra: {deep: [1, 2, 3]}}
  podinfo:
  - apiVersion: v2
    name: podinfo
    version: 6.1.0
    digest: abc
    urls: [https://example.com/podinfo-6.1.0.tgz]
    created: "2024-01-01T00:00:00Z"
  - null
  - version: 6.0.0
    urls: [podinfo-6.0.0.tgz]
generated: "2024-01-01T00:00:00Z"
"#;
        let parsed = parse_index(index, "podinfo").unwrap();
        let entries = parsed.entries.unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].digest.as_deref(), Some("abc"));
        assert_eq!(entries[1].urls, ["podinfo-6.0.0.tgz"]);
        assert_eq!(parse_index(index, "absent").unwrap().entries, None);
        assert!(parse_index(b"entries: {}\n", "x")
            .unwrap_err()
            .contains("apiVersion"));
        assert!(parse_index(b"<html>hello</html>\n", "x").is_err());
        assert!(parse_index(b"apiVersion: v1\nentries: [\n", "x").is_err());
        assert_eq!(
            parse_index(b"apiVersion: v1\nentries:\n", "x")
                .unwrap()
                .entries,
            None
        );
    }

    #[test]
    fn index_and_chart_urls_resolve_as_helm_resolves_them() {
        let repo = url::Url::parse("http://h:1/charts/stable?x=1").unwrap();
        assert_eq!(
            index_url(&repo).as_str(),
            "http://h:1/charts/stable/index.yaml?x=1"
        );
        let slash = url::Url::parse("http://h:1/charts/").unwrap();
        assert_eq!(index_url(&slash).as_str(), "http://h:1/charts/index.yaml");
        assert_eq!(
            chart_url(&repo, "c-1.0.0.tgz").unwrap().as_str(),
            "http://h:1/charts/stable/c-1.0.0.tgz?x=1"
        );
        assert_eq!(
            chart_url(&slash, "../other/c.tgz").unwrap().as_str(),
            "http://h:1/other/c.tgz"
        );
        assert_eq!(
            chart_url(&repo, "https://cdn.example/c.tgz")
                .unwrap()
                .as_str(),
            "https://cdn.example/c.tgz"
        );
    }

    mod properties {
        use std::time::{Duration, Instant};

        use proptest::prelude::*;

        use super::super::*;

        fn config() -> ProptestConfig {
            ProptestConfig {
                cases: std::env::var("PROPTEST_CASES")
                    .ok()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(300),
                max_shrink_iters: 256,
                ..ProptestConfig::default()
            }
        }

        fn timed<T>(f: impl FnOnce() -> T) -> Result<T, TestCaseError> {
            let start = Instant::now();
            let out = f();
            let took = start.elapsed();
            prop_assert!(took < Duration::from_secs(2), "parse_index took {took:?}");
            Ok(out)
        }

        fn entry() -> impl Strategy<Value = ChartEntry> {
            (
                "[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}(-[a-z]{1,4})?",
                prop::collection::vec("(https?://[a-z.]{1,10}/)?[a-z0-9./-]{1,20}", 0..3),
                prop::option::of("[0-9a-f]{64}"),
            )
                .prop_map(|(version, urls, digest)| ChartEntry {
                    version,
                    urls,
                    digest,
                })
        }

        proptest! {
            #![proptest_config(config())]

            /// Any bytes: an error or the chart's entries, never a panic, in bounded time.
            #[test]
            fn index_reading_never_panics(data in prop::collection::vec(any::<u8>(), 0..2048)) {
                let _ = timed(|| parse_index(&data, "app"))?;
            }

            /// YAML-looking text built from the index's own keys.
            #[test]
            fn index_like_text_never_panics(
                pieces in prop::collection::vec(prop::sample::select(vec![
                    "apiVersion: v1\n", "entries:\n", "  app:\n", "  - ", "version: 1.0.0", "urls: [",
                    "]", "digest: ", "\n", "    ", "null", "~", "{", "}", ",", "&a ", "*a", "!!binary ",
                    "app", ": ", "- ", "'", "\"",
                ]), 0..120)
            ) {
                let text = pieces.concat();
                let _ = timed(|| parse_index(text.as_bytes(), "app"))?;
            }

            /// An index written as JSON gives back exactly the named chart's entries, in order,
            /// with null entries dropped, whatever the other charts hold.
            #[test]
            fn index_gives_back_the_charts_entries(
                wanted in prop::collection::vec(prop::option::weighted(0.9, entry()), 0..8),
                others in prop::collection::btree_map("[a-z]{1,6}", prop::collection::vec(entry(), 0..4), 0..4),
            ) {
                let mut entries = serde_json::Map::new();
                for (name, list) in &others {
                    entries.insert(name.clone(), serde_json::to_value(list).unwrap_or_default());
                }
                entries.insert("app".into(), serde_json::to_value(&wanted).unwrap_or_default());
                let index = serde_json::json!({"apiVersion": "v1", "entries": entries, "generated": "x"});
                let text = serde_json::to_vec(&index).unwrap_or_default();
                let parsed = timed(|| parse_index(&text, "app"))?.map_err(TestCaseError::fail)?;
                let expected: Vec<ChartEntry> = wanted.into_iter().flatten().collect();
                prop_assert_eq!(parsed.entries, Some(expected));
            }
        }
    }
}
