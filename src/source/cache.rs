//! Content-addressed cache of unpacked sources on local disk.
//!
//! Layout under the root:
//!
//! ```text
//! entries/<key>/tree/   the unpacked content (read-only by convention)
//! entries/<key>/size    bytes of content; its mtime records the last use (for eviction)
//! tmp/                  scratch space; an entry is built here and renamed into entries/
//! meta/                 small per-source records (HTTP validators)
//! ```
//!
//! An entry appears with one `rename`, so a crash mid-unpack leaves only scratch space, which
//! [`Cache::open`] clears: a half-written entry is never used. Keys are derived from resolved,
//! immutable refs, so an entry never changes once written. Concurrent fetches of one key in this
//! process wait for a single unpack.

use std::collections::HashMap;
use std::fs;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use pallet_formats::archive::SharedAllowance;

use super::SourceError;

/// The on-disk cache. Share one per process (behind an `Arc`).
#[derive(Debug)]
pub struct Cache {
    root: PathBuf,
    max_bytes: u64,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    populated: AtomicU64,
    scratch_seq: AtomicU64,
    /// Bytes of content in the cache as far as this process knows: counted once at open, then
    /// kept up to date by commits and evictions. The entries are scanned only when this passes
    /// `max_bytes` (a scan per fetch made a thousand fetches cost a million `stat`s and reads).
    /// What another process sharing the directory adds is seen at that scan; agents do not share
    /// one, and `max_bytes` bounds disk use, so a late look costs nothing but disk.
    used: AtomicU64,
    /// Keys whose content was refused (unsafe, corrupt, too large), with the refusal: their
    /// content is immutable, so it is refused again without being downloaded or unpacked again
    /// at every poll. Kept for the life of the process (limits are flags: a restart may change
    /// them), at most [`REFUSALS_KEPT`] at once.
    refused: Mutex<HashMap<String, SourceError>>,
    /// Bytes all unpacks in progress may hold together in the scratch space.
    unpacking: Arc<SharedAllowance>,
}

/// Refusals remembered at most; past it the record starts over.
const REFUSALS_KEPT: usize = 1024;

/// Eviction frees space down to this share of `max_bytes`, so that a full cache is scanned once
/// per tenth of its size fetched, not at every fetch.
const EVICT_TO_PERCENT: u64 = 90;

impl Cache {
    /// Opens (creating if needed) a cache at `root` holding at most about `max_bytes` of content.
    /// Leftover scratch space from an earlier run is removed.
    pub fn open(root: impl Into<PathBuf>, max_bytes: u64) -> Result<Self, SourceError> {
        let root = root.into();
        let tmp = root.join("tmp");
        if tmp.exists() {
            fs::remove_dir_all(&tmp)
                .map_err(|e| SourceError::io("clear cache scratch space", e))?;
        }
        for dir in ["entries", "tmp", "meta"] {
            fs::create_dir_all(root.join(dir))
                .map_err(|e| SourceError::io(format!("create cache directory {dir}"), e))?;
        }
        let cache = Cache {
            root,
            max_bytes,
            locks: Mutex::new(HashMap::new()),
            populated: AtomicU64::new(0),
            scratch_seq: AtomicU64::new(0),
            used: AtomicU64::new(0),
            refused: Mutex::new(HashMap::new()),
            unpacking: SharedAllowance::new(u64::MAX),
        };
        let (used, _) = cache.scan_entries("");
        cache.used.store(used, Ordering::Relaxed);
        Ok(cache)
    }

    /// This cache with at most `bytes` held by the unpacks in progress together (unbounded
    /// unless set): with the cache's own bound, what the cache's volume must hold.
    pub fn with_unpack_allowance(mut self, bytes: u64) -> Self {
        self.unpacking = SharedAllowance::new(bytes);
        self
    }

    /// The allowance the unpacks in progress draw on.
    pub fn unpack_allowance(&self) -> Arc<SharedAllowance> {
        self.unpacking.clone()
    }

    /// The cache's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// How many entries this process has unpacked (not found in the cache). Lets tests check
    /// that concurrent fetches unpacked once.
    pub fn populated_count(&self) -> u64 {
        self.populated.load(Ordering::Relaxed)
    }

    fn entry_dir(&self, key: &str) -> PathBuf {
        self.root.join("entries").join(key)
    }

    /// The content of `key` if cached; records the use for eviction. No network, one `stat`.
    pub fn lookup(&self, key: &str) -> Option<PathBuf> {
        let dir = self.entry_dir(key);
        let size = dir.join("size");
        if !size.is_file() {
            return None;
        }
        // Best effort: a failed touch only makes eviction slightly less accurate.
        if let Ok(f) = fs::File::options().write(true).open(&size) {
            let _ = f.set_modified(SystemTime::now());
        }
        Some(dir.join("tree"))
    }

    /// A fresh scratch directory under the cache root (same filesystem, so entries can be renamed
    /// into place). Removed by the caller, or by the next [`Cache::open`] after a crash.
    pub fn scratch_dir(&self) -> Result<PathBuf, SourceError> {
        let n = self.scratch_seq.fetch_add(1, Ordering::Relaxed);
        let dir = self
            .root
            .join("tmp")
            .join(format!("{}-{n}", std::process::id()));
        fs::create_dir_all(&dir).map_err(|e| SourceError::io("create cache scratch space", e))?;
        Ok(dir)
    }

    /// Returns the content of `key`, running `populate` to create it when missing. `populate`
    /// gets an empty directory to fill; it is renamed into place only when `populate` succeeds.
    /// Concurrent calls for one key run `populate` once.
    pub async fn get_or_populate<F, Fut>(
        &self,
        key: &str,
        populate: F,
    ) -> Result<PathBuf, SourceError>
    where
        F: FnOnce(PathBuf) -> Fut,
        Fut: Future<Output = Result<(), SourceError>>,
    {
        if let Some(path) = self.lookup(key) {
            return Ok(path);
        }
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
            locks.entry(key.to_string()).or_default().clone()
        };
        let _guard = lock.lock().await;
        if let Some(path) = self.lookup(key) {
            return Ok(path);
        }
        if let Some(refusal) = self.refusal(key) {
            return Err(refusal);
        }
        let scratch = RemovedOnDrop(self.scratch_dir()?);
        let tree = scratch.0.join("tree");
        fs::create_dir(&tree).map_err(|e| SourceError::io("create cache scratch space", e))?;
        let result = populate(tree.clone()).await;
        let result = match result {
            Ok(()) => self.commit(key, &scratch.0, &tree),
            Err(e) => Err(e),
        };
        // Whatever is left in scratch (all of it on failure) goes; also when this future is
        // dropped mid-populate (a fetch past its deadline), whose unpack thread then stops.
        drop(scratch);
        drop(_guard);
        self.locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        if let Err(e) = &result {
            self.remember_refusal(key, e);
        }
        let path = result?;
        self.populated.fetch_add(1, Ordering::Relaxed);
        if self.used.load(Ordering::Relaxed) > self.max_bytes {
            self.evict(key);
        }
        Ok(path)
    }

    /// The refusal of `key`'s content, if it was refused before.
    pub fn refusal(&self, key: &str) -> Option<SourceError> {
        let refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        refused.get(key).and_then(SourceError::content_refusal)
    }

    fn remember_refusal(&self, key: &str, error: &SourceError) {
        let Some(refusal) = error.content_refusal() else {
            return;
        };
        let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if refused.len() >= REFUSALS_KEPT {
            refused.clear();
        }
        refused.insert(key.to_string(), refusal);
    }

    fn commit(&self, key: &str, scratch: &Path, tree: &Path) -> Result<PathBuf, SourceError> {
        let size = dir_size(tree).map_err(|e| SourceError::io("measure cache entry", e))?;
        fs::write(scratch.join("size"), size.to_string())
            .map_err(|e| SourceError::io("write cache entry", e))?;
        let dir = self.entry_dir(key);
        match fs::rename(scratch, &dir) {
            Ok(()) => {
                self.used.fetch_add(size, Ordering::Relaxed);
            }
            // Another process committed the same immutable entry first: use theirs.
            Err(_) if dir.join("size").is_file() => {}
            Err(e) => return Err(SourceError::io("commit cache entry", e)),
        }
        Ok(dir.join("tree"))
    }

    /// Every entry's size, and those other than `keep` as (last use, size, path); the total
    /// counts all of them.
    fn scan_entries(&self, keep: &str) -> (u64, Vec<(SystemTime, u64, PathBuf)>) {
        let mut entries = Vec::new();
        let mut total = 0u64;
        let Ok(read) = fs::read_dir(self.root.join("entries")) else {
            return (0, entries);
        };
        for entry in read.flatten() {
            let size_file = entry.path().join("size");
            let Ok(meta) = fs::metadata(&size_file) else {
                continue;
            };
            let size = fs::read_to_string(&size_file)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .unwrap_or(0);
            total += size;
            if entry.file_name() != keep {
                entries.push((
                    meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    size,
                    entry.path(),
                ));
            }
        }
        (total, entries)
    }

    /// Removes least recently used entries, never `keep`, until the cache holds at most
    /// [`EVICT_TO_PERCENT`] of `max_bytes`.
    fn evict(&self, keep: &str) {
        let (mut total, mut entries) = self.scan_entries(keep);
        let target = self.max_bytes / 100 * EVICT_TO_PERCENT;
        entries.sort();
        for (_, size, path) in entries {
            if total <= target {
                break;
            }
            // Rename first so a concurrent lookup never sees a half-deleted entry.
            let Ok(doomed) = self.scratch_dir() else {
                break;
            };
            let gone = doomed.join("evicted");
            if fs::rename(&path, &gone).is_ok() {
                total = total.saturating_sub(size);
                tracing::debug!(entry = %path.display(), size, "evicted cache entry");
            }
            let _ = fs::remove_dir_all(&doomed);
        }
        self.used.store(total, Ordering::Relaxed);
    }

    /// Reads a small metadata record (e.g. HTTP validators) stored under `name`.
    pub fn read_meta(&self, name: &str) -> Option<Vec<u8>> {
        fs::read(self.root.join("meta").join(name)).ok()
    }

    /// Writes a small metadata record atomically (temp file + rename).
    pub fn write_meta(&self, name: &str, data: &[u8]) -> Result<(), SourceError> {
        let scratch = self.scratch_dir()?;
        let tmp = scratch.join("meta");
        let result = fs::write(&tmp, data)
            .and_then(|()| fs::rename(&tmp, self.root.join("meta").join(name)))
            .map_err(|e| SourceError::io("write cache metadata", e));
        let _ = fs::remove_dir_all(&scratch);
        result
    }
}

/// A scratch directory removed when dropped.
struct RemovedOnDrop(PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn dir_size(dir: &Path) -> io::Result<u64> {
    let mut total = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let ft = entry.file_type()?;
        if ft.is_dir() {
            total += dir_size(&entry.path())?;
        } else if ft.is_file() {
            total += entry.metadata()?.len();
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn failed_populate_leaves_nothing_and_success_survives_reopen() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::open(tmp.path(), 1 << 20).unwrap();
        let err = cache
            .get_or_populate("k", |dir| async move {
                fs::write(dir.join("half"), "x").unwrap();
                Err(SourceError::Invalid("boom".into()))
            })
            .await
            .unwrap_err();
        assert_eq!(err.category(), "InvalidSource");
        assert!(cache.lookup("k").is_none());
        let p = cache
            .get_or_populate("k", |dir| async move {
                fs::write(dir.join("f"), "data").unwrap();
                Ok(())
            })
            .await
            .unwrap();
        assert_eq!(fs::read_to_string(p.join("f")).unwrap(), "data");
        // A crash mid-unpack leaves scratch space; reopening clears it and keeps entries.
        fs::create_dir_all(tmp.path().join("tmp/999-0/tree")).unwrap();
        let cache = Cache::open(tmp.path(), 1 << 20).unwrap();
        assert!(!tmp.path().join("tmp/999-0").exists());
        assert!(cache.lookup("k").is_some());
    }

    #[tokio::test]
    async fn concurrent_populates_of_one_key_unpack_once() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Arc::new(Cache::open(tmp.path(), 1 << 20).unwrap());
        let runs = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (cache, runs) = (cache.clone(), runs.clone());
            tasks.push(tokio::spawn(async move {
                cache
                    .get_or_populate("same", |dir| async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        fs::write(dir.join("f"), "x").unwrap();
                        Ok(())
                    })
                    .await
                    .unwrap()
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    /// Caches 1,000 bytes under `key`.
    async fn fill(cache: &Cache, key: &str) {
        cache
            .get_or_populate(key, |dir| async move {
                fs::write(dir.join("f"), vec![0u8; 1000]).unwrap();
                Ok(())
            })
            .await
            .unwrap();
    }

    /// Makes entry `key` look last used a minute ago.
    fn age(root: &Path, key: &str) {
        let past = SystemTime::now() - std::time::Duration::from_secs(60);
        fs::File::options()
            .write(true)
            .open(root.join("entries").join(key).join("size"))
            .unwrap()
            .set_modified(past)
            .unwrap();
    }

    #[tokio::test]
    async fn eviction_drops_least_recently_used() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::open(tmp.path(), 2500).unwrap();
        fill(&cache, "a").await;
        fill(&cache, "b").await;
        // Use "a" so that "b" is the least recently used one.
        age(tmp.path(), "b");
        assert!(cache.lookup("a").is_some());
        fill(&cache, "c").await;
        assert!(cache.lookup("b").is_none());
        assert!(cache.lookup("a").is_some() && cache.lookup("c").is_some());
    }

    #[tokio::test]
    async fn a_reopened_cache_counts_what_it_holds() {
        let tmp = tempfile::tempdir().unwrap();
        {
            let cache = Cache::open(tmp.path(), 2500).unwrap();
            fill(&cache, "a").await;
            fill(&cache, "b").await;
        }
        age(tmp.path(), "a");
        // A new process: what the last one left counts against the limit.
        let cache = Cache::open(tmp.path(), 2500).unwrap();
        fill(&cache, "c").await;
        assert!(cache.lookup("a").is_none());
        assert!(cache.lookup("b").is_some() && cache.lookup("c").is_some());
    }
}
