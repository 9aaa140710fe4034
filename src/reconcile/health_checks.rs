//! Health of a revision as a report: the built-in rules or the user's CEL checks per object,
//! and the HTTP probes of `spec.healthChecks` (see [`crate::health`]). Pure.

use crate::api::BundleDeployment;
use crate::apply::Applied;
use crate::health;

use super::status::HealthReport;
use super::ReconcileError;

/// Condition and revision reason when a user's health check (`spec.healthChecks`) says failed.
pub const REASON_HEALTH_CHECK_FAILED: &str = "HealthCheckFailed";

/// The CEL checks of `bd.spec.healthChecks`, compiled; an expression that does not compile is
/// refused, naming its check and field.
pub fn health_checks(bd: &BundleDeployment) -> Result<health::CelChecks, ReconcileError> {
    health::cel::compile(&bd.spec.health_checks).map_err(|errors| {
        let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
        ReconcileError::InvalidHealthCheck(messages.join("; "))
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
