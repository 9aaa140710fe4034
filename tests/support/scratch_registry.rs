//! A registry of a test's own: the same `docker-registry` the fixtures run, started by the test
//! on a fixed port with its own storage, so the test can stop it (a registry outage) and start it
//! again at the same address without disturbing the shared fixture registries other tests use.
//!
//! Use with `#[path = "support/scratch_registry.rs"] mod scratch_registry;`.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A plain-HTTP registry on 127.0.0.1, killed when dropped.
pub struct ScratchRegistry {
    /// `127.0.0.1:PORT`, the registry part of image references.
    pub host: String,
    config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    _dir: tempfile::TempDir,
}

impl ScratchRegistry {
    /// Starts a registry on a free port and waits until it answers.
    pub fn start() -> ScratchRegistry {
        ScratchRegistry::start_with("")
    }

    /// Like [`ScratchRegistry::start`], sending its notifications (distribution's event
    /// envelope, manifests only) to `url` with `Authorization: Bearer <token>`, as an operator
    /// configures a registry to notify pallet's receiver.
    pub fn start_notifying(url: &str, token: &str) -> ScratchRegistry {
        ScratchRegistry::start_with(&format!(
            "notifications:\n  endpoints:\n  - name: pallet\n    url: {url}\n    headers: {{Authorization: [Bearer {token}]}}\n    timeout: 2s\n    threshold: 3\n    backoff: 1s\n    ignoredmediatypes: [application/octet-stream]\n"
        ))
    }

    fn start_with(extra_config: &str) -> ScratchRegistry {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port_below_ephemeral();
        let host = format!("127.0.0.1:{port}");
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\n  delete: {{enabled: true}}\nhttp:\n  addr: {host}\n  secret: scratch\n{extra_config}",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let log = dir.path().join("registry.log");
        let mut registry = ScratchRegistry {
            host,
            config,
            log,
            child: None,
            _dir: dir,
        };
        registry.resume();
        registry
    }

    /// Stops it: connections are refused until [`ScratchRegistry::resume`].
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again at the same address, with the same content, and waits until it answers.
    pub fn resume(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&self.log).unwrap())
            .spawn()
            .expect("docker-registry starts (installed by tools/fixtures.sh)");
        self.child = Some(child);
        let url = format!("http://{}/v2/", self.host);
        let start = std::time::Instant::now();
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!(
                    "docker-registry exited ({status}): {}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            let answered = std::net::TcpStream::connect(&self.host).is_ok() && probe::get_ok(&url);
            if answered {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "docker-registry did not answer at {url}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A free port below the kernel's ephemeral range (32768 and up by default): the registry binds
/// it later, and again after each restart, and a port from the ephemeral range could be taken
/// in between by any outgoing connection.
pub fn free_port_below_ephemeral() -> u16 {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    (0..1000u32)
        .map(|i| 10_000 + ((seed.wrapping_add(i.wrapping_mul(7919))) % 22_000) as u16)
        .find(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .expect("a free port below 32000")
}

impl Drop for ScratchRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether GET `url` answers 200: a minimal HTTP/1.0 request on a socket (no async runtime
/// needed where this is called).
mod probe {
    use std::io::{Read, Write};

    pub fn get_ok(url: &str) -> bool {
        let Some(rest) = url.strip_prefix("http://") else {
            return false;
        };
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        let Ok(mut stream) = std::net::TcpStream::connect(host) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(2)));
        if write!(stream, "GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").is_err() {
            return false;
        }
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).is_ok()
            && head.starts_with(b"HTTP/1.")
            && &head[9..12] == b"200"
    }
}
