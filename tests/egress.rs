//! Where sources may point, against the real fixture servers (all on 127.0.0.1): loopback,
//! link-local and local git locations are refused unless the egress policy allows them, checked
//! on resolved addresses and on every redirect; redirects stay on the first request's origin
//! unless the source allows otherwise, and credentials never follow a redirect to another host.

#[path = "support/receiver.rs"]
mod receiver;
#[path = "support/sources_extra.rs"]
mod sources_extra;
mod support;

use std::sync::Arc;

use pallet::api::{HelmRepositorySource, Source, SourceKind};
use pallet::egress::EgressPolicy;
use pallet::source::{Cache, FetchOptions, Fetcher, SourceError};
use receiver::Receiver;
use sources_extra::*;
use support::{unique_name, Fixtures};

fn fetcher_with(egress: EgressPolicy) -> (tempfile::TempDir, Fetcher) {
    let dir = tempfile::tempdir().unwrap();
    let fx = Fixtures::load();
    let fetcher = Fetcher::new(
        Arc::new(Cache::open(dir.path().join("cache"), 1 << 30).unwrap()),
        FetchOptions {
            connect_timeout: std::time::Duration::from_secs(2),
            timeout: std::time::Duration::from_secs(20),
            plain_http_registries: vec![fx.registry_plain().host.clone()],
            egress,
            ..FetchOptions::default()
        },
    );
    (dir, fetcher)
}

fn loopback_only() -> EgressPolicy {
    EgressPolicy {
        allow_loopback: true,
        ..EgressPolicy::default()
    }
}

fn chart_source(repo: &str, chart: &str, cross_host: bool) -> Source {
    Source {
        kind: SourceKind::HelmRepository,
        destination: String::new(),
        image: None,
        git: None,
        http: None,
        helm_repository: Some(HelmRepositorySource {
            url: repo.into(),
            chart: chart.into(),
            version: None,
            digest: None,
            auth: None,
            ca_secret: None,
            insecure_skip_tls_verify: false,
            allow_cross_host_redirects: cross_host,
        }),
        poll_interval: None,
        verify: None,
    }
}

/// Publishes an index listing chart `c` 1.0.0 at `chart_url`; returns the repository URL on
/// `server`.
fn index_with_chart_url(fx: &Fixtures, server: &support::Server, chart_url: &str) -> String {
    let dir = unique_name("egress-repo");
    let index = serde_json::json!({
        "apiVersion": "v1",
        "entries": {"c": [{"version": "1.0.0", "urls": [chart_url]}]},
    });
    fx.put_file(&format!("{dir}/index.yaml"), index.to_string().as_bytes());
    server.url_for(&format!("/{dir}"))
}

fn assert_refused(result: Result<pallet::source::Fetched, SourceError>, wanted: &[&str]) {
    let err = result.expect_err("refused");
    assert_eq!(err.category(), "EgressRefused", "{err}");
    assert!(!err.is_transient(), "{err}");
    let text = err.to_string();
    for w in wanted {
        assert!(text.contains(w), "{w:?} not in {text}");
    }
}

#[tokio::test]
async fn every_source_kind_on_loopback_is_refused_by_default() {
    let fx = Fixtures::load();
    let (_dir, strict) = fetcher_with(EgressPolicy::default());
    let path = fx.put_file(
        &format!("{}/cm.yaml", unique_name("egress-http")),
        b"kind: ConfigMap\n",
    );
    let url = fx.http_plain().url_for(&path);
    let flag = ["--allow-loopback-egress"];
    assert_refused(
        strict.fetch(&http_source(&url, None), &no_secrets()).await,
        &flag,
    );
    // A name is judged by the addresses it resolves to.
    let by_name = url.replace("127.0.0.1", "localhost");
    assert_refused(
        strict
            .fetch(&http_source(&by_name, None), &no_secrets())
            .await,
        &["localhost", "loopback", "--allow-loopback-egress"],
    );
    assert_eq!(fx.http_requests(fx.http_plain(), &path).await, 0);

    let repo = index_with_chart_url(fx, fx.http_plain(), "c-1.0.0.tgz");
    assert_refused(
        strict
            .fetch(&chart_source(&repo, "c", false), &no_secrets())
            .await,
        &flag,
    );

    let name = unique_name("egress-git");
    let git = fx.git_repo(&name);
    git.commit_files("main", &[("cm.yaml", b"kind: ConfigMap\n")], "init");
    let git_url = git.url(fx.git_plain());
    assert_refused(
        strict
            .fetch(&git_source(&git_url, branch("main"), None), &no_secrets())
            .await,
        &flag,
    );
    assert_eq!(fx.git_requests(fx.git_plain(), &name).await, 0);

    let image = format!(
        "{}/{}:v1",
        fx.registry_plain().host,
        unique_name("egress-image")
    );
    assert_refused(
        strict.fetch(&image_source(&image), &no_secrets()).await,
        &["registry", "--allow-loopback-egress"],
    );

    // The same sources pass with loopback allowed.
    let (_dir, open) = fetcher_with(loopback_only());
    open.fetch(&http_source(&url, None), &no_secrets())
        .await
        .unwrap();
    open.fetch(&git_source(&git_url, branch("main"), None), &no_secrets())
        .await
        .unwrap();
}

#[tokio::test]
async fn local_git_repositories_need_their_own_flag() {
    let fx = Fixtures::load();
    let name = unique_name("egress-local-git");
    let git = fx.git_repo(&name);
    git.commit_files("main", &[("cm.yaml", b"kind: ConfigMap\n")], "init");
    let path = git.path.clone();
    let (_dir, loopback) = fetcher_with(loopback_only());
    for location in [
        format!("file://{}", path.display()),
        path.display().to_string(),
    ] {
        assert_refused(
            loopback
                .fetch(&git_source(&location, branch("main"), None), &no_secrets())
                .await,
            &["local path or file:// URL", "--allow-local-git"],
        );
    }
    let (_dir, local) = fetcher_with(EgressPolicy {
        allow_local_git: true,
        ..EgressPolicy::default()
    });
    let got = local
        .fetch(
            &git_source(&format!("file://{}", path.display()), branch("main"), None),
            &no_secrets(),
        )
        .await
        .unwrap();
    assert_eq!(list_tree(&got.path), ["cm.yaml"]);
}

#[tokio::test]
async fn link_local_addresses_are_refused_directly_and_after_a_redirect() {
    let fx = Fixtures::load();
    let (_dir, fetcher) = fetcher_with(loopback_only());
    // Refused before any connection is made: nothing is sent to the metadata address.
    assert_refused(
        fetcher
            .fetch(
                &http_source("http://169.254.169.254/latest/meta-data/x.yaml", None),
                &no_secrets(),
            )
            .await,
        &["169.254.169.254", "link-local", "--allow-link-local-egress"],
    );
    let goto = |target: &str| {
        let encoded: String = url::form_urlencoded::byte_serialize(target.as_bytes()).collect();
        fx.http_plain().url_for(&format!("/_goto?url={encoded}"))
    };
    let repo = index_with_chart_url(
        fx,
        fx.http_plain(),
        &goto("http://169.254.169.254/latest/meta-data/c.tgz"),
    );
    assert_refused(
        fetcher
            .fetch(&chart_source(&repo, "c", true), &no_secrets())
            .await,
        &["redirect to http://169.254.169.254/", "link-local"],
    );
    let repo = index_with_chart_url(fx, fx.http_plain(), &goto("http://[fe80::1]/c.tgz"));
    assert_refused(
        fetcher
            .fetch(&chart_source(&repo, "c", true), &no_secrets())
            .await,
        &["fe80::1", "link-local"],
    );
}

#[tokio::test]
async fn cross_host_redirects_need_the_sources_consent_and_never_carry_credentials() {
    let fx = Fixtures::load();
    let receiver = Receiver::start();
    let (_dir, fetcher) = fetcher_with(loopback_only());
    let basic = fx.http_basic();
    let chart_path = format!("/{}/c.tgz", unique_name("egress-elsewhere"));
    let target = format!("{}{chart_path}", receiver.url);
    let encoded: String = url::form_urlencoded::byte_serialize(target.as_bytes()).collect();
    // The chart URL is on the repository's own server (credentials go there), which redirects
    // to another host.
    let chart_url = basic.url_for(&format!("/_goto?url={encoded}"));
    let repo = index_with_chart_url(fx, basic, &chart_url);
    let creds = with_creds(basic_creds(basic));

    assert_refused(
        fetcher
            .fetch(&chart_source(&repo, "c", false), &creds)
            .await,
        &["another scheme, host or port", "allowCrossHostRedirects"],
    );
    assert!(receiver.requests(Some(&chart_path)).await.is_empty());

    // Allowed: the redirect is followed, without the credentials.
    let result = fetcher.fetch(&chart_source(&repo, "c", true), &creds).await;
    if let Err(e) = &result {
        assert_ne!(e.category(), "EgressRefused", "{e}");
    }
    let received = receiver.requests(Some(&chart_path)).await;
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(received[0].header("Authorization"), None, "{received:?}");
    // The repository's own server did get them: it answered the redirect, not 401.
    let redirects = fx
        .requests(&[("server", &basic.name), ("prefix", "/_goto")])
        .await;
    assert!(redirects.iter().any(|r| r.status == 302), "{redirects:?}");
}

fn basic_creds(server: &support::Server) -> pallet::source::Credentials {
    basic(server, "secret test/basic")
}
