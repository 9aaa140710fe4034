#!/usr/bin/env bash
# Builds the documentation site from docs/ with mdBook, installed from crates.io at a pinned
# version into ${PALLET_CACHE_DIR:-~/.cache/pallet}/mdbook (never committed); an installed
# binary of the pinned version is reused as is.
#
#   tools/mdbook.sh install       install (or reuse) the pinned mdbook; prints its path
#   tools/mdbook.sh build [DIR]   build the site into DIR (default ${PALLET_CACHE_DIR}/docs-site);
#                                 prints DIR. Fails on a page SUMMARY.md names that does not exist.
#
# Links are checked by a test (src/docs/links.rs, in `cargo test`), without the network.
set -euo pipefail

# Pinned so the site does not change under the docs; bump deliberately and rebuild.
MDBOOK_VERSION=0.5.4

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${PALLET_CACHE_DIR:-$HOME/.cache/pallet}
install_root="$cache/mdbook"
bin="$install_root/bin/mdbook"
export PATH="$HOME/.cargo/bin:$PATH"

install() {
  if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -qx "mdbook v$MDBOOK_VERSION"; then
    echo "$bin"
    return 0
  fi
  # Only the search feature: serving and watching are not needed to build the site, and leaving
  # them out keeps the build small on two cores (open the built index.html to read it). The install has its own target dir so it does
  # not touch the project's.
  CARGO_TARGET_DIR="$cache/mdbook-target" cargo install --locked --quiet \
    --root "$install_root" --no-default-features --features search \
    mdbook --version "$MDBOOK_VERSION" >&2
  "$bin" --version >&2
  echo "$bin"
}

case "${1:-build}" in
  install)
    install
    ;;
  build)
    install >/dev/null
    out=${2:-$cache/docs-site}
    "$bin" build "$root/docs" --dest-dir "$out" >&2
    echo "$out"
    ;;
  *)
    echo "usage: $0 [install|build [DIR]]" >&2
    exit 2
    ;;
esac
