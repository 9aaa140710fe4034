//! The function lookup: the family tables, Sprig's aliases, the Go signatures text/template
//! checks arguments against, and registration on a minijinja environment.

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
            "now",
            "date",
            "dateInZone",
            "date_in_zone",
            "unixEpoch",
            "htmlDate",
            "htmlDateInZone",
            "ago",
            "randAlphaNum",
            "randAlpha",
            "randNumeric",
            "randAscii",
            "randInt",
            "uuidv4",
        ])
        .collect()
}

/// Sprig names that are the same function as another here: the `must*` variants (our plain
/// versions already return errors instead of panicking) and old spellings.
const ALIASES: &[(&str, &str)] = &[
    // Sprig's deprecated snake_case spellings.
    ("date_modify", "dateModify"),
    ("must_date_modify", "mustDateModify"),
    ("mustMerge", "merge"),
    ("mustMergeOverwrite", "mergeOverwrite"),
    ("mustAppend", "append"),
    ("push", "append"),
    ("mustPush", "append"),
    ("mustChunk", "chunk"),
    ("mustPrepend", "prepend"),
    ("mustFirst", "first"),
    ("mustLast", "last"),
    ("mustRest", "rest"),
    ("mustInitial", "initial"),
    ("mustUniq", "uniq"),
    ("mustWithout", "without"),
    ("mustHas", "has"),
    ("mustCompact", "compact"),
    ("mustDeepCopy", "deepCopy"),
    ("mustReverse", "reverse"),
    ("mustSlice", "slice"),
    ("mustRegexFind", "regexFind"),
    ("mustRegexFindAll", "regexFindAll"),
    ("mustRegexReplaceAll", "regexReplaceAll"),
    ("mustRegexReplaceAllLiteral", "regexReplaceAllLiteral"),
    ("mustRegexSplit", "regexSplit"),
    ("mustToRawJson", "toRawJson"),
    ("mustToPrettyJson", "toPrettyJson"),
    ("biggest", "max"),
    ("trimall", "trimAll"),
    // filepath on a Unix host is path.
    ("osBase", "base"),
    ("osClean", "clean"),
    ("osDir", "dir"),
    ("osExt", "ext"),
    ("osIsAbs", "isAbs"),
];

fn lookup_func(name: &str) -> Option<F> {
    let target = lookup_name(name);
    all_funcs().find(|(n, _)| *n == target).map(|(_, f)| *f)
}

/// The function an alias stands for (or `name` itself).
fn lookup_name(name: &str) -> &str {
    ALIASES
        .iter()
        .find(|(a, _)| *a == name)
        .map(|(_, t)| *t)
        .unwrap_or(name)
}

/// Go parameter types of the functions, one letter per parameter: `S` string, `I` int, `B`
/// bool, `M` map[string]interface{}, `A` interface{}, `U` uint32, `L` []interface{}, `C`
/// Sprig's certificate struct; a trailing `*` makes the last one
/// variadic. text/template checks arguments against these before calling, so passing a float64
/// from values where an int is wanted, or a missing value (a nil interface) where a string is
/// wanted, is an error in helm; it must be one here too, never a silent conversion. Functions
/// not listed take `interface{}` arguments and check for themselves.
const SIGNATURES: &[(&str, &str)] = &[
    ("ternary", "AAB"),
    ("required", "SA"),
    ("fail", "S"),
    ("semver", "S"),
    ("semverCompare", "SS"),
    ("fromYaml", "S"),
    ("fromYamlArray", "S"),
    ("fromJson", "S"),
    ("fromJsonArray", "S"),
    ("indent", "IS"),
    ("nindent", "IS"),
    ("trim", "S"),
    ("trimAll", "SS"),
    ("trimPrefix", "SS"),
    ("trimSuffix", "SS"),
    ("trunc", "IS"),
    ("upper", "S"),
    ("lower", "S"),
    ("title", "S"),
    ("replace", "SSS"),
    ("contains", "SS"),
    ("hasPrefix", "SS"),
    ("hasSuffix", "SS"),
    ("repeat", "IS"),
    ("splitList", "SS"),
    ("split", "SS"),
    ("splitn", "SIS"),
    ("join", "SA"),
    ("get", "MS"),
    ("set", "MSA"),
    ("unset", "MS"),
    ("hasKey", "MS"),
    ("keys", "M*"),
    ("values", "M"),
    ("pluck", "SM*"),
    ("merge", "MM*"),
    ("mergeOverwrite", "MM*"),
    ("pick", "MS*"),
    ("omit", "MS*"),
    ("append", "AA"),
    ("prepend", "AA"),
    ("has", "AA"),
    ("until", "I"),
    ("untilStep", "III"),
    ("sub", "AA"),
    ("div", "AA"),
    ("mod", "AA"),
    ("atoi", "S"),
    ("b64enc", "S"),
    ("b64dec", "S"),
    ("sha256sum", "S"),
    ("sha1sum", "S"),
    ("adler32sum", "S"),
    ("kindIs", "SA"),
    ("typeIs", "SA"),
    ("printf", "SA*"),
    ("regexMatch", "SS"),
    ("mustRegexMatch", "SS"),
    ("regexFind", "SS"),
    ("regexFindAll", "SSI"),
    ("regexSplit", "SSI"),
    ("regexReplaceAll", "SSS"),
    ("regexReplaceAllLiteral", "SSS"),
    ("lookup", "SSSS"),
    ("nospace", "S"),
    ("substr", "IIS"),
    ("abbrev", "IS"),
    ("snakecase", "S"),
    ("kebabcase", "S"),
    ("camelcase", "S"),
    ("randAlphaNum", "I"),
    ("randAlpha", "I"),
    ("randNumeric", "I"),
    ("randAscii", "I"),
    ("uuidv4", ""),
    ("add1f", "A"),
    ("subf", "AA*"),
    ("mulf", "AA*"),
    ("divf", "AA*"),
    ("maxf", "AA*"),
    ("minf", "AA*"),
    ("chunk", "IA"),
    ("b32enc", "S"),
    ("b32dec", "S"),
    ("swapcase", "S"),
    ("initials", "S"),
    ("untitle", "S"),
    ("base", "S"),
    ("dir", "S"),
    ("ext", "S"),
    ("clean", "S"),
    ("isAbs", "S"),
    ("sha512sum", "S"),
    ("regexQuoteMeta", "S"),
    ("typeIsLike", "SA"),
    ("toDecimal", "A"),
    ("duration", "A"),
    ("durationRound", "A"),
    ("toDate", "SS"),
    ("mustToDate", "SS"),
    ("dateModify", "SA"),
    ("mustDateModify", "SA"),
    ("ago", "A"),
    ("htmlDateInZone", "AS"),
    ("randInt", "II"),
    ("plural", "SSI"),
    ("round", "AIA*"),
    ("seq", "I*"),
    ("deepEqual", "AA"),
    ("wrap", "IS"),
    ("wrapWith", "ISS"),
    ("include", "SA"),
    ("tpl", "SA"),
    ("date", "SA"),
    ("dateInZone", "SAS"),
    ("htmlDate", "A"),
    ("now", ""),
    ("genPrivateKey", "S"),
    ("genCA", "SI"),
    ("genCAWithKey", "SIS"),
    ("genSelfSignedCert", "SLLI"),
    ("genSelfSignedCertWithKey", "SLLIS"),
    ("genSignedCert", "SLLIC"),
    ("genSignedCertWithKey", "SLLICS"),
    ("buildCustomCert", "SS"),
    ("bcrypt", "S"),
    ("htpasswd", "SS"),
    ("randBytes", "I"),
    ("encryptAES", "SS"),
    ("decryptAES", "SS"),
    ("derivePassword", "USSSS"),
    ("shuffle", "S"),
    ("abbrevboth", "IIS"),
    ("hello", ""),
    ("mustFromJson", "S"),
    ("urlParse", "S"),
    ("urlJoin", "M"),
    ("getHostByName", "S"),
    ("toToml", "A"),
    ("fromToml", "S"),
    ("toYamlPretty", "A"),
];

/// The Go type name of a value as text/template's argument errors print it: a missing map key
/// is a nil `interface {}`.
fn arg_type_name(v: &Value) -> &'static str {
    if v.is_none() || v.is_undefined() {
        "interface {}"
    } else {
        type_of(v)
    }
}

/// Whether a literal `nil` as argument `i` of `name` is a nil map in Go (a map parameter),
/// which map functions treat as empty. `set` on a nil map panics in Go, so it is left out.
pub fn nil_is_empty_map(name: &str, i: usize) -> bool {
    if name == "set" {
        return false;
    }
    let Some(sig) = signature(name) else {
        return false;
    };
    let params = sig.trim_end_matches('*').as_bytes();
    params
        .get(i)
        .or(params.last().filter(|_| sig.ends_with('*')))
        == Some(&b'M')
}

/// Checks `args` against the Go signature of `name` (see [`SIGNATURES`]), as text/template does.
pub fn check_args(name: &str, args: &[Value]) -> Result<(), Error> {
    check_sig(name, signature(name), args)
}

/// The signature of `name` (through its alias), looked up once per registered function.
fn signature(name: &str) -> Option<&'static str> {
    let target = ALIASES
        .iter()
        .find(|(a, _)| *a == name)
        .map(|(_, t)| *t)
        .unwrap_or(name);
    SIGNATURES
        .iter()
        .find(|(n, _)| *n == target)
        .map(|(_, s)| *s)
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
            'I' => a.kind() == ValueKind::Number && a.is_integer(),
            'U' => a.is_integer() && a.as_i64().is_some_and(|n| u32::try_from(n).is_ok()),
            // A `[]interface{}`: a list, or nil (a missing value is a nil slice).
            'L' => a.is_none() || a.is_undefined() || a.kind() == ValueKind::Seq,
            'C' => matches!(
                a.downcast_object_ref::<GoMap>(),
                Some(m) if m.1 == GoType::Struct("sprig.certificate")
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

/// Registers the runtime on an environment.
pub fn register(env: &mut Environment<'static>) {
    for (alias, _) in ALIASES {
        if let Some(f) = lookup_func(alias) {
            let name: &'static str = alias;
            let sig = signature(name);
            let precheck = budgets::precheck_for(lookup_name(alias));
            env.add_function(format!("h_{alias}"), move |args: Rest<Value>| {
                check_sig(name, sig, &args)?;
                budgets::before_call(name, precheck, &args)?;
                budgets::after_call(name, f(args)?)
            });
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
            check_sig(name, sig, &args)?;
            budgets::before_call(name, precheck, &args)?;
            budgets::after_call(name, f(args)?)
        });
    }
    for (name, f) in all_state_funcs() {
        let (f, name): (SF, &'static str) = (*f, name);
        let sig = signature(name);
        let precheck = budgets::precheck_for(name);
        env.add_function(
            format!("h_{name}"),
            move |state: &State, args: Rest<Value>| {
                check_sig(name, sig, &args)?;
                budgets::before_call(name, precheck, &args)?;
                budgets::after_call(name, f(state, args)?)
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
    env.add_function("h_now", |state: &State, args: Rest<Value>| {
        check_args("now", &args)?;
        f_now(state)
    });
    env.add_function("h_date", |args: Rest<Value>| {
        check_args("date", &args)?;
        f_date(s(&args[0]), args[1].clone())
    });
    for name in ["dateInZone", "date_in_zone"] {
        env.add_function(format!("h_{name}"), move |args: Rest<Value>| {
            check_args("dateInZone", &args)?;
            f_date_in_zone(s(&args[0]), args[1].clone(), s(&args[2]))
        });
    }
    env.add_function("h_unixEpoch", |t: Value| -> Result<Value, Error> {
        Ok(Value::from(as_time(&t)?.secs.to_string()))
    });
    env.add_function("h_htmlDate", |t: Value| -> Result<Value, Error> {
        f_date("2006-01-02".into(), t)
    });
    env.add_function("h_htmlDateInZone", |args: Rest<Value>| {
        check_args("htmlDateInZone", &args)?;
        f_date_in_zone("2006-01-02".into(), args[0].clone(), s(&args[1]))
    });
    env.add_function("h_ago", |state: &State, args: Rest<Value>| {
        check_args("ago", &args)?;
        // time.Since against the pinned clock, rounded to seconds.
        let now = f_now(state)?;
        let now = as_time(&now)?;
        let then = match args[0].kind() {
            ValueKind::Number if args[0].is_integer() => GoTime {
                secs: args[0].as_i64().unwrap_or(0),
                nanos: 0,
            },
            _ => match args[0].downcast_object_ref::<GoTime>() {
                Some(t) => *t,
                None => now,
            },
        };
        let ns = (i128::from(now.secs) - i128::from(then.secs)) * 1_000_000_000
            + i128::from(now.nanos)
            - i128::from(then.nanos);
        let rounded = (ns + ns.signum() * 500_000_000) / 1_000_000_000 * 1_000_000_000;
        Ok(Value::from(go_duration_string(rounded)))
    });
    env.set_formatter(|out, _state, v| {
        // Go prints a missing value as "<no value>"; helm removes that text from each
        // rendered file and from tpl's result, but not from include's (`include ... |
        // sha256sum` sees it).
        if v.is_none() || v.is_undefined() {
            return out.write_str(NO_VALUE).map_err(|_| err("write failed"));
        }
        if let Some(ty) = unprintable(v) {
            return Err(err(format!(
                "unsupported construct: printing a {ty} (Go prints its struct fields)"
            )));
        }
        out.write_str(&go_fmt(v)).map_err(|_| err("write failed"))
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
