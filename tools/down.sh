#!/usr/bin/env bash
# Stops what tools/up.sh started: the agent, the fixture servers and the local control plane. Their data
# stays under .pallet/ (tools/controlplane.sh wipe deletes the cluster's).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
state=${PALLET_STATE_DIR:-$root/.pallet}
pidfile=$state/agent/agent.pid
if [ -s "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null; then
  echo "agent stopped"
fi
# The shell environment up.sh wrote names servers that are going away.
rm -f "$pidfile" "$state/env"
"$root/tools/fixtures.sh" stop
"$root/tools/controlplane.sh" stop
