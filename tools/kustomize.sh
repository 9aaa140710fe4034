#!/usr/bin/env bash
# Builds the kustomize CLI used ONLY as the oracle for the kustomize format's differential tests
# (formats/tests/kustomize*.rs) and the kustomize side of the render benchmark. It is built from
# its Go module with `go install` at a pinned release into
# ${PALLET_CACHE_DIR:-~/.cache/pallet}/bin/kustomize and never committed. An existing binary of
# the pinned version is reused as is.
#
#   tools/kustomize.sh build    build (or reuse) the pinned kustomize; prints its path
#   tools/kustomize.sh path     print where the binary lives (built or not)
#   tools/kustomize.sh krusty   print the directory of kustomize's own end-to-end tests
#                               (api/krusty of the matching sigs.k8s.io/kustomize/api module)
set -euo pipefail

# kustomize v5.5.0 is what kubectl v1.32 embeds; its api module is v0.18.0.
KUSTOMIZE_VERSION=v5.5.0
KUSTOMIZE_API_VERSION=v0.18.0

cache=${PALLET_CACHE_DIR:-$HOME/.cache/pallet}
bin="$cache/bin/kustomize"
export PATH="/usr/local/go/bin:$PATH"

case "${1:-build}" in
  path)
    echo "$bin"
    ;;
  build)
    if [ -x "$bin" ] && [ -f "$bin.version" ] && [ "$(cat "$bin.version")" = "$KUSTOMIZE_VERSION" ]; then
      echo "$bin"
      exit 0
    fi
    mkdir -p "$cache/bin"
    GOBIN="$cache/bin" CGO_ENABLED=0 go install -trimpath \
      "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION" >&2
    echo "$KUSTOMIZE_VERSION" >"$bin.version"
    echo "$bin"
    ;;
  krusty)
    # The module cache holds the api module once kustomize is built; `go mod download` brings it
    # otherwise. Read-only files, never copied into the repository.
    dir=$(cd "$(mktemp -d)" && go mod download -json "sigs.k8s.io/kustomize/api@$KUSTOMIZE_API_VERSION" \
      | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    echo "$dir/krusty"
    ;;
  *)
    echo "usage: $0 [build|path|krusty]" >&2
    exit 2
    ;;
esac
