//! `mesh`: the command-line tool of the mesh event bus.
//!
//! ```text
//! mesh emit <KEY> [-d JSON | -f FILE | stdin] [-s SOURCE] [--causation ID] [--schema V]
//!                 [-n COUNT] [--rate R]
//! mesh tail [PATTERN…] [-n COUNT] [--metrics-addr ADDR]
//! mesh call <TOOL> [-d JSON] [-t 5s]
//! mesh topology show | plan [--check] | apply [--force] [--dry-run]
//!               [-b M=P…] [-m M -p P…] [-f SPEC]
//! mesh access plan [--check] | apply [--dry-run]   -f SPEC [--passwords F]
//! mesh status
//! mesh audit run [--store URL] [--metrics-addr ADDR]
//! mesh audit query | count [-k PATTERN] [-s SOURCE] [--since T] [--until T] [-n LIMIT]
//! mesh dead list [-q QUEUE] [-r REASON] [--pending] [--since T] [-n LIMIT]
//! mesh dead redrive <ID…> | --all | -q QUEUE   [--dry-run]
//! mesh dead purge [-q QUEUE] [-r REASON] [--redriven] | --all   [--dry-run]
//! mesh logs tail [PATTERN] [-n COUNT]
//! mesh completions bash | zsh | fish | elvish | powershell
//! mesh man [-o DIR]
//! ```
//!
//! Every command takes `--url` (`MESH_URL`, default `amqp://127.0.0.1:5672`, guest/guest;
//! `amqps://…?cacertfile=…` for TLS), `--password-file` (`MESH_PASSWORD_FILE`; or the password
//! itself in `MESH_PASSWORD`), `--node` (`MESH_NODE`, default: the host name up to its first dot), `--json` (one JSON
//! object per line on stdout) and `--color auto|always|never`. `emit`, `tail` and `call`
//! speak AMQP only; `topology`, `access` and the queue part of `status` read RabbitMQ's management
//! HTTP API (`--management-url`, `MESH_MANAGEMENT_URL`, default `http://<host>:15672`).
//!
//! # Short flags
//!
//! One letter means one thing in every command that has the option; the connection options
//! and the flags that destroy or run dry (`--all`, `--force`, `--dry-run`) have none.
//!
//! | short | long | commands |
//! |---|---|---|
//! | `-d` | `--data` | `emit`, `call` |
//! | `-f` | the input file: `--data-file` / `--spec` | `emit` / `topology`, `access` |
//! | `-n` | how many: `--count` / `--limit` | `emit`, `tail`, `logs tail` / `audit query`, `dead list` |
//! | `-s` | `--source` | `emit`, `audit query`, `audit count` |
//! | `-k` | `--key` | `audit query`, `audit count` |
//! | `-t` | `--timeout` | `call` |
//! | `-q` | `--queue` | `dead list`, `dead redrive`, `dead purge` |
//! | `-r` | `--reason` | `dead list`, `dead purge` |
//! | `-m` / `-p` / `-b` | `--module` / `--pattern` / `--bind` | `topology show`, `plan`, `apply` |
//! | `-o` | `--out` | `man` |
//!
//! Durations have one syntax (`500ms`, `5s`, `1m30s`, `2h`, `1day`) in `--timeout`,
//! `--connect-timeout` and the "ago" form of `--since`/`--until`. `--reason` takes the dead
//! reasons of `mesh_core::DeadReason` (`max-attempts`, `permanent`, `undecodable`,
//! `unread-schema`, `delivery-limit`, `rejected`, `expired`, `forged-source`); any other value
//! is a usage error listing them. `--bind M=P` binds module M's queue on pattern P whatever
//! the order of the options; `--pattern` is the only `--module`'s, or, with several, the one's
//! before it.
//!
//! # Exit codes
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (also when the reader of the output went away: a broken pipe) |
//! | 1 | an error without a code of its own |
//! | 2 | usage: bad arguments (also a number or duration outside its bounds, e.g. `--timeout` beyond 24h), an invalid key, pattern or name, data that is not JSON, an emitter that does not own the key |
//! | 3 | the broker is unreachable (connection refused, timed out, unknown host, tls failed) |
//! | 4 | `call`: no server serves the tool |
//! | 5 | `call`: no reply within `--timeout` |
//! | 6 | `call`: the tool answered with an error |
//! | 7 | `emit`: at least one event was not confirmed by the broker |
//! | 8 | the RabbitMQ management API is unreachable (`topology`, `access`, `status`) |
//! | 9 | `topology plan --check`, `access plan --check`: the broker differs from the contract or the access plan |
//! | 10 | forbidden: the broker refused this user the operation (its permissions: a key it may not publish, a queue it may not read, the default exchange) |
//!
//! Errors are printed on one line to stderr with their cause chain
//! (`error: cannot emit `x.y`: invalid key: unknown origin `x`, …`).

#[macro_use]
mod exit;

mod access;
mod audit;
mod call;
mod cli;
mod config;
mod emit;
mod generate;
mod logs;
mod management;
mod metrics;
mod output;
mod status;
mod tail;
mod topology;

use std::process::ExitCode;

use clap::error::ErrorKind as ClapErrorKind;

use crate::cli::{Cli, ColorWhen, Command};
use crate::exit::Code;

fn main() -> ExitCode {
    let cli = match cli::parse() {
        Ok(cli) => cli,
        Err(error) => {
            // --help and --version are not failures.
            let code = match error.kind() {
                ClapErrorKind::DisplayHelp | ClapErrorKind::DisplayVersion => Code::Ok,
                _ => Code::Usage,
            };
            let _ = error.print();
            return code.into();
        }
    };
    let json = cli.global.json;
    match run(&cli) {
        Ok(code) => code.into(),
        Err(error) if exit::is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            let code = exit::classify(&error);
            if json {
                let line = serde_json::json!({
                    "error": format!("{error:#}"), "kind": code.name(), "exit_code": code.value()
                });
                anstream::eprintln!("{line}");
            } else {
                anstream::eprintln!("{} {error:#}", output::paint(output::BAD, "error:"));
            }
            code.into()
        }
    }
}

fn run(cli: &Cli) -> anyhow::Result<Code> {
    match cli.global.color {
        ColorWhen::Auto => {}
        ColorWhen::Always => anstream::ColorChoice::Always.write_global(),
        ColorWhen::Never => anstream::ColorChoice::Never.write_global(),
    }
    let global = &cli.global;
    match &cli.command {
        // Management-only commands need no async runtime, and these two no broker at all.
        Command::Topology(command) => topology::run(global, command),
        Command::Access(command) => access::run(global, command),
        Command::Completions(args) => generate::completions(args),
        Command::Man(args) => generate::man(global, args),
        command => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            let result = runtime.block_on(async {
                match command {
                    Command::Emit(args) => emit::run(global, args).await,
                    Command::Tail(args) => tail::run(global, args).await,
                    Command::Call(args) => call::run(global, args).await,
                    Command::Status(args) => status::run(global, args).await,
                    Command::Audit(command) => audit::run(global, command).await,
                    Command::Dead(command) => audit::run_dead(global, command).await,
                    Command::Logs(command) => logs::run(global, command).await,
                    Command::Topology(command) => topology::run(global, command),
                    Command::Access(command) => access::run(global, command),
                    Command::Completions(args) => generate::completions(args),
                    Command::Man(args) => generate::man(global, args),
                }
            });
            // Not dropped: tearing the runtime down drops the client library's detached
            // channel-close tasks, and amqprs 2.1 panics (an `unwrap` in its dispatcher) when
            // a close-ok arrives for a task that was dropped. Every command has closed its
            // bus by now; what is left dies with the process, which exits next.
            std::mem::forget(runtime);
            result
        }
    }
}
