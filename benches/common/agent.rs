//! A `pallet agent` process started by a benchmark against a control plane of its own (the scale
//! and bundles benchmarks).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use super::AgentProc;

/// A `pallet agent` with its metrics address.
pub struct Agent {
    /// The process, its log and change log.
    pub proc: AgentProc,
    /// Its /metrics URL.
    pub metrics_url: String,
}

impl Agent {
    /// Starts the agent binary `bin` authenticating as `user` (a kubeconfig from
    /// the control plane script's `user` command).
    pub async fn start(
        bin: &Path,
        user: &Path,
        work: &Path,
        name: &str,
        selector: &str,
        registry: &str,
    ) -> Agent {
        Agent::start_with_args(bin, user, work, name, selector, registry, &[]).await
    }

    /// [`Agent::start`] with `extra` arguments to `pallet agent`. A second agent of the same
    /// `name` (a restart) shares its cache directory, change log and log (appended).
    pub async fn start_with_args(
        bin: &Path,
        user: &Path,
        work: &Path,
        name: &str,
        selector: &str,
        registry: &str,
        extra: &[String],
    ) -> Agent {
        let log = work.join(format!("{name}.log"));
        let changes = work.join(format!("{name}-changes.jsonl"));
        let port = super::free_port();
        // PALLET_BENCH_AGENT_WRAP (e.g. `heaptrack -o /tmp/agent`) runs the agent under a
        // profiler; its figures of time and RSS are then the profiler's, not the agent's.
        let wrap = std::env::var("PALLET_BENCH_AGENT_WRAP").unwrap_or_default();
        let mut command = match wrap.split_whitespace().collect::<Vec<_>>().split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(bin);
                command
            }
            None => Command::new(bin),
        };
        let child = command
            .args(["agent", "--namespace", "pallet-system"])
            .arg("--kubeconfig")
            .arg(user)
            .arg("--cache-dir")
            .arg(work.join(format!("{name}-cache")))
            .arg("--change-log")
            .arg(&changes)
            .arg("--selector")
            .arg(selector)
            .args(["--plain-http-registry", registry])
            .arg("--allow-loopback-egress")
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .expect("agent log"),
            )
            .spawn()
            .expect("starting the pallet agent");
        let agent = Agent {
            proc: AgentProc {
                child,
                log,
                changes,
            },
            metrics_url: format!("http://127.0.0.1:{port}/metrics"),
        };
        super::wait_agent_ready(port).await;
        agent
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.proc.child.id()
    }

    /// Every sample of its /metrics, by `name{labels}`.
    pub async fn metrics(&self) -> BTreeMap<String, f64> {
        super::scrape(&self.metrics_url).await
    }
}
