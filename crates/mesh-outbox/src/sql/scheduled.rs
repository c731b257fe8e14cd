//! The statements of scheduled events (`mesh_outbox.scheduled`, SQLite `mesh_scheduled`):
//! a row waits there until its due time, then moves to the outbox in one transaction, where
//! the relay publishes it as any row; cancelling deletes it before it moves.
//!
//! Why a cancel is exact: the move and the cancel both delete the row, so they are ordered by
//! the database. On PostgreSQL the move locks the due rows (`FOR UPDATE SKIP LOCKED`) and
//! deletes them in the statement that inserts them into the outbox: a cancel that comes
//! after waits for the move's commit and then finds no row (too late), one that came first
//! leaves no row to move (a row a cancelling transaction still holds is skipped, and moved
//! by a later look if that transaction rolls back). On SQLite every write transaction runs
//! alone. A row is never in both tables, and only the outbox's rows are published.

use futures::future::BoxFuture;
use sqlx::{Pool, Postgres, QueryBuilder, Sqlite};

use super::dialect::ROWS_PER_STATEMENT;
use super::dialect::{now_ms, push_now, Clock, Dialect, POSTGRES, SQLITE};
use super::rows::NewRow;
use mesh::Timestamp;

/// A scheduled row to write: an outbox row and its due time.
#[derive(Debug)]
pub struct ScheduledRow {
    pub(crate) row: NewRow,
    pub(crate) due: Timestamp,
}

/// What a source has to do, as the relay's look before each read finds it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Look {
    /// An unsent outbox row.
    pub unsent: bool,
    /// A scheduled row that is due.
    pub due: bool,
}

/// The message columns the two tables share, in the same order.
const MESSAGE_COLUMNS: &str = "source, event_id, routing_key, content_type, message_id, \
                               amqp_timestamp, persistent, headers, body";

/// Scheduled events on each backend; sealed.
pub trait Scheduling: sqlx::Database + Sized {
    /// Writes scheduled rows in the caller's transaction.
    fn schedule<'a>(
        conn: &'a mut Self::Connection,
        rows: &'a [ScheduledRow],
    ) -> BoxFuture<'a, Result<(), sqlx::Error>>;

    /// Whether `source` has an unsent outbox row and whether it has a due scheduled one: the
    /// relay's one read-only look before a read. Due by `now` when given (the relay's bus's
    /// clock, when it is not the system's), by the backend's clock otherwise.
    fn look<'a>(
        pool: &'a Pool<Self>,
        source: &'a str,
        now: Option<Timestamp>,
    ) -> BoxFuture<'a, Result<Look, sqlx::Error>>;

    /// Moves up to `limit` due scheduled rows of `source` to the outbox, the earliest due
    /// first (so they are published in that order); returns how many. Due as in
    /// [`Scheduling::look`].
    fn promote<'a>(
        pool: &'a Pool<Self>,
        source: &'a str,
        limit: i64,
        now: Option<Timestamp>,
    ) -> BoxFuture<'a, Result<u64, sqlx::Error>>;

    /// Deletes the scheduled row of `event_id` in the caller's transaction: `false` when
    /// there is none (moved to the outbox already, cancelled before, or never scheduled).
    fn cancel<'a>(
        conn: &'a mut Self::Connection,
        event_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, sqlx::Error>>;

    /// How many scheduled rows wait.
    fn count_scheduled(pool: &Pool<Self>) -> BoxFuture<'_, Result<u64, sqlx::Error>>;
}

/// A due time as the backend stores it, rounded up so the row is never due before the
/// event's `x-time`: microseconds on PostgreSQL (its resolution), milliseconds on SQLite.
fn stored_due(d: &Dialect, due: Timestamp) -> i64 {
    let unit: i128 = match d.clock {
        Clock::Database => 1_000,
        Clock::Process => 1_000_000,
    };
    let nanos = due.unix_nanos();
    let units = nanos.div_euclid(unit) + i128::from(nanos.rem_euclid(unit) != 0);
    i64::try_from(units).unwrap_or(i64::MAX)
}

/// A time given for a due comparison, as the backend stores due times, rounded down so a
/// row is due once its time came (never before, by the rounding up of [`stored_due`]).
fn stored_now(d: &Dialect, now: Timestamp) -> i64 {
    let unit: i128 = match d.clock {
        Clock::Database => 1_000,
        Clock::Process => 1_000_000,
    };
    i64::try_from(now.unix_nanos().div_euclid(unit)).unwrap_or(i64::MAX)
}

/// "Now" in a due comparison: `now` when given, the backend's clock otherwise.
fn push_due_now<'a, DB>(qb: &mut QueryBuilder<'a, DB>, d: &Dialect, now: Option<Timestamp>)
where
    DB: sqlx::Database,
    i64: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    match now {
        Some(now) => {
            let (before, after) = due_expression(d);
            qb.push(before).push_bind(stored_now(d, now)).push(after);
        }
        None => push_now(qb, d, now_ms()),
    }
}

/// The SQL around a bound [`stored_due`].
fn due_expression(d: &Dialect) -> (&'static str, &'static str) {
    match d.clock {
        Clock::Database => ("(timestamptz 'epoch' + ", " * interval '1 microsecond')"),
        Clock::Process => ("", ""),
    }
}

/// Implements what the backends share; `promote` differs and is written for each.
macro_rules! impl_shared {
    ($dialect:expr) => {
        fn schedule<'a>(
            conn: &'a mut Self::Connection,
            rows: &'a [ScheduledRow],
        ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
            Box::pin(async move {
                let d: &Dialect = &$dialect;
                let now = now_ms();
                let (before, after) = due_expression(d);
                for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                    let mut qb = QueryBuilder::<Self>::new(format!(
                        "INSERT INTO {} ({MESSAGE_COLUMNS}, due_at{}) ",
                        d.scheduled,
                        if d.clock.stamps() { ", created_at" } else { "" },
                    ));
                    qb.push_values(chunk, |mut b, scheduled| {
                        let row = &scheduled.row;
                        let c = &row.columns;
                        b.push_bind(row.source.as_str());
                        b.push_bind(row.event_id.as_str()).push_unseparated(d.uuid);
                        b.push_bind(c.routing_key.as_str());
                        b.push_bind(c.content_type.as_deref());
                        b.push_bind(c.message_id.as_deref());
                        b.push_bind(c.amqp_timestamp);
                        b.push_bind(c.persistent);
                        b.push_bind(c.headers.as_str());
                        b.push_bind(c.body.as_slice());
                        b.push(before)
                            .push_bind_unseparated(stored_due(d, scheduled.due))
                            .push_unseparated(after);
                        if d.clock.stamps() {
                            b.push_bind(now);
                        }
                    });
                    qb.build().execute(&mut *conn).await?;
                }
                Ok(())
            })
        }

        fn look<'a>(
            pool: &'a Pool<Self>,
            source: &'a str,
            now: Option<Timestamp>,
        ) -> BoxFuture<'a, Result<Look, sqlx::Error>> {
            Box::pin(async move {
                let d: &Dialect = &$dialect;
                let mut qb = QueryBuilder::<Self>::new(format!(
                    "SELECT EXISTS (SELECT 1 FROM {} WHERE source = ",
                    d.outbox
                ));
                qb.push_bind(source).push(format!(
                    " AND sent_at IS NULL), EXISTS (SELECT 1 FROM {} WHERE source = ",
                    d.scheduled
                ));
                qb.push_bind(source).push(" AND due_at <= ");
                push_due_now(&mut qb, d, now);
                qb.push(")");
                let (unsent, due): (bool, bool) = qb.build_query_as().fetch_one(pool).await?;
                Ok(Look { unsent, due })
            })
        }

        fn cancel<'a>(
            conn: &'a mut Self::Connection,
            event_id: &'a str,
        ) -> BoxFuture<'a, Result<bool, sqlx::Error>> {
            Box::pin(async move {
                let d: &Dialect = &$dialect;
                let mut qb = QueryBuilder::<Self>::new(format!(
                    "DELETE FROM {} WHERE event_id = ",
                    d.scheduled
                ));
                qb.push_bind(event_id).push(d.uuid);
                Ok(qb.build().execute(conn).await?.rows_affected() == 1)
            })
        }

        fn count_scheduled(pool: &Pool<Self>) -> BoxFuture<'_, Result<u64, sqlx::Error>> {
            Box::pin(async move {
                let d: &Dialect = &$dialect;
                let count: i64 =
                    sqlx::query_scalar(&format!("SELECT count(*) FROM {}", d.scheduled))
                        .fetch_one(pool)
                        .await?;
                Ok(u64::try_from(count).unwrap_or(0))
            })
        }
    };
}

impl Scheduling for Postgres {
    impl_shared!(POSTGRES);

    fn promote<'a>(
        pool: &'a Pool<Self>,
        source: &'a str,
        limit: i64,
        now: Option<Timestamp>,
    ) -> BoxFuture<'a, Result<u64, sqlx::Error>> {
        Box::pin(async move {
            let d = &POSTGRES;
            // One statement: the due rows are locked, deleted and inserted into the outbox
            // (a new seq each, in due order), or none of it.
            let mut qb = QueryBuilder::<Postgres>::new(format!(
                "WITH due AS (DELETE FROM {0} WHERE event_id IN (SELECT event_id FROM {0} \
                 WHERE source = ",
                d.scheduled
            ));
            qb.push_bind(source).push(" AND due_at <= ");
            push_due_now(&mut qb, d, now);
            qb.push(" ORDER BY due_at, event_id LIMIT ")
                .push_bind(limit)
                .push(format!(
                    " FOR UPDATE SKIP LOCKED) RETURNING {MESSAGE_COLUMNS}, due_at) \
                     INSERT INTO {} ({MESSAGE_COLUMNS}) SELECT {MESSAGE_COLUMNS} FROM due \
                     ORDER BY due_at, event_id",
                    d.outbox
                ));
            Ok(qb.build().execute(pool).await?.rows_affected())
        })
    }
}

impl Scheduling for Sqlite {
    impl_shared!(SQLITE);

    fn promote<'a>(
        pool: &'a Pool<Self>,
        source: &'a str,
        limit: i64,
        due_by: Option<Timestamp>,
    ) -> BoxFuture<'a, Result<u64, sqlx::Error>> {
        Box::pin(async move {
            let d = &SQLITE;
            let now = now_ms();
            let due_now = due_by.map_or(now, |t| stored_now(d, t));
            // The same rows twice (the same bound time, one writer at a time): copied in due
            // order, then deleted, in one transaction.
            let due = |qb: &mut QueryBuilder<'a, Sqlite>| {
                qb.push(format!(
                    "event_id IN (SELECT event_id FROM {} WHERE source = ",
                    d.scheduled
                ))
                .push_bind(source)
                .push(" AND due_at <= ")
                .push_bind(due_now)
                .push(" ORDER BY due_at, event_id LIMIT ")
                .push_bind(limit)
                .push(")");
            };
            let mut tx = pool.begin().await?;
            let mut copy = QueryBuilder::<Sqlite>::new(format!(
                "INSERT INTO {} ({MESSAGE_COLUMNS}, created_at) SELECT {MESSAGE_COLUMNS}, ",
                d.outbox
            ));
            copy.push_bind(now)
                .push(format!(" FROM {} WHERE ", d.scheduled));
            due(&mut copy);
            copy.push(" ORDER BY due_at, event_id");
            let moved = copy.build().execute(&mut *tx).await?.rows_affected();
            let mut delete =
                QueryBuilder::<Sqlite>::new(format!("DELETE FROM {} WHERE ", d.scheduled));
            due(&mut delete);
            delete.build().execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(moved)
        })
    }
}
