//! A message in a queue, with the broker's bookkeeping.

use mesh_core::WireMessage;
use tokio::time::Instant;

/// A message in a queue, with the broker's bookkeeping.
#[derive(Debug)]
pub(crate) struct Message {
    /// Its place in the queue: requeued messages go back to it, ahead of newer ones.
    pub(crate) seq: u64,
    pub(crate) wire: WireMessage,
    pub(crate) redelivered: bool,
    /// How many times it was handed out before (`x-delivery-count`).
    pub(crate) delivery_count: u32,
    /// When its `expiration` runs out; `None` never (no expiration, or one so long that
    /// the deadline cannot be represented).
    expires_at: Option<Instant>,
    /// A zero expiration: RabbitMQ delivers such a message at once or drops it.
    pub(crate) now_or_never: bool,
}

impl Message {
    /// A message just enqueued at `now`.
    pub(crate) fn fresh(wire: WireMessage, seq: u64, now: Instant) -> Message {
        let expiration = wire.properties.expiration;
        Message {
            seq,
            expires_at: expiration.and_then(|ttl| now.checked_add(ttl)),
            now_or_never: expiration.is_some_and(|ttl| ttl.is_zero()),
            redelivered: false,
            delivery_count: 0,
            wire,
        }
    }

    /// Waited in its queue as long as its expiration allows. Zero-expiration messages are
    /// handled by the dispatch that follows their enqueue instead.
    pub(crate) fn is_expired(&self, now: Instant) -> bool {
        !self.now_or_never && self.expires_at.is_some_and(|deadline| now >= deadline)
    }

    /// Back to its queue after a delivery that was not settled; the expiration keeps
    /// running from the first enqueue, as on RabbitMQ.
    pub(crate) fn requeued(mut self) -> Message {
        self.redelivered = true;
        self.delivery_count = self.delivery_count.saturating_add(1);
        self
    }
}
