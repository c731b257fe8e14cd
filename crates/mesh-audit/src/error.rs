//! The one error of this crate: a kind, a short context, and the cause as `source()`.

use std::fmt;

use mesh_core::{BoxError, TransportError};

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The options cannot work: a store URL of an unknown scheme, a batch size of 0, a node
    /// name that is not one word.
    InvalidOptions,
    /// A message given to the store is not an event: it breaks the contract, or its body is
    /// not UTF-8.
    InvalidMessage,
    /// The database refused or failed a statement, or could not be reached.
    Database,
    /// Bringing the schema up to date failed.
    Migration,
    /// The transport failed (see [`Error::transport_error`] for its kind).
    Transport,
    /// No dead letter (or event) has the id asked for.
    NotFound,
    /// A dead letter cannot be re-driven: it does not say which consumer's queue failed.
    NotRedrivable,
    /// A dead letter names a queue that is not a mesh consumer queue (`<node>.<module>.events`
    /// or `shared.<module>.events`): a serve queue, a retry queue, one of mesh's own or any
    /// other. It is never re-driven there, whatever its headers say. A replay asked to go
    /// to such a queue fails with it too, before anything is published.
    ForeignQueue,
    /// A stored row holds a value this version cannot read (a timestamp, an id).
    Corrupt,
    /// A dead letter asked for by id was re-driven before: a second re-drive must be asked
    /// for as such ([`Redrive::Again`](crate::Redrive::Again)).
    AlreadyRedriven,
    /// A dead letter's claims failed the provenance check (its publisher is not the owner
    /// of the queue it names, [`DeadLetterRecord::untrusted`](crate::DeadLetterRecord)): it is
    /// re-driven only with its `x-mesh-*` claims stripped, when asked for as such
    /// ([`RedriveOptions::strip_untrusted_claims`](crate::RedriveOptions)).
    Untrusted,
}

/// An error of the audit logger or its store.
///
/// An error opening the store also says what to do about it ([`Error::hint`]): create the
/// directory, start the database, fix the URL.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    context: String,
    hint: Option<String>,
    source: Option<BoxError>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, context: impl Into<String>) -> Error {
        Error {
            kind,
            context: context.into(),
            hint: None,
            source: None,
        }
    }

    pub(crate) fn with_hint(mut self, hint: impl Into<String>) -> Error {
        self.hint = Some(hint.into());
        self
    }

    pub(crate) fn with_source(mut self, source: impl Into<BoxError>) -> Error {
        self.source = Some(source.into());
        self
    }

    pub(crate) fn options(context: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidOptions, context)
    }

    pub(crate) fn database(context: impl Into<String>, source: sqlx::Error) -> Error {
        Error::new(ErrorKind::Database, context).with_source(source)
    }

    pub(crate) fn transport(context: impl Into<String>, source: TransportError) -> Error {
        Error::new(ErrorKind::Transport, context).with_source(source)
    }

    pub(crate) fn corrupt(context: impl Into<String>) -> Error {
        Error::new(ErrorKind::Corrupt, context)
    }

    /// The kind.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// What to do about it, when this crate knows (every error opening or migrating the
    /// store has one), e.g. `create /var/lib/mesh with write access for this user, or give
    /// another store`. Not part of `Display`: a program shows it on a line of its own.
    pub fn hint(&self) -> Option<&str> {
        self.hint.as_deref()
    }

    /// The transport's error, when the transport failed.
    pub fn transport_error(&self) -> Option<&TransportError> {
        self.source.as_deref().and_then(|e| e.downcast_ref())
    }

    /// Whether trying again later may succeed: a lost connection to the broker or the
    /// database, a busy or full database, a timeout.
    pub fn is_retryable(&self) -> bool {
        match self.kind {
            ErrorKind::Transport => self
                .transport_error()
                .is_some_and(TransportError::is_retryable),
            ErrorKind::Database => self
                .source
                .as_deref()
                .and_then(|e| e.downcast_ref::<sqlx::Error>())
                .is_some_and(is_transient),
            _ => false,
        }
    }

    /// Whether the connection to the broker was lost.
    pub fn is_connection_lost(&self) -> bool {
        self.transport_error()
            .is_some_and(TransportError::is_connection_lost)
    }

    /// Whether the id asked for is unknown.
    pub fn is_not_found(&self) -> bool {
        self.kind == ErrorKind::NotFound
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            ErrorKind::InvalidOptions => "invalid options",
            ErrorKind::InvalidMessage => "not an event",
            ErrorKind::Database => "database error",
            ErrorKind::Migration => "migrating the audit schema failed",
            ErrorKind::Transport => "transport error",
            ErrorKind::NotFound => "not found",
            ErrorKind::NotRedrivable => "cannot re-drive",
            ErrorKind::ForeignQueue => "not a mesh consumer queue",
            ErrorKind::Corrupt => "stored row is unreadable",
            ErrorKind::AlreadyRedriven => "re-driven already",
            ErrorKind::Untrusted => "untrusted dead letter",
        };
        f.write_str(what)?;
        if !self.context.is_empty() {
            write!(f, " ({})", self.context)?;
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

/// Whether a database error is worth retrying as it is: the connection, a lock, a full disk,
/// a serialization failure. Anything else (a constraint, a value the column refuses) fails
/// the same way every time.
pub(crate) fn is_transient(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            let Some(code) = db.code() else {
                return false;
            };
            if let Ok(sqlite) = code.parse::<u32>() {
                // SQLite's extended codes keep the primary code in the low byte: BUSY,
                // LOCKED, IOERR, FULL.
                matches!(sqlite & 0xff, 5 | 6 | 10 | 13)
            } else {
                // PostgreSQL SQLSTATE classes: connection exception, transaction rollback
                // (serialization, deadlock), insufficient resources, operator intervention.
                ["08", "40", "53", "57"]
                    .iter()
                    .any(|class| code.starts_with(class))
            }
        }
        _ => false,
    }
}
