//! `pallet fetch` against the real fixture servers: three source kinds assembled into one tree,
//! each resolved to an immutable ref; bad input gives a clear error.

mod support;

use std::process::Command;

use oci_client::secrets::RegistryAuth;

fn pallet(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pallet"))
        .args(args)
        .output()
        .expect("pallet runs")
}

#[tokio::test]
async fn fetches_image_git_and_http_sources_into_one_tree() {
    let fx = support::Fixtures::load();
    let name = support::unique_name("fetch");
    let work = tempfile::tempdir().unwrap();

    let image_dir = work.path().join("image");
    std::fs::create_dir_all(image_dir.join("manifests")).unwrap();
    std::fs::write(image_dir.join("manifests/app.yaml"), "kind: ConfigMap\n").unwrap();
    let registry = fx.registry_plain();
    let digest = fx
        .push_dir_as_image(registry, &name, "v1", &image_dir, &RegistryAuth::Anonymous)
        .await
        .unwrap();
    let repo = fx.git_repo(&name);
    let commit = repo.commit_files(
        "main",
        &[("deploy/extra.yaml", b"kind: Secret\n")],
        "extras",
    );
    let http_path = fx.put_file(
        &format!("{name}/crds.yaml"),
        b"kind: CustomResourceDefinition\n",
    );

    let bd = format!(
        r#"apiVersion: pallet.dev/v1alpha1
kind: BundleDeployment
metadata: {{name: {name}}}
spec:
  format: plain
  sources:
  - kind: image
    image: {{ref: "{host}/{name}:v1"}}
  - kind: git
    destination: extras
    git: {{repository: "{git}", ref: {{branch: main}}, directory: deploy}}
  - kind: http
    destination: crds
    http: {{url: "{http}"}}
"#,
        host = registry.host,
        git = repo.url(fx.git_plain()),
        http = fx.http_plain().url_for(&http_path),
    );
    let manifest = work.path().join("bd.yaml");
    std::fs::write(&manifest, bd).unwrap();
    let out = work.path().join("tree");
    let cache = work.path().join("cache");
    let result = pallet(&[
        "fetch",
        "-f",
        manifest.to_str().unwrap(),
        out.to_str().unwrap(),
        "--allow-loopback-egress",
        "--cache-dir",
        cache.to_str().unwrap(),
        "--plain-http-registry",
        &registry.host,
    ]);
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(
        result.status.success(),
        "pallet fetch failed: {}",
        String::from_utf8_lossy(&result.stderr)
    );

    let lines: Vec<Vec<&str>> = stdout.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert_eq!(lines[0][0], format!("image {}/{name}:v1", registry.host));
    assert!(
        lines[0][1].ends_with(&digest),
        "image resolves to its digest: {stdout}"
    );
    assert_eq!(lines[1], ["git main", commit.as_str(), "extras"]);
    assert!(
        lines[2][1].starts_with("sha256:") && lines[2][2] == "crds",
        "{stdout}"
    );

    assert_eq!(
        std::fs::read_to_string(out.join("manifests/app.yaml")).unwrap(),
        "kind: ConfigMap\n"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("extras/extra.yaml")).unwrap(),
        "kind: Secret\n"
    );
    assert!(out.join("crds/crds.yaml").is_file());
}

#[test]
fn bad_input_gives_a_clear_error() {
    let work = tempfile::tempdir().unwrap();
    let manifest = work.path().join("bd.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
    )
    .unwrap();
    let result = pallet(&[
        "fetch",
        "-f",
        manifest.to_str().unwrap(),
        work.path().join("out").to_str().unwrap(),
    ]);
    assert!(!result.status.success());
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        stderr.contains("is a ConfigMap, not a BundleDeployment"),
        "{stderr}"
    );

    let missing = pallet(&["fetch", "-f", "/nonexistent/bd.yaml", "out"]);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("reading /nonexistent/bd.yaml"));
}
