//! BundleDeployment API types (filled in next).
