//! `transformers:` and `generators:` entries: configurations of kustomize's built-in plugins
//! (`apiVersion: builtin`), inline or from files and directories, run by the same code as the
//! kustomization's own fields. Exec, container and function plugins are refused.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::error::{KustomizeError, KustomizeErrorKind};
use super::fieldspec::FieldSpec;
use super::generators::{self, GeneratedKind};
use super::kustomization::{GeneratorArgs, HelmChart, HelmGlobals, Image, Patch, Replica};
use super::resmap::ResMap;
use super::resource::Resource;
use super::resource::ORIGIN_ANNOTATION;
use super::selector::Selector;
use super::target::{Accumulator, Builder, Target};
use super::transformers::{self, SubjectsMode};
use super::{helm_charts, images, origin, patches, replacements};
use crate::Origin;

/// Runs the kustomization's `generators:` entries.
pub(crate) fn run_generators(
    builder: &mut Builder<'_>,
    target: &Target,
    acc: &mut Accumulator,
) -> Result<(), KustomizeError> {
    let entries = &target.kustomization.generators;
    if entries.is_empty() {
        return Ok(());
    }
    let configs = load_configs(builder, target, entries, "generators")?;
    for (i, config) in configs.iter().enumerate() {
        let place = |e: KustomizeError| {
            e.in_file(target.file.clone())
                .at_field(format!("generators[{i}]"))
        };
        let generated = generate(builder, target, config).map_err(place)?;
        let by = configured_by(config).filter(|_| builder.origin.is_some());
        for mut resource in generated {
            if let Some(by) = &by {
                origin::set_if_absent(&mut resource, &by.as_origin());
            }
            let origin = Origin {
                file: target.file.clone(),
                document: 0,
                line: 1,
            };
            acc.resources
                .absorb(resource, origin, &builder.schema)
                .map_err(place)?;
        }
    }
    Ok(())
}

/// Runs the kustomization's `transformers:` entries.
pub(crate) fn run_transformers(
    builder: &mut Builder<'_>,
    target: &Target,
    acc: &mut Accumulator,
) -> Result<(), KustomizeError> {
    let entries = &target.kustomization.transformers;
    if entries.is_empty() {
        return Ok(());
    }
    let configs = load_configs(builder, target, entries, "transformers")?;
    for (i, config) in configs.iter().enumerate() {
        transform(builder, target, &mut acc.resources, config).map_err(|e| {
            e.in_file(target.file.clone())
                .at_field(format!("transformers[{i}]"))
        })?;
        if builder.origin.is_some() {
            if let Some(by) = configured_by(config) {
                origin::add_transformation(&mut acc.resources, &by);
            }
        }
        acc.resources.drop_empties();
    }
    Ok(())
}

/// Who a plugin configuration is, for `buildMetadata`: the file it came from (its origin)
/// and its own identity.
fn configured_by(config: &Resource) -> Option<origin::Configured> {
    let path = config
        .annotation(ORIGIN_ANNOTATION)?
        .lines()
        .find_map(|l| l.strip_prefix("path: "))?
        .trim_matches('"')
        .to_owned();
    Some(origin::Configured {
        configured_in: path,
        api_version: config.api_version().to_owned(),
        kind: config.kind().to_owned(),
        name: config.name().to_owned(),
        namespace: config.namespace().to_owned(),
    })
}

/// Reads plugin configurations: each entry inline YAML, or a file or directory (a directory
/// is built as a kustomization whose output is the configurations).
fn load_configs(
    builder: &mut Builder<'_>,
    target: &Target,
    entries: &[String],
    field: &str,
) -> Result<Vec<Resource>, KustomizeError> {
    let mut configs = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let place = |e: KustomizeError| {
            e.in_file(target.file.clone())
                .at_field(format!("{field}[{i}]"))
        };
        if let Ok(mut inline) = patches::parse_strategic(entry) {
            if !inline.is_empty() {
                if let Some(base) = &builder.origin {
                    let file_name = target.file.rsplit('/').next().unwrap_or(&target.file);
                    let value = origin::from_path(&origin::join(base, file_name));
                    for config in &mut inline {
                        config.set_annotation(ORIGIN_ANNOTATION, &value);
                    }
                }
                configs.extend(inline);
                continue;
            }
        }
        let mut scratch = Accumulator::default();
        let mut sub_target = target.clone();
        sub_target.kustomization = Default::default();
        sub_target.kustomization.resources = vec![entry.clone()];
        builder
            .accumulate_target(&sub_target, &mut scratch)
            .map_err(place)?;
        configs.extend(scratch.resources.resources);
    }
    for config in &configs {
        check_builtin(config)
            .map_err(|e| e.in_file(target.file.clone()).at_field(field.to_owned()))?;
    }
    Ok(configs)
}

fn check_builtin(config: &Resource) -> Result<(), KustomizeError> {
    let is_function = config
        .annotation("config.kubernetes.io/function")
        .or_else(|| config.annotation("config.k8s.io/function"))
        .is_some();
    if is_function || config.api_version() != "builtin" {
        return Err(KustomizeError::new(
            KustomizeErrorKind::Unsupported,
            format!(
                "plugin {} (apiVersion {:?}) is not one of kustomize's built-in plugins; exec, \
                 container and function plugins are not run",
                config.kind(),
                config.api_version()
            ),
        ));
    }
    Ok(())
}

fn config_of<T: for<'de> Deserialize<'de>>(config: &Resource) -> Result<T, KustomizeError> {
    serde_json::from_value(Value::Object(config.body.clone())).map_err(|e| {
        KustomizeError::invalid(format!("invalid {} configuration: {e}", config.kind()))
    })
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct MapConfig {
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    field_specs: Option<Vec<FieldSpec>>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct NamespaceConfig {
    metadata: NameNamespace,
    field_specs: Vec<FieldSpec>,
    unset_only: bool,
    set_role_binding_subjects: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NameNamespace {
    name: String,
    namespace: String,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct AffixConfig {
    prefix: String,
    suffix: String,
    field_specs: Option<Vec<FieldSpec>>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ImageConfig {
    image_tag: Image,
    field_specs: Vec<FieldSpec>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ReplicaConfig {
    replica: Replica,
    field_specs: Vec<FieldSpec>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct StrategicMergeConfig {
    paths: Vec<String>,
    patches: String,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Json6902Config {
    target: Option<Selector>,
    path: String,
    json_op: String,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ReplacementConfig {
    replacements: Vec<Value>,
}

fn transform(
    builder: &mut Builder<'_>,
    target: &Target,
    res: &mut ResMap,
    config: &Resource,
) -> Result<(), KustomizeError> {
    let schema = builder.schema.clone();
    let tree = builder.tree;
    let dir = target.dir.as_str();
    match config.kind() {
        "LabelTransformer" => {
            let c: MapConfig = config_of(config)?;
            transformers::set_map_entries(
                res,
                &c.labels,
                &c.field_specs.unwrap_or_default(),
                "labels",
            )
        }
        "AnnotationsTransformer" => {
            let c: MapConfig = config_of(config)?;
            transformers::set_map_entries(
                res,
                &c.annotations,
                &c.field_specs.unwrap_or_default(),
                "annotations",
            )
        }
        "NamespaceTransformer" => {
            let c: NamespaceConfig = config_of(config)?;
            let mode = SubjectsMode::parse(&c.set_role_binding_subjects)?;
            transformers::set_namespace(
                res,
                &c.metadata.namespace,
                &c.field_specs,
                c.unset_only,
                mode,
                &schema,
            )
        }
        kind @ ("PrefixTransformer" | "SuffixTransformer" | "PrefixSuffixTransformer") => {
            let c: AffixConfig = config_of(config)?;
            let Some(specs) = c.field_specs else {
                return Err(KustomizeError::invalid(
                    "fieldSpecs is not expected to be nil",
                ));
            };
            if kind != "SuffixTransformer" && !c.prefix.is_empty() {
                transformers::add_prefix_suffix(res, &c.prefix, "", &specs, &schema)?;
            }
            if kind != "PrefixTransformer" && !c.suffix.is_empty() {
                transformers::add_prefix_suffix(res, "", &c.suffix, &specs, &schema)?;
            }
            Ok(())
        }
        "ImageTagTransformer" => {
            let c: ImageConfig = config_of(config)?;
            images::apply(res, &c.image_tag, &c.field_specs)
        }
        "ReplicaCountTransformer" => {
            let c: ReplicaConfig = config_of(config)?;
            transformers::set_replicas(res, &c.replica, &c.field_specs)
        }
        "PatchTransformer" => {
            let c: Patch = serde_json::from_value(strip_type_meta(config)).map_err(|e| {
                KustomizeError::invalid(format!("invalid PatchTransformer configuration: {e}"))
            })?;
            let loaded = patches::Loaded::read(tree, dir, &c.path, &c.patch, &c.options)?;
            loaded.apply(res, c.target.as_ref(), &schema)
        }
        "PatchStrategicMergeTransformer" => {
            let c: StrategicMergeConfig = config_of(config)?;
            let mut loaded = if c.paths.is_empty() {
                Vec::new()
            } else {
                patches::load_strategic_merge_list(tree, dir, &c.paths)?
            };
            if !c.patches.is_empty() {
                loaded
                    .extend(patches::parse_strategic(&c.patches).map_err(KustomizeError::invalid)?);
            }
            if loaded.is_empty() {
                return Err(KustomizeError::invalid(
                    "empty file path and empty patch content",
                ));
            }
            patches::apply_strategic_merge_list(res, &loaded, &schema)
        }
        "PatchJson6902Transformer" => {
            let c: Json6902Config = config_of(config)?;
            let patch = Patch {
                path: c.path,
                patch: c.json_op,
                target: c.target,
                options: BTreeMap::new(),
            };
            patches::apply_legacy_json6902(res, tree, dir, &patch, &schema)
        }
        "ReplacementTransformer" => {
            let c: ReplacementConfig = config_of(config)?;
            let list = transformers::read_replacements(tree, dir, &c.replacements)?;
            replacements::apply(&mut res.resources, &list, &schema)
        }
        "HashTransformer" => super::hash::add_hash_suffixes(res, &schema),
        other => Err(KustomizeError::new(
            KustomizeErrorKind::Unsupported,
            format!("{other} is not a built-in transformer this engine runs"),
        )),
    }
}

/// A config's body without `apiVersion`, `kind` and `metadata`, for plugins whose fields are
/// read strictly.
fn strip_type_meta(config: &Resource) -> Value {
    let mut body = config.body.clone();
    body.remove("apiVersion");
    body.remove("kind");
    body.remove("metadata");
    Value::Object(body)
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct GeneratorConfig {
    metadata: NameNamespace,
    name: String,
    namespace: String,
    behavior: String,
    literals: Vec<String>,
    files: Vec<String>,
    envs: Vec<String>,
    env: String,
    options: Option<super::kustomization::GeneratorOptions>,
    #[serde(rename = "type")]
    secret_type: String,
}

fn generate(
    builder: &mut Builder<'_>,
    target: &Target,
    config: &Resource,
) -> Result<Vec<Resource>, KustomizeError> {
    match config.kind() {
        kind @ ("ConfigMapGenerator" | "SecretGenerator") => {
            let c: GeneratorConfig = config_of(config)?;
            let mut envs = c.envs;
            if !c.env.is_empty() {
                envs.push(c.env);
            }
            let args = GeneratorArgs {
                name: if c.name.is_empty() {
                    c.metadata.name
                } else {
                    c.name
                },
                namespace: if c.namespace.is_empty() {
                    c.metadata.namespace
                } else {
                    c.namespace
                },
                behavior: c.behavior,
                literals: c.literals,
                files: c.files,
                envs,
                env: String::new(),
                options: None,
                secret_type: c.secret_type,
            };
            let generated_kind = if kind == "ConfigMapGenerator" {
                GeneratedKind::ConfigMap
            } else {
                GeneratedKind::Secret
            };
            let resource = generators::generate(
                builder.tree,
                &target.dir,
                generated_kind,
                &args,
                c.options.as_ref(),
            )?;
            Ok(vec![resource])
        }
        "HelmChartInflationGenerator" => {
            let text = |key: &str| {
                config
                    .body
                    .get(key)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned()
            };
            let globals = HelmGlobals {
                chart_home: text("chartHome"),
                config_home: text("configHome"),
            };
            let chart: HelmChart =
                serde_json::from_value(strip_helm_fields(config)).map_err(|e| {
                    KustomizeError::invalid(format!(
                        "invalid HelmChartInflationGenerator configuration: {e}"
                    ))
                })?;
            let rendered =
                helm_charts::inflate(builder.tree, &target.dir, &globals, &chart, builder.helm)?;
            Ok(rendered.into_iter().map(|(r, _)| r).collect())
        }
        "IAMPolicyGenerator" => iam_policy(config).map(|r| vec![r]),
        other => Err(KustomizeError::new(
            KustomizeErrorKind::Unsupported,
            format!("{other} is not a built-in generator this engine runs"),
        )),
    }
}

fn strip_helm_fields(config: &Resource) -> Value {
    let mut body = config.body.clone();
    for key in ["apiVersion", "kind", "metadata", "chartHome", "configHome"] {
        body.remove(key);
    }
    Value::Object(body)
}

/// kustomize's `IAMPolicyGenerator` (GKE only): a ServiceAccount bound to a Google service
/// account by annotation.
fn iam_policy(config: &Resource) -> Result<Resource, KustomizeError> {
    let text = |path: &[&str]| -> String {
        let mut value = config.body.get(path[0]);
        for key in &path[1..] {
            value = value.and_then(|v| v.get(*key));
        }
        value.and_then(Value::as_str).unwrap_or("").to_owned()
    };
    let cloud = text(&["cloud"]);
    if cloud != "gke" {
        return Err(KustomizeError::new(
            KustomizeErrorKind::Unsupported,
            format!("cloud provider {cloud} not supported yet"),
        ));
    }
    let mut metadata = serde_json::Map::new();
    let account = format!(
        "{}@{}.iam.gserviceaccount.com",
        text(&["serviceAccount", "name"]),
        text(&["serviceAccount", "projectId"])
    );
    metadata.insert(
        "annotations".into(),
        serde_json::json!({ "iam.gke.io/gcp-service-account": account }),
    );
    metadata.insert(
        "name".into(),
        Value::String(text(&["kubernetesService", "name"])),
    );
    let namespace = text(&["kubernetesService", "namespace"]);
    if !namespace.is_empty() {
        metadata.insert("namespace".into(), Value::String(namespace));
    }
    let mut body = serde_json::Map::new();
    body.insert("apiVersion".into(), Value::String("v1".into()));
    body.insert("kind".into(), Value::String("ServiceAccount".into()));
    body.insert("metadata".into(), Value::Object(metadata));
    Ok(Resource::new(body))
}
