//! Broker administration: what mesh asks of RabbitMQ beyond AMQP.
//!
//! - [`management`]: the workspace's one client of RabbitMQ's management HTTP API (the
//!   bindings of a queue, queue arguments, users and permissions, declarations);
//! - [`access`]: the access plan (one broker user per module, context, node, audit logger
//!   and operator, with permissions that let each do only what it owns), compared with the
//!   broker's users and applied through the management API;
//! - [`topology`]: the topology plan (the exchanges, queues and bindings the contract wants
//!   for a node, compared with the broker's into a list of differences), pure data that
//!   `mesh topology show|plan|apply` reads and applies through the management API.
//!
//! The RabbitMQ transport (`meshbus-amqp`) knows nothing of HTTP: it asks for a queue's
//! bindings through a trait of its own, which the SDK's `amqp` feature implements with this
//! crate's client.
//!
//! Architecture invariant: this crate speaks HTTP, never AMQP; it depends on `meshbus-core`
//! for names and patterns, never on the transport. No `reqwest`, `rustls` or `url` type
//! appears in its public API.

#![warn(missing_docs)]

pub mod access;
pub mod management;
pub mod topology;
