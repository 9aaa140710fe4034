//! A CSV's `webhookdefinitions` as OLM v1 installs them: ValidatingWebhookConfigurations,
//! MutatingWebhookConfigurations, one Service per webhook Deployment, the conversion webhook of
//! each CRD a conversion webhook names, and what the certificate provider adds.
//!
//! Follows operator-controller: the generators in
//! `internal/operator-controller/rukpak/render/registryv1/generators/generators.go` and
//! `certmutator.go` (`CertMutator`: client configs, conversion, Services, certificate volumes),
//! `internal/operator-controller/rukpak/render/certprovider.go` (`CertProvisionerFor`: names) and
//! `internal/operator-controller/rukpak/render/certproviders/certmanager.go` (the cert-manager
//! provider's Issuer, Certificate and `cert-manager.io/inject-ca-from`), and its checks in
//! `internal/operator-controller/rukpak/render/registryv1/validators/validator.go`.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use serde_json::{json, Map, Value};

use crate::error::{RegistryV1Rule, RenderError};
use crate::registry_v1_config::{list_entry, object_entry};
use crate::{CertificateProvider, WebhookCertificate};

const VALIDATING: &str = "ValidatingAdmissionWebhook";
const MUTATING: &str = "MutatingAdmissionWebhook";
const CONVERSION: &str = "ConversionWebhook";
const INJECT_CA_ANNOTATION: &str = "cert-manager.io/inject-ca-from";
/// OLM v0's rotation period (2 years) and renewal window (24h), as Go's Duration writes them.
const CERT_MANAGER_DURATION: &str = "17520h0m0s";
const CERT_MANAGER_RENEW_BEFORE: &str = "24h0m0s";

/// Certificate volumes of webhook Deployments: (volume, mount path, cert file, key file).
const CERT_VOLUMES: [(&str, &str, &str, &str); 2] = [
    (
        "webhook-cert",
        "/tmp/k8s-webhook-server/serving-certs",
        "tls.crt",
        "tls.key",
    ),
    (
        "apiservice-cert",
        "/apiserver.local.config/certificates",
        "apiserver.crt",
        "apiserver.key",
    ),
];

/// One entry of `spec.webhookdefinitions`.
#[derive(Debug, Clone)]
pub(crate) struct WebhookDefinition {
    kind: String,
    generate_name: String,
    deployment_name: String,
    /// Go's int32: 0 when absent.
    container_port: i64,
    target_port: Option<Value>,
    webhook_path: Option<String>,
    conversion_crds: Vec<String>,
    raw: Map<String, Value>,
}

impl WebhookDefinition {
    /// The configuration's and webhook's name: generateName without a trailing `-`.
    fn name(&self) -> &str {
        self.generate_name
            .strip_suffix('-')
            .unwrap_or(&self.generate_name)
    }
}

/// OLM's `ObjectNameForBaseAndSuffix`: `<base>-<suffix>`, base cut so that base + suffix fit 63.
fn name_for_base_and_suffix(base: &str, suffix: &str) -> String {
    let mut base = base;
    if base.len() + suffix.len() > 63 {
        let mut cut = 63usize.saturating_sub(suffix.len() + 1).min(base.len());
        while !base.is_char_boundary(cut) {
            cut -= 1;
        }
        base = &base[..cut];
    }
    format!("{base}-{suffix}")
}

/// The webhook Service of a Deployment (OLM v0's naming).
pub(crate) fn service_name(deployment_name: &str) -> String {
    name_for_base_and_suffix(&deployment_name.replace('.', "-"), "service")
}

/// The certificate (and its Secret) of a webhook Service.
pub(crate) fn certificate_name(service_name: &str) -> String {
    name_for_base_and_suffix(service_name, "cert")
}

fn reject(csv_label: &str, message: String) -> RenderError {
    RenderError::RegistryV1 {
        rule: RegistryV1Rule::Webhooks,
        object: csv_label.to_owned(),
        message,
    }
}

/// Reads and checks the CSV's webhook definitions (OLM v1's validators).
pub(crate) fn read_webhooks(
    csv_spec: &Value,
    csv_label: &str,
    deployment_names: &BTreeSet<&str>,
    owned_crds: &BTreeSet<&str>,
    install_modes: &BTreeSet<&str>,
) -> Result<Vec<WebhookDefinition>, RenderError> {
    let Some(entries) = csv_spec.get("webhookdefinitions") else {
        return Ok(Vec::new());
    };
    let entries = match entries {
        Value::Null => return Ok(Vec::new()),
        Value::Array(entries) => entries,
        _ => {
            return Err(reject(
                csv_label,
                "spec.webhookdefinitions must be a list".to_owned(),
            ))
        }
    };
    let mut webhooks = Vec::with_capacity(entries.len());
    for entry in entries {
        let Some(raw) = entry.as_object() else {
            return Err(reject(
                csv_label,
                "a webhook definition is not an object".to_owned(),
            ));
        };
        let text = |key: &str| {
            raw.get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let webhook = WebhookDefinition {
            kind: text("type"),
            generate_name: text("generateName"),
            deployment_name: text("deploymentName"),
            container_port: raw
                .get("containerPort")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            target_port: raw.get("targetPort").filter(|v| !v.is_null()).cloned(),
            webhook_path: raw
                .get("webhookPath")
                .and_then(Value::as_str)
                .map(str::to_owned),
            conversion_crds: raw
                .get("conversionCRDs")
                .and_then(Value::as_array)
                .map(|list| {
                    list.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            raw: raw.clone(),
        };
        if ![VALIDATING, MUTATING, CONVERSION].contains(&webhook.kind.as_str()) {
            return Err(reject(
                csv_label,
                format!(
                    "webhook {:?} has type {:?}; expected {VALIDATING}, {MUTATING} or {CONVERSION}",
                    webhook.generate_name, webhook.kind
                ),
            ));
        }
        if !is_dns1123_subdomain(&webhook.generate_name) {
            return Err(reject(
                csv_label,
                format!(
                    "webhook of type '{}' has invalid name '{}': not a DNS-1123 subdomain",
                    webhook.kind, webhook.generate_name
                ),
            ));
        }
        if !deployment_names.contains(webhook.deployment_name.as_str()) {
            return Err(reject(
                csv_label,
                format!(
                    "webhook of type '{}' with name '{}' references non-existent deployment '{}'",
                    webhook.kind, webhook.generate_name, webhook.deployment_name
                ),
            ));
        }
        if webhooks.iter().any(|other: &WebhookDefinition| {
            other.kind == webhook.kind && other.generate_name == webhook.generate_name
        }) {
            return Err(reject(
                csv_label,
                format!(
                    "duplicate webhook '{}' of type '{}'",
                    webhook.generate_name, webhook.kind
                ),
            ));
        }
        if webhook.kind != CONVERSION {
            check_rules(&webhook, csv_label)?;
        }
        webhooks.push(webhook);
    }

    let conversion: Vec<&WebhookDefinition> =
        webhooks.iter().filter(|w| w.kind == CONVERSION).collect();
    if let Some(first) = conversion.first() {
        if install_modes.len() != 1 || !install_modes.contains("AllNamespaces") {
            let modes: Vec<&str> = install_modes.iter().copied().collect();
            return Err(reject(
                csv_label,
                format!(
                    "bundle contains conversion webhook {:?} and supports install modes [{}] - conversion webhooks are only supported for bundles that only support AllNamespaces install mode",
                    first.generate_name,
                    modes.join(" ")
                ),
            ));
        }
    }
    let mut referenced: BTreeMap<&str, &str> = BTreeMap::new();
    for webhook in &conversion {
        for crd in &webhook.conversion_crds {
            if !owned_crds.contains(crd.as_str()) {
                return Err(reject(
                    csv_label,
                    format!(
                        "conversion webhook '{}' references custom resource definition '{crd}' not owned bundle",
                        webhook.generate_name
                    ),
                ));
            }
            if let Some(other) = referenced.insert(crd, &webhook.generate_name) {
                return Err(reject(
                    csv_label,
                    format!(
                        "conversion webhooks [{other},{}] reference same custom resource definition '{crd}'",
                        webhook.generate_name
                    ),
                ));
            }
        }
    }
    Ok(webhooks)
}

/// Rules may not target every group, OLM's group, or the webhook configurations themselves.
fn check_rules(webhook: &WebhookDefinition, csv_label: &str) -> Result<(), RenderError> {
    let rules = webhook
        .raw
        .get("rules")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for rule in rules {
        let strings = |key: &str| -> Vec<&str> {
            rule.get(key)
                .and_then(Value::as_array)
                .map(|list| list.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default()
        };
        for group in strings("apiGroups") {
            if group == "*" || group == "olm.operatorframework.io" {
                return Err(reject(
                    csv_label,
                    format!(
                        "webhook {:?} contains forbidden rule: admission webhook rules cannot reference API group {group:?}",
                        webhook.generate_name
                    ),
                ));
            }
            if group == "admissionregistration.k8s.io" {
                for resource in strings("resources") {
                    let lower = resource.to_ascii_lowercase();
                    if lower == "*"
                        || lower.starts_with("mutatingwebhookconfiguration")
                        || lower.starts_with("validatingwebhookconfiguration")
                    {
                        return Err(reject(
                            csv_label,
                            format!(
                                "webhook {:?} contains forbidden rule: admission webhook rules cannot reference resource {resource:?} for API group {group:?}",
                                webhook.generate_name
                            ),
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Checks the CRDs conversion webhooks name (they must not preserve unknown fields).
pub(crate) fn check_conversion_crds(
    webhooks: &[WebhookDefinition],
    crds: &[Value],
    csv_label: &str,
) -> Result<(), RenderError> {
    for webhook in webhooks.iter().filter(|w| w.kind == CONVERSION) {
        for name in &webhook.conversion_crds {
            let preserves = crds
                .iter()
                .filter(|crd| crd.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
                .any(|crd| {
                    crd.pointer("/spec/preserveUnknownFields")
                        .and_then(Value::as_bool)
                        == Some(true)
                });
            if preserves {
                return Err(reject(
                    csv_label,
                    format!("custom resource definition '{name}' must have .spec.preserveUnknownFields set to false to let API Server call webhook to do the conversion"),
                ));
            }
        }
    }
    Ok(())
}

/// What the renderer needs to know about the provider for one webhook Deployment.
struct Provisioner<'a> {
    provider: CertificateProvider,
    namespace: &'a str,
    service_name: String,
    certificate_name: String,
}

impl<'a> Provisioner<'a> {
    fn new(deployment_name: &str, namespace: &'a str, provider: CertificateProvider) -> Self {
        let service_name = service_name(deployment_name);
        let certificate_name = certificate_name(&service_name);
        Provisioner {
            provider,
            namespace,
            service_name,
            certificate_name,
        }
    }

    /// cert-manager's CA injection annotation on a webhook configuration or CRD.
    fn inject(&self, object: &mut Value) {
        if self.provider != CertificateProvider::CertManager {
            return;
        }
        if let Some(object) = object.as_object_mut() {
            let metadata = object_entry(object, "metadata");
            object_entry(metadata, "annotations").insert(
                INJECT_CA_ANNOTATION.to_owned(),
                json!(format!("{}/{}", self.namespace, self.certificate_name)),
            );
        }
    }

    fn dns_names(&self) -> Vec<String> {
        let base = format!("{}.{}", self.service_name, self.namespace);
        vec![
            base.clone(),
            format!("{base}.svc"),
            format!("{base}.svc.cluster.local"),
        ]
    }
}

fn service_reference(
    namespace: &str,
    name: &str,
    path: Option<&str>,
    port: i64,
) -> Map<String, Value> {
    let mut service = Map::new();
    service.insert("name".to_owned(), json!(name));
    service.insert("namespace".to_owned(), json!(namespace));
    if let Some(path) = path {
        service.insert("path".to_owned(), json!(path));
    }
    service.insert("port".to_owned(), json!(port));
    service
}

/// The webhook configurations, validating ones first (OLM's generator order). Cluster-scoped:
/// OLM's objects also carry the install namespace, which the API server drops for a
/// cluster-scoped kind; ours carry none, since the apply step refuses a namespace there.
pub(crate) fn webhook_configurations(
    webhooks: &[WebhookDefinition],
    namespace: &str,
    target_namespace: &str,
    provider: CertificateProvider,
) -> Vec<Value> {
    let mut out = Vec::new();
    for (kind, configuration_kind) in [
        (VALIDATING, "ValidatingWebhookConfiguration"),
        (MUTATING, "MutatingWebhookConfiguration"),
    ] {
        for webhook in webhooks.iter().filter(|w| w.kind == kind) {
            let provisioner = Provisioner::new(&webhook.deployment_name, namespace, provider);
            let mut entry = Map::new();
            entry.insert("name".to_owned(), json!(webhook.name()));
            let mut fields = vec![
                "rules",
                "failurePolicy",
                "matchPolicy",
                "objectSelector",
                "sideEffects",
                "timeoutSeconds",
            ];
            if kind == MUTATING {
                fields.push("reinvocationPolicy");
            }
            for field in fields {
                if let Some(value) = webhook.raw.get(field).filter(|v| !v.is_null()) {
                    if field == "rules" && value.as_array().is_some_and(Vec::is_empty) {
                        continue;
                    }
                    entry.insert(field.to_owned(), value.clone());
                }
            }
            // Not omitempty in Go: written as null when the CSV has none.
            entry.insert(
                "admissionReviewVersions".to_owned(),
                webhook
                    .raw
                    .get("admissionReviewVersions")
                    .cloned()
                    .unwrap_or(Value::Null),
            );
            entry.insert(
                "clientConfig".to_owned(),
                json!({"service": service_reference(
                    namespace,
                    &provisioner.service_name,
                    webhook.webhook_path.as_deref(),
                    webhook.container_port,
                )}),
            );
            if !target_namespace.is_empty() {
                entry.insert(
                    "namespaceSelector".to_owned(),
                    json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                                 "operator": "In", "values": [target_namespace]}]}),
                );
            }
            let mut configuration = json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": configuration_kind,
                "metadata": {"name": webhook.name()},
                "webhooks": [Value::Object(entry)],
            });
            provisioner.inject(&mut configuration);
            out.push(configuration);
        }
    }
    out
}

/// Sets the conversion webhook on each CRD a conversion webhook names.
pub(crate) fn wire_conversion(
    webhooks: &[WebhookDefinition],
    crds: &mut [Value],
    namespace: &str,
    provider: CertificateProvider,
) {
    for webhook in webhooks.iter().filter(|w| w.kind == CONVERSION) {
        let provisioner = Provisioner::new(&webhook.deployment_name, namespace, provider);
        for crd in crds.iter_mut().filter(|crd| {
            crd.pointer("/metadata/name")
                .and_then(Value::as_str)
                .is_some_and(|name| webhook.conversion_crds.iter().any(|c| c == name))
        }) {
            let path = webhook.webhook_path.as_deref().unwrap_or("/");
            let conversion = json!({
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"service": service_reference(
                        namespace, &provisioner.service_name, Some(path), webhook.container_port)},
                    "conversionReviewVersions": webhook.raw.get("admissionReviewVersions").cloned().unwrap_or(Value::Null),
                },
            });
            if let Some(object) = crd.as_object_mut() {
                object_entry(object, "spec").insert("conversion".to_owned(), conversion);
            }
            provisioner.inject(crd);
        }
    }
}

/// One Service per webhook Deployment, in the CSV's Deployment order; its ports are the distinct
/// (container port or 443, target port or container port) of the Deployment's webhooks, sorted.
pub(crate) fn services(
    webhooks: &[WebhookDefinition],
    deployments: &[(String, Option<Value>)],
    namespace: &str,
) -> Vec<Value> {
    let mut out = Vec::new();
    for (deployment, match_labels) in deployments {
        let mut ports: Vec<(i64, Value)> = Vec::new();
        for webhook in webhooks.iter().filter(|w| &w.deployment_name == deployment) {
            let port = if webhook.container_port > 0 {
                webhook.container_port
            } else {
                443
            };
            let target = webhook.target_port.clone().unwrap_or(json!(port));
            if !ports.contains(&(port, target.clone())) {
                ports.push((port, target));
            }
        }
        if ports.is_empty() {
            continue;
        }
        // Go's IntOrString.IntValue: a named port counts as 0 (or its number if it parses).
        let int_value = |target: &Value| {
            target
                .as_i64()
                .or_else(|| target.as_str().and_then(|s| s.parse().ok()))
                .unwrap_or(0)
        };
        ports.sort_by(|a, b| a.0.cmp(&b.0).then(int_value(&a.1).cmp(&int_value(&b.1))));
        let ports: Vec<Value> = ports
            .into_iter()
            .map(|(port, target)| json!({"name": port.to_string(), "port": port, "targetPort": target}))
            .collect();
        let mut spec = Map::new();
        spec.insert("ports".to_owned(), Value::Array(ports));
        if let Some(labels) = match_labels
            .as_ref()
            .filter(|l| l.as_object().is_some_and(|m| !m.is_empty()))
        {
            spec.insert("selector".to_owned(), labels.clone());
        }
        out.push(json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": service_name(deployment), "namespace": namespace},
            "spec": Value::Object(spec),
            "status": {"loadBalancer": {}},
        }));
    }
    out
}

/// The names of the Deployments that serve webhooks, sorted.
fn webhook_deployments(webhooks: &[WebhookDefinition]) -> BTreeSet<&str> {
    webhooks
        .iter()
        .map(|w| w.deployment_name.as_str())
        .collect()
}

/// With a provider, the webhook Deployments mount their certificate Secret where operators built
/// with controller-runtime (and OLM v0's apiservice layout) look for it; volumes or mounts
/// already using those names or paths are replaced.
pub(crate) fn add_certificate_volumes(
    webhooks: &[WebhookDefinition],
    deployment: &mut Value,
    provider: CertificateProvider,
) {
    if provider == CertificateProvider::None {
        return;
    }
    let Some(name) = deployment.pointer("/metadata/name").and_then(Value::as_str) else {
        return;
    };
    if !webhook_deployments(webhooks).contains(name) {
        return;
    }
    let secret = certificate_name(&service_name(name));
    let Some(pod) = deployment
        .pointer_mut("/spec/template/spec")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let mut replaced: BTreeSet<String> = CERT_VOLUMES
        .iter()
        .map(|(volume, ..)| (*volume).to_owned())
        .collect();
    for container in pod
        .get("containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for mount in container
            .get("volumeMounts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let path = mount.get("mountPath").and_then(Value::as_str);
            if CERT_VOLUMES.iter().any(|(_, p, ..)| Some(*p) == path) {
                if let Some(name) = mount.get("name").and_then(Value::as_str) {
                    replaced.insert(name.to_owned());
                }
            }
        }
    }
    let is_replaced = |item: &Value| {
        item.get("name")
            .and_then(Value::as_str)
            .is_some_and(|name| replaced.contains(name))
    };
    let volumes = list_entry(pod, "volumes");
    volumes.retain(|volume| !is_replaced(volume));
    for (volume, _, cert, key) in CERT_VOLUMES {
        volumes.push(json!({"name": volume, "secret": {"secretName": secret,
            "items": [{"key": "tls.crt", "path": cert}, {"key": "tls.key", "path": key}]}}));
    }
    if let Some(containers) = pod.get_mut("containers").and_then(Value::as_array_mut) {
        for container in containers.iter_mut().filter_map(Value::as_object_mut) {
            let mounts = list_entry(container, "volumeMounts");
            mounts.retain(|mount| !is_replaced(mount));
            for (volume, path, ..) in CERT_VOLUMES {
                mounts.push(json!({"name": volume, "mountPath": path}));
            }
        }
    }
}

/// The cert-manager provider's objects per webhook Deployment: a self-signed Issuer and a
/// Certificate for the webhook Service (2 years, renewed 24h before expiry, as OLM v0).
pub(crate) fn cert_manager_objects(webhooks: &[WebhookDefinition], namespace: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for deployment in webhook_deployments(webhooks) {
        let provisioner = Provisioner::new(deployment, namespace, CertificateProvider::CertManager);
        let issuer = name_for_base_and_suffix(&provisioner.certificate_name, "selfsigned-issuer");
        out.push(json!({
            "apiVersion": "cert-manager.io/v1",
            "kind": "Issuer",
            "metadata": {"name": issuer, "namespace": namespace},
            "spec": {"selfSigned": {}},
        }));
        let dns_names = provisioner.dns_names();
        out.push(json!({
            "apiVersion": "cert-manager.io/v1",
            "kind": "Certificate",
            "metadata": {"name": provisioner.certificate_name, "namespace": namespace},
            "spec": {
                "secretName": provisioner.certificate_name,
                "commonName": dns_names[0],
                "usages": ["server auth"],
                "dnsNames": dns_names,
                "issuerRef": {"name": issuer},
                "duration": CERT_MANAGER_DURATION,
                "renewBefore": CERT_MANAGER_RENEW_BEFORE,
            },
        }));
    }
    out
}

/// The serving certificates the BuiltIn provider must issue.
pub(crate) fn builtin_certificates(
    webhooks: &[WebhookDefinition],
    namespace: &str,
) -> Vec<WebhookCertificate> {
    webhook_deployments(webhooks)
        .into_iter()
        .map(|deployment| {
            let provisioner = Provisioner::new(deployment, namespace, CertificateProvider::BuiltIn);
            WebhookCertificate {
                namespace: namespace.to_owned(),
                dns_names: provisioner.dns_names(),
                service_name: provisioner.service_name,
                secret_name: provisioner.certificate_name,
            }
        })
        .collect()
}

/// Sets `caBundle` (base64 of `ca_pem`) on every webhook client config among `objects` that
/// points at one of `services` (namespace, name): admission webhooks and CRD conversion. Returns
/// how many client configs it set.
pub(crate) fn inject_ca_bundle(
    objects: &mut [Value],
    services: &BTreeSet<(String, String)>,
    ca_pem: &str,
) -> usize {
    let encoded = base64::engine::general_purpose::STANDARD.encode(ca_pem.as_bytes());
    let points_here = |client_config: &Value| {
        let service = client_config.get("service");
        let field = |key: &str| {
            service
                .and_then(|s| s.get(key))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        services.contains(&(field("namespace"), field("name")))
    };
    let mut count = 0;
    for object in objects.iter_mut() {
        let configs = client_configs(object);
        for config in configs {
            if points_here(config) {
                if let Some(config) = config.as_object_mut() {
                    config.insert("caBundle".to_owned(), json!(encoded));
                    count += 1;
                }
            }
        }
    }
    count
}

/// The webhook client configs of an object (admission webhooks, CRD conversion).
fn client_configs(object: &mut Value) -> Vec<&mut Value> {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mut configs: Vec<&mut Value> = Vec::new();
    match kind.as_str() {
        "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration" => {
            if let Some(list) = object.get_mut("webhooks").and_then(Value::as_array_mut) {
                configs.extend(list.iter_mut().filter_map(|w| w.get_mut("clientConfig")));
            }
        }
        "CustomResourceDefinition" => {
            if let Some(config) = object.pointer_mut("/spec/conversion/webhook/clientConfig") {
                configs.push(config);
            }
        }
        _ => {}
    }
    configs
}

/// Replaces the `caBundle` of every service client config that has one; returns how many.
pub(crate) fn replace_ca_bundles(object: &mut Value, ca_pem: &str) -> usize {
    let encoded = base64::engine::general_purpose::STANDARD.encode(ca_pem.as_bytes());
    let mut count = 0;
    for config in client_configs(object) {
        if config.get("service").is_some() && config.get("caBundle").is_some() {
            if let Some(config) = config.as_object_mut() {
                config.insert("caBundle".to_owned(), json!(encoded));
                count += 1;
            }
        }
    }
    count
}

/// The namespace of the first service client config with a `caBundle`.
pub(crate) fn injected_service_namespace(object: &mut Value) -> Option<String> {
    client_configs(object).into_iter().find_map(|config| {
        config.get("caBundle")?;
        Some(config.pointer("/service/namespace")?.as_str()?.to_owned())
    })
}

/// A DNS-1123 subdomain: at most 253 characters, dot-separated labels of lowercase letters, digits
/// and `-` that start and end with a letter or digit.
pub(crate) fn is_dns1123_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(webhooks: Value, modes: &[&str]) -> Result<Vec<WebhookDefinition>, String> {
        let spec = json!({"webhookdefinitions": webhooks});
        let deployments: BTreeSet<&str> = ["op"].into();
        let owned: BTreeSet<&str> = ["a.example.com", "b.example.com"].into();
        let modes: BTreeSet<&str> = modes.iter().copied().collect();
        read_webhooks(&spec, "CSV", &deployments, &owned, &modes).map_err(|e| e.to_string())
    }

    fn webhook(kind: &str, name: &str) -> Value {
        json!({"type": kind, "generateName": name, "deploymentName": "op", "containerPort": 443,
               "admissionReviewVersions": ["v1"], "sideEffects": "None"})
    }

    #[test]
    fn olm_v1_rules_for_webhooks() {
        let all = ["AllNamespaces"];
        assert!(check(json!([webhook(VALIDATING, "v.example.com")]), &all).is_ok());
        assert!(check(json!(null), &all).unwrap().is_empty());

        let error = check(json!([webhook("Bogus", "v.example.com")]), &all).unwrap_err();
        assert!(error.contains("has type \"Bogus\""), "{error}");
        let error = check(json!([webhook(VALIDATING, "Not_DNS")]), &all).unwrap_err();
        assert!(error.contains("invalid name 'Not_DNS'"), "{error}");
        let twice = json!([
            webhook(MUTATING, "m.example.com"),
            webhook(MUTATING, "m.example.com")
        ]);
        let error = check(twice, &all).unwrap_err();
        assert!(
            error.contains("duplicate webhook 'm.example.com'"),
            "{error}"
        );
        // The same name with another type is fine.
        let both = json!([
            webhook(MUTATING, "w.example.com"),
            webhook(VALIDATING, "w.example.com")
        ]);
        assert!(check(both, &all).is_ok());

        let mut star = webhook(VALIDATING, "v.example.com");
        star["rules"] = json!([{"apiGroups": ["*"], "resources": ["pods"]}]);
        let error = check(json!([star]), &all).unwrap_err();
        assert!(
            error.contains("cannot reference API group \"*\""),
            "{error}"
        );
        let mut configs = webhook(VALIDATING, "v.example.com");
        configs["rules"] = json!([{"apiGroups": ["admissionregistration.k8s.io"],
                                   "resources": ["ValidatingWebhookConfigurations"]}]);
        let error = check(json!([configs]), &all).unwrap_err();
        assert!(error.contains("cannot reference resource"), "{error}");

        let mut conversion = webhook(CONVERSION, "c.example.com");
        conversion["conversionCRDs"] = json!(["a.example.com"]);
        assert!(check(json!([conversion.clone()]), &all).is_ok());
        let error = check(
            json!([conversion.clone()]),
            &["AllNamespaces", "OwnNamespace"],
        )
        .unwrap_err();
        assert!(
            error.contains("only supported for bundles that only support AllNamespaces"),
            "{error}"
        );
        let mut other = webhook(CONVERSION, "d.example.com");
        other["conversionCRDs"] = json!(["a.example.com"]);
        let error = check(json!([conversion, other]), &all).unwrap_err();
        assert!(
            error.contains("reference same custom resource definition 'a.example.com'"),
            "{error}"
        );
        let mut foreign = webhook(CONVERSION, "c.example.com");
        foreign["conversionCRDs"] = json!(["z.example.com"]);
        let error = check(json!([foreign]), &all).unwrap_err();
        assert!(error.contains("'z.example.com' not owned"), "{error}");
    }

    #[test]
    fn service_ports_are_distinct_and_sorted() {
        let mut a = webhook(VALIDATING, "a.example.com");
        a["containerPort"] = json!(8443);
        let mut b = webhook(MUTATING, "b.example.com");
        b["targetPort"] = json!(9443);
        let c = webhook(CONVERSION, "c.example.com");
        let mut none = webhook(MUTATING, "d.example.com");
        none.as_object_mut().unwrap().remove("containerPort");
        let webhooks = check(json!([a, b, c, none]), &["AllNamespaces"]).unwrap();
        let services = services(
            &webhooks,
            &[("op".to_owned(), Some(json!({"app": "op"})))],
            "ns",
        );
        assert_eq!(services.len(), 1);
        assert_eq!(
            services[0]["spec"],
            json!({"ports": [
                {"name": "443", "port": 443, "targetPort": 443},
                {"name": "443", "port": 443, "targetPort": 9443},
                {"name": "8443", "port": 8443, "targetPort": 8443}],
                "selector": {"app": "op"}})
        );
    }

    #[test]
    fn names_follow_olm() {
        assert_eq!(
            service_name("webhook-operator-controller-manager"),
            "webhook-operator-controller-manager-service"
        );
        assert_eq!(service_name("a.b"), "a-b-service");
        let long = "x".repeat(70);
        let service = service_name(&long);
        assert_eq!(service.len(), 63);
        assert!(service.ends_with("-service"));
        assert_eq!(certificate_name(&service).len(), 63);
    }
}
