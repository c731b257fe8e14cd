//! The command reference in Markdown, `docs/CLI.md`: generated from the command line's own
//! definition, as the man pages are, so it never disagrees with `--help`. Its test fails when
//! the file in the repository is not what the definition gives (so the module is compiled for
//! tests only: the test is its one user).

use clap::CommandFactory as _;

use crate::cli::Cli;

/// The width the help texts are wrapped to, whatever the terminal.
const WIDTH: usize = 100;

/// How to write the file again.
const REGENERATE: &str = "MESH_WRITE_CLI_DOC=1 cargo test -p meshbus-cli --lib reference";

/// The whole reference: a list of the commands, then each one's long help.
pub(crate) fn markdown() -> String {
    let mut command = without_env_values(Cli::command())
        .disable_help_subcommand(true)
        .term_width(WIDTH);
    command.build();
    let mut commands = Vec::new();
    visible(&command, &mut commands);

    let mut out = String::from("# The `mesh` command\n\n");
    out.push_str(&format!(
        "<!-- Generated from the command line's definition (crates/mesh-cli/src/cli/); do not \
         edit. To write it again: {REGENERATE} -->\n\n"
    ));
    out.push_str(
        "Every command and subcommand with its `--help`; the global options, which every \
         command takes, are listed once, under `mesh`. `mesh man` writes the same as man \
         pages, and `mesh completions <shell>` a completion script.\n\n",
    );
    for sub in &commands {
        let name = full_name(sub);
        out.push_str(&format!("- [`{name}`](#{})\n", name.replace(' ', "-")));
    }
    for (i, sub) in commands.iter().enumerate() {
        // The global options once, under `mesh`; every other command lists its own.
        let mut sub = sub.clone().term_width(WIDTH);
        if i > 0 {
            sub = sub.mut_args(|arg| {
                if arg.is_global_set() {
                    arg.hide(true)
                } else {
                    arg
                }
            });
        }
        let help = sub.render_long_help().to_string();
        let help: Vec<&str> = help.lines().map(str::trim_end).collect();
        out.push_str(&format!(
            "\n## {}\n\n```text\n{}\n```\n",
            full_name(&sub),
            help.join("\n").trim_end()
        ));
    }
    out
}

/// `command` and, depth first, its visible subcommands.
fn visible(command: &clap::Command, found: &mut Vec<clap::Command>) {
    found.push(command.clone());
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        visible(sub, found);
    }
}

/// `mesh audit run`: the name a built command is called by.
fn full_name(command: &clap::Command) -> String {
    command
        .get_bin_name()
        .unwrap_or(command.get_name())
        .to_owned()
}

/// The environment's values stay out of the reference (a `MESH_URL` set where it is
/// generated would show, password and all); the variables' names stay.
fn without_env_values(command: clap::Command) -> clap::Command {
    command
        .mut_args(|arg| arg.hide_env_values(true))
        .mut_subcommands(without_env_values)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn the_reference_in_docs_is_the_command_lines() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/CLI.md");
        let want = markdown();
        if std::env::var_os("MESH_WRITE_CLI_DOC").is_some() {
            std::fs::write(&path, &want).expect("docs/CLI.md written");
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/CLI.md is not the reference the command line's definition gives; write it \
             again with `{REGENERATE}`"
        );
    }

    #[test]
    fn the_reference_has_every_visible_command_and_no_environment_value() {
        let text = markdown();
        for name in ["## mesh\n", "## mesh audit run\n", "## mesh dead redrive\n"] {
            assert!(text.contains(name), "{name:?} missing");
        }
        assert!(
            text.contains("[env: MESH_URL"),
            "the variable's name is shown"
        );
        assert!(!text.contains("[env: MESH_URL="), "no value is shown");
    }
}
