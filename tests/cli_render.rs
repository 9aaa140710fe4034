//! `pallet render`: a local tree by format, and a BundleDeployment's sources fetched from the
//! real fixture servers, with no cluster; a source naming a Secret fails clearly; the progress
//! display shows on a terminal and never on a pipe.

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn pallet(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pallet"))
        .args(args)
        // No cluster anywhere: render must not need one.
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .expect("pallet runs")
}

fn ok(args: &[&str]) -> (String, String) {
    let out = pallet(args);
    assert!(
        out.status.success(),
        "pallet {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn docs(yaml: &str) -> Vec<Value> {
    yaml.split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect()
}

fn write_bundle(dir: &Path) {
    std::fs::create_dir_all(dir.join("manifests")).unwrap();
    std::fs::write(
        dir.join("manifests/app.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {greeting: hi}\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata: {name: extra}\n",
    )
    .unwrap();
}

#[test]
fn renders_a_local_tree_by_format() {
    let work = tempfile::tempdir().unwrap();
    write_bundle(work.path());
    let dir = work.path().to_str().unwrap();
    let (yaml, _) = ok(&[
        "render",
        "--format",
        "plain",
        dir,
        "--install-namespace",
        "demo",
    ]);
    let objects = docs(&yaml);
    assert_eq!(objects.len(), 2, "{yaml}");
    assert_eq!(objects[0]["kind"], "ConfigMap");
    assert_eq!(objects[0]["metadata"]["namespace"], "demo");
    assert_eq!(objects[0]["data"]["greeting"], "hi");
    assert_eq!(objects[1]["kind"], "Namespace");
    assert!(objects[1]["metadata"].get("namespace").is_none());

    let (json, _) = ok(&["render", "--format", "plain", dir, "-o", "json"]);
    let list: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"].as_array().unwrap().len(), 2);

    // A helm chart, with a release name and a values file.
    let chart = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/formats/testdata/helm/charts/starter"
    );
    let values = work.path().join("values.yaml");
    std::fs::write(&values, "replicaCount: 3\n").unwrap();
    let (yaml, _) = ok(&[
        "render",
        "--format",
        "helm",
        chart,
        "--release-name",
        "demo",
        "--install-namespace",
        "web",
        "--values",
        values.to_str().unwrap(),
    ]);
    let deployment = docs(&yaml)
        .into_iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap_or_else(|| panic!("no Deployment in:\n{yaml}"));
    assert_eq!(deployment["metadata"]["name"], "demo-starter");
    assert_eq!(deployment["metadata"]["namespace"], "web");
    assert_eq!(deployment["spec"]["replicas"], 3);

    let bad = pallet(&["render", "--format", "plain"]);
    assert!(!bad.status.success());
}

/// `--kube-version` and `--api-versions` as `helm template` takes them, a chart whose
/// `kubeVersion` excludes helm's default, and errors printed once.
#[test]
fn helm_capabilities_come_from_kube_version_and_api_versions() {
    let work = tempfile::tempdir().unwrap();
    let chart = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/formats/testdata/helm/charts/capabilities"
    );
    let values = work.path().join("values.yaml");
    std::fs::write(
        &values,
        "probe: [example.com/v1, example.com/v1/Widget, apps/v1]\n",
    )
    .unwrap();
    let render = |extra: &[&str]| {
        let mut args = vec![
            "render",
            "--format",
            "helm",
            chart,
            "--values",
            values.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let (yaml, _) = ok(&args);
        docs(&yaml)
            .into_iter()
            .find(|o| o["kind"] == "ConfigMap")
            .unwrap_or_else(|| panic!("no ConfigMap in:\n{yaml}"))
    };
    let defaults = render(&[]);
    assert_eq!(defaults["data"]["kubeGit"], "v1.20.0");
    assert_eq!(defaults["data"]["has-example.com_v1"], "false");
    assert_eq!(defaults["data"]["has-apps_v1"], "true");

    let set = render(&[
        "--kube-version",
        "1.35",
        "--api-versions",
        "example.com/v1",
        "-a",
        "example.com/v1/Widget",
    ]);
    assert_eq!(set["data"]["kubeGit"], "v1.35.0");
    assert_eq!(set["data"]["kubeMinor"], "35");
    assert_eq!(set["data"]["has-example.com_v1"], "true");
    assert_eq!(set["data"]["has-example.com_v1_Widget"], "true");
    assert_eq!(set["data"]["has-apps_v1"], "true", "the defaults stay");

    // A chart whose kubeVersion excludes helm's default renders only with --kube-version.
    let constrained = work.path().join("constrained");
    std::fs::create_dir_all(constrained.join("templates")).unwrap();
    std::fs::write(
        constrained.join("Chart.yaml"),
        "apiVersion: v2\nname: constrained\nversion: 1.0.0\nkubeVersion: \">=1.30.0-0\"\n",
    )
    .unwrap();
    std::fs::write(
        constrained.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
    )
    .unwrap();
    let dir = constrained.to_str().unwrap();
    let refused = pallet(&["render", "--format", "helm", dir]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        err.contains("kubeVersion") && err.contains("v1.20.0"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    let (yaml, _) = ok(&[
        "render",
        "--format",
        "helm",
        dir,
        "--kube-version",
        "v1.35.4",
    ]);
    assert_eq!(docs(&yaml).len(), 1);

    // Bad flags say what is wrong.
    let bad = pallet(&["render", "--format", "helm", dir, "--kube-version", "next"]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success());
    assert!(
        err.contains("--kube-version \"next\" is not a Kubernetes version"),
        "{err}"
    );

    // An error whose cause prints itself is not printed twice (`X: X`).
    let missing = pallet(&["render", "--format", "helm", "/nonexistent/chart"]);
    let err = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(
        err.matches("No such file or directory").count(),
        1,
        "printed once: {err}"
    );
}

#[test]
fn renders_a_bundle_deployment_from_its_sources_without_a_cluster() {
    let fx = support::Fixtures::load();
    let name = support::unique_name("render");
    let work = tempfile::tempdir().unwrap();
    let bundle = work.path().join("bundle");
    write_bundle(&bundle);
    let repo = fx.git_repo(&name);
    repo.commit_dir("main", &bundle, "bundle");
    let http_path = fx.put_file(
        &format!("{name}/extra.yaml"),
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-http}\n",
    );
    let manifest = work.path().join("bd.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: pallet.dev/v1alpha1\nkind: BundleDeployment\nmetadata: {{name: {name}}}\n\
             spec:\n  installNamespace: demo\n  format: plain\n  sources:\n\
             \x20 - kind: git\n    git: {{repository: \"{}\", ref: {{branch: main}}}}\n\
             \x20 - kind: http\n    destination: extra\n    http: {{url: \"{}\"}}\n",
            repo.url(fx.git_plain()),
            fx.http_plain().url_for(&http_path)
        ),
    )
    .unwrap();
    let cache = work.path().join("cache");
    let (yaml, stderr) = ok(&[
        "render",
        "-f",
        manifest.to_str().unwrap(),
        "--allow-loopback-egress",
        "--cache-dir",
        cache.to_str().unwrap(),
    ]);
    let names: Vec<String> = docs(&yaml)
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["from-http", "app", "extra"], "{yaml}");
    // stderr is a pipe here: no progress display.
    assert_eq!(stderr, "");

    // On a terminal the fetch shows its progress (through `script`, which gives it a pty).
    let command = format!(
        "{} render -f {} --allow-loopback-egress --cache-dir {} >/dev/null",
        env!("CARGO_BIN_EXE_pallet"),
        manifest.display(),
        work.path().join("cache2").display()
    );
    let tty = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .output()
        .expect("script (bsdutils) runs");
    let shown = String::from_utf8_lossy(&tty.stdout);
    assert!(tty.status.success(), "{shown}");
    assert!(
        shown.contains("fetching [1/2] git ") && shown.contains("fetching [2/2] http "),
        "{shown:?}"
    );

    // A source naming a Secret cannot be rendered without a cluster, and says so.
    let with_secret = work.path().join("secret.yaml");
    std::fs::write(
        &with_secret,
        format!(
            "apiVersion: pallet.dev/v1alpha1\nkind: BundleDeployment\nmetadata: {{name: {name}}}\n\
             spec:\n  format: plain\n  sources:\n\
             \x20 - kind: git\n    git: {{repository: \"{}\", ref: {{branch: main}}, auth: {{secret: {{name: creds}}}}}}\n",
            repo.url(fx.git_plain())
        ),
    )
    .unwrap();
    let out = pallet(&["render", "-f", with_secret.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("source 0 (git ")
            && stderr.contains("names Secret creds: reading it needs a cluster"),
        "{stderr}"
    );
}

/// A helm BundleDeployment rendered without a cluster: `--values` files (repeatable, later wins)
/// stand in for `valuesFrom`, under the inline `values` and over the chart's `valuesFiles`; a
/// required `valuesFrom` reference without them is refused, naming it.
#[test]
fn helm_values_flags_stand_in_for_values_from() {
    let fx = support::Fixtures::load();
    let name = support::unique_name("rendervals");
    let work = tempfile::tempdir().unwrap();
    let chart = work.path().join("chart");
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: app\nversion: 1.0.0\n",
    )
    .unwrap();
    std::fs::write(
        chart.join("values.yaml"),
        "a: chart\nb: chart\nc: chart\nd: chart\n",
    )
    .unwrap();
    std::fs::write(
        chart.join("values-prod.yaml"),
        "a: prod\nb: prod\nc: prod\n",
    )
    .unwrap();
    std::fs::write(
        chart.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: out}\ndata:\n  a: {{ .Values.a }}\n  \
         b: {{ .Values.b }}\n  c: {{ .Values.c }}\n  d: {{ .Values.d }}\n",
    )
    .unwrap();
    let repo = fx.git_repo(&name);
    repo.commit_dir("main", &chart, "chart");
    let manifest = work.path().join("bd.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: pallet.dev/v1alpha1\nkind: BundleDeployment\nmetadata: {{name: {name}}}\n\
             spec:\n  installNamespace: demo\n  format: helm\n  sources:\n\
             \x20 - kind: git\n    git: {{repository: \"{}\", ref: {{branch: main}}}}\n\
             \x20 config:\n    helm:\n      valuesFiles: [values-prod.yaml]\n\
             \x20     valuesFrom: [{{kind: ConfigMap, name: app-values}}]\n\
             \x20     values: {{a: inline}}\n",
            repo.url(fx.git_plain()),
        ),
    )
    .unwrap();
    let cache = work.path().join("cache");
    let (manifest, cache) = (manifest.to_str().unwrap(), cache.to_str().unwrap());
    let refused = pallet(&[
        "render",
        "-f",
        manifest,
        "--allow-loopback-egress",
        "--cache-dir",
        cache,
    ]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        err.contains("config.helm.valuesFrom names ConfigMap app-values")
            && err.contains("--values FILE"),
        "{err}"
    );
    let first = work.path().join("first.yaml");
    let second = work.path().join("second.yaml");
    std::fs::write(&first, "a: first\nb: first\n").unwrap();
    std::fs::write(&second, "b: second\n").unwrap();
    let (yaml, _) = ok(&[
        "render",
        "-f",
        manifest,
        "--allow-loopback-egress",
        "--cache-dir",
        cache,
        "--values",
        first.to_str().unwrap(),
        "--values",
        second.to_str().unwrap(),
    ]);
    let out = docs(&yaml).remove(0);
    assert_eq!(
        out["data"],
        serde_json::json!({"a": "inline", "b": "second", "c": "prod", "d": "chart"}),
        "{yaml}"
    );
}

/// `--config FILE` takes `config.registryV1`: the provider and the deploymentConfig show in the
/// rendered webhook bundle; a file that is not one is a clear error.
#[test]
fn registry_v1_config_file() {
    let conformance = std::env::var_os("PALLET_CONFORMANCE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance/registry-v1")
        });
    let bundle = conformance.join("webhook-operator.v0.0.5");
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("config.yaml");
    std::fs::write(
        &config,
        "certificateProvider: CertManager\n\
         deploymentConfig:\n  env: [{name: LOG_LEVEL, value: debug}]\n  nodeSelector: {disk: ssd}\n",
    )
    .unwrap();
    let (yaml, _) = ok(&[
        "render",
        "--format",
        "registry-v1",
        "--install-namespace",
        "webhook-system",
        "--config",
        config.to_str().unwrap(),
        bundle.to_str().unwrap(),
    ]);
    let objects = docs(&yaml);
    let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    for kind in [
        "Issuer",
        "Certificate",
        "ValidatingWebhookConfiguration",
        "Service",
    ] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["nodeSelector"]["disk"], "ssd");
    assert!(pod["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["name"] == "LOG_LEVEL" && e["value"] == "debug"));

    std::fs::write(&config, "deploymentConfig: {env: notalist}\n").unwrap();
    let out = pallet(&[
        "render",
        "--format",
        "registry-v1",
        "--config",
        config.to_str().unwrap(),
        bundle.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--config") && stderr.contains("config.registryV1"),
        "{stderr}"
    );
}

/// A chart that builds a value in a loop, each level holding the previous, then serialises it:
/// held to the values budget, a clear error and exit status 1, not a stack overflow (134); the
/// same chart within the budget renders.
#[test]
fn a_value_a_chart_nests_past_the_budget_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("nesting");
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: nesting\nversion: 0.1.0\n",
    )
    .unwrap();
    let write = |depth: usize, print: &str| {
        std::fs::write(
            chart.join("templates/cm.yaml"),
            format!(
                "{{{{- $d := dict }}}}{{{{- range until {depth} }}}}{{{{- $d = dict \"inner\" $d }}}}{{{{- end }}}}\n\
                 apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: nested\ndata:\n  \
                 out: {{{{ {print} | len | quote }}}}\n"
            ),
        )
        .unwrap();
    };
    for print in [
        "toJson $d",
        "toYaml $d",
        "toString $d",
        "deepCopy $d | toJson",
    ] {
        write(100_000, print);
        let out = pallet(&["render", "--format", "helm", chart.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{print}: {stderr}");
        for part in [
            "render budget exceeded: value nesting depth",
            "limit of 64",
            "nesting/templates/cm.yaml",
        ] {
            assert!(stderr.contains(part), "{print}: {part:?} in {stderr}");
        }
    }
    write(20, "toJson $d");
    let (yaml, stderr) = ok(&["render", "--format", "helm", chart.to_str().unwrap()]);
    assert!(yaml.contains("name: nested"), "{yaml}");
    // Offline, the chart's `now` is the current time, and render says so.
    assert!(stderr.contains("`now` is the current time"), "{stderr}");
}
