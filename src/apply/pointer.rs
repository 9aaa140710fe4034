//! JSON pointers into objects (RFC 6901), with one addition for lists: a segment that meets a
//! list is an index (`0`) or a merge key in brackets (`[name=app]`, `[containerPort=80,protocol=TCP]`),
//! which picks the element whose fields have those values. Kubernetes lists of objects are keyed
//! that way (containers by `name`, ports by `containerPort` and `protocol`), so a merge key names
//! the same element whatever its position in the bundle or on the cluster.
//!
//! And the managed-fields side: whether a field manager owns a field at or under a pointer,
//! read from `metadata.managedFields` (`fieldsV1`: `f:<field>`, `k:<merge key>`, `v:<value>`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use serde_json::{Map, Value};

/// A parsed JSON pointer. Segments are kept as text: whether one is a map key, an index or a
/// merge key depends on what it meets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pointer {
    text: String,
    segments: Vec<String>,
}

impl std::fmt::Display for Pointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl Pointer {
    /// Parses `text` (`/spec/replicas`); `~1` is `/` and `~0` is `~` inside a segment. None for
    /// text that does not start with `/` or names no field.
    pub fn parse(text: &str) -> Option<Pointer> {
        let rest = text.strip_prefix('/')?;
        if rest.is_empty() {
            return None;
        }
        let segments = rest
            .split('/')
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
            .collect();
        Some(Pointer {
            text: text.to_string(),
            segments,
        })
    }

    /// The value addressed in `value`, if there is one.
    pub fn get<'a>(&self, value: &'a Value) -> Option<&'a Value> {
        self.segments
            .iter()
            .try_fold(value, |node, segment| step(node, segment))
    }

    /// Removes the value addressed in `value` (a list element is taken out of its list); true
    /// when there was one.
    pub fn remove(&self, value: &mut Value) -> bool {
        let Some((last, parents)) = self.segments.split_last() else {
            return false;
        };
        let Some(parent) = parents
            .iter()
            .try_fold(value, |node, segment| step_mut(node, segment))
        else {
            return false;
        };
        match parent {
            Value::Object(map) => map.remove(last).is_some(),
            Value::Array(list) => match position(list, last) {
                Some(index) => {
                    list.remove(index);
                    true
                }
                None => false,
            },
            _ => false,
        }
    }

    /// Sets the value addressed in `value` to `new`, when its parent exists (a map gets the key,
    /// a list element is replaced); true when it was set.
    pub fn set(&self, value: &mut Value, new: Value) -> bool {
        let Some((last, parents)) = self.segments.split_last() else {
            return false;
        };
        let Some(parent) = parents
            .iter()
            .try_fold(value, |node, segment| step_mut(node, segment))
        else {
            return false;
        };
        match parent {
            Value::Object(map) => {
                map.insert(last.clone(), new);
                true
            }
            Value::Array(list) => match position(list, last) {
                Some(index) => {
                    list[index] = new;
                    true
                }
                None => false,
            },
            _ => false,
        }
    }

    /// Whether field manager entries chosen by `whose` own a field at or under this pointer of
    /// `live` (an element of a list is found through `live`, to name it as `fieldsV1` does).
    pub fn owned_by(
        &self,
        live: &Value,
        managed: &[ManagedFieldsEntry],
        whose: impl Fn(&ManagedFieldsEntry) -> bool,
    ) -> bool {
        managed
            .iter()
            .filter(|entry| whose(entry))
            .filter_map(|entry| entry.fields_v1.as_ref())
            .any(|fields| self.owns(live, &fields.0))
    }

    /// Whether the field set `fields` (one manager's `fieldsV1`) reaches this pointer.
    fn owns(&self, live: &Value, fields: &Value) -> bool {
        if fields.as_object().is_none_or(Map::is_empty) {
            return false; // an entry that owns nothing
        }
        let mut node = fields;
        let mut live = Some(live);
        for segment in &self.segments {
            let Some(children) = node.as_object() else {
                return false;
            };
            if children.is_empty() {
                // A leaf above the pointer: the manager owns the whole field (an atomic map or
                // list), so everything in it.
                return true;
            }
            let found = match live {
                Some(Value::Array(list)) => {
                    let element = position(list, segment).map(|i| &list[i]);
                    live = element;
                    element.and_then(|element| element_fields(children, element))
                }
                Some(Value::Object(map)) => {
                    live = map.get(segment);
                    children.get(&format!("f:{segment}"))
                }
                _ => {
                    live = None;
                    children.get(&format!("f:{segment}"))
                }
            };
            match found {
                Some(next) => node = next,
                None => return false,
            }
        }
        true
    }
}

/// The `fieldsV1` entry of a list element: `k:{...}` whose merge-key fields all match the
/// element, or `v:<value>` equal to it.
fn element_fields<'a>(children: &'a Map<String, Value>, element: &Value) -> Option<&'a Value> {
    children.iter().find_map(|(name, node)| {
        if let Some(key) = name.strip_prefix("k:") {
            let key: Map<String, Value> = serde_json::from_str(key).ok()?;
            let matches = key.iter().all(|(field, value)| {
                element
                    .get(field)
                    .is_some_and(|have| scalar_text(have) == scalar_text(value))
            });
            return matches.then_some(node);
        }
        let value: Value = serde_json::from_str(name.strip_prefix("v:")?).ok()?;
        (value == *element).then_some(node)
    })
}

fn step<'a>(node: &'a Value, segment: &str) -> Option<&'a Value> {
    match node {
        Value::Object(map) => map.get(segment),
        Value::Array(list) => position(list, segment).map(|i| &list[i]),
        _ => None,
    }
}

fn step_mut<'a>(node: &'a mut Value, segment: &str) -> Option<&'a mut Value> {
    match node {
        Value::Object(map) => map.get_mut(segment),
        Value::Array(list) => position(list, segment).map(move |i| &mut list[i]),
        _ => None,
    }
}

/// The position in `list` a segment names: an index, or the first element matching a merge key.
fn position(list: &[Value], segment: &str) -> Option<usize> {
    if let Ok(index) = segment.parse::<usize>() {
        return (index < list.len()).then_some(index);
    }
    let keys = merge_key(segment)?;
    list.iter().position(|element| {
        keys.iter().all(|(field, value)| {
            element
                .get(*field)
                .is_some_and(|have| scalar_text(have).as_deref() == Some(*value))
        })
    })
}

/// `[name=app]` or `[containerPort=80,protocol=TCP]` as (field, value) pairs.
fn merge_key(segment: &str) -> Option<Vec<(&str, &str)>> {
    let inner = segment.strip_prefix('[')?.strip_suffix(']')?;
    inner
        .split(',')
        .map(|pair| pair.split_once('='))
        .collect::<Option<Vec<_>>>()
        .filter(|pairs| !pairs.is_empty())
}

/// A scalar as merge keys compare it: a string as is, a number or boolean as written.
fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;
    use serde_json::json;

    fn pointer(text: &str) -> Pointer {
        Pointer::parse(text).unwrap()
    }

    fn deployment() -> Value {
        json!({"metadata": {"annotations": {"example.com/hash": "1", "a~b": "2"}},
               "spec": {"replicas": 3, "template": {"spec": {"containers": [
                   {"name": "app", "image": "app:1", "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                   {"name": "sidecar", "image": "mesh:1"}]}}}})
    }

    #[test]
    fn pointers_address_fields_indexes_and_merge_keys() {
        let d = deployment();
        assert_eq!(pointer("/spec/replicas").get(&d), Some(&json!(3)));
        assert_eq!(
            pointer("/metadata/annotations/example.com~1hash").get(&d),
            Some(&json!("1"))
        );
        assert_eq!(
            pointer("/metadata/annotations/a~0b").get(&d),
            Some(&json!("2"))
        );
        let by_index = pointer("/spec/template/spec/containers/1/image");
        let by_key = pointer("/spec/template/spec/containers/[name=sidecar]/image");
        assert_eq!(by_index.get(&d), Some(&json!("mesh:1")));
        assert_eq!(by_key.get(&d), Some(&json!("mesh:1")));
        let port = pointer(
            "/spec/template/spec/containers/[name=app]/ports/[containerPort=80,protocol=TCP]",
        );
        assert!(port.get(&d).is_some());
        assert!(pointer("/spec/template/spec/containers/[name=none]")
            .get(&d)
            .is_none());
        assert!(pointer("/spec/template/spec/containers/7")
            .get(&d)
            .is_none());
        assert!(Pointer::parse("spec/replicas").is_none());
        assert!(Pointer::parse("/").is_none());
    }

    #[test]
    fn remove_and_set_change_only_what_is_addressed() {
        let mut d = deployment();
        assert!(pointer("/spec/replicas").remove(&mut d));
        assert!(!pointer("/spec/replicas").remove(&mut d), "already gone");
        assert!(d["spec"].get("replicas").is_none());
        assert!(pointer("/spec/template/spec/containers/[name=sidecar]").remove(&mut d));
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        assert!(pointer("/spec/replicas").set(&mut d, json!(5)));
        assert_eq!(d["spec"]["replicas"], 5);
        assert!(
            !pointer("/status/replicas").set(&mut d, json!(5)),
            "no parent"
        );
    }

    fn entry(manager: &str, fields: Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Apply".into()),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        }
    }

    #[test]
    fn ownership_is_read_from_managed_fields() {
        let live = deployment();
        let managed = vec![
            entry(
                "pallet",
                json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"app\"}": {".": {}, "f:image": {}}}}}}}),
            ),
            entry(
                "autoscaler",
                json!({"f:spec": {"f:replicas": {}}, "f:metadata": {"f:annotations": {}}}),
            ),
        ];
        let by =
            |name: &'static str| move |e: &ManagedFieldsEntry| e.manager.as_deref() == Some(name);
        let replicas = pointer("/spec/replicas");
        assert!(replicas.owned_by(&live, &managed, by("autoscaler")));
        assert!(!replicas.owned_by(&live, &managed, by("pallet")));
        let image = pointer("/spec/template/spec/containers/[name=app]/image");
        assert!(image.owned_by(&live, &managed, by("pallet")));
        assert!(pointer("/spec/template/spec/containers/0/image").owned_by(
            &live,
            &managed,
            by("pallet")
        ));
        assert!(
            !pointer("/spec/template/spec/containers/[name=sidecar]/image").owned_by(
                &live,
                &managed,
                by("pallet")
            )
        );
        // An atomic map owned as a whole owns each of its keys.
        assert!(pointer("/metadata/annotations/example.com~1hash").owned_by(
            &live,
            &managed,
            by("autoscaler")
        ));
        // Owning something under the pointer counts.
        assert!(pointer("/spec/template").owned_by(&live, &managed, by("pallet")));
    }
}
