//! HTTP probes (`spec.healthChecks[].httpGet`), run by the agent off the reconcile path.
//!
//! Each probe of a BundleDeployment's active revision is a small task that GETs its URL every
//! `periodSeconds` and keeps its counts in memory (nothing is stored: after an agent restart a
//! probe starts over, which only delays a verdict). Like a Kubernetes readiness probe it starts
//! not healthy, becomes healthy after `successThreshold` successes in a row and failed after
//! `failureThreshold` failures in a row, and otherwise keeps its last verdict. A probe starts
//! once the revision's objects are healthy (an application whose Deployment is not available
//! yet is not probed into a failure), and starts over for every revision, rollbacks included.
//! When a verdict changes, the BundleDeployment is reconciled at once.
//!
//! [`ProbeCounts`] is the pure part (counting and the verdict); [`Probes`] owns the tasks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc::UnboundedSender;

use super::{Health, HealthState};
use crate::api::{BundleDeployment, HealthCheck, HttpGetCheck};
use crate::egress::{EgressPolicy, Redirects};

/// Where a probe stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not enough successes yet.
    Pending,
    /// `successThreshold` successes in a row (and no `failureThreshold` failures since).
    Healthy,
    /// `failureThreshold` failures in a row (and no `successThreshold` successes since).
    Failed,
}

/// A probe's counts and verdict (pure).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeCounts {
    success_threshold: u32,
    failure_threshold: u32,
    successes: u32,
    failures: u32,
    /// The verdict in force.
    pub verdict: Verdict,
    /// What the last probe got ("200 OK", "connection refused", …).
    pub last: Option<String>,
}

impl ProbeCounts {
    /// Counts for `check`'s thresholds, nothing probed yet.
    pub fn new(check: &HealthCheck) -> ProbeCounts {
        ProbeCounts {
            success_threshold: check.success_threshold().max(1) as u32,
            failure_threshold: check.failure_threshold().max(1) as u32,
            successes: 0,
            failures: 0,
            verdict: Verdict::Pending,
            last: None,
        }
    }

    /// Counts one probe's result (`ok`, and what it got); returns true when the verdict changed.
    pub fn record(&mut self, ok: bool, detail: String) -> bool {
        let before = self.verdict;
        if ok {
            self.successes += 1;
            self.failures = 0;
            if self.successes >= self.success_threshold {
                self.verdict = Verdict::Healthy;
            }
        } else {
            self.failures += 1;
            self.successes = 0;
            if self.failures >= self.failure_threshold {
                self.verdict = Verdict::Failed;
            }
        }
        self.last = Some(detail);
        self.verdict != before
    }

    /// The probe's health, its message naming what the last probe got.
    pub fn health(&self) -> Health {
        let last = self.last.as_deref().unwrap_or("not probed yet");
        match self.verdict {
            Verdict::Healthy => Health::new(HealthState::Current, format!("answering ({last})")),
            Verdict::Failed => Health::failed(format!(
                "{} failures in a row (failureThreshold {}); last: {last}",
                self.failures.max(self.failure_threshold),
                self.failure_threshold
            )),
            Verdict::Pending if self.failures > 0 => Health::in_progress(format!(
                "{} of {} failures in a row; last: {last}",
                self.failures, self.failure_threshold
            )),
            Verdict::Pending => Health::in_progress(format!(
                "{} of {} successes; last: {last}",
                self.successes, self.success_threshold
            )),
        }
    }
}

/// One probe: GETs `http.url`; success when the status is expected. Returns (ok, what it got).
/// A URL naming an address `egress` refuses is a failure that says so (names are checked by
/// the client's resolver).
pub async fn probe_once(
    client: &reqwest::Client,
    egress: &EgressPolicy,
    http: &HttpGetCheck,
) -> (bool, String) {
    let timeout = Duration::from_secs(http.timeout_seconds().max(1) as u64);
    if let Ok(url) = url::Url::parse(&http.url) {
        if let Err(refused) = egress.check_url(&url) {
            return (false, refused.to_string());
        }
    }
    match client.get(&http.url).timeout(timeout).send().await {
        Ok(response) => {
            let status = response.status();
            let ok = http.accepts(status.as_u16());
            let text = status.to_string();
            if ok {
                (true, text)
            } else {
                (false, format!("{text}, expected {}", expected(http)))
            }
        }
        Err(error) if error.is_timeout() => (false, format!("no answer within {timeout:?}")),
        Err(error) => match crate::egress::refusal_in(&error) {
            Some(refusal) => (false, refusal),
            None => (false, one_line_error(&error)),
        },
    }
}

fn expected(http: &HttpGetCheck) -> String {
    if http.expected_status.is_empty() {
        "200-399".into()
    } else {
        let codes: Vec<String> = http.expected_status.iter().map(i32::to_string).collect();
        codes.join(" or ")
    }
}

/// An error with its causes ("error sending request: connection refused").
fn one_line_error(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// A running probe.
struct Running {
    /// The check it runs and the revision it judges: a change starts it over.
    check: HealthCheck,
    revision: i64,
    counts: Arc<Mutex<ProbeCounts>>,
    task: tokio::task::AbortHandle,
}

/// The agent's probes, by BundleDeployment and check index.
#[derive(Default)]
pub struct Probes {
    running: Mutex<HashMap<(String, usize), Running>>,
    /// Asks the controller to reconcile a BundleDeployment whose probe verdict changed.
    trigger: Option<UnboundedSender<ObjectRef<BundleDeployment>>>,
    /// Which addresses probes may reach.
    egress: EgressPolicy,
}

impl Drop for Probes {
    fn drop(&mut self) {
        for running in self.lock().values() {
            running.task.abort();
        }
    }
}

impl Probes {
    /// Probes that ask for a reconcile through `trigger` when a verdict changes, reaching only
    /// the addresses `egress` allows.
    pub fn new(
        trigger: Option<UnboundedSender<ObjectRef<BundleDeployment>>>,
        egress: EgressPolicy,
    ) -> Probes {
        Probes {
            running: Mutex::new(HashMap::new()),
            trigger,
            egress,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, usize), Running>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The health of each HTTP probe of `checks` for `revision` of BundleDeployment `name`,
    /// named as in conditions. Probes start when `objects_healthy` (the revision's objects are
    /// healthy); a probe of an earlier revision or of a changed check starts over; probes no
    /// longer in `checks` stop. Must run inside a tokio runtime.
    pub fn assess(
        &self,
        name: &str,
        revision: i64,
        checks: &[HealthCheck],
        objects_healthy: bool,
    ) -> Vec<(String, Health)> {
        let mut running = self.lock();
        running.retain(|(bundle, index), probe| {
            let keep = bundle != name
                || checks.get(*index).is_some_and(|c| c == &probe.check)
                    && probe.revision == revision;
            if !keep {
                probe.task.abort();
            }
            keep
        });
        let mut healths = Vec::new();
        for (index, check) in checks.iter().enumerate() {
            let Some(http) = &check.http_get else {
                continue;
            };
            let key = (name.to_string(), index);
            let health = match running.get(&key) {
                Some(probe) => probe
                    .counts
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .health(),
                None if !objects_healthy => {
                    Health::in_progress("not probed until the revision's objects are healthy")
                }
                None => {
                    let counts = Arc::new(Mutex::new(ProbeCounts::new(check)));
                    let task = tokio::spawn(run(
                        name.to_string(),
                        http.clone(),
                        Duration::from_secs(check.period_seconds().max(1) as u64),
                        counts.clone(),
                        self.trigger.clone(),
                        self.egress,
                    ));
                    running.insert(
                        key,
                        Running {
                            check: check.clone(),
                            revision,
                            counts,
                            task: task.abort_handle(),
                        },
                    );
                    Health::in_progress("probing")
                }
            };
            healths.push((check.describe(index), health));
        }
        healths
    }

    /// Stops every probe of BundleDeployment `name` (it is being deleted).
    pub fn forget(&self, name: &str) {
        self.lock().retain(|(bundle, _), probe| {
            if bundle == name {
                probe.task.abort();
            }
            bundle != name
        });
    }
}

/// The probe task: probes at once, then every `period`, until aborted.
async fn run(
    name: String,
    http: HttpGetCheck,
    period: Duration,
    counts: Arc<Mutex<ProbeCounts>>,
    trigger: Option<UnboundedSender<ObjectRef<BundleDeployment>>>,
    egress: EgressPolicy,
) {
    crate::tls::install_crypto_provider();
    // No redirects: a probe judges the URL it names (a 3xx counts as its own status).
    let client = match egress.http_client(Redirects::None).build() {
        Ok(client) => client,
        Err(error) => {
            tracing::warn!(bundle_deployment = %name, url = %http.url, %error, "could not build the probe's HTTP client");
            return;
        }
    };
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let (ok, detail) = probe_once(&client, &egress, &http).await;
        let changed = counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(ok, detail.clone());
        tracing::debug!(bundle_deployment = %name, url = %http.url, ok, %detail, "probed");
        if changed {
            tracing::info!(bundle_deployment = %name, url = %http.url, %detail, "probe verdict changed");
            if let Some(trigger) = &trigger {
                let _ = trigger.send(ObjectRef::new(&name));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(yaml: &str) -> HealthCheck {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn healthy_after_success_threshold_failed_after_failure_threshold() {
        let probe =
            check("{httpGet: {url: 'http://x/'}, successThreshold: 2, failureThreshold: 3}");
        let mut counts = ProbeCounts::new(&probe);
        assert_eq!(counts.health().state, HealthState::InProgress);
        assert!(!counts.record(true, "200 OK".into()));
        assert_eq!(counts.verdict, Verdict::Pending);
        assert!(counts.record(true, "200 OK".into()));
        assert_eq!(counts.health().state, HealthState::Current);
        // Failures below the threshold keep the verdict.
        assert!(!counts.record(false, "500".into()));
        assert!(!counts.record(false, "500".into()));
        assert_eq!(counts.verdict, Verdict::Healthy);
        assert!(counts.record(false, "404 Not Found, expected 200".into()));
        let health = counts.health();
        assert_eq!(health.state, HealthState::Failed);
        assert_eq!(
            health.message,
            "3 failures in a row (failureThreshold 3); last: 404 Not Found, expected 200"
        );
        // A success resets the failures; two make it healthy again.
        counts.record(true, "200 OK".into());
        assert_eq!(counts.verdict, Verdict::Failed);
        counts.record(true, "200 OK".into());
        assert_eq!(counts.verdict, Verdict::Healthy);
    }

    #[test]
    fn defaults_are_kubernetes_probe_defaults() {
        let probe = check("{httpGet: {url: 'http://x/'}}");
        assert_eq!(probe.period_seconds(), 10);
        assert_eq!(probe.success_threshold(), 1);
        assert_eq!(probe.failure_threshold(), 3);
        let http = probe.http_get.unwrap();
        assert_eq!(http.timeout_seconds(), 1);
        assert!(http.accepts(200) && http.accepts(302) && !http.accepts(404));
        let strict = check("{httpGet: {url: 'http://x/', expectedStatus: [204]}}")
            .http_get
            .unwrap();
        assert!(strict.accepts(204) && !strict.accepts(200));
        assert_eq!(expected(&strict), "204");
    }
}
