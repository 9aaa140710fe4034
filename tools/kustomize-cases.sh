#!/usr/bin/env bash
# Records kustomize's own end-to-end suite (api/krusty/*_test.go of sigs.k8s.io/kustomize/api
# v0.18.0, i.e. kustomize v5.5.0) as test cases for the kustomize format:
# ${PALLET_CACHE_DIR:-~/.cache/pallet}/kustomize-cases/krusty.json, read by
# formats/tests/kustomize_krusty.rs. Never committed; reused while the api version and the
# recorder (this script and tools/kustomize-cases/) are unchanged.
#
#   tools/kustomize-cases.sh           make (or reuse) the case file; prints its path
#   tools/kustomize-cases.sh --force   make it again
#
# The tests build their inputs with Go helpers, constants and loops, so they are not parsed:
# they run, in a scratch copy of the api module, with a few functions wrapped to record
# (tools/kustomize-cases/README.md):
#   krusty.Kustomizer.Run             every build: the file system, the directory, the options,
#                                     the error text when it failed;
#   kusttest AssertActualEquals...    the YAML each build's result was compared with;
#   kusttest MakeHarnessWithFs, Setup which test is running;
#   kusttest BuildGoPlugin, PrepExecPlugin  the plugins a test prepared.
# Each wrapped function keeps its body under a new name (...Unrecorded), and the recording
# twin is a file copied next to it. The tests' outcomes come from `go tool test2json`.
#
# Offline once the Go module cache holds the api module's test dependencies (the first run
# fetches them through the Go module proxy): the tests run with the network shut (proxies
# pointed at a closed port, no ssh, GOPROXY=off), so tests of remote loading fail fast and
# the same way everywhere. Under a minute with a warm Go build cache.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PATH="/usr/local/go/bin:$PATH"

API_VERSION=v0.18.0
cache=${PALLET_CACHE_DIR:-$HOME/.cache/pallet}/kustomize-cases
out="$cache/krusty.json"

key=$( (echo "$API_VERSION"; cat "$0" "$here"/kustomize-cases/recorder/*.go \
  "$here"/kustomize-cases/collect/main.go) | sha256sum | cut -d' ' -f1)
if [ "${1:-}" != --force ] && [ -f "$out" ] && [ "$(cat "$out.key" 2>/dev/null)" = "$key" ]; then
  echo "$out"
  exit 0
fi

module=$(dirname "$("$here/kustomize.sh" krusty)")
[ -f "$module/krusty/kustomizer.go" ] || { echo "no api module at $module" >&2; exit 1; }

scratch=$(mktemp -d)
trap 'chmod -R u+w "$scratch" 2>/dev/null; rm -rf "$scratch"' EXIT
cp -r "$module" "$scratch/api"
chmod -R u+w "$scratch/api"
# The plugin tests look for kustomize's plugin sources next to the module; an empty directory
# lets the tests that only use builtins run (the ones that compile plugins then fail).
mkdir "$scratch/plugin"

# rename FILE OLD NEW: renames one function declaration, exactly once.
rename() {
  local file="$scratch/api/$1"
  [ "$(grep -cF "$2" "$file")" = 1 ] || { echo "expected one '$2' in $1" >&2; exit 1; }
  local text
  text=$(<"$file")
  printf '%s\n' "${text/"$2"/"$3"}" >"$file"
}
rename krusty/kustomizer.go 'func (b *Kustomizer) Run(' 'func (b *Kustomizer) runUnrecorded('
rename testutils/kusttest/harness.go 'func MakeHarnessWithFs(' 'func makeHarnessWithFsUnrecorded('
rename testutils/kusttest/ondisk.go 'func Setup(' 'func setupUnrecorded('
rename testutils/kusttest/hasgett.go 'func AssertActualEqualsExpectedWithTweak(' \
  'func assertActualEqualsExpectedWithTweakUnrecorded('
rename testutils/kusttest/harnessenhanced.go 'func (th *HarnessEnhanced) BuildGoPlugin(' \
  'func (th *HarnessEnhanced) buildGoPluginUnrecorded('
rename testutils/kusttest/harnessenhanced.go 'func (th *HarnessEnhanced) PrepExecPlugin(' \
  'func (th *HarnessEnhanced) prepExecPluginUnrecorded('
mkdir "$scratch/api/internal/caserecord"
cp "$here/kustomize-cases/recorder/caserecord.go" "$scratch/api/internal/caserecord/"
cp "$here/kustomize-cases/recorder/krusty_run.go" "$scratch/api/krusty/zz_record_run.go"
cp "$here/kustomize-cases/recorder/kusttest_hooks.go" "$scratch/api/testutils/kusttest/zz_record_hooks.go"

echo "compiling kustomize's end-to-end tests" >&2
(cd "$scratch/api" && go test -c -o "$scratch/krusty.test" ./krusty/ >&2)

echo "running them (recording)" >&2
shut=http://127.0.0.1:9
(cd "$scratch/api/krusty" &&
  KUSTOMIZE_CASES_LOG="$scratch/steps.jsonl" GOPROXY=off GOFLAGS=-mod=mod \
    HTTP_PROXY=$shut HTTPS_PROXY=$shut http_proxy=$shut https_proxy=$shut NO_PROXY= no_proxy= \
    GIT_SSH_COMMAND=false GIT_TERMINAL_PROMPT=0 \
    go tool test2json -t -p krusty "$scratch/krusty.test" -test.v=test2json -test.count=1 \
    -test.timeout=10m </dev/null >"$scratch/events.json" 2>&1 || true)
[ -s "$scratch/steps.jsonl" ] || { echo "the tests recorded nothing" >&2; tail -20 "$scratch/events.json" >&2; exit 1; }

mkdir -p "$cache"
(cd "$here/kustomize-cases/collect" && go run main.go "$scratch/steps.jsonl" "$scratch/events.json" \
  "sigs.k8s.io/kustomize/api@$API_VERSION api/krusty" "$out.tmp" >&2)
mv "$out.tmp" "$out"
echo "$key" >"$out.key"
echo "$out"
