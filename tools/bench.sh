#!/usr/bin/env bash
# Runs every benchmark program and writes one report: each program's figures and ratios (they
# measure pallet and its reference side by side in one run), the machine they ran on, the commit.
#
#   tools/bench.sh            # full run (the reconcile benchmark's steady state lasts 300 s, the
#                             # soak 30 minutes)
#   tools/bench.sh --quick    # shorter: 30 s steady state, a 20 MB unpack tarball, scale
#                             # benchmark at 100 and 500 apps with a 60 s steady state, a
#                             # 3-minute soak, 1,000 bundles with a 60 s steady state
#   PALLET_BENCH_SCALE_PEERS=flux tools/bench.sh   # the scale benchmark also runs Flux's
#                             # controllers on the same apps (built by tools/flux.sh)
#
# Starts the local control plane and the fixture servers when they are not running (and stops
# only what it started). Output: .pallet/bench/report-<UTC time>-<commit>.md, one per run
# (override with PALLET_BENCH_OUT), plus each program's raw output under .pallet/bench/. Reports
# are not committed: docs/performance.md states the current figures and how to reproduce them.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export PALLET_CACHE_DIR=${PALLET_CACHE_DIR:-$HOME/.cache/pallet}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PALLET_CACHE_DIR/target}
export CARGO_TERM_COLOR=never
export PATH="$PALLET_CACHE_DIR/bin:$HOME/.cargo/bin:/usr/local/go/bin:$PATH"
state=${PALLET_STATE_DIR:-$root/.pallet}
out=${PALLET_BENCH_OUT:-$state/bench/report-$(date -u +%Y%m%dT%H%MZ)-$(git rev-parse --short HEAD).md}

if [ "${1:-}" = "--quick" ]; then
  export PALLET_BENCH_STEADY_SECONDS=${PALLET_BENCH_STEADY_SECONDS:-30}
  export PALLET_BENCH_MB=${PALLET_BENCH_MB:-20}
  export PALLET_BENCH_SCALE_SIZES=${PALLET_BENCH_SCALE_SIZES:-100,500}
  export PALLET_BENCH_SCALE_STEADY_SECONDS=${PALLET_BENCH_SCALE_STEADY_SECONDS:-60}
  export PALLET_BENCH_BUNDLES_N=${PALLET_BENCH_BUNDLES_N:-1000}
  export PALLET_BENCH_BUNDLES_STEADY_SECONDS=${PALLET_BENCH_BUNDLES_STEADY_SECONDS:-60}
  export PALLET_BENCH_SOAK_SECONDS=${PALLET_BENCH_SOAK_SECONDS:-180}
  mode="quick"
else
  mode="full"
fi

started=()
cleanup() {
  local code=$?
  for ((i=${#started[@]}-1; i>=0; i--)); do "${started[i]}" stop || true; done
  exit "$code"
}
trap cleanup EXIT

tools/deps.sh
tools/helm.sh build   # the helm benchmark compares with `helm template`
# The scale benchmark's optional peer (PALLET_BENCH_SCALE_PEERS=flux): Flux's controllers, built
# from their Go modules. Only then; built here, so the scale benchmark's recorded duration does
# not include a first build (it would build them itself otherwise).
case ",${PALLET_BENCH_SCALE_PEERS:-}," in
  *,flux,*) tools/flux.sh build >/dev/null ;;
esac
if ! tools/controlplane.sh status >/dev/null 2>&1; then started+=(tools/controlplane.sh); fi
tools/controlplane.sh start
if ! tools/fixtures.sh status >/dev/null 2>&1; then started+=(tools/fixtures.sh); fi
tools/fixtures.sh start

# The commit as the programs are built, not as the report is written.
commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (with local changes)')"
kubernetes=$(sed -n 's/^[[:space:]]*k8s.io\/kubernetes v/v/p' tools/controlplane/go.mod | head -n 1)
raw="$state/bench"
mkdir -p "$raw"
# Each entry: a name, then the command. Benchmarks run one after another, never in parallel:
# they share two cores, and side-by-side figures are only fair on a quiet machine.
benchmarks=(
  "reconcile|cargo bench --locked --bench reconcile"
  # Starts a control plane of its own (the shared one stays up for the other programs).
  "scale|cargo bench --locked --bench scale"
  # Also on control planes of its own: one agent and 10,000 BundleDeployments.
  "bundles|cargo bench --locked --bench bundles"
  "source|cargo bench --locked --bench source"
  "receiver|cargo bench --locked --bench receiver"
  "helm_render|cargo bench --locked -p pallet-formats --bench helm_render"
  "helm_charts|cargo bench --locked --bench helm_charts"
  "kustomize_render|cargo bench --locked --bench kustomize_render"
  "changelog|cargo bench --locked --bench changelog"
  "soak|cargo bench --locked --bench soak"
  "render_bench|cargo run --locked --release -q -p pallet-formats --example render_bench"
)
for entry in "${benchmarks[@]}"; do
  name=${entry%%|*}
  command=${entry#*|}
  printf '\n==> %s: %s (%s)\n' "$name" "$command" "$(date -u +%H:%M:%S)"
  start=$SECONDS
  # stdout holds the figures; progress goes to stderr (shown, not recorded).
  $command >"$raw/$name.txt"
  echo "$((SECONDS - start))" >"$raw/$name.seconds"
  cat "$raw/$name.txt"
done

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
memory=$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
{
  echo "# Benchmarks"
  echo
  echo "Written by \`tools/bench.sh${1:+ $1}\` ($mode run) on $(date -u +%Y-%m-%dT%H:%MZ), commit"
  echo "\`$commit\`."
  echo "Each program measures pallet and its reference (kubectl, tar, helm) side by side in the"
  echo "same run, on the same machine, so the ratios are the figures to compare across machines."
  echo
  echo "| machine | |"
  echo "| --- | --- |"
  echo "| CPU | ${cpu:-unknown} × $(nproc) |"
  echo "| memory | $memory |"
  echo "| kernel | $(uname -sr) |"
  echo "| rustc | $(rustc --version) |"
  echo "| Kubernetes | local control plane built from k8s.io/kubernetes ${kubernetes:-unknown} |"
  for entry in "${benchmarks[@]}"; do
    name=${entry%%|*}
    command=${entry#*|}
    echo
    echo "## $name"
    echo
    echo "\`$command\` ($(cat "$raw/$name.seconds") s)"
    echo
    echo '```text'
    cat "$raw/$name.txt"
    echo '```'
  done
} >"$out"
printf '\nwrote %s\n' "$out"
