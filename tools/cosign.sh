#!/usr/bin/env bash
# Builds the cosign CLI used ONLY by the supply-chain tests, which sign images and charts with
# the real client (a key pair, a certificate made by the test, both signature layouts) so the
# agent's verification is checked against what cosign writes. Built from its Go module with
# `go install` at a pinned release into ${PALLET_CACHE_DIR:-~/.cache/pallet}/bin/cosign and never
# committed; an existing binary of the pinned version is reused as is.
#
#   tools/cosign.sh build   build (or reuse) the pinned cosign; prints its path
#   tools/cosign.sh path    print where the binary lives (built or not)
set -euo pipefail

# Pinned so the tests do not drift; bump deliberately and re-run tests/verify_e2e.rs.
COSIGN_VERSION=v3.1.3

cache=${PALLET_CACHE_DIR:-$HOME/.cache/pallet}
bin="$cache/bin/cosign"
export PATH="/usr/local/go/bin:$PATH"

case "${1:-build}" in
  path)
    echo "$bin"
    ;;
  build)
    if [ -x "$bin" ] && "$bin" version 2>/dev/null | grep -q "GitVersion: *${COSIGN_VERSION}$"; then
      echo "$bin"
      exit 0
    fi
    mkdir -p "$cache/bin"
    # The version ldflag makes `cosign version` report the pinned release, which the reuse check
    # above relies on.
    GOBIN="$cache/bin" CGO_ENABLED=0 go install -trimpath \
      -ldflags "-X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION" \
      "github.com/sigstore/cosign/v3/cmd/cosign@$COSIGN_VERSION" >&2
    "$bin" version >&2
    echo "$bin"
    ;;
  *)
    echo "usage: $0 [build|path]" >&2
    exit 2
    ;;
esac
