//! The crate's one error.

use std::fmt;

use mesh_core::BoxError;

/// What kind of failure a [`LogsError`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogsErrorKind {
    /// The options cannot work (a bad URL, node, source or pattern).
    InvalidOptions,
    /// No tokio runtime to run the shipper on.
    NoRuntime,
    /// The broker could not be reached, or refused a connection.
    Connection,
    /// The broker refused a declaration, a binding or a consumer.
    Broker,
}

/// An error of mesh-logs: a kind, context, and the cause.
#[derive(Debug)]
pub struct LogsError {
    kind: LogsErrorKind,
    context: String,
    source: Option<BoxError>,
}

impl LogsError {
    pub(crate) fn new(kind: LogsErrorKind, context: impl Into<String>) -> LogsError {
        LogsError {
            kind,
            context: context.into(),
            source: None,
        }
    }

    pub(crate) fn with_source(mut self, source: impl Into<BoxError>) -> LogsError {
        self.source = Some(source.into());
        self
    }

    /// The kind.
    pub fn kind(&self) -> &LogsErrorKind {
        &self.kind
    }

    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        self.kind == LogsErrorKind::Connection
    }
}

impl fmt::Display for LogsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.kind {
            LogsErrorKind::InvalidOptions => "invalid logs options",
            LogsErrorKind::NoRuntime => "no tokio runtime",
            LogsErrorKind::Connection => "cannot connect to the broker",
            LogsErrorKind::Broker => "the broker refused",
        })?;
        if !self.context.is_empty() {
            write!(f, " ({})", self.context)?;
        }
        Ok(())
    }
}

impl std::error::Error for LogsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
