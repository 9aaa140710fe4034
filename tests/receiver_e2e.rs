//! End-to-end: the notification receiver. A signed push notification makes the new commit
//! Ready in seconds with `pollInterval: 1h`; unsigned and wrongly signed requests are refused
//! and logged without secrets; 1,000 notifications of one commit cause one poll; each
//! provider's documented payload works; a registry's own notifications (docker-registry's
//! `notifications` endpoint) move an image tag's BundleDeployment.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/scratch_registry.rs"]
mod scratch_registry;
mod support;

use std::time::{Duration, Instant};

use agent::{wait_condition, wait_value, Agent};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, PostParams};
use kube::Client;
use pallet::api::BundleDeployment;
use pallet::receiver::providers::sign;
use serde_json::json;

const TOKEN: &str = "receiver-test-token";

fn config_map(value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  value: \"{value}\"\n"
    )
}

/// The receiver's Secret for this test, in the agent's namespace.
async fn receiver_secret(client: &Client, name: &str) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name},
        "stringData": {"token": TOKEN},
    }))
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "pallet-system");
    let _ = secrets.delete(name, &Default::default()).await;
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// An agent with its receiver on a free port; its base URL.
async fn agent_with_receiver(client: &Client, test: &str, extra: &[&str]) -> (Agent, String) {
    receiver_secret(client, test).await;
    let mut args = vec![
        "--requeue-seconds",
        "3600",
        "--receiver-addr",
        "127.0.0.1:0",
        "--receiver-secret",
        test,
    ];
    args.extend_from_slice(extra);
    let agent = Agent::start_with(test, &args);
    let log = agent.log.clone();
    let address = cluster::poll_until(
        "the receiver's address in the agent's log",
        Duration::from_secs(60),
        || {
            let log = log.clone();
            async move {
                std::fs::read_to_string(&log)
                    .unwrap_or_default()
                    .lines()
                    .find(|l| l.contains("notification receiver listening"))
                    .and_then(|l| l.split("address=").nth(1))
                    .and_then(|rest| rest.split_whitespace().next())
                    .map(|a| a.trim_matches('"').to_string())
                    .ok_or_else(|| "not logged yet".to_string())
            }
        },
    )
    .await;
    (agent, format!("http://{address}"))
}

fn github_push(clone_url: &str, after: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "ref": "refs/heads/main", "before": "0000000000000000000000000000000000000000", "after": after,
        "repository": {"full_name": "org/app", "clone_url": clone_url, "html_url": clone_url.trim_end_matches(".git")},
        "pusher": {"name": "dev"},
    }))
    .unwrap()
}

async fn post(url: &str, headers: &[(&str, String)], body: Vec<u8>) -> u16 {
    let client = reqwest::Client::new();
    let mut request = client.post(url).body(body);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    request.send().await.unwrap().status().as_u16()
}

/// A body the receiver refuses before reading all of it: answered `status`, or the connection
/// closed while the rest was still being sent (the server answered and closed first; the
/// client then sees a broken pipe instead of the answer). Either way the receiver still
/// answers the next request.
async fn assert_refused_early(url: &str, headers: &[(&str, String)], body: Vec<u8>, status: u16) {
    let client = reqwest::Client::new();
    let mut request = client.post(url).body(body);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    match request.send().await {
        Ok(response) => assert_eq!(response.status().as_u16(), status, "{url}"),
        Err(error) => {
            let closed = format!("{error:?}");
            assert!(
                closed.contains("BrokenPipe") || closed.contains("ConnectionReset"),
                "{url}: {closed}"
            );
            assert_eq!(post(url, &[], Vec::new()).await, 401, "{url} still answers");
        }
    }
}

async fn create_bd(client: &Client, name: &str, git_url: &str) {
    let spec = json!({
        "installNamespace": name,
        "sources": [{"kind": "git", "git": {"repository": git_url, "ref": {"branch": "main"}}, "pollInterval": "1h"}],
        "format": "plain",
    });
    agent::apply_bd(client, name, spec).await;
}

async fn cleanup(client: &Client, name: &str) {
    let _ = Api::<BundleDeployment>::all(client.clone())
        .delete(name, &Default::default())
        .await;
    agent::wait_bd_gone(client, name).await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &Default::default())
        .await;
    let _ = Api::<Secret>::namespaced(client.clone(), "pallet-system")
        .delete(name, &Default::default())
        .await;
}

#[tokio::test]
async fn a_signed_push_is_ready_in_seconds_bad_signatures_are_refused_and_a_flood_polls_once() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let git = fx.git_plain();
    let test = support::unique_name("receiver");
    let repo = fx.git_repo(&test);
    repo.commit_files("main", &[("app.yaml", config_map("1").as_bytes())], "v1");
    let (agent, base) =
        agent_with_receiver(&client, &test, &["--receiver-requests-per-second", "2000"]).await;
    let url = repo.url(git);
    create_bd(&client, &test, &url).await;
    wait_condition(&client, &agent, &test, "Ready", "True", "1 objects").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);
    let hook = format!("{base}/hook/github");

    // Refused: unsigned (401), signed with another key (403); nothing polled.
    let v2 = repo.commit_files("main", &[("app.yaml", config_map("2").as_bytes())], "v2");
    let body = github_push(&url, &v2);
    let before = fx.git_requests(git, &test).await;
    let event = ("x-github-event", "push".to_string());
    assert_eq!(
        post(&hook, std::slice::from_ref(&event), body.clone()).await,
        401
    );
    let forged = format!("sha256={}", sign(&body, b"not-the-token"));
    assert_eq!(
        post(
            &hook,
            &[event.clone(), ("x-hub-signature-256", forged.clone())],
            body.clone()
        )
        .await,
        403
    );
    let log = std::fs::read_to_string(&agent.log).unwrap();
    assert!(
        log.contains("receiver refused a request: no credential"),
        "{log}"
    );
    assert!(log.contains("receiver refused a request: credential does not match"));
    assert!(
        !log.contains(TOKEN) && !log.contains(&forged),
        "no secret in the log"
    );
    assert_eq!(
        fx.git_requests(git, &test).await,
        before,
        "a refused request polls nothing"
    );

    // Signed: the new commit is applied and Ready within seconds, with an hour's poll interval.
    let signature = format!("sha256={}", sign(&body, TOKEN.as_bytes()));
    let pushed = Instant::now();
    assert_eq!(
        post(
            &hook,
            &[event.clone(), ("x-hub-signature-256", signature)],
            body
        )
        .await,
        202
    );
    wait_value(&cms, "app", "2").await;
    wait_condition(&client, &agent, &test, "Ready", "True", "revision 2").await;
    let latency = pushed.elapsed();
    println!("push notification to Ready: {:.3} s", latency.as_secs_f64());
    assert!(latency < Duration::from_secs(5), "{latency:?}");
    let one_poll = fx.git_requests(git, &test).await - before;
    assert!(one_poll > 0);

    // 1,000 notifications of one commit: as many git requests as one poll.
    let v3 = repo.commit_files("main", &[("app.yaml", config_map("3").as_bytes())], "v3");
    let body = github_push(&url, &v3);
    let signature = format!("sha256={}", sign(&body, TOKEN.as_bytes()));
    let before = fx.git_requests(git, &test).await;
    let http = reqwest::Client::new();
    let statuses: Vec<u16> = futures::stream::iter(0..1000)
        .map(|_| {
            let request = http
                .post(&hook)
                .header("x-github-event", "push")
                .header("x-hub-signature-256", &signature)
                .body(body.clone());
            async move { request.send().await.unwrap().status().as_u16() }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert!(
        statuses.iter().all(|s| *s == 202),
        "{:?}",
        statuses.iter().filter(|s| **s != 202).count()
    );
    wait_value(&cms, "app", "3").await;
    wait_condition(&client, &agent, &test, "Ready", "True", "revision 3").await;
    let flood = fx.git_requests(git, &test).await - before;
    println!("git requests: one poll {one_poll}, 1,000 notifications {flood}");
    assert!(
        flood > 0 && flood <= one_poll,
        "1,000 notifications of one commit cause one poll"
    );
    let log = std::fs::read_to_string(&agent.log).unwrap();
    let accepted = log
        .lines()
        .filter(|l| l.contains("notification accepted") && l.contains(&v3))
        .count();
    assert_eq!(accepted, 1, "acted on once");

    // A notification for a repository that did not move: a poll, and no render.
    let renders = metric(&agent.metrics().await, "pallet_renders_total");
    let reconciles = metric(
        &agent.metrics().await,
        "pallet_reconciles_total{result=\"success\"}",
    );
    let before = fx.git_requests(git, &test).await;
    let generic =
        serde_json::to_vec(&json!({"repository": url, "revision": "nothing-new"})).unwrap();
    let signature = format!("sha256={}", sign(&generic, TOKEN.as_bytes()));
    let status = post(
        &format!("{base}/hook/generic"),
        &[("x-signature", signature)],
        generic,
    )
    .await;
    assert_eq!(status, 202);
    cluster::poll_until(
        "the notified pass to finish",
        Duration::from_secs(30),
        || async {
            let now = metric(
                &agent.metrics().await,
                "pallet_reconciles_total{result=\"success\"}",
            );
            if now > reconciles {
                Ok(())
            } else {
                Err(format!("{now} reconciles"))
            }
        },
    )
    .await;
    assert!(
        fx.git_requests(git, &test).await > before,
        "the source was polled"
    );
    assert_eq!(
        metric(&agent.metrics().await, "pallet_renders_total"),
        renders,
        "nothing rendered for an unchanged source"
    );
    cleanup(&client, &test).await;
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("metric {name} not found in {text}"))
}

use futures::StreamExt;

#[tokio::test]
async fn gitlab_gitea_and_generic_notifications_each_move_the_branch() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let test = support::unique_name("receiver-providers");
    let repo = fx.git_repo(&test);
    repo.commit_files("main", &[("app.yaml", config_map("0").as_bytes())], "v0");
    let (agent, base) = agent_with_receiver(&client, &test, &[]).await;
    let url = repo.url(fx.git_plain());
    create_bd(&client, &test, &url).await;
    wait_condition(&client, &agent, &test, "Ready", "True", "1 objects").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);

    let commit = repo.commit_files("main", &[("app.yaml", config_map("1").as_bytes())], "v1");
    let gitlab = serde_json::to_vec(&json!({
        "object_kind": "push", "ref": "refs/heads/main", "checkout_sha": commit,
        "project": {"git_http_url": url, "web_url": url.trim_end_matches(".git")},
    }))
    .unwrap();
    let status = post(
        &format!("{base}/hook/gitlab"),
        &[
            ("x-gitlab-event", "Push Hook".into()),
            ("x-gitlab-token", TOKEN.into()),
        ],
        gitlab,
    )
    .await;
    assert_eq!(status, 202);
    wait_value(&cms, "app", "1").await;

    let commit = repo.commit_files("main", &[("app.yaml", config_map("2").as_bytes())], "v2");
    let gitea = serde_json::to_vec(&json!({
        "ref": "refs/heads/main", "after": commit, "repository": {"clone_url": url},
    }))
    .unwrap();
    let signature = sign(&gitea, TOKEN.as_bytes());
    let status = post(
        &format!("{base}/hook/gitea"),
        &[
            ("x-gitea-event", "push".into()),
            ("x-gitea-signature", signature),
        ],
        gitea,
    )
    .await;
    assert_eq!(status, 202);
    wait_value(&cms, "app", "2").await;

    let commit = repo.commit_files("main", &[("app.yaml", config_map("3").as_bytes())], "v3");
    let generic = serde_json::to_vec(&json!({"repository": url, "revision": commit})).unwrap();
    let signature = format!("sha256={}", sign(&generic, TOKEN.as_bytes()));
    let status = post(
        &format!("{base}/hook/generic"),
        &[("x-signature", signature)],
        generic,
    )
    .await;
    assert_eq!(status, 202);
    wait_value(&cms, "app", "3").await;
    // A token for another provider's header is no signature.
    let status = post(
        &format!("{base}/hook/generic"),
        &[("x-gitlab-token", TOKEN.into())],
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(status, 401);
    // No such provider, not a POST, a body over 1 MiB.
    assert_eq!(
        post(&format!("{base}/hook/bitbucket"), &[], b"{}".to_vec()).await,
        404
    );
    let get = reqwest::get(format!("{base}/hook/github")).await.unwrap();
    assert_eq!(get.status().as_u16(), 405);
    // A body over 1 MiB is refused, once the request carries a credential; without one, it is
    // refused before its body is read.
    let big = vec![b' '; 2 << 20];
    let signed = [("x-signature", "sha256=00".to_string())];
    let generic = format!("{base}/hook/generic");
    assert_refused_early(&generic, &signed, big.clone(), 413).await;
    assert_refused_early(&generic, &[], big, 401).await;
    cleanup(&client, &test).await;
}

#[tokio::test]
async fn a_registry_notification_and_a_harbor_webhook_move_an_image_tag() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let test = support::unique_name("receiver-oci");
    receiver_secret(&client, &test).await;
    // The receiver's port is chosen first: the registry is configured to notify it.
    let port = scratch_registry::free_port_below_ephemeral();
    let receiver = format!("127.0.0.1:{port}");
    let registry = scratch_registry::ScratchRegistry::start_notifying(
        &format!("http://{receiver}/hook/registry"),
        TOKEN,
    );
    let fx = support::Fixtures::load();
    let plain = fx.registry_plain();
    let agent = Agent::start_with(
        &test,
        &[
            "--requeue-seconds",
            "3600",
            "--receiver-addr",
            &receiver,
            "--receiver-secret",
            &test,
            "--plain-http-registry",
            &registry.host,
            "--plain-http-registry",
            &plain.host,
        ],
    );
    let image = format!("{}/{test}/app", registry.host);
    let push = |value: &'static str| {
        let image = image.clone();
        async move {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("app.yaml"), config_map(value)).unwrap();
            let options = pallet::push::PushOptions {
                plain_http: true,
                ..Default::default()
            };
            pallet::push::push_dir(&format!("{image}:stable"), dir.path(), &options)
                .await
                .unwrap()
        }
    };
    push("1").await;
    let spec = json!({
        "installNamespace": test,
        "sources": [{"kind": "image", "image": {"ref": format!("{image}:stable")}, "pollInterval": "1h"}],
        "format": "plain",
    });
    agent::apply_bd(&client, &test, spec).await;
    wait_condition(&client, &agent, &test, "Ready", "True", "1 objects").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &test);

    // The registry itself notifies the agent of the push.
    let pushed = Instant::now();
    push("2").await;
    wait_value(&cms, "app", "2").await;
    println!(
        "registry push to applied: {:.3} s",
        pushed.elapsed().as_secs_f64()
    );
    assert!(pushed.elapsed() < Duration::from_secs(5));

    // Harbor's webhook, as Harbor documents it, for an image in a registry that sends no
    // notifications of its own (the shared fixture registry).
    let harbor_bd = format!("{test}-harbor");
    let repository = format!("{test}/harbor");
    let push_plain = |value: &'static str| {
        let repository = repository.clone();
        async move {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("app.yaml"), config_map(value)).unwrap();
            fx.push_dir_as_image(
                plain,
                &repository,
                "stable",
                dir.path(),
                &oci_client::secrets::RegistryAuth::Anonymous,
            )
            .await
            .unwrap()
        }
    };
    push_plain("10").await;
    let spec = json!({
        "installNamespace": harbor_bd,
        "sources": [{"kind": "image", "image": {"ref": format!("{}/{repository}:stable", plain.host)}, "pollInterval": "1h"}],
        "format": "plain",
    });
    agent::apply_bd_labelled(&client, &harbor_bd, &test, spec).await;
    wait_condition(&client, &agent, &harbor_bd, "Ready", "True", "1 objects").await;
    let digest = push_plain("11").await;
    let harbor = serde_json::to_vec(&json!({
        "type": "PUSH_ARTIFACT", "occur_at": 1700000000, "operator": "admin",
        "event_data": {"resources": [{"digest": digest, "tag": "stable",
                                      "resource_url": format!("{}/{repository}:stable", plain.host)}],
                        "repository": {"name": "harbor", "namespace": test, "repo_full_name": repository}},
    }))
    .unwrap();
    let status = post(
        &format!("http://{receiver}/hook/harbor"),
        &[("authorization", TOKEN.into())],
        harbor,
    )
    .await;
    assert_eq!(status, 202);
    let harbor_cms: Api<ConfigMap> = Api::namespaced(client.clone(), &harbor_bd);
    wait_value(&harbor_cms, "app", "11").await;
    cleanup(&client, &harbor_bd).await;
    drop(registry);
    cleanup(&client, &test).await;
}
