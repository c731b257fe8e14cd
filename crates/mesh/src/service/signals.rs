//! The signals that stop a service: SIGTERM (a service manager, `kill`) and SIGINT (Ctrl-C).

use std::fmt;

use crate::error::{Error, ErrorKind};

/// The signal that asked the service to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stop {
    /// SIGTERM (a service manager, `kill`).
    Terminate,
    /// SIGINT (Ctrl-C).
    Interrupt,
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stop::Terminate => "SIGTERM",
            Stop::Interrupt => "Ctrl-C",
        })
    }
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
    pub(crate) fn register() -> Result<Signals, Error> {
        use tokio::signal::unix::{signal, SignalKind};
        let listen = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| {
                Error::with_source(
                    ErrorKind::Service,
                    ListenError {
                        name: name.to_owned(),
                        source: e,
                    },
                )
            })
        };
        Ok(Signals {
            term: listen(SignalKind::terminate(), "SIGTERM")?,
            int: listen(SignalKind::interrupt(), "SIGINT")?,
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

/// The stopping signal where there is no SIGTERM: Ctrl-C only.
#[cfg(not(unix))]
pub(crate) struct Signals;

#[cfg(not(unix))]
impl Signals {
    /// Listens for Ctrl-C.
    pub(crate) fn register() -> Result<Signals, Error> {
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

#[derive(Debug, thiserror::Error)]
#[error("cannot listen for {name}")]
struct ListenError {
    name: String,
    #[source]
    source: std::io::Error,
}
