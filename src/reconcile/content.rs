//! Phases 1 and 2 (fetch and render, or reuse the last render), and drift observed while paused.

use super::view::View;
use super::{
    fetch, hook_plan, lookups, processors, reference, render, render_key, render_memo, render_time,
    rollout, values, webhook_certs, Context, ReconcileError,
};

use pallet_formats::processors::ProcessorTrace;

use crate::api::{BundleDeployment, ObjectReference, ResolvedSource, ResolvedValues};
use crate::fault::{self, Point};
use crate::metrics::METRICS;
use crate::render_sandbox::SandboxError;
use rollout::Decision;

/// While paused: fetch and render as usual, then only read the live objects and list those that
/// differ from the bundle. No write of any kind to the bundle's objects.
pub(super) async fn observe_drift(
    view: &View<'_>,
    ctx: &Context,
    force_poll: bool,
) -> Result<Vec<ObjectReference>, ReconcileError> {
    let bd = view.bd;
    let RenderedBundle {
        rendered,
        digest,
        values_from,
        ..
    } = fetch_and_render(view, ctx, force_poll).await?;
    // Drift is measured against the caBundle the agent keeps (read-only while paused).
    let (rendered, digest) =
        webhook_certs::with_kept_bundle(view.workload, bd, rendered, digest).await?;
    let status = bd.status.clone().unwrap_or_default();
    let spec_digest = values::spec_digest(&bd.spec.digest(), &values_from);
    let spec = rollout::SpecVersion {
        generation: view.generation,
        digest: &spec_digest,
    };
    // What resuming would apply: the rendered set, unless it is refused content after a
    // rollback, in which case the active revision's snapshot stays.
    let objects = match rollout::decide(&status, view.active.as_ref(), &digest, &spec, false) {
        Decision::Refused { failed } => match view.active_number() {
            Some(active) if active != failed => ctx.revisions.load(&view.name, active).await?,
            _ => rendered.object_list(),
        },
        _ => rendered.object_list(),
    };
    // Hooks are not kept in line with the bundle: helm leaves them alone once they ran.
    let objects = hook_plan::split(&objects, view.helm).release;
    // Reads go through the agent's own client: observing is not acting on the user's behalf.
    let drifted = ctx
        .applier(bd, view.workload, view.workload.client.clone())
        .drift(&objects)
        .await?;
    Ok(drifted
        .into_iter()
        .map(|d| ObjectReference {
            message: Some(d.message),
            ..reference(&d.key, &d.api_version)
        })
        .collect())
}

/// Phases 1 and 2: read the `valuesFrom` objects, fetch the sources, render them (or reuse the
/// last render when nothing it depends on changed). Returns the rendered set, every source
/// resolved and every `valuesFrom` reference as read.
///
/// Floating sources are re-resolved only when their poll is due, or with `force_poll` (a
/// reconcile request: the user asked to look now).
pub(super) async fn fetch_and_render(
    view: &View<'_>,
    ctx: &Context,
    force_poll: bool,
) -> Result<RenderedBundle, ReconcileError> {
    let _phase = METRICS.phase("fetch_render");
    let bd = view.bd;
    let cluster = &ctx.cluster;
    let (mut observed, values) =
        values::read_values(&cluster.client, &cluster.secret_policy, bd).await;
    let processor_inputs = match &values {
        Ok(_) => {
            let (seen, inputs) =
                processors::read(&cluster.client, &cluster.secret_policy, bd).await;
            observed.extend(seen);
            Some(inputs)
        }
        Err(_) => None,
    };
    if let Some(watches) = &ctx.watchers.values_watches {
        // Before the result is known: a missing required object is watched for its creation.
        watches.set(&view.name, observed);
    }
    let values = values?;
    let processor_inputs = processor_inputs.transpose()?.unwrap_or_default();
    // Only helm charts look at the cluster (`.Capabilities`); other formats never pay for it.
    let capabilities = match bd.spec.format {
        crate::api::BundleFormat::Helm => Some(view.workload.helm_capabilities().await?),
        _ => None,
    };
    let fetched = fetch::fetch_sources(ctx, bd, force_poll).await?;
    fault::reached(Point::Fetch);
    let sources: Vec<ResolvedSource> = fetched.iter().map(|f| f.resolved_source()).collect();
    let resolved = [values.resolved.as_slice(), &processor_inputs.resolved].concat();
    let spec_digest = values::spec_digest(&bd.spec.digest(), &resolved);
    let rendered_at = ctx
        .rendering
        .render_times
        .clock_for(bd, &spec_digest, &sources);
    let mut config = render::render_config(bd, capabilities, Some(values.values));
    config.budgets = ctx.rendering.render_budgets;
    let format = render::format(bd.spec.format);
    // Only helm charts generate values (randAlphaNum, genCA, ...), a kustomization's
    // `helmCharts` included: the other formats need no key.
    if matches!(
        format,
        pallet_formats::Format::Helm | pallet_formats::Format::Kustomize
    ) {
        let key = ctx.render_key(bd).await?;
        config.helm.seed = render_key::seed(&key, &config, &fetched);
    }
    config.helm.now = rendered_at; // after the seed, which reads the creation time
    let inputs = RenderInputs {
        format,
        config,
        processors: processor_inputs.processors,
        fetched,
    };
    let mut values_from = values.resolved;
    values_from.extend(processor_inputs.resolved);
    match render_or_reuse(view, ctx, inputs).await? {
        render_memo::KeptRender::Objects {
            rendered,
            digest,
            traces,
        } => Ok(RenderedBundle {
            rendered,
            digest,
            sources,
            values_from,
            traces,
            rendered_at: render_time::as_time(rendered_at),
        }),
        render_memo::KeptRender::Refused { category, message } => {
            Err(ReconcileError::RenderRefused { category, message })
        }
    }
}

/// What a render takes: the format, its configuration, the processors and the fetched sources.
struct RenderInputs {
    format: pallet_formats::Format,
    config: pallet_formats::RenderConfig,
    processors: Vec<pallet_formats::processors::NamedProcessor>,
    fetched: Vec<crate::source::Fetched>,
}

/// The render of `inputs`: the last one when nothing it depends on changed (see
/// `render_memo`), else a new one, contained (see [`render_contained`]). A chart's lookups are
/// answered from the cluster: those its last render made are read before this one, and the
/// answers are part of the inputs (see `lookups`); a render that needs more is run again with
/// them, at most [`lookups::MAX_ROUNDS`] times.
async fn render_or_reuse(
    view: &View<'_>,
    ctx: &Context,
    mut inputs: RenderInputs,
) -> Result<render_memo::KeptRender, ReconcileError> {
    let (bd, uid) = (view.bd, view.uid.as_str());
    let rendering = &ctx.rendering;
    let allow_empty = bd.spec.rollout().allow_empty();
    let reader = match inputs.format {
        pallet_formats::Format::Helm => Some(lookups::Reader::of(ctx, view.workload, bd)),
        _ => None,
    };
    if let Some(reader) = &reader {
        let answers = reader.read(&rendering.lookups.get(uid)).await?;
        inputs.config.helm.lookups = pallet_formats::Lookups::Answers(answers);
    }
    let mut rounds = 0;
    loop {
        let digest = render_memo::inputs_digest(
            inputs.format,
            &inputs.config,
            &inputs.processors,
            allow_empty,
            &inputs.fetched,
        );
        if let Some(kept) = rendering.renders.get(uid, &digest) {
            return Ok(kept);
        }
        still_calling(ctx, uid, &digest)?;
        let tree = fetch::assemble_tree(&ctx.sources.fetcher, &inputs.fetched)?;
        let job = (inputs.format, digest.as_str());
        let result =
            render_contained(ctx, bd, job, &tree, &inputs.config, &inputs.processors).await;
        fetch::remove_tree(&tree);
        METRICS.rendered();
        let result = match (result, &reader) {
            (Ok(Contained::Lookups(keys)), Some(reader)) if rounds < lookups::MAX_ROUNDS => {
                rounds += 1;
                let known = (&inputs.config.helm.lookups, &rendering.lookups, uid);
                let more = reader.read_remembered(&keys, known).await?;
                if let pallet_formats::Lookups::Answers(answers) = &mut inputs.config.helm.lookups {
                    lookups::extend(answers, more)?;
                }
                continue;
            }
            (Ok(Contained::Lookups(keys)), _) => Err(SandboxError::Refused {
                category: lookups::LOOKUP_FAILED,
                message: format!(
                    "the chart still looks up {} objects after {} renders (each lookup depending on the last)",
                    keys.len(),
                    lookups::MAX_ROUNDS
                ),
            }),
            (Ok(Contained::Rendered(rendered, traces)), _) => Ok((rendered, traces)),
            (Err(error), _) => Err(error),
        };
        rendering
            .lookups
            .set(uid, lookups::keys(&inputs.config.helm.lookups));
        let kept = match result {
            Ok((rendered, traces)) => render_memo::KeptRender::Objects {
                digest: rendered.digest(),
                rendered: std::sync::Arc::new(rendered),
                traces: std::sync::Arc::new(traces),
            },
            // A local read failure, a sandbox that could not start, or a function out of reach
            // may pass: not kept.
            Err(SandboxError::Failed(message)) => {
                return Err(pallet_formats::RenderError::Io {
                    path: tree.display().to_string(),
                    source: std::io::Error::other(message),
                }
                .into())
            }
            Err(SandboxError::Refused { category, message })
                if matches!(category, FUNCTION_UNAVAILABLE | CALLING_FUNCTION_CATEGORY) =>
            {
                return Err(ReconcileError::RenderUnavailable { category, message })
            }
            Err(SandboxError::Refused { category, message }) => {
                render_memo::KeptRender::Refused { category, message }
            }
        };
        rendering.renders.put(uid, digest, kept.clone());
        return Ok(kept);
    }
}

/// The category of a function processor that could not be called (transient).
const FUNCTION_UNAVAILABLE: &str = "FunctionUnavailable";
/// The category of a render waiting for a function's answer (transient: its end starts a pass).
const CALLING_FUNCTION_CATEGORY: &str = "CallingFunction";

/// Renders the tree and runs the processors off the async runtime's threads: in the sandbox's
/// child process when the agent has one, else on a blocking thread of this process. A function
/// processor is called here, on the runtime, between two steps.
async fn render_contained(
    ctx: &Context,
    bd: &BundleDeployment,
    (format, render): (pallet_formats::Format, &str),
    tree: &std::path::Path,
    config: &pallet_formats::RenderConfig,
    processors: &[pallet_formats::processors::NamedProcessor],
) -> Result<Contained, SandboxError> {
    let allow_empty = bd.spec.rollout().allow_empty();
    let mut resume = None;
    loop {
        let step = match &ctx.rendering.render_sandbox {
            Some(sandbox) => {
                sandbox
                    .render_step(tree, format, config, allow_empty, processors, resume)
                    .await?
            }
            None => {
                let (tree, config) = (tree.to_path_buf(), config.clone());
                let processors = processors.to_vec();
                tokio::task::spawn_blocking(move || {
                    render::render_step(format, &tree, &config, allow_empty, &processors, resume)
                })
                .await
                .map_err(|e| SandboxError::Failed(format!("the render thread ended: {e}")))?
                .map_err(|error| match error {
                    pallet_formats::RenderError::Io { .. } => {
                        SandboxError::Failed(error.to_string())
                    }
                    error => SandboxError::Refused {
                        category: error.category(),
                        message: error.to_string(),
                    },
                })?
            }
        };
        match step {
            render::RenderStep::Done { rendered, traces } => {
                ctx.rendering
                    .function_calls
                    .render_ended(bd.metadata.uid.as_deref().unwrap_or_default());
                return Ok(Contained::Rendered(rendered, traces));
            }
            render::RenderStep::Lookups { keys } => return Ok(Contained::Lookups(keys)),
            render::RenderStep::Function {
                index,
                request,
                progress,
            } => {
                let name = &processors[index].name;
                let answer = match self::processors::function_spec(&bd.spec.processors, name) {
                    Some(spec) => match call_apart(ctx, bd, render, name, spec, request).await {
                        super::function_calls::Called::Answered(answer) => answer,
                        super::function_calls::Called::Pending(since) => {
                            return Err(SandboxError::Refused {
                                category: CALLING_FUNCTION_CATEGORY,
                                message: calling(name, since),
                            })
                        }
                    },
                    None => Err("the function's spec is gone".to_string()),
                };
                resume = Some(render::Resume { progress, answer });
            }
        }
    }
}

/// A function still answering the render of `inputs`: rendering again would only reach it.
fn still_calling(ctx: &Context, uid: &str, inputs: &str) -> Result<(), ReconcileError> {
    match ctx.rendering.function_calls.pending(uid, inputs) {
        Some((function, since)) => Err(ReconcileError::RenderUnavailable {
            category: CALLING_FUNCTION_CATEGORY,
            message: calling(&function, since),
        }),
        None => Ok(()),
    }
}

/// The message while function processor `name` has not answered for `since`.
fn calling(name: &str, since: std::time::Duration) -> String {
    format!(
        "calling function processor {name} for {} s (the call goes on apart from the reconcile workers; its answer starts the next pass)",
        since.as_secs()
    )
}

/// Calls `bd`'s function processor `name` apart from this pass's worker (see
/// [`super::function_calls`]).
async fn call_apart(
    ctx: &Context,
    bd: &BundleDeployment,
    render: &str,
    name: &str,
    spec: &crate::api::FunctionProcessor,
    request: serde_json::Value,
) -> super::function_calls::Called {
    let digest = pallet_formats::canonical::digest_bytes(
        format!(
            "{}\n{}",
            serde_json::to_string(spec).unwrap_or_default(),
            request
        )
        .as_bytes(),
    );
    let timeout = ctx.rendering.functions.timeout(spec);
    // What the call needs, owned: it may outlive this pass.
    let client = ctx.cluster.client.clone();
    let secret_policy = ctx.cluster.secret_policy.clone();
    let exec_policy = ctx.rendering.functions.clone();
    let egress = ctx.sources.fetcher.options().egress;
    let (owned_bd, spec_owned) = (bd.clone(), spec.clone());
    let work = async move {
        let caller = super::functions::FunctionCaller {
            client: Some(&client),
            secret_policy: &secret_policy,
            exec_policy: &exec_policy,
            egress,
        };
        super::functions::call(&caller, &owned_bd, &spec_owned, &request).await
    };
    ctx.rendering
        .function_calls
        .call(bd, render, name, digest, timeout, work)
        .await
}

/// What a contained render came to: objects, or the lookups it needs answered first.
enum Contained {
    Rendered(pallet_formats::Rendered, Vec<ProcessorTrace>),
    Lookups(Vec<pallet_formats::LookupKey>),
}

/// What phases 1 and 2 produce: the rendered set, its digest, the resolved sources and the
/// `valuesFrom` references as read.
pub(super) struct RenderedBundle {
    pub(super) rendered: std::sync::Arc<pallet_formats::Rendered>,
    pub(super) digest: String,
    pub(super) sources: Vec<ResolvedSource>,
    pub(super) values_from: Vec<ResolvedValues>,
    /// What each processor did.
    pub(super) traces: std::sync::Arc<Vec<pallet_formats::processors::ProcessorTrace>>,
    /// The clock it was rendered with (see [`render_time`]).
    pub(super) rendered_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}
