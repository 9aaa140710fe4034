//! HTTP sources: a `.tar`, `.tar.gz`/`.tgz`, or a single `.yaml`/`.yml`/`.json` file.
//!
//! The resolved ref is `sha256:<hex>` of the downloaded bytes. A `sha256` pin that is cached costs
//! no request. A floating URL is re-checked with a conditional GET (`If-None-Match` /
//! `If-Modified-Since` from the last download), so an unchanged file is one 304.

use std::path::{Path, PathBuf};

use reqwest::header::{ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED};
use reqwest::StatusCode;
use sha2::Digest;
use tokio::io::AsyncWriteExt;

use super::budget::{Budget, Cancel};
use super::unpack::{self, Compression};
use super::{CredentialKind, Credentials, Fetcher, SourceError, SourceSecrets};
use crate::api::HttpSource;
use crate::egress::{EgressPolicy, Redirects};

/// What the URL's file name says the content is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Shape {
    Tar,
    TarGz,
    File(String),
}

fn shape_of(url: &url::Url) -> Result<Shape, SourceError> {
    let name = url
        .path_segments()
        .and_then(|mut s| s.next_back())
        .unwrap_or("")
        .to_string();
    let lower = name.to_ascii_lowercase();
    if lower.ends_with(".tar.gz") || lower.ends_with(".tgz") {
        Ok(Shape::TarGz)
    } else if lower.ends_with(".tar") {
        Ok(Shape::Tar)
    } else if [".yaml", ".yml", ".json"]
        .iter()
        .any(|e| lower.ends_with(e))
    {
        Ok(Shape::File(name))
    } else {
        Err(SourceError::Invalid(format!(
            "http source {url}: the file name must end in .tar, .tar.gz, .tgz, .yaml, .yml or .json"
        )))
    }
}

fn cache_key(sha: &str, shape: &Shape) -> String {
    match shape {
        Shape::Tar | Shape::TarGz => format!("http-{sha}-tar"),
        // The same bytes under another file name make another tree.
        Shape::File(name) => format!(
            "http-{sha}-file-{}",
            &super::sha256_hex(name.as_bytes())[..16]
        ),
    }
}

/// Validators remembered from the last download of a URL.
#[derive(serde::Serialize, serde::Deserialize)]
struct Validators {
    sha256: String,
    etag: Option<String>,
    last_modified: Option<String>,
}

/// The URL without credentials or query, safe for messages.
pub(crate) fn display_url(url: &url::Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.set_query(None);
    u.to_string()
}

/// An error and its causes as one line (reqwest's own Display omits the causes).
pub(crate) fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    crate::bounded::describe_error(e)
}

/// The reqwest client every HTTP(S) fetch uses: the agent's timeouts, egress policy and redirect
/// limit (redirects on the first request's host only, unless `cross_host_redirects`), extra CA
/// certificates (PEM) to trust, and optionally no certificate verification at all.
pub(crate) fn client(
    opts: &super::FetchOptions,
    ca_pem: Option<&[u8]>,
    insecure_skip_tls_verify: bool,
    cross_host_redirects: bool,
) -> Result<reqwest::Client, SourceError> {
    let redirects = Redirects::for_source(cross_host_redirects, opts.max_redirects);
    let mut builder = opts
        .egress
        .http_client(redirects)
        .connect_timeout(opts.connect_timeout)
        .timeout(opts.timeout)
        .danger_accept_invalid_certs(insecure_skip_tls_verify);
    if let Some(pem) = ca_pem {
        for cert in reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|_| SourceError::Invalid("the CA bundle is not valid PEM".into()))?
        {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder
        .build()
        .map_err(|e| SourceError::Invalid(format!("http client: {}", describe(&e))))
}

/// Adds `If-None-Match` / `If-Modified-Since` from the validators of the last download, if any.
pub(crate) fn conditional(
    mut request: reqwest::RequestBuilder,
    validators: Option<(Option<&str>, Option<&str>)>,
) -> reqwest::RequestBuilder {
    if let Some((etag, last_modified)) = validators {
        if let Some(etag) = etag {
            request = request.header(IF_NONE_MATCH, etag);
        }
        if let Some(lm) = last_modified {
            request = request.header(IF_MODIFIED_SINCE, lm);
        }
    }
    request
}

/// Adds basic-auth or a bearer token from `credentials`; returns the request and the credentials'
/// origin for messages ("no credentials" without). `who` names the source kind in the error for
/// credentials of another kind.
pub(crate) fn authorize(
    request: reqwest::RequestBuilder,
    credentials: Option<&Credentials>,
    who: &str,
) -> Result<(reqwest::RequestBuilder, String), SourceError> {
    let Some(c) = credentials else {
        return Ok((request, "no credentials".to_string()));
    };
    let request = match &c.kind {
        CredentialKind::Basic { username, password } => {
            request.basic_auth(username, Some(password))
        }
        CredentialKind::Token(token) => request.bearer_auth(token),
        _ => {
            return Err(SourceError::InvalidCredentials {
                origin: c.origin.clone(),
                reason: format!("{who} takes basic-auth or a bearer token"),
            })
        }
    };
    Ok((request, c.origin.clone()))
}

/// Maps a response status that is neither success nor 304 to the error it means.
pub(crate) fn check_status(
    what: &str,
    status: StatusCode,
    cred_origin: &str,
) -> Result<(), SourceError> {
    let what = what.to_string();
    match status {
        s if s.is_success() => Ok(()),
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Err(SourceError::Unauthorized {
            what,
            credentials: cred_origin.to_string(),
            detail: status.to_string(),
        }),
        StatusCode::NOT_FOUND | StatusCode::GONE => Err(SourceError::NotFound { what }),
        s if s.is_server_error() => Err(SourceError::Server {
            what,
            detail: status.to_string(),
        }),
        _ => Err(SourceError::Invalid(format!("{what} answered {status}"))),
    }
}

/// Sends `request` unless its URL is an address `egress` refuses (names are checked by the
/// client's resolver), mapping transport failures to errors naming `what`.
pub(crate) async fn send(
    egress: &EgressPolicy,
    request: reqwest::RequestBuilder,
    what: &str,
) -> Result<reqwest::Response, SourceError> {
    let (client, request) = request.build_split();
    let request = request.map_err(|e| transport_error(what, e))?;
    egress
        .check_url(request.url())
        .map_err(|refused| SourceError::Refused(format!("{what}: {refused}")))?;
    client
        .execute(request)
        .await
        .map_err(|e| transport_error(what, e))
}

/// A 304 although nothing usable was remembered to make the request conditional.
pub(crate) fn not_modified_unasked(what: String) -> SourceError {
    SourceError::Server {
        what,
        detail: "304 Not Modified to an unconditional request".into(),
    }
}

/// The response's `ETag` and `Last-Modified`, to make the next request conditional.
pub(crate) fn validators_of(response: &reqwest::Response) -> (Option<String>, Option<String>) {
    let header = |name| {
        response
            .headers()
            .get(name)
            .and_then(|v: &reqwest::header::HeaderValue| v.to_str().ok())
            .map(str::to_string)
    };
    (header(ETAG), header(LAST_MODIFIED))
}

pub(crate) fn transport_error(what: &str, e: reqwest::Error) -> SourceError {
    let e = e.without_url();
    if let Some(refusal) = crate::egress::refusal_in(&e) {
        return SourceError::Refused(format!("{what}: {refusal}"));
    }
    if e.is_redirect() {
        // A redirect loop or chain longer than allowed will not fix itself by retrying.
        return SourceError::Invalid(format!("{what}: {}", describe(&e)));
    }
    SourceError::Unreachable {
        what: what.to_string(),
        detail: describe(&e),
    }
}

/// Resolves and fetches an HTTP source; returns the resolved ref and the cached content.
pub(crate) async fn fetch(
    fetcher: &Fetcher,
    spec: &HttpSource,
    secrets: &SourceSecrets,
    cancel: &Cancel,
) -> Result<(String, PathBuf), SourceError> {
    let url = url::Url::parse(&spec.url)
        .map_err(|e| SourceError::Invalid(format!("http source url: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(SourceError::Invalid(format!(
            "http source {}: only http and https URLs are supported",
            display_url(&url)
        )));
    }
    let shape = shape_of(&url)?;
    let what = display_url(&url);
    let cache = fetcher.cache();

    let pin = spec.sha256.as_ref().map(|s| s.to_ascii_lowercase());
    if let Some(pin) = &pin {
        if let Some(path) = cache.lookup(&cache_key(pin, &shape)) {
            return Ok((format!("sha256:{pin}"), path));
        }
    }

    let opts = fetcher.options();
    let client = client(
        opts,
        secrets.ca_pem.as_deref(),
        false,
        spec.allow_cross_host_redirects,
    )?;

    let meta_name = format!("http-url-{}", super::sha256_hex(spec.url.as_bytes()));
    let previous: Option<Validators> = cache
        .read_meta(&meta_name)
        .and_then(|raw| serde_json::from_slice(&raw).ok())
        // Validators are only useful while the content they describe is still cached.
        .filter(|v: &Validators| {
            pin.as_ref().is_none_or(|p| *p == v.sha256)
                && cache.lookup(&cache_key(&v.sha256, &shape)).is_some()
        });

    let request = conditional(
        client.get(url.clone()),
        previous
            .as_ref()
            .map(|v| (v.etag.as_deref(), v.last_modified.as_deref())),
    );
    let (request, cred_origin) =
        authorize(request, secrets.credentials.as_ref(), "an http source")?;
    let response = send(&opts.egress, request, &what).await?;
    let status = response.status();
    if status == StatusCode::NOT_MODIFIED {
        if let Some(v) = previous {
            if let Some(path) = cache.lookup(&cache_key(&v.sha256, &shape)) {
                return Ok((format!("sha256:{}", v.sha256), path));
            }
        }
        return Err(not_modified_unasked(what));
    }
    check_status(&what, status, &cred_origin)?;
    let (etag, last_modified) = validators_of(&response);

    // Download to scratch space while hashing; the content is unpacked only once its digest is
    // known (and matches the pin).
    let scratch = cache.scratch_dir()?;
    let download = scratch.join("download");
    let limit = crate::bounded::Reader::HttpSource.limit(opts.limits.max_total_bytes);
    let result = download_to(response, &download, &what, limit).await;
    let sha = match result {
        Ok(sha) => sha,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&scratch);
            return Err(e);
        }
    };
    if let Some(pin) = &pin {
        if *pin != sha {
            let _ = std::fs::remove_dir_all(&scratch);
            return Err(SourceError::DigestMismatch {
                what,
                expected: format!("sha256:{pin}"),
                actual: format!("sha256:{sha}"),
            });
        }
    }
    let limits = opts.limits;
    let key = cache_key(&sha, &shape);
    let file = download.clone();
    let cancel = cancel.clone();
    let allowance = cache.unpack_allowance();
    let result = cache
        .get_or_populate(&key, |tree| async move {
            tokio::task::spawn_blocking(move || {
                let mut budget = Budget::drawing_on(limits, &cancel, Some(allowance));
                unpack_download(&file, &shape, &tree, &mut budget)
            })
            .await
            .map_err(|e| SourceError::io("unpack task", std::io::Error::other(e.to_string())))?
        })
        .await;
    let _ = std::fs::remove_dir_all(&scratch);
    let path = result?;
    if pin.is_none() {
        let record = Validators {
            sha256: sha.clone(),
            etag,
            last_modified,
        };
        if let Ok(raw) = serde_json::to_vec(&record) {
            // Only an optimisation: without it the next poll downloads again.
            if let Err(e) = cache.write_meta(&meta_name, &raw) {
                tracing::warn!(error = %e, "could not record HTTP validators");
            }
        }
    }
    Ok((format!("sha256:{sha}"), path))
}

/// Downloads `response` to `path` under `limit` (counting what arrives), hashing it. Returns
/// the hex SHA-256.
pub(crate) async fn download_to(
    response: reqwest::Response,
    path: &Path,
    what: &str,
    limit: crate::bounded::Limit,
) -> Result<String, SourceError> {
    let refused = |e| super::read_refusal(what, format!("the download {what}"), e);
    let mut body = crate::bounded::Body::new(response, limit).map_err(refused)?;
    let mut file = tokio::fs::File::create(path)
        .await
        .map_err(|e| SourceError::io("create download file", e))?;
    let mut hasher = sha2::Sha256::new();
    while let Some(chunk) = body.chunk().await.map_err(refused)? {
        hasher.update(&chunk);
        file.write_all(&chunk)
            .await
            .map_err(|e| SourceError::io("write download file", e))?;
    }
    file.flush()
        .await
        .map_err(|e| SourceError::io("write download file", e))?;
    Ok(super::hex(&hasher.finalize()))
}

fn unpack_download(
    file: &Path,
    shape: &Shape,
    tree: &Path,
    budget: &mut Budget,
) -> Result<(), SourceError> {
    let mut f = std::fs::File::open(file).map_err(|e| SourceError::io("read download file", e))?;
    match shape {
        Shape::File(name) => {
            let size = f
                .metadata()
                .map_err(|e| SourceError::io("read download file", e))?
                .len();
            unpack::write_tree_stream(tree, Path::new(name), &mut f, size, false, budget)
        }
        // Sniff rather than trust the name: servers serve .tgz as .tar and back.
        Shape::Tar | Shape::TarGz => {
            unpack::unpack_tar(f, Compression::Detect, tree, budget, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_from_url() {
        let s = |u: &str| shape_of(&url::Url::parse(u).unwrap());
        assert_eq!(s("http://h/a/b.tar.gz").unwrap(), Shape::TarGz);
        assert_eq!(s("http://h/b.TGZ?x=1").unwrap(), Shape::TarGz);
        assert_eq!(s("http://h/b.tar").unwrap(), Shape::Tar);
        assert_eq!(
            s("http://h/crd.yaml").unwrap(),
            Shape::File("crd.yaml".into())
        );
        assert!(s("http://h/b.zip").is_err());
    }
}
