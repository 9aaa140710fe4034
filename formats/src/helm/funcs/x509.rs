//! The pieces of Go's `crypto/x509`, `encoding/pem` and `encoding/asn1` that Sprig's
//! certificate functions use: private keys (RSA, ECDSA P-256, Ed25519, DSA) in the PEM blocks
//! Sprig writes, and `x509.CreateCertificate`'s DER output for Sprig's templates (the same
//! fields, extensions, extension order and string types), signed deterministically.

use p256::elliptic_curve::sec1::ToEncodedPoint as _;
use rand_chacha::ChaCha20Rng;
use rsa::pkcs1::{DecodeRsaPrivateKey as _, EncodeRsaPrivateKey as _};
use rsa::traits::PublicKeyParts as _;

// ---- DER writing ----

fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = content.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes: Vec<u8> = n
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

fn seq(parts: &[Vec<u8>]) -> Vec<u8> {
    tlv(0x30, &parts.concat())
}

/// A non-negative INTEGER from big-endian magnitude bytes.
fn uint(be: &[u8]) -> Vec<u8> {
    let trimmed: Vec<u8> = be.iter().copied().skip_while(|b| *b == 0).collect();
    let mut c = Vec::with_capacity(trimmed.len() + 1);
    if trimmed.first().is_none_or(|b| b & 0x80 != 0) {
        c.push(0);
    }
    c.extend(trimmed);
    tlv(0x02, &c)
}

fn oid(arcs: &[u64]) -> Vec<u8> {
    let mut c = vec![(arcs[0] * 40 + arcs[1]) as u8];
    for &a in &arcs[2..] {
        let mut groups = vec![(a & 0x7f) as u8];
        let mut x = a >> 7;
        while x > 0 {
            groups.push((x & 0x7f) as u8 | 0x80);
            x >>= 7;
        }
        groups.reverse();
        c.extend(groups);
    }
    tlv(0x06, &c)
}

fn bit_string(bytes: &[u8], unused: u8) -> Vec<u8> {
    let mut c = vec![unused];
    c.extend_from_slice(bytes);
    tlv(0x03, &c)
}

fn octets(bytes: &[u8]) -> Vec<u8> {
    tlv(0x04, bytes)
}

const NULL: [u8; 2] = [0x05, 0x00];

const RSA_ENCRYPTION: &[u64] = &[1, 2, 840, 113549, 1, 1, 1];
const SHA256_WITH_RSA: &[u64] = &[1, 2, 840, 113549, 1, 1, 11];
const EC_PUBLIC_KEY: &[u64] = &[1, 2, 840, 10045, 2, 1];
const PRIME256V1: &[u64] = &[1, 2, 840, 10045, 3, 1, 7];
const ECDSA_WITH_SHA256: &[u64] = &[1, 2, 840, 10045, 4, 3, 2];
const ED25519: &[u64] = &[1, 3, 101, 112];

// ---- DER reading (enough to take certificates and keys apart) ----

/// One DER element: its tag, its content, and the whole encoding.
struct Der<'a> {
    tag: u8,
    content: &'a [u8],
    raw: &'a [u8],
}

/// Reads the element at the start of `b`, returning it and the rest.
fn read(b: &[u8]) -> Option<(Der<'_>, &[u8])> {
    let tag = *b.first()?;
    let first = *b.get(1)?;
    let (len, head) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let len = b
            .get(2..2 + n)?
            .iter()
            .fold(0usize, |acc, x| (acc << 8) | usize::from(*x));
        (len, 2 + n)
    };
    let end = head.checked_add(len)?;
    let raw = b.get(..end)?;
    Some((
        Der {
            tag,
            content: &raw[head..],
            raw,
        },
        &b[end..],
    ))
}

/// The elements inside a constructed element's content.
fn children(content: &[u8]) -> Option<Vec<Der<'_>>> {
    let mut out = Vec::new();
    let mut rest = content;
    while !rest.is_empty() {
        let (d, r) = read(rest)?;
        out.push(d);
        rest = r;
    }
    Some(out)
}

/// The parts of a parsed certificate that signing a child certificate needs.
pub(super) struct ParsedCert {
    /// The subject Name, as encoded (the child's issuer).
    pub subject: Vec<u8>,
    /// The SubjectPublicKeyInfo's public key bits.
    pub public_key: Vec<u8>,
    /// The SubjectKeyIdentifier, if present (the child's AuthorityKeyIdentifier).
    pub key_id: Option<Vec<u8>>,
}

/// Parses a DER certificate as far as Sprig needs (Go's `x509.ParseCertificate`'s errors are
/// summarised as "malformed certificate").
pub(super) fn parse_certificate(der: &[u8]) -> Result<ParsedCert, String> {
    let bad = || "x509: malformed certificate".to_string();
    let (cert, _) = read(der).ok_or_else(bad)?;
    let parts = children(cert.content).ok_or_else(bad)?;
    let tbs = parts.first().filter(|t| t.tag == 0x30).ok_or_else(bad)?;
    let fields = children(tbs.content).ok_or_else(bad)?;
    // version [0] is optional; then serial, signature, issuer, validity, subject, spki.
    let skip = usize::from(fields.first().is_some_and(|f| f.tag == 0xa0));
    let subject = fields.get(skip + 4).ok_or_else(bad)?;
    let spki = fields.get(skip + 5).ok_or_else(bad)?;
    let spki_parts = children(spki.content).ok_or_else(bad)?;
    let bits = spki_parts
        .get(1)
        .filter(|b| b.tag == 0x03)
        .ok_or_else(bad)?;
    let mut key_id = None;
    if let Some(ext) = fields.iter().find(|f| f.tag == 0xa3) {
        let list = children(ext.content).ok_or_else(bad)?;
        let list = children(list.first().ok_or_else(bad)?.content).ok_or_else(bad)?;
        for e in list {
            let e = children(e.content).ok_or_else(bad)?;
            if e.first().map(|o| o.raw) == Some(oid(&[2, 5, 29, 14]).as_slice()) {
                let value = e.last().ok_or_else(bad)?;
                let (inner, _) = read(value.content).ok_or_else(bad)?;
                key_id = Some(inner.content.to_vec());
            }
        }
    }
    Ok(ParsedCert {
        subject: subject.raw.to_vec(),
        public_key: bits.content.get(1..).ok_or_else(bad)?.to_vec(),
        key_id,
    })
}

// ---- PEM ----

/// Go's `pem.EncodeToMemory`: base64 in lines of 64.
pub(super) fn pem(kind: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {kind}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {kind}-----\n"));
    out
}

/// Go's `pem.Decode`: the first block's type and bytes (headers skipped), or None.
pub(super) fn pem_decode(text: &str) -> Option<(String, Vec<u8>)> {
    use base64::Engine as _;
    let start = text.find("-----BEGIN ")?;
    let rest = &text[start + 11..];
    let end = rest.find("-----")?;
    let kind = rest[..end].to_string();
    let body = &rest[end + 5..];
    let close = format!("-----END {kind}-----");
    let stop = body.find(&close)?;
    let b64: String = body[..stop]
        .lines()
        .filter(|l| !l.contains(':'))
        .flat_map(|l| l.chars().filter(|c| !c.is_whitespace()))
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(b64.as_bytes())
        .ok()?;
    Some((kind, der))
}

// ---- keys ----

/// A private key of one of the types Sprig generates or reads.
pub(super) enum Key {
    Rsa(Box<rsa::RsaPrivateKey>),
    Ec(p256::SecretKey),
    Ed(ed25519_dalek::SigningKey),
    Dsa(Box<dsa::SigningKey>),
}

impl Key {
    /// An RSA key of `bits` bits (exponent 65537, as Go's `rsa.GenerateKey`).
    pub fn rsa(rng: &mut ChaCha20Rng, bits: usize) -> Result<Key, String> {
        super::rsa_prime::generate(rng, bits).map(|k| Key::Rsa(Box::new(k)))
    }

    /// A P-256 ECDSA key.
    pub fn ecdsa(rng: &mut ChaCha20Rng) -> Key {
        Key::Ec(p256::SecretKey::random(rng))
    }

    /// An Ed25519 key.
    pub fn ed25519(rng: &mut ChaCha20Rng) -> Key {
        let mut seed = [0u8; 32];
        rand_core::RngCore::fill_bytes(rng, &mut seed);
        Key::Ed(ed25519_dalek::SigningKey::from_bytes(&seed))
    }

    /// A DSA key with fresh L2048N256 parameters.
    pub fn dsa(rng: &mut ChaCha20Rng) -> Key {
        let components = dsa::Components::generate(rng, dsa::KeySize::DSA_2048_256);
        Key::Dsa(Box::new(dsa::SigningKey::generate(rng, components)))
    }

    /// Sprig's `pemBlockForKey`: PKCS#1 for RSA, SEC 1 for EC, Sprig's own ASN.1 layout for
    /// DSA, PKCS#8 for Ed25519.
    pub fn to_pem(&self) -> Result<String, String> {
        Ok(match self {
            Key::Rsa(k) => pem(
                "RSA PRIVATE KEY",
                k.to_pkcs1_der().map_err(|e| e.to_string())?.as_bytes(),
            ),
            Key::Ec(k) => {
                let public = k.public_key().to_encoded_point(false);
                let der = seq(&[
                    uint(&[1]),
                    octets(&k.to_bytes()),
                    tlv(0xa0, &oid(PRIME256V1)),
                    tlv(0xa1, &bit_string(public.as_bytes(), 0)),
                ]);
                pem("EC PRIVATE KEY", &der)
            }
            Key::Ed(k) => {
                let der = seq(&[
                    uint(&[0]),
                    seq(&[oid(ED25519)]),
                    octets(&octets(&k.to_bytes())),
                ]);
                pem("PRIVATE KEY", &der)
            }
            Key::Dsa(k) => {
                let v = k.verifying_key();
                let c = v.components();
                let der = seq(&[
                    uint(&[0]),
                    uint(&c.p().to_bytes_be()),
                    uint(&c.q().to_bytes_be()),
                    uint(&c.g().to_bytes_be()),
                    uint(&v.y().to_bytes_be()),
                    uint(&k.x().to_bytes_be()),
                ]);
                pem("DSA PRIVATE KEY", &der)
            }
        })
    }

    /// Sprig's `parsePrivateKeyPEM`, with its error messages.
    pub fn from_pem(text: &str) -> Result<Key, String> {
        let (kind, der) = pem_decode(text).ok_or("no PEM data in input")?;
        if kind == "PRIVATE KEY" {
            return Self::from_pkcs8(&der).map_err(|e| format!("decoding PEM as PKCS#8: {e}"));
        }
        let Some(algo) = kind.strip_suffix(" PRIVATE KEY") else {
            return Err(format!("no private key data in PEM block of type {kind}"));
        };
        match algo {
            "RSA" => rsa::RsaPrivateKey::from_pkcs1_der(&der)
                .map(|k| Key::Rsa(Box::new(k)))
                .map_err(|e| format!("parsing RSA private key from PEM: {e}")),
            "EC" => {
                Self::from_sec1(&der).map_err(|e| format!("parsing EC private key from PEM: {e}"))
            }
            "DSA" => Self::from_dsa(&der)
                .ok_or_else(|| "parsing DSA private key from PEM: asn1: structure error".into()),
            _ => Err(format!("invalid private key type {kind}")),
        }
    }

    fn from_sec1(der: &[u8]) -> Result<Key, String> {
        let (top, _) = read(der).ok_or("x509: failed to parse EC private key")?;
        let parts = children(top.content).ok_or("x509: failed to parse EC private key")?;
        if let Some(curve) = parts.iter().find(|p| p.tag == 0xa0) {
            if curve.content != oid(PRIME256V1).as_slice() {
                return Err("unsupported elliptic curve (pallet supports P-256)".into());
            }
        }
        let secret = parts
            .get(1)
            .filter(|p| p.tag == 0x04)
            .ok_or("x509: failed to parse EC private key")?;
        p256::SecretKey::from_slice(secret.content)
            .map(Key::Ec)
            .map_err(|_| "x509: invalid elliptic curve private key value".into())
    }

    fn from_pkcs8(der: &[u8]) -> Result<Key, String> {
        let malformed = || "x509: malformed PKCS#8 private key".to_string();
        let (top, _) = read(der).ok_or_else(malformed)?;
        let parts = children(top.content).ok_or_else(malformed)?;
        let algo = children(parts.get(1).ok_or_else(malformed)?.content).ok_or_else(malformed)?;
        let algo_oid = algo.first().ok_or_else(malformed)?.raw;
        let inner = parts
            .get(2)
            .filter(|p| p.tag == 0x04)
            .ok_or_else(malformed)?;
        if algo_oid == oid(RSA_ENCRYPTION).as_slice() {
            rsa::RsaPrivateKey::from_pkcs1_der(inner.content)
                .map(|k| Key::Rsa(Box::new(k)))
                .map_err(|e| {
                    format!("x509: failed to parse RSA private key embedded in PKCS#8: {e}")
                })
        } else if algo_oid == oid(EC_PUBLIC_KEY).as_slice() {
            if algo.get(1).map(|c| c.raw) != Some(oid(PRIME256V1).as_slice()) {
                return Err("unsupported elliptic curve (pallet supports P-256)".into());
            }
            Self::from_sec1(inner.content)
        } else if algo_oid == oid(ED25519).as_slice() {
            let (seed, _) = read(inner.content).ok_or_else(malformed)?;
            let seed: [u8; 32] = seed
                .content
                .try_into()
                .map_err(|_| "x509: invalid Ed25519 private key length".to_string())?;
            Ok(Key::Ed(ed25519_dalek::SigningKey::from_bytes(&seed)))
        } else {
            Err("x509: PKCS#8 wrapping contained private key with unknown algorithm".into())
        }
    }

    fn from_dsa(der: &[u8]) -> Option<Key> {
        let (top, _) = read(der)?;
        let parts = children(top.content)?;
        let n = |i: usize| -> Option<dsa::BigUint> {
            let p = parts.get(i).filter(|p| p.tag == 0x02)?;
            Some(dsa::BigUint::from_bytes_be(p.content))
        };
        let components = dsa::Components::from_components(n(1)?, n(2)?, n(3)?).ok()?;
        let public = dsa::VerifyingKey::from_components(components, n(4)?).ok()?;
        dsa::SigningKey::from_components(public, n(5)?)
            .ok()
            .map(|k| Key::Dsa(Box::new(k)))
    }

    /// The SubjectPublicKeyInfo algorithm and key bits, as Go's `marshalPublicKey`.
    fn public_key_info(&self) -> Result<(Vec<u8>, Vec<u8>), String> {
        Ok(match self {
            Key::Rsa(k) => (
                seq(&[oid(RSA_ENCRYPTION), NULL.to_vec()]),
                seq(&[uint(&k.n().to_bytes_be()), uint(&k.e().to_bytes_be())]),
            ),
            Key::Ec(k) => (
                seq(&[oid(EC_PUBLIC_KEY), oid(PRIME256V1)]),
                k.public_key().to_encoded_point(false).as_bytes().to_vec(),
            ),
            Key::Ed(k) => (seq(&[oid(ED25519)]), k.verifying_key().to_bytes().to_vec()),
            Key::Dsa(_) => {
                return Err("x509: unsupported public key type: *dsa.PublicKey".into());
            }
        })
    }

    /// The signature AlgorithmIdentifier Go picks for this signing key.
    fn signature_algorithm(&self) -> Result<Vec<u8>, String> {
        Ok(match self {
            Key::Rsa(_) => seq(&[oid(SHA256_WITH_RSA), NULL.to_vec()]),
            Key::Ec(_) => seq(&[oid(ECDSA_WITH_SHA256)]),
            Key::Ed(_) => seq(&[oid(ED25519)]),
            Key::Dsa(_) => {
                return Err("x509: certificate private key does not implement crypto.Signer".into())
            }
        })
    }

    /// Signs `tbs` (RSA PKCS#1 v1.5 and ECDSA with SHA-256, Ed25519): all deterministic, so
    /// a certificate depends on the render seed only.
    fn sign(&self, tbs: &[u8]) -> Result<Vec<u8>, String> {
        use sha2::Digest as _;
        match self {
            Key::Rsa(k) => k
                .sign(
                    rsa::Pkcs1v15Sign::new::<sha2::Sha256>(),
                    &sha2::Sha256::digest(tbs),
                )
                .map_err(|e| e.to_string()),
            Key::Ec(k) => {
                use p256::ecdsa::signature::Signer as _;
                let sig: p256::ecdsa::Signature = p256::ecdsa::SigningKey::from(k).sign(tbs);
                Ok(sig.to_der().as_bytes().to_vec())
            }
            Key::Ed(k) => {
                use ed25519_dalek::Signer as _;
                Ok(k.sign(tbs).to_bytes().to_vec())
            }
            Key::Dsa(_) => {
                Err("x509: certificate private key does not implement crypto.Signer".into())
            }
        }
    }
}

// ---- certificates ----

/// What Sprig's `getBaseCertTemplate` (plus the CA overrides) puts in a certificate.
pub(super) struct Template {
    pub cn: String,
    pub ips: Vec<std::net::IpAddr>,
    pub dns: Vec<String>,
    pub serial: [u8; 16],
    pub not_before: i64,
    pub not_after: i64,
    pub is_ca: bool,
}

/// Go's encoding of a `pkix.Name` holding only a CommonName: PrintableString when every
/// character is in its set, UTF8String otherwise; an empty name has no RDN at all.
fn name(cn: &str) -> Vec<u8> {
    if cn.is_empty() {
        return seq(&[]);
    }
    let printable = cn.bytes().all(|b| {
        b.is_ascii_alphanumeric()
            || matches!(b, b'\''..=b')' | b'+'..=b'/' | b' ' | b':' | b'=' | b'?')
    });
    let value = tlv(if printable { 0x13 } else { 0x0c }, cn.as_bytes());
    seq(&[tlv(0x31, &seq(&[oid(&[2, 5, 4, 3]), value]))])
}

/// Go's validity times: UTCTime for 1950–2049, GeneralizedTime otherwise.
fn time(secs: i64) -> Vec<u8> {
    let t = super::GoTime { secs, nanos: 0 };
    let year: i64 = super::go_time_format(&t, "2006").parse().unwrap_or(2000);
    if (1950..2050).contains(&year) {
        tlv(0x17, super::go_time_format(&t, "060102150405Z").as_bytes())
    } else {
        tlv(
            0x18,
            super::go_time_format(&t, "20060102150405Z").as_bytes(),
        )
    }
}

fn extension(id: &[u64], critical: bool, value: Vec<u8>) -> Vec<u8> {
    let mut parts = vec![oid(id)];
    if critical {
        parts.push(tlv(0x01, &[0xff]));
    }
    parts.push(octets(&value));
    seq(&parts)
}

/// Go's `x509.CreateCertificate(rand, template, parent, key.Public(), signer)` for Sprig's
/// templates; `parent` is None for a self-signed certificate. Returns the DER.
pub(super) fn create_certificate(
    t: &Template,
    key: &Key,
    parent: Option<&ParsedCert>,
    signer: &Key,
) -> Result<Vec<u8>, String> {
    // Go's order of checks: signer type, signature algorithm, public key type.
    let algorithm = signer.signature_algorithm()?;
    let (key_algorithm, key_bits) = key.public_key_info()?;
    let subject = name(&t.cn);
    let issuer = parent.map_or_else(|| subject.clone(), |p| p.subject.clone());
    let mut authority_key_id = None;
    if let Some(p) = parent {
        if issuer != subject {
            authority_key_id = p.key_id.clone();
        }
        let (_, signer_bits) = signer.public_key_info()?;
        if signer_bits != p.public_key {
            return Err("x509: provided PrivateKey doesn't match parent's PublicKey".into());
        }
    }
    // GODEBUG x509sha256skid=0 (helm's go.mod says go 1.24): SHA-1 of the key bits.
    let subject_key_id = t.is_ca.then(|| super::crypto::sha1(&key_bits).to_vec());

    let mut exts = Vec::new();
    // KeyUsage: DigitalSignature|KeyEncipherment (|CertSign for a CA), bits reversed per Go.
    let usage = if t.is_ca {
        bit_string(&[0xa4], 2)
    } else {
        bit_string(&[0xa0], 5)
    };
    exts.push(extension(&[2, 5, 29, 15], true, usage));
    exts.push(extension(
        &[2, 5, 29, 37],
        false,
        seq(&[
            oid(&[1, 3, 6, 1, 5, 5, 7, 3, 1]),
            oid(&[1, 3, 6, 1, 5, 5, 7, 3, 2]),
        ]),
    ));
    let constraints = if t.is_ca {
        seq(&[tlv(0x01, &[0xff])])
    } else {
        seq(&[])
    };
    exts.push(extension(&[2, 5, 29, 19], true, constraints));
    if let Some(id) = subject_key_id {
        exts.push(extension(&[2, 5, 29, 14], false, octets(&id)));
    }
    if let Some(id) = authority_key_id {
        exts.push(extension(&[2, 5, 29, 35], false, seq(&[tlv(0x80, &id)])));
    }
    if !t.dns.is_empty() || !t.ips.is_empty() {
        let mut names: Vec<Vec<u8>> = t.dns.iter().map(|d| tlv(0x82, d.as_bytes())).collect();
        for ip in &t.ips {
            let bytes = match ip {
                std::net::IpAddr::V4(v4) => v4.octets().to_vec(),
                std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                    Some(v4) => v4.octets().to_vec(),
                    None => v6.octets().to_vec(),
                },
            };
            names.push(tlv(0x87, &bytes));
        }
        exts.push(extension(&[2, 5, 29, 17], subject == seq(&[]), seq(&names)));
    }

    let tbs = seq(&[
        tlv(0xa0, &uint(&[2])),
        uint(&t.serial),
        algorithm.clone(),
        issuer,
        seq(&[time(t.not_before), time(t.not_after)]),
        subject,
        seq(&[key_algorithm, bit_string(&key_bits, 0)]),
        tlv(0xa3, &seq(&exts)),
    ]);
    let signature = signer.sign(&tbs)?;
    Ok(seq(&[tbs, algorithm, bit_string(&signature, 0)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_integers_and_oids() {
        assert_eq!(uint(&[0x80]), vec![0x02, 0x02, 0x00, 0x80]);
        assert_eq!(uint(&[0, 0, 5]), vec![0x02, 0x01, 0x05]);
        assert_eq!(uint(&[]), vec![0x02, 0x01, 0x00]);
        assert_eq!(
            oid(&[1, 2, 840, 113549, 1, 1, 11]),
            vec![0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b]
        );
        let long = tlv(0x04, &[0u8; 300]);
        assert_eq!(&long[..4], &[0x04, 0x82, 0x01, 0x2c]);
        assert_eq!(read(&long).map(|(d, _)| d.content.len()), Some(300));
    }

    #[test]
    fn names_use_go_string_types() {
        assert_eq!(name("a-b.c")[11], 0x13);
        assert_eq!(name("*.example.com")[11], 0x0c);
        assert_eq!(name(""), vec![0x30, 0x00]);
    }

    #[test]
    fn pem_round_trip() {
        let p = pem("CERTIFICATE", &[1u8; 100]);
        assert!(p.lines().nth(1).is_some_and(|l| l.len() == 64));
        assert_eq!(pem_decode(&p), Some(("CERTIFICATE".into(), vec![1u8; 100])));
    }
}
