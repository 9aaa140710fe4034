//! Previewing a BundleDeployment outside the agent: fetch and render its sources, pin every
//! floating ref to what it resolved to, diff the rendered objects against the cluster with a
//! server-side dry-run, list what would be pruned, summarise the RBAC the bundle grants, and
//! report what resuming a paused BundleDeployment would revert.
//!
//! The pure parts ([`pin`], [`prune_candidates`], [`rbac_summary`], [`changed_paths`]) take plain
//! values; the I/O parts are thin and use the same fetcher, renderer and kind resolution as the
//! agent, so a preview shows what the agent would do.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::Client;
use pallet_formats::{Object, ObjectKey, Rendered};
use serde_json::Value;

use crate::api::{BundleDeployment, CollisionProtection, ObjectReference, Source, SourceKind};
use crate::apply::plan::{self, Ownership, OWNER_LABEL, REVISION_ANNOTATION};
use crate::apply::{KindResolver, FIELD_MANAGER};
use crate::reconcile::fetch::{source_secrets, SecretPolicy};
use crate::reconcile::functions::FunctionCaller;
use crate::reconcile::processors::ProcessorInputs;
use crate::source::{assemble, Fetched, Fetcher, SourceError, SourceSecrets};
use pallet_formats::processors::{ProcessorTrace, Substitution};

/// At most this many changed field paths are listed per object.
pub const PATHS_LIMIT: usize = 20;

/// Why a preview failed.
#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    /// The manifest is not a BundleDeployment.
    #[error("{origin}: {message}")]
    Manifest {
        /// Where it came from.
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// A source names a Secret and there is no cluster to read it from.
    #[error("source {index} ({label}) names Secret {secret}: reading it needs a cluster; this command runs without one (use `pallet plan --kubeconfig …`, which reads Secrets, or a source without credentials)")]
    SecretNeedsCluster {
        /// Index of the source in spec.sources.
        index: usize,
        /// Kind and ref as written.
        label: String,
        /// The Secret named.
        secret: String,
    },
    /// A source could not be fetched.
    #[error("source {index} ({label}): {error}")]
    Fetch {
        /// Index of the source in spec.sources.
        index: usize,
        /// Kind and ref as written.
        label: String,
        /// The error (shown in this error's message, not as a separate cause).
        error: Box<crate::reconcile::ReconcileError>,
    },
    /// `config.helm.valuesFrom` could not be read or merged.
    #[error("{0}")]
    Values(Box<crate::reconcile::ReconcileError>),
    /// Values given on the command line could not be used.
    #[error("{0}")]
    ValuesFlag(String),
    /// The fetched sources could not be assembled into one tree.
    #[error("assembling the bundle tree: {0}")]
    Assemble(#[from] SourceError),
    /// The bundle could not be rendered.
    #[error("render: {0}")]
    Render(#[from] pallet_formats::RenderError),
    /// A Kubernetes API call failed.
    #[error("{context}: {error}")]
    Kube {
        /// What was being done.
        context: String,
        /// The error.
        error: kube::Error,
    },
}

/// Parses a BundleDeployment manifest (YAML or JSON); returns the document as written (to edit
/// and print back without losing fields) and the typed object.
pub fn parse_bundle_deployment(
    text: &str,
    origin: &str,
) -> Result<(Value, BundleDeployment), PreviewError> {
    let manifest_error = |message: String| PreviewError::Manifest {
        origin: origin.to_string(),
        message,
    };
    let value: Value =
        serde_saphyr::from_str(text).map_err(|e| manifest_error(format!("not valid YAML: {e}")))?;
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("document without a kind");
    if kind != "BundleDeployment" {
        return Err(manifest_error(format!(
            "is a {kind}, not a BundleDeployment"
        )));
    }
    let bd: BundleDeployment = serde_json::from_value(value.clone())
        .map_err(|e| manifest_error(format!("not a valid BundleDeployment: {e}")))?;
    // Refused here as the agent would refuse it, before anything is fetched.
    if let Err(errors) = crate::health::cel::compile(&bd.spec.health_checks) {
        let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
        return Err(manifest_error(format!(
            "spec.healthChecks: {}",
            messages.join("; ")
        )));
    }
    Ok((value, bd))
}

/// The Secret a source names (credentials or CA), as `namespace/name` or `name`.
pub fn named_secret(source: &Source) -> Option<String> {
    let auth = match (&source.image, &source.git, &source.http) {
        (Some(image), _, _) => image
            .auth
            .as_ref()
            .map(|a| &a.secret)
            .or(image.ca_secret.as_ref()),
        (_, Some(git), _) => git.auth.as_ref().map(|a| &a.secret),
        (_, _, Some(http)) => http.auth.as_ref().map(|a| &a.secret),
        _ => None,
    };
    // The keys (and trusted root) a `verify` names are read from the cluster too.
    let verify = source.verify.as_ref().and_then(|v| {
        v.cosign
            .as_ref()
            .and_then(|c| c.public_keys.as_ref())
            .or(v.provenance.as_ref().map(|p| &p.keyring))
            .or(v.git.as_ref().map(|g| &g.keys))
    });
    let reference = match (auth, verify, &source.verify) {
        (Some(reference), _, _) | (None, Some(reference), _) => reference,
        (None, None, Some(_)) => return Some("the trusted root of verify.cosign.keyless".into()),
        (None, None, None) => return None,
    };
    Some(match &reference.namespace {
        Some(ns) => format!("{ns}/{}", reference.name),
        None => reference.name.clone(),
    })
}

/// How a source is named in messages before it is fetched: kind and ref as written.
pub fn source_label(source: &Source) -> String {
    if let Some(repo) = &source.helm_repository {
        return format!(
            "helmRepository {} {} {}",
            repo.url,
            repo.chart,
            repo.version.as_deref().unwrap_or("*")
        );
    }
    match (&source.image, &source.git, &source.http) {
        (Some(image), _, _) => format!("image {}", image.reference),
        (_, Some(git), _) => format!(
            "git {} {}",
            git.repository,
            crate::source::git::ref_as_written(&git.reference)
        ),
        (_, _, Some(http)) => format!("http {}", http.url),
        _ => format!("{:?} source without settings", source.kind),
    }
}

/// Progress of a fetch, for a display.
#[derive(Debug, Clone)]
pub enum FetchEvent {
    /// Source `index` of `total` (label as written) is being fetched.
    Started {
        /// Index in spec.sources.
        index: usize,
        /// Number of sources.
        total: usize,
        /// Kind and ref as written.
        label: String,
    },
    /// Source `index` resolved to `resolved`.
    Finished {
        /// Index in spec.sources.
        index: usize,
        /// The immutable ref.
        resolved: String,
    },
}

/// Fetches every source of `bd`, in spec order, reporting progress to `progress`. Secrets are
/// read through `cluster` when given; without one, a source naming a Secret is an error.
pub async fn fetch_sources(
    cluster: Option<(&Client, &SecretPolicy)>,
    fetcher: &Fetcher,
    bd: &BundleDeployment,
    progress: &(dyn Fn(FetchEvent) + Sync),
) -> Result<Vec<Fetched>, PreviewError> {
    let total = bd.spec.sources.len();
    let mut fetched = Vec::with_capacity(total);
    for (index, source) in bd.spec.sources.iter().enumerate() {
        let label = source_label(source);
        let secrets = match (cluster, named_secret(source)) {
            (_, None) => SourceSecrets::default(),
            (Some((client, policy)), Some(_)) => {
                let name = bd.metadata.name.as_deref().unwrap_or_default();
                source_secrets(client, policy, policy.requester(name, &bd.spec), source)
                    .await
                    .map_err(|e| PreviewError::Fetch {
                        index,
                        label: label.clone(),
                        error: Box::new(e),
                    })?
            }
            (None, Some(secret)) => {
                return Err(PreviewError::SecretNeedsCluster {
                    index,
                    label,
                    secret,
                })
            }
        };
        progress(FetchEvent::Started {
            index,
            total,
            label: label.clone(),
        });
        let one = fetcher
            .fetch(source, &secrets)
            .await
            .map_err(|e| PreviewError::Fetch {
                index,
                label,
                error: Box::new(e.into()),
            })?;
        progress(FetchEvent::Finished {
            index,
            resolved: one.resolved.clone(),
        });
        fetched.push(one);
    }
    Ok(fetched)
}

/// Assembles `fetched` into a fresh scratch tree of `fetcher`'s cache and renders it as `bd`
/// asks, with the user `values` (`valuesFrom` and `values` merged, see [`read_values`]; `None`:
/// the inline `values` alone), then runs its `processors` (see [`read_processors`] and
/// [`offline_processors`]); the tree is removed afterwards. Returns the objects and what each
/// processor did.
///
/// With `lookups` (a cluster to read), a helm chart's `lookup`s are answered from it, as the
/// agent answers them; without, they are empty, as in `helm template`. `now` is the clock a
/// chart's `now` reads (Unix seconds; see [`crate::reconcile::render_time`]).
#[allow(clippy::too_many_arguments)]
pub async fn assemble_and_render(
    fetcher: &Fetcher,
    bd: &BundleDeployment,
    fetched: &[Fetched],
    capabilities: Option<pallet_formats::HelmCapabilities>,
    values: Option<Value>,
    processors: &ProcessorInputs,
    caller: &FunctionCaller<'_>,
    lookups: Option<&crate::reconcile::lookups::Reader<'_>>,
    now: i64,
) -> Result<(Rendered, Vec<ProcessorTrace>), PreviewError> {
    let tree: PathBuf = fetcher.cache().scratch_dir()?;
    let inputs = RenderInputs {
        capabilities,
        values,
        processors,
        caller,
        lookups,
        now,
    };
    let result = render_tree(&tree, fetched, bd, inputs).await;
    crate::reconcile::fetch::remove_tree(&tree);
    result
}

/// What [`render_tree`] renders with besides the tree.
struct RenderInputs<'a> {
    capabilities: Option<pallet_formats::HelmCapabilities>,
    values: Option<Value>,
    processors: &'a ProcessorInputs,
    caller: &'a FunctionCaller<'a>,
    lookups: Option<&'a crate::reconcile::lookups::Reader<'a>>,
    now: i64,
}

async fn render_tree(
    tree: &Path,
    fetched: &[Fetched],
    bd: &BundleDeployment,
    inputs: RenderInputs<'_>,
) -> Result<(Rendered, Vec<ProcessorTrace>), PreviewError> {
    use crate::reconcile::{lookups, render};
    let RenderInputs {
        capabilities,
        values,
        processors,
        caller,
        lookups: reader,
        now,
    } = inputs;
    assemble(fetched, tree)?;
    let mut config = render::render_config(bd, capabilities, values);
    config.helm.now = now;
    if reader.is_some() {
        config.helm.lookups = pallet_formats::Lookups::Answers(Vec::new());
    }
    let mut rounds = 0;
    let rendered = loop {
        match (render::render_format(bd, tree, &config), reader) {
            (Err(pallet_formats::RenderError::LookupsNeeded { keys }), Some(reader))
                if rounds < lookups::MAX_ROUNDS =>
            {
                rounds += 1;
                let more = reader
                    .read(&keys)
                    .await
                    .map_err(|e| PreviewError::Values(Box::new(e)))?;
                if let pallet_formats::Lookups::Answers(answers) = &mut config.helm.lookups {
                    lookups::extend(answers, more)
                        .map_err(|e| PreviewError::Values(Box::new(e)))?;
                }
            }
            (result, _) => break result?,
        }
    };
    let (rendered, traces) =
        crate::reconcile::processors::run(caller, bd, rendered, &processors.processors, Some(tree))
            .await?;
    Ok((render::check(bd, rendered)?, traces))
}

/// Reads what `bd`'s processors need from the cluster (`substitute.varsFrom`), as the agent
/// does.
pub async fn read_processors(
    client: &Client,
    policy: &SecretPolicy,
    bd: &BundleDeployment,
) -> Result<ProcessorInputs, PreviewError> {
    crate::reconcile::processors::read(client, policy, bd)
        .await
        .1
        .map_err(|e| PreviewError::Values(Box::new(e)))
}

/// `bd`'s processors without a cluster: `vars` (from the command line) stand in for every
/// `substitute.varsFrom` object, under the processor's own `vars`.
pub fn offline_processors(
    bd: &BundleDeployment,
    vars: &std::collections::BTreeMap<String, String>,
) -> ProcessorInputs {
    let processors = crate::reconcile::processors::build(&bd.spec.processors, |_, substitute| {
        let mut merged = vars.clone();
        merged.extend(substitute.vars.clone());
        Substitution {
            vars: merged,
            strict: substitute.strict,
        }
    });
    ProcessorInputs {
        processors,
        resolved: Vec::new(),
    }
}

/// Reads and merges `bd`'s `valuesFrom` objects through `client`, under `policy`, as the agent
/// does: the user values to render with, and each reference as read.
pub async fn read_values(
    client: &Client,
    policy: &SecretPolicy,
    bd: &BundleDeployment,
) -> Result<crate::reconcile::values::UserValues, PreviewError> {
    crate::reconcile::values::read_values(client, policy, bd)
        .await
        .1
        .map_err(|e| PreviewError::Values(Box::new(e)))
}

/// Renders a local tree in `format` with `config` (no sources, no cluster).
pub fn render_dir(
    format: pallet_formats::Format,
    dir: &Path,
    config: &pallet_formats::RenderConfig,
) -> Result<Rendered, PreviewError> {
    Ok(pallet_formats::render(format, dir, config)?)
}

/// helm's `.Capabilities` for the cluster behind `client` (its version and served APIs), as the
/// agent computes them, so a preview renders a chart exactly as the agent will.
pub async fn helm_capabilities(
    client: &Client,
) -> Result<pallet_formats::HelmCapabilities, PreviewError> {
    crate::reconcile::workload::discover_capabilities(client)
        .await
        .map_err(|(context, error)| PreviewError::Kube {
            context: context.into(),
            error,
        })
}

/// Pins every source of the BundleDeployment document `doc` to what it resolved to (in spec
/// order, as [`fetch_sources`] returns them): image `ref` to its digest reference, git `ref` to
/// `{commit: …}`, http `sha256` to the content's digest, helmRepository `version` to the chart
/// version chosen (and, for `oci://`, `digest` to the chart's manifest digest). `pollInterval` is
/// removed (the API refuses it on pinned refs) and so is `status`.
pub fn pin(doc: &mut Value, fetched: &[Fetched]) -> Result<(), PreviewError> {
    let mismatch = |message: String| PreviewError::Manifest {
        origin: "pin".into(),
        message,
    };
    if let Some(object) = doc.as_object_mut() {
        object.remove("status");
    }
    let sources = doc
        .pointer_mut("/spec/sources")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| mismatch("the document has no spec.sources".into()))?;
    if sources.len() != fetched.len() {
        return Err(mismatch(format!(
            "{} sources but {} fetched",
            sources.len(),
            fetched.len()
        )));
    }
    for (source, fetched) in sources.iter_mut().zip(fetched) {
        let Some(source) = source.as_object_mut() else {
            continue;
        };
        source.remove("pollInterval");
        match fetched.kind {
            SourceKind::Image => {
                if let Some(image) = source.get_mut("image").and_then(Value::as_object_mut) {
                    image.insert("ref".into(), Value::String(fetched.resolved.clone()));
                    // The digest pins it; the API refuses a range next to a digest.
                    image.remove("semver");
                }
            }
            SourceKind::Git => {
                // A tag's signature is checked on the tag: with verify.git.mode Tag the ref
                // stays the tag; TagAndHEAD keeps checking the commit's own signature.
                let mode = source
                    .get("verify")
                    .and_then(|v| v.pointer("/git/mode"))
                    .and_then(Value::as_str)
                    .map(str::to_string);
                match mode.as_deref() {
                    Some("Tag") => continue,
                    Some("TagAndHEAD") => {
                        if let Some(git) = source
                            .get_mut("verify")
                            .and_then(|v| v.get_mut("git"))
                            .and_then(Value::as_object_mut)
                        {
                            git.insert("mode".into(), Value::String("HEAD".into()));
                        }
                    }
                    _ => {}
                }
                if let Some(git) = source.get_mut("git").and_then(Value::as_object_mut) {
                    git.insert(
                        "ref".into(),
                        serde_json::json!({"commit": fetched.resolved}),
                    );
                }
            }
            SourceKind::Http => {
                if let Some(http) = source.get_mut("http").and_then(Value::as_object_mut) {
                    let hex = fetched
                        .resolved
                        .strip_prefix("sha256:")
                        .unwrap_or(&fetched.resolved);
                    http.insert("sha256".into(), Value::String(hex.to_string()));
                }
            }
            SourceKind::HelmRepository => {
                if let Some(repo) = source
                    .get_mut("helmRepository")
                    .and_then(Value::as_object_mut)
                {
                    if let Some(version) = &fetched.version {
                        repo.insert("version".into(), Value::String(version.clone()));
                    }
                    // The chart archive's digest (https) or the manifest digest after `@` (oci).
                    let digest = fetched
                        .resolved
                        .rsplit_once('@')
                        .map_or(fetched.resolved.as_str(), |(_, d)| d);
                    repo.insert("digest".into(), Value::String(digest.to_string()));
                }
            }
        }
    }
    Ok(())
}

/// What applying one object would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// It does not exist and would be created.
    Create,
    /// It would be created, but the server could not check it yet (why: its kind or namespace
    /// comes with the bundle).
    CreateUnchecked(String),
    /// It exists and these field paths would change.
    Update(Vec<String>),
    /// It exists and nothing would change.
    Unchanged,
    /// The collision policy forbids taking it over (its current owner).
    Conflict(String),
    /// The server would refuse it (its message).
    Refused(String),
}

/// One object of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// The object, with its namespace as it would be applied.
    pub key: ObjectKey,
    /// Its apiVersion.
    pub api_version: String,
    /// What would happen.
    pub change: Change,
    /// Set when an existing object would be taken over from another owner (or from nobody).
    pub adopts_from: Option<String>,
    /// The live object and the server's dry-run result, both without the fields that say
    /// nothing about content (managed fields, resourceVersion, status...): what a diff shows.
    /// `None` where there is no such object.
    pub live: Option<Value>,
    /// See `live`.
    pub dry_run: Option<Value>,
}

/// An object resolved against the cluster.
struct Resolved {
    key: ObjectKey,
    api: Api<DynamicObject>,
    desired: Value,
}

/// Where and as whom objects are planned.
pub struct Target<'a> {
    /// The client (impersonating the BundleDeployment's ServiceAccount, if it names one).
    pub client: &'a Client,
    /// The owning BundleDeployment's name.
    pub owner: &'a str,
    /// Its installNamespace.
    pub install_namespace: Option<&'a str>,
    /// Its collision policy.
    pub collision_protection: CollisionProtection,
    /// The previous owner it takes over from (`spec.takeover`).
    pub takeover: Option<&'a crate::api::Takeover>,
}

async fn resolve(
    target: &Target<'_>,
    kinds: &KindResolver,
    object: &Object,
) -> Result<Result<Resolved, Change>, PreviewError> {
    let key = object.key();
    let gvk = GroupVersionKind::gvk(object.group(), object.version(), object.kind());
    let found = kinds
        .resolve(target.client, &gvk)
        .await
        .map_err(|error| PreviewError::Kube {
            context: format!("discover {}", object.api_version()),
            error,
        })?;
    let Some((resource, caps)) = found else {
        return Ok(Err(Change::CreateUnchecked(format!(
            "the cluster does not serve {} {} yet",
            object.api_version(),
            object.kind()
        ))));
    };
    let mut desired = plan::with_owner_label(object, target.owner);
    let namespace = match (caps.scope, object.namespace()) {
        (Scope::Cluster, None) => None,
        (Scope::Cluster, Some(ns)) => {
            return Ok(Err(Change::Refused(format!(
                "{} is cluster-scoped but names namespace {ns}",
                object.kind()
            ))))
        }
        (Scope::Namespaced, Some(ns)) => Some(ns.to_string()),
        (Scope::Namespaced, None) => match target.install_namespace {
            Some(ns) => {
                desired["metadata"]["namespace"] = Value::String(ns.to_string());
                Some(ns.to_string())
            }
            None => {
                return Ok(Err(Change::Refused(format!(
                    "{} is namespaced, names no namespace, and spec.installNamespace is not set",
                    object.kind()
                ))))
            }
        },
    };
    let api = match &namespace {
        Some(ns) => Api::namespaced_with(target.client.clone(), ns, &resource),
        None => Api::all_with(target.client.clone(), &resource),
    };
    Ok(Ok(Resolved {
        key: ObjectKey { namespace, ..key },
        api,
        desired,
    }))
}

/// The fields of an object that say nothing about its content, removed before comparing.
fn comparable(mut object: Value) -> Value {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "managedFields",
            "resourceVersion",
            "generation",
            "uid",
            "creationTimestamp",
        ] {
            metadata.remove(field);
        }
        // The revision number changes with every revision by design; it is not content.
        if let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.remove(REVISION_ANNOTATION);
        }
    }
    if let Some(object) = object.as_object_mut() {
        object.remove("status");
    }
    object
}

/// Field paths that differ between `after` (the dry-run result) and `before` (the live object),
/// in either direction (a field set, changed or removed), sorted, at most `limit`.
pub fn changed_paths(after: &Value, before: &Value, limit: usize) -> Vec<String> {
    let (after, before) = (comparable(after.clone()), comparable(before.clone()));
    let mut paths: BTreeSet<String> = plan::differing_paths(&after, &before, limit)
        .into_iter()
        .collect();
    paths.extend(plan::differing_paths(&before, &after, limit));
    paths.into_iter().take(limit).collect()
}

/// The namespaces the bundle itself creates, and the CRD kinds it defines (`group/Kind`): objects
/// in or of them cannot be checked by a dry-run before the bundle is applied.
fn bundle_provides(objects: &[Object]) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut namespaces = BTreeSet::new();
    let mut kinds = BTreeSet::new();
    for object in objects {
        match (object.group(), object.kind()) {
            ("", "Namespace") => {
                namespaces.insert(object.name().to_string());
            }
            ("apiextensions.k8s.io", "CustomResourceDefinition") => {
                let spec = object.body().get("spec");
                let group = spec.and_then(|s| s.get("group")).and_then(Value::as_str);
                let kind = spec
                    .and_then(|s| s.pointer("/names/kind"))
                    .and_then(Value::as_str);
                if let (Some(group), Some(kind)) = (group, kind) {
                    kinds.insert(format!("{group}/{kind}"));
                }
            }
            _ => {}
        }
    }
    (namespaces, kinds)
}

/// Plans `objects` against the cluster: for each, a server-side apply dry-run (field manager
/// `pallet`, forced, as the agent applies) compared with the live object. Writes nothing.
pub async fn plan_objects(
    target: &Target<'_>,
    objects: &[Object],
) -> Result<Vec<Planned>, PreviewError> {
    let kinds = KindResolver::default();
    let (bundle_namespaces, bundle_kinds) = bundle_provides(objects);
    let mut planned = Vec::with_capacity(objects.len());
    for (_, members) in plan::by_stage(objects) {
        for object in members {
            planned
                .push(plan_one(target, &kinds, object, &bundle_namespaces, &bundle_kinds).await?);
        }
    }
    Ok(planned)
}

async fn plan_one(
    target: &Target<'_>,
    kinds: &KindResolver,
    object: &Object,
    bundle_namespaces: &BTreeSet<String>,
    bundle_kinds: &BTreeSet<String>,
) -> Result<Planned, PreviewError> {
    let api_version = object.api_version().to_string();
    let planned = |key: ObjectKey, change: Change, adopts_from: Option<String>| Planned {
        key,
        api_version: api_version.clone(),
        change,
        adopts_from,
        live: None,
        dry_run: None,
    };
    let resolved = match resolve(target, kinds, object).await? {
        Ok(resolved) => resolved,
        Err(Change::CreateUnchecked(why)) => {
            let kind = format!("{}/{}", object.group(), object.kind());
            let why = if bundle_kinds.contains(&kind) {
                format!("{why}; its CRD is in the bundle")
            } else {
                return Ok(planned(
                    object.key(),
                    Change::Refused(format!(
                        "{why} and the bundle does not define it (mark it pallet.dev/optional: \"true\" to skip it)"
                    )),
                    None,
                ));
            };
            return Ok(planned(object.key(), Change::CreateUnchecked(why), None));
        }
        Err(change) => return Ok(planned(object.key(), change, None)),
    };
    let Resolved { key, api, desired } = resolved;
    let kube_error = |context: String| move |error| PreviewError::Kube { context, error };
    let live = match api.get_opt(&key.name).await {
        Ok(live) => live,
        // The namespace does not exist: a namespaced get answers 200/404 for the object, but
        // a kind gone since discovery also answers 404, which get_opt maps to None.
        Err(e) => return Err(kube_error(format!("read {key}"))(e)),
    };
    let live_owner = live.as_ref().map(|l| {
        l.metadata
            .labels
            .as_ref()
            .and_then(|m| m.get(OWNER_LABEL))
            .map(String::as_str)
    });
    let claimed = match (target.takeover, &live) {
        (Some(takeover), Some(live)) => serde_json::to_value(&live.metadata)
            .is_ok_and(|metadata| crate::apply::takeover::claims(takeover, &metadata)),
        _ => false,
    };
    let ownership = plan::ownership(
        live_owner,
        target.owner,
        target.collision_protection,
        claimed,
    );
    let adopts_from = match ownership {
        Ownership::Conflict { owner } => {
            let owner = owner
                .map(|o| format!("owned by BundleDeployment {o}"))
                .unwrap_or_else(|| "created outside pallet".into());
            return Ok(planned(
                key,
                Change::Conflict(format!(
                    "{owner}; collisionProtection {:?} forbids taking it over",
                    target.collision_protection
                )),
                None,
            ));
        }
        Ownership::Adopt { previous_owner } => Some(
            previous_owner
                .map(|o| format!("BundleDeployment {o}"))
                .unwrap_or_else(|| "no owner".into()),
        ),
        Ownership::TakeOver => target.takeover.map(ToString::to_string),
        Ownership::Create | Ownership::Ours => None,
    };
    // The agent writes the revision number with every change; keeping the live one here means
    // the dry-run shows content changes only.
    let live_revision = live
        .as_ref()
        .and_then(|l| l.metadata.annotations.as_ref())
        .and_then(|a| a.get(REVISION_ANNOTATION))
        .and_then(|v| v.parse::<i64>().ok());
    let desired = match live_revision {
        Some(revision) => plan::with_revision_annotation(desired, revision),
        None => desired,
    };
    let params = PatchParams::apply(FIELD_MANAGER).force().dry_run();
    let after = match api.patch(&key.name, &params, &Patch::Apply(&desired)).await {
        Ok(after) => after,
        Err(kube::Error::Api(status))
            if status.code == 404
                && live.is_none()
                && key.namespace.as_ref().is_some_and(|ns| {
                    bundle_namespaces.contains(ns) || Some(ns.as_str()) == target.install_namespace
                }) =>
        {
            let ns = key.namespace.clone().unwrap_or_default();
            let by = if bundle_namespaces.contains(&ns) {
                "the bundle creates it"
            } else {
                "pallet creates the installNamespace"
            };
            return Ok(planned(
                key,
                Change::CreateUnchecked(format!("namespace {ns} is new: {by}")),
                None,
            ));
        }
        Err(kube::Error::Api(status)) => {
            return Ok(planned(key, Change::Refused(status.message), None));
        }
        Err(e) => return Err(kube_error(format!("dry-run apply {key}"))(e)),
    };
    let after = serde_json::to_value(&after).unwrap_or(Value::Null);
    let live = live.map(|live| serde_json::to_value(&live).unwrap_or(Value::Null));
    let change = match &live {
        None => Change::Create,
        Some(live) => {
            let paths = changed_paths(&after, live, PATHS_LIMIT);
            if paths.is_empty() {
                Change::Unchanged
            } else {
                Change::Update(paths)
            }
        }
    };
    Ok(Planned {
        live: live.map(comparable),
        dry_run: Some(comparable(after)),
        ..planned(key, change, adopts_from)
    })
}

/// Objects of a live BundleDeployment's inventory that the new render no longer has: what the
/// agent would prune. Compared by group, kind, namespace and name.
pub fn prune_candidates(
    inventory: &[ObjectReference],
    planned: &[Planned],
) -> Vec<ObjectReference> {
    let keep: BTreeSet<(&str, &str, &str, &str)> = planned
        .iter()
        .map(|p| {
            (
                p.key.group.as_str(),
                p.key.kind.as_str(),
                p.key.namespace.as_deref().unwrap_or(""),
                p.key.name.as_str(),
            )
        })
        .collect();
    inventory
        .iter()
        .filter(|r| {
            !keep.contains(&(
                r.group.as_str(),
                r.kind.as_str(),
                r.namespace.as_str(),
                r.name.as_str(),
            ))
        })
        .cloned()
        .collect()
}

/// One object that differs from the bundle: what resuming would revert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drifted {
    /// The object.
    pub key: ObjectKey,
    /// Differing field paths; empty when the object is missing.
    pub paths: Vec<String>,
    /// True when the object is missing from the cluster (resuming recreates it).
    pub missing: bool,
}

/// Read-only: the objects whose live state differs from the rendered one, with every differing
/// field path (at most [`PATHS_LIMIT`]), by the rules the agent uses to decide a write.
pub async fn drift(target: &Target<'_>, objects: &[Object]) -> Result<Vec<Drifted>, PreviewError> {
    let kinds = KindResolver::default();
    let mut drifted = Vec::new();
    for object in objects {
        let Ok(Resolved { key, api, desired }) = resolve(target, &kinds, object).await? else {
            continue;
        };
        let live = api
            .get_opt(&key.name)
            .await
            .map_err(|error| PreviewError::Kube {
                context: format!("read {key}"),
                error,
            })?;
        match live {
            None => drifted.push(Drifted {
                key,
                paths: Vec::new(),
                missing: true,
            }),
            Some(live) => {
                let live = serde_json::to_value(&live).unwrap_or(Value::Null);
                let paths = plan::differing_paths(&desired, &live, PATHS_LIMIT);
                if !paths.is_empty() {
                    drifted.push(Drifted {
                        key,
                        paths,
                        missing: false,
                    });
                }
            }
        }
    }
    Ok(drifted)
}

/// One rule of a Role or ClusterRole, as text, with what makes it dangerous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSummary {
    /// `verbs on resources (apiGroups)` or `verbs on URLs`.
    pub text: String,
    /// Warnings: wildcards and escalation-prone verbs or resources.
    pub flags: Vec<String>,
}

/// A Role or ClusterRole the bundle creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleSummary {
    /// The object.
    pub key: ObjectKey,
    /// Its rules.
    pub rules: Vec<RuleSummary>,
    /// Set for an aggregated ClusterRole (its rules come from others at run time).
    pub aggregated: bool,
}

/// A RoleBinding or ClusterRoleBinding the bundle creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingSummary {
    /// The object.
    pub key: ObjectKey,
    /// `ClusterRole/name` or `Role/name`.
    pub role: String,
    /// `ServiceAccount ns/name`, `User name`, `Group name`.
    pub subjects: Vec<String>,
}

/// What RBAC a bundle grants.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RbacSummary {
    /// Roles and ClusterRoles.
    pub roles: Vec<RoleSummary>,
    /// RoleBindings and ClusterRoleBindings.
    pub bindings: Vec<BindingSummary>,
}

impl RbacSummary {
    /// Every flag raised, once each.
    pub fn flags(&self) -> Vec<String> {
        let flags: BTreeSet<&String> = self
            .roles
            .iter()
            .flat_map(|r| r.rules.iter().flat_map(|rule| rule.flags.iter()))
            .collect();
        flags.into_iter().cloned().collect()
    }
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Flags for one rule: wildcards, and verbs or resources known to allow privilege escalation.
pub fn rule_flags(
    api_groups: &[String],
    resources: &[String],
    verbs: &[String],
    urls: &[String],
) -> Vec<String> {
    let mut flags = Vec::new();
    let any = |list: &[String]| list.iter().any(|v| v == "*");
    if any(verbs) {
        flags.push("wildcard verbs (*)".to_string());
    }
    if any(resources) {
        flags.push("wildcard resources (*)".to_string());
    }
    if any(api_groups) {
        flags.push("wildcard apiGroups (*)".to_string());
    }
    if any(urls) {
        flags.push("wildcard nonResourceURLs (*)".to_string());
    }
    let has_verb = |wanted: &[&str]| {
        verbs
            .iter()
            .any(|v| v == "*" || wanted.contains(&v.as_str()))
    };
    // Named resources only: a `*` is flagged as a wildcard once rather than as every danger it implies.
    let has_resource = |wanted: &str| resources.iter().any(|r| r == wanted);
    for verb in ["escalate", "bind", "impersonate"] {
        if verbs.iter().any(|v| v == verb) {
            flags.push(format!("escalation-prone verb {verb}"));
        }
    }
    let writes = ["create", "update", "patch"];
    if has_resource("secrets") && has_verb(&["get", "list", "watch"]) {
        flags.push("reads Secrets".to_string());
    }
    for sub in [
        "pods/exec",
        "pods/attach",
        "pods/portforward",
        "nodes/proxy",
    ] {
        if has_resource(sub) && has_verb(&["create", "get"]) {
            flags.push(sub.to_string());
        }
    }
    if has_resource("serviceaccounts/token") && has_verb(&["create"]) {
        flags.push("mints ServiceAccount tokens".to_string());
    }
    if has_resource("pods") && has_verb(&["create"]) {
        flags.push("creates Pods (can run as any ServiceAccount in the namespace)".to_string());
    }
    for rbac in [
        "roles",
        "clusterroles",
        "rolebindings",
        "clusterrolebindings",
    ] {
        if has_resource(rbac) && has_verb(&writes) {
            flags.push(format!("writes {rbac}"));
        }
    }
    for hook in [
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
        "certificatesigningrequests/approval",
    ] {
        if has_resource(hook) && has_verb(&writes) {
            flags.push(format!("writes {hook}"));
        }
    }
    flags.dedup();
    flags
}

/// Summarises the RBAC objects among `objects` (pure).
pub fn rbac_summary(objects: &[Object]) -> RbacSummary {
    let mut summary = RbacSummary::default();
    for object in objects {
        if object.group() != "rbac.authorization.k8s.io" {
            continue;
        }
        let body = object.body();
        match object.kind() {
            "Role" | "ClusterRole" => {
                let rules = body
                    .get("rules")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .map(|rule| {
                        let groups = strings(rule.get("apiGroups"));
                        let resources = strings(rule.get("resources"));
                        let verbs = strings(rule.get("verbs"));
                        let urls = strings(rule.get("nonResourceURLs"));
                        let names = strings(rule.get("resourceNames"));
                        let mut text = if urls.is_empty() {
                            let groups: Vec<String> = groups
                                .iter()
                                .map(|g| {
                                    if g.is_empty() {
                                        "core".to_string()
                                    } else {
                                        g.clone()
                                    }
                                })
                                .collect();
                            format!(
                                "{} on {} ({})",
                                verbs.join(","),
                                resources.join(","),
                                groups.join(",")
                            )
                        } else {
                            format!("{} on URLs {}", verbs.join(","), urls.join(","))
                        };
                        if !names.is_empty() {
                            text.push_str(&format!(" named {}", names.join(",")));
                        }
                        RuleSummary {
                            text,
                            flags: rule_flags(&groups, &resources, &verbs, &urls),
                        }
                    })
                    .collect();
                summary.roles.push(RoleSummary {
                    key: object.key(),
                    rules,
                    aggregated: body.get("aggregationRule").is_some(),
                });
            }
            "RoleBinding" | "ClusterRoleBinding" => {
                let role = body
                    .get("roleRef")
                    .map(|r| {
                        format!(
                            "{}/{}",
                            r.get("kind").and_then(Value::as_str).unwrap_or("?"),
                            r.get("name").and_then(Value::as_str).unwrap_or("?")
                        )
                    })
                    .unwrap_or_else(|| "?".into());
                let subjects = body
                    .get("subjects")
                    .and_then(Value::as_array)
                    .map(|subjects| {
                        subjects
                            .iter()
                            .map(|s| {
                                let kind = s.get("kind").and_then(Value::as_str).unwrap_or("?");
                                let name = s.get("name").and_then(Value::as_str).unwrap_or("?");
                                match s.get("namespace").and_then(Value::as_str) {
                                    Some(ns) => format!("{kind} {ns}/{name}"),
                                    None if kind == "ServiceAccount" => match object.namespace() {
                                        Some(ns) => format!("{kind} {ns}/{name}"),
                                        None => format!("{kind} {name}"),
                                    },
                                    None => format!("{kind} {name}"),
                                }
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                summary.bindings.push(BindingSummary {
                    key: object.key(),
                    role,
                    subjects,
                });
            }
            _ => {}
        }
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fetched(kind: SourceKind, resolved: &str) -> Fetched {
        Fetched {
            kind,
            reference: String::new(),
            resolved: resolved.into(),
            destination: String::new(),
            path: PathBuf::new(),
            version: None,
            verified: None,
        }
    }

    #[test]
    fn pin_replaces_floating_refs_and_drops_poll_intervals() {
        let mut doc = json!({
            "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
            "metadata": {"name": "x"},
            "spec": {"format": "plain", "sources": [
                {"kind": "image", "image": {"ref": "r.example/app:v1"}, "pollInterval": "1m"},
                {"kind": "git", "git": {"repository": "https://g/r.git", "ref": {"branch": "main"}, "directory": "d"}, "pollInterval": "5m"},
                {"kind": "http", "destination": "crds", "http": {"url": "http://h/x.yaml"}},
            ]},
            "status": {"activeRevision": 3},
        });
        let commit = "a".repeat(40);
        pin(
            &mut doc,
            &[
                fetched(SourceKind::Image, "r.example/app@sha256:abc"),
                fetched(SourceKind::Git, &commit),
                fetched(SourceKind::Http, "sha256:0123"),
            ],
        )
        .unwrap();
        let sources = &doc["spec"]["sources"];
        assert_eq!(sources[0]["image"]["ref"], "r.example/app@sha256:abc");
        assert_eq!(sources[1]["git"]["ref"], json!({"commit": commit}));
        assert_eq!(sources[1]["git"]["directory"], "d");
        assert_eq!(sources[2]["http"]["sha256"], "0123");
        assert_eq!(sources[2]["destination"], "crds");
        assert!(
            sources[0].get("pollInterval").is_none() && sources[1].get("pollInterval").is_none()
        );
        assert!(doc.get("status").is_none());
        // The pinned document is still a valid BundleDeployment.
        let bd: BundleDeployment = serde_json::from_value(doc).unwrap();
        assert_eq!(bd.spec.sources.len(), 3);
    }

    #[test]
    fn pin_writes_an_oci_chart_version_and_manifest_digest() {
        let digest = format!("sha256:{}", "b".repeat(64));
        let mut doc = json!({"spec": {"sources": [{"kind": "helmRepository", "pollInterval": "1m",
            "helmRepository": {"url": "oci://r.example/charts", "chart": "app", "version": "1.x"}}]}});
        let mut chart = fetched(
            SourceKind::HelmRepository,
            &format!("r.example/charts/app@{digest}"),
        );
        chart.version = Some("1.4.0".into());
        pin(&mut doc, &[chart]).unwrap();
        let source = &doc["spec"]["sources"][0];
        assert_eq!(source["helmRepository"]["version"], "1.4.0");
        assert_eq!(source["helmRepository"]["digest"], json!(digest));
        assert!(source.get("pollInterval").is_none());
    }

    #[test]
    fn pin_writes_a_chart_repository_version_and_digest() {
        let mut doc = json!({
            "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
            "metadata": {"name": "x"},
            "spec": {"format": "helm", "sources": [
                {"kind": "helmRepository", "pollInterval": "1m",
                 "helmRepository": {"url": "https://charts.example", "chart": "c", "version": "1.x"}},
            ]},
        });
        let digest = format!("sha256:{}", "b".repeat(64));
        let mut chart = fetched(SourceKind::HelmRepository, &digest);
        chart.version = Some("1.4.2".into());
        pin(&mut doc, &[chart]).unwrap();
        let source = &doc["spec"]["sources"][0];
        assert_eq!(source["helmRepository"]["version"], "1.4.2");
        assert_eq!(source["helmRepository"]["digest"], digest.as_str());
        assert!(source.get("pollInterval").is_none());
        let bd: BundleDeployment = serde_json::from_value(doc).unwrap();
        assert_eq!(bd.spec.sources.len(), 1);
    }

    #[test]
    fn changed_paths_see_set_changed_and_removed_fields_but_not_bookkeeping() {
        let live = json!({"metadata": {"name": "a", "resourceVersion": "1", "labels": {"x": "1"},
                          "annotations": {"pallet.dev/revision": "1"}},
                          "data": {"keep": "k", "old": "o", "gone": "g"}});
        let after = json!({"metadata": {"name": "a", "resourceVersion": "2", "labels": {"x": "1"},
                           "annotations": {"pallet.dev/revision": "2"}},
                           "data": {"keep": "k", "old": "n", "new": "v"}});
        assert_eq!(
            changed_paths(&after, &live, 10),
            [".data.gone", ".data.new", ".data.old"]
        );
        assert!(changed_paths(&live, &live, 10).is_empty());
    }

    fn object(body: Value) -> Object {
        Object::new(
            body,
            pallet_formats::Origin {
                file: "rbac.yaml".into(),
                document: 0,
                line: 1,
            },
        )
        .unwrap()
    }

    #[test]
    fn rbac_summary_flags_wildcards_and_escalation() {
        let objects = [
            object(
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "big"},
                "rules": [
                    {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
                    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind", "escalate"]},
                    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["one"]},
                ]}),
            ),
            object(
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "b", "namespace": "apps"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "big"},
                "subjects": [{"kind": "ServiceAccount", "name": "op"}, {"kind": "Group", "name": "devs"}]}),
            ),
            object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})),
        ];
        let summary = rbac_summary(&objects);
        assert_eq!(summary.roles.len(), 1);
        let rules = &summary.roles[0].rules;
        assert_eq!(rules[0].text, "* on * (*)");
        assert!(rules[0].flags.contains(&"wildcard verbs (*)".to_string()));
        assert!(rules[0]
            .flags
            .contains(&"wildcard apiGroups (*)".to_string()));
        assert_eq!(rules[1].text, "get,list on configmaps (core)");
        assert!(rules[1].flags.is_empty(), "{:?}", rules[1].flags);
        assert!(rules[2]
            .flags
            .contains(&"escalation-prone verb bind".to_string()));
        assert!(rules[2]
            .flags
            .contains(&"escalation-prone verb escalate".to_string()));
        assert_eq!(rules[3].text, "get on secrets (core) named one");
        assert!(rules[3].flags.contains(&"reads Secrets".to_string()));
        assert_eq!(summary.bindings[0].role, "ClusterRole/big");
        assert_eq!(
            summary.bindings[0].subjects,
            ["ServiceAccount apps/op", "Group devs"]
        );
    }

    #[test]
    fn prune_candidates_are_inventory_objects_no_longer_rendered() {
        let reference = |kind: &str, ns: &str, name: &str| ObjectReference {
            group: String::new(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
            message: None,
        };
        let planned = [Planned {
            key: ObjectKey {
                group: String::new(),
                kind: "ConfigMap".into(),
                namespace: Some("a".into()),
                name: "keep".into(),
            },
            api_version: "v1".into(),
            change: Change::Unchanged,
            adopts_from: None,
            live: None,
            dry_run: None,
        }];
        let inventory = [
            reference("ConfigMap", "a", "keep"),
            reference("ConfigMap", "a", "old"),
            reference("Namespace", "", "a"),
        ];
        let gone = prune_candidates(&inventory, &planned);
        assert_eq!(
            gone.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            ["old", "a"]
        );
    }
}
