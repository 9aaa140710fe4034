#!/usr/bin/env bash
# The test suite's final check: nothing labelled pallet.dev/test is left in the local control
# plane. Every test removes the BundleDeployments it created, also when it fails (tests/support/
# cluster.rs: track_bundle_deployment); this lists what is left anyway (a test killed, a helper
# bypassed), removes it (deletes it and releases its finalizers: its agent is gone) and fails, so
# a developer's demo beside the suite (tools/up.sh) keeps only its own bundles.
#
#   tools/test-leftovers.sh          list, remove, exit 1 when anything was left
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

kubectl() { "$PALLET_CACHE/bin/kubectl" --kubeconfig "$PALLET_STATE/controlplane/kubeconfig" "$@"; }

if ! kubectl get crd bundledeployments.pallet.dev >/dev/null 2>&1; then
  echo "no BundleDeployment CRD: nothing left"
  exit 0
fi
left=$(kubectl get bundledeployments.pallet.dev -l pallet.dev/test -o name)
if [ -z "$left" ]; then
  echo "nothing labelled pallet.dev/test is left"
  exit 0
fi
echo "BundleDeployments the tests left (pallet.dev/test names the test):"
kubectl get bundledeployments.pallet.dev -l pallet.dev/test --no-headers \
  -o 'custom-columns=NAME:.metadata.name,TEST:.metadata.labels.pallet\.dev/test,READY:.status.conditions[?(@.type=="Ready")].reason,DELETING:.metadata.deletionTimestamp'
# shellcheck disable=SC2086 # one argument per name
kubectl delete --wait=false --ignore-not-found $left >/dev/null
for bd in $(kubectl get bundledeployments.pallet.dev -l pallet.dev/test -o name); do
  kubectl patch "$bd" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null || true
done
echo "removed $(echo "$left" | wc -l) of them; each is a test that does not clean up after itself" >&2
exit 1
