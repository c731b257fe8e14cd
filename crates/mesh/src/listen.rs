//! Ephemeral listeners and the dead-letter stream.

use bytes::Bytes;
use mesh_core::codec::{self, DeadLetter};
use mesh_core::{
    Delivery, EventId, QueueSpec, Subscription, SubscriptionSpec, TopicPattern, WireMessage,
};

use crate::bus::Bus;
use crate::error::Error;
use crate::incoming::{Incoming, Meta};

/// An at-most-once notification listener: an exclusive, auto-delete queue that sees only
/// events emitted after it started and leaves nothing behind when dropped.
#[derive(Debug)]
pub struct Listener {
    subscription: Subscription,
}

impl Listener {
    /// The next event; `None` when the bus closed. An event that breaks the contract is
    /// returned as an error (it is not retried: listeners are at-most-once).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn next(&mut self) -> Option<Result<Incoming<Bytes>, Error>> {
        let delivery = self.subscription.next().await?;
        Some(match codec::decode(&delivery.message) {
            Ok(envelope) => {
                let meta = Meta::new(&envelope, 1, delivery.redelivered);
                Ok(Incoming {
                    event: envelope.body,
                    meta,
                })
            }
            Err(e) => Err(e.into()),
        })
    }

    /// The server-named queue's name.
    pub fn queue(&self) -> &str {
        self.subscription.queue()
    }
}

/// A dead letter: the message as it was set aside, and why.
#[derive(Debug)]
pub struct DeadMessage {
    /// The original message with its headers and body, plus the dead-letter annotations.
    pub message: WireMessage,
    /// Why and where it died, when the annotations are readable.
    pub dead: Option<DeadLetter>,
    /// The event id, when the message carries a valid one.
    pub event_id: Option<EventId>,
    delivery: Delivery,
}

impl DeadMessage {
    /// Removes it from the dead-letter queue.
    pub async fn ack(self) -> Result<(), Error> {
        Ok(self.delivery.ack().await?)
    }

    /// Leaves it in the dead-letter queue.
    pub fn release(self) {
        self.delivery.release();
    }
}

/// The stream of dead letters from `mesh.dead-letters`.
#[derive(Debug)]
pub struct DeadLetters {
    subscription: Subscription,
}

impl DeadLetters {
    /// The next dead letter.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn next(&mut self) -> Option<DeadMessage> {
        let delivery = self.subscription.next().await?;
        Some(DeadMessage {
            dead: codec::read_dead_letter(&delivery.message),
            event_id: codec::event_id(&delivery.message),
            message: delivery.message.clone(),
            delivery,
        })
    }
}

impl Bus {
    /// Listens to events matching `patterns` from now on, at most once each.
    pub async fn listen<I, S>(&self, patterns: I) -> Result<Listener, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let patterns = patterns
            .into_iter()
            .map(|p| TopicPattern::parse(p.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        let subscription = self
            .inner
            .transport
            .subscribe(SubscriptionSpec {
                queue: QueueSpec::Ephemeral,
                patterns,
                prefetch: crate::bus::DEFAULT_PREFETCH,
                retry_delays: Vec::new(),
            })
            .await?;
        Ok(Listener { subscription })
    }

    /// Consumes the dead-letter queue (`mesh.dead-letters`) with manual acks.
    pub async fn dead_letters(&self) -> Result<DeadLetters, Error> {
        let subscription = self
            .inner
            .transport
            .subscribe(SubscriptionSpec {
                queue: QueueSpec::DeadLetters,
                patterns: Vec::new(),
                prefetch: crate::bus::DEFAULT_PREFETCH,
                retry_delays: Vec::new(),
            })
            .await?;
        Ok(DeadLetters { subscription })
    }
}
