//! The crate's one error type.

use std::fmt;

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The database failed (a connection, a statement, a commit).
    Database,
    /// The outbox's tables are of a newer version than this library knows.
    SchemaTooNew {
        /// The version found in the database.
        found: i64,
        /// The newest version this library knows.
        known: i64,
    },
    /// The bus refused the event (a foreign key, a reserved header, a closed bus, …).
    Bus,
    /// A stored row is not a message this library wrote.
    Corrupt,
    /// The options cannot work.
    InvalidOptions,
    /// Another spool has the file open, in this process or another (its lock file,
    /// `<file>.lock`, is held).
    InUse,
    /// The file system failed (a spool's lock file).
    Io,
}

/// An error of the outbox or the inbox: a kind and the cause.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: Option<String>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind) -> Error {
        Error {
            kind,
            message: None,
            source: None,
        }
    }

    pub(crate) fn database(context: impl Into<String>, source: sqlx::Error) -> Error {
        Error {
            kind: ErrorKind::Database,
            message: Some(context.into()),
            source: Some(Box::new(source)),
        }
    }

    /// A database failure several callers share (a spool's group commit).
    pub(crate) fn shared_database(
        context: impl Into<String>,
        source: std::sync::Arc<sqlx::Error>,
    ) -> Error {
        Error {
            kind: ErrorKind::Database,
            message: Some(context.into()),
            source: Some(Box::new(source)),
        }
    }

    pub(crate) fn in_use(message: impl Into<String>) -> Error {
        Error {
            kind: ErrorKind::InUse,
            message: Some(message.into()),
            source: None,
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error {
            kind: ErrorKind::Io,
            message: Some(context.into()),
            source: Some(Box::new(source)),
        }
    }

    pub(crate) fn corrupt(message: impl Into<String>) -> Error {
        Error {
            kind: ErrorKind::Corrupt,
            message: Some(message.into()),
            source: None,
        }
    }

    pub(crate) fn options(message: impl Into<String>) -> Error {
        Error {
            kind: ErrorKind::InvalidOptions,
            message: Some(message.into()),
            source: None,
        }
    }

    /// What kind of failure it is.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The bus's error, when the bus refused the event.
    pub fn bus_error(&self) -> Option<&mesh::Error> {
        self.source.as_deref()?.downcast_ref()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::Database => f.write_str("database error")?,
            ErrorKind::SchemaTooNew { found, known } => write!(
                f,
                "the outbox schema is at version {found}, newer than this library's {known}"
            )?,
            ErrorKind::Bus => f.write_str("the bus refused the event")?,
            ErrorKind::Corrupt => f.write_str("a stored outbox row is corrupt")?,
            ErrorKind::InvalidOptions => f.write_str("invalid options")?,
            ErrorKind::InUse => f.write_str("in use")?,
            ErrorKind::Io => f.write_str("file system error")?,
        }
        if let Some(message) = &self.message {
            write!(f, ": {message}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<mesh::Error> for Error {
    fn from(error: mesh::Error) -> Self {
        Error {
            kind: ErrorKind::Bus,
            message: None,
            source: Some(Box::new(error)),
        }
    }
}
