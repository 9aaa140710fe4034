//! Encodings: JSON as Go's encoding/json writes it (`toJson`, `toPrettyJson`, `toRawJson`,
//! `fromJson`, ...), base64 and base32.

use super::*;

pub(super) const FUNCS: &[(&str, F)] = &[
    ("toJson", |a| json_or_empty(&arg(&a, 0), HTML)),
    ("toPrettyJson", |a| json_or_empty(&arg(&a, 0), PRETTY)),
    ("toRawJson", |a| {
        json_or_error("toRawJson", &arg(&a, 0), RAW)
    }),
    ("mustToJson", |a| {
        json_or_error("mustToJson", &arg(&a, 0), HTML)
    }),
    ("mustToPrettyJson", |a| {
        json_or_error("mustToPrettyJson", &arg(&a, 0), PRETTY)
    }),
    ("mustToRawJson", |a| {
        json_or_error("mustToRawJson", &arg(&a, 0), RAW)
    }),
    ("fromJson", |a| {
        Ok(match parse_json(&s(&arg(&a, 0))) {
            Ok(v @ serde_json::Value::Object(_)) => from_json(&v),
            Ok(serde_json::Value::Null) => GoMap::value(BTreeMap::new()),
            Ok(other) => error_map(json_type_error(&other, "map[string]interface {}")),
            Err(e) => error_map(e.to_string()),
        })
    }),
    ("mustFromJson", |a| {
        // Sprig's: any JSON value, and its error.
        parse_json(&s(&a[0]))
            .map(|v| from_json(&v))
            .map_err(|e| err(format!("error calling mustFromJson: {e}")))
    }),
    ("b32enc", |a| {
        Ok(Value::from(b32_encode(s(&a[0]).as_bytes())))
    }),
    ("b32dec", |a| {
        Ok(Value::from(match b32_decode(&s(&a[0])) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => e,
        }))
    }),
    ("b64enc", |a| {
        Ok(Value::from(b64(s(&arg(&a, 0)).as_bytes())))
    }),
    ("b64dec", |a| {
        Ok(Value::from(match go_b64_decode(&s(&arg(&a, 0))) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => e,
        }))
    }),
    ("fromJsonArray", |a| {
        Ok(match parse_json(&s(&arg(&a, 0))) {
            Ok(v @ serde_json::Value::Array(_)) => from_json(&v),
            Ok(serde_json::Value::Null) => GoList::value(Vec::new()),
            Ok(other) => {
                GoList::value(vec![Value::from(json_type_error(&other, "[]interface {}"))])
            }
            Err(e) => GoList::value(vec![Value::from(e)]),
        })
    }),
];

/// `json.Marshal` (toJson).
const HTML: JsonStyle = JsonStyle {
    escape_html: true,
    indent: false,
};
/// `json.MarshalIndent(v, "", "  ")` (toPrettyJson).
const PRETTY: JsonStyle = JsonStyle {
    escape_html: true,
    indent: true,
};
/// An encoder without HTML escaping (toRawJson).
const RAW: JsonStyle = JsonStyle {
    escape_html: false,
    indent: false,
};

/// Sprig's `toJson`/`toPrettyJson`: encoding/json's error gives "" (pallet's refusal fails).
fn json_or_empty(v: &Value, style: JsonStyle) -> Result<Value, Error> {
    match marshal(v, style) {
        Ok(text) => Ok(Value::from(text)),
        Err(MarshalError::Go(_)) => Ok(Value::from("")),
        Err(MarshalError::Refused(e)) => Err(e),
    }
}

/// `toRawJson` and the `must` forms: encoding/json's error is the call's.
fn json_or_error(name: &str, v: &Value, style: JsonStyle) -> Result<Value, Error> {
    match marshal(v, style) {
        Ok(text) => Ok(Value::from(text)),
        Err(MarshalError::Go(e)) => Err(err(format!("error calling {name}: {e}"))),
        Err(MarshalError::Refused(e)) => Err(e),
    }
}

/// JSON text as encoding/json reads it, within the values nesting budget (Go reads 10,000
/// levels; a document past the budget is the render's error, not the `Error` Sprig would
/// return for bad JSON). Errors are the JSON reader's message.
pub(super) fn parse_json(text: &str) -> Result<serde_json::Value, String> {
    let over = |depth: String| {
        crate::budget::breach(crate::budget::BudgetBreach::new(
            "values nesting depth",
            crate::budget::MAX_VALUES_DEPTH as u64,
            depth,
        ))
    };
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) => match json_depth(&v) {
            depth if depth > crate::budget::MAX_VALUES_DEPTH => Err(over(depth.to_string())),
            _ => Ok(v),
        },
        // serde_json's own guard (128 levels), far past the budget.
        Err(e) if e.to_string().starts_with("recursion limit exceeded") => {
            Err(over("over 128".to_string()))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// How deep maps and lists nest in `v` (a scalar is 0). The reader bounds it.
fn json_depth(v: &serde_json::Value) -> usize {
    match v {
        serde_json::Value::Array(a) => 1 + a.iter().map(json_depth).max().unwrap_or(0),
        serde_json::Value::Object(o) => 1 + o.values().map(json_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// `{"Error": msg}`, how Sprig's from* functions report a failure.
pub(super) fn error_map(msg: String) -> Value {
    GoMap::value(
        [("Error".to_string(), Value::from(msg))]
            .into_iter()
            .collect(),
    )
}

/// encoding/json's message for a document of the wrong JSON type.
pub(super) fn json_type_error(v: &serde_json::Value, target: &str) -> String {
    let kind = match v {
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        _ => "object",
    };
    format!("json: cannot unmarshal {kind} into Go value of type {target}")
}

pub(super) const B32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// RFC 4648 base32 with padding (Go's `base32.StdEncoding`).
pub(super) fn b32_encode(data: &[u8]) -> String {
    let mut out = String::new();
    for chunk in data.chunks(5) {
        let mut buf = [0u8; 5];
        buf[..chunk.len()].copy_from_slice(chunk);
        let n = u64::from_be_bytes([0, 0, 0, buf[0], buf[1], buf[2], buf[3], buf[4]]);
        let chars = (chunk.len() * 8).div_ceil(5);
        for i in 0..8 {
            if i < chars {
                out.push(B32[((n >> (35 - i * 5)) & 31) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Go's `base32.StdEncoding.DecodeString`; errors are Go's message.
pub(super) fn b32_decode(text: &str) -> Result<Vec<u8>, String> {
    let clean: Vec<u8> = text
        .bytes()
        .filter(|b| *b != b'\n' && *b != b'\r')
        .collect();
    let bad = |i: usize| format!("illegal base32 data at input byte {i}");
    if !clean.len().is_multiple_of(8) {
        return Err(bad(clean.len() / 8 * 8));
    }
    let mut out = Vec::new();
    for (ci, chunk) in clean.chunks(8).enumerate() {
        let pad = chunk.iter().rev().take_while(|b| **b == b'=').count();
        let bytes = match pad {
            0 => 5,
            1 => 4,
            3 => 3,
            4 => 2,
            6 => 1,
            _ => return Err(bad(ci * 8 + 8 - pad)),
        };
        if pad > 0 && ci + 1 != clean.len() / 8 {
            return Err(bad(ci * 8 + 8 - pad));
        }
        let mut n: u64 = 0;
        for (i, b) in chunk.iter().enumerate() {
            let v = if i >= 8 - pad {
                0
            } else {
                B32.iter()
                    .position(|x| x == b)
                    .ok_or_else(|| bad(ci * 8 + i))? as u64
            };
            n = (n << 5) | v;
        }
        out.extend_from_slice(&n.to_be_bytes()[3..3 + bytes]);
    }
    Ok(out)
}

/// Go's base64 `StdEncoding.DecodeString`: newlines are skipped; errors are Go's message.
pub(super) fn go_b64_decode(text: &str) -> Result<Vec<u8>, String> {
    use base64::Engine as _;
    let clean: String = text.chars().filter(|c| *c != '\n' && *c != '\r').collect();
    base64::engine::general_purpose::STANDARD
        .decode(&clean)
        .map_err(|e| {
            let at = match e {
                base64::DecodeError::InvalidByte(i, _)
                | base64::DecodeError::InvalidLastSymbol(i, _) => i,
                // A short final quantum: Go reports the start of that quantum.
                base64::DecodeError::InvalidLength(_) | base64::DecodeError::InvalidPadding => {
                    clean.trim_end_matches('=').len() / 4 * 4
                }
            };
            format!("illegal base64 data at input byte {at}")
        })
}
