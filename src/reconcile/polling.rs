//! When floating sources are re-resolved: at their `pollInterval` (default
//! [`DEFAULT_POLL_INTERVAL`]), not at every reconcile. A reconcile for any other reason (drift, a
//! watch event, the requeue period, a status change) reuses the last resolution while it is
//! fresh, so it costs no request to the source; the requeue is shortened so that the next poll
//! happens on time even when the requeue period is longer.
//!
//! Pinned sources (image digest, git commit, http sha256, a chart with `digest`) are never
//! remembered here: the cache answers them without a request.
//!
//! Kept in memory: after a restart every floating source is resolved once, which is what a
//! restarted agent should do anyway.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::api::Source;
use crate::duration::parse as parse_duration;
use crate::source::Fetched;

/// The poll interval of a floating source without `pollInterval`, unless the agent's
/// `--default-poll-interval` says otherwise (docs/install/configuration.md).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(300);

/// How often `source` is re-resolved (`default` without `pollInterval`); `None` when pinned.
pub fn poll_interval(source: &Source, default: Duration) -> Option<Duration> {
    if is_pinned(source) {
        return None;
    }
    Some(
        source
            .poll_interval
            .as_deref()
            .and_then(|text| parse_duration(text).ok())
            .unwrap_or(default),
    )
}

/// A source whose spec names immutable content.
pub fn is_pinned(source: &Source) -> bool {
    if let Some(image) = &source.image {
        return image.semver.is_none() && image.reference.contains('@');
    }
    if let Some(git) = &source.git {
        return git.reference.commit.is_some();
    }
    if let Some(http) = &source.http {
        return http.sha256.is_some();
    }
    if let Some(repo) = &source.helm_repository {
        return repo.digest.is_some();
    }
    false
}

/// The last resolution of one source of one BundleDeployment.
struct Polled {
    /// The source spec it was resolved for; another spec is resolved afresh.
    spec: Source,
    fetched: Fetched,
    at: Instant,
}

/// The last resolution of every floating source, by BundleDeployment uid and source index.
pub struct SourcePolls {
    polled: Mutex<HashMap<(String, usize), Polled>>,
    /// When a notification said a source changed: a resolution made before is not fresh.
    expired: Mutex<HashMap<(String, usize), Instant>>,
    default_interval: Duration,
}

impl SourcePolls {
    /// No resolutions yet; sources without `pollInterval` are polled every `default_interval`.
    pub fn new(default_interval: Duration) -> Self {
        SourcePolls {
            polled: Mutex::new(HashMap::new()),
            expired: Mutex::new(HashMap::new()),
            default_interval,
        }
    }

    /// The remembered resolution of source `index` of `uid`, when it is for this spec, still
    /// within its poll interval at `now`, and its cached content is still on disk.
    pub fn fresh(&self, uid: &str, index: usize, source: &Source, now: Instant) -> Option<Fetched> {
        let interval = poll_interval(source, self.default_interval)?;
        let key = (uid.to_string(), index);
        let expired = self.expired_lock().get(&key).copied();
        let polled = self.lock();
        let entry = polled.get(&key)?;
        let fresh = entry.spec == *source
            && now.saturating_duration_since(entry.at) < interval
            && expired.is_none_or(|expired| entry.at > expired)
            && entry.fetched.path.is_dir();
        fresh.then(|| entry.fetched.clone())
    }

    /// Remembers a resolution made at `now` (floating sources only).
    pub fn record(
        &self,
        uid: &str,
        index: usize,
        source: &Source,
        fetched: &Fetched,
        now: Instant,
    ) {
        if poll_interval(source, self.default_interval).is_none() {
            return;
        }
        self.lock().insert(
            (uid.to_string(), index),
            Polled {
                spec: source.clone(),
                fetched: fetched.clone(),
                at: now,
            },
        );
    }

    /// How long until the first floating source of `uid` is due for a poll (zero when one is
    /// overdue or was never resolved); `None` when all its sources are pinned.
    pub fn next_due(&self, uid: &str, sources: &[Source], now: Instant) -> Option<Duration> {
        let polled = self.lock();
        sources
            .iter()
            .enumerate()
            .filter_map(|(index, source)| {
                let interval = poll_interval(source, self.default_interval)?;
                Some(match polled.get(&(uid.to_string(), index)) {
                    Some(entry) if entry.spec == *source => {
                        interval.saturating_sub(now.saturating_duration_since(entry.at))
                    }
                    _ => Duration::ZERO,
                })
            })
            .min()
    }

    /// Forgets every resolution of `uid` (the BundleDeployment is gone).
    pub fn forget(&self, uid: &str) {
        self.lock().retain(|(u, _), _| u != uid);
        self.expired_lock().retain(|(u, _), _| u != uid);
    }

    /// A notification at `now` said source `index` of `uid` changed: a resolution begun before
    /// is not fresh any more (one begun after is).
    pub fn expire(&self, uid: &str, index: usize, now: Instant) {
        self.expired_lock().insert((uid.to_string(), index), now);
    }

    fn expired_lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, usize), Instant>> {
        self.expired.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, usize), Polled>> {
        // A panic while holding the lock cannot leave the map inconsistent (single inserts).
        self.polled.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{GitReference, GitSource, ImageSource, SourceKind};
    use std::path::PathBuf;

    fn image(reference: &str, poll: Option<&str>) -> Source {
        Source {
            kind: SourceKind::Image,
            destination: String::new(),
            image: Some(ImageSource {
                reference: reference.into(),
                semver: None,
                auth: None,
                insecure_skip_tls_verify: false,
                ca_secret: None,
            }),
            git: None,
            http: None,
            helm_repository: None,
            poll_interval: poll.map(str::to_string),
            verify: None,
        }
    }

    fn fetched(path: PathBuf) -> Fetched {
        Fetched {
            kind: SourceKind::Image,
            reference: "r".into(),
            resolved: "r@sha256:1".into(),
            destination: String::new(),
            path,
            version: None,
            verified: None,
        }
    }

    #[test]
    fn pinned_sources_are_never_polled() {
        let d = DEFAULT_POLL_INTERVAL;
        assert_eq!(poll_interval(&image("r@sha256:abc", None), d), None);
        assert_eq!(poll_interval(&image("r:v1", None), d), Some(d));
        assert_eq!(
            poll_interval(&image("r:v1", Some("10s")), d),
            Some(Duration::from_secs(10))
        );
        let git = Source {
            kind: SourceKind::Git,
            image: None,
            git: Some(GitSource {
                repository: "https://g".into(),
                reference: GitReference {
                    commit: Some("a".repeat(40)),
                    ..Default::default()
                },
                directory: None,
                auth: None,
            }),
            ..image("x", None)
        };
        assert!(is_pinned(&git));
    }

    #[test]
    fn a_resolution_is_reused_within_the_interval_for_the_same_spec_only() {
        let tmp = tempfile::tempdir().unwrap();
        let polls = SourcePolls::new(DEFAULT_POLL_INTERVAL);
        let src = image("r:v1", Some("10s"));
        let t0 = Instant::now();
        assert!(polls.fresh("uid", 0, &src, t0).is_none());
        assert_eq!(
            polls.next_due("uid", std::slice::from_ref(&src), t0),
            Some(Duration::ZERO)
        );

        polls.record("uid", 0, &src, &fetched(tmp.path().to_path_buf()), t0);
        let t5 = t0 + Duration::from_secs(5);
        assert!(polls.fresh("uid", 0, &src, t5).is_some());
        assert_eq!(
            polls.next_due("uid", std::slice::from_ref(&src), t5),
            Some(Duration::from_secs(5))
        );
        // Due again after the interval; another spec or another BD never reuses it.
        assert!(polls
            .fresh("uid", 0, &src, t0 + Duration::from_secs(10))
            .is_none());
        assert!(polls
            .fresh("uid", 0, &image("r:v2", Some("10s")), t5)
            .is_none());
        assert!(polls.fresh("other", 0, &src, t5).is_none());

        // Content evicted from the cache: resolve again.
        polls.record("uid", 1, &src, &fetched(tmp.path().join("gone")), t0);
        assert!(polls.fresh("uid", 1, &src, t5).is_none());

        // A notification expires a resolution made before it, not one made after.
        polls.expire("uid", 0, t0 + Duration::from_secs(1));
        assert!(polls.fresh("uid", 0, &src, t5).is_none());
        polls.record(
            "uid",
            0,
            &src,
            &fetched(tmp.path().to_path_buf()),
            t0 + Duration::from_secs(2),
        );
        assert!(polls.fresh("uid", 0, &src, t5).is_some());

        polls.forget("uid");
        assert!(polls.fresh("uid", 0, &src, t5).is_none());
        assert_eq!(
            polls.next_due("uid", &[image("r@sha256:1", None)], t5),
            None
        );
    }
}
