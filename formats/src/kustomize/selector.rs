//! Target selectors of patches and replacements (`group`, `version`, `kind`, `name`,
//! `namespace` as anchored regular expressions, `labelSelector`, `annotationSelector`), matched
//! as kustomize matches them: names and namespaces against the original and the current
//! identity.

use regex::Regex;
use serde::Deserialize;

use super::error::KustomizeError;
use super::openapi::Schema;
use super::resource::Resource;

/// A selector as written in a kustomization.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Selector {
    /// API group (regular expression).
    pub group: String,
    /// API version (regular expression).
    pub version: String,
    /// Kind (regular expression).
    pub kind: String,
    /// Name (regular expression).
    pub name: String,
    /// Namespace (regular expression).
    pub namespace: String,
    /// A Kubernetes label selector (`app=a,tier in (web,api),!legacy`).
    pub label_selector: String,
    /// The same syntax, over annotations.
    pub annotation_selector: String,
}

/// A [`Selector`] ready to match: its expressions compiled, its selectors parsed.
#[derive(Debug, Clone)]
pub struct CompiledSelector {
    group: Option<Regex>,
    version: Option<Regex>,
    kind: Option<Regex>,
    name: Option<Regex>,
    namespace: Option<Regex>,
    labels: Vec<Requirement>,
    annotations: Vec<Requirement>,
}

fn anchored(pattern: &str) -> Result<Option<Regex>, KustomizeError> {
    if pattern.is_empty() {
        return Ok(None);
    }
    Regex::new(&format!("^(?:{pattern})$"))
        .map(Some)
        .map_err(|e| {
            KustomizeError::invalid(format!("invalid regular expression {pattern:?}: {e}"))
        })
}

impl Selector {
    /// Compiles the expressions and parses the label and annotation selectors.
    pub fn compile(&self) -> Result<CompiledSelector, KustomizeError> {
        Ok(CompiledSelector {
            group: anchored(&self.group)?,
            version: anchored(&self.version)?,
            kind: anchored(&self.kind)?,
            name: anchored(&self.name)?,
            namespace: anchored(&self.namespace)?,
            labels: parse_label_selector(&self.label_selector)?,
            annotations: parse_label_selector(&self.annotation_selector)?,
        })
    }
}

impl CompiledSelector {
    /// Whether `resource` is selected. Names and namespaces match when either the original or
    /// the current identity's does; namespaces compare as effective namespaces.
    pub fn matches(&self, resource: &Resource, schema: &Schema) -> bool {
        let cur = resource.cur_id();
        let org = resource.org_id();
        let is = |re: &Option<Regex>, s: &str| re.as_ref().is_none_or(|re| re.is_match(s));
        if !(is(&self.namespace, &org.effective_namespace(schema))
            || is(&self.namespace, &cur.effective_namespace(schema)))
        {
            return false;
        }
        if !(is(&self.name, &org.name) || is(&self.name, &cur.name)) {
            return false;
        }
        let gvk = &cur.gvk;
        if !(is(&self.group, &gvk.group)
            && is(&self.version, &gvk.version)
            && is(&self.kind, &gvk.kind))
        {
            return false;
        }
        let labels = resource.labels();
        let annotations = resource.annotations();
        self.labels.iter().all(|r| r.matches(&labels))
            && self.annotations.iter().all(|r| r.matches(&annotations))
    }
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    /// `key`, or `key in (...)`/`key = v`/`key == v` with values.
    In(String, Vec<String>),
    /// `key != v`, `key notin (...)`.
    NotIn(String, Vec<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    DoesNotExist(String),
}

impl Requirement {
    fn matches(&self, set: &[(&str, &str)]) -> bool {
        let get = |key: &str| set.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
        match self {
            Requirement::In(key, values) => get(key).is_some_and(|v| values.iter().any(|x| x == v)),
            Requirement::NotIn(key, values) => {
                get(key).is_none_or(|v| !values.iter().any(|x| x == v))
            }
            Requirement::Exists(key) => get(key).is_some(),
            Requirement::DoesNotExist(key) => get(key).is_none(),
        }
    }
}

/// Parses a Kubernetes label selector string (`a=b`, `a==b`, `a!=b`, `a in (x,y)`,
/// `a notin (x)`, `a`, `!a`, comma-separated). Empty selects everything.
fn parse_label_selector(text: &str) -> Result<Vec<Requirement>, KustomizeError> {
    let bad = |why: &str| KustomizeError::invalid(format!("invalid selector {text:?}: {why}"));
    let mut requirements = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let (requirement, after) = parse_requirement(rest).ok_or_else(|| bad("cannot parse"))?;
        requirements.push(requirement);
        rest = after.trim_start();
        if let Some(after_comma) = rest.strip_prefix(',') {
            rest = after_comma.trim_start();
            if rest.is_empty() {
                return Err(bad("trailing comma"));
            }
        } else if !rest.is_empty() {
            return Err(bad("expected a comma"));
        }
    }
    Ok(requirements)
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')
}

fn take_word(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    let end = text.find(|c: char| !is_key_char(c)).unwrap_or(text.len());
    text.split_at(end)
}

fn parse_requirement(text: &str) -> Option<(Requirement, &str)> {
    let text = text.trim_start();
    if let Some(rest) = text.strip_prefix('!') {
        let (key, rest) = take_word(rest);
        return (!key.is_empty()).then(|| (Requirement::DoesNotExist(key.to_owned()), rest));
    }
    let (key, rest) = take_word(text);
    if key.is_empty() {
        return None;
    }
    let key = key.to_owned();
    let trimmed = rest.trim_start();
    for (op, negated) in [("==", false), ("!=", true), ("=", false)] {
        if let Some(after) = trimmed.strip_prefix(op) {
            let (value, after) = take_word(after);
            let values = vec![value.to_owned()];
            let requirement = if negated {
                Requirement::NotIn(key, values)
            } else {
                Requirement::In(key, values)
            };
            return Some((requirement, after));
        }
    }
    let (word, after_word) = take_word(trimmed);
    if word == "in" || word == "notin" {
        let after = after_word.trim_start().strip_prefix('(')?;
        let close = after.find(')')?;
        let values = after[..close]
            .split(',')
            .map(|v| v.trim().to_owned())
            .collect();
        let rest = &after[close + 1..];
        let requirement = if word == "in" {
            Requirement::In(key, values)
        } else {
            Requirement::NotIn(key, values)
        };
        return Some((requirement, rest));
    }
    Some((Requirement::Exists(key), rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set<'a>(pairs: &'a [(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        pairs.to_vec()
    }

    #[test]
    fn label_selectors_match_as_kubernetes_does() {
        let labels = set(&[("app", "web"), ("tier", "front")]);
        let ok = |s: &str| {
            parse_label_selector(s)
                .unwrap()
                .iter()
                .all(|r| r.matches(&labels))
        };
        assert!(ok(""));
        assert!(ok("app=web"));
        assert!(ok("app==web,tier"));
        assert!(ok("app in (api, web)"));
        assert!(ok("app notin (api),!legacy"));
        assert!(!ok("app!=web"));
        assert!(!ok("legacy"));
        assert!(!ok("tier in (back)"));
        assert!(parse_label_selector("app=web,").is_err());
        assert!(parse_label_selector("app in web").is_err());
    }
}
