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
    scopes: Vec<Vec<(String, String)>>,
    slots: usize,
    dot: usize,
    depth: usize,
    in_range: usize,
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
            depth: 0,
            in_range: 0,
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
        self.slots += 1;
        let slot = format!("v{}_{}", self.slots, name);
        if let Some(s) = self.scopes.last_mut() {
            s.push((name.to_string(), slot.clone()));
        }
        slot
    }

    fn lookup(&self, line: usize, name: &str) -> Result<String, HelmError> {
        for scope in self.scopes.iter().rev() {
            if let Some((_, slot)) = scope.iter().rev().find(|(n, _)| n == name) {
                return Ok(slot.clone());
            }
        }
        Err(self.err(line, format!("undefined variable: ${name}")))
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

    fn node(&mut self, n: &Node) -> Result<(), HelmError> {
        match n {
            Node::Text { line, text } => {
                self.pad(*line);
                // A `{` at the end would join the `{{`/`{%`/`{#` emitted next into a
                // delimiter of its own (`{{%`): it is printed as an expression instead.
                let (text, brace) = match text.strip_suffix('{') {
                    Some(t) => (t, true),
                    None => (text.as_str(), false),
                };
                if text.contains("{{") || text.contains("{%") || text.contains("{#") {
                    if text.contains("{% endraw") || text.contains("{%- endraw") {
                        return Err(self.err(
                            *line,
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
            }
            Node::Action { line, pipe } => {
                self.pad(*line);
                let e = self.pipe_expr(*line, pipe)?;
                if pipe.vars.is_empty() {
                    self.out.push_str(&format!("{{{{ {e} }}}}"));
                } else {
                    if pipe.vars.len() != 1 {
                        return Err(self.err(*line, "too many declarations in command"));
                    }
                    let slot = if pipe.assign {
                        self.lookup(*line, &pipe.vars[0])?
                    } else {
                        self.declare(&pipe.vars[0])
                    };
                    self.out.push_str(&format!("{{% set __v.{slot} = {e} %}}"));
                }
            }
            Node::Cond {
                line,
                with,
                branches,
                otherwise,
            } => {
                self.pad(*line);
                if *with {
                    self.with_chain(branches, otherwise.as_deref())?;
                } else {
                    for (i, (l, pipe, body)) in branches.iter().enumerate() {
                        self.pad(*l);
                        if !pipe.vars.is_empty() {
                            return Err(
                                self.err(*l, "unsupported construct: variable declaration in if")
                            );
                        }
                        let e = self.pipe_expr(*l, pipe)?;
                        let kw = if i == 0 { "if" } else { "elif" };
                        self.out.push_str(&format!("{{% {kw} {e} %}}"));
                        self.scoped(|s| s.nodes(body))?;
                    }
                    if let Some(o) = otherwise {
                        self.out.push_str("{% else %}");
                        self.scoped(|s| s.nodes(o))?;
                    }
                    self.out.push_str("{% endif %}");
                }
            }
            Node::Range {
                line,
                pipe,
                body,
                otherwise,
            } => {
                self.pad(*line);
                let e = self.pipe_expr(*line, pipe)?;
                if pipe.assign {
                    return Err(self.err(*line, "unsupported construct: assignment (=) in range"));
                }
                self.depth += 1;
                let n = self.depth;
                self.out.push_str(&format!(
                    "{{% for __k{n}, __d{n} in __range({e}, {}) %}}",
                    pipe.vars.len()
                ));
                let saved = self.dot;
                let r = self.scoped(|s| {
                    match pipe.vars.as_slice() {
                        [] => {}
                        [v] => {
                            let slot = s.declare(v);
                            s.out.push_str(&format!("{{% set __v.{slot} = __d{n} %}}"));
                        }
                        [k, v] => {
                            let ks = s.declare(k);
                            let vs = s.declare(v);
                            s.out.push_str(&format!(
                                "{{% set __v.{ks} = __k{n} %}}{{% set __v.{vs} = __d{n} %}}"
                            ));
                        }
                        _ => return Err(s.err(*line, "too many declarations in range")),
                    }
                    s.dot = n;
                    s.in_range += 1;
                    let r = s.nodes(body);
                    s.in_range -= 1;
                    r
                });
                self.dot = saved;
                r?;
                if let Some(o) = otherwise {
                    self.out.push_str("{% else %}");
                    self.scoped(|s| s.nodes(o))?;
                }
                self.out.push_str("{% endfor %}");
            }
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

    fn with_chain(
        &mut self,
        branches: &[(usize, Pipe, Vec<Node>)],
        otherwise: Option<&[Node]>,
    ) -> Result<(), HelmError> {
        let Some(((l, pipe, body), rest)) = branches.split_first() else {
            if let Some(o) = otherwise {
                self.scoped(|s| s.nodes(o))?;
            }
            return Ok(());
        };
        self.pad(*l);
        let e = self.pipe_expr(*l, pipe)?;
        if pipe.assign || pipe.vars.len() > 1 {
            return Err(self.err(*l, "unsupported construct: assignment in with"));
        }
        self.depth += 1;
        let n = self.depth;
        self.out
            .push_str(&format!("{{% with __d{n} = {e} %}}{{% if __d{n} %}}"));
        let saved = self.dot;
        let r = self.scoped(|s| {
            if let Some(v) = pipe.vars.first() {
                let slot = s.declare(v);
                s.out.push_str(&format!("{{% set __v.{slot} = __d{n} %}}"));
            }
            s.dot = n;
            s.nodes(body)
        });
        self.dot = saved;
        r?;
        self.out.push_str("{% else %}");
        self.with_chain(rest, otherwise)?;
        self.out.push_str("{% endif %}{% endwith %}");
        Ok(())
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
                (Arg::Nil, Some(f)) if super::funcs::nil_is_empty_map(f, i) => {
                    Ok("__nilmap()".to_string())
                }
                _ => self.arg_expr(line, a),
            })
            .collect::<Result<Vec<_>, _>>()?;
        args.extend(piped);
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
                _ => {
                    if !self.known.contains(name.as_str()) {
                        return Err(self.err(
                            line,
                            format!("unsupported construct: function \"{name}\" not defined"),
                        ));
                    }
                    Ok(format!("h_{name}({})", args.join(", ")))
                }
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

    fn arg_expr(&self, line: usize, a: &Arg) -> Result<String, HelmError> {
        let chain = |base: String, fields: &[String]| {
            if fields.is_empty() {
                base
            } else {
                let f: Vec<String> = fields.iter().map(|f| quote(f)).collect();
                format!("__f({base}, {})", f.join(", "))
            }
        };
        Ok(match a {
            Arg::Ident(name) => match name.as_str() {
                "and" | "or" | "not" => {
                    return Err(self.err(line, format!("{name} used without arguments")))
                }
                _ if self.known.contains(name.as_str()) => format!("h_{name}()"),
                _ => {
                    return Err(self.err(
                        line,
                        format!("unsupported construct: function \"{name}\" not defined"),
                    ))
                }
            },
            Arg::Dot(fields) => chain(self.dot_name(), fields),
            Arg::Var(v, fields) => {
                let base = if v.is_empty() {
                    "__d0".to_string()
                } else {
                    format!("__v.{}", self.lookup(line, v)?)
                };
                chain(base, fields)
            }
            Arg::Sub(p, fields) => chain(format!("({})", self.pipe_expr(line, p)?), fields),
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
