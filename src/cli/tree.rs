//! `pallet tree NAME`: the objects of a BundleDeployment's active revision, each with its
//! health as the agent judges it, and under each workload its Pods with what troubles them.

use std::collections::BTreeMap;

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::Client;
use serde_json::{json, Value};

use super::{print_data, KubeArgs, Output};
use crate::api::ObjectReference;
use crate::health::{self, pods, Health, HealthState};

/// Flags of `pallet tree`.
#[derive(Args, Debug)]
pub struct TreeArgs {
    /// The BundleDeployment.
    #[arg(add = clap_complete::engine::ArgValueCompleter::new(super::completion::bundle_deployment_names))]
    pub name: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: Output,
    /// Cluster.
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// Pods listed under one workload.
const PODS_SHOWN: u32 = 50;

/// One node of the tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// `Kind namespace/name` or `Kind name`.
    pub object: String,
    /// Its health state, or `Missing`.
    pub state: String,
    /// Why.
    pub message: String,
    /// Its Pods (workloads only).
    pub children: Vec<Node>,
}

impl Node {
    fn to_json(&self) -> Value {
        json!({"object": self.object, "health": self.state, "message": self.message,
               "pods": self.children.iter().map(Node::to_json).collect::<Vec<_>>()})
    }
}

fn state_name(state: HealthState) -> String {
    format!("{state:?}")
}

fn object_text(kind: &str, namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        format!("{kind} {name}")
    } else {
        format!("{kind} {namespace}/{name}")
    }
}

/// A Pod's node: its trouble when it has one, else its health.
fn pod_node(pod: &Value) -> Node {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let health = health::assess(pod, &health::HealthOptions::default());
    let message = pods::pod_problem(pod).unwrap_or(health.message);
    Node {
        object: object_text("Pod", namespace, name),
        state: state_name(health.state),
        message,
        children: Vec::new(),
    }
}

async fn resource_for(
    client: &Client,
    cache: &mut BTreeMap<String, (ApiResource, Scope)>,
    reference: &ObjectReference,
) -> anyhow::Result<(ApiResource, Scope)> {
    let key = format!(
        "{}/{}/{}",
        reference.group, reference.version, reference.kind
    );
    if let Some(found) = cache.get(&key) {
        return Ok(found.clone());
    }
    let gvk = GroupVersionKind::gvk(&reference.group, &reference.version, &reference.kind);
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("discovering {key}"))?;
    cache.insert(key, (resource.clone(), caps.scope.clone()));
    Ok((resource, caps.scope))
}

async fn object_node(
    client: &Client,
    cache: &mut BTreeMap<String, (ApiResource, Scope)>,
    reference: &ObjectReference,
) -> anyhow::Result<Node> {
    let object = object_text(&reference.kind, &reference.namespace, &reference.name);
    let (resource, scope) = match resource_for(client, cache, reference).await {
        Ok(found) => found,
        Err(error) => {
            return Ok(Node {
                object,
                state: "Unknown".into(),
                message: super::error_message(&error),
                children: Vec::new(),
            })
        }
    };
    let api: Api<DynamicObject> = match scope {
        Scope::Namespaced => Api::namespaced_with(client.clone(), &reference.namespace, &resource),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let Some(live) = api
        .get_opt(&reference.name)
        .await
        .with_context(|| format!("reading {object}"))?
    else {
        return Ok(Node {
            object,
            state: "Missing".into(),
            message: "not on the cluster (the agent recreates it at its next pass)".into(),
            children: Vec::new(),
        });
    };
    let live = serde_json::to_value(&live)?;
    let Health { state, message } = health::assess(&live, &health::HealthOptions::default());
    let mut children = Vec::new();
    if let Some(selector) = pods::pod_selector(&live) {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &reference.namespace);
        let list = pods
            .list(&ListParams::default().labels(&selector).limit(PODS_SHOWN))
            .await
            .with_context(|| format!("listing the Pods of {object}"))?;
        for pod in &list.items {
            children.push(pod_node(&serde_json::to_value(pod)?));
        }
    }
    Ok(Node {
        object,
        state: state_name(state),
        message,
        children,
    })
}

/// The objects of `bd`'s active revision, as its status lists them.
pub fn inventory(bd: &crate::api::BundleDeployment) -> Vec<ObjectReference> {
    bd.status
        .as_ref()
        .and_then(|s| s.inventory.clone())
        .map(|i| i.objects)
        .unwrap_or_default()
}

/// One node per object of `inventory` (in its order), read live with its health and, for
/// workloads, its Pods.
pub async fn nodes(client: &Client, inventory: &[ObjectReference]) -> anyhow::Result<Vec<Node>> {
    let mut cache = BTreeMap::new();
    let mut nodes = Vec::with_capacity(inventory.len());
    for reference in inventory {
        nodes.push(object_node(client, &mut cache, reference).await?);
    }
    Ok(nodes)
}

/// The tree as text: one line per object, its Pods indented under it.
pub fn format_tree(root: &str, nodes: &[Node]) -> String {
    let width = nodes
        .iter()
        .flat_map(|n| {
            std::iter::once(n.object.chars().count() + 4)
                .chain(n.children.iter().map(|c| c.object.chars().count() + 8))
        })
        .max()
        .unwrap_or(0);
    let mut out = format!("{root}\n");
    let line = |out: &mut String, prefix: &str, node: &Node| {
        let label = format!("{prefix}{}", node.object);
        let pad = width.saturating_sub(label.chars().count());
        out.push_str(&format!(
            "{label}{}  {:<11} {}\n",
            " ".repeat(pad),
            node.state,
            node.message
        ));
    };
    for (i, node) in nodes.iter().enumerate() {
        let last = i + 1 == nodes.len();
        line(&mut out, if last { "└── " } else { "├── " }, node);
        for (j, child) in node.children.iter().enumerate() {
            let stem = if last { "    " } else { "│   " };
            let branch = if j + 1 == node.children.len() {
                "└── "
            } else {
                "├── "
            };
            line(&mut out, &format!("{stem}{branch}"), child);
        }
    }
    out
}

/// Runs `pallet tree`.
pub fn run(args: TreeArgs) -> anyhow::Result<()> {
    let (bd, nodes) = super::block_on(async {
        let client = args.kube.client().await?;
        let bd = super::ops::get_bd(&client, &args.name).await?;
        let nodes = nodes(&client, &inventory(&bd)).await?;
        Ok((bd, nodes))
    })?;
    let status = bd.status.clone().unwrap_or_default();
    let ready = crate::api::conditions::find(&status.conditions, "Ready");
    if args.output != Output::Table {
        return print_data(
            args.output,
            &json!({"name": args.name,
                    "ready": ready.map(|c| json!({"status": c.status, "reason": c.reason, "message": c.message})),
                    "activeRevision": status.active_revision,
                    "objects": nodes.iter().map(Node::to_json).collect::<Vec<_>>()}),
        );
    }
    let root = match ready {
        Some(c) => format!(
            "BundleDeployment {} (revision {}; Ready={} {})",
            args.name,
            status
                .active_revision
                .map(|n| n.to_string())
                .unwrap_or_else(|| "none".into()),
            c.status,
            c.reason
        ),
        None => format!("BundleDeployment {} (no Ready condition yet)", args.name),
    };
    if nodes.is_empty() {
        tprintln!("{root}\n    no objects applied yet");
        return Ok(());
    }
    tprint!("{}", format_tree(&root, &nodes));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_indents_pods_under_their_workload() {
        let pod = Node {
            object: "Pod web/web-1".into(),
            state: "Failed".into(),
            message: "container web CrashLoopBackOff, last exit code 1 (Error)".into(),
            children: Vec::new(),
        };
        let nodes = vec![
            Node {
                object: "Deployment web/web".into(),
                state: "InProgress".into(),
                message: "0 of 1 updated replicas available".into(),
                children: vec![pod],
            },
            Node {
                object: "ConfigMap web/conf".into(),
                state: "Current".into(),
                message: "exists".into(),
                children: Vec::new(),
            },
        ];
        let text = format_tree("BundleDeployment web", &nodes);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "BundleDeployment web");
        assert!(lines[1].starts_with("├── Deployment web/web "), "{text}");
        assert!(lines[2].starts_with("│   └── Pod web/web-1 "), "{text}");
        assert!(
            lines[2]
                .ends_with("Failed      container web CrashLoopBackOff, last exit code 1 (Error)"),
            "{text}"
        );
        assert!(lines[3].starts_with("└── ConfigMap web/conf "), "{text}");
        // The state column lines up.
        let column = |l: &str| {
            l.find("  InProgress")
                .or(l.find("  Failed"))
                .or(l.find("  Current"))
        };
        assert_eq!(
            column(lines[1]).map(|c| lines[1][..c].chars().count()),
            column(lines[2]).map(|c| lines[2][..c].chars().count())
        );
    }
}
