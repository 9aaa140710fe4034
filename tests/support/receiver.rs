//! A notification receiver of a test's own: `pallet-fixtures receiver` (tools/fixtures), a real
//! HTTP server on 127.0.0.1 that records every request (method, path, headers, body), started as
//! its own process on a fixed port so the test can stop it (a receiver outage) and start it again
//! at the same address; the requests recorded before the stop are kept.
//!
//! Use with `#[path = "support/receiver.rs"] mod receiver;`.

#![allow(dead_code)]
// The fixture receiver's own answers, read by the test (see clippy.toml).
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::time::Duration;

/// One request as the receiver recorded it.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct Received {
    /// HTTP method.
    pub method: String,
    /// Path.
    pub path: String,
    /// Headers as sent (names canonicalised by Go: `Ce-Id`, `X-Pallet-Signature`).
    pub headers: std::collections::BTreeMap<String, Vec<String>>,
    /// The body, as text.
    pub body: String,
    /// The status it was answered with.
    pub status: u16,
}

impl Received {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v.first())
            .map(String::as_str)
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.body))
    }
}

/// A running receiver, killed when dropped.
pub struct Receiver {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    host: String,
    records: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    _dir: tempfile::TempDir,
}

fn fixtures_binary() -> PathBuf {
    let cache = std::env::var_os("PALLET_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/pallet"));
    cache.join("bin/pallet-fixtures")
}

/// Builds pallet-fixtures when its sources changed (once per test process).
fn build_fixtures() {
    static BUILD: Once = Once::new();
    BUILD.call_once(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/fixtures.sh");
        let output = Command::new(script).arg("build").output().unwrap();
        assert!(
            output.status.success(),
            "tools/fixtures.sh build failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    });
}

impl Receiver {
    /// Starts a receiver on a free port and waits until it answers.
    pub fn start() -> Receiver {
        // The test's own reqwest clients (control requests) use rustls without a default provider.
        pallet::tls::install_crypto_provider();
        build_fixtures();
        let dir = tempfile::tempdir().unwrap();
        let port = free_port_below_ephemeral();
        let host = format!("127.0.0.1:{port}");
        let mut receiver = Receiver {
            url: format!("http://{host}"),
            host,
            records: dir.path().join("requests.jsonl"),
            log: dir.path().join("receiver.log"),
            child: None,
            _dir: dir,
        };
        receiver.resume();
        receiver
    }

    /// Stops it: connections are refused until [`Receiver::resume`].
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again at the same address, with the requests recorded so far, and waits until
    /// it answers.
    pub fn resume(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = Command::new(fixtures_binary())
            .args(["receiver", "--addr", &self.host, "--records"])
            .arg(&self.records)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&self.log).unwrap())
            .spawn()
            .expect("pallet-fixtures starts (built by tools/fixtures.sh)");
        self.child = Some(child);
        let start = std::time::Instant::now();
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!(
                    "the receiver exited ({status}): {}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            if std::net::TcpStream::connect(&self.host).is_ok() {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the receiver did not answer at {}",
                self.url
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Makes it answer `status` to every request from now on (0: back to 200).
    pub async fn fail_with(&self, status: u16) {
        let response = reqwest::Client::new()
            .post(format!("{}/_receiver/fail?status={status}", self.url))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{response:?}");
    }

    /// The requests recorded so far (across stops), oldest first; those to `path` only when
    /// given.
    pub async fn requests(&self, path: Option<&str>) -> Vec<Received> {
        let text = reqwest::get(format!("{}/_receiver/requests", self.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let all: Vec<Received> = serde_json::from_str(&text).unwrap();
        all.into_iter()
            .filter(|r| path.is_none_or(|p| r.path == p))
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A free port below the kernel's ephemeral range, so that it is still free after a restart
/// (see `scratch_registry.rs`).
fn free_port_below_ephemeral() -> u16 {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        ^ std::process::id();
    (0..1000u32)
        .map(|i| 10_000 + ((seed.wrapping_add(i.wrapping_mul(7919))) % 22_000) as u16)
        .find(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .expect("a free port below 32000")
}
