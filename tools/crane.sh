#!/usr/bin/env bash
# Builds crane (go-containerregistry's registry CLI), which tools/release.sh uses to assemble the
# agent's OCI image from a root filesystem layer and push it, without a Docker daemon. Built
# from its Go module with `go install` at a pinned release into
# ${PALLET_CACHE_DIR:-~/.cache/pallet}/bin/crane and never committed; an existing binary of the
# pinned version is reused as is.
#
#   tools/crane.sh build   build (or reuse) the pinned crane; prints its path
#   tools/crane.sh path    print where the binary lives (built or not)
set -euo pipefail

# Pinned so releases do not drift; bump deliberately and re-run tests/release_image.rs.
CRANE_VERSION=v0.21.7

cache=${PALLET_CACHE_DIR:-$HOME/.cache/pallet}
bin="$cache/bin/crane"
export PATH="/usr/local/go/bin:$PATH"

case "${1:-build}" in
  path)
    echo "$bin"
    ;;
  build)
    if [ -x "$bin" ] && [ "$("$bin" version 2>/dev/null)" = "$CRANE_VERSION" ]; then
      echo "$bin"
      exit 0
    fi
    mkdir -p "$cache/bin"
    GOBIN="$cache/bin" CGO_ENABLED=0 go install -trimpath \
      "github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION" >&2
    "$bin" version >&2
    echo "$bin"
    ;;
  *)
    echo "usage: $0 [build|path]" >&2
    exit 2
    ;;
esac
