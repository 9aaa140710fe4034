//! Benchmark: pallet's helm renderer vs `helm template` on the test charts and on a generated
//! chart of 200 templates, side by side in one run. Prints per-chart mean wall time of each and
//! the ratio (pallet / helm), plus pallet's first render of each chart (which includes the
//! translation to minijinja; later renders hit the per-chart template cache). Not a test: it
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

/// Writes a chart with `count` templates that use what real charts use: a helper define with
/// `include`, values lookups with `default`, `range`, `if`/`else`, `printf`, `toYaml | nindent`.
fn generated_chart(dir: &Path, count: usize) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("templates"))?;
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: many\nversion: 0.1.0\n",
    )?;
    std::fs::write(
        dir.join("values.yaml"),
        "replicas: 2\nlabels:\n  team: platform\n  tier: backend\nitems: [alpha, beta, gamma, delta]\nenabled: true\n",
    )?;
    std::fs::write(
        dir.join("templates/_helpers.tpl"),
        "{{- define \"many.labels\" -}}\napp.kubernetes.io/name: {{ .Chart.Name }}\n\
         app.kubernetes.io/instance: {{ .Release.Name }}\n{{- with .Values.labels }}\n{{ toYaml . }}\n{{- end }}\n{{- end -}}\n",
    )?;
    for i in 0..count {
        let template = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{{{ printf \"%s-cm-{i:03}\" .Release.Name | trunc 63 }}}}\n\
             \x20 labels:\n    {{{{- include \"many.labels\" . | nindent 4 }}}}\ndata:\n\
             \x20 replicas: {{{{ .Values.replicas | default 1 | quote }}}}\n\
             {{{{- range $i, $item := .Values.items }}}}\n  item-{{{{ $i }}}}: {{{{ upper $item | quote }}}}\n{{{{- end }}}}\n\
             {{{{- if .Values.enabled }}}}\n  mode: on\n{{{{- else }}}}\n  mode: off\n{{{{- end }}}}\n"
        );
        std::fs::write(dir.join(format!("templates/cm-{i:03}.yaml")), template)?;
    }
    Ok(())
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/helm/charts");
    let generated = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("cannot create a temporary directory: {e}");
            std::process::exit(1);
        }
    };
    let many = generated.path().join("many");
    if let Err(e) = generated_chart(&many, 200) {
        eprintln!("cannot write the generated chart: {e}");
        std::process::exit(1);
    }
    let iters: u32 = std::env::var("HELM_BENCH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let Some(helm_path) = helm_bin() else {
        eprintln!("helm oracle not built: run tools/helm.sh build");
        std::process::exit(1);
    };
    println!(
        "{:<16} {:>16} {:>14} {:>14} {:>11}",
        "chart", "pallet first ms", "pallet ms", "helm ms", "pallet/helm"
    );
    let charts = [
        ("starter", root.join("starter")),
        ("constructs", root.join("constructs")),
        ("umbrella", root.join("umbrella")),
        ("200 templates", many),
    ];
    for (chart, dir) in charts {
        let opts = RenderOptions::default();
        // The first render translates the chart; it is timed on its own. Then warm up helm too.
        let first = Instant::now();
        if let Err(e) = helm::render(&dir, &opts) {
            eprintln!("{chart}: {e}");
            std::process::exit(1);
        }
        let first = first.elapsed().as_secs_f64() * 1000.0;
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
        println!(
            "{chart:<16} {first:>16.2} {o:>14.2} {t:>14.2} {:>10.3}x",
            o / t
        );
    }
    println!("(pallet: load + translate + render + parse in-process; helm: `helm template` process; {iters} iterations)");
}
