//! The mesh wire contract as code (`docs/CONTRACT.md`), with no I/O.
//!
//! - [`key`]: routing keys `<origin>.<name>.<event…>`, names, event names and tool keys;
//! - [`pattern`]: topic patterns with RabbitMQ's matching;
//! - [`envelope`]: an event's id, provenance and payload;
//! - [`wire`] and [`codec`]: the message as a transport carries it, and the only code that
//!   knows header names;
//! - [`policy`]: retry policy as plain data;
//! - [`backoff`]: the one backoff schedule (exponential, capped, jittered) every retry loop
//!   of the workspace draws its delays from;
//! - [`naming`]: every exchange and queue name;
//! - [`transport`]: the seam every transport implements.
//!
//! Architecture invariant: this crate performs no I/O and names no broker client's types.

#![warn(missing_docs)]

pub mod backoff;
pub mod codec;
pub mod contract;
pub mod envelope;
pub mod key;
pub mod naming;
pub mod pattern;
pub mod policy;
pub mod transport;
pub mod wire;

pub use codec::{DeadLetterNote, DeadReason, DecodeError, RemoteError, RequestMeta};
pub use envelope::{Envelope, EventId, SchemaVersion, TimeError, Timestamp};
pub use key::{EventName, KeyError, Name, Origin, RoutingKey, ToolKey};
pub use pattern::{topic_matches, TopicPattern};
pub use policy::{PolicyError, RetryPolicy};
pub use transport::{
    AckBatch, AckFailed, AckGroup, Acker, BatchAckError, BoxError, BoxFuture, Confirm, DeadQueue,
    Delivery, DeliveryFeed, Health, PublishOptions, QueueSpec, ServeSpec, Subscription,
    SubscriptionSpec, Target, Transport, TransportError, TransportErrorKind, TransportStats,
};
pub use wire::{HeaderValue, Headers, Properties, WireMessage};
