//! The documentation's examples, run, so the documented commands and what they print cannot
//! drift from the code.
//!
//! The getting-started guide is typed into a shell as a person would type it after
//! `tools/up.sh`: one `bash` started in the repository's root with an empty environment,
//! `source .pallet/env` (a command of the guide) its only preparation, then every ```console
//! block in order, against the agent `tools/up.sh` started (found through the state dir; the test
//! fails, naming the command to run, when it is missing or runs without the flags the guide
//! assumes). The guide's BundleDeployment is that agent's to reconcile, so it carries no test
//! label; what the guide creates is deleted by its own clean-up section, checked here, and by this
//! test again whatever happened.
//!
//! The ```console blocks of every other page (README.md and `docs/`) run command by command in a
//! scratch directory, with `localhost:5000` replaced by the fixture registry and `demo` by a unique
//! name; a fenced block right after `<!-- file: PATH -->` is written to PATH first.
//!
//! In both, `$ ` starts a command, the lines after it are its expected stdout, `...` matches any
//! number of lines and `[..]` any text within a line.

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/docs.rs"]
mod docs;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::Client;
use pallet::api::BundleDeployment;

/// The guide typed into a shell.
const GUIDE: &str = "docs/getting-started.md";

/// The name of the guide's BundleDeployment, and of the namespace it installs into.
const GUIDE_NAME: &str = "demo";

/// Written after each command's output, with the command's index and exit status.
const MARK: &str = "::pallet-docs-walk-step";

/// One step of a page's examples (pages other than the guide).
#[derive(Debug)]
enum Step {
    /// Write a file (path, content).
    File(String, String),
    /// Run a command and compare its stdout with the expected lines.
    Run(String, Vec<String>),
}

/// One command of the guide as typed: its text (with a here-document's lines) and the stdout the
/// guide shows for it.
#[derive(Debug, PartialEq)]
struct Typed {
    command: String,
    expected: Vec<String>,
}

/// The delimiter of a here-document the command line starts (`<<EOF`, `<<'EOF'`, `<<-"END"`).
fn heredoc_delimiter(command: &str) -> Option<String> {
    let (_, after) = command.split_once("<<")?;
    let after = after.strip_prefix('-').unwrap_or(after).trim_start();
    let word: String = after
        .chars()
        .filter(|c| *c != '\'' && *c != '"')
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!word.is_empty()).then_some(word)
}

/// The commands of the guide's ```console blocks in order. Apart from them the guide may hold
/// only the `tools/up.sh` block that comes before the walk and blocks of other kinds that are
/// not commands (none write files: everything the walk needs is typed).
fn typed_steps(guide: &str) -> Vec<Typed> {
    let mut steps: Vec<Typed> = Vec::new();
    let mut lines = guide.lines();
    while let Some(line) = lines.next() {
        assert!(
            !line.starts_with("<!-- file: "),
            "{GUIDE} writes a file the reader does not type ({line}): show it as `cat > FILE <<EOF`"
        );
        let Some(lang) = line.strip_prefix("```") else {
            continue;
        };
        let mut body = lines.by_ref().take_while(|l| *l != "```");
        if lang == "sh" {
            let block: Vec<&str> = body.collect();
            assert!(
                block.len() == 1 && block[0].starts_with("tools/up.sh"),
                "{GUIDE}: an `sh` block the walk does not run: {block:?}; show commands in `console` blocks"
            );
            continue;
        }
        if lang != "console" {
            body.for_each(drop);
            continue;
        }
        while let Some(line) = body.next() {
            match line.strip_prefix("$ ") {
                Some(command) => {
                    let mut command = command.to_string();
                    if let Some(delimiter) = heredoc_delimiter(&command) {
                        for input in body.by_ref() {
                            command.push('\n');
                            command.push_str(input);
                            if input == delimiter {
                                break;
                            }
                        }
                    }
                    steps.push(Typed {
                        command,
                        expected: Vec::new(),
                    });
                }
                None => match steps.last_mut() {
                    Some(step) => step.expected.push(line.to_string()),
                    None => panic!("{GUIDE}: output before any `$ ` command: {line}"),
                },
            }
        }
    }
    steps
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

/// The script a shell runs for `steps`: each command as typed, then a mark with its index and
/// exit status on stdout and on stderr; the first failing command ends it.
fn script(steps: &[Typed]) -> String {
    let mut script = String::new();
    for (i, step) in steps.iter().enumerate() {
        script.push_str(&step.command);
        script.push('\n');
        script.push_str(&format!(
            "__rc=$?; printf '\\n{MARK} {i} %d\\n' \"$__rc\"; printf '\\n{MARK} {i}\\n' >&2; \
             [ \"$__rc\" = 0 ] || exit \"$__rc\"\n"
        ));
    }
    script
}

/// Splits a stream the script wrote into each step's part, by the marks; with the exit status
/// when the mark carries one. A part is what the command wrote (the mark's leading newline is
/// removed).
fn split_by_marks(stream: &str) -> Vec<(String, Option<i32>)> {
    let mut parts = Vec::new();
    let mut rest = stream;
    while let Some(at) = rest.find(&format!("\n{MARK} ")) {
        let part = &rest[..at];
        let after = &rest[at + 1 + MARK.len() + 1..];
        let (mark, next) = after.split_once('\n').unwrap_or((after, ""));
        let status = mark.split_whitespace().nth(1).and_then(|s| s.parse().ok());
        parts.push((part.to_string(), status));
        rest = next;
    }
    parts
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

#[test]
fn commands_are_read_as_typed_with_their_here_documents() {
    let guide = "text\n\n```sh\ntools/up.sh   # start\n```\n\n```console\n$ cat > a.yaml <<'EOF'\n\
                 x: 1\n$ not a command\nEOF\n$ cat a.yaml\nx: 1\n$ true\n```\n\n```yaml\nshown: only\n```\n";
    assert_eq!(
        typed_steps(guide),
        vec![
            Typed {
                command: "cat > a.yaml <<'EOF'\nx: 1\n$ not a command\nEOF".into(),
                expected: vec![],
            },
            Typed {
                command: "cat a.yaml".into(),
                expected: vec!["x: 1".into()],
            },
            Typed {
                command: "true".into(),
                expected: vec![],
            },
        ]
    );
    assert_eq!(
        heredoc_delimiter("cat > bd.yaml <<EOF").as_deref(),
        Some("EOF")
    );
    assert_eq!(
        heredoc_delimiter("cat <<-\"END\" | x").as_deref(),
        Some("END")
    );
    assert_eq!(heredoc_delimiter("echo '<<'"), None);
}

#[test]
fn a_script_s_output_splits_into_each_command_s_part() {
    // What bash prints for `printf 'a\nb\n'`, then `printf 'no newline'`, then a failing `false`.
    let stream = format!("a\nb\n\n{MARK} 0 0\nno newline\n{MARK} 1 0\n\n{MARK} 2 1\n");
    let parts = split_by_marks(&stream);
    assert_eq!(
        parts,
        vec![
            ("a\nb\n".to_string(), Some(0)),
            ("no newline".to_string(), Some(0)),
            (String::new(), Some(1)),
        ]
    );
    assert!(script(&[Typed {
        command: "true".into(),
        expected: vec![]
    }])
    .contains("|| exit"));
}

/// The repository's root.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Panics unless the agent `tools/up.sh` started runs, from the build it put on the guide's
/// `PATH`, with the flags the guide assumes (the fixture registry over plain HTTP, loopback
/// sources, and the selector that leaves tests' BundleDeployments alone). Returns its log file.
fn require_up_sh_agent(state: &Path) -> PathBuf {
    let run_up = "run `tools/up.sh` first: it starts the agent this test walks the guide against \
                  and writes the .pallet/env the guide sources (CI runs it before the suite)";
    let env_file = state.join("env");
    assert!(env_file.is_file(), "no {}: {run_up}", env_file.display());
    let pid_file = state.join("agent/agent.pid");
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap_or_else(|e| panic!("no agent pid file {} ({e}): {run_up}", pid_file.display()));
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", pid.trim())).unwrap_or_else(|e| {
        panic!(
            "the agent of {} is not running ({e}): {run_up}",
            pid_file.display()
        )
    });
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let has = |flag: &str, value: &str| args.windows(2).any(|w| w[0] == flag && w[1] == value);
    let bin = state.join("bin/pallet");
    // The fixtures up.sh started, read only now: without them, the advice is up.sh's.
    let registry = &support::Fixtures::load().registry_plain().host;
    assert!(
        args.first().map(PathBuf::from) == Some(bin.clone())
            && args.get(1).map(String::as_str) == Some("agent")
            && has("--plain-http-registry", registry)
            && has("--selector", "!pallet.dev/test")
            && args.iter().any(|a| a == "--allow-loopback-egress"),
        "the agent tools/up.sh started ({}) is not the one the guide assumes ({} agent with \
         --plain-http-registry {registry} (the fixture registry now), --allow-loopback-egress, \
         --selector '!pallet.dev/test'): run `tools/up.sh` again. It runs: {args:?}",
        pid.trim(),
        bin.display()
    );
    state.join("agent/agent.log")
}

/// Deletes the guide's BundleDeployment (waiting for the agent to delete its objects; past a
/// minute its finalizer is released so nothing hangs) and its namespace. Returns what existed.
async fn remove_guide_objects(client: &Client) -> Vec<String> {
    let bds: Api<BundleDeployment> = Api::all(client.clone());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut existed = Vec::new();
    if bds.get_opt(GUIDE_NAME).await.unwrap().is_some() {
        existed.push(format!("BundleDeployment {GUIDE_NAME}"));
        let _ = bds.delete(GUIDE_NAME, &DeleteParams::default()).await;
        let gone = wait_gone(&bds, GUIDE_NAME, Duration::from_secs(60)).await;
        if !gone {
            let release = serde_json::json!({"metadata": {"finalizers": null}});
            let _ = bds
                .patch(GUIDE_NAME, &PatchParams::default(), &Patch::Merge(&release))
                .await;
            wait_gone(&bds, GUIDE_NAME, Duration::from_secs(30)).await;
        }
    }
    if namespaces.get_opt(GUIDE_NAME).await.unwrap().is_some() {
        existed.push(format!("Namespace {GUIDE_NAME}"));
        let _ = namespaces
            .delete(GUIDE_NAME, &DeleteParams::default())
            .await;
        wait_gone(&namespaces, GUIDE_NAME, Duration::from_secs(120)).await;
    }
    existed
}

/// Polls until `name` is gone; whether it went within `timeout`.
async fn wait_gone<K>(api: &Api<K>, name: &str, timeout: Duration) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if api.get_opt(name).await.unwrap().is_none() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    false
}

/// The last `lines` lines of a file, for failure messages.
fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Why the walk's output differs from the guide, if it does: the first command that failed or
/// printed something else, with what it wrote.
fn walk_failure(steps: &[Typed], stdout: &str, stderr: &str) -> Option<String> {
    let outputs = split_by_marks(stdout);
    let errors = split_by_marks(stderr);
    for (i, step) in steps.iter().enumerate() {
        let command = &step.command;
        let error = errors.get(i).map(|(e, _)| e.as_str()).unwrap_or(stderr);
        let Some((out, status)) = outputs.get(i) else {
            return Some(format!(
                "the walk stopped before `{command}` finished (timed out?)\nstdout so far:\n{stdout}\nstderr:\n{stderr}"
            ));
        };
        if *status != Some(0) {
            return Some(format!(
                "`{command}` failed (exit status {status:?})\nstderr:\n{error}\nstdout:\n{out}"
            ));
        }
        let actual: Vec<&str> = out.lines().collect();
        if !output_matches(&step.expected, &actual) {
            return Some(format!(
                "`{command}` printed something else than the guide shows\nexpected:\n{}\nactual:\n{out}\nstderr:\n{error}",
                step.expected.join("\n")
            ));
        }
    }
    None
}

#[tokio::test]
async fn the_getting_started_guide_typed_in_a_shell_reaches_every_state_it_shows() {
    let guide = std::fs::read_to_string(root().join(GUIDE)).unwrap();
    let steps = typed_steps(&guide);
    assert!(
        steps.len() >= 25,
        "{GUIDE} lost its examples: {} commands",
        steps.len()
    );
    assert_eq!(
        steps[0].command, "source .pallet/env",
        "{GUIDE}: the walk starts from what tools/up.sh wrote for a new shell"
    );
    let state = cluster::state_dir();
    let agent_log = require_up_sh_agent(&state);
    let client = cluster::client().await;

    let leftovers = remove_guide_objects(&client).await;
    if !leftovers.is_empty() {
        eprintln!("removed what an earlier walk left: {leftovers:?}");
    }
    // A state dir elsewhere than the default: the one command naming it follows.
    let mut steps = steps;
    if state != root().join(".pallet") {
        steps[0].command = format!("source {}/env", state.display());
    }
    let scratch = tempfile::tempdir().unwrap();
    let script_path = scratch.path().join("walk.sh");
    std::fs::write(&script_path, script(&steps)).unwrap();
    // A new shell: nothing of this process's environment but a home and the system's PATH
    // (`mktemp` puts the guide's directory under the scratch dir, removed afterwards).
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let out = Command::new("timeout")
        .args(["--kill-after=10", "900", "bash", "--noprofile", "--norc"])
        .args(["-o", "pipefail"])
        .arg(&script_path)
        .env_clear()
        .env("HOME", &home)
        .env(
            "PATH",
            "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
        )
        .env("TMPDIR", scratch.path())
        .current_dir(root())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let failure = walk_failure(&steps, &stdout, &stderr);

    // The guide ends by deleting what it created; whatever happened, nothing stays.
    let left_behind = remove_guide_objects(&client).await;
    if let Some(failure) = failure {
        panic!(
            "{GUIDE}, typed in a shell: {failure}\n(the walk runs the pallet tools/up.sh built, \
             {}: after changing the code, run tools/up.sh again)\nagent log ({}):\n{}",
            state.join("bin/pallet").display(),
            agent_log.display(),
            tail(&agent_log, 30)
        );
    }
    assert!(
        left_behind.is_empty(),
        "{GUIDE}'s clean-up left {left_behind:?} behind"
    );
}

#[tokio::test]
async fn documented_commands_of_every_other_page_run_and_print_what_the_page_shows() {
    let pages = docs::pages();
    let text: String = pages
        .iter()
        .filter(|(path, _)| !path.ends_with(GUIDE))
        .map(|(_, text)| text.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let fx = support::Fixtures::load();
    let registry = fx.registry_plain();
    let name = cluster::unique_name("demo");
    let substitute = |text: &str| {
        text.replace("localhost:5000", &registry.host)
            .replace("demo", &name)
    };
    let steps = steps(&text);
    let runs = steps.iter().filter(|s| matches!(s, Step::Run(..))).count();
    assert!(runs >= 4, "the pages lost their examples: {runs} commands");

    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    cluster::track_bundle_deployment(&name);
    let scratch = tempfile::tempdir().unwrap();
    let bin = scratch.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_pallet"), bin.join("pallet")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let work = scratch.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    for step in &steps {
        match step {
            Step::File(file, content) => {
                let dest = work.join(substitute(file));
                std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
                std::fs::write(dest, substitute(content)).unwrap();
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
                    "documented command failed: {command}\nstderr: {stderr}\nstdout: {stdout}"
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
}
