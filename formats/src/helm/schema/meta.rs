//! What helm's validator checks of the schema document itself: each keyword's value against
//! its draft's metaschema (helm fails with "is not valid against metaschema" before looking at
//! any value), and the `format`s it asserts for drafts before 2019-09.
//!
//! The metaschemas are not embedded; their rules for the keywords the validator knows are
//! written out here. helm prints the metaschema's nested tree (`allOf` over the vocabularies);
//! pallet prints the leaf violations only, at the same paths with the same messages.

use serde_json::{Map, Value as Json};

use super::{escape, json_type, quote, Draft};

/// The simple type names (`type`'s values), in the order helm lists them.
const TYPES: [&str; 7] = [
    "array", "boolean", "integer", "null", "number", "object", "string",
];

/// Checks the keywords of the schema object at `ptr`; pushes (path, message) per violation.
pub(crate) fn check(
    obj: &Map<String, Json>,
    ptr: &str,
    d: Draft,
    errs: &mut Vec<(String, String)>,
) {
    let mut c = Checker { ptr, d, errs };
    for (k, v) in obj {
        c.keyword(k, v);
    }
}

struct Checker<'e> {
    ptr: &'e str,
    d: Draft,
    errs: &'e mut Vec<(String, String)>,
}

impl Checker<'_> {
    fn at(&self, path: &[&str]) -> String {
        let mut p = self.ptr.to_string();
        for t in path {
            p.push('/');
            p.push_str(&escape(t));
        }
        p
    }

    fn push(&mut self, path: &[&str], msg: String) {
        let at = self.at(path);
        self.errs.push((at, msg));
    }

    fn want(&mut self, path: &[&str], v: &Json, want: &str) {
        let got = json_type(v);
        self.push(path, format!("got {got}, want {want}"));
    }

    fn schema(&mut self, path: &[&str], v: &Json) {
        match v {
            Json::Object(_) => {}
            Json::Bool(_) if self.d >= Draft::D6 => {}
            _ if self.d >= Draft::D6 => self.want(path, v, "boolean or object"),
            _ => self.want(path, v, "object"),
        }
    }

    fn schema_array(&mut self, k: &str, v: &Json) {
        match v {
            Json::Array(a) if a.is_empty() => self.push(&[k], "minItems: got 0, want 1".into()),
            Json::Array(a) => {
                for (i, s) in a.iter().enumerate() {
                    self.schema(&[k, &i.to_string()], s);
                }
            }
            _ => self.want(&[k], v, "array"),
        }
    }

    fn schema_map(&mut self, k: &str, v: &Json, regex_keys: bool) {
        let Json::Object(m) = v else {
            return self.want(&[k], v, "object");
        };
        for (name, s) in m {
            if regex_keys {
                if let Err(e) = regex::Regex::new(name) {
                    self.push(&[k], format!("invalid propertyName {}", quote(name)));
                    let _ = e;
                }
            }
            self.schema(&[k, name], s);
        }
    }

    fn non_negative_int(&mut self, k: &str, v: &Json) {
        match v.as_f64() {
            None => self.want(&[k], v, "integer"),
            Some(f) if f.fract() != 0.0 => self.want(&[k], v, "integer"),
            Some(f) if f < 0.0 => self.push(
                &[k],
                format!("minimum: got {}, want 0", super::super::funcs::go_float(f)),
            ),
            _ => {}
        }
    }

    fn string_array(&mut self, k: &str, v: &Json, min_one: bool) {
        let Json::Array(a) = v else {
            return self.want(&[k], v, "array");
        };
        if min_one && a.is_empty() {
            self.push(&[k], "minItems: got 0, want 1".into());
        }
        for (i, s) in a.iter().enumerate() {
            if !s.is_string() {
                self.want(&[k, &i.to_string()], s, "string");
            }
        }
        self.unique(&[k], a);
    }

    fn unique(&mut self, path: &[&str], a: &[Json]) {
        for i in 1..a.len() {
            if let Some(j) = (0..i).find(|j| a[*j] == a[i]) {
                self.push(path, format!("items at {j} and {i} are equal"));
                return;
            }
        }
    }

    fn keyword(&mut self, k: &str, v: &Json) {
        let d = self.d;
        match k {
            "not" | "additionalProperties" => self.schema(&[k], v),
            "additionalItems" if d < Draft::D2020 => self.schema(&[k], v),
            "items" => match v {
                Json::Array(_) if d < Draft::D2020 => self.schema_array(k, v),
                _ => self.schema(&[k], v),
            },
            "contains" | "propertyNames" if d >= Draft::D6 => self.schema(&[k], v),
            "if" | "then" | "else" if d >= Draft::D7 => self.schema(&[k], v),
            "unevaluatedProperties" | "unevaluatedItems" | "contentSchema" if d >= Draft::D2019 => {
                self.schema(&[k], v)
            }
            "allOf" | "anyOf" | "oneOf" => self.schema_array(k, v),
            "prefixItems" if d >= Draft::D2020 => self.schema_array(k, v),
            "properties" | "definitions" => self.schema_map(k, v, false),
            "patternProperties" => self.schema_map(k, v, true),
            "$defs" | "dependentSchemas" if d >= Draft::D2019 => self.schema_map(k, v, false),
            "dependencies" => {
                let Json::Object(m) = v else {
                    return self.want(&[k], v, "object");
                };
                for (name, dep) in m {
                    match dep {
                        Json::Array(a) => {
                            for (i, s) in a.iter().enumerate() {
                                if !s.is_string() {
                                    self.want(&[k, name, &i.to_string()], s, "string");
                                }
                            }
                        }
                        _ => self.schema(&[k, name], dep),
                    }
                }
            }
            "dependentRequired" if d >= Draft::D2019 => {
                let Json::Object(m) = v else {
                    return self.want(&[k], v, "object");
                };
                for (name, req) in m {
                    let Json::Array(a) = req else {
                        self.want(&[k, name], req, "array");
                        continue;
                    };
                    for (i, s) in a.iter().enumerate() {
                        if !s.is_string() {
                            self.want(&[k, name, &i.to_string()], s, "string");
                        }
                    }
                    self.unique(&[k, name], a);
                }
            }
            "type" => {
                let bad_name = |t: &Json| !t.as_str().is_some_and(|t| TYPES.contains(&t));
                let one_of = || {
                    let names: Vec<String> = TYPES.iter().map(|t| quote(t)).collect();
                    format!("value must be one of {}", names.join(", "))
                };
                match v {
                    Json::String(_) if bad_name(v) => self.push(&[k], one_of()),
                    Json::String(_) => {}
                    Json::Array(a) => {
                        for (i, t) in a.iter().enumerate() {
                            if bad_name(t) {
                                self.push(&[k, &i.to_string()], one_of());
                            }
                        }
                        self.unique(&[k], a);
                    }
                    _ => self.want(&[k], v, "array or string"),
                }
            }
            "enum" => match v {
                Json::Array(a) if d == Draft::D4 && a.is_empty() => {
                    self.push(&[k], "minItems: got 0, want 1".into())
                }
                Json::Array(_) => {}
                _ => self.want(&[k], v, "array"),
            },
            "multipleOf" => match v.as_f64() {
                None => self.want(&[k], v, "number"),
                Some(f) if f <= 0.0 => self.push(
                    &[k],
                    format!(
                        "exclusiveMinimum: got {}, want 0",
                        super::super::funcs::go_float(f)
                    ),
                ),
                _ => {}
            },
            "maximum" | "minimum" if !v.is_number() => self.want(&[k], v, "number"),
            "exclusiveMaximum" | "exclusiveMinimum" => {
                if d == Draft::D4 && !v.is_boolean() {
                    self.want(&[k], v, "boolean");
                } else if d > Draft::D4 && !v.is_number() {
                    self.want(&[k], v, "number");
                }
            }
            "maxLength" | "minLength" | "maxItems" | "minItems" | "maxProperties"
            | "minProperties" => self.non_negative_int(k, v),
            "maxContains" | "minContains" if d >= Draft::D2019 => self.non_negative_int(k, v),
            "pattern" => match v {
                Json::String(p) => {
                    if let Some(why) = check_format("regex", p) {
                        self.push(&[k], format!("{} is not valid regex: {why}", quote(p)));
                    }
                }
                _ => self.want(&[k], v, "string"),
            },
            "uniqueItems" if !v.is_boolean() => self.want(&[k], v, "boolean"),
            "required" => self.string_array(k, v, d == Draft::D4),
            "format" | "title" | "description" | "$ref" | "$schema" if !v.is_string() => {
                self.want(&[k], v, "string")
            }
            "$comment" if d >= Draft::D7 && !v.is_string() => self.want(&[k], v, "string"),
            "id" if d == Draft::D4 && !v.is_string() => self.want(&[k], v, "string"),
            "$id" if d > Draft::D4 && !v.is_string() => self.want(&[k], v, "string"),
            "$anchor" | "$dynamicAnchor" | "$dynamicRef" | "$recursiveRef"
                if d >= Draft::D2019 && !v.is_string() =>
            {
                self.want(&[k], v, "string")
            }
            "readOnly" | "writeOnly" if d >= Draft::D7 && !v.is_boolean() => {
                self.want(&[k], v, "boolean")
            }
            "deprecated" | "$recursiveAnchor" if d >= Draft::D2019 && !v.is_boolean() => {
                self.want(&[k], v, "boolean")
            }
            "examples" if d >= Draft::D6 && !v.is_array() => self.want(&[k], v, "array"),
            _ => {}
        }
    }
}

/// Why `s` is not of format `name` (santhosh-tekuri's checks and wording), or `None` when it
/// is, or when the format is one helm does not check (an unknown name asserts nothing).
pub(crate) fn check_format(name: &str, s: &str) -> Option<String> {
    match name {
        "regex" => regex::Regex::new(s).err().map(|e| {
            // The regex crate's multi-line report, on one line.
            e.to_string()
                .lines()
                .last()
                .unwrap_or("")
                .trim()
                .to_string()
        }),
        "ipv4" => ipv4(s),
        "ipv6" => {
            if !s.contains(':') {
                Some("missing colon".into())
            } else if s.contains('%') {
                Some("zone id is not a part of ipv6 address".into())
            } else {
                s.parse::<std::net::Ipv6Addr>()
                    .err()
                    .map(|_| format!("ParseAddr({s:?}): invalid IPv6 address"))
            }
        }
        "hostname" => hostname(s),
        "email" => email(s),
        "uuid" => uuid(s),
        "date" => date(s),
        "time" => time(s),
        "date-time" => {
            let b = s.as_bytes();
            if b.len() < 20 {
                return Some("less than 20 characters long".into());
            }
            if b[10] != b't' && b[10] != b'T' {
                return Some("11th character must be t or T".into());
            }
            if let Some(e) = date(s.get(..10).unwrap_or("")) {
                return Some(format!("invalid date element: {e}"));
            }
            time(s.get(11..).unwrap_or("")).map(|e| format!("invalid time element: {e}"))
        }
        "uri" => {
            if s.contains(char::is_whitespace) {
                Some(format!("parse {s:?}: invalid character in URL"))
            } else if !super::has_scheme(s) {
                Some("relative url".into())
            } else {
                None
            }
        }
        "uri-reference" => s.contains('\\').then(|| "contains \\".to_string()),
        "json-pointer" => {
            if s.is_empty() {
                return None;
            }
            if !s.starts_with('/') {
                return Some("not starting with /".into());
            }
            let bad = s
                .split('~')
                .skip(1)
                .any(|rest| !rest.starts_with('0') && !rest.starts_with('1'));
            bad.then(|| "~ must be followed by 0 or 1".to_string())
        }
        _ => None,
    }
}

fn ipv4(s: &str) -> Option<String> {
    let groups: Vec<&str> = s.split('.').collect();
    if groups.len() != 4 {
        return Some("expected four decimals".into());
    }
    for g in groups {
        if g.len() > 1 && g.starts_with('0') {
            return Some("leading zeros".into());
        }
        match g.parse::<i64>() {
            Err(_) => return Some(format!("strconv.Atoi: parsing {g:?}: invalid syntax")),
            Ok(n) if !(0..=255).contains(&n) => {
                return Some("decimal must be between 0 and 255".into())
            }
            Ok(_) => {}
        }
    }
    None
}

fn hostname(s: &str) -> Option<String> {
    let s = s.strip_suffix('.').unwrap_or(s);
    if s.len() > 253 {
        return Some("more than 253 characters long".into());
    }
    for label in s.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Some("label must be 1 to 63 characters long".into());
        }
        if label.starts_with('-') {
            return Some("label starts with hyphen".into());
        }
        if label.ends_with('-') {
            return Some("label ends with hyphen".into());
        }
        if let Some(c) = label
            .chars()
            .find(|c| !c.is_ascii_alphanumeric() && *c != '-')
        {
            return Some(format!("invalid character {c:?}"));
        }
    }
    None
}

fn email(s: &str) -> Option<String> {
    if s.len() > 254 {
        return Some("more than 255 characters long".into());
    }
    let Some(at) = s.rfind('@') else {
        return Some("missing @".into());
    };
    let (local, domain) = (&s[..at], &s[at + 1..]);
    if local.len() > 64 {
        return Some("local part more than 64 characters long".into());
    }
    if local.len() > 1 && local.starts_with('"') {
        let inner = &local[1..local.len() - 1];
        if inner.contains('\\') || inner.contains('"') {
            return Some("backslash and quote are not allowed within quoted local part".into());
        }
    } else {
        if local.starts_with('.') {
            return Some("starts with dot".into());
        }
        if local.ends_with('.') {
            return Some("ends with dot".into());
        }
        if local.contains("..") {
            return Some("consecutive dots".into());
        }
        if let Some(c) = local
            .chars()
            .find(|c| !c.is_ascii_alphanumeric() && !".!#$%&'*+-/=?^_`{|}~".contains(*c))
        {
            return Some(format!("invalid character {c:?}"));
        }
    }
    if let Some(ip) = domain.strip_prefix('[').and_then(|d| d.strip_suffix(']')) {
        return match ip.strip_prefix("IPv6:") {
            Some(v6) => check_format("ipv6", v6).map(|e| format!("invalid ipv6 address: {e}")),
            None => ipv4(ip).map(|e| format!("invalid ipv4 address: {e}")),
        };
    }
    hostname(domain).map(|e| format!("invalid domain: {e}"))
}

fn uuid(s: &str) -> Option<String> {
    let groups: Vec<&str> = s.split('-').collect();
    let want = [8, 4, 4, 4, 12];
    if groups.len() != want.len() {
        return Some("must have 5 elements".into());
    }
    for (i, (g, n)) in groups.iter().zip(want).enumerate() {
        if g.len() != n {
            return Some(format!("element {} must be {n} characters long", i + 1));
        }
        if let Some(c) = g.chars().find(|c| !c.is_ascii_hexdigit()) {
            return Some(format!("non-hex character {c:?}"));
        }
    }
    None
}

/// Go's `time.Parse("2006-01-02", s)`, with its error wording for the common cases.
fn date(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| {
        b.get(r.clone())
            .filter(|d| d.iter().all(u8::is_ascii_digit))
            .and_then(|_| s[r].parse::<u32>().ok())
    };
    let shape = b.len() == 10 && b[4] == b'-' && b[7] == b'-';
    let (Some(y), Some(m), Some(d), true) = (digits(0..4), digits(5..7), digits(8..10), shape)
    else {
        return Some(format!(
            "parsing time {s:?} as \"2006-01-02\": cannot parse {s:?} as \"2006\""
        ));
    };
    if !(1..=12).contains(&m) {
        return Some(format!("parsing time {s:?}: month out of range"));
    }
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if d < 1 || d > days[(m - 1) as usize] {
        return Some(format!("parsing time {s:?}: day out of range"));
    }
    None
}

fn time(s: &str) -> Option<String> {
    let b = s.as_bytes();
    if b.len() < 9 {
        return Some("less than 9 characters long".into());
    }
    if b[2] != b':' || b[5] != b':' {
        return Some("missing colon in correct place".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errs(schema: Json, d: Draft) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Json::Object(o) = schema {
            check(&o, "", d, &mut out);
        }
        out
    }

    #[test]
    fn keyword_values_are_checked_by_draft() {
        assert_eq!(
            errs(json!({"minimum": "3"}), Draft::D2020),
            vec![("/minimum".into(), "got string, want number".into())]
        );
        assert_eq!(
            errs(json!({"exclusiveMinimum": true}), Draft::D2020),
            vec![(
                "/exclusiveMinimum".into(),
                "got boolean, want number".into()
            )]
        );
        assert!(errs(json!({"exclusiveMinimum": true}), Draft::D4).is_empty());
        assert_eq!(errs(json!({"type": "foo"}), Draft::D7)[0].0, "/type");
        assert!(errs(json!({"form": true, "enabled": "x"}), Draft::D2020).is_empty());
        assert_eq!(
            errs(json!({"minLength": -1}), Draft::D7),
            vec![("/minLength".into(), "minimum: got -1, want 0".into())]
        );
    }

    #[test]
    fn formats_follow_santhosh_tekuri() {
        assert_eq!(
            check_format("ipv4", "1.2.3"),
            Some("expected four decimals".into())
        );
        assert_eq!(check_format("ipv4", "1.2.3.4"), None);
        assert_eq!(
            check_format("email", "a.example.com"),
            Some("missing @".into())
        );
        assert_eq!(check_format("date", "2024-02-29"), None);
        assert!(check_format("date", "2023-02-29").is_some());
        assert_eq!(check_format("unknown-format", "x"), None);
    }
}
