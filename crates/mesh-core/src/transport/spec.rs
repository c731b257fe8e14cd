//! What a transport is asked to consume: a subscription's queue ([`QueueSpec`], with
//! [`DeadQueue`] for queues of dead letters), the [`SubscriptionSpec`] around it, and the
//! [`ServeSpec`] of a tool's server.

use std::time::Duration;

#[cfg(doc)]
use super::{Acker, Transport};
use crate::key::ToolKey;
use crate::pattern::TopicPattern;

/// The queue a subscription consumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueSpec {
    /// A durable consumer queue: persistent, dead-lettered, bound to exactly the
    /// subscription's patterns (bindings no longer asked for are removed), with manual
    /// acks.
    Durable {
        /// Its name (see [`crate::naming`]).
        name: String,
    },
    /// An exclusive, auto-delete, server-named queue with automatic acks: at-most-once,
    /// for notification listeners and tails. Nothing remains when it ends.
    Ephemeral,
    /// A queue of dead letters, bound to `mesh.events.dead` on `#` (the subscription's
    /// patterns are ignored).
    DeadLetters(DeadQueue),
}

/// Which queue of dead letters a subscription consumes. Every one is bound to
/// `mesh.events.dead` on `#`, so each sees every dead letter: none takes them from another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadQueue {
    /// A durable queue of one reader's own (the audit logger's `<node>.audit-logger.dead`):
    /// persistent, manual acks, dead letters wait there while the reader is down. It is not
    /// dead-lettered itself (a dead letter's dead letter would loop): a reader settles each
    /// delivery with an ack or a release, never [`Acker::dead_letter`].
    Durable {
        /// Its name (see [`crate::naming`]).
        name: String,
    },
    /// An exclusive, auto-delete, server-named queue with automatic acks: at-most-once,
    /// like a listener. It sees the dead letters made while it lives and takes nothing from
    /// anyone.
    Tap,
    /// The retired queue [`crate::naming::RETIRED_DEAD_QUEUE`], as it stands: consumed with
    /// manual acks, never declared (it fails if the queue is gone). Only for draining it once
    /// unbound, a one-time migration that is no part of [`Transport`]: only a RabbitMQ that an
    /// older mesh ran on holds the queue (`mesh_amqp::AmqpTransport` unbinds and deletes it).
    Retired,
}

/// What to consume and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionSpec {
    /// The queue.
    pub queue: QueueSpec,
    /// The patterns its queue is bound to on `mesh.events` (ignored for dead letters, whose
    /// queues are bound to `mesh.events.dead` on `#`).
    pub patterns: Vec<TopicPattern>,
    /// Deliveries handed out but not yet settled, at most.
    pub prefetch: u16,
    /// The delay steps of the retry ladder (one delay queue each on a broker).
    pub retry_delays: Vec<Duration>,
}

/// What to serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeSpec {
    /// The tool key; its queue is `serve.<key>`.
    pub tool: ToolKey,
    /// Requests handled at once, at most.
    pub prefetch: u16,
}
