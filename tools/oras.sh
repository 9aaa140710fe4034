#!/usr/bin/env bash
# Builds the ORAS CLI used ONLY by the source tests, which push ORAS artifacts (a directory, a
# single file) with the real client so the image source is checked against what `oras push`
# writes. Built from its Go module with `go install` at a pinned release into
# ${PALLET_CACHE_DIR:-~/.cache/pallet}/bin/oras and never committed; an existing binary of the
# pinned version is reused as is.
#
#   tools/oras.sh build   build (or reuse) the pinned oras; prints its path
#   tools/oras.sh path    print where the binary lives (built or not)
set -euo pipefail

# Pinned so the tests do not drift; bump deliberately and re-run tests/source_artifacts.rs.
ORAS_VERSION=v1.2.3

cache=${PALLET_CACHE_DIR:-$HOME/.cache/pallet}
bin="$cache/bin/oras"
export PATH="/usr/local/go/bin:$PATH"

case "${1:-build}" in
  path)
    echo "$bin"
    ;;
  build)
    if [ -x "$bin" ] && "$bin" version 2>/dev/null | grep -qx "Version: *${ORAS_VERSION#v}"; then
      echo "$bin"
      exit 0
    fi
    mkdir -p "$cache/bin"
    # A release module prints its bare version in `oras version`, which the reuse check relies on.
    GOBIN="$cache/bin" CGO_ENABLED=0 go install -trimpath "oras.land/oras/cmd/oras@$ORAS_VERSION" >&2
    "$bin" version >&2
    echo "$bin"
    ;;
  *)
    echo "usage: $0 [build|path]" >&2
    exit 2
    ;;
esac
