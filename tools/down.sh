#!/usr/bin/env bash
# Stops what tools/up.sh started: the agent, the fixture servers and the local control plane. Their data
# stays under .pallet/ (tools/controlplane.sh wipe deletes the cluster's).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pidfile=${PALLET_STATE_DIR:-$root/.pallet}/agent/agent.pid
if [ -s "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null; then
  echo "agent stopped"
fi
rm -f "$pidfile"
"$root/tools/fixtures.sh" stop
"$root/tools/controlplane.sh" stop
