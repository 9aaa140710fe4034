//! `exec` functions run in the function sandbox: an empty environment, no descriptor of the
//! agent's but their standard streams, and nothing they start outlives the call, whether they
//! end by themselves or at their deadline (children left in their process group, and those
//! that left it with `setsid`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pallet::api::{BundleDeployment, FunctionProcessor};
use pallet::reconcile::fetch::SecretPolicy;
use pallet::reconcile::functions::{call, FunctionCaller, FunctionPolicy};
use serde_json::json;

mod support;
use support::processes_with;

fn bundle() -> BundleDeployment {
    serde_json::from_value(json!({
        "apiVersion": "pallet.dev/v1alpha1", "kind": "BundleDeployment",
        "metadata": {"name": "fn-test", "uid": "u"},
        "spec": {"format": "plain", "sources": []},
    }))
    .unwrap()
}

/// Writes an executable shell script `body` into `dir`.
fn script(dir: &Path, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join("fn.sh");
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The descriptors of this process that are not close-on-exec: what it was started with.
fn inherited_by_this_process() -> Vec<u32> {
    const CLOEXEC: u32 = 0o2000000;
    std::fs::read_dir("/proc/self/fdinfo")
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let fd: u32 = entry.file_name().to_str()?.parse().ok()?;
            let info = std::fs::read_to_string(entry.path()).ok()?;
            let flags = info.lines().find_map(|l| l.strip_prefix("flags:"))?.trim();
            let flags = u32::from_str_radix(flags, 8).ok()?;
            (flags & CLOEXEC == 0).then_some(fd)
        })
        .collect()
}

async fn run(path: &Path, timeout: &str) -> Result<String, String> {
    let policy = FunctionPolicy {
        allowed_exec: vec![path.to_path_buf()],
        sandbox_program: Some(PathBuf::from(env!("CARGO_BIN_EXE_pallet"))),
        ..Default::default()
    };
    let secrets = SecretPolicy::default();
    let caller = FunctionCaller {
        client: None,
        secret_policy: &secrets,
        exec_policy: &policy,
        egress: Default::default(),
    };
    let spec: FunctionProcessor =
        serde_json::from_value(json!({"exec": path, "timeout": timeout})).unwrap();
    let request =
        json!({"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList", "items": []});
    call(&caller, &bundle(), &spec, &request).await
}

const EMPTY_ANSWER: &str =
    r#"{"apiVersion":"config.kubernetes.io/v1","kind":"ResourceList","items":[]}"#;

#[tokio::test]
async fn an_exec_function_sees_no_environment_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().display().to_string();
    let path = script(
        dir.path(),
        &format!(
            "env > {out}/env.txt\nls -l /proc/self/fd > {out}/fds.txt\n\
             sleep 3141592 &\nsetsid sleep 3141593 &\n(sleep 3141594 &) \n\
             cat > /dev/null\necho '{EMPTY_ANSWER}'\n"
        ),
    );
    let answer = run(&path, "20s").await.unwrap();
    assert_eq!(answer.trim(), EMPTY_ANSWER);
    let env = std::fs::read_to_string(dir.path().join("env.txt")).unwrap();
    for leaked in [
        "CARGO",
        "PATH=",
        "HOME=",
        "KUBECONFIG",
        "KUBERNETES_SERVICE",
        "RUST",
    ] {
        assert!(!env.contains(leaked), "the function saw {leaked}: {env}");
    }
    // Beyond its standard streams, only what the shell and `ls` opened themselves (the script,
    // the directory listed, /dev/null), and what this test process itself was started with and
    // passes on to every child (cargo's jobserver pipes): nothing the agent opened.
    let inherited = inherited_by_this_process();
    let fds = std::fs::read_to_string(dir.path().join("fds.txt")).unwrap();
    for line in fds.lines().filter(|l| l.contains(" -> ")) {
        let (fd, target) = line.rsplit_once(" -> ").unwrap();
        let fd: u32 = fd.rsplit(' ').next().unwrap().parse().unwrap();
        let own =
            target.ends_with("fn.sh") || target.starts_with("/proc/") || target == "/dev/null";
        assert!(
            fd <= 2 || own || inherited.contains(&fd),
            "the function holds {line}:\n{fds}"
        );
    }
    for marker in ["sleep 3141592", "sleep 3141593", "sleep 3141594"] {
        assert_eq!(
            processes_with(marker),
            Vec::<String>::new(),
            "{marker} outlived the call"
        );
    }
}

#[tokio::test]
async fn a_function_past_its_deadline_is_ended_with_everything_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let path = script(
        dir.path(),
        "sleep 2718281 &\nsetsid sleep 2718282 &\nexec sleep 2718283\n",
    );
    let started = Instant::now();
    let error = run(&path, "1s").await.unwrap_err();
    assert!(error.contains("did not answer within 1s"), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    for marker in ["sleep 2718281", "sleep 2718282", "sleep 2718283"] {
        assert_eq!(
            processes_with(marker),
            Vec::<String>::new(),
            "{marker} outlived the call"
        );
    }
}

#[tokio::test]
async fn a_failing_function_is_reported_by_its_exit_status_never_its_standard_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = script(dir.path(), "cat\necho 'password=hunter2' >&2\nexit 3\n");
    let answer = run(&path, "10s").await.unwrap();
    assert!(answer.contains("exited with status 3"), "{answer}");
    assert!(!answer.contains("hunter2"), "{answer}");
}
