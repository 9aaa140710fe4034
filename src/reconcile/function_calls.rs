//! Function calls run apart from the reconcile workers, as fetches do (see [`super::fetch_pool`]).
//! A render that reaches a `function` processor starts its call here (at most `slots` calls run
//! at once, over all BundleDeployments) and waits only a short grace period for it; a function
//! slow to answer then frees the worker for other BundleDeployments, the pass reports
//! `CallingFunction`, and the call's end asks the controller to reconcile that BundleDeployment
//! again: its next render reaches the same call (same processor, same request) and takes the
//! answer.
//!
//! Every call is bounded by its `timeout` (at most the operator's maximum) and by what is left
//! of its render's deadline (`--function-deadline`): the calls of one render, counted from its
//! first, end by then. A slot is never held for longer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;
use tokio::sync::{mpsc, watch, Semaphore};

use crate::api::BundleDeployment;

/// How long a pass waits for a function call before handing its worker back.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(3);
/// How long the calls of one render may take together unless the operator says otherwise.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(600);
/// Calls running at once unless the operator says otherwise.
pub const DEFAULT_SLOTS: usize = 8;

/// What became of a call.
#[derive(Debug)]
pub enum Called {
    /// The function's answer, or why there is none.
    Answered(Result<String, String>),
    /// Still running (or waiting for a slot), for this long.
    Pending(Duration),
}

type Answer = Option<Result<String, String>>;

struct Call {
    /// What the call is for (the function's spec and request): another one replaces it.
    digest: String,
    started: Instant,
    answer: watch::Receiver<Answer>,
    task: tokio::task::AbortHandle,
}

/// The function calls of every BundleDeployment.
pub struct FunctionCalls {
    slots: Arc<Semaphore>,
    grace: Duration,
    deadline: Duration,
    trigger: Option<mpsc::UnboundedSender<ObjectRef<BundleDeployment>>>,
    /// By BundleDeployment uid and processor name.
    calls: Mutex<HashMap<(String, String), Call>>,
    /// When each BundleDeployment's render (by its inputs' digest) made its first call.
    renders: Mutex<HashMap<String, (String, Instant)>>,
}

impl FunctionCalls {
    /// At most `slots` calls at once; a pass waits `grace` for one; the calls of one render
    /// take at most `deadline`; a call's end is sent to `trigger`.
    pub fn new(
        slots: usize,
        grace: Duration,
        deadline: Duration,
        trigger: Option<mpsc::UnboundedSender<ObjectRef<BundleDeployment>>>,
    ) -> Self {
        FunctionCalls {
            slots: Arc::new(Semaphore::new(slots.max(1))),
            grace,
            deadline,
            trigger,
            calls: Mutex::default(),
            renders: Mutex::default(),
        }
    }

    /// The call of `bd`'s processor `name` for `digest` (its spec and request) in the render
    /// of `render` (its inputs' digest): its answer when it has one, else started (by `work`,
    /// under `timeout`) if it was not, and waited for a grace period.
    pub async fn call<F>(
        &self,
        bd: &BundleDeployment,
        render: &str,
        name: &str,
        digest: String,
        timeout: Duration,
        work: F,
    ) -> Called
    where
        F: std::future::Future<Output = Result<String, String>> + Send + 'static,
    {
        let key = (
            bd.metadata.uid.clone().unwrap_or_default(),
            name.to_string(),
        );
        let running = {
            let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
            match calls.get(&key) {
                Some(call) if call.digest == digest => Some((call.answer.clone(), call.started)),
                _ => None,
            }
        };
        let (mut answer, started) = match running {
            Some(running) => running,
            None => match self.start(bd, &key, render, digest, timeout, work) {
                Ok(started) => started,
                Err(over) => return Called::Answered(Err(over)),
            },
        };
        let answered = tokio::time::timeout(self.grace, answer.wait_for(Option::is_some)).await;
        match answered {
            Ok(Ok(done)) => {
                let result = done.clone().unwrap_or_else(|| Err("no answer".into()));
                drop(done);
                self.calls
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&key);
                Called::Answered(result)
            }
            Ok(Err(_)) => Called::Answered(Err("the function call was stopped".into())),
            Err(_) => Called::Pending(started.elapsed()),
        }
    }

    /// Starts a call (replacing one for another request); refused when its render's deadline
    /// has passed.
    fn start<F>(
        &self,
        bd: &BundleDeployment,
        key: &(String, String),
        render: &str,
        digest: String,
        timeout: Duration,
        work: F,
    ) -> Result<(watch::Receiver<Answer>, Instant), String>
    where
        F: std::future::Future<Output = Result<String, String>> + Send + 'static,
    {
        let left = {
            let mut renders = self.renders.lock().unwrap_or_else(|p| p.into_inner());
            let entry = renders
                .entry(key.0.clone())
                .or_insert_with(|| (render.to_string(), Instant::now()));
            if entry.0 != render {
                *entry = (render.to_string(), Instant::now());
            }
            let left = self.deadline.saturating_sub(entry.1.elapsed());
            if left.is_zero() {
                // The next try (after the backoff) starts a new deadline.
                renders.remove(&key.0);
                return Err(format!(
                    "the function calls of this render took longer than {} (--function-deadline)",
                    super::functions::go_duration(self.deadline)
                ));
            }
            left
        };
        let timeout = timeout.min(left);
        let (send, answer) = watch::channel(None);
        let slots = self.slots.clone();
        let trigger = self.trigger.clone();
        let reconcile = ObjectRef::new(&bd.name_any());
        let task = tokio::spawn(async move {
            let result = match slots.acquire_owned().await {
                Ok(_slot) => match tokio::time::timeout(timeout, work).await {
                    Ok(result) => result,
                    Err(_) => Err(format!(
                        "the function did not answer within {}",
                        super::functions::go_duration(timeout)
                    )),
                },
                Err(_) => Err("the function calls are shut down".to_string()),
            };
            let _ = send.send(Some(result));
            if let Some(trigger) = trigger {
                let _ = trigger.send(reconcile);
            }
        });
        let started = Instant::now();
        let call = Call {
            digest,
            started,
            answer: answer.clone(),
            task: task.abort_handle(),
        };
        let replaced = self
            .calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), call);
        if let Some(replaced) = replaced {
            replaced.task.abort();
        }
        Ok((answer, started))
    }

    /// The call of BundleDeployment `uid`'s render of `render` (its inputs' digest) still
    /// waiting for its answer, if any: its processor's name and for how long. While there is
    /// one, rendering again would only reach the same call.
    pub fn pending(&self, uid: &str, render: &str) -> Option<(String, Duration)> {
        let same_render = self
            .renders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(uid)
            .is_some_and(|(digest, _)| digest == render);
        if !same_render {
            return None;
        }
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        calls
            .iter()
            .find(|((owner, _), call)| owner == uid && call.answer.borrow().is_none())
            .map(|((_, name), call)| (name.clone(), call.started.elapsed()))
    }

    /// The render of BundleDeployment `uid` ended (rendered or refused): its next one starts
    /// a new deadline.
    pub fn render_ended(&self, uid: &str) {
        self.renders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uid);
    }

    /// Stops and forgets every call of BundleDeployment `uid`.
    pub fn forget(&self, uid: &str) {
        self.render_ended(uid);
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(owner, _), call| {
                let keep = owner != uid;
                if !keep {
                    call.task.abort();
                }
                keep
            });
    }
}

impl Default for FunctionCalls {
    fn default() -> Self {
        FunctionCalls::new(DEFAULT_SLOTS, DEFAULT_GRACE, DEFAULT_DEADLINE, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bd(uid: &str) -> BundleDeployment {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
            "metadata": {"name": "app", "uid": uid},
            "spec": {"format": "plain", "sources": []},
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_slow_call_frees_the_pass_and_its_answer_is_taken_later() {
        let (trigger, mut triggered) = mpsc::unbounded_channel();
        let calls = FunctionCalls::new(
            1,
            Duration::from_millis(50),
            DEFAULT_DEADLINE,
            Some(trigger),
        );
        let bd = bd("u1");
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let work = async move {
            let _ = released.await;
            Ok::<_, String>("answer".to_string())
        };
        let first = calls
            .call(&bd, "r1", "fn", "d1".into(), Duration::from_secs(60), work)
            .await;
        assert!(matches!(first, Called::Pending(_)), "{first:?}");
        assert_eq!(
            calls.pending("u1", "r1").map(|(name, _)| name),
            Some("fn".into())
        );
        assert_eq!(calls.pending("u1", "r2"), None, "another render");
        release.send(()).unwrap();
        // The end asks for a pass; that pass finds the answer (its own work is not run).
        assert_eq!(triggered.recv().await.unwrap().name, "app");
        let second = calls
            .call(
                &bd,
                "r1",
                "fn",
                "d1".into(),
                Duration::from_secs(60),
                async { Err::<String, _>("not called".to_string()) },
            )
            .await;
        assert!(
            matches!(second, Called::Answered(Ok(ref a)) if a == "answer"),
            "{second:?}"
        );
    }

    #[tokio::test]
    async fn calls_end_at_their_timeout_and_at_the_render_deadline() {
        let calls = FunctionCalls::new(1, Duration::from_secs(5), Duration::from_millis(300), None);
        let bd = bd("u2");
        let hang = || std::future::pending::<Result<String, String>>();
        let answer = calls
            .call(
                &bd,
                "r1",
                "a",
                "d1".into(),
                Duration::from_millis(50),
                hang(),
            )
            .await;
        assert!(
            matches!(&answer, Called::Answered(Err(why)) if why.contains("did not answer within 50ms")),
            "{answer:?}"
        );
        // The render's deadline bounds the next call of the same render.
        let answer = calls
            .call(&bd, "r1", "b", "d2".into(), Duration::from_secs(60), hang())
            .await;
        assert!(
            matches!(&answer, Called::Answered(Err(why)) if why.contains("did not answer within")),
            "{answer:?}"
        );
        let answer = calls
            .call(&bd, "r1", "c", "d3".into(), Duration::from_secs(60), hang())
            .await;
        assert!(
            matches!(&answer, Called::Answered(Err(why)) if why.contains("--function-deadline")),
            "{answer:?}"
        );
    }
}
