#!/usr/bin/env bash
# Builds pallet's release artefacts without a Docker daemon and pushes the agent's image:
#
#   tools/release.sh REPOSITORY [--plain-http] [--out DIR] [--binary PATH] [--tag TAG]
#                    [--default-image REF]
#
# - the binary: static (x86_64-unknown-linux-musl, OpenSSL built in) when that target and
#   musl-gcc are present, else the glibc build with the libraries it links, copied from this
#   machine; --binary takes a built one instead;
# - the image: that binary on an empty base (no shell, no package manager), a CA bundle, a
#   passwd entry for the non-root user 65532 it runs as, and OCI labels for the version, the
#   source and the commit, written as an OCI layout by tools/oci-image.py and pushed to
#   REPOSITORY:TAG (default the version) with crane (tools/crane.sh);
# - in DIR (default dist/): image.txt (the image pinned by digest), install.yaml (CRD, RBAC,
#   agent), install-least-privilege.yaml, crds.yaml, the Helm chart pallet-VERSION.tgz (its
#   image pinned by digest), the binary pallet-linux-amd64, and SHA256SUMS.
#
# install.yaml is `pallet install --export` of that binary with the pinned image: the objects
# `pallet install` applies, built from deploy/. The binary's `pallet install` installs
# REPOSITORY:TAG unless told otherwise; --default-image names another (or "" for none: the build
# then does not depend on the registry's address, as for the test suite's release).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$PALLET_ROOT"

repository=""
plain_http=false
out="$PALLET_ROOT/dist"
binary=""
tag=""
default_image=unset
while [ $# -gt 0 ]; do
  case "$1" in
    --plain-http) plain_http=true ;;
    --out) out=$2; shift ;;
    --binary) binary=$2; shift ;;
    --tag) tag=$2; shift ;;
    --default-image) default_image=$2; shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    -*) die "unknown flag $1" ;;
    *) [ -z "$repository" ] || die "one REPOSITORY only"; repository=$1 ;;
  esac
  shift
done
[ -n "$repository" ] || die "usage: tools/release.sh REPOSITORY [--plain-http] [--out DIR] [--binary PATH] [--tag TAG]"

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
tag=${tag:-$version}
[ "$default_image" != unset ] || default_image="$repository:$tag"
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
created=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
# The source label: where this checkout came from (PALLET_SOURCE_URL overrides it).
source_url=${PALLET_SOURCE_URL:-$(git remote get-url origin 2>/dev/null || echo unknown)}
export PATH="$PALLET_CACHE/bin:$HOME/.cargo/bin:/usr/local/go/bin:$PATH"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PALLET_CACHE/target}

started=$(now_ms)
if [ -z "$binary" ]; then
  musl=x86_64-unknown-linux-musl
  if rustup target list --installed 2>/dev/null | grep -qx "$musl" && command -v musl-gcc >/dev/null; then
    log "building the static binary ($musl)"
    PALLET_RELEASE_IMAGE="$default_image" cargo build --release --locked --target "$musl" --bin pallet >&2
    binary="$CARGO_TARGET_DIR/$musl/release/pallet"
  else
    log "no musl target (rustup target add $musl; apt-get install musl-tools): building for glibc"
    PALLET_RELEASE_IMAGE="$default_image" cargo build --release --locked --bin pallet >&2
    binary="$CARGO_TARGET_DIR/release/pallet"
  fi
fi
[ -x "$binary" ] || die "no binary at $binary"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc/ssl/certs" "$rootfs/tmp" "$rootfs/var/cache/pallet"
# Debug sections are not needed to run, only to debug: they would double the image.
objcopy --strip-debug "$binary" "$rootfs/usr/local/bin/pallet"
chmod 0755 "$rootfs/usr/local/bin/pallet"
if ldd "$binary" >/dev/null 2>&1; then
  # A dynamic binary: its libraries and loader, at the paths it looks for them.
  ldd "$binary" | awk '/=> \//{print $3} /^[ \t]*\/.*ld-linux/{print $1}' | sort -u | while read -r lib; do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
  done
fi
# The CA bundle of this machine's ca-certificates package (Mozilla's trust store).
cp -L /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/tmp:/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
chmod 1777 "$rootfs/tmp"
chmod 0755 "$rootfs/var/cache/pallet"

digest=$(python3 tools/oci-image.py --rootfs "$rootfs" --out "$work/layout" \
  --version "$version" --source "$source_url" --revision "$revision" --created "$created" \
  --owner var/cache/pallet=65532:65532)
crane=$(tools/crane.sh build)
insecure=()
$plain_http && insecure=(--insecure)
"$crane" push "${insecure[@]}" "$work/layout" "$repository:$tag" >&2
pinned="$repository@$digest"
# The registry must answer with the digest the layout holds.
[ "$("$crane" digest "${insecure[@]}" "$repository:$tag")" = "$digest" ] || die "the registry holds another digest for $repository:$tag"

mkdir -p "$out"
echo "$pinned" >"$out/image.txt"
"$binary" install --export --image "$pinned" >"$out/install.yaml"
"$binary" install --export --image "$pinned" --least-privilege >"$out/install-least-privilege.yaml"
"$binary" crd >"$out/crds.yaml"
cp "$rootfs/usr/local/bin/pallet" "$out/pallet-linux-amd64"
# The chart, its image pinned by digest.
mkdir -p "$work/chart"
cp -r deploy/chart "$work/chart/pallet"
python3 - "$work/chart/pallet/values.yaml" "${repository}" "${digest}" <<'PY'
import sys
path, repository, digest = sys.argv[1:]
text = open(path).read()
text = text.replace("  repository: pallet\n", f"  repository: {repository}\n", 1)
text = text.replace('  digest: ""\n', f'  digest: "{digest}"\n', 1)
open(path, "w").write(text)
PY
tar -C "$work/chart" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$created" \
  -czf "$out/pallet-$version.tgz" pallet
(cd "$out" && sha256sum image.txt install.yaml install-least-privilege.yaml crds.yaml \
  "pallet-$version.tgz" pallet-linux-amd64 >SHA256SUMS)

size=$(du -b "$work/layout/blobs/sha256" | tail -1 | cut -f1)
log "pushed $pinned ($((size / 1024 / 1024)) MiB compressed, in $(elapsed "$started")s); artefacts in $out"
echo "$pinned"
