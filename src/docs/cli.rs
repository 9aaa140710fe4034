//! `docs/reference/cli.md` and `docs/reference/agent-flags.md` from the argument parser, and
//! the man pages (`pallet docs man DIR`).

use clap::{Arg, ArgAction, Command};

use super::markdown::{anchor, code, generated_note, table};

/// The command whose flags have a page of their own.
const AGENT: &str = "agent";

/// The parser `cli`, built (bin names and usage filled in). The CLI hands its parser in: the
/// pages describe it, and the CLI's `docs` command writes them.
fn built(cli: &Command) -> Command {
    let mut command = cli.clone();
    command.build();
    command
}

fn visible_subcommands(command: &Command) -> impl Iterator<Item = &Command> {
    command
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
}

fn text(styled: Option<&clap::builder::StyledStr>) -> String {
    styled.map(|s| s.to_string()).unwrap_or_default()
}

/// What a command does: its long help when it has one.
fn about(command: &Command) -> String {
    let long = text(command.get_long_about());
    if long.is_empty() {
        text(command.get_about())
    } else {
        long
    }
}

fn arg_help(arg: &Arg) -> String {
    let long = text(arg.get_long_help());
    if long.is_empty() {
        text(arg.get_help())
    } else {
        long
    }
}

/// How the argument is written: `--name <VALUE>`, `-o, --output <OUTPUT>`, `<NAME>`.
fn arg_syntax(arg: &Arg) -> String {
    let value = arg
        .get_value_names()
        .map(|names| {
            names
                .iter()
                .map(|n| format!("<{n}>"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| format!("<{}>", arg.get_id().as_str().to_uppercase()));
    if arg.is_positional() {
        return value;
    }
    let mut names = Vec::new();
    if let Some(short) = arg.get_short() {
        names.push(format!("-{short}"));
    }
    if let Some(long) = arg.get_long() {
        names.push(format!("--{long}"));
    }
    let takes_value = !matches!(
        arg.get_action(),
        ArgAction::SetTrue | ArgAction::SetFalse | ArgAction::Count
    );
    if takes_value {
        format!("{} {value}", names.join(", "))
    } else {
        names.join(", ")
    }
}

/// One row per visible argument: syntax, default, description (with the environment variable,
/// the accepted values and whether it repeats).
fn arg_rows(command: &Command) -> Vec<Vec<String>> {
    command
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .map(|arg| {
            // clap drops the full stop of a one-sentence help; what follows needs it back.
            let mut description = arg_help(arg).trim().to_string();
            if !description.is_empty() && !description.ends_with('.') {
                description.push('.');
            }
            let values: Vec<String> = arg
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| match v.get_help() {
                    Some(help) => format!("{} ({help})", code(v.get_name())),
                    None => code(v.get_name()),
                })
                .collect();
            // A boolean flag's possible values are `true` and `false`: nothing to say.
            let boolean = matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse);
            if !values.is_empty() && !boolean {
                description.push_str(&format!(" One of: {}.", values.join(", ")));
            }
            let says_it = description.to_lowercase().contains("repeatable");
            if matches!(arg.get_action(), ArgAction::Append) && !says_it {
                description.push_str(" Repeatable.");
            }
            if let Some(env) = arg.get_env() {
                description.push_str(&format!(" Environment: {}.", code(&env.to_string_lossy())));
            }
            if arg.is_required_set() {
                description.push_str(" Required.");
            }
            let default: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            let default = if boolean || default.is_empty() {
                String::new()
            } else {
                code(&default.join(","))
            };
            vec![
                code(&arg_syntax(arg)),
                default,
                description.trim().to_string(),
            ]
        })
        .collect()
}

fn usage(command: &mut Command) -> String {
    let usage = command.render_usage().to_string();
    usage.strip_prefix("Usage: ").unwrap_or(&usage).to_string()
}

fn command_section(out: &mut String, command: &Command, path: &str, level: usize) {
    let heading = format!("{} `{path}`", "#".repeat(level));
    out.push_str(&format!("{heading}\n\n{}\n\n", about(command)));
    let mut owned = command.clone();
    out.push_str(&format!("```text\n{}\n```\n\n", usage(&mut owned)));
    if command.get_name() == AGENT {
        out.push_str("Its flags are listed in [Agent flags](agent-flags.md).\n\n");
    } else {
        let rows = arg_rows(command);
        if !rows.is_empty() {
            out.push_str(&table(&["Argument", "Default", "Description"], &rows));
            out.push('\n');
        }
    }
    for sub in visible_subcommands(command) {
        command_section(out, sub, &format!("{path} {}", sub.get_name()), level + 1);
    }
}

/// The CLI reference page.
pub fn cli_page(cli: &Command) -> String {
    let command = built(cli);
    let mut out = String::from("# Command line\n\n");
    out.push_str(&generated_note("the argument parser"));
    out.push_str(&format!("\n{}\n\n", about(&command)));
    out.push_str(
        "The binary also works as the kubectl plugin `kubectl pallet` (through a link named \
         `kubectl-pallet` on the `PATH`). Man pages are generated with \
         `pallet docs man DIR`.\n\n",
    );
    let rows: Vec<Vec<String>> = visible_subcommands(&command)
        .map(|sub| {
            let path = format!("pallet {}", sub.get_name());
            let heading = format!("`{path}`");
            vec![
                format!("[{}](#{})", code(&path), anchor(&heading)),
                text(sub.get_about()),
            ]
        })
        .collect();
    out.push_str(&table(&["Command", "What it does"], &rows));
    out.push('\n');
    for sub in visible_subcommands(&command) {
        command_section(&mut out, sub, &format!("pallet {}", sub.get_name()), 2);
    }
    out
}

/// The agent flags page.
pub fn agent_page(cli: &Command) -> anyhow::Result<String> {
    let command = built(cli);
    let agent = command
        .find_subcommand(AGENT)
        .ok_or_else(|| anyhow::anyhow!("no `{AGENT}` subcommand"))?;
    let mut out = String::from("# Agent flags\n\n");
    out.push_str(&generated_note("the argument parser"));
    out.push_str(&format!(
        "\n{}\n\nDurations are Go durations (`90s`, `10m`, `1h30m`).\n\n",
        about(agent)
    ));
    let mut owned = agent.clone();
    out.push_str(&format!("```text\n{}\n```\n\n", usage(&mut owned)));
    out.push_str(&table(
        &["Flag", "Default", "Description"],
        &arg_rows(agent),
    ));
    Ok(out)
}

/// Writes a man page for `pallet` and each visible subcommand into `dir`.
pub fn write_man_pages(dir: &std::path::Path, cli: Command) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    clap_mangen::generate_to(cli, dir)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    fn command() -> Command {
        built(&crate::cli::Cli::command())
    }

    #[test]
    fn every_visible_command_and_flag_is_on_a_page() {
        let cli = cli_page(&command());
        let agent = agent_page(&command()).unwrap();
        let command = command();
        for sub in visible_subcommands(&command) {
            assert!(
                cli.contains(&format!("## `pallet {}`", sub.get_name())),
                "{} missing",
                sub.get_name()
            );
            let page = if sub.get_name() == AGENT {
                &agent
            } else {
                &cli
            };
            for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
                if let Some(long) = arg.get_long().filter(|l| *l != "help") {
                    assert!(
                        page.contains(&format!("--{long}")),
                        "{} --{long} missing",
                        sub.get_name()
                    );
                }
            }
        }
        assert!(!cli.contains("render-sandbox"), "hidden commands stay out");
        assert!(agent.contains("| `--notification-concurrency <NOTIFICATION_CONCURRENCY>` | `8` |"));
    }

    #[test]
    fn man_pages_are_written_for_each_command() {
        let dir = tempfile::tempdir().unwrap();
        write_man_pages(dir.path(), crate::cli::Cli::command()).unwrap();
        let agent = std::fs::read_to_string(dir.path().join("pallet-agent.1")).unwrap();
        assert!(agent.contains("notification\\-concurrency"), "{agent}");
        assert!(dir.path().join("pallet.1").exists());
        assert!(!dir.path().join("pallet-render-sandbox.1").exists());
    }
}
