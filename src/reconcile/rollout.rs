//! Pure revision bookkeeping: which revision a rendered digest belongs to, whether it may be tried,
//! what starting, failing, healing and rolling back change in `status.revisions`. No I/O; the clock
//! comes in as a value. The reconciler (`super`) does the reads and writes around these steps.
//!
//! The rules (api.md, steps 3, 5, 6 and 8):
//! - A rendered digest that differs from the active revision's makes a new revision, unless that
//!   digest already failed (or was rolled back) at the current generation and no retry was asked
//!   for: then the active revision stays, and its stored content keeps being applied.
//! - A new revision replaces the active one at once, whatever its phase: a fix never waits out
//!   the deadline of the revision it replaces.
//! - History keeps at most `historyLimit` revisions, never dropping the active or the last healthy.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{
    BundleDeploymentStatus, ResolvedSource, ResolvedValues, RevisionPhase, RevisionStatus,
    REQUESTED_RECONCILE_ANNOTATION, REQUESTED_RETRY_ANNOTATION, REQUESTED_ROLLBACK_ANNOTATION,
};

/// One-shot requests found on a BundleDeployment and not handled yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requests {
    /// Roll back to a stored revision.
    pub rollback: Option<RollbackRequest>,
    /// Try the failed content again (the annotation's value).
    pub retry: Option<String>,
    /// Reconcile now (the annotation's value).
    pub reconcile: Option<String>,
}

/// A request to make revision `to` active again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RollbackRequest {
    /// The annotation's whole value, recorded in `status.lastHandledRollback` once handled.
    pub value: String,
    /// The revision asked for, or why the value is not a revision number.
    pub to: Result<i64, String>,
}

/// The requests in `annotations` whose values differ from the last handled ones in `status`.
pub fn pending_requests(
    annotations: &BTreeMap<String, String>,
    status: &BundleDeploymentStatus,
) -> Requests {
    let pending = |annotation: &str, handled: &Option<String>| {
        annotations
            .get(annotation)
            .filter(|value| !value.is_empty() && Some(*value) != handled.as_ref())
            .cloned()
    };
    Requests {
        rollback: pending(REQUESTED_ROLLBACK_ANNOTATION, &status.last_handled_rollback).map(
            |value| RollbackRequest {
                to: parse_rollback(&value),
                value,
            },
        ),
        retry: pending(REQUESTED_RETRY_ANNOTATION, &status.last_handled_retry),
        reconcile: pending(
            REQUESTED_RECONCILE_ANNOTATION,
            &status.last_handled_reconcile,
        ),
    }
}

/// `"<N>"` or `"<N>@<token>"`: the token only makes a repeated request distinct.
fn parse_rollback(value: &str) -> Result<i64, String> {
    let number = value.split_once('@').map_or(value, |(n, _)| n).trim();
    match number.parse::<i64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "{REQUESTED_ROLLBACK_ANNOTATION}: {value:?} is not a revision number \
             (expected \"<N>\" or \"<N>@<token>\")"
        )),
    }
}

/// What a freshly rendered digest means for the BundleDeployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The digest is the active revision's: apply it (again), then assess health.
    Continue,
    /// Start a new revision with this number.
    New {
        /// The new revision's number.
        number: i64,
    },
    /// The digest failed before at this generation and no retry was asked for: keep the active
    /// revision (`active`, None when there is none) and leave the failed content alone.
    Refused {
        /// The revision that failed with this digest.
        failed: i64,
    },
}

/// Which spec rendered a digest: its generation and [`crate::api::BundleDeploymentSpec::digest`].
#[derive(Clone, Copy, Debug)]
pub struct SpecVersion<'a> {
    /// metadata.generation.
    pub generation: i64,
    /// The spec's digest, `paused` left out.
    pub digest: &'a str,
}

impl SpecVersion<'_> {
    /// True when `revision` came from this spec (by digest; by generation for revisions recorded
    /// before spec digests were).
    fn same_as(&self, revision: &RevisionStatus) -> bool {
        match &revision.spec_digest {
            Some(digest) => digest == self.digest,
            None => revision.generation == self.generation,
        }
    }
}

/// Decides what to do with rendered `digest` for `spec`, the pass having found `active` (see
/// [`super::view::View::active`]); `retry` is a pending retry request.
pub fn decide(
    status: &BundleDeploymentStatus,
    active: Option<&RevisionStatus>,
    digest: &str,
    spec: &SpecVersion<'_>,
    retry: bool,
) -> Decision {
    let next_number = next_number(status);
    // The newest attempt at this digest tells whether it is refused.
    let refused_by = status
        .revisions
        .iter()
        .find(|r| r.digest == digest)
        .filter(|r| {
            matches!(r.phase, RevisionPhase::Failed | RevisionPhase::RolledBack) && spec.same_as(r)
        });
    match (active, refused_by) {
        (_, Some(failed)) if !retry => Decision::Refused {
            failed: failed.number,
        },
        (Some(active), None) if active.digest == digest => Decision::Continue,
        _ => Decision::New {
            number: next_number,
        },
    }
}

/// The number a new revision gets: one more than the highest in the history.
pub fn next_number(status: &BundleDeploymentStatus) -> i64 {
    status.revisions.iter().map(|r| r.number).max().unwrap_or(0) + 1
}

/// The entry of revision `number`, when it is in the history.
pub fn entry(status: &BundleDeploymentStatus, number: i64) -> Option<&RevisionStatus> {
    status.revisions.iter().find(|r| r.number == number)
}

fn revision_mut(status: &mut BundleDeploymentStatus, number: i64) -> Option<&mut RevisionStatus> {
    status.revisions.iter_mut().find(|r| r.number == number)
}

/// What [`start_revision`] needs to know about the new revision.
pub struct NewRevision<'a> {
    /// Its number.
    pub number: i64,
    /// The generation that rendered it.
    pub generation: i64,
    /// The digest of the spec that rendered it.
    pub spec_digest: &'a str,
    /// Its content digest.
    pub digest: &'a str,
    /// Its resolved sources.
    pub sources: Vec<ResolvedSource>,
    /// Its `valuesFrom` references as read.
    pub values_from: Vec<ResolvedValues>,
    /// How many objects it has.
    pub objects: usize,
    /// When it was first rendered (see [`super::render_time`]).
    pub rendered_at: Option<Time>,
}

/// Makes `new` the active revision, in phase Applying since `now`; the revision it replaces is
/// Superseded (unless it already Failed). Returns the revision numbers dropped from the history,
/// whose stored snapshots should be deleted.
pub fn start_revision(
    status: &mut BundleDeploymentStatus,
    new: NewRevision<'_>,
    history_limit: usize,
    now: &Time,
) -> Vec<i64> {
    if let Some(previous) = status.active_revision {
        if let Some(previous) = revision_mut(status, previous) {
            if previous.phase != RevisionPhase::Failed {
                let before = previous.phase;
                previous.phase = RevisionPhase::Superseded;
                previous.message = Some(match before {
                    RevisionPhase::Applying | RevisionPhase::Progressing => format!(
                        "superseded by revision {} before it became healthy",
                        new.number
                    ),
                    _ => format!("superseded by revision {}", new.number),
                });
            }
        }
    }
    status.revisions.insert(
        0,
        RevisionStatus {
            number: new.number,
            generation: new.generation,
            spec_digest: Some(new.spec_digest.to_string()),
            digest: new.digest.to_string(),
            sources: new.sources,
            values_from: new.values_from,
            phase: RevisionPhase::Applying,
            rendered_at: new.rendered_at,
            applied_at: Some(now.clone()),
            healthy_at: None,
            objects: new.objects as i64,
            reason: None,
            message: None,
            hooks: Vec::new(),
        },
    );
    status.active_revision = Some(new.number);
    trim_history(status, history_limit)
}

/// Records `new` as content refused without being applied (phase RolledBack, with `message`):
/// what the sources rendered when a requested rollback was carried out. The active revision
/// stays; the content is refused like any rolled-back revision's until the spec or the sources
/// change, a retry, or a rollback to it. The history is not trimmed here (the next new revision
/// trims it), so that the refusal is not dropped at once under a small `historyLimit`.
pub fn record_refused(status: &mut BundleDeploymentStatus, new: NewRevision<'_>, message: &str) {
    status.revisions.insert(
        0,
        RevisionStatus {
            number: new.number,
            generation: new.generation,
            spec_digest: Some(new.spec_digest.to_string()),
            digest: new.digest.to_string(),
            sources: new.sources,
            values_from: new.values_from,
            phase: RevisionPhase::RolledBack,
            rendered_at: new.rendered_at,
            applied_at: None,
            healthy_at: None,
            objects: new.objects as i64,
            reason: None,
            message: Some(message.to_string()),
            hooks: Vec::new(),
        },
    );
}

/// Drops the oldest revisions beyond `limit`, never the active or the last healthy one.
/// Returns the dropped numbers.
pub fn trim_history(status: &mut BundleDeploymentStatus, limit: usize) -> Vec<i64> {
    let protected = [status.active_revision, status.last_healthy_revision];
    let mut keep_budget = limit.max(1);
    let mut dropped = Vec::new();
    // Protected revisions always stay; the others fill what the limit leaves, newest first.
    let protected_count = status
        .revisions
        .iter()
        .filter(|r| protected.contains(&Some(r.number)))
        .count();
    keep_budget = keep_budget.saturating_sub(protected_count);
    status.revisions.retain(|r| {
        if protected.contains(&Some(r.number)) {
            return true;
        }
        if keep_budget > 0 {
            keep_budget -= 1;
            return true;
        }
        dropped.push(r.number);
        false
    });
    dropped
}

/// Revision `number`'s objects are applied: Applying becomes Progressing. So does a Failed
/// revision held in place whose apply now went through (say, after RBAC was granted): its health
/// decides again, and with its deadline long past, it is Healthy or Failed at once.
pub fn mark_applied(status: &mut BundleDeploymentStatus, number: i64) {
    if let Some(revision) = revision_mut(status, number) {
        if matches!(
            revision.phase,
            RevisionPhase::Applying | RevisionPhase::Failed
        ) {
            revision.phase = RevisionPhase::Progressing;
        }
    }
}

/// Revision `number`'s objects are all healthy: it becomes Healthy (once; `healthyAt` stays).
pub fn mark_healthy(status: &mut BundleDeploymentStatus, number: i64, now: &Time) {
    if let Some(revision) = revision_mut(status, number) {
        if matches!(
            revision.phase,
            RevisionPhase::Applying | RevisionPhase::Progressing
        ) {
            revision.phase = RevisionPhase::Healthy;
            revision.healthy_at = Some(now.clone());
            revision.reason = None;
            revision.message = None;
        }
        if revision.phase == RevisionPhase::Healthy {
            status.last_healthy_revision = Some(number);
        }
    }
}

/// Marks revision `number` Failed with `reason` and `message`.
pub fn mark_failed(status: &mut BundleDeploymentStatus, number: i64, reason: &str, message: &str) {
    if let Some(revision) = revision_mut(status, number) {
        revision.phase = RevisionPhase::Failed;
        revision.reason = Some(reason.to_string());
        revision.message = Some(message.to_string());
    }
}

/// True when `revision` is still on its way (Applying or Progressing) and its deadline, counted
/// from when the agent began applying it, has passed at `now`.
pub fn deadline_passed(revision: Option<&RevisionStatus>, deadline: Duration, now: &Time) -> bool {
    let Some(revision) = revision else {
        return false;
    };
    if !matches!(
        revision.phase,
        RevisionPhase::Applying | RevisionPhase::Progressing
    ) {
        return false;
    }
    let Some(started) = &revision.applied_at else {
        return false;
    };
    let elapsed = now.0.duration_since(started.0);
    elapsed.as_secs_f64() >= deadline.as_secs_f64()
}

/// How long until `revision`'s deadline passes (zero when it has).
pub fn deadline_remaining(
    revision: Option<&RevisionStatus>,
    deadline: Duration,
    now: &Time,
) -> Option<Duration> {
    let started = revision?.applied_at.as_ref()?;
    let elapsed = Duration::try_from(now.0.duration_since(started.0)).unwrap_or_default();
    Some(deadline.saturating_sub(elapsed))
}

/// Makes stored revision `to` active again (phase Applying since `now`). The revision it replaces
/// keeps Failed if it failed; otherwise it becomes RolledBack (when `to` is older) or Superseded
/// (when `to` is newer: rolling forward). Returns false when `to` is not in the history.
pub fn start_rollback(
    status: &mut BundleDeploymentStatus,
    to: i64,
    message: &str,
    now: &Time,
) -> bool {
    if revision_mut(status, to).is_none() {
        return false;
    }
    if let Some(from) = status.active_revision.filter(|from| *from != to) {
        if let Some(replaced) = revision_mut(status, from) {
            if replaced.phase != RevisionPhase::Failed {
                replaced.phase = if to < from {
                    RevisionPhase::RolledBack
                } else {
                    RevisionPhase::Superseded
                };
                replaced.message = Some(message.to_string());
            }
        }
    }
    if let Some(target) = revision_mut(status, to) {
        target.phase = RevisionPhase::Applying;
        target.applied_at = Some(now.clone());
        target.healthy_at = None;
        target.reason = None;
        target.message = Some(message.to_string());
    }
    status.active_revision = Some(to);
    true
}

/// Numbers of the revisions in the history, for messages.
pub fn history_numbers(status: &BundleDeploymentStatus) -> String {
    let numbers: Vec<String> = status
        .revisions
        .iter()
        .map(|r| r.number.to_string())
        .collect();
    if numbers.is_empty() {
        "none".into()
    } else {
        numbers.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(status: &mut BundleDeploymentStatus) {
        let number = status.active_revision.unwrap();
        mark_applied(status, number);
    }

    fn healthy(status: &mut BundleDeploymentStatus, now: &Time) {
        let number = status.active_revision.unwrap();
        mark_healthy(status, number, now);
    }

    fn failed(status: &mut BundleDeploymentStatus, reason: &str, message: &str) {
        let number = status.active_revision.unwrap();
        mark_failed(status, number, reason, message);
    }

    /// What the pass's view would say is active.
    fn active(status: &BundleDeploymentStatus) -> Option<&RevisionStatus> {
        status
            .active_revision
            .and_then(|number| entry(status, number))
    }

    fn time(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    fn start(
        status: &mut BundleDeploymentStatus,
        number: i64,
        generation: i64,
        digest: &str,
    ) -> Vec<i64> {
        start_revision(
            status,
            NewRevision {
                number,
                generation,
                spec_digest: spec_of(generation),
                digest,
                sources: vec![],
                values_from: vec![],
                objects: 1,
                rendered_at: None,
            },
            3,
            &time(number * 100),
        )
    }

    /// Specs 1, 2, 3…: each generation a different spec.
    fn spec_of(generation: i64) -> &'static str {
        [
            "sha256:s0",
            "sha256:s1",
            "sha256:s2",
            "sha256:s3",
            "sha256:s4",
            "sha256:s5",
            "sha256:s6",
        ][generation as usize]
    }

    fn spec(generation: i64) -> SpecVersion<'static> {
        SpecVersion {
            generation,
            digest: spec_of(generation),
        }
    }

    fn phase(status: &BundleDeploymentStatus, number: i64) -> RevisionPhase {
        status
            .revisions
            .iter()
            .find(|r| r.number == number)
            .unwrap()
            .phase
    }

    #[test]
    fn requests_are_pending_until_their_value_is_handled() {
        let annotations: BTreeMap<String, String> = [
            (
                REQUESTED_ROLLBACK_ANNOTATION.to_string(),
                "2@t1".to_string(),
            ),
            (REQUESTED_RETRY_ANNOTATION.to_string(), "t1".to_string()),
            (REQUESTED_RECONCILE_ANNOTATION.to_string(), "t2".to_string()),
        ]
        .into();
        let mut status = BundleDeploymentStatus::default();
        let requests = pending_requests(&annotations, &status);
        assert_eq!(requests.rollback.as_ref().unwrap().to, Ok(2));
        assert_eq!(requests.retry.as_deref(), Some("t1"));
        status.last_handled_rollback = Some("2@t1".into());
        status.last_handled_retry = Some("t1".into());
        status.last_handled_reconcile = Some("t2".into());
        assert_eq!(pending_requests(&annotations, &status), Requests::default());
    }

    #[test]
    fn a_bad_rollback_value_is_reported_not_guessed() {
        assert_eq!(parse_rollback("3"), Ok(3));
        assert_eq!(parse_rollback("3@2026-11-21T10:00:00Z"), Ok(3));
        assert!(parse_rollback("latest")
            .unwrap_err()
            .contains("not a revision number"));
        assert!(parse_rollback("0").is_err());
    }

    #[test]
    fn new_digest_makes_a_new_revision_and_the_same_one_continues() {
        let mut status = BundleDeploymentStatus::default();
        assert_eq!(
            decide(&status, active(&status), "sha256:a", &spec(1), false),
            Decision::New { number: 1 }
        );
        start(&mut status, 1, 1, "sha256:a");
        assert_eq!(
            decide(&status, active(&status), "sha256:a", &spec(1), false),
            Decision::Continue
        );
        assert_eq!(
            decide(&status, active(&status), "sha256:a", &spec(2), false),
            Decision::Continue,
            "a spec change that renders the same content is no new revision"
        );
        assert_eq!(
            decide(&status, active(&status), "sha256:b", &spec(1), false),
            Decision::New { number: 2 }
        );
    }

    #[test]
    fn failed_content_is_refused_until_the_spec_changes_or_a_retry() {
        let mut status = BundleDeploymentStatus::default();
        start(&mut status, 1, 1, "sha256:good");
        applied(&mut status);
        healthy(&mut status, &time(150));
        start(&mut status, 2, 2, "sha256:bad");
        failed(&mut status, "ProgressDeadlineExceeded", "web not available");
        assert!(start_rollback(
            &mut status,
            1,
            "revision 2 failed",
            &time(300)
        ));
        assert_eq!(phase(&status, 2), RevisionPhase::Failed);
        assert_eq!(status.active_revision, Some(1));
        assert_eq!(
            decide(&status, active(&status), "sha256:bad", &spec(2), false),
            Decision::Refused { failed: 2 }
        );
        assert_eq!(
            decide(&status, active(&status), "sha256:bad", &spec(2), true),
            Decision::New { number: 3 }
        );
        assert_eq!(
            decide(&status, active(&status), "sha256:bad", &spec(3), false),
            Decision::New { number: 3 }
        );
        assert_eq!(
            decide(&status, active(&status), "sha256:fix", &spec(2), false),
            Decision::New { number: 3 }
        );
        // A pause and a resume bump the generation, not the spec: still refused.
        let resumed = SpecVersion {
            generation: 4,
            digest: spec_of(2),
        };
        assert_eq!(
            decide(&status, active(&status), "sha256:bad", &resumed, false),
            Decision::Refused { failed: 2 }
        );
    }

    #[test]
    fn a_new_revision_supersedes_one_still_progressing() {
        let mut status = BundleDeploymentStatus::default();
        start(&mut status, 1, 1, "sha256:a");
        applied(&mut status);
        start(&mut status, 2, 2, "sha256:b");
        assert_eq!(phase(&status, 1), RevisionPhase::Superseded);
        assert!(status.revisions[1]
            .message
            .as_deref()
            .unwrap()
            .contains("before it became healthy"));
        assert_eq!(phase(&status, 2), RevisionPhase::Applying);
        assert_eq!(status.active_revision, Some(2));
    }

    #[test]
    fn history_keeps_the_active_and_last_healthy_revisions() {
        let mut status = BundleDeploymentStatus::default();
        start(&mut status, 1, 1, "sha256:1");
        healthy(&mut status, &time(1));
        let mut dropped = Vec::new();
        for n in 2..=6 {
            dropped.extend(start(&mut status, n, n, &format!("sha256:{n}")));
            failed(&mut status, "Unhealthy", "x");
        }
        let kept: Vec<i64> = status.revisions.iter().map(|r| r.number).collect();
        assert_eq!(
            kept,
            vec![6, 5, 1],
            "limit 3: the newest two plus the last healthy"
        );
        assert_eq!(dropped, vec![2, 3, 4]);
    }

    #[test]
    fn rollback_forward_supersedes_and_backward_rolls_back() {
        let mut status = BundleDeploymentStatus::default();
        start(&mut status, 1, 1, "sha256:1");
        healthy(&mut status, &time(1));
        start(&mut status, 2, 2, "sha256:2");
        healthy(&mut status, &time(2));
        assert!(start_rollback(&mut status, 1, "requested", &time(3)));
        assert_eq!(phase(&status, 2), RevisionPhase::RolledBack);
        assert_eq!(phase(&status, 1), RevisionPhase::Applying);
        assert!(start_rollback(&mut status, 2, "requested", &time(4)));
        assert_eq!(phase(&status, 1), RevisionPhase::Superseded);
        assert_eq!(status.active_revision, Some(2));
        assert!(!start_rollback(&mut status, 9, "requested", &time(5)));
    }

    #[test]
    fn the_deadline_counts_from_the_start_of_the_apply() {
        let mut status = BundleDeploymentStatus::default();
        start(&mut status, 1, 1, "sha256:1"); // applied_at = 100 s
        let deadline = Duration::from_secs(30);
        assert!(!deadline_passed(active(&status), deadline, &time(129)));
        assert_eq!(
            deadline_remaining(active(&status), deadline, &time(120)),
            Some(Duration::from_secs(10))
        );
        assert!(deadline_passed(active(&status), deadline, &time(130)));
        healthy(&mut status, &time(131));
        assert!(
            !deadline_passed(active(&status), deadline, &time(500)),
            "a healthy revision has no deadline"
        );
    }
}
