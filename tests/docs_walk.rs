//! The documentation's examples, run: every ```console block of the getting-started guide, then
//! of every other page (README.md and `docs/`), is executed and its output compared, so the
//! documented commands and what they print cannot drift from the code.
//!
//! The mechanism (also described in the getting-started guide): `$ ` starts a
//! command (run with bash in a scratch directory), the lines after it are its expected stdout,
//! `...` matches any number of lines and `[..]` any text within a line. A fenced block right
//! after `<!-- file: PATH -->` is written to PATH first. `localhost:5000` becomes the fixture
//! registry and `demo` a unique name; an agent watches `team=<that name>`.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/docs.rs"]
mod docs;
mod support;

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams};
use pallet::api::BundleDeployment;

/// One step of a documented example.
#[derive(Debug)]
enum Step {
    /// Write a file (path, content).
    File(String, String),
    /// Run a command and compare its stdout with the expected lines.
    Run(String, Vec<String>),
}

/// The steps of every example in `text`, in order.
fn steps(text: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut pending_file: Option<String> = None;
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(path) = line
            .strip_prefix("<!-- file: ")
            .and_then(|l| l.strip_suffix(" -->"))
        {
            pending_file = Some(path.to_string());
            continue;
        }
        let Some(lang) = line.strip_prefix("```") else {
            if !line.trim().is_empty() {
                pending_file = None;
            }
            continue;
        };
        let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        if let Some(path) = pending_file.take() {
            steps.push(Step::File(path, body.join("\n") + "\n"));
        } else if lang == "console" {
            for line in body {
                match line.strip_prefix("$ ") {
                    Some(command) => steps.push(Step::Run(command.to_string(), Vec::new())),
                    None => match steps.last_mut() {
                        Some(Step::Run(_, expected)) => expected.push(line.to_string()),
                        _ => panic!("console block output before any `$ ` command: {line}"),
                    },
                }
            }
        }
    }
    steps
}

/// Whether `line` matches `pattern`, where `[..]` stands for any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split("[..]").collect();
    if parts.len() == 1 {
        return pattern == line;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !line.starts_with(first) || !line[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

/// Whether `actual` matches `expected`, where a `...` line matches any number of lines.
fn output_matches(expected: &[String], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first == "..." => {
            (0..=actual.len()).any(|skip| output_matches(rest, &actual[skip..]))
        }
        Some((first, rest)) => {
            !actual.is_empty()
                && line_matches(first, actual[0])
                && output_matches(rest, &actual[1..])
        }
    }
}

#[test]
fn the_matcher_understands_its_wildcards() {
    let expected: Vec<String> = ["a [..] c", "...", "end"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert!(output_matches(&expected, &["a b c", "x", "y", "end"]));
    assert!(output_matches(&expected, &["a  c", "end"]));
    assert!(!output_matches(&expected, &["a b d", "end"]));
    assert!(!output_matches(&expected, &["a b c", "x"]));
    assert!(line_matches("sha256:[..]", "sha256:abc"));
    assert!(!line_matches("x [..] y [..] z", "x 1 z"));
}

#[tokio::test]
async fn documented_commands_run_and_print_what_the_documentation_shows() {
    // The getting-started guide first (its steps build on each other), then every other page.
    let mut pages = docs::pages();
    pages.sort_by_key(|(path, _)| !path.ends_with("docs/getting-started.md"));
    let text: String = pages
        .iter()
        .map(|(_, text)| text.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let fx = support::Fixtures::load();
    let registry = fx.registry_plain();
    let name = support::unique_name("demo");
    let substitute = |text: &str| {
        text.replace("localhost:5000", &registry.host)
            .replace("demo", &name)
    };
    let steps = steps(&text);
    assert!(
        steps
            .iter()
            .any(|s| matches!(s, Step::File(_, c) if c.contains("labels: {team: demo}"))),
        "the getting-started guide's BundleDeployment no longer has `labels: {{team: demo}}`, which this test \
         labels pallet.dev/test so that a running demo agent leaves it alone"
    );
    let runs = steps.iter().filter(|s| matches!(s, Step::Run(..))).count();
    assert!(
        runs >= 15,
        "the getting-started guide lost its examples: {runs} commands"
    );

    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    cluster::track_bundle_deployment(&name);
    let scratch = tempfile::tempdir().unwrap();
    let bin = scratch.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_pallet"), bin.join("pallet")).unwrap();
    let kubectl = Path::new(&std::env::var("HOME").unwrap()).join(".cache/pallet/bin/kubectl");
    std::os::unix::fs::symlink(&kubectl, bin.join("kubectl")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let work = scratch.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let agent = agent::Agent::start_selecting(
        &format!("team={name}"),
        &name,
        &["--plain-http-registry", &registry.host],
    );

    // A failing step must not leave the BundleDeployment behind with its finalizer and no agent:
    // catch the failure, clean up while the agent still runs, then fail.
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for step in &steps {
            match step {
                Step::File(file, content) => {
                    let dest = work.join(substitute(file));
                    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
                    // The test label keeps a developer's running agent (`tools/up.sh` selects
                    // `!pallet.dev/test`) away from this BundleDeployment: only this test's
                    // agent, selecting `team=<name>`, reconciles it.
                    let content = substitute(content).replace(
                        &format!("labels: {{team: {name}}}"),
                        &format!("labels: {{team: {name}, {}: {name}}}", agent::TEST_LABEL),
                    );
                    std::fs::write(dest, content).unwrap();
                }
                Step::Run(command, expected) => {
                    let command = substitute(command);
                    let out = Command::new("bash")
                        .args(["-o", "pipefail", "-c", &command])
                        .current_dir(&work)
                        .env("PATH", &path)
                        .env("KUBECONFIG", cluster::kubeconfig_path())
                        .env("PALLET_FETCH_CACHE", scratch.path().join("cache"))
                        .output()
                        .unwrap();
                    let stdout = String::from_utf8_lossy(&out.stdout);
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    assert!(
                        out.status.success(),
                        "documented command failed: {command}\nstderr: {stderr}\nstdout: {stdout}\nagent log:\n{}",
                        agent.log_tail()
                    );
                    let expected: Vec<String> = expected.iter().map(|l| substitute(l)).collect();
                    let actual: Vec<&str> = stdout.lines().collect();
                    assert!(
                        output_matches(&expected, &actual),
                        "documented output differs for: {command}\nexpected:\n{}\nactual:\n{stdout}",
                        expected.join("\n")
                    );
                }
            }
        }
    }));
    let _ = Api::<BundleDeployment>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await;
    agent::wait_bd_gone(&client, &name).await;
    drop(agent);
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await;
    if let Err(panic) = run {
        std::panic::resume_unwind(panic);
    }
}
