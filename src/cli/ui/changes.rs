//! The change-log stream of a bundle's page: the agent's change-log lines about one
//! BundleDeployment, newest first, from the agent's memory (the agent's view) or from the
//! change-log file (`pallet ui --change-log FILE`).

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;

use crate::changelog::Recent;

/// The most of a change-log file read (its end): the page shows recent lines only.
const FILE_TAIL_BYTES: u64 = 4 << 20;
/// Lines shown on a bundle's page.
pub const SHOWN: usize = 100;

/// Where the change log is read.
#[derive(Clone, Default)]
pub enum ChangeSource {
    /// Nowhere: the page says how to see it.
    #[default]
    None,
    /// The end of a file the agent appends to (`pallet agent --change-log FILE`).
    File(PathBuf),
    /// The agent's own recent lines.
    Memory(Arc<Recent>),
}

/// One line of the stream, as the page shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// RFC 3339 time.
    pub time: String,
    /// `create`, `update`, `delete`, or the marker's name.
    pub operation: String,
    /// Why (`new-revision`, `drift`, …); empty for markers.
    pub reason: String,
    /// `Kind namespace/name`, or the marker's message.
    pub object: String,
    /// The revision applied.
    pub revision: Option<i64>,
    /// Field paths changed.
    pub fields: Vec<String>,
    /// `success`, `failure`, `skipped`; `marker` for markers.
    pub result: String,
    /// The error, on failure.
    pub error: Option<String>,
}

impl ChangeSource {
    /// A number that moves when new lines may have arrived.
    pub fn version(&self) -> u64 {
        match self {
            ChangeSource::None => 0,
            ChangeSource::File(path) => std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
            ChangeSource::Memory(recent) => recent.written(),
        }
    }

    /// Whether there is a change log to show.
    pub fn is_configured(&self) -> bool {
        !matches!(self, ChangeSource::None)
    }

    /// The last [`SHOWN`] lines about `bundle`, newest first.
    pub fn recent(&self, bundle: &str) -> std::io::Result<Vec<Change>> {
        match self {
            ChangeSource::None => Ok(Vec::new()),
            ChangeSource::File(path) => Ok(changes_of(&tail(path)?, bundle, SHOWN)),
            ChangeSource::Memory(recent) => {
                let text: String = recent
                    .lines()
                    .iter()
                    .flat_map(|l| [l.as_ref(), "\n"])
                    .collect();
                Ok(changes_of(&text, bundle, SHOWN))
            }
        }
    }
}

/// The last [`FILE_TAIL_BYTES`] of `path`, from its first whole line.
fn tail(path: &std::path::Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let length = file.metadata()?.len();
    let start = length.saturating_sub(FILE_TAIL_BYTES);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.take(FILE_TAIL_BYTES).read_to_end(&mut bytes)?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Ok(match (start, text.find('\n')) {
        (0, _) => text,
        (_, Some(cut)) => text[cut + 1..].to_string(),
        (_, None) => String::new(),
    })
}

fn object_text(object: &Value) -> String {
    let kind = object["kind"].as_str().unwrap_or_default();
    let name = object["name"].as_str().unwrap_or_default();
    match object["namespace"].as_str() {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// The lines of `text` about `bundle` (the last `limit`, newest first). Lines that are not
/// change-log JSON are skipped.
pub fn changes_of(text: &str, bundle: &str, limit: usize) -> Vec<Change> {
    let mut changes: Vec<Change> = text
        .lines()
        .filter(|l| l.contains(bundle))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| {
            v["schema"].as_str() == Some(crate::changelog::SCHEMA)
                && v["bundleDeployment"].as_str() == Some(bundle)
        })
        .map(|v| {
            let text = |key: &str| v[key].as_str().unwrap_or_default().to_string();
            match v["marker"].as_str() {
                Some(marker) => Change {
                    time: text("time"),
                    operation: marker.to_string(),
                    reason: String::new(),
                    object: v["details"]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    revision: v["revision"].as_i64(),
                    fields: Vec::new(),
                    result: "marker".into(),
                    error: None,
                },
                None => Change {
                    time: text("time"),
                    operation: text("operation"),
                    reason: text("reason"),
                    object: object_text(&v["object"]),
                    revision: v["revision"].as_i64(),
                    fields: v["fieldsChanged"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|f| f.as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default(),
                    result: text("result"),
                    error: v["error"].as_str().map(str::to_string),
                },
            }
        })
        .collect();
    let skip = changes.len().saturating_sub(limit);
    changes.drain(..skip);
    changes.reverse();
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = r#"{"schema":"pallet.dev/change/v1","time":"t1","agent":{"name":"pallet","version":"0"},"bundleDeployment":"web","revision":1,"operation":"create","reason":"new-revision","object":{"apiVersion":"v1","kind":"ConfigMap","namespace":"web","name":"conf"},"result":"success"}
not json, web
{"schema":"pallet.dev/change/v1","time":"t2","agent":{"name":"pallet","version":"0"},"bundleDeployment":"other","revision":1,"operation":"create","reason":"new-revision","object":{"apiVersion":"v1","kind":"ConfigMap","name":"web"},"result":"success"}
{"schema":"pallet.dev/change/v1","time":"t3","agent":{"name":"pallet","version":"0"},"bundleDeployment":"web","revision":2,"operation":"update","reason":"drift","object":{"apiVersion":"apps/v1","kind":"Deployment","namespace":"web","name":"web"},"fieldsChanged":[".spec.replicas"],"result":"failure","error":"forbidden"}
{"schema":"pallet.dev/change/v1","time":"t4","agent":{"name":"pallet","version":"0"},"marker":"interrupted-pass","bundleDeployment":"web","revision":2,"details":{"message":"an agent stopped"}}
"#;

    #[test]
    fn the_stream_is_the_bundles_lines_newest_first() {
        let changes = changes_of(LOG, "web", 10);
        let times: Vec<&str> = changes.iter().map(|c| c.time.as_str()).collect();
        assert_eq!(times, ["t4", "t3", "t1"]);
        assert_eq!(changes[0].result, "marker");
        assert_eq!(changes[0].object, "an agent stopped");
        assert_eq!(changes[1].object, "Deployment web/web");
        assert_eq!(changes[1].fields, [".spec.replicas"]);
        assert_eq!(changes[1].error.as_deref(), Some("forbidden"));
        assert_eq!(changes[2].object, "ConfigMap web/conf");
        assert_eq!(changes_of(LOG, "web", 1).len(), 1);
    }

    #[test]
    fn a_file_is_read_from_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("changes.jsonl");
        std::fs::write(&path, LOG).unwrap();
        let source = ChangeSource::File(path);
        assert_eq!(source.recent("web").unwrap().len(), 3);
        assert_eq!(source.version(), LOG.len() as u64);
        let memory = crate::changelog::ChangeLog::disabled().keep_recent(2);
        assert_eq!(memory.recent().unwrap().lines().len(), 0);
    }
}
