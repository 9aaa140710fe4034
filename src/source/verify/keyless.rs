//! Keyless signatures: a short-lived certificate from a Fulcio-like CA names who signed (its
//! OIDC issuer and subject), and a transparency log entry says when, while the certificate was
//! valid. Both are checked against a trusted root in Sigstore's `trusted_root.json` format.
//!
//! - The certificate must chain (rustls-webpki, code-signing usage) to a certificate authority of
//!   the root, at the log entry's integrated time (or now, when the root names no log), within
//!   the authority's `validFor`.
//! - When the root names transparency logs, a signature must come with an entry of one of them:
//!   its signed entry timestamp verifies with the log's key, its inclusion proof (when given)
//!   leads to the root hash it names, and its body names this signature and certificate.
//! - Signed timestamps from timestamp authorities (RFC 3161) and the certificate's embedded SCTs
//!   are not checked (docs/guides/verification.md says so).

use base64::Engine;
use rustls::pki_types::{CertificateDer, UnixTime};
use serde::Deserialize;
use spki::der::{Decode, Encode};
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::SubjectAltName;

use super::keys::PublicKey;
use crate::api::IdentityMatch;

/// The certificate's OIDC issuer (DER UTF8String).
const OIDC_ISSUER_V2: &str = "1.3.6.1.4.1.57264.1.8";
/// The certificate's OIDC issuer (raw bytes; older certificates).
const OIDC_ISSUER_V1: &str = "1.3.6.1.4.1.57264.1.1";
const SUBJECT_ALT_NAME: &str = "2.5.29.17";
/// id-kp-codeSigning, DER contents of the OID.
const CODE_SIGNING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x03];

fn b64(text: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("bad base64: {e}"))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RootJson {
    #[serde(default)]
    tlogs: Vec<LogJson>,
    #[serde(default)]
    certificate_authorities: Vec<AuthorityJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LogJson {
    #[serde(default)]
    base_url: Option<String>,
    public_key: KeyJson,
    log_id: LogIdJson,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct KeyJson {
    raw_bytes: String,
    #[serde(default)]
    valid_for: Option<ValidForJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LogIdJson {
    key_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuthorityJson {
    #[serde(default)]
    uri: Option<String>,
    cert_chain: ChainJson,
    #[serde(default)]
    valid_for: Option<ValidForJson>,
}

#[derive(Deserialize)]
struct ChainJson {
    certificates: Vec<RawJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawJson {
    raw_bytes: String,
}

#[derive(Deserialize, Default)]
struct ValidForJson {
    #[serde(default)]
    start: Option<String>,
    #[serde(default)]
    end: Option<String>,
}

/// A time window in Unix seconds; an open end is unbounded.
#[derive(Clone, Copy, Debug, Default)]
struct Window {
    start: Option<i64>,
    end: Option<i64>,
}

impl Window {
    fn read(valid_for: Option<&ValidForJson>) -> Result<Window, String> {
        let parse = |text: &Option<String>| -> Result<Option<i64>, String> {
            text.as_deref()
                .map(|t| {
                    t.parse::<k8s_openapi::jiff::Timestamp>()
                        .map(|ts| ts.as_second())
                        .map_err(|e| format!("validFor time {t:?}: {e}"))
                })
                .transpose()
        };
        let valid_for = valid_for.unwrap_or(&ValidForJson {
            start: None,
            end: None,
        });
        Ok(Window {
            start: parse(&valid_for.start)?,
            end: parse(&valid_for.end)?,
        })
    }

    fn contains(&self, at: i64) -> bool {
        self.start.is_none_or(|s| at >= s) && self.end.is_none_or(|e| at <= e)
    }
}

/// A transparency log of the trusted root.
struct Log {
    name: String,
    key: PublicKey,
    log_id: Vec<u8>,
    valid: Window,
}

/// A certificate authority of the trusted root: its root and intermediates (DER).
struct Authority {
    name: String,
    root: Vec<u8>,
    intermediates: Vec<Vec<u8>>,
    valid: Window,
}

/// The trusted root, as read from `trusted_root.json`.
pub struct TrustRoot {
    logs: Vec<Log>,
    authorities: Vec<Authority>,
}

impl TrustRoot {
    /// Reads Sigstore's trusted root JSON. It must name a certificate authority.
    pub fn parse(data: &[u8]) -> Result<TrustRoot, String> {
        let json: RootJson =
            serde_json::from_slice(data).map_err(|e| format!("not a trusted root: {e}"))?;
        let mut logs = Vec::new();
        for (i, log) in json.tlogs.iter().enumerate() {
            let name = log
                .base_url
                .clone()
                .unwrap_or_else(|| format!("tlogs[{i}]"));
            let der = b64(&log.public_key.raw_bytes).map_err(|e| format!("{name}: {e}"))?;
            logs.push(Log {
                key: PublicKey::from_spki_der(&der, &name).map_err(|e| format!("{name}: {e}"))?,
                log_id: b64(&log.log_id.key_id).map_err(|e| format!("{name}: {e}"))?,
                valid: Window::read(log.public_key.valid_for.as_ref())?,
                name,
            });
        }
        let mut authorities = Vec::new();
        for (i, ca) in json.certificate_authorities.iter().enumerate() {
            let name = ca
                .uri
                .clone()
                .unwrap_or_else(|| format!("certificateAuthorities[{i}]"));
            let mut chain = ca
                .cert_chain
                .certificates
                .iter()
                .map(|c| b64(&c.raw_bytes))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{name}: {e}"))?;
            // The chain runs from the issuing certificate to the root.
            let root = chain
                .pop()
                .ok_or_else(|| format!("{name}: an empty certificate chain"))?;
            authorities.push(Authority {
                name,
                root,
                intermediates: chain,
                valid: Window::read(ca.valid_for.as_ref())?,
            });
        }
        if authorities.is_empty() {
            return Err("the trusted root names no certificate authority".into());
        }
        Ok(TrustRoot { logs, authorities })
    }

    /// Whether signatures must come with a transparency log entry.
    pub fn has_logs(&self) -> bool {
        !self.logs.is_empty()
    }
}

/// A transparency log entry as a signature carries it.
#[derive(Clone, Debug)]
pub struct LogEntry {
    /// The canonicalized entry body, base64 as the log serves it.
    pub body: String,
    /// When the log integrated it (Unix seconds).
    pub integrated_time: i64,
    /// Its index in the log.
    pub log_index: i64,
    /// The log's id (SHA-256 of its public key).
    pub log_id: Vec<u8>,
    /// The log's signature of the entry (signed entry timestamp).
    pub signed_entry_timestamp: Option<Vec<u8>>,
    /// The proof that the entry is in the tree, when given.
    pub inclusion_proof: Option<InclusionProof>,
}

/// An RFC 6962 audit path from the entry to the tree's root hash.
#[derive(Clone, Debug)]
pub struct InclusionProof {
    /// The entry's index in the tree.
    pub log_index: u64,
    /// The tree's size.
    pub tree_size: u64,
    /// The root hash the path leads to.
    pub root_hash: Vec<u8>,
    /// The sibling hashes, from the leaf up.
    pub hashes: Vec<Vec<u8>>,
}

/// What a keyless signature carries.
pub struct Keyless<'a> {
    /// The signing certificate (DER).
    pub certificate: &'a [u8],
    /// Intermediates the signature names (DER), besides the root's.
    pub chain: &'a [Vec<u8>],
    /// The log entry, if any.
    pub log_entry: Option<&'a LogEntry>,
}

/// Who a verified certificate names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Its OIDC issuer.
    pub issuer: String,
    /// Its subject (email or URI SAN).
    pub subject: String,
    /// The log entry's index, when there was one.
    pub log_index: Option<i64>,
}

/// Checks a keyless signature up to (not including) the signature itself: log entry, chain at
/// the signing time, identity. `body_names_signature` says whether a log entry's decoded body
/// names this signature and certificate. Returns the identity and the certificate's key, which
/// the caller verifies the signature with.
pub fn verify_certificate(
    root: &TrustRoot,
    signature: &Keyless<'_>,
    identities: &[IdentityMatch],
    body_names_signature: impl Fn(&serde_json::Value) -> Result<(), String>,
) -> Result<(Identity, PublicKey), String> {
    let (at, log_index) = match (root.has_logs(), signature.log_entry) {
        (true, None) => {
            return Err(
                "log entry invalid: the signature has no transparency log entry and the trusted root names logs"
                    .into(),
            )
        }
        (true, Some(entry)) => {
            verify_log_entry(root, entry)?;
            let body = b64(&entry.body)
                .ok()
                .and_then(|raw| serde_json::from_slice::<serde_json::Value>(&raw).ok())
                .ok_or("log entry invalid: its body is not JSON")?;
            body_names_signature(&body).map_err(|e| format!("log entry invalid: {e}"))?;
            (entry.integrated_time, Some(entry.log_index))
        }
        // No log to trust: the certificate must be valid now.
        (false, _) => (k8s_openapi::jiff::Timestamp::now().as_second(), None),
    };
    verify_chain(root, signature, at)?;
    let certificate = x509_cert::Certificate::from_der(signature.certificate)
        .map_err(|e| format!("the signing certificate does not parse: {e}"))?;
    let (issuer, subject) = identity_of(&certificate)?;
    let allowed = identities.iter().any(|m| {
        matches(m.issuer.as_deref(), m.issuer_regexp.as_deref(), &issuer)
            && matches(m.subject.as_deref(), m.subject_regexp.as_deref(), &subject)
    });
    if !allowed {
        return Err(format!(
            "identity mismatch: the certificate names issuer {issuer:?} and subject {subject:?}, which no entry of identities allows"
        ));
    }
    let spki = certificate
        .tbs_certificate
        .subject_public_key_info
        .to_der()
        .map_err(|e| format!("the certificate's key: {e}"))?;
    let key = PublicKey::from_spki_der(&spki, "the signing certificate")?;
    Ok((
        Identity {
            issuer,
            subject,
            log_index,
        },
        key,
    ))
}

/// Exact text or a regular expression (unanchored, as cosign's `--certificate-identity-regexp`).
fn matches(exact: Option<&str>, pattern: Option<&str>, value: &str) -> bool {
    match (exact, pattern) {
        (Some(exact), _) => exact == value,
        (None, Some(pattern)) => regex::Regex::new(pattern).is_ok_and(|r| r.is_match(value)),
        (None, None) => false,
    }
}

/// The issuer and subject a Fulcio certificate names.
fn identity_of(certificate: &x509_cert::Certificate) -> Result<(String, String), String> {
    let mut issuer = None;
    let mut subject = None;
    for ext in certificate.tbs_certificate.extensions.iter().flatten() {
        let value = ext.extn_value.as_bytes();
        match ext.extn_id.to_string().as_str() {
            OIDC_ISSUER_V2 => {
                let text = spki::der::asn1::Utf8StringRef::from_der(value)
                    .map_err(|e| format!("the certificate's OIDC issuer: {e}"))?;
                issuer = Some(text.as_str().to_string());
            }
            OIDC_ISSUER_V1 if issuer.is_none() => {
                issuer = Some(String::from_utf8_lossy(value).into_owned());
            }
            SUBJECT_ALT_NAME => {
                let names = SubjectAltName::from_der(value)
                    .map_err(|e| format!("the certificate's subject alternative name: {e}"))?;
                subject = names.0.iter().find_map(|name| match name {
                    GeneralName::Rfc822Name(email) => Some(email.to_string()),
                    GeneralName::UniformResourceIdentifier(uri) => Some(uri.to_string()),
                    _ => None,
                });
            }
            _ => {}
        }
    }
    Ok((
        issuer.ok_or("identity mismatch: the certificate names no OIDC issuer")?,
        subject.ok_or("identity mismatch: the certificate names no email or URI subject")?,
    ))
}

/// The certificate chains to an authority of the root, valid at `at`.
fn verify_chain(root: &TrustRoot, signature: &Keyless<'_>, at: i64) -> Result<(), String> {
    let leaf = CertificateDer::from(signature.certificate);
    let end_entity = webpki::EndEntityCert::try_from(&leaf)
        .map_err(|e| format!("the signing certificate does not parse: {e:?}"))?;
    let time = UnixTime::since_unix_epoch(std::time::Duration::from_secs(at.max(0) as u64));
    let mut reasons = Vec::new();
    for authority in &root.authorities {
        if !authority.valid.contains(at) {
            reasons.push(format!(
                "{} is not valid at the signing time",
                authority.name
            ));
            continue;
        }
        let root_der = CertificateDer::from(authority.root.as_slice());
        let anchor = match webpki::anchor_from_trusted_cert(&root_der) {
            Ok(anchor) => anchor,
            Err(e) => {
                reasons.push(format!(
                    "{}: its root does not parse: {e:?}",
                    authority.name
                ));
                continue;
            }
        };
        let intermediates: Vec<CertificateDer<'_>> = authority
            .intermediates
            .iter()
            .chain(signature.chain.iter())
            .map(|der| CertificateDer::from(der.as_slice()))
            .collect();
        match end_entity.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &[anchor],
            &intermediates,
            time,
            webpki::KeyUsage::required(CODE_SIGNING),
            None,
            None,
        ) {
            Ok(_) => return Ok(()),
            Err(e) => reasons.push(format!("{}: {e:?}", authority.name)),
        }
    }
    Err(format!(
        "certificate not trusted: it does not chain to the trusted root at the signing time ({})",
        reasons.join("; ")
    ))
}

/// The entry's signed entry timestamp verifies with a log of the root valid at its time, and
/// its inclusion proof (when given) leads to the root hash it names.
fn verify_log_entry(root: &TrustRoot, entry: &LogEntry) -> Result<(), String> {
    let log = root
        .logs
        .iter()
        .find(|log| log.log_id == entry.log_id)
        .ok_or("log entry invalid: it is from a log the trusted root does not name")?;
    if !log.valid.contains(entry.integrated_time) {
        return Err(format!(
            "log entry invalid: {}'s key is not valid at the entry's time",
            log.name
        ));
    }
    let set = entry
        .signed_entry_timestamp
        .as_deref()
        .ok_or("log entry invalid: it has no signed entry timestamp")?;
    // The log signs the canonical JSON of these four fields (keys sorted, no spaces).
    let promise = serde_json::json!({
        "body": entry.body,
        "integratedTime": entry.integrated_time,
        "logID": super::super::hex(&entry.log_id),
        "logIndex": entry.log_index,
    });
    let signed = serde_json::to_vec(&promise).map_err(|e| e.to_string())?;
    if !log.key.verifies(&signed, set) {
        return Err(format!(
            "log entry invalid: its signed entry timestamp does not verify with {}'s key",
            log.name
        ));
    }
    if let Some(proof) = &entry.inclusion_proof {
        let leaf = b64(&entry.body).map_err(|e| format!("log entry invalid: {e}"))?;
        let computed = root_from_proof(&leaf, proof)
            .ok_or("log entry invalid: its inclusion proof has the wrong number of hashes")?;
        if computed != proof.root_hash {
            return Err(
                "log entry invalid: its inclusion proof does not lead to its root hash".into(),
            );
        }
    }
    Ok(())
}

/// The root hash an RFC 6962 audit path gives for `leaf` (RFC 9162, 2.1.3.2); `None` when the
/// path's length does not fit the index and size.
fn root_from_proof(leaf: &[u8], proof: &InclusionProof) -> Option<Vec<u8>> {
    use sha2::{Digest, Sha256};
    if proof.log_index >= proof.tree_size {
        return None;
    }
    let node = |left: &[u8], right: &[u8]| {
        let mut h = Sha256::new();
        h.update([1u8]);
        h.update(left);
        h.update(right);
        h.finalize().to_vec()
    };
    let mut hash = {
        let mut h = Sha256::new();
        h.update([0u8]);
        h.update(leaf);
        h.finalize().to_vec()
    };
    let (mut index, mut last) = (proof.log_index, proof.tree_size - 1);
    for sibling in &proof.hashes {
        if last == 0 {
            return None;
        }
        if index % 2 == 1 || index == last {
            hash = node(sibling, &hash);
            if index % 2 == 0 {
                while index % 2 == 0 && index != 0 {
                    index >>= 1;
                    last >>= 1;
                }
            }
        } else {
            hash = node(&hash, sibling);
        }
        index >>= 1;
        last >>= 1;
    }
    (last == 0).then_some(hash)
}

/// Reads a transparency log entry as cosign's signature tag layout carries it (the
/// `dev.sigstore.cosign/bundle` annotation: `SignedEntryTimestamp` and `Payload`).
pub fn entry_from_cosign_annotation(text: &str) -> Result<LogEntry, String> {
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Annotation {
        signed_entry_timestamp: String,
        payload: Payload,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Payload {
        body: String,
        integrated_time: i64,
        log_index: i64,
        #[serde(rename = "logID")]
        log_id: String,
    }
    let annotation: Annotation =
        serde_json::from_str(text).map_err(|e| format!("log entry invalid: {e}"))?;
    let log_id =
        decode_hex(&annotation.payload.log_id).ok_or("log entry invalid: its logID is not hex")?;
    Ok(LogEntry {
        body: annotation.payload.body,
        integrated_time: annotation.payload.integrated_time,
        log_index: annotation.payload.log_index,
        log_id,
        signed_entry_timestamp: Some(
            b64(&annotation.signed_entry_timestamp)
                .map_err(|e| format!("log entry invalid: {e}"))?,
        ),
        inclusion_proof: None,
    })
}

pub(super) fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Whether a log entry body (hashedrekord or dsse) names `signature`, `certificate` and the
/// SHA-256 of what was signed (`signed_sha256`: the payload for both kinds).
pub fn body_names(
    body: &serde_json::Value,
    signature: &[u8],
    certificate: &[u8],
    signed_sha256: &str,
) -> Result<(), String> {
    let spec = &body["spec"];
    let names_certificate = |encoded: &serde_json::Value| {
        encoded
            .as_str()
            .and_then(|t| b64(t).ok())
            .and_then(|pem| pem::parse(pem).ok())
            .is_some_and(|p| p.contents() == certificate)
    };
    let names_signature = |encoded: &serde_json::Value| {
        encoded
            .as_str()
            .and_then(|t| b64(t).ok())
            .is_some_and(|s| s == signature)
    };
    match body["kind"].as_str() {
        Some("hashedrekord") => {
            if spec["data"]["hash"]["value"].as_str() != Some(signed_sha256) {
                return Err("its body names another digest".into());
            }
            if !names_signature(&spec["signature"]["content"]) {
                return Err("its body names another signature".into());
            }
            if !names_certificate(&spec["signature"]["publicKey"]["content"]) {
                return Err("its body names another certificate".into());
            }
            Ok(())
        }
        Some("dsse") => {
            if spec["payloadHash"]["value"].as_str() != Some(signed_sha256) {
                return Err("its body names another payload".into());
            }
            let listed = spec["signatures"].as_array().is_some_and(|sigs| {
                sigs.iter()
                    .any(|s| names_signature(&s["signature"]) && names_certificate(&s["verifier"]))
            });
            if !listed {
                return Err("its body names another signature or certificate".into());
            }
            Ok(())
        }
        other => Err(format!(
            "an entry of kind {other:?} (hashedrekord or dsse expected)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    fn leaf_hash(data: &[u8]) -> Vec<u8> {
        let mut h = Sha256::new();
        h.update([0u8]);
        h.update(data);
        h.finalize().to_vec()
    }

    fn node(l: &[u8], r: &[u8]) -> Vec<u8> {
        let mut h = Sha256::new();
        h.update([1u8]);
        h.update(l);
        h.update(r);
        h.finalize().to_vec()
    }

    #[test]
    fn inclusion_proofs_lead_to_the_root_of_an_uneven_tree() {
        // Five leaves: root = node(node(node(a,b), node(c,d)), e).
        let leaves: Vec<Vec<u8>> = (0..5u8).map(|i| leaf_hash(&[i])).collect();
        let ab = node(&leaves[0], &leaves[1]);
        let cd = node(&leaves[2], &leaves[3]);
        let abcd = node(&ab, &cd);
        let root = node(&abcd, &leaves[4]);
        let proof = |index: u64, hashes: Vec<Vec<u8>>| InclusionProof {
            log_index: index,
            tree_size: 5,
            root_hash: root.clone(),
            hashes,
        };
        let for_c = proof(2, vec![leaves[3].clone(), ab.clone(), leaves[4].clone()]);
        assert_eq!(root_from_proof(&[2], &for_c), Some(root.clone()));
        let for_e = proof(4, vec![abcd.clone()]);
        assert_eq!(root_from_proof(&[4], &for_e), Some(root.clone()));
        // Another leaf, or a path too short, does not lead there.
        assert_ne!(root_from_proof(&[9], &for_c), Some(root.clone()));
        assert_eq!(root_from_proof(&[4], &proof(4, vec![])), None);
    }

    #[test]
    fn identities_match_exactly_or_by_expression() {
        assert!(matches(Some("a@b"), None, "a@b"));
        assert!(!matches(Some("a@b"), None, "a@bc"));
        assert!(matches(
            None,
            Some("^https://github.com/org/"),
            "https://github.com/org/x"
        ));
        assert!(!matches(
            None,
            Some("^https://github.com/org/"),
            "https://github.com/orgx/x"
        ));
        assert!(!matches(None, Some("(unclosed"), "x"));
    }

    /// A CA, a signing certificate for `release@example.test` from `https://issuer.example.test`,
    /// and a log key; the trusted root naming the CA and the log.
    struct World {
        root: TrustRoot,
        certificate: Vec<u8>,
        certificate_pem: String,
        log_key: rcgen::KeyPair,
        log_id: Vec<u8>,
    }

    fn world() -> World {
        use base64::Engine;
        let b64 = |d: &[u8]| base64::engine::general_purpose::STANDARD.encode(d);
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_der = ca.self_signed(&ca_key).unwrap().der().to_vec();
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let mut leaf = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        leaf.subject_alt_names = vec![rcgen::SanType::Rfc822Name(
            "release@example.test".try_into().unwrap(),
        )];
        leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::CodeSigning];
        let issuer = b"https://issuer.example.test";
        let mut value = vec![0x0c, issuer.len() as u8];
        value.extend_from_slice(issuer);
        leaf.custom_extensions = vec![rcgen::CustomExtension::from_oid_content(
            &[1, 3, 6, 1, 4, 1, 57264, 1, 8],
            value,
        )];
        let cert = leaf
            .signed_by(&leaf_key, &rcgen::Issuer::from_params(&ca, &ca_key))
            .unwrap();
        let log_key = rcgen::KeyPair::generate().unwrap();
        let log_spki = rcgen::PublicKeyData::subject_public_key_info(&log_key);
        let log_id = Sha256::digest(&log_spki).to_vec();
        let json = serde_json::json!({
            "tlogs": [{"baseUrl": "https://log.example.test",
                       "publicKey": {"rawBytes": b64(&log_spki)},
                       "logId": {"keyId": b64(&log_id)}}],
            "certificateAuthorities": [{"certChain": {"certificates": [{"rawBytes": b64(&ca_der)}]}}]
        });
        World {
            root: TrustRoot::parse(json.to_string().as_bytes()).unwrap(),
            certificate: cert.der().to_vec(),
            certificate_pem: cert.pem(),
            log_key,
            log_id,
        }
    }

    /// A log entry naming `signature` of `payload` by the world's certificate, signed by `key`.
    fn entry(world: &World, key: &rcgen::KeyPair, signature: &[u8], payload: &[u8]) -> LogEntry {
        use base64::Engine;
        let b64 = |d: &[u8]| base64::engine::general_purpose::STANDARD.encode(d);
        let body = serde_json::json!({"kind": "hashedrekord", "spec": {
            "data": {"hash": {"value": crate::source::sha256_hex(payload)}},
            "signature": {"content": b64(signature),
                          "publicKey": {"content": b64(world.certificate_pem.as_bytes())}}}});
        let body = b64(body.to_string().as_bytes());
        let time = k8s_openapi::jiff::Timestamp::now().as_second();
        let promise = serde_json::json!({"body": body, "integratedTime": time,
            "logID": crate::source::hex(&world.log_id), "logIndex": 7});
        let set = rcgen::SigningKey::sign(key, &serde_json::to_vec(&promise).unwrap()).unwrap();
        LogEntry {
            body,
            integrated_time: time,
            log_index: 7,
            log_id: world.log_id.clone(),
            signed_entry_timestamp: Some(set),
            inclusion_proof: None,
        }
    }

    fn check(
        world: &World,
        entry: Option<&LogEntry>,
        identity: IdentityMatch,
    ) -> Result<Identity, String> {
        let keyless = Keyless {
            certificate: &world.certificate,
            chain: &[],
            log_entry: entry,
        };
        let names = |body: &serde_json::Value| {
            body_names(
                body,
                b"sig",
                &world.certificate,
                &crate::source::sha256_hex(b"payload"),
            )
        };
        verify_certificate(&world.root, &keyless, &[identity], names).map(|(id, _)| id)
    }

    fn allowed() -> IdentityMatch {
        IdentityMatch {
            issuer: Some("https://issuer.example.test".into()),
            subject_regexp: Some("^release@".into()),
            issuer_regexp: None,
            subject: None,
        }
    }

    #[test]
    fn keyless_certificates_verify_with_their_log_entry_and_identity_only() {
        let world = world();
        let good = entry(&world, &world.log_key, b"sig", b"payload");
        let identity = check(&world, Some(&good), allowed()).unwrap();
        assert_eq!(identity.subject, "release@example.test");
        assert_eq!(identity.log_index, Some(7));

        let other = IdentityMatch {
            subject: Some("else@example.test".into()),
            subject_regexp: None,
            ..allowed()
        };
        let err = check(&world, Some(&good), other).unwrap_err();
        assert!(err.starts_with("identity mismatch"), "{err}");

        let err = check(&world, None, allowed()).unwrap_err();
        assert!(err.starts_with("log entry invalid"), "{err}");

        // Signed by a key that is not the log's.
        let forged = entry(
            &world,
            &rcgen::KeyPair::generate().unwrap(),
            b"sig",
            b"payload",
        );
        let err = check(&world, Some(&forged), allowed()).unwrap_err();
        assert!(
            err.contains("signed entry timestamp does not verify"),
            "{err}"
        );

        // The log's entry is for another signature.
        let elsewhere = entry(&world, &world.log_key, b"other", b"payload");
        let err = check(&world, Some(&elsewhere), allowed()).unwrap_err();
        assert!(err.contains("another signature"), "{err}");

        // A certificate from another CA.
        let other_world = self::world();
        let stranger = World {
            certificate: other_world.certificate,
            certificate_pem: other_world.certificate_pem,
            ..world
        };
        let logged = entry(&stranger, &stranger.log_key, b"sig", b"payload");
        let err = check(&stranger, Some(&logged), allowed()).unwrap_err();
        assert!(err.starts_with("certificate not trusted"), "{err}");
    }

    #[test]
    fn hex_decodes() {
        assert_eq!(decode_hex("0aff"), Some(vec![0x0a, 0xff]));
        assert_eq!(decode_hex("0g"), None);
        assert_eq!(decode_hex("abc"), None);
    }
}
