//! Publishing a directory as an OCI bundle image: one deterministic tar+gzip layer holding the
//! directory's tree at the root, an OCI image config and manifest, which the image source reads
//! back as the same tree. The layer's and config's media types (and the manifest's
//! `artifactType`) can be set, to publish the tree as another kind of artifact (a Flux artifact:
//! config `application/vnd.cncf.flux.config.v1+json`, layer
//! `application/vnd.cncf.flux.content.v1.tar+gzip`); a config that is not an image config is `{}`.
//!
//! Deterministic (sorted entries, fixed mtimes and modes, no owner names), so pushing the same
//! tree twice gives the same digest and a re-push is a no-op for pinned consumers.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Reference, RegistryOperation};
use sha2::{Digest as _, Sha256};

/// OCI image manifest media type.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// OCI image config media type.
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// OCI tar+gzip layer media type.
pub const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// Why a push failed.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The directory could not be read.
    #[error("{path}: {error}")]
    Io {
        /// The path being read.
        path: PathBuf,
        /// The error.
        error: std::io::Error,
    },
    /// The image reference does not parse.
    #[error("{reference} is not a valid image reference: {message}")]
    Reference {
        /// The reference as given.
        reference: String,
        /// The parser's complaint.
        message: String,
    },
    /// The registry refused or failed a request.
    #[error("pushing to {reference}: {error}")]
    Registry {
        /// The target.
        reference: String,
        /// The error.
        error: oci_client::errors::OciDistributionError,
    },
}

/// One entry of a layer tar, path relative to the layer root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TarEntry {
    /// A regular file (mode 0644) with this content.
    File(String, Vec<u8>),
    /// A directory (mode 0755).
    Dir(String),
    /// A symlink at the first path pointing to the second.
    Symlink(String, String),
}

/// The entries of `dir`'s tree, sorted by path, directories before their contents.
pub fn dir_entries(dir: &Path) -> Result<Vec<TarEntry>, PushError> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<TarEntry>) -> Result<(), PushError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error| PushError::Io { path, error }
        };
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io(dir))? {
            entries.push(entry.map_err(io(dir))?.path());
        }
        entries.sort();
        for path in entries {
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).map_err(io(&path))?;
                out.push(TarEntry::Symlink(
                    rel,
                    target.to_string_lossy().into_owned(),
                ));
            } else if meta.is_dir() {
                out.push(TarEntry::Dir(rel));
                walk(root, &path, out)?;
            } else {
                out.push(TarEntry::File(
                    rel,
                    std::fs::read(&path).map_err(io(&path))?,
                ));
            }
        }
        Ok(())
    }
    let mut entries = Vec::new();
    walk(dir, dir, &mut entries)?;
    Ok(entries)
}

/// An uncompressed tar of `entries` with fixed modes and mtime 0.
pub fn tar(entries: &[TarEntry]) -> Result<Vec<u8>, std::io::Error> {
    let mut builder = tar::Builder::new(Vec::new());
    let header = |kind: tar::EntryType, mode: u32, size: u64| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(size);
        h.set_mtime(0);
        h
    };
    for entry in entries {
        match entry {
            TarEntry::File(path, data) => {
                let mut h = header(tar::EntryType::Regular, 0o644, data.len() as u64);
                builder.append_data(&mut h, path, data.as_slice())?;
            }
            TarEntry::Dir(path) => {
                let mut h = header(tar::EntryType::Directory, 0o755, 0);
                builder.append_data(&mut h, path, std::io::empty())?;
            }
            TarEntry::Symlink(path, target) => {
                let mut h = header(tar::EntryType::Symlink, 0o777, 0);
                builder.append_link(&mut h, path, target)?;
            }
        }
    }
    builder.into_inner()
}

/// A layer: the gzipped blob and the sha256 of the uncompressed tar (the config's diff_id).
#[derive(Debug, Clone)]
pub struct Layer {
    /// The tar+gzip blob.
    pub data: Vec<u8>,
    /// `sha256:` of the uncompressed tar.
    pub diff_id: String,
}

/// Gzips `tar` (with no file name or time in the gzip header, so the blob is deterministic).
pub fn gzip_layer(tar: Vec<u8>) -> Result<Layer, std::io::Error> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar)?;
    Ok(Layer {
        diff_id: sha256_digest(&tar),
        data: gz.finish()?,
    })
}

/// `sha256:<hex>` of `data`.
pub fn sha256_digest(data: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(data))
}

/// The OCI image config for layers with these diff_ids.
pub fn image_config(diff_ids: &[String]) -> Vec<u8> {
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    });
    // Serializing a json! value cannot fail.
    serde_json::to_vec(&config).unwrap_or_default()
}

/// A manifest descriptor as JSON.
pub fn descriptor(media_type: &str, data: &[u8]) -> serde_json::Value {
    serde_json::json!({"mediaType": media_type, "digest": sha256_digest(data), "size": data.len()})
}

/// Where and how to push.
#[derive(Debug, Clone, Default)]
pub struct PushOptions {
    /// Speak plain HTTP to the registry (local test registries).
    pub plain_http: bool,
    /// Extra PEM CA certificates to trust.
    pub ca_pem: Option<Vec<u8>>,
    /// Credentials (username, password); anonymous when unset.
    pub basic_auth: Option<(String, String)>,
    /// The layer's media type; default [`OCI_LAYER_GZIP`].
    pub layer_media_type: Option<String>,
    /// The config's media type; default [`OCI_CONFIG`] (an image config). Any other gets `{}`.
    pub config_media_type: Option<String>,
    /// The manifest's `artifactType`; none by default.
    pub artifact_type: Option<String>,
}

/// An oci-client for `registry` with `options`.
pub fn oci_client(registry: &str, options: &PushOptions) -> oci_client::Client {
    crate::tls::install_crypto_provider();
    oci_client::Client::new(ClientConfig {
        protocol: if options.plain_http {
            ClientProtocol::HttpsExcept(vec![registry.to_string()])
        } else {
            ClientProtocol::Https
        },
        extra_root_certificates: options
            .ca_pem
            .iter()
            .map(|pem| Certificate {
                encoding: CertificateEncoding::Pem,
                data: pem.clone(),
            })
            .collect(),
        ..Default::default()
    })
}

/// Pushes `dir` as a one-layer OCI image to `reference` (a tag or digest reference); returns the
/// manifest digest (`sha256:…`).
pub async fn push_dir(
    reference: &str,
    dir: &Path,
    options: &PushOptions,
) -> Result<String, PushError> {
    let target: Reference =
        crate::source::oci_reference::parse(reference).map_err(|message| PushError::Reference {
            reference: reference.to_string(),
            message,
        })?;
    let io = |error| PushError::Io {
        path: dir.to_path_buf(),
        error,
    };
    if !dir.is_dir() {
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "not a directory",
        )));
    }
    let layer = gzip_layer(tar(&dir_entries(dir)?).map_err(io)?).map_err(io)?;
    let client = oci_client(target.registry(), options);
    let auth = match &options.basic_auth {
        Some((user, password)) => RegistryAuth::Basic(user.clone(), password.clone()),
        None => RegistryAuth::Anonymous,
    };
    let registry_error = |error| PushError::Registry {
        reference: reference.to_string(),
        error,
    };
    // `pallet push` runs where its user runs it, against the registry they name: the agent
    // never pushes, and its pulls go through `source::registry`.
    #[allow(clippy::disallowed_methods)]
    let authorized = client.auth(&target, &auth, RegistryOperation::Push);
    authorized.await.map_err(registry_error)?;
    let config_type = options.config_media_type.as_deref().unwrap_or(OCI_CONFIG);
    let config = if config_type == OCI_CONFIG {
        image_config(std::slice::from_ref(&layer.diff_id))
    } else {
        b"{}".to_vec()
    };
    let config_desc = descriptor(config_type, &config);
    let layer_type = options
        .layer_media_type
        .as_deref()
        .unwrap_or(OCI_LAYER_GZIP);
    client
        .push_blob(&target, config.clone(), &sha256_digest(&config))
        .await
        .map_err(registry_error)?;
    client
        .push_blob(&target, layer.data.clone(), &sha256_digest(&layer.data))
        .await
        .map_err(registry_error)?;
    let mut manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": config_desc,
        "layers": [descriptor(layer_type, &layer.data)],
    });
    if let Some(artifact_type) = &options.artifact_type {
        manifest["artifactType"] = serde_json::Value::String(artifact_type.clone());
    }
    let body = serde_json::to_vec(&manifest).unwrap_or_default();
    let digest = sha256_digest(&body);
    let content_type = http::HeaderValue::from_static(OCI_MANIFEST);
    client
        .push_manifest_raw(&target, body, content_type)
        .await
        .map_err(registry_error)?;
    Ok(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_are_deterministic_and_sorted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("manifests")).unwrap();
        std::fs::write(dir.path().join("manifests/b.yaml"), "b").unwrap();
        std::fs::write(dir.path().join("manifests/a.yaml"), "a").unwrap();
        let entries = dir_entries(dir.path()).unwrap();
        assert_eq!(
            entries,
            [
                TarEntry::Dir("manifests".into()),
                TarEntry::File("manifests/a.yaml".into(), b"a".to_vec()),
                TarEntry::File("manifests/b.yaml".into(), b"b".to_vec()),
            ]
        );
        let one = gzip_layer(tar(&entries).unwrap()).unwrap();
        let two = gzip_layer(tar(&entries).unwrap()).unwrap();
        assert_eq!(sha256_digest(&one.data), sha256_digest(&two.data));
        assert_eq!(one.diff_id, two.diff_id);
    }
}
