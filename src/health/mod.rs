//! TEMPORARY STUB (replaced by branch `store`).
#![allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthState {
    Current,
    InProgress,
    Failed,
    Terminating,
    Suspended,
}
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    pub state: HealthState,
    pub message: String,
}
#[derive(Clone, Debug, Default)]
pub struct HealthOptions {
    pub load_balancer_needs_ingress: bool,
}
pub fn assess(_object: &serde_json::Value, _options: &HealthOptions) -> Health {
    Health {
        state: HealthState::Current,
        message: String::new(),
    }
}
impl Health {
    pub fn is_healthy(&self) -> bool {
        matches!(self.state, HealthState::Current)
    }
}
pub fn summarize(unhealthy: &[(String, Health)], limit: usize) -> String {
    unhealthy
        .iter()
        .take(limit)
        .map(|(n, h)| format!("{n}: {}", h.message))
        .collect::<Vec<_>>()
        .join("; ")
}
