//! The link check of the documentation: every relative link of the Markdown files (`docs/` and
//! the repository's top-level `*.md`) names a file that exists, and every `#anchor` a heading
//! (or an HTML `id`) of its target. External links are not fetched.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use super::markdown::anchor;

/// A link that does not resolve.
#[derive(Debug, PartialEq, Eq)]
pub struct Broken {
    /// The file holding the link.
    pub file: PathBuf,
    /// Its line (1-based).
    pub line: usize,
    /// The link as written.
    pub target: String,
    /// What is wrong.
    pub problem: String,
}

/// The Markdown files checked under `root`: every `*.md` of `docs/` and of the root itself.
pub fn markdown_files(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(root)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// `text` without code: fenced blocks become empty lines (so line numbers stay) and code spans
/// are blanked.
fn without_code(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut fence: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let marker: String = trimmed
            .chars()
            .take_while(|c| *c == '`' || *c == '~')
            .collect();
        if let Some(open) = &fence {
            if trimmed.starts_with(open.as_str()) && trimmed.trim_end() == marker {
                fence = None;
            }
            lines.push(String::new());
            continue;
        }
        if marker.len() >= 3
            && marker
                .chars()
                .all(|c| c == marker.chars().next().unwrap_or('`'))
        {
            fence = Some(marker);
            lines.push(String::new());
            continue;
        }
        lines.push(blank_code_spans(line));
    }
    lines
}

/// `line` with each code span's content replaced by spaces.
fn blank_code_spans(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|c| **c == '`').count();
        // The closing run has exactly the same length.
        let mut j = i + run;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let n = chars[j..].iter().take_while(|c| **c == '`').count();
                if n == run {
                    close = Some(j);
                    break;
                }
                j += n;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => {
                out.extend(std::iter::repeat_n(' ', end + run - i));
                i = end + run;
            }
            None => {
                out.extend(&chars[i..i + run]);
                i += run;
            }
        }
    }
    out
}

/// The link targets of one line: `[text](target)`, `![alt](target)`, `[label]: target` and
/// `href="target"`.
fn targets(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let end = after.find([')', ' ']).unwrap_or(after.len());
        found.push(after[..end].trim_matches(['<', '>']).to_string());
        rest = &after[end..];
    }
    let trimmed = line.trim_start();
    if trimmed.starts_with('[') {
        if let Some((label, target)) = trimmed.split_once("]: ") {
            if !label.contains(']') {
                found.push(target.split_whitespace().next().unwrap_or("").to_string());
            }
        }
    }
    let mut rest = line;
    while let Some(i) = rest.find("href=\"") {
        let after = &rest[i + 6..];
        let end = after.find('"').unwrap_or(after.len());
        found.push(after[..end].to_string());
        rest = &after[end..];
    }
    found
}

/// The anchors of a Markdown text: its headings (a repeated heading gets `-1`, `-2`, …) and the
/// `id`/`name` attributes of its HTML.
pub fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let originals: Vec<&str> = text.lines().collect();
    for (index, line) in without_code(text).iter().enumerate() {
        let trimmed = line.trim_start();
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && trimmed[hashes..].starts_with(' ') {
            // The heading's own text: code spans count, only their backticks go.
            let original = originals
                .get(index)
                .map(|l| l.trim_start()[hashes..].to_string())
                .unwrap_or_default();
            let base = anchor(original.trim().trim_end_matches('#'));
            let count = seen.entry(base.clone()).or_insert(0);
            let id = if *count == 0 {
                base.clone()
            } else {
                format!("{base}-{count}")
            };
            *count += 1;
            out.insert(id);
        }
        for attr in ["id=\"", "name=\""] {
            let mut rest = line.as_str();
            while let Some(i) = rest.find(attr) {
                let after = &rest[i + attr.len()..];
                let end = after.find('"').unwrap_or(after.len());
                out.insert(after[..end].to_string());
                rest = &after[end..];
            }
        }
    }
    out
}

fn is_external(target: &str) -> bool {
    let scheme = target.split(':').next().unwrap_or("");
    target.contains(':')
        && !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '-' || c == '.')
}

/// `base/relative` with `.` and `..` resolved, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The broken links of `files`.
pub fn check(files: &[PathBuf]) -> std::io::Result<Vec<Broken>> {
    let mut texts: BTreeMap<PathBuf, String> = BTreeMap::new();
    let mut read = |path: &Path| -> Option<String> {
        if let Some(text) = texts.get(path) {
            return Some(text.clone());
        }
        let text = std::fs::read_to_string(path).ok()?;
        texts.insert(path.to_path_buf(), text.clone());
        Some(text)
    };
    let mut broken = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file)?;
        let dir = file.parent().unwrap_or(Path::new("."));
        for (number, line) in without_code(&text).iter().enumerate() {
            for target in targets(line) {
                if target.is_empty() || is_external(&target) {
                    continue;
                }
                let (path, fragment) = match target.split_once('#') {
                    Some((path, fragment)) => (path, Some(fragment)),
                    None => (target.as_str(), None),
                };
                let resolved = if path.is_empty() {
                    file.clone()
                } else {
                    normalize(&dir.join(path))
                };
                let mut problem = None;
                if !resolved.exists() {
                    problem = Some(format!("{} does not exist", resolved.display()));
                } else if let Some(fragment) = fragment {
                    let is_markdown = resolved.extension().is_some_and(|e| e == "md");
                    if is_markdown {
                        let target_text = read(&resolved).unwrap_or_default();
                        if !anchors(&target_text).contains(fragment) {
                            problem = Some(format!(
                                "no heading or id `{fragment}` in {}",
                                resolved.display()
                            ));
                        }
                    }
                }
                if let Some(problem) = problem {
                    broken.push(Broken {
                        file: file.clone(),
                        line: number + 1,
                        target: target.clone(),
                        problem,
                    });
                }
            }
        }
    }
    Ok(broken)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_relative_link_and_anchor_of_the_documentation_resolves() {
        let root = super::super::repository_root();
        let files = markdown_files(root).unwrap();
        assert!(
            files.iter().any(|f| f.ends_with("docs/SUMMARY.md")),
            "{files:?}"
        );
        let broken = check(&files).unwrap();
        let report: Vec<String> = broken
            .iter()
            .map(|b| {
                format!(
                    "{}:{}: {} ({})",
                    b.file.strip_prefix(root).unwrap_or(&b.file).display(),
                    b.line,
                    b.target,
                    b.problem
                )
            })
            .collect();
        assert!(report.is_empty(), "broken links:\n{}", report.join("\n"));
    }

    #[test]
    fn links_anchors_and_code_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.md"),
            "# Title\n\n## Same\n\n## Same\n\n<a id=\"custom\"></a>\n\
             [ok](b.md#the-part) [self](#same-1) [id](#custom) [web](https://x.example/#nope)\n\
             [gone](missing.md) [bad](#nowhere) `[code](missing.md)`\n\
             ```\n[fenced](missing.md)\n```\n[draft]()\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("b.md"), "# B\n\n### The `part`\n").unwrap();
        let broken = check(&[dir.path().join("a.md")]).unwrap();
        let targets: Vec<&str> = broken.iter().map(|b| b.target.as_str()).collect();
        assert_eq!(targets, ["missing.md", "#nowhere"]);
        assert_eq!(broken[0].line, 9);
    }
}
