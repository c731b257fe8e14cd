//! `mesh-audit`: the audit logger and dead-letter store as a process.
//!
//! `mesh-audit run --metrics-addr 127.0.0.1:9464` also serves `/metrics` (the
//! `mesh_audit_*` metrics), `/livez` and `/readyz`, and prints
//! `metrics on http://ADDR/metrics (also /livez and /readyz)` on stderr once it listens (see
//! [`mesh_audit::cli`]).
//!
//! Exit codes: 0 after a graceful shutdown (SIGTERM, Ctrl-C), 1 on an error, 2 on a usage
//! error: an unknown option, a number outside its bounds (`--batch-size` 1 to 100000,
//! `--batch-wait-ms` 0 to 3600000, `--prefetch` 1 to 65535), an invalid URL, node name or
//! store, an unreadable password file.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "mesh-audit",
    version,
    about = "The mesh audit logger and dead-letter store"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Consume every event and dead letter into the store until SIGTERM or Ctrl-C.
    Run(mesh_audit::cli::RunArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mesh-audit: {e:#}");
            if e.downcast_ref::<mesh_audit::cli::UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new()?;
    match cli.command {
        Command::Run(args) => runtime.block_on(args.run())?,
    }
    Ok(ExitCode::SUCCESS)
}
