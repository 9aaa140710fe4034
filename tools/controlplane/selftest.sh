# Sourced by `tools/controlplane.sh selftest` after the control plane is started; uses its kc
# (kubectl with the admin kubeconfig), lib.sh helpers and variables. Checks that the control
# plane behaves like a real cluster in the ways pallet's tests rely on. Exits non-zero on the
# first failure. Every name is unique per run, so it can run next to tests.

t_start=$(now_ms)
id="st-$$-$RANDOM"
ns="$id"
group="selftest.pallet.dev"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

pass() { log "ok   $*"; }
fail() {
  log "FAIL $*"
  exit 1
}
# expect_forbidden <what> <cmd...>: cmd must fail with an RBAC denial.
expect_forbidden() {
  local what=$1 out
  shift
  if out=$("$@" 2>&1); then fail "$what: expected Forbidden, got success: $out"; fi
  grep -qi forbidden <<<"$out" || fail "$what: expected Forbidden, got: $out"
  pass "$what (forbidden)"
}
# gone <kubectl args>: the get fails with NotFound (any other error is not "gone").
gone() {
  local out
  if out=$(kc "$@" 2>&1); then return 1; fi
  grep -q NotFound <<<"$out"
}

# Discovery lists built-in, CRD and RBAC APIs.
res=$(kc api-resources -o name)
for r in namespaces configmaps deployments.apps customresourcedefinitions.apiextensions.k8s.io \
  roles.rbac.authorization.k8s.io serviceaccounts; do
  grep -qx "$r" <<<"$res" || fail "api-resources lacks $r"
done
pass "api-resources"

kc create namespace "$ns" >/dev/null
retry_until 60 "default ServiceAccount in $ns" kc -n "$ns" get serviceaccount default ||
  fail "serviceaccount controller did not create default SA"
pass "namespace $ns with default ServiceAccount"

# CRD with a structural schema and a status subresource.
sfx=$RANDOM
plural="w${sfx}widgets"
crd="$plural.$group"
kc apply -f - >/dev/null <<EOF
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: $crd
spec:
  group: $group
  scope: Namespaced
  names: {plural: $plural, singular: w${sfx}widget, kind: W${sfx}Widget, listKind: W${sfx}WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, minimum: 1}
              color: {type: string, default: blue}
          status:
            type: object
            properties:
              ready: {type: boolean}
EOF
# Retried: kubectl wait fails at once while a new CRD has no conditions yet.
retry_until 60 "$crd established" kc wait --for condition=Established --timeout 5s "crd/$crd" ||
  fail "CRD not established"
kind=$(kc get crd "$crd" -o jsonpath='{.spec.names.kind}')
retry_until 60 "$plural served" kc -n "$ns" get "$plural" || fail "CRD resource not served"
pass "CRD $crd established"

widget() {
  cat <<EOF
apiVersion: $group/v1
kind: $kind
metadata: {name: w1, namespace: $ns}
spec: {size: $1}
EOF
}
widget 3 | kc apply --server-side --field-manager=pallet-selftest -f - >/dev/null || fail "server-side apply"
[ "$(kc -n "$ns" get "$plural" w1 -o jsonpath='{.spec.color}')" = blue ] || fail "schema default not applied"
kc -n "$ns" get "$plural" w1 -o jsonpath='{.metadata.managedFields[*].manager}' | grep -q pallet-selftest ||
  fail "managedFields lack the field manager"
pass "server-side apply with defaulting and managedFields"
if out=$(widget 0 | kc apply --server-side --field-manager=pallet-selftest -f - 2>&1); then
  fail "schema validation accepted size 0"
fi
grep -q "should be greater than or equal to 1" <<<"$out" || fail "unexpected validation error: $out"
# A second manager changing the same field conflicts.
if out=$(widget 5 | kc apply --server-side --field-manager=other -f - 2>&1); then
  fail "conflicting apply succeeded"
fi
grep -qi conflict <<<"$out" || fail "expected an apply conflict, got: $out"
pass "OpenAPI validation and apply conflicts"

kc -n "$ns" patch "$plural" w1 --subresource=status --type=merge -p '{"status":{"ready":true}}' >/dev/null ||
  fail "status subresource patch"
[ "$(kc -n "$ns" get "$plural" w1 -o jsonpath='{.status.ready}')" = true ] || fail "status not stored"
# Status is ignored on the main resource.
kc -n "$ns" patch "$plural" w1 --type=merge -p '{"status":{"ready":false}}' >/dev/null
[ "$(kc -n "$ns" get "$plural" w1 -o jsonpath='{.status.ready}')" = true ] || fail "main resource wrote status"
pass "status subresource"

# Watch: a watch started before a change sees it.
kc -n "$ns" get configmaps --watch-only -o name >"$tmp/watch" 2>&1 &
watch_pid=$!
# The watch may connect after a create; keep creating until one event is seen.
watch_seen() {
  kc -n "$ns" create configmap "watched-$(now_ms)" >/dev/null 2>&1 || true
  grep -q "configmap/watched-" "$tmp/watch"
}
retry_until 30 "watch event" watch_seen || fail "watch saw no event: $(cat "$tmp/watch")"
kill "$watch_pid" 2>/dev/null || true
wait "$watch_pid" 2>/dev/null || true
pass "watch"

# ServiceAccount token: authenticates as the SA, RBAC denies until a RoleBinding grants.
kc -n "$ns" create serviceaccount bot >/dev/null
token=$(kc -n "$ns" create token bot --duration 10m) || fail "kubectl create token"
server=$(kc config view --minify -o jsonpath='{.clusters[0].cluster.server}')
kc config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d >"$tmp/ca.crt"
as_bot() { "$kubectl_bin" --kubeconfig /dev/null --server "$server" --certificate-authority "$tmp/ca.crt" --token "$token" "$@"; }
who=$(as_bot auth whoami -o jsonpath='{.status.userInfo.username}') || fail "token does not authenticate"
[ "$who" = "system:serviceaccount:$ns:bot" ] || fail "token authenticated as $who"
pass "TokenRequest token authenticates as $who"
expect_forbidden "SA lists configmaps without a binding" as_bot -n "$ns" get configmaps
kc -n "$ns" create role cm-reader --verb=get,list --resource=configmaps >/dev/null
kc -n "$ns" create rolebinding bot-cm-reader --role=cm-reader --serviceaccount="$ns:bot" >/dev/null
retry_until 30 "RoleBinding to take effect" as_bot -n "$ns" get configmaps || fail "SA still denied after RoleBinding"
pass "SA allowed after RoleBinding"
expect_forbidden "SA still may not delete configmaps" as_bot -n "$ns" delete configmap owner

# Impersonation by the admin.
[ "$(kc auth whoami --as jane --as-group devs -o jsonpath='{.status.userInfo.username}')" = jane ] ||
  fail "impersonated whoami"
expect_forbidden "impersonated user without rights" kc -n "$ns" get configmaps --as jane
kc -n "$ns" get configmaps --as "system:serviceaccount:$ns:bot" >/dev/null || fail "impersonating the SA"
pass "impersonation"

# Garbage collection: deleting an owner removes its dependent.
kc -n "$ns" create configmap owner >/dev/null
uid=$(kc -n "$ns" get configmap owner -o jsonpath='{.metadata.uid}')
kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: dependent
  namespace: $ns
  ownerReferences:
  - {apiVersion: v1, kind: ConfigMap, name: owner, uid: $uid}
EOF
kc -n "$ns" delete configmap owner >/dev/null
retry_until 60 "GC to delete the dependent" gone -n "$ns" get configmap dependent || fail "garbage collector"
pass "garbage collection of an owned ConfigMap"

# Deployment controller: a Deployment gets a ReplicaSet (no pods run: no scheduler/kubelet).
kc -n "$ns" create deployment web --image=registry.invalid/web:1 >/dev/null
has_rs() { kc -n "$ns" get replicasets -l app=web -o name | grep -q .; }
retry_until 60 "ReplicaSet for deployment web" has_rs ||
  fail "deployment controller"
pass "deployment controller created a ReplicaSet"

# Fake kubelet: Pods run only in namespaces labelled pallet.dev/fake-kubelet=on. A Pod in the
# unlabelled $ns, created first, must still be Pending once the labelled Deployment is Available.
kc -n "$ns" run idle --image=x.invalid/a:v1 >/dev/null
kns="$id-kubelet"
kc create namespace "$kns" >/dev/null
kc label namespace "$kns" pallet.dev/fake-kubelet=on >/dev/null
kc -n "$kns" create deployment app --image=x.invalid/a:v1 --replicas=2 >/dev/null
kc -n "$kns" wait --for=condition=Available --timeout=60s deployment/app >/dev/null ||
  fail "fake kubelet: deployment app not Available: $(kc -n "$kns" get pods -o wide 2>&1)"
[ "$(kc -n "$kns" get deployment app -o jsonpath='{.status.readyReplicas}')" = 2 ] ||
  fail "fake kubelet: Available but not 2 ready replicas"
pod_json=$(kc -n "$kns" get pods -l app=app -o jsonpath='{.items[0].status.phase} {.items[0].status.podIP} {.items[0].status.containerStatuses[0].state.running.startedAt}')
read -r phase ip started <<<"$pod_json"
[ "$phase" = Running ] && [ -n "$ip" ] && [ -n "$started" ] || fail "fake kubelet: pod status is '$pod_json'"
pass "fake kubelet: deployment with x.invalid/a:v1 Available, pods Running ($ip)"
[ "$(kc -n "$ns" get pod idle -o jsonpath='{.status.phase}')" = Pending ] ||
  fail "fake kubelet touched a pod in unlabelled namespace $ns"
[ -z "$(kc -n "$ns" get pod idle -o jsonpath='{.status.containerStatuses}')" ] ||
  fail "fake kubelet wrote container statuses in unlabelled namespace $ns"
pass "fake kubelet: pod in an unlabelled namespace stays Pending"

# A "broken" image crash-loops: the rollout stalls with the new pod unready while the old
# ReplicaSet keeps serving (maxUnavailable rounds down to 0 for 2 replicas).
old_rs=$(kc -n "$kns" get replicasets -l app=app -o name)
kc -n "$kns" set image deployment/app a=x.invalid/a:v2-broken >/dev/null
crashloop() {
  kc -n "$kns" get pods -l app=app -o jsonpath='{range .items[*]}{.spec.containers[0].image} {.status.phase} {.status.containerStatuses[0].state.waiting.reason} {.status.containerStatuses[0].restartCount} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' |
    grep -qx "x.invalid/a:v2-broken Running CrashLoopBackOff [1-9][0-9]* False"
}
retry_until 60 "a CrashLoopBackOff pod for the v2-broken image" crashloop ||
  fail "fake kubelet: no crash-looping pod for the broken image"
# updatedReplicas readyReplicas unavailableReplicas Available
stalled() {
  [ "$(kc -n "$kns" get deployment app -o jsonpath='{.status.updatedReplicas} {.status.readyReplicas} {.status.unavailableReplicas} {.status.conditions[?(@.type=="Available")].status}')" = "1 2 1 True" ]
}
retry_until 30 "deployment app to report 1 updated, 2 ready, 1 unavailable, Available" stalled ||
  fail "fake kubelet: unexpected status for the broken rollout"
rv1=$(kc -n "$kns" get pods -l app=app -o jsonpath='{.items[*].metadata.resourceVersion}')
# A fixed pause, not a wait for something: nothing may change in it (the fake kubelet writes a
# status only when it differs).
sleep 2
rv2=$(kc -n "$kns" get pods -l app=app -o jsonpath='{.items[*].metadata.resourceVersion}')
[ "$rv1" = "$rv2" ] || fail "fake kubelet: pods keep changing ($rv1 -> $rv2): a status write loop?"
stalled || fail "fake kubelet: the broken rollout moved on"
[ "$(kc -n "$kns" get "$old_rs" -o jsonpath='{.status.readyReplicas}')" = 2 ] ||
  fail "fake kubelet: old ReplicaSet $old_rs no longer serves 2 ready pods"
if kc -n "$kns" rollout status deployment/app --timeout=2s >/dev/null 2>&1; then
  fail "fake kubelet: the broken rollout completed"
fi
pass "fake kubelet: v2-broken crash-loops, rollout stalls, old ReplicaSet still serves, no write loop"

# A Pod bound to a node is deleted gracefully; the fake kubelet confirms it, as a kubelet would
# (unbound Pods are removed by the apiserver at once).
kc -n "$kns" run bound --image=x.invalid/a:v1 --overrides='{"spec":{"nodeName":"fake-node"}}' >/dev/null
kc -n "$kns" wait --for=condition=Ready --timeout=30s pod/bound >/dev/null || fail "fake kubelet: bound pod not Ready"
kc -n "$kns" delete pod bound --wait=false >/dev/null
retry_until 10 "deletion of the bound pod to be confirmed" gone -n "$kns" get pod bound ||
  fail "fake kubelet: graceful deletion not confirmed (30s grace period would still run)"
pass "fake kubelet: graceful pod deletion confirmed"

# Jobs: their Pods run to completion. The real Job controller marks a Job Complete once its Pod
# succeeded, and Failed when its Pod (restartPolicy Never, "broken" image, no retries) failed.
job() {
  cat <<EOF
apiVersion: batch/v1
kind: Job
metadata: {name: $1, namespace: $kns}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers: [{name: main, image: $2}]
EOF
}
job done x.invalid/a:v1 | kc apply -f - >/dev/null
job boom x.invalid/a:v1-broken | kc apply -f - >/dev/null
kc -n "$kns" wait --for=condition=Complete --timeout=60s job/done >/dev/null ||
  fail "fake kubelet: job done not Complete: $(kc -n "$kns" get job done -o jsonpath='{.status}')"
[ "$(kc -n "$kns" get pods -l job-name=done -o jsonpath='{.items[0].status.phase} {.items[0].status.containerStatuses[0].state.terminated.exitCode}')" = "Succeeded 0" ] ||
  fail "fake kubelet: the Pod of job done did not succeed with exit code 0"
kc -n "$kns" wait --for=condition=Failed --timeout=60s job/boom >/dev/null ||
  fail "fake kubelet: job boom not Failed: $(kc -n "$kns" get job boom -o jsonpath='{.status}')"
[ "$(kc -n "$kns" get pods -l job-name=boom -o jsonpath='{.items[0].status.phase} {.items[0].status.containerStatuses[0].state.terminated.exitCode}')" = "Failed 1" ] ||
  fail "fake kubelet: the Pod of job boom did not fail with exit code 1"
pass "fake kubelet: a Job's Pod completes (Job Complete); with a broken image it fails (Job Failed)"

# Namespace deletion removes everything in it, custom resources and running pods included,
# then the namespace.
kc delete namespace "$ns" "$kns" --wait=false >/dev/null
retry_until 120 "namespace $ns to be deleted" gone get namespace "$ns" || fail "namespace deletion"
retry_until 120 "namespace $kns to be deleted" gone get namespace "$kns" ||
  fail "namespace deletion with fake-kubelet pods"
pass "namespace deletion"

kc delete crd "$crd" >/dev/null
retry_until 60 "CRD to be deleted" gone get crd "$crd" || fail "CRD deletion"
pass "CRD deletion"

log "selftest passed in $(elapsed "$t_start")s"
