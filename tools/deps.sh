#!/usr/bin/env bash
# Installs the Debian packages pallet's builds and tests need, when missing. Idempotent; needs
# root (or sudo) only when something is missing.
set -euo pipefail

# docker-registry: the OCI registry fixture. openssl: the test CA. git: the git fixture and
# libgit2's tests. pkg-config + libssl-dev: libgit2's HTTPS support links OpenSSL. python3 is
# used by small fixture scripts. gnupg: a signing key for the signed chart `helm push` uploads
# with its provenance (tests/source_artifacts.rs), and the keys `helm package --sign` and signed
# git tags use (tests/verify_git_charts_e2e.rs). openssh-client: ssh-keygen signs git commits
# there. time: GNU time's peak memory in benchmarks. musl-tools, perl, make: the static release
# binary (tools/release.sh; OpenSSL is built from source for it). binutils: objcopy strips it.
# chromium + chromium-driver: the web view's browser tests and benchmark (/usr/bin/chromium driven
# through /usr/bin/chromedriver).
packages=(docker-registry openssl git pkg-config libssl-dev ca-certificates python3 gnupg openssh-client
  time musl-tools perl make binutils chromium chromium-driver)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The release binary's target (tools/release.sh falls back to a glibc build without it).
if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
  rustup target add x86_64-unknown-linux-musl || echo "warning: no musl target; releases are built for glibc" >&2
fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "system packages present"
  exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
# The Debian package starts a registry service on :5000 where an init system runs; the fixture
# runs its own instances, so make sure that one is not in the way.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet docker-registry 2>/dev/null; then
  $sudo systemctl disable --now docker-registry || true
fi
