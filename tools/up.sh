#!/usr/bin/env bash
# The main job on the local default: starts the local Kubernetes control plane and the fixture
# servers, installs the BundleDeployment CRD, runs the agent, publishes the example bundle to the
# local git server, creates the example BundleDeployment, waits until it is Ready and shows it
# with `kubectl get bd` and the objects it installed.
#
# Leaves everything running so you can look around (`tools/down.sh` stops it):
#   export KUBECONFIG=$(tools/controlplane.sh kubeconfig)
#   ~/.cache/pallet/bin/kubectl get bd -o yaml
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export PALLET_CACHE_DIR=${PALLET_CACHE_DIR:-$HOME/.cache/pallet}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PALLET_CACHE_DIR/target}
export PATH="$PALLET_CACHE_DIR/bin:$HOME/.cargo/bin:/usr/local/go/bin:$PATH"
state=${PALLET_STATE_DIR:-$root/.pallet}

say() { printf '\n==> %s\n' "$*"; }

say "system packages"
tools/deps.sh

say "building pallet"
cargo build --locked --bin pallet
pallet=$CARGO_TARGET_DIR/debug/pallet

say "starting the local control plane"
tools/controlplane.sh start
export KUBECONFIG
KUBECONFIG=$(tools/controlplane.sh kubeconfig)

say "starting the fixture servers"
tools/fixtures.sh start
# endpoint KEY...: one value from the fixtures' endpoints.json, by its path of keys.
endpoint() {
  python3 - "$state/fixtures/endpoints.json" "$@" <<'PY'
import json, sys
value = json.load(open(sys.argv[1]))
for key in sys.argv[2:]:
    value = value[key]
print(value)
PY
}

say "installing the BundleDeployment CRD"
"$pallet" crd | kubectl apply --server-side --field-manager=pallet-up -f -
kubectl wait --for=condition=Established --timeout=60s crd/bundledeployments.pallet.dev

# The selector leaves the BundleDeployments of tests (labelled pallet.dev/test) to the agents the
# tests start, so the suite can run while this agent is up.
say "starting the agent (log: $state/agent/agent.log)"
mkdir -p "$state/agent"
if [ -s "$state/agent/agent.pid" ] && kill -0 "$(cat "$state/agent/agent.pid")" 2>/dev/null; then
  kill "$(cat "$state/agent/agent.pid")" || true   # restart it on the binary just built
fi
nohup "$pallet" agent --kubeconfig "$KUBECONFIG" --namespace pallet-system \
  --cache-dir "$state/agent/cache" --requeue-seconds 30 --selector '!pallet.dev/test' \
  >"$state/agent/agent.log" 2>&1 </dev/null &
echo $! >"$state/agent/agent.pid"

say "publishing testdata/bundles/hello-plain to the local git server"
repo="$(endpoint git_root)/hello.git"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -d "$repo" ] || git init -q --bare --initial-branch=main "$repo"
cp -r testdata/bundles/hello-plain/. "$work/"
git -C "$work" init -q --initial-branch=main
git -C "$work" add -A
git -C "$work" -c user.name=pallet -c user.email=pallet@localhost commit -q -m "hello-plain example bundle"
git -C "$work" push -q --force "$repo" main
git_url="$(endpoint servers git-plain url)/hello.git"
echo "published $git_url at $(git -C "$work" rev-parse HEAD)"

say "creating the example BundleDeployment (testdata/examples/hello-plain.yaml)"
sed "s|\${GIT_URL}|$git_url|" testdata/examples/hello-plain.yaml |
  kubectl apply --server-side --field-manager=pallet-up -f -

say "waiting for the agent to install it"
if ! kubectl wait --for=condition=Ready --timeout=120s bd/hello; then
  kubectl get bd hello -o yaml
  tail -n 30 "$state/agent/agent.log"
  exit 1
fi

say "kubectl get bd"
kubectl get bd
say "the objects it installed"
kubectl get configmaps,deployments -n hello -l pallet.dev/bundle-deployment=hello
cat <<MSG

The local control plane, the fixture servers and the agent keep running. To look around:
  export KUBECONFIG=$KUBECONFIG
  $PALLET_CACHE_DIR/bin/kubectl get bd hello -o yaml
Stop everything with tools/down.sh.
MSG
