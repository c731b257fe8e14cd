//! mesh-logs: a process's log records on the `mesh.logs` exchange, and a tail of them.
//!
//! The third exchange of the topology, beside `mesh.events` and `mesh.rpc`, made for speed
//! and for never hurting the program or the broker:
//!
//! - **`mesh.logs`** is a durable *topic* exchange (declaring it costs nothing and it
//!   survives a broker restart, so every shipper and tail agrees on its arguments); the
//!   records themselves are **transient** (delivery mode 1), published **without confirms**,
//!   and consumed **without acks**. With nobody tailing, no queue is bound and the broker
//!   drops each record on arrival: an unread logs exchange costs the broker no memory.
//! - The routing key is `<node>.<source>.<level>` (`anchor.billing.warn`), so a tail picks
//!   by pattern: `anchor.#`, `*.billing.*`, `#.error`.
//! - The body is one JSON [`LogRecord`].
//!
//! Shipping ([`start`]): a [`LogsLayer`] (a `tracing_subscriber::Layer`) turns each event
//! into a record and *tries* to put it in a bounded buffer; when the buffer is full the
//! record is dropped and counted (`mesh_logs_dropped_total`), so logging never waits for
//! the broker. Every record the layer takes (`mesh_logs_logged_total`) ends in exactly one
//! counter: published (`mesh_logs_published_total`), dropped, or lost
//! (`mesh_logs_lost_total`: lost with a connection, or left in the buffer when
//! [`Logs::shutdown`] timed out), so after a shutdown they add up ([`LogsStats`]). A background task publishes what the buffer holds on a connection of its own
//! (`<node>.<source>.logs.consume`), a `mesh_amqp::PlainLink` whose owner task in mesh-amqp
//! reconnects it with the broker options' backoff; after a loss the shipper only waits for a
//! publisher on the next connection.
//!
//! Tailing ([`tail`]): an exclusive, auto-delete, server-named queue bound to one pattern,
//! consumed with automatic acks on a connection of its own (`mesh.logs.tail.consume`), read
//! as a [`Tail`] stream of records. The queue holds at
//! most [`TAIL_QUEUE_MAX_LENGTH`] records (the oldest go first), and the stream buffers
//! [`TAIL_BUFFER`] more, dropping and counting past that, so a slow reader bounds both the
//! broker's memory and its own.
//!
//! ```no_run
//! use tracing_subscriber::layer::SubscriberExt;
//! use tracing_subscriber::util::SubscriberInitExt;
//! # async fn run() -> Result<(), mesh_logs::LogsError> {
//! let logs = mesh_logs::start(mesh_logs::LogsOptions::new(
//!     "amqp://guest:guest@127.0.0.1:5672/%2F",
//!     "anchor",
//!     "billing",
//! )?)?;
//! tracing_subscriber::registry()
//!     .with(tracing_subscriber::fmt::layer())
//!     .with(logs.layer())
//!     .init();
//! tracing::info!(plan = "gold", "quote computed"); // → anchor.billing.info
//!
//! let mut tail = mesh_logs::tail("amqp://guest:guest@127.0.0.1:5672/%2F", "#.error").await?;
//! while let Some(record) = tail.next().await {
//!     println!("{record}");
//! }
//! logs.shutdown(std::time::Duration::from_secs(5)).await; // publishes what is buffered
//! # Ok(()) }
//! ```
//!
//! Architecture invariant: it does not depend on the client library at all; every broker
//! operation goes through mesh-amqp's API (guarded by `mesh`'s `no_client_types` test).
//! Records of the client library's target (`mesh_amqp::CLIENT_LOG_TARGET`) and of
//! `mesh_logs` are never shipped (shipping them would log the shipping); records mesh-amqp
//! logs about the shipper's own connection (a
//! connect, a loss, a failed attempt) are shipped like any other `mesh_amqp` record: none is
//! logged per record published, so shipping cannot feed itself, and the backoff bounds their
//! rate.

#![warn(missing_docs)]

mod connect;
mod error;
mod layer;
mod names;
mod record;
mod shipper;
mod tail;

pub use error::{LogsError, LogsErrorKind};
pub use layer::LogsLayer;
pub use names::{DROPPED_METRIC, LOGGED_METRIC, LOGS_EXCHANGE, LOST_METRIC, PUBLISHED_METRIC};
pub use record::{LogRecord, SpanRecord};
pub use shipper::{start, Logs, LogsOptions, LogsStats, DEFAULT_CAPACITY};
pub use tail::{tail, tail_with, Tail, TAIL_BUFFER, TAIL_QUEUE_MAX_LENGTH};
