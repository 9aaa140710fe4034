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

use std::io::{Read, Write};

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::{now, Context, ReconcileError};
use crate::api::{BundleDeployment, BundleDeploymentStatus, ReleaseRecords, TakeoverStatus};

/// Condition and Event reason of a takeover whose release records cannot be handled.
pub const REASON_TAKEOVER_FAILED: &str = "TakeoverFailed";

/// Event reason when a takeover is done.
pub const REASON_TAKEN_OVER: &str = "TakenOver";

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
        Some((release, namespace)) => Some(
            handle_records(
                client,
                release,
                namespace,
                takeover.release_records(),
                &bd.name_any(),
            )
            .await?,
        ),
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

/// Deletes or marks the records of Helm release `release` in `namespace`; says which.
async fn handle_records(
    client: &Client,
    release: &str,
    namespace: &str,
    policy: ReleaseRecords,
    owner: &str,
) -> Result<&'static str, ReconcileError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let selector = format!("owner=helm,name={release}");
    let list = secrets
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| {
            kube_error(
                format!("list the records of Helm release {namespace}/{release}"),
                e,
            )
        })?;
    let mut records: Vec<(i64, Secret)> = list
        .items
        .into_iter()
        .map(|s| (record_version(&s), s))
        .collect();
    if records.is_empty() {
        return Ok("NotFound");
    }
    records.sort_by_key(|(version, _)| *version);
    match policy {
        ReleaseRecords::Delete => {
            for (_, secret) in &records {
                let name = secret.name_any();
                match secrets.delete(&name, &DeleteParams::default()).await {
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
            for (index, (_, secret)) in records.into_iter().enumerate() {
                if index == last {
                    mark(
                        &secrets,
                        secret,
                        "uninstalled",
                        Some(&description),
                        namespace,
                    )
                    .await?;
                } else {
                    // As `helm uninstall --keep-history` does: no earlier record stays deployed.
                    mark(&secrets, secret, "superseded", None, namespace).await?;
                }
            }
            Ok("MarkedUninstalled")
        }
    }
}

fn record_version(secret: &Secret) -> i64 {
    secret
        .labels()
        .get("version")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Sets a record's status (and description) in its body and its `status` label, unless it is
/// already so (an earlier record that is not `deployed` keeps what it says).
async fn mark(
    secrets: &Api<Secret>,
    mut secret: Secret,
    status: &str,
    description: Option<&str>,
    namespace: &str,
) -> Result<(), ReconcileError> {
    let name = secret.name_any();
    let current = secret.labels().get("status").cloned().unwrap_or_default();
    if description.is_none() && current != "deployed" {
        return Ok(());
    }
    if description.is_some() && current == status {
        return Ok(());
    }
    let data = secret.data.get_or_insert_with(Default::default);
    let encoded = data.get("release").ok_or_else(|| {
        failed(format!(
            "Secret {namespace}/{name} holds no Helm release record"
        ))
    })?;
    let mut record = decode_record(&encoded.0)
        .map_err(|why| failed(format!("Secret {namespace}/{name}: {why}")))?;
    set_status(&mut record, status, description, &now_rfc3339());
    let encoded = encode_record(&record)
        .map_err(|why| failed(format!("Secret {namespace}/{name}: {why}")))?;
    data.insert("release".into(), ByteString(encoded));
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
/// driver also reads records that are not gzipped).
pub fn decode_record(stored: &[u8]) -> Result<Value, String> {
    let compressed = base64::engine::general_purpose::STANDARD
        .decode(stored)
        .map_err(|e| format!("the release record is not base64: {e}"))?;
    let json = if compressed.starts_with(&[0x1f, 0x8b]) {
        let mut text = Vec::new();
        flate2::read::GzDecoder::new(compressed.as_slice())
            .read_to_end(&mut text)
            .map_err(|e| format!("the release record is not gzip: {e}"))?;
        text
    } else {
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
        assert_eq!(decode_record(&stored).unwrap(), record);
        // Not gzipped: read as plain JSON, as helm reads it.
        let plain = base64::engine::general_purpose::STANDARD.encode(record.to_string());
        assert_eq!(decode_record(plain.as_bytes()).unwrap(), record);
        assert!(decode_record(b"%%%").is_err());
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
