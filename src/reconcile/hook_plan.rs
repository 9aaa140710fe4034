//! Pure decisions for helm hooks, as `helm install` and `helm upgrade` make them
//! (helm v3.19 `pkg/action/hooks.go`, `pkg/releaseutil`): which hooks a revision runs, in which
//! order, when one is done, and what its delete policy removes. No I/O; [`super::hooks`] does
//! the reads and writes.
//!
//! - A revision is an install when it is the BundleDeployment's first (number 1: numbers only
//!   grow, and a re-created BundleDeployment starts again at 1), an upgrade otherwise, as
//!   `helm upgrade --install` decides by whether the release has any history. A BundleDeployment
//!   that takes over a Helm release (`spec.takeover`) continues that release's history: its
//!   first revision is an upgrade too.
//! - Order within an event: helm sorts hooks by kind in its install order (unknown kinds last,
//!   alphabetically), then stably by weight and name; so weight, then name, then kind, then the
//!   order the chart rendered them in.
//! - A Job is done when Complete (failed when Failed), a Pod when Succeeded (failed when
//!   Failed); any other kind as soon as it exists.
//! - Delete policies: `before-hook-creation` (the default when none is given) before the hook
//!   is created; `hook-succeeded` once every hook of the event succeeded, last first;
//!   `hook-failed` for the hook that failed, and then `hook-succeeded` for the hooks of the
//!   event that ran before it. CustomResourceDefinitions are never deleted.

use pallet_formats::helm::hooks::{parse_hook, DeletePolicy, Hook, HookEvent};
use pallet_formats::Object;
use serde_json::Value;

use super::status::Transition;
use crate::api::{BundleDeploymentStatus, HookPhase, HookRun, ObjectReference};

/// A hook object of a revision and what its annotations say.
#[derive(Clone, Debug, PartialEq)]
pub struct HookObject {
    /// The object as rendered.
    pub object: Object,
    /// Its events, weight and delete policies.
    pub hook: Hook,
}

/// A revision's objects, split by what the agent does with them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Split {
    /// The release's objects, applied and pruned.
    pub release: Vec<Object>,
    /// Its install/upgrade hooks, run at their events.
    pub hooks: Vec<HookObject>,
    /// The objects of the chart's `crds/` directories, their marker taken off: applied by
    /// `config.helm.crds`, never pruned or deleted.
    pub chart_crds: Vec<Object>,
}

/// Splits a revision's objects into the release's objects, its install/upgrade hooks and its
/// chart CRDs. Only helm charts have hooks (`helm`); other formats' objects are all release
/// objects, even with a `helm.sh/hook` annotation (`helm template` output committed as plain
/// manifests). Hooks only for other events (test, delete: run on request; rollback) or for
/// events helm does not know are neither: see [`request_hooks`].
pub fn split(objects: &[Object], helm: bool) -> Split {
    if !helm {
        return Split {
            release: objects.to_vec(),
            ..Split::default()
        };
    }
    let mut split = Split::default();
    for object in objects {
        if pallet_formats::helm::is_chart_crd(object.body()) {
            let mut object = object.clone();
            pallet_formats::helm::unmark_chart_crd(object.body_mut());
            split.chart_crds.push(object);
            continue;
        }
        match parse_hook(object.body()) {
            Ok(None) => split.release.push(object.clone()),
            Ok(Some(hook)) if hook.events.iter().any(|e| e.is_install_or_upgrade()) => {
                split.hooks.push(HookObject {
                    object: object.clone(),
                    hook,
                })
            }
            Ok(Some(_)) | Err(_) => {}
        }
    }
    split
}

/// The hooks among a revision's `objects` that run on any of `events` (delete or test hooks).
pub fn request_hooks(objects: &[Object], events: &[HookEvent]) -> Vec<HookObject> {
    objects
        .iter()
        .filter(|o| !pallet_formats::helm::is_chart_crd(o.body()))
        .filter_map(|object| match parse_hook(object.body()) {
            Ok(Some(hook)) if events.iter().any(|e| hook.runs_on(*e)) => Some(HookObject {
                object: object.clone(),
                hook,
            }),
            _ => None,
        })
        .collect()
}

/// The runs of `events`' hooks, each event's in helm's order, all Pending.
pub fn plan_events(hooks: &[HookObject], events: &[HookEvent]) -> Vec<HookRun> {
    events
        .iter()
        .flat_map(|event| {
            ordered(hooks, *event).into_iter().map(move |h| HookRun {
                event: event.name().to_string(),
                object: reference(&h.object),
                phase: HookPhase::Pending,
                message: None,
                deleted: false,
            })
        })
        .collect()
}

/// Whether a revision installs the release or upgrades it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// The first revision.
    Install,
    /// Any later revision.
    Upgrade,
}

impl Operation {
    /// The operation of revision `number`.
    pub fn of(number: i64) -> Operation {
        if number <= 1 {
            Operation::Install
        } else {
            Operation::Upgrade
        }
    }

    /// The operation of revision `number` of a release that `continues_release` an existing
    /// Helm release (see [`continues_release`]).
    pub fn of_release(number: i64, continues_release: bool) -> Operation {
        if continues_release {
            Operation::Upgrade
        } else {
            Operation::of(number)
        }
    }
}

/// Whether `bd` takes over a Helm release (from Helm or a Flux HelmRelease): its chart was
/// installed already, so its install hooks ran already.
pub fn continues_release(bd: &crate::api::BundleDeployment) -> bool {
    bd.spec
        .takeover
        .as_ref()
        .is_some_and(|t| t.helm_release().is_some())
}

/// Before or after the release's objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Before the release's objects are applied.
    Pre,
    /// After the release's objects are healthy.
    Post,
}

/// The event a stage of an operation runs.
pub fn event(operation: Operation, stage: Stage) -> HookEvent {
    match (operation, stage) {
        (Operation::Install, Stage::Pre) => HookEvent::PreInstall,
        (Operation::Install, Stage::Post) => HookEvent::PostInstall,
        (Operation::Upgrade, Stage::Pre) => HookEvent::PreUpgrade,
        (Operation::Upgrade, Stage::Post) => HookEvent::PostUpgrade,
    }
}

/// helm's `releaseutil.InstallOrder` (v3.19).
const INSTALL_ORDER: &[&str] = &[
    "PriorityClass",
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
];

/// Sort key of a kind in helm's install order: known kinds by position, unknown ones after
/// them, alphabetically.
fn kind_rank(kind: &str) -> (usize, &str) {
    match INSTALL_ORDER.iter().position(|k| *k == kind) {
        Some(i) => (i, ""),
        None => (INSTALL_ORDER.len(), kind),
    }
}

/// The hooks of `event`, in the order helm runs them.
pub fn ordered(hooks: &[HookObject], event: HookEvent) -> Vec<&HookObject> {
    let mut selected: Vec<&HookObject> = hooks.iter().filter(|h| h.hook.runs_on(event)).collect();
    // One stable sort on (weight, name, kind) equals helm's stable kind sort followed by its
    // stable (weight, name) sort; equal keys keep the render order.
    selected.sort_by(|a, b| {
        (a.hook.weight, a.object.name(), kind_rank(a.object.kind())).cmp(&(
            b.hook.weight,
            b.object.name(),
            kind_rank(b.object.kind()),
        ))
    });
    selected
}

/// The hook objects themselves.
pub fn objects(hooks: &[HookObject]) -> Vec<Object> {
    hooks.iter().map(|h| h.object.clone()).collect()
}

/// A reference to a hook object, as the revision's hook list records it.
pub fn reference(object: &Object) -> ObjectReference {
    ObjectReference {
        group: object.group().to_string(),
        version: object.version().to_string(),
        kind: object.kind().to_string(),
        namespace: object.namespace().unwrap_or_default().to_string(),
        name: object.name().to_string(),
        message: None,
    }
}

/// The hook runs of a new revision: its pre event's hooks, then its post event's, each in
/// helm's order, all Pending.
pub fn plan(hooks: &[HookObject], operation: Operation) -> Vec<HookRun> {
    [Stage::Pre, Stage::Post]
        .into_iter()
        .flat_map(|stage| {
            let event = event(operation, stage);
            ordered(hooks, event).into_iter().map(move |h| HookRun {
                event: event.name().to_string(),
                object: reference(&h.object),
                phase: HookPhase::Pending,
                message: None,
                deleted: false,
            })
        })
        .collect()
}

/// A revision made active again by a rollback runs no install or upgrade hooks: what it had not
/// run yet is Skipped.
pub fn skip_pending(runs: &mut [HookRun], why: &str) {
    for run in runs
        .iter_mut()
        .filter(|r| matches!(r.phase, HookPhase::Pending | HookPhase::Running))
    {
        run.phase = HookPhase::Skipped;
        run.message = Some(why.to_string());
    }
}

/// Sets up the hook runs of revision `number` (the one applied) as it starts: a new revision plans its hooks; a
/// revision made active again by a rollback skips those it had not run. Nothing else changes
/// them here (a re-apply continues where the runs are).
pub fn prepare(
    status: &mut BundleDeploymentStatus,
    number: i64,
    hooks: &[HookObject],
    transition: &Transition,
    continues_release: bool,
) {
    let Some(revision) = status.revisions.iter_mut().find(|r| r.number == number) else {
        return;
    };
    match transition {
        Transition::NewRevision => {
            revision.hooks = plan(hooks, Operation::of_release(number, continues_release))
        }
        Transition::Rollback { .. } => skip_pending(
            &mut revision.hooks,
            "not run: the revision was made active again by a rollback",
        ),
        Transition::Reapply => {}
    }
}

/// The hook object a run refers to, among the revision's hooks.
pub fn find<'a>(hooks: &'a [HookObject], run: &HookRun) -> Option<&'a HookObject> {
    hooks.iter().find(|h| reference(&h.object) == run.object)
}

/// What to do next in one stage, from the stage's runs (indices into the revision's list).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Every hook of the stage succeeded and its deletions are done (or it has none).
    Done,
    /// Run (or keep waiting for) this hook.
    Run(usize),
    /// Every hook succeeded: delete these (hook-succeeded), in this order, then done.
    DeleteSucceeded(Vec<usize>),
    /// This hook failed: delete these first (hook-failed, then hook-succeeded of the earlier
    /// ones), then the stage fails.
    Failed {
        /// The failed hook.
        failed: usize,
        /// What its delete policies still remove.
        delete: Vec<usize>,
    },
}

/// Decides the next step of `event`'s stage. `hooks` gives each run's delete policies.
pub fn next(runs: &[HookRun], hooks: &[HookObject], event: HookEvent) -> Next {
    let stage: Vec<usize> = (0..runs.len())
        .filter(|i| runs[*i].event == event.name() && runs[*i].phase != HookPhase::Skipped)
        .collect();
    let policy = |i: usize, p: &DeletePolicy| {
        find(hooks, &runs[i]).is_some_and(|h| deletable(h) && h.hook.has_delete_policy(p))
    };
    let undeleted = |i: &usize| !runs[*i].deleted;
    if let Some(position) = stage
        .iter()
        .position(|i| runs[*i].phase == HookPhase::Failed)
    {
        let failed = stage[position];
        let mut delete: Vec<usize> = Vec::new();
        if policy(failed, &DeletePolicy::HookFailed) {
            delete.push(failed);
        }
        delete.extend(
            stage[..position]
                .iter()
                .copied()
                .filter(|i| policy(*i, &DeletePolicy::HookSucceeded)),
        );
        delete.retain(undeleted);
        return Next::Failed { failed, delete };
    }
    if let Some(i) = stage
        .iter()
        .copied()
        .find(|i| runs[*i].phase != HookPhase::Succeeded)
    {
        return Next::Run(i);
    }
    let delete: Vec<usize> = stage
        .iter()
        .rev()
        .copied()
        .filter(|i| policy(*i, &DeletePolicy::HookSucceeded))
        .filter(undeleted)
        .collect();
    if delete.is_empty() {
        Next::Done
    } else {
        Next::DeleteSucceeded(delete)
    }
}

/// CustomResourceDefinitions are never deleted by a hook policy (it would delete every object
/// of the kind), as in helm.
pub fn deletable(hook: &HookObject) -> bool {
    !(hook.object.kind() == "CustomResourceDefinition"
        && hook.object.group() == "apiextensions.k8s.io")
}

/// True when `before-hook-creation` deletes the hook's previous object before it is created.
pub fn delete_before_creation(hook: &HookObject) -> bool {
    deletable(hook)
        && hook
            .hook
            .has_delete_policy(&DeletePolicy::BeforeHookCreation)
}

/// How far a created hook object has got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// Still running; what it is doing.
    Running(String),
    /// Done.
    Succeeded,
    /// Failed; why.
    Failed(String),
}

/// The readiness of a live hook object, as helm's `WatchUntilReady` judges it.
pub fn readiness(group: &str, kind: &str, live: &Value) -> Readiness {
    match (group, kind) {
        ("batch", "Job") => job_readiness(live),
        ("", "Pod") => match live.pointer("/status/phase").and_then(Value::as_str) {
            Some("Succeeded") => Readiness::Succeeded,
            Some("Failed") => {
                let why = live
                    .pointer("/status/message")
                    .or_else(|| live.pointer("/status/reason"))
                    .and_then(Value::as_str)
                    .unwrap_or("a container exited with an error");
                Readiness::Failed(format!("Pod failed: {why}"))
            }
            phase => Readiness::Running(format!("Pod {}", phase.unwrap_or("Pending"))),
        },
        _ => Readiness::Succeeded,
    }
}

/// True for a Job the TTL controller deletes once it finished (`spec.ttlSecondsAfterFinished`
/// set; ingress-nginx's admission Jobs use 0): it may be gone before a pass sees it finish.
pub fn deleted_when_finished(object: &Object) -> bool {
    object.group() == "batch"
        && object.kind() == "Job"
        && object
            .body()
            .get("spec")
            .and_then(|s| s.get("ttlSecondsAfterFinished"))
            .is_some_and(|t| !t.is_null())
}

/// The outcome of a Job that is gone, from the Job controller's Events about it (reason, type,
/// message; oldest first): `Completed` is success, a Warning is a failure; `None` when they
/// say neither.
pub fn job_outcome_from_events(events: &[(String, String, String)]) -> Option<Readiness> {
    events.iter().rev().find_map(|(reason, type_, message)| {
        if reason == "Completed" {
            Some(Readiness::Succeeded)
        } else if type_ == "Warning" {
            Some(Readiness::Failed(format!(
                "Job failed: {reason}: {message}"
            )))
        } else {
            None
        }
    })
}

fn job_readiness(live: &Value) -> Readiness {
    let conditions = live
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let is_true = |type_: &str| {
        conditions.iter().find(|c| {
            c.get("type").and_then(Value::as_str) == Some(type_)
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
    };
    if is_true("Complete").is_some() {
        return Readiness::Succeeded;
    }
    if let Some(failed) = is_true("Failed") {
        let text = |k: &str| failed.get(k).and_then(Value::as_str).unwrap_or("");
        let why = match (text("reason"), text("message")) {
            ("", "") => "Job failed".to_string(),
            (reason, "") => format!("Job failed: {reason}"),
            ("", message) => format!("Job failed: {message}"),
            (reason, message) => format!("Job failed: {reason}: {message}"),
        };
        return Readiness::Failed(why);
    }
    let count = |k: &str| {
        live.pointer(&format!("/status/{k}"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    Readiness::Running(format!(
        "Job running: {} active, {} succeeded, {} failed",
        count("active"),
        count("succeeded"),
        count("failed")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pallet_formats::Origin;
    use serde_json::json;

    fn object(kind: &str, name: &str, annotations: Value) -> Object {
        let api_version = match kind {
            "Job" => "batch/v1",
            "Widget" | "Gadget" => "example.com/v1",
            _ => "v1",
        };
        Object::new(
            json!({"apiVersion": api_version, "kind": kind,
                   "metadata": {"name": name, "namespace": "ns", "annotations": annotations}}),
            Origin {
                file: "templates/x.yaml".into(),
                document: 0,
                line: 1,
            },
        )
        .unwrap()
    }

    fn hook(kind: &str, name: &str, events: &str, weight: &str, policy: Option<&str>) -> Object {
        let mut annotations = json!({"helm.sh/hook": events, "helm.sh/hook-weight": weight});
        if let Some(policy) = policy {
            annotations["helm.sh/hook-delete-policy"] = json!(policy);
        }
        object(kind, name, annotations)
    }

    fn names(hooks: &[&HookObject]) -> Vec<String> {
        hooks
            .iter()
            .map(|h| format!("{}/{}", h.object.kind(), h.object.name()))
            .collect()
    }

    #[test]
    fn split_keeps_release_objects_and_install_upgrade_hooks_only_for_helm() {
        let objects = vec![
            object("ConfigMap", "plain", json!({})),
            hook("Job", "migrate", "pre-upgrade,pre-install", "0", None),
            hook("Pod", "test", "test", "0", None),
            hook("Job", "cleanup", "pre-delete", "0", None),
            hook("Job", "old", "crd-install", "0", None),
        ];
        let Split { release, hooks, .. } = split(&objects, true);
        assert_eq!(release.len(), 1);
        assert_eq!(release[0].name(), "plain");
        assert_eq!(hooks.len(), 1);
        assert_eq!(hooks[0].object.name(), "migrate");
        // Test and delete hooks are run on request.
        let tests = request_hooks(&objects, &[HookEvent::Test]);
        assert_eq!(tests.len(), 1);
        assert_eq!(tests[0].object.name(), "test");
        let deletes = request_hooks(&objects, &[HookEvent::PreDelete, HookEvent::PostDelete]);
        assert_eq!(deletes.len(), 1);
        assert_eq!(
            plan_events(&deletes, &[HookEvent::PreDelete, HookEvent::PostDelete])[0].event,
            "pre-delete"
        );
        let Split { release, hooks, .. } = split(&objects, false);
        assert_eq!(release.len(), objects.len());
        assert!(hooks.is_empty());
    }

    #[test]
    fn order_is_weight_then_name_then_kind_then_render_order() {
        let objects = vec![
            hook("Job", "b", "pre-install", "0", None),
            hook("Job", "a", "pre-install", "5", None),
            hook("Job", "z", "pre-install", "-5", None),
            hook("ConfigMap", "b", "pre-install", "0", None),
            hook("Gadget", "b", "pre-install", "0", None),
            hook("Widget", "b", "pre-install", "0", None),
            hook("Secret", "b", "pre-install", "0", None),
            hook("Job", "c", "pre-install", "not-a-number", None),
            hook("Job", "up", "pre-upgrade", "-10", None),
        ];
        let hooks = split(&objects, true).hooks;
        assert_eq!(
            names(&ordered(&hooks, HookEvent::PreInstall)),
            [
                "Job/z",
                // weight 0, name b: Secret, ConfigMap, Job in install order, then the
                // unknown kinds alphabetically.
                "Secret/b",
                "ConfigMap/b",
                "Job/b",
                "Gadget/b",
                "Widget/b",
                "Job/c",
                "Job/a",
            ]
        );
        assert_eq!(names(&ordered(&hooks, HookEvent::PreUpgrade)), ["Job/up"]);
    }

    #[test]
    fn install_runs_install_hooks_upgrade_runs_upgrade_hooks() {
        let objects = vec![
            hook("Job", "both", "pre-install,pre-upgrade", "0", None),
            hook("Job", "post", "post-install", "0", None),
            hook("Job", "up", "post-upgrade", "0", None),
        ];
        let hooks = split(&objects, true).hooks;
        let events = |op| {
            plan(&hooks, op)
                .into_iter()
                .map(|r| format!("{} {}", r.event, r.object.name))
                .collect::<Vec<_>>()
        };
        assert_eq!(Operation::of(1), Operation::Install);
        assert_eq!(Operation::of(2), Operation::Upgrade);
        assert_eq!(
            events(Operation::Install),
            ["pre-install both", "post-install post"]
        );
        assert_eq!(
            events(Operation::Upgrade),
            ["pre-upgrade both", "post-upgrade up"]
        );
        assert!(plan(&hooks, Operation::Install)
            .iter()
            .all(|r| r.phase == HookPhase::Pending));
    }

    fn set(runs: &mut [HookRun], i: usize, phase: HookPhase) {
        runs[i].phase = phase;
    }

    #[test]
    fn stage_runs_one_hook_at_a_time_then_deletes_succeeded_ones_last_first() {
        let objects = vec![
            hook("Job", "a", "pre-install", "1", Some("hook-succeeded")),
            hook("Job", "b", "pre-install", "2", None),
            hook(
                "Job",
                "c",
                "pre-install",
                "3",
                Some("before-hook-creation,hook-succeeded"),
            ),
            hook("Job", "p", "post-install", "0", None),
        ];
        let hooks = split(&objects, true).hooks;
        let mut runs = plan(&hooks, Operation::Install);
        let pre = HookEvent::PreInstall;
        assert_eq!(next(&runs, &hooks, pre), Next::Run(0));
        set(&mut runs, 0, HookPhase::Running);
        assert_eq!(next(&runs, &hooks, pre), Next::Run(0));
        set(&mut runs, 0, HookPhase::Succeeded);
        assert_eq!(next(&runs, &hooks, pre), Next::Run(1));
        set(&mut runs, 1, HookPhase::Succeeded);
        set(&mut runs, 2, HookPhase::Succeeded);
        assert_eq!(next(&runs, &hooks, pre), Next::DeleteSucceeded(vec![2, 0]));
        runs[2].deleted = true;
        runs[0].deleted = true;
        assert_eq!(next(&runs, &hooks, pre), Next::Done);
        // The post stage is its own.
        assert_eq!(next(&runs, &hooks, HookEvent::PostInstall), Next::Run(3));
        // No hooks for an event: done at once.
        assert_eq!(next(&runs, &hooks, HookEvent::PreUpgrade), Next::Done);
    }

    #[test]
    fn a_failed_hook_deletes_itself_on_hook_failed_and_earlier_ones_on_hook_succeeded() {
        let objects = vec![
            hook("Job", "a", "pre-upgrade", "1", Some("hook-succeeded")),
            hook("Job", "b", "pre-upgrade", "2", None),
            hook("Job", "c", "pre-upgrade", "3", Some("hook-failed")),
            hook("Job", "d", "pre-upgrade", "4", Some("hook-succeeded")),
        ];
        let hooks = split(&objects, true).hooks;
        let mut runs = plan(&hooks, Operation::Upgrade);
        set(&mut runs, 0, HookPhase::Succeeded);
        set(&mut runs, 1, HookPhase::Succeeded);
        set(&mut runs, 2, HookPhase::Failed);
        let pre = HookEvent::PreUpgrade;
        assert_eq!(
            next(&runs, &hooks, pre),
            Next::Failed {
                failed: 2,
                delete: vec![2, 0]
            }
        );
        runs[2].deleted = true;
        runs[0].deleted = true;
        assert_eq!(
            next(&runs, &hooks, pre),
            Next::Failed {
                failed: 2,
                delete: vec![]
            }
        );
    }

    #[test]
    fn crds_are_never_deleted_by_a_policy() {
        let crd = Object::new(
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                   "metadata": {"name": "w.example.com", "annotations": {
                       "helm.sh/hook": "pre-install",
                       "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded"}}}),
            Origin {
                file: "x".into(),
                document: 0,
                line: 1,
            },
        )
        .unwrap();
        let hooks = split(&[crd], true).hooks;
        assert!(!delete_before_creation(&hooks[0]));
        let mut runs = plan(&hooks, Operation::Install);
        runs[0].phase = HookPhase::Succeeded;
        assert_eq!(next(&runs, &hooks, HookEvent::PreInstall), Next::Done);
    }

    #[test]
    fn default_policy_deletes_before_creation_only() {
        let hooks = split(&[hook("Job", "a", "pre-install", "0", None)], true).hooks;
        assert!(delete_before_creation(&hooks[0]));
        let hooks = split(
            &[hook("Job", "a", "pre-install", "0", Some("hook-succeeded"))],
            true,
        )
        .hooks;
        assert!(!delete_before_creation(&hooks[0]));
    }

    #[test]
    fn rollback_skips_what_did_not_run() {
        let objects = vec![
            hook("Job", "a", "pre-upgrade", "1", None),
            hook("Job", "b", "post-upgrade", "1", None),
        ];
        let hooks = split(&objects, true).hooks;
        let mut runs = plan(&hooks, Operation::Upgrade);
        runs[0].phase = HookPhase::Succeeded;
        skip_pending(&mut runs, "rolled back");
        assert_eq!(runs[0].phase, HookPhase::Succeeded);
        assert_eq!(runs[1].phase, HookPhase::Skipped);
        assert_eq!(next(&runs, &hooks, HookEvent::PostUpgrade), Next::Done);
    }

    #[test]
    fn prepare_plans_a_new_revision_and_skips_for_a_rollback() {
        use crate::reconcile::rollout;
        let objects = vec![
            hook("Job", "a", "pre-install,pre-upgrade", "0", None),
            hook("Job", "b", "post-upgrade", "0", None),
        ];
        let hooks = split(&objects, true).hooks;
        let mut status = BundleDeploymentStatus::default();
        let start = |status: &mut BundleDeploymentStatus, number| {
            rollout::start_revision(
                status,
                rollout::NewRevision {
                    number,
                    generation: number,
                    spec_digest: "sha256:spec",
                    digest: "sha256:x",
                    sources: vec![],
                    values_from: vec![],
                    objects: 2,
                    rendered_at: None,
                },
                5,
                &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
            );
        };
        start(&mut status, 1);
        prepare(&mut status, 1, &hooks, &Transition::NewRevision, false);
        let first: Vec<String> = status.revisions[0]
            .hooks
            .iter()
            .map(|r| format!("{} {}", r.event, r.object.name))
            .collect();
        assert_eq!(first, ["pre-install a"], "revision 1 installs");
        prepare(&mut status, 1, &hooks, &Transition::NewRevision, true);
        assert_eq!(
            status.revisions[0].hooks.len(),
            2,
            "a BundleDeployment taking over a Helm release upgrades it from its first revision"
        );
        start(&mut status, 2);
        prepare(&mut status, 2, &hooks, &Transition::NewRevision, false);
        assert_eq!(status.revisions[0].hooks.len(), 2, "revision 2 upgrades");
        // A re-apply leaves the runs as they are.
        status.revisions[0].hooks[0].phase = HookPhase::Succeeded;
        prepare(&mut status, 2, &hooks, &Transition::Reapply, false);
        assert_eq!(status.revisions[0].hooks[0].phase, HookPhase::Succeeded);
        assert_eq!(status.revisions[0].hooks[1].phase, HookPhase::Pending);
        let rollback = Transition::Rollback {
            automatic: false,
            reason: "RollbackRequested".into(),
            message: "back".into(),
        };
        prepare(&mut status, 2, &hooks, &rollback, false);
        assert_eq!(status.revisions[0].hooks[1].phase, HookPhase::Skipped);
    }

    #[test]
    fn a_job_deleted_after_it_finished_is_judged_by_its_events() {
        let event = |r: &str, t: &str, m: &str| (r.to_string(), t.to_string(), m.to_string());
        assert_eq!(
            job_outcome_from_events(&[event("SuccessfulCreate", "Normal", "Created pod: x")]),
            None
        );
        assert_eq!(
            job_outcome_from_events(&[
                event("SuccessfulCreate", "Normal", "Created pod: x"),
                event("Completed", "Normal", "Job completed"),
            ]),
            Some(Readiness::Succeeded)
        );
        assert_eq!(
            job_outcome_from_events(&[event(
                "BackoffLimitExceeded",
                "Warning",
                "Job has reached the specified backoff limit"
            )]),
            Some(Readiness::Failed(
                "Job failed: BackoffLimitExceeded: Job has reached the specified backoff limit"
                    .into()
            ))
        );
        let job = |spec: Value| {
            Object::new(
                json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": spec}),
                Origin {
                    file: "templates/job.yaml".into(),
                    document: 0,
                    line: 1,
                },
            )
            .unwrap()
        };
        assert!(deleted_when_finished(&job(
            json!({"ttlSecondsAfterFinished": 0})
        )));
        assert!(!deleted_when_finished(&job(json!({}))));
    }

    #[test]
    fn readiness_follows_helms_watch_until_ready() {
        let job = |conditions: Value| json!({"status": {"conditions": conditions, "active": 1}});
        assert!(matches!(
            readiness("batch", "Job", &job(json!([]))),
            Readiness::Running(_)
        ));
        assert_eq!(
            readiness(
                "batch",
                "Job",
                &job(json!([{"type": "Complete", "status": "True"}]))
            ),
            Readiness::Succeeded
        );
        assert_eq!(
            readiness(
                "batch",
                "Job",
                &job(json!([{"type": "Failed", "status": "True",
                             "reason": "BackoffLimitExceeded",
                             "message": "Job has reached the specified backoff limit"}]))
            ),
            Readiness::Failed(
                "Job failed: BackoffLimitExceeded: Job has reached the specified backoff limit"
                    .into()
            )
        );
        // A condition that is not True does not count.
        assert!(matches!(
            readiness(
                "batch",
                "Job",
                &job(json!([{"type": "Failed", "status": "False"}]))
            ),
            Readiness::Running(_)
        ));
        let pod = |phase: &str| json!({"status": {"phase": phase}});
        assert_eq!(
            readiness("", "Pod", &pod("Succeeded")),
            Readiness::Succeeded
        );
        assert!(matches!(
            readiness("", "Pod", &pod("Failed")),
            Readiness::Failed(_)
        ));
        assert!(matches!(
            readiness("", "Pod", &pod("Running")),
            Readiness::Running(_)
        ));
        // Any other kind is ready once created.
        assert_eq!(readiness("", "ConfigMap", &json!({})), Readiness::Succeeded);
    }
}
