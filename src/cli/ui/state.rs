//! What the view says about one BundleDeployment at a glance: its state (one word out of six)
//! and the summary row the overview lists. Pure: a BundleDeployment in, plain values out.

use std::collections::BTreeMap;

use kube::ResourceExt as _;

use crate::api::conditions::{find, types};
use crate::api::BundleDeployment;
use crate::reconcile::PAUSED_REASON_ANNOTATION;

/// The label that puts a BundleDeployment in a shard (`pallet agent --shard`).
pub const SHARD_LABEL: &str = "sharding.fluxcd.io/key";

/// Longest message kept in a summary: the overview shows one line, the bundle's page all of it.
const SUMMARY_MESSAGE_CHARS: usize = 240;

/// A BundleDeployment's state as the overview shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BundleState {
    /// Its active revision is healthy and nothing is in progress.
    Ready,
    /// A revision is being applied or is not healthy yet.
    Progressing,
    /// The last attempt failed (fetch, render, apply or health) and the agent waits for a change
    /// or retries.
    Failed,
    /// An earlier revision is active after a failure or a requested rollback.
    RolledBack,
    /// `spec.paused`: the agent writes nothing.
    Paused,
    /// Waiting for a dependency, or for an agent to look at it at all.
    Waiting,
}

impl BundleState {
    /// Every state, in the order the overview counts them.
    pub const ALL: [BundleState; 6] = [
        BundleState::Failed,
        BundleState::RolledBack,
        BundleState::Progressing,
        BundleState::Waiting,
        BundleState::Paused,
        BundleState::Ready,
    ];

    /// The state's name (also its value in URLs).
    pub fn name(self) -> &'static str {
        match self {
            BundleState::Ready => "Ready",
            BundleState::Progressing => "Progressing",
            BundleState::Failed => "Failed",
            BundleState::RolledBack => "RolledBack",
            BundleState::Paused => "Paused",
            BundleState::Waiting => "Waiting",
        }
    }

    /// The state named `name` (as [`BundleState::name`] writes it, any case).
    pub fn parse(name: &str) -> Option<BundleState> {
        BundleState::ALL
            .into_iter()
            .find(|s| s.name().eq_ignore_ascii_case(name))
    }

    /// What the state means, for a tooltip and screen readers.
    pub fn meaning(self) -> &'static str {
        match self {
            BundleState::Ready => "the active revision is healthy",
            BundleState::Progressing => "a revision is being applied or becoming healthy",
            BundleState::Failed => "the last attempt failed",
            BundleState::RolledBack => "an earlier revision is active after a rollback",
            BundleState::Paused => "paused: the agent writes nothing",
            BundleState::Waiting => "waiting for a dependency or for an agent",
        }
    }
}

/// Ready reasons of work in progress, not of a failure.
const PROGRESS_REASONS: &[&str] = &["Applying", "Progressing", "Fetching", "Retrying"];

/// The state of `bd`, from its spec and conditions (see [`BundleState`]). A pause wins over
/// everything (the agent does nothing else while paused), then a dependency wait, then a
/// failure of the current attempt, then a rollback that holds.
pub fn state_of(bd: &BundleDeployment) -> BundleState {
    if bd.spec.paused {
        return BundleState::Paused;
    }
    let Some(status) = bd.status.as_ref().filter(|s| !s.conditions.is_empty()) else {
        return BundleState::Waiting;
    };
    let ready = find(&status.conditions, types::READY);
    let ready_true = ready.is_some_and(|c| c.status == "True");
    let reason = ready.map(|c| c.reason.as_str()).unwrap_or_default();
    if reason == "DependencyNotReady" {
        return BundleState::Waiting;
    }
    let rolled_back =
        find(&status.conditions, types::ROLLED_BACK).is_some_and(|c| c.status == "True");
    // After an automatic rollback Ready is False with reason RolledBack (the spec asks for the
    // revision that failed); after a requested one, Ready is True.
    if rolled_back && (ready_true || reason == "RolledBack") {
        return BundleState::RolledBack;
    }
    if ready_true {
        return BundleState::Ready;
    }
    let stalled = find(&status.conditions, types::STALLED).is_some_and(|c| c.status == "True");
    match ready {
        Some(c) if c.status == "False" && (stalled || !PROGRESS_REASONS.contains(&reason)) => {
            BundleState::Failed
        }
        _ if rolled_back => BundleState::RolledBack,
        _ => BundleState::Progressing,
    }
}

/// One BundleDeployment as the overview lists it: small, so that an index of 10,000 stays a few
/// MiB (the bundle's page reads the whole object again).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Its name.
    pub name: String,
    /// Its resourceVersion: a live page refreshes when it moves.
    pub resource_version: String,
    /// Its state.
    pub state: BundleState,
    /// `plain`, `helm`, `kustomize` or `registry-v1`.
    pub format: String,
    /// The revision whose objects are on the cluster.
    pub active_revision: Option<i64>,
    /// The Ready condition's reason (or the pause's).
    pub reason: String,
    /// The Ready condition's message on one line, cut at a few hundred characters.
    pub message: String,
    /// When the condition that decides the state last changed (Unix seconds).
    pub since: Option<i64>,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// The BundleDeployments it depends on (by name).
    pub depends_on: Vec<String>,
    /// The cluster it deploys to: its `spec.kubeConfig` Secret's name, or
    /// [`crate::api::LOCAL_CLUSTER`].
    pub cluster: String,
}

impl Summary {
    /// Its shard (the [`SHARD_LABEL`] label), if any.
    pub fn shard(&self) -> Option<&str> {
        self.labels.get(SHARD_LABEL).map(String::as_str)
    }
}

/// `text` on one line, cut to `max` characters (with `…`).
pub fn one_line(text: &str, max: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= max {
        return line;
    }
    let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// The format's name as the spec writes it.
pub fn format_name(bd: &BundleDeployment) -> String {
    serde_json::to_value(bd.spec.format)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The summary of `bd`.
pub fn summary_of(bd: &BundleDeployment) -> Summary {
    let state = state_of(bd);
    let status = bd.status.as_ref();
    let conditions = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let deciding = match state {
        BundleState::Paused => find(conditions, types::PAUSED),
        BundleState::RolledBack => find(conditions, types::ROLLED_BACK),
        _ => None,
    }
    .or_else(|| find(conditions, types::READY));
    let (reason, message) = match (state, deciding) {
        (BundleState::Paused, _) => (
            "Paused".to_string(),
            bd.annotations()
                .get(PAUSED_REASON_ANNOTATION)
                .cloned()
                .unwrap_or_default(),
        ),
        (_, Some(c)) => (c.reason.clone(), c.message.clone()),
        (_, None) => (
            "NotObserved".to_string(),
            "no agent has reconciled it yet".to_string(),
        ),
    };
    Summary {
        name: bd.name_any(),
        resource_version: bd.resource_version().unwrap_or_default(),
        state,
        format: format_name(bd),
        active_revision: status.and_then(|s| s.active_revision),
        reason,
        message: one_line(&message, SUMMARY_MESSAGE_CHARS),
        since: deciding.map(|c| c.last_transition_time.0.as_second()),
        labels: bd.labels().clone(),
        depends_on: bd
            .spec
            .depends_on
            .iter()
            .filter(|d| d.is_bundle_deployment())
            .map(|d| d.name.clone())
            .collect(),
        cluster: crate::api::cluster_of(bd).name().to_string(),
    }
}

/// How long ago `since` was, from `now` (Unix seconds), kubectl-style: `45s`, `3m`, `5h`, `2d`.
pub fn age(since: Option<i64>, now: i64) -> String {
    let Some(since) = since else {
        return "-".into();
    };
    match (now - since).max(0) {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bd(extra: &str) -> BundleDeployment {
        serde_saphyr::from_str(&format!(
            r#"
apiVersion: pallet.dev/v1alpha1
kind: BundleDeployment
metadata: {{name: web, resourceVersion: "7", labels: {{team: a, sharding.fluxcd.io/key: s1}}}}
{extra}
"#
        ))
        .unwrap()
    }

    fn with_conditions(spec: &str, conditions: &str) -> BundleDeployment {
        bd(&format!(
            "spec: {{format: helm, {spec} sources: [{{kind: git, git: {{repository: r, ref: {{branch: main}}}}}}]}}\nstatus:\n  activeRevision: 2\n  conditions:\n{conditions}"
        ))
    }

    fn condition(type_: &str, status: &str, reason: &str) -> String {
        format!("  - {{type: {type_}, status: \"{status}\", reason: {reason}, message: \"{reason}  text\", lastTransitionTime: \"2026-01-01T00:00:00Z\"}}\n")
    }

    #[test]
    fn states_follow_the_conditions() {
        let cases = [
            (condition("Ready", "True", "Healthy"), BundleState::Ready),
            (
                condition("Ready", "False", "Progressing"),
                BundleState::Progressing,
            ),
            (
                condition("Ready", "False", "ProgressDeadlineExceeded"),
                BundleState::Failed,
            ),
            (
                condition("Ready", "False", "Progressing") + &condition("Stalled", "True", "X"),
                BundleState::Failed,
            ),
            (
                condition("Ready", "True", "Healthy") + &condition("RolledBack", "True", "Failed"),
                BundleState::RolledBack,
            ),
            (
                condition("Ready", "False", "RolledBack")
                    + &condition("Stalled", "True", "RolledBack")
                    + &condition("RolledBack", "True", "RolledBack"),
                BundleState::RolledBack,
            ),
            (
                condition("Ready", "False", "Unreachable")
                    + &condition("RolledBack", "True", "Failed"),
                BundleState::Failed,
            ),
            (
                condition("Ready", "False", "DependencyNotReady"),
                BundleState::Waiting,
            ),
        ];
        for (conditions, want) in cases {
            assert_eq!(
                state_of(&with_conditions("", &conditions)),
                want,
                "{conditions}"
            );
        }
        let paused = with_conditions("paused: true,", &condition("Ready", "True", "Healthy"));
        assert_eq!(state_of(&paused), BundleState::Paused);
        let new = bd("spec: {format: plain, sources: []}");
        assert_eq!(state_of(&new), BundleState::Waiting);
        assert_eq!(summary_of(&new).reason, "NotObserved");
    }

    #[test]
    fn the_summary_keeps_what_the_overview_shows() {
        let failed = with_conditions("", &condition("Ready", "False", "Unauthorized"));
        let s = summary_of(&failed);
        assert_eq!(s.name, "web");
        assert_eq!(s.resource_version, "7");
        assert_eq!(s.format, "helm");
        assert_eq!(s.active_revision, Some(2));
        assert_eq!(s.reason, "Unauthorized");
        assert_eq!(s.message, "Unauthorized text");
        assert_eq!(s.shard(), Some("s1"));
        assert_eq!(
            s.since,
            Some(
                "2026-01-01T00:00:00Z"
                    .parse::<k8s_openapi::jiff::Timestamp>()
                    .unwrap()
                    .as_second()
            )
        );
        assert_eq!(
            BundleState::parse("rolledback"),
            Some(BundleState::RolledBack)
        );
        assert_eq!(one_line(&"word ".repeat(100), 10).chars().count(), 10);
        assert_eq!(age(Some(0), 90), "90s");
        assert_eq!(age(Some(0), 7200), "2h");
        assert_eq!(age(None, 1), "-");
    }
}
