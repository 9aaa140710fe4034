//! Chart loading (directories and `.tgz` subcharts), `.helmignore`, dependency resolution
//! (aliases, `condition`, `tags`) and Helm's values coalescing (scoping, `global`).

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::Path;
use std::sync::Arc;

use crate::archive::{self, CountingReader, Meter, RecordError, DEFAULT_MAX_RECORD_BYTES};

use serde_json::{Map, Value as Json};

use super::HelmError;

/// A loaded chart and its subcharts.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Parsed Chart.yaml (`name` replaced by the alias when the parent aliases it).
    pub metadata: Json,
    /// Parsed values.yaml (an object).
    pub values: Json,
    /// `templates/...` path → source (shared, as [`Chart::crds`]).
    pub templates: BTreeMap<String, Arc<str>>,
    /// Every file `.Files` sees (helm's loader: not Chart.yaml/values/schema/templates/charts);
    /// shared with the rendered chart's `.Files`, not copied into it.
    pub files: Arc<BTreeMap<String, Vec<u8>>>,
    /// `crds/...` files, emitted first and not templated. Shared: a chart's CRDs can be
    /// megabytes, and the chart is copied while its dependencies are resolved.
    pub crds: BTreeMap<String, Arc<str>>,
    /// values.schema.json, if present.
    pub schema: Option<Vec<u8>>,
    /// Subcharts from `charts/` (directories and `.tgz` archives).
    pub subcharts: Vec<Chart>,
}

impl Chart {
    /// The chart's name from Chart.yaml (or its alias).
    pub fn name(&self) -> String {
        self.metadata
            .get("name")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    }

    /// True for `type: library` charts (defines only, nothing rendered).
    pub fn is_library(&self) -> bool {
        self.metadata.get("type").and_then(|v| v.as_str()) == Some("library")
    }

    fn dependencies(&self) -> Vec<Json> {
        self.metadata
            .get("dependencies")
            .and_then(|d| d.as_array())
            .cloned()
            .unwrap_or_default()
    }
}

fn chart_err(chart: &str, msg: impl Into<String>) -> HelmError {
    HelmError::Chart {
        chart: chart.to_string(),
        msg: msg.into(),
    }
}

fn read_yaml(chart: &str, data: &[u8], what: &str) -> Result<Json, HelmError> {
    let text =
        std::str::from_utf8(data).map_err(|_| chart_err(chart, format!("{what} is not UTF-8")))?;
    if text.trim().is_empty() {
        return Ok(Json::Object(Map::new()));
    }
    let v: Json =
        super::yaml11::parse(text).map_err(|e| chart_err(chart, format!("parsing {what}: {e}")))?;
    Ok(if v.is_null() {
        Json::Object(Map::new())
    } else {
        v
    })
}

/// `.helmignore` rules (a subset: `*`/`?` globs, trailing `/` for directories, `#` comments).
/// Negation is rejected rather than silently mis-applied.
fn helmignore(chart: &str, data: Option<&[u8]>) -> Result<Vec<String>, HelmError> {
    let Some(data) = data else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for l in String::from_utf8_lossy(data).lines() {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if l.starts_with('!') {
            return Err(chart_err(
                chart,
                format!("unsupported construct: negated .helmignore pattern {l}"),
            ));
        }
        out.push(l.to_string());
    }
    Ok(out)
}

/// True when `c` is in the glob character class `set` (its inside, after any negation):
/// single characters and `a-z` ranges. Shared by `.helmignore` and `.Files.Glob` matching.
pub(crate) fn class_contains(set: &[char], c: char) -> bool {
    let mut i = 0;
    while i < set.len() {
        if i + 2 < set.len() && set[i + 1] == '-' {
            if (set[i]..=set[i + 2]).contains(&c) {
                return true;
            }
            i += 3;
        } else {
            if set[i] == c {
                return true;
            }
            i += 1;
        }
    }
    false
}

/// Go's `filepath.Match`, which helm's `.helmignore` rules use: `*` within a path segment,
/// `?`, `[a-z]`/`[^a]` sets, `\\` escapes.
fn simple_glob(p: &str, n: &str) -> bool {
    fn m(p: &[char], n: &[char]) -> bool {
        match p.split_first() {
            None => n.is_empty(),
            Some(('*', rest)) => (0..=n.len())
                .take_while(|&i| i == 0 || n[i - 1] != '/')
                .any(|i| m(rest, &n[i..])),
            Some(('?', rest)) => n.first().is_some_and(|c| *c != '/') && m(rest, &n[1..]),
            Some(('[', rest)) => {
                let Some(close) = rest.iter().skip(1).position(|c| *c == ']').map(|i| i + 1) else {
                    return false;
                };
                let (negate, set) = match rest[..close].split_first() {
                    Some(('^', s)) => (true, s),
                    _ => (false, &rest[..close]),
                };
                let Some(&c) = n.first().filter(|c| **c != '/') else {
                    return false;
                };
                class_contains(set, c) != negate && m(&rest[close + 1..], &n[1..])
            }
            Some(('\\', rest)) if !rest.is_empty() => {
                n.first() == Some(&rest[0]) && m(&rest[1..], &n[1..])
            }
            Some((c, rest)) => n.first() == Some(c) && m(rest, &n[1..]),
        }
    }
    m(
        &p.chars().collect::<Vec<_>>(),
        &n.chars().collect::<Vec<_>>(),
    )
}

/// Whether `rel` (or one of its parent directories) matches an ignore rule.
fn ignored(patterns: &[String], rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    (0..parts.len()).any(|i| {
        let sub = parts[..=i].join("/");
        let is_dir = i + 1 < parts.len();
        patterns.iter().any(|p| {
            let (p, dir_only) = match p.strip_suffix('/') {
                Some(p) => (p, true),
                None => (p.as_str(), false),
            };
            if dir_only && !is_dir {
                return false;
            }
            // A leading `/` or any `/` matches the whole path from the chart root; otherwise
            // only the file or directory name, at any depth.
            match p.strip_prefix('/') {
                Some(rooted) => simple_glob(rooted, &sub),
                None if p.contains('/') => simple_glob(p, &sub),
                None => simple_glob(p, parts[i]),
            }
        })
    })
}

/// The most bytes a loaded chart may hold in memory: its files plus every subchart archive
/// inflated, nested ones included. Charts are kilobytes to a few megabytes; this bound is for
/// archives built to inflate.
pub const MAX_CHART_BYTES: u64 = 128 << 20;

fn io_at(path: &Path) -> impl Fn(std::io::Error) -> HelmError + '_ {
    move |source| HelmError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The budget a chart's loaded bytes are charged to, as refusals name it.
pub const CHART_BYTES_BUDGET: &str =
    "chart size once loaded (bytes of files and inflated subchart archives)";

/// The refusal when a chart's files pass the loader's budget: `what` took it to `value` bytes.
/// Recorded as the render's budget breach, so it is reported as one.
fn over_budget(label: &str, what: &str, value: u64, meter: &Meter) -> HelmError {
    let breach = crate::budget::breach(crate::BudgetBreach::new(
        CHART_BYTES_BUDGET,
        meter.limit(),
        format!("{value}+"),
    ));
    chart_err(label, format!("{what}: {breach}"))
}

/// Reads every file under `dir`. Directory symlinks are refused, never entered: a link to an
/// ancestor would make the walk endless; a symlinked file is read through its link.
fn walk(
    root: &str,
    dir: &Path,
    rel: &str,
    meter: &Meter,
    out: &mut Vec<(String, Vec<u8>)>,
) -> Result<(), HelmError> {
    let io = io_at(dir);
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(&io)?
        .collect::<Result<_, _>>()
        .map_err(&io)?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let r = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let path = e.path();
        let file_type = e.file_type().map_err(io_at(&path))?;
        if file_type.is_dir() {
            walk(root, &path, &r, meter, out)?;
            continue;
        }
        // What the entry is once links are followed; a dangling link is no file.
        let Ok(target) = std::fs::metadata(&path) else {
            continue;
        };
        if target.is_dir() {
            return Err(chart_err(
                root,
                format!("{r} is a symlink to a directory; directory links are not followed"),
            ));
        }
        if !target.is_file() {
            continue;
        }
        if meter.charge(target.len()).is_err() {
            return Err(over_budget(root, &r, meter.count(), meter));
        }
        let mut data = Vec::with_capacity(target.len() as usize);
        std::fs::File::open(&path)
            .and_then(|f| f.take(target.len()).read_to_end(&mut data))
            .map_err(io_at(&path))?;
        out.push((r, data));
    }
    Ok(())
}

/// Loads a chart directory (with its subcharts), skipping what its `.helmignore` lists.
///
/// As in helm's `LoadDir`, only the top chart's `.helmignore` applies, to every path under it
/// (`charts/sub/...` included); a directory subchart's own `.helmignore` is not read (helm
/// applies it only when packaging that subchart, and an archive is loaded as it is).
pub fn load_dir(dir: &Path) -> Result<Chart, HelmError> {
    load_dir_within(dir, MAX_CHART_BYTES)
}

/// [`load_dir`] with a budget of `max_bytes` for the chart's files and inflated subcharts.
pub fn load_dir_within(dir: &Path, max_bytes: u64) -> Result<Chart, HelmError> {
    let meter = Meter::new(max_bytes);
    let mut files = Vec::new();
    let label = dir.display().to_string();
    walk(&label, dir, "", &meter, &mut files)?;
    let ignore = helmignore(
        &label,
        files
            .iter()
            .find(|(p, _)| p == ".helmignore")
            .map(|(_, d)| d.as_slice()),
    )?;
    files.retain(|(p, _)| !ignored(&ignore, p));
    load_files_metered(&label, files, &meter)
}

/// Helm 2's `requirements.yaml` as helm 3's loader reads it: its `dependencies` become the
/// chart's (any apiVersion; helm warns for v2), and in an apiVersion v1 chart it and
/// `requirements.lock` are also files of the chart (`.Files`).
fn apply_requirements(
    label: &str,
    chart: &mut Chart,
    requirements: Vec<(String, Vec<u8>)>,
) -> Result<(), HelmError> {
    let v1 = chart.metadata.get("apiVersion").and_then(Json::as_str) == Some("v1")
        || chart.metadata.get("apiVersion").is_none();
    for (path, data) in requirements {
        if path == "requirements.yaml" {
            let parsed = read_yaml(label, &data, "requirements.yaml")?;
            if let (Some(deps), Some(meta)) = (
                parsed.get("dependencies").filter(|d| !d.is_null()),
                chart.metadata.as_object_mut(),
            ) {
                meta.insert("dependencies".into(), deps.clone());
            }
        }
        if v1 {
            Arc::make_mut(&mut chart.files).insert(path, data);
        }
    }
    Ok(())
}

/// Loads a chart from its files (paths relative to the chart root), as helm's `LoadFiles`:
/// every file given is used (no `.helmignore`).
pub fn load_files(label: &str, files: Vec<(String, Vec<u8>)>) -> Result<Chart, HelmError> {
    load_files_metered(label, files, &Meter::new(MAX_CHART_BYTES))
}

/// [`load_files`], charging subchart archives to `meter` as they inflate.
fn load_files_metered(
    label: &str,
    files: Vec<(String, Vec<u8>)>,
    meter: &Arc<Meter>,
) -> Result<Chart, HelmError> {
    let mut chart = Chart {
        metadata: Json::Null,
        values: Json::Object(Map::new()),
        templates: BTreeMap::new(),
        files: Arc::default(),
        crds: BTreeMap::new(),
        schema: None,
        subcharts: Vec::new(),
    };
    let mut sub_dirs: BTreeMap<String, Vec<(String, Vec<u8>)>> = BTreeMap::new();
    let mut sub_archives = Vec::new();
    let mut requirements = Vec::new();
    let text = |data: Vec<u8>, path: &str| {
        String::from_utf8(data).map_err(|_| chart_err(label, format!("{path} is not UTF-8")))
    };
    for (path, data) in files {
        match path.as_str() {
            "Chart.yaml" => chart.metadata = read_yaml(label, &data, "Chart.yaml")?,
            "values.yaml" => chart.values = read_yaml(label, &data, "values.yaml")?,
            "values.schema.json" => chart.schema = Some(data),
            "Chart.lock" => {}
            // Read once Chart.yaml is (below), as helm's loader reads them after it.
            "requirements.yaml" | "requirements.lock" => requirements.push((path, data)),
            p if p.starts_with("templates/") => {
                chart
                    .templates
                    .insert(path.clone(), Arc::from(text(data, &path)?));
            }
            p if p.starts_with("charts/") => {
                let rest = &p["charts/".len()..];
                match rest.split_once('/') {
                    Some((dir, inner)) => sub_dirs
                        .entry(dir.to_string())
                        .or_default()
                        .push((inner.to_string(), data)),
                    None if rest.ends_with(".tgz") || rest.ends_with(".tar.gz") => {
                        sub_archives.push((path.clone(), data))
                    }
                    None => {}
                }
            }
            p => {
                if p.starts_with("crds/") {
                    let crd = std::str::from_utf8(&data)
                        .map_err(|_| chart_err(label, format!("{path} is not UTF-8")))?;
                    chart.crds.insert(path.clone(), Arc::from(crd));
                }
                Arc::make_mut(&mut chart.files).insert(path, data);
            }
        }
    }
    if chart.metadata.is_null() {
        return Err(chart_err(label, "Chart.yaml is missing"));
    }
    apply_requirements(label, &mut chart, requirements)?;
    validate_metadata(label, &chart.metadata)?;
    let name = chart.name();
    if !chart.values.is_object() {
        return Err(chart_err(&name, "values.yaml must be a mapping"));
    }
    for (dir, files) in sub_dirs {
        chart.subcharts.push(load_files_metered(
            &format!("{name}/charts/{dir}"),
            files,
            meter,
        )?);
    }
    for (path, data) in sub_archives {
        chart.subcharts.push(load_archive_metered(
            &format!("{name}/{path}"),
            &data,
            meter,
        )?);
    }
    Ok(chart)
}

/// A Chart.yaml number read into one of `chart.Metadata`'s string fields, as helm's YAML reader
/// (sigs.k8s.io/yaml) converts it: an integer in decimal (`012` is 10, `0x1F` 31), a float as
/// Go's `strconv.FormatFloat(f, 'g', -1, 32)` (`appVersion: 1.0` is "1", `1.10` is "1.1").
pub(crate) fn metadata_number_text(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    // Rust prints the shortest digits that read back as the same f32, like Go's -1 precision.
    let e = format!("{:e}", f as f32);
    let Some((mantissa, exp)) = e.split_once('e') else {
        return e;
    };
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{frac}e{esign}{:02}", exp.abs());
    }
    let point = exp + 1;
    let body = if point <= 0 {
        format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
    } else if point as usize >= digits.len() {
        format!("{digits}{}", "0".repeat(point as usize - digits.len()))
    } else {
        let (int, frac) = digits.split_at(point as usize);
        format!("{int}.{frac}")
    };
    format!("{sign}{body}")
}

/// helm's `Metadata.Validate` (run by its loader on every chart, subcharts too): name and
/// version present and valid, a known type, aliases made of `[A-Za-z0-9_-]`, no two
/// dependencies with the same name or alias.
fn validate_metadata(label: &str, md: &Json) -> Result<(), HelmError> {
    let invalid = |msg: String| chart_err(label, format!("validation: {msg}"));
    let text = |k: &str| -> String {
        match md.get(k) {
            Some(Json::String(s)) => s.clone(),
            Some(Json::Number(n)) => metadata_number_text(n),
            _ => String::new(),
        }
    };
    let name = text("name");
    if name.is_empty() {
        return Err(invalid("chart.metadata.name is required".into()));
    }
    if name.contains('/') || name == "." || name == ".." {
        return Err(invalid(format!("chart.metadata.name {name:?} is invalid")));
    }
    let version = text("version");
    if version.is_empty() {
        return Err(invalid("chart.metadata.version is required".into()));
    }
    if super::semver::semver(&version).is_err() {
        return Err(invalid(format!(
            "chart.metadata.version {version:?} is invalid"
        )));
    }
    if !matches!(text("type").as_str(), "" | "application" | "library") {
        return Err(invalid(
            "chart.metadata.type must be application or library".into(),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for dep in md
        .get("dependencies")
        .and_then(|d| d.as_array())
        .into_iter()
        .flatten()
    {
        let dname = dep.get("name").and_then(|v| v.as_str()).unwrap_or_default();
        let alias = dep
            .get("alias")
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        if !alias.is_empty()
            && !alias
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(invalid(format!(
                "dependency {dname:?} has disallowed characters in the alias"
            )));
        }
        let key = if alias.is_empty() { dname } else { alias };
        if !seen.insert(key.to_string()) {
            return Err(invalid(format!(
                "more than one dependency with name or alias {key:?}"
            )));
        }
    }
    Ok(())
}

/// Loads a chart from a `.tgz` (one top-level directory holding the chart).
pub fn load_archive(label: &str, data: &[u8]) -> Result<Chart, HelmError> {
    load_archive_metered(label, data, &Meter::new(MAX_CHART_BYTES))
}

/// [`load_archive`], charging every inflated byte to `meter` and refusing oversized header
/// records, so a small archive cannot inflate past the chart's budget.
fn load_archive_metered(label: &str, data: &[u8], meter: &Arc<Meter>) -> Result<Chart, HelmError> {
    let reader = CountingReader::new(flate2::read::GzDecoder::new(data), meter.clone());
    let mut files = Vec::new();
    let mut current = String::new();
    let result = archive::read_entries(reader, DEFAULT_MAX_RECORD_BYTES, |entry, body| {
        current = entry.path.to_string_lossy().replace('\\', "/");
        if !entry.kind.is_file() {
            return Ok(());
        }
        let Some((_, inner)) = current.split_once('/') else {
            return Ok(());
        };
        if inner.split('/').any(|c| c == "..") {
            return Err(
                chart_err(label, format!("archive path escapes the chart: {current}")).into(),
            );
        }
        let inner = inner.to_string();
        // Refused on its declared size before any of it is held in memory.
        let reached = meter.count().saturating_add(entry.size);
        if reached > meter.limit() {
            let what = format!("subchart archive entry {current} ({} bytes)", entry.size);
            return Err(over_budget(label, &what, reached, meter).into());
        }
        let mut buf = Vec::with_capacity(entry.size.min(1 << 20) as usize);
        body.take(entry.size)
            .read_to_end(&mut buf)
            .map_err(|e| ArchiveLoadError::Chart(archive_read_error(label, &current, meter, e)))?;
        files.push((inner, buf));
        Ok(())
    });
    match result {
        Ok(()) => load_files_metered(label, files, meter),
        Err(ArchiveLoadError::Chart(e)) => Err(e),
        Err(ArchiveLoadError::Record(RecordError::Io(e))) => {
            Err(archive_read_error(label, &current, meter, e))
        }
        Err(ArchiveLoadError::Record(e)) => Err(chart_err(label, e.to_string())),
    }
}

/// What reading a subchart archive can fail with.
enum ArchiveLoadError {
    Chart(HelmError),
    Record(RecordError),
}

impl From<HelmError> for ArchiveLoadError {
    fn from(e: HelmError) -> Self {
        ArchiveLoadError::Chart(e)
    }
}

impl From<RecordError> for ArchiveLoadError {
    fn from(e: RecordError) -> Self {
        ArchiveLoadError::Record(e)
    }
}

fn archive_read_error(label: &str, entry: &str, meter: &Meter, e: std::io::Error) -> HelmError {
    if meter.stopped().is_some() {
        let what = if entry.is_empty() {
            "subchart archive".to_string()
        } else {
            format!("subchart archive entry {entry}")
        };
        return over_budget(label, &what, meter.count(), meter);
    }
    HelmError::Io {
        path: label.to_string(),
        source: e,
    }
}

/// Applies aliases, then `tags` and `condition` against the coalesced values, removing disabled
/// subcharts (recursively), as helm's `ProcessDependencies` does. Returns the pruned chart.
pub fn resolve_dependencies(chart: &Chart, user: &Json) -> Result<Chart, HelmError> {
    let aliased = apply_aliases(chart)?;
    let cvals = coalesce_mode(&aliased, user, true);
    let mut out = aliased;
    prune(&mut out, &cvals, "")?;
    import_values(&mut out)?;
    Ok(out)
}

fn apply_aliases(chart: &Chart) -> Result<Chart, HelmError> {
    let name = chart.name();
    // This chart without its subcharts (each is copied once, by its own call below).
    let mut out = Chart {
        metadata: chart.metadata.clone(),
        values: chart.values.clone(),
        templates: chart.templates.clone(),
        files: Arc::clone(&chart.files),
        crds: chart.crds.clone(),
        schema: chart.schema.clone(),
        subcharts: Vec::with_capacity(chart.subcharts.len()),
    };
    let deps = chart.dependencies();
    let mut used = vec![false; chart.subcharts.len()];
    for dep in &deps {
        let dname = dep.get("name").and_then(|v| v.as_str()).unwrap_or_default();
        let Some(i) = chart.subcharts.iter().position(|c| c.name() == dname) else {
            return Err(chart_err(
                &name,
                format!("dependency {dname} is in Chart.yaml but missing from charts/"),
            ));
        };
        used[i] = true;
        let mut sub = apply_aliases(&chart.subcharts[i])?;
        if let Some(alias) = dep.get("alias").and_then(|v| v.as_str()) {
            if let Some(m) = sub.metadata.as_object_mut() {
                m.insert("name".into(), Json::String(alias.to_string()));
            }
        }
        out.subcharts.push(sub);
    }
    // Charts in charts/ that Chart.yaml does not list are always included.
    for (i, sub) in chart.subcharts.iter().enumerate() {
        if !used[i] {
            out.subcharts.push(apply_aliases(sub)?);
        }
    }
    Ok(out)
}

/// helm's `processDependencyImportValues`, deepest charts first. Every chart that lists
/// dependencies (after disabled ones are removed) gets as its values its own values merged
/// with its subcharts' (the charts' values only, not the user's; nulls kept), and then each
/// enabled dependency's `import-values` copy tables from the subchart's values into them. The
/// string form `- name` imports the child's `exports.name` table at the parent's top level; the
/// map form `- {child: a.b, parent: x.y}` imports the child's `a.b` table at `x.y`. Imports
/// have lower priority than the parent's values; an earlier import wins over a later one. A
/// missing or non-table child path is skipped, as helm does (with a warning there).
///
/// So a null the parent's values.yaml sets for a subchart key stays in the parent's values,
/// and the final coalescing (see [`coalesce`]) treats it as helm does.
fn import_values(chart: &mut Chart) -> Result<(), HelmError> {
    for sub in &mut chart.subcharts {
        import_values(sub)?;
    }
    let name = chart.name();
    let deps = chart.dependencies();
    if deps.is_empty() {
        return Ok(());
    }
    let mut imports = Map::new();
    for sub in &chart.subcharts {
        let sname = sub.name();
        let Some(dep) = deps.iter().find(|d| {
            d.get("alias")
                .and_then(|v| v.as_str())
                .or_else(|| d.get("name").and_then(|v| v.as_str()))
                == Some(sname.as_str())
        }) else {
            continue;
        };
        let Some(list) = dep.get("import-values") else {
            continue;
        };
        let list = list.as_array().ok_or_else(|| {
            chart_err(
                &name,
                format!("import-values of dependency {sname} must be a list"),
            )
        })?;
        // The child's values as helm's MergeValues(parent) scopes them: its own values.yaml,
        // under whatever the parent sets for it.
        let parent_vals = coalesce_mode(chart, &Json::Object(Map::new()), true);
        let child_vals = parent_vals.get(&sname).cloned().unwrap_or(Json::Null);
        for entry in list {
            let (child, parent) = match entry {
                Json::String(s) => (format!("exports.{s}"), ".".to_string()),
                Json::Object(m) => match (
                    m.get("child").and_then(|v| v.as_str()),
                    m.get("parent").and_then(|v| v.as_str()),
                ) {
                    (Some(c), Some(p)) => (c.to_string(), p.to_string()),
                    _ => {
                        return Err(chart_err(
                            &name,
                            format!(
                                "import-values of dependency {sname}: a map entry needs string `child` and `parent`"
                            ),
                        ))
                    }
                },
                other => {
                    return Err(chart_err(
                        &name,
                        format!("import-values of dependency {sname}: unsupported entry {other}"),
                    ))
                }
            };
            let Some(Json::Object(table)) = path_value(&child_vals, &child) else {
                continue;
            };
            let mut value = table.clone();
            if parent != "." {
                for key in parent.split('.').rev() {
                    value = Map::from_iter([(key.to_string(), Json::Object(value))]);
                }
            }
            coalesce_tables(&mut imports, &value, true);
        }
    }
    let mut values = match coalesce_mode(chart, &Json::Object(Map::new()), true) {
        Json::Object(m) => m,
        _ => Map::new(),
    };
    coalesce_tables(&mut values, &imports, true);
    chart.values = Json::Object(values);
    Ok(())
}

fn path_value<'a>(v: &'a Json, path: &str) -> Option<&'a Json> {
    path.split('.')
        .try_fold(v, |cur, k| cur.as_object()?.get(k))
}

fn prune(chart: &mut Chart, cvals: &Json, prefix: &str) -> Result<(), HelmError> {
    let deps = chart.dependencies();
    let tags = cvals.get("tags").and_then(|t| t.as_object());
    let mut keep = Vec::new();
    let mut disabled = Vec::new();
    for sub in std::mem::take(&mut chart.subcharts) {
        let name = sub.name();
        let dep = deps.iter().find(|d| {
            d.get("alias")
                .and_then(|v| v.as_str())
                .or_else(|| d.get("name").and_then(|v| v.as_str()))
                == Some(name.as_str())
        });
        let mut enabled = true;
        if let Some(dep) = dep {
            // Tags first: any true tag enables, otherwise any false tag disables.
            if let (Some(dtags), Some(tags)) = (dep.get("tags").and_then(|t| t.as_array()), tags) {
                let vals: Vec<bool> = dtags
                    .iter()
                    .filter_map(|t| tags.get(t.as_str()?)?.as_bool())
                    .collect();
                if vals.contains(&true) {
                    enabled = true;
                } else if vals.contains(&false) {
                    enabled = false;
                }
            }
            // A condition that resolves to a bool overrides tags; the first one found wins.
            if let Some(cond) = dep.get("condition").and_then(|c| c.as_str()) {
                for c in cond
                    .trim()
                    .split(',')
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                {
                    if let Some(b) =
                        path_value(cvals, &format!("{prefix}{c}")).and_then(|v| v.as_bool())
                    {
                        enabled = b;
                        break;
                    }
                }
            }
        }
        if enabled {
            let mut sub = sub;
            prune(&mut sub, cvals, &format!("{prefix}{name}."))?;
            keep.push(sub);
        } else {
            disabled.push(name);
        }
    }
    chart.subcharts = keep;
    // `.Chart.Dependencies` as helm leaves it: an aliased dependency is named by its alias, a
    // disabled one is gone, the others are Enabled.
    if let Some(meta) = chart.metadata.as_object_mut() {
        if meta.get("dependencies").is_some_and(Json::is_array) {
            let kept: Vec<Json> = deps
                .into_iter()
                .filter_map(|mut dep| {
                    let alias = dep.get("alias").and_then(Json::as_str).map(str::to_string);
                    let m = dep.as_object_mut()?;
                    if let Some(alias) = alias.filter(|a| !a.is_empty()) {
                        m.insert("name".into(), Json::String(alias));
                    }
                    let name = m.get("name").and_then(Json::as_str).unwrap_or_default();
                    if disabled.iter().any(|d| d == name) {
                        return None;
                    }
                    m.insert("enabled".into(), Json::Bool(true));
                    Some(dep)
                })
                .collect();
            meta.insert("dependencies".into(), Json::Array(kept));
        }
    }
    Ok(())
}

/// Helm's `CoalesceValues`: user values over the chart's values.yaml, each subchart's values
/// under its name (over the subchart's own values.yaml), parent `global` copied down.
pub fn coalesce(chart: &Chart, user: &Json) -> Json {
    coalesce_mode(chart, user, false)
}

/// With `merge`, nulls are kept instead of deleting keys (helm's `MergeValues` mode, used while
/// processing dependencies).
fn coalesce_mode(chart: &Chart, user: &Json, merge: bool) -> Json {
    let mut v = match user {
        Json::Object(m) => m.clone(),
        _ => Map::new(),
    };
    coalesce_into(chart, &mut v, merge);
    Json::Object(v)
}

/// helm's `coalesceValues` then `coalesceDeps`: the chart's values fill in `v`, a null in `v`
/// deletes the key (unless `merge`); then each subchart's table, with the parent's globals,
/// is coalesced with the subchart's values. A key naming a subchart is merged keeping nulls,
/// so a null for a subchart key reaches the subchart: there it deletes the subchart's default,
/// and a key the subchart has no default for stays null.
fn coalesce_into(chart: &Chart, v: &mut Map<String, Json>, merge: bool) {
    if let Some(cv) = chart.values.as_object() {
        for (k, val) in cv {
            match v.get_mut(k) {
                Some(Json::Null) => {
                    if !merge {
                        v.remove(k);
                    }
                }
                Some(Json::Object(dst)) => {
                    if let Json::Object(src) = val {
                        let subchart = chart.subcharts.iter().any(|c| c.name() == *k);
                        coalesce_tables(dst, src, merge || subchart);
                    }
                }
                Some(_) => {}
                None => {
                    v.insert(k.clone(), val.clone());
                }
            }
        }
    }
    for sub in &chart.subcharts {
        let name = sub.name();
        let mut sv = match v.get(&name) {
            Some(Json::Object(m)) => m.clone(),
            _ => Map::new(),
        };
        coalesce_globals(&mut sv, v);
        coalesce_into(sub, &mut sv, merge);
        v.insert(name, Json::Object(sv));
    }
}

/// `dst` wins; `src` fills in; a null in `dst` deletes the key.
fn coalesce_tables(dst: &mut Map<String, Json>, src: &Map<String, Json>, merge: bool) {
    // helm deletes a null at a level where both sides are tables also when the defaults have
    // no such key (a user's `tcpSocket: null` beside a default `httpGet`).
    if !merge {
        dst.retain(|k, val| !val.is_null() || src.contains_key(k));
    }
    for (k, val) in src {
        match dst.get_mut(k) {
            Some(Json::Null) => {
                if !merge {
                    dst.remove(k);
                }
            }
            None => {
                dst.insert(k.clone(), val.clone());
            }
            Some(Json::Object(d)) => {
                if let Json::Object(s) = val {
                    coalesce_tables(d, s, merge);
                }
            }
            Some(_) => {}
        }
    }
}

fn coalesce_globals(dest: &mut Map<String, Json>, src: &Map<String, Json>) {
    let mut dg = match dest.get("global") {
        Some(Json::Object(m)) => m.clone(),
        Some(_) => return,
        None => Map::new(),
    };
    let sg = match src.get("global") {
        Some(Json::Object(m)) => m.clone(),
        Some(_) => return,
        None => Map::new(),
    };
    for (k, val) in sg {
        match (&val, dg.get(&k)) {
            (Json::Object(pv), Some(Json::Object(dv))) => {
                let mut merged = pv.clone();
                coalesce_tables(&mut merged, dv, false);
                dg.insert(k, Json::Object(merged));
            }
            (Json::Object(_), Some(_)) => {}
            (Json::Object(_), None) => {
                dg.insert(k, val);
            }
            (_, Some(Json::Object(_))) => {}
            _ => {
                dg.insert(k, val);
            }
        }
    }
    dest.insert("global".into(), Json::Object(dg));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targz(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::default(),
        ));
        for (path, data) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            builder.append_data(&mut header, path, *data).unwrap();
        }
        builder.into_inner().unwrap().finish().unwrap()
    }

    fn write_chart(dir: &Path, name: &str) {
        std::fs::create_dir_all(dir.join("templates")).unwrap();
        let chart = format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n");
        std::fs::write(dir.join("Chart.yaml"), chart).unwrap();
    }

    #[test]
    fn directory_links_are_refused_not_walked() {
        let tmp = tempfile::tempdir().unwrap();
        write_chart(tmp.path(), "loop");
        std::os::unix::fs::symlink(".", tmp.path().join("templates/a")).unwrap();
        let err = load_dir(tmp.path()).unwrap_err().to_string();
        assert!(
            err.contains("templates/a is a symlink to a directory"),
            "{err}"
        );
        // A linked file is read through its link.
        std::fs::remove_file(tmp.path().join("templates/a")).unwrap();
        std::fs::write(tmp.path().join("values.yaml"), "a: 1\n").unwrap();
        std::os::unix::fs::symlink("../values.yaml", tmp.path().join("templates/v.txt")).unwrap();
        let chart = load_dir(tmp.path()).unwrap();
        assert_eq!(&*chart.templates["templates/v.txt"], "a: 1\n");
    }

    #[test]
    fn subchart_archives_inflate_within_the_chart_budget() {
        let tmp = tempfile::tempdir().unwrap();
        write_chart(tmp.path(), "parent");
        let chart = b"apiVersion: v2\nname: sub\nversion: 0.1.0\n";
        let zeros = vec![0u8; 4 << 20];
        let sub = targz(&[("sub/Chart.yaml", chart), ("sub/files/zeros", &zeros)]);
        std::fs::create_dir(tmp.path().join("charts")).unwrap();
        std::fs::write(tmp.path().join("charts/sub-0.1.0.tgz"), &sub).unwrap();
        let loaded = load_dir_within(tmp.path(), 8 << 20).unwrap();
        assert_eq!(loaded.subcharts[0].name(), "sub");
        let err = load_dir_within(tmp.path(), 2 << 20)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("subchart archive entry sub/files/zeros (4194304 bytes)")
                && err.contains("is over the limit of 2097152"),
            "{err}"
        );
        // Header records are bounded too: a long name past the record limit is refused.
        let long = "d/".repeat(40_000) + "x";
        let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::default(),
        ));
        let mut header = tar::Header::new_gnu();
        header.set_size(1);
        builder.append_data(&mut header, &long, &b"x"[..]).unwrap();
        let data = builder.into_inner().unwrap().finish().unwrap();
        let err = load_archive("c", &data).unwrap_err().to_string();
        assert!(err.contains("GNU long name record of 80002 bytes"), "{err}");
    }

    #[test]
    fn ignore_rules_match_names_and_dirs() {
        let p = vec![
            "*.bak".to_string(),
            "tmp/".to_string(),
            "docs/*.md".to_string(),
        ];
        assert!(ignored(&p, "a/b.bak"));
        assert!(ignored(&p, "tmp/x"));
        assert!(!ignored(&p, "tmp"));
        assert!(ignored(&p, "docs/a.md"));
        assert!(!ignored(&p, "a/docs/a.md"));
    }

    #[test]
    fn coalesce_scopes_subcharts_and_globals() {
        let sub = Chart {
            metadata: serde_json::json!({"name": "sub"}),
            values: serde_json::json!({"a": 1, "global": {"g": "sub", "h": "sub"}}),
            templates: BTreeMap::new(),
            files: Arc::default(),
            crds: BTreeMap::new(),
            schema: None,
            subcharts: vec![],
        };
        let parent = Chart {
            metadata: serde_json::json!({"name": "p"}),
            values: serde_json::json!({"global": {"g": "parent"}, "sub": {"a": 2}, "x": {"y": 1, "z": 2}}),
            subcharts: vec![sub],
            ..sub_clone()
        };
        let v = coalesce(&parent, &serde_json::json!({"x": {"z": null}}));
        assert_eq!(
            v["sub"],
            serde_json::json!({"a": 2, "global": {"g": "parent", "h": "sub"}})
        );
        assert_eq!(v["x"], serde_json::json!({"y": 1}));
    }

    fn sub_clone() -> Chart {
        Chart {
            metadata: Json::Null,
            values: Json::Null,
            templates: BTreeMap::new(),
            files: Arc::default(),
            crds: BTreeMap::new(),
            schema: None,
            subcharts: vec![],
        }
    }
}
