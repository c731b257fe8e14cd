//! The SQL of each backend, behind the sealed [`Sql`] trait that [`Backend`] extends: the
//! schema and its versions (`schema.rs`), the outbox's rows, the relay's leases, the inbox
//! (`statements.rs`, each statement written once), and where the backends differ
//! (`dialect.rs`).
//!
//! The library's tables never meet the application's: on PostgreSQL they live in schema
//! `mesh_outbox`, on SQLite their names start with `mesh_` (`mesh_outbox`,
//! `mesh_outbox_leases`, `mesh_inbox`), and their versions are kept in a table of their own
//! (`mesh_outbox.versions`, `mesh_outbox_versions`), never in sqlx's `_sqlx_migrations`,
//! whose name the application's migrator owns.

// The sealed trait's items are `pub` so a public trait may name them; nothing outside the
// crate can.
#![allow(unreachable_pub)]

mod dialect;
mod rows;
pub(crate) mod scheduled;
mod schema;
pub(crate) mod statements;

use std::time::Duration;

use futures::future::BoxFuture;
use sqlx::Pool;

use crate::error::Error;
pub use rows::{NewRow, StoredRow};
pub use scheduled::{ScheduledRow, Scheduling};

/// A database the outbox and the inbox run on: [`sqlx::Postgres`] or [`sqlx::Sqlite`]
/// (sealed).
pub trait Backend: Sql + Scheduling {}

impl Backend for sqlx::Postgres {}
impl Backend for sqlx::Sqlite {}

/// The outbox table's size now.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counts {
    /// Rows not yet sent.
    pub pending: u64,
    /// Rows sent (or given up), kept until the cleanup.
    pub sent: u64,
    /// The age of the oldest unsent row, in seconds (0 when none).
    pub oldest_pending_seconds: f64,
    /// Scheduled events waiting for their due time (not yet in the table's pending rows).
    pub scheduled: u64,
}

/// What each backend does; sealed.
pub trait Sql: sqlx::Database + Sized {
    /// Creates or upgrades the library's tables (safe from several processes at once).
    fn install(pool: &Pool<Self>) -> BoxFuture<'_, Result<(), Error>>;

    /// The schema's version in the database, `None` when it has none (no version table):
    /// reads only, creates nothing. A version newer than this library's is
    /// `SchemaTooNew`.
    fn installed(pool: &Pool<Self>) -> BoxFuture<'_, Result<Option<i64>, Error>>;

    /// Writes rows in the caller's transaction.
    fn insert<'a>(
        conn: &'a mut Self::Connection,
        rows: &'a [NewRow],
    ) -> BoxFuture<'a, Result<(), sqlx::Error>>;

    /// Takes the lease of `source` for `ttl`, or renews it: `false` when another owner
    /// holds it and it has not expired.
    fn acquire_lease<'a>(
        pool: &'a Pool<Self>,
        source: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, sqlx::Error>>;

    /// Gives the lease of `source` up, if `owner` holds it.
    fn release_lease<'a>(
        pool: &'a Pool<Self>,
        source: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>>;

    /// The oldest `limit` unsent rows of `source` whose seq is not in `skip` (the relay's
    /// rows in flight), in order.
    fn fetch<'a>(
        pool: &'a Pool<Self>,
        source: &'a str,
        limit: i64,
        skip: &'a [i64],
    ) -> BoxFuture<'a, Result<Vec<StoredRow>, sqlx::Error>>;

    /// Marks rows sent (or, with an error, given up).
    fn mark_sent<'a>(
        pool: &'a Pool<Self>,
        seqs: &'a [i64],
        error: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>>;

    /// Deletes up to `limit` rows sent more than `older_than` ago.
    fn cleanup(
        pool: &Pool<Self>,
        older_than: Duration,
        limit: i64,
    ) -> BoxFuture<'_, Result<u64, sqlx::Error>>;

    /// The table's size now.
    fn counts(pool: &Pool<Self>) -> BoxFuture<'_, Result<Counts, sqlx::Error>>;

    /// Records that `consumer` processed `event_id`, in the caller's transaction: `false`
    /// when it was recorded before.
    fn inbox_insert<'a>(
        conn: &'a mut Self::Connection,
        consumer: &'a str,
        event_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, sqlx::Error>>;

    /// Forgets that `consumer` processed `event_id`.
    fn inbox_delete<'a>(
        pool: &'a Pool<Self>,
        consumer: &'a str,
        event_id: &'a str,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>>;

    /// Whether `consumer` processed `event_id`.
    fn inbox_contains<'a>(
        pool: &'a Pool<Self>,
        consumer: &'a str,
        event_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, sqlx::Error>>;

    /// Deletes processed ids older than `older_than`.
    fn inbox_cleanup(
        pool: &Pool<Self>,
        older_than: Duration,
    ) -> BoxFuture<'_, Result<u64, sqlx::Error>>;
}
