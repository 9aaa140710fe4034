//! Pure: which transitions a status write records, and how they become entries of
//! `status.notifications`. No I/O; the clock comes in as a value.
//!
//! A transition is found by comparing the status before a write with the status after it, so it
//! is found exactly once: in the write that records it. Its id is deterministic (the same
//! statuses give the same id), which makes it the deduplication key and the CloudEvents `id`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::conditions::{find, types};
use crate::api::{
    BundleDeploymentStatus, DeliveryResult, NotificationStatus, NotificationTarget, RevisionPhase,
    RevisionStatus, TransitionType,
};

/// At most this many notifications per target wait for delivery; beyond it the oldest waiting
/// one is dropped (a receiver down through many rollouts must not grow the status unbounded).
pub const MAX_OPEN_PER_TARGET: usize = 8;

/// At most this many characters of a transition's detail are kept in status and sent (a failure
/// message can list many objects; the status holds up to 8 waiting entries per target).
pub const DETAIL_LIMIT: usize = 512;

fn bounded(detail: &Option<String>) -> Option<String> {
    detail.as_ref().map(|d| {
        if d.chars().count() <= DETAIL_LIMIT {
            d.clone()
        } else {
            let mut cut: String = d.chars().take(DETAIL_LIMIT - 1).collect();
            cut.push('…');
            cut
        }
    })
}

/// One transition found between two statuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// `<uid>:<revision>:<epoch>:<Type>`; see [`detect`].
    pub id: String,
    /// Its type.
    pub type_: TransitionType,
    /// The revision it is about.
    pub revision: Option<i64>,
    /// `revision 4 Healthy`.
    pub summary: String,
    /// The condition or revision message that says why.
    pub detail: Option<String>,
}

fn seconds(time: Option<&Time>) -> i64 {
    time.map_or(0, |t| t.0.as_second())
}

fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

/// The transitions recorded by the write from `before` to `after` of the BundleDeployment with
/// `uid`, in the order they happened.
///
/// Ids: `<uid>:<revision>:<epoch>:<Type>`, where `epoch` (Unix seconds) tells apart runs of the
/// same revision (a revision rolled back to runs again): the run's `appliedAt` for Progressing,
/// Healthy and Failed; the new run's `appliedAt` for RolledBack (whose revision is the one
/// replaced); the condition's `lastTransitionTime` for Stalled (condition Stalled) and Drifted
/// (condition Paused: drift is reported once per pause).
pub fn detect(
    uid: &str,
    before: &BundleDeploymentStatus,
    after: &BundleDeploymentStatus,
) -> Vec<Transition> {
    let mut found = Vec::new();
    let id = |revision: Option<i64>, epoch: i64, type_: TransitionType| {
        format!("{uid}:{}:{epoch}:{}", revision.unwrap_or(0), type_.as_str())
    };
    let runs: Vec<(&RevisionStatus, Option<&RevisionStatus>)> = {
        let mut revisions: Vec<&RevisionStatus> = after.revisions.iter().collect();
        revisions.sort_by_key(|r| r.number);
        revisions
            .into_iter()
            .map(|r| {
                let earlier = before.revisions.iter().find(|b| b.number == r.number);
                // The same run only while appliedAt is the same (a rollback starts a new one).
                let same_run = earlier
                    .filter(|b| seconds(b.applied_at.as_ref()) == seconds(r.applied_at.as_ref()));
                (r, same_run)
            })
            .collect()
    };
    let revision_transition =
        |revision: &RevisionStatus, type_: TransitionType, detail: Option<String>| Transition {
            id: id(
                Some(revision.number),
                seconds(revision.applied_at.as_ref()),
                type_,
            ),
            type_,
            revision: Some(revision.number),
            summary: format!("revision {} {}", revision.number, type_.as_str()),
            detail,
        };
    // Failures first: in a rollback the failure is what started it.
    for (revision, earlier) in &runs {
        let was = earlier.map(|e| e.phase);
        if revision.phase == RevisionPhase::Failed && was != Some(RevisionPhase::Failed) {
            let detail = match (&revision.reason, &revision.message) {
                (Some(reason), Some(message)) => Some(format!("{reason}: {message}")),
                (reason, message) => reason.clone().or(message.clone()),
            };
            found.push(revision_transition(
                revision,
                TransitionType::Failed,
                detail,
            ));
        }
    }
    let rolled_back_now = find(&after.conditions, types::ROLLED_BACK)
        .filter(|c| c.status == "True")
        .cloned();
    if let Some(condition) = rolled_back_now {
        let changed_revision = before.active_revision != after.active_revision;
        if changed_revision || !is_true(&before.conditions, types::ROLLED_BACK) {
            let from = before.active_revision.filter(|_| changed_revision);
            let to = after
                .active_revision
                .and_then(|n| after.revisions.iter().find(|r| r.number == n));
            let epoch = seconds(to.and_then(|r| r.applied_at.as_ref()));
            let revision = from.or(after.active_revision);
            found.push(Transition {
                id: id(revision, epoch, TransitionType::RolledBack),
                type_: TransitionType::RolledBack,
                revision,
                summary: match (from, to) {
                    (Some(from), Some(to)) => {
                        format!("revision {from} RolledBack to revision {}", to.number)
                    }
                    _ => format!("revision {} RolledBack", after.active_revision.unwrap_or(0)),
                },
                detail: Some(condition.message),
            });
        }
    }
    for (revision, earlier) in &runs {
        let was = earlier.map(|e| e.phase);
        let on_its_way = |p: Option<RevisionPhase>| {
            matches!(
                p,
                Some(RevisionPhase::Applying | RevisionPhase::Progressing)
            )
        };
        // A new run (a new revision, or one rolled back to) starts with Progressing; a revision
        // held after failing that progresses again is the same run and says nothing new.
        if earlier.is_none()
            && matches!(
                revision.phase,
                RevisionPhase::Applying | RevisionPhase::Progressing | RevisionPhase::Healthy
            )
        {
            found.push(revision_transition(
                revision,
                TransitionType::Progressing,
                revision.message.clone(),
            ));
        }
        if revision.phase == RevisionPhase::Healthy && (was.is_none() || on_its_way(was)) {
            found.push(revision_transition(
                revision,
                TransitionType::Healthy,
                find(&after.conditions, types::READY).map(|c| c.message.clone()),
            ));
        }
    }
    if let Some(stalled) = find(&after.conditions, types::STALLED).filter(|c| c.status == "True") {
        if !is_true(&before.conditions, types::STALLED) {
            found.push(Transition {
                id: id(
                    after.active_revision,
                    stalled.last_transition_time.0.as_second(),
                    TransitionType::Stalled,
                ),
                type_: TransitionType::Stalled,
                revision: after.active_revision,
                summary: match after.active_revision {
                    Some(n) => format!("revision {n} Stalled"),
                    None => "Stalled".to_string(),
                },
                detail: Some(format!("{}: {}", stalled.reason, stalled.message)),
            });
        }
    }
    found.extend(drifted(uid, before, after));
    found
}

/// Drift found while paused, once per pause (the Paused condition's transition tells the pause).
fn drifted(
    uid: &str,
    before: &BundleDeploymentStatus,
    after: &BundleDeploymentStatus,
) -> Option<Transition> {
    let paused = find(&after.conditions, types::PAUSED).filter(|c| c.status == "True")?;
    let drift = after.drift.as_ref()?;
    let drifted_before = before.drift.is_some() && is_true(&before.conditions, types::PAUSED);
    if drifted_before {
        return None;
    }
    let shown: Vec<String> = drift
        .objects
        .iter()
        .take(5)
        .map(|o| format!("{} {}", o.kind, o.name))
        .collect();
    let type_ = TransitionType::Drifted;
    Some(Transition {
        id: format!(
            "{uid}:{}:{}:{}",
            after.active_revision.unwrap_or(0),
            paused.last_transition_time.0.as_second(),
            type_.as_str()
        ),
        type_,
        revision: after.active_revision,
        summary: match after.active_revision {
            Some(n) => format!("revision {n} Drifted"),
            None => "Drifted".to_string(),
        },
        detail: Some(format!(
            "paused; {} objects differ from the bundle ({})",
            drift.count,
            shown.join(", ")
        )),
    })
}

/// What [`record`] changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recorded {
    /// Targets that got a new entry.
    pub targets: Vec<String>,
    /// Entries dropped undelivered (more than [`MAX_OPEN_PER_TARGET`] waiting).
    pub dropped: Vec<NotificationStatus>,
}

/// Adds a Pending entry to `entries` for every transition a target of `targets` wants and has no
/// entry for yet (same id: sent once per target), then keeps per target only its waiting entries
/// (at most [`MAX_OPEN_PER_TARGET`]) and its newest finished one; entries of targets no longer in
/// the spec go.
pub fn record(
    entries: &mut Vec<NotificationStatus>,
    targets: &[NotificationTarget],
    transitions: &[Transition],
    now: &Time,
) -> Recorded {
    let mut recorded = Recorded::default();
    for transition in transitions {
        for target in targets.iter().filter(|t| t.wants(transition.type_)) {
            if entries
                .iter()
                .any(|e| e.name == target.name && e.id == transition.id)
            {
                continue;
            }
            entries.push(NotificationStatus {
                name: target.name.clone(),
                id: transition.id.clone(),
                transition: transition.summary.clone(),
                type_: transition.type_,
                revision: transition.revision,
                detail: bounded(&transition.detail),
                occurred_at: now.clone(),
                result: DeliveryResult::Pending,
                attempts: 0,
                time: now.clone(),
                message: None,
            });
            if !recorded.targets.contains(&target.name) {
                recorded.targets.push(target.name.clone());
            }
        }
    }
    recorded.dropped = prune(entries, targets);
    recorded
}

/// Keeps per target only its waiting entries (at most [`MAX_OPEN_PER_TARGET`], the newest) and
/// its newest finished one; entries of targets not in `targets` go. Returns the waiting entries
/// dropped.
pub fn prune(
    entries: &mut Vec<NotificationStatus>,
    targets: &[NotificationTarget],
) -> Vec<NotificationStatus> {
    let mut dropped = Vec::new();
    entries.retain(|e| targets.iter().any(|t| t.name == e.name));
    for target in targets {
        let of_target = |e: &NotificationStatus| e.name == target.name;
        let open = entries
            .iter()
            .filter(|e| of_target(e) && e.result.is_open())
            .count();
        let mut excess = open.saturating_sub(MAX_OPEN_PER_TARGET);
        let newest_closed = entries
            .iter()
            .rposition(|e| of_target(e) && !e.result.is_open());
        let mut index = 0;
        entries.retain(|e| {
            let i = index;
            index += 1;
            if !of_target(e) {
                return true;
            }
            if e.result.is_open() {
                if excess > 0 {
                    excess -= 1;
                    dropped.push(e.clone());
                    return false;
                }
                return true;
            }
            Some(i) == newest_closed
        });
    }
    dropped
}

/// The oldest waiting entry of `target`: delivered in order, one at a time.
pub fn next_open<'a>(
    entries: &'a [NotificationStatus],
    target: &str,
) -> Option<&'a NotificationStatus> {
    entries
        .iter()
        .find(|e| e.name == target && e.result.is_open())
}

/// Targets with an entry waiting for delivery.
pub fn open_targets(entries: &[NotificationStatus]) -> Vec<String> {
    let mut targets: Vec<String> = Vec::new();
    for e in entries.iter().filter(|e| e.result.is_open()) {
        if !targets.contains(&e.name) {
            targets.push(e.name.clone());
        }
    }
    targets
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::conditions::{set_condition, NewCondition};
    use crate::api::{Drift, ObjectReference};

    fn time(seconds: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap())
    }

    fn revision(number: i64, phase: RevisionPhase, applied: i64) -> RevisionStatus {
        RevisionStatus {
            number,
            generation: number,
            spec_digest: None,
            digest: format!("sha256:{number}"),
            sources: vec![],
            values_from: vec![],
            phase,
            rendered_at: None,
            applied_at: Some(time(applied)),
            healthy_at: None,
            objects: 1,
            reason: None,
            message: None,
            hooks: vec![],
        }
    }

    fn status(active: i64, revisions: Vec<RevisionStatus>) -> BundleDeploymentStatus {
        BundleDeploymentStatus {
            active_revision: Some(active),
            revisions,
            ..Default::default()
        }
    }

    fn condition(status: &mut BundleDeploymentStatus, type_: &str, ok: bool, at: i64) {
        set_condition(
            &mut status.conditions,
            NewCondition {
                type_,
                status: ok,
                reason: "Because",
                message: format!("{type_} is {ok}"),
            },
            Some(1),
            &time(at),
        );
    }

    fn types_of(found: &[Transition]) -> Vec<(TransitionType, Option<i64>)> {
        found.iter().map(|t| (t.type_, t.revision)).collect()
    }

    #[test]
    fn a_new_revision_progresses_then_becomes_healthy_once() {
        let empty = BundleDeploymentStatus::default();
        let applying = status(1, vec![revision(1, RevisionPhase::Applying, 100)]);
        let found = detect("u", &empty, &applying);
        assert_eq!(
            types_of(&found),
            vec![(TransitionType::Progressing, Some(1))]
        );
        assert_eq!(found[0].id, "u:1:100:Progressing");
        assert_eq!(found[0].summary, "revision 1 Progressing");
        let healthy = status(1, vec![revision(1, RevisionPhase::Healthy, 100)]);
        let found = detect("u", &applying, &healthy);
        assert_eq!(types_of(&found), vec![(TransitionType::Healthy, Some(1))]);
        assert_eq!(found[0].id, "u:1:100:Healthy");
        // Written again unchanged (a later pass): nothing new.
        assert!(detect("u", &healthy, &healthy).is_empty());
    }

    #[test]
    fn applying_and_healthy_in_one_write_give_both() {
        let empty = BundleDeploymentStatus::default();
        let healthy = status(1, vec![revision(1, RevisionPhase::Healthy, 100)]);
        assert_eq!(
            types_of(&detect("u", &empty, &healthy)),
            vec![
                (TransitionType::Progressing, Some(1)),
                (TransitionType::Healthy, Some(1))
            ]
        );
    }

    #[test]
    fn an_automatic_rollback_reports_failed_rolled_back_stalled_and_the_new_run() {
        let before = status(
            2,
            vec![
                revision(2, RevisionPhase::Progressing, 200),
                revision(1, RevisionPhase::Healthy, 100),
            ],
        );
        let mut failed = revision(2, RevisionPhase::Failed, 200);
        failed.reason = Some("ProgressDeadlineExceeded".into());
        failed.message = Some("not healthy".into());
        let mut after = status(1, vec![failed, revision(1, RevisionPhase::Applying, 300)]);
        condition(&mut after, types::ROLLED_BACK, true, 300);
        condition(&mut after, types::STALLED, true, 300);
        let found = detect("u", &before, &after);
        assert_eq!(
            types_of(&found),
            vec![
                (TransitionType::Failed, Some(2)),
                (TransitionType::RolledBack, Some(2)),
                (TransitionType::Progressing, Some(1)),
                (TransitionType::Stalled, Some(1)),
            ]
        );
        assert_eq!(
            found[0].detail.as_deref(),
            Some("ProgressDeadlineExceeded: not healthy")
        );
        assert_eq!(found[1].summary, "revision 2 RolledBack to revision 1");
        assert_eq!(found[1].id, "u:2:300:RolledBack");
        // The run of revision 1 after the rollback has its own ids, unlike its first run.
        assert_eq!(found[2].id, "u:1:300:Progressing");
        let mut healthy_again = after.clone();
        healthy_again.revisions[1].phase = RevisionPhase::Healthy;
        let found = detect("u", &after, &healthy_again);
        assert_eq!(types_of(&found), vec![(TransitionType::Healthy, Some(1))]);
        assert_eq!(found[0].id, "u:1:300:Healthy");
    }

    #[test]
    fn a_held_revision_progressing_again_is_no_news() {
        let failed = status(2, vec![revision(2, RevisionPhase::Failed, 200)]);
        let again = status(2, vec![revision(2, RevisionPhase::Progressing, 200)]);
        assert!(detect("u", &failed, &again).is_empty());
    }

    #[test]
    fn drift_while_paused_is_reported_once_per_pause() {
        let mut paused = status(1, vec![revision(1, RevisionPhase::Healthy, 100)]);
        condition(&mut paused, types::PAUSED, true, 500);
        let mut drifted = paused.clone();
        drifted.drift = Some(Drift {
            count: 1,
            objects: vec![ObjectReference {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: "ns".into(),
                name: "cm".into(),
                message: None,
            }],
        });
        let found = detect("u", &paused, &drifted);
        assert_eq!(types_of(&found), vec![(TransitionType::Drifted, Some(1))]);
        assert_eq!(found[0].id, "u:1:500:Drifted");
        assert!(found[0].detail.as_deref().unwrap().contains("ConfigMap cm"));
        assert!(detect("u", &drifted, &drifted).is_empty());
    }

    fn target(name: &str, on: &[TransitionType]) -> NotificationTarget {
        serde_json::from_value(serde_json::json!({
            "name": name, "on": on, "webhook": {"url": "http://127.0.0.1:1/"}
        }))
        .unwrap()
    }

    fn transition(revision: i64, type_: TransitionType) -> Transition {
        Transition {
            id: format!("u:{revision}:1:{}", type_.as_str()),
            type_,
            revision: Some(revision),
            summary: format!("revision {revision} {}", type_.as_str()),
            detail: None,
        }
    }

    #[test]
    fn record_adds_one_entry_per_wanting_target_and_never_twice() {
        let targets = [
            target(
                "all",
                &[TransitionType::Progressing, TransitionType::Healthy],
            ),
            target("healthy", &[TransitionType::Healthy]),
        ];
        let mut entries = Vec::new();
        let now = time(10);
        let recorded = record(
            &mut entries,
            &targets,
            &[
                transition(1, TransitionType::Progressing),
                transition(1, TransitionType::Healthy),
            ],
            &now,
        );
        assert_eq!(recorded.targets, vec!["all", "healthy"]);
        let names: Vec<(&str, &str)> = entries
            .iter()
            .map(|e| (e.name.as_str(), e.transition.as_str()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("all", "revision 1 Progressing"),
                ("all", "revision 1 Healthy"),
                ("healthy", "revision 1 Healthy")
            ]
        );
        assert!(entries.iter().all(|e| e.result == DeliveryResult::Pending));
        // The same transition again: nothing new.
        let again = record(
            &mut entries,
            &targets,
            &[transition(1, TransitionType::Healthy)],
            &now,
        );
        assert!(again.targets.is_empty());
        assert_eq!(entries.len(), 3);
        assert_eq!(
            next_open(&entries, "all").unwrap().transition,
            "revision 1 Progressing"
        );
    }

    #[test]
    fn long_details_are_cut() {
        let targets = [target("t", &[TransitionType::Failed])];
        let mut long = transition(1, TransitionType::Failed);
        long.detail = Some("é".repeat(2 * DETAIL_LIMIT));
        let mut entries = Vec::new();
        record(&mut entries, &targets, &[long], &time(1));
        let detail = entries[0].detail.as_deref().unwrap();
        assert_eq!(detail.chars().count(), DETAIL_LIMIT);
        assert!(detail.ends_with('…'));
    }

    #[test]
    fn record_keeps_waiting_entries_and_the_newest_finished_one() {
        let targets = [target("t", &[TransitionType::Healthy])];
        let mut entries = Vec::new();
        let now = time(10);
        for n in 1..=3 {
            record(
                &mut entries,
                &targets,
                &[transition(n, TransitionType::Healthy)],
                &now,
            );
            entries.last_mut().unwrap().result = DeliveryResult::Delivered;
            prune(&mut entries, &targets);
        }
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].revision, Some(3));
        for n in 4..=(4 + MAX_OPEN_PER_TARGET as i64) {
            record(
                &mut entries,
                &targets,
                &[transition(n, TransitionType::Healthy)],
                &now,
            );
        }
        let open = entries.iter().filter(|e| e.result.is_open()).count();
        assert_eq!(open, MAX_OPEN_PER_TARGET);
        assert_eq!(entries.len(), MAX_OPEN_PER_TARGET + 1);
        // A target removed from the spec takes its entries with it.
        let recorded = record(&mut entries, &[], &[], &now);
        assert!(recorded.dropped.is_empty());
        assert!(entries.is_empty());
    }
}
