#!/usr/bin/env python3
"""Test vectors for the kustomize format's strategic merge and JSON 6902 patches, with kustomize
v5.5.0 (tools/kustomize.sh) as the oracle.

A vector file (formats/testdata/kustomize/{smp,json6902}/*.yaml) is a list of cases; each case has
its inputs and the oracle's answer:

    - name: containers merge by name       # unique in the file
      mode: path                           # how the patch is given (below)
      options: {allowNameChange: true}     # optional: patches[].options
      openapi: |                           # optional: a custom schema (openapi: {path: ...})
        ...
      target: |                            # the one resource
        ...
      patch: |                             # the patch, as written in its file
        ...
      expected: |                          # the oracle's output ("" when the object is deleted)
        ...
      error: ...                           # instead of expected: the oracle failed (its message)

Modes: `path` = `patches: [{path: patch}]` (the patch finds its target by its own id);
`target` = `patches: [{path: patch, target: {kind, name}}]`; `psm` = `patchesStrategicMerge`;
`json` = a JSON 6902 patch with a target (the patch file is `patch.json` when its text starts
with `[`, else `patch.yaml`).

    tools/kustomize-vectors.py regen [FILE...]   run the oracle on every case, rewrite
                                                 expected/error (all files when none given)
    tools/kustomize-vectors.py import-merge2     (re)write smp/merge2-*.yaml from kyaml's merge2
                                                 test cases (the inputs only; run regen after)
"""

import glob
import os
import re
import subprocess
import sys
import tempfile
import textwrap

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VECTORS = os.path.join(ROOT, "formats", "testdata", "kustomize")
KEY_ORDER = ["name", "mode", "options", "openapi", "target", "patch", "expected", "error"]


class Literal(str):
    """A string written as a YAML literal block."""


def literal_representer(dumper, data):
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")


yaml.add_representer(Literal, literal_representer, Dumper=yaml.SafeDumper)


def oracle():
    return subprocess.run(
        [os.path.join(ROOT, "tools", "kustomize.sh"), "build"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()


def resource_id(text):
    doc = yaml.safe_load(text) or {}
    return doc.get("kind", ""), (doc.get("metadata") or {}).get("name", "")


def kustomization(case, patch_file):
    mode = case.get("mode", "path")
    lines = ["resources:", "- resource.yaml"]
    if "openapi" in case:
        lines += ["openapi:", "  path: schema.yaml"]
    if mode == "psm":
        lines += ["patchesStrategicMerge:", f"- {patch_file}"]
        return "\n".join(lines) + "\n"
    lines += ["patches:", f"- path: {patch_file}"]
    if mode in ("target", "json"):
        kind, name = resource_id(case["target"])
        lines += ["  target:", f"    kind: {kind}", f"    name: {name}"]
    options = case.get("options")
    if options:
        lines += ["  options:"] + [f"    {k}: {str(v).lower()}" for k, v in options.items()]
    return "\n".join(lines) + "\n"


def run_case(binary, case):
    with tempfile.TemporaryDirectory() as work:
        patch_file = "patch.yaml"
        if case.get("mode") == "json" and case["patch"].startswith("["):
            patch_file = "patch.json"
        files = {
            "resource.yaml": case["target"],
            patch_file: case["patch"],
            "kustomization.yaml": kustomization(case, patch_file),
        }
        if "openapi" in case:
            files["schema.yaml"] = case["openapi"]
        for name, text in files.items():
            with open(os.path.join(work, name), "w") as f:
                f.write(text)
        done = subprocess.run([binary, "build", work], capture_output=True, text=True)
    case.pop("expected", None)
    case.pop("error", None)
    if done.returncode == 0:
        case["expected"] = done.stdout
    else:
        lines = [l for l in done.stderr.strip().splitlines() if l.strip()]
        case["error"] = lines[0] if lines else f"exit {done.returncode}"


def ordered(case):
    out = {}
    for key in KEY_ORDER:
        if key in case:
            value = case[key]
            out[key] = Literal(value) if isinstance(value, str) and "\n" in value else value
    for key in case:
        if key not in out:
            out[key] = case[key]
    return out


def write_cases(path, header, cases):
    with open(path, "w") as f:
        f.write(header)
        yaml.safe_dump([ordered(c) for c in cases], f, sort_keys=False, width=100,
                       allow_unicode=True)


def read_header(path):
    header = []
    with open(path) as f:
        for line in f:
            if not line.startswith("#"):
                break
            header.append(line)
    return "".join(header)


def regen(paths):
    binary = oracle()
    if not paths:
        paths = sorted(glob.glob(os.path.join(VECTORS, "*", "*.yaml")))
    for path in paths:
        with open(path) as f:
            cases = yaml.safe_load(f) or []
        names = [c["name"] for c in cases]
        if len(names) != len(set(names)):
            sys.exit(f"{path}: duplicate case names")
        for case in cases:
            run_case(binary, case)
        write_cases(path, read_header(path), cases)
        errors = sum(1 for c in cases if "error" in c)
        print(f"{os.path.relpath(path, ROOT)}: {len(cases)} cases ({errors} errors)")


# kyaml's merge2 test cases: description, source (the patch), dest (the target).
MERGE2_CASE = re.compile(
    r"description:\s*`([^`]*)`.*?source:\s*`([^`]*)`.*?dest:\s*`([^`]*)`", re.S)


def as_resource(text, doc, api_version, kind, name="merge2"):
    """The test's document text made a resource kustomize accepts: apiVersion, kind and
    metadata.name added where the test leaves them out (the rest kept as written). None when
    that cannot be done by adding lines."""
    lines = textwrap.dedent(text).strip("\n").splitlines()
    head = []
    if "apiVersion" not in doc:
        head.append(f"apiVersion: {api_version}")
    if "kind" not in doc:
        head.append(f"kind: {kind}")
    metadata = doc.get("metadata")
    if metadata is None and "metadata" not in doc:
        head += ["metadata:", f"  name: {name}"]
    elif not isinstance(metadata, dict):
        return None
    elif "name" not in metadata:
        at = next((i for i, l in enumerate(lines) if l.rstrip() == "metadata:"), None)
        if at is None or at + 1 >= len(lines):
            return None
        indent = len(lines[at + 1]) - len(lines[at + 1].lstrip())
        lines.insert(at + 1, " " * indent + f"name: {name}")
    return "\n".join(head + lines) + "\n"


# kyaml's older merge2 tests: one shared target, a patch per test function.
MERGE2_OLD_DEST = re.compile(r"^const dest = `([^`]*)`", re.M)
MERGE2_OLD_CASE = re.compile(
    r"func (Test\w+)\(t \*testing\.T\) \{\s*dest := yaml\.MustParse\(dest\)\s*"
    r"src := yaml\.MustParse\(`([^`]*)`\)\s*result, err := Merge\((src, dest|dest, src)")


def import_merge2_old(kyaml):
    with open(os.path.join(kyaml, "merge2_old_test.go")) as f:
        text = f.read()
    dest = MERGE2_OLD_DEST.search(text).group(1)
    cases = []
    for function, src, order in MERGE2_OLD_CASE.findall(text):
        patch, target = (src, dest) if order == "src, dest" else (dest, src)
        patch_doc, target_doc = yaml.safe_load(patch), yaml.safe_load(target)
        name = (target_doc.get("metadata") or {}).get("name", "merge2")
        kind = target_doc["kind"]
        cases.append({
            "name": function,
            "mode": "path",
            "target": as_resource(target, target_doc, target_doc["apiVersion"], kind, name),
            "patch": as_resource(patch, patch_doc, target_doc["apiVersion"], kind, name),
        })
    header = (
        "# kyaml's older merge2 tests (merge2_old_test.go, sigs.k8s.io/kustomize/kyaml v0.18.1,"
        " Apache-2.0),\n# each made one resource and one patch; the expected output is"
        " kustomize's.\n"
    )
    path = os.path.join(VECTORS, "smp", "merge2-old.yaml")
    write_cases(path, header, cases)
    print(f"{os.path.relpath(path, ROOT)}: {len(cases)} cases")


def import_merge2():
    kyaml = subprocess.run(
        ["/usr/local/go/bin/go", "env", "GOMODCACHE"], check=True, capture_output=True, text=True,
    ).stdout.strip() + "/sigs.k8s.io/kustomize/kyaml@v0.18.1/yaml/merge2"
    import_merge2_old(kyaml)
    for source_file in ["scalar", "list", "element", "map"]:
        with open(os.path.join(kyaml, f"{source_file}_test.go")) as f:
            text = f.read()
        cases, seen = [], set()
        for description, source, dest in MERGE2_CASE.findall(text):
            try:
                patch, target = yaml.safe_load(source), yaml.safe_load(dest)
            except yaml.YAMLError:
                continue
            if not isinstance(patch, dict) or not isinstance(target, dict):
                continue
            # A field schema written as a line comment: comments are not part of the values
            # the engine merges, so these cases are left out.
            if "# {" in source or "# {" in dest:
                continue
            api_version = target.get("apiVersion") or "example.com/v1"
            kind = target.get("kind") or "Merge2Case"
            if patch.get("kind", kind) != kind or patch.get("apiVersion", api_version) != api_version:
                continue
            target_text = as_resource(dest, target, api_version, kind)
            patch_text = as_resource(source, patch, api_version, kind)
            if target_text is None or patch_text is None:
                continue
            name = description.strip()
            while name in seen:
                name += " (again)"
            seen.add(name)
            # Each case twice: the patch finding its target by id, and given a target (the
            # patch rewritten for each target first).
            for mode, suffix in (("path", ""), ("target", " [with a target]")):
                cases.append({"name": name + suffix, "mode": mode, "target": target_text,
                              "patch": patch_text})
        header = (
            f"# kyaml's merge2 test cases ({source_file}_test.go, sigs.k8s.io/kustomize/kyaml"
            " v0.18.1, Apache-2.0),\n# each made one resource and one patch; the expected output"
            " is kustomize's.\n"
        )
        path = os.path.join(VECTORS, "smp", f"merge2-{source_file}.yaml")
        write_cases(path, header, cases)
        print(f"{os.path.relpath(path, ROOT)}: {len(cases)} cases")


def main():
    command = sys.argv[1] if len(sys.argv) > 1 else "regen"
    if command == "regen":
        regen([os.path.abspath(p) for p in sys.argv[2:]])
    elif command == "import-merge2":
        import_merge2()
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
