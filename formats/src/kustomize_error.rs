//! The kustomize engine's error: what kustomize would have refused, and where (the
//! kustomization file and the field), so that a condition can name both. Apart from the engine
//! ([`crate::kustomize`], which re-exports it as `kustomize::error`), so that the renderers' shared
//! [`crate::RenderError`] can hold it without depending on the engine.

use std::fmt;

/// What kind of problem a kustomization has; the agent turns it into a condition reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KustomizeErrorKind {
    /// The kustomization (or a file it names) is malformed or breaks one of kustomize's rules.
    Invalid,
    /// A file or directory the kustomization names does not exist in the tree.
    MissingFile,
    /// A path leaves the kustomization root, or the bundle tree (kustomize's load restriction).
    LoadRestricted,
    /// A resource, base, component or chart is a remote URL: nothing is fetched during a render.
    RemoteRefused,
    /// A field kustomize has but this engine refuses (exec or container plugins, ...).
    Unsupported,
    /// Two resources end up with the same identity, or a merge or replace finds no target.
    Conflict,
    /// A patch, replacement or var selects nothing, or something ambiguous.
    NoMatch,
    /// Kustomizations include each other in a cycle.
    Cycle,
}

impl KustomizeErrorKind {
    /// A short category for condition reasons and metric labels.
    pub fn category(self) -> &'static str {
        match self {
            Self::Invalid => "KustomizeInvalid",
            Self::MissingFile => "KustomizeMissingFile",
            Self::LoadRestricted => "KustomizeLoadRestricted",
            Self::RemoteRefused => "RemoteResourceRefused",
            Self::Unsupported => "KustomizeUnsupported",
            Self::Conflict => "KustomizeConflict",
            Self::NoMatch => "KustomizeNoMatch",
            Self::Cycle => "KustomizeCycle",
        }
    }
}

/// An error of the kustomize engine, naming the kustomization file (relative to the bundle
/// root) and the field it came from where known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KustomizeError {
    /// What kind of problem.
    pub kind: KustomizeErrorKind,
    /// The kustomization file, relative to the bundle root (`overlays/prod/kustomization.yaml`).
    pub file: Option<String>,
    /// The field of that file (`patches[2]`, `configMapGenerator[0].envs`).
    pub field: Option<String>,
    /// What went wrong.
    pub message: String,
}

impl KustomizeError {
    /// An error of `kind` saying `message`, not yet placed in a file.
    pub fn new(kind: KustomizeErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            file: None,
            field: None,
            message: message.into(),
        }
    }

    /// [`KustomizeErrorKind::Invalid`] with `message`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(KustomizeErrorKind::Invalid, message)
    }

    /// Places the error in `file` (kept when already placed: the innermost file wins).
    pub fn in_file(mut self, file: impl Into<String>) -> Self {
        if self.file.is_none() {
            self.file = Some(file.into());
        }
        self
    }

    /// Names the field (kept when already named: the innermost field wins).
    pub fn at_field(mut self, field: impl Into<String>) -> Self {
        if self.field.is_none() {
            self.field = Some(field.into());
        }
        self
    }
}

impl fmt::Display for KustomizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, &self.field) {
            (Some(file), Some(field)) => write!(f, "{file}: {field}: {}", self.message),
            (Some(file), None) => write!(f, "{file}: {}", self.message),
            (None, Some(field)) => write!(f, "{field}: {}", self.message),
            (None, None) => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for KustomizeError {}
