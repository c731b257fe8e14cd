//! [`Acker`]: how a transport settles one delivery.

use std::sync::Arc;

use crate::wire::WireMessage;

use super::future::BoxFuture;
#[cfg(doc)]
use super::Delivery;
use super::{AckBatch, TransportError};

/// Who hears that an ack handed on with [`Acker::ack_detached`] could not be sent: its
/// message stays in its queue and is delivered again. One is shared by every delivery of a
/// consumer, so handing an ack on allocates nothing for it.
pub type AckFailed = Arc<dyn Fn(TransportError) + Send + Sync>;

/// How a transport settles one delivery. Each method consumes the acker: a delivery is
/// settled once.
///
/// An acker dropped without a decision must release its message back to its queue (a
/// requeue), so a message is never lost because a task died.
pub trait Acker: Send + 'static {
    /// The handler succeeded: remove the message.
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>>;

    /// The handler succeeded: remove the message, without waiting for the ack to be sent.
    ///
    /// A transport that settles through a task of its own (RabbitMQ's: each channel's ack
    /// tracker, which coalesces acks) takes the ack over and returns `None`; if the ack then
    /// cannot be sent (the channel is gone), it calls `failed`, on its own task. Every ack
    /// handed on before the transport's `close` is sent, or reported failed, before that
    /// close completes. The default cannot hand the ack on: it returns the future that acks,
    /// calling `failed` on an error, for the caller to await.
    fn ack_detached(self: Box<Self>, failed: AckFailed) -> Option<BoxFuture<'static, ()>> {
        let ack = self.ack();
        Some(Box::pin(async move {
            if let Err(error) = ack.await {
                failed(error);
            }
        }))
    }

    /// Publish `copy` to the retry ladder at delay step `step` (it comes back to this
    /// queue only, after the step's delay); once that publish is confirmed, remove the
    /// original. No prefetch slot is held while the copy waits.
    fn retry(
        self: Box<Self>,
        copy: WireMessage,
        step: usize,
    ) -> BoxFuture<'static, Result<(), TransportError>>;

    /// Publish `copy` (already annotated) to the dead-letter exchange; once confirmed,
    /// remove the original.
    fn dead_letter(
        self: Box<Self>,
        copy: WireMessage,
    ) -> BoxFuture<'static, Result<(), TransportError>>;

    /// Publish `reply` to the request's `reply_to` with its correlation id, then remove
    /// the request (serve deliveries only).
    fn reply(self: Box<Self>, reply: WireMessage)
        -> BoxFuture<'static, Result<(), TransportError>>;

    /// Put the message back in its queue for another delivery (a requeue).
    fn release(self: Box<Self>);

    /// Adds this delivery's ack to `batch`, to be sent together with the others'
    /// ([`Delivery::ack_all`]). A transport that can settle many deliveries in one command
    /// joins a group of its own ([`AckBatch::join`]); the default acks on its own.
    fn ack_into(self: Box<Self>, batch: &mut AckBatch) {
        batch.single(self.ack());
    }
}
