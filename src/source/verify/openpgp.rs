//! OpenPGP (rPGP): keyrings from a Secret, detached signatures of git objects, and a chart's
//! provenance file: a clear-signed message whose text ends with the archive's SHA-256 (as
//! `helm package --sign` writes it).

use pgp::composed::{
    CleartextSignedMessage, Deserializable, DetachedSignature, PublicOrSecret, SignedPublicKey,
};
use pgp::types::KeyDetails;

/// The public keys of a Secret, each with its fingerprint.
pub struct Keyring {
    keys: Vec<SignedPublicKey>,
}

/// Upper-case hex fingerprint of a key.
fn fingerprint(key: &impl KeyDetails) -> String {
    format!("{:X}", key.fingerprint())
}

impl Keyring {
    /// Reads every key of every entry: binary (`gpg --export`) or armored, one or many keys each.
    /// An entry holding no key, or a secret key, is an error naming it.
    pub fn read(material: &[(String, Vec<u8>)]) -> Result<Keyring, String> {
        let mut keys = Vec::new();
        for (origin, data) in material {
            let (parsed, _) = PublicOrSecret::from_reader_many(data.as_slice())
                .map_err(|e| format!("{origin}: not OpenPGP keys: {e}"))?;
            let before = keys.len();
            for key in parsed {
                match key.map_err(|e| format!("{origin}: {e}"))? {
                    PublicOrSecret::Public(key) => keys.push(key),
                    PublicOrSecret::Secret(_) => {
                        return Err(format!(
                            "{origin}: a secret key; give the public key (gpg --export)"
                        ))
                    }
                }
            }
            if keys.len() == before {
                return Err(format!("{origin}: no OpenPGP public key"));
            }
        }
        if keys.is_empty() {
            return Err("the Secret holds no OpenPGP public key".into());
        }
        Ok(Keyring { keys })
    }

    /// Whether the keyring is empty (never, once read).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The fingerprints of the keyring's primary keys, for messages.
    pub fn fingerprints(&self) -> Vec<String> {
        self.keys.iter().map(fingerprint).collect()
    }

    /// The fingerprint of the key whose primary key or bound subkey made the signature.
    fn find(&self, check: &dyn VerifyWith) -> Option<String> {
        for key in &self.keys {
            if check.with_primary(key) {
                return Some(fingerprint(key));
            }
            for sub in &key.public_subkeys {
                // A subkey counts only while bound to its primary key.
                if sub.verify_bindings(&key.primary_key).is_ok() && check.with_sub(sub) {
                    return Some(fingerprint(key));
                }
            }
        }
        None
    }

    /// Verifies an armored detached signature of `data` (a git commit or tag); returns the
    /// signing key's fingerprint.
    pub fn verify_detached(&self, armored: &str, data: &[u8]) -> Result<String, String> {
        let (signature, _) = DetachedSignature::from_string(armored)
            .map_err(|e| format!("the OpenPGP signature does not parse: {e}"))?;
        let check = Detached {
            signature: &signature,
            data,
        };
        self.find(&check).ok_or_else(|| {
            format!(
                "no key matched: the OpenPGP signature (issuer {}) verifies with no key of the keyring ({})",
                issuers(&signature.signature),
                self.fingerprints().join(", ")
            )
        })
    }

    /// Verifies a clear-signed message (a provenance file); returns the signed text and the
    /// signing key's fingerprint.
    pub fn verify_cleartext(&self, text: &str) -> Result<(String, String), String> {
        let (message, _) = CleartextSignedMessage::from_string(text)
            .map_err(|e| format!("not a clear-signed OpenPGP message: {e}"))?;
        let check = Cleartext { message: &message };
        let signer = self.find(&check).ok_or_else(|| {
            let issuer = message
                .signatures()
                .first()
                .map(issuers)
                .unwrap_or_else(|| "none".into());
            format!(
                "no key matched: the provenance file's signature (issuer {issuer}) verifies with no key of the keyring ({})",
                self.fingerprints().join(", ")
            )
        })?;
        Ok((message.signed_text(), signer))
    }
}

fn issuers(signature: &pgp::packet::Signature) -> String {
    let fingerprints: Vec<String> = signature
        .issuer_fingerprint()
        .iter()
        .map(|f| format!("{f:X}"))
        .collect();
    if !fingerprints.is_empty() {
        return fingerprints.join(", ");
    }
    let ids: Vec<String> = signature
        .issuer_key_id()
        .iter()
        .map(|id| {
            id.as_ref()
                .iter()
                .map(|b| format!("{b:02X}"))
                .collect::<String>()
        })
        .collect();
    if ids.is_empty() {
        "unknown".into()
    } else {
        ids.join(", ")
    }
}

/// A signature to check with one key or another (primary keys and subkeys are distinct types).
trait VerifyWith {
    fn with_primary(&self, key: &SignedPublicKey) -> bool;
    fn with_sub(&self, key: &pgp::composed::SignedPublicSubKey) -> bool;
}

struct Detached<'a> {
    signature: &'a DetachedSignature,
    data: &'a [u8],
}

impl VerifyWith for Detached<'_> {
    fn with_primary(&self, key: &SignedPublicKey) -> bool {
        self.signature.verify(key, self.data).is_ok()
    }
    fn with_sub(&self, key: &pgp::composed::SignedPublicSubKey) -> bool {
        self.signature.verify(key, self.data).is_ok()
    }
}

struct Cleartext<'a> {
    message: &'a CleartextSignedMessage,
}

impl VerifyWith for Cleartext<'_> {
    fn with_primary(&self, key: &SignedPublicKey) -> bool {
        self.message.verify(key).is_ok()
    }
    fn with_sub(&self, key: &pgp::composed::SignedPublicSubKey) -> bool {
        self.message.verify(key).is_ok()
    }
}

/// The `files` a provenance file's text names: archive name → `sha256:<hex>`. The text is the
/// chart's metadata (YAML), a `...` line, then a YAML document with `files`.
pub fn provenance_files(text: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
    #[derive(serde::Deserialize)]
    struct Files {
        files: std::collections::BTreeMap<String, String>,
    }
    // The signed text is in canonical form (CRLF line ends).
    let text = text.replace("\r\n", "\n");
    let mut lines = text.lines();
    if !lines.by_ref().any(|line| line.trim_end() == "...") {
        return Err("the provenance file has no files section (after a `...` line)".into());
    }
    let files_part = lines.collect::<Vec<_>>().join("\n");
    let files: Files = serde_saphyr::from_str(&files_part)
        .map_err(|e| format!("the provenance file's files section does not parse: {e}"))?;
    Ok(files.files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provenance_files_are_read_after_the_separator() {
        let text = "apiVersion: v2\r\nname: demo\r\nversion: 0.1.0\r\n\r\n...\r\nfiles:\r\n  demo-0.1.0.tgz: sha256:abc\r\n";
        let files = provenance_files(text).unwrap();
        assert_eq!(files["demo-0.1.0.tgz"], "sha256:abc");
        assert!(provenance_files("name: demo\n").is_err());
    }

    #[test]
    fn a_keyring_without_keys_is_refused() {
        let err = Keyring::read(&[("secret a/b key c".into(), b"hello".to_vec())])
            .err()
            .unwrap();
        assert!(err.contains("secret a/b key c"), "{err}");
        assert!(Keyring::read(&[]).is_err());
    }
}
