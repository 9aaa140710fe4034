//! The kustomize engine on small trees (`testdata/kustomize/build`), each covering a group of
//! kustomization fields. Every expected file was written by the oracle, `kustomize build`
//! v5.5.0 (`tools/kustomize.sh build`), on the same tree: the engine's objects must equal it,
//! in the same order.

use std::path::{Path, PathBuf};

use pallet_formats::kustomize::{build, KustomizeErrorKind};
use serde_json::Value;

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/kustomize/build")
}

/// Null fields dropped (null is absent).
fn without_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(without_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(without_nulls),
        _ => {}
    }
}

fn expected(file: &str) -> Vec<Value> {
    let path = testdata().join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    pallet_formats::parse_manifests(file, &text)
        .unwrap()
        .into_iter()
        .map(|o| {
            let mut v = Value::Object(o.into_body());
            without_nulls(&mut v);
            v
        })
        .collect()
}

fn built(tree: &str, root: &str) -> Vec<Value> {
    build(&testdata().join(tree), root)
        .unwrap_or_else(|e| panic!("{tree}/{root}: {e}"))
        .into_iter()
        .map(|o| {
            let mut v = Value::Object(o.into_body());
            without_nulls(&mut v);
            v
        })
        .collect()
}

fn assert_same(got: &[Value], want: &[Value]) {
    let names = |list: &[Value]| -> Vec<String> {
        list.iter()
            .map(|o| format!("{} {}", o["kind"], o["metadata"]["name"]))
            .collect()
    };
    assert_eq!(names(got), names(want), "objects or their order differ");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g, w, "object differs");
    }
}

#[test]
fn generators_hash_merge_and_replace_across_overlays() {
    assert_same(
        &built("generators", "overlay"),
        &expected("generators/overlay.expected.yaml"),
    );
}

#[test]
fn namespace_affixes_labels_annotations_images_replicas_and_name_references() {
    assert_same(
        &built("transforms", ""),
        &expected("transforms/expected.yaml"),
    );
}

#[test]
fn vars_components_and_fifo_order() {
    assert_same(
        &built("vars-components", "app"),
        &expected("vars-components/app.expected.yaml"),
    );
}

#[test]
fn folded_scalars_come_out_as_kustomize_prints_them() {
    assert_same(
        &built("folded-scalars", ""),
        &expected("folded-scalars/expected.yaml"),
    );
}

#[test]
fn remote_bases_and_paths_leaving_the_tree_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("app");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(
        root.join("kustomization.yaml"),
        "resources:\n- github.com/org/repo/deploy?ref=v1\n",
    )
    .unwrap();
    let error = build(dir.path(), "app").unwrap_err();
    assert_eq!(error.kind, KustomizeErrorKind::RemoteRefused);
    assert_eq!(error.file.as_deref(), Some("app/kustomization.yaml"));
    assert_eq!(error.field.as_deref(), Some("resources[0]"));
    assert!(error.message.contains("github.com/org/repo"), "{error}");

    std::fs::write(
        root.join("kustomization.yaml"),
        "resources:\n- ../../outside.yaml\n",
    )
    .unwrap();
    let error = build(dir.path(), "app").unwrap_err();
    assert_eq!(error.kind, KustomizeErrorKind::LoadRestricted, "{error}");

    // A file of another directory of the tree is refused (kustomize's load restriction).
    std::fs::create_dir_all(dir.path().join("other")).unwrap();
    std::fs::write(
        dir.path().join("other/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
    )
    .unwrap();
    std::fs::write(
        root.join("kustomization.yaml"),
        "resources:\n- ../other/cm.yaml\n",
    )
    .unwrap();
    let error = build(dir.path(), "app").unwrap_err();
    assert_eq!(error.kind, KustomizeErrorKind::LoadRestricted, "{error}");
}

#[test]
fn kustomize_errors_name_the_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        "resources: [cm.yaml]\npatches:\n- patch: |\n    apiVersion: v1\n    kind: ConfigMap\n    metadata:\n      name: missing\n",
    )
    .unwrap();
    let error = build(dir.path(), "").unwrap_err();
    assert_eq!(error.kind, KustomizeErrorKind::NoMatch, "{error}");
    assert_eq!(error.field.as_deref(), Some("patches[0]"));

    std::fs::write(
        dir.path().join("kustomization.yaml"),
        "resources: [cm.yaml, cm.yaml]\n",
    )
    .unwrap();
    let error = build(dir.path(), "").unwrap_err();
    assert_eq!(error.kind, KustomizeErrorKind::Conflict, "{error}");

    std::fs::write(
        dir.path().join("kustomization.yaml"),
        "configMapGenerator:\n- name: x\n  behavior: merge\n  literals: [a=b]\n",
    )
    .unwrap();
    let error = build(dir.path(), "").unwrap_err();
    assert_eq!(error.kind, KustomizeErrorKind::Conflict, "{error}");
    assert_eq!(error.field.as_deref(), Some("configMapGenerator[0]"));

    std::fs::write(dir.path().join("kustomization.yaml"), "resources: [.]\n").unwrap();
    let error = build(dir.path(), "").unwrap_err();
    assert_eq!(error.kind, KustomizeErrorKind::Cycle, "{error}");

    std::fs::write(
        dir.path().join("kustomization.yaml"),
        "transformers:\n- |\n  apiVersion: example.com/v1\n  kind: MyPlugin\n  metadata:\n    name: p\n",
    )
    .unwrap();
    let error = build(dir.path(), "").unwrap_err();
    assert_eq!(error.kind, KustomizeErrorKind::Unsupported, "{error}");
    assert_eq!(error.field.as_deref(), Some("transformers"));
}

#[test]
fn transform_applies_an_inline_kustomization_to_rendered_objects() {
    let objects = pallet_formats::parse_manifests(
        "rendered.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      containers:\n      - name: web\n        image: nginx:1\n",
    )
    .unwrap();
    let kustomization = serde_json::json!({
        "namespace": "prod",
        "namePrefix": "p-",
        "commonLabels": {"team": "a"},
        "images": [{"name": "nginx", "newTag": "2"}],
    });
    let out = pallet_formats::kustomize::transform(objects, &kustomization, None).unwrap();
    assert_eq!(out.len(), 1);
    let body = out[0].body();
    assert_eq!(body["metadata"]["name"], "p-web");
    assert_eq!(body["metadata"]["namespace"], "prod");
    assert_eq!(body["metadata"]["labels"]["team"], "a");
    assert_eq!(body["spec"]["selector"]["matchLabels"]["team"], "a");
    assert_eq!(
        body["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:2"
    );
    assert_eq!(out[0].origin().file, "rendered.yaml");
}
