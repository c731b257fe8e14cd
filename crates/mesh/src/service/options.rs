//! [`ServiceOptions`]: where the endpoint listens, how long a drain may take, how logs look.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use super::logs::{self, LogColor, LogFormat};
use crate::error::{Error, ErrorKind};

/// Where the endpoint listens unless told otherwise: `127.0.0.1:9464`.
pub const DEFAULT_METRICS_ADDR: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9464));

/// How long a drain may take unless told otherwise: 25 s, within the 30 s a service manager
/// commonly waits after SIGTERM before it kills (Kubernetes' default grace period).
pub const DEFAULT_DRAIN_DEADLINE: Duration = Duration::from_secs(25);

/// How [`run`](super::run) runs a service: `Default` (the endpoint on
/// [`DEFAULT_METRICS_ADDR`], a drain deadline of [`DEFAULT_DRAIN_DEADLINE`], text logs at
/// `info`, coloured only on a terminal without `NO_COLOR`), consuming setters, and [`from_env`](ServiceOptions::from_env).
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    metrics_addr: Option<SocketAddr>,
    drain_deadline: Duration,
    log_format: LogFormat,
    log_color: LogColor,
    log_filter: String,
}

impl Default for ServiceOptions {
    fn default() -> Self {
        ServiceOptions {
            metrics_addr: Some(DEFAULT_METRICS_ADDR),
            drain_deadline: DEFAULT_DRAIN_DEADLINE,
            log_format: LogFormat::Text,
            log_color: LogColor::Auto,
            log_filter: "info".to_owned(),
        }
    }
}

impl ServiceOptions {
    /// The defaults.
    pub fn new() -> ServiceOptions {
        ServiceOptions::default()
    }

    /// The defaults, then what the environment sets: `RUST_LOG` (the log filter, as
    /// `tracing-subscriber`'s `EnvFilter` reads it), `MESH_LOG_FORMAT` (`text` or `json`) and
    /// `MESH_METRICS_ADDR` (an address such as `0.0.0.0:9464`, or `off` for no endpoint).
    /// Unset or empty variables keep the defaults.
    ///
    /// Fails with [`ErrorKind::InvalidOptions`] on a value it cannot read.
    pub fn from_env() -> Result<ServiceOptions, Error> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut options = ServiceOptions::default();
        if let Some(filter) = var("RUST_LOG") {
            options = options.log_filter(filter)?;
        }
        if let Some(format) = var("MESH_LOG_FORMAT") {
            options.log_format = format.trim().parse()?;
        }
        if let Some(addr) = var("MESH_METRICS_ADDR") {
            options.metrics_addr = match addr.trim() {
                "off" => None,
                addr => Some(addr.parse().map_err(|e| {
                    Error::with_source(
                        ErrorKind::InvalidOptions,
                        BadAddr {
                            value: addr.escape_debug().to_string(),
                            source: e,
                        },
                    )
                })?),
            };
        }
        Ok(options)
    }

    /// Serves `/livez`, `/readyz` and `/metrics` on `addr` (port 0 takes a free one).
    pub fn metrics_addr(mut self, addr: SocketAddr) -> Self {
        self.metrics_addr = Some(addr);
        self
    }

    /// Serves no endpoint.
    pub fn no_metrics(mut self) -> Self {
        self.metrics_addr = None;
        self
    }

    /// How long the drain after a stopping signal may take before the bus is closed at once.
    pub fn drain_deadline(mut self, deadline: Duration) -> Self {
        self.drain_deadline = deadline;
        self
    }

    /// Log lines as text or JSON.
    pub fn log_format(mut self, format: LogFormat) -> Self {
        self.log_format = format;
        self
    }

    /// When text log lines carry colour: [`LogColor::Auto`] (the default) only when stderr
    /// is a terminal and `NO_COLOR` is unset or empty.
    pub fn log_color(mut self, color: LogColor) -> Self {
        self.log_color = color;
        self
    }

    /// Which log records are kept, in `RUST_LOG`'s syntax (`info`, `mesh=debug,info`, …).
    ///
    /// Fails with [`ErrorKind::InvalidOptions`] when the filter does not parse.
    pub fn log_filter(mut self, filter: impl Into<String>) -> Result<Self, Error> {
        let filter = filter.into();
        logs::filter(&filter)?;
        self.log_filter = filter;
        Ok(self)
    }

    /// Installs the process's log subscriber: records kept by the filter, to stderr, as text
    /// (coloured as [`log_color`](ServiceOptions::log_color) says: by default only on a
    /// terminal, never in a file, a pipe or journald) or JSON lines. Call it first thing in
    /// `main`, so that connecting and starting the bus are logged too; [`run`](super::run)
    /// installs it otherwise.
    ///
    /// Fails with [`ErrorKind::Service`] when a subscriber is installed already.
    pub fn install_logs(&self) -> Result<(), Error> {
        logs::install(self.log_format, self.log_color, &self.log_filter)
    }

    pub(crate) fn endpoint(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    pub(crate) fn deadline(&self) -> Duration {
        self.drain_deadline
    }
}

#[derive(Debug, thiserror::Error)]
#[error("MESH_METRICS_ADDR `{value}` is not an address such as 127.0.0.1:9464, nor `off`")]
struct BadAddr {
    value: String,
    #[source]
    source: std::net::AddrParseError,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_formats_parse_and_others_are_refused() {
        assert_eq!("text".parse::<LogFormat>().ok(), Some(LogFormat::Text));
        assert_eq!("json".parse::<LogFormat>().ok(), Some(LogFormat::Json));
        let error = "yaml".parse::<LogFormat>().err().map(|e| e.kind().clone());
        assert_eq!(error, Some(ErrorKind::InvalidOptions));
    }

    #[test]
    fn a_filter_that_does_not_parse_is_refused() {
        let error = ServiceOptions::new().log_filter("mesh=loud").err();
        assert_eq!(
            error.map(|e| e.kind().clone()),
            Some(ErrorKind::InvalidOptions)
        );
        assert!(ServiceOptions::new().log_filter("mesh=debug,info").is_ok());
    }
}
