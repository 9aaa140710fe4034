//! Benchmark: the kustomize format against `kustomize build` v5.5.0 on the three largest roots
//! of the real-world corpus (`shared/conformance/kustomize`), side by side in one run, each a
//! new process (start-up included for both): `pallet render --format kustomize DIR` and
//! `kustomize build DIR`. Prints the median wall time and the peak resident memory of each,
//! and pallet's ratios to kustomize. Never fails on timing.
//!
//! Run: `cargo bench --bench kustomize_render` (needs `tools/kustomize.sh build` and `shared/`
//! beside the repository, or `PALLET_CONFORMANCE_DIR`). `PALLET_BENCH_ITERS` sets the runs per
//! tool and root (default 10). Peak memory is GNU time's maximum resident set size.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The corpus's largest roots by output size, with the directory of their repository (the tree
/// a BundleDeployment's source would hold).
const ROOTS: [(&str, &str, &str); 3] = [
    (
        "kubeflow-kserve",
        "trees/kubeflow",
        "applications/kserve/kserve",
    ),
    (
        "argocd-install",
        "trees/argo-cd",
        "manifests/cluster-install",
    ),
    (
        "argocd-core-install",
        "trees/argo-cd",
        "manifests/core-install",
    ),
];

fn corpus() -> PathBuf {
    std::env::var_os("PALLET_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance"))
        .join("kustomize")
}

fn kustomize_bin() -> PathBuf {
    std::env::var_os("PALLET_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/pallet")))
        .unwrap_or_default()
        .join("bin/kustomize")
}

/// One run under GNU time: wall seconds and peak RSS in KiB, or why it failed.
fn measure(program: &Path, args: &[&str], dir: &Path) -> Result<(f64, u64), String> {
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%e %M"])
        .arg(program)
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("running /usr/bin/time: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(stderr.into_owned());
    }
    let last = stderr.lines().last().unwrap_or_default();
    let mut fields = last.split_whitespace();
    let seconds = fields.next().and_then(|s| s.parse().ok());
    let kib = fields.next().and_then(|s| s.parse().ok());
    match (seconds, kib) {
        (Some(seconds), Some(kib)) => Ok((seconds, kib)),
        _ => Err(format!("unexpected GNU time output {last:?}")),
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

fn main() {
    let iterations: usize = std::env::var("PALLET_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let kustomize = kustomize_bin();
    if !kustomize.is_file() {
        eprintln!(
            "no kustomize at {}: run tools/kustomize.sh build",
            kustomize.display()
        );
        return;
    }
    let pallet = PathBuf::from(env!("CARGO_BIN_EXE_pallet"));
    println!("kustomize render, {iterations} runs per tool and root (new process each)");
    println!(
        "{:<22} {:>12} {:>12} {:>8} {:>14} {:>14} {:>8}",
        "root", "pallet ms", "kustomize ms", "ratio", "pallet MiB", "kustomize MiB", "ratio"
    );
    for (case, tree, root) in ROOTS {
        let tree = corpus().join(tree);
        let (mut pallet_times, mut kustomize_times) = (Vec::new(), Vec::new());
        let (mut pallet_peak, mut kustomize_peak) = (0u64, 0u64);
        for _ in 0..iterations {
            // Interleaved, so that both see the same machine.
            match measure(&pallet, &["render", "--format", "kustomize", root], &tree) {
                Ok((s, kib)) => {
                    pallet_times.push(s * 1000.0);
                    pallet_peak = pallet_peak.max(kib);
                }
                Err(e) => return eprintln!("{case}: pallet failed: {e}"),
            }
            match measure(&kustomize, &["build", root], &tree) {
                Ok((s, kib)) => {
                    kustomize_times.push(s * 1000.0);
                    kustomize_peak = kustomize_peak.max(kib);
                }
                Err(e) => return eprintln!("{case}: kustomize failed: {e}"),
            }
        }
        let (p, k) = (median(pallet_times), median(kustomize_times));
        let (pm, km) = (pallet_peak as f64 / 1024.0, kustomize_peak as f64 / 1024.0);
        println!(
            "{case:<22} {p:>12.0} {k:>12.0} {:>7.2}x {pm:>14.1} {km:>14.1} {:>7.2}x",
            p / k,
            pm / km
        );
    }
}
