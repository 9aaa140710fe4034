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
        Ok(GoList::value(
            map_entries(&arg(&a, 0))
                .unwrap_or_default()
                .into_values()
                .collect(),
        ))
    }),
    ("pluck", |a| {
        let key = s(&arg(&a, 0));
        Ok(GoList::value(
            a.0.iter()
                .skip(1)
                .filter_map(|m| map_entries(m)?.get(&key).cloned())
                .collect(),
        ))
    }),
    ("merge", |a| {
        let dst = arg(&a, 0);
        let m = dst
            .downcast_object_ref::<GoMap>()
            .ok_or_else(|| err("merge: first argument must be a map"))?;
        for src in a.0.iter().skip(1) {
            let sm = map_entries(src).unwrap_or_default();
            merge_into(&mut m.lock(), &sm, false, 1)?;
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
            merge_into(&mut m.lock(), &sm, true, 1)?;
        }
        Ok(dst.clone())
    }),
    ("deepCopy", |a| {
        let v = arg(&a, 0);
        if v.is_none() || v.is_undefined() {
            return Err(err("reflect: call of reflect.Value.Type on zero Value"));
        }
        deep_copy(&v)
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

/// Sprig's `merge` (`overwrite` false) and `mergeOverwrite` (true), as mergo merges two
/// `map[string]interface{}`:
/// - a nil source value is skipped by `merge` at every level where both sides are maps, and
///   set by `mergeOverwrite`;
/// - where both sides hold maps, the source is merged into the destination's map (shared, as in
///   Go); a destination map still empty afterwards is replaced by the source's map;
/// - anything else is set when the destination has no value for the key, an empty one, or
///   `overwrite` is on (a source map is set by reference, nil values and all).
///
/// `depth` is how deep `dst` is in the merged value (1 for the map merged into), bounded by the
/// values budget: a map that holds itself is refused, not followed.
pub(super) fn merge_into(
    dst: &mut BTreeMap<String, Value>,
    src: &BTreeMap<String, Value>,
    overwrite: bool,
    depth: usize,
) -> Result<(), Error> {
    super::super::value::enter(depth, "a merged value")?;
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
                    // Locked already: the map being merged into holds itself (a render
                    // runs on one thread).
                    let mut g = match dm.0.try_lock() {
                        Ok(g) => g,
                        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                        Err(std::sync::TryLockError::WouldBlock) => {
                            return Err(err(crate::budget::refuse(
                                "unsupported construct: merging into a map that holds itself",
                            )))
                        }
                    };
                    merge_into(&mut g, &sm, overwrite, depth + 1)?;
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
    Ok(())
}
