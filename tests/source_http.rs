//! HTTP sources against the real fixture file servers (`tools/fixtures.sh start`).

#[path = "support/sources_extra.rs"]
mod sources_extra;
mod support;

use std::io::Write;
use std::time::{Duration, Instant};

use pallet::source::{CredentialKind, Credentials, Limits};
use sources_extra::*;
use support::{unique_name, Fixtures};

fn tar_gz(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(0);
        b.append_data(&mut h, path, *data).unwrap();
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&b.into_inner().unwrap()).unwrap();
    gz.finish().unwrap()
}

fn sha(data: &[u8]) -> String {
    support::sha256_digest(data)
        .trim_start_matches("sha256:")
        .to_string()
}

#[tokio::test]
async fn tarball_and_single_file_are_unpacked_and_resolved_to_their_sha256() {
    let fx = Fixtures::load();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let dir = unique_name("http-happy");
    let archive = tar_gz(&[
        ("manifests/cm.yaml", b"kind: ConfigMap\n"),
        ("README", b"hi"),
    ]);
    let path = fx.put_file(&format!("{dir}/bundle.tar.gz"), &archive);
    let got = fetcher
        .fetch(
            &http_source(&fx.http_plain().url_for(&path), None),
            &no_secrets(),
        )
        .await
        .unwrap();
    assert_eq!(got.resolved, format!("sha256:{}", sha(&archive)));
    assert_eq!(list_tree(&got.path), ["README", "manifests/cm.yaml"]);
    assert_eq!(
        std::fs::read(got.path.join("manifests/cm.yaml")).unwrap(),
        b"kind: ConfigMap\n"
    );

    let yaml = b"apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n";
    let path = fx.put_file(&format!("{dir}/ns.yaml"), yaml);
    let got = fetcher
        .fetch(
            &http_source(&fx.http_plain().url_for(&path), None),
            &no_secrets(),
        )
        .await
        .unwrap();
    assert_eq!(list_tree(&got.path), ["ns.yaml"]);
    assert_eq!(got.resolved, format!("sha256:{}", sha(yaml)));
}

#[tokio::test]
async fn pinned_and_cached_costs_no_request_even_after_a_restart() {
    let fx = Fixtures::load();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cache");
    let archive = tar_gz(&[("a.yaml", b"a: 1\n")]);
    let path = fx.put_file(&format!("{}/b.tgz", unique_name("http-pin")), &archive);
    let source = http_source(&fx.http_plain().url_for(&path), Some(&sha(&archive)));

    let first = fetcher_at(root.clone(), Limits::default())
        .fetch(&source, &no_secrets())
        .await
        .unwrap();
    assert_eq!(fx.http_requests(fx.http_plain(), &path).await, 1);
    // A new fetcher over the same directory is an agent restart.
    let again = fetcher_at(root, Limits::default());
    let start = Instant::now();
    let second = again.fetch(&source, &no_secrets()).await.unwrap();
    let took = start.elapsed();
    assert_eq!(second.resolved, first.resolved);
    assert_eq!(second.path, first.path);
    assert_eq!(
        fx.http_requests(fx.http_plain(), &path).await,
        1,
        "a cached pinned source must not touch the network"
    );
    eprintln!("cached pinned http source resolved in {took:?}");
}

#[tokio::test]
async fn pin_mismatch_names_both_digests() {
    let fx = Fixtures::load();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let archive = tar_gz(&[("a.yaml", b"a: 1\n")]);
    let path = fx.put_file(
        &format!("{}/b.tar.gz", unique_name("http-mismatch")),
        &archive,
    );
    let wrong = "0".repeat(64);
    let err = fetcher
        .fetch(
            &http_source(&fx.http_plain().url_for(&path), Some(&wrong)),
            &no_secrets(),
        )
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.category(), "DigestMismatch", "{msg}");
    assert!(
        msg.contains(&wrong) && msg.contains(&sha(&archive)),
        "{msg}"
    );
    assert!(!err.is_transient());
}

#[tokio::test]
async fn floating_url_is_polled_with_a_conditional_get_and_sees_new_content() {
    let fx = Fixtures::load();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let rel = format!("{}/f.tar.gz", unique_name("http-poll"));
    let v1 = tar_gz(&[("v.yaml", b"v: 1\n")]);
    let path = fx.put_file(&rel, &v1);
    let source = http_source(&fx.http_plain().url_for(&path), None);
    let first = fetcher.fetch(&source, &no_secrets()).await.unwrap();
    let second = fetcher.fetch(&source, &no_secrets()).await.unwrap();
    assert_eq!(first.resolved, second.resolved);
    let reqs = fx
        .requests(&[("server", &fx.http_plain().name), ("prefix", &path)])
        .await;
    let statuses: Vec<u16> = reqs.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [200, 304],
        "second poll must be a conditional GET answered 304"
    );

    // Make sure the new file's mtime differs even on coarse filesystems: the ETag does anyway.
    let v2 = tar_gz(&[("v.yaml", b"v: 2\n")]);
    fx.put_file(&rel, &v2);
    let third = fetcher.fetch(&source, &no_secrets()).await.unwrap();
    assert_eq!(third.resolved, format!("sha256:{}", sha(&v2)));
    assert_ne!(third.resolved, first.resolved);
    assert_eq!(std::fs::read(third.path.join("v.yaml")).unwrap(), b"v: 2\n");
}

#[tokio::test]
async fn basic_and_bearer_auth_good_bad_and_missing() {
    let fx = Fixtures::load();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let archive = tar_gz(&[("a.yaml", b"a: 1\n")]);
    let path = fx.put_file(&format!("{}/b.tar.gz", unique_name("http-auth")), &archive);
    let basic_src = http_source(&fx.http_basic().url_for(&path), None);
    let bearer_src = http_source(&fx.http_bearer().url_for(&path), None);

    let ok = fetcher
        .fetch(
            &basic_src,
            &with_creds(basic(fx.http_basic(), "secret ns/http-creds")),
        )
        .await
        .unwrap();
    assert_eq!(list_tree(&ok.path), ["a.yaml"]);
    let token = fx.http_bearer().token.clone().unwrap();
    let bearer = Credentials {
        origin: "secret ns/token".into(),
        kind: CredentialKind::Token(token),
    };
    fetcher
        .fetch(&bearer_src, &with_creds(bearer))
        .await
        .unwrap();

    let err = fetcher
        .fetch(
            &basic_src,
            &with_creds(wrong_basic(fx.http_basic(), "secret ns/bad-creds")),
        )
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.category(), "Unauthorized", "{msg}");
    assert!(msg.contains("secret ns/bad-creds"), "{msg}");
    assert!(!msg.contains("definitely-wrong-password"), "{msg}");

    let bad_token = Credentials {
        origin: "secret ns/bad-token".into(),
        kind: CredentialKind::Token("nope-token".into()),
    };
    let err = fetcher
        .fetch(&bearer_src, &with_creds(bad_token))
        .await
        .unwrap_err();
    assert_eq!(err.category(), "Unauthorized", "{err}");
    assert!(!err.to_string().contains("nope-token"));

    let err = fetcher.fetch(&basic_src, &no_secrets()).await.unwrap_err();
    assert_eq!(err.category(), "Unauthorized", "{err}");
    assert!(err.to_string().contains("no credentials"), "{err}");
}

#[tokio::test]
async fn not_found_and_server_down_are_distinct_errors() {
    let fx = Fixtures::load();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let missing = format!("/{}/nothing.tar.gz", unique_name("http-missing"));
    let err = fetcher
        .fetch(
            &http_source(&fx.http_plain().url_for(&missing), None),
            &no_secrets(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.category(), "NotFound", "{err}");
    assert!(!err.is_transient());

    let url = format!("http://127.0.0.1:{}/x.tar.gz", dead_port());
    let start = Instant::now();
    let err = fetcher
        .fetch(&http_source(&url, None), &no_secrets())
        .await
        .unwrap_err();
    assert_eq!(err.category(), "Unreachable", "{err}");
    assert!(err.is_transient());
    // Bounded by the fetcher's connect timeout (2 s), with slack for a loaded machine.
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn redirects_are_followed_up_to_the_limit() {
    let fx = Fixtures::load();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let archive = tar_gz(&[("a.yaml", b"a: 1\n")]);
    let path = fx.put_file(
        &format!("{}/r.tar.gz", unique_name("http-redirect")),
        &archive,
    );
    let rel = path.trim_start_matches('/');
    // The fetcher allows 5 redirects.
    let ok = fx.http_plain().url_for(&format!("/_redirect/5/{rel}"));
    let got = fetcher
        .fetch(&http_source(&ok, None), &no_secrets())
        .await
        .unwrap();
    assert_eq!(got.resolved, format!("sha256:{}", sha(&archive)));
    let too_many = fx.http_plain().url_for(&format!("/_redirect/6/{rel}"));
    let err = fetcher
        .fetch(&http_source(&too_many, None), &no_secrets())
        .await
        .unwrap_err();
    assert_eq!(err.category(), "InvalidSource", "{err}");
    assert!(err.to_string().contains("redirect"), "{err}");
    assert!(!err.is_transient());
}
