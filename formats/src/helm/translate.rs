//! Translation of the Go-template AST into minijinja template source.
//!
//! The generated source keeps Go's semantics by construction:
//! - `.` is an explicit minijinja variable per nesting level (`__d0` is the template's data, which
//!   is also `$`); `with` and `range` bind a fresh `__dN`, so `else` branches still see the outer dot.
//! - Go variables live in one `namespace()` per rendered template, one slot per declaration
//!   (resolved statically here), so `$x = ...` inside `range`/`if` updates the outer variable as in
//!   Go, which plain `{% set %}` (loop-scoped in Jinja) would not.
//! - Field access goes through `__f` (missing map keys are nil, fields of nil are an error), method
//!   calls through `__call`, `range` through `__range` (sorted map keys, Go's element rules), and
//!   every function through `h_<name>` so Jinja keywords and filters never collide.
//! - Every construct starts on the same line number in the generated source as in the Go source
//!   (trimmed newlines are re-inserted inside minijinja comments), so minijinja's error line is the
//!   chart's line.

use std::collections::HashSet;

use super::parse::{Arg, Cmd, Node, Parsed, Pipe};
use super::HelmError;

/// Minijinja template name under which a `define` is registered.
pub fn define_name(name: &str) -> String {
    format!("define:{name}")
}

/// Every function name a helm v3.19 template may call: Go text/template's builtins, Sprig
/// v3.3.0's `GenericFuncMap` without `env` and `expandenv` (helm deletes them), and helm's own
/// (`pkg/engine/funcs.go` and the late-bound `include`, `tpl`, `required`, `lookup`). A name
/// outside this list is a parse error, as in helm, even in a branch that never runs; a name in
/// it that pallet does not implement (not in `funcs::known()`) fails only when it runs.
pub const HELM_FUNCTIONS: &[&str] = &[
    "abbrev",
    "abbrevboth",
    "add",
    "add1",
    "add1f",
    "addf",
    "adler32sum",
    "ago",
    "all",
    "and",
    "any",
    "append",
    "atoi",
    "b32dec",
    "b32enc",
    "b64dec",
    "b64enc",
    "base",
    "bcrypt",
    "biggest",
    "buildCustomCert",
    "call",
    "camelcase",
    "cat",
    "ceil",
    "chunk",
    "clean",
    "coalesce",
    "compact",
    "concat",
    "contains",
    "date",
    "dateInZone",
    "dateModify",
    "date_in_zone",
    "date_modify",
    "decryptAES",
    "deepCopy",
    "deepEqual",
    "default",
    "derivePassword",
    "dict",
    "dig",
    "dir",
    "div",
    "divf",
    "duration",
    "durationRound",
    "empty",
    "encryptAES",
    "eq",
    "ext",
    "fail",
    "first",
    "float64",
    "floor",
    "fromJson",
    "fromJsonArray",
    "fromToml",
    "fromYaml",
    "fromYamlArray",
    "ge",
    "genCA",
    "genCAWithKey",
    "genPrivateKey",
    "genSelfSignedCert",
    "genSelfSignedCertWithKey",
    "genSignedCert",
    "genSignedCertWithKey",
    "get",
    "getHostByName",
    "gt",
    "has",
    "hasKey",
    "hasPrefix",
    "hasSuffix",
    "hello",
    "html",
    "htmlDate",
    "htmlDateInZone",
    "htpasswd",
    "include",
    "indent",
    "index",
    "initial",
    "initials",
    "int",
    "int64",
    "isAbs",
    "join",
    "js",
    "kebabcase",
    "keys",
    "kindIs",
    "kindOf",
    "last",
    "le",
    "len",
    "list",
    "lookup",
    "lower",
    "lt",
    "max",
    "maxf",
    "merge",
    "mergeOverwrite",
    "min",
    "minf",
    "mod",
    "mul",
    "mulf",
    "mustAppend",
    "mustChunk",
    "mustCompact",
    "mustDateModify",
    "mustDeepCopy",
    "mustFirst",
    "mustFromJson",
    "mustHas",
    "mustInitial",
    "mustLast",
    "mustMerge",
    "mustMergeOverwrite",
    "mustPrepend",
    "mustPush",
    "mustRegexFind",
    "mustRegexFindAll",
    "mustRegexMatch",
    "mustRegexReplaceAll",
    "mustRegexReplaceAllLiteral",
    "mustRegexSplit",
    "mustRest",
    "mustReverse",
    "mustSlice",
    "mustToDate",
    "mustToJson",
    "mustToPrettyJson",
    "mustToRawJson",
    "mustUniq",
    "mustWithout",
    "must_date_modify",
    "ne",
    "nindent",
    "nospace",
    "not",
    "now",
    "omit",
    "or",
    "osBase",
    "osClean",
    "osDir",
    "osExt",
    "osIsAbs",
    "pick",
    "pluck",
    "plural",
    "prepend",
    "print",
    "printf",
    "println",
    "push",
    "quote",
    "randAlpha",
    "randAlphaNum",
    "randAscii",
    "randBytes",
    "randInt",
    "randNumeric",
    "regexFind",
    "regexFindAll",
    "regexMatch",
    "regexQuoteMeta",
    "regexReplaceAll",
    "regexReplaceAllLiteral",
    "regexSplit",
    "repeat",
    "replace",
    "required",
    "rest",
    "reverse",
    "round",
    "semver",
    "semverCompare",
    "seq",
    "set",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "shuffle",
    "slice",
    "snakecase",
    "sortAlpha",
    "split",
    "splitList",
    "splitn",
    "squote",
    "sub",
    "subf",
    "substr",
    "swapcase",
    "ternary",
    "title",
    "toDate",
    "toDecimal",
    "toJson",
    "toPrettyJson",
    "toRawJson",
    "toString",
    "toStrings",
    "toToml",
    "toYaml",
    "toYamlPretty",
    "tpl",
    "trim",
    "trimAll",
    "trimPrefix",
    "trimSuffix",
    "trimall",
    "trunc",
    "tuple",
    "typeIs",
    "typeIsLike",
    "typeOf",
    "uniq",
    "unixEpoch",
    "unset",
    "until",
    "untilStep",
    "untitle",
    "upper",
    "urlJoin",
    "urlParse",
    "urlquery",
    "uuidv4",
    "values",
    "without",
    "wrap",
    "wrapWith",
];

/// A translated file: the main template source and `(name, source)` for every define.
#[derive(Debug, Clone)]
pub struct Translated {
    /// The file's own body (empty output for `_`-prefixed partials, but still translated).
    pub main: String,
    /// `(define name, minijinja source)`, in source order.
    pub defines: Vec<(String, String)>,
}

/// Translates a parsed file; `known` is the set of supported function names.
pub fn translate(
    file: &str,
    parsed: &Parsed,
    known: &HashSet<&'static str>,
) -> Result<Translated, HelmError> {
    let main = Emitter::new(file, known).run(&parsed.nodes)?;
    let mut defines = Vec::new();
    for (name, _line, body) in &parsed.defines {
        defines.push((name.clone(), Emitter::new(file, known).run(body)?));
    }
    Ok(Translated { main, defines })
}

struct Emitter<'a> {
    file: &'a str,
    known: &'a HashSet<&'static str>,
    out: String,
    line: usize,
    /// Declared variables per scope: (name, slot, set by `range` to an element).
    scopes: Vec<Vec<(String, String, bool)>>,
    slots: usize,
    dot: usize,
    /// The dot is a `range` element (a value inside a map or slice, where a nil is a nil
    /// interface whose fields are an error) rather than a pipeline's result.
    dot_in_range: bool,
    depth: usize,
    in_range: usize,
    /// Slots declared at the top level of a control's branch: Go's parser keeps them visible
    /// in the control's later branches (`else`), where they hold no value at run time.
    branch_slots: HashSet<String>,
}

impl<'a> Emitter<'a> {
    fn new(file: &'a str, known: &'a HashSet<&'static str>) -> Self {
        Emitter {
            file,
            known,
            out: String::new(),
            line: 1,
            scopes: vec![vec![]],
            slots: 0,
            dot: 0,
            dot_in_range: false,
            depth: 0,
            in_range: 0,
            branch_slots: HashSet::new(),
        }
    }

    fn err(&self, line: usize, msg: impl Into<String>) -> HelmError {
        HelmError::template(self.file, line, msg)
    }

    fn run(mut self, nodes: &[Node]) -> Result<String, HelmError> {
        self.out.push_str("{% set __v = namespace() %}");
        self.nodes(nodes)?;
        Ok(self.out)
    }

    /// Pads with newlines (inside a minijinja comment) so that what follows starts on `line`.
    fn pad(&mut self, line: usize) {
        if line > self.line {
            self.out.push_str("{#");
            for _ in self.line..line {
                self.out.push('\n');
            }
            self.out.push_str("#}");
            self.line = line;
        }
    }

    fn nodes(&mut self, nodes: &[Node]) -> Result<(), HelmError> {
        for n in nodes {
            self.node(n)?;
        }
        Ok(())
    }

    fn dot_name(&self) -> String {
        format!("__d{}", self.dot)
    }

    fn declare(&mut self, name: &str) -> String {
        self.declare_as(name, false)
    }

    /// Declares `$name`; `from_range` when `range` sets it to an element.
    fn declare_as(&mut self, name: &str, from_range: bool) -> String {
        self.slots += 1;
        let slot = format!("v{}_{}", self.slots, name);
        if let Some(s) = self.scopes.last_mut() {
            s.push((name.to_string(), slot.clone(), from_range));
        }
        slot
    }

    fn lookup(&self, line: usize, name: &str) -> Result<String, HelmError> {
        self.lookup_var(line, name).map(|(slot, _)| slot)
    }

    /// The slot of `$name` and whether `range` sets it.
    fn lookup_var(&self, line: usize, name: &str) -> Result<(String, bool), HelmError> {
        for scope in self.scopes.iter().rev() {
            if let Some((_, slot, r)) = scope.iter().rev().find(|(n, _, _)| n == name) {
                return Ok((slot.clone(), *r));
            }
        }
        Err(self.err(line, format!("undefined variable: ${name}")))
    }

    /// One branch of an `if`/`with`/`range`: its top-level declarations stay visible in the
    /// control's later branches (Go pops them at `{{end}}` only), as possibly unset slots.
    fn branch(&mut self, body: &[Node]) -> Result<(), HelmError> {
        self.scopes.push(vec![]);
        let r = self.nodes(body);
        let declared = self.scopes.pop().unwrap_or_default();
        r?;
        self.branch_slots
            .extend(declared.iter().map(|(_, slot, _)| slot.clone()));
        if let Some(s) = self.scopes.last_mut() {
            s.extend(declared);
        }
        Ok(())
    }

    fn scoped(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<(), HelmError>,
    ) -> Result<(), HelmError> {
        self.scopes.push(vec![]);
        let r = f(self);
        self.scopes.pop();
        r
    }

    /// Emits one template node.
    fn node(&mut self, n: &Node) -> Result<(), HelmError> {
        match n {
            Node::Text { line, text } => self.text(*line, text)?,
            Node::Action { line, pipe } => self.action(*line, pipe)?,
            Node::Cond {
                line,
                with,
                branches,
                otherwise,
            } => {
                self.pad(*line);
                if *with {
                    self.with_chain(branches, otherwise.as_deref())?;
                } else if branches.iter().all(|(_, p, _)| p.vars.is_empty()) {
                    self.plain_if_chain(branches, otherwise.as_deref())?;
                } else {
                    self.if_chain(branches, otherwise.as_deref())?;
                }
            }
            Node::Range {
                line,
                pipe,
                body,
                otherwise,
            } => self.range(*line, pipe, body, otherwise.as_deref())?,
            Node::Template { line, name, pipe } => {
                self.pad(*line);
                let data = match pipe {
                    Some(p) => self.pipe_expr(*line, p)?,
                    None => "none".to_string(),
                };
                self.out
                    .push_str(&format!("{{{{ __template({}, {data}) }}}}", quote(name)));
            }
            Node::Break { line } | Node::Continue { line } => {
                self.pad(*line);
                if self.in_range == 0 {
                    return Err(self.err(*line, "break/continue outside range"));
                }
                let kw = if matches!(n, Node::Break { .. }) {
                    "break"
                } else {
                    "continue"
                };
                self.out.push_str(&format!("{{% {kw} %}}"));
            }
        }
        Ok(())
    }

    /// Literal text, escaped from minijinja where it holds something a delimiter would open.
    fn text(&mut self, line: usize, text: &str) -> Result<(), HelmError> {
        self.pad(line);
        // A `{` at the end would join the `{{`/`{%`/`{#` emitted next into a
        // delimiter of its own (`{{%`): it is printed as an expression instead.
        let (text, brace) = match text.strip_suffix('{') {
            Some(t) => (t, true),
            None => (text, false),
        };
        if text.contains("{{") || text.contains("{%") || text.contains("{#") {
            if text.contains("{% endraw") || text.contains("{%- endraw") {
                return Err(self.err(
                    line,
                    "unsupported construct: text containing a minijinja endraw tag",
                ));
            }
            self.out.push_str("{% raw %}");
            self.out.push_str(text);
            self.out.push_str("{% endraw %}");
        } else {
            self.out.push_str(text);
        }
        if brace {
            self.out.push_str("{{ \"{\" }}");
        }
        self.line += text.matches('\n').count();
        Ok(())
    }

    /// `{{ pipeline }}`: printed, or stored in the variable it declares or assigns.
    fn action(&mut self, line: usize, pipe: &Pipe) -> Result<(), HelmError> {
        self.pad(line);
        let e = self.pipe_expr(line, pipe)?;
        if pipe.vars.is_empty() {
            self.out.push_str(&format!("{{{{ {e} }}}}"));
            return Ok(());
        }
        if pipe.vars.len() != 1 {
            return Err(self.err(line, "too many declarations in command"));
        }
        let slot = if pipe.assign && pipe.vars[0].is_empty() {
            // `$` always exists in Go; assigning it replaces the data for the
            // rest of the template.
            self.lookup(line, "").unwrap_or_else(|_| self.declare(""))
        } else if pipe.assign {
            self.lookup(line, &pipe.vars[0])?
        } else {
            self.declare(&pipe.vars[0])
        };
        self.out.push_str(&format!("{{% set __v.{slot} = {e} %}}"));
        Ok(())
    }

    /// An `if`/`else if` chain without declarations: minijinja's own `if`/`elif`/`else`.
    fn plain_if_chain(
        &mut self,
        branches: &[(usize, Pipe, Vec<Node>)],
        otherwise: Option<&[Node]>,
    ) -> Result<(), HelmError> {
        self.scoped(|s| {
            for (i, (l, pipe, body)) in branches.iter().enumerate() {
                s.pad(*l);
                let e = s.pipe_expr(*l, pipe)?;
                let kw = if i == 0 { "if" } else { "elif" };
                s.out.push_str(&format!("{{% {kw} {e} %}}"));
                s.branch(body)?;
            }
            if let Some(o) = otherwise {
                s.out.push_str("{% else %}");
                s.branch(o)?;
            }
            s.out.push_str("{% endif %}");
            Ok(())
        })
    }

    /// `range` over the value of `pipe`, with its variables, body and `else` branch.
    fn range(
        &mut self,
        line: usize,
        pipe: &Pipe,
        body: &[Node],
        otherwise: Option<&[Node]>,
    ) -> Result<(), HelmError> {
        self.pad(line);
        let e = self.pipe_expr(line, pipe)?;
        self.depth += 1;
        let n = self.depth;
        // Declared variables live until `{{end}}`, the `else` branch included.
        self.scoped(|s| {
            // `$v :=` / `$i, $v :=` declare; with `=` they assign existing variables.
            let mut slots = Vec::new();
            for v in &pipe.vars {
                slots.push(if pipe.assign {
                    s.lookup(line, v)?
                } else {
                    s.declare_as(v, true)
                });
            }
            // Go first sets every variable to the ranged value itself (what they hold
            // when there is nothing to iterate), then to index and element.
            let ranged = match slots.first() {
                Some(first) => {
                    for slot in &slots {
                        let v = if slot == first {
                            e.clone()
                        } else {
                            format!("__v.{first}")
                        };
                        s.out.push_str(&format!("{{% set __v.{slot} = {v} %}}"));
                    }
                    format!("__v.{first}")
                }
                None => e.clone(),
            };
            s.out.push_str(&format!(
                "{{% for __k{n}, __d{n} in __range({ranged}, {}) %}}",
                slots.len()
            ));
            match slots.as_slice() {
                [] => {}
                [v] => s.out.push_str(&format!("{{% set __v.{v} = __d{n} %}}")),
                [k, v] => s.out.push_str(&format!(
                    "{{% set __v.{k} = __k{n} %}}{{% set __v.{v} = __d{n} %}}"
                )),
                _ => return Err(s.err(line, "too many declarations in range")),
            }
            let (saved, saved_in_range) = (s.dot, s.dot_in_range);
            s.dot = n;
            s.dot_in_range = true;
            s.in_range += 1;
            let r = s.branch(body);
            s.in_range -= 1;
            s.dot = saved;
            s.dot_in_range = saved_in_range;
            r?;
            if let Some(o) = otherwise {
                s.out.push_str("{% else %}");
                s.branch(o)?;
            }
            s.out.push_str("{% endfor %}");
            Ok(())
        })
    }

    /// The slot a control head's `$x :=` declares (or `$x =` assigns), holding `value`; the
    /// declaration stays visible until the control's `{{end}}`, `else` branches included.
    fn head_var(&mut self, line: usize, pipe: &Pipe, value: &str) -> Result<(), HelmError> {
        let slot = match pipe.vars.as_slice() {
            [] => return Ok(()),
            [v] if pipe.assign => self.lookup(line, v)?,
            [v] => self.declare(v),
            _ => return Err(self.err(line, "too many declarations in command")),
        };
        self.out
            .push_str(&format!("{{% set __v.{slot} = {value} %}}"));
        Ok(())
    }

    /// `if`/`else if` chains with declarations: `{{if $x := a}}A{{else if b}}B{{end}}` is
    /// Go's `if $x := a {A} else {if b {B}}`, so each branch nests in the previous `else`.
    fn if_chain(
        &mut self,
        branches: &[(usize, Pipe, Vec<Node>)],
        otherwise: Option<&[Node]>,
    ) -> Result<(), HelmError> {
        let Some(((l, pipe, body), rest)) = branches.split_first() else {
            if let Some(o) = otherwise {
                self.branch(o)?;
            }
            return Ok(());
        };
        self.pad(*l);
        let e = self.pipe_expr(*l, pipe)?;
        self.scoped(|s| {
            if pipe.vars.is_empty() {
                s.out.push_str(&format!("{{% if {e} %}}"));
            } else {
                s.depth += 1;
                let n = s.depth;
                s.out.push_str(&format!("{{% with __c{n} = {e} %}}"));
                s.head_var(*l, pipe, &format!("__c{n}"))?;
                s.out.push_str(&format!("{{% if __c{n} %}}"));
            }
            s.branch(body)?;
            s.out.push_str("{% else %}");
            s.if_chain(rest, otherwise)?;
            s.out.push_str("{% endif %}");
            if !pipe.vars.is_empty() {
                s.out.push_str("{% endwith %}");
            }
            Ok(())
        })
    }

    fn with_chain(
        &mut self,
        branches: &[(usize, Pipe, Vec<Node>)],
        otherwise: Option<&[Node]>,
    ) -> Result<(), HelmError> {
        let Some(((l, pipe, body), rest)) = branches.split_first() else {
            if let Some(o) = otherwise {
                self.branch(o)?;
            }
            return Ok(());
        };
        self.pad(*l);
        let e = self.pipe_expr(*l, pipe)?;
        self.depth += 1;
        let n = self.depth;
        self.out.push_str(&format!("{{% with __d{n} = {e} %}}"));
        self.scoped(|s| {
            s.head_var(*l, pipe, &format!("__d{n}"))?;
            s.out.push_str(&format!("{{% if __d{n} %}}"));
            let (saved, saved_in_range) = (s.dot, s.dot_in_range);
            s.dot = n;
            s.dot_in_range = false;
            let r = s.branch(body);
            s.dot = saved;
            s.dot_in_range = saved_in_range;
            r?;
            s.out.push_str("{% else %}");
            s.with_chain(rest, otherwise)?;
            s.out.push_str("{% endif %}{% endwith %}");
            Ok(())
        })
    }

    fn pipe_expr(&self, line: usize, pipe: &Pipe) -> Result<String, HelmError> {
        let mut acc: Option<String> = None;
        for cmd in &pipe.cmds {
            acc = Some(self.cmd_expr(line, cmd, acc)?);
        }
        acc.ok_or_else(|| self.err(line, "empty pipeline"))
    }

    fn cmd_expr(&self, line: usize, cmd: &Cmd, piped: Option<String>) -> Result<String, HelmError> {
        let Some((first, rest)) = cmd.args.split_first() else {
            return Err(self.err(line, "empty command"));
        };
        let fname = match first {
            Arg::Ident(name) => Some(name.as_str()),
            _ => None,
        };
        if fname == Some("set") && matches!(rest.first(), Some(Arg::Nil)) {
            // Go: writing to a nil map panics.
            return Ok("h_fail(\"assignment to entry in nil map\")".into());
        }
        let mut args = rest
            .iter()
            .enumerate()
            .map(|(i, a)| match (a, fname) {
                // A literal nil where Go wants a map is a nil map (keys, get, merge, ... of it
                // work); a missing value there is an error, so the two must differ here.
                (Arg::Nil, Some(f)) if super::signatures::nil_is_empty_map(f, i) => {
                    Ok("__nilmap()".to_string())
                }
                // text/template unwraps a pipeline's result from its interface (a
                // parenthesised pipeline, a variable declared by one): a nil there is no value
                // at all, which Go passes as a nil map. A field chain (`$p.global`) is not
                // unwrapped, and its nil is an error (`got interface {}`).
                (_, Some(f))
                    if super::signatures::nil_is_empty_map(f, i) && self.unwrapped(line, a) =>
                {
                    Ok(format!("__nilmap_or({})", self.arg_expr(line, a)?))
                }
                _ => self.arg_expr(line, a),
            })
            .collect::<Result<Vec<_>, _>>()?;
        // The piped value is the previous command's result, unwrapped as above.
        args.extend(piped.map(|p| match fname {
            Some(f) if super::signatures::nil_is_empty_map(f, rest.len()) => {
                format!("__nilmap_or({p})")
            }
            _ => p,
        }));
        match first {
            // Go rejects this when (and only if) it is executed.
            Arg::Nil => Ok("h_fail(\"nil is not a command\")".into()),
            Arg::Ident(name) => match name.as_str() {
                "and" | "or" => {
                    if args.is_empty() {
                        return Err(self.err(line, format!("wrong number of args for {name}")));
                    }
                    // Jinja's and/or short-circuit and return an operand, exactly like Go's.
                    Ok(format!("({})", args.join(&format!(" {name} "))))
                }
                "not" => match args.as_slice() {
                    [a] => Ok(format!("(not {a})")),
                    _ => Err(self.err(line, "wrong number of args for not: want 1")),
                },
                _ => self.call(line, name, &args),
            },
            Arg::Dot(fields) | Arg::Var(_, fields) | Arg::Sub(_, fields) if !args.is_empty() => {
                // A field chain with arguments is a method call on the chain's receiver.
                let Some((method, recv_fields)) = fields.split_last() else {
                    return Err(self.err(line, "can't give argument to non-function"));
                };
                let recv = match first {
                    Arg::Dot(_) => Arg::Dot(recv_fields.to_vec()),
                    Arg::Var(v, _) => Arg::Var(v.clone(), recv_fields.to_vec()),
                    Arg::Sub(p, _) => Arg::Sub(p.clone(), recv_fields.to_vec()),
                    _ => return Err(self.err(line, "can't give argument to non-function")),
                };
                let recv = self.arg_expr(line, &recv)?;
                Ok(format!(
                    "__call({recv}, {}, {})",
                    quote(method),
                    args.join(", ")
                ))
            }
            other => {
                if !args.is_empty() {
                    return Err(self.err(line, "can't give argument to non-function"));
                }
                self.arg_expr(line, other)
            }
        }
    }

    /// A call of the function `name`: helm's parse error for a name helm does not define, a
    /// failure when it runs for one pallet does not implement yet.
    fn call(&self, line: usize, name: &str, args: &[String]) -> Result<String, HelmError> {
        if !HELM_FUNCTIONS.contains(&name) {
            Err(HelmError::parse(
                self.file,
                line,
                format!("function \"{name}\" not defined"),
            ))
        } else if self.known.contains(name) {
            Ok(format!("h_{name}({})", args.join(", ")))
        } else {
            Ok(format!(
                "h_fail({})",
                quote(&format!(
                    "unsupported construct: function \"{name}\" is not implemented yet"
                ))
            ))
        }
    }

    /// Whether text/template passes `a` to a function unwrapped from its interface: a
    /// parenthesised pipeline, or a variable (not a `range` element) without fields.
    fn unwrapped(&self, line: usize, a: &Arg) -> bool {
        match a {
            Arg::Sub(_, fields) => fields.is_empty(),
            Arg::Var(v, fields) if !v.is_empty() && fields.is_empty() => {
                matches!(self.lookup_var(line, v), Ok((_, false)))
            }
            _ => false,
        }
    }

    fn arg_expr(&self, line: usize, a: &Arg) -> Result<String, HelmError> {
        // Fields of a value inside a map or slice (a `range` element, or a chain's own map
        // lookups) go through `__f`, where a nil is an error; fields of a pipeline's result
        // (parenthesised, a variable, the template's data) through `__fr`, where a nil base
        // gives nil, as text/template unwraps such results from their interface.
        let chain = |base: String, fields: &[String], of_result: bool| {
            if fields.is_empty() {
                base
            } else {
                let f: Vec<String> = fields.iter().map(|f| quote(f)).collect();
                let helper = if of_result { "__fr" } else { "__f" };
                format!("{helper}({base}, {})", f.join(", "))
            }
        };
        Ok(match a {
            Arg::Ident(name) => match name.as_str() {
                "and" | "or" | "not" => {
                    return Err(self.err(line, format!("{name} used without arguments")))
                }
                _ => self.call(line, name, &[])?,
            },
            Arg::Dot(fields) => chain(self.dot_name(), fields, !self.dot_in_range),
            Arg::Var(v, fields) => {
                if v.is_empty() {
                    // `$` is the template's data unless the template declared its own
                    // (`{{- $ := .ROOT }}`, as cluster-api-operator's helpers do).
                    match self.lookup_var(line, v) {
                        Ok((slot, from_range)) => chain(format!("__v.{slot}"), fields, !from_range),
                        Err(_) => chain("__d0".to_string(), fields, true),
                    }
                } else {
                    let (slot, from_range) = self.lookup_var(line, v)?;
                    let base = if self.branch_slots.contains(&slot) {
                        // Declared in an earlier branch: unset unless that branch ran. Go then
                        // finds an outer `$v` on its variable stack, or reports it.
                        let outer = self
                            .scopes
                            .iter()
                            .flatten()
                            .rfind(|(n, s, _)| n == v && *s != slot)
                            .map_or(String::new(), |(_, s, _)| format!(", __v.{s}"));
                        format!("__setvar(__v.{slot}, {}{outer})", quote(&format!("${v}")))
                    } else {
                        format!("__v.{slot}")
                    };
                    chain(base, fields, !from_range)
                }
            }
            Arg::Sub(p, fields) => chain(format!("({})", self.pipe_expr(line, p)?), fields, true),
            Arg::Nil => "none".into(),
            Arg::Bool(b) => b.to_string(),
            Arg::Int(i) => {
                if *i < 0 {
                    format!("({i})")
                } else {
                    i.to_string()
                }
            }
            Arg::Float(f) => format!("h_float64({})", quote(&format!("{f:e}"))),
            Arg::Str(s) => quote(s),
        })
    }
}

/// A minijinja string literal for `s`.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::HELM_FUNCTIONS;

    #[test]
    fn every_implemented_function_is_one_helm_defines() {
        let extra: Vec<&str> = super::super::funcs::known()
            .into_iter()
            .filter(|n| !n.starts_with("__") && !HELM_FUNCTIONS.contains(n))
            .collect();
        assert!(extra.is_empty(), "not helm functions: {extra:?}");
        let mut sorted = HELM_FUNCTIONS.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted, HELM_FUNCTIONS, "kept sorted and unique");
    }
}
