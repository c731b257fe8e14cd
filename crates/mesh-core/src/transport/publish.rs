//! Publishing: where a message goes ([`Target`]), how ([`PublishOptions`]), and the broker's
//! [`Confirm`] of it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::future::BoxFuture;
use super::TransportError;
#[cfg(doc)]
use super::TransportErrorKind;

/// Where a message is published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `mesh.events`, routed by the message's routing key.
    Events,
    /// Straight into one queue (the default exchange): a re-driven dead letter goes back
    /// to the failing consumer only.
    Queue(String),
    /// `mesh.retry` under a key: a module's scheduled event into its schedule queue
    /// ([`crate::naming::schedule_queue`]), bound there on its own name. The access plan lets
    /// a module write only its own queues' names on `mesh.retry`.
    Retry(String),
}

/// How to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishOptions {
    /// Where to.
    pub target: Target,
    /// Fail with [`TransportErrorKind::Unroutable`] if no queue takes the message.
    pub mandatory: bool,
    /// How long the publish may wait for room in the unconfirmed window and then for its
    /// confirm, in all; `None` waits as long as it takes.
    pub deadline: Option<Duration>,
}

impl Default for PublishOptions {
    fn default() -> Self {
        PublishOptions {
            target: Target::Events,
            mandatory: false,
            deadline: None,
        }
    }
}

/// A broker's confirmation of one publish: a future resolving to `Ok` once the broker took
/// responsibility for the message.
///
/// Await it now, later or never: the message is published either way. Dropping it only
/// gives up on learning the outcome.
#[must_use = "a confirmation says whether the broker took the message"]
pub struct Confirm {
    inner: BoxFuture<'static, Result<(), TransportError>>,
}

impl Confirm {
    /// Wraps a future resolving to the outcome.
    pub fn new(
        inner: impl Future<Output = Result<(), TransportError>> + Send + 'static,
    ) -> Confirm {
        Confirm {
            inner: Box::pin(inner),
        }
    }

    /// An outcome already known.
    pub fn ready(result: Result<(), TransportError>) -> Confirm {
        Confirm::new(std::future::ready(result))
    }
}

impl fmt::Debug for Confirm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Confirm").finish_non_exhaustive()
    }
}

impl Future for Confirm {
    type Output = Result<(), TransportError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}
