//! `lookup`: empty without a cluster (as `helm template`), the caller's answers with one, and a
//! render that asks for objects without an answer names them all.

use pallet_formats::{
    render, Format, HelmOptions, LookupAnswer, LookupKey, Lookups, RenderConfig, RenderError,
};
use serde_json::json;

/// A chart that keeps its generated password when its Secret exists (the Bitnami pattern), and
/// lists the ConfigMaps of its namespace.
fn chart() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("templates")).unwrap();
    std::fs::write(
        dir.path().join("Chart.yaml"),
        "apiVersion: v2\nname: db\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("templates/secret.yaml"),
        r#"{{- $old := lookup "v1" "Secret" .Release.Namespace "db-auth" }}
apiVersion: v1
kind: Secret
metadata: {name: db-auth}
data:
  password: {{ if $old }}{{ index $old.data "password" }}{{ else }}{{ randAlphaNum 16 | b64enc }}{{ end }}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: seen}
data:
  configmaps: {{ (lookup "v1" "ConfigMap" .Release.Namespace "").items | default list | len | quote }}
"#,
    )
    .unwrap();
    dir
}

fn config(lookups: Lookups) -> RenderConfig {
    RenderConfig {
        install_namespace: "apps".into(),
        helm: HelmOptions {
            release_name: "db".into(),
            lookups,
            ..HelmOptions::default()
        },
        ..RenderConfig::default()
    }
}

fn key(kind: &str, name: &str) -> LookupKey {
    LookupKey {
        api_version: "v1".into(),
        kind: kind.into(),
        namespace: "apps".into(),
        name: name.into(),
    }
}

#[test]
fn lookups_are_empty_offline_named_when_unanswered_and_answered_when_given() {
    let chart = chart();
    // Offline: helm template's empty answer (an empty list has no items: len 0).
    let offline = render(Format::Helm, chart.path(), &config(Lookups::Offline)).unwrap();
    let password = offline.objects[0].object.body()["data"]["password"].clone();
    assert_eq!(password.as_str().map(str::len), Some(24), "a new password");

    // With a cluster and no answers yet: every lookup is named, in order.
    let error = render(
        Format::Helm,
        chart.path(),
        &config(Lookups::Answers(vec![])),
    )
    .unwrap_err();
    match &error {
        RenderError::LookupsNeeded { keys } => {
            assert_eq!(keys, &[key("Secret", "db-auth"), key("ConfigMap", "")])
        }
        other => panic!("expected LookupsNeeded, got {other}"),
    }
    assert_eq!(error.category(), "LookupsNeeded");

    // Answered: the existing password is kept, the list is counted.
    let answers = Lookups::Answers(vec![
        LookupAnswer {
            key: key("Secret", "db-auth"),
            answer: json!({"apiVersion": "v1", "kind": "Secret",
                           "metadata": {"name": "db-auth", "namespace": "apps"},
                           "data": {"password": "a2VwdA=="}}),
        },
        LookupAnswer {
            key: key("ConfigMap", ""),
            answer: json!({"apiVersion": "v1", "kind": "ConfigMapList",
                           "items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]}),
        },
    ]);
    let answered = render(Format::Helm, chart.path(), &config(answers)).unwrap();
    assert_eq!(
        answered.objects[0].object.body()["data"]["password"],
        "a2VwdA=="
    );
    assert_eq!(answered.objects[1].object.body()["data"]["configmaps"], "2");

    // Not found is an empty map: a new password again.
    let not_found = Lookups::Answers(vec![
        LookupAnswer {
            key: key("Secret", "db-auth"),
            answer: json!({}),
        },
        LookupAnswer {
            key: key("ConfigMap", ""),
            answer: json!({"items": []}),
        },
    ]);
    let fresh = render(Format::Helm, chart.path(), &config(not_found)).unwrap();
    assert_eq!(
        fresh.objects[0].object.body()["data"]["password"],
        password,
        "the same seed gives the same new password"
    );
}
