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
        "clusterrole.rbac.authorization.k8s.io/pallet-tenant",
        "clusterrolebinding.rbac.authorization.k8s.io/pallet-agent",
        "clusterrolebinding.rbac.authorization.k8s.io/pallet-agent-install",
        "role.rbac.authorization.k8s.io/pallet-agent",
        "rolebinding.rbac.authorization.k8s.io/pallet-agent",
        "validatingadmissionpolicy.admissionregistration.k8s.io/pallet-bundle-deployment-author",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/pallet-bundle-deployment-author",
        "deployment.apps/pallet-agent",
        "service/pallet-agent-metrics",
        "poddisruptionbudget.policy/pallet-agent",
        "networkpolicy.networking.k8s.io/pallet-agent",
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
    for file in [
        "rbac.yaml",
        "rbac-install.yaml",
        "tenant-role.yaml",
        "components/least-privilege/rbac-read.yaml",
        "components/web-view/rbac.yaml",
    ] {
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
        assert_eq!(
            objects.len(),
            4,
            "a Deployment, its metrics Service, PodDisruptionBudget and NetworkPolicy"
        );
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
        let budget = find(&objects, "PodDisruptionBudget", &name);
        assert_eq!(&budget["spec"]["selector"]["matchLabels"], selector);
        let policy = find(&objects, "NetworkPolicy", &name);
        assert_eq!(&policy["spec"]["podSelector"]["matchLabels"], selector);
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

/// The kustomize oracle (tools/kustomize.sh): kustomize v5.5.0, whose output pallet's
/// kustomize format reproduces.
fn kustomize_path() -> PathBuf {
    let out = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/kustomize.sh"))
        .arg("build")
        .output()
        .expect("tools/kustomize.sh runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// `kustomize build` of a kustomization beside a copy of deploy/ (`resources: [../deploy]`,
/// plus `extra`), as objects keyed by kind, namespace and name.
fn kustomize_build(extra: &str) -> std::collections::BTreeMap<String, serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let copy = Command::new("cp")
        .arg("-r")
        .arg(deploy_dir())
        .arg(dir.path().join("deploy"))
        .status()
        .unwrap();
    assert!(copy.success());
    std::fs::create_dir(dir.path().join("release")).unwrap();
    std::fs::write(
        dir.path().join("release/kustomization.yaml"),
        format!("resources:\n- ../deploy\n{extra}"),
    )
    .unwrap();
    let out = Command::new(kustomize_path())
        .arg("build")
        .arg(dir.path().join("release"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    keyed(&String::from_utf8_lossy(&out.stdout))
}

fn keyed(yaml: &str) -> std::collections::BTreeMap<String, serde_json::Value> {
    let objects: Vec<serde_json::Value> = serde_saphyr::from_multiple(yaml).unwrap();
    objects
        .into_iter()
        .map(|o| {
            let key = format!(
                "{} {}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["namespace"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap()
            );
            (key, o)
        })
        .collect()
}

fn export(args: &[&str]) -> std::collections::BTreeMap<String, serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_pallet"))
        .args(["install", "--export"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    keyed(&String::from_utf8_lossy(&out.stdout))
}

/// `pallet install --export` prints exactly what kustomize builds from deploy/ with the image
/// set: the release manifests have one source. So do the least-privilege component and shards.
#[test]
fn install_export_equals_kustomize_build_of_deploy() {
    let digest = format!("sha256:{}", "e".repeat(64));
    let image = format!("registry.example/pallet@{digest}");
    let images = format!(
        "images:\n- name: pallet\n  newName: registry.example/pallet\n  digest: {digest}\n"
    );
    let cases = [
        (vec![], String::new()),
        (
            vec!["--least-privilege"],
            "components:\n- ../deploy/components/least-privilege\n".to_string(),
        ),
        (vec!["--shards", "a,b"], "- ../deploy/shards\n".to_string()),
    ];
    for (flags, extra) in cases {
        let mut args = vec!["--image", image.as_str()];
        args.extend(flags.iter().copied());
        let exported = export(&args);
        let built = kustomize_build(&format!("{extra}{images}"));
        assert_eq!(
            exported.keys().collect::<Vec<_>>(),
            built.keys().collect::<Vec<_>>(),
            "{flags:?}"
        );
        for (key, object) in &exported {
            assert_eq!(object, &built[key], "{flags:?}: {key}");
        }
    }
}

/// The least-privilege component applies (server-side dry run) and leaves no broad grant.
#[test]
fn the_least_privilege_component_applies_with_a_server_side_dry_run() {
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("least-privilege.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_pallet"))
        .args([
            "install",
            "--export",
            "--least-privilege",
            "--image",
            "pallet:0.1.0",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::write(&manifests, &out.stdout).unwrap();
    kubectl(&[
        "apply",
        "-f",
        deploy_dir().join("namespace.yaml").to_str().unwrap(),
    ]);
    let applied = kubectl(&[
        "apply",
        "--server-side",
        "--dry-run=server",
        "--force-conflicts",
        "--field-manager",
        "pallet-tests-dry-run",
        "-f",
        manifests.to_str().unwrap(),
    ]);
    assert!(
        applied.contains("clusterrole.rbac.authorization.k8s.io/pallet-agent-read"),
        "{applied}"
    );
    assert!(!applied.contains("pallet-agent-install"), "{applied}");
}

/// The web-view component turns the agent's view on (loopback in the Pod, read-only) and grants
/// what it needs: TokenReviews and impersonating users and groups.
#[test]
fn the_web_view_component_serves_the_view_on_loopback_with_its_grant() {
    let built = kustomize_build("components:\n- ../deploy/components/web-view\n");
    let deployment = &built["Deployment pallet-system/pallet-agent"];
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap();
    assert!(
        args.contains(&serde_json::json!("--ui-address=127.0.0.1:8090")),
        "{args:?}"
    );
    assert!(
        !args.contains(&serde_json::json!("--ui-actions")),
        "read-only by default"
    );
    let role = &built["ClusterRole /pallet-agent-web-view"];
    let text = role["rules"].to_string();
    assert!(
        text.contains("tokenreviews") && text.contains("impersonate"),
        "{text}"
    );
    assert!(built.contains_key("ClusterRoleBinding /pallet-agent-web-view"));
}

/// deploy/monitoring's alert rules name only metrics the agent exports, and its ServiceMonitor
/// scrapes the agents' metrics port.
#[test]
fn the_alert_rules_use_only_exported_metrics() {
    // As the agent does at start: the shard's series exists from then on.
    pallet::metrics::METRICS.set_shard("");
    let exported = pallet::metrics::METRICS.encode();
    let rules =
        std::fs::read_to_string(deploy_dir().join("monitoring/prometheusrule.yaml")).unwrap();
    let rule: serde_json::Value = serde_saphyr::from_str(&rules).unwrap();
    let mut checked = 0;
    for group in rule["spec"]["groups"].as_array().unwrap() {
        for alert in group["rules"].as_array().unwrap() {
            let expr = alert["expr"].as_str().unwrap();
            let names: Vec<&str> = expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("pallet_"))
                .collect();
            assert!(!names.is_empty(), "{expr}");
            for name in names {
                assert!(
                    exported.lines().any(|l| l.starts_with(name)),
                    "{}: {name} is not a metric the agent exports",
                    alert["alert"]
                );
                checked += 1;
            }
            assert!(alert["annotations"]["description"].is_string());
        }
    }
    assert!(checked >= 7, "{checked}");
    let monitor: serde_json::Value = serde_saphyr::from_str(
        &std::fs::read_to_string(deploy_dir().join("monitoring/servicemonitor.yaml")).unwrap(),
    )
    .unwrap();
    let service: serde_json::Value = serde_saphyr::from_str(
        &std::fs::read_to_string(deploy_dir().join("agent/service.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        monitor["spec"]["endpoints"][0]["port"],
        service["spec"]["ports"][0]["name"]
    );
    for (key, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&service["metadata"]["labels"][key], value);
    }
}
