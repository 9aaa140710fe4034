#!/usr/bin/env python3
"""Generates the malicious archive corpus that tests/source_malicious.rs feeds to the unpacker.

Run from anywhere: `python3 testdata/malicious/generate.py`. Output is deterministic (fixed
mtimes, gzip mtime 0), so re-running it leaves the committed files unchanged. Each archive
targets paths under /tmp/pallet-malicious-* or a few levels above the destination, which the
test checks were not created.
"""
import gzip
import io
import os
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))


def info(name, kind=tarfile.REGTYPE, size=0, linkname=""):
    t = tarfile.TarInfo(name)
    t.type = kind
    t.size = size
    t.mode = 0o644
    t.mtime = 0
    t.linkname = linkname
    return t


def tar_bytes(members, compress=False):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for member, data in members:
            tar.addfile(member, io.BytesIO(data) if data is not None else None)
    raw = buf.getvalue()
    if compress:
        raw = gzip.compress(raw, compresslevel=9, mtime=0)
    return raw


def write_tar(name, members, compress=False):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(tar_bytes(members, compress))


def file_member(name, data):
    return info(name, size=len(data)), data


ok = b"kind: ConfigMap\n"
evil = b"pwned\n"

# ../ in an entry path climbs out of the destination.
write_tar("path-traversal.tar", [file_member("ok.yaml", ok),
                                 file_member("../../../../pallet-malicious-traversal.txt", evil)])
# An absolute entry path.
write_tar("absolute-path.tar", [file_member("/tmp/pallet-malicious-absolute.txt", evil)])
# A symlink to a directory outside, then a file written through it.
write_tar("symlink-escape.tar", [
    (info("escape", tarfile.SYMTYPE, linkname="../../../../../../../../tmp"), None),
    file_member("escape/pallet-malicious-symlink.txt", evil),
])
# A symlink that is itself fine, followed by a file whose path goes through a symlink chain.
write_tar("symlink-absolute.tar", [
    (info("passwd", tarfile.SYMTYPE, linkname="/etc/passwd"), None),
])
# A hardlink to a file outside the destination (would expose or let us overwrite it).
write_tar("hardlink-escape.tar", [
    (info("shadow", tarfile.LNKTYPE, linkname="../../../../../../../../etc/hostname"), None),
])
# Device files and FIFOs have no place in a bundle.
dev = info("dev-null", tarfile.CHRTYPE)
dev.devmajor, dev.devminor = 1, 3
write_tar("device-file.tar", [(dev, None)])
write_tar("fifo.tar", [(info("pipe", tarfile.FIFOTYPE), None)])
# Many tiny files: stopped by the entry-count limit (the test sets it to 1000).
write_tar("many-files.tar.gz", [file_member(f"f/{i:05}.yaml", b"") for i in range(1500)],
          compress=True)
# A gzip bomb: 96 MiB of zeros in one file compresses to ~100 KiB (the test sets the total and
# per-file limits well below it; the real defaults apply the same check at 1 GiB / 512 MiB).
zeros = b"\0" * (96 << 20)
write_tar("gzip-bomb.tar.gz", [file_member("bomb.bin", zeros)], compress=True)

# ---- Archives that inflate far beyond their size. Each stays around 100 KiB on disk; the
# figure each would reach is in its comment. tests/source_malicious.rs runs them with limits of
# 32 MiB per source and 16 MiB per file; the agent's defaults (256 MiB, 64 MiB) refuse them too.

chart_yaml = b"apiVersion: v2\nname: NAME\nversion: 0.1.0\n"
config_map = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cm\n"


def chart(name):
    return chart_yaml.replace(b"NAME", name.encode())


# Hardlink amplification: one 1 MiB file and 300 hardlinks to it, ~1.7 KiB compressed. Free when
# links cost nothing; copied in full per link when sources are merged, 301 MiB.
links = [file_member("big.bin", b"\0" * (1 << 20))]
links += [(info(f"link-{i:03}", tarfile.LNKTYPE, linkname="big.bin"), None) for i in range(300)]
write_tar("hardlink-amplification.tar.gz", links, compress=True)


def record_bomb(kind, size):
    """A header record of `size` bytes, read whole into memory by a reader that trusts it."""
    return info("././@LongLink" if kind != tarfile.XHDTYPE else "pax", kind, size=size), b"a" * size


# A PAX extended header of 100 MiB before an ordinary file.
write_tar("pax-record-bomb.tar.gz", [record_bomb(tarfile.XHDTYPE, 100 << 20),
                                     file_member("ok.yaml", ok)], compress=True)
# A GNU long name of 100 MiB.
write_tar("gnu-longname-bomb.tar.gz", [record_bomb(tarfile.GNUTYPE_LONGNAME, 100 << 20),
                                       file_member("ok.yaml", ok)], compress=True)
# An entry the unpacker skips (the archive root "./", here a regular file) carrying 100 MiB of
# data that has to be inflated to be passed over.
write_tar("skipped-entry-bomb.tar.gz", [file_member("./", b"\0" * (100 << 20)),
                                        file_member("ok.yaml", ok)], compress=True)
# A chart whose subchart archive inflates to 200 MiB (the chart loader's limit is 128 MiB).
inner = tar_bytes([file_member("bomb/Chart.yaml", chart("bomb")),
                   file_member("bomb/files/zeros", b"\0" * (200 << 20))], compress=True)
write_tar("subchart-bomb.tar.gz", [file_member("Chart.yaml", chart("parent")),
                                   file_member("templates/cm.yaml", config_map),
                                   file_member("charts/bomb-0.1.0.tgz", inner)], compress=True)
# A chart with two directory links to their own directory: a loader that follows them walks
# 2^40 paths before the kernel's link limit stops it.
write_tar("dir-symlink-loop.tar.gz", [file_member("Chart.yaml", chart("loop")),
                                      file_member("templates/cm.yaml", config_map),
                                      (info("templates/a", tarfile.SYMTYPE, linkname="."), None),
                                      (info("templates/b", tarfile.SYMTYPE, linkname="."), None)],
          compress=True)
# A packaged chart whose link points at its own top directory's parent: inside the archive's
# root while the top directory is there, above the chart once it is stripped.
write_tar("stripped-link.tgz", [file_member("evil/Chart.yaml", chart("evil")),
                                file_member("evil/templates/cm.yaml", config_map),
                                (info("evil/up", tarfile.SYMTYPE, linkname=".."), None)],
          compress=True)
