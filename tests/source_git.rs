//! Git sources against the real fixture git servers (`git http-backend` over smart HTTP;
//! `tools/fixtures.sh start`).

#[path = "support/sources_extra.rs"]
mod sources_extra;
mod support;

use std::time::{Duration, Instant};

use pallet::source::{Credentials, Limits, SourceSecrets};
use sources_extra::*;
use support::{unique_name, Fixtures};

fn no_secrets() -> SourceSecrets {
    SourceSecrets::default()
}

fn with_creds(c: Credentials) -> SourceSecrets {
    SourceSecrets {
        credentials: Some(c),
        ca_pem: None,
    }
}

#[tokio::test]
async fn branch_tag_and_commit_resolve_to_commits_and_take_only_the_directory() {
    let fx = Fixtures::load();
    let git = fx.git_plain();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let repo = fx.git_repo(&unique_name("git-happy"));
    let c1 = repo.commit_files(
        "main",
        &[
            ("deploy/cm.yaml", b"v: 1\n"),
            ("deploy/sub/x.yaml", b"x\n"),
            ("README.md", b"hi"),
        ],
        "one",
    );
    repo.tag("v1", &c1, Some("annotated"));
    repo.tag("light", &c1, None);
    let c2 = repo.commit_files("main", &[("deploy/cm.yaml", b"v: 2\n")], "two");

    let got = fetcher
        .fetch(
            &git_source(&repo.url(git), branch("main"), Some("deploy")),
            &no_secrets(),
        )
        .await
        .unwrap();
    assert_eq!(got.resolved, c2);
    assert_eq!(list_tree(&got.path), ["cm.yaml"]);
    assert_eq!(std::fs::read(got.path.join("cm.yaml")).unwrap(), b"v: 2\n");

    for t in ["v1", "light"] {
        let got = fetcher
            .fetch(
                &git_source(&repo.url(git), tag(t), Some("deploy")),
                &no_secrets(),
            )
            .await
            .unwrap();
        assert_eq!(got.resolved, c1, "tag {t}");
        assert_eq!(list_tree(&got.path), ["cm.yaml", "sub/x.yaml"], "tag {t}");
    }

    // An older commit, no longer the head of any branch.
    let (_tmp2, fresh) = sources_extra::fetcher(Limits::default());
    let got = fresh
        .fetch(
            &git_source(&repo.url(git), commit(&c1), None),
            &no_secrets(),
        )
        .await
        .unwrap();
    assert_eq!(got.resolved, c1);
    assert_eq!(
        list_tree(&got.path),
        ["README.md", "deploy/cm.yaml", "deploy/sub/x.yaml"]
    );
}

#[tokio::test]
async fn polling_a_branch_is_one_ls_remote_and_sees_it_move() {
    let fx = Fixtures::load();
    let git = fx.git_plain();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let repo = fx.git_repo(&unique_name("git-poll"));
    let c1 = repo.commit_files("main", &[("a.yaml", b"1")], "one");
    let src = git_source(&repo.url(git), branch("main"), None);
    assert_eq!(
        fetcher.fetch(&src, &no_secrets()).await.unwrap().resolved,
        c1
    );

    let filter = [
        ("server", git.name.as_str()),
        ("repo", &format!("{}.git", repo.name)),
    ];
    let before = fx.requests(&filter).await.len();
    assert_eq!(
        fetcher.fetch(&src, &no_secrets()).await.unwrap().resolved,
        c1
    );
    let poll: Vec<_> = fx
        .requests(&filter)
        .await
        .into_iter()
        .skip(before)
        .collect();
    assert!(
        poll.iter()
            .all(|r| r.method == "GET" && r.path.ends_with("/info/refs")),
        "an unchanged branch must cost only the ref advertisement: {poll:?}"
    );
    assert!(!poll.is_empty());

    let c2 = repo.commit_files("main", &[("a.yaml", b"2")], "two");
    let got = fetcher.fetch(&src, &no_secrets()).await.unwrap();
    assert_eq!(got.resolved, c2);
    assert_eq!(std::fs::read(got.path.join("a.yaml")).unwrap(), b"2");
}

#[tokio::test]
async fn pinned_commit_cached_costs_no_request_after_a_restart() {
    let fx = Fixtures::load();
    let git = fx.git_plain();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cache");
    let repo = fx.git_repo(&unique_name("git-pin"));
    let c1 = repo.commit_files("main", &[("a.yaml", b"1")], "one");
    let src = git_source(&repo.url(git), commit(&c1), None);
    let first = fetcher_at(root.clone(), Limits::default())
        .fetch(&src, &no_secrets())
        .await
        .unwrap();
    let before = fx.git_requests(git, &repo.name).await;
    assert!(before > 0);
    let restarted = fetcher_at(root, Limits::default());
    let start = Instant::now();
    let again = restarted.fetch(&src, &no_secrets()).await.unwrap();
    eprintln!("cached pinned git source resolved in {:?}", start.elapsed());
    assert_eq!(again.path, first.path);
    assert_eq!(fx.git_requests(git, &repo.name).await, before);
}

#[tokio::test]
async fn basic_auth_good_bad_and_missing() {
    let fx = Fixtures::load();
    let git = fx.git_auth();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let repo = fx.git_repo(&unique_name("git-auth"));
    let c1 = repo.commit_files("main", &[("a.yaml", b"1")], "one");
    let src = git_source(&repo.url(git), branch("main"), None);

    let got = fetcher
        .fetch(&src, &with_creds(basic(git, "secret ns/git-creds")))
        .await
        .unwrap();
    assert_eq!(got.resolved, c1);

    let err = fetcher
        .fetch(&src, &with_creds(wrong_basic(git, "secret ns/wrong")))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.category(), "Unauthorized", "{msg}");
    assert!(
        msg.contains("secret ns/wrong") && !msg.contains("definitely-wrong-password"),
        "{msg}"
    );

    let err = fetcher.fetch(&src, &no_secrets()).await.unwrap_err();
    assert_eq!(err.category(), "Unauthorized", "{err}");
    assert!(err.to_string().contains("no credentials"), "{err}");
}

#[tokio::test]
async fn missing_repo_missing_branch_and_server_down() {
    let fx = Fixtures::load();
    let git = fx.git_plain();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let missing = format!("{}/{}.git", git.url, unique_name("git-none"));
    let err = fetcher
        .fetch(&git_source(&missing, branch("main"), None), &no_secrets())
        .await
        .unwrap_err();
    assert_eq!(err.category(), "NotFound", "{err}");

    let repo = fx.git_repo(&unique_name("git-nobranch"));
    repo.commit_files("main", &[("a.yaml", b"1")], "one");
    let err = fetcher
        .fetch(
            &git_source(&repo.url(git), branch("nope"), None),
            &no_secrets(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.category(), "NotFound", "{err}");
    assert!(err.to_string().contains("refs/heads/nope"), "{err}");

    let err = fetcher
        .fetch(
            &git_source(&repo.url(git), branch("main"), Some("no/such/dir")),
            &no_secrets(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.category(), "NotFound", "{err}");

    let start = Instant::now();
    let url = format!("http://127.0.0.1:{}/x.git", dead_port());
    let err = fetcher
        .fetch(&git_source(&url, branch("main"), None), &no_secrets())
        .await
        .unwrap_err();
    assert_eq!(err.category(), "Unreachable", "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(25),
        "took {:?}",
        start.elapsed()
    );
}
