//! `configMapGenerator` and `secretGenerator`: ConfigMaps and Secrets made from literals, files
//! and env files, with kustomize's key rules, options and generator behaviours.

use base64::Engine as _;
use serde_json::{json, Map, Value};

use super::error::{KustomizeError, KustomizeErrorKind};
use super::kustomization::{GeneratorArgs, GeneratorOptions};
use super::loader::Tree;
use super::resource::{Resource, GENERATOR_BEHAVIOR, NEEDS_HASH_SUFFIX};
use super::target::{Accumulator, Builder, Target};
use crate::Origin;

/// Which object a generator makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GeneratedKind {
    /// A ConfigMap.
    ConfigMap,
    /// A Secret.
    Secret,
}

/// Runs the kustomization's `configMapGenerator` then `secretGenerator` entries, absorbing
/// what they make into the accumulated resources.
pub(crate) fn run_builtin(
    builder: &mut Builder<'_>,
    target: &Target,
    acc: &mut Accumulator,
) -> Result<(), KustomizeError> {
    let k = &target.kustomization;
    let lists = [
        (
            "configMapGenerator",
            GeneratedKind::ConfigMap,
            &k.config_map_generator,
        ),
        (
            "secretGenerator",
            GeneratedKind::Secret,
            &k.secret_generator,
        ),
    ];
    for (field, kind, list) in lists {
        for (i, args) in list.iter().enumerate() {
            let place = |e: KustomizeError| {
                e.in_file(target.file.clone())
                    .at_field(format!("{field}[{i}]"))
            };
            let options =
                GeneratorOptions::merged(args.options.as_ref(), k.generator_options.as_ref());
            let mut resource =
                generate(builder.tree, &target.dir, kind, args, options.as_ref()).map_err(place)?;
            let plugin = if kind == GeneratedKind::ConfigMap {
                "ConfigMapGenerator"
            } else {
                "SecretGenerator"
            };
            if let Some(by) = builder.configured(target, plugin) {
                super::origin::set_if_absent(&mut resource, &by.as_origin());
            }
            let origin = Origin {
                file: target.file.clone(),
                document: 0,
                line: 1,
            };
            acc.resources
                .absorb(resource, origin, &builder.schema)
                .map_err(place)?;
        }
    }
    super::helm_charts::run(builder, target, acc)
}

/// Makes one ConfigMap or Secret from a generator entry, its files read from `dir`.
pub(crate) fn generate(
    tree: &Tree,
    dir: &str,
    kind: GeneratedKind,
    args: &GeneratorArgs,
    options: Option<&GeneratorOptions>,
) -> Result<Resource, KustomizeError> {
    if args.name.is_empty() {
        return Err(KustomizeError::invalid(format!(
            "a {} must have a name",
            if kind == GeneratedKind::ConfigMap {
                "configmap"
            } else {
                "secret"
            }
        )));
    }
    let pairs = load_pairs(tree, dir, args)?;
    let mut metadata = Map::new();
    metadata.insert("name".into(), Value::String(args.name.clone()));
    if !args.namespace.is_empty() {
        metadata.insert("namespace".into(), Value::String(args.namespace.clone()));
    }
    let mut body = Map::new();
    body.insert("apiVersion".into(), json!("v1"));
    body.insert(
        "kind".into(),
        json!(if kind == GeneratedKind::ConfigMap {
            "ConfigMap"
        } else {
            "Secret"
        }),
    );
    body.insert("metadata".into(), Value::Object(metadata));
    match kind {
        GeneratedKind::ConfigMap => {
            let mut data = Map::new();
            let mut binary = Map::new();
            for (key, value) in pairs {
                match String::from_utf8(value) {
                    Ok(text) => data.insert(key, Value::String(text)),
                    Err(e) => {
                        binary.insert(key, Value::String(encode_base64_wrapped(e.as_bytes())))
                    }
                };
            }
            if !data.is_empty() {
                body.insert("data".into(), Value::Object(data));
            }
            if !binary.is_empty() {
                body.insert("binaryData".into(), Value::Object(binary));
            }
        }
        GeneratedKind::Secret => {
            let secret_type = if args.secret_type.is_empty() {
                "Opaque"
            } else {
                &args.secret_type
            };
            body.insert("type".into(), Value::String(secret_type.to_owned()));
            let data: Map<String, Value> = pairs
                .into_iter()
                .map(|(k, v)| (k, Value::String(encode_base64_wrapped(&v))))
                .collect();
            body.insert("data".into(), Value::Object(data));
        }
    }
    let mut resource = Resource::new(body);
    if let Some(options) = options {
        for (field, map) in [
            ("labels", &options.labels),
            ("annotations", &options.annotations),
        ] {
            if let Some(map) = map.as_ref().filter(|m| !m.is_empty()) {
                let values = map
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect();
                super::resmap::metadata_mut(&mut resource)
                    .insert(field.into(), Value::Object(values));
            }
        }
        if options.immutable {
            resource.body.insert("immutable".into(), Value::Bool(true));
        }
    }
    if !options.is_some_and(|o| o.disable_name_suffix_hash) {
        resource.set_annotation(NEEDS_HASH_SUFFIX, "enabled");
    }
    let behavior = match args.behavior.as_str() {
        "create" | "merge" | "replace" => args.behavior.as_str(),
        _ => "unspecified",
    };
    resource.set_annotation(GENERATOR_BEHAVIOR, behavior);
    Ok(resource)
}

/// Key/value pairs from env files, then literals, then files; a key may appear once.
fn load_pairs(
    tree: &Tree,
    dir: &str,
    args: &GeneratorArgs,
) -> Result<Vec<(String, Vec<u8>)>, KustomizeError> {
    let mut pairs: Vec<(String, Vec<u8>)> = Vec::new();
    for env in &args.envs {
        let (_, bytes) = tree.read_restricted(dir, env)?;
        pairs.extend(env_file_pairs(&bytes)?);
    }
    for literal in &args.literals {
        let (key, value) = parse_literal(literal)?;
        pairs.push((key, value.into_bytes()));
    }
    for source in &args.files {
        let (key, path) = parse_file_source(source)?;
        let (_, bytes) = tree.read_restricted(dir, &path)?;
        pairs.push((key, bytes));
    }
    let mut seen = std::collections::HashSet::new();
    for (key, _) in &pairs {
        check_key(key)?;
        if !seen.insert(key.as_str()) {
            return Err(KustomizeError::new(
                KustomizeErrorKind::Conflict,
                format!("configmap {} illegally repeats the key `{key}`", args.name),
            ));
        }
    }
    Ok(pairs)
}

/// A literal source `key=value` (one pair of matching quotes around the value removed).
fn parse_literal(source: &str) -> Result<(String, String), KustomizeError> {
    let invalid = || {
        KustomizeError::invalid(format!(
            "invalid literal source {source}, expected key=value"
        ))
    };
    let (key, value) = source.split_once('=').ok_or_else(invalid)?;
    if key.is_empty() {
        return Err(invalid());
    }
    let bytes = value.as_bytes();
    let unquoted = if bytes.len() >= 2
        && bytes[0] == bytes[bytes.len() - 1]
        && (bytes[0] == b'"' || bytes[0] == b'\'')
    {
        &value[1..value.len() - 1]
    } else {
        value
    };
    Ok((key.to_owned(), unquoted.to_owned()))
}

/// A file source `path` (key: the file's base name) or `key=path`.
fn parse_file_source(source: &str) -> Result<(String, String), KustomizeError> {
    match source.matches('=').count() {
        0 => {
            let key = source.rsplit('/').find(|s| !s.is_empty()).unwrap_or(source);
            Ok((key.to_owned(), source.to_owned()))
        }
        1 if source.starts_with('=') => Err(KustomizeError::invalid(format!(
            "missing key name for file path {:?} in source {source:?}",
            &source[1..]
        ))),
        1 if source.ends_with('=') => Err(KustomizeError::invalid(format!(
            "missing file path for key name {:?} in source {source:?}",
            &source[..source.len() - 1]
        ))),
        1 => {
            let (key, path) = source.split_once('=').unwrap_or((source, ""));
            Ok((key.to_owned(), path.to_owned()))
        }
        _ => Err(KustomizeError::invalid(format!(
            "source {source:?} key name or file path contains '='"
        ))),
    }
}

/// The pairs of an env file: `KEY=value` lines (the value kept as is), comments and blank
/// lines skipped, a line with no `=` giving an empty value.
fn env_file_pairs(bytes: &[u8]) -> Result<Vec<(String, Vec<u8>)>, KustomizeError> {
    let mut pairs = Vec::new();
    let text = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    for (number, raw) in text.split(|b| *b == b'\n').enumerate() {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let line = std::str::from_utf8(raw).map_err(|_| {
            KustomizeError::invalid(format!("line {number} has invalid utf8 bytes"))
        })?;
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line.split_once('=').unwrap_or((line, ""));
        if !is_env_var_name(key) {
            return Err(KustomizeError::invalid(format!(
                "{key:?} is not a valid environment variable name: a valid environment variable \
                 name must consist of alphabetic characters, digits, '_', '-', or '.', and must \
                 not start with a digit"
            )));
        }
        pairs.push((key.to_owned(), value.as_bytes().to_vec()));
    }
    Ok(pairs)
}

fn is_env_var_name(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || matches!(c, '-' | '_' | '.'))
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn check_key(key: &str) -> Result<(), KustomizeError> {
    let valid = !key.is_empty()
        && key.len() <= 253
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && key != "."
        && key != ".."
        && !key.starts_with("..");
    if valid {
        Ok(())
    } else {
        Err(KustomizeError::invalid(format!(
            "{key:?} is not a valid key name for a ConfigMap or Secret: a valid key must consist \
             of alphanumeric characters, '-', '_' or '.'"
        )))
    }
}

/// Base64 as kustomize writes Secret data and binary ConfigMap data: lines of 70 characters
/// each ending in a newline when the text is longer than one line.
pub(crate) fn encode_base64_wrapped(bytes: &[u8]) -> String {
    const LINE: usize = 70;
    let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
    let lines = encoded.len() / LINE + 1;
    if lines <= 1 {
        return encoded;
    }
    let mut out = String::with_capacity(encoded.len() + lines);
    for chunk in encoded.as_bytes().chunks(LINE) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_as_kustomize_parses_them() {
        assert_eq!(
            parse_literal("a=\"b c\"").unwrap(),
            ("a".into(), "b c".into())
        );
        assert_eq!(parse_literal("a=b=c").unwrap(), ("a".into(), "b=c".into()));
        assert!(parse_literal("=b").is_err());
        assert_eq!(
            parse_file_source("dir/app.conf").unwrap(),
            ("app.conf".into(), "dir/app.conf".into())
        );
        assert_eq!(
            parse_file_source("k=dir/app.conf").unwrap(),
            ("k".into(), "dir/app.conf".into())
        );
        assert!(parse_file_source("a=b=c").is_err());
        let pairs = env_file_pairs(b"# c\n\nA=1\r\n B= two \nEMPTY\n").unwrap();
        assert_eq!(
            pairs,
            [
                ("A".into(), b"1".to_vec()),
                ("B".into(), b" two ".to_vec()),
                ("EMPTY".into(), vec![])
            ]
        );
        assert!(env_file_pairs(b"1A=x\n").is_err());
    }

    #[test]
    fn long_base64_wraps_at_seventy_columns() {
        assert_eq!(encode_base64_wrapped(b"abc"), "YWJj");
        let long = encode_base64_wrapped(&[b'x'; 60]);
        let lines: Vec<&str> = long.split_terminator('\n').collect();
        assert_eq!(lines[0].len(), 70);
        assert!(long.ends_with('\n'));
        // 52 bytes encode to 72 characters: two lines.
        assert_eq!(encode_base64_wrapped(&[0u8; 51]).lines().count(), 1);
    }
}
