//! The exit status of `pallet`: one number per kind of outcome, so scripts can tell a missing
//! object from a timeout from a found difference without parsing messages.
//!
//! | status | meaning |
//! | --- | --- |
//! | 0 | done; `diff`/`check`: nothing to report |
//! | 1 | failed (a refusal, an error from the cluster or a source, an unhealthy `check`) |
//! | 2 | usage: the command line is wrong |
//! | 3 | not found: the BundleDeployment or object named does not exist |
//! | 4 | timed out: a `--wait` or `--timeout` passed before the outcome |
//! | 5 | differences found: `diff` found objects that differ from the bundle |

use std::fmt;

/// How a command ended, as its exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Failed (1).
    Failed,
    /// The command line is wrong (2).
    Usage,
    /// What was named does not exist (3).
    NotFound,
    /// A wait passed its deadline (4).
    TimedOut,
    /// `diff` found differences (5).
    DifferencesFound,
}

impl Exit {
    /// The process exit status.
    pub fn code(self) -> u8 {
        match self {
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::NotFound => 3,
            Exit::TimedOut => 4,
            Exit::DifferencesFound => 5,
        }
    }
}

/// An error that ends the command with a given exit status. An empty message prints nothing
/// (the command already said what it found).
#[derive(Debug)]
pub struct ExitError {
    /// The exit status.
    pub exit: Exit,
    message: String,
}

impl ExitError {
    /// An error with `message` and exit status `exit`.
    pub fn error(exit: Exit, message: impl Into<String>) -> anyhow::Error {
        anyhow::Error::new(ExitError {
            exit,
            message: message.into(),
        })
    }

    /// Exit status `exit` without a message.
    pub fn quiet(exit: Exit) -> anyhow::Error {
        ExitError::error(exit, "")
    }
}

impl fmt::Display for ExitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ExitError {}

/// `message` as a not-found error (exit status 3).
pub fn not_found(message: impl Into<String>) -> anyhow::Error {
    ExitError::error(Exit::NotFound, message)
}

/// `message` as a timed-out error (exit status 4).
pub fn timed_out(message: impl Into<String>) -> anyhow::Error {
    ExitError::error(Exit::TimedOut, message)
}

/// `message` as a usage error (exit status 2).
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    ExitError::error(Exit::Usage, message)
}

/// The exit status `err` calls for: the first [`ExitError`] in its chain, else a Kubernetes
/// "not found" answer (3), else 1.
pub fn status_of(err: &anyhow::Error) -> Exit {
    for cause in err.chain() {
        if let Some(exit) = cause.downcast_ref::<ExitError>() {
            return exit.exit;
        }
        if let Some(kube::Error::Api(status)) = cause.downcast_ref::<kube::Error>() {
            if status.code == 404 {
                return Exit::NotFound;
            }
        }
    }
    Exit::Failed
}

/// Whether `err` asks for no message at all (its outermost error is a quiet [`ExitError`]).
pub fn is_quiet(err: &anyhow::Error) -> bool {
    err.downcast_ref::<ExitError>()
        .is_some_and(|e| e.message.is_empty())
        && err.chain().count() == 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context as _;

    #[test]
    fn the_status_comes_from_the_innermost_exit_error_in_the_chain() {
        let err = Err::<(), _>(not_found("BundleDeployment x not found"))
            .context("reading x")
            .unwrap_err();
        assert_eq!(status_of(&err), Exit::NotFound);
        assert_eq!(status_of(&anyhow::anyhow!("boom")), Exit::Failed);
        assert_eq!(status_of(&timed_out("late")).code(), 4);
        assert!(is_quiet(&ExitError::quiet(Exit::DifferencesFound)));
        assert!(!is_quiet(&usage("bad")));
    }
}
