//! The product speaks of the product: no file of the repository (code, comments, docs,
//! manifests, tests, benches, tools) may speak of how it was made — numbered work sessions,
//! ticket numbers, reports on how far the work got. Sources of other projects are cited by full
//! URL, which this check allows.
//!
//! Files listed in `tools/process-words.allow` are skipped while they still have such lines;
//! an entry whose file has none left fails the check, so the list only shrinks.

use std::path::{Path, PathBuf};

use regex::RegexSet;

/// The allow-list, relative to the repository's root.
const ALLOW_LIST: &str = "tools/process-words.allow";

/// What counts as speaking of the process (matched case-insensitively, per line).
fn patterns() -> Vec<(&'static str, &'static str)> {
    vec![
        // A numbered session, also in the plural, in a range, or in an identifier.
        (r"\bsessions?[ _]?\d+", "a work session"),
        // A numbered issue or ticket, with or without `#`; the plural only with `#`, since
        // "issues" followed by a number is usually the verb.
        (
            r"\b(?:issue|ticket)[ _]?#?\d+|\b(?:issues|tickets) #\d+",
            "an issue number",
        ),
        (r"\bpull request #?\d+|\bPR ?#\d+", "a pull request number"),
        // "#17" in prose: after a space, an opening bracket or punctuation; not `#[derive`,
        // `#!/`, anchors (`#secret-references`) or hex colours with letters.
        (r"(?:^|[\s(\[,;])#\d+\b", "an issue number"),
        (r"\bstatus of the wor[k]\b", "a report on the work"),
        (r"\bclosing not[e]\b", "a report on the work"),
        (r"\bported from\b", "the history of the code"),
        (
            r"\b(?:this|the next|the previous|an earlier|a later|the last) session\b",
            "a work session",
        ),
    ]
}

/// One line that speaks of the process.
#[derive(Debug)]
pub struct Hit {
    /// The file, relative to the root.
    pub file: PathBuf,
    /// The line (1-based).
    pub line: usize,
    /// What it speaks of.
    pub what: &'static str,
    /// The line's text.
    pub text: String,
}

/// The repository's files: git's tracked and untracked-but-not-ignored files when `root` is a
/// git work tree, else every file under it outside build and state directories.
fn files(root: &Path) -> Vec<PathBuf> {
    let listed = std::process::Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(root)
        .output();
    if let Some(output) = listed.ok().filter(|o| o.status.success()) {
        let mut files: Vec<PathBuf> = output
            .stdout
            .split(|b| *b == 0)
            .filter(|name| !name.is_empty())
            .map(|name| PathBuf::from(String::from_utf8_lossy(name).into_owned()))
            .filter(|path| root.join(path).is_file())
            .collect();
        files.sort();
        files.dedup();
        return files;
    }
    let mut files = Vec::new();
    let mut dirs = vec![PathBuf::new()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let relative = dir.join(entry.file_name());
            let name = entry.file_name();
            if matches!(name.to_str(), Some(".git" | "target" | ".pallet")) {
                continue;
            }
            if entry.path().is_dir() {
                dirs.push(relative);
            } else {
                files.push(relative);
            }
        }
    }
    files.sort();
    files
}

/// The lines of `text` that speak of the process.
fn scan_text(set: &RegexSet, whats: &[&'static str], file: &Path, text: &str) -> Vec<Hit> {
    let mut hits = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if let Some(index) = set.matches(line).iter().next() {
            hits.push(Hit {
                file: file.to_path_buf(),
                line: number + 1,
                what: whats[index],
                text: line.trim().to_string(),
            });
        }
    }
    hits
}

fn compiled() -> (RegexSet, Vec<&'static str>) {
    let patterns = patterns();
    let set = RegexSet::new(patterns.iter().map(|(p, _)| format!("(?i){p}")))
        .expect("the patterns compile");
    (set, patterns.iter().map(|(_, what)| *what).collect())
}

/// Every line of the repository under `root` that speaks of the process.
pub fn scan(root: &Path) -> Vec<Hit> {
    let (set, whats) = compiled();
    let mut hits = Vec::new();
    for file in files(root) {
        // Binary files (images, archives) have no prose.
        let Ok(text) = std::fs::read_to_string(root.join(&file)) else {
            continue;
        };
        hits.extend(scan_text(&set, &whats, &file, &text));
    }
    hits
}

/// The allow-listed files (comments and blank lines left out).
fn allowed(root: &Path) -> Vec<PathBuf> {
    std::fs::read_to_string(root.join(ALLOW_LIST))
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(PathBuf::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hits_in(text: &str) -> Vec<&'static str> {
        let (set, whats) = compiled();
        scan_text(&set, &whats, Path::new("x"), text)
            .into_iter()
            .map(|h| h.what)
            .collect()
    }

    #[test]
    fn process_words_are_found_and_ordinary_words_are_not() {
        // Built from parts, so that this file does not speak of the process itself.
        let flagged = [
            ["scale (sess", "ion 19)"].concat(),
            ["Sess", "ions 7-12 found"].concat(),
            ["Many apps (iss", "ue 17)"].concat(),
            ["fixed in iss", "ue ", "#4"].concat(),
            ["recovery after an outage (", "#15 item 9)"].concat(),
            ["## Status of ", "the work"].concat(),
            ["Each ticket's clos", "ing note says"].concat(),
            ["fn sess", "ion_19_figures()"].concat(),
        ];
        for text in &flagged {
            assert_eq!(hits_in(text).len(), 1, "{text:?} is not flagged");
        }
        let ordinary = [
            "#[derive(Debug)]",
            "#!/usr/bin/env bash",
            "see [Secret references](#secret-references)",
            "an issue with the certificate",
            "the agent issues 2 certificates",
            "https://github.com/argoproj/argo-cd/issues/22609",
            "fixtures.sh: runs detached (own session, no stdin)",
            "color: #fff;",
            "format!(\"{:#04x}\", b)",
        ];
        for text in ordinary {
            assert!(hits_in(text).is_empty(), "{text:?} is flagged");
        }
    }

    #[test]
    fn no_file_of_the_repository_speaks_of_how_it_was_made() {
        let root = super::super::repository_root();
        let allowed = allowed(root);
        let hits = scan(root);
        let mut report = Vec::new();
        for hit in hits.iter().filter(|h| !allowed.contains(&h.file)) {
            report.push(format!(
                "{}:{}: {} ({})",
                hit.file.display(),
                hit.line,
                hit.text,
                hit.what
            ));
        }
        for file in &allowed {
            if !hits.iter().any(|h| &h.file == file) {
                report.push(format!(
                    "{}: no such lines any more: remove it from {ALLOW_LIST}",
                    file.display()
                ));
            }
        }
        assert!(
            report.is_empty(),
            "say what the thing is, not how it was made:\n{}",
            report.join("\n")
        );
    }
}
