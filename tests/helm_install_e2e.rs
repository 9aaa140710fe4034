//! End-to-end: helm's install-time behaviour in the `pallet agent` binary on the local control
//! plane: `lookup` read from the cluster (a Bitnami-style chart keeps its generated password
//! across an upgrade), `config.helm.crds` for a chart's `crds/` directory, delete hooks around a
//! BundleDeployment's deletion, and `pallet test` running the chart's test hooks.
//!
//! Workloads: the control plane's fake kubelet completes the Pods of Jobs in namespaces
//! labelled `pallet.dev/fake-kubelet=on` (fails them for an image tag ending in `broken`).

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use agent::Agent;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::Client;
use oci_client::secrets::RegistryAuth;
use pallet::api::conditions::find;
use pallet::api::{BundleDeployment, BundleDeploymentStatus, HookPhase, RevisionPhase};
use serde_json::{json, Value};

/// The chart: a password kept by `lookup`, a token without (drawn before the password, so that
/// the lookup's answer does not shift the random values drawn after it), a ConfigMap, test and delete hooks,
/// and CRDs in `crds/` named after `group`; `crd_version` labels them and version 2 adds a
/// second CRD.
fn write_chart(dir: &Path, group: &str, crd_version: u32) {
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::create_dir_all(dir.join("crds")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: install-time\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("values.yaml"),
        "message: hello\ntestImage: x.invalid/test:v1\npreDeleteImage: x.invalid/pre-delete:v1\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("templates/app.yaml"),
        r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
data:
  message: {{ .Values.message | quote }}
  token: {{ randAlphaNum 20 | quote }}
---
{{- $secret := lookup "v1" "Secret" .Release.Namespace (printf "%s-auth" .Release.Name) }}
apiVersion: v1
kind: Secret
metadata:
  name: {{ .Release.Name }}-auth
data:
  password: {{ if $secret }}{{ index $secret.data "password" }}{{ else }}{{ randAlphaNum 20 | b64enc }}{{ end }}
"#,
    )
    .unwrap();
    let job = |name: &str, event: &str, weight: i32, policy: &str, image: &str| {
        format!(
            r#"apiVersion: batch/v1
kind: Job
metadata:
  name: {{{{ .Release.Name }}}}-{name}
  annotations:
    helm.sh/hook: {event}
    helm.sh/hook-weight: "{weight}"
    helm.sh/hook-delete-policy: {policy}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: run
        image: {image}
---
"#
        )
    };
    let mut hooks = String::new();
    hooks.push_str(&job(
        "test-a",
        "test",
        0,
        "before-hook-creation",
        "{{ .Values.testImage }}",
    ));
    hooks.push_str(&job(
        "test-b",
        "test",
        5,
        "before-hook-creation",
        "x.invalid/test-b:v1",
    ));
    hooks.push_str(&job(
        "pre-delete",
        "pre-delete",
        0,
        "hook-succeeded",
        "{{ .Values.preDeleteImage }}",
    ));
    hooks.push_str(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-post-delete\n  annotations:\n    helm.sh/hook: post-delete\ndata:\n  ran: \"yes\"\n",
    );
    std::fs::write(dir.join("templates/hooks.yaml"), hooks).unwrap();
    let crd = |plural: &str, kind: &str| {
        format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {plural}.{group}\n  labels: {{chart-version: \"v{crd_version}\"}}\nspec:\n  group: {group}\n  scope: Namespaced\n  names: {{plural: {plural}, singular: {singular}, kind: {kind}}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}\n",
            singular = plural.trim_end_matches('s'),
        )
    };
    std::fs::write(dir.join("crds/widgets.yaml"), crd("widgets", "Widget")).unwrap();
    if crd_version >= 2 {
        std::fs::write(dir.join("crds/gadgets.yaml"), crd("gadgets", "Gadget")).unwrap();
    }
}

/// A BundleDeployment of the chart, its namespace (fake kubelet on) and an agent for it.
struct Release {
    client: Client,
    name: String,
    group: String,
    registry: String,
    agent: Agent,
}

impl Release {
    /// Pushes the chart's two versions (tags v1 and v2) and starts an agent.
    async fn start(prefix: &str) -> Release {
        let client = cluster::client().await;
        cluster::install_crd(&client).await;
        let fixtures = support::Fixtures::load();
        let name = support::unique_name(prefix);
        let group = format!("{name}.pallet.test");
        let registry = fixtures.registry_plain();
        for version in [1, 2] {
            let dir = tempfile::tempdir().unwrap();
            write_chart(dir.path(), &group, version);
            fixtures
                .push_dir_as_image(
                    registry,
                    &name,
                    &format!("v{version}"),
                    dir.path(),
                    &RegistryAuth::Anonymous,
                )
                .await
                .expect("the chart is pushed");
        }
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"pallet.dev/fake-kubelet": "on"}}});
        Api::<Namespace>::all(client.clone())
            .patch(
                &name,
                &PatchParams::apply(cluster::TEST_FIELD_MANAGER),
                &Patch::Apply(&namespace),
            )
            .await
            .unwrap();
        // The chart looks up its own Secret in its namespace: allow-listed for the agent.
        let agent = Agent::start_with(
            &name,
            &[
                "--plain-http-registry",
                &registry.host,
                "--allow-secret-namespace",
                &name,
            ],
        );
        Release {
            client,
            name,
            group,
            registry: registry.host.clone(),
            agent,
        }
    }

    async fn install(&self, tag: &str, values: Value, crds: Option<&str>) {
        let mut helm = json!({"releaseName": "rel", "values": values});
        if let Some(policy) = crds {
            helm["crds"] = json!(policy);
        }
        agent::apply_bd(
            &self.client,
            &self.name,
            json!({
                "installNamespace": self.name,
                "sources": [{"kind": "image", "image": {"ref": format!("{}/{}:{tag}", self.registry, self.name)}}],
                "format": "helm",
                "config": {"helm": helm},
                "rollout": {"progressDeadline": "90s"},
            }),
        )
        .await;
    }

    async fn bd(&self) -> Option<BundleDeployment> {
        Api::<BundleDeployment>::all(self.client.clone())
            .get_opt(&self.name)
            .await
            .unwrap()
    }

    async fn wait<F>(&self, what: &str, check: F) -> BundleDeploymentStatus
    where
        F: Fn(&BundleDeploymentStatus) -> Result<(), String>,
    {
        let start = Instant::now();
        loop {
            let status = self.bd().await.and_then(|bd| bd.status).unwrap_or_default();
            match check(&status) {
                Ok(()) => return status,
                Err(last) if start.elapsed() > Duration::from_secs(120) => panic!(
                    "timed out waiting for {what}: {last}\nconditions: {:?}\nagent log:\n{}",
                    status.conditions,
                    self.agent.log_tail()
                ),
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }

    async fn wait_healthy(&self, number: i64) {
        self.wait(&format!("revision {number} healthy"), |st| {
            let phase = st
                .revisions
                .iter()
                .find(|r| r.number == number)
                .map(|r| r.phase);
            let ready = find(&st.conditions, "Ready").is_some_and(|c| c.status == "True");
            match (st.active_revision == Some(number), phase, ready) {
                (true, Some(RevisionPhase::Healthy), true) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    }

    /// Asks for a pass (`pallet.dev/requested-reconcile`) and waits until it is answered.
    async fn request_reconcile(&self, token: &str) -> BundleDeploymentStatus {
        Api::<BundleDeployment>::all(self.client.clone())
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"annotations": {"pallet.dev/requested-reconcile": token}}}),
                ),
            )
            .await
            .unwrap();
        self.wait("the reconcile request answered", |st| {
            match st.last_handled_reconcile.as_deref() {
                Some(answered) if answered == token => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await
    }

    async fn config_map(&self, name: &str) -> Option<ConfigMap> {
        Api::<ConfigMap>::namespaced(self.client.clone(), &self.name)
            .get_opt(name)
            .await
            .unwrap()
    }

    async fn crd(&self, plural: &str) -> Option<CustomResourceDefinition> {
        Api::<CustomResourceDefinition>::all(self.client.clone())
            .get_opt(&format!("{plural}.{}", self.group))
            .await
            .unwrap()
    }

    async fn delete_crds(&self) {
        let crds = Api::<CustomResourceDefinition>::all(self.client.clone());
        for plural in ["widgets", "gadgets"] {
            let _ = crds
                .delete(
                    &format!("{plural}.{}", self.group),
                    &DeleteParams::default(),
                )
                .await;
        }
    }
}

fn crd_version(crd: &CustomResourceDefinition) -> Option<String> {
    crd.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("chart-version"))
        .cloned()
}

#[tokio::test]
async fn lookup_keeps_a_generated_password_across_an_upgrade() {
    let release = Release::start("lookup").await;
    release.install("v1", json!({"message": "one"}), None).await;
    release.wait_healthy(1).await;
    let secrets = Api::<Secret>::namespaced(release.client.clone(), &release.name);
    let password = |s: Secret| s.data.unwrap_or_default().get("password").cloned();
    let first = password(secrets.get("rel-auth").await.unwrap()).expect("a password");
    let token = |cm: Option<ConfigMap>| {
        cm.and_then(|c| c.data)
            .and_then(|d| d.get("token").cloned())
    };
    let first_token = token(release.config_map("rel-config").await);

    // The next pass reads the Secret the install created: the same render, no new revision.
    release.request_reconcile("after-install").await;
    assert_eq!(
        release
            .bd()
            .await
            .and_then(|bd| bd.status)
            .and_then(|s| s.active_revision),
        Some(1)
    );

    // An upgrade: new values, a new revision, a new random source.
    release.install("v1", json!({"message": "two"}), None).await;
    release.wait_healthy(2).await;
    let config = release.config_map("rel-config").await;
    assert_eq!(
        config
            .as_ref()
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get("message"))
            .map(String::as_str),
        Some("two")
    );
    assert_ne!(
        token(config),
        first_token,
        "a value generated without lookup changes with the render's inputs"
    );
    let second = password(secrets.get("rel-auth").await.unwrap()).expect("a password");
    assert_eq!(second, first, "the password read by lookup is kept");

    // A later pass (asked for, and answered) renders the same: no new revision.
    let status = release.request_reconcile("again").await;
    assert_eq!(status.active_revision, Some(2), "the digest is stable");
    assert_eq!(
        password(secrets.get("rel-auth").await.unwrap()).expect("a password"),
        first
    );
    release.delete_crds().await;
}

#[tokio::test]
async fn chart_crds_follow_the_policy_and_are_never_deleted() {
    // Unset: Create on install, Skip on upgrade; Create; CreateReplace; Skip.
    let cases = [
        (None, Some("v1"), None),
        (Some("Create"), Some("v1"), Some("v2")),
        (Some("CreateReplace"), Some("v2"), Some("v2")),
        (Some("Skip"), None, None),
    ];
    for (policy, widgets_after_upgrade, gadgets_after_upgrade) in cases {
        let release = Release::start("crds").await;
        release.install("v1", json!({}), policy).await;
        release.wait_healthy(1).await;
        let installed = release.crd("widgets").await;
        match policy {
            Some("Skip") => assert!(installed.is_none(), "{policy:?}: not created"),
            _ => assert_eq!(
                installed.as_ref().and_then(crd_version).as_deref(),
                Some("v1"),
                "{policy:?}: created on install"
            ),
        }
        release.install("v2", json!({}), policy).await;
        release.wait_healthy(2).await;
        assert_eq!(
            release
                .crd("widgets")
                .await
                .as_ref()
                .and_then(crd_version)
                .as_deref(),
            widgets_after_upgrade,
            "{policy:?}: the existing CRD after the upgrade"
        );
        assert_eq!(
            release
                .crd("gadgets")
                .await
                .as_ref()
                .and_then(crd_version)
                .as_deref(),
            gadgets_after_upgrade,
            "{policy:?}: a CRD new in the upgrade"
        );
        let inventory = pallet::reconcile::inventory_keys(
            &release
                .bd()
                .await
                .and_then(|bd| bd.status)
                .unwrap_or_default(),
        );
        assert!(
            !inventory
                .iter()
                .any(|k| k.kind == "CustomResourceDefinition"),
            "{policy:?}: chart CRDs are not in the inventory: {inventory:?}"
        );
        // Deleting the BundleDeployment deletes its objects, never the chart's CRDs.
        Api::<BundleDeployment>::all(release.client.clone())
            .delete(&release.name, &DeleteParams::default())
            .await
            .unwrap();
        agent::wait_bd_gone(&release.client, &release.name).await;
        assert_eq!(
            release.crd("widgets").await.is_some(),
            widgets_after_upgrade.is_some(),
            "{policy:?}: the CRD stays after the deletion"
        );
        release.delete_crds().await;
    }
}

#[tokio::test]
async fn delete_hooks_run_around_the_deletion_and_a_failed_one_stops_it() {
    let release = Release::start("delhooks").await;
    release.install("v1", json!({}), Some("Skip")).await;
    release.wait_healthy(1).await;
    let bds = Api::<BundleDeployment>::all(release.client.clone());
    bds.delete(&release.name, &DeleteParams::default())
        .await
        .unwrap();
    agent::wait_bd_gone(&release.client, &release.name).await;
    // The pre-delete Job ran before the objects were deleted, and was deleted once it
    // succeeded (hook-succeeded); the post-delete ConfigMap was created after them.
    let writes: Vec<String> = release
        .agent
        .change_entries()
        .iter()
        .filter(|e| e["bundleDeployment"] == release.name.as_str())
        .map(|e| {
            format!(
                "{} {} {}",
                e["operation"].as_str().unwrap_or(""),
                e["reason"].as_str().unwrap_or(""),
                e["object"]["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    let at = |entry: &str| {
        writes
            .iter()
            .position(|w| w == entry)
            .unwrap_or_else(|| panic!("no {entry:?} in {writes:#?}"))
    };
    let pre = at("create hook rel-pre-delete");
    let pre_deleted = at("delete hook rel-pre-delete");
    let config_deleted = at("delete deletion rel-config");
    let post = at("create hook rel-post-delete");
    assert!(
        pre < pre_deleted && pre_deleted < config_deleted && config_deleted < post,
        "{writes:#?}"
    );
    assert!(release.config_map("rel-config").await.is_none());
    assert!(
        release.config_map("rel-post-delete").await.is_some(),
        "a hook object without a delete policy stays, as helm leaves it"
    );

    // A failing pre-delete hook stops the deletion: the objects stay, the failure is reported.
    let failing = Release::start("delfail").await;
    failing
        .install(
            "v1",
            json!({"preDeleteImage": "x.invalid/pre-delete:broken"}),
            Some("Skip"),
        )
        .await;
    failing.wait_healthy(1).await;
    Api::<BundleDeployment>::all(failing.client.clone())
        .delete(&failing.name, &DeleteParams::default())
        .await
        .unwrap();
    let status = failing
        .wait("the pre-delete hook to fail", |st| {
            let run = st.delete_hooks.as_ref().ok_or("no delete hooks yet")?;
            let ready = find(&st.conditions, "Ready");
            match (run.phase, ready.map(|c| c.reason.as_str())) {
                (HookPhase::Failed, Some("HookFailed")) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    let ready = find(&status.conditions, "Ready").unwrap();
    assert!(
        ready.message.contains("pre-delete hook Job"),
        "{}",
        ready.message
    );
    assert!(failing.bd().await.is_some(), "the finalizer stays");
    assert!(
        failing.config_map("rel-config").await.is_some(),
        "nothing was deleted"
    );
    // Removing the finalizer leaves everything as it is.
    Api::<BundleDeployment>::all(failing.client.clone())
        .patch(
            &failing.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    agent::wait_bd_gone(&failing.client, &failing.name).await;
    assert!(failing.config_map("rel-config").await.is_some());
}

#[tokio::test]
async fn pallet_test_runs_the_test_hooks_and_reports_each() {
    let release = Release::start("helmtest").await;
    release.install("v1", json!({}), Some("Skip")).await;
    release.wait_healthy(1).await;
    // Test hooks do not run on install.
    let status = release.request_reconcile("installed").await;
    assert!(status.test.is_none(), "{:?}", status.test);
    let jobs =
        Api::<k8s_openapi::api::batch::v1::Job>::namespaced(release.client.clone(), &release.name);
    assert!(
        jobs.get_opt("rel-test-a").await.unwrap().is_none(),
        "no test Job before `pallet test`"
    );
    let run = |name: &str| {
        let name = name.to_string();
        std::thread::spawn(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_pallet"))
                .args(["test", &name, "--timeout", "100", "--kubeconfig"])
                .arg(cluster::kubeconfig_path())
                .output()
                .expect("running pallet test")
        })
        .join()
        .expect("the command thread")
    };
    let out = run(&release.name);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Both test Jobs, in weight order, each Succeeded.
    let a = stdout.find("rel-test-a  Succeeded").expect(&stdout);
    let b = stdout.find("rel-test-b  Succeeded").expect(&stdout);
    assert!(a < b, "{stdout}");
    let status = release
        .bd()
        .await
        .and_then(|bd| bd.status)
        .unwrap_or_default();
    let test = status.test.expect("status.test");
    assert_eq!(test.phase, HookPhase::Succeeded);
    assert_eq!(test.revision, 1);
    assert_eq!(test.hooks.len(), 2);

    // A failing test: reported per hook, and the command fails.
    release
        .install(
            "v1",
            json!({"testImage": "x.invalid/test:broken"}),
            Some("Skip"),
        )
        .await;
    release.wait_healthy(2).await;
    let out = run(&release.name);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.contains("rel-test-a  Failed"), "{stdout}");
    let test = release
        .bd()
        .await
        .and_then(|bd| bd.status)
        .and_then(|s| s.test)
        .expect("status.test");
    assert_eq!((test.phase, test.revision), (HookPhase::Failed, 2));
    assert!(
        test.message
            .as_deref()
            .unwrap_or("")
            .contains("test hook Job"),
        "{test:?}"
    );
    // The hooks of a run that stopped at a failure after the first are not run.
    assert_eq!(test.hooks[1].phase, HookPhase::Pending);
    release.delete_crds().await;
}
