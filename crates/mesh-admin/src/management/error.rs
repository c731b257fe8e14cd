//! The management client's error: a kind to react to, a message that never holds a
//! credential, and the cause in the `source()` chain.

use std::error::Error as StdError;
use std::fmt;

/// What went wrong talking to the management API.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManagementErrorKind {
    /// The options cannot work: a URL that is not `http(s)://host…`, an unreadable CA file.
    InvalidOptions,
    /// The request would send the credentials in clear (plain HTTP) to a host that is not
    /// loopback, and [`allow_insecure_http`](super::ManagementOptions::allow_insecure_http)
    /// was not given: nothing was sent.
    Insecure,
    /// No answer: connection refused, name not resolved, TLS handshake or certificate
    /// refused, or no answer within the timeout.
    Unreachable,
    /// `401`: the API refused the credentials.
    Unauthorized,
    /// `403`: the user lacks a management tag or permissions on the vhost.
    Forbidden,
    /// `404`: the vhost, queue or binding does not exist.
    NotFound,
    /// Another non-success status.
    Status,
    /// An answer that is not what the API sends: not JSON, an unexpected shape, or larger
    /// than the response limit.
    InvalidResponse,
}

/// An error of the [management client](super::ManagementClient).
///
/// Its message names the request (method and path) and never a credential: the client's
/// URL has no userinfo, and the HTTP library's errors are kept without their URL.
#[derive(Debug)]
pub struct ManagementError {
    kind: ManagementErrorKind,
    message: String,
    status: Option<u16>,
    reason: Option<String>,
    source: Option<Box<dyn StdError + Send + Sync>>,
}

impl ManagementError {
    pub(crate) fn new(kind: ManagementErrorKind, message: impl Into<String>) -> ManagementError {
        ManagementError {
            kind,
            message: message.into(),
            status: None,
            reason: None,
            source: None,
        }
    }

    pub(crate) fn with_source(
        mut self,
        source: impl Into<Box<dyn StdError + Send + Sync>>,
    ) -> ManagementError {
        self.source = Some(source.into());
        self
    }

    pub(crate) fn with_status(mut self, status: u16, reason: Option<String>) -> ManagementError {
        self.status = Some(status);
        self.reason = reason;
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> ManagementErrorKind {
        self.kind
    }

    /// The HTTP status of a refused request.
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// The `reason` the API gave with a refusal, if any.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// Whether the API could not be reached at all (see [`ManagementErrorKind::Unreachable`]).
    pub fn is_unreachable(&self) -> bool {
        self.kind == ManagementErrorKind::Unreachable
    }
}

impl fmt::Display for ManagementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(reason) = &self.reason {
            write!(f, ": {reason}")?;
        }
        Ok(())
    }
}

impl StdError for ManagementError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}
