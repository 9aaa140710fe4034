//! Applying a rendered object set to the cluster: pure planning in [`plan`], the I/O around it
//! (server-side apply in stages, inventory, prune) next to it.

pub mod plan;
