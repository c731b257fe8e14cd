//! A queue: ready messages in order, deliveries out, competing consumers, and the dispatch
//! that hands the first to the last.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use mesh_core::transport::Delivery;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::debug;

use super::consumer::Consumer;
use super::effect::{ConnectionId, Discarded, Effect, Effects, Handout, RoomWaiter, Ticket};
use super::fault::Fault;
use super::message::Message;

/// What kind of queue, which decides its lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueKind {
    /// Declared by name; belongs to the broker and outlives every connection.
    Durable,
    /// Server-named, exclusive to one connection and auto-delete: deleted with its consumer.
    Ephemeral { owner: ConnectionId },
    /// A connection's reply queue: a reply goes straight to the call waiting for it.
    Reply { owner: ConnectionId },
}

/// A delivery handed out and not settled yet.
#[derive(Debug)]
pub(crate) struct Unacked {
    pub(crate) message: Message,
    consumer: u64,
    connection: ConnectionId,
}

/// A queue: ready messages in order, deliveries out, and competing consumers.
#[derive(Debug)]
pub(crate) struct Queue {
    pub(crate) kind: QueueKind,
    pub(crate) ready: VecDeque<Message>,
    unacked: BTreeMap<u64, Unacked>,
    pub(crate) consumers: Vec<Consumer>,
    /// Where the round robin resumes.
    cursor: usize,
    /// Copies waiting on the retry ladder to come back here.
    pub(crate) delayed: usize,
}

impl Queue {
    /// An empty queue.
    pub(crate) fn new(kind: QueueKind) -> Queue {
        Queue {
            kind,
            ready: VecDeque::new(),
            unacked: BTreeMap::new(),
            consumers: Vec::new(),
            cursor: 0,
            delayed: 0,
        }
    }

    /// The owner of an exclusive (ephemeral or reply) queue.
    pub(crate) fn owner(&self) -> Option<ConnectionId> {
        match self.kind {
            QueueKind::Durable => None,
            QueueKind::Ephemeral { owner } | QueueKind::Reply { owner } => Some(owner),
        }
    }

    /// Deliveries handed out and not settled.
    pub(crate) fn unacked_count(&self) -> usize {
        self.unacked.len()
    }

    /// Ready messages that have not expired at `now`.
    pub(crate) fn depth(&self, now: Instant) -> usize {
        self.ready.iter().filter(|m| !m.is_expired(now)).count()
    }

    /// Puts a message that was handed out back at its original place: ahead of every
    /// newer message, as RabbitMQ requeues.
    fn requeue(&mut self, message: Message) {
        let at = self.ready.partition_point(|m| m.seq < message.seq);
        self.ready.insert(at, message.requeued());
    }

    /// Removes the consumers `ended` picks; their channels are dropped once the lock is
    /// released. Returns how many.
    pub(crate) fn remove_consumers(
        &mut self,
        fx: &mut Effects,
        mut ended: impl FnMut(&mut Consumer) -> bool,
    ) -> usize {
        let before = self.consumers.len();
        let mut kept = Vec::with_capacity(before);
        for mut consumer in self.consumers.drain(..) {
            if ended(&mut consumer) {
                fx.push(Effect::Discard(Discarded::Channel(consumer.tx)));
            } else {
                kept.push(consumer);
            }
        }
        self.consumers = kept;
        before - self.consumers.len()
    }

    /// The queue is deleted: its consumers' channels are dropped once the lock is released.
    pub(crate) fn discard(self, fx: &mut Effects) {
        for consumer in self.consumers {
            fx.push(Effect::Discard(Discarded::Channel(consumer.tx)));
        }
    }

    /// Takes an unsettled delivery out, giving its consumer's prefetch slot back.
    pub(crate) fn take_unacked(&mut self, tag: u64) -> Result<Unacked, Fault> {
        let unacked = self.unacked.remove(&tag).ok_or(Fault::UnknownTag(tag))?;
        if let Some(consumer) = self.consumers.iter_mut().find(|c| c.id == unacked.consumer) {
            consumer.in_flight = consumer.in_flight.saturating_sub(1);
        }
        Ok(unacked)
    }

    /// Puts a released delivery back at its place, redelivered.
    pub(crate) fn release(&mut self, unacked: Unacked) {
        self.requeue(unacked.message);
    }

    /// Puts every unsettled delivery of a connection back, redelivered; returns how many.
    pub(crate) fn requeue_connection(&mut self, connection: ConnectionId) -> usize {
        let tags: Vec<u64> = self
            .unacked
            .iter()
            .filter(|(_, u)| u.connection == connection)
            .map(|(tag, _)| *tag)
            .collect();
        for tag in &tags {
            if let Some(unacked) = self.unacked.remove(tag) {
                self.requeue(unacked.message);
            }
        }
        tags.len()
    }

    /// The next consumer in round-robin order that may take a delivery now, with the slot
    /// reserved in its channel.
    fn next_consumer(&mut self) -> Option<(usize, mpsc::OwnedPermit<Delivery>)> {
        let count = self.consumers.len();
        for offset in 0..count {
            let index = (self.cursor + offset) % count;
            if let Some(permit) = self.consumers[index].reserve() {
                self.cursor = (index + 1) % count;
                return Some((index, permit));
            }
        }
        None
    }

    /// Hands ready messages to consumers with room, round robin, until either runs out;
    /// `next_tag` gives the delivery tags.
    pub(crate) fn dispatch(
        &mut self,
        name: &str,
        now: Instant,
        mut next_tag: impl FnMut() -> u64,
        fx: &mut Effects,
    ) {
        while let Some(front) = self.ready.front() {
            if front.is_expired(now) {
                self.ready.pop_front();
                debug!(queue = name, "expired message dropped");
                continue;
            }
            let Some((index, permit)) = self.next_consumer() else {
                self.await_room(name, fx);
                break;
            };
            let Some(message) = self.ready.pop_front() else {
                break;
            };
            let tag = next_tag();
            let consumer = &mut self.consumers[index];
            debug!(
                queue = name,
                consumer = consumer.id,
                redelivered = message.redelivered,
                delivery_count = message.delivery_count,
                "delivered"
            );
            let ticket = (!consumer.auto_ack).then(|| Ticket {
                queue: name.to_owned(),
                tag,
                connection: consumer.connection,
                retry_delays: Arc::clone(&consumer.retry_delays),
            });
            fx.push(Effect::Deliver(Handout {
                permit,
                message: message.wire.clone(),
                redelivered: message.redelivered,
                delivery_count: message.delivery_count,
                queue: name.to_owned(),
                ticket,
            }));
            if !consumer.auto_ack {
                consumer.in_flight += 1;
                let unacked = Unacked {
                    message,
                    consumer: consumer.id,
                    connection: consumer.connection,
                };
                self.unacked.insert(tag, unacked);
            }
        }
        self.ready.retain(|m| !m.now_or_never);
    }

    /// Ready messages wait and some consumer is held back only by a full channel (its
    /// subscriber has not taken the deliveries out yet): ask the broker to wait for room.
    /// Consumers held back by their prefetch are woken by a settle instead.
    fn await_room(&mut self, name: &str, fx: &mut Effects) {
        for consumer in &mut self.consumers {
            // Not `capacity() > 0` as a reason to skip: the subscriber may have taken a
            // delivery out since the dispatch found the channel full, and nothing else
            // would wake the dispatch then. A waiter finds the room at once instead.
            if consumer.waiting_for_room || consumer.tx.is_closed() || !consumer.below_limit() {
                continue;
            }
            consumer.waiting_for_room = true;
            fx.push(Effect::AwaitRoom(RoomWaiter {
                queue: name.to_owned(),
                consumer: consumer.id,
                tx: consumer.tx.clone(),
            }));
        }
    }
}
