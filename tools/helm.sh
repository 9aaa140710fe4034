#!/usr/bin/env bash
# Builds the helm CLI used ONLY as the oracle for the helm format's differential tests
# (formats/tests/helm*.rs). It is built from its Go module with `go install` at a pinned release
# into ${PALLET_CACHE_DIR:-~/.cache/pallet}/bin/helm and never committed. Go's own caches make a
# second build fast; an existing binary of the pinned version is reused as is.
#
#   tools/helm.sh build   build (or reuse) the pinned helm; prints its path
#   tools/helm.sh path    print where the binary lives (built or not)
set -euo pipefail

# Pinned so the oracle does not drift under the tests; bump deliberately and re-run them.
HELM_VERSION=v3.19.5

cache=${PALLET_CACHE_DIR:-$HOME/.cache/pallet}
bin="$cache/bin/helm"
export PATH="/usr/local/go/bin:$PATH"

case "${1:-build}" in
  path)
    echo "$bin"
    ;;
  build)
    if [ -x "$bin" ] && "$bin" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"; then
      echo "$bin"
      exit 0
    fi
    mkdir -p "$cache/bin"
    # -trimpath and the version ldflag make `helm version` report the pinned release, which the
    # reuse check above relies on.
    GOBIN="$cache/bin" CGO_ENABLED=0 go install -trimpath \
      -ldflags "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
      "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
    "$bin" version --short >&2
    echo "$bin"
    ;;
  *)
    echo "usage: $0 [build|path]" >&2
    exit 2
    ;;
esac
