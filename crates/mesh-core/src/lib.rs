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
//! - [`provenance`]: whether a dead letter's claims may be believed;
//! - [`saga`]: a saga's transition as an event (what the console shows of a saga);
//! - [`transport`]: the seam every transport implements.
//!
//! # Example
//!
//! An event's routing key, the patterns a consumer binds, and the message a transport
//! carries, encoded and decoded again:
//!
//! ```
//! use mesh_core::{codec, Envelope, EventId, Headers, RoutingKey, Timestamp, TopicPattern};
//!
//! let key = RoutingKey::parse("module.billing.invoice.paid")?;
//! assert!(TopicPattern::parse("module.billing.#")?.matches(key.as_str()));
//! assert!(!TopicPattern::parse("module.*.paid")?.matches(key.as_str()));
//!
//! let event = Envelope {
//!     id: EventId::new(),
//!     key,
//!     source: "billing".into(),
//!     node: "n1".into(),
//!     time: Timestamp::now(),
//!     causation_id: None,
//!     schema: None,
//!     extra_headers: Headers::new(),
//!     body: r#"{"invoice":7}"#.into(),
//! };
//! let message = codec::encode(&event);
//! assert_eq!(message.routing_key, "module.billing.invoice.paid");
//! assert_eq!(codec::decode(&message)?, event);
//!
//! // A key that breaks the contract is refused with a typed error, never half-parsed.
//! assert!(RoutingKey::parse("billing.invoice.paid").is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
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
pub mod provenance;
pub mod saga;
pub mod text;
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
    NO_SERVER_CHECK,
};
pub use wire::{HeaderValue, Headers, Properties, WireMessage};
