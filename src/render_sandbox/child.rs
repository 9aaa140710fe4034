//! The child side of the sandbox (`pallet render-sandbox`, hidden): limit this process, read
//! one request from standard input, render it, write the reply to standard output.

use std::io::{Read as _, Write as _};

use rustix::process::{setrlimit, Resource, Rlimit};

use super::wire::{RenderRequest, Reply};

/// Exit status of a child that could not limit itself (it renders nothing).
pub const EXIT_NO_LIMITS: u8 = 3;
/// Exit status of a child whose request could not be read.
pub const EXIT_BAD_REQUEST: u8 = 4;
/// Exit status of a child whose reply could not be written.
pub const EXIT_REPLY_FAILED: u8 = 5;

/// Runs the child: limits first, before any byte of the request is read. Its exit status.
///
/// The limits are set, then the binary starts again in their place (`limited`): memory mapped
/// before the limit was set (the allocator reserves its arenas at start) would count against
/// it, so the render runs in a process image that started under the limits.
pub fn run(memory_bytes: u64, cpu_seconds: u64, limited: bool) -> u8 {
    if !limited {
        if let Err(error) = limit_self(memory_bytes, cpu_seconds) {
            eprintln!("render sandbox: setting resource limits: {error}");
            return EXIT_NO_LIMITS;
        }
        use std::os::unix::process::CommandExt as _;
        let error = std::process::Command::new("/proc/self/exe")
            .args(std::env::args_os().skip(1))
            .arg("--limited")
            .exec();
        eprintln!("render sandbox: starting again under the limits: {error}");
        return EXIT_NO_LIMITS;
    }
    let mut input = Vec::new();
    let request: RenderRequest = match std::io::stdin()
        .lock()
        .read_to_end(&mut input)
        .map_err(|e| e.to_string())
        .and_then(|_| serde_json::from_slice(&input).map_err(|e| e.to_string()))
    {
        Ok(request) => request,
        Err(error) => {
            eprintln!("render sandbox: reading the request: {error}");
            return EXIT_BAD_REQUEST;
        }
    };
    drop(input);
    let result = crate::reconcile::render::render_step(
        request.format,
        &request.tree,
        &request.config,
        request.allow_empty,
        &request.processors,
        request.resume,
    );
    let reply = Reply::of(result);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match serde_json::to_writer(&mut out, &reply)
        .map_err(std::io::Error::from)
        .and_then(|()| out.flush())
    {
        Ok(()) => 0,
        // The parent stopped reading (it killed this child or gave up): nothing to say.
        Err(error) => {
            eprintln!("render sandbox: writing the reply: {error}");
            EXIT_REPLY_FAILED
        }
    }
}

/// Memory (RLIMIT_DATA: heap and private mappings, which is where a render's memory goes),
/// CPU time (SIGXCPU at the soft limit, SIGKILL a second later) and no core dumps.
pub(super) fn limit_self(memory_bytes: u64, cpu_seconds: u64) -> rustix::io::Result<()> {
    setrlimit(
        Resource::Core,
        Rlimit {
            current: Some(0),
            maximum: Some(0),
        },
    )?;
    setrlimit(
        Resource::Data,
        Rlimit {
            current: Some(memory_bytes),
            maximum: Some(memory_bytes),
        },
    )?;
    setrlimit(
        Resource::Cpu,
        Rlimit {
            current: Some(cpu_seconds.max(1)),
            maximum: Some(cpu_seconds.max(1) + 1),
        },
    )
}
