//! Semantic versions and version ranges with the rules of Masterminds/semver v3, the library helm,
//! Sprig and Flux use: lenient version parsing (`v` prefix, missing minor/patch), constraints with
//! `= != > < >= <= ~ ^`, wildcards (`1.2.x`, `*`), hyphen ranges (`1.2 - 1.4`), `||`
//! alternatives and comma/space AND, and the rule that a pre-release version only satisfies
//! constraints that carry a pre-release. Used by the helm templates (`semverCompare`) and by the
//! agent's version ranges for sources, so both read a range the same way.

use std::cmp::Ordering;
use std::fmt;

/// A version or range that does not parse; the message is Masterminds' wording.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SemverError(pub String);

fn err(msg: impl Into<String>) -> SemverError {
    SemverError(msg.into())
}

/// A parsed version (Masterminds' `semver.NewVersion`); prints normalised, without `v`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub(crate) major: u64,
    pub(crate) minor: u64,
    pub(crate) patch: u64,
    pub(crate) pre: String,
    pub(crate) meta: String,
    pub(crate) original: String,
}

fn valid_ident_list(s: &str, numeric_no_leading_zero: bool) -> bool {
    !s.is_empty()
        && s.split('.').all(|p| {
            !p.is_empty()
                && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !(numeric_no_leading_zero
                    && p.len() > 1
                    && p.starts_with('0')
                    && p.chars().all(|c| c.is_ascii_digit()))
        })
}

fn num(p: &str) -> Option<u64> {
    if p.is_empty() || !p.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    p.parse().ok()
}

/// Parses the numeric core into up to three parts; `wild` admits `x`, `X` and `*` parts (as None).
fn parse_core(core: &str, wild: bool) -> Option<Vec<Option<u64>>> {
    let parts: Vec<&str> = core.split('.').collect();
    if parts.is_empty() || parts.len() > 3 {
        return None;
    }
    parts
        .iter()
        .map(|p| match *p {
            "x" | "X" | "*" if wild => Some(None),
            _ => num(p).map(Some),
        })
        .collect()
}

/// Splits `core-pre+meta`, validating pre-release and metadata.
fn split_version(s: &str) -> Option<(&str, &str, &str)> {
    let (rest, meta) = match s.split_once('+') {
        Some((r, m)) => (r, m),
        None => (s, ""),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((c, p)) => (c, p),
        None => (rest, ""),
    };
    if s.contains('+') && !valid_ident_list(meta, false) {
        return None;
    }
    if rest.contains('-') && !valid_ident_list(pre, true) {
        return None;
    }
    Some((core, pre, meta))
}

impl Version {
    /// Parses like `semver.NewVersion`.
    pub fn parse(s: &str) -> Result<Version, SemverError> {
        let bad = || err(format!("Invalid Semantic Version: {s:?}"));
        let body = s.strip_prefix('v').unwrap_or(s);
        let (core, pre, meta) = split_version(body).ok_or_else(bad)?;
        let parts = parse_core(core, false).ok_or_else(bad)?;
        let get = |i: usize| parts.get(i).copied().flatten().unwrap_or(0);
        Ok(Version {
            major: get(0),
            minor: get(1),
            patch: get(2),
            pre: pre.to_string(),
            meta: meta.to_string(),
            original: s.to_string(),
        })
    }

    fn cmp_core(&self, o: &Version) -> Ordering {
        (self.major, self.minor, self.patch).cmp(&(o.major, o.minor, o.patch))
    }

    /// Semantic-version precedence (metadata ignored).
    pub fn compare(&self, o: &Version) -> Ordering {
        self.cmp_core(o).then_with(|| cmp_pre(&self.pre, &o.pre))
    }
}

fn cmp_pre(a: &str, b: &str) -> Ordering {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Greater,
        (false, true) => return Ordering::Less,
        _ => {}
    }
    let (xs, ys): (Vec<&str>, Vec<&str>) = (a.split('.').collect(), b.split('.').collect());
    for (x, y) in xs.iter().zip(&ys) {
        let o = match (num(x), num(y)) {
            (Some(p), Some(q)) => p.cmp(&q),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => x.cmp(y),
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    xs.len().cmp(&ys.len())
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        if !self.pre.is_empty() {
            write!(f, "-{}", self.pre)?;
        }
        if !self.meta.is_empty() {
            write!(f, "+{}", self.meta)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Lt,
    Ge,
    Le,
    Tilde,
    Caret,
}

#[derive(Debug)]
struct Constraint {
    op: Op,
    con: Version,
    minor_dirty: bool,
    patch_dirty: bool,
    dirty: bool,
}

const OPS: &[(&str, Op)] = &[
    (">=", Op::Ge),
    ("=>", Op::Ge),
    ("<=", Op::Le),
    ("=<", Op::Le),
    ("!=", Op::Ne),
    ("~>", Op::Tilde),
    (">", Op::Gt),
    ("<", Op::Lt),
    ("=", Op::Eq),
    ("~", Op::Tilde),
    ("^", Op::Caret),
];

fn parse_constraint(s: &str, whole: &str) -> Result<Constraint, SemverError> {
    let bad = || err(format!("improper constraint: {whole}"));
    let (op, rest) = OPS
        .iter()
        .find_map(|(p, op)| s.strip_prefix(p).map(|r| (*op, r)))
        .unwrap_or((Op::Eq, s));
    let rest = rest.trim();
    let body = rest.strip_prefix('v').unwrap_or(rest);
    let (core, pre, meta) = split_version(body).ok_or_else(bad)?;
    let parts = parse_core(core, true).ok_or_else(bad)?;
    let part = |i: usize| parts.get(i).copied().flatten();
    let wild = |i: usize| part(i).is_none();
    // A wildcard or missing part makes every later part a wildcard too.
    let major_dirty = wild(0);
    let minor_dirty = major_dirty || wild(1);
    let patch_dirty = minor_dirty || wild(2);
    let con = Version {
        major: part(0).unwrap_or(0),
        minor: if minor_dirty { 0 } else { part(1).unwrap_or(0) },
        patch: if patch_dirty { 0 } else { part(2).unwrap_or(0) },
        pre: pre.to_string(),
        meta: meta.to_string(),
        original: rest.to_string(),
    };
    if major_dirty && !matches!(op, Op::Eq | Op::Ne) {
        // `>=*` and friends: any version; `>=0.0.0` is the same test.
        return Ok(Constraint {
            op: Op::Ge,
            con,
            minor_dirty: true,
            patch_dirty: true,
            dirty: true,
        });
    }
    Ok(Constraint {
        op,
        con,
        minor_dirty,
        patch_dirty,
        dirty: patch_dirty,
    })
}

impl Constraint {
    fn major_dirty(&self) -> bool {
        self.con
            .original
            .trim_start_matches('v')
            .starts_with(['x', 'X', '*'])
    }

    fn check(&self, v: &Version) -> bool {
        let c = &self.con;
        if !v.pre.is_empty() && c.pre.is_empty() {
            return false;
        }
        match self.op {
            Op::Eq => {
                if self.dirty {
                    self.within_wildcard(v)
                } else {
                    v.compare(c) == Ordering::Equal
                }
            }
            Op::Ne => {
                if self.dirty {
                    !self.within_wildcard(v)
                } else {
                    v.compare(c) != Ordering::Equal
                }
            }
            Op::Gt => {
                if !self.dirty {
                    return v.compare(c) == Ordering::Greater;
                }
                match v.major.cmp(&c.major) {
                    Ordering::Greater => true,
                    Ordering::Less => false,
                    Ordering::Equal if self.minor_dirty => false,
                    Ordering::Equal => v.minor > c.minor,
                }
            }
            Op::Lt => v.compare(c) == Ordering::Less,
            Op::Ge => v.compare(c) != Ordering::Less,
            Op::Le => {
                if !self.dirty {
                    return v.compare(c) != Ordering::Greater;
                }
                match v.major.cmp(&c.major) {
                    Ordering::Greater => false,
                    Ordering::Less => true,
                    Ordering::Equal if self.minor_dirty => true,
                    Ordering::Equal => v.minor <= c.minor,
                }
            }
            Op::Tilde => {
                if v.compare(c) == Ordering::Less {
                    return false;
                }
                if c.major == 0 && c.minor == 0 && c.patch == 0 && !self.minor_dirty {
                    return true;
                }
                v.major == c.major && (self.minor_dirty || v.minor == c.minor)
            }
            Op::Caret => {
                if v.compare(c) == Ordering::Less {
                    return false;
                }
                if c.major > 0 || self.minor_dirty {
                    v.major == c.major
                } else if c.minor > 0 || self.patch_dirty {
                    v.major == 0 && v.minor == c.minor
                } else {
                    v.major == 0 && v.minor == 0 && v.patch == c.patch
                }
            }
        }
    }

    /// Whether `v` matches the non-wildcard parts of the constraint.
    fn within_wildcard(&self, v: &Version) -> bool {
        let c = &self.con;
        if self.major_dirty() {
            return true;
        }
        v.major == c.major
            && (self.minor_dirty || v.minor == c.minor)
            && (self.patch_dirty || v.patch == c.patch)
    }
}

/// Parses a constraint string: `||`-separated groups of comma- or space-separated constraints.
fn parse_constraints(s: &str) -> Result<Vec<Vec<Constraint>>, SemverError> {
    let mut groups = Vec::new();
    for group in s.split("||") {
        // Join operators to their versions (`>= 1.2` is one constraint), then split on , or space.
        // A lone `-` between two versions is a hyphen range: `1.2 - 1.4` is `>=1.2, <=1.4`.
        let mut toks: Vec<String> = Vec::new();
        let mut hyphen = false;
        for t in group.split([',', ' ', '\t']).filter(|t| !t.is_empty()) {
            if t == "-"
                && toks
                    .last()
                    .is_some_and(|p| !OPS.iter().any(|(o, _)| p.starts_with(o)))
            {
                if let Some(prev) = toks.last_mut() {
                    prev.insert_str(0, ">=");
                }
                hyphen = true;
                continue;
            }
            match toks.last_mut() {
                Some(prev) if OPS.iter().any(|(p, _)| prev == p) => prev.push_str(t),
                _ if hyphen => {
                    toks.push(format!("<={t}"));
                    hyphen = false;
                }
                _ => toks.push(t.to_string()),
            }
        }
        if hyphen {
            return Err(err(format!("improper constraint: {s}")));
        }
        if toks.is_empty() {
            return Err(err(format!("improper constraint: {s}")));
        }
        groups.push(
            toks.iter()
                .map(|t| parse_constraint(t, s))
                .collect::<Result<Vec<_>, _>>()?,
        );
    }
    Ok(groups)
}

/// A version range: `||`-separated groups, each a list of constraints that must all hold.
#[derive(Debug)]
pub struct Range {
    groups: Vec<Vec<Constraint>>,
    text: String,
}

impl Range {
    /// Parses a range like Masterminds' `semver.NewConstraint`.
    pub fn parse(s: &str) -> Result<Range, SemverError> {
        Ok(Range {
            groups: parse_constraints(s)?,
            text: s.to_string(),
        })
    }

    /// Whether `v` satisfies the range.
    pub fn matches(&self, v: &Version) -> bool {
        self.groups.iter().any(|g| g.iter().all(|c| c.check(v)))
    }

    /// The newest of `candidates` (e.g. tags) that parses as a version and satisfies the range,
    /// with its version. Candidates that are not versions are skipped, as Flux and helm skip
    /// them. Of two candidates with the same precedence (`1.2.3` and `v1.2.3`) the first wins.
    pub fn newest<'a, I>(&self, candidates: I) -> Option<(&'a str, Version)>
    where
        I: IntoIterator<Item = &'a str>,
    {
        let mut best: Option<(&'a str, Version)> = None;
        for c in candidates {
            let Ok(v) = Version::parse(c) else { continue };
            if !self.matches(&v) {
                continue;
            }
            if best
                .as_ref()
                .is_none_or(|(_, b)| v.compare(b) == Ordering::Greater)
            {
                best = Some((c, v));
            }
        }
        best
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Whether `s` is a range rather than one exact version: anything but a plain version (with or
/// without `v` or `=`) is a range. `1.2.3` names a version; `1.x`, `>=1.2`, `^1` are ranges.
pub fn is_range(s: &str) -> bool {
    let t = s.trim();
    let t = t.strip_prefix('=').unwrap_or(t).trim();
    Version::parse(t).is_err()
        || t.split(['-', '+'])
            .next()
            .is_some_and(|core| core.trim_start_matches('v').split('.').count() < 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(c: &str, v: &str) -> bool {
        Range::parse(c)
            .unwrap()
            .matches(&Version::parse(v).unwrap())
    }

    #[test]
    fn parses_lenient_versions() {
        let v = Version::parse("v1.2").unwrap();
        assert_eq!((v.major, v.minor, v.patch), (1, 2, 0));
        assert_eq!(v.original, "v1.2");
        let v = Version::parse("1.2.3-rc.1+build.5").unwrap();
        assert_eq!((v.pre.as_str(), v.meta.as_str()), ("rc.1", "build.5"));
        assert_eq!(v.to_string(), "1.2.3-rc.1+build.5");
        for bad in ["", "1.2.3.4", "a.b", "1.2.3-", "1.2.3-01", "1..2"] {
            assert!(Version::parse(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn compares_like_masterminds() {
        assert!(ok(">=1.2.0-0", "v1.33.0"));
        assert!(ok(">=1.2.0-0", "1.2.0-rc.1"));
        assert!(!ok(">=1.2.0", "1.3.0-rc.1"));
        assert!(ok("^1.2.3", "1.9.0") && !ok("^1.2.3", "2.0.0"));
        assert!(ok("^0.2.3", "0.2.9") && !ok("^0.2.3", "0.3.0"));
        assert!(ok("~1.2.3", "1.2.9") && !ok("~1.2.3", "1.3.0"));
        assert!(ok("~1", "1.9.0") && !ok("~1", "2.0.0"));
        assert!(ok("1.2.x", "1.2.7") && !ok("1.2.x", "1.3.0"));
        assert!(ok("1.x", "1.17.2") && !ok("1.x", "2.0.0") && !ok("1.x", "1.18.0-alpha.1"));
        assert!(ok("!=1.2.x", "1.3.0") && !ok("!=1.2.x", "1.2.1"));
        assert!(ok("*", "4.5.6"));
        assert!(ok(">1.x", "2.0.0") && !ok(">1.x", "1.9.0"));
        assert!(ok("<=1.2.x", "1.2.9") && !ok("<=1.2.x", "1.3.0"));
        assert!(ok(">= 1.2, < 1.4", "1.3.0") && !ok(">=1.2 <1.4", "1.4.0"));
        assert!(ok("<1.0 || >=2.0", "2.1.0") && !ok("<1.0 || >=2.0", "1.5.0"));
        assert!(ok("1.2.3+meta", "1.2.3"));
    }

    #[test]
    fn hyphen_ranges_are_inclusive() {
        assert!(ok("1.2 - 1.4.5", "1.2.0") && ok("1.2 - 1.4.5", "1.4.5"));
        assert!(!ok("1.2 - 1.4.5", "1.4.6") && !ok("1.2 - 1.4.5", "1.1.9"));
        assert!(ok("1.2 - 1.4.5 || 3.x", "3.1.0"));
    }

    #[test]
    fn newest_skips_non_versions_and_prereleases() {
        let r = Range::parse(">=1.2.0 <2").unwrap();
        let tags = [
            "latest",
            "v1.1.0",
            "1.2.0",
            "v1.9.3",
            "1.10.0-rc.1",
            "2.0.0",
            "main",
        ];
        let (tag, v) = r.newest(tags).unwrap();
        assert_eq!((tag, v.to_string().as_str()), ("v1.9.3", "1.9.3"));
        // Masterminds checks the pre-release rule per constraint: both ends must carry one.
        let pre = Range::parse(">=1.2.0-0 <2.0.0-0").unwrap();
        assert_eq!(pre.newest(tags).unwrap().0, "1.10.0-rc.1");
        assert!(Range::parse(">=3").unwrap().newest(tags).is_none());
    }

    #[test]
    fn ranges_are_told_from_versions() {
        for r in ["1.x", ">=1.2", "^1", "~1.2.0", "1.2", "*", "1.2 - 1.3"] {
            assert!(is_range(r), "{r}");
        }
        for v in ["1.2.3", "v1.2.3", "=1.2.3", "1.2.3-rc.1+b"] {
            assert!(!is_range(v), "{v}");
        }
    }

    #[test]
    fn rejects_bad_input() {
        assert!(Version::parse("banana").is_err());
        assert!(Range::parse(">=banana").is_err());
        assert!(Range::parse("").is_err());
    }
}
