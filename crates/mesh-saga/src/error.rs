//! The crate's one error type.

use std::fmt;

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The database failed (a connection, a statement, a commit).
    Database,
    /// The saga's tables are of a newer version than this library knows.
    SchemaTooNew {
        /// The version found in the database.
        found: i64,
        /// The newest version this library knows.
        known: i64,
    },
    /// The outbox refused an emit, a schedule or a cancel.
    Outbox,
    /// An instance's state could not be written or read as JSON.
    State,
    /// A transition asked for something that cannot be done (an event that cannot be made,
    /// a timeout past the year 9999).
    Transition,
    /// An event for an instance that was never started (it may have overtaken the event
    /// that starts it): retried by the bus.
    NotStarted,
    /// An instance was updated by others on every one of the tries: retried by the bus.
    Contended,
}

/// An error of a saga: a kind and the cause.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn with_source(
        kind: ErrorKind,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        Error {
            kind,
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }

    pub(crate) fn database(context: impl Into<String>, source: sqlx::Error) -> Error {
        Error::with_source(ErrorKind::Database, context, source)
    }

    pub(crate) fn outbox(context: impl Into<String>, source: mesh_outbox::Error) -> Error {
        Error::with_source(ErrorKind::Outbox, context, source)
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// Whether trying again later may succeed: a database failure, an event before its
    /// instance's start, an instance too contended this time.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::Database | ErrorKind::NotStarted | ErrorKind::Contended
        ) || (self.kind == ErrorKind::Outbox && self.outbox_retryable())
    }

    fn outbox_retryable(&self) -> bool {
        self.source
            .as_ref()
            .and_then(|s| s.downcast_ref::<mesh_outbox::Error>())
            .is_some_and(|e| *e.kind() == mesh_outbox::ErrorKind::Database)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::SchemaTooNew { found, known } => write!(
                f,
                "{}: the saga tables are at version {found}, this library knows up to {known}",
                self.message
            ),
            _ => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|s| s.as_ref() as &(dyn std::error::Error + 'static))
    }
}
