#!/usr/bin/env bash
# Installs axe-core (the accessibility checker the web view's browser test injects into each
# page) from the npm registry into the cache, at a pinned version, and prints the path of its
# axe.min.js. Kept when already there.
#   tools/axe.sh            # install if missing, print the script's path
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

version=4.14.1
dir=$PALLET_CACHE/axe-core-$version
script=$dir/node_modules/axe-core/axe.min.js
if [ ! -s "$script" ]; then
  command -v npm >/dev/null 2>&1 || die "npm is needed to install axe-core (Node.js's package manager)"
  log "installing axe-core $version into $dir"
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-audit --no-fund --no-save --ignore-scripts "axe-core@$version" >&2
  [ -s "$script" ] || die "npm installed axe-core but $script is missing"
fi
echo "$script"
