//! The seam between the SDK and a transport (in-memory, RabbitMQ).
//!
//! The SDK decides *what* happens to an event (decode, dispatch, retry or give up, dedup);
//! a transport does the mechanics the broker offers: publish with confirms, declare and
//! consume queues with a prefetch, ack, send a copy down the retry ladder, set a message
//! aside as a dead letter, and request/reply. Every transport passes the same conformance
//! suite, so the SDK cannot tell them apart.
//!
//! One module per concern, everything re-exported here:
//!
//! - `error`: [`TransportError`], its [`TransportErrorKind`], the boxed cause [`BoxError`];
//! - `publish`: [`Target`], [`PublishOptions`] and the broker's [`Confirm`];
//! - `spec`: what to consume or serve ([`SubscriptionSpec`], [`QueueSpec`], [`DeadQueue`],
//!   [`ServeSpec`]);
//! - `acker`: [`Acker`], how a transport settles one delivery, and [`AckFailed`], who hears
//!   of an ack handed on that could not be sent;
//! - `batch`: acks sent together ([`AckBatch`], [`AckGroup`], [`BatchAckError`]);
//! - `delivery`: [`Delivery`], one message and its acker;
//! - `subscription`: [`Subscription`] and the [`DeliveryFeed`] a transport may feed it from;
//! - `health`: [`Health`], for readiness checks;
//! - `stats`: [`TransportStats`], for metrics;
//! - `seam`: the [`Transport`] trait itself.

mod acker;
mod batch;
mod delivery;
mod error;
mod future;
mod health;
mod publish;
mod seam;
mod spec;
mod stats;
mod subscription;

pub use acker::{AckFailed, Acker};
pub use batch::{AckBatch, AckGroup, BatchAckError};
pub use delivery::Delivery;
pub use error::{BoxError, TransportError, TransportErrorKind};
pub use future::BoxFuture;
pub use health::Health;
pub use publish::{Confirm, PublishOptions, Target};
pub use seam::{Transport, NO_SERVER_CHECK};
pub use spec::{DeadQueue, QueueSpec, ServeSpec, SubscriptionSpec};
pub use stats::TransportStats;
pub use subscription::{DeliveryFeed, Subscription};
