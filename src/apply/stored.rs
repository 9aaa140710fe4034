//! What the API server keeps of what pallet applies. It may drop a field (one a built-in type
//! does not have, like a stray `spec.template.containers` on a Deployment, or one a CRD's
//! structural schema prunes), or store a value in another form (a quantity `1000m` as `1`), or
//! a mutating webhook may change it. Compared with the bundle as is, such an object would differ
//! at every pass and be applied again for ever; compared with what the server keeps, it matches.
//!
//! Learnt for free from the answer of every write (the object as stored), and otherwise from a
//! server-side dry-run (see [`crate::apply::Applier`]); kept in memory per object, only for
//! objects where the two differ, and only for the exact content it was learnt from: new content
//! is compared as it is until its own write answers.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use pallet_formats::ObjectKey;
use serde_json::Value;

use super::plan::{differing_steps, Step};

/// At most this many adjusted fields are kept per object; an object with more is compared as
/// it is (it is written again, and the change log lists the fields).
const ADJUSTMENTS_LIMIT: usize = 64;

/// The stored forms of objects whose stored form differs from what pallet applied. Clones share
/// them.
#[derive(Clone, Default)]
pub struct StoredForms {
    forms: Arc<Mutex<HashMap<(String, ObjectKey), Form>>>,
}

struct Form {
    /// Fingerprint of the applied content (as compared: ignored paths left out) it was learnt for.
    applied: u64,
    /// Each field where the stored object differs, and its stored value (None: dropped).
    adjustments: Vec<(Vec<Step>, Option<Value>)>,
}

/// What is known of how the API server stores an object's content.
#[derive(Debug, PartialEq)]
pub enum Expected {
    /// The content is stored as it is applied, or nothing is known of it.
    AsApplied,
    /// The server stores this instead.
    Stored(Value),
}

impl StoredForms {
    /// What the API server is expected to hold for `applied` (the content as compared) of the
    /// object `api_version` `key`.
    pub fn expected(&self, api_version: &str, key: &ObjectKey, applied: &Value) -> Expected {
        let forms = self.forms.lock().unwrap_or_else(|p| p.into_inner());
        let Some(form) = forms.get(&(api_version.to_string(), key.clone())) else {
            return Expected::AsApplied;
        };
        if form.applied != fingerprint(applied) {
            return Expected::AsApplied;
        }
        let mut stored = applied.clone();
        for (steps, value) in &form.adjustments {
            match value {
                Some(value) => set(&mut stored, steps, value.clone()),
                None => remove(&mut stored, steps),
            }
        }
        Expected::Stored(stored)
    }

    /// Whether anything is known of the object (a form for some content).
    pub fn knows(&self, api_version: &str, key: &ObjectKey) -> bool {
        self.forms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&(api_version.to_string(), key.clone()))
    }

    /// Records how the server stored `applied` (the content as compared) of the object: `stored`
    /// is a write's (or a dry-run's) answer. Returns the paths where they differ.
    pub fn learn(
        &self,
        api_version: &str,
        key: &ObjectKey,
        applied: &Value,
        stored: &Value,
    ) -> Vec<Vec<Step>> {
        let differing = differing_steps(applied, stored, ADJUSTMENTS_LIMIT + 1);
        let id = (api_version.to_string(), key.clone());
        let mut forms = self.forms.lock().unwrap_or_else(|p| p.into_inner());
        if differing.is_empty() || differing.len() > ADJUSTMENTS_LIMIT {
            forms.remove(&id);
            return differing;
        }
        let adjustments = differing
            .iter()
            .map(|steps| (steps.clone(), get(stored, steps).cloned()))
            .collect();
        forms.insert(
            id,
            Form {
                applied: fingerprint(applied),
                adjustments,
            },
        );
        differing
    }

    /// Forgets the object (deleted).
    pub fn forget(&self, api_version: &str, key: &ObjectKey) {
        self.forms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(api_version.to_string(), key.clone()));
    }

    /// How many objects have a stored form that differs (for tests and metrics).
    pub fn len(&self) -> usize {
        self.forms.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// True when no object has one.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A fingerprint of a JSON value (serde_json's maps are sorted, so equal values have equal text).
fn fingerprint(value: &Value) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.to_string().hash(&mut hasher);
    hasher.finish()
}

fn get<'a>(value: &'a Value, steps: &[Step]) -> Option<&'a Value> {
    steps.iter().try_fold(value, |node, step| match step {
        Step::Key(key) => node.get(key),
        Step::Index(i) => node.get(*i),
    })
}

fn get_mut<'a>(value: &'a mut Value, steps: &[Step]) -> Option<&'a mut Value> {
    steps.iter().try_fold(value, |node, step| match step {
        Step::Key(key) => node.get_mut(key),
        Step::Index(i) => node.get_mut(*i),
    })
}

fn set(value: &mut Value, steps: &[Step], new: Value) {
    let Some((last, parents)) = steps.split_last() else {
        *value = new;
        return;
    };
    match (get_mut(value, parents), last) {
        (Some(Value::Object(map)), Step::Key(key)) => {
            map.insert(key.clone(), new);
        }
        (Some(Value::Array(list)), Step::Index(i)) if *i < list.len() => list[*i] = new,
        _ => {}
    }
}

fn remove(value: &mut Value, steps: &[Step]) {
    let Some((last, parents)) = steps.split_last() else {
        return;
    };
    // A list element the server dropped is not removed alone: lists of another length differ
    // at the list itself, which is then adjusted as a whole.
    if let (Some(Value::Object(map)), Step::Key(key)) = (get_mut(value, parents), last) {
        map.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::plan::differing_paths;
    use serde_json::json;

    fn key() -> ObjectKey {
        ObjectKey {
            group: "apps".into(),
            kind: "Deployment".into(),
            namespace: Some("ns".into()),
            name: "web".into(),
        }
    }

    #[test]
    fn a_dropped_field_and_a_reformatted_value_are_not_differences_once_learnt() {
        let forms = StoredForms::default();
        let applied = json!({"spec": {"replicas": 1, "template": {
            "containers": [{"name": "stray"}],
            "spec": {"containers": [{"name": "app", "resources": {"limits": {"cpu": "1000m"}}}]}}}});
        // As the server answered the write: the stray list dropped, the quantity normalised.
        let stored = json!({"metadata": {"resourceVersion": "9"}, "spec": {"replicas": 1, "template": {
            "spec": {"containers": [{"name": "app", "resources": {"limits": {"cpu": "1"}},
                                     "imagePullPolicy": "Always"}]}}}});
        assert_eq!(
            differing_paths(&applied, &stored, 10),
            [
                ".spec.template.containers",
                ".spec.template.spec.containers[0].resources.limits.cpu"
            ]
        );
        assert_eq!(
            forms.expected("apps/v1", &key(), &applied),
            Expected::AsApplied
        );
        assert_eq!(forms.learn("apps/v1", &key(), &applied, &stored).len(), 2);
        let Expected::Stored(expected) = forms.expected("apps/v1", &key(), &applied) else {
            panic!("learnt");
        };
        assert!(differing_paths(&expected, &stored, 10).is_empty());
        // A real change is still one.
        let mut edited = stored.clone();
        edited["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] =
            json!("2");
        assert_eq!(
            differing_paths(&expected, &edited, 10),
            [".spec.template.spec.containers[0].resources.limits.cpu"]
        );
        // Other content is compared as it is until its own write answers.
        let mut changed = applied.clone();
        changed["spec"]["replicas"] = json!(2);
        assert_eq!(
            forms.expected("apps/v1", &key(), &changed),
            Expected::AsApplied
        );
        assert!(forms.knows("apps/v1", &key()));
        // Stored as applied: nothing kept.
        forms.learn(
            "apps/v1",
            &key(),
            &json!({"a": 1}),
            &json!({"a": 1, "b": 2}),
        );
        assert!(forms.is_empty());
    }
}
