//! The process around a command: the tokio runtime it runs on and how that runtime is torn
//! down, the log subscriber of every command, and the signals that stop
//! the commands that run until stopped (`audit run`, `console`, `outbox relay`, `tail`,
//! `logs tail`).
//!
//! Every such command registers its [`Signals`] before it starts what a signal must stop
//! cleanly, so a SIGTERM from then on is never missed (its default action would kill the
//! process mid-batch, mid-round or with a queue still bound).

use std::future::Future;
use std::time::Duration;

use std::error::Error as _;

use anyhow::Context as _;
use mesh::service::{LogColor, LogFormat, ServiceOptions};
use tokio_util::sync::CancellationToken;

use crate::cli::{ColorWhen, Global, LogFormatArg};
use crate::exit::{fail, Code};

/// How long the exit waits for the runtime's blocking tasks.
const RUNTIME_SHUTDOWN: Duration = Duration::from_secs(1);

/// Runs a command that speaks AMQP on a multi-thread runtime of its own, then tears the
/// runtime down.
///
/// Every command has closed what it opened by now, and a transport's close returns only once
/// the broker acknowledged every channel close it made (the client library panics when an
/// acknowledgement arrives for a close whose task the runtime dropped; see mesh-amqp's
/// `Shared::channel_tasks`), so tearing the runtime down drops only idle tasks. Bounded, so
/// that a blocking task still running (a name lookup of an unreachable host) cannot hold the
/// exit.
pub(crate) fn block_on(
    command: impl Future<Output = anyhow::Result<Code>>,
) -> anyhow::Result<Code> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let result = runtime.block_on(command);
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    result
}

/// What a command logs unless `RUST_LOG` says otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Logs {
    /// A command that runs as a service (`audit run`, `mesh-audit run`, `console`, `outbox
    /// relay`): `info`.
    Service,
    /// Any other: nothing.
    Quiet,
}

/// Installs the process's log subscriber, for every command (mesh's one set-up, the service
/// skeleton's): to stderr, filtered by `RUST_LOG` (else `info` for a service, nothing for
/// the others), as `--log-format` says, coloured as `--color` says (`auto`: only when stderr
/// is a terminal and `NO_COLOR` is unset, so a file or journald never gets escape codes).
///
/// A `RUST_LOG` that is not a filter is a usage error.
pub(crate) fn install_logging(global: &Global, logs: Logs) -> anyhow::Result<()> {
    let asked = std::env::var("RUST_LOG")
        .ok()
        .filter(|f| !f.trim().is_empty());
    let filter = match (&asked, logs) {
        (Some(asked), _) => asked.as_str(),
        (None, Logs::Service) => "info",
        (None, Logs::Quiet) => "off",
    };
    let format = match global.log_format {
        LogFormatArg::Text => LogFormat::Text,
        LogFormatArg::Json => LogFormat::Json,
    };
    let color = match global.color {
        ColorWhen::Auto => LogColor::Auto,
        ColorWhen::Always => LogColor::Always,
        ColorWhen::Never => LogColor::Never,
    };
    let options = ServiceOptions::new()
        .log_format(format)
        .log_color(color)
        .log_filter(filter)
        .map_err(|e| {
            fail(
                Code::Usage,
                format!(
                    "RUST_LOG `{}` is not a log filter: {}",
                    filter.escape_debug(),
                    e.source().map(ToString::to_string).unwrap_or_default()
                ),
            )
        })?;
    // Fails only when one is installed already: the first stays.
    let _ = options.install_logs();
    Ok(())
}

/// The signal that asked the process to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// SIGTERM (a service manager, `kill`).
    Terminate,
    /// SIGINT (Ctrl-C).
    Interrupt,
}

/// The stopping signals, listened for from [`Signals::register`] on: one that arrives before
/// [`Signals::recv`] is awaited is kept for it.
#[cfg(unix)]
pub(crate) struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    /// Listens for SIGTERM and SIGINT from now on.
    pub(crate) fn register() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("listening for SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("listening for SIGINT")?,
        })
    }

    /// Waits for SIGTERM or SIGINT.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a signal that arrives while it is not awaited is kept for the next call.
    pub(crate) async fn recv(&mut self) -> Stop {
        tokio::select! {
            _ = self.term.recv() => Stop::Terminate,
            _ = self.int.recv() => Stop::Interrupt,
        }
    }
}

/// The stopping signal: Ctrl-C only.
#[cfg(not(unix))]
pub(crate) struct Signals;

#[cfg(not(unix))]
impl Signals {
    /// Listens for Ctrl-C.
    pub(crate) fn register() -> anyhow::Result<Signals> {
        Ok(Signals)
    }

    /// Waits for Ctrl-C (for ever when it cannot be listened for).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub(crate) async fn recv(&mut self) -> Stop {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
        Stop::Interrupt
    }
}

/// Cancels `shutdown` on the first stopping signal, and logs which it was.
pub(crate) async fn cancel_on_signal(mut signals: Signals, shutdown: CancellationToken) {
    match signals.recv().await {
        Stop::Terminate => tracing::info!("SIGTERM: shutting down"),
        Stop::Interrupt => tracing::info!("Ctrl-C: shutting down"),
    }
    shutdown.cancel();
}
