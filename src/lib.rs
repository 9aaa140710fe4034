//! pallet: a bundle deployment agent for Kubernetes.
//!
//! The binary (`src/main.rs`) is a thin CLI over this library, so that integration tests can
//! drive the same code paths the agent runs.

pub mod api;
pub mod apply;
pub mod bounded;
pub mod changelog;
pub mod cli;
pub mod client_metrics;
pub mod clusters;
pub mod docs;
pub mod duration;
pub mod egress;
pub mod fault;
pub mod fleet;
pub mod health;
pub mod leader;
pub mod metrics;
pub mod notify;
pub mod preview;
pub mod push;
pub mod receiver;
pub mod reconcile;
pub mod render_sandbox;
pub mod revision;
pub mod shard;
pub mod source;
pub mod tls;
