//! Day-to-day commands on a live BundleDeployment: `status`, `history`, `rollback`, `retry`,
//! `reconcile`, `pause`, `resume` and `trace`.
//!
//! Requests to the agent (rollback, retry, reconcile) are one-shot annotations whose value the
//! agent copies into the matching `status.lastHandled*` field once it has acted; `--wait` polls
//! for that with a deadline.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use clap::Args;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::Scope;
use kube::{Client, ResourceExt as _};
use serde_json::{json, Value};

use super::{print_data, FetchFlags, KubeArgs, Output};
use crate::api::{
    BundleDeployment, BundleDeploymentStatus, RevisionStatus, REQUESTED_RECONCILE_ANNOTATION,
    REQUESTED_RETRY_ANNOTATION, REQUESTED_ROLLBACK_ANNOTATION,
};
use crate::apply::plan::{OWNER_LABEL, REVISION_ANNOTATION};
use crate::preview;
use crate::reconcile::PAUSED_REASON_ANNOTATION;

/// Field manager of the CLI's own writes to BundleDeployments.
const CLI_FIELD_MANAGER: &str = "pallet-cli";

/// Flags of `pallet status` and `pallet history`.
#[derive(Args, Debug)]
pub struct StatusArgs {
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

/// Flags of `pallet retry` and `pallet reconcile`.
#[derive(Args, Debug)]
pub struct RequestArgs {
    /// The BundleDeployment.
    #[arg(add = clap_complete::engine::ArgValueCompleter::new(super::completion::bundle_deployment_names))]
    pub name: String,
    /// Wait until the agent has handled the request, then report.
    #[arg(long)]
    pub wait: bool,
    /// How long `--wait` waits: a duration (`90s`, `5m`; a bare number is seconds).
    #[arg(long, default_value = "5m", value_parser = crate::duration::parse_arg)]
    pub timeout: Duration,
    /// Cluster.
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// Flags of `pallet rollback`.
#[derive(Args, Debug)]
pub struct RollbackArgs {
    /// The BundleDeployment (with `--set`, the BundleDeploymentSet).
    #[arg(add = clap_complete::engine::ArgValueCompleter::new(super::completion::bundle_deployment_names))]
    pub name: String,
    /// The stored revision to return to.
    #[arg(long = "to", value_name = "N", required_unless_present = "set")]
    pub to: Option<i64>,
    /// NAME is a BundleDeploymentSet: roll every cluster its current revision reached back to
    /// the revision it had before, and roll that revision out no further until the template
    /// changes.
    #[arg(long, conflicts_with = "to")]
    pub set: bool,
    /// Wait until the agent has handled the request, then report.
    #[arg(long)]
    pub wait: bool,
    /// How long `--wait` waits: a duration (`90s`, `5m`; a bare number is seconds).
    #[arg(long, default_value = "5m", value_parser = crate::duration::parse_arg)]
    pub timeout: Duration,
    /// Cluster.
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// Flags of `pallet pause`.
#[derive(Args, Debug)]
pub struct PauseArgs {
    /// The BundleDeployment.
    #[arg(add = clap_complete::engine::ArgValueCompleter::new(super::completion::bundle_deployment_names))]
    pub name: String,
    /// Why (shown in the Paused condition and `pallet status`).
    #[arg(long)]
    pub reason: String,
    /// Cluster.
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// Flags of `pallet resume`.
#[derive(Args, Debug)]
pub struct ResumeArgs {
    /// The BundleDeployment.
    #[arg(add = clap_complete::engine::ArgValueCompleter::new(super::completion::bundle_deployment_names))]
    pub name: String,
    /// Change nothing: print the objects that differ from the bundle (what resuming would
    /// revert) and their differing field paths.
    #[arg(long)]
    pub dry_run: bool,
    /// The agent's namespace: where Secrets named without a namespace are read (`--dry-run`);
    /// `--namespace` is an older spelling
    #[arg(
        long = "agent-namespace",
        alias = "namespace",
        value_name = "NS",
        default_value = "pallet-system"
    )]
    pub namespace: String,
    /// Output format of `--dry-run`.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: Output,
    /// Cluster.
    #[command(flatten)]
    pub kube: KubeArgs,
    /// Fetch settings (`--dry-run`).
    #[command(flatten)]
    pub fetch: FetchFlags,
}

/// Flags of `pallet trace`.
#[derive(Args, Debug)]
pub struct TraceArgs {
    /// The object, as `KIND/NAME` (`configmap/app`, `deployments.apps/web`, `Deployment/web`).
    #[arg(value_name = "KIND/NAME")]
    pub object: String,
    /// Namespace of a namespaced object (default: the context's namespace).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// The agent's namespace, where revision snapshots are stored (read when the revision is no
    /// longer in the BundleDeployment's status); `--store-namespace` is an older spelling
    #[arg(
        long = "agent-namespace",
        alias = "store-namespace",
        value_name = "NS",
        default_value = "pallet-system"
    )]
    pub store_namespace: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: Output,
    /// Cluster.
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// The one-shot requests without arguments.
#[derive(Clone, Copy, Debug)]
pub enum Request {
    /// `pallet retry`.
    Retry,
    /// `pallet reconcile`.
    Reconcile,
}

/// The BundleDeployment `name`; its absence is a not-found error (exit status 3).
pub(crate) async fn get_bd(client: &Client, name: &str) -> anyhow::Result<BundleDeployment> {
    Api::<BundleDeployment>::all(client.clone())
        .get_opt(name)
        .await
        .with_context(|| format!("reading BundleDeployment {name}"))?
        .ok_or_else(|| super::exit::not_found(format!("BundleDeployment {name} not found")))
}

pub(super) async fn patch_bd(client: &Client, name: &str, patch: &Value) -> anyhow::Result<()> {
    Api::<BundleDeployment>::all(client.clone())
        .patch(
            name,
            &PatchParams::apply(CLI_FIELD_MANAGER),
            &Patch::Merge(patch),
        )
        .await
        .with_context(|| format!("updating BundleDeployment {name}"))?;
    Ok(())
}

/// An RFC 3339 UTC timestamp: the token that makes each request distinct.
pub(super) fn token() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// How long ago `time` was, kubectl-style (`45s`, `3m`, `5h`, `2d`); `-` when unset.
pub(super) fn age(time: Option<&Time>) -> String {
    let Some(time) = time else {
        return "-".into();
    };
    let seconds = (k8s_openapi::jiff::Timestamp::now().as_second() - time.0.as_second()).max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn short_digest(digest: &str) -> String {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    format!("sha256:{}", hex.chars().take(12).collect::<String>())
}

fn phase_name(revision: &RevisionStatus) -> String {
    serde_json::to_value(revision.phase)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Reads the status field that records a handled request.
type HandledField = fn(&BundleDeploymentStatus) -> Option<&String>;

/// Waits until `handled(status)` equals `value`, polling every half second until `timeout`.
async fn wait_handled(
    client: &Client,
    name: &str,
    value: &str,
    timeout: Duration,
    what: &str,
    handled: HandledField,
) -> anyhow::Result<BundleDeployment> {
    let deadline = Instant::now() + timeout;
    loop {
        let bd = get_bd(client, name).await?;
        let status = bd.status.clone().unwrap_or_default();
        if handled(&status).map(String::as_str) == Some(value) {
            return Ok(bd);
        }
        if Instant::now() >= deadline {
            return Err(super::exit::timed_out(format!(
                "timed out after {}s waiting for the agent to handle the {what} request {value:?} on {name} (last handled: {:?}); is the agent running?",
                timeout.as_secs(),
                handled(&status)
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn ready_line(bd: &BundleDeployment) -> String {
    let status = bd.status.clone().unwrap_or_default();
    let ready = crate::api::conditions::find(&status.conditions, "Ready");
    let active = status
        .active_revision
        .map(|n| n.to_string())
        .unwrap_or_else(|| "none".into());
    match ready {
        Some(c) => format!(
            "active revision {active}; Ready={} {}: {}",
            c.status, c.reason, c.message
        ),
        None => format!("active revision {active}; no Ready condition yet"),
    }
}

/// Runs `pallet status`.
pub fn status(args: StatusArgs) -> anyhow::Result<()> {
    let bd = super::block_on(async { get_bd(&args.kube.client().await?, &args.name).await })?;
    let status = bd.status.clone().unwrap_or_default();
    let reason = bd
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PAUSED_REASON_ANNOTATION))
        .cloned();
    if args.output != Output::Table {
        return print_data(
            args.output,
            &json!({
                "name": args.name,
                "paused": bd.spec.paused,
                "pausedReason": reason,
                "generation": bd.metadata.generation,
                "status": status,
            }),
        );
    }
    tprint!("{}", format_status(&args.name, &bd, reason.as_deref()));
    Ok(())
}

/// `pallet status` as text.
pub fn format_status(name: &str, bd: &BundleDeployment, paused_reason: Option<&str>) -> String {
    let status = bd.status.clone().unwrap_or_default();
    let mut out = String::new();
    let opt = |n: Option<i64>| n.map(|n| n.to_string()).unwrap_or_else(|| "none".into());
    let _ = writeln!(out, "Name:                  {name}");
    let _ = writeln!(out, "Format:                {}", format_name(bd));
    let _ = writeln!(
        out,
        "Cluster:               {}",
        crate::api::cluster_of(bd).name()
    );
    if let Some(set) = bd.labels().get(crate::api::SET_LABEL) {
        let revision = bd
            .annotations()
            .get(crate::api::SET_REVISION_ANNOTATION)
            .map(|r| format!(" (set revision {r})"))
            .unwrap_or_default();
        let _ = writeln!(out, "Set:                   {set}{revision}");
    }
    let _ = writeln!(
        out,
        "Paused:                {}{}",
        bd.spec.paused,
        paused_reason.map(|r| format!(" ({r})")).unwrap_or_default()
    );
    let _ = writeln!(
        out,
        "Generation:            {} (observed {})",
        opt(bd.metadata.generation),
        opt(status.observed_generation)
    );
    let _ = writeln!(
        out,
        "Active revision:       {}",
        opt(status.active_revision)
    );
    let _ = writeln!(
        out,
        "Last healthy revision: {}",
        opt(status.last_healthy_revision)
    );
    let _ = writeln!(out, "\nConditions:");
    if status.conditions.is_empty() {
        let _ = writeln!(out, "  none yet");
        if status.observed_generation.is_none() {
            let _ = writeln!(
                out,
                "  (no agent has reconciled it yet: is one running (`pallet check`), and do its \
                 --selector and --shard include this BundleDeployment?)"
            );
        }
    } else {
        let _ = writeln!(
            out,
            "  {:<12} {:<7} {:<22} {:<5} MESSAGE",
            "TYPE", "STATUS", "REASON", "AGE"
        );
        for c in &status.conditions {
            let _ = writeln!(
                out,
                "  {:<12} {:<7} {:<22} {:<5} {}",
                c.type_,
                c.status,
                c.reason,
                age(Some(&c.last_transition_time)),
                c.message
            );
        }
    }
    let _ = writeln!(out, "\nRevisions:");
    out.push_str(&indent(&format_revisions(&status), "  "));
    if let Some(healthy) = crate::api::conditions::find(&status.conditions, "Healthy") {
        if healthy.status != "True" && !healthy.message.is_empty() {
            let _ = writeln!(out, "\nUnhealthy objects:\n  {}", healthy.message);
        }
    }
    if let Some(drift) = status.drift.as_ref().filter(|d| d.count > 0) {
        let _ = writeln!(
            out,
            "\nDrift: {} object(s) differ from the bundle",
            drift.count
        );
        for object in &drift.objects {
            let _ = writeln!(
                out,
                "  {}: {}",
                super::plan::reference_text(object),
                object.message.as_deref().unwrap_or("differs")
            );
        }
        if drift.count as usize > drift.objects.len() {
            let _ = writeln!(
                out,
                "  … and {} more",
                drift.count as usize - drift.objects.len()
            );
        }
    }
    if !status.notifications.is_empty() {
        let _ = writeln!(out, "\nNotifications:");
        out.push_str(&format_notifications(&status));
    }
    if !status.skipped.is_empty() {
        let _ = writeln!(out, "\nSkipped (optional, kind not served):");
        for object in &status.skipped {
            let _ = writeln!(out, "  {}", super::plan::reference_text(object));
        }
    }
    out
}

/// The `status.notifications` table: per target, what waits and the last one finished.
fn format_notifications(status: &BundleDeploymentStatus) -> String {
    let mut out = format!(
        "  {:<16} {:<40} {:<9} {:<8} {:<5} MESSAGE\n",
        "TARGET", "TRANSITION", "RESULT", "ATTEMPTS", "AGE"
    );
    for n in &status.notifications {
        let _ = writeln!(
            out,
            "  {:<16} {:<40} {:<9} {:<8} {:<5} {}",
            n.name,
            n.transition,
            format!("{:?}", n.result),
            n.attempts,
            age(Some(&n.time)),
            n.message.as_deref().unwrap_or("-")
        );
    }
    out
}

fn indent(text: &str, prefix: &str) -> String {
    text.lines().map(|l| format!("{prefix}{l}\n")).collect()
}

fn format_name(bd: &BundleDeployment) -> String {
    serde_json::to_value(bd.spec.format)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The revisions table (newest first); `*` marks the active revision.
pub fn format_revisions(status: &BundleDeploymentStatus) -> String {
    if status.revisions.is_empty() {
        return "none recorded yet\n".into();
    }
    let mut out = format!(
        "  {:<8} {:<11} {:<4} {:<19} {:<7} {:<7} {:<7} SOURCES / MESSAGE\n",
        "REVISION", "PHASE", "GEN", "DIGEST", "OBJECTS", "APPLIED", "HEALTHY"
    );
    for r in &status.revisions {
        let marker = if Some(r.number) == status.active_revision {
            '*'
        } else {
            ' '
        };
        let sources: Vec<String> = r
            .sources
            .iter()
            .map(|s| resolved_line(&s.reference, &s.resolved, s.version.as_deref()))
            .collect();
        let _ = write!(
            out,
            "{marker} {:<8} {:<11} {:<4} {:<19} {:<7} {:<7} {:<7} {}",
            r.number,
            phase_name(r),
            r.generation,
            short_digest(&r.digest),
            r.objects,
            age(r.applied_at.as_ref()),
            age(r.healthy_at.as_ref()),
            sources.join(", ")
        );
        if let Some(message) = &r.message {
            let _ = write!(out, " ({message})");
        }
        out.push('\n');
    }
    out
}

/// Runs `pallet history`.
pub fn history(args: StatusArgs) -> anyhow::Result<()> {
    let bd = super::block_on(async { get_bd(&args.kube.client().await?, &args.name).await })?;
    let status = bd.status.unwrap_or_default();
    match args.output {
        Output::Table => tprint!("{}", format_revisions(&status)),
        output => print_data(output, &serde_json::to_value(&status.revisions)?)?,
    }
    Ok(())
}

/// Asks the agent to roll `name` back to its stored revision `to` (refused when status lists
/// stored revisions and `to` is not among them); returns the request's annotation value.
pub(crate) async fn request_rollback(
    client: &Client,
    name: &str,
    to: i64,
) -> anyhow::Result<String> {
    let bd = get_bd(client, name).await?;
    let status = bd.status.clone().unwrap_or_default();
    if !status.revisions.is_empty() && !status.revisions.iter().any(|r| r.number == to) {
        let known: Vec<String> = status
            .revisions
            .iter()
            .map(|r| r.number.to_string())
            .collect();
        return Err(super::exit::not_found(format!(
            "BundleDeployment {name} has no stored revision {to}; stored: {}",
            known.join(", ")
        )));
    }
    let value = format!("{to}@{}", token());
    patch_bd(
        client,
        name,
        &json!({"metadata": {"annotations": {REQUESTED_ROLLBACK_ANNOTATION: value}}}),
    )
    .await?;
    Ok(value)
}

/// Runs `pallet rollback`.
pub fn rollback(args: RollbackArgs) -> anyhow::Result<()> {
    super::block_on(async {
        let client = args.kube.client().await?;
        // `pallet rollback --set` is `sets::rollback_set`'s; clap asks for `--to` otherwise.
        let Some(to) = args.to else {
            bail!("give --to N (or --set for a BundleDeploymentSet)");
        };
        let value = request_rollback(&client, &args.name, to).await?;
        tprintln!(
            "requested rollback of {} to revision {to} ({REQUESTED_ROLLBACK_ANNOTATION}={value})",
            args.name,
        );
        if args.wait {
            let bd = wait_handled(&client, &args.name, &value, args.timeout, "rollback", |s| {
                s.last_handled_rollback.as_ref()
            })
            .await?;
            tprintln!("handled: {}", ready_line(&bd));
            let active = bd.status.as_ref().and_then(|s| s.active_revision);
            if active != Some(to) {
                bail!(
                    "the agent handled the request but revision {} is active, not {to}",
                    active
                        .map(|n| n.to_string())
                        .unwrap_or_else(|| "none".into()),
                );
            }
        }
        Ok(())
    })
}

/// Asks the agent for a retry or a reconcile of `name` now; returns the annotation's value.
pub(crate) async fn request_now(
    client: &Client,
    name: &str,
    kind: Request,
) -> anyhow::Result<String> {
    let annotation = match kind {
        Request::Retry => REQUESTED_RETRY_ANNOTATION,
        Request::Reconcile => REQUESTED_RECONCILE_ANNOTATION,
    };
    get_bd(client, name).await?;
    let value = token();
    patch_bd(
        client,
        name,
        &json!({"metadata": {"annotations": {annotation: value}}}),
    )
    .await?;
    Ok(value)
}

/// Runs `pallet retry` or `pallet reconcile`.
pub fn request(kind: Request, args: RequestArgs) -> anyhow::Result<()> {
    let (annotation, what, handled): (&str, &str, HandledField) = match kind {
        Request::Retry => (REQUESTED_RETRY_ANNOTATION, "retry", |s| {
            s.last_handled_retry.as_ref()
        }),
        Request::Reconcile => (REQUESTED_RECONCILE_ANNOTATION, "reconcile", |s| {
            s.last_handled_reconcile.as_ref()
        }),
    };
    super::block_on(async {
        let client = args.kube.client().await?;
        let value = request_now(&client, &args.name, kind).await?;
        tprintln!("requested {what} of {} ({annotation}={value})", args.name);
        if args.wait {
            let bd = wait_handled(&client, &args.name, &value, args.timeout, what, handled).await?;
            tprintln!("handled: {}", ready_line(&bd));
        }
        Ok(())
    })
}

/// Pauses `name` with `reason` (`Some`), or resumes it (`None`).
pub(crate) async fn set_paused(
    client: &Client,
    name: &str,
    reason: Option<&str>,
) -> anyhow::Result<()> {
    get_bd(client, name).await?;
    let patch = match reason {
        Some(reason) => json!({"metadata": {"annotations": {PAUSED_REASON_ANNOTATION: reason}},
                               "spec": {"paused": true}}),
        None => json!({"metadata": {"annotations": {PAUSED_REASON_ANNOTATION: null}},
                       "spec": {"paused": false}}),
    };
    patch_bd(client, name, &patch).await
}

/// Runs `pallet pause`.
pub fn pause(args: PauseArgs) -> anyhow::Result<()> {
    super::block_on(async {
        let client = args.kube.client().await?;
        set_paused(&client, &args.name, Some(&args.reason)).await?;
        tprintln!("paused {}: {}", args.name, args.reason);
        Ok(())
    })
}

/// Runs `pallet resume`.
pub fn resume(args: ResumeArgs) -> anyhow::Result<()> {
    super::block_on(async {
        let config = args.kube.config().await?;
        let client = Client::try_from(config.clone())?;
        if !args.dry_run {
            set_paused(&client, &args.name, None).await?;
            tprintln!("resumed {}", args.name);
            return Ok(());
        }
        let bd = get_bd(&client, &args.name).await?;
        let (rolled_back, drifted) =
            resume_preview(&config, &bd, Some(&args.fetch), &args.namespace).await?;
        if let (Some(active), Output::Table) = (rolled_back, args.output) {
            // With sources to fetch, a stored revision is compared with only after a rollback.
            tprintln!("compared with revision {active}, the one rolled back to: resuming keeps it until the spec or the sources change");
        }
        if args.output != Output::Table {
            let list: Vec<Value> = drifted
                .iter()
                .map(|d| {
                    json!({"kind": d.key.kind, "group": d.key.group, "namespace": d.key.namespace,
                           "name": d.key.name, "missing": d.missing, "fields": d.paths})
                })
                .collect();
            return print_data(
                args.output,
                &json!({"name": args.name, "paused": bd.spec.paused, "wouldRevert": list}),
            );
        }
        if !bd.spec.paused {
            tprintln!(
                "{} is not paused; the agent already keeps it as the bundle says.",
                args.name
            );
        }
        if drifted.is_empty() {
            tprintln!(
                "resuming {} would revert nothing: every object matches the bundle",
                args.name
            );
        } else {
            tprintln!(
                "resuming {} would revert {} object(s):",
                args.name,
                drifted.len()
            );
            for d in &drifted {
                if d.missing {
                    tprintln!("  {}: missing, would be created", d.key);
                } else {
                    tprintln!("  {}: {}", d.key, d.paths.join(", "));
                }
            }
        }
        Ok(())
    })
}

/// What resuming `bd` would revert: the objects that differ from what the agent would apply,
/// with their differing field paths. That is the revision rolled back to while a rollback holds
/// (the agent stays on it until the spec or the sources move), else what the sources render now
/// (fetched with `fetch`), or, without `fetch`, the active revision's stored snapshot. Returns
/// the stored revision compared with, if one was, and the objects.
pub(crate) async fn resume_preview(
    config: &kube::Config,
    bd: &BundleDeployment,
    fetch: Option<&FetchFlags>,
    namespace: &str,
) -> anyhow::Result<(Option<i64>, Vec<preview::Drifted>)> {
    let client = Client::try_from(config.clone())?;
    let name = bd.metadata.name.clone().unwrap_or_default();
    let stored = match (rolled_back_to(bd), fetch) {
        (Some(active), _) => Some(active),
        (None, None) => bd.status.as_ref().and_then(|s| s.active_revision),
        (None, Some(_)) => None,
    };
    let objects = match (stored, fetch) {
        (Some(number), _) => {
            let store = crate::revision::RevisionStore::new(client.clone(), namespace.to_string());
            let record = store
                .load(&name, number)
                .await
                .map_err(|e| anyhow!("reading revision {number} of {name} from the store: {e}"))?;
            let helm = bd.spec.format == crate::api::BundleFormat::Helm;
            let stored = record.objects_to_apply()?;
            crate::reconcile::hook_plan::split(&stored, helm).release
        }
        (None, Some(fetch)) => {
            let what = format!("BundleDeployment {name}");
            let acting = super::acting::acting_for(config, &client, bd, &what, namespace).await?;
            super::diff::render_bundle(&client, &acting, bd, fetch).await?
        }
        (None, None) => Vec::new(),
    };
    let target = preview::Target {
        client: &client,
        owner: &name,
        install_namespace: bd.spec.install_namespace.as_deref(),
        collision_protection: bd.spec.collision_protection(),
        takeover: bd.spec.takeover.as_ref(),
    };
    // Helm hooks are not kept in line with the bundle: resuming reverts none of them (they
    // are not among the objects compared).
    Ok((stored, preview::drift(&target, &objects).await?))
}

/// The revision a rollback left active, while the `RolledBack` condition holds.
pub(crate) fn rolled_back_to(bd: &BundleDeployment) -> Option<i64> {
    let status = bd.status.as_ref()?;
    let rolled_back = crate::api::conditions::find(
        &status.conditions,
        crate::api::conditions::types::ROLLED_BACK,
    )
    .is_some_and(|c| c.status == "True");
    if rolled_back {
        status.active_revision
    } else {
        None
    }
}

/// The nearest owner of `object` (by controller ownerReferences, a few levels up: a Pod's
/// ReplicaSet, then its Deployment) that pallet wrote: the chain as text and the BundleDeployment.
async fn written_ancestor(client: &Client, object: &DynamicObject) -> Option<(String, String)> {
    let mut chain = Vec::new();
    let mut current = object.clone();
    for _ in 0..4 {
        let reference = current
            .metadata
            .owner_references
            .as_ref()?
            .iter()
            .find(|r| r.controller == Some(true))?
            .clone();
        let gvk = kube::api::GroupVersionKind::try_from(&kube::api::TypeMeta {
            api_version: reference.api_version.clone(),
            kind: reference.kind.clone(),
        })
        .ok()?;
        let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk).await.ok()?;
        let api: Api<DynamicObject> = match (capabilities.scope, &current.metadata.namespace) {
            (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &resource),
            _ => Api::all_with(client.clone(), &resource),
        };
        let parent = api.get_opt(&reference.name).await.ok()??;
        chain.push(format!("{} {}", reference.kind, reference.name));
        if let Some(bd) = parent
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(OWNER_LABEL))
        {
            return Some((chain.join(", made by "), bd.clone()));
        }
        current = parent;
    }
    None
}

/// Finds the API resource for a kubectl-style kind (`configmap`, `configmaps`, `ConfigMap`,
/// `deployments.apps`, `Deployment.apps`).
async fn find_resource(
    client: &Client,
    kind: &str,
) -> anyhow::Result<(kube::discovery::ApiResource, Scope)> {
    let discovery = kube::Discovery::new(client.clone())
        .run()
        .await
        .context("discovering the cluster's APIs")?;
    let wanted = kind.to_ascii_lowercase();
    let (name, group) = match wanted.split_once('.') {
        Some((name, group)) => (name.to_string(), Some(group.to_string())),
        None => (wanted.clone(), None),
    };
    for api_group in discovery.groups() {
        if group.as_deref().is_some_and(|g| g != api_group.name()) {
            continue;
        }
        for (resource, caps) in api_group.recommended_resources() {
            let kind_lower = resource.kind.to_ascii_lowercase();
            if name == kind_lower || name == resource.plural {
                return Ok((resource, caps.scope));
            }
        }
    }
    Err(super::exit::not_found(format!(
        "the cluster serves no kind {kind:?}"
    )))
}

/// Runs `pallet trace`: finds the object, the BundleDeployment and revision that wrote it, then
/// prints what that revision was made of.
pub fn trace(args: TraceArgs) -> anyhow::Result<()> {
    let (kind, name) = args
        .object
        .split_once('/')
        .ok_or_else(|| super::exit::usage("give the object as KIND/NAME, e.g. configmap/app"))?;
    let report = super::block_on(trace_report(&args, kind, name))?;
    if args.output != Output::Table {
        return print_data(args.output, &report);
    }
    tprint!("{}", trace_table(&report, &args.store_namespace));
    Ok(())
}

/// The object `kind/name` as the cluster has it: its API resource and the object.
async fn traced_object(
    args: &TraceArgs,
    client: &Client,
    default_namespace: &str,
    (kind, name): (&str, &str),
) -> anyhow::Result<(kube::discovery::ApiResource, DynamicObject)> {
    let (resource, scope) = find_resource(client, kind).await?;
    let api: Api<DynamicObject> = match scope {
        Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            args.namespace.as_deref().unwrap_or(default_namespace),
            &resource,
        ),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let object = api
        .get_opt(name)
        .await?
        .ok_or_else(|| super::exit::not_found(format!("{} {name} not found", resource.kind)))?;
    Ok((resource, object))
}

/// The BundleDeployment that wrote `object` (its owner label), or why there is none: pallet
/// did not write it, and what made it when that was a BundleDeployment's object.
async fn traced_owner(
    client: &Client,
    object: &DynamicObject,
    what: &str,
) -> anyhow::Result<String> {
    let owner = object
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(OWNER_LABEL))
        .cloned();
    if let Some(owner) = owner {
        return Ok(owner);
    }
    let made_by = match written_ancestor(client, object).await {
        Some((chain, bd)) => format!(
            "; it is made by {chain}, which BundleDeployment {bd} wrote (trace that instead)"
        ),
        None => String::new(),
    };
    bail!("{what} carries no {OWNER_LABEL} label: pallet did not write it{made_by}")
}

/// Revision `revision` of `owner` as stored (it names its sources and digest beyond the status
/// list too, and what each processor did); None when it is not stored.
async fn traced_record(
    client: &Client,
    store_namespace: &str,
    owner: &str,
    revision: Option<i64>,
) -> anyhow::Result<Option<crate::revision::RevisionRecord>> {
    let Some(n) = revision else {
        return Ok(None);
    };
    let store = crate::revision::RevisionStore::new(client.clone(), store_namespace.to_string());
    match store.load(owner, n).await {
        Ok(record) => Ok(Some(record)),
        Err(crate::revision::RevisionError::NotFound { .. }) => Ok(None),
        Err(e) => Err(anyhow!(
            "reading revision {n} of {owner} from the store: {e}"
        )),
    }
}

/// The processors of `record` that added or changed the object `key`.
fn processed_by(record: Option<&crate::revision::RevisionRecord>, key: &str) -> Vec<Value> {
    record
        .iter()
        .flat_map(|r| r.processors.iter())
        .filter_map(|t| {
            let how = if t.added.iter().any(|k| k == key) {
                "added"
            } else if t.changed.iter().any(|k| k == key) {
                "changed"
            } else {
                return None;
            };
            Some(json!({"processor": t.processor, "how": how}))
        })
        .collect()
}

/// What `pallet trace` reports of object `kind/name`, as data.
async fn trace_report(args: &TraceArgs, kind: &str, name: &str) -> anyhow::Result<Value> {
    let config = args.kube.config().await?;
    let default_namespace = config.default_namespace.clone();
    let client = Client::try_from(config)?;
    let (resource, object) = traced_object(args, &client, &default_namespace, (kind, name)).await?;
    let namespace = object.metadata.namespace.clone();
    let what = match &namespace {
        Some(ns) => format!("{} {ns}/{name}", resource.kind),
        None => format!("{} {name}", resource.kind),
    };
    let owner = traced_owner(&client, &object, &what).await?;
    let revision: Option<i64> = object
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REVISION_ANNOTATION))
        .and_then(|v| v.parse().ok());
    let bd = get_bd(&client, &owner)
        .await
        .with_context(|| format!("{what} is labelled as written by BundleDeployment {owner}"))?;
    let status = bd.status.clone().unwrap_or_default();
    let found = revision.and_then(|n| status.revisions.iter().find(|r| r.number == n).cloned());
    let record = traced_record(&client, &args.store_namespace, &owner, revision).await?;
    let stored = match (&record, &found) {
        (Some(record), None) => Some(json!({
            "number": record.number, "generation": record.generation,
            "digest": record.digest, "sources": record.sources,
            "objects": record.objects.len(),
        })),
        _ => None,
    };
    let key = pallet_formats::ObjectKey {
        group: resource.group.clone(),
        kind: resource.kind.clone(),
        namespace: namespace.clone(),
        name: name.to_string(),
    }
    .to_string();
    Ok(json!({
        "object": what,
        "bundleDeployment": owner,
        "revision": revision,
        "activeRevision": status.active_revision,
        "revisionStatus": found,
        "storedRevision": stored,
        "processedBy": processed_by(record.as_ref(), &key),
    }))
}

/// `pallet trace`'s report as text.
fn trace_table(report: &Value, store_namespace: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Object:           {}",
        report["object"].as_str().unwrap_or("")
    );
    let _ = writeln!(
        out,
        "BundleDeployment: {}",
        report["bundleDeployment"].as_str().unwrap_or("")
    );
    let active = report["activeRevision"].as_i64();
    match report["revision"].as_i64() {
        None => {
            let _ = writeln!(
                out,
                "Revision:         unknown (no {REVISION_ANNOTATION} annotation); active revision {}",
                active.map(|n| n.to_string()).unwrap_or_else(|| "none".into())
            );
        }
        Some(n) => {
            let marker = if Some(n) == active { " (active)" } else { "" };
            let _ = writeln!(out, "Revision:         {n}{marker}");
            match serde_json::from_value::<RevisionStatus>(report["revisionStatus"].clone()) {
                Ok(r) => status_revision_lines(&mut out, &r),
                Err(_) => match report["storedRevision"].as_object() {
                    Some(stored) => stored_revision_lines(&mut out, stored),
                    None => {
                        let _ = writeln!(
                            out,
                            "                  revision {n} is neither in status.revisions nor in the revision store (namespace {store_namespace})",
                        );
                    }
                },
            }
        }
    }
    if let Some(processed) = report["processedBy"].as_array().filter(|p| !p.is_empty()) {
        let _ = writeln!(out, "Processed by:");
        for p in processed {
            let _ = writeln!(
                out,
                "  {} ({})",
                p["processor"].as_str().unwrap_or(""),
                p["how"].as_str().unwrap_or("")
            );
        }
    }
    out
}

/// A revision as `status.revisions` lists it: phase, content, generation, sources, values.
fn status_revision_lines(out: &mut String, r: &RevisionStatus) {
    let _ = writeln!(out, "Phase:            {}", phase_name(r));
    let _ = writeln!(out, "Content digest:   {}", r.digest);
    let _ = writeln!(out, "Generation:       {}", r.generation);
    let _ = writeln!(out, "Sources:");
    for s in &r.sources {
        let kind = serde_json::to_value(s.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let line = resolved_line(&s.reference, &s.resolved, s.version.as_deref());
        let _ = writeln!(out, "  {kind} {line}");
        if let Some(signer) = &s.verified {
            let _ = writeln!(out, "    verified: {}", signer.summary());
        }
    }
    if !r.values_from.is_empty() {
        let _ = writeln!(out, "Values from:");
        for v in &r.values_from {
            let _ = writeln!(out, "  {:?} {} -> {}", v.kind, v.name, v.digest);
        }
    }
}

/// A revision no longer in `status.revisions`, as the revision store has it.
fn stored_revision_lines(out: &mut String, stored: &serde_json::Map<String, Value>) {
    let _ = writeln!(
        out,
        "Phase:            (not in status.revisions; from the revision store)"
    );
    let _ = writeln!(
        out,
        "Content digest:   {}",
        stored["digest"].as_str().unwrap_or("")
    );
    let _ = writeln!(out, "Generation:       {}", stored["generation"]);
    let _ = writeln!(out, "Sources:");
    for s in stored["sources"].as_array().into_iter().flatten() {
        let line = resolved_line(
            s["ref"].as_str().unwrap_or(""),
            s["resolved"].as_str().unwrap_or(""),
            s["version"].as_str(),
        );
        let _ = writeln!(out, "  {} {line}", s["kind"].as_str().unwrap_or(""),);
        if let Ok(signer) =
            serde_json::from_value::<crate::api::VerifiedSignature>(s["verified"].clone())
        {
            let _ = writeln!(out, "    verified: {}", signer.summary());
        }
    }
}

/// A source as written, what it resolved to, and the version a range or chart repository chose:
/// `ref -> resolved (version 1.2.3)`.
pub(super) fn resolved_line(reference: &str, resolved: &str, version: Option<&str>) -> String {
    match version {
        Some(v) => format!("{reference} -> {resolved} (version {v})"),
        None => format!("{reference} -> {resolved}"),
    }
}
