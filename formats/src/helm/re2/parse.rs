//! Go's `regexp/syntax` parser (Perl flags), writing the regex crate's syntax as it goes: the
//! errors are Go's, word for word; every atom carries its flags.

use super::unicode::unicode_property;
use super::{shorten, Re2Error, MAX_NESTING};

/// A pattern in the regex crate's syntax, and its groups' names.
pub(super) struct Translated {
    pub(super) pattern: String,
    pub(super) names: Vec<Option<String>>,
}

/// Go's parse flags (Perl mode: `ClassNL`, `PerlX`, `UnicodeGroups` always on).
#[derive(Clone, Copy, Default)]
struct Flags {
    fold: bool,
    multi_line: bool,
    dot_nl: bool,
    non_greedy: bool,
}

/// A parsed piece, already written in the regex crate's syntax.
struct Piece {
    text: String,
    /// The smallest `n` for which Go's `repeatIsValid(piece, n)` holds.
    repeat_need: u64,
    /// How deep groups and repetitions nest in it.
    height: usize,
}

/// An open group: `(`, or the whole pattern at the bottom.
struct Frame {
    /// The capture's index, `None` for a non-capturing group (and the whole pattern).
    capture: Option<usize>,
    /// The flags when it opened, back in force when it closes.
    saved: Flags,
    branches: Vec<Vec<Piece>>,
    current: Vec<Piece>,
}

/// How a repetition is written.
enum Repeat {
    Star,
    Plus,
    Quest,
    /// `{min}`, `{min,}` (max `None`), `{min,max}`.
    Counted(u32, Option<u32>),
}

type Parse<T> = Result<T, Re2Error>;

fn syntax<T>(code: &str, expr: &str) -> Parse<T> {
    Err(Re2Error::Syntax(format!(
        "error parsing regexp: {code}: `{expr}`"
    )))
}

pub(super) struct Parser<'a> {
    expr: &'a str,
    flags: Flags,
    /// The whole pattern.
    root: Frame,
    /// The groups open, innermost last.
    open: Vec<Frame>,
    names: Vec<Option<String>>,
}

impl<'a> Parser<'a> {
    pub(super) fn new(expr: &'a str) -> Self {
        Parser {
            expr,
            flags: Flags::default(),
            root: Frame {
                capture: None,
                saved: Flags::default(),
                branches: Vec::new(),
                current: Vec::new(),
            },
            open: Vec::new(),
            names: vec![None],
        }
    }

    /// The innermost open group (or the whole pattern).
    fn frame(&mut self) -> &mut Frame {
        match self.open.last_mut() {
            Some(frame) => frame,
            None => &mut self.root,
        }
    }

    fn current(&mut self) -> &mut Vec<Piece> {
        &mut self.frame().current
    }

    fn push(&mut self, text: String) {
        self.current().push(Piece {
            text,
            repeat_need: 0,
            height: 1,
        });
    }

    fn literal(&mut self, c: char) {
        let text = if self.flags.fold {
            format!("(?i:{})", escape(c))
        } else {
            escape(c)
        };
        self.push(text);
    }

    pub(super) fn parse(mut self) -> Parse<Translated> {
        let mut t: &'a str = self.expr;
        let mut last_repeat: Option<&'a str> = None;
        while let Some(c) = t.chars().next() {
            let mut repeat: Option<&'a str> = None;
            match c {
                '(' if t[1..].starts_with('?') => t = self.perl_flags(t)?,
                '(' => {
                    self.open(Some(self.names.len()), None);
                    t = &t[1..];
                }
                '|' => {
                    let frame = self.frame();
                    let branch = std::mem::take(&mut frame.current);
                    frame.branches.push(branch);
                    t = &t[1..];
                }
                ')' => {
                    self.close()?;
                    t = &t[1..];
                }
                '^' => {
                    self.push(
                        if self.flags.multi_line {
                            "(?m:^)"
                        } else {
                            r"\A"
                        }
                        .into(),
                    );
                    t = &t[1..];
                }
                '$' => {
                    self.push(
                        if self.flags.multi_line {
                            "(?m:$)"
                        } else {
                            r"\z"
                        }
                        .into(),
                    );
                    t = &t[1..];
                }
                '.' => {
                    self.push(
                        if self.flags.dot_nl {
                            "(?s:.)"
                        } else {
                            "(?-s:.)"
                        }
                        .into(),
                    );
                    t = &t[1..];
                }
                '[' => t = self.class(t)?,
                '*' | '+' | '?' => {
                    let op = match c {
                        '*' => Repeat::Star,
                        '+' => Repeat::Plus,
                        _ => Repeat::Quest,
                    };
                    let after = self.repeat(op, t, &t[1..], last_repeat)?;
                    repeat = Some(t);
                    t = after;
                }
                '{' => match parse_repeat(t) {
                    None => {
                        // Not a repetition: `{` is a literal.
                        self.literal('{');
                        t = &t[1..];
                    }
                    Some((min, max, after)) => {
                        let (Some(min), Some(max)) = (min, max) else {
                            return syntax("invalid repeat count", &t[..t.len() - after.len()]);
                        };
                        if min > 1000 || max.is_some_and(|m| m > 1000 || min > m) {
                            return syntax("invalid repeat count", &t[..t.len() - after.len()]);
                        }
                        let after =
                            self.repeat(Repeat::Counted(min, max), t, after, last_repeat)?;
                        repeat = Some(t);
                        t = after;
                    }
                },
                '\\' => t = self.backslash(t)?,
                c => {
                    self.literal(c);
                    t = &t[c.len_utf8()..];
                }
            }
            last_repeat = repeat;
        }
        if !self.open.is_empty() {
            return syntax("missing closing )", self.expr);
        }
        let root = std::mem::replace(
            &mut self.root,
            Frame {
                capture: None,
                saved: Flags::default(),
                branches: Vec::new(),
                current: Vec::new(),
            },
        );
        let piece = alternate(root.branches, root.current);
        Ok(Translated {
            pattern: piece.text,
            names: self.names,
        })
    }

    /// `(` with capture `capture` (named `name`): a new frame.
    fn open(&mut self, capture: Option<usize>, name: Option<String>) {
        if capture.is_some() {
            self.names.push(name);
        }
        self.open.push(Frame {
            capture,
            saved: self.flags,
            branches: Vec::new(),
            current: Vec::new(),
        });
    }

    /// `)`: the group closes into one piece of its parent.
    fn close(&mut self) -> Parse<()> {
        let Some(frame) = self.open.pop() else {
            return syntax("unexpected )", self.expr);
        };
        self.flags = frame.saved;
        let inner = alternate(frame.branches, frame.current);
        let text = match frame.capture {
            Some(_) => format!("({})", inner.text),
            None => format!("(?:{})", inner.text),
        };
        let piece = Piece {
            text,
            repeat_need: inner.repeat_need,
            height: inner.height + 1,
        };
        self.check_height(&piece)?;
        self.current().push(piece);
        Ok(())
    }

    fn check_height(&self, piece: &Piece) -> Parse<()> {
        if piece.height > MAX_NESTING {
            return Err(Re2Error::Refused(crate::budget::refuse(format!(
                "unsupported construct: regular expression {} nests groups and repetitions \
                 deeper than pallet follows ({MAX_NESTING})",
                shorten(self.expr)
            ))));
        }
        Ok(())
    }

    /// A repetition operator at `before` (its text runs to `after`) applied to the last piece.
    fn repeat(
        &mut self,
        op: Repeat,
        before: &'a str,
        after: &'a str,
        last_repeat: Option<&'a str>,
    ) -> Parse<&'a str> {
        let mut after = after;
        let mut non_greedy = self.flags.non_greedy;
        if let Some(rest) = after.strip_prefix('?') {
            after = rest;
            non_greedy = !non_greedy;
        }
        if let Some(last) = last_repeat {
            return syntax(
                "invalid nested repetition operator",
                &last[..last.len() - after.len()],
            );
        }
        let op_text = &before[..before.len() - after.len()];
        let Some(sub) = self.current().pop() else {
            return syntax("missing argument to repetition operator", op_text);
        };
        let (suffix, need) = match op {
            Repeat::Star => ("*".to_string(), sub.repeat_need),
            Repeat::Plus => ("+".to_string(), sub.repeat_need),
            Repeat::Quest => ("?".to_string(), sub.repeat_need),
            Repeat::Counted(min, max) => {
                let text = match max {
                    Some(m) if m == min => format!("{{{min}}}"),
                    Some(m) => format!("{{{min},{m}}}"),
                    None => format!("{{{min},}}"),
                };
                // Go's repeatIsValid: the counts along any path multiply to at most 1000.
                let m = u64::from(max.unwrap_or(min));
                let need = match max {
                    Some(0) => 0,
                    _ if m == 0 => sub.repeat_need,
                    _ => m.max(m.saturating_mul(sub.repeat_need)),
                };
                if (min >= 2 || max.is_some_and(|m| m >= 2)) && need > 1000 {
                    return syntax("invalid repeat count", op_text);
                }
                (text, need)
            }
        };
        let lazy = if non_greedy { "?" } else { "" };
        let piece = Piece {
            text: format!("(?:{}){suffix}{lazy}", sub.text),
            repeat_need: need,
            height: sub.height + 1,
        };
        self.check_height(&piece)?;
        self.current().push(piece);
        Ok(after)
    }

    /// `(?` at the start of `s`: a named capture, a non-capturing group or flags.
    fn perl_flags(&mut self, s: &'a str) -> Parse<&'a str> {
        let named = if s.len() > 4 && s[2..].starts_with("P<") {
            Some(4)
        } else if s.len() > 3 && s[2..].starts_with('<') {
            Some(3)
        } else {
            None
        };
        if let Some(begin) = named {
            let Some(end) = s.find('>') else {
                return syntax("invalid named capture", s);
            };
            let name = &s[begin..end];
            let valid =
                !name.is_empty() && name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric());
            if !valid {
                return syntax("invalid named capture", &s[..=end]);
            }
            self.open(Some(self.names.len()), Some(name.to_string()));
            return Ok(&s[end + 1..]);
        }
        let mut flags = self.flags;
        let mut negate = false;
        let mut saw_flag = false;
        let mut t = &s[2..];
        while let Some(c) = t.chars().next() {
            t = &t[c.len_utf8()..];
            match c {
                'i' | 'm' | 's' | 'U' => {
                    // `m` clears Go's OneLine: on is multi-line.
                    let on = !negate;
                    match c {
                        'i' => flags.fold = on,
                        'm' => flags.multi_line = on,
                        's' => flags.dot_nl = on,
                        _ => flags.non_greedy = on,
                    }
                    saw_flag = true;
                }
                '-' if !negate => {
                    negate = true;
                    saw_flag = false;
                }
                ':' | ')' if !negate || saw_flag => {
                    if c == ':' {
                        self.open(None, None);
                    }
                    self.flags = flags;
                    return Ok(t);
                }
                _ => break,
            }
        }
        syntax(
            "invalid or unsupported Perl syntax",
            &s[..s.len() - t.len()],
        )
    }

    /// A backslash at the start of `t`: an assertion, `\Q...\E`, a class or an escaped
    /// character.
    fn backslash(&mut self, t: &'a str) -> Parse<&'a str> {
        let next = t[1..].chars().next();
        let assertion = match next {
            Some('A') => Some(r"\A"),
            Some('z') => Some(r"\z"),
            Some('b') => Some(r"(?-u:\b)"),
            Some('B') => Some(r"(?-u:\B)"),
            _ => None,
        };
        if let Some(text) = assertion {
            self.push(text.into());
            return Ok(&t[2..]);
        }
        match next {
            Some('C') => return syntax("invalid escape sequence", &t[..2]),
            Some('Q') => {
                let body = &t[2..];
                let (lit, rest) = body.split_once(r"\E").unwrap_or((body, ""));
                for c in lit.chars() {
                    self.literal(c);
                }
                return Ok(rest);
            }
            _ => {}
        }
        if let Some((item, rest)) = unicode_class(t)? {
            self.push(folded(item, self.flags.fold));
            return Ok(rest);
        }
        if let Some((item, rest)) = perl_class(t) {
            self.push(folded(item, self.flags.fold));
            return Ok(rest);
        }
        let (c, rest) = escape_char(t)?;
        self.literal(c);
        Ok(rest)
    }

    /// A bracketed class at the start of `s`, pushed as one piece.
    fn class(&mut self, s: &'a str) -> Parse<&'a str> {
        let mut t = &s[1..];
        let mut negated = false;
        if let Some(rest) = t.strip_prefix('^') {
            negated = true;
            t = rest;
        }
        let mut items = String::new();
        let mut first = true;
        while first || !t.starts_with(']') {
            first = false;
            if t.starts_with("[:") {
                if let Some((item, rest)) = posix_class(t)? {
                    items.push_str(&item);
                    t = rest;
                    continue;
                }
            }
            if let Some((item, rest)) = unicode_class(t)? {
                items.push_str(&item);
                t = rest;
                continue;
            }
            if let Some((item, rest)) = perl_class(t) {
                items.push_str(&item);
                t = rest;
                continue;
            }
            let range_start = t;
            let (lo, rest) = class_char(t, s)?;
            t = rest;
            let mut hi = lo;
            // `[a-]` is `a` and `-`.
            if t.len() >= 2 && t.starts_with('-') && !t[1..].starts_with(']') {
                let (h, rest) = class_char(&t[1..], s)?;
                t = rest;
                if h < lo {
                    return syntax(
                        "invalid character class range",
                        &range_start[..range_start.len() - t.len()],
                    );
                }
                hi = h;
            }
            if lo == hi {
                items.push_str(&escape(lo));
            } else {
                items.push_str(&format!("{}-{}", escape(lo), escape(hi)));
            }
        }
        let class = format!("[{}{items}]", if negated { "^" } else { "" });
        self.push(folded(class, self.flags.fold));
        Ok(&t[1..])
    }
}

/// A piece made of alternatives (`branches`, then `last`), each a concatenation.
fn alternate(mut branches: Vec<Vec<Piece>>, last: Vec<Piece>) -> Piece {
    branches.push(last);
    let mut repeat_need = 0;
    let mut height = 0;
    let texts: Vec<String> = branches
        .into_iter()
        .map(|pieces| {
            let mut text = String::new();
            for p in pieces {
                repeat_need = repeat_need.max(p.repeat_need);
                height = height.max(p.height);
                text.push_str(&p.text);
            }
            text
        })
        .collect();
    Piece {
        text: texts.join("|"),
        repeat_need,
        height,
    }
}

/// A class atom under case folding, as Go folds it (each item folded; a negated one negated
/// after).
fn folded(item: String, fold: bool) -> String {
    if fold {
        format!("(?i:{item})")
    } else {
        item
    }
}

/// A literal character for the regex crate: letters and digits as they are, anything else as
/// `\x{...}` (never special, inside a class or out).
fn escape(c: char) -> String {
    if c.is_ascii_alphanumeric() {
        c.to_string()
    } else {
        format!("\\x{{{:X}}}", c as u32)
    }
}

/// Go's `parseRepeat` on `{...`: `Some((min, max, rest))` when the text is a repetition
/// (`{n}`, `{n,}`, `{n,m}`), else `None` (the `{` is a literal). `min` is `None` when a
/// number is too large (an invalid count); `max` is `Some(Some(m))`, `Some(None)` for `{n,}`,
/// or `None` when too large.
#[allow(clippy::type_complexity)]
fn parse_repeat(s: &str) -> Option<(Option<u32>, Option<Option<u32>>, &str)> {
    let s = s.strip_prefix('{')?;
    let (min, mut s) = parse_int(s)?;
    let max;
    if let Some(rest) = s.strip_prefix(',') {
        if let Some(rest2) = rest.strip_prefix('}') {
            return Some((min, Some(None), rest2));
        }
        let (m, rest) = parse_int(rest)?;
        s = rest;
        // A too-large max makes the whole count invalid.
        max = m.map(Some);
        let min = if m.is_none() { None } else { min };
        let rest = s.strip_prefix('}')?;
        return Some((min, max, rest));
    }
    max = min.map(Some);
    let rest = s.strip_prefix('}')?;
    Some((min, max, rest))
}

/// Go's `parseInt`: digits without a leading zero; the value is `None` past 10^8.
fn parse_int(s: &str) -> Option<(Option<u32>, &str)> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || (digits >= 2 && s.starts_with('0')) {
        return None;
    }
    let value = s[..digits]
        .parse::<u64>()
        .ok()
        .filter(|n| *n < 100_000_000)
        .and_then(|n| u32::try_from(n).ok());
    Some((value, &s[digits..]))
}

/// Go's `parseEscape` on a backslash at the start of `s`: the character and the rest.
fn escape_char(s: &str) -> Parse<(char, &str)> {
    let t = &s[1..];
    let Some(c) = t.chars().next() else {
        return syntax("trailing backslash at end of expression", "");
    };
    let mut rest = &t[c.len_utf8()..];
    let invalid = |rest: &str| syntax("invalid escape sequence", &s[..s.len() - rest.len()]);
    match c {
        // A single non-zero digit would be a backreference: unsupported.
        '1'..='7' if !rest.starts_with(|d: char| ('0'..='7').contains(&d)) => invalid(rest),
        '0'..='7' => {
            let mut r = c as u32 - '0' as u32;
            for _ in 1..3 {
                match rest.chars().next() {
                    Some(d @ '0'..='7') => {
                        r = r * 8 + (d as u32 - '0' as u32);
                        rest = &rest[1..];
                    }
                    _ => break,
                }
            }
            Ok((char::from_u32(r).unwrap_or('\u{FFFD}'), rest))
        }
        'x' => {
            let Some(h) = rest.chars().next() else {
                return invalid(rest);
            };
            rest = &rest[h.len_utf8()..];
            if h == '{' {
                let mut value: u32 = 0;
                let mut count = 0;
                loop {
                    let Some(d) = rest.chars().next() else {
                        return invalid(rest);
                    };
                    rest = &rest[d.len_utf8()..];
                    if d == '}' {
                        break;
                    }
                    let Some(v) = d.to_digit(16) else {
                        return invalid(rest);
                    };
                    value = value * 16 + v;
                    if value > 0x10FFFF {
                        return invalid(rest);
                    }
                    count += 1;
                }
                return match (count, char::from_u32(value)) {
                    (0, _) => invalid(rest),
                    (_, Some(c)) => Ok((c, rest)),
                    // A surrogate: Go takes it as the replacement character.
                    (_, None) => Ok(('\u{FFFD}', rest)),
                };
            }
            let Some(l) = rest.chars().next() else {
                return invalid(rest);
            };
            rest = &rest[l.len_utf8()..];
            match (h.to_digit(16), l.to_digit(16)) {
                (Some(x), Some(y)) => Ok((char::from_u32(x * 16 + y).unwrap_or('\u{FFFD}'), rest)),
                _ => invalid(rest),
            }
        }
        'a' => Ok(('\u{7}', rest)),
        'f' => Ok(('\u{c}', rest)),
        'n' => Ok(('\n', rest)),
        'r' => Ok(('\r', rest)),
        't' => Ok(('\t', rest)),
        'v' => Ok(('\u{b}', rest)),
        // Escaped punctuation is itself.
        c if c.is_ascii() && !c.is_ascii_alphanumeric() => Ok((c, rest)),
        _ => invalid(rest),
    }
}

/// Go's `parseClassChar`: a character inside brackets (`s` is the whole class, for the error).
fn class_char<'s>(t: &'s str, class: &str) -> Parse<(char, &'s str)> {
    match t.chars().next() {
        None => syntax("missing closing ]", class),
        Some('\\') => escape_char(t),
        Some(c) => Ok((c, &t[c.len_utf8()..])),
    }
}

/// ASCII ranges of Go's Perl and POSIX classes.
const DIGIT: &str = r"0-9";
const SPACE: &str = r"\x{9}\x{A}\x{C}\x{D}\x{20}";
const WORD: &str = r"0-9A-Za-z\x{5F}";

/// `\d \D \s \S \w \W` at the start of `t`: the class (ASCII, as in Go) and the rest.
fn perl_class(t: &str) -> Option<(String, &str)> {
    let rest = t.strip_prefix('\\')?;
    let c = rest.chars().next()?;
    let (set, negated) = match c {
        'd' => (DIGIT, false),
        'D' => (DIGIT, true),
        's' => (SPACE, false),
        'S' => (SPACE, true),
        'w' => (WORD, false),
        'W' => (WORD, true),
        _ => return None,
    };
    Some((
        format!("[{}{set}]", if negated { "^" } else { "" }),
        &rest[1..],
    ))
}

/// A POSIX class `[:name:]` (or `[:^name:]`) at the start of `t` (inside brackets), as Go's
/// ASCII sets; `None` when `t` is not one, Go's error for an unknown name.
fn posix_class(t: &str) -> Parse<Option<(String, &str)>> {
    let Some(end) = t[2..].find(":]").map(|i| i + 2) else {
        return Ok(None);
    };
    let name = &t[..end + 2];
    let (negated, bare) = match name[2..end].strip_prefix('^') {
        Some(b) => (true, b),
        None => (false, &name[2..end]),
    };
    let set = match bare {
        "alnum" => r"0-9A-Za-z",
        "alpha" => r"A-Za-z",
        "ascii" => r"\x{0}-\x{7F}",
        "blank" => r"\x{9}\x{20}",
        "cntrl" => r"\x{0}-\x{1F}\x{7F}",
        "digit" => DIGIT,
        "graph" => r"\x{21}-\x{7E}",
        "lower" => r"a-z",
        "print" => r"\x{20}-\x{7E}",
        "punct" => r"\x{21}-\x{2F}\x{3A}-\x{40}\x{5B}-\x{60}\x{7B}-\x{7E}",
        "space" => r"\x{9}-\x{D}\x{20}",
        "upper" => r"A-Z",
        "word" => WORD,
        "xdigit" => r"0-9A-Fa-f",
        _ => return syntax("invalid character class range", name),
    };
    Ok(Some((
        format!("[{}{set}]", if negated { "^" } else { "" }),
        &t[end + 2..],
    )))
}

/// `\pN`, `\p{Name}`, `\PN`, `\p{^Name}` at the start of `t`: the class (Go's categories and
/// scripts, names read as Go 1.26 reads them) and the rest; Go's error for an unknown name.
fn unicode_class(t: &str) -> Parse<Option<(String, &str)>> {
    let mut negated = match t.as_bytes() {
        [b'\\', b'p', ..] => false,
        [b'\\', b'P', ..] => true,
        _ => return Ok(None),
    };
    let after = &t[2..];
    let Some(c) = after.chars().next() else {
        // `\p` at the end: an empty name.
        return syntax("invalid character class range", t);
    };
    let (seq, mut name, rest) = if c == '{' {
        let Some(end) = t.find('}') else {
            return syntax("invalid character class range", t);
        };
        (&t[..=end], &t[3..end], &t[end + 1..])
    } else {
        let len = 2 + c.len_utf8();
        (&t[..len], &t[2..len], &t[len..])
    };
    if let Some(n) = name.strip_prefix('^') {
        negated = !negated;
        name = n;
    }
    let Some(property) = unicode_property(name) else {
        return syntax("invalid character class range", seq);
    };
    let p = if negated { 'P' } else { 'p' };
    Ok(Some((format!("\\{p}{{{property}}}"), rest)))
}
