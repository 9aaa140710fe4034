#!/usr/bin/env python3
"""What one write of each kind an install makes costs the control plane, in CPU.

A measurement aid for the scale benchmark's analysis (benches/scale.rs), not
a test. For each kind (a ConfigMap create for reference; a BundleDeployment created by server-side
apply as `kubectl apply --server-side` does; the agent's finalizer patch, revision snapshot
Secret, status patch and Event), it sends N requests over one keep-alive connection (one curl
process, so no client start-up lands on the control plane) and reads the control plane process's
CPU before and after. Bodies are shaped like the agent's for the scale benchmark's app (four
objects, one revision).

Run on an idle control plane of its own, so nothing else uses its CPU:

    PALLET_STATE_DIR=/tmp/wc PALLET_CONTROLPLANE_PORT=16555 tools/controlplane.sh start
    ~/.cache/pallet/bin/kubectl --kubeconfig /tmp/wc/controlplane/kubeconfig \\
        apply --server-side -f deploy/crd.yaml
    tools/write_costs.py /tmp/wc 1000
    PALLET_STATE_DIR=/tmp/wc tools/controlplane.sh wipe

`--status tiny|conditions|full` picks the status body (default full); `--prefix P` names the
BundleDeployments P-0000... (default app), so runs can repeat on one control plane; `--only-bd`
skips the ConfigMaps, Secrets and Events.
"""

import argparse
import base64
import json
import os
import re
import subprocess
import sys
import tempfile
import time

CONDITIONS = [
    ("RolledBack", "False", "UpToDate", "revision 1 is what the spec and the sources render"),
    ("Stalled", "False", "Idle", "not stalled"),
    ("Reconciling", "False", "Idle", "nothing in progress"),
    ("Ready", "True", "Healthy", "revision 1 healthy: 4 objects installed"),
    ("Unpacked", "True", "Unpacked", "all sources fetched and resolved"),
    ("Installed", "True", "Installed", "revision 1: 4 objects applied; content sha256:437340c7b4c9"),
    ("Healthy", "True", "Healthy", "revision 1: all 4 objects healthy"),
    ("Paused", "False", "Active", "reconciling normally"),
]


def status_body(kind, name):
    """The status the agent writes when an install is healthy (as `kubectl get bd -o json` showed
    it for the demo bundle, with the benchmark app's four objects), or part of it."""
    now = "2026-11-25T02:36:41Z"
    conditions = [
        {"type": t, "status": s, "reason": r, "message": m, "lastTransitionTime": now, "observedGeneration": 1}
        for t, s, r, m in CONDITIONS
    ]
    if kind == "tiny":
        return {"observedGeneration": 1}
    if kind == "conditions":
        return {"observedGeneration": 1, "conditions": conditions}
    objects = [
        {"kind": k, "group": g, "version": "v1", "namespace": "apps", "name": f"{name}-{suffix}"}
        for k, g, suffix in [("ServiceAccount", None, "sa"), ("ConfigMap", None, "config"),
                             ("Service", None, "svc"), ("Deployment", "apps", "app")]
    ]
    for o in objects:
        if o["group"] is None:
            del o["group"]
    return {
        "observedGeneration": 1,
        "activeRevision": 1,
        "lastHealthyRevision": 1,
        "agent": "pallet-agent-0",
        "conditions": conditions,
        "inventory": {"count": 4, "objects": objects},
        "revisions": [{
            "number": 1, "generation": 1, "phase": "Healthy", "objects": 4,
            "digest": "sha256:" + "4" * 64, "specDigest": "sha256:" + "5" * 64,
            "appliedAt": now, "healthyAt": now,
            "sources": [{"kind": "image", "ref": "127.0.0.1:5000/scale/app", "resolved": "sha256:" + "6" * 64}],
        }],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("state_dir", help="the PALLET_STATE_DIR of the control plane to measure")
    parser.add_argument("n", type=int, nargs="?", default=1000, help="requests of each kind")
    parser.add_argument("--status", choices=["tiny", "conditions", "full"], default="full")
    parser.add_argument("--prefix", default="app")
    parser.add_argument("--only-bd", action="store_true")
    args = parser.parse_args()

    kubeconfig = os.path.join(args.state_dir, "controlplane", "kubeconfig")
    if not os.path.isfile(kubeconfig):
        parser.error(f"no control plane in {args.state_dir}: {kubeconfig} is missing "
                     f"(start one with PALLET_STATE_DIR={args.state_dir} tools/controlplane.sh start)")
    text = open(kubeconfig).read()
    field = lambda name: re.search(rf"{name}: (\S+)", text).group(1)
    server = field("server")
    pid = int(open(os.path.join(args.state_dir, "controlplane", "pid")).read())
    work = tempfile.mkdtemp(prefix="write-costs-")
    for name, file in [("certificate-authority-data", "ca.pem"), ("client-certificate-data", "cert.pem"),
                       ("client-key-data", "key.pem")]:
        with open(os.path.join(work, file), "wb") as out:
            out.write(base64.b64decode(field(name)))

    def cpu():
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def run(label, requests):
        """Sends `requests` ((method, path, content type, body) each) over one connection."""
        config = os.path.join(work, "curl.cfg")
        with open(config, "w") as out:
            for i, (method, path, ctype, body) in enumerate(requests):
                body_file = os.path.join(work, f"body-{i}.json")
                with open(body_file, "w") as b:
                    b.write(json.dumps(body))
                if i:
                    out.write("next\n")
                out.write(f'url = "{server}{path}"\nrequest = {method}\ndata-binary = "@{body_file}"\n'
                          f'header = "Content-Type: {ctype}"\ncacert = "{work}/ca.pem"\n'
                          f'cert = "{work}/cert.pem"\nkey = "{work}/key.pem"\n'
                          'silent\noutput = "/dev/null"\nwrite-out = "%{http_code}\\n"\n')
        before, start = cpu(), time.time()
        codes = subprocess.run(["curl", "-K", config], capture_output=True, text=True).stdout.split()
        spent, wall = cpu() - before, time.time() - start
        refused = [c for c in codes if not c.startswith("2")]
        if refused or len(codes) != len(requests):
            sys.exit(f"{label}: {len(codes)} answers of {len(requests)}, refused: {refused[:5]}")
        print(f"{label:<44} {len(codes):>6} in {wall:5.1f} s   control plane CPU {spent:6.2f} s"
              f" = {spent / len(codes) * 1000:5.2f} ms each", flush=True)

    def kubectl(*argv):
        subprocess.run([os.path.expanduser("~/.cache/pallet/bin/kubectl"), "--kubeconfig", kubeconfig, *argv],
                       capture_output=True, text=True)

    names = [f"{args.prefix}-{i:04}" for i in range(args.n)]
    bds = "/apis/pallet.dev/v1alpha1/bundledeployments"
    if not args.only_bd:
        kubectl("create", "namespace", "apps")
        kubectl("create", "namespace", "pallet-system")
        run("ConfigMap create (reference)", [
            ("POST", "/api/v1/namespaces/apps/configmaps", "application/json",
             {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"ref-{n}"}, "data": {"k": "v" * 64}})
            for n in names])
    run("BundleDeployment create (server-side apply)", [
        ("PATCH", f"{bds}/{n}?fieldManager=bench-user", "application/apply-patch+yaml",
         {"apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
          "metadata": {"name": n, "labels": {"pallet.dev/test": "write-costs"}},
          "spec": {"installNamespace": "apps", "format": "plain",
                   "sources": [{"kind": "image", "image": {"ref": f"127.0.0.1:5000/scale/{n}@sha256:" + "a" * 64}}]}})
        for n in names])
    run("finalizer (merge patch)", [
        ("PATCH", f"{bds}/{n}", "application/merge-patch+json", {"metadata": {"finalizers": ["pallet.dev/cleanup"]}})
        for n in names])
    if not args.only_bd:
        run("revision snapshot Secret create", [
            ("POST", "/api/v1/namespaces/pallet-system/secrets", "application/json",
             {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": f"pallet-rev-{n}-r1-c0",
                           "labels": {"pallet.dev/chunk": "0", "pallet.dev/revision": "1", "pallet.dev/revision-of": n},
                           "annotations": {"pallet.dev/chunk-sha256": "b" * 64, "pallet.dev/revision-chunks": "1",
                                           "pallet.dev/revision-digest": "sha256:" + "c" * 64,
                                           "pallet.dev/revision-format": "1", "pallet.dev/revision-generation": "1",
                                           "pallet.dev/revision-of": n, "pallet.dev/revision-sha256": "d" * 64,
                                           "pallet.dev/revision-size": "1900"}},
              # the compressed revision of four small objects, base64
              "data": {"chunk": base64.b64encode(os.urandom(520)).decode()}})
            for n in names])
    run(f"status (merge patch, {args.status})", [
        ("PATCH", f"{bds}/{n}/status", "application/merge-patch+json", {"status": status_body(args.status, n)})
        for n in names])
    if not args.only_bd:
        run("Event create (events.k8s.io/v1)", [
            ("POST", "/apis/events.k8s.io/v1/namespaces/default/events", "application/json",
             {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": f"{n}.1"},
              "eventTime": "2026-11-25T00:00:00.000000Z", "reportingController": "pallet",
              "reportingInstance": "pallet-agent-0", "action": "Install", "reason": "Installed", "type": "Normal",
              "note": "revision 1: 4 objects applied; content sha256:" + "e" * 12,
              "regarding": {"apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment", "name": n}})
            for n in names])


if __name__ == "__main__":
    main()
