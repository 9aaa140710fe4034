//! CPU profiles of the control plane per phase (`PALLET_BENCH_SCALE_PROFILE=DIR`): the private
//! control plane serves a profiler (tools/controlplane/profile.go), and each measured phase is
//! wrapped in a start and a stop, its profile saved as `DIR/<phase>.pprof` for
//! `go tool pprof -top DIR/<phase>.pprof`. Profiling costs the control plane a little CPU, so a
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
        let url = format!("127.0.0.1:{}", crate::free_port());
        Some(Profiler { url, dir })
    }

    /// The control plane's environment that turns its profiler on.
    pub fn plane_env(&self) -> Vec<(String, String)> {
        vec![("PALLET_CONTROLPLANE_PROFILE".into(), self.url.clone())]
    }

    async fn post(&self, path: &str) -> Vec<u8> {
        let response = reqwest::Client::new()
            .post(format!("http://{}{path}", self.url))
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .unwrap_or_else(|e| panic!("control plane profiler {path}: {e}"));
        response.bytes().await.expect("profile body").to_vec()
    }

    /// Starts profiling.
    pub async fn start(&self) {
        self.post("/cpu/start").await;
    }

    /// Stops profiling and saves the profile as `<phase>.pprof`.
    pub async fn stop(&self, phase: &str) {
        let data = self.post("/cpu/stop").await;
        let path = self.dir.join(format!("{phase}.pprof"));
        std::fs::write(&path, data).expect("writing the profile");
        eprintln!("    control plane profile: {}", path.display());
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
    profiler.start().await;
    let out = phase.await;
    profiler.stop(name).await;
    out
}
