//! Whether a remote cluster answers, judged from the requests made to it: a circuit breaker per
//! cluster. A request that cannot reach the API server (connection refused, TLS failure, no
//! answer within the deadline), a watch that loses it, or a 401 (credentials refused) takes the
//! cluster down; while it is down no pass sends it anything (its bundles fail at once, naming
//! it, and no worker waits on it), and only a probe, with backoff, asks whether it is back. The
//! first answer (to a probe: one that also authorizes a request) brings it up, and its bundles
//! are reconciled at once. Pure: the clock is a value.

use std::time::{Duration, Instant};

/// Condition reason of the bundles of a cluster that does not answer.
pub const REASON_CLUSTER_UNREACHABLE: &str = "ClusterUnreachable";
/// Condition reason of the bundles of a cluster that refuses the kubeconfig's credentials.
pub const REASON_CLUSTER_UNAUTHORIZED: &str = "ClusterUnauthorized";

/// The first wait before probing a cluster that went down.
pub const PROBE_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between two probes of a cluster that stays down.
pub const PROBE_MAX: Duration = Duration::from_secs(30);

/// How a cluster is failing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Its API server cannot be reached, or did not answer in time.
    Unreachable,
    /// It refuses the kubeconfig's credentials (401).
    Unauthorized,
}

impl Failure {
    /// The condition reason of its bundles.
    pub fn reason(self) -> &'static str {
        match self {
            Failure::Unreachable => REASON_CLUSTER_UNREACHABLE,
            Failure::Unauthorized => REASON_CLUSTER_UNAUTHORIZED,
        }
    }
}

/// A cluster that is down: since when, why, and when to probe it next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outage {
    /// When it went down.
    pub since: Instant,
    /// How it fails.
    pub failure: Failure,
    /// The last error, as the client said it (never a credential).
    pub message: String,
    /// Probes failed since it went down.
    pub probes: u32,
    /// When the next probe is due.
    pub next_probe: Instant,
}

/// The state of one cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Health {
    /// Nothing was asked of it yet (a new client, new credentials).
    #[default]
    Unknown,
    /// Its last request was answered.
    Up,
    /// Its requests fail.
    Down(Outage),
}

/// What a report changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// Nothing a bundle needs to hear of.
    None,
    /// It went down: its bundles report it.
    WentDown,
    /// It answers again: its bundles are reconciled at once.
    CameBack,
}

/// The wait before probe number `probes + 1`: 1 s doubling to [`PROBE_MAX`].
pub fn probe_delay(probes: u32) -> Duration {
    PROBE_FIRST
        .saturating_mul(1u32 << probes.min(16))
        .min(PROBE_MAX)
}

impl Health {
    /// A request was answered (any status but 401).
    pub fn answered(&mut self) -> Transition {
        let transition = match self {
            Health::Down(_) => Transition::CameBack,
            Health::Unknown | Health::Up => Transition::None,
        };
        *self = Health::Up;
        transition
    }

    /// A request failed as `failure` at `now`.
    pub fn failed(&mut self, now: Instant, failure: Failure, message: String) -> Transition {
        match self {
            Health::Down(outage) => {
                // Another request that was in flight when it went down: no new probe delay.
                outage.failure = failure;
                outage.message = message;
                Transition::None
            }
            Health::Unknown | Health::Up => {
                *self = Health::Down(Outage {
                    since: now,
                    failure,
                    message,
                    probes: 0,
                    next_probe: now + probe_delay(0),
                });
                Transition::WentDown
            }
        }
    }

    /// A probe failed at `now`: the next one waits longer.
    pub fn probe_failed(&mut self, now: Instant, failure: Failure, message: String) {
        if let Health::Down(outage) = self {
            outage.probes = outage.probes.saturating_add(1);
            outage.failure = failure;
            outage.message = message;
            outage.next_probe = now + probe_delay(outage.probes);
        }
    }

    /// The outage, when requests must not be sent.
    pub fn outage(&self) -> Option<&Outage> {
        match self {
            Health::Down(outage) => Some(outage),
            _ => None,
        }
    }

    /// Whether the cluster answered its last request.
    pub fn is_up(&self) -> bool {
        matches!(self, Health::Up)
    }
}

/// How a failed request of a remote cluster's client is judged: a failure of the cluster, or
/// an answer (an error of the request itself, which says the cluster is there).
pub fn judge_error(error: &kube::Error) -> Option<Failure> {
    match error {
        kube::Error::HyperError(_) | kube::Error::Service(_) => Some(Failure::Unreachable),
        kube::Error::Api(status) if status.code == 401 => Some(Failure::Unauthorized),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_on_the_first_failure_up_on_the_first_answer() {
        let t0 = Instant::now();
        let mut health = Health::default();
        assert_eq!(health.answered(), Transition::None);
        assert!(health.is_up());
        assert_eq!(
            health.failed(t0, Failure::Unreachable, "connection refused".into()),
            Transition::WentDown
        );
        let outage = health.outage().unwrap().clone();
        assert_eq!(outage.since, t0);
        assert_eq!(outage.next_probe, t0 + PROBE_FIRST);
        // Requests in flight when it went down fail too: no second transition, same since.
        let later = t0 + Duration::from_millis(300);
        assert_eq!(
            health.failed(later, Failure::Unauthorized, "Unauthorized".into()),
            Transition::None
        );
        assert_eq!(health.outage().unwrap().since, t0);
        assert_eq!(health.outage().unwrap().failure, Failure::Unauthorized);
        assert_eq!(health.answered(), Transition::CameBack);
        assert!(health.outage().is_none());
    }

    #[test]
    fn probes_back_off_to_a_ceiling() {
        let t0 = Instant::now();
        let mut health = Health::Unknown;
        health.failed(t0, Failure::Unreachable, "refused".into());
        let mut delays = Vec::new();
        for _ in 0..8 {
            health.probe_failed(t0, Failure::Unreachable, "refused".into());
            delays.push(health.outage().unwrap().next_probe - t0);
        }
        let secs: Vec<u64> = delays.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [2, 4, 8, 16, 30, 30, 30, 30]);
        assert_eq!(probe_delay(u32::MAX), PROBE_MAX);
        // A probe report on a cluster that is up changes nothing.
        let mut up = Health::Up;
        up.probe_failed(t0, Failure::Unreachable, "x".into());
        assert!(up.is_up());
    }

    #[test]
    fn errors_of_the_cluster_and_errors_of_a_request() {
        let status = |code: u16| {
            kube::Error::Api(
                kube::core::Status::failure("no", "Reason")
                    .with_code(code)
                    .boxed(),
            )
        };
        assert_eq!(judge_error(&status(401)), Some(Failure::Unauthorized));
        for code in [403, 404, 409, 422, 500] {
            assert_eq!(judge_error(&status(code)), None, "{code}");
        }
        let service = kube::Error::Service("deadline".into());
        assert_eq!(judge_error(&service), Some(Failure::Unreachable));
        assert_eq!(Failure::Unreachable.reason(), "ClusterUnreachable");
    }
}
