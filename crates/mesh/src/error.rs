//! The SDK's one error type.

use std::fmt;

use mesh_core::{BoxError, KeyError, PolicyError, RemoteError, TransportError, TransportErrorKind};

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A routing key, pattern, name or tool key breaks the contract.
    InvalidKey,
    /// An emit under a key this bus does not own (another module's, context's or node's).
    ForeignKey {
        /// The key asked for.
        key: String,
        /// The prefix this bus may emit under.
        allowed: String,
    },
    /// An emit set a header only the runtime sets (`x-mesh-*`, a contract header, the trace
    /// context: see `mesh_core::codec::is_reserved_header`), through `Outgoing::header`.
    ReservedHeader {
        /// The header's name.
        name: String,
    },
    /// The bus's options cannot work.
    InvalidOptions,
    /// A declared JSON Schema cannot be used: it does not compile as draft 7 (checked with
    /// the feature `schemas`), or it uses `$defs` instead of the draft-07 `definitions`.
    InvalidSchema {
        /// What the schema describes: an event type, a handler's patterns, a tool.
        subject: String,
        /// Why it cannot be used.
        problem: String,
    },
    /// A payload could not be serialized, or a reply deserialized, as JSON.
    Payload,
    /// A message from the wire breaks the contract.
    Decode,
    /// The tool answered with an error.
    Remote {
        /// The tool's error code.
        code: String,
        /// The tool's message.
        message: String,
    },
    /// The transport failed; the kind says how.
    Transport(TransportErrorKind),
    /// The bus was closed.
    Closed,
    /// A telemetry endpoint or exporter could not start (an address in use, another
    /// metrics recorder installed).
    Telemetry,
    /// The bus's emit spool is full: keeping the event would exceed its bound. Nothing of
    /// the event was kept; it may succeed once the spool published some of what it holds.
    SpoolFull {
        /// The spool's bound, in bytes.
        limit_bytes: u64,
    },
    /// The bus's emit spool could not keep the event (its store failed); nothing of it was
    /// kept. The cause is the error's source.
    Spool,
    /// A service (feature `service`) could not run or stop as asked: its stopping signals
    /// could not be listened for, a log subscriber was installed already, or its drain
    /// passed the deadline or was cut short by a second signal.
    Service,
}

/// An error of the mesh SDK: a kind and the cause.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    source: Option<BoxError>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind) -> Error {
        Error { kind, source: None }
    }

    pub(crate) fn with_source(kind: ErrorKind, source: impl Into<BoxError>) -> Error {
        Error {
            kind,
            source: Some(source.into()),
        }
    }

    pub(crate) fn options(message: impl Into<String>) -> Error {
        Error::with_source(ErrorKind::InvalidOptions, message.into())
    }

    /// A spool's bound would be exceeded ([`ErrorKind::SpoolFull`]): for implementations
    /// of [`EmitSpool`](crate::EmitSpool).
    pub fn spool_full(limit_bytes: u64) -> Error {
        Error::new(ErrorKind::SpoolFull { limit_bytes })
    }

    /// A spool's store failed ([`ErrorKind::Spool`]), for `source`: for implementations of
    /// [`EmitSpool`](crate::EmitSpool).
    pub fn spool(source: impl Into<BoxError>) -> Error {
        Error::with_source(ErrorKind::Spool, source)
    }

    /// The kind.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The transport's error kind, when the transport failed.
    pub fn transport_kind(&self) -> Option<&TransportErrorKind> {
        match &self.kind {
            ErrorKind::Transport(kind) => Some(kind),
            _ => None,
        }
    }

    /// Whether the same operation may succeed if tried again later (a full spool may have
    /// room later).
    pub fn is_retryable(&self) -> bool {
        match &self.kind {
            ErrorKind::SpoolFull { .. } => true,
            ErrorKind::Transport(_) => self
                .source
                .as_deref()
                .and_then(|e| e.downcast_ref::<TransportError>())
                .is_some_and(TransportError::is_retryable),
            _ => false,
        }
    }

    /// Whether the connection to the broker was lost.
    pub fn is_connection_lost(&self) -> bool {
        self.kind == ErrorKind::Transport(TransportErrorKind::ConnectionLost)
    }

    /// Whether a deadline passed (a confirm or a call's reply).
    pub fn is_timeout(&self) -> bool {
        self.kind == ErrorKind::Transport(TransportErrorKind::Timeout)
    }

    /// Whether a call found no server for its tool: no serve queue exists for it, or
    /// nothing consumed its serve queue when the reply was slow to come (the cause says
    /// which).
    pub fn is_no_server(&self) -> bool {
        self.kind == ErrorKind::Transport(TransportErrorKind::NoServer)
    }

    /// What to do about it, when the error knows: for a call that found no server, to start
    /// the service that serves the tool.
    pub fn hint(&self) -> Option<&'static str> {
        self.is_no_server().then_some(
            "start the service that serves the tool: a call is answered only while a server \
             consumes the tool's queue",
        )
    }

    /// Whether a call was refused because its request does not match the JSON Schema the
    /// tool's server declared and validates ([`RemoteError::SCHEMA_INVALID`]; see
    /// [`BusBuilder::validate_schemas`](crate::BusBuilder::validate_schemas)): the tool
    /// never ran, and the same request would be refused again.
    pub fn is_schema_invalid(&self) -> bool {
        matches!(&self.kind, ErrorKind::Remote { code, .. } if code == RemoteError::SCHEMA_INVALID)
    }

    /// The tool's error, when a call was answered with one.
    pub fn remote(&self) -> Option<RemoteError> {
        match &self.kind {
            ErrorKind::Remote { code, message } => Some(RemoteError {
                code: code.clone(),
                message: message.clone(),
            }),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::InvalidKey => f.write_str("invalid key"),
            ErrorKind::ForeignKey { key, allowed } => {
                write!(
                    f,
                    "may not emit `{key}`: this bus emits only under `{allowed}`"
                )
            }
            ErrorKind::ReservedHeader { name } => write!(
                f,
                "may not set header `{name}`: the runtime sets it (use the setter, if any)"
            ),
            ErrorKind::InvalidOptions => f.write_str("invalid options"),
            ErrorKind::InvalidSchema { subject, problem } => {
                write!(f, "the schema of {subject} cannot be used: {problem}")
            }
            ErrorKind::Payload => f.write_str("payload is not valid JSON for its type"),
            ErrorKind::Decode => f.write_str("message breaks the contract"),
            // What the server said is wire text: escaped, wherever this is printed.
            ErrorKind::Remote { code, message } => write!(
                f,
                "tool failed with `{}`: {}",
                mesh_core::text::Escaped(code),
                mesh_core::text::Escaped(message)
            ),
            ErrorKind::Transport(_) => f.write_str("transport failed"),
            ErrorKind::Closed => f.write_str("bus is closed"),
            ErrorKind::Telemetry => f.write_str("telemetry could not start"),
            ErrorKind::SpoolFull { limit_bytes } => {
                write!(f, "the emit spool is full ({limit_bytes} bytes)")
            }
            ErrorKind::Spool => f.write_str("the emit spool could not keep the event"),
            ErrorKind::Service => f.write_str("the service could not run or stop as asked"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<KeyError> for Error {
    fn from(error: KeyError) -> Self {
        Error::with_source(ErrorKind::InvalidKey, error)
    }
}

impl From<PolicyError> for Error {
    fn from(error: PolicyError) -> Self {
        Error::with_source(ErrorKind::InvalidOptions, error)
    }
}

impl From<TransportError> for Error {
    fn from(error: TransportError) -> Self {
        match error.kind() {
            TransportErrorKind::Closed => Error::with_source(ErrorKind::Closed, error),
            kind => Error::with_source(ErrorKind::Transport(kind.clone()), error),
        }
    }
}

impl From<mesh_core::DecodeError> for Error {
    fn from(error: mesh_core::DecodeError) -> Self {
        Error::with_source(ErrorKind::Decode, error)
    }
}

/// The outcome of a handler that failed: retry it later, or give up on the event now.
///
/// `?` turns any error into a *retryable* failure; say [`HandlerError::permanent`] for
/// failures that no retry can fix (a broken invariant, input that can never be valid).
#[derive(Debug)]
pub struct HandlerError {
    permanent: bool,
    /// The dead-letter reason of a permanent failure the runtime made (a body that does not
    /// decode, a version not read); `None`: the handler's own (`permanent`).
    reason: Option<mesh_core::DeadReason>,
    source: BoxError,
}

impl HandlerError {
    /// A failure worth retrying (a dependency was down, a lock was taken).
    pub fn retry(source: impl Into<BoxError>) -> HandlerError {
        HandlerError {
            permanent: false,
            reason: None,
            source: source.into(),
        }
    }

    /// A failure no retry can fix: the event is dead-lettered at once.
    pub fn permanent(source: impl Into<BoxError>) -> HandlerError {
        HandlerError {
            permanent: true,
            reason: None,
            source: source.into(),
        }
    }

    /// A permanent failure the runtime found before the handler ran, dead-lettered with
    /// `reason`.
    pub(crate) fn refused(reason: mesh_core::DeadReason, message: String) -> HandlerError {
        HandlerError {
            permanent: true,
            reason: Some(reason),
            source: message.into(),
        }
    }

    /// The dead-letter reason of a permanent failure, `None` for a retryable one.
    pub(crate) fn dead_reason(&self) -> Option<mesh_core::DeadReason> {
        match (self.permanent, self.reason) {
            (false, _) => None,
            (true, Some(reason)) => Some(reason),
            (true, None) => Some(mesh_core::DeadReason::Permanent),
        }
    }

    /// Whether it is permanent.
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }

    /// The cause.
    pub fn source(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.source
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The chain, so the dead letter's `last error` says everything.
        write!(f, "{}", self.source)?;
        let mut next = self.source.source();
        while let Some(cause) = next {
            write!(f, ": {cause}")?;
            next = cause.source();
        }
        Ok(())
    }
}

impl<E: Into<BoxError>> From<E> for HandlerError {
    fn from(error: E) -> Self {
        HandlerError::retry(error)
    }
}
