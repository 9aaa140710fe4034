//! Access to the fixture servers started by `tools/fixtures.sh start`: two OCI registries (plain,
//! and TLS + htpasswd), git over smart HTTP (without and with basic auth), an HTTP file server
//! (plain, basic auth, bearer token) and their request counters.
//!
//! Tests never start the servers themselves; they find them through
//! `<state>/fixtures/endpoints.json` and fail with instructions when they are not running. Every
//! helper takes names from [`unique_name`], so tests can run in parallel and in any order.
//!
//! Use from an integration test with `mod support;`.

#![allow(dead_code)]
// each test binary uses a different part of this module
// Test clients of the local fixture servers and the agent's own endpoints: whole answers are
// read there, not in the agent (see clippy.toml).
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Reference, RegistryOperation};
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Media types the image helpers write.
pub mod media {
    /// OCI image manifest.
    pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
    /// OCI image index.
    pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
    /// OCI image config.
    pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
    /// OCI gzip-compressed tar layer.
    pub const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
    /// OCI uncompressed tar layer.
    pub const OCI_LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
    /// Docker schema 2 manifest.
    pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
    /// Docker manifest list.
    pub const DOCKER_MANIFEST_LIST: &str =
        "application/vnd.docker.distribution.manifest.list.v2+json";
    /// Docker image config.
    pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
    /// Docker gzip-compressed tar layer.
    pub const DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";
}

/// The project's state directory: `$PALLET_STATE_DIR`, else `<repo>/.pallet`.
pub fn state_dir() -> PathBuf {
    match std::env::var_os("PALLET_STATE_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".pallet"),
    }
}

/// One fixture server, as described in endpoints.json.
#[derive(Debug, Clone, Deserialize)]
pub struct Server {
    /// Name in endpoints.json and in the request counters (e.g. `registry-tls`).
    pub name: String,
    /// Base URL, `http://127.0.0.1:PORT` or `https://...`.
    pub url: String,
    /// `127.0.0.1:PORT`; for registries this is the registry part of an image reference.
    pub host: String,
    /// Whether the server speaks TLS (certificate from the test CA, see [`Fixtures::ca_cert`]).
    pub tls: bool,
    /// Basic-auth username, when the server requires basic auth.
    #[serde(default)]
    pub username: Option<String>,
    /// Basic-auth password, when the server requires basic auth.
    #[serde(default)]
    pub password: Option<String>,
    /// Bearer token, when the server requires one.
    #[serde(default)]
    pub token: Option<String>,
    /// For registries: the registry's own address behind the counting proxy (not counted).
    #[serde(default)]
    pub backend: Option<String>,
    /// For git-ssh: path of the test client's private key (OpenSSH format), the only authorized key.
    #[serde(default)]
    pub ssh_private_key: Option<PathBuf>,
    /// For git-ssh: the known_hosts line (`[127.0.0.1]:PORT ssh-ed25519 ...`) of the server's host key.
    #[serde(default)]
    pub ssh_known_hosts: Option<String>,
}

impl Server {
    /// The server's credentials as an oci-client auth (anonymous when it needs none).
    pub fn registry_auth(&self) -> RegistryAuth {
        match (&self.username, &self.password, &self.token) {
            (Some(u), Some(p), _) => RegistryAuth::Basic(u.clone(), p.clone()),
            (_, _, Some(t)) => RegistryAuth::Bearer(t.clone()),
            _ => RegistryAuth::Anonymous,
        }
    }

    /// A `.dockerconfigjson` document holding this server's basic-auth credentials, as a
    /// `kubernetes.io/dockerconfigjson` Secret carries it.
    pub fn docker_config_json(&self) -> String {
        use base64::Engine as _;
        let user = self.username.as_deref().expect("server has no username");
        let password = self.password.as_deref().expect("server has no password");
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        json!({"auths": {&self.host: {"username": user, "password": password, "auth": auth}}})
            .to_string()
    }

    /// `url` + `path` (`path` starts with `/`).
    pub fn url_for(&self, path: &str) -> String {
        format!("{}{}", self.url, path)
    }
}

#[derive(Debug, Clone, Deserialize)]
struct Endpoints {
    version: u32,
    ca_cert: PathBuf,
    control_url: String,
    git_root: PathBuf,
    files_root: PathBuf,
    servers: BTreeMap<String, Server>,
}

/// The running fixture servers. Get them with [`Fixtures::load`].
#[derive(Debug, Clone)]
pub struct Fixtures {
    endpoints: Endpoints,
}

/// Request counts the fixture servers recorded, from the control port's `/_stats`.
#[derive(Debug, Clone, Deserialize)]
pub struct Stats {
    /// Number of requests matching the filter.
    pub total: usize,
    /// Per path, per method counts.
    pub paths: BTreeMap<String, BTreeMap<String, usize>>,
}

/// One recorded request, from the control port's `/_requests`.
#[derive(Debug, Clone, Deserialize)]
pub struct RecordedRequest {
    /// Fixture server name.
    pub server: String,
    /// HTTP method.
    pub method: String,
    /// URL path (no query).
    pub path: String,
    /// Response status; 0 while the response is still being written.
    pub status: u16,
}

fn not_running(why: impl std::fmt::Display) -> ! {
    panic!(
        "fixture servers are not running ({why}): start them with `tools/fixtures.sh start` \
         (state dir {}; set PALLET_STATE_DIR to use another)",
        state_dir().display()
    )
}

impl Fixtures {
    /// Reads `<state>/fixtures/endpoints.json` and checks every server accepts connections.
    /// Panics with instructions when the fixtures are not running. Cached per process.
    pub fn load() -> &'static Fixtures {
        static LOADED: OnceLock<Fixtures> = OnceLock::new();
        LOADED.get_or_init(|| {
            pallet::tls::install_crypto_provider();
            let path = state_dir().join("fixtures").join("endpoints.json");
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| not_running(format_args!("{}: {e}", path.display())));
            let endpoints: Endpoints = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not valid: {e}", path.display()));
            assert_eq!(endpoints.version, 1, "unknown endpoints.json version");
            let mut hosts: Vec<String> =
                endpoints.servers.values().map(|s| s.host.clone()).collect();
            hosts.push(
                endpoints
                    .control_url
                    .trim_start_matches("http://")
                    .to_string(),
            );
            for host in hosts {
                let addr = host
                    .to_socket_addrs()
                    .ok()
                    .and_then(|mut a| a.next())
                    .unwrap_or_else(|| panic!("bad address {host} in {}", path.display()));
                if let Err(e) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                    not_running(format_args!("{host} from {}: {e}", path.display()));
                }
            }
            Fixtures { endpoints }
        })
    }

    /// A server by its endpoints.json name.
    pub fn server(&self, name: &str) -> &Server {
        self.endpoints
            .servers
            .get(name)
            .unwrap_or_else(|| panic!("no fixture server named {name} in endpoints.json"))
    }

    /// The registry over plain HTTP, without auth.
    pub fn registry_plain(&self) -> &Server {
        self.server("registry-plain")
    }
    /// The registry over TLS (test CA) with htpasswd basic auth.
    pub fn registry_tls(&self) -> &Server {
        self.server("registry-tls")
    }
    /// git smart HTTP without auth.
    pub fn git_plain(&self) -> &Server {
        self.server("git-plain")
    }
    /// git smart HTTP requiring basic auth (same repos as [`Fixtures::git_plain`]).
    pub fn git_auth(&self) -> &Server {
        self.server("git-auth")
    }
    /// git smart HTTP over TLS (test CA) requiring basic auth (same repos).
    pub fn git_tls(&self) -> &Server {
        self.server("git-tls")
    }
    /// git over SSH (public-key auth; same repos). Its `url` ends with the git root's path, so
    /// [`GitRepo::url`] works as for the HTTP servers.
    pub fn git_ssh(&self) -> &Server {
        self.endpoints.servers.get("git-ssh").unwrap_or_else(|| {
            not_running(
                "no git-ssh server in endpoints.json, the fixtures predate it: restart them \
                 with `tools/fixtures.sh stop && tools/fixtures.sh start`",
            )
        })
    }
    /// File server without auth.
    pub fn http_plain(&self) -> &Server {
        self.server("http-plain")
    }
    /// File server requiring basic auth (same files as [`Fixtures::http_plain`]).
    pub fn http_basic(&self) -> &Server {
        self.server("http-basic")
    }
    /// File server requiring a bearer token (same files as [`Fixtures::http_plain`]).
    pub fn http_bearer(&self) -> &Server {
        self.server("http-bearer")
    }

    /// File server over TLS (test CA), without auth (same files).
    pub fn http_tls(&self) -> &Server {
        self.server("http-tls")
    }

    /// A server that accepts connections and never answers (any path).
    pub fn hang(&self) -> &Server {
        self.server("hang")
    }

    /// A server that answers 200 at once and then drips its body a byte a second (any path).
    pub fn drip(&self) -> &Server {
        self.server("drip")
    }

    /// Path of the test CA certificate (PEM) that signed the TLS servers' certificate.
    pub fn ca_cert(&self) -> &Path {
        &self.endpoints.ca_cert
    }
    /// The test CA certificate, PEM bytes.
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(&self.endpoints.ca_cert).expect("reading the test CA")
    }
    /// Directory holding the bare git repos the git servers export.
    pub fn git_root(&self) -> &Path {
        &self.endpoints.git_root
    }
    /// Directory the file servers serve.
    pub fn files_root(&self) -> &Path {
        &self.endpoints.files_root
    }

    // ---- request counters ----

    /// Counts for the requests matching `filter`: query parameters of `/_stats`, any of
    /// `server`, `prefix` (path prefix), `repo` (registry repository or git repo path such as
    /// `x.git`), `method`.
    pub async fn stats(&self, filter: &[(&str, &str)]) -> Stats {
        serde_json::from_slice(&self.control_get("/_stats", filter).await).expect("parsing /_stats")
    }

    /// The requests matching `filter` (same filters as [`Fixtures::stats`]), oldest first.
    pub async fn requests(&self, filter: &[(&str, &str)]) -> Vec<RecordedRequest> {
        serde_json::from_slice(&self.control_get("/_requests", filter).await)
            .expect("parsing /_requests")
    }

    /// Requests `registry` received for repository `repo` (manifests, blobs, tags, uploads).
    pub async fn registry_requests(&self, registry: &Server, repo: &str) -> usize {
        self.stats(&[("server", &registry.name), ("repo", repo)])
            .await
            .total
    }

    /// Requests `git` received for repo `name` (as passed to [`Fixtures::git_repo`]).
    pub async fn git_requests(&self, git: &Server, name: &str) -> usize {
        let repo = format!("{name}.git");
        self.stats(&[("server", &git.name), ("repo", &repo)])
            .await
            .total
    }

    /// Requests `http` received for exactly `path` (as returned by [`Fixtures::put_file`]).
    pub async fn http_requests(&self, http: &Server, path: &str) -> usize {
        let stats = self
            .stats(&[("server", &http.name), ("prefix", path)])
            .await;
        stats.paths.get(path).map(|m| m.values().sum()).unwrap_or(0)
    }

    async fn control_get(&self, path: &str, filter: &[(&str, &str)]) -> Vec<u8> {
        let mut url = url::Url::parse(&format!("{}{path}", self.endpoints.control_url)).unwrap();
        url.query_pairs_mut().extend_pairs(filter);
        let resp = reqwest::get(url.clone())
            .await
            .unwrap_or_else(|e| not_running(format_args!("{url}: {e}")));
        assert!(resp.status().is_success(), "{url}: {}", resp.status());
        resp.bytes()
            .await
            .expect("reading control response")
            .to_vec()
    }

    // ---- HTTP ----

    /// An HTTP client that trusts the test CA and follows no redirects.
    pub fn http_client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .tls_certs_merge([reqwest::Certificate::from_pem(&self.ca_pem()).unwrap()])
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("building the HTTP client")
    }

    /// Writes `content` to `rel_path` under the file servers' root (atomically, so a server never
    /// serves half a file) and returns the URL path (`/rel_path`), valid on every file server.
    pub fn put_file(&self, rel_path: &str, content: &[u8]) -> String {
        let rel = rel_path.trim_start_matches('/');
        assert!(
            !rel.split('/').any(|c| c == ".." || c.is_empty()),
            "bad path {rel_path}"
        );
        let dest = self.files_root().join(rel);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        let tmp = dest.with_file_name(format!(".tmp-{}", unique_name("put")));
        std::fs::write(&tmp, content).unwrap();
        std::fs::rename(&tmp, &dest).unwrap();
        format!("/{rel}")
    }

    // ---- git ----

    /// Creates an empty bare repo `<name>.git` under the git root.
    pub fn git_repo(&self, name: &str) -> GitRepo {
        let path = self.git_root().join(format!("{name}.git"));
        git(
            None,
            &["init", "--quiet", "--bare", "--initial-branch=main"],
        )
        .arg(&path)
        .run();
        GitRepo {
            name: name.to_string(),
            path,
        }
    }

    // ---- OCI ----

    /// An oci-client for `registry`, trusting the test CA, using plain HTTP where the server does.
    pub fn oci_client(&self, registry: &Server) -> oci_client::Client {
        oci_client::Client::new(ClientConfig {
            protocol: if registry.tls {
                ClientProtocol::Https
            } else {
                ClientProtocol::HttpsExcept(vec![registry.host.clone()])
            },
            extra_root_certificates: vec![Certificate {
                encoding: CertificateEncoding::Pem,
                data: self.ca_pem(),
            }],
            ..Default::default()
        })
    }

    /// Pushes `dir` as an OCI image with one tar+gzip layer to `registry`/`repo`:`tag`; returns
    /// the manifest digest. The same code as `pallet push` ([`pallet::push::push_dir`]).
    pub async fn push_dir_as_image(
        &self,
        registry: &Server,
        repo: &str,
        tag: &str,
        dir: &Path,
        auth: &RegistryAuth,
    ) -> Result<String, pallet::push::PushError> {
        let options = pallet::push::PushOptions {
            plain_http: !registry.tls,
            ca_pem: Some(self.ca_pem()),
            basic_auth: match auth {
                RegistryAuth::Basic(user, password) => Some((user.clone(), password.clone())),
                _ => None,
            },
            ..Default::default()
        };
        pallet::push::push_dir(&format!("{}/{repo}:{tag}", registry.host), dir, &options).await
    }

    /// Pushes `image` (blobs, then manifest) to `registry`/`repo` under `reference` (a tag or a
    /// digest); returns the manifest's descriptor.
    pub async fn push_image(
        &self,
        registry: &Server,
        repo: &str,
        reference: &str,
        image: &Image,
        auth: &RegistryAuth,
    ) -> Result<Descriptor, oci_client::errors::OciDistributionError> {
        let client = self.oci_client(registry);
        let target = image_ref(registry, repo, reference);
        client.auth(&target, auth, RegistryOperation::Push).await?;
        let (manifest_type, config_type) = match image.format {
            ImageFormat::Oci => (media::OCI_MANIFEST, media::OCI_CONFIG),
            ImageFormat::Docker => (media::DOCKER_MANIFEST, media::DOCKER_CONFIG),
        };
        let diff_ids: Vec<String> = image.layers.iter().map(|l| l.diff_id.clone()).collect();
        let config = serde_json::to_vec(&json!({
            "architecture": "amd64",
            "os": "linux",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }))
        .unwrap();
        let config_desc = Descriptor::of(config_type, &config);
        client
            .push_blob(&target, config.clone(), &config_desc.digest)
            .await?;
        let mut layers = Vec::new();
        for layer in &image.layers {
            let desc = Descriptor::of(&layer.media_type, &layer.data);
            client
                .push_blob(&target, layer.data.clone(), &desc.digest)
                .await?;
            layers.push(desc.to_json());
        }
        let mut manifest = json!({
            "schemaVersion": 2,
            "mediaType": manifest_type,
            "config": config_desc.to_json(),
            "layers": layers,
        });
        if let Some(annotations) = &image.annotations {
            manifest["annotations"] = json!(annotations);
        }
        let body = serde_json::to_vec(&manifest).unwrap();
        self.push_manifest_bytes(registry, repo, reference, manifest_type, body, auth)
            .await
    }

    /// Pushes an image index (OCI) listing `manifests` (each with an optional platform, e.g.
    /// `json!({"os": "linux", "architecture": "amd64"})`) under `reference`.
    pub async fn push_index(
        &self,
        registry: &Server,
        repo: &str,
        reference: &str,
        manifests: &[(Descriptor, Option<Value>)],
        auth: &RegistryAuth,
    ) -> Result<Descriptor, oci_client::errors::OciDistributionError> {
        let entries: Vec<Value> = manifests
            .iter()
            .map(|(d, platform)| {
                let mut v = d.to_json();
                if let Some(p) = platform {
                    v["platform"] = p.clone();
                }
                v
            })
            .collect();
        let body = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": media::OCI_INDEX,
            "manifests": entries,
        }))
        .unwrap();
        self.push_manifest_bytes(registry, repo, reference, media::OCI_INDEX, body, auth)
            .await
    }

    /// Pushes raw manifest bytes with `media_type` (for hand-made or deliberately odd manifests).
    pub async fn push_manifest_bytes(
        &self,
        registry: &Server,
        repo: &str,
        reference: &str,
        media_type: &str,
        body: Vec<u8>,
        auth: &RegistryAuth,
    ) -> Result<Descriptor, oci_client::errors::OciDistributionError> {
        let client = self.oci_client(registry);
        let target = image_ref(registry, repo, reference);
        client.auth(&target, auth, RegistryOperation::Push).await?;
        let desc = Descriptor::of(media_type, &body);
        client
            .push_manifest_raw(&target, body, media_type.parse().unwrap())
            .await?;
        Ok(desc)
    }
}

/// `registry`/`repo` at `reference`: a digest when it looks like one, else a tag.
pub fn image_ref(registry: &Server, repo: &str, reference: &str) -> Reference {
    if reference.starts_with("sha256:") {
        Reference::with_digest(registry.host.clone(), repo.into(), reference.into())
    } else {
        Reference::with_tag(registry.host.clone(), repo.into(), reference.into())
    }
}

/// A name unique across tests, processes and runs (the fixtures' storage outlives a run):
/// `prefix-<time>-<pid><counter>`, lowercase alphanumerics and dashes, valid as a Kubernetes
/// namespace, image repository or git repo name when `prefix` is.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{prefix}-{}-{}{}",
        base36(millis),
        base36(u64::from(std::process::id())),
        base36(n)
    )
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap()
}

/// A content descriptor (media type, digest, size), as in manifests and indexes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// Media type.
    pub media_type: String,
    /// `sha256:<hex>`.
    pub digest: String,
    /// Size in bytes.
    pub size: usize,
}

impl Descriptor {
    /// The descriptor of `data`.
    pub fn of(media_type: &str, data: &[u8]) -> Descriptor {
        Descriptor {
            media_type: media_type.to_string(),
            digest: sha256_digest(data),
            size: data.len(),
        }
    }

    /// The descriptor as manifest JSON.
    pub fn to_json(&self) -> Value {
        json!({"mediaType": self.media_type, "digest": self.digest, "size": self.size})
    }
}

/// `sha256:<hex>` of `data`.
pub fn sha256_digest(data: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(data))
}

/// Which manifest and config media types an [`Image`] is pushed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    /// OCI image manifest and config.
    Oci,
    /// Docker schema 2 manifest and config.
    Docker,
}

/// An image to push with [`Fixtures::push_image`]: layers in order, bottom first.
#[derive(Debug, Clone)]
pub struct Image {
    /// Manifest/config flavour.
    pub format: ImageFormat,
    /// Layers, bottom first.
    pub layers: Vec<Layer>,
    /// Manifest annotations.
    pub annotations: Option<BTreeMap<String, String>>,
}

impl Image {
    /// An OCI image with no layers yet.
    pub fn oci() -> Image {
        Image {
            format: ImageFormat::Oci,
            layers: Vec::new(),
            annotations: None,
        }
    }
    /// A Docker schema 2 image with no layers yet (add layers with Docker media types).
    pub fn docker() -> Image {
        Image {
            format: ImageFormat::Docker,
            ..Image::oci()
        }
    }
    /// Adds a layer on top.
    pub fn layer(mut self, layer: Layer) -> Image {
        self.layers.push(layer);
        self
    }
}

/// A layer blob and what the image config says about it.
#[derive(Debug, Clone)]
pub struct Layer {
    /// Layer media type.
    pub media_type: String,
    /// The blob as pushed.
    pub data: Vec<u8>,
    /// sha256 of the uncompressed tar (the config's diff_id).
    pub diff_id: String,
}

/// One entry of a hand-made layer tar.
#[derive(Debug, Clone)]
pub enum TarEntry {
    /// A regular file (mode 0644) with this content.
    File(String, Vec<u8>),
    /// A directory (mode 0755).
    Dir(String),
    /// A symlink at the first path pointing to the second.
    Symlink(String, String),
    /// A whiteout deleting this path from lower layers (`.wh.<name>`).
    Whiteout(String),
    /// An opaque-directory marker for this directory (`<dir>/.wh..wh..opq`).
    Opaque(String),
}

impl Layer {
    /// A tar+gzip OCI layer holding `dir`'s contents at the root (deterministic: sorted, fixed mtimes).
    pub fn tar_gz_dir(dir: &Path) -> Layer {
        Layer::gzip(media::OCI_LAYER_GZIP, tar_dir(dir))
    }

    /// A tar+gzip layer of hand-made entries (whiteouts, symlinks, ...) with `media_type`
    /// (e.g. [`media::OCI_LAYER_GZIP`] or [`media::DOCKER_LAYER_GZIP`]).
    pub fn tar_gz_entries(media_type: &str, entries: &[TarEntry]) -> Layer {
        Layer::gzip(media_type, tar_entries(entries))
    }

    /// An uncompressed OCI tar layer of hand-made entries.
    pub fn tar_entries(entries: &[TarEntry]) -> Layer {
        let tar = tar_entries(entries);
        Layer {
            media_type: media::OCI_LAYER_TAR.into(),
            diff_id: sha256_digest(&tar),
            data: tar,
        }
    }

    fn gzip(media_type: &str, tar: Vec<u8>) -> Layer {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar).unwrap();
        Layer {
            media_type: media_type.into(),
            diff_id: sha256_digest(&tar),
            data: gz.finish().unwrap(),
        }
    }
}

/// `dir` as a deterministic tar, as `pallet push` lays it out.
fn tar_dir(dir: &Path) -> Vec<u8> {
    let entries =
        pallet::push::dir_entries(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    pallet::push::tar(&entries).unwrap()
}

fn tar_entries(entries: &[TarEntry]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    let header = |kind: tar::EntryType, mode: u32, size: u64| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(size);
        h.set_mtime(0);
        h
    };
    // `a/b` is deleted by `a/.wh.b`; a directory's lower contents are hidden by `dir/.wh..wh..opq`.
    let whiteout = |path: &str| match path.trim_end_matches('/').rsplit_once('/') {
        Some((parent, base)) => format!("{parent}/.wh.{base}"),
        None => format!(".wh.{}", path.trim_end_matches('/')),
    };
    for entry in entries {
        match entry {
            TarEntry::File(path, data) => {
                let mut h = header(tar::EntryType::Regular, 0o644, data.len() as u64);
                builder.append_data(&mut h, path, data.as_slice()).unwrap();
            }
            TarEntry::Dir(path) => {
                let mut h = header(tar::EntryType::Directory, 0o755, 0);
                builder.append_data(&mut h, path, std::io::empty()).unwrap();
            }
            TarEntry::Symlink(path, target) => {
                let mut h = header(tar::EntryType::Symlink, 0o777, 0);
                builder.append_link(&mut h, path, target).unwrap();
            }
            TarEntry::Whiteout(path) => {
                let mut h = header(tar::EntryType::Regular, 0o644, 0);
                builder
                    .append_data(&mut h, whiteout(path), std::io::empty())
                    .unwrap();
            }
            TarEntry::Opaque(dir) => {
                let mut h = header(tar::EntryType::Regular, 0o644, 0);
                builder
                    .append_data(
                        &mut h,
                        format!("{}/.wh..wh..opq", dir.trim_end_matches('/')),
                        std::io::empty(),
                    )
                    .unwrap();
            }
        }
    }
    builder.into_inner().unwrap()
}

// ---- git ----

/// A bare repo under the fixtures' git root, served by both git servers.
#[derive(Debug, Clone)]
pub struct GitRepo {
    /// Name as passed to [`Fixtures::git_repo`] (the repo is `<name>.git`).
    pub name: String,
    /// Path of the bare repo.
    pub path: PathBuf,
}

impl GitRepo {
    /// Clone URL on `server` without credentials in it.
    pub fn url(&self, server: &Server) -> String {
        format!("{}/{}.git", server.url, self.name)
    }

    /// Clone URL on `server` with its basic-auth credentials embedded (`http://user:pass@...`).
    pub fn url_with_auth(&self, server: &Server) -> String {
        let mut url = url::Url::parse(&self.url(server)).unwrap();
        url.set_username(server.username.as_deref().expect("server has no username"))
            .unwrap();
        url.set_password(server.password.as_deref()).unwrap();
        url.to_string()
    }

    /// Commits `dir`'s contents (exactly: files absent from `dir` are absent from the commit) on
    /// top of `branch` (created when missing) and returns the commit SHA.
    pub fn commit_dir(&self, branch: &str, dir: &Path, message: &str) -> String {
        let index = tempfile::NamedTempFile::new().unwrap();
        // A throwaway index lets us commit a directory straight into the bare repo, no clone.
        let git_in = |args: &[&str]| {
            let mut cmd = git(Some(&self.path), args);
            cmd.env("GIT_INDEX_FILE", index.path())
                .env("GIT_WORK_TREE", dir);
            cmd
        };
        std::fs::remove_file(index.path()).unwrap();
        git_in(&["add", "--all", "--force", "."])
            .current_dir(dir)
            .run();
        let tree = git_in(&["write-tree"]).run();
        let refname = format!("refs/heads/{branch}");
        let parent = git(
            Some(&self.path),
            &["rev-parse", "--verify", "--quiet", &refname],
        )
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        let mut args = vec!["commit-tree", tree.as_str(), "-m", message];
        if let Some(p) = &parent {
            args.extend(["-p", p.as_str()]);
        }
        let sha = git(Some(&self.path), &args).run();
        git(Some(&self.path), &["update-ref", &refname, &sha]).run();
        sha
    }

    /// Commits files given as (path, content) on top of `branch`, replacing the whole tree.
    pub fn commit_files(&self, branch: &str, files: &[(&str, &[u8])], message: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        for (path, content) in files {
            let dest = dir.path().join(path);
            std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
            std::fs::write(dest, content).unwrap();
        }
        self.commit_dir(branch, dir.path(), message)
    }

    /// Creates or moves tag `name` to `rev`: annotated when `message` is given, else lightweight.
    pub fn tag(&self, name: &str, rev: &str, message: Option<&str>) {
        match message {
            Some(m) => git(
                Some(&self.path),
                &["tag", "--force", "-a", name, rev, "-m", m],
            )
            .run(),
            None => git(Some(&self.path), &["tag", "--force", name, rev]).run(),
        };
    }

    /// The SHA `rev` (branch, tag, ...) resolves to, peeled to a commit.
    pub fn rev_parse(&self, rev: &str) -> String {
        git(
            Some(&self.path),
            &["rev-parse", &format!("{rev}^{{commit}}")],
        )
        .run()
    }
}

/// A `git` command with a fixed identity and no user or system config, so results do not depend
/// on who runs the tests.
pub fn git(git_dir: Option<&Path>, args: &[&str]) -> Command {
    let mut cmd = Command::new("git");
    cmd.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", "pallet tests")
        .env("GIT_AUTHOR_EMAIL", "tests@pallet.invalid")
        .env("GIT_COMMITTER_NAME", "pallet tests")
        .env("GIT_COMMITTER_EMAIL", "tests@pallet.invalid");
    if let Some(dir) = git_dir {
        cmd.env("GIT_DIR", dir);
    }
    cmd.args(args);
    cmd
}

/// Running a command that must succeed.
pub trait RunExt {
    /// Runs to completion; panics with its stderr on failure; returns trimmed stdout.
    fn run(&mut self) -> String;
}

impl RunExt for Command {
    fn run(&mut self) -> String {
        let out = self
            .output()
            .unwrap_or_else(|e| panic!("running {self:?}: {e}"));
        assert!(
            out.status.success(),
            "{self:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

/// The processes whose command line contains `marker` (zombies aside).
pub fn processes_with(marker: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            let state = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let zombie = state.rsplit(')').next()?.trim_start().starts_with('Z');
            (cmdline.contains(marker) && !zombie).then_some(cmdline)
        })
        .collect()
}
