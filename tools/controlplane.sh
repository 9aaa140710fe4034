#!/usr/bin/env bash
# The local Kubernetes control plane for pallet's integration and end-to-end tests: one process
# (tools/controlplane, built from k8s.io/kubernetes at a pinned release) running an embedded
# etcd, kube-apiserver and kube-controller-manager on 127.0.0.1. Also builds kubectl from the
# same release so tests never depend on the machine's kubectl.
#
#   tools/controlplane.sh build       build (or reuse) pallet-controlplane and kubectl
#   tools/controlplane.sh start       start in the background; returns once ready (no-op if running)
#   tools/controlplane.sh stop        graceful stop (SIGTERM), waits for exit
#   tools/controlplane.sh wipe        stop and delete all state (etcd data, pki, kubeconfig)
#   tools/controlplane.sh status      exit 0 if running and ready
#   tools/controlplane.sh kubeconfig  print the admin kubeconfig path
#   tools/controlplane.sh kubectl ... run the built kubectl against the control plane
#   tools/controlplane.sh user NAME OUT  write kubeconfig OUT for user NAME in group pallet:audited
#                                     (cluster-admin, every request in $dir/audit/audit.log)
#   tools/controlplane.sh selftest    check the control plane behaves like a real cluster
#   tools/controlplane.sh unit        run the Go unit tests of tools/controlplane
#
# No scheduler; a fake kubelet runs Pods only in namespaces labelled pallet.dev/fake-kubelet=on:
# Running and Ready, or CrashLoopBackOff when an image tag ends in "broken" (e.g. app:v2-broken);
# Pods that run to completion (Jobs') Succeed, or Fail with a "broken" tag and restartPolicy Never.
#
# Environment: PALLET_CACHE_DIR (binaries, default ~/.cache/pallet), PALLET_STATE_DIR (default
# <repo>/.pallet), PALLET_CONTROLPLANE_PORT (apiserver port, default 16443),
# PALLET_CONTROLPLANE_BIN (run this prebuilt binary, named pallet-controlplane, instead of building),
# PALLET_CONTROLPLANE_PROFILE (ADDR: serve POST /cpu/start and /cpu/stop there, a CPU profile of the
# whole process between the two; the scale benchmark uses it with PALLET_BENCH_SCALE_PROFILE).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

export PATH="/usr/local/go/bin:$PATH"
src="$PALLET_ROOT/tools/controlplane"
bindir="$PALLET_CACHE/bin"
built_bin="$bindir/pallet-controlplane"
# What start runs; build always writes built_bin, never a chosen binary.
cp_bin="${PALLET_CONTROLPLANE_BIN:-$built_bin}"
kubectl_bin="$bindir/kubectl"
stamp="$bindir/.pallet-controlplane.stamp"
dir="$PALLET_STATE/controlplane"
kubeconfig="$dir/kubeconfig"
pidfile="$dir/pid"
logfile="$dir/controlplane.log"
port=${PALLET_CONTROLPLANE_PORT:-16443}

# Static binaries, and fixed flags so Go's build cache keys stay the same from run to run.
export CGO_ENABLED=0
# The release built, stamped into the binaries as Kubernetes' own build does: a control plane
# built from Go modules otherwise reports v0.0.0-master+$Format:%H$, which no chart's
# `kubeVersion` constraint (e.g. ">=1.21.0-0") accepts, so helm charts would not install.
kube_release=$(sed -n 's/^[[:space:]]*k8s.io\/kubernetes v\([0-9][0-9.]*\).*/\1/p' "$src/go.mod" | head -n 1)
kube_minor=${kube_release#*.}
kube_minor=${kube_minor%%.*}
version_pkg=k8s.io/component-base/version
build_flags=(-trimpath "-ldflags=-s -w -X $version_pkg.gitVersion=v$kube_release -X $version_pkg.gitMajor=${kube_release%%.*} -X $version_pkg.gitMinor=$kube_minor -X $version_pkg.gitTreeState=clean")

fingerprint() {
  (cd "$src" && cat go.mod go.sum ./*.go && go version && echo "${build_flags[*]} $CGO_ENABLED") | sha256sum | cut -d' ' -f1
}

cmd_build() {
  local fp t0
  fp=$(fingerprint)
  # Linking these two binaries costs far more than checking a hash, so skip it when the
  # sources, toolchain and flags are unchanged.
  if [ -x "$built_bin" ] && [ -x "$kubectl_bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$fp" ]; then
    log "controlplane: binaries up to date in $bindir"
    return 0
  fi
  mkdir -p "$bindir"
  # Several checkouts or test runs may build at once; one builds, the others then reuse.
  exec {build_lock}>"$bindir/.pallet-controlplane.lock"
  flock "$build_lock"
  if [ -x "$built_bin" ] && [ -x "$kubectl_bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$fp" ]; then
    exec {build_lock}>&-
    log "controlplane: binaries up to date in $bindir"
    return 0
  fi
  t0=$(now_ms)
  log "controlplane: building pallet-controlplane and kubectl (first build takes minutes)"
  (cd "$src" && go build "${build_flags[@]}" -o "$built_bin.tmp" . &&
    go build "${build_flags[@]}" -o "$kubectl_bin.tmp" k8s.io/kubernetes/cmd/kubectl)
  # Rename, not copy: a running control plane keeps its old inode.
  mv -f "$built_bin.tmp" "$built_bin"
  mv -f "$kubectl_bin.tmp" "$kubectl_bin"
  echo "$fp" >"$stamp"
  exec {build_lock}>&-
  log "controlplane: built in $(elapsed "$t0")s"
}

read_pid() {
  local pid
  pid=$(cat "$pidfile" 2>/dev/null || true)
  # Guard against a recycled pid belonging to some other program.
  if pid_alive "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q pallet-controlplane; then
    echo "$pid"
  fi
}

pid_gone() { ! pid_alive "$1"; }

kc() { "$kubectl_bin" --kubeconfig "$kubeconfig" "$@"; }

healthy() {
  [ -n "$(read_pid)" ] && [ -f "$dir/ready" ] && kc get --raw /readyz >/dev/null 2>&1
}

cmd_start() {
  if healthy; then
    log "controlplane: already running (pid $(read_pid)), kubeconfig $kubeconfig"
    return 0
  fi
  if [ -n "$(read_pid)" ]; then
    log "controlplane: running but not ready; restarting"
    cmd_stop
  fi
  # A chosen binary (a branch's build under test) runs as is, leaving the shared one alone.
  if [ -n "${PALLET_CONTROLPLANE_BIN:-}" ]; then
    [ -x "$cp_bin" ] || die "controlplane: PALLET_CONTROLPLANE_BIN=$cp_bin is not an executable"
    [ -x "$kubectl_bin" ] || die "controlplane: no kubectl in $bindir; run tools/controlplane.sh build"
  else
    cmd_build
  fi
  mkdir -p "$dir"
  rm -f "$dir/ready" "$pidfile"
  local t0 pid
  t0=$(now_ms)
  # setsid: the server outlives this script and is not hit by signals aimed at the caller's
  # process group; stdin from /dev/null so it never waits on a terminal.
  # The state lock's descriptor is closed for it, or the lock would live as long as the server.
  setsid "$cp_bin" --port "$port" --state-dir "$dir" </dev/null >"$logfile" 2>&1 {state_lock}>&- &
  pid=$!
  echo "$pid" >"$pidfile"
  # The program writes $dir/ready once /readyz is ok and the controller manager has created
  # the default ServiceAccount.
  local deadline=$(($(now_ms) + 180000))
  while [ ! -f "$dir/ready" ]; do
    if ! pid_alive "$pid"; then
      log "controlplane: exited during startup; last log lines:"
      tail -n 40 "$logfile" >&2 || true
      rm -f "$pidfile"
      exit 1
    fi
    if (($(now_ms) >= deadline)); then
      log "controlplane: not ready after 180s; last log lines:"
      tail -n 40 "$logfile" >&2 || true
      cmd_stop
      exit 1
    fi
    sleep 0.1
  done
  if ! kc get --raw /readyz >/dev/null; then
    tail -n 40 "$logfile" >&2 || true
    die "controlplane: ready file written but /readyz fails"
  fi
  log "controlplane: ready in $(elapsed "$t0")s (pid $pid, https://127.0.0.1:$port, kubeconfig $kubeconfig, log $logfile)"
}

cmd_stop() {
  local pid
  pid=$(read_pid)
  if [ -z "$pid" ]; then
    rm -f "$pidfile" "$dir/ready"
    log "controlplane: not running"
    return 0
  fi
  kill -TERM "$pid"
  if ! retry_until 30 "controlplane pid $pid to exit" pid_gone "$pid"; then
    log "controlplane: still running after 30s, killing pid $pid"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile" "$dir/ready"
  log "controlplane: stopped"
}

cmd_status() {
  local pid
  pid=$(read_pid)
  if [ -z "$pid" ]; then
    echo "not running"
    return 3
  fi
  if healthy; then
    echo "running and ready: pid $pid, kubeconfig $kubeconfig"
  else
    echo "running but not ready: pid $pid, log $logfile"
    return 1
  fi
}

# start/stop/wipe on one state dir must not interleave (two test runs starting it at once).
lock_state() {
  mkdir -p "$dir"
  exec {state_lock}>"$dir/.lock"
  flock "$state_lock"
}

case "${1:-}" in
  build) cmd_build ;;
  start)
    lock_state
    cmd_start
    ;;
  stop)
    lock_state
    cmd_stop
    ;;
  wipe)
    lock_state
    cmd_stop
    # Keep the lock file itself; another waiter may hold it open.
    find "$dir" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} +
    log "controlplane: wiped $dir"
    ;;
  status) cmd_status ;;
  kubeconfig) echo "$kubeconfig" ;;
  user)
    [ $# -eq 3 ] || die "usage: tools/controlplane.sh user NAME OUT"
    [ -x "$cp_bin" ] || cmd_build
    "$cp_bin" user --state-dir "$dir" --name "$2" --out "$3"
    log "controlplane: wrote $3 (user $2, group pallet:audited, audit log $dir/audit/audit.log)"
    ;;
  kubectl)
    shift
    [ -x "$kubectl_bin" ] || cmd_build
    kc "$@"
    ;;
  unit)
    # The Go unit tests of tools/controlplane (the fake kubelet's decisions, the profiler).
    cd "$src" && go test -trimpath -count=1 ./...
    ;;
  selftest)
    lock_state
    cmd_start
    exec {state_lock}>&-
    . "$PALLET_ROOT/tools/controlplane/selftest.sh"
    ;;
  *)
    sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
