use super::*;
use http::HeaderValue;

const TOKEN: &[u8] = b"s3cret";

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.insert(*name, HeaderValue::from_str(value).unwrap());
    }
    map
}

#[test]
fn hmac_providers_take_their_own_header_and_refuse_missing_or_wrong_signatures() {
    let body = br#"{"ref":"refs/heads/main"}"#;
    let good = sign(body, TOKEN);
    let cases = [
        (
            Provider::GitHub,
            "x-hub-signature-256",
            format!("sha256={good}"),
        ),
        (Provider::Gitea, "x-gitea-signature", good.clone()),
        (Provider::Generic, "x-signature", format!("sha256={good}")),
    ];
    for (provider, header, value) in cases {
        let signed = headers(&[(header, &value)]);
        assert_eq!(
            authenticate(provider, &signed, body, TOKEN),
            Ok(()),
            "{provider:?}"
        );
        assert_eq!(
            authenticate(provider, &HeaderMap::new(), body, TOKEN),
            Err(Refusal::Missing(header)),
            "{provider:?} unsigned"
        );
        // Another key, another body, a bad encoding: refused.
        let other = sign(body, b"other");
        let prefix = if provider == Provider::Gitea {
            ""
        } else {
            "sha256="
        };
        for wrong in [
            format!("{prefix}{other}"),
            format!("{prefix}zz"),
            "sha1=00".to_string(),
        ] {
            let status = authenticate(provider, &headers(&[(header, &wrong)]), body, TOKEN)
                .unwrap_err()
                .status();
            assert_eq!(status, 403, "{provider:?} {wrong}");
        }
        assert!(authenticate(provider, &signed, b"tampered", TOKEN).is_err());
    }
}

#[test]
fn token_providers_compare_the_token() {
    let body = b"{}";
    let gitlab = headers(&[("x-gitlab-token", "s3cret")]);
    assert_eq!(authenticate(Provider::GitLab, &gitlab, body, TOKEN), Ok(()));
    let wrong = headers(&[("x-gitlab-token", "s3cret2")]);
    assert_eq!(
        authenticate(Provider::GitLab, &wrong, body, TOKEN)
            .unwrap_err()
            .status(),
        403
    );
    assert_eq!(
        authenticate(Provider::GitLab, &HeaderMap::new(), body, TOKEN)
            .unwrap_err()
            .status(),
        401
    );
    for provider in [Provider::Harbor, Provider::Registry] {
        for value in ["s3cret", "Bearer s3cret"] {
            let given = headers(&[("authorization", value)]);
            assert_eq!(
                authenticate(provider, &given, body, TOKEN),
                Ok(()),
                "{value}"
            );
        }
        let wrong = headers(&[("authorization", "Bearer nope")]);
        assert_eq!(
            authenticate(provider, &wrong, body, TOKEN)
                .unwrap_err()
                .status(),
            403
        );
    }
}

#[test]
fn pushes_name_their_repository_and_commit() {
    let github = serde_json::json!({
        "ref": "refs/heads/main", "after": "abc123",
        "repository": {"clone_url": "https://github.com/org/app.git", "ssh_url": "git@github.com:org/app.git",
                        "html_url": "https://github.com/org/app"},
    });
    let body = serde_json::to_vec(&github).unwrap();
    let notice = read(
        Provider::GitHub,
        &headers(&[("x-github-event", "push")]),
        &body,
    )
    .unwrap();
    assert_eq!(
        notice,
        Notice::Changed(vec![(
            Subject::Git("github.com/org/app".into()),
            Some("abc123".into())
        )])
    );
    assert!(matches!(
        read(
            Provider::GitHub,
            &headers(&[("x-github-event", "ping")]),
            b"{}"
        )
        .unwrap(),
        Notice::Ignored(_)
    ));
    let gitlab = serde_json::json!({
        "object_kind": "push", "checkout_sha": "def456",
        "project": {"git_http_url": "https://gitlab.example/group/app.git", "git_ssh_url": "git@gitlab.example:group/app.git"},
    });
    let body = serde_json::to_vec(&gitlab).unwrap();
    let notice = read(
        Provider::GitLab,
        &headers(&[("x-gitlab-event", "Push Hook")]),
        &body,
    )
    .unwrap();
    assert_eq!(
        notice,
        Notice::Changed(vec![(
            Subject::Git("gitlab.example/group/app".into()),
            Some("def456".into())
        )])
    );
    let gitea = serde_json::json!({"after": "0a1b", "repository": {"clone_url": "http://gitea.local:3000/team/app.git"}});
    let body = serde_json::to_vec(&gitea).unwrap();
    let notice = read(
        Provider::Gitea,
        &headers(&[("x-gitea-event", "push")]),
        &body,
    )
    .unwrap();
    assert_eq!(
        notice,
        Notice::Changed(vec![(
            Subject::Git("gitea.local:3000/team/app".into()),
            Some("0a1b".into())
        )])
    );
    assert!(read(
        Provider::GitHub,
        &headers(&[("x-github-event", "push")]),
        b"not json"
    )
    .is_err());
}

#[test]
fn registry_events_name_manifest_pushes_only() {
    let envelope = serde_json::json!({"events": [
        {"action": "push", "target": {"mediaType": "application/octet-stream", "repository": "team/app",
          "digest": "sha256:layer", "url": "http://127.0.0.1:5000/v2/team/app/blobs/sha256:layer"}},
        {"action": "pull", "target": {"mediaType": "application/vnd.oci.image.manifest.v1+json", "repository": "team/app",
          "digest": "sha256:m", "tag": "v1", "url": "http://127.0.0.1:5000/v2/team/app/manifests/sha256:m"}},
        {"action": "push", "target": {"mediaType": "application/vnd.oci.image.manifest.v1+json", "repository": "team/app",
          "digest": "sha256:m", "tag": "v1", "url": "http://127.0.0.1:5000/v2/team/app/manifests/sha256:m"},
         "request": {"host": "ignored.example"}},
    ]});
    let body = serde_json::to_vec(&envelope).unwrap();
    assert_eq!(
        read(Provider::Registry, &HeaderMap::new(), &body).unwrap(),
        Notice::Changed(vec![(
            Subject::Image("127.0.0.1:5000/team/app".into()),
            Some("v1@sha256:m".into())
        )])
    );
    let blobs_only = serde_json::json!({"events": [envelope["events"][0].clone()]});
    assert!(matches!(
        read(
            Provider::Registry,
            &HeaderMap::new(),
            &serde_json::to_vec(&blobs_only).unwrap()
        )
        .unwrap(),
        Notice::Ignored(_)
    ));
}

#[test]
fn harbor_and_generic_payloads() {
    let harbor = serde_json::json!({"type": "PUSH_ARTIFACT", "event_data": {"resources": [
        {"digest": "sha256:d", "tag": "v2", "resource_url": "harbor.example/library/app:v2"}],
        "repository": {"repo_full_name": "library/app"}}});
    assert_eq!(
        read(
            Provider::Harbor,
            &HeaderMap::new(),
            &serde_json::to_vec(&harbor).unwrap()
        )
        .unwrap(),
        Notice::Changed(vec![(
            Subject::Image("harbor.example/library/app".into()),
            Some("v2@sha256:d".into())
        )])
    );
    let generic = br#"{"repository": "https://git.example/org/app.git", "revision": "r1"}"#;
    assert_eq!(
        read(Provider::Generic, &HeaderMap::new(), generic).unwrap(),
        Notice::Changed(vec![(
            Subject::Any("git.example/org/app".into()),
            Some("r1".into())
        )])
    );
    assert!(read(Provider::Generic, &HeaderMap::new(), b"{}").is_err());
}
