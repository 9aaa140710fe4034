//! Phase 1b, values (helm): read the ConfigMaps and Secrets `config.helm.valuesFrom` names,
//! under the secret-namespace rule (both kinds), and merge them in order, then the inline
//! `values`, into the user values the chart is rendered with (Flux's HelmRelease order; the
//! renderer then puts them over the chart's values.yaml and `valuesFiles`).
//!
//! [`read_values`] does the reads; [`merge`] is pure: which keys are read, what a missing object
//! or key means, what each reference contributed (its digest, recorded in the revision).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use pallet_formats::helm::values::{merge_values, parse_values_document};
use serde_json::{Map, Value};

use super::fetch::{config_map_data, read_under_policy, secret_data, SecretPolicy};
use super::values_watch::{ObjectId, Seen};
use super::ReconcileError;
use crate::api::{BundleDeployment, ResolvedValues, ValuesReference, ValuesSourceKind};

/// Condition reason: a required reference (object or key) is missing.
pub const REASON_NOT_FOUND: &str = "ValuesNotFound";
/// Condition reason: a referenced key is not a YAML mapping of values.
pub const REASON_INVALID: &str = "ValuesInvalid";
/// Condition reason: the secret-namespace rule refuses a reference.
pub const REASON_NOT_ALLOWED: &str = "ValuesNotAllowed";
/// The digest recorded for a missing optional reference.
pub const ABSENT: &str = "absent";

/// The user values a chart is rendered with, and what each `valuesFrom` reference contributed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UserValues {
    /// `valuesFrom` in order, then `values`, merged (a mapping).
    pub values: Value,
    /// Each reference as read, in spec order.
    pub resolved: Vec<ResolvedValues>,
}

/// What reading one referenced object found: its data (by key, in key order), or nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Read {
    /// The object exists.
    Found(BTreeMap<String, Vec<u8>>),
    /// No such object.
    Missing,
}

/// The namespace a reference reads from: its own, or the agent's.
pub fn namespace_of<'a>(reference: &'a ValuesReference, policy: &'a SecretPolicy) -> &'a str {
    reference
        .namespace
        .as_deref()
        .unwrap_or(&policy.agent_namespace)
}

/// Reads every `valuesFrom` object of `bd` (helm only; others have none) and merges. Also returns
/// what was seen of each referenced object, for the watches (see [`super::values_watch`]), even
/// when reading or merging failed: a missing required object must be watched for its creation.
pub async fn read_values(
    client: &Client,
    policy: &SecretPolicy,
    bd: &BundleDeployment,
) -> (Vec<(ObjectId, Seen)>, Result<UserValues, ReconcileError>) {
    let helm = bd.spec.config.as_ref().and_then(|c| c.helm.as_ref());
    let references = helm.map(|h| h.values_from.as_slice()).unwrap_or_default();
    let inline = helm.and_then(|h| h.values.as_ref());
    let (observed, reads) =
        read_references(client, policy, bd, references, "config.helm.valuesFrom").await;
    let reads = match reads {
        Ok(reads) => reads,
        Err(error) => return (observed, Err(error)),
    };
    let merged = merge(references, &reads, policy, inline)
        .map_err(|(reason, message)| ReconcileError::Values { reason, message });
    (observed, merged)
}

/// Reads the objects `references` name (in order) under the secret-namespace rule; `field`
/// names the spec field in messages. Also returns what was seen of each, for the watches.
pub async fn read_references(
    client: &Client,
    policy: &SecretPolicy,
    bd: &BundleDeployment,
    references: &[ValuesReference],
    field: &str,
) -> (Vec<(ObjectId, Seen)>, Result<Vec<Read>, ReconcileError>) {
    let mut observed: Vec<(ObjectId, Seen)> = references
        .iter()
        .map(|r| (object_id(r, policy), Seen::Unknown))
        .collect();
    let mut reads = Vec::with_capacity(references.len());
    for (index, reference) in references.iter().enumerate() {
        match read_one(client, policy, bd, reference, field).await {
            Ok((read, version)) => {
                observed[index].1 = match version {
                    Some(version) => Seen::Version(version),
                    None => Seen::Absent,
                };
                reads.push(read);
            }
            Err(error) => {
                // A reference the namespace rule refuses is not watched: the agent may well
                // have no right to, and only a spec change can lift the refusal. In the agent's
                // own namespace it is: labelling the object for this BundleDeployment lifts it.
                if error.category() == REASON_NOT_ALLOWED
                    && observed[index].0.namespace != policy.agent_namespace
                {
                    observed.remove(index);
                }
                return (observed, Err(error));
            }
        }
    }
    (observed, Ok(reads))
}

/// The watch key of a reference.
pub fn object_id(reference: &ValuesReference, policy: &SecretPolicy) -> ObjectId {
    ObjectId {
        kind: reference.kind,
        namespace: namespace_of(reference, policy).to_string(),
        name: reference.name.clone(),
    }
}

/// Reads one referenced object under the policy (see [`read_under_policy`]); its data and
/// resourceVersion.
async fn read_one(
    client: &Client,
    policy: &SecretPolicy,
    bd: &BundleDeployment,
    reference: &ValuesReference,
    field: &str,
) -> Result<(Read, Option<String>), ReconcileError> {
    let namespace = namespace_of(reference, policy);
    let origin = origin(reference, namespace);
    let name = bd.metadata.name.as_deref().unwrap_or_default();
    let requester = policy.requester(name, &bd.spec);
    let (reference_name, origin_text) = (&reference.name, origin.as_str());
    let read = match reference.kind {
        ValuesSourceKind::ConfigMap => read_under_policy::<ConfigMap>(
            client,
            policy,
            requester,
            namespace,
            reference_name,
            origin_text,
        )
        .await?
        .map(|found| found.map(|map| (config_map_data(&map), map.metadata))),
        ValuesSourceKind::Secret => read_under_policy::<Secret>(
            client,
            policy,
            requester,
            namespace,
            reference_name,
            origin_text,
        )
        .await?
        .map(|found| found.map(|secret| (secret_data(&secret), secret.metadata))),
    };
    let object = read.map_err(|why| ReconcileError::Values {
        reason: REASON_NOT_ALLOWED,
        message: format!("{field}: {origin} {why}"),
    })?;
    Ok(match object {
        Some((data, meta)) => (Read::Found(data), meta.resource_version),
        None => (Read::Missing, None),
    })
}

/// How a reference is named in messages: `ConfigMap team-a/app-values`.
pub fn origin(reference: &ValuesReference, namespace: &str) -> String {
    format!("{:?} {namespace}/{}", reference.kind, reference.name)
}

/// Merges what was read for `references` (`reads`, same order) in order, then `inline` on top.
/// Errors are a condition reason and a message naming kind, namespace, name and key (never the
/// content). Pure.
pub fn merge(
    references: &[ValuesReference],
    reads: &[Read],
    policy: &SecretPolicy,
    inline: Option<&Value>,
) -> Result<UserValues, (&'static str, String)> {
    let mut merged = Map::new();
    let mut resolved = Vec::with_capacity(references.len());
    for (index, (reference, read)) in references.iter().zip(reads).enumerate() {
        let namespace = namespace_of(reference, policy);
        let origin = origin(reference, namespace);
        let at = format!("config.helm.valuesFrom[{index}]");
        let not_found = |what: String| {
            (
                REASON_NOT_FOUND,
                format!(
                    "{at}: {what} (set optional: true to render without it when it is missing)"
                ),
            )
        };
        let documents: Vec<(&str, &[u8])> = match (read, &reference.values_key) {
            (Read::Missing, _) if reference.optional => Vec::new(),
            (Read::Missing, _) => return Err(not_found(format!("{origin} not found"))),
            (Read::Found(data), Some(key)) => match data.get(key) {
                Some(bytes) => vec![(key.as_str(), bytes.as_slice())],
                None if reference.optional => Vec::new(),
                None => return Err(not_found(format!("{origin} has no key {key:?}"))),
            },
            (Read::Found(data), None) => data
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_slice()))
                .collect(),
        };
        let present = match (read, &reference.values_key) {
            (Read::Missing, _) => false,
            (Read::Found(data), Some(key)) => data.contains_key(key),
            (Read::Found(_), None) => true,
        };
        let mut contributed = Map::new();
        for (key, bytes) in documents {
            let document = parse(reference.kind, bytes)
                .map_err(|why| (REASON_INVALID, format!("{at}: {origin} key {key:?} {why}")))?;
            merge_values(&mut contributed, &document);
        }
        let digest = if present {
            let mut canonical = String::new();
            pallet_formats::canonical::write_canonical_json(
                &Value::Object(contributed.clone()),
                &mut canonical,
            );
            pallet_formats::canonical::digest_bytes(canonical.as_bytes())
        } else {
            ABSENT.to_string()
        };
        merge_values(&mut merged, &contributed);
        resolved.push(ResolvedValues {
            kind: reference.kind,
            name: format!("{namespace}/{}", reference.name),
            digest,
        });
    }
    match inline {
        None | Some(Value::Null) => {}
        Some(Value::Object(values)) => merge_values(&mut merged, values),
        Some(_) => {
            return Err((
                REASON_INVALID,
                "config.helm.values must be a mapping".to_string(),
            ))
        }
    }
    Ok(UserValues {
        values: Value::Object(merged),
        resolved,
    })
}

/// One key's content as a values document. A parser's message is shown for a ConfigMap only: it
/// may quote a Secret's content.
fn parse(kind: ValuesSourceKind, bytes: &[u8]) -> Result<Map<String, Value>, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "is not UTF-8 text".to_string())?;
    parse_values_document(text).map_err(|why| match kind {
        ValuesSourceKind::Secret if why.starts_with("not valid YAML") => {
            "is not valid YAML (the parser's message is not shown for a Secret)".to_string()
        }
        _ => why,
    })
}

/// The spec digest a revision records when values come from other objects: the spec's own
/// digest, and every reference's digest. Unchanged when there are none, so revisions recorded
/// before `valuesFrom` existed still match their spec.
pub fn spec_digest(spec_digest: &str, resolved: &[ResolvedValues]) -> String {
    if resolved.is_empty() {
        return spec_digest.to_string();
    }
    let mut text = spec_digest.to_string();
    for r in resolved {
        text.push_str(&format!("\n{:?} {} {}", r.kind, r.name, r.digest));
    }
    pallet_formats::canonical::digest_bytes(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy() -> SecretPolicy {
        SecretPolicy {
            agent_namespace: "pallet-system".into(),
            ..Default::default()
        }
    }

    fn reference(value: Value) -> ValuesReference {
        serde_json::from_value(value).unwrap()
    }

    fn found(entries: &[(&str, &str)]) -> Read {
        Read::Found(
            entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect(),
        )
    }

    #[test]
    fn references_merge_in_order_then_inline_values_win() {
        let refs = [
            reference(json!({"kind": "ConfigMap", "name": "base", "valuesKey": "values.yaml"})),
            reference(json!({"kind": "Secret", "name": "creds", "namespace": "team-a"})),
        ];
        let reads = [
            found(&[
                ("values.yaml", "image: {tag: v1, repo: app}\nreplicas: 1\n"),
                ("other.yaml", "ignored: true\n"),
            ]),
            // Every key, in key order: b.yaml after a.yaml.
            found(&[
                ("b.yaml", "replicas: 3\n"),
                ("a.yaml", "replicas: 2\npassword: s3cret\n"),
            ]),
        ];
        let inline = json!({"image": {"tag": "v2"}});
        let merged = merge(&refs, &reads, &policy(), Some(&inline)).unwrap();
        assert_eq!(
            merged.values,
            json!({"image": {"tag": "v2", "repo": "app"}, "replicas": 3, "password": "s3cret"})
        );
        assert_eq!(merged.resolved.len(), 2);
        assert_eq!(merged.resolved[0].name, "pallet-system/base");
        assert_eq!(merged.resolved[1].name, "team-a/creds");
        assert!(merged.resolved[0].digest.starts_with("sha256:"));
        assert_ne!(merged.resolved[0].digest, merged.resolved[1].digest);
    }

    #[test]
    fn digests_follow_the_values_contributed_not_their_spelling() {
        let refs = [reference(json!({"kind": "ConfigMap", "name": "v"}))];
        let digest = |text: &str| {
            merge(&refs, &[found(&[("values.yaml", text)])], &policy(), None)
                .unwrap()
                .resolved[0]
                .digest
                .clone()
        };
        assert_eq!(digest("a: 1\nb: 2\n"), digest("b: 2\n# comment\na: 1\n"));
        assert_ne!(digest("a: 1\n"), digest("a: 2\n"));
    }

    #[test]
    fn missing_optional_references_are_skipped_and_recorded_absent() {
        let refs = [
            reference(json!({"kind": "ConfigMap", "name": "gone", "optional": true})),
            reference(
                json!({"kind": "ConfigMap", "name": "partial", "valuesKey": "prod.yaml", "optional": true}),
            ),
        ];
        let reads = [Read::Missing, found(&[("dev.yaml", "a: 1\n")])];
        let merged = merge(&refs, &reads, &policy(), None).unwrap();
        assert_eq!(merged.values, json!({}));
        assert_eq!(merged.resolved[0].digest, ABSENT);
        assert_eq!(merged.resolved[1].digest, ABSENT);
    }

    #[test]
    fn missing_required_references_name_kind_namespace_name_and_key() {
        let refs = [reference(
            json!({"kind": "Secret", "name": "db", "namespace": "team-a"}),
        )];
        let (reason, message) = merge(&refs, &[Read::Missing], &policy(), None).unwrap_err();
        assert_eq!(reason, REASON_NOT_FOUND);
        assert!(
            message.starts_with("config.helm.valuesFrom[0]: Secret team-a/db not found"),
            "{message}"
        );
        let refs = [reference(
            json!({"kind": "ConfigMap", "name": "v", "valuesKey": "prod.yaml"}),
        )];
        let (reason, message) =
            merge(&refs, &[found(&[("dev.yaml", "a: 1\n")])], &policy(), None).unwrap_err();
        assert_eq!(reason, REASON_NOT_FOUND);
        assert!(
            message.contains("ConfigMap pallet-system/v has no key \"prod.yaml\""),
            "{message}"
        );
    }

    #[test]
    fn a_key_that_is_not_a_mapping_is_refused_without_showing_a_secret() {
        let refs = [reference(json!({"kind": "ConfigMap", "name": "v"}))];
        let (reason, message) = merge(
            &refs,
            &[found(&[("list.yaml", "- a\n- b\n")])],
            &policy(),
            None,
        )
        .unwrap_err();
        assert_eq!(reason, REASON_INVALID);
        assert!(
            message.contains("ConfigMap pallet-system/v key \"list.yaml\" is a YAML list"),
            "{message}"
        );
        let refs = [reference(json!({"kind": "Secret", "name": "s"}))];
        for content in ["hunter2", "a: [hunter2"] {
            let (reason, message) =
                merge(&refs, &[found(&[("pw", content)])], &policy(), None).unwrap_err();
            assert_eq!(reason, REASON_INVALID);
            assert!(!message.contains("hunter2"), "{message}");
        }
    }

    #[test]
    fn the_spec_digest_moves_with_the_values_and_only_when_there_are_any() {
        assert_eq!(spec_digest("sha256:spec", &[]), "sha256:spec");
        let resolved = |digest: &str| {
            vec![ResolvedValues {
                kind: ValuesSourceKind::ConfigMap,
                name: "ns/v".into(),
                digest: digest.into(),
            }]
        };
        let one = spec_digest("sha256:spec", &resolved("sha256:1"));
        assert_ne!(one, "sha256:spec");
        assert_ne!(one, spec_digest("sha256:spec", &resolved("sha256:2")));
        assert_eq!(one, spec_digest("sha256:spec", &resolved("sha256:1")));
    }
}
