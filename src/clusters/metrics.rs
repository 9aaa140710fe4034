//! The per-cluster series of [`crate::metrics::METRICS`], as the registry reports them.

use crate::metrics::METRICS;

/// What one cluster holds now.
pub struct ClusterFigures {
    /// Whether it answers.
    pub up: bool,
    /// BundleDeployments targeting it.
    pub bundles: usize,
    /// Objects its watches know.
    pub objects: usize,
    /// Bytes of bodies its watches keep.
    pub bytes: usize,
}

/// Counts a request to `cluster`.
pub fn request(cluster: &str) {
    METRICS.cluster_request(cluster);
}

/// Counts an outage of `cluster`.
pub fn outage(cluster: &str) {
    METRICS.cluster_outage(cluster);
}

/// Sets the gauges of `cluster`.
pub fn set(cluster: &str, figures: &ClusterFigures) {
    METRICS.set_cluster(
        cluster,
        figures.up,
        figures.bundles,
        figures.objects,
        figures.bytes,
    );
}

/// Drops the series of `cluster`.
pub fn forget(cluster: &str) {
    METRICS.forget_cluster(cluster);
}
