//! Judging kustomize output as real-world output is judged: objects keyed by
//! apiVersion/kind/namespace/name and compared field by field (map key order ignored, list
//! order kept, null = absent, `1` = `1.0`, Secret data compared decoded), then their order.

use super::Case;
use serde_json::{Map, Number, Value};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

/// How many differing paths a failure names.
const PATHS_SHOWN: usize = 3;

/// The outcome of a comparison.
pub enum Verdict {
    /// Same objects, same order.
    Equal,
    /// The first differing paths (`Kind ns/name: .spec.x: expected 1, got 2`).
    Differ(Vec<String>),
}

/// kustomize output split at `---` lines into its non-empty documents.
pub fn split_docs(text: &str) -> Result<Vec<Value>, String> {
    let mut docs = vec![String::new()];
    for line in text.split_inclusive('\n') {
        if line.trim_end() == "---" {
            docs.push(String::new());
        } else if let Some(doc) = docs.last_mut() {
            doc.push_str(line);
        }
    }
    let mut out = Vec::new();
    for doc in docs.iter().filter(|d| !d.trim().is_empty()) {
        let value: Value =
            pallet_formats::object::from_yaml_str(doc).map_err(|e| format!("{e}\n{doc}"))?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

/// The expected objects in the order `kustomize build` prints them. The tests build with
/// `Reorder: none` (the harness's default: input order), where the CLI sorts in its legacy
/// order unless the kustomization sets `sortOptions`; so, for such a case without
/// `sortOptions`, the stated objects are sorted the legacy way. Otherwise the stated order is
/// the CLI's already.
pub fn expected_order(case: &Case, mut expected: Vec<Value>) -> Vec<Value> {
    if case.options.reorder == "none" && !sets_sort_options(case) {
        let mut placed: Vec<(LegacyPlace, Value)> = expected
            .into_iter()
            .map(|o| (legacy_place(&o), o))
            .collect();
        placed.sort_by(|(a, _), (b, _)| legacy_cmp(a, b));
        expected = placed.into_iter().map(|(_, o)| o).collect();
    }
    expected
}

/// Whether the built directory's kustomization has `sortOptions`.
fn sets_sort_options(case: &Case) -> bool {
    let prefix = if case.dir.is_empty() {
        String::new()
    } else {
        format!("{}/", case.dir.trim_end_matches('/'))
    };
    ["kustomization.yaml", "kustomization.yml", "Kustomization"]
        .iter()
        .find_map(|name| case.files.get(&format!("{prefix}{name}")))
        .and_then(|text| pallet_formats::object::from_yaml_str::<Value>(text).ok())
        .is_some_and(|k| k.get("sortOptions").is_some_and(|s| !s.is_null()))
}

/// Kinds kustomize's legacy order puts first, in this order.
const LEGACY_FIRST: [&str; 22] = [
    "Namespace",
    "ResourceQuota",
    "StorageClass",
    "CustomResourceDefinition",
    "ServiceAccount",
    "PodSecurityPolicy",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "ConfigMap",
    "Secret",
    "Endpoints",
    "Service",
    "LimitRange",
    "PriorityClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "PodDisruptionBudget",
];
/// Kinds it puts last, in this order.
const LEGACY_LAST: [&str; 2] = [
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];

/// An object's place in the legacy order: the kind's rank (listed first kinds, the rest,
/// listed last kinds), group/version/kind as text, and the id as text.
struct LegacyPlace {
    rank: i64,
    kind: String,
    group: String,
    gvk: String,
    id: String,
}

fn legacy_place(object: &Value) -> LegacyPlace {
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    let api_version = text(&object["apiVersion"]);
    let kind = text(&object["kind"]);
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version.clone()),
    };
    let rank = if let Some(i) = LEGACY_FIRST.iter().position(|k| *k == kind) {
        i as i64 - LEGACY_FIRST.len() as i64
    } else if let Some(i) = LEGACY_LAST.iter().position(|k| *k == kind) {
        1 + i as i64
    } else {
        0
    };
    let or = |s: &str, empty: &str| {
        if s.is_empty() {
            empty.to_string()
        } else {
            s.to_string()
        }
    };
    let gvk = format!(
        "{}_{}_{}",
        or(&group, "~G"),
        or(&version, "~V"),
        or(&kind, "~K")
    );
    let id = format!(
        "{}.{}.{}|{}|{}",
        or(&kind, "[noKind]"),
        or(&version, "[noVer]"),
        or(&group, "[noGrp]"),
        or(object["metadata"]["namespace"].as_str().unwrap_or(""), "~X"),
        or(object["metadata"]["name"].as_str().unwrap_or(""), "~N"),
    );
    LegacyPlace {
        rank,
        kind,
        group,
        gvk,
        id,
    }
}

/// kustomize's legacy order of two objects.
fn legacy_cmp(a: &LegacyPlace, b: &LegacyPlace) -> Ordering {
    if a.gvk == b.gvk {
        return a.id.cmp(&b.id);
    }
    if a.rank != b.rank {
        return a.rank.cmp(&b.rank);
    }
    // Namespaces of two groups, one of them the core group: the core one first.
    if a.kind == "Namespace" && b.kind == "Namespace" && (a.group.is_empty() || b.group.is_empty())
    {
        return b.gvk.cmp(&a.gvk);
    }
    a.gvk.cmp(&b.gvk)
}

/// `apiVersion/kind/namespace/name`.
fn key(object: &Value) -> String {
    format!(
        "{}/{}/{}/{}",
        object["apiVersion"].as_str().unwrap_or(""),
        object["kind"].as_str().unwrap_or(""),
        object["metadata"]["namespace"].as_str().unwrap_or(""),
        object["metadata"]["name"].as_str().unwrap_or("")
    )
}

/// Numbers as integers when integral, so that `1` = `1.0`; nulls dropped from maps.
fn normalize(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), normalize(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => {
                Value::Number(Number::from(f as i64))
            }
            _ => value.clone(),
        },
        _ => value.clone(),
    }
}

/// A Secret's `data` decoded (kustomize may wrap long base64 values).
fn decode_secret_data(object: &mut Value) {
    use base64::Engine as _;
    if object["kind"] != "Secret" || object["apiVersion"] != "v1" {
        return;
    }
    let Some(data) = object.get_mut("data").and_then(Value::as_object_mut) else {
        return;
    };
    for value in data.values_mut() {
        if let Some(text) = value.as_str() {
            let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
            if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(compact) {
                *value = Value::String(format!("decoded:{}", String::from_utf8_lossy(&bytes)));
            }
        }
    }
}

fn prepared(objects: &[Value]) -> Vec<(String, Value)> {
    objects
        .iter()
        .map(|o| {
            let mut o = normalize(o);
            decode_secret_data(&mut o);
            (key(&o), o)
        })
        .collect()
}

/// Compares the expected objects (in the expected order) with the built ones.
pub fn compare(expected: &[Value], actual: &[Value]) -> Verdict {
    let expected = prepared(expected);
    let actual = prepared(actual);
    let group = |objects: &[(String, Value)]| {
        let mut by_key: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for (k, o) in objects {
            by_key.entry(k.clone()).or_default().push(o.clone());
        }
        by_key
    };
    let (want, got) = (group(&expected), group(&actual));
    let mut paths = Vec::new();
    let keys: BTreeSet<&String> = want.keys().chain(got.keys()).collect();
    for k in keys {
        match (want.get(k), got.get(k)) {
            (Some(_), None) => paths.push(format!("{k}: missing")),
            (None, Some(_)) => paths.push(format!("{k}: not expected")),
            (Some(w), Some(g)) if w.len() != g.len() => paths.push(format!(
                "{k}: {} objects expected, {} built",
                w.len(),
                g.len()
            )),
            (Some(w), Some(g)) => {
                for (w, g) in w.iter().zip(g) {
                    let mut diffs = Vec::new();
                    diff("", w, g, &mut diffs);
                    paths.extend(diffs.into_iter().map(|d| format!("{k}: {d}")));
                }
            }
            (None, None) => {}
        }
    }
    if paths.is_empty() {
        let want_order: Vec<&String> = expected.iter().map(|(k, _)| k).collect();
        let got_order: Vec<&String> = actual.iter().map(|(k, _)| k).collect();
        if want_order != got_order {
            paths.push(format!(
                "object order: expected {want_order:?}, built {got_order:?}"
            ));
        }
    }
    if paths.is_empty() {
        Verdict::Equal
    } else {
        paths.truncate(PATHS_SHOWN);
        Verdict::Differ(paths)
    }
}

/// Appends where two values differ: `.a.b[2]: expected X, got Y`.
fn diff(path: &str, want: &Value, got: &Value, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => diff_maps(path, w, g, out),
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (w, g)) in w.iter().zip(g).enumerate() {
                diff(&format!("{path}[{i}]"), w, g, out);
            }
        }
        _ if want != got => out.push(format!(
            "{}: expected {}, got {}",
            if path.is_empty() { "." } else { path },
            short(want),
            short(got)
        )),
        _ => {}
    }
}

fn diff_maps(
    path: &str,
    want: &Map<String, Value>,
    got: &Map<String, Value>,
    out: &mut Vec<String>,
) {
    let keys: BTreeSet<&String> = want.keys().chain(got.keys()).collect();
    for k in keys {
        let at = format!("{path}.{k}");
        match (want.get(k), got.get(k)) {
            (Some(w), Some(g)) => diff(&at, w, g, out),
            (Some(w), None) => out.push(format!("{at}: expected {}, missing", short(w))),
            (None, Some(g)) => out.push(format!("{at}: not expected, got {}", short(g))),
            (None, None) => {}
        }
    }
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 60 {
        format!("{}...", text.chars().take(60).collect::<String>())
    } else {
        text
    }
}
