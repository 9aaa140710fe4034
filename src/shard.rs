//! Which BundleDeployments an agent acts for: those matching its `--selector` and, with
//! `--shard KEY`, labelled `sharding.fluxcd.io/key=KEY` (Flux's sharding label, so users of
//! both keep one label per object).
//!
//! The agent's BundleDeployment watch is restricted to this scope by the API server; the same
//! scope is checked in process wherever the agent could otherwise act on an object it read
//! directly (a re-read before a pass, a status write that finds the object changed), since a
//! BundleDeployment can be relabelled into another shard at any moment. Pure: no I/O here.

use std::collections::BTreeMap;

use kube::core::{Expression, Selector, SelectorExt};
use sha2::{Digest, Sha256};

/// The label that assigns a BundleDeployment to a shard (Flux's convention).
pub const SHARD_LABEL: &str = "sharding.fluxcd.io/key";

/// The Lease name when `--lease-name` is not given and the agent is not sharded.
pub const DEFAULT_LEASE_NAME: &str = "pallet-agent";

/// A flag combination or selector the agent refuses at start.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScopeError {
    /// `--selector` does not parse.
    #[error("--selector {selector:?}: {why}")]
    Selector {
        /// The selector as given.
        selector: String,
        /// What is wrong, and where.
        why: String,
    },
    /// The shard key is not a label value.
    #[error("--shard {0:?}: a shard key must be a label value: 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit")]
    ShardKey(String),
    /// `--selector` already constrains the shard label.
    #[error("--selector {0:?} constrains {SHARD_LABEL}, which --shard sets: drop one of them")]
    Overlap(String),
}

/// The BundleDeployments an agent acts for (see the module doc). The default is every one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    shard: Option<String>,
    selector: Selector,
}

impl Scope {
    /// The scope of `--selector` (when given) and `--shard` (when given).
    pub fn new(selector: Option<&str>, shard: Option<&str>) -> Result<Scope, ScopeError> {
        let text = selector.unwrap_or("");
        let expressions = parse_selector(text).map_err(|why| ScopeError::Selector {
            selector: text.to_string(),
            why,
        })?;
        let mut selector: Selector = expressions.iter().cloned().collect();
        if let Some(shard) = shard {
            if !is_label_value(shard) || shard.is_empty() {
                return Err(ScopeError::ShardKey(shard.to_string()));
            }
            if expressions.iter().any(|e| expression_key(e) == SHARD_LABEL) {
                return Err(ScopeError::Overlap(text.to_string()));
            }
            selector.extend(Expression::Equal(SHARD_LABEL.into(), shard.into()));
        }
        Ok(Scope {
            shard: shard.map(String::from),
            selector,
        })
    }

    /// The shard key, when the agent is sharded.
    pub fn shard(&self) -> Option<&str> {
        self.shard.as_deref()
    }

    /// The label selector for the BundleDeployment watch (None: every BundleDeployment).
    pub fn watch_selector(&self) -> Option<String> {
        (!self.selector.selects_all()).then(|| self.selector.to_string())
    }

    /// Whether a BundleDeployment with `labels` is this agent's to act on.
    pub fn contains(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.matches(labels)
    }

    /// The Lease to hold: `--lease-name` when given, else [`DEFAULT_LEASE_NAME`] for an
    /// unsharded agent and `pallet-agent-shard-KEY` for shard KEY, so that each shard elects its
    /// own leader and shards never wait on each other. A key that is not already a valid
    /// object name in lower case (capitals, '_', '.') is lowercased with those replaced by '-'
    /// and gets a short hash of the key appended, so that two keys never share a Lease.
    pub fn lease_name(&self, explicit: Option<&str>) -> String {
        if let Some(name) = explicit {
            return name.to_string();
        }
        let Some(shard) = &self.shard else {
            return DEFAULT_LEASE_NAME.to_string();
        };
        let clean: String = shard
            .chars()
            .map(|c| match c {
                'a'..='z' | '0'..='9' | '-' => c,
                'A'..='Z' => c.to_ascii_lowercase(),
                _ => '-',
            })
            .collect();
        if clean == *shard {
            format!("{DEFAULT_LEASE_NAME}-shard-{clean}")
        } else {
            let hash = Sha256::digest(shard.as_bytes());
            let short: String = hash[..4].iter().map(|b| format!("{b:02x}")).collect();
            format!("{DEFAULT_LEASE_NAME}-shard-{clean}-{short}")
        }
    }

    /// This agent's name in `status.agent`, as the Lease holder and in logs: `base` (the pod
    /// name, else host and pid) for an unsharded agent, `base@KEY` for shard KEY, so a status
    /// says which shard wrote it even where pod names do not.
    pub fn identity(&self, base: &str) -> String {
        match &self.shard {
            Some(shard) => format!("{base}@{shard}"),
            None => base.to_string(),
        }
    }

    /// The field manager of the agent's status writes: `pallet-shard-KEY` for shard KEY, so
    /// `managedFields` show which shard wrote a status; None (the client's default) unsharded.
    pub fn status_field_manager(&self) -> Option<String> {
        self.shard.as_ref().map(|shard| {
            // Field manager names are at most 128 characters; keys are at most 63.
            format!("pallet-shard-{shard}")
        })
    }
}

fn expression_key(expression: &Expression) -> &str {
    match expression {
        Expression::In(key, _)
        | Expression::NotIn(key, _)
        | Expression::Equal(key, _)
        | Expression::NotEqual(key, _)
        | Expression::Exists(key)
        | Expression::DoesNotExist(key) => key,
    }
}

/// Parses a label selector in kubectl's syntax (`a=b`, `a==b`, `a!=b`, `a`, `!a`,
/// `a in (x,y)`, `a notin (x,y)`, comma-separated). The numeric `a>1` / `a<1` forms are not
/// label selectors for objects of this kind in practice and are refused.
pub fn parse_selector(text: &str) -> Result<Vec<Expression>, String> {
    let mut expressions = Vec::new();
    for term in split_terms(text)? {
        let term = term.trim();
        if term.is_empty() {
            if text.trim().is_empty() {
                continue;
            }
            return Err("an empty requirement (two commas in a row, or a trailing comma)".into());
        }
        expressions.push(parse_term(term)?);
    }
    Ok(expressions)
}

/// Splits at the commas outside parentheses.
fn split_terms(text: &str) -> Result<Vec<&str>, String> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' if depth == 0 => depth = 1,
            '(' => return Err("nested parentheses".into()),
            ')' if depth == 1 => depth = 0,
            ')' => return Err("a ')' without its '('".into()),
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("a '(' without its ')'".into());
    }
    terms.push(&text[start..]);
    Ok(terms)
}

fn parse_term(term: &str) -> Result<Expression, String> {
    if let Some(open) = term.find('(') {
        let head: Vec<&str> = term[..open].split_whitespace().collect();
        let close = term
            .rfind(')')
            .filter(|&c| c > open && term[c + 1..].trim().is_empty())
            .ok_or_else(|| format!("{term:?}: expected `key in (values)`"))?;
        let values = term[open + 1..close]
            .split(',')
            .map(|v| value(v.trim(), term))
            .collect::<Result<_, _>>()?;
        return match head.as_slice() {
            [k, "in"] => Ok(Expression::In(key(k, term)?, values)),
            [k, "notin"] => Ok(Expression::NotIn(key(k, term)?, values)),
            _ => Err(format!(
                "{term:?}: expected `key in (values)` or `key notin (values)`"
            )),
        };
    }
    if let Some(rest) = term.strip_prefix('!') {
        if !rest.contains('=') {
            return Ok(Expression::DoesNotExist(key(rest.trim(), term)?));
        }
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(Expression::NotEqual(
            key(k.trim(), term)?,
            value(v.trim(), term)?,
        ));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(Expression::Equal(
            key(k.trim(), term)?,
            value(v.trim(), term)?,
        ));
    }
    if term.contains(['<', '>']) {
        return Err(format!("{term:?}: numeric comparisons are not supported"));
    }
    Ok(Expression::Exists(key(term, term)?))
}

/// A label key: an optional DNS-subdomain prefix and '/', then a name like a label value.
fn key(text: &str, term: &str) -> Result<String, String> {
    let name = match text.split_once('/') {
        Some((prefix, name)) => {
            let prefix_ok = !prefix.is_empty()
                && prefix.len() <= 253
                && prefix
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
            if !prefix_ok {
                return Err(format!("{term:?}: {text:?} is not a label key"));
            }
            name
        }
        None => text,
    };
    if name.is_empty() || !is_label_value(name) {
        return Err(format!("{term:?}: {text:?} is not a label key"));
    }
    Ok(text.to_string())
}

fn value(text: &str, term: &str) -> Result<String, String> {
    if is_label_value(text) {
        Ok(text.to_string())
    } else {
        Err(format!("{term:?}: {text:?} is not a label value"))
    }
}

/// A label value: empty, or up to 63 letters, digits, '-', '_', '.', alphanumeric at both ends.
pub fn is_label_value(text: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    text.is_empty()
        || (text.len() <= 63
            && text.starts_with(alnum)
            && text.ends_with(alnum)
            && text
                .chars()
                .all(|c| alnum(c) || c == '-' || c == '_' || c == '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_parse_as_kubectl_reads_them() {
        let parsed =
            parse_selector("a=b, c==d,e!=f,g,!h,i in (x, y),pallet.dev/j notin (z)").unwrap();
        assert_eq!(
            parsed,
            vec![
                Expression::Equal("a".into(), "b".into()),
                Expression::Equal("c".into(), "d".into()),
                Expression::NotEqual("e".into(), "f".into()),
                Expression::Exists("g".into()),
                Expression::DoesNotExist("h".into()),
                Expression::In("i".into(), ["x".into(), "y".into()].into()),
                Expression::NotIn("pallet.dev/j".into(), ["z".into()].into()),
            ]
        );
        assert_eq!(parse_selector("").unwrap(), vec![]);
        assert_eq!(
            parse_selector("a=").unwrap(),
            vec![Expression::Equal("a".into(), "".into())]
        );
        for bad in [
            "a=b,", "a in (x", "a in x)", "a b", "a>1", "=b", "a=b c", "Bad/x=1",
        ] {
            assert!(parse_selector(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn a_shard_adds_its_label_to_the_selector() {
        let scope = Scope::new(Some("pallet.dev/test=t1"), Some("a")).unwrap();
        assert_eq!(
            scope.watch_selector().as_deref(),
            Some("pallet.dev/test=t1,sharding.fluxcd.io/key=a")
        );
        assert!(scope.contains(&labels(&[("pallet.dev/test", "t1"), (SHARD_LABEL, "a")])));
        // Relabelled to another shard, unlabelled, or outside the selector: not ours.
        assert!(!scope.contains(&labels(&[("pallet.dev/test", "t1"), (SHARD_LABEL, "b")])));
        assert!(!scope.contains(&labels(&[("pallet.dev/test", "t1")])));
        assert!(!scope.contains(&labels(&[("pallet.dev/test", "t2"), (SHARD_LABEL, "a")])));
        assert_eq!(scope.shard(), Some("a"));
    }

    #[test]
    fn the_main_agent_excludes_sharded_bundles_by_selector() {
        let main = Scope::new(Some(&format!("!{SHARD_LABEL}")), None).unwrap();
        assert!(main.contains(&labels(&[("x", "y")])));
        assert!(!main.contains(&labels(&[(SHARD_LABEL, "a")])));
        assert_eq!(Scope::default().watch_selector(), None);
        assert!(Scope::default().contains(&labels(&[(SHARD_LABEL, "a")])));
    }

    #[test]
    fn bad_flag_combinations_are_refused() {
        assert_eq!(
            Scope::new(Some(&format!("!{SHARD_LABEL}")), Some("a")),
            Err(ScopeError::Overlap(format!("!{SHARD_LABEL}")))
        );
        for key in ["", "-a", "a b", "a/b", &"x".repeat(64)] {
            assert_eq!(
                Scope::new(None, Some(key)),
                Err(ScopeError::ShardKey(key.to_string()))
            );
        }
        assert!(matches!(
            Scope::new(Some("a in (b"), None),
            Err(ScopeError::Selector { .. })
        ));
    }

    #[test]
    fn each_shard_has_its_own_lease_identity_and_field_manager() {
        let unsharded = Scope::default();
        assert_eq!(unsharded.lease_name(None), "pallet-agent");
        assert_eq!(unsharded.identity("pod-1"), "pod-1");
        assert_eq!(unsharded.status_field_manager(), None);
        let a = Scope::new(None, Some("shard-a")).unwrap();
        assert_eq!(a.lease_name(None), "pallet-agent-shard-shard-a");
        assert_eq!(a.lease_name(Some("mine")), "mine");
        assert_eq!(a.identity("pod-1"), "pod-1@shard-a");
        assert_eq!(
            a.status_field_manager().as_deref(),
            Some("pallet-shard-shard-a")
        );
        // Keys that are not object names get a hash, so "A_1" and "a-1" differ.
        let upper = Scope::new(None, Some("A_1")).unwrap().lease_name(None);
        let lower = Scope::new(None, Some("a-1")).unwrap().lease_name(None);
        assert!(
            upper.starts_with("pallet-agent-shard-a-1-") && upper.len() == 31,
            "{upper}"
        );
        assert_eq!(lower, "pallet-agent-shard-a-1");
    }
}
