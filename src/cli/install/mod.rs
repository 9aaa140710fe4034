//! `pallet install`: applies the release manifests (see [`manifests`]) with server-side apply
//! and waits until the CRD is established and every agent is available; `--export` prints them
//! instead. Applying again upgrades in place.

pub mod check;
pub mod manifests;
pub mod uninstall;
pub mod version;

use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::Client;
use pallet_formats::Object;
use serde_json::Value;

use super::KubeArgs;
use crate::health::{self, pods};
use manifests::{ManifestOptions, DEFAULT_NAMESPACE};

/// Field manager of `pallet install`'s writes.
pub const INSTALL_FIELD_MANAGER: &str = "pallet-install";

/// The label every installed object carries.
pub const PART_OF_LABEL: &str = "app.kubernetes.io/part-of";

/// The image a release binary installs by default (set when the release is built).
pub fn release_image() -> Option<&'static str> {
    option_env!("PALLET_RELEASE_IMAGE").filter(|image| !image.is_empty())
}

/// Flags of `pallet install`.
#[derive(Args, Debug)]
pub struct InstallArgs {
    /// The agent's image (`registry/pallet:tag` or, better, `registry/pallet@sha256:…`). Default:
    /// the image this release was built with.
    #[arg(long, value_name = "REF")]
    pub image: Option<String>,
    /// The agent's namespace.
    #[arg(short = 'n', long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// Also run one agent per shard key (comma-separated or repeated; see "High availability
    /// and sharding" in the docs). The main agent leaves BundleDeployments labelled
    /// sharding.fluxcd.io/key alone.
    #[arg(long, value_name = "KEY", value_delimiter = ',')]
    pub shards: Vec<String>,
    /// Without the broad grant: the agent reads every kind but writes only as each
    /// BundleDeployment's spec.serviceAccount, which becomes required.
    #[arg(long)]
    pub least_privilege: bool,
    /// Print the manifests (YAML) instead of applying them; needs no cluster.
    #[arg(long)]
    pub export: bool,
    /// Return once applied, without waiting for the agents to become available.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for the agents (`90s`, `5m`; a bare number is seconds).
    #[arg(long, default_value = "5m", value_parser = crate::duration::parse_arg)]
    pub timeout: Duration,
    /// Cluster.
    #[command(flatten)]
    pub kube: KubeArgs,
}

impl InstallArgs {
    fn manifest_options(&self) -> anyhow::Result<ManifestOptions> {
        let image = match (&self.image, release_image()) {
            (Some(image), _) => image.clone(),
            (None, Some(image)) => image.to_string(),
            (None, None) => {
                return Err(super::exit::usage(
                    "--image is required: this build of pallet names no release image \
                     (tools/release.sh builds and pushes one and prints its reference)",
                ))
            }
        };
        Ok(ManifestOptions {
            image,
            namespace: self.namespace.clone(),
            shards: self.shards.clone(),
            least_privilege: self.least_privilege,
        })
    }
}

/// The API of `object`'s kind, in its namespace when namespaced.
pub(crate) async fn api_for(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
) -> anyhow::Result<Api<DynamicObject>> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("the cluster does not serve {api_version} {kind}"))?;
    Ok(match (caps.scope, namespace) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &resource),
        _ => Api::all_with(client.clone(), &resource),
    })
}

/// Server-side applies `object`; says whether it was created, configured or unchanged.
async fn apply(client: &Client, object: &Object) -> anyhow::Result<&'static str> {
    let api = api_for(
        client,
        object.api_version(),
        object.kind(),
        object.namespace(),
    )
    .await?;
    let before = api.get_opt(object.name()).await?;
    let params = PatchParams::apply(INSTALL_FIELD_MANAGER).force();
    let body = Value::Object(object.body().clone());
    let after = api
        .patch(object.name(), &params, &Patch::Apply(&body))
        .await
        .with_context(|| format!("applying {}", object.key()))?;
    Ok(match before {
        None => "created",
        Some(before) if before.metadata.resource_version == after.metadata.resource_version => {
            "unchanged"
        }
        Some(_) => "configured",
    })
}

/// Why the Deployment `name` is not available yet, with its Pods' problems; `None` once it is.
pub(crate) async fn deployment_not_ready(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Option<String>> {
    let api = api_for(client, "apps/v1", "Deployment", Some(namespace)).await?;
    let Some(live) = api.get_opt(name).await? else {
        return Ok(Some("not found".into()));
    };
    let live = serde_json::to_value(&live)?;
    let assessed = health::assess(&live, &health::HealthOptions::default());
    if assessed.is_healthy() {
        return Ok(None);
    }
    let mut pod_list = Vec::new();
    if let Some(selector) = pods::pod_selector(&live) {
        let list = Api::<Pod>::namespaced(client.clone(), namespace)
            .list(&ListParams::default().labels(&selector))
            .await?;
        for pod in &list.items {
            pod_list.push(serde_json::to_value(pod)?);
        }
    }
    Ok(Some(pods::with_pod_problems(assessed, &pod_list).message))
}

/// Waits until the CRD is established and every Deployment among `objects` is available.
async fn wait_ready(client: &Client, objects: &[Object], timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut waiting = Vec::new();
        for object in objects {
            match (object.group(), object.kind()) {
                ("apiextensions.k8s.io", "CustomResourceDefinition") => {
                    let api = api_for(client, object.api_version(), object.kind(), None).await?;
                    let live = api.get_opt(object.name()).await?;
                    let health = live
                        .map(|l| serde_json::to_value(&l).unwrap_or(Value::Null))
                        .map(|l| health::assess(&l, &health::HealthOptions::default()));
                    if !health.as_ref().is_some_and(health::Health::is_healthy) {
                        waiting.push(format!(
                            "CRD {}: {}",
                            object.name(),
                            health
                                .map(|h| h.message)
                                .unwrap_or_else(|| "not found".into())
                        ));
                    }
                }
                ("apps", "Deployment") => {
                    let namespace = object.namespace().unwrap_or(DEFAULT_NAMESPACE);
                    if let Some(why) =
                        deployment_not_ready(client, namespace, object.name()).await?
                    {
                        waiting.push(format!("Deployment {namespace}/{}: {why}", object.name()));
                    }
                }
                _ => {}
            }
        }
        if waiting.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(super::exit::timed_out(format!(
                "not ready after {}s: {}",
                timeout.as_secs(),
                waiting.join("; ")
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The name of the ClusterRoleBinding every installation has (deploy/rbac.yaml), binding the
/// agent's cluster-wide rules to its ServiceAccount.
const AGENT_BINDING: &str = "pallet-agent";

/// The namespace of the installation in the cluster: the one of the ServiceAccount its
/// ClusterRoleBinding `pallet-agent` binds. None when pallet is not installed.
pub(crate) async fn installed_namespace(client: &Client) -> anyhow::Result<Option<String>> {
    let binding = Api::<ClusterRoleBinding>::all(client.clone())
        .get_opt(AGENT_BINDING)
        .await
        .with_context(|| format!("reading ClusterRoleBinding {AGENT_BINDING}"))?;
    Ok(binding
        .and_then(|b| b.subjects)
        .into_iter()
        .flatten()
        .find(|s| s.kind == "ServiceAccount" && s.name == manifests::AGENT_NAME)
        .and_then(|s| s.namespace))
}

/// Why installing into `namespace` is refused when the cluster's installation is in `existing`:
/// a second one would take the cluster-wide bindings (and the CRD and admission policy, which
/// are the cluster's) from the first, and two agents would fight over every BundleDeployment.
pub(crate) fn second_installation(existing: &str, namespace: &str) -> String {
    format!(
        "pallet is already installed in namespace {existing} (ClusterRoleBinding \
         {AGENT_BINDING} binds {existing}/{agent}); installing into {namespace} would bind the \
         cluster-wide roles to a second agent, take them from the first, and have both reconcile \
         the same BundleDeployments. A cluster holds one installation (the CRD, the admission \
         policy and the cluster roles are the cluster's). To run another agent beside it, add a \
         shard to that installation: `pallet install -n {existing} --shards KEY` (with the flags \
         it was installed with) runs an agent that reconciles only the BundleDeployments labelled \
         sharding.fluxcd.io/key=KEY, which the main agent leaves alone. To move it, `pallet \
         uninstall -n {existing}` first (the bundles' objects are kept)",
        agent = manifests::AGENT_NAME,
    )
}

/// Runs `pallet install`.
pub fn run(args: InstallArgs) -> anyhow::Result<()> {
    let options = args.manifest_options()?;
    let objects = manifests::manifests(&options)?;
    if args.export {
        return super::write_stdout(&manifests::to_yaml(&objects)?);
    }
    let started = Instant::now();
    super::block_on(async {
        let client = args.kube.client().await?;
        if let Some(existing) = installed_namespace(&client).await? {
            if existing != options.namespace {
                return Err(super::exit::usage(second_installation(
                    &existing,
                    &options.namespace,
                )));
            }
        }
        for object in &objects {
            let outcome = apply(&client, object).await?;
            tprintln!("{} {outcome}", object.key());
        }
        if args.no_wait {
            return Ok(());
        }
        tprintln!(
            "waiting for the CRD and the agents (at most {}s)",
            args.timeout.as_secs()
        );
        wait_ready(&client, &objects, args.timeout).await
    })?;
    tprintln!(
        "pallet {} installed in namespace {} ({:.1}s); `pallet check` reports on it",
        env!("CARGO_PKG_VERSION"),
        options.namespace,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
