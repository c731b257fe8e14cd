//! The audit logger and the dead-letter store.
//!
//! The audit logger is the mesh's memory: it consumes `<node>.audit-logger.events`, bound to
//! `#` on `mesh.events` (a complete record of every event, since tool calls ride
//! `mesh.rpc`), and its own `<node>.audit-logger.dead`, bound to `#` on `mesh.events.dead`,
//! and stores each event and each dead letter once, in
//! SQLite (the default) or PostgreSQL. The store answers queries (events by pattern, source,
//! node and time; one event; its causation tree; counts; dead letters by queue, reason and
//! time; events that reused another's id) and re-drives dead letters to the consumer that
//! gave up on them.
//!
//! - [`Store`]: the tables, their migrations, queries, and [`Store::redrive`];
//! - [`AuditLogger`]: consumes through any [`mesh_core::Transport`] and batches inserts,
//!   acking only what is committed (see [`logger`] for the rules), recording who published
//!   each event and, with [`AuditOptions::enforce_identity`], refusing an event its
//!   publisher does not own (dead-lettered `forged-source`);
//! - [`AuditService`]: the logger on RabbitMQ with reconnects, what `mesh audit run` (and
//!   the `mesh-audit` binary, both in the `mesh-cli` crate) runs;
//! - [`Error::hint`]: what to do when the store cannot be opened (create the directory,
//!   start PostgreSQL, …); [`StoreOptions::create_if_missing`] lets the logger create a
//!   SQLite store, with its directory, from a plain `sqlite://PATH`;
//! - [`telemetry`]: the `mesh_audit_*` metrics the logger records (names in
//!   [`telemetry::names`]).
//!
//! # Schema
//!
//! `events`: `id` (the event id, primary key: a redelivery or a resend is absorbed by
//! `ON CONFLICT DO NOTHING`), `routing_key`, `source`, `node`, `time`, `causation_id`,
//! `schema`, `received_at`, `headers` (JSON), `body` (the JSON text as emitted),
//! `publisher` (the broker-validated user that published it, [`EventRecord::publisher`];
//! NULL for events stored before migration 0003 added it).
//! `event_conflicts`: events whose id was stored already for a *different* event (another
//! routing key, source or body; a redelivery or resend has the same): `id` (a UUID v5 of the
//! event id, key, source and body hash, so a redelivered conflict is stored once),
//! `event_id` (the id it reused: the stored event's), then the columns of `events`
//! (`received_at` is when it was first seen, `publisher` who published the conflicting
//! event) and `body_sha256` ([`Store::conflicts`],
//! [`ConflictRecord`]; see [`logger`] for how they are told apart).
//! `dead_letters`: `id` (a UUID v5 of the dead letter's content), `event_id`, `routing_key`,
//! `reason`, `attempts`, `last_error`, `queue`, `dead_at`, `received_at`, `content_type`,
//! `message_id`, `amqp_timestamp`, `headers`, `body` (bytes), `redriven_at`,
//! `redrive_count`, `user_id` (the dead letter's own `user-id`: who published that copy,
//! [`DeadLetterRecord::user_id`]). SQLite keeps times as fixed-width UTC text, PostgreSQL as `timestamptz`;
//! the migrations (`migrations/<backend>/`) are the reference.
//!
//! ```no_run
//! # async fn demo() -> Result<(), mesh_audit::Error> {
//! use mesh_audit::{EventQuery, Order, Store, StoreOptions};
//! let store = Store::open(StoreOptions::url("sqlite://audit.db?mode=rwc")?).await?;
//! for event in store.events(&EventQuery::new().pattern("module.umami.#").limit(10)).await? {
//!     println!("{} {} {}", event.time, event.routing_key, event.body);
//! }
//! # Ok(()) }
//! ```
//!
//! Architecture invariant: header names come from `mesh_core::codec`, and the logger reaches
//! the broker only through the `Transport` trait (the service alone names `mesh-amqp`).

#![warn(missing_docs)]

mod convert;
mod error;
pub mod logger;
mod options;
mod record;
pub mod redrive;
pub mod replay;
pub mod retention;
#[cfg(feature = "service")]
mod service;
mod store;
pub mod telemetry;

pub use error::{Error, ErrorKind};
pub use logger::{AuditLogger, LoggerStats};
pub use options::{
    AuditOptions, Backend, StoreOptions, DEFAULT_BATCH_SIZE, DEFAULT_BATCH_WAIT, DEFAULT_PREFETCH,
    DEFAULT_STORE_URL, MAX_BATCH_SIZE, MAX_BATCH_WAIT, MAX_USER_PREFIX_LEN,
};
pub use record::{
    CausationNode, CausationTree, ConflictRecord, Counts, DeadLetterGroup, DeadLetterId,
    DeadLetterQuery, DeadLetterRecord, EventQuery, EventRecord, Flow, Found, Order, DEFAULT_LIMIT,
    MAX_TREE_NODES,
};
pub use redrive::{Redrive, RedriveOptions, RedrivePlan, RedriveReport};
pub use replay::{Replay, ReplayPlan, ReplayReport};
pub use retention::{Prune, Pruned, Retention, DEFAULT_PRUNE_CHUNK};
#[cfg(feature = "service")]
pub use service::AuditService;
pub use store::{Store, MAX_BODY_SEARCH};

#[cfg(test)]
mod tests {
    /// The handles cross tasks and threads.
    #[test]
    fn handles_are_send_and_sync() {
        fn send_sync<T: Send + Sync + 'static>() {}
        send_sync::<super::Store>();
        send_sync::<super::AuditLogger>();
        #[cfg(feature = "service")]
        send_sync::<super::AuditService>();
        send_sync::<super::Error>();
        send_sync::<super::RedriveReport>();
    }
}
