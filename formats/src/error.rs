//! The error every renderer returns: what went wrong and, where known, the file, document and line.

use std::fmt;

/// Where in the bundle tree something was found: a file (relative to the tree root, `/`-separated),
/// the zero-based index of the YAML document in that file and, where known, a one-based line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceLocation {
    /// File path relative to the bundle root, with `/` separators.
    pub file: String,
    /// Zero-based index of the document within the file (counting empty documents too).
    pub document: Option<usize>,
    /// One-based line in the file.
    pub line: Option<u64>,
}

impl SourceLocation {
    /// A location naming only a file.
    pub fn file(file: impl Into<String>) -> Self {
        Self {
            file: file.into(),
            document: None,
            line: None,
        }
    }
}

impl fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        match (self.document, self.line) {
            (Some(document), Some(line)) => write!(f, " (document {document}, line {line})"),
            (Some(document), None) => write!(f, " (document {document})"),
            (None, Some(line)) => write!(f, " (line {line})"),
            (None, None) => Ok(()),
        }
    }
}

/// A registry+v1 rule that a bundle broke. OLM v1 refuses the same bundles; the name of the rule is part
/// of the error so users can look it up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RegistryV1Rule {
    /// The bundle has no ClusterServiceVersion in `manifests/`.
    NoClusterServiceVersion,
    /// More than one ClusterServiceVersion in `manifests/`.
    MultipleClusterServiceVersions,
    /// `manifests/` must be flat.
    NoSubdirectories,
    /// `metadata/annotations.yaml` is missing or unreadable.
    Annotations,
    /// The requested watch namespace needs an install mode the CSV does not support.
    InstallModeUnsupported,
    /// The CSV supports only MultiNamespace, which OLM v1 cannot install.
    MultiNamespaceOnly,
    /// The CSV owns APIService definitions.
    OwnedApiServices,
    /// The bundle declares dependencies (`olm.package.required`, `olm.gvk.required`, `olm.constraint`).
    Dependencies,
    /// The CSV's webhook definitions break one of OLM v1's rules for them.
    Webhooks,
    /// A manifest's kind is not on OLM's list of supported kinds.
    UnsupportedKind,
    /// The CSV owns a CRD that the bundle does not contain.
    OwnedCrdMissing,
    /// Two deployment specs in the CSV share a name.
    DuplicateDeployment,
    /// A deployment spec's name is not a DNS-1123 subdomain.
    InvalidDeploymentName,
    /// Two CRDs in the bundle share a name.
    DuplicateCrd,
    /// The install or watch namespace is not a valid namespace name.
    InvalidNamespace,
    /// The CSV's install strategy is not `deployment` or cannot be read.
    InstallStrategy,
}

impl RegistryV1Rule {
    /// Stable short name of the rule, used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::NoClusterServiceVersion => "csv-required",
            Self::MultipleClusterServiceVersions => "single-csv",
            Self::NoSubdirectories => "flat-manifests",
            Self::Annotations => "annotations",
            Self::InstallModeUnsupported => "install-mode-supported",
            Self::MultiNamespaceOnly => "no-multinamespace-only",
            Self::OwnedApiServices => "no-owned-apiservices",
            Self::Dependencies => "no-dependencies",
            Self::Webhooks => "valid-webhooks",
            Self::UnsupportedKind => "supported-kinds",
            Self::OwnedCrdMissing => "owned-crds-present",
            Self::DuplicateDeployment => "unique-deployment-names",
            Self::InvalidDeploymentName => "deployment-name-dns1123",
            Self::DuplicateCrd => "unique-crd-names",
            Self::InvalidNamespace => "valid-namespace",
            Self::InstallStrategy => "deployment-install-strategy",
        }
    }
}

impl fmt::Display for RegistryV1Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why rendering failed. Every variant is a problem with the bundle content or the format config, so a
/// reconciler should treat it as permanent: retrying the same input gives the same error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// A file or directory could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The path that failed, relative to the bundle root where possible.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not valid UTF-8, YAML or JSON.
    #[error("{at}: invalid YAML: {message}")]
    InvalidYaml {
        /// Where the parser stopped.
        at: SourceLocation,
        /// What the parser said.
        message: String,
    },
    /// A document parsed but is not a Kubernetes object (e.g. no `kind` or no `metadata.name`).
    #[error("{at}: {message}")]
    InvalidObject {
        /// The document.
        at: SourceLocation,
        /// What is missing or wrong.
        message: String,
    },
    /// Two objects share group, kind, namespace and name.
    #[error("duplicate object {object}: defined in {first} and again in {second}")]
    DuplicateObject {
        /// `group/kind namespace/name` of the object.
        object: String,
        /// Where it was first defined.
        first: Box<SourceLocation>,
        /// Where it was defined again.
        second: Box<SourceLocation>,
    },
    /// A registry+v1 bundle that OLM v1 would refuse.
    #[error("registry-v1 bundle rejected ({rule}): {object}: {message}")]
    RegistryV1 {
        /// The rule the bundle broke.
        rule: RegistryV1Rule,
        /// The object (or file) that broke it.
        object: String,
        /// Details.
        message: String,
    },
    /// The format config is invalid for this bundle (e.g. a bad namespace name).
    #[error("invalid {format} config: {message}")]
    InvalidConfig {
        /// The format whose config is wrong.
        format: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The format exists but this entry point does not render it yet.
    /// The bundle rendered no objects, and the spec does not allow that: applying it would prune
    /// every object of the active revision (a wrong directory, an empty image).
    #[error(
        "the {0} bundle rendered no objects; applying it would delete every object of the active \
         revision (check the sources' directories, or set spec.rollout.allowEmpty: true if an \
         empty bundle is intended)"
    )]
    Empty(&'static str),
    #[error("the {0} format is not implemented in this entry point")]
    NotImplemented(&'static str),
    /// A processor of `spec.processors` failed on the rendered objects (a bad patch, an
    /// undefined variable in strict mode, a function's error result).
    #[error("processor {processor}: {message}")]
    Processor {
        /// The processor's name.
        processor: String,
        /// The condition reason (`SubstitutionFailed`, `FunctionFailed`, a kustomize reason).
        reason: &'static str,
        /// What went wrong.
        message: String,
    },
    /// A function processor could not be reached or gave no complete answer; worth retrying.
    #[error("processor {processor}: the function could not be called: {message}")]
    ProcessorUnavailable {
        /// The processor's name.
        processor: String,
        /// What went wrong.
        message: String,
    },
    /// A helm chart's `lookup` asked the cluster for objects the render was given no answer for
    /// ([`crate::Lookups::Answers`]): the caller reads them and renders again with their answers.
    #[error("the chart looks up {} objects not read yet", keys.len())]
    LookupsNeeded {
        /// Every lookup of the render without an answer, in the order first asked.
        keys: Vec<crate::LookupKey>,
    },
    /// A kustomization kustomize would refuse, naming the kustomization file and field.
    #[error("{0}")]
    Kustomize(crate::kustomize_error::KustomizeError),
    /// An object larger than the API server stores: refused before anything is stored or applied.
    #[error(
        "object {object} is {bytes} bytes as JSON, over the {limit}-byte limit of an object the \
         API server stores (etcd's request limit); split it, or move the data out of the bundle"
    )]
    TooLarge {
        /// `kind namespace/name` of the object.
        object: String,
        /// Its size as JSON.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The render went over one of its budgets (nesting, steps, output, sizes; or, in the
    /// agent's render sandbox, memory, CPU or time).
    #[error("{message}")]
    BudgetExceeded {
        /// The budget, its limit and the value that went over it.
        breach: crate::BudgetBreach,
        /// The whole message: the template or file, and the breach.
        message: String,
    },
}

impl RenderError {
    /// The error of a render that failed because it went over a budget: `error` is what the
    /// engine made of it (naming the template or file), `breach` what went over.
    pub fn over_budget(breach: crate::BudgetBreach, error: &RenderError) -> RenderError {
        let text = breach.to_string();
        let message = match error {
            RenderError::BudgetExceeded { message, .. } => message.clone(),
            _ => {
                let said = error.to_string();
                if said.contains(&text) {
                    said
                } else {
                    format!("{said}; {text}")
                }
            }
        };
        RenderError::BudgetExceeded { breach, message }
    }

    /// The registry+v1 rule broken, when this is a registry+v1 rejection.
    pub fn registry_v1_rule(&self) -> Option<RegistryV1Rule> {
        match self {
            Self::RegistryV1 { rule, .. } => Some(*rule),
            _ => None,
        }
    }

    /// A short category for condition reasons and metric labels.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Io { .. } => "ReadFailed",
            Self::InvalidYaml { .. } => "InvalidYAML",
            Self::InvalidObject { .. } => "InvalidObject",
            Self::DuplicateObject { .. } => "DuplicateObject",
            Self::RegistryV1 { .. } => "UnsupportedBundle",
            Self::InvalidConfig { .. } => "InvalidConfig",
            Self::Empty(_) => "EmptyBundle",
            Self::NotImplemented(_) => "NotImplemented",
            Self::TooLarge { .. } => "ObjectTooLarge",
            Self::BudgetExceeded { .. } => "RenderBudgetExceeded",
            Self::Kustomize(error) => error.kind.category(),
            Self::Processor { reason, .. } => reason,
            Self::ProcessorUnavailable { .. } => "FunctionUnavailable",
            Self::LookupsNeeded { .. } => "LookupsNeeded",
        }
    }
}

impl RenderError {
    /// This error with every path under `root`, the tree that was rendered, written relative to
    /// it (`root` itself as `.`): a message names the file in the bundle, never the scratch
    /// directory the bundle was assembled in. Applied where a render returns, so every error of
    /// every format reads alike.
    pub fn relative_to(self, root: &std::path::Path) -> RenderError {
        let mut roots = vec![root.display().to_string()];
        if let Ok(canonical) = root.canonicalize() {
            roots.push(canonical.display().to_string());
        }
        // The longer first, so one root inside another is replaced whole.
        roots.sort_by_key(|r| std::cmp::Reverse(r.len()));
        // Only absolute ones: a relative root (`.`, `chart`) already reads as the bundle's path.
        roots.retain(|r| r.starts_with('/') && r != "/");
        let relative = |text: String| -> String {
            roots
                .iter()
                .fold(text, |text, root| relative_text(&text, root))
        };
        self.map_text(&relative)
    }

    /// This error with `f` applied to every text it carries (paths, messages, names).
    fn map_text(self, f: &dyn Fn(String) -> String) -> RenderError {
        let at = |at: SourceLocation| SourceLocation {
            file: f(at.file),
            ..at
        };
        match self {
            Self::Io { path, source } => Self::Io {
                path: f(path),
                source,
            },
            Self::InvalidYaml { at: loc, message } => Self::InvalidYaml {
                at: at(loc),
                message: f(message),
            },
            Self::InvalidObject { at: loc, message } => Self::InvalidObject {
                at: at(loc),
                message: f(message),
            },
            Self::DuplicateObject {
                object,
                first,
                second,
            } => Self::DuplicateObject {
                object: f(object),
                first: Box::new(at(*first)),
                second: Box::new(at(*second)),
            },
            Self::RegistryV1 {
                rule,
                object,
                message,
            } => Self::RegistryV1 {
                rule,
                object: f(object),
                message: f(message),
            },
            Self::InvalidConfig { format, message } => Self::InvalidConfig {
                format,
                message: f(message),
            },
            Self::Processor {
                processor,
                reason,
                message,
            } => Self::Processor {
                processor,
                reason,
                message: f(message),
            },
            Self::ProcessorUnavailable { processor, message } => Self::ProcessorUnavailable {
                processor,
                message: f(message),
            },
            Self::Kustomize(error) => Self::Kustomize(crate::kustomize_error::KustomizeError {
                file: error.file.map(f),
                field: error.field,
                message: f(error.message),
                kind: error.kind,
            }),
            Self::TooLarge {
                object,
                bytes,
                limit,
            } => Self::TooLarge {
                object: f(object),
                bytes,
                limit,
            },
            Self::BudgetExceeded { breach, message } => Self::BudgetExceeded {
                breach: crate::BudgetBreach {
                    value: f(breach.value),
                    ..breach
                },
                message: f(message),
            },
            other @ (Self::Empty(_) | Self::NotImplemented(_) | Self::LookupsNeeded { .. }) => {
                other
            }
        }
    }
}

/// `text` with `root/` removed before paths under `root`, and `root` alone written `.`; a longer
/// name that only begins like `root` (`root-2`) is left as it is.
fn relative_text(text: &str, root: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(root) {
        out.push_str(&rest[..at]);
        let after = &rest[at + root.len()..];
        match after.chars().next() {
            Some('/') => rest = &after[1..],
            Some(c) if c.is_alphanumeric() || matches!(c, '-' | '_' | '.') => {
                out.push_str(root);
                rest = after;
            }
            _ => {
                out.push('.');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_under_the_rendered_tree_read_relative_to_it() {
        let root = std::path::Path::new("/var/cache/pallet/tmp/1080-26");
        let chart = RenderError::InvalidConfig {
            format: "helm",
            message: "chart /var/cache/pallet/tmp/1080-26: templates/a is a symlink".into(),
        };
        assert_eq!(
            chart.relative_to(root).to_string(),
            "invalid helm config: chart .: templates/a is a symlink"
        );
        let io = RenderError::Io {
            path: "/var/cache/pallet/tmp/1080-26/charts/sub/values.yaml".into(),
            source: std::io::Error::other("denied"),
        };
        assert_eq!(
            io.relative_to(root).to_string(),
            "charts/sub/values.yaml: denied"
        );
        let kustomize = RenderError::Kustomize(
            crate::kustomize::KustomizeError::invalid(
                "cannot open /var/cache/pallet/tmp/1080-26/base",
            )
            .in_file("/var/cache/pallet/tmp/1080-26/overlay/kustomization.yaml"),
        );
        let text = kustomize.relative_to(root).to_string();
        assert!(!text.contains("/var/cache"), "{text}");
        assert!(text.contains("overlay/kustomization.yaml"), "{text}");
        // A path elsewhere, or one that only starts alike, stays as it was.
        let other = RenderError::InvalidConfig {
            format: "helm",
            message: "/var/cache/pallet/tmp/1080-260/x and /etc/hosts".into(),
        };
        assert_eq!(
            other.relative_to(root).to_string(),
            "invalid helm config: /var/cache/pallet/tmp/1080-260/x and /etc/hosts"
        );
    }
}
