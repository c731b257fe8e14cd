//! Effects: what a transition of the state asks the broker to do once its lock is released.
//!
//! A transition never sends on a channel, starts a task, builds an acker or drops anything
//! whose drop could take the broker's lock again; it describes that as an [`Effect`] and
//! leaves it in the [`Effects`] it was given. The broker performs them, in the order the
//! transitions happened, after unlocking.

use std::sync::Arc;
use std::time::Duration;

use mesh_core::transport::Delivery;
use mesh_core::WireMessage;
use tokio::sync::{mpsc, oneshot};

/// Identifies one connection (one `MemoryTransport` and its clones).
pub(crate) type ConnectionId = u64;

/// What an acker needs to settle one delivery with manual acks.
#[derive(Debug, Clone)]
pub(crate) struct Ticket {
    /// The queue the delivery came from.
    pub(crate) queue: String,
    /// Its delivery tag.
    pub(crate) tag: u64,
    /// The connection of the consumer it went to.
    pub(crate) connection: ConnectionId,
    /// The consumer's retry ladder.
    pub(crate) retry_delays: Arc<[Duration]>,
}

/// A message handed to a consumer: the broker builds the delivery (and its acker) and
/// sends it on the slot the state reserved in the consumer's channel.
#[derive(Debug)]
pub(crate) struct Handout {
    /// The slot in the consumer's channel, reserved under the lock, so the send cannot fail
    /// for want of room.
    pub(crate) permit: mpsc::OwnedPermit<Delivery>,
    /// The message.
    pub(crate) message: WireMessage,
    /// Delivered before.
    pub(crate) redelivered: bool,
    /// How many times it was delivered before.
    pub(crate) delivery_count: u32,
    /// The queue it comes from.
    pub(crate) queue: String,
    /// How to settle it; `None` for automatic acks (the message already left its queue).
    pub(crate) ticket: Option<Ticket>,
}

/// A copy on the retry ladder: after its delay it goes to the tail of its queue, the way a
/// TTL retry queue dead-letters back to its consumer's queue through `mesh.retry`.
#[derive(Debug)]
pub(crate) struct DelayedCopy {
    /// The queue it returns to.
    pub(crate) queue: String,
    /// The copy.
    pub(crate) copy: WireMessage,
    /// How long it waits.
    pub(crate) delay: Duration,
}

/// A consumer held back only by its full channel: once its subscriber takes a delivery out,
/// the broker reports `State::room_freed`.
#[derive(Debug)]
pub(crate) struct RoomWaiter {
    /// The consumer's queue.
    pub(crate) queue: String,
    /// The consumer.
    pub(crate) consumer: u64,
    /// Its channel, to wait on.
    pub(crate) tx: mpsc::Sender<Delivery>,
}

/// Something the state let go of that must be dropped only once the lock is released.
#[derive(Debug)]
#[expect(dead_code, reason = "held only to be dropped outside the lock")]
pub(crate) enum Discarded {
    /// A consumer's channel: dropping its last sender drops the deliveries buffered in it,
    /// whose ackers take the broker's lock to release their messages.
    Channel(mpsc::Sender<Delivery>),
    /// Calls that will get no reply: dropping them wakes the callers, who fail with
    /// `Closed`.
    Calls(Vec<oneshot::Sender<WireMessage>>),
}

/// One thing for the broker to do after unlocking.
#[derive(Debug)]
pub(crate) enum Effect {
    /// Deliver a message to a consumer.
    Deliver(Handout),
    /// Start the timer of a copy on the retry ladder; when it fires, the broker reports
    /// `State::return_delayed`.
    Delay(DelayedCopy),
    /// Wait for room in a consumer's channel.
    AwaitRoom(RoomWaiter),
    /// Hand a reply to the call waiting for it; if that call is gone meanwhile, the broker
    /// reports `State::late_reply`.
    Answer {
        /// The caller's connection.
        connection: ConnectionId,
        /// The waiting call.
        call: oneshot::Sender<WireMessage>,
        /// The reply.
        reply: WireMessage,
    },
    /// Drop it.
    Discard(Discarded),
}

/// The effects of one or more transitions, in the order they arose.
#[derive(Debug, Default)]
pub(crate) struct Effects(Vec<Effect>);

impl Effects {
    /// Adds an effect.
    pub(crate) fn push(&mut self, effect: Effect) {
        self.0.push(effect);
    }

    /// The effects, to perform in order.
    pub(crate) fn into_vec(self) -> Vec<Effect> {
        self.0
    }
}
