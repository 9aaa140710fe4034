//! Benchmark: pallet's helm renderer vs `helm template` on the test charts, side by side in one
//! run. Prints per-chart mean wall time of each and the ratio (helm / pallet). Not a test: it
//! never fails on timing.
//!
//! Run: `cargo bench -p pallet-formats --bench helm_render` (needs `tools/helm.sh build`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pallet_formats::helm::{self, RenderOptions};

fn helm_bin() -> Option<PathBuf> {
    let cache = std::env::var_os("PALLET_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/pallet")))?;
    let bin = cache.join("bin/helm");
    bin.exists().then_some(bin)
}

fn mean(total: Duration, n: u32) -> f64 {
    total.as_secs_f64() * 1000.0 / f64::from(n)
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/helm/charts");
    let iters: u32 = std::env::var("HELM_BENCH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let Some(helm_path) = helm_bin() else {
        eprintln!("helm oracle not built: run tools/helm.sh build");
        std::process::exit(1);
    };
    println!(
        "{:<12} {:>14} {:>14} {:>8}",
        "chart", "pallet ms", "helm ms", "ratio"
    );
    for chart in ["starter", "constructs", "umbrella"] {
        let dir = root.join(chart);
        let opts = RenderOptions::default();
        // Warm up both (page cache, helm's first-run work).
        let _ = helm::render(&dir, &opts);
        let _ = Command::new(&helm_path)
            .args(["template", "rel"])
            .arg(&dir)
            .output();
        let start = Instant::now();
        for _ in 0..iters {
            match helm::render(&dir, &opts) {
                Ok(objs) => assert!(!objs.is_empty()),
                Err(e) => {
                    eprintln!("{chart}: {e}");
                    std::process::exit(1);
                }
            }
        }
        let ours = start.elapsed();
        let start = Instant::now();
        for _ in 0..iters {
            let out = Command::new(&helm_path)
                .args(["template", "rel"])
                .arg(&dir)
                .output()
                .map(|o| o.status.success());
            if !matches!(out, Ok(true)) {
                eprintln!("{chart}: helm template failed");
                std::process::exit(1);
            }
        }
        let theirs = start.elapsed();
        let (o, t) = (mean(ours, iters), mean(theirs, iters));
        println!("{chart:<12} {o:>14.2} {t:>14.2} {:>7.1}x", t / o);
    }
    println!("(pallet: load + translate + render + parse in-process; helm: `helm template` process; {iters} iterations)");
}
