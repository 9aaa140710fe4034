//! Each registry-v1 rule that makes OLM v1 refuse a bundle, with a small bundle under
//! `testdata/registry-v1/` and the error it must produce.

use std::path::PathBuf;

use pallet_formats::{render, Format, RegistryV1Rule, RenderConfig, RenderError, Scope};

fn bundle(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/registry-v1")
        .join(name)
}

fn config(watch_namespace: &str) -> RenderConfig {
    RenderConfig {
        install_namespace: "widgets".to_owned(),
        watch_namespace: watch_namespace.to_owned(),
        ..RenderConfig::default()
    }
}

/// Renders `name`, expects a rejection by `rule`, and checks the full message.
fn assert_rejected(name: &str, watch_namespace: &str, rule: RegistryV1Rule, message: &str) {
    let error = match render(Format::RegistryV1, &bundle(name), &config(watch_namespace)) {
        Ok(rendered) => panic!(
            "{name}: expected rejection by {rule}, rendered {} objects",
            rendered.objects.len()
        ),
        Err(error) => error,
    };
    assert_eq!(error.registry_v1_rule(), Some(rule), "{name}: {error}");
    assert_eq!(error.to_string(), message, "{name}");
    assert_eq!(error.category(), "UnsupportedBundle");
}

#[test]
fn valid_bundle_renders() {
    let rendered = render(Format::RegistryV1, &bundle("valid"), &config("")).unwrap();
    let kinds: Vec<(&str, &str, Option<&str>)> = rendered
        .objects
        .iter()
        .map(|entry| {
            (
                entry.object.kind(),
                entry.object.name(),
                entry.object.namespace(),
            )
        })
        .collect();
    // AllNamespaces: the service account, the cluster permission and the promoted namespaced
    // permission (a ClusterRole and binding each), the CRD, the ConfigMap, the deployment.
    let kind_names: Vec<&str> = kinds.iter().map(|(kind, _, _)| *kind).collect();
    assert_eq!(
        kind_names,
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "ClusterRole",
            "ClusterRoleBinding",
            "CustomResourceDefinition",
            "ConfigMap",
            "Deployment"
        ]
    );
    assert_eq!(
        kinds[0],
        ("ServiceAccount", "widget-operator", Some("widgets"))
    );
    assert_eq!(
        kinds[6],
        ("ConfigMap", "widget-config", Some("widgets")),
        "namespace is forced to the install namespace"
    );
    assert_eq!(kinds[7], ("Deployment", "widget-operator", Some("widgets")));
    assert!(rendered
        .objects
        .iter()
        .all(|entry| entry.scope != Scope::Unknown));
    let deployment = rendered.objects[7].object.body();
    let annotations = &deployment["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["olm.targetNamespaces"], "");
    assert_eq!(annotations["olm.operatorNamespace"], "widgets");
    assert_eq!(deployment["spec"]["revisionHistoryLimit"], 1);
}

#[test]
fn install_namespace_defaults_to_package_system() {
    let config = RenderConfig::default();
    let rendered = render(Format::RegistryV1, &bundle("valid"), &config).unwrap();
    assert_eq!(rendered.install_namespace, "widget-operator-system");
}

#[test]
fn no_csv() {
    assert_rejected(
        "no-csv",
        "",
        RegistryV1Rule::NoClusterServiceVersion,
        "registry-v1 bundle rejected (csv-required): manifests: no ClusterServiceVersion (operators.coreos.com) found in manifests/",
    );
}

#[test]
fn multinamespace_only() {
    assert_rejected(
        "multinamespace-only",
        "",
        RegistryV1Rule::MultiNamespaceOnly,
        "registry-v1 bundle rejected (no-multinamespace-only): ClusterServiceVersion widget-operator.v1.0.0: the CSV supports only the MultiNamespace install mode, which OLM v1 cannot install",
    );
}

#[test]
fn owned_apiservice() {
    assert_rejected(
        "owned-apiservice",
        "",
        RegistryV1Rule::OwnedApiServices,
        "registry-v1 bundle rejected (no-owned-apiservices): ClusterServiceVersion widget-operator.v1.0.0: owned APIService definitions are not supported (first: v1.metrics.example.com)",
    );
}

#[test]
fn dependency_in_properties_file() {
    assert_rejected(
        "dependency-properties",
        "",
        RegistryV1Rule::Dependencies,
        "registry-v1 bundle rejected (no-dependencies): metadata/properties.yaml: property of type olm.package.required declares a dependency; OLM v1 does not resolve dependencies",
    );
}

#[test]
fn dependency_constraint() {
    assert_rejected(
        "dependency-constraint",
        "",
        RegistryV1Rule::Dependencies,
        "registry-v1 bundle rejected (no-dependencies): metadata/properties.yaml: property of type olm.constraint declares a dependency; OLM v1 does not resolve dependencies",
    );
}

#[test]
fn dependency_in_csv_annotation() {
    assert_rejected(
        "dependency-csv-annotation",
        "",
        RegistryV1Rule::Dependencies,
        "registry-v1 bundle rejected (no-dependencies): ClusterServiceVersion widget-operator.v1.0.0 annotation olm.properties: property of type olm.gvk.required declares a dependency; OLM v1 does not resolve dependencies",
    );
}

#[test]
fn dependencies_file() {
    assert_rejected(
        "dependencies-file",
        "",
        RegistryV1Rule::Dependencies,
        "registry-v1 bundle rejected (no-dependencies): metadata/dependencies.yaml: the bundle declares dependencies (first of type olm.package); OLM v1 does not resolve dependencies",
    );
}

/// Webhooks are rendered; one that names a Deployment the CSV lacks is refused, as OLM v1 does.
#[test]
fn webhook_of_a_missing_deployment() {
    assert_rejected(
        "webhooks",
        "",
        RegistryV1Rule::Webhooks,
        "registry-v1 bundle rejected (valid-webhooks): ClusterServiceVersion widget-operator.v1.0.0: webhook of type 'ValidatingAdmissionWebhook' with name 'vwidget.example.com' references non-existent deployment 'missing-operator'",
    );
}

#[test]
fn unsupported_kind() {
    assert_rejected(
        "unsupported-kind",
        "",
        RegistryV1Rule::UnsupportedKind,
        "registry-v1 bundle rejected (supported-kinds): Deployment sneaky (manifests/extra-deployment.json): OLM does not allow this kind in a bundle",
    );
}

#[test]
fn owned_crd_missing() {
    assert_rejected(
        "owned-crd-missing",
        "",
        RegistryV1Rule::OwnedCrdMissing,
        "registry-v1 bundle rejected (owned-crds-present): ClusterServiceVersion widget-operator.v1.0.0: owned CustomResourceDefinition widgets.example.com is not in the bundle",
    );
}

#[test]
fn duplicate_deployment() {
    assert_rejected(
        "duplicate-deployment",
        "",
        RegistryV1Rule::DuplicateDeployment,
        "registry-v1 bundle rejected (unique-deployment-names): ClusterServiceVersion widget-operator.v1.0.0: install strategy deployment widget-operator is defined more than once",
    );
}

#[test]
fn duplicate_crd() {
    assert_rejected(
        "duplicate-crd",
        "",
        RegistryV1Rule::DuplicateCrd,
        "registry-v1 bundle rejected (unique-crd-names): CustomResourceDefinition widgets.example.com (manifests/crd-1.json): the bundle contains this CRD more than once",
    );
}

#[test]
fn subdirectory() {
    assert_rejected(
        "subdirectory",
        "",
        RegistryV1Rule::NoSubdirectories,
        "registry-v1 bundle rejected (flat-manifests): manifests/extra: subdirectories are not allowed in manifests/",
    );
}

#[test]
fn single_namespace_needs_support() {
    assert_rejected(
        "all-namespaces-only",
        "team-a",
        RegistryV1Rule::InstallModeUnsupported,
        "registry-v1 bundle rejected (install-mode-supported): ClusterServiceVersion widget-operator.v1.0.0: watch namespace \"team-a\" with install namespace \"widgets\" needs install mode SingleNamespace, but the CSV supports [AllNamespaces]",
    );
}

#[test]
fn own_namespace_needs_support() {
    assert_rejected(
        "all-namespaces-only",
        "widgets",
        RegistryV1Rule::InstallModeUnsupported,
        "registry-v1 bundle rejected (install-mode-supported): ClusterServiceVersion widget-operator.v1.0.0: watch namespace \"widgets\" with install namespace \"widgets\" needs install mode OwnNamespace, but the CSV supports [AllNamespaces]",
    );
}

#[test]
fn invalid_watch_namespace() {
    let error = render(
        Format::RegistryV1,
        &bundle("valid"),
        &config("Not_A_Namespace"),
    )
    .unwrap_err();
    assert_eq!(
        error.registry_v1_rule(),
        Some(RegistryV1Rule::InvalidNamespace),
        "{error}"
    );
    assert!(matches!(error, RenderError::RegistryV1 { .. }));
}

#[test]
fn rendering_twice_is_byte_identical() {
    let first = render(Format::RegistryV1, &bundle("valid"), &config("team-a")).unwrap();
    let second = render(Format::RegistryV1, &bundle("valid"), &config("team-a")).unwrap();
    assert_eq!(first.canonical_form(), second.canonical_form());
    assert_eq!(first.digest(), second.digest());
}

#[test]
fn invalid_deployment_name() {
    assert_rejected(
        "invalid-deployment-name",
        "",
        RegistryV1Rule::InvalidDeploymentName,
        "registry-v1 bundle rejected (deployment-name-dns1123): ClusterServiceVersion widget-operator.v1.0.0: install strategy deployment name \"Widget_Operator\" is not a DNS-1123 subdomain",
    );
}
