//! Signing with the real clients for the verification tests: cosign (built by `tools/cosign.sh`),
//! gpg (Debian's gnupg) for helm provenance files and git tags, ssh-keygen for git commits; and a
//! certificate authority, a signing certificate and a transparency log made by the test itself
//! for keyless signatures, without any network. Include with
//! `#[path = "support/signing.rs"] mod signing;` next to `mod support;`.

#![allow(dead_code)] // each test binary uses a different part of this module

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use sha2::{Digest, Sha256};

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// Runs a command that must succeed; returns its stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs git with `args` in work tree `dir` as the tests' committer, with gpg's home at
/// `gnupg` (for signed tags); returns its stdout, trimmed.
pub fn git_in(dir: &Path, gnupg: &Path, args: &[&str]) -> String {
    let mut cmd = crate::support::git(None, &[]);
    cmd.current_dir(dir)
        .env("GNUPGHOME", gnupg)
        .args([
            "-c",
            "user.name=pallet tests",
            "-c",
            "user.email=tests@pallet.invalid",
        ])
        .args(args);
    run(&mut cmd).trim().to_string()
}

/// The cosign binary `tools/cosign.sh build` makes.
pub fn cosign() -> PathBuf {
    let path = PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache/pallet/bin/cosign");
    assert!(
        path.is_file(),
        "{} is missing: build it with `tools/cosign.sh build`",
        path.display()
    );
    path
}

/// Where cosign writes a signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// A Sigstore bundle attached as an OCI referrer (cosign v3's default).
    Bundle,
    /// The `sha256-<hex>.sig` tag (cosign v2's layout).
    SignatureTag,
}

/// A cosign key pair (no password).
pub struct CosignKey {
    _dir: tempfile::TempDir,
    /// The private key (cosign's encrypted format, empty password).
    pub key: PathBuf,
    /// The PEM public key.
    pub public_pem: String,
}

impl CosignKey {
    /// A new pair from `cosign generate-key-pair`.
    pub fn generate() -> CosignKey {
        let dir = tempfile::tempdir().unwrap();
        run(Command::new(cosign())
            .current_dir(dir.path())
            .env("COSIGN_PASSWORD", "")
            .args(["generate-key-pair", "--output-key-prefix", "k"]));
        let public_pem = std::fs::read_to_string(dir.path().join("k.pub")).unwrap();
        CosignKey {
            key: dir.path().join("k.key"),
            public_pem,
            _dir: dir,
        }
    }

    /// A pair imported from a PEM private key (`cosign import-key-pair`).
    pub fn import(private_pem: &str) -> CosignKey {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("in.pem"), private_pem).unwrap();
        run(Command::new(cosign())
            .current_dir(dir.path())
            .env("COSIGN_PASSWORD", "")
            .args([
                "import-key-pair",
                "--key",
                "in.pem",
                "--output-key-prefix",
                "k",
            ]));
        let public_pem = std::fs::read_to_string(dir.path().join("k.pub")).unwrap();
        CosignKey {
            key: dir.path().join("k.key"),
            public_pem,
            _dir: dir,
        }
    }

    /// `sha256:<hex>` of the public key's DER, as pallet names keys.
    pub fn fingerprint(&self) -> String {
        let der = pem::parse(&self.public_pem).unwrap();
        format!("sha256:{}", hex(&Sha256::digest(der.contents())))
    }

    /// Signs `reference` (`host/repo@sha256:…`) with this key, offline (no transparency log),
    /// in `layout`; `extra` are more flags (`--certificate`, ...).
    pub fn sign(&self, reference: &str, layout: Layout, extra: &[&str]) {
        let mut cmd = Command::new(cosign());
        cmd.env("COSIGN_PASSWORD", "")
            .env("HOME", self.key.parent().unwrap())
            .args([
                "sign",
                "--yes",
                "--allow-http-registry",
                "--tlog-upload=false",
            ])
            .arg("--key")
            .arg(&self.key)
            .args(match layout {
                Layout::Bundle => ["--new-bundle-format=true", "--use-signing-config=false"],
                Layout::SignatureTag => ["--new-bundle-format=false", "--use-signing-config=false"],
            })
            .args(extra)
            .arg(reference);
        run(&mut cmd);
    }
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A gpg home with one signing key (RSA: helm's OpenPGP library reads no other kind).
pub struct Gpg {
    home: tempfile::TempDir,
    /// The key's user id.
    pub uid: String,
    /// The key's fingerprint (upper-case hex).
    pub fingerprint: String,
}

impl Gpg {
    /// A new key for `uid` (`Name <email>`), without a passphrase.
    pub fn generate(uid: &str) -> Gpg {
        // gpg-agent's socket path must be short: a directory right under /tmp.
        let home = tempfile::Builder::new()
            .prefix("g")
            .tempdir_in("/tmp")
            .unwrap();
        let gpg = Gpg {
            home,
            uid: uid.to_string(),
            fingerprint: String::new(),
        };
        run(gpg.cmd().args([
            "--batch",
            "--passphrase",
            "",
            "--quick-gen-key",
            uid,
            "rsa2048",
            "sign",
            "never",
        ]));
        let listing = run(gpg.cmd().args(["--with-colons", "--list-keys", uid]));
        let fingerprint = listing
            .lines()
            .find_map(|l| l.strip_prefix("fpr:"))
            .and_then(|l| l.split(':').find(|f| !f.is_empty()))
            .unwrap()
            .to_string();
        Gpg { fingerprint, ..gpg }
    }

    /// gpg with this home.
    pub fn cmd(&self) -> Command {
        let mut cmd = Command::new("gpg");
        cmd.env("GNUPGHOME", self.home.path());
        cmd
    }

    /// The home directory (for `GNUPGHOME`).
    pub fn home(&self) -> &Path {
        self.home.path()
    }

    /// The public key, armored.
    pub fn public_armored(&self) -> String {
        run(self.cmd().args(["--armor", "--export", &self.fingerprint]))
    }

    /// The public key, binary (`gpg --export`).
    pub fn public_binary(&self) -> Vec<u8> {
        let out = self
            .cmd()
            .args(["--export", &self.fingerprint])
            .output()
            .unwrap();
        assert!(out.status.success());
        out.stdout
    }

    /// A legacy secret keyring file, as `helm package --sign --keyring` reads it.
    pub fn secret_keyring(&self) -> PathBuf {
        let path = self.home.path().join("secring.gpg");
        let out = self
            .cmd()
            .args(["--batch", "--pinentry-mode", "loopback", "--passphrase", ""])
            .args(["--export-secret-keys", &self.fingerprint])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(&path, out.stdout).unwrap();
        path
    }
}

/// An SSH key pair from ssh-keygen (ed25519, no passphrase): (private key path, public line).
pub fn ssh_key(dir: &Path, name: &str) -> (PathBuf, String) {
    let path = dir.join(name);
    run(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&path));
    let public = std::fs::read_to_string(path.with_extension("pub")).unwrap();
    (path, public.trim().to_string())
}

/// A Fulcio-like certificate authority, a signing certificate naming an OIDC issuer and subject,
/// and a Rekor-like log key, with the trusted root JSON naming the CA and the log.
pub struct Keyless {
    ca_key: rcgen::KeyPair,
    ca_params: rcgen::CertificateParams,
    /// The CA certificate (DER).
    pub ca_der: Vec<u8>,
    log_key: rcgen::KeyPair,
    /// The log's id: SHA-256 of its public key's DER.
    pub log_id: Vec<u8>,
}

/// A DER UTF8String.
fn der_utf8(text: &str) -> Vec<u8> {
    let mut out = vec![0x0c];
    let len = text.len();
    if len < 128 {
        out.push(len as u8);
    } else {
        out.extend([0x81, len as u8]);
    }
    out.extend_from_slice(text.as_bytes());
    out
}

/// A signing certificate and its key.
pub struct Signer {
    /// The certificate, PEM.
    pub certificate_pem: String,
    /// The certificate, DER.
    pub certificate_der: Vec<u8>,
    /// Its private key, PEM (PKCS#8).
    pub private_pem: String,
}

impl Keyless {
    /// A new CA and log.
    pub fn new() -> Keyless {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "pallet test fulcio");
        ca_params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let log_key = rcgen::KeyPair::generate().unwrap();
        let log_id =
            Sha256::digest(rcgen::PublicKeyData::subject_public_key_info(&log_key)).to_vec();
        Keyless {
            ca_der: ca.der().to_vec(),
            ca_key,
            ca_params,
            log_key,
            log_id,
        }
    }

    /// A code-signing certificate for `subject` (an email SAN) issued by `issuer` (the OIDC
    /// issuer extension).
    pub fn signer(&self, issuer: &str, subject: &str) -> Signer {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = vec![rcgen::SanType::Rfc822Name(subject.try_into().unwrap())];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::CodeSigning];
        params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        params.custom_extensions = vec![rcgen::CustomExtension::from_oid_content(
            &[1, 3, 6, 1, 4, 1, 57264, 1, 8],
            der_utf8(issuer),
        )];
        let issuer_ca = rcgen::Issuer::from_params(&self.ca_params, &self.ca_key);
        let cert = params.signed_by(&key, &issuer_ca).unwrap();
        Signer {
            certificate_pem: cert.pem(),
            certificate_der: cert.der().to_vec(),
            private_pem: key.serialize_pem(),
        }
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> String {
        pem::encode(&pem::Pem::new("CERTIFICATE", self.ca_der.clone()))
    }

    /// The trusted root JSON naming the CA and the log.
    pub fn trusted_root(&self) -> String {
        serde_json::json!({
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [{
                "baseUrl": "https://log.pallet.invalid",
                "hashAlgorithm": "SHA2_256",
                "publicKey": {
                    "rawBytes": b64(&rcgen::PublicKeyData::subject_public_key_info(&self.log_key)),
                    "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                    "validFor": {"start": "2020-01-01T00:00:00Z"}
                },
                "logId": {"keyId": b64(&self.log_id)}
            }],
            "certificateAuthorities": [{
                "subject": {"organization": "pallet tests", "commonName": "pallet test fulcio"},
                "uri": "https://fulcio.pallet.invalid",
                "certChain": {"certificates": [{"rawBytes": b64(&self.ca_der)}]},
                "validFor": {"start": "2020-01-01T00:00:00Z"}
            }],
            "ctlogs": [],
            "timestampAuthorities": []
        })
        .to_string()
    }

    /// A log entry for a signature of `payload` by `certificate_pem`, as cosign's signature tag
    /// carries it (`dev.sigstore.cosign/bundle`): a hashedrekord body and the log's signed entry
    /// timestamp over it, integrated now at `log_index`.
    pub fn log_entry(
        &self,
        payload: &[u8],
        signature_b64: &str,
        certificate_pem: &str,
        log_index: i64,
    ) -> String {
        let body = serde_json::json!({
            "apiVersion": "0.0.1",
            "kind": "hashedrekord",
            "spec": {
                "data": {"hash": {"algorithm": "sha256", "value": hex(&Sha256::digest(payload))}},
                "signature": {
                    "content": signature_b64,
                    "publicKey": {"content": b64(certificate_pem.as_bytes())}
                }
            }
        });
        let body = b64(serde_json::to_string(&body).unwrap().as_bytes());
        let integrated_time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let promise = serde_json::json!({
            "body": body,
            "integratedTime": integrated_time,
            "logID": hex(&self.log_id),
            "logIndex": log_index,
        });
        let signed = serde_json::to_vec(&promise).unwrap();
        let set = rcgen::SigningKey::sign(&self.log_key, &signed).unwrap();
        serde_json::json!({
            "SignedEntryTimestamp": b64(&set),
            "Payload": {
                "body": body,
                "integratedTime": integrated_time,
                "logIndex": log_index,
                "logID": hex(&self.log_id),
            }
        })
        .to_string()
    }
}
