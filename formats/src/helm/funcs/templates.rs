//! Helm's and Sprig's template-level functions: `include`/`tpl`/`template`, `required`, `fail`,
//! `lookup`, and Sprig's defaults (`default`, `empty`, `coalesce`, `ternary`, `all`, `any`).

use super::*;
use crate::budget;

pub(super) const FUNCS: &[(&str, F)] = &[
    ("default", |a| {
        // `x | default d` arrives as (d, x).
        match a.0.as_slice() {
            [d] => Ok(d.clone()),
            [d, v] => Ok(if empty(v) { d.clone() } else { v.clone() }),
            _ => Err(err("wrong number of args for default")),
        }
    }),
    ("empty", |a| Ok(Value::from(empty(&arg(&a, 0))))),
    ("coalesce", |a| {
        Ok(a.0.iter().find(|v| !empty(v)).cloned().unwrap_or_default())
    }),
    ("ternary", |a| {
        want(&a, 3, "ternary")?;
        Ok(if a[2].is_true() {
            a[0].clone()
        } else {
            a[1].clone()
        })
    }),
    ("required", |a| {
        want(&a, 2, "required")?;
        let v = &a[1];
        if v.is_none()
            || v.is_undefined()
            || (v.kind() == ValueKind::String && v.as_str() == Some(""))
        {
            return Err(err(s(&a[0])));
        }
        Ok(v.clone())
    }),
    ("fail", |a| Err(err(s(&arg(&a, 0))))),
    ("all", |a| Ok(Value::from(a.iter().all(|v| !empty(v))))),
    ("any", |a| Ok(Value::from(a.iter().any(|v| !empty(v))))),
];

pub(super) const STATE_FUNCS: &[(&str, SF)] = &[("lookup", |state, a| {
    want(&a, 4, "lookup")?;
    let key = crate::LookupKey {
        api_version: s(&a[0]),
        kind: s(&a[1]),
        namespace: s(&a[2]),
        name: s(&a[3]),
    };
    let table = state
        .lookup("__lookups")
        .and_then(|v| v.downcast_object::<LookupTable>())
        .ok_or_else(|| err("internal: no lookup answers in this render"))?;
    Ok(table
        .answer(&key)
        .map(|answer| from_json(&answer))
        .unwrap_or_else(|| GoMap::value(BTreeMap::new())))
})];

/// What a render answers `lookup` with, and the lookups it made that had no answer.
#[derive(Debug)]
pub struct LookupTable {
    /// `None` without a cluster: every lookup is empty and none is missing.
    answers: Option<BTreeMap<crate::LookupKey, serde_json::Value>>,
    missing: Mutex<Vec<crate::LookupKey>>,
}

impl LookupTable {
    /// The table for a render's [`crate::Lookups`].
    pub fn value(lookups: &crate::Lookups) -> Value {
        let answers = match lookups {
            crate::Lookups::Offline => None,
            crate::Lookups::Answers(answers) => Some(
                answers
                    .iter()
                    .map(|a| (a.key.clone(), a.answer.clone()))
                    .collect(),
            ),
        };
        Value::from_object(LookupTable {
            answers,
            missing: Mutex::new(Vec::new()),
        })
    }

    /// The answer to `key`; `None` (an empty map for the chart) when there is none, which is
    /// remembered when the render was given answers.
    fn answer(&self, key: &crate::LookupKey) -> Option<serde_json::Value> {
        let answers = self.answers.as_ref()?;
        let found = answers.get(key).cloned();
        if found.is_none() {
            let mut missing = self.missing.lock().unwrap_or_else(|p| p.into_inner());
            if !missing.contains(key) {
                missing.push(key.clone());
            }
        }
        found
    }

    /// The lookups made without an answer, in the order first asked.
    pub fn missing(&self) -> Vec<crate::LookupKey> {
        self.missing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Object for LookupTable {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }
}

/// Renders the template `name` with `data` as its dot: a `define`, or else a template file
/// by its path (in helm every file is itself a template named `<chart>/templates/<file>`).
pub fn render_define(state: &State, name: &str, data: Value) -> Result<String, Error> {
    render_template(state, name, data, false)
}

fn render_template(state: &State, name: &str, data: Value, action: bool) -> Result<String, Error> {
    let env = state.env();
    // Defines compile on their first call (see `build_environment`): one whose generated
    // source does not compile is a bug of the translator, not a missing define.
    let untranslatable = |e: &Error| e.kind() == ErrorKind::SyntaxError;
    let tmpl = match env.get_template(&translate::define_name(name)) {
        Err(e) if !untranslatable(&e) => env.get_template(name),
        found => found,
    }
    .map_err(|e| {
        if untranslatable(&e) {
            return err(format!(
                "unsupported construct: pallet could not translate the template \"{name}\""
            ));
        }
        // Go's wording for the `template` action and for helm's `include`.
        err(if action {
            format!("template \"{name}\" not defined")
        } else {
            format!("error calling include: no template \"{name}\" is defined")
        })
    })?;
    let depth = call_depth(state, name)?;
    let mut text = budget::StringWriter::new(format!("include \"{name}\""));
    tmpl.render_captured_to(
        minijinja::context! {
            __d0 => data,
            __now => state.lookup("__now"),
            __rng => state.lookup("__rng"),
            __lookups => state.lookup("__lookups"),
            __depth => depth,
        },
        &mut text,
    )
    .and_then(|_| rendered_text(text))
    // A new error for the caller's template to put its own location on, so the message names
    // every template on the way, as helm's does.
    .map_err(|inner| {
        Error::new(
            ErrorKind::InvalidOperation,
            if action {
                "error calling template"
            } else {
                "error calling include"
            },
        )
        .with_source(inner)
    })
}

/// The text a nested render wrote (always UTF-8: it is written from strings).
fn rendered_text(text: budget::StringWriter) -> Result<String, Error> {
    String::from_utf8(text.into_bytes()).map_err(|e| err(e.to_string()))
}

/// The nesting of the template call to `name` (`include`, `template` or `tpl`) made from
/// `state`, charged as a step. Each call is a nested render on the Rust stack, so nesting is
/// bounded well below what would overflow a thread's stack; helm's own bound (1000) is for
/// runaway recursion too.
fn call_depth(state: &State, name: &str) -> Result<i64, Error> {
    budgets::template_call()?;
    let depth = state
        .lookup("__depth")
        .and_then(|d| d.as_i64())
        .unwrap_or(0)
        + 1;
    if depth > budget::MAX_TEMPLATE_CALL_DEPTH {
        return Err(err(budget::breach(budget::BudgetBreach::new(
            "template call depth (include, template and tpl)",
            budget::MAX_TEMPLATE_CALL_DEPTH as u64,
            format!("{depth} (calling {name})"),
        ))));
    }
    Ok(depth)
}

pub(super) fn f_include(state: &State, name: String, data: Option<Value>) -> Result<Value, Error> {
    Ok(Value::from(render_define(
        state,
        &name,
        data.unwrap_or_default(),
    )?))
}

pub(super) fn f_template(state: &State, name: String, data: Value) -> Result<Value, Error> {
    Ok(Value::from(render_template(state, &name, data, true)?))
}

pub(super) fn f_tpl(state: &State, text: String, data: Value) -> Result<Value, Error> {
    let name = state.name().to_string();
    let depth = call_depth(state, &format!("tpl from {name}"))?;
    // Parsing and compiling the text is work in proportion to its length.
    budget::charge_steps(text.len() as u64 / 64).map_err(err)?;
    // Lines of a parse error are lines of the tpl text, not of the file calling tpl.
    let parse_error = |e: crate::helm::HelmError| {
        let detail = match e {
            crate::helm::HelmError::Parse { line, msg, .. }
            | crate::helm::HelmError::Template { line, msg, .. } => {
                format!("line {line}: {msg}")
            }
            other => other.to_string(),
        };
        err(format!(
            "error calling tpl: cannot parse template {}: {detail}",
            go_quote(&text)
        ))
    };
    let parsed = parse::parse(&name, &text).map_err(parse_error)?;
    let t = translate::translate(&name, &parsed, &known()).map_err(parse_error)?;
    let ctx = minijinja::context! {
        __d0 => data,
        __now => state.lookup("__now"),
        __rng => state.lookup("__rng"),
        __lookups => state.lookup("__lookups"),
        __depth => depth,
    };
    // helm removes Go's "<no value>" from tpl's result (not from include's).
    let render = |env: &minijinja::Environment<'_>| {
        let mut text = budget::StringWriter::new(format!("tpl in {name}"));
        env.template_from_named_str(&name, &t.main)?
            .render_captured_to(ctx, &mut text)?;
        Ok::<_, Error>(Value::from(rendered_text(text)?.replace(NO_VALUE, "")))
    };
    if t.defines.is_empty() {
        return render(state.env());
    }
    // helm parses tpl text into a clone of the template set: its defines are visible to this
    // tpl (and what it includes) only.
    let mut env = state.env().clone();
    for (dname, dsrc) in t.defines.iter() {
        env.add_template_owned(translate::define_name(dname), dsrc.clone())?;
    }
    render(&env)
}
