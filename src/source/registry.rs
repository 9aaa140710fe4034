//! The agent's client of the OCI distribution API, for pulls: manifest digests, manifests and
//! indexes, tag lists, referrers and blobs, with the registry's token or basic authentication.
//!
//! Every answer is read through [`crate::bounded`]: documents (manifests, indexes, tag list
//! pages, referrers) under the registry document limit, token answers and error answers under
//! small fixed limits, blobs under the caller's limit, each counted as it arrives and checked
//! against its digest before it is used. The client connects through the egress policy's
//! resolver and judges every redirect (blob downloads are redirected to storage hosts;
//! reqwest drops the credentials on a hop to another host).
//!
//! Authentication follows the distribution spec: a request is sent with what is known for its
//! registry and scope; a 401 names the scheme in `WWW-Authenticate`: `Basic` is answered with
//! the source's username and password, `Bearer realm=…,service=…,scope=…` with a token from the
//! realm (asked with the username and password, or anonymously), remembered until it expires.
//! Credentials given as a token are sent as they are.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oci_client::manifest::{OciImageIndex, OciImageManifest, OciManifest};
use reqwest::header::{ACCEPT, AUTHORIZATION, LINK, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode};
use serde::Deserialize;

use super::SourceError;
use crate::bounded::{self, Limit, ReadError, Reader};

/// Media types asked for when a manifest is fetched.
pub(crate) const MANIFEST_TYPES: &[&str] = &[
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];
/// Media types of an image index.
const INDEX_TYPES: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];
/// A token server's answer read at most.
const MAX_TOKEN_BYTES: u64 = 256 << 10;
/// An error answer read at most (for its codes and message).
const MAX_ERROR_BYTES: u64 = 64 << 10;
/// The part of an error message kept for a condition.
const ERROR_MESSAGE_CHARS: usize = 200;
/// A token without `expires_in` is used this long (the distribution spec's default).
const DEFAULT_TOKEN_SECONDS: u64 = 60;
/// Tokens remembered per client at most (one per repository pulled).
const TOKENS_KEPT: usize = 256;

/// What a registry may send, besides blobs (whose limit the caller gives).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegistryLimits {
    /// Bytes of one document: a manifest, an index, a page of a tag list, a referrers list.
    pub max_document_bytes: u64,
    /// Tags read from one repository's tag list, over all its pages.
    pub max_tags: usize,
}

impl RegistryLimits {
    /// The defaults: 4 MiB documents (containerd's bound on manifests, the size registries
    /// must accept at least), 100,000 tags.
    pub const DEFAULT: RegistryLimits = RegistryLimits {
        max_document_bytes: 4 << 20,
        max_tags: 100_000,
    };
}

impl Default for RegistryLimits {
    fn default() -> Self {
        RegistryLimits::DEFAULT
    }
}

/// The budget named when a tag list has too many tags.
pub const TAGS_BUDGET: &str = "the tag list limit (--registry-max-tags)";

/// The source's credentials, as the registry is offered them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Auth {
    /// None.
    Anonymous,
    /// A username and password: for a `Basic` challenge, or to ask the token realm.
    Basic(String, String),
    /// A token, sent as `Bearer` as it is.
    Bearer(String),
}

/// A repository of a registry.
#[derive(Clone, Copy, Debug)]
pub struct Repo<'a> {
    /// `host[:port]` (Docker Hub as `index.docker.io`).
    pub registry: &'a str,
    /// The repository's name.
    pub name: &'a str,
}

/// A token or basic authorization, and until when it may be used.
#[derive(Clone)]
struct Authorization {
    header: String,
    until: Option<Instant>,
}

/// A registry client for one set of TLS settings and credentials.
#[derive(Clone)]
pub struct Registry {
    http: reqwest::Client,
    egress: crate::egress::EgressPolicy,
    auth: Auth,
    /// Where the credentials came from, for messages ("no credentials" without).
    cred_origin: String,
    plain_http: Arc<Vec<String>>,
    limits: RegistryLimits,
    /// Authorizations learnt from challenges, by registry and scope.
    known: Arc<Mutex<HashMap<(String, String), Authorization>>>,
}

/// A parsed `WWW-Authenticate` challenge.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Challenge {
    /// `basic` or `bearer` (lower case).
    pub scheme: String,
    /// Its parameters (`realm`, `service`, `scope`), names in lower case.
    pub params: Vec<(String, String)>,
}

impl Challenge {
    fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses the first challenge of a `WWW-Authenticate` value: `Scheme k="v", k2=v2`. Quoted
/// values may hold commas and escaped quotes.
pub(crate) fn parse_challenge(text: &str) -> Option<Challenge> {
    let text = text.trim();
    let (scheme, rest) = match text.split_once(char::is_whitespace) {
        Some((scheme, rest)) => (scheme, rest),
        None => (text, ""),
    };
    if scheme.is_empty() {
        return None;
    }
    let mut params = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let name: String = chars
            .by_ref()
            .take_while(|c| *c != '=')
            .collect::<String>()
            .trim()
            .to_ascii_lowercase();
        if name.is_empty() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            value = chars
                .by_ref()
                .take_while(|c| *c != ',')
                .collect::<String>()
                .trim()
                .to_string();
        }
        params.push((name, value));
    }
    Some(Challenge {
        scheme: scheme.to_ascii_lowercase(),
        params,
    })
}

/// The `rel="next"` target of a `Link` header, if any.
pub(crate) fn next_link(value: &str) -> Option<&str> {
    value.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        params
            .split(';')
            .any(|p| {
                let p = p.trim().replace(' ', "");
                p == "rel=\"next\"" || p == "rel=next"
            })
            .then_some(target)
    })
}

/// A token server's answer.
#[derive(Deserialize)]
struct TokenAnswer {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    access_token: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// An error answer's codes and messages (the distribution spec's envelope).
#[derive(Deserialize, Default)]
struct ErrorEnvelope {
    #[serde(default)]
    errors: Vec<ErrorEntry>,
}

#[derive(Deserialize)]
struct ErrorEntry {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
}

/// A page of a tag list.
#[derive(Deserialize)]
struct TagPage {
    #[serde(default)]
    tags: Option<Vec<String>>,
}

impl Registry {
    /// A client over `http` (built with the source's TLS settings and the egress policy),
    /// offering `auth` (from `cred_origin`).
    pub(crate) fn new(
        http: reqwest::Client,
        options: &super::FetchOptions,
        auth: Auth,
        cred_origin: String,
    ) -> Registry {
        Registry {
            http,
            egress: options.egress,
            auth,
            cred_origin,
            plain_http: Arc::new(options.plain_http_registries.clone()),
            limits: options.registry,
            known: Arc::default(),
        }
    }

    fn base(&self, registry: &str) -> String {
        let scheme = if self.plain_http.iter().any(|r| r == registry) {
            "http"
        } else {
            "https"
        };
        format!("{scheme}://{registry}")
    }

    /// The URL of `path` of `repo`'s API (`/v2/<name>/<path>`).
    fn url(&self, repo: Repo<'_>, path: &str) -> String {
        format!("{}/v2/{}/{path}", self.base(repo.registry), repo.name)
    }

    fn document(&self, reader: Reader) -> Limit {
        reader.limit(self.limits.max_document_bytes)
    }

    /// The digest `reference` (a tag or digest) names: from `Docker-Content-Digest` of a HEAD,
    /// else the SHA-256 of the manifest (read under the document limit).
    pub(crate) async fn resolve(
        &self,
        repo: Repo<'_>,
        reference: &str,
        what: &str,
    ) -> Result<String, SourceError> {
        let url = self.url(repo, &format!("manifests/{reference}"));
        let response = self
            .send(repo, Method::HEAD, &url, MANIFEST_TYPES, what)
            .await?;
        if let Some(digest) = response
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .filter(|d| d.starts_with("sha256:") && d.len() == 71)
        {
            return Ok(digest.to_ascii_lowercase());
        }
        let response = self
            .send(repo, Method::GET, &url, MANIFEST_TYPES, what)
            .await?;
        let body = read(response, self.document(Reader::RegistryManifest), what).await?;
        Ok(format!("sha256:{}", super::sha256_hex(&body)))
    }

    /// The manifest `reference` names, its bytes checked against the digest when it is one;
    /// `None` when the registry has none.
    pub(crate) async fn manifest_bytes(
        &self,
        repo: Repo<'_>,
        reference: &str,
        accept: &[&str],
        what: &str,
    ) -> Result<Option<Vec<u8>>, SourceError> {
        let url = self.url(repo, &format!("manifests/{reference}"));
        let response = match self.send(repo, Method::GET, &url, accept, what).await {
            Ok(response) => response,
            Err(SourceError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let body = read(response, self.document(Reader::RegistryManifest), what).await?;
        if let Some(expected) = reference.strip_prefix("sha256:") {
            check_digest(what, &format!("sha256:{expected}"), &body)?;
        } else if reference.contains(':') {
            return Err(SourceError::Invalid(format!(
                "{what}: digest {reference} is not sha256"
            )));
        }
        Ok(Some(body))
    }

    /// The image manifest or index `digest` names (parsed; the schema version and media type
    /// checked).
    pub(crate) async fn manifest(
        &self,
        repo: Repo<'_>,
        digest: &str,
        what: &str,
    ) -> Result<OciManifest, SourceError> {
        let body = self
            .manifest_bytes(repo, digest, MANIFEST_TYPES, what)
            .await?
            .ok_or_else(|| SourceError::NotFound {
                what: what.to_string(),
            })?;
        parse_manifest(&body).map_err(|reason| SourceError::NotABundle {
            what: what.to_string(),
            reason,
        })
    }

    /// Every tag of the repository, following the list's pages (its `Link` header, else `last`)
    /// up to the tag limit.
    pub(crate) async fn tags(
        &self,
        repo: Repo<'_>,
        what: &str,
    ) -> Result<Vec<String>, SourceError> {
        let first = self.url(repo, &format!("tags/list?n={TAGS_PAGE}"));
        let mut url = first.clone();
        let mut tags: Vec<String> = Vec::new();
        for _ in 0..MAX_TAG_PAGES {
            let response = self.send(repo, Method::GET, &url, &[], what).await?;
            let link = response
                .headers()
                .get(LINK)
                .and_then(|v| v.to_str().ok())
                .and_then(next_link)
                .map(str::to_string);
            let body = read(response, self.document(Reader::RegistryTagList), what).await?;
            let page: TagPage = serde_json::from_slice(&body).map_err(|e| SourceError::Server {
                what: what.to_string(),
                detail: format!("the tag list does not parse: {e}"),
            })?;
            let page = page.tags.unwrap_or_default();
            let last = tags.last().cloned();
            let next = page.last().cloned();
            let page_len = page.len();
            tags.extend(page);
            if tags.len() > self.limits.max_tags {
                return Err(SourceError::limit(
                    format!("the tag list of {what}"),
                    format!("more than {} tags", self.limits.max_tags),
                    TAGS_BUDGET,
                    format!("{} tags", self.limits.max_tags),
                ));
            }
            url = match (link, next) {
                (Some(link), _) => match same_origin_link(&url, &link) {
                    Some(next) => next,
                    None => break,
                },
                (None, Some(next)) if !is_last_page(page_len, Some(&next), last.as_deref()) => {
                    format!("{first}&last={}", url_escape(&next))
                }
                _ => break,
            };
        }
        tags.sort();
        tags.dedup();
        Ok(tags)
    }

    /// The referrers of `digest` (the referrers API, else its `sha256-<hex>` tag); empty when
    /// there are none.
    pub(crate) async fn referrers(
        &self,
        repo: Repo<'_>,
        digest: &str,
        what: &str,
    ) -> Result<OciImageIndex, SourceError> {
        let url = self.url(repo, &format!("referrers/{digest}"));
        let body = match self.send(repo, Method::GET, &url, INDEX_TYPES, what).await {
            Ok(response) => {
                Some(read(response, self.document(Reader::RegistryReferrers), what).await?)
            }
            // No referrers API: the tag schema's index, if any.
            Err(SourceError::NotFound { .. }) => {
                let tag = digest.replace(':', "-");
                self.manifest_bytes(repo, &tag, INDEX_TYPES, what).await?
            }
            Err(e) => return Err(e),
        };
        let Some(body) = body else {
            return Ok(empty_index());
        };
        serde_json::from_slice(&body).map_err(|e| SourceError::Server {
            what: what.to_string(),
            detail: format!("the referrers index does not parse: {e}"),
        })
    }

    /// Blob `digest`, in memory under `limit`, checked against its digest.
    pub(crate) async fn blob(
        &self,
        repo: Repo<'_>,
        digest: &str,
        limit: Limit,
        what: &str,
    ) -> Result<Vec<u8>, SourceError> {
        let response = self.get_blob(repo, digest, what).await?;
        let body = read(response, limit, what).await?;
        check_digest(what, digest, &body)?;
        Ok(body)
    }

    /// Blob `digest`, streamed to `file` under `limit` while it is hashed, then checked
    /// against its digest.
    pub(crate) async fn blob_to_file(
        &self,
        repo: Repo<'_>,
        digest: &str,
        file: &Path,
        limit: Limit,
        what: &str,
    ) -> Result<(), SourceError> {
        let response = self.get_blob(repo, digest, what).await?;
        let actual = format!(
            "sha256:{}",
            super::http::download_to(response, file, what, limit).await?
        );
        if actual != digest {
            return Err(SourceError::DigestMismatch {
                what: format!("a blob of {what}"),
                expected: digest.to_string(),
                actual,
            });
        }
        Ok(())
    }

    async fn get_blob(
        &self,
        repo: Repo<'_>,
        digest: &str,
        what: &str,
    ) -> Result<reqwest::Response, SourceError> {
        if !digest.starts_with("sha256:") {
            return Err(SourceError::NotABundle {
                what: what.to_string(),
                reason: format!("blob digest {digest} is not sha256"),
            });
        }
        let url = self.url(repo, &format!("blobs/{digest}"));
        self.send(repo, Method::GET, &url, &[], what).await
    }

    /// Sends a request with what is known of the registry's authentication; a 401 is answered
    /// once with its challenge. A status other than success is its error.
    async fn send(
        &self,
        repo: Repo<'_>,
        method: Method,
        url: &str,
        accept: &[&str],
        what: &str,
    ) -> Result<reqwest::Response, SourceError> {
        let scope = format!("repository:{}:pull", repo.name);
        let key = (repo.registry.to_string(), scope.clone());
        let mut authorization = self.known(&key);
        let mut answered = false;
        loop {
            let mut request = self.http.request(method.clone(), url);
            if !accept.is_empty() {
                request = request.header(ACCEPT, accept.join(", "));
            }
            if let Some(header) = &authorization {
                request = request.header(AUTHORIZATION, header);
            }
            let response = super::http::send(&self.egress, request, what)
                .await
                .map_err(|e| match e {
                    SourceError::Refused(why) => {
                        SourceError::Refused(format!("registry {}: {why}", repo.registry))
                    }
                    other => other,
                })?;
            let status = response.status();
            if status == StatusCode::UNAUTHORIZED && !answered {
                answered = true;
                let challenge = response
                    .headers()
                    .get(WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok())
                    .and_then(parse_challenge);
                if let Some(challenge) = challenge {
                    if let Some(found) = self.authorize(&challenge, &scope, what).await? {
                        authorization = Some(found.header.clone());
                        self.remember(key.clone(), found);
                        continue;
                    }
                }
            }
            if status.is_success() {
                return Ok(response);
            }
            return Err(self.status_error(response, what).await);
        }
    }

    fn known(&self, key: &(String, String)) -> Option<String> {
        if let Auth::Bearer(token) = &self.auth {
            return Some(format!("Bearer {token}"));
        }
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        known
            .get(key)
            .filter(|a| a.until.is_none_or(|until| Instant::now() < until))
            .map(|a| a.header.clone())
    }

    fn remember(&self, key: (String, String), authorization: Authorization) {
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        if known.len() >= TOKENS_KEPT {
            known.clear();
        }
        known.insert(key, authorization);
    }

    /// The authorization that answers `challenge`, if the credentials can.
    async fn authorize(
        &self,
        challenge: &Challenge,
        scope: &str,
        what: &str,
    ) -> Result<Option<Authorization>, SourceError> {
        match (challenge.scheme.as_str(), &self.auth) {
            ("basic", Auth::Basic(user, password)) => Ok(Some(Authorization {
                header: basic_header(user, password),
                until: None,
            })),
            ("bearer", Auth::Bearer(_)) | ("basic", _) => Ok(None),
            ("bearer", _) => self.token(challenge, scope, what).await.map(Some),
            _ => Ok(None),
        }
    }

    /// A token from the challenge's realm for `scope` (the challenge's own when it names one).
    async fn token(
        &self,
        challenge: &Challenge,
        scope: &str,
        what: &str,
    ) -> Result<Authorization, SourceError> {
        let realm = challenge.param("realm").unwrap_or_default();
        let mut url = url::Url::parse(realm).map_err(|e| SourceError::Server {
            what: what.to_string(),
            detail: format!("the token realm {realm:?} is not a URL: {e}"),
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(SourceError::Server {
                what: what.to_string(),
                detail: format!("the token realm {realm:?} is not an http(s) URL"),
            });
        }
        {
            let mut query = url.query_pairs_mut();
            if let Some(service) = challenge.param("service") {
                query.append_pair("service", service);
            }
            query.append_pair("scope", challenge.param("scope").unwrap_or(scope));
        }
        let mut request = self.http.get(url);
        if let Auth::Basic(user, password) = &self.auth {
            request = request.header(AUTHORIZATION, basic_header(user, password));
        }
        let response = super::http::send(&self.egress, request, what).await?;
        if !response.status().is_success() {
            let status = response.status();
            return Err(SourceError::Unauthorized {
                what: what.to_string(),
                credentials: self.cred_origin.clone(),
                detail: format!("the token server answered {status}"),
            });
        }
        let body = read(response, Reader::RegistryToken.limit(MAX_TOKEN_BYTES), what).await?;
        let answer: TokenAnswer =
            serde_json::from_slice(&body).map_err(|e| SourceError::Server {
                what: what.to_string(),
                detail: format!("the token server's answer does not parse: {e}"),
            })?;
        let token = answer
            .token
            .or(answer.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| SourceError::Server {
                what: what.to_string(),
                detail: "the token server's answer holds no token".into(),
            })?;
        // Renewed a little before it expires.
        let seconds = answer.expires_in.unwrap_or(DEFAULT_TOKEN_SECONDS).max(10) - 5;
        Ok(Authorization {
            header: format!("Bearer {token}"),
            until: Some(Instant::now() + Duration::from_secs(seconds)),
        })
    }

    /// The error an unsuccessful answer means, its codes read from a bounded excerpt.
    async fn status_error(&self, response: reqwest::Response, what: &str) -> SourceError {
        let status = response.status();
        let excerpt =
            bounded::read_prefix(response, Reader::RegistryError.limit(MAX_ERROR_BYTES)).await;
        let envelope: ErrorEnvelope = serde_json::from_slice(&excerpt).unwrap_or_default();
        let codes: Vec<&str> = envelope.errors.iter().map(|e| e.code.as_str()).collect();
        let mut detail: String = envelope
            .errors
            .iter()
            .map(|e| e.message.as_str())
            .filter(|m| !m.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
            .chars()
            .take(ERROR_MESSAGE_CHARS)
            .collect();
        if detail.is_empty() {
            detail = status.to_string();
        }
        let not_found = [
            "MANIFEST_UNKNOWN",
            "NAME_UNKNOWN",
            "BLOB_UNKNOWN",
            "NOT_FOUND",
        ];
        let denied = ["UNAUTHORIZED", "DENIED"];
        let what = what.to_string();
        if status == StatusCode::NOT_FOUND || codes.iter().any(|c| not_found.contains(c)) {
            SourceError::NotFound { what }
        } else if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN)
            || codes.iter().any(|c| denied.contains(c))
        {
            SourceError::Unauthorized {
                what,
                credentials: self.cred_origin.clone(),
                detail,
            }
        } else if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
            SourceError::Server {
                what,
                detail: format!("{status}: {detail}"),
            }
        } else {
            SourceError::Invalid(format!("{what} answered {status}: {detail}"))
        }
    }
}

/// Tags asked for per page of the tag list; a registry may return fewer (its own cap).
const TAGS_PAGE: usize = 1000;
/// Registries cap pages at their own size (100 is common); without a `Link` header, a page
/// this long or longer may not be the last, so the next is asked for.
const SMALLEST_PAGE_CAP: usize = 100;
/// Pages of the tag list read at most.
const MAX_TAG_PAGES: usize = 100;

/// Whether a page of `len` tags ending at `next`, asked for after `last`, ends the list: a page
/// below any registry's cap is the last, and a registry that ignores `last` repeats itself.
pub(crate) fn is_last_page(len: usize, next: Option<&str>, last: Option<&str>) -> bool {
    len < SMALLEST_PAGE_CAP || next.is_none() || next == last
}

/// `link` resolved against `current`, when it stays on the same origin.
fn same_origin_link(current: &str, link: &str) -> Option<String> {
    let current = url::Url::parse(current).ok()?;
    let next = current.join(link).ok()?;
    (next.origin() == current.origin()).then(|| next.to_string())
}

fn url_escape(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

fn basic_header(user: &str, password: &str) -> String {
    use base64::Engine as _;
    let pair = format!("{user}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

fn empty_index() -> OciImageIndex {
    OciImageIndex {
        schema_version: 2,
        media_type: Some("application/vnd.oci.image.index.v1+json".into()),
        manifests: Vec::new(),
        artifact_type: None,
        annotations: None,
    }
}

/// An image manifest or index: schema version 2, a known media type when it names one.
pub(crate) fn parse_manifest(body: &[u8]) -> Result<OciManifest, String> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Versioned {
        schema_version: u8,
        #[serde(default)]
        media_type: Option<String>,
    }
    let versioned: Versioned =
        serde_json::from_slice(body).map_err(|e| format!("the manifest does not parse: {e}"))?;
    if versioned.schema_version != 2 {
        return Err(format!(
            "schema version {} (only 2 is supported)",
            versioned.schema_version
        ));
    }
    if let Some(media_type) = versioned.media_type {
        if !MANIFEST_TYPES.contains(&media_type.as_str()) {
            return Err(format!(
                "the manifest's media type {media_type} is not supported"
            ));
        }
    }
    serde_json::from_slice(body).map_err(|e| format!("the manifest does not parse: {e}"))
}

/// An image manifest (of a signature), parsed.
pub(crate) fn parse_image_manifest(body: &[u8]) -> Result<OciImageManifest, String> {
    serde_json::from_slice(body).map_err(|e| format!("does not parse: {e}"))
}

fn check_digest(what: &str, expected: &str, body: &[u8]) -> Result<(), SourceError> {
    let actual = format!("sha256:{}", super::sha256_hex(body));
    if !actual.eq_ignore_ascii_case(expected) {
        return Err(SourceError::DigestMismatch {
            what: what.to_string(),
            expected: expected.to_string(),
            actual,
        });
    }
    Ok(())
}

async fn read(
    response: reqwest::Response,
    limit: Limit,
    what: &str,
) -> Result<Vec<u8>, SourceError> {
    bounded::read_to_vec(response, limit)
        .await
        .map_err(|e| refusal(what, e))
}

/// A bounded read's failure as the source error it is.
pub(crate) fn refusal(what: &str, error: ReadError) -> SourceError {
    let subject = match &error {
        ReadError::TooLarge { limit, .. } => format!("the {} of {what}", describe(limit.reader)),
        ReadError::Transport(_) => what.to_string(),
    };
    super::read_refusal(what, subject, error)
}

/// How a refusal names what it read.
fn describe(reader: Reader) -> &'static str {
    match reader {
        Reader::RegistryManifest => "manifest",
        Reader::RegistryTagList => "tag list",
        Reader::RegistryReferrers => "referrers list",
        Reader::RegistryToken => "token answer",
        Reader::RegistryError => "error answer",
        Reader::RegistryLayer => "layer",
        Reader::SignatureBlob => "signature blob",
        _ => "answer",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_parse_with_quoted_commas() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#,
        )
        .unwrap();
        assert_eq!(c.scheme, "bearer");
        assert_eq!(c.param("realm"), Some("https://auth.example/token"));
        assert_eq!(c.param("service"), Some("registry.example"));
        assert_eq!(c.param("scope"), Some("repository:a/b:pull,push"));
        let basic = parse_challenge("Basic realm=\"Registry Realm\"").unwrap();
        assert_eq!(basic.scheme, "basic");
        assert_eq!(basic.param("realm"), Some("Registry Realm"));
        let bare = parse_challenge("Bearer realm=https://x/token, service=y").unwrap();
        assert_eq!(bare.param("realm"), Some("https://x/token"));
        assert_eq!(bare.param("service"), Some("y"));
        assert!(parse_challenge("").is_none());
        let escaped = parse_challenge(r#"Bearer realm="a\"b""#).unwrap();
        assert_eq!(escaped.param("realm"), Some("a\"b"));
    }

    #[test]
    fn the_next_page_is_the_link_marked_next() {
        assert_eq!(
            next_link(r#"</v2/a/tags/list?n=2&last=b>; rel="next""#),
            Some("/v2/a/tags/list?n=2&last=b")
        );
        assert_eq!(
            next_link(r#"</x>; rel="prev", </y>; rel="next""#),
            Some("/y")
        );
        assert_eq!(next_link(r#"</x>; rel="prev""#), None);
        assert_eq!(
            same_origin_link("http://r:5000/v2/a/tags/list?n=2", "/v2/a/tags/list?last=b")
                .as_deref(),
            Some("http://r:5000/v2/a/tags/list?last=b")
        );
        assert_eq!(
            same_origin_link("http://r:5000/v2/x", "http://elsewhere/v2/x"),
            None
        );
    }

    #[test]
    fn tag_pages_end_short_empty_or_repeated() {
        assert!(is_last_page(6, Some("b"), Some("a")));
        assert!(!is_last_page(1000, Some("b"), Some("a")));
        assert!(!is_last_page(100, Some("b"), None));
        assert!(is_last_page(0, None, Some("a")));
        assert!(is_last_page(1000, Some("a"), Some("a")));
    }

    #[test]
    fn manifests_of_other_schemas_are_refused() {
        assert!(parse_manifest(br#"{"schemaVersion": 1}"#).is_err());
        let odd = br#"{"schemaVersion": 2, "mediaType": "text/plain", "config": {}, "layers": []}"#;
        assert!(parse_manifest(odd).unwrap_err().contains("text/plain"));
        let image = br#"{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:00", "size": 2},
            "layers": []}"#;
        assert!(matches!(parse_manifest(image), Ok(OciManifest::Image(_))));
    }

    proptest::proptest! {
        #[test]
        fn challenge_parsing_never_panics(text in "\\PC{0,200}") {
            let _ = parse_challenge(&text);
            let _ = next_link(&text);
        }
    }
}
