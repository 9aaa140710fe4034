//! Shell completion scripts, and the binary as the kubectl plugin `kubectl pallet`, run by the
//! real kubectl through a `kubectl-pallet` link on PATH.

#[path = "support/cluster.rs"]
mod cluster;

use std::process::Command;

#[test]
fn completion_scripts_for_bash_zsh_and_fish_name_the_commands() {
    for (shell, marker) in [
        ("bash", "complete -F _pallet"),
        ("zsh", "#compdef pallet"),
        ("fish", "complete -c pallet"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_pallet"))
            .args(["completion", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains(marker), "{shell}: no {marker:?}");
        for command in ["plan", "rollback", "resume", "trace", "push"] {
            assert!(script.contains(command), "{shell} script lacks {command}");
        }
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
        String::from_utf8_lossy(&out.stdout).contains("_pallet"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
