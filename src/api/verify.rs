//! `sources[].verify`: who must have published a source's content before any of it is used, and
//! `status.revisions[].sources[].verified`: who did.
//!
//! One kind of check per kind of source: cosign signatures for OCI artifacts (images, charts in
//! `oci://` repositories), the chart's provenance file for HTTP chart repositories, commit and tag
//! signatures for git. A source with `verify` never becomes a revision from content that fails it.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{SecretReference, ValuesSourceKind, DNS_LABEL_PATTERN};

/// What a source's content must be signed by: exactly one of `cosign` (image sources and
/// `oci://` chart repositories), `provenance` (HTTP chart repositories) or `git` (git sources).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new("[has(self.cosign), has(self.provenance), has(self.git)].filter(x, x).size() == 1").message("verify takes exactly one of cosign, provenance or git"))]
#[serde(rename_all = "camelCase")]
pub struct SourceVerification {
    /// cosign signatures of the artifact's manifest digest: signed with one of the public keys,
    /// or keyless with a certificate from the trusted root naming an allowed identity. Exactly
    /// one of cosign, provenance and git is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cosign: Option<CosignVerification>,
    /// The chart's provenance file (`<chart>.tgz.prov`, as `helm package --sign` writes it),
    /// signed by a key of the keyring and naming the archive's SHA-256. Exactly one of cosign,
    /// provenance and git is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<ProvenanceVerification>,
    /// OpenPGP or SSH signatures of the commit, the tag, or both. Exactly one of cosign,
    /// provenance and git is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitVerification>,
}

/// cosign verification: a signature is accepted when it verifies with one of `publicKeys`, or
/// when its certificate chains to `keyless.trustedRoot` and names one of `keyless.identities`.
/// Signatures are looked for as Sigstore bundles attached as OCI referrers (cosign v3's default)
/// and under the `sha256-<digest>.sig` tag (cosign v2's layout).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new("has(self.publicKeys) || has(self.keyless)").message("cosign verification needs publicKeys, keyless, or both"))]
#[serde(rename_all = "camelCase")]
pub struct CosignVerification {
    /// A Secret whose every key holds PEM public keys (`cosign.pub`): ECDSA P-256, Ed25519 or
    /// RSA. At least one of publicKeys and keyless is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_keys: Option<SecretReference>,
    /// Keyless signatures: short-lived certificates from a Fulcio-like CA. At least one of
    /// publicKeys and keyless is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyless: Option<KeylessVerification>,
}

/// Keyless verification against a trusted root the user provides.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeylessVerification {
    /// Sigstore's trusted root (`trusted_root.json`: certificate authorities, transparency logs)
    /// in a ConfigMap or Secret. When it names transparency logs, a signature must come with an
    /// entry of one of them whose signed entry timestamp verifies.
    pub trusted_root: TrustedRootReference,
    /// Who may have signed: the certificate's OIDC issuer and subject must match one entry.
    #[schemars(length(min = 1, max = 32))]
    pub identities: Vec<IdentityMatch>,
}

/// Where the trusted root is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrustedRootReference {
    /// ConfigMap or Secret.
    pub kind: ValuesSourceKind,
    /// Its name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Its namespace. Default: the agent's namespace (the secret-namespace rule applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub namespace: Option<String>,
    /// The key holding the JSON. Default: `trusted_root.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub key: Option<String>,
}

impl TrustedRootReference {
    /// The key read when none is given.
    pub const DEFAULT_KEY: &'static str = "trusted_root.json";

    /// The key in force.
    pub fn key(&self) -> &str {
        self.key.as_deref().unwrap_or(Self::DEFAULT_KEY)
    }
}

/// An allowed signer: the certificate's OIDC issuer and subject (its email or URI SAN), each
/// matched exactly or by a regular expression (RE2-like syntax, anchored by the user: write
/// `^…$`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new("has(self.issuer) != has(self.issuerRegExp)").message("give exactly one of issuer or issuerRegExp"))]
#[x_kube(validation = Rule::new("has(self.subject) != has(self.subjectRegExp)").message("give exactly one of subject or subjectRegExp"))]
#[serde(rename_all = "camelCase")]
pub struct IdentityMatch {
    /// The OIDC issuer, exactly (`https://token.actions.githubusercontent.com`). Exactly one of
    /// issuer and issuerRegExp is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub issuer: Option<String>,
    /// A regular expression the OIDC issuer must match. Exactly one of issuer and issuerRegExp
    /// is required.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "issuerRegExp"
    )]
    #[schemars(length(min = 1, max = 1024))]
    pub issuer_regexp: Option<String>,
    /// The subject, exactly (an email, or a workflow URI). Exactly one of subject and
    /// subjectRegExp is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub subject: Option<String>,
    /// A regular expression the subject must match. Exactly one of subject and subjectRegExp is
    /// required.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "subjectRegExp"
    )]
    #[schemars(length(min = 1, max = 1024))]
    pub subject_regexp: Option<String>,
}

/// Provenance-file verification of charts from HTTP chart repositories.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvenanceVerification {
    /// A Secret whose every key holds OpenPGP public keys, binary (`gpg --export`) or armored
    /// (`gpg --export --armor`).
    pub keyring: SecretReference,
}

/// Which git signatures must verify. Default: HEAD.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum GitVerifyMode {
    /// The resolved commit's signature.
    #[default]
    #[serde(rename = "HEAD")]
    Head,
    /// The annotated tag's signature (a `tag` or `semver` ref).
    Tag,
    /// Both the tag's and the commit's.
    TagAndHEAD,
}

/// Git signature verification.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitVerification {
    /// What must be signed. Default: HEAD (the resolved commit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<GitVerifyMode>,
    /// A Secret whose every key holds armored OpenPGP public keys (`gpg --export --armor`) or SSH
    /// public keys, one per line (`ssh-ed25519 AAAA… comment`, or allowed_signers lines).
    pub keys: SecretReference,
}

impl GitVerification {
    /// The mode in force.
    pub fn mode(&self) -> GitVerifyMode {
        self.mode.unwrap_or_default()
    }
}

/// Who signed a source's content, as verified for a revision.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerifiedSignature {
    /// What was verified: `cosign` (with `key`, or `issuer` and `subject`), `provenance`,
    /// `git` (`openpgp` or `ssh`).
    pub method: String,
    /// What carried the signature: `bundle` (a Sigstore bundle referrer), `signature tag`, the
    /// provenance file, `commit`, `tag`, `tag and commit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed: Option<String>,
    /// The key's fingerprint: `sha256:<hex>` of a public key's DER, an OpenPGP fingerprint, an
    /// SSH `SHA256:` fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The certificate's OIDC issuer (keyless).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The certificate's subject (keyless).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The transparency log entry's index, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_index: Option<i64>,
}

impl VerifiedSignature {
    /// One line for the CLI: `cosign key sha256:… (bundle)`, `cosign issuer … subject … log 12`.
    pub fn summary(&self) -> String {
        let mut parts = vec![self.method.clone()];
        if let Some(key) = &self.key {
            parts.push(format!("key {key}"));
        }
        if let Some(issuer) = &self.issuer {
            parts.push(format!("issuer {issuer}"));
        }
        if let Some(subject) = &self.subject {
            parts.push(format!("subject {subject}"));
        }
        if let Some(index) = self.log_index {
            parts.push(format!("log index {index}"));
        }
        if let Some(signed) = &self.signed {
            parts.push(format!("({signed})"));
        }
        parts.join(" ")
    }
}
