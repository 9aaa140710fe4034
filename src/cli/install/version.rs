//! `pallet version`: the versions of this CLI, of the agents running in the cluster (from their
//! leader Leases) and of the installed CRD, and a warning when they are not of one release.

use clap::Args;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};
use kube::Client;
use serde_json::{json, Value};

use super::manifests::DEFAULT_NAMESPACE;
use crate::api::CRD_VERSION_ANNOTATION;
use crate::cli::{print_data, KubeArgs, Output};
use crate::leader::AGENT_VERSION_ANNOTATION;

/// The CRD's name.
pub const CRD_NAME: &str = "bundledeployments.pallet.dev";
/// The BundleDeploymentSet CustomResourceDefinition's name.
pub const SET_CRD_NAME: &str = "bundledeploymentsets.pallet.dev";

/// Flags of `pallet version`.
#[derive(Args, Debug)]
pub struct VersionArgs {
    /// Only this CLI's version; no cluster is asked.
    #[arg(long)]
    pub client: bool,
    /// The agents' namespace.
    #[arg(short = 'n', long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: Output,
    /// Cluster.
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// This CLI's version.
pub const CLI_VERSION: &str = env!("CARGO_PKG_VERSION");

/// An agent as its leader Lease shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentLease {
    /// The Lease's name (`pallet-agent`, `pallet-agent-shard-KEY`).
    pub lease: String,
    /// Who holds it (a Pod name), if anyone.
    pub holder: Option<String>,
    /// Seconds since the holder last renewed it.
    pub renewed_ago: Option<i64>,
    /// How long it lasts unrenewed, in seconds.
    pub duration: i64,
    /// The holder's version.
    pub version: Option<String>,
}

impl AgentLease {
    /// Whether a holder renewed it within its duration: an agent leads.
    pub fn is_held(&self) -> bool {
        self.holder.is_some() && self.renewed_ago.is_some_and(|ago| ago <= self.duration)
    }
}

/// The agents' Leases in `namespace`.
pub async fn agent_leases(client: &Client, namespace: &str) -> anyhow::Result<Vec<AgentLease>> {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let leases = Api::<Lease>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await?;
    let mut found: Vec<AgentLease> = leases
        .items
        .into_iter()
        .filter(|l| {
            l.metadata
                .name
                .as_deref()
                .is_some_and(|n| n == "pallet-agent" || n.starts_with("pallet-agent-shard-"))
        })
        .map(|l| {
            let spec = l.spec.unwrap_or_default();
            AgentLease {
                lease: l.metadata.name.unwrap_or_default(),
                holder: spec.holder_identity.filter(|h| !h.is_empty()),
                renewed_ago: spec.renew_time.map(|t| now - t.0.as_second()),
                duration: spec.lease_duration_seconds.unwrap_or(15).into(),
                version: l
                    .metadata
                    .annotations
                    .and_then(|a| a.get(AGENT_VERSION_ANNOTATION).cloned()),
            }
        })
        .collect();
    found.sort_by(|a, b| a.lease.cmp(&b.lease));
    Ok(found)
}

/// The installed CRD, if any, and the pallet version that generated it.
pub async fn installed_crd(
    client: &Client,
) -> anyhow::Result<Option<(CustomResourceDefinition, Option<String>)>> {
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get_opt(CRD_NAME)
        .await?;
    Ok(crd.map(|crd| {
        let version = crd
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CRD_VERSION_ANNOTATION).cloned());
        (crd, version)
    }))
}

/// `major.minor` of a version.
fn minor_of(version: &str) -> &str {
    let mut dots = version.match_indices('.');
    match (dots.next(), dots.next()) {
        (Some(_), Some((second, _))) => &version[..second],
        _ => version,
    }
}

/// Warnings about versions that are not of one release: a CLI, agent or CRD of another minor
/// version than the others (a patch version apart is fine).
pub fn skew_warnings(cli: &str, agents: &[(String, String)], crd: Option<&str>) -> Vec<String> {
    let mut warnings = Vec::new();
    for (lease, agent) in agents {
        if minor_of(agent) != minor_of(cli) {
            warnings.push(format!(
                "the agent ({lease}) is {agent} and this CLI {cli}: use the CLI of the agent's release, or upgrade with `pallet install`"
            ));
        }
        if let Some(crd) = crd.filter(|crd| minor_of(crd) != minor_of(agent)) {
            warnings.push(format!(
                "the CRD is {crd} and the agent ({lease}) {agent}: `pallet install` of the agent's release applies its CRD"
            ));
        }
    }
    match crd {
        Some(crd) if agents.is_empty() && minor_of(crd) != minor_of(cli) => {
            warnings.push(format!("the CRD is {crd} and this CLI {cli}"))
        }
        None => {}
        Some(_) => {}
    }
    warnings
}

/// Runs `pallet version`.
pub fn run(args: VersionArgs) -> anyhow::Result<()> {
    if args.client {
        return match args.output {
            Output::Table => {
                tprintln!("CLI:   {CLI_VERSION}");
                Ok(())
            }
            output => print_data(output, &json!({"cli": CLI_VERSION})),
        };
    }
    let gathered = crate::cli::block_on(async {
        let client = args.kube.client().await?;
        let agents = agent_leases(&client, &args.namespace).await?;
        let crd = installed_crd(&client).await?;
        Ok((agents, crd))
    });
    let (agents, crd) = match gathered {
        Ok(found) => found,
        Err(error) => {
            tprintln!("CLI:   {CLI_VERSION}");
            return Err(error.context("reading the agents' and the CRD's versions"));
        }
    };
    let crd_version = crd
        .as_ref()
        .map(|(_, v)| v.clone().unwrap_or_else(|| "unknown".into()));
    let running: Vec<(String, String)> = agents
        .iter()
        .filter(|a| a.is_held())
        .map(|a| {
            (
                a.lease.clone(),
                a.version.clone().unwrap_or_else(|| "unknown".into()),
            )
        })
        .collect();
    let warnings = skew_warnings(CLI_VERSION, &running, crd_version.as_deref());
    if args.output != Output::Table {
        let agents: Vec<Value> = agents
            .iter()
            .map(|a| json!({"lease": a.lease, "holder": a.holder, "leading": a.is_held(), "version": a.version}))
            .collect();
        return print_data(
            args.output,
            &json!({"cli": CLI_VERSION, "agents": agents, "crd": crd_version, "warnings": warnings}),
        );
    }
    tprintln!("CLI:   {CLI_VERSION}");
    if agents.is_empty() {
        tprintln!(
            "Agent: none found (no leader Lease in namespace {})",
            args.namespace
        );
    }
    for agent in &agents {
        let version = agent.version.as_deref().unwrap_or("unknown");
        if agent.is_held() {
            tprintln!(
                "Agent: {version} ({}, held by {})",
                agent.lease,
                agent.holder.as_deref().unwrap_or("-")
            );
        } else {
            tprintln!(
                "Agent: none leading ({} not renewed; last holder's version {version})",
                agent.lease
            );
        }
    }
    match &crd_version {
        Some(version) => tprintln!("CRD:   {version} ({CRD_NAME})"),
        None => tprintln!("CRD:   not installed"),
    }
    for warning in &warnings {
        eprintln!("warning: {warning}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_of_another_minor_release_are_warned_about() {
        let agent = |v: &str| vec![("pallet-agent".to_string(), v.to_string())];
        assert!(skew_warnings("0.1.0", &agent("0.1.3"), Some("0.1.0")).is_empty());
        let warnings = skew_warnings("0.2.0", &agent("0.1.0"), Some("0.1.0"));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("the agent (pallet-agent) is 0.1.0 and this CLI 0.2.0"));
        let warnings = skew_warnings("0.1.0", &agent("0.1.0"), Some("0.2.1"));
        assert!(warnings[0].contains("the CRD is 0.2.1"), "{warnings:?}");
        assert_eq!(skew_warnings("0.1.0", &[], Some("0.3.0")).len(), 1);
        assert_eq!(minor_of("1.30.2"), "1.30");
        assert_eq!(minor_of("7"), "7");
    }
}
