//! The kustomization file: its fields as kustomize v5.5.0 reads them (unknown fields are an
//! error), found under one of the names kustomize recognises, with the legacy fields folded
//! in as kustomize folds them before a build.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::error::{KustomizeError, KustomizeErrorKind};
use super::fieldspec::FieldSpec;
use super::loader::{Entry, Tree};
use super::selector::Selector;

/// The file names kustomize recognises, in its order.
pub(crate) const FILE_NAMES: [&str; 3] =
    ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// `kind: Kustomization` (the default).
pub(crate) const KIND_KUSTOMIZATION: &str = "Kustomization";
/// `kind: Component`.
pub(crate) const KIND_COMPONENT: &str = "Component";

/// A kustomization file's fields.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Kustomization {
    pub api_version: String,
    pub kind: String,
    pub metadata: Option<Value>,
    pub openapi: BTreeMap<String, String>,
    pub name_prefix: String,
    pub name_suffix: String,
    pub namespace: String,
    pub common_labels: BTreeMap<String, String>,
    pub labels: Vec<Label>,
    pub common_annotations: BTreeMap<String, String>,
    pub patches_strategic_merge: Vec<String>,
    #[serde(rename = "patchesJson6902")]
    pub patches_json6902: Vec<Patch>,
    pub patches: Vec<Patch>,
    pub images: Vec<Image>,
    pub image_tags: Vec<Image>,
    pub replacements: Vec<Value>,
    pub replicas: Vec<Replica>,
    pub vars: Vec<Var>,
    pub sort_options: Option<SortOptions>,
    pub resources: Vec<String>,
    pub components: Vec<String>,
    pub crds: Vec<String>,
    pub bases: Vec<String>,
    pub config_map_generator: Vec<GeneratorArgs>,
    pub secret_generator: Vec<GeneratorArgs>,
    pub helm_globals: Option<HelmGlobals>,
    pub helm_charts: Vec<HelmChart>,
    pub helm_chart_inflation_generator: Vec<LegacyHelmChart>,
    pub generator_options: Option<GeneratorOptions>,
    pub configurations: Vec<String>,
    pub generators: Vec<String>,
    pub transformers: Vec<String>,
    pub validators: Vec<String>,
    pub build_metadata: Vec<String>,
}

/// An entry of `labels`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Label {
    pub pairs: BTreeMap<String, String>,
    pub include_selectors: bool,
    pub include_templates: bool,
    pub fields: Vec<FieldSpec>,
}

/// An entry of `patches` or `patchesJson6902`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Patch {
    pub path: String,
    pub patch: String,
    pub target: Option<Selector>,
    pub options: BTreeMap<String, bool>,
}

/// An entry of `images`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Image {
    pub name: String,
    pub new_name: String,
    pub tag_suffix: String,
    pub new_tag: String,
    pub digest: String,
}

/// An entry of `replicas`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Replica {
    pub name: String,
    pub count: i64,
}

/// An entry of `vars`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Var {
    pub name: String,
    pub objref: VarTarget,
    pub fieldref: FieldRef,
}

/// The object a var reads.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct VarTarget {
    pub api_version: String,
    pub group: String,
    pub version: String,
    pub kind: String,
    pub name: String,
    pub namespace: String,
}

/// The field a var reads.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct FieldRef {
    pub field_path: String,
}

/// `sortOptions`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct SortOptions {
    pub order: String,
    pub legacy_sort_options: Option<LegacySortOptions>,
}

/// `sortOptions.legacySortOptions`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct LegacySortOptions {
    pub order_first: Vec<String>,
    pub order_last: Vec<String>,
}

/// An entry of `configMapGenerator` or `secretGenerator`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct GeneratorArgs {
    pub name: String,
    pub namespace: String,
    pub behavior: String,
    pub literals: Vec<String>,
    pub files: Vec<String>,
    pub envs: Vec<String>,
    pub env: String,
    pub options: Option<GeneratorOptions>,
    /// Secrets only.
    #[serde(rename = "type")]
    pub secret_type: String,
}

/// `generatorOptions`, or a generator's `options`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct GeneratorOptions {
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
    pub disable_name_suffix_hash: bool,
    pub immutable: bool,
}

impl GeneratorOptions {
    /// kustomize's merge of the kustomization's `generatorOptions` under a generator's own:
    /// the generator's labels and annotations win, either side's flags turn them on.
    pub(crate) fn merged(local: Option<&Self>, global: Option<&Self>) -> Option<Self> {
        let Some(global) = global else {
            return local.cloned();
        };
        let mut out = local.cloned().unwrap_or_default();
        for (mine, theirs) in [
            (&mut out.labels, &global.labels),
            (&mut out.annotations, &global.annotations),
        ] {
            if let Some(theirs) = theirs {
                let mine = mine.get_or_insert_with(BTreeMap::new);
                for (k, v) in theirs {
                    mine.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
        }
        out.disable_name_suffix_hash |= global.disable_name_suffix_hash;
        out.immutable |= global.immutable;
        Some(out)
    }
}

/// `helmGlobals`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct HelmGlobals {
    pub chart_home: String,
    pub config_home: String,
}

/// An entry of `helmCharts`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct HelmChart {
    pub name: String,
    pub version: String,
    pub repo: String,
    pub release_name: String,
    pub namespace: String,
    pub additional_values_files: Vec<String>,
    pub values_file: String,
    pub values_inline: Option<serde_json::Map<String, Value>>,
    pub values_merge: String,
    #[serde(rename = "includeCRDs")]
    pub include_crds: bool,
    pub skip_hooks: bool,
    pub api_versions: Vec<String>,
    pub kube_version: String,
    pub name_template: String,
    pub skip_tests: bool,
    pub debug: bool,
}

/// An entry of the legacy `helmChartInflationGenerator`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct LegacyHelmChart {
    pub chart_name: String,
    pub chart_version: String,
    #[serde(rename = "chartRepoUrl")]
    pub chart_repo_url: String,
    pub chart_home: String,
    pub chart_repo_name: String,
    pub helm_bin: String,
    pub helm_home: String,
    pub values: String,
    pub values_local: Option<serde_json::Map<String, Value>>,
    pub values_merge: String,
    pub release_name: String,
    pub release_namespace: String,
    pub extra_args: Vec<String>,
}

impl Kustomization {
    /// Parses a kustomization file's text.
    pub(crate) fn parse(text: &str) -> Result<Self, KustomizeError> {
        let value: Value = crate::object::from_yaml_str(text)
            .map_err(|e| KustomizeError::invalid(format!("invalid Kustomization: {e}")))?;
        if value.is_null() {
            return Err(KustomizeError::invalid("kustomization.yaml is empty"));
        }
        Self::from_value(value)
    }

    /// Reads a kustomization from its JSON form; field names match without regard to case,
    /// as kustomize's JSON decoding matches them.
    pub(crate) fn from_value(mut value: Value) -> Result<Self, KustomizeError> {
        super::field_names::canonicalize(&mut value);
        let kustomization: Kustomization = serde_json::from_value(value)
            .map_err(|e| KustomizeError::invalid(format!("invalid Kustomization: {e}")))?;
        Ok(kustomization)
    }

    /// Folds the legacy fields in and checks kind and apiVersion, as kustomize does on load.
    pub(crate) fn fix_up(&mut self) -> Result<(), KustomizeError> {
        if self.kind.is_empty() {
            self.kind = KIND_KUSTOMIZATION.to_owned();
        }
        if self.kind != KIND_KUSTOMIZATION && self.kind != KIND_COMPONENT {
            return Err(KustomizeError::invalid(format!(
                "kind should be {KIND_KUSTOMIZATION} or {KIND_COMPONENT}, not '{}'",
                self.kind
            ))
            .at_field("kind"));
        }
        let required = if self.kind == KIND_COMPONENT {
            "kustomize.config.k8s.io/v1alpha1"
        } else {
            "kustomize.config.k8s.io/v1beta1"
        };
        if !self.api_version.is_empty() && self.api_version != required {
            return Err(KustomizeError::invalid(format!(
                "apiVersion for {} should be {required}",
                self.kind
            ))
            .at_field("apiVersion"));
        }
        let bases = std::mem::take(&mut self.bases);
        self.resources.extend(bases);
        let tags = std::mem::take(&mut self.image_tags);
        self.images.extend(tags);
        for generator in self
            .config_map_generator
            .iter_mut()
            .chain(self.secret_generator.iter_mut())
        {
            if !generator.env.is_empty() {
                let env = std::mem::take(&mut generator.env);
                generator.envs.push(env);
            }
        }
        let legacy = std::mem::take(&mut self.helm_chart_inflation_generator);
        if !legacy.is_empty() {
            let mut globals = HelmGlobals::default();
            for old in &legacy {
                if !old.helm_home.is_empty() {
                    globals.config_home = old.helm_home.clone();
                }
                if !old.chart_home.is_empty() {
                    globals.chart_home = old.chart_home.clone();
                }
                self.helm_charts.push(HelmChart {
                    name: old.chart_name.clone(),
                    version: old.chart_version.clone(),
                    repo: old.chart_repo_url.clone(),
                    values_file: old.values.clone(),
                    values_inline: old.values_local.clone(),
                    values_merge: old.values_merge.clone(),
                    release_name: old.release_name.clone(),
                    ..HelmChart::default()
                });
            }
            if self.helm_globals.is_none()
                && (!globals.chart_home.is_empty() || !globals.config_home.is_empty())
            {
                self.helm_globals = Some(globals);
            }
        }
        Ok(())
    }

    /// Whether this is a `kind: Component`.
    pub(crate) fn is_component(&self) -> bool {
        self.kind == KIND_COMPONENT
    }
}

/// Finds and reads the kustomization file of the tree-relative directory `dir`: returns its
/// tree-relative path and parsed, fixed-up content.
pub(crate) fn load(tree: &Tree, dir: &str) -> Result<(String, Kustomization), KustomizeError> {
    let mut found = Vec::new();
    for name in FILE_NAMES {
        if let Entry::File(relative) = tree.resolve(dir, name)? {
            found.push(relative);
        }
    }
    let shown_dir = super::loader::display_dir(dir);
    let file = match found.len() {
        0 => {
            return Err(KustomizeError::new(
                KustomizeErrorKind::MissingFile,
                format!(
                    "unable to find one of 'kustomization.yaml', 'kustomization.yml' or \
                     'Kustomization' in directory '{shown_dir}'"
                ),
            ))
        }
        1 => found.remove(0),
        _ => {
            return Err(KustomizeError::invalid(format!(
                "found multiple kustomization files under: {shown_dir}"
            )))
        }
    };
    let bytes = std::fs::read(tree.absolute(&file)).map_err(|e| {
        KustomizeError::new(KustomizeErrorKind::MissingFile, format!("cannot read: {e}"))
            .in_file(file.clone())
    })?;
    let text = String::from_utf8(bytes)
        .map_err(|_| KustomizeError::invalid("not UTF-8 text").in_file(file.clone()))?;
    let mut kustomization = Kustomization::parse(&text).map_err(|e| e.in_file(file.clone()))?;
    kustomization
        .fix_up()
        .map_err(|e| e.in_file(file.clone()))?;
    Ok((file, kustomization))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_fields_fold_into_current_ones() {
        let mut k = Kustomization::parse(
            "bases: [../base]\nresources: [a.yaml]\nimageTags: [{name: x, newTag: v1}]\n\
             configMapGenerator: [{name: c, env: a.env, envs: [b.env]}]\n",
        )
        .unwrap();
        k.fix_up().unwrap();
        assert_eq!(k.resources, ["a.yaml", "../base"]);
        assert_eq!(k.images.len(), 1);
        assert_eq!(k.config_map_generator[0].envs, ["b.env", "a.env"]);
        assert_eq!(k.kind, KIND_KUSTOMIZATION);
    }

    #[test]
    fn unknown_fields_and_wrong_kinds_are_refused() {
        assert!(Kustomization::parse("resourcez: [a]\n").is_err());
        let mut k = Kustomization::parse("kind: Other\n").unwrap();
        assert!(k.fix_up().is_err());
        let mut k =
            Kustomization::parse("kind: Component\napiVersion: kustomize.config.k8s.io/v1beta1\n")
                .unwrap();
        assert!(k.fix_up().is_err());
    }
}
