//! Output order: kustomize's legacy order by default (kinds in a fixed order, then by group,
//! version, kind, namespace and name), or `sortOptions` (`fifo` keeps build order; `legacy`
//! with custom first and last kinds).

use super::config::{gvk_sort_string, kind_rank, ORDER_FIRST, ORDER_LAST};
use super::error::KustomizeError;
use super::kustomization::SortOptions;
use super::resmap::ResMap;
use super::resource::{Gvk, ResId};
use super::transformers::gvk_string;

/// Orders the resources as the root kustomization's `sortOptions` (or the default) say.
pub(crate) fn apply(res: &mut ResMap, options: Option<&SortOptions>) -> Result<(), KustomizeError> {
    let (first, last): (Vec<String>, Vec<String>) = match options {
        None => (to_strings(&ORDER_FIRST), to_strings(&ORDER_LAST)),
        Some(options) => match options.order.as_str() {
            "fifo" => {
                if options.legacy_sort_options.is_some() {
                    return Err(KustomizeError::invalid(
                        "the field 'sortOptions.legacySortOptions' is set but the selected sort \
                         order is 'fifo', not 'legacy'",
                    )
                    .at_field("sortOptions"));
                }
                return Ok(());
            }
            "legacy" => match &options.legacy_sort_options {
                Some(legacy) => (legacy.order_first.clone(), legacy.order_last.clone()),
                None => (to_strings(&ORDER_FIRST), to_strings(&ORDER_LAST)),
            },
            _ => {
                return Err(KustomizeError::invalid(
                    "the field 'sortOptions.order' must be one of [fifo, legacy]",
                )
                .at_field("sortOptions.order"))
            }
        },
    };
    let mut keyed: Vec<(i64, String, String, usize)> = res
        .resources
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let id = r.cur_id();
            let rank = kind_rank(&id.gvk.kind, &first, &last);
            (rank, legacy_gvk_key(&id.gvk), legacy_id_key(&id), i)
        })
        .collect();
    keyed.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| {
                let (ga, gb) = (&res.resources[a.3].gvk(), &res.resources[b.3].gvk());
                if ga == gb {
                    return std::cmp::Ordering::Equal;
                }
                let namespaces = ga.kind == "Namespace"
                    && gb.kind == "Namespace"
                    && (ga.group.is_empty() || gb.group.is_empty());
                if namespaces {
                    b.1.cmp(&a.1)
                } else {
                    a.1.cmp(&b.1)
                }
            })
            .then_with(|| a.2.cmp(&b.2))
    });
    let order: Vec<usize> = keyed.into_iter().map(|k| k.3).collect();
    let mut resources: Vec<Option<_>> = std::mem::take(&mut res.resources)
        .into_iter()
        .map(Some)
        .collect();
    let mut origins: Vec<Option<_>> = std::mem::take(&mut res.origins)
        .into_iter()
        .map(Some)
        .collect();
    for i in order {
        if let (Some(r), Some(o)) = (resources[i].take(), origins[i].take()) {
            res.resources.push(r);
            res.origins.push(o);
        }
    }
    Ok(())
}

fn to_strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn legacy_gvk_key(gvk: &Gvk) -> String {
    gvk_sort_string(gvk)
}

fn legacy_id_key(id: &ResId) -> String {
    let namespace = if id.namespace.is_empty() {
        "~X"
    } else {
        &id.namespace
    };
    let name = if id.name.is_empty() { "~N" } else { &id.name };
    format!("{}|{namespace}|{name}", gvk_string(&id.gvk))
}
