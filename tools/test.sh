#!/usr/bin/env bash
# Runs the whole test suite: lint, unit, integration and end-to-end tests.
#
# Installs and builds what is missing (Debian packages, the local control plane, the fixture
# servers, the helm oracle), starts the servers it needs on 127.0.0.1, runs every test, stops what
# it started, and exits non-zero on any failure. Safe to run with CI=true and no stdin.
#
# Build caches live outside the work tree (${PALLET_CACHE_DIR:-~/.cache/pallet}: cargo's target
# dir, the Go-built binaries; Go's own build cache in ~/.cache/go-build), so a fresh clone on the
# same machine reuses them and a second run is fast.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

export PALLET_CACHE_DIR=${PALLET_CACHE_DIR:-$HOME/.cache/pallet}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PALLET_CACHE_DIR/target}
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
# Incremental compilation state for the workspace's many test binaries grows past 15 GiB and
# a clean clone never reuses it; up.sh and test.sh agree so the binaries they share build once.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
export PATH="$PALLET_CACHE_DIR/bin:$HOME/.cargo/bin:/usr/local/go/bin:$PATH"

step() { printf '\n==> %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }
started=()
cleanup() {
  local code=$?
  # A failed run leaves nothing of the tests behind in a running control plane either (the last
  # step checks it on success).
  if [ "$code" -ne 0 ] && tools/controlplane.sh status >/dev/null 2>&1; then
    tools/test-leftovers.sh >&2 || true
  fi
  # Stop only what this run started, newest first, so a developer's own servers keep running.
  for ((i=${#started[@]}-1; i>=0; i--)); do
    "${started[i]}" stop || true
  done
  exit "$code"
}
trap cleanup EXIT

step "system packages"
tools/deps.sh

step "format and lint"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

step "build the tests"
cargo test --workspace --locked --no-run

step "documentation: reference pages current, links and anchors, condition reasons, process words"
# The same tests run again in the full `cargo test` below; here they fail early, with the
# command that regenerates a stale page (the same build as above: --workspace).
cargo test --workspace --locked --lib -- docs:: --test-threads="${PALLET_TEST_THREADS:-4}"

step "documentation site (mdBook, installed once into the cache)"
tools/mdbook.sh build >/dev/null

step "helm oracle (for the helm format's differential tests and helm push in the source tests)"
tools/helm.sh build

step "extra real-world helm charts (formats/tests/helm_conformance_extra.rs), from the Go module proxy"
tools/extra-charts.sh

step "oras CLI (pushes ORAS artifacts in tests/source_artifacts.rs)"
tools/oras.sh build

step "cosign CLI (signs images and charts in tests/verify_e2e.rs)"
tools/cosign.sh build

step "crane (tools/release.sh pushes the agent's image with it)"
tools/crane.sh build

step "kustomize oracle, and kustomize's own end-to-end suite recorded as cases (formats/tests/kustomize_krusty.rs)"
tools/kustomize.sh build
tools/kustomize-cases.sh

step "local control plane"
if ! tools/controlplane.sh status >/dev/null 2>&1; then
  started+=(tools/controlplane.sh)
fi
tools/controlplane.sh start

step "target control planes (remote clusters and fleets: tests/remote_*.rs, tests/fleet_*.rs)"
# Stops only the targets this run started; the management cluster is the local control plane.
target_clusters() { tools/clusters.sh "$1-targets"; }
if ! tools/clusters.sh status >/dev/null 2>&1; then
  started+=(target_clusters)
fi
tools/clusters.sh start

step "fixture servers"
if ! tools/fixtures.sh status >/dev/null 2>&1; then
  started+=(tools/fixtures.sh)
fi
tools/fixtures.sh start
# Running fixtures are not rebuilt by start; tests also run pallet-fixtures' receiver mode as a
# process of their own (tests/support/receiver.rs), which must be current.
tools/fixtures.sh build

step "release: the static binary and the agent's image, pushed to the fixture registry"
# tests/release_image.rs pulls this image back by digest and runs it (PALLET_RELEASE_DIR); the
# release build shares the cargo target dir, so only a changed source rebuilds it.
eval "$(tools/fixtures.sh env)"
release_registry=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["servers"]["registry-plain"]["host"])' "$PALLET_FIXTURES")
export PALLET_RELEASE_DIR="$PALLET_CACHE_DIR/release"
tools/release.sh "$release_registry/pallet" --plain-http --default-image "" --out "$PALLET_RELEASE_DIR"

step "control plane self-test"
tools/controlplane.sh selftest

step "control plane unit tests (the fake kubelet, the profiler)"
tools/controlplane.sh unit

step "cargo test"
# The two real-world helm corpora run in the next step, where their per-case lines and counts
# are shown (a passing test's output is otherwise captured).
cargo test --workspace --locked --no-fail-fast -- --test-threads="${PALLET_TEST_THREADS:-4}" \
  --skip real_world_charts_render_as_helm_template_does \
  --skip kustomize_conformance --skip kustomize_krusty_suite

step "helm against real-world charts: each case, and the counts"
cargo test --locked -p pallet-formats --test helm_conformance --test helm_conformance_extra \
  -- --nocapture

step "kustomize against real-world kustomizations and kustomize's own suite: each case, and the counts"
PALLET_KRUSTY_REQUIRED=1 PALLET_KUSTOMIZE_ORACLE=required \
  cargo test --locked -p pallet-formats --test kustomize_conformance \
  --test kustomize_krusty -- --nocapture

step "RBAC is sufficient: the agent end-to-end tests again, the agent as deploy/'s ServiceAccount"
# Every test file that starts agents (through tests/support/agent.rs) runs them with the token
# of pallet-system/pallet-agent instead of the admin's; the test code itself stays admin.
rbac_kubeconfig=$(tools/rbac-kubeconfig.sh)
agent_tests=()
# (Files marked "rbac-pass: skip" run agents against a control plane of their own, where the
# deploy/ ServiceAccount does not exist.)
for file in $(grep -l 'support/agent.rs' tests/*.rs); do
  grep -q 'rbac-pass: skip' "$file" && continue
  agent_tests+=(--test "$(basename "$file" .rs)")
done
PALLET_E2E_AGENT_KUBECONFIG=$rbac_kubeconfig \
  cargo test --locked "${agent_tests[@]}" -- --test-threads="${PALLET_TEST_THREADS:-4}"

step "nothing of the tests is left (no BundleDeployment labelled pallet.dev/test)"
tools/test-leftovers.sh

step "done"
