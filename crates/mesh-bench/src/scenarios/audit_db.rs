//! A direct connection to an audit store's database (SQLite or PostgreSQL), shared by the
//! hand-written baseline logger, the audit scenarios' checks and the size report: a leaf, so
//! none of them imports another for it.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use time::{OffsetDateTime, UtcOffset};

use super::Db;

/// A direct connection to an audit store's database, as the baseline and the bench's checks
/// use it (never through mesh-audit).
#[derive(Debug, Clone)]
pub(crate) enum Database {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl Database {
    /// Connects to the store at `url`, with the pragmas mesh-audit's store uses on SQLite.
    pub(crate) async fn connect(db: Db, url: &str) -> anyhow::Result<Database> {
        Ok(match db {
            Db::Sqlite => {
                let options = SqliteConnectOptions::from_str(url)?
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Full)
                    .busy_timeout(Duration::from_secs(30));
                Database::Sqlite(
                    SqlitePoolOptions::new()
                        .max_connections(1)
                        .connect_with(options)
                        .await?,
                )
            }
            Db::Postgres => {
                Database::Postgres(PgPoolOptions::new().max_connections(2).connect(url).await?)
            }
        })
    }

    /// Event rows stored.
    pub(crate) async fn count_events(&self) -> anyhow::Result<u64> {
        let n: i64 = match self {
            Database::Sqlite(pool) => {
                sqlx::query_scalar("SELECT count(*) FROM events")
                    .fetch_one(pool)
                    .await?
            }
            Database::Postgres(pool) => {
                sqlx::query_scalar("SELECT count(*) FROM events")
                    .fetch_one(pool)
                    .await?
            }
        };
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Events still held that arrived before `before`: on SQLite the rows of `events`; on
    /// PostgreSQL the ids of `event_ids`, which retention removes first (a partition's rows
    /// go only when the whole partition is dropped).
    pub(crate) async fn arrived_before(&self, before: OffsetDateTime) -> anyhow::Result<u64> {
        let before = stored_time(before);
        let n: i64 = match self {
            Database::Sqlite(pool) => {
                sqlx::query_scalar("SELECT count(*) FROM events WHERE received_at < ?")
                    .bind(before)
                    .fetch_one(pool)
                    .await?
            }
            Database::Postgres(pool) => {
                sqlx::query_scalar(
                    "SELECT count(*) FROM event_ids WHERE received_at < $1::timestamptz",
                )
                .bind(before)
                .fetch_one(pool)
                .await?
            }
        };
        Ok(u64::try_from(n).unwrap_or(0))
    }

    pub(crate) async fn close(&self) {
        match self {
            Database::Sqlite(pool) => pool.close().await,
            Database::Postgres(pool) => pool.close().await,
        }
    }
}

/// A time in the form the store keeps (fixed-width UTC, microseconds:
/// `2026-09-03T12:00:00.123456Z`), which PostgreSQL reads as a `timestamptz`.
pub(crate) fn stored_time(time: OffsetDateTime) -> String {
    let t = time.to_offset(UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.microsecond()
    )
}
