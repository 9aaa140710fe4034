//! Notifications (`spec.notifications`): transitions are recorded in `status.notifications` by
//! the very status write that records them, then delivered off the reconcile path.
//!
//! ```text
//! reconciler's status write ──(same patch)──> status.notifications[] Pending
//!          └─> bounded queue ──> delivery task: one worker per (BundleDeployment, target),
//!              entries in order, retries with backoff until a deadline, each result patched
//!              into status.notifications only
//! ```
//!
//! Both writers of `status.notifications` go through one ledger per BundleDeployment: the list as
//! this process last wrote it, behind an async lock held across each patch. The reconciler's
//! write takes the list from the ledger (never from the object it started from, which may be
//! older than a delivery result), so neither writer can put back an older result; and since each
//! patch is sent and answered under the lock, the API server sees them in the order they were
//! made. The lock is never held during a delivery: a slow receiver delays nothing but itself.
//!
//! After a restart, the first status write of each BundleDeployment seeds its ledger from the
//! status and queues what is still Pending or Retrying: a transition recorded in status is
//! delivered even when the agent died before sending it (at least once: a crash between sending
//! and recording the result sends again, with the same id).

pub mod message;
pub mod transitions;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference as CoreReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::{mpsc, OwnedMutexGuard, Semaphore};

use crate::api::{
    BundleDeployment, BundleDeploymentSpec, BundleDeploymentStatus, DeliveryResult,
    NotificationStatus, NotificationTarget, ResolvedSource,
};
use crate::fault::{self, Point};
use crate::metrics::METRICS;
use crate::reconcile::fetch::SecretPolicy;
use message::{SecretValues, Subject};

/// How deliveries are made (agent flags `--notification-*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Requests in flight at once, over all targets.
    pub concurrency: usize,
    /// Time limit of one request (connect, send, answer).
    pub timeout: Duration,
    /// A notification not delivered this long after its transition is given up (Failed).
    pub deadline: Duration,
    /// Wait after the first failed attempt; doubled after each further one.
    pub retry_initial: Duration,
    /// The longest wait between attempts.
    pub retry_max: Duration,
    /// (BundleDeployment, target) pairs waiting for a worker; when full, the notification
    /// stays Pending in status and is queued again at the BundleDeployment's next reconcile.
    pub queue: usize,
    /// Which addresses targets may be at.
    pub egress: crate::egress::EgressPolicy,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            concurrency: 4,
            timeout: Duration::from_secs(10),
            deadline: Duration::from_secs(600),
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(60),
            queue: 1024,
            egress: crate::egress::EgressPolicy::default(),
        }
    }
}

/// The wait after `attempts` failed attempts: `retry_initial` doubling up to `retry_max`.
pub fn backoff(settings: &Settings, attempts: i32) -> Duration {
    let doublings = attempts.saturating_sub(1).clamp(0, 20) as u32;
    settings
        .retry_initial
        .saturating_mul(1u32 << doublings)
        .min(settings.retry_max)
}

/// What one attempt came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// 2xx.
    Delivered(String),
    /// Worth another try: no answer, a timeout, 408, 429, 5xx, a Secret not readable yet.
    Retry(String),
    /// Refused for good (another 4xx), or it cannot be sent at all.
    Refused(String),
}

/// How an HTTP status is taken.
pub fn classify(status: u16) -> Attempt {
    let text = format!("HTTP {status}");
    match status {
        200..=299 => Attempt::Delivered(text),
        408 | 429 | 500..=599 => Attempt::Retry(text),
        _ => Attempt::Refused(text),
    }
}

/// Notifications of one BundleDeployment as this process knows them.
#[derive(Default)]
struct Ledger {
    uid: String,
    /// The status as last written by this process (or read); None until the first write.
    status: Option<BundleDeploymentStatus>,
    spec: Option<BundleDeploymentSpec>,
    reference: CoreReference,
    /// Targets with a worker queued or running.
    queued: HashSet<String>,
}

type LedgerHandle = Arc<tokio::sync::Mutex<Ledger>>;

struct Job {
    bundle_deployment: String,
    target: String,
}

struct Inner {
    client: Client,
    policy: SecretPolicy,
    settings: Settings,
    recorder: Recorder,
    ledgers: Mutex<HashMap<String, LedgerHandle>>,
    queue: OnceLock<mpsc::Sender<Job>>,
    slots: Arc<Semaphore>,
}

/// Records transitions with status writes and delivers them (see the module doc).
#[derive(Clone)]
pub struct Notifier {
    inner: Arc<Inner>,
}

/// A status write in preparation: holds the BundleDeployment's ledger until the write is done.
pub struct NotificationWrite {
    held: Option<(OwnedMutexGuard<Ledger>, Notifier, String)>,
    targets: Vec<String>,
}

impl Notifier {
    /// A notifier reading Secrets under `policy`, publishing Events with `recorder`.
    pub fn new(
        client: Client,
        policy: SecretPolicy,
        recorder: Recorder,
        settings: Settings,
    ) -> Self {
        Notifier {
            inner: Arc::new(Inner {
                client,
                policy,
                slots: Arc::new(Semaphore::new(settings.concurrency.max(1))),
                settings,
                recorder,
                ledgers: Mutex::new(HashMap::new()),
                queue: OnceLock::new(),
            }),
        }
    }

    /// The same notifier with other delivery settings (only before first use).
    pub fn with_settings(&self, settings: Settings) -> Self {
        let inner = &self.inner;
        Notifier::new(
            inner.client.clone(),
            inner.policy.clone(),
            inner.recorder.clone(),
            settings,
        )
    }

    fn ledger(&self, name: &str) -> LedgerHandle {
        self.inner
            .ledgers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(name.to_string())
            .or_default()
            .clone()
    }

    fn existing_ledger(&self, name: &str) -> Option<LedgerHandle> {
        self.inner
            .ledgers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// Forgets a BundleDeployment that is gone.
    pub fn forget(&self, name: &str) {
        self.inner
            .ledgers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }

    /// Before a status write of `bd` from `written` to `work`: takes the notifications list from
    /// the ledger into both (so the write never carries an older delivery result), adds the
    /// transitions this write records for the targets that want them, and queues what was
    /// already waiting. Holds the ledger until [`NotificationWrite::written`] or drop.
    pub async fn prepare(
        &self,
        bd: &BundleDeployment,
        written: &mut BundleDeploymentStatus,
        work: &mut BundleDeploymentStatus,
        now: &Time,
    ) -> NotificationWrite {
        let name = bd.name_any();
        if bd.spec.notifications.is_empty()
            && written.notifications.is_empty()
            && self.existing_ledger(&name).is_none()
        {
            work.notifications.clear();
            return NotificationWrite {
                held: None,
                targets: Vec::new(),
            };
        }
        let uid = bd.metadata.uid.clone().unwrap_or_default();
        let mut ledger = self.ledger(&name).lock_owned().await;
        if ledger.uid != uid || ledger.status.is_none() {
            ledger.uid = uid.clone();
            ledger.status = Some(written.clone());
            ledger.queued.clear();
        }
        ledger.spec = Some(bd.spec.clone());
        ledger.reference = bd.object_ref(&());
        let known = ledger
            .status
            .as_ref()
            .map(|s| s.notifications.clone())
            .unwrap_or_default();
        written.notifications = known.clone();
        let found = transitions::detect(&uid, written, work);
        work.notifications = known.clone();
        let recorded =
            transitions::record(&mut work.notifications, &bd.spec.notifications, &found, now);
        for dropped in &recorded.dropped {
            METRICS.notification(kind_of(&bd.spec.notifications, &dropped.name), "dropped");
            tracing::warn!(bundle_deployment = %name, target = %dropped.name, transition = %dropped.transition, "notification dropped undelivered: more than {} waiting for this target", transitions::MAX_OPEN_PER_TARGET);
        }
        // Waiting since before this write (a restart, a full queue): queued now.
        for target in transitions::open_targets(&known) {
            self.enqueue(&mut ledger, &name, &target);
        }
        NotificationWrite {
            held: Some((ledger, self.clone(), name)),
            targets: recorded.targets,
        }
    }

    fn sender(&self) -> &mpsc::Sender<Job> {
        self.inner.queue.get_or_init(|| {
            let (sender, receiver) = mpsc::channel(self.inner.settings.queue.max(1));
            tokio::spawn(dispatch(self.clone(), receiver));
            sender
        })
    }

    fn enqueue(&self, ledger: &mut Ledger, name: &str, target: &str) {
        if !ledger.queued.insert(target.to_string()) {
            return;
        }
        let job = Job {
            bundle_deployment: name.to_string(),
            target: target.to_string(),
        };
        if self.sender().try_send(job).is_err() {
            ledger.queued.remove(target);
            tracing::warn!(bundle_deployment = %name, %target, "notification queue full; the notification stays Pending and is queued again at the next reconcile");
        }
    }
}

impl NotificationWrite {
    /// The status write went through with `work`: the ledger takes it, and the new
    /// notifications are queued.
    pub fn written(mut self, work: &BundleDeploymentStatus) {
        let Some((mut ledger, notifier, name)) = self.held.take() else {
            return;
        };
        ledger.status = Some(work.clone());
        if self.targets.is_empty() {
            return;
        }
        // Crash tests: the transition is recorded, its delivery not started.
        fault::reached(Point::Notify);
        for target in &self.targets {
            notifier.enqueue(&mut ledger, &name, target);
        }
    }
}

fn kind_of(targets: &[NotificationTarget], name: &str) -> &'static str {
    targets
        .iter()
        .find(|t| t.name == name)
        .map_or("unknown", |t| t.kind().as_str())
}

async fn dispatch(notifier: Notifier, mut receiver: mpsc::Receiver<Job>) {
    while let Some(job) = receiver.recv().await {
        tokio::spawn(deliver_target(notifier.clone(), job));
    }
}

/// What a worker needs to send one entry.
struct Pick {
    entry: NotificationStatus,
    target: NotificationTarget,
    spec: BundleDeploymentSpec,
    uid: String,
    sources: Vec<ResolvedSource>,
}

/// Delivers the waiting entries of one target of one BundleDeployment, oldest first, until none
/// is left.
async fn deliver_target(notifier: Notifier, job: Job) {
    let name = &job.bundle_deployment;
    let settings = notifier.inner.settings.clone();
    loop {
        let Some(handle) = notifier.existing_ledger(name) else {
            return;
        };
        let pick = {
            let mut ledger = handle.lock().await;
            match pick(&ledger, &job.target) {
                Some(pick) => pick,
                None => {
                    // Under the lock: a write adding an entry now finds the target not queued.
                    ledger.queued.remove(&job.target);
                    return;
                }
            }
        };
        let now = crate::notify::now();
        let age = Duration::from_secs(
            now.0
                .as_second()
                .saturating_sub(pick.entry.occurred_at.0.as_second())
                .max(0) as u64,
        );
        if age >= settings.deadline {
            let last = pick
                .entry
                .message
                .as_deref()
                .map(|m| format!("; last: {m}"))
                .unwrap_or_default();
            let message = format!(
                "not delivered within {}s ({} attempts{last})",
                settings.deadline.as_secs(),
                pick.entry.attempts
            );
            finish(
                &notifier,
                name,
                &pick,
                DeliveryResult::Failed,
                pick.entry.attempts,
                message,
            )
            .await;
            continue;
        }
        let outcome = attempt(&notifier, name, &pick).await;
        let attempts = pick.entry.attempts.saturating_add(1);
        let (result, message) = match outcome {
            Attempt::Delivered(m) => (DeliveryResult::Delivered, m),
            Attempt::Refused(m) => (DeliveryResult::Failed, m),
            Attempt::Retry(m) => (DeliveryResult::Retrying, m),
        };
        if !finish(&notifier, name, &pick, result, attempts, message).await {
            return;
        }
        if result == DeliveryResult::Retrying {
            let remaining = settings.deadline.saturating_sub(age);
            tokio::time::sleep(backoff(&settings, attempts).min(remaining)).await;
        }
    }
}

fn pick(ledger: &Ledger, target: &str) -> Option<Pick> {
    let status = ledger.status.as_ref()?;
    let spec = ledger.spec.as_ref()?;
    let entry = transitions::next_open(&status.notifications, target)?.clone();
    let target = spec
        .notifications
        .iter()
        .find(|t| t.name == target)?
        .clone();
    let sources = entry
        .revision
        .and_then(|n| status.revisions.iter().find(|r| r.number == n))
        .map(|r| r.sources.clone())
        .unwrap_or_default();
    Some(Pick {
        entry,
        target,
        spec: spec.clone(),
        uid: ledger.uid.clone(),
        sources,
    })
}

/// One attempt: read the Secret, build the request, send it within the timeout.
async fn attempt(notifier: &Notifier, name: &str, pick: &Pick) -> Attempt {
    let inner = &notifier.inner;
    let secret = match pick.target.secret() {
        None => SecretValues::default(),
        Some(reference) => match crate::reconcile::fetch::read_secret(
            &inner.client,
            &inner.policy,
            inner.policy.requester(name, &pick.spec),
            reference,
        )
        .await
        {
            Ok((_, secret)) => {
                let mut data = crate::reconcile::fetch::secret_data(&secret);
                let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).trim().to_string();
                SecretValues {
                    token: data.remove("token").map(text),
                    hmac_key: data.remove("hmacKey"),
                    address: data.remove("address").map(text),
                }
            }
            // A Secret created later, or a permission granted later, lets it through.
            Err(error) => return Attempt::Retry(error.to_string()),
        },
    };
    let subject = Subject {
        name,
        uid: &pick.uid,
        sources: &pick.sources,
    };
    let request = match message::build(&pick.target, &subject, &pick.entry, &secret) {
        Ok(request) => request,
        Err(unsendable) => return Attempt::Refused(unsendable.0),
    };
    let secrets = message::secret_texts(&pick.target, &secret, &request);
    let Ok(_slot) = inner.slots.acquire().await else {
        return Attempt::Retry("the agent is shutting down".into());
    };
    let outcome = send(inner.settings.timeout, &inner.settings.egress, request).await;
    // What the attempt says goes to status, Events and logs: no secret value may be in it.
    match outcome {
        Attempt::Delivered(m) => Attempt::Delivered(message::redact(&m, &secrets)),
        Attempt::Retry(m) => Attempt::Retry(message::redact(&m, &secrets)),
        Attempt::Refused(m) => Attempt::Refused(message::redact(&m, &secrets)),
    }
}

/// POSTs `request`, giving up after `timeout`, unless its URL names an address `egress` refuses
/// (refused for good). What it returns never holds the URL: a Slack URL is a credential.
pub async fn send(
    timeout: Duration,
    egress: &crate::egress::EgressPolicy,
    request: message::Request,
) -> Attempt {
    crate::tls::install_crypto_provider();
    let url = match url::Url::parse(&request.url) {
        Ok(url) => url,
        Err(error) => return Attempt::Refused(format!("the target's URL is not valid: {error}")),
    };
    if let Err(refused) = egress.check_url(&url) {
        return Attempt::Refused(refused.to_string());
    }
    // No redirects: a receiver that moved says so with its status.
    let client = match egress
        .http_client(crate::egress::Redirects::None)
        .timeout(timeout)
        .connect_timeout(timeout)
        .build()
    {
        Ok(client) => client,
        Err(error) => return Attempt::Retry(format!("HTTP client: {}", error.without_url())),
    };
    let mut builder = client.post(url).body(request.body);
    for (name, value) in &request.headers {
        builder = builder.header(name, value);
    }
    match builder.send().await {
        Ok(response) => classify(response.status().as_u16()),
        Err(error) if error.is_timeout() => {
            Attempt::Retry(format!("no answer within {}s", timeout.as_secs_f64()))
        }
        Err(error) => {
            let error = error.without_url();
            match crate::egress::refusal_in(&error) {
                Some(refusal) => Attempt::Refused(refusal),
                None => Attempt::Retry(describe(&error)),
            }
        }
    }
}

/// An error with its causes (reqwest's top-level message alone says little).
fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// Records an attempt's result in the ledger and in `status.notifications` (a merge patch of that
/// list only), with its Event and metric. False when the BundleDeployment is gone.
async fn finish(
    notifier: &Notifier,
    name: &str,
    pick: &Pick,
    result: DeliveryResult,
    attempts: i32,
    message: String,
) -> bool {
    let inner = &notifier.inner;
    let Some(handle) = notifier.existing_ledger(name) else {
        return false;
    };
    let mut ledger = handle.lock().await;
    let Some(status) = ledger.status.as_mut() else {
        return false;
    };
    let Some(entry) = status
        .notifications
        .iter_mut()
        .find(|e| e.name == pick.entry.name && e.id == pick.entry.id)
    else {
        // Dropped meanwhile (its target left the spec): nothing to record.
        return true;
    };
    entry.result = result;
    entry.attempts = attempts;
    entry.time = now();
    let message = crate::api::conditions::cap_message(message);
    entry.message = Some(message.clone());
    if let Some(spec) = &ledger.spec {
        let targets = spec.notifications.clone();
        if let Some(status) = ledger.status.as_mut() {
            transitions::prune(&mut status.notifications, &targets);
        }
    }
    let list = ledger
        .status
        .as_ref()
        .map(|s| s.notifications.clone())
        .unwrap_or_default();
    let reference = ledger.reference.clone();
    let kind = pick.target.kind().as_str();
    METRICS.notification(
        kind,
        match result {
            DeliveryResult::Delivered => "delivered",
            DeliveryResult::Failed => "failed",
            _ => "retrying",
        },
    );
    let target = &pick.entry.name;
    let transition = &pick.entry.transition;
    let event = match result {
        DeliveryResult::Delivered => {
            tracing::info!(bundle_deployment = %name, %target, %transition, attempts, "notification delivered ({message})");
            Some((false, "NotificationSent", format!("{target} ({kind}): {transition} delivered after {attempts} attempts ({message})")))
        }
        DeliveryResult::Failed => {
            tracing::warn!(bundle_deployment = %name, %target, %transition, attempts, "notification failed: {message}");
            Some((
                true,
                "NotificationFailed",
                format!("{target} ({kind}): {transition} not delivered: {message}"),
            ))
        }
        _ => {
            tracing::info!(bundle_deployment = %name, %target, %transition, attempts, "notification attempt failed, retrying: {message}");
            // Said once, at the first failure; the status shows the attempts that follow.
            (attempts == 1).then(|| {
                (
                    true,
                    "NotificationFailed",
                    format!(
                        "{target} ({kind}): {transition} not delivered yet ({message}); retrying"
                    ),
                )
            })
        }
    };
    // The patch is made under the ledger's lock: see the module doc.
    let api: Api<BundleDeployment> = Api::all(inner.client.clone());
    let patch = json!({"status": {"notifications": list}});
    let gone = match api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => false,
        Err(kube::Error::Api(status)) if status.code == 404 => true,
        Err(error) => {
            // Kept in the ledger: the next status write (this task's or the reconciler's)
            // carries it to the API server.
            tracing::warn!(bundle_deployment = %name, %target, %error, "could not record the notification result");
            false
        }
    };
    drop(ledger);
    if gone {
        notifier.forget(name);
        return false;
    }
    if let Some((warning, reason, note)) = event {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note),
            action: "Notify".into(),
            secondary: None,
        };
        if let Err(error) = inner.recorder.publish(&event, &reference).await {
            tracing::warn!(bundle_deployment = %name, %error, "could not publish an Event");
        }
    }
    true
}

/// The time now, as status timestamps are written.
pub fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let settings = Settings {
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(10),
            ..Default::default()
        };
        let waits: Vec<u64> = (1..=6).map(|n| backoff(&settings, n).as_secs()).collect();
        assert_eq!(waits, vec![1, 2, 4, 8, 10, 10]);
        assert_eq!(backoff(&settings, 1000).as_secs(), 10);
    }

    #[test]
    fn statuses_are_classified() {
        assert!(matches!(classify(204), Attempt::Delivered(_)));
        assert!(matches!(classify(500), Attempt::Retry(_)));
        assert!(matches!(classify(429), Attempt::Retry(_)));
        assert!(matches!(classify(404), Attempt::Refused(_)));
        assert_eq!(classify(503), Attempt::Retry("HTTP 503".into()));
    }

    fn bd_with_target() -> BundleDeployment {
        serde_json::from_value(json!({
            "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
            "metadata": {"name": "app", "uid": "uid-1"},
            "spec": {
                "format": "plain",
                "sources": [{"kind": "http", "http": {"url": "http://127.0.0.1:1/x.yaml"}}],
                "notifications": [{"name": "t", "on": ["Healthy"],
                                   "webhook": {"url": "http://127.0.0.1:1/hook"}}]
            }
        }))
        .unwrap()
    }

    /// The reconciler's status write starts from the object it read, whose notifications may be
    /// older than a result the delivery task recorded since: the write must carry the newer one.
    #[tokio::test]
    async fn a_status_write_never_carries_an_older_delivery_result() {
        // Nothing listens on port 1: the delivery fails (Retrying) and its status patch fails,
        // so the result lives in the ledger only, as after a lost patch.
        let client =
            Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
        let reporter = kube::runtime::events::Reporter {
            controller: "test".into(),
            instance: None,
        };
        let notifier = Notifier::new(
            client.clone(),
            SecretPolicy {
                agent_namespace: "pallet-system".into(),
                ..Default::default()
            },
            Recorder::new(client, reporter),
            Settings {
                egress: crate::egress::EgressPolicy {
                    allow_loopback: true,
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        let bd = bd_with_target();
        let at = |s| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap());
        let revision = |phase| crate::api::RevisionStatus {
            number: 1,
            generation: 1,
            spec_digest: None,
            digest: "sha256:1".into(),
            sources: vec![],
            values_from: vec![],
            phase,
            rendered_at: None,
            applied_at: Some(at(100)),
            healthy_at: None,
            objects: 1,
            reason: None,
            message: None,
            hooks: vec![],
        };
        let applying = BundleDeploymentStatus {
            active_revision: Some(1),
            revisions: vec![revision(crate::api::RevisionPhase::Applying)],
            ..Default::default()
        };
        let mut healthy = applying.clone();
        healthy.revisions[0].phase = crate::api::RevisionPhase::Healthy;
        // Pass 1 records the transition (Pending) with its write.
        let mut written = applying.clone();
        let mut work = healthy.clone();
        let write = notifier.prepare(&bd, &mut written, &mut work, &now()).await;
        assert_eq!(work.notifications.len(), 1);
        assert_eq!(work.notifications[0].result, DeliveryResult::Pending);
        let stale = work.clone();
        write.written(&work);
        // The delivery task records its first attempt.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let ledger = notifier.existing_ledger("app").unwrap();
            let attempts = ledger.lock().await.status.as_ref().unwrap().notifications[0].attempts;
            if attempts >= 1 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "no attempt recorded");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Pass 2 starts from the object as pass 1 wrote it (Pending): it writes the newer result.
        let mut written = stale.clone();
        let mut work = stale.clone();
        let write = notifier.prepare(&bd, &mut written, &mut work, &now()).await;
        assert_eq!(work.notifications.len(), 1);
        assert_eq!(work.notifications[0].result, DeliveryResult::Retrying);
        assert!(work.notifications[0].attempts >= 1);
        // The connection failure, without the target's URL.
        let message = work.notifications[0].message.as_deref().unwrap();
        assert!(message.contains("onnect"), "{message}");
        assert!(!message.contains("/hook"), "{message}");
        // Both sides of the write's comparison have it: no patch only to put back old news.
        assert_eq!(written.notifications, work.notifications);
        drop(write);
    }
}
