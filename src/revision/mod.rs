//! Snapshots of rendered revisions, stored in the cluster so that a rollback needs neither the
//! sources nor the agent's disk.
//!
//! # What is stored
//!
//! A [`RevisionRecord`] (the BundleDeployment, revision number, generation, content digest, the
//! resolved sources and the rendered objects in render order) is serialized to JSON, gzipped and
//! cut into chunks of at most [`CHUNK_SIZE`] compressed bytes ([`encode`]). Each chunk is one
//! **immutable Secret** in the agent's namespace ([`RevisionStore`]). 768 KiB per chunk keeps
//! every Secret well under the API server's 1 MiB Secret limit, base64 and metadata included.
//!
//! Every chunk starts with a one-line header, `pallet-revision/<format> <index> <count>
//! <sha256>\n`, followed by its slice of the compressed blob. The sha256 is that of the *whole*
//! compressed blob, so [`decode`] (pure) verifies the format version, that it has every chunk,
//! in order, of one and the same blob, and the blob's digest before it inflates anything. The
//! store repeats the header's fields in each Secret's annotations so that it can tell a complete,
//! matching set of Secrets from a partial or stale one without reading the data.
//!
//! # Secrets
//!
//! - **Name**: `pallet-rev-<key>-r<number>-c<chunk>`, e.g. `pallet-rev-web-r3-c0`. `<key>`
//!   ([`bundle_key`]) is the BundleDeployment's name when it fits in a label value (63
//!   characters), else its first 40 characters (trailing `-`/`.` trimmed) plus `-` and 16 hex
//!   digits of the name's sha256. The suffix `-r<digits>-c<digits>` is parsed from the right, so
//!   two different (key, number, chunk) triples never share a name; a name has at most 11 + 63 + 2 + 19 + 2 + 5
//!   characters (prefix, key, revision, chunk), far below the 253 a Secret name may have.
//! - **Type**: [`SECRET_TYPE`] (`pallet.dev/revision`), `immutable: true`, one data key
//!   [`DATA_KEY`] (`chunk`).
//! - **Labels** (for selection): [`LABEL_REVISION_OF`] = `<key>`, [`LABEL_REVISION`] = the
//!   number, [`LABEL_CHUNK`] = the chunk index. The label `pallet.dev/bundle-deployment` is *not*
//!   used: it marks applied objects, and these Secrets are pallet's own bookkeeping.
//! - **Annotations**: [`ANNOTATION_REVISION_OF`] = the full BundleDeployment name (the label may be
//!   a hash; a read checks the annotation, so a hash collision can never mix two bundles),
//!   [`ANNOTATION_FORMAT`], [`ANNOTATION_SHA256`] (of the whole compressed blob),
//!   [`ANNOTATION_CHUNKS`] (count), [`ANNOTATION_SIZE`] (compressed bytes),
//!   [`ANNOTATION_CHUNK_SHA256`] (of this Secret's chunk, to name the damaged one), and for people reading
//!   the cluster [`ANNOTATION_DIGEST`] (the rendered set's digest) and [`ANNOTATION_GENERATION`].
//!
//! # Crash and concurrency safety
//!
//! [`RevisionStore::save`] lists the Secrets of the revision, keeps the ones that are exactly
//! what it would write, deletes every other one (stale chunk, partial set from a crashed save,
//! extra chunks from a longer earlier encoding; immutable Secrets are deleted with a UID
//! precondition and recreated, never updated) and creates the missing ones. A crash midway leaves
//! a set that [`RevisionStore::load`] reports as [`RevisionError::Corrupt`] (naming the missing or
//! mismatched Secret) and that the next `save` of the record completes. Two identical saves
//! racing each other both succeed: a create answered 409 AlreadyExists by a Secret with the same
//! content counts as done. [`RevisionStore::list`] reports every number with at least one chunk,
//! complete or not, so that history pruning also removes the remains of a crashed save.

mod codec;
pub mod quota;
pub mod store;

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use codec::{decode, encode, encode_with_chunk_size, CHUNK_SIZE, FORMAT_VERSION};
pub use store::{RevisionStore, DEFAULT_MAX_REVISION_BYTES};

/// Secret `type` of revision chunks.
pub const SECRET_TYPE: &str = "pallet.dev/revision";
/// The one data key of a chunk Secret.
pub const DATA_KEY: &str = "chunk";
/// Label: the BundleDeployment's [`bundle_key`].
pub const LABEL_REVISION_OF: &str = "pallet.dev/revision-of";
/// Label: the revision number.
pub const LABEL_REVISION: &str = "pallet.dev/revision";
/// Label: the chunk index, from 0.
pub const LABEL_CHUNK: &str = "pallet.dev/chunk";
/// Annotation: the full BundleDeployment name.
pub const ANNOTATION_REVISION_OF: &str = "pallet.dev/revision-of";
/// Annotation: the storage format version ([`FORMAT_VERSION`]).
pub const ANNOTATION_FORMAT: &str = "pallet.dev/revision-format";
/// Annotation: hex sha256 of the whole compressed blob.
pub const ANNOTATION_SHA256: &str = "pallet.dev/revision-sha256";
/// Annotation: number of chunks of the blob.
pub const ANNOTATION_CHUNKS: &str = "pallet.dev/revision-chunks";
/// Annotation: hex sha256 of this Secret's chunk (header included), so that a load names the
/// exact Secret whose data is damaged.
pub const ANNOTATION_CHUNK_SHA256: &str = "pallet.dev/chunk-sha256";
/// Annotation: size of the whole compressed blob in bytes.
pub const ANNOTATION_SIZE: &str = "pallet.dev/revision-size";
/// Annotation: the rendered set's digest (informative).
pub const ANNOTATION_DIGEST: &str = "pallet.dev/revision-digest";
/// Annotation: the BundleDeployment generation the revision was rendered for (informative).
pub const ANNOTATION_GENERATION: &str = "pallet.dev/revision-generation";

/// One revision as stored.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RevisionRecord {
    /// Name of the BundleDeployment.
    pub bundle_deployment: String,
    /// Revision number, from 1.
    pub number: i64,
    /// The BundleDeployment generation it was rendered for.
    pub generation: i64,
    /// `sha256:…` of the canonical rendered set.
    pub digest: String,
    /// Every source resolved to an immutable ref.
    pub sources: Vec<crate::api::ResolvedSource>,
    /// Rendered object bodies, in render order.
    pub objects: Vec<serde_json::Value>,
    /// What each of `spec.processors` did to the format's output (for `pallet trace`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processors: Vec<pallet_formats::processors::ProcessorTrace>,
}

impl RevisionRecord {
    /// The record of revision `number` of `bundle_deployment`: `objects` as rendered for
    /// `generation`, with the sources and processors that made them.
    pub fn new(
        bundle_deployment: &str,
        number: i64,
        generation: i64,
        content: RevisionContent<'_>,
    ) -> RevisionRecord {
        RevisionRecord {
            bundle_deployment: bundle_deployment.to_string(),
            number,
            generation,
            digest: content.digest.to_string(),
            sources: content.sources.to_vec(),
            objects: content
                .objects
                .iter()
                .map(|o| serde_json::Value::Object(o.body().clone()))
                .collect(),
            processors: content.processors.to_vec(),
        }
    }

    /// The stored objects, ready to apply again (an entry that is not an object is an error
    /// naming the snapshot, never skipped).
    pub fn objects_to_apply(
        &self,
    ) -> Result<Vec<pallet_formats::Object>, pallet_formats::RenderError> {
        self.objects
            .iter()
            .enumerate()
            .map(|(document, body)| {
                let origin = pallet_formats::Origin {
                    file: format!(
                        "snapshot of revision {} of {}",
                        self.number, self.bundle_deployment
                    ),
                    document,
                    line: 0,
                };
                pallet_formats::Object::new(body.clone(), origin)
            })
            .collect()
    }
}

/// What a revision holds: its rendered objects and what made them.
#[derive(Clone, Copy)]
pub struct RevisionContent<'a> {
    /// `sha256:…` of the rendered set.
    pub digest: &'a str,
    /// Every source resolved.
    pub sources: &'a [crate::api::ResolvedSource],
    /// The rendered objects, in render order.
    pub objects: &'a [pallet_formats::Object],
    /// What each processor did.
    pub processors: &'a [pallet_formats::processors::ProcessorTrace],
}

/// Longest label value Kubernetes accepts.
const MAX_LABEL_VALUE: usize = 63;
/// How much of a long name [`bundle_key`] keeps readable.
const KEY_PREFIX: usize = 40;

/// The label-safe key of a BundleDeployment name: the name itself when it fits in a label value,
/// else a readable prefix and 16 hex digits of the name's sha256.
pub fn bundle_key(bundle_deployment: &str) -> String {
    if bundle_deployment.len() <= MAX_LABEL_VALUE {
        return bundle_deployment.to_string();
    }
    let digest = Sha256::digest(bundle_deployment.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    // Names are DNS subdomains (ASCII), so a byte prefix is a char prefix; trimming keeps every
    // dot-separated part of the Secret name ending in an alphanumeric.
    let prefix = bundle_deployment
        .get(..KEY_PREFIX)
        .unwrap_or(bundle_deployment)
        .trim_end_matches(['-', '.']);
    format!("{prefix}-{hex}")
}

/// Name of the Secret holding chunk `chunk` of revision `number` of `bundle_deployment`.
pub fn secret_name(bundle_deployment: &str, number: i64, chunk: usize) -> String {
    format!(
        "pallet-rev-{}-r{number}-c{chunk}",
        bundle_key(bundle_deployment)
    )
}

/// Errors of revision storage. Each says which BundleDeployment, revision and Secret.
#[derive(Debug, thiserror::Error)]
pub enum RevisionError {
    /// No chunk of the revision is stored.
    #[error("revision {number} of BundleDeployment {bundle_deployment} is not stored (no Secret labelled {LABEL_REVISION_OF}={key},{LABEL_REVISION}={number} in namespace {namespace})", key = bundle_key(bundle_deployment))]
    NotFound {
        /// The BundleDeployment.
        bundle_deployment: String,
        /// The revision.
        number: i64,
        /// Where it was looked for.
        namespace: String,
    },
    /// Stored chunks are missing, mismatched or do not decode.
    #[error("{}is corrupt{}: {detail}", Whose(bundle_deployment.as_deref(), *number), InSecret(secret.as_deref(), *chunk))]
    Corrupt {
        /// The BundleDeployment, when known.
        bundle_deployment: Option<String>,
        /// The revision, when known.
        number: Option<i64>,
        /// `namespace/name` of the Secret at fault, when known.
        secret: Option<String>,
        /// Index of the chunk at fault, when known.
        chunk: Option<usize>,
        /// What is wrong.
        detail: String,
    },
    /// The chunks were written in a storage format this pallet does not read.
    #[error("{}uses storage format {version}{}; this pallet reads format {FORMAT_VERSION}", Whose(bundle_deployment.as_deref(), *number), InSecret(secret.as_deref(), None))]
    UnsupportedFormat {
        /// The BundleDeployment, when known.
        bundle_deployment: Option<String>,
        /// The revision, when known.
        number: Option<i64>,
        /// `namespace/name` of the Secret, when known.
        secret: Option<String>,
        /// The version found.
        version: String,
    },
    /// The record cannot be stored as it is (serialization failed, invalid name or number).
    #[error("cannot store revision {number} of BundleDeployment {bundle_deployment}: {detail}")]
    Invalid {
        /// The BundleDeployment.
        bundle_deployment: String,
        /// The revision.
        number: i64,
        /// What is wrong.
        detail: String,
    },
    /// The revision's snapshot is over the configured size cap: nothing was stored.
    #[error("revision {number} of BundleDeployment {bundle_deployment} is {bytes} bytes compressed, over the cap of {limit} bytes one revision may store (agent flag --max-revision-mib); nothing was stored or applied")]
    TooLarge {
        /// The BundleDeployment.
        bundle_deployment: String,
        /// The revision.
        number: i64,
        /// Its compressed size.
        bytes: usize,
        /// The cap.
        limit: usize,
    },
    /// Storing the revision would take the stored snapshots over a quota: nothing was stored.
    #[error("revision {number} of BundleDeployment {bundle_deployment} ({bytes} bytes compressed) would take the stored snapshots past {}: {used} bytes are stored of {limit}; nothing was stored or applied (lower spec.rollout.historyLimit, or raise the quota)", scope.describe())]
    QuotaExceeded {
        /// The BundleDeployment.
        bundle_deployment: String,
        /// The revision.
        number: i64,
        /// Its compressed size.
        bytes: u64,
        /// Which quota.
        scope: quota::QuotaScope,
        /// What is stored already under that quota.
        used: u64,
        /// The quota.
        limit: u64,
    },
    /// A Secret with the revision's name exists and cannot be replaced.
    #[error(
        "revision {number} of BundleDeployment {bundle_deployment}: Secret {secret}: {detail}"
    )]
    Conflict {
        /// The BundleDeployment.
        bundle_deployment: String,
        /// The revision.
        number: i64,
        /// `namespace/name` of the Secret.
        secret: String,
        /// What is in the way.
        detail: String,
    },
    /// The API server refused a request or could not be reached.
    #[error("{}: {action} {target}: {source}", Whose(Some(bundle_deployment), *number).trimmed())]
    Kube {
        /// The BundleDeployment.
        bundle_deployment: String,
        /// The revision, when the request was about one.
        number: Option<i64>,
        /// What was being done (`create`, `delete`, `list`, `get`).
        action: &'static str,
        /// `Secret namespace/name`, or the selector listed.
        target: String,
        /// The underlying error (boxed: it is large and errors travel in every `Result`).
        #[source]
        source: Box<kube::Error>,
    },
}

/// "revision N of BundleDeployment B " with the parts that are known.
struct Whose<'a>(Option<&'a str>, Option<i64>);

impl Whose<'_> {
    fn trimmed(&self) -> String {
        self.to_string().trim_end().to_string()
    }
}

impl fmt::Display for Whose<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0, self.1) {
            (Some(bd), Some(n)) => write!(f, "stored revision {n} of BundleDeployment {bd} "),
            (Some(bd), None) => write!(f, "stored revisions of BundleDeployment {bd} "),
            (None, Some(n)) => write!(f, "stored revision {n} "),
            (None, None) => write!(f, "stored revision "),
        }
    }
}

/// " (Secret ns/name)" or " (chunk i)" when known.
struct InSecret<'a>(Option<&'a str>, Option<usize>);

impl fmt::Display for InSecret<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0, self.1) {
            (Some(secret), _) => write!(f, " (Secret {secret})"),
            (None, Some(chunk)) => write!(f, " (chunk {chunk})"),
            (None, None) => Ok(()),
        }
    }
}

impl RevisionError {
    /// CamelCase category, used as condition and Event reason.
    pub fn category(&self) -> &'static str {
        match self {
            RevisionError::NotFound { .. } => "RevisionNotFound",
            RevisionError::Corrupt { .. } => "RevisionCorrupt",
            RevisionError::UnsupportedFormat { .. } => "RevisionFormatUnsupported",
            RevisionError::Invalid { .. } => "RevisionInvalid",
            RevisionError::TooLarge { .. } => "RevisionTooLarge",
            RevisionError::QuotaExceeded { .. } => "SnapshotQuotaExceeded",
            RevisionError::Conflict { .. } => "RevisionConflict",
            RevisionError::Kube { source, .. } if matches!(source.as_ref(), kube::Error::Api(status) if status.code == 403) => {
                "Forbidden"
            }
            RevisionError::Kube { .. } => "RevisionStoreFailed",
        }
    }

    /// True when retrying without a change may succeed: network and server errors, conflicts
    /// and throttling. A missing or corrupt revision stays so until someone saves it again, and
    /// a [`RevisionError::Conflict`] needs someone to move the Secret in the way.
    pub fn is_transient(&self) -> bool {
        match self {
            RevisionError::Kube { source, .. } => match source.as_ref() {
                kube::Error::Api(status) => {
                    !((400..500).contains(&status.code) && status.code != 409 && status.code != 429)
                }
                _ => true,
            },
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_their_own_key() {
        assert_eq!(bundle_key("web"), "web");
        let sixty_three = "a".repeat(63);
        assert_eq!(bundle_key(&sixty_three), sixty_three);
        assert_eq!(secret_name("web", 3, 0), "pallet-rev-web-r3-c0");
    }

    #[test]
    fn long_names_are_hashed_into_a_valid_label_value() {
        let long = format!("{}.example-{}", "a".repeat(35), "b".repeat(200));
        let key = bundle_key(&long);
        assert!(key.len() <= 63, "{key}");
        assert!(key.starts_with(&"a".repeat(35)));
        assert!(key
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric()));
        // Another long name with the same prefix gets another key.
        let other = format!("{}.example-{}", "a".repeat(35), "c".repeat(200));
        assert_ne!(bundle_key(&other), key);
        // A prefix that would end in '-' or '.' is trimmed so the Secret name stays a DNS name.
        let dotted = format!("{}.{}", "x".repeat(39), "y".repeat(100));
        let key = bundle_key(&dotted);
        assert!(!key.contains(".-"), "{key}");
        let name = secret_name(&dotted, 12, 4);
        assert!(name.len() <= 253);
        assert!(name.ends_with("-r12-c4"));
    }

    #[test]
    fn errors_name_bundle_revision_and_secret() {
        let e = RevisionError::Corrupt {
            bundle_deployment: Some("web".into()),
            number: Some(3),
            secret: Some("agent/pallet-rev-web-r3-c1".into()),
            chunk: Some(1),
            detail: "chunk missing".into(),
        };
        assert_eq!(
            e.to_string(),
            "stored revision 3 of BundleDeployment web is corrupt (Secret agent/pallet-rev-web-r3-c1): chunk missing"
        );
        assert_eq!(e.category(), "RevisionCorrupt");
        assert!(!e.is_transient());
        let e = RevisionError::NotFound {
            bundle_deployment: "web".into(),
            number: 2,
            namespace: "agent".into(),
        };
        assert!(e
            .to_string()
            .contains("pallet.dev/revision-of=web,pallet.dev/revision=2"));
    }
}
