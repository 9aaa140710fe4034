//! The scale benchmark's optional peer phase (`PALLET_BENCH_SCALE_PEERS=flux`, off by default):
//! Flux's source-controller and kustomize-controller, built from their public Go modules by
//! `tools/flux.sh` at the releases pinned in `tools/flux/*/go.mod`, run as local processes
//! against the benchmark's control plane, on the same pushed artifacts as pallet's phase.
//!
//! Per size N, in fresh namespaces (pallet's namespace and BundleDeployments of the size are
//! gone by then; each controller is an audited user of its own, so only their requests count):
//! one OCIRepository (the app's artifact by digest, `insecure: true` as the registry is plain
//! HTTP, the layer selected by pallet's layer media type and extracted) and one Kustomization
//! (`path: ./manifests`, `targetNamespace`, `prune: true`, `wait: true` so Ready means every
//! object is Current, the Deployment Available) per app, `interval: 10m`, all created with one
//! kubectl apply; then an upgrade: the N OCIRepositories re-applied with the v2 digests. Each
//! phase is timed until every Kustomization is Ready at the expected revision.
//!
//! The controllers run with Flux's defaults (source-controller `--concurrent=2`,
//! kustomize-controller `--concurrent=4`, client QPS 50 / burst 300, watching all namespaces)
//! and without leader election (pallet's agent in this benchmark runs without it too); only
//! addresses, storage path and kubeconfig are set. With `wait: true` a kustomize-controller
//! worker holds its Kustomization until the objects are healthy, polling every 5 s (built in), so
//! the install takes about N/4 x 5 s whatever the control plane's speed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::runtime::watcher;

use crate::common::{self, audit};
use crate::common::{cpu_seconds, free_port, proc_mib, ratio, secs};
use crate::support::{Fixtures, Server};
use crate::{cluster, per_app, print_requests, Basis, Floor, Plane, DEADLINE};

/// The peers `PALLET_BENCH_SCALE_PEERS` can name.
const PEERS_ENV: &str = "PALLET_BENCH_SCALE_PEERS";
/// The two controllers, each an audited user of its own.
const CONTROLLERS: [Controller; 2] = [
    Controller {
        name: "source-controller",
        user: "bench-flux-source",
        kind: "ocirepository",
    },
    Controller {
        name: "kustomize-controller",
        user: "bench-flux-kustomize",
        kind: "kustomization",
    },
];
/// The layer media type of pallet's artifacts, which the OCIRepositories select and extract.
const LAYER_MEDIA_TYPE: &str = pallet::push::OCI_LAYER_GZIP;

struct Controller {
    name: &'static str,
    /// Its audited user (tools/controlplane.sh user).
    user: &'static str,
    /// The kind its main reconciler handles, as controller-runtime names it in its log.
    kind: &'static str,
}

/// Is the Flux phase on? `PALLET_BENCH_SCALE_PEERS` is a comma-separated list; `flux` is the only
/// peer so far.
pub fn enabled() -> bool {
    std::env::var(PEERS_ENV)
        .unwrap_or_default()
        .split(',')
        .any(|p| p.trim() == "flux")
}

/// What to print when the Flux phase is off.
pub fn skipped_line() -> String {
    format!(
        "peer Flux: skipped (set {PEERS_ENV}=flux to run Flux's source-controller and kustomize-controller, built by tools/flux.sh, on the same apps)"
    )
}

/// The built controllers, with their audited users' kubeconfigs.
pub struct Flux {
    bin: PathBuf,
    users: Vec<PathBuf>,
    versions: String,
}

/// The version of `github.com/fluxcd/NAME` pinned in its wrapper module.
fn pinned_version(name: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let go_mod = std::fs::read_to_string(root.join(format!("tools/flux/{name}/go.mod")))
        .expect("reading tools/flux/*/go.mod");
    let module = format!("github.com/fluxcd/{name} ");
    go_mod
        .lines()
        .find_map(|l| l.trim().strip_prefix(&module))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or("?")
        .to_string()
}

fn flux_sh(command: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("tools/flux.sh"))
        .arg(command)
        .stderr(Stdio::inherit())
        .output()
        .expect("running tools/flux.sh");
    assert!(out.status.success(), "tools/flux.sh {command} failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

impl Flux {
    /// Builds (or reuses) the controllers with tools/flux.sh; their users' kubeconfigs are
    /// written under `work` by [`Flux::install`].
    pub fn build(work: &Path) -> Flux {
        let bin = flux_sh("build");
        let users = CONTROLLERS
            .iter()
            .map(|c| Plane::user_path(work, c.user))
            .collect();
        let versions = CONTROLLERS
            .iter()
            .map(|c| format!("{} {}", c.name, pinned_version(c.name)))
            .collect::<Vec<_>>()
            .join(", ");
        Flux {
            bin,
            users,
            versions,
        }
    }

    /// Applies the controllers' CRDs to `plane` and makes their audited users.
    pub fn install(&self, plane: &Plane, work: &Path) {
        let crds = flux_sh("crds");
        plane.admin(&[
            "apply",
            "--server-side",
            "-f",
            crds.to_str().expect("utf-8 path"),
        ]);
        plane.admin(&[
            "wait",
            "--for=condition=Established",
            "--timeout=120s",
            "-f",
            crds.to_str().expect("utf-8 path"),
        ]);
        for c in CONTROLLERS {
            plane.user(work, c.user);
        }
    }

    /// The setting line of the report.
    pub fn describe(&self) -> String {
        format!(
            "peer Flux: {} (built from their Go modules by tools/flux.sh), local processes with Flux's default flags \
             (source-controller --concurrent=2, kustomize-controller --concurrent=4, client QPS 50/burst 300), no leader election; \
             per app one OCIRepository (pallet's artifact by digest, insecure HTTP, layer {LAYER_MEDIA_TYPE} extracted) and one \
             Kustomization (prune, wait, interval 10m), all created at once",
            self.versions
        )
    }

    /// Starts both controllers, each as its own audited user; returns once both run their
    /// workers.
    async fn start(&self, work: &Path, n: usize) -> Vec<Proc> {
        let storage = work.join(format!("flux-{n}-storage"));
        std::fs::create_dir_all(&storage).expect("storage dir");
        let storage_addr = format!("127.0.0.1:{}", free_port());
        let mut procs = Vec::new();
        for (c, user) in CONTROLLERS.iter().zip(&self.users) {
            let log = work.join(format!("flux-{n}-{}.log", c.name));
            let mut cmd = Command::new(self.bin.join(c.name));
            cmd.arg(format!("--metrics-addr=127.0.0.1:{}", free_port()))
                .arg(format!("--health-addr=127.0.0.1:{}", free_port()));
            if c.name == "source-controller" {
                cmd.arg(format!("--storage-path={}", storage.display()))
                    .arg(format!("--storage-addr={storage_addr}"))
                    .arg(format!("--storage-adv-addr={storage_addr}"));
            }
            let child = cmd
                .env("KUBECONFIG", user)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).expect("controller log"))
                .spawn()
                .expect("starting a Flux controller (tools/flux.sh build)");
            procs.push(Proc { child, log });
        }
        for (c, p) in CONTROLLERS.iter().zip(&procs) {
            // controller-runtime logs this once the informers have synced and workers run.
            cluster::poll_until(
                &format!("{} running its workers", c.name),
                Duration::from_secs(120),
                || async {
                    let text = std::fs::read_to_string(&p.log).unwrap_or_default();
                    let started = text.lines().any(|l| {
                        let l = l.to_lowercase();
                        l.contains("starting workers") && l.contains(c.kind)
                    });
                    if started {
                        Ok(())
                    } else {
                        Err(text.lines().last().unwrap_or("").to_string())
                    }
                },
            )
            .await;
        }
        procs
    }

    /// Installs the N apps with Flux, then upgrades them; cleans up.
    #[allow(clippy::too_many_arguments)]
    pub async fn run(
        &self,
        plane: &Plane,
        fx: &Fixtures,
        registry: &Server,
        work: &Path,
        run: &str,
        n: usize,
        v1: &[String],
        v2: &[String],
    ) -> FluxRun {
        let ns = format!("{run}-fx{n}");
        let target = format!("{run}-f{n}");
        plane.admin(&["create", "namespace", &ns]);
        plane.fake_kubelet_namespace(&target);
        let procs = self.start(work, n).await;
        let api: Api<DynamicObject> =
            Api::namespaced_with(plane.client.clone(), &ns, &kustomization_resource());
        let registry_filter = RegistryFilter::new(registry, run, n);

        let install_file = work.join(format!("flux-{n}-v1.yaml"));
        let yaml: String = v1
            .iter()
            .enumerate()
            .map(|(i, image)| {
                oci_repository_yaml(i, &ns, image) + &kustomization_yaml(i, &ns, &target)
            })
            .collect();
        std::fs::write(&install_file, yaml).expect("writing the Flux objects");
        let install = measure(plane, &procs, &api, fx, &registry_filter, v1, || {
            plane.apply_file(&install_file);
        })
        .await;

        let upgrade_file = work.join(format!("flux-{n}-v2.yaml"));
        let yaml: String = v2
            .iter()
            .enumerate()
            .map(|(i, image)| oci_repository_yaml(i, &ns, image))
            .collect();
        std::fs::write(&upgrade_file, yaml).expect("writing the Flux objects");
        let upgrade = measure(plane, &procs, &api, fx, &registry_filter, v2, || {
            plane.apply_file(&upgrade_file);
        })
        .await;

        eprintln!("    cleaning up {ns} and {target} ...");
        // While the controllers run, so their finalizers (and pruning) let the objects go.
        plane.admin(&[
            "delete",
            "kustomizations.kustomize.toolkit.fluxcd.io,ocirepositories.source.toolkit.fluxcd.io",
            "--all",
            "-n",
            &ns,
            "--wait=false",
        ]);
        let repos: Api<DynamicObject> =
            Api::namespaced_with(plane.client.clone(), &ns, &oci_repository_resource());
        for (what, api) in [("Kustomizations", &api), ("OCIRepositories", &repos)] {
            cluster::poll_until(&format!("{what} in {ns} gone"), DEADLINE, || async {
                match api.list(&ListParams::default()).await {
                    Ok(list) if list.items.is_empty() => Ok(()),
                    Ok(list) => Err(format!("{} left", list.items.len())),
                    Err(e) => Err(e.to_string()),
                }
            })
            .await;
        }
        drop(procs);
        plane.delete_namespace(&ns).await;
        plane.delete_namespace(&target).await;
        FluxRun { install, upgrade }
    }
}

fn kustomization_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
        "kustomizations",
    )
}

fn oci_repository_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("source.toolkit.fluxcd.io", "v1", "OCIRepository"),
        "ocirepositories",
    )
}

/// The Flux objects' name for app `i` (the same for its OCIRepository and Kustomization).
fn flux_name(i: usize) -> String {
    format!("app-{i:04}")
}

/// OCIRepository for app `i` pulling `image` (`host/repo@sha256:…`).
fn oci_repository_yaml(i: usize, ns: &str, image: &str) -> String {
    let (repo, digest) = image.split_once('@').expect("an image pinned by digest");
    format!(
        "---
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata: {{name: {name}, namespace: {ns}}}
spec:
  interval: 10m
  url: oci://{repo}
  ref: {{digest: \"{digest}\"}}
  insecure: true
  layerSelector: {{mediaType: \"{LAYER_MEDIA_TYPE}\", operation: extract}}
",
        name = flux_name(i)
    )
}

/// Kustomization for app `i`, applying its artifact's manifests into `target`.
fn kustomization_yaml(i: usize, ns: &str, target: &str) -> String {
    format!(
        "---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {{name: {name}, namespace: {ns}}}
spec:
  interval: 10m
  sourceRef: {{kind: OCIRepository, name: {name}}}
  path: ./manifests
  targetNamespace: {target}
  prune: true
  wait: true
",
        name = flux_name(i)
    )
}

/// Ready=True for the current generation, with `digest` applied.
fn is_ready(k: &DynamicObject, digest: &str) -> bool {
    let status = &k.data["status"];
    let generation = k.metadata.generation;
    let applied = status["lastAppliedRevision"]
        .as_str()
        .is_some_and(|r| r.ends_with(digest));
    let ready = status["conditions"].as_array().is_some_and(|cs| {
        cs.iter().any(|c| {
            c["type"] == "Ready"
                && c["status"] == "True"
                && c["observedGeneration"].as_i64() == generation
        })
    });
    applied && ready
}

/// The registry requests for one size's repositories.
pub struct RegistryFilter {
    server: String,
    prefix: String,
}

impl RegistryFilter {
    pub fn new(registry: &Server, run: &str, n: usize) -> RegistryFilter {
        RegistryFilter {
            server: registry.name.clone(),
            prefix: format!("/v2/scale-{run}/n{n}-"),
        }
    }

    pub async fn count(&self, fx: &Fixtures) -> usize {
        fx.stats(&[("server", &self.server), ("prefix", &self.prefix)])
            .await
            .total
    }
}

/// A running Flux controller, killed when dropped.
struct Proc {
    child: Child,
    log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one Flux phase (install, upgrade) cost.
pub struct FluxCost {
    time: Duration,
    /// Both controllers' requests, summed.
    requests: BTreeMap<String, u64>,
    /// Per controller: its name and request total.
    per_controller: Vec<(&'static str, u64)>,
    plane_cpu: f64,
    /// Per controller: CPU seconds.
    cpu: Vec<f64>,
    /// Per controller: peak RSS (MiB) so far.
    peak_mib: Vec<f64>,
    registry: usize,
}

impl FluxCost {
    fn total_cpu(&self) -> f64 {
        self.cpu.iter().sum()
    }

    fn total_peak(&self) -> f64 {
        self.peak_mib.iter().sum()
    }

    fn total_requests(&self) -> u64 {
        audit::total(&self.requests)
    }
}

/// Runs `change`, waits until every Kustomization is Ready with its app's digest from `images`
/// applied, and measures what it cost.
async fn measure(
    plane: &Plane,
    procs: &[Proc],
    api: &Api<DynamicObject>,
    fx: &Fixtures,
    registry: &RegistryFilter,
    images: &[String],
    change: impl FnOnce(),
) -> FluxCost {
    let expected: BTreeMap<String, &str> = images
        .iter()
        .enumerate()
        .map(|(i, image)| {
            let digest = image.split_once('@').map_or("", |(_, d)| d);
            (flux_name(i), digest)
        })
        .collect();
    // kustomize-controller's 4 workers each hold a Kustomization until it is healthy, polling
    // every 5 s: about N/4 x 5 s on a quiet machine, past the bench's DEADLINE at 1,000 apps.
    let deadline = DEADLINE.max(Duration::from_secs(3 * images.len() as u64));
    let pids: Vec<u32> = procs.iter().map(|p| p.child.id()).collect();
    let registry_before = registry.count(fx).await;
    let plane_before = plane.cpu();
    let cpu_before: Vec<f64> = pids.iter().map(|p| cpu_seconds(*p)).collect();
    let from = audit::now();
    let start = Instant::now();
    change();
    common::watch_until(
        api.clone(),
        watcher::Config::default(),
        expected.len(),
        deadline,
        |k| {
            let name = k.metadata.name.as_deref().unwrap_or("");
            expected.get(name).is_some_and(|d| is_ready(k, d))
        },
        |k| format!("{}", k.data["status"]["conditions"]),
    )
    .await;
    let time = start.elapsed();
    let to = audit::now();
    let plane_cpu = plane.cpu() - plane_before;
    let cpu = pids
        .iter()
        .zip(&cpu_before)
        .map(|(p, before)| cpu_seconds(*p) - before)
        .collect();
    let mut requests = BTreeMap::new();
    let mut per_controller = Vec::new();
    for c in &CONTROLLERS {
        let mine = plane.audit.requests(c.user, from, to);
        per_controller.push((c.name, audit::total(&mine)));
        for (k, v) in mine {
            *requests.entry(k).or_insert(0) += v;
        }
    }
    FluxCost {
        time,
        requests,
        per_controller,
        plane_cpu,
        cpu,
        peak_mib: pids.iter().map(|p| proc_mib(*p, "VmHWM:")).collect(),
        registry: registry.count(fx).await - registry_before,
    }
}

/// Flux's install and upgrade of one size.
pub struct FluxRun {
    install: FluxCost,
    upgrade: FluxCost,
}

fn print_cost(label: &str, cost: &FluxCost, basis: &Basis, n: usize) {
    println!(
        "{label:<58} {:>10} {:>10}",
        secs(cost.time),
        ratio(cost.time, basis.time)
    );
    let each = |values: &[f64], unit: &str| {
        CONTROLLERS
            .iter()
            .zip(values)
            .map(|(c, v)| format!("{} {v:.1}{unit}", c.name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "   control plane CPU {:.1} s ({:.2}x the {}'s {:.1} s); controllers' CPU {:.1} s ({}); \
         peak RSS {:.0} MiB (sum of both: {})",
        cost.plane_cpu,
        cost.plane_cpu / basis.plane_cpu.max(0.001),
        basis.name,
        basis.plane_cpu,
        cost.total_cpu(),
        each(&cost.cpu, " s"),
        cost.total_peak(),
        each(&cost.peak_mib, " MiB"),
    );
    println!(
        "   registry requests {} ({} per app); API requests by controller: {}",
        cost.registry,
        per_app(cost.registry as f64, n),
        cost.per_controller
            .iter()
            .map(|(name, total)| format!("{name} {total}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    print_requests(
        "Flux API requests, both controllers (audit log)",
        &cost.requests,
        n,
    );
}

impl FluxRun {
    /// Its rows of one size's report.
    pub fn print(&self, floor: &Floor, n: usize) {
        print_cost(
            &format!("g. Flux: {n} OCIRepositories + Kustomizations -> all Ready"),
            &self.install,
            &floor.install_basis(),
            n,
        );
        print_cost(
            &format!("h. Flux: upgrade of all {n} (new digest) -> all Ready"),
            &self.upgrade,
            &floor.upgrade_basis(),
            n,
        );
    }
}

/// pallet's install and upgrade figures for the side-by-side summary.
pub struct PalletFigures {
    pub install: Duration,
    pub upgrade: Duration,
    pub requests: u64,
    pub peak_mib: f64,
    pub plane_cpu: f64,
    pub registry: usize,
}

/// The side-by-side summary: per size, the apply-and-wait floor, pallet and Flux.
pub fn print_summary(rows: &[(usize, &Floor, PalletFigures, &FluxRun)]) {
    println!();
    println!(
        "peer summary (b: kubectl apply, then every Deployment Available; install and upgrade times, then /b; \
         API requests and registry requests per app for the install; CP CPU: control plane CPU seconds of the install; \
         RSS: peak, Flux's two controllers summed)"
    );
    println!(
        "{:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} {:>7}",
        "apps",
        "b",
        "pallet",
        "Flux",
        "pal upg",
        "Flux upg",
        "pal/b",
        "Flux/b",
        "req pal",
        "req Flux",
        "reg pal",
        "reg Flux",
        "CP pal",
        "CP Flux",
        "RSS pal",
        "RSS Fx"
    );
    for (n, floor, pallet, flux) in rows {
        println!(
            "{:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>7.1} {:>7.1} {:>7.0} {:>7.0}",
            n,
            secs(floor.apply_wait),
            secs(pallet.install),
            secs(flux.install.time),
            secs(pallet.upgrade),
            secs(flux.upgrade.time),
            ratio(pallet.install, floor.apply_wait),
            ratio(flux.install.time, floor.apply_wait),
            per_app(pallet.requests as f64, *n),
            per_app(flux.install.total_requests() as f64, *n),
            per_app(pallet.registry as f64, *n),
            per_app(flux.install.registry as f64, *n),
            pallet.plane_cpu,
            flux.install.plane_cpu,
            pallet.peak_mib,
            flux.upgrade.total_peak(),
        );
    }
}
