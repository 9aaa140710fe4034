//! Chart repository sources (`kind: helmRepository`, http/https) against the real fixture file
//! servers, with charts packaged and indexed by the real helm (`helm package`, `helm repo index`).

#[path = "support/chart_repo.rs"]
mod chart_repo;
#[path = "support/sources_extra.rs"]
mod sources_extra;
mod support;

use chart_repo::{demo_archive, file_sha256, ChartRepo, DEMO_CHART};
use pallet::api::{HelmRepositorySource, Source, SourceKind};
use pallet::source::{CredentialKind, Credentials, Fetched, Fetcher, Limits, SourceSecrets};
use sources_extra::*;
use support::{Fixtures, RecordedRequest, Server};

/// A helmRepository source for the demo chart.
fn chart_source(url: &str, version: Option<&str>, digest: Option<&str>) -> Source {
    Source {
        kind: SourceKind::HelmRepository,
        destination: String::new(),
        image: None,
        git: None,
        http: None,
        helm_repository: Some(HelmRepositorySource {
            url: url.into(),
            chart: DEMO_CHART.into(),
            version: version.map(str::to_string),
            digest: digest.map(str::to_string),
            auth: None,
            ca_secret: None,
            insecure_skip_tls_verify: false,
            allow_cross_host_redirects: false,
        }),
        poll_interval: None,
        verify: None,
    }
}

fn with_chart(mut source: Source, chart: &str) -> Source {
    if let Some(repo) = source.helm_repository.as_mut() {
        repo.chart = chart.into();
    }
    source
}

async fn requests(fx: &Fixtures, server: &Server, repo: &ChartRepo) -> Vec<RecordedRequest> {
    fx.requests(&[("server", &server.name), ("prefix", &repo.path)])
        .await
}

/// `(path, status)` of every request the server received under the repository.
async fn seen(fx: &Fixtures, server: &Server, repo: &ChartRepo) -> Vec<(String, u16)> {
    requests(fx, server, repo)
        .await
        .into_iter()
        .map(|r| (r.path.trim_start_matches(&repo.path).to_string(), r.status))
        .collect()
}

fn chart_version_in(fetched: &Fetched) -> String {
    let chart = std::fs::read_to_string(fetched.path.join("Chart.yaml")).expect("Chart.yaml");
    chart
        .lines()
        .find_map(|l| l.strip_prefix("version: "))
        .expect("version in Chart.yaml")
        .to_string()
}

async fn fetch(fetcher: &Fetcher, source: &Source, secrets: &SourceSecrets) -> Fetched {
    fetcher
        .fetch(source, secrets)
        .await
        .unwrap_or_else(|e| panic!("fetch failed: {e}"))
}

#[tokio::test]
async fn a_range_takes_the_newest_match_and_an_unchanged_index_costs_one_304() {
    let fx = Fixtures::load();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let repo = ChartRepo::new(fx, "chartrepo-range");
    repo.publish(&["0.1.0", "0.2.0", "0.3.0-rc.1", "1.0.0"]);
    let server = fx.http_plain();
    let source = chart_source(&repo.url(server), Some("0.x"), None);

    let first = fetch(&fetcher, &source, &no_secrets()).await;
    assert_eq!(first.version.as_deref(), Some("0.2.0"));
    assert_eq!(chart_version_in(&first), "0.2.0");
    assert!(first.path.join("templates/configmap.yaml").is_file());
    let archive = repo.dir.join(format!("{DEMO_CHART}-0.2.0.tgz"));
    assert_eq!(first.resolved, format!("sha256:{}", file_sha256(&archive)));
    assert_eq!(
        first.label(),
        format!("helmRepository {} {DEMO_CHART} 0.x", repo.url(server))
    );

    let second = fetch(&fetcher, &source, &no_secrets()).await;
    assert_eq!((second.resolved, second.path), (first.resolved, first.path));
    let chart = format!("/{DEMO_CHART}-0.2.0.tgz");
    assert_eq!(
        seen(fx, server, &repo).await,
        [
            ("/index.yaml".to_string(), 200),
            (chart.clone(), 200),
            ("/index.yaml".to_string(), 304)
        ],
        "the second resolve is one conditional GET of the index"
    );

    // A newer matching version is published: the next resolve takes it; 1.x stays out.
    repo.publish(&["0.4.0", "1.1.0"]);
    let third = fetch(&fetcher, &source, &no_secrets()).await;
    assert_eq!(third.version.as_deref(), Some("0.4.0"));
    assert_eq!(chart_version_in(&third), "0.4.0");

    // Pre-releases only when the range names one; no version means the newest release.
    let pre = fetch(
        &fetcher,
        &chart_source(&repo.url(server), Some(">=0.3.0-0 <0.4.0-0"), None),
        &no_secrets(),
    )
    .await;
    assert_eq!(pre.version.as_deref(), Some("0.3.0-rc.1"));
    let newest = fetch(
        &fetcher,
        &chart_source(&repo.url(server), None, None),
        &no_secrets(),
    )
    .await;
    assert_eq!(newest.version.as_deref(), Some("1.1.0"));
    // Masterminds reads `v1.x` as `1.x`.
    let v_prefixed = fetch(
        &fetcher,
        &chart_source(&repo.url(server), Some("v1.x"), None),
        &no_secrets(),
    )
    .await;
    assert_eq!(v_prefixed.version.as_deref(), Some("1.1.0"));
}

#[tokio::test]
async fn an_exact_version_and_a_digest_pin_cost_no_request_once_cached() {
    let fx = Fixtures::load();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cache");
    let repo = ChartRepo::new(fx, "chartrepo-pin");
    repo.publish(&["0.1.0", "0.2.0"]);
    let server = fx.http_plain();
    let exact = chart_source(&repo.url(server), Some("0.1.0"), None);

    let first = fetch(
        &fetcher_at(root.clone(), Limits::default()),
        &exact,
        &no_secrets(),
    )
    .await;
    assert_eq!(first.version.as_deref(), Some("0.1.0"));
    assert_eq!(chart_version_in(&first), "0.1.0");
    let before = requests(fx, server, &repo).await.len();
    assert_eq!(before, 2, "{:?}", seen(fx, server, &repo).await);

    // A new fetcher over the same directory is an agent restart.
    let again = fetcher_at(root, Limits::default());
    for _ in 0..3 {
        let got = fetch(&again, &exact, &no_secrets()).await;
        assert_eq!((&got.resolved, &got.path), (&first.resolved, &first.path));
        assert_eq!(got.version.as_deref(), Some("0.1.0"));
    }
    let pinned = chart_source(&repo.url(server), Some("0.1.0"), Some(&first.resolved));
    let got = fetch(&again, &pinned, &no_secrets()).await;
    assert_eq!(got.version.as_deref(), Some("0.1.0"));
    assert_eq!(got.resolved, first.resolved);
    assert_eq!(
        requests(fx, server, &repo).await.len(),
        before,
        "a pinned, cached chart must not touch the network: {:?}",
        seen(fx, server, &repo).await
    );
}

#[tokio::test]
async fn relative_and_absolute_chart_urls_and_credentials_only_for_the_repository_host() {
    let fx = Fixtures::load();
    let (_tmp, fetcher) = fetcher(Limits::default());

    // Relative URLs (helm repo index without --url), behind basic auth.
    let relative = ChartRepo::new(fx, "chartrepo-rel");
    relative.publish(&["1.0.0"]);
    let index = std::fs::read_to_string(relative.dir.join("index.yaml")).unwrap();
    assert!(
        index.contains(&format!("- {DEMO_CHART}-1.0.0.tgz")),
        "{index}"
    );
    let basic_creds = with_creds(basic(fx.http_basic(), "secret ns/basic"));
    let got = fetch(
        &fetcher,
        &chart_source(&relative.url(fx.http_basic()), Some("1.0.0"), None),
        &basic_creds,
    )
    .await;
    assert_eq!(chart_version_in(&got), "1.0.0");
    assert_eq!(
        seen(fx, fx.http_basic(), &relative).await,
        [
            ("/index.yaml".to_string(), 200),
            (format!("/{DEMO_CHART}-1.0.0.tgz"), 200)
        ]
    );

    // Absolute URLs on another host (the plain server): fetched there, without credentials.
    let absolute = ChartRepo::new(fx, "chartrepo-abs");
    absolute.package("2.0.0");
    absolute.index(Some(&absolute.url(fx.http_plain())));
    let got = fetch(
        &fetcher,
        &chart_source(&absolute.url(fx.http_basic()), None, None),
        &basic_creds,
    )
    .await;
    assert_eq!(chart_version_in(&got), "2.0.0");
    assert_eq!(
        seen(fx, fx.http_plain(), &absolute).await,
        [(format!("/{DEMO_CHART}-2.0.0.tgz"), 200)]
    );

    // Absolute URLs on a host that wants a token: the repository's basic credentials are not
    // passed on (helm without --pass-credentials), and the error says so.
    let elsewhere = ChartRepo::new(fx, "chartrepo-cross");
    elsewhere.package("3.0.0");
    elsewhere.index(Some(&elsewhere.url(fx.http_bearer())));
    let err = fetcher
        .fetch(
            &chart_source(&elsewhere.url(fx.http_basic()), None, None),
            &basic_creds,
        )
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.category(), "Unauthorized", "{msg}");
    assert!(
        msg.contains("not sent") && msg.contains(&demo_archive(&elsewhere, "3.0.0")),
        "{msg}"
    );
}

#[tokio::test]
async fn basic_and_bearer_auth_and_auth_without_a_secret() {
    let fx = Fixtures::load();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let repo = ChartRepo::new(fx, "chartrepo-auth");
    repo.publish(&["0.5.0"]);

    let token = fx.http_bearer().token.clone().expect("bearer server token");
    let bearer = SourceSecrets {
        credentials: Some(Credentials {
            origin: "secret ns/token".into(),
            kind: CredentialKind::Token(token),
        }),
        ca_pem: None,
        verify: None,
    };
    let got = fetch(
        &fetcher,
        &chart_source(&repo.url(fx.http_bearer()), Some("0.5.0"), None),
        &bearer,
    )
    .await;
    assert_eq!(chart_version_in(&got), "0.5.0");

    let err = fetcher
        .fetch(
            &chart_source(&repo.url(fx.http_basic()), Some("0.5.0"), None),
            &no_secrets(),
        )
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.category(), "Unauthorized", "{msg}");
    assert!(
        msg.contains("no credentials") && msg.contains("index.yaml"),
        "{msg}"
    );
    let err = fetcher
        .fetch(
            &chart_source(&repo.url(fx.http_basic()), Some("0.5.0"), None),
            &with_creds(wrong_basic(fx.http_basic(), "secret ns/wrong")),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("secret ns/wrong"), "{err}");
}

#[tokio::test]
async fn tls_with_the_repository_ca_or_without_verification() {
    let fx = Fixtures::load();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let repo = ChartRepo::new(fx, "chartrepo-tls");
    repo.publish(&["0.1.0"]);
    let source = chart_source(&repo.url(fx.http_tls()), None, None);

    let err = fetcher.fetch(&source, &no_secrets()).await.unwrap_err();
    assert_eq!(err.category(), "Unreachable", "{err}");
    let with_ca = SourceSecrets {
        credentials: None,
        ca_pem: Some(fx.ca_pem()),
        verify: None,
    };
    assert_eq!(
        chart_version_in(&fetch(&fetcher, &source, &with_ca).await),
        "0.1.0"
    );
    let mut insecure = source.clone();
    insecure
        .helm_repository
        .as_mut()
        .unwrap()
        .insecure_skip_tls_verify = true;
    let (_tmp2, fresh) = sources_extra::fetcher(Limits::default());
    assert_eq!(
        chart_version_in(&fetch(&fresh, &insecure, &no_secrets()).await),
        "0.1.0"
    );
}

#[tokio::test]
async fn a_tampered_chart_or_a_wrong_pin_is_a_digest_mismatch() {
    let fx = Fixtures::load();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let repo = ChartRepo::new(fx, "chartrepo-tamper");
    repo.publish(&["0.1.0", "0.2.0"]);
    let indexed = file_sha256(&repo.dir.join(format!("{DEMO_CHART}-0.1.0.tgz")));
    // Replace the archive after indexing with another (valid) chart archive.
    std::fs::copy(
        repo.dir.join(format!("{DEMO_CHART}-0.2.0.tgz")),
        repo.dir.join(format!("{DEMO_CHART}-0.1.0.tgz")),
    )
    .unwrap();
    let err = fetcher
        .fetch(
            &chart_source(&repo.url(fx.http_plain()), Some("0.1.0"), None),
            &no_secrets(),
        )
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.category(), "DigestMismatch", "{msg}");
    assert!(
        msg.contains(&indexed) && msg.contains(&demo_archive(&repo, "0.1.0")),
        "{msg}"
    );
    assert!(!err.is_transient());

    let wrong = format!("sha256:{}", "0".repeat(64));
    let err = fetcher
        .fetch(
            &chart_source(&repo.url(fx.http_plain()), Some("0.2.0"), Some(&wrong)),
            &no_secrets(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.category(), "DigestMismatch", "{err}");
    assert!(err.to_string().contains(&wrong), "{err}");
}

#[tokio::test]
async fn no_matching_version_a_missing_chart_and_a_bad_index_are_clear_errors() {
    let fx = Fixtures::load();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let repo = ChartRepo::new(fx, "chartrepo-errors");
    repo.publish(&["0.1.0", "0.2.0", "1.0.0", "1.1.0-beta.1"]);
    let url = repo.url(fx.http_plain());

    let err = fetcher
        .fetch(&chart_source(&url, Some("2.x"), None), &no_secrets())
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.category(), "NoMatchingVersion", "{msg}");
    assert!(
        msg.contains("\"2.x\"") && msg.contains("1.1.0-beta.1, 1.0.0, 0.2.0, 0.1.0"),
        "{msg}"
    );

    let err = fetcher
        .fetch(
            &with_chart(chart_source(&url, None, None), "no-such-chart"),
            &no_secrets(),
        )
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.category(), "NotFound", "{msg}");
    assert!(
        msg.contains("chart no-such-chart") && msg.contains(&url),
        "{msg}"
    );

    let err = fetcher
        .fetch(&chart_source(&url, Some(">>1"), None), &no_secrets())
        .await
        .unwrap_err();
    assert_eq!(err.category(), "InvalidSource", "{err}");

    let broken = ChartRepo::new(fx, "chartrepo-badindex");
    fx.put_file(
        broken.file_path("index.yaml").trim_start_matches('/'),
        b"<html><body>not an index</body></html>\n",
    );
    let err = fetcher
        .fetch(
            &chart_source(&broken.url(fx.http_plain()), None, None),
            &no_secrets(),
        )
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.category(), "InvalidSource", "{msg}");
    assert!(msg.contains("is not a chart repository index"), "{msg}");

    let empty = ChartRepo::new(fx, "chartrepo-noindex");
    let err = fetcher
        .fetch(
            &chart_source(&empty.url(fx.http_plain()), None, None),
            &no_secrets(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.category(), "NotFound", "{err}");
    assert!(err.to_string().contains("index.yaml"), "{err}");
}
