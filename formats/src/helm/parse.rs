//! Lexer and parser for Go's `text/template` language, as Helm uses it.
//!
//! The output is an AST that keeps the source line of every action, so that both translation
//! errors and render errors can name the template file and line.

use super::HelmError;

/// One argument of a command (Go's "operand").
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    /// A function name in command position, e.g. `include`.
    Ident(String),
    /// `.` followed by zero or more field names: `.`, `.Values.image`.
    Dot(Vec<String>),
    /// A variable followed by zero or more field names: `$`, `$x.a`.
    Var(String, Vec<String>),
    /// A parenthesised pipeline followed by zero or more field names: `(include "x" .).a`.
    Sub(Box<Pipe>, Vec<String>),
    /// `nil`.
    Nil,
    /// `true` / `false`.
    Bool(bool),
    /// An integer constant (Go ints, char constants).
    Int(i64),
    /// A floating point constant.
    Float(f64),
    /// A string constant (already unquoted).
    Str(String),
}

/// One command of a pipeline: a function call or a single operand (possibly a method call).
#[derive(Debug, Clone, PartialEq)]
pub struct Cmd {
    /// The operands; for a function call the first is an [`Arg::Ident`].
    pub args: Vec<Arg>,
}

/// A pipeline, optionally declaring (`:=`) or assigning (`=`) variables.
#[derive(Debug, Clone, PartialEq)]
pub struct Pipe {
    /// Variable names (without `$`) on the left of `:=` / `=`.
    pub vars: Vec<String>,
    /// True for `=` (assign to an existing variable), false for `:=`.
    pub assign: bool,
    /// The commands, connected by `|`.
    pub cmds: Vec<Cmd>,
}

/// A node of a parsed template.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// Literal text, already trimmed by `{{-` / `-}}` markers.
    Text { line: usize, text: String },
    /// `{{ pipeline }}`.
    Action { line: usize, pipe: Pipe },
    /// `if` / `with` with their `else if` / `else with` chains and an optional `else`.
    Cond {
        line: usize,
        with: bool,
        branches: Vec<(usize, Pipe, Vec<Node>)>,
        otherwise: Option<Vec<Node>>,
    },
    /// `range`.
    Range {
        line: usize,
        pipe: Pipe,
        body: Vec<Node>,
        otherwise: Option<Vec<Node>>,
    },
    /// `template "name" pipeline` (also the call site of a `block`).
    Template {
        line: usize,
        name: String,
        pipe: Option<Pipe>,
    },
    /// `break`.
    Break { line: usize },
    /// `continue`.
    Continue { line: usize },
}

/// A parsed template file: its top-level nodes and the `define`/`block` bodies it contains.
#[derive(Debug, Clone, Default)]
pub struct Parsed {
    /// Top-level nodes.
    pub nodes: Vec<Node>,
    /// `(name, line, body)` of every `define` and `block`, in source order.
    pub defines: Vec<(String, usize, Vec<Node>)>,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// `.name` (empty for a bare `.`); the flag says it directly follows the previous token.
    Field(String, bool),
    Var(String),
    Str(String),
    Int(i64),
    Float(f64),
    LParen,
    RParen,
    Pipe,
    Declare,
    Assign,
    Comma,
}

/// One `{{ ... }}` action after lexing.
#[derive(Debug)]
struct RawAction {
    line: usize,
    toks: Vec<(Tok, usize)>,
}

enum Item {
    Text(usize, String),
    Action(RawAction),
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// Splits the source into text and actions, applying `{{-`/`-}}` trimming and dropping comments.
fn lex(file: &str, src: &str) -> Result<Vec<Item>, HelmError> {
    let mut items = Vec::new();
    let mut rest = src;
    let mut line = 1usize;
    let mut trim_next = false;
    loop {
        let Some(start) = rest.find("{{") else {
            let mut text = rest;
            if trim_next {
                text = text.trim_start_matches(is_space);
            }
            if !text.is_empty() {
                items.push(Item::Text(
                    line + count_nl(&rest[..rest.len() - text.len()]),
                    text.to_string(),
                ));
            }
            break;
        };
        let mut text = &rest[..start];
        let text_line = if trim_next {
            let t = text.trim_start_matches(is_space);
            let l = line + count_nl(&text[..text.len() - t.len()]);
            text = t;
            l
        } else {
            line
        };
        let after = &rest[start + 2..];
        // `{{- ` trims only when the dash is followed by whitespace (else it is a negative number).
        let left_trim = after.starts_with('-') && after[1..].starts_with(is_space);
        if left_trim {
            text = text.trim_end_matches(is_space);
        }
        if !text.is_empty() {
            items.push(Item::Text(text_line, text.to_string()));
        }
        line += count_nl(&rest[..start]);
        let body_start = usize::from(left_trim);
        let body = &after[body_start..];
        let action_line = line;
        let trimmed = body.trim_start_matches(is_space);
        if trimmed.starts_with("/*") {
            let Some(end) = trimmed.find("*/") else {
                return Err(HelmError::template(file, line, "unclosed comment"));
            };
            let after_comment = trimmed[end + 2..].trim_start_matches(is_space);
            let (close_len, right_trim) = if after_comment.starts_with("-}}") {
                (3, true)
            } else if after_comment.starts_with("}}") {
                (2, false)
            } else {
                return Err(HelmError::template(
                    file,
                    line,
                    "comment ends before closing delimiter",
                ));
            };
            let consumed = 2 + body_start + (body.len() - after_comment.len()) + close_len;
            line += count_nl(&rest[start..start + consumed]);
            rest = &rest[start + consumed..];
            trim_next = right_trim;
            continue;
        }
        let (toks, used, right_trim) = lex_action(file, action_line, body)?;
        let consumed = 2 + body_start + used;
        line += count_nl(&rest[start..start + consumed]);
        rest = &rest[start + consumed..];
        trim_next = right_trim;
        items.push(Item::Action(RawAction {
            line: action_line,
            toks,
        }));
    }
    Ok(items)
}

fn count_nl(s: &str) -> usize {
    s.bytes().filter(|b| *b == b'\n').count()
}

fn ident_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// Tokenises the inside of an action. Returns tokens, bytes consumed including the closing
/// delimiter, and whether the action ends with `-}}`.
#[allow(clippy::type_complexity)]
fn lex_action(
    file: &str,
    line0: usize,
    s: &str,
) -> Result<(Vec<(Tok, usize)>, usize, bool), HelmError> {
    let mut toks = Vec::new();
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    let mut i = 0;
    let mut line = line0;
    let err = |line: usize, m: String| HelmError::template(file, line, m);
    while i < chars.len() {
        let (pos, c) = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
            continue;
        }
        if is_space(c) {
            // ` -}}` closes with right trim.
            if s[pos..].trim_start_matches(is_space).starts_with("-}}") {
                let dash = pos + (s[pos..].len() - s[pos..].trim_start_matches(is_space).len());
                return Ok((toks, dash + 3, true));
            }
            i += 1;
            continue;
        }
        if s[pos..].starts_with("}}") {
            return Ok((toks, pos + 2, false));
        }
        match c {
            '(' => {
                toks.push((Tok::LParen, line));
                i += 1;
            }
            ')' => {
                toks.push((Tok::RParen, line));
                i += 1;
            }
            '|' => {
                toks.push((Tok::Pipe, line));
                i += 1;
            }
            ',' => {
                toks.push((Tok::Comma, line));
                i += 1;
            }
            ':' if s[pos..].starts_with(":=") => {
                toks.push((Tok::Declare, line));
                i += 2;
            }
            '=' => {
                toks.push((Tok::Assign, line));
                i += 1;
            }
            '"' => {
                let mut out = String::new();
                i += 1;
                loop {
                    let Some(&(_, c)) = chars.get(i) else {
                        return Err(err(line, "unterminated quoted string".into()));
                    };
                    i += 1;
                    match c {
                        '"' => break,
                        '\n' => return Err(err(line, "newline in quoted string".into())),
                        '\\' => {
                            let Some(&(_, e)) = chars.get(i) else {
                                return Err(err(line, "unterminated quoted string".into()));
                            };
                            i += 1;
                            match e {
                                'n' => out.push('\n'),
                                't' => out.push('\t'),
                                'r' => out.push('\r'),
                                '\\' => out.push('\\'),
                                '"' => out.push('"'),
                                '\'' => out.push('\''),
                                'a' => out.push('\u{7}'),
                                'b' => out.push('\u{8}'),
                                'f' => out.push('\u{c}'),
                                'v' => out.push('\u{b}'),
                                'x' | 'u' | 'U' | '0'..='7' => {
                                    // \x and octal escapes are bytes in Go; only ASCII
                                    // ones are characters here.
                                    let (n, radix, first) = match e {
                                        'x' => (2, 16, String::new()),
                                        'u' => (4, 16, String::new()),
                                        'U' => (8, 16, String::new()),
                                        d => (2, 8, d.to_string()),
                                    };
                                    let digits: String =
                                        chars.iter().skip(i).take(n).map(|(_, c)| *c).collect();
                                    i += n;
                                    let code = format!("{first}{digits}");
                                    let cp = u32::from_str_radix(&code, radix)
                                        .ok()
                                        .filter(|c| !matches!(e, 'x' | '0'..='7') || *c < 0x80)
                                        .and_then(char::from_u32)
                                        .ok_or_else(|| {
                                            err(
                                                line,
                                                format!(
                                                    "unsupported construct: escape \\{e}{digits} in a string (a non-ASCII byte, or malformed)"
                                                ),
                                            )
                                        })?;
                                    out.push(cp);
                                }
                                other => {
                                    return Err(err(
                                        line,
                                        format!("unsupported escape \\{other} in string"),
                                    ))
                                }
                            }
                        }
                        c => out.push(c),
                    }
                }
                toks.push((Tok::Str(out), line));
            }
            '`' => {
                let mut out = String::new();
                i += 1;
                loop {
                    let Some(&(_, c)) = chars.get(i) else {
                        return Err(err(line, "unterminated raw string".into()));
                    };
                    i += 1;
                    if c == '`' {
                        break;
                    }
                    if c == '\n' {
                        line += 1;
                    }
                    if c != '\r' {
                        out.push(c);
                    }
                }
                toks.push((Tok::Str(out), line));
            }
            '\'' => {
                let Some(&(_, ch)) = chars.get(i + 1) else {
                    return Err(err(line, "unterminated character constant".into()));
                };
                if ch == '\\' || chars.get(i + 2).map(|c| c.1) != Some('\'') {
                    return Err(err(
                        line,
                        "unsupported construct: escaped character constant".into(),
                    ));
                }
                toks.push((Tok::Int(ch as i64), line));
                i += 3;
            }
            '.' if chars
                .get(i + 1)
                .is_some_and(|c| ident_char(c.1) && !c.1.is_ascii_digit()) =>
            {
                let start = i + 1;
                let mut j = start;
                while j < chars.len() && ident_char(chars[j].1) {
                    j += 1;
                }
                let adjacent = i > 0 && !is_space(chars[i - 1].1);
                toks.push((
                    Tok::Field(chars[start..j].iter().map(|c| c.1).collect(), adjacent),
                    line,
                ));
                i = j;
            }
            '.' if !chars.get(i + 1).is_some_and(|c| c.1.is_ascii_digit()) => {
                toks.push((Tok::Field(String::new(), false), line));
                i += 1;
            }
            '$' => {
                let mut j = i + 1;
                while j < chars.len() && ident_char(chars[j].1) {
                    j += 1;
                }
                toks.push((
                    Tok::Var(chars[i + 1..j].iter().map(|c| c.1).collect()),
                    line,
                ));
                i = j;
            }
            c if c.is_ascii_digit() || c == '-' || c == '+' || c == '.' => {
                let mut j = i + 1;
                while j < chars.len()
                    && (chars[j].1.is_ascii_alphanumeric()
                        || matches!(chars[j].1, '.' | '_')
                        || (matches!(chars[j].1, '+' | '-') && matches!(chars[j - 1].1, 'e' | 'E')))
                {
                    j += 1;
                }
                let text: String = chars[i..j]
                    .iter()
                    .map(|c| c.1)
                    .filter(|c| *c != '_')
                    .collect();
                toks.push((
                    parse_number(&text)
                        .ok_or_else(|| err(line, format!("bad number syntax: {text}")))?,
                    line,
                ));
                i = j;
            }
            c if ident_char(c) => {
                let mut j = i;
                while j < chars.len() && ident_char(chars[j].1) {
                    j += 1;
                }
                toks.push((Tok::Ident(chars[i..j].iter().map(|c| c.1).collect()), line));
                i = j;
            }
            other => {
                return Err(err(
                    line,
                    format!("unexpected character {other:?} in action"),
                ))
            }
        }
    }
    Err(err(line0, "unclosed action".into()))
}

fn parse_number(t: &str) -> Option<Tok> {
    let (neg, body) = match t.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let lower = body.to_ascii_lowercase();
    let int = if let Some(h) = lower.strip_prefix("0x") {
        i64::from_str_radix(h, 16).ok()
    } else if let Some(o) = lower.strip_prefix("0o") {
        i64::from_str_radix(o, 8).ok()
    } else if let Some(b) = lower.strip_prefix("0b") {
        i64::from_str_radix(b, 2).ok()
    } else if lower.len() > 1 && lower.starts_with('0') && lower.bytes().all(|b| b.is_ascii_digit())
    {
        i64::from_str_radix(&lower[1..], 8).ok()
    } else {
        lower.parse::<i64>().ok()
    };
    if let Some(v) = int {
        return Some(Tok::Int(if neg { -v } else { v }));
    }
    let f: f64 = lower.parse().ok()?;
    Some(Tok::Float(if neg { -f } else { f }))
}

/// What a control action is, once its keyword is known.
enum Ctl {
    Plain(Pipe),
    If(Pipe),
    With(Pipe),
    Range(Pipe),
    ElseIf(Pipe),
    ElseWith(Pipe),
    Else,
    End,
    Define(String),
    Block(String, Pipe),
    Template(String, Option<Pipe>),
    Break,
    Continue,
}

struct Parser<'a> {
    file: &'a str,
    items: std::vec::IntoIter<Item>,
    defines: Vec<(String, usize, Vec<Node>)>,
}

/// Parses a whole template file.
pub fn parse(file: &str, src: &str) -> Result<Parsed, HelmError> {
    let items = lex(file, src)?;
    let mut p = Parser {
        file,
        items: items.into_iter(),
        defines: Vec::new(),
    };
    let (nodes, end) = p.list(0)?;
    if let Some((line, _)) = end {
        return Err(HelmError::template(
            file,
            line,
            "unexpected {{end}} or {{else}}",
        ));
    }
    Ok(Parsed {
        nodes,
        defines: p.defines,
    })
}

impl Parser<'_> {
    /// Parses nodes until `else`/`end` (returned) or end of input (None).
    #[allow(clippy::type_complexity)]
    fn list(&mut self, depth: usize) -> Result<(Vec<Node>, Option<(usize, Ctl)>), HelmError> {
        let mut out = Vec::new();
        while let Some(item) = self.items.next() {
            let a = match item {
                Item::Text(line, text) => {
                    out.push(Node::Text { line, text });
                    continue;
                }
                Item::Action(a) => a,
            };
            let line = a.line;
            match self.ctl(a)? {
                Ctl::Plain(pipe) => out.push(Node::Action { line, pipe }),
                Ctl::If(pipe) => out.push(self.cond(line, false, pipe, depth)?),
                Ctl::With(pipe) => out.push(self.cond(line, true, pipe, depth)?),
                Ctl::Range(pipe) => {
                    let (body, end) = self.list(depth + 1)?;
                    let otherwise = match end {
                        Some((_, Ctl::End)) => None,
                        Some((_, Ctl::Else)) => {
                            let (e, end2) = self.list(depth + 1)?;
                            self.expect_end(line, end2)?;
                            Some(e)
                        }
                        _ => {
                            return Err(HelmError::template(
                                self.file,
                                line,
                                "range without matching {{end}}",
                            ))
                        }
                    };
                    out.push(Node::Range {
                        line,
                        pipe,
                        body,
                        otherwise,
                    });
                }
                Ctl::Define(name) => {
                    if depth > 0 {
                        return Err(HelmError::template(
                            self.file,
                            line,
                            "define is only allowed at top level",
                        ));
                    }
                    let (body, end) = self.list(depth + 1)?;
                    self.expect_end(line, end)?;
                    self.defines.push((name, line, body));
                }
                Ctl::Block(name, pipe) => {
                    let (body, end) = self.list(depth + 1)?;
                    self.expect_end(line, end)?;
                    self.defines.push((name.clone(), line, body));
                    out.push(Node::Template {
                        line,
                        name,
                        pipe: Some(pipe),
                    });
                }
                Ctl::Template(name, pipe) => out.push(Node::Template { line, name, pipe }),
                Ctl::Break => out.push(Node::Break { line }),
                Ctl::Continue => out.push(Node::Continue { line }),
                c @ (Ctl::Else | Ctl::ElseIf(_) | Ctl::ElseWith(_) | Ctl::End) => {
                    return Ok((out, Some((line, c))))
                }
            }
        }
        Ok((out, None))
    }

    fn expect_end(&self, line: usize, end: Option<(usize, Ctl)>) -> Result<(), HelmError> {
        match end {
            Some((_, Ctl::End)) => Ok(()),
            Some((l, _)) => Err(HelmError::template(self.file, l, "unexpected {{else}}")),
            None => Err(HelmError::template(self.file, line, "missing {{end}}")),
        }
    }

    fn cond(
        &mut self,
        line: usize,
        with: bool,
        pipe: Pipe,
        depth: usize,
    ) -> Result<Node, HelmError> {
        let mut branches = Vec::new();
        let mut cur = (line, pipe);
        loop {
            let (body, end) = self.list(depth + 1)?;
            branches.push((cur.0, cur.1, body));
            match end {
                Some((_, Ctl::End)) => {
                    return Ok(Node::Cond {
                        line,
                        with,
                        branches,
                        otherwise: None,
                    })
                }
                Some((_, Ctl::Else)) => {
                    let (e, end2) = self.list(depth + 1)?;
                    self.expect_end(line, end2)?;
                    return Ok(Node::Cond {
                        line,
                        with,
                        branches,
                        otherwise: Some(e),
                    });
                }
                Some((l, Ctl::ElseIf(p))) if !with => cur = (l, p),
                Some((l, Ctl::ElseWith(p))) if with => cur = (l, p),
                Some((l, _)) => {
                    return Err(HelmError::template(
                        self.file,
                        l,
                        "unsupported construct: mixing `else if` and `else with` in one chain",
                    ))
                }
                None => return Err(HelmError::template(self.file, line, "missing {{end}}")),
            }
        }
    }

    fn ctl(&self, a: RawAction) -> Result<Ctl, HelmError> {
        let line = a.line;
        let mut toks = a.toks;
        let kw = match toks.first() {
            Some((Tok::Ident(k), _)) => k.clone(),
            Some(_) => return Ok(Ctl::Plain(self.pipe(line, &toks)?)),
            None => {
                return Err(HelmError::template(
                    self.file,
                    line,
                    "missing value for command",
                ))
            }
        };
        let rest = || toks[1..].to_vec();
        Ok(match kw.as_str() {
            "if" => Ctl::If(self.pipe(line, &rest())?),
            "with" => Ctl::With(self.pipe(line, &rest())?),
            "range" => Ctl::Range(self.pipe(line, &rest())?),
            "end" => Ctl::End,
            "break" => Ctl::Break,
            "continue" => Ctl::Continue,
            "else" => match toks.get(1) {
                None => Ctl::Else,
                Some((Tok::Ident(k), _)) if k == "if" => Ctl::ElseIf(self.pipe(line, &toks[2..])?),
                Some((Tok::Ident(k), _)) if k == "with" => {
                    Ctl::ElseWith(self.pipe(line, &toks[2..])?)
                }
                _ => {
                    return Err(HelmError::template(
                        self.file,
                        line,
                        "unexpected tokens after else",
                    ))
                }
            },
            "define" | "template" | "block" => {
                let name = match toks.get(1) {
                    Some((Tok::Str(s), _)) => s.clone(),
                    _ => {
                        return Err(HelmError::template(
                            self.file,
                            line,
                            format!("{kw} needs a quoted name"),
                        ))
                    }
                };
                toks.drain(..2);
                match kw.as_str() {
                    "define" if toks.is_empty() => Ctl::Define(name),
                    "define" => {
                        return Err(HelmError::template(
                            self.file,
                            line,
                            "unexpected tokens after define name",
                        ))
                    }
                    "block" => Ctl::Block(name, self.pipe(line, &toks)?),
                    _ if toks.is_empty() => Ctl::Template(name, None),
                    _ => Ctl::Template(name, Some(self.pipe(line, &toks)?)),
                }
            }
            _ => Ctl::Plain(self.pipe(line, &toks)?),
        })
    }

    fn pipe(&self, line: usize, toks: &[(Tok, usize)]) -> Result<Pipe, HelmError> {
        let mut vars = Vec::new();
        let mut assign = false;
        let mut i = 0;
        // Declarations: `$x :=`, `$i, $v :=`, `$x =`.
        let mut j = 0;
        let mut names = Vec::new();
        while let Some((Tok::Var(v), _)) = toks.get(j) {
            names.push(v.clone());
            match toks.get(j + 1) {
                Some((Tok::Comma, _)) => j += 2,
                Some((Tok::Declare, _)) => {
                    vars = names;
                    i = j + 2;
                    break;
                }
                Some((Tok::Assign, _)) => {
                    vars = names;
                    assign = true;
                    i = j + 2;
                    break;
                }
                _ => break,
            }
        }
        let (cmds, used) = self.cmds(line, &toks[i..], false)?;
        if used != toks.len() - i {
            return Err(HelmError::template(
                self.file,
                line,
                "unexpected ) in action",
            ));
        }
        if cmds.is_empty() {
            return Err(HelmError::template(
                self.file,
                line,
                "missing value for command",
            ));
        }
        Ok(Pipe { vars, assign, cmds })
    }

    /// Parses `cmd | cmd ...` up to a closing paren (when nested) or the end.
    fn cmds(
        &self,
        line: usize,
        toks: &[(Tok, usize)],
        nested: bool,
    ) -> Result<(Vec<Cmd>, usize), HelmError> {
        let mut cmds = Vec::new();
        let mut args = Vec::new();
        let mut i = 0;
        let e = |l: usize, m: &str| HelmError::template(self.file, l, m.to_string());
        while i < toks.len() {
            let (t, l) = &toks[i];
            match t {
                Tok::Pipe => {
                    if args.is_empty() {
                        return Err(e(*l, "missing command before |"));
                    }
                    cmds.push(Cmd {
                        args: std::mem::take(&mut args),
                    });
                    i += 1;
                    continue;
                }
                Tok::RParen => {
                    if !nested {
                        return Err(e(*l, "unexpected )"));
                    }
                    break;
                }
                Tok::LParen => {
                    let (inner, used) = self.cmds(line, &toks[i + 1..], true)?;
                    i += 1 + used;
                    if !matches!(toks.get(i), Some((Tok::RParen, _))) {
                        return Err(e(*l, "unclosed ("));
                    }
                    i += 1;
                    let fields = self.fields(toks, &mut i);
                    args.push(Arg::Sub(
                        Box::new(Pipe {
                            vars: vec![],
                            assign: false,
                            cmds: inner,
                        }),
                        fields,
                    ));
                    continue;
                }
                Tok::Field(f, _) => {
                    let mut fields = Vec::new();
                    if !f.is_empty() {
                        fields.push(f.clone());
                    }
                    i += 1;
                    fields.extend(self.fields(toks, &mut i));
                    args.push(Arg::Dot(fields));
                    continue;
                }
                Tok::Var(v) => {
                    i += 1;
                    let fields = self.fields(toks, &mut i);
                    args.push(Arg::Var(v.clone(), fields));
                    continue;
                }
                Tok::Ident(id) => args.push(match id.as_str() {
                    "nil" => Arg::Nil,
                    "true" => Arg::Bool(true),
                    "false" => Arg::Bool(false),
                    _ => Arg::Ident(id.clone()),
                }),
                Tok::Str(s) => args.push(Arg::Str(s.clone())),
                Tok::Int(n) => args.push(Arg::Int(*n)),
                Tok::Float(f) => args.push(Arg::Float(*f)),
                Tok::Declare | Tok::Assign | Tok::Comma => {
                    return Err(e(*l, "unexpected declaration or comma inside pipeline"))
                }
            }
            i += 1;
        }
        if !args.is_empty() {
            cmds.push(Cmd { args });
        } else if !cmds.is_empty() {
            return Err(e(line, "missing command after |"));
        }
        Ok((cmds, i))
    }

    /// Collects `.a.b` field names directly following an operand.
    fn fields(&self, toks: &[(Tok, usize)], i: &mut usize) -> Vec<String> {
        let mut out = Vec::new();
        while let Some((Tok::Field(f, adjacent), _)) = toks.get(*i) {
            if f.is_empty() || !adjacent {
                break;
            }
            out.push(f.clone());
            *i += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_and_tracks_lines() {
        let p = parse("t", "a  \n{{- .X -}}\n  b\n{{ $x := 1 }}").unwrap();
        assert_eq!(p.nodes.len(), 4);
        assert!(matches!(&p.nodes[0], Node::Text { text, .. } if text == "a"));
        assert!(matches!(&p.nodes[2], Node::Text { text, line: 3 } if text == "b\n"));
        assert!(
            matches!(&p.nodes[3], Node::Action { line: 4, pipe } if pipe.vars == vec!["x".to_string()])
        );
    }

    #[test]
    fn defines_and_pipelines() {
        let p = parse(
            "t",
            "{{/* c */}}{{ define \"a\" }}{{ .A | default \"x\" | quote }}{{ end }}",
        )
        .unwrap();
        assert!(p.nodes.is_empty());
        assert_eq!(p.defines[0].0, "a");
        let Node::Action { pipe, .. } = &p.defines[0].2[0] else {
            panic!()
        };
        assert_eq!(pipe.cmds.len(), 3);
    }

    #[test]
    fn separate_field_operands() {
        let p = parse("t", "{{ default .A.B .C }}").unwrap();
        let Node::Action { pipe, .. } = &p.nodes[0] else {
            panic!()
        };
        assert_eq!(pipe.cmds[0].args[1], Arg::Dot(vec!["A".into(), "B".into()]));
        assert_eq!(pipe.cmds[0].args[2], Arg::Dot(vec!["C".into()]));
    }

    #[test]
    fn negative_number_is_not_trim() {
        let p = parse("t", "{{-3}}").unwrap();
        assert!(
            matches!(&p.nodes[0], Node::Action { pipe, .. } if pipe.cmds[0].args[0] == Arg::Int(-3))
        );
    }

    #[test]
    fn range_with_declaration_after_trim_marker() {
        let p = parse("t", "{{- range $i, $h := .A }}x{{ end }}").unwrap();
        assert!(
            matches!(&p.nodes[0], Node::Range { pipe, .. } if pipe.vars == vec!["i".to_string(), "h".to_string()])
        );
    }

    #[test]
    fn unclosed_if_is_an_error_with_line() {
        let e = parse("t.yaml", "x\n{{ if .A }}").unwrap_err();
        assert!(e.to_string().contains("t.yaml:2"), "{e}");
    }
}
