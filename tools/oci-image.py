#!/usr/bin/env python3
"""Writes an OCI image layout for the pallet agent from a root filesystem directory, without a
container runtime: one gzip layer (deterministic: sorted entries, fixed times, numeric owners),
an image config (non-root user, entrypoint, environment, OCI labels) and its manifest.
tools/release.sh pushes the layout with crane.

    tools/oci-image.py --rootfs DIR --out LAYOUT --version V --source URL --revision SHA \
        [--created EPOCH] [--owner PATH=UID:GID ...]

Prints the manifest's digest. The same inputs always give the same digest.
"""

import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import tarfile

USER = "65532:65532"
ENTRYPOINT = ["/usr/local/bin/pallet"]
CMD = ["agent", "--leader-elect", "--metrics-addr=0.0.0.0:8080"]
ENV = [
    "PATH=/usr/local/bin",
    # git and helm look for their configuration under $HOME; the root filesystem is read-only.
    "HOME=/tmp",
    # The CA bundle, for every TLS stack in the binary (rustls and libgit2's OpenSSL).
    "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
]


def layer_tar(rootfs, owners, mtime):
    """The uncompressed layer: every entry of rootfs, sorted, owned by root unless listed."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entries = []
        for directory, dirs, files in os.walk(rootfs):
            for name in dirs + files:
                entries.append(os.path.join(directory, name))
        for path in sorted(entries, key=lambda p: os.path.relpath(p, rootfs)):
            relative = os.path.relpath(path, rootfs)
            info = tar.gettarinfo(path, arcname=relative)
            uid, gid = owners.get(relative, (0, 0))
            info.uid, info.gid = uid, gid
            info.uname, info.gname = "", ""
            info.mtime = mtime
            info.pax_headers = {}
            if info.isreg():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buffer.getvalue()


def blob(layout, data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = os.path.join(layout, "blobs", "sha256", digest.split(":", 1)[1])
    with open(path, "wb") as f:
        f.write(data)
    return digest


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rootfs", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--revision", default="unknown")
    parser.add_argument("--created", type=int, default=0, help="Unix seconds (SOURCE_DATE_EPOCH)")
    parser.add_argument("--owner", action="append", default=[], help="PATH=UID:GID")
    args = parser.parse_args()

    owners = {}
    for entry in args.owner:
        path, ids = entry.split("=", 1)
        uid, gid = ids.split(":", 1)
        owners[path.strip("/")] = (int(uid), int(gid))

    os.makedirs(os.path.join(args.out, "blobs", "sha256"), exist_ok=True)
    tar = layer_tar(args.rootfs, owners, args.created)
    compressed = io.BytesIO()
    with gzip.GzipFile(fileobj=compressed, mode="wb", mtime=0, compresslevel=9) as gz:
        gz.write(tar)
    layer = compressed.getvalue()
    layer_digest = blob(args.out, layer)
    created = datetime.datetime.fromtimestamp(args.created, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    labels = {
        "org.opencontainers.image.title": "pallet",
        "org.opencontainers.image.description": "A bundle deployment agent for Kubernetes",
        "org.opencontainers.image.version": args.version,
        "org.opencontainers.image.source": args.source,
        "org.opencontainers.image.revision": args.revision,
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.created": created,
    }
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {
            "User": USER,
            "Entrypoint": ENTRYPOINT,
            "Cmd": CMD,
            "Env": ENV,
            "WorkingDir": "/",
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar).hexdigest()]},
        "history": [{"created": created, "created_by": "tools/release.sh"}],
    }
    config_bytes = canonical(config)
    config_digest = blob(args.out, config_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": len(config_bytes),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": layer_digest,
                "size": len(layer),
            }
        ],
        "annotations": {k: v for k, v in labels.items() if k != "org.opencontainers.image.description"},
    }
    manifest_bytes = canonical(manifest)
    manifest_digest = blob(args.out, manifest_bytes)
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": len(manifest_bytes),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {"org.opencontainers.image.ref.name": args.version},
            }
        ],
    }
    with open(os.path.join(args.out, "index.json"), "wb") as f:
        f.write(canonical(index))
    with open(os.path.join(args.out, "oci-layout"), "wb") as f:
        f.write(canonical({"imageLayoutVersion": "1.0.0"}))
    print(manifest_digest)


if __name__ == "__main__":
    main()
