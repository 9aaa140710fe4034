//! `pallet plan -f bd.yaml`: resolve every source, render, and show what applying would do —
//! per object create/update (changed field paths, never values)/unchanged from a server-side
//! dry-run apply, what would be pruned, and the RBAC the bundle grants. `--pin` prints the
//! BundleDeployment with every source pinned to what was just reviewed.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::bail;
use clap::Args;
use kube::api::Api;
use kube::Client;
use serde_json::{json, Value};

use super::{FetchFlags, KubeArgs, Output};
use crate::api::BundleDeployment;
use crate::preview::{self, Change, Planned, RbacSummary};
use crate::source::Fetched;

/// Flags of `pallet plan`.
#[derive(Args, Debug)]
pub struct PlanArgs {
    /// The BundleDeployment manifest (`-` for stdin).
    #[arg(short = 'f', long = "filename")]
    pub file: PathBuf,
    /// Print the BundleDeployment with every source pinned (image digest, git commit, http
    /// sha256, a chart repository's exact version and digest) on stdout; the plan itself then
    /// goes to stderr.
    #[arg(long)]
    pub pin: bool,
    /// The agent's namespace: where Secrets named without a namespace are read; `--namespace`
    /// is an older spelling
    #[arg(
        long = "agent-namespace",
        alias = "namespace",
        value_name = "NS",
        default_value = "pallet-system"
    )]
    pub namespace: String,
    /// Output format of the plan.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: Output,
    /// Cluster.
    #[command(flatten)]
    pub kube: KubeArgs,
    /// Fetch settings.
    #[command(flatten)]
    pub fetch: FetchFlags,
}

/// Everything a plan found.
struct Report {
    name: String,
    digest: String,
    fetched: Vec<Fetched>,
    values_from: Vec<crate::api::ResolvedValues>,
    traces: Vec<pallet_formats::processors::ProcessorTrace>,
    planned: Vec<Planned>,
    prune: Vec<crate::api::ObjectReference>,
    live_exists: bool,
    rbac: RbacSummary,
}

/// Runs `pallet plan`.
pub fn run(args: PlanArgs) -> anyhow::Result<()> {
    let text = super::render::read_manifest(&args.file)?;
    let (mut doc, bd) = preview::parse_bundle_deployment(&text, &args.file.display().to_string())?;
    let report = super::block_on(async {
        let config = args.kube.config().await?;
        let client = Client::try_from(config.clone())?;
        let what = args.file.display().to_string();
        let acting =
            super::acting::acting_for(&config, &client, &bd, &what, &args.namespace).await?;
        let super::diff::LiveRender {
            fetched,
            rendered,
            traces,
            values_from,
        } = super::diff::render_live(&client, &acting, &bd, &args.fetch).await?;
        let objects = rendered.object_list();
        // Dry-run as the BundleDeployment's ServiceAccount, as the agent writes.
        let name = bd.metadata.name.clone().unwrap_or_default();
        let target = preview::Target {
            client: &acting.client,
            owner: &name,
            install_namespace: bd.spec.install_namespace.as_deref(),
            collision_protection: bd.spec.collision_protection(),
            takeover: bd.spec.takeover.as_ref(),
        };
        let planned = preview::plan_objects(&target, &objects).await?;
        let live = Api::<BundleDeployment>::all(client.clone())
            .get_opt(&name)
            .await?;
        let inventory = live
            .as_ref()
            .and_then(|l| l.status.as_ref())
            .and_then(|s| s.inventory.as_ref())
            .map(|i| i.objects.clone())
            .unwrap_or_default();
        Ok(Report {
            prune: preview::prune_candidates(&inventory, &planned),
            live_exists: live.is_some(),
            rbac: preview::rbac_summary(&objects),
            digest: rendered.digest(),
            name,
            fetched,
            values_from,
            traces,
            planned,
        })
    })?;

    let text = match args.output {
        Output::Table => super::terminal::escape(&format_table(&report)).into_owned(),
        output => {
            let value = report_json(&report);
            match output {
                Output::Json => format!("{}\n", serde_json::to_string_pretty(&value)?),
                _ => super::to_yaml(&value)?,
            }
        }
    };
    if args.pin {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
    let refused = report
        .planned
        .iter()
        .filter(|p| matches!(p.change, Change::Refused(_) | Change::Conflict(_)))
        .count();
    if refused > 0 {
        bail!("{refused} object(s) would be refused or are owned by someone else; see the plan");
    }
    if args.pin {
        preview::pin(&mut doc, &report.fetched)?;
        print!("{}", super::to_yaml(&doc)?);
    }
    Ok(())
}

fn action(change: &Change) -> (&'static str, String) {
    match change {
        Change::Create => ("create", String::new()),
        Change::CreateUnchecked(why) => ("create", format!("{why}; not checked by the server")),
        Change::Update(paths) => ("update", paths.join(", ")),
        Change::Unchanged => ("unchanged", String::new()),
        Change::Conflict(why) => ("conflict", why.clone()),
        Change::Refused(why) => ("refused", why.clone()),
    }
}

fn format_table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "BundleDeployment {}", report.name);
    let _ = writeln!(out, "Sources:");
    for source in &report.fetched {
        let line =
            super::ops::resolved_line(&source.label(), &source.resolved, source.version.as_deref());
        let _ = writeln!(out, "  {line}");
        if let Some(signer) = &source.verified {
            let _ = writeln!(out, "    verified: {}", signer.summary());
        }
    }
    if !report.values_from.is_empty() {
        let _ = writeln!(out, "Values from:");
        for v in &report.values_from {
            let _ = writeln!(out, "  {:?} {} -> {}", v.kind, v.name, v.digest);
        }
    }
    if !report.traces.is_empty() {
        let _ = writeln!(out, "Processors:");
        for line in super::render::trace_lines(&report.traces) {
            let _ = writeln!(out, "  {line}");
        }
    }
    let _ = writeln!(
        out,
        "Rendered: {} objects, digest {}",
        report.planned.len(),
        report.digest
    );
    let _ = writeln!(out, "Objects:");
    let (mut create, mut update, mut unchanged) = (0, 0, 0);
    for planned in &report.planned {
        let (verb, detail) = action(&planned.change);
        match verb {
            "create" => create += 1,
            "update" => update += 1,
            "unchanged" => unchanged += 1,
            _ => {}
        }
        let mut line = format!("  {verb:<10} {}", planned.key);
        if !detail.is_empty() {
            let _ = write!(line, " ({detail})");
        }
        if let Some(from) = &planned.adopts_from {
            let _ = write!(line, " [takes over from {from}]");
        }
        let _ = writeln!(out, "{line}");
    }
    if report.live_exists {
        let _ = writeln!(out, "Prune (in the live inventory, no longer rendered):");
        if report.prune.is_empty() {
            let _ = writeln!(out, "  nothing");
        }
        for r in &report.prune {
            let _ = writeln!(out, "  delete     {}", reference_text(r));
        }
    } else {
        let _ = writeln!(
            out,
            "Prune: nothing (BundleDeployment {} does not exist yet)",
            report.name
        );
    }
    let _ = writeln!(out, "RBAC granted:");
    if report.rbac.roles.is_empty() && report.rbac.bindings.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for role in &report.rbac.roles {
        let aggregated = if role.aggregated { " (aggregated)" } else { "" };
        let _ = writeln!(out, "  {}{aggregated}", role.key);
        for rule in &role.rules {
            let _ = write!(out, "    {}", rule.text);
            if !rule.flags.is_empty() {
                let _ = write!(out, "  ! {}", rule.flags.join("; "));
            }
            let _ = writeln!(out);
        }
    }
    for binding in &report.rbac.bindings {
        let _ = writeln!(
            out,
            "  {} grants {} to {}",
            binding.key,
            binding.role,
            if binding.subjects.is_empty() {
                "nobody".to_string()
            } else {
                binding.subjects.join(", ")
            }
        );
    }
    let warnings = report.rbac.flags();
    let _ = writeln!(
        out,
        "Summary: {create} to create, {update} to update, {unchanged} unchanged, {} to prune; {} RBAC warning(s){}",
        report.prune.len(),
        warnings.len(),
        if warnings.is_empty() { String::new() } else { format!(": {}", warnings.join("; ")) }
    );
    out
}

/// An inventory entry as `Kind.group ns/name`.
pub(crate) fn reference_text(r: &crate::api::ObjectReference) -> String {
    let kind = if r.group.is_empty() {
        r.kind.clone()
    } else {
        format!("{}.{}", r.kind, r.group)
    };
    if r.namespace.is_empty() {
        format!("{kind} {}", r.name)
    } else {
        format!("{kind} {}/{}", r.namespace, r.name)
    }
}

fn report_json(report: &Report) -> Value {
    let objects: Vec<Value> = report
        .planned
        .iter()
        .map(|p| {
            let (verb, detail) = action(&p.change);
            let mut v = json!({
                "apiVersion": p.api_version, "kind": p.key.kind, "name": p.key.name,
                "action": verb,
            });
            if let Some(ns) = &p.key.namespace {
                v["namespace"] = json!(ns);
            }
            match &p.change {
                Change::Update(paths) => v["fields"] = json!(paths),
                Change::Create | Change::Unchanged => {}
                _ => v["reason"] = json!(detail),
            }
            if let Some(from) = &p.adopts_from {
                v["adoptsFrom"] = json!(from);
            }
            v
        })
        .collect();
    let roles: Vec<Value> = report
        .rbac
        .roles
        .iter()
        .map(|r| {
            json!({
                "kind": r.key.kind, "namespace": r.key.namespace, "name": r.key.name,
                "aggregated": r.aggregated,
                "rules": r.rules.iter().map(|rule| json!({"rule": rule.text, "flags": rule.flags})).collect::<Vec<_>>(),
            })
        })
        .collect();
    let bindings: Vec<Value> = report
        .rbac
        .bindings
        .iter()
        .map(|b| {
            json!({"kind": b.key.kind, "namespace": b.key.namespace, "name": b.key.name,
                   "roleRef": b.role, "subjects": b.subjects})
        })
        .collect();
    json!({
        "bundleDeployment": report.name,
        "digest": report.digest,
        "sources": report.fetched.iter().map(|f| json!({"source": f.label(), "resolved": f.resolved, "version": f.version})).collect::<Vec<_>>(),
        "processors": report.traces,
        "objects": objects,
        "prune": report.prune.iter().map(reference_text).collect::<Vec<_>>(),
        "rbac": {"roles": roles, "bindings": bindings, "warnings": report.rbac.flags()},
    })
}
