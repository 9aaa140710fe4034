//! The `pallet` command line: one subcommand per user-facing task.

mod agent;
mod fetch;

use clap::{Parser, Subcommand};

/// pallet: a bundle deployment agent for Kubernetes.
#[derive(Parser, Debug)]
#[command(name = "pallet", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// pallet's subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the BundleDeployment CustomResourceDefinition as YAML (the same as deploy/crd.yaml).
    Crd,
    /// Fetch a BundleDeployment's sources into DIR and print the immutable ref of each.
    Fetch(fetch::FetchArgs),
    /// Run the agent: watch BundleDeployments and keep their bundles applied.
    Agent(Box<agent::AgentArgs>),
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Crd => {
            print!("{}", crate::api::crd_yaml()?);
            Ok(())
        }
        Command::Agent(args) => agent::run(*args),
        Command::Fetch(args) => fetch::run(args),
    }
}
