//! Helpers shared by the benchmark programs that drive the real agent against the local control
//! plane (`benches/reconcile.rs`, `benches/soak.rs`). Include with `mod common;` next to
//! `#[path = "../tests/support/cluster.rs"] mod cluster;`.

#![allow(dead_code)] // each benchmark uses a different part of this module

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pallet::api::conditions::find;
use pallet::api::BundleDeployment;

use crate::cluster;

/// kubectl as built by tools/controlplane.sh.
pub fn kubectl_path() -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME is set");
    let cache = std::env::var_os("PALLET_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(home).join(".cache/pallet"));
    cache.join("bin/kubectl")
}

/// Runs kubectl against the local control plane; panics with its stderr when it fails.
pub fn kubectl(args: &[&str]) -> String {
    let out = Command::new(kubectl_path())
        .arg("--kubeconfig")
        .arg(cluster::kubeconfig_path())
        .args(args)
        .output()
        .expect("running kubectl (built by tools/controlplane.sh)");
    assert!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// How long one kubectl invocation took.
pub fn timed_kubectl(args: &[&str]) -> Duration {
    let start = Instant::now();
    kubectl(args);
    start.elapsed()
}

/// Ready=True for the BundleDeployment's current generation.
pub fn is_ready(bd: &BundleDeployment) -> bool {
    let generation = bd.metadata.generation;
    bd.status
        .as_ref()
        .and_then(|s| find(&s.conditions, "Ready"))
        .is_some_and(|c| {
            c.status == "True" && (generation.is_none() || c.observed_generation == generation)
        })
}

/// Lines in a file (0 when it does not exist).
pub fn line_count(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// A field of `/proc/PID/status` (e.g. `VmHWM:`), as written there ("12345 kB"); "?" when the
/// process is gone.
pub fn proc_status(pid: u32, field: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .map(|l| l[field.len()..].trim().to_string())
        })
        .unwrap_or_else(|| "?".into())
}

/// A `/proc/PID/status` field in kB (VmRSS, VmHWM), None when the process is gone.
pub fn proc_kib(pid: u32, field: &str) -> Option<u64> {
    proc_status(pid, field)
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
}

/// Seconds with two decimals.
pub fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// Machine line for a report: cores and memory, and that the machine is shared.
pub fn machine_line() -> String {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_kib: f64 = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0.0);
    format!(
        "machine: nproc={nproc}, MemTotal {:.1} GiB, shared with other users (times include their load)",
        mem_kib / (1024.0 * 1024.0)
    )
}
pub mod tcp_front;
