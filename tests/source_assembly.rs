//! Several sources of different kinds assembled into one tree, and concurrent fetches of one
//! source, against the real fixture servers (`tools/fixtures.sh start`).

#[path = "support/sources_extra.rs"]
mod sources_extra;
mod support;

use oci_client::secrets::RegistryAuth;
use pallet::source::{assemble, Limits, SourceSecrets};
use sources_extra::*;
use support::{media, unique_name, Fixtures, Image, Layer, TarEntry};

#[tokio::test]
async fn image_git_and_http_sources_assemble_and_overlaps_name_both_sources() {
    let fx = Fixtures::load();
    let (tmp, fetcher) = fetcher(Limits::default());
    let none = SourceSecrets::default();
    let reg = fx.registry_plain();
    let repo = unique_name("asm-img");
    let img = Image::oci().layer(Layer::tar_gz_entries(
        media::OCI_LAYER_GZIP,
        &[TarEntry::File(
            "manifests/deploy.yaml".into(),
            b"kind: Deployment\n".to_vec(),
        )],
    ));
    fx.push_image(reg, &repo, "v1", &img, &RegistryAuth::Anonymous)
        .await
        .unwrap();
    let git_repo = fx.git_repo(&unique_name("asm-git"));
    git_repo.commit_files(
        "main",
        &[("deploy/extras/cm.yaml", b"kind: ConfigMap\n")],
        "c",
    );
    let crd = fx.put_file(
        &format!("{}/crd.yaml", unique_name("asm-http")),
        b"kind: CustomResourceDefinition\n",
    );

    let mut image_src = image_source(&format!("{}/{repo}:v1", reg.host));
    image_src.destination = String::new();
    let mut git_src = git_source(
        &git_repo.url(fx.git_plain()),
        branch("main"),
        Some("deploy/extras"),
    );
    git_src.destination = "extras".into();
    let mut http_src = http_source(&fx.http_plain().url_for(&crd), None);
    http_src.destination = "crds".into();

    let mut fetched = Vec::new();
    for s in [&image_src, &git_src, &http_src] {
        fetched.push(fetcher.fetch(s, &none).await.unwrap());
    }
    let out = tmp.path().join("bundle");
    assemble(&fetched, &out).unwrap();
    assert_eq!(
        list_tree(&out),
        ["crds/crd.yaml", "extras/cm.yaml", "manifests/deploy.yaml"]
    );

    // The same http file placed where the image already has a file of that name.
    let clash = fx.put_file(
        &format!("{}/deploy.yaml", unique_name("asm-clash")),
        b"x: 1\n",
    );
    let mut clash_src = http_source(&fx.http_plain().url_for(&clash), None);
    clash_src.destination = "manifests".into();
    let clash_fetched = fetcher.fetch(&clash_src, &none).await.unwrap();
    let err = assemble(
        &[fetched[0].clone(), clash_fetched],
        &tmp.path().join("bundle2"),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.category(), "SourceConflict", "{msg}");
    assert!(msg.contains("manifests/deploy.yaml"), "{msg}");
    assert!(
        msg.contains(&format!("image {}/{repo}:v1", reg.host)) && msg.contains(&clash),
        "{msg}"
    );
}

#[tokio::test]
async fn concurrent_fetches_of_one_source_download_and_unpack_once() {
    let fx = Fixtures::load();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let reg = fx.registry_plain();
    let repo = unique_name("conc-img");
    let img = Image::oci().layer(Layer::tar_gz_entries(
        media::OCI_LAYER_GZIP,
        &[TarEntry::File("a.yaml".into(), vec![b'a'; 1 << 20])],
    ));
    let desc = fx
        .push_image(reg, &repo, "v1", &img, &RegistryAuth::Anonymous)
        .await
        .unwrap();
    let src = image_source(&format!("{}/{repo}@{}", reg.host, desc.digest));
    let before = fx.registry_requests(reg, &repo).await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (f, s) = (fetcher.clone(), src.clone());
        tasks.push(tokio::spawn(async move {
            f.fetch(&s, &SourceSecrets::default()).await
        }));
    }
    let mut paths = Vec::new();
    for t in tasks {
        paths.push(t.await.unwrap().unwrap().path);
    }
    assert!(paths.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(
        fetcher.cache().populated_count(),
        1,
        "unpacked more than once"
    );
    let stats = fx.stats(&[("server", &reg.name), ("repo", &repo)]).await;
    let blob_gets: usize = stats
        .paths
        .iter()
        .filter(|(p, _)| p.contains("/blobs/"))
        .flat_map(|(_, m)| {
            m.iter()
                .filter(|(method, _)| *method == "GET")
                .map(|(_, n)| *n)
        })
        .sum();
    assert!(
        fx.registry_requests(reg, &repo).await > before,
        "the first fetch must have reached the registry"
    );
    assert_eq!(
        blob_gets, 1,
        "layer downloaded more than once: {:?}",
        stats.paths
    );
}
