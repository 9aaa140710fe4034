//! Helpers for the source tests (`tests/source_*.rs`): a fetcher over a fresh cache, source specs,
//! credentials from the fixture servers. Include with
//! `#[path = "support/sources_extra.rs"] mod sources_extra;` next to `mod support;`.

#![allow(dead_code)] // each test binary uses a different part of this module

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pallet::api::{GitReference, GitSource, HttpSource, ImageSource, Source, SourceKind};
use pallet::source::{
    Cache, CredentialKind, Credentials, FetchOptions, Fetcher, Limits, SourceSecrets,
};

use crate::support::{Fixtures, Server};

/// A fetcher over a fresh cache in a temp dir (kept alive by the returned guard), speaking plain
/// HTTP to the plain fixture registry, with short timeouts so that "server down" tests end fast.
pub fn fetcher(limits: Limits) -> (tempfile::TempDir, Fetcher) {
    let dir = tempfile::tempdir().expect("temp dir");
    let fetcher = fetcher_at(dir.path().join("cache"), limits);
    (dir, fetcher)
}

/// A fetcher over the cache at `root` (reopened if it exists, as after an agent restart).
pub fn fetcher_at(root: PathBuf, limits: Limits) -> Fetcher {
    let fx = Fixtures::load();
    let cache = Cache::open(root, 8 << 30).expect("open cache");
    Fetcher::new(
        Arc::new(cache),
        FetchOptions {
            limits,
            connect_timeout: Duration::from_secs(2),
            timeout: Duration::from_secs(20),
            max_redirects: 5,
            plain_http_registries: vec![fx.registry_plain().host.clone()],
            // The fixture servers are on 127.0.0.1.
            egress: pallet::egress::EgressPolicy {
                allow_loopback: true,
                ..Default::default()
            },
            ..FetchOptions::default()
        },
    )
}

fn source(kind: SourceKind) -> Source {
    Source {
        kind,
        destination: String::new(),
        image: None,
        git: None,
        http: None,
        helm_repository: None,
        poll_interval: None,
        verify: None,
    }
}

/// An image source for `reference`.
pub fn image_source(reference: &str) -> Source {
    Source {
        image: Some(ImageSource {
            reference: reference.into(),
            semver: None,
            auth: None,
            insecure_skip_tls_verify: false,
            ca_secret: None,
        }),
        ..source(SourceKind::Image)
    }
}

/// A git source.
pub fn git_source(repository: &str, reference: GitReference, directory: Option<&str>) -> Source {
    Source {
        git: Some(GitSource {
            repository: repository.into(),
            reference,
            directory: directory.map(str::to_string),
            auth: None,
        }),
        ..source(SourceKind::Git)
    }
}

/// `{branch: name}`.
pub fn branch(name: &str) -> GitReference {
    GitReference {
        branch: Some(name.into()),
        ..Default::default()
    }
}

/// `{tag: name}`.
pub fn tag(name: &str) -> GitReference {
    GitReference {
        tag: Some(name.into()),
        ..Default::default()
    }
}

/// `{commit: sha}`.
pub fn commit(sha: &str) -> GitReference {
    GitReference {
        commit: Some(sha.into()),
        ..Default::default()
    }
}

/// An http source.
pub fn http_source(url: &str, sha256: Option<&str>) -> Source {
    Source {
        http: Some(HttpSource {
            url: url.into(),
            sha256: sha256.map(str::to_string),
            auth: None,
            allow_cross_host_redirects: false,
        }),
        ..source(SourceKind::Http)
    }
}

/// The server's basic-auth credentials, labelled as coming from secret `origin`.
pub fn basic(server: &Server, origin: &str) -> Credentials {
    Credentials {
        origin: origin.into(),
        kind: CredentialKind::Basic {
            username: server.username.clone().expect("server has a username"),
            password: server.password.clone().expect("server has a password"),
        },
    }
}

/// Basic-auth credentials with a wrong password.
pub fn wrong_basic(server: &Server, origin: &str) -> Credentials {
    Credentials {
        origin: origin.into(),
        kind: CredentialKind::Basic {
            username: server.username.clone().unwrap_or_else(|| "pallet".into()),
            password: "definitely-wrong-password".into(),
        },
    }
}

/// A loopback port nothing listens on (bound, then released).
pub fn dead_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// Relative paths of every file and symlink under `dir`, sorted.
pub fn list_tree(dir: &std::path::Path) -> Vec<String> {
    fn walk(root: &std::path::Path, dir: &std::path::Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("read dir") {
            let entry = entry.expect("entry");
            let path = entry.path();
            if entry.file_type().expect("type").is_dir() {
                walk(root, &path, out);
            } else {
                out.push(
                    path.strip_prefix(root)
                        .expect("prefix")
                        .display()
                        .to_string(),
                );
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// No credentials, no CA.
pub fn no_secrets() -> SourceSecrets {
    SourceSecrets::default()
}

/// Just these credentials.
pub fn with_creds(c: Credentials) -> SourceSecrets {
    SourceSecrets {
        credentials: Some(c),
        ca_pem: None,
        verify: None,
    }
}
