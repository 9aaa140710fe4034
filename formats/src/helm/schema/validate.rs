//! Validation of values against compiled schemas, with helm's error tree and messages.

use std::collections::BTreeSet;

use serde_json::{Map, Value as Json};

use super::compile::{Additional, Body, Compiled, Dependency, Items, Keywords};
use super::meta;
use super::{escape, Draft};
// ---- validation ----

/// What a validation error says (helm's `ErrorKind`, reduced to what is printed).
pub(super) enum Kind {
    /// Several errors at one place: not printed itself, its causes are.
    Group,
    /// A `$ref` that failed: printed only when it has several causes.
    Reference,
    Msg(String),
}

pub(super) struct VErr {
    pub(super) at: Vec<String>,
    pub(super) kind: Kind,
    pub(super) causes: Vec<VErr>,
}

impl VErr {
    pub(super) fn display(&self, out: &mut String, mut indent: usize) {
        let skip = self.causes.len() == 1 && matches!(self.kind, Kind::Reference);
        if !skip {
            out.push('\n');
            for _ in 1..indent {
                out.push_str("  ");
            }
            out.push_str("- ");
            indent += 1;
            let ptr: String = self.at.iter().map(|t| format!("/{}", escape(t))).collect();
            let msg = match &self.kind {
                Kind::Msg(m) => m.as_str(),
                Kind::Group | Kind::Reference => "validation failed",
            };
            out.push_str(&format!("at {}: {msg}", quote(&ptr)));
        }
        for c in &self.causes {
            c.display(out, indent);
        }
    }
}

/// Go's `%q` with single quotes, as santhosh-tekuri's `quote` prints names and values.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::from("'");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A JSON type name as helm's validator names values (every number is `number`).
pub(crate) fn json_type(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "boolean",
        Json::Number(_) => "number",
        Json::String(_) => "string",
        Json::Array(_) => "array",
        Json::Object(_) => "object",
    }
}

/// A primitive as santhosh-tekuri's `display` prints it (`%v`; strings quoted).
pub(super) fn display(v: &Json) -> String {
    match v {
        Json::String(s) => quote(s),
        Json::Null => "<nil>".into(),
        Json::Number(n) => match n.as_f64() {
            Some(f) if !(n.is_i64() || n.is_u64()) => super::super::funcs::go_float(f),
            _ => n.to_string(),
        },
        Json::Array(_) | Json::Object(_) => "value".into(),
        other => other.to_string(),
    }
}

/// A number as helm prints a `big.Rat` through `Float64` and `%v`.
pub(super) fn num_str(f: f64) -> String {
    super::super::funcs::go_float(f)
}

pub(super) fn is_integer(v: &Json) -> bool {
    match v {
        Json::Number(n) => n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => false,
    }
}

/// JSON equality where numbers compare by value (helm compares them as rationals).
pub(super) fn json_eq(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => x.as_f64() == y.as_f64(),
        (Json::Array(x), Json::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Json::Object(x), Json::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, p)| y.get(k).is_some_and(|q| json_eq(p, q)))
        }
        _ => a == b,
    }
}

/// A float as an exact decimal `mantissa × 10^exp` from its shortest representation, the
/// way helm reads `%v` of a float64 into a `big.Rat`.
pub(super) fn decimal(f: f64) -> Option<(i128, i32)> {
    let e = format!("{f:e}");
    let (m, exp) = e.split_once('e')?;
    let exp: i32 = exp.parse().ok()?;
    let (int, frac) = m.split_once('.').unwrap_or((m, ""));
    let digits: i128 = format!("{int}{frac}").parse().ok()?;
    Some((digits, exp - frac.len() as i32))
}

/// Whether `x / m` is an integer, computed exactly on decimals (`0.3` is a multiple of `0.1`).
pub(super) fn is_multiple(x: f64, m: f64) -> bool {
    let exact = || -> Option<bool> {
        let (a, p) = decimal(x)?;
        let (b, q) = decimal(m)?;
        if b == 0 {
            return Some(false);
        }
        if p >= q {
            let scaled = a.checked_mul(10i128.checked_pow(u32::try_from(p - q).ok()?)?)?;
            Some(scaled % b == 0)
        } else {
            let scaled = b.checked_mul(10i128.checked_pow(u32::try_from(q - p).ok()?)?)?;
            Some(a % scaled == 0)
        }
    };
    exact().unwrap_or_else(|| (x / m).fract() == 0.0)
}

/// The members of an instance that some schema evaluated (for `unevaluated*`).
#[derive(Default)]
pub(super) struct Eval {
    pub(super) props: BTreeSet<String>,
    pub(super) items: BTreeSet<usize>,
}

impl Eval {
    pub(super) fn merge(&mut self, o: Eval) {
        self.props.extend(o.props);
        self.items.extend(o.items);
    }
}

/// The dynamic scope: the schemas entered to reach the current one, for cycles and
/// dynamic references.
pub(super) struct Scope<'s> {
    pub(super) node: usize,
    /// The reference keyword that led here from the parent (`$ref`), or "" (then the step is
    /// the difference of the two locations, computed only for a cycle's message).
    pub(super) kw: &'static str,
    /// Which instance value this scope validates (same value, same id).
    pub(super) vid: usize,
    pub(super) parent: Option<&'s Scope<'s>>,
}

pub(super) struct Validator<'c> {
    pub(super) c: &'c Compiled,
    pub(super) track: bool,
}

pub(super) type VResult = Result<Eval, VErr>;

impl Validator<'_> {
    pub(super) fn err(&self, at: &[String], msg: String) -> VErr {
        VErr {
            at: at.to_vec(),
            kind: Kind::Msg(msg),
            causes: Vec::new(),
        }
    }

    /// The keyword path from the root schema to a scope (helm's `kwLoc`).
    pub(super) fn keyword_location(&self, scope: &Scope) -> String {
        let mut parts = Vec::new();
        let mut s = Some(scope);
        while let Some(sc) = s {
            if let Some(parent) = sc.parent {
                parts.push(self.child_step(parent.node, sc.node, sc.kw));
            }
            s = sc.parent;
        }
        parts.reverse();
        parts.concat()
    }

    pub(super) fn child_step(&self, parent: usize, child: usize, kw: &str) -> String {
        if !kw.is_empty() {
            return format!("/{}", escape(kw));
        }
        let p = &self.c.nodes[parent].location;
        let c = &self.c.nodes[child].location;
        c.strip_prefix(p.as_str()).unwrap_or(c).to_string()
    }

    /// Validates the same value against another schema (helm's `validateSelf`).
    pub(super) fn validate_self(
        &self,
        n: usize,
        v: &Json,
        at: &mut Vec<String>,
        scope: &Scope,
        kw: &'static str,
        bool_only: bool,
    ) -> VResult {
        let sc = Scope {
            node: n,
            kw,
            vid: scope.vid,
            parent: Some(scope),
        };
        self.validate(n, v, at, &sc, bool_only)
    }

    /// Validates a member of the value (helm's `validateVal`).
    pub(super) fn validate_val(
        &self,
        n: usize,
        v: &Json,
        at: &mut Vec<String>,
        tok: String,
        scope: &Scope,
        bool_only: bool,
    ) -> VResult {
        at.push(tok);
        let sc = Scope {
            node: n,
            kw: "",
            vid: scope.vid + 1,
            parent: Some(scope),
        };
        let r = self.validate(n, v, at, &sc, bool_only);
        at.pop();
        r
    }

    pub(super) fn validate_ref(
        &self,
        n: usize,
        v: &Json,
        at: &mut Vec<String>,
        scope: &Scope,
        kw: &'static str,
        bool_only: bool,
    ) -> VResult {
        self.validate_self(n, v, at, scope, kw, bool_only)
            .map_err(|e| {
                let causes = if matches!(e.kind, Kind::Group) {
                    e.causes
                } else {
                    vec![e]
                };
                VErr {
                    at: at.clone(),
                    kind: Kind::Reference,
                    causes,
                }
            })
    }

    pub(super) fn validate(
        &self,
        n: usize,
        v: &Json,
        at: &mut Vec<String>,
        scope: &Scope,
        bool_only: bool,
    ) -> VResult {
        let node = &self.c.nodes[n];
        let k = match &node.body {
            Body::Bool(true) => return Ok(Eval::default()),
            Body::Bool(false) => return Err(self.err(at, "false schema".into())),
            Body::Obj(k) => k,
        };
        // A schema met again on the same value through references is a cycle.
        let mut p = scope.parent;
        while let Some(sc) = p {
            if sc.vid != scope.vid {
                break;
            }
            if sc.node == n {
                return Err(self.err(
                    at,
                    format!(
                        "both {} and {} resolve to \"{}\" causing reference cycle",
                        self.keyword_location(scope),
                        self.keyword_location(sc),
                        node.location
                    ),
                ));
            }
            p = sc.parent;
        }
        if !k.types.is_empty() {
            let t = json_type(v);
            let ok = k.types.contains(&t) || (k.types.contains(&"integer") && is_integer(v));
            if !ok {
                return Err(self.err(at, format!("got {t}, want {}", k.types.join(" or "))));
            }
        }
        if let Some(c) = &k.r#const {
            if !json_eq(v, c) {
                let msg = match c {
                    Json::Array(_) | Json::Object(_) => "'const' failed".to_string(),
                    c => format!("value must be {}", display(c)),
                };
                return Err(self.err(at, msg));
            }
        }
        if let Some(e) = &k.r#enum {
            if !e.iter().any(|x| json_eq(v, x)) {
                let primitive = e.iter().all(|x| !x.is_array() && !x.is_object());
                let msg = if !primitive {
                    "'enum' failed".to_string()
                } else if e.len() == 1 {
                    format!("value must be {}", display(&e[0]))
                } else {
                    let want: Vec<String> = e.iter().map(display).collect();
                    format!("value must be one of {}", want.join(", "))
                };
                return Err(self.err(at, msg));
            }
        }
        if let (Some(f), Json::String(s)) = (&k.format, v) {
            if let Some(why) = meta::check_format(f, s) {
                // The value itself is never quoted: values may come from Secrets.
                let msg = if !s.is_empty() && why.contains(s.as_str()) {
                    format!("value is not valid {f}")
                } else {
                    format!("value is not valid {f}: {why}")
                };
                return Err(self.err(at, msg));
            }
        }
        let mut errors: Vec<VErr> = Vec::new();
        let mut eval = Eval::default();
        if let Some(r) = k.r#ref {
            let res = self.validate_ref(r, v, at, scope, "$ref", bool_only);
            if node.draft < Draft::D2019 {
                return res;
            }
            match res {
                Ok(e) => eval.merge(e),
                Err(e) => errors.push(e),
            }
        }
        match v {
            Json::Object(m) => self.object(
                k,
                node.draft,
                m,
                at,
                scope,
                bool_only,
                &mut errors,
                &mut eval,
            ),
            Json::Array(a) => self.array(
                k,
                node.draft,
                a,
                at,
                scope,
                bool_only,
                &mut errors,
                &mut eval,
            ),
            Json::String(s) => self.string(k, s, at, &mut errors),
            Json::Number(x) => {
                if let Some(x) = x.as_f64() {
                    self.number(k, x, at, &mut errors)
                }
            }
            _ => {}
        }
        if errors.is_empty() || !bool_only {
            if node.draft >= Draft::D2019 {
                self.dynamic_refs(n, k, v, at, scope, bool_only, &mut errors, &mut eval);
            }
            self.conditions(k, v, at, scope, bool_only, &mut errors, &mut eval);
            if node.draft >= Draft::D2019 {
                self.unevaluated(k, v, at, scope, bool_only, &mut errors, &mut eval);
            }
        }
        match errors.len() {
            0 => Ok(eval),
            1 => Err(errors.remove(0)),
            _ => Err(VErr {
                at: at.clone(),
                kind: Kind::Group,
                causes: errors,
            }),
        }
    }

    /// The object keywords on object `m`, those of its draft `d`, in helm's order.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn object(
        &self,
        k: &Keywords,
        d: Draft,
        m: &Map<String, Json>,
        at: &mut Vec<String>,
        scope: &Scope,
        bool_only: bool,
        errors: &mut Vec<VErr>,
        eval: &mut Eval,
    ) {
        self.property_counts(k, m, at, errors);
        if bool_only && !errors.is_empty() {
            return;
        }
        self.dependencies(k, m, at, scope, errors, eval);
        if !self.members(k, m, at, scope, bool_only, errors, eval) {
            return;
        }
        if d == Draft::D4 {
            return;
        }
        if let Some(pn) = k.property_names {
            self.property_names(pn, m, bool_only, errors);
        }
        if d == Draft::D6 {
            return;
        }
        self.dependent_keywords(k, m, at, scope, errors, eval);
    }

    /// `minProperties`, `maxProperties` and `required`.
    fn property_counts(
        &self,
        k: &Keywords,
        m: &Map<String, Json>,
        at: &[String],
        errors: &mut Vec<VErr>,
    ) {
        if let Some(min) = k.min_properties {
            if m.len() < min {
                errors.push(self.err(at, format!("minProperties: got {}, want {min}", m.len())));
            }
        }
        if let Some(max) = k.max_properties {
            if m.len() > max {
                errors.push(self.err(at, format!("maxProperties: got {}, want {max}", m.len())));
            }
        }
        let miss = missing(m, &k.required);
        if !miss.is_empty() {
            let msg = if miss.len() == 1 {
                format!("missing property {}", quote(&miss[0]))
            } else {
                format!("missing properties {}", join_quoted(&miss))
            };
            errors.push(self.err(at, msg));
        }
    }

    /// `dependencies` (drafts before 2019-09): required names or a schema for the whole
    /// object, for each present member it names.
    fn dependencies(
        &self,
        k: &Keywords,
        m: &Map<String, Json>,
        at: &mut Vec<String>,
        scope: &Scope,
        errors: &mut Vec<VErr>,
        eval: &mut Eval,
    ) {
        for (name, dep) in &k.dependencies {
            if !m.contains_key(name) {
                continue;
            }
            match dep {
                Dependency::Required(req) => self.required_with(m, name, req, at, errors),
                Dependency::Schema(s) => self.whole_object(*s, m, at, scope, errors, eval),
            }
        }
    }

    /// `properties`, `patternProperties` and `additionalProperties` on each member. Returns
    /// false when a boolean-only validation stopped at an error before the last member (the
    /// caller then checks nothing more).
    #[allow(clippy::too_many_arguments)]
    fn members(
        &self,
        k: &Keywords,
        m: &Map<String, Json>,
        at: &mut Vec<String>,
        scope: &Scope,
        bool_only: bool,
        errors: &mut Vec<VErr>,
        eval: &mut Eval,
    ) -> bool {
        let mut additional = Vec::new();
        for (name, pv) in m {
            if bool_only && !errors.is_empty() {
                return false;
            }
            let mut evaluated = false;
            for (p, s) in &k.properties {
                if p == name {
                    evaluated = true;
                    if let Err(e) = self.validate_val(*s, pv, at, name.clone(), scope, bool_only) {
                        errors.push(e);
                    }
                }
            }
            for (re, s) in &k.pattern_properties {
                if re.is_match(name) {
                    evaluated = true;
                    if let Err(e) = self.validate_val(*s, pv, at, name.clone(), scope, bool_only) {
                        errors.push(e);
                    }
                }
            }
            if !evaluated {
                match &k.additional_properties {
                    Some(Additional::Bool(false)) => {
                        evaluated = true;
                        additional.push(name.clone());
                    }
                    Some(Additional::Bool(true)) => evaluated = true,
                    Some(Additional::Schema(s)) => {
                        evaluated = true;
                        if let Err(e) =
                            self.validate_val(*s, pv, at, name.clone(), scope, bool_only)
                        {
                            errors.push(e);
                        }
                    }
                    None => {}
                }
            }
            if evaluated && self.track {
                eval.props.insert(name.clone());
            }
        }
        if !additional.is_empty() {
            errors.push(self.err(
                at,
                format!(
                    "additional properties {} not allowed",
                    join_quoted(&additional)
                ),
            ));
        }
        true
    }

    /// `propertyNames` (draft 6 on): schema `pn` on each member's name.
    fn property_names(
        &self,
        pn: usize,
        m: &Map<String, Json>,
        bool_only: bool,
        errors: &mut Vec<VErr>,
    ) {
        for name in m.keys() {
            // helm validates each name as a document of its own: paths start at ''.
            let sc = Scope {
                node: pn,
                kw: "",
                vid: 0,
                parent: None,
            };
            if let Err(e) = self.validate(
                pn,
                &Json::String(name.clone()),
                &mut Vec::new(),
                &sc,
                bool_only,
            ) {
                let causes = if matches!(e.kind, Kind::Group) {
                    e.causes
                } else {
                    vec![e]
                };
                errors.push(VErr {
                    at: Vec::new(),
                    kind: Kind::Msg(format!("invalid propertyName {}", quote(name))),
                    causes,
                });
            }
        }
    }

    /// `dependentSchemas` and `dependentRequired` (2019-09 on), for each present member they
    /// name.
    fn dependent_keywords(
        &self,
        k: &Keywords,
        m: &Map<String, Json>,
        at: &mut Vec<String>,
        scope: &Scope,
        errors: &mut Vec<VErr>,
        eval: &mut Eval,
    ) {
        for (name, s) in &k.dependent_schemas {
            if m.contains_key(name) {
                self.whole_object(*s, m, at, scope, errors, eval);
            }
        }
        for (name, req) in &k.dependent_required {
            if m.contains_key(name) {
                self.required_with(m, name, req, at, errors);
            }
        }
    }

    /// Schema `s` on the whole object `m` (a dependency's schema), at the object's own path.
    fn whole_object(
        &self,
        s: usize,
        m: &Map<String, Json>,
        at: &mut Vec<String>,
        scope: &Scope,
        errors: &mut Vec<VErr>,
        eval: &mut Eval,
    ) {
        match self.validate_self(s, &Json::Object(m.clone()), at, scope, "", false) {
            Ok(e) => eval.merge(e),
            Err(e) => errors.push(e),
        }
    }

    /// The names in `req` missing from `m`, required because member `name` is present.
    fn required_with(
        &self,
        m: &Map<String, Json>,
        name: &str,
        req: &[String],
        at: &[String],
        errors: &mut Vec<VErr>,
    ) {
        let miss = missing(m, req);
        if !miss.is_empty() {
            errors.push(self.err(
                at,
                format!(
                    "properties {} required, if {} exists",
                    join_quoted(&miss),
                    quote(name)
                ),
            ));
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn array(
        &self,
        k: &Keywords,
        d: Draft,
        a: &[Json],
        at: &mut Vec<String>,
        scope: &Scope,
        bool_only: bool,
        errors: &mut Vec<VErr>,
        eval: &mut Eval,
    ) {
        if let Some(min) = k.min_items {
            if a.len() < min {
                errors.push(self.err(at, format!("minItems: got {}, want {min}", a.len())));
            }
        }
        if let Some(max) = k.max_items {
            if a.len() > max {
                errors.push(self.err(at, format!("maxItems: got {}, want {max}", a.len())));
            }
        }
        if k.unique_items && a.len() > 1 {
            'outer: for i in 1..a.len() {
                for j in 0..i {
                    if json_eq(&a[i], &a[j]) {
                        errors.push(self.err(at, format!("items at {j} and {i} are equal")));
                        break 'outer;
                    }
                }
            }
        }
        let mut check =
            |s: usize, i: usize, tok: usize, errors: &mut Vec<VErr>, eval: &mut Eval| {
                if let Err(e) = self.validate_val(s, &a[i], at, tok.to_string(), scope, bool_only) {
                    errors.push(e);
                }
                if self.track {
                    eval.items.insert(i);
                }
            };
        // helm numbers the items after a tuple from 0 again (its path quirk, kept).
        if d < Draft::D2020 {
            let mut evaluated = 0;
            match &k.items {
                Items::All(s) => {
                    for i in 0..a.len() {
                        check(*s, i, i, errors, eval);
                    }
                    evaluated = a.len();
                }
                Items::Tuple(t) => {
                    evaluated = t.len().min(a.len());
                    for (i, s) in t.iter().enumerate().take(evaluated) {
                        check(*s, i, i, errors, eval);
                    }
                }
                Items::None => {}
            }
            match &k.additional_items {
                Some(Additional::Bool(false)) if evaluated != a.len() => errors.push(self.err(
                    at,
                    format!("last {} additionalItem(s) not allowed", a.len() - evaluated),
                )),
                Some(Additional::Schema(s)) => {
                    for i in evaluated..a.len() {
                        check(*s, i, i - evaluated, errors, eval);
                    }
                }
                Some(Additional::Bool(_)) if self.track => eval.items.extend(evaluated..a.len()),
                _ => {}
            }
        } else {
            let evaluated = k.prefix_items.len().min(a.len());
            for i in 0..evaluated {
                check(k.prefix_items[i], i, i, errors, eval);
            }
            if let Some(s) = k.items2020 {
                for i in evaluated..a.len() {
                    check(s, i, i - evaluated, errors, eval);
                }
            }
        }
        if let Some(c) = k.contains {
            let mut errs = Vec::new();
            let mut matched = Vec::new();
            for (i, x) in a.iter().enumerate() {
                match self.validate_val(c, x, at, i.to_string(), scope, bool_only) {
                    Ok(_) => {
                        matched.push(i);
                        if d >= Draft::D2020 && self.track {
                            eval.items.insert(i);
                        }
                    }
                    Err(e) => errs.push(e),
                }
            }
            let list = |m: &[usize]| {
                m.iter()
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            if let Some(min) = k.min_contains {
                if matched.len() < min {
                    let msg = if matched.is_empty() {
                        format!(
                            "min {min} items required to match contains schema, but none matched"
                        )
                    } else {
                        format!(
                            "min {min} items required to match contains schema, but matched {} items at {}",
                            matched.len(),
                            list(&matched)
                        )
                    };
                    errors.push(VErr {
                        at: at.clone(),
                        kind: Kind::Msg(msg),
                        causes: errs,
                    });
                }
            } else if matched.is_empty() {
                errors.push(VErr {
                    at: at.clone(),
                    kind: Kind::Msg("no items match contains schema".into()),
                    causes: errs,
                });
            }
            if let Some(max) = k.max_contains {
                if matched.len() > max {
                    errors.push(self.err(
                        at,
                        format!(
                            "max {max} items required to match contains schema, but matched {} items at {}",
                            matched.len(),
                            list(&matched)
                        ),
                    ));
                }
            }
        }
    }

    pub(super) fn string(&self, k: &Keywords, s: &str, at: &[String], errors: &mut Vec<VErr>) {
        let len = s.chars().count();
        if let Some(min) = k.min_length {
            if len < min {
                errors.push(self.err(at, format!("minLength: got {len}, want {min}")));
            }
        }
        if let Some(max) = k.max_length {
            if len > max {
                errors.push(self.err(at, format!("maxLength: got {len}, want {max}")));
            }
        }
        if let Some(re) = &k.pattern {
            if !re.is_match(s) {
                errors.push(self.err(
                    at,
                    // The value itself is never quoted: values may come from Secrets.
                    format!("value does not match pattern {}", quote(re.as_str())),
                ));
            }
        }
    }

    pub(super) fn number(&self, k: &Keywords, x: f64, at: &[String], errors: &mut Vec<VErr>) {
        let mut limit = |bound: Option<f64>, name: &str, ok: fn(f64, f64) -> bool| {
            if let Some(b) = bound {
                if !ok(x, b) {
                    errors.push(self.err(
                        at,
                        format!("{name}: got {}, want {}", num_str(x), num_str(b)),
                    ));
                }
            }
        };
        limit(k.minimum, "minimum", |x, b| x >= b);
        limit(k.maximum, "maximum", |x, b| x <= b);
        limit(k.exclusive_minimum, "exclusiveMinimum", |x, b| x > b);
        limit(k.exclusive_maximum, "exclusiveMaximum", |x, b| x < b);
        if let Some(m) = k.multiple_of {
            if !is_multiple(x, m) {
                errors.push(self.err(
                    at,
                    format!("multipleOf: got {}, want {}", num_str(x), num_str(m)),
                ));
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn dynamic_refs(
        &self,
        n: usize,
        k: &Keywords,
        v: &Json,
        at: &mut Vec<String>,
        scope: &Scope,
        bool_only: bool,
        errors: &mut Vec<VErr>,
        eval: &mut Eval,
    ) {
        let _ = n;
        if let Some(mut target) = k.recursive_ref {
            if self.recursive_anchor(target) {
                // The outermost schema in scope whose resource has `$recursiveAnchor`.
                let mut s = Some(scope);
                while let Some(sc) = s {
                    let res = self.c.nodes[sc.node].resource;
                    if self.recursive_anchor(res) {
                        target = sc.node;
                    }
                    s = sc.parent;
                }
            }
            match self.validate_ref(target, v, at, scope, "$recursiveRef", bool_only) {
                Ok(e) => eval.merge(e),
                Err(e) => errors.push(e),
            }
        }
        if let Some((initial, anchor)) = &k.dynamic_ref {
            let mut target = *initial;
            if let Some(a) = anchor {
                let has = match &self.c.nodes[target].body {
                    Body::Obj(t) => t.dynamic_anchor.as_deref() == Some(a.as_str()),
                    Body::Bool(_) => false,
                };
                if has {
                    let mut s = Some(scope);
                    while let Some(sc) = s {
                        let res = self.c.nodes[sc.node].resource;
                        if let Some(d) = self.c.nodes[res].dynamic_anchors.get(a) {
                            target = *d;
                        }
                        s = sc.parent;
                    }
                }
            }
            match self.validate_ref(target, v, at, scope, "$dynamicRef", bool_only) {
                Ok(e) => eval.merge(e),
                Err(e) => errors.push(e),
            }
        }
    }

    pub(super) fn recursive_anchor(&self, n: usize) -> bool {
        matches!(&self.c.nodes[n].body, Body::Obj(k) if k.recursive_anchor)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn conditions(
        &self,
        k: &Keywords,
        v: &Json,
        at: &mut Vec<String>,
        scope: &Scope,
        bool_only: bool,
        errors: &mut Vec<VErr>,
        eval: &mut Eval,
    ) {
        if let Some(not) = k.not {
            if self.validate_self(not, v, at, scope, "", true).is_ok() {
                errors.push(self.err(at, "'not' failed".into()));
            }
        }
        if !k.all_of.is_empty() {
            let mut errs = Vec::new();
            for s in &k.all_of {
                match self.validate_self(*s, v, at, scope, "", false) {
                    Ok(e) => eval.merge(e),
                    Err(e) => {
                        errs.push(e);
                        if bool_only {
                            break;
                        }
                    }
                }
            }
            if !errs.is_empty() {
                errors.push(VErr {
                    at: at.clone(),
                    kind: Kind::Msg("'allOf' failed".into()),
                    causes: errs,
                });
            }
        }
        if !k.any_of.is_empty() {
            let mut matched = false;
            let mut errs = Vec::new();
            for s in &k.any_of {
                match self.validate_self(*s, v, at, scope, "", false) {
                    Ok(e) => {
                        matched = true;
                        eval.merge(e);
                        if !self.track {
                            break;
                        }
                    }
                    Err(e) => errs.push(e),
                }
            }
            if !matched {
                errors.push(VErr {
                    at: at.clone(),
                    kind: Kind::Msg("'anyOf' failed".into()),
                    causes: errs,
                });
            }
        }
        if !k.one_of.is_empty() {
            let mut matched: Option<usize> = None;
            let mut errs = Vec::new();
            for (i, s) in k.one_of.iter().enumerate() {
                match self.validate_self(*s, v, at, scope, "", matched.is_some()) {
                    Ok(e) => match matched {
                        None => {
                            matched = Some(i);
                            eval.merge(e);
                        }
                        Some(first) => {
                            errors.push(self.err(
                                at,
                                format!("'oneOf' failed, subschemas {first}, {i} matched"),
                            ));
                            break;
                        }
                    },
                    Err(e) => {
                        if matched.is_none() {
                            errs.push(e);
                        }
                    }
                }
            }
            if matched.is_none() {
                errors.push(VErr {
                    at: at.clone(),
                    kind: Kind::Msg("'oneOf' failed, none matched".into()),
                    causes: errs,
                });
            }
        }
        if let Some(cond) = k.r#if {
            let branch = match self.validate_self(cond, v, at, scope, "", true) {
                Ok(e) => {
                    eval.merge(e);
                    k.then
                }
                Err(_) => k.r#else,
            };
            if let Some(b) = branch {
                match self.validate_self(b, v, at, scope, "", false) {
                    Ok(e) => eval.merge(e),
                    Err(e) => errors.push(e),
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn unevaluated(
        &self,
        k: &Keywords,
        v: &Json,
        at: &mut Vec<String>,
        scope: &Scope,
        bool_only: bool,
        errors: &mut Vec<VErr>,
        eval: &mut Eval,
    ) {
        if let (Some(s), Json::Object(m)) = (k.unevaluated_properties, v) {
            for (name, pv) in m {
                if !eval.props.contains(name) {
                    if let Err(e) = self.validate_val(s, pv, at, name.clone(), scope, bool_only) {
                        errors.push(e);
                    }
                }
            }
            eval.props.extend(m.keys().cloned());
        }
        if let (Some(s), Json::Array(a)) = (k.unevaluated_items, v) {
            for (i, x) in a.iter().enumerate() {
                if !eval.items.contains(&i) {
                    if let Err(e) = self.validate_val(s, x, at, i.to_string(), scope, bool_only) {
                        errors.push(e);
                    }
                }
            }
            eval.items.extend(0..a.len());
        }
    }
}

/// The names in `req` that are not members of `m`, in `req`'s order.
fn missing(m: &Map<String, Json>, req: &[String]) -> Vec<String> {
    req.iter()
        .filter(|r| !m.contains_key(r.as_str()))
        .cloned()
        .collect()
}

pub(super) fn join_quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| quote(n))
        .collect::<Vec<_>>()
        .join(", ")
}
