//! The KRM Functions Specification's `ResourceList` (`config.kubernetes.io/v1`): what a
//! `function` processor sends (`items`, `functionConfig`) and reads back (`items`, `results`).

use serde_json::{json, Map, Value};

/// The ResourceList's apiVersion.
pub const API_VERSION: &str = "config.kubernetes.io/v1";

/// A function's answer: the new items and the results it reported.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionOutput {
    /// The objects after the function.
    pub items: Vec<Value>,
    /// Results of severity `error`, as `message (at resource/field)` texts.
    pub errors: Vec<String>,
    /// Results of other severities, as texts.
    pub notes: Vec<String>,
}

/// The request body: `items` and the `functionConfig`. A `config` that is a Kubernetes object
/// (it has a `kind`) is sent as it is; any other map becomes the `data` of a ConfigMap, with
/// non-string values written as JSON, which is how functions conventionally take settings.
pub fn request(items: Vec<Value>, config: Option<&Value>) -> Value {
    let mut list = json!({
        "apiVersion": API_VERSION,
        "kind": "ResourceList",
        "items": items,
    });
    if let Some(config) = config {
        let function_config = if config.get("kind").is_some_and(Value::is_string) {
            config.clone()
        } else {
            let data: Map<String, Value> = config
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| {
                            let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                            (k.clone(), Value::String(text))
                        })
                        .collect()
                })
                .unwrap_or_default();
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "function-input"},
                "data": data,
            })
        };
        list["functionConfig"] = function_config;
    }
    list
}

/// Reads a function's answer (JSON or YAML text).
pub fn parse_response(text: &str) -> Result<FunctionOutput, String> {
    let value: Value = crate::object::from_yaml_str(text)
        .map_err(|e| format!("the answer is not a ResourceList (JSON or YAML): {e}"))?;
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != "ResourceList" {
        return Err(format!(
            "the answer is not a ResourceList (kind {kind:?}, want \"ResourceList\")"
        ));
    }
    let items = match value.get("items") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.clone(),
        Some(_) => return Err("the answer's items is not a list".to_owned()),
    };
    let mut errors = Vec::new();
    let mut notes = Vec::new();
    for result in value
        .get("results")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let text = describe_result(result);
        match result.get("severity").and_then(Value::as_str) {
            Some("error") => errors.push(text),
            _ => notes.push(text),
        }
    }
    Ok(FunctionOutput {
        items,
        errors,
        notes,
    })
}

/// `message (Kind namespace/name, field path, file)`, with the parts the result has.
fn describe_result(result: &Value) -> String {
    let message = result
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("(no message)");
    let mut at = Vec::new();
    if let Some(reference) = result.get("resourceRef") {
        let part = |k: &str| reference.get(k).and_then(Value::as_str).unwrap_or("");
        let ns = part("namespace");
        let name = if ns.is_empty() {
            part("name").to_owned()
        } else {
            format!("{ns}/{}", part("name"))
        };
        at.push(format!("{} {name}", part("kind")));
    }
    if let Some(path) = result
        .get("field")
        .and_then(|f| f.get("path"))
        .and_then(Value::as_str)
    {
        at.push(format!("field {path}"));
    }
    if let Some(path) = result
        .get("file")
        .and_then(|f| f.get("path"))
        .and_then(Value::as_str)
    {
        at.push(format!("file {path}"));
    }
    if at.is_empty() {
        message.to_owned()
    } else {
        format!("{message} ({})", at.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_config_becomes_a_config_map() {
        let body = request(
            vec![json!({"kind": "A"})],
            Some(&json!({"team": "a", "n": 2})),
        );
        assert_eq!(body["kind"], "ResourceList");
        assert_eq!(body["functionConfig"]["kind"], "ConfigMap");
        assert_eq!(body["functionConfig"]["data"]["n"], "2");
        let object = json!({"apiVersion": "fn.example/v1", "kind": "SetTeam", "spec": {}});
        assert_eq!(request(vec![], Some(&object))["functionConfig"], object);
        assert!(request(vec![], None).get("functionConfig").is_none());
    }

    #[test]
    fn results_are_split_by_severity() {
        let out = parse_response(
            "kind: ResourceList\nitems: [{kind: A}]\nresults:\n- {message: bad, severity: error, \
             resourceRef: {kind: Deployment, namespace: ns, name: app}, field: {path: spec.replicas}}\n- {message: fyi, severity: info}\n",
        )
        .unwrap();
        assert_eq!(out.items.len(), 1);
        assert_eq!(
            out.errors,
            vec!["bad (Deployment ns/app, field spec.replicas)"]
        );
        assert_eq!(out.notes, vec!["fyi"]);
        assert!(parse_response("kind: List").is_err());
        assert!(parse_response("{").is_err());
    }
}
