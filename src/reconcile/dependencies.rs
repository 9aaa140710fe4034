//! `spec.dependsOn`: a BundleDeployment applies nothing until what it depends on is ready.
//!
//! - Another BundleDeployment is ready when it is Ready=True at its current generation
//!   (`status.observedGeneration == metadata.generation`), or when its `readyExpr` is true.
//! - Any other object is ready when its `readyExpr` is true (`dep` the object, `self` the
//!   dependent), read as the dependent's ServiceAccount when it names one.
//!
//! While one is not ready the pass stops before the fetch: nothing is fetched, rendered or
//! applied (objects already applied stay as they are), and Ready=False says what it waits for.
//! Each dependency is watched ([`super::dependency_watch`]), so its change starts a pass at
//! once. Dependencies between BundleDeployments that form a cycle (through edges without
//! `readyExpr`) are reported as Stalled, naming the cycle, on every member and on whatever
//! depends on one.
//!
//! Deletion goes the other way: a BundleDeployment being deleted keeps its objects (and its
//! finalizer) while a BundleDeployment that depends on it is being deleted too, so the
//! dependent's objects go first. Deletions a few requests apart count as together: for its first
//! seconds, a deletion also waits for dependents whose own deletion has not shown up yet.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::ResourceExt;
use serde_json::Value;

use super::dependency_watch::WatchedObject;
use super::health_checks::{off_runtime, REASON_CEL_BUDGET};
use super::values_watch::Seen;
use super::{Context, ReconcileError};
use crate::api::conditions::find;
use crate::api::{BundleDeployment, DependencyReference};
use crate::health::cel::ready::{NotReady, ReadyExpression};

/// Condition reason while a dependency is not ready.
pub const REASON_NOT_READY: &str = "DependencyNotReady";
/// Condition reason (with Stalled) of a dependency cycle.
pub const REASON_CYCLE: &str = "DependencyCycle";
/// Condition reason (with Stalled) of a `readyExpr` that does not compile.
pub const REASON_INVALID: &str = "InvalidDependency";

/// The most BundleDeployments read while looking for a cycle.
const CYCLE_SEARCH_LIMIT: usize = 256;

/// Whether a pass may go on to fetch and apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Every dependency is ready (or there are none).
    Open,
    /// Wait: `reason`, `message`; `stalled` when only a spec change can end it.
    Wait {
        /// CamelCase reason.
        reason: &'static str,
        /// What it waits for.
        message: String,
        /// A cycle or an invalid expression.
        stalled: bool,
    },
}

/// What one dependency is now.
#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    Ready,
    NotReady(String),
    /// Its `readyExpr` went over its CEL budget (why).
    OverBudget(String),
}

/// The refusal of an over-budget `readyExpr` recorded at `bd`'s generation: the pass waits
/// without reading or evaluating anything until the spec changes.
fn refused(bd: &BundleDeployment, ctx: &Context) -> Option<Gate> {
    (0..bd.spec.depends_on.len()).find_map(|index| {
        let message = ctx.memory.cel.ready_refusal(bd, index)?;
        Some(Gate::Wait {
            reason: REASON_CEL_BUDGET,
            message,
            stalled: true,
        })
    })
}

/// `dependsOn[index]`'s `readyExpr` is over its budget (`why`): recorded, so that it is not
/// evaluated again at this generation.
fn over_budget(
    bd: &BundleDeployment,
    ctx: &Context,
    index: usize,
    described: &str,
    why: &str,
) -> Gate {
    let message = format!("{described}: {why}; not evaluated again until the spec changes");
    ctx.memory.cel.refuse_ready(bd, index, message.clone());
    Gate::Wait {
        reason: REASON_CEL_BUDGET,
        message,
        stalled: true,
    }
}

/// Decides whether `bd` may apply, and watches its dependencies for the pass that follows.
/// Objects it depends on are read on `workload`'s cluster, where its own objects are; those of a
/// remote cluster are looked at again at each pass (the dependency watches are the agent's
/// cluster's).
pub async fn gate(
    bd: &BundleDeployment,
    ctx: &Context,
    workload: &super::workload::Workload,
) -> Result<Gate, ReconcileError> {
    let name = bd.name_any();
    let dependencies = &bd.spec.depends_on;
    if dependencies.is_empty() {
        if let Some(watches) = &ctx.watchers.dependency_watches {
            watches.set(&name, Vec::new());
        }
        return Ok(Gate::Open);
    }
    if let Some(wait) = refused(bd, ctx) {
        return Ok(wait);
    }
    let mut compiled = Vec::new();
    for (index, dependency) in dependencies.iter().enumerate() {
        let described = format!("dependsOn[{index}] ({})", dependency.describe());
        match dependency
            .ready_expr
            .as_deref()
            .map(ReadyExpression::compile)
        {
            Some(Err(why @ NotReady::OverBudget(_))) => {
                return Ok(over_budget(bd, ctx, index, &described, &why.to_string()))
            }
            Some(Err(why)) => {
                return Ok(Gate::Wait {
                    reason: REASON_INVALID,
                    message: format!("{described}: {why}"),
                    stalled: true,
                })
            }
            Some(Ok(expression)) => compiled.push(Some(expression)),
            None => compiled.push(None),
        }
    }
    let dependent = Arc::new(serde_json::to_value(bd).unwrap_or_default());
    let mut watched = Vec::new();
    let mut waiting = Vec::new();
    let mut read = BTreeMap::new();
    for (index, (dependency, expression)) in dependencies.iter().zip(&compiled).enumerate() {
        let (state, watch) = if dependency.is_bundle_deployment() {
            let found = read_bundle_deployment(ctx, &dependency.name).await?;
            let seen = version_of(found.as_ref().map(|bd| &bd.metadata));
            let (state, found) = match expression {
                // The expression runs off the async runtime.
                Some(expression) => {
                    let (expression, dependent) = (expression.clone(), dependent.clone());
                    off_runtime(move || {
                        let state =
                            bundle_deployment_state(found.as_ref(), Some(&expression), &dependent);
                        (state, found)
                    })
                    .await
                    .unwrap_or_else(|why| (State::OverBudget(why), None))
                }
                None => (
                    bundle_deployment_state(found.as_ref(), None, &dependent),
                    found,
                ),
            };
            if let Some(found) = found {
                read.insert(dependency.name.clone(), found);
            }
            (
                state,
                Some((WatchedObject::bundle_deployment(&dependency.name), seen)),
            )
        } else {
            let (state, watch) =
                object_state(bd, workload, dependency, expression.as_ref(), &dependent).await?;
            (state, watch.filter(|_| workload.remote_name().is_none()))
        };
        watched.extend(watch);
        match state {
            State::Ready => {}
            State::NotReady(why) => waiting.push(format!("{} ({why})", dependency.describe())),
            State::OverBudget(why) => {
                if let Some(watches) = &ctx.watchers.dependency_watches {
                    watches.set(&name, watched);
                }
                let described = format!("dependsOn[{index}] ({})", dependency.describe());
                return Ok(over_budget(bd, ctx, index, &described, &why));
            }
        }
    }
    if let Some(watches) = &ctx.watchers.dependency_watches {
        watches.set(&name, watched);
    }
    if let Some(cycle) = find_cycle(ctx, bd, read).await? {
        let message = if cycle.first() == Some(&name) {
            format!("dependency cycle: {}", cycle.join(" → "))
        } else {
            format!(
                "depends on a dependency cycle: {}; nothing in it can become ready",
                cycle.join(" → ")
            )
        };
        return Ok(Gate::Wait {
            reason: REASON_CYCLE,
            message,
            stalled: true,
        });
    }
    if waiting.is_empty() {
        return Ok(Gate::Open);
    }
    Ok(Gate::Wait {
        reason: REASON_NOT_READY,
        message: format!("waiting for {}", waiting.join(", ")),
        stalled: false,
    })
}

async fn read_bundle_deployment(
    ctx: &Context,
    name: &str,
) -> Result<Option<BundleDeployment>, ReconcileError> {
    Api::<BundleDeployment>::all(ctx.cluster.client.clone())
        .get_opt(name)
        .await
        .map_err(|source| ReconcileError::Kube {
            context: format!("read dependency BundleDeployment {name}"),
            source,
        })
}

fn version_of(
    metadata: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
) -> Seen {
    match metadata {
        None => Seen::Absent,
        Some(metadata) => metadata
            .resource_version
            .clone()
            .map_or(Seen::Unknown, Seen::Version),
    }
}

/// Ready=True at its current generation, or what `expression` says. Pure.
fn bundle_deployment_state(
    found: Option<&BundleDeployment>,
    expression: Option<&ReadyExpression>,
    dependent: &Value,
) -> State {
    let Some(dep) = found else {
        return State::NotReady("not found".into());
    };
    if dep.metadata.deletion_timestamp.is_some() {
        return State::NotReady("being deleted".into());
    }
    if let Some(expression) = expression {
        let value = serde_json::to_value(dep).unwrap_or_default();
        return ready_state(expression, &value, dependent);
    }
    let status = dep.status.as_ref();
    let generation = dep.metadata.generation;
    let observed = status.and_then(|s| s.observed_generation);
    if observed != generation {
        return State::NotReady(format!(
            "generation {} not observed yet",
            generation.unwrap_or_default()
        ));
    }
    let ready = status.and_then(|s| find(&s.conditions, crate::api::conditions::types::READY));
    match ready {
        Some(c) if c.status == "True" => State::Ready,
        Some(c) => State::NotReady(format!("Ready={}, reason {}", c.status, c.reason)),
        None => State::NotReady("no Ready condition yet".into()),
    }
}

/// The state of a dependency that is not a BundleDeployment, and its watch.
async fn object_state(
    bd: &BundleDeployment,
    workload: &super::workload::Workload,
    dependency: &DependencyReference,
    expression: Option<&ReadyExpression>,
    dependent: &Arc<Value>,
) -> Result<(State, Option<(WatchedObject, Seen)>), ReconcileError> {
    let (group, version) = match dependency.api_version().split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", dependency.api_version()),
    };
    let gvk = GroupVersionKind::gvk(group, version, dependency.kind());
    let kube_error = |source| ReconcileError::Kube {
        context: format!("read dependency {}", dependency.describe()),
        source,
    };
    let Some((resource, capabilities)) = workload
        .kinds
        .resolve(&workload.client, &gvk)
        .await
        .map_err(kube_error)?
    else {
        return Ok((State::NotReady("kind not served".into()), None));
    };
    let namespace = match capabilities.scope {
        Scope::Namespaced => Some(
            dependency
                .namespace
                .clone()
                .or_else(|| bd.spec.install_namespace.clone())
                .unwrap_or_else(|| "default".into()),
        ),
        Scope::Cluster => None,
    };
    // Read as the dependent's ServiceAccount: an author learns nothing it may not get.
    let client = workload.writer.clone();
    let api: Api<DynamicObject> = match &namespace {
        Some(namespace) => Api::namespaced_with(client, namespace, &resource),
        None => Api::all_with(client, &resource),
    };
    let watch = WatchedObject::new(&resource, namespace.as_deref(), &dependency.name);
    let found = match api.get_opt(&dependency.name).await {
        Ok(found) => found,
        Err(kube::Error::Api(status)) if status.code == 403 => {
            let why = format!("may not be read: {}", status.message);
            return Ok((State::NotReady(why), Some((watch, Seen::Unknown))));
        }
        Err(source) => return Err(kube_error(source)),
    };
    let seen = version_of(found.as_ref().map(|o| &o.metadata));
    let state = match (found, expression) {
        (None, _) => State::NotReady("not found".into()),
        (Some(_), None) => State::NotReady("no readyExpr".into()),
        (Some(object), Some(expression)) => {
            // Off the async runtime: the object is converted and the expression evaluated there.
            let (expression, dependent) = (expression.clone(), dependent.clone());
            off_runtime(move || {
                let value = serde_json::to_value(&object).unwrap_or_default();
                ready_state(&expression, &value, &dependent)
            })
            .await
            .unwrap_or_else(State::OverBudget)
        }
    };
    Ok((state, Some((watch, seen))))
}

/// What `expression` says of dependency `dep` for `dependent`. Evaluates on this thread.
fn ready_state(expression: &ReadyExpression, dep: &Value, dependent: &Value) -> State {
    match expression.evaluate(dep, dependent) {
        Ok(true) => State::Ready,
        Ok(false) => State::NotReady(format!("readyExpr is false: {}", expression.text())),
        Err(NotReady::OverBudget(why)) => {
            State::OverBudget(format!("readyExpr is over its CEL budget: {why}"))
        }
        Err(why) => State::NotReady(why.to_string()),
    }
}

/// The edges of the dependency graph between BundleDeployments that can block: those without
/// `readyExpr` (an expression may well hold inside a cycle).
fn blocking_edges(bd: &BundleDeployment) -> Vec<String> {
    bd.spec
        .depends_on
        .iter()
        .filter(|d| d.is_bundle_deployment() && d.ready_expr.is_none())
        .map(|d| d.name.clone())
        .collect()
}

/// A cycle reachable from `bd` through blocking edges, as the names along it with the first
/// repeated at the end (`a → b → a`). Reads the BundleDeployments it needs (`read` holds those
/// already read), at most [`CYCLE_SEARCH_LIMIT`].
async fn find_cycle(
    ctx: &Context,
    bd: &BundleDeployment,
    mut read: BTreeMap<String, BundleDeployment>,
) -> Result<Option<Vec<String>>, ReconcileError> {
    let mut graph: BTreeMap<String, Vec<String>> = BTreeMap::new();
    graph.insert(bd.name_any(), blocking_edges(bd));
    let mut pending: Vec<String> = blocking_edges(bd);
    while let Some(name) = pending.pop() {
        if graph.contains_key(&name) || graph.len() >= CYCLE_SEARCH_LIMIT {
            continue;
        }
        let found = match read.remove(&name) {
            Some(found) => Some(found),
            None => read_bundle_deployment(ctx, &name).await?,
        };
        let edges = found.as_ref().map(blocking_edges).unwrap_or_default();
        pending.extend(edges.iter().cloned());
        graph.insert(name, edges);
    }
    Ok(cycle_from(&graph, &bd.name_any()))
}

/// A cycle reachable from `start` in `graph`, preferring one through `start`. Pure.
pub fn cycle_from(graph: &BTreeMap<String, Vec<String>>, start: &str) -> Option<Vec<String>> {
    fn visit(
        graph: &BTreeMap<String, Vec<String>>,
        node: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(graph, next, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    visit(graph, start, &mut Vec::new(), &mut BTreeSet::new())
}

/// How long a BundleDeployment being deleted waits for its dependents' deletion to show up:
/// "deleted together" (`kubectl delete -f dir/`) is a few requests apart, and the dependency's
/// may come first.
const DELETED_TOGETHER: Duration = Duration::from_secs(5);

/// Deletion in reverse order: while a BundleDeployment that depends on `bd` is being deleted
/// too (or, for [`DELETED_TOGETHER`] after `bd`'s deletion began, exists at all), `bd` keeps its
/// objects. Watches those dependents, so that their going starts `bd`'s deletion at once.
pub async fn wait_for_dependents(
    bd: &BundleDeployment,
    ctx: &Context,
) -> Result<(), ReconcileError> {
    let name = bd.name_any();
    let just_deleted = bd
        .metadata
        .deletion_timestamp
        .as_ref()
        .is_some_and(|since| {
            let age = k8s_openapi::jiff::Timestamp::now().duration_since(since.0);
            Duration::try_from(age).is_ok_and(|age| age < DELETED_TOGETHER)
        });
    let all = Api::<BundleDeployment>::all(ctx.cluster.client.clone())
        .list(&Default::default())
        .await
        .map_err(|source| ReconcileError::Kube {
            context: "list BundleDeployments for the deletion order".into(),
            source,
        })?;
    let dependents: Vec<&BundleDeployment> = all
        .items
        .iter()
        .filter(|other| {
            (other.metadata.deletion_timestamp.is_some() || just_deleted)
                && other.name_any() != name
                && other
                    .spec
                    .depends_on
                    .iter()
                    .any(|d| d.is_bundle_deployment() && d.name == name)
        })
        .collect();
    if let Some(watches) = &ctx.watchers.dependency_watches {
        let watched = dependents
            .iter()
            .map(|other| {
                (
                    WatchedObject::bundle_deployment(&other.name_any()),
                    version_of(Some(&other.metadata)),
                )
            })
            .collect();
        watches.set(&name, watched);
    }
    if dependents.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = dependents.iter().map(|d| d.name_any()).collect();
    Err(ReconcileError::Deleting(format!(
        "BundleDeployment {} (depending on this one) first",
        names.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn graph(edges: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        edges
            .iter()
            .map(|(from, to)| (from.to_string(), to.iter().map(|t| t.to_string()).collect()))
            .collect()
    }

    #[test]
    fn cycles_are_found_and_named_along_their_path() {
        let acyclic = graph(&[("app", &["crds", "db"]), ("db", &["crds"]), ("crds", &[])]);
        assert_eq!(cycle_from(&acyclic, "app"), None);
        let two = graph(&[("a", &["b"]), ("b", &["a"])]);
        assert_eq!(cycle_from(&two, "a").unwrap(), vec!["a", "b", "a"]);
        // Not a member, but depends on a cycle.
        let behind = graph(&[("app", &["x"]), ("x", &["y"]), ("y", &["x"])]);
        assert_eq!(cycle_from(&behind, "app").unwrap(), vec!["x", "y", "x"]);
        // A node that is missing from the graph (not found) ends the path.
        assert_eq!(cycle_from(&graph(&[("a", &["gone"])]), "a"), None);
    }

    fn bd(value: serde_json::Value) -> BundleDeployment {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_bundle_deployment_is_ready_at_its_current_generation_only() {
        let me = json!({});
        let ready = |generation: i64, observed: i64, status: &str| {
            bd(json!({
                "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
                "metadata": {"name": "crds", "generation": generation},
                "spec": {"format": "plain", "sources": []},
                "status": {"observedGeneration": observed, "conditions": [{
                    "type": "Ready", "status": status, "reason": "Healthy", "message": "",
                    "lastTransitionTime": "2024-01-01T00:00:00Z"}]},
            }))
        };
        assert_eq!(
            bundle_deployment_state(Some(&ready(2, 2, "True")), None, &me),
            State::Ready
        );
        assert!(matches!(
            bundle_deployment_state(Some(&ready(3, 2, "True")), None, &me),
            State::NotReady(why) if why.contains("generation 3")
        ));
        assert!(matches!(
            bundle_deployment_state(Some(&ready(2, 2, "False")), None, &me),
            State::NotReady(why) if why.contains("Ready=False")
        ));
        assert!(matches!(
            bundle_deployment_state(None, None, &me),
            State::NotReady(_)
        ));
        // readyExpr replaces the built-in check.
        let expression = ReadyExpression::compile("dep.metadata.generation >= 3").unwrap();
        assert_eq!(
            bundle_deployment_state(Some(&ready(3, 2, "False")), Some(&expression), &me),
            State::Ready
        );
    }
}
