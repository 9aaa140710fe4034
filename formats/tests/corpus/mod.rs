//! The real-world helm corpus in `../shared/conformance/helm` (see its README), shared by the
//! differential test and the cold-render benchmark: where it is, and each chart's directory with
//! the dependencies the shared copy lacks put back.

use std::path::{Path, PathBuf};

/// `../shared/conformance/helm` beside the repository, or `PALLET_HELM_CORPUS`.
pub fn corpus() -> PathBuf {
    let dir = std::env::var_os("PALLET_HELM_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // shared/ sits beside the repository: one level up from the root crate, two from
            // formats/ (this file is compiled into both).
            let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
            ["..", "../.."]
                .iter()
                .map(|up| manifest.join(up).join("shared/conformance/helm"))
                .find(|d| d.is_dir())
                .unwrap_or_else(|| manifest.join("../shared/conformance/helm"))
        });
    assert!(
        dir.join("charts").is_dir(),
        "the helm corpus is not at {}: it lives in shared/conformance/helm beside the repository \
         (or set PALLET_HELM_CORPUS)",
        dir.display()
    );
    dir
}

/// Where a dependency missing from the shared corpus comes from.
enum Dependency {
    /// The corpus's own top-level chart of the same name and version.
    Corpus(&'static str),
    /// An empty chart of this version (a dependency disabled by default, as the corpus README
    /// does for loki's minio: helm refuses a chart whose declared dependency is absent).
    Stub(&'static str, &'static str),
}

/// Dependencies the corpus README lists but its copy in shared/ lacks (loki has no `charts/`,
/// kube-prometheus-stack only `crds`). Both tools render the same assembled tree, so the
/// comparison stays exact. prometheus-windows-exporter is not in the corpus and is stubbed: its
/// own objects are absent from both sides when `windowsMonitoring.enabled` is set, while the
/// parent's Windows rules and dashboards still render.
const MISSING_DEPENDENCIES: &[(&str, &[Dependency])] = &[
    (
        "loki",
        &[
            Dependency::Stub("minio", "5.4.0"),
            Dependency::Stub("rollout-operator", "0.51.1"),
        ],
    ),
    (
        "kube-prometheus-stack",
        &[
            Dependency::Corpus("kube-state-metrics"),
            Dependency::Corpus("prometheus-node-exporter"),
            Dependency::Corpus("grafana"),
            Dependency::Stub("prometheus-windows-exporter", "0.12.0"),
        ],
    ),
];

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// The chart's directory, assembled in `scratch` when the corpus copy lacks dependencies.
pub fn chart_dir(root: &Path, chart: &str, scratch: &Path) -> PathBuf {
    let source = root.join("charts").join(chart);
    let Some((_, deps)) = MISSING_DEPENDENCIES.iter().find(|(c, _)| *c == chart) else {
        return source;
    };
    let dir = scratch.join(chart);
    copy_tree(&source, &dir);
    for dep in *deps {
        match dep {
            Dependency::Corpus(name) => {
                let target = dir.join("charts").join(name);
                if !target.exists() {
                    copy_tree(&root.join("charts").join(name), &target);
                }
            }
            Dependency::Stub(name, version) => {
                let target = dir.join("charts").join(name);
                if !target.exists() {
                    std::fs::create_dir_all(&target).expect("mkdir");
                    std::fs::write(
                        target.join("Chart.yaml"),
                        format!("apiVersion: v2\nname: {name}\nversion: {version}\n"),
                    )
                    .expect("write stub");
                }
            }
        }
    }
    dir
}
