//! Packaged Helm charts (`helm package` output, the layer of `helm push`, a chart repository's
//! `.tgz`): one top-level directory named after the chart, holding `Chart.yaml`. Sources that
//! carry a packaged chart unpack it with [`unpack_chart`], which puts the chart's own files at the
//! root of the tree, where the helm format reads them, so a chart from a repository lands exactly as
//! the same chart from git does.

use std::fs;
use std::io::Read;
use std::path::Path;

use super::budget::Budget;
use super::unpack::{self, Compression};
use super::SourceError;

/// Unpacks a packaged chart (tar, gzip detected) into `dest` (which must exist and be empty) with
/// its top-level directory stripped. Returns the chart's name from that directory. An archive
/// that is not one directory holding `Chart.yaml` is refused, naming what it holds.
///
/// Symlinks are checked again once the top directory is gone: `chart/up -> ..` pointed at the
/// unpack's root before, and would point above it after.
pub fn unpack_chart<R: Read>(
    reader: R,
    dest: &Path,
    budget: &mut Budget,
    what: &str,
) -> Result<String, SourceError> {
    unpack::unpack_tar(reader, Compression::Detect, dest, budget, false)?;
    let top = strip_chart_dir(dest, what)?;
    let links = unpack::find_symlinks(dest)?;
    unpack::verify_tree_symlinks(dest, &links).map_err(|e| match e {
        SourceError::UnsafeContent { path, reason } => SourceError::UnsafeContent {
            path: format!("{top}/{path}"),
            reason: format!("{reason} once the chart's top directory {top}/ is stripped"),
        },
        other => other,
    })?;
    Ok(top)
}

/// Moves the children of the single top-level chart directory of `dest` up into `dest`.
fn strip_chart_dir(dest: &Path, what: &str) -> Result<String, SourceError> {
    let io = |e| SourceError::io("unpack chart", e);
    let mut names = Vec::new();
    for entry in fs::read_dir(dest).map_err(io)? {
        names.push(
            entry
                .map_err(io)?
                .file_name()
                .to_string_lossy()
                .into_owned(),
        );
    }
    names.sort();
    let not_a_chart = |reason: String| SourceError::NotABundle {
        what: what.to_string(),
        reason,
    };
    let [top] = names.as_slice() else {
        return Err(not_a_chart(format!(
            "a packaged chart holds one directory, this archive holds {}",
            if names.is_empty() {
                "nothing".to_string()
            } else {
                names.join(", ")
            }
        )));
    };
    let top_path = dest.join(top);
    if !fs::symlink_metadata(&top_path).map_err(io)?.is_dir()
        || !top_path.join("Chart.yaml").is_file()
    {
        return Err(not_a_chart(format!(
            "a packaged chart holds <name>/Chart.yaml; {top} is not such a directory"
        )));
    }
    // Rename the directory aside first: the chart may hold a child with its own name.
    let aside = dest.join(".pallet-chart-top");
    fs::rename(&top_path, &aside).map_err(io)?;
    for entry in fs::read_dir(&aside).map_err(io)? {
        let entry = entry.map_err(io)?;
        fs::rename(entry.path(), dest.join(entry.file_name())).map_err(io)?;
    }
    fs::remove_dir(&aside).map_err(io)?;
    Ok(top.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::Limits;

    fn targz(entries: &[(&str, &str)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::fast(),
        ));
        for (path, data) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder
                .append_data(&mut header, path, data.as_bytes())
                .unwrap();
        }
        builder.into_inner().unwrap().finish().unwrap()
    }

    #[test]
    fn strips_the_chart_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let data = targz(&[
            ("podinfo/Chart.yaml", "name: podinfo\n"),
            ("podinfo/templates/podinfo/x.yaml", "x"),
            ("podinfo/values.yaml", "a: 1\n"),
        ]);
        let mut budget = Budget::new(Limits::default());
        let name = unpack_chart(&data[..], tmp.path(), &mut budget, "chart podinfo").unwrap();
        assert_eq!(name, "podinfo");
        assert!(tmp.path().join("Chart.yaml").is_file());
        assert!(tmp.path().join("templates/podinfo/x.yaml").is_file());
        assert!(!tmp.path().join("podinfo").exists());
    }

    #[test]
    fn refuses_archives_that_are_not_one_chart() {
        for (entries, expected) in [
            (
                vec![("a/Chart.yaml", "x"), ("b/Chart.yaml", "y")],
                "holds a, b",
            ),
            (vec![("a/values.yaml", "x")], "a is not such a directory"),
            (
                vec![("Chart.yaml", "x")],
                "Chart.yaml is not such a directory",
            ),
        ] {
            let tmp = tempfile::tempdir().unwrap();
            let mut budget = Budget::new(Limits::default());
            let err =
                unpack_chart(&targz(&entries)[..], tmp.path(), &mut budget, "chart c").unwrap_err();
            assert_eq!(err.category(), "NotABundle");
            assert!(err.to_string().contains(expected), "{err}");
        }
    }

    #[test]
    fn links_are_checked_after_the_top_directory_is_stripped() {
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(12);
        header.set_mode(0o644);
        builder
            .append_data(&mut header, "c/Chart.yaml", &b"name: c\nx: 1"[..12])
            .unwrap();
        let mut link = tar::Header::new_gnu();
        link.set_entry_type(tar::EntryType::Symlink);
        link.set_size(0);
        builder.append_link(&mut link, "c/up", "..").unwrap();
        let data = builder.into_inner().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("tree");
        fs::create_dir(&dest).unwrap();
        let mut budget = Budget::new(Limits::default());
        let err = unpack_chart(&data[..], &dest, &mut budget, "chart c").unwrap_err();
        assert_eq!(err.category(), "UnsafeContent", "{err}");
        assert!(
            err.to_string().contains("c/up") && err.to_string().contains("stripped"),
            "{err}"
        );
    }
}
