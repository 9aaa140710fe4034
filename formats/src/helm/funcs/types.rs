//! Type inspection: `kindOf`, `typeOf`, `kindIs`, `typeIs`, `typeIsLike`, `deepEqual`.

use super::*;

pub(super) const FUNCS: &[(&str, F)] = &[
    ("typeIsLike", |a| {
        let t = type_of(&a[1]);
        let want = s(&a[0]);
        Ok(Value::from(t == want || t == format!("*{want}")))
    }),
    ("kindIs", |a| {
        Ok(Value::from(kind_of(&arg(&a, 1)) == s(&arg(&a, 0))))
    }),
    ("kindOf", |a| Ok(Value::from(kind_of(&arg(&a, 0))))),
    ("typeOf", |a| Ok(Value::from(type_of(&arg(&a, 0))))),
    ("typeIs", |a| {
        Ok(Value::from(type_of(&arg(&a, 1)) == s(&arg(&a, 0))))
    }),
    ("deepEqual", |a| {
        Ok(Value::from(deep_equal(&arg(&a, 0), &arg(&a, 1))?))
    }),
];
