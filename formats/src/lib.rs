//! Pure renderers for pallet's bundle formats: a directory tree plus format config in,
//! an ordered list of Kubernetes objects (or a clear error) out. No Kubernetes client here.
