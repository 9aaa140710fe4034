//! The change log: one JSON line for every create, update and delete the agent makes to a
//! bundle's objects, with the why (reason, revision) next to the what.
//!
//! Schema (version 1; fields are only ever added):
//!
//! | field | meaning |
//! | --- | --- |
//! | `schema` | `pallet.dev/change/v1` |
//! | `time` | RFC 3339 UTC time of the write |
//! | `agent` | `{name, version}` of the agent that wrote |
//! | `bundleDeployment` | name of the BundleDeployment |
//! | `revision` | number of the revision being applied (an integer), when known |
//! | `digest` | content digest (`sha256:…`) of that revision's rendered set, when known |
//! | `operation` | `create`, `update` or `delete` |
//! | `reason` | `new-revision`, `drift`, `rollback`, `prune`, `adoption`, `deletion`, `hook` or `certificate` |
//! | `object` | `{apiVersion, kind, namespace?, name}` |
//! | `resourceVersionBefore` / `resourceVersionAfter` | around the write, when known |
//! | `fieldsChanged` | field paths that differed (never values: they may be secret) |
//! | `result` | `success` or `failure` |
//! | `error` | the error message, on failure |
//! | `details` | free-form object (e.g. the previous owner on adoption) |
//!
//! Lines go to stdout (the agent's logs go to stderr) and, with `--change-log FILE`, are appended
//! to that file too.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde::Serialize;

/// Schema identifier written in every entry.
pub const SCHEMA: &str = "pallet.dev/change/v1";

/// What kind of write.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
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
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
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
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// apiVersion.
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
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct AgentRef {
    /// Agent name (its field manager / reporter name).
    pub name: String,
    /// Agent version.
    pub version: String,
}

/// One change-log entry.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// RFC 3339 time.
    pub time: String,
    /// Who wrote.
    pub agent: AgentRef,
    /// For which BundleDeployment.
    pub bundle_deployment: String,
    /// Number of the revision being applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// Content digest of that revision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// What kind of write.
    pub operation: Operation,
    /// Why.
    pub reason: Reason,
    /// The object.
    pub object: ObjectRef,
    /// resourceVersion before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version_before: Option<String>,
    /// resourceVersion after.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version_after: Option<String>,
    /// Field paths that changed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields_changed: Vec<String>,
    /// `success` or `failure`.
    pub result: &'static str,
    /// Error message on failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Free-form details.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub details: serde_json::Map<String, serde_json::Value>,
}

/// Where change-log lines go.
pub struct ChangeLog {
    agent: AgentRef,
    to_stdout: bool,
    file: Option<Mutex<File>>,
}

impl ChangeLog {
    /// A change log writing to stdout (when `to_stdout`) and appending to `file` when given.
    pub fn open(agent_name: &str, to_stdout: bool, file: Option<&Path>) -> std::io::Result<Self> {
        let file = match file {
            Some(path) => Some(Mutex::new(
                OpenOptions::new().create(true).append(true).open(path)?,
            )),
            None => None,
        };
        Ok(ChangeLog {
            agent: AgentRef {
                name: agent_name.to_string(),
                version: env!("CARGO_PKG_VERSION").to_string(),
            },
            to_stdout,
            file,
        })
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

    /// Writes one entry as one line. A failure to write the log never fails the change itself;
    /// it is reported in the agent's own log.
    pub fn record(&self, entry: &Entry) {
        let line = match serde_json::to_string(entry) {
            Ok(line) => line,
            Err(e) => {
                tracing::error!(error = %e, "change log entry could not be encoded");
                return;
            }
        };
        if self.to_stdout {
            let mut out = std::io::stdout().lock();
            if let Err(e) = writeln!(out, "{line}") {
                tracing::error!(error = %e, "change log: stdout write failed");
            }
        }
        if let Some(file) = &self.file {
            let mut file = file.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = writeln!(file, "{line}") {
                tracing::error!(error = %e, "change log: file write failed");
            }
        }
    }
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
}
