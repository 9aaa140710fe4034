//! The schema knowledge kustomize uses: which lists are merged by which key and which are
//! replaced (strategic merge), and which kinds are cluster-scoped.
//!
//! Built in: the Kubernetes OpenAPI document v1.21.2 as embedded in kustomize's kyaml
//! (sigs.k8s.io/kustomize/kyaml v0.18.1, Apache-2.0), reduced to what strategic merge and scope
//! questions read, in `openapi-v1.21.2.json`. Regenerate it with
//! `cd tools/kustomize-openapi && go run . > ../../formats/src/kustomize/openapi-v1.21.2.json`.
//!
//! kustomize keeps its schema in process-wide state that a kustomization's `openapi:` field
//! changes as the build walks the tree; [`SchemaState`] follows the same rules, and
//! [`Schema::from_openapi_field`] answers for a kustomization built on its own.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use serde::Deserialize;
use serde_json::Value;

use super::error::KustomizeError;

/// The built-in Kubernetes version, the only one `openapi: {version: ...}` accepts.
pub const BUILTIN_VERSION: &str = "v1.21.2";

/// The compact built-in data (see the module documentation).
const BUILTIN_DATA: &str = include_str!("openapi-v1.21.2.json");

/// One schema: its fields, elements and strategic merge extensions.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct SchemaNode {
    /// `$ref`, as written (`#/definitions/io.k8s.api.core.v1.PodSpec`).
    #[serde(default, rename = "ref")]
    reference: String,
    /// The type is exactly `array` (kyaml gives elements only then).
    #[serde(default)]
    array: bool,
    /// `properties`.
    #[serde(default)]
    props: BTreeMap<String, SchemaNode>,
    /// `additionalProperties` when it is a schema.
    #[serde(default)]
    additional: Option<Box<SchemaNode>>,
    /// `items` when it is one schema.
    #[serde(default)]
    items: Option<Box<SchemaNode>>,
    /// `x-kubernetes-patch-strategy`.
    #[serde(default)]
    strategy: Option<String>,
    /// `x-kubernetes-patch-merge-key`.
    #[serde(default, rename = "mergeKey")]
    merge_key: Option<String>,
    /// `x-kubernetes-list-map-keys`.
    #[serde(default, rename = "listMapKeys")]
    list_map_keys: Option<Vec<String>>,
    /// `x-kubernetes-group-version-kind`, as `[apiVersion, kind]` (definitions only).
    #[serde(default)]
    gvks: Vec<(String, String)>,
}

/// One OpenAPI document as kyaml indexes it: definitions and the scope of the kinds its API
/// paths serve.
#[derive(Debug, Default, Clone)]
struct Document {
    definitions: HashMap<String, Arc<SchemaNode>>,
    /// `[apiVersion, kind, "namespaced" | "cluster"]`.
    scopes: Vec<(String, String, String)>,
}

/// A document as the built-in data file holds it.
#[derive(Debug, Deserialize)]
struct StoredDocument {
    definitions: HashMap<String, SchemaNode>,
    scopes: Vec<(String, String, String)>,
}

impl From<StoredDocument> for Document {
    fn from(stored: StoredDocument) -> Self {
        Document {
            definitions: stored
                .definitions
                .into_iter()
                .map(|(name, node)| (name, Arc::new(node)))
                .collect(),
            scopes: stored.scopes,
        }
    }
}

/// The built-in data file.
#[derive(Debug, Deserialize)]
struct BuiltinData {
    kubernetes: StoredDocument,
    kustomization: StoredDocument,
    precomputed: Vec<(String, String, String)>,
}

/// The built-in documents, parsed once.
struct Builtin {
    kubernetes: Document,
    kustomization: Document,
    /// kyaml's namespace-scope table, consulted before any schema.
    precomputed: HashMap<(String, String), bool>,
}

fn builtin_data() -> &'static Builtin {
    static DATA: OnceLock<Builtin> = OnceLock::new();
    DATA.get_or_init(|| match serde_json::from_str::<BuiltinData>(BUILTIN_DATA) {
        Ok(data) => Builtin {
            kubernetes: data.kubernetes.into(),
            kustomization: data.kustomization.into(),
            precomputed: data
                .precomputed
                .into_iter()
                .map(|(api_version, kind, scope)| ((api_version, kind), scope == "namespaced"))
                .collect(),
        },
        // The file is part of the build and checked by a test; an empty schema keeps the
        // engine working (every list replaced) should it ever not decode.
        Err(_) => Builtin {
            kubernetes: Document::default(),
            kustomization: Document::default(),
            precomputed: HashMap::new(),
        },
    })
}

/// A schema as kustomize holds it at one point of a build: definitions by name, the
/// definition for each apiVersion/kind, and the scope of kinds.
#[derive(Debug, Default, Clone)]
pub struct Schema {
    definitions: HashMap<String, Arc<SchemaNode>>,
    by_type: HashMap<(String, String), Arc<SchemaNode>>,
    namespaced: HashMap<(String, String), bool>,
}

impl Schema {
    /// The Kubernetes schema kustomize v5.5.0 embeds (with kustomize's own Kustomization API
    /// schema, which kyaml always loads too).
    pub fn builtin() -> Arc<Schema> {
        static BUILTIN: OnceLock<Arc<Schema>> = OnceLock::new();
        BUILTIN
            .get_or_init(|| {
                let data = builtin_data();
                let mut schema = Schema::default();
                schema.add_document(&data.kubernetes);
                schema.add_document(&data.kustomization);
                Arc::new(schema)
            })
            .clone()
    }

    /// The schema a kustomization's `openapi:` field selects when it is the first such field
    /// of the build (the top kustomization's, or the first base's when nothing asked about a
    /// kind outside kustomize's scope table before): `path` (with the file's bytes, JSON or
    /// YAML, read by the caller) gives that document alone, without the built-in Kubernetes
    /// schema; `version` must be the built-in one. [`SchemaState`] follows a whole build.
    pub fn from_openapi_field(
        field: &BTreeMap<String, String>,
        document: Option<&[u8]>,
    ) -> Result<Arc<Schema>, KustomizeError> {
        let mut state = SchemaState::new();
        state.set_schema(field, document, true)?;
        Ok(state.schema())
    }

    /// Whether the kind is namespaced: `Some(false)` when the schema knows it is
    /// cluster-scoped (kustomize's `IsCertainlyClusterScoped`), `Some(true)` when it knows it is
    /// namespaced, `None` when it does not know the kind. kustomize's precomputed table of
    /// built-in kinds answers first, whatever the schema.
    pub fn is_namespaced(&self, group: &str, version: &str, kind: &str) -> Option<bool> {
        let key = (join_api_version(group, version), kind.to_owned());
        builtin_data()
            .precomputed
            .get(&key)
            .or_else(|| self.namespaced.get(&key))
            .copied()
    }

    /// The schema of objects of `api_version`/`kind` (by `x-kubernetes-group-version-kind`).
    pub fn for_type(&self, api_version: &str, kind: &str) -> Option<FieldSchema<'_>> {
        self.by_type
            .get(&(api_version.to_owned(), kind.to_owned()))
            .map(|node| FieldSchema { schema: self, node })
    }

    /// A definition by name (`io.k8s.api.core.v1.PodSpec`).
    pub fn definition(&self, name: &str) -> Option<FieldSchema<'_>> {
        self.definitions
            .get(name)
            .map(|node| FieldSchema { schema: self, node })
    }

    /// Adds a document's definitions (replacing those of the same name, and the schema of
    /// each kind they declare) and the scopes of its kinds (namespaced wins over cluster).
    fn add_document(&mut self, document: &Document) {
        for (name, node) in &document.definitions {
            self.definitions.insert(name.clone(), node.clone());
            for (api_version, kind) in &node.gvks {
                self.by_type
                    .insert((api_version.clone(), kind.clone()), node.clone());
            }
        }
        for (api_version, kind, scope) in &document.scopes {
            let key = (api_version.clone(), kind.clone());
            if scope == "namespaced" {
                self.namespaced.insert(key, true);
            } else {
                self.namespaced.entry(key).or_insert(false);
            }
        }
    }

    /// Follows `$ref`s from `node` until a schema without one (kyaml replaces a referring
    /// schema by the referred one whole). `None` when a reference does not resolve.
    fn resolve<'a>(&'a self, mut node: &'a SchemaNode) -> Option<&'a SchemaNode> {
        // A cycle of references would loop forever in kyaml; bound it here.
        for _ in 0..64 {
            if node.reference.is_empty() {
                return Some(node);
            }
            node = self.lookup_reference(&node.reference)?;
        }
        None
    }

    /// The schema a JSON pointer reference names: `#/definitions/NAME`, optionally followed
    /// by `properties/FIELD`, `items` or `additionalProperties` steps.
    fn lookup_reference(&self, reference: &str) -> Option<&SchemaNode> {
        let pointer = reference.split_once('#').map_or(reference, |(_, p)| p);
        let mut tokens = pointer
            .strip_prefix('/')?
            .split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"));
        if tokens.next()? != "definitions" {
            return None;
        }
        let mut node: &SchemaNode = self.definitions.get(&tokens.next()?)?;
        while let Some(token) = tokens.next() {
            node = match token.as_str() {
                "properties" => node.props.get(&tokens.next()?)?,
                "items" => node.items.as_deref()?,
                "additionalProperties" => node.additional.as_deref()?,
                _ => return None,
            };
        }
        Some(node)
    }
}

/// `group/version`, or `version` for the core group.
fn join_api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

/// A schema inside a [`Schema`], as the strategic merge walks it (kyaml's `ResourceSchema`).
#[derive(Debug, Clone, Copy)]
pub struct FieldSchema<'a> {
    schema: &'a Schema,
    node: &'a SchemaNode,
}

impl<'a> FieldSchema<'a> {
    /// The schema of field `name`: its property, else the schema of the values of a map
    /// (`additionalProperties`), references followed.
    pub fn field(&self, name: &str) -> Option<FieldSchema<'a>> {
        let node = match self.node.props.get(name) {
            Some(node) => node,
            None => self.node.additional.as_deref()?,
        };
        self.schema.resolve(node).map(|node| FieldSchema {
            schema: self.schema,
            node,
        })
    }

    /// The schema of the elements, when this is an array (and only typed `array`).
    pub fn elements(&self) -> Option<FieldSchema<'a>> {
        if !self.node.array {
            return None;
        }
        let items = self.node.items.as_deref()?;
        self.schema.resolve(items).map(|node| FieldSchema {
            schema: self.schema,
            node,
        })
    }

    /// Follows a path of field names, `[]` standing for the elements of a list.
    pub fn lookup(&self, path: &[&str]) -> Option<FieldSchema<'a>> {
        path.iter().try_fold(*self, |schema, step| {
            if *step == "[]" {
                schema.elements()
            } else {
                schema.field(step)
            }
        })
    }

    /// `x-kubernetes-patch-strategy` and the merge keys: `x-kubernetes-list-map-keys` when
    /// present, else `x-kubernetes-patch-merge-key`. Keys are read only with a strategy.
    pub fn patch_strategy_and_keys(&self) -> (&'a str, Vec<String>) {
        let Some(strategy) = self.node.strategy.as_deref() else {
            return ("", Vec::new());
        };
        if let Some(keys) = &self.node.list_map_keys {
            return (strategy, keys.clone());
        }
        (strategy, self.node.merge_key.iter().cloned().collect())
    }

    /// Whether lists of this schema are merged (the patch strategy names `merge`).
    pub fn merges_lists(&self) -> bool {
        self.node
            .strategy
            .as_deref()
            .is_some_and(|s| s.split(',').any(|part| part == "merge"))
    }

    /// `x-kubernetes-patch-merge-key`.
    pub fn merge_key(&self) -> Option<&'a str> {
        self.node.merge_key.as_deref()
    }
}

/// Parses an OpenAPI (v2) document, JSON or YAML, into what kyaml indexes of it.
fn parse_document(bytes: &[u8]) -> Result<Document, KustomizeError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| KustomizeError::invalid("invalid schema file: not UTF-8"))?;
    let value: Value = crate::object::from_yaml_str(text)
        .map_err(|e| KustomizeError::invalid(format!("invalid schema file: {e}")))?;
    let Value::Object(root) = value else {
        return Err(KustomizeError::invalid(
            "invalid schema file: not an OpenAPI document",
        ));
    };
    let mut document = Document::default();
    if let Some(Value::Object(definitions)) = root.get("definitions") {
        for (name, definition) in definitions {
            let mut node = node_from_openapi(definition);
            node.gvks = definition
                .get("x-kubernetes-group-version-kind")
                .and_then(Value::as_array)
                .map(|entries| entries.iter().filter_map(type_meta).collect())
                .unwrap_or_default();
            document.definitions.insert(name.clone(), Arc::new(node));
        }
    }
    if let Some(Value::Object(paths)) = root.get("paths") {
        let mut scopes: HashMap<(String, String), bool> = HashMap::new();
        for (path, item) in paths {
            let Some(gvk) = item
                .get("get")
                .and_then(|get| get.get("x-kubernetes-group-version-kind"))
                .and_then(type_meta)
            else {
                continue;
            };
            if path.contains("namespaces/{namespace}") {
                scopes.insert(gvk, true);
            } else {
                scopes.entry(gvk).or_insert(false);
            }
        }
        document.scopes = scopes
            .into_iter()
            .map(|((api_version, kind), namespaced)| {
                let scope = if namespaced { "namespaced" } else { "cluster" };
                (api_version, kind, scope.to_owned())
            })
            .collect();
    }
    Ok(document)
}

/// One `x-kubernetes-group-version-kind` entry as `(apiVersion, kind)`.
fn type_meta(entry: &Value) -> Option<(String, String)> {
    let version = entry.get("version")?.as_str()?;
    let kind = entry.get("kind")?.as_str()?;
    let api_version = match entry.get("group").and_then(Value::as_str) {
        Some(group) if !group.is_empty() => format!("{group}/{version}"),
        _ => version.to_owned(),
    };
    Some((api_version, kind.to_owned()))
}

/// Reads one schema of an OpenAPI document (the parts strategic merge uses).
fn node_from_openapi(value: &Value) -> SchemaNode {
    let string = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
    let array = match value.get("type") {
        Some(Value::String(t)) => t == "array",
        Some(Value::Array(types)) => types.len() == 1 && types[0].as_str() == Some("array"),
        _ => false,
    };
    let schema_of = |key: &str| {
        value
            .get(key)
            .filter(|v| v.is_object())
            .map(|v| Box::new(node_from_openapi(v)))
    };
    SchemaNode {
        reference: string("$ref").unwrap_or_default(),
        array,
        props: value
            .get("properties")
            .and_then(Value::as_object)
            .map(|props| {
                props
                    .iter()
                    .map(|(name, p)| (name.clone(), node_from_openapi(p)))
                    .collect()
            })
            .unwrap_or_default(),
        additional: schema_of("additionalProperties"),
        items: schema_of("items"),
        strategy: string("x-kubernetes-patch-strategy"),
        merge_key: string("x-kubernetes-patch-merge-key"),
        list_map_keys: value
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .map(|keys| {
                keys.iter()
                    .filter_map(|k| k.as_str().map(str::to_owned))
                    .collect()
            }),
        gvks: Vec::new(),
    }
}

/// Whether kyaml has parsed the built-in Kubernetes schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BuiltinStatus {
    NotParsed,
    /// A scope question was answered without the schema; parse it with the next schema.
    Delayed,
    Parsed,
}

/// kustomize's process-wide schema state through one build, with its rules:
/// - the top kustomization's `openapi:` field is set first (`reset`); a base's or component's
///   is set when it is loaded (not `reset`), and only when no field set one before;
/// - `path:` makes that document the schema instead of the built-in one; the built-in one is
///   still added when a question about a kind outside kustomize's scope table was asked under
///   the built-in schema before (it is then added after the custom one, its definitions
///   winning), or when a strategic merge already used the built-in schema (the custom
///   definitions are then added over it);
/// - `version:` must be the built-in version; `path:` and `version:` together are an error.
///
/// Call [`SchemaState::is_namespace_scoped`] for each resource kind as it is loaded, and
/// [`SchemaState::schema`] for the schema of each strategic merge.
#[derive(Debug)]
pub struct SchemaState {
    /// `version:`, or `custom` for `path:`.
    version: String,
    custom: Option<Document>,
    initialized: bool,
    builtin_status: BuiltinStatus,
    current: Schema,
    snapshot: Option<Arc<Schema>>,
}

impl Default for SchemaState {
    fn default() -> Self {
        Self::new()
    }
}

impl SchemaState {
    /// The state at the start of a build.
    pub fn new() -> Self {
        SchemaState {
            version: String::new(),
            custom: None,
            initialized: false,
            builtin_status: BuiltinStatus::NotParsed,
            current: Schema::default(),
            snapshot: None,
        }
    }

    /// A kustomization's `openapi:` field (`document`: the bytes of its `path:`), `reset` for
    /// the top kustomization. The custom document is read here (kustomize reads it when first
    /// needed, which in a build is right after).
    pub fn set_schema(
        &mut self,
        field: &BTreeMap<String, String>,
        document: Option<&[u8]>,
        reset: bool,
    ) -> Result<(), KustomizeError> {
        let already_set = !self.version.is_empty() || self.custom.is_some();
        if already_set && !reset {
            return Ok(());
        }
        let version = field.get("version");
        if let Some(bytes) = document {
            if version.is_some() {
                return Err(KustomizeError::invalid(
                    "builtin version and custom schema provided, cannot use both",
                ));
            }
            self.custom = Some(parse_document(bytes)?);
            self.version = "custom".to_owned();
            self.initialized = false;
            return Ok(());
        }
        self.version = version.cloned().unwrap_or_default();
        if self.version.is_empty() {
            return Ok(());
        }
        if self.version != BUILTIN_VERSION {
            return Err(KustomizeError::invalid(
                "the specified OpenAPI version is not built in",
            ));
        }
        self.custom = None;
        self.initialized = false;
        Ok(())
    }

    /// kustomize's `IsNamespaceScoped`: `Some(namespaced)` when known, `None` when not (then
    /// kustomize treats the kind as namespaced). Asking may load the schema, as in kustomize.
    pub fn is_namespace_scoped(&mut self, api_version: &str, kind: &str) -> Option<bool> {
        let key = (api_version.to_owned(), kind.to_owned());
        if let Some(namespaced) = builtin_data().precomputed.get(&key) {
            return Some(*namespaced);
        }
        if self.init_needed_for_scope() {
            self.init();
        }
        self.current.namespaced.get(&key).copied()
    }

    /// The schema strategic merges use now (loading it as kustomize does on first use).
    pub fn schema(&mut self) -> Arc<Schema> {
        self.init();
        if let Some(snapshot) = &self.snapshot {
            return snapshot.clone();
        }
        let snapshot = Arc::new(self.current.clone());
        self.snapshot = Some(snapshot.clone());
        snapshot
    }

    fn init_needed_for_scope(&mut self) -> bool {
        if self.initialized {
            return false;
        }
        if self.custom.is_some() {
            return true;
        }
        if self.version.is_empty() || self.version == BUILTIN_VERSION {
            if self.builtin_status == BuiltinStatus::NotParsed {
                self.builtin_status = BuiltinStatus::Delayed;
            }
            return false;
        }
        true
    }

    fn init(&mut self) {
        if self.initialized {
            return;
        }
        self.initialized = true;
        self.snapshot = None;
        let data = builtin_data();
        if let Some(custom) = &self.custom {
            self.current.add_document(custom);
        } else {
            self.current.add_document(&data.kubernetes);
            self.builtin_status = BuiltinStatus::Parsed;
        }
        if self.builtin_status == BuiltinStatus::Delayed {
            self.current.add_document(&data.kubernetes);
            self.builtin_status = BuiltinStatus::Parsed;
        }
        self.current.add_document(&data.kustomization);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const CUSTOM: &str = r##"{
      "definitions": {
        "v1alpha1.MyCRD": {
          "type": "object",
          "properties": {
            "spec": {"properties": {"items": {
              "type": "array",
              "items": {"$ref": "#/definitions/v1alpha1.Item"},
              "x-kubernetes-patch-strategy": "merge",
              "x-kubernetes-patch-merge-key": "id"
            }}}
          },
          "x-kubernetes-group-version-kind": [{"group": "example.com", "kind": "MyCRD", "version": "v1alpha1"}]
        },
        "v1alpha1.Item": {"properties": {"id": {"type": "string"}}}
      },
      "paths": {
        "/apis/example.com/v1alpha1/mycrds": {"get": {"x-kubernetes-group-version-kind": {"group": "example.com", "kind": "MyCRD", "version": "v1alpha1"}}},
        "/apis/example.com/v1alpha1/namespaces/{namespace}/mycrds": {"get": {"x-kubernetes-group-version-kind": {"group": "example.com", "kind": "MyCRD", "version": "v1alpha1"}}}
      }
    }"##;

    #[test]
    fn builtin_data_decodes() {
        let data: BuiltinData = serde_json::from_str(BUILTIN_DATA).expect("built-in data");
        assert!(data.kubernetes.definitions.len() > 600);
        assert_eq!(data.precomputed.len(), 82);
    }

    #[test]
    fn builtin_data_decodes_with_its_merge_keys() {
        let schema = Schema::builtin();
        assert!(
            schema.definitions.len() > 600,
            "{}",
            schema.definitions.len()
        );
        let deployment = schema
            .for_type("apps/v1", "Deployment")
            .expect("Deployment");
        let containers = deployment
            .lookup(&["spec", "template", "spec", "containers"])
            .expect("containers");
        assert!(containers.merges_lists());
        assert_eq!(
            containers.patch_strategy_and_keys(),
            ("merge", vec!["name".to_owned()])
        );
        let ports = containers.lookup(&["[]", "ports"]).expect("ports");
        assert_eq!(
            ports.patch_strategy_and_keys().1,
            vec!["containerPort".to_owned(), "protocol".to_owned()]
        );
        let volumes = deployment
            .lookup(&["spec", "template", "spec", "volumes"])
            .expect("volumes");
        assert_eq!(volumes.patch_strategy_and_keys().0, "merge,retainKeys");
        assert!(volumes.merges_lists());
    }

    #[test]
    fn lists_without_a_strategy_are_not_merged() {
        let schema = Schema::builtin();
        let pod = schema.for_type("v1", "Pod").expect("Pod");
        let args = pod
            .lookup(&["spec", "containers", "[]", "args"])
            .expect("args");
        assert!(!args.merges_lists());
        let tolerations = pod.lookup(&["spec", "tolerations"]).expect("tolerations");
        assert!(!tolerations.merges_lists());
        // Finalizers: merged, without a key (a list of strings).
        let finalizers = pod.lookup(&["metadata", "finalizers"]).expect("finalizers");
        assert_eq!(finalizers.patch_strategy_and_keys(), ("merge", vec![]));
    }

    #[test]
    fn map_values_take_the_additional_properties_schema() {
        let schema = Schema::builtin();
        let pod = schema.for_type("v1", "Pod").expect("Pod");
        // Resource quantities: a map of strings; any key gives the value schema.
        assert!(pod
            .lookup(&["spec", "containers", "[]", "resources", "limits", "cpu"])
            .is_some());
        assert!(pod.lookup(&["spec", "noSuchField"]).is_none());
        assert!(pod.lookup(&["spec", "containers", "noSuchField"]).is_none());
    }

    #[test]
    fn scopes_come_from_the_table_and_the_paths() {
        let schema = Schema::builtin();
        assert_eq!(
            schema.is_namespaced("rbac.authorization.k8s.io", "v1", "ClusterRole"),
            Some(false)
        );
        assert_eq!(schema.is_namespaced("apps", "v1", "Deployment"), Some(true));
        assert_eq!(schema.is_namespaced("", "v1", "Namespace"), Some(false));
        assert_eq!(schema.is_namespaced("example.com", "v1", "Foo"), None);
    }

    #[test]
    fn a_custom_document_replaces_the_builtin_schema() {
        let schema =
            Schema::from_openapi_field(&field(&[("path", "schema.json")]), Some(CUSTOM.as_bytes()))
                .expect("custom");
        let crd = schema
            .for_type("example.com/v1alpha1", "MyCRD")
            .expect("MyCRD");
        let items = crd.lookup(&["spec", "items"]).expect("items");
        assert_eq!(
            items.patch_strategy_and_keys(),
            ("merge", vec!["id".to_owned()])
        );
        assert!(items.elements().and_then(|e| e.field("id")).is_some());
        assert!(schema.for_type("apps/v1", "Deployment").is_none());
        // The precomputed table still answers for built-in kinds; the document for its own.
        assert_eq!(schema.is_namespaced("", "v1", "Namespace"), Some(false));
        assert_eq!(
            schema.is_namespaced("example.com", "v1alpha1", "MyCRD"),
            Some(true)
        );
    }

    #[test]
    fn the_openapi_field_rules() {
        let both = Schema::from_openapi_field(
            &field(&[("path", "s.json"), ("version", BUILTIN_VERSION)]),
            Some(CUSTOM.as_bytes()),
        );
        assert!(both.is_err());
        assert!(Schema::from_openapi_field(&field(&[("version", "v1.14.1")]), None).is_err());
        let version = Schema::from_openapi_field(&field(&[("version", BUILTIN_VERSION)]), None)
            .expect("builtin version");
        assert!(version.for_type("apps/v1", "Deployment").is_some());
        let none = Schema::from_openapi_field(&BTreeMap::new(), None).expect("default");
        assert!(none.for_type("apps/v1", "Deployment").is_some());
        assert!(Schema::from_openapi_field(&field(&[("path", "x")]), Some(b"[1, 2")).is_err());
    }

    #[test]
    fn a_base_schema_after_a_scope_question_adds_the_builtin_one() {
        // A kind outside the table asked about first: the built-in schema joins the custom.
        let mut state = SchemaState::new();
        state.set_schema(&BTreeMap::new(), None, true).expect("top");
        assert_eq!(state.is_namespace_scoped("example.com/v1", "Foo"), None);
        state
            .set_schema(
                &field(&[("path", "s.json")]),
                Some(CUSTOM.as_bytes()),
                false,
            )
            .expect("base");
        let schema = state.schema();
        assert!(schema.for_type("apps/v1", "Deployment").is_some());
        assert!(schema.for_type("example.com/v1alpha1", "MyCRD").is_some());

        // Nothing asked first: the custom schema alone.
        let mut state = SchemaState::new();
        state.set_schema(&BTreeMap::new(), None, true).expect("top");
        assert_eq!(
            state.is_namespace_scoped("apps/v1", "Deployment"),
            Some(true)
        );
        state
            .set_schema(
                &field(&[("path", "s.json")]),
                Some(CUSTOM.as_bytes()),
                false,
            )
            .expect("base");
        assert!(state.schema().for_type("apps/v1", "Deployment").is_none());

        // A later field does not replace an earlier one unless it is the top's.
        state
            .set_schema(&field(&[("version", BUILTIN_VERSION)]), None, false)
            .expect("second base");
        assert!(state.schema().for_type("apps/v1", "Deployment").is_none());
    }

    #[test]
    fn references_resolve_through_definitions() {
        let schema = Schema::builtin();
        let spec = schema
            .definition("io.k8s.api.apps.v1.Deployment")
            .and_then(|d| d.field("spec"))
            .expect("spec");
        assert!(spec
            .field("template")
            .and_then(|t| t.field("spec"))
            .is_some());
        let volume_mounts = schema
            .definition("io.k8s.api.core.v1.Container")
            .and_then(|c| c.field("volumeMounts"))
            .expect("volumeMounts");
        assert_eq!(volume_mounts.merge_key(), Some("mountPath"));
        assert!(schema
            .lookup_reference("#/definitions/io.k8s.api.core.v1.PodSpec/properties/containers")
            .is_some());
        assert!(schema.lookup_reference("#/components/x").is_none());
    }
}
