//! Change-log benchmark (figures, not a test): what durability costs per entry. Each entry is
//! written as its write returns (one `write` per line, what the agent does), against fsyncing
//! the file after every line and once per pass of 10 entries (what the agent does at the end of
//! a pass), side by side in one run, on the disk holding `PALLET_BENCH_DIR` (default: the system
//! temp dir).
//!
//! `cargo bench --bench changelog`; `PALLET_BENCH_ENTRIES` changes the count (default 2000).

use std::time::{Duration, Instant};

use pallet::changelog::{ChangeLog, ObjectRef, Operation, Reason};

const PASS: usize = 10;

fn main() {
    let entries: usize = std::env::var("PALLET_BENCH_ENTRIES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000);
    let dir = match std::env::var_os("PALLET_BENCH_DIR") {
        Some(dir) => tempfile::tempdir_in(dir),
        None => tempfile::tempdir(),
    }
    .expect("a scratch directory");
    let mut rows = Vec::new();
    for (label, sync_every) in [
        ("write per line, no fsync", None),
        ("fsync per pass of 10 (the agent)", Some(PASS)),
        ("fsync per line", Some(1)),
    ] {
        let path = dir.path().join(format!("{}.jsonl", rows.len()));
        let log = ChangeLog::open("bench", false, Some(&path)).expect("open the change log");
        let start = Instant::now();
        for i in 0..entries {
            let mut entry = log.entry(
                "bench",
                Operation::Update,
                Reason::NewRevision,
                ObjectRef {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    namespace: Some("bench".into()),
                    name: format!("config-{i}"),
                },
            );
            entry.revision = Some(2);
            entry.resource_version_before = Some(i.to_string());
            entry.resource_version_after = Some((i + 1).to_string());
            entry.fields_changed = vec![".data.value".into()];
            log.record(&entry);
            if sync_every.is_some_and(|n| (i + 1) % n == 0) {
                log.sync();
            }
        }
        rows.push((label, start.elapsed()));
    }
    let base = rows[0].1;
    println!("{entries} entries, {} per pass", PASS);
    println!(
        "{:<36} {:>12} {:>14} {:>8}",
        "policy", "total", "per entry", "ratio"
    );
    for (label, total) in &rows {
        println!(
            "{label:<36} {:>12} {:>14} {:>7.1}x",
            format!("{:.1} ms", ms(*total)),
            format!("{:.1} µs", ms(*total) * 1000.0 / entries as f64),
            total.as_secs_f64() / base.as_secs_f64()
        );
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
