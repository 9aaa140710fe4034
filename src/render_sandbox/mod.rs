//! Renders run in a child process: the agent's own binary, started with a hidden subcommand
//! ([`child`]), the request on its standard input and the result on its standard output.
//!
//! Bundles come from third parties. The renderers have budgets of their own (see
//! `pallet_formats::budget`), but what slips past them — a stack overflow, an allocation that
//! fails, a loop the budgets do not see — must end a render, not the agent: in a child, it ends
//! the child only. The child limits itself before it reads anything (memory, CPU time, no core
//! dumps); the parent, on the async runtime without blocking it, bounds the wall-clock time
//! (the child is killed at the deadline), the bytes it reads back, and how many renders run at
//! once, so that the budgets times the concurrency fit the agent's memory limit. Every way the
//! child can end becomes a clear error ([`outcome`]).

pub mod child;
pub mod exec;
mod outcome;
mod wire;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use pallet_formats::processors::NamedProcessor;
use pallet_formats::{Format, RenderConfig, Rendered};

use crate::reconcile::render::{RenderStep, Resume};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub use outcome::SandboxError;
pub use wire::RenderRequest;

/// The hidden subcommand the child runs.
pub const CHILD_COMMAND: &str = "render-sandbox";

/// Limits of every sandboxed render.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxLimits {
    /// Memory a child may allocate (its data segment and private mappings: RLIMIT_DATA).
    pub memory_bytes: u64,
    /// CPU time a child may use, over all its threads (RLIMIT_CPU).
    pub cpu_seconds: u64,
    /// Wall-clock time from the child's start to its answer; it is killed past it.
    pub timeout: Duration,
    /// Bytes of answer read from a child; it is killed past them.
    pub reply_bytes: usize,
    /// Renders running at once; more wait for a turn (not counted in their timeout).
    pub concurrency: usize,
}

/// 256 MiB: kube-prometheus-stack, the largest chart of the real-world corpus, peaks under
/// 100 MiB in a child; two at once and the agent itself fit a 1Gi pod.
pub const DEFAULT_MEMORY_MIB: u64 = 256;
/// 20 s of CPU: the largest chart renders in well under one.
pub const DEFAULT_CPU_SECONDS: u64 = 20;
/// 60 s of wall-clock time, three times the CPU time: a busy node's renders still finish.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Two renders at once (2 × 256 MiB, next to the agent, in 1Gi).
pub const DEFAULT_CONCURRENCY: usize = 2;

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits {
            memory_bytes: DEFAULT_MEMORY_MIB << 20,
            cpu_seconds: DEFAULT_CPU_SECONDS,
            timeout: DEFAULT_TIMEOUT,
            reply_bytes: reply_bytes_for(pallet_formats::budget::DEFAULT_OUTPUT_BYTES),
            concurrency: DEFAULT_CONCURRENCY,
        }
    }
}

/// The answer a render of `output_bytes` of text may need: its objects as JSON are about the
/// size of the text, with room for JSON's escapes.
pub fn reply_bytes_for(output_bytes: usize) -> usize {
    output_bytes.saturating_mul(2).saturating_add(1 << 20)
}

/// Runs renders in child processes under [`SandboxLimits`].
pub struct RenderSandbox {
    limits: SandboxLimits,
    program: PathBuf,
    turns: Arc<tokio::sync::Semaphore>,
}

impl RenderSandbox {
    /// A sandbox running this process's own binary.
    pub fn new(limits: SandboxLimits) -> Self {
        Self::with_program(limits, own_binary())
    }

    /// A sandbox running `program` (a `pallet` binary) as the child.
    pub fn with_program(limits: SandboxLimits, program: PathBuf) -> Self {
        RenderSandbox {
            turns: Arc::new(tokio::sync::Semaphore::new(limits.concurrency.max(1))),
            limits,
            program,
        }
    }

    /// The limits of this sandbox.
    pub fn limits(&self) -> SandboxLimits {
        self.limits
    }

    /// Renders the tree at `tree` in `format` with `config` in a child process: the objects,
    /// with an empty render refused unless `allow_empty` and objects the API server would not
    /// store refused, as in-process rendering does. Without processors.
    pub async fn render(
        &self,
        tree: &Path,
        format: Format,
        config: &RenderConfig,
        allow_empty: bool,
    ) -> Result<Rendered, SandboxError> {
        match self
            .render_step(tree, format, config, allow_empty, &[], None)
            .await?
        {
            RenderStep::Done { rendered, .. } => Ok(rendered),
            RenderStep::Function { .. } => Err(SandboxError::Failed(
                "a render without processors asked for a function".into(),
            )),
            RenderStep::Lookups { keys } => Err(SandboxError::Refused {
                category: "LookupsNeeded",
                message: format!("the chart looks up {} objects not read yet", keys.len()),
            }),
        }
    }

    /// One step of a render with `processors` in a child process (see
    /// [`crate::reconcile::render::render_step`]): to the end, or to the next function.
    pub async fn render_step(
        &self,
        tree: &Path,
        format: Format,
        config: &RenderConfig,
        allow_empty: bool,
        processors: &[NamedProcessor],
        resume: Option<Resume>,
    ) -> Result<RenderStep, SandboxError> {
        let request = RenderRequest {
            tree: tree.to_path_buf(),
            format,
            allow_empty,
            config: config.clone(),
            processors: processors.to_vec(),
            resume,
        };
        let input = serde_json::to_vec(&request)
            .map_err(|e| SandboxError::Failed(format!("encoding the render request: {e}")))?;
        let _turn = self
            .turns
            .acquire()
            .await
            .map_err(|_| SandboxError::Failed("the render sandbox is shut down".into()))?;
        let ended = self.run_child(&input, format).await?;
        outcome::judge(ended, &self.limits, format)
    }

    async fn run_child(
        &self,
        input: &[u8],
        format: Format,
    ) -> Result<outcome::Ended, SandboxError> {
        let mut child = tokio::process::Command::new(&self.program)
            .arg(CHILD_COMMAND)
            .arg("--memory-bytes")
            .arg(self.limits.memory_bytes.to_string())
            .arg("--cpu-seconds")
            .arg(self.limits.cpu_seconds.to_string())
            // A panic's message is enough; a backtrace would only fill the stderr budget.
            .env("RUST_BACKTRACE", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                SandboxError::Failed(format!(
                    "starting the render sandbox ({}): {e}",
                    self.program.display()
                ))
            })?;
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(SandboxError::Failed(
                "the render sandbox's pipes are missing".into(),
            ));
        };
        let cap = self.limits.reply_bytes;
        // Standard error is read apart, so a child that fills it never blocks, and a child
        // killed for its reply's size is not waited for.
        let errors = tokio::spawn(async move {
            let mut errors = Vec::new();
            let _ = stderr
                .take(outcome::STDERR_BYTES)
                .read_to_end(&mut errors)
                .await;
            errors
        });
        let exchange = async {
            // The child reads all of its input before it writes: write, close, then read.
            // A child that died early makes the write fail; how it ended says why.
            let _ = stdin.write_all(input).await;
            drop(stdin);
            let mut reply = Vec::new();
            let _ = stdout.take(cap as u64 + 1).read_to_end(&mut reply).await;
            reply
        };
        let started = std::time::Instant::now();
        let reply = match tokio::time::timeout(self.limits.timeout, exchange).await {
            Ok(reply) if reply.len() <= cap => reply,
            over => {
                let _ = child.kill().await;
                errors.abort();
                return Ok(match over {
                    Ok(_) => outcome::Ended::ReplyTooLarge,
                    Err(_) => outcome::Ended::TimedOut {
                        after: started.elapsed(),
                    },
                });
            }
        };
        // The reply is complete: the child is exiting; a bound on the wait all the same.
        let left = self
            .limits
            .timeout
            .saturating_sub(started.elapsed())
            .max(Duration::from_secs(1));
        let status = match tokio::time::timeout(left, child.wait()).await {
            Ok(Ok(status)) => status,
            Ok(Err(e)) => {
                errors.abort();
                return Err(SandboxError::Failed(format!(
                    "waiting for the {} render sandbox: {e}",
                    format.name()
                )));
            }
            Err(_) => {
                let _ = child.kill().await;
                errors.abort();
                return Ok(outcome::Ended::TimedOut {
                    after: started.elapsed(),
                });
            }
        };
        let errors = tokio::time::timeout(Duration::from_secs(1), errors)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        Ok(outcome::Ended::Exited {
            status,
            reply,
            errors,
        })
    }
}

/// This process's binary: `/proc/self/exe` when the file it was started from is gone (a
/// rebuilt or upgraded binary), which still names the running one.
pub fn own_binary() -> PathBuf {
    match std::env::current_exe() {
        Ok(path) if path.exists() => path,
        _ => PathBuf::from("/proc/self/exe"),
    }
}
