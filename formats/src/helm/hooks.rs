//! Helm hook annotations, read as helm 3 reads them (`releaseutil.SortManifests`): which events
//! an object is a hook for, its weight and its delete policies. Pure; the agent runs the hooks.
//!
//! The agent reads hooks from the objects' own annotations (not from a side table), so a stored
//! revision snapshot, which keeps only object bodies, still says which objects are hooks.

use serde_json::{Map, Value};

/// The annotation naming a hook's events.
pub const HOOK_ANNOTATION: &str = "helm.sh/hook";
/// The annotation giving a hook's weight (an integer; anything else counts as 0).
pub const WEIGHT_ANNOTATION: &str = "helm.sh/hook-weight";
/// The annotation listing a hook's delete policies.
pub const DELETE_POLICY_ANNOTATION: &str = "helm.sh/hook-delete-policy";

/// A helm 3 hook event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HookEvent {
    /// `pre-install`: before the release's objects, on the first install.
    PreInstall,
    /// `post-install`: after the release's objects, on the first install.
    PostInstall,
    /// `pre-upgrade`: before the release's objects, on an upgrade.
    PreUpgrade,
    /// `post-upgrade`: after the release's objects, on an upgrade.
    PostUpgrade,
    /// `pre-delete`: before an uninstall.
    PreDelete,
    /// `post-delete`: after an uninstall.
    PostDelete,
    /// `pre-rollback`: before a rollback.
    PreRollback,
    /// `post-rollback`: after a rollback.
    PostRollback,
    /// `test` (also spelled `test-success`): run by `helm test`.
    Test,
}

impl HookEvent {
    /// The event for an annotation entry (already trimmed and lower-cased), as helm's table has it.
    pub fn parse(name: &str) -> Option<HookEvent> {
        Some(match name {
            "pre-install" => HookEvent::PreInstall,
            "post-install" => HookEvent::PostInstall,
            "pre-upgrade" => HookEvent::PreUpgrade,
            "post-upgrade" => HookEvent::PostUpgrade,
            "pre-delete" => HookEvent::PreDelete,
            "post-delete" => HookEvent::PostDelete,
            "pre-rollback" => HookEvent::PreRollback,
            "post-rollback" => HookEvent::PostRollback,
            // helm 3 keeps `test-success` as an alias of `test`.
            "test" | "test-success" => HookEvent::Test,
            _ => return None,
        })
    }

    /// The event's name in the annotation.
    pub fn name(self) -> &'static str {
        match self {
            HookEvent::PreInstall => "pre-install",
            HookEvent::PostInstall => "post-install",
            HookEvent::PreUpgrade => "pre-upgrade",
            HookEvent::PostUpgrade => "post-upgrade",
            HookEvent::PreDelete => "pre-delete",
            HookEvent::PostDelete => "post-delete",
            HookEvent::PreRollback => "pre-rollback",
            HookEvent::PostRollback => "post-rollback",
            HookEvent::Test => "test",
        }
    }

    /// True for the events the agent runs: install, upgrade and delete, before and after,
    /// and test (on request).
    pub fn runs_in_the_agent(self) -> bool {
        !matches!(self, HookEvent::PreRollback | HookEvent::PostRollback)
    }

    /// True for the events of a revision's apply: install and upgrade, before and after.
    pub fn is_install_or_upgrade(self) -> bool {
        matches!(
            self,
            HookEvent::PreInstall
                | HookEvent::PostInstall
                | HookEvent::PreUpgrade
                | HookEvent::PostUpgrade
        )
    }
}

/// A `helm.sh/hook-delete-policy` entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DeletePolicy {
    /// `before-hook-creation`: delete the previous object before the hook is created again.
    BeforeHookCreation,
    /// `hook-succeeded`: delete the object once every hook of its event succeeded.
    HookSucceeded,
    /// `hook-failed`: delete the object when it failed.
    HookFailed,
    /// Anything else: helm keeps it (so it still counts as "a policy was given") and it never
    /// matches.
    Other(String),
}

impl DeletePolicy {
    fn parse(text: &str) -> DeletePolicy {
        match text {
            "before-hook-creation" => DeletePolicy::BeforeHookCreation,
            "hook-succeeded" => DeletePolicy::HookSucceeded,
            "hook-failed" => DeletePolicy::HookFailed,
            other => DeletePolicy::Other(other.to_string()),
        }
    }
}

/// What an object's hook annotations say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    /// Its events, in annotation order.
    pub events: Vec<HookEvent>,
    /// `helm.sh/hook-weight` as helm's `strconv.Atoi` reads it; 0 when missing or not an integer.
    pub weight: i64,
    /// `helm.sh/hook-delete-policy` entries as written (empty when the annotation is missing).
    pub delete_policies: Vec<DeletePolicy>,
}

impl Hook {
    /// The delete policies in force: those given, or `before-hook-creation` when none is (helm 3's
    /// default, so that a hook can run again on the next upgrade).
    pub fn effective_delete_policies(&self) -> Vec<DeletePolicy> {
        if self.delete_policies.is_empty() {
            vec![DeletePolicy::BeforeHookCreation]
        } else {
            self.delete_policies.clone()
        }
    }

    /// True when `policy` is in force for this hook.
    pub fn has_delete_policy(&self, policy: &DeletePolicy) -> bool {
        self.effective_delete_policies().contains(policy)
    }

    /// True when the hook runs on `event`.
    pub fn runs_on(&self, event: HookEvent) -> bool {
        self.events.contains(&event)
    }
}

/// Why an object is not a usable hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownHookEvent {
    /// The annotation's value as written.
    pub annotation: String,
}

/// Reads an object's hook annotations. `Ok(None)`: not a hook. `Err`: a hook naming an event
/// helm 3 does not know (`crd-install`, `test-failure`, a typo), which helm drops entirely.
pub fn parse_hook(body: &Map<String, Value>) -> Result<Option<Hook>, UnknownHookEvent> {
    let Some(annotations) = body
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
    else {
        return Ok(None);
    };
    let Some(events) = annotations.get(HOOK_ANNOTATION) else {
        return Ok(None);
    };
    let text = annotation_text(events);
    // Comma-separated, each entry trimmed and lower-cased; one unknown entry drops the hook.
    let mut parsed = Vec::new();
    for entry in text.split(',') {
        match HookEvent::parse(&entry.trim().to_lowercase()) {
            Some(event) => parsed.push(event),
            None => return Err(UnknownHookEvent { annotation: text }),
        }
    }
    let weight = annotations
        .get(WEIGHT_ANNOTATION)
        .map(annotation_text)
        .and_then(|w| go_atoi(&w))
        .unwrap_or(0);
    let delete_policies = annotations
        .get(DELETE_POLICY_ANNOTATION)
        .map(|v| {
            annotation_text(v)
                .split(',')
                .map(|p| DeletePolicy::parse(&p.trim().to_lowercase()))
                .collect()
        })
        .unwrap_or_default();
    Ok(Some(Hook {
        events: parsed,
        weight,
        delete_policies,
    }))
}

/// An annotation value as text (a non-string value, which the API server would refuse anyway,
/// reads as its JSON text).
fn annotation_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Go's `strconv.Atoi`: an optional sign and decimal digits that fit an int64, nothing else.
fn go_atoi(text: &str) -> Option<i64> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hook(annotations: Value) -> Result<Option<Hook>, UnknownHookEvent> {
        let body = json!({"apiVersion": "batch/v1", "kind": "Job",
                          "metadata": {"name": "j", "annotations": annotations}});
        parse_hook(body.as_object().unwrap())
    }

    #[test]
    fn not_a_hook_without_the_annotation() {
        assert_eq!(hook(json!({"other": "x"})), Ok(None));
        let bare = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert_eq!(parse_hook(bare.as_object().unwrap()), Ok(None));
    }

    #[test]
    fn events_are_a_trimmed_case_insensitive_list() {
        let h = hook(json!({"helm.sh/hook": " Pre-Install ,post-upgrade"}))
            .unwrap()
            .unwrap();
        assert_eq!(
            h.events,
            vec![HookEvent::PreInstall, HookEvent::PostUpgrade]
        );
        let t = hook(json!({"helm.sh/hook": "test-success"}))
            .unwrap()
            .unwrap();
        assert_eq!(t.events, vec![HookEvent::Test]);
    }

    #[test]
    fn one_unknown_event_drops_the_hook() {
        for bad in [
            "crd-install",
            "pre-install,test-failure",
            "",
            "pre-install,",
        ] {
            assert!(hook(json!({"helm.sh/hook": bad})).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn weight_is_read_like_go_atoi() {
        for (text, want) in [
            ("5", 5),
            ("-3", -3),
            ("+7", 7),
            (" 5", 0),
            ("1.5", 0),
            ("x", 0),
            ("", 0),
            ("99999999999999999999", 0),
        ] {
            let h = hook(json!({"helm.sh/hook": "pre-install", "helm.sh/hook-weight": text}))
                .unwrap()
                .unwrap();
            assert_eq!(h.weight, want, "{text:?}");
        }
        let none = hook(json!({"helm.sh/hook": "pre-install"}))
            .unwrap()
            .unwrap();
        assert_eq!(none.weight, 0);
    }

    #[test]
    fn delete_policy_defaults_to_before_hook_creation_only_when_none_is_given() {
        let default = hook(json!({"helm.sh/hook": "pre-install"}))
            .unwrap()
            .unwrap();
        assert!(default.delete_policies.is_empty());
        assert_eq!(
            default.effective_delete_policies(),
            vec![DeletePolicy::BeforeHookCreation]
        );
        let given = hook(json!({"helm.sh/hook": "pre-install",
            "helm.sh/hook-delete-policy": "Hook-Succeeded, hook-failed"}))
        .unwrap()
        .unwrap();
        assert_eq!(
            given.effective_delete_policies(),
            vec![DeletePolicy::HookSucceeded, DeletePolicy::HookFailed]
        );
        assert!(!given.has_delete_policy(&DeletePolicy::BeforeHookCreation));
        // A misspelt policy still counts as given, as in helm: no default is added.
        let typo = hook(json!({"helm.sh/hook": "pre-install",
            "helm.sh/hook-delete-policy": "hook-succeded"}))
        .unwrap()
        .unwrap();
        assert!(!typo.has_delete_policy(&DeletePolicy::BeforeHookCreation));
        assert!(!typo.has_delete_policy(&DeletePolicy::HookSucceeded));
    }
}
