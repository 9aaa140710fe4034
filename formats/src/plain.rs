//! The `plain` format: a tree of Kubernetes manifests.
//!
//! Every `.yaml`, `.yml` and `.json` file under the tree is read, recursively, in byte order of the
//! relative path, so the output order does not depend on the file system. rukpak's plain layout (the
//! manifests under `manifests/`) is just a tree whose files all sit in one directory, so both it and a
//! bare directory work the same way. Hidden files and directories (name starting with `.`) are skipped:
//! they are VCS or tooling metadata, not manifests. Symlinked directories are not entered.
//!
//! Each object needs apiVersion, kind and metadata.name. Two objects with the same group, kind,
//! namespace and name are an error naming both places. Namespaced objects without a namespace get the
//! install namespace; the scope rule is [`crate::scope`].

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::error::RenderError;
use crate::object::{parse_manifests, Object, ObjectKey};
use crate::scope::{Scope, ScopeTable};
use crate::{RenderConfig, Rendered, RenderedObject};

/// Renders a plain manifest tree.
pub fn render_plain(tree: &Path, config: &RenderConfig) -> Result<Rendered, RenderError> {
    let mut objects = Vec::new();
    for (relative, path) in manifest_files(tree)? {
        let text = read_text(&path, &relative)?;
        objects.extend(parse_manifests(&relative, &text)?);
    }
    finish(objects, &config.install_namespace)
}

/// Checks duplicates, decides scopes and defaults namespaces. Shared with formats whose output is a list
/// of objects that follow the plain rules.
pub fn finish(objects: Vec<Object>, install_namespace: &str) -> Result<Rendered, RenderError> {
    let scopes = ScopeTable::from_objects(&objects);
    let mut rendered = Vec::with_capacity(objects.len());
    let mut seen: HashMap<ObjectKey, usize> = HashMap::with_capacity(objects.len());
    for mut object in objects {
        let scope = scopes.scope(object.group(), object.kind());
        if scope == Scope::Namespaced
            && object.namespace().is_none()
            && !install_namespace.is_empty()
        {
            object.set_namespace(install_namespace);
        }
        let key = object.key();
        if let Some(&first) = seen.get(&key) {
            let first: &RenderedObject = &rendered[first];
            return Err(RenderError::DuplicateObject {
                object: key.to_string(),
                first: Box::new(first.object.origin().location()),
                second: Box::new(object.origin().location()),
            });
        }
        seen.insert(key, rendered.len());
        rendered.push(RenderedObject { object, scope });
    }
    Ok(Rendered {
        objects: rendered,
        install_namespace: install_namespace.to_owned(),
        ..Rendered::default()
    })
}

/// Manifest files under `root`: (relative path with `/` separators, full path), sorted by relative path.
pub(crate) fn manifest_files(root: &Path) -> Result<Vec<(String, PathBuf)>, RenderError> {
    let mut files = Vec::new();
    let mut pending = vec![(String::new(), root.to_path_buf())];
    while let Some((prefix, dir)) = pending.pop() {
        let entries = fs::read_dir(&dir).map_err(|source| io_error(&dir, &prefix, source))?;
        for entry in entries {
            let entry = entry.map_err(|source| io_error(&dir, &prefix, source))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let relative = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}/{name}")
            };
            let file_type = entry
                .file_type()
                .map_err(|source| io_error(&entry.path(), &relative, source))?;
            if file_type.is_dir() {
                pending.push((relative, entry.path()));
            } else if is_manifest_name(&name) {
                // A symlinked file is read through its link (an unpacked source has none; a local tree
                // that links a manifest means it). Symlinked directories are not entered: a link to
                // an ancestor would never end.
                let is_file = file_type.is_file()
                    || (file_type.is_symlink()
                        && fs::metadata(entry.path()).is_ok_and(|metadata| metadata.is_file()));
                if is_file {
                    files.push((relative, entry.path()));
                }
            }
        }
    }
    files.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    Ok(files)
}

fn is_manifest_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.ends_with(".yaml") || lower.ends_with(".yml") || lower.ends_with(".json")
}

pub(crate) fn read_text(path: &Path, relative: &str) -> Result<String, RenderError> {
    let bytes = fs::read(path).map_err(|source| RenderError::Io {
        path: relative.to_owned(),
        source,
    })?;
    String::from_utf8(bytes).map_err(|error| RenderError::InvalidYaml {
        at: crate::error::SourceLocation::file(relative),
        message: format!("not UTF-8 text: {error}"),
    })
}

fn io_error(path: &Path, relative: &str, source: std::io::Error) -> RenderError {
    let path = if relative.is_empty() {
        path.display().to_string()
    } else {
        relative.to_owned()
    };
    RenderError::Io { path, source }
}
