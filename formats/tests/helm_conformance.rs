//! The real-world corpus: the 20 published charts of `../shared/conformance/helm/` (see its README
//! for their origins), each rendered with its default values and with `values/<chart>.yaml`, 40
//! cases. For each case the agent's object set (`pallet_formats::render(Format::Helm, …)`, hooks by
//! pallet's policy) must equal `helm template`'s filtered by the same policy, field by field
//! (`compare/`).
//!
//! Prints one line per case and the count of equal cases; every case must be equal.

mod compare;
mod corpus;
mod oracle;

use compare::{run_cases, Case};
use corpus::{chart_dir, corpus};

#[test]
fn real_world_charts_render_as_helm_template_does() {
    let root = corpus();
    let mut charts: Vec<String> = std::fs::read_dir(root.join("charts"))
        .expect("corpus charts")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    charts.sort();
    if let Ok(only) = std::env::var("PALLET_HELM_CORPUS_ONLY") {
        charts.retain(|c| only.split(',').any(|o| o == c));
    }
    let mut cases = Vec::new();
    for c in &charts {
        let v = root.join("values").join(format!("{c}.yaml"));
        assert!(v.exists(), "{} is missing", v.display());
        cases.extend(Case::pair(c, root.join("charts").join(c), v));
    }
    let equal = run_cases(&cases, |case, scratch| {
        let name = case
            .chart
            .file_name()
            .expect("chart name")
            .to_string_lossy();
        chart_dir(&root, &name, scratch)
    });
    println!("helm corpus: {equal} of {} cases equal", cases.len());
    assert_eq!(
        equal,
        cases.len(),
        "every corpus case must equal helm template"
    );
}
