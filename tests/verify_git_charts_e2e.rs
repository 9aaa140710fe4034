//! End-to-end: `verify.provenance` and `verify.git` against the fixture file and git servers,
//! with the real signing clients: a chart packaged with `helm package --sign` (a gpg key) in a
//! chart repository, installed, and a tampered archive or provenance file refused; a git tag
//! signed with gpg and commits signed with ssh-keygen (git's `gpg.format` openpgp and ssh),
//! installed, and an unsigned commit pushed to the branch refused; and `--require-verification`.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/chart_repo.rs"]
mod chart_repo;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/signing.rs"]
mod signing;
mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use agent::{apply_bd_labelled, Agent};
use base64::Engine;
use chart_repo::ChartRepo;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DeleteParams, PostParams};
use kube::Client;
use pallet::api::{BundleDeployment, VerifiedSignature};
use serde_json::{json, Value};
use signing::{run, Gpg};

const AGENT_NAMESPACE: &str = "pallet-system";

async fn give_secret(client: &Client, name: &str, bd: &str, data: Value) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": AGENT_NAMESPACE,
                     "labels": {format!("access.pallet.dev/{bd}"): "true"}},
        "data": data,
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), AGENT_NAMESPACE)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

async fn wait_revision(
    client: &Client,
    agent: &Agent,
    name: &str,
    revision: i64,
) -> BundleDeployment {
    let api: Api<BundleDeployment> = Api::all(client.clone());
    cluster::poll_until(
        &format!("{name} Ready at revision {revision}"),
        Duration::from_secs(90),
        || {
            let api = api.clone();
            async move {
                let bd = api.get(name).await.map_err(|e| e.to_string())?;
                let status = bd.status.clone().unwrap_or_default();
                let ready = status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                if ready && status.active_revision == Some(revision) {
                    Ok(bd)
                } else {
                    Err(format!(
                        "active {:?}, conditions {:?}\nagent log:\n{}",
                        status.active_revision,
                        status.conditions,
                        agent.log_tail()
                    ))
                }
            }
        },
    )
    .await
}

fn signer(bd: &BundleDeployment) -> VerifiedSignature {
    let status = bd.status.clone().unwrap_or_default();
    status
        .revisions
        .iter()
        .find(|r| Some(r.number) == status.active_revision)
        .and_then(|r| r.sources.first())
        .and_then(|s| s.verified.clone())
        .unwrap_or_else(|| panic!("no verified signer in {:#?}", status.revisions))
}

async fn wait_refused(
    client: &Client,
    agent: &Agent,
    name: &str,
    part: &str,
    active: Option<i64>,
) -> String {
    let bd = agent::wait_condition(client, agent, name, "Unpacked", "False", part).await;
    let status = bd.status.unwrap_or_default();
    let unpacked = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Unpacked")
        .unwrap();
    assert_eq!(
        unpacked.reason, "VerificationFailed",
        "{}",
        unpacked.message
    );
    assert_eq!(status.active_revision, active, "{}", unpacked.message);
    unpacked.message.clone()
}

async fn config_map_value(
    client: &Client,
    namespace: &str,
    name: &str,
    key: &str,
) -> Option<String> {
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .unwrap()
        .and_then(|cm| cm.data)
        .and_then(|d| d.get(key).cloned())
}

async fn clean_up(client: &Client, names: &[&str], namespace: &str) {
    for name in names {
        let _ = Api::<BundleDeployment>::all(client.clone())
            .delete(name, &DeleteParams::default())
            .await;
        agent::wait_bd_gone(client, name).await;
    }
    let _ = Api::<Namespace>::all(client.clone())
        .delete(namespace, &DeleteParams::default())
        .await;
}

/// Packages the demo chart at `version` with `helm package --sign` into the repository.
fn package_signed(repo: &ChartRepo, gpg: &Gpg, version: &str) {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/charts/repo-demo");
    let keyring = gpg.secret_keyring();
    run(Command::new(chart_repo::helm())
        .arg("package")
        .arg(&chart)
        .args([
            "--version",
            version,
            "--sign",
            "--key",
            &gpg.uid,
            "--keyring",
        ])
        .arg(&keyring)
        .arg("--destination")
        .arg(&repo.dir));
}

#[tokio::test]
async fn charts_with_a_provenance_file_install_and_tampered_ones_do_not() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let files = fx.http_plain();
    let name = support::unique_name("vprov");
    let gpg = Gpg::generate("pallet charts <charts@pallet.invalid>");
    let repo = ChartRepo::new(fx, &name);
    package_signed(&repo, &gpg, "0.1.0");
    repo.index(None);
    give_secret(
        &client,
        &format!("{name}-keyring"),
        &name,
        json!({"pubring.gpg": b64(&gpg.public_binary())}),
    )
    .await;
    let agent = Agent::start_with(&name, &["--requeue-seconds", "1"]);
    let spec = |version: &str| {
        json!({
            "installNamespace": name,
            "format": "helm",
            "config": {"helm": {"releaseName": "r"}},
            "sources": [{
                "kind": "helmRepository",
                "helmRepository": {"url": repo.url(files), "chart": chart_repo::DEMO_CHART, "version": version},
                "verify": {"provenance": {"keyring": {"name": format!("{name}-keyring")}}},
            }],
        })
    };
    apply_bd_labelled(&client, &name, &name, spec("0.1.0")).await;
    let bd = wait_revision(&client, &agent, &name, 1).await;
    let by = signer(&bd);
    assert_eq!(by.method, "provenance");
    assert_eq!(by.key.as_deref(), Some(gpg.fingerprint.as_str()));
    assert_eq!(
        config_map_value(&client, &name, "r-demo", "chartVersion")
            .await
            .as_deref(),
        Some("0.1.0")
    );

    // 0.2.0: its archive replaced after signing (and the index rewritten to match it).
    package_signed(&repo, &gpg, "0.2.0");
    let archive = repo
        .dir
        .join(format!("{}-0.2.0.tgz", chart_repo::DEMO_CHART));
    let evil = tempfile::tempdir().unwrap();
    let evil_chart = evil.path().join(chart_repo::DEMO_CHART);
    std::fs::create_dir_all(evil_chart.join("templates")).unwrap();
    std::fs::write(
        evil_chart.join("Chart.yaml"),
        format!(
            "apiVersion: v2\nname: {}\nversion: 0.2.0\n",
            chart_repo::DEMO_CHART
        ),
    )
    .unwrap();
    std::fs::write(
        evil_chart.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: evil\n",
    )
    .unwrap();
    let other = ChartRepo::new(fx, &format!("{name}-x"));
    let replacement = other.package_dir(&evil_chart, "0.2.0");
    std::fs::copy(&replacement, &archive).unwrap();
    repo.index(None);
    apply_bd_labelled(&client, &name, &name, spec("0.2.0")).await;
    let message = wait_refused(&client, &agent, &name, "archive digest mismatch", Some(1)).await;
    assert!(
        message.contains(&chart_repo::file_sha256(&archive)),
        "{message}"
    );

    // 0.3.0: its provenance file edited (the signature no longer covers the text).
    package_signed(&repo, &gpg, "0.3.0");
    repo.index(None);
    let prov = repo
        .dir
        .join(format!("{}-0.3.0.tgz.prov", chart_repo::DEMO_CHART));
    let text = std::fs::read_to_string(&prov).unwrap();
    std::fs::write(
        &prov,
        text.replace("name: repo-demo", "name: repo-demo-evil"),
    )
    .unwrap();
    apply_bd_labelled(&client, &name, &name, spec("0.3.0")).await;
    wait_refused(&client, &agent, &name, "no key matched", Some(1)).await;

    // 0.4.0: unsigned (no provenance file).
    repo.package("0.4.0");
    repo.index(None);
    apply_bd_labelled(&client, &name, &name, spec("0.4.0")).await;
    wait_refused(&client, &agent, &name, "signature missing", Some(1)).await;
    assert_eq!(
        config_map_value(&client, &name, "r-demo", "chartVersion")
            .await
            .as_deref(),
        Some("0.1.0")
    );
    clean_up(&client, &[&name], &name).await;
}

/// A working clone of the fixture repository `bare`, with signing set up for `gpg` (tags) and
/// the SSH key at `ssh_key` (commits).
struct Work {
    dir: tempfile::TempDir,
    bare: std::path::PathBuf,
    gnupg: std::path::PathBuf,
    ssh_key: std::path::PathBuf,
}

impl Work {
    fn git(&self, args: &[&str]) -> String {
        signing::git_in(self.dir.path(), &self.gnupg, args)
    }

    /// Writes the ConfigMap holding `value` and commits it, SSH-signed when `signed`; pushes.
    fn commit(&self, value: &str, signed: bool) -> String {
        std::fs::write(
            self.dir.path().join("cm.yaml"),
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  value: \"{value}\"\n"),
        )
        .unwrap();
        self.git(&["add", "cm.yaml"]);
        let key = self.ssh_key.to_str().unwrap().to_string();
        if signed {
            self.git(&[
                "-c",
                "gpg.format=ssh",
                "-c",
                &format!("user.signingkey={key}"),
                "commit",
                "-S",
                "-q",
                "-m",
                value,
            ]);
        } else {
            self.git(&["commit", "-q", "-m", value]);
        }
        self.git(&["push", "-q", self.bare.to_str().unwrap(), "HEAD:main"]);
        self.git(&["rev-parse", "HEAD"])
    }

    /// An annotated tag signed with the gpg key; pushed.
    fn signed_tag(&self, tag: &str, fingerprint: &str) {
        self.git(&[
            "-c",
            "gpg.format=openpgp",
            "-c",
            &format!("user.signingkey={fingerprint}"),
            "tag",
            "-s",
            tag,
            "-m",
            tag,
        ]);
        self.git(&[
            "push",
            "-q",
            self.bare.to_str().unwrap(),
            &format!("refs/tags/{tag}"),
        ]);
    }
}

#[tokio::test]
async fn signed_git_tags_and_commits_install_and_an_unsigned_commit_does_not() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let server = fx.git_plain();
    let name = support::unique_name("vgit");
    let bare = fx.git_repo(&name);
    let gpg = Gpg::generate("pallet releases <releases@pallet.invalid>");
    let keys_dir = tempfile::tempdir().unwrap();
    let (ssh_key, ssh_public) = signing::ssh_key(keys_dir.path(), "dev");
    let work = Work {
        dir: tempfile::tempdir().unwrap(),
        bare: bare.path.clone(),
        gnupg: gpg.home().to_path_buf(),
        ssh_key,
    };
    work.git(&["init", "-q", "-b", "main"]);
    let first = work.commit("one", true);
    work.signed_tag("v1.0.0", &gpg.fingerprint);

    let (by_commit, by_tag) = (format!("{name}-head"), format!("{name}-tag"));
    for bd in [&by_commit, &by_tag] {
        give_secret(
            &client,
            &format!("{bd}-keys"),
            bd,
            json!({
                "release.asc": b64(gpg.public_armored().as_bytes()),
                "allowed_signers": b64(format!("dev@pallet.invalid {ssh_public}\n").as_bytes()),
            }),
        )
        .await;
    }
    let agent = Agent::start_with(&name, &["--requeue-seconds", "1"]);
    let spec = |bd: &str, namespace: &str, reference: Value, mode: &str| {
        json!({
            "installNamespace": namespace,
            "format": "plain",
            "sources": [{
                "kind": "git",
                "git": {"repository": bare.url(server), "ref": reference},
                "pollInterval": "1s",
                "verify": {"git": {"mode": mode, "keys": {"name": format!("{bd}-keys")}}},
            }],
        })
    };
    apply_bd_labelled(
        &client,
        &by_commit,
        &name,
        spec(&by_commit, &by_commit, json!({"branch": "main"}), "HEAD"),
    )
    .await;
    apply_bd_labelled(
        &client,
        &by_tag,
        &name,
        spec(&by_tag, &by_tag, json!({"tag": "v1.0.0"}), "TagAndHEAD"),
    )
    .await;
    let bd = wait_revision(&client, &agent, &by_commit, 1).await;
    let by = signer(&bd);
    assert_eq!(by.method, "git ssh");
    assert!(
        by.key.as_deref().unwrap_or("").starts_with("SHA256:"),
        "{by:?}"
    );
    let bd = wait_revision(&client, &agent, &by_tag, 1).await;
    let by = signer(&bd);
    assert_eq!(by.method, "git openpgp+ssh");
    assert_eq!(by.signed.as_deref(), Some("tag and commit"));
    assert!(
        by.key.as_deref().unwrap_or("").contains(&gpg.fingerprint),
        "{by:?}"
    );
    assert_eq!(
        config_map_value(&client, &by_tag, "app", "value")
            .await
            .as_deref(),
        Some("one")
    );

    // A signed commit moves the branch: installed.
    work.commit("two", true);
    wait_revision(&client, &agent, &by_commit, 2).await;
    assert_eq!(
        config_map_value(&client, &by_commit, "app", "value")
            .await
            .as_deref(),
        Some("two")
    );

    // Verified commits are not fetched again: the polls that follow are ref advertisements only
    // (GET info/refs), no pack request (POST git-upload-pack).
    let repo = format!("{name}.git");
    let requests = |method: &'static str| {
        let repo = repo.clone();
        async move {
            fx.requests(&[
                ("server", &server.name),
                ("repo", &repo),
                ("method", method),
            ])
            .await
            .len()
        }
    };
    let (packs, adverts) = (requests("POST").await, requests("GET").await);
    cluster::poll_until(
        "ten more ref advertisements",
        Duration::from_secs(60),
        || async {
            let now = requests("GET").await;
            if now >= adverts + 10 {
                Ok(())
            } else {
                Err(format!("{now} GET requests, from {adverts}"))
            }
        },
    )
    .await;
    assert_eq!(requests("POST").await, packs);

    // An unsigned commit pushed to the branch: refused, "two" stays enforced.
    let unsigned = work.commit("three", false);
    let message = wait_refused(&client, &agent, &by_commit, "signature missing", Some(2)).await;
    assert!(message.contains(&unsigned), "{message}");
    assert_eq!(
        config_map_value(&client, &by_commit, "app", "value")
            .await
            .as_deref(),
        Some("two")
    );
    assert_ne!(first, unsigned);
    clean_up(&client, &[&by_commit, &by_tag], &by_commit).await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&by_tag, &DeleteParams::default())
        .await;
}

#[tokio::test]
async fn an_agent_requiring_verification_refuses_sources_without_it() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let server = fx.git_plain();
    let name = support::unique_name("vreq");
    let bare = fx.git_repo(&name);
    bare.commit_files(
        "main",
        &[(
            "cm.yaml",
            b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  value: x\n",
        )],
        "c",
    );
    let agent = Agent::start_with(&name, &["--require-verification"]);
    apply_bd_labelled(
        &client,
        &name,
        &name,
        json!({
            "installNamespace": name,
            "format": "plain",
            "sources": [{"kind": "git", "git": {"repository": bare.url(server), "ref": {"branch": "main"}}}],
        }),
    )
    .await;
    let bd = agent::wait_condition(
        &client,
        &agent,
        &name,
        "Unpacked",
        "False",
        "--require-verification",
    )
    .await;
    let status = bd.status.unwrap_or_default();
    let unpacked = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Unpacked")
        .unwrap();
    assert_eq!(unpacked.reason, "VerificationRequired");
    assert_eq!(status.active_revision, None);
    // Nothing was fetched: the git server saw no request for the repository.
    assert_eq!(fx.git_requests(server, &name).await, 0);
    clean_up(&client, &[&name], &name).await;
}
