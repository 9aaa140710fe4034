//! `helmCharts`: a chart inside the tree rendered with pallet's helm format, as
//! `kustomize build --enable-helm` renders it with `helm template` (release name, namespace,
//! values file and inline values with `valuesMerge`, additional values files, CRDs, API and
//! Kubernetes versions, hooks and tests). A chart from a repository is never fetched.

use serde_json::{Map, Value};

use super::error::{KustomizeError, KustomizeErrorKind};
use super::kustomization::{HelmChart, HelmGlobals};
use super::loader::{join_lexically, Entry, Tree};
use super::resource::Resource;
use super::target::{Accumulator, Builder, Target};
use crate::helm::hooks::{parse_hook, HookEvent};
use crate::helm::{self, RenderOptions};
use crate::Origin;

/// Runs the kustomization's `helmCharts`, absorbing what they render.
pub(crate) fn run(
    builder: &mut Builder<'_>,
    target: &Target,
    acc: &mut Accumulator,
) -> Result<(), KustomizeError> {
    let k = &target.kustomization;
    let globals = k.helm_globals.clone().unwrap_or_default();
    for (i, chart) in k.helm_charts.iter().enumerate() {
        let place = |e: KustomizeError| {
            e.in_file(target.file.clone())
                .at_field(format!("helmCharts[{i}]"))
        };
        let rendered =
            inflate(builder.tree, &target.dir, &globals, chart, builder.helm).map_err(place)?;
        let by = builder.configured(target, "HelmChartInflationGenerator");
        for (mut resource, origin) in rendered {
            if let Some(by) = &by {
                super::origin::set_if_absent(&mut resource, &by.as_origin());
            }
            acc.resources
                .absorb(resource, origin, &builder.schema)
                .map_err(place)?;
        }
    }
    Ok(())
}

/// Renders one chart entry into resources.
pub(crate) fn inflate(
    tree: &Tree,
    dir: &str,
    globals: &HelmGlobals,
    chart: &HelmChart,
    inputs: super::target::HelmInputs,
) -> Result<Vec<(Resource, Origin)>, KustomizeError> {
    if chart.name.is_empty() {
        return Err(KustomizeError::invalid("chart name cannot be empty"));
    }
    let chart_home = if globals.chart_home.is_empty() {
        "charts"
    } else {
        &globals.chart_home
    };
    let mut home = join_lexically(dir, chart_home).ok_or_else(|| {
        KustomizeError::new(
            KustomizeErrorKind::LoadRestricted,
            format!("chartHome '{chart_home}' leads outside the bundle"),
        )
    })?;
    if !chart.version.is_empty() && !chart.repo.is_empty() {
        home = format!("{home}/{}-{}", chart.name, chart.version);
    }
    let chart_dir = match tree.resolve(&home, &chart.name)? {
        Entry::Dir(path) => path,
        _ if !chart.repo.is_empty() => {
            return Err(KustomizeError::new(
                KustomizeErrorKind::RemoteRefused,
                format!(
                    "chart '{}' comes from the repository {}; nothing is fetched during a render. \
                     Bring the chart into the bundle (under {}/{}) as another source of the \
                     BundleDeployment",
                    chart.name, chart.repo, chart_home, chart.name
                ),
            ))
        }
        _ => {
            return Err(KustomizeError::new(
                KustomizeErrorKind::MissingFile,
                format!(
                    "no chart '{}' in '{}' and no repo to pull it from",
                    chart.name, home
                ),
            ))
        }
    };
    let values = values(tree, dir, &chart_dir, chart)?;
    let mut options = RenderOptions {
        release_name: if chart.release_name.is_empty() {
            "release-name".into()
        } else {
            chart.release_name.clone()
        },
        namespace: if chart.namespace.is_empty() {
            "default".into()
        } else {
            chart.namespace.clone()
        },
        values: Value::Object(values),
        now: Some(inputs.now),
        seed: inputs.seed,
        ..RenderOptions::default()
    };
    if !chart.name_template.is_empty() {
        return Err(KustomizeError::new(
            KustomizeErrorKind::Unsupported,
            "nameTemplate is not supported; set releaseName",
        ));
    }
    if !chart.kube_version.is_empty() {
        options.kube_version = if chart.kube_version.starts_with('v') {
            chart.kube_version.clone()
        } else {
            format!("v{}", chart.kube_version)
        };
    }
    options
        .api_versions
        .extend(chart.api_versions.iter().cloned());
    let loaded = helm::load_dir(&tree.absolute(&chart_dir)).map_err(helm_error)?;
    let files = helm::render_chart(&loaded, &options).map_err(helm_error)?;
    let crd_prefix = format!("{}/crds/", loaded.name());
    let files: Vec<helm::RenderedFile> = files
        .into_iter()
        .filter(|f| chart.include_crds || !is_crd_file(&f.source, &crd_prefix))
        .collect();
    // kustomize reads `helm template`'s output as it reads resources.
    let objects = helm::parse_objects_read_by(&files, super::yaml_v3::from_yaml_str_within)
        .map_err(helm_error)?;
    let origin = Origin {
        file: format!("{chart_dir}/Chart.yaml"),
        document: 0,
        line: 1,
    };
    let mut out = Vec::new();
    for object in objects {
        let Value::Object(body) = object else {
            continue;
        };
        if let Ok(Some(hook)) = parse_hook(&body) {
            if chart.skip_hooks || (chart.skip_tests && hook.events.contains(&HookEvent::Test)) {
                continue;
            }
        }
        out.push((Resource::new(body), origin.clone()));
    }
    Ok(out)
}

fn is_crd_file(source: &str, top_prefix: &str) -> bool {
    source.starts_with(top_prefix) || source.contains("/crds/")
}

/// The values `helm template -f <values file> -f <additional files>` sees: the chart's own
/// values (or `valuesFile`), with `valuesInline` merged as `valuesMerge` says.
fn values(
    tree: &Tree,
    dir: &str,
    chart_dir: &str,
    chart: &HelmChart,
) -> Result<Map<String, Value>, KustomizeError> {
    let read_map = |text: &str, what: &str| -> Result<Map<String, Value>, KustomizeError> {
        let value: Value = crate::object::from_yaml_str(text)
            .map_err(|e| KustomizeError::invalid(format!("{what}: {e}")))?;
        match value {
            Value::Object(map) => Ok(map),
            Value::Null => Ok(Map::new()),
            _ => Err(KustomizeError::invalid(format!("{what} must be a map"))),
        }
    };
    let mut file_values = if chart.values_file.is_empty() {
        match tree.resolve(chart_dir, "values.yaml")? {
            Entry::File(path) => {
                let text = std::fs::read_to_string(tree.absolute(&path))
                    .map_err(|e| KustomizeError::invalid(format!("cannot read {path}: {e}")))?;
                read_map(&text, &path)?
            }
            _ => Map::new(),
        }
    } else {
        let (_, text) = tree.read_text_restricted(dir, &chart.values_file)?;
        read_map(&text, &chart.values_file)?
    };
    if let Some(inline) = chart.values_inline.as_ref().filter(|m| !m.is_empty()) {
        file_values = match chart.values_merge.as_str() {
            "" | "override" => {
                let mut merged = file_values;
                helm::values::merge_values(&mut merged, inline);
                merged
            }
            "merge" => {
                let mut merged = inline.clone();
                helm::values::merge_values(&mut merged, &file_values);
                merged
            }
            "replace" => inline.clone(),
            other => {
                return Err(KustomizeError::invalid(format!(
                    "valuesMerge must be one of [merge override replace], not '{other}'"
                )))
            }
        };
    }
    for file in &chart.additional_values_files {
        let (_, text) = tree.read_text_restricted(dir, file)?;
        helm::values::merge_values(&mut file_values, &read_map(&text, file)?);
    }
    Ok(file_values)
}

fn helm_error(error: helm::HelmError) -> KustomizeError {
    KustomizeError::invalid(format!("helm chart: {error}"))
}
