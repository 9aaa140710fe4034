//! Go's `path` package as Sprig exposes it: `base`, `dir`, `ext`, `clean`, `isAbs`.

use super::*;

pub(super) const FUNCS: &[(&str, F)] = &[
    ("base", |a| Ok(Value::from(go_path_base(&s(&a[0]))))),
    ("dir", |a| Ok(Value::from(go_path_dir(&s(&a[0]))))),
    ("ext", |a| {
        let p = s(&a[0]);
        let ext = p
            .rfind(['.', '/'])
            .filter(|i| p.as_bytes()[*i] == b'.')
            .map(|i| p[i..].to_string())
            .unwrap_or_default();
        Ok(Value::from(ext))
    }),
    ("clean", |a| Ok(Value::from(go_path_clean(&s(&a[0]))))),
    ("isAbs", |a| Ok(Value::from(s(&a[0]).starts_with('/')))),
];

/// Go's `path.Clean`.
pub(super) fn go_path_clean(p: &str) -> String {
    if p.is_empty() {
        return ".".into();
    }
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            s => parts.push(s),
        }
    }
    let body = parts.join("/");
    match (rooted, body.is_empty()) {
        (true, _) => format!("/{body}"),
        (false, true) => ".".into(),
        (false, false) => body,
    }
}

/// Go's `path.Base`.
pub(super) fn go_path_base(p: &str) -> String {
    if p.is_empty() {
        return ".".into();
    }
    let t = p.trim_end_matches('/');
    if t.is_empty() {
        return "/".into();
    }
    t.rsplit('/').next().unwrap_or(t).to_string()
}

/// Go's `path.Dir`.
pub(super) fn go_path_dir(p: &str) -> String {
    let dir = match p.rfind('/') {
        Some(i) => &p[..=i],
        None => "",
    };
    go_path_clean(dir)
}
