//! Broker administration: what mesh asks of RabbitMQ beyond AMQP.
//!
//! - [`management`]: the workspace's one client of RabbitMQ's management HTTP API (the
//!   bindings of a queue, queue arguments, users and permissions, declarations);
//! - [`access`]: the access plan (one broker user per module, context, node, audit logger
//!   and operator, with permissions that let each do only what it owns), compared with the
//!   broker's users and applied through the management API.
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
