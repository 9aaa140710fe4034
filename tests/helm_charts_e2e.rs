//! End-to-end: real charts from the corpus (`../shared/conformance/helm`) installed by the agent
//! binary on the local control plane from an OCI image source, to Ready, then upgraded with
//! changed values that also change a hook Job's pod template (an immutable field: helm's
//! `before-hook-creation` delete policy is what makes the upgrade work).
//!
//! Pods run through the control plane's fake kubelet (the install namespace is labelled
//! `pallet.dev/fake-kubelet=on`): Deployment and StatefulSet Pods become Ready, hook Jobs' Pods
//! complete. Each chart is its own test so they run in parallel; each uses its own release name
//! and namespace. CRDs are cluster-wide and the same in every run, so these BundleDeployments take
//! over objects a killed earlier run may have left (`collisionProtection: None`).

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "../formats/tests/corpus/mod.rs"]
mod corpus;
mod support;

use std::time::Duration;

use agent::{apply_bd, Agent};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::Client;
use oci_client::secrets::RegistryAuth;
use pallet::api::BundleDeployment;
use serde_json::{json, Value};

/// How long a whole chart may take to become Ready: kube-prometheus-stack applies ~130 objects
/// and waits for CRDs to be established and for a dozen workloads on two shared cores.
const READY_DEADLINE: Duration = Duration::from_secs(300);

struct Upgrade {
    /// Values of the upgrade.
    values: Value,
    /// A Deployment whose replicas the upgrade changes, and the count.
    deployment: String,
    replicas: i32,
    /// The end of the name of a hook Job the upgrade re-creates with a changed pod template (it
    /// carries `pallet.dev/upgraded: "yes"` in its pod annotations), for charts with upgrade
    /// hooks. (Charts truncate names built from the release name, so the end is what is known.)
    hook_job: Option<&'static str>,
}

/// The pod annotation upgrades put on hook Jobs.
const UPGRADED: (&str, &str) = ("pallet.dev/upgraded", "yes");

async fn create_namespace(client: &Client, name: &str) {
    let ns: Api<Namespace> = Api::all(client.clone());
    ns.patch(
        name,
        &PatchParams::apply(cluster::TEST_FIELD_MANAGER),
        &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"pallet.dev/fake-kubelet": "on"}},
        })),
    )
    .await
    .expect("namespace");
}

/// Polls until the BundleDeployment is Ready with an active revision rendered for `generation`
/// of its spec, printing the last conditions on timeout. (Not a revision number: a chart whose
/// templates `lookup` objects its own install creates renders differently once they exist, as
/// `helm upgrade` would, and may make a second revision of the same spec right after install.)
async fn wait_ready(
    client: &Client,
    agent: &Agent,
    name: &str,
    generation: i64,
) -> BundleDeployment {
    let api: Api<BundleDeployment> = Api::all(client.clone());
    let start = std::time::Instant::now();
    loop {
        let bd = api.get(name).await.expect("get bd");
        let status = bd.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let active_generation = status
            .revisions
            .iter()
            .find(|r| Some(r.number) == status.active_revision)
            .map(|r| r.generation);
        if ready && active_generation == Some(generation) {
            return bd;
        }
        if start.elapsed() > READY_DEADLINE {
            panic!(
                "{name}: not Ready for generation {generation} after {READY_DEADLINE:?}; status: {}\nagent log:\n{}",
                serde_json::to_string_pretty(&status).unwrap_or_default(),
                agent.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Installs `chart` with `values`, waits for Ready, upgrades with `upgrade`, waits for the new
/// revision to be Ready, and checks the upgrade reached the objects (hook Job included).
async fn install_and_upgrade(chart: &str, values: Value, upgrade: Upgrade) {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let registry = fx.registry_plain();
    let name = support::unique_name(&chart.chars().take(8).collect::<String>());
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = corpus::chart_dir(&corpus::corpus(), chart, scratch.path());
    fx.push_dir_as_image(registry, &name, "v1", &dir, &RegistryAuth::Anonymous)
        .await
        .expect("push chart image");
    create_namespace(&client, &name).await;
    let agent = Agent::start_with(&name, &["--plain-http-registry", &registry.host]);
    let spec = |values: &Value| {
        json!({
            "installNamespace": name,
            "format": "helm",
            "collisionProtection": "None",
            "rollout": {"progressDeadline": "4m"},
            "sources": [{"kind": "image", "image": {"ref": format!("{}/{name}:v1", registry.host)}}],
            "config": {"helm": {"releaseName": name, "values": values}},
        })
    };
    apply_bd(&client, &name, spec(&values)).await;
    wait_ready(&client, &agent, &name, 1).await;

    // Object names derive from the release name, which is the test's unique name.
    let deployment_name = upgrade.deployment.replace("NAME", &name);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &name);
    let hook_job = upgrade.hook_job.map(|suffix| {
        agent
            .change_entries()
            .iter()
            .filter(|e| e["object"]["kind"] == "Job" && e["operation"] == "create")
            .filter_map(|e| e["object"]["name"].as_str().map(str::to_string))
            .find(|n| n.ends_with(suffix))
            .unwrap_or_else(|| panic!("{chart}: no hook Job *{suffix} created on install"))
    });
    let hook_uid_before = match &hook_job {
        Some(job) => jobs
            .get_opt(job)
            .await
            .expect("get hook job")
            .and_then(|j| j.metadata.uid),
        None => None,
    };
    apply_bd(&client, &name, spec(&upgrade.values)).await;
    wait_ready(&client, &agent, &name, 2).await;

    let deployment: Deployment = Api::namespaced(client.clone(), &name)
        .get(&deployment_name)
        .await
        .expect("deployment");
    assert_eq!(
        deployment.spec.and_then(|s| s.replicas),
        Some(upgrade.replicas),
        "{chart}: the upgraded values reach {deployment_name}"
    );
    if let Some(hook_job) = &hook_job {
        check_hook_rerun(chart, &agent, &jobs, hook_job, hook_uid_before).await;
    }

    Api::<BundleDeployment>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete bd");
    agent::wait_bd_gone(&client, &name).await;
    drop(agent);
    remove_kept_crds(&client, &name).await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await;
}

/// The CRDs a chart marks `helm.sh/resource-policy: keep` (cert-manager's) outlive the
/// BundleDeployment, as `helm uninstall` leaves them, without pallet's label; the test then
/// deletes them itself, so that later tests do not find cert-manager's API served.
async fn remove_kept_crds(client: &Client, bundle_deployment: &str) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds
        .list(&Default::default())
        .await
        .expect("list CRDs")
        .items
    {
        let meta = &crd.metadata;
        let kept = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get("helm.sh/resource-policy"))
            .is_some_and(|p| p == "keep");
        let release = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get("meta.helm.sh/release-name"))
            .is_some_and(|r| r == bundle_deployment)
            || meta
                .labels
                .as_ref()
                .and_then(|l| l.get("app.kubernetes.io/instance"))
                .is_some_and(|i| i == bundle_deployment);
        if kept && release {
            assert!(
                meta.labels
                    .as_ref()
                    .is_none_or(|l| !l.contains_key("pallet.dev/bundle-deployment")),
                "a kept CRD no longer carries pallet's label: {:?}",
                meta.name
            );
            let _ = crds
                .delete(
                    meta.name.as_deref().unwrap_or_default(),
                    &DeleteParams::default(),
                )
                .await;
        }
    }
}

/// The hook ran again with the new template: a new Job object with the upgraded pod template, or
/// none left when its delete policy removed it once it succeeded (then the change log shows it
/// was created on install and again on upgrade).
async fn check_hook_rerun(
    chart: &str,
    agent: &Agent,
    jobs: &Api<Job>,
    hook_job: &str,
    uid_before: Option<String>,
) {
    match jobs.get_opt(hook_job).await.expect("get hook job") {
        Some(job) => {
            assert_ne!(job.metadata.uid, uid_before, "{chart}: hook Job re-created");
            let annotations = job
                .spec
                .and_then(|s| s.template.metadata)
                .and_then(|m| m.annotations)
                .unwrap_or_default();
            assert_eq!(
                annotations.get(UPGRADED.0).map(String::as_str),
                Some(UPGRADED.1),
                "{chart}: the hook Job runs the upgraded template"
            );
        }
        None => {
            let created = agent
                .change_entries()
                .iter()
                .filter(|e| {
                    e["object"]["kind"] == "Job"
                        && e["object"]["name"] == hook_job
                        && e["operation"] == "create"
                })
                .count();
            assert!(
                created >= 2,
                "{chart}: hook Job {hook_job} created on install and upgrade (change log: {created})"
            );
        }
    }
}

#[tokio::test]
async fn ingress_nginx_installs_and_upgrades_with_its_admission_hook_jobs() {
    // The local control plane has no load-balancer controller (like kind or bare metal), and a
    // LoadBalancer Service is healthy only with an address: use a ClusterIP Service.
    let service = json!({"type": "ClusterIP"});
    install_and_upgrade(
        "ingress-nginx",
        json!({"controller": {"service": service}}),
        Upgrade {
            values: json!({"controller": {
                "service": service,
                "replicaCount": 2,
                "admissionWebhooks": {"patch": {"podAnnotations": {"pallet.dev/upgraded": "yes"}}},
            }}),
            deployment: "NAME-ingress-nginx-controller".into(),
            replicas: 2,
            hook_job: Some("-admission-create"),
        },
    )
    .await;
}

#[tokio::test]
async fn cert_manager_installs_with_its_crds_and_upgrades() {
    install_and_upgrade(
        "cert-manager",
        json!({"crds": {"enabled": true}}),
        Upgrade {
            values: json!({"crds": {"enabled": true}, "replicaCount": 2}),
            deployment: "NAME-cert-manager".into(),
            replicas: 2,
            // Its only hook (startupapicheck) runs on install, not on upgrade.
            hook_job: None,
        },
    )
    .await;
}

#[tokio::test]
async fn kube_prometheus_stack_installs_and_upgrades_with_its_admission_hook_jobs() {
    install_and_upgrade(
        "kube-prometheus-stack",
        json!({}),
        Upgrade {
            values: json!({
                "grafana": {"replicas": 2},
                "prometheusOperator": {"admissionWebhooks": {"patch": {"podAnnotations": {"pallet.dev/upgraded": "yes"}}}},
            }),
            deployment: "NAME-grafana".into(),
            replicas: 2,
            hook_job: Some("-admission-create"),
        },
    )
    .await;
}

#[tokio::test]
async fn argo_cd_installs_and_upgrades_with_its_redis_secret_hook_job() {
    install_and_upgrade(
        "argo-cd",
        json!({}),
        Upgrade {
            values: json!({
                "server": {"replicas": 2},
                "redisSecretInit": {"podAnnotations": {"pallet.dev/upgraded": "yes"}},
            }),
            deployment: "NAME-argocd-server".into(),
            replicas: 2,
            hook_job: Some("-redis-secret-init"),
        },
    )
    .await;
}

#[tokio::test]
async fn bitnami_nginx_installs_and_upgrades() {
    // No load-balancer controller here (see ingress-nginx): a ClusterIP Service.
    install_and_upgrade(
        "nginx",
        json!({"service": {"type": "ClusterIP"}}),
        Upgrade {
            values: json!({"service": {"type": "ClusterIP"}, "replicaCount": 2}),
            // bitnami's fullname is the release name when that contains the chart's name.
            deployment: "NAME".into(),
            replicas: 2,
            hook_job: None,
        },
    )
    .await;
}
