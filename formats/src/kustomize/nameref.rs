//! Name references: once prefixes, suffixes and hashes have renamed objects, every field the
//! `nameReference` configuration knows (a Deployment's `envFrom[].configMapRef.name`, a
//! RoleBinding's `subjects`, a webhook's `service`, ...) that names one of them by an earlier
//! name gets its new name, with kustomize's rules for namespaces and for choosing among
//! several candidates.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::config::TransformerConfig;
use super::error::{KustomizeError, KustomizeErrorKind};
use super::fieldspec::{gvk_selected, walk, FieldSpec};
use super::openapi::Schema;
use super::resmap::ResMap;
use super::resource::{Gvk, ResId, Resource, PREFIXES, SUFFIXES};

/// What the rules need of a resource that may be referred to.
struct Candidate {
    name: String,
    namespace: String,
    kind: String,
    cluster_scoped: bool,
    effective_namespace: String,
    prev_ids: Vec<ResId>,
    prefixes: Vec<String>,
    suffixes: Vec<String>,
}

fn csv(resource: &Resource, key: &str) -> Vec<String> {
    resource
        .annotation(key)
        .map(|v| v.split(',').map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Updates every name reference to a renamed resource.
pub(crate) fn fix_back_references(
    res: &mut ResMap,
    config: &TransformerConfig,
    schema: &Schema,
) -> Result<(), KustomizeError> {
    // Only renamed resources (those with earlier ids) can be referred to by an old name.
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut by_old_name: HashMap<String, Vec<usize>> = HashMap::new();
    for resource in &res.resources {
        let prev_ids = resource.prev_ids();
        if prev_ids.is_empty() {
            continue;
        }
        let cur = resource.cur_id();
        let index = candidates.len();
        let mut names: HashSet<&str> = HashSet::new();
        for id in &prev_ids {
            names.insert(id.name.as_str());
        }
        for name in names {
            by_old_name.entry(name.to_owned()).or_default().push(index);
        }
        candidates.push(Candidate {
            name: cur.name.clone(),
            namespace: cur.namespace.clone(),
            kind: cur.gvk.kind.clone(),
            cluster_scoped: cur.gvk.is_cluster_scoped(schema),
            effective_namespace: cur.effective_namespace(schema),
            prev_ids: prev_ids.clone(),
            prefixes: csv(resource, PREFIXES),
            suffixes: csv(resource, SUFFIXES),
        });
    }
    if candidates.is_empty() {
        // Nothing was renamed, but kustomize still reads every RoleBinding's subjects.
        for resource in &res.resources {
            if resource.org_id().gvk.kind == "RoleBinding" {
                Referrer::of(resource, schema)?;
            }
        }
        return Ok(());
    }
    let namespaces = NamespaceIndex::of(res, schema);
    for resource in &mut res.resources {
        let org = resource.org_id();
        let mut filters: Vec<(&FieldSpec, Gvk)> = Vec::new();
        for back_refs in &config.name_reference {
            for spec in &back_refs.referrers {
                if gvk_selected(&org.gvk, &spec.group, &spec.version, &spec.kind) {
                    filters.push((spec, back_refs.gvk()));
                }
            }
        }
        if filters.is_empty() {
            continue;
        }
        let referrer = Referrer::of(resource, schema)?;
        let mut body = Value::Object(std::mem::take(&mut resource.body));
        let mut result = Ok(());
        for (spec, target_gvk) in filters {
            let context = Context {
                referrer: &referrer,
                target_gvk: &target_gvk,
                role_ref: spec.path.ends_with("roleRef/name"),
                candidates: &candidates,
                by_old_name: &by_old_name,
                namespaces: &namespaces,
            };
            let plain = FieldSpec {
                path: spec.path.clone(),
                ..FieldSpec::default()
            };
            result = walk(&mut body, &plain, None, &mut |node| context.set(node));
            if result.is_err() {
                break;
            }
        }
        if let Value::Object(map) = body {
            resource.body = map;
        }
        result.map_err(|e| {
            KustomizeError::new(
                e.kind,
                format!("updating name references in {}: {}", referrer.id, e.message),
            )
        })?;
    }
    Ok(())
}

/// What the rules need of the resource whose fields are updated.
struct Referrer {
    id: ResId,
    cluster_scoped: bool,
    effective_namespace: String,
    prefixes: Vec<String>,
    suffixes: Vec<String>,
    /// `roleRef`'s group and kind, when it has both.
    role_ref: Option<(String, String)>,
    /// Namespaces of a RoleBinding's ServiceAccount subjects.
    binding_namespaces: HashSet<String>,
}

impl Referrer {
    fn of(resource: &Resource, schema: &Schema) -> Result<Self, KustomizeError> {
        let id = resource.cur_id();
        let role_ref = resource.body.get("roleRef").and_then(|r| {
            let group = r.get("apiGroup")?.as_str()?.to_owned();
            let kind = r.get("kind")?.as_str()?.to_owned();
            Some((group, kind))
        });
        let mut binding_namespaces = HashSet::new();
        if id.gvk.kind == "RoleBinding" {
            if let Some(subjects) = resource.body.get("subjects").and_then(Value::as_array) {
                for subject in subjects {
                    let is_account =
                        subject.get("kind").and_then(Value::as_str) == Some("ServiceAccount");
                    match subject.get("namespace") {
                        Some(Value::String(ns)) if is_account => {
                            binding_namespaces.insert(ns.clone());
                        }
                        Some(_) if is_account => {
                            return Err(KustomizeError::invalid(format!(
                                "Invalid Input: namespace is blank for resource {id}"
                            )))
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok(Referrer {
            cluster_scoped: id.gvk.is_cluster_scoped(schema),
            effective_namespace: id.effective_namespace(schema),
            prefixes: csv(resource, PREFIXES),
            suffixes: csv(resource, SUFFIXES),
            role_ref,
            binding_namespaces,
            id,
        })
    }

    /// kustomize's subset of resources this one may refer to.
    fn may_refer_to(&self, candidate: &Candidate) -> bool {
        self.cluster_scoped
            || candidate.cluster_scoped
            || candidate.effective_namespace == self.effective_namespace
            || self.binding_namespaces.contains(&candidate.namespace)
    }
}

struct Context<'a> {
    referrer: &'a Referrer,
    target_gvk: &'a Gvk,
    role_ref: bool,
    candidates: &'a [Candidate],
    by_old_name: &'a HashMap<String, Vec<usize>>,
    namespaces: &'a NamespaceIndex,
}

/// Which original namespaces resources had, with their current effective namespace and
/// written namespace: whether a referrer's namespace names an original one decides how
/// candidates are grouped.
struct NamespaceIndex {
    original: HashSet<String>,
    original_and_current: HashSet<(String, String)>,
    original_and_written: HashSet<(String, String)>,
}

impl NamespaceIndex {
    fn of(res: &ResMap, schema: &Schema) -> Self {
        let mut index = NamespaceIndex {
            original: HashSet::new(),
            original_and_current: HashSet::new(),
            original_and_written: HashSet::new(),
        };
        for resource in &res.resources {
            let cur = resource.cur_id();
            if cur.gvk.is_cluster_scoped(schema) {
                continue;
            }
            let org = resource.org_id().effective_namespace(schema);
            index.original.insert(org.clone());
            index
                .original_and_current
                .insert((org.clone(), cur.effective_namespace(schema)));
            index.original_and_written.insert((org, cur.namespace));
        }
        index
    }

    /// Whether a resource the referrer may refer to had `namespace` as its original one.
    fn has_original(&self, namespace: &str, referrer: &Referrer) -> bool {
        if !self.original.contains(namespace) {
            return false;
        }
        referrer.cluster_scoped
            || self
                .original_and_current
                .contains(&(namespace.to_owned(), referrer.effective_namespace.clone()))
            || referrer.binding_namespaces.iter().any(|ns| {
                self.original_and_written
                    .contains(&(namespace.to_owned(), ns.clone()))
            })
    }
}

impl Context<'_> {
    fn set(&self, node: &mut Value) -> Result<(), KustomizeError> {
        match node {
            Value::Null => Ok(()),
            Value::Array(items) => {
                for item in items {
                    match item {
                        Value::Null => {}
                        Value::Object(_) => self.set_mapping(item)?,
                        Value::Array(_) => {
                            return Err(KustomizeError::invalid(
                                "a name reference list holds strings or maps",
                            ))
                        }
                        _ => self.set_scalar(item)?,
                    }
                }
                Ok(())
            }
            Value::Object(_) => self.set_mapping(node),
            _ => self.set_scalar(node),
        }
    }

    fn set_scalar(&self, node: &mut Value) -> Result<(), KustomizeError> {
        let Value::String(old) = node else {
            return Ok(());
        };
        let pool: Vec<&Candidate> = self.pool(old, |_| true);
        if let Some(referral) = self.select(pool, false)? {
            if referral.name != *old {
                *old = referral.name.clone();
            }
        }
        Ok(())
    }

    fn set_mapping(&self, node: &mut Value) -> Result<(), KustomizeError> {
        let Value::Object(map) = node else {
            return Ok(());
        };
        let Some(old) = map.get("name") else {
            return Err(KustomizeError::invalid(
                "path config error; no 'name' field in node",
            ));
        };
        let old = super::transformers::scalar_text(old);
        let namespace = map.get("namespace").map(super::transformers::scalar_text);
        let pool: Vec<&Candidate> = match &namespace {
            None => self.pool(&old, |_| true),
            Some(ns) => {
                // Candidates grouped by original namespace first, then by current.
                let original: Vec<&Candidate> = self.pool(&old, |c| {
                    c.prev_ids
                        .first()
                        .is_some_and(|id| effective_of(id, c) == *ns)
                });
                if self.namespaces.has_original(ns, self.referrer) {
                    original
                } else {
                    self.pool(&old, |c| c.effective_namespace == *ns)
                }
            }
        };
        let Some(referral) = self.select(pool, true)? else {
            return Ok(());
        };
        if referral.name == old && referral.namespace.is_empty() {
            return Ok(());
        }
        map.insert("name".into(), Value::String(referral.name.clone()));
        if !referral.namespace.is_empty() {
            map.insert(
                "namespace".into(),
                Value::String(referral.namespace.clone()),
            );
        }
        Ok(())
    }

    /// Candidates once named `old` that pass `keep`, in resource order.
    fn pool(&self, old: &str, keep: impl Fn(&Candidate) -> bool) -> Vec<&Candidate> {
        let Some(indexes) = self.by_old_name.get(old) else {
            return Vec::new();
        };
        indexes
            .iter()
            .map(|i| &self.candidates[*i])
            .filter(|c| self.referrer.may_refer_to(c) && keep(c))
            .collect()
    }

    /// kustomize's choice of the one referral among candidates once named the old name.
    fn select<'c>(
        &self,
        pool: Vec<&'c Candidate>,
        with_namespace: bool,
    ) -> Result<Option<&'c Candidate>, KustomizeError> {
        let target = self.target_gvk;
        let mut pool: Vec<&Candidate> = pool
            .into_iter()
            .filter(|c| {
                c.prev_ids
                    .iter()
                    .any(|id| gvk_selected(&id.gvk, &target.group, &target.version, &target.kind))
            })
            .collect();
        if self.role_ref {
            if let Some((group, kind)) = &self.referrer.role_ref {
                pool.retain(|c| {
                    c.prev_ids
                        .iter()
                        .any(|id| gvk_selected(&id.gvk, group, "", kind))
                });
            }
        }
        if !self.referrer.cluster_scoped {
            pool.retain(|c| {
                c.cluster_scoped
                    || c.kind == "ServiceAccount"
                    || c.effective_namespace == self.referrer.effective_namespace
            });
        }
        if pool.len() == 1 {
            return Ok(pool.pop());
        }
        pool.retain(|c| self.affixes_match(c, true));
        if pool.len() > 1 {
            pool.retain(|c| self.affixes_match(c, false));
        }
        match pool.len() {
            0 => Ok(None),
            1 => Ok(pool.pop()),
            _ => {
                let first = pool[0];
                let identical = pool.iter().all(|c| {
                    c.name == first.name && (!with_namespace || c.namespace == first.namespace)
                });
                if identical {
                    return Ok(Some(first));
                }
                let names: Vec<String> = pool
                    .iter()
                    .map(|c| format!("{}/{}", c.kind, c.name))
                    .collect();
                Err(KustomizeError::new(
                    KustomizeErrorKind::NoMatch,
                    format!("found multiple possible referrals: {}", names.join(", ")),
                ))
            }
        }
    }

    fn affixes_match(&self, candidate: &Candidate, allow_empty: bool) -> bool {
        let r = self.referrer;
        let prefixes = (allow_empty && (candidate.prefixes.is_empty() || r.prefixes.is_empty()))
            || same_ending(&candidate.prefixes, &r.prefixes);
        let suffixes = (allow_empty && (candidate.suffixes.is_empty() || r.suffixes.is_empty()))
            || same_ending(&candidate.suffixes, &r.suffixes);
        prefixes && suffixes
    }
}

/// The effective namespace of an earlier id (recorded effective already, or empty).
fn effective_of(id: &ResId, candidate: &Candidate) -> String {
    if candidate.cluster_scoped {
        return super::resource::NOT_A_NAMESPACE.to_owned();
    }
    if id.namespace.is_empty() {
        super::resource::DEFAULT_NAMESPACE.to_owned()
    } else {
        id.namespace.clone()
    }
}

/// Whether the shorter list is the end of the longer one (two empty lists match; an empty
/// list matches only another empty one).
fn same_ending(a: &[String], b: &[String]) -> bool {
    let (short, long) = if a.len() > b.len() { (b, a) } else { (a, b) };
    if short.is_empty() {
        return long.is_empty();
    }
    let offset = long.len() - short.len();
    short
        .iter()
        .enumerate()
        .all(|(i, s)| long[i + offset] == *s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affix_lists_compare_by_their_ends() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(same_ending(&v(&["a", "b"]), &v(&["b"])));
        assert!(!same_ending(&v(&["a", "b"]), &v(&["a"])));
        assert!(same_ending(&v(&[]), &v(&[])));
        assert!(!same_ending(&v(&[]), &v(&["a"])));
    }
}
