//! Retention: removing what arrived before a time, by `received_at` (when the logger stored
//! the row), never by an event's own `x-time` (a publisher must not choose its event's
//! retention). See decision 0022.
//!
//! SQLite removes rows in bounded chunks. PostgreSQL drops whole partitions of `events` (one
//! per UTC day of arrival, created ahead by [`Store::prepare_partitions`]) and removes the
//! rest, and the other tables' rows, in bounded chunks. Each step is short, so a logger runs
//! steps between its batches without stalling ingest.

use mesh_core::Timestamp;
use sqlx::QueryBuilder;
use time::{Duration, OffsetDateTime, Time};
use tracing::info;

use super::sql::{Dialect, POSTGRES, SQLITE};
use super::{Pool, Store};
use crate::convert::{time_from_text, time_to_text};
use crate::error::Error;
use crate::retention::{Prune, Pruned};

/// Days of partitions [`Store::prepare_partitions`] creates at most per call.
const MAX_PARTITION_DAYS: i64 = 3_660;

/// The start of the UTC day holding `time`.
fn day_of(time: OffsetDateTime) -> OffsetDateTime {
    time.to_offset(time::UtcOffset::UTC)
        .replace_time(Time::MIDNIGHT)
}

/// The partition of the UTC day starting at `day`: `events_pYYYYMMDD`.
fn partition_name(day: OffsetDateTime) -> String {
    format!(
        "events_p{:04}{:02}{:02}",
        day.year(),
        u8::from(day.month()),
        day.day()
    )
}

/// The day a partition's name says, for `events_pYYYYMMDD`.
fn partition_day(name: &str) -> Option<OffsetDateTime> {
    let digits = name.strip_prefix("events_p")?;
    if digits.len() != 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let text = format!(
        "{}-{}-{}T00:00:00Z",
        &digits[..4],
        &digits[4..6],
        &digits[6..]
    );
    Timestamp::parse(&text)
        .ok()
        .map(|t| t.as_offset_date_time())
}

/// The text form of a time the store compares with, or an error for one outside its range.
fn text(time: OffsetDateTime) -> Result<String, Error> {
    time_to_text(Timestamp::from(time))
}

impl Store {
    /// Removes everything `prune` names, one bounded step after another (see
    /// [`Store::prune_step`]), and returns the total.
    pub async fn prune(&self, prune: &Prune) -> Result<Pruned, Error> {
        let mut total = Pruned::default();
        loop {
            let step = self.prune_step(prune).await?;
            total.add(&step);
            if step.done {
                info!(
                    events = total.events,
                    conflicts = total.conflicts,
                    dead_letters = total.dead_letters,
                    rollups = total.rollups,
                    partitions = total.partitions_dropped,
                    "audit store pruned"
                );
                return Ok(total);
            }
        }
    }

    /// One bounded step of [`Store::prune`]: at most one partition dropped and one chunk of
    /// rows removed from each table, each in a short transaction of its own. `done` says
    /// whether anything is left. Rows are chosen by arrival (`received_at`), never by the
    /// events' `x-time`; a dead letter not re-driven yet is kept unless
    /// [`Prune::pending_dead_letters`].
    pub async fn prune_step(&self, prune: &Prune) -> Result<Pruned, Error> {
        let chunk = i64::try_from(prune.chunk.max(1)).unwrap_or(i64::MAX);
        let before = time_to_text(prune.before)?;
        let mut step = Pruned::default();
        // Work known to be left whatever the counts say (ids of events still to remove, or
        // a partition dropped, after which another may be droppable).
        let mut more = false;
        let map = |e| Error::database("pruning the audit store", e);
        match &self.pool {
            Pool::Sqlite(pool) => {
                step.events = sqlx::query(
                    "DELETE FROM events WHERE rowid IN \
                     (SELECT rowid FROM events WHERE received_at < ? LIMIT ?)",
                )
                .bind(&before)
                .bind(chunk)
                .execute(pool)
                .await
                .map_err(map)?
                .rows_affected();
            }
            Pool::Postgres(pool) => {
                // The ids first: a redelivery arriving meanwhile is stored again (twice for
                // a moment), never lost (decision 0022).
                let ids = sqlx::query(
                    "DELETE FROM event_ids WHERE id IN \
                     (SELECT id FROM event_ids WHERE received_at < $1::timestamptz LIMIT $2)",
                )
                .bind(&before)
                .bind(chunk)
                .execute(pool)
                .await
                .map_err(map)?
                .rows_affected();
                if ids == chunk as u64 {
                    more = true;
                } else {
                    if let Some((name, rows)) = self.droppable_partition(&before).await? {
                        sqlx::query(&format!("DROP TABLE {name}"))
                            .execute(pool)
                            .await
                            .map_err(map)?;
                        info!(partition = %name, rows, "audit store partition dropped");
                        step.events += rows;
                        step.partitions_dropped += 1;
                        more = true;
                    }
                    // What the partitions left: the day holding the time, the legacy
                    // partition and the default one.
                    step.events += sqlx::query(
                        "DELETE FROM events WHERE (id, received_at) IN \
                         (SELECT id, received_at FROM events \
                          WHERE received_at < $1::timestamptz LIMIT $2)",
                    )
                    .bind(&before)
                    .bind(chunk)
                    .execute(pool)
                    .await
                    .map_err(map)?
                    .rows_affected();
                }
            }
        }
        let pending = if prune.pending_dead_letters {
            ""
        } else {
            " AND redriven_at IS NOT NULL"
        };
        step.conflicts = self
            .delete_chunk("event_conflicts", "id", "received_at", &before, "", chunk)
            .await?;
        step.dead_letters = self
            .delete_chunk("dead_letters", "id", "received_at", &before, pending, chunk)
            .await?;
        if let Some(rollups_before) = prune.rollups_before {
            let rollups_before = time_to_text(rollups_before)?;
            step.rollups = self
                .delete_chunk(
                    "event_rollups",
                    "(minute, routing_key, source)",
                    "minute",
                    &rollups_before,
                    "",
                    chunk,
                )
                .await?;
        }
        let full = chunk as u64;
        step.done = !more
            && step.events < full
            && step.conflicts < full
            && step.dead_letters < full
            && step.rollups < full;
        Ok(step)
    }

    /// Deletes at most `chunk` rows of `table` whose `column` is before `before` (and `and`).
    async fn delete_chunk(
        &self,
        table: &str,
        key: &str,
        column: &str,
        before: &str,
        and: &str,
        chunk: i64,
    ) -> Result<u64, Error> {
        let done = with_pool!(self, |pool, d| {
            let mut qb = QueryBuilder::new(format!(
                "DELETE FROM {table} WHERE {key} IN (SELECT {key} FROM {table} WHERE {column} < "
            ));
            qb.push_bind(before).push(d.time);
            qb.push(format!("{and} LIMIT "));
            qb.push_bind(chunk);
            qb.push(")");
            qb.build()
                .execute(pool)
                .await
                .map_err(|e| Error::database(format!("pruning `{table}`"), e))?
                .rows_affected()
        });
        Ok(done)
    }

    /// A partition of `events` holding no arrival at or after `before`, with its rows:
    /// a day's partition ending by then, or the legacy one when it holds nothing later.
    async fn droppable_partition(&self, before: &str) -> Result<Option<(String, u64)>, Error> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(None);
        };
        let map = |e| Error::database("listing the partitions of `events`", e);
        let names: Vec<String> = sqlx::query_scalar(
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
             WHERE i.inhparent = 'events'::regclass ORDER BY c.relname",
        )
        .fetch_all(pool)
        .await
        .map_err(map)?;
        let before_time = time_from_text(before)?.as_offset_date_time();
        for name in names {
            let droppable = match partition_day(&name) {
                Some(day) => day + Duration::days(1) <= before_time,
                None if name == "events_legacy" => {
                    let later: bool = sqlx::query_scalar(
                        "SELECT EXISTS (SELECT 1 FROM events_legacy \
                         WHERE received_at >= $1::timestamptz)",
                    )
                    .bind(before)
                    .fetch_one(pool)
                    .await
                    .map_err(map)?;
                    !later
                }
                None => false,
            };
            if droppable {
                let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {name}"))
                    .fetch_one(pool)
                    .await
                    .map_err(map)?;
                return Ok(Some((name, u64::try_from(rows).unwrap_or(0))));
            }
        }
        Ok(None)
    }

    /// What [`Store::prune`] would remove now, changing nothing (`--dry-run`). Partitions are
    /// not counted apart: their rows are in `events`.
    pub async fn prune_preview(&self, prune: &Prune) -> Result<Pruned, Error> {
        let before = time_to_text(prune.before)?;
        let pending = if prune.pending_dead_letters {
            ""
        } else {
            " AND redriven_at IS NOT NULL"
        };
        let rollups_before = prune.rollups_before.map(time_to_text).transpose()?;
        let count =
            |table: &'static str, column: &'static str, bound: String, and: &'static str| {
                let store = self.clone();
                async move {
                    let n: i64 = with_pool!(store, |pool, d| {
                        let mut qb = QueryBuilder::new(format!(
                            "SELECT count(*) FROM {table} WHERE {column} < "
                        ));
                        qb.push_bind(bound).push(d.time).push(and);
                        qb.build_query_scalar()
                            .fetch_one(pool)
                            .await
                            .map_err(|e| Error::database(format!("counting `{table}`"), e))?
                    });
                    Ok::<u64, Error>(u64::try_from(n).unwrap_or(0))
                }
            };
        Ok(Pruned {
            events: count("events", "received_at", before.clone(), "").await?,
            conflicts: count("event_conflicts", "received_at", before.clone(), "").await?,
            dead_letters: count("dead_letters", "received_at", before, pending).await?,
            rollups: match rollups_before {
                Some(bound) => count("event_rollups", "minute", bound, "").await?,
                None => 0,
            },
            partitions_dropped: 0,
            done: false,
        })
    }

    /// When the oldest stored event arrived (its `received_at`), `None` when there is none.
    pub async fn oldest_arrival(&self) -> Result<Option<Timestamp>, Error> {
        let map = |e| Error::database("reading the oldest arrival", e);
        let oldest: Option<String> = match &self.pool {
            Pool::Sqlite(pool) => sqlx::query_scalar("SELECT min(received_at) FROM events")
                .fetch_one(pool)
                .await
                .map_err(map)?,
            Pool::Postgres(pool) => sqlx::query_scalar(
                "SELECT to_char(min(received_at) AT TIME ZONE 'UTC',                  'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') FROM events",
            )
            .fetch_one(pool)
            .await
            .map_err(map)?,
        };
        oldest.as_deref().map(time_from_text).transpose()
    }

    /// [`Store::prepare_partitions`] for yesterday to two days ahead: what a store opened
    /// for writing, and a logger retaining, keep ready.
    pub(crate) async fn prepare_partitions_ahead(&self) -> Result<u64, Error> {
        let now = OffsetDateTime::now_utc();
        self.prepare_partitions(
            Timestamp::from(now - Duration::days(1)),
            Timestamp::from(now + Duration::days(2)),
        )
        .await
    }

    /// Creates ahead the partitions of `events` (PostgreSQL) for the UTC days from the one
    /// holding `from` to the one holding `until` (at most 3,660 days), each
    /// `events_pYYYYMMDD`; a day a partition holds already (a day's or the legacy one), or
    /// whose rows the default partition holds, is left as it is. Returns how many were
    /// created; nothing to do on SQLite.
    pub async fn prepare_partitions(
        &self,
        from: Timestamp,
        until: Timestamp,
    ) -> Result<u64, Error> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(0);
        };
        let first = day_of(from.as_offset_date_time());
        let last = day_of(until.as_offset_date_time());
        let days = (last - first)
            .whole_days()
            .clamp(-1, MAX_PARTITION_DAYS - 1);
        let mut created = 0;
        for n in 0..=days {
            let day = first + Duration::days(n);
            let (lower, upper) = (text(day)?, text(day + Duration::days(1))?);
            let name = partition_name(day);
            let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
                .bind(&name)
                .fetch_one(pool)
                .await
                .map_err(|e| Error::database("preparing partitions", e))?;
            if exists {
                continue;
            }
            let statement = format!(
                "CREATE TABLE {name} PARTITION OF events FOR VALUES FROM ('{lower}') TO ('{upper}')"
            );
            match sqlx::query(&statement).execute(pool).await {
                Ok(_) => created += 1,
                // Another partition holds (part of) the day: the legacy one, or the default
                // one holding rows of it; or another process created it meanwhile.
                Err(sqlx::Error::Database(e))
                    if matches!(e.code().as_deref(), Some("42P17" | "23514" | "42P07")) => {}
                Err(e) => return Err(Error::database("preparing partitions", e)),
            }
        }
        Ok(created)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_names_round_trip() {
        let day = Timestamp::parse("2026-12-07T13:14:15Z")
            .expect("a time")
            .as_offset_date_time();
        let name = partition_name(day_of(day));
        assert_eq!(name, "events_p20261207");
        assert_eq!(partition_day(&name), Some(day_of(day)));
        for other in [
            "events_legacy",
            "events_default",
            "events_p2026120",
            "events_p2026x207",
        ] {
            assert_eq!(partition_day(other), None, "{other}");
        }
    }
}
