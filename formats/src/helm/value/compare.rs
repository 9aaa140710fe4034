//! Go's `reflect.DeepEqual` (Sprig's `deepEqual`, and how `has`, `uniq` and `without` compare
//! items) and copystructure's deep copy (`deepCopy`), both bounded by [`super::MAX_DEPTH`].

use minijinja::value::{Value, ValueKind};
use minijinja::Error;

use super::{enter, list_items, map_entries, type_of, GoList, GoMap, GoTime};

/// Whether `a` and `b` are deeply equal as Go sees them: the same type (an `int` is never equal
/// to an `int64` or a `float64`, a `map[string]interface{}` never to `chartutil.Values`) and
/// equal contents.
pub fn deep_equal(a: &Value, b: &Value) -> Result<bool, Error> {
    equal(a, b, 0)
}

fn equal(a: &Value, b: &Value, depth: usize) -> Result<bool, Error> {
    if type_of(a) != type_of(b) {
        return Ok(false);
    }
    if let (Some(x), Some(y)) = (
        a.downcast_object_ref::<GoTime>(),
        b.downcast_object_ref::<GoTime>(),
    ) {
        return Ok((x.secs, x.nanos) == (y.secs, y.nanos));
    }
    match a.kind() {
        ValueKind::Undefined | ValueKind::None => Ok(true),
        ValueKind::Map => {
            enter(depth + 1, "a compared value")?;
            let (Some(x), Some(y)) = (map_entries(a), map_entries(b)) else {
                return Ok(a.to_string() == b.to_string());
            };
            if x.len() != y.len() {
                return Ok(false);
            }
            for ((kx, vx), (ky, vy)) in x.iter().zip(y.iter()) {
                if kx != ky || !equal(vx, vy, depth + 1)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        ValueKind::Seq | ValueKind::Iterable => {
            enter(depth + 1, "a compared value")?;
            let (x, y) = (
                list_items(a).unwrap_or_default(),
                list_items(b).unwrap_or_default(),
            );
            if x.len() != y.len() {
                return Ok(false);
            }
            for (vx, vy) in x.iter().zip(y.iter()) {
                if !equal(vx, vy, depth + 1)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        ValueKind::Number if !a.is_integer() => {
            // NaN is unequal to itself, as in Go.
            Ok(f64::try_from(a.clone()).ok() == f64::try_from(b.clone()).ok())
        }
        ValueKind::Bool | ValueKind::Number | ValueKind::String | ValueKind::Bytes => Ok(a == b),
        // Files, API versions, semver versions: compared by what they hold.
        _ => Ok(a.to_string() == b.to_string()),
    }
}

/// A deep copy of `v` (copystructure's): maps and lists are copied at every level, keeping their
/// Go types; everything else is immutable and shared.
pub fn deep_copy(v: &Value) -> Result<Value, Error> {
    copy(v, 0)
}

fn copy(v: &Value, depth: usize) -> Result<Value, Error> {
    if let Some(m) = v.downcast_object_ref::<GoMap>() {
        enter(depth + 1, "a copied value")?;
        let entries = m
            .snapshot()
            .into_iter()
            .map(|(k, x)| Ok((k, copy(&x, depth + 1)?)))
            .collect::<Result<_, Error>>()?;
        return Ok(GoMap::typed(entries, m.1));
    }
    if v.kind() == ValueKind::Seq && v.downcast_object_ref::<super::ApiVersions>().is_none() {
        enter(depth + 1, "a copied value")?;
        let items = list_items(v)
            .unwrap_or_default()
            .iter()
            .map(|x| copy(x, depth + 1))
            .collect::<Result<_, Error>>()?;
        return Ok(GoList::value(items));
    }
    Ok(v.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_types_decide_equality() {
        use super::super::go_int64;
        assert!(deep_equal(&Value::from(1), &Value::from(1)).unwrap());
        assert!(!deep_equal(&Value::from(1), &go_int64(1)).unwrap());
        assert!(!deep_equal(&Value::from(1), &Value::from(1.0)).unwrap());
        let a = GoList::value(vec![Value::from("x"), GoMap::value(Default::default())]);
        let b = GoList::value(vec![Value::from("x"), GoMap::value(Default::default())]);
        assert!(deep_equal(&a, &b).unwrap());
    }

    #[test]
    fn a_map_that_holds_itself_is_refused_not_followed() {
        let m = GoMap::value(Default::default());
        if let Some(g) = m.downcast_object_ref::<GoMap>() {
            g.lock().insert("self".into(), m.clone());
        }
        assert!(deep_equal(&m, &m).is_err());
        assert!(deep_copy(&m).is_err());
        crate::budget::take_breach();
        // Break the cycle so the test does not leak it.
        if let Some(g) = m.downcast_object_ref::<GoMap>() {
            g.lock().clear();
        }
    }
}
