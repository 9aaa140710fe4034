//! Finishing a takeover (`spec.takeover`) once every object of the active revision is applied:
//! what happens to a Helm release's records, and the record of the takeover in status.
//!
//! `helm uninstall` deletes what the release's last record lists, whoever owns those objects
//! now (helm v3.19 `pkg/action/uninstall.go` reads the stored manifest and never looks at the
//! live objects' annotations). So records left as they were would let a later `helm uninstall`
//! delete every object pallet took over. They are either deleted (helm forgets the release) or
//! kept with the last one marked `uninstalled`, the state `helm uninstall --keep-history`
//! leaves: `helm list` hides it, `helm upgrade` refuses it ("has no deployed releases"), and
//! `helm uninstall` then only purges the records, running no hook and deleting no object.
//!
//! The records are done only after the objects: a takeover that fails half-way leaves the
//! release to helm, which still lists and manages it.
//!
//! Records are read by their metadata (paged, at most [`MAX_RECORDS`]), and only those the
//! takeover rewrites are read whole and decoded, under a [`RecordBudget`]: helm's own records
//! are a few MiB of JSON, and a record is a Secret anyone who may write Secrets in the
//! release's namespace can forge. [`check_records`] decodes them before anything of the
//! takeover is applied: a record over its budget stops the takeover there (`TakeoverFailed`,
//! naming the bound), with the active revision still applied.

use std::io::{Read, Write};

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, ListParams, PartialObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::{now, Context, ReconcileError};
use crate::api::{BundleDeployment, BundleDeploymentStatus, ReleaseRecords, TakeoverStatus};

/// Condition and Event reason of a takeover whose release records cannot be handled.
pub const REASON_TAKEOVER_FAILED: &str = "TakeoverFailed";

/// Event reason when a takeover is done.
pub const REASON_TAKEN_OVER: &str = "TakenOver";

/// Records of one release read at most (by their metadata; helm keeps 10 by default).
pub const MAX_RECORDS: usize = 10_000;
/// Records of one release rewritten (so read whole) at most: the last, and those still marked
/// `deployed` (helm leaves one).
pub const MAX_DECODED_RECORDS: usize = 16;
/// Records listed per request.
const RECORDS_PAGE: u32 = 100;

/// What a release record may inflate to when it is decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordBudget {
    /// Bytes of the decoded record (its JSON).
    pub max_bytes: u64,
    /// Times its stored (compressed) size the decoded record may be, past [`RATIO_FLOOR`].
    pub max_ratio: u64,
}

/// Decoded records below this size are not held to the ratio (a small record of repetitive
/// objects compresses very well).
pub const RATIO_FLOOR: u64 = 4 << 20;

impl RecordBudget {
    /// The defaults: 32 MiB (helm's records of the largest real-world charts are a few MiB of
    /// JSON), 200 times the compressed size (JSON compresses 5 to 20 times).
    pub const DEFAULT: RecordBudget = RecordBudget {
        max_bytes: 32 << 20,
        max_ratio: 200,
    };

    /// The most bytes a record stored in `compressed` bytes may decode to.
    pub fn limit(&self, compressed: usize) -> u64 {
        let by_ratio = (compressed as u64)
            .saturating_mul(self.max_ratio)
            .max(RATIO_FLOOR);
        self.max_bytes.min(by_ratio)
    }
}

impl Default for RecordBudget {
    fn default() -> Self {
        RecordBudget::DEFAULT
    }
}

/// The budget named when a record inflates past its limit.
pub const RECORD_BUDGET: &str =
    "the release record limit (--takeover-record-max-mib, and 200 times the record's stored size)";

/// Handles the previous owner's records and records the takeover in `work`, once: a
/// BundleDeployment whose status already records this takeover costs nothing here.
pub(super) async fn finish(
    ctx: &Context,
    bd: &BundleDeployment,
    client: &Client,
    work: &mut BundleDeploymentStatus,
) -> Result<(), ReconcileError> {
    let Some(takeover) = &bd.spec.takeover else {
        return Ok(());
    };
    if takeover.done_in(work.takeover.as_ref()) {
        return Ok(());
    }
    let records = match takeover.helm_release() {
        Some((release, namespace)) => {
            let release = Release {
                client,
                name: release,
                namespace,
                budget: ctx.settings.takeover_records,
            };
            Some(handle_records(&release, takeover.release_records(), &bd.name_any()).await?)
        }
        None => None,
    };
    work.takeover = Some(TakeoverStatus {
        from: takeover.from,
        name: takeover.name.clone(),
        namespace: takeover.namespace.clone(),
        release_records: records.map(str::to_string),
        completed_at: now(),
    });
    let records = match records {
        Some(done) => format!("; the release's records: {done}"),
        None => String::new(),
    };
    ctx.records
        .event(
            bd,
            false,
            REASON_TAKEN_OVER,
            "Takeover",
            format!("took over the objects of {takeover}{records}"),
        )
        .await;
    Ok(())
}

fn failed(message: String) -> ReconcileError {
    ReconcileError::Secret {
        reason: REASON_TAKEOVER_FAILED,
        message,
    }
}

fn kube_error(context: String, source: kube::Error) -> ReconcileError {
    match source {
        kube::Error::Api(status) if status.code == 403 => {
            failed(format!("{context}: forbidden: {}", status.message))
        }
        source => ReconcileError::Kube { context, source },
    }
}

/// A Helm release whose records are read, and how.
struct Release<'a> {
    client: &'a Client,
    name: &'a str,
    namespace: &'a str,
    budget: RecordBudget,
}

/// One record as its metadata says: its Secret's name, release version and status label.
struct RecordMeta {
    name: String,
    version: i64,
    status: String,
}

impl Release<'_> {
    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), self.namespace)
    }

    /// The release's records by their metadata, oldest first (paged; at most [`MAX_RECORDS`]).
    async fn records(&self) -> Result<Vec<RecordMeta>, ReconcileError> {
        let (namespace, release) = (self.namespace, self.name);
        let selector = format!("owner=helm,name={release}");
        let secrets = self.secrets();
        let mut records = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut params = ListParams::default().labels(&selector).limit(RECORDS_PAGE);
            if let Some(token) = &token {
                params = params.continue_token(token);
            }
            let page = secrets.list_metadata(&params).await.map_err(|e| {
                kube_error(
                    format!("list the records of Helm release {namespace}/{release}"),
                    e,
                )
            })?;
            records.extend(page.items.iter().map(record_meta));
            if records.len() > MAX_RECORDS {
                return Err(failed(format!(
                    "Helm release {namespace}/{release} has more than {MAX_RECORDS} records \
                     (Secrets labelled {selector}): refused, the takeover does not proceed"
                )));
            }
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                break;
            }
        }
        records.sort_by_key(|r| r.version);
        Ok(records)
    }

    /// A record's Secret, read whole, with its decoded release (under the budget).
    async fn read(&self, name: &str) -> Result<Option<(Secret, Value)>, ReconcileError> {
        let namespace = self.namespace;
        let Some(secret) = self
            .secrets()
            .get_opt(name)
            .await
            .map_err(|e| kube_error(format!("read Secret {namespace}/{name}"), e))?
        else {
            return Ok(None);
        };
        let encoded = secret
            .data
            .as_ref()
            .and_then(|data| data.get("release"))
            .ok_or_else(|| {
                failed(format!(
                    "Secret {namespace}/{name} holds no Helm release record"
                ))
            })?;
        let record = decode_record(&encoded.0, self.budget)
            .map_err(|why| failed(format!("Secret {namespace}/{name}: {why}")))?;
        Ok(Some((secret, record)))
    }
}

fn record_meta(meta: &PartialObjectMeta<Secret>) -> RecordMeta {
    let labels = meta.metadata.labels.clone().unwrap_or_default();
    RecordMeta {
        name: meta.metadata.name.clone().unwrap_or_default(),
        version: labels
            .get("version")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        status: labels.get("status").cloned().unwrap_or_default(),
    }
}

/// The records marking rewrites: the last (unless already `uninstalled`) and every earlier
/// one still `deployed`; indexes into `records`, oldest first.
fn to_rewrite(records: &[RecordMeta]) -> Vec<usize> {
    let last = records.len().saturating_sub(1);
    (0..records.len())
        .filter(|&i| {
            if i == last {
                records[i].status != "uninstalled"
            } else {
                records[i].status == "deployed"
            }
        })
        .collect()
}

/// Reads and decodes, under its budget, every record the takeover of `bd` would rewrite,
/// before anything of the takeover is applied: a record over its budget (or too many records)
/// stops the takeover here. Nothing to do for a takeover already recorded, or one whose
/// records are deleted (they are never decoded).
pub(super) async fn check_records(
    ctx: &Context,
    bd: &BundleDeployment,
    workload: &super::workload::Workload,
) -> Result<(), ReconcileError> {
    let Some(takeover) = &bd.spec.takeover else {
        return Ok(());
    };
    let recorded = bd.status.as_ref().and_then(|s| s.takeover.as_ref());
    if takeover.done_in(recorded) || takeover.release_records() != ReleaseRecords::MarkUninstalled {
        return Ok(());
    }
    let Some((name, namespace)) = takeover.helm_release() else {
        return Ok(());
    };
    let client = workload.writer.clone();
    let release = Release {
        client: &client,
        name,
        namespace,
        budget: ctx.settings.takeover_records,
    };
    let records = release.records().await?;
    let rewrite = to_rewrite(&records);
    if rewrite.len() > MAX_DECODED_RECORDS {
        return Err(failed(format!(
            "Helm release {namespace}/{name} has {} records marked deployed, more than \
             {MAX_DECODED_RECORDS}: refused, the takeover does not proceed",
            rewrite.len()
        )));
    }
    for index in rewrite {
        release.read(&records[index].name).await?;
    }
    Ok(())
}

/// Deletes or marks the records of Helm release `release`; says which.
async fn handle_records(
    release: &Release<'_>,
    policy: ReleaseRecords,
    owner: &str,
) -> Result<&'static str, ReconcileError> {
    let namespace = release.namespace;
    let records = release.records().await?;
    if records.is_empty() {
        return Ok("NotFound");
    }
    let secrets = release.secrets();
    match policy {
        ReleaseRecords::Delete => {
            for record in &records {
                let name = &record.name;
                match secrets.delete(name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(e) => {
                        return Err(kube_error(format!("delete Secret {namespace}/{name}"), e))
                    }
                }
            }
            Ok("Deleted")
        }
        ReleaseRecords::MarkUninstalled => {
            let last = records.len() - 1;
            let description = format!("Taken over by pallet BundleDeployment {owner}");
            let rewrite = to_rewrite(&records);
            if rewrite.len() > MAX_DECODED_RECORDS {
                return Err(failed(format!(
                    "Helm release {namespace}/{} has {} records marked deployed, more than \
                     {MAX_DECODED_RECORDS}",
                    release.name,
                    rewrite.len()
                )));
            }
            for index in rewrite {
                let Some((secret, record)) = release.read(&records[index].name).await? else {
                    continue;
                };
                if index == last {
                    let marking = Marking {
                        status: "uninstalled",
                        description: Some(&description),
                    };
                    mark(&secrets, secret, record, marking, namespace).await?;
                } else {
                    // As `helm uninstall --keep-history` does: no earlier record stays deployed.
                    let marking = Marking {
                        status: "superseded",
                        description: None,
                    };
                    mark(&secrets, secret, record, marking, namespace).await?;
                }
            }
            Ok("MarkedUninstalled")
        }
    }
}

/// The status (and description) a record is given.
struct Marking<'a> {
    status: &'a str,
    description: Option<&'a str>,
}

/// Sets a record's status (and description) in its body and its `status` label, unless it is
/// already so (an earlier record that is not `deployed` keeps what it says).
async fn mark(
    secrets: &Api<Secret>,
    mut secret: Secret,
    mut record: Value,
    marking: Marking<'_>,
    namespace: &str,
) -> Result<(), ReconcileError> {
    let Marking {
        status,
        description,
    } = marking;
    let name = secret.name_any();
    let current = secret.labels().get("status").cloned().unwrap_or_default();
    if description.is_none() && current != "deployed" {
        return Ok(());
    }
    if description.is_some() && current == status {
        return Ok(());
    }
    set_status(&mut record, status, description, &now_rfc3339());
    let encoded = encode_record(&record)
        .map_err(|why| failed(format!("Secret {namespace}/{name}: {why}")))?;
    secret
        .data
        .get_or_insert_with(Default::default)
        .insert("release".into(), ByteString(encoded));
    let now_seconds = k8s_openapi::jiff::Timestamp::now().as_second().to_string();
    let labels = secret.labels_mut();
    labels.insert("status".into(), status.into());
    labels.insert("modifiedAt".into(), now_seconds);
    // A replace carries the resourceVersion read: a concurrent change to the record is a 409,
    // retried at the next pass.
    secrets
        .replace(&name, &PostParams::default(), &secret)
        .await
        .map_err(|e| kube_error(format!("update Secret {namespace}/{name}"), e))?;
    Ok(())
}

fn now_rfc3339() -> String {
    now().0.to_string()
}

/// Sets `info.status` (and `info.description`, `info.deleted` for an uninstall) of a release
/// record.
fn set_status(record: &mut Value, status: &str, description: Option<&str>, now: &str) {
    if !record.get("info").is_some_and(Value::is_object) {
        record["info"] = Value::Object(Default::default());
    }
    record["info"]["status"] = Value::String(status.into());
    if let Some(description) = description {
        record["info"]["description"] = Value::String(description.into());
        record["info"]["deleted"] = Value::String(now.into());
    }
}

/// A Helm release record as its Secret stores it: base64 of the gzipped JSON (helm's storage
/// driver also reads records that are not gzipped), decoded under `budget`: inflating stops at
/// its limit, counted as the bytes come out of the decompressor.
pub fn decode_record(stored: &[u8], budget: RecordBudget) -> Result<Value, String> {
    let compressed = base64::engine::general_purpose::STANDARD
        .decode(stored)
        .map_err(|e| format!("the release record is not base64: {e}"))?;
    let limit = budget.limit(compressed.len());
    let over = |read: u64| {
        format!(
            "the release record decodes to more than {limit} bytes ({read} read from {} stored), \
             over {RECORD_BUDGET}: refused, the takeover does not proceed",
            compressed.len()
        )
    };
    let json = if compressed.starts_with(&[0x1f, 0x8b]) {
        let mut text = Vec::new();
        flate2::read::GzDecoder::new(compressed.as_slice())
            .take(limit.saturating_add(1))
            .read_to_end(&mut text)
            .map_err(|e| format!("the release record is not gzip: {e}"))?;
        if text.len() as u64 > limit {
            return Err(over(text.len() as u64));
        }
        text
    } else {
        if compressed.len() as u64 > limit {
            return Err(over(compressed.len() as u64));
        }
        compressed
    };
    serde_json::from_slice(&json).map_err(|e| format!("the release record is not JSON: {e}"))
}

/// The stored form of a release record (see [`decode_record`]).
pub fn encode_record(record: &Value) -> Result<Vec<u8>, String> {
    let json = serde_json::to_vec(record).map_err(|e| e.to_string())?;
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gzip.write_all(&json).map_err(|e| e.to_string())?;
    let compressed = gzip.finish().map_err(|e| e.to_string())?;
    Ok(base64::engine::general_purpose::STANDARD
        .encode(compressed)
        .into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_record_survives_decoding_and_encoding() {
        let record = json!({"name": "shop", "version": 2, "info": {"status": "deployed"},
                            "manifest": "---\n# Source: x\n"});
        let stored = encode_record(&record).unwrap();
        let budget = RecordBudget::DEFAULT;
        assert_eq!(decode_record(&stored, budget).unwrap(), record);
        // Not gzipped: read as plain JSON, as helm reads it.
        let plain = base64::engine::general_purpose::STANDARD.encode(record.to_string());
        assert_eq!(decode_record(plain.as_bytes(), budget).unwrap(), record);
        assert!(decode_record(b"%%%", budget).is_err());
    }

    #[test]
    fn a_record_bomb_is_refused_at_its_limit() {
        // 64 MiB of one byte, gzipped to about 64 KiB: a ratio of a thousand.
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let chunk = vec![b' '; 1 << 20];
        gzip.write_all(b"{\"manifest\": \"").unwrap();
        for _ in 0..64 {
            gzip.write_all(&chunk).unwrap();
        }
        gzip.write_all(b"\"}").unwrap();
        let compressed = gzip.finish().unwrap();
        let stored = base64::engine::general_purpose::STANDARD.encode(&compressed);
        let budget = RecordBudget::DEFAULT;
        let err = decode_record(stored.as_bytes(), budget).unwrap_err();
        let limit = budget.limit(compressed.len());
        assert!(limit < 32 << 20, "the ratio bounds it first: {limit}");
        assert!(
            err.contains(&format!("more than {limit} bytes"))
                && err.contains("--takeover-record-max-mib")
                && err.contains("the takeover does not proceed"),
            "{err}"
        );
        // The size alone bounds a record that compresses as JSON does.
        let small = RecordBudget {
            max_bytes: 1 << 10,
            max_ratio: 200,
        };
        let record = json!({"manifest": "x".repeat(4096)});
        let err = decode_record(&encode_record(&record).unwrap(), small).unwrap_err();
        assert!(err.contains("more than 1024 bytes"), "{err}");
    }

    #[test]
    fn the_ratio_spares_small_records() {
        let budget = RecordBudget::DEFAULT;
        assert_eq!(budget.limit(100), RATIO_FLOOR);
        assert_eq!(budget.limit(100_000), 20_000_000);
        assert_eq!(budget.limit(1 << 20), 32 << 20);
    }

    #[test]
    fn marking_rewrites_the_last_record_and_those_still_deployed() {
        let meta = |version, status: &str| RecordMeta {
            name: format!("v{version}"),
            version,
            status: status.into(),
        };
        let records = vec![
            meta(1, "superseded"),
            meta(2, "deployed"),
            meta(3, "deployed"),
        ];
        assert_eq!(to_rewrite(&records), vec![1, 2]);
        let done = vec![meta(1, "superseded"), meta(2, "uninstalled")];
        assert!(to_rewrite(&done).is_empty());
    }

    #[test]
    fn marking_uninstalled_says_who_took_it_over_and_when() {
        let mut record = json!({"info": {"status": "deployed", "description": "Install complete"}});
        set_status(
            &mut record,
            "uninstalled",
            Some("Taken over by pallet BundleDeployment shop"),
            "2025-01-01T00:00:00Z",
        );
        assert_eq!(
            record["info"],
            json!({"status": "uninstalled", "description": "Taken over by pallet BundleDeployment shop",
                   "deleted": "2025-01-01T00:00:00Z"})
        );
        let mut old = json!({"info": {"status": "deployed", "description": "Install complete"}});
        set_status(&mut old, "superseded", None, "now");
        assert_eq!(
            old["info"],
            json!({"status": "superseded", "description": "Install complete"})
        );
    }
}
