//! `pallet --help` lists the commands by task instead of in one long list.

/// The help groups, in the order shown, and the commands of each in their order.
pub const GROUPS: &[(&str, &[&str])] = &[
    (
        "Install and check",
        &["install", "uninstall", "check", "version", "crd"],
    ),
    (
        "Day to day",
        &[
            "get", "sets", "status", "tree", "events", "diff", "history", "trace", "ui",
        ],
    ),
    (
        "Change a BundleDeployment",
        &["pause", "resume", "rollback", "retry", "reconcile", "test"],
    ),
    ("Author and review", &["plan", "render", "fetch", "push"]),
    ("Run", &["agent", "completion"]),
];

/// `command` with a help text listing its subcommands by group. A subcommand missing from
/// [`GROUPS`] is listed under "Other commands", so none is ever hidden by mistake.
pub fn grouped(command: clap::Command) -> clap::Command {
    let visible: Vec<(String, String)> = command
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| {
            let about = c.get_about().map(|a| a.to_string()).unwrap_or_default();
            (c.get_name().to_string(), about)
        })
        .collect();
    let width = visible
        .iter()
        .map(|(name, _)| name.len())
        .max()
        .unwrap_or(0);
    let line = |name: &str| -> Option<String> {
        visible
            .iter()
            .find(|(n, _)| n == name)
            .map(|(n, about)| format!("  {n:<width$}  {about}\n"))
    };
    let mut text = String::new();
    for (title, names) in GROUPS {
        text.push_str(&format!("{title}:\n"));
        for name in *names {
            text.push_str(&line(name).unwrap_or_default());
        }
        text.push('\n');
    }
    let listed: Vec<&str> = GROUPS
        .iter()
        .flat_map(|(_, names)| names.iter())
        .copied()
        .collect();
    let others: Vec<String> = visible
        .iter()
        .filter(|(name, _)| !listed.contains(&name.as_str()) && name != "help")
        .filter_map(|(name, _)| line(name))
        .collect();
    if !others.is_empty() {
        text.push_str("Other commands:\n");
        text.extend(others);
        text.push('\n');
    }
    let template = format!(
        "{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{text}Options:\n{{options}}{{after-help}}"
    );
    command.help_template(template).after_help(
        "Exit status: 0 done, 1 failed, 2 usage, 3 not found, 4 timed out, 5 differences found (diff).\n\
         `pallet help COMMAND` or `pallet COMMAND --help` shows a command's flags.",
    )
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    #[test]
    fn every_visible_command_is_in_exactly_one_group() {
        let command = crate::cli::Cli::command();
        let mut listed: Vec<&str> = GROUPS.iter().flat_map(|(_, n)| n.iter()).copied().collect();
        let count = listed.len();
        listed.sort_unstable();
        listed.dedup();
        assert_eq!(listed.len(), count, "a command is in two groups");
        for sub in command.get_subcommands().filter(|c| !c.is_hide_set()) {
            assert!(
                listed.contains(&sub.get_name()),
                "{} is in no help group",
                sub.get_name()
            );
        }
        for name in listed {
            assert!(
                command.find_subcommand(name).is_some(),
                "group lists unknown command {name}"
            );
        }
    }

    #[test]
    fn the_help_shows_the_groups_in_order() {
        let mut command = grouped(crate::cli::Cli::command());
        let help = command.render_help().to_string();
        let positions: Vec<usize> = GROUPS
            .iter()
            .map(|(title, _)| help.find(&format!("{title}:")).unwrap_or(usize::MAX))
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{help}");
        assert!(help.contains("  install "), "{help}");
        assert!(help.contains("Exit status:"), "{help}");
        assert!(!help.contains("render-sandbox"), "{help}");
    }
}
