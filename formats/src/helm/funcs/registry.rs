//! The function lookup: the family tables and registration on a minijinja environment, each
//! function behind the checks text/template and the render's budgets make of every call.

use super::signatures::{lookup_name, signature};
use super::*;

/// Every function table, one per family; names are unique across them.
const FAMILIES: &[&[(&str, F)]] = &[
    CORE,
    templates::FUNCS,
    builtins::FUNCS,
    strings::FUNCS,
    lists::FUNCS,
    dicts::FUNCS,
    numbers::FUNCS,
    types::FUNCS,
    encoding::FUNCS,
    yaml::FUNCS,
    crypto::FUNCS,
    regexp::FUNCS,
    paths::FUNCS,
    urls::FUNCS,
    toml::FUNCS,
    yaml3::FUNCS,
    dates::FUNCS,
];

/// The family tables of functions that need the render state.
const STATE_FAMILIES: &[&[(&str, SF)]] = &[
    crypto::STATE_FUNCS,
    dates::STATE_FUNCS,
    strings::STATE_FUNCS,
    templates::STATE_FUNCS,
];

fn all_state_funcs() -> impl Iterator<Item = &'static (&'static str, SF)> {
    STATE_FAMILIES.iter().flat_map(|t| t.iter())
}

/// All `(name, function)` pairs of the family tables.
fn all_funcs() -> impl Iterator<Item = &'static (&'static str, F)> {
    FAMILIES.iter().flat_map(|t| t.iter())
}

/// The function names the translator accepts (every one has an `h_` implementation).
pub fn known() -> HashSet<&'static str> {
    all_funcs()
        .map(|(n, _)| *n)
        .chain(all_state_funcs().map(|(n, _)| *n))
        .chain(ALIASES.iter().map(|(a, _)| *a))
        .collect::<HashSet<_>>()
        .into_iter()
        .chain([
            "include",
            "tpl",
            "and",
            "or",
            "not",
            "randAlphaNum",
            "randAlpha",
            "randNumeric",
            "randAscii",
            "randInt",
            "uuidv4",
        ])
        .collect()
}

fn lookup_func(name: &str) -> Option<F> {
    let target = lookup_name(name);
    all_funcs().find(|(n, _)| *n == target).map(|(_, f)| *f)
}

fn lookup_state_func(name: &str) -> Option<SF> {
    let target = lookup_name(name);
    all_state_funcs()
        .find(|(n, _)| *n == target)
        .map(|(_, f)| *f)
}

/// The Go type name of a value as text/template's argument errors print it: a missing map key
/// is a nil `interface {}`.
fn arg_type_name(v: &Value) -> &'static str {
    if v.is_none() || v.is_undefined() {
        "interface {}"
    } else {
        type_of(v)
    }
}

/// Checks `args` against the Go signature of `name` (see `signatures::SIGNATURES`), as
/// text/template does.
pub fn check_args(name: &str, args: &[Value]) -> Result<(), Error> {
    check_sig(name, signature(name), args)
}

fn check_sig(name: &str, sig: Option<&str>, args: &[Value]) -> Result<(), Error> {
    let Some(sig) = sig else {
        return Ok(());
    };
    let variadic = sig.ends_with('*');
    let params = sig.trim_end_matches('*').as_bytes();
    let fixed = if variadic {
        params.len() - 1
    } else {
        params.len()
    };
    if (!variadic && args.len() != fixed) || (variadic && args.len() < fixed) {
        return Err(err(format!(
            "wrong number of args for {name}: want {}{} got {}",
            if variadic { "at least " } else { "" },
            fixed,
            args.len()
        )));
    }
    for (i, a) in args.iter().enumerate() {
        let p = char::from(params.get(i).or(params.last()).copied().unwrap_or(b'A'));
        let ok = match p {
            'S' => a.kind() == ValueKind::String,
            'I' => number_type(a) == Some(GoNumber::Int),
            'U' => a.is_integer() && a.as_i64().is_some_and(|n| u32::try_from(n).is_ok()),
            // A `[]interface{}`: a list, or nil (a missing value is a nil slice).
            'L' => a.is_none() || a.is_undefined() || a.kind() == ValueKind::Seq,
            'C' => matches!(
                a.downcast_object_ref::<GoMap>(),
                Some(m) if m.1.struct_name() == Some("sprig.certificate")
            ),
            'B' => a.kind() == ValueKind::Bool,
            'M' => matches!(
                a.downcast_object_ref::<GoMap>(),
                Some(m) if matches!(m.1, GoType::Map | GoType::Values)
            ),
            _ => true,
        };
        if !ok {
            let want = match p {
                'S' => "string",
                'I' => "int",
                'B' => "bool",
                'U' => "uint32",
                'L' => "[]interface {}",
                'C' => "sprig.certificate",
                _ => "map[string]interface {}",
            };
            return Err(err(format!(
                "wrong type for value; expected {want}; got {} (argument {} of {name})",
                arg_type_name(a),
                i + 1
            )));
        }
    }
    Ok(())
}

/// Calls `name`'s implementation `f` as text/template calls a function: its arguments checked
/// against its Go signature `sig`, a step charged (and `precheck` made), its result checked
/// against the budgets. A budget breach or refusal met during the call fails it, even when the
/// function turned the error into a value (`fromJson`'s `Error`, `regexMatch`'s false): pallet's
/// limits are never a silent value. A struct field of the context it returns is a copy.
fn call(
    name: &'static str,
    sig: Option<&'static str>,
    precheck: Option<budgets::Precheck>,
    args: Rest<Value>,
    f: impl FnOnce(Rest<Value>) -> Result<Value, Error>,
) -> Result<Value, Error> {
    check_sig(name, sig, &args)?;
    budgets::before_call(name, precheck, &args)?;
    // Go passes and returns values, not the context's fields: copies.
    let mut args = args;
    args.0.iter_mut().for_each(make_copy);
    let failures = crate::budget::failures();
    let result = f(args);
    if crate::budget::failures() != failures {
        return Err(err(crate::budget::last_failure()));
    }
    budgets::after_call(name, as_copy(result?))
}

/// Registers the runtime on an environment.
pub fn register(env: &mut Environment<'static>) {
    for (alias, _) in ALIASES {
        let name: &'static str = alias;
        let sig = signature(name);
        let precheck = budgets::precheck_for(lookup_name(alias));
        if let Some(f) = lookup_func(alias) {
            env.add_function(format!("h_{alias}"), move |args: Rest<Value>| {
                call(name, sig, precheck, args, f)
            });
        } else if let Some(f) = lookup_state_func(alias) {
            env.add_function(
                format!("h_{alias}"),
                move |state: &State, args: Rest<Value>| {
                    call(name, sig, precheck, args, |a| f(state, a))
                },
            );
        }
    }
    for (name, f) in all_funcs() {
        let f = *f;
        let name: &'static str = name;
        let n = if name.starts_with("__") {
            name.to_string()
        } else {
            format!("h_{name}")
        };
        let sig = signature(name);
        let precheck = budgets::precheck_for(name);
        env.add_function(n, move |args: Rest<Value>| {
            call(name, sig, precheck, args, f)
        });
    }
    for (name, f) in all_state_funcs() {
        let (f, name): (SF, &'static str) = (*f, name);
        let sig = signature(name);
        let precheck = budgets::precheck_for(name);
        env.add_function(
            format!("h_{name}"),
            move |state: &State, args: Rest<Value>| {
                call(name, sig, precheck, args, |a| f(state, a))
            },
        );
    }
    env.add_function("__f", f_field);
    env.add_function("__fr", f_field_of_result);
    env.add_function("__nilmap", || GoMap::value(BTreeMap::new()));
    // A variable declared in an earlier branch of a control: its value, else the outer
    // variable of that name Go would find on its stack, else Go's error.
    env.add_function(
        "__setvar",
        |v: Value, name: String, outer: Option<Value>| match outer {
            _ if !v.is_undefined() => Ok(v),
            Some(o) if !o.is_undefined() => Ok(o),
            _ => Err(err(format!("undefined variable: {name}"))),
        },
    );
    env.add_function("__nilmap_or", |v: Value| {
        if v.is_none() || v.is_undefined() {
            GoMap::value(BTreeMap::new())
        } else {
            v
        }
    });
    env.add_function("__call", f_call);
    env.add_function("h_include", |state: &State, args: Rest<Value>| {
        check_args("include", &args)?;
        f_include(state, s(&args[0]), Some(args[1].clone()))
    });
    env.add_function("__template", f_template);
    env.add_function("h_randAlphaNum", |state: &State, args: Rest<Value>| {
        budgets::before_call("randAlphaNum", budgets::precheck_for("randAlphaNum"), &args)?;
        random_string(state, "randAlphaNum", &args, ALNUM)
    });
    env.add_function("h_randAlpha", |state: &State, args: Rest<Value>| {
        budgets::before_call("randAlpha", budgets::precheck_for("randAlpha"), &args)?;
        random_string(state, "randAlpha", &args, &ALNUM[..52])
    });
    env.add_function("h_randNumeric", |state: &State, args: Rest<Value>| {
        budgets::before_call("randNumeric", budgets::precheck_for("randNumeric"), &args)?;
        random_string(state, "randNumeric", &args, &ALNUM[52..])
    });
    env.add_function("h_randAscii", |state: &State, args: Rest<Value>| {
        budgets::before_call("randAscii", budgets::precheck_for("randAscii"), &args)?;
        let printable: Vec<u8> = (32u8..=126).collect();
        random_string(state, "randAscii", &args, &printable)
    });
    env.add_function("h_uuidv4", f_uuidv4);
    env.add_function("h_randInt", f_rand_int);
    env.add_function("h_tpl", |state: &State, args: Rest<Value>| {
        check_args("tpl", &args)?;
        f_tpl(state, s(&args[0]), args[1].clone())
    });
    env.set_formatter(|out, _state, v| {
        // Go prints a missing value as "<no value>"; helm removes that text from each
        // rendered file and from tpl's result, but not from include's (`include ... |
        // sha256sum` sees it).
        let failures = crate::budget::failures();
        let text = print_action(v);
        if crate::budget::failures() != failures {
            return Err(err(crate::budget::last_failure()));
        }
        out.write_str(&text).map_err(|_| err("write failed"))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_helm_function_is_implemented_and_no_other() {
        let known = known();
        // The translator's list of every function helm v3.19.5 defines (Sprig v3.3.0's
        // `TxtFuncMap` without env/expandenv, plus helm's own).
        let missing: Vec<_> = crate::helm::translate::HELM_FUNCTIONS
            .iter()
            .filter(|n| !known.contains(*n))
            .collect();
        assert!(missing.is_empty(), "not implemented: {missing:?}");
        for absent in ["env", "expandenv", "mustToYaml", "gte", "lte"] {
            assert!(
                !known.contains(absent),
                "{absent} is not a helm v3.19 function"
            );
        }
    }
}
