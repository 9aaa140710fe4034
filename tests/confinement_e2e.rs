//! End-to-end: a BundleDeployment's author gets no more than they already have.
//!
//! - deploy/admission-policy.yaml on the local control plane: the API server refuses a
//!   BundleDeployment naming a ServiceAccount its author may not impersonate, and one naming
//!   none from an author who may not do everything;
//! - the agent's namespace is no pool of Secrets: one not given to a BundleDeployment is refused
//!   and its value never leaves the agent (a receiver records every request);
//! - deploy/rbac.yaml: an agent holding exactly its rules installs as a ServiceAccount (so it
//!   sends no group when impersonating) and cannot act as system:masters;
//! - `--require-service-account` and `--default-service-account`.
//!
//! Users are ServiceAccounts of the test with tokens from the TokenRequest API; the policy and
//! the RBAC are applied under names of the test's own (the policy selecting only the test's
//! BundleDeployments), so tests running in parallel are not affected.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/identities.rs"]
mod identities;
#[path = "support/receiver.rs"]
mod receiver;
mod support;

use std::path::Path;
use std::time::Duration;

use agent::{wait_condition, Agent, TEST_LABEL};
use identities::{
    bundle_deployment, create, delete_cluster_grant, deploy_documents, grant, install_policy,
    namespace, refusal, remove_policy, service_account, token_kubeconfig, writes_config_maps,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use pallet::api::conditions::find;
use pallet::api::BundleDeployment;
use receiver::Receiver;
use serde_json::{json, Value};

fn config_map(name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"1\"\n")
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(cluster::kubectl_path())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("running kubectl (built by tools/controlplane.sh)")
}

const GARBAGE_COLLECTOR: (&str, &str) = ("kube-system", "generic-garbage-collector");

#[tokio::test]
async fn the_api_server_refuses_a_service_account_its_author_may_not_impersonate() {
    let admin = cluster::client().await;
    cluster::install_crd(&admin).await;
    let test = support::unique_name("vap");
    let work = tempfile::tempdir().unwrap();
    namespace(&admin, &test).await;
    // The author may write BundleDeployments, and nothing else.
    service_account(&admin, &test, "author").await;
    let author_grant = format!("{test}-author");
    grant(
        &admin,
        &author_grant,
        None,
        (&test, "author"),
        json!([{"apiGroups": ["pallet.dev"], "resources": ["bundledeployments"],
                "verbs": ["get", "list", "create", "update", "patch", "delete"]}]),
    )
    .await;
    service_account(&admin, &test, "deployer").await;
    let author =
        cluster::client_from(&token_kubeconfig(&admin, &test, "author", work.path()).await).await;
    install_policy(&admin, &test).await;
    let as_author: Api<BundleDeployment> = Api::all(author.clone());
    let as_admin: Api<BundleDeployment> = Api::all(admin.clone());
    let spec = |sa: Option<(&str, &str)>| {
        let mut spec = json!({"format": "plain", "sources": [{"kind": "http",
            "http": {"url": "http://127.0.0.1:9/bundle.yaml"}}]});
        if let Some((namespace, name)) = sa {
            spec["serviceAccount"] = json!({"namespace": namespace, "name": name});
        }
        spec
    };

    for name in ["gc", "bare", "own"] {
        cluster::track_bundle_deployment(&format!("{test}-{name}"));
    }
    let run = async {
        // Naming kube-system's garbage collector: refused by the API server (once the policy is
        // in force: a dry run is tried until it is refused).
        let gc = bundle_deployment(&format!("{test}-gc"), &test, spec(Some(GARBAGE_COLLECTOR)));
        let message = identities::until_refused(&as_author, &gc).await;
        assert_eq!(
            message,
            refusal(as_author.create(&PostParams::default(), &gc).await)
        );
        assert!(
            message.contains("spec.serviceAccount kube-system/generic-garbage-collector")
                && message.contains(&format!(
                    "system:serviceaccount:{test}:author may not impersonate"
                )),
            "{message}"
        );
        assert!(as_admin
            .get_opt(&gc.metadata.name.clone().unwrap())
            .await
            .unwrap()
            .is_none());

        // Naming none: the agent would install as itself; only a user allowed everything may.
        let bare = bundle_deployment(&format!("{test}-bare"), &test, spec(None));
        let message = refusal(as_author.create(&PostParams::default(), &bare).await);
        assert!(message.contains("allowed to do everything"), "{message}");
        as_admin
            .create(&PostParams::default(), &bare)
            .await
            .expect("an administrator may create one without a ServiceAccount");

        // A ServiceAccount the author may impersonate: admitted.
        grant(
            &admin,
            &format!("{test}-impersonate"),
            Some(&test),
            (&test, "author"),
            json!([{"apiGroups": [""], "resources": ["serviceaccounts"],
                    "resourceNames": ["deployer"], "verbs": ["impersonate"]}]),
        )
        .await;
        let own_name = format!("{test}-own");
        let own = bundle_deployment(&own_name, &test, spec(Some((&test, "deployer"))));
        cluster::poll_until(
            "the author's grant in force",
            Duration::from_secs(30),
            || {
                let (api, own) = (as_author.clone(), own.clone());
                async move {
                    api.create(&PostParams::default(), &own)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
            },
        )
        .await;
        // Switching it to the garbage collector: refused.
        let patch = |value: Value| Patch::Merge(value);
        let message = refusal(
            as_author
                .patch(
                    &own_name,
                    &PatchParams::default(),
                    &patch(
                        json!({"spec": {"serviceAccount": {"namespace": GARBAGE_COLLECTOR.0,
                                                              "name": GARBAGE_COLLECTOR.1}}}),
                    ),
                )
                .await,
        );
        assert!(message.contains("generic-garbage-collector"), "{message}");

        edits_are_checked_and_finalizers_are_not(&as_admin, &as_author, &own_name).await;
    };
    run.await;
    remove_policy(&admin, &test).await;
    for name in ["gc", "bare", "own"] {
        let _ = Api::<BundleDeployment>::all(admin.clone())
            .delete(&format!("{test}-{name}"), &DeleteParams::default())
            .await;
    }
    delete_cluster_grant(&admin, &author_grant).await;
    let _ = Api::<Namespace>::all(admin.clone())
        .delete(&test, &DeleteParams::default())
        .await;
}

/// Every edit is checked, not only a change of ServiceAccount: once an administrator has named
/// the garbage collector in `name`, the author may change neither what is installed as it nor
/// its metadata (a reconcile request); its finalizers alone are not checked.
async fn edits_are_checked_and_finalizers_are_not(
    as_admin: &Api<BundleDeployment>,
    as_author: &Api<BundleDeployment>,
    own_name: &str,
) {
    let patch = |value: Value| Patch::Merge(value);
    as_admin
        .patch(
            own_name,
            &PatchParams::default(),
            &patch(
                json!({"spec": {"serviceAccount": {"namespace": GARBAGE_COLLECTOR.0,
                                                      "name": GARBAGE_COLLECTOR.1}}}),
            ),
        )
        .await
        .expect("an administrator may");
    for edit in [
        json!({"spec": {"sources": [{"kind": "http",
            "http": {"url": "http://127.0.0.1:9/other.yaml"}}]}}),
        json!({"metadata": {"annotations": {"pallet.dev/requested-reconcile": "1"}}}),
    ] {
        let message = refusal(
            as_author
                .patch(own_name, &PatchParams::default(), &patch(edit))
                .await,
        );
        assert!(
            message.contains(&format!(
                "BundleDeployment {own_name} acts as ServiceAccount kube-system/generic-garbage-collector"
            )) && message.contains("may not impersonate it"),
            "{message}"
        );
    }
    // Finalizers alone stay open: the agent releases its own whatever the identity.
    as_author
        .patch(
            own_name,
            &PatchParams::default(),
            &patch(json!({"metadata": {"finalizers": ["example.com/hold"]}})),
        )
        .await
        .expect("finalizer updates are admitted");
    as_author
        .patch(
            own_name,
            &PatchParams::default(),
            &patch(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("finalizer updates are admitted");
}

/// Labels for a Secret of the agent's namespace given to BundleDeployment `name`.
fn access(name: &str) -> Value {
    json!({format!("access.pallet.dev/{name}"): "true"})
}

#[tokio::test]
async fn a_secret_of_the_agent_namespace_it_was_not_given_never_leaves_the_agent() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("pool");
    let agent_ns = format!("{test}-agent");
    for ns in [&test, &agent_ns] {
        namespace(&client, ns).await;
    }
    let token = format!("tok-{}", support::unique_name("secret"));
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &agent_ns);
    create(
        &secrets,
        json!({"metadata": {"name": "deploy-token"}, "stringData": {"token": token}}),
    )
    .await;
    let receiver = Receiver::start();
    // A healthy neighbour, whose revision snapshot lands in the agent's namespace.
    let repo = fixtures.git_repo(&test);
    repo.commit_files("main", &[("app.yaml", config_map("app").as_bytes())], "v1");
    let neighbour = format!("{test}-ok");
    let agent = Agent::start_selecting(
        &format!("{TEST_LABEL}={test}"),
        &test,
        &["--namespace", &agent_ns, "--notification-retry-max", "1s"],
    );
    agent::apply_bd_labelled(
        &client,
        &neighbour,
        &test,
        json!({"installNamespace": test, "format": "plain", "sources": [
            {"kind": "git", "git": {"repository": repo.url(fixtures.git_plain()), "ref": {"branch": "main"}}}]}),
    )
    .await;
    wait_condition(&client, &agent, &neighbour, "Ready", "True", "1 objects").await;

    // The BundleDeployment names the token for a server of its choosing, as a source's auth and
    // as a notification target's Secret.
    let hostile = format!("{test}-x");
    let spec = |secret: &str| {
        json!({"installNamespace": test, "format": "plain",
            "sources": [{"kind": "http", "http": {"url": format!("{}/bundle.yaml", receiver.url),
                "auth": {"secret": {"name": secret}}}}],
            "notifications": [{"name": "hook", "on": ["Failed", "Stalled", "Healthy"],
                "webhook": {"url": format!("{}/hook", receiver.url), "secret": {"name": "deploy-token"}}}]})
    };
    agent::apply_bd_labelled(&client, &hostile, &test, spec("deploy-token")).await;
    let bd = wait_condition(
        &client,
        &agent,
        &hostile,
        "Ready",
        "False",
        &format!("not labelled access.pallet.dev/{hostile}=true"),
    )
    .await;
    let ready = find(&bd.status.unwrap().conditions, "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready.reason, "SecretNotAllowed");
    assert!(
        ready
            .message
            .contains(&format!("secret {agent_ns}/deploy-token")),
        "{}",
        ready.message
    );

    // The agent's own Secrets are never references, even labelled for it.
    let snapshot = format!("pallet-rev-{neighbour}-r1-c0");
    secrets
        .patch(
            &snapshot,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": access(&hostile)}})),
        )
        .await
        .unwrap();
    agent::apply_bd_labelled(&client, &hostile, &test, spec(&snapshot)).await;
    wait_condition(
        &client,
        &agent,
        &hostile,
        "Ready",
        "False",
        "the agent's own",
    )
    .await;

    // Nothing ever reached the server: no request at all.
    assert!(
        receiver.requests(None).await.is_empty(),
        "{:?}",
        receiver.requests(None).await
    );
    let leaks = |text: &str| text.contains(&token);
    let log = std::fs::read_to_string(&agent.log).unwrap();
    assert!(!leaks(&log), "the token is in the agent's log");
    let status = serde_json::to_string(
        &Api::<BundleDeployment>::all(client.clone())
            .get(&hostile)
            .await
            .unwrap()
            .status,
    )
    .unwrap();
    assert!(!leaks(&status));

    // The control: labelled for this BundleDeployment, the token is used, and the receiver
    // records it (so the assertions above would have seen a leak).
    secrets
        .patch(
            "deploy-token",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": access(&hostile)}})),
        )
        .await
        .unwrap();
    agent::apply_bd_labelled(&client, &hostile, &test, spec("deploy-token")).await;
    let sent = cluster::poll_until("the token at the receiver", Duration::from_secs(60), || {
        let receiver = &receiver;
        let bearer = format!("Bearer {token}");
        async move {
            let requests = receiver.requests(Some("/bundle.yaml")).await;
            requests
                .iter()
                .find(|r| r.header("Authorization") == Some(bearer.as_str()))
                .cloned()
                .ok_or_else(|| format!("{requests:?}"))
        }
    })
    .await;
    assert_eq!(sent.method, "GET");

    for name in [&hostile, &neighbour] {
        let _ = Api::<BundleDeployment>::all(client.clone())
            .delete(name, &DeleteParams::default())
            .await;
        agent::wait_bd_gone(&client, name).await;
    }
    for ns in [&test, &agent_ns] {
        let _ = Api::<Namespace>::all(client.clone())
            .delete(ns, &DeleteParams::default())
            .await;
    }
}

/// deploy/rbac.yaml's objects for ServiceAccount `sa` (namespace, name), under names of test
/// `test`: its ClusterRoles and their bindings cluster-wide, its Role in `agent_ns`. Returns the
/// names of the cluster-wide ones.
async fn apply_deploy_rbac(
    client: &Client,
    test: &str,
    agent_ns: &str,
    sa: (&str, &str),
) -> Vec<String> {
    let subjects = json!([{"kind": "ServiceAccount", "namespace": sa.0, "name": sa.1}]);
    let mut cluster_wide = Vec::new();
    for mut doc in deploy_documents("rbac.yaml") {
        let original = doc["metadata"]["name"].as_str().unwrap().to_string();
        let renamed = format!("{test}-{original}");
        doc["metadata"]["name"] = json!(renamed);
        match doc["kind"].as_str().unwrap() {
            "ClusterRole" => {
                create(&Api::<ClusterRole>::all(client.clone()), doc).await;
                cluster_wide.push(renamed);
            }
            "ClusterRoleBinding" => {
                doc["subjects"] = subjects.clone();
                doc["roleRef"]["name"] = json!(format!(
                    "{test}-{}",
                    doc["roleRef"]["name"].as_str().unwrap()
                ));
                create(&Api::<ClusterRoleBinding>::all(client.clone()), doc).await;
            }
            "Role" => {
                doc["metadata"]["namespace"] = json!(agent_ns);
                create(&Api::<Role>::namespaced(client.clone(), agent_ns), doc).await;
            }
            "RoleBinding" => {
                doc["metadata"]["namespace"] = json!(agent_ns);
                doc["subjects"] = subjects.clone();
                doc["roleRef"]["name"] = json!(format!(
                    "{test}-{}",
                    doc["roleRef"]["name"].as_str().unwrap()
                ));
                create(
                    &Api::<RoleBinding>::namespaced(client.clone(), agent_ns),
                    doc,
                )
                .await;
            }
            other => panic!("unexpected {other} in deploy/rbac.yaml"),
        }
    }
    cluster_wide
}

#[tokio::test]
async fn an_agent_with_deploys_rbac_installs_as_a_service_account_and_never_as_a_group() {
    let admin = cluster::client().await;
    cluster::install_crd(&admin).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("least");
    let agent_ns = format!("{test}-agent");
    let work = tempfile::tempdir().unwrap();
    for ns in [&test, &agent_ns] {
        namespace(&admin, ns).await;
    }
    // The agent: deploy/rbac.yaml's rules, and read access to what its bundle holds (the
    // least-privilege setup of rbac-install.yaml's comment) instead of the broad grant.
    service_account(&admin, &agent_ns, "pallet-agent").await;
    let mut cluster_wide =
        apply_deploy_rbac(&admin, &test, &agent_ns, (&agent_ns, "pallet-agent")).await;
    let read = format!("{test}-read");
    grant(
        &admin,
        &read,
        None,
        (&agent_ns, "pallet-agent"),
        json!([{"apiGroups": [""], "resources": ["configmaps", "namespaces"], "verbs": ["get", "list", "watch"]}]),
    )
    .await;
    cluster_wide.push(read);
    // The bundle's ServiceAccount may write ConfigMaps in its namespace.
    service_account(&admin, &test, "deployer").await;
    grant(
        &admin,
        "deployer",
        Some(&test),
        (&test, "deployer"),
        writes_config_maps(),
    )
    .await;
    let kubeconfig = token_kubeconfig(&admin, &agent_ns, "pallet-agent", work.path()).await;

    // With the agent's credentials, acting as a group is refused; acting as a ServiceAccount is
    // what it may do.
    let as_masters = kubectl(
        &kubeconfig,
        &[
            "--as=system:serviceaccount:pallet-system:pallet-agent",
            "--as-group=system:masters",
            "get",
            "namespace",
            "default",
        ],
    );
    let stderr = String::from_utf8_lossy(&as_masters.stderr);
    assert!(
        !as_masters.status.success(),
        "acting as system:masters must fail"
    );
    assert!(
        stderr.contains("cannot impersonate resource \"groups\""),
        "{stderr}"
    );
    let as_user = kubectl(
        &kubeconfig,
        &["--as=pallet-admin", "get", "namespace", "default"],
    );
    assert!(!as_user.status.success(), "acting as a user must fail");
    assert!(
        String::from_utf8_lossy(&as_user.stderr).contains("cannot impersonate resource \"users\"")
    );
    let as_sa = kubectl(
        &kubeconfig,
        &[
            "--as=system:serviceaccount:pallet-system:pallet-agent",
            "auth",
            "whoami",
            "-o",
            "json",
        ],
    );
    assert!(
        as_sa.status.success(),
        "{}",
        String::from_utf8_lossy(&as_sa.stderr)
    );
    // The API server gives the impersonated ServiceAccount its groups itself.
    let who: Value = serde_json::from_slice(&as_sa.stdout).unwrap();
    let groups = who["status"]["userInfo"]["groups"].clone();
    for group in [
        "system:serviceaccounts",
        "system:serviceaccounts:pallet-system",
        "system:authenticated",
    ] {
        assert!(
            groups.as_array().unwrap().contains(&json!(group)),
            "{groups}"
        );
    }

    // The agent with those credentials installs a bundle as its ServiceAccount: had it sent any
    // group with the impersonation, the API server would have refused every write.
    let repo = fixtures.git_repo(&test);
    repo.commit_files("main", &[("app.yaml", config_map("app").as_bytes())], "v1");
    let kubeconfig_text = kubeconfig.to_string_lossy().into_owned();
    let agent = Agent::start_with_env(
        &test,
        &["--namespace", &agent_ns],
        &[("PALLET_TEST_AGENT_KUBECONFIG", kubeconfig_text.as_str())],
    );
    agent::apply_bd(
        &admin,
        &test,
        json!({"installNamespace": test, "format": "plain",
            "serviceAccount": {"namespace": test, "name": "deployer"},
            "sources": [{"kind": "git", "git": {"repository": repo.url(fixtures.git_plain()), "ref": {"branch": "main"}}}]}),
    )
    .await;
    wait_condition(&admin, &agent, &test, "Ready", "True", "1 objects").await;
    let app = Api::<ConfigMap>::namespaced(admin.clone(), &test)
        .get("app")
        .await
        .unwrap();
    assert_eq!(
        app.metadata.labels.unwrap()["pallet.dev/bundle-deployment"],
        test
    );

    let _ = Api::<BundleDeployment>::all(admin.clone())
        .delete(&test, &DeleteParams::default())
        .await;
    agent::wait_bd_gone(&admin, &test).await;
    drop(agent);
    for name in &cluster_wide {
        delete_cluster_grant(&admin, name).await;
    }
    for ns in [&test, &agent_ns] {
        let _ = Api::<Namespace>::all(admin.clone())
            .delete(ns, &DeleteParams::default())
            .await;
    }
}

#[tokio::test]
async fn an_agent_requires_a_service_account_or_acts_as_its_default_one() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("sa-flags");
    namespace(&client, &test).await;
    service_account(&client, &test, "installer").await;
    let repo = fixtures.git_repo(&test);
    repo.commit_files("main", &[("app.yaml", config_map("app").as_bytes())], "v1");
    let spec = json!({"installNamespace": test, "format": "plain",
        "sources": [{"kind": "git", "git": {"repository": repo.url(fixtures.git_plain()), "ref": {"branch": "main"}}}]});

    // --require-service-account: refused with a condition saying why, nothing written.
    let strict = format!("{test}-strict");
    let strict_agent = Agent::start_with(&strict, &["--require-service-account"]);
    agent::apply_bd(&client, &strict, spec.clone()).await;
    let bd = wait_condition(
        &client,
        &strict_agent,
        &strict,
        "Ready",
        "False",
        "spec.serviceAccount is required",
    )
    .await;
    assert_eq!(
        find(&bd.status.unwrap().conditions, "Ready")
            .unwrap()
            .reason,
        "ServiceAccountRequired"
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);
    assert!(cms.get_opt("app").await.unwrap().is_none());

    // --default-service-account: a BundleDeployment naming none writes as that ServiceAccount,
    // which may not write ConfigMaps yet...
    let default = format!("{test}-default");
    let installer = format!("{test}/installer");
    let default_agent = Agent::start_with(&default, &["--default-service-account", &installer]);
    agent::apply_bd(&client, &default, spec.clone()).await;
    let bd = wait_condition(
        &client,
        &default_agent,
        &default,
        "Ready",
        "False",
        &format!("system:serviceaccount:{test}:installer"),
    )
    .await;
    assert_eq!(
        find(&bd.status.unwrap().conditions, "Ready")
            .unwrap()
            .reason,
        "Forbidden"
    );
    // ...and once it may, installs.
    grant(
        &client,
        "installer",
        Some(&test),
        (&test, "installer"),
        writes_config_maps(),
    )
    .await;
    wait_condition(
        &client,
        &default_agent,
        &default,
        "Ready",
        "True",
        "1 objects",
    )
    .await;
    assert!(cms.get_opt("app").await.unwrap().is_some());

    for name in [&strict, &default] {
        let _ = Api::<BundleDeployment>::all(client.clone())
            .delete(name, &DeleteParams::default())
            .await;
        agent::wait_bd_gone(&client, name).await;
    }
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&test, &DeleteParams::default())
        .await;
}
