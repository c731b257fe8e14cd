//! `mesh`: the command-line tool of the mesh event bus.
//!
//! ```text
//! mesh emit <KEY> [--data JSON | --data-file F | stdin] [--source S] [--causation ID]
//!                 [--schema V] [--count N] [--rate R]
//! mesh tail [PATTERN…] [--count N] [--metrics-addr ADDR]
//! mesh audit run [--store URL] [--metrics-addr ADDR]
//! mesh logs tail [PATTERN] [--count N]
//! mesh call <TOOL> [--data JSON] [--timeout 5s]
//! mesh topology show | plan [--check] | apply [--force]   [--module M --pattern P…] [--spec F]
//! mesh access plan [--check] | apply   --spec F [--passwords F]
//! mesh status
//! ```
//!
//! Every command takes `--url` (`MESH_URL`, default `amqp://127.0.0.1:5672`, guest/guest;
//! `amqps://…?cacertfile=…` for TLS), `--password-file` (`MESH_PASSWORD_FILE`; or the password
//! itself in `MESH_PASSWORD`), `--node` (`MESH_NODE`, default: the host name up to its first dot), `--json` (one JSON
//! object per line on stdout) and `--color auto|always|never`. `emit`, `tail` and `call`
//! speak AMQP only; `topology`, `access` and the queue part of `status` read RabbitMQ's management
//! HTTP API (`--management-url`, `MESH_MANAGEMENT_URL`, default `http://<host>:15672`).
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
mod logs;
mod management;
mod metrics;
mod output;
mod status;
mod tail;
mod topology;

use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind as ClapErrorKind;

use crate::cli::{Cli, ColorWhen, Command};
use crate::exit::Code;

/// How long the exit waits for the runtime's blocking tasks.
const RUNTIME_SHUTDOWN: Duration = Duration::from_secs(1);

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
        // Management-only commands need no async runtime.
        Command::Topology(command) => topology::run(global, command),
        Command::Access(command) => access::run(global, command),
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
                }
            });
            // Every command has closed what it opened by now, and a transport's close
            // returns only once the broker acknowledged every channel close it made (the
            // client library panics when an acknowledgement arrives for a close whose task
            // the runtime dropped; see mesh-amqp's `Shared::channel_tasks`), so tearing the
            // runtime down drops only idle tasks. Bounded, so that a blocking task still
            // running (a name lookup of an unreachable host) cannot hold the exit.
            runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
            result
        }
    }
}
