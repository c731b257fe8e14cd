//! Why the broker refuses an operation.

use mesh_core::naming::RPC_EXCHANGE;
use mesh_core::transport::{TransportError, TransportErrorKind};

/// The longest queue name AMQP carries (a short string).
pub(crate) const MAX_QUEUE_NAME_LEN: usize = 255;

/// Why the broker refused an operation; a [`TransportError`] at the transport's edge.
///
/// Kept small and separate because `TransportError` is large to pass around.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The connection was closed by its owner.
    Closed,
    /// The connection a delivery came from is closed (or the broker is gone).
    ConnectionLost,
    /// Nothing is bound on `mesh.rpc` for the tool.
    NoServer(String),
    /// The tool's serve queue is bound, but nothing consumes it.
    NotConsumed(String),
    /// A queue name that is empty or too long.
    BadQueueName,
    /// A queue name with the server's `amq.` prefix.
    ReservedQueueName(String),
    /// The queue of a delivery was deleted.
    QueueGone(String),
    /// A delivery tag the queue does not know (already settled).
    UnknownTag(u64),
}

impl From<Fault> for TransportError {
    fn from(fault: Fault) -> TransportError {
        use TransportErrorKind as Kind;
        match fault {
            Fault::Closed => TransportError::new(Kind::Closed, "the memory transport was closed"),
            Fault::ConnectionLost => TransportError::new(
                Kind::ConnectionLost,
                "the connection this delivery came from was closed",
            ),
            Fault::NoServer(tool) => TransportError::new(
                Kind::NoServer,
                format!("no queue is bound for `{tool}` on {RPC_EXCHANGE}"),
            ),
            Fault::NotConsumed(tool) => TransportError::new(
                Kind::NoServer,
                format!(
                    "no server is consuming `serve.{tool}`: nothing answered `{tool}` in {:?}",
                    mesh_core::NO_SERVER_CHECK
                ),
            ),
            Fault::BadQueueName => TransportError::new(
                Kind::InvalidOptions,
                format!("a queue name must be 1 to {MAX_QUEUE_NAME_LEN} bytes long"),
            ),
            Fault::ReservedQueueName(name) => TransportError::new(
                Kind::AccessRefused,
                format!("queue name `{name}` uses the reserved prefix `amq.`"),
            ),
            Fault::QueueGone(name) => {
                TransportError::new(Kind::Protocol, format!("queue `{name}` no longer exists"))
            }
            Fault::UnknownTag(tag) => {
                TransportError::new(Kind::Protocol, format!("unknown delivery tag {tag}"))
            }
        }
    }
}
