//! `docs/reference/api.md` and `api-set.md`: the BundleDeployment and BundleDeploymentSet APIs
//! from their CustomResourceDefinitions' schemas.

use kube::CustomResourceExt as _;
use serde_json::Value;

use super::markdown::{code, generated_note, table};
use super::schema::{render, Section, Walker};
use crate::api::{BundleDeployment, BundleDeploymentSet};

/// The served version's OpenAPI schema of `crd`, as the API server holds it.
fn schema_of(crd: &Value) -> anyhow::Result<Value> {
    crd.pointer("/spec/versions/0/schema/openAPIV3Schema")
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("the CRD has no openAPIV3Schema"))
}

/// The sections of the spec and of the status of `crd`.
fn sections_of(crd: &Value) -> anyhow::Result<(Vec<Section>, Vec<Section>)> {
    let schema = schema_of(crd)?;
    let spec = schema
        .pointer("/properties/spec")
        .ok_or_else(|| anyhow::anyhow!("the schema has no spec"))?;
    let status = schema
        .pointer("/properties/status")
        .ok_or_else(|| anyhow::anyhow!("the schema has no status"))?;
    Ok((
        Walker::sections(&schema, spec, "spec"),
        Walker::sections(&schema, status, "status"),
    ))
}

/// The sections of the BundleDeployment's spec and of its status.
#[cfg(test)]
pub(crate) fn sections() -> anyhow::Result<(Vec<Section>, Vec<Section>)> {
    sections_of(&serde_json::to_value(BundleDeployment::crd())?)
}

/// The BundleDeployment page.
pub fn page() -> anyhow::Result<String> {
    page_of(&serde_json::to_value(BundleDeployment::crd())?)
}

/// The BundleDeploymentSet page.
pub fn set_page() -> anyhow::Result<String> {
    page_of(&serde_json::to_value(BundleDeploymentSet::crd())?)
}

/// The page of `crd`.
fn page_of(crd: &Value) -> anyhow::Result<String> {
    let version = crd
        .pointer("/spec/versions/0")
        .ok_or_else(|| anyhow::anyhow!("the CRD has no version"))?;
    let text = |pointer: &str| {
        crd.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let mut out = format!("# {} API\n\n", text("/spec/names/kind"));
    out.push_str(&generated_note(
        "the CustomResourceDefinitions (`pallet crd`)",
    ));
    out.push_str(&format!(
        "\n{}\n\n",
        crd.pointer("/spec/versions/0/schema/openAPIV3Schema/description")
            .and_then(Value::as_str)
            .unwrap_or_default()
    ));
    let short_names: Vec<String> = crd
        .pointer("/spec/names/shortNames")
        .and_then(Value::as_array)
        .map(|n| n.iter().filter_map(Value::as_str).map(code).collect())
        .unwrap_or_default();
    out.push_str(&table(
        &["", ""],
        &[
            vec!["Group".into(), code(&text("/spec/group"))],
            vec![
                "Version".into(),
                code(version["name"].as_str().unwrap_or_default()),
            ],
            vec!["Kind".into(), code(&text("/spec/names/kind"))],
            vec!["Plural".into(), code(&text("/spec/names/plural"))],
            vec!["Short names".into(), short_names.join(", ")],
            vec!["Scope".into(), text("/spec/scope")],
        ],
    ));
    out.push_str(
        "\nDefaults are applied by the agent, not by the API server: an unset field stays unset \
         in the object, and the default column says what the agent does then. Everything the \
         API server can check by itself is in the schema, so a bad object is refused by \
         `kubectl apply` with the message shown under Validation.\n\n",
    );
    out.push_str("## Columns of `kubectl get`\n\n");
    let columns: Vec<Vec<String>> = version
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            let field = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default();
            vec![
                field("name").to_string(),
                field("type").to_string(),
                code(field("jsonPath")),
                field("description").to_string(),
            ]
        })
        .collect();
    out.push_str(&table(
        &["Column", "Type", "JSONPath", "Description"],
        &columns,
    ));
    let (spec, status) = sections_of(crd)?;
    out.push_str("\n## Spec\n\n");
    out.push_str(&render(&spec, "###"));
    out.push_str("## Status\n\nWritten by the agent only.\n\n");
    out.push_str(&render(&status, "###"));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `kubectl explain` shows the descriptions: each optional field of the spec says what
    /// happens when it is unset.
    #[test]
    fn every_optional_spec_field_states_its_default() {
        let (spec, _) = sections().unwrap();
        let mut missing = Vec::new();
        // Kubernetes' own types are documented upstream.
        let upstream = [
            "spec.healthChecks[].selector",
            "spec.driftIgnore[].target.labelSelector",
        ];
        for section in &spec {
            if upstream.iter().any(|u| section.path.starts_with(u)) {
                continue;
            }
            for field in &section.fields {
                // A field one of a set of alternatives says which is required instead.
                let conditional = field.description.to_lowercase().contains("required");
                if !field.required && field.default.is_none() && !conditional {
                    missing.push(format!("{}.{}", section.path, field.name));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "these optional spec fields do not state their default (`Default: …` in the doc \
             comment of the field, or of its enum type) nor when they are required: \
             {missing:#?}"
        );
    }

    #[test]
    fn the_page_shows_fields_validation_and_rules() {
        let page = page().unwrap();
        for text in [
            "### spec.sources[]",
            "| `pollInterval` | string |  | 5m |",
            "matches `^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`"
                .replace('|', "\\|")
                .as_str(),
            "exactly one of commit, tag, branch or semver must be set",
            "one of `Rollback`, `Hold`",
            "| Ready | string |",
        ] {
            assert!(page.contains(text), "{text:?} missing from the API page");
        }
    }
}
