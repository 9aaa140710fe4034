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

/// A chart whose output depends on the clock and on every random function.
fn random_chart(dir: &std::path::Path) -> std::path::PathBuf {
    let root = dir.join("rand");
    std::fs::create_dir_all(root.join("templates")).expect("mkdir");
    std::fs::write(
        root.join("Chart.yaml"),
        "apiVersion: v2\nname: rand\nversion: 0.1.0\n",
    )
    .expect("write");
    std::fs::write(root.join("values.yaml"), "t: '{{ randAlpha 6 }}'\n").expect("write");
    std::fs::write(
        root.join("templates/_h.tpl"),
        "{{ define \"pw\" }}{{ randAlphaNum 16 }}{{ end }}",
    )
    .expect("write");
    std::fs::write(
        root.join("templates/secret.yaml"),
        concat!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n",
            "  an: {{ randAlphaNum 12 | quote }}\n",
            "  a: {{ randAlpha 12 | quote }}\n",
            "  n: {{ randNumeric 12 | quote }}\n",
            "  asc: {{ randAscii 12 | quote }}\n",
            "  i: {{ randInt 10 1000 | quote }}\n",
            "  u: {{ uuidv4 | quote }}\n",
            "  inc: {{ include \"pw\" . | quote }}\n",
            "  tpl: {{ tpl .Values.t . | quote }}\n",
            "  now: {{ now | date \"2006-01-02T15:04:05Z07:00\" | quote }}\n",
        ),
    )
    .expect("write");
    root
}

/// Random functions and `now` are pinned by the options: the same options give the same
/// objects (so the same digest, no new revision per reconcile); another seed gives other
/// random output; the output has the shape of each function.
#[test]
fn random_functions_are_stable_per_seed_and_now_is_pinned() {
    use pallet_formats::{render, Format, HelmOptions, RenderConfig};
    let dir = tempfile::tempdir().expect("tempdir");
    let chart = random_chart(dir.path());
    let config = |seed: [u8; 32]| RenderConfig {
        install_namespace: "apps".into(),
        helm: HelmOptions {
            release_name: "web".into(),
            now: 1_709_211_845,
            seed,
            ..HelmOptions::default()
        },
        ..RenderConfig::default()
    };
    let seed = [3u8; 32];
    let a = render(Format::Helm, &chart, &config(seed)).expect("render");
    let b = render(Format::Helm, &chart, &config(seed)).expect("render");
    assert_eq!(a.digest(), b.digest(), "same options, same digest");
    let data = |r: &pallet_formats::Rendered| r.objects[0].object.body()["stringData"].clone();
    let d = data(&a);
    let field = |k: &str| d[k].as_str().expect("string").to_string();
    assert_eq!(field("now"), "2024-02-29T13:04:05Z");
    assert!(field("an").len() == 12 && field("an").chars().all(|c| c.is_ascii_alphanumeric()));
    assert!(field("a").len() == 12 && field("a").chars().all(|c| c.is_ascii_alphabetic()));
    assert!(field("n").len() == 12 && field("n").chars().all(|c| c.is_ascii_digit()));
    assert!(field("asc").len() == 12 && field("asc").chars().all(|c| (' '..='~').contains(&c)));
    let i: i64 = field("i").parse().expect("int");
    assert!((10..1000).contains(&i), "{i}");
    let u = field("u");
    assert!(
        u.len() == 36 && u.as_bytes()[14] == b'4' && "89ab".contains(u.as_bytes()[19] as char),
        "{u}"
    );
    assert_eq!(field("inc").len(), 16);
    assert_eq!(field("tpl").len(), 6);
    // Successive calls draw successive values, not one repeated value.
    assert_ne!(field("an"), field("inc")[..12]);

    // Every byte of the 256-bit seed counts: the first and the last changed alone each give
    // other random output.
    let (mut first, mut last) = (seed, seed);
    first[0] ^= 1;
    last[31] ^= 1;
    for changed in [first, last] {
        let other = render(Format::Helm, &chart, &config(changed)).expect("render");
        assert_ne!(a.digest(), other.digest());
        let o = data(&other);
        for k in ["an", "a", "n", "asc", "u", "inc", "tpl"] {
            assert_ne!(d[k], o[k], "{k} must change with the seed");
        }
        assert_eq!(d["now"], o["now"], "the clock does not depend on the seed");
    }
}
