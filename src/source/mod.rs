//! Sources: fetch image, git and HTTP sources, resolve them to immutable refs, cache them on
//! local disk, and assemble several into one bundle tree.
//!
//! - [`Fetcher`] is the one entry point the reconciler (and `pallet fetch`) uses for every kind:
//!   [`Fetcher::fetch`] resolves a source (cheapest call the protocol offers), returns the cached
//!   tree when it has it and otherwise downloads and unpacks it once.
//! - [`assemble`] copies several fetched sources into one tree at their destinations, refusing two
//!   sources that write the same path.
//! - [`unpack`] does the safe extraction, [`cache`] the content-addressed store, and
//!   [`credentials`] the secret material the fetchers take.

pub mod budget;
pub mod cache;
pub mod chart;
pub mod credentials;
pub mod git;
mod git_relay;
pub mod helm_repo;
pub mod http;
pub mod image;
pub mod oci_layers;
pub mod oci_reference;
pub mod registry;
pub mod unpack;
pub mod verify;

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::api::{Source, SourceKind};

pub use budget::{Budget, Cancel, Limits};
pub use cache::Cache;
pub use credentials::{CredentialKind, Credentials, DockerConfig};

/// Why fetching a source failed. Messages name the source, the path and the credentials'
/// origin, never secret values.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The image, repository, ref or URL does not exist.
    #[error("{what} not found")]
    NotFound {
        /// What was looked for.
        what: String,
    },
    /// The server refused the credentials (or their absence).
    #[error("access to {what} denied using {credentials}: {detail}")]
    Unauthorized {
        /// What was accessed.
        what: String,
        /// Where the credentials came from, or "no credentials".
        credentials: String,
        /// The server's reason, without secrets.
        detail: String,
    },
    /// Credentials that cannot be used for this source.
    #[error("credentials from {origin} are unusable: {reason}")]
    InvalidCredentials {
        /// Where the credentials came from.
        origin: String,
        /// What is wrong with them.
        reason: String,
    },
    /// The content exists but holds nothing pallet can use as a bundle.
    #[error("{what} is not a bundle: {reason}")]
    NotABundle {
        /// The source.
        what: String,
        /// Why not.
        reason: String,
    },
    /// An archive entry or tree item that would escape the destination or is not allowed.
    #[error("unsafe content at {path}: {reason}")]
    UnsafeContent {
        /// Path of the entry as the archive names it.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An archive that cannot be read (truncated, corrupt compression).
    #[error("archive is unreadable: {reason}")]
    BadArchive {
        /// The decoder's reason.
        reason: String,
    },
    /// Unpacking would exceed one of the configured [`Limits`].
    #[error("refused {what}: {value} is over {budget} of {limit}")]
    LimitExceeded {
        /// What was refused: the entry, file or download.
        what: String,
        /// How large it is or would have grown (with its unit).
        value: String,
        /// Which budget, with the flag that sets it.
        budget: String,
        /// The budget's value (with its unit).
        limit: String,
    },
    /// Unpacking stopped because its fetch finished, was dropped or passed its deadline.
    #[error("{what} stopped: the fetch was cancelled or passed its deadline")]
    Cancelled {
        /// What was being done.
        what: String,
    },
    /// A refusal of a source's content, naming the source.
    #[error("{label}: {error}")]
    InSource {
        /// The source, as [`describe_source`] names it.
        label: String,
        /// The refusal.
        error: Box<SourceError>,
    },
    /// Content whose digest is not the one expected.
    #[error("digest mismatch for {what}: expected {expected}, got {actual}")]
    DigestMismatch {
        /// The content.
        what: String,
        /// The pinned or advertised digest.
        expected: String,
        /// The digest of what arrived.
        actual: String,
    },
    /// No tag or chart version satisfies a semver range.
    #[error("no version of {what} satisfies the semver range {range:?} ({available})")]
    NoMatchingVersion {
        /// The repository or chart.
        what: String,
        /// The range as written.
        range: String,
        /// What there is, briefly.
        available: String,
    },
    /// Two sources write the same path of the assembled tree.
    #[error("sources {first} and {second} both write {path}")]
    Conflict {
        /// Path inside the assembled tree.
        path: String,
        /// The source that wrote it first.
        first: String,
        /// The source that wrote it again.
        second: String,
    },
    /// Content whose signatures do not satisfy the source's `verify`: no signature, no key
    /// matched, an identity mismatch, an invalid log entry, a tampered archive.
    #[error("verification failed for {what} at {digest}: {reason}")]
    VerificationFailed {
        /// The source.
        what: String,
        /// The digest or commit that was checked.
        digest: String,
        /// What did not match.
        reason: String,
    },
    /// A source without `verify` while the agent requires one (`--require-verification`).
    #[error("{0}")]
    VerificationRequired(String),
    /// A source spec the fetchers cannot act on.
    #[error("invalid source: {0}")]
    Invalid(String),
    /// The source names an address or location the agent's egress policy refuses.
    #[error("{0}")]
    Refused(String),
    /// The server could not be reached or did not answer in time.
    #[error("{what} is unreachable: {detail}")]
    Unreachable {
        /// The server or URL.
        what: String,
        /// The transport's reason.
        detail: String,
    },
    /// The server answered with an error of its own (5xx, protocol errors).
    #[error("{what}: server error: {detail}")]
    Server {
        /// The server or URL.
        what: String,
        /// The server's reason.
        detail: String,
    },
    /// A local filesystem error (cache, scratch space).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl SourceError {
    /// A short stable name for the kind of failure: used as condition reason, Event reason and
    /// metric label.
    pub fn category(&self) -> &'static str {
        match self {
            SourceError::NotFound { .. } => "NotFound",
            SourceError::Unauthorized { .. } => "Unauthorized",
            SourceError::InvalidCredentials { .. } => "InvalidCredentials",
            SourceError::NotABundle { .. } => "NotABundle",
            SourceError::UnsafeContent { .. } => "UnsafeContent",
            SourceError::BadArchive { .. } => "BadArchive",
            SourceError::LimitExceeded { .. } => "LimitExceeded",
            SourceError::Cancelled { .. } => "Cancelled",
            SourceError::InSource { error, .. } => error.category(),
            SourceError::DigestMismatch { .. } => "DigestMismatch",
            SourceError::NoMatchingVersion { .. } => "NoMatchingVersion",
            SourceError::Conflict { .. } => "SourceConflict",
            SourceError::VerificationFailed { .. } => "VerificationFailed",
            SourceError::VerificationRequired(_) => "VerificationRequired",
            SourceError::Invalid(_) => "InvalidSource",
            SourceError::Refused(_) => "EgressRefused",
            SourceError::Unreachable { .. } => "Unreachable",
            SourceError::Server { .. } => "ServerError",
            SourceError::Io { .. } => "LocalIO",
        }
    }

    /// Transient failures (network, server, local I/O) are retried with backoff; permanent ones
    /// (bad spec, bad content, refused credentials) wait for a change of spec or content.
    pub fn is_transient(&self) -> bool {
        match self {
            SourceError::InSource { error, .. } => error.is_transient(),
            other => matches!(
                other,
                SourceError::Unreachable { .. }
                    | SourceError::Server { .. }
                    | SourceError::Io { .. }
                    | SourceError::Cancelled { .. }
            ),
        }
    }

    /// A refusal of `what` (an entry, a file, a download) whose `value` is over `budget`, which
    /// is `limit`.
    pub fn limit(
        what: impl Into<String>,
        value: impl Into<String>,
        budget: &str,
        limit: impl Into<String>,
    ) -> Self {
        SourceError::LimitExceeded {
            what: what.into(),
            value: value.into(),
            budget: budget.to_string(),
            limit: limit.into(),
        }
    }

    /// A copy of this error when it refuses content for what it is (unsafe, corrupt, too large,
    /// not a bundle): content under an immutable ref is refused the same way every time.
    pub(crate) fn content_refusal(&self) -> Option<SourceError> {
        Some(match self {
            SourceError::UnsafeContent { path, reason } => SourceError::UnsafeContent {
                path: path.clone(),
                reason: reason.clone(),
            },
            SourceError::BadArchive { reason } => SourceError::BadArchive {
                reason: reason.clone(),
            },
            SourceError::LimitExceeded {
                what,
                value,
                budget,
                limit,
            } => SourceError::LimitExceeded {
                what: what.clone(),
                value: value.clone(),
                budget: budget.clone(),
                limit: limit.clone(),
            },
            SourceError::NotABundle { what, reason } => SourceError::NotABundle {
                what: what.clone(),
                reason: reason.clone(),
            },
            _ => return None,
        })
    }

    /// This error naming `source` when it is a refusal of the source's content, which says
    /// nothing of the source by itself.
    fn in_source(self, source: &Source) -> Self {
        match self {
            SourceError::UnsafeContent { .. }
            | SourceError::BadArchive { .. }
            | SourceError::LimitExceeded { .. }
            | SourceError::Cancelled { .. } => SourceError::InSource {
                label: describe_source(source),
                error: Box::new(self),
            },
            other => other,
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        SourceError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Settings shared by every fetch (agent flags, not per-source spec).
#[derive(Clone, Debug)]
pub struct FetchOptions {
    /// Unpack limits per source.
    pub limits: Limits,
    /// Time allowed to open a connection.
    pub connect_timeout: Duration,
    /// Time allowed for one whole request or git operation.
    pub timeout: Duration,
    /// Redirects an HTTP source may follow.
    pub max_redirects: usize,
    /// Registries (`host:port`) spoken to over plain HTTP instead of HTTPS (local test registries).
    pub plain_http_registries: Vec<String>,
    /// Which loopback, link-local and local-repository locations sources may name.
    pub egress: crate::egress::EgressPolicy,
    /// What a registry may send besides blobs.
    pub registry: registry::RegistryLimits,
    /// Bytes of one git ref advertisement (ls-remote, and the start of each fetch).
    pub git_max_advertisement_bytes: u64,
}

/// The default of [`FetchOptions::git_max_advertisement_bytes`]: 32 MiB, a repository of a
/// few hundred thousand refs (GitHub advertises every pull request's two refs).
pub const DEFAULT_GIT_MAX_ADVERTISEMENT_BYTES: u64 = 32 << 20;

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            limits: Limits::default(),
            connect_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(300),
            max_redirects: 5,
            plain_http_registries: Vec::new(),
            egress: crate::egress::EgressPolicy::default(),
            registry: registry::RegistryLimits::DEFAULT,
            git_max_advertisement_bytes: DEFAULT_GIT_MAX_ADVERTISEMENT_BYTES,
        }
    }
}

/// What a fetch needs besides the spec: credentials and CA certificates read from Secrets by the
/// caller.
#[derive(Clone, Debug, Default)]
pub struct SourceSecrets {
    /// Credentials from `auth.secret`, if the source names one.
    pub credentials: Option<Credentials>,
    /// Extra PEM CA certificates to trust (image `caSecret`).
    pub ca_pem: Option<Vec<u8>>,
    /// The source's `verify` with its keys and trusted root, if it has one.
    pub verify: Option<verify::VerifyMaterial>,
}

/// A source resolved to an immutable ref, with its content in the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    /// Kind of the source.
    pub kind: SourceKind,
    /// The ref as written (image reference, git branch/tag/commit, URL).
    pub reference: String,
    /// The immutable ref: image digest reference, commit SHA, `sha256:` of HTTP content.
    pub resolved: String,
    /// Relative destination inside the bundle tree ("" is the root).
    pub destination: String,
    /// The cached content (read-only: it is shared by every reconcile of this ref).
    pub path: PathBuf,
    /// The version a range or chart repository resolved to (tag or chart version), if any.
    pub version: Option<String>,
    /// Who signed the content, for a source with `verify`.
    pub verified: Option<crate::api::VerifiedSignature>,
}

impl Fetched {
    /// How the source is named in messages: kind and ref as written.
    pub fn label(&self) -> String {
        format!("{} {}", kind_name(self.kind), self.reference)
    }

    /// The source as a revision records it.
    pub fn resolved_source(&self) -> crate::api::ResolvedSource {
        crate::api::ResolvedSource {
            kind: self.kind,
            reference: self.reference.clone(),
            resolved: self.resolved.clone(),
            version: self.version.clone(),
            verified: self.verified.clone(),
        }
    }
}

fn kind_name(kind: SourceKind) -> &'static str {
    match kind {
        SourceKind::Image => "image",
        SourceKind::Git => "git",
        SourceKind::Http => "http",
        SourceKind::HelmRepository => "helmRepository",
    }
}

/// How a source is named in messages before it is fetched: its kind and where it points.
pub fn describe_source(source: &Source) -> String {
    let target = match (
        &source.image,
        &source.git,
        &source.http,
        &source.helm_repository,
    ) {
        (Some(image), _, _, _) => image.reference.clone(),
        (_, Some(git), _, _) => {
            format!("{} {}", git.repository, git::ref_as_written(&git.reference))
        }
        (_, _, Some(http), _) => http.url.clone(),
        (_, _, _, Some(repo)) => format!("{} chart {}", repo.url, repo.chart),
        _ => String::new(),
    };
    format!("{} {target}", kind_name(source.kind))
}

/// The server a source is fetched from (`host[:port]`), for limits per server; `None` when the
/// spec names none that parses.
pub fn source_host(source: &Source) -> Option<String> {
    let from_url = |raw: &str| {
        // ssh://user@host:port/path and scp-like user@host:path both name a host.
        let url = url::Url::parse(raw).ok()?;
        let host = url.host_str()?.to_string();
        Some(match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host,
        })
    };
    match (
        &source.image,
        &source.git,
        &source.http,
        &source.helm_repository,
    ) {
        (Some(image), _, _, _) => image.reference.split('/').next().map(str::to_string),
        (_, Some(git), _, _) => from_url(&git.repository),
        (_, _, Some(http), _) => from_url(&http.url),
        (_, _, _, Some(repo)) => from_url(&repo.url),
        _ => None,
    }
}

/// Fetches sources of every kind through one content-addressed cache.
#[derive(Clone)]
pub struct Fetcher {
    cache: Arc<Cache>,
    options: FetchOptions,
    /// Registry clients, reused across fetches (see [`image`]).
    registry_clients: image::RegistryClients,
    /// Content verified under a source's `verify`, not verified again.
    verified: verify::VerifiedMemo,
}

impl Fetcher {
    /// A fetcher over `cache`.
    pub fn new(cache: Arc<Cache>, options: FetchOptions) -> Self {
        crate::tls::install_crypto_provider();
        Fetcher {
            cache,
            options,
            registry_clients: image::RegistryClients::default(),
            verified: verify::VerifiedMemo::default(),
        }
    }

    /// The registry clients this fetcher reuses.
    pub(crate) fn registry_clients(&self) -> &image::RegistryClients {
        &self.registry_clients
    }

    /// The verifications this fetcher remembers.
    pub(crate) fn verified(&self) -> &verify::VerifiedMemo {
        &self.verified
    }

    /// The cache this fetcher fills.
    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// The options this fetcher uses.
    pub fn options(&self) -> &FetchOptions {
        &self.options
    }

    /// Resolves `source` to an immutable ref and returns its cached content, downloading and
    /// unpacking it first when it is not cached. A pinned ref that is cached costs no network call.
    /// Every call is counted in the `pallet_fetches_total` metric by kind and result.
    pub async fn fetch(
        &self,
        source: &Source,
        secrets: &SourceSecrets,
    ) -> Result<Fetched, SourceError> {
        // One deadline over the whole fetch, whatever the kind: per-request timeouts alone let
        // a server that drips its body a byte at a time hold a fetch for ever. The unpack
        // threads it started stop with it: the guard raises their flag when this future ends or
        // is dropped.
        let deadline = self.options.timeout;
        let cancel = Cancel::new();
        let _stop_unpacking = cancel.on_drop();
        let fetching = self.fetch_uncounted(source, secrets, &cancel);
        let result = match tokio::time::timeout(deadline, fetching).await {
            Ok(result) => result.map_err(|e| e.in_source(source)),
            Err(_) => Err(SourceError::Unreachable {
                what: describe_source(source),
                detail: format!(
                    "the fetch did not complete within {}s (connect, answer and whole body)",
                    deadline.as_secs()
                ),
            }),
        };
        crate::metrics::METRICS.fetched(kind_name(source.kind), result.is_ok());
        result
    }

    async fn fetch_uncounted(
        &self,
        source: &Source,
        secrets: &SourceSecrets,
        cancel: &Cancel,
    ) -> Result<Fetched, SourceError> {
        if source.verify.is_some() != secrets.verify.is_some() {
            // The caller reads the keys a `verify` names; content is never taken unchecked.
            return Err(SourceError::Invalid(format!(
                "{}: its verify block and the keys read for it do not agree",
                describe_source(source)
            )));
        }
        // The version a range resolved to, for the kinds that take one.
        let mut version = None;
        let mut verified = None;
        let (reference, resolved, path) = match source.kind {
            SourceKind::Image => {
                let spec = source
                    .image
                    .as_ref()
                    .ok_or_else(|| SourceError::Invalid("kind image without `image`".into()))?;
                let pulled = image::fetch(self, spec, secrets, cancel).await?;
                version = pulled.tag;
                verified = pulled.verified;
                (spec.reference.clone(), pulled.resolved, pulled.path)
            }
            SourceKind::Git => {
                let spec = source
                    .git
                    .as_ref()
                    .ok_or_else(|| SourceError::Invalid("kind git without `git`".into()))?;
                let fetched = git::fetch(self, spec, secrets, cancel).await?;
                version = fetched.version;
                verified = fetched.verified;
                (
                    git::ref_as_written(&spec.reference),
                    fetched.commit,
                    fetched.path,
                )
            }
            SourceKind::Http => {
                let spec = source
                    .http
                    .as_ref()
                    .ok_or_else(|| SourceError::Invalid("kind http without `http`".into()))?;
                if secrets.verify.is_some() {
                    return Err(SourceError::Invalid(
                        "http sources have no signature to verify; pin them with sha256".into(),
                    ));
                }
                let (resolved, path) = http::fetch(self, spec, secrets, cancel).await?;
                (spec.url.clone(), resolved, path)
            }
            SourceKind::HelmRepository => {
                let spec = source.helm_repository.as_ref().ok_or_else(|| {
                    SourceError::Invalid("kind helmRepository without `helmRepository`".into())
                })?;
                if spec.url.starts_with("oci://") {
                    let chart = image::fetch_helm_oci(self, spec, secrets, cancel).await?;
                    version = chart.version;
                    verified = chart.verified;
                    (chart.reference, chart.resolved, chart.path)
                } else {
                    let chart = helm_repo::fetch(self, spec, secrets, cancel).await?;
                    version = Some(chart.version);
                    verified = chart.verified;
                    (helm_repo::reference(spec), chart.resolved, chart.path)
                }
            }
        };
        Ok(Fetched {
            kind: source.kind,
            reference,
            resolved,
            destination: source.destination.clone(),
            path,
            version,
            verified,
        })
    }
}

/// Copies every fetched source into `out` (created if missing) at its destination. Two sources
/// writing the same path (or one writing a file where another has a directory) is an error
/// naming both sources and the path. Files hardlinked together in a source stay hardlinked (one
/// copy, not one per link), symlinks are copied as symlinks, and nothing is written through a
/// symlink.
pub fn assemble(sources: &[Fetched], out: &Path) -> Result<(), SourceError> {
    fs::create_dir_all(out).map_err(|e| SourceError::io("create bundle tree", e))?;
    let mut state = Assembly {
        sources,
        out,
        owners: HashMap::new(),
        copies: HashMap::new(),
    };
    for (index, source) in sources.iter().enumerate() {
        let dest_rel = unpack::safe_relative(Path::new(&source.destination))?.unwrap_or_default();
        // A destination below a symlink another source made would write wherever it points.
        unpack::check_no_symlink_parents(out, &dest_rel.join("_"))?;
        state.copy_tree(index, &source.path, &dest_rel)?;
    }
    Ok(())
}

/// The state of one [`assemble`].
struct Assembly<'a> {
    sources: &'a [Fetched],
    out: &'a Path,
    /// Who wrote each file, and who created each directory entry as a non-directory.
    owners: HashMap<PathBuf, usize>,
    /// The first copy of each source file by (device, inode), so hardlinks are linked again.
    copies: HashMap<(u64, u64), PathBuf>,
}

impl Assembly<'_> {
    fn conflict(&self, index: usize, path: &Path, other: usize) -> SourceError {
        SourceError::Conflict {
            path: path.display().to_string(),
            first: self.sources[other].label(),
            second: self.sources[index].label(),
        }
    }

    fn copy_tree(&mut self, index: usize, from: &Path, rel: &Path) -> Result<(), SourceError> {
        // A directory where another source put a file (or a file's ancestors) conflicts too.
        for ancestor in rel.ancestors().filter(|a| !a.as_os_str().is_empty()) {
            if let Some(&other) = self.owners.get(ancestor) {
                if other != index {
                    return Err(self.conflict(index, ancestor, other));
                }
            }
        }
        let target = self.out.join(rel);
        fs::create_dir_all(&target).map_err(|e| SourceError::io("create bundle directory", e))?;
        let entries = fs::read_dir(from).map_err(|e| SourceError::io("read cached source", e))?;
        for entry in entries {
            let entry = entry.map_err(|e| SourceError::io("read cached source", e))?;
            let item_rel = rel.join(entry.file_name());
            let file_type = entry
                .file_type()
                .map_err(|e| SourceError::io("read cached source", e))?;
            if file_type.is_dir() {
                self.copy_tree(index, &entry.path(), &item_rel)?;
                continue;
            }
            if let Some(&other) = self.owners.get(&item_rel) {
                return Err(self.conflict(index, &item_rel, other));
            }
            let dst = self.out.join(&item_rel);
            if fs::symlink_metadata(&dst).is_ok() {
                // A directory some other source made at this path.
                let other = self
                    .owners
                    .iter()
                    .find(|(p, _)| p.starts_with(&item_rel))
                    .map(|(_, &o)| o)
                    .unwrap_or(index);
                return Err(self.conflict(index, &item_rel, other));
            }
            if file_type.is_symlink() {
                let target = fs::read_link(entry.path())
                    .map_err(|e| SourceError::io("read cached symlink", e))?;
                std::os::unix::fs::symlink(&target, &dst)
                    .map_err(|e| SourceError::io("create bundle symlink", e))?;
            } else {
                self.copy_file(&entry.path(), &dst)?;
            }
            self.owners.insert(item_rel, index);
        }
        Ok(())
    }

    /// Copies a file, or links it to the copy of a file it is a hardlink of.
    fn copy_file(&mut self, from: &Path, dst: &Path) -> Result<(), SourceError> {
        use std::os::unix::fs::MetadataExt;
        let meta =
            fs::symlink_metadata(from).map_err(|e| SourceError::io("read cached source", e))?;
        let key = (meta.dev(), meta.ino());
        if meta.nlink() > 1 {
            if let Some(first) = self.copies.get(&key) {
                return fs::hard_link(first, dst)
                    .map_err(|e| SourceError::io("link into bundle", e));
            }
        }
        fs::copy(from, dst).map_err(|e| SourceError::io("copy into bundle", e))?;
        if meta.nlink() > 1 {
            self.copies.insert(key, dst.to_path_buf());
        }
        Ok(())
    }
}

/// A bounded read's failure as a source error: over its limit, a refusal of `subject` (what
/// was read, e.g. "the manifest of image x") naming the budget; a broken connection, `what`
/// unreachable.
pub(crate) fn read_refusal(
    what: &str,
    subject: String,
    error: crate::bounded::ReadError,
) -> SourceError {
    match error {
        crate::bounded::ReadError::TooLarge { limit, .. } => SourceError::limit(
            subject,
            error.value(),
            limit.reader.budget(),
            format!("{} bytes", limit.max_bytes),
        ),
        crate::bounded::ReadError::Transport(detail) => SourceError::Unreachable {
            what: what.to_string(),
            detail,
        },
    }
}

/// Parses a semver range of a source spec (Masterminds rules) for `what`; a bad one is an
/// invalid spec naming it.
pub(crate) fn parse_range(
    what: &str,
    range: &str,
) -> Result<pallet_formats::semver::Range, SourceError> {
    pallet_formats::semver::Range::parse(range)
        .map_err(|e| SourceError::Invalid(format!("{what}: semver range {range:?}: {e}")))
}

/// The newest of `candidates` (tags, chart versions) satisfying `range`. Nothing matching is
/// `NoMatchingVersion`, naming the range and the newest candidates that are versions, so the user
/// sees what there is to choose from.
pub(crate) fn newest_matching<'a>(
    what: &str,
    range: &str,
    candidates: impl Iterator<Item = &'a str> + Clone,
) -> Result<String, SourceError> {
    let parsed = parse_range(what, range)?;
    if let Some((chosen, _)) = parsed.newest(candidates.clone()) {
        return Ok(chosen.to_string());
    }
    let mut versions: Vec<(pallet_formats::semver::Version, &str)> = candidates
        .filter_map(|c| {
            pallet_formats::semver::Version::parse(c)
                .ok()
                .map(|v| (v, c))
        })
        .collect();
    versions.sort_by(|a, b| b.0.compare(&a.0));
    let newest: Vec<&str> = versions.iter().take(5).map(|(_, c)| *c).collect();
    Err(SourceError::NoMatchingVersion {
        what: what.to_string(),
        range: range.to_string(),
        available: if newest.is_empty() {
            "no versions".into()
        } else {
            format!("newest: {}", newest.join(", "))
        },
    })
}

/// Hex SHA-256 of `data`.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    hex(&sha2::Sha256::digest(data))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetched(dir: &Path, reference: &str, destination: &str) -> Fetched {
        Fetched {
            kind: SourceKind::Http,
            reference: reference.into(),
            resolved: "sha256:x".into(),
            destination: destination.into(),
            path: dir.to_path_buf(),
            version: None,
            verified: None,
        }
    }

    #[test]
    fn sources_name_their_server() {
        let mut source: Source = serde_json::from_value(serde_json::json!({
            "kind": "image", "image": {"ref": "127.0.0.1:5000/team/app:v1"}
        }))
        .unwrap();
        assert_eq!(source_host(&source).as_deref(), Some("127.0.0.1:5000"));
        source = serde_json::from_value(serde_json::json!({
            "kind": "git", "git": {"repository": "ssh://git@git.example:2222/r.git", "ref": {"branch": "main"}}
        }))
        .unwrap();
        assert_eq!(source_host(&source).as_deref(), Some("git.example:2222"));
        source = serde_json::from_value(serde_json::json!({
            "kind": "helmRepository", "helmRepository": {"url": "https://charts.example/stable", "chart": "c"}
        }))
        .unwrap();
        assert_eq!(source_host(&source).as_deref(), Some("charts.example"));
    }

    #[test]
    fn assemble_places_sources_and_reports_conflicts() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("a");
        let b = tmp.path().join("b");
        fs::create_dir_all(a.join("crds")).unwrap();
        fs::create_dir_all(&b).unwrap();
        fs::write(a.join("crds/x.yaml"), "x").unwrap();
        fs::write(b.join("x.yaml"), "y").unwrap();
        let out = tmp.path().join("out1");
        assemble(&[fetched(&a, "A", ""), fetched(&b, "B", "extras")], &out).unwrap();
        assert_eq!(fs::read_to_string(out.join("crds/x.yaml")).unwrap(), "x");
        assert_eq!(fs::read_to_string(out.join("extras/x.yaml")).unwrap(), "y");

        let out = tmp.path().join("out2");
        let err = assemble(&[fetched(&a, "A", ""), fetched(&b, "B", "crds")], &out).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("http A") && msg.contains("http B") && msg.contains("crds/x.yaml"),
            "{msg}"
        );
        assert_eq!(err.category(), "SourceConflict");
    }
}
