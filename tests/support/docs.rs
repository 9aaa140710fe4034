//! The documentation as tests read it: README.md, every page of `docs/` and the files of
//! `examples/`. Examples are found by the marker `<!-- example: NAME -->` before a fenced YAML
//! block, wherever the page holding them lives.

#![allow(dead_code)] // each test binary uses a different part of this module

use std::path::{Path, PathBuf};

/// The repository's root.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Files under `dir` (recursively) whose name ends with one of `extensions`, sorted.
fn files_under(dir: &Path, extensions: &[&str]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path
                .extension()
                .is_some_and(|e| extensions.iter().any(|x| e == *x))
            {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Every page of the documentation (README.md first, then `docs/`), as (path, text).
pub fn pages() -> Vec<(PathBuf, String)> {
    let mut paths = vec![root().join("README.md")];
    paths.extend(files_under(&root().join("docs"), &["md"]));
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            (path, text)
        })
        .collect()
}

/// The fenced YAML block right after `<!-- example: {marker} -->`, from whichever page holds it.
pub fn example(marker: &str) -> String {
    let start = format!("<!-- example: {marker} -->\n```yaml\n");
    for (_, text) in pages() {
        if let Some((_, after)) = text.split_once(&start) {
            let (block, _) = after.split_once("```").expect("a fenced block is closed");
            return block.to_string();
        }
    }
    panic!("no page of the documentation has the example {marker:?}")
}

/// Every YAML document showing a BundleDeployment: the fenced YAML blocks of the documentation
/// that hold one, and every document of the files in `examples/`. Each with where it is from.
pub fn bundle_deployment_examples() -> Vec<(String, String)> {
    // `kind: BundleDeployment` on a line of its own: a BundleDeploymentSet's example (checked by
    // tests/fleet_docs.rs) is not one.
    let is_bundle_deployment = |text: &str| {
        text.lines()
            .any(|line| line.trim_end() == "kind: BundleDeployment")
    };
    let mut examples = Vec::new();
    for (path, text) in pages() {
        for block in text.split("```yaml\n").skip(1) {
            let block = block.split("```").next().unwrap_or_default();
            if is_bundle_deployment(block) {
                examples.push((path.display().to_string(), block.to_string()));
            }
        }
    }
    for path in files_under(&root().join("examples"), &["yaml", "yml"]) {
        let text = std::fs::read_to_string(&path).unwrap();
        for document in text.split("\n---\n") {
            if is_bundle_deployment(document) {
                examples.push((path.display().to_string(), document.to_string()));
            }
        }
    }
    examples
}
