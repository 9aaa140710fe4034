//! A git source over HTTPS against the fixtures' TLS git server: libgit2 reaches it through the
//! agent's relay as its `CONNECT` proxy, TLS end to end (libgit2 checks the server's certificate
//! for the repository's host; the fixtures' CA is trusted through OpenSSL's `SSL_CERT_FILE`, read
//! when libgit2 first starts: this file holds one test so that nothing starts it earlier).

#[path = "support/sources_extra.rs"]
mod sources_extra;
mod support;

use pallet::source::Limits;
use sources_extra::*;
use support::{unique_name, Fixtures};

#[tokio::test]
async fn an_https_repository_is_fetched_through_the_relay_with_tls_end_to_end() {
    let fx = Fixtures::load();
    let tls = fx.git_tls();
    let repo = fx.git_repo(&unique_name("git-https"));
    let c1 = repo.commit_files("main", &[("a.yaml", b"1")], "one");
    let src = git_source(&repo.url(tls), branch("main"), None);
    let creds = with_creds(basic(tls, "secret ns/git-creds"));
    // Before libgit2 starts (this test binary runs this one test).
    std::env::set_var("SSL_CERT_FILE", fx.ca_cert());
    let (_tmp, fetcher) = fetcher(Limits::default());
    let got = fetcher.fetch(&src, &creds).await.unwrap();
    assert_eq!(got.resolved, c1);
    assert_eq!(std::fs::read(got.path.join("a.yaml")).unwrap(), b"1");
    // The ref advertisement went through the relay: a limit below it refuses the source.
    let (_tmp, small) = fetcher_with_advertisement_limit(1);
    let err = small.fetch(&src, &creds).await.unwrap_err();
    assert!(
        err.to_string().contains("--git-max-advertisement-mib"),
        "{err}"
    );
}

/// A fetcher whose ref advertisements may be `bytes` long.
fn fetcher_with_advertisement_limit(bytes: u64) -> (tempfile::TempDir, pallet::source::Fetcher) {
    let dir = tempfile::tempdir().unwrap();
    let plain = fetcher_at(dir.path().join("cache"), Limits::default());
    let options = pallet::source::FetchOptions {
        git_max_advertisement_bytes: bytes,
        ..plain.options().clone()
    };
    let cache = pallet::source::Cache::open(dir.path().join("small"), 1 << 30).unwrap();
    (
        dir,
        pallet::source::Fetcher::new(std::sync::Arc::new(cache), options),
    )
}
