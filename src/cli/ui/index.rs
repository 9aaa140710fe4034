//! Every BundleDeployment's [`Summary`], kept current by one watch, and the overview's query
//! over it (filters, search, counts per state, one page of rows).
//!
//! One watch serves every page and every viewer: the overview never lists BundleDeployments
//! from the API server per request. Only summaries are kept (a few hundred bytes each), and the
//! watch lists in pages, so memory follows the number of BundleDeployments, not their size.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use futures::StreamExt as _;
use kube::api::Api;
use kube::runtime::watcher;
use kube::{Client, ResourceExt as _};

use super::state::{summary_of, BundleState, Summary};
use crate::api::BundleDeployment;

/// BundleDeployments asked for per page while the watch lists them.
const LIST_PAGE_SIZE: u32 = 500;

/// The summaries and whether the watch has listed everything once.
#[derive(Default)]
struct Contents {
    summaries: BTreeMap<String, Summary>,
    /// Names seen during a relist, to drop those that went away meanwhile.
    relisting: Option<BTreeMap<String, Summary>>,
    synced: bool,
    /// The watch's last error, shown on the overview until it works again.
    error: Option<String>,
}

/// The index, shared by the server's handlers and its watch.
#[derive(Clone)]
pub struct Index {
    contents: Arc<RwLock<Contents>>,
    /// Moves on every change of a summary: live pages wait on it.
    version: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Default for Index {
    fn default() -> Self {
        Index {
            contents: Arc::default(),
            version: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }
}

impl Index {
    /// A receiver that sees every change.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// The current version (moves with every change).
    pub fn version(&self) -> u64 {
        *self.version.borrow()
    }

    fn bump(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Contents> {
        self.contents.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Contents> {
        self.contents.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `bd` as it is now.
    pub fn apply(&self, bd: &BundleDeployment) {
        let summary = summary_of(bd);
        let changed = {
            let mut contents = self.write();
            if let Some(relisting) = contents.relisting.as_mut() {
                relisting.insert(summary.name.clone(), summary.clone());
            }
            let previous = contents
                .summaries
                .insert(summary.name.clone(), summary.clone());
            previous.as_ref() != Some(&summary)
        };
        if changed {
            self.bump();
        }
    }

    /// Forgets `name`.
    pub fn delete(&self, name: &str) {
        let removed = self.write().summaries.remove(name).is_some();
        if removed {
            self.bump();
        }
    }

    fn init(&self) {
        self.write().relisting = Some(BTreeMap::new());
    }

    fn init_done(&self) {
        {
            let mut contents = self.write();
            if let Some(listed) = contents.relisting.take() {
                contents.summaries = listed;
            }
            contents.synced = true;
            contents.error = None;
        }
        self.bump();
    }

    fn failed(&self, error: String) {
        self.write().error = Some(error);
        self.bump();
    }

    /// The summary of `name`, if it exists.
    pub fn get(&self, name: &str) -> Option<Summary> {
        self.read().summaries.get(name).cloned()
    }

    /// Whether the first list finished, and the watch's last error.
    pub fn health(&self) -> (bool, Option<String>) {
        let contents = self.read();
        (contents.synced, contents.error.clone())
    }

    /// Names of the BundleDeployments that depend on `name`.
    pub fn dependents(&self, name: &str) -> Vec<String> {
        self.read()
            .summaries
            .values()
            .filter(|s| s.depends_on.iter().any(|d| d == name))
            .map(|s| s.name.clone())
            .collect()
    }

    /// The states of `names` that exist.
    pub fn states(&self, names: &[String]) -> BTreeMap<String, BundleState> {
        let contents = self.read();
        names
            .iter()
            .filter_map(|n| contents.summaries.get(n).map(|s| (n.clone(), s.state)))
            .collect()
    }

    /// Runs `query` over the index.
    pub fn query(&self, query: &Query) -> Listing {
        query.run(self.read().summaries.values())
    }

    /// Keeps the index current from a watch with `client` until the task is dropped; restarts
    /// the watch with backoff after errors (each shown until the next success).
    pub fn spawn_watch(&self, client: Client) -> tokio::task::JoinHandle<()> {
        let index = self.clone();
        tokio::spawn(async move {
            use kube::runtime::WatchStreamExt as _;
            let api: Api<BundleDeployment> = Api::all(client);
            let config = watcher::Config::default().page_size(LIST_PAGE_SIZE);
            let mut events = watcher(api, config).default_backoff().boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Init) => index.init(),
                    Ok(watcher::Event::InitApply(bd)) | Ok(watcher::Event::Apply(bd)) => {
                        index.apply(&bd)
                    }
                    Ok(watcher::Event::InitDone) => index.init_done(),
                    Ok(watcher::Event::Delete(bd)) => index.delete(&bd.name_any()),
                    Err(error) => index.failed(format!("watching BundleDeployments: {error}")),
                }
            }
        })
    }
}

/// Rows per page unless the query says otherwise, and the most it may say.
pub const PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 500;

/// What the overview asks for: filters, a search, and a page.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub struct Query {
    /// Only this state (`Failed`, …); empty: all.
    pub state: String,
    /// Only BundleDeployments with these labels: `key=value` or `key`, comma-separated.
    pub label: String,
    /// Only this shard (`-`: those in no shard).
    pub shard: String,
    /// Only this cluster (a kubeConfig Secret's name, or `in-cluster`); empty: all.
    pub cluster: String,
    /// Words that must all appear in the name, reason or message (any case).
    pub q: String,
    /// The page, from 1.
    pub page: usize,
    /// Rows per page.
    pub per_page: usize,
}

/// One page of the overview.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Listing {
    /// The rows of this page, by name.
    pub rows: Vec<Summary>,
    /// BundleDeployments per state among those the label, shard and search filters keep.
    pub counts: BTreeMap<BundleState, usize>,
    /// How many the filters keep (the state filter too).
    pub matching: usize,
    /// Every BundleDeployment in the index.
    pub total: usize,
    /// This page (from 1) and the number of pages.
    pub page: usize,
    /// The number of pages.
    pub pages: usize,
    /// Rows per page.
    pub per_page: usize,
}

impl Query {
    fn label_matches(&self, summary: &Summary) -> bool {
        self.label
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .all(|term| match term.split_once('=') {
                Some((key, value)) => {
                    summary.labels.get(key.trim()).map(String::as_str) == Some(value.trim())
                }
                None => summary.labels.contains_key(term),
            })
    }

    fn shard_matches(&self, summary: &Summary) -> bool {
        match self.shard.trim() {
            "" => true,
            "-" => summary.shard().is_none(),
            shard => summary.shard() == Some(shard),
        }
    }

    fn search_matches(&self, summary: &Summary, words: &[String]) -> bool {
        words.iter().all(|word| {
            [&summary.name, &summary.reason, &summary.message]
                .iter()
                .any(|field| field.to_lowercase().contains(word))
        })
    }

    /// The page of `summaries` (in name order) this query asks for.
    pub fn run<'a>(&self, summaries: impl Iterator<Item = &'a Summary>) -> Listing {
        let state = BundleState::parse(self.state.trim());
        let words: Vec<String> = self.q.split_whitespace().map(str::to_lowercase).collect();
        let per_page = match self.per_page {
            0 => PAGE_SIZE,
            n => n.min(MAX_PAGE_SIZE),
        };
        let page = self.page.max(1);
        let skip = (page - 1) * per_page;
        let mut listing = Listing {
            per_page,
            ..Listing::default()
        };
        for summary in summaries {
            listing.total += 1;
            if !self.label_matches(summary)
                || !self.shard_matches(summary)
                || !(self.cluster.trim().is_empty() || summary.cluster == self.cluster.trim())
                || !self.search_matches(summary, &words)
            {
                continue;
            }
            *listing.counts.entry(summary.state).or_default() += 1;
            if state.is_some_and(|s| s != summary.state) {
                continue;
            }
            if listing.matching >= skip && listing.rows.len() < per_page {
                listing.rows.push(summary.clone());
            }
            listing.matching += 1;
        }
        listing.pages = listing.matching.div_ceil(per_page).max(1);
        listing.page = page;
        listing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(name: &str, state: BundleState, labels: &[(&str, &str)]) -> Summary {
        Summary {
            name: name.into(),
            resource_version: "1".into(),
            state,
            format: "plain".into(),
            active_revision: Some(1),
            reason: format!("{state:?}"),
            message: format!("message of {name}"),
            since: None,
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            depends_on: Vec::new(),
            cluster: crate::api::LOCAL_CLUSTER.into(),
        }
    }

    #[test]
    fn queries_filter_count_and_page() {
        let all: Vec<Summary> = (0..120)
            .map(|i| {
                let state = if i % 10 == 0 {
                    BundleState::Failed
                } else {
                    BundleState::Ready
                };
                let team = if i % 2 == 0 { "a" } else { "b" };
                summary(
                    &format!("app-{i:03}"),
                    state,
                    &[("team", team), ("sharding.fluxcd.io/key", "s1")],
                )
            })
            .collect();
        let everything = Query::default().run(all.iter());
        assert_eq!(
            (everything.total, everything.matching, everything.pages),
            (120, 120, 3)
        );
        assert_eq!(everything.rows.len(), PAGE_SIZE);
        assert_eq!(everything.counts[&BundleState::Failed], 12);
        let failed = Query {
            state: "failed".into(),
            ..Query::default()
        }
        .run(all.iter());
        assert_eq!(failed.matching, 12);
        // Counts are of every state, so the filter bar can offer the others.
        assert_eq!(failed.counts[&BundleState::Ready], 108);
        assert!(failed.rows.iter().all(|r| r.state == BundleState::Failed));
        let page3 = Query {
            page: 3,
            ..Query::default()
        }
        .run(all.iter());
        assert_eq!(page3.rows.len(), 20);
        assert_eq!(page3.rows[0].name, "app-100");
        let team_b = Query {
            label: "team=b".into(),
            q: "APP-01".into(),
            ..Query::default()
        }
        .run(all.iter());
        let names: Vec<&str> = team_b.rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            ["app-011", "app-013", "app-015", "app-017", "app-019"]
        );
        let no_shard = Query {
            shard: "-".into(),
            ..Query::default()
        }
        .run(all.iter());
        assert_eq!(no_shard.matching, 0);
        let big = Query {
            per_page: 10_000,
            ..Query::default()
        }
        .run(all.iter());
        assert_eq!(big.per_page, MAX_PAGE_SIZE);
    }

    #[test]
    fn the_index_follows_applies_deletes_and_relists() {
        let index = Index::default();
        let mut versions = index.subscribe();
        let bd = |name: &str| -> BundleDeployment {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
                "metadata": {"name": name, "resourceVersion": "1"},
                "spec": {"format": "plain", "sources": [], "dependsOn": [{"name": "base"}]}}))
            .unwrap()
        };
        index.apply(&bd("a"));
        index.apply(&bd("b"));
        assert!(versions.has_changed().unwrap());
        versions.borrow_and_update();
        index.apply(&bd("a"));
        assert!(!versions.has_changed().unwrap(), "no change, no wake-up");
        assert_eq!(index.dependents("base"), ["a", "b"]);
        // A relist that no longer sees b drops it.
        index.init();
        index.apply(&bd("a"));
        index.init_done();
        assert!(index.get("b").is_none());
        assert_eq!(index.health(), (true, None));
        index.delete("a");
        assert_eq!(index.query(&Query::default()).total, 0);
    }
}
