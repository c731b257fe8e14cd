//! `mesh completions` and `mesh man`: shell completion scripts and man pages, generated from
//! the command line's own definition (so they never disagree with `--help`).

use std::path::Path;

use anyhow::Context as _;
use clap::CommandFactory as _;
use serde_json::json;

use crate::cli::{Cli, CompletionsArgs, Global, ManArgs};
use crate::exit::Code;
use crate::output;

/// The name the scripts and pages are written for.
const BIN: &str = "mesh";

/// `mesh completions <shell>`: the script on stdout.
pub(crate) fn completions(args: &CompletionsArgs) -> anyhow::Result<Code> {
    // Into memory first: the generator panics when its writer fails, and a closed pipe must
    // be an error (a success, for `main`), never a panic.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), BIN, &mut script);
    output::raw(&script)?;
    Ok(Code::Ok)
}

/// `mesh man`: the page of `mesh` on stdout, or every page into `--out`.
pub(crate) fn man(global: &Global, args: &ManArgs) -> anyhow::Result<Code> {
    // Built: each subcommand then carries the global options and its full name (its display
    // name `mesh-dead-redrive` names the file, its bin name `mesh dead redrive` the SYNOPSIS).
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    let Some(dir) = &args.out else {
        output::raw(&render(&command)?)?;
        return Ok(Code::Ok);
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    write_pages(&command, dir, &mut written)?;
    if global.json {
        output::json(&json!({ "dir": dir.display().to_string(), "pages": written }))?;
    } else {
        for name in &written {
            output::line(dir.join(name).display())?;
        }
    }
    Ok(Code::Ok)
}

/// Writes the page of `command`, then, depth first, those of its visible subcommands,
/// appending the file names (`mesh.1`, `mesh-emit.1`, …) to `written`.
fn write_pages(
    command: &clap::Command,
    dir: &Path,
    written: &mut Vec<String>,
) -> anyhow::Result<()> {
    let file = clap_mangen::Man::new(command.clone()).get_filename();
    let path = dir.join(&file);
    std::fs::write(&path, render(command)?)
        .with_context(|| format!("writing {}", path.display()))?;
    written.push(file);
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir, written)?;
    }
    Ok(())
}

/// The page of `command` in roff, ASCII only: every other character as the escape
/// `\[uXXXX]`, so any troff reads it whatever its input encoding (the help text has `…`).
fn render(command: &clap::Command) -> anyhow::Result<Vec<u8>> {
    let mut page = Vec::new();
    clap_mangen::Man::new(command.clone())
        .render(&mut page)
        .with_context(|| format!("rendering the man page of {}", command.get_name()))?;
    Ok(ascii_roff(&String::from_utf8_lossy(&page)).into_bytes())
}

fn ascii_roff(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            out.push_str(&format!("\\[u{:04X}]", u32::from(c)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_ascii_with_unicode_escapes() {
        assert_eq!(ascii_roff("a … b ◀"), "a \\[u2026] b \\[u25C0]");
        assert_eq!(ascii_roff("\u{1F600}"), "\\[u1F600]");
        let mut command = Cli::command().disable_help_subcommand(true);
        command.build();
        let page = String::from_utf8(render(&command).unwrap()).unwrap();
        assert!(page.is_ascii());
        assert!(page.contains(".TH mesh 1"), "{page}");
    }
}
