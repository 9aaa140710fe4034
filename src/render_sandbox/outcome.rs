//! How a sandboxed render ended, in the user's terms: its objects, the renderer's refusal, or
//! which limit of the sandbox ended it.

use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;
use std::time::Duration;

use pallet_formats::Format;

use super::child::{EXIT_BAD_REQUEST, EXIT_NO_LIMITS};
use super::wire::Reply;
use super::SandboxLimits;
use crate::reconcile::render::RenderStep;

/// Bytes of the child's standard error kept to explain how it ended.
pub(super) const STDERR_BYTES: u64 = 64 * 1024;

/// The category of every render ended by a budget, the sandbox's or a renderer's.
pub const BUDGET_CATEGORY: &str = "RenderBudgetExceeded";

/// Why a sandboxed render gave no objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxError {
    /// The content was refused (the same inputs would be again): a category and a message.
    Refused {
        /// CamelCase category (condition reason).
        category: &'static str,
        /// What was refused, and why.
        message: String,
    },
    /// The render could not be done, for a reason that may pass (the tree could not be read, the
    /// child could not be started): tried again, not remembered.
    Failed(String),
}

impl std::fmt::Display for SandboxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SandboxError::Refused { message, .. } | SandboxError::Failed(message) => {
                f.write_str(message)
            }
        }
    }
}

impl std::error::Error for SandboxError {}

/// How the child ended, as the parent saw it.
#[derive(Debug)]
pub(super) enum Ended {
    /// It exited or was killed by a signal, having written `reply` and `errors`.
    Exited {
        status: ExitStatus,
        reply: Vec<u8>,
        errors: Vec<u8>,
    },
    /// The deadline passed; it was killed.
    TimedOut { after: Duration },
    /// Its reply went past the byte cap; it was killed.
    ReplyTooLarge,
}

/// What `ended` means for a render in `format` under `limits`.
pub(super) fn judge(
    ended: Ended,
    limits: &SandboxLimits,
    format: Format,
) -> Result<RenderStep, SandboxError> {
    let (status, reply, errors) = match ended {
        Ended::TimedOut { after } => {
            return Err(over_budget(
                format,
                "render time (wall clock)",
                &format!("{:.1}s+", after.as_secs_f64()),
                &format!("{}s", limits.timeout.as_secs_f64()),
            ))
        }
        Ended::ReplyTooLarge => {
            return Err(over_budget(
                format,
                "render reply (bytes)",
                &format!("{}+", limits.reply_bytes + 1),
                &limits.reply_bytes.to_string(),
            ))
        }
        Ended::Exited {
            status,
            reply,
            errors,
        } => (status, reply, errors),
    };
    if status.success() {
        return match serde_json::from_slice::<Reply>(&reply) {
            Ok(Reply::Rendered(rendered, traces)) => rendered
                .into_rendered()
                .map(|rendered| RenderStep::Done { rendered, traces })
                .map_err(|e| SandboxError::Refused {
                    category: intern_category(e.category()),
                    message: e.to_string(),
                }),
            Ok(Reply::Function {
                index,
                request,
                progress,
            }) => Ok(RenderStep::Function {
                index,
                request,
                progress,
            }),
            Ok(Reply::Refused { category, message }) => Err(SandboxError::Refused {
                category: intern_category(&category),
                message,
            }),
            Ok(Reply::ReadFailed { message }) => Err(SandboxError::Failed(message)),
            Ok(Reply::Lookups(keys)) => Ok(RenderStep::Lookups { keys }),
            Err(e) => Err(SandboxError::Failed(format!(
                "the {} render sandbox's reply does not decode: {e}",
                format.name()
            ))),
        };
    }
    Err(ended_without_reply(status, &errors, limits, format))
}

/// A child that exited or died without a reply: which limit, or what it said.
fn ended_without_reply(
    status: ExitStatus,
    errors: &[u8],
    limits: &SandboxLimits,
    format: Format,
) -> SandboxError {
    let said = String::from_utf8_lossy(errors);
    // A panic's message is the line after `panicked at`; otherwise the last thing said.
    let mut lines = said.lines().map(str::trim).filter(|l| !l.is_empty());
    let last_words = match lines.clone().position(|l| l.contains("panicked at")) {
        Some(at) => lines.nth(at + 1).unwrap_or(""),
        None => lines.next_back().unwrap_or(""),
    }
    .to_string();
    let memory = || {
        let value = said
            .lines()
            .find_map(|l| l.trim().strip_prefix("memory allocation of "))
            .and_then(|rest| rest.split_whitespace().next())
            .map_or("an allocation".to_string(), |n| {
                format!("an allocation of {n} bytes")
            });
        over_budget(
            format,
            "render memory (bytes)",
            &value,
            &limits.memory_bytes.to_string(),
        )
    };
    let stack = || SandboxError::Refused {
        category: BUDGET_CATEGORY,
        message: format!(
            "the {} render went over its budget: it overflowed the render thread's stack \
             (content nested too deep for the renderer)",
            format.name()
        ),
    };
    let cpu = || {
        over_budget(
            format,
            "render CPU time",
            &format!("{}s+", limits.cpu_seconds),
            &format!("{}s", limits.cpu_seconds),
        )
    };
    match (status.code(), status.signal()) {
        (_, Some(SIGXCPU)) => cpu(),
        _ if said.contains("memory allocation of") => memory(),
        _ if said.contains("has overflowed its stack") => stack(),
        (_, Some(SIGSEGV | SIGBUS)) => stack(),
        // SIGKILL from the kernel: the hard CPU limit, or the memory cgroup's killer.
        (_, Some(SIGKILL)) => over_budget(
            format,
            "render CPU time or memory",
            "killed by the system",
            &format!(
                "{}s of CPU, {} bytes",
                limits.cpu_seconds, limits.memory_bytes
            ),
        ),
        (_, Some(signal)) => SandboxError::Refused {
            category: "RenderFailed",
            message: format!(
                "the {} render ended on signal {signal}: {last_words}",
                format.name()
            ),
        },
        (Some(code), _)
            if code == i32::from(EXIT_NO_LIMITS) || code == i32::from(EXIT_BAD_REQUEST) =>
        {
            SandboxError::Failed(format!(
                "the {} render sandbox: {last_words}",
                format.name()
            ))
        }
        (code, _) => SandboxError::Refused {
            category: "RenderFailed",
            message: format!(
                "the {} render failed (exit status {}): {last_words}",
                format.name(),
                code.map_or("unknown".to_string(), |c| c.to_string())
            ),
        },
    }
}

const SIGBUS: i32 = 7;
const SIGKILL: i32 = 9;
const SIGSEGV: i32 = 11;
const SIGXCPU: i32 = 24;

/// A render ended by a limit of the sandbox.
fn over_budget(format: Format, budget: &str, value: &str, limit: &str) -> SandboxError {
    SandboxError::Refused {
        category: BUDGET_CATEGORY,
        message: format!(
            "the {} render went over its budget: {budget} {value} is over the limit of {limit}",
            format.name()
        ),
    }
}

/// The static category for a child's category name. Categories are a small fixed set of
/// CamelCase words; each distinct one is kept once, and past a bound (or for anything that is
/// not such a word) the category is `RenderFailed`.
fn intern_category(category: &str) -> &'static str {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static KNOWN: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    const MOST: usize = 64;
    let word = !category.is_empty()
        && category.len() <= 48
        && category.chars().all(|c| c.is_ascii_alphanumeric());
    if !word {
        return "RenderFailed";
    }
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    let set = known.get_or_insert_with(HashSet::new);
    if let Some(kept) = set.get(category) {
        return kept;
    }
    if set.len() >= MOST {
        return "RenderFailed";
    }
    let kept: &'static str = Box::leak(category.to_string().into_boxed_str());
    set.insert(kept);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> SandboxLimits {
        SandboxLimits::default()
    }

    fn died(raw: i32, stderr: &str) -> SandboxError {
        judge(
            Ended::Exited {
                status: ExitStatus::from_raw(raw),
                reply: Vec::new(),
                errors: stderr.as_bytes().to_vec(),
            },
            &limits(),
            Format::Helm,
        )
        .unwrap_err()
    }

    fn budget_message(error: SandboxError) -> String {
        match error {
            SandboxError::Refused { category, message } => {
                assert_eq!(category, BUDGET_CATEGORY, "{message}");
                message
            }
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn each_way_a_child_ends_is_named() {
        // Killed by a signal: the raw wait status is the signal number.
        let m = budget_message(died(SIGXCPU, ""));
        assert!(m.contains("render CPU time 20s+"), "{m}");
        let m = budget_message(died(6, "memory allocation of 3000000000 bytes failed\n"));
        assert!(
            m.contains("render memory (bytes) an allocation of 3000000000 bytes"),
            "{m}"
        );
        assert!(m.contains(&format!("limit of {}", 256 << 20)), "{m}");
        let m = budget_message(died(
            6,
            "\nthread 'main' has overflowed its stack\nfatal runtime error: stack overflow",
        ));
        assert!(m.contains("overflowed the render thread's stack"), "{m}");
        let m = budget_message(died(SIGSEGV, ""));
        assert!(m.contains("overflowed the render thread's stack"), "{m}");
        let m = budget_message(died(SIGKILL, ""));
        assert!(m.contains("killed by the system"), "{m}");
        let timed_out = judge(
            Ended::TimedOut {
                after: Duration::from_secs(61),
            },
            &limits(),
            Format::Helm,
        )
        .unwrap_err();
        assert!(budget_message(timed_out).contains("render time (wall clock) 61.0s+"));
        let too_large = judge(Ended::ReplyTooLarge, &limits(), Format::Plain).unwrap_err();
        assert!(budget_message(too_large).contains("the plain render"));
        // Exit status 101 (a panic) is a failed render, with the panic's words.
        match died(
            101 << 8,
            "thread 'main' panicked at x.rs:1:1:\nindex out of bounds\n",
        ) {
            SandboxError::Refused { category, message } => {
                assert_eq!(category, "RenderFailed");
                assert!(message.contains("index out of bounds"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        // A child that could not limit itself rendered nothing: tried again.
        assert!(matches!(
            died(
                i32::from(EXIT_NO_LIMITS) << 8,
                "render sandbox: setting resource limits: x"
            ),
            SandboxError::Failed(_)
        ));
    }

    #[test]
    fn categories_are_interned_once_and_bounded() {
        assert_eq!(intern_category("InvalidYAML"), "InvalidYAML");
        assert!(std::ptr::eq(
            intern_category("InvalidYAML"),
            intern_category("InvalidYAML")
        ));
        assert_eq!(intern_category("not a word"), "RenderFailed");
        assert_eq!(intern_category(&"x".repeat(100)), "RenderFailed");
    }
}
