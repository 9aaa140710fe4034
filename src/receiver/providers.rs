//! How each sender signs its notifications and what they say, as each documents it:
//!
//! | provider | authentication | what is read |
//! |---|---|---|
//! | `github` | `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>` | `X-GitHub-Event: push`: `repository.clone_url`/`ssh_url`/`git_url`/`html_url`, `after` |
//! | `gitlab` | `X-Gitlab-Token: <token>` | `X-Gitlab-Event: Push Hook`/`Tag Push Hook`: `project.git_http_url`/`git_ssh_url`/`web_url`, `checkout_sha` or `after` |
//! | `gitea` | `X-Gitea-Signature: <hex HMAC-SHA256 of the body>` | `X-Gitea-Event: push`: as GitHub's |
//! | `harbor` | `Authorization: <token>` (Harbor's "auth header", verbatim) | `type: PUSH_ARTIFACT`: `event_data.resources[].resource_url`, `digest` |
//! | `registry` | `Authorization: Bearer <token>` (an endpoint header in the registry's `notifications`) | the distribution event envelope: `events[]` with `action: push` of a manifest: the target's host and `repository`, `tag`, `digest` |
//! | `generic` | `X-Signature: sha256=<hex HMAC-SHA256 of the body>` | `{"repository": "<git URL, image repository or URL>", "revision": "<optional>"}` |
//!
//! Tokens and signatures are compared in constant time. Nothing here logs a header's value.

use hmac::{Hmac, Mac};
use http::HeaderMap;
use serde_json::Value;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::trigger::{normal_git, normal_image, Subject};

/// The senders pallet takes notifications from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Provider {
    /// GitHub webhooks.
    GitHub,
    /// GitLab webhooks.
    GitLab,
    /// Gitea (and Forgejo) webhooks.
    Gitea,
    /// Harbor webhooks.
    Harbor,
    /// CNCF distribution (Docker registry) notifications.
    Registry,
    /// Any sender that signs its body with HMAC-SHA256.
    Generic,
}

impl Provider {
    /// Every provider.
    pub const ALL: [Provider; 6] = [
        Provider::GitHub,
        Provider::GitLab,
        Provider::Gitea,
        Provider::Harbor,
        Provider::Registry,
        Provider::Generic,
    ];

    /// Its name: the last path segment of its endpoint (`/hook/github`) and the key of its
    /// token in the receiver's Secret.
    pub fn name(self) -> &'static str {
        match self {
            Provider::GitHub => "github",
            Provider::GitLab => "gitlab",
            Provider::Gitea => "gitea",
            Provider::Harbor => "harbor",
            Provider::Registry => "registry",
            Provider::Generic => "generic",
        }
    }

    /// The provider of an endpoint's name.
    pub fn from_name(name: &str) -> Option<Provider> {
        Provider::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// Why a request was refused: 401 when it carries no credential, 403 when it carries a wrong one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No signature or token header.
    Missing(&'static str),
    /// A signature or token that does not match.
    Wrong(&'static str),
}

impl Refusal {
    /// The HTTP status.
    pub fn status(self) -> u16 {
        match self {
            Refusal::Missing(_) => 401,
            Refusal::Wrong(_) => 403,
        }
    }

    /// Which header, for the log.
    pub fn header(self) -> &'static str {
        match self {
            Refusal::Missing(header) | Refusal::Wrong(header) => header,
        }
    }
}

/// The header that carries `provider`'s credential.
pub fn credential_header(provider: Provider) -> &'static str {
    match provider {
        Provider::GitHub => "x-hub-signature-256",
        Provider::Gitea => "x-gitea-signature",
        Provider::Generic => "x-signature",
        Provider::GitLab => "x-gitlab-token",
        Provider::Harbor | Provider::Registry => "authorization",
    }
}

/// Refuses a request without `provider`'s credential header at all: answered before its body
/// is read.
pub fn check_present(provider: Provider, headers: &HeaderMap) -> Result<(), Refusal> {
    let name = credential_header(provider);
    header(headers, name)
        .map(|_| ())
        .ok_or(Refusal::Missing(name))
}

/// Checks the request's credential against `token`.
pub fn authenticate(
    provider: Provider,
    headers: &HeaderMap,
    body: &[u8],
    token: &[u8],
) -> Result<(), Refusal> {
    match provider {
        Provider::GitHub | Provider::Generic => signature(
            headers,
            credential_header(provider),
            Some("sha256="),
            body,
            token,
        ),
        Provider::Gitea => signature(headers, credential_header(provider), None, body, token),
        Provider::GitLab => {
            let name = credential_header(provider);
            let given = header(headers, name).ok_or(Refusal::Missing(name))?;
            equal(given, token)
                .then_some(())
                .ok_or(Refusal::Wrong(name))
        }
        Provider::Harbor | Provider::Registry => {
            let name = credential_header(provider);
            let given = header(headers, name).ok_or(Refusal::Missing(name))?;
            let bearer = given.strip_prefix(b"Bearer ").unwrap_or(b"");
            (equal(given, token) | equal(bearer, token))
                .then_some(())
                .ok_or(Refusal::Wrong(name))
        }
    }
}

/// The signature of `body` under `token`, as hex (what a sender puts in its header).
pub fn sign(body: &[u8], token: &[u8]) -> String {
    match Hmac::<Sha256>::new_from_slice(token) {
        Ok(mut mac) => {
            mac.update(body);
            mac.finalize()
                .into_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        }
        // HMAC takes keys of any length.
        Err(_) => String::new(),
    }
}

fn from_hex(text: &[u8]) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.chunks(2)
        .map(|pair| {
            let pair = std::str::from_utf8(pair).ok()?;
            u8::from_str_radix(pair, 16).ok()
        })
        .collect()
}

fn signature(
    headers: &HeaderMap,
    name: &'static str,
    prefix: Option<&str>,
    body: &[u8],
    token: &[u8],
) -> Result<(), Refusal> {
    let given = header(headers, name).ok_or(Refusal::Missing(name))?;
    let given = match prefix {
        Some(prefix) => given
            .strip_prefix(prefix.as_bytes())
            .ok_or(Refusal::Wrong(name))?,
        None => given,
    };
    let Some(given) = from_hex(given) else {
        return Err(Refusal::Wrong(name));
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(token).map_err(|_| Refusal::Wrong(name))?;
    mac.update(body);
    // Constant time.
    mac.verify_slice(&given).map_err(|_| Refusal::Wrong(name))
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a [u8]> {
    headers
        .get(name)
        .map(|v| v.as_bytes())
        .filter(|v| !v.is_empty())
}

fn equal(given: &[u8], token: &[u8]) -> bool {
    !given.is_empty() && bool::from(given.ct_eq(token))
}

/// What an authenticated notification asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// Poll the sources of these subjects; each with the revision named, when one is.
    Changed(Vec<(Subject, Option<String>)>),
    /// Nothing to do (a ping, another event); why.
    Ignored(String),
}

/// Reads an authenticated notification; an error is a malformed body (400).
pub fn read(provider: Provider, headers: &HeaderMap, body: &[u8]) -> Result<Notice, String> {
    let event = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let json = || -> Result<Value, String> {
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))
    };
    match provider {
        Provider::GitHub | Provider::Gitea => {
            let header = if provider == Provider::GitHub {
                "x-github-event"
            } else {
                "x-gitea-event"
            };
            match event(header).as_str() {
                "push" => Ok(git_push(
                    &json()?,
                    &[
                        "/repository/clone_url",
                        "/repository/ssh_url",
                        "/repository/git_url",
                        "/repository/html_url",
                    ],
                    &["/after"],
                )),
                other => Ok(Notice::Ignored(format!("event {other:?} is not a push"))),
            }
        }
        Provider::GitLab => match event("x-gitlab-event").as_str() {
            "Push Hook" | "Tag Push Hook" => Ok(git_push(
                &json()?,
                &[
                    "/project/git_http_url",
                    "/project/git_ssh_url",
                    "/project/web_url",
                    "/repository/git_http_url",
                    "/repository/git_ssh_url",
                    "/repository/homepage",
                ],
                &["/checkout_sha", "/after"],
            )),
            other => Ok(Notice::Ignored(format!("event {other:?} is not a push"))),
        },
        Provider::Harbor => harbor(&json()?),
        Provider::Registry => registry(&json()?),
        Provider::Generic => {
            let value = json()?;
            let repository = value["repository"]
                .as_str()
                .filter(|r| !r.trim().is_empty())
                .ok_or("the body names no \"repository\"")?;
            let revision = value["revision"].as_str().map(str::to_string);
            Ok(Notice::Changed(vec![(
                Subject::Any(normal_git(repository)),
                revision,
            )]))
        }
    }
}

fn git_push(value: &Value, urls: &[&str], revisions: &[&str]) -> Notice {
    let mut subjects: Vec<Subject> = urls
        .iter()
        .filter_map(|pointer| value.pointer(pointer)?.as_str())
        .filter(|url| !url.is_empty())
        .map(|url| Subject::Git(normal_git(url)))
        .collect();
    subjects.sort();
    subjects.dedup();
    if subjects.is_empty() {
        return Notice::Ignored("the push names no repository URL".into());
    }
    let revision = revisions
        .iter()
        .filter_map(|pointer| value.pointer(pointer)?.as_str())
        .find(|r| !r.is_empty())
        .map(str::to_string);
    Notice::Changed(
        subjects
            .into_iter()
            .map(|subject| (subject, revision.clone()))
            .collect(),
    )
}

fn harbor(value: &Value) -> Result<Notice, String> {
    let kind = value["type"].as_str().unwrap_or_default();
    if kind != "PUSH_ARTIFACT" && kind != "pushImage" {
        return Ok(Notice::Ignored(format!("event {kind:?} is not a push")));
    }
    let resources = value
        .pointer("/event_data/resources")
        .and_then(Value::as_array)
        .ok_or("no event_data.resources")?;
    let changed: Vec<(Subject, Option<String>)> = resources
        .iter()
        .filter_map(|resource| {
            let url = resource["resource_url"].as_str()?;
            let digest = resource["digest"].as_str();
            let tag = resource["tag"].as_str();
            Some((Subject::Image(normal_image(url)?), revision_of(tag, digest)))
        })
        .collect();
    if changed.is_empty() {
        return Ok(Notice::Ignored("no resource with a resource_url".into()));
    }
    Ok(Notice::Changed(changed))
}

/// A registry's envelope holds every event: blob uploads, pulls, manifests. Only the push of
/// a manifest (or an index) moves what a tag names.
fn registry(value: &Value) -> Result<Notice, String> {
    let events = value["events"].as_array().ok_or("no events[]")?;
    let mut changed = Vec::new();
    for event in events {
        let target = &event["target"];
        let media_type = target["mediaType"].as_str().unwrap_or_default();
        let manifest = media_type.contains("manifest") || media_type.contains("image.index");
        if event["action"].as_str() != Some("push") || !manifest {
            continue;
        }
        let Some(repository) = target["repository"].as_str() else {
            continue;
        };
        let host = target["url"]
            .as_str()
            .and_then(|u| url::Url::parse(u).ok())
            .and_then(|u| {
                let host = u.host_str()?.to_string();
                Some(match u.port() {
                    Some(port) => format!("{host}:{port}"),
                    None => host,
                })
            })
            .or_else(|| event.pointer("/request/host")?.as_str().map(str::to_string));
        let Some(host) = host else { continue };
        let Some(subject) = normal_image(&format!("{host}/{repository}")) else {
            continue;
        };
        let revision = revision_of(target["tag"].as_str(), target["digest"].as_str());
        changed.push((Subject::Image(subject), revision));
    }
    if changed.is_empty() {
        return Ok(Notice::Ignored("no manifest push in the envelope".into()));
    }
    changed.sort();
    changed.dedup();
    Ok(Notice::Changed(changed))
}

fn revision_of(tag: Option<&str>, digest: Option<&str>) -> Option<String> {
    match (
        tag.filter(|t| !t.is_empty()),
        digest.filter(|d| !d.is_empty()),
    ) {
        (Some(tag), Some(digest)) => Some(format!("{tag}@{digest}")),
        (Some(tag), None) => Some(tag.to_string()),
        (None, digest) => digest.map(str::to_string),
    }
}

#[cfg(test)]
mod tests;
