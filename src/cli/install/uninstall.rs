//! `pallet uninstall`: removes the agents, the CRD, RBAC and the namespace without leaving
//! anything hanging.
//!
//! What happens to every bundle's objects is said once for all:
//! - **kept** (the default, `--keep-bundles`): the agents are stopped first, then each
//!   BundleDeployment's objects lose pallet's ownership label (as `deletionPolicy: Orphan`
//!   leaves them), webhook certificate Secrets lose their owner reference, and the finalizer is
//!   released, so deleting the BundleDeployments and the CRD deletes none of them;
//! - **deleted** (`--delete-bundles`): each BundleDeployment is deleted with `deletionPolicy:
//!   Delete` while the agents still run, and they delete its objects as on any deletion; then
//!   the agents are removed.
//!
//! It refuses while the choice is ambiguous: a BundleDeployment already being deleted with
//! `deletionPolicy: Delete` was asked to delete its objects, which keeping them would
//! contradict; one of the flags decides.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt as _};
use serde_json::json;

use super::manifests::DEFAULT_NAMESPACE;
use super::version::{self, CRD_NAME, SET_CRD_NAME};
use super::PART_OF_LABEL;
use crate::api::{BundleDeployment, DeletionPolicy};
use crate::apply::plan::OWNER_LABEL;
use crate::cli::exit::{timed_out, usage};
use crate::cli::KubeArgs;
use crate::reconcile::webhook_certs::CERTIFICATES_OF_LABEL;
use crate::reconcile::FINALIZER;

/// Flags of `pallet uninstall`.
#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("bundles").args(["delete_bundles", "keep_bundles"])))]
pub struct UninstallArgs {
    /// The agents' namespace.
    #[arg(short = 'n', long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// Delete every bundle's objects (the agents delete them, as on a BundleDeployment's
    /// deletion with deletionPolicy Delete) before removing pallet.
    #[arg(long)]
    pub delete_bundles: bool,
    /// Keep every bundle's objects in the cluster, without pallet's label (the default, unless
    /// a BundleDeployment is already being deleted with deletionPolicy Delete).
    #[arg(long)]
    pub keep_bundles: bool,
    /// How long each step may wait (the agents' deletions, the agents stopping, the CRD and
    /// namespace going away).
    #[arg(long, default_value = "5m", value_parser = crate::duration::parse_arg)]
    pub timeout: Duration,
    /// With --delete-bundles: release the finalizers the agents did not release in time
    /// (the objects of those BundleDeployments stay, with pallet's label).
    #[arg(long, requires = "delete_bundles")]
    pub force: bool,
    /// Cluster.
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// What happens to the bundles' objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BundleChoice {
    /// They stay.
    Keep,
    /// They are deleted.
    Delete,
}

/// The choice the flags and the BundleDeployments make, or why none can be made.
pub fn choose(
    delete: bool,
    keep: bool,
    bundles: &[BundleDeployment],
) -> Result<BundleChoice, String> {
    if delete {
        return Ok(BundleChoice::Delete);
    }
    if keep {
        return Ok(BundleChoice::Keep);
    }
    let deleting: Vec<String> = bundles
        .iter()
        .filter(|bd| {
            bd.metadata.deletion_timestamp.is_some()
                && bd.spec.deletion_policy() == DeletionPolicy::Delete
        })
        .map(|bd| bd.name_any())
        .collect();
    if deleting.is_empty() {
        return Ok(BundleChoice::Keep);
    }
    Err(format!(
        "BundleDeployment {} is being deleted with deletionPolicy Delete, which keeping every \
         bundle's objects would contradict: pass --delete-bundles (the agents finish deleting \
         them, and every other bundle's objects) or --keep-bundles (every bundle's objects stay)",
        deleting.join(", ")
    ))
}

/// Polls `done` every half second until it says yes or `timeout` passes; returns the last
/// answer's complaint on timeout.
async fn wait_for<F, Fut>(timeout: Duration, what: &str, mut done: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<String>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let waiting = done().await?;
        let Some(waiting) = waiting else {
            return Ok(());
        };
        if Instant::now() >= deadline {
            return Err(timed_out(format!(
                "{what}: still waiting after {}s: {waiting}",
                timeout.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn part_of() -> ListParams {
    ListParams::default().labels(&format!("{PART_OF_LABEL}=pallet"))
}

/// Deletes the agents' Deployments and waits until their Pods are gone and no agent holds a
/// Lease: from then on nothing writes to the BundleDeployments or their objects.
async fn stop_agents(client: &Client, namespace: &str, timeout: Duration) -> anyhow::Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let mut selectors = Vec::new();
    for deployment in deployments.list(&part_of()).await?.items {
        if let Some(selector) = deployment
            .spec
            .as_ref()
            .and_then(|s| s.selector.match_labels.clone())
        {
            let text: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
            selectors.push(text.join(","));
        }
        let name = deployment.name_any();
        deployments
            .delete(&name, &DeleteParams::foreground())
            .await
            .with_context(|| format!("deleting Deployment {namespace}/{name}"))?;
        tprintln!("Deployment {namespace}/{name} deleted");
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    wait_for(timeout, "stopping the agents", || {
        let pods = pods.clone();
        let selectors = selectors.clone();
        async move {
            let mut left = Vec::new();
            for selector in &selectors {
                for pod in pods
                    .list_metadata(&ListParams::default().labels(selector))
                    .await?
                    .items
                {
                    left.push(pod.name_any());
                }
            }
            Ok((!left.is_empty()).then(|| format!("Pods {}", left.join(", "))))
        }
    })
    .await?;
    wait_for(timeout, "the agents' Leases", || async move {
        let held: Vec<String> = version::agent_leases(client, namespace)
            .await?
            .into_iter()
            .filter(|l| l.is_held())
            .map(|l| format!("{} (held by {})", l.lease, l.holder.unwrap_or_default()))
            .collect();
        Ok((!held.is_empty()).then(|| {
            format!(
                "{}: an agent outside these Deployments still leads; stop it",
                held.join(", ")
            )
        }))
    })
    .await
}

/// Leaves `bd`'s objects in the cluster without pallet's label, its webhook certificate
/// Secrets without their owner reference, and releases its finalizer.
async fn orphan(client: &Client, bd: &BundleDeployment) -> anyhow::Result<usize> {
    let name = bd.name_any();
    let inventory = bd
        .status
        .as_ref()
        .and_then(|s| s.inventory.clone())
        .map(|i| i.objects)
        .unwrap_or_default();
    let unlabel = json!({"metadata": {"labels": {OWNER_LABEL: null}}});
    for reference in &inventory {
        let api_version = match reference.group.as_str() {
            "" => reference.version.clone(),
            group => format!("{group}/{}", reference.version),
        };
        let namespace = (!reference.namespace.is_empty()).then_some(reference.namespace.as_str());
        let api = match super::api_for(client, &api_version, &reference.kind, namespace).await {
            Ok(api) => api,
            // A kind no longer served: nothing of it is left to keep.
            Err(_) => continue,
        };
        match api
            .patch(
                &reference.name,
                &PatchParams::default(),
                &Patch::Merge(&unlabel),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "removing the {OWNER_LABEL} label of {} {}",
                        reference.kind, reference.name
                    )
                })
            }
        }
    }
    let secrets = Api::<Secret>::all(client.clone())
        .list_metadata(&ListParams::default().labels(&format!("{CERTIFICATES_OF_LABEL}={name}")))
        .await?;
    for secret in secrets.items {
        let namespace = secret.namespace().unwrap_or_default();
        Api::<Secret>::namespaced(client.clone(), &namespace)
            .patch(
                &secret.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"ownerReferences": null}})),
            )
            .await
            .with_context(|| format!("keeping Secret {namespace}/{}", secret.name_any()))?;
    }
    release_finalizer(client, bd).await?;
    Ok(inventory.len())
}

/// Removes pallet's finalizer from `bd` (other finalizers stay).
async fn release_finalizer(client: &Client, bd: &BundleDeployment) -> anyhow::Result<()> {
    let finalizers: Vec<String> = bd
        .finalizers()
        .iter()
        .filter(|f| f.as_str() != FINALIZER)
        .cloned()
        .collect();
    if finalizers.len() == bd.finalizers().len() {
        return Ok(());
    }
    // Conditional on the resourceVersion read: a finalizer someone else adds meanwhile stays.
    let patch = json!({"metadata": {"finalizers": finalizers,
                                    "resourceVersion": bd.resource_version()}});
    Api::<BundleDeployment>::all(client.clone())
        .patch(
            &bd.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .with_context(|| {
            format!(
                "releasing the finalizer of BundleDeployment {}",
                bd.name_any()
            )
        })?;
    Ok(())
}

/// Deletes every BundleDeployment with deletionPolicy Delete and waits for the agents to delete
/// their objects and release them.
async fn delete_bundles(client: &Client, args: &UninstallArgs) -> anyhow::Result<()> {
    orphan_sets(client).await?;
    let api: Api<BundleDeployment> = Api::all(client.clone());
    let leading = version::agent_leases(client, &args.namespace)
        .await?
        .iter()
        .any(|l| l.is_held());
    let bundles = api.list(&ListParams::default()).await?.items;
    if !bundles.is_empty() && !leading {
        return Err(anyhow::anyhow!(
            "--delete-bundles needs a running agent to delete the bundles' objects, and none leads in {}: start it, or keep the objects with --keep-bundles",
            args.namespace
        ));
    }
    for bd in &bundles {
        let name = bd.name_any();
        if bd.spec.deletion_policy() != DeletionPolicy::Delete {
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"deletionPolicy": "Delete"}})),
            )
            .await
            .with_context(|| format!("setting deletionPolicy Delete on {name}"))?;
        }
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(e).with_context(|| format!("deleting BundleDeployment {name}")),
        }
        tprintln!("BundleDeployment {name}: deleting its objects");
    }
    let waited = wait_for(args.timeout, "the agents deleting the bundles", || {
        let api = api.clone();
        async move {
            let left = api.list(&ListParams::default()).await?.items;
            Ok((!left.is_empty()).then(|| {
                left.iter()
                    .map(|bd| {
                        let why = bd
                            .status
                            .as_ref()
                            .and_then(|s| {
                                crate::api::conditions::find(&s.conditions, "Ready").cloned()
                            })
                            .map(|c| format!(" ({}: {})", c.reason, c.message))
                            .unwrap_or_default();
                        format!("{}{why}", bd.name_any())
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            }))
        }
    })
    .await;
    match waited {
        Ok(()) => Ok(()),
        Err(error) if args.force => {
            eprintln!(
                "warning: {}; releasing their finalizers (--force)",
                crate::cli::error_message(&error)
            );
            for bd in api.list(&ListParams::default()).await?.items {
                release_finalizer(client, &bd).await?;
            }
            Ok(())
        }
        Err(error) => Err(error),
    }
}

/// Deletes every BundleDeploymentSet, leaving the BundleDeployments it stamped (which the set
/// controller would otherwise stamp again while they are deleted one by one).
async fn orphan_sets(client: &Client) -> anyhow::Result<()> {
    let sets: Api<crate::api::BundleDeploymentSet> = Api::all(client.clone());
    let listed = match sets.list_metadata(&ListParams::default()).await {
        Ok(listed) => listed.items,
        // No set CRD: no sets.
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
        Err(e) => return Err(e).context("listing BundleDeploymentSets"),
    };
    for set in listed {
        let name = set.name_any();
        match sets
            .delete(&name, &DeleteParams::orphan())
            .await
        {
            Ok(_) => tprintln!("BundleDeploymentSet {name} deleted (its BundleDeployments stay, to be deleted one by one)"),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(e).with_context(|| format!("deleting BundleDeploymentSet {name}")),
        }
    }
    Ok(())
}

/// Deletes the CRDs and every cluster-scoped object and the namespace pallet installed.
async fn remove_pallet(client: &Client, args: &UninstallArgs) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in [CRD_NAME, SET_CRD_NAME] {
        if crds.get_opt(crd).await?.is_none() {
            continue;
        }
        crds.delete(crd, &DeleteParams::default()).await?;
        wait_for(args.timeout, "the CRD going away", || {
            let crds = crds.clone();
            async move {
                Ok(crds
                    .get_opt(crd)
                    .await?
                    .map(|_| format!("{crd} still there")))
            }
        })
        .await?;
        tprintln!("CustomResourceDefinition {crd} deleted");
    }
    for (api_version, kind) in [
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        (
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicyBinding",
        ),
        (
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicy",
        ),
    ] {
        let Ok(api) = super::api_for(client, api_version, kind, None).await else {
            continue;
        };
        for object in api.list_metadata(&part_of()).await?.items {
            let name = object.name_any();
            api.delete(&name, &DeleteParams::default()).await?;
            tprintln!("{kind} {name} deleted");
        }
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ours = namespaces
        .get_opt(&args.namespace)
        .await?
        .is_some_and(|ns| ns.labels().get(PART_OF_LABEL).map(String::as_str) == Some("pallet"));
    if ours {
        namespaces
            .delete(&args.namespace, &DeleteParams::default())
            .await?;
        tprintln!("Namespace {} deleted", args.namespace);
    }
    Ok(())
}

/// Runs `pallet uninstall`.
pub fn run(args: UninstallArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    crate::cli::block_on(async {
        let client = args.kube.client().await?;
        // The installation is elsewhere: removing the CRD and the cluster roles from here would
        // delete every BundleDeployment and take that agent's rights.
        if let Some(existing) = super::installed_namespace(&client).await? {
            if existing != args.namespace {
                return Err(usage(format!(
                    "pallet is installed in namespace {existing}, not {}: `pallet uninstall -n {existing}` removes it",
                    args.namespace
                )));
            }
        }
        let crd_installed = version::installed_crd(&client).await?.is_some();
        let bundles = if crd_installed {
            Api::<BundleDeployment>::all(client.clone())
                .list(&ListParams::default())
                .await?
                .items
        } else {
            Vec::new()
        };
        let choice = choose(args.delete_bundles, args.keep_bundles, &bundles).map_err(usage)?;
        match choice {
            BundleChoice::Delete => {
                delete_bundles(&client, &args).await?;
                stop_agents(&client, &args.namespace, args.timeout).await?;
            }
            BundleChoice::Keep => {
                stop_agents(&client, &args.namespace, args.timeout).await?;
                // Read again: the agents may have changed them before they stopped.
                let bundles = if crd_installed {
                    Api::<BundleDeployment>::all(client.clone())
                        .list(&ListParams::default())
                        .await?
                        .items
                } else {
                    Vec::new()
                };
                let api: Api<BundleDeployment> = Api::all(client.clone());
                for bd in &bundles {
                    let kept = orphan(&client, bd).await?;
                    match api.delete(&bd.name_any(), &DeleteParams::default()).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(status)) if status.code == 404 => {}
                        Err(e) => return Err(e.into()),
                    }
                    tprintln!(
                        "BundleDeployment {} deleted; its {kept} objects kept",
                        bd.name_any()
                    );
                }
            }
        }
        remove_pallet(&client, &args).await
    })?;
    tprintln!(
        "pallet uninstalled ({:.1}s)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bd(name: &str, deleting: bool, policy: &str) -> BundleDeployment {
        let deletion = if deleting {
            ", deletionTimestamp: \"2026-01-01T00:00:00Z\""
        } else {
            ""
        };
        serde_saphyr::from_str(&format!(
            "apiVersion: pallet.dev/v1alpha1\nkind: BundleDeployment\nmetadata: {{name: {name}{deletion}}}\n\
             spec: {{format: plain, deletionPolicy: {policy}, sources: [{{kind: git, git: {{repository: r, ref: {{branch: main}}}}}}]}}\n"
        ))
        .unwrap()
    }

    #[test]
    fn keeping_is_the_default_unless_a_deletion_already_asks_otherwise() {
        let quiet = [bd("a", false, "Delete"), bd("b", true, "Orphan")];
        assert_eq!(choose(false, false, &quiet), Ok(BundleChoice::Keep));
        let deleting = [bd("a", false, "Delete"), bd("c", true, "Delete")];
        let refusal = choose(false, false, &deleting).unwrap_err();
        assert!(
            refusal.contains("BundleDeployment c is being deleted"),
            "{refusal}"
        );
        assert!(refusal.contains("--delete-bundles") && refusal.contains("--keep-bundles"));
        assert_eq!(choose(true, false, &deleting), Ok(BundleChoice::Delete));
        assert_eq!(choose(false, true, &deleting), Ok(BundleChoice::Keep));
    }
}
