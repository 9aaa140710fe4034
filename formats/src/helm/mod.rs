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

pub mod funcs;
pub mod parse;
pub mod translate;

use std::collections::BTreeMap;
use std::path::Path;

use minijinja::value::Value;
use minijinja::Environment;

use funcs::{from_json, ApiVersions, Files, GoMap};

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
    /// The chart itself is invalid or uses something not supported yet.
    #[error("chart {chart}: {msg}")]
    Chart {
        /// The chart's name (or directory).
        chart: String,
        /// What went wrong.
        msg: String,
    },
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
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            release_name: "release-name".into(),
            namespace: "default".into(),
            values: serde_json::Value::Object(Default::default()),
            // helm's built-in defaults for `helm template` without a cluster.
            kube_version: "v1.20.0".into(),
            api_versions: Vec::new(),
            is_upgrade: false,
            revision: 1,
        }
    }
}

/// One rendered template file.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedFile {
    /// `<chart>/templates/<path>`, as in helm's `# Source:` comments.
    pub source: String,
    /// The rendered text.
    pub content: String,
}

/// A loaded chart (no subcharts yet).
#[derive(Debug, Clone)]
pub struct Chart {
    /// Parsed Chart.yaml.
    pub metadata: serde_json::Value,
    /// Parsed values.yaml.
    pub values: serde_json::Value,
    /// `templates/...` path → source, sorted.
    pub templates: BTreeMap<String, String>,
    /// Every other file (for `.Files`), relative path → bytes.
    pub files: BTreeMap<String, Vec<u8>>,
    /// `crds/...` files, emitted first and not templated.
    pub crds: BTreeMap<String, String>,
}

impl Chart {
    /// The chart's name from Chart.yaml.
    pub fn name(&self) -> String {
        self.metadata
            .get("name")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    }
}

fn read_yaml(chart: &str, text: &str, what: &str) -> Result<serde_json::Value, HelmError> {
    if text.trim().is_empty() {
        return Ok(serde_json::Value::Object(Default::default()));
    }
    let v: serde_json::Value = serde_saphyr::from_str(text)
        .map_err(|e| HelmError::chart(chart, format!("parsing {what}: {e}")))?;
    Ok(if v.is_null() {
        serde_json::Value::Object(Default::default())
    } else {
        v
    })
}

/// Patterns from `.helmignore` (a subset: `*`/`?` globs, trailing `/` for directories, `#`
/// comments). Negation is rejected rather than silently mis-applied.
fn helmignore(chart: &str, dir: &Path) -> Result<Vec<String>, HelmError> {
    let Ok(text) = std::fs::read_to_string(dir.join(".helmignore")) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for l in text.lines() {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if l.starts_with('!') {
            return Err(HelmError::chart(
                chart,
                format!("unsupported construct: negated .helmignore pattern {l}"),
            ));
        }
        out.push(l.to_string());
    }
    Ok(out)
}

fn ignored(patterns: &[String], rel: &str, is_dir: bool) -> bool {
    let base = rel.rsplit('/').next().unwrap_or(rel);
    patterns.iter().any(|p| {
        let (p, dir_only) = match p.strip_suffix('/') {
            Some(p) => (p, true),
            None => (p.as_str(), false),
        };
        if dir_only && !is_dir {
            return false;
        }
        let p = p.trim_start_matches('/');
        if p.contains('/') {
            simple_glob(p, rel)
        } else {
            simple_glob(p, base)
        }
    })
}

fn simple_glob(p: &str, n: &str) -> bool {
    fn m(p: &[u8], n: &[u8]) -> bool {
        match p.split_first() {
            None => n.is_empty(),
            Some((b'*', rest)) => (0..=n.len()).any(|i| m(rest, &n[i..])),
            Some((b'?', rest)) => !n.is_empty() && m(rest, &n[1..]),
            Some((c, rest)) => n.first() == Some(c) && m(rest, &n[1..]),
        }
    }
    m(p.as_bytes(), n.as_bytes())
}

fn walk(
    dir: &Path,
    rel: &str,
    ignore: &[String],
    out: &mut Vec<(String, Vec<u8>)>,
) -> Result<(), HelmError> {
    let io = |e| HelmError::Io {
        path: dir.display().to_string(),
        source: e,
    };
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(io)?
        .collect::<Result<_, _>>()
        .map_err(io)?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let r = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let path = e.path();
        let is_dir = path.is_dir();
        if ignored(ignore, &r, is_dir) {
            continue;
        }
        if is_dir {
            walk(&path, &r, ignore, out)?;
        } else {
            let data = std::fs::read(&path).map_err(|e| HelmError::Io {
                path: path.display().to_string(),
                source: e,
            })?;
            out.push((r, data));
        }
    }
    Ok(())
}

/// Loads a chart directory.
pub fn load_chart(dir: &Path) -> Result<Chart, HelmError> {
    let label = dir.display().to_string();
    let ignore = helmignore(&label, dir)?;
    let mut all = Vec::new();
    walk(dir, "", &ignore, &mut all)?;
    let text = |data: &[u8], path: &str| {
        String::from_utf8(data.to_vec())
            .map_err(|_| HelmError::chart(&label, format!("{path} is not UTF-8")))
    };
    let mut metadata = None;
    let mut values = serde_json::Value::Object(Default::default());
    let mut chart = Chart {
        metadata: serde_json::Value::Null,
        values: serde_json::Value::Null,
        templates: BTreeMap::new(),
        files: BTreeMap::new(),
        crds: BTreeMap::new(),
    };
    for (path, data) in all {
        match path.as_str() {
            "Chart.yaml" => metadata = Some(read_yaml(&label, &text(&data, &path)?, "Chart.yaml")?),
            "values.yaml" => values = read_yaml(&label, &text(&data, &path)?, "values.yaml")?,
            "values.schema.json" => {
                return Err(HelmError::chart(
                    &label,
                    "unsupported construct: values.schema.json validation (not implemented yet)",
                ))
            }
            "Chart.lock" => {}
            "requirements.yaml" | "requirements.lock" => {
                return Err(HelmError::chart(&label, "unsupported construct: requirements.yaml (apiVersion v1 dependencies, not implemented yet)"))
            }
            p if p.starts_with("charts/") => {
                return Err(HelmError::chart(
                    &label,
                    "unsupported construct: subcharts in charts/ (not implemented yet)",
                ))
            }
            p if p.starts_with("templates/") => {
                chart.templates.insert(path.clone(), text(&data, &path)?);
            }
            p if p.starts_with("crds/") => {
                chart.crds.insert(path.clone(), text(&data, &path)?);
            }
            _ => {}
        }
        // helm's loader: everything but Chart.yaml, Chart.lock, values.yaml, values.schema.json
        // and templates/ is visible through `.Files` (crds/ included).
        if !path.starts_with("templates/")
            && !matches!(
                path.as_str(),
                "Chart.yaml" | "Chart.lock" | "values.yaml" | "values.schema.json"
            )
        {
            chart.files.insert(path, data);
        }
    }
    let metadata = metadata.ok_or_else(|| HelmError::chart(&label, "Chart.yaml is missing"))?;
    let name = metadata
        .get("name")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    if name.is_empty() {
        return Err(HelmError::chart(&label, "Chart.yaml: name is required"));
    }
    if metadata
        .get("dependencies")
        .and_then(|d| d.as_array())
        .is_some_and(|d| !d.is_empty())
    {
        return Err(HelmError::chart(
            name,
            "unsupported construct: chart dependencies (not implemented yet)",
        ));
    }
    if metadata.get("type").and_then(|v| v.as_str()) == Some("library") {
        return Err(HelmError::chart(name, "library charts are not installable"));
    }
    chart.metadata = metadata;
    chart.values = values;
    Ok(chart)
}

/// Helm's value coalescing: `over` wins; maps merge recursively; `null` in `over` deletes.
pub fn merge_values(base: &serde_json::Value, over: &serde_json::Value) -> serde_json::Value {
    match (base, over) {
        (serde_json::Value::Object(b), serde_json::Value::Object(o)) => {
            let mut out = b.clone();
            for (k, v) in o {
                if v.is_null() {
                    out.remove(k);
                } else if let Some(bv) = b.get(k) {
                    out.insert(k.clone(), merge_values(bv, v));
                } else {
                    out.insert(k.clone(), v.clone());
                }
            }
            serde_json::Value::Object(out)
        }
        (_, o) => o.clone(),
    }
}

/// Chart.yaml as `.Chart` sees it: Go field names (Name, Version, AppVersion, ...).
fn chart_object(meta: &serde_json::Value) -> Value {
    let mut m = BTreeMap::new();
    if let Some(o) = meta.as_object() {
        for (k, v) in o {
            let mut key = String::new();
            let mut chars = k.chars();
            if let Some(c) = chars.next() {
                key.extend(c.to_uppercase());
                key.extend(chars);
            }
            let key = match key.as_str() {
                "ApiVersion" => "APIVersion".to_string(),
                "KubeVersion" => "KubeVersion".to_string(),
                _ => key,
            };
            // Chart metadata keeps strings as strings; only values.yaml numbers become float64.
            let val = match v {
                serde_json::Value::Number(n) => Value::from(n.to_string()),
                other => from_json(other),
            };
            m.insert(key, val);
        }
    }
    for k in [
        "Name",
        "Version",
        "AppVersion",
        "Description",
        "Type",
        "KubeVersion",
        "Home",
        "Icon",
    ] {
        m.entry(k.to_string()).or_insert_with(|| Value::from(""));
    }
    GoMap::value(m)
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
    GoMap::value(m)
}

/// Renders a chart: returns the CRDs (untemplated) and every rendered template file except
/// partials (`_*`), in helm's order of `# Source:` paths. NOTES.txt is rendered (errors surface)
/// but not returned, since it produces no objects.
pub fn render_chart(chart: &Chart, opts: &RenderOptions) -> Result<Vec<RenderedFile>, HelmError> {
    let name = chart.name();
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .keep_trailing_newline(true)
        .build()
        .map_err(|e| HelmError::chart(&name, e.to_string()))?;
    env.set_syntax(syntax);
    env.set_recursion_limit(1000);
    funcs::register(&mut env);
    let known = funcs::known();
    // Helm parses every template into one namespace; a later define of the same name wins.
    let mut mains = Vec::new();
    for (path, src) in &chart.templates {
        let file = format!("{name}/{path}");
        let parsed = parse::parse(&file, src)?;
        let t = translate::translate(&file, &parsed, &known)?;
        for (dname, dsrc) in t.defines {
            env.add_template_owned(translate::define_name(&dname), dsrc)
                .map_err(|e| {
                    HelmError::template(
                        &file,
                        e.line().unwrap_or(0),
                        format!("translation failed: {e}"),
                    )
                })?;
        }
        let base = path.rsplit('/').next().unwrap_or(path);
        if !base.starts_with('_') {
            env.add_template_owned(file.clone(), t.main).map_err(|e| {
                HelmError::template(
                    &file,
                    e.line().unwrap_or(0),
                    format!("translation failed: {e}"),
                )
            })?;
            mains.push(file);
        }
    }
    let values = from_json(&merge_values(&chart.values, &opts.values));
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
    ]
    .into_iter()
    .collect();
    let files = Value::from_object(Files(chart.files.clone()));
    let mut out = Vec::new();
    for (path, crd) in &chart.crds {
        out.push(RenderedFile {
            source: format!("{name}/{path}"),
            content: crd.clone(),
        });
    }
    for file in mains {
        let template: BTreeMap<String, Value> = [
            ("Name".to_string(), Value::from(file.as_str())),
            (
                "BasePath".to_string(),
                Value::from(format!("{name}/templates")),
            ),
        ]
        .into_iter()
        .collect();
        let top: BTreeMap<String, Value> = [
            ("Values".to_string(), values.clone()),
            ("Release".to_string(), GoMap::value(release.clone())),
            ("Chart".to_string(), chart_object(&chart.metadata)),
            ("Capabilities".to_string(), GoMap::value(caps.clone())),
            ("Files".to_string(), files.clone()),
            ("Template".to_string(), GoMap::value(template)),
        ]
        .into_iter()
        .collect();
        let tmpl = env
            .get_template(&file)
            .map_err(|e| HelmError::template(&file, 0, e.to_string()))?;
        let content = tmpl
            .render(minijinja::context! { __d0 => GoMap::value(top) })
            .map_err(|e| render_error(&file, &e))?;
        if file.ends_with("NOTES.txt") {
            continue;
        }
        out.push(RenderedFile {
            source: file,
            content,
        });
    }
    Ok(out)
}

/// Maps a minijinja error back to the chart file and line (the innermost template that failed).
fn render_error(file: &str, e: &minijinja::Error) -> HelmError {
    let mut inner: &dyn std::error::Error = e;
    let mut best = (
        e.name().unwrap_or(file).to_string(),
        e.line().unwrap_or(0),
        e.detail().unwrap_or("").to_string(),
    );
    while let Some(src) = inner.source() {
        if let Some(me) = src.downcast_ref::<minijinja::Error>() {
            if let (Some(n), Some(l)) = (me.name(), me.line()) {
                best = (n.to_string(), l, me.detail().unwrap_or("").to_string());
            } else if let Some(d) = me.detail() {
                best.2 = d.to_string();
            }
        }
        inner = src;
    }
    let (name, line, detail) = best;
    let name = name
        .strip_prefix("define:")
        .map(|d| format!("{file} (in define \"{d}\")"))
        .unwrap_or(name);
    HelmError::template(
        &name,
        line,
        if detail.is_empty() {
            e.to_string()
        } else {
            detail
        },
    )
}

/// Splits rendered files into objects (YAML documents that are non-empty mappings).
///
/// Stand-in until the shared object model's manifest parser lands; then this delegates to it.
pub fn parse_objects(files: &[RenderedFile]) -> Result<Vec<serde_json::Value>, HelmError> {
    let mut out = Vec::new();
    for f in files {
        for doc in split_documents(&f.content) {
            if doc.trim().is_empty() {
                continue;
            }
            let v: serde_json::Value = serde_saphyr::from_str(&doc).map_err(|e| {
                HelmError::template(
                    &f.source,
                    0,
                    format!("rendered output is not valid YAML: {e}"),
                )
            })?;
            match v {
                serde_json::Value::Null => {}
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
    }
    Ok(out)
}

fn split_documents(s: &str) -> Vec<String> {
    let mut docs = vec![String::new()];
    for line in s.split_inclusive('\n') {
        if line.trim_end() == "---" || line.starts_with("--- ") {
            docs.push(String::new());
            continue;
        }
        if let Some(d) = docs.last_mut() {
            d.push_str(line);
        }
    }
    docs
}

/// Loads and renders the chart at `dir` into objects.
pub fn render(dir: &Path, opts: &RenderOptions) -> Result<Vec<serde_json::Value>, HelmError> {
    let chart = load_chart(dir)?;
    parse_objects(&render_chart(&chart, opts)?)
}
