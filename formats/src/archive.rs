//! Bounded reading of tar streams that come from people the reader does not trust.
//!
//! Two things make an archive small on the wire and large in memory or on disk: compression (a
//! few kilobytes of gzip inflate to gigabytes) and the tar format's header records (a GNU
//! long-name or PAX record is read whole before the entry it describes). This module bounds both:
//!
//! - [`Meter`] counts every byte a [`CountingReader`] hands out (the inflated stream, headers,
//!   padding and the data of entries nobody reads, which the tar reader still has to inflate to
//!   skip), plus whatever a caller charges by hand, against one limit; it also stops reading
//!   when a cancellation flag is raised, so a thread left behind by a deadline ends soon after;
//! - [`read_entries`] walks the archive's raw records itself, refusing a GNU long-name, long-link
//!   or PAX record larger than a small bound before reading it, and folds the accepted ones into
//!   the entry they describe.

use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The largest GNU long-name, long-link or PAX record accepted by default: paths are at most a
/// few kilobytes, and the extended attributes of container layers are small.
pub const DEFAULT_MAX_RECORD_BYTES: u64 = 64 << 10;

/// Why a [`Meter`] stopped the reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// More bytes than the limit were read or charged; `reached` is the count that crossed it.
    OverLimit {
        /// Bytes counted when the limit was crossed.
        reached: u64,
        /// The limit.
        limit: u64,
    },
    /// The [`SharedAllowance`] the meter draws on had no room left: `reached` is what all its
    /// meters would have held together.
    SharedOverLimit {
        /// Bytes the allowance's meters would have held.
        reached: u64,
        /// The allowance.
        limit: u64,
    },
    /// The cancellation flag was raised (a deadline passed, the work was abandoned).
    Cancelled,
}

/// Bytes several meters draw on at once (the unpacks in progress of one cache): each meter holds
/// what it charged until it is dropped. Running out stops the meter that asked, not the others.
#[derive(Debug)]
pub struct SharedAllowance {
    held: AtomicU64,
    limit: u64,
}

impl SharedAllowance {
    /// An allowance of `limit` bytes.
    pub fn new(limit: u64) -> Arc<SharedAllowance> {
        Arc::new(SharedAllowance {
            held: AtomicU64::new(0),
            limit,
        })
    }

    /// Bytes its meters hold now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    fn take(&self, bytes: u64) -> Result<(), u64> {
        let reached = self
            .held
            .fetch_add(bytes, Ordering::Relaxed)
            .saturating_add(bytes);
        if reached > self.limit {
            self.held.fetch_sub(bytes, Ordering::Relaxed);
            return Err(reached);
        }
        Ok(())
    }
}

/// A byte counter with a limit and an optional cancellation flag, shared by the readers and code
/// that charge it. Once it has stopped, every later read and charge fails the same way.
#[derive(Debug)]
pub struct Meter {
    count: AtomicU64,
    limit: u64,
    cancel: Option<Arc<AtomicBool>>,
    stop: Mutex<Option<Stop>>,
    /// The allowance this meter also draws on, and what it holds of it.
    shared: Option<(Arc<SharedAllowance>, AtomicU64)>,
}

impl Meter {
    /// A meter allowing `limit` bytes in all.
    pub fn new(limit: u64) -> Arc<Meter> {
        Meter::with_cancel(limit, None)
    }

    /// A meter allowing `limit` bytes that also stops once `cancel` is set.
    pub fn with_cancel(limit: u64, cancel: Option<Arc<AtomicBool>>) -> Arc<Meter> {
        Meter::drawing_on(limit, cancel, None)
    }

    /// A meter allowing `limit` bytes, stopping once `cancel` is set, whose bytes are also
    /// taken from `shared` (and given back when the meter is dropped).
    pub fn drawing_on(
        limit: u64,
        cancel: Option<Arc<AtomicBool>>,
        shared: Option<Arc<SharedAllowance>>,
    ) -> Arc<Meter> {
        Arc::new(Meter {
            count: AtomicU64::new(0),
            limit,
            cancel,
            stop: Mutex::new(None),
            shared: shared.map(|s| (s, AtomicU64::new(0))),
        })
    }

    /// Bytes counted so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Why it stopped, if it did.
    pub fn stopped(&self) -> Option<Stop> {
        *self.stop.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts `bytes` more; fails (and stays failed) past the limit or once cancelled.
    pub fn charge(&self, bytes: u64) -> Result<(), Stop> {
        if let Some(stop) = self.stopped() {
            return Err(stop);
        }
        if self
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            return Err(self.record(Stop::Cancelled));
        }
        let reached = self
            .count
            .fetch_add(bytes, Ordering::Relaxed)
            .saturating_add(bytes);
        if reached > self.limit {
            return Err(self.record(Stop::OverLimit {
                reached,
                limit: self.limit,
            }));
        }
        if let Some((shared, held)) = &self.shared {
            if let Err(reached) = shared.take(bytes) {
                return Err(self.record(Stop::SharedOverLimit {
                    reached,
                    limit: shared.limit,
                }));
            }
            held.fetch_add(bytes, Ordering::Relaxed);
        }
        Ok(())
    }

    fn record(&self, stop: Stop) -> Stop {
        let mut slot = self.stop.lock().unwrap_or_else(|p| p.into_inner());
        *slot.get_or_insert(stop)
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        if let Some((shared, held)) = &self.shared {
            shared
                .held
                .fetch_sub(held.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

/// The error a [`CountingReader`] returns once its meter stops; [`Meter::stopped`] says why.
#[derive(Debug)]
pub struct Stopped(pub Stop);

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Stop::OverLimit { reached, limit } => {
                write!(f, "{reached} bytes read, over the limit of {limit}")
            }
            Stop::SharedOverLimit { reached, limit } => {
                write!(
                    f,
                    "{reached} bytes held together, over the shared limit of {limit}"
                )
            }
            Stop::Cancelled => f.write_str("reading was cancelled"),
        }
    }
}

impl std::error::Error for Stopped {}

/// A reader charging every byte it returns to a [`Meter`].
pub struct CountingReader<R> {
    inner: R,
    meter: Arc<Meter>,
}

impl<R> CountingReader<R> {
    /// Counts what `inner` returns against `meter`.
    pub fn new(inner: R, meter: Arc<Meter>) -> Self {
        CountingReader { inner, meter }
    }
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Checked before reading too, so a cancelled meter stops even a reader that returns
        // nothing more.
        self.meter.charge(0).map_err(stopped)?;
        let n = self.inner.read(buf)?;
        self.meter.charge(n as u64).map_err(stopped)?;
        Ok(n)
    }
}

fn stopped(stop: Stop) -> io::Error {
    io::Error::other(Stopped(stop))
}

/// Why an archive was refused while reading its records.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// A GNU long-name/long-link or PAX record larger than allowed.
    #[error("{kind} record of {size} bytes {place} exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Which record (`GNU long name`, `PAX extended header`, ...).
        kind: &'static str,
        /// Where it is: after which entry.
        place: String,
        /// Its declared size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// Records that do not fit together (two long names for one entry, a PAX size that
    /// disagrees with the header, a record describing no entry).
    #[error("malformed archive {place}: {reason}")]
    Malformed {
        /// Where: after which entry.
        place: String,
        /// What is wrong.
        reason: String,
    },
    /// The stream could not be read (corrupt compression, truncated, or a stopped meter).
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// One entry of an archive, its header records folded in.
#[derive(Debug, Clone)]
pub struct EntryMeta {
    /// Its path, from a GNU long name, a PAX `path` or the header, in that order.
    pub path: PathBuf,
    /// Its link target (symlinks and hardlinks), found the same way.
    pub link: Option<PathBuf>,
    /// Its type.
    pub kind: tar::EntryType,
    /// Bytes of data that follow it.
    pub size: u64,
    /// Its permission bits.
    pub mode: u32,
}

/// Header records seen since the last entry, waiting for the entry they describe.
#[derive(Default)]
struct Pending {
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
    pax: Option<Vec<u8>>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.long_name.is_none() && self.long_link.is_none() && self.pax.is_none()
    }
}

fn place(last: &Option<PathBuf>) -> String {
    match last {
        Some(p) => format!("after entry {}", p.display()),
        None => "at the start of the archive".to_string(),
    }
}

fn bytes_path(bytes: &[u8]) -> PathBuf {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    PathBuf::from(OsStr::from_bytes(&bytes[..end]))
}

/// Reads the tar stream `reader` entry by entry, giving each entry (with its long names and PAX
/// path, link and size folded in) and its data to `visit`. Header records larger than
/// `max_record_bytes` are refused before they are read; data `visit` leaves unread is skipped
/// (read and discarded, so a counting reader underneath still counts it).
pub fn read_entries<R, E>(
    reader: R,
    max_record_bytes: u64,
    mut visit: impl FnMut(EntryMeta, &mut dyn Read) -> Result<(), E>,
) -> Result<(), E>
where
    R: Read,
    E: From<RecordError>,
{
    let mut archive = tar::Archive::new(reader);
    let entries = archive.entries().map_err(RecordError::Io)?.raw(true);
    let mut pending = Pending::default();
    let mut last: Option<PathBuf> = None;
    for entry in entries {
        let mut entry = entry.map_err(RecordError::Io)?;
        let kind = entry.header().entry_type();
        let size = entry.size();
        let record = match kind {
            tar::EntryType::GNULongName => Some("GNU long name"),
            tar::EntryType::GNULongLink => Some("GNU long link"),
            tar::EntryType::XHeader => Some("PAX extended header"),
            tar::EntryType::XGlobalHeader => Some("PAX global header"),
            _ => None,
        };
        if let Some(record) = record {
            if size > max_record_bytes {
                return Err(RecordError::TooLarge {
                    kind: record,
                    place: place(&last),
                    size,
                    limit: max_record_bytes,
                }
                .into());
            }
            let mut data = Vec::with_capacity(size as usize);
            (&mut entry)
                .take(size)
                .read_to_end(&mut data)
                .map_err(RecordError::Io)?;
            let slot = match kind {
                tar::EntryType::GNULongName => &mut pending.long_name,
                tar::EntryType::GNULongLink => &mut pending.long_link,
                tar::EntryType::XHeader => &mut pending.pax,
                // A global header's settings (times, owners) mean nothing to a bundle.
                _ => continue,
            };
            if slot.replace(data).is_some() {
                return Err(RecordError::Malformed {
                    place: place(&last),
                    reason: format!("two {record} records describe the same entry"),
                }
                .into());
            }
            continue;
        }
        let meta = fold(&entry, std::mem::take(&mut pending), &last)?;
        last = Some(meta.path.clone());
        visit(meta, &mut entry)?;
    }
    if !pending.is_empty() {
        return Err(RecordError::Malformed {
            place: place(&last),
            reason: "header records describe an entry that never comes".into(),
        }
        .into());
    }
    Ok(())
}

/// The entry's metadata with its pending records applied, as the tar crate would apply them
/// (long names over PAX over the header). A PAX `size` must agree with the header: the stream is
/// walked by the header's size, and a parser that disagrees would see another archive.
fn fold<R: Read>(
    entry: &tar::Entry<'_, R>,
    pending: Pending,
    last: &Option<PathBuf>,
) -> Result<EntryMeta, RecordError> {
    let header = entry.header();
    let mut path = bytes_path(&header.path_bytes());
    let mut link = header.link_name_bytes().map(|l| bytes_path(&l));
    let size = entry.size();
    if let Some(pax) = &pending.pax {
        for ext in tar::PaxExtensions::new(pax) {
            let ext = ext.map_err(|e| RecordError::Malformed {
                place: place(last),
                reason: format!("PAX record: {e}"),
            })?;
            match ext.key_bytes() {
                b"path" => path = bytes_path(ext.value_bytes()),
                b"linkpath" => link = Some(bytes_path(ext.value_bytes())),
                b"size" => {
                    let declared = ext.value().ok().and_then(|v| v.parse::<u64>().ok());
                    if declared != Some(size) {
                        return Err(RecordError::Malformed {
                            place: place(last),
                            reason: format!(
                                "PAX size {} disagrees with the header's size {size}",
                                String::from_utf8_lossy(ext.value_bytes())
                            ),
                        });
                    }
                }
                _ => {}
            }
        }
    }
    if let Some(name) = &pending.long_name {
        path = bytes_path(name);
    }
    if let Some(target) = &pending.long_link {
        link = Some(bytes_path(target));
    }
    Ok(EntryMeta {
        path,
        link,
        kind: header.entry_type(),
        size,
        mode: header.mode().unwrap_or(0o644),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn append(b: &mut tar::Builder<Vec<u8>>, kind: tar::EntryType, path: &[u8], data: &[u8]) {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(kind);
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.as_mut_bytes()[..path.len()].copy_from_slice(path);
        h.set_cksum();
        b.append(&h, data).unwrap();
    }

    fn pax(key: &str, value: &str) -> Vec<u8> {
        let body = format!(" {key}={value}\n");
        let mut len = body.len() + 1;
        while format!("{len}{body}").len() != len {
            len += 1;
        }
        format!("{len}{body}").into_bytes()
    }

    fn paths(data: &[u8], limit: u64) -> Result<Vec<(String, u64)>, RecordError> {
        let mut out = Vec::new();
        read_entries(data, limit, |meta, _| {
            out.push((meta.path.display().to_string(), meta.size));
            Ok::<_, RecordError>(())
        })?;
        Ok(out)
    }

    #[test]
    fn long_names_and_pax_paths_are_folded_into_their_entry() {
        let mut b = tar::Builder::new(Vec::new());
        let long = "d/".repeat(80) + "file.yaml";
        append(
            &mut b,
            tar::EntryType::GNULongName,
            b"././@LongLink",
            long.as_bytes(),
        );
        append(&mut b, tar::EntryType::Regular, b"short", b"abc");
        let record = pax("path", "from/pax.yaml");
        append(&mut b, tar::EntryType::XHeader, b"pax", &record);
        append(&mut b, tar::EntryType::Regular, b"ignored", b"x");
        append(&mut b, tar::EntryType::Regular, b"plain", b"");
        let data = b.into_inner().unwrap();
        assert_eq!(
            paths(&data, 1024).unwrap(),
            [
                (long, 3),
                ("from/pax.yaml".to_string(), 1),
                ("plain".to_string(), 0)
            ]
        );
    }

    #[test]
    fn oversized_records_are_refused_before_they_are_read() {
        let mut b = tar::Builder::new(Vec::new());
        append(&mut b, tar::EntryType::Regular, b"first", b"");
        append(&mut b, tar::EntryType::XHeader, b"pax", &vec![b'x'; 4096]);
        append(&mut b, tar::EntryType::Regular, b"second", b"");
        let data = b.into_inner().unwrap();
        let err = paths(&data, 1024).unwrap_err().to_string();
        assert!(
            err.contains("PAX extended header record of 4096 bytes after entry first")
                && err.contains("limit of 1024"),
            "{err}"
        );
    }

    #[test]
    fn a_pax_size_that_disagrees_with_the_header_is_refused() {
        let mut b = tar::Builder::new(Vec::new());
        append(&mut b, tar::EntryType::XHeader, b"pax", &pax("size", "99"));
        append(&mut b, tar::EntryType::Regular, b"f", b"abc");
        let err = paths(&b.into_inner().unwrap(), 1024).unwrap_err();
        assert!(err.to_string().contains("PAX size 99"), "{err}");
    }

    #[test]
    fn the_meter_counts_skipped_data_and_stops_at_its_limit() {
        let mut b = tar::Builder::new(Vec::new());
        append(&mut b, tar::EntryType::Regular, b"a", &[0u8; 10_000]);
        append(&mut b, tar::EntryType::Regular, b"b", &[0u8; 10_000]);
        let data = b.into_inner().unwrap();
        let meter = Meter::new(15_000);
        // Nothing reads the data: the tar reader skips it, through the meter.
        let result = paths_through(&data, &meter);
        assert!(result.is_err());
        assert!(matches!(meter.stopped(), Some(Stop::OverLimit { .. })));
        let meter = Meter::new(1 << 20);
        paths_through(&data, &meter).unwrap();
        // Both entries' data were inflated to be skipped (the reader stops at the first of the
        // two end-of-archive blocks).
        assert!(meter.count() > 20_000 && meter.count() <= data.len() as u64);
    }

    fn paths_through(data: &[u8], meter: &Arc<Meter>) -> Result<(), RecordError> {
        read_entries(CountingReader::new(data, meter.clone()), 1024, |_, _| {
            Ok::<_, RecordError>(())
        })
    }

    #[test]
    fn a_cancelled_meter_stops_the_reader() {
        let flag = Arc::new(AtomicBool::new(false));
        let meter = Meter::with_cancel(u64::MAX, Some(flag.clone()));
        let mut reader = CountingReader::new(&[1u8; 100][..], meter.clone());
        let mut buf = [0u8; 10];
        assert_eq!(reader.read(&mut buf).unwrap(), 10);
        flag.store(true, Ordering::Relaxed);
        assert!(reader.read(&mut buf).is_err());
        assert_eq!(meter.stopped(), Some(Stop::Cancelled));
    }

    #[test]
    fn meters_drawing_on_one_allowance_give_it_back_when_dropped() {
        let shared = SharedAllowance::new(100);
        let a = Meter::drawing_on(1000, None, Some(shared.clone()));
        let b = Meter::drawing_on(1000, None, Some(shared.clone()));
        a.charge(60).unwrap();
        assert!(matches!(
            b.charge(60),
            Err(Stop::SharedOverLimit {
                reached: 120,
                limit: 100
            })
        ));
        // The refused meter took nothing; the other keeps what it holds until dropped.
        assert_eq!(shared.held(), 60);
        drop(a);
        assert_eq!(shared.held(), 0);
        let c = Meter::drawing_on(1000, None, Some(shared.clone()));
        c.charge(100).unwrap();
    }
}
