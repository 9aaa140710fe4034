//! `pallet get`: BundleDeployments as a table with their cluster and their Ready condition's
//! reason and message, or as data; `-w` keeps printing each change.

use std::fmt::Write as _;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use futures::{StreamExt as _, TryStreamExt as _};
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use kube::ResourceExt as _;
use serde_json::{json, Value};

use super::KubeArgs;
use crate::api::BundleDeployment;

/// Output of `pallet get`.
#[derive(ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GetOutput {
    /// A table: name, cluster, format, active revision, Ready, reason, age and message.
    #[default]
    Table,
    /// The table with the paused flag, last healthy revision, agent and the whole message.
    Wide,
    /// `bundledeployment/NAME`, one per line.
    Name,
    /// A JSON List (one object per line with `-w`).
    Json,
    /// YAML documents.
    Yaml,
}

/// Flags of `pallet get`.
#[derive(Args, Debug)]
pub struct GetArgs {
    /// BundleDeployments to show (default: all).
    #[arg(add = clap_complete::engine::ArgValueCompleter::new(super::completion::bundle_deployment_names))]
    pub names: Vec<String>,
    /// Only those whose labels match this selector (kubectl's syntax).
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Only those deploying to this cluster: the name of the kubeconfig Secret their
    /// `spec.kubeConfig` names, or `in-cluster` for the agent's own cluster.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// After the list, print each change as it happens, until interrupted.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: GetOutput,
    /// Cluster.
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// Longest message shown in the plain table (`-o wide` shows all of it).
const MESSAGE_WIDTH: usize = 80;

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    name: String,
    cluster: String,
    format: String,
    active: String,
    ready: String,
    reason: String,
    age: String,
    paused: bool,
    healthy: String,
    agent: String,
    message: String,
}

pub use crate::api::LOCAL_CLUSTER;

/// The cluster `bd` deploys to, as `pallet get` and `pallet status` show it: the name of the
/// kubeconfig Secret its `spec.kubeConfig` names, or [`LOCAL_CLUSTER`].
pub fn cluster_of(bd: &BundleDeployment) -> String {
    crate::api::cluster_of(bd).name().to_string()
}

/// The row of `bd`.
pub fn row(bd: &BundleDeployment) -> Row {
    let status = bd.status.clone().unwrap_or_default();
    let ready = crate::api::conditions::find(&status.conditions, "Ready");
    let opt = |n: Option<i64>| n.map(|n| n.to_string()).unwrap_or_else(|| "-".into());
    Row {
        name: bd.name_any(),
        cluster: cluster_of(bd),
        format: serde_json::to_value(bd.spec.format)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        active: opt(status.active_revision),
        ready: ready
            .map(|c| c.status.clone())
            .unwrap_or_else(|| "Unknown".into()),
        reason: ready
            .map(|c| c.reason.clone())
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| "-".into()),
        age: super::ops::age(bd.metadata.creation_timestamp.as_ref()),
        paused: bd.spec.paused,
        healthy: opt(status.last_healthy_revision),
        agent: status.agent.clone().unwrap_or_else(|| "-".into()),
        message: ready
            .map(|c| c.message.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default(),
    }
}

/// Orders `items` by cluster (the agent's own first), then by name.
pub fn group_by_cluster(items: &mut [BundleDeployment]) {
    items.sort_by_key(|bd| {
        let cluster = cluster_of(bd);
        (cluster != LOCAL_CLUSTER, cluster, bd.name_any())
    });
}

fn truncated(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// The table of `rows` (with its header when `header`), column widths fitted to the rows.
pub fn table(rows: &[Row], wide: bool, header: bool) -> String {
    let mut columns: Vec<(&str, Vec<String>)> = vec![
        ("NAME", rows.iter().map(|r| r.name.clone()).collect()),
        ("CLUSTER", rows.iter().map(|r| r.cluster.clone()).collect()),
        ("FORMAT", rows.iter().map(|r| r.format.clone()).collect()),
        ("ACTIVE", rows.iter().map(|r| r.active.clone()).collect()),
        ("READY", rows.iter().map(|r| r.ready.clone()).collect()),
        ("REASON", rows.iter().map(|r| r.reason.clone()).collect()),
        ("AGE", rows.iter().map(|r| r.age.clone()).collect()),
    ];
    if wide {
        columns.push((
            "PAUSED",
            rows.iter().map(|r| r.paused.to_string()).collect(),
        ));
        columns.push(("HEALTHY", rows.iter().map(|r| r.healthy.clone()).collect()));
        columns.push(("AGENT", rows.iter().map(|r| r.agent.clone()).collect()));
    }
    let messages: Vec<String> = rows
        .iter()
        .map(|r| {
            if wide {
                r.message.clone()
            } else {
                truncated(&r.message, MESSAGE_WIDTH)
            }
        })
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .map(|(title, cells)| {
            cells
                .iter()
                .map(|c| c.chars().count())
                .chain([title.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    if header {
        for ((title, _), width) in columns.iter().zip(&widths) {
            let _ = write!(out, "{title:<width$}   ");
        }
        out.push_str("MESSAGE\n");
    }
    for (i, message) in messages.iter().enumerate() {
        for ((_, cells), width) in columns.iter().zip(&widths) {
            let _ = write!(out, "{:<width$}   ", cells[i]);
        }
        out.push_str(message);
        out.push('\n');
    }
    out
}

/// What `-o json|yaml` prints for `object`: the object without its managed fields.
pub fn data<T: serde::Serialize>(object: &T) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    value
}

fn print_list(items: &[BundleDeployment], output: GetOutput) -> anyhow::Result<()> {
    match output {
        GetOutput::Table | GetOutput::Wide => {
            let rows: Vec<Row> = items.iter().map(row).collect();
            tprint!("{}", table(&rows, output == GetOutput::Wide, true));
        }
        GetOutput::Name => {
            for bd in items {
                tprintln!("bundledeployment/{}", bd.name_any());
            }
        }
        GetOutput::Json => {
            let list = json!({"apiVersion": "v1", "kind": "List",
                              "items": items.iter().map(data).collect::<Vec<_>>()});
            super::write_stdout(&format!("{}\n", serde_json::to_string_pretty(&list)?))?;
        }
        GetOutput::Yaml => {
            for bd in items {
                super::write_stdout(&format!("---\n{}", super::to_yaml(&data(bd))?))?;
            }
        }
    }
    Ok(())
}

/// One watched change.
fn print_change(bd: &BundleDeployment, output: GetOutput, deleted: bool) -> anyhow::Result<()> {
    match output {
        GetOutput::Table | GetOutput::Wide => {
            let mut r = row(bd);
            if deleted {
                r.ready = "Deleted".into();
                r.reason = "-".into();
            }
            tprint!("{}", table(&[r], output == GetOutput::Wide, false));
        }
        GetOutput::Name => tprintln!("bundledeployment/{}", bd.name_any()),
        GetOutput::Json => {
            super::write_stdout(&format!("{}\n", serde_json::to_string(&data(bd))?))?
        }
        GetOutput::Yaml => super::write_stdout(&format!("---\n{}", super::to_yaml(&data(bd))?))?,
    }
    Ok(())
}

/// Every object of `api` that `selector` (a label selector) selects; `what` names them in the
/// error.
pub(super) async fn list_selected<K>(
    api: &Api<K>,
    selector: Option<&str>,
    what: &str,
) -> anyhow::Result<Vec<K>>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut params = ListParams::default();
    if let Some(selector) = selector {
        params = params.labels(selector);
    }
    Ok(api
        .list(&params)
        .await
        .with_context(|| format!("listing {what}"))?
        .items)
}

/// Runs `pallet get`.
pub fn run(args: GetArgs) -> anyhow::Result<()> {
    super::block_on(async {
        let client = args.kube.client().await?;
        let api: Api<BundleDeployment> = Api::all(client);
        let mut items = list_selected(&api, args.selector.as_deref(), "BundleDeployments").await?;
        if let Some(cluster) = &args.cluster {
            items.retain(|bd| &cluster_of(bd) == cluster);
        }
        group_by_cluster(&mut items);
        if !args.names.is_empty() {
            let missing: Vec<&String> = args
                .names
                .iter()
                .filter(|n| !items.iter().any(|bd| &&bd.name_any() == n))
                .collect();
            items.retain(|bd| args.names.contains(&bd.name_any()));
            if !missing.is_empty() && !args.watch {
                print_list(&items, args.output)?;
                let names: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
                return Err(super::exit::not_found(format!(
                    "BundleDeployment {} not found",
                    names.join(", ")
                )));
            }
        }
        if items.is_empty() && matches!(args.output, GetOutput::Table | GetOutput::Wide) {
            if !args.watch {
                eprintln!("No BundleDeployments found.");
                return Ok(());
            }
        } else {
            print_list(&items, args.output)?;
        }
        if !args.watch {
            return Ok(());
        }
        let mut config = watcher::Config::default();
        if let Some(selector) = &args.selector {
            config = config.labels(selector);
        }
        let mut last: std::collections::BTreeMap<String, Row> =
            items.iter().map(|bd| (bd.name_any(), row(bd))).collect();
        let mut events = watcher(api, config).boxed();
        while let Some(event) = events
            .try_next()
            .await
            .context("watching BundleDeployments")?
        {
            let (bd, deleted) = match event {
                watcher::Event::Apply(bd) | watcher::Event::InitApply(bd) => (bd, false),
                watcher::Event::Delete(bd) => (bd, true),
                _ => continue,
            };
            let name = bd.name_any();
            if !args.names.is_empty() && !args.names.contains(&name) {
                continue;
            }
            if args.cluster.as_ref().is_some_and(|c| *c != cluster_of(&bd)) {
                continue;
            }
            // The watch starts with the whole list again: print only what changed since.
            let current = row(&bd);
            if !deleted && last.get(&name) == Some(&current) {
                continue;
            }
            if deleted {
                last.remove(&name);
            } else {
                last.insert(name, current);
            }
            print_change(&bd, args.output, deleted)?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bd(yaml: &str) -> BundleDeployment {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn the_table_shows_the_ready_reason_and_message() {
        let bd = bd(r#"
apiVersion: pallet.dev/v1alpha1
kind: BundleDeployment
metadata: {name: web}
spec: {format: helm, sources: [{kind: git, git: {repository: r, ref: {branch: main}}}]}
status:
  activeRevision: 2
  conditions:
  - {type: Ready, status: "False", reason: ProgressDeadlineExceeded, lastTransitionTime: "2026-01-01T00:00:00Z",
     message: "revision 3 failed:\n Deployment web/web: pod web-1: container web CrashLoopBackOff"}
"#);
        let text = table(&[row(&bd)], false, true);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("NAME")
                && lines[0].contains("REASON")
                && lines[0].ends_with("MESSAGE")
        );
        assert!(lines[1].starts_with("web "), "{text}");
        assert!(lines[1].contains(" helm ") && lines[1].contains(" False "));
        assert!(lines[1].contains("ProgressDeadlineExceeded"));
        assert!(
            lines[1].ends_with(
                "revision 3 failed: Deployment web/web: pod web-1: container web CrashLoopBackOff"
            ),
            "{text}"
        );
        let long = "x".repeat(200);
        let mut r = row(&bd);
        r.message = long.clone();
        assert!(table(std::slice::from_ref(&r), false, false)
            .trim_end()
            .ends_with('…'));
        assert!(table(&[r], true, false).trim_end().ends_with(&long));
    }

    #[test]
    fn the_table_groups_bundles_by_cluster() {
        let bd_on = |name: &str, cluster: Option<&str>| {
            let kube_config = cluster
                .map(|c| format!(", kubeConfig: {{secretRef: {{name: {c}}}}}"))
                .unwrap_or_default();
            bd(&format!(
                "apiVersion: pallet.dev/v1alpha1\nkind: BundleDeployment\nmetadata: {{name: {name}}}\nspec: {{format: plain, sources: [{{kind: git, git: {{repository: r, ref: {{branch: main}}}}}}]{kube_config}}}\n"
            ))
        };
        let mut items = vec![
            bd_on("web-target-b", Some("target-b")),
            bd_on("web-target-a", Some("target-a")),
            bd_on("zeta", None),
            bd_on("alpha", Some("target-a")),
        ];
        group_by_cluster(&mut items);
        let rows: Vec<Row> = items.iter().map(row).collect();
        let text = table(&rows, false, true);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("NAME") && lines[0].contains(" CLUSTER "),
            "{text}"
        );
        let first_two = |line: &str| {
            line.split_whitespace()
                .take(2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            lines[1..].iter().map(|l| first_two(l)).collect::<Vec<_>>(),
            [
                ["zeta", LOCAL_CLUSTER],
                ["alpha", "target-a"],
                ["web-target-a", "target-a"],
                ["web-target-b", "target-b"],
            ],
            "{text}"
        );
    }
}
