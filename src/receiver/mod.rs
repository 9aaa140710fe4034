//! Receivers: an HTTP endpoint on the agent for source-change notifications (Flux's Receivers,
//! Argo CD's git webhooks). A push to git or a new image tag is acted on in seconds instead of
//! at the next `pollInterval`.
//!
//! `POST /hook/<provider>` (`github`, `gitlab`, `gitea`, `harbor`, `registry`, `generic`; see
//! [`providers`]). Each request is authenticated with the provider's token from one Secret in
//! the agent's namespace (key `<provider>`, else `token`); a provider without a token refuses
//! everything. An authenticated push expires the poll of every source it names (git repository,
//! image repository) of the BundleDeployments in this agent's scope, and asks the controller to
//! reconcile them: the next pass resolves those sources again, and renders only when what they
//! resolve to changed (the render memo keeps the rest).
//!
//! Off unless `--receiver-addr` is given. A request without its provider's credential header
//! is refused (401) before its body is read; bodies are read under [`MAX_BODY`] (413); a wrong
//! credential is refused (403). Refusals are logged with the provider, the peer and the header,
//! never a value. Only then is a request rate-limited, per sender (provider and peer address,
//! 429): a flood without a valid credential never spends the allowance of a sender that has
//! one. Every accepted notification is answered alike (202 `accepted`), whatever it matched.
//! Notifications of a revision already acted on are coalesced ([`trigger`]).

pub mod providers;
pub mod trigger;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;
use tokio::net::TcpListener;
use tokio::sync::mpsc::UnboundedSender;

use crate::api::BundleDeployment;
use crate::reconcile::Context;
use providers::{Notice, Provider};
use trigger::{Coalescer, SenderLimits, Subject};

/// The largest body read (GitHub caps its payloads at 25 MB, but a push's is a few KiB).
pub const MAX_BODY: usize = 1 << 20;
/// The longest a request's head, and then its body, may take to arrive.
const READ_DEADLINE: Duration = Duration::from_secs(10);
/// What every accepted notification is answered, whatever it matched.
const ACCEPTED: &str = "accepted";
/// How long the tokens read from the Secret are used before it is read again (a rotated token
/// is in force within this).
const TOKENS_FOR: Duration = Duration::from_secs(10);
/// Connections served at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 64;
/// The longest one connection may take (a slow client holds no task past it).
const CONNECTION_DEADLINE: Duration = Duration::from_secs(30);

/// How the receiver is configured (`pallet agent --receiver-*`).
#[derive(Clone, Debug)]
pub struct Settings {
    /// The Secret holding the tokens, in `namespace`.
    pub secret: String,
    /// The agent's namespace.
    pub namespace: String,
    /// Authenticated requests a second of each sender (provider and peer address; bursts of
    /// twice that).
    pub requests_per_second: u32,
}

/// Tokens by provider name (and `token`, the fallback), read at `Instant`.
type Tokens = (Instant, BTreeMap<String, Vec<u8>>);

/// The receiver's state, shared by its connections.
pub struct Receiver {
    ctx: Arc<Context>,
    trigger: UnboundedSender<ObjectRef<BundleDeployment>>,
    settings: Settings,
    tokens: tokio::sync::Mutex<Option<Tokens>>,
    coalescer: Mutex<Coalescer>,
    limits: Mutex<SenderLimits<(Provider, std::net::IpAddr)>>,
}

/// Errors starting the receiver.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address does not parse as ip:port.
    #[error("receiver address {addr:?} is not an IP address and port: {source}")]
    Address {
        /// As given.
        addr: String,
        /// Why.
        source: std::net::AddrParseError,
    },
    /// The listener could not bind.
    #[error("cannot listen on {addr} for notifications: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
}

impl Receiver {
    /// A receiver reconciling through `trigger` (the controller's request channel).
    pub fn new(
        ctx: Arc<Context>,
        trigger: UnboundedSender<ObjectRef<BundleDeployment>>,
        settings: Settings,
    ) -> Arc<Receiver> {
        let limits = SenderLimits::new(settings.requests_per_second);
        Arc::new(Receiver {
            ctx,
            trigger,
            settings,
            tokens: tokio::sync::Mutex::new(None),
            coalescer: Mutex::new(Coalescer::default()),
            limits: Mutex::new(limits),
        })
    }

    /// Binds `addr` and serves on a background task; returns the bound address.
    pub async fn serve(self: Arc<Self>, addr: &str) -> Result<SocketAddr, ServeError> {
        let parsed: SocketAddr = addr.parse().map_err(|source| ServeError::Address {
            addr: addr.to_string(),
            source,
        })?;
        let listener = TcpListener::bind(parsed)
            .await
            .map_err(|source| ServeError::Bind {
                addr: parsed,
                source,
            })?;
        let bound = listener.local_addr().map_err(|source| ServeError::Bind {
            addr: parsed,
            source,
        })?;
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        tokio::spawn(async move {
            loop {
                let Ok(permit) = slots.clone().acquire_owned().await else {
                    return;
                };
                let (stream, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(%error, "accepting a receiver connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let receiver = self.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let receiver = receiver.clone();
                        async move { Ok::<_, Infallible>(receiver.handle(request, peer).await) }
                    });
                    let connection = hyper::server::conn::http1::Builder::new()
                        .timer(hyper_util::rt::TokioTimer::new())
                        .header_read_timeout(READ_DEADLINE)
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                    if let Ok(Err(error)) =
                        tokio::time::timeout(CONNECTION_DEADLINE, connection).await
                    {
                        tracing::debug!(%error, %peer, "receiver connection");
                    }
                    drop(permit);
                });
            }
        });
        Ok(bound)
    }

    /// Answers one request.
    async fn handle(
        &self,
        request: Request<hyper::body::Incoming>,
        peer: SocketAddr,
    ) -> Response<Full<Bytes>> {
        let path = request.uri().path().to_string();
        let Some(provider) = path.strip_prefix("/hook/").and_then(Provider::from_name) else {
            return answer(
                StatusCode::NOT_FOUND,
                "no such receiver; POST /hook/<provider>",
            );
        };
        if request.method() != Method::POST {
            return answer(StatusCode::METHOD_NOT_ALLOWED, "only POST");
        }
        // No credential at all: refused before the body is read.
        if let Err(refusal) = providers::check_present(provider, request.headers()) {
            return refuse(provider, peer, refusal);
        }
        let (parts, body) = request.into_parts();
        let limit = crate::bounded::Reader::ReceiverRequest.limit(MAX_BODY as u64);
        let read = tokio::time::timeout(READ_DEADLINE, crate::bounded::read_request(body, limit));
        let body = match read.await {
            Ok(Ok(body)) => body,
            Ok(Err(error)) => {
                tracing::warn!(provider = provider.name(), %peer, %error, "receiver refused a request: body unreadable or too large");
                return answer(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body unreadable or too large",
                );
            }
            Err(_) => {
                tracing::warn!(provider = provider.name(), %peer, "receiver refused a request: body not received in time");
                return answer(StatusCode::REQUEST_TIMEOUT, "body not received in time");
            }
        };
        let Some(token) = self.token(provider).await else {
            tracing::warn!(provider = provider.name(), %peer, secret = %format!("{}/{}", self.settings.namespace, self.settings.secret), "receiver refused a request: no token for this provider in the receiver's Secret");
            return answer(StatusCode::FORBIDDEN, "refused");
        };
        if let Err(refusal) = providers::authenticate(provider, &parts.headers, &body, &token) {
            return refuse(provider, peer, refusal);
        }
        // Authenticated: the sender's own allowance.
        let admitted = self
            .limits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take((provider, peer.ip()), Instant::now());
        if !admitted {
            tracing::warn!(provider = provider.name(), %peer, "receiver refused a request: rate limit of this sender");
            return answer(StatusCode::TOO_MANY_REQUESTS, "too many requests");
        }
        match providers::read(provider, &parts.headers, &body) {
            Err(why) => {
                tracing::warn!(provider = provider.name(), %peer, "receiver refused a notification: {why}");
                answer(StatusCode::BAD_REQUEST, &why)
            }
            Ok(Notice::Ignored(why)) => {
                tracing::debug!(provider = provider.name(), %peer, "notification ignored: {why}");
                answer(StatusCode::OK, &format!("ignored: {why}"))
            }
            Ok(Notice::Changed(changed)) => self.changed(provider, changed).await,
        }
    }

    /// Acts on the subjects not coalesced: their sources are polled at the next pass, which is
    /// asked for now.
    async fn changed(
        &self,
        provider: Provider,
        changed: Vec<(Subject, Option<String>)>,
    ) -> Response<Full<Bytes>> {
        let now = Instant::now();
        let fresh: Vec<(Subject, Option<String>)> = {
            let mut coalescer = self.coalescer.lock().unwrap_or_else(|p| p.into_inner());
            changed
                .into_iter()
                .filter(|(subject, revision)| coalescer.admit(subject, revision.as_deref(), now))
                .collect()
        };
        if fresh.is_empty() {
            return answer(StatusCode::ACCEPTED, ACCEPTED);
        }
        let mut lp = ListParams::default();
        if let Some(selector) = self.ctx.cluster.scope.watch_selector() {
            lp = lp.labels(&selector);
        }
        let all = match Api::<BundleDeployment>::all(self.ctx.cluster.client.clone())
            .list(&lp)
            .await
        {
            Ok(list) => list.items,
            Err(error) => {
                // Not remembered: the sender's retry is acted on.
                self.forget(&fresh);
                tracing::warn!(provider = provider.name(), %error, "could not list BundleDeployments for a notification");
                return answer(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "could not list BundleDeployments",
                );
            }
        };
        let mut matched = Vec::new();
        for bd in all.iter().filter(|bd| self.ctx.in_scope(bd)) {
            let uid = bd.metadata.uid.as_deref().unwrap_or_default();
            let mut hit = false;
            for (subject, _) in &fresh {
                for index in trigger::matching_sources(&bd.spec.sources, subject) {
                    self.ctx.sources.polls.expire(uid, index, now);
                    hit = true;
                }
            }
            if hit {
                matched.push(bd.name_any());
                // Fails only when the controller stopped.
                let _ = self.trigger.send(ObjectRef::new(&bd.name_any()));
            }
        }
        let subjects: Vec<String> = fresh
            .iter()
            .map(|(subject, revision)| match revision {
                Some(revision) => format!("{}@{revision}", subject.text()),
                None => subject.text().to_string(),
            })
            .collect();
        tracing::info!(provider = provider.name(), subjects = ?subjects, bundle_deployments = ?matched, "notification accepted; polling the matching sources now");
        // Alike whatever matched: the answer says nothing of which BundleDeployments exist.
        answer(StatusCode::ACCEPTED, ACCEPTED)
    }

    fn forget(&self, subjects: &[(Subject, Option<String>)]) {
        let mut coalescer = self.coalescer.lock().unwrap_or_else(|p| p.into_inner());
        for (subject, revision) in subjects {
            coalescer.forget(subject, revision.as_deref());
        }
    }

    /// The token of `provider` (its own key, else `token`), from the Secret read at most every
    /// [`TOKENS_FOR`]. None: no such key, or the Secret is missing or unreadable.
    async fn token(&self, provider: Provider) -> Option<Vec<u8>> {
        let mut cached = self.tokens.lock().await;
        let stale = cached
            .as_ref()
            .is_none_or(|(read_at, _)| read_at.elapsed() >= TOKENS_FOR);
        if stale {
            let api: Api<Secret> =
                Api::namespaced(self.ctx.cluster.client.clone(), &self.settings.namespace);
            match api.get_opt(&self.settings.secret).await {
                Ok(found) => {
                    let data: BTreeMap<String, Vec<u8>> = found
                        .and_then(|secret| secret.data)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(key, value)| (key, value.0))
                        .filter(|(_, value)| !value.is_empty())
                        .collect();
                    *cached = Some((Instant::now(), data));
                }
                Err(error) => {
                    // Keep what was read before: an API hiccup must not refuse every sender.
                    tracing::warn!(secret = %self.settings.secret, %error, "could not read the receiver's Secret");
                    if cached.is_none() {
                        return None;
                    }
                }
            }
        }
        let tokens = &cached.as_ref()?.1;
        tokens
            .get(provider.name())
            .or_else(|| tokens.get("token"))
            .cloned()
    }
}

/// Logs and answers a refused credential (401 without one, 403 for a wrong one).
fn refuse(
    provider: Provider,
    peer: SocketAddr,
    refusal: providers::Refusal,
) -> Response<Full<Bytes>> {
    let why = match refusal {
        providers::Refusal::Missing(_) => "no credential",
        providers::Refusal::Wrong(_) => "credential does not match",
    };
    tracing::warn!(provider = provider.name(), %peer, header = refusal.header(), status = refusal.status(), "receiver refused a request: {why}");
    let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::FORBIDDEN);
    answer(status, "refused")
}

fn answer(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(format!("{text}\n"))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
