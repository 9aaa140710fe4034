//! A hostile OCI registry for the hostile-input tests: it serves one image honestly, then (as a
//! test switches it) answers a manifest, a tag list, a referrers list or a signature blob of
//! 3 GiB, streamed (with or without a `Content-Length` saying so). The normal path is tested
//! against the real registry of the fixtures; this server stands for one that lies. Used with
//! `#[path = "support/hostile_registry.rs"] mod hostile_registry;` next to `mod support;`.

#![allow(dead_code)] // each test binary uses a different part of this module

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::json;
use tokio::net::TcpListener;

use crate::support::{media, sha256_digest, Descriptor, Layer, TarEntry};

/// The size of every hostile answer: 3 GiB.
pub const HOSTILE_BYTES: u64 = 3 << 30;
/// The repository the registry serves.
pub const REPOSITORY: &str = "app";
/// The tag of its image.
pub const TAG: &str = "1.0.0";

/// What the registry answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The image, honestly; no referrers, no signatures.
    Benign,
    /// The tag resolves to a digest whose manifest is 3 GiB; `declared` sends its
    /// `Content-Length`, else it is chunked.
    HugeManifest {
        /// Whether the length is declared.
        declared: bool,
    },
    /// The tag list is 3 GiB of tags.
    HugeTagList,
    /// The referrers list of the image is 3 GiB.
    HugeReferrers,
    /// The image has one Sigstore bundle referrer whose manifest declares a small bundle, and
    /// the bundle blob is 3 GiB.
    HugeSignatureBlob,
}

/// The documents of the benign image and of the hostile signature.
struct Content {
    manifest: Vec<u8>,
    config: Vec<u8>,
    layer: Layer,
    signature_manifest: Vec<u8>,
    /// The digest the hostile manifest is announced under.
    hostile_manifest: String,
    /// The digest of the hostile signature blob.
    hostile_blob: String,
}

/// A running hostile registry (stopped when dropped).
pub struct HostileRegistry {
    /// Where it listens.
    pub address: SocketAddr,
    mode: Arc<Mutex<Mode>>,
    content: Arc<Content>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HostileRegistry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A digest no other registry of the test announces: the agent remembers refused content by
/// its digest, whichever registry served it.
fn unique_digest(what: &str) -> String {
    sha256_digest(crate::support::unique_name(what).as_bytes())
}

impl HostileRegistry {
    /// Serves an image of `files` (one tar+gzip layer) as `app:1.0.0`.
    pub async fn start(files: &[(String, Vec<u8>)]) -> HostileRegistry {
        let entries: Vec<TarEntry> = files
            .iter()
            .map(|(path, data)| TarEntry::File(path.clone(), data.clone()))
            .collect();
        let layer = Layer::tar_gz_entries(media::OCI_LAYER_GZIP, &entries);
        let config = serde_json::to_vec(&json!({
            "architecture": "amd64", "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
        }))
        .unwrap();
        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": media::OCI_MANIFEST,
            "config": Descriptor::of(media::OCI_CONFIG, &config).to_json(),
            "layers": [Descriptor::of(&layer.media_type, &layer.data).to_json()],
        }))
        .unwrap();
        let hostile_blob = unique_digest("a signature of 3 GiB");
        let signature_manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": media::OCI_MANIFEST,
            "artifactType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "config": {"mediaType": "application/vnd.oci.empty.v1+json",
                       "digest": sha256_digest(b"{}"), "size": 2},
            "layers": [{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
                        "digest": hostile_blob, "size": 512}],
        }))
        .unwrap();
        let content = Arc::new(Content {
            manifest,
            config,
            layer,
            signature_manifest,
            hostile_manifest: unique_digest("a manifest of 3 GiB"),
            hostile_blob,
        });
        let mode = Arc::new(Mutex::new(Mode::Benign));
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let address = listener.local_addr().unwrap();
        let (serving_mode, serving_content) = (mode.clone(), content.clone());
        let task = serve(listener, move |request| {
            let now = *serving_mode.lock().unwrap();
            let content = serving_content.clone();
            async move { answer(&request, now, &content) }
        });
        HostileRegistry {
            address,
            mode,
            content,
            task,
        }
    }

    /// `host:port`, for `--plain-http-registry`.
    pub fn host(&self) -> String {
        self.address.to_string()
    }

    /// The image's repository (`host:port/app`).
    pub fn repository(&self) -> String {
        format!("{}/{REPOSITORY}", self.host())
    }

    /// The image by its tag.
    pub fn image(&self) -> String {
        format!("{}:{TAG}", self.repository())
    }

    /// Switches what the registry answers.
    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// The benign image's manifest digest.
    pub fn digest(&self) -> String {
        sha256_digest(&self.content.manifest)
    }
}

/// Serves `answer` over HTTP/1 on `listener`, each connection on a task of its own, until the
/// returned task is aborted.
pub fn serve<F, Fut, B>(listener: TcpListener, answer: F) -> tokio::task::JoinHandle<()>
where
    F: Fn(Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let answer = answer.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let answered = answer(request);
                    async move { Ok::<_, Infallible>(answered.await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    })
}

type Body = BoxBody<Bytes, Infallible>;

fn full(status: StatusCode, content_type: &str, data: Vec<u8>) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(data)).boxed());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert("content-type", content_type.parse().unwrap());
    response
}

fn not_found() -> Response<Body> {
    let error = json!({"errors": [{"code": "MANIFEST_UNKNOWN", "message": "unknown"}]});
    full(
        StatusCode::NOT_FOUND,
        "application/json",
        serde_json::to_vec(&error).unwrap(),
    )
}

/// `prefix`, then filler up to 3 GiB, streamed in 1 MiB chunks; with its length declared or not.
fn huge(prefix: &'static [u8], filler: &'static [u8], declared: bool) -> Response<Body> {
    let chunk = Bytes::from(filler.repeat((1 << 20) / filler.len()));
    let first = Bytes::from_static(prefix);
    let total = HOSTILE_BYTES;
    let stream = futures::stream::unfold(
        (0u64, first, chunk),
        move |(sent, first, chunk)| async move {
            if sent >= total {
                return None;
            }
            let data = if sent == 0 {
                first.clone()
            } else {
                chunk.clone()
            };
            let data = data.slice(..data.len().min((total - sent) as usize));
            let next = sent + data.len() as u64;
            Some((Ok::<_, Infallible>(Frame::data(data)), (next, first, chunk)))
        },
    );
    let mut response = Response::new(StreamBody::new(stream).boxed());
    response
        .headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    if declared {
        response
            .headers_mut()
            .insert("content-length", total.to_string().parse().unwrap());
    }
    response
}

fn manifest_answer(method: &Method, data: &[u8], media_type: &str) -> Response<Body> {
    let digest = sha256_digest(data);
    let body = if *method == Method::HEAD {
        Vec::new()
    } else {
        data.to_vec()
    };
    let mut response = full(StatusCode::OK, media_type, body);
    response
        .headers_mut()
        .insert("docker-content-digest", digest.parse().unwrap());
    response
        .headers_mut()
        .insert("content-length", data.len().to_string().parse().unwrap());
    response
}

fn answer(
    request: &Request<hyper::body::Incoming>,
    mode: Mode,
    content: &Content,
) -> Response<Body> {
    let path = request.uri().path();
    let method = request.method();
    if path == "/v2/" {
        return full(StatusCode::OK, "application/json", b"{}".to_vec());
    }
    let Some(rest) = path.strip_prefix(&format!("/v2/{REPOSITORY}/")) else {
        return not_found();
    };
    let benign_digest = sha256_digest(&content.manifest);
    if let Some(reference) = rest.strip_prefix("manifests/") {
        if let Mode::HugeManifest { declared } = mode {
            if reference == TAG {
                let mut response = full(StatusCode::OK, media::OCI_MANIFEST, Vec::new());
                response.headers_mut().insert(
                    "docker-content-digest",
                    content.hostile_manifest.parse().unwrap(),
                );
                return response;
            }
            if reference == content.hostile_manifest && *method == Method::GET {
                return huge(b"{\"schemaVersion\": 2, \"x\": \"", b"        ", declared);
            }
        }
        if reference == TAG || reference == benign_digest {
            return manifest_answer(method, &content.manifest, media::OCI_MANIFEST);
        }
        if mode == Mode::HugeSignatureBlob
            && reference == sha256_digest(&content.signature_manifest)
        {
            return manifest_answer(method, &content.signature_manifest, media::OCI_MANIFEST);
        }
        return not_found();
    }
    if let Some(digest) = rest.strip_prefix("blobs/") {
        if digest == sha256_digest(&content.config) {
            return full(
                StatusCode::OK,
                "application/octet-stream",
                content.config.clone(),
            );
        }
        if digest == sha256_digest(&content.layer.data) {
            return full(
                StatusCode::OK,
                "application/octet-stream",
                content.layer.data.clone(),
            );
        }
        if mode == Mode::HugeSignatureBlob && digest == content.hostile_blob {
            return huge(b"{\"mediaType\": \"", b"aaaaaaaa", false);
        }
        return not_found();
    }
    if rest == "tags/list" {
        if mode == Mode::HugeTagList {
            return huge(
                b"{\"name\": \"app\", \"tags\": [\"1.0.0\"",
                b",\"0.0.1\"",
                false,
            );
        }
        let tags = json!({"name": REPOSITORY, "tags": [TAG]});
        return full(
            StatusCode::OK,
            "application/json",
            serde_json::to_vec(&tags).unwrap(),
        );
    }
    if let Some(digest) = rest.strip_prefix("referrers/") {
        match mode {
            Mode::HugeReferrers => {
                return huge(
                    b"{\"schemaVersion\": 2, \"manifests\": [",
                    b"{\"mediaType\": \"x\", \"digest\": \"sha256:00\", \"size\": 1},     ",
                    false,
                )
            }
            Mode::HugeSignatureBlob if digest == benign_digest => {
                let index = json!({
                    "schemaVersion": 2,
                    "mediaType": "application/vnd.oci.image.index.v1+json",
                    "manifests": [{
                        "mediaType": media::OCI_MANIFEST,
                        "artifactType": "application/vnd.dev.sigstore.bundle.v0.3+json",
                        "digest": sha256_digest(&content.signature_manifest),
                        "size": content.signature_manifest.len(),
                    }],
                });
                return full(
                    StatusCode::OK,
                    "application/vnd.oci.image.index.v1+json",
                    serde_json::to_vec(&index).unwrap(),
                );
            }
            _ => return not_found(),
        }
    }
    not_found()
}
