//! Shell completion scripts, and the binary as the kubectl plugin `kubectl pallet`, run by the
//! real kubectl through a `kubectl-pallet` link on PATH.

#[path = "support/cluster.rs"]
mod cluster;

use std::process::Command;

#[test]
fn completion_scripts_for_bash_zsh_and_fish_call_the_binary_back() {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(env!("CARGO_BIN_EXE_pallet"))
            .args(["completion", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains("COMPLETE="), "{shell}: {script}");
        assert!(script.contains("pallet"), "{shell}: {script}");
    }
    // bash really parses it.
    let out = Command::new("bash")
        .args([
            "-c",
            &format!(
                "source <({} completion bash) && complete -p pallet",
                env!("CARGO_BIN_EXE_pallet")
            ),
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("_clap_complete_pallet"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn completion_as_kubectl_pallet_registers_and_calls_back_that_program() {
    let bin = tempfile::tempdir().unwrap();
    let plugin = bin.path().join("kubectl-pallet");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_pallet"), &plugin).unwrap();
    let script = Command::new(&plugin)
        .args(["completion", "bash"])
        .output()
        .unwrap();
    assert!(script.status.success());
    let script = String::from_utf8(script.stdout).unwrap();
    // A name with a space ("kubectl pallet") could be neither registered nor run by the shell.
    assert!(!script.contains("kubectl pallet"), "{script}");
    let out = Command::new("bash")
        .args([
            "-c",
            &format!(
                "source <({} completion bash) && complete -p kubectl-pallet",
                plugin.display()
            ),
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("_clap_complete_kubectl_pallet"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What bash's completion function gets for the line `words`, completing the last word.
fn complete(words: &[&str]) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_pallet"))
        .arg("--")
        .args(words)
        .env("COMPLETE", "bash")
        .env("_CLAP_COMPLETE_INDEX", (words.len() - 1).to_string())
        .env("_CLAP_IFS", "\n")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn completion_offers_commands_and_bundle_deployment_names_from_the_cluster() {
    assert!(complete(&["pallet", "rol"]).contains(&"rollback".to_string()));
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let name = cluster::unique_name("complete-me");
    let bd = serde_json::json!({"apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
        "metadata": {"name": name, "labels": {"pallet.dev/test": name}},
        "spec": {"format": "plain", "sources": [{"kind": "http", "http": {"url": "http://127.0.0.1:1/b.yaml"}}]}});
    let api: kube::Api<pallet::api::BundleDeployment> = kube::Api::all(client.clone());
    cluster::track_bundle_deployment(&name);
    api.patch(
        &name,
        &kube::api::PatchParams::apply("pallet-tests"),
        &kube::api::Patch::Apply(&bd),
    )
    .await
    .unwrap();
    let kubeconfig = cluster::kubeconfig_path();
    let prefix = &name[..name.len() - 3];
    let offered = complete(&[
        "pallet",
        "status",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        prefix,
    ]);
    assert!(offered.contains(&name), "{offered:?}");
    assert!(offered.iter().all(|n| n.starts_with(prefix)), "{offered:?}");
    api.delete(&name, &Default::default()).await.unwrap();
}

#[test]
fn works_as_the_kubectl_plugin_kubectl_pallet() {
    let kubectl = std::env::var_os("HOME")
        .map(|h| std::path::PathBuf::from(h).join(".cache/pallet/bin/kubectl"))
        .filter(|p| p.exists())
        .expect("kubectl is built by tools/controlplane.sh build (~/.cache/pallet/bin/kubectl)");
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_pallet"),
        bin.path().join("kubectl-pallet"),
    )
    .unwrap();
    let run = |args: &[&str]| {
        Command::new(&kubectl)
            .args(args)
            .env("PATH", bin.path())
            .env("KUBECONFIG", cluster::kubeconfig_path())
            .output()
            .unwrap()
    };
    let plugins = run(&["plugin", "list"]);
    assert!(
        String::from_utf8_lossy(&plugins.stdout).contains("kubectl-pallet"),
        "{}",
        String::from_utf8_lossy(&plugins.stderr)
    );
    let help = run(&["pallet", "--help"]);
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.status.success(),
        "{}",
        String::from_utf8_lossy(&help.stderr)
    );
    assert!(text.contains("Usage: kubectl pallet <COMMAND>"), "{text}");
    assert!(text.contains("rollback"), "{text}");
    // A real command through kubectl: the CRD.
    let crd = run(&["pallet", "crd"]);
    assert!(String::from_utf8_lossy(&crd.stdout).contains("name: bundledeployments.pallet.dev"));
}
