//! The SQL of each backend, behind the sealed [`Sql`] trait that [`Backend`](crate::Backend)
//! extends: the schema and its versions, the outbox's rows, the relay's leases, the inbox.
//!
//! The library's tables never meet the application's: on PostgreSQL they live in schema
//! `mesh_outbox`, on SQLite their names start with `mesh_` (`mesh_outbox`,
//! `mesh_outbox_leases`, `mesh_inbox`), and their versions are kept in a table of their own
//! (`mesh_outbox.versions`, `mesh_outbox_versions`), never in sqlx's `_sqlx_migrations`,
//! whose name the application's migrator owns.

// The sealed trait's items are `pub` so a public trait may name them; nothing outside the
// crate can.
#![allow(unreachable_pub)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use sqlx::postgres::PgPool;
use sqlx::sqlite::SqlitePool;
use sqlx::{Executor, Pool, Postgres, QueryBuilder, Row, Sqlite};

use crate::error::{Error, ErrorKind};
use crate::row::MessageColumns;

/// Rows per `INSERT` (10 parameters each: far below either backend's limit).
const ROWS_PER_STATEMENT: usize = 1000;

/// An outbox row to write.
#[derive(Debug)]
pub struct NewRow {
    pub(crate) source: String,
    pub(crate) event_id: String,
    pub(crate) columns: MessageColumns,
}

/// An unsent outbox row, read by a relay.
#[derive(Debug)]
pub struct StoredRow {
    pub(crate) seq: i64,
    pub(crate) columns: MessageColumns,
}

/// The outbox table's size now.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counts {
    /// Rows not yet sent.
    pub pending: u64,
    /// Rows sent (or given up), kept until the cleanup.
    pub sent: u64,
    /// The age of the oldest unsent row, in seconds (0 when none).
    pub oldest_pending_seconds: f64,
}

/// What each backend does; sealed.
pub trait Sql: sqlx::Database + Sized {
    /// Creates or upgrades the library's tables (safe from several processes at once).
    fn install(pool: &Pool<Self>) -> BoxFuture<'_, Result<(), Error>>;

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

    /// Whether `source` has an unsent row: the relay's look before it takes the lease.
    fn has_unsent<'a>(
        pool: &'a Pool<Self>,
        source: &'a str,
    ) -> BoxFuture<'a, Result<bool, sqlx::Error>>;

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

/// The advisory lock that serialises installs on one PostgreSQL database.
const INSTALL_LOCK: i64 = 0x6d65_7368_6f75_7462; // "meshoutb"

/// PostgreSQL's versions, in order: `(version, statements)`.
const POSTGRES_VERSIONS: &[(i64, &str)] = &[
    (
        1,
        r#"
CREATE TABLE mesh_outbox.outbox (
    seq            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source         text        NOT NULL,            -- <origin>.<owner>: the unit of order and of leases
    event_id       uuid        NOT NULL,            -- x-event-id
    routing_key    text        NOT NULL,
    content_type   text,
    message_id     text,
    amqp_timestamp bigint,
    persistent     boolean     NOT NULL,
    headers        text        NOT NULL,            -- tagged JSON, every header value exact
    body           bytea       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    sent_at        timestamptz,                     -- set once the broker confirmed (or given up)
    error          text                             -- why it was given up, if it was
);
CREATE INDEX outbox_unsent ON mesh_outbox.outbox (source, seq) WHERE sent_at IS NULL;
CREATE INDEX outbox_sent ON mesh_outbox.outbox (sent_at) WHERE sent_at IS NOT NULL;

CREATE TABLE mesh_outbox.leases (
    source     text        NOT NULL PRIMARY KEY,
    owner      text        NOT NULL,
    expires_at timestamptz NOT NULL
);

CREATE TABLE mesh_outbox.inbox (
    consumer     text        NOT NULL,
    event_id     uuid        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX inbox_by_time ON mesh_outbox.inbox (processed_at);

CREATE FUNCTION mesh_outbox.notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Sent at commit, never for a rolled-back row; one per source and transaction.
    PERFORM pg_notify('mesh_outbox', NEW.source);
    RETURN NULL;
END
$$;
CREATE TRIGGER outbox_notify AFTER INSERT ON mesh_outbox.outbox
    FOR EACH ROW EXECUTE FUNCTION mesh_outbox.notify();
"#,
    ),
    (
        2,
        // The commit notification goes: PostgreSQL serialises the commits of every
        // transaction that notifies (they queue for one lock, held through the commit's WAL
        // flush), so the trigger capped the application's emitting transactions at one WAL
        // flush each, one after another. Relays poll instead (`RelayOptions::poll_interval`).
        r#"
DROP TRIGGER IF EXISTS outbox_notify ON mesh_outbox.outbox;
DROP FUNCTION IF EXISTS mesh_outbox.notify();
"#,
    ),
];

/// SQLite's versions, in order. Every statement is idempotent, so two processes installing
/// at once cannot fail on each other's tables.
const SQLITE_VERSIONS: &[(i64, &str)] = &[(
    1,
    r#"
CREATE TABLE IF NOT EXISTS mesh_outbox (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    source         TEXT    NOT NULL,
    event_id       TEXT    NOT NULL,
    routing_key    TEXT    NOT NULL,
    content_type   TEXT,
    message_id     TEXT,
    amqp_timestamp INTEGER,
    persistent     INTEGER NOT NULL,
    headers        TEXT    NOT NULL,
    body           BLOB    NOT NULL,
    created_at     INTEGER NOT NULL,  -- milliseconds since the epoch
    sent_at        INTEGER,
    error          TEXT
);
CREATE INDEX IF NOT EXISTS mesh_outbox_unsent ON mesh_outbox (source, seq) WHERE sent_at IS NULL;
CREATE INDEX IF NOT EXISTS mesh_outbox_sent ON mesh_outbox (sent_at) WHERE sent_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS mesh_outbox_leases (
    source     TEXT    NOT NULL PRIMARY KEY,
    owner      TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS mesh_inbox (
    consumer     TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    processed_at INTEGER NOT NULL,
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX IF NOT EXISTS mesh_inbox_by_time ON mesh_inbox (processed_at);
"#,
)];

/// The bytes a spool counts for its unsent rows on SQLite: the sum of
/// `MessageColumns::stored_size` (routing key and headers in bytes, not characters).
pub(crate) fn sqlite_pending_bytes() -> String {
    format!(
        "SELECT coalesce(sum(length(CAST(routing_key AS BLOB)) + length(CAST(headers AS BLOB)) \
         + length(body) + {}), 0) FROM mesh_outbox WHERE sent_at IS NULL",
        crate::row::ROW_OVERHEAD
    )
}

/// The newest version of each backend's tables this library knows.
const POSTGRES_VERSION: i64 = latest(POSTGRES_VERSIONS);
const SQLITE_VERSION: i64 = latest(SQLITE_VERSIONS);

/// The last version of a list in order.
const fn latest(versions: &[(i64, &str)]) -> i64 {
    match versions.last() {
        Some((version, _)) => *version,
        None => 0,
    }
}

fn too_new(found: i64, known: i64) -> Error {
    Error::new(ErrorKind::SchemaTooNew { found, known })
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn columns_of(row: &impl ColumnSource) -> Result<MessageColumns, sqlx::Error> {
    row.columns()
}

/// Reads the message columns of a fetched row (the same select list on both backends).
trait ColumnSource {
    fn columns(&self) -> Result<MessageColumns, sqlx::Error>;
}

macro_rules! impl_column_source {
    ($row:ty) => {
        impl ColumnSource for $row {
            fn columns(&self) -> Result<MessageColumns, sqlx::Error> {
                Ok(MessageColumns {
                    routing_key: self.try_get(1)?,
                    content_type: self.try_get(2)?,
                    message_id: self.try_get(3)?,
                    amqp_timestamp: self.try_get(4)?,
                    persistent: self.try_get(5)?,
                    headers: self.try_get(6)?,
                    body: self.try_get(7)?,
                })
            }
        }
    };
}
impl_column_source!(sqlx::postgres::PgRow);
impl_column_source!(sqlx::sqlite::SqliteRow);

const SELECT_COLUMNS: &str =
    "seq, routing_key, content_type, message_id, amqp_timestamp, persistent, headers, body";

impl Sql for Postgres {
    fn install(pool: &PgPool) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let failed = |e| Error::database("installing the outbox schema", e);
            let mut tx = pool.begin().await.map_err(failed)?;
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(INSTALL_LOCK)
                .execute(&mut *tx)
                .await
                .map_err(failed)?;
            (&mut *tx)
                .execute(
                    "CREATE SCHEMA IF NOT EXISTS mesh_outbox;
                 CREATE TABLE IF NOT EXISTS mesh_outbox.versions (
                     version    bigint      NOT NULL PRIMARY KEY,
                     applied_at timestamptz NOT NULL DEFAULT now()
                 );",
                )
                .await
                .map_err(failed)?;
            let current: i64 =
                sqlx::query_scalar("SELECT coalesce(max(version), 0) FROM mesh_outbox.versions")
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(failed)?;
            if current > POSTGRES_VERSION {
                return Err(too_new(current, POSTGRES_VERSION));
            }
            for (version, statements) in POSTGRES_VERSIONS.iter().filter(|(v, _)| *v > current) {
                (&mut *tx).execute(*statements).await.map_err(failed)?;
                sqlx::query("INSERT INTO mesh_outbox.versions (version) VALUES ($1)")
                    .bind(version)
                    .execute(&mut *tx)
                    .await
                    .map_err(failed)?;
            }
            tx.commit().await.map_err(failed)
        })
    }

    fn insert<'a>(
        conn: &'a mut sqlx::PgConnection,
        rows: &'a [NewRow],
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                let mut b = QueryBuilder::<Postgres>::new(
                    "INSERT INTO mesh_outbox.outbox (source, event_id, routing_key, \
                     content_type, message_id, amqp_timestamp, persistent, headers, body) ",
                );
                b.push_values(chunk, |mut b, row| {
                    let c = &row.columns;
                    b.push_bind(row.source.as_str());
                    b.push_bind(row.event_id.as_str())
                        .push_unseparated("::uuid");
                    b.push_bind(c.routing_key.as_str());
                    b.push_bind(c.content_type.as_deref());
                    b.push_bind(c.message_id.as_deref());
                    b.push_bind(c.amqp_timestamp);
                    b.push_bind(c.persistent);
                    b.push_bind(c.headers.as_str());
                    b.push_bind(c.body.as_slice());
                });
                b.build().execute(&mut *conn).await?;
            }
            Ok(())
        })
    }

    fn acquire_lease<'a>(
        pool: &'a PgPool,
        source: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, sqlx::Error>> {
        Box::pin(async move {
            // The database's clock, the one every relay of this database shares.
            let row = sqlx::query(
                "INSERT INTO mesh_outbox.leases AS l (source, owner, expires_at)
                 VALUES ($1, $2, clock_timestamp() + make_interval(secs => $3))
                 ON CONFLICT (source) DO UPDATE
                     SET owner = excluded.owner, expires_at = excluded.expires_at
                     WHERE l.owner = excluded.owner OR l.expires_at < clock_timestamp()
                 RETURNING owner",
            )
            .bind(source)
            .bind(owner)
            .bind(ttl.as_secs_f64())
            .fetch_optional(pool)
            .await?;
            Ok(row.is_some())
        })
    }

    fn release_lease<'a>(
        pool: &'a PgPool,
        source: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            sqlx::query("DELETE FROM mesh_outbox.leases WHERE source = $1 AND owner = $2")
                .bind(source)
                .bind(owner)
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    fn has_unsent<'a>(
        pool: &'a PgPool,
        source: &'a str,
    ) -> BoxFuture<'a, Result<bool, sqlx::Error>> {
        Box::pin(async move {
            sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM mesh_outbox.outbox
                                WHERE source = $1 AND sent_at IS NULL)",
            )
            .bind(source)
            .fetch_one(pool)
            .await
        })
    }

    fn fetch<'a>(
        pool: &'a PgPool,
        source: &'a str,
        limit: i64,
        skip: &'a [i64],
    ) -> BoxFuture<'a, Result<Vec<StoredRow>, sqlx::Error>> {
        Box::pin(async move {
            let rows = sqlx::query(&format!(
                "SELECT {SELECT_COLUMNS} FROM mesh_outbox.outbox
                 WHERE source = $1 AND sent_at IS NULL AND seq <> ALL($3)
                 ORDER BY seq LIMIT $2"
            ))
            .bind(source)
            .bind(limit)
            .bind(skip)
            .fetch_all(pool)
            .await?;
            rows.iter()
                .map(|r| {
                    Ok(StoredRow {
                        seq: r.try_get(0)?,
                        columns: columns_of(r)?,
                    })
                })
                .collect()
        })
    }

    fn mark_sent<'a>(
        pool: &'a PgPool,
        seqs: &'a [i64],
        error: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            sqlx::query(
                "UPDATE mesh_outbox.outbox SET sent_at = clock_timestamp(), error = $2
                 WHERE seq = ANY($1)",
            )
            .bind(seqs)
            .bind(error)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    fn cleanup(
        pool: &PgPool,
        older_than: Duration,
        limit: i64,
    ) -> BoxFuture<'_, Result<u64, sqlx::Error>> {
        Box::pin(async move {
            let done = sqlx::query(
                "DELETE FROM mesh_outbox.outbox WHERE seq IN (
                     SELECT seq FROM mesh_outbox.outbox
                     WHERE sent_at < clock_timestamp() - make_interval(secs => $1)
                     LIMIT $2)",
            )
            .bind(older_than.as_secs_f64())
            .bind(limit)
            .execute(pool)
            .await?;
            Ok(done.rows_affected())
        })
    }

    fn counts(pool: &PgPool) -> BoxFuture<'_, Result<Counts, sqlx::Error>> {
        Box::pin(async move {
            let row = sqlx::query(
                "SELECT count(*) FILTER (WHERE sent_at IS NULL),
                        count(*) FILTER (WHERE sent_at IS NOT NULL),
                        coalesce(extract(epoch FROM clock_timestamp()
                            - min(created_at) FILTER (WHERE sent_at IS NULL)), 0)::float8
                 FROM mesh_outbox.outbox",
            )
            .fetch_one(pool)
            .await?;
            Ok(Counts {
                pending: u64::try_from(row.try_get::<i64, _>(0)?).unwrap_or(0),
                sent: u64::try_from(row.try_get::<i64, _>(1)?).unwrap_or(0),
                oldest_pending_seconds: row.try_get::<f64, _>(2)?.max(0.0),
            })
        })
    }

    fn inbox_insert<'a>(
        conn: &'a mut sqlx::PgConnection,
        consumer: &'a str,
        event_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, sqlx::Error>> {
        Box::pin(async move {
            // A concurrent transaction inserting the same id makes this wait for its
            // outcome: exactly one of them records it.
            let done = sqlx::query(
                "INSERT INTO mesh_outbox.inbox (consumer, event_id) VALUES ($1, $2::uuid)
                 ON CONFLICT DO NOTHING",
            )
            .bind(consumer)
            .bind(event_id)
            .execute(conn)
            .await?;
            Ok(done.rows_affected() == 1)
        })
    }

    fn inbox_delete<'a>(
        pool: &'a PgPool,
        consumer: &'a str,
        event_id: &'a str,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            sqlx::query(
                "DELETE FROM mesh_outbox.inbox WHERE consumer = $1 AND event_id = $2::uuid",
            )
            .bind(consumer)
            .bind(event_id)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    fn inbox_contains<'a>(
        pool: &'a PgPool,
        consumer: &'a str,
        event_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, sqlx::Error>> {
        Box::pin(async move {
            let row = sqlx::query(
                "SELECT 1 FROM mesh_outbox.inbox WHERE consumer = $1 AND event_id = $2::uuid",
            )
            .bind(consumer)
            .bind(event_id)
            .fetch_optional(pool)
            .await?;
            Ok(row.is_some())
        })
    }

    fn inbox_cleanup(
        pool: &PgPool,
        older_than: Duration,
    ) -> BoxFuture<'_, Result<u64, sqlx::Error>> {
        Box::pin(async move {
            let done = sqlx::query(
                "DELETE FROM mesh_outbox.inbox
                 WHERE processed_at < clock_timestamp() - make_interval(secs => $1)",
            )
            .bind(older_than.as_secs_f64())
            .execute(pool)
            .await?;
            Ok(done.rows_affected())
        })
    }
}

impl Sql for Sqlite {
    fn install(pool: &SqlitePool) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let failed = |e| Error::database("installing the outbox tables", e);
            let mut tx = pool.begin().await.map_err(failed)?;
            (&mut *tx)
                .execute(
                    "CREATE TABLE IF NOT EXISTS mesh_outbox_versions (
                     version    INTEGER NOT NULL PRIMARY KEY,
                     applied_at INTEGER NOT NULL
                 );",
                )
                .await
                .map_err(failed)?;
            let current: i64 =
                sqlx::query_scalar("SELECT coalesce(max(version), 0) FROM mesh_outbox_versions")
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(failed)?;
            if current > SQLITE_VERSION {
                return Err(too_new(current, SQLITE_VERSION));
            }
            for (version, statements) in SQLITE_VERSIONS.iter().filter(|(v, _)| *v > current) {
                (&mut *tx).execute(*statements).await.map_err(failed)?;
                sqlx::query(
                    "INSERT OR IGNORE INTO mesh_outbox_versions (version, applied_at) VALUES (?, ?)",
                )
                .bind(version)
                .bind(now_ms())
                .execute(&mut *tx)
                .await
                .map_err(failed)?;
            }
            tx.commit().await.map_err(failed)
        })
    }

    fn insert<'a>(
        conn: &'a mut sqlx::SqliteConnection,
        rows: &'a [NewRow],
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let now = now_ms();
            for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                let mut b = QueryBuilder::<Sqlite>::new(
                    "INSERT INTO mesh_outbox (source, event_id, routing_key, content_type, \
                     message_id, amqp_timestamp, persistent, headers, body, created_at) ",
                );
                b.push_values(chunk, |mut b, row| {
                    let c = &row.columns;
                    b.push_bind(row.source.as_str());
                    b.push_bind(row.event_id.as_str());
                    b.push_bind(c.routing_key.as_str());
                    b.push_bind(c.content_type.as_deref());
                    b.push_bind(c.message_id.as_deref());
                    b.push_bind(c.amqp_timestamp);
                    b.push_bind(c.persistent);
                    b.push_bind(c.headers.as_str());
                    b.push_bind(c.body.as_slice());
                    b.push_bind(now);
                });
                b.build().execute(&mut *conn).await?;
            }
            Ok(())
        })
    }

    fn acquire_lease<'a>(
        pool: &'a SqlitePool,
        source: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, sqlx::Error>> {
        Box::pin(async move {
            let now = now_ms();
            let row = sqlx::query(
                "INSERT INTO mesh_outbox_leases AS l (source, owner, expires_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (source) DO UPDATE
                     SET owner = excluded.owner, expires_at = excluded.expires_at
                     WHERE l.owner = excluded.owner OR l.expires_at < ?4
                 RETURNING owner",
            )
            .bind(source)
            .bind(owner)
            .bind(now.saturating_add(ms(ttl)))
            .bind(now)
            .fetch_optional(pool)
            .await?;
            Ok(row.is_some())
        })
    }

    fn release_lease<'a>(
        pool: &'a SqlitePool,
        source: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            sqlx::query("DELETE FROM mesh_outbox_leases WHERE source = ? AND owner = ?")
                .bind(source)
                .bind(owner)
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    fn has_unsent<'a>(
        pool: &'a SqlitePool,
        source: &'a str,
    ) -> BoxFuture<'a, Result<bool, sqlx::Error>> {
        Box::pin(async move {
            sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM mesh_outbox WHERE source = ? AND sent_at IS NULL)",
            )
            .bind(source)
            .fetch_one(pool)
            .await
        })
    }

    fn fetch<'a>(
        pool: &'a SqlitePool,
        source: &'a str,
        limit: i64,
        skip: &'a [i64],
    ) -> BoxFuture<'a, Result<Vec<StoredRow>, sqlx::Error>> {
        Box::pin(async move {
            // The seqs to skip as one JSON array parameter: no limit on their number.
            let skip = serde_json::to_string(skip).map_err(|e| sqlx::Error::Encode(e.into()))?;
            let rows = sqlx::query(&format!(
                "SELECT {SELECT_COLUMNS} FROM mesh_outbox
                 WHERE source = ?1 AND sent_at IS NULL
                   AND seq NOT IN (SELECT value FROM json_each(?3))
                 ORDER BY seq LIMIT ?2"
            ))
            .bind(source)
            .bind(limit)
            .bind(skip)
            .fetch_all(pool)
            .await?;
            rows.iter()
                .map(|r| {
                    Ok(StoredRow {
                        seq: r.try_get(0)?,
                        columns: columns_of(r)?,
                    })
                })
                .collect()
        })
    }

    fn mark_sent<'a>(
        pool: &'a SqlitePool,
        seqs: &'a [i64],
        error: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let now = now_ms();
            for chunk in seqs.chunks(ROWS_PER_STATEMENT) {
                let mut b = QueryBuilder::<Sqlite>::new("UPDATE mesh_outbox SET sent_at = ");
                b.push_bind(now).push(", error = ").push_bind(error);
                b.push(" WHERE seq IN (");
                let mut list = b.separated(", ");
                for seq in chunk {
                    list.push_bind(*seq);
                }
                b.push(")");
                b.build().execute(pool).await?;
            }
            Ok(())
        })
    }

    fn cleanup(
        pool: &SqlitePool,
        older_than: Duration,
        limit: i64,
    ) -> BoxFuture<'_, Result<u64, sqlx::Error>> {
        Box::pin(async move {
            let done = sqlx::query(
                "DELETE FROM mesh_outbox WHERE seq IN (
                     SELECT seq FROM mesh_outbox
                     WHERE sent_at IS NOT NULL AND sent_at < ? LIMIT ?)",
            )
            .bind(now_ms().saturating_sub(ms(older_than)))
            .bind(limit)
            .execute(pool)
            .await?;
            Ok(done.rows_affected())
        })
    }

    fn counts(pool: &SqlitePool) -> BoxFuture<'_, Result<Counts, sqlx::Error>> {
        Box::pin(async move {
            let row = sqlx::query(
                "SELECT coalesce(sum(sent_at IS NULL), 0), coalesce(sum(sent_at IS NOT NULL), 0),
                        min(CASE WHEN sent_at IS NULL THEN created_at END)
                 FROM mesh_outbox",
            )
            .fetch_one(pool)
            .await?;
            let oldest: Option<i64> = row.try_get(2)?;
            Ok(Counts {
                pending: u64::try_from(row.try_get::<i64, _>(0)?).unwrap_or(0),
                sent: u64::try_from(row.try_get::<i64, _>(1)?).unwrap_or(0),
                oldest_pending_seconds: oldest
                    .map_or(0.0, |t| (now_ms().saturating_sub(t)).max(0) as f64 / 1000.0),
            })
        })
    }

    fn inbox_insert<'a>(
        conn: &'a mut sqlx::SqliteConnection,
        consumer: &'a str,
        event_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, sqlx::Error>> {
        Box::pin(async move {
            let done = sqlx::query(
                "INSERT OR IGNORE INTO mesh_inbox (consumer, event_id, processed_at) VALUES (?, ?, ?)",
            )
            .bind(consumer)
            .bind(event_id)
            .bind(now_ms())
            .execute(conn)
            .await?;
            Ok(done.rows_affected() == 1)
        })
    }

    fn inbox_delete<'a>(
        pool: &'a SqlitePool,
        consumer: &'a str,
        event_id: &'a str,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            sqlx::query("DELETE FROM mesh_inbox WHERE consumer = ? AND event_id = ?")
                .bind(consumer)
                .bind(event_id)
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    fn inbox_contains<'a>(
        pool: &'a SqlitePool,
        consumer: &'a str,
        event_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, sqlx::Error>> {
        Box::pin(async move {
            let row = sqlx::query("SELECT 1 FROM mesh_inbox WHERE consumer = ? AND event_id = ?")
                .bind(consumer)
                .bind(event_id)
                .fetch_optional(pool)
                .await?;
            Ok(row.is_some())
        })
    }

    fn inbox_cleanup(
        pool: &SqlitePool,
        older_than: Duration,
    ) -> BoxFuture<'_, Result<u64, sqlx::Error>> {
        Box::pin(async move {
            let done = sqlx::query("DELETE FROM mesh_inbox WHERE processed_at < ?")
                .bind(now_ms().saturating_sub(ms(older_than)))
                .execute(pool)
                .await?;
            Ok(done.rows_affected())
        })
    }
}
