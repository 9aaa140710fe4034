//! The layer every request to a remote cluster goes through: a deadline per request (watches
//! aside: they stay open by design, and their own loop reports a lost connection), the
//! cluster's health updated from each outcome, and requests refused at once while the cluster is
//! down, so that no pass waits on a dead cluster.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{Request, Response};
use kube::client::Body;
use tokio::sync::mpsc;

use super::health::{Failure, Health, Transition};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A change of a cluster's health, for the registry (see [`super::ClusterRegistry`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthEvent {
    /// The cluster, by its registry key.
    pub cluster: super::ClusterKey,
    /// What changed.
    pub transition: Transition,
}

/// One cluster's health, shared by its clients and the registry.
pub struct SharedHealth {
    cluster: super::ClusterKey,
    state: Mutex<Health>,
    events: mpsc::UnboundedSender<HealthEvent>,
}

impl SharedHealth {
    /// The health of `cluster`, telling `events` of its transitions.
    pub fn new(
        cluster: super::ClusterKey,
        events: mpsc::UnboundedSender<HealthEvent>,
    ) -> Arc<Self> {
        Arc::new(SharedHealth {
            cluster,
            state: Mutex::new(Health::Unknown),
            events,
        })
    }

    fn tell(&self, transition: Transition) {
        if transition != Transition::None {
            // Fails only when the registry is gone (shutting down).
            let _ = self.events.send(HealthEvent {
                cluster: self.cluster.clone(),
                transition,
            });
        }
    }

    /// A request was answered.
    pub fn answered(&self) {
        let transition = self.lock().answered();
        self.tell(transition);
    }

    /// A request failed as `failure`.
    pub fn failed(&self, failure: Failure, message: String) {
        let transition = self.lock().failed(Instant::now(), failure, message);
        self.tell(transition);
    }

    /// A probe failed: the next one waits longer.
    pub fn probe_failed(&self, failure: Failure, message: String) {
        self.lock().probe_failed(Instant::now(), failure, message);
    }

    /// The current state.
    pub fn get(&self) -> Health {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Health> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether a request is a watch (`watch=true` in its query).
fn is_watch<B>(request: &Request<B>) -> bool {
    request
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .any(|p| p == "watch=true" || p == "watch=1")
}

/// The layer: `deadline` per request; `refuse_while_down` false for the probe's own client.
#[derive(Clone)]
pub struct GuardLayer {
    /// The cluster's health.
    pub health: Arc<SharedHealth>,
    /// How long a request (not a watch) may take, answer included.
    pub deadline: Duration,
    /// Refuse requests at once while the cluster is down.
    pub refuse_while_down: bool,
}

impl<S> tower::Layer<S> for GuardLayer {
    type Service = Guard<S>;

    fn layer(&self, inner: S) -> Guard<S> {
        Guard {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`GuardLayer`] makes.
#[derive(Clone)]
pub struct Guard<S> {
    inner: S,
    layer: GuardLayer,
}

impl<S, B> tower::Service<Request<Body>> for Guard<S>
where
    S: tower::Service<Request<Body>, Response = Response<B>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: 'static,
{
    type Response = Response<B>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<B>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let health = self.layer.health.clone();
        if self.layer.refuse_while_down {
            if let Some(outage) = health.get().outage() {
                let message = format!(
                    "cluster is unreachable since {}s ago: {}",
                    outage.since.elapsed().as_secs(),
                    outage.message
                );
                return Box::pin(async move { Err(message.into()) });
            }
        }
        let watching = is_watch(&request);
        let deadline = self.layer.deadline;
        let answer = self.inner.call(request);
        Box::pin(async move {
            let result: Result<Response<B>, BoxError> = if watching {
                answer.await.map_err(Into::into)
            } else {
                match tokio::time::timeout(deadline, answer).await {
                    Ok(result) => result.map_err(Into::into),
                    Err(_) => Err(format!("no answer within {}s", deadline.as_secs()).into()),
                }
            };
            match &result {
                Ok(response) if response.status() == http::StatusCode::UNAUTHORIZED => health
                    .failed(
                        Failure::Unauthorized,
                        "the API server refuses the kubeconfig's credentials (401 Unauthorized)"
                            .into(),
                    ),
                Ok(_) => health.answered(),
                Err(error) => health.failed(Failure::Unreachable, describe(error.as_ref())),
            }
            result
        })
    }
}

/// An error and its causes in one line (hyper's top-level message alone says little).
pub fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_are_told_apart_by_their_query() {
        let request = |uri: &str| Request::get(uri).body(()).unwrap();
        assert!(is_watch(&request(
            "/api/v1/configmaps?watch=true&labelSelector=a"
        )));
        assert!(is_watch(&request(
            "/api/v1/configmaps?labelSelector=a&watch=1"
        )));
        assert!(!is_watch(&request(
            "/api/v1/configmaps?labelSelector=watch%3Dtrue"
        )));
        assert!(!is_watch(&request("/version")));
    }

    #[test]
    fn a_cause_chain_reads_as_one_line() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("client error (Connect)")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let error = Outer(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "Connection refused",
        ));
        assert_eq!(
            describe(&error),
            "client error (Connect): Connection refused"
        );
    }
}
