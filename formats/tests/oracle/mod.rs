//! What the helm test binaries share about the oracle (`helm` v3.19.5, built by
//! `tools/helm.sh build`) and about reading its output as Kubernetes reads YAML.

#![allow(dead_code)] // each test binary uses a different part of this module

use std::path::PathBuf;

/// The oracle binary; fails (never skips) with instructions when it has not been built.
pub fn helm_bin() -> PathBuf {
    let cache = std::env::var_os("PALLET_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").expect("HOME is set")).join(".cache/pallet")
        });
    let bin = cache.join("bin/helm");
    assert!(
        bin.exists(),
        "the helm oracle is not built at {}: run `tools/helm.sh build` from the repository root \
         (needs Go and the Go module proxy)",
        bin.display()
    );
    bin
}

/// YAML as helm and Kubernetes read it (sigs.k8s.io/yaml, YAML 1.1): `0644` is octal, a
/// repeated key keeps its last value, comments of any length. Used for helm's output and for
/// values files (which reach pallet already parsed, as the CR's JSON).
pub fn yaml11() -> serde_saphyr::Options {
    serde_saphyr::options! {
        legacy_octal_numbers: true,
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::LastWins,
        emit_comments: false,
    }
}

/// helm's output split at `---` lines into its non-empty documents.
pub fn split_docs(s: &str) -> Vec<serde_json::Value> {
    try_split_docs(s).unwrap_or_else(|e| panic!("{e}"))
}

/// [`split_docs`], with a document that is not YAML to this reader as an error.
pub fn try_split_docs(s: &str) -> Result<Vec<serde_json::Value>, String> {
    let mut docs = vec![String::new()];
    for line in s.split_inclusive('\n') {
        if line.trim_end() == "---" {
            docs.push(String::new());
        } else if let Some(d) = docs.last_mut() {
            d.push_str(line);
        }
    }
    let mut out = Vec::new();
    for d in docs.iter().filter(|d| !d.trim().is_empty()) {
        // As go-yaml reads it: also quoted continuation lines no deeper than their key.
        let v: serde_json::Value = pallet_formats::object::from_yaml_str(d)
            .map_err(|e| format!("helm output is not YAML: {e}\n{d}"))?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}
