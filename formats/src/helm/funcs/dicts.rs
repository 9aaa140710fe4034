//! Sprig's dict functions (`dict`, `get`, `set`, `merge`, `pick`, `dig`, `deepCopy`, ...).

use super::*;

pub(super) const FUNCS: &[(&str, F)] = &[
    ("dict", |a| {
        // A key without a value gets "" (Sprig).
        let mut m = BTreeMap::new();
        for pair in a.0.chunks(2) {
            m.insert(
                strval(&pair[0]),
                pair.get(1).cloned().unwrap_or(Value::from("")),
            );
        }
        Ok(GoMap::value(m))
    }),
    ("get", |a| {
        Ok(map_entries(&arg(&a, 0))
            .and_then(|m| m.get(&s(&arg(&a, 1))).cloned())
            .unwrap_or(Value::from("")))
    }),
    ("set", |a| {
        want(&a, 3, "set")?;
        let m = a[0]
            .downcast_object_ref::<GoMap>()
            .ok_or_else(|| err("set: first argument must be a map"))?;
        m.lock().insert(s(&a[1]), a[2].clone());
        Ok(a[0].clone())
    }),
    ("unset", |a| {
        want(&a, 2, "unset")?;
        let m = a[0]
            .downcast_object_ref::<GoMap>()
            .ok_or_else(|| err("unset: first argument must be a map"))?;
        m.lock().remove(&s(&a[1]));
        Ok(a[0].clone())
    }),
    ("hasKey", |a| {
        Ok(Value::from(
            map_entries(&arg(&a, 0)).is_some_and(|m| m.contains_key(&s(&arg(&a, 1)))),
        ))
    }),
    ("keys", |a| {
        let mut out = Vec::new();
        for m in &a.0 {
            out.extend(
                map_entries(m)
                    .unwrap_or_default()
                    .into_keys()
                    .map(Value::from),
            );
        }
        Ok(Value::from(out))
    }),
    ("values", |a| {
        Ok(Value::from(
            map_entries(&arg(&a, 0))
                .unwrap_or_default()
                .into_values()
                .collect::<Vec<_>>(),
        ))
    }),
    ("pluck", |a| {
        let key = s(&arg(&a, 0));
        Ok(a.0
            .iter()
            .skip(1)
            .filter_map(|m| map_entries(m)?.get(&key).cloned())
            .collect())
    }),
    ("merge", |a| {
        let dst = arg(&a, 0);
        let m = dst
            .downcast_object_ref::<GoMap>()
            .ok_or_else(|| err("merge: first argument must be a map"))?;
        for src in a.0.iter().skip(1) {
            let sm = map_entries(src).unwrap_or_default();
            merge_into(&mut m.lock(), &sm, false);
        }
        Ok(dst.clone())
    }),
    ("mergeOverwrite", |a| {
        let dst = arg(&a, 0);
        let m = dst
            .downcast_object_ref::<GoMap>()
            .ok_or_else(|| err("mergeOverwrite: first argument must be a map"))?;
        for src in a.0.iter().skip(1) {
            let sm = map_entries(src).unwrap_or_default();
            merge_into(&mut m.lock(), &sm, true);
        }
        Ok(dst.clone())
    }),
    ("deepCopy", |a| {
        let v = arg(&a, 0);
        if v.is_none() || v.is_undefined() {
            return Err(err("reflect: call of reflect.Value.Type on zero Value"));
        }
        Ok(deep_copy(&v))
    }),
    ("dig", |a| {
        // dig "k1" "k2" default map. Sprig type-asserts every step to a plain
        // map[string]interface{}, so `.Values` itself, nil or a scalar on the path fail.
        let n = a.len();
        if n < 3 {
            return Err(err("wrong number of args for dig"));
        }
        let as_plain_map = |v: &Value| -> Result<BTreeMap<String, Value>, Error> {
            match v.downcast_object_ref::<GoMap>() {
                Some(m) if m.1 == GoType::Map => Ok(m.snapshot()),
                _ => Err(err(format!(
                    "interface conversion: interface {{}} is {}, not map[string]interface {{}}",
                    match type_of(v) {
                        "<nil>" => "nil",
                        t => t,
                    }
                ))),
            }
        };
        let keys = a[..n - 2]
            .iter()
            .map(|k| {
                k.as_str().map(str::to_string).ok_or_else(|| {
                    err(format!(
                        "interface conversion: interface {{}} is {}, not string",
                        type_of(k)
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut cur = as_plain_map(&a[n - 1])?;
        for (i, k) in keys.iter().enumerate() {
            let Some(step) = cur.get(k).cloned() else {
                return Ok(a[n - 2].clone());
            };
            if i + 1 == keys.len() {
                return Ok(step);
            }
            cur = as_plain_map(&step)?;
        }
        Ok(a[n - 2].clone())
    }),
    ("pick", |a| {
        let m = map_entries(&arg(&a, 0)).unwrap_or_default();
        let keys: Vec<String> = a.iter().skip(1).map(s).collect();
        Ok(GoMap::value(
            m.into_iter().filter(|(k, _)| keys.contains(k)).collect(),
        ))
    }),
    ("omit", |a| {
        let m = map_entries(&arg(&a, 0)).unwrap_or_default();
        let keys: Vec<String> = a.iter().skip(1).map(s).collect();
        Ok(GoMap::value(
            m.into_iter().filter(|(k, _)| !keys.contains(k)).collect(),
        ))
    }),
];

pub(super) fn deep_copy(v: &Value) -> Value {
    let copy = from_json_keep_ints(&to_json(v));
    // copystructure keeps the named type: a copy of `.Values` is still a chartutil.Values.
    match (
        v.downcast_object_ref::<GoMap>(),
        copy.downcast_object_ref::<GoMap>(),
    ) {
        (Some(orig), Some(c)) if orig.1 != GoType::Map => GoMap::typed(c.snapshot(), orig.1),
        _ => copy,
    }
}

pub(super) fn from_json_keep_ints(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::from(i),
            None => Value::from(n.as_f64().unwrap_or(0.0)),
        },
        serde_json::Value::Array(a) => {
            Value::from(a.iter().map(from_json_keep_ints).collect::<Vec<_>>())
        }
        serde_json::Value::Object(o) => GoMap::value(
            o.iter()
                .map(|(k, v)| (k.clone(), from_json_keep_ints(v)))
                .collect(),
        ),
        other => from_json(other),
    }
}

/// Sprig's `merge` (`overwrite` false) and `mergeOverwrite` (true), as mergo merges two
/// `map[string]interface{}`:
/// - a nil source value is skipped by `merge` at every level where both sides are maps, and
///   set by `mergeOverwrite`;
/// - where both sides hold maps, the source is merged into the destination's map (shared, as in
///   Go); a destination map still empty afterwards is replaced by the source's map;
/// - anything else is set when the destination has no value for the key, an empty one, or
///   `overwrite` is on (a source map is set by reference, nil values and all).
pub(super) fn merge_into(
    dst: &mut BTreeMap<String, Value>,
    src: &BTreeMap<String, Value>,
    overwrite: bool,
) {
    for (k, v) in src {
        if v.is_none() || v.is_undefined() {
            if overwrite {
                dst.insert(k.clone(), Value::from(()));
            }
            continue;
        }
        let current = dst.get(k).cloned();
        if let Some(d) = &current {
            if is_map(d) && is_map(v) {
                if let (Some(dm), Some(sm)) = (d.downcast_object_ref::<GoMap>(), map_entries(v)) {
                    let mut g = dm.lock();
                    merge_into(&mut g, &sm, overwrite);
                }
            }
            // Read after the merge above: a map it filled is no longer empty.
            if !empty(d) && is_map(d) && is_map(v) {
                continue;
            }
        }
        if overwrite || current.as_ref().is_none_or(empty) {
            dst.insert(k.clone(), v.clone());
        }
    }
}
