//! Every condition reason the code can write is in `crate::api::reasons::REASONS`, and every
//! reason listed there is one the code writes. The source is scanned for the places reasons
//! come from: the error enums' `category()` match arms, `reason:`/`category:` fields set to a
//! literal, `REASON_*`/`*_CATEGORY` constants, the status writer's `set(types::X, bool,
//! "Reason", …)`, `let reason = if …` choices and the processors' `failed("Reason", …)`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use regex::Regex;

use crate::api::reasons::REASONS;

/// Categories that never reach a condition: the render sandbox's child asks the agent to answer
/// a chart's `lookup` calls with it, and the agent renders again with the answers.
const INTERNAL: &[&str] = &["LookupsNeeded"];

/// A CamelCase word in quotes.
const REASON: &str = r#""([A-Z][A-Za-z0-9]+)""#;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            // `src/docs` holds this scan and its examples; `src/cli` writes no condition (its
            // `failed("…")` names the checks of `pallet check`).
            if path
                .file_name()
                .is_some_and(|n| n != "tests" && n != "docs" && n != "cli")
            {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

/// The text of a file without its test module (by convention at the end).
fn without_tests(text: &str) -> &str {
    let test_module = Regex::new(r"#\[cfg\(test\)\]\s*(?:pub\s+)?mod\s").unwrap();
    match test_module.find(text) {
        Some(m) => &text[..m.start()],
        None => text,
    }
}

/// The text of the block opened by the first `{` at or after `from`.
fn block(text: &str, from: usize) -> &str {
    let Some(open) = text[from..].find('{').map(|i| from + i) else {
        return "";
    };
    let mut depth = 0usize;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return &text[open..open + i];
                }
            }
            _ => {}
        }
    }
    &text[open..]
}

/// The reasons written in `text`.
fn reasons_in(text: &str) -> Vec<String> {
    let quoted = Regex::new(REASON).unwrap();
    let direct = [
        format!(r"\b(?:reason|category)\s*:\s*{REASON}"),
        format!(
            r"\bconst\s+[A-Z0-9_]*(?:REASON|CATEGORY)[A-Z0-9_]*\s*:\s*&(?:'static\s+)?str\s*=\s*{REASON}"
        ),
        format!(r"\bset\(\s*types::[A-Z_]+,\s*(?:true|false),\s*{REASON}"),
        format!(r"\bfailed\(\s*{REASON}"),
    ];
    let mut found = Vec::new();
    for pattern in direct {
        let re = Regex::new(&pattern).unwrap();
        found.extend(re.captures_iter(text).map(|c| c[1].to_string()));
    }
    let category = Regex::new(r"\bfn category\(").unwrap();
    for m in category.find_iter(text) {
        let body = block(text, m.end());
        found.extend(quoted.captures_iter(body).map(|c| c[1].to_string()));
    }
    let choice = Regex::new(r"(?s)\blet\s+\w*reason\w*\s*=\s*if\b.*?;").unwrap();
    for m in choice.find_iter(text) {
        found.extend(quoted.captures_iter(m.as_str()).map(|c| c[1].to_string()));
    }
    found
}

/// Every reason the code writes, with the files that write it.
fn written_reasons(root: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("formats/src"), &mut files);
    let mut written: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for reason in reasons_in(without_tests(&text)) {
            let relative = file.strip_prefix(root).unwrap_or(&file).to_path_buf();
            written.entry(reason).or_default().push(relative);
        }
    }
    written
}

#[test]
fn the_scan_finds_each_kind_of_place() {
    let text = r#"
        pub fn category(&self) -> &'static str {
            match self { Self::A => "AlphaFailed", Self::B { reason, .. } => reason }
        }
        let e = Error::Secret { reason: "SecretGone", message };
        pub const REASON_HOOK: &str = "HookGone";
        set(types::READY, false, "NotReady", message);
        let reason = if failed { "Broken" } else { "Waiting" };
        .map_err(|e| failed("SubstitutionBroken", e.to_string()))
        let kind = "ConfigMap";
        #[cfg(test)]
        mod tests { fn t() { let e = X { reason: "OnlyInTests" }; } }
    "#;
    let mut found = reasons_in(without_tests(text));
    found.sort();
    assert_eq!(
        found,
        [
            "AlphaFailed",
            "Broken",
            "HookGone",
            "NotReady",
            "SecretGone",
            "SubstitutionBroken",
            "Waiting"
        ]
    );
}

#[test]
fn every_reason_the_code_writes_is_documented_and_every_documented_one_is_written() {
    let written = written_reasons(super::repository_root());
    let undocumented: Vec<String> = written
        .iter()
        .filter(|(reason, _)| !INTERNAL.contains(&reason.as_str()))
        .filter(|(reason, _)| REASONS.iter().all(|r| r.name != reason.as_str()))
        .map(|(reason, files)| format!("{reason} (written in {files:?})"))
        .collect();
    assert!(
        undocumented.is_empty(),
        "condition reasons missing from src/api/reasons.rs (add each with what it means and \
         what to do, then regenerate the pages: `{}`):\n{}",
        super::GENERATE_COMMAND,
        undocumented.join("\n")
    );
    let unwritten: Vec<&str> = REASONS
        .iter()
        .map(|r| r.name)
        .filter(|name| !written.contains_key(*name))
        .collect();
    assert!(
        unwritten.is_empty(),
        "src/api/reasons.rs lists reasons the code no longer writes: {unwritten:?}"
    );
}
