//! The agent re-renders a chart at every reconcile: an unchanged chart must cost no translation.
//! The translated environment is cached by the digest of the template set's content, so the same
//! chart at another path (a new fetch into another directory) hits the cache, and a changed
//! template is translated once. One test in this binary: the counter is process-wide.

use std::path::Path;

use pallet_formats::{helm, Format, HelmOptions, RenderConfig};

fn write_chart(dir: &Path, greeting: &str) {
    std::fs::create_dir_all(dir.join("templates")).expect("mkdir");
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: cached\nversion: 1.0.0\n",
    )
    .expect("write");
    std::fs::write(dir.join("values.yaml"), "replicas: 1\n").expect("write");
    std::fs::write(
        dir.join("templates/_helpers.tpl"),
        "{{- define \"cached.name\" -}}{{ .Release.Name }}-cached{{- end -}}\n",
    )
    .expect("write");
    std::fs::write(
        dir.join("templates/cm.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{{{ include \"cached.name\" . }}}}\ndata:\n  greeting: {greeting}\n  replicas: {{{{ .Values.replicas | quote }}}}\n"
        ),
    )
    .expect("write");
}

fn render(dir: &Path, replicas: i64) -> String {
    let config = RenderConfig {
        install_namespace: "ns".into(),
        helm: HelmOptions {
            release_name: "rel".into(),
            values: serde_json::json!({ "replicas": replicas }),
            ..HelmOptions::default()
        },
        ..RenderConfig::default()
    };
    let rendered = pallet_formats::render(Format::Helm, dir, &config).expect("renders");
    let body = rendered.objects[0].object.body();
    format!(
        "{}/{}",
        body["data"]["greeting"].as_str().expect("greeting"),
        body["data"]["replicas"].as_str().expect("replicas")
    )
}

#[test]
fn an_unchanged_chart_is_translated_once() {
    let work = tempfile::tempdir().expect("tempdir");
    let first = work.path().join("fetch-1");
    write_chart(&first, "hello");

    let before = helm::translations();
    assert_eq!(render(&first, 1), "hello/1");
    assert_eq!(
        helm::translations(),
        before + 1,
        "the first render translates"
    );

    // Re-renders, with other values, and of the same content fetched to another directory.
    assert_eq!(render(&first, 2), "hello/2");
    let second = work.path().join("fetch-2");
    write_chart(&second, "hello");
    assert_eq!(render(&second, 3), "hello/3");
    assert_eq!(
        helm::translations(),
        before + 1,
        "an unchanged template set is not translated again"
    );

    // A changed template is translated, once.
    let changed = work.path().join("fetch-3");
    write_chart(&changed, "bonjour");
    assert_eq!(render(&changed, 1), "bonjour/1");
    assert_eq!(render(&changed, 1), "bonjour/1");
    assert_eq!(helm::translations(), before + 2);
}
