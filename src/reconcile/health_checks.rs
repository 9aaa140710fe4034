//! Health of a revision as a report: the built-in rules or the user's CEL checks per object,
//! and the HTTP probes of `spec.healthChecks` (see [`crate::health`]). Pure, but for
//! [`off_runtime`], where CEL expressions are evaluated, and the [`CelMemo`] of each
//! BundleDeployment's compiled expressions.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use kube::ResourceExt;

use crate::api::BundleDeployment;
use crate::apply::Applied;
use crate::health;

use super::status::HealthReport;
use super::ReconcileError;

/// Condition and revision reason when a user's health check (`spec.healthChecks`) says failed.
pub const REASON_HEALTH_CHECK_FAILED: &str = "HealthCheckFailed";
/// Condition and revision reason when a CEL expression (`spec.healthChecks`, a `readyExpr`) is
/// over its budget.
pub const REASON_CEL_BUDGET: &str = "CelBudgetExceeded";

/// CEL evaluations running at once (each on a blocking thread, each within its memory budget).
pub const CEL_CONCURRENCY: usize = 2;

/// Runs `evaluate` (CEL evaluations) on a thread of its own with a stack of
/// [`health::cel::CEL_STACK_BYTES`], at most [`CEL_CONCURRENCY`] at once: never on the async
/// runtime's threads, whose other tasks (the Lease's renewal, other BundleDeployments' passes)
/// must not wait for it. An evaluation that panics is an error.
pub async fn off_runtime<T: Send + 'static>(
    evaluate: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    static TURNS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(CEL_CONCURRENCY);
    let _turn = TURNS
        .acquire()
        .await
        .map_err(|_| "the CEL evaluations are shut down".to_string())?;
    let (done, result) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("cel".into())
        .stack_size(health::cel::CEL_STACK_BYTES)
        .spawn(move || {
            let _ = done.send(evaluate());
        })
        .map_err(|e| format!("no thread for a CEL evaluation: {e}"))?;
    result
        .await
        .map_err(|_| "a CEL evaluation ended abnormally".to_string())
}

/// The compiled health checks of each BundleDeployment at its current generation, with the
/// expressions found over their budget (health checks and `readyExpr`s): not compiled again,
/// and what went over budget not evaluated again, until the generation changes.
#[derive(Default)]
pub struct CelMemo {
    entries: Mutex<HashMap<String, MemoEntry>>,
}

#[derive(Clone)]
struct MemoEntry {
    uid: String,
    generation: i64,
    checks: Option<Result<health::CelChecks, (bool, String)>>,
    /// `readyExpr` refusals, by `dependsOn` index.
    ready: BTreeMap<usize, String>,
}

impl CelMemo {
    /// `bd`'s entry at its generation (a new one when the generation or uid changed).
    fn with<T>(&self, bd: &BundleDeployment, f: impl FnOnce(&mut MemoEntry) -> T) -> T {
        let uid = bd.metadata.uid.clone().unwrap_or_default();
        let generation = bd.metadata.generation.unwrap_or_default();
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let entry = entries.entry(bd.name_any()).or_insert_with(|| MemoEntry {
            uid: uid.clone(),
            generation,
            checks: None,
            ready: BTreeMap::new(),
        });
        if entry.uid != uid || entry.generation != generation {
            *entry = MemoEntry {
                uid,
                generation,
                checks: None,
                ready: BTreeMap::new(),
            };
        }
        f(entry)
    }

    /// The refusal of `bd`'s `dependsOn[index]` `readyExpr` at this generation.
    pub fn ready_refusal(&self, bd: &BundleDeployment, index: usize) -> Option<String> {
        self.with(bd, |entry| entry.ready.get(&index).cloned())
    }

    /// Records that `bd`'s `dependsOn[index]` `readyExpr` went over its budget.
    pub fn refuse_ready(&self, bd: &BundleDeployment, index: usize, message: String) {
        self.with(bd, |entry| entry.ready.insert(index, message));
    }

    /// Forgets BundleDeployment `name`.
    pub fn forget(&self, name: &str) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }
}

/// The CEL checks of `bd.spec.healthChecks`, compiled (once per generation with `memo`); an
/// expression that does not compile, or is over its budget for any object, is refused, naming
/// its check and field.
pub fn health_checks(
    bd: &BundleDeployment,
    memo: Option<&CelMemo>,
) -> Result<health::CelChecks, ReconcileError> {
    let compile = || {
        health::cel::compile(&bd.spec.health_checks).map_err(|errors| {
            let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
            (errors.iter().any(|e| e.over_budget), messages.join("; "))
        })
    };
    let compiled = match memo {
        Some(memo) => memo.with(bd, |entry| entry.checks.get_or_insert_with(compile).clone()),
        None => compile(),
    };
    compiled.map_err(|(over_budget, message)| match over_budget {
        true => ReconcileError::CelBudgetExceeded(message),
        false => ReconcileError::InvalidHealthCheck(message),
    })
}

/// Applies the health rules (the user's CEL checks first, else the built-in ones) to the applied
/// objects as the API server last returned them in this pass (no extra reads); lists the first
/// unhealthy ones. Pure.
pub fn assess_health(
    applied: &[Applied],
    options: &health::HealthOptions,
    checks: &health::CelChecks,
) -> HealthReport {
    let (assessed, failed_check) = assess_objects(applied, options, checks);
    report(assessed, failed_check)
}

/// Each applied object that was not skipped, in order, with its health (the user's CEL checks
/// first, else the built-in rules); and the first object a CEL check found failed. Pure.
pub fn assess_objects(
    applied: &[Applied],
    options: &health::HealthOptions,
    checks: &health::CelChecks,
) -> (Vec<(String, health::Health)>, Option<String>) {
    let _phase = crate::metrics::METRICS.phase("health");
    let mut failed_check = None;
    let assessed: Vec<(String, health::Health)> = assessed_objects(applied)
        .map(|a| {
            let health = match &a.live {
                Some(live) => match checks.assess(live) {
                    Some(health) => {
                        if health.state == health::HealthState::Failed && failed_check.is_none() {
                            failed_check = Some(format!("{}: {}", a.key, health.message));
                        }
                        health
                    }
                    None => health::assess(live, options),
                },
                None => health::Health {
                    state: health::HealthState::InProgress,
                    message: "not read back from the cluster".into(),
                },
            };
            (a.key.to_string(), health)
        })
        .collect();
    (assessed, failed_check)
}

/// [`assess_objects`], with the CEL checks evaluated off the async runtime (see
/// [`off_runtime`]); `applied` is handed back.
pub async fn assess_objects_apart(
    applied: Vec<Applied>,
    options: &health::HealthOptions,
    checks: &health::CelChecks,
) -> Result<AssessedApart, ReconcileError> {
    if checks.is_empty() {
        let assessed = assess_objects(&applied, options, checks);
        return Ok((applied, assessed));
    }
    let (options, checks) = (options.clone(), checks.for_pass());
    off_runtime(move || {
        let assessed = assess_objects(&applied, &options, &checks);
        (applied, assessed)
    })
    .await
    .map_err(ReconcileError::CelBudgetExceeded)
}

/// The objects handed back by [`assess_objects_apart`], each with its health, and the first
/// failed by a CEL check.
pub type AssessedApart = (
    Vec<Applied>,
    (Vec<(String, health::Health)>, Option<String>),
);

/// The applied objects whose health counts (those not skipped), in the order
/// [`assess_objects`] lists them.
pub fn assessed_objects(applied: &[Applied]) -> impl Iterator<Item = &Applied> {
    applied.iter().filter(|a| a.outcome.in_inventory())
}

/// The report on `assessed` objects. Pure.
pub fn report(
    assessed: Vec<(String, health::Health)>,
    failed_check: Option<String>,
) -> HealthReport {
    let unhealthy: Vec<(String, health::Health)> = assessed
        .iter()
        .filter(|(_, h)| !h.is_healthy())
        .cloned()
        .collect();
    HealthReport {
        healthy: unhealthy.is_empty(),
        failed: unhealthy
            .iter()
            .any(|(_, h)| h.state == health::HealthState::Failed),
        total: assessed.len(),
        message: health::summarize(&unhealthy, SUMMARIZED),
        waiting: unhealthy.iter().map(|(name, _)| name.clone()).collect(),
        failed_check,
    }
}

/// How many unhealthy objects a health message names.
pub const SUMMARIZED: usize = 5;

/// Adds the HTTP probes' health to `report`: a probe that is not healthy makes the revision
/// unhealthy, one that failed fails it as a failed CEL check does. Pure.
pub fn add_probes(report: &mut HealthReport, probes: Vec<(String, health::Health)>) {
    let unhealthy: Vec<(String, health::Health)> = probes
        .into_iter()
        .filter(|(_, h)| !h.is_healthy())
        .collect();
    if unhealthy.is_empty() {
        return;
    }
    report.healthy = false;
    report
        .waiting
        .extend(unhealthy.iter().map(|(name, _)| name.clone()));
    for (name, health) in &unhealthy {
        if health.state == health::HealthState::Failed {
            report.failed = true;
            report
                .failed_check
                .get_or_insert_with(|| format!("{name}: {}", health.message));
        }
    }
    let probes = health::summarize(&unhealthy, SUMMARIZED);
    report.message = if report.message.is_empty() {
        probes
    } else {
        format!("{}; {probes}", report.message)
    };
}

#[cfg(test)]
mod tests {
    use pallet_formats::ObjectKey;
    use serde_json::{json, Value};

    use super::*;

    fn applied(kind: &str, name: &str, live: Value) -> Applied {
        Applied {
            key: ObjectKey {
                group: "example.com".into(),
                kind: kind.into(),
                namespace: Some("team-a".into()),
                name: name.into(),
            },
            api_version: "example.com/v1".into(),
            outcome: crate::apply::Outcome::Unchanged,
            adopted_from: None,
            resource_version_before: None,
            resource_version_after: None,
            revision_before: None,
            fields_changed: Vec::new(),
            left_out: Vec::new(),
            live: Some(live),
        }
    }

    fn widget(name: &str, phase: &str) -> Applied {
        applied(
            "Widget",
            name,
            json!({"apiVersion": "example.com/v1", "kind": "Widget",
                   "metadata": {"name": name, "namespace": "team-a"}, "status": {"phase": phase}}),
        )
    }

    fn checks() -> health::CelChecks {
        let check: crate::api::HealthCheck = serde_saphyr::from_str(
            "{apiVersion: example.com/v1, kind: Widget, current: \"status.phase == 'Ready'\", \
             failed: \"status.phase == 'Failed'\"}",
        )
        .unwrap();
        health::cel::compile(&[check]).unwrap()
    }

    #[test]
    fn a_failed_cel_check_is_reported_with_the_object_and_the_check() {
        let options = health::HealthOptions::default();
        let report = assess_health(
            &[widget("a", "Ready"), widget("b", "Failed")],
            &options,
            &checks(),
        );
        assert!(!report.healthy && report.failed);
        let failed = report.failed_check.unwrap();
        assert!(
            failed.starts_with("Widget.example.com team-a/b: healthChecks[0] (example.com/v1 Widget): failed is true"),
            "{failed}"
        );
        // Without the check, both would be healthy (no Ready condition, no rule for the kind).
        let report = assess_health(
            &[widget("a", "Ready"), widget("b", "Failed")],
            &options,
            &health::CelChecks::default(),
        );
        assert!(report.healthy && report.failed_check.is_none());
    }

    #[test]
    fn probes_add_to_the_report() {
        let options = health::HealthOptions::default();
        let mut report = assess_health(&[widget("a", "Ready")], &options, &checks());
        assert!(report.healthy);
        let answering = health::Health {
            state: health::HealthState::Current,
            message: "answering (200 OK)".into(),
        };
        add_probes(
            &mut report,
            vec![("healthChecks[1] (httpGet http://app/)".into(), answering)],
        );
        assert!(report.healthy, "a healthy probe changes nothing");
        let failing = health::Health {
            state: health::HealthState::Failed,
            message: "3 failures in a row (failureThreshold 3); last: 500".into(),
        };
        add_probes(
            &mut report,
            vec![("healthChecks[1] (httpGet http://app/)".into(), failing)],
        );
        assert!(!report.healthy && report.failed);
        assert_eq!(
            report.failed_check.as_deref(),
            Some("healthChecks[1] (httpGet http://app/): 3 failures in a row (failureThreshold 3); last: 500")
        );
        assert_eq!(report.message, report.failed_check.clone().unwrap());
    }
}
