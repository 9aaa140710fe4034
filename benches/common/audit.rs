//! Counting one client's API requests from the control plane's audit log (see
//! tools/controlplane/audit.go: only users in group `pallet:audited` are logged, one JSON line
//! per request at level Metadata).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The audit log directory of a control plane (`<state>/controlplane/audit`).
pub struct AuditLog {
    dir: PathBuf,
}

impl AuditLog {
    /// The log under `controlplane_dir` (the control plane's state directory).
    pub fn new(controlplane_dir: &Path) -> AuditLog {
        AuditLog {
            dir: controlplane_dir.join("audit"),
        }
    }

    /// Requests of `user` received in `[from, to)` (seconds since the epoch), by
    /// `"verb resource[/subresource]"`. A watch counts once, when it starts.
    pub fn requests(&self, user: &str, from: f64, to: f64) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for r in self.events(user, from, to) {
            // Refused requests (a 409 on a conditional write) are told apart: they are retried.
            let key = match r.code {
                Some(code) if code >= 300 => format!("{} {} ({code})", r.verb, r.resource),
                _ => format!("{} {}", r.verb, r.resource),
            };
            *out.entry(key).or_insert(0) += 1;
        }
        out
    }

    /// The objects `user` wrote (create, update, patch, delete) in `[from, to)`, as
    /// `resource/name` (status writes as `resource/status/name`).
    pub fn written(&self, user: &str, from: f64, to: f64) -> BTreeSet<String> {
        self.events(user, from, to)
            .into_iter()
            .filter(|r| ["create", "update", "patch", "delete"].contains(&r.verb.as_str()))
            .map(|r| format!("{}/{}", r.resource, r.name))
            .collect()
    }

    /// Every request of `user` received in `[from, to)`.
    pub fn events(&self, user: &str, from: f64, to: f64) -> Vec<Request> {
        let mut out = Vec::new();
        // audit.log and its rotated copies (audit-<time>.log); order does not matter.
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return out;
        };
        for entry in entries.flatten() {
            let Ok(text) = std::fs::read_to_string(entry.path()) else {
                continue;
            };
            for line in text.lines() {
                if !line.contains(user) {
                    continue;
                }
                let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
                    continue;
                };
                if event["user"]["username"] != user {
                    continue;
                }
                let verb = event["verb"].as_str().unwrap_or("?");
                let counted = match event["stage"].as_str().unwrap_or("") {
                    "ResponseStarted" | "Panic" => true,
                    "ResponseComplete" => verb != "watch",
                    _ => false,
                };
                let at = event["requestReceivedTimestamp"]
                    .as_str()
                    .and_then(unix_seconds);
                if !counted || !at.is_some_and(|at| at >= from && at < to) {
                    continue;
                }
                let object = &event["objectRef"];
                let resource = match (object["resource"].as_str(), object["subresource"].as_str()) {
                    (Some(r), Some(s)) => format!("{r}/{s}"),
                    (Some(r), None) => r.to_string(),
                    _ => "-".to_string(),
                };
                out.push(Request {
                    verb: verb.to_string(),
                    resource,
                    name: object["name"].as_str().unwrap_or("").to_string(),
                    code: event["responseStatus"]["code"].as_u64(),
                });
            }
        }
        out
    }
}

/// One audited request.
pub struct Request {
    /// get, list, watch, create, patch, update, delete, deletecollection.
    pub verb: String,
    /// `resource` or `resource/subresource`; `-` for paths naming none (discovery).
    pub resource: String,
    /// The object's name; empty for lists and collections.
    pub name: String,
    /// The response's HTTP status code, when the request completed.
    pub code: Option<u64>,
}

/// Now, in seconds since the epoch.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `2026-11-24T03:01:13.123456Z` (the API server's MicroTime) in seconds since the epoch.
fn unix_seconds(ts: &str) -> Option<f64> {
    let at: k8s_openapi::jiff::Timestamp = ts.parse().ok()?;
    Some(at.as_microsecond() as f64 / 1e6)
}

/// Total of a by-key count.
pub fn total(counts: &BTreeMap<String, u64>) -> u64 {
    counts.values().sum()
}
