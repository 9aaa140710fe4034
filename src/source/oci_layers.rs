//! What the layers of an OCI artifact mean for the bundle tree. The config's media type says what
//! kind of artifact it is:
//!
//! - a container image (OCI or Docker image config): every layer is a tar or tar+gzip applied in
//!   order with whiteouts, as a container runtime would;
//! - a Helm chart pushed by `helm push` (config `application/vnd.cncf.helm.config.v1+json`): its
//!   one chart layer is unpacked with the chart directory stripped, so `Chart.yaml` is at the root
//!   where the helm format reads it. The provenance layer (`helm push` of a signed chart) is not
//!   downloaded: pallet does not verify chart signatures, it pins by digest instead;
//! - anything else (Flux artifacts, ORAS artifacts, custom configs): a Flux content layer or an
//!   ORAS directory (annotation `io.deis.oras.content.unpack: "true"`) is a tar+gzip unpacked at
//!   the root, so an ORAS directory lands as `oras pull` writes it (under its own name, or at the
//!   root when pushed as `.`); any other layer is unpacked when its bytes are a tar or tar+gzip
//!   (whatever its media type says) and otherwise written as one file named by its
//!   `org.opencontainers.image.title` annotation, as `oras pull` writes single files.
//!
//! The classification is pure ([`plan_layers`]); [`apply_layers`] does the unpacking of layers
//! already downloaded and verified.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::budget::Budget;
use super::chart::unpack_chart;
use super::unpack::{self, Compression};
use super::SourceError;

/// Config media type of a Helm chart pushed by `helm push`.
pub const HELM_CONFIG: &str = "application/vnd.cncf.helm.config.v1+json";
/// The chart archive layer of a Helm chart.
pub const HELM_CHART: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
/// The chart layer media type of helm before 3.8, which helm still reads.
const HELM_CHART_LEGACY: &str = "application/tar+gzip";
/// The provenance (signature) layer of a signed Helm chart; ignored.
pub const HELM_PROVENANCE: &str = "application/vnd.cncf.helm.chart.provenance.v1.prov";
/// Config media type of a Flux artifact (`flux push artifact`).
pub const FLUX_CONFIG: &str = "application/vnd.cncf.flux.config.v1+json";
/// Content layer of a Flux artifact: a tar+gzip of the tree.
pub const FLUX_CONTENT: &str = "application/vnd.cncf.flux.content.v1.tar+gzip";
/// ORAS' annotation on a directory layer (a tar+gzip to unpack).
const ORAS_UNPACK: &str = "io.deis.oras.content.unpack";
/// The file name of a layer, as ORAS sets it.
const TITLE: &str = "org.opencontainers.image.title";

const IMAGE_CONFIGS: &[&str] = &[
    "application/vnd.oci.image.config.v1+json",
    "application/vnd.docker.container.image.v1+json",
];
const TAR_TYPES: &[&str] = &[
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.docker.image.rootfs.diff.tar",
    "application/vnd.oci.image.layer.nondistributable.v1.tar",
];
const GZIP_TYPES: &[&str] = &[
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
];

/// One layer as the manifest describes it.
#[derive(Debug, Clone, Default)]
pub struct LayerDesc {
    /// Its media type.
    pub media_type: String,
    /// Its digest.
    pub digest: String,
    /// Its annotations.
    pub annotations: BTreeMap<String, String>,
}

/// How one layer becomes part of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayerUse {
    /// An image layer: a tar stream applied in order, with whiteouts.
    Image(Compression),
    /// A packaged Helm chart, unpacked with its top directory stripped.
    Chart,
    /// A tar or tar+gzip unpacked at the root (Flux content, ORAS directories).
    Archive,
    /// Unpacked if its bytes are a tar or tar+gzip, else written as the file `title` names.
    Sniff {
        /// The `org.opencontainers.image.title` annotation, if any.
        title: Option<String>,
    },
}

/// "config X, layers Y, Z": how refusals name an artifact.
pub fn describe_media_types(config: &str, layers: &[LayerDesc]) -> String {
    let layers: Vec<&str> = layers.iter().map(|l| l.media_type.as_str()).collect();
    format!(
        "config {config}, layers [{}]",
        if layers.is_empty() {
            "none".to_string()
        } else {
            layers.join(", ")
        }
    )
}

/// Decides what each layer is for: the indexes of the layers to download, with their use, in
/// manifest order. `expect_chart` refuses anything but a Helm chart (chart repositories). The
/// error is the reason an artifact is unusable, naming its media types.
pub fn plan_layers(
    config: &str,
    layers: &[LayerDesc],
    expect_chart: bool,
) -> Result<Vec<(usize, LayerUse)>, String> {
    let types = || describe_media_types(config, layers);
    if layers.is_empty() {
        return Err(format!("the artifact has no layers ({})", types()));
    }
    if expect_chart && config != HELM_CONFIG {
        return Err(format!(
            "not a Helm chart: the config media type is not {HELM_CONFIG} ({})",
            types()
        ));
    }
    let mut plan = Vec::new();
    if config == HELM_CONFIG {
        for (i, layer) in layers.iter().enumerate() {
            match layer.media_type.as_str() {
                HELM_CHART | HELM_CHART_LEGACY => plan.push((i, LayerUse::Chart)),
                HELM_PROVENANCE => {}
                other => {
                    return Err(format!(
                        "layer {} of a Helm chart has media type {other}, neither the chart nor \
                         its provenance ({})",
                        layer.digest,
                        types()
                    ))
                }
            }
        }
        if plan.len() != 1 {
            return Err(format!(
                "a Helm chart has exactly one {HELM_CHART} layer, this one has {} ({})",
                plan.len(),
                types()
            ));
        }
        return Ok(plan);
    }
    if IMAGE_CONFIGS.contains(&config) {
        for (i, layer) in layers.iter().enumerate() {
            let media_type = layer.media_type.as_str();
            let compression = if TAR_TYPES.contains(&media_type) {
                Compression::None
            } else if GZIP_TYPES.contains(&media_type) {
                Compression::Gzip
            } else {
                return Err(format!(
                    "layer {} has media type {media_type}, not a tar or tar+gzip layer ({})",
                    layer.digest,
                    types()
                ));
            };
            plan.push((i, LayerUse::Image(compression)));
        }
        return Ok(plan);
    }
    for (i, layer) in layers.iter().enumerate() {
        let unpack = layer.annotations.get(ORAS_UNPACK).map(String::as_str) == Some("true");
        match layer.media_type.as_str() {
            HELM_PROVENANCE => {}
            FLUX_CONTENT => plan.push((i, LayerUse::Archive)),
            _ if unpack => plan.push((i, LayerUse::Archive)),
            _ => plan.push((
                i,
                LayerUse::Sniff {
                    title: layer.annotations.get(TITLE).cloned(),
                },
            )),
        }
    }
    if plan.is_empty() {
        return Err(format!("the artifact has no content layer ({})", types()));
    }
    Ok(plan)
}

/// Whether the first bytes of a blob are a tar archive, plain or gzip-compressed (`ustar` at
/// offset 257 of the tar stream).
fn is_tar(file: &Path) -> std::io::Result<bool> {
    let mut head = Vec::with_capacity(512);
    File::open(file)?.take(512).read_to_end(&mut head)?;
    if head.starts_with(&[0x1f, 0x8b]) {
        let mut inner = Vec::with_capacity(512);
        // A gzip stream that is not valid is not a tar+gzip: it lands as a file.
        let decoder = flate2::read::MultiGzDecoder::new(File::open(file)?);
        if decoder.take(512).read_to_end(&mut inner).is_err() {
            return Ok(false);
        }
        head = inner;
    }
    Ok(head.get(257..262) == Some(b"ustar".as_slice()))
}

/// A downloaded, digest-checked layer with its use.
#[derive(Debug)]
pub struct Downloaded {
    /// Where its blob is.
    pub file: PathBuf,
    /// What it is for.
    pub usage: LayerUse,
    /// Its descriptor.
    pub layer: LayerDesc,
}

/// Builds the tree from downloaded layers, in order, charging them all to `budget`. `types`
/// names the artifact's media types in refusals.
pub fn apply_layers(
    layers: Vec<Downloaded>,
    tree: &Path,
    budget: &mut Budget,
    what: &str,
    types: &str,
) -> Result<(), SourceError> {
    let open = |file: &Path| File::open(file).map_err(|e| SourceError::io("read layer", e));
    for Downloaded { file, usage, layer } in layers {
        match usage {
            LayerUse::Image(compression) => {
                unpack::unpack_tar(open(&file)?, compression, tree, budget, true)?
            }
            LayerUse::Chart => {
                unpack_chart(open(&file)?, tree, budget, what)?;
            }
            LayerUse::Archive => {
                unpack::unpack_tar(open(&file)?, Compression::Detect, tree, budget, false)?
            }
            LayerUse::Sniff { title } => {
                if is_tar(&file).map_err(|e| SourceError::io("read layer", e))? {
                    unpack::unpack_tar(open(&file)?, Compression::Detect, tree, budget, false)?;
                    continue;
                }
                let Some(title) = title else {
                    return Err(SourceError::NotABundle {
                        what: what.to_string(),
                        reason: format!(
                            "layer {} ({}) is neither a tar archive nor a file named by an \
                             {TITLE} annotation ({types})",
                            layer.digest, layer.media_type
                        ),
                    });
                };
                let mut content = open(&file)?;
                let size = content
                    .metadata()
                    .map_err(|e| SourceError::io("read layer", e))?
                    .len();
                // Copied as it is read and counted, never held whole in memory.
                unpack::write_tree_stream(
                    tree,
                    Path::new(&title),
                    &mut content,
                    size,
                    false,
                    budget,
                )?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(media_type: &str, annotations: &[(&str, &str)]) -> LayerDesc {
        LayerDesc {
            media_type: media_type.into(),
            digest: "sha256:aa".into(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn a_helm_chart_uses_its_chart_layer_and_skips_provenance() {
        let plan = plan_layers(
            HELM_CONFIG,
            &[layer(HELM_CHART, &[]), layer(HELM_PROVENANCE, &[])],
            true,
        )
        .unwrap();
        assert_eq!(plan, [(0, LayerUse::Chart)]);
        let err = plan_layers(HELM_CONFIG, &[layer(HELM_PROVENANCE, &[])], false).unwrap_err();
        assert!(
            err.contains("exactly one") && err.contains(HELM_PROVENANCE),
            "{err}"
        );
    }

    #[test]
    fn a_chart_repository_refuses_other_artifacts_naming_their_types() {
        let err = plan_layers(FLUX_CONFIG, &[layer(FLUX_CONTENT, &[])], true).unwrap_err();
        assert!(
            err.contains(FLUX_CONFIG) && err.contains(FLUX_CONTENT),
            "{err}"
        );
    }

    #[test]
    fn images_keep_strict_layer_types() {
        let plan = plan_layers(
            IMAGE_CONFIGS[0],
            &[layer(GZIP_TYPES[0], &[]), layer(TAR_TYPES[0], &[])],
            false,
        )
        .unwrap();
        assert_eq!(
            plan,
            [
                (0, LayerUse::Image(Compression::Gzip)),
                (1, LayerUse::Image(Compression::None))
            ]
        );
        let err = plan_layers(IMAGE_CONFIGS[0], &[layer("text/plain", &[])], false).unwrap_err();
        assert!(err.contains("not a tar or tar+gzip layer") && err.contains("text/plain"));
    }

    #[test]
    fn artifacts_unpack_flux_and_oras_directories_and_sniff_the_rest() {
        let plan = plan_layers(
            "application/vnd.oci.empty.v1+json",
            &[
                layer(FLUX_CONTENT, &[]),
                layer(GZIP_TYPES[0], &[(ORAS_UNPACK, "true"), (TITLE, "dir")]),
                layer(TAR_TYPES[0], &[(TITLE, "a.txt")]),
                layer("application/x-custom", &[]),
            ],
            false,
        )
        .unwrap();
        assert_eq!(
            plan,
            [
                (0, LayerUse::Archive),
                (1, LayerUse::Archive),
                (
                    2,
                    LayerUse::Sniff {
                        title: Some("a.txt".into())
                    }
                ),
                (3, LayerUse::Sniff { title: None }),
            ]
        );
        let err = plan_layers("application/vnd.oci.empty.v1+json", &[], false).unwrap_err();
        assert!(
            err.contains("no layers") && err.contains("layers [none]"),
            "{err}"
        );
    }

    #[test]
    fn sniffing_tells_archives_from_files() {
        let tmp = tempfile::tempdir().unwrap();
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_ustar();
        header.set_size(1);
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append_data(&mut header, "x.yaml", &b"x"[..])
            .unwrap();
        let tar = builder.into_inner().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &tar).unwrap();
        let mut gz_text = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz_text, b"just text").unwrap();
        for (name, data, expected) in [
            ("tar", tar.clone(), true),
            ("tgz", gz.finish().unwrap(), true),
            ("text", b"kind: ConfigMap\n".to_vec(), false),
            ("gz-text", gz_text.finish().unwrap(), false),
            ("bad-gz", vec![0x1f, 0x8b, 0, 1, 2], false),
        ] {
            let path = tmp.path().join(name);
            std::fs::write(&path, data).unwrap();
            assert_eq!(is_tar(&path).unwrap(), expected, "{name}");
        }
    }
}
