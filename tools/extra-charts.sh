#!/usr/bin/env bash
# Fetches the second real-world helm set (formats/tests/helm_conformance_extra.rs): published charts
# that their projects ship inside their Go modules, at pinned module versions, through the Go
# module proxy (`go mod download`). Each chart directory is copied to
# ${PALLET_CACHE_DIR:-~/.cache/pallet}/extra-charts/charts/<chart> (origins and licences:
# formats/testdata/extra-values/README.md); the module zips go to a private module cache that is
# emptied afterwards, so only the charts stay on disk. A chart already fetched at its pinned
# version is kept as is. Prints where each chart is.
#
# Modules whose zip is over 150 MB are skipped (none of the pinned ones is; the largest,
# cilium and velero, are about 40 MB).
set -euo pipefail

cache=${PALLET_CACHE_DIR:-$HOME/.cache/pallet}/extra-charts
export PATH="/usr/local/go/bin:$PATH"
export GOMODCACHE="$cache/.gomod" GOFLAGS=-mod=mod GONOSUMDB= GOPRIVATE=
mkdir -p "$cache/charts"

# chart | module@version | path in the module | dependencies put in charts/: `name:version` an
# empty stub (a declared dependency no fetched module ships; both tools render the same tree,
# as the corpus does for loki's minio), `name=chart` a copy of a chart fetched above it in this
# list (the same chart and version `helm dependency build` would fetch) | files copied within the chart (from>to: a
# chart whose release process writes values.yaml from its values.tmpl.yaml).
CHARTS='
alertmanager|github.com/prometheus-community/helm-charts@v0.0.0-20260828105119-ed5d7d9b5933|charts/alertmanager|
prometheus-operator-admission-webhook|github.com/prometheus-community/helm-charts@v0.0.0-20260828105119-ed5d7d9b5933|charts/prometheus-operator-admission-webhook|
prometheus-postgres-exporter|github.com/prometheus-community/helm-charts@v0.0.0-20260828105119-ed5d7d9b5933|charts/prometheus-postgres-exporter|
prometheus-pushgateway|github.com/prometheus-community/helm-charts@v0.0.0-20260828105119-ed5d7d9b5933|charts/prometheus-pushgateway|
prometheus-snmp-exporter|github.com/prometheus-community/helm-charts@v0.0.0-20260828105119-ed5d7d9b5933|charts/prometheus-snmp-exporter|
prom-label-proxy|github.com/prometheus-community/helm-charts@v0.0.0-20260828105119-ed5d7d9b5933|charts/prom-label-proxy|
alertmanager-snmp-notifier|github.com/prometheus-community/helm-charts@v0.0.0-20260828105119-ed5d7d9b5933|charts/alertmanager-snmp-notifier|
prometheus-elasticsearch-exporter|github.com/prometheus-community/helm-charts@v0.0.0-20260828105119-ed5d7d9b5933|charts/prometheus-elasticsearch-exporter|
jiralert|github.com/prometheus-community/helm-charts@v0.0.0-20260828105119-ed5d7d9b5933|charts/jiralert|
prometheus-pgbouncer-exporter|github.com/prometheus-community/helm-charts@v0.0.0-20260828105119-ed5d7d9b5933|charts/prometheus-pgbouncer-exporter|
prometheus-redis-exporter|github.com/prometheus-community/helm-charts@v0.0.0-20260828105119-ed5d7d9b5933|charts/prometheus-redis-exporter|
approver-policy|github.com/cert-manager/approver-policy@v0.28.0|deploy/charts/approver-policy|
calico|github.com/projectcalico/calico@v1.11.0-cni-plugin.0.20250813170300-a0db560f0520|charts/calico|
gateway-crds-helm|github.com/envoyproxy/gateway@v1.9.1|charts/gateway-crds-helm|
gateway-helm|github.com/envoyproxy/gateway@v1.9.1|charts/gateway-helm||values.tmpl.yaml>values.yaml
istio-cni|istio.io/istio@v0.0.0-20260827124520-eed52ebb66ad|manifests/charts/istio-cni|
kwok-stage-fast|sigs.k8s.io/kwok@v0.8.0|charts/stage-fast|
chaos-mesh|github.com/chaos-mesh/chaos-mesh@v0.9.1-0.20260902003049-47411975a8cb|helm/chaos-mesh|
cilium|github.com/cilium/cilium@v1.20.2|install/kubernetes/cilium|
cluster-api-operator|sigs.k8s.io/cluster-api-operator@v0.29.0|hack/charts/cluster-api-operator|
dapr|github.com/dapr/dapr@v1.14.0|charts/dapr|
descheduler|sigs.k8s.io/descheduler@v0.36.0|charts/descheduler|
external-secrets|github.com/external-secrets/external-secrets@v1.3.2|deploy/charts/external-secrets|bitwarden-sdk-server:v0.5.2
flagger|github.com/fluxcd/flagger@v1.36.1|charts/flagger|
gatekeeper|github.com/open-policy-agent/gatekeeper/v3@v3.23.1|charts/gatekeeper|
istio-base|istio.io/istio@v0.0.0-20260827124520-eed52ebb66ad|manifests/charts/base|
istio-gateway|istio.io/istio@v0.0.0-20260827124520-eed52ebb66ad|manifests/charts/gateway|
istiod|istio.io/istio@v0.0.0-20260827124520-eed52ebb66ad|manifests/charts/istio-control/istio-discovery|
kube-flannel|github.com/flannel-io/flannel@v0.28.10|chart/kube-flannel|
kwok|sigs.k8s.io/kwok@v0.8.0|charts/kwok|
kyverno-policies|github.com/kyverno/kyverno@v1.19.1|charts/kyverno-policies|
local-path-provisioner|github.com/rancher/local-path-provisioner@v0.0.30|deploy/chart/local-path-provisioner|
metallb|go.universe.tf/metallb@v0.16.2|charts/metallb|
minio|github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c|helm/minio|
mimir-distributed|github.com/grafana/mimir@v1.3.1-0.20260423142704-aced80d74930|operations/helm/charts/mimir-distributed|minio=minio,grafana-agent-operator:0.5.2,rollout-operator:0.47.0
prometheus-adapter|github.com/prometheus-community/helm-charts@v0.0.0-20260828105119-ed5d7d9b5933|charts/prometheus-adapter|
prometheus-blackbox-exporter|github.com/prometheus-community/helm-charts@v0.0.0-20260828105119-ed5d7d9b5933|charts/prometheus-blackbox-exporter|
sealed-secrets|github.com/bitnami-labs/sealed-secrets@v0.40.0|helm/sealed-secrets|
tigera-operator|github.com/projectcalico/calico@v1.11.0-cni-plugin.0.20250813170300-a0db560f0520|charts/tigera-operator|
trust-manager|github.com/cert-manager/trust-manager@v0.25.0|deploy/charts/trust-manager|
ztunnel|istio.io/istio@v0.0.0-20260827124520-eed52ebb66ad|manifests/charts/ztunnel|
bitnami-common|github.com/bitnami/charts@v0.0.0-20260907150927-c0703daaf78e|bitnami/common|
bitnami-postgresql|github.com/bitnami/charts@v0.0.0-20260907150927-c0703daaf78e|bitnami/postgresql|common=bitnami-common
bitnami-redis|github.com/bitnami/charts@v0.0.0-20260907150927-c0703daaf78e|bitnami/redis|common=bitnami-common
mysql|github.com/bitnami/charts@v0.0.0-20260907150927-c0703daaf78e|bitnami/mysql|common=bitnami-common
mongodb|github.com/bitnami/charts@v0.0.0-20260907150927-c0703daaf78e|bitnami/mongodb|common=bitnami-common
kafka|github.com/bitnami/charts@v0.0.0-20260907150927-c0703daaf78e|bitnami/kafka|common=bitnami-common
rabbitmq|github.com/bitnami/charts@v0.0.0-20260907150927-c0703daaf78e|bitnami/rabbitmq|common=bitnami-common
keycloak|github.com/bitnami/charts@v0.0.0-20260907150927-c0703daaf78e|bitnami/keycloak|postgresql=bitnami-postgresql,common=bitnami-common
harbor|github.com/bitnami/charts@v0.0.0-20260907150927-c0703daaf78e|bitnami/harbor|redis=bitnami-redis,postgresql=bitnami-postgresql,common=bitnami-common
vault|github.com/hashicorp/vault-helm@v0.34.1|.|
keda|github.com/kedacore/charts@v2.20.3-0.20260903105638-fe065f4d8938+incompatible|keda|
fluent-bit|github.com/grafana/helm-charts@v0.0.0-20260820194520-7a0ab968961a|charts/fluent-bit|
tempo-distributed|github.com/grafana/helm-charts@v0.0.0-20260820194520-7a0ab968961a|charts/tempo-distributed|minio:4.1.0,grafana-agent-operator:0.5.1,rollout-operator:0.40.0
argo-workflows|github.com/argoproj/argo-helm@v0.0.0-20260904222229-3bbb4305eea9|charts/argo-workflows|
argo-rollouts|github.com/argoproj/argo-helm@v0.0.0-20260904222229-3bbb4305eea9|charts/argo-rollouts|
argo-events|github.com/argoproj/argo-helm@v0.0.0-20260904222229-3bbb4305eea9|charts/argo-events|
aws-load-balancer-controller|github.com/aws/eks-charts@v0.0.243-0.20260821194545-743f98a89b5b|stable/aws-load-balancer-controller|
eck-operator|github.com/elastic/cloud-on-k8s/v3@v3.5.0|deploy/eck-operator|
eck-stack|github.com/elastic/cloud-on-k8s/v3@v3.5.0|deploy/eck-stack|
'

fetched=0
while IFS='|' read -r chart module path stubs copies; do
  [ -n "$chart" ] || continue
  dest="$cache/charts/$chart"
  origin="$module/$path|$stubs|$copies"
  # A copy without its Chart.yaml (an interrupted copy) is fetched again.
  if [ "$(cat "$dest/.origin" 2>/dev/null)" = "$origin" ] && [ -f "$dest/Chart.yaml" ]; then
    echo "$chart: $dest"
    continue
  fi
  dir=$(go mod download -json "$module" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
  zip=$(go mod download -json "$module" | sed -n 's/^[[:space:]]*"Zip": "\(.*\)",*$/\1/p')
  size=$(( $(stat -c %s "$zip") / 1024 / 1024 ))
  if [ "$size" -gt 150 ]; then
    echo "$chart: skipped, $module is ${size} MB" >&2
    continue
  fi
  rm -rf "$dest"
  cp -r "$dir/$path" "$dest"
  chmod -R u+w "$dest"
  IFS=',' read -ra deps <<<"$stubs"
  for dep in "${deps[@]}"; do
    if [[ $dep == *=* ]]; then
      rm -rf "$dest/charts/${dep%%=*}"
      mkdir -p "$dest/charts"
      cp -r "$cache/charts/${dep#*=}" "$dest/charts/${dep%%=*}"
      rm -f "$dest/charts/${dep%%=*}/.origin"
      continue
    fi
    name=${dep%%:*} version=${dep#*:}
    mkdir -p "$dest/charts/$name"
    printf 'apiVersion: v2\nname: %s\nversion: %s\n' "$name" "$version" >"$dest/charts/$name/Chart.yaml"
  done
  IFS=',' read -ra pairs <<<"$copies"
  for pair in "${pairs[@]}"; do
    cp "$dest/${pair%%>*}" "$dest/${pair#*>}"
  done
  echo "$origin" >"$dest/.origin"
  fetched=1
  echo "$chart: $dest"
done <<<"$CHARTS"

# Only the copied charts are kept.
if [ "$fetched" = 1 ] && [ -d "$GOMODCACHE" ]; then
  go clean -modcache
fi
