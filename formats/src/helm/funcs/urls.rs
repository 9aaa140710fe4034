//! Sprig's `urlParse`/`urlJoin` (Go's `net/url` parsing and `URL.String`) and
//! `getHostByName`.

use super::*;

pub(super) const FUNCS: &[(&str, F)] = &[
    ("urlParse", |a| {
        let raw = s(&a[0]);
        let u = parse(&raw).map_err(|e| {
            err(format!(
                "error calling urlParse: unable to parse url: parse {}: {e}",
                go_quote(&raw)
            ))
        })?;
        let mut m = BTreeMap::new();
        let hostname = hostname(&u.host);
        for (k, v) in [
            ("scheme", u.scheme),
            ("host", u.host),
            ("hostname", hostname),
            ("path", u.path),
            ("query", u.query),
            ("opaque", u.opaque),
            ("fragment", u.fragment),
            (
                "userinfo",
                u.user.map(|x| x.to_string()).unwrap_or_default(),
            ),
        ] {
            m.insert(k.to_string(), Value::from(v));
        }
        Ok(GoMap::value(m))
    }),
    ("urlJoin", |a| {
        let m = map_entries(&a[0]).unwrap_or_default();
        let field = |k: &str| -> Result<String, Error> {
            match m.get(k) {
                None => Ok(String::new()),
                Some(v) if v.kind() == ValueKind::String => Ok(s(v)),
                Some(v) => Err(err(format!(
                    "error calling urlJoin: unable to parse {k} key, must be of type string, but {} found",
                    kind_of(v)
                ))),
            }
        };
        let userinfo = field("userinfo")?;
        let user = if userinfo.is_empty() {
            None
        } else {
            let raw = format!("proto://{userinfo}@host");
            let u = parse(&raw).map_err(|e| {
                err(format!(
                    "error calling urlJoin: unable to parse userinfo in dict: parse {}: {e}",
                    go_quote(&raw)
                ))
            })?;
            u.user
        };
        let u = Url {
            scheme: field("scheme")?,
            host: field("host")?,
            path: field("path")?,
            query: field("query")?,
            opaque: field("opaque")?,
            fragment: field("fragment")?,
            user,
            force_query: false,
        };
        Ok(Value::from(u.to_string()))
    }),
    // helm template resolves no names (no --enable-dns): helm itself returns "".
    ("getHostByName", |_| Ok(Value::from(""))),
];

/// Go's `url.Userinfo`.
#[derive(Debug, Clone)]
struct User {
    name: String,
    password: Option<String>,
}

impl std::fmt::Display for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&escape(&self.name, Mode::UserPassword))?;
        if let Some(p) = &self.password {
            write!(f, ":{}", escape(p, Mode::UserPassword))?;
        }
        Ok(())
    }
}

/// The fields of Go's `url.URL` that Sprig reads and writes (the path unescaped).
#[derive(Debug, Default)]
struct Url {
    scheme: String,
    opaque: String,
    user: Option<User>,
    host: String,
    path: String,
    query: String,
    fragment: String,
    force_query: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Path,
    Host,
    Zone,
    UserPassword,
    Fragment,
}

/// Go's `shouldEscape`.
fn should_escape(c: u8, mode: Mode) -> bool {
    if c.is_ascii_alphanumeric() {
        return false;
    }
    let host_sub_delim = b"!$&'()*+,;=:[]<>\"".contains(&c);
    if matches!(mode, Mode::Host | Mode::Zone) && host_sub_delim {
        return false;
    }
    match c {
        b'-' | b'_' | b'.' | b'~' => false,
        b'$' | b'&' | b'+' | b',' | b'/' | b':' | b';' | b'=' | b'?' | b'@' => match mode {
            Mode::Path => c == b'?',
            Mode::UserPassword => matches!(c, b'@' | b'/' | b'?' | b':'),
            Mode::Fragment => false,
            _ => true,
        },
        b'!' | b'(' | b')' | b'*' if mode == Mode::Fragment => false,
        _ => true,
    }
}

/// Go's `escape` (no query modes: Sprig never escapes a query).
fn escape(text: &str, mode: Mode) -> String {
    let mut out = String::new();
    for &c in text.as_bytes() {
        if should_escape(c, mode) {
            out.push_str(&format!("%{c:02X}"));
        } else {
            out.push(char::from(c));
        }
    }
    out
}

/// Go's `unescape` for the path, host, userinfo and fragment modes.
fn unescape(text: &str, mode: Mode) -> Result<String, String> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = b
                    .get(i + 1..i + 3)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit));
                let Some(hex) = hex else {
                    let bad = String::from_utf8_lossy(&b[i..(i + 3).min(b.len())]).into_owned();
                    return Err(format!("invalid URL escape {}", go_quote(&bad)));
                };
                let v = u8::from_str_radix(&String::from_utf8_lossy(hex), 16).unwrap_or(0);
                // Go: in a host, %-escapes may only encode non-ASCII bytes (and %25 in a zone).
                if mode == Mode::Host && v < 0x80 {
                    let bad = String::from_utf8_lossy(&b[i..i + 3]).into_owned();
                    return Err(format!("invalid URL escape {}", go_quote(&bad)));
                }
                out.push(v);
                i += 3;
            }
            c => {
                if mode == Mode::Host && c < 0x80 && should_escape(c, Mode::Host) {
                    return Err(format!(
                        "invalid character {} in host name",
                        go_quote(&char::from(c).to_string())
                    ));
                }
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Go's `url.Parse`.
fn parse(raw: &str) -> Result<Url, String> {
    let (rest, frag) = match raw.split_once('#') {
        Some((u, f)) => (u, Some(f)),
        None => (raw, None),
    };
    let mut u = parse_without_fragment(rest)?;
    if let Some(f) = frag {
        u.fragment = unescape(f, Mode::Fragment)?;
    }
    Ok(u)
}

fn parse_without_fragment(raw: &str) -> Result<Url, String> {
    if raw.bytes().any(|c| c < 0x20 || c == 0x7f) {
        return Err("net/url: invalid control character in URL".into());
    }
    let mut u = Url::default();
    if raw == "*" {
        u.path = "*".into();
        return Ok(u);
    }
    let (scheme, mut rest) = scheme(raw)?;
    u.scheme = scheme.to_ascii_lowercase();
    if rest.ends_with('?') && rest.matches('?').count() == 1 {
        u.force_query = true;
        rest = &rest[..rest.len() - 1];
    } else if let Some((r, q)) = rest.split_once('?') {
        rest = r;
        u.query = q.to_string();
    }
    if !rest.starts_with('/') {
        if !u.scheme.is_empty() {
            u.opaque = rest.to_string();
            return Ok(u);
        }
        let segment = rest.split('/').next().unwrap_or_default();
        if segment.contains(':') {
            return Err("first path segment in URL cannot contain colon".into());
        }
    }
    if (!u.scheme.is_empty() || !rest.starts_with("///")) && rest.starts_with("//") {
        let after = &rest[2..];
        let (authority, path) = match after.find('/') {
            Some(i) => (&after[..i], &after[i..]),
            None => (after, ""),
        };
        parse_authority(&mut u, authority)?;
        rest = path;
    }
    u.path = unescape(rest, Mode::Path)?;
    Ok(u)
}

/// Go's `getScheme`.
fn scheme(raw: &str) -> Result<(&str, &str), String> {
    for (i, c) in raw.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b':' if i == 0 => return Err("missing protocol scheme".into()),
            b':' => return Ok((&raw[..i], &raw[i + 1..])),
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

fn parse_authority(u: &mut Url, authority: &str) -> Result<(), String> {
    let (userinfo, host) = match authority.rfind('@') {
        Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
        None => (None, authority),
    };
    u.host = parse_host(host)?;
    if let Some(info) = userinfo {
        let valid = info
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"-._:~!$&'()*+,;=%@".contains(&c));
        if !valid {
            return Err("net/url: invalid userinfo".into());
        }
        u.user = Some(match info.split_once(':') {
            Some((name, pass)) => User {
                name: unescape(name, Mode::UserPassword)?,
                password: Some(unescape(pass, Mode::UserPassword)?),
            },
            None => User {
                name: unescape(info, Mode::UserPassword)?,
                password: None,
            },
        });
    }
    Ok(())
}

/// Go's `parseHost` (IPv6 literals in brackets, a numeric port after the last colon).
fn parse_host(host: &str) -> Result<String, String> {
    if host.starts_with('[') {
        let Some(close) = host.rfind(']') else {
            return Err("missing ']' in host".into());
        };
        let port = &host[close + 1..];
        if !valid_port(port) {
            return Err(format!("invalid port {} after host", go_quote(port)));
        }
        return Ok(format!(
            "{}{}",
            unescape(&host[..close + 1], Mode::Zone)?,
            port
        ));
    }
    if let Some(i) = host.rfind(':') {
        let port = &host[i..];
        if !valid_port(port) {
            return Err(format!("invalid port {} after host", go_quote(port)));
        }
    }
    unescape(host, Mode::Host)
}

fn valid_port(port: &str) -> bool {
    match port.strip_prefix(':') {
        Some(digits) => digits.bytes().all(|c| c.is_ascii_digit()),
        None => port.is_empty(),
    }
}

/// Go's `URL.Hostname`: the host without its port and IPv6 brackets.
fn hostname(host: &str) -> String {
    let h = match host.rfind(':') {
        Some(i) if !host[i..].contains(']') => &host[..i],
        _ => host,
    };
    let h = h.strip_prefix('[').unwrap_or(h);
    h.strip_suffix(']').unwrap_or(h).to_string()
}

impl std::fmt::Display for Url {
    /// Go's `URL.String`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = String::new();
        if !self.scheme.is_empty() {
            out.push_str(&self.scheme);
            out.push(':');
        }
        if !self.opaque.is_empty() {
            out.push_str(&self.opaque);
        } else {
            if !self.scheme.is_empty() || !self.host.is_empty() || self.user.is_some() {
                if !self.host.is_empty() || !self.path.is_empty() || self.user.is_some() {
                    out.push_str("//");
                }
                if let Some(u) = &self.user {
                    out.push_str(&u.to_string());
                    out.push('@');
                }
                if !self.host.is_empty() {
                    out.push_str(&escape(&self.host, Mode::Host));
                }
            }
            let path = escape(&self.path, Mode::Path);
            if !path.is_empty() && !path.starts_with('/') && !self.host.is_empty() {
                out.push('/');
            }
            if out.is_empty() {
                // A relative path whose first segment has a colon would read as a scheme.
                let first = path.split('/').next().unwrap_or_default();
                if first.contains(':') {
                    out.push_str("./");
                }
            }
            out.push_str(&path);
        }
        if self.force_query || !self.query.is_empty() {
            out.push('?');
            out.push_str(&self.query);
        }
        if !self.fragment.is_empty() {
            out.push('#');
            out.push_str(&escape(&self.fragment, Mode::Fragment));
        }
        f.write_str(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_joins_like_net_url() {
        let u = parse("https://us%40r:p%3Aw@example.com:8443/a%20b/c?x=1&y=2#frag%21").unwrap();
        assert_eq!(u.scheme, "https");
        assert_eq!(u.host, "example.com:8443");
        assert_eq!(hostname(&u.host), "example.com");
        assert_eq!(u.path, "/a b/c");
        assert_eq!(u.query, "x=1&y=2");
        assert_eq!(u.fragment, "frag!");
        assert_eq!(
            u.user.as_ref().map(|x| x.to_string()).as_deref(),
            Some("us%40r:p%3Aw")
        );
        assert_eq!(
            u.to_string(),
            "https://us%40r:p%3Aw@example.com:8443/a%20b/c?x=1&y=2#frag!"
        );
        assert_eq!(parse("mailto:a@b").unwrap().opaque, "a@b");
        assert!(parse(":x").is_err());
        assert!(parse("a:b/c").is_ok());
        assert!(parse("1a:b").is_err());
        assert_eq!(hostname("[::1]:80"), "::1");
    }
}
