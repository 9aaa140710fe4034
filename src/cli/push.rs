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
    #[arg(long, env = "PALLET_REGISTRY_USERNAME")]
    pub username: Option<String>,
    /// Registry password (prefer --password-stdin: a flag's value shows in the process list).
    #[arg(long, env = "PALLET_REGISTRY_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// Read the registry password from standard input (its first line).
    #[arg(long, conflicts_with = "password", requires = "username")]
    pub password_stdin: bool,
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

/// The password: from --password (or its variable), or the first line of `input` with
/// --password-stdin. A user name without a password is a usage error.
fn password(args: &PushArgs, input: impl std::io::BufRead) -> anyhow::Result<Option<String>> {
    if args.password_stdin {
        let line = input
            .lines()
            .next()
            .transpose()
            .context("reading the password from standard input")?
            .unwrap_or_default();
        let line = line.trim_end_matches('\r').to_string();
        if line.is_empty() {
            return Err(super::exit::usage(
                "--password-stdin: standard input is empty",
            ));
        }
        return Ok(Some(line));
    }
    if args.username.is_some() && args.password.is_none() {
        return Err(super::exit::usage(
            "--username needs --password-stdin, --password or PALLET_REGISTRY_PASSWORD",
        ));
    }
    Ok(args.password.clone())
}

/// Runs `pallet push`.
pub fn run(args: PushArgs) -> anyhow::Result<()> {
    let password = password(&args, std::io::stdin().lock())?;
    let ca_pem = match &args.ca_file {
        Some(path) => {
            Some(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?)
        }
        None => None,
    };
    let options = PushOptions {
        plain_http: args.plain_http,
        ca_pem,
        basic_auth: args.username.clone().zip(password),
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

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[derive(clap::Parser)]
    struct Wrapper {
        #[command(flatten)]
        push: PushArgs,
    }

    #[test]
    fn the_password_is_the_first_line_of_stdin() {
        let args = Wrapper::try_parse_from([
            "push",
            "dir",
            "r/x:1",
            "--username",
            "u",
            "--password-stdin",
        ])
        .unwrap()
        .push;
        let got = password(&args, std::io::Cursor::new("s3cret\nignored\n")).unwrap();
        assert_eq!(got.as_deref(), Some("s3cret"));
        assert!(password(&args, std::io::Cursor::new("")).is_err());
        assert!(Wrapper::try_parse_from([
            "push",
            "dir",
            "r/x:1",
            "--username",
            "u",
            "--password-stdin",
            "--password",
            "p"
        ])
        .is_err());
    }
}
