//! Sprig's regular-expression functions (`regexMatch`, `regexFind`, `regexReplaceAll`, ...),
//! with Go's regular expressions (see [`crate::helm::re2`]).
//!
//! How Sprig reports a bad pattern differs by function, and is kept: `regexMatch` gives false,
//! the `must` forms return Go's error, the others panic with `regexp.MustCompile`'s message.
//! A pattern Go accepts but pallet cannot run is pallet's error in every one of them.

use std::sync::Arc;

use super::super::re2::{self, GoRegex, Re2Error};
use super::*;

/// How a function reports a pattern Go refuses.
#[derive(Clone, Copy)]
enum OnBad {
    /// `regexp.MustCompile`'s panic, as text/template reports it.
    Panic(&'static str),
    /// The error returned by `regexp.Compile`.
    Error(&'static str),
}

fn compiled(pattern: &str, on_bad: OnBad) -> Result<Arc<GoRegex>, Error> {
    re2::compile(pattern).map_err(|e| match (e, on_bad) {
        (Re2Error::Refused(message), _) => err(message),
        (Re2Error::Syntax(message), OnBad::Error(name)) => {
            err(format!("error calling {name}: {message}"))
        }
        (Re2Error::Syntax(message), OnBad::Panic(name)) => err(format!(
            "error calling {name}: regexp: Compile({}): {message}",
            go_backquote(pattern)
        )),
    })
}

/// Go's `regexp` `quote`: backquoted when it can be, else `strconv.Quote`.
fn go_backquote(s: &str) -> String {
    let can = s
        .chars()
        .all(|c| c != '`' && c != '\u{FEFF}' && (c == '\t' || !c.is_control()));
    if can {
        format!("`{s}`")
    } else {
        go_quote(s)
    }
}

fn find(a: &[Value], on_bad: OnBad) -> Result<Value, Error> {
    let re = compiled(&s(&a[0]), on_bad)?;
    Ok(Value::from(re.find(&s(&a[1]))))
}

fn find_all(a: &[Value], on_bad: OnBad) -> Result<Value, Error> {
    let re = compiled(&s(&a[0]), on_bad)?;
    let text = s(&a[1]);
    let found = re.find_all(&text, to_i64(&a[2]));
    if found.is_empty() {
        // Go's FindAllString gives a nil slice.
        return Ok(Value::from_object(NilList));
    }
    Ok(GoList::value(
        found
            .into_iter()
            .map(|(start, end)| Value::from(&text[start..end]))
            .collect(),
    ))
}

fn replace_all(a: &[Value], literal: bool, on_bad: OnBad) -> Result<Value, Error> {
    let re = compiled(&s(&a[0]), on_bad)?;
    Ok(Value::from(re.replace_all(&s(&a[1]), &s(&a[2]), literal)))
}

fn split(a: &[Value], on_bad: OnBad) -> Result<Value, Error> {
    let re = compiled(&s(&a[0]), on_bad)?;
    let n = to_i64(&a[2]);
    if n == 0 {
        // Go's Split gives a nil slice.
        return Ok(Value::from_object(NilList));
    }
    Ok(GoList::value(
        re.split(&s(&a[1]), n)
            .into_iter()
            .map(Value::from)
            .collect(),
    ))
}

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
        // Sprig's regexMatch gives false for a pattern Go refuses; pallet's refusal fails.
        match re2::compile(&s(&a[0])) {
            Ok(re) => Ok(Value::from(re.is_match(&s(&a[1])))),
            Err(Re2Error::Syntax(_)) => Ok(Value::from(false)),
            Err(Re2Error::Refused(message)) => Err(err(message)),
        }
    }),
    ("mustRegexMatch", |a| {
        let re = compiled(&s(&a[0]), OnBad::Error("mustRegexMatch"))?;
        Ok(Value::from(re.is_match(&s(&a[1]))))
    }),
    ("regexFind", |a| find(&a, OnBad::Panic("regexFind"))),
    ("mustRegexFind", |a| find(&a, OnBad::Error("mustRegexFind"))),
    ("regexFindAll", |a| {
        find_all(&a, OnBad::Panic("regexFindAll"))
    }),
    ("mustRegexFindAll", |a| {
        find_all(&a, OnBad::Error("mustRegexFindAll"))
    }),
    ("regexReplaceAll", |a| {
        replace_all(&a, false, OnBad::Panic("regexReplaceAll"))
    }),
    ("mustRegexReplaceAll", |a| {
        replace_all(&a, false, OnBad::Error("mustRegexReplaceAll"))
    }),
    ("regexReplaceAllLiteral", |a| {
        replace_all(&a, true, OnBad::Panic("regexReplaceAllLiteral"))
    }),
    ("mustRegexReplaceAllLiteral", |a| {
        replace_all(&a, true, OnBad::Error("mustRegexReplaceAllLiteral"))
    }),
    ("regexSplit", |a| split(&a, OnBad::Panic("regexSplit"))),
    ("mustRegexSplit", |a| {
        split(&a, OnBad::Error("mustRegexSplit"))
    }),
];
