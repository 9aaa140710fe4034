#!/usr/bin/env bash
# Builds Flux's source-controller and kustomize-controller, used ONLY by the scale benchmark's
# optional peer comparison (benches/scale.rs with PALLET_BENCH_SCALE_PEERS=flux; not in CI). Each
# is built from its public Go module at a pinned release through a small wrapper module under
# tools/flux/<controller>/ (go.mod and go.sum committed: `go install mod@version` refuses modules
# with replace directives, and the wrapper carries the controller's own non-local replaces), into
# ${PALLET_CACHE_DIR:-~/.cache/pallet}/bin/. The controllers' CRDs (config/crd/bases of the same
# module versions) are copied beside them. An existing build of the pinned sources is reused.
#
#   tools/flux.sh build   build (or reuse) both controllers; prints the bin directory
#   tools/flux.sh crds    print the directory holding the CRDs (after build)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The releases are pinned in tools/flux/*/go.mod (the newest whose go directive the installed Go
# 1.26 accepts and whose dependencies the module proxy serves); bump there, then
# `go mod tidy -e` in that directory, and re-run the benchmark.
controllers=(source-controller kustomize-controller)

export PATH="/usr/local/go/bin:$PATH"
export CGO_ENABLED=0
src="$PALLET_ROOT/tools/flux"
bindir="$PALLET_CACHE/bin"
crds="$PALLET_CACHE/flux/crds"
stamp="$bindir/.flux.stamp"

fingerprint() {
  (cd "$src" && cat ./*/go.mod ./*/go.sum && go version && echo "$CGO_ENABLED") | sha256sum | cut -d' ' -f1
}

# version <controller>: the controller's module version pinned in its wrapper's go.mod.
version() {
  (cd "$src/$1" && go list -m -f '{{.Version}}' "github.com/fluxcd/$1")
}

cmd_build() {
  local fp c dir t0
  fp=$(fingerprint)
  if [ "$(cat "$stamp" 2>/dev/null)" = "$fp" ] && [ -x "$bindir/source-controller" ] &&
    [ -x "$bindir/kustomize-controller" ] && [ -n "$(ls "$crds" 2>/dev/null)" ]; then
    echo "$bindir"
    return 0
  fi
  mkdir -p "$bindir"
  t0=$(now_ms)
  rm -rf "$crds.tmp"
  mkdir -p "$crds.tmp"
  for c in "${controllers[@]}"; do
    log "flux: building $c $(version "$c") (the first build takes minutes)"
    (cd "$src/$c" && go build -trimpath -ldflags "-s -w" -o "$bindir/$c.tmp" "github.com/fluxcd/$c")
    # Rename, not copy: a running controller keeps its old inode.
    mv -f "$bindir/$c.tmp" "$bindir/$c"
    dir=$(cd "$src/$c" && go list -m -f '{{.Dir}}' "github.com/fluxcd/$c")
    cp "$dir"/config/crd/bases/*.yaml "$crds.tmp/"
  done
  chmod u+w "$crds.tmp"/*.yaml
  rm -rf "$crds"
  mv "$crds.tmp" "$crds"
  echo "$fp" >"$stamp"
  log "flux: built in $(elapsed "$t0") s: $bindir/{source-controller,kustomize-controller}, CRDs in $crds"
  echo "$bindir"
}

case "${1:-build}" in
  build) cmd_build ;;
  crds) echo "$crds" ;;
  *)
    echo "usage: $0 [build|crds]" >&2
    exit 2
    ;;
esac
