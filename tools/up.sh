#!/usr/bin/env bash
# The main job on the local default: starts the local Kubernetes control plane and the fixture
# servers, installs the BundleDeployment CRD, runs the agent, publishes the example bundle to the
# local git server, creates the example BundleDeployment, waits until it is Ready and shows it
# with `kubectl get bd` and the objects it installed.
#
# Then a narrated demo (skip it with PALLET_DEMO=0): an upgrade to a broken version whose Pods
# crash, the automatic rollback when its progress deadline passes, a pause for a hotfix by hand,
# the drift the pause reports, and the resume that reverts it. Pods become Ready through the
# control plane's fake kubelet, which serves namespaces labelled pallet.dev/fake-kubelet=on and
# reports images tagged *broken as crashing.
#
# Leaves everything running so you can look around (`tools/down.sh` stops it), and writes what a
# new shell needs for that (and for docs/getting-started.md) to .pallet/env:
#   source .pallet/env
#   kubectl get bd -o yaml
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export PALLET_CACHE_DIR=${PALLET_CACHE_DIR:-$HOME/.cache/pallet}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PALLET_CACHE_DIR/target}
export PATH="$PALLET_CACHE_DIR/bin:$HOME/.cargo/bin:/usr/local/go/bin:$PATH"
# Incremental compilation state for the workspace's many test binaries grows past 15 GiB and
# a clean clone never reuses it; up.sh and test.sh agree so the binaries they share build once.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
state=${PALLET_STATE_DIR:-$root/.pallet}

say() { printf '\n==> %s\n' "$*"; }

say "system packages"
tools/deps.sh

say "building pallet"
cargo build --locked --bin pallet
# The agent and the `pallet` of the getting-started guide's shell are one copy of this build, in
# the state dir: a later build in the shared target dir (the test suite's) does not replace it.
mkdir -p "$state/bin"
cmp -s "$CARGO_TARGET_DIR/debug/pallet" "$state/bin/pallet" ||
  cp -f "$CARGO_TARGET_DIR/debug/pallet" "$state/bin/pallet"
ln -sf "$PALLET_CACHE_DIR/bin/kubectl" "$state/bin/kubectl"
pallet=$state/bin/pallet

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
# --force-conflicts: the test suite applies the CRD too (its own field manager), and this
# script must work again after it; the CRD printed by this binary is the one to have.
"$pallet" crd | kubectl apply --server-side --force-conflicts --field-manager=pallet-up -f -
# kubectl wait fails at once, instead of waiting, while a CRD just created has no conditions yet
# (".status.conditions accessor error: <nil>"): polled for up to 60 s, then asked once more so a
# real failure prints its error.
for _ in $(seq 60); do
  kubectl wait --for=condition=Established --timeout=5s crd/bundledeployments.pallet.dev \
    >/dev/null 2>&1 && break
  sleep 1
done
kubectl wait --for=condition=Established --timeout=5s crd/bundledeployments.pallet.dev

# The selector leaves the BundleDeployments of tests (labelled pallet.dev/test) to the agents the
# tests start, so the suite can run while this agent is up; everything else is this agent's:
# the demo below, and what a person following docs/getting-started.md creates (tests/docs_walk.rs
# walks that guide against this agent too, and checks it runs with these flags). The fixture
# servers are on 127.0.0.1 (--allow-loopback-egress) and their registry speaks plain HTTP. Its
# metrics server takes a free port (another checkout's agent may hold 8080); the log names it.
registry=$(endpoint servers registry-plain host)
say "starting the agent (log: $state/agent/agent.log)"
mkdir -p "$state/agent"
if [ -s "$state/agent/agent.pid" ] && kill -0 "$(cat "$state/agent/agent.pid")" 2>/dev/null; then
  kill "$(cat "$state/agent/agent.pid")" || true   # restart it on the binary just built
fi
kubectl create namespace pallet-system --dry-run=client -o yaml | kubectl apply --server-side --field-manager=pallet-up -f - >/dev/null
nohup "$pallet" agent --kubeconfig "$KUBECONFIG" --namespace pallet-system \
  --cache-dir "$state/agent/cache" --requeue-interval 30s --selector '!pallet.dev/test' \
  --change-log "$state/agent/changes.jsonl" \
  --allow-loopback-egress --plain-http-registry "$registry" --metrics-addr 127.0.0.1:0 \
  >/dev/null 2>"$state/agent/agent.log" </dev/null &
echo $! >"$state/agent/agent.pid"

# What a new shell needs to follow docs/getting-started.md by hand: `source .pallet/env`.
git_plain=$(endpoint servers git-plain url)
cat >"$state/env" <<ENV
# Written by tools/up.sh for a shell following docs/getting-started.md: \`source $state/env\`.
# The addresses change when the fixture servers restart: run tools/up.sh again, then source it again.
export KUBECONFIG=$KUBECONFIG
case ":\$PATH:" in *":$state/bin:"*) ;; *) export PATH="$state/bin:\$PATH" ;; esac   # pallet, kubectl
export PALLET_REGISTRY=$registry          # OCI registry, plain HTTP, no auth
export PALLET_GIT=$git_plain             # git over smart HTTP, no auth: \$PALLET_GIT/NAME.git
export PALLET_GIT_ROOT=$(endpoint git_root)   # its bare repositories (git init --bare \$PALLET_GIT_ROOT/NAME.git)
ENV

say "publishing testdata/bundles/hello-plain to the local git server"
repo="$(endpoint git_root)/hello.git"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -d "$repo" ] || git init -q --bare --initial-branch=main "$repo"
cp -r testdata/bundles/hello-plain/. "$work/"
git -C "$work" init -q --initial-branch=main
# publish MESSAGE: commits the work tree and force-pushes it as main.
publish() {
  git -C "$work" add -A
  git -C "$work" -c user.name=pallet -c user.email=pallet@localhost commit -q -m "$1"
  git -C "$work" push -q --force "$repo" main
  echo "published $(git -C "$work" rev-parse --short HEAD): $1"
}
publish "hello-plain example bundle"
git_url="$git_plain/hello.git"

# The demo's Pods become Ready through the control plane's fake kubelet (see the header).
kubectl create namespace hello --dry-run=client -o yaml |
  kubectl apply --server-side --field-manager=pallet-up -f - >/dev/null
kubectl label namespace hello pallet.dev/fake-kubelet=on --overwrite >/dev/null

say "creating the example BundleDeployment (testdata/examples/hello-plain.yaml)"
# The demo starts from a new BundleDeployment: one left by an earlier run remembers that the
# broken version failed, and would not try it again.
kubectl delete bd hello --ignore-not-found --timeout=120s >/dev/null
sed "s|\${GIT_URL}|$git_url|" testdata/examples/hello-plain.yaml |
  kubectl apply --server-side --field-manager=pallet-up -f -

say "waiting for the agent to install it"
# A pass right away, whatever state an earlier run left.
kubectl annotate bd hello pallet.dev/requested-reconcile="$(date -u +%FT%T.%NZ)" --overwrite >/dev/null
if ! kubectl wait --for=condition=Ready --timeout=120s bd/hello; then
  kubectl get bd hello -o yaml
  tail -n 30 "$state/agent/agent.log"
  exit 1
fi

say "kubectl get bd hello"
kubectl get bd hello
say "the objects it installed"
kubectl get configmaps,deployments -n hello -l pallet.dev/bundle-deployment=hello

if [ "${PALLET_DEMO:-1}" != 0 ]; then
  # show: one line per condition of bd/hello, and its revisions.
  show() {
    kubectl get bd hello -o go-template='{{range .status.conditions}}  {{printf "%-12s" .type}} {{printf "%-6s" .status}} {{.reason}}: {{.message}}{{"\n"}}{{end}}  revisions:{{range .status.revisions}} {{.number}}={{.phase}}{{end}}  (active {{.status.activeRevision}}, last healthy {{.status.lastHealthyRevision}}){{"\n"}}'
  }
  reconcile_now() {
    kubectl annotate bd hello pallet.dev/requested-reconcile="$(date -u +%FT%T.%NZ)" --overwrite >/dev/null
  }
  # wait_for WHAT JSONPATH VALUE: polls bd/hello until JSONPATH equals VALUE (up to 3 minutes).
  wait_for() {
    local deadline=$((SECONDS + 180))
    until [ "$(kubectl get bd hello -o jsonpath="$2")" = "$3" ]; do
      if [ $SECONDS -ge $deadline ]; then
        echo "timed out waiting for $1"; show; tail -n 30 "$state/agent/agent.log"; exit 1
      fi
      sleep 1
    done
  }
  start=$(wc -l <"$state/agent/changes.jsonl" 2>/dev/null || echo 0)

  say "demo 1/3: upgrade to a broken version"
  echo "The new version changes the greeting and runs the image tag 3.10-broken, whose Pods crash."
  echo "The BundleDeployment gives a new revision 30 s (rollout.progressDeadline) to become healthy."
  sed -i -e 's/greeting: .*/greeting: hello from version 2/' -e 's|pause:3.10$|pause:3.10-broken|' \
    "$work/manifests/hello.yaml"
  publish "version 2 (broken)"
  reconcile_now
  wait_for "the new revision to progress" '{.status.revisions[0].phase}' Progressing
  show
  echo "Waiting for the deadline: the Deployment never becomes available..."
  wait_for "the automatic rollback" '{.status.conditions[?(@.type=="RolledBack")].status}' True
  wait_for "the previous revision to be healthy again" \
    '{.status.revisions[?(@.number==1)].phase}' Healthy
  show
  echo "pallet history hello:"
  "$pallet" history hello | sed 's/^/  /'
  echo "The live objects are revision 1's again:"
  kubectl get configmap hello-config -n hello -o jsonpath='  greeting: {.data.greeting}{"\n"}'
  kubectl get deployment hello -n hello -o jsonpath='  image: {.spec.template.spec.containers[0].image}{"\n"}'
  echo "What the agent wrote for the rollback (its change log, reason rollback):"
  tail -n +"$((start + 1))" "$state/agent/changes.jsonl" | grep '"reason":"rollback"' |
    python3 -c 'import json,sys
for line in sys.stdin:
    e = json.loads(line); o = e["object"]
    print("  %s %s %s/%s revision %s fields %s" % (e["operation"], o["kind"], o.get("namespace", ""), o["name"], e.get("revision"), ",".join(e.get("fieldsChanged", []))))'

  say "demo 2/3: pause for a hotfix by hand"
  echo "The broken version goes away upstream; then an on-call engineer pauses the bundle to hotfix it."
  git -C "$work" checkout -q HEAD~1 -- manifests/hello.yaml
  publish "back to version 1"
  echo "\$ pallet pause hello --reason \"hotfix INC-42\""
  "$pallet" pause hello --reason "hotfix INC-42" | sed 's/^/  /'
  wait_for "the pause" '{.status.conditions[?(@.type=="Paused")].status}' True
  kubectl patch configmap hello-config -n hello --type merge -p '{"data":{"greeting":"hotfixed by hand"}}' >/dev/null
  echo "Hotfixed hello-config by hand. The agent keeps its hands off and reports the drift:"
  reconcile_now
  wait_for "the drift report" '{.status.drift.count}' 1
  kubectl get bd hello -o jsonpath='{range .status.drift.objects[*]}  {.kind} {.namespace}/{.name}: {.message}{"\n"}{end}'
  kubectl get configmap hello-config -n hello -o jsonpath='  greeting: {.data.greeting}{"\n"}'
  # The demo's git server listens on 127.0.0.1, which pallet refuses as a source unless allowed.
  echo "\$ pallet resume hello --dry-run --allow-loopback-egress    # what resuming would revert; changes nothing"
  "$pallet" resume hello --dry-run --allow-loopback-egress | sed 's/^/  /'

  say "demo 3/3: resume"
  echo "\$ pallet resume hello"
  "$pallet" resume hello | sed 's/^/  /'
  wait_for "the resume" '{.status.conditions[?(@.type=="Ready")].status}' True
  echo "Resumed: the bundle wins again."
  kubectl get configmap hello-config -n hello -o jsonpath='  greeting: {.data.greeting}{"\n"}'
  echo "\$ pallet status hello"
  "$pallet" status hello | sed 's/^/  /'
fi
cat <<MSG

The local control plane, the fixture servers and the agent keep running. In a new shell,
  source $state/env
sets what docs/getting-started.md needs:
  KUBECONFIG=$KUBECONFIG
  PATH=$state/bin:...   (pallet, kubectl)
  PALLET_REGISTRY=$registry   (OCI registry, plain HTTP)
  PALLET_GIT=$git_plain   (git over HTTP: \$PALLET_GIT/hello.git)
then, e.g.: kubectl get bd hello -o yaml
Agent log: $state/agent/agent.log; change log: $state/agent/changes.jsonl; metrics:
$(sed -n 's/.*metrics server listening.*address=\([0-9.:]*\).*/  http:\/\/\1\/metrics/p' "$state/agent/agent.log" | head -n 1)
Stop everything with tools/down.sh.
MSG
