//! Lexer and parser for Go's `text/template` language, as Helm uses it.
//!
//! The output is an AST that keeps the source line of every action, so that both translation
//! errors and render errors can name the template file and line.

use super::HelmError;
use crate::budget::{self, MAX_TEMPLATE_NESTING};

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
        // Go: a comment starts right after `{{`, or after `{{-` and its one space character.
        let trimmed = if left_trim { &body[1..] } else { body };
        if trimmed.starts_with("/*") {
            let Some(end) = trimmed.find("*/") else {
                return Err(HelmError::parse(file, line, "unclosed comment"));
            };
            // Go: the comment must be followed directly by `}}`, or by one space character
            // and `-}}`.
            let after_comment = &trimmed[end + 2..];
            let (close_len, right_trim) =
                if after_comment.starts_with(is_space) && after_comment[1..].starts_with("-}}") {
                    (4, true)
                } else if after_comment.starts_with("}}") {
                    (2, false)
                } else {
                    return Err(HelmError::parse(
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

/// Where the action starting at `s` ends: just past the first `}}` outside a quoted string, raw
/// string or character constant (or the end of `s` when there is none, so an unterminated
/// action still reaches the lexer's own error).
fn action_extent(s: &str) -> usize {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            quote @ (b'"' | b'\'') => {
                i += 1;
                while i < bytes.len() && bytes[i] != quote && bytes[i] != b'\n' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'`' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'`' {
                    i += 1;
                }
            }
            b'}' if bytes.get(i + 1) == Some(&b'}') => return i + 2,
            _ => {}
        }
        i += 1;
    }
    bytes.len()
}

/// The index of the quote closing the string or character constant opened at `chars[open]`, as
/// Go's lexer finds it: a backslash escapes any character but a newline; `None` when a newline
/// or the end comes first.
fn closing_quote(chars: &[(usize, char)], open: usize, quote: char) -> Option<usize> {
    let mut j = open + 1;
    loop {
        match chars.get(j).map(|c| c.1) {
            Some('\\') if !matches!(chars.get(j + 1).map(|c| c.1), None | Some('\n')) => j += 2,
            None | Some('\n') | Some('\\') => return None,
            Some(c) if c == quote => return Some(j),
            Some(_) => j += 1,
        }
    }
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
    // `s` is the rest of the file; only this action's characters are needed (collecting the
    // whole rest for every action made lexing quadratic in the file's size).
    let chars: Vec<(usize, char)> = s[..action_extent(s)].char_indices().collect();
    let mut i = 0;
    let mut line = line0;
    let err = |line: usize, m: String| HelmError::parse(file, line, m);
    while i < chars.len() {
        let (pos, c) = chars[i];
        if is_space(c) {
            // A space character (a newline too) followed by `-}}` closes with right trim.
            if s[pos + 1..].starts_with("-}}") {
                return Ok((toks, pos + 4, true));
            }
            if c == '\n' {
                line += 1;
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
                let (tok, next) = lex_quoted_string(file, line, &chars, i)?;
                toks.push((tok, line));
                i = next;
            }
            '`' => {
                // The token carries the line the raw string ends on.
                let (tok, next, end_line) = lex_raw_string(file, line, &chars, i)?;
                line = end_line;
                toks.push((tok, line));
                i = next;
            }
            '\'' => {
                let (tok, next) = lex_char_constant(file, line, &chars, i)?;
                toks.push((tok, line));
                i = next;
            }
            '.' if chars
                .get(i + 1)
                .is_some_and(|c| ident_char(c.1) && !c.1.is_ascii_digit()) =>
            {
                let (name, next) = ident_run(&chars, i + 1);
                let adjacent = i > 0 && !is_space(chars[i - 1].1);
                toks.push((Tok::Field(name, adjacent), line));
                i = next;
            }
            '.' if !chars.get(i + 1).is_some_and(|c| c.1.is_ascii_digit()) => {
                toks.push((Tok::Field(String::new(), false), line));
                i += 1;
            }
            '$' => {
                let (name, next) = ident_run(&chars, i + 1);
                toks.push((Tok::Var(name), line));
                i = next;
            }
            c if c.is_ascii_digit() || c == '-' || c == '+' || c == '.' => {
                let (tok, next) = lex_number(file, line, &chars, i)?;
                toks.push((tok, line));
                i = next;
            }
            c if ident_char(c) => {
                let (name, next) = ident_run(&chars, i);
                toks.push((Tok::Ident(name), line));
                i = next;
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

/// The quoted string opened at `chars[i]` (Go's lexQuote, then strconv.Unquote): its token and
/// the index past its closing quote.
fn lex_quoted_string(
    file: &str,
    line: usize,
    chars: &[(usize, char)],
    i: usize,
) -> Result<(Tok, usize), HelmError> {
    let err = |m: String| HelmError::parse(file, line, m);
    let j = closing_quote(chars, i, '"').ok_or_else(|| err("unterminated quoted string".into()))?;
    let body: Vec<char> = chars[i + 1..j].iter().map(|c| c.1).collect();
    let mut out = String::new();
    let mut k = 0;
    while k < body.len() {
        let (v, byte) = unquote_char(&body, &mut k, '"')
            .map_err(|m| err(format!("invalid syntax in string: {m}")))?;
        // A \x or octal escape is one byte in Go; only ASCII ones are characters
        // here (strings are UTF-8).
        match char::from_u32(v).filter(|_| !byte || v < 0x80) {
            Some(c) => out.push(c),
            None => {
                return Err(err(
                    "unsupported construct: a byte escape above \\x7f in a string (not UTF-8 text)"
                        .into(),
                ))
            }
        }
    }
    Ok((Tok::Str(out), j + 1))
}

/// The raw string opened at `chars[i]` (carriage returns dropped, as Go does): its token, the
/// index past its closing backquote and the line it ends on.
fn lex_raw_string(
    file: &str,
    mut line: usize,
    chars: &[(usize, char)],
    mut i: usize,
) -> Result<(Tok, usize, usize), HelmError> {
    let mut out = String::new();
    i += 1;
    loop {
        let Some(&(_, c)) = chars.get(i) else {
            return Err(HelmError::parse(file, line, "unterminated raw string"));
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
    Ok((Tok::Str(out), i, line))
}

/// The character constant opened at `chars[i]` (Go's lexChar: up to the closing quote, a
/// backslash escaping any character but a newline; then strconv.UnquoteChar): its token, an
/// int, and the index past its closing quote.
fn lex_char_constant(
    file: &str,
    line: usize,
    chars: &[(usize, char)],
    i: usize,
) -> Result<(Tok, usize), HelmError> {
    let err = |m: String| HelmError::parse(file, line, m);
    let j = closing_quote(chars, i, '\'')
        .ok_or_else(|| err("unterminated character constant".into()))?;
    let body: Vec<char> = chars[i + 1..j].iter().map(|c| c.1).collect();
    let text: String = chars[i..=j].iter().map(|c| c.1).collect();
    let mut k = 0;
    let value = unquote_char(&body, &mut k, '\'')
        .ok()
        .filter(|_| k == body.len())
        .ok_or_else(|| err(format!("malformed character constant: {text}")))?;
    Ok((Tok::Int(i64::from(value.0)), j + 1))
}

/// The number starting at `chars[i]` (Go's lexNumber: one number, or a complex `real±imag i`
/// pair, which is refused): its token and the index past it.
fn lex_number(
    file: &str,
    line: usize,
    chars: &[(usize, char)],
    i: usize,
) -> Result<(Tok, usize), HelmError> {
    let err = |m: String| HelmError::parse(file, line, m);
    let bad = |end: usize| {
        let text: String = chars[i..end.min(chars.len())].iter().map(|c| c.1).collect();
        err(format!("bad number syntax: {text:?}"))
    };
    let (mut j, ok) = scan_number(chars, i);
    if !ok {
        return Err(bad(j));
    }
    let mut complex = false;
    if matches!(chars.get(j).map(|c| c.1), Some('+' | '-')) {
        let (k, ok) = scan_number(chars, j);
        if !ok || chars[k - 1].1 != 'i' {
            return Err(bad(k));
        }
        j = k;
        complex = true;
    }
    let text: String = chars[i..j].iter().map(|c| c.1).collect();
    if complex || text.ends_with('i') {
        return Err(err(format!(
            "unsupported construct: complex number constant {text}"
        )));
    }
    Ok((go_number(&text).map_err(err)?, j))
}

/// The run of identifier characters starting at `chars[from]`: the name and the index past it.
fn ident_run(chars: &[(usize, char)], from: usize) -> (String, usize) {
    let mut j = from;
    while j < chars.len() && ident_char(chars[j].1) {
        j += 1;
    }
    (chars[from..j].iter().map(|c| c.1).collect(), j)
}

/// Go's `isAlphaNumeric`.
fn is_alnum(c: char) -> bool {
    c == '_' || c.is_alphabetic() || c.is_numeric()
}

/// Go's `lexer.scanNumber` from `chars[i]`: the end of the number and whether it is followed
/// by something other than a letter or digit.
fn scan_number(chars: &[(usize, char)], mut i: usize) -> (usize, bool) {
    let at = |i: usize| chars.get(i).map(|c| c.1);
    let accept = |i: &mut usize, set: &str| -> bool {
        match at(*i) {
            Some(c) if set.contains(c) => {
                *i += 1;
                true
            }
            _ => false,
        }
    };
    accept(&mut i, "+-");
    let mut digits = "0123456789_";
    if accept(&mut i, "0") {
        // A leading 0 alone does not make a float octal.
        if accept(&mut i, "xX") {
            digits = "0123456789abcdefABCDEF_";
        } else if accept(&mut i, "oO") {
            digits = "01234567_";
        } else if accept(&mut i, "bB") {
            digits = "01_";
        }
    }
    while accept(&mut i, digits) {}
    if accept(&mut i, ".") {
        while accept(&mut i, digits) {}
    }
    if digits.len() == 11 && accept(&mut i, "eE") {
        accept(&mut i, "+-");
        while accept(&mut i, "0123456789_") {}
    }
    if digits.len() == 23 && accept(&mut i, "pP") {
        accept(&mut i, "+-");
        while accept(&mut i, "0123456789_") {}
    }
    accept(&mut i, "i");
    match at(i) {
        Some(c) if is_alnum(c) => (i + 1, false),
        _ => (i, true),
    }
}

/// Go's `strconv` underscore rule: `_` only between digits (or after a base prefix).
fn underscore_ok(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s).as_bytes();
    let mut saw = b'^';
    let mut i = 0;
    let mut hex = false;
    if s.len() >= 2 && s[0] == b'0' && matches!(s[1].to_ascii_lowercase(), b'b' | b'o' | b'x') {
        i = 2;
        saw = b'0';
        hex = s[1].eq_ignore_ascii_case(&b'x');
    }
    for &c in &s[i..] {
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else {
            if saw == b'_' {
                return false;
            }
            saw = b'!';
        }
    }
    saw != b'_'
}

/// `strconv.ParseInt(s, 0, 64)`, and whether it failed only by overflow (`Err(true)`).
fn go_parse_int(s: &str) -> Result<i64, bool> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if s.contains('_') && !underscore_ok(s) {
        return Err(false);
    }
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = if let Some(h) = lower.strip_prefix("0x") {
        (16, h)
    } else if let Some(o) = lower.strip_prefix("0o") {
        (8, o)
    } else if let Some(b) = lower.strip_prefix("0b") {
        (2, b)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    let digits: String = digits.chars().filter(|c| *c != '_').collect();
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(false);
    }
    let mag = u128::from_str_radix(&digits, radix).map_err(|_| true)?;
    let v = if neg { -(mag as i128) } else { mag as i128 };
    i64::try_from(v).map_err(|_| true)
}

/// `strconv.ParseFloat(s, 64)`: decimal, or hexadecimal with a `p` exponent.
fn go_parse_float(s: &str) -> Option<f64> {
    if s.contains('_') && !underscore_ok(s) {
        return None;
    }
    let clean: String = s.chars().filter(|c| *c != '_').collect();
    let (neg, body) = match clean.as_bytes().first() {
        Some(b'-') => (true, &clean[1..]),
        Some(b'+') => (false, &clean[1..]),
        _ => (false, clean.as_str()),
    };
    let lower = body.to_ascii_lowercase();
    let v = if let Some(h) = lower.strip_prefix("0x") {
        // Hexadecimal mantissa; the exponent (binary, decimal digits) is required.
        let (mant, exp) = h.split_once('p')?;
        let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
        if int.is_empty() && frac.is_empty() {
            return None;
        }
        let mut m: u64 = 0;
        let mut shift: i64 = 0;
        for (k, c) in int.chars().chain(frac.chars()).enumerate() {
            let d = u64::from(c.to_digit(16)?);
            if m >> 60 == 0 {
                m = m * 16 + d;
                if k >= int.len() {
                    shift -= 4;
                }
            } else if k < int.len() {
                // Digits past 64 bits only scale (their value is below the rounding here).
                shift += 4;
            }
        }
        let e: i64 = exp.parse().ok()?;
        let p = i32::try_from((e + shift).clamp(-2000, 2000)).ok()?;
        (m as f64) * 2f64.powi(p)
    } else {
        if !lower
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | '+' | '-'))
        {
            return None;
        }
        lower.parse::<f64>().ok()?
    };
    Some(if neg { -v } else { v })
}

/// A number constant as text/template's parser (`newNumber`) and executor (`idealConstant`)
/// read it when no type is wanted: an int when the text is an integer, else a float64 (text
/// with `.`, `e` or `p`).
fn go_number(text: &str) -> Result<Tok, String> {
    match go_parse_int(text) {
        Ok(i) => return Ok(Tok::Int(i)),
        Err(true) if !text.contains(['.', 'e', 'E', 'p', 'P']) || is_hex_int(text) => {
            return Err(format!("integer overflow: {text:?}"))
        }
        Err(_) => {}
    }
    match go_parse_float(text) {
        Some(_) if !text.contains(['.', 'e', 'E', 'p', 'P']) => {
            Err(format!("integer overflow: {text:?}"))
        }
        Some(f) => Ok(Tok::Float(f)),
        None => Err(format!("illegal number syntax: {text:?}")),
    }
}

/// Go's `isHexInt`: `0x…` without a binary exponent.
fn is_hex_int(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() > 2 && b[0] == b'0' && matches!(b[1], b'x' | b'X') && !s.contains(['p', 'P'])
}

/// Go's `strconv.UnquoteChar` on `s[*i..]` inside a literal quoted by `quote`: the code
/// point and whether it came from a byte escape (`\x`, octal), which stands for a raw byte.
fn unquote_char(s: &[char], i: &mut usize, quote: char) -> Result<(u32, bool), String> {
    let c = *s.get(*i).ok_or("unterminated escape")?;
    *i += 1;
    if c == quote && quote != '`' {
        return Err(format!("unescaped {quote}"));
    }
    if c != '\\' {
        return Ok((c as u32, false));
    }
    let e = *s.get(*i).ok_or("unterminated escape")?;
    *i += 1;
    let simple = match e {
        'a' => Some(7),
        'b' => Some(8),
        'f' => Some(0xc),
        'n' => Some(0xa),
        'r' => Some(0xd),
        't' => Some(9),
        'v' => Some(0xb),
        '\\' => Some(u32::from(b'\\')),
        '\'' | '"' if e == quote => Some(e as u32),
        _ => None,
    };
    if let Some(v) = simple {
        return Ok((v, false));
    }
    let (n, radix, byte) = match e {
        'x' => (2, 16, true),
        'u' => (4, 16, false),
        'U' => (8, 16, false),
        '0'..='7' => (2, 8, true),
        _ => return Err(format!("unknown escape sequence \\{e}")),
    };
    let first = if radix == 8 {
        e.to_string()
    } else {
        String::new()
    };
    let digits: String = s.iter().skip(*i).take(n).collect();
    if digits.chars().count() != n || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(format!("malformed escape \\{e}{digits}"));
    }
    *i += n;
    let v = u32::from_str_radix(&format!("{first}{digits}"), radix).map_err(|e| e.to_string())?;
    if (radix == 8 && v > 255) || (!byte && char::from_u32(v).is_none()) {
        return Err(format!("escape \\{e}{digits} out of range"));
    }
    Ok((v, byte))
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
        return Err(HelmError::parse(
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
        if depth > MAX_TEMPLATE_NESTING {
            let line = match self.items.as_slice().first() {
                Some(Item::Text(line, _)) => *line,
                Some(Item::Action(a)) => a.line,
                None => 0,
            };
            return Err(self.too_deep("control structures (if, with, range, define)", depth, line));
        }
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
                            return Err(HelmError::parse(
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
                        return Err(HelmError::parse(
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

    /// The error of nesting `what` `depth` deep, past the budget.
    fn too_deep(&self, what: &str, depth: usize, line: usize) -> HelmError {
        HelmError::parse(
            self.file,
            line,
            budget::breach(budget::BudgetBreach::new(
                "template nesting depth",
                MAX_TEMPLATE_NESTING as u64,
                format!("{depth} (nested {what})"),
            )),
        )
    }

    fn expect_end(&self, line: usize, end: Option<(usize, Ctl)>) -> Result<(), HelmError> {
        match end {
            Some((_, Ctl::End)) => Ok(()),
            Some((l, _)) => Err(HelmError::parse(self.file, l, "unexpected {{else}}")),
            None => Err(HelmError::parse(self.file, line, "missing {{end}}")),
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
                    return Err(HelmError::parse(
                        self.file,
                        l,
                        "unsupported construct: mixing `else if` and `else with` in one chain",
                    ))
                }
                None => return Err(HelmError::parse(self.file, line, "missing {{end}}")),
            }
        }
    }

    fn ctl(&self, a: RawAction) -> Result<Ctl, HelmError> {
        let line = a.line;
        let mut toks = a.toks;
        let kw = match toks.first() {
            Some((Tok::Ident(k), _)) => k.clone(),
            Some(_) => return Ok(Ctl::Plain(self.pipe(line, &toks, "command")?)),
            None => {
                return Err(HelmError::parse(
                    self.file,
                    line,
                    "missing value for command",
                ))
            }
        };
        let rest = || toks[1..].to_vec();
        Ok(match kw.as_str() {
            "if" => Ctl::If(self.pipe(line, &rest(), "if")?),
            "with" => Ctl::With(self.pipe(line, &rest(), "with")?),
            "range" => Ctl::Range(self.pipe(line, &rest(), "range")?),
            "end" => Ctl::End,
            "break" => Ctl::Break,
            "continue" => Ctl::Continue,
            "else" => match toks.get(1) {
                None => Ctl::Else,
                Some((Tok::Ident(k), _)) if k == "if" => {
                    Ctl::ElseIf(self.pipe(line, &toks[2..], "if")?)
                }
                Some((Tok::Ident(k), _)) if k == "with" => {
                    Ctl::ElseWith(self.pipe(line, &toks[2..], "with")?)
                }
                _ => {
                    return Err(HelmError::parse(
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
                        return Err(HelmError::parse(
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
                        return Err(HelmError::parse(
                            self.file,
                            line,
                            "unexpected tokens after define name",
                        ))
                    }
                    "block" => Ctl::Block(name, self.pipe(line, &toks, "block")?),
                    _ if toks.is_empty() => Ctl::Template(name, None),
                    _ => Ctl::Template(name, Some(self.pipe(line, &toks, "template")?)),
                }
            }
            _ => Ctl::Plain(self.pipe(line, &toks, "command")?),
        })
    }

    /// A pipeline in `context` (`command`, `if`, `range`, ...: Go's parser names it in
    /// errors; only `range` may declare two variables).
    fn pipe(&self, line: usize, toks: &[(Tok, usize)], context: &str) -> Result<Pipe, HelmError> {
        let mut vars = Vec::new();
        let mut assign = false;
        let mut i = 0;
        // Declarations: `$x :=`, `$i, $v :=`, `$x =`.
        let mut j = 0;
        let mut names = Vec::new();
        while let Some((Tok::Var(v), _)) = toks.get(j) {
            names.push(v.clone());
            match toks.get(j + 1) {
                Some((Tok::Comma, _)) if context == "range" && names.len() < 2 => j += 2,
                Some((Tok::Comma, _)) => {
                    return Err(HelmError::parse(
                        self.file,
                        line,
                        format!("too many declarations in {context}"),
                    ))
                }
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
        let (cmds, used) = self.cmds(line, &toks[i..], 0)?;
        if used != toks.len() - i {
            return Err(HelmError::parse(self.file, line, "unexpected ) in action"));
        }
        if cmds.is_empty() {
            return Err(HelmError::parse(
                self.file,
                line,
                format!("missing value for {context}"),
            ));
        }
        Ok(Pipe { vars, assign, cmds })
    }

    /// Parses `cmd | cmd ...` up to a closing paren (when nested in `parens` parentheses) or
    /// the end.
    fn cmds(
        &self,
        line: usize,
        toks: &[(Tok, usize)],
        parens: usize,
    ) -> Result<(Vec<Cmd>, usize), HelmError> {
        let nested = parens > 0;
        if parens > MAX_TEMPLATE_NESTING {
            return Err(self.too_deep("parentheses", parens, line));
        }
        let mut cmds = Vec::new();
        let mut args = Vec::new();
        let mut i = 0;
        let e = |l: usize, m: &str| HelmError::parse(self.file, l, m.to_string());
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
                    let (inner, used) = self.cmds(line, &toks[i + 1..], parens + 1)?;
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
        // A pipeline may end in `|` (`{{ "x" | quote | }}`): Go's parser takes the pipe as the
        // end of the last command.
        if !args.is_empty() {
            cmds.push(Cmd { args });
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
    fn nesting_is_limited() {
        let parens = |n: usize| format!("{{{{ {}1{} }}}}", "(".repeat(n), ")".repeat(n));
        assert!(parse("t", &parens(MAX_TEMPLATE_NESTING)).is_ok());
        let err = parse("t", &parens(MAX_TEMPLATE_NESTING + 1))
            .unwrap_err()
            .to_string();
        assert!(err.contains("parentheses"), "{err}");
        let ifs = |n: usize| format!("{}x{}", "{{ if 1 }}".repeat(n), "{{ end }}".repeat(n));
        assert!(parse("t", &ifs(MAX_TEMPLATE_NESTING)).is_ok());
        let err = parse("t", &ifs(MAX_TEMPLATE_NESTING + 1))
            .unwrap_err()
            .to_string();
        assert!(err.contains("control structures"), "{err}");
        // Far past the limit: an error, not a stack overflow.
        assert!(parse("t", &parens(100_000)).is_err());
        assert!(parse("t", &ifs(100_000)).is_err());
    }

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
    fn right_trim_marker_after_a_newline() {
        let p = parse("t", "{{- $l := list\n  1\n-}}\n  x").unwrap();
        assert!(matches!(&p.nodes[1], Node::Text { text, line: 4 } if text == "x"));
    }

    #[test]
    fn go_number_forms() {
        let num = |t: &str| go_number(t);
        assert_eq!(num("1_000"), Ok(Tok::Int(1000)));
        assert_eq!(num("0x_1F"), Ok(Tok::Int(31)));
        assert_eq!(num("017"), Ok(Tok::Int(15)));
        assert_eq!(num("0_7"), Ok(Tok::Int(7)));
        assert_eq!(num("-0b101"), Ok(Tok::Int(-5)));
        assert_eq!(num(".5"), Ok(Tok::Float(0.5)));
        assert_eq!(num("1e3"), Ok(Tok::Float(1000.0)));
        assert_eq!(num("0x1p60"), Ok(Tok::Float(1_152_921_504_606_846_976.0)));
        assert_eq!(num("0x1.8p1"), Ok(Tok::Float(3.0)));
        assert_eq!(num("08"), Err("integer overflow: \"08\"".into()));
        assert_eq!(num("1__0"), Err("illegal number syntax: \"1__0\"".into()));
        assert_eq!(num("0x1.8"), Err("illegal number syntax: \"0x1.8\"".into()));
    }

    #[test]
    fn char_constants_and_their_escapes() {
        let p = parse(
            "t",
            r"{{ 'a' }}{{ '\n' }}{{ '\x41' }}{{ '\u00e9' }}{{ '\'' }}",
        )
        .unwrap();
        let ints: Vec<Arg> = p
            .nodes
            .iter()
            .filter_map(|n| match n {
                Node::Action { pipe, .. } => Some(pipe.cmds[0].args[0].clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            ints,
            vec![
                Arg::Int(97),
                Arg::Int(10),
                Arg::Int(65),
                Arg::Int(233),
                Arg::Int(39)
            ]
        );
        assert!(parse("t", "{{ 'ab' }}").is_err());
    }

    #[test]
    fn unclosed_if_is_an_error_with_line() {
        let e = parse("t.yaml", "x\n{{ if .A }}").unwrap_err();
        assert!(e.to_string().contains("t.yaml:2"), "{e}");
    }
}
