//! The one error of the crate: a document or a contract that cannot be read.

use std::fmt;

/// What was wrong with a document or a contract read from outside (a file, an announcement
/// from the wire). Never a panic: every input either reads or is one of these.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    source: Option<serde_json::Error>,
}

/// The kinds of [`Error`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The text is not JSON, or a contract's JSON does not have the contract's shape.
    Json,
    /// A JSON document that is none of the forms a system is read from (a module contract,
    /// an announcement event, a system document, an AsyncAPI document made by the exporter).
    UnknownDocument {
        /// What the document looked like.
        found: String,
    },
    /// A contract whose content is refused: a bad owner, key, pattern, tool or schema.
    InvalidContract {
        /// The contract's owner as it says (escaped by the printer, never trusted).
        owner: String,
        /// What is wrong.
        reason: String,
    },
    /// A system document of a format version this crate does not read.
    UnsupportedFormat {
        /// The version found.
        version: String,
    },
    /// An exported AsyncAPI document whose AsyncAPI half no longer matches its seal: edited
    /// after the export, so its two halves may disagree.
    EditedDocument {
        /// What was found.
        why: String,
    },
    /// No contract of that owner in the system.
    UnknownModule {
        /// The owner asked for.
        owner: String,
    },
}

impl Error {
    pub(crate) fn new(kind: ErrorKind) -> Error {
        Error { kind, source: None }
    }

    pub(crate) fn json(source: serde_json::Error) -> Error {
        Error {
            kind: ErrorKind::Json,
            source: Some(source),
        }
    }

    pub(crate) fn invalid(owner: &str, reason: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidContract {
            owner: owner.chars().take(80).collect(),
            reason: reason.into(),
        })
    }

    /// What kind of error it is.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// Whether the input was refused for what it says (not for its JSON syntax).
    pub fn is_invalid_contract(&self) -> bool {
        matches!(self.kind, ErrorKind::InvalidContract { .. })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::Json => f.write_str("not a contract in JSON"),
            ErrorKind::UnknownDocument { found } => write!(
                f,
                "not a module contract, an announcement, a system or an AsyncAPI document made \
                 by `mesh contract export` ({found})"
            ),
            ErrorKind::InvalidContract { owner, reason } => {
                write!(f, "invalid contract of `{owner}`: {reason}")
            }
            ErrorKind::UnsupportedFormat { version } => {
                write!(
                    f,
                    "a system document of format {version}, this version reads 1"
                )
            }
            ErrorKind::EditedDocument { why } => write!(
                f,
                "an AsyncAPI document edited after `mesh contract export` ({why}): check reads \
                 the system it carries, which the edit did not change; change the module's \
                 contract where it is announced and export again"
            ),
            ErrorKind::UnknownModule { owner } => write!(f, "no contract of `{owner}`"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
