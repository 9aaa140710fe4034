//! End-to-end: a registry-v1 bundle with validating, mutating and conversion webhooks
//! (webhook-operator v0.0.5 from the conformance data) installed by the agent binary on the
//! local control plane with the BuiltIn certificate provider; and the CertManager provider on a
//! cluster without cert-manager.
//!
//! The agent runs with `--webhook-cert-validity 60s` (a hidden flag for tests), so its
//! certificates are renewed 40 s after they are issued, while the test watches.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/kubelet.rs"]
mod kubelet;
mod support;
#[path = "support/test_webhook.rs"]
mod test_webhook;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agent::{apply_bd, wait_condition, Agent};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::Client;
use pallet::api::BundleDeployment;
use serde_json::json;

const CONVERSION_CRD: &str = "webhooktests.webhook.operators.coreos.io";
const SERVICE: &str = "webhook-operator-controller-manager-service";
const SERVING_SECRET: &str = "webhook-operator-controller-manager-service-cert";

fn webhook_bundle() -> PathBuf {
    let dir = std::env::var_os("PALLET_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../shared/conformance/registry-v1"
            ))
        })
        .join("webhook-operator.v0.0.5");
    assert!(
        dir.is_dir(),
        "the conformance bundle is missing at {} (shared/ beside the repo, or PALLET_CONFORMANCE_DIR)",
        dir.display()
    );
    dir
}

/// Publishes the bundle as a tarball on the fixture HTTP server; returns the source.
fn publish(fx: &support::Fixtures, name: &str, dir: &Path) -> serde_json::Value {
    let work = tempfile::tempdir().unwrap();
    let tarball = work.path().join("bundle.tgz");
    let status = Command::new("tar")
        .arg("-czf")
        .arg(&tarball)
        .arg("-C")
        .arg(dir)
        .arg(".")
        .status()
        .unwrap();
    assert!(status.success());
    let path = fx.put_file(
        &format!("{name}/bundle.tgz"),
        &std::fs::read(&tarball).unwrap(),
    );
    json!({"kind": "http", "http": {"url": fx.http_plain().url_for(&path)}})
}

async fn delete_bd(client: &Client, name: &str) {
    Api::<BundleDeployment>::all(client.clone())
        .delete(name, &Default::default())
        .await
        .unwrap();
    agent::wait_bd_gone(client, name).await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &Default::default())
        .await;
}

fn secret_text(secret: &Secret, key: &str) -> String {
    String::from_utf8(secret.data.as_ref().unwrap()[key].0.clone()).unwrap()
}

/// `openssl verify`: `serving` chains to `ca_bundle`, is a TLS server certificate, and holds
/// `host`. Returns openssl's output on failure.
fn openssl_verifies(ca_bundle: &str, serving: &str, host: &str) -> Result<(), String> {
    let work = tempfile::tempdir().unwrap();
    let ca = work.path().join("ca.pem");
    let cert = work.path().join("tls.crt");
    std::fs::write(&ca, ca_bundle).unwrap();
    std::fs::write(&cert, serving).unwrap();
    let out = Command::new("openssl")
        .arg("verify")
        .arg("-CAfile")
        .arg(&ca)
        .args(["-purpose", "sslserver", "-verify_hostname", host])
        .arg(&cert)
        .output()
        .expect("openssl runs");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The caBundle of the three webhook client configs, decoded, once they all hold the same one
/// (an apply in progress may have updated some of them only).
async fn injected_bundle(client: &Client) -> Result<String, String> {
    let validating: ValidatingWebhookConfiguration = Api::all(client.clone())
        .get("vwebhooktest-v1.kb.io")
        .await
        .map_err(|e| e.to_string())?;
    let mutating: MutatingWebhookConfiguration = Api::all(client.clone())
        .get("mwebhooktest-v1.kb.io")
        .await
        .map_err(|e| e.to_string())?;
    let crd: CustomResourceDefinition = Api::all(client.clone())
        .get(CONVERSION_CRD)
        .await
        .map_err(|e| e.to_string())?;
    let bundles = [
        validating.webhooks.unwrap_or_default()[0]
            .client_config
            .ca_bundle
            .clone(),
        mutating.webhooks.unwrap_or_default()[0]
            .client_config
            .ca_bundle
            .clone(),
        crd.spec
            .conversion
            .and_then(|c| c.webhook)
            .and_then(|w| w.client_config)
            .and_then(|c| c.ca_bundle),
    ];
    let first = bundles[0]
        .clone()
        .ok_or("the validating webhook has no caBundle")?;
    if bundles.iter().any(|b| b.as_ref() != Some(&first)) {
        return Err("the three caBundles differ".into());
    }
    String::from_utf8(first.0).map_err(|e| e.to_string())
}

/// Applies the BundleDeployment and checks its `config.registryV1` was kept. On a shared local
/// control plane another checkout may have installed its own CRD, without these fields, which
/// the API server would silently prune: the CRD is installed again until the field sticks.
async fn apply_registry_v1_bd(client: &Client, name: &str, spec: serde_json::Value) {
    let field = spec["config"]["registryV1"]
        .as_object()
        .and_then(|config| config.keys().next().cloned())
        .expect("the spec sets config.registryV1");
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    cluster::poll_until(
        "config.registryV1 to be kept (this checkout's CRD installed)",
        Duration::from_secs(30),
        || {
            let (client, bds, spec, field) =
                (client.clone(), bds.clone(), spec.clone(), field.clone());
            let name = name.to_string();
            async move {
                cluster::install_crd(&client).await;
                apply_bd(&client, &name, spec).await;
                let stored = bds.get(&name).await.map_err(|e| e.to_string())?;
                let kept = serde_json::to_value(&stored.spec).map_err(|e| e.to_string())?;
                match kept["config"]["registryV1"].get(&field) {
                    Some(_) => Ok(()),
                    None => Err(format!(
                        "config.registryV1.{field} was pruned: the cluster's CRD lacks it"
                    )),
                }
            }
        },
    )
    .await;
}

async fn active_revision(client: &Client, name: &str) -> Option<i64> {
    Api::<BundleDeployment>::all(client.clone())
        .get(name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.active_revision)
}

#[tokio::test]
async fn builtin_provider_installs_webhooks_with_a_verifying_ca_bundle_and_renews_it() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let name = support::unique_name("olm-webhooks");
    let source = publish(fx, &name, &webhook_bundle());
    let agent = Agent::start_with(&name, &["--webhook-cert-validity", "60s"]);
    let _kubelet = kubelet::FakeKubelet::start(&client, &name, &["*"]);
    // collisionProtection None: the conversion CRD is cluster-wide (see formats_e2e).
    apply_registry_v1_bd(
        &client,
        &name,
        // The provider is left to its default (BuiltIn); a deploymentConfig rides along.
        json!({"installNamespace": name, "sources": [source], "format": "registry-v1",
               "collisionProtection": "None",
               "config": {"registryV1": {"deploymentConfig": {
                   "env": [{"name": "LOG_LEVEL", "value": "debug"}],
                   "annotations": {"team": "platform"}}}}}),
    )
    .await;
    wait_condition(&client, &agent, &name, "Ready", "True", "objects").await;
    let issued_at = std::time::Instant::now();

    // The serving certificate verifies against the injected caBundle, for the Service's name.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &name);
    let serving = secrets.get(SERVING_SECRET).await.unwrap();
    assert_eq!(serving.type_.as_deref(), Some("kubernetes.io/tls"));
    let bundle = cluster::poll_until("one caBundle everywhere", Duration::from_secs(30), || {
        injected_bundle(&client)
    })
    .await;
    openssl_verifies(
        &bundle,
        &secret_text(&serving, "tls.crt"),
        &format!("{SERVICE}.{name}.svc"),
    )
    .unwrap();
    assert!(
        openssl_verifies(&bundle, &secret_text(&serving, "tls.crt"), "other.example").is_err(),
        "the hostname check is real"
    );
    // The Deployment mounts that Secret where controller-runtime looks for it.
    let deployment: Deployment = Api::namespaced(client.clone(), &name)
        .get("webhook-operator-controller-manager")
        .await
        .unwrap();
    assert_eq!(
        deployment.metadata.annotations.as_ref().unwrap()["team"],
        "platform",
        "deploymentConfig.annotations"
    );
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    assert!(
        pod.containers[0]
            .env
            .as_ref()
            .unwrap()
            .iter()
            .any(|e| e.name == "LOG_LEVEL" && e.value.as_deref() == Some("debug")),
        "deploymentConfig.env"
    );
    let volumes = pod.volumes.unwrap();
    let cert_volume = volumes.iter().find(|v| v.name == "webhook-cert").unwrap();
    assert_eq!(
        cert_volume.secret.as_ref().unwrap().secret_name.as_deref(),
        Some(SERVING_SECRET)
    );
    // The conversion webhook's CRD is Established.
    let crd: CustomResourceDefinition = Api::all(client.clone()).get(CONVERSION_CRD).await.unwrap();
    let established = crd
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    assert!(established, "{CONVERSION_CRD} is Established");

    // Another pass, asked for explicitly, writes nothing: no change-log line, no Secret
    // rewritten, no new revision.
    let revision = active_revision(&client, &name).await;
    let changes_before = agent.change_entries().len();
    let ca_secret = format!("{name}-pallet-webhook-ca");
    let ca_version = secrets
        .get(&ca_secret)
        .await
        .unwrap()
        .metadata
        .resource_version;
    let serving_version = serving.metadata.resource_version.clone();
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let request =
        json!({"metadata": {"annotations": {"pallet.dev/requested-reconcile": "again-1"}}});
    bds.patch(&name, &PatchParams::default(), &Patch::Merge(&request))
        .await
        .unwrap();
    cluster::poll_until("the requested reconcile", Duration::from_secs(30), || {
        let (bds, name) = (bds.clone(), name.clone());
        async move {
            let bd = bds.get(&name).await.map_err(|e| e.to_string())?;
            let handled = bd.status.and_then(|s| s.last_handled_reconcile);
            (handled.as_deref() == Some("again-1"))
                .then_some(())
                .ok_or(format!("lastHandledReconcile {handled:?}"))
        }
    })
    .await;
    assert!(
        issued_at.elapsed() < Duration::from_secs(35),
        "still before the renewal window; the checks below would not be meaningful"
    );
    assert_eq!(
        agent.change_entries().len(),
        changes_before,
        "no writes: {:?}",
        &agent.change_entries()[changes_before..]
    );
    assert_eq!(
        secrets
            .get(&ca_secret)
            .await
            .unwrap()
            .metadata
            .resource_version,
        ca_version
    );
    assert_eq!(
        secrets
            .get(SERVING_SECRET)
            .await
            .unwrap()
            .metadata
            .resource_version,
        serving_version
    );
    assert_eq!(active_revision(&client, &name).await, revision);

    // Renewal: 40 s after issue (a third of 60 s left) the agent issues a new CA and serving
    // certificate; the caBundle holds both CAs, a new revision applies it, and the new serving
    // certificate verifies. The webhook configurations are the apply's last stage and the
    // status records the revision after the apply, so the poll waits for both.
    let renewed = cluster::poll_until(
        "the certificates to be renewed by a new revision",
        Duration::from_secs(90),
        || {
            let (client, old, name) = (client.clone(), bundle.clone(), name.clone());
            async move {
                let bundle = injected_bundle(&client).await?;
                if bundle == old {
                    return Err("caBundle unchanged".to_string());
                }
                let active = active_revision(&client, &name).await;
                if active <= revision {
                    return Err(format!(
                        "caBundle renewed, activeRevision still {active:?} (was {revision:?})"
                    ));
                }
                Ok(bundle)
            }
        },
    )
    .await;
    assert!(
        renewed.ends_with(&bundle),
        "the previous CA stays in the bundle after the new one"
    );
    let serving = secrets.get(SERVING_SECRET).await.unwrap();
    assert_ne!(serving.metadata.resource_version, serving_version);
    openssl_verifies(
        &renewed,
        &secret_text(&serving, "tls.crt"),
        &format!("{SERVICE}.{name}.svc"),
    )
    .unwrap();
    let reasons: Vec<String> = agent
        .change_entries()
        .iter()
        .filter(|e| e["object"]["kind"] == "Secret")
        .map(|e| format!("{} {}", e["operation"], e["reason"]))
        .collect();
    assert!(
        reasons.iter().filter(|r| r.contains("certificate")).count() >= 4,
        "two issues and two renewals in the change log: {reasons:?}"
    );

    api_server_calls_the_webhooks(&client, &name, &serving).await;

    // deletionPolicy Orphan: the certificate Secrets stay with the orphaned operator (their
    // owner reference, which would let the garbage collector take them, is removed).
    let orphan = json!({"spec": {"deletionPolicy": "Orphan"}});
    bds.patch(&name, &PatchParams::default(), &Patch::Merge(&orphan))
        .await
        .unwrap();
    cluster::poll_until(
        "the Orphan policy to be seen",
        Duration::from_secs(30),
        || {
            let (bds, name) = (bds.clone(), name.clone());
            async move {
                let bd = bds.get(&name).await.map_err(|e| e.to_string())?;
                let observed = bd.status.and_then(|s| s.observed_generation);
                (observed == bd.metadata.generation)
                    .then_some(())
                    .ok_or(format!("observedGeneration {observed:?}"))
            }
        },
    )
    .await;
    let inventory = bds
        .get(&name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.inventory)
        .map(|i| i.objects)
        .unwrap_or_default();
    bds.delete(&name, &Default::default()).await.unwrap();
    agent::wait_bd_gone(&client, &name).await;
    for secret in [SERVING_SECRET.to_string(), ca_secret.clone()] {
        let kept = Api::<Secret>::namespaced(client.clone(), &name)
            .get(&secret)
            .await
            .unwrap_or_else(|e| panic!("{secret} kept: {e}"));
        assert!(
            kept.metadata
                .owner_references
                .unwrap_or_default()
                .is_empty(),
            "{secret} no longer owned by the BundleDeployment"
        );
    }
    // The orphans are this test's to remove: the namespace (with what is in it) and the
    // cluster-scoped objects of the inventory (CRD, webhook configurations, cluster RBAC).
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&name, &Default::default())
        .await;
    for object in inventory.iter().filter(|o| o.namespace.is_empty()) {
        let gvk = kube::core::GroupVersionKind::gvk(&object.group, &object.version, &object.kind);
        if let Ok((resource, _)) = kube::discovery::pinned_kind(&client, &gvk).await {
            let _ = Api::<DynamicObject>::all_with(client.clone(), &resource)
                .delete(&object.name, &Default::default())
                .await;
        }
    }
}

/// The API server calls the rendered webhooks, verifying the test server's (renewed) serving
/// certificate against the injected caBundle under the Service's DNS name.
///
/// The network path is the one substitution: the local control plane has no kube-proxy, so a
/// ClusterIP leads nowhere. The webhook Service is switched to `type: ExternalName` with
/// `externalName: localhost` (the API server resolves such a Service to that host, at the
/// Service's port 443), and this test process serves on 127.0.0.1:443 in place of the operator
/// Pod. pallet does not manage the Service's type, so it leaves this alone. Everything else is
/// as rendered: the client configs (Service name, namespace, path, port), the caBundle, and the
/// TLS server name `<service>.<namespace>.svc` the API server checks the certificate for.
async fn api_server_calls_the_webhooks(client: &Client, namespace: &str, serving: &Secret) {
    let server = test_webhook::TestWebhook::serve(
        "127.0.0.1:443",
        &secret_text(serving, "tls.crt"),
        &secret_text(serving, "tls.key"),
    )
    .expect("serve on 127.0.0.1:443 (the webhook Service's port; needs root)");
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let external = json!({"spec": {"type": "ExternalName", "externalName": "localhost",
        "clusterIP": null, "clusterIPs": null, "ipFamilies": null, "ipFamilyPolicy": null}});
    services
        .patch(SERVICE, &PatchParams::default(), &Patch::Merge(&external))
        .await
        .unwrap();
    let resource = ApiResource {
        group: "webhook.operators.coreos.io".into(),
        version: "v1".into(),
        api_version: "webhook.operators.coreos.io/v1".into(),
        kind: "WebhookTest".into(),
        plural: "webhooktests".into(),
    };
    let tests: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let object = |name: &str| -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "webhook.operators.coreos.io/v1",
            "kind": "WebhookTest", "metadata": {"name": name}, "spec": {"valid": true}}))
        .unwrap()
    };
    // Refused by the validating webhook (polled: the API server's view of the Service follows
    // the patch a moment later).
    let refusal = cluster::poll_until(
        "the validating webhook to refuse reject-me",
        Duration::from_secs(30),
        || {
            let (tests, object) = (tests.clone(), object("reject-me"));
            async move {
                match tests.create(&PostParams::default(), &object).await {
                    Ok(_) => Err("reject-me was admitted".to_string()),
                    Err(e) if e.to_string().contains(test_webhook::REJECTION) => Ok(e.to_string()),
                    Err(e) => Err(e.to_string()),
                }
            }
        },
    )
    .await;
    assert!(refusal.contains("vwebhooktest-v1.kb.io"), "{refusal}");
    tests
        .create(&PostParams::default(), &object("accept-me"))
        .await
        .expect("admitted by both webhooks");
    // Read as v2: the API server asks the conversion webhook.
    let v2 = ApiResource {
        version: "v2".into(),
        api_version: "webhook.operators.coreos.io/v2".into(),
        ..resource.clone()
    };
    let converted = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &v2)
        .get("accept-me")
        .await
        .expect("converted to v2 by the conversion webhook");
    assert_eq!(
        converted.types.map(|t| t.api_version).as_deref(),
        Some("webhook.operators.coreos.io/v2")
    );
    let calls = server.calls();
    for path in [
        "/validate-webhook-operators-coreos-io-v1-webhooktest",
        "/mutate-webhook-operators-coreos-io-v1-webhooktest",
        "/convert",
    ] {
        assert!(calls.iter().any(|c| c == path), "{path} called: {calls:?}");
    }
    tests
        .delete("accept-me", &Default::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn cert_manager_provider_without_cert_manager_installs_nothing() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let name = support::unique_name("olm-certmanager");
    let source = publish(fx, &name, &webhook_bundle());
    let agent = Agent::start(&name);
    apply_registry_v1_bd(
        &client,
        &name,
        json!({"installNamespace": name, "sources": [source], "format": "registry-v1",
               "collisionProtection": "None",
               "config": {"registryV1": {"certificateProvider": "CertManager"}}}),
    )
    .await;
    let bd = wait_condition(
        &client,
        &agent,
        &name,
        "Ready",
        "False",
        "does not serve cert-manager.io/v1",
    )
    .await;
    let status = bd.status.unwrap();
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.reason, "CertManagerMissing");
    assert!(
        ready.message.contains("certificateProvider: BuiltIn"),
        "{}",
        ready.message
    );
    // Nothing half-installed: no revision, no inventory, no Deployment.
    assert_eq!(status.active_revision, None);
    assert!(status.inventory.is_none_or(|i| i.objects.is_empty()));
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &name);
    assert!(deployments
        .get_opt("webhook-operator-controller-manager")
        .await
        .unwrap()
        .is_none());
    assert!(
        agent.change_entries().is_empty(),
        "{:?}",
        agent.change_entries()
    );
    delete_bd(&client, &name).await;
}
