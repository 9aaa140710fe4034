//! What the stored snapshots may take in total: per BundleDeployment (every stored revision of
//! it) and per agent (every revision Secret of the agent's namespace). Each revision is capped on
//! its own (`--max-revision-mib`), but a history of 100 revisions of 8 MiB is 800 MiB of etcd for
//! one BundleDeployment, and etcd's whole default quota is 2 GiB.
//!
//! The store learns the usage with one listing (metadata only; each chunk Secret carries its
//! revision's compressed size) and keeps it up to date with its own saves and deletes. Before it
//! refuses a save it lists again, so Secrets deleted by someone else never cause a refusal.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{ANNOTATION_REVISION_OF, ANNOTATION_SIZE, LABEL_REVISION};

/// Default of `--snapshot-quota-per-bundle-mib`: the default history (5 revisions) of the
/// largest revisions allowed by default (8 MiB) fits, with room for the one being stored.
pub const DEFAULT_PER_BUNDLE_BYTES: u64 = 64 << 20;
/// Default of `--snapshot-quota-mib`: a quarter of etcd's default 2 GiB quota.
pub const DEFAULT_TOTAL_BYTES: u64 = 512 << 20;

/// The caps on stored snapshot bytes (compressed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotQuota {
    /// Every stored revision of one BundleDeployment, the one being stored included.
    pub per_bundle: u64,
    /// Every revision Secret of the agent's namespace, the one being stored included.
    pub total: u64,
}

impl Default for SnapshotQuota {
    fn default() -> Self {
        SnapshotQuota {
            per_bundle: DEFAULT_PER_BUNDLE_BYTES,
            total: DEFAULT_TOTAL_BYTES,
        }
    }
}

/// Which quota a save would exceed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaScope {
    /// The BundleDeployment's own.
    BundleDeployment,
    /// The agent's, over every BundleDeployment.
    Agent,
}

impl QuotaScope {
    /// How the quota is named in messages, with the flag that sets it.
    pub fn describe(self) -> &'static str {
        match self {
            QuotaScope::BundleDeployment => {
                "the BundleDeployment's snapshot quota (agent flag --snapshot-quota-per-bundle-mib)"
            }
            QuotaScope::Agent => "the agent's snapshot quota (agent flag --snapshot-quota-mib)",
        }
    }
}

/// A save that would go over a quota.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverQuota {
    /// Which one.
    pub scope: QuotaScope,
    /// Bytes stored already (the revision being replaced, if any, left out).
    pub used: u64,
    /// The quota.
    pub limit: u64,
}

/// Compressed bytes stored per (BundleDeployment, revision number).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    by_revision: BTreeMap<(String, i64), u64>,
}

impl Usage {
    /// The usage the chunk Secrets' metadata describe (one entry per revision, whatever its
    /// number of chunks).
    pub fn from_metadata<'a>(metas: impl IntoIterator<Item = &'a ObjectMeta>) -> Usage {
        let mut by_revision = BTreeMap::new();
        for meta in metas {
            let get = |map: &Option<BTreeMap<String, String>>, key: &str| {
                map.as_ref().and_then(|m| m.get(key)).cloned()
            };
            let bd = get(&meta.annotations, ANNOTATION_REVISION_OF);
            let number = get(&meta.labels, LABEL_REVISION).and_then(|n| n.parse::<i64>().ok());
            let size = get(&meta.annotations, ANNOTATION_SIZE).and_then(|s| s.parse::<u64>().ok());
            if let (Some(bd), Some(number), Some(size)) = (bd, number, size) {
                let entry = by_revision.entry((bd, number)).or_insert(0);
                *entry = (*entry).max(size);
            }
        }
        Usage { by_revision }
    }

    /// Records that revision `number` of `bd` now takes `bytes`.
    pub fn record(&mut self, bd: &str, number: i64, bytes: u64) {
        self.by_revision.insert((bd.to_string(), number), bytes);
    }

    /// Forgets revision `number` of `bd`, or every revision of it.
    pub fn forget(&mut self, bd: &str, number: Option<i64>) {
        self.by_revision
            .retain(|(b, n), _| b != bd || number.is_some_and(|x| x != *n));
    }

    /// Whether storing `bytes` as revision `number` of `bd` (in place of what that number holds
    /// now) stays within `quota`.
    pub fn check(
        &self,
        quota: &SnapshotQuota,
        bd: &str,
        number: i64,
        bytes: u64,
    ) -> Result<(), OverQuota> {
        let others = self
            .by_revision
            .iter()
            .filter(|((b, n), _)| !(b == bd && *n == number));
        let (mut own, mut total) = (0u64, 0u64);
        for ((b, _), size) in others {
            total = total.saturating_add(*size);
            if b == bd {
                own = own.saturating_add(*size);
            }
        }
        if own.saturating_add(bytes) > quota.per_bundle {
            return Err(OverQuota {
                scope: QuotaScope::BundleDeployment,
                used: own,
                limit: quota.per_bundle,
            });
        }
        if total.saturating_add(bytes) > quota.total {
            return Err(OverQuota {
                scope: QuotaScope::Agent,
                used: total,
                limit: quota.total,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(bd: &str, number: i64, chunk: usize, size: u64) -> ObjectMeta {
        ObjectMeta {
            name: Some(format!("{bd}-{number}-{chunk}")),
            labels: Some(BTreeMap::from([(
                LABEL_REVISION.into(),
                number.to_string(),
            )])),
            annotations: Some(BTreeMap::from([
                (ANNOTATION_REVISION_OF.into(), bd.into()),
                (ANNOTATION_SIZE.into(), size.to_string()),
            ])),
            ..Default::default()
        }
    }

    #[test]
    fn quotas_count_each_revision_once_and_replace_the_same_number() {
        // Revision 1 of a has two chunks: its size counts once.
        let metas = [
            meta("a", 1, 0, 40),
            meta("a", 1, 1, 40),
            meta("b", 1, 0, 30),
        ];
        let mut usage = Usage::from_metadata(&metas);
        let quota = SnapshotQuota {
            per_bundle: 100,
            total: 150,
        };
        assert_eq!(usage.check(&quota, "a", 2, 60), Ok(()));
        let over = usage.check(&quota, "a", 2, 61).unwrap_err();
        assert_eq!(
            (over.scope, over.used, over.limit),
            (QuotaScope::BundleDeployment, 40, 100)
        );
        // Storing number 1 again replaces it.
        assert_eq!(usage.check(&quota, "a", 1, 100), Ok(()));
        usage.record("a", 2, 60);
        let over = usage.check(&quota, "c", 1, 30).unwrap_err();
        assert_eq!((over.scope, over.used), (QuotaScope::Agent, 130));
        usage.forget("a", Some(1));
        assert_eq!(usage.check(&quota, "c", 1, 30), Ok(()));
        usage.forget("a", None);
        assert_eq!(usage.check(&quota, "a", 1, 100), Ok(()));
    }
}
