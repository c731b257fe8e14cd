//! `mesh completions` and `mesh man`.

use std::path::PathBuf;

use clap::Args;

/// `mesh completions`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell the script is for
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

pub(super) const COMPLETIONS_HELP: &str = "\
Prints the script on stdout; it completes commands, options and their fixed values.

Examples:
  source <(mesh completions bash)                       # bash, this shell only
  mesh completions bash > ~/.local/share/bash-completion/completions/mesh
  mesh completions zsh > ~/.zfunc/_mesh                 # with fpath+=(~/.zfunc) in .zshrc
  mesh completions fish > ~/.config/fish/completions/mesh.fish";

/// `mesh man`.
#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// Write every page into DIR (created if missing) instead of printing mesh.1 on stdout
    #[arg(short, long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
}

pub(super) const MAN_HELP: &str = "\
Without --out, prints the page of mesh itself (roff) on stdout. With --out DIR, writes mesh.1
and one page per command and subcommand (mesh-emit.1, mesh-dead-redrive.1, …) and lists them.

Examples:
  mesh man | man -l -
  mesh man --out /usr/local/share/man/man1 && mandb";
