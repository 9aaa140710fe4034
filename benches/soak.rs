//! Soak (figures, not a test): many BundleDeployments with floating refs for a long time while
//! their sources move and go down and the agent is killed with SIGKILL and restarted, against the
//! local control plane with the real `pallet agent` binary (release build). At the end, with the
//! sources up and the agent running, every BundleDeployment must converge to Ready at the newest
//! content.
//!
//! - `PALLET_BENCH_SOAK_BDS` BundleDeployments (default 300), a third each on an image tag
//!   (`:latest` of the soak's own docker-registry), a git branch (`main`) and an http URL without
//!   `sha256`; each bundle is three ConfigMaps whose data names the bundle's content generation.
//! - For `PALLET_BENCH_SOAK_SECONDS` (default 1800): every few seconds a random tenth of the
//!   bundles gets new content (tag re-pushed, branch committed, file rewritten); each source kind
//!   has outages (its own registry stopped and restarted; for git and http, the soak's TCP front
//!   to the fixture server closed and reopened: the shared fixture servers never stop); the agent
//!   is killed at random intervals within bounds. The schedule comes from `PALLET_BENCH_SOAK_SEED`
//!   (printed).
//! - Measured: objects of an active revision missing at each kill and at the end (lost), bundles
//!   not Ready at the newest content within the deadline (stuck), the agent's RSS every 30 s per
//!   incarnation, revisions, outages, reconcile errors by reason, change-log lines against the
//!   ConfigMap writes the API server reported (a watch).
//!
//! Needs `tools/controlplane.sh start` and `tools/fixtures.sh start`, then
//! `cargo bench --bench soak`. Everything it creates carries a unique `pallet.dev/test` label (or
//! lives in its own namespace) and is deleted at the end.

// The benchmark's clients of the agent's own endpoints read whole answers (see clippy.toml).
#![allow(clippy::disallowed_methods)]

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "../tests/support/cluster.rs"]
mod cluster;

#[path = "../tests/support/agent.rs"]
mod agent;

#[path = "../tests/support/scratch_registry.rs"]
mod scratch_registry;

mod common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use pallet::api::conditions::find;
use pallet::api::BundleDeployment;

use agent::{Agent, TEST_LABEL};
use common::tcp_front::TcpFront;
use common::{is_ready, kubectl_with, machine, proc_kib};
use scratch_registry::{free_port_below_ephemeral, ScratchRegistry};
use support::{Fixtures, GitRepo};

/// ConfigMaps per bundle; their names never change, only their data.
const OBJECTS_PER_BUNDLE: usize = 3;
const RSS_EVERY: Duration = Duration::from_secs(30);
const POLL_INTERVAL: &str = "30s";
const REQUEUE_SECONDS: &str = "60";
/// Deadline for the first install and for the convergence at the end. Generous: the machine is
/// shared, and a deadline only stops a run that will never finish.
const INSTALL_DEADLINE: Duration = Duration::from_secs(900);
const CONVERGE_DEADLINE: Duration = Duration::from_secs(600);
const BUNDLE_LABEL: &str = "pallet.dev/soak";

/// splitmix64: a seeded, reproducible schedule needs no more than this.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi].
    fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = hi.saturating_sub(lo).as_millis() as u64;
        lo + Duration::from_millis(if span == 0 {
            0
        } else {
            self.next() % (span + 1)
        })
    }
}

/// Bounds of the schedule, scaled from the full 30-minute run to shorter ones.
struct Schedule {
    seconds: u64,
    kill: (Duration, Duration),
    up: (Duration, Duration),
    down: (Duration, Duration),
    move_every: Duration,
}

impl Schedule {
    fn for_seconds(seconds: u64) -> Schedule {
        let scale = (seconds as f64 / 1800.0).clamp(0.05, 1.0);
        let s =
            |full: u64, floor: u64| Duration::from_secs(((full as f64 * scale) as u64).max(floor));
        Schedule {
            seconds,
            kill: (s(120, 30), s(300, 60)),
            up: (s(90, 20), s(240, 45)),
            down: (s(20, 10), s(60, 20)),
            move_every: Duration::from_secs(20),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Kind {
    Image,
    Git,
    Http,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Image => "image",
            Kind::Git => "git",
            Kind::Http => "http",
        }
    }
}

struct Bundle {
    name: String,
    kind: Kind,
    /// Content generation last published (the newest the agent must end at).
    generation: u64,
    /// Image repository, git repo or http path of its source.
    image_repo: String,
    git: Option<GitRepo>,
    http_path: String,
}

impl Bundle {
    fn object_names(&self) -> impl Iterator<Item = String> + '_ {
        (0..OBJECTS_PER_BUNDLE).map(|k| format!("{}-{k}", self.name))
    }

    /// The bundle's manifest at `generation`.
    fn content(&self, generation: u64) -> String {
        self.object_names()
            .map(|name| {
                format!(
                    "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels:\n    {BUNDLE_LABEL}: \"true\"\ndata:\n  generation: \"{generation}\"\n  payload: \"{}\"\n",
                    "x".repeat(200)
                )
            })
            .collect()
    }
}

/// Everything the sources of the soak live on.
struct Sources {
    fx: &'static Fixtures,
    registry: ScratchRegistry,
    registry_up: bool,
    git: TcpFront,
    http: TcpFront,
    work: PathBuf,
    run: String,
}

impl Sources {
    /// Publishes generation `generation` of `bundle`; false when its source is down (an image
    /// cannot be pushed while the registry is stopped; git and http content is written behind
    /// the fronts, as a push to a server the agent cannot reach at the moment).
    async fn publish(&self, bundle: &mut Bundle, generation: u64) -> bool {
        let content = bundle.content(generation);
        match bundle.kind {
            Kind::Image => {
                if !self.registry_up {
                    return false;
                }
                let dir = self.work.join(format!("image-{}", bundle.name));
                std::fs::create_dir_all(&dir).expect("image dir");
                std::fs::write(dir.join("bundle.yaml"), &content).expect("bundle.yaml");
                let options = pallet::push::PushOptions {
                    plain_http: true,
                    ..Default::default()
                };
                let reference = format!("{}/{}:latest", self.registry.host, bundle.image_repo);
                if let Err(e) = pallet::push::push_dir(&reference, &dir, &options).await {
                    eprintln!("push {reference}: {e} (counted as not moved)");
                    return false;
                }
            }
            Kind::Git => {
                let repo = bundle.git.as_ref().expect("git bundle has a repo");
                repo.commit_files(
                    "main",
                    &[("bundle.yaml", content.as_bytes())],
                    &format!("generation {generation}"),
                );
            }
            Kind::Http => {
                self.fx.put_file(&bundle.http_path, content.as_bytes());
            }
        }
        bundle.generation = generation;
        true
    }

    fn source_spec(&self, bundle: &Bundle) -> serde_json::Value {
        match bundle.kind {
            Kind::Image => serde_json::json!({"kind": "image", "image": {
                "ref": format!("{}/{}:latest", self.registry.host, bundle.image_repo)}}),
            Kind::Git => serde_json::json!({"kind": "git", "git": {
                "repository": format!("{}/{}.git", self.git.url(), bundle.git.as_ref().expect("repo").name),
                "ref": {"branch": "main"}}}),
            Kind::Http => serde_json::json!({"kind": "http", "http": {
                "url": format!("{}/{}", self.http.url(), bundle.http_path)}}),
        }
    }

    fn is_up(&self, kind: Kind) -> bool {
        match kind {
            Kind::Image => self.registry_up,
            Kind::Git => self.git.is_up(),
            Kind::Http => self.http.is_up(),
        }
    }

    fn set_up(&mut self, kind: Kind, up: bool) {
        match (kind, up) {
            (Kind::Image, true) => tokio::task::block_in_place(|| self.registry.resume()),
            (Kind::Image, false) => self.registry.stop(),
            (Kind::Git, true) => self.git.resume(),
            (Kind::Git, false) => self.git.stop(),
            (Kind::Http, true) => self.http.resume(),
            (Kind::Http, false) => self.http.stop(),
        }
        if kind == Kind::Image {
            self.registry_up = up;
        }
    }
}

/// One agent process's life.
struct Incarnation {
    rss_kib: Vec<u64>,
    hwm_kib: Option<u64>,
    seconds: f64,
}

impl Incarnation {
    fn peak(&self) -> u64 {
        self.rss_kib
            .iter()
            .copied()
            .chain(self.hwm_kib)
            .max()
            .unwrap_or(0)
    }
}

/// What one checkpoint found: objects of an active revision missing from the cluster.
struct Checkpoint {
    label: String,
    lost: Vec<String>,
    not_ready: usize,
    reasons: BTreeMap<String, usize>,
}

async fn checkpoint(
    label: &str,
    bds: &Api<BundleDeployment>,
    cms: &Api<ConfigMap>,
    selector: &str,
    bundles: &[Bundle],
) -> Checkpoint {
    let live: HashSet<String> = cms
        .list(&ListParams::default().labels(&format!("{BUNDLE_LABEL}=true")))
        .await
        .expect("listing ConfigMaps")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    let list = bds
        .list(&ListParams::default().labels(selector))
        .await
        .expect("listing BundleDeployments");
    let by_name: BTreeMap<String, &BundleDeployment> = list
        .items
        .iter()
        .filter_map(|bd| bd.metadata.name.clone().map(|n| (n, bd)))
        .collect();
    let mut lost = Vec::new();
    let mut reasons = BTreeMap::new();
    let mut not_ready = 0;
    for bundle in bundles {
        let bd = by_name.get(&bundle.name);
        let status = bd.and_then(|bd| bd.status.as_ref());
        // Every revision has the same object names, and the first was installed before the soak
        // started: they must exist at every checkpoint, whatever revision is active.
        let mut expected: BTreeSet<String> = bundle.object_names().collect();
        if let Some(inventory) = status.and_then(|s| s.inventory.as_ref()) {
            expected.extend(
                inventory
                    .objects
                    .iter()
                    .filter(|o| o.kind == "ConfigMap")
                    .map(|o| o.name.clone()),
            );
        }
        for name in expected.iter().filter(|n| !live.contains(*n)) {
            let phase = status
                .and_then(|s| {
                    let active = s.active_revision?;
                    s.revisions.iter().find(|r| r.number == active)
                })
                .map(|r| format!("revision {} {:?}", r.number, r.phase))
                .unwrap_or_else(|| "no active revision".into());
            lost.push(format!("{}: ConfigMap {name} ({phase})", bundle.name));
        }
        if !bd.is_some_and(|bd| is_ready(bd)) {
            not_ready += 1;
        }
        for type_ in ["Ready", "Unpacked"] {
            if let Some(c) = status.and_then(|s| find(&s.conditions, type_)) {
                if c.status != "True" {
                    *reasons
                        .entry(format!("{type_}={} {}", c.status, c.reason))
                        .or_insert(0) += 1;
                }
            }
        }
    }
    Checkpoint {
        label: label.to_string(),
        lost,
        not_ready,
        reasons,
    }
}

/// Sums of the agent's `pallet_*_total` counters, by series, over its incarnations.
#[derive(Default)]
struct Counters(BTreeMap<String, f64>);

impl Counters {
    fn add(&mut self, text: &str) {
        for line in text.lines().filter(|l| l.starts_with("pallet_")) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            if !series.split('{').next().unwrap_or("").ends_with("_total") {
                continue;
            }
            *self.0.entry(series.to_string()).or_insert(0.0) += value.parse().unwrap_or(0.0);
        }
    }

    fn get(&self, series: &str) -> f64 {
        self.0.get(series).copied().unwrap_or(0.0)
    }

    fn matching(&self, prefix: &str) -> Vec<(String, f64)> {
        self.0
            .iter()
            .filter(|(k, v)| k.starts_with(prefix) && **v > 0.0)
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }
}

/// The agent's metrics text, or None when it does not answer within a few seconds.
async fn scrape(agent: &Agent) -> Option<String> {
    let address = agent.metrics_address()?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .ok()?;
    client
        .get(format!("http://{address}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()
}

/// "reconcile failed" lines of the agent logs, grouped by the start of their error.
fn reconcile_errors(logs: &[PathBuf], run: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for log in logs {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains("reconcile failed")) {
            let error = line.split("error=").nth(1).unwrap_or("?");
            // Group by the error's first clause, without names and numbers.
            let head: String = error
                .replace(run, "RUN")
                .split([':', '('])
                .next()
                .unwrap_or("")
                .chars()
                .map(|c| if c.is_ascii_digit() { '#' } else { c })
                .take(90)
                .collect();
            *out.entry(head.trim().to_string()).or_insert(0) += 1;
        }
    }
    out
}

/// Change-log lines (writes, and interrupted-pass markers) about the soak's ConfigMaps: their
/// `resourceVersionAfter`s, and the number of markers.
fn change_log(path: &std::path::Path, namespace: &str) -> (BTreeSet<String>, usize, usize) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let (mut versions, mut lines, mut markers) = (BTreeSet::new(), 0, 0);
    for line in text.lines() {
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if entry.get("marker").is_some() {
            markers += 1;
            continue;
        }
        let object = &entry["object"];
        if object["kind"] != "ConfigMap" || object["namespace"] != namespace {
            continue;
        }
        lines += 1;
        if let Some(rv) = entry["resourceVersionAfter"].as_str() {
            versions.insert(rv.to_string());
        }
    }
    (versions, lines, markers)
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

#[tokio::main]
async fn main() {
    let fx = Fixtures::load();
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let count = env_u64("PALLET_BENCH_SOAK_BDS", 300) as usize;
    let schedule = Schedule::for_seconds(env_u64("PALLET_BENCH_SOAK_SECONDS", 1800));
    let seed = env_u64("PALLET_BENCH_SOAK_SEED", 15);
    let mut rng = Rng(seed);

    let run = cluster::unique_name("soak");
    let selector = format!("{TEST_LABEL}={run}");
    let namespace = run.clone();
    let work = tempfile::tempdir().expect("temp dir");
    let registry = ScratchRegistry::start();
    let mut sources = Sources {
        fx,
        registry_up: true,
        git: TcpFront::start(&fx.git_plain().host, free_port_below_ephemeral()),
        http: TcpFront::start(&fx.http_plain().host, free_port_below_ephemeral()),
        registry,
        work: work.path().to_path_buf(),
        run: run.clone(),
    };

    // ---- the bundles, generation 1 ----
    eprintln!("[setup] {count} bundles, seed {seed}, run {run}");
    let kinds = [Kind::Image, Kind::Git, Kind::Http];
    let mut bundles: Vec<Bundle> = (0..count)
        .map(|i| {
            let name = format!("{run}-{i:03}");
            let kind = kinds[i % 3];
            Bundle {
                git: (kind == Kind::Git).then(|| fx.git_repo(&name)),
                image_repo: name.clone(),
                http_path: format!("{run}/{i:03}.yaml"),
                name,
                kind,
                generation: 0,
            }
        })
        .collect();
    for bundle in &mut bundles {
        assert!(
            sources.publish(bundle, 1).await,
            "first publish of {}",
            bundle.name
        );
    }

    // The API server's view of the writes: a watch on the bundles' ConfigMaps, counting every
    // resourceVersion it reports (before any BundleDeployment exists, so creations count too).
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let seen_versions: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let relists = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let watch = {
        let (cms, seen, relists) = (cms.clone(), seen_versions.clone(), relists.clone());
        let config = watcher::Config::default().labels(&format!("{BUNDLE_LABEL}=true"));
        tokio::spawn(async move {
            let mut stream = watcher(cms, config).boxed();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) => {
                        if let Some(rv) = cm.metadata.resource_version {
                            seen.lock().expect("lock").insert(rv);
                        }
                    }
                    Ok(watcher::Event::Init) => {
                        relists.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    _ => {}
                }
            }
        })
    };

    let bds_file = work.path().join("bds.yaml");
    let mut bds_yaml = String::new();
    for bundle in &bundles {
        let bd = serde_json::json!({
            "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
            "metadata": {"name": bundle.name, "labels": {TEST_LABEL: run}},
            "spec": {"installNamespace": namespace, "sources": [sources.source_spec(bundle)],
                     "format": "plain"},
        });
        bds_yaml.push_str("---\n");
        bds_yaml.push_str(&serde_json::to_string(&bd).expect("json"));
        bds_yaml.push('\n');
    }
    std::fs::write(&bds_file, bds_yaml).expect("bds.yaml");

    // ---- the agent ----
    let registry_host = sources.registry.host.clone();
    let agent_args = [
        "--requeue-seconds",
        REQUEUE_SECONDS,
        "--default-poll-interval",
        POLL_INTERVAL,
        "--plain-http-registry",
        registry_host.as_str(),
    ];
    // Every incarnation runs one copy of the binary cargo built for this run: in a target dir
    // shared by several checkouts, target/release/pallet is replaced by their builds.
    let built = PathBuf::from(env!("CARGO_BIN_EXE_pallet"));
    let pinned = work.path().join("pallet");
    std::fs::copy(&built, &pinned).expect("copying the pallet binary");
    let binary = std::fs::read(&pinned).expect("reading the pallet binary");
    let binary_digest = support::sha256_digest(&binary);
    drop(binary);
    let pinned_text = pinned.to_string_lossy().into_owned();
    // info: the debug log of 300 bundles over 30 minutes would be large; warnings carry the errors.
    let agent_env = [
        ("RUST_LOG", "info"),
        ("PALLET_TEST_AGENT_BIN", pinned_text.as_str()),
    ];
    let mut agent = Agent::start_selecting_env(&selector, &run, &agent_args, &agent_env);
    let mut logs = vec![agent.log.clone()];
    let bds: Api<BundleDeployment> = Api::all(client.clone());

    eprintln!("[setup] applying {count} BundleDeployments, waiting until all are Ready ...");
    let start = Instant::now();
    kubectl(&["apply", "-f", bds_file.to_str().expect("utf-8 path")]);
    cluster::poll_until("every BundleDeployment Ready", INSTALL_DEADLINE, || async {
        let list = bds
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| e.to_string())?;
        let ready = list.items.iter().filter(|bd| is_ready(bd)).count();
        if ready == count {
            Ok(())
        } else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Err(format!("{ready}/{count} Ready"))
        }
    })
    .await;
    let install_time = start.elapsed();
    eprintln!("[setup] all Ready after {install_time:?}");

    // ---- the soak ----
    let mut incarnations = vec![Incarnation {
        rss_kib: Vec::new(),
        hwm_kib: None,
        seconds: 0.0,
    }];
    let mut incarnation_start = Instant::now();
    let mut counters = Counters::default();
    let mut checkpoints = Vec::new();
    let mut outages: BTreeMap<Kind, (usize, Duration)> = BTreeMap::new();
    let mut down_since: BTreeMap<Kind, Instant> = BTreeMap::new();
    let (mut moves, mut moves_skipped) = (0usize, 0usize);
    let mut kill_log = Vec::new();

    let soak_start = Instant::now();
    let end = soak_start + Duration::from_secs(schedule.seconds);
    let mut next_kill = soak_start + rng.between(schedule.kill.0, schedule.kill.1);
    let mut next_move = soak_start + schedule.move_every;
    let mut next_rss = soak_start;
    let mut next_flap: BTreeMap<Kind, Instant> = kinds
        .iter()
        .map(|k| (*k, soak_start + rng.between(schedule.up.0, schedule.up.1)))
        .collect();
    let mut generation = 1u64;
    eprintln!("[soak] {} s ...", schedule.seconds);
    while Instant::now() < end {
        let now = Instant::now();
        if now >= next_rss {
            if let Some(kib) = proc_kib(agent.pid(), "VmRSS:") {
                incarnations.last_mut().expect("one").rss_kib.push(kib);
            }
            next_rss += RSS_EVERY;
        }
        for kind in kinds {
            if now >= next_flap[&kind] {
                let up = !sources.is_up(kind);
                sources.set_up(kind, up);
                let stay = if up {
                    let since = down_since.remove(&kind).unwrap_or(now);
                    outages.entry(kind).or_default().1 += since.elapsed();
                    rng.between(schedule.up.0, schedule.up.1)
                } else {
                    down_since.insert(kind, now);
                    outages.entry(kind).or_default().0 += 1;
                    rng.between(schedule.down.0, schedule.down.1)
                };
                eprintln!(
                    "[soak] t={:>5.0}s {} source {} for {stay:?}",
                    soak_start.elapsed().as_secs_f64(),
                    kind.name(),
                    if up { "up" } else { "DOWN" }
                );
                next_flap.insert(kind, Instant::now() + stay);
            }
        }
        if now >= next_move {
            generation += 1;
            let batch = (count / 10).max(1);
            for _ in 0..batch {
                let i = (rng.next() % count as u64) as usize;
                if sources.publish(&mut bundles[i], generation).await {
                    moves += 1;
                } else {
                    moves_skipped += 1;
                }
            }
            next_move += schedule.move_every;
        }
        if now >= next_kill {
            let at = soak_start.elapsed();
            if let Some(text) = scrape(&agent).await {
                counters.add(&text);
            }
            let inc = incarnations.last_mut().expect("one");
            inc.hwm_kib = proc_kib(agent.pid(), "VmHWM:");
            inc.seconds = incarnation_start.elapsed().as_secs_f64();
            agent.kill();
            let found = checkpoint(
                &format!("kill {} at {:.0} s", kill_log.len() + 1, at.as_secs_f64()),
                &bds,
                &cms,
                &selector,
                &bundles,
            )
            .await;
            eprintln!(
                "[soak] t={:>5.0}s SIGKILL agent (incarnation {}, peak RSS {}); lost objects {}, not Ready {}",
                at.as_secs_f64(),
                incarnations.len(),
                mib(incarnations.last().expect("one").peak()),
                found.lost.len(),
                found.not_ready
            );
            checkpoints.push(found);
            kill_log.push(at);
            agent = agent.restart_with_env(&agent_env);
            logs.push(agent.log.clone());
            incarnations.push(Incarnation {
                rss_kib: Vec::new(),
                hwm_kib: None,
                seconds: 0.0,
            });
            incarnation_start = Instant::now();
            next_kill = Instant::now() + rng.between(schedule.kill.0, schedule.kill.1);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let soak_time = soak_start.elapsed();

    // ---- the end: sources up, agent running; every bundle must converge ----
    for kind in kinds {
        if !sources.is_up(kind) {
            sources.set_up(kind, true);
            let since = down_since.remove(&kind).unwrap_or_else(Instant::now);
            outages.entry(kind).or_default().1 += since.elapsed();
        }
    }
    eprintln!("[end] sources up; waiting for every bundle at its newest content ...");
    let converge_start = Instant::now();
    let mut stuck: Vec<String>;
    loop {
        let live: BTreeMap<String, String> = cms
            .list(&ListParams::default().labels(&format!("{BUNDLE_LABEL}=true")))
            .await
            .expect("listing ConfigMaps")
            .items
            .into_iter()
            .filter_map(|c| {
                let generation = c.data.as_ref()?.get("generation")?.clone();
                Some((c.metadata.name?, generation))
            })
            .collect();
        let list = bds
            .list(&ListParams::default().labels(&selector))
            .await
            .expect("listing BundleDeployments");
        let ready: HashSet<String> = list
            .items
            .iter()
            .filter(|bd| is_ready(bd))
            .filter_map(|bd| bd.metadata.name.clone())
            .collect();
        stuck = bundles
            .iter()
            .filter(|b| {
                let newest = b.generation.to_string();
                !ready.contains(&b.name)
                    || b.object_names()
                        .any(|n| live.get(&n).map(String::as_str) != Some(newest.as_str()))
            })
            .map(|b| b.name.clone())
            .collect();
        if stuck.is_empty() || converge_start.elapsed() > CONVERGE_DEADLINE {
            break;
        }
        if let Some(kib) = proc_kib(agent.pid(), "VmRSS:") {
            if Instant::now() >= next_rss {
                incarnations.last_mut().expect("one").rss_kib.push(kib);
                next_rss = Instant::now() + RSS_EVERY;
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let converge_time = converge_start.elapsed();
    let final_check = checkpoint("end", &bds, &cms, &selector, &bundles).await;
    if let Some(text) = scrape(&agent).await {
        counters.add(&text);
    }
    {
        let inc = incarnations.last_mut().expect("one");
        inc.hwm_kib = proc_kib(agent.pid(), "VmHWM:");
        if let Some(kib) = proc_kib(agent.pid(), "VmRSS:") {
            inc.rss_kib.push(kib);
        }
        inc.seconds = incarnation_start.elapsed().as_secs_f64();
    }
    let stuck_detail: Vec<String> = {
        let list = bds
            .list(&ListParams::default().labels(&selector))
            .await
            .expect("listing BundleDeployments");
        list.items
            .iter()
            .filter(|bd| bd.metadata.name.as_ref().is_some_and(|n| stuck.contains(n)))
            .take(5)
            .map(|bd| {
                let conditions = bd
                    .status
                    .as_ref()
                    .map(|s| {
                        s.conditions
                            .iter()
                            .map(|c| {
                                format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message)
                            })
                            .collect::<Vec<_>>()
                            .join("; ")
                    })
                    .unwrap_or_default();
                format!(
                    "{}: {conditions}",
                    bd.metadata.name.clone().unwrap_or_default()
                )
            })
            .collect()
    };
    let revisions_in_status: i64 = bds
        .list(&ListParams::default().labels(&selector))
        .await
        .expect("listing BundleDeployments")
        .items
        .iter()
        .filter_map(|bd| bd.status.as_ref()?.revisions.iter().map(|r| r.number).max())
        .sum();
    // The watch may trail the API server by a moment.
    tokio::time::sleep(Duration::from_secs(2)).await;
    watch.abort();
    let seen = seen_versions.lock().expect("lock").clone();
    let (logged, log_lines, markers) = change_log(agent.change_log_path(), &namespace);
    let unlogged = seen.difference(&logged).count();
    let logged_unseen = logged.difference(&seen).count();
    let errors = reconcile_errors(&logs, &run);

    // ---- cleanup (the agent must run: the BDs carry its finalizer) ----
    eprintln!("[cleanup] ...");
    kubectl(&[
        "delete",
        "bundledeployments",
        "-l",
        &selector,
        "--wait=false",
    ]);
    let cleanup = cluster::poll_until(
        "the soak's BundleDeployments gone",
        INSTALL_DEADLINE,
        || async {
            let left = bds
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| e.to_string())?
                .items
                .len();
            if left == 0 {
                Ok(())
            } else {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Err(format!("{left} left"))
            }
        },
    );
    cleanup.await;
    drop(agent);
    kubectl(&["delete", "namespace", &namespace, "--wait=false"]);
    let _ = std::fs::remove_dir_all(fx.files_root().join(&sources.run));
    for bundle in &bundles {
        if let Some(repo) = &bundle.git {
            let _ = std::fs::remove_dir_all(&repo.path);
        }
    }

    // ---- report ----
    let lost_total: usize =
        checkpoints.iter().map(|c| c.lost.len()).sum::<usize>() + final_check.lost.len();
    println!();
    println!("soak  run={run}  seed={seed}");
    println!("{}", machine());
    println!(
        "agent: release build, defaults (--concurrency auto, --fetch-concurrency 16), --requeue-seconds {REQUEUE_SECONDS}, --default-poll-interval {POLL_INTERVAL}"
    );
    println!(
        "agent binary: one copy of {} for every incarnation, {}",
        built.display(),
        &binary_digest[..19]
    );
    println!(
        "{count} BundleDeployments x {OBJECTS_PER_BUNDLE} ConfigMaps, floating refs: {} image tags (own docker-registry), {} git branches, {} http URLs without sha256",
        bundles.iter().filter(|b| b.kind == Kind::Image).count(),
        bundles.iter().filter(|b| b.kind == Kind::Git).count(),
        bundles.iter().filter(|b| b.kind == Kind::Http).count(),
    );
    println!(
        "schedule: {} s; every {:?} a tenth of the bundles get new content; SIGKILL every {:?}..{:?}; sources up {:?}..{:?}, down {:?}..{:?}",
        schedule.seconds,
        schedule.move_every,
        schedule.kill.0,
        schedule.kill.1,
        schedule.up.0,
        schedule.up.1,
        schedule.down.0,
        schedule.down.1
    );
    println!(
        "outages: image = the soak's docker-registry stopped; git, http = the soak's TCP front to the fixture server closed (connections cut)"
    );
    println!();
    println!(
        "first install: all {count} Ready after {:.1} s",
        install_time.as_secs_f64()
    );
    println!(
        "soak window {:.0} s: {} kills at {}",
        soak_time.as_secs_f64(),
        kill_log.len(),
        kill_log
            .iter()
            .map(|t| format!("{:.0}s", t.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "content moves: {moves} published (last generation {generation}), {moves_skipped} skipped (registry down)"
    );
    for kind in kinds {
        let (n, down) = outages.get(&kind).copied().unwrap_or_default();
        println!(
            "outages of the {} source: {n}, {:.0} s down in all",
            kind.name(),
            down.as_secs_f64()
        );
    }
    println!();
    println!("LOST OBJECTS (active revision's object missing; at each kill and at the end): {lost_total}");
    for c in checkpoints.iter().chain(std::iter::once(&final_check)) {
        println!(
            "   {:<22} lost {:>3}  not Ready {:>4}  {}",
            c.label,
            c.lost.len(),
            c.not_ready,
            c.reasons
                .iter()
                .map(|(r, n)| format!("{r} x{n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        for l in c.lost.iter().take(5) {
            println!("      {l}");
        }
    }
    println!(
        "STUCK BDs (not Ready at the newest content {:.0} s after the end): {} (converged after {:.1} s)",
        CONVERGE_DEADLINE.as_secs_f64(),
        stuck.len(),
        converge_time.as_secs_f64()
    );
    for s in &stuck_detail {
        println!("   {s}");
    }
    println!();
    println!(
        "agent RSS (sampled every {} s; peak includes VmHWM at the kill):",
        RSS_EVERY.as_secs()
    );
    println!(
        "   {:<12} {:>9} {:>12} {:>12} {:>12} {:>8}",
        "incarnation", "lived s", "first", "peak", "last", "samples"
    );
    for (i, inc) in incarnations.iter().enumerate() {
        println!(
            "   {:<12} {:>9.0} {:>12} {:>12} {:>12} {:>8}",
            i + 1,
            inc.seconds,
            inc.rss_kib.first().map_or("-".into(), |k| mib(*k)),
            mib(inc.peak()),
            inc.rss_kib.last().map_or("-".into(), |k| mib(*k)),
            inc.rss_kib.len()
        );
    }
    let overall_peak = incarnations
        .iter()
        .map(Incarnation::peak)
        .max()
        .unwrap_or(0);
    let first_peak = incarnations.first().map_or(0, Incarnation::peak);
    let last_peak = incarnations.last().map_or(0, Incarnation::peak);
    println!(
        "   overall peak {}; first incarnation's peak {} vs last's {} ({:+.1}%)",
        mib(overall_peak),
        mib(first_peak),
        mib(last_peak),
        if first_peak > 0 {
            (last_peak as f64 / first_peak as f64 - 1.0) * 100.0
        } else {
            0.0
        }
    );
    println!();
    println!("agent counters, summed over incarnations (scraped before each kill and at the end; a kill loses the last moments):");
    println!(
        "   revisions created {} (metric); newest revision numbers in status sum to {} ({} first revisions)",
        counters.get("pallet_revisions_created_total"),
        revisions_in_status,
        count
    );
    for prefix in [
        "pallet_reconciles_total",
        "pallet_fetches_total",
        "pallet_applied_objects_total",
        "pallet_pruned_objects_total",
        "pallet_drift_corrections_total",
        "pallet_rollbacks_total",
        "pallet_renders_total",
    ] {
        let series = counters.matching(prefix);
        if !series.is_empty() {
            println!(
                "   {}",
                series
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    println!(
        "reconcile errors by reason (\"reconcile failed\" lines of {} agent logs; the metric has no reason label): {}",
        logs.len(),
        errors.values().sum::<usize>()
    );
    let mut by_count: Vec<(&String, &usize)> = errors.iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(a.1));
    for (reason, n) in by_count.into_iter().take(12) {
        println!("   {n:>6}  {reason}");
    }
    println!();
    println!(
        "change log vs writes: {log_lines} change-log lines for the soak's ConfigMaps, {} ConfigMap versions the API server reported (a watch; {} relists), {unlogged} written without a line, {logged_unseen} lines for versions the watch did not see; {markers} interrupted-pass markers",
        seen.len(),
        relists.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// kubectl against the shared local control plane.
fn kubectl(args: &[&str]) -> String {
    kubectl_with(&cluster::kubeconfig_path(), args)
}
