//! cosign signatures of an OCI artifact, looked for in both places cosign puts them:
//!
//! - Sigstore bundles attached as OCI referrers (cosign v3's default): found with the referrers
//!   API, or the `sha256-<hex>` referrers tag on registries without it. The bundle holds a DSSE
//!   envelope of an in-toto statement naming the manifest digest (predicate
//!   `https://sigstore.dev/cosign/sign/v1`), and the key hint or certificate and log entries.
//! - The signature tag `sha256-<hex>.sig` (cosign v2's layout): each layer a simple-signing
//!   payload naming the manifest digest, its signature, certificate, chain and log entry in the
//!   layer's annotations.
//!
//! A signature counts when it verifies with one of the configured keys, or keyless: its
//! certificate chains to the trusted root and names an allowed identity (see [`super::keyless`]).

use base64::Engine;
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use serde::Deserialize;

use super::keyless::{self, Keyless, LogEntry, TrustRoot};
use super::keys::{read_public_keys, PublicKey};
use super::{failed, join_reasons, unusable, VerifyMaterial};
use crate::api::{IdentityMatch, VerifiedSignature};
use crate::bounded::Reader;
use crate::source::registry::{self, Registry, Repo};
use crate::source::SourceError;

/// The predicate of the statement cosign signs for an image (any other is an attestation).
const SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";
const BUNDLE_MEDIA_PREFIX: &str = "application/vnd.dev.sigstore.bundle";
const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
const CERTIFICATE_ANNOTATION: &str = "dev.sigstore.cosign/certificate";
const CHAIN_ANNOTATION: &str = "dev.sigstore.cosign/chain";
const LOG_ENTRY_ANNOTATION: &str = "dev.sigstore.cosign/bundle";
const MANIFEST_TYPES: &[&str] = &[
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];
/// Signatures looked at per place at most: a registry listing thousands is cut off there.
const MAX_SIGNATURES: usize = 16;
/// The largest signature blob read (a bundle with a long chain is a few KiB).
const MAX_SIGNATURE_BYTES: u64 = 1 << 20;

/// The keys and identities a cosign signature may verify with.
pub struct CosignPolicy {
    keys: Vec<PublicKey>,
    keyless: Option<(TrustRoot, Vec<IdentityMatch>)>,
}

impl CosignPolicy {
    /// The policy of `material`; keys or a trusted root that do not parse are an error.
    pub fn from_material(material: &VerifyMaterial) -> Result<CosignPolicy, SourceError> {
        let Some(spec) = &material.spec.cosign else {
            return Err(SourceError::Invalid(
                "verify: this source takes verify.cosign".into(),
            ));
        };
        let keys = match &spec.public_keys {
            Some(_) => read_public_keys(&material.keys)
                .map_err(|e| unusable("verify.cosign.publicKeys", e))?,
            None => Vec::new(),
        };
        let keyless = match (&spec.keyless, &material.trusted_root) {
            (Some(keyless), Some((origin, data))) => Some((
                TrustRoot::parse(data).map_err(|e| unusable(origin, e))?,
                keyless.identities.clone(),
            )),
            (Some(_), None) => {
                return Err(SourceError::Invalid(
                    "verify.cosign.keyless: the trusted root was not read".into(),
                ))
            }
            (None, _) => None,
        };
        Ok(CosignPolicy { keys, keyless })
    }
}

/// Where to look: the registry client and the artifact.
pub struct Target<'a> {
    /// The registry client (already authenticated for the repository when it resolved a tag).
    pub registry: &'a Registry,
    /// The artifact's repository.
    pub repo: Repo<'a>,
    /// `sha256:<hex>` of the artifact's manifest.
    pub digest: &'a str,
    /// How the source is named in messages.
    pub what: &'a str,
}

/// Verifies the artifact's cosign signatures: the first that satisfies `policy` names the signer.
/// None found, or none that verifies, is `VerificationFailed` with every reason.
pub async fn verify(
    target: &Target<'_>,
    policy: &CosignPolicy,
) -> Result<VerifiedSignature, SourceError> {
    let hex = target
        .digest
        .strip_prefix("sha256:")
        .ok_or_else(|| failed(target.what, target.digest, "the digest is not sha256"))?;
    let mut reasons = Vec::new();
    let mut found = 0usize;
    for bundle in referrer_bundles(target).await? {
        found += 1;
        match verify_bundle(&bundle, hex, policy) {
            Ok(signer) => return Ok(signer),
            Err(reason) => reasons.push(format!("bundle: {reason}")),
        }
    }
    for (layer, payload) in signature_tag_layers(target, hex).await? {
        found += 1;
        match verify_signature_layer(&layer, &payload, target.digest, policy) {
            Ok(signer) => return Ok(signer),
            Err(reason) => reasons.push(format!("signature tag: {reason}")),
        }
    }
    let reason = if found == 0 {
        format!(
            "signature missing: no cosign signature (no Sigstore bundle referrer, no tag sha256-{}.sig)",
            short(hex)
        )
    } else {
        join_reasons(&reasons)
    };
    Err(failed(target.what, target.digest, reason))
}

fn short(hex: &str) -> &str {
    hex.get(..12).unwrap_or(hex)
}

/// Reads a signature blob under the signature blob limit (counted as it arrives, whatever its
/// descriptor declares), checked against its digest.
async fn small_blob(
    target: &Target<'_>,
    descriptor: &OciDescriptor,
) -> Result<Vec<u8>, SourceError> {
    if descriptor.size < 0 || descriptor.size as u64 > MAX_SIGNATURE_BYTES {
        return Err(failed(
            target.what,
            target.digest,
            format!(
                "a signature blob of {} bytes (at most {MAX_SIGNATURE_BYTES} are read)",
                descriptor.size
            ),
        ));
    }
    target
        .registry
        .blob(
            target.repo,
            &descriptor.digest,
            Reader::SignatureBlob.limit(MAX_SIGNATURE_BYTES),
            target.what,
        )
        .await
}

/// A signature's image manifest by `reference` (a tag or digest); `None` when there is none.
async fn manifest(
    target: &Target<'_>,
    reference: &str,
) -> Result<Option<OciImageManifest>, SourceError> {
    let what = format!("signature manifest {reference} of {}", target.what);
    let Some(bytes) = target
        .registry
        .manifest_bytes(target.repo, reference, MANIFEST_TYPES, &what)
        .await?
    else {
        return Ok(None);
    };
    registry::parse_image_manifest(&bytes)
        .map(Some)
        .map_err(|e| failed(target.what, target.digest, format!("{what} {e}")))
}

/// The Sigstore bundles attached to the artifact as referrers.
async fn referrer_bundles(target: &Target<'_>) -> Result<Vec<Vec<u8>>, SourceError> {
    let index = target
        .registry
        .referrers(target.repo, target.digest, target.what)
        .await?;
    let mut bundles = Vec::new();
    let candidates = index.manifests.iter().filter(|entry| {
        entry
            .artifact_type
            .as_deref()
            .is_none_or(|t| t.starts_with(BUNDLE_MEDIA_PREFIX))
    });
    for entry in candidates.take(MAX_SIGNATURES) {
        let Some(manifest) = manifest(target, &entry.digest).await? else {
            continue;
        };
        if let Some(layer) = manifest
            .layers
            .iter()
            .find(|l| l.media_type.starts_with(BUNDLE_MEDIA_PREFIX))
        {
            bundles.push(small_blob(target, layer).await?);
        }
    }
    Ok(bundles)
}

/// The layers (with their payloads) of the `sha256-<hex>.sig` tag.
async fn signature_tag_layers(
    target: &Target<'_>,
    hex: &str,
) -> Result<Vec<(OciDescriptor, Vec<u8>)>, SourceError> {
    let Some(manifest) = manifest(target, &format!("sha256-{hex}.sig")).await? else {
        return Ok(Vec::new());
    };
    let mut layers = Vec::new();
    for layer in manifest.layers.into_iter().take(MAX_SIGNATURES) {
        let payload = small_blob(target, &layer).await?;
        layers.push((layer, payload));
    }
    Ok(layers)
}

fn b64(text: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("bad base64: {e}"))
}

/// Verifies one layer of the signature tag: its payload names `digest`, and its signature
/// verifies with a key, or keyless.
fn verify_signature_layer(
    layer: &OciDescriptor,
    payload: &[u8],
    digest: &str,
    policy: &CosignPolicy,
) -> Result<VerifiedSignature, String> {
    #[derive(Deserialize)]
    struct Simple {
        critical: Critical,
    }
    #[derive(Deserialize)]
    struct Critical {
        image: Image,
    }
    #[derive(Deserialize)]
    struct Image {
        #[serde(rename = "docker-manifest-digest")]
        digest: String,
    }
    let annotations = layer.annotations.clone().unwrap_or_default();
    let simple: Simple = serde_json::from_slice(payload)
        .map_err(|e| format!("the payload is not a cosign signature payload: {e}"))?;
    if simple.critical.image.digest != digest {
        return Err(format!(
            "the signature is of another digest ({})",
            simple.critical.image.digest
        ));
    }
    let signature = annotations
        .get(SIGNATURE_ANNOTATION)
        .ok_or("signature missing: a layer without a signature annotation")
        .and_then(|s| b64(s).map_err(|_| "the signature annotation is not base64"))?;
    let signed = Signed {
        message: payload,
        signature: &signature,
        signed_sha256: crate::source::sha256_hex(payload),
        label: "signature tag",
    };
    let certificate = annotations
        .get(CERTIFICATE_ANNOTATION)
        .map(|pem| pem_certificates(pem))
        .transpose()?
        .and_then(|mut list| (!list.is_empty()).then(|| list.remove(0)));
    let chain = annotations
        .get(CHAIN_ANNOTATION)
        .map(|pem| pem_certificates(pem))
        .transpose()?
        .unwrap_or_default();
    let log_entry = annotations
        .get(LOG_ENTRY_ANNOTATION)
        .map(|text| keyless::entry_from_cosign_annotation(text))
        .transpose()?;
    verify_signed(
        &signed,
        certificate.as_deref(),
        &chain,
        log_entry.as_ref(),
        policy,
    )
}

fn pem_certificates(text: &str) -> Result<Vec<Vec<u8>>, String> {
    let blocks =
        pem::parse_many(text).map_err(|e| format!("a certificate that is not PEM: {e}"))?;
    Ok(blocks
        .into_iter()
        .filter(|b| b.tag() == "CERTIFICATE")
        .map(|b| b.contents().to_vec())
        .collect())
}

/// What a signature signs.
struct Signed<'a> {
    /// The bytes signed (a payload, or a DSSE envelope's pre-authentication encoding).
    message: &'a [u8],
    signature: &'a [u8],
    /// Hex SHA-256 of the payload, as a log entry's body names it.
    signed_sha256: String,
    /// `bundle` or `signature tag`.
    label: &'static str,
}

/// Verifies a signature with the policy's keys, then keyless with its certificate.
fn verify_signed(
    signed: &Signed<'_>,
    certificate: Option<&[u8]>,
    chain: &[Vec<u8>],
    log_entry: Option<&LogEntry>,
    policy: &CosignPolicy,
) -> Result<VerifiedSignature, String> {
    let mut reasons = Vec::new();
    if !policy.keys.is_empty() {
        if let Some(key) = policy
            .keys
            .iter()
            .find(|k| k.verifies(signed.message, signed.signature))
        {
            // A log entry next to a key signature is not checked, so it is not recorded.
            return Ok(VerifiedSignature {
                method: "cosign".into(),
                signed: Some(signed.label.into()),
                key: Some(key.fingerprint.clone()),
                ..Default::default()
            });
        }
        reasons.push(format!(
            "no key matched (tried {})",
            policy
                .keys
                .iter()
                .map(|k| k.fingerprint.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some((root, identities)) = &policy.keyless {
        match certificate {
            None => reasons.push("keyless: the signature has no certificate".into()),
            Some(certificate) => {
                let keyless = Keyless {
                    certificate,
                    chain,
                    log_entry,
                };
                let names = |body: &serde_json::Value| {
                    keyless::body_names(body, signed.signature, certificate, &signed.signed_sha256)
                };
                match keyless::verify_certificate(root, &keyless, identities, names) {
                    Ok((identity, key)) if key.verifies(signed.message, signed.signature) => {
                        return Ok(VerifiedSignature {
                            method: "cosign".into(),
                            signed: Some(signed.label.into()),
                            issuer: Some(identity.issuer),
                            subject: Some(identity.subject),
                            log_index: identity.log_index,
                            ..Default::default()
                        })
                    }
                    Ok(_) => reasons.push(
                        "keyless: the signature does not verify with its certificate's key".into(),
                    ),
                    Err(reason) => reasons.push(reason),
                }
            }
        }
    }
    Err(reasons.join("; "))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BundleJson {
    #[serde(default)]
    verification_material: MaterialJson,
    #[serde(default)]
    dsse_envelope: Option<EnvelopeJson>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct MaterialJson {
    #[serde(default)]
    certificate: Option<RawJson>,
    #[serde(default)]
    x509_certificate_chain: Option<ChainJson>,
    #[serde(default)]
    tlog_entries: Vec<TlogJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawJson {
    raw_bytes: String,
}

#[derive(Deserialize)]
struct ChainJson {
    certificates: Vec<RawJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TlogJson {
    log_index: serde_json::Value,
    log_id: LogIdJson,
    integrated_time: serde_json::Value,
    #[serde(default)]
    inclusion_promise: Option<PromiseJson>,
    #[serde(default)]
    inclusion_proof: Option<ProofJson>,
    canonicalized_body: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LogIdJson {
    key_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromiseJson {
    signed_entry_timestamp: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProofJson {
    log_index: serde_json::Value,
    root_hash: String,
    tree_size: serde_json::Value,
    #[serde(default)]
    hashes: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EnvelopeJson {
    payload: String,
    payload_type: String,
    signatures: Vec<EnvelopeSignature>,
}

#[derive(Deserialize)]
struct EnvelopeSignature {
    sig: String,
}

/// A protobuf-JSON int64: a string or a number.
fn int64(value: &serde_json::Value) -> Result<i64, String> {
    match value {
        serde_json::Value::String(text) => {
            text.parse().map_err(|_| format!("{text:?} is no integer"))
        }
        other => other
            .as_i64()
            .ok_or_else(|| format!("{other} is no integer")),
    }
}

fn log_entry(tlog: &TlogJson) -> Result<LogEntry, String> {
    let proof = tlog
        .inclusion_proof
        .as_ref()
        .map(|p| -> Result<_, String> {
            Ok(keyless::InclusionProof {
                log_index: int64(&p.log_index)?.max(0) as u64,
                tree_size: int64(&p.tree_size)?.max(0) as u64,
                root_hash: b64(&p.root_hash)?,
                hashes: p.hashes.iter().map(|h| b64(h)).collect::<Result<_, _>>()?,
            })
        })
        .transpose()?;
    Ok(LogEntry {
        body: tlog.canonicalized_body.clone(),
        integrated_time: int64(&tlog.integrated_time)?,
        log_index: int64(&tlog.log_index)?,
        log_id: b64(&tlog.log_id.key_id)?,
        signed_entry_timestamp: tlog
            .inclusion_promise
            .as_ref()
            .map(|p| b64(&p.signed_entry_timestamp))
            .transpose()?,
        inclusion_proof: proof,
    })
}

/// DSSE's pre-authentication encoding: what an envelope's signature signs.
fn pre_authentication(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// Verifies a Sigstore bundle: a DSSE envelope of cosign's signing statement naming the
/// manifest digest `hex`, signed by a key or keyless.
fn verify_bundle(
    data: &[u8],
    hex: &str,
    policy: &CosignPolicy,
) -> Result<VerifiedSignature, String> {
    let bundle: BundleJson =
        serde_json::from_slice(data).map_err(|e| format!("not a Sigstore bundle: {e}"))?;
    let envelope = bundle
        .dsse_envelope
        .ok_or("not an image signature: the bundle has no DSSE envelope")?;
    let payload = b64(&envelope.payload)?;
    let statement: serde_json::Value = serde_json::from_slice(&payload)
        .map_err(|e| format!("the envelope's statement does not parse: {e}"))?;
    if statement["predicateType"].as_str() != Some(SIGN_PREDICATE) {
        return Err(format!(
            "an attestation of type {}, not a signature",
            statement["predicateType"]
        ));
    }
    let names_digest = statement["subject"].as_array().is_some_and(|subjects| {
        subjects
            .iter()
            .any(|s| s["digest"]["sha256"].as_str() == Some(hex))
    });
    if !names_digest {
        return Err("the signature is of another digest".into());
    }
    let [signature] = envelope.signatures.as_slice() else {
        return Err("the envelope must hold exactly one signature".into());
    };
    let signature = b64(&signature.sig)?;
    let message = pre_authentication(&envelope.payload_type, &payload);
    let material = &bundle.verification_material;
    let mut certificates: Vec<Vec<u8>> =
        match (&material.certificate, &material.x509_certificate_chain) {
            (Some(one), _) => vec![b64(&one.raw_bytes)?],
            (None, Some(chain)) => chain
                .certificates
                .iter()
                .map(|c| b64(&c.raw_bytes))
                .collect::<Result<_, _>>()?,
            (None, None) => Vec::new(),
        };
    let certificate = (!certificates.is_empty()).then(|| certificates.remove(0));
    let entry = material.tlog_entries.first().map(log_entry).transpose()?;
    let signed = Signed {
        message: &message,
        signature: &signature,
        signed_sha256: crate::source::sha256_hex(&payload),
        label: "bundle",
    };
    verify_signed(
        &signed,
        certificate.as_deref(),
        &certificates,
        entry.as_ref(),
        policy,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pre_authentication_encoding_is_dsse_v1() {
        assert_eq!(
            pre_authentication("application/vnd.in-toto+json", b"{}"),
            b"DSSEv1 28 application/vnd.in-toto+json 2 {}".to_vec()
        );
    }

    #[test]
    fn bundles_of_attestations_or_other_digests_are_not_signatures() {
        let policy = CosignPolicy {
            keys: Vec::new(),
            keyless: None,
        };
        let bundle = |predicate: &str, digest: &str| {
            let statement = serde_json::json!({
                "_type": "https://in-toto.io/Statement/v1",
                "subject": [{"digest": {"sha256": digest}}],
                "predicateType": predicate,
                "predicate": {}
            });
            let payload = base64::engine::general_purpose::STANDARD
                .encode(serde_json::to_vec(&statement).unwrap());
            serde_json::to_vec(&serde_json::json!({
                "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
                "verificationMaterial": {"publicKey": {"hint": "x"}},
                "dsseEnvelope": {"payload": payload, "payloadType": "application/vnd.in-toto+json",
                                 "signatures": [{"sig": "AAAA"}]}
            }))
            .unwrap()
        };
        let err = verify_bundle(
            &bundle("https://slsa.dev/provenance/v1", "ab"),
            "ab",
            &policy,
        )
        .unwrap_err();
        assert!(err.contains("attestation"), "{err}");
        let err = verify_bundle(&bundle(SIGN_PREDICATE, "cd"), "ab", &policy).unwrap_err();
        assert!(err.contains("another digest"), "{err}");
    }

    #[test]
    fn protobuf_integers_read_from_strings_or_numbers() {
        assert_eq!(int64(&serde_json::json!("12")), Ok(12));
        assert_eq!(int64(&serde_json::json!(12)), Ok(12));
        assert!(int64(&serde_json::json!("x")).is_err());
    }
}
