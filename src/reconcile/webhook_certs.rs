//! Phase 2b, certificates for registry-v1 webhooks, between render and the revision decision.
//!
//! `BuiltIn` provider: the agent keeps a CA per BundleDeployment in a Secret of the install
//! namespace (`<name>-pallet-webhook-ca`) and a serving certificate per webhook Service in the
//! Secret its Deployment mounts (`<service>-cert`, the name cert-manager would use). The CA
//! bundle is injected into the rendered webhook configurations and conversion webhooks, so the
//! rendered content (and the revision) changes only when the CA does: on renewal. Each pass
//! reads the Secrets and writes nothing while every certificate is valid for longer than the
//! renewal window (a third of the validity). A renewed CA is injected together with the
//! previous one, so webhooks keep working until the operator's Pods see the new serving
//! certificate.
//!
//! `CertManager` provider: before anything is stored or applied, the cluster must serve
//! cert-manager's Issuer and Certificate; otherwise the pass fails with `CertManagerMissing`.
//!
//! The decisions ([`needs_new_ca`], [`needs_new_serving`], [`renewal_in`], [`ca_bundle`]) are
//! pure and unit-tested; this module's async functions only read, generate and write.

use super::workload::Workload;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::{Resource, ResourceExt};
use pallet_formats::{Rendered, WebhookCertificate};
use serde_json::json;
use sha2::Digest as _;

use super::{Context, ReconcileError};
use crate::api::{BundleDeployment, CertificateProviderName};
use crate::changelog::{ObjectRef, Operation, Reason};

/// Annotation: when the certificate in the Secret expires (Unix seconds).
pub const NOT_AFTER_ANNOTATION: &str = "pallet.dev/not-after";
/// Annotation on serving Secrets: SHA-256 (hex) of the CA certificate that signed them.
pub const ISSUER_ANNOTATION: &str = "pallet.dev/issuer";
/// Annotation on serving Secrets: the DNS names of the certificate, comma-separated.
pub const DNS_NAMES_ANNOTATION: &str = "pallet.dev/dns-names";
/// Label on the Secrets: the BundleDeployment they serve.
pub const CERTIFICATES_OF_LABEL: &str = "pallet.dev/webhook-certificates-of";
/// Default validity of the CA and serving certificates (two years, as OLM's).
pub const DEFAULT_VALIDITY: Duration = Duration::from_secs(730 * 24 * 3600);

/// How long certificates live; they are renewed when a third of that remains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CertPolicy {
    /// Validity of a new certificate.
    pub validity: Duration,
}

impl Default for CertPolicy {
    fn default() -> Self {
        CertPolicy {
            validity: DEFAULT_VALIDITY,
        }
    }
}

impl CertPolicy {
    /// Seconds before expiry at which a certificate is renewed.
    pub fn renew_before_secs(&self) -> i64 {
        (self.validity.as_secs() / 3).max(1) as i64
    }
}

/// The CA as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCa {
    /// Its certificate, PEM.
    pub cert_pem: String,
    /// Its private key, PEM.
    pub key_pem: String,
    /// What is injected as caBundle (this CA, and the previous one after a renewal).
    pub bundle_pem: String,
    /// Expiry, Unix seconds.
    pub not_after: i64,
}

/// A serving certificate as stored (what the decisions need).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredServing {
    /// SHA-256 (hex) of the CA certificate that signed it.
    pub issuer: String,
    /// Its DNS names.
    pub dns_names: Vec<String>,
    /// Expiry, Unix seconds.
    pub not_after: i64,
    /// The caBundle stored next to it.
    pub bundle_pem: String,
}

/// True when a new CA is needed: none, or it expires within the renewal window.
pub fn needs_new_ca(now: i64, stored: Option<&StoredCa>, policy: CertPolicy) -> bool {
    stored.is_none_or(|ca| now >= ca.not_after - policy.renew_before_secs())
}

/// True when the serving certificate must be issued again: none, signed by another CA, for
/// other names, with another bundle beside it, or within the renewal window.
pub fn needs_new_serving(
    now: i64,
    stored: Option<&StoredServing>,
    ca: &StoredCa,
    dns_names: &[String],
    policy: CertPolicy,
) -> bool {
    stored.is_none_or(|serving| {
        serving.issuer != fingerprint(&ca.cert_pem)
            || serving.dns_names != dns_names
            || serving.bundle_pem != ca.bundle_pem
            || now >= serving.not_after - policy.renew_before_secs()
    })
}

/// When the next renewal is due for certificates expiring at `not_afters` (at least a second).
pub fn renewal_in(now: i64, not_afters: &[i64], policy: CertPolicy) -> Duration {
    let due = not_afters
        .iter()
        .map(|not_after| not_after - policy.renew_before_secs() - now)
        .min()
        .unwrap_or(i64::MAX);
    Duration::from_secs(due.max(1) as u64)
}

/// The caBundle after issuing `new_ca_pem`: it, then the previous CA while that is still valid
/// (so serving certificates it signed keep verifying until they are replaced in the Pods).
pub fn ca_bundle(new_ca_pem: &str, previous: Option<&StoredCa>, now: i64) -> String {
    match previous.filter(|ca| ca.not_after > now) {
        Some(ca) => format!(
            "{}{}",
            ensure_newline(new_ca_pem),
            ensure_newline(&ca.cert_pem)
        ),
        None => ensure_newline(new_ca_pem),
    }
}

fn ensure_newline(pem: &str) -> String {
    if pem.ends_with('\n') {
        pem.to_owned()
    } else {
        format!("{pem}\n")
    }
}

/// SHA-256 (hex) of a PEM text.
pub fn fingerprint(pem: &str) -> String {
    let digest = sha2::Sha256::digest(pem.trim().as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The CA Secret's name for a BundleDeployment.
pub fn ca_secret_name(bundle_deployment: &str) -> String {
    format!("{bundle_deployment}-pallet-webhook-ca")
}

fn certificate_error(message: String) -> ReconcileError {
    ReconcileError::Certificates {
        reason: "WebhookCertificateFailed",
        message,
    }
}

/// The CA distinguished name: the signer of serving certificates is rebuilt from it and the key.
fn ca_params(bundle_deployment: &str) -> rcgen::CertificateParams {
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("pallet webhook CA for {bundle_deployment}"),
    );
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn validity_window(
    params: &mut rcgen::CertificateParams,
    now: i64,
    not_after: i64,
) -> Result<(), ReconcileError> {
    let at = |secs: i64| {
        time::OffsetDateTime::from_unix_timestamp(secs)
            .map_err(|e| certificate_error(format!("certificate time {secs}: {e}")))
    };
    // A minute of slack for clocks a little behind the agent's.
    params.not_before = at(now - 60)?;
    params.not_after = at(not_after)?;
    Ok(())
}

/// A new CA valid for the policy's validity from `now`.
fn issue_ca(
    bundle_deployment: &str,
    now: i64,
    policy: CertPolicy,
    previous: Option<&StoredCa>,
) -> Result<StoredCa, ReconcileError> {
    let key = rcgen::KeyPair::generate()
        .map_err(|e| certificate_error(format!("generate the CA key: {e}")))?;
    let mut params = ca_params(bundle_deployment);
    let not_after = now + policy.validity.as_secs() as i64;
    validity_window(&mut params, now, not_after)?;
    let cert = params
        .self_signed(&key)
        .map_err(|e| certificate_error(format!("sign the CA: {e}")))?;
    let cert_pem = cert.pem();
    Ok(StoredCa {
        bundle_pem: ca_bundle(&cert_pem, previous, now),
        cert_pem,
        key_pem: key.serialize_pem(),
        not_after,
    })
}

/// A serving certificate for `dns_names`, signed by `ca`, expiring with it at the latest.
fn issue_serving(
    bundle_deployment: &str,
    ca: &StoredCa,
    dns_names: &[String],
    now: i64,
    policy: CertPolicy,
) -> Result<(String, String, i64), ReconcileError> {
    let ca_key = rcgen::KeyPair::from_pem(&ca.key_pem)
        .map_err(|e| certificate_error(format!("read the CA key: {e}")))?;
    let issuer = rcgen::Issuer::new(ca_params(bundle_deployment), ca_key);
    let key = rcgen::KeyPair::generate()
        .map_err(|e| certificate_error(format!("generate a serving key: {e}")))?;
    let mut params = rcgen::CertificateParams::new(dns_names.to_vec())
        .map_err(|e| certificate_error(format!("serving certificate names: {e}")))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    if let Some(first) = dns_names.first() {
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, first.clone());
    }
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    let not_after = (now + policy.validity.as_secs() as i64).min(ca.not_after);
    validity_window(&mut params, now, not_after)?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|e| certificate_error(format!("sign a serving certificate: {e}")))?;
    Ok((cert.pem(), key.serialize_pem(), not_after))
}

fn data_text(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()?
        .get(key)
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
}

fn annotation(secret: &Secret, key: &str) -> Option<String> {
    secret.metadata.annotations.as_ref()?.get(key).cloned()
}

/// The CA in a Secret, if it is complete.
pub fn stored_ca(secret: &Secret) -> Option<StoredCa> {
    Some(StoredCa {
        cert_pem: data_text(secret, "ca.crt")?,
        key_pem: data_text(secret, "ca.key")?,
        bundle_pem: data_text(secret, "ca-bundle.crt")?,
        not_after: annotation(secret, NOT_AFTER_ANNOTATION)?.parse().ok()?,
    })
}

/// The serving certificate in a Secret, if it is complete.
pub fn stored_serving(secret: &Secret) -> Option<StoredServing> {
    data_text(secret, "tls.crt")?;
    data_text(secret, "tls.key")?;
    Some(StoredServing {
        issuer: annotation(secret, ISSUER_ANNOTATION)?,
        dns_names: annotation(secret, DNS_NAMES_ANNOTATION)?
            .split(',')
            .map(str::to_owned)
            .collect(),
        not_after: annotation(secret, NOT_AFTER_ANNOTATION)?.parse().ok()?,
        bundle_pem: data_text(secret, "ca.crt")?,
    })
}

/// What the phase hands on: the render with caBundles, its digest, and when to come back.
pub struct Provided {
    /// The rendered set (with caBundles for BuiltIn).
    pub rendered: Arc<Rendered>,
    /// Its digest.
    pub digest: String,
    /// When the next renewal is due, if any certificate is kept.
    pub renewal_in: Option<Duration>,
}

/// Runs the certificate provider for `bd` over its render (see the module doc).
pub async fn provide(
    bd: &BundleDeployment,
    (ctx, workload): (&Context, &Workload),
    rendered: Arc<Rendered>,
    digest: String,
) -> Result<Provided, ReconcileError> {
    let provider = bd
        .spec
        .config
        .as_ref()
        .and_then(|c| c.registry_v1.as_ref())
        .map(|r| r.certificate_provider())
        .unwrap_or_default();
    if provider == CertificateProviderName::CertManager {
        check_cert_manager(workload, &rendered).await?;
    }
    if rendered.webhook_certificates.is_empty() {
        return Ok(Provided {
            rendered,
            digest,
            renewal_in: None,
        });
    }
    let name = bd.name_any();
    let namespace = rendered.install_namespace.clone();
    let policy = ctx.rendering.webhook_cert_policy;
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let writer = workload.writer.clone();
    super::ensure_namespace(&workload.client, &writer, &namespace).await?;
    // Read as the writer: a BundleDeployment's ServiceAccount that keeps these Secrets can read
    // them, while the agent itself may not read Secrets outside its namespace.
    let secrets: Api<Secret> = Api::namespaced(writer.clone(), &namespace);
    let write_secrets: Api<Secret> = Api::namespaced(writer, &namespace);
    let read = |secret_name: String| {
        let secrets = secrets.clone();
        let namespace = namespace.clone();
        async move {
            secrets
                .get_opt(&secret_name)
                .await
                .map_err(|source| ReconcileError::Kube {
                    context: format!("read Secret {namespace}/{secret_name}"),
                    source,
                })
        }
    };

    let ca_name = ca_secret_name(&name);
    let existing_ca = read(ca_name.clone()).await?;
    let stored = existing_ca.as_ref().and_then(stored_ca);
    let ca = if needs_new_ca(now, stored.as_ref(), policy) {
        let ca = issue_ca(&name, now, policy, stored.as_ref())?;
        let data = BTreeMap::from([
            ("ca.crt".to_owned(), ca.cert_pem.clone()),
            ("ca.key".to_owned(), ca.key_pem.clone()),
            ("ca-bundle.crt".to_owned(), ca.bundle_pem.clone()),
        ]);
        let annotations =
            BTreeMap::from([(NOT_AFTER_ANNOTATION.to_owned(), ca.not_after.to_string())]);
        write_secret(
            ctx,
            bd,
            &write_secrets,
            &ca_name,
            "Opaque",
            data,
            annotations,
            existing_ca.is_some(),
        )
        .await?;
        tracing::info!(bundle_deployment = %name, secret = %ca_name, renewed = stored.is_some(), "webhook CA issued");
        ca
    } else {
        stored.ok_or_else(|| certificate_error("the CA vanished".to_owned()))?
    };

    let mut not_afters = vec![ca.not_after];
    for wanted in &rendered.webhook_certificates {
        let existing = read(wanted.secret_name.clone()).await?;
        let stored = existing.as_ref().and_then(stored_serving);
        if needs_new_serving(now, stored.as_ref(), &ca, &wanted.dns_names, policy) {
            let not_after = issue_and_store(
                ctx,
                bd,
                &write_secrets,
                &ca,
                wanted,
                now,
                policy,
                existing.is_some(),
            )
            .await?;
            not_afters.push(not_after);
        } else if let Some(stored) = stored {
            not_afters.push(stored.not_after);
        }
    }

    let mut with_bundle = (*rendered).clone();
    pallet_formats::registry_v1::inject_ca_bundle(&mut with_bundle, &ca.bundle_pem);
    let digest = with_bundle.digest();
    Ok(Provided {
        rendered: Arc::new(with_bundle),
        digest,
        renewal_in: Some(renewal_in(now, &not_afters, policy)),
    })
}

/// For previews (`pallet plan`, the drift of a paused bundle): injects the caBundle the agent
/// keeps for `bundle_deployment`, read-only, so the preview matches what the agent applies.
/// Nothing is injected when the CA Secret does not exist yet (the agent issues it on install).
pub async fn inject_existing(
    client: &kube::Client,
    bundle_deployment: &str,
    rendered: &mut Rendered,
) -> Result<(), kube::Error> {
    if rendered.webhook_certificates.is_empty() {
        return Ok(());
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &rendered.install_namespace);
    if let Some(ca) = secrets
        .get_opt(&ca_secret_name(bundle_deployment))
        .await?
        .as_ref()
        .and_then(stored_ca)
    {
        pallet_formats::registry_v1::inject_ca_bundle(rendered, &ca.bundle_pem);
    }
    Ok(())
}

/// [`inject_existing`] for the agent's paused passes: the render (and digest) with the kept
/// caBundle, unchanged when the bundle has no BuiltIn webhooks.
pub async fn with_kept_bundle(
    workload: &Workload,
    bd: &BundleDeployment,
    rendered: Arc<Rendered>,
    digest: String,
) -> Result<(Arc<Rendered>, String), ReconcileError> {
    if rendered.webhook_certificates.is_empty() {
        return Ok((rendered, digest));
    }
    let mut with_bundle = (*rendered).clone();
    inject_existing(&workload.writer, &bd.name_any(), &mut with_bundle)
        .await
        .map_err(|source| ReconcileError::Kube {
            context: "read the webhook CA".into(),
            source,
        })?;
    let digest = with_bundle.digest();
    Ok((Arc::new(with_bundle), digest))
}

/// `objects` (a stored revision or a fresh render) with every injected `caBundle` set to the
/// bundle the agent keeps now, for registry-v1 BundleDeployments with the BuiltIn provider: a
/// revision stored before a renewal would otherwise re-apply a CA the serving certificates no
/// longer chain to. Reads the CA Secret only when `objects` carry a caBundle.
pub async fn with_current_bundle(
    workload: &Workload,
    bd: &BundleDeployment,
    mut objects: Vec<pallet_formats::Object>,
) -> Result<Vec<pallet_formats::Object>, ReconcileError> {
    let builtin = bd.spec.format == crate::api::BundleFormat::RegistryV1
        && bd
            .spec
            .config
            .as_ref()
            .and_then(|c| c.registry_v1.as_ref())
            .map(|r| r.certificate_provider())
            .unwrap_or_default()
            == CertificateProviderName::BuiltIn;
    if !builtin {
        return Ok(objects);
    }
    let Some(namespace) = pallet_formats::registry_v1::injected_service_namespace(&objects) else {
        return Ok(objects);
    };
    let secrets: Api<Secret> = Api::namespaced(workload.writer.clone(), &namespace);
    let name = ca_secret_name(&bd.name_any());
    let kept = secrets
        .get_opt(&name)
        .await
        .map_err(|source| ReconcileError::Kube {
            context: format!("read Secret {namespace}/{name}"),
            source,
        })?;
    if let Some(ca) = kept.as_ref().and_then(stored_ca) {
        pallet_formats::registry_v1::replace_ca_bundles(&mut objects, &ca.bundle_pem);
    }
    Ok(objects)
}

/// With `deletionPolicy: Orphan`, the certificate Secrets stay with the orphaned operator: their
/// owner reference to the BundleDeployment (which would let the garbage collector delete them)
/// is removed. `namespaces` are where the bundle's objects were.
pub async fn orphan_secrets(
    (ctx, workload): (&Context, &Workload),
    bd: &BundleDeployment,
    namespaces: &std::collections::BTreeSet<String>,
) -> Result<(), ReconcileError> {
    let name = bd.name_any();
    let writer = workload.writer.clone();
    for namespace in namespaces {
        let secrets: Api<Secret> = Api::namespaced(writer.clone(), namespace);
        let selector = format!("{CERTIFICATES_OF_LABEL}={name}");
        let listed = secrets
            .list_metadata(&kube::api::ListParams::default().labels(&selector))
            .await
            .map_err(|source| ReconcileError::Kube {
                context: format!("list webhook certificate Secrets in {namespace}"),
                source,
            })?;
        let writes: Api<Secret> = Api::namespaced(writer.clone(), namespace);
        for secret in listed.items {
            let secret_name = secret.name_any();
            let patch = json!({"metadata": {"ownerReferences": null}});
            writes
                .patch(&secret_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|source| ReconcileError::Kube {
                    context: format!("orphan Secret {namespace}/{secret_name}"),
                    source,
                })?;
            let mut entry = ctx.records.changelog.entry(
                &name,
                Operation::Update,
                Reason::Deletion,
                ObjectRef {
                    api_version: "v1".into(),
                    kind: "Secret".into(),
                    namespace: Some(namespace.clone()),
                    name: secret_name,
                },
            );
            entry.fields_changed = vec![".metadata.ownerReferences".into()];
            entry.details.insert("orphaned".into(), json!(true));
            ctx.records.changelog.record(&entry);
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn issue_and_store(
    ctx: &Context,
    bd: &BundleDeployment,
    secrets: &Api<Secret>,
    ca: &StoredCa,
    wanted: &WebhookCertificate,
    now: i64,
    policy: CertPolicy,
    exists: bool,
) -> Result<i64, ReconcileError> {
    let (cert, key, not_after) = issue_serving(&bd.name_any(), ca, &wanted.dns_names, now, policy)?;
    let data = BTreeMap::from([
        ("tls.crt".to_owned(), cert),
        ("tls.key".to_owned(), key),
        ("ca.crt".to_owned(), ca.bundle_pem.clone()),
    ]);
    let annotations = BTreeMap::from([
        (NOT_AFTER_ANNOTATION.to_owned(), not_after.to_string()),
        (ISSUER_ANNOTATION.to_owned(), fingerprint(&ca.cert_pem)),
        (DNS_NAMES_ANNOTATION.to_owned(), wanted.dns_names.join(",")),
    ]);
    write_secret(
        ctx,
        bd,
        secrets,
        &wanted.secret_name,
        "kubernetes.io/tls",
        data,
        annotations,
        exists,
    )
    .await?;
    tracing::info!(bundle_deployment = %bd.name_any(), secret = %wanted.secret_name, "webhook serving certificate issued");
    Ok(not_after)
}

/// Writes a certificate Secret (server-side apply, owned by the BundleDeployment so it goes with
/// it) and records the write in the change log.
#[allow(clippy::too_many_arguments)]
async fn write_secret(
    ctx: &Context,
    bd: &BundleDeployment,
    secrets: &Api<Secret>,
    name: &str,
    type_: &str,
    data: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    exists: bool,
) -> Result<(), ReconcileError> {
    let owner = bd.controller_owner_ref(&()).map(|mut owner| {
        // Not blocking the BundleDeployment's deletion on these Secrets.
        owner.block_owner_deletion = None;
        owner
    });
    let data: BTreeMap<String, ByteString> = data
        .into_iter()
        .map(|(k, v)| (k, ByteString(v.into_bytes())))
        .collect();
    let body = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "labels": {CERTIFICATES_OF_LABEL: bd.name_any()},
            "annotations": annotations,
            "ownerReferences": owner.into_iter().collect::<Vec<_>>(),
        },
        "type": type_,
        "data": data,
    });
    let operation = if exists {
        Operation::Update
    } else {
        Operation::Create
    };
    let mut entry = ctx.records.changelog.entry(
        &bd.name_any(),
        operation,
        Reason::Certificate,
        ObjectRef {
            api_version: "v1".into(),
            kind: "Secret".into(),
            namespace: secrets.namespace().map(str::to_owned),
            name: name.to_owned(),
        },
    );
    let result = secrets
        .patch(
            name,
            &PatchParams::apply(crate::apply::FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await;
    match result {
        Ok(written) => {
            entry.resource_version_after = written.resource_version();
            ctx.records.changelog.record(&entry);
            crate::metrics::METRICS.applied(usize::from(!exists), usize::from(exists));
            Ok(())
        }
        Err(error) => {
            entry.result = "failure";
            entry.error = Some(error.to_string());
            ctx.records.changelog.record(&entry);
            match error {
                kube::Error::Api(status) if status.code == 403 => {
                    Err(ReconcileError::Forbidden(format!(
                        "writing the webhook certificate Secret {name}: {}",
                        status.message
                    )))
                }
                source => Err(ReconcileError::Kube {
                    context: format!("write the webhook certificate Secret {name}"),
                    source,
                }),
            }
        }
    }
}

/// With CertManager, the render holds Issuers and Certificates: the cluster must serve them,
/// checked before anything is stored or applied so nothing is half-installed.
async fn check_cert_manager(
    workload: &Workload,
    rendered: &Rendered,
) -> Result<(), ReconcileError> {
    let needed: std::collections::BTreeSet<(String, String)> = rendered
        .objects
        .iter()
        .filter(|o| o.object.group() == "cert-manager.io")
        .map(|o| (o.object.version().to_owned(), o.object.kind().to_owned()))
        .collect();
    for (version, kind) in needed {
        let gvk = GroupVersionKind::gvk("cert-manager.io", &version, &kind);
        let served = workload
            .kinds
            .resolve(&workload.client, &gvk)
            .await
            .map_err(|source| ReconcileError::Kube {
                context: format!("discover cert-manager.io/{version} {kind}"),
                source,
            })?;
        if served.is_none() {
            return Err(ReconcileError::Certificates {
                reason: "CertManagerMissing",
                message: format!(
                    "config.registryV1.certificateProvider is CertManager, but the cluster does not serve cert-manager.io/{version} {kind}: install cert-manager, or use certificateProvider: BuiltIn; nothing was applied"
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> CertPolicy {
        CertPolicy {
            validity: Duration::from_secs(300),
        }
    }

    fn ca(not_after: i64) -> StoredCa {
        StoredCa {
            cert_pem: "CA".into(),
            key_pem: "KEY".into(),
            bundle_pem: "CA\n".into(),
            not_after,
        }
    }

    #[test]
    fn a_ca_is_kept_until_a_third_of_its_validity_remains() {
        assert!(needs_new_ca(1000, None, policy()));
        assert!(!needs_new_ca(1000, Some(&ca(1300)), policy()));
        assert!(!needs_new_ca(1199, Some(&ca(1300)), policy()));
        assert!(
            needs_new_ca(1200, Some(&ca(1300)), policy()),
            "100 s of 300 left"
        );
        assert!(needs_new_ca(2000, Some(&ca(1300)), policy()), "expired");
    }

    #[test]
    fn a_serving_certificate_is_issued_again_when_anything_it_depends_on_changes() {
        let ca = ca(2000);
        let names = vec!["svc.ns".to_owned(), "svc.ns.svc".to_owned()];
        let good = StoredServing {
            issuer: fingerprint("CA"),
            dns_names: names.clone(),
            not_after: 1300,
            bundle_pem: "CA\n".into(),
        };
        assert!(!needs_new_serving(1000, Some(&good), &ca, &names, policy()));
        assert!(needs_new_serving(1000, None, &ca, &names, policy()));
        let other_issuer = StoredServing {
            issuer: fingerprint("OLD"),
            ..good.clone()
        };
        assert!(needs_new_serving(
            1000,
            Some(&other_issuer),
            &ca,
            &names,
            policy()
        ));
        assert!(needs_new_serving(
            1000,
            Some(&good),
            &ca,
            &names[..1],
            policy()
        ));
        let old_bundle = StoredServing {
            bundle_pem: "OLD\n".into(),
            ..good.clone()
        };
        assert!(needs_new_serving(
            1000,
            Some(&old_bundle),
            &ca,
            &names,
            policy()
        ));
        assert!(needs_new_serving(1200, Some(&good), &ca, &names, policy()));
    }

    #[test]
    fn renewal_is_due_a_third_before_the_first_expiry() {
        assert_eq!(
            renewal_in(1000, &[1300, 1600], policy()),
            Duration::from_secs(200)
        );
        assert_eq!(
            renewal_in(1250, &[1300], policy()),
            Duration::from_secs(1),
            "overdue"
        );
    }

    #[test]
    fn the_bundle_keeps_the_previous_ca_while_it_is_valid() {
        assert_eq!(ca_bundle("NEW", None, 1000), "NEW\n");
        assert_eq!(ca_bundle("NEW\n", Some(&ca(1300)), 1000), "NEW\nCA\n");
        assert_eq!(
            ca_bundle("NEW", Some(&ca(900)), 1000),
            "NEW\n",
            "expired: dropped"
        );
    }

    #[test]
    fn issued_certificates_chain_to_the_ca_and_round_trip_through_a_secret() {
        let now = 1_800_000_000;
        let ca = issue_ca("demo", now, policy(), None).unwrap();
        assert!(ca.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(ca.bundle_pem, ca.cert_pem);
        let names = vec!["svc.ns".to_owned(), "svc.ns.svc".to_owned()];
        let (cert, key, not_after) = issue_serving("demo", &ca, &names, now, policy()).unwrap();
        assert!(key.contains("PRIVATE KEY"));
        assert_eq!(not_after, now + 300);
        // Verified with openssl's chain check in the e2e test; here the shapes round-trip.
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "s", "annotations": {
                NOT_AFTER_ANNOTATION: not_after.to_string(),
                ISSUER_ANNOTATION: fingerprint(&ca.cert_pem),
                DNS_NAMES_ANNOTATION: names.join(",")}},
            "data": {"tls.crt": base64_of(&cert), "tls.key": base64_of(&key), "ca.crt": base64_of(&ca.bundle_pem)}
        }))
        .unwrap();
        let stored = stored_serving(&secret).unwrap();
        assert!(!needs_new_serving(
            now,
            Some(&stored),
            &ca,
            &names,
            policy()
        ));
        let renewed = issue_ca("demo", now + 250, policy(), Some(&ca)).unwrap();
        assert!(
            renewed.bundle_pem.ends_with(&ca.cert_pem),
            "old CA kept in the bundle"
        );
        assert!(needs_new_serving(
            now + 250,
            Some(&stored),
            &renewed,
            &names,
            policy()
        ));
    }

    fn base64_of(text: &str) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(text)
    }
}
