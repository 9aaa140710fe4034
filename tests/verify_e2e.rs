//! End-to-end: `verify.cosign` against the fixture registry, with signatures made by the real
//! cosign (`tools/cosign.sh build`): images and an OCI Helm chart signed with a key (both the
//! Sigstore bundle referrer and the `.sig` tag layouts), re-pushed unsigned or signed with another
//! key and refused while the previous revision stays enforced; keyless signatures with a
//! certificate and log entry made by the test against its own trusted root (matched and
//! mismatched identities); a semver range whose newest tag is unsigned; and the requests
//! verification costs, counted by the fixture registry.

// Test clients of the local fixture servers and the agent's own endpoints: whole answers are
// read there, not in the agent (see clippy.toml).
#![allow(clippy::disallowed_methods)]

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cli.rs"]
mod cli;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/signing.rs"]
mod signing;
mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use agent::{apply_bd_labelled, Agent};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DeleteParams, PostParams};
use kube::Client;
use pallet::api::{BundleDeployment, VerifiedSignature};
use serde_json::{json, Value};
use signing::{CosignKey, Keyless, Layout};
use support::Server;

const AGENT_NAMESPACE: &str = "pallet-system";

/// A plain bundle: one ConfigMap `app` whose `value` is `value`.
fn bundle_dir(value: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cm.yaml"),
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  value: \"{value}\"\n"),
    )
    .unwrap();
    dir
}

/// Pushes the bundle holding `value` to `repo:tag`; returns `host/repo@digest`.
async fn push(reg: &Server, repo: &str, tag: &str, value: &str) -> String {
    let fx = support::Fixtures::load();
    let dir = bundle_dir(value);
    let digest = fx
        .push_dir_as_image(reg, repo, tag, dir.path(), &reg.registry_auth())
        .await
        .unwrap();
    format!("{}/{repo}@{digest}", reg.host)
}

/// A Secret of the agent's namespace given to BundleDeployment `bd`.
async fn give_secret(client: &Client, name: &str, bd: &str, data: Value) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": AGENT_NAMESPACE,
                     "labels": {format!("access.pallet.dev/{bd}"): "true"}},
        "stringData": data,
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), AGENT_NAMESPACE)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// A ConfigMap of the agent's namespace given to BundleDeployment `bd`.
async fn give_config_map(client: &Client, name: &str, bd: &str, data: Value) {
    let map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": AGENT_NAMESPACE,
                     "labels": {format!("access.pallet.dev/{bd}"): "true"}},
        "data": data,
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), AGENT_NAMESPACE)
        .create(&PostParams::default(), &map)
        .await
        .unwrap();
}

/// The value the ConfigMap `app` of `namespace` holds.
async fn live_value(client: &Client, namespace: &str) -> Option<String> {
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get_opt("app")
        .await
        .unwrap()
        .and_then(|cm| cm.data)
        .and_then(|d| d.get("value").cloned())
}

/// Waits until `name` is Ready at `revision`; returns it.
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

/// The signer recorded for the active revision's first source.
fn signer(bd: &BundleDeployment) -> VerifiedSignature {
    let status = bd.status.clone().unwrap_or_default();
    let active = status.active_revision;
    status
        .revisions
        .iter()
        .find(|r| Some(r.number) == active)
        .and_then(|r| r.sources.first())
        .and_then(|s| s.verified.clone())
        .unwrap_or_else(|| panic!("no verified signer in {:#?}", status.revisions))
}

/// Waits for `Unpacked=False` reason VerificationFailed with `part` in its message; checks that
/// revision `active` is still the active one.
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

/// Requests to the registry for `repo` that look for signatures (referrers, the referrers tag,
/// the `.sig` tag and the blobs they name are all under the repository; manifests by tag are
/// resolutions).
async fn signature_requests(reg: &Server, repo: &str) -> usize {
    let fx = support::Fixtures::load();
    fx.requests(&[("server", &reg.name), ("repo", repo)])
        .await
        .iter()
        .filter(|r| r.path.contains("/referrers/") || r.path.contains("/manifests/sha256-"))
        .count()
}

#[tokio::test]
async fn images_signed_with_a_key_install_and_unsigned_or_foreign_ones_do_not() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let reg = fx.registry_plain();
    let name = support::unique_name("vkey");
    let repo = format!("{name}/app");
    let trusted = CosignKey::generate();
    let other = CosignKey::generate();

    // v1, signed with the trusted key as cosign v3 signs by default: a bundle referrer.
    let v1 = push(reg, &repo, "stable", "one").await;
    trusted.sign(&v1, Layout::Bundle, &[]);
    give_secret(
        &client,
        &format!("{name}-keys"),
        &name,
        json!({"cosign.pub": trusted.public_pem}),
    )
    .await;
    let agent = Agent::start_with(
        &name,
        &["--plain-http-registry", &reg.host, "--requeue-seconds", "1"],
    );
    let spec = json!({
        "installNamespace": name,
        "format": "plain",
        "sources": [{
            "kind": "image",
            "image": {"ref": format!("{}/{repo}:stable", reg.host)},
            "pollInterval": "1s",
            "verify": {"cosign": {"publicKeys": {"name": format!("{name}-keys")}}},
        }],
    });
    apply_bd_labelled(&client, &name, &name, spec.clone()).await;
    let bd = wait_revision(&client, &agent, &name, 1).await;
    assert_eq!(live_value(&client, &name).await.as_deref(), Some("one"));
    let by = signer(&bd);
    assert_eq!(by.method, "cosign");
    assert_eq!(by.signed.as_deref(), Some("bundle"));
    assert_eq!(by.key.as_deref(), Some(trusted.fingerprint().as_str()));
    let shown = format!("verified: cosign key {} (bundle)", trusted.fingerprint());
    let traced = cli::pallet_ok(&["trace", "configmap/app", "-n", &name]);
    assert!(traced.contains(&shown), "{traced}");

    // `pallet plan --pin` verifies too, shows who signed, and keeps `verify` in the pin.
    let file = tempfile::NamedTempFile::new().unwrap();
    let doc = json!({"apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
                     "metadata": {"name": name}, "spec": spec});
    std::fs::write(file.path(), serde_json::to_string(&doc).unwrap()).unwrap();
    let planned = cli::pallet(&[
        "plan",
        "-f",
        file.path().to_str().unwrap(),
        "--pin",
        "--plain-http-registry",
        &reg.host,
        "--allow-loopback-egress",
    ]);
    let (table, pinned) = (
        String::from_utf8_lossy(&planned.stderr),
        String::from_utf8_lossy(&planned.stdout),
    );
    assert!(
        planned.status.success() && table.contains(&shown),
        "{table}"
    );
    assert!(
        pinned.contains(v1.as_str()) && pinned.contains("publicKeys"),
        "{pinned}"
    );

    // Verified once: later polls resolve the tag (a manifest HEAD each) and look for no
    // signature again.
    let looked = signature_requests(reg, &repo).await;
    let heads_before = fx
        .requests(&[("server", &reg.name), ("repo", &repo), ("method", "HEAD")])
        .await
        .len();
    cluster::poll_until(
        "five more resolutions of the tag",
        Duration::from_secs(60),
        || async {
            let heads = fx
                .requests(&[("server", &reg.name), ("repo", &repo), ("method", "HEAD")])
                .await
                .len();
            if heads >= heads_before + 5 {
                Ok(())
            } else {
                Err(format!("{heads} HEAD requests, from {heads_before}"))
            }
        },
    )
    .await;
    assert_eq!(signature_requests(reg, &repo).await, looked);

    // The same tag re-pushed unsigned: refused; revision 1 stays applied and enforced.
    let v2 = push(reg, &repo, "stable", "two").await;
    let message = wait_refused(&client, &agent, &name, "signature missing", Some(1)).await;
    let digest = v2.rsplit('@').next().unwrap();
    assert!(
        message.contains(digest) && message.contains(&repo),
        "{message}"
    );
    Api::<ConfigMap>::namespaced(client.clone(), &name)
        .patch(
            "app",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"data": {"value": "drifted"}})),
        )
        .await
        .unwrap();
    cluster::poll_until(
        "revision 1 enforced again",
        Duration::from_secs(60),
        || async {
            match live_value(&client, &name).await.as_deref() {
                Some("one") => Ok(()),
                other => Err(format!("value {other:?}")),
            }
        },
    )
    .await;

    // Signed with another key (cosign v2's signature tag): no key matched.
    other.sign(&v2, Layout::SignatureTag, &[]);
    let message = wait_refused(&client, &agent, &name, "no key matched", Some(1)).await;
    assert!(message.contains(&trusted.fingerprint()), "{message}");

    // Signed with the trusted key in the signature tag layout too: installed.
    trusted.sign(&v2, Layout::SignatureTag, &[]);
    let bd = wait_revision(&client, &agent, &name, 2).await;
    assert_eq!(live_value(&client, &name).await.as_deref(), Some("two"));
    assert_eq!(signer(&bd).signed.as_deref(), Some("signature tag"));
    clean_up(&client, &[&name], &name).await;
}

/// Packages a one-ConfigMap chart at `version` and pushes it with `helm push` to
/// `oci://<registry>/<prefix>`; returns the chart's digest reference.
fn push_chart(reg: &Server, prefix: &str, version: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("info");
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: info\nversion: 0.0.0\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  value: {{ .Chart.Version | quote }}\n",
    )
    .unwrap();
    let helm = Path::new(&std::env::var("HOME").unwrap()).join(".cache/pallet/bin/helm");
    signing::run(
        Command::new(&helm)
            .arg("package")
            .arg(&dir)
            .args(["--version", version, "--destination"])
            .arg(tmp.path()),
    );
    let out = Command::new(&helm)
        .arg("push")
        .arg(tmp.path().join(format!("info-{version}.tgz")))
        .arg(format!("oci://{}/{prefix}", reg.host))
        .arg("--plain-http")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let digest = text
        .split_whitespace()
        .find(|w| w.starts_with("sha256:"))
        .unwrap_or_else(|| panic!("no digest in helm push's output: {text}"));
    format!("{}/{prefix}/info@{digest}", reg.host)
}

#[tokio::test]
async fn an_oci_chart_signed_with_a_key_installs_and_an_unsigned_newer_one_does_not() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let reg = fx.registry_plain();
    let name = support::unique_name("vchart");
    let key = CosignKey::generate();
    let chart = push_chart(reg, &name, "1.0.0");
    key.sign(&chart, Layout::Bundle, &[]);
    give_secret(
        &client,
        &format!("{name}-keys"),
        &name,
        json!({"cosign.pub": key.public_pem}),
    )
    .await;
    let agent = Agent::start_with(
        &name,
        &["--plain-http-registry", &reg.host, "--requeue-seconds", "1"],
    );
    apply_bd_labelled(
        &client,
        &name,
        &name,
        json!({
            "installNamespace": name,
            "format": "helm",
            "sources": [{
                "kind": "helmRepository",
                "helmRepository": {"url": format!("oci://{}/{name}", reg.host), "chart": "info", "version": "1.x"},
                "pollInterval": "1s",
                "verify": {"cosign": {"publicKeys": {"name": format!("{name}-keys")}}},
            }],
        }),
    )
    .await;
    let bd = wait_revision(&client, &agent, &name, 1).await;
    assert_eq!(live_value(&client, &name).await.as_deref(), Some("1.0.0"));
    assert_eq!(signer(&bd).key.as_deref(), Some(key.fingerprint().as_str()));

    // 1.1.0 matches the range and is unsigned: refused, 1.0.0 stays.
    let newer = push_chart(reg, &name, "1.1.0");
    let message = wait_refused(&client, &agent, &name, "signature missing", Some(1)).await;
    assert!(
        message.contains(newer.rsplit('@').next().unwrap()),
        "{message}"
    );
    assert_eq!(live_value(&client, &name).await.as_deref(), Some("1.0.0"));
    clean_up(&client, &[&name], &name).await;
}

#[tokio::test]
async fn a_range_whose_newest_tag_is_unsigned_installs_nothing_and_says_so() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let reg = fx.registry_plain();
    let name = support::unique_name("vrange");
    let repo = format!("{name}/app");
    let key = CosignKey::generate();
    let signed = push(reg, &repo, "1.0.0", "one").await;
    key.sign(&signed, Layout::Bundle, &[]);
    push(reg, &repo, "1.1.0", "unsigned").await;
    give_secret(
        &client,
        &format!("{name}-keys"),
        &name,
        json!({"cosign.pub": key.public_pem}),
    )
    .await;
    let agent = Agent::start_with(&name, &["--plain-http-registry", &reg.host]);
    apply_bd_labelled(
        &client,
        &name,
        &name,
        json!({
            "installNamespace": name,
            "format": "plain",
            "sources": [{
                "kind": "image",
                "image": {"ref": format!("{}/{repo}", reg.host), "semver": ">=1.0.0"},
                "verify": {"cosign": {"publicKeys": {"name": format!("{name}-keys")}}},
            }],
        }),
    )
    .await;
    let message = wait_refused(&client, &agent, &name, "signature missing", None).await;
    assert!(message.contains("tag 1.1.0"), "{message}");
    assert_eq!(live_value(&client, &name).await, None);
    clean_up(&client, &[&name], &name).await;
}

/// Signs `reference` keylessly in the signature tag layout: cosign signs with the certificate's
/// key and attaches the certificate and the chain of `issuing`; the test, acting as the log of
/// `log`, adds the log entry.
async fn sign_keyless(
    reg: &Server,
    repo: &str,
    reference: &str,
    (issuing, log): (&Keyless, &Keyless),
    signer: &signing::Signer,
    log_index: i64,
) {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("cert.pem");
    let chain = dir.path().join("chain.pem");
    std::fs::write(&cert, &signer.certificate_pem).unwrap();
    std::fs::write(&chain, issuing.ca_pem()).unwrap();
    let key = CosignKey::import(&signer.private_pem);
    key.sign(
        reference,
        Layout::SignatureTag,
        &[
            "--certificate",
            cert.to_str().unwrap(),
            "--certificate-chain",
            chain.to_str().unwrap(),
        ],
    );
    // The log's part: an entry for the signature, its signed entry timestamp in the layer's
    // `dev.sigstore.cosign/bundle` annotation, as cosign writes it after uploading.
    let fx = support::Fixtures::load();
    let digest = reference.rsplit('@').next().unwrap();
    let tag = format!("{}.sig", digest.replace(':', "-"));
    let client = fx.oci_client(reg);
    let sig_ref = support::image_ref(reg, repo, &tag);
    client
        .auth(
            &sig_ref,
            &reg.registry_auth(),
            oci_client::RegistryOperation::Pull,
        )
        .await
        .unwrap();
    let (raw, _) = client
        .pull_manifest_raw(
            &sig_ref,
            &reg.registry_auth(),
            &["application/vnd.oci.image.manifest.v1+json"],
        )
        .await
        .unwrap();
    let mut manifest: Value = serde_json::from_slice(&raw).unwrap();
    let layer: oci_client::manifest::OciDescriptor =
        serde_json::from_value(manifest["layers"][0].clone()).unwrap();
    let mut payload = Vec::new();
    client
        .pull_blob(&sig_ref, &layer, &mut payload)
        .await
        .unwrap();
    let signature = manifest["layers"][0]["annotations"]["dev.cosignproject.cosign/signature"]
        .as_str()
        .unwrap()
        .to_string();
    let entry = log.log_entry(&payload, &signature, &signer.certificate_pem, log_index);
    manifest["layers"][0]["annotations"]["dev.sigstore.cosign/bundle"] = json!(entry);
    fx.push_manifest_bytes(
        reg,
        repo,
        &tag,
        "application/vnd.oci.image.manifest.v1+json",
        serde_json::to_vec(&manifest).unwrap(),
        &reg.registry_auth(),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn keyless_signatures_install_for_allowed_identities_only() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let reg = fx.registry_plain();
    let name = support::unique_name("vkeyless");
    let repo = format!("{name}/app");
    let ca = Keyless::new();
    let release = ca.signer("https://issuer.pallet.invalid", "release@pallet.invalid");
    let image = push(reg, &repo, "v1", "keyless").await;
    sign_keyless(reg, &repo, &image, (&ca, &ca), &release, 4242).await;
    let (allowed, mismatched) = (format!("{name}-ok"), format!("{name}-other"));
    for bd in [&allowed, &mismatched] {
        give_config_map(
            &client,
            &format!("{bd}-root"),
            bd,
            json!({"trusted_root.json": ca.trusted_root()}),
        )
        .await;
    }
    let agent = Agent::start_with(&name, &["--plain-http-registry", &reg.host]);
    let spec = |bd: &str, identity: Value| {
        json!({
            "installNamespace": name,
            "format": "plain",
            "sources": [{
                "kind": "image",
                "image": {"ref": format!("{}/{repo}:v1", reg.host)},
                "verify": {"cosign": {"keyless": {
                    "trustedRoot": {"kind": "ConfigMap", "name": format!("{bd}-root")},
                    "identities": [identity],
                }}},
            }],
        })
    };
    apply_bd_labelled(
        &client,
        &allowed,
        &name,
        spec(&allowed, json!({"issuer": "https://issuer.pallet.invalid", "subjectRegExp": "^release@pallet\\.invalid$"})),
    )
    .await;
    apply_bd_labelled(
        &client,
        &mismatched,
        &name,
        spec(&mismatched, json!({"issuer": "https://issuer.pallet.invalid", "subject": "someone-else@pallet.invalid"})),
    )
    .await;
    let bd = wait_revision(&client, &agent, &allowed, 1).await;
    let by = signer(&bd);
    assert_eq!(by.issuer.as_deref(), Some("https://issuer.pallet.invalid"));
    assert_eq!(by.subject.as_deref(), Some("release@pallet.invalid"));
    assert_eq!(by.log_index, Some(4242));
    assert_eq!(live_value(&client, &name).await.as_deref(), Some("keyless"));
    let traced = cli::pallet_ok(&["trace", "configmap/app", "-n", &name]);
    let shown = "verified: cosign issuer https://issuer.pallet.invalid subject release@pallet.invalid log index 4242 (signature tag)";
    assert!(traced.contains(shown), "{traced}");
    let message = wait_refused(&client, &agent, &mismatched, "identity mismatch", None).await;
    assert!(message.contains("release@pallet.invalid"), "{message}");

    // A certificate from another CA, with the log's entry: not trusted.
    let other_ca = Keyless::new();
    let stranger = other_ca.signer("https://issuer.pallet.invalid", "release@pallet.invalid");
    let other_image = push(reg, &repo, "v2", "stranger").await;
    sign_keyless(reg, &repo, &other_image, (&other_ca, &ca), &stranger, 4243).await;
    apply_bd_labelled(
        &client,
        &allowed,
        &name,
        json!({
            "installNamespace": name,
            "format": "plain",
            "sources": [{
                "kind": "image",
                "image": {"ref": format!("{}/{repo}:v2", reg.host)},
                "verify": {"cosign": {"keyless": {
                    "trustedRoot": {"kind": "ConfigMap", "name": format!("{allowed}-root")},
                    "identities": [{"issuer": "https://issuer.pallet.invalid", "subject": "release@pallet.invalid"}],
                }}},
            }],
        }),
    )
    .await;
    wait_refused(
        &client,
        &agent,
        &allowed,
        "certificate not trusted",
        Some(1),
    )
    .await;
    clean_up(&client, &[&allowed, &mismatched], &name).await;
}
