//! The Go structs behind helm's built-in objects, as helm v3.19 declares them: their fields in
//! declaration order (what Go's fmt prints: `{v1.35.0 1 35}`) and each field's JSON name and
//! `omitempty` (what `toJson` and `toYaml` write). A struct's values live in a [`super::GoMap`]
//! under the Go field names; this says which of them are fields, in which order.

/// One field of a Go struct.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// The Go field name (the key in the struct's map).
    pub name: &'static str,
    /// The name encoding/json writes (the `json` tag, else the field name).
    pub json: &'static str,
    /// `omitempty`: left out of JSON when empty (false, 0, "", nil, no items).
    pub omitempty: bool,
    /// An embedded struct (`struct { chart.Metadata; IsRoot bool }`): its fields are written in
    /// line in JSON, and fmt prints it as a struct of its own.
    pub embedded: bool,
}

const fn field(name: &'static str) -> Field {
    Field {
        name,
        json: name,
        omitempty: false,
        embedded: false,
    }
}

const fn tagged(name: &'static str, json: &'static str, omitempty: bool) -> Field {
    Field {
        name,
        json,
        omitempty,
        embedded: false,
    }
}

/// `chartutil.Capabilities` (`.Capabilities` is a pointer to one).
const CAPABILITIES: &[Field] = &[
    field("KubeVersion"),
    field("APIVersions"),
    field("HelmVersion"),
];

/// `chartutil.KubeVersion` (`GitVersion` is a method, not a field).
const KUBE_VERSION: &[Field] = &[field("Version"), field("Major"), field("Minor")];

/// helm's `version.BuildInfo`. Its `GoVersion` (the Go release helm was built with) is not
/// known here: it is empty, so JSON leaves it out, as helm's own test builds do.
const BUILD_INFO: &[Field] = &[
    tagged("Version", "version", true),
    tagged("GitCommit", "git_commit", true),
    tagged("GitTreeState", "git_tree_state", true),
    tagged("GoVersion", "go_version", true),
];

/// `.Chart`: `struct { chart.Metadata; IsRoot bool }`.
const CHART: &[Field] = &[
    Field {
        name: "Metadata",
        json: "Metadata",
        omitempty: false,
        embedded: true,
    },
    field("IsRoot"),
];

/// `chart.Metadata`.
const METADATA: &[Field] = &[
    tagged("Name", "name", true),
    tagged("Home", "home", true),
    tagged("Sources", "sources", true),
    tagged("Version", "version", true),
    tagged("Description", "description", true),
    tagged("Keywords", "keywords", true),
    tagged("Maintainers", "maintainers", true),
    tagged("Icon", "icon", true),
    tagged("APIVersion", "apiVersion", true),
    tagged("Condition", "condition", true),
    tagged("Tags", "tags", true),
    tagged("AppVersion", "appVersion", true),
    tagged("Deprecated", "deprecated", true),
    tagged("Annotations", "annotations", true),
    tagged("KubeVersion", "kubeVersion", true),
    tagged("Dependencies", "dependencies", true),
    tagged("Type", "type", true),
];

/// `chart.Maintainer`.
const MAINTAINER: &[Field] = &[
    tagged("Name", "name", true),
    tagged("Email", "email", true),
    tagged("URL", "url", true),
];

/// `chart.Dependency`.
const DEPENDENCY: &[Field] = &[
    tagged("Name", "name", false),
    tagged("Version", "version", true),
    tagged("Repository", "repository", false),
    tagged("Condition", "condition", true),
    tagged("Tags", "tags", true),
    tagged("Enabled", "enabled", true),
    tagged("ImportValues", "import-values", true),
    tagged("Alias", "alias", true),
];

/// Sprig's certificate (`genCA` and the like): two string fields without tags.
const CERTIFICATE: &[Field] = &[field("Cert"), field("Key")];

/// The fields of the struct type `ty` (as [`super::type_of`] names it; a pointer's are its
/// struct's).
pub fn fields(ty: &str) -> Option<&'static [Field]> {
    Some(match ty.trim_start_matches('*') {
        "chartutil.Capabilities" => CAPABILITIES,
        "chartutil.KubeVersion" => KUBE_VERSION,
        "version.BuildInfo" => BUILD_INFO,
        "struct { chart.Metadata; IsRoot bool }" => CHART,
        "chart.Metadata" => METADATA,
        "chart.Maintainer" => MAINTAINER,
        "chart.Dependency" => DEPENDENCY,
        "sprig.certificate" => CERTIFICATE,
        _ => return None,
    })
}

/// Whether `ty` is a pointer to a struct (fmt prints `&{...}` at the top, an address inside).
pub fn is_pointer(ty: &str) -> bool {
    ty.starts_with('*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_struct_pallet_builds_has_its_fields_declared() {
        for ty in [
            "*chartutil.Capabilities",
            "chartutil.KubeVersion",
            "version.BuildInfo",
            "struct { chart.Metadata; IsRoot bool }",
            "chart.Metadata",
            "*chart.Maintainer",
            "*chart.Dependency",
            "sprig.certificate",
        ] {
            assert!(fields(ty).is_some(), "{ty}");
        }
        assert!(is_pointer("*chart.Maintainer"));
        assert!(!is_pointer("chart.Metadata"));
    }
}
