//! The reference pages made from one list each: metrics, condition reasons, the change log's
//! and the notifications' payloads.

use schemars::JsonSchema;

use super::markdown::{code, generated_note, table};
use super::schema::{render, Walker};
use crate::api::reasons::{Stage, REASONS};
use crate::metrics::{MetricKind, METRIC_DOCS};

/// `docs/reference/metrics.md`.
pub fn metrics_page() -> String {
    let mut out = String::from("# Metrics\n\n");
    out.push_str(&generated_note("`src/metrics.rs` (`METRIC_DOCS`)"));
    out.push_str(
        "\nThe agent serves them at `/metrics` on `--metrics-addr`, in the OpenMetrics text \
         format, with `/healthz` (alive) and `/readyz` (a leader whose BundleDeployment watch \
         has synced, or a standby that can read the Lease). Every series of a known label value \
         exists from the start, at 0, so rates and alerts work before the first event.\n\n",
    );
    let rows: Vec<Vec<String>> = METRIC_DOCS
        .iter()
        .map(|m| {
            let series = match m.kind {
                MetricKind::Histogram => {
                    format!("{} (`_bucket`, `_sum`, `_count`)", code(&m.exposed_name()))
                }
                _ => code(&m.exposed_name()),
            };
            let labels: Vec<String> = m.labels.iter().map(|l| code(l)).collect();
            vec![
                series,
                m.kind.as_str().to_string(),
                labels.join(", "),
                m.help.to_string(),
            ]
        })
        .collect();
    out.push_str(&table(&["Metric", "Type", "Labels", "Help"], &rows));
    out
}

/// `docs/reference/reasons.md`.
pub fn reasons_page() -> String {
    let mut out = String::from("# Condition reasons\n\n");
    out.push_str(&generated_note("`src/api/reasons.rs` (`REASONS`)"));
    out.push_str(
        "\n`kubectl get bd NAME -o yaml` (or `pallet status NAME`) shows the conditions; the \
         reason says which kind of problem it is and the message says what and where. \
         `Stalled=True` means the agent waits for a change; `Reconciling=True` with \
         `Stalled=False` means it is retrying or progressing. The same reasons are a failed \
         revision's `reason` (`pallet history`) and the reason of the Event the agent records.\n\n\
         **Retries.** A transient error is retried with a per-BundleDeployment backoff (1 s \
         doubling to 5 min); the agent logs each at warn with `retry_in`. While the API server \
         itself cannot be reached the retry is at most 4 s, and the agent's watches reconnect \
         within 4 s too, so after an API outage of any length the agent is working again a few \
         seconds after the API server is back.\n\n",
    );
    for stage in Stage::ALL {
        let rows: Vec<Vec<String>> = REASONS
            .iter()
            .filter(|r| r.stage == stage)
            .map(|r| {
                vec![
                    code(r.name),
                    if r.conditions.is_empty() {
                        "—".to_string()
                    } else {
                        r.conditions.join(", ")
                    },
                    r.meaning.to_string(),
                    r.action.to_string(),
                ]
            })
            .collect();
        if rows.is_empty() {
            continue;
        }
        out.push_str(&format!("## {}\n\n", stage.title()));
        out.push_str(&table(
            &["Reason", "Conditions", "What it means", "What to do"],
            &rows,
        ));
        out.push('\n');
    }
    out
}

/// The JSON Schema of `T` as pretty JSON, and its field sections rooted at `name`.
fn schema_of<T: JsonSchema>(name: &str) -> anyhow::Result<(String, String)> {
    let schema = serde_json::to_value(schemars::schema_for!(T))?;
    let sections = Walker::sections(&schema, &schema, name);
    Ok((
        render(&sections, "###"),
        serde_json::to_string_pretty(&schema)?,
    ))
}

fn schema_block(out: &mut String, json: &str) {
    out.push_str("<details><summary>JSON Schema</summary>\n\n```json\n");
    out.push_str(json);
    out.push_str("\n```\n\n</details>\n\n");
}

/// `docs/reference/changelog.md`.
pub fn changelog_page() -> anyhow::Result<String> {
    let mut out = String::from("# Change log\n\n");
    out.push_str(&generated_note(
        "the types of `src/changelog.rs` (`Entry`, `Marker`)",
    ));
    out.push_str(&format!(
        "\nThe agent writes one JSON line for every create, update and delete it makes to a \
         bundle's objects, with the why (reason, revision) next to the what. Lines go to stdout \
         (the agent's logs go to stderr) and, with `--change-log FILE`, are appended to that \
         file too. Every line has `schema: {}`; fields are only ever added to this version. A \
         line with a `marker` field is not a write: it says what the agent knows about gaps in \
         its own log.\n\n\
         Durability: each entry is written as soon as its write to the cluster returns, before \
         the agent goes on, so a killed agent loses at most the entries of the writes in flight \
         at that moment (at most `--apply-parallelism` object writes, or one delete). The file \
         is fsynced once at the end of every pass that wrote, so a machine crash may also lose \
         that pass's entries.\n\n",
        code(crate::changelog::SCHEMA)
    ));
    let (entry, entry_json) = schema_of::<crate::changelog::Entry>("entry")?;
    out.push_str("## Entry: one write\n\n");
    out.push_str(&entry);
    schema_block(&mut out, &entry_json);
    let (marker, marker_json) = schema_of::<crate::changelog::Marker>("marker")?;
    out.push_str("## Marker: a gap in the log\n\n");
    out.push_str(&marker);
    schema_block(&mut out, &marker_json);
    Ok(out)
}

/// `docs/reference/notifications.md`.
pub fn notifications_page() -> anyhow::Result<String> {
    use crate::notify::message::{
        CloudEvent, CommitStatus, NotificationBody, SlackMessage, CLOUD_EVENT_TYPE_PREFIX,
        EVENT_HEADER, ID_HEADER, SIGNATURE_HEADER,
    };
    let mut out = String::from("# Notification payloads\n\n");
    out.push_str(&generated_note("the types of `src/notify/message.rs`"));
    out.push_str(
        "\nEach target of `spec.notifications` gets one HTTP POST per transition, with \
         `Content-Type: application/json` (structured CloudEvents: \
         `application/cloudevents+json`). A delivery is retried until it is accepted (2xx) or \
         its deadline passes; `status.notifications` shows how it went. A receiver may get the \
         same transition twice and deduplicates by its id.\n\n## Headers\n\n",
    );
    out.push_str(&table(
        &["Header", "Sent to", "Value"],
        &[
            vec![
                code(ID_HEADER),
                "webhook, Slack, commit status".into(),
                "the transition's id".into(),
            ],
            vec![
                code(EVENT_HEADER),
                "webhook, Slack, commit status".into(),
                "the transition's type (`Healthy`, `Failed`, …)".into(),
            ],
            vec![
                code(SIGNATURE_HEADER),
                "every kind, when the target's Secret has `hmacKey`".into(),
                "`sha256=<hex>`: the HMAC-SHA256 of the body with that key".into(),
            ],
            vec![
                code("Authorization"),
                "every kind, when the target's Secret has `token`".into(),
                "`Bearer <token>`".into(),
            ],
            vec![
                code("ce-specversion, ce-id, ce-source, ce-type, ce-time, ce-subject"),
                "CloudEvents in binary mode".into(),
                "the event's attributes (see the structured event below)".into(),
            ],
        ],
    ));
    out.push('\n');
    let sections = [
        (
            "Webhook and CloudEvents data",
            schema_of::<NotificationBody>("body")?,
        ),
        (
            "CloudEvents, structured mode",
            schema_of::<CloudEvent>("event")?,
        ),
        ("Slack", schema_of::<SlackMessage>("slack")?),
        ("Commit status", schema_of::<CommitStatus>("commitStatus")?),
    ];
    for (title, (fields, json)) in sections {
        out.push_str(&format!("## {title}\n\n"));
        if title.starts_with("CloudEvents") {
            out.push_str(&format!(
                "The event's `type` is {} followed by the transition's type in lower case.\n\n",
                code(CLOUD_EVENT_TYPE_PREFIX)
            ));
        }
        out.push_str(&fields);
        schema_block(&mut out, &json);
    }
    Ok(out)
}
