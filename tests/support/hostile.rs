//! A harness for hostile content: a leader-elected agent on the local control plane with a
//! healthy neighbour BundleDeployment beside it, and a hostile case run against it with every
//! property the agent must keep measured and asserted:
//! - the BundleDeployment gets a clear condition (reason and message parts) naming what was
//!   refused, and its active revision stays applied;
//! - the agent process never restarts (same PID, still running);
//! - its peak RSS, with its render children, stays under the Deployment's memory limit
//!   (sampled from /proc while the case runs, and printed);
//! - the leader keeps its Lease (same holder, renewals go on);
//! - the neighbour keeps reconciling: a change to it is applied within seconds while the
//!   hostile bundle is being handled (the latency is printed), and its other objects are
//!   untouched;
//! - the refusal is remembered: no render again while the inputs are unchanged.
//!
//! A case is any BundleDeployment spec that first deploys [`benign_files`] and then the hostile
//! content, from a git repository of the fixture server ([`git_case`]) or any other source the
//! case builds. Used with `#[path = "support/hostile.rs"] mod hostile;` next to `mod agent;`,
//! `mod cluster;` and `mod support;`.

#![allow(dead_code)] // each test binary uses a different part of this module

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::Client;
use pallet::api::conditions::find;
use pallet::api::BundleDeployment;
use serde_json::{json, Value};

use crate::agent::{self, Agent};
use crate::cluster;
use crate::support::{self, GitRepo};

/// The agent's memory limit in deploy/agent/deployment.yaml (`1Gi`).
pub fn memory_limit_bytes() -> u64 {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/agent/deployment.yaml"),
    )
    .expect("deploy/agent/deployment.yaml");
    let limit = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("limits:"))
        .find_map(|l| l.trim().strip_prefix("memory:"))
        .expect("a memory limit in deploy/agent/deployment.yaml")
        .trim()
        .to_string();
    let (number, unit) = limit.split_at(limit.find(|c: char| !c.is_ascii_digit()).unwrap());
    let number: u64 = number.parse().unwrap();
    number
        * match unit {
            "Gi" => 1 << 30,
            "Mi" => 1 << 20,
            other => panic!("unexpected unit {other:?} in the memory limit {limit}"),
        }
}

/// What a hostile case must end in.
pub struct Expected {
    /// The Ready condition's reason.
    pub reason: &'static str,
    /// Parts the Ready condition's message must contain (the budget, the file, the value).
    pub message_parts: Vec<String>,
}

/// A hostile case: a BundleDeployment spec whose content is benign until `make_hostile` runs.
pub struct Case {
    /// The case's name (printed with its figures).
    pub name: String,
    /// The BundleDeployment's spec.
    pub spec: Value,
    /// Turns the source's content hostile (a new commit, a new image, ...).
    pub make_hostile: Box<dyn FnOnce() + Send>,
    /// What the BundleDeployment must show.
    pub expected: Expected,
}

/// Figures of one case.
#[derive(Debug, Clone)]
pub struct Figures {
    /// Highest RSS of the agent and its children together while the case ran.
    pub peak_rss_bytes: u64,
    /// From the neighbour's change to its object holding the new value.
    pub neighbour_latency: Duration,
    /// From the hostile content to its condition.
    pub refused_after: Duration,
}

/// A chart that renders one ConfigMap `<release>-ok`: what a case deploys before its hostile
/// content.
pub fn benign_files() -> Vec<(String, Vec<u8>)> {
    chart_files(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-ok\ndata:\n  a: b\n",
        "",
    )
}

/// A chart whose only template is `template` and whose values.yaml is `values`.
pub fn chart_files(template: &str, values: &str) -> Vec<(String, Vec<u8>)> {
    vec![
        (
            "Chart.yaml".into(),
            b"apiVersion: v2\nname: hostile\nversion: 1.0.0\n".to_vec(),
        ),
        ("values.yaml".into(), values.as_bytes().to_vec()),
        ("templates/cm.yaml".into(), template.as_bytes().to_vec()),
    ]
}

/// A helm case served from a new git repository: benign first, then `hostile`.
pub fn git_case(
    name: &str,
    namespace: &str,
    hostile: Vec<(String, Vec<u8>)>,
    expected: Expected,
) -> Case {
    let fixtures = support::Fixtures::load();
    let repo = fixtures.git_repo(&cluster::unique_name(name));
    commit(&repo, &benign_files(), "benign");
    let spec = json!({
        "installNamespace": namespace,
        "sources": [{"kind": "git", "git": {
            "repository": repo.url(fixtures.git_plain()), "ref": {"branch": "main"}}}],
        "format": "helm",
    });
    Case {
        name: name.to_string(),
        spec,
        make_hostile: Box::new(move || {
            commit(&repo, &hostile, "hostile");
        }),
        expected,
    }
}

fn commit(repo: &GitRepo, files: &[(String, Vec<u8>)], message: &str) -> String {
    let files: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_slice()))
        .collect();
    repo.commit_files("main", &files, message)
}

/// The agent under test, its Lease and its healthy neighbour.
pub struct Hostile {
    /// The admin client.
    pub client: Client,
    /// The agent (leader-elected, confined to this harness's label).
    pub agent: Agent,
    /// The label value of this harness's BundleDeployments.
    pub label: String,
    /// The namespace the bundles install into.
    pub namespace: String,
    lease: (String, String),
    neighbour: String,
    neighbour_repo: GitRepo,
    neighbour_version: u32,
}

fn neighbour_files(version: u32) -> Vec<(String, Vec<u8>)> {
    let text = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: watched\ndata:\n  value: \"{version}\"\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: still\ndata:\n  value: \"0\"\n"
    );
    vec![("manifests/app.yaml".to_string(), text.into_bytes())]
}

impl Hostile {
    /// Starts a leader-elected agent for `test` (with `extra_args`) and a healthy neighbour,
    /// and waits until it leads and the neighbour is Ready.
    pub async fn start(test: &str, extra_args: &[&str]) -> Hostile {
        let client = cluster::client().await;
        cluster::install_crd(&client).await;
        // The agent holds its Lease in the agent's namespace: made when missing.
        cluster::ensure_agent_namespace(&client).await;
        let label = cluster::unique_name(test);
        let lease_name = format!("{label}-lease");
        let mut args = vec![
            "--leader-elect",
            "--lease-name",
            lease_name.as_str(),
            "--lease-namespace",
            "pallet-system",
        ];
        args.extend_from_slice(extra_args);
        // PALLET_TEST_AGENT_BIN runs another build of the agent (figures of an earlier one).
        let bin = std::env::var("PALLET_TEST_AGENT_BIN").ok();
        let env: Vec<(&str, &str)> = bin
            .as_deref()
            .map(|bin| ("PALLET_TEST_AGENT_BIN", bin))
            .into_iter()
            .collect();
        let agent = Agent::start_with_env(&label, &args, &env);
        let fixtures = support::Fixtures::load();
        let neighbour = format!("{label}-neighbour");
        let neighbour_repo = fixtures.git_repo(&neighbour);
        commit(&neighbour_repo, &neighbour_files(1), "v1");
        agent::apply_bd_labelled(
            &client,
            &neighbour,
            &label,
            json!({
                "installNamespace": label,
                "sources": [{"kind": "git", "git": {
                    "repository": neighbour_repo.url(fixtures.git_plain()),
                    "ref": {"branch": "main"}}}],
                "format": "plain",
            }),
        )
        .await;
        agent::wait_condition(&client, &agent, &neighbour, "Ready", "True", "2 objects").await;
        let harness = Hostile {
            client,
            agent,
            namespace: label.clone(),
            label,
            lease: ("pallet-system".into(), lease_name),
            neighbour,
            neighbour_repo,
            neighbour_version: 1,
        };
        harness.lease().await;
        harness
    }

    /// The Lease's holder and last renewal.
    async fn lease(&self) -> (String, String) {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.lease.0);
        let lease = leases.get(&self.lease.1).await.expect("the agent's Lease");
        let spec = lease.spec.unwrap_or_default();
        (
            spec.holder_identity.unwrap_or_default(),
            spec.renew_time.map(|t| t.0.to_string()).unwrap_or_default(),
        )
    }

    /// The neighbour's objects' resourceVersions (`watched`, `still`).
    async fn neighbour_objects(&self) -> (String, String) {
        let cms: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        let rv = |cm: ConfigMap| cm.metadata.resource_version.unwrap_or_default();
        (
            rv(cms.get("watched").await.unwrap()),
            rv(cms.get("still").await.unwrap()),
        )
    }

    /// Runs `case` and asserts every property the agent must keep; prints and returns the
    /// case's figures.
    pub async fn run(&mut self, case: Case) -> Figures {
        self.run_watching(case, "Ready").await
    }

    /// [`Hostile::run`], the refusal expected on condition `condition` (a transient one, such
    /// as a function not answering, leaves Ready to the healthy active revision).
    pub async fn run_watching(&mut self, case: Case, condition: &str) -> Figures {
        self.run_case(case, condition, false).await
    }

    /// [`Hostile::run_watching`] for a refusal that is tried again by design (a function that
    /// did not answer within its timeout is `FunctionUnavailable`, retried with backoff): the
    /// case may render again while its inputs are unchanged.
    pub async fn run_retried(&mut self, case: Case, condition: &str) -> Figures {
        self.run_case(case, condition, true).await
    }

    async fn run_case(&mut self, case: Case, condition: &str, retried: bool) -> Figures {
        let name = format!("{}-{}", self.label, case.name);
        agent::apply_bd_labelled(&self.client, &name, &self.label, case.spec.clone()).await;
        let bd = agent::wait_condition(
            &self.client,
            &self.agent,
            &name,
            "Ready",
            "True",
            "1 object",
        )
        .await;
        let active = bd.status.as_ref().and_then(|s| s.active_revision);
        assert!(active.is_some(), "{name}: no active revision");
        let pid = self.agent.pid();
        let (holder, renewed) = self.lease().await;
        let (_, still) = self.neighbour_objects().await;

        let sampler = RssSampler::start(pid);
        let hostile_at = Instant::now();
        (case.make_hostile)();
        // The neighbour changes while the hostile content is being fetched and rendered.
        let neighbour_latency = self.change_neighbour().await;
        let bd = self.wait_refused(&name, condition, &case.expected).await;
        let refused_after = hostile_at.elapsed();
        self.agent.assert_no_internal_paths(&bd);
        let peak_rss_bytes = sampler.stop();

        let status = bd.status.clone().unwrap_or_default();
        assert_eq!(
            status.active_revision, active,
            "{name}: the active revision stays"
        );
        let cms: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        assert!(
            cms.get_opt(&format!("{name}-ok")).await.unwrap().is_some(),
            "{name}: the active revision's object stays applied"
        );
        self.assert_agent_kept(&name, pid, peak_rss_bytes).await;
        let (_, still_now) = self.neighbour_objects().await;
        assert_eq!(
            still_now, still,
            "{name}: the neighbour's other object is untouched"
        );
        if !retried {
            self.assert_no_render_loop(&name).await;
        }
        self.assert_lease_kept(&name, &holder, &renewed).await;
        let figures = Figures {
            peak_rss_bytes,
            neighbour_latency,
            refused_after,
        };
        println!(
            "hostile case {}: refused after {:.1}s; peak RSS of the agent and its render \
             children {:.1} MiB (limit {} MiB); neighbour change applied in {:.2}s; lease held by \
             {holder}",
            case.name,
            refused_after.as_secs_f64(),
            peak_rss_bytes as f64 / f64::from(1 << 20),
            memory_limit_bytes() >> 20,
            neighbour_latency.as_secs_f64(),
        );
        figures
    }

    /// The agent process `pid` still runs, never restarted, and its peak RSS stayed under the
    /// Deployment's memory limit.
    async fn assert_agent_kept(&self, name: &str, pid: u32, peak_rss_bytes: u64) {
        assert!(
            process_running(pid),
            "{name}: the agent process {pid} ended; log:\n{}",
            self.agent.log_tail()
        );
        assert_eq!(self.agent.pid(), pid, "{name}: the agent never restarts");
        let limit = memory_limit_bytes();
        assert!(
            peak_rss_bytes < limit,
            "{name}: peak RSS {peak_rss_bytes} bytes, over the Deployment's limit of {limit}"
        );
    }

    /// Runs `action` (a flood, a burst of requests: anything but a BundleDeployment) while the
    /// neighbour changes, the change announced by `announce` (given the neighbour's repository
    /// URL once the change is committed); asserts what [`Hostile::run`] asserts of the agent,
    /// prints and returns the figures and what `action` returned.
    pub async fn watch<T, A, N>(
        &mut self,
        name: &str,
        action: A,
        announce: impl FnOnce(String) -> N,
    ) -> (T, Figures)
    where
        A: std::future::Future<Output = T>,
        N: std::future::Future<Output = ()>,
    {
        let pid = self.agent.pid();
        let (holder, renewed) = self.lease().await;
        let sampler = RssSampler::start(pid);
        let started = Instant::now();
        let (result, neighbour_latency) =
            tokio::join!(action, self.change_neighbour_then(announce));
        let refused_after = started.elapsed();
        let peak_rss_bytes = sampler.stop();
        self.assert_agent_kept(name, pid, peak_rss_bytes).await;
        self.assert_lease_kept(name, &holder, &renewed).await;
        println!(
            "hostile case {name}: took {:.1}s; peak RSS of the agent and its render children \
             {:.1} MiB (limit {} MiB); neighbour change applied in {:.2}s; lease held by {holder}",
            refused_after.as_secs_f64(),
            peak_rss_bytes as f64 / f64::from(1 << 20),
            memory_limit_bytes() >> 20,
            neighbour_latency.as_secs_f64(),
        );
        let figures = Figures {
            peak_rss_bytes,
            neighbour_latency,
            refused_after,
        };
        (result, figures)
    }

    /// The Lease is still `holder`'s, renewed since `renewed` (renewals come every third of
    /// its 15 s duration).
    async fn assert_lease_kept(&self, name: &str, holder: &str, renewed: &str) {
        cluster::poll_until(
            &format!("{name}: the Lease renewed by {holder}"),
            Duration::from_secs(15),
            || async {
                let (now_holder, now_renewed) = self.lease().await;
                assert_eq!(now_holder, holder, "{name}: the leader keeps its Lease");
                if now_renewed != renewed {
                    Ok(())
                } else {
                    Err(format!("last renewal {now_renewed}"))
                }
            },
        )
        .await;
    }

    /// Commits a new version of the neighbour and waits until it is applied; how long it took.
    async fn change_neighbour(&mut self) -> Duration {
        self.change_neighbour_then(|_| async {}).await
    }

    /// Commits a new version of the neighbour, runs `announce` with its repository's URL, and
    /// waits until the new version is applied; how long it took.
    async fn change_neighbour_then<N: std::future::Future<Output = ()>>(
        &mut self,
        announce: impl FnOnce(String) -> N,
    ) -> Duration {
        self.neighbour_version += 1;
        let version = self.neighbour_version;
        let start = Instant::now();
        commit(&self.neighbour_repo, &neighbour_files(version), "next");
        announce(
            self.neighbour_repo
                .url(support::Fixtures::load().git_plain()),
        )
        .await;
        let cms: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        agent::wait_value(&cms, "watched", &version.to_string()).await;
        let latency = start.elapsed();
        assert!(
            latency < Duration::from_secs(30),
            "the neighbour's change took {latency:?}"
        );
        latency
    }

    /// Waits until `name`'s `condition` is False with the expected reason and message.
    async fn wait_refused(
        &self,
        name: &str,
        condition: &str,
        expected: &Expected,
    ) -> BundleDeployment {
        let api: Api<BundleDeployment> = Api::all(self.client.clone());
        cluster::poll_until(
            &format!("{name}: {condition}=False {}", expected.reason),
            Duration::from_secs(120),
            || {
                let api = api.clone();
                let name = name.to_string();
                async move {
                    let bd = api.get(&name).await.map_err(|e| e.to_string())?;
                    let conditions = bd
                        .status
                        .as_ref()
                        .map(|s| s.conditions.clone())
                        .unwrap_or_default();
                    match find(&conditions, condition) {
                        Some(c)
                            if c.status == "False"
                                && c.reason == expected.reason
                                && expected
                                    .message_parts
                                    .iter()
                                    .all(|p| c.message.contains(p.as_str())) =>
                        {
                            Ok(bd)
                        }
                        other => Err(format!("{condition}: {other:?}")),
                    }
                }
            },
        )
        .await
    }

    /// The refusal is remembered: over several requeues no render happens while the inputs are
    /// unchanged.
    async fn assert_no_render_loop(&self, name: &str) {
        let before = renders(&self.agent.metrics().await);
        // Three requeue periods of the test agents (2 s): a refusal not remembered would be
        // rendered again in each.
        tokio::time::sleep(Duration::from_secs(6)).await;
        let after = renders(&self.agent.metrics().await);
        assert_eq!(
            before, after,
            "{name}: rendered again with unchanged inputs"
        );
    }
}

fn renders(metrics: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("pallet_renders_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Whether process `pid` exists and has not ended (a zombie has).
pub fn process_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(|r| r.trim_start().to_string()))
        .is_some_and(|rest| !rest.starts_with('Z'))
}

/// RSS of `pid` and of its children (render sandboxes), in bytes.
pub fn rss_with_children(pid: u32) -> u64 {
    let mut total = rss(pid);
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return total;
    };
    for entry in entries.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if parent_of(child) == Some(pid) {
            total += rss(child);
        }
    }
    total
}

fn rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Samples [`rss_with_children`] every 20 ms on a thread until stopped; the peak. Dropped
/// without being stopped (a case that failed), it prints the peak it saw.
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl RssSampler {
    /// Starts sampling `pid`.
    pub fn start(pid: u32) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak = 0;
            while !flag.load(Ordering::Relaxed) {
                peak = peak.max(rss_with_children(pid));
                std::thread::sleep(Duration::from_millis(20));
            }
            peak.max(rss_with_children(pid))
        });
        RssSampler {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops sampling; the peak seen.
    pub fn stop(mut self) -> u64 {
        self.finish()
    }

    fn finish(&mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .map_or(0, |thread| thread.join().unwrap_or(0))
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let peak = self.finish();
            eprintln!(
                "peak RSS of the agent and its render children until the case failed: {:.1} MiB",
                peak as f64 / f64::from(1 << 20)
            );
        }
    }
}
