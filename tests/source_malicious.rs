//! The malicious archive corpus (`testdata/malicious/`, made by its `generate.py`) served by the
//! real fixture file server and fetched as HTTP sources: every archive is refused with a clear
//! error, and nothing is written outside the cache directory or left in it.

#[path = "support/sources_extra.rs"]
mod sources_extra;
mod support;

use std::path::Path;

use pallet::source::{Limits, SourceSecrets};
use sources_extra::*;
use support::{unique_name, Fixtures};

/// Limits low enough that the committed (small) bomb and many-files archives trip them; the
/// defaults apply the same checks at larger values.
const TEST_LIMITS: Limits = Limits {
    max_total_bytes: 32 << 20,
    max_entries: 1000,
    max_file_bytes: 16 << 20,
};

/// (file, expected category, text the message must contain)
const CORPUS: &[(&str, &str, &str)] = &[
    ("path-traversal.tar", "UnsafeContent", "'..'"),
    ("absolute-path.tar", "UnsafeContent", "absolute path"),
    (
        "symlink-escape.tar",
        "UnsafeContent",
        "outside the destination",
    ),
    (
        "symlink-absolute.tar",
        "UnsafeContent",
        "outside the destination",
    ),
    ("hardlink-escape.tar", "UnsafeContent", "hardlink"),
    ("device-file.tar", "UnsafeContent", "device files and FIFOs"),
    ("fifo.tar", "UnsafeContent", "device files and FIFOs"),
    ("many-files.tar.gz", "LimitExceeded", "number of entries"),
    ("gzip-bomb.tar.gz", "LimitExceeded", "bomb.bin"),
];

/// Paths the archives aim at outside any destination.
const OUTSIDE: &[&str] = &[
    "/tmp/pallet-malicious-absolute.txt",
    "/tmp/pallet-malicious-symlink.txt",
    "/tmp/pallet-malicious-traversal.txt",
];

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn every_malicious_archive_is_refused_and_nothing_escapes() {
    let fx = Fixtures::load();
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/malicious");
    let run = unique_name("malicious");
    let mut failures = Vec::new();
    for (file, category, text) in CORPUS {
        // A sandbox per archive: the cache is its only child, so anything else in it escaped.
        let sandbox = tempfile::tempdir().unwrap();
        let nested = sandbox.path().join("a/b/c");
        std::fs::create_dir_all(&nested).unwrap();
        let cache_root = nested.join("cache");
        let fetcher = fetcher_at(cache_root.clone(), TEST_LIMITS);
        let data = std::fs::read(corpus.join(file))
            .unwrap_or_else(|e| panic!("{file}: {e} (run testdata/malicious/generate.py)"));
        let path = fx.put_file(&format!("{run}/{file}"), &data);
        let result = fetcher
            .fetch(
                &http_source(&fx.http_plain().url_for(&path), None),
                &SourceSecrets::default(),
            )
            .await;
        match result {
            Ok(got) => failures.push(format!(
                "{file}: accepted, unpacked to {}",
                got.path.display()
            )),
            Err(e) => {
                let msg = e.to_string();
                eprintln!("{file}: {msg}");
                if e.category() != *category || !msg.contains(text) {
                    failures.push(format!(
                        "{file}: expected {category} mentioning {text:?}, got {}: {msg}",
                        e.category()
                    ));
                }
            }
        }
        // Nothing outside the cache directory...
        for (dir, expected) in [
            (sandbox.path().to_path_buf(), vec!["a"]),
            (sandbox.path().join("a"), vec!["b"]),
            (sandbox.path().join("a/b"), vec!["c"]),
            (nested.clone(), vec!["cache"]),
        ] {
            let found = entries(&dir);
            if found != expected {
                failures.push(format!("{file}: {} holds {found:?}", dir.display()));
            }
        }
        for outside in OUTSIDE {
            if Path::new(outside).exists() {
                failures.push(format!("{file}: {outside} was created"));
            }
        }
        // ...and nothing half-written left inside it.
        for sub in ["entries", "tmp"] {
            let left = entries(&cache_root.join(sub));
            if !left.is_empty() {
                failures.push(format!("{file}: cache {sub}/ holds {left:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
