//! The walk over the target and the patch together, as kustomize's kyaml merges them: maps
//! field by field (in sorted field order), scalars and unmerged lists taken from the patch,
//! and the `$patch` directives of maps and lists.

use super::tree::{Kind, NodeId, NodeRef, Tree};
use crate::kustomize::error::KustomizeError;
use crate::kustomize::openapi::{FieldSchema, Schema};

/// The nodes walked together: the target's (`dest`) and the patch's (`origin`), either absent.
pub(super) type Sources = [Option<NodeRef>; 2];

const DEST: usize = 0;
const ORIGIN: usize = 1;

/// The directive key.
const PATCH_DIRECTIVE: &str = "$patch";

/// A `$patch` directive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Directive {
    Merge,
    Replace,
    Delete,
}

/// The merge of one target with one patch.
pub(super) struct Walker<'s> {
    pub tree: Tree,
    pub schema: &'s Schema,
    /// New list elements go before the target's (as kustomize's patches do), not after.
    pub prepend: bool,
}

impl<'s> Walker<'s> {
    /// Merges `sources` (with the schema of their position, when known) and returns the
    /// result node; none when the result is to be removed.
    pub fn walk(
        &mut self,
        schema: Option<FieldSchema<'s>>,
        sources: Sources,
    ) -> Result<Option<NodeRef>, KustomizeError> {
        let schema = schema.or_else(|| self.schema_of_objects(&sources));
        let kind = sources
            .iter()
            .flatten()
            .find(|node| !self.tree.is_null(node.id))
            .map(|node| self.tree.kind(node.id));
        match kind {
            None => self.walk_map(schema, sources),
            Some(kind) => {
                for node in sources.iter().flatten() {
                    self.tree.check_kind(node.id, kind)?;
                }
                match kind {
                    Kind::Mapping => self.walk_map(schema, sources),
                    Kind::Sequence if schema.is_some_and(|s| s.merges_lists()) => {
                        self.walk_associative_list(schema, sources)
                    }
                    Kind::Sequence => Ok(visit_replaced_list(&sources)),
                    Kind::Scalar => Ok(sources[ORIGIN].or(sources[DEST])),
                }
            }
        }
    }

    /// Where no schema is known for a position, the schema of the kind the nodes there declare
    /// (`apiVersion` and `kind`), target first.
    fn schema_of_objects(&self, sources: &Sources) -> Option<FieldSchema<'s>> {
        sources.iter().flatten().find_map(|node| {
            if self.tree.is_null(node.id) {
                return None;
            }
            let text_of = |field: &str| {
                self.tree
                    .field(node.id, field)
                    .filter(|value| !self.tree.nil_or_empty(*value))
                    .map(|value| self.tree.text(value).to_owned())
                    .filter(|text| !text.is_empty())
            };
            let api_version = text_of("apiVersion")?;
            let kind = text_of("kind")?;
            self.schema.for_type(&api_version, &kind)
        })
    }

    /// Merges maps: decides the resulting map (the target's, the patch's, or none), then
    /// merges every field either side has into it, in sorted order.
    fn walk_map(
        &mut self,
        schema: Option<FieldSchema<'s>>,
        mut sources: Sources,
    ) -> Result<Option<NodeRef>, KustomizeError> {
        let dest = self.visit_map(&sources)?;
        sources[DEST] = dest;
        let Some(dest) = dest else {
            return Ok(None);
        };
        let mut names: Vec<String> = sources
            .iter()
            .flatten()
            .flat_map(|node| self.tree.field_names(node.id))
            .collect();
        names.sort();
        names.dedup();
        for name in names {
            let field_schema = schema.and_then(|s| s.field(&name));
            let values = sources.map(|node| {
                node.and_then(|n| self.tree.field(n.id, &name))
                    .map(NodeRef::of)
            });
            let value = self.walk(field_schema, values)?;
            self.tree.set_field(dest.id, &name, value)?;
        }
        Ok(Some(dest))
    }

    /// The map a merge of maps starts from.
    fn visit_map(&mut self, sources: &Sources) -> Result<Option<NodeRef>, KustomizeError> {
        let [dest, origin] = *sources;
        if self.tree.missing_or_null(dest) {
            // Only the patch has it: it is added as it is, unless it deletes itself. A null
            // the target has and the patch does not name stays.
            let directive = self.directive(origin).unwrap_or(Directive::Merge);
            if directive == Directive::Delete {
                return Ok(None);
            }
            if let (None, Some(dest)) = (origin, dest) {
                let text = self.tree.text(dest.id).to_owned();
                if !text.is_empty() {
                    let id = self.tree.add_null(&text);
                    return Ok(Some(NodeRef { id, keep: true }));
                }
            }
            return Ok(origin);
        }
        if origin.is_some_and(|o| self.tree.is_null(o.id)) {
            return Ok(None);
        }
        Ok(match self.directive(origin)? {
            Directive::Delete => None,
            Directive::Replace => origin,
            Directive::Merge => dest,
        })
    }

    /// The list a merged (associative) list starts from.
    pub(super) fn visit_merged_list(
        &mut self,
        sources: &Sources,
    ) -> Result<Option<NodeRef>, KustomizeError> {
        let [dest, origin] = *sources;
        if self.tree.missing_or_null(dest) {
            return Ok(origin);
        }
        if origin.is_some_and(|o| self.tree.is_null(o.id)) {
            return Ok(None);
        }
        Ok(match self.directive(origin)? {
            Directive::Delete => None,
            Directive::Replace => origin,
            Directive::Merge => dest,
        })
    }

    /// Reads (and removes) the patch node's `$patch` directive: a map's own `$patch` field, or
    /// a list's element that is only `{$patch: ...}`.
    fn directive(&mut self, origin: Option<NodeRef>) -> Result<Directive, KustomizeError> {
        let Some(origin) = origin else {
            return Ok(Directive::Merge);
        };
        match self.tree.kind(origin.id) {
            Kind::Mapping => self.map_directive(origin.id),
            Kind::Sequence => self.list_directive(origin.id),
            Kind::Scalar => Err(KustomizeError::invalid(format!(
                "no implemented strategic merge patch strategy for scalar ('{}')",
                self.tree.text(origin.id)
            ))),
        }
    }

    fn map_directive(&mut self, id: NodeId) -> Result<Directive, KustomizeError> {
        let Ok(Some(value)) = self.tree.match_field(id, PATCH_DIRECTIVE, None) else {
            return Ok(Directive::Merge);
        };
        let directive = parse_directive(self.tree.text(value))?;
        self.tree.clear_field(id, PATCH_DIRECTIVE)?;
        Ok(directive)
    }

    fn list_directive(&mut self, id: NodeId) -> Result<Directive, KustomizeError> {
        let keys = [PATCH_DIRECTIVE.to_owned()];
        let Ok(Some(element)) = self.tree.match_element(id, &keys, &[], true) else {
            return Ok(Directive::Merge);
        };
        // Only an element that is the directive alone speaks for the list.
        if self.tree.content(element).len() > 2 {
            return Ok(Directive::Merge);
        }
        let Ok(Some(value)) = self.tree.match_field(element, PATCH_DIRECTIVE, None) else {
            return Ok(Directive::Merge);
        };
        let text = self.tree.text(value).to_owned();
        let directive = parse_directive(&text)?;
        self.tree.set_element(id, None, &keys, &[text])?;
        Ok(directive)
    }
}

/// A list merged as a whole: the patch's when it has one (a null removes it), else the
/// target's.
fn visit_replaced_list(sources: &Sources) -> Option<NodeRef> {
    sources[ORIGIN].or(sources[DEST])
}

fn parse_directive(text: &str) -> Result<Directive, KustomizeError> {
    match text {
        "merge" => Ok(Directive::Merge),
        "replace" => Ok(Directive::Replace),
        "delete" => Ok(Directive::Delete),
        other => Err(KustomizeError::invalid(format!(
            "unknown patch strategy '{other}'"
        ))),
    }
}
