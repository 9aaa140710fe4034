//! Sprig's string functions, including xstrings' word splitting for `snakecase`/`kebabcase`
//! and Go's Unicode case mapping.

use super::*;

/// `shuffle` (xstrings.Shuffle: a Fisher–Yates pass over the runes) draws on the render's
/// seeded random source.
pub(super) const STATE_FUNCS: &[(&str, SF)] = &[("shuffle", |st, a| {
    let mut runes: Vec<char> = s(&a[0]).chars().collect();
    let r = rng(st)?;
    for i in (1..runes.len()).rev() {
        let j = r.below(i as u64 + 1) as usize;
        runes.swap(i, j);
    }
    Ok(Value::from(runes.into_iter().collect::<String>()))
})];

/// goutils' `AbbreviateFull` over bytes, as Go slices strings (width ≥ 4 is checked by
/// the caller, as Sprig does).
fn abbreviate_full(b: &[u8], offset: i64, width: i64) -> String {
    let text = |x: &[u8]| String::from_utf8_lossy(x).into_owned();
    let len = b.len() as i64;
    if b.is_empty() || len <= width {
        return text(b);
    }
    let mut offset = offset.min(len);
    if len - offset < width - 3 {
        offset = len - (width - 3);
    }
    if offset <= 4 {
        return format!("{}...", text(&b[..(width - 3) as usize]));
    }
    if width < 7 {
        return String::new();
    }
    if offset + width - 3 < len {
        let rest = &b[offset as usize..];
        return format!("...{}", abbreviate_full(rest, 0, width - 3));
    }
    format!("...{}", text(&b[(len - (width - 3)) as usize..]))
}

pub(super) const FUNCS: &[(&str, F)] = &[
    ("quote", |a| {
        Ok(Value::from(
            a.0.iter()
                .filter(|v| !v.is_none())
                .map(|v| go_quote(&go_fmt(v)))
                .collect::<Vec<_>>()
                .join(" "),
        ))
    }),
    ("squote", |a| {
        Ok(Value::from(
            a.0.iter()
                .filter(|v| !v.is_none())
                .map(|v| format!("'{}'", go_fmt(v)))
                .collect::<Vec<_>>()
                .join(" "),
        ))
    }),
    ("indent", |a| {
        want(&a, 2, "indent")?;
        Ok(Value::from(indent_str(to_i64(&a[0]), &s(&a[1]))?))
    }),
    ("nindent", |a| {
        want(&a, 2, "nindent")?;
        Ok(Value::from(format!(
            "\n{}",
            indent_str(to_i64(&a[0]), &s(&a[1]))?
        )))
    }),
    ("trim", |a| Ok(Value::from(s(&arg(&a, 0)).trim()))),
    ("trimAll", |a| {
        let cut = s(&arg(&a, 0));
        Ok(Value::from(
            s(&arg(&a, 1)).trim_matches(|c| cut.contains(c)),
        ))
    }),
    ("trimPrefix", |a| {
        let (p, x) = (s(&arg(&a, 0)), s(&arg(&a, 1)));
        Ok(Value::from(x.strip_prefix(p.as_str()).unwrap_or(&x)))
    }),
    ("trimSuffix", |a| {
        let (p, x) = (s(&arg(&a, 0)), s(&arg(&a, 1)));
        Ok(Value::from(x.strip_suffix(p.as_str()).unwrap_or(&x)))
    }),
    ("trunc", |a| {
        want(&a, 2, "trunc")?;
        let n = to_i64(&a[0]);
        let x = s(&a[1]);
        let len = x.len() as i64;
        // Sprig slices bytes: positive n keeps the prefix, negative keeps the suffix.
        let r = if n < 0 && -n < len {
            x.get((len + n) as usize..).unwrap_or(&x).to_string()
        } else if n >= 0 && n < len {
            x.get(..n as usize).unwrap_or(&x).to_string()
        } else {
            x
        };
        Ok(Value::from(r))
    }),
    ("upper", |a| Ok(Value::from(go_upper(&s(&arg(&a, 0)))))),
    ("lower", |a| Ok(Value::from(go_lower(&s(&arg(&a, 0)))))),
    ("title", |a| Ok(Value::from(title(&s(&arg(&a, 0)))))),
    ("replace", |a| {
        want(&a, 3, "replace")?;
        Ok(Value::from(s(&a[2]).replace(&s(&a[0]), &s(&a[1]))))
    }),
    ("contains", |a| {
        Ok(Value::from(s(&arg(&a, 1)).contains(&s(&arg(&a, 0)))))
    }),
    ("hasPrefix", |a| {
        Ok(Value::from(s(&arg(&a, 1)).starts_with(&s(&arg(&a, 0)))))
    }),
    ("hasSuffix", |a| {
        Ok(Value::from(s(&arg(&a, 1)).ends_with(&s(&arg(&a, 0)))))
    }),
    ("repeat", |a| {
        let n = to_i64(&arg(&a, 0));
        if n < 0 {
            return Err(err("strings: negative Repeat count"));
        }
        Ok(Value::from(s(&arg(&a, 1)).repeat(n as usize)))
    }),
    ("splitList", |a| {
        Ok(go_split(&s(&arg(&a, 1)), &s(&arg(&a, 0)), -1)
            .into_iter()
            .map(Value::from)
            .collect())
    }),
    ("split", |a| {
        let m = go_split(&s(&arg(&a, 1)), &s(&arg(&a, 0)), -1)
            .into_iter()
            .enumerate()
            .map(|(i, p)| (format!("_{i}"), Value::from(p)))
            .collect();
        Ok(GoMap::typed(m, GoType::StringMap))
    }),
    ("join", |a| {
        let sep = s(&arg(&a, 0));
        let v = arg(&a, 1);
        let items = list_items(&v).unwrap_or_else(|| vec![v]);
        Ok(Value::from(
            items
                .iter()
                .filter(|x| !x.is_none())
                .map(s)
                .collect::<Vec<_>>()
                .join(&sep),
        ))
    }),
    ("swapcase", |a| Ok(Value::from(swap_case(&s(&a[0]))))),
    ("initials", |a| {
        // goutils: the first byte of each whitespace-separated word.
        let mut out = String::new();
        let mut gap = true;
        for c in s(&a[0]).chars() {
            if c.is_whitespace() {
                gap = true;
            } else if gap {
                out.push(c);
                gap = false;
            }
        }
        Ok(Value::from(out))
    }),
    ("untitle", |a| {
        let mut out = String::new();
        let mut next = true;
        for c in s(&a[0]).chars() {
            if c.is_whitespace() {
                next = true;
                out.push(c);
            } else if next {
                out.extend(c.to_lowercase().next());
                next = false;
            } else {
                out.push(c);
            }
        }
        Ok(Value::from(out))
    }),
    ("toString", |a| Ok(Value::from(strval(&arg(&a, 0))))),
    ("cat", |a| {
        Ok(Value::from(
            a.iter()
                .filter(|v| !v.is_none())
                .map(s)
                .collect::<Vec<_>>()
                .join(" "),
        ))
    }),
    ("nospace", |a| {
        Ok(Value::from(
            s(&arg(&a, 0)).split_whitespace().collect::<String>(),
        ))
    }),
    ("substr", |a| {
        // Sprig slices bytes and panics (an error) on bounds Go rejects.
        let (start, end, x) = (to_i64(&arg(&a, 0)), to_i64(&arg(&a, 1)), s(&arg(&a, 2)));
        let b = x.as_bytes();
        let len = b.len() as i64;
        let (st, en) = if start < 0 {
            (0, end)
        } else if end < 0 || end > len {
            (start, len)
        } else {
            (start, end)
        };
        if st < 0 || en < 0 || st > en || en > len {
            return Err(err(format!(
                "runtime error: slice bounds out of range [{st}:{en}]"
            )));
        }
        Ok(Value::from(
            String::from_utf8_lossy(&b[st as usize..en as usize]).into_owned(),
        ))
    }),
    ("abbrevboth", |a| {
        // Sprig guards goutils' errors by returning the string unchanged.
        let (left, right, x) = (to_i64(&a[0]), to_i64(&a[1]), s(&a[2]));
        if right < 4 || (left > 0 && right < 7) {
            return Ok(Value::from(x));
        }
        Ok(Value::from(abbreviate_full(x.as_bytes(), left, right)))
    }),
    ("hello", |_| Ok(Value::from("Hello!"))),
    ("abbrev", |a| {
        let (w, x) = (to_i64(&arg(&a, 0)), s(&arg(&a, 1)));
        if w < 4 || x.len() as i64 <= w {
            return Ok(Value::from(x));
        }
        Ok(Value::from(format!(
            "{}...",
            x.get(..(w - 3) as usize).unwrap_or("")
        )))
    }),
    ("snakecase", |a| {
        Ok(Value::from(camel_to_lower(&s(&arg(&a, 0)), '_')))
    }),
    ("kebabcase", |a| {
        Ok(Value::from(camel_to_lower(&s(&arg(&a, 0)), '-')))
    }),
    ("camelcase", |a| {
        Ok(Value::from(
            s(&arg(&a, 0))
                .split(['_', '-', ' '])
                .filter(|w| !w.is_empty())
                .map(|w| {
                    let mut c = w.chars();
                    c.next()
                        .map(|f| f.to_uppercase().chain(c).collect::<String>())
                        .unwrap_or_default()
                })
                .collect::<String>(),
        ))
    }),
    ("wrap", |a| {
        Ok(Value::from(wrap_custom(
            &s(&a[1]),
            a[0].as_i64().unwrap_or(1),
            "",
            false,
        )))
    }),
    ("wrapWith", |a| {
        Ok(Value::from(wrap_custom(
            &s(&a[2]),
            a[0].as_i64().unwrap_or(1),
            &s(&a[1]),
            true,
        )))
    }),
    ("splitn", |a| {
        let (sep, n, text) = (s(&arg(&a, 0)), to_i64(&arg(&a, 1)), s(&arg(&a, 2)));
        Ok(GoMap::typed(
            go_split(&text, &sep, n)
                .into_iter()
                .enumerate()
                .map(|(i, p)| (format!("_{i}"), Value::from(p)))
                .collect(),
            GoType::StringMap,
        ))
    }),
    ("plural", |a| {
        Ok(if to_i64(&arg(&a, 2)) == 1 {
            arg(&a, 0)
        } else {
            arg(&a, 1)
        })
    }),
];

pub(super) fn indent_str(n: i64, s: &str) -> Result<String, Error> {
    if n < 0 {
        return Err(err("strings: negative Repeat count"));
    }
    let pad = " ".repeat(n as usize);
    Ok(format!("{pad}{}", s.replace('\n', &format!("\n{pad}"))))
}

pub(super) fn title(s: &str) -> String {
    let mut out = String::new();
    let mut prev_letter = false;
    for c in s.chars() {
        if !prev_letter && c.is_alphabetic() {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        prev_letter = c.is_alphanumeric() || c == '\'' || c == '_';
    }
    out
}

/// goutils' `SwapCase`: upper and title case become lower, lower case becomes upper (title
/// case at a word start, the same letter outside a few ligatures).
pub(super) fn swap_case(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_uppercase() {
                c.to_lowercase().next().unwrap_or(c)
            } else if c.is_lowercase() {
                c.to_uppercase().next().unwrap_or(c)
            } else {
                c
            }
        })
        .collect()
}

/// Go's `strings.SplitN` (`n < 0`: all parts); an empty separator splits into characters.
pub(super) fn go_split(text: &str, sep: &str, n: i64) -> Vec<String> {
    if n == 0 {
        return Vec::new();
    }
    if sep.is_empty() {
        let chars: Vec<String> = text.chars().map(String::from).collect();
        if n < 0 || chars.len() as i64 <= n {
            return chars;
        }
        let k = (n - 1) as usize;
        let mut out: Vec<String> = chars[..k].to_vec();
        out.push(chars[k..].concat());
        return out;
    }
    if n < 0 {
        text.split(sep).map(str::to_string).collect()
    } else {
        text.splitn(n as usize, sep).map(str::to_string).collect()
    }
}

/// Go's `strings.ToUpper`: per character, keeping characters without a one-character upper
/// case (`ß` stays `ß`, where Rust would give `SS`).
pub(super) fn go_upper(s: &str) -> String {
    s.chars()
        .map(|c| {
            let mut u = c.to_uppercase();
            match (u.next(), u.next()) {
                (Some(x), None) => x,
                _ => c,
            }
        })
        .collect()
}

/// Go's `strings.ToLower`: per character, the first character of the lower case.
pub(super) fn go_lower(s: &str) -> String {
    s.chars()
        .map(|c| c.to_lowercase().next().unwrap_or(c))
        .collect()
}

/// Go's `unicode.IsPunct` for ASCII (punctuation, not the symbols `$+<=>^`|~`); other
/// characters count as punctuation only in the General Punctuation block.
pub(super) fn go_is_punct(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_punctuation() && !"$+<=>^`|~".contains(c)
    } else {
        matches!(c as u32, 0x2010..=0x2027 | 0x2030..=0x205E | 0x3001..=0x3003)
    }
}

/// xstrings' `isAlphabet`: a letter that is not CJK.
pub(super) fn xs_is_alphabet(c: char) -> bool {
    c.is_alphabetic()
        && !matches!(c as u32, 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x2FA1F)
}

pub(super) fn xs_is_connector(c: char) -> bool {
    c == '-' || c == '_' || c.is_whitespace()
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum WordType {
    Invalid,
    Number,
    Upper,
    Alphabet,
    Connector,
    Punct,
    Other,
}

/// xstrings' `nextWord`: the type and length of the word at the start of `s`.
pub(super) fn xs_next_word(s: &[char]) -> (WordType, usize) {
    let Some(&r) = s.first() else {
        return (WordType::Invalid, 0);
    };
    let len = s.len();
    let mut n = 1;
    let wt = if xs_is_connector(r) {
        while n < len && xs_is_connector(s[n]) {
            n += 1;
        }
        WordType::Connector
    } else if go_is_punct(r) {
        while n < len && go_is_punct(s[n]) {
            n += 1;
        }
        WordType::Punct
    } else if r.is_uppercase() {
        if n < len {
            if s[n].is_uppercase() {
                n += 1;
                while n < len && s[n].is_uppercase() {
                    n += 1;
                }
                // "HTTPServer": the last capital starts the next word.
                if n < len && xs_is_alphabet(s[n]) {
                    n -= 1;
                }
            } else if xs_is_alphabet(s[n]) {
                n += 1;
                while n < len && xs_is_alphabet(s[n]) && !s[n].is_uppercase() {
                    n += 1;
                }
            }
        }
        WordType::Upper
    } else if xs_is_alphabet(r) {
        while n < len && xs_is_alphabet(s[n]) && !s[n].is_uppercase() {
            n += 1;
        }
        WordType::Alphabet
    } else if r.is_numeric() {
        while n < len && s[n].is_numeric() {
            n += 1;
        }
        WordType::Number
    } else {
        while n < len
            && !(xs_is_connector(s[n])
                || xs_is_alphabet(s[n])
                || s[n].is_numeric()
                || go_is_punct(s[n]))
        {
            n += 1;
        }
        WordType::Other
    };
    (wt, n)
}

pub(super) fn xs_to_lower(out: &mut String, wt: WordType, word: &[char], connector: char) {
    if wt != WordType::Upper && wt != WordType::Connector {
        out.extend(word);
        return;
    }
    for &c in word {
        if xs_is_connector(c) {
            out.push(connector);
        } else if c.is_uppercase() {
            out.push(c.to_lowercase().next().unwrap_or(c));
        } else {
            out.push(c);
        }
    }
}

/// xstrings' `camelCaseToLowerCase` (Sprig's `snakecase` and `kebabcase`):
/// `HTTPServer` → `http_server`, `Bld4Floor3rd` → `bld4_floor_3rd`.
pub(super) fn camel_to_lower(text: &str, connector: char) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut pos = 0;
    let next = |pos: &mut usize| -> (WordType, std::ops::Range<usize>) {
        let (wt, n) = xs_next_word(&chars[*pos..]);
        let r = *pos..*pos + n;
        *pos += n;
        (wt, r)
    };
    if chars.is_empty() {
        return out;
    }
    let (mut wt, mut word) = next(&mut pos);
    while pos < chars.len() {
        if wt != WordType::Connector {
            xs_to_lower(&mut out, wt, &chars[word.clone()], connector);
        }
        let prev = wt;
        let last = word.clone();
        (wt, word) = next(&mut pos);
        match prev {
            WordType::Number => {
                while wt == WordType::Alphabet || wt == WordType::Number {
                    xs_to_lower(&mut out, wt, &chars[word.clone()], connector);
                    (wt, word) = next(&mut pos);
                }
                if !matches!(
                    wt,
                    WordType::Invalid | WordType::Punct | WordType::Connector
                ) {
                    out.push(connector);
                }
            }
            WordType::Connector => xs_to_lower(&mut out, prev, &chars[last], connector),
            WordType::Punct => {}
            _ => {
                if wt != WordType::Number {
                    if wt != WordType::Connector && wt != WordType::Punct {
                        out.push(connector);
                    }
                    continue;
                }
                if pos >= chars.len() {
                    continue;
                }
                let num = word.clone();
                (wt, word) = next(&mut pos);
                if wt != WordType::Alphabet {
                    xs_to_lower(&mut out, WordType::Number, &chars[num], connector);
                    if wt != WordType::Connector && wt != WordType::Punct {
                        out.push(connector);
                    }
                    continue;
                }
                out.push(connector);
                xs_to_lower(&mut out, WordType::Number, &chars[num], connector);
                while wt == WordType::Alphabet || wt == WordType::Number {
                    xs_to_lower(&mut out, wt, &chars[word.clone()], connector);
                    (wt, word) = next(&mut pos);
                }
                if !matches!(
                    wt,
                    WordType::Invalid | WordType::Connector | WordType::Punct
                ) {
                    out.push(connector);
                }
            }
        }
    }
    xs_to_lower(&mut out, wt, &chars[word], connector);
    out
}

/// goutils' `WrapCustom` (Sprig's `wrap` and `wrapWith`): byte-based, wraps at the last space
/// within `width`, drops a space at a line start; long words are split only when `split_long`.
pub(super) fn wrap_custom(text: &str, width: i64, newline: &str, split_long: bool) -> String {
    let s = text.as_bytes();
    if s.is_empty() {
        return String::new();
    }
    let newline = if newline.is_empty() { "\n" } else { newline };
    let width = usize::try_from(width.max(1)).unwrap_or(1);
    let mut out: Vec<u8> = Vec::with_capacity(s.len() + 16);
    let mut offset = 0;
    while s.len() - offset > width {
        if s[offset] == b' ' {
            offset += 1;
            continue;
        }
        let window = &s[offset..offset + width + 1];
        if let Some(sp) = window.iter().rposition(|b| *b == b' ') {
            out.extend_from_slice(&s[offset..offset + sp]);
            out.extend_from_slice(newline.as_bytes());
            offset += sp + 1;
        } else if split_long {
            out.extend_from_slice(&s[offset..offset + width]);
            out.extend_from_slice(newline.as_bytes());
            offset += width;
        } else {
            let end = offset + width;
            match s[end..].iter().position(|b| *b == b' ') {
                Some(i) => {
                    out.extend_from_slice(&s[offset..end + i]);
                    out.extend_from_slice(newline.as_bytes());
                    offset = end + i + 1;
                }
                None => {
                    out.extend_from_slice(&s[offset..]);
                    offset = s.len();
                }
            }
        }
    }
    out.extend_from_slice(&s[offset..]);
    String::from_utf8_lossy(&out).into_owned()
}
