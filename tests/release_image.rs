//! The agent's release image, as tools/release.sh builds it without a Docker daemon: pushed to
//! the fixture registry, pulled back by digest, its config read (non-root user, OCI labels) and
//! its filesystem searched (no shell), and `pallet version` run from that filesystem alone, as
//! the image's user.
//!
//! tools/test.sh builds the real release (the static binary) first and names its output in
//! PALLET_RELEASE_DIR; without it this test builds an image from the test's own binary.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn run(command: &mut Command) -> String {
    let out = command.output().expect("the command runs");
    assert!(
        out.status.success(),
        "{command:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn crane() -> PathBuf {
    PathBuf::from(run(Command::new(root().join("tools/crane.sh")).arg("build")).trim())
}

/// The image pinned by digest: the release's, or one built now from this test's binary.
fn image(out: &Path) -> String {
    if let Some(dir) = std::env::var_os("PALLET_RELEASE_DIR") {
        let text = std::fs::read_to_string(PathBuf::from(dir).join("image.txt")).unwrap();
        return text.trim().to_string();
    }
    let fixtures = support::Fixtures::load();
    let repository = format!(
        "{}/{}",
        fixtures.registry_plain().host,
        support::unique_name("pallet-release")
    );
    let printed = run(Command::new(root().join("tools/release.sh"))
        .arg(&repository)
        .arg("--plain-http")
        .arg("--binary")
        .arg(env!("CARGO_BIN_EXE_pallet"))
        .arg("--out")
        .arg(out));
    printed.lines().last().unwrap_or_default().to_string()
}

fn uid() -> String {
    run(Command::new("id").arg("-u")).trim().to_string()
}

#[test]
fn the_image_runs_pallet_as_a_non_root_user_without_a_shell() {
    let scratch = tempfile::tempdir().unwrap();
    let pinned = image(&scratch.path().join("dist"));
    assert!(pinned.contains("@sha256:"), "pinned by digest: {pinned}");
    let crane = crane();

    let config: Value = serde_json::from_str(&run(Command::new(&crane).args([
        "config",
        "--insecure",
        &pinned,
    ])))
    .unwrap();
    let settings = &config["config"];
    assert_eq!(settings["User"], "65532:65532", "{config:#}");
    assert_eq!(settings["Entrypoint"][0], "/usr/local/bin/pallet");
    let labels = &settings["Labels"];
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    assert!(
        labels["org.opencontainers.image.source"].is_string(),
        "{labels:#}"
    );
    assert!(
        labels["org.opencontainers.image.revision"].is_string(),
        "{labels:#}"
    );
    let manifest: Value = serde_json::from_str(&run(Command::new(&crane).args([
        "manifest",
        "--insecure",
        &pinned,
    ])))
    .unwrap();
    let layers = manifest["layers"].as_array().unwrap();
    let size: u64 = layers.iter().map(|l| l["size"].as_u64().unwrap()).sum();
    eprintln!(
        "image {pinned}: {} layer(s), {:.1} MiB compressed",
        layers.len(),
        size as f64 / 1048576.0
    );

    // The filesystem of the image, pulled by digest.
    let tarball = scratch.path().join("rootfs.tar");
    run(Command::new(&crane)
        .args(["export", "--insecure", &pinned])
        .arg(&tarball));
    let rootfs = scratch.path().join("rootfs");
    let mut archive = tar::Archive::new(std::fs::File::open(&tarball).unwrap());
    archive.set_preserve_permissions(true);
    archive.unpack(&rootfs).unwrap();
    let mut files = Vec::new();
    let mut stack = vec![rootfs.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.is_symlink() {
                stack.push(path.clone());
            }
            files.push(
                path.strip_prefix(&rootfs)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    for shell in ["sh", "bash", "ash", "dash", "busybox"] {
        assert!(
            !files.iter().any(|f| f.rsplit('/').next() == Some(shell)),
            "a shell ({shell}) in the image: {files:?}"
        );
    }
    assert!(
        files.contains(&"usr/local/bin/pallet".to_string()),
        "{files:?}"
    );
    assert!(files.contains(&"etc/ssl/certs/ca-certificates.crt".to_string()));

    // `pallet version` from the image's filesystem alone, as the image's user.
    let output = if uid() == "0" {
        run(Command::new("chroot")
            .arg("--userspec=65532:65532")
            .arg(&rootfs)
            .args(["/usr/local/bin/pallet", "version", "--client"]))
    } else {
        run(Command::new(rootfs.join("usr/local/bin/pallet")).args(["version", "--client"]))
    };
    assert_eq!(
        output.trim(),
        format!("CLI:   {}", env!("CARGO_PKG_VERSION"))
    );
}
