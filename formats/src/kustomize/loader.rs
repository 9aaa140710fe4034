//! Reading files of a kustomization from inside the bundle tree, with kustomize's default load
//! restriction: a file a kustomization names must be in or below its own directory, while a
//! directory named in `resources` or `components` may be anywhere in the tree. Nothing outside
//! the tree is read, whether by `..` or through a symlink, and nothing is fetched.

use std::path::{Component, Path, PathBuf};

use super::error::{KustomizeError, KustomizeErrorKind};

/// The bundle tree files are read from.
#[derive(Debug, Clone)]
pub(crate) struct Tree {
    /// The tree's root, symlinks resolved; `None` for no tree (nothing can be read).
    root: Option<PathBuf>,
}

/// What a name resolves to inside the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    /// A regular file at this tree-relative path.
    File(String),
    /// A directory at this tree-relative path (`""` for the tree's root).
    Dir(String),
    /// Nothing there.
    Missing(String),
}

impl Tree {
    /// Opens the tree at `root`.
    pub(crate) fn new(root: &Path) -> Result<Self, KustomizeError> {
        let root = root.canonicalize().map_err(|e| {
            KustomizeError::new(
                KustomizeErrorKind::MissingFile,
                format!("cannot open the bundle tree {}: {e}", root.display()),
            )
        })?;
        Ok(Tree { root: Some(root) })
    }

    /// No tree: every name is missing.
    pub(crate) fn empty() -> Self {
        Tree { root: None }
    }

    /// The absolute path of a tree-relative path.
    pub(crate) fn absolute(&self, relative: &str) -> PathBuf {
        let root = self.root.clone().unwrap_or_default();
        if relative.is_empty() {
            root
        } else {
            root.join(relative)
        }
    }

    /// Resolves `name` (as written in a kustomization in the tree-relative directory `dir`)
    /// to what it names in the tree, following symlinks. Leaving the tree is an error.
    pub(crate) fn resolve(&self, dir: &str, name: &str) -> Result<Entry, KustomizeError> {
        if Path::new(name).is_absolute() {
            return Err(KustomizeError::new(
                KustomizeErrorKind::LoadRestricted,
                format!("'{name}' is an absolute path; only paths inside the bundle are read"),
            ));
        }
        let lexical = join_lexically(dir, name).ok_or_else(|| outside_tree(name))?;
        let Some(root) = &self.root else {
            return Ok(Entry::Missing(lexical));
        };
        let absolute = self.absolute(&lexical);
        let real = match absolute.canonicalize() {
            Ok(real) => real,
            Err(_) => {
                // A dangling link, or nothing at all: say which when the link leaves the tree.
                if std::fs::symlink_metadata(&absolute).is_ok() {
                    return Err(KustomizeError::new(
                        KustomizeErrorKind::MissingFile,
                        format!("'{name}' is a link to nothing"),
                    ));
                }
                return Ok(Entry::Missing(lexical));
            }
        };
        let relative = real.strip_prefix(root).map_err(|_| outside_tree(name))?;
        let relative = to_slash(relative);
        if real.is_dir() {
            Ok(Entry::Dir(relative))
        } else {
            Ok(Entry::File(relative))
        }
    }

    /// Reads the file `name` a kustomization in `dir` names, which must be in or below `dir`
    /// (kustomize's root-only load restriction). Returns its tree-relative path and bytes.
    pub(crate) fn read_restricted(
        &self,
        dir: &str,
        name: &str,
    ) -> Result<(String, Vec<u8>), KustomizeError> {
        match self.resolve(dir, name)? {
            Entry::File(relative) => {
                if !is_within(dir, &relative) {
                    return Err(KustomizeError::new(
                        KustomizeErrorKind::LoadRestricted,
                        format!(
                            "security; file '{name}' is not in or below the kustomization's \
                             directory '{}'",
                            display_dir(dir)
                        ),
                    ));
                }
                let bytes = std::fs::read(self.absolute(&relative)).map_err(|e| {
                    KustomizeError::new(
                        KustomizeErrorKind::MissingFile,
                        format!("cannot read '{name}': {e}"),
                    )
                })?;
                Ok((relative, bytes))
            }
            Entry::Dir(_) => Err(KustomizeError::invalid(format!(
                "'{name}' is a directory, a file was expected"
            ))),
            Entry::Missing(_) => Err(KustomizeError::new(
                KustomizeErrorKind::MissingFile,
                format!("file '{name}' does not exist"),
            )),
        }
    }

    /// [`Tree::read_restricted`] as UTF-8 text.
    pub(crate) fn read_text_restricted(
        &self,
        dir: &str,
        name: &str,
    ) -> Result<(String, String), KustomizeError> {
        let (relative, bytes) = self.read_restricted(dir, name)?;
        let text = String::from_utf8(bytes)
            .map_err(|_| KustomizeError::invalid(format!("file '{name}' is not UTF-8 text")))?;
        Ok((relative, text))
    }
}

fn outside_tree(name: &str) -> KustomizeError {
    KustomizeError::new(
        KustomizeErrorKind::LoadRestricted,
        format!("'{name}' leads outside the bundle; only files inside it are read"),
    )
}

/// `dir` shown in messages (`.` for the tree's root).
pub(crate) fn display_dir(dir: &str) -> &str {
    if dir.is_empty() {
        "."
    } else {
        dir
    }
}

/// Joins `name` to the tree-relative `dir` and folds `.` and `..`; `None` when the result
/// climbs above the tree's root.
pub(crate) fn join_lexically(dir: &str, name: &str) -> Option<String> {
    let mut parts: Vec<String> = dir
        .split('/')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect();
    for component in Path::new(name).components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.join("/"))
}

/// Whether the tree-relative `path` is `dir` or below it.
pub(crate) fn is_within(dir: &str, path: &str) -> bool {
    dir.is_empty()
        || path == dir
        || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}

fn to_slash(path: &Path) -> String {
    path.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// Whether a `resources`/`components` entry names something remote (a URL or a repository
/// spec such as `github.com/org/repo/path?ref=v1`), which is never fetched.
pub(crate) fn looks_remote(name: &str) -> bool {
    const SCHEMES: [&str; 8] = [
        "http://", "https://", "git::", "git@", "ssh://", "file://", "gh:", "oci://",
    ];
    const HOSTS: [&str; 4] = ["github.com", "gitlab.com", "bitbucket.org", "dev.azure.com"];
    SCHEMES.iter().any(|s| name.starts_with(s))
        || HOSTS.iter().any(|h| name.starts_with(h))
        || name.contains("?ref=")
        || name.contains("?version=")
        || name.contains(".git//")
        || name.ends_with(".git")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_and_restricts_paths_as_kustomize_does() {
        assert_eq!(
            join_lexically("a/b", "../c/d.yaml").as_deref(),
            Some("a/c/d.yaml")
        );
        assert_eq!(join_lexically("", "./x"), Some("x".to_owned()));
        assert_eq!(join_lexically("a", "../../x"), None);
        assert!(is_within("a", "a/b.yaml"));
        assert!(!is_within("a", "ab/b.yaml"));
        assert!(is_within("", "anything"));
        assert!(looks_remote("github.com/org/repo/deploy?ref=v1"));
        assert!(looks_remote("https://example.com/x.yaml"));
        assert!(!looks_remote("../base"));
    }
}
