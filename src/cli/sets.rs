//! `pallet sets`: BundleDeploymentSets as a table (revision, Ready, how many clusters are
//! healthy), each named set followed by its clusters in rollout order, or as data.

use std::fmt::Write as _;

use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt as _};
use serde_json::json;

use super::{KubeArgs, Output};
use crate::api::{BundleDeploymentSet, SetClusterPhase, REQUESTED_ROLLBACK_ANNOTATION};

/// Flags of `pallet sets`.
#[derive(Args, Debug)]
pub struct SetsArgs {
    /// BundleDeploymentSets to show, each with its clusters (default: every set, without).
    pub names: Vec<String>,
    /// Only those whose labels match this selector (kubectl's syntax).
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Show every set's clusters, as for a named one.
    #[arg(long)]
    pub clusters: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: Output,
    /// Cluster.
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// Lays `rows` out in columns under `titles`, the last column unpadded.
fn columns(titles: &[&str], rows: &[Vec<String>], indent: &str) -> String {
    let widths: Vec<usize> = (0..titles.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([titles[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let header: Vec<String> = titles.iter().map(|t| t.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        out.push_str(indent);
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                out.push_str(cell);
            } else {
                let _ = write!(out, "{cell:<width$}   ", width = widths[i]);
            }
        }
        out.push('\n');
    }
    out
}

/// The table of `sets`, each followed by its clusters when `clusters`.
pub fn table(sets: &[BundleDeploymentSet], clusters: bool) -> String {
    let row = |set: &BundleDeploymentSet| {
        let status = set.status.clone().unwrap_or_default();
        let ready = crate::api::conditions::find(&status.conditions, "Ready");
        let healthy = status
            .clusters
            .iter()
            .filter(|c| c.phase == SetClusterPhase::Healthy)
            .count();
        vec![
            set.name_any(),
            status
                .revision
                .map(|r| r.to_string())
                .unwrap_or_else(|| "-".into()),
            ready
                .map(|c| c.status.clone())
                .unwrap_or_else(|| "Unknown".into()),
            ready
                .map(|c| c.reason.clone())
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| "-".into()),
            format!("{healthy}/{}", status.clusters.len()),
            super::ops::age(set.metadata.creation_timestamp.as_ref()),
            ready
                .map(|c| c.message.split_whitespace().collect::<Vec<_>>().join(" "))
                .unwrap_or_default(),
        ]
    };
    const TITLES: [&str; 7] = [
        "NAME", "REVISION", "READY", "REASON", "HEALTHY", "AGE", "MESSAGE",
    ];
    if !clusters {
        let rows: Vec<Vec<String>> = sets.iter().map(row).collect();
        return columns(&TITLES, &rows, "");
    }
    let mut out = String::new();
    for (i, set) in sets.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&columns(&TITLES, &[row(set)], ""));
        let status = set.status.clone().unwrap_or_default();
        let rows: Vec<Vec<String>> = status
            .clusters
            .iter()
            .map(|c| {
                vec![
                    c.name.clone(),
                    c.bundle_deployment.clone(),
                    c.revision
                        .map(|r| r.to_string())
                        .unwrap_or_else(|| "-".into()),
                    c.phase.as_str().to_string(),
                    c.message.clone().unwrap_or_default(),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&columns(
            &[
                "CLUSTER",
                "BUNDLEDEPLOYMENT",
                "REVISION",
                "PHASE",
                "MESSAGE",
            ],
            &rows,
            "  ",
        ));
    }
    out
}

/// Runs `pallet sets`.
pub fn run(args: SetsArgs) -> anyhow::Result<()> {
    super::block_on(async {
        let client = args.kube.client().await?;
        let api: Api<BundleDeploymentSet> = Api::all(client);
        let mut items =
            super::get::list_selected(&api, args.selector.as_deref(), "BundleDeploymentSets")
                .await?;
        items.sort_by_key(|set| set.name_any());
        let missing: Vec<&str> = args
            .names
            .iter()
            .filter(|n| !items.iter().any(|set| &&set.name_any() == n))
            .map(String::as_str)
            .collect();
        if !args.names.is_empty() {
            items.retain(|set| args.names.contains(&set.name_any()));
        }
        match args.output {
            Output::Table if items.is_empty() && missing.is_empty() => {
                eprintln!("No BundleDeploymentSets found.");
            }
            Output::Table => {
                let clusters = args.clusters || !args.names.is_empty();
                tprint!("{}", table(&items, clusters));
            }
            output => super::print_data(
                output,
                &json!({"apiVersion": "v1", "kind": "List",
                        "items": items.iter().map(super::get::data).collect::<Vec<_>>()}),
            )?,
        }
        if !missing.is_empty() {
            return Err(super::exit::not_found(format!(
                "BundleDeploymentSet {} not found",
                missing.join(", ")
            )));
        }
        Ok(())
    })
}

/// Runs `pallet rollback --set NAME`.
pub fn rollback_set(args: super::ops::RollbackArgs) -> anyhow::Result<()> {
    super::block_on(async {
        let client = args.kube.client().await?;
        rollback(&client, &args.name, args.wait.then_some(args.timeout)).await
    })
}

/// Asks for a rollback of set `name` (its `pallet.dev/requested-rollback` annotation) and, with
/// `wait`, waits until the agent handled it and prints the set's clusters.
async fn rollback(client: &Client, name: &str, wait: Option<Duration>) -> anyhow::Result<()> {
    let api: Api<BundleDeploymentSet> = Api::all(client.clone());
    let get = || async {
        api.get_opt(name)
            .await
            .with_context(|| format!("reading BundleDeploymentSet {name}"))?
            .ok_or_else(|| super::exit::not_found(format!("BundleDeploymentSet {name} not found")))
    };
    get().await?;
    let value = super::ops::token();
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {REQUESTED_ROLLBACK_ANNOTATION: value}}})),
    )
    .await
    .with_context(|| format!("annotating BundleDeploymentSet {name}"))?;
    tprintln!(
        "requested rollback of BundleDeploymentSet {name} ({REQUESTED_ROLLBACK_ANNOTATION}={value})"
    );
    let Some(timeout) = wait else {
        return Ok(());
    };
    let deadline = Instant::now() + timeout;
    loop {
        let set = get().await?;
        let status = set.status.clone().unwrap_or_default();
        if status.last_handled_rollback.as_deref() == Some(value.as_str()) {
            tprint!("{}", table(&[set], true));
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(super::exit::timed_out(format!(
                "timed out after {}s waiting for the agent to handle the rollback request {value:?} on BundleDeploymentSet {name} (last handled: {:?}); is the agent running?",
                timeout.as_secs(),
                status.last_handled_rollback
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_each_set_and_its_clusters() {
        let set: BundleDeploymentSet = serde_saphyr::from_str(
            r#"
apiVersion: pallet.dev/v1alpha1
kind: BundleDeploymentSet
metadata: {name: web}
spec:
  clusterSelector: {}
  template: {spec: {format: plain, sources: [{kind: git, git: {repository: r, ref: {branch: main}}}]}}
status:
  revision: 3
  conditions:
  - {type: Ready, status: "False", reason: Halted, lastTransitionTime: "2026-01-01T00:00:00Z",
     message: "revision 3 failed on cluster prod-eu (revision 4 failed: HealthCheckFailed: x)"}
  clusters:
  - {name: prod-eu, bundleDeployment: web-prod-eu, revision: 3, phase: Failed,
     message: "revision 4 failed: HealthCheckFailed: x"}
  - {name: prod-us, bundleDeployment: web-prod-us, revision: 2, phase: Pending}
"#,
        )
        .unwrap();
        let short = table(std::slice::from_ref(&set), false);
        let lines: Vec<&str> = short.lines().collect();
        assert_eq!(lines.len(), 2, "{short}");
        assert!(lines[0].starts_with("NAME") && lines[0].contains("HEALTHY"));
        let cells: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            cells[..5],
            ["web", "3", "False", "Halted", "0/2"],
            "{short}"
        );
        assert!(lines[1].ends_with("(revision 4 failed: HealthCheckFailed: x)"));

        let long = table(&[set], true);
        let clusters: Vec<Vec<&str>> = long
            .lines()
            .filter(|l| l.starts_with("  prod-"))
            .map(|l| l.split_whitespace().take(4).collect())
            .collect();
        assert_eq!(
            clusters,
            [
                ["prod-eu", "web-prod-eu", "3", "Failed"],
                ["prod-us", "web-prod-us", "2", "Pending"],
            ],
            "{long}"
        );
    }
}
