//! Helpers for `metav1.Condition` lists: set a condition by type, keeping `lastTransitionTime`
//! when its status did not change, so that status patches are stable and only real transitions
//! show up as changes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Condition types used on a BundleDeployment.
pub mod types {
    /// The bundle is installed and healthy.
    pub const READY: &str = "Ready";
    /// Work is in progress (kstatus convention).
    pub const RECONCILING: &str = "Reconciling";
    /// Cannot progress without a change (kstatus convention).
    pub const STALLED: &str = "Stalled";
    /// Sources fetched and resolved.
    pub const UNPACKED: &str = "Unpacked";
    /// The active revision's objects are applied.
    pub const INSTALLED: &str = "Installed";
    /// The active revision's objects are healthy.
    pub const HEALTHY: &str = "Healthy";
    /// `spec.paused` is true.
    pub const PAUSED: &str = "Paused";
    /// The active revision is an earlier one after a failure or a request.
    pub const ROLLED_BACK: &str = "RolledBack";
}

/// A condition to set, without timestamps (those are managed by [`set_condition`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewCondition<'a> {
    /// Condition type, e.g. [`types::READY`].
    pub type_: &'a str,
    /// True, False or Unknown.
    pub status: bool,
    /// CamelCase reason.
    pub reason: &'a str,
    /// Human-readable message.
    pub message: String,
}

/// The longest condition message kept, in bytes: messages quote errors from charts, servers and
/// templates, and an object's status is read by every watcher of it.
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// `message`, cut to at most [`MAX_MESSAGE_BYTES`] (on a character boundary) with a marker
/// saying how much was cut.
pub fn cap_message(message: String) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message;
    }
    // Room for the marker, whose length depends on the number it carries.
    let marker = |cut: usize| format!(" [… {cut} more bytes cut]");
    let mut end = MAX_MESSAGE_BYTES - marker(message.len()).len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let cut = message.len() - end;
    format!("{}{}", &message[..end], marker(cut))
}

/// Sets `new` in `conditions` for `generation` at time `now`; the message is capped
/// ([`cap_message`]).
///
/// The `lastTransitionTime` changes only when the status flips; reason and message may change
/// without moving it, as the Kubernetes API conventions ask. Returns true when anything changed.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    mut new: NewCondition<'_>,
    generation: Option<i64>,
    now: &Time,
) -> bool {
    new.message = cap_message(new.message);
    let status = if new.status { "True" } else { "False" };
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(existing) => {
            let changed = existing.status != status
                || existing.reason != new.reason
                || existing.message != new.message
                || existing.observed_generation != generation;
            if existing.status != status {
                existing.last_transition_time = now.clone();
            }
            existing.status = status.to_string();
            existing.reason = new.reason.to_string();
            existing.message = new.message;
            existing.observed_generation = generation;
            changed
        }
        None => {
            conditions.push(Condition {
                type_: new.type_.to_string(),
                status: status.to_string(),
                reason: new.reason.to_string(),
                message: new.message,
                observed_generation: generation,
                last_transition_time: now.clone(),
            });
            true
        }
    }
}

/// The condition of type `type_`, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    fn ready(status: bool, reason: &str) -> NewCondition<'_> {
        NewCondition {
            type_: types::READY,
            status,
            reason,
            message: format!("{reason} message"),
        }
    }

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let mut conds = Vec::new();
        assert!(set_condition(
            &mut conds,
            ready(false, "Fetching"),
            Some(1),
            &time(10)
        ));
        assert!(set_condition(
            &mut conds,
            ready(false, "Applying"),
            Some(1),
            &time(20)
        ));
        assert_eq!(
            find(&conds, types::READY).unwrap().last_transition_time,
            time(10)
        );
        assert!(set_condition(
            &mut conds,
            ready(true, "Healthy"),
            Some(1),
            &time(30)
        ));
        assert_eq!(
            find(&conds, types::READY).unwrap().last_transition_time,
            time(30)
        );
        assert_eq!(conds.len(), 1);
    }

    #[test]
    fn long_messages_are_cut_with_a_marker() {
        let mut conds = Vec::new();
        let long = "é".repeat(10_000);
        set_condition(
            &mut conds,
            NewCondition {
                type_: types::READY,
                status: false,
                reason: "Failed",
                message: long.clone(),
            },
            Some(1),
            &time(1),
        );
        let kept = &find(&conds, types::READY).unwrap().message;
        assert!(kept.len() <= MAX_MESSAGE_BYTES, "{}", kept.len());
        assert!(kept.ends_with(" more bytes cut]"), "{kept}");
        let cut: usize = kept
            .rsplit("[… ")
            .next()
            .and_then(|t| t.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        let prefix = kept.split(" [… ").next().unwrap();
        assert_eq!(prefix.len() + cut, long.len());
        assert_eq!(cap_message("short".into()), "short");
    }

    #[test]
    fn setting_the_same_condition_again_is_no_change() {
        let mut conds = Vec::new();
        set_condition(&mut conds, ready(true, "Healthy"), Some(2), &time(10));
        assert!(!set_condition(
            &mut conds,
            ready(true, "Healthy"),
            Some(2),
            &time(99)
        ));
        assert!(set_condition(
            &mut conds,
            ready(true, "Healthy"),
            Some(3),
            &time(99)
        ));
        assert_eq!(
            find(&conds, types::READY).unwrap().observed_generation,
            Some(3)
        );
    }
}
