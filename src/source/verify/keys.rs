//! Public keys in PKIX form (PEM `PUBLIC KEY` blocks, as `cosign generate-key-pair` writes
//! `cosign.pub`, or a certificate's SubjectPublicKeyInfo): ECDSA P-256/P-384, Ed25519 and RSA,
//! verified with ring.

use ring::signature::{self, UnparsedPublicKey, VerificationAlgorithm};
use spki::der::Decode;
use spki::SubjectPublicKeyInfoRef;

const EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
const P256: &str = "1.2.840.10045.3.1.7";
const P384: &str = "1.3.132.0.34";
const ED25519: &str = "1.3.101.112";
const RSA: &str = "1.2.840.113549.1.1.1";

/// The algorithms of a public key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    /// ECDSA on P-256 with SHA-256 (cosign's default).
    EcdsaP256,
    /// ECDSA on P-384 with SHA-384.
    EcdsaP384,
    /// Ed25519 over the message itself.
    Ed25519,
    /// RSA with SHA-256, PKCS#1 v1.5 or PSS.
    Rsa,
}

/// A public key that signatures are checked against.
#[derive(Clone, Debug)]
pub struct PublicKey {
    /// `sha256:<hex>` of the key's SubjectPublicKeyInfo DER.
    pub fingerprint: String,
    /// Where it came from (`secret ns/name key cosign.pub`).
    pub origin: String,
    /// Its algorithm.
    pub kind: KeyKind,
    /// The key as ring reads it: the EC point, the Ed25519 key, the RSAPublicKey DER.
    raw: Vec<u8>,
}

impl PublicKey {
    /// Reads a SubjectPublicKeyInfo (DER).
    pub fn from_spki_der(der: &[u8], origin: &str) -> Result<PublicKey, String> {
        let info =
            SubjectPublicKeyInfoRef::from_der(der).map_err(|e| format!("not a public key: {e}"))?;
        let algorithm = info.algorithm.oid.to_string();
        let kind = match algorithm.as_str() {
            EC_PUBLIC_KEY => {
                let curve = info
                    .algorithm
                    .parameters_oid()
                    .map(|oid| oid.to_string())
                    .map_err(|_| "an EC key without a named curve".to_string())?;
                match curve.as_str() {
                    P256 => KeyKind::EcdsaP256,
                    P384 => KeyKind::EcdsaP384,
                    other => return Err(format!("EC curve {other} is not supported")),
                }
            }
            ED25519 => KeyKind::Ed25519,
            RSA => KeyKind::Rsa,
            other => return Err(format!("key algorithm {other} is not supported")),
        };
        let raw = info
            .subject_public_key
            .as_bytes()
            .ok_or_else(|| "the key's bit string is not whole bytes".to_string())?
            .to_vec();
        Ok(PublicKey {
            fingerprint: format!("sha256:{}", super::super::sha256_hex(der)),
            origin: origin.to_string(),
            kind,
            raw,
        })
    }

    /// Every `PUBLIC KEY` block of a PEM text. Text without one is an error; other blocks
    /// (a private key put there by mistake) are refused, naming their type.
    pub fn parse_pem_all(data: &[u8], origin: &str) -> Result<Vec<PublicKey>, String> {
        let blocks = pem::parse_many(data).map_err(|e| format!("{origin}: not PEM: {e}"))?;
        if blocks.is_empty() {
            return Err(format!("{origin}: no PEM PUBLIC KEY block"));
        }
        blocks
            .iter()
            .map(|block| match block.tag() {
                "PUBLIC KEY" => PublicKey::from_spki_der(block.contents(), origin)
                    .map_err(|e| format!("{origin}: {e}")),
                other => Err(format!(
                    "{origin}: a PEM {other} block where a PUBLIC KEY is expected"
                )),
            })
            .collect()
    }

    /// Whether `signature` is this key's signature of `message` (DER ECDSA, raw Ed25519, RSA
    /// PKCS#1 v1.5 or PSS, each with SHA-256, SHA-384 for P-384).
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        let check = |algorithm: &'static dyn VerificationAlgorithm| {
            UnparsedPublicKey::new(algorithm, &self.raw)
                .verify(message, signature)
                .is_ok()
        };
        match self.kind {
            KeyKind::EcdsaP256 => check(&signature::ECDSA_P256_SHA256_ASN1),
            KeyKind::EcdsaP384 => check(&signature::ECDSA_P384_SHA384_ASN1),
            KeyKind::Ed25519 => check(&signature::ED25519),
            KeyKind::Rsa => {
                check(&signature::RSA_PKCS1_2048_8192_SHA256)
                    || check(&signature::RSA_PSS_2048_8192_SHA256)
            }
        }
    }
}

/// Every public key in the Secret's keys; keys that are not PEM public keys are errors naming
/// the key, and a Secret with none is an error too.
pub fn read_public_keys(material: &[(String, Vec<u8>)]) -> Result<Vec<PublicKey>, String> {
    let mut keys = Vec::new();
    for (origin, data) in material {
        keys.extend(PublicKey::parse_pem_all(data, origin)?);
    }
    if keys.is_empty() {
        return Err("the Secret holds no public key".into());
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};

    /// The SPKI DER of a P-256 public point.
    fn p256_spki(point: &[u8]) -> Vec<u8> {
        let mut der = vec![
            0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06,
            0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
        ];
        der.extend_from_slice(point);
        der
    }

    fn ed25519_spki(key: &[u8]) -> Vec<u8> {
        let mut der = vec![
            0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
        ];
        der.extend_from_slice(key);
        der
    }

    #[test]
    fn ecdsa_and_ed25519_keys_verify_their_signatures_only() {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let pem = pem::encode(&pem::Pem::new(
            "PUBLIC KEY",
            p256_spki(pair.public_key().as_ref()),
        ));
        let keys = PublicKey::parse_pem_all(pem.as_bytes(), "k").unwrap();
        assert_eq!(keys[0].kind, KeyKind::EcdsaP256);
        assert!(keys[0].fingerprint.starts_with("sha256:"));
        let sig = pair.sign(&rng, b"payload").unwrap();
        assert!(keys[0].verifies(b"payload", sig.as_ref()));
        assert!(!keys[0].verifies(b"other", sig.as_ref()));

        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        let key = PublicKey::from_spki_der(&ed25519_spki(pair.public_key().as_ref()), "e").unwrap();
        assert_eq!(key.kind, KeyKind::Ed25519);
        assert!(key.verifies(b"payload", pair.sign(b"payload").as_ref()));
        assert!(!keys[0].verifies(b"payload", pair.sign(b"payload").as_ref()));
    }

    #[test]
    fn other_pem_blocks_are_refused_by_name() {
        let pem = "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n";
        let err = PublicKey::parse_pem_all(pem.as_bytes(), "secret a/b key c").unwrap_err();
        assert!(err.contains("EC PRIVATE KEY"), "{err}");
        assert!(read_public_keys(&[]).is_err());
    }
}
