//! [`RevisionStore`]: revision records in immutable Secrets of the agent's namespace. The layout
//! and the crash/concurrency rules are in the [module documentation](super).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use kube::Client;

use super::codec::{hex_sha256, split_chunk};
use super::quota::{SnapshotQuota, Usage};
use super::{
    bundle_key, decode, encode, secret_name, RevisionError, RevisionRecord, ANNOTATION_CHUNKS,
    ANNOTATION_CHUNK_SHA256, ANNOTATION_DIGEST, ANNOTATION_FORMAT, ANNOTATION_GENERATION,
    ANNOTATION_REVISION_OF, ANNOTATION_SHA256, ANNOTATION_SIZE, DATA_KEY, FORMAT_VERSION,
    LABEL_CHUNK, LABEL_REVISION, LABEL_REVISION_OF, SECRET_TYPE,
};

/// How many times `save` replaces a chunk that keeps being recreated under it.
const CREATE_ATTEMPTS: usize = 3;

/// Revision records of BundleDeployments, in one namespace (the agent's).
#[derive(Clone)]
pub struct RevisionStore {
    secrets: Api<Secret>,
    namespace: String,
    max_bytes: usize,
    quota: SnapshotQuota,
    /// What the stored snapshots take, learned at the first save (shared by the copies of this
    /// store made with other clients).
    usage: Arc<tokio::sync::Mutex<Option<Usage>>>,
}

/// What one revision may store by default, compressed (about 11 Secrets of 768 KiB).
pub const DEFAULT_MAX_REVISION_BYTES: usize = 8 << 20;

impl RevisionStore {
    /// A store writing Secrets in `namespace` through `client`.
    pub fn new(client: kube::Client, namespace: impl Into<String>) -> Self {
        let namespace = namespace.into();
        RevisionStore {
            secrets: Api::namespaced(client, &namespace),
            namespace,
            max_bytes: DEFAULT_MAX_REVISION_BYTES,
            quota: SnapshotQuota::default(),
            usage: Arc::new(tokio::sync::Mutex::new(None)),
        }
    }

    /// The same store refusing saves that would take the stored snapshots past `quota`.
    pub fn with_quota(mut self, quota: SnapshotQuota) -> Self {
        self.quota = quota;
        self
    }

    /// The same store refusing revisions over `max_bytes` compressed.
    pub fn with_max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// A store like this one with another client (e.g. one with other credentials).
    pub fn with_client(&self, client: Client) -> Self {
        RevisionStore {
            secrets: Api::namespaced(client, &self.namespace),
            ..self.clone()
        }
    }

    /// The namespace the Secrets live in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Stores `record`. Idempotent: Secrets already holding exactly the right chunk are kept,
    /// partial or mismatched ones (from a crashed or different earlier save) are deleted and
    /// recreated, and a concurrent identical save is not an error. Returns whether some chunk
    /// of this revision number was stored already (kept or replaced).
    pub async fn save(&self, record: &RevisionRecord) -> Result<bool, RevisionError> {
        validate(record)?;
        let chunks = encode(record)?;
        let bytes: usize = chunks.iter().map(Vec::len).sum();
        if bytes > self.max_bytes {
            return Err(RevisionError::TooLarge {
                bundle_deployment: record.bundle_deployment.clone(),
                number: record.number,
                bytes,
                limit: self.max_bytes,
            });
        }
        let wanted = self.chunk_secrets(record, &chunks)?;
        let bd = &record.bundle_deployment;
        {
            // Checked and counted under one lock, so two saves cannot both take the same room.
            let mut usage = self.usage.lock().await;
            self.check_quota(&mut usage, record, bytes as u64).await?;
            if let Some(usage) = usage.as_mut() {
                usage.record(bd, record.number, bytes as u64);
            }
        }
        // Created without listing first (a list per revision was one request per install):
        // a chunk already there with this content is kept, one with other content replaced
        // (see `create_chunk`). Chunks past this save's count left by an earlier, larger save
        // of the same number are ignored by `load` and deleted with the revision.
        let mut found = false;
        for secret in &wanted {
            match self.create_chunk(bd, record.number, secret).await {
                Ok(was_there) => found |= was_there,
                Err(error) => {
                    // Counted again, from the Secrets themselves, at the next refusal.
                    self.forget_usage(bd, Some(record.number)).await;
                    return Err(error);
                }
            }
        }
        Ok(found)
    }

    /// Refuses `record` (`bytes` compressed) when it would take the stored snapshots past the
    /// quota; the usage is listed at the first save, and again before a refusal.
    async fn check_quota(
        &self,
        usage: &mut Option<Usage>,
        record: &RevisionRecord,
        bytes: u64,
    ) -> Result<(), RevisionError> {
        let bd = &record.bundle_deployment;
        let mut fresh = false;
        loop {
            let known = match usage.as_ref() {
                Some(known) => known,
                None => {
                    fresh = true;
                    usage.insert(self.list_usage(bd, record.number).await?)
                }
            };
            match known.check(&self.quota, bd, record.number, bytes) {
                Ok(()) => return Ok(()),
                Err(over) if fresh => {
                    return Err(RevisionError::QuotaExceeded {
                        bundle_deployment: bd.clone(),
                        number: record.number,
                        bytes,
                        scope: over.scope,
                        used: over.used,
                        limit: over.limit,
                    })
                }
                // Someone else may have deleted snapshots since: look again before refusing.
                Err(_) => *usage = None,
            }
        }
    }

    /// The usage of every revision Secret of the namespace (metadata only).
    async fn list_usage(&self, bd: &str, number: i64) -> Result<Usage, RevisionError> {
        let params = ListParams::default().labels(LABEL_REVISION_OF);
        let list = self
            .secrets
            .list_metadata(&params)
            .await
            .map_err(|source| RevisionError::Kube {
                bundle_deployment: bd.to_string(),
                number: Some(number),
                action: "list",
                target: format!("Secrets in {} labelled {LABEL_REVISION_OF}", self.namespace),
                source: Box::new(source),
            })?;
        Ok(Usage::from_metadata(list.items.iter().map(|p| &p.metadata)))
    }

    async fn forget_usage(&self, bd: &str, number: Option<i64>) {
        if let Some(usage) = self.usage.lock().await.as_mut() {
            usage.forget(bd, number);
        }
    }

    /// Loads revision `number` of `bundle_deployment`: [`RevisionError::NotFound`] when none of
    /// it is stored, [`RevisionError::Corrupt`] naming the Secret when a chunk is missing,
    /// damaged or from another save.
    pub async fn load(
        &self,
        bundle_deployment: &str,
        number: i64,
    ) -> Result<RevisionRecord, RevisionError> {
        let secrets = self.list_secrets(bundle_deployment, Some(number)).await?;
        if secrets.is_empty() {
            return Err(RevisionError::NotFound {
                bundle_deployment: bundle_deployment.to_string(),
                number,
                namespace: self.namespace.clone(),
            });
        }
        let corrupt =
            |secret: String, chunk: Option<usize>, detail: String| RevisionError::Corrupt {
                bundle_deployment: Some(bundle_deployment.to_string()),
                number: Some(number),
                secret: Some(format!("{}/{secret}", self.namespace)),
                chunk,
                detail,
            };
        // Index the Secrets by chunk, chunk 0 first: all must describe chunk 0's blob, except
        // chunks past its count, which an earlier, larger save of this number left behind.
        let mut indexed = Vec::with_capacity(secrets.len());
        for secret in &secrets {
            let name = secret.metadata.name.clone().unwrap_or_default();
            let chunk = label(&secret.metadata, LABEL_CHUNK)
                .and_then(|c| c.parse::<usize>().ok())
                .ok_or_else(|| corrupt(name, None, format!("no valid {LABEL_CHUNK} label")))?;
            indexed.push((chunk, secret));
        }
        indexed.sort_by_key(|(chunk, _)| *chunk);
        let mut by_chunk: BTreeMap<usize, &Secret> = BTreeMap::new();
        let mut blob: Option<(String, usize, String)> = None; // (sha256, count, from which Secret)
        for (chunk, secret) in indexed {
            let name = secret.metadata.name.clone().unwrap_or_default();
            let annotation = |key: &str| annotation(&secret.metadata, key).unwrap_or_default();
            let count = annotation(ANNOTATION_CHUNKS)
                .parse::<usize>()
                .map_err(|_| {
                    corrupt(
                        name.clone(),
                        Some(chunk),
                        format!("no valid {ANNOTATION_CHUNKS} annotation"),
                    )
                })?;
            let sha = annotation(ANNOTATION_SHA256).to_string();
            match &blob {
                None => blob = Some((sha, count, name.clone())),
                Some((first_sha, first_count, _))
                    if (*first_sha != sha || *first_count != count) && chunk >= *first_count =>
                {
                    continue;
                }
                Some((first_sha, first_count, first)) => {
                    if *first_sha != sha || *first_count != count {
                        return Err(corrupt(
                            name,
                            Some(chunk),
                            format!(
                                "from another save than Secret {first} (blob sha256 {sha}, {count} chunks; {first} says {first_sha}, {first_count} chunks); save the revision again to repair it"
                            ),
                        ));
                    }
                }
            }
            by_chunk.insert(chunk, secret);
        }
        let count = blob.map(|(_, count, _)| count).unwrap_or_default();
        if let Some((&extra, secret)) = by_chunk.range(count..).next() {
            let name = secret.metadata.name.clone().unwrap_or_default();
            return Err(corrupt(
                name,
                Some(extra),
                format!("chunk {extra} of a {count}-chunk revision"),
            ));
        }
        let mut chunks = Vec::with_capacity(count);
        for index in 0..count {
            let expected = secret_name(bundle_deployment, number, index);
            let secret = by_chunk.get(&index).ok_or_else(|| {
                corrupt(
                    expected.clone(),
                    Some(index),
                    format!("chunk {index} of {count} is missing (a save was interrupted?); save the revision again to repair it"),
                )
            })?;
            let data = secret
                .data
                .as_ref()
                .and_then(|d| d.get(DATA_KEY))
                .ok_or_else(|| {
                    corrupt(
                        expected.clone(),
                        Some(index),
                        format!("no data key {DATA_KEY:?}"),
                    )
                })?;
            let sha = hex_sha256(&data.0);
            let said = annotation(&secret.metadata, ANNOTATION_CHUNK_SHA256).unwrap_or_default();
            if sha != said {
                return Err(corrupt(
                    expected,
                    Some(index),
                    format!("its data has sha256 {sha}, its {ANNOTATION_CHUNK_SHA256} annotation says {said:?}"),
                ));
            }
            chunks.push(data.0.clone());
        }
        let record =
            decode(&chunks).map_err(|e| self.placed(e, (bundle_deployment, number), count))?;
        if record.bundle_deployment != bundle_deployment || record.number != number {
            return Err(corrupt(
                secret_name(bundle_deployment, number, 0),
                None,
                format!(
                    "holds revision {} of BundleDeployment {}",
                    record.number, record.bundle_deployment
                ),
            ));
        }
        Ok(record)
    }

    /// A decoding error of revision `number` of `bundle_deployment` (`count` chunks), placed:
    /// the BundleDeployment, the number and the Secret (the chunk's, or the range of them).
    fn placed(
        &self,
        error: RevisionError,
        (bundle_deployment, number): (&str, i64),
        count: usize,
    ) -> RevisionError {
        match error {
            RevisionError::Corrupt { chunk, detail, .. } => RevisionError::Corrupt {
                bundle_deployment: Some(bundle_deployment.to_string()),
                number: Some(number),
                secret: Some(match chunk {
                    Some(index) => {
                        format!(
                            "{}/{}",
                            self.namespace,
                            secret_name(bundle_deployment, number, index)
                        )
                    }
                    None => format!(
                        "{}/{}…c{}",
                        self.namespace,
                        secret_name(bundle_deployment, number, 0),
                        count.saturating_sub(1)
                    ),
                }),
                chunk,
                detail,
            },
            RevisionError::UnsupportedFormat { version, .. } => RevisionError::UnsupportedFormat {
                bundle_deployment: Some(bundle_deployment.to_string()),
                number: Some(number),
                secret: Some(format!(
                    "{}/{}",
                    self.namespace,
                    secret_name(bundle_deployment, number, 0)
                )),
                version,
            },
            other => other,
        }
    }

    /// Revision numbers of `bundle_deployment` with at least one chunk stored (complete or not),
    /// ascending.
    pub async fn list(&self, bundle_deployment: &str) -> Result<Vec<i64>, RevisionError> {
        let numbers: BTreeSet<i64> = self
            .list_metadata(bundle_deployment, None)
            .await?
            .iter()
            .filter_map(|meta| label(meta, LABEL_REVISION)?.parse().ok())
            .collect();
        Ok(numbers.into_iter().collect())
    }

    /// Deletes every chunk of revision `number`; a revision not stored is not an error.
    pub async fn delete(&self, bundle_deployment: &str, number: i64) -> Result<(), RevisionError> {
        for meta in self.list_metadata(bundle_deployment, Some(number)).await? {
            self.delete_name(bundle_deployment, Some(number), &meta, false)
                .await?;
        }
        self.forget_usage(bundle_deployment, Some(number)).await;
        Ok(())
    }

    /// Deletes every stored revision of `bundle_deployment`.
    pub async fn delete_all(&self, bundle_deployment: &str) -> Result<(), RevisionError> {
        for meta in self.list_metadata(bundle_deployment, None).await? {
            let number = label(&meta, LABEL_REVISION).and_then(|n| n.parse().ok());
            self.delete_name(bundle_deployment, number, &meta, false)
                .await?;
        }
        self.forget_usage(bundle_deployment, None).await;
        Ok(())
    }

    /// The Secrets `save` wants for `chunks` of `record`.
    fn chunk_secrets(
        &self,
        record: &RevisionRecord,
        chunks: &[Vec<u8>],
    ) -> Result<Vec<Secret>, RevisionError> {
        let size: usize = chunks
            .iter()
            .map(|c| {
                split_chunk(c)
                    .map(|(_, payload)| payload.len())
                    .unwrap_or(0)
            })
            .sum();
        chunks
            .iter()
            .enumerate()
            .map(|(index, chunk)| {
                let (header, _) = split_chunk(chunk).map_err(|detail| RevisionError::Invalid {
                    bundle_deployment: record.bundle_deployment.clone(),
                    number: record.number,
                    detail,
                })?;
                let labels = BTreeMap::from([
                    (
                        LABEL_REVISION_OF.to_string(),
                        bundle_key(&record.bundle_deployment),
                    ),
                    (LABEL_REVISION.to_string(), record.number.to_string()),
                    (LABEL_CHUNK.to_string(), index.to_string()),
                ]);
                let annotations = BTreeMap::from([
                    (
                        ANNOTATION_REVISION_OF.to_string(),
                        record.bundle_deployment.clone(),
                    ),
                    (ANNOTATION_FORMAT.to_string(), FORMAT_VERSION.to_string()),
                    (ANNOTATION_SHA256.to_string(), header.sha256),
                    (ANNOTATION_CHUNKS.to_string(), header.count.to_string()),
                    (ANNOTATION_SIZE.to_string(), size.to_string()),
                    (ANNOTATION_CHUNK_SHA256.to_string(), hex_sha256(chunk)),
                    (ANNOTATION_DIGEST.to_string(), record.digest.clone()),
                    (
                        ANNOTATION_GENERATION.to_string(),
                        record.generation.to_string(),
                    ),
                ]);
                Ok(Secret {
                    metadata: ObjectMeta {
                        name: Some(secret_name(&record.bundle_deployment, record.number, index)),
                        namespace: Some(self.namespace.clone()),
                        labels: Some(labels),
                        annotations: Some(annotations),
                        ..ObjectMeta::default()
                    },
                    type_: Some(SECRET_TYPE.to_string()),
                    immutable: Some(true),
                    data: Some(BTreeMap::from([(
                        DATA_KEY.to_string(),
                        ByteString(chunk.clone()),
                    )])),
                    ..Secret::default()
                })
            })
            .collect()
    }

    /// Creates `secret`; an existing Secret of that name with the same content counts as
    /// created, one with other content of the same BundleDeployment is replaced. Returns
    /// whether a Secret of that name was found.
    async fn create_chunk(
        &self,
        bd: &str,
        number: i64,
        secret: &Secret,
    ) -> Result<bool, RevisionError> {
        let name = secret.metadata.name.clone().unwrap_or_default();
        let kube = |action, source| RevisionError::Kube {
            bundle_deployment: bd.to_string(),
            number: Some(number),
            action,
            target: format!("Secret {}/{name}", self.namespace),
            source: Box::new(source),
        };
        let mut found = false;
        for _ in 0..CREATE_ATTEMPTS {
            match self.secrets.create(&PostParams::default(), secret).await {
                Ok(_) => return Ok(found),
                Err(kube::Error::Api(status)) if status.is_already_exists() => found = true,
                Err(e) => return Err(kube("create", e)),
            }
            let live = match self.secrets.get_opt(&name).await {
                Ok(Some(live)) => live,
                Ok(None) => continue, // deleted meanwhile: create again
                Err(e) => return Err(kube("get", e)),
            };
            if same_content(&live, secret) {
                return Ok(true); // kept: an earlier or concurrent identical save
            }
            if annotation(&live.metadata, ANNOTATION_REVISION_OF) != Some(bd) {
                return Err(RevisionError::Conflict {
                    bundle_deployment: bd.to_string(),
                    number,
                    secret: format!("{}/{name}", self.namespace),
                    detail: format!(
                        "the name is taken by a Secret that is not a revision of this BundleDeployment ({ANNOTATION_REVISION_OF}: {:?})",
                        annotation(&live.metadata, ANNOTATION_REVISION_OF).unwrap_or_default()
                    ),
                });
            }
            self.delete_secret(bd, Some(number), &live, true).await?;
        }
        Err(RevisionError::Conflict {
            bundle_deployment: bd.to_string(),
            number,
            secret: format!("{}/{name}", self.namespace),
            detail: format!(
                "replaced {CREATE_ATTEMPTS} times and recreated with other content each time (another save of different content is running?)"
            ),
        })
    }

    /// Deletes a listed Secret; gone already is fine. With `same_uid`, only that very object
    /// (not one recreated under the same name since).
    async fn delete_secret(
        &self,
        bd: &str,
        number: Option<i64>,
        secret: &Secret,
        same_uid: bool,
    ) -> Result<(), RevisionError> {
        self.delete_name(bd, number, &secret.metadata, same_uid)
            .await
    }

    async fn delete_name(
        &self,
        bd: &str,
        number: Option<i64>,
        meta: &ObjectMeta,
        same_uid: bool,
    ) -> Result<(), RevisionError> {
        let name = meta.name.clone().unwrap_or_default();
        let params = DeleteParams {
            preconditions: same_uid.then(|| Preconditions {
                uid: meta.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.secrets.delete(&name, &params).await {
            Ok(_) => Ok(()),
            // 404: gone already; 409: the UID precondition failed, someone replaced it.
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
            Err(source) => Err(RevisionError::Kube {
                bundle_deployment: bd.to_string(),
                number,
                action: "delete",
                target: format!("Secret {}/{name}", self.namespace),
                source: Box::new(source),
            }),
        }
    }

    fn selector(bd: &str, number: Option<i64>) -> String {
        let mut selector = format!("{LABEL_REVISION_OF}={}", bundle_key(bd));
        if let Some(n) = number {
            selector.push_str(&format!(",{LABEL_REVISION}={n}"));
        }
        selector
    }

    fn list_error(&self, bd: &str, number: Option<i64>, source: kube::Error) -> RevisionError {
        RevisionError::Kube {
            bundle_deployment: bd.to_string(),
            number,
            action: "list",
            target: format!(
                "Secrets in {} labelled {}",
                self.namespace,
                Self::selector(bd, number)
            ),
            source: Box::new(source),
        }
    }

    /// The revision Secrets (with data) of `bd`, of one revision or all; those of another
    /// BundleDeployment whose key collides are left out.
    async fn list_secrets(
        &self,
        bd: &str,
        number: Option<i64>,
    ) -> Result<Vec<Secret>, RevisionError> {
        let params = ListParams::default().labels(&Self::selector(bd, number));
        let list = self
            .secrets
            .list(&params)
            .await
            .map_err(|e| self.list_error(bd, number, e))?;
        Ok(list
            .items
            .into_iter()
            .filter(|s| annotation(&s.metadata, ANNOTATION_REVISION_OF) == Some(bd))
            .collect())
    }

    /// Like `list_secrets`, metadata only.
    async fn list_metadata(
        &self,
        bd: &str,
        number: Option<i64>,
    ) -> Result<Vec<ObjectMeta>, RevisionError> {
        let params = ListParams::default().labels(&Self::selector(bd, number));
        let list = self
            .secrets
            .list_metadata(&params)
            .await
            .map_err(|e| self.list_error(bd, number, e))?;
        Ok(list
            .items
            .into_iter()
            .map(|p| p.metadata)
            .filter(|m| annotation(m, ANNOTATION_REVISION_OF) == Some(bd))
            .collect())
    }
}

/// Refuses records that cannot be named or labelled.
fn validate(record: &RevisionRecord) -> Result<(), RevisionError> {
    let invalid = |detail: &str| RevisionError::Invalid {
        bundle_deployment: record.bundle_deployment.clone(),
        number: record.number,
        detail: detail.to_string(),
    };
    if record.bundle_deployment.is_empty() {
        return Err(invalid("the BundleDeployment name is empty"));
    }
    if record.number < 0 {
        return Err(invalid("revision numbers are not negative"));
    }
    Ok(())
}

/// True when `live` is exactly the Secret `save` would write as `wanted`.
fn same_content(live: &Secret, wanted: &Secret) -> bool {
    let same = |get: for<'a, 'b> fn(&'a ObjectMeta, &'b str) -> Option<&'a str>, keys: &[&str]| {
        keys.iter()
            .all(|key| get(&live.metadata, key) == get(&wanted.metadata, key))
    };
    live.type_ == wanted.type_
        && live.immutable == Some(true)
        && live.data == wanted.data
        && same(label, &[LABEL_REVISION_OF, LABEL_REVISION, LABEL_CHUNK])
        && same(
            annotation,
            &[
                ANNOTATION_REVISION_OF,
                ANNOTATION_FORMAT,
                ANNOTATION_SHA256,
                ANNOTATION_CHUNKS,
                ANNOTATION_CHUNK_SHA256,
            ],
        )
}

fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}
