//! Pure status computation: from what a reconcile found and did to the BundleDeployment's next
//! status. No I/O; the clock comes in as a value.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::conditions::{set_condition, types, NewCondition};
use crate::api::{BundleDeploymentStatus, Drift, Inventory, ObjectReference};

/// At most this many objects are listed in `status.inventory.objects`; the count is always exact.
/// Keeps the status of a very large bundle well under the object size limit.
pub const INVENTORY_LIST_LIMIT: usize = 2000;

/// What one reconcile came to.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Every object of the rendered set is applied.
    Installed {
        /// Digest of the rendered set.
        digest: String,
        /// The applied objects.
        inventory: Vec<ObjectReference>,
        /// Objects skipped because the cluster does not serve their kind.
        skipped: Vec<ObjectReference>,
        /// How many objects were written (created or updated) in this pass.
        written: usize,
    },
    /// `spec.paused`: nothing was written.
    Paused {
        /// The reason given in `pallet.dev/paused-reason`, if any.
        reason: Option<String>,
        /// Objects that differ from the bundle (what resuming would revert); `None` when they
        /// could not be computed (a source or the render failed), leaving the last list as is.
        drift: Option<Vec<ObjectReference>>,
    },
    /// A phase failed.
    Failed {
        /// Which phase: Unpacked (fetch), Installed (render, apply).
        phase: FailedPhase,
        /// CamelCase reason (the error's category).
        reason: String,
        /// What went wrong, where.
        message: String,
        /// True when retrying without a change may succeed.
        transient: bool,
    },
}

/// The phase a failure belongs to, which decides the condition it is reported on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailedPhase {
    /// Fetching sources (condition Unpacked).
    Fetch,
    /// Rendering or applying (condition Installed).
    Install,
}

/// At most this many drifted objects are listed; the count is always exact.
pub const DRIFT_LIST_LIMIT: usize = 50;

fn drift_summary(drift: &[ObjectReference]) -> Option<Drift> {
    (!drift.is_empty()).then(|| Drift {
        count: drift.len() as i64,
        objects: drift.iter().take(DRIFT_LIST_LIMIT).cloned().collect(),
    })
}

/// The status after `outcome`, starting from `current`, for `generation` at `now`.
pub fn next_status(
    current: &BundleDeploymentStatus,
    generation: Option<i64>,
    outcome: &Outcome,
    now: &Time,
) -> BundleDeploymentStatus {
    let mut status = current.clone();
    status.observed_generation = generation;
    let mut set = |type_: &str, ok: bool, reason: &str, message: String| {
        set_condition(
            &mut status.conditions,
            NewCondition {
                type_,
                status: ok,
                reason,
                message,
            },
            generation,
            now,
        );
    };
    match outcome {
        Outcome::Installed {
            digest,
            inventory,
            skipped,
            written,
        } => {
            set(
                types::UNPACKED,
                true,
                "Unpacked",
                "all sources fetched and resolved".into(),
            );
            let short = digest.get(..19).unwrap_or(digest);
            set(
                types::INSTALLED,
                true,
                "Installed",
                format!(
                    "{} objects applied ({written} written in the last pass); content {short}",
                    inventory.len()
                ),
            );
            set(
                types::READY,
                true,
                "Installed",
                format!("{} objects installed", inventory.len()),
            );
            set(
                types::RECONCILING,
                false,
                "Idle",
                "nothing in progress".into(),
            );
            set(types::STALLED, false, "Progressing", "not stalled".into());
            set(
                types::PAUSED,
                false,
                "Active",
                "reconciling normally".into(),
            );
            status.inventory = Some(Inventory {
                count: inventory.len() as i64,
                objects: inventory
                    .iter()
                    .take(INVENTORY_LIST_LIMIT)
                    .cloned()
                    .collect(),
            });
            status.skipped = skipped.clone();
            // Everything was just applied: whatever drifted has been corrected.
            status.drift = None;
        }
        Outcome::Paused { reason, drift } => {
            if let Some(drift) = drift {
                status.drift = drift_summary(drift);
            }
            let message = match reason {
                Some(reason) => format!("paused: {reason}"),
                None => "paused (no reason given; set annotation pallet.dev/paused-reason)".into(),
            };
            set(types::PAUSED, true, "Paused", message);
            set(
                types::RECONCILING,
                false,
                "Paused",
                "paused: no writes until spec.paused is false".into(),
            );
        }
        Outcome::Failed {
            phase,
            reason,
            message,
            transient,
        } => {
            match phase {
                FailedPhase::Fetch => set(types::UNPACKED, false, reason, message.clone()),
                FailedPhase::Install => {
                    set(
                        types::UNPACKED,
                        true,
                        "Unpacked",
                        "all sources fetched and resolved".into(),
                    );
                    set(types::INSTALLED, false, reason, message.clone());
                }
            }
            set(types::READY, false, reason, message.clone());
            set(
                types::PAUSED,
                false,
                "Active",
                "reconciling normally".into(),
            );
            if *transient {
                set(
                    types::RECONCILING,
                    true,
                    "Retrying",
                    format!("retrying after: {message}"),
                );
                set(
                    types::STALLED,
                    false,
                    "Retrying",
                    "the error may pass; retrying with backoff".into(),
                );
            } else {
                set(
                    types::RECONCILING,
                    false,
                    reason,
                    "waiting for a change to the spec or the sources".into(),
                );
                set(types::STALLED, true, reason, message.clone());
            }
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::conditions::find;

    fn time(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    fn object(name: &str) -> ObjectReference {
        ObjectReference {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "ns".into(),
            name: name.into(),
            message: None,
        }
    }

    fn installed() -> Outcome {
        Outcome::Installed {
            digest: "sha256:0123456789abcdef0123".into(),
            inventory: vec![object("a"), object("b")],
            skipped: vec![],
            written: 2,
        }
    }

    #[test]
    fn installed_sets_ready_and_inventory() {
        let status = next_status(&Default::default(), Some(3), &installed(), &time(1));
        assert_eq!(status.observed_generation, Some(3));
        let ready = find(&status.conditions, types::READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "Installed")
        );
        assert_eq!(ready.observed_generation, Some(3));
        assert_eq!(status.inventory.as_ref().unwrap().count, 2);
        assert_eq!(
            find(&status.conditions, types::STALLED).unwrap().status,
            "False"
        );
    }

    #[test]
    fn permanent_failure_stalls_and_keeps_the_inventory() {
        let before = next_status(&Default::default(), Some(1), &installed(), &time(1));
        let failed = Outcome::Failed {
            phase: FailedPhase::Install,
            reason: "ObjectRejected".into(),
            message: "Deployment.apps ns/web: the API server refused it".into(),
            transient: false,
        };
        let after = next_status(&before, Some(2), &failed, &time(2));
        let ready = find(&after.conditions, types::READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "ObjectRejected")
        );
        assert!(ready.message.contains("ns/web"));
        assert_eq!(
            find(&after.conditions, types::STALLED).unwrap().status,
            "True"
        );
        assert_eq!(
            find(&after.conditions, types::RECONCILING).unwrap().status,
            "False"
        );
        assert_eq!(
            after.inventory, before.inventory,
            "what is applied is still what is applied"
        );
    }

    #[test]
    fn transient_failure_is_reconciling_not_stalled() {
        let failed = Outcome::Failed {
            phase: FailedPhase::Fetch,
            reason: "Unreachable".into(),
            message: "git http://127.0.0.1:1/x.git: connection refused".into(),
            transient: true,
        };
        let after = next_status(&Default::default(), Some(1), &failed, &time(2));
        assert_eq!(
            find(&after.conditions, types::UNPACKED).unwrap().status,
            "False"
        );
        assert_eq!(
            find(&after.conditions, types::RECONCILING).unwrap().status,
            "True"
        );
        assert_eq!(
            find(&after.conditions, types::STALLED).unwrap().status,
            "False"
        );
    }

    #[test]
    fn same_outcome_twice_changes_nothing() {
        let once = next_status(&Default::default(), Some(1), &installed(), &time(1));
        let twice = next_status(&once, Some(1), &installed(), &time(50));
        assert_eq!(once, twice, "an unchanged status is not patched again");
    }

    #[test]
    fn paused_reports_the_reason_and_drift_until_resumed() {
        let paused = Outcome::Paused {
            reason: Some("hotfix INC-42".into()),
            drift: Some(vec![object("a")]),
        };
        let status = next_status(&Default::default(), Some(1), &paused, &time(1));
        let condition = find(&status.conditions, types::PAUSED).unwrap();
        assert_eq!(condition.status, "True");
        assert!(condition.message.contains("hotfix INC-42"));
        assert_eq!(status.drift.as_ref().unwrap().count, 1);
        // Resuming and applying clears the drift.
        let resumed = next_status(&status, Some(2), &installed(), &time(2));
        assert_eq!(resumed.drift, None);
        assert_eq!(
            find(&resumed.conditions, types::PAUSED).unwrap().status,
            "False"
        );
    }
}
