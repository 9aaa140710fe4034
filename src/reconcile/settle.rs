//! How long a revision just applied may settle before the agent writes that it progresses.
//!
//! A revision whose objects become healthy within the window goes from its intent (Applying)
//! to Healthy in one status write; one that takes longer gets a progress write first, then
//! Healthy. The window follows how long this agent's recent revisions took to become healthy:
//! twice their median, never under [`SETTLE_MIN`] nor over [`SETTLE_MAX`]. On a quiet cluster a
//! Deployment whose Pods start at once is healthy within a second or two and the window stays
//! at 2 s. When a thousand bundles roll out at once, every rollout waits for the cluster's
//! controllers, revisions take a few seconds each, and a fixed 2 s window made almost every
//! one of them write twice (measured with the scale benchmark). A revision that takes longer than
//! the window still says so, at most 30 s after its apply; a failure is written at once, and
//! until the progress write the stale `observedGeneration` already tells that the
//! BundleDeployment is in progress.
//!
//! The arithmetic is [`window_for`] (pure, unit-tested); [`SettleWindow`] keeps the samples.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use crate::api::{RevisionPhase, RevisionStatus};

/// The shortest window (and the window until enough revisions have been seen).
pub const SETTLE_MIN: Duration = Duration::from_secs(2);
/// The longest window: a revision slower than this gets its progress written by then.
pub const SETTLE_MAX: Duration = Duration::from_secs(30);
/// Revisions remembered (the most recent ones).
const SAMPLES: usize = 64;
/// Revisions to have seen before the window moves from [`SETTLE_MIN`].
const MIN_SAMPLES: usize = 8;

/// The window for `recent` times to healthy: twice their median, within
/// [[`SETTLE_MIN`], [`SETTLE_MAX`]]; [`SETTLE_MIN`] with fewer than eight of them. Pure.
pub fn window_for(recent: &[Duration]) -> Duration {
    if recent.len() < MIN_SAMPLES {
        return SETTLE_MIN;
    }
    let mut sorted = recent.to_vec();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    (median * 2).clamp(SETTLE_MIN, SETTLE_MAX)
}

/// How long revision `revision` took from its apply to healthy, when it became healthy since
/// `before` (the same revision as the pass found it, if it had it). Pure.
pub fn became_healthy(
    before: Option<&RevisionStatus>,
    revision: &RevisionStatus,
) -> Option<Duration> {
    if revision.phase != RevisionPhase::Healthy {
        return None;
    }
    if before.is_some_and(|b| b.number == revision.number && b.phase == RevisionPhase::Healthy) {
        return None;
    }
    let took = revision
        .healthy_at
        .as_ref()?
        .0
        .duration_since(revision.applied_at.as_ref()?.0);
    Duration::try_from(took).ok()
}

/// The times to healthy of this agent's recent revisions (from apply to healthy).
#[derive(Default)]
pub struct SettleWindow {
    recent: Mutex<VecDeque<Duration>>,
}

impl SettleWindow {
    /// A revision became healthy `took` after it was applied.
    pub fn record(&self, took: Duration) {
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        if recent.len() == SAMPLES {
            recent.pop_front();
        }
        recent.push_back(took);
    }

    /// The window now (see [`window_for`]).
    pub fn current(&self) -> Duration {
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        window_for(recent.make_contiguous())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::BundleDeploymentStatus;

    fn secs(s: &[f64]) -> Vec<Duration> {
        s.iter().map(|s| Duration::from_secs_f64(*s)).collect()
    }

    #[test]
    fn stays_at_the_minimum_until_enough_revisions_were_seen() {
        assert_eq!(window_for(&[]), SETTLE_MIN);
        assert_eq!(window_for(&secs(&[20.0; 7])), SETTLE_MIN);
        assert_eq!(window_for(&secs(&[3.0; 8])), Duration::from_secs(6));
    }

    #[test]
    fn follows_twice_the_median_within_bounds() {
        // Quick rollouts: the minimum.
        assert_eq!(window_for(&secs(&[0.3; 20])), SETTLE_MIN);
        // A mass rollout where each takes about 3 s: 6 s, so most are healthy before it ends.
        let mut mixed = secs(&[2.5, 3.0, 3.5, 2.8, 3.2, 40.0, 0.5, 3.1, 2.9]);
        assert_eq!(window_for(&mixed), Duration::from_secs_f64(6.0));
        // One slow revision does not move the median much.
        mixed.push(Duration::from_secs(300));
        assert!(window_for(&mixed) <= Duration::from_secs_f64(6.2));
        // Slow everywhere: never past the maximum.
        assert_eq!(window_for(&secs(&[60.0; 10])), SETTLE_MAX);
    }

    fn status_with(
        phase: RevisionPhase,
        applied: i64,
        healthy: Option<i64>,
    ) -> BundleDeploymentStatus {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let at = |s: i64| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap());
        BundleDeploymentStatus {
            active_revision: Some(2),
            revisions: vec![RevisionStatus {
                number: 2,
                generation: 2,
                spec_digest: None,
                digest: "sha256:two".into(),
                sources: vec![],
                values_from: vec![],
                phase,
                rendered_at: None,
                applied_at: Some(at(applied)),
                healthy_at: healthy.map(at),
                objects: 1,
                reason: None,
                message: None,
                hooks: vec![],
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_revision_that_just_became_healthy_gives_its_time_from_apply() {
        let progressing = status_with(RevisionPhase::Progressing, 100, None);
        let healthy = status_with(RevisionPhase::Healthy, 100, Some(104));
        let (progressing, healthy) = (&progressing.revisions[0], &healthy.revisions[0]);
        assert_eq!(
            became_healthy(Some(progressing), healthy),
            Some(Duration::from_secs(4))
        );
        // Unwritten intent: status had an older revision, or none.
        assert_eq!(became_healthy(None, healthy), Some(Duration::from_secs(4)));
        // Already healthy when last recorded: not again (drift corrections, re-checks).
        assert_eq!(became_healthy(Some(healthy), healthy), None);
        // Not healthy yet.
        assert_eq!(became_healthy(None, progressing), None);
    }

    #[test]
    fn remembers_only_the_most_recent_revisions() {
        let window = SettleWindow::default();
        for _ in 0..SAMPLES {
            window.record(Duration::from_secs(10));
        }
        assert_eq!(window.current(), Duration::from_secs(20));
        // The cluster calmed down: after a full window of quick ones, back to the minimum.
        for _ in 0..SAMPLES {
            window.record(Duration::from_millis(500));
        }
        assert_eq!(window.current(), SETTLE_MIN);
    }
}
