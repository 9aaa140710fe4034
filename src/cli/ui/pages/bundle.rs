//! A bundle's page, its action forms, the resume preview and the revision diff.

use maud::{html, Markup};

use super::layout::{badge, health_badge};
use crate::cli::ui::model::{anchor, BundleView, Column, DriftView, KindGroup, TimelineEntry};
use crate::cli::ui::state::age;

/// What the action forms need.
pub struct ActionContext<'a> {
    /// Whether actions are offered at all.
    pub enabled: bool,
    /// The CSRF token.
    pub csrf: &'a str,
}

fn csrf_field(actions: &ActionContext<'_>) -> Markup {
    html! { input type="hidden" name="csrf" value=(actions.csrf); }
}

/// A confirmed action: a disclosure whose form asks again before it posts.
fn confirm(
    actions: &ActionContext<'_>,
    name: &str,
    action: &str,
    summary: &str,
    explain: &str,
    extra: Markup,
) -> Markup {
    html! {
        details.confirm data-action=(action) {
            summary { (summary) }
            form method="post" action=(format!("/bundles/{name}/{action}")) {
                (csrf_field(actions))
                p { (explain) }
                (extra)
                button type="submit" class="danger" { "Confirm: " (summary.trim_end_matches('…')) }
            }
        }
    }
}

fn actions_panel(view: &BundleView, actions: &ActionContext<'_>) -> Markup {
    let name = view.bd.metadata.name.as_deref().unwrap_or_default();
    let helm = view.bd.spec.format == crate::api::BundleFormat::Helm;
    html! {
        section #actions aria-labelledby="actions-title" {
            h2 #actions-title { "Actions" }
            @if !actions.enabled {
                p { "This view is read-only: the agent serves actions only with " code { "--ui-actions" } "." }
            } @else {
                div.actions {
                    @if view.bd.spec.paused {
                        a.button href=(format!("/bundles/{name}/resume")) { "Resume…" }
                    } @else {
                        (confirm(actions, name, "pause", "Pause…",
                            "The agent stops writing to this bundle's objects (no apply, no prune, no drift correction, no rollback) until it is resumed. It still reports drift.",
                            html! { label { "Reason (shown to everyone) " input type="text" name="reason" required minlength="1" maxlength="500" autocomplete="off"; } }))
                    }
                    (confirm(actions, name, "retry", "Retry…",
                        "Ask the agent to try the failed revision again now.", html! {}))
                    (confirm(actions, name, "reconcile", "Reconcile now…",
                        "Ask the agent to reconcile now: resolve floating refs again and correct drift.", html! {}))
                    @if helm {
                        (confirm(actions, name, "test", "Run the chart's tests…",
                            "Ask the agent to run the chart's test hooks against the active revision; the result appears under Revisions.", html! {}))
                    }
                }
                p.hint { "Each action is done as you: the API server checks your permissions and its answer is shown here." }
            }
        }
    }
}

fn conditions(view: &BundleView) -> Markup {
    html! {
        section #conditions aria-labelledby="conditions-title" {
            h2 #conditions-title { "Conditions" }
            @if view.conditions.is_empty() {
                p { "No conditions yet: no agent has reconciled this BundleDeployment. Is one running (" code { "pallet check" } "), and do its --selector and --shard include it?" }
            }
            ul.conditions {
                @for c in &view.conditions {
                    li class={"condition " (if c.good { "ok" } else { "fail" })} {
                        strong { (c.headline) }
                        " " span.reason { (c.reason) } " · " span.since { (c.since) " ago" }
                        @if !c.message.is_empty() { p.cond-message { (c.message) } }
                        @if let Some(meaning) = c.meaning { p.meaning { "Means: " (meaning) } }
                        @if let Some(action) = c.action { p.todo { "What to do: " (action) } }
                    }
                }
            }
        }
    }
}

fn revision(
    entry: &TimelineEntry,
    name: &str,
    active: Option<i64>,
    actions: &ActionContext<'_>,
) -> Markup {
    html! {
        li class={"revision phase-" (entry.phase)} id=(format!("revision-{}", entry.number)) {
            div.rev-head {
                strong { "Revision " (entry.number) }
                " " span class={"badge phase phase-" (entry.phase)} { (entry.phase) }
                @if entry.active { " " span.badge.active-rev { "active" } }
            }
            dl.rev-facts {
                @if let Some((at, ago)) = &entry.applied { dt { "Applied" } dd { time datetime=(at) { (ago) " ago" } } }
                @if let Some(took) = &entry.took { dt { "Healthy after" } dd { (took) } }
                dt { "Digest" } dd { code { (entry.digest) } }
                dt { "Objects" } dd { (entry.objects) }
                dt { "Generation" } dd { (entry.generation) }
            }
            @if let Some(message) = &entry.message { p.rev-message { (message) } }
            ul.sources {
                @for s in &entry.sources {
                    li {
                        span.kind { (s.kind) } " " (s.reference) " → " code { (s.resolved) }
                        @if let Some(v) = &s.version { " (version " (v) ")" }
                        @if let Some(signer) = &s.signer { br; span.signer { "signed: " (signer) } }
                    }
                }
            }
            div.rev-actions {
                @if let Some(active) = active.filter(|a| *a != entry.number) {
                    a href=(format!("/bundles/{name}/diff?from={active}&to={}", entry.number)) { "What changes from revision " (active) }
                }
                @if entry.can_roll_back && actions.enabled {
                    (confirm(actions, name, "rollback", &format!("Roll back to revision {}…", entry.number),
                        &format!("The agent re-applies revision {} from its stored snapshot and prunes what it does not have.", entry.number),
                        html! { input type="hidden" name="to" value=(entry.number); }))
                }
            }
        }
    }
}

fn timeline(view: &BundleView, actions: &ActionContext<'_>) -> Markup {
    let name = view.bd.metadata.name.as_deref().unwrap_or_default();
    let status = view.bd.status.clone().unwrap_or_default();
    html! {
        section #revisions aria-labelledby="revisions-title" {
            h2 #revisions-title { "Revisions" }
            @if view.timeline.is_empty() { p { "None recorded yet." } }
            ol.timeline reversed {
                @for entry in &view.timeline { (revision(entry, name, status.active_revision, actions)) }
            }
            @if let Some(run) = &status.test {
                h3 { "Last test run" }
                pre.report { (crate::cli::test::report(run)) }
            }
        }
    }
}

fn kind_group(group: &KindGroup) -> Markup {
    html! {
        details.kind open[group.unhealthy > 0] id=(format!("kind-{}", anchor(&group.kind))) {
            summary {
                (group.kind) " (" (group.objects.len()) ")"
                @if group.unhealthy > 0 { " · " span.bad { (group.unhealthy) " not healthy" } }
            }
            ul.tree {
                @for node in &group.objects {
                    li {
                        span.object { (node.object) } " " (health_badge(&node.state))
                        @if !node.message.is_empty() { " " span.msg { (node.message) } }
                        @if !node.children.is_empty() {
                            ul {
                                @for pod in &node.children {
                                    li { span.object { (pod.object) } " " (health_badge(&pod.state))
                                        @if !pod.message.is_empty() { " " span.msg { (pod.message) } } }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn objects(view: &BundleView) -> Markup {
    html! {
        section #objects aria-labelledby="objects-title" {
            h2 #objects-title { "Objects" }
            @match &view.objects {
                Err(e) => { div.message.error role="alert" { "Could not read the objects: " (e) } }
                Ok(groups) if groups.is_empty() => { p { "No objects applied yet." } }
                Ok(groups) => {
                    @for group in groups { (kind_group(group)) }
                    @if view.objects_left_out > 0 { p { (view.objects_left_out) " more objects not read here (" code { "pallet tree" } " shows them all)." } }
                }
            }
        }
    }
}

/// A list of unified diffs.
pub fn diffs(items: &[(String, String)]) -> Markup {
    html! {
        @for (label, diff) in items {
            details.diff open {
                summary { (label) }
                pre.diff { @for line in diff.lines() {
                    @let class = match line.chars().next() { Some('+') => "add", Some('-') => "del", Some('@') => "hunk", _ => "ctx" };
                    span class=(class) { (line) } "\n"
                } }
            }
        }
    }
}

fn drift(view: &DriftView) -> Markup {
    html! {
        section #drift aria-labelledby="drift-title" {
            h2 #drift-title { "Drift" }
            p { (view.count) " object(s) differ from the active revision; resuming (or the next pass, when not paused) reverts them." }
            ul { @for (object, what) in &view.objects { li { (object) ": " (what) } } }
            @match &view.diffs {
                Ok(items) => (diffs(items)),
                Err(e) => div.message.error role="alert" { "Could not compare: " (e) },
            }
        }
    }
}

/// A flow picture: columns of boxes, arrows between columns.
pub fn flow(columns: &[Column], label: &str) -> Markup {
    html! {
        figure.flow aria-label=(label) {
            @for (i, column) in columns.iter().enumerate() {
                @if i > 0 { div.arrow aria-hidden="true" { "→" } }
                div.column {
                    h3 { (column.title) }
                    @if column.boxes.is_empty() { p.none { "none" } }
                    ul { @for b in &column.boxes {
                        @let class = match b.state { Some(s) => format!("box state-{}", s.name()), None => "box".to_string() };
                        li class=(class) {
                            @match &b.href { Some(href) => a href=(href) { (b.label) }, None => span.label { (b.label) } }
                            @for d in &b.details { br; span.detail { (d) } }
                        }
                    } }
                }
            }
        }
    }
}

fn notifications(view: &BundleView) -> Markup {
    let status = view.bd.status.clone().unwrap_or_default();
    html! {
        section #notifications aria-labelledby="notifications-title" {
            h2 #notifications-title { "Notifications" }
            @if view.bd.spec.notifications.is_empty() {
                p { "No notification targets (" code { "spec.notifications" } ")." }
            } @else if status.notifications.is_empty() {
                p { "Nothing sent yet." }
            } @else {
                div.table-wrap { table {
                    thead { tr { th scope="col" { "Target" } th scope="col" { "Transition" } th scope="col" { "Delivery" } th scope="col" { "Attempts" } th scope="col" { "When" } th scope="col" { "Answer" } } }
                    tbody { @for n in &status.notifications { tr {
                        td data-label="Target" { (n.name) } td data-label="Transition" { (n.transition) }
                        td data-label="Delivery" { (format!("{:?}", n.result)) } td data-label="Attempts" { (n.attempts) }
                        td data-label="When" { (age(Some(n.time.0.as_second()), view.now)) " ago" }
                        td data-label="Answer" { (n.message.as_deref().unwrap_or("-")) }
                    } } }
                } }
            }
        }
    }
}

fn changes(view: &BundleView) -> Markup {
    html! {
        section #changes aria-labelledby="changes-title" {
            h2 #changes-title { "Change log" }
            @match &view.changes {
                None => p { "No change log to read: start " code { "pallet ui --change-log FILE" } " with the file the agent appends to (" code { "pallet agent --change-log FILE" } "), or use the agent's view." },
                Some(Err(e)) => div.message.error role="alert" { "Could not read the change log: " (e) },
                Some(Ok(lines)) if lines.is_empty() => p { "No writes recorded for this bundle." },
                Some(Ok(lines)) => div.table-wrap { table.changes {
                    thead { tr { th scope="col" { "Time" } th scope="col" { "Write" } th scope="col" { "Why" } th scope="col" { "Object" } th scope="col" { "Rev." } th scope="col" { "Result" } } }
                    tbody { @for c in lines { tr class={"result-" (c.result)} {
                        td data-label="Time" { time datetime=(c.time) { (c.time) } }
                        td data-label="Write" { (c.operation) }
                        td data-label="Why" { (c.reason) }
                        td data-label="Object" { (c.object) @if !c.fields.is_empty() { br; span.detail { (c.fields.join(", ")) } } }
                        td data-label="Rev." { (c.revision.map(|n| n.to_string()).unwrap_or_default()) }
                        td data-label="Result" { (c.result) @if let Some(e) = &c.error { br; span.detail { (e) } } }
                    } } }
                } },
            }
        }
    }
}

fn events(view: &BundleView) -> Markup {
    html! {
        section #events aria-labelledby="events-title" {
            h2 #events-title { "Events" }
            @match &view.events {
                Err(e) => div.message.error role="alert" { "Could not read the Events: " (e) },
                Ok(lines) if lines.is_empty() => p { "No Events." },
                Ok(lines) => div.table-wrap { table {
                    thead { tr { th scope="col" { "Age" } th scope="col" { "Type" } th scope="col" { "Reason" } th scope="col" { "Object" } th scope="col" { "Message" } } }
                    tbody { @for l in lines { tr class={"event-" (l.type_)} {
                        td data-label="Age" { (age(Some(l.time), view.now)) }
                        td data-label="Type" { (l.type_) } td data-label="Reason" { (l.reason) }
                        td data-label="Object" { (l.object) }
                        td data-label="Message" { (l.message) @if l.count > 1 { " (×" (l.count) ")" } }
                    } } }
                } },
            }
        }
    }
}

/// The body of a bundle's page; `flash` is the outcome of the action just taken.
pub fn bundle(
    view: &BundleView,
    actions: &ActionContext<'_>,
    flash: Option<(&str, &str)>,
) -> Markup {
    let name = view.bd.metadata.name.as_deref().unwrap_or_default();
    html! {
        nav.crumbs aria-label="Breadcrumb" { a href="/" { "Bundles" } " / " span aria-current="page" { (name) } }
        h1 { (name) " " (badge(view.state)) }
        @if let Some((kind, text)) = flash { (super::layout::message(kind, text)) }
        p.headline { (crate::cli::ui::model::headline_of(&view.bd)) }
        @let cluster = crate::api::cluster_of(&view.bd).name().to_string();
        p.cluster { "Cluster: " a href=(format!("/?cluster={}", url::form_urlencoded::byte_serialize(cluster.as_bytes()).collect::<String>())) { (cluster) }
            @if let Some(set) = view.bd.metadata.labels.as_ref().and_then(|l| l.get(crate::api::SET_LABEL)) {
                " · stamped by BundleDeploymentSet " code { (set) }
            }
        }
        @if let Some(reason) = crate::cli::ui::model::paused_reason(&view.bd) {
            div.message.notice role="status" { "Paused: " (reason) }
        }
        nav.toc aria-label="On this page" { ul {
            li { a href="#conditions" { "Conditions" } } li { a href="#actions" { "Actions" } }
            li { a href="#revisions" { "Revisions" } } li { a href="#objects" { "Objects" } }
            @if view.drift.is_some() { li { a href="#drift" { "Drift" } } }
            li { a href="#changes" { "Change log" } } li { a href="#events" { "Events" } }
            li { a href="#notifications" { "Notifications" } } li { a href="#provenance" { "Provenance" } }
            li { a href="#dependencies" { "Dependencies" } }
        } }
        (conditions(view))
        (actions_panel(view, actions))
        (timeline(view, actions))
        (objects(view))
        @if let Some(d) = &view.drift { (drift(d)) }
        (changes(view))
        (events(view))
        (notifications(view))
        section #provenance aria-labelledby="provenance-title" {
            h2 #provenance-title { "Provenance" }
            @if view.provenance.is_empty() { p { "No active revision." } } @else { (flow(&view.provenance, "Provenance of the active revision: sources, the rendered set, objects")) }
        }
        section #dependencies aria-labelledby="dependencies-title" {
            h2 #dependencies-title { "Dependencies" }
            (flow(&view.dependencies, "Dependencies: what this bundle waits for, and what waits for it"))
        }
    }
}

/// What resuming would revert: one line per object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreviewLine {
    /// `Kind namespace/name`.
    pub object: String,
    /// Missing (would be created), else the differing field paths.
    pub missing: bool,
    /// Field paths.
    pub fields: Vec<String>,
}

/// The resume page: the dry-run preview first, then the confirmation.
pub fn resume(
    name: &str,
    paused: bool,
    compared_with: &str,
    preview: &Result<Vec<PreviewLine>, String>,
    actions: &ActionContext<'_>,
) -> Markup {
    html! {
        nav.crumbs aria-label="Breadcrumb" { a href="/" { "Bundles" } " / " a href=(format!("/bundles/{name}")) { (name) } " / " span aria-current="page" { "Resume" } }
        h1 { "Resume " (name) }
        @if !paused { (super::layout::message("notice", "This bundle is not paused: the agent already keeps it as the bundle says.")) }
        h2 { "What resuming would revert" }
        p.hint { (compared_with) }
        @match preview {
            Err(e) => div.message.error role="alert" { "Could not compute the preview: " (e) },
            Ok(lines) if lines.is_empty() => p #preview-result { "Nothing: every object matches the bundle." },
            Ok(lines) => {
                p #preview-result { (lines.len()) " object(s) would be reverted:" }
                ul.preview { @for l in lines { li {
                    span.object { (l.object) } ": "
                    @if l.missing { "missing, would be created" } @else { (l.fields.join(", ")) }
                } } }
            }
        }
        @if paused && actions.enabled {
            form method="post" action=(format!("/bundles/{name}/resume")) {
                (csrf_field(actions))
                button type="submit" class="danger" { "Confirm: resume " (name) }
                " " a href=(format!("/bundles/{name}")) { "Cancel" }
            }
        }
    }
}

/// The diff between two revisions.
pub fn revision_diff(
    name: &str,
    from: i64,
    to: i64,
    result: &Result<Vec<(String, String)>, String>,
) -> Markup {
    html! {
        nav.crumbs aria-label="Breadcrumb" { a href="/" { "Bundles" } " / " a href=(format!("/bundles/{name}")) { (name) } " / " span aria-current="page" { "Revision " (from) " → " (to) } }
        h1 { (name) ": revision " (from) " → " (to) }
        @match result {
            Err(e) => div.message.error role="alert" { (e) },
            Ok(items) if items.is_empty() => p { "The two revisions hold the same objects." },
            Ok(items) => { p { (items.len()) " object(s) differ (Secret values are masked)." } (diffs(items)) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_confirmed_forms_with_the_csrf_token() {
        let actions = ActionContext {
            enabled: true,
            csrf: "tok",
        };
        let html = confirm(&actions, "web", "retry", "Retry…", "why", html! {}).into_string();
        assert!(
            html.contains(r#"<form method="post" action="/bundles/web/retry">"#),
            "{html}"
        );
        assert!(html.contains(r#"name="csrf" value="tok""#));
        assert!(html.contains("Confirm: Retry"));
        let preview = Ok(vec![PreviewLine {
            object: "ConfigMap web/conf".into(),
            missing: false,
            fields: vec![".data.greeting".into()],
        }]);
        let html =
            resume("web", true, "compared with the sources", &preview, &actions).into_string();
        assert!(html.contains("1 object(s) would be reverted"));
        assert!(
            html.contains("ConfigMap web/conf</span>: .data.greeting"),
            "{html}"
        );
        assert!(html.contains("Confirm: resume web"));
        let read_only = ActionContext {
            enabled: false,
            csrf: "",
        };
        let html = resume("web", true, "", &preview, &read_only).into_string();
        assert!(!html.contains("<form"));
    }

    #[test]
    fn diffs_mark_added_and_removed_lines() {
        let html = diffs(&[(
            "ConfigMap/web/conf".into(),
            "@@ -1 +1 @@\n-a: 1\n+a: 2\n".into(),
        )])
        .into_string();
        assert!(html.contains(r#"<span class="del">-a: 1</span>"#), "{html}");
        assert!(html.contains(r#"<span class="add">+a: 2</span>"#));
    }
}
