//! The comparison the real-world helm tests share (`helm_conformance`, `helm_conformance_extra`):
//! one case is a chart rendered with its default values or a values file, by `helm template`
//! (the oracle) and by the agent's entry point; the object sets must be equal field by field.
//!
//! Fields that differ between two runs of `helm template` itself (generated passwords and
//! certificates, `now`) cannot be equal; they must be present in pallet's output with the same
//! shape (see [`shape`]). A case where helm fails must fail in pallet too, naming the same cause.

use crate::oracle::{helm_bin, try_split_docs, yaml11};
use pallet_formats::helm::{self, HookDisposition};
use pallet_formats::{Format, HelmCapabilities, HelmOptions, RenderConfig};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

const RELEASE: &str = "rel";
const NAMESPACE: &str = "ns";
const KUBE_VERSION: &str = "v1.35.4";

/// `apiVersion/kind/namespace/name`, a missing namespace read as the release namespace.
fn key(o: &Value) -> String {
    format!(
        "{}/{}/{}/{}",
        o["apiVersion"].as_str().unwrap_or(""),
        o["kind"].as_str().unwrap_or(""),
        o["metadata"]["namespace"].as_str().unwrap_or(NAMESPACE),
        o["metadata"]["name"].as_str().unwrap_or("")
    )
}

/// Objects by key; the release namespace is dropped from bodies (pallet sets it on namespaced
/// objects, as `helm install` applies them; helm template leaves it out, or writes a null).
fn by_key(objs: Vec<Value>) -> BTreeMap<String, Vec<Value>> {
    let mut m: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for mut o in objs {
        let k = key(&o);
        if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            let ns = meta.get("namespace");
            if ns.is_some_and(Value::is_null) || ns.and_then(Value::as_str) == Some(NAMESPACE) {
                meta.remove("namespace");
            }
        }
        m.entry(k).or_default().push(o);
    }
    m
}

/// Paths at which two JSON values differ, with both sides.
fn diff(path: &str, a: &Value, b: &Value, out: &mut Vec<(String, Value, Value)>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let missing = Value::String("<missing>".into());
                diff(
                    &format!("{path}.{k}"),
                    x.get(k).unwrap_or(&missing),
                    y.get(k).unwrap_or(&missing),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff(&format!("{path}[{i}]"), p, q, out);
            }
        }
        _ if a != b => out.push((path.to_string(), a.clone(), b.clone())),
        _ => {}
    }
}

/// The shape of a value that differs between two helm runs: what pallet's value must share
/// with helm's. PEM blocks by their types, base64 of PEM, otherwise a string's length and
/// whether it is alphanumeric; other values by their JSON type.
fn shape(v: &Value) -> String {
    use base64::Engine as _;
    fn pem_types(s: &str) -> Vec<&str> {
        s.match_indices("-----BEGIN ")
            .filter_map(|(i, _)| s[i + 11..].split("-----").next())
            .collect()
    }
    match v {
        Value::String(s) => {
            if s.contains("-----BEGIN ") {
                return format!("pem{:?}", pem_types(s));
            }
            if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(s.trim()) {
                let text = String::from_utf8_lossy(&bytes);
                if text.contains("-----BEGIN ") {
                    return format!("base64 pem{:?}", pem_types(&text));
                }
            }
            let alnum = s.chars().all(|c| c.is_ascii_alphanumeric());
            format!("string len {} alnum {alnum}", s.chars().count())
        }
        Value::Array(a) => format!("array of {}", a.len()),
        Value::Object(_) => "object".into(),
        Value::Number(_) => "number".into(),
        Value::Bool(_) => "bool".into(),
        Value::Null => "null".into(),
    }
}

/// Runs `helm template` for one case: `Ok(objects kept by pallet's hook policy)` or `Err(stderr)`.
fn helm_template(chart: &Path, values: Option<&Path>) -> Result<Vec<Value>, String> {
    let mut cmd = Command::new(helm_bin());
    cmd.args(["template", RELEASE])
        .arg(chart)
        .args([
            "--include-crds",
            "--namespace",
            NAMESPACE,
            "--kube-version",
            KUBE_VERSION,
        ])
        .env(
            "HELM_CACHE_HOME",
            std::env::temp_dir().join("pallet-helm-oracle"),
        )
        // Sprig formats dates in the local zone; pallet renders in UTC.
        .env("TZ", "UTC");
    if let Some(v) = values {
        cmd.arg("-f").arg(v);
    }
    let out = cmd.output().expect("running helm");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(try_split_docs(&String::from_utf8_lossy(&out.stdout))
        .map_err(|e| {
            format!(
                "the test cannot read helm's output: {}",
                e.lines().next().unwrap_or("")
            )
        })?
        .into_iter()
        .flat_map(flatten_list)
        .filter(|o| {
            let body = o.as_object().cloned().unwrap_or_default();
            matches!(
                helm::hook_disposition(&body),
                HookDisposition::NotHook | HookDisposition::Apply
            )
        })
        .collect())
}

/// A `kind: List` (or `…List`) document as `helm install` applies it: its items (helm's
/// resource builder flattens lists, and so does pallet when it reads the rendered files).
fn flatten_list(doc: Value) -> Vec<Value> {
    let is_list = doc["kind"].as_str().is_some_and(|k| k.ends_with("List"));
    match doc.get("items").and_then(Value::as_array) {
        Some(items) if is_list => items.clone(),
        _ => vec![doc],
    }
}

/// Renders one case through the agent's entry point, with `now` (Unix seconds) as the clock.
fn pallet_render(chart: &Path, values: Option<&Path>, now: i64) -> Result<Vec<Value>, String> {
    let values = match values {
        Some(path) => {
            let text = std::fs::read_to_string(path).expect("reading values file");
            let v: Value =
                serde_saphyr::from_str_with_options(&text, yaml11()).expect("values file is YAML");
            if v.is_null() {
                serde_json::json!({})
            } else {
                v
            }
        }
        None => serde_json::json!({}),
    };
    let config = RenderConfig {
        install_namespace: NAMESPACE.into(),
        helm: HelmOptions {
            release_name: RELEASE.into(),
            values,
            values_files: Vec::new(),
            capabilities: Some(HelmCapabilities {
                kube_version: KUBE_VERSION.into(),
                api_versions: helm::default_api_versions(),
            }),
            now,
            seed: [0; 32],
            lookups: Default::default(),
        },
        ..RenderConfig::default()
    };
    pallet_formats::render(Format::Helm, chart, &config)
        .map(|r| {
            r.objects
                .into_iter()
                .map(|o| {
                    // The agent's marker on the objects of `crds/`, which it takes off itself.
                    let mut body = o.object.into_body();
                    helm::unmark_chart_crd(&mut body);
                    Value::Object(body)
                })
                .collect()
        })
        .map_err(|e| e.to_string())
}

/// What pallet's error must name of helm's: for `execution error at (<file>:<line>:<col>): <msg>`
/// (a `fail` or `required`), the file and the message; for other errors the words helm quotes
/// (`at '/policy'`).
fn named_in_helm_error(msg: &str) -> Vec<String> {
    let msg = msg.trim().trim_start_matches("Error: ");
    // A rendered file that is not a manifest: pallet must name the file (its reader's wording
    // differs from go-yaml's and encoding/json's).
    if let Some(rest) = msg.strip_prefix("YAML parse error on ") {
        if let Some((file, _)) = rest.split_once(": ") {
            return vec![file.to_string()];
        }
    }
    if let Some(rest) = msg.strip_prefix("execution error at (") {
        if let Some((at, text)) = rest.split_once("): ") {
            let file = at.split(':').next().unwrap_or(at);
            let text = text.lines().next().unwrap_or(text);
            return vec![file.to_string(), text.to_string()];
        }
    }
    // helm echoes the failing action's source (`at <include "x" (dict "a" .)>`); its quoted
    // words are the chart's text, not the cause.
    let msg = regex::Regex::new(r"at <[^>]*>")
        .map(|re| re.replace_all(msg, "at <>").into_owned())
        .unwrap_or_else(|_| msg.to_string());
    let mut words = Vec::new();
    for q in ['\'', '"'] {
        let parts: Vec<&str> = msg.split(q).collect();
        for (i, p) in parts.iter().enumerate() {
            if i % 2 == 1 && !p.is_empty() && !p.contains(' ') && i + 1 < parts.len() {
                words.push(p.to_string());
            }
        }
    }
    if words.is_empty() {
        // Nothing quoted: the whole first line must be named.
        words.push(msg.lines().next().unwrap_or(&msg).to_string());
    }
    words
}

/// Compares one case; `Ok(summary)` when equal, `Err(why)` otherwise.
pub fn compare_case(chart: &Path, values: Option<&Path>) -> Result<String, String> {
    // helm's `now` is the wall clock while it runs; pallet's is injected. Render pallet at the
    // second helm started and, when helm's run crossed into the next second, at that one too.
    let unix_now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64)
    };
    let started = unix_now();
    let first = helm_template(chart, values);
    let ended = unix_now();
    let result = compare_at(chart, values, &first, started);
    if result.is_err() && ended != started {
        return compare_at(chart, values, &first, ended);
    }
    result
}

/// Compares pallet's render at `now` with helm's output `first`.
fn compare_at(
    chart: &Path,
    values: Option<&Path>,
    first: &Result<Vec<Value>, String>,
    now: i64,
) -> Result<String, String> {
    let ours = pallet_render(chart, values, now);
    let want = match first.clone() {
        Err(helm_err) => {
            let ours_err = match ours {
                Ok(objs) => {
                    return Err(format!(
                        "helm fails but pallet rendered {} objects; helm: {}",
                        objs.len(),
                        helm_err.trim()
                    ))
                }
                Err(e) => e,
            };
            let missing: Vec<String> = named_in_helm_error(&helm_err)
                .into_iter()
                .filter(|w| !ours_err.contains(w.as_str()))
                .collect();
            return if missing.is_empty() {
                Ok(format!("both fail: {}", ours_err.trim()))
            } else {
                Err(format!(
                    "both fail, but pallet's message does not name {missing:?}\n  helm:   {}\n  pallet: {}",
                    helm_err.trim(),
                    ours_err.trim()
                ))
            };
        }
        Ok(objs) => by_key(objs),
    };
    let got = by_key(ours.map_err(|e| format!("pallet failed: {e}"))?);
    // Fields that differ between two helm runs: randomness and time.
    let second = by_key(helm_template(chart, values).map_err(|e| format!("helm rerun: {e}"))?);
    let mut volatile = BTreeSet::new();
    for (k, w) in &want {
        let mut d = Vec::new();
        let again = second.get(k).cloned().unwrap_or_default();
        diff(k, &Value::Array(w.clone()), &Value::Array(again), &mut d);
        volatile.extend(d.into_iter().map(|(p, _, _)| p));
    }
    // Objects named at random (`helm create`'s test Pods, `randAlphaNum` suffixes): their names
    // differ between two helm runs, so they are matched by apiVersion, kind and namespace and
    // counted, not compared by name.
    let kind_of = |k: &str| k.rsplit_once('/').map_or(k, |(kind, _)| kind).to_string();
    let mut random_named: BTreeMap<String, i64> = BTreeMap::new();
    for k in want.keys().filter(|k| !second.contains_key(*k)) {
        *random_named.entry(kind_of(k)).or_default() += 1;
    }
    let mut problems = Vec::new();
    for k in want.keys().filter(|k| !got.contains_key(*k)) {
        if !second.contains_key(k) {
            continue;
        }
        problems.push(format!("missing {k}"));
    }
    for k in got.keys().filter(|k| !want.contains_key(*k)) {
        match random_named.get_mut(&kind_of(k)) {
            Some(left) if *left > 0 => *left -= 1,
            _ => problems.push(format!("extra {k}")),
        }
    }
    for (kind, left) in random_named.iter().filter(|(_, left)| **left > 0) {
        problems.push(format!("missing {left} randomly named {kind}"));
    }
    for (k, w) in &want {
        let Some(g) = got.get(k) else { continue };
        let mut d = Vec::new();
        diff(
            k,
            &Value::Array(g.clone()),
            &Value::Array(w.clone()),
            &mut d,
        );
        for (path, ours, helms) in d {
            if volatile.contains(&path) && shape(&ours) == shape(&helms) {
                continue;
            }
            let short = |v: &Value| {
                let s = v.to_string();
                if s.len() > 160 {
                    format!(
                        "{}…",
                        &s[..s.char_indices().nth(160).map_or(s.len(), |c| c.0)]
                    )
                } else {
                    s
                }
            };
            problems.push(format!(
                "{path}: pallet={} helm={}",
                short(&ours),
                short(&helms)
            ));
        }
    }
    if problems.is_empty() {
        Ok(format!(
            "{} objects equal ({} volatile fields same shape)",
            want.values().map(Vec::len).sum::<usize>(),
            volatile.len()
        ))
    } else {
        Err(problems.join("\n  "))
    }
}

/// One case: a label, the chart's directory and the values file (none: default values).
pub struct Case {
    pub label: String,
    pub chart: PathBuf,
    pub values: Option<PathBuf>,
}

impl Case {
    /// The two cases of chart `name` at `chart`: its default values, and the values file.
    pub fn pair(name: &str, chart: PathBuf, values: PathBuf) -> [Case; 2] {
        [
            Case {
                label: format!("{name} (defaults)"),
                chart: chart.clone(),
                values: None,
            },
            Case {
                label: format!("{name} (values file)"),
                chart,
                values: Some(values),
            },
        ]
    }
}

/// Compares every case on three threads; prints one line per case and returns the number of
/// equal cases. `prepare` turns a case's chart into the directory to render (called on the
/// worker, with a scratch directory of its own).
pub fn run_cases(cases: &[Case], prepare: impl Fn(&Case, &Path) -> PathBuf + Sync) -> usize {
    let scratch = tempfile::tempdir().expect("tempdir");
    let results = Mutex::new(Vec::new());
    let next = Mutex::new(0usize);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| loop {
                let i = {
                    let mut n = next.lock().expect("lock");
                    *n += 1;
                    *n - 1
                };
                let Some(case) = cases.get(i) else {
                    break;
                };
                let dir = prepare(case, &scratch.path().join(i.to_string()));
                let r = compare_case(&dir, case.values.as_deref());
                results.lock().expect("lock").push((i, r));
            });
        }
    });
    let mut results = results.into_inner().expect("lock");
    results.sort_by_key(|r| r.0);
    let mut equal = 0;
    for (i, r) in &results {
        let label = &cases[*i].label;
        match r {
            Ok(s) => {
                equal += 1;
                println!("EQUAL {label}: {s}");
            }
            Err(e) => println!("DIFFER {label}:\n  {e}"),
        }
    }
    equal
}
