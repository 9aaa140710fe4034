//! deploy/: the manifests for running pallet in a cluster apply cleanly (server-side dry run
//! against the local control plane), every RBAC rule says why it is there, and the Deployment
//! runs the agent the way the agent's flags expect.

#[path = "support/cluster.rs"]
mod cluster;

use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

fn kubectl_path() -> PathBuf {
    let cache = std::env::var_os("PALLET_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/pallet"));
    cache.join("bin/kubectl")
}

/// Runs kubectl against the local control plane; returns stdout, panics with stderr on failure.
fn kubectl(args: &[&str]) -> String {
    let out = Command::new(kubectl_path())
        .arg("--kubeconfig")
        .arg(cluster::kubeconfig_path())
        .args(args)
        .output()
        .expect("running kubectl (built by tools/controlplane.sh)");
    assert!(
        out.status.success(),
        "kubectl {} failed:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn deploy_applies_with_a_server_side_dry_run() {
    let dir = deploy_dir();
    // A dry run creates nothing, so the namespaced objects would find no namespace: create it
    // for real first (tools/rbac-kubeconfig.sh applies it too; applying is idempotent).
    kubectl(&["apply", "-f", dir.join("namespace.yaml").to_str().unwrap()]);
    let out = kubectl(&["apply", "-k", dir.to_str().unwrap(), "--dry-run=server"]);
    for object in [
        "namespace/pallet-system",
        "customresourcedefinition.apiextensions.k8s.io/bundledeployments.pallet.dev",
        "serviceaccount/pallet-agent",
        "clusterrole.rbac.authorization.k8s.io/pallet-agent",
        "clusterrole.rbac.authorization.k8s.io/pallet-agent-install",
        "clusterrole.rbac.authorization.k8s.io/pallet-agent-secret-reader",
        "clusterrolebinding.rbac.authorization.k8s.io/pallet-agent",
        "clusterrolebinding.rbac.authorization.k8s.io/pallet-agent-install",
        "role.rbac.authorization.k8s.io/pallet-agent",
        "rolebinding.rbac.authorization.k8s.io/pallet-agent",
        "validatingadmissionpolicy.admissionregistration.k8s.io/pallet-bundle-deployment-author",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/pallet-bundle-deployment-author",
        "deployment.apps/pallet-agent",
        "service/pallet-agent-metrics",
    ] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("{object} ")) && l.ends_with("(server dry run)")),
            "{object} missing from the dry run:\n{out}"
        );
    }
}

#[test]
fn every_rbac_rule_has_a_comment_saying_why() {
    for file in ["rbac.yaml", "rbac-install.yaml"] {
        let text = std::fs::read_to_string(deploy_dir().join(file)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut rules = 0;
        for (i, line) in lines.iter().enumerate() {
            if line.starts_with("- apiGroups:") || line.starts_with("- nonResourceURLs:") {
                rules += 1;
                assert!(
                    i > 0 && lines[i - 1].starts_with('#'),
                    "{file}:{}: rule without a comment above it: {line}",
                    i + 1
                );
            }
        }
        assert!(rules > 0, "{file} has no rules");
    }
}

#[test]
fn the_deployment_runs_two_replicas_with_leader_election_and_probes() {
    let text = std::fs::read_to_string(deploy_dir().join("agent/deployment.yaml")).unwrap();
    let deployment: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(deployment["spec"]["replicas"], 2);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args[0], "agent");
    assert!(args.contains(&"--leader-elect"));
    assert!(args.contains(&"--metrics-addr=0.0.0.0:8080"));
    // Every flag the Deployment passes is one the agent accepts.
    let help = Command::new(env!("CARGO_BIN_EXE_pallet"))
        .args(["agent", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in args.iter().skip(1) {
        let name = flag.split('=').next().unwrap();
        assert!(help.contains(name), "pallet agent has no flag {name}");
    }
    let env: Vec<&str> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(env.contains(&"POD_NAME") && env.contains(&"POD_NAMESPACE"));
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"],
        true
    );
}

/// `kubectl kustomize DIR` (relative to deploy/), as JSON objects.
fn rendered(dir: &str) -> Vec<serde_json::Value> {
    let path = deploy_dir().join(dir);
    let yaml = kubectl(&["kustomize", path.to_str().unwrap()]);
    serde_saphyr::from_multiple(&yaml).unwrap()
}

fn find<'a>(objects: &'a [serde_json::Value], kind: &str, name: &str) -> &'a serde_json::Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in {objects:#?}"))
}

fn strings(value: &serde_json::Value) -> Vec<&str> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect()
}

fn env_value<'a>(container: &'a serde_json::Value, name: &str) -> Option<&'a str> {
    container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str())
}

/// deploy/shards/: each overlay renders one shard's agent (its own name, pod labels and
/// selectors, `--shard` argument, no `--selector`), next to deploy/'s agent, which leaves the
/// sharded BundleDeployments alone; all of it applies with a server-side dry run.
#[test]
fn each_shard_overlay_renders_an_agent_of_its_own() {
    let main = rendered(".");
    let main_deployment = find(&main, "Deployment", "pallet-agent");
    let main_container = &main_deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        env_value(main_container, "PALLET_SELECTOR"),
        Some("!sharding.fluxcd.io/key")
    );
    let main_labels = &main_deployment["spec"]["selector"]["matchLabels"];
    let help = Command::new(env!("CARGO_BIN_EXE_pallet"))
        .args(["agent", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("--shard <KEY>") && help.contains("PALLET_SELECTOR"),
        "{help}"
    );

    let mut pod_labels = vec![main_labels.clone()];
    for shard in ["a", "b"] {
        let objects = rendered(&format!("shards/shard-{shard}"));
        assert_eq!(objects.len(), 2, "a Deployment and its metrics Service");
        let name = format!("pallet-agent-shard-{shard}");
        let deployment = find(&objects, "Deployment", &name);
        assert_eq!(deployment["metadata"]["namespace"], "pallet-system");
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        let args = strings(&container["args"]);
        assert_eq!(args[0], "agent");
        assert!(
            args.contains(&format!("--shard={shard}").as_str()),
            "{args:?}"
        );
        assert!(args.contains(&"--leader-elect"), "{args:?}");
        assert!(
            !args.iter().any(|a| a.starts_with("--selector")),
            "{args:?}"
        );
        // deploy/'s exclusion of sharded BundleDeployments is lifted for a shard's agent.
        assert_eq!(env_value(container, "PALLET_SELECTOR"), Some(""));
        let selector = &deployment["spec"]["selector"]["matchLabels"];
        assert_eq!(selector["app.kubernetes.io/name"], name);
        assert_eq!(selector["pallet.dev/shard"], shard);
        let template = &deployment["spec"]["template"]["metadata"]["labels"];
        for (key, value) in selector.as_object().unwrap() {
            assert_eq!(&template[key], value, "pod label {key}");
        }
        let anti = &deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
            ["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
            ["labelSelector"]["matchLabels"];
        assert_eq!(
            anti, selector,
            "replicas of a shard spread among themselves"
        );
        let service = find(
            &objects,
            "Service",
            &format!("pallet-agent-metrics-shard-{shard}"),
        );
        assert_eq!(&service["spec"]["selector"], selector);
        pod_labels.push(selector.clone());
    }
    // No Deployment selects another's pods (each differs in app.kubernetes.io/name).
    let names: std::collections::BTreeSet<String> = pod_labels
        .iter()
        .map(|l| l["app.kubernetes.io/name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names.len(), 3, "{pod_labels:?}");

    let both = rendered("shards");
    find(&both, "Deployment", "pallet-agent-shard-a");
    find(&both, "Deployment", "pallet-agent-shard-b");
    kubectl(&[
        "apply",
        "-f",
        deploy_dir().join("namespace.yaml").to_str().unwrap(),
    ]);
    let out = kubectl(&[
        "apply",
        "-k",
        deploy_dir().join("shards").to_str().unwrap(),
        "--dry-run=server",
    ]);
    for object in [
        "deployment.apps/pallet-agent-shard-a",
        "deployment.apps/pallet-agent-shard-b",
        "service/pallet-agent-metrics-shard-a",
        "service/pallet-agent-metrics-shard-b",
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(&format!("{object} "))),
            "{object} missing from the dry run:\n{out}"
        );
    }
}
