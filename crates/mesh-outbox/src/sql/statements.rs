//! The statements, each written once: [`Sql`] for both backends, where a [`Dialect`] says
//! what differs (names, casts, whose clock) and [`SeqSet`] how a set of seqs is bound.

use std::time::Duration;

use futures::future::BoxFuture;
use sqlx::{Executor, Pool, Postgres, QueryBuilder, Sqlite};

use super::dialect::{
    now_ms, push_age_seconds, push_now, push_shifted, Dialect, SeqSet, POSTGRES,
    ROWS_PER_STATEMENT, SQLITE,
};
use super::rows::{NewRow, StoredRow};
use super::{Counts, Sql};
use crate::error::{Error, ErrorKind};
use crate::row::MessageColumns;

/// The select list of a fetched row, in [`StoredTuple`]'s order.
const SELECT_COLUMNS: &str =
    "seq, routing_key, content_type, message_id, amqp_timestamp, persistent, headers, body";

/// A fetched row: its seq, then its message's columns.
type StoredTuple = (
    i64,
    String,
    Option<String>,
    Option<String>,
    Option<i64>,
    bool,
    String,
    Vec<u8>,
);

fn stored_row(
    (seq, routing_key, content_type, message_id, amqp_timestamp, persistent, headers, body): StoredTuple,
) -> StoredRow {
    StoredRow {
        seq,
        columns: MessageColumns {
            routing_key,
            content_type,
            message_id,
            amqp_timestamp,
            persistent,
            headers,
            body,
        },
    }
}

/// The last version of a list in order.
fn latest(versions: &[(i64, &str)]) -> i64 {
    match versions.last() {
        Some((version, _)) => *version,
        None => 0,
    }
}

/// The bytes a spool counts for its unsent rows on SQLite: the sum of
/// `MessageColumns::stored_size` (routing key and headers in bytes, not characters).
pub(crate) fn sqlite_pending_bytes() -> String {
    format!(
        "SELECT coalesce(sum(length(CAST(routing_key AS BLOB)) + length(CAST(headers AS BLOB)) \
         + length(body) + {}), 0) FROM {} WHERE sent_at IS NULL",
        crate::row::ROW_OVERHEAD,
        SQLITE.outbox,
    )
}

/// Implements [`Sql`] for `$db` in `$dialect`: the bodies are compiled once per backend, so
/// each gets its own placeholders (`?` or `$n`) and types.
macro_rules! impl_sql {
    ($db:ty, $dialect:expr) => {
        impl Sql for $db {
            fn install(pool: &Pool<Self>) -> BoxFuture<'_, Result<(), Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    let failed = |e| Error::database(d.installing, e);
                    let known = latest(d.schema_versions);
                    let mut tx = match d.install_begin {
                        Some(begin) => pool.begin_with(begin).await,
                        None => pool.begin().await,
                    }
                    .map_err(failed)?;
                    if let Some(lock) = d.install_lock {
                        QueryBuilder::<Self>::new("SELECT pg_advisory_xact_lock(")
                            .push_bind(lock)
                            .push(")")
                            .build()
                            .execute(&mut *tx)
                            .await
                            .map_err(failed)?;
                    }
                    (&mut *tx)
                        .execute(d.install_prelude)
                        .await
                        .map_err(failed)?;
                    let current: i64 = sqlx::query_scalar(&format!(
                        "SELECT coalesce(max(version), 0) FROM {}",
                        d.versions
                    ))
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(failed)?;
                    if current > known {
                        return Err(Error::new(ErrorKind::SchemaTooNew {
                            found: current,
                            known,
                        }));
                    }
                    for (version, statements) in
                        d.schema_versions.iter().filter(|(v, _)| *v > current)
                    {
                        (&mut *tx).execute(*statements).await.map_err(failed)?;
                        let mut qb = QueryBuilder::<Self>::new(format!(
                            "INSERT INTO {} (version{}) VALUES (",
                            d.versions,
                            if d.clock.stamps() { ", applied_at" } else { "" },
                        ));
                        qb.push_bind(*version);
                        if d.clock.stamps() {
                            qb.push(", ").push_bind(now_ms());
                        }
                        qb.push(") ON CONFLICT DO NOTHING");
                        qb.build().execute(&mut *tx).await.map_err(failed)?;
                    }
                    tx.commit().await.map_err(failed)
                })
            }

            fn installed(pool: &Pool<Self>) -> BoxFuture<'_, Result<Option<i64>, Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    let failed = |e| Error::database("reading the outbox schema's version", e);
                    let exists: bool = sqlx::query_scalar(d.versions_exist)
                        .fetch_one(pool)
                        .await
                        .map_err(failed)?;
                    if !exists {
                        return Ok(None);
                    }
                    let current: Option<i64> =
                        sqlx::query_scalar(&format!("SELECT max(version) FROM {}", d.versions))
                            .fetch_one(pool)
                            .await
                            .map_err(failed)?;
                    let known = latest(d.schema_versions);
                    match current {
                        Some(found) if found > known => {
                            Err(Error::new(ErrorKind::SchemaTooNew { found, known }))
                        }
                        current => Ok(current),
                    }
                })
            }

            fn insert<'a>(
                conn: &'a mut Self::Connection,
                rows: &'a [NewRow],
            ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    let now = now_ms();
                    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                        let mut qb = QueryBuilder::<Self>::new(format!(
                            "INSERT INTO {} (source, event_id, routing_key, content_type, \
                             message_id, amqp_timestamp, persistent, headers, body{}) ",
                            d.outbox,
                            if d.clock.stamps() { ", created_at" } else { "" },
                        ));
                        qb.push_values(chunk, |mut b, row| {
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
                            if d.clock.stamps() {
                                b.push_bind(now);
                            }
                        });
                        qb.build().execute(&mut *conn).await?;
                    }
                    Ok(())
                })
            }

            fn acquire_lease<'a>(
                pool: &'a Pool<Self>,
                source: &'a str,
                owner: &'a str,
                ttl: Duration,
            ) -> BoxFuture<'a, Result<bool, sqlx::Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    // On PostgreSQL the database's clock, the one every relay of this
                    // database shares.
                    let now = now_ms();
                    let mut qb = QueryBuilder::<Self>::new(format!(
                        "INSERT INTO {} AS l (source, owner, expires_at) VALUES (",
                        d.leases
                    ));
                    qb.push_bind(source).push(", ").push_bind(owner).push(", ");
                    push_shifted(&mut qb, d, now, ttl, true);
                    qb.push(
                        ") ON CONFLICT (source) DO UPDATE \
                         SET owner = excluded.owner, expires_at = excluded.expires_at \
                         WHERE l.owner = excluded.owner OR l.expires_at < ",
                    );
                    push_now(&mut qb, d, now);
                    qb.push(" RETURNING owner");
                    let row = qb.build().fetch_optional(pool).await?;
                    Ok(row.is_some())
                })
            }

            fn release_lease<'a>(
                pool: &'a Pool<Self>,
                source: &'a str,
                owner: &'a str,
            ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    let mut qb = QueryBuilder::<Self>::new(format!(
                        "DELETE FROM {} WHERE source = ",
                        d.leases
                    ));
                    qb.push_bind(source).push(" AND owner = ").push_bind(owner);
                    qb.build().execute(pool).await?;
                    Ok(())
                })
            }

            fn fetch<'a>(
                pool: &'a Pool<Self>,
                source: &'a str,
                limit: i64,
                skip: &'a [i64],
            ) -> BoxFuture<'a, Result<Vec<StoredRow>, sqlx::Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    let mut qb = QueryBuilder::<Self>::new(format!(
                        "SELECT {SELECT_COLUMNS} FROM {} WHERE source = ",
                        d.outbox
                    ));
                    qb.push_bind(source).push(" AND sent_at IS NULL AND seq");
                    <Self as SeqSet>::push_seqs(&mut qb, false, skip)?;
                    qb.push(" ORDER BY seq LIMIT ").push_bind(limit);
                    let rows: Vec<StoredTuple> = qb.build_query_as().fetch_all(pool).await?;
                    Ok(rows.into_iter().map(stored_row).collect())
                })
            }

            fn mark_sent<'a>(
                pool: &'a Pool<Self>,
                seqs: &'a [i64],
                error: Option<&'a str>,
            ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    let mut qb =
                        QueryBuilder::<Self>::new(format!("UPDATE {} SET sent_at = ", d.outbox));
                    push_now(&mut qb, d, now_ms());
                    qb.push(", error = ").push_bind(error).push(" WHERE seq");
                    <Self as SeqSet>::push_seqs(&mut qb, true, seqs)?;
                    qb.build().execute(pool).await?;
                    Ok(())
                })
            }

            fn cleanup(
                pool: &Pool<Self>,
                older_than: Duration,
                limit: i64,
            ) -> BoxFuture<'_, Result<u64, sqlx::Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    let mut qb = QueryBuilder::<Self>::new(format!(
                        "DELETE FROM {0} WHERE seq IN (SELECT seq FROM {0} \
                         WHERE sent_at IS NOT NULL AND sent_at < ",
                        d.outbox
                    ));
                    push_shifted(&mut qb, d, now_ms(), older_than, false);
                    qb.push(" LIMIT ").push_bind(limit).push(")");
                    Ok(qb.build().execute(pool).await?.rows_affected())
                })
            }

            fn counts(pool: &Pool<Self>) -> BoxFuture<'_, Result<Counts, sqlx::Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    let mut qb = QueryBuilder::<Self>::new(
                        "SELECT count(*) FILTER (WHERE sent_at IS NULL), \
                         count(*) FILTER (WHERE sent_at IS NOT NULL), coalesce(",
                    );
                    push_age_seconds(
                        &mut qb,
                        d,
                        now_ms(),
                        "min(created_at) FILTER (WHERE sent_at IS NULL)",
                    );
                    qb.push(format!(", 0.0){} FROM {}", d.float, d.outbox));
                    let (pending, sent, oldest): (i64, i64, f64) =
                        qb.build_query_as().fetch_one(pool).await?;
                    Ok(Counts {
                        pending: u64::try_from(pending).unwrap_or(0),
                        sent: u64::try_from(sent).unwrap_or(0),
                        oldest_pending_seconds: oldest.max(0.0),
                        scheduled: <Self as super::Scheduling>::count_scheduled(pool).await?,
                    })
                })
            }

            fn inbox_insert<'a>(
                conn: &'a mut Self::Connection,
                consumer: &'a str,
                event_id: &'a str,
            ) -> BoxFuture<'a, Result<bool, sqlx::Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    // A concurrent transaction inserting the same id makes this wait for its
                    // outcome: exactly one of them records it.
                    let mut qb = QueryBuilder::<Self>::new(format!(
                        "INSERT INTO {} (consumer, event_id{}) VALUES (",
                        d.inbox,
                        if d.clock.stamps() {
                            ", processed_at"
                        } else {
                            ""
                        },
                    ));
                    qb.push_bind(consumer)
                        .push(", ")
                        .push_bind(event_id)
                        .push(d.uuid);
                    if d.clock.stamps() {
                        qb.push(", ").push_bind(now_ms());
                    }
                    qb.push(") ON CONFLICT DO NOTHING");
                    let done = qb.build().execute(conn).await?;
                    Ok(done.rows_affected() == 1)
                })
            }

            fn inbox_delete<'a>(
                pool: &'a Pool<Self>,
                consumer: &'a str,
                event_id: &'a str,
            ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    let mut qb = QueryBuilder::<Self>::new(format!(
                        "DELETE FROM {} WHERE consumer = ",
                        d.inbox
                    ));
                    qb.push_bind(consumer)
                        .push(" AND event_id = ")
                        .push_bind(event_id)
                        .push(d.uuid);
                    qb.build().execute(pool).await?;
                    Ok(())
                })
            }

            fn inbox_contains<'a>(
                pool: &'a Pool<Self>,
                consumer: &'a str,
                event_id: &'a str,
            ) -> BoxFuture<'a, Result<bool, sqlx::Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    let mut qb = QueryBuilder::<Self>::new(format!(
                        "SELECT 1 FROM {} WHERE consumer = ",
                        d.inbox
                    ));
                    qb.push_bind(consumer)
                        .push(" AND event_id = ")
                        .push_bind(event_id)
                        .push(d.uuid);
                    let row = qb.build().fetch_optional(pool).await?;
                    Ok(row.is_some())
                })
            }

            fn inbox_cleanup(
                pool: &Pool<Self>,
                older_than: Duration,
            ) -> BoxFuture<'_, Result<u64, sqlx::Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    let mut qb = QueryBuilder::<Self>::new(format!(
                        "DELETE FROM {} WHERE processed_at < ",
                        d.inbox
                    ));
                    push_shifted(&mut qb, d, now_ms(), older_than, false);
                    Ok(qb.build().execute(pool).await?.rows_affected())
                })
            }
        }
    };
}

impl_sql!(Postgres, POSTGRES);
impl_sql!(Sqlite, SQLITE);
