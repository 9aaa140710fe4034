//! A control plane of a test's own: the project's `tools/controlplane.sh` with another port and
//! state directory, so a test can stop and restart the API server without disturbing the shared
//! one other tests use. Test files using it are marked `rbac-pass: skip` (tools/test.sh).
//!
//! Use with `#[path = "support/private_control_plane.rs"] mod private_control_plane;`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use kube::Client;

/// A control plane of the test's own, stopped (data kept) and wiped on drop.
pub struct PrivateControlPlane {
    state: tempfile::TempDir,
    port: u16,
    /// Extra environment for tools/controlplane.sh (e.g. PALLET_CONTROLPLANE_PROFILE).
    env: Vec<(String, String)>,
}

impl PrivateControlPlane {
    /// Runs `tools/controlplane.sh COMMAND` (start, stop, wipe) for this control plane.
    pub fn script(&self, command: &str) {
        self.script_args(&[command]);
    }

    /// Runs `tools/controlplane.sh ARGS...` (e.g. `user NAME OUT`) for this control plane.
    pub fn script_args(&self, args: &[&str]) {
        let command = args.join(" ");
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let status = Command::new(root.join("tools/controlplane.sh"))
            .args(args)
            .env("PALLET_STATE_DIR", self.state.path())
            .env("PALLET_CONTROLPLANE_PORT", self.port.to_string())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .status()
            .expect("tools/controlplane.sh runs");
        assert!(status.success(), "tools/controlplane.sh {command} failed");
    }

    /// Starts one on a free port.
    pub fn start() -> PrivateControlPlane {
        Self::start_with_env(Vec::new())
    }

    /// Starts one on a free port, with `env` added to tools/controlplane.sh's environment.
    pub fn start_with_env(env: Vec<(String, String)>) -> PrivateControlPlane {
        // Below the kernel's ephemeral range, like the fixtures' ports (see tools/fixtures).
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let port = (0..1000u32)
            .map(|i| 20_000 + ((seed.wrapping_add(i * 7919)) % 12_000) as u16)
            .find(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
            .expect("a free port");
        let plane = PrivateControlPlane {
            state: tempfile::tempdir().unwrap(),
            port,
            env,
        };
        plane.script("start");
        plane
    }

    /// Its admin kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.state.path().join("controlplane/kubeconfig")
    }

    /// An admin client.
    pub async fn client(&self) -> Client {
        client_from(&self.kubeconfig()).await
    }
}

/// A client authenticating with the kubeconfig at `path`.
pub use crate::cluster::client_from;

impl Drop for PrivateControlPlane {
    fn drop(&mut self) {
        self.script("wipe");
    }
}
