//! The malicious archive corpus (`testdata/malicious/`, made by its `generate.py`) served by the
//! real fixture servers and fetched as sources: every archive is refused with a clear error
//! naming the source, the entry and the budget, nothing is written outside the cache directory or
//! left in it, and the archives built to inflate (hardlinks, header records, skipped entries,
//! subcharts, git blobs) are refused with the memory of the process that reads them bounded.

#[path = "support/sources_extra.rs"]
mod sources_extra;
mod support;

use std::path::Path;
use std::process::Command;

use pallet::api::{HelmRepositorySource, Source, SourceKind};
use pallet::source::{Fetched, Fetcher, Limits, SourceError, SourceSecrets};
use sources_extra::*;
use support::{unique_name, Fixtures};

/// Limits low enough that the committed (small) bomb and many-files archives trip them; the
/// defaults apply the same checks at larger values.
const TEST_LIMITS: Limits = Limits {
    max_total_bytes: 32 << 20,
    max_entries: 1000,
    max_file_bytes: 16 << 20,
    ..Limits::DEFAULT
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
    (
        "many-files.tar.gz",
        "LimitExceeded",
        "1001 entries is over the per-source entry limit (--unpack-max-entries) of 1000",
    ),
    ("gzip-bomb.tar.gz", "LimitExceeded", "file bomb.bin"),
    (
        "hardlink-amplification.tar.gz",
        "LimitExceeded",
        "over the per-source unpack limit (--unpack-max-mib) of 33554432 bytes",
    ),
    (
        "pax-record-bomb.tar.gz",
        "LimitExceeded",
        "PAX extended header record at the start of the archive: 104857600 bytes is over the \
         header record limit of 65536 bytes",
    ),
    (
        "gnu-longname-bomb.tar.gz",
        "LimitExceeded",
        "GNU long name record at the start of the archive: 104857600 bytes is over the header \
         record limit of 65536 bytes",
    ),
    (
        "skipped-entry-bomb.tar.gz",
        "LimitExceeded",
        "refused entry ./: more than 33554432 bytes inflated",
    ),
];

/// Paths the archives aim at outside any destination.
const OUTSIDE: &[&str] = &[
    "/tmp/pallet-malicious-absolute.txt",
    "/tmp/pallet-malicious-symlink.txt",
    "/tmp/pallet-malicious-traversal.txt",
];

fn corpus(file: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/malicious")
        .join(file);
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{file}: {e} (run testdata/malicious/generate.py)"))
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Serves `file` of the corpus on the plain file server and fetches it as an HTTP source.
async fn fetch_corpus(fetcher: &Fetcher, file: &str) -> Result<Fetched, SourceError> {
    let fx = Fixtures::load();
    let path = fx.put_file(
        &format!("{}/{file}", unique_name("malicious")),
        &corpus(file),
    );
    fetcher
        .fetch(
            &http_source(&fx.http_plain().url_for(&path), None),
            &SourceSecrets::default(),
        )
        .await
}

#[tokio::test]
async fn every_malicious_archive_is_refused_and_nothing_escapes() {
    let mut failures = Vec::new();
    for (file, category, text) in CORPUS {
        // A sandbox per archive: the cache is its only child, so anything else in it escaped.
        let sandbox = tempfile::tempdir().unwrap();
        let nested = sandbox.path().join("a/b/c");
        std::fs::create_dir_all(&nested).unwrap();
        let cache_root = nested.join("cache");
        let fetcher = fetcher_at(cache_root.clone(), TEST_LIMITS);
        match fetch_corpus(&fetcher, file).await {
            Ok(got) => failures.push(format!(
                "{file}: accepted, unpacked to {}",
                got.path.display()
            )),
            Err(e) => {
                let msg = e.to_string();
                eprintln!("{file}: {msg}");
                // The message names the source (its URL ends with the file's name) and why.
                let names_source = msg.starts_with("http http://") && msg.contains(file);
                if e.category() != *category || !msg.contains(text) || !names_source {
                    failures.push(format!(
                        "{file}: expected {category} naming the source and mentioning {text:?}, \
                         got {}: {msg}",
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

#[tokio::test]
async fn charts_that_inflate_or_loop_once_loaded_are_refused_by_the_loader() {
    let (_dir, fetcher) = fetcher(TEST_LIMITS);
    for (file, expected) in [
        (
            "subchart-bomb.tar.gz",
            "subchart archive entry bomb/files/zeros (209715200 bytes): render budget exceeded: \
             chart size once loaded",
        ),
        (
            "dir-symlink-loop.tar.gz",
            "templates/a is a symlink to a directory; directory links are not followed",
        ),
    ] {
        // The archive itself is small and safe to unpack; its danger is in loading it.
        let fetched = fetch_corpus(&fetcher, file)
            .await
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let err = pallet_formats::helm::load_dir(&fetched.path).unwrap_err();
        assert!(err.to_string().contains(expected), "{file}: {err}");
    }
}

/// A chart repository on the fixture file server serving `archive` as chart `name` 0.1.0.
fn chart_repository(name: &str, archive: &[u8]) -> Source {
    let fx = Fixtures::load();
    let repo = unique_name("malicious-repo");
    fx.put_file(&format!("{repo}/{name}-0.1.0.tgz"), archive);
    let index = format!(
        "apiVersion: v1\nentries:\n  {name}:\n  - name: {name}\n    version: 0.1.0\n    urls: [{name}-0.1.0.tgz]\n"
    );
    fx.put_file(&format!("{repo}/index.yaml"), index.as_bytes());
    Source {
        kind: SourceKind::HelmRepository,
        destination: String::new(),
        image: None,
        git: None,
        http: None,
        helm_repository: Some(HelmRepositorySource {
            url: fx.http_plain().url_for(&format!("/{repo}")),
            chart: name.into(),
            version: None,
            digest: None,
            auth: None,
            ca_secret: None,
            insecure_skip_tls_verify: false,
            allow_cross_host_redirects: false,
        }),
        poll_interval: None,
        verify: None,
    }
}

#[tokio::test]
async fn a_link_that_leaves_the_chart_once_its_top_directory_is_stripped_is_refused() {
    let (dir, fetcher) = fetcher(TEST_LIMITS);
    let source = chart_repository("evil", &corpus("stripped-link.tgz"));
    let err = fetcher
        .fetch(&source, &SourceSecrets::default())
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.category(), "UnsafeContent", "{msg}");
    assert!(
        msg.starts_with("helmRepository http://")
            && msg.contains("evil/up")
            && msg.contains("top directory evil/ is stripped"),
        "{msg}"
    );
    assert!(entries(&dir.path().join("cache/entries")).is_empty());
}

/// A git repository whose one commit holds `size` bytes of zeros in `big.bin` (compressed by git
/// to a few hundred KiB); returns its URL on the plain git server.
fn git_blob_bomb(size: u64) -> String {
    use std::io::Write;
    let fx = Fixtures::load();
    let repo = fx.git_repo(&unique_name("blob-bomb"));
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("ok.yaml"), "kind: ConfigMap\n").unwrap();
    // Written in chunks: the test's own memory is part of what the probes measure.
    let mut big = std::fs::File::create(work.path().join("big.bin")).unwrap();
    let chunk = vec![0u8; 1 << 20];
    for _ in 0..(size >> 20) {
        big.write_all(&chunk).unwrap();
    }
    drop(big);
    repo.commit_dir("main", work.path(), "a blob bomb");
    repo.url(fx.git_plain())
}

#[tokio::test]
async fn git_blobs_are_refused_by_their_declared_size_before_they_are_loaded() {
    let url = git_blob_bomb(64 << 20);
    let (_dir, fetcher) = fetcher(TEST_LIMITS);
    let err = fetcher
        .fetch(&git_source(&url, branch("main"), None), &no_secrets())
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.category(), "LimitExceeded", "{msg}");
    assert!(
        msg.starts_with("git ")
            && msg.contains("refused file big.bin: 67108864 bytes is over the per-file limit"),
        "{msg}"
    );
}

#[tokio::test]
async fn hardlinks_cost_their_target_and_stay_links_when_sources_are_merged() {
    let roomy = Limits {
        max_total_bytes: 512 << 20,
        ..Limits::DEFAULT
    };
    let (dir, fetcher) = fetcher(roomy);
    let fetched = fetch_corpus(&fetcher, "hardlink-amplification.tar.gz")
        .await
        .unwrap();
    let out = dir.path().join("assembled");
    pallet::source::assemble(&[fetched], &out).unwrap();
    // 301 names for one 1 MiB file: the merged tree holds it once.
    let (names, bytes) = disk_usage(&out);
    eprintln!("assembled hardlink tree: {names} names, {bytes} bytes on disk");
    assert_eq!(names, 301);
    assert!(bytes <= 2 << 20, "{bytes} bytes");
}

/// Names of files under `dir` and the bytes of their distinct inodes.
fn disk_usage(dir: &Path) -> (usize, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut inodes = std::collections::HashSet::new();
    let (mut names, mut bytes) = (0, 0);
    for path in list_tree(dir) {
        let meta = std::fs::symlink_metadata(dir.join(path)).unwrap();
        names += 1;
        if inodes.insert(meta.ino()) {
            bytes += meta.len();
        }
    }
    (names, bytes)
}

// ---- Memory: each archive class read in a process of its own, its peak RSS measured ----

/// The environment variable naming the class a probe process reads.
const PROBE: &str = "PALLET_MALICIOUS_PROBE";

/// (class, what the archive is, what it would inflate to)
const CLASSES: &[(&str, &str, &str)] = &[
    ("baseline", "nothing fetched", "-"),
    (
        "hardlink-amplification.tar.gz",
        "3.1 KiB: 1 MiB file + 300 hardlinks",
        "301 MiB once merged",
    ),
    (
        "pax-record-bomb.tar.gz",
        "100 KiB: one PAX record",
        "100 MiB in memory",
    ),
    (
        "gnu-longname-bomb.tar.gz",
        "100 KiB: one GNU long name",
        "100 MiB in memory",
    ),
    (
        "skipped-entry-bomb.tar.gz",
        "100 KiB: a skipped entry's data",
        "100 MiB inflated uncounted",
    ),
    ("gzip-bomb.tar.gz", "96 KiB: one file", "96 MiB on disk"),
    (
        "subchart-bomb.tar.gz",
        "923 B: a chart with a subchart .tgz",
        "200 MiB in memory",
    ),
    (
        "dir-symlink-loop.tar.gz",
        "241 B: two links to their directory",
        "2^40 paths walked",
    ),
    (
        "stripped-link.tgz",
        "242 B: chart/up -> ..",
        "a link into the cache's scratch space",
    ),
    (
        "git-blob-bomb",
        "git repository, ~200 KiB pack",
        "128 MiB blob in memory",
    ),
];

/// Peak resident memory of this process so far (VmHWM), in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status")
}

/// Reads one archive class the way the agent would, returning how it ended.
async fn probe(class: &str) -> Result<String, String> {
    let (_dir, fetcher) = fetcher(TEST_LIMITS);
    let shown = |r: Result<Fetched, SourceError>| r.map(|f| f.resolved).map_err(|e| e.to_string());
    match class {
        "baseline" => Ok("nothing fetched".into()),
        "subchart-bomb.tar.gz" | "dir-symlink-loop.tar.gz" => {
            let fetched = fetch_corpus(&fetcher, class)
                .await
                .map_err(|e| e.to_string())?;
            pallet_formats::helm::load_dir(&fetched.path)
                .map(|c| c.name())
                .map_err(|e| e.to_string())
        }
        "stripped-link.tgz" => {
            let source = chart_repository("evil", &corpus(class));
            shown(fetcher.fetch(&source, &no_secrets()).await)
        }
        "git-blob-bomb" => {
            let url = std::env::var("PALLET_MALICIOUS_GIT_URL").expect("git URL");
            let source = git_source(&url, branch("main"), None);
            shown(fetcher.fetch(&source, &no_secrets()).await)
        }
        file => shown(fetch_corpus(&fetcher, file).await),
    }
}

/// Not a test of its own: the body of a probe process (see
/// [`every_archive_class_is_refused_in_bounded_memory`]); without its variable it does nothing.
#[test]
fn rss_probe() {
    let Ok(class) = std::env::var(PROBE) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let outcome = runtime.block_on(probe(&class));
    let (result, text) = match outcome {
        Ok(text) => ("accepted", text),
        Err(text) => ("refused", text),
    };
    println!(
        "RSS_PROBE\t{class}\t{result}\t{}\t{}",
        peak_rss_kib(),
        text.replace(['\t', '\n'], " ")
    );
}

/// Runs the probe for `class` in a child process: (accepted or refused, peak RSS KiB, message).
fn run_probe(class: &str, git_url: &str) -> (String, u64, String) {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args(["--exact", "rss_probe", "--nocapture", "--test-threads=1"])
        .env(PROBE, class)
        .env("PALLET_MALICIOUS_GIT_URL", git_url)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        // The harness prints "test rss_probe ... " before it on the same line.
        .find_map(|l| l.split_once("RSS_PROBE\t").map(|(_, rest)| rest))
        .unwrap_or_else(|| {
            panic!(
                "probe {class} printed no result: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let fields: Vec<&str> = line.splitn(4, '\t').collect();
    (
        fields[1].to_string(),
        fields[2].parse().unwrap(),
        fields.get(3).unwrap_or(&"").to_string(),
    )
}

/// Each class in a fresh process: refused (the baseline aside), with a peak RSS far below what
/// the archive would inflate to and below the agent Deployment's 1 GiB limit.
#[test]
fn every_archive_class_is_refused_in_bounded_memory() {
    if std::env::var(PROBE).is_ok() {
        return;
    }
    // The repository is made here, so its 128 MiB file never counts in a probe.
    let git_url = git_blob_bomb(128 << 20);
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let mut baseline = 0;
    for (class, archive, inflates) in CLASSES {
        let (result, peak_kib, message) = run_probe(class, &git_url);
        if *class == "baseline" {
            baseline = peak_kib;
        } else if result != "refused" {
            failures.push(format!("{class}: {result}: {message}"));
        }
        // Well under any of the bombs' sizes: what the process holds is its own, plus buffers.
        if peak_kib > baseline + (48 << 10) && *class != "baseline" {
            failures.push(format!(
                "{class}: peak RSS {peak_kib} KiB, over the baseline {baseline} KiB + 48 MiB"
            ));
        }
        rows.push(format!(
            "{class:<31} | {archive:<38} | {inflates:<36} | {result:<8} | {:>6.1} MiB | {message}",
            peak_kib as f64 / 1024.0
        ));
    }
    eprintln!(
        "{:<31} | {:<38} | {:<36} | {:<8} | peak RSS   | message\n{}",
        "class",
        "archive",
        "would inflate to",
        "result",
        rows.join("\n")
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
