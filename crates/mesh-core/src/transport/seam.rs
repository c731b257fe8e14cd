//! [`Transport`]: the trait every transport implements.

use std::fmt;
use std::time::Duration;

/// How long a call waits for its reply before it checks that a server consumes the tool's
/// serve queue (see [`Transport::call`]).
pub const NO_SERVER_CHECK: Duration = Duration::from_secs(1);

use crate::envelope::Envelope;
use crate::key::ToolKey;
use crate::wire::WireMessage;

use super::{
    BoxFuture, Confirm, Health, PublishOptions, ServeSpec, Subscription, SubscriptionSpec,
    TransportError, TransportStats,
};
#[cfg(doc)]
use super::{Delivery, TransportErrorKind};

/// A transport: the mechanics of a broker.
///
/// Implementations are cheap handles onto a task that owns the connection; all methods
/// take `&self`.
pub trait Transport: Send + Sync + fmt::Debug + 'static {
    /// Publishes a message. Resolves once the transport accepted it into its unconfirmed
    /// window (waiting for room there is the backpressure); the returned [`Confirm`]
    /// resolves once the broker confirmed it.
    fn publish(
        &self,
        message: WireMessage,
        options: PublishOptions,
    ) -> BoxFuture<'_, Result<Confirm, TransportError>>;

    /// Publishes an event: exactly [`publish`](Transport::publish) of
    /// [`codec::encode(&envelope)`](crate::codec::encode), which is what the default does.
    /// A transport may build its client's message from the envelope directly instead, and
    /// keep the envelope rather than its encoding for a resend: the message on the wire must
    /// be the same.
    fn publish_event(
        &self,
        envelope: Envelope,
        options: PublishOptions,
    ) -> BoxFuture<'_, Result<Confirm, TransportError>> {
        self.publish(crate::codec::encode(&envelope), options)
    }

    /// Declares the subscription's queue and bindings and starts consuming.
    fn subscribe(
        &self,
        spec: SubscriptionSpec,
    ) -> BoxFuture<'_, Result<Subscription, TransportError>>;

    /// Sends a request to a tool and waits for its reply: the reply message, or
    /// [`TransportErrorKind::NoServer`] when no serve queue exists for the tool, or
    /// [`TransportErrorKind::Timeout`].
    ///
    /// A reply that has not come within [`NO_SERVER_CHECK`] (or the timeout, if shorter)
    /// makes the transport look at the tool's serve queue: when nothing consumes it, the
    /// call fails then with [`TransportErrorKind::NoServer`] rather than wait out its
    /// timeout. The request stays in the queue until it expires, so a server that attaches
    /// before then still answers it, to nobody.
    fn call(
        &self,
        tool: &ToolKey,
        request: WireMessage,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<WireMessage, TransportError>>;

    /// Declares `serve.<key>` and starts consuming requests; settle each with
    /// [`Delivery::reply`].
    fn serve(&self, spec: ServeSpec) -> BoxFuture<'_, Result<Subscription, TransportError>>;

    /// The health of the transport now.
    fn health(&self) -> Health;

    /// Its counters and gauges now (all zero for a transport that keeps none).
    fn stats(&self) -> TransportStats {
        TransportStats::default()
    }

    /// Resolves once every publish accepted before the call is settled: confirmed, nacked,
    /// returned or failed (a publish waiting to be resent after a lost connection is not
    /// settled yet). Under a steady stream of other publishes it may wait for a moment with
    /// none in flight, so callers bound the wait. The SDK's drain waits for this, bounded by
    /// its emit deadline, before it closes the transport: an emit whose [`Confirm`] nobody
    /// awaits is confirmed all the same.
    fn flush(&self) -> BoxFuture<'_, ()>;

    /// Closes every connection; what is unconfirmed stays unconfirmed. The SDK's drain
    /// waits for confirms first.
    fn close(&self) -> BoxFuture<'_, ()>;
}
