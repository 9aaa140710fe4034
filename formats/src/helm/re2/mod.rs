//! Go's regular expressions (RE2, as `regexp.Compile` reads them: Perl flags, leftmost-first)
//! on the regex crate. The Go pattern is parsed as Go's `regexp/syntax` parses it — the same
//! errors, word for word, for what Go refuses — and written out again in the regex crate's
//! syntax with Go's meaning made explicit: every atom carries its flags (`(?i:k)`, `(?s:.)`,
//! `(?m:^)`), `\d \s \w \b` and the POSIX classes are ASCII, a `-` after a class inside
//! brackets is a literal, `\Q...\E` is literal text, octal escapes are code points, Unicode
//! classes are Go's categories and scripts. The searches (`FindAll`, `ReplaceAll`, `Split`,
//! `$name` expansion) follow Go's algorithms, including how they step past empty matches.
//!
//! What the translation cannot carry is refused with pallet's own error (a pattern nested
//! deeper than [`MAX_NESTING`], or larger than [`MAX_COMPILED_BYTES`] once compiled), never a
//! silent different answer.

use std::collections::HashMap;
use std::sync::Arc;

mod parse;
mod unicode;

/// How deep groups and repetitions may nest (Go allows 1000; charts use a handful). Deeper is
/// refused, so that neither the translation nor the regex crate's compiler runs deep.
pub const MAX_NESTING: usize = 200;

/// The compiled size a pattern may take (the regex crate's default limit).
pub const MAX_COMPILED_BYTES: usize = 10 << 20;

/// Why a pattern cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Re2Error {
    /// Go refuses it: Go's message (`error parsing regexp: missing closing ]: `[a``).
    Syntax(String),
    /// Go accepts it, pallet cannot run it as Go does (too deep, too large): pallet's message.
    Refused(String),
}

/// A compiled Go regular expression.
#[derive(Debug)]
pub struct GoRegex {
    re: regex::bytes::Regex,
    /// The Go source text (`Split` treats an empty one specially).
    expr: String,
    /// The name of each capture group (index 0 is the whole match).
    names: Vec<Option<String>>,
}

thread_local! {
    static CACHE: std::cell::RefCell<HashMap<String, Arc<GoRegex>>> =
        std::cell::RefCell::new(HashMap::new());
}

/// Compiled patterns kept per thread; the cache is emptied when full.
const CACHE_MAX: usize = 256;

/// `regexp.Compile(expr)`: compiled once per thread and pattern.
pub fn compile(expr: &str) -> Result<Arc<GoRegex>, Re2Error> {
    if let Some(re) = CACHE.with(|c| c.borrow().get(expr).cloned()) {
        return Ok(re);
    }
    let re = Arc::new(compile_uncached(expr)?);
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= CACHE_MAX {
            c.clear();
        }
        c.insert(expr.to_string(), re.clone());
    });
    Ok(re)
}

fn compile_uncached(expr: &str) -> Result<GoRegex, Re2Error> {
    let translated = parse::Parser::new(expr).parse()?;
    let re = regex::bytes::RegexBuilder::new(&translated.pattern)
        .size_limit(MAX_COMPILED_BYTES)
        .nest_limit(4 * MAX_NESTING as u32)
        .build()
        .map_err(|e| {
            Re2Error::Refused(match e {
                regex::Error::CompiledTooBig(limit) => crate::budget::breach(
                    crate::budget::BudgetBreach::new(
                        "regular expression size (bytes compiled)",
                        limit as u64,
                        format!("{}+ (pattern {})", limit, shorten(expr)),
                    ),
                ),
                other => crate::budget::refuse(format!(
                    "unsupported construct: regular expression {} (pallet could not translate it: {})",
                    shorten(expr),
                    other.to_string().lines().last().unwrap_or_default()
                )),
            })
        })?;
    Ok(GoRegex {
        re,
        expr: expr.to_string(),
        names: translated.names,
    })
}

/// A pattern as a message shows it: quoted, at most 80 characters.
fn shorten(expr: &str) -> String {
    let mut s: String = expr.chars().take(80).collect();
    if s.len() < expr.len() {
        s.push('…');
    }
    format!("`{s}`")
}

/// A match: the byte range of each group (index 0 the whole match), `None` where a group did
/// not take part.
type Groups = Vec<Option<(usize, usize)>>;

impl GoRegex {
    /// The leftmost-first match starting at or after byte `pos` (a character boundary) of
    /// `text`, with its groups. A match the engine finds inside a character (an empty one, by
    /// an ASCII `\B` between two bytes of a character) is not one Go sees: Go steps through
    /// characters, so the search goes on from the next one.
    fn groups_at(&self, text: &str, mut pos: usize) -> Option<Groups> {
        let bytes = text.as_bytes();
        loop {
            let caps = self.re.captures_at(bytes, pos)?;
            let whole = caps.get(0)?;
            if text.is_char_boundary(whole.start()) {
                return Some(
                    (0..caps.len())
                        .map(|i| caps.get(i).map(|m| (m.start(), m.end())))
                        .collect(),
                );
            }
            pos = next_boundary(text, whole.start())?;
        }
    }

    /// The leftmost-first match at or after `pos`.
    fn find_at(&self, text: &str, mut pos: usize) -> Option<(usize, usize)> {
        let bytes = text.as_bytes();
        loop {
            let m = self.re.find_at(bytes, pos)?;
            if text.is_char_boundary(m.start()) {
                return Some((m.start(), m.end()));
            }
            pos = next_boundary(text, m.start())?;
        }
    }

    /// `MatchString`.
    pub fn is_match(&self, text: &str) -> bool {
        self.find_at(text, 0).is_some()
    }

    /// `FindString`: the leftmost match, "" when there is none.
    pub fn find<'t>(&self, text: &'t str) -> &'t str {
        self.find_at(text, 0)
            .and_then(|(a, b)| text.get(a..b))
            .unwrap_or_default()
    }

    /// Go's `allMatches`: successive matches, at most `n` (all when `n` is negative), an empty
    /// match right after the previous match left out.
    pub fn find_all(&self, text: &str, n: i64) -> Vec<(usize, usize)> {
        let limit = usize::try_from(n).unwrap_or(usize::MAX);
        let mut out = Vec::new();
        let (mut pos, mut prev_end) = (0usize, None::<usize>);
        while out.len() < limit && pos <= text.len() {
            let Some((start, end)) = self.find_at(text, pos) else {
                break;
            };
            let mut accept = true;
            if end == pos {
                // An empty match: not right after the previous one; step one character.
                if Some(start) == prev_end {
                    accept = false;
                }
                pos = next_boundary(text, pos).unwrap_or(text.len() + 1);
            } else {
                pos = end;
            }
            prev_end = Some(end);
            if accept {
                out.push((start, end));
            }
        }
        out
    }

    /// `ReplaceAllString` (`literal`: `ReplaceAllLiteralString`): each match replaced by
    /// `repl`, with `$1`, `${name}` expanded unless literal.
    pub fn replace_all(&self, text: &str, repl: &str, literal: bool) -> String {
        let mut out = String::new();
        let (mut last_end, mut search) = (0usize, 0usize);
        while search <= text.len() {
            let Some(groups) = self.groups_at(text, search) else {
                break;
            };
            let Some((start, end)) = groups[0] else {
                break;
            };
            out.push_str(&text[last_end..start]);
            // No replacement for an empty match right after another match.
            if end > last_end || start == 0 {
                if literal {
                    out.push_str(repl);
                } else {
                    self.expand(&mut out, repl, text, &groups);
                }
            }
            last_end = end;
            // Advance past this match; always advance at least one character.
            let width = text[search..].chars().next().map_or(0, char::len_utf8);
            search = if search + width > end {
                search + width
            } else if search + 1 > end {
                search + 1
            } else {
                end
            };
        }
        out.push_str(&text[last_end.min(text.len())..]);
        out
    }

    /// Go's `Regexp.expand`: `$$` is `$`, `$name`/`${name}` the named or numbered group (empty
    /// when missing), a malformed reference is a literal `$`.
    fn expand(&self, out: &mut String, template: &str, text: &str, groups: &Groups) {
        let mut rest = template;
        while let Some((before, after)) = rest.split_once('$') {
            out.push_str(before);
            rest = after;
            if let Some(after) = rest.strip_prefix('$') {
                out.push('$');
                rest = after;
                continue;
            }
            let Some((name, num, after)) = extract(rest) else {
                out.push('$');
                continue;
            };
            rest = after;
            let index = match num {
                Some(n) => Some(n),
                None => self.names.iter().position(|x| x.as_deref() == Some(name)),
            };
            if let Some((a, b)) = index.and_then(|i| groups.get(i).copied().flatten()) {
                out.push_str(&text[a..b]);
            }
        }
        out.push_str(rest);
    }

    /// `Split(s, n)`.
    pub fn split(&self, text: &str, n: i64) -> Vec<String> {
        if n == 0 {
            return Vec::new();
        }
        if !self.expr.is_empty() && text.is_empty() {
            return vec![String::new()];
        }
        let matches = self.find_all(text, n);
        let mut out = Vec::with_capacity(matches.len());
        let (mut beg, mut end) = (0usize, 0usize);
        for (start, stop) in matches {
            if n > 0 && out.len() as i64 == n - 1 {
                break;
            }
            end = start;
            if stop != 0 {
                out.push(text[beg..end].to_string());
            }
            beg = stop;
        }
        if end != text.len() {
            out.push(text[beg..].to_string());
        }
        out
    }
}

/// The byte after the character at `pos`, `None` at the end.
fn next_boundary(text: &str, pos: usize) -> Option<usize> {
    if pos >= text.len() {
        return None;
    }
    let mut next = pos + 1;
    while !text.is_char_boundary(next) {
        next += 1;
    }
    Some(next)
}

/// Go's `extract`: the name of a `$name` or `${name}` reference at the start of `s` (after the
/// `$`), its number when it is one, and the text after it.
fn extract(s: &str) -> Option<(&str, Option<usize>, &str)> {
    let (braced, body) = match s.strip_prefix('{') {
        Some(b) => (true, b),
        None => (false, s),
    };
    let len: usize = body
        .chars()
        .take_while(|c| c.is_alphabetic() || c.is_numeric() || *c == '_')
        .map(char::len_utf8)
        .sum();
    if len == 0 {
        return None;
    }
    let name = &body[..len];
    let mut rest = &body[len..];
    if braced {
        rest = rest.strip_prefix('}')?;
    }
    // A number: ASCII digits without a leading zero, below 10^8.
    let num = (name.bytes().all(|b| b.is_ascii_digit())
        && !(name.starts_with('0') && name.len() > 1))
        .then(|| name.parse::<usize>().ok().filter(|n| *n < 100_000_000))
        .flatten();
    Some((name, num, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, text: &str) -> bool {
        compile(pattern).unwrap().is_match(text)
    }

    fn error(pattern: &str) -> String {
        match compile(pattern) {
            Err(Re2Error::Syntax(m)) => m,
            other => panic!("{pattern}: {other:?}"),
        }
    }

    #[test]
    fn go_only_syntax_means_what_it_means_in_go() {
        assert!(matches(r"^[\w-\.]+$", "mymaster"));
        assert!(matches(r"^[\w-\.]+$", "my-master.x"));
        assert_eq!(compile(r"[\d-x]+").unwrap().find("12-x3"), "12-x3");
        assert!(!matches(r"^\w+$", "café"));
        assert!(!matches(r"^\d$", "٣"));
        assert!(!matches(r"^\s$", "\u{a0}"));
        assert!(matches(r"\Qa.b\E", "a.b"));
        assert!(!matches(r"\Qa.b\E", "axb"));
        assert!(matches(r"\101", "A"));
        assert!(matches(r"a{,2}", "a{,2}"));
        assert!(matches(r"(?i)k", "\u{212a}"));
        assert!(!matches(r"(?i)[^k]", "\u{212a}"));
        assert!(matches(r"\p{Greek}", "α"));
        assert!(matches(r"\p{letter}", "é"));
        assert!(matches(r"(?U)a+", "aaa"));
        assert_eq!(compile(r"(?U)a+").unwrap().find("aaa"), "a");
        assert_eq!(compile(r"(?U)a+?").unwrap().find("aaa"), "aaa");
    }

    #[test]
    fn go_refuses_what_go_refuses_in_its_words() {
        assert_eq!(error("[a"), "error parsing regexp: missing closing ]: `[a`");
        assert_eq!(
            error("a**"),
            "error parsing regexp: invalid nested repetition operator: `**`"
        );
        assert_eq!(
            error("*"),
            "error parsing regexp: missing argument to repetition operator: `*`"
        );
        assert_eq!(
            error(r"\C"),
            "error parsing regexp: invalid escape sequence: `\\C`"
        );
        assert_eq!(
            error(r"\1"),
            "error parsing regexp: invalid escape sequence: `\\1`"
        );
        assert_eq!(error("(a"), "error parsing regexp: missing closing ): `(a`");
        assert_eq!(error("a)"), "error parsing regexp: unexpected ): `a)`");
        assert_eq!(
            error("(?=a)"),
            "error parsing regexp: invalid or unsupported Perl syntax: `(?=`"
        );
        assert_eq!(
            error("a{1001}"),
            "error parsing regexp: invalid repeat count: `{1001}`"
        );
        assert_eq!(
            error("(a{100}){100}"),
            "error parsing regexp: invalid repeat count: `{100}`"
        );
        assert_eq!(
            error(r"[z-a]"),
            "error parsing regexp: invalid character class range: `z-a`"
        );
        assert_eq!(
            error(r"\p{Old_Italic}"),
            "error parsing regexp: invalid character class range: `\\p{Old_Italic}`"
        );
        assert_eq!(
            error(r"[[:foo:]]"),
            "error parsing regexp: invalid character class range: `[:foo:]`"
        );
        assert_eq!(
            error("a\\"),
            "error parsing regexp: trailing backslash at end of expression: ``"
        );
    }

    #[test]
    fn searches_step_past_empty_matches_as_go_does() {
        let re = compile("a*").unwrap();
        let all: Vec<&str> = re
            .find_all("baaac", -1)
            .into_iter()
            .map(|(a, b)| &"baaac"[a..b])
            .collect();
        assert_eq!(all, ["", "aaa", ""]);
        assert_eq!(re.replace_all("baaac", "X", false), "XbXcX");
        assert_eq!(re.split("baaac", -1), ["b", "c"]);
        assert_eq!(compile("").unwrap().split("abc", -1), ["a", "b", "c"]);
        let named = compile("(?P<1a>b)").unwrap();
        assert_eq!(named.replace_all("abc", "[${1a}]", false), "a[b]c");
        let num = compile("(b)").unwrap();
        assert_eq!(num.replace_all("abc", "$1x|${1}x|$$|$", false), "a|bx|$|$c");
        // An ASCII \B between the bytes of a character is no position for Go.
        assert!(!matches(r"\B", "aéa"));
    }
}
