//! `vars`: a var names a field of one object (`objref`, `fieldref`), and `$(NAME)` in the
//! fields the `varReference` configuration lists is replaced by that field's value once the
//! whole build is done.

use serde_json::Value;

use super::error::{KustomizeError, KustomizeErrorKind};
use super::fieldspec::walk;
use super::kustomization::Var;
use super::openapi::Schema;
use super::resource::{Gvk, ResId, DEFAULT_NAMESPACE};
use super::target::Accumulator;

/// The default field a var reads.
const DEFAULT_FIELD_PATH: &str = "metadata.name";

/// Records a kustomization's vars: the one resource each var's `objref` names is marked with
/// the var's name, and the var joins the build's set (a name may be declared once).
pub(crate) fn merge_vars(
    acc: &mut Accumulator,
    vars: &[Var],
    schema: &Schema,
) -> Result<(), KustomizeError> {
    for var in vars {
        let target = target_id(var);
        let with_namespace = !target.namespace.is_empty();
        let target_ns = written_effective(&target.namespace);
        let mut matched = Vec::new();
        for (index, resource) in acc.resources.resources.iter().enumerate() {
            let found = resource
                .prev_ids()
                .iter()
                .chain(std::iter::once(&resource.cur_id()))
                .any(|id| {
                    id.gvk == target.gvk
                        && id.name == target.name
                        && (!with_namespace || id.effective_namespace(schema) == target_ns)
                });
            if found {
                matched.push(index);
            }
        }
        if matched.len() > 1 {
            return Err(KustomizeError::new(
                KustomizeErrorKind::NoMatch,
                format!(
                    "found {} resId matches for var {} (unable to disambiguate)",
                    matched.len(),
                    var.name
                ),
            ));
        }
        if let Some(index) = matched.first() {
            acc.resources.resources[*index]
                .ref_var_names
                .push(var.name.clone());
        }
    }
    for var in vars {
        if acc.vars.contains_key(&var.name) {
            return Err(KustomizeError::new(
                KustomizeErrorKind::Conflict,
                format!("var '{}' already encountered", var.name),
            ));
        }
        let mut var = var.clone();
        if var.fieldref.field_path.is_empty() {
            var.fieldref.field_path = DEFAULT_FIELD_PATH.to_owned();
        }
        acc.vars.insert(var.name.clone(), var);
    }
    Ok(())
}

fn written_effective(namespace: &str) -> String {
    if namespace.is_empty() {
        DEFAULT_NAMESPACE.to_owned()
    } else {
        namespace.to_owned()
    }
}

/// The id a var's `objref` names (`apiVersion` wins over `group`/`version`).
fn target_id(var: &Var) -> ResId {
    let r = &var.objref;
    let mut gvk = Gvk {
        group: r.group.clone(),
        version: r.version.clone(),
        kind: r.kind.clone(),
    };
    if !r.api_version.is_empty() {
        let parts: Vec<&str> = r.api_version.split('/').collect();
        match parts.as_slice() {
            [group, version] => {
                gvk.group = (*group).to_owned();
                gvk.version = (*version).to_owned();
            }
            [version] => gvk.version = (*version).to_owned(),
            _ => {}
        }
    }
    ResId {
        gvk,
        name: r.name.clone(),
        namespace: r.namespace.clone(),
    }
}

/// Replaces `$(NAME)` in the `varReference` fields of every resource by the vars' values.
pub(crate) fn resolve(acc: &mut Accumulator, schema: &Schema) -> Result<(), KustomizeError> {
    let _ = schema;
    if acc.vars.is_empty() {
        return Ok(());
    }
    let mut values: Vec<(String, Value)> = Vec::new();
    for var in acc.vars.values() {
        let resource = acc
            .resources
            .resources
            .iter()
            .find(|r| r.ref_var_names.iter().any(|n| n == &var.name))
            .ok_or_else(|| {
                KustomizeError::new(
                    KustomizeErrorKind::NoMatch,
                    format!(
                        "var '{}' cannot be mapped to a field in the set of known resources",
                        var.name
                    ),
                )
            })?;
        let body = Value::Object(resource.body.clone());
        let value = lookup_path(&body, &var.fieldref.field_path)
            .filter(|v| !v.is_null())
            .ok_or_else(|| {
                KustomizeError::new(
                    KustomizeErrorKind::NoMatch,
                    format!(
                        "field '{}' specified in var '{}' not found in corresponding resource",
                        var.fieldref.field_path, var.name
                    ),
                )
            })?;
        values.push((var.name.clone(), value.clone()));
    }
    let specs = acc.config.var_reference.clone();
    for resource in &mut acc.resources.resources {
        let gvk = resource.gvk();
        let mut body = Value::Object(std::mem::take(&mut resource.body));
        let mut result = Ok(());
        for spec in specs.iter().filter(|s| s.selects(&gvk)) {
            result = walk(&mut body, spec, None, &mut |node| {
                substitute_node(node, &values)
            });
            if result.is_err() {
                break;
            }
        }
        if let Value::Object(map) = body {
            resource.body = map;
        }
        result?;
    }
    Ok(())
}

fn substitute_node(node: &mut Value, values: &[(String, Value)]) -> Result<(), KustomizeError> {
    match node {
        Value::String(text) => {
            *node = substitute(text, values);
            Ok(())
        }
        Value::Object(map) => {
            for value in map.values_mut() {
                if let Value::String(text) = value {
                    *value = substitute(text, values);
                }
            }
            Ok(())
        }
        Value::Array(items) => {
            for item in items {
                match item {
                    Value::String(text) => *item = substitute(text, values),
                    _ => {
                        return Err(KustomizeError::invalid(
                            "invalid value type expect a string",
                        ))
                    }
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Expands `$(NAME)` references in `input`: `$$` is a literal `$`, unknown names stay as
/// written, and a string that is exactly one reference takes the value's own type.
pub(crate) fn substitute(input: &str, values: &[(String, Value)]) -> Value {
    let lookup = |name: &str| -> Option<&Value> {
        values
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .filter(|v| !v.is_object() && !v.is_array() && !v.is_null())
    };
    let bytes = input.as_bytes();
    let mut out = String::new();
    let mut checkpoint = 0usize;
    let mut cursor = 0usize;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.push_str(&input[checkpoint..cursor]);
            let rest = &input[cursor + 1..];
            let advance;
            match rest.as_bytes()[0] {
                b'$' => {
                    out.push('$');
                    advance = 1;
                }
                b'(' => match rest.find(')') {
                    Some(close) => {
                        let name = &rest[1..close];
                        match lookup(name) {
                            Some(value) => {
                                if input.len() == name.len() + 3 {
                                    return value.clone();
                                }
                                out.push_str(&super::transformers::scalar_text(value));
                            }
                            None => {
                                out.push_str("$(");
                                out.push_str(name);
                                out.push(')');
                            }
                        }
                        advance = close + 1;
                    }
                    None => {
                        out.push_str("$(");
                        advance = 1;
                    }
                },
                _ => {
                    let c = rest.chars().next().map(char::len_utf8).unwrap_or(1);
                    out.push('$');
                    out.push_str(&rest[..c]);
                    advance = c;
                }
            }
            cursor += advance + 1;
            checkpoint = cursor;
        } else {
            cursor += 1;
        }
    }
    out.push_str(&input[checkpoint.min(input.len())..]);
    Value::String(out)
}

/// Looks a dotted field path up (`spec.ports[0].port`, `spec.template.spec.containers.[name=app].image`).
pub(crate) fn lookup_path<'v>(value: &'v Value, path: &str) -> Option<&'v Value> {
    let mut current = value;
    for element in split_dotted(path) {
        current = step(current, &element)?;
    }
    Some(current)
}

fn step<'v>(value: &'v Value, element: &str) -> Option<&'v Value> {
    if let Some(inner) = element.strip_prefix('[').and_then(|e| e.strip_suffix(']')) {
        if let Some((key, wanted)) = inner.split_once('=') {
            return value.as_array()?.iter().find(|item| {
                item.get(key)
                    .map(super::transformers::scalar_text)
                    .as_deref()
                    == Some(wanted)
            });
        }
        let index: usize = inner.parse().ok()?;
        return value.as_array()?.get(index);
    }
    match value {
        Value::Array(items) => items.get(element.parse::<usize>().ok()?),
        Value::Object(map) => map.get(element),
        _ => None,
    }
}

/// Splits a dotted path, keeping bracketed parts whole and splitting `name[0]` into `name`
/// and `[0]`.
pub(crate) fn split_dotted(path: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    for c in path.chars() {
        match c {
            '[' => {
                if depth == 0 && !current.is_empty() {
                    parts.push(std::mem::take(&mut current));
                }
                depth += 1;
                current.push(c);
            }
            ']' => {
                depth = depth.saturating_sub(1);
                current.push(c);
                if depth == 0 {
                    parts.push(std::mem::take(&mut current));
                }
            }
            '.' if depth == 0 => {
                if !current.is_empty() {
                    parts.push(std::mem::take(&mut current));
                }
            }
            _ => current.push(c),
        }
    }
    if !current.is_empty() {
        parts.push(current);
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_expand_as_kustomize_expands_them() {
        let values = vec![("A".to_owned(), json!("x")), ("N".to_owned(), json!(3))];
        assert_eq!(substitute("$(A)-$(B)", &values), json!("x-$(B)"));
        assert_eq!(substitute("$(N)", &values), json!(3));
        assert_eq!(substitute("n=$(N) $$(A) $x", &values), json!("n=3 $(A) $x"));
        assert_eq!(substitute("$(open", &values), json!("$(open"));
    }

    #[test]
    fn dotted_paths_reach_list_elements() {
        let doc = json!({"spec": {"ports": [{"port": 80}], "c": [{"name": "a", "image": "i"}]}});
        assert_eq!(lookup_path(&doc, "spec.ports[0].port"), Some(&json!(80)));
        assert_eq!(
            lookup_path(&doc, "spec.c.[name=a].image"),
            Some(&json!("i"))
        );
        assert_eq!(lookup_path(&doc, "spec.ports.0.port"), Some(&json!(80)));
        assert_eq!(lookup_path(&doc, "spec.missing"), None);
    }
}
