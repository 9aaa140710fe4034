//! Running the built `pallet` binary against the local control plane, for the CLI tests.
//! Used with `#[path = "support/cli.rs"] mod cli;` next to `mod cluster;`.

#![allow(dead_code)] // each test binary uses a different part of this module

use std::process::{Command, Output, Stdio};

use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use pallet::api::BundleDeployment;
use serde_json::Value;

use crate::cluster;

/// A `pallet` command with `--kubeconfig` pointing at the local control plane appended.
pub fn pallet_cmd(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pallet"));
    command
        .args(args)
        .arg("--kubeconfig")
        .arg(cluster::kubeconfig_path())
        .stdin(Stdio::null());
    command
}

/// Runs `pallet args… --kubeconfig KUBECONFIG`: as the user of another kubeconfig, or against
/// another control plane.
pub fn pallet_as(kubeconfig: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pallet"))
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .stdin(Stdio::null())
        .output()
        .expect("pallet runs")
}

/// A command's exit status and output, for an assertion's message.
pub fn output_text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `pallet args… --kubeconfig <local>`; returns the output.
pub fn pallet(args: &[&str]) -> Output {
    pallet_cmd(args).output().expect("pallet runs")
}

/// Runs `pallet` and returns stdout, panicking with stderr when it fails.
pub fn pallet_ok(args: &[&str]) -> String {
    let out = pallet(args);
    assert!(
        out.status.success(),
        "pallet {args:?} failed: {}\nstdout: {}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `pallet` expecting failure; returns stderr.
pub fn pallet_err(args: &[&str]) -> String {
    let out = pallet(args);
    assert!(
        !out.status.success(),
        "pallet {args:?} succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stderr).unwrap()
}

/// Creates (server-side applies) a BundleDeployment `name` with `spec`; no agent watches it
/// unless the test starts one with a matching label. It always carries `pallet.dev/test` (the
/// name, unless `labels` sets it), so a developer's agent (`tools/up.sh` watches
/// `!pallet.dev/test`) leaves it alone. Removed when the test ends, if the test did not remove
/// it (see [`cluster::track_bundle_deployment`]).
pub async fn create_bd(client: &Client, name: &str, spec: Value, mut labels: Value) {
    cluster::track_bundle_deployment(name);
    if let Some(map) = labels.as_object_mut() {
        map.entry("pallet.dev/test")
            .or_insert_with(|| Value::String(name.to_string()));
    }
    let bd = serde_json::json!({
        "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    });
    Api::<BundleDeployment>::all(client.clone())
        .patch(
            name,
            &PatchParams::apply(cluster::TEST_FIELD_MANAGER).force(),
            &Patch::Apply(&bd),
        )
        .await
        .unwrap();
}

/// Writes `status` (a merge patch of the status subresource), standing in for the agent.
pub async fn write_status(client: &Client, name: &str, status: Value) {
    Api::<BundleDeployment>::all(client.clone())
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({ "status": status })),
        )
        .await
        .unwrap();
}

/// The BundleDeployment `name`.
pub async fn get_bd(client: &Client, name: &str) -> BundleDeployment {
    Api::<BundleDeployment>::all(client.clone())
        .get(name)
        .await
        .unwrap()
}

/// Deletes the BundleDeployment `name` (best effort: cleanup).
pub async fn delete_bd(client: &Client, name: &str) {
    let _ = Api::<BundleDeployment>::all(client.clone())
        .delete(name, &Default::default())
        .await;
}

/// A metav1.Condition as JSON.
pub fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    serde_json::json!({"type": type_, "status": status, "reason": reason, "message": message,
                       "lastTransitionTime": "2026-01-01T00:00:00Z"})
}
