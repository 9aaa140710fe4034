//! Render benchmark: prints objects per second for the argocd registry-v1 bundle and for a generated
//! plain bundle of 2,000 objects. Figures only, no pass/fail.
//!
//! Run: `cargo run --release -p pallet-formats --example render_bench`

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pallet_formats::{render, Format, RenderConfig};

const ARGOCD_BUNDLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/conformance/registry-v1/argocd-operator.v0.6.0"
);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let argocd = PathBuf::from(ARGOCD_BUNDLE);
    if !argocd.is_dir() {
        return Err(format!(
            "{} not found: clone with shared/ as a sibling",
            argocd.display()
        )
        .into());
    }
    let registry_config = RenderConfig {
        install_namespace: "argocd-system".to_owned(),
        ..RenderConfig::default()
    };
    measure(
        "registry-v1 argocd-operator.v0.6.0",
        Format::RegistryV1,
        &argocd,
        &registry_config,
    )?;

    let plain_tree =
        std::env::temp_dir().join(format!("pallet-render-bench-{}", std::process::id()));
    generate_plain_bundle(&plain_tree, 2_000)?;
    let plain_config = RenderConfig {
        install_namespace: "bench".to_owned(),
        ..RenderConfig::default()
    };
    let result = measure(
        "plain, 2,000 generated objects",
        Format::Plain,
        &plain_tree,
        &plain_config,
    );
    std::fs::remove_dir_all(&plain_tree)?;
    result
}

/// Renders repeatedly for about two seconds (at least 5 rounds) and prints the figures, including the
/// digest computation, which a revision always needs.
fn measure(
    label: &str,
    format: Format,
    tree: &Path,
    config: &RenderConfig,
) -> Result<(), Box<dyn std::error::Error>> {
    let warm = render(format, tree, config)?;
    let objects = warm.objects.len();
    let mut rounds = 0u32;
    let mut render_time = Duration::ZERO;
    let mut digest_time = Duration::ZERO;
    while rounds < 5 || render_time + digest_time < Duration::from_secs(2) {
        let start = Instant::now();
        let rendered = render(format, tree, config)?;
        let rendered_at = Instant::now();
        let digest = rendered.digest();
        digest_time += rendered_at.elapsed();
        render_time += rendered_at - start;
        std::hint::black_box(digest);
        rounds += 1;
    }
    let input_bytes = tree_bytes(tree)?;
    let per_render = render_time / rounds;
    let per_digest = digest_time / rounds;
    let objects_per_second = objects as f64 / per_render.as_secs_f64();
    println!(
        "{label}: {objects} objects from {:.2} MB, render {:.2} ms ({:.0} objects/s, {:.1} MB/s), digest {:.2} ms, {rounds} rounds",
        input_bytes as f64 / 1e6,
        per_render.as_secs_f64() * 1e3,
        objects_per_second,
        input_bytes as f64 / 1e6 / per_render.as_secs_f64(),
        per_digest.as_secs_f64() * 1e3,
    );
    Ok(())
}

/// Total size of the files under `root`.
fn tree_bytes(root: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(root)? {
        let entry = entry?;
        let metadata = entry.metadata()?;
        total += if metadata.is_dir() {
            tree_bytes(&entry.path())?
        } else {
            metadata.len()
        };
    }
    Ok(total)
}

/// 2,000 objects over 100 files in 10 directories: ConfigMaps, Services and Deployments, 20 per file
/// as multi-document YAML.
fn generate_plain_bundle(root: &Path, objects: usize) -> std::io::Result<()> {
    let per_file = 20;
    for file_index in 0..objects.div_ceil(per_file) {
        let dir = root.join(format!("dir-{:02}", file_index % 10));
        std::fs::create_dir_all(&dir)?;
        let mut text = String::new();
        for item in 0..per_file {
            let index = file_index * per_file + item;
            if index >= objects {
                break;
            }
            text.push_str("---\n");
            text.push_str(&match index % 3 {
                0 => format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: config-{index}\n  labels: {{app: bench, index: \"{index}\"}}\ndata:\n  settings.yaml: |\n    key: value-{index}\n    other: [1, 2, 3]\n"
                ),
                1 => format!(
                    "apiVersion: v1\nkind: Service\nmetadata:\n  name: service-{index}\nspec:\n  selector: {{app: app-{index}}}\n  ports:\n  - name: http\n    port: 80\n    targetPort: 8080\n"
                ),
                _ => format!(
                    "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{index}\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {{app: app-{index}}}\n  template:\n    metadata:\n      labels: {{app: app-{index}}}\n    spec:\n      containers:\n      - name: app\n        image: registry.example/app:{index}\n        args: [\"--port=8080\", \"--verbose\"]\n        ports:\n        - containerPort: 8080\n        resources:\n          requests: {{cpu: 10m, memory: 16Mi}}\n"
                ),
            });
        }
        std::fs::write(dir.join(format!("objects-{file_index:03}.yaml")), text)?;
    }
    Ok(())
}
