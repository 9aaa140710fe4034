//! Just enough of Go's `encoding/json` output to reproduce OLM v1's generated names, which hash
//! Go-encoded structs: strings escaped the way Go escapes them, object keys sorted (how Go writes maps),
//! and the SHA-224 + base-36 text OLM uses.

use serde_json::Value;
use sha2::{Digest, Sha224};

/// Appends `text` as a JSON string escaped like Go's encoder with HTML escaping on (the default for
/// both `json.Marshal` and `json.Encoder`): `<`, `>`, `&`, U+2028 and U+2029 become `\uXXXX`.
pub(crate) fn write_string(text: &str, out: &mut String) {
    out.push('"');
    for character in text.chars() {
        match character {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            // Go 1.22 and later write these two as short escapes.
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => push_unicode_escape(character, out),
            c if (c as u32) < 0x20 => push_unicode_escape(c, out),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn push_unicode_escape(character: char, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let code = character as u32;
    out.push_str("\\u");
    for shift in [12, 8, 4, 0] {
        out.push(char::from(HEX[((code >> shift) & 0xf) as usize]));
    }
}

/// Appends a JSON value the way Go marshals a generic value (`map[string]any` keys sorted,
/// compact, Go string escaping). Numbers are written as serde_json prints them.
pub(crate) fn write_value(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(flag) => out.push_str(if *flag { "true" } else { "false" }),
        Value::Number(number) => out.push_str(&number.to_string()),
        Value::String(text) => write_string(text, out),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (index, key) in keys.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                if let Some(item) = map.get(key) {
                    write_value(item, out);
                }
            }
            out.push('}');
        }
    }
}

/// Appends a Go `[]string`: `null` when the slice is nil (absent), else the list.
pub(crate) fn write_string_list(list: Option<&[String]>, out: &mut String) {
    match list {
        None => out.push_str("null"),
        Some(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_string(item, out);
            }
            out.push(']');
        }
    }
}

/// Base-36 text (lowercase, no leading zeros) of the SHA-224 of `bytes`, like Go's
/// `big.Int.SetBytes(sha224).Text(36)`.
pub(crate) fn sha224_base36(bytes: &[u8]) -> String {
    let digest = Sha224::digest(bytes);
    base36(&digest)
}

/// Base-36 text of a big-endian unsigned number.
pub(crate) fn base36(number: &[u8]) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut remaining: Vec<u8> = number
        .iter()
        .copied()
        .skip_while(|byte| *byte == 0)
        .collect();
    let mut digits = Vec::new();
    while !remaining.is_empty() {
        // Long division of the big-endian number by 36.
        let mut quotient = Vec::with_capacity(remaining.len());
        let mut remainder = 0u32;
        for byte in &remaining {
            let current = remainder * 256 + u32::from(*byte);
            let digit = current / 36;
            remainder = current % 36;
            if !(quotient.is_empty() && digit == 0) {
                // digit < 256 because remainder < 36.
                quotient.push(digit as u8);
            }
        }
        digits.push(DIGITS[remainder as usize]);
        remaining = quotient;
    }
    if digits.is_empty() {
        return "0".to_owned();
    }
    digits.reverse();
    String::from_utf8_lossy(&digits).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_like_go() {
        let mut out = String::new();
        write_string("a<b>&c\"\\\n\u{1}\u{2028}é", &mut out);
        assert_eq!(
            out,
            "\"a\\u003cb\\u003e\\u0026c\\\"\\\\\\n\\u0001\\u2028é\""
        );
    }

    #[test]
    fn base36_matches_known_values() {
        assert_eq!(base36(&[0]), "0");
        assert_eq!(base36(&[35]), "z");
        assert_eq!(base36(&[36]), "10");
        assert_eq!(base36(&[0x01, 0x00]), "74");
        // 2^64 - 1 in base 36.
        assert_eq!(base36(&[0xff; 8]), "3w5e11264sgsf");
    }
}
