//! End-to-end: tenants confined to their own BundleDeployments by the API server.
//!
//! Two teams, each with a namespace, an installer ServiceAccount its bundles act as, and one
//! person (a ServiceAccount of the test with a token) holding deploy/tenant-role.yaml's rules
//! and `impersonate` on their own team's installer only, as docs/guides/multi-tenancy.md grants
//! them. With deploy/admission-policy.yaml in force (under the test's name, selecting only its
//! BundleDeployments), team B is refused when it deletes, pauses, resumes, rolls back, retries,
//! edits, relabels or shadows team A's bundle; team A does each of them on its own, with an agent
//! handling its requests (the agent's finalizer updates pass the policy).

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cli.rs"]
mod cli;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/identities.rs"]
mod identities;
mod support;

use std::path::Path;

use cli::pallet_as;

use agent::{wait_condition, Agent};
use identities::{
    bundle_deployment, create_bd, grant, refusal, service_account, writes_config_maps,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::Client;
use pallet::api::conditions::find;
use pallet::api::BundleDeployment;
use serde_json::{json, Value};

/// `pallet ARGS` as that user, expected to be refused; its error output.
fn refused_cli(kubeconfig: &Path, args: &[&str]) -> String {
    let out = pallet_as(kubeconfig, args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "pallet {args:?} was admitted: {stderr}"
    );
    stderr
}

/// `pallet ARGS` as that user, expected to succeed; its output.
fn admitted_cli(kubeconfig: &Path, args: &[&str]) -> String {
    let out = pallet_as(kubeconfig, args);
    assert!(
        out.status.success(),
        "pallet {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A team: its namespace (also the prefix of its BundleDeployments' names), the installer its
/// bundles act as, and its person's kubeconfig and client.
struct Team {
    namespace: String,
    kubeconfig: std::path::PathBuf,
    bds: Api<BundleDeployment>,
}

impl Team {
    /// The spec of a bundle acting as this team's installer, from `repository` at `commit`,
    /// installed into `install_namespace`.
    fn spec(&self, repository: &str, commit: &str, install_namespace: &str) -> Value {
        json!({"installNamespace": install_namespace, "format": "plain",
               "serviceAccount": {"namespace": self.namespace, "name": "installer"},
               "collisionProtection": "None",
               "sources": [{"kind": "git", "git": {"repository": repository,
                                                    "ref": {"commit": commit}}}]})
    }
}

/// Sets up team `suffix` of test `test`: namespace `TEST-SUFFIX`, its installer (which may write
/// ConfigMaps there), and its person `lead`, bound to the tenant role `tenant_role` and allowed
/// to impersonate the installer only.
async fn team(admin: &Client, test: &str, suffix: &str, tenant_role: &str, dir: &Path) -> Team {
    let namespace = format!("{test}-{suffix}");
    identities::namespace(admin, &namespace).await;
    service_account(admin, &namespace, "installer").await;
    grant(
        admin,
        "installer",
        Some(&namespace),
        (&namespace, "installer"),
        writes_config_maps(),
    )
    .await;
    service_account(admin, &namespace, "lead").await;
    // The per-team grant of the guide: impersonate on the team's installer, in its namespace.
    grant(
        admin,
        "act-as-installer",
        Some(&namespace),
        (&namespace, "lead"),
        json!([{"apiGroups": [""], "resources": ["serviceaccounts"],
                "resourceNames": ["installer"], "verbs": ["impersonate"]}]),
    )
    .await;
    let binding = json!({"metadata": {"name": format!("{namespace}-tenant")},
        "subjects": [{"kind": "ServiceAccount", "namespace": namespace, "name": "lead"}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": tenant_role}});
    identities::create(
        &Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(admin.clone()),
        binding,
    )
    .await;
    let kubeconfig = identities::token_kubeconfig(admin, &namespace, "lead", dir).await;
    let bds = Api::all(cluster::client_from(&kubeconfig).await);
    Team {
        namespace,
        kubeconfig,
        bds,
    }
}

/// deploy/tenant-role.yaml's ClusterRole under the name `name`.
async fn tenant_role(admin: &Client, name: &str) {
    let mut role = identities::deploy_documents("tenant-role.yaml")
        .into_iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("deploy/tenant-role.yaml holds a ClusterRole");
    assert_eq!(role["metadata"]["name"], "pallet-tenant");
    role["metadata"]["name"] = json!(name);
    identities::create(
        &Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(admin.clone()),
        role,
    )
    .await;
}

fn config_map(value: &str) -> Vec<u8> {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  value: \"{value}\"\n"
    )
    .into_bytes()
}

#[tokio::test]
async fn a_team_acts_on_its_own_bundles_and_the_api_server_refuses_it_anothers() {
    let admin = cluster::client().await;
    cluster::install_crd(&admin).await;
    let fixtures = support::Fixtures::load();
    let test = support::unique_name("tenancy");
    let work = tempfile::tempdir().unwrap();
    let role = format!("{test}-tenant");
    tenant_role(&admin, &role).await;
    let a = team(&admin, &test, "a", &role, work.path()).await;
    let b = team(&admin, &test, "b", &role, work.path()).await;
    identities::install_policy(&admin, &test).await;
    let agent = Agent::start(&test);

    let repo = fixtures.git_repo(&test);
    let v1 = repo.commit_files("main", &[("web.yaml", &config_map("1"))], "v1");
    let v2 = repo.commit_files("main", &[("web.yaml", &config_map("2"))], "v2");
    let url = repo.url(fixtures.git_plain());

    let run = async {
        // Team B may not name team A's installer, nor create a BundleDeployment without one: the
        // policy is in force once such a dry run is refused.
        let squatted = bundle_deployment(
            &format!("{}-api", a.namespace),
            &test,
            a.spec(&url, &v1, &a.namespace),
        );
        let message = identities::until_refused(&b.bds, &squatted).await;
        assert!(
            message.contains(&format!(
                "spec.serviceAccount {}/installer: system:serviceaccount:{}:lead may not impersonate",
                a.namespace, b.namespace
            )),
            "{message}"
        );

        // Team A's bundle, created by team A.
        let web = format!("{}-web", a.namespace);
        create_bd(
            &a.bds,
            &bundle_deployment(&web, &test, a.spec(&url, &v1, &a.namespace)),
        )
        .await
        .expect("team A creates its own bundle");
        wait_condition(&admin, &agent, &web, "Ready", "True", "1 objects").await;

        team_b_is_refused(&admin, &agent, &a, &b, &test, &web, &url, &v1).await;
        team_a_does_each(&admin, &agent, &a, &web, &url, &v2).await;
    };
    run.await;
    drop(agent);
    identities::remove_policy(&admin, &test).await;
    identities::delete_cluster_grant(&admin, &role).await;
    for team in [&a, &b] {
        let _ = Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(admin.clone())
            .delete(
                &format!("{}-tenant", team.namespace),
                &DeleteParams::default(),
            )
            .await;
        identities::delete_namespace(&admin, &team.namespace).await;
    }
}

/// Team B, with the same tenant role, touches team A's bundle `web` every way it could: each is
/// refused by the API server, with a message naming the identity it would need.
#[allow(clippy::too_many_arguments)]
async fn team_b_is_refused(
    admin: &Client,
    agent: &Agent,
    a: &Team,
    b: &Team,
    test: &str,
    web: &str,
    url: &str,
    v1: &str,
) {
    let not_theirs = format!(
        "BundleDeployment {web} acts as ServiceAccount {}/installer, and \
         system:serviceaccount:{}:lead may not impersonate it, so may not ",
        a.namespace, b.namespace
    );
    let change = format!("{not_theirs}change its spec, labels, annotations or owners");
    let message = refusal(b.bds.delete(web, &DeleteParams::default()).await);
    assert!(
        message.contains(&format!("{not_theirs}delete it")),
        "{message}"
    );
    // Pause, resume, rollback, retry and reconcile requests, with the CLI.
    let kubeconfig = &b.kubeconfig;
    for args in [
        vec!["pause", web, "--reason", "mine now"],
        vec!["resume", web],
        vec!["rollback", web, "--to", "1"],
        vec!["retry", web],
        vec!["reconcile", web],
    ] {
        let stderr = refused_cli(kubeconfig, &args);
        assert!(stderr.contains(&change), "pallet {args:?}: {stderr}");
    }
    // Editing the spec, a test request, and a label that would move it to another agent.
    let patch = |value: Value| Patch::Merge(value);
    for edit in [
        json!({"spec": {"sources": [{"kind": "git", "git": {"repository": url, "ref": {"branch": "main"}}}]}}),
        json!({"metadata": {"annotations": {"pallet.dev/requested-test": "now"}}}),
        json!({"metadata": {"labels": {"sharding.fluxcd.io/key": "team-b"}}}),
    ] {
        let message = refusal(
            b.bds
                .patch(web, &PatchParams::default(), &patch(edit))
                .await,
        );
        assert!(message.contains(&change), "{message}");
    }

    // Shadowing. A name of team A's: refused, whatever identity it acts as.
    let squat = format!("{}-api", a.namespace);
    let message = refusal(
        create_bd(
            &b.bds,
            &bundle_deployment(&squat, test, b.spec(url, v1, &b.namespace)),
        )
        .await,
    );
    assert!(
        message.contains(&format!(
            "is named {0} or begins with {0}-, so that no team takes a name another team uses; {squat} does not",
            b.namespace
        )),
        "{message}"
    );
    // A bundle of team B's own that claims team A's ConfigMap (collisionProtection: None takes
    // any owner's object): admitted, but its write as team B's installer is refused by the API
    // server, and team A's object stays as team A's bundle wrote it.
    let claim = format!("{}-web", b.namespace);
    create_bd(
        &b.bds,
        &bundle_deployment(&claim, test, b.spec(url, v1, &a.namespace)),
    )
    .await
    .expect("team B creates a bundle of its own");
    let bd = wait_condition(
        admin,
        agent,
        &claim,
        "Ready",
        "False",
        &format!("system:serviceaccount:{}:installer", b.namespace),
    )
    .await;
    assert_eq!(
        find(&bd.status.unwrap().conditions, "Ready")
            .unwrap()
            .reason,
        "Forbidden"
    );
    let live = Api::<ConfigMap>::namespaced(admin.clone(), &a.namespace)
        .get("web")
        .await
        .unwrap();
    assert_eq!(
        live.metadata.labels.unwrap()[pallet::apply::plan::OWNER_LABEL],
        web
    );
    b.bds
        .delete(&claim, &DeleteParams::default())
        .await
        .expect("team B deletes its own bundle");
    agent::wait_bd_gone(admin, &claim).await;

    // Nothing of it reached team A's bundle.
    let bd = a.bds.get(web).await.unwrap();
    assert!(!bd.spec.paused);
    let annotations = bd.metadata.annotations.unwrap_or_default();
    assert!(
        !annotations.keys().any(|k| k.starts_with("pallet.dev/")),
        "{annotations:?}"
    );
}

/// Team A does each of them on its own bundle `web`, the agent handling every request.
async fn team_a_does_each(admin: &Client, agent: &Agent, a: &Team, web: &str, url: &str, v2: &str) {
    let kubeconfig = &a.kubeconfig;
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &a.namespace);
    admitted_cli(kubeconfig, &["pause", web, "--reason", "hotfix"]);
    wait_condition(admin, agent, web, "Paused", "True", "hotfix").await;
    admitted_cli(kubeconfig, &["resume", web]);
    wait_condition(admin, agent, web, "Paused", "False", "").await;
    // An edit: a new revision.
    a.bds
        .patch(
            web,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"sources": [{"kind": "git",
                "git": {"repository": url, "ref": {"commit": v2}}}]}})),
        )
        .await
        .expect("team A edits its own bundle");
    agent::wait_value(&cms, "web", "2").await;
    admitted_cli(
        kubeconfig,
        &["rollback", web, "--to", "1", "--wait", "--timeout", "60s"],
    );
    agent::wait_value(&cms, "web", "1").await;
    admitted_cli(kubeconfig, &["retry", web, "--wait", "--timeout", "60s"]);
    admitted_cli(
        kubeconfig,
        &["reconcile", web, "--wait", "--timeout", "60s"],
    );
    a.bds
        .patch(
            web,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
        )
        .await
        .expect("team A labels its own bundle");
    // Deleting it: the agent releases its finalizer (an update the policy leaves open) once it
    // has deleted the bundle's objects as team A's installer.
    a.bds
        .delete(web, &DeleteParams::default())
        .await
        .expect("team A deletes its own bundle");
    agent::wait_bd_gone(admin, web).await;
    assert!(cms.get_opt("web").await.unwrap().is_none());
}
