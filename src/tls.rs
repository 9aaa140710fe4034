//! Process-wide TLS setup.

/// Installs rustls's ring crypto provider as the process default.
///
/// Every TLS client in pallet (kube, oci-client, reqwest) is built on rustls without a provider of
/// its own, so this must run before the first connection. Calling it again is harmless.
pub fn install_crypto_provider() {
    // An error only means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
