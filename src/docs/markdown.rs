//! Small Markdown writers shared by the generated pages: tables, cells, heading anchors.

/// The first line of every generated page, after its title: says where the page comes from and
/// how to regenerate it.
pub fn generated_note(source: &str) -> String {
    format!(
        "<!-- Generated from {source} by `{}`; do not edit. -->\n",
        super::GENERATE_COMMAND
    )
}

/// `text` made safe for one table cell: pipes escaped, line breaks joined.
pub fn cell(text: &str) -> String {
    text.trim()
        .replace('|', "\\|")
        .replace("\r\n", " ")
        .replace(['\n', '\r'], " ")
}

/// `text` in a code span (a table cell escapes its pipes, [`cell`]).
pub fn code(text: &str) -> String {
    // A backtick inside needs a longer fence, and a space when it starts or ends the text.
    let fence = if text.contains('`') { "``" } else { "`" };
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// A Markdown table of `rows` under `header`.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!("| {} |\n", header.join(" | "));
    out.push_str(&format!(
        "|{}\n",
        header.iter().map(|_| " --- |").collect::<String>()
    ));
    for row in rows {
        let cells: Vec<String> = row.iter().map(|c| cell(c)).collect();
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    out
}

/// The anchor a heading gets, as mdBook (and GitHub) make it: lower case, letters, digits, `-`
/// and `_` kept, spaces to `-`, everything else dropped. Inline markup is not part of the text.
pub fn anchor(heading: &str) -> String {
    let text = heading.replace(['`', '*'], "");
    text.trim()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_lowercase().collect::<String>())
            } else if c.is_whitespace() {
                Some("-".to_string())
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_follow_the_heading_rules() {
        assert_eq!(anchor("Secret references"), "secret-references");
        assert_eq!(anchor("`pallet agent` flags"), "pallet-agent-flags");
        assert_eq!(anchor("spec.sources[].image"), "specsourcesimage");
        assert_eq!(
            anchor("Health, rollout and rollback"),
            "health-rollout-and-rollback"
        );
    }

    #[test]
    fn cells_keep_tables_intact() {
        assert_eq!(cell("a | b\nc"), "a \\| b c");
        assert_eq!(cell(&code("a|b")), "`a\\|b`");
        assert_eq!(code("`x`"), "`` `x` ``");
        let t = table(&["a", "b"], &[vec!["1".into(), "2|3".into()]]);
        assert_eq!(t, "| a | b |\n| --- | --- |\n| 1 | 2\\|3 |\n");
    }
}
