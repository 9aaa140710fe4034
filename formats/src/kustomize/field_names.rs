//! kustomize reads a kustomization through Go's JSON decoding, which matches field names
//! without regard to case (`fieldpath` is `fieldPath`). Before the strict read, keys that
//! equal a known field name but for case are given the field's spelling, level by level;
//! free-form maps (labels, values) are left alone.

use serde_json::{Map, Value};

/// A level of the kustomization: its field names and, for fields holding structs (or lists
/// of them), the next level.
struct Level {
    fields: &'static [&'static str],
    nested: &'static [(&'static str, &'static Level)],
}

const SELECTOR: Level = Level {
    fields: &[
        "group",
        "version",
        "kind",
        "name",
        "namespace",
        "labelSelector",
        "annotationSelector",
    ],
    nested: &[],
};
const PATCH: Level = Level {
    fields: &["path", "patch", "target", "options"],
    nested: &[("target", &SELECTOR)],
};
const IMAGE: Level = Level {
    fields: &["name", "newName", "tagSuffix", "newTag", "digest"],
    nested: &[],
};
const REPLICA: Level = Level {
    fields: &["name", "count"],
    nested: &[],
};
const FIELD_SPEC: Level = Level {
    fields: &["group", "version", "kind", "path", "create"],
    nested: &[],
};
const LABEL: Level = Level {
    fields: &["pairs", "includeSelectors", "includeTemplates", "fields"],
    nested: &[("fields", &FIELD_SPEC)],
};
const OBJREF: Level = Level {
    fields: &[
        "apiVersion",
        "group",
        "version",
        "kind",
        "name",
        "namespace",
    ],
    nested: &[],
};
const FIELDREF: Level = Level {
    fields: &["fieldPath"],
    nested: &[],
};
const VAR: Level = Level {
    fields: &["name", "objref", "fieldref"],
    nested: &[("objref", &OBJREF), ("fieldref", &FIELDREF)],
};
const OPTIONS: Level = Level {
    fields: &[
        "labels",
        "annotations",
        "disableNameSuffixHash",
        "immutable",
    ],
    nested: &[],
};
const GENERATOR: Level = Level {
    fields: &[
        "name",
        "namespace",
        "behavior",
        "literals",
        "files",
        "envs",
        "env",
        "options",
        "type",
    ],
    nested: &[("options", &OPTIONS)],
};
const LEGACY_SORT: Level = Level {
    fields: &["orderFirst", "orderLast"],
    nested: &[],
};
const SORT: Level = Level {
    fields: &["order", "legacySortOptions"],
    nested: &[("legacySortOptions", &LEGACY_SORT)],
};
const HELM_GLOBALS: Level = Level {
    fields: &["chartHome", "configHome"],
    nested: &[],
};
const HELM_CHART: Level = Level {
    fields: &[
        "name",
        "version",
        "repo",
        "releaseName",
        "namespace",
        "additionalValuesFiles",
        "valuesFile",
        "valuesInline",
        "valuesMerge",
        "includeCRDs",
        "skipHooks",
        "apiVersions",
        "kubeVersion",
        "nameTemplate",
        "skipTests",
        "debug",
    ],
    nested: &[],
};
const KUSTOMIZATION: Level = Level {
    fields: &[
        "apiVersion",
        "kind",
        "metadata",
        "openapi",
        "namePrefix",
        "nameSuffix",
        "namespace",
        "commonLabels",
        "labels",
        "commonAnnotations",
        "patchesStrategicMerge",
        "patchesJson6902",
        "patches",
        "images",
        "imageTags",
        "replacements",
        "replicas",
        "vars",
        "sortOptions",
        "resources",
        "components",
        "crds",
        "bases",
        "configMapGenerator",
        "secretGenerator",
        "helmGlobals",
        "helmCharts",
        "helmChartInflationGenerator",
        "generatorOptions",
        "configurations",
        "generators",
        "transformers",
        "validators",
        "buildMetadata",
    ],
    nested: &[
        ("labels", &LABEL),
        ("patchesJson6902", &PATCH),
        ("patches", &PATCH),
        ("images", &IMAGE),
        ("imageTags", &IMAGE),
        ("replicas", &REPLICA),
        ("vars", &VAR),
        ("sortOptions", &SORT),
        ("configMapGenerator", &GENERATOR),
        ("secretGenerator", &GENERATOR),
        ("helmGlobals", &HELM_GLOBALS),
        ("helmCharts", &HELM_CHART),
        ("generatorOptions", &OPTIONS),
    ],
};

/// Gives the keys of a kustomization's JSON form their field spelling.
pub(crate) fn canonicalize(value: &mut Value) {
    apply(value, &KUSTOMIZATION);
}

fn apply(value: &mut Value, level: &Level) {
    match value {
        Value::Array(items) => items.iter_mut().for_each(|item| apply(item, level)),
        Value::Object(map) => {
            // Go's decoding leaves a field at its zero value for an explicit null.
            map.retain(|_, v| !v.is_null());
            rename_keys(map, level.fields);
            for (field, next) in level.nested {
                if let Some(inner) = map.get_mut(*field) {
                    apply(inner, next);
                }
            }
        }
        _ => {}
    }
}

fn rename_keys(map: &mut Map<String, Value>, fields: &[&str]) {
    let renames: Vec<(String, &str)> = map
        .keys()
        .filter(|key| !fields.contains(&key.as_str()))
        .filter_map(|key| {
            fields
                .iter()
                .find(|field| field.eq_ignore_ascii_case(key))
                .map(|field| (key.clone(), *field))
        })
        .collect();
    for (from, to) in renames {
        if map.contains_key(to) {
            continue;
        }
        if let Some(value) = map.remove(&from) {
            map.insert(to.to_owned(), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_take_the_field_spelling_at_every_level() {
        let mut value = json!({"NamePrefix": "a-", "vars": [{"name": "V", "objref": {"Kind": "Service"}, "fieldref": {"fieldpath": "x"}}], "commonLabels": {"App": "x"}});
        canonicalize(&mut value);
        assert_eq!(value["namePrefix"], "a-");
        assert_eq!(value["vars"][0]["fieldref"]["fieldPath"], "x");
        assert_eq!(value["vars"][0]["objref"]["kind"], "Service");
        assert_eq!(value["commonLabels"]["App"], "x");
    }
}
