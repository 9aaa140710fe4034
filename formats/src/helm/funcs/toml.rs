//! Helm's `toToml` (BurntSushi/toml's encoder: direct keys before tables, sorted keys, two
//! spaces of indentation per table level) and `fromToml` (read with the `toml` crate).

use super::*;

pub(super) const FUNCS: &[(&str, F)] = &[
    ("toToml", |a| {
        // helm returns the encoder's error as the output; a nil panics in reflect.
        if a[0].is_none() || a[0].is_undefined() {
            return Err(err(
                "error calling toToml: reflect: call of reflect.Value.Type on zero Value",
            ));
        }
        let mut enc = Encoder::default();
        Ok(Value::from(match enc.encode(&[], &a[0]) {
            Ok(()) => enc.out,
            Err(e) => e,
        }))
    }),
    ("fromToml", |a| {
        let text = s(&a[0]);
        toml_nesting(&text)?;
        Ok(match text.parse::<::toml::Table>() {
            Ok(t) => GoMap::value(t.into_iter().map(|(k, v)| (k, from_toml(v))).collect()),
            Err(e) => {
                let mut m = BTreeMap::new();
                m.insert(
                    "Error".to_string(),
                    Value::from(format!("toml: {}", e.message())),
                );
                GoMap::value(m)
            }
        })
    }),
];

/// TOML values as Go's decoder gives them: int64, float64, strings, bools, lists, maps;
/// dates are kept as their TOML text.
fn from_toml(v: ::toml::Value) -> Value {
    match v {
        ::toml::Value::String(x) => Value::from(x),
        ::toml::Value::Integer(i) => go_int64(i),
        ::toml::Value::Float(f) => Value::from(f),
        ::toml::Value::Boolean(b) => Value::from(b),
        ::toml::Value::Datetime(d) => Value::from(d.to_string()),
        ::toml::Value::Array(a) => GoList::value(a.into_iter().map(from_toml).collect()),
        ::toml::Value::Table(t) => {
            GoMap::value(t.into_iter().map(|(k, v)| (k, from_toml(v))).collect())
        }
    }
}

/// Refuses TOML text whose arrays and inline tables nest past the values budget, before it is
/// parsed: what a template builds is read under the same bound as values files. Quoted strings
/// and comments are skipped; a table header's brackets count while they are open.
fn toml_nesting(text: &str) -> Result<(), Error> {
    let mut depth = 0usize;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '[' | '{' => {
                depth += 1;
                if depth > crate::budget::MAX_VALUES_DEPTH {
                    return Err(err(crate::budget::breach(
                        crate::budget::BudgetBreach::new(
                            "values nesting depth",
                            crate::budget::MAX_VALUES_DEPTH as u64,
                            format!("{depth}+ (fromToml)"),
                        ),
                    )));
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            '#' => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '"' | '\'' => {
                let mut escaped = false;
                for next in chars.by_ref() {
                    if next == c && !escaped {
                        break;
                    }
                    escaped = c == '"' && next == '\\' && !escaped;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[derive(Default)]
struct Encoder {
    out: String,
    /// How deep the value being written nests, bounded by the values budget.
    depth: usize,
}

fn is_nil(v: &Value) -> bool {
    v.is_none() || v.is_undefined()
}

fn is_table(v: &Value) -> bool {
    map_entries(v).is_some() && v.kind() == ValueKind::Map
}

/// BurntSushi's `isTableArray`: a non-empty list of tables (a nil element is an error).
fn is_table_array(v: &Value) -> Result<bool, String> {
    if v.kind() != ValueKind::Seq {
        return Ok(false);
    }
    let items = list_items(v).unwrap_or_default();
    if items.is_empty() {
        return Ok(false);
    }
    if items.iter().any(is_nil) {
        return Err("toml: cannot encode array with nil element".into());
    }
    Ok(items.iter().all(is_table))
}

fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn key_part(k: &str) -> String {
    if k.is_empty() {
        return "\"\"".into();
    }
    if k.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_string()
    } else {
        quote(k)
    }
}

fn key_string(key: &[String]) -> String {
    key.iter()
        .map(|k| key_part(k))
        .collect::<Vec<_>>()
        .join(".")
}

fn indent(key: &[String]) -> String {
    "  ".repeat(key.len().saturating_sub(1))
}

impl Encoder {
    fn newline(&mut self) {
        if !self.out.is_empty() {
            self.out.push('\n');
        }
    }

    fn encode(&mut self, key: &[String], v: &Value) -> Result<(), String> {
        if is_nil(v) {
            return Ok(());
        }
        if is_table(v) {
            return self.table(key, v);
        }
        if is_table_array(v)? {
            if key.is_empty() {
                return Err("toml: top-level values must be Go maps or structs".into());
            }
            for item in list_items(v).unwrap_or_default() {
                self.newline();
                self.out
                    .push_str(&format!("{}[[{}]]", indent(key), key_string(key)));
                self.newline();
                self.map(key, &item, false)?;
            }
            return Ok(());
        }
        self.key_value(key, v, false)
    }

    fn table(&mut self, key: &[String], v: &Value) -> Result<(), String> {
        if key.len() == 1 {
            self.newline();
        }
        if !key.is_empty() {
            self.out
                .push_str(&format!("{}[{}]", indent(key), key_string(key)));
            self.newline();
        }
        self.map(key, v, false)
    }

    /// One level deeper into the value; past the budget, the render's error.
    fn enter(&mut self) -> Result<(), String> {
        self.depth += 1;
        super::super::value::enter(self.depth, "a value written as TOML").map_err(|e| e.to_string())
    }

    fn map(&mut self, key: &[String], v: &Value, inline: bool) -> Result<(), String> {
        self.enter()?;
        let entries = map_entries(v).unwrap_or_default();
        let (mut direct, mut sub) = (Vec::new(), Vec::new());
        for (k, x) in &entries {
            if is_table(x) || is_table_array(x)? {
                sub.push((k, x));
            } else {
                direct.push((k, x));
            }
        }
        if inline {
            self.out.push('{');
        }
        let trailing = !sub.is_empty();
        for (group, trail) in [(direct, trailing), (sub, false)] {
            let n = group.len();
            for (i, (k, x)) in group.into_iter().enumerate() {
                if is_nil(x) {
                    continue;
                }
                if inline {
                    self.key_value(std::slice::from_ref(k), x, true)?;
                    if trail || i != n - 1 {
                        self.out.push_str(", ");
                    }
                } else {
                    let mut child = key.to_vec();
                    child.push(k.clone());
                    self.encode(&child, x)?;
                }
            }
        }
        if inline {
            self.out.push('}');
        }
        self.depth -= 1;
        Ok(())
    }

    fn key_value(&mut self, key: &[String], v: &Value, inline: bool) -> Result<(), String> {
        if let Some(last) = key.last() {
            self.out
                .push_str(&format!("{}{} = ", indent(key), key_part(last)));
        }
        self.element(v)?;
        if !inline && !key.is_empty() {
            self.newline();
        }
        Ok(())
    }

    fn element(&mut self, v: &Value) -> Result<(), String> {
        match v.kind() {
            ValueKind::String => self.out.push_str(&quote(v.as_str().unwrap_or_default())),
            ValueKind::Bool => self
                .out
                .push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number if v.is_integer() => self.out.push_str(&v.to_string()),
            ValueKind::Number => {
                let f = f64::try_from(v.clone()).unwrap_or(0.0);
                let text = if f.is_nan() {
                    "nan".to_string()
                } else if f.is_infinite() {
                    if f < 0.0 { "-inf" } else { "inf" }.to_string()
                } else {
                    // strconv 'f' -1: the shortest decimal that reads back, never an exponent.
                    let t = format!("{f}");
                    if t.contains('.') {
                        t
                    } else {
                        format!("{t}.0")
                    }
                };
                self.out.push_str(&text);
            }
            ValueKind::Map if is_table(v) => self.map(&[], v, true)?,
            ValueKind::Seq => {
                self.enter()?;
                let items = list_items(v).unwrap_or_default();
                self.out.push('[');
                for (i, x) in items.iter().enumerate() {
                    if is_nil(x) {
                        return Err("toml: cannot encode array with nil element".into());
                    }
                    self.element(x)?;
                    if i + 1 != items.len() {
                        self.out.push_str(", ");
                    }
                }
                self.out.push(']');
                self.depth -= 1;
            }
            _ if is_nil(v) => {}
            _ => self.out.push_str(&quote(&go_fmt(v))),
        }
        Ok(())
    }
}
