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


def write_tar(name, members, compress=False):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for member, data in members:
            tar.addfile(member, io.BytesIO(data) if data is not None else None)
    raw = buf.getvalue()
    if compress:
        raw = gzip.compress(raw, compresslevel=9, mtime=0)
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(raw)


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
