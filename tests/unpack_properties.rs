//! Property tests of the tar unpacker on random archives (files, directories, symlinks and
//! hardlinks with hostile paths and targets, optionally gzip-compressed, optionally cut short or
//! corrupted): whatever the archive, nothing is written outside the destination, every symlink
//! left in an accepted tree resolves inside it, and what the tree holds never exceeds the budget
//! (hardlinks counted at their size, as copying the tree would cost).

use std::collections::HashSet;
use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use pallet::source::unpack::{unpack_tar, Compression};
use pallet::source::{Budget, Limits};
use proptest::prelude::*;

/// Path components drawn from names, the current and parent directory, and what a link may aim
/// at outside.
fn component() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec!["a", "b", "c.yaml", "d"]).prop_map(str::to_string),
        1 => Just("..".to_string()),
        1 => Just(".".to_string()),
        1 => Just("outside".to_string()),
    ]
}

fn path() -> impl Strategy<Value = String> {
    (any::<bool>(), prop::collection::vec(component(), 1..4)).prop_map(|(absolute, parts)| {
        let joined = parts.join("/");
        if absolute {
            format!("/{joined}")
        } else {
            joined
        }
    })
}

#[derive(Debug, Clone)]
enum Entry {
    File(String, usize),
    Dir(String),
    Symlink(String, String),
    Hardlink(String, String),
    /// A hardlink to the n-th file entry before it (modulo their number), which a random path
    /// would seldom name.
    HardlinkToEarlier(String, usize),
}

fn entry() -> impl Strategy<Value = Entry> {
    prop_oneof![
        3 => (path(), 0usize..6000).prop_map(|(p, n)| Entry::File(p, n)),
        1 => path().prop_map(Entry::Dir),
        2 => (path(), path()).prop_map(|(p, t)| Entry::Symlink(p, t)),
        1 => (path(), path()).prop_map(|(p, t)| Entry::Hardlink(p, t)),
        3 => (path(), any::<usize>()).prop_map(|(p, n)| Entry::HardlinkToEarlier(p, n)),
    ]
}

/// The entries with every [`Entry::HardlinkToEarlier`] resolved to a path.
fn resolve(entries: &[Entry]) -> Vec<Entry> {
    let mut files = Vec::new();
    let mut out = Vec::new();
    for entry in entries {
        match entry {
            Entry::File(p, _) => files.push(p.clone()),
            Entry::HardlinkToEarlier(p, n) if !files.is_empty() => {
                out.push(Entry::Hardlink(p.clone(), files[n % files.len()].clone()));
                continue;
            }
            Entry::HardlinkToEarlier(..) => continue,
            _ => {}
        }
        out.push(entry.clone());
    }
    out
}

/// Writes the entry's header with its path and link bytes as given (no normalisation, which the
/// tar crate's own setters would apply), using GNU long names past 100 bytes.
fn append(builder: &mut tar::Builder<Vec<u8>>, entry: &Entry) {
    let mut header = tar::Header::new_gnu();
    header.set_mode(0o644);
    let (path, data, kind, link) = match entry {
        Entry::File(p, n) => (p, vec![b'x'; *n], tar::EntryType::Regular, None),
        Entry::Dir(p) => (p, Vec::new(), tar::EntryType::Directory, None),
        Entry::Symlink(p, t) => (p, Vec::new(), tar::EntryType::Symlink, Some(t)),
        Entry::Hardlink(p, t) => (p, Vec::new(), tar::EntryType::Link, Some(t)),
        Entry::HardlinkToEarlier(..) => return,
    };
    header.set_entry_type(kind);
    header.set_size(data.len() as u64);
    let bytes = header.as_mut_bytes();
    let name = path.as_bytes();
    bytes[..name.len().min(100)].copy_from_slice(&name[..name.len().min(100)]);
    if let Some(link) = link {
        let link = link.as_bytes();
        bytes[157..157 + link.len().min(100)].copy_from_slice(&link[..link.len().min(100)]);
    }
    header.set_cksum();
    builder.append(&header, &data[..]).unwrap();
}

#[derive(Debug, Clone)]
enum Damage {
    None,
    Truncate(usize),
    Flip(usize, u8),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        6 => Just(Damage::None),
        1 => any::<usize>().prop_map(Damage::Truncate),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Damage::Flip(at, b)),
    ]
}

fn archive(entries: &[Entry], gzip: bool, damage: &Damage) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for entry in resolve(entries) {
        append(&mut builder, &entry);
    }
    let mut data = builder.into_inner().unwrap();
    if gzip {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(&data).unwrap();
        data = encoder.finish().unwrap();
    }
    match damage {
        Damage::None => {}
        Damage::Truncate(at) => data.truncate(at % (data.len() + 1)),
        Damage::Flip(at, b) => {
            let len = data.len();
            data[at % len] ^= b;
        }
    }
    data
}

/// Every name under `dir` (not following links): files' sizes summed per name, files and links
/// counted (directories are made for the entries below them too), links listed.
fn walk(dir: &Path, sizes: &mut u64, names: &mut u64, links: &mut Vec<std::path::PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let kind = entry.file_type().unwrap();
        if !kind.is_dir() {
            *names += 1;
        }
        if kind.is_dir() {
            walk(&entry.path(), sizes, names, links);
        } else if kind.is_symlink() {
            links.push(entry.path());
        } else {
            *sizes += entry.metadata().unwrap().len();
        }
    }
}

fn inodes_under(dir: &Path) -> HashSet<(u64, u64)> {
    let mut seen = HashSet::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            seen.insert((meta.dev(), meta.ino()));
            if entry.file_type().unwrap().is_dir() {
                pending.push(entry.path());
            }
        }
    }
    seen
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_archives_stay_inside_and_within_budget(
        entries in prop::collection::vec(entry(), 0..24),
        gzip in any::<bool>(),
        damage in damage(),
        max_total in 0u64..40_000,
        max_entries in 1u64..30,
    ) {
        let sandbox = tempfile::tempdir().unwrap();
        // What a link may aim at: a sibling of the destination holding a file.
        let outside = sandbox.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("c.yaml"), "secret").unwrap();
        let before = inodes_under(sandbox.path());
        let dest = sandbox.path().join("dest");
        fs::create_dir(&dest).unwrap();
        let limits = Limits { max_total_bytes: max_total, max_entries, ..Limits::DEFAULT };
        let mut budget = Budget::new(limits);
        let data = archive(&entries, gzip, &damage);
        let result = unpack_tar(&data[..], Compression::Detect, &dest, &mut budget, false);

        // Nothing outside the destination changed: the sandbox holds the same inodes plus
        // what is under dest.
        let mut after = inodes_under(sandbox.path());
        for inode in inodes_under(&dest) {
            after.remove(&inode);
        }
        let dest_meta = fs::metadata(&dest).unwrap();
        after.remove(&(dest_meta.dev(), dest_meta.ino()));
        prop_assert_eq!(&after, &before, "written outside: {:?}", result);
        prop_assert_eq!(fs::read_to_string(outside.join("c.yaml")).unwrap(), "secret");

        let (mut sizes, mut names, mut links) = (0, 0, Vec::new());
        walk(&dest, &mut sizes, &mut names, &mut links);
        // Never more than the budget, accepted or refused: each name costs its full size.
        prop_assert!(sizes <= max_total, "{} bytes on disk, budget {}: {:?}", sizes, max_total, result);
        prop_assert!(budget.bytes() <= max_total || result.is_err());
        prop_assert!(names <= max_entries, "{} names, {} entries allowed", names, max_entries);
        if result.is_ok() {
            let root = fs::canonicalize(&dest).unwrap();
            for link in links {
                let real = fs::canonicalize(&link);
                prop_assert!(
                    real.as_ref().is_ok_and(|r| r.starts_with(&root)),
                    "{} resolves to {:?}", link.display(), real
                );
            }
        }
    }
}
