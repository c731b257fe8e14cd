//! Ephemeral listeners and the tap of dead letters.

use std::sync::Arc;

use bytes::Bytes;
use mesh_core::codec::{self, DeadLetterNote};
use mesh_core::{
    DeadQueue, Delivery, EventId, QueueSpec, Subscription, SubscriptionSpec, TopicPattern,
    WireMessage,
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
                let event = envelope.body.clone();
                let meta = Meta::new(Arc::new(envelope), 1, delivery.redelivered);
                Ok(Incoming { event, meta })
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
pub struct DeadLetter {
    /// The original message with its headers and body, plus the dead-letter annotations.
    pub message: WireMessage,
    /// Why, after how many attempts, where and when it died, when its note is readable.
    pub note: Option<DeadLetterNote>,
    /// The event id, when the message carries a valid one.
    pub event_id: Option<EventId>,
    delivery: Delivery,
}

impl DeadLetter {
    /// Settles it. A tap takes its dead letters with automatic acks, so this does nothing
    /// more than drop it: the dead letter stays in the audit trail whatever the tap does.
    pub async fn ack(self) -> Result<(), Error> {
        Ok(self.delivery.ack().await?)
    }

    /// Drops it. A tap takes its dead letters with automatic acks, so it does not come
    /// back: the audit trail keeps it (see [`Bus::dead_letters`]).
    pub fn release(self) {
        self.delivery.release();
    }
}

/// A tap of dead letters: every dead letter made while it lives, taken from nobody (see
/// [`Bus::dead_letters`]).
#[derive(Debug)]
pub struct DeadLetterTap {
    subscription: Subscription,
}

impl DeadLetterTap {
    /// The next dead letter.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn next(&mut self) -> Option<DeadLetter> {
        let delivery = self.subscription.next().await?;
        Some(DeadLetter {
            note: codec::read_dead_letter(&delivery.message),
            event_id: codec::event_id(&delivery.message),
            message: delivery.message.clone(),
            delivery,
        })
    }

    /// The server-named queue's name.
    pub fn queue(&self) -> &str {
        self.subscription.queue()
    }
}

impl Bus {
    /// Listens to events matching `patterns` from now on, at most once each.
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), mesh::Error> {
    /// use std::sync::Arc;
    /// use mesh::{Bus, Outgoing};
    ///
    /// let broker = mesh::MemoryBroker::new();
    /// let umami = Bus::builder().node("anchor").module("umami")
    ///     .start(Arc::new(broker.transport()))
    ///     .await?;
    /// let mut sites = umami.listen(["module.umami.site.*"]).await?;
    /// umami.emit_outgoing(Outgoing::json("site.created", &"blog")?).await?;
    /// let seen = sites.next().await.expect("the bus is open")?;
    /// assert_eq!(seen.meta.key().as_str(), "module.umami.site.created");
    /// assert_eq!(&seen.event[..], b"\"blog\"");
    /// # Ok(()) }
    /// ```
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

    /// Taps the dead letters this bus may read: an exclusive, auto-delete, server-named
    /// queue of its own, bound to `mesh.events.dead`, with automatic acks (at-most-once,
    /// like [`listen`](Bus::listen)). A module's tap is bound on `*.<module>.events`,
    /// `*.<module>.events.retry.*` and `serve.<module>.#`: the dead letters its own queues
    /// made (each published under its queue's name), which is all the access plan lets a
    /// module read; a context's or the node's taps every dead
    /// letter, as [`all_dead_letters`](Bus::all_dead_letters) does. The in-memory broker
    /// routes dead letters the same way (under their queue's name), so a module's tap sees
    /// the same there; it has no users and no permissions, so nothing refuses a tap on `#`.
    ///
    /// It sees the dead letters made from the moment this returns, and takes none from
    /// anyone: the audit loggers record each one in their own queues
    /// (`<node>.audit-logger.dead`), which is where dead letters are kept, listed and
    /// re-driven (`mesh dead list`, `mesh dead redrive`). Dead letters made before the tap
    /// started, or while it was not connected, are not shown to it; nothing remains when it
    /// is dropped. [`DeadLetter::ack`] and [`DeadLetter::release`] settle nothing on the
    /// broker. A dead letter the broker made itself (a delivery limit, an expiry) keeps the
    /// original event's key: only [`all_dead_letters`](Bus::all_dead_letters) sees it.
    ///
    /// (Before, this consumed the shared durable queue `mesh.dead-letters` with manual
    /// acks, so a module reading dead letters took them away from the audit trail; that
    /// queue is retired.)
    pub async fn dead_letters(&self) -> Result<DeadLetterTap, Error> {
        let patterns = match self.identity() {
            crate::identity::Identity::Module(module) => vec![
                TopicPattern::parse(&format!("*.{module}.events"))?,
                TopicPattern::parse(&format!("*.{module}.events.retry.*"))?,
                TopicPattern::parse(&format!("serve.{module}.#"))?,
            ],
            _ => Vec::new(),
        };
        self.tap_dead_letters(patterns).await
    }

    /// Taps every dead letter (bound on `#`), as [`dead_letters`](Bus::dead_letters) does
    /// otherwise. Under the access plan only the operator's and the audit logger's users may
    /// read them all: a module's user is refused (`Forbidden`).
    pub async fn all_dead_letters(&self) -> Result<DeadLetterTap, Error> {
        self.tap_dead_letters(Vec::new()).await
    }

    /// A tap bound on `patterns` (`#` when there is none).
    async fn tap_dead_letters(&self, patterns: Vec<TopicPattern>) -> Result<DeadLetterTap, Error> {
        let subscription = self
            .inner
            .transport
            .subscribe(SubscriptionSpec {
                queue: QueueSpec::DeadLetters(DeadQueue::Tap),
                patterns,
                prefetch: crate::bus::DEFAULT_PREFETCH,
                retry_delays: Vec::new(),
            })
            .await?;
        Ok(DeadLetterTap { subscription })
    }
}
