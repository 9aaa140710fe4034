//! OCI artifacts other than container images, pushed by the real clients to the fixture registry
//! and read back by the image source: Helm charts (`helm push`, the oracle helm binary), Flux-style
//! artifacts (`pallet push --media-type …`), ORAS directories and files (the ORAS CLI built by
//! `tools/oras.sh`); `image.semver` over the tag list; `oci://` chart repositories.

// Test clients of the local fixture servers and the agent's own endpoints: whole answers are
// read there, not in the agent (see clippy.toml).
#![allow(clippy::disallowed_methods)]

#[path = "support/sources_extra.rs"]
mod sources_extra;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use futures::StreamExt;
use oci_client::secrets::RegistryAuth;
use pallet::api::{HelmRepositorySource, Source, SourceKind};
use pallet::source::Limits;
use serde_json::json;
use sources_extra::*;
use support::{unique_name, Descriptor, Fixtures, Server};

fn tool(name: &str, built_by: &str) -> PathBuf {
    let path = PathBuf::from(std::env::var("HOME").unwrap())
        .join(".cache/pallet/bin")
        .join(name);
    assert!(path.is_file(), "{name} is built by {built_by}");
    path
}

fn helm() -> PathBuf {
    tool("helm", "tools/helm.sh build")
}

fn oras() -> PathBuf {
    tool("oras", "tools/oras.sh build")
}

/// Runs `command`, panicking with its output when it fails; returns stdout and stderr together.
fn run(command: &mut Command) -> String {
    let out = command.output().expect("command runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{command:?} failed: {text}");
    text
}

/// The `Digest: sha256:…` line helm and oras print after a push.
fn pushed_digest(output: &str) -> String {
    output
        .lines()
        .find_map(|l| l.trim().strip_prefix("Digest: "))
        .unwrap_or_else(|| panic!("no digest in {output}"))
        .trim()
        .to_string()
}

/// A GnuPG home with an unprotected signing key "pallet test", and its secret keyring as helm
/// reads it (`helm package --sign --keyring`).
fn signing_keyring(dir: &Path) -> PathBuf {
    let home = dir.join("gnupg");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let params = dir.join("key-params");
    std::fs::write(
        &params,
        "%no-protection\nKey-Type: RSA\nKey-Length: 2048\nName-Real: pallet test\n\
         Name-Email: test@pallet.dev\nExpire-Date: 0\n%commit\n",
    )
    .unwrap();
    run(Command::new("gpg")
        .env("GNUPGHOME", &home)
        .args(["--batch", "--gen-key"])
        .arg(&params));
    let secret = Command::new("gpg")
        .env("GNUPGHOME", &home)
        .args(["--batch", "--export-secret-keys"])
        .output()
        .unwrap();
    assert!(secret.status.success() && !secret.stdout.is_empty());
    let keyring = dir.join("secring.gpg");
    std::fs::write(&keyring, secret.stdout).unwrap();
    keyring
}

/// Packages testdata/charts/hooks at `version` (signed when `keyring` is given) and pushes it
/// with `helm push` to `oci://<registry>/<prefix>`; returns the manifest digest.
fn helm_push_chart(reg: &Server, prefix: &str, version: &str, keyring: Option<&Path>) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/charts/hooks");
    let mut package = Command::new(helm());
    package
        .arg("package")
        .arg(&chart)
        .args(["--version", version, "--destination"])
        .arg(tmp.path());
    if let Some(keyring) = keyring {
        package
            .args(["--sign", "--key", "pallet test", "--keyring"])
            .arg(keyring);
    }
    run(&mut package);
    let tgz = tmp.path().join(format!("hooks-{version}.tgz"));
    let out = run(Command::new(helm())
        .arg("push")
        .arg(&tgz)
        .arg(format!("oci://{}/{prefix}", reg.host))
        .arg("--plain-http"));
    pushed_digest(&out)
}

fn semver_source(repository: &str, range: &str) -> Source {
    let mut source = image_source(repository);
    if let Some(image) = source.image.as_mut() {
        image.semver = Some(range.into());
    }
    source
}

fn helm_oci_source(url: &str, chart: &str, version: Option<&str>, digest: Option<&str>) -> Source {
    Source {
        kind: SourceKind::HelmRepository,
        destination: String::new(),
        image: None,
        git: None,
        http: None,
        helm_repository: Some(HelmRepositorySource {
            url: url.into(),
            chart: chart.into(),
            version: version.map(Into::into),
            digest: digest.map(Into::into),
            auth: None,
            ca_secret: None,
            insecure_skip_tls_verify: false,
            allow_cross_host_redirects: false,
        }),
        poll_interval: None,
        verify: None,
    }
}

#[tokio::test]
async fn a_chart_pushed_by_helm_is_fetched_with_chart_yaml_at_the_root_and_provenance_ignored() {
    let fx = Fixtures::load();
    let reg = fx.registry_plain();
    let prefix = unique_name("charts");
    let keys = tempfile::tempdir().unwrap();
    let keyring = signing_keyring(keys.path());
    let digest = helm_push_chart(reg, &prefix, "0.1.1", Some(&keyring));
    let (_tmp, fetcher) = fetcher(Limits::default());
    let got = fetcher
        .fetch(
            &image_source(&format!("{}/{prefix}/hooks:0.1.1", reg.host)),
            &no_secrets(),
        )
        .await
        .unwrap();
    assert_eq!(
        got.resolved,
        format!("{}/{prefix}/hooks@{digest}", reg.host)
    );
    // The provenance layer (pushed first by helm) does not land in the tree.
    assert_eq!(
        list_tree(&got.path),
        [
            "Chart.yaml",
            "templates/_helpers.tpl",
            "templates/app.yaml",
            "templates/hooks.yaml",
            "values.yaml"
        ]
    );
    let chart_yaml = std::fs::read_to_string(got.path.join("Chart.yaml")).unwrap();
    assert!(chart_yaml.contains("version: 0.1.1"), "{chart_yaml}");
}

#[tokio::test]
async fn a_flux_style_artifact_pushed_by_pallet_push_unpacks_at_the_root() {
    let fx = Fixtures::load();
    let reg = fx.registry_plain();
    let repo = unique_name("flux");
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("apps")).unwrap();
    std::fs::write(dir.path().join("apps/cm.yaml"), "kind: ConfigMap\n").unwrap();
    let reference = format!("{}/{repo}:v1", reg.host);
    let out = run(Command::new(env!("CARGO_BIN_EXE_pallet")).args([
        "push",
        dir.path().to_str().unwrap(),
        &reference,
        "--plain-http",
        "--media-type",
        "application/vnd.cncf.flux.content.v1.tar+gzip",
        "--config-media-type",
        "application/vnd.cncf.flux.config.v1+json",
        "--artifact-type",
        "application/vnd.example.bundle.v1",
    ]));
    // The manifest says what it is.
    let manifest =
        run(Command::new(oras()).args(["manifest", "fetch", "--plain-http", &reference]));
    let manifest: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.cncf.flux.config.v1+json"
    );
    assert_eq!(
        manifest["layers"][0]["mediaType"],
        "application/vnd.cncf.flux.content.v1.tar+gzip"
    );
    assert_eq!(
        manifest["artifactType"],
        "application/vnd.example.bundle.v1"
    );
    let (_tmp, fetcher) = fetcher(Limits::default());
    let got = fetcher
        .fetch(&image_source(&reference), &no_secrets())
        .await
        .unwrap();
    assert_eq!(got.resolved, out.trim());
    assert_eq!(list_tree(&got.path), ["apps/cm.yaml"]);
}

#[tokio::test]
async fn oras_directories_and_files_land_as_oras_pull_writes_them() {
    let fx = Fixtures::load();
    let reg = fx.registry_plain();
    let repo = unique_name("oras");
    let work = tempfile::tempdir().unwrap();
    let bundle = work.path().join("bundle");
    std::fs::create_dir_all(bundle.join("sub")).unwrap();
    std::fs::write(bundle.join("a.yaml"), "a: 1\n").unwrap();
    std::fs::write(bundle.join("sub/b.yaml"), "b: 2\n").unwrap();
    std::fs::write(work.path().join("single.yaml"), "kind: ConfigMap\n").unwrap();
    let push = |tag: &str, args: &[&str], cwd: &Path| {
        let out = run(Command::new(oras())
            .current_dir(cwd)
            .args([
                "push",
                "--plain-http",
                &format!("{}/{repo}:{tag}", reg.host),
            ])
            .args(args));
        pushed_digest(&out)
    };
    // A directory by name, the directory's content as `.`, a single file, and a directory next
    // to a file.
    push("dir", &["bundle"], work.path());
    push("dot", &["."], &bundle);
    push("file", &["single.yaml"], work.path());
    push(
        "both",
        &["bundle", "single.yaml:application/yaml"],
        work.path(),
    );
    let (_tmp, fetcher) = fetcher(Limits::default());
    for (tag, expected) in [
        ("dir", vec!["bundle/a.yaml", "bundle/sub/b.yaml"]),
        ("dot", vec!["a.yaml", "sub/b.yaml"]),
        ("file", vec!["single.yaml"]),
        (
            "both",
            vec!["bundle/a.yaml", "bundle/sub/b.yaml", "single.yaml"],
        ),
    ] {
        let got = fetcher
            .fetch(
                &image_source(&format!("{}/{repo}:{tag}", reg.host)),
                &no_secrets(),
            )
            .await
            .unwrap_or_else(|e| panic!("{tag}: {e}"));
        assert_eq!(list_tree(&got.path), expected, "{tag}");
        // The same tree `oras pull` writes.
        let pulled = work.path().join(format!("pulled-{tag}"));
        std::fs::create_dir_all(&pulled).unwrap();
        run(Command::new(oras()).current_dir(&pulled).args([
            "pull",
            "--plain-http",
            &format!("{}/{repo}:{tag}", reg.host),
        ]));
        assert_eq!(list_tree(&pulled), expected, "oras pull {tag}");
    }
    let got = fetcher
        .fetch(
            &image_source(&format!("{}/{repo}:file", reg.host)),
            &no_secrets(),
        )
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(got.path.join("single.yaml")).unwrap(),
        "kind: ConfigMap\n"
    );
}

#[tokio::test]
async fn an_unusable_artifact_is_refused_naming_its_media_types() {
    let fx = Fixtures::load();
    let reg = fx.registry_plain();
    let repo = unique_name("unusable");
    let client = fx.oci_client(reg);
    let target = support::image_ref(reg, &repo, "v1");
    client
        .auth(
            &target,
            &RegistryAuth::Anonymous,
            oci_client::RegistryOperation::Push,
        )
        .await
        .unwrap();
    let config = b"{}".to_vec();
    let blob = b"\x00\x01 not an archive and no title".to_vec();
    for data in [&config, &blob] {
        client
            .push_blob(&target, data.clone(), &support::sha256_digest(data))
            .await
            .unwrap();
    }
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": support::media::OCI_MANIFEST,
        "artifactType": "application/vnd.example.thing",
        "config": Descriptor::of("application/vnd.oci.empty.v1+json", &config).to_json(),
        "layers": [Descriptor::of("application/x-thing", &blob).to_json()],
    });
    fx.push_manifest_bytes(
        reg,
        &repo,
        "v1",
        support::media::OCI_MANIFEST,
        serde_json::to_vec(&manifest).unwrap(),
        &RegistryAuth::Anonymous,
    )
    .await
    .unwrap();
    // And one with no layers at all.
    let empty = json!({
        "schemaVersion": 2,
        "mediaType": support::media::OCI_MANIFEST,
        "config": Descriptor::of("application/vnd.oci.empty.v1+json", &config).to_json(),
        "layers": [],
    });
    fx.push_manifest_bytes(
        reg,
        &repo,
        "empty",
        support::media::OCI_MANIFEST,
        serde_json::to_vec(&empty).unwrap(),
        &RegistryAuth::Anonymous,
    )
    .await
    .unwrap();
    // And a file whose title would escape the tree.
    let mut escaping = Descriptor::of("application/yaml", &blob).to_json();
    escaping["annotations"] = json!({"org.opencontainers.image.title": "../escape.yaml"});
    let escape = json!({
        "schemaVersion": 2,
        "mediaType": support::media::OCI_MANIFEST,
        "config": Descriptor::of("application/vnd.oci.empty.v1+json", &config).to_json(),
        "layers": [escaping],
    });
    fx.push_manifest_bytes(
        reg,
        &repo,
        "escape",
        support::media::OCI_MANIFEST,
        serde_json::to_vec(&escape).unwrap(),
        &RegistryAuth::Anonymous,
    )
    .await
    .unwrap();
    let (_tmp, fetcher) = fetcher(Limits::default());
    for (tag, category, expected) in [
        (
            "v1",
            "NotABundle",
            "config application/vnd.oci.empty.v1+json, layers [application/x-thing]",
        ),
        ("empty", "NotABundle", "no layers"),
        ("escape", "UnsafeContent", "../escape.yaml"),
    ] {
        let err = fetcher
            .fetch(
                &image_source(&format!("{}/{repo}:{tag}", reg.host)),
                &no_secrets(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.category(), category, "{err}");
        assert!(err.to_string().contains(expected), "{tag}: {err}");
    }
}

#[tokio::test]
async fn image_semver_picks_the_newest_matching_tag() {
    let fx = Fixtures::load();
    let reg = fx.registry_plain();
    let repo = unique_name("semver");
    let dir = tempfile::tempdir().unwrap();
    let mut digests = std::collections::HashMap::new();
    for tag in ["0.1.0", "0.2.0", "0.3.0-rc.1", "1.0.0", "latest"] {
        std::fs::write(dir.path().join("tag.txt"), tag).unwrap();
        let digest = fx
            .push_dir_as_image(reg, &repo, tag, dir.path(), &RegistryAuth::Anonymous)
            .await
            .unwrap();
        digests.insert(tag, digest);
    }
    let repository = format!("{}/{repo}", reg.host);
    let (_tmp, fetcher) = fetcher(Limits::default());
    for (range, tag) in [
        (">=0.1.0 <1", "0.2.0"),
        ("~0.3.0-rc.0", "0.3.0-rc.1"),
        ("*", "1.0.0"),
    ] {
        let got = fetcher
            .fetch(&semver_source(&repository, range), &no_secrets())
            .await
            .unwrap_or_else(|e| panic!("{range}: {e}"));
        assert_eq!(got.version.as_deref(), Some(tag), "{range}");
        assert_eq!(got.resolved, format!("{repository}@{}", digests[tag]));
        assert_eq!(
            std::fs::read_to_string(got.path.join("tag.txt")).unwrap(),
            tag
        );
    }
    let err = fetcher
        .fetch(&semver_source(&repository, ">=2"), &no_secrets())
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.category(), "NoMatchingVersion", "{msg}");
    assert!(
        msg.contains("\">=2\"") && msg.contains("0.2.0") && msg.contains("1.0.0"),
        "{msg}"
    );
    let err = fetcher
        .fetch(&semver_source(&repository, "not a range"), &no_secrets())
        .await
        .unwrap_err();
    assert_eq!(err.category(), "InvalidSource", "{err}");
    let err = fetcher
        .fetch(
            &semver_source(&format!("{repository}:1.0.0"), "*"),
            &no_secrets(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.category(), "InvalidSource", "{err}");
}

#[tokio::test]
async fn an_oci_chart_repository_takes_a_range_an_exact_version_or_a_digest() {
    let fx = Fixtures::load();
    let reg = fx.registry_plain();
    let prefix = unique_name("ocirepo");
    helm_push_chart(reg, &prefix, "0.1.0", None);
    let build = helm_push_chart(reg, &prefix, "0.2.0+build.1", None);
    helm_push_chart(reg, &prefix, "1.0.0", None);
    let url = format!("oci://{}/{prefix}", reg.host);
    let (_tmp, fetcher) = fetcher(Limits::default());

    let got = fetcher
        .fetch(
            &helm_oci_source(&url, "hooks", Some(">=0.1.0 <1"), None),
            &no_secrets(),
        )
        .await
        .unwrap();
    assert_eq!(got.version.as_deref(), Some("0.2.0+build.1"));
    assert_eq!(got.reference, format!("{url}/hooks version 0.2.0+build.1"));
    assert_eq!(got.resolved, format!("{}/{prefix}/hooks@{build}", reg.host));
    assert!(std::fs::read_to_string(got.path.join("Chart.yaml"))
        .unwrap()
        .contains("version: 0.2.0+build.1"));

    // No version: the newest release.
    let got = fetcher
        .fetch(&helm_oci_source(&url, "hooks", None, None), &no_secrets())
        .await
        .unwrap();
    assert_eq!(got.version.as_deref(), Some("1.0.0"));

    let got = fetcher
        .fetch(
            &helm_oci_source(&url, "hooks", Some("0.1.0"), None),
            &no_secrets(),
        )
        .await
        .unwrap();
    assert_eq!(got.version.as_deref(), Some("0.1.0"));
    assert_eq!(got.reference, format!("{url}/hooks version 0.1.0"));

    // Pinned by digest and cached: no request at all.
    let pinned = helm_oci_source(&url, "hooks", Some("0.2.0+build.1"), Some(&build));
    fetcher.fetch(&pinned, &no_secrets()).await.unwrap();
    let repo = format!("{prefix}/hooks");
    let before = fx.registry_requests(reg, &repo).await;
    let got = fetcher.fetch(&pinned, &no_secrets()).await.unwrap();
    assert_eq!(fx.registry_requests(reg, &repo).await, before);
    assert_eq!(got.version.as_deref(), Some("0.2.0+build.1"));

    let err = fetcher
        .fetch(
            &helm_oci_source(&url, "hooks", Some(">=2"), None),
            &no_secrets(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.category(), "NoMatchingVersion", "{err}");
    assert!(err.to_string().contains("0.2.0_build.1"), "{err}");
    let err = fetcher
        .fetch(
            &helm_oci_source(&url, "missing", Some("1.0.0"), None),
            &no_secrets(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.category(), "NotFound", "{err}");
}

#[tokio::test]
async fn an_oci_chart_repository_refuses_what_is_not_a_chart() {
    let fx = Fixtures::load();
    let reg = fx.registry_plain();
    let prefix = unique_name("notchart");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cm.yaml"), "kind: ConfigMap\n").unwrap();
    fx.push_dir_as_image(
        reg,
        &format!("{prefix}/app"),
        "1.0.0",
        dir.path(),
        &RegistryAuth::Anonymous,
    )
    .await
    .unwrap();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let err = fetcher
        .fetch(
            &helm_oci_source(
                &format!("oci://{}/{prefix}", reg.host),
                "app",
                Some("1.0.0"),
                None,
            ),
            &no_secrets(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.category(), "NotABundle", "{err}");
    assert!(
        err.to_string()
            .contains("config application/vnd.oci.image.config.v1+json"),
        "{err}"
    );
}

#[tokio::test]
async fn image_semver_follows_the_tag_list_past_its_first_page() {
    let fx = Fixtures::load();
    let reg = fx.registry_plain();
    let repo = unique_name("manytags");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("x.yaml"), "x").unwrap();
    // The fetcher asks for pages of 1000 tags; the registry lists tags in lexical order, so the
    // one matching tag, 9.0.0, is only on the second page.
    let digest = fx
        .push_dir_as_image(reg, &repo, "9.0.0", dir.path(), &RegistryAuth::Anonymous)
        .await
        .unwrap();
    // One client for all the tag pushes: a client per push makes this test slow.
    let client = fx.oci_client(reg);
    let (manifest, _) = client
        .pull_manifest_raw(
            &support::image_ref(reg, &repo, &digest),
            &RegistryAuth::Anonymous,
            &[support::media::OCI_MANIFEST],
        )
        .await
        .unwrap();
    let content_type: http::HeaderValue = support::media::OCI_MANIFEST.parse().unwrap();
    let pushes = (0..1005).map(|i| {
        let (client, manifest, content_type) = (&client, manifest.to_vec(), content_type.clone());
        let target = support::image_ref(reg, &repo, &format!("0.0.{i}"));
        async move {
            client
                .push_manifest_raw(&target, manifest, content_type)
                .await
                .unwrap();
        }
    });
    futures::stream::iter(pushes)
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    let (_tmp, fetcher) = fetcher(Limits::default());
    let got = fetcher
        .fetch(
            &semver_source(&format!("{}/{repo}", reg.host), ">=9"),
            &no_secrets(),
        )
        .await
        .unwrap();
    assert_eq!(got.version.as_deref(), Some("9.0.0"));
    let tag_lists = fx
        .requests(&[("server", &reg.name), ("repo", &repo)])
        .await
        .iter()
        .filter(|r| r.path.ends_with("/tags/list"))
        .count();
    assert_eq!(tag_lists, 2, "two pages of the tag list");
}
