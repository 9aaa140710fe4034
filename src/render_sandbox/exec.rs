//! The process an `exec` function runs in (`pallet function-sandbox`, hidden): the agent's own
//! binary, started by the agent in a process group of its own with an empty environment, which
//! limits itself as the render sandbox's child does (memory, CPU time, no core dumps), becomes
//! the subreaper of everything the function starts, runs the function with the same empty
//! environment and its own standard input and output, and ends it at its deadline.
//!
//! When the function exits, its deadline passes, or the agent ends the call early (SIGTERM to
//! this process: the call's BundleDeployment was deleted, its render abandoned), whatever the
//! function left behind is killed: its process group first, then every process reparented here (those that left the group with
//! `setsid` included), each reaped, so nothing it started outlives the call and no zombie is left
//! to the agent (PID 1 in its container, which reaps only its own children).
//!
//! What the function can still reach is what any process of the agent's user can: files the
//! user may read (the ServiceAccount token's file among them, unless the Pod does not mount it)
//! and the network. See the security guide.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::process::{
    kill_process, kill_process_group, set_child_subreaper, Pid, Signal, WaitOptions,
};

/// Exit status when the function ran past its deadline (as `timeout(1)`).
pub const EXIT_TIMED_OUT: u8 = 124;
/// Exit status when the function could not be started (or this process could not limit
/// itself).
pub const EXIT_NOT_STARTED: u8 = 127;

/// How often the function's end is looked for.
const POLL: Duration = Duration::from_millis(5);
/// Rounds of killing what is left (each kills the processes reparented since the last).
const CLEANUP_ROUNDS: usize = 64;

/// Runs `program` under the limits within `timeout`; this process's exit status: the
/// function's, 128 + its signal, [`EXIT_TIMED_OUT`] or [`EXIT_NOT_STARTED`].
pub fn run(
    program: &Path,
    memory_bytes: u64,
    cpu_seconds: u64,
    timeout: Duration,
    limited: bool,
) -> u8 {
    if !limited {
        // As the render child: the limits, then this binary again under them.
        if let Err(error) = super::child::limit_self(memory_bytes, cpu_seconds) {
            eprintln!("function sandbox: setting resource limits: {error}");
            return EXIT_NOT_STARTED;
        }
        use std::os::unix::process::CommandExt as _;
        let error = Command::new("/proc/self/exe")
            .args(std::env::args_os().skip(1))
            .arg("--limited")
            .env_clear()
            .exec();
        eprintln!("function sandbox: starting again under the limits: {error}");
        return EXIT_NOT_STARTED;
    }
    if let Err(error) =
        set_child_subreaper(Pid::from_raw(std::process::id().try_into().unwrap_or(0)))
    {
        eprintln!("function sandbox: becoming the subreaper: {error}");
        return EXIT_NOT_STARTED;
    }
    // Registered before the function starts: an early end never leaves it running.
    let ended_early = match on_terminate() {
        Ok(flag) => flag,
        Err(error) => {
            eprintln!("function sandbox: handling SIGTERM: {error}");
            return EXIT_NOT_STARTED;
        }
    };
    use std::os::unix::process::CommandExt as _;
    let started = Instant::now();
    let mut function = match Command::new(program)
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn()
    {
        Ok(function) => function,
        Err(error) => {
            eprintln!("function sandbox: running {}: {error}", program.display());
            return EXIT_NOT_STARTED;
        }
    };
    let group = Pid::from_raw(function.id().try_into().unwrap_or(0));
    let status = loop {
        match function.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() >= timeout || ended_early.load(Ordering::SeqCst) => {
                break None
            }
            Ok(None) => std::thread::sleep(POLL),
            Err(error) => {
                eprintln!("function sandbox: waiting for the function: {error}");
                break None;
            }
        }
    };
    if let Some(group) = group {
        let _ = kill_process_group(group, Signal::KILL);
    }
    if status.is_none() {
        let _ = function.kill();
        let _ = function.wait();
    }
    kill_descendants();
    match status {
        None => EXIT_TIMED_OUT,
        Some(status) => exit_status(status),
    }
}

/// A flag set when this process receives SIGTERM, the agent's way to end a call early. The
/// handler is registered before this returns; a thread of its own waits for the signal.
fn on_terminate() -> std::io::Result<Arc<AtomicBool>> {
    use tokio::signal::unix::{signal, SignalKind};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let mut terminate = {
        let _context = runtime.enter();
        signal(SignalKind::terminate())?
    };
    let flag = Arc::new(AtomicBool::new(false));
    let set = flag.clone();
    std::thread::spawn(move || {
        runtime.block_on(async move {
            if terminate.recv().await.is_some() {
                set.store(true, Ordering::SeqCst);
            }
        })
    });
    Ok(flag)
}

fn exit_status(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(255),
        (None, None) => 1,
    }
}

/// Kills and reaps every process reparented to this one, until none is left.
fn kill_descendants() {
    let me = std::process::id();
    for _ in 0..CLEANUP_ROUNDS {
        reap();
        let children = children_of(me);
        if children.is_empty() {
            return;
        }
        for child in children {
            if let Some(pid) = Pid::from_raw(child) {
                let _ = kill_process(pid, Signal::KILL);
            }
        }
        // Give the kernel a moment to deliver the kills and reparent their children.
        std::thread::sleep(POLL);
    }
    reap();
}

/// Reaps every child that has ended.
fn reap() {
    while let Ok(Some(_)) = rustix::process::wait(WaitOptions::NOHANG) {}
}

/// The processes whose parent is `parent` (from /proc).
fn children_of(parent: u32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| parent_of(*pid) == Some(parent))
        .collect()
}

fn parent_of(pid: i32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: the fields follow the last ')'.
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
