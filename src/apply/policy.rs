//! What decides how an object is written besides its content: the annotations a bundle puts on
//! it, and the `spec.driftIgnore` rules of its BundleDeployment.
//!
//! | annotation | value | effect |
//! | --- | --- | --- |
//! | `pallet.dev/apply` | `IfNotPresent` | created when missing, never updated |
//! | `pallet.dev/apply` | `Ignore` | rendered, never applied, not in the inventory, never pruned |
//! | `pallet.dev/prune` | `Disabled` | kept when dropped from a revision or when its BundleDeployment is deleted |
//! | `helm.sh/resource-policy` | `keep` | as `pallet.dev/prune: Disabled` |
//! | `pallet.dev/drift` | `Ignore` | applied with each new revision (or rollback), never corrected in between |
//!
//! Values are compared without regard to case (Flux writes `disabled`); an unknown value of a
//! `pallet.dev/` annotation is an error naming the object, never a silent default.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use kube::core::{Selector, SelectorExt};
use pallet_formats::ObjectKey;
use serde_json::{Map, Value};

use super::pointer::Pointer;
use crate::api::{DriftIgnoreReport, DriftIgnoreRule};

/// How the object is applied: `IfNotPresent` or `Ignore`.
pub const APPLY_ANNOTATION: &str = "pallet.dev/apply";
/// `Disabled`: the object is kept when a prune or a deletion would delete it.
pub const PRUNE_ANNOTATION: &str = "pallet.dev/prune";
/// `Ignore`: the object is out of drift correction.
pub const DRIFT_ANNOTATION: &str = "pallet.dev/drift";
/// Helm's `keep`: honoured as `pallet.dev/prune: Disabled`.
pub const HELM_RESOURCE_POLICY: &str = "helm.sh/resource-policy";

/// A policy that kept pallet from writing or deleting an object, as the change log names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// `pallet.dev/apply: IfNotPresent`.
    ApplyIfNotPresent,
    /// `pallet.dev/apply: Ignore`.
    ApplyIgnore,
    /// `pallet.dev/drift: Ignore`.
    DriftIgnore,
    /// `pallet.dev/prune: Disabled`.
    PruneDisabled,
    /// `helm.sh/resource-policy: keep`.
    HelmKeep,
}

impl Policy {
    /// The annotation and value, as written in a bundle.
    pub fn annotation(self) -> &'static str {
        match self {
            Policy::ApplyIfNotPresent => "pallet.dev/apply: IfNotPresent",
            Policy::ApplyIgnore => "pallet.dev/apply: Ignore",
            Policy::DriftIgnore => "pallet.dev/drift: Ignore",
            Policy::PruneDisabled => "pallet.dev/prune: Disabled",
            Policy::HelmKeep => "helm.sh/resource-policy: keep",
        }
    }
}

/// How an object is applied (`pallet.dev/apply`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ApplyMode {
    /// Created and kept in line with the bundle.
    #[default]
    Always,
    /// Created when missing, never updated.
    IfNotPresent,
    /// Never applied.
    Ignore,
}

/// What a bundle object's annotations say about writing it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObjectPolicy {
    /// `pallet.dev/apply`.
    pub apply: ApplyMode,
    /// `pallet.dev/drift: Ignore`.
    pub drift_ignored: bool,
}

impl ObjectPolicy {
    /// The policy of an object with this body; an error for a value pallet does not know.
    pub fn of(body: &Map<String, Value>) -> Result<ObjectPolicy, String> {
        let annotations = body.get("metadata").and_then(|m| m.get("annotations"));
        let get = |name: &str| {
            annotations
                .and_then(|a| a.get(name))
                .and_then(Value::as_str)
        };
        let apply = match get(APPLY_ANNOTATION) {
            None => ApplyMode::Always,
            Some(v) if v.eq_ignore_ascii_case("IfNotPresent") => ApplyMode::IfNotPresent,
            Some(v) if v.eq_ignore_ascii_case("Ignore") => ApplyMode::Ignore,
            Some(v) => return Err(unknown(APPLY_ANNOTATION, v, "IfNotPresent or Ignore")),
        };
        let drift_ignored = match get(DRIFT_ANNOTATION) {
            None => false,
            Some(v) if v.eq_ignore_ascii_case("Ignore") => true,
            Some(v) => return Err(unknown(DRIFT_ANNOTATION, v, "Ignore")),
        };
        match get(PRUNE_ANNOTATION) {
            Some(v) if !v.eq_ignore_ascii_case("Disabled") => {
                return Err(unknown(PRUNE_ANNOTATION, v, "Disabled"))
            }
            _ => {}
        }
        Ok(ObjectPolicy {
            apply,
            drift_ignored,
        })
    }
}

fn unknown(annotation: &str, value: &str, known: &str) -> String {
    format!("annotation {annotation}: {value:?} is not a value pallet knows (it takes {known})")
}

/// The policy that keeps a live object from being deleted by a prune or a deletion: its
/// annotations as last applied.
pub fn kept_by(annotations: Option<&BTreeMap<String, String>>) -> Option<Policy> {
    let annotations = annotations?;
    let value = |name: &str| annotations.get(name).map(|v| v.trim());
    if value(PRUNE_ANNOTATION).is_some_and(|v| v.eq_ignore_ascii_case("Disabled")) {
        return Some(Policy::PruneDisabled);
    }
    // Helm compares the trimmed value without regard to case.
    if value(HELM_RESOURCE_POLICY).is_some_and(|v| v.eq_ignore_ascii_case("keep")) {
        return Some(Policy::HelmKeep);
    }
    None
}

/// `spec.driftIgnore`, ready to match objects. Clones share the record of which rules matched.
#[derive(Clone, Default)]
pub struct DriftIgnore {
    rules: Arc<Vec<Rule>>,
    matched: Arc<Mutex<BTreeSet<usize>>>,
}

struct Rule {
    paths: Vec<Pointer>,
    group: Option<String>,
    version: Option<String>,
    kind: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
    selector: Option<Selector>,
    /// Why the rule cannot be used (a label selector that is not valid); it then matches nothing.
    invalid: Option<String>,
}

/// An object as a rule's target sees it: as applied (its namespace filled in).
pub struct Candidate<'a> {
    /// Group, kind, namespace and name.
    pub key: &'a ObjectKey,
    /// Its apiVersion.
    pub api_version: &'a str,
    /// Its body, for the labels.
    pub body: &'a Map<String, Value>,
}

impl DriftIgnore {
    /// The rules of a spec.
    pub fn compile(rules: &[DriftIgnoreRule]) -> DriftIgnore {
        let rules = rules
            .iter()
            .map(|rule| {
                let target = rule.target.clone().unwrap_or_default();
                let mut invalid = None;
                let selector = match target.label_selector.map(Selector::try_from).transpose() {
                    Ok(selector) => selector,
                    Err(e) => {
                        invalid = Some(format!("labelSelector is not valid: {e}"));
                        None
                    }
                };
                let paths: Vec<Pointer> = rule
                    .paths
                    .iter()
                    .filter_map(|p| Pointer::parse(p))
                    .collect();
                if paths.len() != rule.paths.len() {
                    invalid = Some("a path is not a JSON pointer (it must start with '/')".into());
                }
                Rule {
                    paths,
                    group: target.group,
                    version: target.version,
                    kind: target.kind,
                    name: target.name,
                    namespace: target.namespace,
                    selector,
                    invalid,
                }
            })
            .collect();
        DriftIgnore {
            rules: Arc::new(rules),
            matched: Arc::default(),
        }
    }

    /// True when there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The paths ignored on `object`, from every rule whose target matches it (each such rule
    /// is recorded as matched).
    pub fn paths_for(&self, object: &Candidate<'_>) -> Vec<Pointer> {
        let mut paths = Vec::new();
        for (index, rule) in self.rules.iter().enumerate() {
            if rule.matches(object) {
                self.matched
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(index);
                paths.extend(rule.paths.iter().cloned());
            }
        }
        paths
    }

    /// The rules that matched no object since these rules were compiled, and those that cannot
    /// be used, each with why.
    pub fn report(&self, revision: Option<i64>) -> Vec<DriftIgnoreReport> {
        let matched = self.matched.lock().unwrap_or_else(|p| p.into_inner());
        let of = revision.map_or("the bundle".to_string(), |n| format!("revision {n}"));
        self.rules
            .iter()
            .enumerate()
            .filter_map(|(index, rule)| {
                let message = match &rule.invalid {
                    Some(why) => why.clone(),
                    None if matched.contains(&index) => return None,
                    None => format!("matches no object of {of} ({})", rule.describe_target()),
                };
                Some(DriftIgnoreReport {
                    rule: index as i64,
                    message,
                })
            })
            .collect()
    }
}

impl Rule {
    fn matches(&self, object: &Candidate<'_>) -> bool {
        if self.invalid.is_some() {
            return false;
        }
        let version = object
            .api_version
            .rsplit_once('/')
            .map_or(object.api_version, |(_, v)| v);
        let same = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        if !(same(&self.group, &object.key.group)
            && same(&self.version, version)
            && same(&self.kind, &object.key.kind)
            && same(&self.name, &object.key.name)
            && same(
                &self.namespace,
                object.key.namespace.as_deref().unwrap_or_default(),
            ))
        {
            return false;
        }
        match &self.selector {
            None => true,
            Some(selector) => {
                let labels: BTreeMap<String, String> = object
                    .body
                    .get("metadata")
                    .and_then(|m| m.get("labels"))
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect();
                selector.matches(&labels)
            }
        }
    }

    /// The target as a user wrote it, for messages.
    fn describe_target(&self) -> String {
        let fields = [
            ("group", &self.group),
            ("version", &self.version),
            ("kind", &self.kind),
            ("name", &self.name),
            ("namespace", &self.namespace),
        ];
        let mut parts: Vec<String> = fields
            .iter()
            .filter_map(|(field, value)| value.as_ref().map(|v| format!("{field} {v:?}")))
            .collect();
        if let Some(selector) = &self.selector {
            parts.push(format!("labelSelector {selector}"));
        }
        if parts.is_empty() {
            "no target: every object".into()
        } else {
            format!("target {}", parts.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(value: Value) -> DriftIgnore {
        DriftIgnore::compile(&serde_json::from_value::<Vec<DriftIgnoreRule>>(value).unwrap())
    }

    fn key(group: &str, kind: &str, namespace: &str, name: &str) -> ObjectKey {
        ObjectKey {
            group: group.into(),
            kind: kind.into(),
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }

    #[test]
    fn annotations_decide_the_object_policy() {
        let body = |annotations: Value| {
            json!({"metadata": {"name": "x", "annotations": annotations}})
                .as_object()
                .unwrap()
                .clone()
        };
        assert_eq!(
            ObjectPolicy::of(&body(json!({}))).unwrap(),
            ObjectPolicy::default()
        );
        let p = ObjectPolicy::of(&body(json!({APPLY_ANNOTATION: "ifnotpresent"}))).unwrap();
        assert_eq!(p.apply, ApplyMode::IfNotPresent);
        let p = ObjectPolicy::of(&body(
            json!({APPLY_ANNOTATION: "Ignore", DRIFT_ANNOTATION: "Ignore"}),
        ))
        .unwrap();
        assert_eq!(p.apply, ApplyMode::Ignore);
        assert!(p.drift_ignored);
        let error = ObjectPolicy::of(&body(json!({APPLY_ANNOTATION: "Sometimes"}))).unwrap_err();
        assert!(
            error.contains("pallet.dev/apply") && error.contains("Sometimes"),
            "{error}"
        );
        assert!(ObjectPolicy::of(&body(json!({PRUNE_ANNOTATION: "off"}))).is_err());
        assert!(ObjectPolicy::of(&body(json!({PRUNE_ANNOTATION: "disabled"}))).is_ok());
    }

    #[test]
    fn prune_and_helm_keep_annotations_keep_an_object() {
        let of = |pairs: &[(&str, &str)]| {
            let map: BTreeMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            kept_by(Some(&map))
        };
        assert_eq!(
            of(&[(PRUNE_ANNOTATION, "disabled")]),
            Some(Policy::PruneDisabled)
        );
        assert_eq!(
            of(&[(HELM_RESOURCE_POLICY, " Keep ")]),
            Some(Policy::HelmKeep)
        );
        assert_eq!(of(&[(HELM_RESOURCE_POLICY, "delete")]), None);
        assert_eq!(kept_by(None), None);
    }

    #[test]
    fn rules_match_by_target_and_report_what_matched_nothing() {
        let ignore = rules(json!([
            {"paths": ["/spec/replicas"], "target": {"group": "apps", "kind": "Deployment"}},
            {"paths": ["/data/a"], "target": {"kind": "ConfigMap", "name": "typo"}},
            {"paths": ["/metadata/annotations/x"], "target": {"labelSelector": {"matchLabels": {"tier": "web"}}}},
            {"paths": ["/spec/x"], "target": {"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]}}},
        ]));
        let web = json!({"metadata": {"labels": {"tier": "web"}}});
        let deployment = key("apps", "Deployment", "ns", "web");
        let paths = ignore.paths_for(&Candidate {
            key: &deployment,
            api_version: "apps/v1",
            body: web.as_object().unwrap(),
        });
        let texts: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
        assert_eq!(texts, ["/spec/replicas", "/metadata/annotations/x"]);
        let other = key("", "ConfigMap", "ns", "web");
        assert!(ignore
            .paths_for(&Candidate {
                key: &other,
                api_version: "v1",
                body: &Map::new(),
            })
            .is_empty());
        let report = ignore.report(Some(3));
        let rules: Vec<i64> = report.iter().map(|r| r.rule).collect();
        assert_eq!(rules, [1, 3]);
        assert!(
            report[0].message.contains("revision 3") && report[0].message.contains("\"typo\""),
            "{}",
            report[0].message
        );
        assert!(
            report[1].message.contains("labelSelector"),
            "{}",
            report[1].message
        );
    }
}
