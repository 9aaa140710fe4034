//! `pallet events NAME`: the Events of a BundleDeployment (the agent's Applied, failures,
//! rollbacks) and of the objects it applied and their Pods (BackOff, FailedScheduling,
//! pulls...), oldest first, in one list.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams};
use kube::Client;
use serde_json::{json, Value};

use super::{print_data, KubeArgs, Output};
use crate::health::pods;

/// Flags of `pallet events`.
#[derive(Args, Debug)]
pub struct EventsArgs {
    /// The BundleDeployment.
    #[arg(add = clap_complete::engine::ArgValueCompleter::new(super::completion::bundle_deployment_names))]
    pub name: String,
    /// Only Events seen within this long (`30m`, `2h`; a bare number is seconds).
    #[arg(long, value_parser = crate::duration::parse_arg)]
    pub since: Option<Duration>,
    /// Only Warning Events.
    #[arg(long)]
    pub warnings: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: Output,
    /// Cluster.
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// One Event as shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// When it was last seen (Unix seconds).
    pub time: i64,
    /// Normal or Warning.
    pub type_: String,
    /// Its reason.
    pub reason: String,
    /// `Kind namespace/name` of the object it is about.
    pub object: String,
    /// How many times it happened.
    pub count: i32,
    /// Its message.
    pub message: String,
}

/// `(kind, namespace, name)` of an object Events may be about.
type Subject = (String, String, String);

fn line(event: &Event) -> Line {
    let time = event
        .event_time
        .as_ref()
        .map(|t| t.0)
        .or(event.last_timestamp.as_ref().map(|t| t.0))
        .or(event.first_timestamp.as_ref().map(|t| t.0))
        .or(event.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .map(|t| t.as_second())
        .unwrap_or(0);
    let involved = &event.involved_object;
    let kind = involved.kind.clone().unwrap_or_default();
    let name = involved.name.clone().unwrap_or_default();
    let object = match involved.namespace.as_deref().filter(|ns| !ns.is_empty()) {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    };
    Line {
        time,
        type_: event.type_.clone().unwrap_or_default(),
        reason: event.reason.clone().unwrap_or_default(),
        object,
        count: event
            .series
            .as_ref()
            .and_then(|s| s.count)
            .or(event.count)
            .unwrap_or(1),
        message: event
            .message
            .clone()
            .unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    }
}

fn subject_of(event: &Event) -> Subject {
    let involved = &event.involved_object;
    (
        involved.kind.clone().unwrap_or_default(),
        involved.namespace.clone().unwrap_or_default(),
        involved.name.clone().unwrap_or_default(),
    )
}

/// The BundleDeployment's objects and the Pods of its workloads.
async fn subjects(client: &Client, name: &str) -> anyhow::Result<BTreeSet<Subject>> {
    let bd = super::ops::get_bd(client, name).await?;
    let inventory = bd
        .status
        .and_then(|s| s.inventory)
        .map(|i| i.objects)
        .unwrap_or_default();
    let mut subjects: BTreeSet<Subject> = inventory
        .iter()
        .map(|r| (r.kind.clone(), r.namespace.clone(), r.name.clone()))
        .collect();
    subjects.insert(("BundleDeployment".into(), String::new(), name.to_string()));
    for reference in inventory.iter().filter(|r| !r.namespace.is_empty()) {
        let api_version = match reference.group.as_str() {
            "" => reference.version.clone(),
            group => format!("{group}/{}", reference.version),
        };
        let probe = json!({"apiVersion": api_version, "kind": reference.kind});
        if !pods::is_workload(&probe) {
            continue;
        }
        // The selector is in the live object.
        let resource = kube::discovery::pinned_kind(
            client,
            &kube::core::GroupVersionKind::gvk(
                &reference.group,
                &reference.version,
                &reference.kind,
            ),
        )
        .await;
        let Ok((resource, _)) = resource else {
            continue;
        };
        let api: Api<kube::api::DynamicObject> =
            Api::namespaced_with(client.clone(), &reference.namespace, &resource);
        let Some(live) = api.get_opt(&reference.name).await? else {
            continue;
        };
        let Some(selector) = pods::pod_selector(&serde_json::to_value(&live)?) else {
            continue;
        };
        let pods: Api<Pod> = Api::namespaced(client.clone(), &reference.namespace);
        for pod in pods
            .list_metadata(&ListParams::default().labels(&selector))
            .await?
            .items
        {
            if let Some(pod_name) = pod.metadata.name {
                subjects.insert(("Pod".into(), reference.namespace.clone(), pod_name));
            }
        }
    }
    Ok(subjects)
}

/// The Events about `subjects`, oldest first.
async fn events_about(client: &Client, subjects: &BTreeSet<Subject>) -> anyhow::Result<Vec<Line>> {
    let namespaces: BTreeSet<&str> = subjects
        .iter()
        .map(|(_, ns, _)| ns.as_str())
        .filter(|ns| !ns.is_empty())
        .collect();
    let mut events: Vec<Event> = Vec::new();
    // A cluster-scoped object's Events are recorded in "default"; ask for them by name.
    for (kind, _, name) in subjects.iter().filter(|(_, ns, _)| ns.is_empty()) {
        let params = ListParams::default().fields(&format!(
            "involvedObject.kind={kind},involvedObject.name={name}"
        ));
        events.extend(
            Api::<Event>::all(client.clone())
                .list(&params)
                .await
                .context("listing Events")?
                .items,
        );
    }
    for namespace in namespaces {
        let list = Api::<Event>::namespaced(client.clone(), namespace)
            .list(&ListParams::default())
            .await
            .with_context(|| format!("listing the Events of namespace {namespace}"))?;
        events.extend(
            list.items
                .into_iter()
                .filter(|e| subjects.contains(&subject_of(e))),
        );
    }
    let mut lines: Vec<Line> = events.iter().map(line).collect();
    lines.sort_by(|a, b| (a.time, &a.object).cmp(&(b.time, &b.object)));
    lines.dedup();
    Ok(lines)
}

/// The Events of BundleDeployment `name`, of its objects and of their Pods, oldest first.
pub async fn lines(client: &Client, name: &str) -> anyhow::Result<Vec<Line>> {
    let subjects = subjects(client, name).await?;
    events_about(client, &subjects).await
}

/// The table of events, with their age relative to `now` (Unix seconds).
pub fn format_lines(lines: &[Line], now: i64) -> String {
    let age = |t: i64| {
        let s = (now - t).max(0);
        match s {
            s if s < 120 => format!("{s}s"),
            s if s < 2 * 3600 => format!("{}m", s / 60),
            s if s < 2 * 86400 => format!("{}h", s / 3600),
            s => format!("{}d", s / 86400),
        }
    };
    let object_width = lines
        .iter()
        .map(|l| l.object.chars().count())
        .max()
        .unwrap_or(6)
        .max(6);
    let reason_width = lines
        .iter()
        .map(|l| l.reason.chars().count())
        .max()
        .unwrap_or(6)
        .max(6);
    let mut out = format!(
        "{:<5} {:<7} {:<reason_width$} {:<object_width$} MESSAGE\n",
        "AGE", "TYPE", "REASON", "OBJECT"
    );
    for l in lines {
        let count = if l.count > 1 {
            format!(" (x{})", l.count)
        } else {
            String::new()
        };
        out.push_str(&format!(
            "{:<5} {:<7} {:<reason_width$} {:<object_width$} {}{count}\n",
            age(l.time),
            l.type_,
            l.reason,
            l.object,
            l.message
        ));
    }
    out
}

/// Runs `pallet events`.
pub fn run(args: EventsArgs) -> anyhow::Result<()> {
    let lines = super::block_on(async {
        let client = args.kube.client().await?;
        lines(&client, &args.name).await
    })?;
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let lines: Vec<Line> = lines
        .into_iter()
        .filter(|l| !args.warnings || l.type_ == "Warning")
        .filter(|l| {
            args.since
                .is_none_or(|since| now - l.time <= since.as_secs() as i64)
        })
        .collect();
    if args.output != Output::Table {
        let list: Vec<Value> = lines
            .iter()
            .map(|l| {
                json!({"time": l.time, "type": l.type_, "reason": l.reason, "object": l.object,
                       "count": l.count, "message": l.message})
            })
            .collect();
        return print_data(args.output, &Value::Array(list));
    }
    if lines.is_empty() {
        eprintln!("No Events found for {} and its objects.", args.name);
        return Ok(());
    }
    tprint!("{}", format_lines(&lines, now));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_listed_with_age_type_reason_object_and_count() {
        let lines = vec![
            Line {
                time: 1_000,
                type_: "Normal".into(),
                reason: "Applied".into(),
                object: "BundleDeployment web".into(),
                count: 1,
                message: "revision 2 applied".into(),
            },
            Line {
                time: 1_090,
                type_: "Warning".into(),
                reason: "BackOff".into(),
                object: "Pod web/web-1".into(),
                count: 7,
                message: "Back-off restarting failed container".into(),
            },
        ];
        let text = format_lines(&lines, 1_100);
        let rows: Vec<&str> = text.lines().collect();
        assert!(rows[0].starts_with("AGE   TYPE    REASON"), "{text}");
        assert!(rows[1].starts_with("100s  Normal  Applied "), "{text}");
        assert!(rows[2].starts_with("10s   Warning BackOff "), "{text}");
        assert!(
            rows[2].ends_with("Back-off restarting failed container (x7)"),
            "{text}"
        );
    }
}
