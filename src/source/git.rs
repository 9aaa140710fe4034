//! Git sources: a commit, tag, branch or semver range of tags of a repository, optionally one
//! directory of it.
//!
//! A pinned commit that is cached costs nothing. A branch, tag or range is resolved with one
//! ls-remote (the ref advertisement; a range picks the newest matching tag from it), not a fetch; only a cache miss fetches, shallowly (depth 1) where the
//! server allows it. libgit2 is blocking, so every operation runs on the blocking pool under the
//! configured timeout, and its callbacks abort once the deadline has passed. Every connection
//! to a remote repository goes through a relay that counts what the server sends (the ref
//! advertisement, the pack) and closes it at its limit, at the deadline or when the fetch is
//! cancelled (see `git_relay`).

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use base64::Engine;
use git2::{CertificateCheckStatus, Cred, FetchOptions, Oid, RemoteCallbacks, RemoteRedirect};

use pallet_formats::archive::SharedAllowance;

use super::budget::{Budget, Cancel, TOTAL_BUDGET};
use super::git_relay::{Closed, Relay, RelayMeter, RelaySettings, Route};
use super::unpack;
use super::verify::git_objects::{self, GitKeys};
use super::verify::VerifyMaterial;
use super::{CredentialKind, Credentials, Fetcher, SourceError, SourceSecrets};
use crate::api::{GitReference, GitSource, VerifiedSignature};
use crate::bounded::Reader;

/// The ref as written, for status and messages.
pub fn ref_as_written(r: &GitReference) -> String {
    r.commit
        .clone()
        .or_else(|| r.tag.clone())
        .or_else(|| r.branch.clone())
        .or_else(|| r.semver.clone())
        .unwrap_or_default()
}

/// A git source resolved and fetched.
pub(crate) struct GitFetched {
    /// The commit SHA.
    pub commit: String,
    /// The cached content (only `directory` when one is given).
    pub path: PathBuf,
    /// The tag a semver range chose.
    pub version: Option<String>,
    /// Who signed the commit or tag, for a source with `verify`.
    pub verified: Option<VerifiedSignature>,
}

/// Resolves and fetches a git source, verifying its signatures first when it has `verify`.
pub(crate) async fn fetch(
    fetcher: &Fetcher,
    spec: &GitSource,
    secrets: &SourceSecrets,
    cancel: &Cancel,
) -> Result<GitFetched, SourceError> {
    let wanted = Wanted::from_spec(&spec.reference)?;
    let directory = spec.directory.clone().unwrap_or_default();
    let key = |commit: &str| {
        format!(
            "git-{}",
            super::sha256_hex(format!("{}\n{commit}\n{directory}", spec.repository).as_bytes())
        )
    };
    if let Wanted::Commit(c) = &wanted {
        let verified = match &secrets.verify {
            None => Some(None),
            Some(material) => fetcher.verified().get(material, c).map(Some),
        };
        if let (Some(verified), Some(path)) = (verified, fetcher.cache().lookup(&key(c))) {
            return Ok(GitFetched {
                commit: c.clone(),
                path,
                version: None,
                verified,
            });
        }
    }
    let opts = fetcher.options().clone();
    let (relay, remote) = connect(fetcher, spec, secrets, cancel).await?;
    let cache = fetcher.cache().clone();
    let scratch = cache.scratch_dir()?;
    let Listed {
        commit,
        tag: chosen_tag,
        tag_object,
    } = match &wanted {
        Wanted::Commit(c) => Listed {
            commit: c.clone(),
            tag: None,
            tag_object: None,
        },
        _ => {
            let (r, w, s) = (remote.clone(), wanted.clone(), scratch.join("ls-remote"));
            let listed = blocking(opts.timeout, &remote.url, move || r.ls_remote(&w, &s)).await;
            match listed {
                Ok(listed) => listed,
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&scratch);
                    return Err(e);
                }
            }
        }
    };
    let refname = match (&wanted, &chosen_tag) {
        (Wanted::Branch(b), _) => Some(format!("refs/heads/{b}")),
        (Wanted::Tag(t), _) | (Wanted::Semver(_), Some(t)) => Some(format!("refs/tags/{t}")),
        (Wanted::Commit(_), _) | (Wanted::Semver(_), None) => None,
    };
    // What must be verified and is not remembered: checked on the fetched objects before the
    // tree is written, so nothing unverified reaches the cache.
    let check = secrets.verify.as_ref().and_then(|material| {
        let memo_key = signed_ref(&commit, tag_object.as_deref());
        match fetcher.verified().get(material, &memo_key) {
            Some(known) => {
                *remote.verified.lock().unwrap_or_else(|p| p.into_inner()) = Some(known);
                None
            }
            None => Some(SignatureCheck {
                material: material.clone(),
                tag_object: tag_object.clone(),
                what: format!(
                    "git repository {} ref {}",
                    spec.repository,
                    ref_as_written(&spec.reference)
                ),
            }),
        }
    });
    let path = cache
        .get_or_populate(&key(&commit), |tree| {
            let (r, c, dir, s) = (
                remote.clone(),
                commit.clone(),
                directory.clone(),
                scratch.clone(),
            );
            let limits = opts.limits;
            let (refname, check) = (refname.clone(), check.clone());
            async move {
                blocking(opts.timeout, &r.url.clone(), move || {
                    let fetched = r.fetch_commit(&c, refname.as_deref(), &s.join("repo"))?;
                    if let Some(check) = &check {
                        // The tree written is the verified commit's, by construction.
                        let verified = r.check_signatures(&fetched, check)?;
                        return r.write_commit_tree(&fetched, verified, &dir, &tree, limits);
                    }
                    r.write_commit_tree(&fetched, fetched.oid, &dir, &tree, limits)
                })
                .await
            }
        })
        .await;
    let result = match (path, check) {
        (Ok(path), Some(check)) if remote.signer().is_none() => {
            let target = (commit.clone(), refname.clone(), scratch.join("verify"));
            check_cached(&remote, target, check, opts.timeout)
                .await
                .map(|_| path)
        }
        (result, _) => result,
    };
    let _ = std::fs::remove_dir_all(&scratch);
    drop(relay);
    let path = result?;
    let verified = remote.signer();
    if let Some(material) = &secrets.verify {
        let Some(signer) = &verified else {
            return Err(super::verify::failed(
                format!("git repository {}", spec.repository),
                &commit,
                "the signatures were not checked",
            ));
        };
        let memo_key = signed_ref(&commit, tag_object.as_deref());
        fetcher.verified().record(material, &memo_key, signer);
    }
    let version = chosen_tag.filter(|_| matches!(wanted, Wanted::Semver(_)));
    Ok(GitFetched {
        commit,
        path,
        version,
        verified,
    })
}

/// The remote `spec` names, reached through a relay counting what its server sends (see
/// `git_relay`) unless it is a local repository. The relay closes its connections when it is
/// dropped, at the end of the fetch.
async fn connect(
    fetcher: &Fetcher,
    spec: &GitSource,
    secrets: &SourceSecrets,
    cancel: &Cancel,
) -> Result<(Option<Relay>, Remote), SourceError> {
    let opts = fetcher.options();
    let server = check_location(&opts.egress, &spec.repository)?;
    let deadline = Instant::now() + opts.timeout;
    let (relay, route) = match &server {
        Some(server) => {
            let settings = RelaySettings {
                egress: opts.egress,
                cancel: cancel.clone(),
                deadline,
                connect_timeout: opts.connect_timeout,
            };
            let (relay, route) = Relay::start(&spec.repository, server.clone(), settings)
                .await
                .map_err(|e| SourceError::io("start the git relay", e))?;
            (Some(relay), route)
        }
        None => {
            let url = spec.repository.clone();
            (None, Route { url, proxy: None })
        }
    };
    let remote = Remote {
        url: spec.repository.clone(),
        route,
        server,
        meter: relay.as_ref().map(Relay::meter),
        credentials: secrets.credentials.clone(),
        deadline,
        cancel: cancel.clone(),
        allowance: fetcher.cache().unpack_allowance(),
        max_pack_bytes: opts.limits.max_total_bytes,
        max_advertisement_bytes: opts.git_max_advertisement_bytes,
        pack_bytes: Arc::new(AtomicU64::new(0)),
        verified: Arc::default(),
    };
    Ok((relay, remote))
}

/// Checks the signatures of a commit whose tree was cached already (or written by a concurrent
/// fetch): its objects are fetched once more, into `scratch`, for their signatures.
async fn check_cached(
    remote: &Remote,
    (commit, refname, scratch): (String, Option<String>, PathBuf),
    check: SignatureCheck,
    timeout: std::time::Duration,
) -> Result<(), SourceError> {
    let r = remote.clone();
    blocking(timeout, &remote.url, move || {
        let fetched = r.fetch_commit(&commit, refname.as_deref(), &scratch)?;
        r.check_signatures(&fetched, &check).map(|_| ())
    })
    .await
}

/// What a git signature check needs inside the blocking task.
#[derive(Clone)]
struct SignatureCheck {
    material: VerifyMaterial,
    /// The tag object a tag ref pointed at (the commit itself for a lightweight tag).
    tag_object: Option<String>,
    /// How the source is named in a refusal.
    what: String,
}

/// The memo key of verified git content: the commit, and the tag object when there is one.
fn signed_ref(commit: &str, tag_object: Option<&str>) -> String {
    match tag_object {
        Some(tag) => format!("{tag}^{commit}"),
        None => commit.to_string(),
    }
}

/// What one ref advertisement resolved.
struct Listed {
    /// The commit.
    commit: String,
    /// The tag a range chose.
    tag: Option<String>,
    /// The object a tag ref points at (a tag object when annotated).
    tag_object: Option<String>,
}

/// Refuses a local repository (path or `file://`) unless the egress policy allows it; the
/// server's host and port for a remote one. Its addresses are judged by the relay, which
/// connects in libgit2's place.
fn check_location(
    egress: &crate::egress::EgressPolicy,
    repository: &str,
) -> Result<Option<(String, u16)>, SourceError> {
    crate::egress::check_git_location(egress, repository).map_err(SourceError::Refused)
}

async fn blocking<T: Send + 'static>(
    timeout: std::time::Duration,
    url: &str,
    f: impl FnOnce() -> Result<T, SourceError> + Send + 'static,
) -> Result<T, SourceError> {
    match tokio::time::timeout(timeout, tokio::task::spawn_blocking(f)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(SourceError::io(
            "git task",
            std::io::Error::other(e.to_string()),
        )),
        Err(_) => Err(SourceError::Unreachable {
            what: url.to_string(),
            detail: format!("no answer within {timeout:?}"),
        }),
    }
}

#[derive(Clone, Debug)]
enum Wanted {
    Commit(String),
    Tag(String),
    Branch(String),
    /// A range, kept as written (it is parsed once checked valid in `from_spec`).
    Semver(String),
}

impl Wanted {
    fn from_spec(r: &GitReference) -> Result<Self, SourceError> {
        match (&r.commit, &r.tag, &r.branch, &r.semver) {
            (Some(c), None, None, None) => Ok(Wanted::Commit(c.to_ascii_lowercase())),
            (None, Some(t), None, None) => Ok(Wanted::Tag(t.clone())),
            (None, None, Some(b), None) => Ok(Wanted::Branch(b.clone())),
            (None, None, None, Some(range)) => {
                super::parse_range("git ref", range)?;
                Ok(Wanted::Semver(range.clone()))
            }
            _ => Err(SourceError::Invalid(
                "git ref: exactly one of commit, tag, branch or semver must be set".into(),
            )),
        }
    }
}

#[derive(Clone)]
struct Remote {
    /// The repository as the source names it (for messages).
    url: String,
    /// How libgit2 reaches it: through the relay for a remote repository.
    route: Route,
    /// The server's host and port (none for a local repository): SSH host keys are checked
    /// against them.
    server: Option<(String, u16)>,
    /// The relay's counters.
    meter: Option<RelayMeter>,
    credentials: Option<Credentials>,
    deadline: Instant,
    /// Raised when the fetch ends: the transfer and the tree writing stop.
    cancel: Cancel,
    /// What the unpacks in progress may hold together.
    allowance: Arc<SharedAllowance>,
    /// The most bytes of pack data a fetch may receive.
    max_pack_bytes: u64,
    /// The most bytes of one ref advertisement.
    max_advertisement_bytes: u64,
    /// Pack bytes received by the last transfer that went over `max_pack_bytes` (0: none did).
    pack_bytes: Arc<AtomicU64>,
    /// Who signed the fetched commit or tag, once checked.
    verified: Arc<std::sync::Mutex<Option<VerifiedSignature>>>,
}

impl Remote {
    /// Who signed the commit or tag, once checked.
    fn signer(&self) -> Option<VerifiedSignature> {
        self.verified
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Checks the fetched objects' signatures against the source's `verify`; the signer is
    /// kept, and the commit verified returned.
    fn check_signatures(
        &self,
        fetched: &FetchedCommit,
        check: &SignatureCheck,
    ) -> Result<Oid, SourceError> {
        let Some(spec) = &check.material.spec.git else {
            return Err(SourceError::Invalid(
                "verify: a git source takes verify.git".into(),
            ));
        };
        let keys = GitKeys::read(&check.material.keys)
            .map_err(|e| super::verify::unusable("verify.git.keys", e))?;
        let tag = check
            .tag_object
            .as_deref()
            .and_then(|t| Oid::from_str(t).ok());
        let started = Instant::now();
        let signer = git_objects::verify(&fetched.repo, fetched.oid, tag, spec.mode(), &keys)
            .map_err(|reason| {
                super::verify::failed(&check.what, fetched.oid.to_string(), reason)
            })?;
        tracing::info!(source = %check.what, commit = %fetched.oid, signer = %signer.summary(), took_ms = started.elapsed().as_millis() as u64, "verified");
        *self.verified.lock().unwrap_or_else(|p| p.into_inner()) = Some(signer);
        Ok(fetched.oid)
    }

    fn origin(&self) -> String {
        self.credentials
            .as_ref()
            .map(|c| c.origin.clone())
            .unwrap_or_else(|| "no credentials".into())
    }

    /// Callbacks supplying credentials once (libgit2 asks again after a refusal, forever),
    /// checking SSH host keys against known_hosts, and aborting after the deadline.
    fn callbacks<'a>(&'a self, tried: &'a Cell<bool>) -> RemoteCallbacks<'a> {
        let mut cb = RemoteCallbacks::new();
        let creds = self.credentials.clone();
        cb.credentials(move |_url, username, allowed| {
            if tried.replace(true) {
                return Err(git2::Error::new(
                    git2::ErrorCode::Auth,
                    git2::ErrorClass::Http,
                    "credentials refused",
                ));
            }
            match creds.as_ref().map(|c| &c.kind) {
                Some(CredentialKind::Basic { username, password }) => {
                    Cred::userpass_plaintext(username, password)
                }
                Some(CredentialKind::Token(token)) => Cred::userpass_plaintext("git", token),
                Some(CredentialKind::SshKey {
                    private_key,
                    passphrase,
                    ..
                }) if allowed.contains(git2::CredentialType::SSH_KEY) => Cred::ssh_key_from_memory(
                    username.unwrap_or("git"),
                    None,
                    private_key,
                    passphrase.as_deref(),
                ),
                _ => Err(git2::Error::new(
                    git2::ErrorCode::Auth,
                    git2::ErrorClass::Http,
                    "authentication required and no usable credentials",
                )),
            }
        });
        let known_hosts = match self.credentials.as_ref().map(|c| &c.kind) {
            Some(CredentialKind::SshKey { known_hosts, .. }) => Some(known_hosts.clone()),
            _ => None,
        };
        // libgit2 connects to the relay: the host key is the original server's.
        let server = self.server.clone();
        cb.certificate_check(move |cert, host| {
            let Some(hostkey) = cert.as_hostkey().and_then(|h| h.hostkey()) else {
                // TLS: libgit2's own verification against the system roots.
                return Ok(CertificateCheckStatus::CertificatePassthrough);
            };
            let known = known_hosts.as_deref().unwrap_or("");
            let (host, port) = match &server {
                Some((host, port)) => (host.as_str(), Some(*port)),
                None => (host, None),
            };
            if host_key_known(known, host, port, hostkey) {
                Ok(CertificateCheckStatus::CertificateOk)
            } else {
                Err(git2::Error::new(
                    git2::ErrorCode::Certificate,
                    git2::ErrorClass::Ssh,
                    format!("the host key of {host} is not in known_hosts"),
                ))
            }
        });
        let (deadline, cancel) = (self.deadline, self.cancel.clone());
        let (max, over) = (self.max_pack_bytes, self.pack_bytes.clone());
        cb.transfer_progress(move |progress| {
            let received = progress.received_bytes() as u64;
            if received > max {
                over.store(received, Ordering::Relaxed);
                return false;
            }
            Instant::now() < deadline && !cancel.is_cancelled()
        });
        cb
    }

    /// The refusal of a pack that grew past the limit, if the last transfer stopped for that.
    fn pack_refusal(&self) -> Option<SourceError> {
        let received = self.pack_bytes.load(Ordering::Relaxed);
        (received > 0).then(|| {
            SourceError::limit(
                format!("the pack of git repository {}", self.url),
                format!("more than {received} bytes received"),
                TOTAL_BUDGET,
                format!("{} bytes", self.max_pack_bytes),
            )
        })
    }

    /// What the relay's closing means, if it closed the operation's connections.
    fn relay_refusal(&self) -> Option<SourceError> {
        let meter = self.meter.as_ref()?;
        let what = format!("git repository {}", self.url);
        if let Some(over) = meter.over_limit() {
            let subject = match over {
                crate::bounded::ReadError::TooLarge { limit, .. }
                    if limit.reader == Reader::GitAdvertisement =>
                {
                    format!("the ref advertisement of {what}")
                }
                _ => format!("the fetch of {what}"),
            };
            return Some(super::read_refusal(&what, subject, over));
        }
        Some(match meter.closed()? {
            Closed::OverLimit(_) => return None,
            Closed::Egress(refused) => SourceError::Refused(format!("{what}: {refused}")),
            Closed::OtherServer(why) => SourceError::Refused(format!("{what}: {why}")),
            Closed::Unreachable(detail) => SourceError::Unreachable { what, detail },
            Closed::Cancelled => SourceError::Cancelled {
                what: format!("fetching {what}"),
            },
            Closed::Deadline => SourceError::Unreachable {
                what,
                detail: "timed out".into(),
            },
        })
    }

    /// The relay's limit for an ls-remote: the ref advertisement.
    fn advertisement_limit(&self) -> crate::bounded::Limit {
        Reader::GitAdvertisement.limit(self.max_advertisement_bytes)
    }

    /// The relay's limit for a fetch: its advertisement and the pack (the pack itself is
    /// bounded more tightly by the transfer callback), with room for the protocol's framing.
    fn fetch_limit(&self) -> crate::bounded::Limit {
        let pack = self.max_pack_bytes.saturating_add(self.max_pack_bytes / 64);
        Reader::GitPack.limit(
            pack.saturating_add(self.max_advertisement_bytes)
                .saturating_add(1 << 20),
        )
    }

    /// libgit2's proxy settings: the relay, for HTTP(S) repositories.
    fn proxy_options(&self) -> git2::ProxyOptions<'_> {
        let mut proxy = git2::ProxyOptions::new();
        if let Some(url) = &self.route.proxy {
            proxy.url(url);
        }
        proxy
    }

    fn map_err(&self, tried: bool, e: &git2::Error) -> SourceError {
        if let Some(refusal) = self.pack_refusal() {
            return refusal;
        }
        if let Some(refusal) = self.relay_refusal() {
            return refusal;
        }
        let what = format!("git repository {}", self.url);
        let msg = e.message().to_string();
        let lower = msg.to_ascii_lowercase();
        // libgit2 replaces the message of a refusing certificate_check callback with its own
        // ("invalid or unknown remote ssh hostkey"), so say here what was checked against what.
        if e.code() == git2::ErrorCode::Certificate && e.class() == git2::ErrorClass::Ssh
            || lower.contains("ssh hostkey")
        {
            return SourceError::Unauthorized {
                what,
                credentials: self.origin(),
                detail: format!("the server's SSH host key is not in known_hosts ({msg})"),
            };
        }
        if e.code() == git2::ErrorCode::Auth
            || e.class() == git2::ErrorClass::Ssh && lower.contains("auth")
            || lower.contains("401")
            || lower.contains("403")
            || (tried && lower.contains("credentials"))
        {
            return SourceError::Unauthorized {
                what,
                credentials: self.origin(),
                detail: msg,
            };
        }
        if e.code() == git2::ErrorCode::Certificate {
            return SourceError::Unauthorized {
                what,
                credentials: self.origin(),
                detail: msg,
            };
        }
        if lower.contains("404") || lower.contains("not found") || lower.contains("not exist") {
            return SourceError::NotFound { what };
        }
        if e.class() == git2::ErrorClass::Net
            || e.class() == git2::ErrorClass::Os
            || lower.contains("failed to connect")
            || lower.contains("connection refused")
        {
            return SourceError::Unreachable { what, detail: msg };
        }
        if e.code() == git2::ErrorCode::User {
            return SourceError::Unreachable {
                what,
                detail: "timed out".into(),
            };
        }
        SourceError::Server { what, detail: msg }
    }

    /// One ref advertisement: the commit a branch or tag points at (peeled for annotated tags),
    /// and for a range the newest tag satisfying it.
    /// `scratch` holds an empty repository whose configuration refuses redirects to another
    /// host (a remote without a repository follows them on the first request).
    fn ls_remote(&self, wanted: &Wanted, scratch: &Path) -> Result<Listed, SourceError> {
        let repo = scratch_repository(scratch)?;
        let mut remote = repo.remote_anonymous(&self.route.url).map_err(|e| {
            SourceError::Invalid(format!("git repository {}: {}", self.url, e.message()))
        })?;
        if let Some(meter) = &self.meter {
            meter.begin(self.advertisement_limit());
        }
        let tried = Cell::new(false);
        let conn = remote
            .connect_auth(
                git2::Direction::Fetch,
                Some(self.callbacks(&tried)),
                Some(self.proxy_options()),
            )
            .map_err(|e| self.map_err(tried.get(), &e))?;
        let heads = conn.list().map_err(|e| self.map_err(tried.get(), &e))?;
        let mut chosen = None;
        let (name, peeled) = match wanted {
            Wanted::Branch(b) => (format!("refs/heads/{b}"), None),
            Wanted::Tag(t) => (
                format!("refs/tags/{t}"),
                Some(format!("refs/tags/{t}^{{}}")),
            ),
            Wanted::Commit(c) => {
                return Ok(Listed {
                    commit: c.clone(),
                    tag: None,
                    tag_object: None,
                })
            }
            Wanted::Semver(range) => {
                let tags: Vec<&str> = heads
                    .iter()
                    .filter_map(|h| h.name().strip_prefix("refs/tags/"))
                    .filter(|t| !t.ends_with("^{}"))
                    .collect();
                let what = format!("git repository {}", self.url);
                let tag = super::newest_matching(&what, range, tags.iter().copied())?;
                chosen = Some(tag.clone());
                (
                    format!("refs/tags/{tag}"),
                    Some(format!("refs/tags/{tag}^{{}}")),
                )
            }
        };
        let find = |n: &str| {
            heads
                .iter()
                .find(|h| h.name() == n)
                .map(|h| h.oid().to_string())
        };
        let commit = peeled
            .as_deref()
            .and_then(find)
            .or_else(|| find(&name))
            .ok_or_else(|| SourceError::NotFound {
                what: format!("{name} in git repository {}", self.url),
            })?;
        // What the tag ref itself points at: the tag object of an annotated tag.
        let tag_object = peeled.as_ref().and_then(|_| find(&name));
        Ok(Listed {
            commit,
            tag: chosen,
            tag_object,
        })
    }

    /// Fetches `commit` (through `refname` when given) into a scratch bare repository.
    fn fetch_commit(
        &self,
        commit: &str,
        refname: Option<&str>,
        repo_dir: &Path,
    ) -> Result<FetchedCommit, SourceError> {
        let oid = Oid::from_str(commit)
            .map_err(|_| SourceError::Invalid(format!("git commit {commit} is not a SHA")))?;
        let repo = scratch_repository(repo_dir)?;
        let mut remote = repo.remote_anonymous(&self.route.url).map_err(|e| {
            SourceError::Invalid(format!("git repository {}: {}", self.url, e.message()))
        })?;
        if let Some(meter) = &self.meter {
            meter.begin(self.fetch_limit());
        }
        // Ask for just what is needed, shallow. When that does not yield the commit (a server
        // refusing unadvertised wants, or a branch that moved since ls-remote), a second, full
        // fetch of branches and tags finds it if it is still reachable.
        let tried = Cell::new(false);
        let mut fo = FetchOptions::new();
        fo.remote_callbacks(self.callbacks(&tried))
            .proxy_options(self.proxy_options())
            .follow_redirects(RemoteRedirect::None);
        // libgit2's local transport does not fetch shallow.
        let local = crate::egress::git_location(&self.url) == Ok(crate::egress::GitLocation::Local);
        if !local {
            fo.depth(1);
        }
        // Branches and tags are fetched by name (servers advertise those); a bare commit only
        // works where the server allows unadvertised wants.
        let want = refname.unwrap_or(commit);
        let first = remote.fetch(&[format!("+{want}:refs/pallet/want")], Some(&mut fo), None);
        if repo.find_commit(oid).is_err() {
            if let Err(e) = &first {
                let err = self.map_err(tried.get(), e);
                if matches!(
                    err,
                    SourceError::Unauthorized { .. }
                        | SourceError::Unreachable { .. }
                        | SourceError::LimitExceeded { .. }
                ) {
                    return Err(err);
                }
            }
            let tried = Cell::new(false);
            if let Some(meter) = &self.meter {
                meter.begin(self.fetch_limit());
            }
            let mut fo = FetchOptions::new();
            fo.remote_callbacks(self.callbacks(&tried))
                .proxy_options(self.proxy_options())
                .follow_redirects(RemoteRedirect::None);
            remote
                .fetch(
                    &[
                        "+refs/heads/*:refs/remotes/origin/*",
                        "+refs/tags/*:refs/tags/*",
                    ],
                    Some(&mut fo),
                    None,
                )
                .map_err(|e| self.map_err(tried.get(), &e))?;
        }
        drop(remote);
        if repo.find_commit(oid).is_err() {
            return Err(SourceError::NotFound {
                what: format!("commit {commit} in git repository {}", self.url),
            });
        }
        Ok(FetchedCommit { repo, oid })
    }

    /// Writes commit `oid`'s tree (or `directory` of it) into `tree`.
    fn write_commit_tree(
        &self,
        fetched: &FetchedCommit,
        oid: Oid,
        directory: &str,
        tree: &Path,
        limits: super::Limits,
    ) -> Result<(), SourceError> {
        let repo = &fetched.repo;
        let commit = oid.to_string();
        let commit_obj = repo.find_commit(oid).map_err(|_| SourceError::NotFound {
            what: format!("commit {commit} in git repository {}", self.url),
        })?;
        let root = commit_obj.tree().map_err(|e| SourceError::Server {
            what: self.url.clone(),
            detail: e.message().to_string(),
        })?;
        let start = if directory.trim_matches('/').is_empty() {
            root
        } else {
            let entry = root
                .get_path(Path::new(directory.trim_matches('/')))
                .map_err(|_| SourceError::NotFound {
                    what: format!("directory {directory} at commit {commit} of {}", self.url),
                })?;
            let obj = entry.to_object(repo).map_err(|e| SourceError::Server {
                what: self.url.clone(),
                detail: e.message().to_string(),
            })?;
            obj.into_tree().map_err(|_| SourceError::NotABundle {
                what: format!("git repository {}", self.url),
                reason: format!("{directory} is not a directory at commit {commit}"),
            })?
        };
        let mut budget = Budget::drawing_on(limits, &self.cancel, Some(self.allowance.clone()));
        let mut links = Vec::new();
        write_tree(repo, &start, Path::new(""), tree, &mut budget, &mut links)?;
        unpack::verify_tree_symlinks(tree, &links)
    }
}

/// A commit fetched into a scratch repository.
struct FetchedCommit {
    repo: git2::Repository,
    oid: Oid,
}

/// The longest symlink target read from a blob (the system's PATH_MAX).
const MAX_LINK_TARGET: u64 = 4096;

/// A blob's size from its object header, charged before the blob is loaded: loading it puts all
/// of it in memory.
fn blob_size(
    repo: &git2::Repository,
    rel: &Path,
    id: Oid,
    budget: &Budget,
) -> Result<u64, SourceError> {
    let odb = repo.odb().map_err(|e| SourceError::Server {
        what: rel.display().to_string(),
        detail: e.message().to_string(),
    })?;
    let (size, _) = odb.read_header(id).map_err(|e| SourceError::Server {
        what: rel.display().to_string(),
        detail: e.message().to_string(),
    })?;
    budget.check_file_size(rel, size as u64)?;
    Ok(size as u64)
}

fn write_tree(
    repo: &git2::Repository,
    t: &git2::Tree<'_>,
    prefix: &Path,
    dest: &Path,
    budget: &mut Budget,
    links: &mut Vec<PathBuf>,
) -> Result<(), SourceError> {
    for entry in t.iter() {
        let Ok(name) = entry.name() else {
            return Err(SourceError::UnsafeContent {
                path: prefix.display().to_string(),
                reason: "a tree entry whose name is not UTF-8".into(),
            });
        };
        let rel = prefix.join(name);
        let bad = |e: git2::Error| SourceError::Server {
            what: rel.display().to_string(),
            detail: e.message().to_string(),
        };
        match entry.filemode() {
            0o040000 => {
                budget.entry(&rel)?;
                let sub = entry.to_object(repo).map_err(bad)?;
                let sub = sub.as_tree().ok_or_else(|| SourceError::BadArchive {
                    reason: format!("{} is not a tree", rel.display()),
                })?;
                unpack::safe_relative(&rel)?;
                unpack::check_no_symlink_parents(dest, &rel)?;
                std::fs::create_dir_all(dest.join(&rel)).map_err(|e| {
                    SourceError::io(format!("create directory {}", rel.display()), e)
                })?;
                write_tree(repo, sub, &rel, dest, budget, links)?;
            }
            0o100644 | 0o100755 | 0o100664 => {
                blob_size(repo, &rel, entry.id(), budget)?;
                let blob = repo.find_blob(entry.id()).map_err(bad)?;
                let exec = entry.filemode() == 0o100755;
                unpack::write_tree_file(dest, &rel, blob.content(), exec, budget)?;
            }
            0o120000 => {
                let size = blob_size(repo, &rel, entry.id(), budget)?;
                if size > MAX_LINK_TARGET {
                    return Err(SourceError::UnsafeContent {
                        path: rel.display().to_string(),
                        reason: format!(
                            "symlink target of {size} bytes (a path is at most {MAX_LINK_TARGET})"
                        ),
                    });
                }
                let blob = repo.find_blob(entry.id()).map_err(bad)?;
                let target = std::str::from_utf8(blob.content()).map_err(|_| {
                    SourceError::UnsafeContent {
                        path: rel.display().to_string(),
                        reason: "symlink target is not UTF-8".into(),
                    }
                })?;
                if let Some(l) = unpack::write_tree_symlink(dest, &rel, Path::new(target), budget)?
                {
                    links.push(l);
                }
            }
            // Submodules (gitlinks) are not fetched: their content is another repository.
            _ => {}
        }
    }
    Ok(())
}

/// An empty bare repository at `dir` whose remotes never follow a redirect to another host
/// (libgit2 follows one on the first request by default).
fn scratch_repository(dir: &Path) -> Result<git2::Repository, SourceError> {
    let scratch_error = |e: git2::Error| {
        SourceError::io(
            "create scratch repository",
            std::io::Error::other(e.message().to_string()),
        )
    };
    let repo = git2::Repository::init_bare(dir).map_err(scratch_error)?;
    repo.config()
        .and_then(|mut config| config.set_bool("http.followRedirects", false))
        .map_err(scratch_error)?;
    Ok(repo)
}

/// Whether known_hosts lists `hostkey` for `host` (or `[host]:port`). Hashed entries (`|1|…`)
/// are not supported yet and never match.
fn host_key_known(known_hosts: &str, host: &str, port: Option<u16>, hostkey: &[u8]) -> bool {
    let bracketed = port.filter(|p| *p != 22).map(|p| format!("[{host}]:{p}"));
    known_hosts.lines().any(|line| {
        let mut parts = line.split_whitespace();
        let (Some(hosts), Some(_kind), Some(key)) = (parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        if hosts.starts_with('#') || hosts.starts_with('@') {
            return false;
        }
        let matches_host = hosts.split(',').any(|h| match &bracketed {
            Some(b) => h == b,
            None => h == host,
        });
        matches_host
            && base64::engine::general_purpose::STANDARD
                .decode(key)
                .is_ok_and(|k| k == hostkey)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_hosts_matching() {
        let key = base64::engine::general_purpose::STANDARD.encode(b"KEY");
        let kh = format!("# comment\nexample.com,1.2.3.4 ssh-ed25519 {key}\n[127.0.0.1]:2222 ssh-ed25519 {key}\n");
        assert!(host_key_known(&kh, "example.com", None, b"KEY"));
        assert!(!host_key_known(&kh, "example.com", None, b"OTHER"));
        assert!(host_key_known(&kh, "127.0.0.1", Some(2222), b"KEY"));
        assert!(!host_key_known(&kh, "127.0.0.1", None, b"KEY"));
    }
}
