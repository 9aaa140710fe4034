//! Fault injection, for crash tests only: `PALLET_FAULT_ABORT_AT=<point>[:<n>]` makes the agent
//! call [`std::process::abort`] the `n`-th time (default 1) this process reaches `point`, leaving
//! the cluster, the status and the change log exactly as `kill -9` at that moment would.
//!
//! The one way to inject a fault. Compiled in only with the `fault-injection` feature, which the
//! tests' and benchmarks' builds turn on (a dev-dependency of the crate on itself); in any other
//! build [`reached`] does nothing and the variable is never read.
//!
//! | point | reached |
//! | --- | --- |
//! | `fetch` | when a pass has fetched its sources, before rendering |
//! | `snapshot` | when a new revision's snapshot is stored, before its intent is recorded |
//! | `intent` | when the intent (`Applying` with the inventory) is recorded (a first install, or an upgrade writing exactly the installed objects: staged, kept out of status), before any write |
//! | `rollback` | when a rollback's intent is recorded, before any of its writes |
//! | `apply` | when an object write (create or update) has returned, before it is logged |
//! | `prune` | when a delete has returned, before it is logged |
//! | `health` | when a pass finds the applied revision not yet healthy and will wait for it |
//! | `notify` | when a status write that records a transition with notifications has returned, before they are queued for delivery |
//!
//! The variable is read once, at the first point reached; an unknown point is ignored with an
//! error in the agent's log. Never set it outside tests.

#[cfg(feature = "fault-injection")]
use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(feature = "fault-injection")]
use std::sync::OnceLock;

/// The environment variable naming the fault.
pub const ENV: &str = "PALLET_FAULT_ABORT_AT";

/// A named point of the reconcile pipeline where a fault may be injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    /// Sources fetched.
    Fetch,
    /// A new revision's snapshot stored.
    Snapshot,
    /// The intent to apply recorded (in status, or kept out of it: see `reconcile::unwritten_intent`).
    Intent,
    /// A rollback's intent recorded, before any of its writes.
    Rollback,
    /// An object write returned (not yet logged).
    Apply,
    /// A delete returned (not yet logged).
    Prune,
    /// Waiting for the revision to become healthy.
    Health,
    /// Notifications recorded in status, not yet queued for delivery.
    Notify,
}

impl Point {
    #[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
    fn parse(name: &str) -> Option<Point> {
        Some(match name {
            "fetch" => Point::Fetch,
            "snapshot" => Point::Snapshot,
            "intent" => Point::Intent,
            "rollback" => Point::Rollback,
            "apply" => Point::Apply,
            "prune" => Point::Prune,
            "health" => Point::Health,
            "notify" => Point::Notify,
            _ => return None,
        })
    }
}

/// A parsed fault: abort at the `nth` time `point` is reached.
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
struct Fault {
    point: Point,
    nth: u64,
}

/// Parses `<point>[:<n>]`; `None` for anything else.
#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
fn parse(spec: &str) -> Option<Fault> {
    let (name, nth) = match spec.split_once(':') {
        Some((name, n)) => (name, n.parse().ok().filter(|n| *n > 0)?),
        None => (spec, 1),
    };
    Some(Fault {
        point: Point::parse(name.trim())?,
        nth,
    })
}

#[cfg(feature = "fault-injection")]
static FAULT: OnceLock<Option<Fault>> = OnceLock::new();
#[cfg(feature = "fault-injection")]
static HITS: AtomicU64 = AtomicU64::new(0);

#[cfg(feature = "fault-injection")]
fn configured() -> Option<&'static Fault> {
    FAULT
        .get_or_init(|| {
            let spec = std::env::var(ENV).ok()?;
            let fault = parse(&spec);
            if fault.is_none() {
                tracing::error!(value = %spec, "{ENV}: not <point>[:<n>] with a known point; ignored");
            }
            fault
        })
        .as_ref()
}

/// Marks that `point` is reached; aborts the process when the configured fault says so.
#[cfg(feature = "fault-injection")]
pub fn reached(point: Point) {
    let Some(fault) = configured() else {
        return;
    };
    if fault.point == point && HITS.fetch_add(1, Ordering::SeqCst) + 1 == fault.nth {
        // Straight to stderr: the tracing subscriber may buffer, and nothing after this runs.
        eprintln!("{ENV}: aborting at {point:?} (hit {})", fault.nth);
        std::process::abort();
    }
}

/// Marks that `point` is reached: nothing, in a build without fault points.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn reached(_point: Point) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_point_and_an_optional_count() {
        assert_eq!(
            parse("apply:3"),
            Some(Fault {
                point: Point::Apply,
                nth: 3
            })
        );
        assert_eq!(
            parse("intent"),
            Some(Fault {
                point: Point::Intent,
                nth: 1
            })
        );
        assert_eq!(
            parse("rollback"),
            Some(Fault {
                point: Point::Rollback,
                nth: 1
            })
        );
        assert_eq!(parse("apply:0"), None);
        assert_eq!(parse("apply:x"), None);
        assert_eq!(parse("nowhere"), None);
    }
}
