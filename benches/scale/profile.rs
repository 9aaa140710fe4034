//! CPU profiles of the control plane per phase (`PALLET_BENCH_SCALE_PROFILE=DIR`): the private
//! control plane serves a profiler (tools/controlplane/profile.go), and each measured phase is
//! wrapped in a start and a stop, its profile saved as `DIR/<phase>.pprof` for
//! `go tool pprof -top DIR/<phase>.pprof`. The allocation profiles at its start and end go to
//! `DIR/<phase>.allocs-start.pprof` and `DIR/<phase>.allocs.pprof`: `go tool pprof
//! -sample_index=alloc_space -base DIR/<phase>.allocs-start.pprof DIR/<phase>.allocs.pprof`
//! says what the phase allocated, and where. Profiling costs the control plane a little CPU, so a
//! profiled run's figures are for comparing phases with each other, not with other runs.

use std::path::PathBuf;

/// Where the control plane's profiler listens and where profiles go.
pub struct Profiler {
    url: String,
    dir: PathBuf,
}

impl Profiler {
    /// The profiler asked for by `PALLET_BENCH_SCALE_PROFILE`, if any, on a free port.
    pub fn from_env() -> Option<Profiler> {
        let dir = PathBuf::from(std::env::var_os("PALLET_BENCH_SCALE_PROFILE")?);
        std::fs::create_dir_all(&dir).expect("creating the profile directory");
        let url = format!("127.0.0.1:{}", crate::common::free_port());
        Some(Profiler { url, dir })
    }

    /// The control plane's environment that turns its profiler on.
    pub fn plane_env(&self) -> Vec<(String, String)> {
        vec![("PALLET_CONTROLPLANE_PROFILE".into(), self.url.clone())]
    }

    async fn call(&self, method: reqwest::Method, path: &str) -> Vec<u8> {
        let response = reqwest::Client::new()
            .request(method, format!("http://{}{path}", self.url))
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .unwrap_or_else(|e| panic!("control plane profiler {path}: {e}"));
        response.bytes().await.expect("profile body").to_vec()
    }

    /// Saves `data` as `file` in the profile directory; returns its path.
    fn save(&self, file: &str, data: Vec<u8>) -> PathBuf {
        let path = self.dir.join(file);
        std::fs::write(&path, data).expect("writing a profile");
        path
    }

    /// Saves the allocation profile so far as `<phase>.allocs-start.pprof` and starts profiling
    /// the CPU.
    pub async fn start(&self, phase: &str) {
        let allocs = self.call(reqwest::Method::GET, "/allocs").await;
        self.save(&format!("{phase}.allocs-start.pprof"), allocs);
        self.call(reqwest::Method::POST, "/cpu/start").await;
    }

    /// Stops profiling and saves the CPU profile as `<phase>.pprof`, the allocation profile so
    /// far as `<phase>.allocs.pprof`.
    pub async fn stop(&self, phase: &str) {
        let cpu = self.call(reqwest::Method::POST, "/cpu/stop").await;
        let path = self.save(&format!("{phase}.pprof"), cpu);
        let allocs = self.call(reqwest::Method::GET, "/allocs").await;
        self.save(&format!("{phase}.allocs.pprof"), allocs);
        eprintln!(
            "    control plane profile: {} (and allocations)",
            path.display()
        );
    }
}

/// Runs `phase` between a start and a stop of `profiler`, if there is one.
pub async fn profiled<T>(
    profiler: Option<&Profiler>,
    name: &str,
    phase: impl std::future::Future<Output = T>,
) -> T {
    let Some(profiler) = profiler else {
        return phase.await;
    };
    profiler.start(name).await;
    let out = phase.await;
    profiler.stop(name).await;
    out
}
