//! Source benchmark (figures, not a test): unpack throughput of a ~100 MB (uncompressed) tar.gz
//! fetched from the fixture registry and the fixture file server, against `tar -xzf` of the same
//! file in the same run; and the cost of resolving a cached pinned source.
//!
//! Needs the fixture servers: `tools/fixtures.sh start`, then `cargo bench --bench source`.
//! `PALLET_BENCH_MB` changes the archive size.

#[path = "../tests/support/mod.rs"]
mod support;

use std::io::Write;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oci_client::secrets::RegistryAuth;
use pallet::api::{HttpSource, ImageSource, Source, SourceKind};
use pallet::source::{Cache, FetchOptions, Fetcher, Limits, SourceSecrets};
use support::{media, unique_name, Fixtures, Image, Layer};

const RUNS: usize = 3;

/// Deterministic, YAML-like, moderately compressible content (like real manifests, not zeros).
fn make_archive(total_mb: usize) -> (Vec<u8>, u64) {
    let mut state = 0x9e3779b97f4a7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let words = [
        "apiVersion",
        "kind",
        "metadata",
        "name",
        "labels",
        "spec",
        "replicas",
        "template",
        "containers",
        "image",
        "ports",
        "containerPort",
        "env",
        "value",
        "resources",
        "limits",
    ];
    let file_size = 256 << 10;
    let files = (total_mb << 20) / file_size;
    let mut builder = tar::Builder::new(Vec::with_capacity((total_mb + 8) << 20));
    let mut raw = 0u64;
    for i in 0..files {
        let mut body = String::with_capacity(file_size + 64);
        while body.len() < file_size {
            let r = next();
            body.push_str(words[(r % 16) as usize]);
            body.push_str(": ");
            body.push_str(&format!("{:x}", r >> 20));
            body.push('\n');
        }
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(0);
        builder
            .append_data(
                &mut h,
                format!("manifests/d{:02}/f{i:05}.yaml", i % 50),
                body.as_bytes(),
            )
            .expect("tar");
        raw += body.len() as u64;
    }
    let tar = builder.into_inner().expect("tar");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar).expect("gzip");
    (gz.finish().expect("gzip"), raw)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn fetcher(root: &std::path::Path, fx: &Fixtures) -> Fetcher {
    let limits = Limits {
        max_total_bytes: 4 << 30,
        max_entries: 1_000_000,
        max_file_bytes: 1 << 30,
        ..Limits::DEFAULT
    };
    Fetcher::new(
        Arc::new(Cache::open(root, 64 << 30).expect("cache")),
        FetchOptions {
            limits,
            plain_http_registries: vec![fx.registry_plain().host.clone()],
            egress: pallet::egress::EgressPolicy {
                allow_loopback: true,
                ..Default::default()
            },
            ..FetchOptions::default()
        },
    )
}

fn image(reference: &str) -> Source {
    Source {
        kind: SourceKind::Image,
        destination: String::new(),
        image: Some(ImageSource {
            reference: reference.into(),
            semver: None,
            auth: None,
            insecure_skip_tls_verify: false,
            ca_secret: None,
        }),
        git: None,
        http: None,
        helm_repository: None,
        poll_interval: None,
        verify: None,
    }
}

fn http(url: &str, sha256: Option<String>) -> Source {
    Source {
        kind: SourceKind::Http,
        destination: String::new(),
        image: None,
        git: None,
        http: Some(HttpSource {
            url: url.into(),
            sha256,
            auth: None,
            allow_cross_host_redirects: false,
        }),
        helm_repository: None,
        poll_interval: None,
        verify: None,
    }
}

#[tokio::main]
async fn main() {
    let fx = Fixtures::load();
    let mb: usize = std::env::var("PALLET_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let work = tempfile::tempdir().expect("tempdir");
    let (archive, raw) = make_archive(mb);
    let file = work.path().join("bundle.tar.gz");
    std::fs::write(&file, &archive).expect("write archive");
    println!(
        "archive: {:.1} MB uncompressed, {:.1} MB tar.gz",
        raw as f64 / 1e6,
        archive.len() as f64 / 1e6
    );

    // Reference: tar -xzf of the local file.
    let mut tar_times = Vec::new();
    for i in 0..RUNS {
        let out = work.path().join(format!("tar-{i}"));
        std::fs::create_dir(&out).expect("mkdir");
        let start = Instant::now();
        let status = Command::new("tar")
            .arg("-xzf")
            .arg(&file)
            .arg("-C")
            .arg(&out)
            .status()
            .expect("run tar");
        tar_times.push(start.elapsed());
        assert!(status.success());
        std::fs::remove_dir_all(&out).expect("cleanup");
    }

    // From the file server: download + verify + unpack into a fresh cache each run.
    let path = fx.put_file(&format!("{}/bundle.tar.gz", unique_name("bench")), &archive);
    let url = fx.http_plain().url_for(&path);
    let mut http_times = Vec::new();
    for i in 0..RUNS {
        let f = fetcher(&work.path().join(format!("http-cache-{i}")), fx);
        let start = Instant::now();
        f.fetch(&http(&url, None), &SourceSecrets::default())
            .await
            .expect("http fetch");
        http_times.push(start.elapsed());
        std::fs::remove_dir_all(work.path().join(format!("http-cache-{i}"))).expect("cleanup");
    }

    // From the registry: one tar+gzip layer.
    let reg = fx.registry_plain();
    let repo = unique_name("bench");
    let layer = Layer {
        media_type: media::OCI_LAYER_GZIP.into(),
        diff_id: support::sha256_digest(b"unused by pallet"),
        data: archive.clone(),
    };
    let desc = fx
        .push_image(
            reg,
            &repo,
            "v1",
            &Image::oci().layer(layer),
            &RegistryAuth::Anonymous,
        )
        .await
        .expect("push");
    let pinned = format!("{}/{repo}@{}", reg.host, desc.digest);
    let mut reg_times = Vec::new();
    for i in 0..RUNS {
        let f = fetcher(&work.path().join(format!("reg-cache-{i}")), fx);
        let start = Instant::now();
        f.fetch(&image(&pinned), &SourceSecrets::default())
            .await
            .expect("image fetch");
        reg_times.push(start.elapsed());
        if i + 1 < RUNS {
            std::fs::remove_dir_all(work.path().join(format!("reg-cache-{i}"))).expect("cleanup");
        }
    }

    let (t, h, r) = (median(tar_times), median(http_times), median(reg_times));
    let mbps = |d: Duration| raw as f64 / 1e6 / d.as_secs_f64();
    println!("median of {RUNS} runs, throughput in MB/s of unpacked content:");
    println!(
        "  tar -xzf (local file)      {:>8.0} ms {:>7.1} MB/s",
        t.as_secs_f64() * 1e3,
        mbps(t)
    );
    println!(
        "  pallet from file server    {:>8.0} ms {:>7.1} MB/s  pallet/tar {:.2}x (target <= 1.25)",
        h.as_secs_f64() * 1e3,
        mbps(h),
        h.as_secs_f64() / t.as_secs_f64()
    );
    println!(
        "  pallet from registry       {:>8.0} ms {:>7.1} MB/s  pallet/tar {:.2}x (target <= 1.25)",
        r.as_secs_f64() * 1e3,
        mbps(r),
        r.as_secs_f64() / t.as_secs_f64()
    );

    // Cached pinned source: resolve again over the last registry cache (warm), a restarted
    // fetcher included, and count requests at the registry.
    let f = fetcher(&work.path().join(format!("reg-cache-{}", RUNS - 1)), fx);
    let before = fx.registry_requests(reg, &repo).await;
    let n = 1000u32;
    let start = Instant::now();
    for _ in 0..n {
        f.fetch(&image(&pinned), &SourceSecrets::default())
            .await
            .expect("cached fetch");
    }
    let per = start.elapsed() / n;
    let after = fx.registry_requests(reg, &repo).await;
    println!(
        "  cached pinned image source: {:.1} µs per resolve (target < 1 ms), {} registry requests for {n} resolves (target 0)",
        per.as_secs_f64() * 1e6,
        after - before
    );
}
