//! Hashes and Sprig's crypto functions: `sha1sum`, `sha256sum`, `sha512sum`, `adler32sum`,
//! `derivePassword`, `decryptAES`, `buildCustomCert`, and (drawing on the render's seeded
//! random source, see `STATE_FUNCS`) `genPrivateKey`, `genCA*`, `genSelfSignedCert*`,
//! `genSignedCert*`, `bcrypt`, `htpasswd`, `randBytes`, `encryptAES`.

use base64::Engine as _;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore as _, SeedableRng as _};

use super::x509::{create_certificate, parse_certificate, pem, pem_decode, Key, Template};
use super::*;

/// Sprig's certificate functions return a `sprig.certificate` struct with `Cert` and `Key`.
const CERTIFICATE: GoType = GoType::Struct("sprig.certificate");

pub(super) const FUNCS: &[(&str, F)] = &[
    ("sha512sum", |a| {
        use sha2::Digest as _;
        Ok(Value::from(
            sha2::Sha512::digest(s(&a[0]).as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
        ))
    }),
    ("sha256sum", |a| {
        Ok(Value::from(sha(s(&arg(&a, 0)).as_bytes(), 2)))
    }),
    ("sha1sum", |a| {
        Ok(Value::from(sha(s(&arg(&a, 0)).as_bytes(), 1)))
    }),
    ("adler32sum", |a| {
        let (mut x, mut y) = (1u32, 0u32);
        for b in s(&arg(&a, 0)).bytes() {
            x = (x + u32::from(b)) % 65_521;
            y = (y + x) % 65_521;
        }
        Ok(Value::from(((y << 16) | x).to_string()))
    }),
    ("derivePassword", |a| {
        let counter = a[0].as_i64().unwrap_or(0) as u32;
        Ok(Value::from(derive_password(
            counter,
            &s(&a[1]),
            &s(&a[2]),
            &s(&a[3]),
            &s(&a[4]),
        )))
    }),
    ("decryptAES", |a| {
        decrypt_aes(&s(&a[0]), &s(&a[1]))
            .map(Value::from)
            .map_err(|e| err(format!("error calling decryptAES: {e}")))
    }),
    ("buildCustomCert", |a| {
        build_custom_cert(&s(&a[0]), &s(&a[1]))
            .map_err(|e| err(format!("error calling buildCustomCert: {e}")))
    }),
];

/// The functions that draw random bytes: each call seeds its own ChaCha20 stream from the
/// render's random source, so keys, serials, salts and IVs are a function of the seed and of
/// the call's place in the render order.
pub(super) const STATE_FUNCS: &[(&str, SF)] = &[
    ("genPrivateKey", |st, a| {
        let mut rng = chacha(st)?;
        let key = match s(&a[0]).as_str() {
            "" | "rsa" => Key::rsa(&mut rng, 4096),
            "dsa" => Ok(Key::dsa(&mut rng)),
            "ecdsa" => Ok(Key::ecdsa(&mut rng)),
            "ed25519" => Ok(Key::ed25519(&mut rng)),
            other => return Ok(Value::from(format!("Unknown type {other}"))),
        };
        // Sprig returns its errors as the string.
        Ok(Value::from(match key.and_then(|k| k.to_pem()) {
            Ok(p) => p,
            Err(e) => format!("failed to generate private key: {e}"),
        }))
    }),
    ("genCA", |st, a| {
        gen_certificate(st, &a, "genCA", CertKind::Ca, None)
    }),
    ("genCAWithKey", |st, a| {
        gen_certificate(st, &a, "genCAWithKey", CertKind::Ca, Some(2))
    }),
    ("genSelfSignedCert", |st, a| {
        gen_certificate(st, &a, "genSelfSignedCert", CertKind::SelfSigned, None)
    }),
    ("genSelfSignedCertWithKey", |st, a| {
        gen_certificate(
            st,
            &a,
            "genSelfSignedCertWithKey",
            CertKind::SelfSigned,
            Some(4),
        )
    }),
    ("genSignedCert", |st, a| {
        gen_certificate(st, &a, "genSignedCert", CertKind::SignedByCa, None)
    }),
    ("genSignedCertWithKey", |st, a| {
        gen_certificate(
            st,
            &a,
            "genSignedCertWithKey",
            CertKind::SignedByCa,
            Some(5),
        )
    }),
    ("bcrypt", |st, a| {
        Ok(Value::from(bcrypt(&mut chacha(st)?, &s(&a[0]))))
    }),
    ("htpasswd", |st, a| {
        let user = s(&a[0]);
        if user.contains(':') {
            return Ok(Value::from(format!("invalid username: {user}")));
        }
        Ok(Value::from(format!(
            "{user}:{}",
            bcrypt(&mut chacha(st)?, &s(&a[1]))
        )))
    }),
    ("randBytes", |st, a| {
        let n = a[0].as_i64().unwrap_or(0);
        let n = usize::try_from(n).map_err(|_| {
            err("error calling randBytes: runtime error: makeslice: len out of range")
        })?;
        let mut buf = vec![0u8; n];
        chacha(st)?.fill_bytes(&mut buf);
        Ok(Value::from(
            base64::engine::general_purpose::STANDARD.encode(buf),
        ))
    }),
    ("encryptAES", |st, a| {
        let text = s(&a[1]);
        if text.is_empty() {
            return Ok(Value::from(""));
        }
        let mut iv = [0u8; 16];
        chacha(st)?.fill_bytes(&mut iv);
        Ok(Value::from(encrypt_aes(&s(&a[0]), &text, iv)))
    }),
];

fn call_err(name: &str, msg: &str) -> Error {
    err(format!("error calling {name}: {msg}"))
}

/// A ChaCha20 stream keyed with the next 32 bytes of the render's random source (itself a
/// ChaCha20 stream of the 256-bit render seed), so every key, salt and IV carries the seed's
/// full strength.
fn chacha(state: &State) -> Result<ChaCha20Rng, Error> {
    Ok(ChaCha20Rng::from_seed(rng(state)?.next_seed()))
}

fn items(v: &Value) -> Vec<Value> {
    list_items(v).unwrap_or_default()
}

fn key_arg(name: &str, v: &Value) -> Result<Key, Error> {
    Key::from_pem(&s(v)).map_err(|e| call_err(name, &format!("parsing private key: {e}")))
}

/// Which of Sprig's certificate generators: its arguments are `cn [ips dnsNames] days [ca]
/// [key]`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CertKind {
    /// `genCA cn days`: a self-signed CA.
    Ca,
    /// `genSelfSignedCert cn ips dnsNames days`.
    SelfSigned,
    /// `genSignedCert cn ips dnsNames days ca`.
    SignedByCa,
}

/// The `genCA`, `genSelfSignedCert` and `genSignedCert` families: a new 2048-bit RSA key (as
/// Sprig) or, for the `*WithKey` forms, the PEM key at argument `key_at`.
fn gen_certificate(
    st: &State,
    a: &[Value],
    name: &str,
    kind: CertKind,
    key_at: Option<usize>,
) -> Result<Value, Error> {
    let mut rng = chacha(st)?;
    let key = match key_at {
        Some(i) => key_arg(name, &a[i])?,
        None => Key::rsa(&mut rng, 2048).map_err(|e| call_err(name, &e))?,
    };
    let (ips, dns, days) = match kind {
        CertKind::Ca => (Vec::new(), Vec::new(), &a[1]),
        _ => (items(&a[1]), items(&a[2]), &a[3]),
    };
    let ca = (kind == CertKind::SignedByCa).then(|| &a[4]);
    certificate(
        st,
        name,
        &mut rng,
        &a[0],
        &ips,
        &dns,
        days,
        kind == CertKind::Ca,
        key,
        ca,
    )
}

/// Sprig's `getBaseCertTemplate` + `getCertAndKey` (+ the CA overrides when `is_ca`), signed
/// by `ca` (a `sprig.certificate`) or self-signed.
#[allow(clippy::too_many_arguments)]
fn certificate(
    state: &State,
    name: &str,
    rng: &mut ChaCha20Rng,
    cn: &Value,
    ips: &[Value],
    dns: &[Value],
    days: &Value,
    is_ca: bool,
    key: Key,
    ca: Option<&Value>,
) -> Result<Value, Error> {
    let fail = |m: String| call_err(name, &m);
    // The CA is checked before the template, as Sprig does.
    let parent = match ca {
        Some(ca) => {
            let (cert, ca_key) = cert_fields(ca);
            let der = pem_decode(&cert)
                .map(|(_, d)| d)
                .ok_or_else(|| fail("unable to decode certificate".into()))?;
            let parsed = parse_certificate(&der).map_err(|e| {
                fail(format!(
                    "error parsing certificate: decodedSignerCert.Bytes: {e}"
                ))
            })?;
            let signer = Key::from_pem(&ca_key)
                .map_err(|e| fail(format!("error parsing private key: {e}")))?;
            Some((parsed, signer))
        }
        None => None,
    };
    let mut ip_addrs = Vec::new();
    for ip in ips {
        let Some(text) = ip.as_str() else {
            return Err(fail(format!(
                "error parsing ip: {} is not a string",
                go_fmt(ip)
            )));
        };
        ip_addrs.push(
            text.parse::<std::net::IpAddr>()
                .map_err(|_| fail(format!("error parsing ip: {text}")))?,
        );
    }
    let mut names = Vec::new();
    for d in dns {
        let Some(text) = d.as_str() else {
            return Err(fail(format!(
                "error processing alternate dns name: {} is not a string",
                go_fmt(d)
            )));
        };
        names.push(text.to_string());
    }
    let mut serial = [0u8; 16];
    rng.fill_bytes(&mut serial);
    let now = render_now(state).secs;
    let days = days.as_i64().unwrap_or(0);
    let template = Template {
        cn: s(cn),
        ips: ip_addrs,
        dns: names,
        serial,
        not_before: now,
        not_after: now.saturating_add(days.saturating_mul(86_400)),
        is_ca,
    };
    let der = match &parent {
        Some((p, signer)) => create_certificate(&template, &key, Some(p), signer),
        None => create_certificate(&template, &key, None, &key),
    }
    .map_err(|e| fail(format!("error creating certificate: {e}")))?;
    let key_pem = key
        .to_pem()
        .map_err(|e| fail(format!("error pem-encoding key: {e}")))?;
    Ok(certificate_value(pem("CERTIFICATE", &der), key_pem))
}

fn certificate_value(cert: String, key: String) -> Value {
    let mut m = BTreeMap::new();
    m.insert("Cert".to_string(), Value::from(cert));
    m.insert("Key".to_string(), Value::from(key));
    GoMap::typed(m, CERTIFICATE)
}

/// The `Cert` and `Key` of a `sprig.certificate` (the signature check guarantees the type).
fn cert_fields(v: &Value) -> (String, String) {
    let m = v
        .downcast_object_ref::<GoMap>()
        .map(|m| m.snapshot())
        .unwrap_or_default();
    let field = |k: &str| m.get(k).map(s).unwrap_or_default();
    (field("Cert"), field("Key"))
}

/// Sprig's `buildCustomCert`: checks both base64 PEM blocks and returns them as a certificate.
fn build_custom_cert(b64cert: &str, b64key: &str) -> Result<Value, String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let cert = b64
        .decode(b64cert)
        .map_err(|_| "unable to decode base64 certificate".to_string())?;
    let key = b64
        .decode(b64key)
        .map_err(|_| "unable to decode base64 private key".to_string())?;
    let cert = String::from_utf8_lossy(&cert).into_owned();
    let key = String::from_utf8_lossy(&key).into_owned();
    let (_, der) = pem_decode(&cert).ok_or("unable to decode certificate")?;
    parse_certificate(&der)
        .map_err(|e| format!("error parsing certificate: decodedCert.Bytes: {e}"))?;
    Key::from_pem(&key).map_err(|e| format!("error parsing private key: {e}"))?;
    Ok(certificate_value(cert, key))
}

/// Go's `bcrypt.GenerateFromPassword` at the default cost (10), version `2a`; Sprig returns
/// its error as the string.
fn bcrypt(rng: &mut ChaCha20Rng, password: &str) -> String {
    if password.len() > 72 {
        return "failed to encrypt string with bcrypt: bcrypt: password length exceeds 72 bytes"
            .into();
    }
    let mut salt = [0u8; 16];
    rng.fill_bytes(&mut salt);
    match ::bcrypt::hash_with_salt(password, 10, salt) {
        Ok(h) => h.format_for_version(::bcrypt::Version::TwoA),
        Err(e) => format!("failed to encrypt string with bcrypt: {e}"),
    }
}

/// Sprig's AES-256-CBC: the password zero-padded (or cut) to 32 bytes is the key, PKCS#7
/// padding, the IV in front, base64.
fn encrypt_aes(password: &str, text: &str, iv: [u8; 16]) -> String {
    use cbc::cipher::{BlockEncryptMut as _, KeyIvInit as _};
    let enc = cbc::Encryptor::<aes::Aes256>::new(&aes_key(password).into(), &iv.into());
    let sealed = enc.encrypt_padded_vec_mut::<cbc::cipher::block_padding::Pkcs7>(text.as_bytes());
    let mut out = iv.to_vec();
    out.extend(sealed);
    base64::engine::general_purpose::STANDARD.encode(out)
}

fn aes_key(password: &str) -> [u8; 32] {
    let mut key = [0u8; 32];
    for (k, b) in key.iter_mut().zip(password.bytes()) {
        *k = b;
    }
    key
}

/// Sprig's `decryptAES`; like Sprig it strips the padding without checking it, and Go's
/// panics on short input are errors.
fn decrypt_aes(password: &str, crypt64: &str) -> Result<String, String> {
    use cbc::cipher::{BlockDecryptMut as _, KeyIvInit as _};
    if crypt64.is_empty() {
        return Ok(String::new());
    }
    let crypt = base64::engine::general_purpose::STANDARD
        .decode(crypt64)
        .map_err(|e| match e {
            // Go's base64 error names the offset of the first bad byte.
            base64::DecodeError::InvalidByte(at, _)
            | base64::DecodeError::InvalidLastSymbol(at, _) => {
                format!("illegal base64 data at input byte {at}")
            }
            _ => format!("illegal base64 data at input byte {}", crypt64.len()),
        })?;
    if crypt.len() < 16 {
        return Err(format!(
            "runtime error: slice bounds out of range [:16] with capacity {}",
            crypt.len()
        ));
    }
    let (iv, body) = crypt.split_at(16);
    if body.len() % 16 != 0 {
        return Err("crypto/cipher: input not full blocks".into());
    }
    let iv: [u8; 16] = iv.try_into().map_err(|_| "bad iv".to_string())?;
    let dec = cbc::Decryptor::<aes::Aes256>::new(&aes_key(password).into(), &iv.into());
    let plain = dec
        .decrypt_padded_vec_mut::<cbc::cipher::block_padding::NoPadding>(body)
        .map_err(|e| e.to_string())?;
    let pad = usize::from(
        *plain
            .last()
            .ok_or("runtime error: index out of range [-1]")?,
    );
    let keep = plain.len().checked_sub(pad).ok_or_else(|| {
        format!(
            "runtime error: slice bounds out of range [:-{}]",
            pad - plain.len()
        )
    })?;
    Ok(String::from_utf8_lossy(&plain[..keep]).into_owned())
}

/// Sprig's `derivePassword`: the Master Password algorithm (scrypt N=32768 r=8 p=2, then
/// HMAC-SHA256 choosing a template and its characters). Deterministic.
fn derive_password(counter: u32, kind: &str, password: &str, user: &str, site: &str) -> String {
    use hmac::Mac as _;
    let templates: &[&str] = match kind {
        "maximum" => &["anoxxxxxxxxxxxxxxxxx", "axxxxxxxxxxxxxxxxxno"],
        "long" => &[
            "CvcvnoCvcvCvcv",
            "CvcvCvcvnoCvcv",
            "CvcvCvcvCvcvno",
            "CvccnoCvcvCvcv",
            "CvccCvcvnoCvcv",
            "CvccCvcvCvcvno",
            "CvcvnoCvccCvcv",
            "CvcvCvccnoCvcv",
            "CvcvCvccCvcvno",
            "CvcvnoCvcvCvcc",
            "CvcvCvcvnoCvcc",
            "CvcvCvcvCvccno",
            "CvccnoCvccCvcv",
            "CvccCvccnoCvcv",
            "CvccCvccCvcvno",
            "CvcvnoCvccCvcc",
            "CvcvCvccnoCvcc",
            "CvcvCvccCvccno",
            "CvccnoCvcvCvcc",
            "CvccCvcvnoCvcc",
            "CvccCvcvCvccno",
        ],
        "medium" => &["CvcnoCvc", "CvcCvcno"],
        "short" => &["Cvcn"],
        "basic" => &["aaanaaan", "aannaaan", "aaannaaa"],
        "pin" => &["nnnn"],
        _ => return format!("cannot find password template {kind}"),
    };
    const SEED: &[u8] = b"com.lyndir.masterpassword";
    let mut salt = SEED.to_vec();
    salt.extend((user.len() as u32).to_be_bytes());
    salt.extend(user.as_bytes());
    let mut key = [0u8; 64];
    let params = match scrypt::Params::new(15, 8, 2, 64) {
        Ok(p) => p,
        Err(e) => return format!("failed to derive password: {e}"),
    };
    if let Err(e) = scrypt::scrypt(password.as_bytes(), &salt, &params, &mut key) {
        return format!("failed to derive password: {e}");
    }
    let mut msg = SEED.to_vec();
    msg.extend((site.len() as u32).to_be_bytes());
    msg.extend(site.as_bytes());
    msg.extend(counter.to_be_bytes());
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key) else {
        return "failed to derive password: bad key".into();
    };
    mac.update(&msg);
    let seed = mac.finalize().into_bytes();
    let template = templates[usize::from(seed[0]) % templates.len()];
    template
        .bytes()
        .enumerate()
        .map(|(i, c)| {
            let chars: &[u8] = match c {
                b'V' => b"AEIOU",
                b'C' => b"BCDFGHJKLMNPQRSTVWXYZ",
                b'v' => b"aeiou",
                b'c' => b"bcdfghjklmnpqrstvwxyz",
                b'A' => b"AEIOUBCDFGHJKLMNPQRSTVWXYZ",
                b'a' => b"AEIOUaeiouBCDFGHJKLMNPQRSTVWXYZbcdfghjklmnpqrstvwxyz",
                b'n' => b"0123456789",
                b'o' => b"@&%?,=[]_:-+*$#!'^~;()/.",
                _ => b"AEIOUaeiouBCDFGHJKLMNPQRSTVWXYZbcdfghjklmnpqrstvwxyz0123456789!@#$%^&*()",
            };
            char::from(chars[usize::from(seed[i + 1]) % chars.len()])
        })
        .collect()
}

pub(super) fn sha(data: &[u8], which: u8) -> String {
    use sha2::Digest as _;
    let bytes: Vec<u8> = if which == 1 {
        sha1(data).to_vec()
    } else {
        sha2::Sha256::digest(data).to_vec()
    };
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-1 (needed by Sprig's sha1sum; small enough not to warrant a dependency).
pub(super) fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut msg = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_be_bytes());
    for chunk in msg.chunks(64) {
        let mut w = [0u32; 80];
        for i in 0..16 {
            w[i] = u32::from_be_bytes([
                chunk[4 * i],
                chunk[4 * i + 1],
                chunk[4 * i + 2],
                chunk[4 * i + 3],
            ]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aes_round_trip_and_padding() {
        let c = encrypt_aes("secret", "hello world", [7u8; 16]);
        assert_eq!(decrypt_aes("secret", &c).as_deref(), Ok("hello world"));
        assert!(decrypt_aes("secret", "AAAA").is_err());
        let k = aes_key(&"x".repeat(40));
        assert_eq!(k, [b'x'; 32]);
    }

    #[test]
    fn sha1_known_answer() {
        assert_eq!(sha(b"abc", 1), "a9993e364706816aba3e25717850c26c9cd0d89d");
    }
}
