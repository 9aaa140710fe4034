//! Conformance: the registry-v1 renderer produces the same objects as OLM v1's reference renderer for
//! the argocd-operator bundle in `shared/conformance/registry-v1` (same set, same fields and values,
//! generated names included; order and key order do not matter).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pallet_formats::{
    parse_manifests, render, CertificateProvider, Format, ObjectKey, RegistryV1Options,
    RenderConfig,
};
use serde_json::{json, Value};

const CONFORMANCE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/conformance/registry-v1"
);

/// `shared/conformance/registry-v1` beside the checkout, or `$PALLET_CONFORMANCE_DIR` (for a
/// checkout elsewhere, e.g. a git worktree).
fn conformance_dir() -> PathBuf {
    let dir = std::env::var_os("PALLET_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(CONFORMANCE));
    assert!(
        dir.join("README.md").is_file(),
        "conformance data not found at {}: clone the repo with shared/ as a sibling of it",
        dir.display()
    );
    dir
}

fn expected_objects(dir: &Path) -> BTreeMap<ObjectKey, Value> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    let mut objects = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for object in parse_manifests(&file.display().to_string(), &text).unwrap() {
            let key = object.key();
            assert!(
                objects
                    .insert(key.clone(), Value::Object(object.into_body()))
                    .is_none(),
                "expected data has {key} twice"
            );
        }
    }
    objects
}

fn check_case(case: &str, install_namespace: &str, watch_namespace: &str) {
    let config = RenderConfig {
        install_namespace: install_namespace.to_owned(),
        watch_namespace: watch_namespace.to_owned(),
        ..RenderConfig::default()
    };
    let count = check_against_golden("argocd-operator.v0.6.0", case, &config);
    assert_eq!(count, 14, "{case}: object count");
}

/// Renders `bundle` with `config` and compares with `expected/<bundle>/<case>`; returns the count.
///
/// One normalisation: OLM's renderer writes the install namespace on the (cluster-scoped) webhook
/// configurations, which the API server drops on a cluster-scoped kind; pallet writes none (its
/// apply step refuses a namespace on a cluster-scoped object), so the expected ones lose it.
fn check_against_golden(bundle: &str, case: &str, config: &RenderConfig) -> usize {
    check_tree_against_golden(&conformance_dir().join(bundle), bundle, case, config)
}

/// [`check_against_golden`] for the bundle tree at `tree` (a modified copy of `bundle`).
fn check_tree_against_golden(
    tree: &Path,
    bundle: &str,
    case: &str,
    config: &RenderConfig,
) -> usize {
    let root = conformance_dir();
    let rendered = render(Format::RegistryV1, tree, config)
        .unwrap_or_else(|error| panic!("{case}: render failed: {error}"));
    let mut actual = BTreeMap::new();
    for entry in &rendered.objects {
        let key = entry.object.key();
        assert!(
            actual
                .insert(key.clone(), Value::Object(entry.object.body().clone()))
                .is_none(),
            "{case}: rendered {key} twice"
        );
    }
    let mut expected = expected_objects(&root.join("expected").join(bundle).join(case));
    let expected: BTreeMap<ObjectKey, Value> = std::mem::take(&mut expected)
        .into_values()
        .map(|mut body| {
            let kind = body["kind"].as_str().unwrap_or_default().to_owned();
            if kind.ends_with("WebhookConfiguration") {
                body["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("namespace");
            }
            let object = pallet_formats::Object::new(
                body.clone(),
                pallet_formats::Origin {
                    file: "expected".to_owned(),
                    document: 0,
                    line: 1,
                },
            )
            .unwrap();
            (object.key(), body)
        })
        .collect();

    let missing: Vec<_> = expected
        .keys()
        .filter(|key| !actual.contains_key(key))
        .collect();
    let extra: Vec<_> = actual
        .keys()
        .filter(|key| !expected.contains_key(key))
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{case}: object sets differ\n missing: {missing:?}\n extra: {extra:?}"
    );
    for (key, expected_body) in &expected {
        let actual_body = &actual[key];
        if let Some(difference) = first_difference(expected_body, actual_body, "") {
            panic!("{case}: {key} differs at {difference}");
        }
    }
    actual.len()
}

/// The first path where two JSON values differ, with both values there.
fn first_difference(expected: &Value, actual: &Value, path: &str) -> Option<String> {
    match (expected, actual) {
        (Value::Object(a), Value::Object(b)) => {
            // Keys of both sides, each once (visiting shared keys twice would be exponential in depth).
            for key in a.keys().chain(b.keys().filter(|key| !a.contains_key(*key))) {
                let child = format!("{path}.{key}");
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => {
                        if let Some(found) = first_difference(x, y, &child) {
                            return Some(found);
                        }
                    }
                    (x, y) => return Some(format!("{child}: expected {x:?}, got {y:?}")),
                }
            }
            None
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(index, (x, y))| first_difference(x, y, &format!("{path}[{index}]"))),
        (x, y) if x == y => None,
        (x, y) => Some(format!("{path}: expected {x}, got {y}")),
    }
}

#[test]
fn all_namespaces() {
    check_case("all-namespaces", "argocd-system", "");
}

#[test]
fn single_namespace() {
    check_case("single-namespace", "argocd-system", "argocd-watch");
}

#[test]
fn own_namespace() {
    check_case("own-namespace", "argocd-system", "argocd-system");
}

#[test]
fn argocd_render_is_deterministic() {
    let root = conformance_dir().join("argocd-operator.v0.6.0");
    let config = RenderConfig {
        install_namespace: "argocd-system".to_owned(),
        watch_namespace: "argocd-watch".to_owned(),
        ..RenderConfig::default()
    };
    let first = render(Format::RegistryV1, &root, &config).unwrap();
    let second = render(Format::RegistryV1, &root, &config).unwrap();
    assert_eq!(first.canonical_form(), second.canonical_form());
    assert_eq!(first.digest(), second.digest());
    let order = |rendered: &pallet_formats::Rendered| -> Vec<ObjectKey> {
        rendered
            .objects
            .iter()
            .map(|entry| entry.object.key())
            .collect()
    };
    assert_eq!(order(&first), order(&second), "render order is stable too");
    // The watch namespace changes the Role namespaces, so the digest.
    let own = RenderConfig {
        watch_namespace: "argocd-system".to_owned(),
        ..config
    };
    assert_ne!(
        first.digest(),
        render(Format::RegistryV1, &root, &own).unwrap().digest()
    );
}

/// `config/with-deploymentconfig-options.yaml`'s `deploymentConfig` merged into the Deployment.
#[test]
fn with_deploymentconfig_options() {
    let text = std::fs::read_to_string(
        conformance_dir().join("config/with-deploymentconfig-options.yaml"),
    )
    .unwrap();
    let file: Value = serde_saphyr::from_str(&text).unwrap();
    let config = RenderConfig {
        install_namespace: "argocd-system".to_owned(),
        registry_v1: RegistryV1Options {
            deployment_config: Some(file["deploymentConfig"].clone()),
            ..RegistryV1Options::default()
        },
        ..RenderConfig::default()
    };
    let count = check_against_golden(
        "argocd-operator.v0.6.0",
        "with-deploymentconfig-options",
        &config,
    );
    assert_eq!(count, 14);
}

/// Validating, mutating and conversion webhooks, with no certificate provider.
#[test]
fn all_webhook_types() {
    let config = RenderConfig {
        install_namespace: "webhook-system".to_owned(),
        ..RenderConfig::default()
    };
    let count = check_against_golden("webhook-operator.v0.0.5", "all-webhook-types", &config);
    assert_eq!(count, 10);
}

fn render_webhook_operator(provider: CertificateProvider) -> pallet_formats::Rendered {
    let config = RenderConfig {
        install_namespace: "webhook-system".to_owned(),
        registry_v1: RegistryV1Options {
            certificate_provider: provider,
            ..RegistryV1Options::default()
        },
        ..RenderConfig::default()
    };
    render(
        Format::RegistryV1,
        &conformance_dir().join("webhook-operator.v0.0.5"),
        &config,
    )
    .unwrap()
}

fn find(rendered: &pallet_formats::Rendered, kind: &str) -> Vec<Value> {
    rendered
        .objects
        .iter()
        .filter(|entry| entry.object.kind() == kind)
        .map(|entry| Value::Object(entry.object.body().clone()))
        .collect()
}

/// The cert-manager provider, field by field as operator-controller's
/// `rukpak/render/certproviders/certmanager.go` writes them (Issuer, Certificate, annotations)
/// and `generators/certmutator.go` mounts them.
#[test]
fn cert_manager_provider_objects() {
    let rendered = render_webhook_operator(CertificateProvider::CertManager);
    let service = "webhook-operator-controller-manager-service";
    let cert = "webhook-operator-controller-manager-service-cert";
    // ObjectNameForBaseAndSuffix cuts the base so that the name fits 63 characters.
    let issuers = find(&rendered, "Issuer");
    assert_eq!(issuers.len(), 1);
    assert_eq!(
        issuers[0],
        json!({"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
               "metadata": {"name": "webhook-operator-controller-manager-service-c-selfsigned-issuer",
                            "namespace": "webhook-system"},
               "spec": {"selfSigned": {}}})
    );
    let certificates = find(&rendered, "Certificate");
    assert_eq!(certificates.len(), 1);
    let certificate = &certificates[0];
    assert_eq!(certificate["apiVersion"], "cert-manager.io/v1");
    assert_eq!(
        certificate["metadata"],
        json!({"name": cert, "namespace": "webhook-system"})
    );
    let spec = &certificate["spec"];
    assert_eq!(spec["secretName"], cert);
    assert_eq!(spec["commonName"], format!("{service}.webhook-system"));
    assert_eq!(spec["usages"], json!(["server auth"]));
    assert!(spec.get("isCA").is_none(), "isCA false is omitted");
    assert_eq!(
        spec["dnsNames"],
        json!([
            format!("{service}.webhook-system"),
            format!("{service}.webhook-system.svc"),
            format!("{service}.webhook-system.svc.cluster.local")
        ])
    );
    assert_eq!(
        spec["issuerRef"],
        json!({"name": "webhook-operator-controller-manager-service-c-selfsigned-issuer"})
    );
    assert_eq!(spec["duration"], "17520h0m0s");
    assert_eq!(spec["renewBefore"], "24h0m0s");
    assert_eq!(spec.as_object().unwrap().len(), 7, "{spec}");

    let inject = format!("webhook-system/{cert}");
    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "CustomResourceDefinition",
    ] {
        for object in find(&rendered, kind) {
            assert_eq!(
                object["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
                inject.as_str(),
                "{kind}"
            );
        }
    }
    check_certificate_volumes(&rendered, cert);
    assert!(rendered.webhook_certificates.is_empty());
}

/// Both providers mount the certificate Secret as operator-controller's certmutator does.
fn check_certificate_volumes(rendered: &pallet_formats::Rendered, cert: &str) {
    let deployment = &find(rendered, "Deployment")[0];
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"],
        json!([
            {"name": "webhook-cert", "secret": {"secretName": cert, "items": [
                {"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]}},
            {"name": "apiservice-cert", "secret": {"secretName": cert, "items": [
                {"key": "tls.crt", "path": "apiserver.crt"}, {"key": "tls.key", "path": "apiserver.key"}]}}
        ]),
        "the bundle's own volume at the serving-certs path is replaced"
    );
    assert_eq!(
        pod["containers"][0]["volumeMounts"],
        json!([
            {"name": "webhook-cert", "mountPath": "/tmp/k8s-webhook-server/serving-certs"},
            {"name": "apiservice-cert", "mountPath": "/apiserver.local.config/certificates"}
        ])
    );
}

/// BuiltIn: nothing for cert-manager; the certificates to issue are listed and the caBundle is
/// injected afterwards into the admission webhooks and the conversion webhook.
#[test]
fn builtin_provider_lists_certificates_and_takes_a_ca_bundle() {
    let mut rendered = render_webhook_operator(CertificateProvider::BuiltIn);
    assert!(find(&rendered, "Issuer").is_empty() && find(&rendered, "Certificate").is_empty());
    let cert = "webhook-operator-controller-manager-service-cert";
    check_certificate_volumes(&rendered, cert);
    assert_eq!(rendered.webhook_certificates.len(), 1);
    let wanted = &rendered.webhook_certificates[0];
    assert_eq!(wanted.secret_name, cert);
    assert_eq!(
        wanted.service_name,
        "webhook-operator-controller-manager-service"
    );
    assert_eq!(wanted.namespace, "webhook-system");
    assert_eq!(wanted.dns_names.len(), 3);
    let before = rendered.digest();
    let set = pallet_formats::registry_v1::inject_ca_bundle(&mut rendered, "PEM");
    assert_eq!(set, 3, "validating, mutating and conversion client configs");
    assert_ne!(rendered.digest(), before);
    let encoded = "UEVN"; // base64("PEM")
    assert_eq!(
        find(&rendered, "ValidatingWebhookConfiguration")[0]["webhooks"][0]["clientConfig"]
            ["caBundle"],
        encoded
    );
    assert_eq!(
        find(&rendered, "CustomResourceDefinition")[0]["spec"]["conversion"]["webhook"]
            ["clientConfig"]["caBundle"],
        encoded
    );

    // A stored revision re-applied after a renewal gets the current bundle where one was set.
    let mut stored = rendered.object_list();
    assert_eq!(
        pallet_formats::registry_v1::injected_service_namespace(&stored).as_deref(),
        Some("webhook-system")
    );
    assert_eq!(
        pallet_formats::registry_v1::replace_ca_bundles(&mut stored, "NEW"),
        3
    );
    let mut plain = render_webhook_operator(CertificateProvider::None).object_list();
    assert_eq!(
        pallet_formats::registry_v1::injected_service_namespace(&plain),
        None
    );
    assert_eq!(
        pallet_formats::registry_v1::replace_ca_bundles(&mut plain, "NEW"),
        0,
        "no caBundle, nothing replaced"
    );
}

/// A copy of conformance bundle `bundle` in a temporary directory, to modify.
fn bundle_copy(bundle: &str) -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    let from = conformance_dir().join(bundle);
    for dir in ["manifests", "metadata"] {
        std::fs::create_dir_all(copy.path().join(dir)).unwrap();
        for entry in std::fs::read_dir(from.join(dir)).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), copy.path().join(dir).join(entry.file_name())).unwrap();
        }
    }
    copy
}

/// OLM v1 recognises the ClusterServiceVersion by its kind: one whose apiVersion names no group
/// renders as the golden does.
#[test]
fn csv_whose_api_version_has_no_group_is_recognised_by_kind() {
    let copy = bundle_copy("argocd-operator.v0.6.0");
    let csv = copy
        .path()
        .join("manifests/argocd-operator.v0.6.0.clusterserviceversion.yaml");
    let text = std::fs::read_to_string(&csv).unwrap();
    assert!(text.starts_with("apiVersion: operators.coreos.com/v1alpha1\n"));
    std::fs::write(
        &csv,
        text.replacen("operators.coreos.com/v1alpha1", "v1alpha1", 1),
    )
    .unwrap();
    let config = RenderConfig {
        install_namespace: "argocd-system".to_owned(),
        ..RenderConfig::default()
    };
    let count = check_tree_against_golden(
        copy.path(),
        "argocd-operator.v0.6.0",
        "all-namespaces",
        &config,
    );
    assert_eq!(count, 14);
}

/// A bundle shipping objects the conversion also generates: the webhook Service (as the
/// OpenTelemetry operator's bundle does) and the install strategy's ServiceAccount. OLM v1's
/// renderer emits both of each pair, the later one stays on the cluster: the generated Service
/// (the golden's), and the shipped ServiceAccount. Two shipped objects with one key stay
/// refused.
#[test]
fn shipped_object_named_like_a_generated_one_gives_way_in_render_order() {
    let copy = bundle_copy("webhook-operator.v0.0.5");
    let manifests = copy.path().join("manifests");
    std::fs::write(
        manifests.join("webhook-service.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: webhook-operator-controller-manager-service\n  labels: {shipped: \"true\"}\nspec:\n  ports: [{port: 443, protocol: TCP, targetPort: 9443}]\n  selector: {control-plane: controller-manager}\n",
    )
    .unwrap();
    std::fs::write(
        manifests.join("service-account.yaml"),
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: webhook-operator-controller-manager\nimagePullSecrets: [{name: registry}]\n",
    )
    .unwrap();
    let config = RenderConfig {
        install_namespace: "webhook-system".to_owned(),
        ..RenderConfig::default()
    };
    let rendered = render(Format::RegistryV1, copy.path(), &config).unwrap();
    let services = find(&rendered, "Service");
    assert_eq!(services.len(), 1, "{services:?}");
    assert!(
        services[0]["metadata"].get("labels").is_none(),
        "the generated Service is kept: {}",
        services[0]
    );
    assert_eq!(services[0]["spec"]["ports"][0]["name"], "443");
    let accounts = find(&rendered, "ServiceAccount");
    assert_eq!(
        accounts,
        [json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "webhook-operator-controller-manager", "namespace": "webhook-system"},
                "imagePullSecrets": [{"name": "registry"}]})],
        "the shipped ServiceAccount is kept"
    );
    // Everything else is the golden's.
    std::fs::remove_file(manifests.join("service-account.yaml")).unwrap();
    let count = check_tree_against_golden(
        copy.path(),
        "webhook-operator.v0.0.5",
        "all-webhook-types",
        &config,
    );
    assert_eq!(count, 10);

    // The same Service shipped twice is still a duplicate.
    std::fs::copy(
        manifests.join("webhook-service.yaml"),
        manifests.join("webhook-service-again.yaml"),
    )
    .unwrap();
    let error = render(Format::RegistryV1, copy.path(), &config).unwrap_err();
    assert_eq!(error.category(), "DuplicateObject", "{error}");
}
