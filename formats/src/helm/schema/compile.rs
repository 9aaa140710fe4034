//! The schema document compiled as santhosh-tekuri/jsonschema compiles it: resources (`$id`),
//! anchors, the draft of each schema, its keywords (only those its draft knows) and resolved
//! references.

use std::collections::{BTreeMap, HashMap};

use regex::Regex;
use serde_json::{Map, Value as Json};

use super::meta;
use super::{
    escape, join_url, json_type, lookup, percent_decode, quote, split_fragment, Draft, ROOT_URL,
};
// ---- the document's resources ----

/// A schema resource: the document, or a subschema with its own `$id`.
pub(super) struct Resource {
    pub(super) ptr: String,
    pub(super) url: String,
    pub(super) draft: Draft,
    pub(super) anchors: BTreeMap<String, String>,
    pub(super) dynamic_anchors: Vec<String>,
}

/// The keyword positions holding subschemas in a draft (`*`: every member, `[]`: every item).
pub(super) fn subschema_paths(d: Draft) -> Vec<(&'static str, char)> {
    let mut v = vec![
        ("definitions", '*'),
        ("not", ' '),
        ("allOf", '['),
        ("anyOf", '['),
        ("oneOf", '['),
        ("properties", '*'),
        ("additionalProperties", ' '),
        ("patternProperties", '*'),
        ("items", ' '),
        ("items", '['),
        ("additionalItems", ' '),
        ("dependencies", '*'),
    ];
    if d >= Draft::D6 {
        v.extend([("propertyNames", ' '), ("contains", ' ')]);
    }
    if d >= Draft::D7 {
        v.extend([("if", ' '), ("then", ' '), ("else", ' ')]);
    }
    if d >= Draft::D2019 {
        v.extend([
            ("$defs", '*'),
            ("dependentSchemas", '*'),
            ("unevaluatedProperties", ' '),
            ("unevaluatedItems", ' '),
            ("contentSchema", ' '),
        ]);
    }
    if d >= Draft::D2020 {
        v.push(("prefixItems", '['));
    }
    v
}

/// The subschemas of `obj` at `ptr` for a draft: (pointer, value).
pub(super) fn subschemas<'a>(
    obj: &'a Map<String, Json>,
    ptr: &str,
    d: Draft,
) -> Vec<(String, &'a Json)> {
    let mut out = Vec::new();
    for (kw, how) in subschema_paths(d) {
        let Some(v) = obj.get(kw) else { continue };
        let base = format!("{ptr}/{}", escape(kw));
        match (how, v) {
            (' ', Json::Object(_) | Json::Bool(_)) => out.push((base, v)),
            ('*', Json::Object(m)) => {
                out.extend(m.iter().map(|(k, s)| (format!("{base}/{}", escape(k)), s)))
            }
            ('[', Json::Array(a)) => out.extend(
                a.iter()
                    .enumerate()
                    .map(|(i, s)| (format!("{base}/{i}"), s)),
            ),
            _ => {}
        }
    }
    out
}

/// The schema document with its resources, anchors and metaschema check.
pub(super) struct Doc<'a> {
    pub(super) root: &'a Json,
    pub(super) resources: Vec<Resource>,
    pub(super) meta_errors: Vec<(String, String)>,
    /// The draft of the first metaschema violation's resource (named in helm's message).
    pub(super) meta_draft: Option<Draft>,
}

impl<'a> Doc<'a> {
    pub(super) fn new(root: &'a Json) -> Result<Doc<'a>, String> {
        let mut doc = Doc {
            root,
            resources: Vec::new(),
            meta_errors: Vec::new(),
            meta_draft: None,
        };
        doc.collect(root, ROOT_URL, "", Draft::D2020)?;
        Ok(doc)
    }

    pub(super) fn collect(
        &mut self,
        sch: &'a Json,
        base: &str,
        ptr: &str,
        fallback: Draft,
    ) -> Result<(), String> {
        let Json::Object(obj) = sch else {
            if ptr.is_empty() {
                self.resources.push(Resource {
                    ptr: String::new(),
                    url: base.to_string(),
                    draft: fallback,
                    anchors: BTreeMap::new(),
                    dynamic_anchors: Vec::new(),
                });
                if !sch.is_boolean() {
                    self.meta_errors.push((
                        String::new(),
                        format!("got {}, want boolean or object", json_type(sch)),
                    ));
                    self.meta_draft.get_or_insert(fallback);
                }
            }
            return Ok(());
        };
        let mut draft = fallback;
        let mut has_schema = false;
        if let Some(Json::String(s)) = obj.get("$schema") {
            has_schema = true;
            draft = match Draft::from_url(s) {
                Some(d) => d,
                None if ptr.is_empty() || id_of(obj, fallback).is_some() => {
                    return Err(load_error(split_fragment(s).0));
                }
                None => fallback,
            };
        }
        let mut id = id_of(obj, draft);
        if id.is_none() && !ptr.is_empty() {
            draft = fallback;
            has_schema = false;
            id = id_of(obj, draft);
        }
        let mut base = base.to_string();
        if let Some(id) = &id {
            base = join_url(&base, split_fragment(id).0);
        }
        if (id.is_some() || ptr.is_empty()) && !self.resources.iter().any(|r| r.url == base) {
            self.resources.push(Resource {
                ptr: ptr.to_string(),
                url: base.clone(),
                draft: if has_schema || ptr.is_empty() {
                    draft
                } else {
                    fallback
                },
                anchors: BTreeMap::new(),
                dynamic_anchors: Vec::new(),
            });
        }
        let Some(ri) = self.resources.iter().position(|r| r.url == base) else {
            return Ok(());
        };
        let rdraft = self.resources[ri].draft;
        self.collect_anchors(obj, ptr, ri);
        let before = self.meta_errors.len();
        meta::check(obj, ptr, rdraft, &mut self.meta_errors);
        if self.meta_errors.len() > before {
            self.meta_draft.get_or_insert(rdraft);
        }
        for (p, sub) in subschemas(obj, ptr, draft) {
            self.collect(sub, &base, &p, rdraft)?;
        }
        Ok(())
    }

    pub(super) fn collect_anchors(&mut self, obj: &Map<String, Json>, ptr: &str, ri: usize) {
        let res = &mut self.resources[ri];
        let d = res.draft;
        if d < Draft::D2019 {
            if obj.contains_key("$ref") {
                return;
            }
            if let Some(Json::String(id)) = obj.get(d.id_keyword()) {
                let frag = percent_decode(split_fragment(id).1);
                if !frag.is_empty() && !frag.starts_with('/') {
                    res.anchors.entry(frag).or_insert_with(|| ptr.to_string());
                }
            }
            return;
        }
        if let Some(Json::String(a)) = obj.get("$anchor") {
            res.anchors
                .entry(a.clone())
                .or_insert_with(|| ptr.to_string());
        }
        if d >= Draft::D2020 {
            if let Some(Json::String(a)) = obj.get("$dynamicAnchor") {
                res.anchors
                    .entry(a.clone())
                    .or_insert_with(|| ptr.to_string());
                res.dynamic_anchors.push(a.clone());
            }
        }
    }

    /// The resource a pointer belongs to (the deepest one above it).
    pub(super) fn resource_of(&self, ptr: &str) -> usize {
        let mut p = ptr;
        loop {
            if let Some(i) = self.resources.iter().position(|r| r.ptr == p) {
                return i;
            }
            match p.rfind('/') {
                Some(i) => p = &p[..i],
                None => return 0,
            }
        }
    }

    /// Resolves a reference made at `ptr`: `Ok(Some(pointer))` in this document, `Ok(None)`
    /// for a `urn:` (the permissive schema), `Err` for anything that would have to be loaded.
    pub(super) fn resolve(&self, ptr: &str, reference: &str) -> Result<Option<String>, String> {
        let base = &self.resources[self.resource_of(ptr)].url;
        let (u, frag) = split_fragment(reference);
        let url = join_url(base, u);
        let frag = percent_decode(frag);
        let Some(res) = self.resources.iter().find(|r| r.url == url) else {
            if url.starts_with("urn:") {
                return Ok(None);
            }
            return Err(load_error(&url));
        };
        if frag.is_empty() || frag.starts_with('/') {
            let p = format!("{}{frag}", res.ptr);
            if lookup(self.root, &p).is_none() {
                return Err(format!(
                    "json-pointer in \"{url}#{}\" not found",
                    encode_fragment(&p)
                ));
            }
            Ok(Some(p))
        } else {
            match res.anchors.get(&frag) {
                Some(p) => Ok(Some(p.clone())),
                None => Err(format!(
                    "anchor in \"{url}#{frag}\" not found in schema \"{ROOT_URL}\""
                )),
            }
        }
    }
}

/// A schema's `$id` (draft-04: `id`) without its fragment; ignored next to `$ref` before
/// 2019-09, as helm's `getID` ignores it.
pub(super) fn id_of(obj: &Map<String, Json>, d: Draft) -> Option<String> {
    if d < Draft::D2019 && obj.contains_key("$ref") {
        return None;
    }
    let id = obj.get(d.id_keyword())?.as_str()?;
    let id = split_fragment(id).0;
    (!id.is_empty()).then(|| id.to_string())
}

/// helm's error for a document it would have to load; pallet loads none.
pub(super) fn load_error(url: &str) -> String {
    let why = if url.starts_with("http://") || url.starts_with("https://") {
        "pallet does not fetch schemas from the network while rendering"
    } else if url.starts_with("file:") {
        "pallet does not read files outside the chart while rendering"
    } else {
        "no loader for this URL scheme"
    };
    format!("failing loading \"{url}\": {why}")
}

/// A pointer as a URL fragment (helm's `encode`: each token path-escaped).
pub(super) fn encode_fragment(ptr: &str) -> String {
    ptr.split('/')
        .map(|t| {
            t.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=:@".contains(c) {
                        c.to_string()
                    } else {
                        let mut b = [0u8; 4];
                        c.encode_utf8(&mut b)
                            .bytes()
                            .map(|x| format!("%{x:02X}"))
                            .collect()
                    }
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("/")
}

// ---- compiled schemas ----

/// Schema `additionalProperties`/`additionalItems`: a boolean or a subschema.
pub(super) enum Additional {
    Bool(bool),
    Schema(usize),
}

/// `items` before 2020-12: one schema for all, or one per position.
#[derive(Default)]
pub(super) enum Items {
    #[default]
    None,
    All(usize),
    Tuple(Vec<usize>),
}

pub(super) enum Dependency {
    Required(Vec<String>),
    Schema(usize),
}

/// One compiled schema object (helm's `Schema`), keywords filtered by its draft.
#[derive(Default)]
pub(super) struct Keywords {
    pub(super) r#ref: Option<usize>,
    pub(super) recursive_ref: Option<usize>,
    pub(super) recursive_anchor: bool,
    pub(super) dynamic_ref: Option<(usize, Option<String>)>,
    pub(super) dynamic_anchor: Option<String>,
    pub(super) types: Vec<&'static str>,
    pub(super) r#const: Option<Json>,
    pub(super) r#enum: Option<Vec<Json>>,
    pub(super) format: Option<String>,
    pub(super) all_of: Vec<usize>,
    pub(super) any_of: Vec<usize>,
    pub(super) one_of: Vec<usize>,
    pub(super) not: Option<usize>,
    pub(super) items: Items,
    pub(super) additional_items: Option<Additional>,
    pub(super) prefix_items: Vec<usize>,
    pub(super) items2020: Option<usize>,
    pub(super) properties: Vec<(String, usize)>,
    pub(super) pattern_properties: Vec<(Regex, usize)>,
    pub(super) additional_properties: Option<Additional>,
    pub(super) dependencies: Vec<(String, Dependency)>,
    pub(super) property_names: Option<usize>,
    pub(super) contains: Option<usize>,
    pub(super) min_contains: Option<usize>,
    pub(super) max_contains: Option<usize>,
    pub(super) r#if: Option<usize>,
    pub(super) then: Option<usize>,
    pub(super) r#else: Option<usize>,
    pub(super) dependent_schemas: Vec<(String, usize)>,
    pub(super) dependent_required: Vec<(String, Vec<String>)>,
    pub(super) unevaluated_properties: Option<usize>,
    pub(super) unevaluated_items: Option<usize>,
    pub(super) minimum: Option<f64>,
    pub(super) maximum: Option<f64>,
    pub(super) exclusive_minimum: Option<f64>,
    pub(super) exclusive_maximum: Option<f64>,
    pub(super) multiple_of: Option<f64>,
    pub(super) min_length: Option<usize>,
    pub(super) max_length: Option<usize>,
    pub(super) pattern: Option<Regex>,
    pub(super) min_items: Option<usize>,
    pub(super) max_items: Option<usize>,
    pub(super) unique_items: bool,
    pub(super) min_properties: Option<usize>,
    pub(super) max_properties: Option<usize>,
    pub(super) required: Vec<String>,
}

pub(super) enum Body {
    Bool(bool),
    Obj(Box<Keywords>),
}

pub(super) struct Node {
    /// The schema's location, `file:///values.schema.json#/properties/a`.
    pub(super) location: String,
    pub(super) draft: Draft,
    /// The node of the schema's resource (for dynamic references).
    pub(super) resource: usize,
    /// `$dynamicAnchor`s of this node when it is a resource: name → node.
    pub(super) dynamic_anchors: BTreeMap<String, usize>,
    pub(super) body: Body,
}

pub(super) struct Compiled {
    pub(super) nodes: Vec<Node>,
    /// Whether any schema has `unevaluated*` (then evaluated members are tracked).
    pub(super) needs_eval: bool,
}

impl Compiled {
    pub(super) fn new(root: &Json) -> Result<Compiled, String> {
        let doc = Doc::new(root)?;
        if let Some((ptr, msg)) = doc.meta_errors.first() {
            let mut out = format!(
                "\"{ROOT_URL}#\" is not valid against metaschema: jsonschema validation failed with '{}#'",
                doc.meta_draft.unwrap_or(Draft::D2020).url()
            );
            out.push_str(&format!("\n- at {}: {msg}", quote(ptr)));
            for (p, m) in doc.meta_errors.iter().skip(1) {
                out.push_str(&format!("\n- at {}: {m}", quote(p)));
            }
            return Err(out);
        }
        let mut c = Compiler {
            doc: &doc,
            ptrs: Vec::new(),
            index: HashMap::new(),
            nodes: Vec::new(),
            needs_eval: false,
        };
        c.enqueue("");
        let mut i = 0;
        while i < c.ptrs.len() {
            let ptr = c.ptrs[i].clone();
            let node = c.compile(&ptr)?;
            c.nodes.push(node);
            i += 1;
        }
        Ok(Compiled {
            nodes: c.nodes,
            needs_eval: c.needs_eval,
        })
    }
}

pub(super) struct Compiler<'d, 'a> {
    pub(super) doc: &'d Doc<'a>,
    /// Pointer of each node, in node order (index = node).
    pub(super) ptrs: Vec<String>,
    /// Node of each pointer (schemas are compiled once, however often they are referenced).
    pub(super) index: HashMap<String, usize>,
    pub(super) nodes: Vec<Node>,
    pub(super) needs_eval: bool,
}

impl Compiler<'_, '_> {
    pub(super) fn enqueue(&mut self, ptr: &str) -> usize {
        match self.index.get(ptr) {
            Some(i) => *i,
            None => {
                self.ptrs.push(ptr.to_string());
                self.index.insert(ptr.to_string(), self.ptrs.len() - 1);
                self.ptrs.len() - 1
            }
        }
    }

    /// A permissive `true` node (for `urn:` references).
    pub(super) fn enqueue_true(&mut self) -> usize {
        // `#` and a pointer no document has: compiled as `true`.
        self.enqueue("#true")
    }

    pub(super) fn reference(&mut self, ptr: &str, r: &str) -> Result<usize, String> {
        match self.doc.resolve(ptr, r)? {
            Some(p) => Ok(self.enqueue(&p)),
            None => Ok(self.enqueue_true()),
        }
    }

    pub(super) fn compile(&mut self, ptr: &str) -> Result<Node, String> {
        let location = format!("{ROOT_URL}#{}", encode_fragment(ptr));
        if ptr == "#true" {
            return Ok(Node {
                location,
                draft: Draft::D2020,
                resource: 0,
                dynamic_anchors: BTreeMap::new(),
                body: Body::Bool(true),
            });
        }
        let ri = self.doc.resource_of(ptr);
        let res = &self.doc.resources[ri];
        let draft = res.draft;
        let resource = self.enqueue(&res.ptr.clone());
        let mut dynamic_anchors = BTreeMap::new();
        if draft >= Draft::D2020 && res.ptr == ptr {
            for a in res.dynamic_anchors.clone() {
                if let Some(p) = res.anchors.get(&a).cloned() {
                    let n = self.enqueue(&p);
                    dynamic_anchors.insert(a, n);
                }
            }
        }
        let value = lookup(self.doc.root, ptr).unwrap_or(&Json::Bool(true));
        let body = match value {
            Json::Object(o) if !o.is_empty() => Body::Obj(Box::new(self.keywords(o, ptr, draft)?)),
            Json::Bool(false) => Body::Bool(false),
            _ => Body::Bool(true),
        };
        Ok(Node {
            location,
            draft,
            resource,
            dynamic_anchors,
            body,
        })
    }

    pub(super) fn sub(&mut self, ptr: &str, kw: &str, o: &Map<String, Json>) -> Option<usize> {
        o.get(kw)?;
        Some(self.enqueue(&format!("{ptr}/{}", escape(kw))))
    }

    pub(super) fn arr(&mut self, ptr: &str, kw: &str, o: &Map<String, Json>) -> Vec<usize> {
        let n = o.get(kw).and_then(|v| v.as_array()).map_or(0, Vec::len);
        (0..n)
            .map(|i| self.enqueue(&format!("{ptr}/{}/{i}", escape(kw))))
            .collect()
    }

    pub(super) fn map(
        &mut self,
        ptr: &str,
        kw: &str,
        o: &Map<String, Json>,
    ) -> Vec<(String, usize)> {
        let keys: Vec<String> = o
            .get(kw)
            .and_then(|v| v.as_object())
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        keys.into_iter()
            .map(|k| {
                let n = self.enqueue(&format!("{ptr}/{}/{}", escape(kw), escape(&k)));
                (k, n)
            })
            .collect()
    }

    pub(super) fn additional(
        &mut self,
        ptr: &str,
        kw: &str,
        o: &Map<String, Json>,
    ) -> Option<Additional> {
        match o.get(kw)? {
            Json::Bool(b) => Some(Additional::Bool(*b)),
            _ => self.sub(ptr, kw, o).map(Additional::Schema),
        }
    }

    /// Compiles one schema object's keywords, only those its draft `d` knows.
    pub(super) fn keywords(
        &mut self,
        o: &Map<String, Json>,
        ptr: &str,
        d: Draft,
    ) -> Result<Keywords, String> {
        let mut k = Keywords::default();
        if let Some(Json::String(r)) = o.get("$ref") {
            k.r#ref = Some(self.reference(ptr, r)?);
            if d < Draft::D2019 {
                // Before 2019-09, every keyword next to `$ref` is ignored.
                return Ok(k);
            }
        }
        // The order below is the order subschemas are enqueued in, which numbers the nodes.
        self.applicators(&mut k, o, ptr, d)?;
        assertions(&mut k, o, ptr, d)?;
        self.draft6_7_keywords(&mut k, o, ptr, d);
        if d >= Draft::D2019 {
            self.draft2019_keywords(&mut k, o, ptr)?;
        }
        if d >= Draft::D2020 {
            self.draft2020_keywords(&mut k, o, ptr)?;
        }
        Ok(k)
    }

    /// The applicators every draft knows: combinators, `items`, properties, dependencies.
    fn applicators(
        &mut self,
        k: &mut Keywords,
        o: &Map<String, Json>,
        ptr: &str,
        d: Draft,
    ) -> Result<(), String> {
        k.all_of = self.arr(ptr, "allOf", o);
        k.any_of = self.arr(ptr, "anyOf", o);
        k.one_of = self.arr(ptr, "oneOf", o);
        k.not = self.sub(ptr, "not", o);
        if d < Draft::D2020 {
            match o.get("items") {
                Some(Json::Array(_)) => {
                    k.items = Items::Tuple(self.arr(ptr, "items", o));
                    k.additional_items = self.additional(ptr, "additionalItems", o);
                }
                Some(_) => k.items = Items::All(self.enqueue(&format!("{ptr}/items"))),
                None => {}
            }
        }
        k.properties = self.map(ptr, "properties", o);
        for (p, n) in self.map(ptr, "patternProperties", o) {
            let re = Regex::new(&p).map_err(|e| {
                format!("invalid regex {p:?} at \"{ROOT_URL}#{ptr}/patternProperties\": {e}")
            })?;
            k.pattern_properties.push((re, n));
        }
        k.additional_properties = self.additional(ptr, "additionalProperties", o);
        if let Some(Json::Object(deps)) = o.get("dependencies") {
            for (name, dep) in deps {
                let dep = match dep {
                    Json::Array(_) => Dependency::Required(string_list(Some(dep))),
                    _ => Dependency::Schema(
                        self.enqueue(&format!("{ptr}/dependencies/{}", escape(name))),
                    ),
                };
                k.dependencies.push((name.clone(), dep));
            }
        }
        Ok(())
    }

    /// The keywords drafts 6 and 7 added: `contains`, `propertyNames`, `const`, `if`/`then`/`else`.
    fn draft6_7_keywords(&mut self, k: &mut Keywords, o: &Map<String, Json>, ptr: &str, d: Draft) {
        if d >= Draft::D6 {
            k.contains = self.sub(ptr, "contains", o);
            k.property_names = self.sub(ptr, "propertyNames", o);
            k.r#const = o.get("const").cloned();
        }
        if d >= Draft::D7 {
            k.r#if = self.sub(ptr, "if", o);
            if k.r#if.is_some() {
                // A boolean `if` makes one branch unreachable: it is not compiled.
                let b = o.get("if").and_then(|v| v.as_bool());
                if b != Some(false) {
                    k.then = self.sub(ptr, "then", o);
                }
                if b != Some(true) {
                    k.r#else = self.sub(ptr, "else", o);
                }
            }
        }
    }

    /// The keywords 2019-09 added: recursive references, `*Contains`, `dependent*`,
    /// `unevaluated*`.
    fn draft2019_keywords(
        &mut self,
        k: &mut Keywords,
        o: &Map<String, Json>,
        ptr: &str,
    ) -> Result<(), String> {
        if let Some(Json::String(r)) = o.get("$recursiveRef") {
            k.recursive_ref = Some(self.reference(ptr, r)?);
        }
        k.recursive_anchor = o.get("$recursiveAnchor") == Some(&Json::Bool(true));
        if k.contains.is_some() {
            k.min_contains = count(o, "minContains");
            k.max_contains = count(o, "maxContains");
        }
        if let Some(Json::Object(m)) = o.get("dependentRequired") {
            for (name, req) in m {
                if req.is_array() {
                    k.dependent_required
                        .push((name.clone(), string_list(Some(req))));
                }
            }
        }
        k.dependent_schemas = self.map(ptr, "dependentSchemas", o);
        k.unevaluated_items = self.sub(ptr, "unevaluatedItems", o);
        k.unevaluated_properties = self.sub(ptr, "unevaluatedProperties", o);
        if k.unevaluated_items.is_some() || k.unevaluated_properties.is_some() {
            self.needs_eval = true;
        }
        Ok(())
    }

    /// The keywords 2020-12 added: dynamic references, `prefixItems` and its `items`.
    fn draft2020_keywords(
        &mut self,
        k: &mut Keywords,
        o: &Map<String, Json>,
        ptr: &str,
    ) -> Result<(), String> {
        if let Some(Json::String(r)) = o.get("$dynamicRef") {
            let target = self.reference(ptr, r)?;
            let frag = percent_decode(split_fragment(r).1);
            let anchor = (!frag.is_empty() && !frag.starts_with('/')).then_some(frag);
            k.dynamic_ref = Some((target, anchor));
        }
        k.dynamic_anchor = o
            .get("$dynamicAnchor")
            .and_then(|a| a.as_str())
            .map(str::to_string);
        k.prefix_items = self.arr(ptr, "prefixItems", o);
        k.items2020 = self.sub(ptr, "items", o);
        Ok(())
    }
}

/// The assertions (no subschemas): type, enum, numeric, string, array and object bounds, format.
fn assertions(k: &mut Keywords, o: &Map<String, Json>, ptr: &str, d: Draft) -> Result<(), String> {
    k.types = match o.get("type") {
        Some(Json::String(t)) => type_list(std::slice::from_ref(&Json::String(t.clone()))),
        Some(Json::Array(a)) => type_list(a),
        _ => Vec::new(),
    };
    if let Some(Json::Array(a)) = o.get("enum") {
        k.r#enum = Some(a.clone());
    }
    k.multiple_of = number(o, "multipleOf");
    k.maximum = number(o, "maximum");
    // Draft 4's boolean `exclusiveMaximum` turns `maximum` exclusive.
    if o.get("exclusiveMaximum") == Some(&Json::Bool(true)) {
        k.exclusive_maximum = k.maximum.take();
    } else {
        k.exclusive_maximum = number(o, "exclusiveMaximum");
    }
    k.minimum = number(o, "minimum");
    if o.get("exclusiveMinimum") == Some(&Json::Bool(true)) {
        k.exclusive_minimum = k.minimum.take();
    } else {
        k.exclusive_minimum = number(o, "exclusiveMinimum");
    }
    k.min_length = count(o, "minLength");
    k.max_length = count(o, "maxLength");
    if let Some(Json::String(p)) = o.get("pattern") {
        k.pattern =
            Some(Regex::new(p).map_err(|e| {
                format!("invalid regex {p:?} at \"{ROOT_URL}#{ptr}/pattern\": {e}")
            })?);
    }
    k.min_items = count(o, "minItems");
    k.max_items = count(o, "maxItems");
    k.unique_items = o.get("uniqueItems") == Some(&Json::Bool(true));
    k.max_properties = count(o, "maxProperties");
    k.min_properties = count(o, "minProperties");
    k.required = string_list(o.get("required"));
    if d < Draft::D2019 {
        // helm asserts formats for drafts before 2019-09 only.
        k.format = o.get("format").and_then(|f| f.as_str()).map(str::to_string);
    }
    Ok(())
}

/// Keyword `kw` as a number, if it is one.
fn number(o: &Map<String, Json>, kw: &str) -> Option<f64> {
    o.get(kw).and_then(|v| v.as_f64())
}

/// Keyword `kw` as a count: a non-negative whole number (other values are ignored).
fn count(o: &Map<String, Json>, kw: &str) -> Option<usize> {
    o.get(kw)
        .and_then(|v| v.as_f64())
        .filter(|f| f.fract() == 0.0 && *f >= 0.0)
        .map(|f| f as usize)
}

/// The strings of an array keyword (other items are skipped; a missing keyword gives none).
fn string_list(v: Option<&Json>) -> Vec<String> {
    v.and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Type names in helm's order (its bit set's order), unknown names dropped.
pub(super) fn type_list(a: &[Json]) -> Vec<&'static str> {
    const ORDER: [&str; 7] = [
        "null", "boolean", "number", "integer", "string", "array", "object",
    ];
    ORDER
        .into_iter()
        .filter(|t| a.iter().any(|x| x.as_str() == Some(t)))
        .collect()
}
