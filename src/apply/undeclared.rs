//! Fields the API server's schema does not declare. A create or an update drops them (a stray
//! `spec.template.containers` on a Deployment, a field a CRD's structural schema prunes), but a
//! server-side apply refuses the whole object (`failed to create typed patch object (…):
//! .spec.template.containers: field not declared in schema`, status 500), one or a few fields at
//! a time. pallet then leaves those fields out and applies the rest, as the server would have
//! stored it, and says which it left out; what the server keeps is then compared as for any
//! object ([`super::stored`]), so such a field is never seen as drift.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use pallet_formats::ObjectKey;
use serde_json::Value;

use super::pointer::Pointer;

/// At most this many refusals are answered by leaving fields out, per write.
const MAX_ATTEMPTS: usize = 16;

/// The start of a server-side apply's refusal of the object's content (a 500, though retrying
/// will not change it).
pub const TYPED_PATCH_REFUSED: &str = "failed to create typed patch object";

/// Server-side apply of `body`, leaving out the fields the schema does not declare until the
/// server takes it. Returns the object written (or, for a dry-run, as it would be) and the
/// fields left out (`.spec.template.containers`).
pub(super) async fn apply_leaving_out_undeclared(
    api: &Api<DynamicObject>,
    key: &ObjectKey,
    params: &PatchParams,
    body: &Value,
) -> Result<(DynamicObject, Vec<String>), kube::Error> {
    let mut body = std::borrow::Cow::Borrowed(body);
    let mut left_out = Vec::new();
    for _ in 0..MAX_ATTEMPTS {
        match api
            .patch(&key.name, params, &Patch::Apply(body.as_ref()))
            .await
        {
            Ok(written) => return Ok((written, left_out)),
            Err(kube::Error::Api(status)) if status.message.contains(TYPED_PATCH_REFUSED) => {
                let paths = undeclared_fields(&status.message);
                let removed: Vec<String> = paths
                    .iter()
                    .filter(|(_, pointer)| pointer.remove(body.to_mut()))
                    .map(|(text, _)| text.clone())
                    .collect();
                if removed.is_empty() {
                    return Err(kube::Error::Api(status));
                }
                tracing::warn!(object = %key, fields = ?removed, "the API server's schema does not declare these fields; applied without them");
                left_out.extend(removed);
            }
            Err(other) => return Err(other),
        }
    }
    let message = format!(
        "{TYPED_PATCH_REFUSED}: still refused after leaving out {} undeclared fields ({})",
        left_out.len(),
        left_out.join(", ")
    );
    Err(kube::Error::Api(
        kube::core::Status::failure(&message, "Invalid")
            .with_code(500)
            .boxed(),
    ))
}

/// The fields a refusal names as not declared in the schema, as written there and as pointers.
/// The server writes paths as `.spec.template.containers`, with `[name="app"]` for an element
/// of a keyed list and `[0]` for a position.
pub fn undeclared_fields(message: &str) -> Vec<(String, Pointer)> {
    message
        .split(['\n', ':'])
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|pair| pair[1].trim() == "field not declared in schema")
        .filter_map(|pair| {
            let path = pair[0].trim();
            // The single-line form: "… (ns/name; apps/v1, Kind=Deployment): .spec.x".
            let path = path.rsplit_once(' ').map_or(path, |(_, p)| p);
            Some((path.to_string(), pointer_of(path)?))
        })
        .collect()
}

/// `.spec.template.spec.containers[name="app"].bogus` as a pointer
/// (`/spec/template/spec/containers/[name=app]/bogus`); None for a form it cannot say.
fn pointer_of(path: &str) -> Option<Pointer> {
    let mut segments = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            segments.push(escape(&after[..end]));
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']')?;
            let inner = &after[..end];
            segments.push(element(inner)?);
            rest = &after[end + 1..];
        } else {
            return None;
        }
    }
    Pointer::parse(&format!("/{}", segments.join("/")))
}

/// A list element as the server names it (`0`, `name="app"`, `port=80,protocol="TCP"`) as a
/// pointer segment; None for a set's value (`="x"`).
fn element(inner: &str) -> Option<String> {
    if inner.parse::<usize>().is_ok() {
        return Some(inner.to_string());
    }
    let pairs: Option<Vec<String>> = inner
        .split(',')
        .map(|pair| {
            let (field, value) = pair.split_once('=')?;
            if field.is_empty() {
                return None;
            }
            let value = value.trim_matches('"');
            Some(format!("{field}={value}"))
        })
        .collect();
    Some(escape(&format!("[{}]", pairs?.join(","))))
}

fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn refusals_name_the_undeclared_fields() {
        let one = "failed to create typed patch object (ns/web; apps/v1, Kind=Deployment): \
                   .spec.template.containers: field not declared in schema";
        let fields: Vec<String> = undeclared_fields(one)
            .iter()
            .map(|(text, pointer)| format!("{text} {pointer}"))
            .collect();
        assert_eq!(
            fields,
            [".spec.template.containers /spec/template/containers"]
        );
        let many = "failed to create typed patch object (ns/web; apps/v1, Kind=Deployment): errors:\n  \
                    .spec.template.spec.containers[name=\"app\"].args[0]: expected string, got &value.valueUnstructured{}\n  \
                    .spec.template.spec.containers[name=\"app\"].bogus: field not declared in schema\n  \
                    .spec.ports[port=80,protocol=\"TCP\"].x: field not declared in schema";
        let fields: Vec<String> = undeclared_fields(many)
            .iter()
            .map(|(_, pointer)| pointer.to_string())
            .collect();
        assert_eq!(
            fields,
            [
                "/spec/template/spec/containers/[name=app]/bogus",
                "/spec/ports/[port=80,protocol=TCP]/x"
            ]
        );
        let mut body = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "x", "bogus": 1}]}}}});
        assert!(undeclared_fields(many)[0].1.remove(&mut body));
        assert_eq!(
            body,
            json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "x"}]}}}})
        );
        assert!(undeclared_fields("the server is on fire").is_empty());
    }
}
