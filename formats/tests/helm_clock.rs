//! `now` reads the injected clock (also inside defines and tpl), so renders are reproducible.

use pallet_formats::helm::{self, RenderOptions};

#[test]
fn now_uses_the_injected_clock_everywhere() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("clock");
    std::fs::create_dir_all(root.join("templates")).expect("mkdir");
    std::fs::write(
        root.join("Chart.yaml"),
        "apiVersion: v2\nname: clock\nversion: 0.1.0\n",
    )
    .expect("write");
    std::fs::write(root.join("values.yaml"), "t: '{{ now | date \"2006\" }}'\n").expect("write");
    std::fs::write(
        root.join("templates/_h.tpl"),
        "{{ define \"stamp\" }}{{ now | date \"15:04\" }}{{ end }}",
    )
    .expect("write");
    std::fs::write(
        root.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  top: {{ now | date \"2006-01-02\" | quote }}\n  inc: {{ include \"stamp\" . | quote }}\n  tpl: {{ tpl .Values.t . | quote }}\n  raw: {{ now | quote }}\n",
    )
    .expect("write");
    let opts = RenderOptions {
        now: Some(1_709_211_845),
        ..RenderOptions::default()
    };
    let objs = helm::render(&root, &opts).expect("render");
    let data = &objs[0]["data"];
    assert_eq!(data["top"], "2024-02-29");
    assert_eq!(data["inc"], "13:04");
    assert_eq!(data["tpl"], "2024");
    assert_eq!(data["raw"], "2024-02-29 13:04:05 +0000 UTC");
}

#[test]
fn helm_format_renders_through_the_shared_entry_point() {
    use pallet_formats::{render, Format, HelmOptions, RenderConfig};
    let chart =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/helm/charts/starter");
    let config = RenderConfig {
        install_namespace: "apps".into(),
        helm: HelmOptions {
            release_name: "web".into(),
            values: serde_json::json!({"ingress": {"enabled": true}}),
            ..HelmOptions::default()
        },
        ..RenderConfig::default()
    };
    let rendered = render(Format::Helm, &chart, &config).expect("render");
    let kinds: Vec<String> = rendered
        .objects
        .iter()
        .map(|o| o.object.kind().to_string())
        .collect();
    assert!(
        kinds.contains(&"Deployment".to_string()) && kinds.contains(&"Ingress".to_string()),
        "{kinds:?}"
    );
    assert!(
        rendered
            .objects
            .iter()
            .all(|o| o.object.namespace() == Some("apps")),
        "namespaced objects get the install namespace"
    );
    let e = render(Format::Helm, &chart, &RenderConfig::default()).expect_err("empty release name");
    assert!(e.to_string().contains("releaseName"), "{e}");
}
