//! `pallet plan -f` and `pallet diff -f` read what a file names as the identity the agent would
//! act as, and only for a caller who could have created it (the admission policy's rule, asked
//! with a SelfSubjectAccessReview): a pull request's file reaches what that ServiceAccount may
//! read, never the CI job's own rights; a file naming an identity the caller may not act as is
//! refused before anything it names is read.

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
use std::process::Output;

use cli::output_text as text;
use identities::{grant, service_account};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use serde_json::{json, Value};

/// `pallet ARGS` as the user of `kubeconfig`, the fixture servers being on 127.0.0.1.
fn pallet_as(kubeconfig: &Path, args: &[&str]) -> Output {
    let mut args = args.to_vec();
    args.push("--allow-loopback-egress");
    cli::pallet_as(kubeconfig, &args)
}

/// A BundleDeployment file: a ConfigMap from the basic-auth HTTP server at `url`, with the
/// credentials of Secret `namespace/creds`, acting as `service_account` when given.
fn file(dir: &Path, name: &str, namespace: &str, url: &str, sa: Option<(&str, &str)>) -> String {
    let mut spec = json!({"installNamespace": namespace, "format": "plain",
        "sources": [{"kind": "http", "http": {"url": url,
            "auth": {"secret": {"namespace": namespace, "name": "creds"}}}}]});
    if let Some((namespace, name)) = sa {
        spec["serviceAccount"] = json!({"namespace": namespace, "name": name});
    }
    let bd: Value = json!({"apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
        "metadata": {"name": name}, "spec": spec});
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, serde_json::to_string(&bd).unwrap()).unwrap();
    path.to_string_lossy().into_owned()
}

#[tokio::test]
async fn plan_and_diff_read_as_the_files_service_account_once_the_caller_may_act_as_it() {
    let admin = cluster::client().await;
    cluster::install_crd(&admin).await;
    let fx = support::Fixtures::load();
    let test = support::unique_name("plan-as");
    let work = tempfile::tempdir().unwrap();
    identities::namespace(&admin, &test).await;
    // The bundle's ServiceAccount may write ConfigMaps (the dry run), not yet read the Secret.
    service_account(&admin, &test, "installer").await;
    grant(
        &admin,
        "installer",
        Some(&test),
        (&test, "installer"),
        identities::writes_config_maps(),
    )
    .await;
    let basic = fx.http_basic();
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "creds"},
        "stringData": {"username": basic.username.clone().unwrap(),
                       "password": basic.password.clone().unwrap()}}))
    .unwrap();
    Api::<Secret>::namespaced(admin.clone(), &test)
        .create(&Default::default(), &secret)
        .await
        .unwrap();
    let path = fx.put_file(
        &format!("{test}/bundle.yaml"),
        b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  v: \"1\"\n",
    );
    let url = basic.url_for(&path);
    // The CI job: reads BundleDeployments (the tenant role's verbs), nothing else yet.
    service_account(&admin, &test, "ci").await;
    let ci_grant = format!("{test}-ci");
    grant(
        &admin,
        &ci_grant,
        None,
        (&test, "ci"),
        json!([{"apiGroups": ["pallet.dev"], "resources": ["bundledeployments"],
                "verbs": ["get", "list", "watch"]}]),
    )
    .await;
    let ci = identities::token_kubeconfig(&admin, &test, "ci", work.path()).await;
    let admin_kubeconfig = cluster::kubeconfig_path();
    let own = file(
        work.path(),
        &format!("{test}-web"),
        &test,
        &url,
        Some((&test, "installer")),
    );
    let requests = || fx.http_requests(basic, &path);

    let run = async {
        // The CI job may not act as the installer: nothing the file names is read.
        let out = pallet_as(&ci, &["plan", "-f", &own]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "names spec.serviceAccount {test}/installer, and you may not act as it"
            )) && stderr.contains("so nothing it names was read")
                && stderr.contains(&format!(
                    "impersonate on serviceaccounts (resourceNames: [installer]) in namespace {test}"
                )),
            "{stderr}"
        );
        assert_eq!(requests().await, 0, "the source was fetched");

        // An administrator may read the Secret, but the plan reads it as the installer, which
        // may not: refused by the API server, naming the installer.
        let out = pallet_as(&admin_kubeconfig, &["plan", "-f", &own]);
        assert!(!out.status.success(), "{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("secret {test}/creds"))
                && stderr.contains(&format!("system:serviceaccount:{test}:installer")),
            "{stderr}"
        );
        assert_eq!(
            requests().await,
            0,
            "the source was fetched without its Secret"
        );

        // Once the CI job may impersonate the installer and the installer may read the Secret,
        // the plan runs, as the installer.
        grant(
            &admin,
            "ci-acts-as-installer",
            Some(&test),
            (&test, "ci"),
            json!([{"apiGroups": [""], "resources": ["serviceaccounts"],
                    "resourceNames": ["installer"], "verbs": ["impersonate"]}]),
        )
        .await;
        grant(
            &admin,
            "installer-reads-creds",
            Some(&test),
            (&test, "installer"),
            json!([{"apiGroups": [""], "resources": ["secrets"],
                    "resourceNames": ["creds"], "verbs": ["get"]}]),
        )
        .await;
        let planned = cluster::poll_until(
            "the grants in force",
            std::time::Duration::from_secs(30),
            || {
                let out = pallet_as(&ci, &["plan", "-f", &own]);
                async move {
                    if out.status.success() {
                        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
                    } else {
                        Err(text(&out))
                    }
                }
            },
        )
        .await;
        assert!(
            planned.contains(&format!("create     ConfigMap {test}/web")),
            "{planned}"
        );
        assert!(requests().await > 0);
        let out = pallet_as(&ci, &["diff", "-f", &own]);
        assert_eq!(out.status.code(), Some(5), "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout)
                .contains(&format!("+++ bundle/ConfigMap/{test}/web")),
            "{}",
            text(&out)
        );

        // A pull request naming another identity, or none, reaches nothing through the job.
        let gc = file(
            work.path(),
            "gc",
            &test,
            &url,
            Some(("kube-system", "generic-garbage-collector")),
        );
        let bare = file(work.path(), "bare", &test, &url, None);
        let before = requests().await;
        for (command, path, identity) in [
            (
                "plan",
                &gc,
                "spec.serviceAccount kube-system/generic-garbage-collector",
            ),
            (
                "diff",
                &gc,
                "spec.serviceAccount kube-system/generic-garbage-collector",
            ),
            (
                "plan",
                &bare,
                "no spec.serviceAccount (the agent would install it as itself)",
            ),
            (
                "diff",
                &bare,
                "no spec.serviceAccount (the agent would install it as itself)",
            ),
        ] {
            let out = pallet_as(&ci, &[command, "-f", path]);
            assert_eq!(
                out.status.code(),
                Some(1),
                "{command} {path}: {}",
                text(&out)
            );
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains(&format!("names {identity}, and you may not act as it")),
                "{command} {path}: {stderr}"
            );
        }
        assert_eq!(
            requests().await,
            before,
            "a refused file's source was fetched"
        );
    };
    run.await;
    identities::delete_cluster_grant(&admin, &ci_grant).await;
    identities::delete_namespace(&admin, &test).await;
}
