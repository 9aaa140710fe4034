//! The controller loop: watches BundleDeployments and runs the reconciler on each, with a
//! finalizer for cleanup, per-object backoff on errors, and graceful shutdown on a signal.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::api::DynamicObject;
use kube::discovery::ApiResource;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::finalizer::{finalizer, Error as FinalizerError, Event as FinalizerEvent};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use kube::ResourceExt;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::watches::WatchBackoff;
use super::{cleanup, reconcile_apply, Context, Next, ReconcileError, FINALIZER};
use crate::api::BundleDeployment;
use crate::metrics::METRICS;

/// Errors surfaced to the controller runtime.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ControllerError(#[from] Box<kube::runtime::finalizer::Error<ReconcileError>>);

/// How long after a pass that panicked its BundleDeployment is tried again.
const AFTER_PANIC: Duration = Duration::from_secs(30);

/// One pass over `bd`, never ending the agent: kube-runtime runs each pass as a task and unwraps
/// its result, so a panic in one pass (a bug, or a write to a full disk's log) would end the
/// whole process and every other BundleDeployment's reconciles with it. A panicking pass is
/// logged and tried again later; the objects it was writing keep their last applied state.
async fn reconcile(
    bd: Arc<BundleDeployment>,
    ctx: Arc<Context>,
    cache: reflector::Store<BundleDeployment>,
) -> Result<Action, ControllerError> {
    use futures::FutureExt;
    let name = bd.name_any();
    match std::panic::AssertUnwindSafe(reconcile_pass(bd, ctx, cache))
        .catch_unwind()
        .await
    {
        Ok(result) => result,
        Err(panic) => {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_string());
            METRICS.reconciled(false, Duration::ZERO);
            tracing::error!(bundle_deployment = %name, retry_in = ?AFTER_PANIC, "reconcile pass panicked: {why}");
            Ok(Action::requeue(AFTER_PANIC))
        }
    }
}

async fn reconcile_pass(
    bd: Arc<BundleDeployment>,
    ctx: Arc<Context>,
    cache: reflector::Store<BundleDeployment>,
) -> Result<Action, ControllerError> {
    // Held for the whole pass: how many run at once adapts to the API server (see `workers`).
    let _worker = ctx.memory.workers.acquire().await;
    let _in_flight = METRICS.reconcile_started();
    let started = std::time::Instant::now();
    let api: Api<BundleDeployment> = Api::all(ctx.cluster.client.clone());
    let bd = latest(&api, bd, &ctx).await;
    let name = bd.name_any();
    let uid = bd.metadata.uid.clone().unwrap_or_default();
    // Read again just now and relabelled into another shard: not ours to touch any more.
    if !ctx.in_scope(&bd) {
        tracing::info!(bundle_deployment = %name, "{}; not reconciling it", super::scope::out_of_scope_message(&ctx, &bd));
        ctx.release(&name, &uid);
        return Ok(Action::await_change());
    }
    ctx.memory.unwritten_intents.looked(&bd);
    let span = tracing::info_span!("reconcile", bundle_deployment = %name);
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
    if let Err(FinalizerError::ApplyFailed(ReconcileError::OutOfScope(why))) = &result {
        // Relabelled during the pass; its status write was refused. No retry: another agent
        // holds it, and its watch event removes it from this agent's cache.
        tracing::info!(bundle_deployment = %name, "{why}; stopped without writing");
        ctx.release(&name, &uid);
        return Ok(Action::await_change());
    }
    if cache.get(&ObjectRef::new(&name)).is_none() {
        // It left the watch while this pass ran, which may have started probes or watches for
        // it after the watch event dropped them: drop them again.
        ctx.release(&name, &uid);
    }
    let waiting = matches!(
        &result,
        Err(FinalizerError::CleanupFailed(
            ReconcileError::DeleteHookRunning { .. }
        ))
    );
    METRICS.reconciled(result.is_ok() || waiting, started.elapsed());
    let throttled = matches!(&result, Err(FinalizerError::ApplyFailed(e) | FinalizerError::CleanupFailed(e)) if e.throttled());
    ctx.memory.workers.finished(throttled);
    result.map_err(|e| ControllerError(Box::new(e)))
}

/// The object to reconcile: the cached one, unless this agent wrote its status since and the
/// watch has not delivered that write yet (its event may still be on its way when the next pass
/// starts). A pass must not decide from an older status: it would start a revision twice, or run
/// a helm hook again. Then it is the object the write was answered with: no read needed.
async fn latest(
    api: &Api<BundleDeployment>,
    cached: Arc<BundleDeployment>,
    ctx: &Context,
) -> Arc<BundleDeployment> {
    let name = cached.name_any();
    let known = ctx
        .memory
        .last_written
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&name)
        .map_or_else(|| Some(cached.clone()), |written| written.newest(&cached));
    if let Some(object) = known {
        return object;
    }
    match api.get_opt(&name).await {
        Ok(Some(mut fresh)) => {
            fresh.metadata.managed_fields = None; // as in the cache (see `decode`)
            let fresh = Arc::new(fresh);
            // What was read is now the newest this agent knows of.
            if let Some(version) = fresh.metadata.resource_version.clone() {
                ctx.memory
                    .last_written
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(
                        name,
                        super::context::Written {
                            write: Some((version, fresh.metadata.generation)),
                            answer: Some(fresh.clone()),
                            ..Default::default()
                        },
                    );
            }
            fresh
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
    if let F::CleanupFailed(ReconcileError::DeleteHookRunning { after, .. }) = &*error.0 {
        // Not a failure: the deletion waits for a helm delete hook to finish.
        return Action::requeue(*after);
    }
    if permanent {
        // A bad spec or bad content: nothing changes until the user changes something, which the
        // watch delivers; the long requeue only re-checks floating sources.
        return Action::requeue(ctx.settings.requeue_interval);
    }
    let unreachable = match &*error.0 {
        F::ApplyFailed(e) | F::CleanupFailed(e) => e.api_unreachable(),
        F::AddFinalizer(e) | F::RemoveFinalizer(e) => super::api_unreachable(e),
        _ => false,
    };
    let after = ctx.memory.retry_after(&name, unreachable);
    // Said at warn: during an outage this is what the agent is doing.
    tracing::warn!(bundle_deployment = %name, retry_in = ?after, api_unreachable = unreachable, error = %error, "reconcile failed; retrying");
    Action::requeue(after)
}

/// Runs the controller until a termination signal arrives.
/// Only BundleDeployments of the context's scope (`--selector`, `--shard`) are watched.
/// `owned_events` carries reconcile requests from the watches on applied objects (see
/// [`super::owned`]), valuesFrom objects, probes and finished fetches.
pub async fn run(
    ctx: Arc<Context>,
    owned_events: mpsc::UnboundedReceiver<ObjectRef<BundleDeployment>>,
) {
    // The controller may run as many passes as there can ever be workers; the workers' permits
    // decide how many actually run.
    let concurrency = u16::try_from(ctx.memory.workers.max()).unwrap_or(u16::MAX);
    let config = ControllerConfig::default().concurrency(concurrency);
    let mut watch = watcher::Config::default();
    if let Some(selector) = ctx.cluster.scope.watch_selector() {
        watch = watch.labels(&selector);
    }
    let (reader, writer) = reflector::store();
    // Requests for objects outside the watch (another shard's, whose owned objects the
    // metadata watches also see) are dropped here: they never reach a worker.
    let in_store = reader.clone();
    let owned_events = futures::stream::unfold(owned_events, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    })
    .filter(move |request| {
        let ours = in_store.get(request).is_some();
        if !ours {
            tracing::trace!(bundle_deployment = %request.name, "reconcile request for an object outside this agent's scope; dropped");
        }
        std::future::ready(ours)
    });
    // Watch raw objects and decode each one here, so that one object the agent cannot read
    // (say, written against a newer CRD) is skipped and logged instead of failing the whole
    // list and stalling every other BundleDeployment.
    let raw: Api<DynamicObject> = Api::all_with(
        ctx.cluster.client.clone(),
        &ApiResource::erase::<BundleDeployment>(&()),
    );
    let mut known = Known::default();
    let leaving = ctx.clone();
    let listed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let first_list = listed.clone();
    let bundle_deployments = watcher(raw, watch)
        .backoff(WatchBackoff::default())
        .filter_map(|event| std::future::ready(event.map(decode_event).transpose()))
        .inspect(move |event| {
            // The first complete list: /readyz may report ready (see `metrics`).
            if matches!(event, Ok(watcher::Event::InitDone)) {
                METRICS.set_synced();
                first_list.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        })
        .reflect(writer)
        // After the cache: a pass ending from now on finds the object gone (see `reconcile`).
        .inspect(move |event| {
            // Gone from the watch (deleted, or relabelled out of the scope): drop what was
            // kept for it, so its probes and valuesFrom watches stop.
            if let Ok(event) = event {
                if let watcher::Event::Apply(bd) | watcher::Event::InitApply(bd) = event {
                    leaving.delivered(bd);
                }
                for (name, uid) in known.observe(event) {
                    tracing::debug!(bundle_deployment = %name, "left this agent's watch");
                    leaving.release(&name, &uid);
                }
            }
        })
        // Only what asks for a pass: not the echo of a status write (see `Asked`).
        .filter({
            let mut asked = Asked::default();
            move |event| std::future::ready(asked.admit(event))
        })
        .applied_objects();
    let cache = reader.clone();
    let signal = futures::FutureExt::shared(Box::pin(termination_signal()));
    let controller = Controller::for_stream(bundle_deployments, reader)
        .with_config(config)
        .reconcile_on(owned_events)
        .graceful_shutdown_on(signal.clone())
        .run(
            move |bd, ctx| reconcile(bd, ctx, cache.clone()),
            error_policy,
            ctx,
        )
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(bundle_deployment = %object.name, "reconciled"),
                // A pass scheduled before the object left the watch (relabelled into another
                // shard, deleted): nothing runs; not worth a line at debug.
                Err(kube::runtime::controller::Error::ObjectNotFound(object)) => {
                    tracing::trace!(bundle_deployment = %object.name, "scheduled pass for an object no longer watched; skipped")
                }
                Err(error) => tracing::debug!(%error, "reconcile error"),
            }
        });
    // The controller drains its running passes after the signal. Before the first list of
    // BundleDeployments has completed none has started, and the controller would wait for a
    // list that its own shutdown has stopped: then there is nothing to wait for. A second
    // signal stops waiting for passes still running.
    let early_or_forced = async {
        signal.clone().await;
        tracing::info!(
            "termination requested: finishing the passes in flight (a second signal stops at once)"
        );
        if !listed.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        termination_signal().await;
        tracing::warn!("second termination signal: not waiting for the passes in flight");
    };
    tokio::select! {
        _ = controller => {}
        _ = early_or_forced => {}
    }
}

/// Resolves at SIGTERM or SIGINT.
async fn termination_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).ok();
    let terminated = async {
        match term.as_mut() {
            Some(term) => {
                term.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminated => {}
    }
}

/// What a BundleDeployment asks for, hashed: a change to it is worth a pass. Status is left out:
/// the agent writes it itself, and every write's watch event would otherwise start a pass that
/// has nothing to do (about a third of all passes in a 1,000-bundle install).
fn what_is_asked(bd: &BundleDeployment) -> u64 {
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
    hasher.finish()
}

/// Which watch events of BundleDeployments are worth a pass: those that change what it asks
/// for ([`what_is_asked`]), or bring an object new to the watch (created, relabelled into this
/// agent's scope, listed again). Pure.
#[derive(Debug, Default)]
struct Asked {
    last: HashMap<String, u64>,
}

impl Asked {
    fn admit(&mut self, event: &Result<watcher::Event<BundleDeployment>, watcher::Error>) -> bool {
        use watcher::Event;
        let uid = |bd: &BundleDeployment| bd.metadata.uid.clone().unwrap_or_default();
        match event {
            Ok(Event::Apply(bd)) => {
                let asked = what_is_asked(bd);
                self.last.insert(uid(bd), asked) != Some(asked)
            }
            Ok(Event::InitApply(bd)) => {
                self.last.insert(uid(bd), what_is_asked(bd));
                true
            }
            Ok(Event::Delete(bd)) => {
                // Left the watch: when it comes back (relabelled back), it is news again.
                self.last.remove(&uid(bd));
                true
            }
            _ => true,
        }
    }
}

/// The BundleDeployments in the watch (name and uid), to tell which ones left it: by a delete
/// event (deleted, or relabelled out of the selector: the API server sends a delete then), or
/// by missing from a re-list (a watch restarted after an error sends no delete for what left
/// while it was down). Pure.
#[derive(Debug, Default)]
struct Known {
    current: HashMap<String, String>,
    relisting: Option<HashMap<String, String>>,
}

impl Known {
    /// Takes in one watch event; returns the (name, uid) of each object that left the watch.
    fn observe(&mut self, event: &watcher::Event<BundleDeployment>) -> Vec<(String, String)> {
        use watcher::Event;
        let id =
            |bd: &BundleDeployment| (bd.name_any(), bd.metadata.uid.clone().unwrap_or_default());
        match event {
            Event::Apply(bd) => {
                let (name, uid) = id(bd);
                let replaced = self.current.insert(name.clone(), uid.clone());
                // Deleted and created again between two events: the old one left.
                replaced
                    .filter(|old| *old != uid)
                    .map(|old| vec![(name, old)])
                    .unwrap_or_default()
            }
            Event::Delete(bd) => {
                let (name, uid) = id(bd);
                self.current.remove(&name);
                vec![(name, uid)]
            }
            Event::Init => {
                self.relisting = Some(HashMap::new());
                Vec::new()
            }
            Event::InitApply(bd) => {
                let (name, uid) = id(bd);
                self.relisting
                    .get_or_insert_with(HashMap::new)
                    .insert(name, uid);
                Vec::new()
            }
            Event::InitDone => {
                let listed = self.relisting.take().unwrap_or_default();
                let left = self
                    .current
                    .drain()
                    .filter(|(name, uid)| listed.get(name) != Some(uid))
                    .collect();
                self.current = listed;
                left
            }
        }
    }
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

fn decode(mut object: DynamicObject) -> Option<BundleDeployment> {
    let name = object.name_any();
    // Not kept: nothing reads them, and the status manager's entry lists every status field
    // (each inventory entry, revision and condition), often the larger part of the object.
    object.metadata.managed_fields = None;
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

    fn bd(name: &str, uid: &str) -> BundleDeployment {
        let mut bd: BundleDeployment = serde_json::from_value(json!({
            "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
            "metadata": {"name": name, "uid": uid},
            "spec": {"format": "plain", "sources": [{"kind": "http", "http": {"url": "http://h/x.yaml"}}]},
        }))
        .unwrap();
        bd.metadata.uid = Some(uid.into());
        bd
    }

    #[test]
    fn objects_leaving_the_watch_are_told_by_deletes_and_relists() {
        use watcher::Event;
        let mut known = Known::default();
        let none: Vec<(String, String)> = Vec::new();
        assert_eq!(known.observe(&Event::Init), none);
        assert_eq!(known.observe(&Event::InitApply(bd("a", "1"))), none);
        assert_eq!(known.observe(&Event::InitApply(bd("b", "2"))), none);
        assert_eq!(known.observe(&Event::InitDone), none);
        assert_eq!(known.observe(&Event::Apply(bd("c", "3"))), none);
        // Relabelled into another shard: the API server sends a delete.
        assert_eq!(
            known.observe(&Event::Delete(bd("a", "1"))),
            vec![("a".to_string(), "1".to_string())]
        );
        // A re-list after a watch error: c left meanwhile, b was deleted and created again.
        known.observe(&Event::Init);
        known.observe(&Event::InitApply(bd("b", "4")));
        let mut left = known.observe(&Event::InitDone);
        left.sort();
        assert_eq!(
            left,
            vec![
                ("b".to_string(), "2".to_string()),
                ("c".to_string(), "3".to_string())
            ]
        );
        assert_eq!(
            known.observe(&Event::Apply(bd("b", "5"))),
            vec![("b".to_string(), "4".to_string())]
        );
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
    fn status_echoes_are_dropped_and_an_object_back_in_the_watch_is_news() {
        use watcher::Event;
        let mut asked = Asked::default();
        let mut one = bd("a", "1");
        assert!(asked.admit(&Ok(Event::InitApply(one.clone()))));
        one.status = Some(Default::default());
        assert!(!asked.admit(&Ok(Event::Apply(one.clone()))), "status only");
        one.metadata.generation = Some(2);
        assert!(asked.admit(&Ok(Event::Apply(one.clone()))), "spec");
        // Relabelled into another shard (a delete for this watch), then back, unchanged.
        assert!(asked.admit(&Ok(Event::Delete(one.clone()))));
        assert!(asked.admit(&Ok(Event::Apply(one))), "back in the watch");
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
