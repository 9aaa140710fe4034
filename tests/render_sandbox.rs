//! The render sandbox: a render in a child process gives the objects an in-process render
//! gives, and each way a child can end past its limits (memory, CPU, wall clock, reply size; a
//! deep value is the renderer's own budget) is a clear `RenderBudgetExceeded` refusal, never
//! the end of the calling process. Also
//! prints what the sandbox costs per render.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pallet::render_sandbox::{RenderSandbox, SandboxError, SandboxLimits};
use pallet_formats::{Format, RenderBudgets, RenderConfig};

fn sandbox(limits: SandboxLimits) -> RenderSandbox {
    RenderSandbox::with_program(limits, PathBuf::from(env!("CARGO_BIN_EXE_pallet")))
}

fn chart(dir: &Path, template: &str) {
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: sandboxed\nversion: 1.0.0\n",
    )
    .unwrap();
    std::fs::write(dir.join("templates/cm.yaml"), template).unwrap();
}

fn config() -> RenderConfig {
    let mut config = RenderConfig {
        install_namespace: "apps".into(),
        ..Default::default()
    };
    config.helm.release_name = "sandboxed".into();
    config
}

const CONFIG_MAP: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n";

/// The refusal of `template` rendered under `limits` and `budgets`; it must be a budget one.
async fn refused(template: &str, limits: SandboxLimits, budgets: RenderBudgets) -> String {
    let dir = tempfile::tempdir().unwrap();
    chart(dir.path(), template);
    let mut config = config();
    config.budgets = budgets;
    match sandbox(limits)
        .render(dir.path(), Format::Helm, &config, false)
        .await
    {
        Err(SandboxError::Refused { category, message }) => {
            assert_eq!(category, "RenderBudgetExceeded", "{message}");
            message
        }
        other => panic!("not refused over a budget: {other:?}"),
    }
}

#[tokio::test]
async fn a_sandboxed_render_equals_an_in_process_one_and_its_cost_is_printed() {
    let dir = tempfile::tempdir().unwrap();
    chart(
        dir.path(),
        &format!("{CONFIG_MAP}{{{{- range until 20 }}}}\n  k{{{{ . }}}}: {{{{ printf \"%05d\" . | quote }}}}\n{{{{- end }}}}\n"),
    );
    let config = config();
    let in_process =
        pallet::reconcile::render::render_tree(Format::Helm, dir.path(), &config, false).unwrap();
    let sandbox = sandbox(SandboxLimits::default());
    let sandboxed = sandbox
        .render(dir.path(), Format::Helm, &config, false)
        .await
        .unwrap();
    assert_eq!(sandboxed, in_process);

    // What a render costs in a child (start, limits, request and reply) against in-process.
    let runs = 20;
    let start = Instant::now();
    for _ in 0..runs {
        pallet::reconcile::render::render_tree(Format::Helm, dir.path(), &config, false).unwrap();
    }
    let direct = start.elapsed() / runs;
    let start = Instant::now();
    for _ in 0..runs {
        sandbox
            .render(dir.path(), Format::Helm, &config, false)
            .await
            .unwrap();
    }
    let contained = start.elapsed() / runs;
    println!(
        "small chart: in process {direct:?} per render, sandboxed {contained:?} per render \
         (overhead {:?})",
        contained.saturating_sub(direct)
    );
}

#[tokio::test]
async fn memory_past_the_limit_ends_the_child_not_the_caller() {
    // Twenty strings of 30 MB, each within the string budget, 600 MB together.
    let message = refused(
        &format!("{CONFIG_MAP}{{{{- $all := list }}}}{{{{- range until 20 }}}}{{{{ $all = append $all (repeat 30000000 \"x\") }}}}{{{{- end }}}}\n  a: {{{{ len $all | quote }}}}\n"),
        SandboxLimits {
            memory_bytes: 128 << 20,
            ..Default::default()
        },
        RenderBudgets::default(),
    )
    .await;
    assert!(message.contains("render memory (bytes)"), "{message}");
    assert!(
        message.contains(&format!("limit of {}", 128 << 20)),
        "{message}"
    );
}

#[tokio::test]
async fn a_value_nested_in_a_loop_is_the_depth_budgets_refusal_in_the_child() {
    // A map nested 100,000 deep, built in a loop: its walk stops at the depth budget (a stack
    // overflow, the sandbox's last resort, is named by `outcome`'s unit tests).
    let message = refused(
        &format!("{{{{- $x := dict }}}}{{{{- range until 100000 }}}}{{{{ $x = dict \"a\" $x }}}}{{{{- end }}}}{CONFIG_MAP}  a: {{{{ toJson $x | len | quote }}}}\n"),
        SandboxLimits::default(),
        RenderBudgets::default(),
    )
    .await;
    assert!(message.contains("value nesting depth"), "{message}");
    assert!(message.contains("limit of 64"), "{message}");
}

/// Hashes a 3 MB string again and again: few steps, much CPU.
fn cpu_bound() -> String {
    format!("{CONFIG_MAP}{{{{- $s := repeat 3000000 \"x\" }}}}{{{{- range until 100000 }}}}{{{{ $_ := sha256sum $s }}}}{{{{- end }}}}\n  a: b\n")
}

#[tokio::test]
async fn cpu_time_past_the_limit_ends_the_child() {
    let start = Instant::now();
    let message = refused(
        &cpu_bound(),
        SandboxLimits {
            cpu_seconds: 1,
            ..Default::default()
        },
        RenderBudgets::default(),
    )
    .await;
    assert!(message.contains("render CPU time"), "{message}");
    // Ended by the CPU limit, not by the wall-clock deadline (which would say so).
    assert!(
        start.elapsed() < pallet::render_sandbox::DEFAULT_TIMEOUT,
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn the_deadline_kills_the_child() {
    let start = Instant::now();
    let message = refused(
        &cpu_bound(),
        SandboxLimits {
            timeout: Duration::from_secs(1),
            ..Default::default()
        },
        RenderBudgets::default(),
    )
    .await;
    assert!(message.contains("render time (wall clock)"), "{message}");
    // Killed at the deadline, long before its CPU budget could end it.
    assert!(
        start.elapsed() < Duration::from_secs(pallet::render_sandbox::DEFAULT_CPU_SECONDS),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn a_reply_past_the_cap_is_cut_and_refused() {
    // 2 MB of objects against a 1 MB reply cap (the renderer's own output budget is larger).
    let message = refused(
        &format!("{{{{- range until 200 }}}}\n---\n{}  x: {{{{ repeat 10000 \"y\" | quote }}}}\n{{{{- end }}}}\n",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{{ . }}\ndata:\n"),
        SandboxLimits {
            reply_bytes: 1 << 20,
            ..Default::default()
        },
        RenderBudgets::default(),
    )
    .await;
    assert!(message.contains("render reply (bytes)"), "{message}");
}

#[tokio::test]
async fn renders_past_the_concurrency_wait_for_a_turn() {
    let dir = tempfile::tempdir().unwrap();
    chart(dir.path(), &format!("{CONFIG_MAP}  a: b\n"));
    let sandbox = std::sync::Arc::new(sandbox(SandboxLimits {
        concurrency: 1,
        ..Default::default()
    }));
    let config = config();
    let renders = (0..4).map(|_| {
        let (sandbox, path, config) = (sandbox.clone(), dir.path().to_path_buf(), config.clone());
        async move { sandbox.render(&path, Format::Helm, &config, false).await }
    });
    for result in futures::future::join_all(renders).await {
        assert_eq!(result.unwrap().objects.len(), 1);
    }
}
