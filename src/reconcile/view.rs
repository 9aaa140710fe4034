//! What a pass knows before any phase runs, computed once: the BundleDeployment, its active,
//! last-healthy and target revisions, the requests not handled yet, the spec's durations parsed,
//! and the clock. Every phase takes this view and returns what it decided; none reads the clock,
//! parses a duration or looks up the active revision again.
//!
//! The active revision's entry is found here and nowhere else: [`active_entry`] is private to
//! this module, and a test of the reconcile modules' source keeps it so (see the tests below).
//! A revision the pass itself starts or rolls back to is known by the number the deciding phase
//! returns ([`super::pass::Target`]), not found again.

use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::rollout::{self, Requests};
use super::ReconcileError;
use crate::api::{BundleDeployment, BundleDeploymentStatus, OnFailure, RevisionStatus};

/// What a pass knows before any phase runs.
pub struct View<'a> {
    /// The BundleDeployment.
    pub bd: &'a BundleDeployment,
    /// Its name.
    pub name: String,
    /// Its uid (empty before the API server gave it one).
    pub uid: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// The wall clock at the start of the pass: every time the pass records is this one.
    pub now: Time,
    /// The monotonic clock at the start of the pass (poll schedules).
    pub clock: Instant,
    /// One-shot requests (rollback, retry, reconcile) not handled yet.
    pub requests: Requests,
    /// The active revision's entry as the pass found it (None: nothing installed yet).
    pub active: Option<RevisionStatus>,
    /// The newest revision that became healthy.
    pub last_healthy: Option<i64>,
    /// The spec's rollout settings, durations parsed.
    pub rollout: Rollout,
    /// Whether the pass is paused (`spec.paused`), and the reason given.
    pub paused: Option<Option<String>>,
    /// A helm chart: the only format with hooks and lookups.
    pub helm: bool,
    /// The cluster the bundle's objects live on, resolved once (see [`super::workload`]).
    pub workload: &'a super::workload::Workload,
}

/// The spec's rollout settings, its durations parsed once per pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rollout {
    /// `rollout.progressDeadline`.
    pub progress_deadline: Duration,
    /// `rollout.onFailure`.
    pub on_failure: OnFailure,
    /// `rollout.historyLimit` (at least one).
    pub history_limit: usize,
}

impl Rollout {
    /// The spec's rollout settings. Every duration of the spec is parsed here (also each
    /// source's `pollInterval` and each function's `timeout`): an error names the field of one
    /// that is not a duration or too long, and the pass refuses the spec with it (no default
    /// stands in for what the author wrote).
    pub fn of(bd: &BundleDeployment) -> Result<Rollout, ReconcileError> {
        let rollout = bd.spec.rollout();
        let invalid = |field: &str, error: crate::duration::DurationError| {
            ReconcileError::InvalidDuration(format!("spec.{field}: {error}"))
        };
        let progress_deadline = crate::duration::parse(rollout.progress_deadline())
            .map_err(|e| invalid("rollout.progressDeadline", e))?;
        for (index, source) in bd.spec.sources.iter().enumerate() {
            if let Some(text) = &source.poll_interval {
                crate::duration::parse(text)
                    .map_err(|e| invalid(&format!("sources[{index}].pollInterval"), e))?;
            }
        }
        for (index, processor) in bd.spec.processors.iter().enumerate() {
            if let Some(text) = processor.function.as_ref().and_then(|f| f.timeout.as_ref()) {
                crate::duration::parse(text)
                    .map_err(|e| invalid(&format!("processors[{index}].function.timeout"), e))?;
            }
        }
        Ok(Rollout {
            progress_deadline,
            on_failure: rollout.on_failure(),
            history_limit: rollout.history_limit().max(1) as usize,
        })
    }

    /// The settings of a spec whose durations are refused: the defaults, for the phases that
    /// run before admission refuses it (a pause, a dependency wait) and for a deletion.
    pub fn defaults(bd: &BundleDeployment) -> Rollout {
        let rollout = bd.spec.rollout();
        Rollout {
            progress_deadline: Duration::from_secs(600),
            on_failure: rollout.on_failure(),
            history_limit: rollout.history_limit().max(1) as usize,
        }
    }
}

impl<'a> View<'a> {
    /// The view of a pass over `bd` starting from `status` (the status as last written, or an
    /// intent kept out of it), at `now`.
    pub fn new(
        bd: &'a BundleDeployment,
        status: &BundleDeploymentStatus,
        rollout: Rollout,
        now: Time,
        workload: &'a super::workload::Workload,
    ) -> View<'a> {
        let annotations = bd.annotations();
        View {
            bd,
            name: bd.name_any(),
            uid: bd.metadata.uid.clone().unwrap_or_default(),
            generation: bd.metadata.generation.unwrap_or(0),
            now,
            clock: Instant::now(),
            requests: rollout::pending_requests(annotations, status),
            active: active_entry(status).cloned(),
            last_healthy: status.last_healthy_revision,
            rollout,
            paused: bd
                .spec
                .paused
                .then(|| annotations.get(super::PAUSED_REASON_ANNOTATION).cloned()),
            helm: bd.spec.format == crate::api::BundleFormat::Helm,
            workload,
        }
    }

    /// The time now, as the pass's clock counts it: its start on the wall clock plus how long
    /// it has run on the monotonic one. The wall clock is read once per pass; a phase that
    /// comes after long I/O (an apply, a render) judges deadlines and records times with this.
    pub fn current(&self) -> Time {
        let elapsed = k8s_openapi::jiff::SignedDuration::try_from(self.clock.elapsed())
            .unwrap_or(k8s_openapi::jiff::SignedDuration::MAX);
        Time(self.now.0.saturating_add(elapsed).unwrap_or(self.now.0))
    }

    /// The active revision's number.
    pub fn active_number(&self) -> Option<i64> {
        self.active.as_ref().map(|r| r.number)
    }
}

/// The wall clock, read once per pass (see [`View::now`]).
pub fn wall_clock() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// The active revision's entry in `status`, when it is still in the history. Private: a pass
/// finds it once, in [`View::new`].
fn active_entry(status: &BundleDeploymentStatus) -> Option<&RevisionStatus> {
    let number = status.active_revision?;
    status.revisions.iter().find(|r| r.number == number)
}

/// The active revision's entry of a status outside a pass (the status as it was found on the
/// server, read by tools and by the first look after a restart).
pub fn active_of(status: &BundleDeploymentStatus) -> Option<&RevisionStatus> {
    active_entry(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reconcile modules' source, without test modules.
    fn sources() -> Vec<(String, String)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/reconcile");
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let text = text
                .split("\n#[cfg(test)]\nmod tests")
                .next()
                .unwrap()
                .to_string();
            files.push((
                path.file_name().unwrap().to_string_lossy().into_owned(),
                text,
            ));
        }
        files
    }

    #[test]
    fn the_active_revision_is_found_once_per_pass_in_the_view() {
        // Ways to find the active revision's entry again: naming the private finder, the one
        // for statuses outside a pass, the former finder, or matching the history against the
        // active number (an `Option`).
        let lookups = [
            "active_entry(",
            "active_of(",
            "active_revision(",
            "Some(r.number) ==",
            "== Some(r.number)",
        ];
        let mut found = Vec::new();
        for (file, text) in sources() {
            for lookup in lookups {
                let count = text.matches(lookup).count();
                let allowed = match (file.as_str(), lookup) {
                    // The finder, its definition, its one call in `View::new`, and the
                    // status-outside-a-pass one.
                    ("view.rs", "active_entry(") => 3,
                    ("view.rs", "active_of(") => 1,
                    // The deletion pass reads the status found on the server.
                    ("cleanup.rs", "active_of(") => 1,
                    _ => 0,
                };
                if count > allowed {
                    found.push(format!("{file}: {lookup} ({count}×)"));
                }
            }
        }
        assert!(
            found.is_empty(),
            "the active revision is looked up again outside the view: {found:?}; take it from \
             the pass's `View` (or the `Target` its deciding phase returned)"
        );
    }

    #[test]
    fn hostile_durations_refuse_the_spec_and_name_the_field() {
        let bd: BundleDeployment = serde_json::from_value(serde_json::json!({
            "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
            "metadata": {"name": "x"},
            "spec": {"format": "plain", "sources": [],
                     "rollout": {"progressDeadline": "99999999999999999999h"}},
        }))
        .unwrap();
        let error = Rollout::of(&bd).unwrap_err();
        assert_eq!(error.category(), "InvalidDuration");
        assert!(
            error
                .to_string()
                .starts_with("spec.rollout.progressDeadline: "),
            "{error}"
        );
        let mut fine = bd.clone();
        fine.spec.rollout = None;
        assert_eq!(
            Rollout::of(&fine).unwrap().progress_deadline,
            Duration::from_secs(600)
        );
    }
}
