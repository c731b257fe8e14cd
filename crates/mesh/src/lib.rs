//! mesh: an event mesh for Rust services.
//!
//! Modules `emit` events and handle them with `on`; tools are `call`ed and `serve`d over
//! request/reply. The wire contract (`docs/CONTRACT.md`) is implemented here and in `mesh-core`; a
//! module never sees an exchange or queue name.
//!
//! A bus runs on a transport: RabbitMQ ([`amqp`], feature `amqp`) in production, or the
//! in-process broker ([`MemoryBroker`], feature `memory`) for tests, examples and a single
//! program; both are default features. Only the transport differs; the module is the same.
//!
//! On RabbitMQ (the module's queue `anchor.umami.events` is durable: it outlives the program
//! and keeps what is emitted while it is away):
//!
//! ```no_run
//! use std::sync::Arc;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct SiteCreated { site: String }
//! impl mesh::Event for SiteCreated {
//!     const KEY: &'static str = "module.umami.site.created";
//! }
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // amqp[s]://user:password@host:port/vhost (%2F is the vhost `/`)
//! let options: mesh::amqp::AmqpOptions = "amqp://guest:guest@127.0.0.1:5672/%2F".parse()?;
//! let transport = mesh::amqp::connect(options).await?;
//! let bus = mesh::Bus::builder()
//!     .node("anchor")
//!     .module("umami")
//!     .on(|incoming: mesh::Incoming<SiteCreated>| async move {
//!         println!("site {} created", incoming.event.site);
//!         Ok(())
//!     })
//!     .start(Arc::new(transport))
//!     .await?;
//! bus.emit(&SiteCreated { site: "blog".into() }).await?; // resolves on the broker's confirm
//! bus.drain().await?;
//! # Ok(()) }
//! ```
//!
//! In process, with nothing to run beside it:
//!
//! ```
//! use std::sync::Arc;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct SiteCreated { site: String }
//! impl mesh::Event for SiteCreated {
//!     const KEY: &'static str = "module.umami.site.created";
//! }
//!
//! # #[tokio::main] async fn main() -> Result<(), mesh::Error> {
//! let broker = mesh::MemoryBroker::new(); // one per process: every transport shares it
//! let bus = mesh::Bus::builder()
//!     .node("anchor")
//!     .module("umami")
//!     .on(|incoming: mesh::Incoming<SiteCreated>| async move {
//!         println!("site {} created", incoming.event.site);
//!         Ok(())
//!     })
//!     .start(Arc::new(broker.transport()))
//!     .await?;
//! bus.emit(&SiteCreated { site: "blog".into() }).await?;
//! bus.drain().await?;
//! # Ok(()) }
//! ```
//!
//! The example `demo` (`cargo run -p meshbus --example demo`, with `MESH_URL=amqp://…` on
//! RabbitMQ) runs three modules through events, retries, a dead letter and tool calls.
//!
//! Delivery is at-least-once: a handler may see an event twice, so handlers are idempotent
//! or wrapped in [`dedup()`]. A handler's `Ok` acks the event; a retryable error sends it down
//! the retry ladder; a permanent error (or exhausted attempts, or a message that breaks
//! the contract) dead-letters it with the reason.
//!
//! An emit resolves on the broker's confirm; given an [`EmitSpool`] ([`BusBuilder::spool`];
//! `meshbus-outbox` has one on a SQLite file), it resolves once the spool kept the event
//! durably instead, and the spool publishes it, after a crash or restart if need be.
//!
//! Contracts: each bus announces what it emits, handles, serves and calls, with the JSON
//! Schemas of their bodies ([`BusBuilder::announce`], [`Bus::contract`]); an event type
//! declares its schema in one line ([`Event::json_schema`], [`Schema::of`]), and a bus may
//! check incoming bodies against them ([`BusBuilder::validate_schemas`], dead letter
//! `schema-invalid`).
//!
//! Observability ([`telemetry`]): spans `mesh.emit`, `mesh.handle`, `mesh.call` and
//! `mesh.serve` through `tracing`, metrics through the `metrics` facade, and, behind
//! features, W3C trace context across the broker (`otel`), an OTLP exporter (`otlp`) and a
//! `/metrics`, `/livez`, `/readyz` endpoint (`prometheus`) for binaries.
//!
//! Architecture invariant: no broker client's type appears in this crate's public API.

#![warn(missing_docs)]

#[cfg(feature = "amqp")]
mod amqp_admin;
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub mod bench_internals;
mod bus;
mod causation;
mod dedup;
mod dispatch;
mod emitter;
mod error;
mod event;
mod handler;
mod identity;
mod incoming;
pub mod layer;
mod listen;
mod outgoing;
mod prepared;
mod rpc;
pub mod schedule;
mod schema;
#[cfg(feature = "service")]
pub mod service;
mod spool;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;

pub use bus::builder::BusBuilder;
pub use bus::pending::PendingEmit;
pub use bus::{Bus, DEFAULT_PREFETCH};
pub use dedup::{dedup, DedupStore, MemoryDedup};
pub use error::{Error, ErrorKind, HandlerError};
pub use event::Event;
pub use identity::Identity;
pub use incoming::{Incoming, Meta};
pub use listen::{DeadLetter, DeadLetterTap, Listener};
pub use outgoing::Outgoing;
pub use prepared::{Prepared, PreparedConfirm};
pub use schema::Schema;
pub use spool::{EmitSpool, SpoolFuture};

// A module's contract, as a bus announces it (`Bus::contract`, `BusBuilder::announce`).
pub use mesh_core::contract::{
    HandlerContract, MessageContract, ModuleContract, ToolContract, ANNOUNCED_EVENT,
    CONTRACT_FORMAT,
};
/// The `schemars` this crate derives schemas with (feature `schemas`): its `JsonSchema`
/// derive is what [`Schema::of`] reads.
#[cfg(feature = "schemas")]
pub use schemars;

pub use mesh_core::{
    codec::DeadLetterNote, DeadReason, EventId, Health, RemoteError, RequestMeta, RetryPolicy,
    RoutingKey, SchemaVersion, Timestamp, TopicPattern, TransportErrorKind,
};
#[cfg(feature = "memory")]
pub use mesh_memory::MemoryBroker;

/// The lower-level door: the wire contract and the [`Transport`](raw::Transport) seam
/// beneath the SDK, for tools that speak to the broker directly (the `mesh` CLI, the audit
/// logger) and for transports of one's own.
///
/// A module has no reason to come here: a [`Bus`] is the way to emit, handle, call and
/// serve. A caller that publishes through a transport itself gives up every rule the bus
/// keeps for it:
///
/// - its keys are not checked to be its own (the bus refuses a key outside its prefix);
/// - its headers are not checked: it may set, or forget, the contract's headers
///   (`x-event-id`, `x-source`, `x-time`, …) and the runtime's own (`x-mesh-*`), which
///   consumers then judge as any other publisher's (a malformed event is dead-lettered
///   `undecodable`, a foreign `x-source` `forged-source`);
/// - no causation, trace context, metrics or `mesh.emit` span are recorded;
/// - a delivery taken from a subscription is settled by the caller: nothing acks it only
///   after a handler succeeded, retries it down the ladder or dead-letters it with a reason.
///
/// What the broker enforces still holds: with the access plan's users
/// (`docs/SECURITY.md`), a connection writes only under its own prefix, and the broker
/// stamps the validated user on every message.
pub mod raw {
    pub use mesh_core::*;
}

/// The RabbitMQ transport, and the broker's administration through its management API
/// ([`management`](amqp::management), [`access`](amqp::access), from `meshbus-admin`).
///
/// [`connect`](amqp::connect) connects an [`AmqpTransport`](amqp::AmqpTransport) that finds
/// a durable queue's stale bindings through the management API.
#[cfg(feature = "amqp")]
pub mod amqp {
    pub use crate::amqp_admin::{connect, connect_with_management, management_options};
    pub use mesh_admin::{access, management};
    pub use mesh_amqp::*;
}

/// The README's tour of the API, compiled with the doctests so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeTour;
