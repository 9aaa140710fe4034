#!/usr/bin/env bash
# Stops what tools/up.sh started: the fixture servers and the local control plane. Their data
# stays under .pallet/ (tools/controlplane.sh wipe deletes the cluster's).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/tools/fixtures.sh" stop
"$root/tools/controlplane.sh" stop
