//! Git sources against the real fixture git servers (`git http-backend` over smart HTTP, and an
//! sshd serving the same repos over SSH;
//! `tools/fixtures.sh start`).

#[path = "support/sources_extra.rs"]
mod sources_extra;
mod support;

use std::time::{Duration, Instant};

use pallet::source::{Credentials, Limits};
use sources_extra::*;
use support::{unique_name, Fixtures};

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

// ---- git over SSH (the fixtures' sshd, public-key auth, host key checked against known_hosts) ----

/// Credentials as a `kubernetes.io/ssh-auth` Secret from `origin` carries them.
fn ssh_creds(origin: &str, private_key: &str, known_hosts: &str) -> Credentials {
    let data = [
        ("ssh-privatekey", private_key),
        ("known_hosts", known_hosts),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
    .collect();
    Credentials::from_secret_data(origin, Some("kubernetes.io/ssh-auth"), &data).unwrap()
}

/// The git-ssh server's authorized test key and its known_hosts line.
fn ssh_server_creds(fx: &Fixtures) -> (String, String) {
    let git = fx.git_ssh();
    let key_path = git
        .ssh_private_key
        .as_ref()
        .expect("git-ssh has a private key");
    let key = std::fs::read_to_string(key_path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", key_path.display()));
    let known = git
        .ssh_known_hosts
        .clone()
        .expect("git-ssh has a known_hosts line");
    (key, known)
}

/// A fresh ed25519 key pair nobody authorized: (private key, public key line).
fn unauthorized_ssh_key() -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("key");
    support::RunExt::run(
        std::process::Command::new("ssh-keygen")
            .args([
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "pallet-tests-unauthorized",
                "-f",
            ])
            .arg(&path),
    );
    (
        std::fs::read_to_string(&path).unwrap(),
        std::fs::read_to_string(path.with_extension("pub")).unwrap(),
    )
}

/// A line of the private key's base64 body, to check errors never carry it.
fn key_body_line(private_key: &str) -> &str {
    private_key
        .lines()
        .find(|l| !l.starts_with("-----") && l.len() > 20)
        .expect("a key body line")
}

#[tokio::test]
async fn ssh_key_and_known_host_resolve_and_fetch_the_tree() {
    let fx = Fixtures::load();
    let git = fx.git_ssh();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let repo = fx.git_repo(&unique_name("git-ssh"));
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
    let (key, known) = ssh_server_creds(fx);
    let creds = with_creds(ssh_creds("secret ns/git-ssh", &key, &known));
    let url = repo.url(git);
    assert!(url.starts_with("ssh://"), "{url}");

    let got = fetcher
        .fetch(&git_source(&url, branch("main"), Some("deploy")), &creds)
        .await
        .unwrap();
    assert_eq!(got.resolved, c1);
    assert_eq!(list_tree(&got.path), ["cm.yaml", "sub/x.yaml"]);
    assert_eq!(std::fs::read(got.path.join("cm.yaml")).unwrap(), b"v: 1\n");

    let got = fetcher
        .fetch(&git_source(&url, tag("v1"), None), &creds)
        .await
        .unwrap();
    assert_eq!(got.resolved, c1);
    assert_eq!(
        list_tree(&got.path),
        ["README.md", "deploy/cm.yaml", "deploy/sub/x.yaml"]
    );

    // A pinned commit on a fresh cache: fetched over SSH without an ls-remote.
    let (_tmp2, fresh) = sources_extra::fetcher(Limits::default());
    let got = fresh
        .fetch(&git_source(&url, commit(&c1), Some("deploy/sub")), &creds)
        .await
        .unwrap();
    assert_eq!(got.resolved, c1);
    assert_eq!(list_tree(&got.path), ["x.yaml"]);
}

#[tokio::test]
async fn ssh_unauthorized_key_is_an_auth_error_naming_the_secret() {
    let fx = Fixtures::load();
    let git = fx.git_ssh();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let repo = fx.git_repo(&unique_name("git-ssh-badkey"));
    repo.commit_files("main", &[("a.yaml", b"1")], "one");
    let (_, known) = ssh_server_creds(fx);
    let (wrong_key, _) = unauthorized_ssh_key();
    let src = git_source(&repo.url(git), branch("main"), None);

    let start = Instant::now();
    let err = fetcher
        .fetch(
            &src,
            &with_creds(ssh_creds("secret ns/wrong-ssh", &wrong_key, &known)),
        )
        .await
        .unwrap_err();
    let msg = err.to_string();
    eprintln!("unauthorized key: {msg}");
    assert_eq!(err.category(), "Unauthorized", "{msg}");
    assert!(msg.contains("secret ns/wrong-ssh"), "{msg}");
    assert!(!msg.contains(key_body_line(&wrong_key)), "{msg}");
    assert!(
        !msg.to_ascii_lowercase().contains("host key"),
        "a refused key is not a host-key problem: {msg}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "took {:?}",
        start.elapsed()
    );

    // A commit pinned (no ls-remote): the fetch itself is refused the same way.
    let err = fetcher
        .fetch(
            &git_source(&repo.url(git), commit(&repo.rev_parse("main")), None),
            &with_creds(ssh_creds("secret ns/wrong-ssh", &wrong_key, &known)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.category(), "Unauthorized", "{err}");
    assert!(err.to_string().contains("secret ns/wrong-ssh"), "{err}");
}

#[tokio::test]
async fn ssh_host_key_not_in_known_hosts_is_refused() {
    let fx = Fixtures::load();
    let git = fx.git_ssh();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let repo = fx.git_repo(&unique_name("git-ssh-hostkey"));
    repo.commit_files("main", &[("a.yaml", b"1")], "one");
    let (key, known) = ssh_server_creds(fx);
    let src = git_source(&repo.url(git), branch("main"), None);

    // Same host and port, another key (an impostor's); and the right key under another port.
    let host = known.split_whitespace().next().unwrap().to_string();
    let (_, other_pub) = unauthorized_ssh_key();
    let other_key: Vec<&str> = other_pub.split_whitespace().take(2).collect();
    let wrong_key_line = format!("{host} {}\n", other_key.join(" "));
    let real_key: Vec<&str> = known.split_whitespace().skip(1).take(2).collect();
    let wrong_port_line = format!("[127.0.0.1]:{} {}\n", dead_port(), real_key.join(" "));

    for (what, known_hosts) in [
        ("other key", wrong_key_line),
        ("other port", wrong_port_line),
    ] {
        let err = fetcher
            .fetch(
                &src,
                &with_creds(ssh_creds("secret ns/ssh-kh", &key, &known_hosts)),
            )
            .await
            .unwrap_err();
        let msg = err.to_string();
        eprintln!("host key, {what}: {msg}");
        assert_eq!(err.category(), "Unauthorized", "{what}: {msg}");
        assert!(
            msg.contains("host key") && msg.contains("known_hosts"),
            "{what}: {msg}"
        );
        assert!(msg.contains("secret ns/ssh-kh"), "{what}: {msg}");
        assert!(!msg.contains(key_body_line(&key)), "{what}: {msg}");
    }
}

#[tokio::test]
async fn ssh_floating_branch_moved_resolves_to_the_new_commit() {
    let fx = Fixtures::load();
    let git = fx.git_ssh();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let repo = fx.git_repo(&unique_name("git-ssh-move"));
    let c1 = repo.commit_files("main", &[("a.yaml", b"1")], "one");
    let (key, known) = ssh_server_creds(fx);
    let creds = with_creds(ssh_creds("secret ns/git-ssh", &key, &known));
    let src = git_source(&repo.url(git), branch("main"), None);

    let first = fetcher.fetch(&src, &creds).await.unwrap();
    assert_eq!(first.resolved, c1);
    assert_eq!(std::fs::read(first.path.join("a.yaml")).unwrap(), b"1");
    // Unchanged: the same commit and the same cached tree.
    let again = fetcher.fetch(&src, &creds).await.unwrap();
    assert_eq!(
        (again.resolved.as_str(), &again.path),
        (c1.as_str(), &first.path)
    );

    let c2 = repo.commit_files("main", &[("a.yaml", b"2"), ("b.yaml", b"b")], "two");
    assert_ne!(c1, c2);
    let moved = fetcher.fetch(&src, &creds).await.unwrap();
    assert_eq!(moved.resolved, c2);
    assert_eq!(list_tree(&moved.path), ["a.yaml", "b.yaml"]);
    assert_eq!(std::fs::read(moved.path.join("a.yaml")).unwrap(), b"2");
}

#[tokio::test]
async fn a_semver_range_takes_the_newest_matching_tag_from_one_ls_remote() {
    let fx = Fixtures::load();
    let git = fx.git_plain();
    let (_tmp, fetcher) = fetcher(Limits::default());
    let repo = fx.git_repo(&unique_name("git-semver"));
    let c1 = repo.commit_files("main", &[("a.yaml", b"1")], "one");
    repo.tag("v1.0.0", &c1, None);
    let c2 = repo.commit_files("main", &[("a.yaml", b"2")], "two");
    // Annotated: the range must resolve to the commit, not the tag object.
    repo.tag("v1.2.0", &c2, Some("annotated"));
    let c3 = repo.commit_files("main", &[("a.yaml", b"3")], "three");
    repo.tag("v1.3.0-rc.1", &c3, None);
    repo.tag("v2.0.0", &c3, None);
    repo.tag("not-a-version", &c3, None);

    let range = |r: &str| {
        git_source(
            &repo.url(git),
            pallet::api::GitReference {
                semver: Some(r.into()),
                ..Default::default()
            },
            None,
        )
    };
    let got = fetcher
        .fetch(&range(">=1.0.0 <2.0.0"), &no_secrets())
        .await
        .unwrap();
    assert_eq!(got.resolved, c2, "v1.2.0 is the newest release below 2");
    assert_eq!(got.version.as_deref(), Some("v1.2.0"));
    assert_eq!(got.reference, ">=1.0.0 <2.0.0");
    assert_eq!(std::fs::read(got.path.join("a.yaml")).unwrap(), b"2");

    // Pre-releases only when the range asks for one.
    let got = fetcher
        .fetch(&range(">=1.3.0-0 <2.0.0-0"), &no_secrets())
        .await
        .unwrap();
    assert_eq!(got.version.as_deref(), Some("v1.3.0-rc.1"));

    // A newer matching tag is seen at the next resolve.
    let c4 = repo.commit_files("main", &[("a.yaml", b"4")], "four");
    repo.tag("v1.4.0", &c4, None);
    let got = fetcher.fetch(&range("1.x"), &no_secrets()).await.unwrap();
    assert_eq!(
        (got.resolved.as_str(), got.version.as_deref()),
        (c4.as_str(), Some("v1.4.0"))
    );

    let err = fetcher
        .fetch(&range(">=3"), &no_secrets())
        .await
        .unwrap_err();
    assert_eq!(err.category(), "NoMatchingVersion");
    let msg = err.to_string();
    assert!(msg.contains(">=3") && msg.contains("v2.0.0"), "{msg}");

    let err = fetcher
        .fetch(&range(">=banana"), &no_secrets())
        .await
        .unwrap_err();
    assert_eq!(err.category(), "InvalidSource", "{err}");
}
