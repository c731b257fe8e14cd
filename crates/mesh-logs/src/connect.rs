//! The broker side, as mesh-amqp offers it: parsing a mesh broker URL, naming the
//! connections, and reading mesh-amqp's errors as [`LogsError`]s.
//!
//! mesh-logs never speaks to the client library itself: its connections are
//! `mesh_amqp::PlainLink`s, whose owner task reconnects them.

use mesh_amqp::AmqpOptions;
use mesh_core::{TransportError, TransportErrorKind};

use crate::error::{LogsError, LogsErrorKind};

/// Parses a mesh broker URL.
pub(crate) fn parse(url: &str) -> Result<AmqpOptions, LogsError> {
    url.parse::<AmqpOptions>()
        .map_err(|e| LogsError::new(LogsErrorKind::InvalidOptions, "the broker URL").with_source(e))
}

/// `options` with its connections named `<prefix>.consume`.
pub(crate) fn named(options: &AmqpOptions, prefix: &str) -> AmqpOptions {
    options.clone().connection_name(prefix)
}

/// The error of opening a link: the broker could not be reached or refused the login
/// (`Connection`), or refused the declaration of `mesh.logs` (`Broker`).
pub(crate) fn opening(error: TransportError) -> LogsError {
    let kind = match error.kind() {
        TransportErrorKind::InvalidOptions => LogsErrorKind::InvalidOptions,
        TransportErrorKind::ConnectionLost
        | TransportErrorKind::Closed
        | TransportErrorKind::Timeout
        | TransportErrorKind::AccessRefused => LogsErrorKind::Connection,
        _ => LogsErrorKind::Broker,
    };
    LogsError::new(
        kind,
        format!("connecting for `{}`", crate::names::LOGS_EXCHANGE),
    )
    .with_source(error)
}

/// The error of a declaration, binding or consumer on an open link.
pub(crate) fn refused(error: TransportError, context: &str) -> LogsError {
    let kind = if error.is_connection_lost() {
        LogsErrorKind::Connection
    } else {
        LogsErrorKind::Broker
    };
    LogsError::new(kind, context).with_source(error)
}
