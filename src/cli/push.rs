//! `pallet push DIR REF`: publish a directory as an OCI bundle image (one deterministic tar+gzip
//! layer) that an image source reads back as the same tree; prints the pinned digest reference.
//! `--media-type`, `--config-media-type` and `--artifact-type` publish it as another kind of
//! artifact (Flux's, or a custom one).

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;

use crate::push::{push_dir, PushOptions};

/// Flags of `pallet push`.
#[derive(Args, Debug)]
pub struct PushArgs {
    /// The directory to publish (its contents become the bundle tree's root).
    pub dir: PathBuf,
    /// Image reference to push to (`registry/repo:tag`).
    #[arg(value_name = "REF")]
    pub reference: String,
    /// Speak plain HTTP to the registry (local test registries).
    #[arg(long)]
    pub plain_http: bool,
    /// Extra CA certificates (PEM) to trust for the registry.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// Registry user name.
    #[arg(long, env = "PALLET_REGISTRY_USERNAME", requires = "password")]
    pub username: Option<String>,
    /// Registry password.
    #[arg(long, env = "PALLET_REGISTRY_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// Media type of the layer (e.g. `application/vnd.cncf.flux.content.v1.tar+gzip`).
    #[arg(long, value_name = "TYPE", default_value = crate::push::OCI_LAYER_GZIP)]
    pub media_type: String,
    /// Media type of the config; anything but the OCI image config is pushed as `{}` (e.g.
    /// `application/vnd.cncf.flux.config.v1+json`).
    #[arg(long, value_name = "TYPE", default_value = crate::push::OCI_CONFIG)]
    pub config_media_type: String,
    /// The manifest's `artifactType` (e.g. `application/vnd.example.bundle.v1`).
    #[arg(long, value_name = "TYPE")]
    pub artifact_type: Option<String>,
}

/// Runs `pallet push`.
pub fn run(args: PushArgs) -> anyhow::Result<()> {
    let ca_pem = match &args.ca_file {
        Some(path) => {
            Some(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?)
        }
        None => None,
    };
    let options = PushOptions {
        plain_http: args.plain_http,
        ca_pem,
        basic_auth: args.username.clone().zip(args.password.clone()),
        layer_media_type: Some(args.media_type.clone()),
        config_media_type: Some(args.config_media_type.clone()),
        artifact_type: args.artifact_type.clone(),
    };
    let digest =
        super::block_on(async { Ok(push_dir(&args.reference, &args.dir, &options).await?) })?;
    let repository = match args.reference.rsplit_once('@') {
        Some((repo, _)) => repo.to_string(),
        None => match args.reference.rsplit_once(':') {
            // A colon after the last slash is a tag; before it, a registry port.
            Some((repo, tag)) if !tag.contains('/') => repo.to_string(),
            _ => args.reference.clone(),
        },
    };
    println!("{repository}@{digest}");
    Ok(())
}
