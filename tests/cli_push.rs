//! `pallet push DIR REF`: the directory published as an OCI bundle image on the real fixture
//! registries, read back by the image source as the same tree; pushes are deterministic.

mod support;

use std::process::Command;

fn pallet(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pallet"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("pallet runs")
}

fn list(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in pallet::push::dir_entries(dir).unwrap() {
        if let pallet::push::TarEntry::File(path, data) = entry {
            out.push((path, data));
        }
    }
    out
}

#[test]
fn pushes_a_directory_that_the_image_source_reads_back() {
    let fx = support::Fixtures::load();
    let registry = fx.registry_plain();
    let name = support::unique_name("push");
    let work = tempfile::tempdir().unwrap();
    let bundle = work.path().join("bundle");
    std::fs::create_dir_all(bundle.join("manifests/nested")).unwrap();
    std::fs::write(bundle.join("manifests/a.yaml"), "kind: ConfigMap\n").unwrap();
    std::fs::write(bundle.join("manifests/nested/b.json"), "{}\n").unwrap();

    let reference = format!("{}/{name}/bundle:v1", registry.host);
    let push = |reference: &str| {
        let out = pallet(
            &["push", bundle.to_str().unwrap(), reference, "--plain-http"],
            &[],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let pinned = push(&reference);
    let (repo, digest) = pinned.split_once('@').unwrap();
    assert_eq!(repo, format!("{}/{name}/bundle", registry.host));
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{pinned}"
    );
    // Same tree, same image: a re-push (even under another tag) gives the same digest.
    assert_eq!(push(&format!("{}/{name}/bundle:v2", registry.host)), pinned);

    // The image source fetches it (by tag and by the printed digest) as the same tree.
    for image in [reference.as_str(), pinned.as_str()] {
        let manifest = work.path().join("bd.yaml");
        std::fs::write(
            &manifest,
            format!(
                "apiVersion: pallet.dev/v1alpha1\nkind: BundleDeployment\nmetadata: {{name: x}}\n\
                 spec:\n  format: plain\n  sources:\n  - kind: image\n    image: {{ref: \"{image}\"}}\n"
            ),
        )
        .unwrap();
        let out_dir = tempfile::tempdir().unwrap();
        let tree = out_dir.path().join("tree");
        let fetched = pallet(
            &[
                "fetch",
                "-f",
                manifest.to_str().unwrap(),
                tree.to_str().unwrap(),
                "--allow-loopback-egress",
                "--cache-dir",
                out_dir.path().join("cache").to_str().unwrap(),
                "--plain-http-registry",
                &registry.host,
            ],
            &[],
        );
        assert!(
            fetched.status.success(),
            "{}",
            String::from_utf8_lossy(&fetched.stderr)
        );
        assert!(String::from_utf8_lossy(&fetched.stdout).contains(digest));
        assert_eq!(list(&tree), list(&bundle));
    }
}

#[test]
fn pushes_to_a_tls_registry_with_credentials_and_fails_clearly_without() {
    let fx = support::Fixtures::load();
    let registry = fx.registry_tls();
    let name = support::unique_name("push-tls");
    let bundle = tempfile::tempdir().unwrap();
    std::fs::write(bundle.path().join("cm.yaml"), "kind: ConfigMap\n").unwrap();
    let reference = format!("{}/{name}:v1", registry.host);
    let ca = fx.ca_cert().to_str().unwrap().to_string();
    let args = [
        "push",
        bundle.path().to_str().unwrap(),
        reference.as_str(),
        "--ca-file",
        ca.as_str(),
    ];
    let denied = pallet(&args, &[]);
    assert!(!denied.status.success());
    let stderr = String::from_utf8_lossy(&denied.stderr);
    assert!(
        stderr.contains(&format!("pushing to {reference}")),
        "{stderr}"
    );

    let user = registry.username.clone().unwrap();
    let password = registry.password.clone().unwrap();
    let out = pallet(
        &args,
        &[
            ("PALLET_REGISTRY_USERNAME", &user),
            ("PALLET_REGISTRY_PASSWORD", &password),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout)
        .starts_with(&format!("{}/{name}@sha256:", registry.host)));
}
