//! A bundle's page as plain values: conditions in words, the revision timeline, objects grouped
//! by kind, drift, notifications, provenance and dependencies. Pure: built from the
//! BundleDeployment and what the handlers read for it, testable without a cluster.

use std::collections::BTreeMap;

use crate::api::conditions::find;
use crate::api::{BundleDeployment, ObjectReference, RevisionPhase, RevisionStatus};
use crate::cli::tree::Node;
use crate::reconcile::PAUSED_REASON_ANNOTATION;
use kube::ResourceExt as _;

use super::state::{age, format_name, state_of, BundleState};

/// One condition, said in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionLine {
    /// Its type (`Ready`, …).
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// The condition as a sentence: `Ready: no`.
    pub headline: String,
    /// Its reason.
    pub reason: String,
    /// Its message.
    pub message: String,
    /// What the reason means (from the reasons reference), if documented.
    pub meaning: Option<&'static str>,
    /// What to do about it, when the condition is not as it should be.
    pub action: Option<&'static str>,
    /// How long ago it last changed.
    pub since: String,
    /// Whether it is as a healthy bundle has it.
    pub good: bool,
}

/// The value a healthy, running bundle has for each condition type.
fn healthy_value(type_: &str) -> &'static str {
    match type_ {
        "Reconciling" | "Stalled" | "Paused" | "RolledBack" => "False",
        _ => "True",
    }
}

/// `type_` = `status` as a reader says it.
fn headline(type_: &str, status: &str) -> String {
    let yes = status == "True";
    let word = match (type_, status) {
        (_, "Unknown") => "not known yet",
        ("Ready", _) if yes => "yes: the active revision is healthy",
        ("Ready", _) => "no",
        ("Reconciling", _) if yes => "work in progress",
        ("Reconciling", _) => "nothing in progress",
        ("Stalled", _) if yes => "stuck until something changes",
        ("Stalled", _) => "not stuck",
        ("Unpacked", _) if yes => "sources fetched",
        ("Unpacked", _) => "sources not fetched",
        ("Installed", _) if yes => "objects applied",
        ("Installed", _) => "objects not applied",
        ("Healthy", _) if yes => "every object healthy",
        ("Healthy", _) => "not every object is healthy",
        ("Paused", _) if yes => "paused: the agent writes nothing",
        ("Paused", _) => "not paused",
        ("RolledBack", _) if yes => "an earlier revision is active",
        ("RolledBack", _) => "no rollback in force",
        (_, _) if yes => "yes",
        _ => "no",
    };
    format!("{type_}: {word}")
}

/// The conditions of `bd` in words, Ready first.
pub fn conditions(bd: &BundleDeployment, now: i64) -> Vec<ConditionLine> {
    let status = bd.status.clone().unwrap_or_default();
    let mut lines: Vec<ConditionLine> = status
        .conditions
        .iter()
        .map(|c| {
            let doc = crate::api::reasons::REASONS
                .iter()
                .find(|r| r.name == c.reason);
            let good = c.status == healthy_value(&c.type_);
            ConditionLine {
                type_: c.type_.clone(),
                status: c.status.clone(),
                headline: headline(&c.type_, &c.status),
                reason: c.reason.clone(),
                message: c.message.clone(),
                meaning: doc.map(|d| d.meaning),
                action: doc.map(|d| d.action).filter(|a| !good && *a != "nothing"),
                since: age(Some(c.last_transition_time.0.as_second()), now),
                good,
            }
        })
        .collect();
    lines.sort_by_key(|l| l.type_ != "Ready");
    lines
}

/// One source of a revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceLine {
    /// `image`, `git`, `http`, `helmRepository`.
    pub kind: String,
    /// As written.
    pub reference: String,
    /// The immutable ref it resolved to.
    pub resolved: String,
    /// The version a range or chart repository chose.
    pub version: Option<String>,
    /// Who signed it, when verified.
    pub signer: Option<String>,
}

/// One revision on the timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimelineEntry {
    /// Its number.
    pub number: i64,
    /// `Healthy`, `Failed`, …
    pub phase: String,
    /// Whether its objects are on the cluster.
    pub active: bool,
    /// The spec generation it was made from.
    pub generation: i64,
    /// The content digest.
    pub digest: String,
    /// Objects in it.
    pub objects: i64,
    /// When it was applied (RFC 3339), and how long ago.
    pub applied: Option<(String, String)>,
    /// How long it took from applied to healthy.
    pub took: Option<String>,
    /// Its sources.
    pub sources: Vec<SourceLine>,
    /// Its reason and message (why it failed or was replaced).
    pub message: Option<String>,
    /// Whether a rollback to it can be asked for.
    pub can_roll_back: bool,
}

fn phase_name(phase: RevisionPhase) -> String {
    format!("{phase:?}")
}

/// `seconds` as `45s`, `3m 20s`, `2h 5m`.
pub fn duration_text(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m {}s", s / 60, s % 60),
        s => format!("{}h {}m", s / 3600, (s % 3600) / 60),
    }
}

/// The revisions of `bd`, newest first.
pub fn timeline(bd: &BundleDeployment, now: i64) -> Vec<TimelineEntry> {
    let status = bd.status.clone().unwrap_or_default();
    status
        .revisions
        .iter()
        .map(|r| timeline_entry(r, status.active_revision, now))
        .collect()
}

fn timeline_entry(r: &RevisionStatus, active: Option<i64>, now: i64) -> TimelineEntry {
    let is_active = Some(r.number) == active;
    TimelineEntry {
        number: r.number,
        phase: phase_name(r.phase),
        active: is_active,
        generation: r.generation,
        digest: r.digest.clone(),
        objects: r.objects,
        applied: r
            .applied_at
            .as_ref()
            .map(|t| (t.0.to_string(), age(Some(t.0.as_second()), now))),
        took: match (&r.applied_at, &r.healthy_at) {
            (Some(a), Some(h)) => Some(duration_text(h.0.as_second() - a.0.as_second())),
            _ => None,
        },
        sources: r
            .sources
            .iter()
            .map(|s| SourceLine {
                kind: serde_json::to_value(s.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                reference: s.reference.clone(),
                resolved: s.resolved.clone(),
                version: s.version.clone(),
                signer: s.verified.as_ref().map(|v| v.summary()),
            })
            .collect(),
        message: match (&r.reason, &r.message) {
            (Some(reason), Some(message)) => Some(format!("{reason}: {message}")),
            (None, Some(message)) => Some(message.clone()),
            (Some(reason), None) => Some(reason.clone()),
            (None, None) => None,
        },
        can_roll_back: !is_active && !matches!(r.phase, RevisionPhase::Applying),
    }
}

/// Objects of one kind, with how many are not healthy.
#[derive(Clone, Debug, PartialEq)]
pub struct KindGroup {
    /// `Deployment`, `ConfigMap`, … (with the group when not core: `Deployment.apps`).
    pub kind: String,
    /// The objects, with their Pods.
    pub objects: Vec<Node>,
    /// How many are not `Current`.
    pub unhealthy: usize,
}

/// True when a node's state is healthy.
pub fn node_healthy(node: &Node) -> bool {
    matches!(node.state.as_str(), "Current" | "Suspended")
}

/// `nodes` (one per `inventory` entry, in order) grouped by kind: kinds with unhealthy objects
/// first, then by name.
pub fn group_by_kind(inventory: &[ObjectReference], nodes: Vec<Node>) -> Vec<KindGroup> {
    let mut groups: BTreeMap<String, Vec<Node>> = BTreeMap::new();
    for (reference, node) in inventory.iter().zip(nodes) {
        let kind = if reference.group.is_empty() {
            reference.kind.clone()
        } else {
            format!("{}.{}", reference.kind, reference.group)
        };
        groups.entry(kind).or_default().push(node);
    }
    let mut groups: Vec<KindGroup> = groups
        .into_iter()
        .map(|(kind, objects)| KindGroup {
            unhealthy: objects.iter().filter(|n| !node_healthy(n)).count(),
            kind,
            objects,
        })
        .collect();
    groups.sort_by_key(|g| g.unhealthy == 0);
    groups
}

/// One column of a flow picture (provenance, dependencies): a title and its boxes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    /// The column's title.
    pub title: String,
    /// Its boxes.
    pub boxes: Vec<FlowBox>,
}

/// One box of a flow picture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowBox {
    /// The main line.
    pub label: String,
    /// Smaller lines under it.
    pub details: Vec<String>,
    /// A link, if the box is a page.
    pub href: Option<String>,
    /// A state to colour it by.
    pub state: Option<BundleState>,
}

/// Provenance of the active revision: sources → the rendered set (digest) → objects by kind.
pub fn provenance(bd: &BundleDeployment, groups: &[KindGroup]) -> Vec<Column> {
    let status = bd.status.clone().unwrap_or_default();
    let Some(active) = status
        .revisions
        .iter()
        .find(|r| Some(r.number) == status.active_revision)
    else {
        return Vec::new();
    };
    let entry = timeline_entry(active, status.active_revision, 0);
    let sources = entry
        .sources
        .iter()
        .map(|s| {
            let mut details = vec![format!("→ {}", s.resolved)];
            if let Some(version) = &s.version {
                details.push(format!("version {version}"));
            }
            details.push(match &s.signer {
                Some(signer) => format!("signed: {signer}"),
                None => "not verified".into(),
            });
            FlowBox {
                label: format!("{} {}", s.kind, s.reference),
                details,
                href: None,
                state: None,
            }
        })
        .collect();
    let mut rendered = vec![
        format!("{} objects", active.objects),
        format!("format {}", format_name(bd)),
    ];
    if !active.values_from.is_empty() {
        rendered.push(format!("{} values inputs", active.values_from.len()));
    }
    vec![
        Column {
            title: "Sources".into(),
            boxes: sources,
        },
        Column {
            title: "Rendered".into(),
            boxes: vec![FlowBox {
                label: format!("revision {} {}", active.number, active.digest),
                details: rendered,
                href: None,
                state: None,
            }],
        },
        Column {
            title: "Objects".into(),
            boxes: groups
                .iter()
                .map(|g| FlowBox {
                    label: format!("{} × {}", g.objects.len(), g.kind),
                    details: match g.unhealthy {
                        0 => vec!["healthy".into()],
                        n => vec![format!("{n} not healthy")],
                    },
                    href: Some(format!("#kind-{}", anchor(&g.kind))),
                    state: None,
                })
                .collect(),
        },
    ]
}

/// An HTML id made of `text`.
pub fn anchor(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// Dependencies as a graph: what `bd` depends on → it → what depends on it, each
/// BundleDeployment with its state from `states`.
pub fn dependencies(
    bd: &BundleDeployment,
    dependents: &[String],
    states: &BTreeMap<String, BundleState>,
) -> Vec<Column> {
    let link = |name: &str| FlowBox {
        label: name.to_string(),
        details: vec![states
            .get(name)
            .map(|s| s.name().to_string())
            .unwrap_or_else(|| "not found".into())],
        href: Some(format!("/bundles/{name}")),
        state: states.get(name).copied(),
    };
    let depends_on = bd
        .spec
        .depends_on
        .iter()
        .map(|d| {
            if d.is_bundle_deployment() {
                link(&d.name)
            } else {
                FlowBox {
                    label: d.describe(),
                    details: vec![format!(
                        "ready when: {}",
                        d.ready_expr.as_deref().unwrap_or("-")
                    )],
                    href: None,
                    state: None,
                }
            }
        })
        .collect();
    vec![
        Column {
            title: "Depends on".into(),
            boxes: depends_on,
        },
        Column {
            title: "This bundle".into(),
            boxes: vec![FlowBox {
                label: bd.name_any(),
                details: vec![state_of(bd).name().into()],
                href: None,
                state: Some(state_of(bd)),
            }],
        },
        Column {
            title: "Needed by".into(),
            boxes: dependents.iter().map(|d| link(d)).collect(),
        },
    ]
}

/// The pause's reason, when paused.
pub fn paused_reason(bd: &BundleDeployment) -> Option<String> {
    bd.spec.paused.then(|| {
        bd.annotations()
            .get(PAUSED_REASON_ANNOTATION)
            .cloned()
            .unwrap_or_else(|| "no reason given".into())
    })
}

/// The header line of a bundle's page: what is active and why it is in its state.
pub fn headline_of(bd: &BundleDeployment) -> String {
    let status = bd.status.clone().unwrap_or_default();
    let ready = find(&status.conditions, "Ready");
    let active = status
        .active_revision
        .map(|n| format!("revision {n} active"))
        .unwrap_or_else(|| "no revision active".into());
    match ready {
        Some(c) if !c.message.is_empty() => format!("{active}; {}", c.message),
        _ => active,
    }
}

/// Drift while paused: what differs from the active revision, and each object's diff.
#[derive(Clone, Debug, PartialEq)]
pub struct DriftView {
    /// Objects that differ (the agent's count).
    pub count: i64,
    /// `Kind namespace/name` and what differs, as the agent recorded it.
    pub objects: Vec<(String, String)>,
    /// Each drifted object's diff (label, unified diff) from the bundle to the live object, or
    /// why it could not be read.
    pub diffs: Result<Vec<(String, String)>, String>,
}

/// Everything a bundle's page shows.
#[derive(Clone, Debug)]
pub struct BundleView {
    /// The BundleDeployment as read.
    pub bd: BundleDeployment,
    /// Its state.
    pub state: BundleState,
    /// Conditions in words.
    pub conditions: Vec<ConditionLine>,
    /// Revisions, newest first.
    pub timeline: Vec<TimelineEntry>,
    /// Objects by kind, or why they could not be read; and how many were left out.
    pub objects: Result<Vec<KindGroup>, String>,
    /// Objects of the inventory not read (past the page's bound).
    pub objects_left_out: usize,
    /// Drift, when there is any.
    pub drift: Option<DriftView>,
    /// Provenance picture.
    pub provenance: Vec<Column>,
    /// Dependency graph.
    pub dependencies: Vec<Column>,
    /// Events of it and its objects, newest first, or why they could not be read.
    pub events: Result<Vec<crate::cli::events::Line>, String>,
    /// The change-log stream, or why it could not be read; `None` when no change log is
    /// configured.
    pub changes: Option<Result<Vec<super::changes::Change>, String>>,
    /// Now (Unix seconds).
    pub now: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bd() -> BundleDeployment {
        serde_saphyr::from_str(
            r#"
apiVersion: pallet.dev/v1alpha1
kind: BundleDeployment
metadata: {name: web, annotations: {pallet.dev/paused-reason: "hotfix INC-1"}}
spec:
  paused: true
  format: plain
  sources: [{kind: git, git: {repository: r, ref: {branch: main}}}]
  dependsOn: [{name: base}, {apiVersion: v1, kind: ConfigMap, namespace: x, name: flags, readyExpr: "true"}]
status:
  activeRevision: 1
  conditions:
  - {type: Healthy, status: "False", reason: Progressing, message: "Deployment web/web: 0 of 1", lastTransitionTime: "2026-01-01T00:00:00Z"}
  - {type: Ready, status: "False", reason: ProgressDeadlineExceeded, message: "revision 2 failed", lastTransitionTime: "2026-01-01T00:00:00Z"}
  revisions:
  - {number: 2, generation: 2, digest: "sha256:bb", phase: Failed, objects: 2, reason: ProgressDeadlineExceeded, message: "not healthy",
     appliedAt: "2026-01-01T00:00:00Z",
     sources: [{kind: git, ref: main, resolved: "abc123", verified: {method: ssh, key: "SHA256:k"}}]}
  - {number: 1, generation: 1, digest: "sha256:aa", phase: Healthy, objects: 2,
     appliedAt: "2026-01-01T00:00:00Z", healthyAt: "2026-01-01T00:01:05Z", sources: [{kind: git, ref: main, resolved: "def456"}]}
"#,
        )
        .unwrap()
    }

    #[test]
    fn conditions_are_said_in_words_ready_first() {
        let lines = conditions(&bd(), 1_767_225_600 + 30);
        assert_eq!(lines[0].type_, "Ready");
        assert_eq!(lines[0].headline, "Ready: no");
        assert!(!lines[0].good);
        assert!(lines[0].meaning.is_some());
        assert!(lines[0].action.is_some());
        assert_eq!(lines[0].since, "30s");
        assert_eq!(lines[1].headline, "Healthy: not every object is healthy");
    }

    #[test]
    fn the_timeline_shows_phases_durations_sources_and_signers() {
        let entries = timeline(&bd(), 1_767_225_600);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].phase, "Failed");
        assert!(entries[0].can_roll_back);
        assert_eq!(
            entries[0].message.as_deref(),
            Some("ProgressDeadlineExceeded: not healthy")
        );
        assert_eq!(
            entries[0].sources[0].signer.as_deref(),
            Some("ssh key SHA256:k")
        );
        assert!(entries[1].active && !entries[1].can_roll_back);
        assert_eq!(entries[1].took.as_deref(), Some("1m 5s"));
    }

    #[test]
    fn objects_group_by_kind_unhealthy_first_and_pictures_follow() {
        let reference = |group: &str, kind: &str, name: &str| ObjectReference {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: "web".into(),
            name: name.into(),
            message: None,
        };
        let node = |object: &str, state: &str| Node {
            object: object.into(),
            state: state.into(),
            message: String::new(),
            children: Vec::new(),
        };
        let groups = group_by_kind(
            &[
                reference("", "ConfigMap", "conf"),
                reference("apps", "Deployment", "web"),
            ],
            vec![
                node("ConfigMap web/conf", "Current"),
                node("Deployment web/web", "InProgress"),
            ],
        );
        assert_eq!(groups[0].kind, "Deployment.apps");
        assert_eq!(groups[0].unhealthy, 1);
        assert_eq!(groups[1].kind, "ConfigMap");
        let picture = provenance(&bd(), &groups);
        assert_eq!(picture.len(), 3);
        assert_eq!(picture[0].boxes[0].label, "git main");
        assert!(picture[0].boxes[0]
            .details
            .contains(&"→ def456".to_string()));
        assert!(picture[1].boxes[0].label.contains("sha256:aa"));
        assert_eq!(picture[2].boxes[0].label, "1 × Deployment.apps");
        let states = BTreeMap::from([("base".to_string(), BundleState::Ready)]);
        let graph = dependencies(&bd(), &["front".to_string()], &states);
        assert_eq!(graph[0].boxes[0].details, ["Ready"]);
        assert_eq!(graph[0].boxes[1].label, "v1 ConfigMap x/flags");
        assert_eq!(graph[1].boxes[0].state, Some(BundleState::Paused));
        assert_eq!(graph[2].boxes[0].details, ["not found"]);
        assert_eq!(paused_reason(&bd()).as_deref(), Some("hotfix INC-1"));
        assert_eq!(duration_text(7_300), "2h 1m");
    }
}
