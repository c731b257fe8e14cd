//! mesh: an event mesh for Rust services.
//!
//! Modules `emit` events and handle them with `on`; tools are `call`ed and `serve`d over
//! request/reply. The wire contract (ADR 42) is implemented here and in `mesh-core`; a
//! module never sees an exchange or queue name.
//!
//! ```no_run
//! use std::time::Duration;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct SiteCreated { site: String }
//! impl mesh::Event for SiteCreated {
//!     const KEY: &'static str = "module.umami.site.created";
//! }
//!
//! # async fn example() -> Result<(), mesh::Error> {
//! let broker = mesh::MemoryBroker::new();
//! let bus = mesh::Bus::builder()
//!     .node("anchor")
//!     .module("umami")
//!     .on(|incoming: mesh::Incoming<SiteCreated>| async move {
//!         println!("site {} created", incoming.event.site);
//!         Ok(())
//!     })
//!     .start(std::sync::Arc::new(broker.transport()))
//!     .await?;
//! bus.emit(&SiteCreated { site: "blog".into() }).await?;
//! bus.drain().await?;
//! # Ok(()) }
//! ```
//!
//! Delivery is at-least-once: a handler may see an event twice, so handlers are idempotent
//! or wrapped in [`dedup()`]. A handler's `Ok` acks the event; a retryable error sends it down
//! the retry ladder; a permanent error (or exhausted attempts, or a message that breaks
//! the contract) dead-letters it with the reason.
//!
//! Observability ([`telemetry`]): spans `mesh.emit`, `mesh.handle`, `mesh.call` and
//! `mesh.serve` through `tracing`, metrics through the `metrics` facade, and, behind
//! features, W3C trace context across the broker (`otel`), an OTLP exporter (`otlp`) and a
//! `/metrics`, `/livez`, `/readyz` endpoint (`prometheus`) for binaries.
//!
//! Architecture invariant: no broker client's type appears in this crate's public API.

mod bus;
mod causation;
mod dedup;
mod dispatch;
mod error;
mod event;
mod handler;
mod identity;
mod incoming;
mod listen;
mod rpc;
pub mod telemetry;

pub use bus::{Bus, BusBuilder, Outgoing, PendingEmit, DEFAULT_PREFETCH};
pub use dedup::{dedup, DedupStore, MemoryDedup};
pub use error::{Error, ErrorKind, HandlerError};
pub use event::Event;
pub use identity::Identity;
pub use incoming::{Incoming, Meta};
pub use listen::{DeadLetters, DeadMessage, Listener};
pub use rpc::{INTERNAL, INVALID_REQUEST};

pub use mesh_core::{
    codec::DeadLetter, DeadReason, EventId, Health, RemoteError, RequestMeta, RetryPolicy,
    RoutingKey, SchemaVersion, Timestamp, TopicPattern, Transport, TransportErrorKind,
};
pub use mesh_memory::MemoryBroker;

/// The contract itself, for tools that need the lower layer.
pub use mesh_core as core;

/// The RabbitMQ transport.
#[cfg(feature = "amqp")]
pub mod amqp {
    pub use mesh_amqp::*;
}
