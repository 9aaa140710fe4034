//! Metrics calls from the reconciler, forwarded to [`crate::metrics::METRICS`] (the reconciler
//! may call `METRICS` directly instead; then this module can go).

use crate::metrics::METRICS;

/// Counts a rollback; `trigger` is `apply-error`, `deadline` or `request`.
pub fn rollback(trigger: &str) {
    METRICS.rollback(trigger);
}

/// Counts objects rewritten to correct drift.
pub fn drift_corrected(n: usize) {
    METRICS.drift_corrected(n);
}

/// Counts the writes of one apply: created and updated objects, and deleted (pruned) ones.
pub fn applied(created: usize, updated: usize, deleted: usize) {
    METRICS.applied(created, updated);
    METRICS.pruned(deleted);
}

/// Counts a revision recorded.
pub fn revision_created() {
    METRICS.revision_created();
}
