//! SSH signatures of git objects (`gpg.format ssh`: an armored SSHSIG in namespace `git`),
//! verified with ssh-key against public keys from a Secret.

use ssh_key::{HashAlg, PublicKey, SshSig};

/// The namespace git signs commits and tags in.
const GIT_NAMESPACE: &str = "git";

/// Key types a public-key line may start with (allowed_signers lines put principals first).
fn is_key_type(word: &str) -> bool {
    word.starts_with("ssh-") || word.starts_with("ecdsa-sha2-") || word.starts_with("sk-")
}

/// Every SSH public key in the Secret's entries: one per line, as `authorized_keys`
/// (`ssh-ed25519 AAAA… comment`) or `allowed_signers` (`principal ssh-ed25519 AAAA…`) write
/// them. Lines that are no SSH key (OpenPGP armor, comments) are skipped; a line that looks like
/// one and does not parse is an error.
pub fn read_keys(material: &[(String, Vec<u8>)]) -> Result<Vec<PublicKey>, String> {
    let mut keys = Vec::new();
    for (origin, data) in material {
        let text = String::from_utf8_lossy(data);
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some(start) = words.iter().position(|w| is_key_type(w)) else {
                continue;
            };
            let key_text = words[start..].join(" ");
            let key = PublicKey::from_openssh(&key_text)
                .map_err(|e| format!("{origin}: an SSH public key that does not parse: {e}"))?;
            keys.push(key);
        }
    }
    Ok(keys)
}

/// The `SHA256:` fingerprint of a key.
pub fn fingerprint(key: &PublicKey) -> String {
    key.fingerprint(HashAlg::Sha256).to_string()
}

/// Verifies an armored SSH signature of `data`; returns the signing key's fingerprint.
pub fn verify(keys: &[PublicKey], armored: &str, data: &[u8]) -> Result<String, String> {
    let signature =
        SshSig::from_pem(armored).map_err(|e| format!("the SSH signature does not parse: {e}"))?;
    if signature.namespace() != GIT_NAMESPACE {
        return Err(format!(
            "the SSH signature is for namespace {:?}, not git",
            signature.namespace()
        ));
    }
    keys.iter()
        .find(|key| key.verify(GIT_NAMESPACE, data, &signature).is_ok())
        .map(fingerprint)
        .ok_or_else(|| {
            let signer = PublicKey::from(signature.public_key().clone());
            format!(
                "no key matched: the SSH signature is by {}, which is not among the keys ({})",
                fingerprint(&signer),
                keys.iter().map(fingerprint).collect::<Vec<_>>().join(", ")
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_read_from_authorized_keys_and_allowed_signers_lines() {
        let line = "AAAAC3NzaC1lZDI1NTE5AAAAIBjSZbTVTGKbImjbq1J4/zQ+cpX0PmLDpm6V5UGz/0le";
        let text = format!(
            "# a comment\nssh-ed25519 {line} dev@example\ndev@example ssh-ed25519 {line}\n-----BEGIN PGP PUBLIC KEY BLOCK-----\n"
        );
        let keys = read_keys(&[("secret a/b key k".into(), text.into_bytes())]).unwrap();
        assert_eq!(keys.len(), 2);
        assert!(fingerprint(&keys[0]).starts_with("SHA256:"));
        let bad = read_keys(&[("secret a/b key k".into(), b"ssh-ed25519 !!!".to_vec())]);
        assert!(bad.unwrap_err().contains("secret a/b key k"));
    }
}
