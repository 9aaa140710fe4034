//! `pallet diff NAME` (or `-f BD.yaml`): what the agent would change on the cluster, as a
//! unified diff of each object (live, then the server's dry-run of the bundle's version) and
//! the objects it would prune. Secret values are masked. Exit status 0: no difference; 5:
//! differences; 1: an object would be refused.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use kube::api::Api;
use kube::Client;
use pallet_formats::Object;
use serde_json::Value;

use super::acting::{acting_for, Acting};
use super::progress::Progress;
use super::{FetchFlags, KubeArgs};
use crate::api::BundleDeployment;
use crate::preview::{self, Change};

/// Flags of `pallet diff`.
#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["name", "file"])))]
pub struct DiffArgs {
    /// The BundleDeployment on the cluster whose bundle is compared.
    #[arg(add = clap_complete::engine::ArgValueCompleter::new(super::completion::bundle_deployment_names))]
    pub name: Option<String>,
    /// A BundleDeployment manifest instead (`-` for stdin): what applying it would change.
    #[arg(short = 'f', long = "filename", conflicts_with = "name")]
    pub file: Option<PathBuf>,
    /// The agent's namespace: where Secrets named without a namespace are read; `--namespace`
    /// is an older spelling
    #[arg(
        long = "agent-namespace",
        alias = "namespace",
        value_name = "NS",
        default_value = "pallet-system"
    )]
    pub namespace: String,
    /// Lines of context around each change.
    #[arg(long, default_value_t = 3)]
    pub context_lines: usize,
    /// Cluster.
    #[command(flatten)]
    pub kube: KubeArgs,
    /// Fetch settings.
    #[command(flatten)]
    pub fetch: FetchFlags,
}

/// What the sources of a BundleDeployment render now, read against the cluster as the agent
/// reads it (values, processors' variables and `lookup`, as the identity it acts as).
pub(super) struct LiveRender {
    /// Every source, fetched and resolved.
    pub fetched: Vec<crate::source::Fetched>,
    /// The rendered objects, the BuiltIn provider's webhook CA injected.
    pub rendered: pallet_formats::Rendered,
    /// What each processor did.
    pub traces: Vec<pallet_formats::processors::ProcessorTrace>,
    /// What each values reference contributed.
    pub values_from: Vec<crate::api::ResolvedValues>,
}

/// Fetches and renders `bd`'s sources as the agent would (values, processors, `lookup`, the
/// BuiltIn webhook CA), for `plan`, `diff` and `resume --dry-run`: everything `bd` names is read
/// as `acting` (see [`super::acting`]); `client`, the caller's, only reads the cluster's version
/// and APIs.
pub(super) async fn render_live(
    client: &Client,
    acting: &Acting,
    bd: &BundleDeployment,
    fetch: &FetchFlags,
) -> anyhow::Result<LiveRender> {
    let fetcher = fetch.fetcher()?;
    let (reader, policy) = (&acting.client, &acting.policy);
    let progress = Progress::stderr();
    let fetched =
        preview::fetch_sources(Some((reader, policy)), &fetcher, bd, &|e| progress.event(e))
            .await?;
    drop(progress);
    let capabilities = match bd.spec.format {
        crate::api::BundleFormat::Helm => {
            // Rendered without the agent's render key: generated values differ from its own.
            eprintln!("{}", super::render::GENERATED_VALUES_NOTICE);
            Some(preview::helm_capabilities(client).await?)
        }
        _ => None,
    };
    let values = preview::read_values(reader, policy, bd).await?;
    let processors = preview::read_processors(reader, policy, bd).await?;
    let exec_policy = fetch.function_policy();
    let caller = crate::reconcile::functions::FunctionCaller {
        client: Some(reader),
        secret_policy: policy,
        exec_policy: &exec_policy,
        egress: fetcher.options().egress,
    };
    // `lookup` is answered from the cluster, as the identity the agent would read it as.
    let lookups = crate::reconcile::lookups::Reader::new(
        reader,
        reader,
        policy,
        bd,
        crate::reconcile::lookups::LookupLimits::DEFAULT,
    );
    // `now` as the agent reads it: the time the revision of these inputs recorded, in the
    // status given or else the one the cluster holds (a manifest carries none).
    let live_status = match &bd.status {
        Some(_) => None,
        None => Api::<BundleDeployment>::all(client.clone())
            .get_opt(bd.metadata.name.as_deref().unwrap_or_default())
            .await?
            .and_then(|live| live.status),
    };
    let now = {
        use crate::reconcile::{render_time, values::spec_digest};
        let resolved: Vec<crate::api::ResolvedSource> =
            fetched.iter().map(|f| f.resolved_source()).collect();
        let spec = spec_digest(
            &bd.spec.digest(),
            &[values.resolved.as_slice(), processors.resolved.as_slice()].concat(),
        );
        let status = bd.status.as_ref().or(live_status.as_ref());
        render_time::recorded(status, &spec, &resolved, render_time::created(bd))
            .unwrap_or_else(render_time::current)
    };
    let (mut rendered, traces) = preview::assemble_and_render(
        &fetcher,
        bd,
        &fetched,
        capabilities,
        Some(values.values),
        &processors,
        &caller,
        Some(&lookups),
        now,
    )
    .await?;
    let name = bd.metadata.name.clone().unwrap_or_default();
    // The BuiltIn provider's caBundle, as the agent injects it (read-only).
    crate::reconcile::webhook_certs::inject_existing(reader, &name, &mut rendered).await?;
    Ok(LiveRender {
        fetched,
        rendered,
        traces,
        values_from: values.resolved,
    })
}

/// The objects the agent keeps in line with `bd`'s bundle as its sources render now (helm
/// hooks left out), read as `acting`.
pub(super) async fn render_bundle(
    client: &Client,
    acting: &Acting,
    bd: &BundleDeployment,
    fetch: &FetchFlags,
) -> anyhow::Result<Vec<Object>> {
    let live = render_live(client, acting, bd, fetch).await?;
    let helm = bd.spec.format == crate::api::BundleFormat::Helm;
    Ok(crate::reconcile::hook_plan::split(&live.rendered.object_list(), helm).release)
}

/// `object` with a Secret's values masked: `***` where both sides agree, `*** (before)` and
/// `*** (after)` where they differ, so a diff shows which keys change but never a value.
fn masked(object: &Value, other: Option<&Value>, side: &str) -> Value {
    let mut object = object.clone();
    let is_secret = object["kind"] == "Secret" && object["apiVersion"] == "v1";
    if !is_secret {
        return object;
    }
    for field in ["data", "stringData"] {
        let Some(map) = object.get_mut(field).and_then(Value::as_object_mut) else {
            continue;
        };
        for (key, value) in map.iter_mut() {
            let same = other.and_then(|o| o[field].get(key)) == Some(&*value);
            *value = Value::String(if same {
                "***".to_string()
            } else {
                format!("*** ({side})")
            });
        }
    }
    object
}

fn yaml_of(value: Option<&Value>) -> anyhow::Result<String> {
    match value {
        Some(value) => super::to_yaml(value),
        None => Ok(String::new()),
    }
}

/// The unified diff of one object, `live` to `bundle`; empty when they are equal.
pub fn object_diff(
    label: &str,
    live: Option<&Value>,
    bundle: Option<&Value>,
    context_lines: usize,
) -> anyhow::Result<String> {
    sides_diff(("live", live), ("bundle", bundle), label, context_lines)
}

/// The unified diff of one object between two named sides (`live`/`bundle`, `revision 3`/
/// `revision 4`), Secret values masked; empty when they are equal.
pub fn sides_diff(
    (before_side, before): (&str, Option<&Value>),
    (after_side, after): (&str, Option<&Value>),
    label: &str,
    context_lines: usize,
) -> anyhow::Result<String> {
    let before_text = yaml_of(before.map(|l| masked(l, after, "before")).as_ref())?;
    let after_text = yaml_of(after.map(|b| masked(b, before, "after")).as_ref())?;
    if before_text == after_text {
        return Ok(String::new());
    }
    let diff = similar::TextDiff::from_lines(&before_text, &after_text);
    let mut unified = diff.unified_diff();
    unified.context_radius(context_lines).header(
        &format!("{before_side}/{label}"),
        &format!("{after_side}/{label}"),
    );
    Ok(unified.to_string())
}

/// `Kind/namespace/name` or `Kind/name`: the path-like label of an object in a diff header.
pub(crate) fn label(kind: &str, namespace: Option<&str>, name: &str) -> String {
    match namespace.filter(|ns| !ns.is_empty()) {
        Some(ns) => format!("{kind}/{ns}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

/// Runs `pallet diff`.
pub fn run(args: DiffArgs) -> anyhow::Result<()> {
    super::block_on(async {
        let config = args.kube.config().await?;
        let client = Client::try_from(config.clone())?;
        let (bd, name) = match (&args.name, &args.file) {
            (Some(name), _) => (super::ops::get_bd(&client, name).await?, name.clone()),
            (None, Some(file)) => {
                let text = super::render::read_manifest(file)?;
                let (_, bd) = preview::parse_bundle_deployment(&text, &file.display().to_string())?;
                let name = bd.metadata.name.clone().unwrap_or_default();
                (bd, name)
            }
            (None, None) => return Err(super::exit::usage("give a NAME or -f FILE")),
        };
        let what = match &args.file {
            Some(file) => file.display().to_string(),
            None => format!("BundleDeployment {name}"),
        };
        let acting = acting_for(&config, &client, &bd, &what, &args.namespace).await?;
        let objects = render_bundle(&client, &acting, &bd, &args.fetch).await?;
        // Dry-run as the BundleDeployment's ServiceAccount, as the agent writes.
        let target = preview::Target {
            client: &acting.client,
            owner: &name,
            install_namespace: bd.spec.install_namespace.as_deref(),
            collision_protection: bd.spec.collision_protection(),
            takeover: bd.spec.takeover.as_ref(),
        };
        let planned = preview::plan_objects(&target, &objects)
            .await
            .context("comparing with the cluster")?;
        let inventory = match kube::Api::<BundleDeployment>::all(client.clone())
            .get_opt(&name)
            .await?
        {
            Some(live) => live
                .status
                .and_then(|s| s.inventory)
                .map(|i| i.objects)
                .unwrap_or_default(),
            None => Vec::new(),
        };
        let prune = preview::prune_candidates(&inventory, &planned);
        let mut out = String::new();
        let mut refused = Vec::new();
        let mut differences = 0;
        for p in &planned {
            let object_label = label(&p.key.kind, p.key.namespace.as_deref(), &p.key.name);
            match &p.change {
                Change::Create | Change::Update(_) => {
                    let text = object_diff(
                        &object_label,
                        p.live.as_ref(),
                        p.dry_run.as_ref(),
                        args.context_lines,
                    )?;
                    if !text.is_empty() {
                        differences += 1;
                        out.push_str(&text);
                    }
                }
                Change::CreateUnchecked(why) => {
                    differences += 1;
                    out.push_str(&format!(
                        "+++ bundle/{object_label} (new; not checked by the server: {why})\n"
                    ));
                }
                Change::Unchanged => {}
                Change::Conflict(why) | Change::Refused(why) => {
                    refused.push(format!("{object_label}: {why}"));
                }
            }
        }
        for r in &prune {
            differences += 1;
            let object_label = label(&r.kind, Some(&r.namespace), &r.name);
            out.push_str(&format!(
                "--- live/{object_label} (would be pruned: no longer in the bundle)\n"
            ));
        }
        tprint!("{out}");
        if !refused.is_empty() {
            return Err(anyhow::anyhow!(
                "{} object(s) would not be applied: {}",
                refused.len(),
                refused.join("; ")
            ));
        }
        if differences > 0 {
            eprintln!("{differences} object(s) differ from the bundle");
            return Err(super::exit::ExitError::quiet(
                super::exit::Exit::DifferencesFound,
            ));
        }
        eprintln!("no differences: the cluster matches the bundle");
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_diff_shows_changed_lines_and_masks_secret_values() {
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"},
                          "data": {"x": "1", "y": "2"}});
        let bundle = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"},
                            "data": {"x": "1", "y": "3"}});
        let text = object_diff("ConfigMap/ns/a", Some(&live), Some(&bundle), 3).unwrap();
        assert!(
            text.starts_with("--- live/ConfigMap/ns/a\n+++ bundle/ConfigMap/ns/a\n"),
            "{text}"
        );
        assert!(
            text.contains("\n-  \"y\": \"2\"\n+  \"y\": \"3\"\n"),
            "{text}"
        );
        assert!(object_diff("x", Some(&live), Some(&live), 3)
            .unwrap()
            .is_empty());

        let secret = |v: &str| {
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                                      "data": {"same": "c2FtZQ==", "changed": v}})
        };
        let text = object_diff(
            "Secret/ns/s",
            Some(&secret("b2xk")),
            Some(&secret("bmV3")),
            3,
        )
        .unwrap();
        assert!(
            !text.contains("b2xk") && !text.contains("bmV3") && !text.contains("c2FtZQ=="),
            "{text}"
        );
        assert!(
            text.contains("*** (before)") && text.contains("*** (after)"),
            "{text}"
        );
        let created = object_diff("Secret/ns/s", None, Some(&secret("bmV3")), 3).unwrap();
        assert!(
            created.contains("+  changed: '*** (after)'") || created.contains("*** (after)"),
            "{created}"
        );
        assert!(!created.contains("bmV3"));
    }
}
