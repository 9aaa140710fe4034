//! The `helm` format: existing Helm v3 charts rendered through minijinja, aiming at output
//! identical to `helm template`.
//!
//! # Architecture
//!
//! 1. [`parse`]: a lexer/parser for Go's `text/template` producing an AST with source lines.
//! 2. [`translate`]: AST → minijinja source, once per template file and per `define`. Go
//!    semantics are kept by construction rather than by hoping Jinja's match (see that module's
//!    docs): explicit dot variables per `with`/`range` level, Go variables in a namespace with one
//!    slot per declaration, field access/method calls/range through runtime helpers, all
//!    functions under an `h_` prefix. Lines are preserved so minijinja's error lines are the
//!    chart's lines.
//! 3. [`funcs`]: the runtime those templates call (Go value model: shared mutable maps, float64
//!    values, `%v` printing, Go builtins, Sprig/Helm functions, `.Files`, `.Capabilities`).
//! 4. This module: chart loading, values merge, built-in objects, rendering every template and
//!    splitting the output into objects.
//!
//! Why translate instead of interpreting the AST directly: minijinja then owns evaluation,
//! control flow, recursion limits and error locations, and the translation is cacheable per
//! chart digest. Where Jinja and Go differ (variable scoping, missing keys, printing, map order),
//! the generated code calls helpers with Go's semantics instead of relying on Jinja's, so the
//! translation is not lossy.
//!
//! See `README.md` next to this file for the status list (done / not done).

pub mod chart;
pub mod funcs;
pub mod gofmt;
pub mod hooks;
pub mod parse;
pub mod re2;
pub mod schema;
pub mod semver;
pub mod signatures;
pub mod translate;
pub mod value;
pub mod values;
pub mod yaml11;

use std::collections::BTreeMap;
use std::path::Path;

use minijinja::value::Value;
use minijinja::Environment;

use value::{from_json, ApiVersions, Files, GoMap, GoType};

/// `.Values` as helm passes it: a `chartutil.Values`, whose nested maps are plain maps.
fn values_object(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Object(o) => GoMap::typed(
            o.iter().map(|(k, v)| (k.clone(), from_json(v))).collect(),
            GoType::Values,
        ),
        other => from_json(other),
    }
}

/// Errors of the helm format. Template errors name the file and line.
#[derive(Debug, thiserror::Error)]
pub enum HelmError {
    /// A template failed to parse, translate or render.
    #[error("{file}:{line}: {msg}")]
    Template {
        /// The template's path, `<chart>/templates/<file>`.
        file: String,
        /// 1-based line in that file.
        line: usize,
        /// What went wrong, naming the construct.
        msg: String,
    },
    /// A template file is not valid Go template syntax (helm's `parse error at (file:line)`).
    #[error("parse error at ({file}:{line}): {msg}")]
    Parse {
        /// The template's path, `<chart>/templates/<file>`.
        file: String,
        /// 1-based line in that file.
        line: usize,
        /// What is wrong, in Go's parser's words.
        msg: String,
    },
    /// The chart itself is invalid or uses something not supported yet.
    #[error("chart {chart}: {msg}")]
    Chart {
        /// The chart's name (or directory).
        chart: String,
        /// What went wrong.
        msg: String,
    },
    /// `lookup` asked for objects the render has no answer for yet (see [`crate::Lookups`]).
    #[error("the chart looks up {} objects not read yet", .0.len())]
    LookupsNeeded(Vec<crate::LookupKey>),
    /// Reading the chart failed.
    #[error("reading {path}: {source}")]
    Io {
        /// The path being read.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl HelmError {
    /// A template error at `file:line`.
    pub fn template(file: &str, line: usize, msg: impl Into<String>) -> Self {
        HelmError::Template {
            file: file.to_string(),
            line,
            msg: msg.into(),
        }
    }
    /// A parse error at `file:line`.
    pub fn parse(file: &str, line: usize, msg: impl Into<String>) -> Self {
        HelmError::Parse {
            file: file.to_string(),
            line,
            msg: msg.into(),
        }
    }
    fn chart(chart: &str, msg: impl Into<String>) -> Self {
        HelmError::Chart {
            chart: chart.to_string(),
            msg: msg.into(),
        }
    }
}

/// Inputs besides the chart: release identity, user values and the cluster's capabilities.
#[derive(Debug, Clone)]
pub struct RenderOptions {
    /// `.Release.Name`.
    pub release_name: String,
    /// `.Release.Namespace`.
    pub namespace: String,
    /// User values (`config.helm.values`), merged over the chart's values.yaml.
    pub values: serde_json::Value,
    /// `.Capabilities.KubeVersion.Version`, e.g. `v1.33.0`.
    pub kube_version: String,
    /// `.Capabilities.APIVersions` (group/version and group/version/Kind strings).
    pub api_versions: Vec<String>,
    /// `.Release.IsUpgrade` (false means an install).
    pub is_upgrade: bool,
    /// `.Release.Revision`.
    pub revision: i64,
    /// The clock for `now`, as Unix seconds (UTC); `None` reads the system clock. Injected so
    /// renders can be reproducible.
    pub now: Option<i64>,
    /// Seed of the render's random source (`randAlphaNum`, `randAlpha`, `randNumeric`,
    /// `randAscii`, `randInt`, `uuidv4`, keys, serials and salts): the same seed and chart give
    /// the same output.
    pub seed: crate::RandomSeed,
    /// How `lookup` is answered (see [`crate::Lookups`]).
    pub lookups: crate::Lookups,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            release_name: "release-name".into(),
            namespace: "default".into(),
            values: serde_json::Value::Object(Default::default()),
            // helm's built-in defaults for `helm template` without a cluster.
            kube_version: "v1.20.0".into(),
            api_versions: default_api_versions(),
            is_upgrade: false,
            revision: 1,
            now: None,
            seed: [0; 32],
            lookups: crate::Lookups::Offline,
        }
    }
}

/// The API versions `helm template` reports without a cluster (helm's built-in set), in helm's
/// order. `default_api_versions.txt` was generated with helm v3.19.5 by ranging over
/// `.Capabilities.APIVersions` in a template.
pub fn default_api_versions() -> Vec<String> {
    include_str!("default_api_versions.txt")
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// The helm release whose behaviour this renderer reproduces (`.Capabilities.HelmVersion`).
pub const HELM_VERSION: &str = "v3.19.5";

/// One rendered template file.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedFile {
    /// `<chart>/templates/<path>`, as in helm's `# Source:` comments.
    pub source: String,
    /// The rendered text.
    pub content: String,
}

pub use chart::{load_archive, load_dir, Chart};

/// Chart.yaml as `.Chart` sees it: Go field names (Name, Version, AppVersion, ...), IsRoot.
fn chart_object(meta: &serde_json::Value, is_root: bool) -> Value {
    let mut m = metadata_fields(meta);
    m.insert(
        "Metadata".to_string(),
        GoMap::typed(m.clone(), GoType::Struct("chart.Metadata")),
    );
    m.insert("IsRoot".to_string(), Value::from(is_root));
    GoMap::typed(m, GoType::Struct("struct { chart.Metadata; IsRoot bool }"))
}

/// The fields of helm's `chart.Metadata` from Chart.yaml: every field is present (zero values
/// for absent keys), unknown keys are not (Go ignores them), maintainers and dependencies are
/// structs with Go field names.
fn metadata_fields(meta: &serde_json::Value) -> BTreeMap<String, Value> {
    let get = |k: &str| meta.get(k);
    // Chart metadata keeps strings as strings; only values.yaml numbers become float64.
    let text = |k: &str| -> Value {
        match get(k) {
            Some(serde_json::Value::String(s)) => Value::from(s.as_str()),
            Some(serde_json::Value::Number(n)) => Value::from(chart::metadata_number_text(n)),
            Some(serde_json::Value::Bool(b)) => Value::from(b.to_string()),
            _ => Value::from(""),
        }
    };
    let strings = |k: &str| -> Value {
        Value::from(
            get(k)
                .and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .map(|x| match x {
                            serde_json::Value::String(s) => Value::from(s.as_str()),
                            serde_json::Value::Number(n) => {
                                Value::from(chart::metadata_number_text(n))
                            }
                            other => Value::from(other.to_string()),
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
        )
    };
    let structs = |k: &str, ty: &'static str, fields: &[(&str, &str)]| -> Value {
        Value::from(
            get(k)
                .and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .map(|x| {
                            let f = fields
                                .iter()
                                .map(|(yaml, go)| {
                                    let v = match x.get(*yaml) {
                                        Some(serde_json::Value::Number(n)) => {
                                            Value::from(chart::metadata_number_text(n))
                                        }
                                        Some(v) => from_json(v),
                                        None if *go == "Enabled" => Value::from(false),
                                        None if *go == "Tags" || *go == "ImportValues" => {
                                            Value::from(Vec::<Value>::new())
                                        }
                                        None => Value::from(""),
                                    };
                                    (go.to_string(), v)
                                })
                                .collect();
                            GoMap::typed(f, GoType::Struct(ty))
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
        )
    };
    let annotations: BTreeMap<String, Value> = get("annotations")
        .and_then(|a| a.as_object())
        .map(|o| {
            o.iter()
                .map(|(k, v)| {
                    let v = match v {
                        serde_json::Value::String(s) => Value::from(s.as_str()),
                        serde_json::Value::Number(n) => Value::from(chart::metadata_number_text(n)),
                        other => Value::from(other.to_string()),
                    };
                    (k.clone(), v)
                })
                .collect()
        })
        .unwrap_or_default();
    [
        ("Name", text("name")),
        ("Home", text("home")),
        ("Sources", strings("sources")),
        ("Version", text("version")),
        ("Description", text("description")),
        ("Keywords", strings("keywords")),
        (
            "Maintainers",
            structs(
                "maintainers",
                "*chart.Maintainer",
                &[("name", "Name"), ("email", "Email"), ("url", "URL")],
            ),
        ),
        ("Icon", text("icon")),
        // helm's loader defaults a missing apiVersion to v1.
        (
            "APIVersion",
            Some(text("apiVersion"))
                .filter(|v| !v.as_str().is_some_and(str::is_empty))
                .unwrap_or(Value::from("v1")),
        ),
        ("Condition", text("condition")),
        ("Tags", text("tags")),
        ("AppVersion", text("appVersion")),
        (
            "Deprecated",
            Value::from(get("deprecated").and_then(|d| d.as_bool()).unwrap_or(false)),
        ),
        ("Annotations", GoMap::typed(annotations, GoType::StringMap)),
        ("KubeVersion", text("kubeVersion")),
        (
            "Dependencies",
            structs(
                "dependencies",
                "*chart.Dependency",
                &[
                    ("name", "Name"),
                    ("version", "Version"),
                    ("repository", "Repository"),
                    ("condition", "Condition"),
                    ("tags", "Tags"),
                    ("enabled", "Enabled"),
                    ("import-values", "ImportValues"),
                    ("alias", "Alias"),
                ],
            ),
        ),
        ("Type", text("type")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn kube_version_object(v: &str) -> Value {
    let t = v.trim_start_matches('v');
    let mut parts = t.split('.');
    let major = parts.next().unwrap_or_default().to_string();
    let minor = parts.next().unwrap_or_default().to_string();
    let m: BTreeMap<String, Value> = [
        ("Version".to_string(), Value::from(v)),
        ("GitVersion".to_string(), Value::from(v)),
        ("Major".to_string(), Value::from(major)),
        ("Minor".to_string(), Value::from(minor)),
    ]
    .into_iter()
    .collect();
    GoMap::typed(m, GoType::Addressable("chartutil.KubeVersion"))
}

/// A template to render, with the scope helm gives it.
struct Unit<'c> {
    /// `<chart path>/templates/<file>`, e.g. `parent/charts/sub/templates/a.yaml`.
    name: String,
    source: &'c str,
    /// `<chart path>`, e.g. `parent/charts/sub`: the key of its chart's top-level object.
    chart_path: String,
    render: bool,
}

fn collect_units<'c>(
    chart: &'c Chart,
    full_path: &str,
    crds: &mut Vec<RenderedFile>,
    out: &mut Vec<Unit<'c>>,
) {
    for (path, crd) in &chart.crds {
        crds.push(RenderedFile {
            source: format!("{full_path}/{path}"),
            content: crd.to_string(),
        });
    }
    for sub in &chart.subcharts {
        collect_units(
            sub,
            &format!("{full_path}/charts/{}", sub.name()),
            crds,
            out,
        );
    }
    for (path, src) in &chart.templates {
        let base = path.rsplit('/').next().unwrap_or(path);
        out.push(Unit {
            name: format!("{full_path}/{path}"),
            source: src,
            chart_path: full_path.to_string(),
            // Partials only define; library charts only provide defines.
            render: !base.starts_with('_') && !chart.is_library(),
        });
    }
}

/// The top-level objects of a chart and its subcharts, by chart path, as helm's `recAllTpls`
/// builds them: one per chart, shared by all its templates (so `.Values` set by one template is
/// seen by the next, as in helm), with `.Subcharts` mapping each subchart's name to the
/// subchart's own object. Before each template renders, `.Template` is set in its chart's
/// object (helm mutates the shared map too, so `.Subcharts.x.Template` is the last template of
/// `x` rendered).
fn chart_tops(
    chart: &Chart,
    full_path: &str,
    values: &serde_json::Value,
    is_root: bool,
    shared: &[(&str, Value)],
    out: &mut BTreeMap<String, Value>,
) -> Value {
    let mut subcharts = BTreeMap::new();
    // A subchart's values when this chart's values have no table for it.
    let no_values = serde_json::json!({});
    for sub in &chart.subcharts {
        let name = sub.name();
        let sv = values
            .get(&name)
            .filter(|v| v.is_object())
            .unwrap_or(&no_values);
        let top = chart_tops(
            sub,
            &format!("{full_path}/charts/{name}"),
            sv,
            false,
            shared,
            out,
        );
        subcharts.insert(name, top);
    }
    let mut top: BTreeMap<String, Value> = shared
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    top.insert("Values".into(), values_object(values));
    top.insert("Chart".into(), chart_object(&chart.metadata, is_root));
    top.insert(
        "Files".into(),
        Value::from_object(Files(std::sync::Arc::clone(&chart.files))),
    );
    top.insert("Subcharts".into(), GoMap::value(subcharts));
    let top = GoMap::value(top);
    out.insert(full_path.to_string(), top.clone());
    top
}

/// Renders a chart: returns the CRDs (untemplated, subcharts' included) followed by every
/// rendered template file except partials, NOTES.txt and library charts' files. NOTES.txt is
/// rendered (its errors surface, as in helm) but produces no objects.
pub fn render_chart(chart: &Chart, opts: &RenderOptions) -> Result<Vec<RenderedFile>, HelmError> {
    let name = chart.name();
    if chart.is_library() {
        return Err(HelmError::chart(
            &name,
            "library charts are not installable",
        ));
    }
    // helm refuses a chart whose kubeVersion constraint the cluster does not meet (the top
    // chart only); an unparsable constraint is incompatible too.
    if let Some(constraint) = chart
        .metadata
        .get("kubeVersion")
        .and_then(|v| v.as_str())
        .filter(|c| !c.is_empty())
    {
        if !semver::semver_compare(constraint, &opts.kube_version).unwrap_or(false) {
            return Err(HelmError::chart(
                &name,
                format!(
                    "chart requires kubeVersion: {constraint} which is incompatible with Kubernetes {}",
                    opts.kube_version
                ),
            ));
        }
    }
    let chart = chart::resolve_dependencies(chart, &opts.values)?;
    let values = chart::coalesce(&chart, &opts.values);
    validate_schemas(&chart, &values)?;
    let mut crds = Vec::new();
    let mut units = Vec::new();
    collect_units(&chart, &name, &mut crds, &mut units);
    // helm parses (and renders) templates deepest path first, then in reverse lexical order; a
    // later definition of the same define wins, so parents override subcharts.
    units.sort_by(|a, b| {
        let (da, db) = (a.name.matches('/').count(), b.name.matches('/').count());
        db.cmp(&da).then_with(|| b.name.cmp(&a.name))
    });

    let env = environment(&name, &units)?;

    let release: BTreeMap<String, Value> = [
        ("Name", Value::from(opts.release_name.as_str())),
        ("Namespace", Value::from(opts.namespace.as_str())),
        ("IsInstall", Value::from(!opts.is_upgrade)),
        ("IsUpgrade", Value::from(opts.is_upgrade)),
        ("Revision", Value::from(opts.revision)),
        ("Service", Value::from("Helm")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let caps: BTreeMap<String, Value> = [
        (
            "KubeVersion".to_string(),
            kube_version_object(&opts.kube_version),
        ),
        (
            "APIVersions".to_string(),
            Value::from_object(ApiVersions(opts.api_versions.clone())),
        ),
        (
            "HelmVersion".to_string(),
            GoMap::typed(
                [
                    ("Version".to_string(), Value::from(HELM_VERSION)),
                    ("GitCommit".to_string(), Value::from("")),
                    ("GitTreeState".to_string(), Value::from("")),
                ]
                .into_iter()
                .collect(),
                GoType::Struct("version.BuildInfo"),
            ),
        ),
    ]
    .into_iter()
    .collect();
    let shared = [
        ("Release", GoMap::value(release)),
        (
            "Capabilities",
            GoMap::typed(caps, GoType::Struct("*chartutil.Capabilities")),
        ),
    ];
    let mut tops = BTreeMap::new();
    chart_tops(&chart, &name, &values, true, &shared, &mut tops);
    let lookups = funcs::LookupTable::value(&opts.lookups);
    let rendered = render_units(&env, &units, &tops, opts.now, opts.seed, &lookups);
    // A lookup without an answer may be why a template failed: its answer comes first.
    if let Some(table) = lookups.downcast_object_ref::<funcs::LookupTable>() {
        let missing = table.missing();
        if !missing.is_empty() {
            return Err(HelmError::LookupsNeeded(missing));
        }
    }
    let mut out = crds;
    out.extend(rendered?);
    Ok(out)
}

/// Renders every unit that produces output, in helm's order, with the shared top-level objects,
/// the clock, the random source and the lookup answers.
fn render_units(
    env: &Environment<'static>,
    units: &[Unit<'_>],
    tops: &BTreeMap<String, Value>,
    now: Option<i64>,
    seed: [u8; 32],
    lookups: &Value,
) -> Result<Vec<RenderedFile>, HelmError> {
    let mut out = Vec::new();
    for u in units.iter().filter(|u| u.render) {
        // A random source per template file, keyed by the seed and the file's name: a call one
        // file skips (a password a `lookup` found) moves none of the values other files draw,
        // so a chart's second render after its install differs only where the lookup answered.
        let rng = funcs::Rng::value(funcs::Rng::derived_seed(&seed, &u.name));
        let template: BTreeMap<String, Value> = [
            ("Name".to_string(), Value::from(u.name.as_str())),
            (
                "BasePath".to_string(),
                Value::from(format!("{}/templates", u.chart_path)),
            ),
        ]
        .into_iter()
        .collect();
        let top = tops.get(&u.chart_path).cloned().unwrap_or_default();
        if let Some(m) = top.downcast_object_ref::<GoMap>() {
            m.0.lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert("Template".into(), GoMap::typed(template, GoType::Values));
        }
        let tmpl = env
            .get_template(&u.name)
            .map_err(|e| HelmError::template(&u.name, 0, e.to_string()))?;
        // Output is charged to the render's budget as it is written, so a template that
        // writes without end stops at the budget, not when memory runs out.
        let mut written = crate::budget::MeteredWriter::new(Vec::new());
        let failures = crate::budget::failures();
        tmpl.render_captured_to(
            minijinja::context! {
                __d0 => top,
                __now => now,
                __rng => rng,
                __lookups => lookups.clone(),
            },
            &mut written,
        )
        .map_err(|e| render_error(&u.name, &e, &define_files(units)))?;
        // A breach or refusal the template went on after (a function that turned it into a
        // value outside the checked calls) still fails the file.
        if crate::budget::failures() != failures {
            return Err(HelmError::template(
                &u.name,
                0,
                crate::budget::last_failure(),
            ));
        }
        let content = String::from_utf8(written.into_inner())
            .map_err(|e| HelmError::template(&u.name, 0, e.to_string()))?
            .replace(value::NO_VALUE, "");
        if u.name.ends_with("NOTES.txt") {
            continue;
        }
        out.push(RenderedFile {
            source: u.name.clone(),
            content,
        });
    }
    Ok(out)
}

/// Compiled environments by the digest of the template set (names, render flags and sources),
/// so a chart is translated once, not on every render.
static CACHE: std::sync::Mutex<
    Option<std::collections::HashMap<String, std::sync::Arc<Environment<'static>>>>,
> = std::sync::Mutex::new(None);
/// Bound on cached charts; the cache is simply emptied when full.
const CACHE_MAX: usize = 64;
/// How many template sets this process has translated (cache misses), for tests and benchmarks
/// that show an unchanged chart is not translated again.
static TRANSLATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The number of template sets translated so far in this process (see [`CACHE`]).
pub fn translations() -> u64 {
    TRANSLATIONS.load(std::sync::atomic::Ordering::Relaxed)
}

fn environment(
    chart: &str,
    units: &[Unit<'_>],
) -> Result<std::sync::Arc<Environment<'static>>, HelmError> {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    for u in units {
        for part in [
            u.name.as_bytes(),
            &[u8::from(u.render)],
            u.source.as_bytes(),
        ] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
    }
    let digest: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(env) = cache.as_ref().and_then(|c| c.get(&digest)) {
        return Ok(env.clone());
    }
    drop(cache);
    TRANSLATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let env = std::sync::Arc::new(build_environment(chart, units)?);
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    let map = cache.get_or_insert_with(Default::default);
    if map.len() >= CACHE_MAX {
        map.clear();
    }
    map.insert(digest, env.clone());
    Ok(env)
}

fn build_environment(chart: &str, units: &[Unit<'_>]) -> Result<Environment<'static>, HelmError> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .keep_trailing_newline(true)
        .build()
        .map_err(|e| HelmError::chart(chart, e.to_string()))?;
    env.set_syntax(syntax);
    env.set_recursion_limit(1000);
    funcs::register(&mut env);
    // Defines and files that are only included are compiled when first called: a big chart
    // calls a fraction of its subcharts' helpers. helm parses every template, and so does the
    // translation above (a template that does not parse still fails the chart).
    let mut on_call: std::collections::HashMap<String, String> = Default::default();
    for (u, t) in units.iter().zip(translate_units(chart, units)?) {
        for (dname, dsrc) in t.defines {
            // A later definition of the same name wins, as in helm.
            on_call.insert(translate::define_name(&dname), dsrc);
        }
        // Every file is a template of its own (partials and library files too), so that
        // `include (print $.Template.BasePath "/x.yaml") .` finds it, as in helm.
        if u.render {
            env.add_template_owned(u.name.clone(), t.main)
                .map_err(|e| untranslatable(&u.name, &e))?;
        } else {
            on_call.insert(u.name.clone(), t.main);
        }
    }
    env.set_loader(move |name| Ok(on_call.get(name).cloned()));
    Ok(env)
}

/// A generated template that does not compile: a bug of the translator. The compiler's own
/// wording would name nothing in the chart.
fn untranslatable(file: &str, e: &minijinja::Error) -> HelmError {
    HelmError::template(
        file,
        e.line().unwrap_or(0),
        "unsupported construct: pallet could not translate this template".to_string(),
    )
}

/// Every unit parsed and translated, in unit order, or the error of the first unit (in that
/// order) that fails. Units are independent and translating them is a large part of a big
/// chart's render, so they are translated on up to four threads, largest first (see
/// [`crate::parallel::map_in_parallel`]).
fn translate_units(
    chart: &str,
    units: &[Unit<'_>],
) -> Result<Vec<translate::Translated>, HelmError> {
    let known = funcs::known();
    let translate_one = |u: &Unit<'_>| {
        parse::parse(&u.name, u.source).and_then(|p| translate::translate(&u.name, &p, &known))
    };
    let results = crate::parallel::map_in_parallel(
        units,
        |u| u.source.len(),
        64 * 1024,
        translate_one,
        || {
            Err(HelmError::chart(
                chart,
                "translating the templates failed (a thread panicked)",
            ))
        },
    );
    results.into_iter().collect()
}

/// The Go type name of a value decoded from JSON, as `%T` prints it.
fn go_value_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "<nil>",
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Number(_) => "float64",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "[]interface {}",
        serde_json::Value::Object(_) => "map[string]interface {}",
    }
}

/// Validates every chart's values (its scope of the coalesced values) against its
/// values.schema.json, as helm does before rendering; all violations are reported together.
fn validate_schemas(chart: &Chart, values: &serde_json::Value) -> Result<(), HelmError> {
    let mut report = Vec::new();
    collect_schema_errors(chart, values, &mut report)?;
    if report.is_empty() {
        return Ok(());
    }
    Err(HelmError::chart(
        &chart.name(),
        format!(
            "values don't meet the specifications of the schema(s) in the following chart(s):\n{}",
            report.join("\n")
        ),
    ))
}

fn collect_schema_errors(
    chart: &Chart,
    values: &serde_json::Value,
    report: &mut Vec<String>,
) -> Result<(), HelmError> {
    let name = chart.name();
    if let Some(raw) = &chart.schema {
        if let Err(text) = schema::validate_document(raw, values) {
            report.push(format!("{name}:\n{text}"));
        }
    }
    for sub in &chart.subcharts {
        // helm 3.19 skips a subchart without values and names one whose values are no map.
        match values.get(sub.name()) {
            None | Some(serde_json::Value::Null) => {}
            Some(sv @ serde_json::Value::Object(_)) => collect_schema_errors(sub, sv, report)?,
            Some(other) => report.push(format!(
                "{}:\ninvalid type for values: expected object (map), got {}",
                sub.name(),
                go_value_type(other)
            )),
        }
    }
    Ok(())
}

/// Maps a minijinja error back to the chart file and line (the innermost template that failed).
/// The file each define comes from (the last definition wins, as in helm's parse order), for
/// errors: helm names the file a failing define is written in (`_helpers.tpl`), not the file
/// being rendered. Only computed when a render fails.
fn define_files(units: &[Unit<'_>]) -> BTreeMap<String, String> {
    static DEFINE: std::sync::OnceLock<Option<regex::Regex>> = std::sync::OnceLock::new();
    let mut files = BTreeMap::new();
    let Some(re) =
        DEFINE.get_or_init(|| regex::Regex::new(r#"\{\{-?\s*(?:define|block)\s+"([^"]+)""#).ok())
    else {
        return files;
    };
    for u in units {
        for c in re.captures_iter(u.source) {
            files.insert(c[1].to_string(), u.name.clone());
        }
    }
    files
}

fn render_error(file: &str, e: &minijinja::Error, defines: &BTreeMap<String, String>) -> HelmError {
    let mut inner: &dyn std::error::Error = e;
    let mut best = (
        e.name().unwrap_or(file).to_string(),
        e.line().unwrap_or(0),
        e.detail().unwrap_or("").to_string(),
    );
    // The templates that included the failing one, outermost first (helm names them all:
    // `executing "a.yaml" at <include ...>: error calling include: ...`).
    let mut callers: Vec<(String, usize)> = Vec::new();
    while let Some(src) = inner.source() {
        if let Some(me) = src.downcast_ref::<minijinja::Error>() {
            if let (Some(n), Some(l)) = (me.name(), me.line()) {
                let outer = std::mem::replace(
                    &mut best,
                    (n.to_string(), l, me.detail().unwrap_or("").to_string()),
                );
                if (outer.0.as_str(), outer.1) != (n, l) {
                    callers.push((outer.0, outer.1));
                }
            } else if let Some(d) = me.detail() {
                best.2 = d.to_string();
            }
        }
        inner = src;
    }
    let (name, line, detail) = best;
    let show = |name: &str| {
        name.strip_prefix("define:")
            .map(|d| {
                let at = defines.get(d).map_or(file, String::as_str);
                format!("{at} (in define \"{d}\")")
            })
            .unwrap_or_else(|| name.to_string())
    };
    let mut detail = if detail.is_empty() {
        e.to_string()
    } else {
        detail
    };
    // The innermost callers first; a deep recursion shows its outermost few.
    const SHOWN: usize = 4;
    for (caller, at) in callers.iter().take(SHOWN).rev() {
        detail.push_str(&format!("; included from {} line {at}", show(caller)));
    }
    if callers.len() > SHOWN {
        detail.push_str(&format!("; … {} more", callers.len() - SHOWN));
    }
    HelmError::template(&show(&name), line, detail)
}

/// helm's `SplitManifests` trims every rendered document (`strings.TrimSpace`) before it is
/// applied or printed: whitespace at the end of a document (the trailing newlines of a `|+`
/// block, a last line's trailing spaces) and at its start is not part of it. Returns the
/// documents joined with `---` lines. Line numbers after a trimmed document shift; they are
/// only used in messages about the rendered text.
pub fn trim_documents(content: &str) -> String {
    // One allocation for the whole text: a large file (a chart's CRDs) is not copied per
    // document first.
    manifest_documents(content).join("\n---\n")
}

/// Rendered text with U+0085, U+2028 or U+2029: helm's YAML 1.1 reader takes them as line
/// breaks (folding or breaking the document), the YAML reader here as ordinary characters, so
/// the objects would differ; such output is an error. So are the control characters go-yaml's
/// reader refuses (helm fails on them).
fn check_yaml11_breaks(source: &str, content: &str) -> Result<(), HelmError> {
    // Most output has none of the characters looked for below, so one byte pass decides whether
    // the line-by-line scan is needed: ASCII controls, U+007F..U+009F (0xC2 0x80..0x9F in
    // UTF-8), U+2028/U+2029 (0xE2 0x80 0xA8/0xA9) and U+FFFE/U+FFFF (0xEF 0xBF 0xBE/0xBF).
    let bytes = content.as_bytes();
    let suspicious_at = |i: usize| match bytes[i] {
        b'\t' | b'\n' | b'\r' => false,
        0x00..=0x1f | 0x7f => true,
        0xc2 => matches!(bytes.get(i + 1), Some(0x80..=0x9f)),
        0xe2 => bytes.get(i + 1) == Some(&0x80) && matches!(bytes.get(i + 2), Some(0xa8 | 0xa9)),
        0xef => bytes.get(i + 1) == Some(&0xbf) && matches!(bytes.get(i + 2), Some(0xbe | 0xbf)),
        _ => false,
    };
    // Blocks of printable ASCII (nearly all of it) are passed over whole: the test below has
    // no early exit, so the compiler checks many bytes at once.
    const BLOCK: usize = 256;
    let suspicious = bytes.chunks(BLOCK).enumerate().any(|(n, block)| {
        let plain = block.iter().fold(true, |all, &b| {
            all & (matches!(b, 0x20..=0x7e) | (b == b'\t') | (b == b'\n') | (b == b'\r'))
        });
        !plain && (n * BLOCK..n * BLOCK + block.len()).any(suspicious_at)
    });
    if !suspicious {
        return Ok(());
    }
    for (i, line) in content.lines().enumerate() {
        if let Some(c) = line
            .chars()
            .find(|c| matches!(c, '\u{85}' | '\u{2028}' | '\u{2029}'))
        {
            return Err(HelmError::template(
                source,
                i + 1,
                format!(
                    "unsupported construct: U+{:04X} in the rendered output (helm's YAML 1.1 reader takes it for a line break)",
                    c as u32
                ),
            ));
        }
        // go-yaml's reader refuses these outright, so helm fails on them.
        if let Some(c) = line.chars().find(|c| {
            matches!(c, '\u{0}'..='\u{8}' | '\u{b}' | '\u{c}' | '\u{e}'..='\u{1f}'
                | '\u{7f}'..='\u{84}' | '\u{86}'..='\u{9f}' | '\u{fffe}' | '\u{ffff}')
        }) {
            return Err(HelmError::template(
                source,
                i + 1,
                format!(
                    "control characters are not allowed (U+{:04X} in the rendered output)",
                    c as u32
                ),
            ));
        }
    }
    Ok(())
}

/// helm's `releaseutil.SplitManifests`: the documents of a rendered file, split where the
/// regular expression `(?:^|\s*\n)---\s*` matches and each trimmed, empty ones dropped. A
/// separator needs no line break after it: `---# comment` or `---apiVersion: v1` (a `{{-`
/// that ate the newline) start a document with the rest of the line.
pub fn split_manifests(content: &str) -> Vec<String> {
    manifest_documents(content)
        .into_iter()
        .map(str::to_string)
        .collect()
}

/// [`split_manifests`] as slices of `content`.
fn manifest_documents(content: &str) -> Vec<&str> {
    static SEP: std::sync::OnceLock<Option<regex::Regex>> = std::sync::OnceLock::new();
    let docs: Vec<&str> = match SEP
        .get_or_init(|| regex::Regex::new(r"(?:^|[\t\n\x0c\r ]*\n)---[\t\n\x0c\r ]*").ok())
    {
        Some(sep) => sep.split(content.trim()).collect(),
        None => vec![content],
    };
    docs.into_iter()
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect()
}

/// Splits rendered files into objects (YAML documents that are non-empty mappings).
///
/// Stand-in until the shared object model's manifest parser lands; then this delegates to it.
pub fn parse_objects(files: &[RenderedFile]) -> Result<Vec<serde_json::Value>, HelmError> {
    parse_objects_read_by(files, crate::object::from_yaml_str)
}

/// A YAML document reader for [`parse_objects_read_by`].
pub(crate) type DocumentReader = fn(&str) -> Result<serde_json::Value, serde_saphyr::Error>;

/// [`parse_objects`], each document read by `read` (kustomize's `helmCharts` read the output as
/// kustomize reads resources).
pub(crate) fn parse_objects_read_by(
    files: &[RenderedFile],
    read: DocumentReader,
) -> Result<Vec<serde_json::Value>, HelmError> {
    let parsed = files.iter().map(|f| parse_file_objects(f, read)).collect();
    Ok(first_error_in_path_order(files, parsed)?
        .into_iter()
        .flatten()
        .collect())
}

/// One rendered file's objects for [`parse_objects`].
fn parse_file_objects(
    f: &RenderedFile,
    read: DocumentReader,
) -> Result<Vec<serde_json::Value>, HelmError> {
    let mut out = Vec::new();
    check_yaml11_breaks(&f.source, &f.content)?;
    for doc in manifest_documents(&f.content) {
        let v: serde_json::Value = read(doc).map_err(|e| {
            HelmError::template(
                &f.source,
                0,
                format!(
                    "rendered output is not valid YAML: {}",
                    crate::object::yaml_error_message(&e)
                ),
            )
        })?;
        match v {
            serde_json::Value::Null => {}
            // helm drops hooks with an unknown event even from `helm template`.
            serde_json::Value::Object(ref o) if hook_disposition(o) == HookDisposition::Unknown => {
            }
            serde_json::Value::Object(_) => out.push(v),
            _ => {
                return Err(HelmError::template(
                    &f.source,
                    0,
                    "rendered document is not a mapping",
                ))
            }
        }
    }
    Ok(out)
}

/// Loads and renders the chart at `dir` into objects.
pub fn render(dir: &Path, opts: &RenderOptions) -> Result<Vec<serde_json::Value>, HelmError> {
    let chart = load_dir(dir)?;
    parse_objects(&render_chart(&chart, opts)?)
}

/// The helm format behind [`crate::render`]: renders the chart at `tree` with the release name,
/// namespace and values from `config`, then turns the output into the shared object model
/// (CRDs first, then templates in helm's order; namespaced objects without a namespace get the
/// install namespace, as `helm install` would apply them).
pub fn render_bundle(
    tree: &Path,
    config: &crate::RenderConfig,
) -> Result<crate::Rendered, crate::RenderError> {
    if config.helm.release_name.is_empty() {
        return Err(crate::RenderError::InvalidConfig {
            format: "helm",
            message: "releaseName must not be empty".into(),
        });
    }
    let user = match &config.helm.values {
        serde_json::Value::Null => serde_json::Map::new(),
        serde_json::Value::Object(map) => map.clone(),
        _ => {
            return Err(crate::RenderError::InvalidConfig {
                format: "helm",
                message: "values must be a mapping".into(),
            })
        }
    };
    let values = values::with_values_files(tree, &config.helm.values_files, &user)
        .map(serde_json::Value::Object)
        .map_err(|e| crate::RenderError::InvalidConfig {
            format: "helm",
            message: e.to_string(),
        })?;
    let mut opts = RenderOptions {
        release_name: config.helm.release_name.clone(),
        namespace: config.install_namespace.clone(),
        values,
        now: Some(config.helm.now),
        seed: config.helm.seed,
        lookups: config.helm.lookups.clone(),
        ..RenderOptions::default()
    };
    if let Some(capabilities) = &config.helm.capabilities {
        opts.kube_version = capabilities.kube_version.clone();
        opts.api_versions = capabilities.api_versions.clone();
    }
    let files = load_dir(tree)
        .and_then(|chart| render_chart(&chart, &opts))
        .map_err(to_render_error)?;
    let mut objects = Vec::new();
    let parsed = first_error_in_path_order(&files, parse_files_in_parallel(&files))?;
    for (file, parsed) in files.iter().zip(parsed) {
        let from_crds_dir = is_crds_dir_file(&file.source);
        objects.extend(
            parsed
                .into_iter()
                .filter(|o| {
                    matches!(
                        hook_disposition(o.body()),
                        HookDisposition::NotHook | HookDisposition::Apply
                    )
                })
                .map(|mut o| {
                    if from_crds_dir {
                        mark_chart_crd(&mut o);
                    }
                    o
                }),
        );
    }
    crate::plain::finish(objects, &config.install_namespace)
}

/// The annotation [`render_bundle`] puts on the objects of a chart's `crds/` directories (its
/// subcharts' included): the agent applies them by `config.helm.crds`, never prunes or deletes
/// them, and takes the annotation off before it applies them. In the object itself so that a
/// stored revision, which keeps the bodies only, still says which they are.
pub const CHART_CRD_ANNOTATION: &str = "pallet.dev/chart-crd";

/// True for a rendered file of a `crds/` directory: `<chart>(/charts/<sub>)*/crds/...`.
fn is_crds_dir_file(source: &str) -> bool {
    let mut parts = source.split('/');
    parts.next();
    loop {
        match parts.next() {
            Some("crds") => return true,
            Some("charts") => {
                parts.next();
            }
            _ => return false,
        }
    }
}

fn mark_chart_crd(object: &mut crate::Object) {
    let metadata = object
        .body_mut()
        .entry("metadata")
        .or_insert_with(|| serde_json::json!({}));
    if let Some(metadata) = metadata.as_object_mut() {
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| serde_json::json!({}));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(CHART_CRD_ANNOTATION.into(), "true".into());
        }
    }
}

/// True when `body` came from a chart's `crds/` directory (see [`CHART_CRD_ANNOTATION`]).
pub fn is_chart_crd(body: &serde_json::Map<String, serde_json::Value>) -> bool {
    body.get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(CHART_CRD_ANNOTATION))
        .and_then(serde_json::Value::as_str)
        == Some("true")
}

/// Takes the [`CHART_CRD_ANNOTATION`] off `body` (an annotations map it empties goes too).
pub fn unmark_chart_crd(body: &mut serde_json::Map<String, serde_json::Value>) {
    let Some(metadata) = body.get_mut("metadata").and_then(|m| m.as_object_mut()) else {
        return;
    };
    let emptied = match metadata
        .get_mut("annotations")
        .and_then(|a| a.as_object_mut())
    {
        // Only a map the marker was the last of goes: an empty one the chart wrote stays.
        Some(annotations) => {
            annotations.remove(CHART_CRD_ANNOTATION).is_some() && annotations.is_empty()
        }
        None => false,
    };
    if emptied {
        metadata.remove("annotations");
    }
}

/// The results of reading each rendered file, or the error of the first invalid file in path
/// order: helm reads the rendered files sorted by path (`releaseutil.SortManifests`), so of
/// several invalid files it names that one, whatever the render order.
fn first_error_in_path_order<T, E>(
    files: &[RenderedFile],
    results: Vec<Result<T, E>>,
) -> Result<Vec<T>, E> {
    let mut oks = Vec::with_capacity(results.len());
    let mut first: Option<(&str, E)> = None;
    for (f, r) in files.iter().zip(results) {
        match r {
            Ok(t) => oks.push(t),
            Err(e) => {
                if first.as_ref().is_none_or(|(s, _)| f.source.as_str() < *s) {
                    first = Some((&f.source, e));
                }
            }
        }
    }
    match first {
        Some((_, e)) => Err(e),
        None => Ok(oks),
    }
}

/// Each rendered file's objects, in file order. Reading the output as YAML is the largest part
/// of a big chart's render (kube-prometheus-stack: 5 MB, mostly CRDs) and files are independent,
/// so they are read on up to four threads, largest first: a chart's one big file of CRDs is
/// read beside the others rather than after them.
fn parse_files_in_parallel(
    files: &[RenderedFile],
) -> Vec<Result<Vec<crate::Object>, crate::RenderError>> {
    let parse = |f: &RenderedFile| {
        check_yaml11_breaks(&f.source, &f.content).map_err(to_render_error)?;
        crate::parse_manifests(&f.source, &trim_documents(&f.content))
    };
    // Small outputs are not worth a thread.
    crate::parallel::map_in_parallel(
        files,
        |f| f.content.len(),
        256 * 1024,
        parse,
        || {
            Err(crate::RenderError::InvalidConfig {
                format: "helm",
                message: "reading the rendered output failed (a parser thread panicked)".into(),
            })
        },
    )
}

/// What the agent does with a rendered object, by its `helm.sh/hook` annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookDisposition {
    /// Not a hook: part of the release's objects.
    NotHook,
    /// A hook the agent runs (install, upgrade, delete or test, alone or with other events):
    /// kept in the agent's object set; the agent runs it at its event (see
    /// [`hooks::parse_hook`] for its weight and delete policies).
    Apply,
    /// Not applied: hooks that only run on rollback (helm's rollback hooks; the agent's
    /// rollbacks re-apply a stored revision and run none).
    Skip,
    /// A hook naming an event helm 3 does not know (`crd-install`, `test-failure`, typos):
    /// helm skips the object entirely, even in `helm template`, and so does pallet.
    Unknown,
}

/// The agent's hook policy for one object (see [`HookDisposition`]). `helm template` prints
/// hooks like any object; [`render`] keeps them all (it is `helm template`), the agent's
/// [`render_bundle`] applies this policy.
pub fn hook_disposition(body: &serde_json::Map<String, serde_json::Value>) -> HookDisposition {
    match hooks::parse_hook(body) {
        Ok(None) => HookDisposition::NotHook,
        Err(_) => HookDisposition::Unknown,
        Ok(Some(hook)) if hook.events.iter().any(|e| e.runs_in_the_agent()) => {
            HookDisposition::Apply
        }
        Ok(Some(_)) => HookDisposition::Skip,
    }
}

fn to_render_error(e: HelmError) -> crate::RenderError {
    match e {
        HelmError::Template { file, line, msg } | HelmError::Parse { file, line, msg } => {
            crate::RenderError::InvalidObject {
                at: crate::SourceLocation {
                    file,
                    document: None,
                    line: u64::try_from(line).ok().filter(|l| *l > 0),
                },
                message: msg,
            }
        }
        HelmError::Chart { chart, msg } => crate::RenderError::InvalidConfig {
            format: "helm",
            message: format!("chart {chart}: {msg}"),
        },
        HelmError::Io { path, source } => crate::RenderError::Io { path, source },
        HelmError::LookupsNeeded(keys) => crate::RenderError::LookupsNeeded { keys },
    }
}

#[cfg(test)]
mod tests {
    use super::split_manifests;

    #[test]
    fn documents_split_as_helm_splits_them() {
        assert_eq!(
            split_manifests("a: 1\n---# note\nb: 2\n  \n---apiVersion: v1\n--- \nc: 3  \n"),
            vec!["a: 1", "# note\nb: 2", "apiVersion: v1", "c: 3"]
        );
        // The whitespace after a separator belongs to it, so a `---` right after it is text
        // (as in Go's regexp.Split, which helm uses).
        assert_eq!(split_manifests("a\n---\n\n---b"), vec!["a", "---b"]);
        // Only at the start of a line; `----` splits too (the rest starts the document).
        assert_eq!(
            split_manifests("x: a---b\n  ---\n----\ny: 1"),
            vec!["x: a---b\n  ---", "-\ny: 1"]
        );
    }

    #[test]
    fn unmarking_keeps_an_empty_annotations_map_the_chart_wrote() {
        let mut written = serde_json::json!({"metadata": {"name": "a", "annotations": {}}});
        let map = written.as_object_mut().unwrap();
        super::unmark_chart_crd(map);
        assert_eq!(map["metadata"]["annotations"], serde_json::json!({}));
        let mut marked = serde_json::json!({"metadata": {"name": "b",
            "annotations": {super::CHART_CRD_ANNOTATION: "true"}}});
        let map = marked.as_object_mut().unwrap();
        assert!(super::is_chart_crd(map));
        super::unmark_chart_crd(map);
        assert_eq!(marked, serde_json::json!({"metadata": {"name": "b"}}));
    }
}
