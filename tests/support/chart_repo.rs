//! A Helm chart repository on the fixture file servers, built with the real helm (the oracle
//! binary `~/.cache/pallet/bin/helm` from `tools/helm.sh build`): charts packaged with
//! `helm package`, the index written by `helm repo index`. Include with
//! `#[path = "support/chart_repo.rs"] mod chart_repo;` next to `mod support;`.

#![allow(dead_code)] // each test binary uses a different part of this module

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{unique_name, Fixtures, Server};

/// The tiny chart the tests publish (`testdata/charts/repo-demo`): one ConfigMap
/// `<release>-demo` whose `chartVersion` is the chart's version.
pub const DEMO_CHART: &str = "repo-demo";

/// The oracle helm binary.
pub fn helm() -> PathBuf {
    let path = PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache/pallet/bin/helm");
    assert!(
        path.is_file(),
        "{} is missing: build it with `tools/helm.sh build`",
        path.display()
    );
    path
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("running helm");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A chart repository: a directory under the file servers' root.
pub struct ChartRepo {
    /// The URL path of the repository (`/<unique>`), the same on every file server.
    pub path: String,
    /// The directory on disk.
    pub dir: PathBuf,
}

impl ChartRepo {
    /// A new empty repository named after `prefix`.
    pub fn new(fx: &Fixtures, prefix: &str) -> ChartRepo {
        let name = unique_name(prefix);
        let dir = fx.files_root().join(&name);
        std::fs::create_dir_all(&dir).expect("create repo dir");
        ChartRepo {
            path: format!("/{name}"),
            dir,
        }
    }

    /// The repository's URL on `server`.
    pub fn url(&self, server: &Server) -> String {
        server.url_for(&self.path)
    }

    /// Packages the demo chart at `version` into the repository (not yet indexed); returns the
    /// archive's path.
    pub fn package(&self, version: &str) -> PathBuf {
        let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/charts/repo-demo");
        self.package_dir(&chart, version)
    }

    /// Packages the chart at `chart_dir` with `version` into the repository; written aside and
    /// renamed into place, so a server never serves half an archive.
    pub fn package_dir(&self, chart_dir: &Path, version: &str) -> PathBuf {
        let scratch = tempfile::tempdir().expect("tempdir");
        run(Command::new(helm())
            .arg("package")
            .arg(chart_dir)
            .args(["--version", version, "--destination"])
            .arg(scratch.path()));
        let file = std::fs::read_dir(scratch.path())
            .expect("read package dir")
            .next()
            .expect("helm package wrote nothing")
            .expect("entry")
            .path();
        let dest = self.dir.join(file.file_name().expect("file name"));
        std::fs::copy(&file, dest.with_extension("part")).expect("copy package");
        std::fs::rename(dest.with_extension("part"), &dest).expect("rename package");
        dest
    }

    /// Runs `helm repo index` over the repository (every archive in it), with chart URLs relative
    /// to the index, or absolute under `base_url` when given (`--url`).
    pub fn index(&self, base_url: Option<&str>) {
        let mut cmd = Command::new(helm());
        cmd.arg("repo").arg("index").arg(&self.dir);
        if let Some(url) = base_url {
            cmd.args(["--url", url]);
        }
        run(&mut cmd);
    }

    /// The URL path of a file in the repository.
    pub fn file_path(&self, name: &str) -> String {
        format!("{}/{name}", self.path)
    }

    /// Publishes the demo chart at every one of `versions` and indexes the repository.
    pub fn publish(&self, versions: &[&str]) {
        for version in versions {
            self.package(version);
        }
        self.index(None);
    }
}

/// The URL path of the demo chart's archive at `version` in `repo`.
pub fn demo_archive(repo: &ChartRepo, version: &str) -> String {
    repo.file_path(&format!("{DEMO_CHART}-{version}.tgz"))
}

/// Hex SHA-256 of a file.
pub fn file_sha256(path: &Path) -> String {
    let data = std::fs::read(path).expect("read file");
    crate::support::sha256_digest(&data)
        .trim_start_matches("sha256:")
        .to_string()
}
