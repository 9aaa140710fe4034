//! Shell completion that asks the binary: the script `pallet completion SHELL` prints calls
//! `COMPLETE=SHELL pallet -- WORDS…` for every completion, so commands and flags are always
//! those of the installed binary, and BundleDeployment names come from the cluster (the
//! `--kubeconfig` and `--context` already typed on the line are honoured).

use std::ffi::OsStr;
use std::time::Duration;

use clap_complete::engine::CompletionCandidate;
use clap_complete::env::Shells;
use kube::api::{Api, ListParams};

use crate::api::BundleDeployment;

/// The shells completion supports.
pub type CompletionShell = clap_complete::Shell;

/// The environment variable that switches the binary into completion mode.
const COMPLETE_VAR: &str = "COMPLETE";

/// How long a completion may wait for the cluster: a shell waiting longer feels hung.
const LIST_TIMEOUT: Duration = Duration::from_secs(3);

/// Answers a completion request when the process was started for one (`COMPLETE` is set), and
/// exits; returns otherwise.
pub fn complete_from_env() {
    let argv0 = std::env::args_os().next();
    clap_complete::CompleteEnv::with_factory(move || super::command_for(argv0.as_deref()))
        .var(COMPLETE_VAR)
        .complete();
}

/// Prints the script that registers completion for `shell`.
pub fn print_registration(shell: CompletionShell) -> anyhow::Result<()> {
    let argv0 = std::env::args_os().next();
    let command = super::command_for(argv0.as_deref());
    let name = command.get_name().to_string();
    // Run as the kubectl plugin, the program the shell completes and runs is `kubectl-pallet`.
    let bin = match command.get_bin_name() {
        Some(bin) if !bin.contains(' ') => bin.to_string(),
        _ => name.clone(),
    };
    let shell_name = shell.to_string();
    let shells = Shells::builtins();
    let completer_for = shells
        .completer(&shell_name)
        .ok_or_else(|| anyhow::anyhow!("no completion for shell {shell_name}"))?;
    let mut script = Vec::new();
    completer_for.write_registration(COMPLETE_VAR, &name, &bin, &bin, &mut script)?;
    super::write_stdout(&String::from_utf8_lossy(&script))
}

/// The value following `flag` (`--flag value` or `--flag=value`) on the line being completed.
fn flag_value(words: &[String], flag: &str) -> Option<String> {
    let prefix = format!("{flag}=");
    words.iter().enumerate().find_map(|(i, word)| {
        if word == flag {
            words.get(i + 1).cloned()
        } else {
            word.strip_prefix(&prefix).map(str::to_string)
        }
    })
}

/// BundleDeployment names starting with `current`, from the cluster the command line names.
/// Nothing when the cluster cannot be reached in time: completion never prints errors.
pub fn bundle_deployment_names(current: &OsStr) -> Vec<CompletionCandidate> {
    let prefix = current.to_string_lossy().into_owned();
    let words: Vec<String> = std::env::args().collect();
    let kubeconfig = flag_value(&words, "--kubeconfig").map(std::path::PathBuf::from);
    let context = flag_value(&words, "--context");
    let names = super::block_on(async move {
        let config = super::kube_config(kubeconfig.as_deref(), context.as_deref()).await?;
        let client = kube::Client::try_from(config)?;
        let api: Api<BundleDeployment> = Api::all(client);
        let list =
            tokio::time::timeout(LIST_TIMEOUT, api.list_metadata(&ListParams::default())).await??;
        Ok(list
            .items
            .into_iter()
            .filter_map(|bd| bd.metadata.name)
            .collect::<Vec<_>>())
    })
    .unwrap_or_default();
    names
        .into_iter()
        .filter(|name| name.starts_with(&prefix))
        .map(CompletionCandidate::new)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_typed_on_the_line_are_found_in_both_spellings() {
        let words: Vec<String> = [
            "pallet",
            "--",
            "pallet",
            "status",
            "--context",
            "prod",
            "--kubeconfig=/k",
            "we",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(flag_value(&words, "--context").as_deref(), Some("prod"));
        assert_eq!(flag_value(&words, "--kubeconfig").as_deref(), Some("/k"));
        assert_eq!(flag_value(&words, "--namespace"), None);
    }
}
