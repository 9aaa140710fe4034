//! The reference pages of `docs/reference/`, generated from the code that defines what they
//! describe: the API from the CRD's schema, the CLI and the agent's flags from the argument
//! parser, the metrics, the condition reasons, and the change log's and notifications'
//! payloads from their lists and types. `pallet docs generate docs/reference` writes them; a
//! test fails when a committed page differs from what the code generates.
//!
//! The tests here also check the documentation as a whole: every relative link and anchor of
//! `docs/` resolves (`links`), every reason the code can write is documented
//! (`reasons_scan`), the security model's inventory of untrusted input names every spec field
//! and every reader of untrusted bytes (`inventory`), and no file of the repository speaks of
//! how it was made (`process_words`).

mod api;
mod cli;
mod markdown;
mod pages;
mod schema;

#[cfg(test)]
mod inventory;
#[cfg(test)]
mod links;
#[cfg(test)]
mod process_words;
#[cfg(test)]
mod reasons_scan;

use std::path::{Path, PathBuf};

use anyhow::Context as _;

pub use cli::write_man_pages;

/// The command that regenerates the reference pages, from the repository's root.
pub const GENERATE_COMMAND: &str = "cargo run -q --bin pallet -- docs generate docs/reference";

/// One generated page: its file name under `docs/reference/` and its text.
pub struct Page {
    /// File name, e.g. `api.md`.
    pub file: &'static str,
    /// The Markdown.
    pub text: String,
}

/// Every generated reference page; `cli` is the command line's parser.
pub fn pages(cli: &clap::Command) -> anyhow::Result<Vec<Page>> {
    Ok(vec![
        Page {
            file: "api.md",
            text: api::page()?,
        },
        Page {
            file: "api-set.md",
            text: api::set_page()?,
        },
        Page {
            file: "cli.md",
            text: cli::cli_page(cli),
        },
        Page {
            file: "agent-flags.md",
            text: cli::agent_page(cli)?,
        },
        Page {
            file: "metrics.md",
            text: pages::metrics_page(),
        },
        Page {
            file: "reasons.md",
            text: pages::reasons_page(),
        },
        Page {
            file: "changelog.md",
            text: pages::changelog_page()?,
        },
        Page {
            file: "notifications.md",
            text: pages::notifications_page()?,
        },
    ])
}

/// Writes every reference page into `dir`; returns the paths written.
pub fn write_pages(dir: &Path, cli: &clap::Command) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    for page in pages(cli)? {
        let path = dir.join(page.file);
        std::fs::write(&path, page.text).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// The repository's root (where `Cargo.toml` of the agent crate is).
#[cfg(test)]
fn repository_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_reference_pages_are_current() {
        let dir = repository_root().join("docs/reference");
        let mut stale = Vec::new();
        for page in pages(&<crate::cli::Cli as clap::CommandFactory>::command()).unwrap() {
            let committed = std::fs::read_to_string(dir.join(page.file)).unwrap_or_default();
            if committed != page.text {
                stale.push(page.file);
            }
        }
        assert!(
            stale.is_empty(),
            "docs/reference/{stale:?} differ from what the code generates: regenerate them with \
             `{GENERATE_COMMAND}` and commit the result"
        );
    }
}
