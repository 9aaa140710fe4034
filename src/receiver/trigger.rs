//! Which sources a notification is about, and how many polls it may cause. Pure.
//!
//! - Repository names are compared in a normal form: git URLs without scheme, credentials,
//!   trailing `/` or `.git`, scp-like `git@host:org/repo` as `host/org/repo`, lower-cased;
//!   image repositories as `registry/repository` (Docker Hub's short names expanded), without
//!   tag or digest. A chart in an `oci://` repository is the image `registry/path/chart`.
//! - [`Coalescer`]: a notification of a (repository, revision) already acted on within
//!   [`REVISION_WINDOW`] causes nothing (GitHub retries, a registry's event per layer, a flood
//!   of the same push); one without a revision is coalesced within [`BURST_WINDOW`].
//! - [`RateLimit`]: a token bucket; [`SenderLimits`] keeps one per sender (provider and peer
//!   address), taken once a request is authenticated: requests without a valid credential
//!   never use a sender's allowance.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::api::Source;

/// How long a notification of one revision is remembered.
pub const REVISION_WINDOW: Duration = Duration::from_secs(600);
/// How long a notification without a revision is remembered.
pub const BURST_WINDOW: Duration = Duration::from_secs(2);
/// Entries kept before old ones are dropped (bounds the memory a flood of distinct revisions
/// can take).
const COALESCER_MAX: usize = 10_000;

/// What a notification names: a git repository or an image repository (or, for the generic
/// receiver, any URL a source names).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Subject {
    /// A git repository (normal form).
    Git(String),
    /// An image repository (normal form).
    Image(String),
    /// Anything (generic receiver): matched against git, image, http and chart repository URLs.
    Any(String),
}

impl Subject {
    /// The subject's normal form, for logs and coalescing.
    pub fn text(&self) -> &str {
        match self {
            Subject::Git(s) | Subject::Image(s) | Subject::Any(s) => s,
        }
    }
}

/// A git URL in normal form (see the module's documentation).
pub fn normal_git(url: &str) -> String {
    let url = url.trim();
    let rest = match url.split_once("://") {
        Some((_, rest)) => rest.to_string(),
        // scp-like: [user@]host:path
        None => match url.split_once(':') {
            // Not `host:port/path`, which is a URL without its scheme.
            Some((host, path)) if !host.contains('/') && !starts_with_port(path) => {
                format!("{host}/{path}")
            }
            _ => url.to_string(),
        },
    };
    // Credentials before the host.
    let rest = match rest.split_once('/') {
        Some((authority, path)) => {
            let host = authority.rsplit('@').next().unwrap_or(authority);
            format!("{host}/{path}")
        }
        None => rest.rsplit('@').next().unwrap_or(&rest).to_string(),
    };
    let rest = rest.trim_end_matches('/');
    let rest = rest.strip_suffix(".git").unwrap_or(rest);
    rest.trim_end_matches('/').to_ascii_lowercase()
}

fn starts_with_port(path: &str) -> bool {
    let first = path.split('/').next().unwrap_or_default();
    !first.is_empty() && first.bytes().all(|b| b.is_ascii_digit())
}

/// An image reference or repository in normal form (`registry/repository`), without tag or
/// digest; None when it does not parse.
pub fn normal_image(reference: &str) -> Option<String> {
    let reference = reference.trim();
    let reference = reference.strip_prefix("oci://").unwrap_or(reference);
    let parsed = crate::source::oci_reference::parse(reference).ok()?;
    Some(format!("{}/{}", parsed.registry(), parsed.repository()).to_ascii_lowercase())
}

/// Any URL in normal form for the generic receiver: without scheme, credentials and trailing
/// `/`, lower-cased.
fn normal_url(url: &str) -> String {
    normal_git(url)
}

/// The indexes of `sources` that `subject` names.
pub fn matching_sources(sources: &[Source], subject: &Subject) -> Vec<usize> {
    sources
        .iter()
        .enumerate()
        .filter(|(_, source)| source_matches(source, subject))
        .map(|(index, _)| index)
        .collect()
}

fn source_matches(source: &Source, subject: &Subject) -> bool {
    let git = source.git.as_ref().map(|g| normal_git(&g.repository));
    let image = source
        .image
        .as_ref()
        .and_then(|i| normal_image(&i.reference))
        .or_else(|| {
            let repo = source.helm_repository.as_ref()?;
            let base = repo.url.strip_prefix("oci://")?;
            normal_image(&format!("{}/{}", base.trim_end_matches('/'), repo.chart))
        });
    match subject {
        Subject::Git(name) => git.as_deref() == Some(name.as_str()),
        Subject::Image(name) => image.as_deref() == Some(name.as_str()),
        Subject::Any(name) => {
            let url = source
                .http
                .as_ref()
                .map(|h| normal_url(&h.url))
                .or_else(|| source.helm_repository.as_ref().map(|r| normal_url(&r.url)));
            git.as_deref() == Some(name.as_str())
                || image.as_deref() == Some(name.as_str())
                || normal_image(name).is_some_and(|n| image.as_deref() == Some(n.as_str()))
                || url.as_deref() == Some(name.as_str())
        }
    }
}

/// Remembers the notifications acted on, to act once per (subject, revision).
#[derive(Debug, Default)]
pub struct Coalescer {
    seen: HashMap<(Subject, Option<String>), Instant>,
}

impl Coalescer {
    /// True when a notification of `subject` at `revision` (None: unknown) arriving at `now`
    /// should be acted on; it is then remembered.
    pub fn admit(&mut self, subject: &Subject, revision: Option<&str>, now: Instant) -> bool {
        let window = |revision: &Option<String>| {
            if revision.is_some() {
                REVISION_WINDOW
            } else {
                BURST_WINDOW
            }
        };
        let key = (subject.clone(), revision.map(str::to_string));
        if let Some(at) = self.seen.get(&key) {
            if now.saturating_duration_since(*at) < window(&key.1) {
                return false;
            }
        }
        if self.seen.len() >= COALESCER_MAX {
            self.seen
                .retain(|(_, revision), at| now.saturating_duration_since(*at) < window(revision));
            if self.seen.len() >= COALESCER_MAX {
                // Still full of fresh entries (a flood of distinct revisions): forget the lot
                // rather than grow; the worst is one more poll each.
                self.seen.clear();
            }
        }
        self.seen.insert(key, now);
        true
    }
}

impl Coalescer {
    /// Forgets a notification that could not be acted on, so that its retry is.
    pub fn forget(&mut self, subject: &Subject, revision: Option<&str>) {
        self.seen
            .remove(&(subject.clone(), revision.map(str::to_string)));
    }
}

/// A token bucket: `rate` requests a second, bursts of up to `burst`.
#[derive(Debug)]
pub struct RateLimit {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl RateLimit {
    /// A full bucket at `now`.
    pub fn new(rate: u32, now: Instant) -> RateLimit {
        let rate = f64::from(rate.max(1));
        RateLimit {
            rate,
            burst: rate * 2.0,
            tokens: rate * 2.0,
            at: now,
        }
    }

    /// Whether the bucket would be full at `now` (its sender was idle long enough).
    pub fn is_full(&self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens + elapsed * self.rate >= self.burst
    }

    /// Takes a token at `now`; false when there is none (the request is refused with 429).
    pub fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Senders whose buckets are kept at most; past it, the idle ones (full buckets) are dropped,
/// then all (a flood of distinct authenticated senders costs them one burst each, no memory).
const SENDERS_MAX: usize = 4096;

/// A token bucket per sender: an authenticated sender's flood is answered 429 without
/// touching another's allowance.
#[derive(Debug)]
pub struct SenderLimits<K> {
    rate: u32,
    buckets: HashMap<K, RateLimit>,
}

impl<K: std::hash::Hash + Eq> SenderLimits<K> {
    /// Buckets of `rate` requests a second (bursts of twice that) for each sender.
    pub fn new(rate: u32) -> SenderLimits<K> {
        SenderLimits {
            rate,
            buckets: HashMap::new(),
        }
    }

    /// Takes a token of `sender`'s bucket at `now`; false when it has none.
    pub fn take(&mut self, sender: K, now: Instant) -> bool {
        if !self.buckets.contains_key(&sender) && self.buckets.len() >= SENDERS_MAX {
            self.buckets.retain(|_, bucket| !bucket.is_full(now));
            if self.buckets.len() >= SENDERS_MAX {
                self.buckets.clear();
            }
        }
        let rate = self.rate;
        self.buckets
            .entry(sender)
            .or_insert_with(|| RateLimit::new(rate, now))
            .take(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_urls_of_one_repository_have_one_normal_form() {
        let want = "github.com/org/app";
        for url in [
            "https://github.com/org/app.git",
            "https://github.com/Org/App",
            "https://user:token@github.com/org/app/",
            "http://github.com/org/app.git/",
            "ssh://git@github.com/org/app.git",
            "git@github.com:org/app.git",
            "git://github.com/org/app",
        ] {
            assert_eq!(normal_git(url), want, "{url}");
        }
        assert_eq!(
            normal_git("http://127.0.0.1:3000/git/app.git"),
            "127.0.0.1:3000/git/app"
        );
        assert_ne!(normal_git("https://github.com/org/app2"), want);
        assert_eq!(
            normal_git("127.0.0.1:3000/git/app"),
            "127.0.0.1:3000/git/app"
        );
    }

    #[test]
    fn image_references_of_one_repository_have_one_normal_form() {
        let want = Some("127.0.0.1:5000/team/app".to_string());
        assert_eq!(normal_image("127.0.0.1:5000/team/app:v1"), want);
        assert_eq!(normal_image("127.0.0.1:5000/team/app@sha256:0123456789012345678901234567890123456789012345678901234567890123"), want);
        assert_eq!(normal_image("oci://127.0.0.1:5000/team/app"), want);
        assert_eq!(
            normal_image("nginx"),
            Some("docker.io/library/nginx".into())
        );
        assert_eq!(
            normal_image("docker.io/library/nginx:1.27"),
            Some("docker.io/library/nginx".into())
        );
    }

    fn source(value: serde_json::Value) -> Source {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn sources_match_by_kind_and_repository() {
        let sources = vec![
            source(
                serde_json::json!({"kind": "git", "git": {"repository": "https://git.example/org/app.git", "ref": {"branch": "main"}}}),
            ),
            source(
                serde_json::json!({"kind": "image", "image": {"ref": "registry.example/team/app:v1"}}),
            ),
            source(
                serde_json::json!({"kind": "helmRepository", "helmRepository": {"url": "oci://registry.example/charts", "chart": "web"}}),
            ),
            source(
                serde_json::json!({"kind": "http", "http": {"url": "https://files.example/app.tar.gz"}}),
            ),
        ];
        let git = Subject::Git(normal_git("git@git.example:org/app.git"));
        assert_eq!(matching_sources(&sources, &git), vec![0]);
        let image = Subject::Image(normal_image("registry.example/team/app").unwrap());
        assert_eq!(matching_sources(&sources, &image), vec![1]);
        let chart = Subject::Image(normal_image("registry.example/charts/web:1.2.0").unwrap());
        assert_eq!(matching_sources(&sources, &chart), vec![2]);
        // A git subject never matches an image of the same name, and the generic one matches
        // whatever names it.
        assert!(
            matching_sources(&sources, &Subject::Git("registry.example/team/app".into()))
                .is_empty()
        );
        let any = |text: &str| Subject::Any(normal_url(text));
        assert_eq!(
            matching_sources(&sources, &any("https://files.example/app.tar.gz")),
            vec![3]
        );
        assert_eq!(
            matching_sources(&sources, &any("https://git.example/org/app")),
            vec![0]
        );
        assert_eq!(
            matching_sources(
                &sources,
                &Subject::Any("registry.example/team/app:v2".into())
            ),
            vec![1]
        );
    }

    #[test]
    fn one_revision_is_acted_on_once_and_a_burst_without_revision_once() {
        let mut coalescer = Coalescer::default();
        let subject = Subject::Git("git.example/org/app".into());
        let t0 = Instant::now();
        assert!(coalescer.admit(&subject, Some("abc"), t0));
        for i in 1..1000 {
            assert!(!coalescer.admit(&subject, Some("abc"), t0 + Duration::from_millis(i)));
        }
        assert!(
            coalescer.admit(&subject, Some("def"), t0),
            "another revision"
        );
        assert!(coalescer.admit(&Subject::Git("other".into()), Some("abc"), t0));
        assert!(
            coalescer.admit(&subject, Some("abc"), t0 + REVISION_WINDOW),
            "remembered for a while only"
        );
        assert!(coalescer.admit(&subject, None, t0));
        assert!(!coalescer.admit(&subject, None, t0 + Duration::from_millis(500)));
        assert!(coalescer.admit(&subject, None, t0 + BURST_WINDOW));
    }

    #[test]
    fn the_rate_limit_allows_bursts_and_refills() {
        let t0 = Instant::now();
        let mut limit = RateLimit::new(10, t0);
        let allowed = (0..100).filter(|_| limit.take(t0)).count();
        assert_eq!(allowed, 20, "a burst of twice the rate");
        assert!(!limit.take(t0));
        assert!(
            limit.take(t0 + Duration::from_millis(100)),
            "one token a tenth of a second"
        );
        assert!(!limit.take(t0 + Duration::from_millis(100)));
    }

    #[test]
    fn each_sender_has_its_own_bucket() {
        let t0 = Instant::now();
        let mut limits = SenderLimits::new(1);
        assert!(limits.take("a", t0));
        assert!(limits.take("a", t0));
        assert!(!limits.take("a", t0), "a's burst of 2 is spent");
        assert!(limits.take("b", t0), "b is not held back by a");
        assert!(limits.take("a", t0 + Duration::from_secs(1)));
    }
}
