//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several agent replicas only
//! one runs the controller (and writes).
//!
//! The algorithm is client-go's: the holder renews the Lease every `duration / 3`; a candidate
//! takes it over when the holder field is empty (released) or when the Lease record has not
//! changed for its `leaseDurationSeconds`, as measured on the candidate's own monotonic clock
//! from when it first saw that record (so clock skew between machines does not matter). Every
//! write is a `replace` carrying the `resourceVersion` it read, so two candidates racing for one
//! expired Lease cannot both win: the API server rejects the second with a conflict.
//!
//! A leader that cannot renew within `2 * duration / 3` of its last renewal (or finds another
//! holder) has lost the Lease; the agent then exits non-zero at once (see `cli::agent`), since a
//! candidate may take over `duration` after that last renewal.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;

/// Annotation on the Lease: the version of the agent that holds it (`pallet version` reads it).
pub const AGENT_VERSION_ANNOTATION: &str = "pallet.dev/agent-version";
/// Where the Lease is and who this process is.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// Lease name.
    pub name: String,
    /// Lease namespace.
    pub namespace: String,
    /// This process's identity (the holder it writes).
    pub identity: String,
    /// How long a Lease stays valid without renewal (whole seconds; at least one).
    pub duration: Duration,
}

impl LeaseConfig {
    /// How often the leader renews, and how often a candidate retries: a third of the duration.
    pub fn retry_period(&self) -> Duration {
        self.duration / 3
    }

    /// How long after its last renewal a leader gives up: two thirds of the duration, leaving a
    /// third as margin before a candidate may take over.
    pub fn renew_deadline(&self) -> Duration {
        self.duration * 2 / 3
    }
}

/// Errors talking to the API server about the Lease.
#[derive(Debug, thiserror::Error)]
#[error("lease {namespace}/{name}: {action}: {source}")]
pub struct LeaderError {
    /// Lease namespace.
    pub namespace: String,
    /// Lease name.
    pub name: String,
    /// What was being done.
    pub action: &'static str,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

/// The outcome of one election attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// This process holds the Lease (acquired or renewed just now).
    Leading,
    /// Another process holds it (or won a race for it just now).
    Following {
        /// The current holder, if known.
        holder: Option<String>,
    },
}

/// What to do with a Lease as read (pure, for tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// It is ours: renew it.
    Renew,
    /// It is free or expired: take it.
    Acquire,
    /// Someone else holds it and it has not expired.
    Follow,
}

/// Decides what to do with `spec` (the Lease's spec as read) for `identity`; `expired` says
/// whether the record has gone unchanged for its duration on our clock.
pub fn decide(spec: Option<&LeaseSpec>, identity: &str, expired: bool) -> Decision {
    let holder = spec
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or("");
    if holder == identity {
        Decision::Renew
    } else if holder.is_empty() || expired {
        Decision::Acquire
    } else {
        Decision::Follow
    }
}

/// The part of a Lease record whose change proves its holder alive.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    holder: Option<String>,
    renew_time: Option<String>,
    duration_seconds: Option<i32>,
}

impl Record {
    fn of(spec: Option<&LeaseSpec>) -> Record {
        Record {
            holder: spec.and_then(|s| s.holder_identity.clone()),
            renew_time: spec
                .and_then(|s| s.renew_time.as_ref())
                .map(|t| t.0.to_string()),
            duration_seconds: spec.and_then(|s| s.lease_duration_seconds),
        }
    }
}

/// Runs election attempts against one Lease.
pub struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    /// The record last seen and when (our monotonic clock) it was first seen.
    observed: Option<(Record, Instant)>,
}

impl Elector {
    /// An elector for the Lease in `config`, through `client`.
    pub fn new(client: Client, config: LeaseConfig) -> Elector {
        Elector {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    fn error(&self, action: &'static str) -> impl FnOnce(kube::Error) -> LeaderError + '_ {
        move |source| LeaderError {
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            action,
            source,
        }
    }

    /// When a candidate should try again: after the retry period, or sooner when the observed
    /// record expires sooner (so a takeover does not wait for an extra period).
    pub fn next_attempt_in(&self) -> Duration {
        let retry = self.config.retry_period();
        match &self.observed {
            Some((record, seen)) if record.holder.as_deref().is_some_and(|h| !h.is_empty()) => {
                let lasts = record_duration(record, self.config.duration);
                let left = lasts.saturating_sub(seen.elapsed());
                // A little past the expiry, so the next attempt finds it expired.
                retry.min(left + Duration::from_millis(50))
            }
            _ => retry,
        }
    }

    /// Reads the Lease and acquires, renews or follows it.
    pub async fn try_acquire_or_renew(&mut self) -> Result<Attempt, LeaderError> {
        let current = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(self.error("read"))?;
        let Some(lease) = current else {
            return self.create().await;
        };
        let record = Record::of(lease.spec.as_ref());
        let now = Instant::now();
        let seen = match &self.observed {
            Some((old, seen)) if *old == record => *seen,
            _ => now,
        };
        self.observed = Some((record.clone(), seen));
        let expired = now.duration_since(seen) >= record_duration(&record, self.config.duration);
        match decide(lease.spec.as_ref(), &self.config.identity, expired) {
            Decision::Follow => Ok(Attempt::Following {
                holder: record.holder,
            }),
            decision => self.write(lease, decision == Decision::Acquire).await,
        }
    }

    async fn create(&mut self) -> Result<Attempt, LeaderError> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.config.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                annotations: Some(std::collections::BTreeMap::from([(
                    AGENT_VERSION_ANNOTATION.to_string(),
                    env!("CARGO_PKG_VERSION").to_string(),
                )])),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.config.identity.clone()),
                lease_duration_seconds: Some(self.duration_seconds()),
                acquire_time: Some(now()),
                renew_time: Some(now()),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(Attempt::Leading),
            // Another candidate created it first.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                Ok(Attempt::Following { holder: None })
            }
            Err(e) => Err(self.error("create")(e)),
        }
    }

    /// Renews (`acquire == false`) or takes over the Lease as read, conditional on its
    /// resourceVersion.
    async fn write(&mut self, mut lease: Lease, acquire: bool) -> Result<Attempt, LeaderError> {
        let mut spec = lease.spec.take().unwrap_or_default();
        if acquire {
            spec.acquire_time = Some(now());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.holder_identity = Some(self.config.identity.clone());
        spec.lease_duration_seconds = Some(self.duration_seconds());
        spec.renew_time = Some(now());
        lease.spec = Some(spec);
        lease.metadata.annotations.get_or_insert_default().insert(
            AGENT_VERSION_ANNOTATION.to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        );
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(Attempt::Leading),
            // Someone wrote it since we read it: they won (or renewed); look again next time.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                Ok(Attempt::Following { holder: None })
            }
            Err(e) => Err(self.error(if acquire { "acquire" } else { "renew" })(e)),
        }
    }

    /// Gives the Lease up if this process holds it: clears the holder so that a candidate takes
    /// it at its next attempt instead of waiting for it to expire.
    pub async fn release(&mut self) -> Result<(), LeaderError> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(self.error("read"))?
        else {
            return Ok(());
        };
        let mut spec = lease.spec.take().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = Some(now());
        lease.spec = Some(spec);
        self.api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
            .map_err(self.error("release"))?;
        Ok(())
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.config.duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }
}

/// How long `record` stays valid: its own `leaseDurationSeconds` (another replica may run with
/// another flag), else ours.
fn record_duration(record: &Record, ours: Duration) -> Duration {
    record
        .duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .filter(|&s| s > 0)
        .map(Duration::from_secs)
        .unwrap_or(ours)
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// This process's identity: `POD_NAME` when set (the Deployment sets it from the downward API),
/// else hostname and process id.
pub fn identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME") {
        if !pod.is_empty() {
            return pod;
        }
    }
    let host = hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown-host".into());
    format!("{host}-{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: Option<&str>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(String::from),
            ..Default::default()
        }
    }

    #[test]
    fn decisions() {
        assert_eq!(decide(None, "me", false), Decision::Acquire);
        assert_eq!(decide(Some(&spec(None)), "me", false), Decision::Acquire);
        assert_eq!(
            decide(Some(&spec(Some(""))), "me", false),
            Decision::Acquire
        );
        assert_eq!(
            decide(Some(&spec(Some("me"))), "me", false),
            Decision::Renew
        );
        assert_eq!(decide(Some(&spec(Some("me"))), "me", true), Decision::Renew);
        assert_eq!(
            decide(Some(&spec(Some("other"))), "me", false),
            Decision::Follow
        );
        assert_eq!(
            decide(Some(&spec(Some("other"))), "me", true),
            Decision::Acquire
        );
    }

    #[test]
    fn periods_and_durations() {
        let config = LeaseConfig {
            name: "l".into(),
            namespace: "n".into(),
            identity: "me".into(),
            duration: Duration::from_secs(15),
        };
        assert_eq!(config.retry_period(), Duration::from_secs(5));
        assert_eq!(config.renew_deadline(), Duration::from_secs(10));
        let record = Record {
            holder: Some("x".into()),
            renew_time: None,
            duration_seconds: Some(7),
        };
        assert_eq!(
            record_duration(&record, Duration::from_secs(15)),
            Duration::from_secs(7)
        );
        let none = Record {
            duration_seconds: None,
            ..record
        };
        assert_eq!(
            record_duration(&none, Duration::from_secs(15)),
            Duration::from_secs(15)
        );
    }
}
