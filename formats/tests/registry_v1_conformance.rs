//! Conformance: the registry-v1 renderer produces the same objects as OLM v1's reference renderer for
//! the argocd-operator bundle in `shared/conformance/registry-v1` (same set, same fields and values,
//! generated names included; order and key order do not matter).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pallet_formats::{parse_manifests, render, Format, ObjectKey, RenderConfig};
use serde_json::Value;

const CONFORMANCE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/conformance/registry-v1"
);

fn conformance_dir() -> PathBuf {
    let dir = PathBuf::from(CONFORMANCE);
    assert!(
        dir.join("README.md").is_file(),
        "conformance data not found at {}: clone the repo with shared/ as a sibling of it",
        dir.display()
    );
    dir
}

fn expected_objects(dir: &Path) -> BTreeMap<ObjectKey, Value> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    let mut objects = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for object in parse_manifests(&file.display().to_string(), &text).unwrap() {
            let key = object.key();
            assert!(
                objects
                    .insert(key.clone(), Value::Object(object.into_body()))
                    .is_none(),
                "expected data has {key} twice"
            );
        }
    }
    objects
}

fn check_case(case: &str, install_namespace: &str, watch_namespace: &str) {
    let root = conformance_dir();
    let config = RenderConfig {
        install_namespace: install_namespace.to_owned(),
        watch_namespace: watch_namespace.to_owned(),
        ..RenderConfig::default()
    };
    let rendered = render(
        Format::RegistryV1,
        &root.join("argocd-operator.v0.6.0"),
        &config,
    )
    .unwrap_or_else(|error| panic!("{case}: render failed: {error}"));
    let mut actual = BTreeMap::new();
    for entry in &rendered.objects {
        let key = entry.object.key();
        assert!(
            actual
                .insert(key.clone(), Value::Object(entry.object.body().clone()))
                .is_none(),
            "{case}: rendered {key} twice"
        );
    }
    let expected = expected_objects(&root.join("expected/argocd-operator.v0.6.0").join(case));

    let missing: Vec<_> = expected
        .keys()
        .filter(|key| !actual.contains_key(key))
        .collect();
    let extra: Vec<_> = actual
        .keys()
        .filter(|key| !expected.contains_key(key))
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{case}: object sets differ\n missing: {missing:?}\n extra: {extra:?}"
    );
    for (key, expected_body) in &expected {
        let actual_body = &actual[key];
        if let Some(difference) = first_difference(expected_body, actual_body, "") {
            panic!("{case}: {key} differs at {difference}");
        }
    }
    assert_eq!(actual.len(), 14, "{case}: object count");
}

/// The first path where two JSON values differ, with both values there.
fn first_difference(expected: &Value, actual: &Value, path: &str) -> Option<String> {
    match (expected, actual) {
        (Value::Object(a), Value::Object(b)) => {
            // Keys of both sides, each once (visiting shared keys twice would be exponential in depth).
            for key in a.keys().chain(b.keys().filter(|key| !a.contains_key(*key))) {
                let child = format!("{path}.{key}");
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => {
                        if let Some(found) = first_difference(x, y, &child) {
                            return Some(found);
                        }
                    }
                    (x, y) => return Some(format!("{child}: expected {x:?}, got {y:?}")),
                }
            }
            None
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(index, (x, y))| first_difference(x, y, &format!("{path}[{index}]"))),
        (x, y) if x == y => None,
        (x, y) => Some(format!("{path}: expected {x}, got {y}")),
    }
}

#[test]
fn all_namespaces() {
    check_case("all-namespaces", "argocd-system", "");
}

#[test]
fn single_namespace() {
    check_case("single-namespace", "argocd-system", "argocd-watch");
}

#[test]
fn own_namespace() {
    check_case("own-namespace", "argocd-system", "argocd-system");
}

#[test]
fn argocd_render_is_deterministic() {
    let root = conformance_dir().join("argocd-operator.v0.6.0");
    let config = RenderConfig {
        install_namespace: "argocd-system".to_owned(),
        watch_namespace: "argocd-watch".to_owned(),
        ..RenderConfig::default()
    };
    let first = render(Format::RegistryV1, &root, &config).unwrap();
    let second = render(Format::RegistryV1, &root, &config).unwrap();
    assert_eq!(first.canonical_form(), second.canonical_form());
    assert_eq!(first.digest(), second.digest());
    let order = |rendered: &pallet_formats::Rendered| -> Vec<ObjectKey> {
        rendered
            .objects
            .iter()
            .map(|entry| entry.object.key())
            .collect()
    };
    assert_eq!(order(&first), order(&second), "render order is stable too");
    // The watch namespace changes the Role namespaces, so the digest.
    let own = RenderConfig {
        watch_namespace: "argocd-system".to_owned(),
        ..config
    };
    assert_ne!(
        first.digest(),
        render(Format::RegistryV1, &root, &own).unwrap().digest()
    );
}
