//! An in-process broker with RabbitMQ's semantics, behind mesh's transport seam.
//!
//! [`MemoryBroker`] holds what a RabbitMQ vhost would: the topic exchanges `mesh.events`,
//! `mesh.rpc` and `mesh.events.dead`, queues with their bindings, consumers and unsettled
//! deliveries. [`MemoryTransport`] is one connection to it and implements
//! [`mesh_core::Transport`]; several transports on one broker are several nodes or modules
//! sharing a broker. The SDK cannot tell it from the RabbitMQ transport: both pass one
//! conformance suite.
//!
//! The mechanics follow the broker, not a simplification of it:
//!
//! - topic routing with RabbitMQ's matching; a queue bound by several matching patterns
//!   receives one copy;
//! - competing consumers, round robin among those with room under their prefetch;
//! - manual acks; a release (or a delivery dropped undecided, or a closed connection)
//!   puts the message back at the front of its queue, redelivered, its delivery count
//!   (`x-delivery-count`) incremented;
//! - the retry ladder as delay timers that put a fresh copy at the tail of the consumer's
//!   own queue, like TTL retry queues dead-lettering through `mesh.retry`;
//! - per-message expiration: a message that waited longer is dropped, never delivered;
//! - exclusive, auto-delete, server-named queues with automatic acks;
//! - request/reply through `mesh.rpc`, a per-connection reply queue and correlation ids;
//! - dead letters on `mesh.events.dead` routed under the dead-lettering queue's name (each
//!   keeping its event's key), so a module's tap, bound on its own queues' names, reads its
//!   own dead letters only, as under RabbitMQ's access plan.
//!
//! It has no users: nothing carries a validated user, no permission refuses a publish under
//! another module's key or a tap on `#`, and `enforce_identity` dead-letters every event. One
//! process shares one memory; broker-enforced identity is RabbitMQ's (`docs/SECURITY.md`).
//!
//! Timers use tokio's clock, so tests may pause it (`tokio::time::pause()`).
//!
//! Inside, the broker is a functional core behind a thin shell. The state (exchanges,
//! bindings, queues, consumers, connections) changes only through synchronous transitions
//! that return effects — deliver a message on a slot reserved in a consumer's channel, start
//! a retry copy's timer, wait for room in a full channel, answer a call, drop a channel —
//! and the broker performs those effects after releasing its lock, in the order the
//! transitions happened. No task starts, no acker is built and nothing whose drop takes the
//! lock again is dropped while the lock is held, and the state knows nothing of the broker,
//! the ackers or the transport (its modules import none of them).
//!
//! Architecture invariant: this crate knows mesh-core's wire types and names only; it never
//! decides what happens to an event (that is the SDK's), and it does no I/O.

#![warn(missing_docs)]

mod acker;
mod broker;
mod state;
mod transport;

pub use broker::MemoryBroker;
pub use transport::MemoryTransport;
