//! Checks that the fixture servers (`tools/fixtures.sh start`) and the test-support helpers do
//! what other tests rely on: pushes and pulls against both registries, auth is enforced where it
//! should be, git serves what the helpers commit, the file server honours validators and auth, and
//! the request counters see every request.

// Test clients of the local fixture servers and the agent's own endpoints: whole answers are
// read there, not in the agent (see clippy.toml).
#![allow(clippy::disallowed_methods)]

mod support;

use std::io::Read;
use std::path::Path;

use oci_client::secrets::RegistryAuth;
use reqwest::header::{
    AUTHORIZATION, ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED, LOCATION,
};
use reqwest::StatusCode;
use serde_json::{json, Value};
use support::{git, image_ref, media, unique_name, Fixtures, Image, Layer, RunExt, TarEntry};

/// Files of a gzip'd tar, path -> content, directories left out.
fn untar_gz(data: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(data));
    let mut files = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.header().entry_type().is_file() {
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            let mut content = Vec::new();
            entry.read_to_end(&mut content).unwrap();
            files.push((path, content));
        }
    }
    files
}

fn bundle_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("manifests")).unwrap();
    std::fs::write(dir.path().join("manifests/cm.yaml"), "kind: ConfigMap\n").unwrap();
    std::fs::write(dir.path().join("README"), "hello\n").unwrap();
    dir
}

#[tokio::test]
async fn plain_registry_push_pull_and_counts() {
    let fx = Fixtures::load();
    let reg = fx.registry_plain();
    let repo = unique_name("fixtures/plain");
    let dir = bundle_dir();

    let digest = fx
        .push_dir_as_image(reg, &repo, "v1", dir.path(), &RegistryAuth::Anonymous)
        .await
        .expect("push to the plain registry");

    let client = fx.oci_client(reg);
    let reference = image_ref(reg, &repo, "v1");
    let image = client
        .pull(
            &reference,
            &RegistryAuth::Anonymous,
            vec![media::OCI_LAYER_GZIP],
        )
        .await
        .expect("pull from the plain registry");
    assert_eq!(image.digest.as_deref(), Some(digest.as_str()));
    assert_eq!(image.layers.len(), 1);
    let files = untar_gz(&image.layers[0].data);
    assert_eq!(
        files,
        vec![
            ("README".to_string(), b"hello\n".to_vec()),
            (
                "manifests/cm.yaml".to_string(),
                b"kind: ConfigMap\n".to_vec()
            ),
        ]
    );

    // The counters see this repo's traffic, including a manifest HEAD, and nothing for a repo
    // nobody touched.
    let before = fx.registry_requests(reg, &repo).await;
    assert!(before > 0, "no requests counted for {repo}");
    let head = client
        .fetch_manifest_digest(&reference, &RegistryAuth::Anonymous)
        .await
        .unwrap();
    assert_eq!(head, digest);
    assert_eq!(fx.registry_requests(reg, &repo).await, before + 1);
    let heads = fx
        .stats(&[("server", &reg.name), ("repo", &repo), ("method", "HEAD")])
        .await;
    assert!(heads
        .paths
        .contains_key(&format!("/v2/{repo}/manifests/v1")));
    let untouched = unique_name("fixtures/untouched");
    assert_eq!(fx.registry_requests(reg, &untouched).await, 0);
}

#[tokio::test]
async fn tls_registry_requires_credentials() {
    let fx = Fixtures::load();
    let reg = fx.registry_tls();
    assert!(reg.tls && reg.url.starts_with("https://"));
    let repo = unique_name("fixtures/tls");
    let dir = bundle_dir();
    let good = reg.registry_auth();
    assert!(matches!(good, RegistryAuth::Basic(..)));
    let config: Value = serde_json::from_str(&reg.docker_config_json()).unwrap();
    assert_eq!(
        config["auths"][&reg.host]["username"],
        json!(reg.username.clone().unwrap())
    );

    let digest = fx
        .push_dir_as_image(reg, &repo, "v1", dir.path(), &good)
        .await
        .expect("push with the right credentials");
    let reference = image_ref(reg, &repo, "v1");
    let pulled = fx
        .oci_client(reg)
        .pull(&reference, &good, vec![media::OCI_LAYER_GZIP])
        .await
        .expect("pull with the right credentials");
    assert_eq!(pulled.digest.as_deref(), Some(digest.as_str()));

    let bad = RegistryAuth::Basic(reg.username.clone().unwrap(), "wrong".into());
    for (what, auth) in [("no", RegistryAuth::Anonymous), ("wrong", bad)] {
        let result = fx
            .oci_client(reg)
            .pull(&reference, &auth, vec![media::OCI_LAYER_GZIP])
            .await;
        assert!(result.is_err(), "pull with {what} credentials succeeded");
        let pushed = fx
            .push_dir_as_image(
                reg,
                &unique_name("fixtures/tls-denied"),
                "v1",
                dir.path(),
                &auth,
            )
            .await;
        assert!(pushed.is_err(), "push with {what} credentials succeeded");
    }
    // The refusals came from the registry itself, as 401s on this repo's manifest.
    let denied = fx
        .requests(&[("server", &reg.name), ("repo", &repo)])
        .await
        .into_iter()
        .filter(|r| r.status == 401 && r.path.contains("/manifests/"))
        .count();
    assert!(denied >= 2, "expected 401s for {repo}, saw {denied}");
}

#[tokio::test]
async fn registry_takes_docker_images_indexes_and_whiteouts() {
    let fx = Fixtures::load();
    let reg = fx.registry_plain();
    let auth = RegistryAuth::Anonymous;
    let repo = unique_name("fixtures/index");

    let lower = Layer::tar_gz_entries(
        media::OCI_LAYER_GZIP,
        &[
            TarEntry::Dir("a".into()),
            TarEntry::File("a/gone.yaml".into(), b"x".to_vec()),
            TarEntry::File("a/kept.yaml".into(), b"y".to_vec()),
        ],
    );
    let upper = Layer::tar_gz_entries(
        media::OCI_LAYER_GZIP,
        &[TarEntry::Whiteout("a/gone.yaml".into())],
    );
    let oci = fx
        .push_image(
            reg,
            &repo,
            "oci",
            &Image::oci().layer(lower).layer(upper),
            &auth,
        )
        .await
        .unwrap();
    let docker_layer = Layer::tar_gz_entries(
        media::DOCKER_LAYER_GZIP,
        &[TarEntry::File("x.yaml".into(), b"z".to_vec())],
    );
    let docker = fx
        .push_image(
            reg,
            &repo,
            "docker",
            &Image::docker().layer(docker_layer),
            &auth,
        )
        .await
        .unwrap();
    assert_eq!(docker.media_type, media::DOCKER_MANIFEST);
    let index = fx
        .push_index(
            reg,
            &repo,
            "multi",
            &[
                (
                    oci.clone(),
                    Some(json!({"os": "linux", "architecture": "amd64"})),
                ),
                (
                    docker.clone(),
                    Some(json!({"os": "linux", "architecture": "arm64"})),
                ),
            ],
            &auth,
        )
        .await
        .unwrap();

    let client = fx.oci_client(reg);
    let (raw, digest) = client
        .pull_manifest_raw(
            &image_ref(reg, &repo, "multi"),
            &auth,
            &[media::OCI_INDEX, media::OCI_MANIFEST],
        )
        .await
        .unwrap();
    assert_eq!(digest, index.digest);
    let parsed: Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(parsed["manifests"][1]["digest"], json!(docker.digest));

    let (raw, _) = client
        .pull_manifest_raw(
            &image_ref(reg, &repo, &oci.digest),
            &auth,
            &[media::OCI_MANIFEST],
        )
        .await
        .unwrap();
    let manifest: Value = serde_json::from_slice(&raw).unwrap();
    let top = manifest["layers"][1]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let mut blob = Vec::new();
    client
        .pull_blob(&image_ref(reg, &repo, "oci"), top.as_str(), &mut blob)
        .await
        .unwrap();
    assert_eq!(
        untar_gz(&blob),
        vec![("a/.wh.gone.yaml".to_string(), vec![])]
    );
}

fn clone(url: &str, into: &Path) -> std::process::Output {
    git(None, &["clone", "--quiet", url])
        .arg(into)
        .output()
        .unwrap()
}

#[tokio::test]
async fn git_serves_commits_with_and_without_auth() {
    let fx = Fixtures::load();
    let repo = fx.git_repo(&unique_name("fixtures-git"));
    let first = repo.commit_files("main", &[("a.yaml", b"one\n")], "first");
    let second = repo.commit_files(
        "main",
        &[("a.yaml", b"two\n"), ("b/c.yaml", b"c\n")],
        "second",
    );
    repo.tag("v1", &first, Some("release v1"));
    assert_eq!(repo.rev_parse("v1"), first);
    assert_eq!(repo.rev_parse("main"), second);
    let work = tempfile::tempdir().unwrap();

    // Plain: clone gets the branch head and its files.
    let plain = work.path().join("plain");
    let out = clone(&repo.url(fx.git_plain()), &plain);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(plain.join("a.yaml")).unwrap(), b"two\n");
    assert_eq!(std::fs::read(plain.join("b/c.yaml")).unwrap(), b"c\n");
    let head = git(None, &["-C", plain.to_str().unwrap(), "rev-parse", "HEAD"]).run();
    assert_eq!(head, second);
    let tags = git(None, &["ls-remote", "--tags", &repo.url(fx.git_plain())]).run();
    assert!(tags.contains("refs/tags/v1"), "{tags}");

    // Auth port: refused without credentials, served with them.
    let auth = fx.git_auth();
    let out = clone(&repo.url(auth), &work.path().join("nocreds"));
    assert!(!out.status.success(), "clone without credentials succeeded");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("401")
            || stderr.contains("Authentication failed")
            || stderr.contains("could not read Username"),
        "unexpected error: {stderr}"
    );
    let authed = work.path().join("authed");
    let out = clone(&repo.url_with_auth(auth), &authed);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(authed.join("a.yaml")).unwrap(), b"two\n");

    // Pushing over HTTP updates the bare repo.
    let authed_dir = authed.to_str().unwrap();
    std::fs::write(authed.join("a.yaml"), "three\n").unwrap();
    git(
        None,
        &["-C", authed_dir, "commit", "--quiet", "-am", "third"],
    )
    .run();
    git(
        None,
        &["-C", authed_dir, "push", "--quiet", "origin", "main"],
    )
    .run();
    let pushed = git(None, &["-C", authed_dir, "rev-parse", "HEAD"]).run();
    assert_eq!(repo.rev_parse("main"), pushed);

    // TLS: served with the test CA trusted, refused without it.
    let tls = fx.git_tls();
    let out = git(None, &["clone", "--quiet", &repo.url_with_auth(tls)])
        .arg(work.path().join("tls"))
        .env("GIT_SSL_CAINFO", fx.ca_cert())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = git(None, &["clone", "--quiet", &repo.url_with_auth(tls)])
        .arg(work.path().join("tls-untrusted"))
        .env("GIT_SSL_CAINFO", "/dev/null")
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "clone with an untrusted CA succeeded"
    );

    // Counters: both servers saw this repo; the auth server answered 401 at least once.
    assert!(fx.git_requests(fx.git_plain(), &repo.name).await >= 2);
    let repo_path = format!("{}.git", repo.name);
    let refused = fx
        .requests(&[("server", &auth.name), ("repo", &repo_path)])
        .await
        .into_iter()
        .filter(|r| r.status == 401)
        .count();
    assert!(refused >= 1);
    assert_eq!(
        fx.git_requests(fx.git_plain(), &unique_name("nobody"))
            .await,
        0
    );
}

#[tokio::test]
async fn file_server_auth_validators_redirects_and_counts() {
    let fx = Fixtures::load();
    let http = fx.http_client();
    let content = b"tarball bytes".to_vec();
    let path = fx.put_file(
        &format!("{}/bundle.tgz", unique_name("fixtures-http")),
        &content,
    );
    let expected_etag = format!(
        "\"{}\"",
        support::sha256_digest(&content).trim_start_matches("sha256:")
    );

    let plain = fx.http_plain();
    let resp = http.get(plain.url_for(&path)).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let etag = resp.headers()[ETAG].to_str().unwrap().to_string();
    let modified = resp.headers()[LAST_MODIFIED].to_str().unwrap().to_string();
    assert_eq!(etag, expected_etag);
    assert_eq!(resp.bytes().await.unwrap(), content);

    // Conditional GETs answer 304 with no body.
    for (name, value) in [
        (IF_NONE_MATCH, etag.as_str()),
        (IF_MODIFIED_SINCE, modified.as_str()),
    ] {
        let resp = http
            .get(plain.url_for(&path))
            .header(&name, value)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::NOT_MODIFIED, "{name}");
        assert!(resp.bytes().await.unwrap().is_empty());
    }
    let resp = http
        .get(plain.url_for(&path))
        .header(IF_NONE_MATCH, "\"other\"")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);

    // Basic auth.
    let basic = fx.http_basic();
    let user = basic.username.clone().unwrap();
    let status = |r: reqwest::Response| r.status();
    assert_eq!(
        status(http.get(basic.url_for(&path)).send().await.unwrap()),
        StatusCode::UNAUTHORIZED
    );
    let wrong = http
        .get(basic.url_for(&path))
        .basic_auth(&user, Some("wrong"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let ok = http
        .get(basic.url_for(&path))
        .basic_auth(&user, basic.password.as_ref())
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(ok.bytes().await.unwrap(), content);

    // Bearer token.
    let bearer = fx.http_bearer();
    let token = bearer.token.clone().unwrap();
    assert_eq!(
        status(http.get(bearer.url_for(&path)).send().await.unwrap()),
        StatusCode::UNAUTHORIZED
    );
    let wrong = http
        .get(bearer.url_for(&path))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let as_basic = http
        .get(bearer.url_for(&path))
        .basic_auth(&user, basic.password.as_ref())
        .send()
        .await
        .unwrap();
    assert_eq!(as_basic.status(), StatusCode::UNAUTHORIZED);
    let ok = http
        .get(bearer.url_for(&path))
        .header(AUTHORIZATION, format!("Bearer {token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);

    // Redirect chain: /_redirect/2/<p> -> /_redirect/1/<p> -> /<p>.
    let first = http
        .get(plain.url_for(&format!("/_redirect/2{path}")))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::FOUND);
    assert_eq!(
        first.headers()[LOCATION],
        format!("/_redirect/1{path}").as_str()
    );
    let second = http
        .get(plain.url_for(&format!("/_redirect/1{path}")))
        .send()
        .await
        .unwrap();
    assert_eq!(second.headers()[LOCATION], path.as_str());

    // Cross-host redirect to another fixture server.
    let target = bearer.url_for(&path);
    let goto = http
        .get(plain.url_for("/_goto"))
        .query(&[("url", &target)])
        .send()
        .await
        .unwrap();
    assert_eq!(goto.status(), StatusCode::FOUND);
    assert_eq!(goto.headers()[LOCATION], target.as_str());

    // TLS: fine with the test CA, refused by a client that does not trust it.
    let tls = fx.http_tls();
    let ok = http.get(tls.url_for(&path)).send().await.unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    let untrusting = reqwest::Client::builder()
        .tls_certs_only([])
        .build()
        .unwrap();
    let err = untrusting
        .get(tls.url_for(&path))
        .send()
        .await
        .expect_err("TLS without the test CA succeeded");
    assert!(
        format!("{err:?}").contains("UnknownIssuer"),
        "not a certificate error: {err:?}"
    );

    // Counters: exact per server and path.
    assert_eq!(fx.http_requests(plain, &path).await, 4);
    assert_eq!(fx.http_requests(basic, &path).await, 3);
    assert_eq!(fx.http_requests(bearer, &path).await, 4);
    assert_eq!(fx.http_requests(plain, &format!("{path}.missing")).await, 0);
    let missing = http
        .get(plain.url_for(&format!("{path}.missing")))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert_eq!(fx.http_requests(plain, &format!("{path}.missing")).await, 1);
}
