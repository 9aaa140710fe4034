#!/usr/bin/env bash
# Several local control planes for the remote-target and fleet tests and benchmarks: the
# management cluster (the one tools/controlplane.sh runs, where the agent, its
# BundleDeployments, revisions and status live) and target clusters, each a control plane of its
# own (tools/controlplane.sh with its own port and state directory), all on 127.0.0.1.
#
#   tools/clusters.sh start [NAME]     start the management cluster and every target (or one target),
#                                      then write each target's kubeconfig into a Secret of the
#                                      management cluster (no-op for what already runs)
#   tools/clusters.sh stop [NAME]      stop every target and the management cluster (or one target)
#   tools/clusters.sh stop-targets     stop every target, leaving the management cluster running
#   tools/clusters.sh wipe             stop the targets and delete their state (the management
#                                      cluster is left to tools/controlplane.sh wipe)
#   tools/clusters.sh status           one line per cluster; exit 0 when all run and are ready
#   tools/clusters.sh names            the target names, one a line
#   tools/clusters.sh kubeconfig NAME  the admin kubeconfig of target NAME (or "management")
#   tools/clusters.sh kubectl NAME ... kubectl against target NAME (or "management")
#   tools/clusters.sh secrets          (again) write the targets' Secrets in the management cluster
#
# Each target's Secret is named after it, in namespace $PALLET_CLUSTERS_NAMESPACE (default
# pallet-system) of the management cluster, with the kubeconfig under key `value` (Flux's and
# Cluster API's key), and labelled pallet.dev/cluster=true (what a BundleDeploymentSet selects)
# and pallet.dev/test-cluster=NAME. The kubeconfig is that of a client certificate
# CN=pallet-remote, O=pallet:audited minted by the target's CA (`tools/controlplane.sh user`):
# cluster-admin on the target, and every request it makes is in the target's audit log
# (<state>/clusters/NAME/controlplane/audit/audit.log), which the benchmarks count.
#
# Environment: as tools/controlplane.sh (PALLET_CONTROLPLANE_PORT and PALLET_STATE_DIR name the
# management cluster), and
#   PALLET_TARGETS        target names (default "target-a target-b")
#   PALLET_TARGET_PORTS   their API server ports, in the same order (default: the management
#                         port plus 1, plus 2, ...)
#   PALLET_CLUSTERS_NAMESPACE  where the Secrets go (default pallet-system)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

controlplane="$PALLET_ROOT/tools/controlplane.sh"
management_port=${PALLET_CONTROLPLANE_PORT:-16443}
read -r -a targets <<<"${PALLET_TARGETS:-target-a target-b}"
read -r -a ports <<<"${PALLET_TARGET_PORTS:-}"
namespace=${PALLET_CLUSTERS_NAMESPACE:-pallet-system}
kubectl_bin="$PALLET_CACHE/bin/kubectl"

# port_of NAME: the API server port of target NAME.
port_of() {
  local i
  for i in "${!targets[@]}"; do
    if [ "${targets[$i]}" = "$1" ]; then
      echo "${ports[$i]:-$((management_port + i + 1))}"
      return 0
    fi
  done
  die "clusters: no target named $1 (targets: ${targets[*]})"
}

state_of() { echo "$PALLET_STATE/clusters/$1"; }

# on NAME CMD...: run tools/controlplane.sh CMD for target NAME (or the management cluster).
on() {
  local name=$1
  shift
  if [ "$name" = management ]; then
    "$controlplane" "$@"
  else
    PALLET_STATE_DIR=$(state_of "$name") PALLET_CONTROLPLANE_PORT=$(port_of "$name") "$controlplane" "$@"
  fi
}

kubeconfig_of() {
  if [ "$1" = management ]; then
    "$controlplane" kubeconfig
  else
    port_of "$1" >/dev/null
    echo "$(state_of "$1")/controlplane/kubeconfig"
  fi
}

mgmt() { "$kubectl_bin" --kubeconfig "$("$controlplane" kubeconfig)" "$@"; }

# The kubeconfig a target's Secret holds: the audited remote identity, minted once per target.
remote_kubeconfig() {
  local out
  out="$(state_of "$1")/remote.kubeconfig"
  # Minted again when the target now listens on another port (PALLET_TARGET_PORTS changed).
  if [ ! -s "$out" ] || ! grep -q "server: https://127.0.0.1:$(port_of "$1")\$" "$out"; then
    on "$1" user pallet-remote "$out" >/dev/null
  fi
  echo "$out"
}

write_secret() {
  local name=$1 file
  file=$(remote_kubeconfig "$name")
  mgmt create namespace "$namespace" --dry-run=client -o yaml | mgmt apply -f - >/dev/null
  mgmt create secret generic "$name" -n "$namespace" --from-file=value="$file" \
    --dry-run=client -o yaml |
    mgmt label --local -f - -o yaml pallet.dev/cluster=true "pallet.dev/test-cluster=$name" |
    mgmt apply --server-side --force-conflicts --field-manager=pallet-clusters -f - >/dev/null
  log "clusters: Secret $namespace/$name holds the kubeconfig of $name (https://127.0.0.1:$(port_of "$name"))"
}

cmd_start() {
  local name
  "$controlplane" start
  if [ $# -gt 0 ]; then
    on "$1" start
    write_secret "$1"
    return 0
  fi
  for name in "${targets[@]}"; do
    on "$name" start
  done
  for name in "${targets[@]}"; do
    write_secret "$name"
  done
}

cmd_stop() {
  local name
  if [ $# -gt 0 ]; then
    on "$1" stop
    return 0
  fi
  for name in "${targets[@]}"; do
    on "$name" stop
  done
  "$controlplane" stop
}

cmd_stop_targets() {
  local name
  for name in "${targets[@]}"; do
    on "$name" stop
  done
}

cmd_status() {
  local name ok=0
  printf 'management: %s\n' "$("$controlplane" status 2>&1 || ok=1)"
  "$controlplane" status >/dev/null 2>&1 || ok=1
  for name in "${targets[@]}"; do
    printf '%s: %s\n' "$name" "$(on "$name" status 2>&1 || true)"
    on "$name" status >/dev/null 2>&1 || ok=1
  done
  return $ok
}

case "${1:-}" in
  start)
    shift
    cmd_start "$@"
    ;;
  stop)
    shift
    cmd_stop "$@"
    ;;
  stop-targets) cmd_stop_targets ;;
  wipe)
    for name in "${targets[@]}"; do
      on "$name" wipe
      rm -f "$(state_of "$name")/remote.kubeconfig"
    done
    ;;
  status) cmd_status ;;
  names) printf '%s\n' "${targets[@]}" ;;
  kubeconfig)
    [ $# -eq 2 ] || die "usage: tools/clusters.sh kubeconfig NAME"
    kubeconfig_of "$2"
    ;;
  kubectl)
    [ $# -ge 2 ] || die "usage: tools/clusters.sh kubectl NAME ARGS..."
    name=$2
    shift 2
    "$kubectl_bin" --kubeconfig "$(kubeconfig_of "$name")" "$@"
    ;;
  secrets)
    for name in "${targets[@]}"; do
      write_secret "$name"
    done
    ;;
  *)
    sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
