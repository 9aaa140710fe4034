//! The BundleDeploymentSet controller: stamps a BundleDeployment per selected cluster and rolls
//! a new revision out in waves (see [`plan`]). It acts only through the API, as any user of
//! pallet could: it creates, edits and deletes BundleDeployments and reads their status; the
//! agent's reconciler deploys them as it deploys any other.
//!
//! What it reads comes from watches (the sets, the cluster Secrets' metadata, the
//! BundleDeployments it stamped, trimmed to what a judgement needs), so a pass costs no read;
//! it writes only what changed.

pub mod plan;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action as Requeue, Controller};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use crate::api::conditions::{set_condition, NewCondition};
use crate::api::{
    BundleDeployment, BundleDeploymentSet, BundleDeploymentSetStatus, CLUSTER_SECRET_LABEL,
    REQUESTED_ROLLBACK_ANNOTATION, SET_LABEL,
};
use plan::{Action, Cluster, Plan};

/// The field manager of the set controller's writes.
pub const FIELD_MANAGER: &str = "pallet-set";

/// How soon a set whose rollout is under way is looked at again (its BundleDeployments' status
/// changes bring it sooner).
const WHILE_PROGRESSING: Duration = Duration::from_secs(20);
/// How soon a settled set is looked at again.
const SETTLED: Duration = Duration::from_secs(300);

/// Errors of a pass.
#[derive(Debug, thiserror::Error)]
pub enum SetError {
    /// A write or read failed.
    #[error("{context}: {source}")]
    Kube {
        /// What was being done.
        context: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

struct Context {
    client: Client,
    agent_namespace: String,
    clusters: Store<kube::api::PartialObjectMeta<Secret>>,
    stamped: Store<BundleDeployment>,
}

/// Runs the controller until `shutdown` resolves: the sets (those matching `selector`, the
/// agent's `--selector` and shard, when it has one: an agent confined to some BundleDeployments
/// handles only the sets labelled as they are), the Secrets labelled `pallet.dev/cluster` in
/// `agent_namespace`, and the BundleDeployments labelled `pallet.dev/set`.
pub async fn run(
    client: Client,
    agent_namespace: String,
    selector: Option<String>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let sets: Api<BundleDeploymentSet> = Api::all(client.clone());
    let sets_config = match &selector {
        Some(selector) => watcher::Config::default().labels(selector),
        None => watcher::Config::default(),
    };
    let secrets: Api<kube::api::PartialObjectMeta<Secret>> =
        Api::namespaced(client.clone(), &agent_namespace);
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let (clusters, cluster_writer) = reflector::store();
    let cluster_changes = watcher(
        secrets,
        watcher::Config::default().labels(CLUSTER_SECRET_LABEL),
    )
    .default_backoff()
    .reflect(cluster_writer)
    .touched_objects()
    .filter_map(|event| async move { event.ok().map(|_| ()) });
    let (stamped, stamped_writer) = reflector::store();
    let stamped_changes = watcher(bds, watcher::Config::default().labels(SET_LABEL))
        .default_backoff()
        .modify(trim)
        .reflect(stamped_writer)
        .touched_objects()
        .filter_map(|event| async move { event.ok() });
    let ctx = Arc::new(Context {
        client,
        agent_namespace,
        clusters,
        stamped,
    });
    Controller::new(sets, sets_config)
        .reconcile_all_on(cluster_changes)
        .reconcile_on(stamped_changes.filter_map(|bd| async move {
            let set = bd.labels().get(SET_LABEL)?.clone();
            Some(reflector::ObjectRef::<BundleDeploymentSet>::new(&set))
        }))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "BundleDeploymentSet pass");
            }
        })
        .await;
}

/// What the judgement of a stamped BundleDeployment needs: its metadata, spec, conditions and
/// revisions (not its inventory, drift or hooks, nor the managed fields).
fn trim(bd: &mut BundleDeployment) {
    bd.metadata.managed_fields = None;
    if let Some(status) = bd.status.as_mut() {
        status.inventory = None;
        status.drift = None;
        status.skipped.clear();
        status.drift_ignore.clear();
        status.notifications.clear();
        for revision in &mut status.revisions {
            revision.sources.clear();
            revision.values_from.clear();
            revision.hooks.clear();
        }
    }
}

async fn reconcile(set: Arc<BundleDeploymentSet>, ctx: Arc<Context>) -> Result<Requeue, SetError> {
    let name = set.name_any();
    if set.metadata.deletion_timestamp.is_some() {
        // Its BundleDeployments go with it (owner references): nothing to do.
        return Ok(Requeue::await_change());
    }
    let clusters: Vec<Cluster> = ctx
        .clusters
        .state()
        .iter()
        .map(|secret| Cluster {
            name: secret.name_any(),
            labels: secret.labels().clone(),
        })
        .collect();
    let stamped: Vec<BundleDeployment> = ctx
        .stamped
        .state()
        .iter()
        .filter(|bd| bd.labels().get(SET_LABEL) == Some(&name))
        .map(|bd| bd.as_ref().clone())
        .collect();
    let planned = match plan::plan(&set, &clusters, &stamped, &ctx.agent_namespace) {
        Ok(planned) => planned,
        Err(error) => {
            write_invalid(&ctx.client, &set, &error.0).await?;
            return Ok(Requeue::await_change());
        }
    };
    for action in &planned.actions {
        act(&ctx.client, &set, action).await?;
    }
    write_status(&ctx.client, &set, &planned).await?;
    Ok(Requeue::requeue(if planned.progressing {
        WHILE_PROGRESSING
    } else {
        SETTLED
    }))
}

fn error_policy(_set: Arc<BundleDeploymentSet>, error: &SetError, _ctx: Arc<Context>) -> Requeue {
    tracing::warn!(%error, "BundleDeploymentSet pass failed; retrying");
    Requeue::requeue(Duration::from_secs(5))
}

async fn act(client: &Client, set: &BundleDeploymentSet, action: &Action) -> Result<(), SetError> {
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let kube = |context: String| move |source| SetError::Kube { context, source };
    match action {
        Action::Apply(stamp) => {
            let owner = set.controller_owner_ref(&());
            let object = json!({
                "apiVersion": "pallet.dev/v1alpha1",
                "kind": "BundleDeployment",
                "metadata": {
                    "name": stamp.name,
                    "labels": stamp.labels,
                    "annotations": stamp.annotations,
                    "ownerReferences": owner.into_iter().collect::<Vec<_>>(),
                },
                "spec": stamp.spec,
            });
            bds.patch(
                &stamp.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&object),
            )
            .await
            .map_err(kube(format!("apply BundleDeployment {}", stamp.name)))?;
            tracing::info!(set = %set.name_any(), bundle_deployment = %stamp.name, "stamped");
        }
        Action::Delete(name) => match bds.delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                tracing::info!(set = %set.name_any(), bundle_deployment = %name, "cluster no longer selected; deleted its BundleDeployment")
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                return Err(SetError::Kube {
                    context: format!("delete BundleDeployment {name}"),
                    source,
                })
            }
        },
        Action::RollBack { name, request } => {
            let patch =
                json!({"metadata": {"annotations": {REQUESTED_ROLLBACK_ANNOTATION: request}}});
            bds.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(kube(format!(
                    "request a rollback of BundleDeployment {name}"
                )))?;
            tracing::info!(set = %set.name_any(), bundle_deployment = %name, %request, "asked for a rollback");
        }
    }
    Ok(())
}

/// Writes the set's status when it changed.
async fn write_status(
    client: &Client,
    set: &BundleDeploymentSet,
    planned: &Plan,
) -> Result<(), SetError> {
    let before = set.status.clone().unwrap_or_default();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let mut status = BundleDeploymentSetStatus {
        observed_generation: set.metadata.generation,
        conditions: before.conditions.clone(),
        revision: Some(planned.revision),
        digest: Some(planned.digest.clone()),
        clusters: planned.clusters.clone(),
        rolled_back_revision: planned.rolled_back_revision,
        last_handled_rollback: planned.last_handled_rollback.clone(),
    };
    for condition in &planned.conditions {
        set_condition(
            &mut status.conditions,
            NewCondition {
                type_: condition.type_,
                status: condition.status,
                reason: condition.reason,
                message: condition.message.clone(),
            },
            set.metadata.generation,
            &now,
        );
    }
    if status == before {
        return Ok(());
    }
    patch_status(client, set, &status).await
}

/// Writes Ready=False for a set whose spec cannot be used.
async fn write_invalid(
    client: &Client,
    set: &BundleDeploymentSet,
    message: &str,
) -> Result<(), SetError> {
    let mut status = set.status.clone().unwrap_or_default();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let changed = set_condition(
        &mut status.conditions,
        NewCondition {
            type_: crate::api::conditions::types::READY,
            status: false,
            reason: plan::reasons::INVALID,
            message: message.to_string(),
        },
        set.metadata.generation,
        &now,
    );
    if !changed {
        return Ok(());
    }
    status.observed_generation = set.metadata.generation;
    patch_status(client, set, &status).await
}

/// Writes `status` as the set's status (a merge patch).
async fn patch_status(
    client: &Client,
    set: &BundleDeploymentSet,
    status: &BundleDeploymentSetStatus,
) -> Result<(), SetError> {
    let sets: Api<BundleDeploymentSet> = Api::all(client.clone());
    sets.patch_status(
        &set.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": status})),
    )
    .await
    .map_err(|source| SetError::Kube {
        context: format!("write the status of BundleDeploymentSet {}", set.name_any()),
        source,
    })?;
    Ok(())
}
