//! What one source may unpack, and the counting that enforces it.
//!
//! Every byte a source inflates is counted, not only what lands in files: the tar stream behind
//! the decompressor (headers, padding, and the data of entries that are skipped, which still has
//! to be inflated to be passed over), hardlinks (charged their target's size), git blobs (charged
//! by the size their header declares, before they are loaded). A [`Cancel`] raised when the fetch
//! ends or passes its deadline stops the unpack thread at its next read.

use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pallet_formats::archive::{
    CountingReader, Meter, SharedAllowance, Stop, DEFAULT_MAX_RECORD_BYTES,
};

use super::SourceError;

/// The budget named in refusals of the per-source byte limit.
pub const TOTAL_BUDGET: &str = crate::bounded::UNPACK_BUDGET;
/// The budget named in refusals of the per-file limit.
pub const FILE_BUDGET: &str = crate::bounded::FILE_BUDGET;
/// The budget named in refusals of the entry count.
pub const ENTRY_BUDGET: &str = "the per-source entry limit (--unpack-max-entries)";
/// The budget named when the unpacks in progress together fill the cache's scratch space.
pub const SCRATCH_BUDGET: &str = "the limit of all unpacks in progress (--unpack-scratch-mib)";
/// The budget named in refusals of oversized header records.
pub const RECORD_BUDGET: &str = "the header record limit";

/// Bounds on what one source may unpack. The defaults fit the agent's Deployment (1 GiB of
/// memory, a 3 GiB cache volume holding at most 2 GiB of cached sources) with the fetches that
/// run at once, and still leave bundles (manifests, charts) a wide margin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes inflated for one source: every byte of its decompressed streams, hardlinks at their
    /// target's size, and single files.
    pub max_total_bytes: u64,
    /// Number of archive entries (files, directories, links) for one source.
    pub max_entries: u64,
    /// Size of a single file (also the largest chart repository index read).
    pub max_file_bytes: u64,
    /// Size of one GNU long-name/long-link or PAX header record.
    pub max_record_bytes: u64,
}

impl Limits {
    /// The defaults (see [`Limits`]).
    pub const DEFAULT: Limits = Limits {
        max_total_bytes: 256 << 20,
        max_entries: 100_000,
        max_file_bytes: 64 << 20,
        max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// A flag telling unpack threads to stop: raised when the fetch that started them finishes, is
/// dropped (its deadline passed, its BundleDeployment changed or went away) or is cancelled.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// A flag not raised yet.
    pub fn new() -> Self {
        Cancel::default()
    }

    /// Raises the flag.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether the flag is raised.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// A guard that raises the flag when dropped.
    pub fn on_drop(&self) -> CancelOnDrop {
        CancelOnDrop(self.clone())
    }
}

/// Raises its [`Cancel`] when dropped.
#[derive(Debug)]
pub struct CancelOnDrop(Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// What one source has unpacked so far, checked against [`Limits`]. One budget spans all the
/// layers of an image, so a bomb cannot be split across layers.
#[derive(Debug)]
pub struct Budget {
    limits: Limits,
    meter: Arc<Meter>,
    entries: u64,
}

impl Budget {
    /// A fresh budget for one source.
    pub fn new(limits: Limits) -> Self {
        Budget::with_cancel(limits, &Cancel::new())
    }

    /// A fresh budget whose readers stop once `cancel` is raised.
    pub fn with_cancel(limits: Limits, cancel: &Cancel) -> Self {
        Budget::drawing_on(limits, cancel, None)
    }

    /// A fresh budget whose readers stop once `cancel` is raised, and whose bytes also come out
    /// of `shared` (the cache's allowance for unpacks in progress) until the budget is dropped.
    pub fn drawing_on(
        limits: Limits,
        cancel: &Cancel,
        shared: Option<Arc<SharedAllowance>>,
    ) -> Self {
        Budget {
            limits,
            meter: Meter::drawing_on(limits.max_total_bytes, Some(cancel.0.clone()), shared),
            entries: 0,
        }
    }

    /// Bytes counted so far.
    pub fn bytes(&self) -> u64 {
        self.meter.count()
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// `reader`, counting what it returns against this budget.
    pub fn reader<R: Read>(&self, reader: R) -> CountingReader<R> {
        CountingReader::new(reader, self.meter.clone())
    }

    /// Counts one more entry (`path`); fails past the entry limit or once cancelled.
    pub fn entry(&mut self, path: &Path) -> Result<(), SourceError> {
        self.entries += 1;
        if self.entries > self.limits.max_entries {
            return Err(SourceError::limit(
                format!("entry {}", path.display()),
                format!("{} entries", self.entries),
                ENTRY_BUDGET,
                self.limits.max_entries.to_string(),
            ));
        }
        self.charge(path, 0)
    }

    /// Refuses a file whose declared `size` is over the per-file limit or would take the source
    /// over its total, before anything of it is read.
    pub fn check_file_size(&self, path: &Path, size: u64) -> Result<(), SourceError> {
        if size > self.limits.max_file_bytes {
            return Err(SourceError::limit(
                format!("file {}", path.display()),
                format!("{size} bytes"),
                FILE_BUDGET,
                format!("{} bytes", self.limits.max_file_bytes),
            ));
        }
        let total = self.bytes().saturating_add(size);
        if total > self.limits.max_total_bytes {
            return Err(SourceError::limit(
                format!("file {}", path.display()),
                format!("{total} bytes with what the source unpacked before it"),
                TOTAL_BUDGET,
                format!("{} bytes", self.limits.max_total_bytes),
            ));
        }
        Ok(())
    }

    /// Charges `bytes` that were not read through [`Budget::reader`] (a hardlink's target, a
    /// blob's declared size) for `path`.
    pub fn charge(&self, path: &Path, bytes: u64) -> Result<(), SourceError> {
        self.meter
            .charge(bytes)
            .map_err(|stop| self.stop_error(stop, Some(path)))
    }

    /// The refusal for a stopped meter, naming the entry being read, if known.
    pub fn stopped(&self, path: Option<&Path>) -> Option<SourceError> {
        self.meter.stopped().map(|stop| self.stop_error(stop, path))
    }

    fn stop_error(&self, stop: Stop, path: Option<&Path>) -> SourceError {
        let what = match path {
            Some(p) => format!("entry {}", p.display()),
            None => "the archive".to_string(),
        };
        match stop {
            Stop::OverLimit { reached, limit } => SourceError::limit(
                what,
                format!("more than {} bytes inflated ({reached} counted)", limit),
                TOTAL_BUDGET,
                format!("{limit} bytes"),
            ),
            // Other unpacks hold the room: this one is retried, as a full disk would be.
            Stop::SharedOverLimit { reached, limit } => SourceError::io(
                format!(
                    "unpacking {what}: the unpacks in progress would hold {reached} bytes of the \
                     cache's scratch space, over {SCRATCH_BUDGET} of {limit} bytes"
                ),
                std::io::Error::new(std::io::ErrorKind::StorageFull, "scratch space full"),
            ),
            Stop::Cancelled => SourceError::Cancelled {
                what: format!("unpacking {what}"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_guard_cancels_readers() {
        let cancel = Cancel::new();
        let budget = Budget::with_cancel(Limits::default(), &cancel);
        let mut reader = budget.reader(&[0u8; 64][..]);
        let mut buf = [0u8; 8];
        {
            let _guard = cancel.on_drop();
            assert_eq!(reader.read(&mut buf).unwrap(), 8);
        }
        assert!(reader.read(&mut buf).is_err());
        let err = budget.stopped(Some(Path::new("a/b"))).unwrap();
        assert_eq!(err.category(), "Cancelled", "{err}");
        assert!(err.to_string().contains("a/b"), "{err}");
    }

    #[test]
    fn refusals_name_the_entry_the_value_and_the_budget() {
        let budget = Budget::new(Limits {
            max_total_bytes: 100,
            ..Limits::default()
        });
        budget.charge(Path::new("x"), 60).unwrap();
        let err = budget.charge(Path::new("dir/link"), 60).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("entry dir/link")
                && msg.contains("120 counted")
                && msg.contains("--unpack-max-mib")
                && msg.contains("100 bytes"),
            "{msg}"
        );
        // Stopped for good.
        assert!(budget.charge(Path::new("y"), 0).is_err());
    }

    #[test]
    fn unpacks_in_progress_share_the_scratch_allowance() {
        let shared = SharedAllowance::new(100);
        let cancel = Cancel::new();
        let first = Budget::drawing_on(Limits::default(), &cancel, Some(shared.clone()));
        let second = Budget::drawing_on(Limits::default(), &cancel, Some(shared.clone()));
        first.charge(Path::new("a"), 80).unwrap();
        let err = second.charge(Path::new("b"), 40).unwrap_err();
        assert!(err.is_transient(), "{err}");
        assert!(err.to_string().contains("--unpack-scratch-mib"), "{err}");
        drop(first);
        let third = Budget::drawing_on(Limits::default(), &cancel, Some(shared));
        third.charge(Path::new("c"), 90).unwrap();
    }
}
