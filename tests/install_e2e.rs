//! `pallet install`, `check` and `uninstall` on a control plane of the test's own (uninstalling
//! removes the CRD, which the shared control plane's other tests need).
//!
//! The local control plane runs no containers: its fake kubelet reports the agent's Pods
//! running, and a `pallet agent` process of the test stands in for the one in the Pod, with the
//! Pod's name as its identity, as the container would; it is stopped when its Pod is deleted, as
//! the kubelet would stop the container.
//!
//! rbac-pass: skip (tools/test.sh: the deploy/ ServiceAccount lives in the shared cluster only)

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cli.rs"]
mod cli;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/private_control_plane.rs"]
mod private_control_plane;
mod support;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent::{Agent, TEST_LABEL};
use cli::{output_text as text, pallet_as as pallet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::Client;
use private_control_plane::PrivateControlPlane;
use serde_json::json;

const IMAGE: &str =
    "registry.example/pallet@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn pallet_ok(kubeconfig: &Path, args: &[&str]) -> String {
    let out = pallet(kubeconfig, args);
    assert!(out.status.success(), "pallet {args:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The agent's namespace, labelled for the fake kubelet before `pallet install` applies it
/// (install's server-side apply leaves a label another manager set).
async fn agent_namespace(client: &Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    cluster::poll_until("pallet-system gone", Duration::from_secs(120), || {
        let namespaces = namespaces.clone();
        async move {
            match namespaces
                .get_opt("pallet-system")
                .await
                .map_err(|e| e.to_string())?
            {
                Some(ns) if ns.metadata.deletion_timestamp.is_some() => Err("terminating".into()),
                _ => Ok(()),
            }
        }
    })
    .await;
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "pallet-system", "labels": {"pallet.dev/fake-kubelet": "on"}}});
    namespaces
        .patch(
            "pallet-system",
            &PatchParams::apply("pallet-tests"),
            &Patch::Apply(&namespace),
        )
        .await
        .unwrap();
}

/// The agent of the installed Deployment's Pod: a process with the Pod's name as identity,
/// killed once the Pod is gone.
struct PodAgent {
    agent: Arc<Mutex<Agent>>,
    watch: tokio::task::JoinHandle<()>,
}

impl PodAgent {
    async fn start(plane: &PrivateControlPlane, client: &Client, test: &str) -> PodAgent {
        let pods: Api<Pod> = Api::namespaced(client.clone(), "pallet-system");
        let pod = cluster::poll_until("an agent Pod", Duration::from_secs(60), || {
            let pods = pods.clone();
            async move {
                pods.list(&ListParams::default().labels("app.kubernetes.io/name=pallet-agent"))
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .into_iter()
                    .find_map(|p| p.metadata.name)
                    .ok_or_else(|| "no Pod yet".to_string())
            }
        })
        .await;
        let kubeconfig = plane.kubeconfig().to_string_lossy().into_owned();
        let agent = Agent::start_selecting_env(
            &format!("{TEST_LABEL}={test}"),
            &format!("{test}-{pod}"),
            &["--leader-elect", "--lease-duration", "4s"],
            &[
                ("PALLET_TEST_AGENT_KUBECONFIG", kubeconfig.as_str()),
                ("POD_NAME", pod.as_str()),
            ],
        );
        let agent = Arc::new(Mutex::new(agent));
        let stopped = agent.clone();
        let watch = tokio::spawn(async move {
            // The kubelet's part: the container stops with its Pod.
            loop {
                if let Ok(None) = pods.get_opt(&pod).await {
                    stopped.lock().unwrap().kill();
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(client.clone(), "pallet-system");
        cluster::poll_until("the agent leading", Duration::from_secs(60), || {
            let leases = leases.clone();
            async move {
                let lease = leases
                    .get_opt("pallet-agent")
                    .await
                    .map_err(|e| e.to_string())?;
                lease
                    .and_then(|l| l.spec)
                    .and_then(|s| s.holder_identity)
                    .filter(|h| !h.is_empty())
                    .map(|_| ())
                    .ok_or_else(|| "no holder".to_string())
            }
        })
        .await;
        PodAgent { agent, watch }
    }

    fn kill(&self) {
        self.agent.lock().unwrap().kill();
    }
}

impl Drop for PodAgent {
    fn drop(&mut self) {
        self.watch.abort();
        self.agent.lock().unwrap().kill();
    }
}

/// A BundleDeployment of one ConfigMap `name` in namespace `name`, from a git repository.
async fn bundle(client: &Client, test: &str, name: &str) {
    let fixtures = support::Fixtures::load();
    let repo = fixtures.git_repo(&format!("{test}-{name}"));
    repo.commit_files(
        "main",
        &[(
            "app.yaml",
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  v: \"1\"\n"
            )
            .as_bytes(),
        )],
        "v1",
    );
    let spec = json!({
        "installNamespace": name,
        "sources": [{"kind": "git", "git": {"repository": repo.url(fixtures.git_plain()), "ref": {"branch": "main"}}}],
        "format": "plain",
    });
    agent::apply_bd_labelled(client, name, test, spec).await;
}

async fn wait_ready(client: &Client, name: &str) {
    let bds: Api<pallet::api::BundleDeployment> = Api::all(client.clone());
    cluster::poll_until(&format!("{name} Ready"), Duration::from_secs(90), || {
        let bds = bds.clone();
        async move {
            let bd = bds.get(name).await.map_err(|e| e.to_string())?;
            let status = bd.status.unwrap_or_default();
            match pallet::api::conditions::find(&status.conditions, "Ready") {
                Some(c) if c.status == "True" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
}

async fn config_map(client: &Client, name: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(client.clone(), name)
        .get_opt(name)
        .await
        .unwrap()
}

async fn crd_gone(client: &Client) -> bool {
    Api::<CustomResourceDefinition>::all(client.clone())
        .get_opt("bundledeployments.pallet.dev")
        .await
        .unwrap()
        .is_none()
}

/// A second `pallet install` into another namespace is refused with a message naming the
/// installation and how to run another agent beside it, and changes nothing: the cluster-wide
/// binding still names the first agent, the other namespace is not created. Uninstalling from
/// the other namespace is refused too (it would delete the CRD, and every BundleDeployment).
async fn second_installations_are_refused(client: &Client, kubeconfig: &Path) {
    let out = pallet(
        kubeconfig,
        &["install", "-n", "staging", "--image", IMAGE, "--no-wait"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for part in [
        "pallet is already installed in namespace pallet-system (ClusterRoleBinding pallet-agent binds pallet-system/pallet-agent)",
        "installing into staging would bind the cluster-wide roles to a second agent",
        "`pallet install -n pallet-system --shards KEY`",
        "`pallet uninstall -n pallet-system` first",
    ] {
        assert!(stderr.contains(part), "{part:?} not in: {stderr}");
    }
    let binding = Api::<ClusterRoleBinding>::all(client.clone())
        .get("pallet-agent")
        .await
        .unwrap();
    let subjects = binding.subjects.unwrap();
    assert_eq!(subjects.len(), 1);
    assert_eq!(subjects[0].namespace.as_deref(), Some("pallet-system"));
    assert!(Api::<Namespace>::all(client.clone())
        .get_opt("staging")
        .await
        .unwrap()
        .is_none());
    let out = pallet(kubeconfig, &["uninstall", "-n", "staging"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "pallet is installed in namespace pallet-system, not staging: `pallet uninstall -n pallet-system` removes it"
        ),
        "{}",
        text(&out)
    );
    assert!(!crd_gone(client).await);
}

// Two workers: the Pods' watch runs while the test waits for a `pallet` command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_check_then_uninstall_keeping_and_then_deleting_the_bundles() {
    let plane = PrivateControlPlane::start();
    let client = plane.client().await;
    let kubeconfig = plane.kubeconfig();
    let test = support::unique_name("install");

    // Install, and check reports healthy.
    agent_namespace(&client).await;
    let started = Instant::now();
    let out = pallet_ok(
        &kubeconfig,
        &["install", "--image", IMAGE, "--timeout", "3m"],
    );
    let install_time = started.elapsed();
    assert!(
        out.contains("Deployment.apps pallet-system/pallet-agent created")
            || out.contains("pallet-agent created"),
        "{out}"
    );
    assert!(
        out.contains("installed in namespace pallet-system"),
        "{out}"
    );
    let pod_agent = PodAgent::start(&plane, &client, &test).await;
    bundle(&client, &test, &format!("{test}-kept")).await;
    bundle(&client, &test, &format!("{test}-doomed")).await;
    wait_ready(&client, &format!("{test}-kept")).await;
    wait_ready(&client, &format!("{test}-doomed")).await;
    let started = Instant::now();
    let report = pallet_ok(&kubeconfig, &["check"]);
    let check_time = started.elapsed();
    for check in [
        "Kubernetes",
        "CRD",
        "Agent",
        "RBAC",
        "Certificates",
        "Bundles",
    ] {
        assert!(
            report
                .lines()
                .any(|l| l.starts_with(check) && l[13..].starts_with("ok ")),
            "{check} not ok:\n{report}"
        );
    }
    assert!(report.contains("2 BundleDeployments: 2 Ready"), "{report}");
    assert!(report.trim_end().ends_with("healthy"), "{report}");
    let version = pallet_ok(&kubeconfig, &["version"]);
    assert!(
        version.contains(&format!("Agent: {}", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    assert!(
        version.contains(&format!("CRD:   {}", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );

    second_installations_are_refused(&client, &kubeconfig).await;

    // A BundleDeployment already being deleted (its agent gone before finishing) makes keeping
    // every bundle's objects ambiguous: uninstall refuses until told.
    pod_agent.kill();
    let doomed = format!("{test}-doomed");
    Api::<pallet::api::BundleDeployment>::all(client.clone())
        .delete(&doomed, &DeleteParams::default())
        .await
        .unwrap();
    let refused = pallet(&kubeconfig, &["uninstall"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(&format!("BundleDeployment {doomed} is being deleted")),
        "{stderr}"
    );
    assert!(
        !crd_gone(&client).await,
        "a refused uninstall changes nothing"
    );

    let started = Instant::now();
    let out = pallet_ok(
        &kubeconfig,
        &["uninstall", "--keep-bundles", "--timeout", "2m"],
    );
    let uninstall_time = started.elapsed();
    drop(pod_agent);
    assert!(crd_gone(&client).await, "{out}");
    for name in [format!("{test}-kept"), doomed.clone()] {
        let kept = config_map(&client, &name)
            .await
            .unwrap_or_else(|| panic!("{name} was deleted:\n{out}"));
        let labels = kept.metadata.labels.unwrap_or_default();
        assert!(
            !labels.contains_key(pallet::apply::plan::OWNER_LABEL),
            "{name} still carries pallet's label: {labels:?}"
        );
    }
    eprintln!(
        "install {:.1}s, check {:.1}s, uninstall --keep-bundles {:.1}s",
        install_time.as_secs_f64(),
        check_time.as_secs_f64(),
        uninstall_time.as_secs_f64()
    );

    // Again, deleting the bundles: the agent deletes their objects before it is removed.
    agent_namespace(&client).await;
    pallet_ok(
        &kubeconfig,
        &["install", "--image", IMAGE, "--timeout", "3m"],
    );
    let pod_agent = PodAgent::start(&plane, &client, &test).await;
    let gone = format!("{test}-gone");
    bundle(&client, &test, &gone).await;
    wait_ready(&client, &gone).await;
    assert!(config_map(&client, &gone).await.is_some());
    let started = Instant::now();
    let out = pallet_ok(
        &kubeconfig,
        &["uninstall", "--delete-bundles", "--timeout", "2m"],
    );
    eprintln!(
        "uninstall --delete-bundles {:.1}s",
        started.elapsed().as_secs_f64()
    );
    drop(pod_agent);
    assert!(
        out.contains(&format!("BundleDeployment {gone}: deleting its objects")),
        "{out}"
    );
    assert!(
        config_map(&client, &gone).await.is_none(),
        "the bundle's object was deleted:\n{out}"
    );
    assert!(crd_gone(&client).await);
    assert!(
        config_map(&client, &format!("{test}-kept")).await.is_some(),
        "objects kept by the first uninstall are no longer pallet's"
    );
}
