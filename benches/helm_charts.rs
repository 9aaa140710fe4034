//! Benchmark: every real chart the project has — the 20 charts of the corpus
//! (`shared/conformance/helm`) and the 57 extra charts (`tools/extra-charts.sh`), each with its
//! default values and with its values file, plus the webhook umbrella of `benches/charts`
//! (eight generated RSA keys) — rendered by `pallet render` and by `helm template`, each a new
//! process (start-up included for both), interleaved, several runs each. Per case it prints the
//! median wall time and the peak resident memory of each tool and pallet's ratios to helm;
//! then the median and the worst ratio, and the worst case.
//!
//! Then what the agent pays for the same cases: the render function called in-process as the
//! render sandbox's child calls it (warm: the translation cached, no process start), and the
//! sandbox's round trip (a child process per render, request and reply as JSON), as a reconcile
//! pays it.
//!
//! A full run writes its summary and table into `docs/performance.md` (between the
//! `helm-charts` markers), with the date, the commit, the build and the machine's load. Never
//! fails on timing.
//!
//! Run: `cargo bench --bench helm_charts` (needs `tools/helm.sh build`, `tools/extra-charts.sh`
//! and `shared/` beside the repository). `PALLET_BENCH_ITERS` sets the runs per tool and case
//! (default 5); `PALLET_BENCH_CHARTS=a,b` limits the run to some charts (the docs are then left
//! alone). Peak memory is GNU time's maximum resident set size.

#[path = "../formats/tests/corpus/mod.rs"]
mod corpus;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use pallet::render_sandbox::{RenderSandbox, SandboxLimits};
use pallet_formats::helm::values::{merge_values, parse_values_document};
use pallet_formats::{Format, HelmCapabilities, HelmOptions, RenderConfig};

const RELEASE: &str = "rel";
const NAMESPACE: &str = "ns";
const KUBE_VERSION: &str = "v1.35.4";
/// Where the benchmark's section of `docs/performance.md` starts and ends.
const BEGIN_MARKER: &str =
    "<!-- helm-charts: begin (written by `cargo bench --bench helm_charts`) -->";
const END_MARKER: &str = "<!-- helm-charts: end -->";

/// One chart with one set of values.
struct Case {
    /// `chart (defaults)` or `chart (values file)`.
    label: String,
    chart: PathBuf,
    values: Option<PathBuf>,
}

/// Medians and peaks of one case, both tools.
struct Measured {
    pallet_ms: f64,
    helm_ms: f64,
    pallet_mib: f64,
    helm_mib: f64,
}

impl Measured {
    fn time_ratio(&self) -> f64 {
        self.pallet_ms / self.helm_ms
    }
    fn memory_ratio(&self) -> f64 {
        self.pallet_mib / self.helm_mib
    }
}

/// What a reconcile pays for one case: in-process renders and sandbox round trips.
struct AgentCost {
    first_ms: f64,
    warm_ms: f64,
    sandbox_ms: f64,
}

fn cache_dir() -> PathBuf {
    std::env::var_os("PALLET_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/pallet")))
        .unwrap_or_default()
}

fn helm_bin() -> PathBuf {
    cache_dir().join("bin/helm")
}

/// The two cases of a chart: default values, and its values file.
fn pair(name: &str, chart: PathBuf, values: PathBuf) -> [Case; 2] {
    [
        Case {
            label: format!("{name} (defaults)"),
            chart: chart.clone(),
            values: None,
        },
        Case {
            label: format!("{name} (values file)"),
            chart,
            values: Some(values),
        },
    ]
}

/// Every case, corpus first, then the extra charts, then the webhook umbrella; limited to
/// `only` when given. Charts with missing dependencies are assembled under `scratch`.
fn cases(scratch: &Path, only: Option<&[String]>) -> Result<Vec<Case>, String> {
    let wanted = |name: &str| only.is_none_or(|o| o.iter().any(|c| c == name));
    let mut out = Vec::new();
    let root = corpus::corpus();
    let mut corpus_charts: Vec<String> = std::fs::read_dir(root.join("charts"))
        .map_err(|e| format!("reading the corpus: {e}"))?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    corpus_charts.sort();
    for name in corpus_charts.iter().filter(|c| wanted(c)) {
        let chart = corpus::chart_dir(&root, name, &scratch.join(name));
        out.extend(pair(name, chart, root.join(format!("values/{name}.yaml"))));
    }
    let values_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("formats/testdata/extra-values");
    let mut extra: Vec<String> = std::fs::read_dir(&values_dir)
        .map_err(|e| format!("reading {}: {e}", values_dir.display()))?
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".yaml").map(str::to_string)
        })
        .collect();
    extra.sort();
    let charts = cache_dir().join("extra-charts/charts");
    for name in extra.iter().filter(|c| wanted(c)) {
        let chart = charts.join(name);
        if !chart.join("Chart.yaml").is_file() {
            return Err(format!(
                "the extra chart {name} is not in {}: run tools/extra-charts.sh",
                charts.display()
            ));
        }
        out.extend(pair(name, chart, values_dir.join(format!("{name}.yaml"))));
    }
    if wanted("webhook-umbrella") {
        let umbrella =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/charts/webhook-umbrella");
        out.push(Case {
            label: "webhook-umbrella (values file)".into(),
            values: Some(umbrella.join("values.yaml")),
            chart: umbrella,
        });
    }
    Ok(out)
}

fn pallet_cmd(case: &Case) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pallet"));
    cmd.args(["render", "--format", "helm"])
        .arg(&case.chart)
        .args(["--release-name", RELEASE, "--install-namespace", NAMESPACE])
        .args(["--kube-version", KUBE_VERSION]);
    if let Some(values) = &case.values {
        cmd.arg("--values").arg(values);
    }
    cmd
}

fn helm_cmd(case: &Case, helm_cache: &Path) -> Command {
    let mut cmd = Command::new(helm_bin());
    cmd.args(["template", RELEASE])
        .arg(&case.chart)
        .args(["--include-crds", "--namespace", NAMESPACE])
        .args(["--kube-version", KUBE_VERSION])
        .env("HELM_CACHE_HOME", helm_cache)
        // Sprig formats dates in the local zone; pallet renders in UTC.
        .env("TZ", "UTC");
    if let Some(values) = &case.values {
        cmd.arg("-f").arg(values);
    }
    cmd
}

/// One run of `cmd` under GNU time, output discarded: wall milliseconds and peak RSS in KiB,
/// or its error output.
fn run_once(cmd: Command) -> Result<(f64, u64), String> {
    let mut timed = Command::new("/usr/bin/time");
    timed
        .args(["-f", "%M"])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => timed.env(key, value),
            None => timed.env_remove(key),
        };
    }
    let start = Instant::now();
    let out = timed
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("running /usr/bin/time: {e}"))?;
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(stderr.trim().to_string());
    }
    let last = stderr.lines().last().unwrap_or_default();
    let kib = last
        .trim()
        .parse()
        .map_err(|_| format!("unexpected GNU time output {last:?}"))?;
    Ok((ms, kib))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// Both tools on one case, `iters` runs each, interleaved (the order alternates, so neither
/// always runs on a cache the other warmed). `Ok(None)` when helm fails on the case (a chart
/// whose default values helm refuses): nothing to compare.
fn measure(case: &Case, iters: usize, helm_cache: &Path) -> Result<Option<Measured>, String> {
    // One untimed run of each: page cache and binaries loaded, as for every later run.
    if run_once(helm_cmd(case, helm_cache)).is_err() {
        return Ok(None);
    }
    run_once(pallet_cmd(case)).map_err(|e| format!("pallet fails where helm renders: {e}"))?;
    let (mut pallet, mut helm) = (Vec::new(), Vec::new());
    let (mut pallet_kib, mut helm_kib) = (0u64, 0u64);
    for i in 0..iters {
        for pallet_turn in [i % 2 == 0, i % 2 == 1] {
            if pallet_turn {
                let (ms, kib) = run_once(pallet_cmd(case))?;
                pallet.push(ms);
                pallet_kib = pallet_kib.max(kib);
            } else {
                let (ms, kib) = run_once(helm_cmd(case, helm_cache))?;
                helm.push(ms);
                helm_kib = helm_kib.max(kib);
            }
        }
    }
    Ok(Some(Measured {
        pallet_ms: median(pallet),
        helm_ms: median(helm),
        pallet_mib: pallet_kib as f64 / 1024.0,
        helm_mib: helm_kib as f64 / 1024.0,
    }))
}

/// The render configuration the agent builds for this case (values read as the CLI reads
/// them; a fixed clock and a non-zero seed, as a BundleDeployment's).
fn agent_config(case: &Case) -> Result<RenderConfig, String> {
    let mut values = serde_json::Map::new();
    if let Some(path) = &case.values {
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        merge_values(&mut values, &parse_values_document(&text)?);
    }
    Ok(RenderConfig {
        install_namespace: NAMESPACE.into(),
        helm: HelmOptions {
            release_name: RELEASE.into(),
            values: serde_json::Value::Object(values),
            capabilities: Some(HelmCapabilities {
                kube_version: KUBE_VERSION.into(),
                api_versions: pallet_formats::helm::default_api_versions(),
            }),
            now: 1_767_225_600,
            seed: [7; 32],
            ..HelmOptions::default()
        },
        ..RenderConfig::default()
    })
}

/// The agent's cost for one case: the first in-process render (translation included), the
/// median of `iters` later ones, and the median of `iters` sandbox round trips.
fn agent_cost(
    case: &Case,
    iters: usize,
    sandbox: &RenderSandbox,
    runtime: &tokio::runtime::Runtime,
) -> Result<AgentCost, String> {
    let config = agent_config(case)?;
    let render = || {
        let start = Instant::now();
        pallet::reconcile::render::render_step(Format::Helm, &case.chart, &config, true, &[], None)
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(start.elapsed().as_secs_f64() * 1000.0)
    };
    let first_ms = render()?;
    let warm = (0..iters)
        .map(|_| render())
        .collect::<Result<Vec<_>, _>>()?;
    let mut round_trips = Vec::new();
    for _ in 0..iters {
        let start = Instant::now();
        runtime
            .block_on(sandbox.render(&case.chart, Format::Helm, &config, true))
            .map_err(|e| format!("sandbox: {e}"))?;
        round_trips.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(AgentCost {
        first_ms,
        warm_ms: median(warm),
        sandbox_ms: median(round_trips),
    })
}

/// The median and the worst (highest) of `ratio` over the rows, with the worst row's label.
fn summary(rows: &[(String, Measured)], ratio: impl Fn(&Measured) -> f64) -> (f64, f64, &str) {
    let med = median(rows.iter().map(|(_, m)| ratio(m)).collect());
    let worst = rows
        .iter()
        .max_by(|a, b| ratio(&a.1).total_cmp(&ratio(&b.1)))
        .map_or((f64::NAN, ""), |(label, m)| (ratio(m), label.as_str()));
    (med, worst.0, worst.1)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".into())
}

fn command_line(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".into())
}

/// The commit the benchmark was built from, marked when the tree had local changes.
fn commit() -> String {
    let head = command_line("git", &["rev-parse", "--short", "HEAD"]);
    let dirty = !command_line("git", &["status", "--porcelain", "--untracked-files=no"]).is_empty();
    if dirty {
        format!("{head} (with local changes)")
    } else {
        head
    }
}

/// What the run measured, as the Markdown section of `docs/performance.md`.
struct Report<'a> {
    iters: usize,
    rows: &'a [(String, Measured)],
    agent: &'a [(String, AgentCost)],
    skipped: &'a [String],
    load_before: String,
    load_after: String,
}

impl Report<'_> {
    fn markdown(&self) -> String {
        let (time_med, time_worst, time_case) = summary(self.rows, Measured::time_ratio);
        let (mem_med, mem_worst, mem_case) = summary(self.rows, Measured::memory_ratio);
        let over = |limit: f64, ratio: fn(&Measured) -> f64| {
            self.rows.iter().filter(|(_, m)| ratio(m) > limit).count()
        };
        let date = command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
        let rustc = command_line("rustc", &["--version"]);
        let mut s = String::new();
        s.push_str(&format!(
            "Written by `cargo bench --bench helm_charts` on {date}, commit `{}`, release build \
             (cargo's bench profile, {rustc}), helm {}; load average {} at the start, {} at the \
             end (two cores).\n\n",
            commit(),
            command_line(&helm_bin().to_string_lossy(), &["version", "--short"]),
            self.load_before,
            self.load_after,
        ));
        // Charts by name, the cases helm refuses included: `name (values)`.
        let mut charts: Vec<&str> = (self.rows.iter().map(|(label, _)| label))
            .chain(self.skipped)
            .filter_map(|label| label.split(" (").next())
            .collect();
        charts.sort_unstable();
        charts.dedup();
        s.push_str(&format!(
            "{} cases compared ({} charts, each with its default values and with its values \
             file; the webhook umbrella with its values file only), `pallet render` against \
             `helm template`, each a new process, {} interleaved runs per tool and case; time \
             is the median wall time, memory the peak resident set.\n\n",
            self.rows.len(),
            charts.len(),
            self.iters,
        ));
        s.push_str(&format!(
            "- time, pallet/helm: median **{time_med:.2}×**, worst **{time_worst:.2}×** \
             ({time_case}); {} cases above 0.5×, {} above 1.0×\n",
            over(0.5, Measured::time_ratio),
            over(1.0, Measured::time_ratio),
        ));
        s.push_str(&format!(
            "- peak memory, pallet/helm: median **{mem_med:.2}×**, worst **{mem_worst:.2}×** \
             ({mem_case}); {} cases at or above 1.0×\n",
            self.rows
                .iter()
                .filter(|(_, m)| m.memory_ratio() >= 1.0)
                .count(),
        ));
        if !self.skipped.is_empty() {
            s.push_str(&format!(
                "- not compared (helm refuses them): {}\n",
                self.skipped.join(", ")
            ));
        }
        let warm = median(self.agent.iter().map(|(_, a)| a.warm_ms).collect());
        let round = median(self.agent.iter().map(|(_, a)| a.sandbox_ms).collect());
        s.push_str(&format!(
            "- in the agent: a warm in-process render (translation cached) takes a median \
             {warm:.1} ms, a render in the sandbox (a child process, request and reply as \
             JSON) {round:.1} ms\n\n",
        ));
        s.push_str(&self.table());
        s
    }

    fn table(&self) -> String {
        let mut s = String::from(
            "<details><summary>Every case</summary>\n\n\
             | case | pallet ms | helm ms | time | pallet MiB | helm MiB | memory | agent warm ms | sandbox ms |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        );
        for (label, m) in self.rows {
            let agent = self.agent.iter().find(|(l, _)| l == label);
            let (warm, sandbox) = agent.map_or(("-".into(), "-".into()), |(_, a)| {
                (format!("{:.1}", a.warm_ms), format!("{:.1}", a.sandbox_ms))
            });
            s.push_str(&format!(
                "| {label} | {:.0} | {:.0} | {:.2}× | {:.1} | {:.1} | {:.2}× | {warm} | {sandbox} |\n",
                m.pallet_ms,
                m.helm_ms,
                m.time_ratio(),
                m.pallet_mib,
                m.helm_mib,
                m.memory_ratio(),
            ));
        }
        s.push_str("\n</details>\n");
        s
    }
}

/// Replaces the benchmark's section of `docs/performance.md` (between the markers) with
/// `section`, or appends one.
fn write_docs(section: &str) -> Result<PathBuf, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/performance.md");
    let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
    let block = format!("{BEGIN_MARKER}\n{section}{END_MARKER}");
    let updated = match (text.find(BEGIN_MARKER), text.find(END_MARKER)) {
        (Some(begin), Some(end)) if begin < end => {
            format!(
                "{}{block}{}",
                &text[..begin],
                &text[end + END_MARKER.len()..]
            )
        }
        _ => format!(
            "{}\n\n## Helm charts against helm template\n\n{block}\n",
            text.trim_end()
        ),
    };
    std::fs::write(&path, updated).map_err(|e| e.to_string())?;
    Ok(path)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("helm_charts: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let iters: usize = std::env::var("PALLET_BENCH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
        .max(1);
    let only: Option<Vec<String>> = std::env::var("PALLET_BENCH_CHARTS")
        .ok()
        .map(|s| s.split(',').map(str::to_string).collect());
    if !helm_bin().exists() {
        return Err("helm oracle not built: run tools/helm.sh build".into());
    }
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let helm_cache = scratch.path().join("helm-cache");
    let cases = cases(scratch.path(), only.as_deref())?;
    let load_before = load_average();
    println!(
        "helm charts: `pallet render` vs `helm template`, a new process per run, {iters} runs each, \
         interleaved; load average {load_before}"
    );
    println!(
        "{:<48} {:>10} {:>10} {:>7} {:>11} {:>9} {:>7}",
        "case", "pallet ms", "helm ms", "time", "pallet MiB", "helm MiB", "memory"
    );
    let (mut rows, mut skipped) = (Vec::new(), Vec::new());
    for case in &cases {
        match measure(case, iters, &helm_cache).map_err(|e| format!("{}: {e}", case.label))? {
            None => {
                println!("{:<48} helm fails: not compared", case.label);
                skipped.push(case.label.clone());
            }
            Some(m) => {
                println!(
                    "{:<48} {:>10.1} {:>10.1} {:>6.2}x {:>11.1} {:>9.1} {:>6.2}x",
                    case.label,
                    m.pallet_ms,
                    m.helm_ms,
                    m.time_ratio(),
                    m.pallet_mib,
                    m.helm_mib,
                    m.memory_ratio()
                );
                rows.push((case.label.clone(), m));
            }
        }
    }
    let (time_med, time_worst, time_case) = summary(&rows, Measured::time_ratio);
    let (mem_med, mem_worst, mem_case) = summary(&rows, Measured::memory_ratio);
    println!("time pallet/helm: median {time_med:.2}x, worst {time_worst:.2}x ({time_case})");
    println!("peak memory pallet/helm: median {mem_med:.2}x, worst {mem_worst:.2}x ({mem_case})");

    let agent = agent_costs(&cases, &rows, iters)?;
    let report = Report {
        iters,
        rows: &rows,
        agent: &agent,
        skipped: &skipped,
        load_before,
        load_after: load_average(),
    };
    if only.is_none() {
        let path = write_docs(&report.markdown())?;
        println!("\nwrote the table into {}", path.display());
    }
    Ok(())
}

/// The agent's cost for every case helm renders, printed as it goes.
fn agent_costs(
    cases: &[Case],
    rows: &[(String, Measured)],
    iters: usize,
) -> Result<Vec<(String, AgentCost)>, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let sandbox = RenderSandbox::with_program(
        SandboxLimits::default(),
        PathBuf::from(env!("CARGO_BIN_EXE_pallet")),
    );
    println!("\nin the agent: in-process renders (as the sandbox's child calls the renderer) and sandbox round trips");
    println!(
        "{:<48} {:>14} {:>12} {:>12} {:>12}",
        "case", "first ms", "warm ms", "sandbox ms", "helm ms"
    );
    let mut out = Vec::new();
    for case in cases {
        let Some((_, m)) = rows.iter().find(|(label, _)| *label == case.label) else {
            continue;
        };
        let cost = agent_cost(case, iters, &sandbox, &runtime)
            .map_err(|e| format!("{} in the agent: {e}", case.label))?;
        println!(
            "{:<48} {:>14.1} {:>12.1} {:>12.1} {:>12.1}",
            case.label, cost.first_ms, cost.warm_ms, cost.sandbox_ms, m.helm_ms
        );
        out.push((case.label.clone(), cost));
    }
    Ok(out)
}
