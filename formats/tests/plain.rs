//! Golden and error tests for the plain format, using the trees under `testdata/plain/`.

use std::path::PathBuf;

use pallet_formats::canonical::write_canonical_json;
use pallet_formats::{render, Format, RenderConfig, RenderError, Rendered, Scope};
use serde_json::Value;

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/plain")
        .join(name)
}

fn config(install_namespace: &str) -> RenderConfig {
    RenderConfig {
        install_namespace: install_namespace.to_owned(),
        ..RenderConfig::default()
    }
}

/// One line per object in render order: origin, scope and canonical JSON.
fn golden_text(rendered: &Rendered) -> String {
    let mut out = String::new();
    for entry in &rendered.objects {
        let origin = entry.object.origin();
        let scope = match entry.scope {
            Scope::Namespaced => "namespaced",
            Scope::Cluster => "cluster",
            Scope::Unknown => "unknown",
        };
        out.push_str(&format!("{}#{} {scope} ", origin.file, origin.document));
        write_canonical_json(&Value::Object(entry.object.body().clone()), &mut out);
        out.push('\n');
    }
    out
}

#[test]
fn tree_matches_golden() {
    let rendered = render(Format::Plain, &testdata("tree"), &config("demo")).unwrap();
    let actual = golden_text(&rendered);
    let golden_path = testdata("tree.golden");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden_path, &actual).unwrap();
    }
    let golden = std::fs::read_to_string(&golden_path).unwrap_or_else(|error| {
        panic!(
            "{}: {error} (run with UPDATE_GOLDEN=1)",
            golden_path.display()
        )
    });
    assert_eq!(
        actual,
        golden,
        "rendered tree differs from {}",
        golden_path.display()
    );
}

#[test]
fn tree_details() {
    let rendered = render(Format::Plain, &testdata("tree"), &config("demo")).unwrap();
    let summary: Vec<(String, String, Option<String>, Scope)> = rendered
        .objects
        .iter()
        .map(|entry| {
            (
                entry.object.kind().to_owned(),
                entry.object.name().to_owned(),
                entry.object.namespace().map(str::to_owned),
                entry.scope,
            )
        })
        .collect();
    let expected = |kind: &str, name: &str, namespace: Option<&str>, scope: Scope| {
        (
            kind.to_owned(),
            name.to_owned(),
            namespace.map(str::to_owned),
            scope,
        )
    };
    assert_eq!(
        summary,
        vec![
            // manifests/00-namespace.yaml: cluster-scoped, no namespace added.
            expected("Namespace", "demo", None, Scope::Cluster),
            // manifests/configmaps.yaml: documents 1 and 4; empty documents skipped.
            expected("ConfigMap", "first", Some("demo"), Scope::Namespaced),
            expected("ConfigMap", "second", Some("elsewhere"), Scope::Namespaced),
            // manifests/nested/deeper/service.json: JSON, namespace defaulted.
            expected("Service", "web", Some("demo"), Scope::Namespaced),
            // manifests/nested/deeper/widgets.yaml: CRD, its namespaced kind, an unknown kind.
            expected(
                "CustomResourceDefinition",
                "widgets.example.com",
                None,
                Scope::Cluster
            ),
            expected("Widget", "my-widget", Some("demo"), Scope::Namespaced),
            expected("Gadget", "unknown-scope", None, Scope::Unknown),
            // manifests/nested/list.yml: a List flattened.
            expected(
                "ServiceAccount",
                "listed-sa",
                Some("demo"),
                Scope::Namespaced
            ),
            expected("ClusterRole", "listed-role", None, Scope::Cluster),
        ]
    );
    let second = &rendered.objects[2].object;
    assert_eq!(second.origin().file, "manifests/configmaps.yaml");
    assert_eq!(second.origin().document, 4);
    assert_eq!(rendered.install_namespace, "demo");
}

#[test]
fn bare_directory_and_manifests_layout_render_the_same_objects() {
    let layout = render(Format::Plain, &testdata("tree"), &config("demo")).unwrap();
    let bare = render(Format::Plain, &testdata("tree/manifests"), &config("demo")).unwrap();
    assert_eq!(layout.canonical_form(), bare.canonical_form());
    assert_eq!(bare.objects[0].object.origin().file, "00-namespace.yaml");
}

#[test]
fn duplicate_objects_name_both_files() {
    let error = render(Format::Plain, &testdata("duplicate"), &config("team")).unwrap_err();
    let RenderError::DuplicateObject {
        object,
        first,
        second,
    } = &error
    else {
        panic!("expected a duplicate error, got {error}");
    };
    assert_eq!(object, "ConfigMap team/same");
    assert_eq!(first.file, "a/one.yaml");
    assert_eq!(second.file, "two.yaml");
    assert_eq!(second.document, Some(1));
    assert_eq!(
        error.to_string(),
        "duplicate object ConfigMap team/same: defined in a/one.yaml (document 0, line 1) and again in two.yaml (document 1, line 5)"
    );
}

#[test]
fn invalid_yaml_reports_file_document_and_line() {
    let error = render(Format::Plain, &testdata("invalid-yaml"), &config("demo")).unwrap_err();
    let RenderError::InvalidYaml { at, message } = &error else {
        panic!("expected invalid YAML, got {error}");
    };
    assert_eq!(at.file, "broken.yaml");
    assert_eq!(at.document, Some(1));
    // The unterminated string starts on line 10 and the parser gives up at the end of the file.
    let line = at.line.unwrap();
    assert!((10..=12).contains(&line), "line {line}: {error}");
    assert!(!message.is_empty());
    assert!(
        error
            .to_string()
            .starts_with("broken.yaml (document 1, line "),
        "{error}"
    );
}

#[test]
fn missing_name_is_reported_with_location() {
    let error = render(Format::Plain, &testdata("missing-name"), &config("demo")).unwrap_err();
    assert_eq!(
        error.to_string(),
        "object.yaml (document 0, line 1): missing metadata.name"
    );
}

#[test]
fn rendering_twice_gives_identical_bytes_and_digest() {
    let first = render(Format::Plain, &testdata("tree"), &config("demo")).unwrap();
    let second = render(Format::Plain, &testdata("tree"), &config("demo")).unwrap();
    assert_eq!(first.canonical_form(), second.canonical_form());
    assert_eq!(first.digest(), second.digest());
    // A different install namespace changes the content, so the digest.
    let other = render(Format::Plain, &testdata("tree"), &config("other")).unwrap();
    assert_ne!(first.digest(), other.digest());
}

#[cfg(unix)]
#[test]
fn symlinked_directories_are_not_entered_and_symlinked_files_are_read() {
    let root = std::env::temp_dir().join(format!("pallet-plain-symlink-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(
        root.join("sub/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: real}\n",
    )
    .unwrap();
    // A link back to the root would loop forever if followed.
    std::os::unix::fs::symlink(&root, root.join("sub/loop")).unwrap();
    std::os::unix::fs::symlink(root.join("sub/cm.yaml"), root.join("linked.yaml")).unwrap();
    let result = render(Format::Plain, &root, &config("demo"));
    std::fs::remove_dir_all(&root).unwrap();
    let error = result.unwrap_err();
    // The linked file is read, so the same ConfigMap appears twice.
    assert!(
        matches!(error, RenderError::DuplicateObject { ref first, ref second, .. }
            if first.file == "linked.yaml" && second.file == "sub/cm.yaml"),
        "{error}"
    );
}
