#!/usr/bin/env bash
# Writes a kubeconfig for the agent's own ServiceAccount, to prove deploy/'s RBAC sufficient.
#
# Applies deploy/'s Namespace, ServiceAccount and RBAC (not the CRD, which tests install, nor the
# Deployment) to the local control plane, asks for a token of pallet-system/pallet-agent
# (`kubectl create token`), and writes a kubeconfig with that token and the admin kubeconfig's
# server and CA to $PALLET_STATE_DIR/rbac/kubeconfig (printed on stdout). Tests then run their
# agents with it: PALLET_E2E_AGENT_KUBECONFIG=<that file> cargo test --test agent_e2e.
#
# Usage: tools/rbac-kubeconfig.sh [token duration, default 2h]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

duration=${1:-2h}
admin="$PALLET_STATE/controlplane/kubeconfig"
[ -f "$admin" ] || die "no admin kubeconfig at $admin: start the control plane (tools/controlplane.sh start)"
kubectl=$PALLET_CACHE/bin/kubectl
[ -x "$kubectl" ] || kubectl=kubectl
k() { "$kubectl" --kubeconfig "$admin" "$@"; }

deploy="$PALLET_ROOT/deploy"
k apply -f "$deploy/namespace.yaml" >&2
k apply -f "$deploy/serviceaccount.yaml" -f "$deploy/rbac.yaml" -f "$deploy/rbac-install.yaml" >&2

token=$(k -n pallet-system create token pallet-agent --duration "$duration")
[ -n "$token" ] || die "kubectl create token returned nothing"

# Server and CA exactly as the admin kubeconfig has them (of its current context's cluster).
server=$(k config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
ca_data=$(k config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
ca_file=$(k config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority}')
if [ -z "$ca_data" ] && [ -n "$ca_file" ]; then
  ca_data=$(base64 -w0 <"$ca_file")
fi
[ -n "$server" ] && [ -n "$ca_data" ] || die "no server or CA in $admin"

out_dir="$PALLET_STATE/rbac"
mkdir -p "$out_dir"
out="$out_dir/kubeconfig"
umask 077
cat >"$out.tmp" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $server
    certificate-authority-data: $ca_data
users:
- name: pallet-agent
  user:
    token: $token
contexts:
- name: pallet-agent
  context:
    cluster: local
    user: pallet-agent
    namespace: pallet-system
current-context: pallet-agent
KUBECONFIG
mv "$out.tmp" "$out"

# The token must authenticate as the ServiceAccount, or every test would fail obscurely.
who=$("$kubectl" --kubeconfig "$out" auth whoami -o jsonpath='{.status.userInfo.username}')
[ "$who" = "system:serviceaccount:pallet-system:pallet-agent" ] || die "the token authenticates as '$who'"
log "wrote $out (token for $who, valid $duration)"
echo "$out"
