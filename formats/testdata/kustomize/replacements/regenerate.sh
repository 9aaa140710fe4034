#!/usr/bin/env bash
# Regenerates the expected output of every replacements vector with the kustomize v5.5.0 oracle
# (tools/kustomize.sh build): cases/NAME/expected.yaml, or cases/NAME/expected-error.txt when
# kustomize refuses the kustomization. Each case is a kustomization of `resources.yaml` with
# `replacements:` only, in input order (`sortOptions: fifo`), so its output is the resources
# after the replacements.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
kustomize=$("$here/../../../../tools/kustomize.sh" build)
for dir in "$here"/cases/*/; do
  rm -f "$dir/expected.yaml" "$dir/expected-error.txt"
  if out=$("$kustomize" build "$dir" 2>"$dir/stderr.tmp"); then
    printf '%s\n' "$out" >"$dir/expected.yaml"
  else
    grep -v '^Warning' "$dir/stderr.tmp" >"$dir/expected-error.txt" || true
  fi
  rm -f "$dir/stderr.tmp"
done
echo "$(ls "$here"/cases/*/expected.yaml | wc -l) outputs, $(ls "$here"/cases/*/expected-error.txt | wc -l) errors"
