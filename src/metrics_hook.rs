//! TEMPORARY: metrics calls from the reconciler, until `metrics` lands.
#![allow(missing_docs)]
pub fn rollback(_trigger: &str) {}
pub fn drift_corrected(_n: usize) {}
pub fn applied(_created: usize, _updated: usize, _deleted: usize) {}
pub fn revision_created() {}
