//! The service's log subscriber: `tracing-subscriber`'s formatter on stderr, as text or JSON.

use std::io::IsTerminal as _;
use std::str::FromStr;

use tracing_subscriber::EnvFilter;

use crate::error::{Error, ErrorKind};

/// The form of log lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogFormat {
    /// Human-readable lines, coloured only when stderr is a terminal.
    #[default]
    Text,
    /// One JSON object per line, for a log collector.
    Json,
}

impl FromStr for LogFormat {
    type Err = Error;

    /// `text` or `json`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(Error::options(format!(
                "log format `{}` is neither `text` nor `json`",
                other.escape_debug()
            ))),
        }
    }
}

/// Parses a filter in `RUST_LOG`'s syntax.
pub(super) fn filter(filter: &str) -> Result<EnvFilter, Error> {
    EnvFilter::try_new(filter).map_err(|e| Error::with_source(ErrorKind::InvalidOptions, e))
}

/// Installs the process's subscriber; fails when one is installed already.
pub(super) fn install(format: LogFormat, filter_text: &str) -> Result<(), Error> {
    let filter = filter(filter_text)?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
    installed.map_err(|e| Error::with_source(ErrorKind::Service, e))
}
