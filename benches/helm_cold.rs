//! Benchmark: a cold render of the corpus's three largest charts (kube-prometheus-stack, argo-cd,
//! kyverno, each with its corpus values file) and of an umbrella chart whose four components
//! generate their webhook certificates at render time (`benches/charts/webhook-umbrella`: eight
//! RSA keys, where key generation is most of the work) by `pallet render` and by `helm template`, side by
//! side in one run, each a new process with no cache (process start-up included for both). Then
//! what the agent pays to re-render an unchanged chart in-process: the first render (translation
//! included) against later ones (translation cached by content digest; the translation counter
//! shows none happens). Prints figures and ratios; never fails on timing.
//!
//! Run: `cargo bench --bench helm_cold` (needs `tools/helm.sh build` and `shared/` beside the
//! repository). `PALLET_BENCH_ITERS` sets the runs per tool (default 10).

#[path = "../formats/tests/corpus/mod.rs"]
mod corpus;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use pallet_formats::{helm, Format, HelmCapabilities, HelmOptions, RenderConfig};

const KUBE_VERSION: &str = "v1.35.4";
const CHARTS: [&str; 3] = ["kube-prometheus-stack", "argo-cd", "kyverno"];

fn helm_bin() -> PathBuf {
    let cache = std::env::var_os("PALLET_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/pallet")))
        .unwrap_or_default();
    cache.join("bin/helm")
}

/// Runs `cmd` to completion, output discarded; its wall time in ms, or why it failed.
fn timed(mut cmd: Command) -> Result<f64, String> {
    let start = Instant::now();
    let out = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| e.to_string())?;
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    if out.status.success() {
        Ok(ms)
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn pallet_cmd(chart: &Path, values: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pallet"));
    cmd.args(["render", "--format", "helm"])
        .arg(chart)
        .args(["--release-name", "rel", "--install-namespace", "ns"])
        .args(["--kube-version", KUBE_VERSION, "--values"])
        .arg(values);
    cmd
}

fn helm_cmd(chart: &Path, values: &Path) -> Command {
    let mut cmd = Command::new(helm_bin());
    cmd.args(["template", "rel"])
        .arg(chart)
        .args(["--include-crds", "--namespace", "ns"])
        .args(["--kube-version", KUBE_VERSION, "-f"])
        .arg(values)
        .env("TZ", "UTC");
    cmd
}

struct Stats {
    mean: f64,
    min: f64,
}

fn stats(samples: &[f64]) -> Stats {
    Stats {
        mean: samples.iter().sum::<f64>() / samples.len() as f64,
        min: samples.iter().copied().fold(f64::INFINITY, f64::min),
    }
}

fn in_process(chart: &Path, values: &Path, iters: u32) -> Result<(f64, f64, u64), String> {
    let text = std::fs::read_to_string(values).map_err(|e| e.to_string())?;
    let values: serde_json::Value = serde_saphyr::from_str(&text).map_err(|e| e.to_string())?;
    let config = RenderConfig {
        install_namespace: "ns".into(),
        helm: HelmOptions {
            release_name: "rel".into(),
            values,
            capabilities: Some(HelmCapabilities {
                kube_version: KUBE_VERSION.into(),
                api_versions: helm::default_api_versions(),
            }),
            ..HelmOptions::default()
        },
        ..RenderConfig::default()
    };
    let start = Instant::now();
    pallet_formats::render(Format::Helm, chart, &config).map_err(|e| e.to_string())?;
    let first = start.elapsed().as_secs_f64() * 1000.0;
    let before = helm::translations();
    let start = Instant::now();
    for _ in 0..iters {
        pallet_formats::render(Format::Helm, chart, &config).map_err(|e| e.to_string())?;
    }
    let again = start.elapsed().as_secs_f64() * 1000.0 / f64::from(iters);
    Ok((first, again, helm::translations() - before))
}

fn main() {
    let iters: u32 = std::env::var("PALLET_BENCH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10)
        .max(1);
    if !helm_bin().exists() {
        eprintln!("helm oracle not built: run tools/helm.sh build");
        std::process::exit(1);
    }
    let root = corpus::corpus();
    let scratch = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("cannot create a temporary directory: {e}");
            std::process::exit(1);
        }
    };
    println!("helm cold render: `pallet render` vs `helm template`, a new process per run, {iters} runs each, interleaved");
    println!(
        "{:<24} {:>14} {:>14} {:>14} {:>14} {:>10}",
        "chart (values file)",
        "pallet mean ms",
        "pallet min ms",
        "helm mean ms",
        "helm min ms",
        "pallet/helm"
    );
    let mut warm_rows = Vec::new();
    let mut charts: Vec<(&str, PathBuf, PathBuf)> = CHARTS
        .iter()
        .map(|name| {
            (
                *name,
                corpus::chart_dir(&root, name, &scratch.path().join(name)),
                root.join("values").join(format!("{name}.yaml")),
            )
        })
        .collect();
    let umbrella = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/charts/webhook-umbrella");
    charts.push((
        "webhook-umbrella",
        umbrella.clone(),
        umbrella.join("values.yaml"),
    ));
    for (name, chart, values) in charts {
        // One untimed run of each: page cache and the binaries loaded, as for every later run.
        for cmd in [pallet_cmd(&chart, &values), helm_cmd(&chart, &values)] {
            if let Err(e) = timed(cmd) {
                eprintln!("{name}: {e}");
                std::process::exit(1);
            }
        }
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..iters {
            for (cmd, into) in [
                (pallet_cmd(&chart, &values), &mut ours),
                (helm_cmd(&chart, &values), &mut theirs),
            ] {
                match timed(cmd) {
                    Ok(ms) => into.push(ms),
                    Err(e) => {
                        eprintln!("{name}: {e}");
                        std::process::exit(1);
                    }
                }
            }
        }
        let (o, t) = (stats(&ours), stats(&theirs));
        println!(
            "{name:<24} {:>14.1} {:>14.1} {:>14.1} {:>14.1} {:>9.2}x",
            o.mean,
            o.min,
            t.mean,
            t.min,
            o.mean / t.mean
        );
        match in_process(&chart, &values, iters) {
            Ok(row) => warm_rows.push((name, row)),
            Err(e) => {
                eprintln!("{name}: {e}");
                std::process::exit(1);
            }
        }
    }
    println!();
    println!("agent re-render (in-process, translation cached by content digest)");
    println!(
        "{:<24} {:>16} {:>16} {:>22}",
        "chart", "first render ms", "re-render ms", "translations on re-render"
    );
    for (name, (first, again, translations)) in warm_rows {
        println!("{name:<24} {first:>16.1} {again:>16.1} {translations:>22}");
    }
}
