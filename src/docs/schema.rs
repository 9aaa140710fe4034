//! Field tables from a JSON Schema (the CRD's OpenAPI schema, or one generated with schemars):
//! one section per object, each field with its type, whether it is required, its default (as
//! its description states it), its description and its validation.

use serde_json::Value;

use super::markdown::{anchor, code, table};

/// One object of the schema and its fields.
#[derive(Debug)]
pub struct Section {
    /// Where it is, as a field path (`spec.sources[].image`); the heading.
    pub path: String,
    /// The object's own description.
    pub description: String,
    /// Rules on the object as a whole (CEL rules with their messages).
    pub rules: Vec<String>,
    /// Its fields, in the schema's order.
    pub fields: Vec<Field>,
}

/// One field of an object.
#[derive(Debug)]
pub struct Field {
    /// The field's name.
    pub name: String,
    /// Its type as text (`string`, `[]object`, `map[string]string`), linked to its section when
    /// it has one.
    pub type_text: String,
    /// The parent object requires it.
    pub required: bool,
    /// The default its description states (`Default: …`).
    pub default: Option<String>,
    /// Its description.
    pub description: String,
    /// Enum values, patterns, bounds and CEL rules.
    pub validation: Vec<String>,
}

/// Walks JSON Schemas, resolving `$ref`s against the root's `$defs`.
pub struct Walker<'a> {
    root: &'a Value,
    sections: Vec<Section>,
}

impl<'a> Walker<'a> {
    /// The sections of `schema` (inside `root`, for `$ref`s), the top one at `path`.
    pub fn sections(root: &'a Value, schema: &'a Value, path: &str) -> Vec<Section> {
        let mut walker = Walker {
            root,
            sections: Vec::new(),
        };
        walker.object(schema, path);
        walker.sections
    }

    fn resolve(&self, schema: &'a Value) -> &'a Value {
        let mut schema = schema;
        // Bounded: a schema's references form a finite chain to a definition.
        for _ in 0..16 {
            let Some(reference) = schema.get("$ref").and_then(Value::as_str) else {
                break;
            };
            let Some(name) = reference
                .strip_prefix("#/$defs/")
                .or_else(|| reference.strip_prefix("#/definitions/"))
            else {
                break;
            };
            let defs = self
                .root
                .get("$defs")
                .or_else(|| self.root.get("definitions"));
            match defs.and_then(|d| d.get(name)) {
                Some(target) => schema = target,
                None => break,
            }
        }
        // An optional field is `anyOf: [T, null]` (schemars) or `oneOf`: the non-null branch.
        for key in ["anyOf", "oneOf"] {
            if let Some(branches) = schema.get(key).and_then(Value::as_array) {
                let non_null: Vec<&Value> = branches
                    .iter()
                    .filter(|b| b.get("type").and_then(Value::as_str) != Some("null"))
                    .collect();
                if non_null.len() == 1 && branches.len() == 2 {
                    return self.resolve(non_null[0]);
                }
            }
        }
        schema
    }

    /// Records the section of the object `schema` at `path` (and of the objects inside it), when
    /// its fields are described.
    fn object(&mut self, schema: &'a Value, path: &str) {
        let schema = self.resolve(schema);
        let Some(properties) = described_properties(schema) else {
            return;
        };
        let index = self.sections.len();
        self.sections.push(Section {
            path: path.to_string(),
            description: description(schema),
            rules: rules(schema),
            fields: Vec::new(),
        });
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut fields = Vec::new();
        for (name, field) in properties {
            let field_path = join(path, name);
            let (type_text, child) = self.type_text(field, &field_path);
            if let Some((child_schema, child_path)) = child {
                self.object(child_schema, &child_path);
            }
            let original = field;
            let field = self.resolve(field);
            // A description on the referring schema wins over the definition's.
            let text = match description(original) {
                d if !d.is_empty() => d,
                _ => description(field),
            };
            fields.push(Field {
                name: name.clone(),
                type_text,
                required: required.contains(&name.as_str()),
                default: stated_default(&text),
                description: text,
                validation: validation(field),
            });
        }
        self.sections[index].fields = fields;
    }

    /// The type of `field` as text, and the object schema (with its path) that gets a section
    /// of its own, if any.
    fn type_text(&self, field: &'a Value, path: &str) -> (String, Option<(&'a Value, String)>) {
        let field = self.resolve(field);
        let kind = field.get("type").and_then(Value::as_str).unwrap_or("");
        if field.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
            return ("int-or-string".into(), None);
        }
        match kind {
            "array" => {
                let items = field.get("items").map(|i| self.resolve(i));
                let item_path = format!("{path}[]");
                match items {
                    Some(items) => {
                        let (inner, child) = self.type_text(items, &item_path);
                        (format!("array of {inner}"), child)
                    }
                    None => ("array".into(), None),
                }
            }
            "object" => {
                if described_properties(field).is_some() {
                    let link = format!("[object](#{})", anchor(path));
                    return (link, Some((field, path.to_string())));
                }
                if let Some(values) = field.get("additionalProperties").filter(|v| v.is_object()) {
                    let (inner, child) = self.type_text(values, &format!("{path}{{}}"));
                    return (format!("map[string]{inner}"), child);
                }
                if field.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
                    return ("object (any fields)".into(), None);
                }
                ("object".into(), None)
            }
            "" if field.get("properties").is_some() => {
                let link = format!("[object](#{})", anchor(path));
                (link, Some((field, path.to_string())))
            }
            "" => ("any".into(), None),
            other => match field.get("format").and_then(Value::as_str) {
                Some(format) => (format!("{other} ({format})"), None),
                None => (other.to_string(), None),
            },
        }
    }
}

/// The object's properties, when at least one of them is described (objects whose fields are
/// documented elsewhere, such as Kubernetes types with their descriptions stripped, get no
/// section).
fn described_properties(schema: &Value) -> Option<&serde_json::Map<String, Value>> {
    let properties = schema.get("properties")?.as_object()?;
    let described = properties.values().any(|p| {
        p.get("description").is_some()
            || p.get("$ref").is_some()
            || p.get("anyOf").is_some()
            || p.get("oneOf").is_some()
    });
    (described && !properties.is_empty()).then_some(properties)
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn description(schema: &Value) -> String {
    schema
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The default a description states: the text after `Default:` (any case), up to the end of
/// that sentence, or of the parenthesis the statement is in.
pub fn stated_default(description: &str) -> Option<String> {
    let lower = description.to_ascii_lowercase();
    let start = lower.find("default:")? + "default:".len();
    let rest = description[start..].trim_start();
    let mut depth = 0usize;
    let mut end = rest.len();
    let mut chars = rest.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next_is_space = chars.peek().is_none_or(|(_, n)| n.is_whitespace());
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => {
                end = i;
                break;
            }
            ')' => depth -= 1,
            '.' | ';' if depth == 0 && next_is_space => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let text = rest[..end].trim();
    (!text.is_empty()).then(|| text.to_string())
}

fn rules(schema: &Value) -> Vec<String> {
    schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .map(|rules| {
            rules
                .iter()
                .map(|r| {
                    let rule = r.get("rule").and_then(Value::as_str).unwrap_or_default();
                    match r.get("message").and_then(Value::as_str) {
                        Some(message) => format!("{message} (rule: {})", code(rule)),
                        None => format!("rule: {}", code(rule)),
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

fn number(value: &Value) -> Option<String> {
    value.as_f64().map(|n| {
        if n.fract() == 0.0 {
            format!("{}", n as i64)
        } else {
            n.to_string()
        }
    })
}

fn bounds(schema: &Value, min: &str, max: &str, unit: &str) -> Option<String> {
    let lo = schema.get(min).and_then(number);
    let hi = schema.get(max).and_then(number);
    match (lo, hi) {
        (Some(lo), Some(hi)) => Some(format!("{unit} {lo} to {hi}")),
        (Some(lo), None) => Some(format!("{unit} at least {lo}")),
        (None, Some(hi)) => Some(format!("{unit} at most {hi}")),
        (None, None) => None,
    }
}

/// The enum values of `schema`: `enum`, or `oneOf`/`anyOf` branches that are each a `const`.
fn enum_values(schema: &Value) -> Vec<String> {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return values.iter().map(text).collect();
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(branches) = schema.get(key).and_then(Value::as_array) {
            let mut values = Vec::new();
            for branch in branches {
                if let Some(c) = branch.get("const") {
                    values.push(text(c));
                } else if let Some(e) = branch.get("enum").and_then(Value::as_array) {
                    values.extend(e.iter().map(text));
                } else {
                    return Vec::new();
                }
            }
            return values;
        }
    }
    Vec::new()
}

/// Enum values, patterns, bounds and rules of a field.
fn validation(schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let values = enum_values(schema);
    if !values.is_empty() {
        let listed: Vec<String> = values.iter().map(|v| code(v)).collect();
        out.push(format!("one of {}", listed.join(", ")));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        out.push(format!("matches {}", code(pattern)));
    }
    out.extend(bounds(schema, "minLength", "maxLength", "length"));
    out.extend(bounds(schema, "minItems", "maxItems", "items:"));
    out.extend(bounds(schema, "minimum", "maximum", "value"));
    if let Some(format) = schema.get("format").and_then(Value::as_str) {
        if format == "date-time" {
            out.push("an RFC 3339 time".into());
        }
    }
    if let Some(items) = schema.get("items") {
        let item_values = enum_values(items);
        if !item_values.is_empty() {
            let listed: Vec<String> = item_values.iter().map(|v| code(v)).collect();
            out.push(format!("each one of {}", listed.join(", ")));
        }
        if let Some(pattern) = items.get("pattern").and_then(Value::as_str) {
            out.push(format!("each matches {}", code(pattern)));
        }
        out.extend(bounds(items, "minLength", "maxLength", "each of length"));
    }
    match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("map") => {
            let keys: Vec<String> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| k.iter().filter_map(Value::as_str).map(code).collect())
                .unwrap_or_default();
            out.push(format!("a list keyed by {}", keys.join(", ")));
        }
        Some("set") => out.push("a set (no duplicates)".into()),
        _ => {}
    }
    out.extend(rules(schema));
    out
}

/// The sections as Markdown, each under a heading of `level` (`###`).
pub fn render(sections: &[Section], level: &str) -> String {
    let mut out = String::new();
    for section in sections {
        out.push_str(&format!("{level} {}\n\n", section.path));
        if !section.description.is_empty() {
            out.push_str(&format!("{}\n\n", section.description));
        }
        if !section.rules.is_empty() {
            out.push_str("Rules on the whole object:\n\n");
            for rule in &section.rules {
                out.push_str(&format!("- {rule}\n"));
            }
            out.push('\n');
        }
        let rows: Vec<Vec<String>> = section
            .fields
            .iter()
            .map(|f| {
                let mut text = f.description.clone();
                if !f.validation.is_empty() {
                    if !text.is_empty() {
                        text.push_str("<br>");
                    }
                    text.push_str(&format!("Validation: {}.", f.validation.join("; ")));
                }
                vec![
                    code(&f.name),
                    f.type_text.clone(),
                    if f.required { "yes" } else { "" }.to_string(),
                    f.default.clone().unwrap_or_default(),
                    text,
                ]
            })
            .collect();
        out.push_str(&table(
            &["Field", "Type", "Required", "Default", "Description"],
            &rows,
        ));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_are_read_from_descriptions() {
        assert_eq!(
            stated_default("How often. Default: 5m. Refused on pinned refs.").as_deref(),
            Some("5m")
        );
        assert_eq!(
            stated_default("Follow redirects (default: only the URL's own origin).").as_deref(),
            Some("only the URL's own origin")
        );
        assert_eq!(
            stated_default("Default: none (the chart's values). More.").as_deref(),
            Some("none (the chart's values)")
        );
        assert_eq!(stated_default("Default: 1.5h.").as_deref(), Some("1.5h"));
        assert_eq!(stated_default("No default here"), None);
    }

    #[test]
    fn sections_follow_objects_and_arrays_with_their_validation() {
        let schema = json!({
            "type": "object",
            "required": ["items"],
            "properties": {
                "items": {
                    "type": "array",
                    "description": "The items.",
                    "maxItems": 4,
                    "items": {
                        "type": "object",
                        "x-kubernetes-validations": [{"rule": "has(self.a)", "message": "a is required"}],
                        "properties": {
                            "a": {"type": "string", "description": "A. Default: x.", "enum": ["x", "y"]}
                        }
                    }
                }
            }
        });
        let sections = Walker::sections(&schema, &schema, "spec");
        assert_eq!(sections.len(), 2);
        assert_eq!(
            sections[0].fields[0].type_text,
            "array of [object](#specitems)"
        );
        assert!(sections[0].fields[0].required);
        assert_eq!(sections[0].fields[0].validation, ["items: at most 4"]);
        assert_eq!(sections[1].path, "spec.items[]");
        assert_eq!(sections[1].rules, ["a is required (rule: `has(self.a)`)"]);
        assert_eq!(sections[1].fields[0].default.as_deref(), Some("x"));
        assert_eq!(sections[1].fields[0].validation, ["one of `x`, `y`"]);
    }
}
