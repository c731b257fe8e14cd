//! The RabbitMQ binding of mesh's transport seam ([`mesh_core::Transport`]).
//!
//! [`AmqpTransport`] does the mechanics ADR 42 asks of a broker; the SDK decides what
//! happens to an event. It keeps two connections, each owned by a task:
//!
//! - `<prefix>.publish` publishes with confirms through a bounded unconfirmed window: a
//!   publish waits for room there (the backpressure), and each message stays in the window,
//!   whole, until the broker acks or nacks it; the connection is separate because RabbitMQ
//!   blocks publishing connections during alarms, and consumers must keep acking then;
//! - `<prefix>.consume` carries declarations (each on a channel of its own, so a refused one
//!   only closes that channel), one channel per subscription, and the RPC reply queue.
//!
//! # Topology
//!
//! Declared at connect: durable topic exchanges `mesh.events`, `mesh.rpc` and
//! `mesh.events.dead`, and the durable queue `mesh.dead-letters` bound to `mesh.events.dead`
//! on `#`. Per subscription:
//!
//! | queue | arguments | bindings |
//! |---|---|---|
//! | `QueueSpec::Durable { name }` | `x-queue-type` (quorum by default), `x-dead-letter-exchange = mesh.events.dead`, quorum: `x-delivery-limit` | exactly the spec's patterns on `mesh.events` (others are removed) |
//! | `<name>.delay.<label>` per retry step | `x-message-ttl` = the step, `x-dead-letter-exchange = ""`, `x-dead-letter-routing-key = <name>`, quorum: `x-dead-letter-strategy = at-least-once`, `x-overflow = reject-publish` | none: copies arrive through the default exchange |
//! | `serve.<key>` | `x-queue-type`, quorum: `x-delivery-limit` | `<key>` on `mesh.rpc` |
//! | ephemeral, RPC reply | exclusive, auto-delete, server-named | the patterns (ephemeral) |
//!
//! Everything declared is recorded as data in a [`Topology`] (see
//! [`AmqpTransport::topology`]) so that a reconnect can replay it.
//!
//! # Settling a delivery
//!
//! `ack` is a `basic.ack` (coalesced with `multiple` when consecutive deliveries are done);
//! `release`, or dropping the delivery undecided, is a `basic.nack` with requeue; `retry`
//! publishes the copy to the step's delay queue and `dead_letter` to `mesh.events.dead`, both
//! persistent and mandatory, and ack the original only once the copy is confirmed; `reply`
//! publishes to the request's `reply_to` with its correlation id, then acks. Quorum queues
//! report `x-delivery-count` as [`Delivery::delivery_count`](mesh_core::Delivery); classic
//! queues report `None`. The broker's `x-delivery-count` header itself is removed from the
//! message, so a republished copy never carries a stale count.
//!
//! Ephemeral subscriptions consume with automatic acks: settling is a no-op, and as the
//! prefetch does not apply to automatic acks, a reader slower than the publishers buffers
//! in memory.
//!
//! A message published under another routing key than its own (to a delay queue, or
//! straight to a queue with `Target::Queue`) carries its own in the transport's private
//! `x-mesh-routing-key` header, because the broker delivers it under the queue's name; the
//! consumer side restores it and removes the header.
//!
//! # Not yet
//!
//! Recovery comes next: today a lost connection fails what is in flight with
//! `ConnectionLost` and ends the subscriptions on it. The pieces it needs are in place: the
//! unconfirmed window keeps whole messages, the topology is data, subscriptions get their
//! channels from the link's supervisor, and acks are bound to the channel they came on.
//!
//! Architecture invariant: no `amqprs` type appears in this crate's public API; values are
//! mapped to and from `mesh_core::wire` types at the edge (`convert`).

mod connection;
mod consumer;
mod convert;
mod declare;
mod error;
mod link;
mod management;
mod options;
mod publisher;
mod rpc;
mod topology;
mod transport;

pub use options::{AmqpOptions, BrokerAddress, QueueType, URL_ENV};
pub use topology::{BindingDecl, ExchangeDecl, QueueDecl, Topology};
pub use transport::{AmqpStats, AmqpTransport};
