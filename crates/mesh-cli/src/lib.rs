//! The implementation of the `mesh` and `mesh-audit` binaries. It is not a library to build
//! on (use the `mesh` and `mesh-audit` crates for that): its public items are the two
//! programs' entry points, so both share one definition of every option, the config file's
//! contexts and the audit logger's command. See the `mesh` binary's docs for the command line.

#![warn(missing_docs)]

#[macro_use]
mod exit;

mod access;
mod audit;
mod call;
mod cli;
mod config;
mod console;
mod contract;
mod dead;
mod emit;
mod generate;
mod logs;
mod management;
mod metrics;
mod outbox;
mod output;
mod process;
#[cfg(test)]
mod reference;
mod saga;
mod status;
mod store;
mod tail;
mod topology;

use std::process::ExitCode;

use clap::error::ErrorKind as ClapErrorKind;

use crate::cli::{
    AuditCli, AuditCliCommand, AuditCommand, Cli, ColorWhen, Command, Global, OutboxCommand,
};
use crate::exit::Code;

/// The `mesh` program: parses the command line, runs the command, exits with its code.
pub fn mesh_main() -> ExitCode {
    match cli::parse() {
        Ok(cli) => finish(cli.global.json, run(cli)),
        Err(error) => usage(&error),
    }
}

/// The `mesh-audit` program: `mesh audit run` under its own name, with the same options,
/// context, defaults and exit codes.
pub fn mesh_audit_main() -> ExitCode {
    use clap::Parser as _;
    match AuditCli::try_parse() {
        Ok(cli) => finish(cli.global.json, run_audit(cli)),
        Err(error) => usage(&error),
    }
}

/// The `mesh-audit` command line as the program defines it: every option, its variable and
/// its default, for tools that check a deployment's command lines (and its man page).
pub fn mesh_audit_command() -> clap::Command {
    <AuditCli as clap::CommandFactory>::command()
}

/// What a `mesh-audit` command line comes to, checked by [`check_mesh_audit`].
pub struct CheckedAudit {
    /// The broker URL it connects to (as given: it may hold a user, never checked for more).
    pub url: String,
    /// The store URL it records into (as given).
    pub store: String,
    /// Where it serves `/metrics`, if anywhere.
    pub metrics_addr: Option<std::net::SocketAddr>,
}

impl std::fmt::Debug for CheckedAudit {
    /// The URLs left out: they may carry credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckedAudit")
            .field("metrics_addr", &self.metrics_addr)
            .finish_non_exhaustive()
    }
}

/// Checks a `mesh-audit` command line (`["mesh-audit", "run", …]`) without connecting: parsed
/// as the program parses it (variables from this process's environment, then the config
/// file's context), and every option the logger would run with built and checked, as
/// `mesh-audit run` does before it starts. Errors are the program's own.
pub fn check_mesh_audit<I, T>(args: I) -> anyhow::Result<CheckedAudit>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::Parser as _;
    let mut cli = AuditCli::try_parse_from(args)?;
    config::apply_context(&mut cli.global)?;
    let AuditCliCommand::Run(run) = &cli.command;
    let plan = audit::plan_logger(&cli.global, run)?;
    Ok(CheckedAudit {
        url: plan.url,
        store: plan.store_url,
        metrics_addr: run.metrics.metrics_addr,
    })
}

/// A command line clap refused (or `--help`, `--version`, which are not failures). Under
/// `--json` (anywhere on the line) a refusal is one JSON object on stderr, as every other
/// failure is; help and version are printed as they are.
fn usage(error: &clap::Error) -> ExitCode {
    let code = match error.kind() {
        ClapErrorKind::DisplayHelp | ClapErrorKind::DisplayVersion => Code::Ok,
        _ => Code::Usage,
    };
    if code == Code::Usage && asks_for_json(std::env::args_os().skip(1)) {
        let (message, hint) = cli::usage_error_parts(error);
        print_json_error(&message, code, hint.as_deref());
    } else {
        let _ = error.print();
    }
    code.into()
}

/// Whether `--json` is one of the arguments (before a `--` that ends the options): what
/// clap could not parse may be anything else.
fn asks_for_json(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    args.take_while(|arg| arg != "--")
        .any(|arg| arg == "--json")
}

/// A failure under `--json`: one object on stderr, its message, its code's name and value,
/// and what to do when known.
fn print_json_error(message: &str, code: Code, hint: Option<&str>) {
    let mut line = serde_json::json!({
        "error": message, "kind": code.name(), "exit_code": code.value()
    });
    if let Some(hint) = hint {
        line["hint"] = serde_json::json!(hint);
    }
    output::json_note(&line);
}

/// The exit code of a finished command; a failure is printed on stderr first (one line, its
/// causes after colons, then a `hint:` line when the error says what to do).
fn finish(json: bool, result: anyhow::Result<Code>) -> ExitCode {
    match result {
        Ok(code) => code.into(),
        Err(error) if exit::is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            let code = exit::classify(&error);
            let hint = exit::hint(&error);
            if json {
                print_json_error(&format!("{error:#}"), code, hint.as_deref());
            } else {
                // An error may quote the broker or a peer: the note escapes it like any output.
                output::note(format_args!(
                    "{} {error:#}",
                    output::paint(output::BAD, "error:")
                ));
                if let Some(hint) = hint {
                    output::note(format_args!(
                        "{} {hint}",
                        output::paint(output::WARN, "hint:")
                    ));
                }
            }
            code.into()
        }
    }
}

/// Applies `--color`.
fn paint_as_asked(global: &Global) {
    match global.color {
        ColorWhen::Auto => {}
        ColorWhen::Always => anstream::ColorChoice::Always.write_global(),
        ColorWhen::Never => anstream::ColorChoice::Never.write_global(),
    }
}

/// Applies `--color` and installs the logs (`RUST_LOG`, `--log-format`, `--color`): first
/// thing, so that every command's records are logged as asked.
fn prepare(global: &Global, logs: process::Logs) -> anyhow::Result<()> {
    paint_as_asked(global);
    process::install_logging(global, logs)
}

/// What `command` logs unless `RUST_LOG` says otherwise: the commands that run as services
/// log at `info`.
fn logs_of(command: &Command) -> process::Logs {
    match command {
        Command::Audit(AuditCommand::Run(_))
        | Command::Console(_)
        | Command::Outbox(OutboxCommand::Relay(_)) => process::Logs::Service,
        _ => process::Logs::Quiet,
    }
}

fn run_audit(mut cli: AuditCli) -> anyhow::Result<Code> {
    prepare(&cli.global, process::Logs::Service)?;
    config::apply_context(&mut cli.global)?;
    process::block_on(async {
        match &cli.command {
            AuditCliCommand::Run(args) => audit::run_logger(&cli.global, args).await,
        }
    })
}

fn run(mut cli: Cli) -> anyhow::Result<Code> {
    prepare(&cli.global, logs_of(&cli.command))?;
    // These two need no broker and no config file: a broken file must not stop them.
    match &cli.command {
        Command::Completions(args) => return generate::completions(args),
        Command::Man(args) => return generate::man(&cli.global, args),
        _ => {}
    }
    config::apply_context(&mut cli.global)?;
    let global = &cli.global;
    match &cli.command {
        // Management-only commands need no async runtime.
        Command::Topology(command) => topology::run(global, command),
        Command::Access(command) => access::run(global, command),
        Command::Completions(args) => generate::completions(args),
        Command::Man(args) => generate::man(global, args),
        command => process::block_on(async {
            match command {
                Command::Emit(args) => emit::run(global, args).await,
                Command::Tail(args) => tail::run(global, args).await,
                Command::Call(args) => call::run(global, args).await,
                Command::Status(args) => status::run(global, args).await,
                Command::Audit(command) => audit::run(global, command).await,
                Command::Dead(command) => dead::run(global, command).await,
                Command::Logs(command) => logs::run(global, command).await,
                Command::Contract(command) => contract::run(global, command).await,
                Command::Outbox(command) => outbox::run(global, command).await,
                Command::Saga(command) => saga::run(global, command).await,
                Command::Console(args) => console::run(global, args).await,
                Command::Topology(command) => topology::run(global, command),
                Command::Access(command) => access::run(global, command),
                Command::Completions(args) => generate::completions(args),
                Command::Man(args) => generate::man(global, args),
            }
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::finish;
    use crate::output::capture::capture;
    use crate::output::hostile::{all, assert_json_safe, assert_text_safe};

    /// An error may quote the broker or a peer (a remote error, a refused name): it reaches
    /// stderr escaped, as text and as JSON.
    #[test]
    fn errors_quoting_hostile_text_are_escaped() {
        let quoted = all();
        let error = || anyhow::anyhow!("the peer said {quoted}").context("calling `x`");
        let (_, out) = capture(|| finish(false, Err(error())));
        assert_eq!(out.stderr.lines().count(), 1, "{:?}", out.stderr);
        assert_text_safe(&out.stderr, &[&quoted]);
        let (_, out) = capture(|| finish(true, Err(error())));
        assert_json_safe(
            &out.stderr,
            &[&format!("calling `x`: the peer said {quoted}")],
        );
    }
}
