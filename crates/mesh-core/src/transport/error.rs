//! What goes wrong in a transport: [`TransportError`], its [`TransportErrorKind`], and the
//! boxed cause [`BoxError`] it carries.

use std::fmt;

/// The boxed cause of an error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong in a transport.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportErrorKind {
    /// The connection or channel was lost; what was in flight may or may not have
    /// reached the broker.
    ConnectionLost,
    /// The transport was closed by its owner.
    Closed,
    /// The broker refused to take responsibility for the message (a publisher nack).
    Nacked,
    /// No queue is bound for a message published as mandatory.
    Unroutable,
    /// The message is larger than the broker accepts; resending cannot help.
    TooLarge {
        /// The message's size in bytes.
        size: usize,
        /// The limit, when known.
        max: Option<usize>,
    },
    /// The message's headers and properties do not fit in one frame of the connection
    /// (AMQP carries them in a single content-header frame, at most the negotiated
    /// `frame_max`); a broker closes the whole connection on such a frame, so it is never
    /// sent, and resending cannot help.
    HeadersTooLarge {
        /// The content-header frame's size in bytes.
        size: usize,
        /// The connection's frame size limit.
        max: usize,
    },
    /// A deadline passed (a confirm, or a call's reply).
    Timeout,
    /// The unconfirmed window is full (a long outage or a broker alarm) and stayed full
    /// until the deadline.
    Backpressure,
    /// No server serves the called tool.
    NoServer,
    /// The broker holds an entity with other arguments than mesh declares.
    Incompatible {
        /// The queue or exchange.
        entity: String,
        /// The argument that differs.
        argument: String,
        /// What mesh declares.
        ours: String,
        /// What the broker holds.
        theirs: String,
    },
    /// The broker refused access (credentials, vhost, permissions).
    AccessRefused,
    /// The broker refused this user one operation on one resource, by its permissions: a
    /// publish to an exchange or under a topic it may not write, a queue it may not declare
    /// or consume, a binding key it may not bind, a `user-id` that is not its own. Not a
    /// fault that passes: retrying cannot help, and the rest of what the transport does goes
    /// on (see `docs/SECURITY.md`).
    Forbidden {
        /// What was refused, in the broker's words (bounded): e.g. `write access to topic
        /// 'module.billing.x' in exchange 'mesh.events' in vhost 'prod' refused for user
        /// 'module.umami'`.
        refused: String,
    },
    /// The TLS session could not be set up: the server's certificate was refused, or the
    /// server refused the handshake or the client's certificate. The transport's own error in
    /// the source chain says which.
    Tls,
    /// The options given cannot work (a bad URL, an impossible setting).
    InvalidOptions,
    /// Anything else the broker or the client reported.
    Protocol,
}

/// An error of a transport: a kind, context, and the cause.
///
/// Boxed inside, so a `Result<_, TransportError>` stays one pointer wide.
#[derive(Debug)]
pub struct TransportError(Box<Inner>);

#[derive(Debug)]
struct Inner {
    kind: TransportErrorKind,
    context: String,
    source: Option<BoxError>,
}

impl TransportError {
    /// A new error of this kind, with a short lowercase context.
    pub fn new(kind: TransportErrorKind, context: impl Into<String>) -> TransportError {
        TransportError(Box::new(Inner {
            kind,
            context: context.into(),
            source: None,
        }))
    }

    /// Attaches the cause.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> TransportError {
        self.0.source = Some(source.into());
        self
    }

    /// The kind.
    pub fn kind(&self) -> &TransportErrorKind {
        &self.0.kind
    }

    /// Whether trying the same thing again later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.0.kind,
            TransportErrorKind::ConnectionLost
                | TransportErrorKind::Nacked
                | TransportErrorKind::Timeout
                | TransportErrorKind::Backpressure
                | TransportErrorKind::NoServer
        )
    }

    /// Whether the connection or channel was lost.
    pub fn is_connection_lost(&self) -> bool {
        self.0.kind == TransportErrorKind::ConnectionLost
    }

    /// Whether the TLS session could not be set up (see [`TransportErrorKind::Tls`]).
    pub fn is_tls(&self) -> bool {
        self.0.kind == TransportErrorKind::Tls
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0.kind {
            TransportErrorKind::ConnectionLost => f.write_str("connection lost")?,
            TransportErrorKind::Closed => f.write_str("transport closed")?,
            TransportErrorKind::Nacked => f.write_str("broker nacked the message")?,
            TransportErrorKind::Unroutable => f.write_str("message is unroutable")?,
            TransportErrorKind::TooLarge {
                size,
                max: Some(max),
            } => write!(
                f,
                "message of {size} bytes exceeds the broker's limit of {max}"
            )?,
            TransportErrorKind::TooLarge { size, max: None } => {
                write!(f, "message of {size} bytes is too large for the broker")?
            }
            TransportErrorKind::HeadersTooLarge { size, max } => write!(
                f,
                "message headers of {size} bytes exceed the connection's frame size of {max}"
            )?,
            TransportErrorKind::Timeout => f.write_str("timed out")?,
            TransportErrorKind::Backpressure => f.write_str("unconfirmed window is full")?,
            TransportErrorKind::NoServer => f.write_str("no server for the tool")?,
            TransportErrorKind::Incompatible {
                entity,
                argument,
                ours,
                theirs,
            } => write!(
                f,
                "`{entity}` exists with {argument} = {theirs}, mesh declares {argument} = {ours}"
            )?,
            TransportErrorKind::AccessRefused => f.write_str("access refused")?,
            TransportErrorKind::Forbidden { refused } => write!(f, "forbidden: {refused}")?,
            TransportErrorKind::Tls => f.write_str("tls failure")?,
            TransportErrorKind::InvalidOptions => f.write_str("invalid options")?,
            TransportErrorKind::Protocol => f.write_str("protocol error")?,
        }
        if !self.0.context.is_empty() {
            write!(f, " ({})", self.0.context)?;
        }
        Ok(())
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0
            .source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
