//! Phase 2b, processors (`spec.processors`): read what the processors need from the cluster
//! (the ConfigMaps and Secrets of `substitute.varsFrom`, under the secret-namespace rule and
//! watched like `valuesFrom`), then run them in order on the format's output, calling functions
//! asynchronously between the pure steps.

use std::collections::BTreeMap;
use std::path::Path;

use pallet_formats::processors::{
    NamedProcessor, Pipeline, Processor, ProcessorTrace, Step, Substitution,
};
use pallet_formats::{RenderError, Rendered};

use super::fetch::SecretPolicy;
use super::values::{self, Read};
use super::values_watch::{ObjectId, Seen};
use super::ReconcileError;
use crate::api::{
    BundleDeployment, ProcessorSpec, ResolvedValues, SubstituteProcessor, ValuesReference,
};

/// The processors of a BundleDeployment, ready to run, and what each `varsFrom` reference
/// contributed (recorded with the revision as `valuesFrom` references are).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessorInputs {
    /// The processors in order.
    pub processors: Vec<NamedProcessor>,
    /// Each `varsFrom` reference as read.
    pub resolved: Vec<ResolvedValues>,
}

/// Reads every `varsFrom` object and builds the processors. Also returns what was seen of each
/// referenced object, for the watches.
pub async fn read(
    client: &kube::Client,
    policy: &SecretPolicy,
    bd: &BundleDeployment,
) -> (
    Vec<(ObjectId, Seen)>,
    Result<ProcessorInputs, ReconcileError>,
) {
    let mut observed = Vec::new();
    let mut resolved = Vec::new();
    let mut substitutions = BTreeMap::new();
    for (index, spec) in bd.spec.processors.iter().enumerate() {
        let Some(substitute) = &spec.substitute else {
            continue;
        };
        let references = references(substitute);
        let field = format!("processors[{index}].substitute.varsFrom");
        let (seen, reads) = values::read_references(client, policy, bd, &references, &field).await;
        observed.extend(seen);
        let merged = reads.and_then(|reads| {
            merge_vars(substitute, &references, &reads, policy, &field)
                .map_err(|(reason, message)| ReconcileError::Values { reason, message })
        });
        match merged {
            Ok((substitution, read)) => {
                resolved.extend(read);
                substitutions.insert(index, substitution);
            }
            Err(error) => return (observed, Err(error)),
        }
    }
    let processors = build(&bd.spec.processors, |index, _| {
        substitutions.remove(&index).unwrap_or_default()
    });
    (
        observed,
        Ok(ProcessorInputs {
            processors,
            resolved,
        }),
    )
}

/// The processors of `specs`, in order, each `substitute` with the variables `substitution`
/// gives it (by index). Pure.
pub fn build(
    specs: &[ProcessorSpec],
    mut substitution: impl FnMut(usize, &SubstituteProcessor) -> Substitution,
) -> Vec<NamedProcessor> {
    let mut processors = Vec::with_capacity(specs.len());
    for (index, spec) in specs.iter().enumerate() {
        let processor = match (&spec.kustomize, &spec.substitute, &spec.function) {
            (Some(kustomization), _, _) => Processor::Kustomize(kustomization.clone()),
            (None, Some(substitute), _) => Processor::Substitute(substitution(index, substitute)),
            (None, None, Some(function)) => Processor::Function {
                config: function.config.clone(),
            },
            // The schema refuses a processor of no kind.
            (None, None, None) => continue,
        };
        processors.push(NamedProcessor {
            name: spec.display_name(index),
            processor,
        });
    }
    processors
}

fn references(substitute: &SubstituteProcessor) -> Vec<ValuesReference> {
    substitute
        .vars_from
        .iter()
        .map(|r| ValuesReference {
            kind: r.kind,
            name: r.name.clone(),
            namespace: r.namespace.clone(),
            values_key: None,
            optional: r.optional,
        })
        .collect()
}

/// The variables of a `substitute` processor: every key of each `varsFrom` object in order (a
/// later one wins), then `vars`. Pure. Errors name the reference and key, never a value.
pub fn merge_vars(
    substitute: &SubstituteProcessor,
    references: &[ValuesReference],
    reads: &[Read],
    policy: &SecretPolicy,
    field: &str,
) -> Result<(Substitution, Vec<ResolvedValues>), (&'static str, String)> {
    let mut vars = BTreeMap::new();
    let mut resolved = Vec::with_capacity(references.len());
    for (index, (reference, read)) in references.iter().zip(reads).enumerate() {
        let namespace = values::namespace_of(reference, policy);
        let origin = values::origin(reference, namespace);
        let digest = match read {
            Read::Missing if reference.optional => values::ABSENT.to_string(),
            Read::Missing => {
                return Err((
                    values::REASON_NOT_FOUND,
                    format!("{field}[{index}]: {origin} not found (set optional: true to render without it)"),
                ))
            }
            Read::Found(data) => {
                let mut canonical = String::new();
                for (key, bytes) in data {
                    if !pallet_formats::processors::substitute::valid_name(key) {
                        return Err((
                            values::REASON_INVALID,
                            format!("{field}[{index}]: {origin} key {key:?} is not a variable name (letters, digits and _, not starting with a digit)"),
                        ));
                    }
                    let text = std::str::from_utf8(bytes).map_err(|_| {
                        (
                            values::REASON_INVALID,
                            format!("{field}[{index}]: {origin} key {key:?} is not UTF-8 text"),
                        )
                    })?;
                    canonical.push_str(&format!("{key}={text}\n"));
                    vars.insert(key.clone(), text.to_owned());
                }
                pallet_formats::canonical::digest_bytes(canonical.as_bytes())
            }
        };
        resolved.push(ResolvedValues {
            kind: reference.kind,
            name: format!("{namespace}/{}", reference.name),
            digest,
        });
    }
    for (key, value) in &substitute.vars {
        vars.insert(key.clone(), value.clone());
    }
    Ok((
        Substitution {
            vars,
            strict: substitute.strict,
        },
        resolved,
    ))
}

/// Runs the processors on `rendered`, calling functions through `caller`. `tree` is the bundle
/// tree (for a kustomize processor's `components`).
pub async fn run(
    caller: &super::functions::FunctionCaller<'_>,
    bd: &BundleDeployment,
    rendered: Rendered,
    processors: &[NamedProcessor],
    tree: Option<&Path>,
) -> Result<(Rendered, Vec<ProcessorTrace>), RenderError> {
    if processors.is_empty() {
        return Ok((rendered, Vec::new()));
    }
    let mut pipeline = Pipeline::new(rendered, processors, tree);
    loop {
        match pipeline.advance()? {
            Step::Function { index, request } => {
                let answer = match function_spec(&bd.spec.processors, &processors[index].name) {
                    Some(spec) => super::functions::call(caller, bd, spec, &request).await,
                    None => Err("the function's spec is gone".to_string()),
                };
                pipeline.resume(answer)?;
            }
            Step::Done => return pipeline.finish(),
        }
    }
}

/// The `function` settings of the processor named `name`.
pub fn function_spec<'a>(
    specs: &'a [ProcessorSpec],
    name: &str,
) -> Option<&'a crate::api::FunctionProcessor> {
    specs
        .iter()
        .enumerate()
        .find(|(i, spec)| spec.display_name(*i) == name)
        .and_then(|(_, spec)| spec.function.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ValuesSourceKind, VarsReference};

    fn policy() -> SecretPolicy {
        SecretPolicy {
            agent_namespace: "pallet-system".into(),
            ..Default::default()
        }
    }

    fn substitute(optional: bool) -> SubstituteProcessor {
        SubstituteProcessor {
            vars: [("TEAM".to_string(), "inline".to_string())].into(),
            vars_from: vec![VarsReference {
                kind: ValuesSourceKind::ConfigMap,
                name: "cluster-vars".into(),
                namespace: Some("platform".into()),
                optional,
            }],
            strict: true,
        }
    }

    #[test]
    fn vars_from_objects_then_inline_vars() {
        let spec = substitute(false);
        let refs = references(&spec);
        let data = [
            ("REGION".to_string(), b"eu-1".to_vec()),
            ("TEAM".to_string(), b"from-map".to_vec()),
        ]
        .into();
        let (substitution, resolved) =
            merge_vars(&spec, &refs, &[Read::Found(data)], &policy(), "p").unwrap();
        assert_eq!(substitution.vars["REGION"], "eu-1");
        assert_eq!(substitution.vars["TEAM"], "inline", "inline vars win");
        assert!(substitution.strict);
        assert_eq!(resolved[0].name, "platform/cluster-vars");
        assert!(resolved[0].digest.starts_with("sha256:"));
    }

    #[test]
    fn missing_and_invalid_references_are_named() {
        let spec = substitute(false);
        let refs = references(&spec);
        let (reason, message) = merge_vars(
            &spec,
            &refs,
            &[Read::Missing],
            &policy(),
            "processors[0].substitute.varsFrom",
        )
        .unwrap_err();
        assert_eq!(reason, values::REASON_NOT_FOUND);
        assert!(
            message.starts_with(
                "processors[0].substitute.varsFrom[0]: ConfigMap platform/cluster-vars not found"
            ),
            "{message}"
        );
        let optional = substitute(true);
        let (_, resolved) = merge_vars(
            &optional,
            &references(&optional),
            &[Read::Missing],
            &policy(),
            "p",
        )
        .unwrap();
        assert_eq!(resolved[0].digest, values::ABSENT);
        let bad = [("1BAD".to_string(), b"x".to_vec())].into();
        let (reason, _) =
            merge_vars(&spec, &refs, &[Read::Found(bad)], &policy(), "p").unwrap_err();
        assert_eq!(reason, values::REASON_INVALID);
    }
}
