//! [`Delivery`]: one message handed to a subscriber, with the acker that settles it.

use std::fmt;
use std::future::Future;

use crate::wire::WireMessage;

use super::{AckBatch, AckFailed, Acker, BatchAckError, TransportError};

/// One message handed to a subscriber.
pub struct Delivery {
    /// The message, as published.
    pub message: WireMessage,
    /// Whether the broker delivered it before (the redelivered flag).
    pub redelivered: bool,
    /// How many times the broker delivered it before, when the queue counts (quorum
    /// queues and the memory transport do; classic queues do not).
    pub delivery_count: Option<u32>,
    /// The queue it came from.
    pub queue: String,
    acker: Box<dyn Acker>,
}

impl Delivery {
    /// A delivery settled through `acker`.
    pub fn new(
        message: WireMessage,
        redelivered: bool,
        delivery_count: Option<u32>,
        queue: String,
        acker: Box<dyn Acker>,
    ) -> Delivery {
        Delivery {
            message,
            redelivered,
            delivery_count,
            queue,
            acker,
        }
    }

    /// See [`Acker::ack`].
    pub async fn ack(self) -> Result<(), TransportError> {
        self.acker.ack().await
    }

    /// Acks without waiting for the ack to be sent; `failed` hears if it could not be (see
    /// [`Acker::ack_detached`]). The ack is handed on now, by this call; the future it
    /// returns resolves at once on a transport that took the ack over, else once the ack
    /// is sent or has failed, so await it.
    #[must_use = "on a transport that cannot take acks over, the ack is sent by this future"]
    pub fn ack_detached(self, failed: AckFailed) -> impl Future<Output = ()> + Send + 'static {
        let ack = self.acker.ack_detached(failed);
        async move {
            if let Some(ack) = ack {
                ack.await;
            }
        }
    }

    /// See [`Acker::retry`].
    pub async fn retry(self, copy: WireMessage, step: usize) -> Result<(), TransportError> {
        self.acker.retry(copy, step).await
    }

    /// See [`Acker::dead_letter`].
    pub async fn dead_letter(self, copy: WireMessage) -> Result<(), TransportError> {
        self.acker.dead_letter(copy).await
    }

    /// See [`Acker::reply`].
    pub async fn reply(self, reply: WireMessage) -> Result<(), TransportError> {
        self.acker.reply(reply).await
    }

    /// See [`Acker::release`].
    pub fn release(self) {
        self.acker.release();
    }

    /// Acks every delivery, sending the acks a transport can settle together in one
    /// command (those of one channel: one `multiple` ack where the tags allow) instead of a
    /// command per delivery; for a consumer that settles in batches, like one that commits
    /// a batch of rows and then acks it. Resolves once every ack was handed on; the error
    /// counts those that failed (their messages are delivered again).
    pub async fn ack_all(
        deliveries: impl IntoIterator<Item = Delivery>,
    ) -> Result<(), BatchAckError> {
        let mut batch = AckBatch::default();
        for delivery in deliveries {
            delivery.acker.ack_into(&mut batch);
        }
        batch.send().await
    }
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("routing_key", &self.message.routing_key)
            .field("redelivered", &self.redelivered)
            .field("delivery_count", &self.delivery_count)
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}
