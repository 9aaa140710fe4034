//! Processors: an ordered list of transformations run on a format's output before anything is
//! applied (`spec.processors`), for every format, helm hooks included. `kustomize` and
//! `substitute` are pure and run here; `function` (a KRM function over HTTP or an allowed
//! executable) needs I/O, which the caller provides through [`FunctionRunner`].

pub mod krm;
pub mod substitute;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::object::{Object, Origin};
use crate::{RenderError, Rendered};
pub use substitute::Substitution;

/// One processor, as the renderer runs it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Processor {
    /// An inline kustomization whose resources are the objects rendered so far.
    Kustomize(Value),
    /// `${var}` substitution.
    Substitute(Substitution),
    /// A KRM function, called through the [`FunctionRunner`] with this `functionConfig`.
    Function {
        /// The function's configuration (`functionConfig`).
        config: Option<Value>,
    },
}

impl Processor {
    /// The processor's kind as written in the spec.
    pub fn kind(&self) -> &'static str {
        match self {
            Processor::Kustomize(_) => "kustomize",
            Processor::Substitute(_) => "substitute",
            Processor::Function { .. } => "function",
        }
    }
}

/// A processor and the name it is known by in conditions and traces.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NamedProcessor {
    /// The name (`spec.processors[].name`, or `<index>-<kind>`).
    pub name: String,
    /// What it does.
    pub processor: Processor,
}

/// Calls KRM functions: the I/O side of `function` processors, provided by the caller.
pub trait FunctionRunner {
    /// Sends `request` (a ResourceList) to the function of processor `index` and returns the
    /// answer's text. An `Err` is a failure to reach the function or to get a complete answer
    /// (retried later), not a result the function reported.
    fn call(&mut self, index: usize, request: &Value) -> Result<String, String>;
}

/// A runner for renders that may not call functions (no network, no cluster): any `function`
/// processor fails with this message.
pub struct NoFunctions(pub &'static str);

impl FunctionRunner for NoFunctions {
    fn call(&mut self, _index: usize, _request: &Value) -> Result<String, String> {
        Err(self.0.to_owned())
    }
}

/// What one processor did: the objects it changed, added and removed (`Kind namespace/name`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessorTrace {
    /// The processor's name.
    pub processor: String,
    /// Objects whose content it changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
    /// Objects it added (or renamed to).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added: Vec<String>,
    /// Objects it removed (or renamed from).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
    /// What a function reported besides errors (warnings, information).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Runs `processors` in order on `rendered`, calling functions through `functions`. `tree` is
/// the bundle tree (for the kustomize processor's `components`). The result follows the plain
/// format's rules again (namespaces, scopes, duplicates), since processors may add and rename
/// objects.
pub fn run(
    rendered: Rendered,
    processors: &[NamedProcessor],
    tree: Option<&Path>,
    functions: &mut dyn FunctionRunner,
) -> Result<(Rendered, Vec<ProcessorTrace>), RenderError> {
    let mut pipeline = Pipeline::new(rendered, processors, tree);
    loop {
        match pipeline.advance()? {
            Step::Function { index, request } => {
                let answer = functions.call(index, &request);
                pipeline.resume(answer)?;
            }
            Step::Done => return pipeline.finish(),
        }
    }
}

/// What a [`Pipeline`] needs next.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// The function of processor `index` must be called with `request` (a ResourceList); give
    /// its answer to [`Pipeline::resume`].
    Function {
        /// The processor's index.
        index: usize,
        /// The ResourceList to send.
        request: Value,
    },
    /// Every processor ran: take the result with [`Pipeline::finish`].
    Done,
}

/// Where a pipeline stopped to call a function: the objects so far, what each processor before
/// did, and the processor to run next. A pipeline can go on from it in another process (the
/// agent calls functions between two sandboxed steps).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Progress {
    objects: Vec<(serde_json::Map<String, Value>, Origin)>,
    install_namespace: String,
    webhook_certificates: Vec<crate::WebhookCertificate>,
    next: usize,
    traces: Vec<ProcessorTrace>,
}

/// The processors run step by step, so that the caller can do a function's I/O in its own way
/// (asynchronously in the agent) between the pure steps.
pub struct Pipeline<'a> {
    processors: &'a [NamedProcessor],
    tree: Option<&'a Path>,
    objects: Vec<Object>,
    install_namespace: String,
    webhook_certificates: Vec<crate::WebhookCertificate>,
    next: usize,
    before: BTreeMap<String, String>,
    traces: Vec<ProcessorTrace>,
}

impl<'a> Pipeline<'a> {
    /// A pipeline over `rendered`.
    pub fn new(
        rendered: Rendered,
        processors: &'a [NamedProcessor],
        tree: Option<&'a Path>,
    ) -> Self {
        Pipeline {
            processors,
            tree,
            objects: rendered.object_list(),
            install_namespace: rendered.install_namespace,
            webhook_certificates: rendered.webhook_certificates,
            next: 0,
            before: BTreeMap::new(),
            traces: Vec::with_capacity(processors.len()),
        }
    }

    /// A pipeline going on from `progress` (see [`Pipeline::progress`]); the answer of the
    /// function it stopped at goes to [`Pipeline::resume`] next.
    pub fn from_progress(
        progress: Progress,
        processors: &'a [NamedProcessor],
        tree: Option<&'a Path>,
    ) -> Result<Self, RenderError> {
        let objects = progress
            .objects
            .into_iter()
            .map(|(body, origin)| Object::new(Value::Object(body), origin))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Pipeline {
            processors,
            tree,
            before: fingerprints(&objects),
            objects,
            install_namespace: progress.install_namespace,
            webhook_certificates: progress.webhook_certificates,
            next: progress.next,
            traces: progress.traces,
        })
    }

    /// Where the pipeline stands: after [`Pipeline::advance`] asked for a function, what
    /// [`Pipeline::from_progress`] goes on from.
    pub fn progress(&self) -> Progress {
        Progress {
            objects: self
                .objects
                .iter()
                .map(|o| (o.body().clone(), o.origin().clone()))
                .collect(),
            install_namespace: self.install_namespace.clone(),
            webhook_certificates: self.webhook_certificates.clone(),
            next: self.next,
            traces: self.traces.clone(),
        }
    }

    /// Runs pure processors until a function must be called, or until the end.
    pub fn advance(&mut self) -> Result<Step, RenderError> {
        while let Some(named) = self.processors.get(self.next) {
            self.before = fingerprints(&self.objects);
            if let Processor::Function { config } = &named.processor {
                let items = self
                    .objects
                    .iter()
                    .map(|o| Value::Object(o.body().clone()))
                    .collect();
                return Ok(Step::Function {
                    index: self.next,
                    request: krm::request(items, config.as_ref()),
                });
            }
            let objects = std::mem::take(&mut self.objects);
            self.objects = run_pure(named, objects, self.tree)?;
            self.record(Vec::new());
        }
        Ok(Step::Done)
    }

    /// Takes the answer of the function [`Pipeline::advance`] asked for.
    pub fn resume(&mut self, answer: Result<String, String>) -> Result<(), RenderError> {
        let Some(named) = self.processors.get(self.next) else {
            return Ok(());
        };
        let text = answer.map_err(|message| RenderError::ProcessorUnavailable {
            processor: named.name.clone(),
            message,
        })?;
        let failed = |message: String| RenderError::Processor {
            processor: named.name.clone(),
            reason: "FunctionFailed",
            message,
        };
        let output = krm::parse_response(&text).map_err(failed)?;
        if !output.errors.is_empty() {
            return Err(failed(output.errors.join("; ")));
        }
        let mut objects = Vec::with_capacity(output.items.len());
        for (document, item) in output.items.into_iter().enumerate() {
            let origin = Origin {
                file: format!("processor {}", named.name),
                document,
                line: 0,
            };
            objects.push(Object::new(item, origin)?);
        }
        self.objects = objects;
        self.record(output.notes);
        Ok(())
    }

    fn record(&mut self, notes: Vec<String>) {
        let name = &self.processors[self.next].name;
        let mut trace = compare(name, &self.before, &fingerprints(&self.objects));
        trace.notes = notes;
        self.traces.push(trace);
        self.next += 1;
    }

    /// The processed set, under the plain format's rules again, and what each processor did.
    pub fn finish(self) -> Result<(Rendered, Vec<ProcessorTrace>), RenderError> {
        let mut rendered = crate::plain::finish(self.objects, &self.install_namespace)?;
        rendered.webhook_certificates = self.webhook_certificates;
        Ok((rendered, self.traces))
    }
}

fn run_pure(
    named: &NamedProcessor,
    objects: Vec<Object>,
    tree: Option<&Path>,
) -> Result<Vec<Object>, RenderError> {
    let failed = |reason: &'static str, message: String| RenderError::Processor {
        processor: named.name.clone(),
        reason,
        message,
    };
    match &named.processor {
        Processor::Kustomize(kustomization) => {
            crate::kustomize::transform(objects, kustomization, tree)
                .map_err(|e| failed(e.kind.category(), e.to_string()))
        }
        Processor::Substitute(substitution) => {
            let mut out = Vec::with_capacity(objects.len());
            for mut object in objects {
                if !substitute::exempt(object.body()) {
                    let describe = object.key().to_string();
                    substitute::substitute_object(object.body_mut(), substitution, &describe)
                        .map_err(|e| failed("SubstitutionFailed", e.to_string()))?;
                    // Substitution may not make an object invalid (a name emptied).
                    let origin = object.origin().clone();
                    object = Object::new(Value::Object(object.into_body()), origin)?;
                }
                out.push(object);
            }
            Ok(out)
        }
        Processor::Function { .. } => Err(failed(
            "FunctionFailed",
            "a function runs through the pipeline's caller".to_owned(),
        )),
    }
}

/// Each object's canonical text, by its `Kind namespace/name`.
fn fingerprints(objects: &[Object]) -> BTreeMap<String, String> {
    objects
        .iter()
        .map(|o| {
            let mut text = String::new();
            crate::canonical::write_canonical_json(&Value::Object(o.body().clone()), &mut text);
            (o.key().to_string(), text)
        })
        .collect()
}

fn compare(
    name: &str,
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> ProcessorTrace {
    let mut trace = ProcessorTrace {
        processor: name.to_owned(),
        ..ProcessorTrace::default()
    };
    for (key, text) in after {
        match before.get(key) {
            None => trace.added.push(key.clone()),
            Some(old) if old != text => trace.changed.push(key.clone()),
            Some(_) => {}
        }
    }
    trace.removed = before
        .keys()
        .filter(|k| !after.contains_key(*k))
        .cloned()
        .collect();
    trace
}

#[cfg(test)]
mod tests;
