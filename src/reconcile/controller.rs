//! The controller loop: watches BundleDeployments and runs the reconciler on each, with a
//! finalizer for cleanup, per-object backoff on errors, and graceful shutdown on a signal.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::api::DynamicObject;
use kube::discovery::ApiResource;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::utils::PredicateConfig;
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use kube::ResourceExt;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::{cleanup, reconcile_apply, Context, Next, ReconcileError, FINALIZER};
use crate::api::BundleDeployment;
use crate::metrics::METRICS;

/// Errors surfaced to the controller runtime.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ControllerError(#[from] Box<kube::runtime::finalizer::Error<ReconcileError>>);

async fn reconcile(
    bd: Arc<BundleDeployment>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    // Held for the whole pass: how many run at once adapts to the API server (see `workers`).
    let _worker = ctx.workers.acquire().await;
    let _in_flight = METRICS.reconcile_started();
    let started = std::time::Instant::now();
    let api: Api<BundleDeployment> = Api::all(ctx.client.clone());
    let bd = latest(&api, bd, &ctx).await;
    let span = tracing::info_span!("reconcile", bundle_deployment = %bd.name_any());
    let result = finalizer(&api, FINALIZER, bd, |event| async {
        let next = match event {
            FinalizerEvent::Apply(bd) => reconcile_apply(&bd, &ctx).await?,
            FinalizerEvent::Cleanup(bd) => cleanup(&bd, &ctx).await?,
        };
        let Next::RequeueAfter(after) = next;
        Ok::<Action, ReconcileError>(Action::requeue(after))
    })
    .instrument(span)
    .await;
    METRICS.reconciled(result.is_ok(), started.elapsed());
    let throttled = matches!(&result, Err(kube::runtime::finalizer::Error::ApplyFailed(e) | kube::runtime::finalizer::Error::CleanupFailed(e)) if e.throttled());
    ctx.workers.finished(throttled);
    result.map_err(|e| ControllerError(Box::new(e)))
}

/// The object to reconcile: the cached one, unless this agent wrote its status since the cache
/// last saw it (the watch event of that write may still be on its way when the next pass
/// starts). A pass must not decide from an older status: it would start a revision twice, or run
/// a helm hook again. Then it is read from the API server; a failed read keeps the cached one.
async fn latest(
    api: &Api<BundleDeployment>,
    cached: Arc<BundleDeployment>,
    ctx: &Context,
) -> Arc<BundleDeployment> {
    let name = cached.name_any();
    let written = ctx
        .last_written
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&name)
        .cloned();
    if written.is_none() || written == cached.metadata.resource_version {
        return cached;
    }
    match api.get_opt(&name).await {
        Ok(Some(fresh)) => {
            // Cached objects as new as this one need no read again.
            if let Some(version) = &fresh.metadata.resource_version {
                ctx.last_written
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name, version.clone());
            }
            Arc::new(fresh)
        }
        Ok(None) => cached,
        Err(error) => {
            tracing::warn!(bundle_deployment = %name, %error, "could not re-read; using the cached object");
            cached
        }
    }
}

fn error_policy(bd: Arc<BundleDeployment>, error: &ControllerError, ctx: Arc<Context>) -> Action {
    use kube::runtime::finalizer::Error as F;
    let permanent =
        matches!(&*error.0, F::ApplyFailed(e) | F::CleanupFailed(e) if !e.is_transient());
    let name = bd.name_any();
    if permanent {
        // A bad spec or bad content: nothing changes until the user changes something, which the
        // watch delivers; the long requeue only re-checks floating sources.
        return Action::requeue(ctx.requeue_interval);
    }
    let unreachable = match &*error.0 {
        F::ApplyFailed(e) | F::CleanupFailed(e) => e.api_unreachable(),
        F::AddFinalizer(e) | F::RemoveFinalizer(e) => super::api_unreachable(e),
        _ => false,
    };
    let after = ctx.retry_after(&name, unreachable);
    // Said at warn: during an outage this is what the agent is doing.
    tracing::warn!(bundle_deployment = %name, retry_in = ?after, api_unreachable = unreachable, error = %error, "reconcile failed; retrying");
    Action::requeue(after)
}

/// The backoff of the agent's watches after an error: 250 ms doubling to [`super::API_RETRY_MAX`]
/// (kube's default grows to 30 s, which is how long recovery took after an API outage), reset
/// once events flow again.
pub struct WatchBackoff {
    next: Duration,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff {
            next: Duration::from_millis(250),
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let now = self.next;
        self.next = (self.next * 2).min(super::API_RETRY_MAX);
        Some(now)
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        *self = WatchBackoff::default();
    }
}

/// Runs the controller until a termination signal arrives.
/// With a `selector`, only BundleDeployments whose labels match it are watched. `owned_events`
/// carries reconcile requests from the watches on applied objects (see [`super::owned`]).
pub async fn run(
    ctx: Arc<Context>,
    selector: Option<&str>,
    owned_events: mpsc::UnboundedReceiver<ObjectRef<BundleDeployment>>,
) {
    // The controller may run as many passes as there can ever be workers; the workers' permits
    // decide how many actually run.
    let concurrency = u16::try_from(ctx.workers.max()).unwrap_or(u16::MAX);
    let config = ControllerConfig::default().concurrency(concurrency);
    let mut watch = watcher::Config::default();
    if let Some(selector) = selector {
        watch = watch.labels(selector);
    }
    let owned_events = futures::stream::unfold(owned_events, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    });
    // Watch raw objects and decode each one here, so that one object the agent cannot read
    // (say, written against a newer CRD) is skipped and logged instead of failing the whole
    // list and stalling every other BundleDeployment.
    let raw: Api<DynamicObject> = Api::all_with(
        ctx.client.clone(),
        &ApiResource::erase::<BundleDeployment>(&()),
    );
    let (reader, writer) = reflector::store();
    let bundle_deployments = watcher(raw, watch)
        .backoff(WatchBackoff::default())
        .filter_map(|event| std::future::ready(event.map(decode_event).transpose()))
        .inspect(|event| {
            // The first complete list: /readyz may report ready (see `metrics`).
            if matches!(event, Ok(watcher::Event::InitDone)) {
                METRICS.set_synced();
            }
        })
        .reflect(writer)
        .applied_objects()
        .predicate_filter(what_is_asked, PredicateConfig::default());
    Controller::for_stream(bundle_deployments, reader)
        .with_config(config)
        .reconcile_on(owned_events)
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(bundle_deployment = %object.name, "reconciled"),
                Err(error) => tracing::debug!(%error, "reconcile error"),
            }
        })
        .await;
}

/// What a BundleDeployment asks for, hashed: a change to it is worth a pass. Status is left out:
/// the agent writes it itself, and every write's watch event would otherwise start a pass that
/// has nothing to do (about a third of all passes in a 1,000-bundle install).
fn what_is_asked(bd: &BundleDeployment) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let meta = &bd.metadata;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    meta.labels.hash(&mut hasher);
    meta.annotations.hash(&mut hasher);
    meta.finalizers.hash(&mut hasher);
    meta.deletion_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .hash(&mut hasher);
    Some(hasher.finish())
}

/// Default interval between reconciles of an unchanged BundleDeployment.
pub const DEFAULT_REQUEUE: Duration = Duration::from_secs(300);

/// Decodes one watch event of raw objects into BundleDeployments. An object that does not decode
/// is dropped from the event and logged with its name and the reason.
pub fn decode_event(
    event: watcher::Event<DynamicObject>,
) -> Option<watcher::Event<BundleDeployment>> {
    use watcher::Event;
    match event {
        Event::Apply(object) => decode(object).map(Event::Apply),
        Event::Delete(object) => decode(object).map(Event::Delete),
        Event::InitApply(object) => decode(object).map(Event::InitApply),
        Event::Init => Some(Event::Init),
        Event::InitDone => Some(Event::InitDone),
    }
}

fn decode(object: DynamicObject) -> Option<BundleDeployment> {
    let name = object.name_any();
    match serde_json::to_value(&object).and_then(serde_json::from_value) {
        Ok(bd) => Some(bd),
        Err(error) => {
            tracing::warn!(bundle_deployment = %name, %error, "cannot read this BundleDeployment; skipping it");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn raw(spec: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
            "metadata": {"name": "x"}, "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn status_changes_ask_for_nothing_and_spec_annotation_or_deletion_changes_do() {
        let bd = |generation: i64, status: &str, annotation: Option<&str>| -> BundleDeployment {
            let mut bd: BundleDeployment = serde_json::from_value(json!({
                "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
                "metadata": {"name": "x", "generation": generation},
                "spec": {"format": "plain", "sources": []},
                "status": {"agent": status},
            }))
            .unwrap();
            if let Some(value) = annotation {
                bd.metadata.annotations =
                    Some([("pallet.dev/reconcile".to_string(), value.to_string())].into());
            }
            bd
        };
        let base = what_is_asked(&bd(1, "a", None));
        assert_eq!(base, what_is_asked(&bd(1, "b", None)), "status only");
        assert_ne!(base, what_is_asked(&bd(2, "a", None)), "spec");
        assert_ne!(base, what_is_asked(&bd(1, "a", Some("now"))), "request");
        let mut deleting = bd(1, "a", None);
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        assert_ne!(base, what_is_asked(&deleting), "deletion");
    }

    #[test]
    fn readable_objects_pass_and_malformed_ones_are_dropped() {
        let good = raw(
            json!({"format": "plain", "sources": [{"kind": "http", "http": {"url": "http://h/x.yaml"}}]}),
        );
        let bad = raw(json!({"format": "plain", "sources": "not a list"}));
        match decode_event(watcher::Event::InitApply(good)) {
            Some(watcher::Event::InitApply(bd)) => assert_eq!(bd.name_any(), "x"),
            other => panic!("expected the object through, got {other:?}"),
        }
        assert!(decode_event(watcher::Event::Apply(bad.clone())).is_none());
        assert!(decode_event(watcher::Event::InitApply(bad)).is_none());
        assert!(matches!(
            decode_event(watcher::Event::InitDone),
            Some(watcher::Event::InitDone)
        ));
    }
}
