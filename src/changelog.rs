//! The change log: one JSON line for every create, update and delete the agent makes to a
//! bundle's objects, with the why (reason, revision) next to the what.
//!
//! Schema version 1 (`pallet.dev/change/v1`; fields are only ever added): a line is an [`Entry`]
//! (a write) or a [`Marker`] (what the agent knows about gaps in its own log). Their fields'
//! docs are the reference (`docs/reference/changelog.md` is generated from them).
//!
//! Lines go to stdout (the agent's logs go to stderr) and, with `--change-log FILE`, are appended
//! to that file too.
//!
//! Durability: each entry is written (one `write` of the whole line, stdout flushed) as soon as
//! its write to the cluster returns, before the agent goes on, so a killed agent (`kill -9`, OOM,
//! abort) loses at most the entries of the writes in flight at that moment: at most
//! `--apply-parallelism` object writes, or one delete. The file is fsynced (`fdatasync`) once at
//! the end of every pass that wrote, so a machine crash may also lose that pass's entries.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::Serialize;

/// Schema identifier written in every entry.
pub const SCHEMA: &str = "pallet.dev/change/v1";

/// What kind of write.
#[derive(Serialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Operation {
    /// The object was created.
    Create,
    /// The object was changed.
    Update,
    /// The object was deleted.
    Delete,
}

/// Why the write happened.
#[derive(Serialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// A new rendered set (new sources or spec) is being applied.
    NewRevision,
    /// The live object had drifted from the bundle and was restored.
    Drift,
    /// An earlier revision is being re-applied.
    Rollback,
    /// The new revision no longer has the object.
    Prune,
    /// An existing object was taken over.
    Adoption,
    /// The BundleDeployment is being deleted.
    Deletion,
    /// A helm hook was created, or deleted by its delete policy (`details.hookEvent` names the
    /// event, `details.deletePolicy` the policy that deleted it).
    Hook,
    /// A certificate Secret of the BuiltIn provider for registry-v1 webhooks was issued or
    /// renewed.
    Certificate,
}

/// The object written.
#[derive(Serialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// The object's apiVersion.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace, for namespaced objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

/// The agent that wrote.
#[derive(Serialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
pub struct AgentRef {
    /// The agent's name (its field manager and Event reporter).
    pub name: String,
    /// The agent's version.
    pub version: String,
}

/// One change-log entry.
#[derive(Serialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// Always `pallet.dev/change/v1`.
    pub schema: &'static str,
    /// When the write returned (RFC 3339, UTC).
    pub time: String,
    /// The agent that wrote.
    pub agent: AgentRef,
    /// Name of the BundleDeployment.
    pub bundle_deployment: String,
    /// Number of the revision being applied, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// Content digest (`sha256:…`) of that revision's rendered set, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// What kind of write.
    pub operation: Operation,
    /// Why the write happened.
    pub reason: Reason,
    /// The object written.
    pub object: ObjectRef,
    /// The object's resourceVersion before the write, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version_before: Option<String>,
    /// The object's resourceVersion after the write, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version_after: Option<String>,
    /// Field paths that differed (never values: they may be secret).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields_changed: Vec<String>,
    /// `success`, `failure`, or [`RESULT_SKIPPED`].
    pub result: &'static str,
    /// The error message, on failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Free-form details: the previous owner on adoption, `hookEvent` and `deletePolicy` of a
    /// hook.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub details: serde_json::Map<String, serde_json::Value>,
}

/// `result` of a line that records no write: a policy annotation of the object (named in
/// `details.policy`) kept pallet from creating or updating it.
pub const RESULT_SKIPPED: &str = "skipped";

/// The marker of a pass that recorded its intent and did not finish (see the module doc).
pub const MARKER_INTERRUPTED: &str = "interrupted-pass";

/// A line that is not a write: what the agent knows about gaps in its own log.
#[derive(Serialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Marker {
    /// Always `pallet.dev/change/v1`.
    pub schema: &'static str,
    /// When the marker was written (RFC 3339, UTC).
    pub time: String,
    /// The agent that wrote the marker.
    pub agent: AgentRef,
    /// `interrupted-pass`: written the first time an agent process looks at a BundleDeployment
    /// whose status records the intent to write (its active revision still `Applying`), whose
    /// deletion was requested before the process started, or whose objects (or stored
    /// snapshots) show a revision its status never recorded. The pass that recorded it may not
    /// have finished, so writes it had in flight may be missing from the log.
    pub marker: &'static str,
    /// The interrupted pass's BundleDeployment.
    pub bundle_deployment: String,
    /// The revision that pass was applying (for a deletion, the active one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// Its content digest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// `phase` (`applying` or `deleting`), `unloggedWritesAtMost` (how many writes that pass
    /// could have had in flight: the apply parallelism, 1 for a deletion), `intentSince` (when
    /// the revision entered `Applying`, when known) and `message` (the same in words).
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub details: serde_json::Map<String, serde_json::Value>,
}

/// Where change-log lines go. Clones share the file.
#[derive(Clone)]
pub struct ChangeLog {
    agent: AgentRef,
    to_stdout: bool,
    file: Option<Arc<Mutex<File>>>,
    /// BundleDeployments (by uid) this process has looked at (see [`ChangeLog::first_look`]).
    seen: Arc<Mutex<HashSet<String>>>,
    /// When this process opened the log: a deletion requested before then may have been under
    /// way in a previous process.
    opened_at: k8s_openapi::jiff::Timestamp,
    /// The last lines written, for the agent's web view (see [`ChangeLog::keep_recent`]).
    recent: Option<Arc<Recent>>,
}

/// The last lines of a change log, kept in memory.
pub struct Recent {
    lines: Mutex<std::collections::VecDeque<Arc<str>>>,
    capacity: usize,
    /// Lines written so far: moves with every line, so a reader knows when to look again.
    written: std::sync::atomic::AtomicU64,
}

impl Recent {
    /// The lines kept, oldest first.
    pub fn lines(&self) -> Vec<Arc<str>> {
        self.lines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// How many lines were written so far.
    pub fn written(&self) -> u64 {
        self.written.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn push(&self, line: &str) {
        let mut lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        if lines.len() >= self.capacity {
            lines.pop_front();
        }
        lines.push_back(Arc::from(line.trim_end()));
        self.written
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl ChangeLog {
    /// A change log writing to stdout (when `to_stdout`) and appending to `file` when given.
    pub fn open(agent_name: &str, to_stdout: bool, file: Option<&Path>) -> std::io::Result<Self> {
        let file = match file {
            Some(path) => {
                let file = match OpenOptions::new()
                    .create(true)
                    .read(true)
                    .append(true)
                    .open(path)
                {
                    Ok(mut file) => {
                        end_torn_line(&mut file)?;
                        file
                    }
                    // A file the agent may append to but not read: no check for a torn line.
                    Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                        OpenOptions::new().append(true).open(path)?
                    }
                    Err(e) => return Err(e),
                };
                Some(Arc::new(Mutex::new(file)))
            }
            None => None,
        };
        Ok(ChangeLog {
            agent: AgentRef {
                name: agent_name.to_string(),
                version: env!("CARGO_PKG_VERSION").to_string(),
            },
            to_stdout,
            file,
            seen: Arc::default(),
            opened_at: k8s_openapi::jiff::Timestamp::now(),
            recent: None,
        })
    }

    /// Also keeps the last `capacity` lines in memory (the agent's web view shows them).
    pub fn keep_recent(mut self, capacity: usize) -> Self {
        self.recent = Some(Arc::new(Recent {
            lines: Mutex::new(std::collections::VecDeque::with_capacity(capacity)),
            capacity: capacity.max(1),
            written: std::sync::atomic::AtomicU64::new(0),
        }));
        self
    }

    /// The lines kept in memory, when [`ChangeLog::keep_recent`] asked for them.
    pub fn recent(&self) -> Option<Arc<Recent>> {
        self.recent.clone()
    }

    /// True the first time this process asks about `uid`: the moment to look for a pass a
    /// previous process left unfinished.
    pub fn first_look(&self, uid: &str) -> bool {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(uid.to_string())
    }

    /// When this process opened the log.
    pub fn opened_at(&self) -> k8s_openapi::jiff::Timestamp {
        self.opened_at
    }

    /// A marker for `bundle_deployment` stamped now; fill in the rest.
    pub fn marker(&self, bundle_deployment: &str, marker: &'static str) -> Marker {
        Marker {
            schema: SCHEMA,
            time: k8s_openapi::jiff::Timestamp::now().to_string(),
            agent: self.agent.clone(),
            marker,
            bundle_deployment: bundle_deployment.to_string(),
            revision: None,
            digest: None,
            details: serde_json::Map::new(),
        }
    }

    /// Writes a marker line, and fsyncs the file: it explains a gap, so it must outlast one.
    pub fn record_marker(&self, marker: &Marker) {
        match serde_json::to_string(marker) {
            Ok(line) => self.write_line(line),
            Err(e) => tracing::error!(error = %e, "change log marker could not be encoded"),
        }
        self.sync();
    }

    /// Flushes the file to disk (`fdatasync`); called once per pass that wrote.
    pub fn sync(&self) {
        if let Some(file) = &self.file {
            let file = file.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = file.sync_data() {
                tracing::error!(error = %e, "change log: fsync failed");
            }
        }
    }

    /// A change log that writes nowhere (for tools that make no changes).
    pub fn disabled() -> Self {
        ChangeLog {
            agent: AgentRef {
                name: "pallet".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
            to_stdout: false,
            file: None,
            seen: Arc::default(),
            opened_at: k8s_openapi::jiff::Timestamp::now(),
            recent: None,
        }
    }

    /// A new entry for `bundle_deployment` stamped now, with result success; fill in the rest.
    pub fn entry(
        &self,
        bundle_deployment: &str,
        operation: Operation,
        reason: Reason,
        object: ObjectRef,
    ) -> Entry {
        Entry {
            schema: SCHEMA,
            time: k8s_openapi::jiff::Timestamp::now().to_string(),
            agent: self.agent.clone(),
            bundle_deployment: bundle_deployment.to_string(),
            revision: None,
            digest: None,
            operation,
            reason,
            object,
            resource_version_before: None,
            resource_version_after: None,
            fields_changed: Vec::new(),
            result: "success",
            error: None,
            details: serde_json::Map::new(),
        }
    }

    /// Writes one entry as one line, at once (see the module doc). A failure to write the log
    /// never fails the change itself; it is reported in the agent's own log.
    pub fn record(&self, entry: &Entry) {
        match serde_json::to_string(entry) {
            Ok(line) => self.write_line(line),
            Err(e) => tracing::error!(error = %e, "change log entry could not be encoded"),
        }
    }

    /// One `write` per destination for the whole line (a kill never leaves half a line behind
    /// another), stdout flushed.
    fn write_line(&self, mut line: String) {
        if let Some(recent) = &self.recent {
            recent.push(&line);
        }
        line.push('\n');
        if self.to_stdout {
            let mut out = std::io::stdout().lock();
            if let Err(e) = out.write_all(line.as_bytes()).and_then(|()| out.flush()) {
                tracing::error!(error = %e, "change log: stdout write failed");
            }
        }
        if let Some(file) = &self.file {
            let mut file = file.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = file.write_all(line.as_bytes()) {
                tracing::error!(error = %e, "change log: file write failed");
            }
        }
    }
}

/// Ends a last line left without its newline (a write cut short by a full disk), so that the
/// next entry starts a line of its own.
fn end_torn_line(file: &mut File) -> std::io::Result<()> {
    let metadata = file.metadata()?;
    if !metadata.is_file() || metadata.len() == 0 {
        return Ok(()); // a pipe or a device (`/dev/stdout`): nothing to look back at
    }
    file.seek(SeekFrom::End(-1))?;
    let mut last = [0u8; 1];
    file.read_exact(&mut last)?;
    if last[0] != b'\n' {
        file.write_all(b"\n")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_serializes_to_the_documented_schema() {
        let log = ChangeLog::disabled();
        let mut entry = log.entry(
            "argocd",
            Operation::Update,
            Reason::Drift,
            ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("ns".into()),
                name: "c".into(),
            },
        );
        entry.revision = Some(3);
        entry.digest = Some("sha256:abc".into());
        entry.resource_version_before = Some("1".into());
        entry.resource_version_after = Some("2".into());
        entry.fields_changed = vec![".data.a".into()];
        let json = serde_json::to_value(&entry).unwrap();
        assert_eq!(json["schema"], "pallet.dev/change/v1");
        assert_eq!(json["operation"], "update");
        assert_eq!(json["reason"], "drift");
        assert_eq!(json["bundleDeployment"], "argocd");
        assert_eq!(
            json["object"],
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "ns", "name": "c"})
        );
        assert_eq!(json["fieldsChanged"][0], ".data.a");
        assert_eq!(json["result"], "success");
        assert!(json.get("error").is_none());
        assert_eq!(
            serde_json::to_value(Reason::NewRevision).unwrap(),
            "new-revision"
        );
    }

    #[test]
    fn file_gets_one_line_per_entry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("changes.jsonl");
        let log = ChangeLog::open("pallet", false, Some(&path)).unwrap();
        let object = ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: None,
            name: "c".into(),
        };
        log.record(&log.entry("a", Operation::Create, Reason::NewRevision, object.clone()));
        log.record(&log.entry("a", Operation::Delete, Reason::Prune, object));
        let text = std::fs::read_to_string(&path).unwrap();
        let ops: Vec<String> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["operation"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(ops, ["create", "delete"]);
    }

    #[test]
    fn a_torn_last_line_is_ended_and_markers_carry_no_write_fields() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("changes.jsonl");
        std::fs::write(&path, "{\"schema\":\"torn").unwrap();
        let log = ChangeLog::open("pallet", false, Some(&path)).unwrap();
        let mut marker = log.marker("a", MARKER_INTERRUPTED);
        marker.revision = Some(2);
        marker
            .details
            .insert("unloggedWritesAtMost".into(), serde_json::json!(4));
        log.record_marker(&marker);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        let json: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(json["marker"], "interrupted-pass");
        assert_eq!(json["schema"], SCHEMA);
        assert_eq!(json["bundleDeployment"], "a");
        assert_eq!(json["revision"], 2);
        assert_eq!(json["details"]["unloggedWritesAtMost"], 4);
        assert!(json.get("operation").is_none() && json.get("object").is_none());
    }

    #[test]
    fn first_look_is_true_once_per_uid() {
        let log = ChangeLog::disabled();
        assert!(log.first_look("u1"));
        assert!(!log.clone().first_look("u1"), "clones share what was seen");
        assert!(log.first_look("u2"));
    }

    #[test]
    fn the_last_lines_are_kept_in_memory_when_asked() {
        let log = ChangeLog::disabled().keep_recent(2);
        let object = ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: None,
            name: "a".into(),
        };
        for name in ["one", "two", "three"] {
            log.record(&log.entry(name, Operation::Create, Reason::NewRevision, object.clone()));
        }
        let recent = log.recent().unwrap();
        assert_eq!(recent.written(), 3);
        let lines = recent.lines();
        assert_eq!(lines.len(), 2);
        assert!(
            lines[0].contains(r#""bundleDeployment":"two""#),
            "{}",
            lines[0]
        );
        assert!(lines[1].contains(r#""bundleDeployment":"three""#));
        assert!(ChangeLog::disabled().recent().is_none());
    }
}
