//! The RabbitMQ binding of mesh's transport seam ([`mesh_core::Transport`]).
//!
//! [`AmqpTransport`] does the mechanics the wire contract (`docs/CONTRACT.md`) asks of a
//! broker; the SDK decides what happens to an event. It keeps two connections, each owned by a task:
//!
//! - `<prefix>.publish` publishes with confirms through a bounded unconfirmed window: a
//!   publish waits for room there (the backpressure), and each message stays in the window,
//!   whole, until the broker acks or nacks it (and is resent after a failure); the
//!   connection is separate because RabbitMQ blocks publishing connections during alarms,
//!   and consumers must keep acking then;
//! - `<prefix>.consume` carries declarations (each on a channel of its own, so a refused one
//!   only closes that channel), one channel per subscription, and the RPC reply queue.
//!
//! # Topology
//!
//! Made sure of at connect (a passive declare, and a declaration only of one that is missing,
//! so a module user without `configure` permission on them starts): durable topic exchanges
//! `mesh.events`, `mesh.rpc`, `mesh.events.dead`, `mesh.retry`, `mesh.logs` and `mesh.replies`
//! (not the retired direct `mesh.reply`; no queue: the shared `mesh.dead-letters` of old is
//! retired, see [`AmqpTransport::unbind_retired_dead_queue`]).
//! Per subscription:
//!
//! | queue | arguments | bindings |
//! |---|---|---|
//! | `QueueSpec::Durable { name }` | `x-queue-type` (quorum by default), `x-dead-letter-exchange = mesh.events.dead`, quorum: `x-delivery-limit` | exactly the spec's patterns on `mesh.events` (others are removed) |
//! | `<name>.retry.<label>` per retry step (at most 15 min) | `x-queue-type` only (one declared by an earlier version, with `x-message-ttl` and dead-lettering, is kept as it is) | its own name on `mesh.retry` (and `<name>` on `mesh.retry` on its own name, for the copies coming back) |
//! | `serve.<key>` | `x-queue-type`, quorum: `x-delivery-limit` | `<key>` on `mesh.rpc` |
//! | `QueueSpec::DeadLetters(DeadQueue::Durable { name })` | `x-queue-type` only: never dead-lettered, no delivery limit | `#` on `mesh.events.dead` |
//! | ephemeral, RPC reply, `QueueSpec::DeadLetters(DeadQueue::Tap)` | exclusive, auto-delete, server-named | the patterns on `mesh.events` (ephemeral), its reply key `<user>.<queue>` on `mesh.replies`, and on the retired `mesh.reply` while it exists (RPC reply), `#` on `mesh.events.dead` (tap) |
//! | `QueueSpec::DeadLetters(DeadQueue::Retired)` | never declared: the retired `mesh.dead-letters` as it stands, consumed only while it exists | — |
//!
//! Everything declared is recorded as data in a [`Topology`] (see
//! [`AmqpTransport::topology`]) so that a reconnect can replay it. Bindings a durable queue
//! no longer asks for are found through an [`EventBindings`] the transport is connected
//! with: RabbitMQ's management HTTP API, whose client lives in `meshbus-admin` and which the
//! SDK's `amqp` feature joins to the transport, asked only when configured or on a loopback
//! broker.
//!
//! # Settling a delivery
//!
//! `ack` is a `basic.ack` (coalesced with `multiple` when consecutive deliveries are done,
//! held back up to 1 ms for more while fewer than half the prefetch is decided and other
//! deliveries of the channel are with their handlers or nobody awaits the ack
//! (`Delivery::ack_detached`); `Delivery::ack_all` hands a channel's acks to it in one command);
//! `release`, or dropping the delivery undecided, is a `basic.nack` with requeue; `retry`
//! publishes the copy to `mesh.retry` under the step's retry queue's name and `dead_letter` to
//! `mesh.events.dead`, both persistent and mandatory, and ack the original only once the copy
//! is confirmed (a subscription's **retry forwarders**, one consumer per retry queue, hold
//! each copy for its step and then publish it back to `mesh.retry` under the queue's name,
//! confirmed, before they ack it: the broker's TTL and dead-lettering play no part; see
//! `docs/CONTRACT.md`, "Retry forwarders"; a copy that fails to publish for a passing reason
//! is sent again, its delivery held, for up to 30 s before the delivery is released, so a
//! burst of quick failures cannot run down a quorum queue's delivery limit); `reply` publishes to `mesh.replies` (the retired `mesh.reply` for a `reply_to` of an earlier caller, `amq.…`) under the request's `reply_to` with its
//! correlation id, then acks. Nothing mesh publishes goes through the default exchange but an
//! operator's re-driven dead letter (`Target::Queue`). Quorum queues
//! report `x-delivery-count` as [`Delivery::delivery_count`](mesh_core::Delivery); classic
//! queues report `None`. The broker's `x-delivery-count` header itself is removed from the
//! message, so a republished copy never carries a stale count.
//!
//! Ephemeral subscriptions consume with automatic acks: settling is a no-op, and as the
//! prefetch does not apply to automatic acks, a reader slower than the publishers buffers
//! in memory.
//!
//! A message published under another routing key than its own (to a retry queue, or
//! straight to a queue with `Target::Queue`) carries its own in the transport's private
//! `x-mesh-routing-key` header, because the broker delivers it under the queue's name; the
//! consumer side restores it and removes the header.
//!
//! # Recovery
//!
//! At-least-once through failures is the point, so every loss is detected and repaired
//! without the caller's help; the SDK above sees, at most, redeliveries.
//!
//! **Who owns what.** Each connection is held by a connection owner (`connection::owner`), one piece for
//! both: it watches for the loss (close, socket, heartbeats), reconnects through the
//! addresses with backoff and jitter, and reports the lifecycle; it lives inside its link's
//! task, which keeps only its own reactions. The publish task owns the publishing
//! connection's owner, its confirm channel and the unconfirmed window (`publisher`), and on
//! a loss resends the window and fails what is not resent; the consume link's supervisor
//! owns the consume connection's owner and hands out channels (`connection::link`), replays the
//! topology before a new connection counts as up (up to 16 declarations in flight together,
//! `lanes`), and tells consumers to re-attach; each subscription's pump owns its consumer's
//! lifecycle (cancel, re-attach) while the subscription reads the consumer's stream itself
//! (`consumer`). Everything else holds cheap handles. What decides correctness inside the
//! publish task and each ack tracker is a state machine without I/O (`publisher::window`,
//! `consumer::ack`) that the task only feeds and obeys, tested alone with random
//! interleavings of broker events.
//!
//! **Detection.** A connection is lost when the broker closes it (`connection.close`: a
//! forced close, a node shutting down), its socket fails (a TCP cut is seen at once), or two
//! heartbeat intervals pass without a frame (a silent partition is seen within about twice
//! the [heartbeat](AmqpOptions::heartbeat)). A channel can also be closed by the broker
//! while its connection stays up (a refused declaration, an oversized message, a consumer
//! timeout), and a consumer cancelled (`basic.cancel`, when its queue is deleted); those are
//! seen per channel and per consumer.
//!
//! **Reconnecting.** Each connection owner reconnects with exponential backoff and jitter
//! ([`AmqpOptions::reconnect_backoff`], 100 ms doubling to 5 s), trying the
//! [addresses](AmqpOptions::addresses) in turn starting after the lost one. The consume
//! connection declares the recorded [`Topology`] again (exchanges, queues, bindings) before
//! it counts as up; then every consumer re-attaches on a fresh channel, declaring its own
//! queue and bindings again (so a deleted queue comes back) and setting its prefetch again;
//! the RPC reply queue is created anew by the next call.
//!
//! **The window.** Messages stay in the unconfirmed window, whole, until the broker settles
//! them. After a lost channel or connection, those not settled are published again in their
//! order on the new channel (numbered anew), with the same event id: a consumer may see one
//! twice, and dedups by `x-event-id`. The window is bounded in count
//! ([`AmqpOptions::confirm_window`]) and bytes ([`AmqpOptions::max_unconfirmed_bytes`]);
//! when it is full — a long outage, or a broker alarm blocking the connection — `publish`
//! waits for room until its deadline, then fails with `Backpressure`: never unbounded
//! memory, never a hang, never a silent drop. A `Confirm` waits through reconnects until its
//! deadline (`Timeout`; the message may still be delivered). Not resent: a message the
//! broker refused as too large (`TooLarge`; the others on that channel are resent), and RPC
//! requests (their calls fail at once with `ConnectionLost`; later calls work once the
//! connection is back).
//!
//! **Stale delivery tags.** A delivery can only be settled on the channel it came on: its
//! acker holds that channel's ack tracker, never the one of a replacement. After a loss,
//! settling a delivery of the old channel fails with `ConnectionLost` and the broker
//! redelivers the message on the new one; a delivery tag is never sent on a channel it does
//! not belong to. [`AmqpStats::unknown_delivery_tag_closes`] counts the channel closes that
//! would betray a violation.
//!
//! **Closing.** [`AmqpTransport::close`] signals every consumer, ack tracker and the reply
//! queue to close its channel (an ack tracker's unsettled deliveries go back to the queue),
//! waits until the broker acknowledged each of those closes (at most 10 s, for a broker that
//! stopped answering), then closes the publishing and consume connections; nothing it opened
//! is still closing when it returns, so a program may drop its runtime right away. It must:
//! the client library hands a `channel.close-ok` to the task that asked for the close and
//! panics when that task is gone, as it is once the runtime dropped it. For the same reason
//! no channel is dropped open (the library would close it on a detached task of its own).
//!
//! **Watching it.** [`AmqpTransport::health`] says whether the transport is ready
//! (connected, not blocked, every consumer attached); [`AmqpTransport::lifecycle`] streams
//! [`Lifecycle`] events (also logged with `tracing`); [`AmqpTransport::stats`] counts
//! reconnects, resends, channel closes, cancelled and re-attached consumers, and gauges the
//! unconfirmed window and the time spent blocked.
//!
//! # TLS and credentials
//!
//! `amqps://` URLs (or [`AmqpOptions::tls`]) connect with TLS through rustls (ring provider):
//! the server is verified against `cacertfile` or else the system's root store, a client
//! certificate is given when `certfile`/`keyfile` are set, and `verify=verify_none` (logged as
//! a warning) turns verification off. A failed handshake is a `TransportErrorKind::Tls` error
//! whose source is a [`TlsError`] saying why ([`TlsErrorKind`]: unknown CA, name mismatch,
//! expired, client certificate required…). The CA, certificate, key and
//! [password file](AmqpOptions::password_file) are read again at every (re)connect, so a
//! rotated secret takes effect without a restart. The password is redacted from every
//! `Debug`, `Display`, error and log line; the client library's `traces` feature, which would
//! log the login frame, is not enabled.
//!
//! Architecture invariant: no `amqprs` type appears in this crate's public API; values are
//! mapped to and from `mesh_core::wire` types at the edge (`convert`). The crate speaks AMQP
//! only: no HTTP, no management API (that is `meshbus-admin`).

#![warn(missing_docs)]

#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub mod bench_internals;
mod blocking;
mod connection;
mod consumer;
mod convert;
mod declare;
mod error;
mod event_bindings;
mod gate;
mod lanes;
mod lifecycle;
mod options;
mod plain;
#[cfg(test)]
mod proptesting;
mod publisher;
mod rpc;
mod stats;
mod tls;
mod topology;
mod transport;

pub use connection::ConnectRefused;
pub use event_bindings::EventBindings;
pub use lifecycle::{Lifecycle, Link};
pub use options::{redact_url, AmqpOptions, AuthMechanism, BrokerAddress, QueueType, URL_ENV};
pub use plain::{PlainFollower, PlainLink, PlainMessage, PlainPublisher, CLIENT_LOG_TARGET};
pub use tls::{TlsError, TlsErrorKind, TlsOptions, TlsVerify};
pub use topology::{BindingDecl, ExchangeDecl, QueueDecl, Topology};
pub use transport::{AmqpStats, AmqpTransport};
