//! Sprig's list functions (`list`, `append`, `uniq`, `until`, `chunk`, ...).

use super::*;

pub(super) const FUNCS: &[(&str, F)] = &[
    ("list", |a| Ok(GoList::value(a.0))),
    ("tuple", |a| Ok(GoList::value(a.0))),
    ("append", |a| {
        let mut l = go_list("push", &arg(&a, 0))?;
        l.push(arg(&a, 1));
        Ok(GoList::value(l))
    }),
    ("prepend", |a| {
        let mut l = go_list("prepend", &arg(&a, 0))?;
        l.insert(0, arg(&a, 1));
        Ok(GoList::value(l))
    }),
    ("sortAlpha", |a| {
        // Sprig: a list sorts its items' strings; anything else is a one-item list.
        let v = arg(&a, 0);
        let mut l: Vec<String> = match list_items(&v) {
            Some(items) => strslice(&items),
            None => vec![strval(&v)],
        };
        l.sort();
        Ok(l.into_iter().map(Value::from).collect())
    }),
    ("first", |a| {
        Ok(go_list("find first", &arg(&a, 0))?
            .first()
            .cloned()
            .unwrap_or_default())
    }),
    ("last", |a| {
        Ok(go_list("find last", &arg(&a, 0))?
            .last()
            .cloned()
            .unwrap_or_default())
    }),
    ("rest", |a| {
        let l = go_list("find rest", &arg(&a, 0))?;
        // Sprig returns nil for an empty list.
        if l.is_empty() {
            return Ok(Value::from(()));
        }
        Ok(GoList::value(l.into_iter().skip(1).collect()))
    }),
    ("initial", |a| {
        let mut l = go_list("find initial", &arg(&a, 0))?;
        if l.is_empty() {
            return Ok(Value::from(()));
        }
        l.pop();
        Ok(GoList::value(l))
    }),
    ("uniq", |a| {
        let mut out: Vec<Value> = Vec::new();
        for v in go_list("find uniq", &arg(&a, 0))? {
            if !contains(&out, &v)? {
                out.push(v);
            }
        }
        Ok(GoList::value(out))
    }),
    ("has", |a| {
        // A nil haystack has nothing; anything else must be a list.
        let hay = arg(&a, 1);
        if hay.is_none() || hay.is_undefined() {
            return Ok(Value::from(false));
        }
        Ok(Value::from(contains(
            &go_list("find has", &hay)?,
            &arg(&a, 0),
        )?))
    }),
    ("without", |a| {
        let l = go_list("find without", &arg(&a, 0))?;
        let mut kept = Vec::new();
        for x in l {
            if !contains(&a.0[1..], &x)? {
                kept.push(x);
            }
        }
        Ok(GoList::value(kept))
    }),
    ("compact", |a| {
        Ok(GoList::value(
            go_list("compact", &arg(&a, 0))?
                .into_iter()
                .filter(|x| !empty(x))
                .collect(),
        ))
    }),
    ("until", |a| {
        let n = to_i64(&arg(&a, 0));
        Ok(until_step(0, n, if n < 0 { -1 } else { 1 })
            .into_iter()
            .map(Value::from)
            .collect())
    }),
    ("untilStep", |a| {
        Ok(until_step(
            to_i64(&arg(&a, 0)),
            to_i64(&arg(&a, 1)),
            to_i64(&arg(&a, 2)),
        )
        .into_iter()
        .map(Value::from)
        .collect())
    }),
    ("chunk", |a| {
        let size = to_i64(&a[0]);
        let items = go_list("chunk", &a[1])?;
        if size < 1 {
            return Err(err("chunk size must be at least 1"));
        }
        Ok(GoList::value(
            items
                .chunks(size as usize)
                .map(|c| GoList::value(c.to_vec()))
                .collect(),
        ))
    }),
    ("toStrings", |a| {
        let v = arg(&a, 0);
        Ok(match list_items(&v) {
            Some(items) => strslice(&items),
            None if v.is_none() || v.is_undefined() => Vec::new(),
            None => vec![strval(&v)],
        }
        .into_iter()
        .map(Value::from)
        .collect())
    }),
    ("concat", |a| {
        let mut out = Vec::new();
        for l in a.iter() {
            if l.is_none() || l.is_undefined() {
                return Err(err(NIL_DEREF));
            }
            match list_items(l) {
                Some(items) => out.extend(items),
                None => return Err(err(format!("Cannot concat type {} as list", kind_of(l)))),
            }
        }
        Ok(GoList::value(out))
    }),
    ("reverse", |a| {
        let mut l = go_list("find reverse", &arg(&a, 0))?;
        l.reverse();
        Ok(GoList::value(l))
    }),
    ("seq", |a| {
        let nums: Vec<i64> = a.iter().map(to_i64).collect();
        let list = match nums.as_slice() {
            [end] => {
                let inc = if *end < 1 { -1 } else { 1 };
                until_step(1, end + inc, inc)
            }
            [start, end] => {
                let step = if end < start { -1 } else { 1 };
                until_step(*start, end + step, step)
            }
            [start, step, end] => {
                let inc = if end < start { -1 } else { 1 };
                if end < start && *step > 0 {
                    Vec::new()
                } else {
                    until_step(*start, end + inc, *step)
                }
            }
            _ => Vec::new(),
        };
        Ok(Value::from(
            list.iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(" "),
        ))
    }),
];

/// Whether `items` holds a value deeply equal to `v` (Sprig's `inList`, `reflect.DeepEqual`).
fn contains(items: &[Value], v: &Value) -> Result<bool, Error> {
    for item in items {
        if deep_equal(item, v)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Sprig's `untilStep`: from `start` towards `stop` (exclusive) by `step`; empty when the
/// step does not lead there.
pub(super) fn until_step(start: i64, stop: i64, step: i64) -> Vec<i64> {
    let mut out = Vec::new();
    let mut i = start;
    if stop < start {
        if step >= 0 {
            return out;
        }
        while i > stop {
            out.push(i);
            i += step;
        }
    } else {
        if step <= 0 {
            return out;
        }
        while i < stop {
            out.push(i);
            i += step;
        }
    }
    out
}
