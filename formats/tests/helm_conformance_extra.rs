//! A second real-world set, beside the corpus of `helm_conformance`: published charts that ship
//! inside their projects' Go modules, fetched by `tools/extra-charts.sh` into
//! `${PALLET_CACHE_DIR:-~/.cache/pallet}/extra-charts/charts/<chart>`. Each chart that has a
//! values file in `formats/testdata/extra-values/<chart>.yaml` (origins and licences in the README
//! there) is rendered with its default values and with that file, and compared with `helm
//! template` field by field (`compare/`).
//!
//! Prints one line per case and `extra charts: X of Y cases equal`; every case must be equal.
//! `PALLET_HELM_EXTRA_ONLY=a,b` limits it to some charts.

mod compare;
mod oracle;

use compare::{run_cases, Case};
use std::path::{Path, PathBuf};

/// Where `tools/extra-charts.sh` puts the charts.
fn extra_charts_dir() -> PathBuf {
    std::env::var_os("PALLET_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").expect("HOME is set")).join(".cache/pallet")
        })
        .join("extra-charts/charts")
}

#[test]
fn extra_real_world_charts_render_as_helm_template_does() {
    let values_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/extra-values");
    let mut charts: Vec<String> = std::fs::read_dir(&values_dir)
        .expect("testdata/extra-values")
        .filter_map(|e| {
            let name = e
                .expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned();
            name.strip_suffix(".yaml").map(str::to_string)
        })
        .collect();
    charts.sort();
    if let Ok(only) = std::env::var("PALLET_HELM_EXTRA_ONLY") {
        charts.retain(|c| only.split(',').any(|o| o == c));
    }
    let root = extra_charts_dir();
    let missing: Vec<&String> = charts
        .iter()
        .filter(|c| !root.join(c).join("Chart.yaml").is_file())
        .collect();
    assert!(
        missing.is_empty(),
        "the extra charts {missing:?} are not in {}: run `tools/extra-charts.sh` from the \
         repository root (fetches them through the Go module proxy)",
        root.display()
    );
    let cases: Vec<Case> = charts
        .iter()
        .flat_map(|c| Case::pair(c, root.join(c), values_dir.join(format!("{c}.yaml"))))
        .collect();
    let equal = run_cases(&cases, |case, _| case.chart.clone());
    println!("extra charts: {equal} of {} cases equal", cases.len());
    assert_eq!(
        equal,
        cases.len(),
        "every extra case must equal helm template"
    );
}
