//! Safe extraction of tar and tar+gzip archives (and git trees) into a directory.
//!
//! Archives come from registries, git servers and web servers the agent does not control, so
//! every entry is checked before anything touches the disk:
//!
//! - paths must be relative and may not contain `..`; nothing is ever written through a symlink
//!   (a parent component that is a symlink is refused), so a symlink planted by an earlier entry
//!   cannot redirect a later one outside the destination;
//! - symlinks must point inside the destination, both lexically when created and physically
//!   (after canonicalisation) once the whole tree is written; hardlinks must name a regular file
//!   already extracted, and are charged its size;
//! - device files and FIFOs are refused;
//! - the [`Budget`] counts every inflated byte (skipped entries' data included), entries and
//!   file sizes, and GNU long-name and PAX records are bounded before they are read, so tar and
//!   gzip bombs stop early instead of filling memory or the disk.
//!
//! OCI layer whiteouts (`.wh.<name>` and `.wh..wh..opq`) are honoured when asked for.

use std::fs;
use std::io::{self, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use pallet_formats::archive::{self, EntryMeta, RecordError};

use super::budget::{Budget, RECORD_BUDGET};
use super::SourceError;

/// Compression of an archive stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// A plain tar stream.
    None,
    /// A gzip-compressed tar stream.
    Gzip,
    /// Decide from the first bytes (gzip magic number or not).
    Detect,
}

/// Unpacks a tar stream (optionally gzip-compressed) into `dest`, which must exist.
///
/// With `whiteouts`, OCI whiteout entries delete what earlier layers wrote instead of being
/// extracted. On error, `dest` may hold a partial tree: callers unpack into a scratch directory
/// and discard it on failure (the cache does).
pub fn unpack_tar<R: Read>(
    reader: R,
    compression: Compression,
    dest: &Path,
    budget: &mut Budget,
    whiteouts: bool,
) -> Result<(), SourceError> {
    let mut reader = BufReader::with_capacity(256 << 10, reader);
    let gzip = match compression {
        Compression::Gzip => true,
        Compression::None => false,
        Compression::Detect => {
            let head = io::BufRead::fill_buf(&mut reader).map_err(|e| archive_error(&e))?;
            head.starts_with(&[0x1f, 0x8b])
        }
    };
    if gzip {
        let inflated = budget.reader(flate2::bufread::MultiGzDecoder::new(reader));
        unpack_entries(inflated, dest, budget, whiteouts)
    } else {
        let counted = budget.reader(reader);
        unpack_entries(counted, dest, budget, whiteouts)
    }
}

fn archive_error(e: &io::Error) -> SourceError {
    SourceError::BadArchive {
        reason: e.to_string(),
    }
}

/// What unpacking one entry can fail with: a refusal, or the archive's own records.
enum EntryError {
    Source(SourceError),
    Record(RecordError),
}

impl From<SourceError> for EntryError {
    fn from(e: SourceError) -> Self {
        EntryError::Source(e)
    }
}

impl From<RecordError> for EntryError {
    fn from(e: RecordError) -> Self {
        EntryError::Record(e)
    }
}

fn unpack_entries<R: Read>(
    reader: R,
    dest: &Path,
    budget: &mut Budget,
    whiteouts: bool,
) -> Result<(), SourceError> {
    let mut symlinks = Vec::new();
    // The entry being read, for refusals that happen while its data is inflated or skipped.
    let mut current: Option<PathBuf> = None;
    let max_record = budget.limits().max_record_bytes;
    let result = archive::read_entries(reader, max_record, |meta, data| {
        current = Some(meta.path.clone());
        unpack_entry(meta, data, dest, budget, whiteouts, &mut symlinks)
    });
    match result {
        Ok(()) => {}
        Err(EntryError::Source(e)) => return Err(e),
        Err(EntryError::Record(RecordError::Io(e))) => {
            return Err(budget
                .stopped(current.as_deref())
                .unwrap_or_else(|| archive_error(&e)))
        }
        Err(EntryError::Record(RecordError::TooLarge {
            kind,
            place,
            size,
            limit,
        })) => {
            return Err(SourceError::limit(
                format!("{kind} record {place}"),
                format!("{size} bytes"),
                RECORD_BUDGET,
                format!("{limit} bytes"),
            ))
        }
        Err(EntryError::Record(e @ RecordError::Malformed { .. })) => {
            return Err(SourceError::BadArchive {
                reason: e.to_string(),
            })
        }
    }
    verify_symlinks(dest, &symlinks)
}

/// Applies one archive entry to `dest`.
fn unpack_entry(
    meta: EntryMeta,
    data: &mut dyn Read,
    dest: &Path,
    budget: &mut Budget,
    whiteouts: bool,
    symlinks: &mut Vec<PathBuf>,
) -> Result<(), EntryError> {
    budget.entry(&meta.path)?;
    let Some(rel) = safe_relative(&meta.path)? else {
        return Ok(()); // "." or "./": the root itself
    };
    if whiteouts && apply_whiteout(dest, &rel)? {
        return Ok(());
    }
    check_no_symlink_parents(dest, &rel)?;
    let out = dest.join(&rel);
    let failed = |action: &str, e: io::Error| -> EntryError {
        // A read that failed because the budget stopped it says so, not "I/O error".
        budget
            .stopped(Some(&rel))
            .unwrap_or_else(|| io_err(action, &rel, e))
            .into()
    };
    match meta.kind {
        tar::EntryType::Directory => {
            if let Ok(existing) = fs::symlink_metadata(&out) {
                if !existing.is_dir() {
                    remove_any(&out).map_err(|e| failed("replace", e))?;
                }
            }
            fs::create_dir_all(&out).map_err(|e| failed("create directory", e))?;
        }
        tar::EntryType::Regular | tar::EntryType::Continuous => {
            budget.check_file_size(&rel, meta.size)?;
            prepare_parent(dest, &rel, &out)?;
            write_file(data, &out, meta.mode, meta.size).map_err(|e| failed("write", e))?;
        }
        tar::EntryType::Symlink => {
            let target = meta.link.ok_or_else(|| SourceError::UnsafeContent {
                path: rel.display().to_string(),
                reason: "symlink without a target".into(),
            })?;
            check_symlink_target(&rel, &target)?;
            prepare_parent(dest, &rel, &out)?;
            std::os::unix::fs::symlink(&target, &out).map_err(|e| failed("create symlink", e))?;
            symlinks.push(rel);
        }
        tar::EntryType::Link => {
            let target = meta.link.ok_or_else(|| SourceError::UnsafeContent {
                path: rel.display().to_string(),
                reason: "hardlink without a target".into(),
            })?;
            let Some(target_rel) =
                safe_relative(&target).map_err(|_| unsafe_link(&rel, &target))?
            else {
                return Err(unsafe_link(&rel, &target).into());
            };
            check_no_symlink_parents(dest, &target_rel).map_err(|_| unsafe_link(&rel, &target))?;
            let source = dest.join(&target_rel);
            let size = match fs::symlink_metadata(&source) {
                Ok(meta) if meta.is_file() => meta.len(),
                _ => return Err(unsafe_link(&rel, &target).into()),
            };
            // A link costs what its target holds: whoever copies the tree later copies it again.
            budget.check_file_size(&rel, size)?;
            budget.charge(&rel, size)?;
            prepare_parent(dest, &rel, &out)?;
            fs::hard_link(&source, &out).map_err(|e| failed("create hardlink", e))?;
        }
        tar::EntryType::Char | tar::EntryType::Block | tar::EntryType::Fifo => {
            return Err(SourceError::UnsafeContent {
                path: rel.display().to_string(),
                reason: "device files and FIFOs are not allowed in a bundle".into(),
            }
            .into());
        }
        other => {
            return Err(SourceError::UnsafeContent {
                path: rel.display().to_string(),
                reason: format!("unsupported archive entry type {other:?}"),
            }
            .into());
        }
    }
    Ok(())
}

/// Applies `rel` as an OCI whiteout if it is one; `Ok(true)` when it was.
fn apply_whiteout(dest: &Path, rel: &Path) -> Result<bool, SourceError> {
    let Some(name) = rel.file_name().and_then(|n| n.to_str()) else {
        return Ok(false);
    };
    if name == ".wh..wh..opq" {
        let dir = dest.join(rel.parent().unwrap_or(Path::new("")));
        check_no_symlink_parents(dest, rel)?;
        clear_dir(&dir).map_err(|e| io_err("apply opaque whiteout", rel, e))?;
        return Ok(true);
    }
    if let Some(target) = name.strip_prefix(".wh.") {
        let victim = rel.with_file_name(target);
        check_no_symlink_parents(dest, &victim)?;
        remove_any(&dest.join(&victim)).map_err(|e| io_err("apply whiteout", &victim, e))?;
        return Ok(true);
    }
    Ok(false)
}

fn unsafe_link(rel: &Path, target: &Path) -> SourceError {
    SourceError::UnsafeContent {
        path: rel.display().to_string(),
        reason: format!(
            "hardlink to {} which is not a file inside the destination",
            target.display()
        ),
    }
}

fn io_err(action: &str, rel: &Path, e: io::Error) -> SourceError {
    SourceError::Io {
        context: format!("{action} {}", rel.display()),
        source: e,
    }
}

/// Turns an archive path into a safe relative path: no root, no `..`, `.` dropped. `Ok(None)`
/// for the archive root itself.
pub fn safe_relative(raw: &Path) -> Result<Option<PathBuf>, SourceError> {
    let mut out = PathBuf::new();
    for comp in raw.components() {
        match comp {
            Component::Normal(c) => out.push(c),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                return Err(SourceError::UnsafeContent {
                    path: raw.display().to_string(),
                    reason: "absolute path".into(),
                })
            }
            Component::ParentDir => {
                return Err(SourceError::UnsafeContent {
                    path: raw.display().to_string(),
                    reason: "path contains '..'".into(),
                })
            }
        }
    }
    Ok(if out.as_os_str().is_empty() {
        None
    } else {
        Some(out)
    })
}

/// Refuses a symlink whose target is absolute or climbs above the destination, judged from the
/// link's own directory.
fn check_symlink_target(rel: &Path, target: &Path) -> Result<(), SourceError> {
    let escape = || SourceError::UnsafeContent {
        path: rel.display().to_string(),
        reason: format!(
            "symlink to {} points outside the destination",
            target.display()
        ),
    };
    if target.is_absolute() {
        return Err(escape());
    }
    let mut depth: i64 = rel.components().count() as i64 - 1;
    for comp in target.components() {
        match comp {
            Component::Normal(_) => depth += 1,
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return Err(escape());
                }
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return Err(escape()),
        }
    }
    Ok(())
}

/// Refuses to write below a component that is a symlink: following it could leave `dest`.
pub(crate) fn check_no_symlink_parents(dest: &Path, rel: &Path) -> Result<(), SourceError> {
    let mut here = dest.to_path_buf();
    let parent = rel.parent().unwrap_or(Path::new(""));
    for comp in parent.components() {
        here.push(comp);
        match fs::symlink_metadata(&here) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(SourceError::UnsafeContent {
                    path: rel.display().to_string(),
                    reason: "path goes through a symlink".into(),
                })
            }
            Ok(_) => {}
            Err(_) => break, // does not exist yet: nothing below it can be a symlink
        }
    }
    Ok(())
}

/// Creates the parent directories of `out` and removes whatever is at `out` (a later layer or
/// entry replaces an earlier one, as tar and OCI layers do).
fn prepare_parent(dest: &Path, rel: &Path, out: &Path) -> Result<(), SourceError> {
    if let Some(parent) = out.parent() {
        if parent != dest {
            fs::create_dir_all(parent).map_err(|e| io_err("create directory for", rel, e))?;
        }
    }
    if fs::symlink_metadata(out).is_ok() {
        remove_any(out).map_err(|e| io_err("replace", rel, e))?;
    }
    Ok(())
}

fn write_file(reader: &mut dyn Read, out: &Path, mode: u32, size: u64) -> io::Result<u64> {
    let mut file = fs::File::create(out)?;
    // Copy at most the declared size: the tar reader enforces it too, but a bound here keeps the
    // budget honest whatever the reader does.
    let written = io::copy(&mut reader.take(size), &mut file)?;
    file.flush()?;
    // Keep only the owner-executable bit's meaning: no setuid/setgid/sticky, no world-writable.
    let perm = if mode & 0o111 != 0 { 0o755 } else { 0o644 };
    file.set_permissions(fs::Permissions::from_mode(perm))?;
    Ok(written)
}

fn remove_any(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn clear_dir(dir: &Path) -> io::Result<()> {
    match fs::read_dir(dir) {
        Ok(entries) => {
            for entry in entries {
                remove_any(&entry?.path())?;
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// After the whole tree is written, every symlink must resolve to something inside `dest`. The
/// lexical check at creation cannot see chains of links (`a -> up/../x` with `up -> ..`).
fn verify_symlinks(dest: &Path, links: &[PathBuf]) -> Result<(), SourceError> {
    if links.is_empty() {
        return Ok(());
    }
    let root = fs::canonicalize(dest).map_err(|e| io_err("resolve", Path::new("."), e))?;
    for rel in links {
        let link = dest.join(rel);
        // A link removed by a later whiteout or entry is no longer there to check.
        match fs::symlink_metadata(&link) {
            Ok(meta) if meta.file_type().is_symlink() => {}
            _ => continue,
        }
        match fs::canonicalize(&link) {
            Ok(real) if real.starts_with(&root) => {}
            Ok(_) => {
                return Err(SourceError::UnsafeContent {
                    path: rel.display().to_string(),
                    reason: "symlink resolves outside the destination".into(),
                })
            }
            Err(_) => {
                return Err(SourceError::UnsafeContent {
                    path: rel.display().to_string(),
                    reason: "dangling symlink (its target is not in the bundle)".into(),
                })
            }
        }
    }
    Ok(())
}

/// Writes one file of a tree that is not a tar stream (a git blob, a single downloaded manifest)
/// under the same rules as archive entries.
pub fn write_tree_file(
    dest: &Path,
    raw: &Path,
    content: &[u8],
    executable: bool,
    budget: &mut Budget,
) -> Result<(), SourceError> {
    write_tree_stream(
        dest,
        raw,
        &mut &content[..],
        content.len() as u64,
        executable,
        budget,
    )
}

/// [`write_tree_file`] from a reader of `size` bytes, counted as it is copied, never held whole
/// in memory.
pub fn write_tree_stream(
    dest: &Path,
    raw: &Path,
    content: &mut dyn Read,
    size: u64,
    executable: bool,
    budget: &mut Budget,
) -> Result<(), SourceError> {
    budget.entry(raw)?;
    let Some(rel) = safe_relative(raw)? else {
        return Ok(());
    };
    budget.check_file_size(&rel, size)?;
    check_no_symlink_parents(dest, &rel)?;
    let out = dest.join(&rel);
    prepare_parent(dest, &rel, &out)?;
    let mode = if executable { 0o755 } else { 0o644 };
    let mut counted = budget.reader(content);
    write_file(&mut counted, &out, mode, size).map_err(|e| {
        budget
            .stopped(Some(&rel))
            .unwrap_or_else(|| io_err("write", &rel, e))
    })?;
    Ok(())
}

/// Creates a symlink of a tree that is not a tar stream; call [`verify_tree_symlinks`] once the
/// tree is complete.
pub fn write_tree_symlink(
    dest: &Path,
    raw: &Path,
    target: &Path,
    budget: &mut Budget,
) -> Result<Option<PathBuf>, SourceError> {
    budget.entry(raw)?;
    let Some(rel) = safe_relative(raw)? else {
        return Ok(None);
    };
    check_symlink_target(&rel, target)?;
    check_no_symlink_parents(dest, &rel)?;
    let out = dest.join(&rel);
    prepare_parent(dest, &rel, &out)?;
    std::os::unix::fs::symlink(target, &out).map_err(|e| io_err("create symlink", &rel, e))?;
    Ok(Some(rel))
}

/// Checks, once a tree is complete, that every symlink in `links` resolves inside `dest`.
pub fn verify_tree_symlinks(dest: &Path, links: &[PathBuf]) -> Result<(), SourceError> {
    verify_symlinks(dest, links)
}

/// Every symlink under `dest` (not following any), relative to it: what to verify again once a
/// tree has been rearranged (a chart's top directory stripped).
pub fn find_symlinks(dest: &Path) -> Result<Vec<PathBuf>, SourceError> {
    let mut links = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let dir = dest.join(&rel);
        for entry in fs::read_dir(&dir).map_err(|e| io_err("read", &rel, e))? {
            let entry = entry.map_err(|e| io_err("read", &rel, e))?;
            let child = rel.join(entry.file_name());
            let kind = entry.file_type().map_err(|e| io_err("read", &child, e))?;
            if kind.is_symlink() {
                links.push(child);
            } else if kind.is_dir() {
                pending.push(child);
            }
        }
    }
    links.sort();
    Ok(links)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::budget::Limits;

    fn tar_with(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        build(&mut b);
        b.into_inner().unwrap()
    }

    fn file(b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8]) {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, path, data).unwrap();
    }

    #[test]
    fn whiteouts_remove_earlier_layer_content() {
        let dir = tempfile::tempdir().unwrap();
        let mut budget = Budget::new(Limits::default());
        let l1 = tar_with(|b| {
            file(b, "a/x.yaml", b"x");
            file(b, "a/y.yaml", b"y");
            file(b, "b/z.yaml", b"z");
        });
        let l2 = tar_with(|b| {
            file(b, "a/.wh.x.yaml", b"");
            file(b, "b/.wh..wh..opq", b"");
            file(b, "b/new.yaml", b"n");
        });
        unpack_tar(&l1[..], Compression::None, dir.path(), &mut budget, true).unwrap();
        unpack_tar(&l2[..], Compression::None, dir.path(), &mut budget, true).unwrap();
        assert!(!dir.path().join("a/x.yaml").exists());
        assert!(dir.path().join("a/y.yaml").exists());
        assert!(!dir.path().join("b/z.yaml").exists());
        assert_eq!(fs::read(dir.path().join("b/new.yaml")).unwrap(), b"n");
    }

    #[test]
    fn symlink_target_checks() {
        assert!(check_symlink_target(Path::new("a/l"), Path::new("../b")).is_ok());
        assert!(check_symlink_target(Path::new("a/l"), Path::new("../../b")).is_err());
        assert!(check_symlink_target(Path::new("l"), Path::new("/etc/passwd")).is_err());
    }

    #[test]
    fn symlink_chain_escape_is_caught_after_the_fact() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir(&root).unwrap();
        let mut budget = Budget::new(Limits::default());
        // d/up -> .. (inside), d/a -> up/../outside: lexically d/outside, physically ../outside.
        fs::write(dir.path().join("outside"), b"secret").unwrap();
        let data = tar_with(|b| {
            for (p, t) in [("d/up", ".."), ("d/a", "up/../outside")] {
                let mut h = tar::Header::new_gnu();
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_size(0);
                b.append_link(&mut h, p, t).unwrap();
            }
        });
        let err = unpack_tar(&data[..], Compression::None, &root, &mut budget, false).unwrap_err();
        assert_eq!(err.category(), "UnsafeContent", "{err}");
    }

    #[test]
    fn limits_stop_large_files_and_many_entries() {
        let dir = tempfile::tempdir().unwrap();
        let data = tar_with(|b| file(b, "big", &[0u8; 4096]));
        let mut budget = Budget::new(Limits {
            max_file_bytes: 1024,
            ..Limits::default()
        });
        let err = unpack_tar(
            &data[..],
            Compression::Detect,
            dir.path(),
            &mut budget,
            false,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("refused file big: 4096 bytes"),
            "{err}"
        );
        let data = tar_with(|b| (0..10).for_each(|i| file(b, &format!("f{i}"), b"x")));
        let mut budget = Budget::new(Limits {
            max_entries: 5,
            ..Limits::default()
        });
        let err = unpack_tar(
            &data[..],
            Compression::Detect,
            dir.path(),
            &mut budget,
            false,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("6 entries is over the per-source entry limit"),
            "{err}"
        );
    }

    /// An endless tar stream: one entry declaring 1 TiB, then zeros for ever; raises `cancel`
    /// once `cancel_after` bytes have been read, as a fetch deadline would.
    struct Endless {
        header: Vec<u8>,
        sent: u64,
        cancel_after: u64,
        cancel: crate::source::Cancel,
    }

    impl Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.sent >= self.cancel_after {
                self.cancel.cancel();
            }
            let start = self.sent as usize;
            let n = if start < self.header.len() {
                let n = buf.len().min(self.header.len() - start);
                buf[..n].copy_from_slice(&self.header[start..start + n]);
                n
            } else {
                buf.fill(0);
                buf.len()
            };
            self.sent += n as u64;
            Ok(n)
        }
    }

    #[test]
    fn a_cancelled_unpack_stops_even_inside_skipped_data() {
        for path in ["./", "big.bin"] {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Regular);
            header.set_size(1 << 40);
            // Written raw: "./" is the archive root, skipped by the unpacker.
            header.as_mut_bytes()[..path.len()].copy_from_slice(path.as_bytes());
            header.set_cksum();
            let cancel = crate::source::Cancel::new();
            let reader = Endless {
                header: header.as_bytes().to_vec(),
                sent: 0,
                cancel_after: 4 << 20,
                cancel: cancel.clone(),
            };
            let dir = tempfile::tempdir().unwrap();
            let limits = Limits {
                max_total_bytes: u64::MAX,
                max_file_bytes: u64::MAX,
                ..Limits::default()
            };
            let mut budget = Budget::with_cancel(limits, &cancel);
            let err =
                unpack_tar(reader, Compression::None, dir.path(), &mut budget, false).unwrap_err();
            assert_eq!(err.category(), "Cancelled", "{path}: {err}");
            // Stopped within a read or two of the flag.
            assert!(budget.bytes() < 5 << 20, "{path}: {} bytes", budget.bytes());
        }
    }

    #[test]
    fn hardlinks_are_charged_their_target_size() {
        let dir = tempfile::tempdir().unwrap();
        let data = tar_with(|b| {
            file(b, "big", &[0u8; 4096]);
            for i in 0..10 {
                let mut h = tar::Header::new_gnu();
                h.set_entry_type(tar::EntryType::Link);
                h.set_size(0);
                b.append_link(&mut h, format!("l{i}"), "big").unwrap();
            }
        });
        let mut budget = Budget::new(Limits {
            max_total_bytes: 4096 * 5,
            ..Limits::default()
        });
        let err =
            unpack_tar(&data[..], Compression::None, dir.path(), &mut budget, false).unwrap_err();
        assert_eq!(err.category(), "LimitExceeded", "{err}");
        assert!(err.to_string().contains("file l"), "{err}");
    }
}
