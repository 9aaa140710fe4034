//! Who published a source's content: signatures checked before any of it is unpacked or used.
//!
//! - [`cosign`]: cosign signatures of an OCI artifact's manifest digest, found as Sigstore bundles
//!   attached as referrers or under the `sha256-<hex>.sig` tag; with public keys ([`keys`]) or
//!   keyless against a trusted root ([`keyless`]).
//! - [`openpgp`]: a chart's provenance file (clear-signed) and OpenPGP signatures of git objects.
//! - [`ssh`]: SSH signatures of git objects.
//! - [`git_objects`]: the signature and signed bytes of a git commit or tag.
//!
//! A verified digest is remembered ([`VerifiedMemo`]) under the policy and the key material it
//! was verified with, so a floating ref resolved again to the same digest costs no request; other
//! keys, another identity or another trusted root verify it afresh.

pub mod cosign;
pub mod git_objects;
pub mod keyless;
pub mod keys;
pub mod openpgp;
pub mod ssh;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::api::{SourceVerification, VerifiedSignature};

use super::SourceError;

/// What a source's `verify` needs besides the spec: the key Secret's data and the trusted root,
/// read by the caller under the secret-namespace policy.
#[derive(Clone, Debug)]
pub struct VerifyMaterial {
    /// The `verify` block as written.
    pub spec: SourceVerification,
    /// Every key of the Secret holding public keys, a keyring or git keys:
    /// (`secret <ns>/<name> key <k>`, content).
    pub keys: Vec<(String, Vec<u8>)>,
    /// The trusted root JSON (keyless), with where it came from.
    pub trusted_root: Option<(String, Vec<u8>)>,
}

impl VerifyMaterial {
    /// The memo key of `resolved` content verified under this policy and material: another
    /// key, identity or trusted root is another key.
    pub fn memo_key(&self, resolved: &str) -> String {
        use sha2::Digest;
        let mut hasher = sha2::Sha256::new();
        let spec = serde_json::to_vec(&self.spec).unwrap_or_default();
        for part in [spec.as_slice(), resolved.as_bytes()] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
        for (origin, data) in self.keys.iter().chain(self.trusted_root.iter()) {
            for part in [origin.as_bytes(), data.as_slice()] {
                hasher.update((part.len() as u64).to_be_bytes());
                hasher.update(part);
            }
        }
        super::hex(&hasher.finalize())
    }
}

/// More remembered verifications than this: start over (each is re-verified once).
const MEMO_KEPT: usize = 4096;

/// Digests verified in this process, by [`VerifyMaterial::memo_key`]. Kept in memory only: after
/// a restart each is verified once more, against the keys in force then.
#[derive(Clone, Default)]
pub struct VerifiedMemo {
    verified: Arc<Mutex<HashMap<String, VerifiedSignature>>>,
}

impl VerifiedMemo {
    /// Who signed `resolved` under `material`, when it was verified before.
    pub fn get(&self, material: &VerifyMaterial, resolved: &str) -> Option<VerifiedSignature> {
        let key = material.memo_key(resolved);
        let verified = self.verified.lock().unwrap_or_else(|p| p.into_inner());
        verified.get(&key).cloned()
    }

    /// Remembers that `resolved` verified under `material`.
    pub fn record(&self, material: &VerifyMaterial, resolved: &str, signer: &VerifiedSignature) {
        let key = material.memo_key(resolved);
        let mut verified = self.verified.lock().unwrap_or_else(|p| p.into_inner());
        if verified.len() >= MEMO_KEPT {
            verified.clear();
        }
        verified.insert(key, signer.clone());
    }
}

/// The refusal of `what` at `digest` (a digest or commit) for `reason`.
pub fn failed(
    what: impl Into<String>,
    digest: impl Into<String>,
    reason: impl Into<String>,
) -> SourceError {
    SourceError::VerificationFailed {
        what: what.into(),
        digest: digest.into(),
        reason: reason.into(),
    }
}

/// Material that cannot be used at all (no key parses, a trusted root that is not one): the
/// source cannot be verified, whatever its content.
pub fn unusable(origin: &str, reason: impl std::fmt::Display) -> SourceError {
    SourceError::InvalidCredentials {
        origin: origin.to_string(),
        reason: format!("unusable for verification: {reason}"),
    }
}

/// Several reasons a signature did not verify, as one: the first few, and how many more.
pub fn join_reasons(reasons: &[String]) -> String {
    const SHOWN: usize = 4;
    let mut unique: Vec<&String> = Vec::new();
    for reason in reasons {
        if !unique.contains(&reason) {
            unique.push(reason);
        }
    }
    let mut text = unique
        .iter()
        .take(SHOWN)
        .map(|r| r.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    if unique.len() > SHOWN {
        text.push_str(&format!("; and {} more", unique.len() - SHOWN));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn material(keys: &[(&str, &str)]) -> VerifyMaterial {
        VerifyMaterial {
            spec: serde_json::from_value(serde_json::json!({
                "cosign": {"publicKeys": {"name": "keys"}}
            }))
            .unwrap(),
            keys: keys
                .iter()
                .map(|(o, d)| (o.to_string(), d.as_bytes().to_vec()))
                .collect(),
            trusted_root: None,
        }
    }

    #[test]
    fn the_memo_is_keyed_by_material_and_digest() {
        let memo = VerifiedMemo::default();
        let signer = VerifiedSignature {
            method: "cosign".into(),
            ..Default::default()
        };
        let a = material(&[("secret x/keys key a", "A")]);
        memo.record(&a, "r@sha256:1", &signer);
        assert_eq!(memo.get(&a, "r@sha256:1"), Some(signer));
        assert_eq!(memo.get(&a, "r@sha256:2"), None);
        // Another key (or the same bytes under another name) verifies again.
        assert_eq!(
            memo.get(&material(&[("secret x/keys key a", "B")]), "r@sha256:1"),
            None
        );
        assert_eq!(
            memo.get(&material(&[("secret x/keys key b", "A")]), "r@sha256:1"),
            None
        );
    }

    #[test]
    fn reasons_are_deduplicated_and_capped() {
        let reasons: Vec<String> = ["a", "b", "a", "c", "d", "e", "f"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(join_reasons(&reasons), "a; b; c; d; and 2 more");
    }
}
