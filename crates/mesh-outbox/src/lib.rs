//! mesh_outbox: a transactional outbox, an emit spool and an inbox for mesh, on sqlx
//! (PostgreSQL and SQLite).
//!
//! A service that changes its database and emits an event has two writes to make; a crash
//! between them loses the event, or emits one for a change that was rolled back. With the
//! outbox the event is a row written in the service's own transaction
//! ([`EmitIn::emit_in`]): nothing is published unless the transaction commits, and a
//! [`Relay`] publishes every committed row with the broker's confirm, in order per source,
//! marking it sent only after the confirm. The inbox ([`Inbox`]) closes the other end: a
//! handler's database work and the record of the event's id commit in one transaction, so a
//! redelivered event has no second effect, even across crashes.
//!
//! ```no_run
//! # use serde::{Deserialize, Serialize};
//! # #[derive(Serialize, Deserialize)]
//! # struct OrderPlaced { order: u64 }
//! # impl mesh::Event for OrderPlaced { const KEY: &'static str = "module.shop.order.placed"; }
//! # async fn demo(bus: mesh::Bus) -> Result<(), Box<dyn std::error::Error>> {
//! use mesh_outbox::{EmitIn, Outbox, RelayOptions};
//!
//! let pool = sqlx::PgPool::connect("postgres://localhost/shop").await?;
//! let outbox = Outbox::new(pool.clone()).await?; // creates schema `mesh_outbox`
//! let relay = outbox.start_relay([bus.clone()], RelayOptions::default()).await?;
//!
//! let mut tx = pool.begin().await?;
//! sqlx::query("INSERT INTO orders (id) VALUES (42)").execute(&mut *tx).await?;
//! bus.emit_in(&mut tx, &OrderPlaced { order: 42 }).await?;
//! tx.commit().await?; // only now can the relay see (and publish) the event
//!
//! relay.stop().await;
//! bus.drain().await?;
//! # Ok(()) }
//! ```
//!
//! Which to use: a direct `emit` when losing the event in a crash is acceptable or the
//! emit has no database change to agree with; a bus with a [`Spool`] when emits must succeed
//! while the broker is unreachable and survive a crash or restart of the process (they are
//! kept in a SQLite file and published from it, by the same relay); the outbox when the
//! event states a database change (it is published if and only if the change commits); the
//! inbox when a handler's effect is a database change that must happen once per event.
//!
//! Scheduled events ([`ScheduleIn`]): an event written now, in the transaction, and published
//! when due; until then [`Outbox::cancel`] (or [`cancel_in`], in a transaction) deletes it
//! and says whether it came in time. It waits in a table of its own and the relay moves it to
//! the outbox when due (`sql/scheduled.rs`). The SDK's own `Bus::emit_at` needs no database
//! but cannot be cancelled (the project's decision record 0028).
//!
//! The library's tables never collide with the application's: PostgreSQL schema
//! `mesh_outbox`, SQLite tables named `mesh_*`, versions in a table of their own (see
//! `ARCHITECTURE.md` for the relay's design: leases per source, order, crash behaviour).
//!
//! Architecture invariant: the SDK (`mesh`) never names a sqlx type; everything that does
//! lives here, on the SDK's [`Bus::prepare_emit`] and [`Bus::publish_prepared`].

#![warn(missing_docs)]

mod error;
mod inbox;
mod pending;
mod relay;
mod row;
mod spool;
mod sql;
pub mod telemetry;
mod window;

use std::future::Future;
use std::time::Duration;

use mesh::{Bus, Event, EventId, Outgoing, Timestamp};
use mesh_core::{codec, HeaderValue};
use sqlx::{Pool, Transaction};

pub use error::{Error, ErrorKind};
pub use inbox::{record_in, Inbox, InboxCleanup, SqlDedup};
pub use relay::{Relay, RelayOptions};
pub use spool::{Spool, SpoolOptions};
pub use sql::{Backend, Counts};

use row::{source_of, MessageColumns};
use sql::{NewRow, ScheduledRow};

/// The outbox of one database: its tables, installed on [`Outbox::new`], and the relays
/// started from it. Cheap to clone.
#[derive(Debug)]
pub struct Outbox<DB: Backend> {
    pool: Pool<DB>,
}

impl<DB: Backend> Clone for Outbox<DB> {
    fn clone(&self) -> Self {
        Outbox {
            pool: self.pool.clone(),
        }
    }
}

impl<DB: Backend> Outbox<DB> {
    /// The outbox on `pool`'s database: creates or upgrades the library's tables (safe from
    /// several processes at once: one install at a time, under an advisory lock on
    /// PostgreSQL, holding the write lock from its `BEGIN IMMEDIATE` on SQLite), in their own
    /// schema (PostgreSQL `mesh_outbox`) or under their own names (SQLite `mesh_*`), with
    /// their own version table.
    pub async fn new(pool: Pool<DB>) -> Result<Outbox<DB>, Error> {
        DB::install(&pool).await?;
        Ok(Outbox { pool })
    }

    /// The outbox on `pool`'s database if its tables are there, `None` if not: reads only,
    /// creates and upgrades nothing (for tools that look at an outbox, such as a status
    /// command). A schema newer than this library's fails (`SchemaTooNew`).
    pub async fn existing(pool: Pool<DB>) -> Result<Option<Outbox<DB>>, Error> {
        Ok(DB::installed(&pool).await?.map(|_| Outbox { pool }))
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// Starts a relay publishing the committed rows of each bus's source through that bus
    /// (see [`Relay`]). It polls each source every [`RelayOptions::poll_interval`]; no
    /// commit notifies it.
    pub async fn start_relay(
        &self,
        buses: impl IntoIterator<Item = Bus>,
        options: RelayOptions,
    ) -> Result<Relay, Error> {
        relay::start(
            self.pool.clone(),
            buses.into_iter().collect(),
            options,
            relay::Hooks::default(),
        )
        .await
    }

    /// Deletes rows sent more than `older_than` ago (a relay does it on its schedule,
    /// [`RelayOptions::retention`]); returns how many.
    pub async fn cleanup(&self, older_than: Duration) -> Result<u64, Error> {
        relay::cleanup(&self.pool, older_than).await
    }

    /// Cancels the scheduled event `id` ([`ScheduleIn`]): `true` when it was cancelled in
    /// time, and is never published; `false` when it was not waiting any more (it was due
    /// and handed to the relay, which publishes it, or it was cancelled before, or never
    /// scheduled in this outbox). Exact: a relay moves a due event to the outbox and a cancel
    /// deletes it, and the database orders the two.
    pub async fn cancel(&self, id: EventId) -> Result<bool, Error> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| Error::database("cancelling a scheduled event", e))?;
        DB::cancel(&mut conn, &id.to_string())
            .await
            .map_err(|e| Error::database("cancelling a scheduled event", e))
    }

    /// The table's size now.
    pub async fn counts(&self) -> Result<Counts, Error> {
        DB::counts(&self.pool)
            .await
            .map_err(|e| Error::database("counting outbox rows", e))
    }
}

/// Emits into the outbox, in the caller's transaction: [`Bus`] implements it.
///
/// The event is made exactly as an emit makes it ([`Bus::prepare_emit`]: its final id, key,
/// headers and causation) and written as a row of the outbox table in `tx`. Nothing is
/// published unless `tx` commits; a relay then publishes it, through a bus of the same
/// identity, with the id it has now.
pub trait EmitIn {
    /// Writes a typed event into the outbox in `tx`; returns its id.
    fn emit_in<'a, DB: Backend, E: Event>(
        &'a self,
        tx: &'a mut Transaction<'_, DB>,
        event: &E,
    ) -> impl Future<Output = Result<EventId, Error>> + Send + 'a;

    /// Writes an [`Outgoing`] into the outbox in `tx`; returns its id.
    fn emit_outgoing_in<'a, DB: Backend>(
        &'a self,
        tx: &'a mut Transaction<'_, DB>,
        outgoing: Outgoing,
    ) -> impl Future<Output = Result<EventId, Error>> + Send + 'a;

    /// Writes several events into the outbox in `tx`, in order, with one statement per
    /// thousand; returns their ids.
    fn emit_all_in<'a, DB: Backend>(
        &'a self,
        tx: &'a mut Transaction<'_, DB>,
        outgoing: impl IntoIterator<Item = Outgoing>,
    ) -> impl Future<Output = Result<Vec<EventId>, Error>> + Send + 'a;
}

impl EmitIn for Bus {
    fn emit_in<'a, DB: Backend, E: Event>(
        &'a self,
        tx: &'a mut Transaction<'_, DB>,
        event: &E,
    ) -> impl Future<Output = Result<EventId, Error>> + Send + 'a {
        let outgoing = Outgoing::event(event);
        async move { self.emit_outgoing_in(tx, outgoing?).await }
    }

    fn emit_outgoing_in<'a, DB: Backend>(
        &'a self,
        tx: &'a mut Transaction<'_, DB>,
        outgoing: Outgoing,
    ) -> impl Future<Output = Result<EventId, Error>> + Send + 'a {
        let rows = self.prepare_rows([outgoing]);
        async move {
            let (ids, rows) = rows?;
            DB::insert(&mut **tx, &rows)
                .await
                .map_err(|e| Error::database("writing to the outbox", e))?;
            Ok(ids[0])
        }
    }

    fn emit_all_in<'a, DB: Backend>(
        &'a self,
        tx: &'a mut Transaction<'_, DB>,
        outgoing: impl IntoIterator<Item = Outgoing>,
    ) -> impl Future<Output = Result<Vec<EventId>, Error>> + Send + 'a {
        let rows = self.prepare_rows(outgoing);
        async move {
            let (ids, rows) = rows?;
            DB::insert(&mut **tx, &rows)
                .await
                .map_err(|e| Error::database("writing to the outbox", e))?;
            Ok(ids)
        }
    }
}

/// Cancels the scheduled event `id` in the caller's transaction: as [`Outbox::cancel`], and
/// undone if `tx` rolls back (the event is then published when due). Until `tx` ends, a
/// relay leaves the event where it is (on PostgreSQL, the row is locked; on SQLite, `tx`
/// is the one writer).
pub async fn cancel_in<DB: Backend>(
    tx: &mut Transaction<'_, DB>,
    id: EventId,
) -> Result<bool, Error> {
    DB::cancel(&mut **tx, &id.to_string())
        .await
        .map_err(|e| Error::database("cancelling a scheduled event", e))
}

/// Schedules events in the outbox, in the caller's transaction: [`Bus`] implements it.
///
/// The event is made as [`EmitIn`] makes it, with `x-time` set to its due time (as
/// [`Bus::emit_at`] does), and written as a row of the outbox's scheduled table in `tx`.
/// Once `tx` committed and the due time passed (by the database's clock on PostgreSQL, the
/// relay process's on SQLite; by the relay's bus's clock, [`Bus::now`], when that is not the
/// system's, as on the test harness, so a test moves it with `Harness::advance`), a relay
/// moves it to the outbox and publishes it as any row, within its poll interval. Until then [`Outbox::cancel`] (or [`cancel_in`]) deletes it.
/// A time already past is published at once. The key must be the bus's own (`ForeignKey`
/// otherwise, as an emit). The choice against the broker's ladder
/// ([`Bus::emit_at`]) is in the project's decision record 0028.
pub trait ScheduleIn {
    /// Schedules a typed event for `at`; returns its id, which cancels it.
    fn emit_at_in<'a, DB: Backend, E: Event>(
        &'a self,
        tx: &'a mut Transaction<'_, DB>,
        at: Timestamp,
        event: &E,
    ) -> impl Future<Output = Result<EventId, Error>> + Send + 'a;

    /// Schedules a typed event for `after` from now (by the bus's clock, [`Bus::now`]: the
    /// system's, or the test harness's); returns its id.
    fn emit_after_in<'a, DB: Backend, E: Event>(
        &'a self,
        tx: &'a mut Transaction<'_, DB>,
        after: Duration,
        event: &E,
    ) -> impl Future<Output = Result<EventId, Error>> + Send + 'a;

    /// Schedules an [`Outgoing`] for `at`; returns its id.
    fn emit_outgoing_at_in<'a, DB: Backend>(
        &'a self,
        tx: &'a mut Transaction<'_, DB>,
        at: Timestamp,
        outgoing: Outgoing,
    ) -> impl Future<Output = Result<EventId, Error>> + Send + 'a;
}

impl ScheduleIn for Bus {
    fn emit_at_in<'a, DB: Backend, E: Event>(
        &'a self,
        tx: &'a mut Transaction<'_, DB>,
        at: Timestamp,
        event: &E,
    ) -> impl Future<Output = Result<EventId, Error>> + Send + 'a {
        let outgoing = Outgoing::event(event);
        async move { self.emit_outgoing_at_in(tx, at, outgoing?).await }
    }

    fn emit_after_in<'a, DB: Backend, E: Event>(
        &'a self,
        tx: &'a mut Transaction<'_, DB>,
        after: Duration,
        event: &E,
    ) -> impl Future<Output = Result<EventId, Error>> + Send + 'a {
        let made = Outgoing::event(event)
            .map_err(Error::from)
            .and_then(|outgoing| {
                let at = self.now().checked_add(after).ok_or_else(|| {
                    Error::options(format!("{after:?} from now is past 9999-12-31"))
                })?;
                Ok((at, outgoing))
            });
        async move {
            let (at, outgoing) = made?;
            self.emit_outgoing_at_in(tx, at, outgoing).await
        }
    }

    fn emit_outgoing_at_in<'a, DB: Backend>(
        &'a self,
        tx: &'a mut Transaction<'_, DB>,
        at: Timestamp,
        outgoing: Outgoing,
    ) -> impl Future<Output = Result<EventId, Error>> + Send + 'a {
        let row = self.prepare_scheduled(at, outgoing);
        async move {
            let (id, row) = row?;
            DB::schedule(&mut **tx, std::slice::from_ref(&row))
                .await
                .map_err(|e| Error::database("writing a scheduled event", e))?;
            Ok(id)
        }
    }
}

/// Makes the row of a scheduled event, before anything is awaited: the event's `x-time` is
/// its due time.
trait PrepareScheduled {
    fn prepare_scheduled(
        &self,
        at: Timestamp,
        outgoing: Outgoing,
    ) -> Result<(EventId, ScheduledRow), Error>;
}

/// Makes the rows of events, before anything is awaited (so the futures hold no event).
trait PrepareRows {
    fn prepare_rows(
        &self,
        outgoing: impl IntoIterator<Item = Outgoing>,
    ) -> Result<(Vec<EventId>, Vec<NewRow>), Error>;
}

impl PrepareScheduled for Bus {
    fn prepare_scheduled(
        &self,
        at: Timestamp,
        outgoing: Outgoing,
    ) -> Result<(EventId, ScheduledRow), Error> {
        let prepared = self.prepare_emit(outgoing)?;
        let mut message = prepared.message().clone();
        let headers = &mut message.properties.headers;
        headers.insert(codec::TIME.to_owned(), HeaderValue::Str(at.text()));
        headers.insert(codec::SCHEDULED_DUE.to_owned(), HeaderValue::Str(at.text()));
        let row = ScheduledRow {
            row: NewRow {
                source: source_of(self),
                event_id: prepared.id().to_string(),
                columns: MessageColumns::from_message(&message),
            },
            due: at,
        };
        Ok((prepared.id(), row))
    }
}

impl PrepareRows for Bus {
    fn prepare_rows(
        &self,
        outgoing: impl IntoIterator<Item = Outgoing>,
    ) -> Result<(Vec<EventId>, Vec<NewRow>), Error> {
        let source = source_of(self);
        let mut ids = Vec::new();
        let mut rows = Vec::new();
        for outgoing in outgoing {
            let prepared = self.prepare_emit(outgoing)?;
            ids.push(prepared.id());
            rows.push(NewRow {
                source: source.clone(),
                event_id: prepared.id().to_string(),
                columns: MessageColumns::from_message(prepared.message()),
            });
        }
        Ok((ids, rows))
    }
}
