//! `buildMetadata`: where each resource came from (`config.kubernetes.io/origin`: the file, or
//! the generator and the kustomization configuring it) and which transformers changed it
//! (`alpha.config.kubernetes.io/transformations`), written as kustomize writes them.

use super::resmap::ResMap;
use super::resource::{Resource, ORIGIN_ANNOTATION, TRANSFORMER_ANNOTATION};

/// Joins paths as Go's `filepath.Join` does: `.` and empty parts dropped, `..` folded where
/// it can be.
pub(crate) fn join(base: &str, path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in base.split('/').chain(path.split('/')) {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else {
                    parts.push("..");
                }
            }
            other => parts.push(other),
        }
    }
    parts.join("/")
}

/// A YAML scalar as kustomize's YAML writer prints it in these annotations (quoted when it
/// would not read back as the same string).
fn scalar(text: &str) -> String {
    let plain = !text.is_empty()
        && !text.starts_with(|c: char| "-?:,[]{}#&*!|>'\"%@` ".contains(c))
        && !text.contains(": ")
        && !text.contains(" #")
        && !text.ends_with(' ')
        && !matches!(
            text,
            "true" | "false" | "null" | "~" | "yes" | "no" | "on" | "off"
        )
        && text.parse::<f64>().is_err();
    if plain {
        text.to_owned()
    } else {
        format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

/// The origin of a resource read from a file: `path: <path>`.
pub(crate) fn from_path(path: &str) -> String {
    format!("path: {}\n", scalar(path))
}

/// Who configured a generator or transformer: `configuredIn`, `configuredBy`.
#[derive(Debug, Clone)]
pub(crate) struct Configured {
    /// The kustomization or plugin configuration file.
    pub configured_in: String,
    /// `builtin` for the kustomization's own fields, else the plugin configuration's.
    pub api_version: String,
    /// The generator's or transformer's kind.
    pub kind: String,
    /// The plugin configuration's name (none for the kustomization's own fields).
    pub name: String,
    /// The plugin configuration's namespace.
    pub namespace: String,
}

impl Configured {
    /// A built-in generator or transformer configured by the kustomization `file` at `path`.
    pub(crate) fn builtin(origin_path: &str, file_name: &str, kind: &str) -> Self {
        Configured {
            configured_in: join(origin_path, file_name),
            api_version: "builtin".into(),
            kind: kind.into(),
            name: String::new(),
            namespace: String::new(),
        }
    }

    /// The YAML fields, each line indented by `indent`.
    fn lines(&self, first: &str, indent: &str) -> String {
        let mut out = format!("{first}configuredIn: {}\n", scalar(&self.configured_in));
        out.push_str(&format!("{indent}configuredBy:\n"));
        out.push_str(&format!(
            "{indent}  apiVersion: {}\n",
            scalar(&self.api_version)
        ));
        out.push_str(&format!("{indent}  kind: {}\n", scalar(&self.kind)));
        if !self.name.is_empty() {
            out.push_str(&format!("{indent}  name: {}\n", scalar(&self.name)));
        }
        if !self.namespace.is_empty() {
            out.push_str(&format!(
                "{indent}  namespace: {}\n",
                scalar(&self.namespace)
            ));
        }
        out
    }

    /// As an origin annotation's value.
    pub(crate) fn as_origin(&self) -> String {
        self.lines("", "")
    }
}

/// Sets the origin of the resources that have none.
pub(crate) fn set_if_absent(resource: &mut Resource, value: &str) {
    if resource.annotation(ORIGIN_ANNOTATION).is_none() {
        resource.set_annotation(ORIGIN_ANNOTATION, value);
    }
}

/// Records that a transformer ran over every resource: a resource with no origin takes the
/// transformer as its origin, the others list it among their transformations.
pub(crate) fn add_transformation(res: &mut ResMap, by: &Configured) {
    let item = by.lines("- ", "  ");
    for resource in &mut res.resources {
        if resource.body.is_empty() {
            continue;
        }
        if resource.annotation(ORIGIN_ANNOTATION).is_none() {
            resource.set_annotation(ORIGIN_ANNOTATION, &by.as_origin());
            continue;
        }
        let list = match resource.annotation(TRANSFORMER_ANNOTATION) {
            Some(current) => format!("{current}{item}"),
            None => item.clone(),
        };
        resource.set_annotation(TRANSFORMER_ANNOTATION, &list);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_join_and_origins_print_as_kustomize_prints_them() {
        assert_eq!(join("", "service.yaml"), "service.yaml");
        assert_eq!(join("../base", "./x.yaml"), "../base/x.yaml");
        assert_eq!(join("a/b", "../c"), "a/c");
        assert_eq!(from_path("service.yaml"), "path: service.yaml\n");
        let by = Configured::builtin("../base", "kustomization.yaml", "ConfigMapGenerator");
        assert_eq!(
            by.as_origin(),
            "configuredIn: ../base/kustomization.yaml\nconfiguredBy:\n  apiVersion: builtin\n  kind: ConfigMapGenerator\n"
        );
        assert!(by.lines("- ", "  ").starts_with(
            "- configuredIn: ../base/kustomization.yaml\n  configuredBy:\n    apiVersion"
        ));
    }
}
