//! Sprig's regular-expression functions (`regexMatch`, `regexFind`, `regexReplaceAll`, ...).

use super::*;

pub(super) const FUNCS: &[(&str, F)] = &[
    ("regexQuoteMeta", |a| {
        let mut out = String::new();
        for c in s(&a[0]).chars() {
            if "\\.+*?()|[]{}^$".contains(c) {
                out.push('\\');
            }
            out.push(c);
        }
        Ok(Value::from(out))
    }),
    ("regexMatch", |a| {
        // Sprig's regexMatch swallows a bad pattern (false); mustRegexMatch reports it.
        Ok(Value::from(
            regex::Regex::new(&s(&arg(&a, 0)))
                .map(|re| re.is_match(&s(&arg(&a, 1))))
                .unwrap_or(false),
        ))
    }),
    ("mustRegexMatch", |a| {
        let re = regex::Regex::new(&s(&arg(&a, 0))).map_err(|e| err(e.to_string()))?;
        Ok(Value::from(re.is_match(&s(&arg(&a, 1)))))
    }),
    ("regexFind", |a| {
        let re = regex::Regex::new(&s(&arg(&a, 0))).map_err(|e| err(e.to_string()))?;
        Ok(Value::from(
            re.find(&s(&arg(&a, 1)))
                .map(|m| m.as_str().to_string())
                .unwrap_or_default(),
        ))
    }),
    ("regexReplaceAll", |a| {
        let re = regex::Regex::new(&s(&arg(&a, 0))).map_err(|e| err(e.to_string()))?;
        Ok(Value::from(
            re.replace_all(&s(&arg(&a, 1)), s(&arg(&a, 2)).as_str())
                .into_owned(),
        ))
    }),
    ("regexReplaceAllLiteral", |a| {
        let re = regex::Regex::new(&s(&arg(&a, 0))).map_err(|e| err(e.to_string()))?;
        Ok(Value::from(
            re.replace_all(&s(&arg(&a, 1)), regex::NoExpand(&s(&arg(&a, 2))))
                .into_owned(),
        ))
    }),
    ("regexSplit", |a| {
        let re = regex::Regex::new(&s(&arg(&a, 0))).map_err(|e| err(e.to_string()))?;
        let text = s(&arg(&a, 1));
        let n = to_i64(&arg(&a, 2));
        let parts: Vec<Value> = if n < 0 {
            re.split(&text).map(Value::from).collect()
        } else {
            re.splitn(&text, n as usize).map(Value::from).collect()
        };
        Ok(Value::from(parts))
    }),
    ("regexFindAll", |a| {
        let re = regex::Regex::new(&s(&arg(&a, 0))).map_err(|e| err(e.to_string()))?;
        let text = s(&arg(&a, 1));
        let n = to_i64(&arg(&a, 2));
        let it = re.find_iter(&text).map(|m| Value::from(m.as_str()));
        Ok(Value::from(if n < 0 {
            it.collect::<Vec<_>>()
        } else {
            it.take(n as usize).collect()
        }))
    }),
];
