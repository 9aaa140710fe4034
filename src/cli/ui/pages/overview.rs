//! The overview: counts per state, filters and search, one page of BundleDeployments, grouped
//! by the cluster they deploy to when some deploy to another cluster than the agent's.

use std::collections::BTreeMap;

use maud::{html, Markup};

use super::layout::badge;
use crate::api::LOCAL_CLUSTER;
use crate::cli::ui::index::{Listing, Query};
use crate::cli::ui::state::{age, BundleState, Summary};

/// The query string of `query` with some fields replaced (`page`, `state`).
pub fn query_string(query: &Query, state: Option<&str>, page: Option<usize>) -> String {
    let mut pairs: Vec<(&str, String)> = Vec::new();
    let state = state.unwrap_or(&query.state);
    for (key, value) in [
        ("state", state),
        ("label", &query.label),
        ("shard", &query.shard),
        ("cluster", &query.cluster),
        ("q", &query.q),
    ] {
        if !value.is_empty() {
            pairs.push((key, value.to_string()));
        }
    }
    if query.per_page != 0 {
        pairs.push(("per_page", query.per_page.to_string()));
    }
    match page {
        Some(p) if p > 1 => pairs.push(("page", p.to_string())),
        None if query.page > 1 => pairs.push(("page", query.page.to_string())),
        _ => {}
    }
    if pairs.is_empty() {
        return String::new();
    }
    let encoded = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish();
    format!("?{encoded}")
}

/// The page's rows by cluster (the agent's own first), each group in the order given (the
/// listing's, by name); one group when every row is on the agent's cluster.
pub fn by_cluster(rows: &[Summary]) -> Vec<(&str, Vec<&Summary>)> {
    let mut groups: BTreeMap<(bool, &str), Vec<&Summary>> = BTreeMap::new();
    for row in rows {
        let cluster = row.cluster.as_str();
        groups
            .entry((cluster != LOCAL_CLUSTER, cluster))
            .or_default()
            .push(row);
    }
    groups
        .into_iter()
        .map(|((_, cluster), rows)| (cluster, rows))
        .collect()
}

/// The overview's body.
pub fn overview(listing: &Listing, query: &Query, now: i64, watch: (bool, Option<&str>)) -> Markup {
    let (synced, error) = watch;
    html! {
        h1 { "Bundles" }
        @if let Some(error) = error {
            div.message.error role="alert" { (error) }
        }
        @if !synced && error.is_none() {
            div.message.notice role="status" { "Listing BundleDeployments…" }
        }
        nav.counts aria-label="Filter by state" {
            a href=(format!("/{}", query_string(query, Some(""), Some(1))))
              aria-current=[query.state.is_empty().then_some("true")] {
                "All " span.count { (listing.counts.values().sum::<usize>()) }
            }
            @for state in BundleState::ALL {
                @let count = listing.counts.get(&state).copied().unwrap_or(0);
                a class={"chip state-" (state.name())}
                  href=(format!("/{}", query_string(query, Some(state.name()), Some(1))))
                  aria-current=[(query.state.eq_ignore_ascii_case(state.name())).then_some("true")] {
                    (state.name()) " " span.count { (count) }
                }
            }
        }
        form.filters method="get" action="/" role="search" {
            input type="hidden" name="state" value=(query.state);
            label { "Search " input type="search" name="q" value=(query.q) placeholder="name, reason or message"; }
            label { "Labels " input type="text" name="label" value=(query.label) placeholder="team=payments,tier"; }
            label { "Shard " input type="text" name="shard" value=(query.shard) placeholder="key, or - for none" size="10"; }
            label { "Cluster " input type="text" name="cluster" value=(query.cluster) placeholder="in-cluster" size="12"; }
            button type="submit" { "Filter" }
        }
        p.summary id="matching" {
            (listing.matching) " of " (listing.total) " BundleDeployments"
            @if listing.pages > 1 { ", page " (listing.page) " of " (listing.pages) }
        }
        @if listing.rows.is_empty() {
            p { "Nothing matches." }
        } @else {
            div.table-wrap {
                table.bundles aria-describedby="matching" {
                    thead { tr {
                        th scope="col" { "Name" }
                        th scope="col" { "State" }
                        th scope="col" { "Format" }
                        th scope="col" { "Active" }
                        th scope="col" { "Reason" }
                        th scope="col" { "Since" }
                        th scope="col" { "Message" }
                    } }
                    @let groups = by_cluster(&listing.rows);
                    @let headed = groups.iter().any(|(cluster, _)| *cluster != LOCAL_CLUSTER);
                    @for (cluster, rows) in &groups {
                    tbody data-cluster=(cluster) {
                        @if headed {
                            tr.cluster-group {
                                th scope="rowgroup" colspan="7" {
                                    "Cluster " a href=(format!("/{}", query_string(&Query { cluster: cluster.to_string(), ..query.clone() }, None, Some(1)))) { (cluster) }
                                    " " span.count { (rows.len()) }
                                }
                            }
                        }
                        @for row in rows {
                            tr data-state=(row.state.name()) {
                                th scope="row" data-label="Name" { a href=(format!("/bundles/{}", row.name)) { (row.name) } }
                                td data-label="State" { (badge(row.state)) }
                                td data-label="Format" { (row.format) }
                                td data-label="Active" { (row.active_revision.map(|n| n.to_string()).unwrap_or_else(|| "-".into())) }
                                td data-label="Reason" { (row.reason) }
                                td data-label="Since" { (age(row.since, now)) }
                                td.message-cell data-label="Message" { (row.message) }
                            }
                        }
                    }
                    }
                }
            }
        }
        @if listing.pages > 1 {
            nav.pages aria-label="Pages" {
                @if listing.page > 1 {
                    a rel="prev" href=(format!("/{}", query_string(query, None, Some(listing.page - 1)))) { "← Previous" }
                }
                span { "Page " (listing.page) " of " (listing.pages) }
                @if listing.page < listing.pages {
                    a rel="next" href=(format!("/{}", query_string(query, None, Some(listing.page + 1)))) { "Next →" }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::ui::state::Summary;

    #[test]
    fn the_overview_lists_rows_with_states_counts_and_pages() {
        let escaped = Summary {
            name: "web<1>".into(),
            ..row()
        };
        let listing = Query::default().run([escaped].iter());
        let html = overview(&listing, &Query::default(), 160, (true, None)).into_string();
        assert!(html.contains("web&lt;1&gt;"), "names are escaped: {html}");
        assert!(!html.contains("web<1>"));
        let listing = Query::default().run([row()].iter());
        let html = overview(&listing, &Query::default(), 160, (true, None)).into_string();
        assert!(html.contains(r#"href="/bundles/web""#), "{html}");
        assert!(html.contains("badge state-Failed"));
        assert!(html.contains("60s"));
        assert!(
            html.contains("Failed <span class=\"count\">1</span>"),
            "{html}"
        );
        let query = Query {
            q: "a b".into(),
            ..Query::default()
        };
        assert_eq!(
            query_string(&query, Some("Failed"), Some(2)),
            "?state=Failed&q=a+b&page=2"
        );
        assert_eq!(query_string(&Query::default(), None, Some(1)), "");
    }

    #[test]
    fn bundles_on_other_clusters_are_grouped_by_cluster() {
        let on = |name: &str, cluster: &str| Summary {
            name: name.into(),
            cluster: cluster.into(),
            ..row()
        };
        // Every bundle on the agent's cluster: one table body, no group headings.
        let listing = Query::default().run([on("a", LOCAL_CLUSTER), on("b", LOCAL_CLUSTER)].iter());
        let html = overview(&listing, &Query::default(), 160, (true, None)).into_string();
        assert!(!html.contains("cluster-group"), "{html}");
        let rows = [
            on("web-target-b", "target-b"),
            on("local", LOCAL_CLUSTER),
            on("web-target-a", "target-a"),
            on("api-target-a", "target-a"),
        ];
        let groups: Vec<(&str, Vec<&str>)> = by_cluster(&rows)
            .into_iter()
            .map(|(c, rows)| (c, rows.iter().map(|r| r.name.as_str()).collect()))
            .collect();
        assert_eq!(
            groups,
            [
                (LOCAL_CLUSTER, vec!["local"]),
                ("target-a", vec!["web-target-a", "api-target-a"]),
                ("target-b", vec!["web-target-b"]),
            ]
        );
        let listing = Query::default().run(rows.iter());
        let html = overview(&listing, &Query::default(), 160, (true, None)).into_string();
        assert_eq!(
            html.matches("<tr class=\"cluster-group\">").count(),
            3,
            "{html}"
        );
        assert!(
            html.contains(r#"<tbody data-cluster="target-a">"#),
            "{html}"
        );
        assert!(html.contains(r#"href="/?cluster=target-a""#), "{html}");
        let only_a = Query {
            cluster: "target-a".into(),
            ..Query::default()
        };
        assert_eq!(only_a.run(rows.iter()).matching, 2);
    }

    fn row() -> Summary {
        Summary {
            name: "web".into(),
            resource_version: "1".into(),
            state: BundleState::Failed,
            format: "helm".into(),
            active_revision: Some(3),
            reason: "ProgressDeadlineExceeded".into(),
            message: "revision 4 failed".into(),
            since: Some(100),
            labels: Default::default(),
            depends_on: Vec::new(),
            cluster: LOCAL_CLUSTER.into(),
        }
    }
}
