//! End-to-end: inputs that never enter the render sandbox never take the agent down. Each case
//! runs against a leader-elected agent on the local control plane with a healthy
//! BundleDeployment beside it (see `support/hostile.rs` for every property asserted and the
//! figures printed): a Helm release record that inflates to 640 MiB, a registry answering a
//! manifest, a tag list, a referrers list or a signature blob of 3 GiB, a git server
//! advertising a signed tag as peeling to another commit, a `lookup` over a list larger than its
//! budget, and a flood of unauthenticated notifications at the receiver.
//!
//! The hostile servers are small servers in this test (a registry, a git server that lies about
//! one ref); the normal paths are covered against the fixtures' real servers elsewhere.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/hostile.rs"]
mod hostile;
#[path = "support/hostile_registry.rs"]
mod hostile_registry;
#[path = "support/signing.rs"]
mod signing;
mod support;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::{BodyExt as _, Full};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use hostile::{benign_files, chart_files, git_case, Case, Expected, Hostile};
use hostile_registry::{HostileRegistry, Mode};

const AGENT_NAMESPACE: &str = "pallet-system";

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn expected(reason: &'static str, parts: &[&str]) -> Expected {
    Expected {
        reason,
        message_parts: parts.iter().map(|p| p.to_string()).collect(),
    }
}

/// Runs `work` on a runtime of its own, from a case's (synchronous) `make_hostile`.
fn block_on<F: std::future::Future<Output = ()> + Send + 'static>(work: F) {
    std::thread::spawn(move || {
        tokio::runtime::Runtime::new().unwrap().block_on(work);
    })
    .join()
    .unwrap();
}

/// Merges `patch` into BundleDeployment `name`'s spec.
async fn patch_spec(name: &str, patch: Value) {
    let api: Api<pallet::api::BundleDeployment> = Api::all(cluster::client().await);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": patch})),
    )
    .await
    .unwrap();
}

/// Gives Secret `name` of the agent's namespace, holding `data`, to BundleDeployment `bd`.
async fn give_secret(name: &str, bd: &str, data: Value) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": AGENT_NAMESPACE,
                     "labels": {format!("access.pallet.dev/{bd}"): "true"}},
        "data": data,
    }))
    .unwrap();
    Api::<Secret>::namespaced(cluster::client().await, AGENT_NAMESPACE)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// A Helm release record whose JSON is 640 MiB, stored gzipped and base64-encoded as helm
/// stores it: about 870 KB in the Secret.
fn record_bomb() -> Vec<u8> {
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gzip.write_all(
        br#"{"name": "r", "version": 999, "info": {"status": "deployed"}, "manifest": ""#,
    )
    .unwrap();
    let chunk = vec![b' '; 1 << 20];
    for _ in 0..640 {
        gzip.write_all(&chunk).unwrap();
    }
    gzip.write_all(b"\"}").unwrap();
    let compressed = gzip.finish().unwrap();
    b64(&compressed).into_bytes()
}

#[tokio::test]
async fn a_release_record_that_inflates_to_640_mib_stops_the_takeover() {
    let mut harness = Hostile::start("hostile-record", &[]).await;
    let namespace = harness.namespace.clone();
    let mut case = git_case(
        "record",
        &namespace,
        benign_files(),
        expected(
            "TakeoverFailed",
            &["--takeover-record-max-mib", "the takeover does not proceed"],
        ),
    );
    let bd = format!("{}-{}", harness.label, case.name);
    let stored = record_bomb();
    println!("the record is {} bytes in its Secret", stored.len());
    case.make_hostile = Box::new(move || {
        block_on(async move {
            let secret: Secret = serde_json::from_value(json!({
                "metadata": {"name": "sh.helm.release.v1.r.v999", "namespace": namespace,
                             "labels": {"owner": "helm", "name": "r", "status": "deployed",
                                        "version": "999"}},
                "type": "helm.sh/release.v1",
                "data": {"release": b64(&stored)},
            }))
            .unwrap();
            Api::<Secret>::namespaced(cluster::client().await, &namespace)
                .create(&PostParams::default(), &secret)
                .await
                .unwrap();
            patch_spec(
                &bd,
                json!({"takeover": {"from": "Helm", "name": "r", "namespace": namespace}}),
            )
            .await;
        })
    });
    harness.run(case).await;
}

/// An image case from `registry`: benign first, then hostile as `mode`; `verify` adds
/// `verify.cosign` (its key Secret given) when it turns hostile.
fn registry_case(
    harness: &Hostile,
    name: &str,
    registry: &Arc<HostileRegistry>,
    (mode, verify): (Mode, bool),
    parts: &[&str],
) -> Case {
    let image = if mode == Mode::HugeTagList {
        json!({"ref": registry.repository(), "semver": ">=1.0.0"})
    } else {
        json!({"ref": registry.image()})
    };
    let spec = json!({
        "installNamespace": harness.namespace,
        "sources": [{"kind": "image", "image": image, "pollInterval": "2s"}],
        "format": "helm",
    });
    let bd = format!("{}-{name}", harness.label);
    let registry = registry.clone();
    Case {
        name: name.to_string(),
        spec,
        make_hostile: Box::new(move || {
            registry.set(mode);
            if verify {
                block_on(async move {
                    let key = rcgen::KeyPair::generate().unwrap();
                    let keys = format!("{bd}-keys");
                    give_secret(
                        &keys,
                        &bd,
                        json!({"cosign.pub": b64(key.public_key_pem().as_bytes())}),
                    )
                    .await;
                    let image = json!({"ref": registry.image()});
                    patch_spec(
                        &bd,
                        json!({"sources": [{"kind": "image", "image": image, "pollInterval": "2s",
                                            "verify": {"cosign": {"publicKeys": {"name": keys}}}}]}),
                    )
                    .await;
                });
            }
        }),
        expected: expected("LimitExceeded", parts),
    }
}

#[tokio::test]
async fn a_registry_answering_3_gib_is_cut_off_at_its_limit() {
    let cases: [(&str, Mode, bool, &[&str]); 5] = [
        (
            "manifest",
            Mode::HugeManifest { declared: false },
            false,
            &["the manifest of image", "--registry-max-document-kib"],
        ),
        (
            "declared",
            Mode::HugeManifest { declared: true },
            false,
            &["3221225472 bytes declared", "--registry-max-document-kib"],
        ),
        (
            "tags",
            Mode::HugeTagList,
            false,
            &["the tag list of image", "--registry-max-document-kib"],
        ),
        (
            "referrers",
            Mode::HugeReferrers,
            true,
            &["the referrers list of image", "--registry-max-document-kib"],
        ),
        (
            "signature",
            Mode::HugeSignatureBlob,
            true,
            &[
                "the signature blob of image",
                "the signature blob limit (1 MiB)",
            ],
        ),
    ];
    let mut registries = Vec::new();
    for _ in &cases {
        registries.push(Arc::new(
            HostileRegistry::start(&chart_files(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-ok\ndata:\n  a: b\n",
                "",
            ))
            .await,
        ));
    }
    let flags: Vec<String> = registries
        .iter()
        .flat_map(|r| ["--plain-http-registry".to_string(), r.host()])
        .collect();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut harness = Hostile::start("hostile-registry", &flags).await;
    for ((name, mode, verify, parts), registry) in cases.iter().zip(&registries) {
        let case = registry_case(&harness, name, registry, (*mode, *verify), parts);
        harness.run(case).await;
    }
}

/// A git server over smart HTTP for one bare repository, through `git upload-pack`; once told
/// to lie, it advertises `refs/tags/<tag>^{}` (the commit the tag names) as `lie_to`.
struct LyingGitServer {
    url: String,
    lie: Arc<std::sync::Mutex<Option<(String, String)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LyingGitServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LyingGitServer {
    async fn start(bare: PathBuf) -> LyingGitServer {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let url = format!("http://{}/repo.git", listener.local_addr().unwrap());
        let lie: Arc<std::sync::Mutex<Option<(String, String)>>> = Arc::default();
        let serving = lie.clone();
        let task = hostile_registry::serve(listener, move |request| {
            let (bare, lie) = (bare.clone(), serving.lock().unwrap().clone());
            async move { git_answer(request, &bare, lie).await }
        });
        LyingGitServer { url, lie, task }
    }

    /// From now on, advertises `tag`'s peeled commit as `commit`.
    fn lie(&self, tag: &str, commit: &str) {
        *self.lie.lock().unwrap() = Some((format!("refs/tags/{tag}^{{}}"), commit.to_string()));
    }
}

fn upload_pack(bare: &Path, args: &[&str], input: &[u8]) -> Vec<u8> {
    let mut child = std::process::Command::new("git")
        .arg("upload-pack")
        .args(args)
        .arg(bare)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap().stdout
}

async fn git_answer(
    request: hyper::Request<hyper::body::Incoming>,
    bare: &Path,
    lie: Option<(String, String)>,
) -> hyper::Response<Full<Bytes>> {
    let path = request.uri().path().to_string();
    // libgit2's request to this test's server.
    #[allow(clippy::disallowed_methods)]
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let (content_type, data) = if path.ends_with("/info/refs") {
        let mut advertised = upload_pack(bare, &["--stateless-rpc", "--advertise-refs"], b"");
        if let Some((name, commit)) = lie {
            // Same length: the oid of the line naming `name` is replaced in place.
            let text = String::from_utf8(advertised).unwrap();
            let lied: Vec<String> = text
                .split_inclusive('\n')
                .map(|line| match line.find(&name) {
                    Some(_) if line.len() > 44 => format!("{}{commit}{}", &line[..4], &line[44..]),
                    _ => line.to_string(),
                })
                .collect();
            advertised = lied.concat().into_bytes();
        }
        let mut data = b"001e# service=git-upload-pack\n0000".to_vec();
        data.extend(advertised);
        ("application/x-git-upload-pack-advertisement", data)
    } else {
        (
            "application/x-git-upload-pack-result",
            upload_pack(bare, &["--stateless-rpc"], &body),
        )
    };
    let mut response = hyper::Response::new(Full::new(Bytes::from(data)));
    response
        .headers_mut()
        .insert("content-type", content_type.parse().unwrap());
    response
}

/// A work tree pushing to a bare repository, signing with gpg.
struct Work {
    dir: tempfile::TempDir,
    bare: PathBuf,
    gnupg: PathBuf,
}

impl Work {
    fn git(&self, args: &[&str]) -> String {
        signing::git_in(self.dir.path(), &self.gnupg, args)
    }

    fn commit(&self, files: &[(String, Vec<u8>)], message: &str) -> String {
        for (path, data) in files {
            let file = self.dir.path().join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, data).unwrap();
        }
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", message]);
        self.git(&["push", "-q", self.bare.to_str().unwrap(), "HEAD:main"]);
        self.git(&["rev-parse", "HEAD"])
    }
}

#[tokio::test]
async fn a_signed_tag_advertised_as_another_commit_is_refused() {
    let mut harness = Hostile::start("hostile-tag", &[]).await;
    let fx = support::Fixtures::load();
    let bare = fx.git_repo(&cluster::unique_name("lying"));
    let gpg = signing::Gpg::generate("pallet releases <releases@pallet.invalid>");
    let work = Work {
        dir: tempfile::tempdir().unwrap(),
        bare: bare.path.clone(),
        gnupg: gpg.home().to_path_buf(),
    };
    work.git(&["init", "-q", "-b", "main"]);
    let signed = work.commit(&benign_files(), "benign");
    work.git(&[
        "-c",
        "gpg.format=openpgp",
        "-c",
        &format!("user.signingkey={}", gpg.fingerprint),
        "tag",
        "-s",
        "v1",
        "-m",
        "v1",
    ]);
    work.git(&["push", "-q", bare.path.to_str().unwrap(), "refs/tags/v1"]);
    let server = Arc::new(LyingGitServer::start(bare.path.clone()).await);
    let bd = format!("{}-tag", harness.label);
    let keys = format!("{bd}-keys");
    give_secret(
        &keys,
        &bd,
        json!({"release.asc": b64(gpg.public_armored().as_bytes())}),
    )
    .await;
    let spec = json!({
        "installNamespace": harness.namespace,
        "sources": [{"kind": "git", "pollInterval": "2s",
                     "git": {"repository": server.url, "ref": {"tag": "v1"}},
                     "verify": {"git": {"mode": "Tag", "keys": {"name": keys}}}}],
        "format": "helm",
    });
    let hostile_files = chart_files(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-ok\ndata:\n  a: b\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-unsigned\ndata:\n  a: b\n",
        "",
    );
    let lying = server.clone();
    let case = Case {
        name: "tag".into(),
        spec,
        make_hostile: Box::new(move || {
            // An unsigned commit on main, and the signed tag advertised as naming it.
            let unsigned = work.commit(&hostile_files, "not signed by anyone");
            lying.lie("v1", &unsigned);
        }),
        expected: expected(
            "VerificationFailed",
            &[&format!("signed for commit {signed}, not for commit")],
        ),
    };
    harness.run(case).await;
    let cms: Api<ConfigMap> = Api::namespaced(harness.client.clone(), &harness.namespace);
    assert!(
        cms.get_opt(&format!("{bd}-unsigned"))
            .await
            .unwrap()
            .is_none(),
        "the unsigned commit is not installed"
    );
    drop(server);
}

#[tokio::test]
async fn a_lookup_over_a_huge_list_is_refused_at_its_limit() {
    let mut harness = Hostile::start("hostile-lookup", &[]).await;
    let namespace = harness.namespace.clone();
    // 120 ConfigMaps of 80 KiB: more than the 8 MiB one lookup may return.
    let cms: Api<ConfigMap> = Api::namespaced(harness.client.clone(), &namespace);
    let filler = "x".repeat(80 << 10);
    futures::stream::iter(0..120)
        .for_each_concurrent(8, |i| {
            let (cms, filler) = (cms.clone(), filler.clone());
            async move {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("big-{i}")},
                    "data": {"filler": filler},
                }))
                .unwrap();
                cms.create(&PostParams::default(), &cm).await.unwrap();
            }
        })
        .await;
    let template = format!(
        "{{{{- $all := lookup \"v1\" \"ConfigMap\" \"{namespace}\" \"\" }}}}\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{{{ .Release.Name }}}}-ok\ndata:\n  count: {{{{ len $all.items | quote }}}}\n"
    );
    let case = git_case(
        "lookup",
        &namespace,
        chart_files(&template, ""),
        expected(
            "LookupFailed",
            &[
                &format!("lookup v1 ConfigMap in namespace {namespace}"),
                "--lookup-max-mib",
            ],
        ),
    );
    harness.run(case).await;
}

const RECEIVER_TOKEN: &str = "receiver-token";

fn sign(body: &[u8]) -> String {
    format!(
        "sha256={}",
        pallet::receiver::providers::sign(body, RECEIVER_TOKEN.as_bytes())
    )
}

#[tokio::test]
async fn a_flood_without_a_token_does_not_hold_back_a_signed_notification() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{port}");
    let secret = cluster::unique_name("receiver");
    let client = cluster::client().await;
    cluster::ensure_agent_namespace(&client).await;
    let token: Secret = serde_json::from_value(json!({
        "metadata": {"name": secret, "namespace": AGENT_NAMESPACE},
        "stringData": {"token": RECEIVER_TOKEN},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), AGENT_NAMESPACE)
        .create(&PostParams::default(), &token)
        .await
        .unwrap();
    // Only notifications move the neighbour (its poll is an hour away), and the rate limit is
    // small: a flood counted against it would hold the signed notification back.
    let mut harness = Hostile::start(
        "hostile-receiver",
        &[
            "--receiver-addr",
            &address,
            "--receiver-secret",
            &secret,
            "--receiver-requests-per-second",
            "2",
            "--default-poll-interval",
            "1h",
        ],
    )
    .await;
    let hook = format!("http://{address}/hook/generic");
    let flooding = Arc::new(AtomicBool::new(true));
    let http = reqwest::Client::new();
    let flood = {
        let (flooding, hook, http) = (flooding.clone(), hook.clone(), http.clone());
        async move {
            let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
            let mut bodies = futures::stream::iter(0..)
                .map(|i: u64| {
                    let request = http
                        .post(&hook)
                        .header(
                            "x-signature",
                            if i.is_multiple_of(2) { "sha256=00" } else { "" },
                        )
                        .body(vec![b'{'; 64 << 10]);
                    async move {
                        request
                            .send()
                            .await
                            .map(|r| r.status().as_u16())
                            .unwrap_or(0)
                    }
                })
                .buffer_unordered(48);
            while flooding.load(Ordering::Relaxed) {
                match bodies.next().await {
                    Some(status) => *statuses.entry(status).or_default() += 1,
                    None => break,
                }
            }
            statuses
        }
    };
    let announce = |repository: String| {
        let (flooding, hook, http) = (flooding.clone(), hook.clone(), http.clone());
        async move {
            // The flood has been going for a while.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let body = serde_json::to_vec(&json!({"repository": repository})).unwrap();
            let status = http
                .post(&hook)
                .header("x-signature", sign(&body))
                .body(body)
                .send()
                .await
                .unwrap();
            let status_code = status.status().as_u16();
            #[allow(clippy::disallowed_methods)] // the agent's answer, in a test
            let text = status.text().await.unwrap();
            assert_eq!(status_code, 202, "the signed notification: {text}");
            assert_eq!(
                text.trim(),
                "accepted",
                "answered alike whatever it matched"
            );
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                flooding.store(false, Ordering::Relaxed);
            });
        }
    };
    let (statuses, figures) = harness.watch("receiver-flood", flood, announce).await;
    println!("flood answers by status: {statuses:?}");
    let refused: usize = statuses
        .iter()
        .filter(|(s, _)| matches!(**s, 401 | 403))
        .map(|(_, n)| n)
        .sum();
    assert!(refused > 100, "a flood was sent and refused: {statuses:?}");
    assert!(
        !statuses.contains_key(&429),
        "unauthenticated requests never spend the allowance"
    );
    assert!(figures.neighbour_latency < Duration::from_secs(30));
}
