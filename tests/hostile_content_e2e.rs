//! End-to-end: hostile content never takes the agent down. Each case runs against a
//! leader-elected agent on the local control plane with a healthy BundleDeployment beside it
//! (see `support/hostile.rs` for every property asserted and the figures printed): the
//! hostile bundle gets a clear condition naming what was refused, and the agent, its Lease and
//! its neighbour carry on.
//!
//! The charts are made here, small: what makes them hostile is what they ask the renderer to
//! do, not their size.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/hostile.rs"]
mod hostile;
mod support;

use hostile::{chart_files, git_case, Expected, Hostile};

const CONFIG_MAP: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-ok\ndata:\n";

const BUDGET: &str = "RenderBudgetExceeded";

fn expected(parts: &[&str]) -> Expected {
    Expected {
        reason: BUDGET,
        message_parts: parts.iter().map(|p| p.to_string()).collect(),
    }
}

/// Runs one helm case from git against a new harness.
async fn helm_case(test: &str, template: &str, values: &str, parts: &[&str], agent_args: &[&str]) {
    let mut harness = Hostile::start(test, agent_args).await;
    let case = git_case(
        "case",
        &harness.namespace.clone(),
        chart_files(template, values),
        expected(parts),
    );
    harness.run(case).await;
}

#[tokio::test]
async fn a_self_recursive_tpl_is_refused() {
    helm_case(
        "hostile-tpl",
        &format!("{CONFIG_MAP}  a: {{{{ tpl .Values.x . }}}}\n"),
        "x: \"{{ tpl .Values.x . }}\"\n",
        &[
            "template call depth",
            "hostile/templates/cm.yaml",
            "limit of 64",
        ],
        &[],
    )
    .await;
}

#[tokio::test]
async fn deeply_nested_parentheses_and_ifs_are_refused() {
    let parens = format!(
        "{CONFIG_MAP}  a: {{{{ {}1{} }}}}\n",
        "(".repeat(2000),
        ")".repeat(2000)
    );
    let ifs = format!(
        "{CONFIG_MAP}{}  a: b\n{}",
        "{{ if true }}".repeat(1000),
        "{{ end }}".repeat(1000)
    );
    let mut harness = Hostile::start("hostile-nesting", &[]).await;
    for (name, template, what) in [("parens", parens, "parentheses"), ("ifs", ifs, "if, with")] {
        let case = git_case(
            name,
            &harness.namespace.clone(),
            chart_files(&template, ""),
            expected(&["template nesting depth", "hostile/templates/cm.yaml", what]),
        );
        harness.run(case).await;
    }
}

#[tokio::test]
async fn deeply_nested_values_are_refused() {
    let mut harness = Hostile::start("hostile-values", &[]).await;
    // values.yaml 100,000 deep: refused by the reader's depth budget.
    let deep = format!("x: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let case = git_case(
        "file",
        &harness.namespace.clone(),
        chart_files(&format!("{CONFIG_MAP}  a: b\n"), &deep),
        expected(&["values nesting depth", "values.yaml"]),
    );
    harness.run(case).await;
    // A value nested 100,000 deep built by the template itself: printing it overflows the
    // render's stack, which ends the render's process, not the agent.
    let built = format!(
        "{{{{- $x := dict }}}}{{{{- range until 100000 }}}}{{{{ $x = dict \"a\" $x }}}}{{{{- end }}}}{CONFIG_MAP}  a: {{{{ toJson $x | len | quote }}}}\n"
    );
    let case = git_case(
        "built",
        &harness.namespace.clone(),
        chart_files(&built, ""),
        expected(&["render stack", "stack overflow"]),
    );
    harness.run(case).await;
}

#[tokio::test]
async fn huge_repeat_until_and_seq_are_refused() {
    let mut harness = Hostile::start("hostile-sizes", &[]).await;
    for (name, call, budget) in [
        ("repeat", "repeat 3000000000 \"x\"", "string size (bytes)"),
        ("until", "until 3000000000", "list size (items)"),
        ("seq", "seq 3000000000", "list size (items)"),
    ] {
        let case = git_case(
            name,
            &harness.namespace.clone(),
            chart_files(&format!("{CONFIG_MAP}  a: {{{{ {call} | len | quote }}}}\n"), ""),
            expected(&[budget, call, "hostile/templates/cm.yaml"]),
        );
        harness.run(case).await;
    }
}

#[tokio::test]
async fn nested_loops_that_would_run_for_hours_are_refused() {
    helm_case(
        "hostile-loops",
        &format!("{CONFIG_MAP}{{{{ range until 100000 }}}}{{{{ range until 100000 }}}}{{{{ end }}}}{{{{ end }}}}  a: b\n"),
        "",
        &["render steps", "hostile/templates/cm.yaml", "limit of 1000000"],
        &[],
    )
    .await;
}

#[tokio::test]
async fn a_loop_that_spends_cpu_without_steps_is_ended_by_the_sandbox() {
    // Few steps, each hashing 3 MB: hours of CPU. The render's process is ended at its CPU
    // limit (5 s here), the agent and its neighbour carry on meanwhile.
    helm_case(
        "hostile-cpu",
        &format!("{CONFIG_MAP}{{{{- $s := repeat 3000000 \"x\" }}}}{{{{- range until 100000 }}}}{{{{ $_ := sha256sum $s }}}}{{{{- end }}}}\n  a: b\n"),
        "",
        &["render CPU time", "limit of 5s"],
        &["--render-cpu-seconds", "5"],
    )
    .await;
}

#[tokio::test]
async fn output_bombs_are_refused() {
    let mut harness = Hostile::start("hostile-output", &[]).await;
    // 700,000 lines of 100 bytes: 70 MB of text, past the 64 MiB output budget.
    let line = "x".repeat(98);
    let text = format!("{CONFIG_MAP}  a: |\n{{{{- range until 700000 }}}}\n    {line}{{{{- end }}}}\n");
    let case = git_case(
        "text",
        &harness.namespace.clone(),
        chart_files(&text, ""),
        expected(&["rendered output (bytes)", "hostile/templates/cm.yaml", "limit of 67108864"]),
    );
    harness.run(case).await;
    // Twenty strings of 40 MB kept in a list: each within the string budget, 800 MB together,
    // past the render's memory limit.
    let memory = format!("{CONFIG_MAP}{{{{- $all := list }}}}{{{{- range until 20 }}}}{{{{ $all = append $all (repeat 40000000 \"x\") }}}}{{{{- end }}}}\n  a: {{{{ len $all | quote }}}}\n");
    let case = git_case(
        "memory",
        &harness.namespace.clone(),
        chart_files(&memory, ""),
        expected(&["render memory (bytes)", "limit of 268435456"]),
    );
    harness.run(case).await;
}
