//! The `registry-v1` format: an OLM bundle (`manifests/` + `metadata/annotations.yaml`) converted to
//! plain objects the way OLM v1 (operator-controller) converts it, so objects made by either can be
//! handed over without being recreated.
//!
//! Output, in this order: ServiceAccounts named by the CSV's permissions (sorted; `default` is never
//! generated), a Role and RoleBinding per permission in the target namespace (none in AllNamespaces
//! mode, where permissions become cluster permissions plus a rule to read namespaces), a ClusterRole and
//! ClusterRoleBinding per cluster permission, the bundle's CRDs as they are, its other manifests (with
//! the install namespace for namespaced kinds), and the CSV's deployments.
//!
//! Generated RBAC names are `<csv name>-<service account>` joined with `-` to the base-36 SHA-224 of the
//! permission entry as Go's `encoding/json` encodes it; the base is cut so that the name fits 63
//! characters. Like OLM, the cut happens only when base + hash is longer than 63, so a name can reach
//! 64 characters when base + hash is exactly 63.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::Path;

use serde_json::{json, Map, Value};

use crate::error::{RegistryV1Rule, RenderError, SourceLocation};
use crate::gojson;
use crate::object::{parse_manifests, Object, Origin};
use crate::plain::read_text;
use crate::registry_v1_config as deployment_config;
use crate::registry_v1_webhooks as webhooks;
use crate::scope::{builtin_scope, Scope};
use crate::{CertificateProvider, RenderConfig, Rendered, RenderedObject};

const MANIFESTS_DIR: &str = "manifests";
const PACKAGE_ANNOTATION: &str = "operators.operatorframework.io.bundle.package.v1";
const SUGGESTED_NAMESPACE_ANNOTATION: &str = "operatorframework.io/suggested-namespace";
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
const MAX_NAME_LENGTH: usize = 63;

/// Property types that declare dependencies, which OLM v1 cannot resolve.
const DEPENDENCY_PROPERTY_TYPES: &[&str] =
    &["olm.package.required", "olm.gvk.required", "olm.constraint"];

/// Kinds OLM accepts among a bundle's manifests besides CSV and CRDs, with whether OLM treats them as
/// namespaced (operator-registry's supported resources). OLM lists VerticalPodAutoscaler as not
/// namespaced; we report it as [`Scope::Unknown`] so the apply step asks discovery.
const SUPPORTED_KINDS: &[(&str, bool)] = &[
    ("ClusterRole", false),
    ("ClusterRoleBinding", false),
    ("Service", true),
    ("ServiceAccount", true),
    ("Role", true),
    ("RoleBinding", true),
    ("Secret", true),
    ("ConfigMap", true),
    ("PrometheusRule", true),
    ("ServiceMonitor", true),
    ("PodDisruptionBudget", true),
    ("PriorityClass", false),
    ("VerticalPodAutoscaler", false),
    ("ConsoleYAMLSample", false),
    ("ConsoleQuickStart", false),
    ("ConsoleCLIDownload", false),
    ("ConsoleLink", false),
    ("NetworkPolicy", true),
];

/// Install modes, as named in a CSV's `spec.installModes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum InstallMode {
    OwnNamespace,
    SingleNamespace,
    MultiNamespace,
    AllNamespaces,
}

impl InstallMode {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "OwnNamespace" => Some(Self::OwnNamespace),
            "SingleNamespace" => Some(Self::SingleNamespace),
            "MultiNamespace" => Some(Self::MultiNamespace),
            "AllNamespaces" => Some(Self::AllNamespaces),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::OwnNamespace => "OwnNamespace",
            Self::SingleNamespace => "SingleNamespace",
            Self::MultiNamespace => "MultiNamespace",
            Self::AllNamespaces => "AllNamespaces",
        }
    }
}

/// One rule of a CSV permission, with the fields Go's `rbacv1.PolicyRule` keeps.
#[derive(Debug, Clone, PartialEq)]
struct PolicyRule {
    verbs: Option<Vec<String>>,
    api_groups: Vec<String>,
    resources: Vec<String>,
    resource_names: Vec<String>,
    non_resource_urls: Vec<String>,
}

impl PolicyRule {
    /// Go-json of the rule: struct field order; `verbs` always written (null when absent), the other
    /// lists omitted when empty.
    fn write_go_json(&self, out: &mut String) {
        out.push_str("{\"verbs\":");
        gojson::write_string_list(self.verbs.as_deref(), out);
        for (name, list) in [
            ("apiGroups", &self.api_groups),
            ("resources", &self.resources),
            ("resourceNames", &self.resource_names),
            ("nonResourceURLs", &self.non_resource_urls),
        ] {
            if !list.is_empty() {
                out.push_str(",\"");
                out.push_str(name);
                out.push_str("\":");
                gojson::write_string_list(Some(list.as_slice()), out);
            }
        }
        out.push('}');
    }

    /// The rule as it appears in a Role or ClusterRole.
    fn to_value(&self) -> Value {
        let mut rule = Map::new();
        rule.insert(
            "verbs".to_owned(),
            match &self.verbs {
                Some(verbs) => json!(verbs),
                None => Value::Null,
            },
        );
        for (name, list) in [
            ("apiGroups", &self.api_groups),
            ("resources", &self.resources),
            ("resourceNames", &self.resource_names),
            ("nonResourceURLs", &self.non_resource_urls),
        ] {
            if !list.is_empty() {
                rule.insert(name.to_owned(), json!(list));
            }
        }
        Value::Object(rule)
    }
}

/// One entry of a CSV's `permissions` or `clusterPermissions`.
#[derive(Debug, Clone, PartialEq)]
struct Permission {
    service_account_name: String,
    rules: Option<Vec<PolicyRule>>,
}

impl Permission {
    /// What Go's `json.Encoder` writes for the permission struct, trailing newline included.
    fn go_json(&self) -> String {
        let mut out = String::from("{\"serviceAccountName\":");
        gojson::write_string(&self.service_account_name, &mut out);
        out.push_str(",\"rules\":");
        match &self.rules {
            None => out.push_str("null"),
            Some(rules) => {
                out.push('[');
                for (index, rule) in rules.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    rule.write_go_json(&mut out);
                }
                out.push(']');
            }
        }
        out.push_str("}\n");
        out
    }

    fn service_account(&self) -> &str {
        if self.service_account_name.is_empty() {
            "default"
        } else {
            &self.service_account_name
        }
    }

    fn rule_values(&self) -> Value {
        match &self.rules {
            Some(rules) => Value::Array(rules.iter().map(PolicyRule::to_value).collect()),
            None => Value::Null,
        }
    }
}

/// OLM's generated name: `<base>-<base36 sha224 of the Go-json of value>`, base cut to fit 63.
fn unique_name(base: &str, permission: &Permission) -> String {
    let hash = gojson::sha224_base36(permission.go_json().as_bytes());
    let mut base = base;
    if base.len() + hash.len() > MAX_NAME_LENGTH {
        let keep = MAX_NAME_LENGTH.saturating_sub(hash.len() + 1);
        // Names are ASCII in practice; cut at a char boundary anyway so a non-ASCII name cannot panic.
        let mut cut = keep.min(base.len());
        while !base.is_char_boundary(cut) {
            cut -= 1;
        }
        base = &base[..cut];
    }
    format!("{base}-{hash}")
}

fn reject(
    rule: RegistryV1Rule,
    object: impl Into<String>,
    message: impl Into<String>,
) -> RenderError {
    RenderError::RegistryV1 {
        rule,
        object: object.into(),
        message: message.into(),
    }
}

/// The parsed bundle.
struct Bundle {
    csv: Object,
    crds: Vec<Object>,
    others: Vec<Object>,
    package_name: String,
    /// Properties from `metadata/properties.yaml` (type, value).
    metadata_properties: Vec<Value>,
}

/// Objects rendered so far: body, origin, scope.
type Out = Vec<(Value, Origin, Scope)>;

/// Where a bundle is installed: the install namespace, and the namespace its operator watches
/// (empty: all namespaces).
struct Namespaces {
    install: String,
    target: String,
}

/// Renders an OLM registry+v1 bundle: the RBAC its install strategy asks for, the objects it
/// ships, then its Deployments and what its webhooks need.
pub fn render_registry_v1(tree: &Path, config: &RenderConfig) -> Result<Rendered, RenderError> {
    let bundle = load(tree)?;
    validate(&bundle)?;
    let csv_label = format!("ClusterServiceVersion {}", bundle.csv.name());
    let namespaces = namespaces(&bundle, config)?;
    let strategy = install_strategy_spec(&bundle.csv)?;
    let permissions = read_permissions(strategy, "permissions", &csv_label)?;
    let cluster_permissions = read_permissions(strategy, "clusterPermissions", &csv_label)?;
    let spec = csv_spec(&bundle.csv);
    let webhooks = webhooks::read_webhooks(
        spec,
        &csv_label,
        &strings_at(strategy, &["deployments"]).into_iter().collect(),
        &strings_at(spec, &["customresourcedefinitions", "owned"])
            .into_iter()
            .collect(),
        &supported_install_modes(&bundle.csv)
            .into_iter()
            .map(InstallMode::name)
            .collect(),
    )?;
    let mut out: Out = Vec::new();
    rbac_objects(
        &mut out,
        &bundle,
        &namespaces,
        permissions,
        cluster_permissions,
    );
    // The objects the bundle ships (CRDs and others), between the generated ones.
    let shipped_start = out.len();
    let provider = config.registry_v1.certificate_provider;
    shipped_objects(
        &mut out,
        &bundle,
        &webhooks,
        &namespaces,
        (provider, &csv_label),
    )?;
    let shipped = shipped_start..out.len();
    let webhook_certificates = workload_objects(
        &mut out,
        &bundle,
        (strategy, &webhooks),
        &namespaces,
        config,
    )?;
    Ok(Rendered {
        objects: without_shadowed(out, &shipped)?,
        install_namespace: namespaces.install,
        webhook_certificates,
    })
}

/// The install namespace (the configured one, else the CSV's suggested one, else
/// `<package>-system`) and the target namespace its install modes allow.
fn namespaces(bundle: &Bundle, config: &RenderConfig) -> Result<Namespaces, RenderError> {
    let install = if !config.install_namespace.is_empty() {
        config.install_namespace.clone()
    } else if let Some(suggested) = annotation(&bundle.csv, SUGGESTED_NAMESPACE_ANNOTATION) {
        suggested.to_owned()
    } else {
        format!("{}-system", bundle.package_name)
    };
    check_namespace_name(&install, "install namespace")?;
    if !config.watch_namespace.is_empty() {
        check_namespace_name(&config.watch_namespace, "watch namespace")?;
    }
    let target = check_install_mode(&bundle.csv, &install, &config.watch_namespace)?;
    Ok(Namespaces { install, target })
}

/// The ServiceAccounts of the install strategy's permissions (but the namespace's default
/// one), and their Roles, ClusterRoles and bindings. Watching all namespaces, OLM promotes
/// namespaced permissions to cluster permissions that may also read namespaces.
fn rbac_objects(
    out: &mut Out,
    bundle: &Bundle,
    namespaces: &Namespaces,
    permissions: Vec<Permission>,
    mut cluster_permissions: Vec<Permission>,
) {
    let csv_name = bundle.csv.name();
    let origin = bundle.csv.origin();
    let install_namespace = &namespaces.install;
    let accounts: BTreeSet<&str> = permissions
        .iter()
        .chain(cluster_permissions.iter())
        .map(Permission::service_account)
        .filter(|name| *name != "default")
        .collect();
    for account in accounts {
        out.push((
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": account, "namespace": install_namespace}}),
            origin.clone(),
            Scope::Namespaced,
        ));
    }
    let subject = |account: &str| json!([{"kind": "ServiceAccount", "name": account, "namespace": install_namespace}]);
    if namespaces.target.is_empty() {
        for permission in &permissions {
            let mut promoted = permission.clone();
            promoted
                .rules
                .get_or_insert_with(Vec::new)
                .push(PolicyRule {
                    verbs: Some(vec![
                        "get".to_owned(),
                        "list".to_owned(),
                        "watch".to_owned(),
                    ]),
                    api_groups: vec![String::new()],
                    resources: vec!["namespaces".to_owned()],
                    resource_names: Vec::new(),
                    non_resource_urls: Vec::new(),
                });
            cluster_permissions.push(promoted);
        }
    } else {
        for permission in &permissions {
            let account = permission.service_account();
            let name = unique_name(&format!("{csv_name}-{account}"), permission);
            let target_namespace = &namespaces.target;
            out.push((
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                       "metadata": {"name": name, "namespace": target_namespace},
                       "rules": permission.rule_values()}),
                origin.clone(),
                Scope::Namespaced,
            ));
            out.push((
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                       "metadata": {"name": name, "namespace": target_namespace},
                       "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": name},
                       "subjects": subject(account)}),
                origin.clone(),
                Scope::Namespaced,
            ));
        }
    }
    for permission in &cluster_permissions {
        let account = permission.service_account();
        let name = unique_name(&format!("{csv_name}-{account}"), permission);
        out.push((
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": name}, "rules": permission.rule_values()}),
            origin.clone(),
            Scope::Cluster,
        ));
        out.push((
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": name},
                   "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
                   "subjects": subject(account)}),
            origin.clone(),
            Scope::Cluster,
        ));
    }
}

/// The objects the bundle ships: its CRDs (wired to their conversion webhooks) and the other
/// supported kinds, namespaced ones in the install namespace.
fn shipped_objects(
    out: &mut Out,
    bundle: &Bundle,
    webhooks: &[webhooks::WebhookDefinition],
    namespaces: &Namespaces,
    (provider, csv_label): (CertificateProvider, &str),
) -> Result<(), RenderError> {
    let mut crds: Vec<Value> = Vec::with_capacity(bundle.crds.len());
    for crd in &bundle.crds {
        let mut body = crd.body().clone();
        // OLM reads CRDs into Go types, whose metadata drops a null creationTimestamp.
        if let Some(Value::Object(metadata)) = body.get_mut("metadata") {
            if metadata.get("creationTimestamp") == Some(&Value::Null) {
                metadata.remove("creationTimestamp");
            }
        }
        crds.push(Value::Object(body));
    }
    webhooks::check_conversion_crds(webhooks, &crds, csv_label)?;
    webhooks::wire_conversion(webhooks, &mut crds, &namespaces.install, provider);
    for (body, crd) in crds.into_iter().zip(&bundle.crds) {
        out.push((body, crd.origin().clone(), Scope::Cluster));
    }
    for other in &bundle.others {
        let namespaced = SUPPORTED_KINDS
            .iter()
            .find(|(kind, _)| *kind == other.kind())
            .map(|(_, namespaced)| *namespaced)
            .unwrap_or(false);
        let mut object = other.clone();
        let scope = if namespaced {
            object.set_namespace(&namespaces.install);
            Scope::Namespaced
        } else {
            builtin_scope(other.group(), other.kind()).unwrap_or(Scope::Unknown)
        };
        out.push((
            Value::Object(object.into_body()),
            other.origin().clone(),
            scope,
        ));
    }
    Ok(())
}

/// The install strategy's Deployments (with the configured deployment config and the webhook
/// certificates' volumes), the webhook configurations and Services, and what the certificate
/// provider needs: cert-manager objects, or the certificates the agent issues (returned).
fn workload_objects(
    out: &mut Out,
    bundle: &Bundle,
    (strategy, webhooks): (&Value, &[webhooks::WebhookDefinition]),
    namespaces: &Namespaces,
    config: &RenderConfig,
) -> Result<Vec<crate::WebhookCertificate>, RenderError> {
    let origin = bundle.csv.origin();
    let options = &config.registry_v1;
    let provider = options.certificate_provider;
    let (install_namespace, target_namespace) = (&namespaces.install, &namespaces.target);
    let csv_annotations = csv_annotations(bundle)?;
    for mut deployment in deployments(
        &bundle.csv,
        strategy,
        &csv_annotations,
        install_namespace,
        target_namespace,
    )? {
        if let Some(deployment_config) = &options.deployment_config {
            deployment_config::apply_deployment_config(&mut deployment, deployment_config);
        }
        webhooks::add_certificate_volumes(webhooks, &mut deployment, provider);
        out.push((deployment, origin.clone(), Scope::Namespaced));
    }
    for configuration in
        webhooks::webhook_configurations(webhooks, install_namespace, target_namespace, provider)
    {
        out.push((configuration, origin.clone(), Scope::Cluster));
    }
    let selectors: Vec<(String, Option<Value>)> = strategy
        .get("deployments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|deployment| {
            (
                deployment
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                deployment.pointer("/spec/selector/matchLabels").cloned(),
            )
        })
        .collect();
    for service in webhooks::services(webhooks, &selectors, install_namespace) {
        out.push((service, origin.clone(), Scope::Namespaced));
    }
    Ok(match provider {
        CertificateProvider::CertManager => {
            for object in webhooks::cert_manager_objects(webhooks, install_namespace) {
                out.push((object, origin.clone(), Scope::Namespaced));
            }
            Vec::new()
        }
        CertificateProvider::BuiltIn => webhooks::builtin_certificates(webhooks, install_namespace),
        CertificateProvider::None => Vec::new(),
    })
}

/// The rendered objects, each key once. A bundle may ship an object the conversion also
/// generates (the webhook Service, a ServiceAccount of the install strategy): OLM v1's renderer
/// emits both, in this order, and applying them in that order leaves the later one on the
/// cluster, so the later one is kept (the generated Service, which the webhook configurations
/// and the certificate provider rely on, wins over a shipped one; a shipped ServiceAccount
/// over the generated one). The same key twice among the shipped objects, or among the
/// generated ones, is refused. `shipped` is the index range of the objects from the bundle's
/// files.
fn without_shadowed(
    out: Vec<(Value, Origin, Scope)>,
    shipped: &std::ops::Range<usize>,
) -> Result<Vec<RenderedObject>, RenderError> {
    let mut rendered: Vec<Option<RenderedObject>> = Vec::with_capacity(out.len());
    let mut seen: HashMap<crate::object::ObjectKey, usize> = HashMap::new();
    for (index, (body, origin, scope)) in out.into_iter().enumerate() {
        let object = Object::new(body, origin)?;
        let key = object.key();
        if let Some(&first) = seen.get(&key) {
            if shipped.contains(&first) == shipped.contains(&index) {
                let first_at = rendered[first]
                    .as_ref()
                    .map(|entry| entry.object.origin().location());
                return Err(RenderError::DuplicateObject {
                    object: key.to_string(),
                    first: Box::new(first_at.unwrap_or_else(|| object.origin().location())),
                    second: Box::new(object.origin().location()),
                });
            }
            rendered[first] = None;
        }
        seen.insert(key, index);
        rendered.push(Some(RenderedObject { object, scope }));
    }
    Ok(rendered.into_iter().flatten().collect())
}

/// Replaces every `caBundle` already set on a webhook client config among `objects` (a stored
/// revision rendered with the BuiltIn provider) with `ca_pem`, so an older revision re-applied
/// after a renewal trusts the current CA. Returns how many it replaced.
pub fn replace_ca_bundles(objects: &mut [Object], ca_pem: &str) -> usize {
    objects
        .iter_mut()
        .map(|object| with_value(object, |value| webhooks::replace_ca_bundles(value, ca_pem)))
        .sum()
}

/// The namespace of the webhook Services whose `caBundle` is set among `objects`, if any.
pub fn injected_service_namespace(objects: &[Object]) -> Option<String> {
    objects.iter().find_map(|object| {
        let mut value = Value::Object(object.body().clone());
        webhooks::injected_service_namespace(&mut value)
    })
}

/// Runs `edit` on the object's body as a JSON value.
fn with_value<T>(object: &mut Object, edit: impl FnOnce(&mut Value) -> T) -> T {
    let body = object.body_mut();
    let mut value = Value::Object(std::mem::take(body));
    let result = edit(&mut value);
    if let Value::Object(map) = value {
        *body = map;
    }
    result
}

/// Sets the `caBundle` (`ca_pem`, PEM) of every webhook client config in `rendered` that points at
/// a Service of [`Rendered::webhook_certificates`]: what the BuiltIn provider does once it has
/// issued them. Returns how many client configs it set. Pure: the agent owns the certificates.
pub fn inject_ca_bundle(rendered: &mut Rendered, ca_pem: &str) -> usize {
    let services: BTreeSet<(String, String)> = rendered
        .webhook_certificates
        .iter()
        .map(|c| (c.namespace.clone(), c.service_name.clone()))
        .collect();
    rendered
        .objects
        .iter_mut()
        .map(|entry| {
            with_value(&mut entry.object, |value| {
                webhooks::inject_ca_bundle(std::slice::from_mut(value), &services, ca_pem)
            })
        })
        .sum()
}

fn load(tree: &Path) -> Result<Bundle, RenderError> {
    let manifests_path = tree.join(MANIFESTS_DIR);
    let entries = fs::read_dir(&manifests_path).map_err(|source| RenderError::Io {
        path: MANIFESTS_DIR.to_owned(),
        source,
    })?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| RenderError::Io {
            path: MANIFESTS_DIR.to_owned(),
            source,
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let relative = format!("{MANIFESTS_DIR}/{name}");
        let metadata = fs::metadata(entry.path()).map_err(|source| RenderError::Io {
            path: relative.clone(),
            source,
        })?;
        if metadata.is_dir() {
            return Err(reject(
                RegistryV1Rule::NoSubdirectories,
                relative,
                "subdirectories are not allowed in manifests/",
            ));
        }
        files.push((relative, entry.path()));
    }
    files.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));

    let mut csvs = Vec::new();
    let mut crds = Vec::new();
    let mut others = Vec::new();
    for (relative, path) in files {
        let text = read_text(&path, &relative)?;
        for object in parse_manifests(&relative, &text)? {
            match (object.group(), object.kind()) {
                // By kind alone, as OLM v1 reads a bundle: a CSV whose apiVersion names no
                // group (`v1alpha1`) is still the bundle's CSV.
                (_, "ClusterServiceVersion") => csvs.push(object),
                ("apiextensions.k8s.io", "CustomResourceDefinition") => crds.push(object),
                _ => others.push(object),
            }
        }
    }
    let mut csvs = csvs.into_iter();
    let Some(csv) = csvs.next() else {
        return Err(reject(
            RegistryV1Rule::NoClusterServiceVersion,
            MANIFESTS_DIR,
            "no ClusterServiceVersion (operators.coreos.com) found in manifests/",
        ));
    };
    if let Some(second) = csvs.next() {
        return Err(reject(
            RegistryV1Rule::MultipleClusterServiceVersions,
            format!("ClusterServiceVersion {}", second.name()),
            format!(
                "a bundle has exactly one ClusterServiceVersion; found {} in {} and {} in {}",
                csv.name(),
                csv.origin(),
                second.name(),
                second.origin()
            ),
        ));
    }

    let annotations_path = tree.join("metadata").join("annotations.yaml");
    let annotations_text =
        read_text(&annotations_path, "metadata/annotations.yaml").map_err(|error| {
            reject(
                RegistryV1Rule::Annotations,
                "metadata/annotations.yaml",
                format!("cannot read the bundle annotations: {error}"),
            )
        })?;
    let annotations: Value =
        serde_saphyr::from_str(&annotations_text).map_err(|error| RenderError::InvalidYaml {
            at: SourceLocation {
                file: "metadata/annotations.yaml".to_owned(),
                document: Some(0),
                line: error.location().map(|location| location.line()),
            },
            message: error
                .to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned(),
        })?;
    let package_name = annotations
        .get("annotations")
        .and_then(|map| map.get(PACKAGE_ANNOTATION))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if package_name.is_empty() {
        return Err(reject(
            RegistryV1Rule::Annotations,
            "metadata/annotations.yaml",
            format!("annotation {PACKAGE_ANNOTATION} (the package name) is missing or empty"),
        ));
    }

    let metadata_properties = read_properties_file(tree)?;
    check_dependencies_file(tree)?;
    Ok(Bundle {
        csv,
        crds,
        others,
        package_name,
        metadata_properties,
    })
}

/// `metadata/properties.yaml`'s `properties` list, empty when the file is absent.
fn read_properties_file(tree: &Path) -> Result<Vec<Value>, RenderError> {
    const FILE: &str = "metadata/properties.yaml";
    let path = tree.join("metadata").join("properties.yaml");
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text = read_text(&path, FILE)?;
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let value: Value = serde_saphyr::from_str(&text).map_err(|error| RenderError::InvalidYaml {
        at: SourceLocation {
            file: FILE.to_owned(),
            document: Some(0),
            line: error.location().map(|location| location.line()),
        },
        message: error
            .to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned(),
    })?;
    Ok(value
        .get("properties")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default())
}

/// `metadata/dependencies.yaml` declares dependencies OLM v1 cannot resolve; any entry is a rejection.
fn check_dependencies_file(tree: &Path) -> Result<(), RenderError> {
    const FILE: &str = "metadata/dependencies.yaml";
    let path = tree.join("metadata").join("dependencies.yaml");
    if !path.exists() {
        return Ok(());
    }
    let text = read_text(&path, FILE)?;
    let value: Value = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_saphyr::from_str(&text).map_err(|error| RenderError::InvalidYaml {
            at: SourceLocation {
                file: FILE.to_owned(),
                document: Some(0),
                line: error.location().map(|location| location.line()),
            },
            message: error
                .to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned(),
        })?
    };
    let dependencies = value.get("dependencies").and_then(Value::as_array);
    if let Some(first) = dependencies.and_then(|list| list.first()) {
        let kind = first
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        return Err(reject(
            RegistryV1Rule::Dependencies,
            FILE,
            format!("the bundle declares dependencies (first of type {kind}); OLM v1 does not resolve dependencies"),
        ));
    }
    Ok(())
}

fn annotation<'a>(object: &'a Object, key: &str) -> Option<&'a str> {
    object
        .body()
        .get("metadata")?
        .get("annotations")?
        .get(key)?
        .as_str()
        .filter(|value| !value.is_empty())
}

fn csv_spec(csv: &Object) -> &Value {
    static EMPTY: Value = Value::Null;
    csv.body().get("spec").unwrap_or(&EMPTY)
}

fn strings_at<'a>(value: &'a Value, path: &[&str]) -> Vec<&'a str> {
    let mut current = Some(value);
    for step in path {
        current = current.and_then(|value| value.get(step));
    }
    current
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.get("name")?.as_str())
                .collect()
        })
        .unwrap_or_default()
}

fn validate(bundle: &Bundle) -> Result<(), RenderError> {
    let csv = &bundle.csv;
    let csv_label = format!("ClusterServiceVersion {}", csv.name());
    let spec = csv_spec(csv);

    // Dependencies: in metadata/properties.yaml or the CSV's olm.properties annotation.
    let mut properties: Vec<(Value, &str)> = bundle
        .metadata_properties
        .iter()
        .map(|property| (property.clone(), "metadata/properties.yaml"))
        .collect();
    if let Some(text) = annotation(csv, "olm.properties") {
        let parsed: Value = serde_json::from_str(text).map_err(|error| {
            reject(
                RegistryV1Rule::Dependencies,
                csv_label.clone(),
                format!("annotation olm.properties is not a JSON list of properties: {error}"),
            )
        })?;
        for property in parsed.as_array().cloned().unwrap_or_default() {
            properties.push((property, "annotation olm.properties"));
        }
    }
    for (property, source) in &properties {
        let kind = property
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if DEPENDENCY_PROPERTY_TYPES.contains(&kind) {
            let object = if *source == "metadata/properties.yaml" {
                (*source).to_owned()
            } else {
                format!("{csv_label} {source}")
            };
            return Err(reject(
                RegistryV1Rule::Dependencies,
                object,
                format!("property of type {kind} declares a dependency; OLM v1 does not resolve dependencies"),
            ));
        }
    }

    let owned_api_services = strings_at(spec, &["apiservicedefinitions", "owned"]);
    if let Some(first) = owned_api_services.first() {
        return Err(reject(
            RegistryV1Rule::OwnedApiServices,
            csv_label,
            format!("owned APIService definitions are not supported (first: {first})"),
        ));
    }
    for other in &bundle.others {
        if !SUPPORTED_KINDS
            .iter()
            .any(|(kind, _)| *kind == other.kind())
        {
            return Err(reject(
                RegistryV1Rule::UnsupportedKind,
                format!(
                    "{} {} ({})",
                    other.kind(),
                    other.name(),
                    other.origin().file
                ),
                "OLM does not allow this kind in a bundle",
            ));
        }
    }

    let mut crd_names = HashSet::new();
    for crd in &bundle.crds {
        if !crd_names.insert(crd.name()) {
            return Err(reject(
                RegistryV1Rule::DuplicateCrd,
                format!(
                    "CustomResourceDefinition {} ({})",
                    crd.name(),
                    crd.origin().file
                ),
                "the bundle contains this CRD more than once",
            ));
        }
    }
    let mut owned_missing: Vec<&str> = strings_at(spec, &["customresourcedefinitions", "owned"])
        .into_iter()
        .filter(|name| !crd_names.contains(name))
        .collect();
    owned_missing.sort_unstable();
    if let Some(first) = owned_missing.first() {
        return Err(reject(
            RegistryV1Rule::OwnedCrdMissing,
            csv_label,
            format!("owned CustomResourceDefinition {first} is not in the bundle"),
        ));
    }

    let strategy = install_strategy_spec(csv)?;
    let mut deployment_names = HashSet::new();
    for name in strings_at(strategy, &["deployments"]) {
        if !webhooks::is_dns1123_subdomain(name) {
            return Err(reject(
                RegistryV1Rule::InvalidDeploymentName,
                csv_label,
                format!("install strategy deployment name {name:?} is not a DNS-1123 subdomain"),
            ));
        }
        if !deployment_names.insert(name) {
            return Err(reject(
                RegistryV1Rule::DuplicateDeployment,
                csv_label,
                format!("install strategy deployment {name} is defined more than once"),
            ));
        }
    }
    Ok(())
}

fn install_strategy_spec(csv: &Object) -> Result<&Value, RenderError> {
    let install = csv_spec(csv).get("install");
    let strategy = install
        .and_then(|install| install.get("strategy"))
        .and_then(Value::as_str);
    if strategy != Some("deployment") {
        return Err(reject(
            RegistryV1Rule::InstallStrategy,
            format!("ClusterServiceVersion {}", csv.name()),
            format!(
                "spec.install.strategy must be \"deployment\", found {}",
                strategy.map_or("nothing".to_owned(), |name| format!("{name:?}"))
            ),
        ));
    }
    install
        .and_then(|install| install.get("spec"))
        .ok_or_else(|| {
            reject(
                RegistryV1Rule::InstallStrategy,
                format!("ClusterServiceVersion {}", csv.name()),
                "spec.install.spec is missing",
            )
        })
}

/// The install modes the CSV marks supported.
fn supported_install_modes(csv: &Object) -> BTreeSet<InstallMode> {
    csv_spec(csv)
        .get("installModes")
        .and_then(Value::as_array)
        .map(|modes| {
            modes
                .iter()
                .filter(|mode| mode.get("supported").and_then(Value::as_bool) == Some(true))
                .filter_map(|mode| InstallMode::parse(mode.get("type")?.as_str()?))
                .collect()
        })
        .unwrap_or_default()
}

/// The target namespace for the watch namespace: `""` for AllNamespaces. Checks the CSV supports the
/// install mode the watch namespace asks for.
fn check_install_mode(
    csv: &Object,
    install_namespace: &str,
    watch_namespace: &str,
) -> Result<String, RenderError> {
    let csv_label = format!("ClusterServiceVersion {}", csv.name());
    let supported = supported_install_modes(csv);
    if supported.len() == 1 && supported.contains(&InstallMode::MultiNamespace) {
        return Err(reject(
            RegistryV1Rule::MultiNamespaceOnly,
            csv_label,
            "the CSV supports only the MultiNamespace install mode, which OLM v1 cannot install",
        ));
    }
    let needed = if watch_namespace.is_empty() {
        InstallMode::AllNamespaces
    } else if watch_namespace == install_namespace {
        InstallMode::OwnNamespace
    } else {
        InstallMode::SingleNamespace
    };
    if !supported.contains(&needed) {
        let names: Vec<&str> = supported.iter().map(|mode| mode.name()).collect();
        return Err(reject(
            RegistryV1Rule::InstallModeUnsupported,
            csv_label,
            format!(
                "watch namespace {watch_namespace:?} with install namespace {install_namespace:?} needs install mode {}, but the CSV supports [{}]",
                needed.name(),
                names.join(", ")
            ),
        ));
    }
    Ok(watch_namespace.to_owned())
}

/// A DNS-1123 label, the rule for namespace names.
fn check_namespace_name(name: &str, what: &str) -> Result<(), RenderError> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if valid {
        Ok(())
    } else {
        Err(reject(
            RegistryV1Rule::InvalidNamespace,
            format!("{what} {name:?}"),
            "must be a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters)",
        ))
    }
}

fn string_list(value: Option<&Value>) -> Option<Vec<String>> {
    value.and_then(Value::as_array).map(|items| {
        items
            .iter()
            .map(|item| match item {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            })
            .collect()
    })
}

fn read_permissions(
    strategy: &Value,
    field: &str,
    csv_label: &str,
) -> Result<Vec<Permission>, RenderError> {
    let Some(entries) = strategy.get(field) else {
        return Ok(Vec::new());
    };
    let Some(entries) = entries.as_array() else {
        if entries.is_null() {
            return Ok(Vec::new());
        }
        return Err(reject(
            RegistryV1Rule::InstallStrategy,
            csv_label,
            format!("spec.install.spec.{field} must be a list"),
        ));
    };
    Ok(entries
        .iter()
        .map(|entry| Permission {
            service_account_name: entry
                .get("serviceAccountName")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            rules: entry.get("rules").and_then(Value::as_array).map(|rules| {
                rules
                    .iter()
                    .map(|rule| PolicyRule {
                        verbs: string_list(rule.get("verbs")),
                        api_groups: string_list(rule.get("apiGroups")).unwrap_or_default(),
                        resources: string_list(rule.get("resources")).unwrap_or_default(),
                        resource_names: string_list(rule.get("resourceNames")).unwrap_or_default(),
                        non_resource_urls: string_list(rule.get("nonResourceURLs"))
                            .unwrap_or_default(),
                    })
                    .collect()
            }),
        })
        .collect())
}

/// The CSV's annotations as strings, with `olm.properties` extended by metadata/properties.yaml the way
/// OLM v1 does it (the deployments' pod templates inherit these annotations).
fn csv_annotations(bundle: &Bundle) -> Result<Map<String, Value>, RenderError> {
    let mut annotations: Map<String, Value> = bundle
        .csv
        .body()
        .get("metadata")
        .and_then(|metadata| metadata.get("annotations"))
        .and_then(Value::as_object)
        .map(|map| {
            map.iter()
                .map(|(key, value)| (key.clone(), Value::String(scalar_text(value))))
                .collect()
        })
        .unwrap_or_default();
    if !bundle.metadata_properties.is_empty() {
        let mut all: Vec<Value> = annotations
            .get("olm.properties")
            .and_then(Value::as_str)
            .and_then(|text| serde_json::from_str::<Value>(text).ok())
            .and_then(|value| value.as_array().cloned())
            .unwrap_or_default();
        all.extend(bundle.metadata_properties.iter().cloned());
        // Go marshals property.Property as {"type":...,"value":...} in that field order.
        let mut text = String::from("[");
        for (index, property) in all.iter().enumerate() {
            if index > 0 {
                text.push(',');
            }
            text.push_str("{\"type\":");
            gojson::write_string(
                property
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                &mut text,
            );
            text.push_str(",\"value\":");
            gojson::write_value(property.get("value").unwrap_or(&Value::Null), &mut text);
            text.push('}');
        }
        text.push(']');
        annotations.insert("olm.properties".to_owned(), Value::String(text));
    }
    Ok(annotations)
}

/// A YAML scalar as the string Go would have read into a `map[string]string`.
fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn deployments(
    csv: &Object,
    strategy: &Value,
    csv_annotations: &Map<String, Value>,
    install_namespace: &str,
    target_namespace: &str,
) -> Result<Vec<Value>, RenderError> {
    let csv_label = format!("ClusterServiceVersion {}", csv.name());
    let Some(specs) = strategy.get("deployments").and_then(Value::as_array) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(specs.len());
    for deployment in specs {
        let name = deployment
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if name.is_empty() {
            return Err(reject(
                RegistryV1Rule::InstallStrategy,
                csv_label,
                "an install strategy deployment has no name",
            ));
        }
        let mut spec = match deployment.get("spec") {
            Some(Value::Object(spec)) => spec.clone(),
            _ => {
                return Err(reject(
                    RegistryV1Rule::InstallStrategy,
                    csv_label,
                    format!("install strategy deployment {name} has no spec"),
                ))
            }
        };
        // Fields Go's typed Deployment always writes.
        spec.entry("strategy").or_insert_with(|| json!({}));
        spec.insert("revisionHistoryLimit".to_owned(), json!(1));
        let template = spec
            .entry("template")
            .or_insert_with(|| json!({}))
            .as_object_mut();
        if let Some(template) = template {
            let metadata = template.entry("metadata").or_insert_with(|| json!({}));
            if let Some(metadata) = metadata.as_object_mut() {
                let mut annotations = csv_annotations.clone();
                if let Some(Value::Object(own)) = metadata.get("annotations") {
                    for (key, value) in own {
                        annotations.insert(key.clone(), Value::String(scalar_text(value)));
                    }
                }
                annotations.insert("olm.targetNamespaces".to_owned(), json!(target_namespace));
                annotations.insert("olm.operatorNamespace".to_owned(), json!(install_namespace));
                metadata.insert("annotations".to_owned(), Value::Object(annotations));
            }
            if let Some(Value::Object(pod)) = template.get_mut("spec") {
                for list in ["containers", "initContainers"] {
                    if let Some(Value::Array(containers)) = pod.get_mut(list) {
                        for container in containers.iter_mut().filter_map(Value::as_object_mut) {
                            container.entry("resources").or_insert_with(|| json!({}));
                        }
                    }
                }
            }
        }
        let mut metadata = json!({"name": name, "namespace": install_namespace});
        if let Some(Value::Object(labels)) = deployment.get("label") {
            if !labels.is_empty() {
                metadata["labels"] = Value::Object(labels.clone());
            }
        }
        out.push(json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": metadata,
            "spec": Value::Object(spec),
            "status": {},
        }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_json_of_a_permission() {
        let permission = Permission {
            service_account_name: "sa".to_owned(),
            rules: Some(vec![PolicyRule {
                verbs: Some(vec!["get".to_owned()]),
                api_groups: vec![String::new()],
                resources: vec!["pods".to_owned()],
                resource_names: Vec::new(),
                non_resource_urls: Vec::new(),
            }]),
        };
        assert_eq!(
            permission.go_json(),
            "{\"serviceAccountName\":\"sa\",\"rules\":[{\"verbs\":[\"get\"],\"apiGroups\":[\"\"],\"resources\":[\"pods\"]}]}\n"
        );
        let empty = Permission {
            service_account_name: String::new(),
            rules: None,
        };
        assert_eq!(
            empty.go_json(),
            "{\"serviceAccountName\":\"\",\"rules\":null}\n"
        );
    }

    #[test]
    fn unique_name_fits_63() {
        let permission = Permission {
            service_account_name: "x".to_owned(),
            rules: None,
        };
        let name = unique_name(&"a".repeat(100), &permission);
        assert!(name.len() <= 63, "{name}");
        assert!(name.starts_with("aaaa"));
        let short = unique_name("short", &permission);
        assert!(short.starts_with("short-"));
    }
}
