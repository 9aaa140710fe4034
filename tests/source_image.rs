//! Image sources against the real fixture registries (Debian's docker-registry behind counting
//! proxies; `tools/fixtures.sh start`).

#[path = "support/sources_extra.rs"]
mod sources_extra;
mod support;

use std::time::{Duration, Instant};

use oci_client::secrets::RegistryAuth;
use pallet::source::{CredentialKind, Credentials, Limits, SourceSecrets};
use serde_json::json;
use sources_extra::*;
use support::{media, unique_name, Fixtures, Image, Layer, TarEntry};

fn file(path: &str, data: &str) -> TarEntry {
    TarEntry::File(path.into(), data.as_bytes().to_vec())
}

#[tokio::test]
async fn tag_resolves_to_digest_and_layers_apply_in_order_with_whiteouts() {
    let fx = Fixtures::load();
    let reg = fx.registry_plain();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let repo = unique_name("img-layers");
    // Docker media types, gzip layers; then an OCI image with an uncompressed tar layer on top.
    let image = Image::docker()
        .layer(Layer::tar_gz_entries(
            media::DOCKER_LAYER_GZIP,
            &[
                file("m/a.yaml", "a"),
                file("m/b.yaml", "b"),
                file("old/x.yaml", "x"),
            ],
        ))
        .layer(Layer::tar_gz_entries(
            media::DOCKER_LAYER_GZIP,
            &[TarEntry::Whiteout("m/b.yaml".into()), file("m/c.yaml", "c")],
        ));
    let desc = fx
        .push_image(reg, &repo, "v1", &image, &RegistryAuth::Anonymous)
        .await
        .unwrap();
    let got = fetcher
        .fetch(
            &image_source(&format!("{}/{repo}:v1", reg.host)),
            &no_secrets(),
        )
        .await
        .unwrap();
    assert_eq!(got.resolved, format!("{}/{repo}@{}", reg.host, desc.digest));
    assert_eq!(list_tree(&got.path), ["m/a.yaml", "m/c.yaml", "old/x.yaml"]);

    let oci = Image::oci()
        .layer(Layer::tar_gz_entries(
            media::OCI_LAYER_GZIP,
            &[file("old/x.yaml", "x"), file("keep.yaml", "k")],
        ))
        .layer(Layer::tar_entries(&[
            TarEntry::Opaque("old".into()),
            file("old/y.yaml", "y"),
            file("keep.yaml", "k2"),
        ]));
    fx.push_image(reg, &repo, "v2", &oci, &RegistryAuth::Anonymous)
        .await
        .unwrap();
    let got = fetcher
        .fetch(
            &image_source(&format!("{}/{repo}:v2", reg.host)),
            &no_secrets(),
        )
        .await
        .unwrap();
    assert_eq!(list_tree(&got.path), ["keep.yaml", "old/y.yaml"]);
    assert_eq!(
        std::fs::read_to_string(got.path.join("keep.yaml")).unwrap(),
        "k2"
    );
}

#[tokio::test]
async fn index_resolves_to_linux_amd64_or_its_only_entry() {
    let fx = Fixtures::load();
    let reg = fx.registry_plain();
    let auth = RegistryAuth::Anonymous;
    let (_tmp, fetcher) = fetcher(Limits::default());
    let repo = unique_name("img-index");
    let arm = Image::oci().layer(Layer::tar_gz_entries(
        media::OCI_LAYER_GZIP,
        &[file("arch", "arm64")],
    ));
    let amd = Image::oci().layer(Layer::tar_gz_entries(
        media::OCI_LAYER_GZIP,
        &[file("arch", "amd64")],
    ));
    let arm_d = fx.push_image(reg, &repo, "arm", &arm, &auth).await.unwrap();
    let amd_d = fx.push_image(reg, &repo, "amd", &amd, &auth).await.unwrap();
    fx.push_index(
        reg,
        &repo,
        "multi",
        &[
            (
                arm_d.clone(),
                Some(json!({"os": "linux", "architecture": "arm64"})),
            ),
            (amd_d, Some(json!({"os": "linux", "architecture": "amd64"}))),
        ],
        &auth,
    )
    .await
    .unwrap();
    let got = fetcher
        .fetch(
            &image_source(&format!("{}/{repo}:multi", reg.host)),
            &no_secrets(),
        )
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(got.path.join("arch")).unwrap(),
        "amd64"
    );

    fx.push_index(
        reg,
        &repo,
        "single",
        &[(arm_d, Some(json!({"os": "linux", "architecture": "arm64"})))],
        &auth,
    )
    .await
    .unwrap();
    let got = fetcher
        .fetch(
            &image_source(&format!("{}/{repo}:single", reg.host)),
            &no_secrets(),
        )
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(got.path.join("arch")).unwrap(),
        "arm64"
    );
}

#[tokio::test]
async fn moved_tag_resolves_anew_and_cached_digest_costs_no_request() {
    let fx = Fixtures::load();
    let reg = fx.registry_plain();
    let auth = RegistryAuth::Anonymous;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cache");
    let fetcher = fetcher_at(root.clone(), Limits::default());
    let repo = unique_name("img-move");
    let one = Image::oci().layer(Layer::tar_gz_entries(
        media::OCI_LAYER_GZIP,
        &[file("v", "1")],
    ));
    let two = Image::oci().layer(Layer::tar_gz_entries(
        media::OCI_LAYER_GZIP,
        &[file("v", "2")],
    ));
    let d1 = fx
        .push_image(reg, &repo, "latest", &one, &auth)
        .await
        .unwrap();
    let src = image_source(&format!("{}/{repo}:latest", reg.host));
    let first = fetcher.fetch(&src, &no_secrets()).await.unwrap();
    assert!(first.resolved.ends_with(&d1.digest));
    let d2 = fx
        .push_image(reg, &repo, "latest", &two, &auth)
        .await
        .unwrap();
    let second = fetcher.fetch(&src, &no_secrets()).await.unwrap();
    assert!(second.resolved.ends_with(&d2.digest), "{}", second.resolved);
    assert_eq!(std::fs::read_to_string(second.path.join("v")).unwrap(), "2");

    // Pinned by digest and cached: a restarted fetcher makes no request at all.
    let before = fx.registry_requests(reg, &repo).await;
    let restarted = fetcher_at(root, Limits::default());
    let pinned = image_source(&second.resolved);
    let start = Instant::now();
    let again = restarted.fetch(&pinned, &no_secrets()).await.unwrap();
    eprintln!("cached pinned image resolved in {:?}", start.elapsed());
    assert_eq!(again.path, second.path);
    assert_eq!(again.resolved, second.resolved);
    assert_eq!(fx.registry_requests(reg, &repo).await, before);
}

#[tokio::test]
async fn tls_registry_auth_good_bad_missing_and_dockerconfig() {
    let fx = Fixtures::load();
    let reg = fx.registry_tls();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let repo = unique_name("img-auth");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cm.yaml"), "kind: ConfigMap\n").unwrap();
    let digest = fx
        .push_dir_as_image(reg, &repo, "v1", dir.path(), &reg.registry_auth())
        .await
        .unwrap();
    let src = image_source(&format!("{}/{repo}:v1", reg.host));
    let secrets = |c: Option<Credentials>| SourceSecrets {
        credentials: c,
        ca_pem: Some(fx.ca_pem()),
        verify: None,
    };

    let got = fetcher
        .fetch(&src, &secrets(Some(basic(reg, "secret ns/basic"))))
        .await
        .unwrap();
    assert!(got.resolved.ends_with(&digest));
    assert_eq!(list_tree(&got.path), ["cm.yaml"]);

    let cfg = format!(
        r#"{{"auths":{{"{}":{{"username":"{}","password":"{}"}}}}}}"#,
        reg.host,
        reg.username.as_ref().unwrap(),
        reg.password.as_ref().unwrap()
    );
    let data = [(".dockerconfigjson".to_string(), cfg.into_bytes())].into();
    let docker = Credentials::from_secret_data(
        "secret ns/regcred",
        Some("kubernetes.io/dockerconfigjson"),
        &data,
    )
    .unwrap();
    assert!(matches!(docker.kind, CredentialKind::DockerConfig(_)));
    // Fresh cache, so the registry is really asked.
    let (_tmp2, fresh) = sources_extra::fetcher(Limits::default());
    fresh.fetch(&src, &secrets(Some(docker))).await.unwrap();

    let (_tmp3, fresh) = sources_extra::fetcher(Limits::default());
    let err = fresh
        .fetch(&src, &secrets(Some(wrong_basic(reg, "secret ns/wrong"))))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.category(), "Unauthorized", "{msg}");
    assert!(
        msg.contains("secret ns/wrong") && !msg.contains("definitely-wrong-password"),
        "{msg}"
    );

    let err = fresh.fetch(&src, &secrets(None)).await.unwrap_err();
    assert_eq!(err.category(), "Unauthorized", "{err}");
    assert!(err.to_string().contains("no credentials"), "{err}");

    // Without the test CA the certificate is refused, unless verification is skipped.
    let err = fresh
        .fetch(
            &src,
            &SourceSecrets {
                credentials: Some(basic(reg, "secret ns/basic")),
                ca_pem: None,
                verify: None,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.category(), "Unreachable", "{err}");
    let mut insecure = src.clone();
    insecure.image.as_mut().unwrap().insecure_skip_tls_verify = true;
    fresh
        .fetch(
            &insecure,
            &SourceSecrets {
                credentials: Some(basic(reg, "secret ns/basic")),
                ca_pem: None,
                verify: None,
            },
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn not_found_not_a_bundle_and_server_down_are_distinct() {
    let fx = Fixtures::load();
    let reg = fx.registry_plain();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let repo = unique_name("img-errors");
    let err = fetcher
        .fetch(
            &image_source(&format!("{}/{repo}:missing", reg.host)),
            &no_secrets(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.category(), "NotFound", "{err}");

    let helm_layer = Layer {
        media_type: "application/vnd.cncf.helm.chart.content.v1.tar+gzip".into(),
        data: b"not really a chart".to_vec(),
        diff_id: support::sha256_digest(b"x"),
    };
    fx.push_image(
        reg,
        &repo,
        "chart",
        &Image::oci().layer(helm_layer),
        &RegistryAuth::Anonymous,
    )
    .await
    .unwrap();
    let err = fetcher
        .fetch(
            &image_source(&format!("{}/{repo}:chart", reg.host)),
            &no_secrets(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.category(), "NotABundle", "{err}");
    assert!(err.to_string().contains("helm.chart.content"), "{err}");

    let start = Instant::now();
    let err = fetcher
        .fetch(
            &image_source(&format!("127.0.0.1:{}/x:y", dead_port())),
            &no_secrets(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.category(), "Unreachable", "{err}");
    assert!(err.is_transient());
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
}
