//! OCI references (`registry/repository[:tag][@digest]`) parsed without a regular expression.
//!
//! `oci_client::Reference`'s own parser matches one very large regular expression, whose
//! matching state takes about 5 MiB per thread that ever parsed a reference, kept for the life
//! of the process: with the fetch pool's threads that was the agent's largest single holding at
//! 500 bundles. The grammar is small enough to check by hand; the result is built with
//! `Reference`'s constructors, and the tests compare every case with `Reference`'s parser.

use oci_client::Reference;

/// The tag a reference without tag or digest means.
const DEFAULT_TAG: &str = "latest";
/// Docker Hub: the registry of a reference without one, and the short names it accepts.
const DOCKER_HUB: &str = "docker.io";
const DOCKER_HUB_LEGACY: &str = "index.docker.io";
/// A repository's total length limit (distribution's `NameTotalLengthMax`).
const NAME_MAX: usize = 255;

/// Parses `text` as the distribution reference grammar does (and as `Reference::from_str`
/// would): a name, an optional `:tag`, an optional `@algorithm:hex` digest; a name without a
/// registry is on Docker Hub (`library/` for one component).
pub fn parse(text: &str) -> Result<Reference, String> {
    if text.is_empty() {
        return Err("empty reference".into());
    }
    let (rest, digest) = match text.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (text, None),
    };
    // A tag follows the last ':' after the last '/' (an earlier ':' is a registry's port).
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    let (registry, repository) = split_registry(name)?;
    if let Some(tag) = tag {
        check_tag(tag)?;
    }
    if let Some(digest) = digest {
        check_digest(digest)?;
    }
    if repository.len() > NAME_MAX {
        return Err(format!("repository name longer than {NAME_MAX} characters"));
    }
    Ok(match (tag, digest) {
        (Some(tag), Some(digest)) => {
            Reference::with_tag_and_digest(registry, repository, tag.into(), digest.into())
        }
        (None, Some(digest)) => Reference::with_digest(registry, repository, digest.into()),
        (tag, None) => Reference::with_tag(registry, repository, tag.unwrap_or(DEFAULT_TAG).into()),
    })
}

/// `[domain/]path` into registry and repository, as Docker normalizes names.
fn split_registry(name: &str) -> Result<(String, String), String> {
    let (domain, path) = match name.split_once('/') {
        Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => {
            (Some(first), rest)
        }
        _ => (None, name),
    };
    if let Some(domain) = domain {
        check_domain(domain)?;
    }
    for component in path.split('/') {
        check_path_component(component)?;
    }
    let registry = match domain {
        None | Some(DOCKER_HUB_LEGACY) => DOCKER_HUB,
        Some(domain) => domain,
    };
    let repository = if registry == DOCKER_HUB && !path.contains('/') {
        format!("library/{path}")
    } else {
        path.to_string()
    };
    Ok((registry.to_string(), repository))
}

/// `host[:port]`, each label of letters, digits and inner hyphens.
fn check_domain(domain: &str) -> Result<(), String> {
    let (host, port) = match domain.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (domain, None),
    };
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if !host.split('.').all(label_ok) {
        return Err(format!("invalid registry host {host:?}"));
    }
    if let Some(port) = port {
        if port.is_empty() || !port.chars().all(|c| c.is_ascii_digit()) {
            return Err(format!("invalid registry port {port:?}"));
        }
    }
    Ok(())
}

/// Lower-case letters and digits, separated by one `.`, one or two `_`, or any number of `-`.
fn check_path_component(component: &str) -> Result<(), String> {
    let bad = || format!("invalid repository name component {component:?}");
    let mut parts = Vec::new();
    let mut separator = String::new();
    let mut word = String::new();
    for c in component.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            if !separator.is_empty() {
                let ok = matches!(separator.as_str(), "." | "_" | "__")
                    || separator.chars().all(|s| s == '-');
                if !ok || word.is_empty() {
                    return Err(bad());
                }
                parts.push(std::mem::take(&mut word));
                separator.clear();
            }
            word.push(c);
        } else if matches!(c, '.' | '_' | '-') {
            if word.is_empty() {
                return Err(bad());
            }
            separator.push(c);
        } else {
            return Err(bad());
        }
    }
    if word.is_empty() || !separator.is_empty() {
        return Err(bad());
    }
    Ok(())
}

/// A word character, then up to 127 word characters, dots and hyphens.
fn check_tag(tag: &str) -> Result<(), String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let ok = tag.len() <= 128
        && tag.chars().next().is_some_and(word)
        && tag.chars().all(|c| word(c) || c == '.' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!("invalid tag {tag:?}"))
    }
}

/// `algorithm:hex`, with the hex length of sha256, sha384 or sha512.
fn check_digest(digest: &str) -> Result<(), String> {
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return Err(format!("invalid digest {digest:?}"));
    };
    let length = match algorithm {
        "sha256" => 64,
        "sha384" => 96,
        "sha512" => 128,
        _ => return Err(format!("unsupported digest algorithm {algorithm:?}")),
    };
    if hex.len() != length || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!(
            "invalid {algorithm} digest: want {length} hexadecimal characters"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn parses_as_oci_clients_parser_does() {
        let digest = format!("sha256:{HEX}");
        let cases = [
            "nginx".to_string(),
            "nginx:1.25".into(),
            "library/nginx".into(),
            "docker.io/nginx".into(),
            "index.docker.io/nginx:1".into(),
            "ghcr.io/stefanprodan/podinfo:6.7.0".into(),
            format!("ghcr.io/stefanprodan/podinfo@{digest}"),
            format!("ghcr.io/stefanprodan/podinfo:6.7.0@{digest}"),
            "127.0.0.1:5000/team/app:v1".into(),
            "127.0.0.1:5000/team/app".into(),
            "localhost/app".into(),
            "localhost:5000/a/b/c:latest".into(),
            "my-registry.example.com/a__b/c.d/e-f---g:tag_1.2-x".into(),
            "registry.example.com/Upper/app".into(),
            "registry.example.com/app:".into(),
            "registry.example.com/app:-bad".into(),
            "registry.example.com/app@sha256:abc".into(),
            format!("registry.example.com/app@md5:{HEX}"),
            "registry.example.com//app".into(),
            "registry.example.com/app/".into(),
            "registry.example.com/a...b".into(),
            "registry.example.com:x/app".into(),
            "-bad.example.com/app".into(),
            "app:1:2".into(),
            "a b".into(),
        ];
        for case in &cases {
            let ours = parse(case).map(|r| r.whole());
            let theirs = case.parse::<Reference>().map(|r| r.whole());
            match (&ours, &theirs) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{case}"),
                (Err(_), Err(_)) => {}
                _ => panic!("{case}: ours {ours:?}, oci-client's {theirs:?}"),
            }
        }
    }

    #[test]
    fn upper_case_repositories_are_refused() {
        // oci-client takes `Upper` for a registry host and then for a Docker Hub repository;
        // distribution refuses upper case in any repository component.
        assert!(parse("Upper/app").is_err());
        assert!("Upper/app".parse::<Reference>().is_ok());
        assert!(parse("ghcr.io/Upper/app").is_err());
        // Tags are ASCII word characters, dots and hyphens; oci-client's `\w` is Unicode.
        assert!(parse("ghcr.io/app:é").is_err());
        assert!("ghcr.io/app:é".parse::<Reference>().is_ok());
    }

    mod properties {
        use std::time::{Duration, Instant};

        use proptest::prelude::*;

        use super::super::*;

        /// Pieces of references: separators, hosts, ports, path components, tags, digests and
        /// characters that are never allowed.
        fn piece() -> impl Strategy<Value = String> {
            prop_oneof![
                prop::sample::select(vec![
                    "/",
                    ":",
                    "@",
                    ".",
                    "_",
                    "__",
                    "-",
                    "---",
                    "localhost",
                    "docker.io",
                    "index.docker.io",
                    "127.0.0.1",
                    "5000",
                    "sha256:",
                    "sha512:",
                    "md5:",
                    "library",
                    "A",
                    " ",
                    "é",
                    "\u{0}",
                ])
                .prop_map(str::to_string),
                "[a-z0-9]{1,6}",
                "[0-9a-f]{64}",
                "[A-Za-z0-9_.-]{1,10}",
            ]
        }

        fn config() -> ProptestConfig {
            ProptestConfig {
                cases: std::env::var("PROPTEST_CASES")
                    .ok()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(500),
                max_shrink_iters: 256,
                ..ProptestConfig::default()
            }
        }

        proptest! {
            #![proptest_config(config())]

            /// Any text: an error or a reference, quickly, and the same verdict and result as
            /// oci-client's own parser (the grammar both implement).
            #[test]
            fn references_parse_as_oci_clients_parser_does(
                text in prop_oneof![
                    prop::collection::vec(piece(), 0..12).prop_map(|p| p.concat()),
                    any::<String>(),
                ]
            ) {
                let start = Instant::now();
                let ours = parse(&text).map(|r| r.whole());
                prop_assert!(start.elapsed() < Duration::from_secs(1), "took {:?}", start.elapsed());
                let parsed = text.parse::<Reference>();
                // Where oci-client's parser is laxer than the distribution grammar, refusing is
                // right: it takes an upper-case first component for a registry host and then
                // files it under Docker Hub as a repository name (upper case is never allowed
                // in a repository), its tag pattern's `\w` takes any Unicode letter (Go's is
                // ASCII), and it takes a registry host with `_`, which no DNS name has.
                let lax = parsed.as_ref().is_ok_and(|r| {
                    r.registry().contains('_')
                        || r.repository().chars().any(|c| c.is_ascii_uppercase())
                        || r.tag().is_some_and(|t| !t.is_ascii())
                });
                let theirs = parsed.map(|r| r.whole());
                match (&ours, &theirs) {
                    (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                    (Err(_), Err(_)) => {}
                    (Err(_), Ok(_)) if lax => {}
                    _ => prop_assert!(false, "{:?}: ours {:?}, oci-client's {:?}", text, ours, theirs),
                }
            }

            /// A reference reads back as itself from its whole form.
            #[test]
            fn references_round_trip(
                registry in prop::sample::select(vec!["ghcr.io", "127.0.0.1:5000", "localhost", "registry.example.com:443"]),
                path in prop::collection::vec("[a-z0-9]{1,4}([._-][a-z0-9]{1,4})?", 1..4),
                tag in prop::option::of("[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}"),
                digest in prop::option::of("[0-9a-f]{64}"),
            ) {
                let mut text = format!("{registry}/{}", path.join("/"));
                if let Some(tag) = &tag {
                    text.push(':');
                    text.push_str(tag);
                }
                if let Some(digest) = &digest {
                    text.push_str("@sha256:");
                    text.push_str(digest);
                }
                let parsed = parse(&text).map_err(TestCaseError::fail)?;
                prop_assert_eq!(parsed.registry(), registry);
                prop_assert_eq!(parsed.repository(), path.join("/"));
                prop_assert_eq!(parsed.tag(), tag.as_deref().or(digest.is_none().then_some(DEFAULT_TAG)));
                let again = parse(&parsed.whole()).map_err(TestCaseError::fail)?;
                prop_assert_eq!(again.whole(), parsed.whole());
            }
        }
    }
}
