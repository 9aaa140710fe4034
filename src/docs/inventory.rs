//! The inventory of untrusted input in `docs/security.md` is complete: every field of the
//! CRD's schema under `spec` has an entry, and so does every reader of [`crate::bounded`].
//! An entry is a field path or reader name in backquotes anywhere in the inventory's section;
//! `` `a.b.*` `` covers `a.b` and every field under it.

use std::collections::BTreeSet;

use regex::Regex;

use super::repository_root;
use crate::bounded::Reader;

/// The section of `docs/security.md` that holds the inventory.
const SECTION: &str = "## Inventory of untrusted input";

/// The inventory's text: from its heading to the next section of the same level.
fn inventory() -> String {
    let page = std::fs::read_to_string(repository_root().join("docs/security.md"))
        .expect("docs/security.md");
    let start = page
        .find(SECTION)
        .unwrap_or_else(|| panic!("docs/security.md has no section {SECTION:?}"));
    let rest = &page[start + SECTION.len()..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    rest[..end].to_string()
}

/// The entries (backquoted words) of `text`.
fn entries(text: &str) -> BTreeSet<String> {
    let code = Regex::new(r"`([^`\s]+)`").unwrap();
    code.captures_iter(text).map(|c| c[1].to_string()).collect()
}

/// Whether `field` has an entry in `entries`, itself or under a `prefix.*` entry.
fn covered(field: &str, entries: &BTreeSet<String>) -> bool {
    entries.contains(field)
        || entries.iter().any(|entry| {
            entry.strip_suffix(".*").is_some_and(|prefix| {
                field == prefix
                    || field
                        .strip_prefix(prefix)
                        .is_some_and(|rest| rest.starts_with('.') || rest.starts_with("[]"))
            })
        })
}

/// Every field path under `spec`, as the API reference names them (`spec.sources[].kind`).
fn spec_fields() -> Vec<String> {
    let (spec, _) = super::api::sections().expect("the CRD's schema");
    spec.iter()
        .flat_map(|section| {
            section
                .fields
                .iter()
                .map(move |field| format!("{}.{}", section.path, field.name))
        })
        .collect()
}

#[test]
fn every_spec_field_has_an_entry() {
    let entries = entries(&inventory());
    let fields = spec_fields();
    assert!(fields.len() > 100, "{} fields", fields.len());
    let missing: Vec<&String> = fields.iter().filter(|f| !covered(f, &entries)).collect();
    assert!(
        missing.is_empty(),
        "docs/security.md's inventory ({SECTION}) has no entry for these fields: say where each \
         is read or evaluated and its bound: {missing:#?}"
    );
}

#[test]
fn every_reader_of_untrusted_bytes_has_an_entry() {
    let entries = entries(&inventory());
    let missing: Vec<&str> = Reader::ALL
        .iter()
        .map(|r| r.name())
        .filter(|name| !entries.contains(*name))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/security.md's inventory ({SECTION}) has no entry for these readers of \
         pallet::bounded: say what each reads, where, and its bound: {missing:?}"
    );
}

#[test]
fn prefixes_cover_the_fields_under_them() {
    let entries: BTreeSet<String> = ["spec.a.*".to_string(), "spec.b".to_string()].into();
    assert!(covered("spec.a", &entries));
    assert!(covered("spec.a.x", &entries));
    assert!(covered("spec.a[].y", &entries));
    assert!(!covered("spec.ab", &entries));
    assert!(covered("spec.b", &entries));
    assert!(!covered("spec.b.c", &entries));
}
