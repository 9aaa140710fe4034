//! Encodings: JSON as Go's encoding/json writes it (`toJson`, `toPrettyJson`, `toRawJson`,
//! `fromJson`, ...), base64 and base32.

use super::*;

pub(super) const FUNCS: &[(&str, F)] = &[
    ("toJson", |a| {
        if let Some(d) = deferred_unsupported(&arg(&a, 0), "toJson") {
            return Ok(d);
        }
        Ok(Value::from(go_json(&to_json_checked(
            &arg(&a, 0),
            "toJson",
        )?)))
    }),
    ("toPrettyJson", |a| {
        if let Some(d) = deferred_unsupported(&arg(&a, 0), "toPrettyJson") {
            return Ok(d);
        }
        Ok(Value::from(go_json_pretty(&to_json_checked(
            &arg(&a, 0),
            "toPrettyJson",
        )?)))
    }),
    ("fromJson", |a| {
        Ok(
            match serde_json::from_str::<serde_json::Value>(&s(&arg(&a, 0))) {
                Ok(v @ serde_json::Value::Object(_)) => from_json(&v),
                Ok(serde_json::Value::Null) => GoMap::value(BTreeMap::new()),
                Ok(other) => error_map(json_type_error(&other, "map[string]interface {}")),
                Err(e) => error_map(e.to_string()),
            },
        )
    }),
    ("mustFromJson", |a| {
        // Sprig's: any JSON value, and its error.
        serde_json::from_str::<serde_json::Value>(&s(&a[0]))
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
    ("toRawJson", |a| {
        if let Some(d) = deferred_unsupported(&arg(&a, 0), "toRawJson") {
            return Ok(d);
        }
        Ok(Value::from(raw_json(&to_json_checked(
            &arg(&a, 0),
            "toRawJson",
        )?)))
    }),
    ("mustToJson", |a| {
        if let Some(d) = deferred_unsupported(&arg(&a, 0), "mustToJson") {
            return Ok(d);
        }
        Ok(Value::from(go_json(&to_json_checked(
            &arg(&a, 0),
            "mustToJson",
        )?)))
    }),
    ("fromJsonArray", |a| {
        Ok(
            match serde_json::from_str::<serde_json::Value>(&s(&arg(&a, 0))) {
                Ok(v @ serde_json::Value::Array(_)) => from_json(&v),
                Ok(serde_json::Value::Null) => Value::from(Vec::<Value>::new()),
                Ok(other) => {
                    Value::from(vec![Value::from(json_type_error(&other, "[]interface {}"))])
                }
                Err(e) => Value::from(vec![Value::from(e.to_string())]),
            },
        )
    }),
];

/// Go's json.Marshal (sorted keys, HTML-safe escaping).
pub(super) fn go_json(v: &serde_json::Value) -> String {
    let mut out = String::new();
    go_json_into(&mut out, v, true);
    out
}

/// Go's `json.MarshalIndent(v, "", "  ")`: HTML-escaped like `toJson`, Go number formatting.
pub(super) fn go_json_pretty(v: &serde_json::Value) -> String {
    fn into(out: &mut String, v: &serde_json::Value, depth: usize) {
        let pad = |out: &mut String, d: usize| {
            out.push('\n');
            out.push_str(&"  ".repeat(d));
        };
        match v {
            serde_json::Value::Array(a) if !a.is_empty() => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    pad(out, depth + 1);
                    into(out, x, depth + 1);
                }
                pad(out, depth);
                out.push(']');
            }
            serde_json::Value::Object(m) if !m.is_empty() => {
                out.push('{');
                let mut entries: Vec<(&String, &serde_json::Value)> = m.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                for (i, (k, x)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    pad(out, depth + 1);
                    go_json_into(out, &serde_json::Value::String(k.clone()), true);
                    out.push_str(": ");
                    into(out, x, depth + 1);
                }
                pad(out, depth);
                out.push('}');
            }
            _ => go_json_into(out, v, true),
        }
    }
    let mut out = String::new();
    into(&mut out, v, 0);
    out
}

pub(super) fn go_json_into(out: &mut String, v: &serde_json::Value, html: bool) {
    match v {
        serde_json::Value::String(s) => {
            // encoding/json always escapes the JS line separators.
            let j = serde_json::to_string(s)
                .unwrap_or_default()
                .replace('\u{2028}', "\\u2028")
                .replace('\u{2029}', "\\u2029");
            if html {
                out.push_str(
                    &j.replace('<', "\\u003c")
                        .replace('>', "\\u003e")
                        .replace('&', "\\u0026"),
                );
            } else {
                out.push_str(&j);
            }
        }
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => out.push_str(&i.to_string()),
            (None, Some(f)) => out.push_str(&json_float(f)),
            _ => out.push_str(&n.to_string()),
        },
        serde_json::Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json_into(out, x, html);
            }
            out.push(']');
        }
        serde_json::Value::Object(m) => {
            out.push('{');
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json_into(out, &serde_json::Value::String((*k).clone()), html);
                out.push(':');
                go_json_into(out, &m[*k], html);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
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

/// Go's json.Marshal without HTML escaping (Sprig's toRawJson).
pub(super) fn raw_json(v: &serde_json::Value) -> String {
    let mut out = String::new();
    go_json_into(&mut out, v, false);
    out
}
